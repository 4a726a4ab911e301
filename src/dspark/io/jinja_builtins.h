// What the evaluator (jinja_eval.cpp) calls on values: attribute and item access with
// jinja2's sandbox rules (dict keys and str/dict/list methods), Python operators, the filters,
// tests and global functions transformers' chat-template environment offers. Errors the template
// itself causes (undefined values misused, type errors) are ErrorKind::invalid_input; Python or
// Jinja features we do not implement are ErrorKind::unsupported, naming them.
#pragma once

#include <ctime>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "dspark/io/jinja_value.h"

namespace dspark::jinja {

// Thrown by raise_exception(message); ChatTemplate::render turns it into invalid_input.
struct RaisedByTemplate {
  std::string message;
};

// Fails (invalid_input) with the reason an Undefined value cannot be used.
[[noreturn]] void fail_undefined(const Value& v);
// Fails (invalid_input) with `message`: a Python TypeError of the template.
[[noreturn]] void type_error(std::string message);

// `obj.name`: methods of str/dict/list (bound), dict keys, namespace attributes; Undefined with a
// hint when absent. `obj[key]`: list/str index, dict key, else an attribute of that name.
Value get_attribute(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python operators: + - * / // % ** and unary - +.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_op(std::string_view op, const Value& a);
// `format % args` (printf-style: %s %r %d %i %f %e %g %x %o %c %%, flags, width, precision).
std::string percent_format(const std::string& format, const Value& args);

// Python str case mappings (non-ASCII through the C.UTF-8 locale's simple case mapping).
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
// str.strip / lstrip / rstrip with Python's argument (None: whitespace).
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);

Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);

// Global functions: range, namespace, dict, raise_exception, strftime_now. `now`: the wall clock
// strftime_now formats (local time) unless pinned.
struct GlobalOptions {
  std::optional<std::tm> now;
};
// Undefined when `name` is not a global.
Value global_value(const std::string& name, const GlobalOptions& options);

// Reads a call's positional and keyword arguments against a Python-style signature, e.g.
// Params p(args, "tojson", {"indent", "separators", "sort_keys"}); invalid_input on unknown or
// duplicate arguments.
class Params {
 public:
  Params(const CallArgs& args, std::string_view function,
         std::initializer_list<std::string_view> names);
  bool has(size_t i) const { return values_[i] != nullptr; }
  const Value& get(size_t i) const;  // Undefined when not given
  Value get_or(size_t i, Value fallback) const { return has(i) ? *values_[i] : fallback; }

 private:
  std::vector<const Value*> values_;
  Value missing_;
};

}  // namespace dspark::jinja
