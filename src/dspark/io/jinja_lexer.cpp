#include "dspark/io/jinja_lexer.h"

#include <cerrno>
#include <cstdlib>

#include "dspark/core/error.h"
#include "dspark/io/jinja_value.h"
#include "dspark/io/utf8.h"

namespace dspark::jinja {
namespace {

constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                           "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                           ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Length of the whitespace (str.isspace) code point at s[i], 0 if there is none.
size_t space_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  size_t j = i;
  int32_t cp = utf8::next(s, j);
  return (cp >= 0 && is_space(static_cast<char32_t>(cp))) ? j - i : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (size_t n = space_at(s, i)) i += n;
  return i;
}

// Python's str.rstrip() (Unicode whitespace).
void rstrip_spaces(std::string& s) {
  while (!s.empty()) {
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (space_at(s, start) != s.size() - start) return;
    s.resize(start);
  }
}

bool all_spaces(std::string_view s, size_t from) {
  size_t i = from;
  while (i < s.size()) {
    size_t n = space_at(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();  // keep_trailing_newline=False
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      char kind = src_[tag + 1];
      char sign = (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+'))
                      ? src_[tag + 2]
                      : '\0';
      std::string text = src_.substr(pos_, tag - pos_);
      int text_lines = count_newlines(text);
      strip_before_tag(text, sign, kind != '{');
      emit_data(std::move(text));
      line_ += text_lines;
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && try_raw()) {
        // raw block emitted as data
      } else {
        lex_tag(kind == '{');
      }
    }
    tokens_.push_back(Token{TokenType::eof, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(std::string_view message) const {
    DSPARK_FAIL(io, "chat template line {}: {}", line_, message);
  }

  size_t find_tag(size_t from) const {
    size_t i = from;
    while ((i = src_.find('{', i)) != std::string::npos) {
      if (i + 1 < src_.size()) {
        char c = src_[i + 1];
        if (c == '{' || c == '%' || c == '#') return i;
      }
      ++i;
    }
    return std::string::npos;
  }

  // The text before a tag: `-` strips all trailing whitespace; otherwise lstrip_blocks removes
  // spaces/tabs between the line start and a block or comment tag.
  void strip_before_tag(std::string& text, char sign, bool block_or_comment) const {
    if (sign == '-') {
      rstrip_spaces(text);
      return;
    }
    if (sign == '+' || !block_or_comment) return;
    size_t nl = text.rfind('\n');
    size_t line_start = nl == std::string::npos ? 0 : nl + 1;
    if ((line_start > 0 || line_starting_) && line_start < text.size() &&
        all_spaces(text, line_start)) {
      text.resize(line_start);
    }
  }

  void emit_data(std::string text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::data, std::move(text), line_});
  }

  void finish_tag(size_t end) {
    line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  // Block/comment end at s[i] ("+%}", "-%}" + whitespace, or "%}" + one newline); npos if none.
  size_t block_end_at(size_t i, char mark) const {
    std::string_view s = src_;
    auto starts = [&](std::string_view p) { return s.substr(i, p.size()) == p; };
    const char close[] = {mark, '}', '\0'};
    if ((starts("+") || starts("-")) && s.substr(i + 1, 2) == close) {
      return s[i] == '+' ? i + 3 : skip_spaces(s, i + 3);
    }
    if (starts(close)) return (i + 2 < s.size() && s[i + 2] == '\n') ? i + 3 : i + 2;
    return std::string::npos;
  }

  void lex_comment() {
    for (size_t i = pos_; i < src_.size(); ++i) {
      size_t end = block_end_at(i, '#');
      if (end != std::string::npos) {
        finish_tag(end);
        return;
      }
    }
    fail("missing end of comment tag");
  }

  // {% raw %} ... {% endraw %}: the content is data (with the usual strip rules on both ends).
  bool try_raw() {
    size_t i = skip_spaces(src_, pos_);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i = skip_spaces(src_, i + 3);
    size_t content_start;
    if (src_.compare(i, 3, "-%}") == 0) {
      content_start = skip_spaces(src_, i + 3);
    } else if (src_.compare(i, 2, "%}") == 0) {
      content_start = i + 2;
    } else {
      return false;
    }
    tokens_.push_back(Token{TokenType::data, "", line_});  // placeholder, filled below
    size_t at = content_start;
    while ((at = src_.find("{%", at)) != std::string::npos) {
      size_t j = at + 2;
      char sign = (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ? src_[j] : '\0';
      if (sign) ++j;
      j = skip_spaces(src_, j);
      if (src_.compare(j, 6, "endraw") == 0) {
        j = skip_spaces(src_, j + 6);
        size_t end = block_end_at(j, '%');
        if (end != std::string::npos) {
          std::string text = src_.substr(content_start, at - content_start);
          strip_before_tag(text, sign, true);
          tokens_.pop_back();
          emit_data(std::move(text));
          finish_tag(end);
          return true;
        }
      }
      at += 2;
    }
    fail("missing end of raw directive");
  }

  void lex_tag(bool is_variable) {
    tokens_.push_back(
        Token{is_variable ? TokenType::var_begin : TokenType::block_begin, "", line_});
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) {
        fail(is_variable ? "unexpected end of template, expected '}}'"
                         : "unexpected end of template, expected '%}'");
      }
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (is_variable) {
          if (src_.compare(pos_, 3, "-}}") == 0)
            end = skip_spaces(src_, pos_ + 3);
          else if (src_.compare(pos_, 2, "}}") == 0)
            end = pos_ + 2;
        } else {
          end = block_end_at(pos_, '%');
        }
        if (end != std::string::npos) {
          tokens_.push_back(
              Token{is_variable ? TokenType::var_end : TokenType::block_end, "", line_});
          finish_tag(end);
          return;
        }
      }
      if (size_t n = space_at(src_, pos_)) {
        line_ += src_[pos_] == '\n';
        pos_ += n;
        continue;
      }
      char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t start = pos_;
        while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
        tokens_.push_back(Token{TokenType::name, src_.substr(start, pos_ - start), line_});
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(balance);
      }
    }
  }

