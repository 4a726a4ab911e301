// Attribute/item access and the str/dict/list methods templates call.
#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cmath>

#include "dspark/core/error.h"
#include "dspark/io/jinja_builtins.h"
#include "dspark/io/utf8.h"

namespace dspark::jinja {
namespace {

constexpr std::string_view kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};
constexpr std::string_view kDictMethods[] = {"clear",      "copy",   "fromkeys", "get",
                                             "items",      "keys",   "pop",      "popitem",
                                             "setdefault", "update", "values"};
constexpr std::string_view kListMethods[] = {"append", "clear",   "copy",   "count",
                                             "extend", "index",   "insert", "pop",
                                             "remove", "reverse", "sort"};
constexpr std::string_view kMutators[] = {"append",     "clear",   "extend", "insert",
                                          "pop",        "popitem", "remove", "reverse",
                                          "setdefault", "sort",    "update"};

template <size_t N>
bool in(const std::string_view (&list)[N], std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), loc)) : c;
}
char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  locale_t loc = utf8_locale();
  return loc ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), loc)) : c;
}
bool is_upper(char32_t c) {
  return to_lower(c) != c;
}
bool is_lower(char32_t c) {
  return to_upper(c) != c;
}
bool is_cased(char32_t c) {
  return is_upper(c) || is_lower(c);
}
bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  locale_t loc = utf8_locale();
  return loc && iswalpha_l(static_cast<wint_t>(c), loc);
}
bool is_digit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  locale_t loc = utf8_locale();
  return loc && iswdigit_l(static_cast<wint_t>(c), loc);
}

std::string map_chars(std::string_view s, char32_t (*f)(char32_t)) {
  std::u32string cps = to_code_points(s);
  for (auto& c : cps) c = f(c);
  return from_code_points(cps);
}

const std::string& need_string(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) type_error(fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.as_string();
}

int64_t need_int(const Value& v, std::string_view what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) {
    type_error(fmt::format("{} must be an integer, not {}", what, type_name(v)));
  }
  return v.as_int();
}

// Code-point index of byte offset `pos` in s.
int64_t cp_index(std::string_view s, size_t pos) {
  return code_point_count(s.substr(0, pos));
}

