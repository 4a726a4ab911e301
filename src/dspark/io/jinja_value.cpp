#include "dspark/io/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "dspark/core/error.h"
#include "dspark/io/utf8.h"

namespace dspark::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.v_ = Undefined{std::move(hint)};
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.v_ = std::make_shared<const std::vector<Value>>(std::move(items));
  v.tuple_ = tuple;
  return v;
}

Value Value::dict(DictData data) {
  Value v;
  v.v_ = std::make_shared<const DictData>(std::move(data));
  return v;
}

Value Value::ns(NamespacePtr data) {
  Value v;
  v.v_ = std::move(data);
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.v_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_float() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

// ---- UTF-8 --------------------------------------------------------------------------------------

std::u32string to_code_points(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int32_t cp = utf8::next(s, i);
    out.push_back(cp < 0 ? utf8::kReplacement : static_cast<char32_t>(cp));
  }
  return out;
}

std::string from_code_points(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8::append(out, cp);
  return out;
}

int64_t code_point_count(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

namespace {

// Python's str.isprintable() for the code points a chat message realistically holds: controls,
// format characters, separators other than the space and private-use characters are not printable
// (unassigned code points, which would need the Unicode database, are treated as printable).
bool is_printable(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp < 0x7F) return true;
  if (cp == 0x61C || cp == 0x180E || cp == 0x1680 || cp == 0xFEFF || cp == 0x3000) return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x206F) || (cp >= 0xFFF9 && cp <= 0xFFFB)) return false;
  if ((cp >= 0xE000 && cp <= 0xF8FF) || cp >= 0xF0000) return false;
  return true;
}

std::string repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : to_code_points(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (!is_printable(cp)) {
      if (cp <= 0xFF)
        out += fmt::format("\\x{:02x}", static_cast<uint32_t>(cp));
      else if (cp <= 0xFFFF)
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      else
        out += fmt::format("\\U{:08x}", static_cast<uint32_t>(cp));
    } else {
      utf8::append(out, cp);
    }
  }
  out += quote;
  return out;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  if (ensure_ascii) {
    for (char32_t cp : to_code_points(s)) {
      if (cp < 0x80) {
        std::string ascii;
        ascii += static_cast<char>(cp);
        std::string escaped;
        append_json_string(escaped, ascii, false);
        out += escaped.substr(1, escaped.size() - 2);
      } else if (cp <= 0xFFFF) {
        out += fmt::format("\\u{:04x}", static_cast<uint32_t>(cp));
      } else {
        uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      }
    }
    out += '"';
    return;
  }
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return format_float(d);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::string:
      return k.as_string();
    case Kind::boolean:
      return k.as_bool() ? "true" : "false";
    case Kind::none:
      return "null";
    case Kind::integer:
      return std::to_string(k.as_int());
    case Kind::floating:
      return json_float(k.as_float());
    default:
      DSPARK_FAIL(invalid_input, "keys must be str, int, float, bool or None, not {}",
                  type_name(k));
  }
}

