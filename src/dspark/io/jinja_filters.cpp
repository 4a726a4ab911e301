// Filters, tests and global functions of transformers' chat-template environment (jinja2's
// builtins, with transformers' tojson, raise_exception and strftime_now).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <locale>
#include <map>
#include <sstream>

#include "dspark/core/error.h"
#include "dspark/io/jinja_ast.h"
#include "dspark/io/jinja_builtins.h"

namespace dspark::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, CallArgs&)>;
using TestFn = std::function<bool(const Value&, CallArgs&)>;

// jinja2's soft_str: str(value), Undefined -> "".
std::string soft_str(const Value& v) {
  return to_str(v);
}

// environment.getitem over a dotted path ("a.b", "0"), as selectattr/map/sort use it.
Value attribute_path(const Value& item, const Value& path) {
  if (!path.is_string()) return get_item(item, path);
  Value v = item;
  const std::string& p = path.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = p.find('.', start);
    std::string part = p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    v = get_item(v, numeric ? Value(static_cast<int64_t>(std::atoll(part.c_str()))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Sort key for sort/unique/dictsort/min/max: lower-cased strings unless case sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

CallArgs tail_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  if (args.positional.size() > skip) {
    rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(skip),
                           args.positional.end());
  }
  rest.keyword = args.keyword;
  return rest;
}

// select/reject/selectattr/rejectattr.
Value select_items(const Value& seq, CallArgs& args, bool with_attribute, bool keep) {
  size_t first = with_attribute ? 1 : 0;
  if (with_attribute && args.positional.empty()) type_error("Missing parameter for attribute name");
  std::vector<Value> out;
  for (const auto& item : iterate(seq)) {
    Value subject = with_attribute ? attribute_path(item, args.positional[0]) : item;
    bool pass;
    if (args.positional.size() > first) {
      const Value& test = args.positional[first];
      if (!test.is_string()) type_error("the test name must be a string");
      CallArgs rest = tail_args(args, first + 1);
      pass = apply_test(test.as_string(), subject, rest);
    } else {
      pass = truthy(subject);
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::vector<Value> sorted_items(std::vector<Value> items, const Value& attribute,
                                bool case_sensitive, bool reverse) {
  auto key = [&](const Value& v) {
    return sort_key(attribute.is_none() ? v : attribute_path(v, attribute), case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return items;
}

Value json_filter(const Value& v, CallArgs& args) {
  Params p(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonFormat f;
  f.ensure_ascii = truthy(p.get_or(0, Value(false)));
  const Value& indent = p.get_or(1, Value(nullptr));
  if (indent.is_string()) {
    f.indent = indent.as_string();
  } else if (indent.is_int() || indent.is_bool()) {
    f.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (!indent.is_none()) {
    type_error("tojson: indent must be an integer or a string");
  }
  const Value& seps = p.get_or(2, Value(nullptr));
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.as_list().size() != 2 || !seps.as_list()[0].is_string() ||
        !seps.as_list()[1].is_string()) {
      type_error("tojson: separators must be a pair of strings");
    }
    f.item_separator = seps.as_list()[0].as_string();
    f.key_separator = seps.as_list()[1].as_string();
  }
  f.sort_keys = truthy(p.get_or(3, Value(false)));
  return Value(to_json_text(v, f));
}

Value round_filter(const Value& v, CallArgs& args) {
  Params p(args, "round", {"precision", "method"});
  int64_t precision = p.get_or(0, Value(0)).as_int();
  std::string method = to_str(p.get_or(1, Value("common")));
  if (!v.is_number()) type_error(fmt::format("type {} doesn't define __round__", type_name(v)));
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());
    // Python's round(x, n) rounds the exact binary value half-to-even, like printf.
    std::string text = fmt::format("{:.{}f}", v.as_float(), std::max<int64_t>(0, precision));
    return Value(std::strtod(text.c_str(), nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "floor") return Value(std::floor(v.as_float() * scale) / scale);
  if (method == "ceil") return Value(std::ceil(v.as_float() * scale) / scale);
  type_error("method must be common, ceil or floor");
}

Value int_filter(const Value& v, CallArgs& args) {
  Params p(args, "int", {"default", "base"});
  Value fallback = p.get_or(0, Value(0));
  int base = static_cast<int>(p.get_or(1, Value(10)).as_int());
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), Value(nullptr), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      char* end = nullptr;
      errno = 0;
      long long i = std::strtoll(s.c_str(), &end, base);
      if (errno == 0 && *end == '\0') return Value(static_cast<int64_t>(i));
      double d = std::strtod(s.c_str(), &end);
      if (*end == '\0' && std::isfinite(d)) return Value(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return fallback;
}

Value float_filter(const Value& v, CallArgs& args) {
  Params p(args, "float", {"default"});
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), Value(nullptr), true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  return p.get_or(0, Value(0.0));
}

Value indent_filter(const Value& v, CallArgs& args) {
  Params p(args, "indent", {"width", "first", "blank"});
  const Value& width = p.get_or(0, Value(4));
  std::string indention =
      width.is_string()
          ? width.as_string()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  bool first = truthy(p.get_or(1, Value(false)));
  bool blank = truthy(p.get_or(2, Value(false)));
  CallArgs none;
  Value lines_value = get_attribute(Value(soft_str(v) + "\n"), "splitlines").as_callable().fn(none);
  const auto& lines = lines_value.as_list();
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) {
      rv += '\n';
      if (blank || !line.empty()) rv += indention;
    }
    rv += line;
  }
  if (first) rv = indention + rv;
  return Value(std::move(rv));
}

Value map_filter(const Value& seq, CallArgs& args) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, v] : args.keyword) {
    if (k == "attribute")
      attribute = &v;
    else if (k == "default")
      fallback = &v;
  }
  if (attribute) {
    for (const auto& item : iterate(seq)) {
      Value x = attribute_path(item, *attribute);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    type_error("map requires a filter name or attribute=");
  }
  CallArgs rest = tail_args(args, 1);
  for (const auto& item : iterate(seq))
    out.push_back(apply_filter(args.positional[0].as_string(), item, rest));
  return Value::list(std::move(out));
}

Value minmax_filter(const Value& seq, CallArgs& args, bool want_max) {
  Params p(args, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  bool cs = truthy(p.get_or(0, Value(false)));
  Value attribute = p.get_or(1, Value(nullptr));
  std::vector<Value> items = iterate(seq);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& v) {
    return sort_key(attribute.is_none() ? v : attribute_path(v, attribute), cs);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = compare(key(items[i]), key(items[best]));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

// jinja2's title filter (not str.title): words start after runs of [-\s({[<]; each piece gets
// its first character upper-cased and the rest lower-cased.
std::string jinja_title(const std::string& s) {
  std::u32string cps = to_code_points(s);
  auto separator = [](char32_t c) {
    return is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    bool sep = separator(cps[i]);
    while (j < cps.size() && separator(cps[j]) == sep) ++j;
    std::string piece = from_code_points(std::u32string_view(cps).substr(i, j - i));
    size_t first_len = from_code_points(std::u32string_view(cps).substr(i, 1)).size();
    out += py_upper(piece.substr(0, first_len)) + py_lower(piece.substr(first_len));
    i = j;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = [] {
    std::map<std::string, FilterFn, std::less<>> t;
    t["abs"] = [](const Value& v, CallArgs& a) {
      Params p(a, "abs", {});
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      if (!v.is_number()) type_error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
      return v.as_int() < 0 ? unary_op("-", v) : Value(v.as_int());
    };
    t["attr"] = [](const Value& v, CallArgs& a) {
      Params p(a, "attr", {"name"});
      return get_attribute(v, to_str(p.get(0)));
    };
    t["capitalize"] = [](const Value& v, CallArgs& a) {
      Params p(a, "capitalize", {});
      return Value(py_capitalize(soft_str(v)));
    };
    t["default"] = [](const Value& v, CallArgs& a) {
      Params p(a, "default", {"default_value", "boolean"});
      bool use_default = v.is_undefined() || (truthy(p.get_or(1, Value(false))) && !truthy(v));
      return use_default ? p.get_or(0, Value("")) : v;
    };
    t["d"] = t["default"];
    t["dictsort"] = [](const Value& v, CallArgs& a) {
      Params p(a, "dictsort", {"case_sensitive", "by", "reverse"});
      if (!v.is_dict()) type_error("You can only sort by either \"key\" or \"value\"");
      bool by_value = to_str(p.get_or(1, Value("key"))) == "value";
      std::vector<Value> pairs;
      for (const auto& [k, x] : v.as_dict().items) pairs.push_back(Value::list({k, x}, true));
      return Value::list(sorted_items(std::move(pairs), Value(int64_t{by_value ? 1 : 0}),
                                      truthy(p.get_or(0, Value(false))),
                                      truthy(p.get_or(2, Value(false)))));
    };
    t["escape"] = [](const Value& v, CallArgs& a) {
      Params p(a, "escape", {});
      return Value(html_escape(soft_str(v)));
    };
    t["e"] = t["escape"];
    t["first"] = [](const Value& v, CallArgs& a) {
      Params p(a, "first", {});
      std::vector<Value> items = iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    t["last"] = [](const Value& v, CallArgs& a) {
      Params p(a, "last", {});
      if (v.is_undefined()) fail_undefined(v);
      std::vector<Value> items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    t["float"] = float_filter;
    t["format"] = [](const Value& v, CallArgs& a) {
      if (!a.keyword.empty())
        DSPARK_FAIL(unsupported, "format() with keyword arguments is not supported");
      return Value(percent_format(soft_str(v), Value::list(a.positional, true)));
    };
    t["indent"] = indent_filter;
    t["int"] = int_filter;
    t["items"] = [](const Value& v, CallArgs& a) {
      Params p(a, "items", {});
      if (v.is_undefined()) return Value::list({});
      if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
      std::vector<Value> out;
      for (const auto& [k, x] : v.as_dict().items) out.push_back(Value::list({k, x}, true));
      return Value::list(std::move(out));
    };
    t["join"] = [](const Value& v, CallArgs& a) {
      Params p(a, "join", {"d", "attribute"});
      std::string sep = soft_str(p.get_or(0, Value("")));
      Value attribute = p.get_or(1, Value(nullptr));
      std::string out;
      size_t i = 0;
      for (const auto& item : iterate(v)) {
        if (i++ > 0) out += sep;
        out += soft_str(attribute.is_none() ? item : attribute_path(item, attribute));
      }
      return Value(std::move(out));
    };
    t["length"] = [](const Value& v, CallArgs& a) {
      Params p(a, "length", {});
      return Value(length(v));
    };
    t["count"] = t["length"];
    t["list"] = [](const Value& v, CallArgs& a) {
      Params p(a, "list", {});
      return Value::list(iterate(v));
    };
    t["lower"] = [](const Value& v, CallArgs& a) {
      Params p(a, "lower", {});
      return Value(py_lower(soft_str(v)));
    };
    t["upper"] = [](const Value& v, CallArgs& a) {
      Params p(a, "upper", {});
      return Value(py_upper(soft_str(v)));
    };
    t["title"] = [](const Value& v, CallArgs& a) {
      Params p(a, "title", {});
      return Value(jinja_title(soft_str(v)));
    };
    t["map"] = map_filter;
    t["max"] = [](const Value& v, CallArgs& a) { return minmax_filter(v, a, true); };
    t["min"] = [](const Value& v, CallArgs& a) { return minmax_filter(v, a, false); };
    t["select"] = [](const Value& v, CallArgs& a) { return select_items(v, a, false, true); };
    t["reject"] = [](const Value& v, CallArgs& a) { return select_items(v, a, false, false); };
    t["selectattr"] = [](const Value& v, CallArgs& a) { return select_items(v, a, true, true); };
    t["rejectattr"] = [](const Value& v, CallArgs& a) { return select_items(v, a, true, false); };
    t["replace"] = [](const Value& v, CallArgs& a) {
      Params p(a, "replace", {"old", "new", "count"});
      CallArgs call;
      call.positional = {p.get(0), p.get(1)};
      if (p.has(2) && !p.get(2).is_none()) call.positional.push_back(p.get(2));
      return get_attribute(Value(soft_str(v)), "replace").as_callable().fn(call);
    };
    t["reverse"] = [](const Value& v, CallArgs& a) {
      Params p(a, "reverse", {});
      if (v.is_string()) {
        std::u32string cps = to_code_points(v.as_string());
        std::reverse(cps.begin(), cps.end());
        return Value(from_code_points(cps));
      }
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["round"] = round_filter;
    t["safe"] = [](const Value& v, CallArgs& a) {
      Params p(a, "safe", {});
      return Value(soft_str(v));
    };
    t["sort"] = [](const Value& v, CallArgs& a) {
      Params p(a, "sort", {"reverse", "case_sensitive", "attribute"});
      return Value::list(sorted_items(iterate(v), p.get_or(2, Value(nullptr)),
                                      truthy(p.get_or(1, Value(false))),
                                      truthy(p.get_or(0, Value(false)))));
    };
    t["string"] = [](const Value& v, CallArgs& a) {
      Params p(a, "string", {});
      return Value(soft_str(v));
    };
    t["sum"] = [](const Value& v, CallArgs& a) {
      Params p(a, "sum", {"attribute", "start"});
      Value attribute = p.get_or(0, Value(nullptr));
      Value total = p.get_or(1, Value(0));
      for (const auto& item : iterate(v)) {
        total = binary_op("+", total, attribute.is_none() ? item : attribute_path(item, attribute));
      }
      return total;
    };
    t["tojson"] = json_filter;
    t["trim"] = [](const Value& v, CallArgs& a) {
      Params p(a, "trim", {"chars"});
      return Value(py_strip(soft_str(v), p.get_or(0, Value(nullptr)), true, true));
    };
    t["unique"] = [](const Value& v, CallArgs& a) {
      Params p(a, "unique", {"case_sensitive", "attribute"});
      bool cs = truthy(p.get_or(0, Value(false)));
      Value attribute = p.get_or(1, Value(nullptr));
      std::vector<Value> out, seen;
      for (const auto& item : iterate(v)) {
        Value key = sort_key(attribute.is_none() ? item : attribute_path(item, attribute), cs);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    };
    t["wordcount"] = [](const Value& v, CallArgs& a) {
      Params p(a, "wordcount", {});
      int64_t n = 0;
      bool in_word = false;
      for (char32_t c : to_code_points(soft_str(v))) {
        bool word = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                    (c >= 'A' && c <= 'Z') || (c >= 0x80 && !is_space(c));
        n += word && !in_word;
        in_word = word;
      }
      return Value(n);
    };
    return t;
  }();
  return table;
}

bool is_int_value(const Value& v) {
  return v.is_int();
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = [] {
    std::map<std::string, TestFn, std::less<>> t;
    auto unary = [&t](std::initializer_list<const char*> names, bool (*f)(const Value&)) {
      for (const char* n : names) {
        std::string name = n;
        t[name] = [f, name](const Value& v, CallArgs& a) {
          Params p(a, name, {});
          return f(v);
        };
      }
    };
    unary({"defined"}, [](const Value& v) { return !v.is_undefined(); });
    unary({"undefined"}, [](const Value& v) { return v.is_undefined(); });
    unary({"none"}, [](const Value& v) { return v.is_none(); });
    unary({"boolean"}, [](const Value& v) { return v.is_bool(); });
    unary({"true"}, [](const Value& v) { return v.is_bool() && v.as_bool(); });
    unary({"false"}, [](const Value& v) { return v.is_bool() && !v.as_bool(); });
    unary({"integer"}, is_int_value);
    unary({"float"}, [](const Value& v) { return v.is_float(); });
    unary({"number"}, [](const Value& v) { return v.is_number(); });
    unary({"string"}, [](const Value& v) { return v.is_string(); });
    unary({"mapping"}, [](const Value& v) { return v.is_dict(); });
    unary({"iterable"}, [](const Value& v) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    });
    unary({"sequence"}, [](const Value& v) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    });
    unary({"callable"}, [](const Value& v) { return v.is_callable(); });
    unary({"escaped"}, [](const Value&) { return false; });
    for (const char* n : {"odd", "even"}) {
      bool odd = std::string_view(n) == "odd";
      t[n] = [odd](const Value& v, CallArgs& a) {
        Params p(a, odd ? "odd" : "even", {});
        Value r = binary_op("%", v, Value(2));
        return odd ? truthy(r) : !truthy(r);
      };
    }
    t["divisibleby"] = [](const Value& v, CallArgs& a) {
      Params p(a, "divisibleby", {"num"});
      return equal(binary_op("%", v, p.get(0)), Value(0));
    };
    t["lower"] = [](const Value& v, CallArgs& a) {
      Params p(a, "lower", {});
      CallArgs none;
      return truthy(get_attribute(Value(soft_str(v)), "islower").as_callable().fn(none));
    };
    t["upper"] = [](const Value& v, CallArgs& a) {
      Params p(a, "upper", {});
      CallArgs none;
      return truthy(get_attribute(Value(soft_str(v)), "isupper").as_callable().fn(none));
    };
    auto comparison = [&t](std::initializer_list<const char*> names, std::string op) {
      for (const char* n : names) {
        std::string name = n;
        t[name] = [op, name](const Value& v, CallArgs& a) {
          Params p(a, name, {"other"});
          const Value& other = p.get(0);
          if (op == "==") return equal(v, other);
          if (op == "!=") return !equal(v, other);
          if (v.is_undefined()) fail_undefined(v);
          if (other.is_undefined()) fail_undefined(other);
          int c = compare(v, other);
          if (op == "<") return c < 0;
          if (op == "<=") return c <= 0;
          if (op == ">") return c > 0;
          return c >= 0;
        };
      }
    };
    comparison({"eq", "equalto", "=="}, "==");
    comparison({"ne", "!="}, "!=");
    comparison({"lt", "lessthan", "<"}, "<");
    comparison({"le", "<="}, "<=");
    comparison({"gt", "greaterthan", ">"}, ">");
    comparison({"ge", ">="}, ">=");
    t["sameas"] = [](const Value& v, CallArgs& a) {
      Params p(a, "sameas", {"other"});
      const Value& other = p.get(0);
      if (v.kind() != other.kind()) return false;
      return equal(v, other);
    };
    t["in"] = [](const Value& v, CallArgs& a) {
      Params p(a, "in", {"seq"});
      return contains(p.get(0), v);
    };
    t["filter"] = [](const Value& v, CallArgs& a) {
      Params p(a, "filter", {});
      return v.is_string() && has_filter(v.as_string());
    };
    t["test"] = [](const Value& v, CallArgs& a) {
      Params p(a, "test", {});
      return v.is_string() && has_test(v.as_string());
    };
    return t;
  }();
  return table;
}

Value range_function(CallArgs& args) {
  Params p(args, "range", {"start", "stop", "step"});
  int64_t start = 0, stop, step = 1;
  auto as_int = [](const Value& v) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_int() && !v.is_bool()) {
      type_error(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
    }
    return v.as_int();
  };
  if (!p.has(1)) {
    stop = as_int(p.get(0));
  } else {
    start = as_int(p.get(0));
    stop = as_int(p.get(1));
    if (p.has(2)) step = as_int(p.get(2));
  }
  if (step == 0) type_error("ValueError: range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) {
      type_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

std::string format_time(const std::string& format, const std::tm& tm, int64_t micros) {
  std::string fmt_text;
  for (size_t i = 0; i < format.size(); ++i) {  // %f: microseconds (Python only)
    if (format[i] == '%' && i + 1 < format.size() && format[i + 1] == 'f') {
      fmt_text += fmt::format("{:06d}", micros);
      ++i;
    } else if (format[i] == '%' && i + 1 < format.size() && format[i + 1] == '%') {
      fmt_text += "%%";
      ++i;
    } else {
      fmt_text += format[i];
    }
  }
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << std::put_time(&tm, fmt_text.c_str());
  return out.str();
}

}  // namespace

bool has_filter(std::string_view name) {
  return filters().count(name) > 0;
}
bool has_test(std::string_view name) {
  return tests().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) {
    DSPARK_FAIL(unsupported, "the filter '{}' is not supported in chat templates", name);
  }
  return it->second(input, args);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) {
    DSPARK_FAIL(unsupported, "the test '{}' is not supported in chat templates", name);
  }
  return it->second(v, args);
}

Value global_value(const std::string& name, const GlobalOptions& options) {
  if (name == "range") return Value::callable("range", range_function);
  if (name == "namespace" || name == "dict") {
    bool is_ns = name == "namespace";
    return Value::callable(name, [is_ns](CallArgs& args) {
      DictData d;
      if (args.positional.size() > 1) type_error("expected at most 1 positional argument");
      if (!args.positional.empty()) {
        const Value& init = args.positional[0];
        if (init.is_dict()) {
          d = init.as_dict();
        } else {
          for (const auto& pair : iterate(init)) {
            if (!pair.is_list() || pair.as_list().size() != 2) {
              type_error("dictionary update sequence element has the wrong length");
            }
            d.set(pair.as_list()[0], pair.as_list()[1]);
          }
        }
      }
      for (const auto& [k, v] : args.keyword) d.set(Value(k), v);
      if (!is_ns) return Value::dict(std::move(d));
      for (const auto& [k, v] : d.items) {
        if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_') {
          type_error("Chat templates cannot store underscore-prefixed attributes on a namespace");
        }
      }
      return Value::ns(std::make_shared<DictData>(std::move(d)));
    });
  }
  if (name == "raise_exception") {
    return Value::callable(name, [](CallArgs& args) -> Value {
      Params p(args, "raise_exception", {"message"});
      throw RaisedByTemplate{to_str(p.get(0))};
    });
  }
  if (name == "strftime_now") {
    std::optional<std::tm> pinned = options.now;
    return Value::callable(name, [pinned](CallArgs& args) {
      Params p(args, "strftime_now", {"format"});
      if (!p.get(0).is_string()) type_error("strftime() argument 1 must be str");
      if (pinned) return Value(format_time(p.get(0).as_string(), *pinned, 0));
      auto now = std::chrono::system_clock::now();
      std::time_t t = std::chrono::system_clock::to_time_t(now);
      std::tm local{};
      localtime_r(&t, &local);
      int64_t micros =
          std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
          1000000;
      return Value(format_time(p.get(0).as_string(), local, micros));
    });
  }
  if (name == "cycler" || name == "joiner" || name == "lipsum") {
    return Value::callable(name, [name](CallArgs&) -> Value {
      DSPARK_FAIL(unsupported, "the global function '{}' is not supported in chat templates", name);
    });
  }
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

}  // namespace dspark::jinja
