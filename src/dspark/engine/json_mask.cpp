#include "dspark/engine/json_mask.h"

#include <algorithm>

#include "dspark/core/error.h"
#include "dspark/ops/token_mask.h"

namespace dspark {

JsonMaskCache::JsonMaskCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

std::span<const uint32_t> JsonMaskCache::mask(const JsonConstraint& c, int64_t model_vocab,
                                              const JsonMatcher& m) {
  const TokenVocab& vocab = *c.vocab;
  const auto words = static_cast<size_t>(token_mask_words(model_vocab));
  m.state_key(key_);
  // Keyed by the logits width too: a drafter's logits may be wider than the target's.
  key_.append(reinterpret_cast<const char*>(&model_vocab), sizeof(model_vocab));
  ++clock_;
  size_t slot = entries_.size();
  if (const auto it = index_.find(key_); it != index_.end()) {
    Entry& e = entries_[it->second];
    ++hits_;
    e.used = clock_;
    return e.words;
  }
  if (slot < capacity_) {
    entries_.emplace_back();
  } else {
    slot = static_cast<size_t>(
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.used < b.used; }) -
        entries_.begin());
    index_.erase(entries_[slot].key);
  }
  ++misses_;
  Entry& e = entries_[slot];
  e.key = key_;
  e.used = clock_;
  e.words.resize(words);
  // Bits past the tokenizer's vocabulary stay clear: ids the tokenizer never produces.
  vocab.allowed_tokens(m, e.words);
  const bool complete = m.complete();
  for (const int32_t id : c.eos) {
    if (id < 0 || id >= model_vocab) continue;
    const uint32_t bit = 1u << (id % 32);
    auto& w = e.words[static_cast<size_t>(id / 32)];
    w = complete ? (w | bit) : (w & ~bit);
  }
  if (std::none_of(e.words.begin(), e.words.end(), [](uint32_t w) { return w != 0; })) {
    index_.erase(e.key);
    e.key.clear();  // never a state's key: the slot is free
    DSPARK_FAIL(internal,
                "structured output: no token of the vocabulary continues the JSON document");
  }
  index_[e.key] = slot;
  return e.words;
}

}  // namespace dspark
