// Regular expressions for tokenizer.json patterns. The reference (Hugging Face tokenizers) runs
// them on Oniguruma (Ruby syntax, Unicode 16 properties); we compile them with PCRE2 (UTF + UCP,
// JIT) after translating the constructs whose meaning differs:
//   \s \S    -> Oniguruma's Unicode space set [\t-\r\x{85}\p{Z}] (PCRE2 adds U+180E via \h)
//   \d \w    -> \p{Nd} and [\p{L}\p{M}\p{Nd}\p{Pc}] (PCRE2's \w has \p{N}, no marks)
//   \h \H    -> hex digit (Ruby) instead of horizontal space (PCRE2)
//   \uHHHH   -> \x{HHHH}
//   \p{X}    -> \p{X} plus the code points X gained in Unicode 15.0-16.0 (tokenizer_unicode.h)
// Not translated (rare in tokenizer files, documented): negated shorthands inside a character
// class (\S, \W, \D, \P{..} within [...]) keep PCRE2's meaning; nested Oniguruma classes
// ([a-z&&[^x]]) are rejected as unsupported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dspark {

class Regex {
 public:
  // Throws ErrorKind::io when PCRE2 rejects the (translated) pattern.
  static Regex compile(std::string_view onig_pattern);
  // Matches `text` literally.
  static Regex literal(std::string_view text);

  // Appends [start, end) byte ranges of the successive non-overlapping matches in `text` (valid
  // UTF-8), leftmost-first like Oniguruma's find_iter; an empty match right after the previous
  // match is skipped, and the search advances one character after an empty match.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;
  bool matches_at_start(std::string_view text) const;  // an anchored match at offset 0
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  static std::shared_ptr<const Code> make_code(const std::string& pcre2_pattern, uint32_t options,
                                               std::string_view shown);
  std::shared_ptr<const Code> code_;
  std::string pattern_;  // as given (before translation)
};

// The PCRE2 pattern for an Oniguruma pattern (exposed for tests).
std::string translate_onig_pattern(std::string_view pattern);

}  // namespace dspark
