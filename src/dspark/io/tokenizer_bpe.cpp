// The BPE model of tokenizer.json: merges applied by rank (lowest first, leftmost on ties) with a
// linked list of symbols and a min-heap of candidate pairs, byte fallback, and a word cache.
#include <algorithm>
#include <bit>
#include <functional>

#include "dspark/core/error.h"
#include "dspark/io/tokenizer_internal.h"
#include "dspark/io/utf8.h"

namespace dspark::tokenizer_detail {

// Open-addressing hash map (left id, right id) -> (rank, merged id).
struct BpeModel::PairMap {
  struct Slot {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    int32_t merged = -1;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<Slot> slots;
  uint64_t mask = 0;
  int shift = 64;

  explicit PairMap(size_t n) {
    size_t capacity = 16;
    while (capacity < n * 2) capacity *= 2;
    slots.resize(capacity);
    mask = capacity - 1;
    shift = 64 - std::countr_zero(capacity);
  }
  static uint64_t key_of(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  size_t home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift; }
  void insert(uint64_t key, uint32_t rank, int32_t merged) {  // a repeated pair: the last wins
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == kEmpty || slots[i].key == key) {
        slots[i] = {key, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int32_t a, int32_t b) const {
    const uint64_t key = key_of(a, b);
    for (size_t i = home(key);; i = (i + 1) & mask) {
      if (slots[i].key == key) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

// Results for short words (like tokenizers: words under 256 bytes, up to 10,000 entries).
struct BpeModel::Cache {
  static constexpr size_t kMaxWordBytes = 256;
  static constexpr size_t kCapacity = 10000;
  std::mutex mutex;
  StringMap<std::vector<int32_t>> words;
};

namespace {

std::string optional_string(const Json& json, const char* name) {
  if (!json.contains(name) || json.at(name).is_null()) return {};
  return json.at(name).get<std::string>();
}

uint64_t hash_of(std::string_view s) {
  return std::hash<std::string_view>{}(s);
}

}  // namespace

BpeModel::BpeModel(const Json& model, TokenizerJson& data) : cache_(std::make_unique<Cache>()) {
  const std::string type = model.contains("type") ? model.at("type").get<std::string>() : "BPE";
  DSPARK_CHECK_KIND(unsupported, type == "BPE", "model type '{}' is not supported (only BPE)",
                    type);
  if (model.contains("dropout") && !model.at("dropout").is_null()) {
    DSPARK_CHECK_KIND(unsupported, model.at("dropout").get<double>() == 0.0,
                      "BPE dropout is not supported");
  }
  DSPARK_CHECK_KIND(io, data.has_vocab, "model has no \"vocab\" object");
  DSPARK_CHECK_KIND(io, data.has_merges, "model has no \"merges\" array");

  // Vocabulary (a repeated token: the last one wins, as in a JSON object).
  size_t capacity = 16;
  while (capacity < data.vocab.size() * 2) capacity *= 2;
  index_.assign(capacity, 0);
  index_mask_ = capacity - 1;
  tokens_.reserve(data.vocab.size());
  token_ids_.reserve(data.vocab.size());
  int32_t max_id = -1;
  for (auto& [token, id] : data.vocab) {
    const uint64_t h = hash_of(token);
    size_t i = h & index_mask_;
    for (; index_[i] != 0; i = (i + 1) & index_mask_) {
      const auto k = static_cast<size_t>((index_[i] & 0xFFFFFFFFu) - 1);
      if ((index_[i] >> 32) == (h >> 32) && tokens_[k] == token) break;
    }
    if (index_[i] != 0) {
      token_ids_[static_cast<size_t>((index_[i] & 0xFFFFFFFFu) - 1)] = id;
    } else {
      index_[i] = ((h >> 32) << 32) | (tokens_.size() + 1);
      tokens_.push_back(std::move(token));
      token_ids_.push_back(id);
    }
    max_id = std::max(max_id, id);
  }
  data.vocab.clear();
  id_to_token_.assign(static_cast<size_t>(max_id + 1), -1);
  for (size_t k = 0; k < tokens_.size(); ++k)
    id_to_token_[static_cast<size_t>(token_ids_[k])] = static_cast<int32_t>(k);

  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    unk_id_ = token_to_id(unk);
    DSPARK_CHECK_KIND(io, unk_id_ >= 0, "unk_token '{}' is not in the vocabulary", unk);
  }
  fuse_unk_ = bool_field(model, "fuse_unk", false);
  byte_fallback_ = bool_field(model, "byte_fallback", false);
  ignore_merges_ = bool_field(model, "ignore_merges", false);
  continuing_subword_prefix_ = optional_string(model, "continuing_subword_prefix");
  end_of_word_suffix_ = optional_string(model, "end_of_word_suffix");
  for (int b = 0; b < 256; ++b) byte_ids_[b] = token_to_id(fmt::format("<0x{:02X}>", b));

  merges_ = std::make_unique<PairMap>(data.merges.size());
  std::string merged;
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const auto& [a, b] = data.merges[rank];
    const int32_t a_id = token_to_id(a), b_id = token_to_id(b);
    DSPARK_CHECK_KIND(io, a_id >= 0, "merge {} ('{} {}'): '{}' is not in the vocabulary", rank, a,
                      b, a);
    DSPARK_CHECK_KIND(io, b_id >= 0, "merge {} ('{} {}'): '{}' is not in the vocabulary", rank, a,
                      b, b);
    const size_t prefix = std::min(continuing_subword_prefix_.size(), b.size());
    merged.assign(a);
    merged.append(b, prefix, std::string::npos);
    const int32_t merged_id = token_to_id(merged);
    DSPARK_CHECK_KIND(io, merged_id >= 0, "merge {}: '{}' is not in the vocabulary", rank, merged);
    merges_->insert(PairMap::key_of(a_id, b_id), static_cast<uint32_t>(rank), merged_id);
  }
  data.merges.clear();
}

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

int32_t BpeModel::token_to_id(std::string_view token) const {
  const uint64_t h = hash_of(token);
  for (size_t i = h & index_mask_; index_[i] != 0; i = (i + 1) & index_mask_) {
    if ((index_[i] >> 32) != (h >> 32)) continue;
    const auto k = static_cast<size_t>((index_[i] & 0xFFFFFFFFu) - 1);
    if (tokens_[k] == token) return token_ids_[k];
  }
  return -1;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const int32_t k = id_to_token_[static_cast<size_t>(id)];
  return k < 0 ? nullptr : &tokens_[static_cast<size_t>(k)];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t id = token_to_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() < Cache::kMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    const auto it = cache_->words.find(word);
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_->mutex);
    if (cache_->words.size() < Cache::kCapacity)
      cache_->words.emplace(std::string(word),
                            std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word covered; 0 once merged into the left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, size_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, static_cast<uint32_t>(len)});
  };

