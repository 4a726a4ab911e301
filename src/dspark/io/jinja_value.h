// Values of the Jinja2 subset that renders chat templates (see chat_template.h), with Python
// semantics: what `str()`, `repr()`, `==`, `<`, truthiness, `len()` and transformers' `tojson`
// (json.dumps(ensure_ascii=False)) do to them. Strings are UTF-8; lengths, indices and slices
// count code points like Python's str. Lists and dicts are immutable (the sandbox transformers
// uses forbids mutating them) and shared on copy; namespaces are the one mutable object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace dspark::jinja {

// Chat-template inputs keep the key order of the request (Python dicts do), so we read them as
// ordered_json.
using Json = nlohmann::ordered_json;

class Value;
struct DictData;
struct Callable;
using ListPtr = std::shared_ptr<const std::vector<Value>>;
using DictPtr = std::shared_ptr<const DictData>;
using NamespacePtr = std::shared_ptr<DictData>;
using CallablePtr = std::shared_ptr<const Callable>;

enum class Kind : uint8_t {
  undefined,
  none,
  boolean,
  integer,
  floating,
  string,
  list,  // also tuples (is_tuple())
  dict,
  ns,  // namespace(): the only mutable object
  callable,
};

// jinja2's Undefined: renders as "", is falsy and iterates as empty; most other operations on it
// fail with `hint` ("'x' is undefined", "'dict object' has no attribute 'y'").
struct Undefined {
  std::string hint;
};

class Value {
 public:
  Value() = default;
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int64_t i) : v_(i) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(std::string_view s) : v_(std::string(s)) {}
  Value(const char* s) : v_(std::string(s)) {}

  static Value undefined(std::string hint);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(DictData data);
  static Value ns(NamespacePtr data);
  static Value callable(std::string name, std::function<Value(struct CallArgs&)> fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_bool() const { return kind() == Kind::boolean; }
  bool is_int() const { return kind() == Kind::integer; }
  bool is_float() const { return kind() == Kind::floating; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::string; }
  bool is_list() const { return kind() == Kind::list; }
  bool is_tuple() const { return is_list() && tuple_; }
  bool is_dict() const { return kind() == Kind::dict; }
  bool is_ns() const { return kind() == Kind::ns; }
  bool is_callable() const { return kind() == Kind::callable; }

  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? int64_t{as_bool()} : std::get<int64_t>(v_); }
  double as_float() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const std::vector<Value>& as_list() const { return *std::get<ListPtr>(v_); }
  const DictData& as_dict() const { return *std::get<DictPtr>(v_); }
  DictData& as_ns() const { return *std::get<NamespacePtr>(v_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(v_); }

 private:
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, ListPtr, DictPtr,
               NamespacePtr, CallablePtr>
      v_;
  bool tuple_ = false;
};

// An insertion-ordered mapping (Python dict); keys compare with Python ==.
struct DictData {
  std::vector<std::pair<Value, Value>> items;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);  // replaces in place or appends
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

// ---- Python semantics -------------------------------------------------------------------------
bool truthy(const Value& v);
std::string to_str(const Value& v);     // str(v); Undefined -> ""
std::string repr(const Value& v);       // repr(v)
std::string type_name(const Value& v);  // "str", "int", "dict", ... as Python names them
bool equal(const Value& a, const Value& b);
// <0, 0, >0 like Python's ordering of a and b; invalid_input for unorderable types.
int compare(const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // `item in container`
int64_t length(const Value& v);  // len(v); invalid_input when v has no length
// The items a `for` loop (or list()) sees: list items, dict keys, string characters; Undefined
// gives none. invalid_input for anything else.
std::vector<Value> iterate(const Value& v);

// transformers' tojson: json.dumps(v, ensure_ascii=False, indent=indent, separators=...,
// sort_keys=sort_keys). Default separators are (", ", ": ") without indent, (",", ": ") with it.
struct JsonFormat {
  std::optional<std::string> indent;  // json.dumps(indent=N) == N spaces
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string to_json_text(const Value& v, const JsonFormat& format = {});

Value from_json(const Json& j);

// Python's repr of a float (shortest round-trip digits, exponent form outside [1e-4, 1e16)).
std::string format_float(double d);

// ---- UTF-8 text as Python sees it -------------------------------------------------------------
std::u32string to_code_points(std::string_view s);  // invalid bytes -> U+FFFD
std::string from_code_points(std::u32string_view cps);
bool is_space(char32_t cp);  // str.isspace()
int64_t code_point_count(std::string_view s);

}  // namespace dspark::jinja