  // Digits with optional '_' separators between them.
  std::string digits(size_t& i, bool hex = false) const {
    std::string out;
    while (i < src_.size()) {
      char c = src_[i];
      if (is_digit(c) || (hex && hex_value(c) >= 0)) {
        out += c;
        ++i;
      } else if (c == '_' && !out.empty() && i + 1 < src_.size() &&
                 (is_digit(src_[i + 1]) || (hex && hex_value(src_[i + 1]) >= 0))) {
        ++i;
      } else {
        break;
      }
    }
    return out;
  }

  void lex_number() {
    size_t i = pos_;
    bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    if (src_[i] == '0' && i + 1 < src_.size() &&
        (src_[i + 1] == 'x' || src_[i + 1] == 'X' || src_[i + 1] == 'o' || src_[i + 1] == 'O' ||
         src_[i + 1] == 'b' || src_[i + 1] == 'B')) {
      char base_char = static_cast<char>(src_[i + 1] | 0x20);
      int base = base_char == 'x' ? 16 : (base_char == 'o' ? 8 : 2);
      i += 2;
      if (i < src_.size() && src_[i] == '_') ++i;
      std::string d = digits(i, base == 16);
      if (d.empty()) fail("invalid integer literal");
      push_integer(d, base, i);
      return;
    }
    std::string int_part = digits(i);
    std::string text = int_part;
    bool is_float = false;
    if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && is_digit(src_[i + 1])) {
      ++i;
      text += '.';
      text += digits(i);
      is_float = true;
    }
    if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      std::string exp_sign;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) exp_sign = src_[j++];
      if (j < src_.size() && is_digit(src_[j])) {
        std::string e = digits(j);
        text += "e" + exp_sign + e;
        i = j;
        is_float = true;
      }
    }
    if (is_float) {
      Token t{TokenType::floating, text, line_};
      t.float_value = std::strtod(text.c_str(), nullptr);
      tokens_.push_back(std::move(t));
      pos_ = i;
      return;
    }
    push_integer(int_part, 10, i);
  }

  void push_integer(const std::string& d, int base, size_t end) {
    errno = 0;
    char* stop = nullptr;
    long long v = std::strtoll(d.c_str(), &stop, base);
    if (errno == ERANGE) {
      DSPARK_FAIL(unsupported, "chat template line {}: integer literal {} is out of range", line_,
                  d);
    }
    Token t{TokenType::integer, d, line_};
    t.int_value = v;
    tokens_.push_back(std::move(t));
    pos_ = end;
  }

  // A Python string literal, decoded like jinja2 does (unicode-escape).
  void lex_string(char quote) {
    std::string value;
    size_t i = pos_ + 1;
    int start_line = line_;
    while (true) {
      if (i >= src_.size()) fail("unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail("unterminated string literal");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          ++line_;
          break;  // line continuation
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0) fail(fmt::format("truncated \\{} escape in a string literal", e));
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            fail("invalid code point escape in a string literal");
          }
          utf8::append(value, cp);
          i += n;
          break;
        }
        case 'N':
          DSPARK_FAIL(unsupported, "chat template line {}: \\N{{...}} escapes are not supported",
                      line_);
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[i++] - '0');
            }
            utf8::append(value, cp);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    tokens_.push_back(Token{TokenType::string, std::move(value), start_line});
    pos_ = i + 1;
  }

  void lex_operator(std::vector<char>& balance) {
    for (std::string_view op : kOperators) {
      if (src_.compare(pos_, op.size(), op) != 0) continue;
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) fail(fmt::format("unexpected '{}'", op));
        if (balance.back() != op[0]) {
          fail(fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
        }
        balance.pop_back();
      }
      tokens_.push_back(Token{TokenType::op, std::string(op), line_});
      pos_ += op.size();
      return;
    }
    fail(fmt::format("unexpected character '{}'", src_[pos_]));
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace dspark::jinja