  // Initial symbols: one per character (unknown characters: byte fallback, else unk).
  int32_t unk_pending = -1;
  size_t unk_len = 0;
  std::string key;
  for (size_t i = 0; i < word.size();) {
    const size_t n = utf8::sequence_length(static_cast<unsigned char>(word[i]));
    const std::string_view ch = word.substr(i, n);
    const bool is_first = i == 0, is_last = i + n >= word.size();
    i += n;
    int32_t id;
    if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
      id = token_to_id(ch);
    } else {
      key.clear();
      if (!is_first) key += continuing_subword_prefix_;
      key += ch;
      if (is_last) key += end_of_word_suffix_;
      id = token_to_id(key);
    }
    if (id >= 0) {
      if (unk_pending >= 0) {
        add(unk_pending, unk_len);
        unk_pending = -1;
      }
      add(id, ch.size());
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : ch) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (unk_pending >= 0 && fuse_unk_) {
        unk_len += ch.size();
      } else {
        if (unk_pending >= 0) add(unk_pending, unk_len);
        unk_pending = unk_id_;
        unk_len = ch.size();
      }
    }
  }
  if (unk_pending >= 0) add(unk_pending, unk_len);
  if (symbols.empty()) return;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
  };
  // std heap functions build a max-heap; "greater" puts the lowest (rank, pos) on top.
  auto later = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::vector<Candidate> heap;
  heap.reserve(symbols.size());
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto* m = merges_->find(symbols[i].id, symbols[i + 1].id))
      heap.push_back({m->rank, static_cast<int32_t>(i), m->merged});
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.len == 0 || left.next < 0) continue;
    const Symbol right = symbols[static_cast<size_t>(left.next)];
    const auto* current = merges_->find(left.id, right.id);
    if (current == nullptr || current->merged != top.merged) continue;  // stale
    symbols[static_cast<size_t>(left.next)].len = 0;
    left.id = top.merged;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const auto* m = merges_->find(symbols[static_cast<size_t>(left.prev)].id, left.id)) {
        heap.push_back({m->rank, left.prev, m->merged});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (left.next >= 0) {
      if (const auto* m = merges_->find(left.id, symbols[static_cast<size_t>(left.next)].id)) {
        heap.push_back({m->rank, top.pos, m->merged});
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next)
    out.push_back(symbols[static_cast<size_t>(i)].id);
}

}  // namespace dspark::tokenizer_detail
