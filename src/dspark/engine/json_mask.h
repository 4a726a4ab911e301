// Structured output's token masks (ops/token_mask.h bit rows) for a matcher's state, cached by
// state: the tokens that continue the document, EOS exactly when it is complete, nothing past the
// tokenizer's vocabulary. Walking the vocabulary's trie costs milliseconds per mask (most inside
// strings, where almost every token continues); states repeat (each character of a string
// leaves the same state), so a small cache serves most positions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dspark/engine/json_matcher.h"

namespace dspark {

class JsonMaskCache {
 public:
  // Masks kept at most (each token_mask_words(model_vocab) words: 19 KB for 152k tokens); the
  // least recently used one makes room.
  static constexpr size_t kDefaultCapacity = 16;
  explicit JsonMaskCache(size_t capacity = kDefaultCapacity);

  // The mask of a [., model_vocab] logits row for state `m` of constraint `c` (one constraint per
  // cache; entries by state and width): valid until the next call. Throws internal when no token
  // may follow (a vocabulary without the bytes the document needs).
  std::span<const uint32_t> mask(const JsonConstraint& c, int64_t model_vocab,
                                 const JsonMatcher& m);

  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  struct Entry {
    std::string key;
    std::vector<uint32_t> words;
    uint64_t used = 0;
  };
  size_t capacity_;
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;  // key -> entries_ index
  std::string key_;                                // scratch
  uint64_t clock_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace dspark