void append_json(std::string& out, const Value& v, const JsonFormat& f, int level) {
  switch (v.kind()) {
    case Kind::none:
      out += "null";
      return;
    case Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Kind::floating:
      out += json_float(v.as_float());
      return;
    case Kind::string:
      append_json_string(out, v.as_string(), f.ensure_ascii);
      return;
    default:
      break;
  }
  const std::string item_sep = f.item_separator.value_or(f.indent ? "," : ", ");
  const std::string key_sep = f.key_separator.value_or(": ");
  auto newline = [&](int lvl) {
    if (!f.indent) return;
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += *f.indent;
  };
  if (v.is_list()) {
    const auto& items = v.as_list();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    newline(level + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) {
        out += item_sep;
        newline(level + 1);
      }
      append_json(out, items[i], f, level + 1);
    }
    newline(level);
    out += ']';
    return;
  }
  if (v.is_dict()) {
    const auto& items = v.as_dict().items;
    if (items.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    entries.reserve(items.size());
    for (const auto& [k, val] : items) entries.emplace_back(json_key(k), &val);
    if (f.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out += '{';
    newline(level + 1);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out += item_sep;
        newline(level + 1);
      }
      append_json_string(out, entries[i].first, f.ensure_ascii);
      out += key_sep;
      append_json(out, *entries[i].second, f, level + 1);
    }
    newline(level);
    out += '}';
    return;
  }
  DSPARK_FAIL(invalid_input, "Object of type {} is not JSON serializable", type_name(v));
}

}  // namespace

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02": shortest round-trip digits
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exponent = std::atoi(sci.c_str() + e + 1);
  int decpt = exponent + 1;  // position of the decimal point relative to the digits
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
             digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += exponent < 0 ? "e-" : "e+";
  out += fmt::format("{:02d}", std::abs(exponent));
  return out;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return v.as_bool();
    case Kind::integer:
      return v.as_int() != 0;
    case Kind::floating:
      return v.as_float() != 0.0;
    case Kind::string:
      return !v.as_string().empty();
    case Kind::list:
      return !v.as_list().empty();
    case Kind::dict:
      return !v.as_dict().items.empty();
    case Kind::ns:
    case Kind::callable:
      return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "NoneType";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::string:
      return "str";
    case Kind::list:
      return v.is_tuple() ? "tuple" : "list";
    case Kind::dict:
      return "dict";
    case Kind::ns:
      return "Namespace";
    case Kind::callable:
      return "function";
  }
  return "object";
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return "";
    case Kind::string:
      return v.as_string();
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return "Undefined";
    case Kind::none:
      return "None";
    case Kind::boolean:
      return v.as_bool() ? "True" : "False";
    case Kind::integer:
      return std::to_string(v.as_int());
    case Kind::floating:
      return format_float(v.as_float());
    case Kind::string:
      return repr_string(v.as_string());
    case Kind::list: {
      const auto& items = v.as_list();
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += repr(items[i]);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Kind::dict:
    case Kind::ns: {
      const auto& items = v.is_dict() ? v.as_dict().items : v.as_ns().items;
      std::string out = v.is_ns() ? "<Namespace {" : "{";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += repr(items[i].first) + ": " + repr(items[i].second);
      }
      out += v.is_ns() ? "}>" : "}";
      return out;
    }
    case Kind::callable:
      return fmt::format("<function {}>", v.as_callable().name);
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::string:
      return a.as_string() == b.as_string();
    case Kind::list: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equal(x[i], y[i])) return false;
      return true;
    }
    case Kind::dict: {
      const auto& x = a.as_dict().items;
      const auto& y = b.as_dict();
      if (x.size() != y.items.size()) return false;
      for (const auto& [k, val] : x) {
        const Value* other = y.find(k);
        if (!other || !equal(val, *other)) return false;
      }
      return true;
    }
    case Kind::ns:
      return &a.as_ns() == &b.as_ns();
    case Kind::callable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  DSPARK_FAIL(invalid_input, "'<' not supported between instances of '{}' and '{}'", type_name(a),
              type_name(b));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::undefined:
      return false;
    case Kind::string:
      if (!item.is_string()) {
        DSPARK_FAIL(invalid_input, "'in <string>' requires string as left operand, not {}",
                    type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::list:
      for (const auto& x : container.as_list())
        if (equal(x, item)) return true;
      return false;
    case Kind::dict:
      return container.as_dict().find(item) != nullptr;
    default:
      DSPARK_FAIL(invalid_input, "argument of type '{}' is not iterable", type_name(container));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return 0;
    case Kind::string:
      return code_point_count(v.as_string());
    case Kind::list:
      return static_cast<int64_t>(v.as_list().size());
    case Kind::dict:
      return static_cast<int64_t>(v.as_dict().items.size());
    default:
      DSPARK_FAIL(invalid_input, "object of type '{}' has no len()", type_name(v));
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::undefined:
      return {};
    case Kind::list:
      return v.as_list();
    case Kind::dict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().items.size());
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::string: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      size_t i = 0;
      while (i < s.size()) {
        size_t start = i;
        utf8::next(s, i);
        chars.emplace_back(s.substr(start, i - start));
      }
      return chars;
    }
    default:
      DSPARK_FAIL(invalid_input, "'{}' object is not iterable", type_name(v));
  }
}

std::string to_json_text(const Value& v, const JsonFormat& format) {
  std::string out;
  append_json(out, v, format, 0);
  return out;
}

Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value(nullptr);
    case Json::value_t::boolean:
      return Value(j.get<bool>());
    case Json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Json::value_t::number_float:
      return Value(j.get<double>());
    case Json::value_t::string:
      return Value(j.get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      DictData d;
      d.items.reserve(j.size());
      for (const auto& [k, x] : j.items()) d.items.emplace_back(Value(k), from_json(x));
      return Value::dict(std::move(d));
    }
    default:
      DSPARK_FAIL(invalid_input, "unsupported JSON value (binary) in chat template input");
  }
}

}  // namespace dspark::jinja