std::vector<Value> split_whitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::u32string cps = to_code_points(s);
  std::vector<std::u32string> parts;
  if (!from_right) {
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && is_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(cps.substr(i));
        break;
      }
      size_t j = i;
      while (j < n && !is_space(cps[j])) ++j;
      parts.push_back(cps.substr(i, j - i));
      i = j;
    }
  } else {
    size_t end = cps.size();
    while (true) {
      while (end > 0 && is_space(cps[end - 1])) --end;
      if (end == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(cps.substr(0, end));
        break;
      }
      size_t j = end;
      while (j > 0 && !is_space(cps[j - 1])) --j;
      parts.push_back(cps.substr(j, end - j));
      end = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(from_code_points(p));
  return out;
}

std::vector<Value> split_sep(const std::string& s, const std::string& sep, int64_t maxsplit,
                             bool from_right) {
  if (sep.empty()) type_error("ValueError: empty separator");
  std::vector<Value> out;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t at = s.find(sep, start);
      if (at == std::string::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep.size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t end = s.size();
  int64_t n = 0;
  std::vector<Value> rev;
  while ((maxsplit < 0 || n < maxsplit) && end >= sep.size()) {
    size_t at = s.rfind(sep, end - sep.size());
    if (at == std::string::npos) break;
    rev.emplace_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
    ++n;
  }
  rev.emplace_back(s.substr(0, end));
  out.assign(rev.rbegin(), rev.rend());
  return out;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

Value str_method(const std::string& s, const std::string& name, CallArgs& args) {
  auto prefixes = [&](const Value& v) {
    std::vector<std::string> out;
    if (v.is_list() && v.is_tuple()) {
      for (const auto& x : v.as_list()) out.push_back(need_string(x, name + "() argument"));
    } else {
      out.push_back(need_string(v, name + "() argument"));
    }
    return out;
  };
  if (name == "startswith" || name == "endswith") {
    Params p(args, name, {"prefix"});
    for (const auto& x : prefixes(p.get(0))) {
      bool hit = name == "startswith"
                     ? s.compare(0, x.size(), x) == 0
                     : (s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(args, name, {"chars"});
    return Value(py_strip(s, p.get_or(0, Value(nullptr)), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Params p(args, name, {"sep", "maxsplit"});
    Value sep = p.get_or(0, Value(nullptr));
    int64_t maxsplit = need_int(p.get_or(1, Value(-1)), "maxsplit");
    bool right = name == "rsplit";
    if (sep.is_none()) return Value::list(split_whitespace(s, maxsplit, right));
    return Value::list(split_sep(s, need_string(sep, "sep"), maxsplit, right));
  }
  if (name == "splitlines") {
    Params p(args, name, {"keepends"});
    bool keep = truthy(p.get_or(0, Value(false)));
    std::u32string cps = to_code_points(s);
    std::vector<Value> out;
    size_t start = 0, i = 0;
    while (i < cps.size()) {
      if (!is_line_break(cps[i])) {
        ++i;
        continue;
      }
      size_t eol = i + ((cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1);
      out.emplace_back(from_code_points(cps.substr(start, (keep ? eol : i) - start)));
      start = i = eol;
    }
    if (start < cps.size()) out.emplace_back(from_code_points(cps.substr(start)));
    return Value::list(std::move(out));
  }
  if (name == "replace") {
    Params p(args, name, {"old", "new", "count"});
    const std::string& old_s = need_string(p.get(0), "replace() argument 1");
    const std::string& new_s = need_string(p.get(1), "replace() argument 2");
    int64_t count = need_int(p.get_or(2, Value(-1)), "count");
    std::string out;
    if (old_s.empty()) {
      std::u32string cps = to_code_points(s);
      int64_t n = 0;
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (count < 0 || n < count) {
          out += new_s;
          ++n;
        }
        if (i < cps.size()) utf8::append(out, cps[i]);
      }
      return Value(std::move(out));
    }
    size_t start = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
      size_t at = s.find(old_s, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += new_s;
      start = at + old_s.size();
      ++n;
    }
    out.append(s, start, std::string::npos);
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(args, name, {"sub"});
    const std::string& sub = need_string(p.get(0), name + "() argument");
    if (name == "count") {
      if (sub.empty()) return Value(code_point_count(s) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    size_t at = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") type_error("ValueError: substring not found");
      return Value(-1);
    }
    return Value(cp_index(s, at));
  }
  if (name == "join") {
    Params p(args, name, {"iterable"});
    std::string out;
    size_t i = 0;
    for (const auto& item : iterate(p.get(0))) {
      if (!item.is_string()) {
        type_error(
            fmt::format("sequence item {}: expected str instance, {} found", i, type_name(item)));
      }
      if (i++ > 0) out += s;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    Params p(args, name, {"sep"});
    const std::string& sep = need_string(p.get(0), "sep");
    if (sep.empty()) type_error("ValueError: empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      return name == "partition" ? Value::list({Value(s), Value(""), Value("")}, true)
                                 : Value::list({Value(""), Value(""), Value(s)}, true);
    }
    return Value::list({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))},
                       true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(args, name, {"affix"});
    const std::string& x = need_string(p.get(0), name + "() argument");
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value(s.substr(0, s.size() - x.size()));
    }
    return Value(s);
  }
  constexpr std::string_view kNoArgument[] = {"upper",     "lower",   "title",   "capitalize",
                                              "isspace",   "isalpha", "isdigit", "isdecimal",
                                              "isnumeric", "isalnum", "isupper", "islower"};
  if (!in(kNoArgument, name)) {
    DSPARK_FAIL(unsupported, "the string method '{}' is not supported in chat templates", name);
  }
  Params none(args, name, {});
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  auto all_of = [&](bool (*pred)(char32_t)) {
    std::u32string cps = to_code_points(s);
    return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
  };
  if (name == "isspace") return all_of(is_space);
  if (name == "isalpha") return all_of(is_alpha);
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return all_of(is_digit);
  if (name == "isalnum") return all_of([](char32_t c) { return is_alpha(c) || is_digit(c); });
  if (name == "isupper" || name == "islower") {
    std::u32string cps = to_code_points(s);
    bool any_cased = false;
    for (char32_t c : cps) {
      if (name == "isupper" ? is_lower(c) : is_upper(c)) return Value(false);
      any_cased = any_cased || is_cased(c);
    }
    return Value(any_cased);
  }
  DSPARK_FAIL(unsupported, "the string method '{}' is not supported in chat templates", name);
}

Value dict_method(const Value& d, const std::string& name, CallArgs& args) {
  if (name == "get") {
    Params p(args, "get", {"key", "default"});
    const Value* v = d.as_dict().find(p.get(0));
    return v ? *v : p.get_or(1, Value(nullptr));
  }
  Params none(args, name, {});
  if (name == "copy") return d;
  std::vector<Value> out;
  for (const auto& [k, v] : d.as_dict().items) {
    if (name == "items")
      out.push_back(Value::list({k, v}, true));
    else if (name == "keys")
      out.push_back(k);
    else if (name == "values")
      out.push_back(v);
    else
      DSPARK_FAIL(unsupported, "the dict method '{}' is not supported in chat templates", name);
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& l, const std::string& name, CallArgs& args) {
  if (name == "copy") {
    Params none(args, name, {});
    return l;
  }
  Params p(args, name, {"value"});
  const auto& items = l.as_list();
  if (name == "count") {
    return Value(static_cast<int64_t>(std::count_if(
        items.begin(), items.end(), [&](const Value& x) { return equal(x, p.get(0)); })));
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (equal(items[i], p.get(0))) return Value(static_cast<int64_t>(i));
  type_error(fmt::format("ValueError: {} is not in list", repr(p.get(0))));
}

std::string object_desc(const Value& obj) {
  if (obj.is_none()) return "None";
  if (obj.is_ns()) return "Namespace object";
  return type_name(obj) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_desc(obj), name));
}

}  // namespace

[[noreturn]] void type_error(std::string message) {
  DSPARK_FAIL(invalid_input, "{}", message);
}

[[noreturn]] void fail_undefined(const Value& v) {
  DSPARK_FAIL(invalid_input, "{}",
              v.is_undefined() ? v.undefined_hint() : std::string("value is undefined"));
}

Params::Params(const CallArgs& args, std::string_view function,
               std::initializer_list<std::string_view> names)
    : values_(names.size(), nullptr) {
  if (args.positional.size() > names.size()) {
    DSPARK_FAIL(invalid_input, "{}() takes at most {} argument(s) ({} given)", function,
                names.size(), args.positional.size());
  }
  for (size_t i = 0; i < args.positional.size(); ++i) values_[i] = &args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      DSPARK_FAIL(invalid_input, "{}() got an unexpected keyword argument '{}'", function, key);
    }
    size_t i = static_cast<size_t>(it - names.begin());
    if (values_[i]) {
      DSPARK_FAIL(invalid_input, "{}() got multiple values for argument '{}'", function, key);
    }
    values_[i] = &value;
  }
}

const Value& Params::get(size_t i) const {
  return values_[i] ? *values_[i] : missing_;
}

std::string py_upper(std::string_view s) {
  return map_chars(s, to_upper);
}
std::string py_lower(std::string_view s) {
  return map_chars(s, to_lower);
}

std::string py_title(std::string_view s) {
  std::u32string cps = to_code_points(s);
  bool previous_cased = false;
  for (auto& c : cps) {
    c = previous_cased ? to_lower(c) : to_upper(c);
    previous_cased = is_cased(c);
  }
  return from_code_points(cps);
}

std::string py_capitalize(std::string_view s) {
  std::u32string cps = to_code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? to_upper(cps[i]) : to_lower(cps[i]);
  return from_code_points(cps);
}

std::string py_strip(std::string_view s, const Value& chars, bool left, bool right) {
  if (chars.is_undefined()) fail_undefined(chars);
  bool whitespace = chars.is_none();
  if (!whitespace && !chars.is_string()) type_error("strip arg must be None or str");
  std::u32string set = whitespace ? std::u32string() : to_code_points(chars.as_string());
  auto strip_it = [&](char32_t c) {
    return whitespace ? is_space(c) : set.find(c) != std::u32string::npos;
  };
  std::u32string cps = to_code_points(s);
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strip_it(cps[begin])) ++begin;
  if (right)
    while (end > begin && strip_it(cps[end - 1])) --end;
  return from_code_points(std::u32string_view(cps).substr(begin, end - begin));
}

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::undefined:
      fail_undefined(obj);
    case Kind::string:
      if (in(kStrMethods, name)) {
        std::string s = obj.as_string();
        return Value::callable("str." + name,
                               [s, name](CallArgs& args) { return str_method(s, name, args); });
      }
      return missing_attribute(obj, name);
    case Kind::dict:
      if (in(kDictMethods, name)) {
        if (in(kMutators, name)) {
          return Value::callable(name, [name](CallArgs&) -> Value {
            DSPARK_FAIL(invalid_input, "access to attribute '{}' of 'dict' object is unsafe.",
                        name);
          });
        }
        return Value::callable(
            "dict." + name, [obj, name](CallArgs& args) { return dict_method(obj, name, args); });
      }
      if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
      return missing_attribute(obj, name);
    case Kind::ns:
      if (const Value* v = obj.as_ns().find(std::string_view(name))) return *v;
      return missing_attribute(obj, name);
    case Kind::list:
      if (in(kListMethods, name)) {
        if (in(kMutators, name)) {
          std::string type = type_name(obj);
          return Value::callable(name, [name, type](CallArgs&) -> Value {
            DSPARK_FAIL(invalid_input, "access to attribute '{}' of '{}' object is unsafe.", name,
                        type);
          });
        }
        return Value::callable(
            "list." + name, [obj, name](CallArgs& args) { return list_method(obj, name, args); });
      }
      return missing_attribute(obj, name);
    default:
      return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (key.is_undefined()) fail_undefined(key);
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = length(obj);
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
      std::u32string cps = to_code_points(obj.as_string());
      return Value(from_code_points(cps.substr(static_cast<size_t>(i), 1)));
    }
    return Value::undefined(fmt::format("{} has no element {}", object_desc(obj), key.as_int()));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (obj.is_ns() && key.is_string()) {
    if (const Value* v = obj.as_ns().find(key)) return *v;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined(fmt::format("{} has no element {}", object_desc(obj), repr(key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto index = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      type_error("slice indices must be integers or None or have an __index__ method");
    }
    return v.as_int();
  };
  std::optional<int64_t> first = index(start), last = index(stop), stride = index(step);
  int64_t st = stride.value_or(1);
  if (st == 0) type_error("ValueError: slice step cannot be zero");
  if (!obj.is_list() && !obj.is_string()) {
    type_error(fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  std::u32string cps;
  if (obj.is_string()) cps = to_code_points(obj.as_string());
  int64_t n = obj.is_string() ? static_cast<int64_t>(cps.size())
                              : static_cast<int64_t>(obj.as_list().size());
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t b = adjust(first, st < 0 ? n - 1 : 0);
  int64_t e = adjust(last, st < 0 ? -1 : n);
  std::vector<size_t> picks;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picks.push_back(static_cast<size_t>(i));
  if (obj.is_string()) {
    std::u32string out;
    for (size_t i : picks) out += cps[i];
    return Value(from_code_points(out));
  }
  std::vector<Value> out;
  out.reserve(picks.size());
  for (size_t i : picks) out.push_back(obj.as_list()[i]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace dspark::jinja
