#define PCRE2_CODE_UNIT_WIDTH 8
#include "dspark/io/tokenizer_regex.h"

#include <pcre2.h>

#include "dspark/core/error.h"
#include "dspark/io/tokenizer_unicode.h"
#include "dspark/io/utf8.h"

namespace dspark {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

constexpr std::string_view kSpaceItems = "\\t-\\r\\x{85}\\p{Z}";

// Class items (no brackets) for \p{name}: the PCRE2 property plus the Unicode 15-16 additions.
std::string property_items(std::string_view name) {
  std::string items = "\\p{" + std::string(name) + "}";
  items += unicode::category_delta(name);
  return items;
}

std::string word_items() {
  return property_items("L") + property_items("M") + property_items("Nd") + property_items("Pc");
}

// Per-thread match state: match data and a JIT stack larger than PCRE2's 32 KiB default.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(8, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string translate_onig_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      // Items for the shorthand, and whether it is negated.
      std::string items;
      bool negated = false;
      size_t consumed = 2;
      switch (e) {
        case 's':
          items = kSpaceItems;
          break;
        case 'S':
          items = kSpaceItems, negated = true;
          break;
        case 'd':
          items = property_items("Nd");
          break;
        case 'D':
          items = property_items("Nd"), negated = true;
          break;
        case 'w':
          items = word_items();
          break;
        case 'W':
          items = word_items(), negated = true;
          break;
        case 'h':
          items = "0-9a-fA-F";
          break;
        case 'H':
          items = "0-9a-fA-F", negated = true;
          break;
        case 'p':
        case 'P': {
          std::string name;
          if (i + 2 < p.size() && p[i + 2] == '{') {
            const size_t close = p.find('}', i + 3);
            DSPARK_CHECK_KIND(io, close != std::string_view::npos, "unterminated \\p{{ in regex");
            name = std::string(p.substr(i + 3, close - i - 3));
            consumed = close - i + 1;
          } else if (i + 2 < p.size()) {
            name = std::string(1, p[i + 2]);
            consumed = 3;
          }
          negated = e == 'P';
          if (!name.empty() && name[0] == '^') {
            name.erase(0, 1);
            negated = !negated;
          }
          items = property_items(name);
          break;
        }
        case 'u': {
          if (i + 6 <= p.size() && p.substr(i + 2, 4).find_first_not_of("0123456789abcdefABCDEF") ==
                                       std::string_view::npos) {
            out += "\\x{" + std::string(p.substr(i + 2, 4)) + "}";
            i += 6;
            continue;
          }
          break;
        }
        default:
          break;
      }
      if (items.empty()) {
        out.append(p.substr(i, 2));
        i += 2;
        continue;
      }
      if (!in_class) {
        out += negated ? "[^" : "[";
        out += items;
        out += "]";
      } else if (!negated) {
        out += items;
      } else {
        out.append(p.substr(i, consumed));  // PCRE2's own meaning (see header)
      }
      i += consumed;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[') {
      if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]
        const size_t close = p.find(":]", i + 2);
        DSPARK_CHECK_KIND(io, close != std::string_view::npos, "unterminated POSIX class");
        out.append(p.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
      DSPARK_FAIL(unsupported, "nested character classes are not supported in regex '{}'", p);
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

std::shared_ptr<const Regex::Code> Regex::make_code(const std::string& pcre2_pattern,
                                                    uint32_t options, std::string_view shown) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()), pcre2_pattern.size(),
                    PCRE2_UTF | options, &error_code, &error_offset, context);
  pcre2_compile_context_free(context);
  DSPARK_CHECK_KIND(io, code != nullptr, "invalid regex '{}': {} at offset {}", shown,
                    pcre2_message(error_code), error_offset);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  auto result = std::make_shared<Code>();
  result->code = code;
  return result;
}

Regex Regex::compile(std::string_view onig_pattern) {
  Regex regex;
  regex.pattern_ = std::string(onig_pattern);
  // Oniguruma's Ruby syntax: ^ and $ are line anchors.
  regex.code_ =
      make_code(translate_onig_pattern(onig_pattern), PCRE2_UCP | PCRE2_MULTILINE, onig_pattern);
  return regex;
}

Regex Regex::literal(std::string_view text) {
  Regex regex;
  regex.pattern_ = std::string(text);
  regex.code_ = make_code(std::string(text), PCRE2_LITERAL, text);
  return regex;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  MatchState& state = match_state();
  pcre2_match_data* md = state.data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t previous_end = std::string_view::npos;
  while (pos <= text.size()) {
    const int rc =
        pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    DSPARK_CHECK_KIND(invalid_input, rc >= 0, "regex '{}' failed: {}", pattern_, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (start == end) {
      if (start != previous_end) matches.emplace_back(start, end);
      if (start >= text.size()) break;
      pos = start + utf8::sequence_length(static_cast<unsigned char>(text[start]));
      continue;
    }
    matches.emplace_back(start, end);
    previous_end = end;
    pos = end;
  }
}

bool Regex::matches_at_start(std::string_view text) const {
  MatchState& state = match_state();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                             PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, state.data, state.context);
  return rc >= 0;
}

}  // namespace dspark
