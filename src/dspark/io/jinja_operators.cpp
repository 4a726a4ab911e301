// Python's operators on template values: + - * / // % ** (with int overflow reported as
// unsupported: Python ints are unbounded), unary - +, and printf-style `str % args`.
#include <cmath>

#include "dspark/core/error.h"
#include "dspark/io/jinja_builtins.h"
#include "dspark/io/utf8.h"

namespace dspark::jinja {

Value unary_op(std::string_view op, const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (!a.is_number()) {
    type_error(fmt::format("bad operand type for unary {}: '{}'", op, type_name(a)));
  }
  if (op == "+") return a.is_float() ? a : Value(a.as_int());
  if (a.is_float()) return Value(-a.as_float());
  if (a.as_int() == INT64_MIN) DSPARK_FAIL(unsupported, "integer overflow in a chat template");
  return Value(-a.as_int());
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto unsupported_operands = [&]() -> Value {
    type_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                           type_name(b)));
  };
  auto overflow = []() -> Value {
    DSPARK_FAIL(unsupported, "integer overflow in a chat template (Python ints are unbounded)");
  };
  bool numbers = a.is_number() && b.is_number();
  bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value(r);
    }
    if (numbers) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string() || a.is_list()) {
      type_error(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(a),
                             type_name(b), type_name(a)));
    }
    return unsupported_operands();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value(r);
    }
    if (numbers) return Value(a.as_float() * b.as_float());
    const Value* seq = (a.is_string() || a.is_list()) ? &a : &b;
    const Value* count = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_list()) && (count->is_int() || count->is_bool())) {
      int64_t n = std::max<int64_t>(0, count->as_int());
      if (seq->is_string()) {
        if (n > 0 && seq->as_string().size() * static_cast<size_t>(n) > (1u << 28)) overflow();
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->as_string();
        return Value(std::move(out));
      }
      if (n > 0 && seq->as_list().size() * static_cast<size_t>(n) > (1u << 24)) overflow();
      std::vector<Value> out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), seq->as_list().begin(), seq->as_list().end());
      return Value::list(std::move(out), seq->is_tuple());
    }
    return unsupported_operands();
  }
  if (!numbers) return unsupported_operands();
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) return overflow();
      return Value(r);
    }
    return Value(a.as_float() - b.as_float());
  }
  if (op == "/") {
    if (b.as_float() == 0) type_error("ZeroDivisionError: division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (y == 0) type_error("ZeroDivisionError: integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return overflow();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    // CPython's float divmod.
    double x = a.as_float(), y = b.as_float();
    if (y == 0) type_error("ZeroDivisionError: float division by zero");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    if (op == "%") return Value(mod);
    double floordiv = std::copysign(0.0, x / y);
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    }
    return Value(floordiv);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e-- > 0)
        if (__builtin_mul_overflow(r, base, &r)) return overflow();
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  return unsupported_operands();
}

namespace {
// A printf conversion ("%-08.3" + type) as a {fmt} replacement field.
std::string fmt_spec(const std::string& printf_spec, char type, bool floating) {
  std::string flags, width, precision;
  size_t i = 1;
  while (i < printf_spec.size() &&
         std::string_view("-+ #0").find(printf_spec[i]) != std::string::npos)
    flags += printf_spec[i++];
  while (i < printf_spec.size() && printf_spec[i] != '.') width += printf_spec[i++];
  if (i < printf_spec.size()) precision = printf_spec.substr(i);
  std::string spec = "{:";
  bool left = flags.find('-') != std::string::npos;
  if (left) spec += '<';
  if (flags.find('+') != std::string::npos)
    spec += '+';
  else if (flags.find(' ') != std::string::npos)
    spec += ' ';
  if (flags.find('#') != std::string::npos) spec += '#';
  if (!left && flags.find('0') != std::string::npos) spec += '0';
  spec += width;
  if (floating) spec += precision.empty() ? std::string(".6") : precision;
  return spec + type + "}";
}
}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> values;
  if (args.is_tuple())
    values = args.as_list();
  else
    values.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) type_error("ValueError: incomplete format");
    if (format[i] == '%') {
      out += '%';
      continue;
    }
    if (format[i] == '(') {
      DSPARK_FAIL(unsupported, "'%(name)s' formatting is not supported in chat templates");
    }
    std::string spec = "%";
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string::npos)
      spec += format[i++];
    while (i < format.size() &&
           (std::isdigit(static_cast<unsigned char>(format[i])) || format[i] == '.'))
      spec += format[i++];
    if (i >= format.size()) type_error("ValueError: incomplete format");
    char type = format[i];
    if (next >= values.size()) type_error("TypeError: not enough arguments for format string");
    const Value& v = values[next++];
    if (v.is_undefined() && type != 's') fail_undefined(v);
    switch (type) {
      case 's':
      case 'r': {
        std::string text = type == 's' ? to_str(v) : repr(v);
        // width/precision on strings: apply by hand (code points).
        size_t dot = spec.find('.');
        std::string width_part =
            spec.substr(1, dot == std::string::npos ? std::string::npos : dot - 1);
        if (dot != std::string::npos) {
          int64_t prec = std::atoll(spec.c_str() + dot + 1);
          std::u32string cps = to_code_points(text);
          if (static_cast<int64_t>(cps.size()) > prec)
            text = from_code_points(cps.substr(0, static_cast<size_t>(prec)));
        }
        bool left_align = width_part.find('-') != std::string::npos;
        int64_t width = 0;
        for (char c : width_part)
          if (std::isdigit(static_cast<unsigned char>(c))) width = width * 10 + (c - '0');
        int64_t pad = width - code_point_count(text);
        if (pad > 0)
          text = left_align ? text + std::string(static_cast<size_t>(pad), ' ')
                            : std::string(static_cast<size_t>(pad), ' ') + text;
        out += text;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o':
        if (!v.is_number()) {
          type_error(
              fmt::format("%{} format: a real number is required, not {}", type, type_name(v)));
        }
        out +=
            fmt::format(fmt::runtime(fmt_spec(spec, type == 'i' ? 'd' : type, false)),
                        v.is_float() ? static_cast<int64_t>(std::trunc(v.as_float())) : v.as_int());
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!v.is_number()) type_error(fmt::format("must be real number, not {}", type_name(v)));
        out += fmt::format(fmt::runtime(fmt_spec(spec, type, true)), v.as_float());
        break;
      case 'c':
        if (v.is_string() && code_point_count(v.as_string()) == 1)
          out += v.as_string();
        else if (v.is_int())
          utf8::append(out, static_cast<char32_t>(v.as_int()));
        else
          type_error("%c requires int or char");
        break;
      default:
        DSPARK_FAIL(unsupported, "the format character '{}' is not supported in chat templates",
                    type);
    }
  }
  if (next < values.size() && args.is_tuple()) {
    type_error("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace dspark::jinja
