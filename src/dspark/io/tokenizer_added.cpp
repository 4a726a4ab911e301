// Added tokens: leftmost-longest matching with the lstrip / rstrip / single_word rules of
// tokenizers' AddedVocabulary::find_matches.
#include "dspark/io/tokenizer_internal.h"
#include "dspark/io/tokenizer_unicode.h"
#include "dspark/io/utf8.h"

namespace dspark::tokenizer_detail {
namespace {

// Rust regex's \w (Unicode word character), approximated by letters, marks, decimal digits and
// connector punctuation (it also counts Other_Alphabetic / Join_Control, which are rare here).
bool is_word_char(std::string_view ch) {
  static const Regex word = Regex::compile("\\w");
  return word.matches_at_start(ch);
}

std::string_view last_char(std::string_view text) {
  size_t i = text.size();
  while (i > 0 && (static_cast<unsigned char>(text[i - 1]) & 0xC0) == 0x80) --i;
  return text.substr(i > 0 ? i - 1 : 0);
}

std::string_view first_char(std::string_view text) {
  return text.substr(0, utf8::sequence_length(static_cast<unsigned char>(text[0])));
}

bool is_space_at(std::string_view text, size_t& i) {
  const int32_t cp = utf8::next(text, i);
  return cp >= 0 && unicode::is_white_space(static_cast<char32_t>(cp));
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  int32_t node = 0;
  for (const char c : token.content) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
    const auto it = edges_.find(key);
    if (it != edges_.end()) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(node_token_.size());
      node_token_.push_back(-1);
      edges_.emplace(key, child);
      node = child;
    }
  }
  first_byte_[static_cast<unsigned char>(token.content[0])] = true;
  if (node_token_[static_cast<size_t>(node)] >= 0) {  // same content again: the last one wins
    tokens_[static_cast<size_t>(node_token_[static_cast<size_t>(node)])] = token;
    return;
  }
  node_token_[static_cast<size_t>(node)] = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]);
    const auto it = edges_.find(key);
    if (it == edges_.end()) break;
    node = it->second;
    if (node_token_[static_cast<size_t>(node)] >= 0) {
      best = node_token_[static_cast<size_t>(node)];
      length = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    const int32_t index =
        first_byte_[static_cast<unsigned char>(text[pos])] ? longest_at(text, pos, length) : -1;
    if (index < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + length;
    pos = stop;  // the next search starts after this match, whatever happens to it
    const AddedToken& token = tokens_[static_cast<size_t>(index)];
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool stop_space = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      // Back over the whitespace that ends text[0, start).
      size_t new_start = 0;
      for (size_t i = 0; i < start;) {
        if (!is_space_at(text, i)) new_start = i;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      for (size_t i = stop; i < text.size();) {
        if (!is_space_at(text, i)) break;
        stop = i;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace dspark::tokenizer_detail
