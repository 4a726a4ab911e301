#include "dspark/kv/paged_kv_cache.h"

#include <algorithm>

namespace dspark {
namespace {

int pages_needed(int length, int page_size) {
  return (length + page_size - 1) / page_size;
}

size_t page_bytes(const KvCacheShape& shape) {
  // K and V (or the shared pool) of one page in every layer.
  return (shape.shared_kv ? 1 : 2) * static_cast<size_t>(shape.num_layers) *
         static_cast<size_t>(shape.page_size) * static_cast<size_t>(shape.num_kv_heads) *
         static_cast<size_t>(shape.head_dim) * dtype_size(shape.dtype);
}

void check_shape_valid(const KvCacheShape& shape) {
  DSPARK_CHECK_KIND(
      invalid_input,
      shape.num_layers > 0 && shape.num_kv_heads > 0 && shape.head_dim > 0 && shape.page_size > 0 &&
          shape.num_pages >= 0,
      "bad KV cache shape: {} layers, {} kv heads, head_dim {}, page_size {}, {} pages",
      shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.page_size, shape.num_pages);
  DSPARK_CHECK_KIND(invalid_input, dtype_is_float(shape.dtype), "KV cache dtype {} is not a float",
                    dtype_name(shape.dtype));
}

}  // namespace

PagedKvCache::PagedKvCache(const KvCacheShape& shape, Device device)
    : shape_(shape), device_(device) {
  check_shape_valid(shape);
  const Shape pool{shape.num_layers, shape.num_pages, shape.page_size, shape.num_kv_heads,
                   shape.head_dim};
  // Zeroed so that a kernel bug reading past kv_len sees zeros rather than NaN garbage.
  k_ = OwnedTensor::zeros(shape.dtype, pool, device);
  if (!shape.shared_kv) v_ = OwnedTensor::zeros(shape.dtype, pool, device);
  free_list_.reserve(static_cast<size_t>(shape.num_pages));
  // A stack: page 0 is handed out first.
  for (int p = shape.num_pages - 1; p >= 0; --p) free_list_.push_back(p);
  refs_.assign(static_cast<size_t>(shape.num_pages), 0);
  cache_.resize(static_cast<size_t>(shape.num_pages));
}

size_t PagedKvCache::bytes_per_page(const KvCacheShape& shape) {
  check_shape_valid(shape);
  return page_bytes(shape);
}

int PagedKvCache::pages_for_bytes(const KvCacheShape& shape, size_t bytes) {
  check_shape_valid(shape);
  return static_cast<int>(std::min<size_t>(bytes / page_bytes(shape), 1u << 30));
}

SeqId PagedKvCache::create_sequence() {
  if (!free_ids_.empty()) {
    const SeqId id = free_ids_.back();
    free_ids_.pop_back();
    seqs_[static_cast<size_t>(id)] = Sequence{true, 0, 0, {}};
    return id;
  }
  seqs_.push_back(Sequence{true, 0, 0, {}});
  return static_cast<SeqId>(seqs_.size() - 1);
}

PagedKvCache::Sequence& PagedKvCache::seq_ref(SeqId seq) {
  DSPARK_CHECK_KIND(
      invalid_input,
      seq >= 0 && static_cast<size_t>(seq) < seqs_.size() && seqs_[static_cast<size_t>(seq)].live,
      "unknown KV sequence {}", seq);
  return seqs_[static_cast<size_t>(seq)];
}

const PagedKvCache::Sequence& PagedKvCache::seq_ref(SeqId seq) const {
  return const_cast<PagedKvCache*>(this)->seq_ref(seq);
}

void PagedKvCache::release(SeqId seq) {
  Sequence& s = seq_ref(seq);
  for (auto it = s.pages.rbegin(); it != s.pages.rend(); ++it) drop_page(*it);
  s = Sequence{};
  free_ids_.push_back(seq);
}

void PagedKvCache::drop_page(int32_t page) {
  int& refs = refs_[static_cast<size_t>(page)];
  DSPARK_CHECK(refs > 0, "KV page {} released more often than it was taken", page);
  if (--refs > 0) return;
  if (cache_[static_cast<size_t>(page)].cached) {
    ++idle_cached_;
  } else {
    free_list_.push_back(page);
  }
}

int32_t PagedKvCache::take_page() {
  int32_t page = -1;
  if (!free_list_.empty()) {
    page = free_list_.back();
    free_list_.pop_back();
  } else {
    // Evict the least recently used idle leaf (a parent outlives its children, so that a key
    // never names a parent page that was reused for other tokens).
    uint64_t oldest = UINT64_MAX;
    for (size_t p = 0; p < cache_.size(); ++p) {
      const CachedPage& c = cache_[p];
      if (c.cached && refs_[p] == 0 && c.children == 0 && c.last_use < oldest) {
        oldest = c.last_use;
        page = static_cast<int32_t>(p);
      }
    }
    DSPARK_CHECK(page >= 0, "KV cache: no free page although {} were counted free", free_pages());
    CachedPage& c = cache_[static_cast<size_t>(page)];
    const auto [lo, hi] = index_.equal_range(c.key);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == page) {
        index_.erase(it);
        break;
      }
    }
    if (c.parent >= 0) --cache_[static_cast<size_t>(c.parent)].children;
    c = CachedPage{};
    --n_cached_;
    --idle_cached_;
  }
  refs_[static_cast<size_t>(page)] = 1;
  return page;
}

bool PagedKvCache::grow(Sequence& s, int length) {
  const int need = pages_needed(length, shape_.page_size) - static_cast<int>(s.pages.size());
  if (need > free_pages()) return false;
  for (int i = 0; i < need; ++i) s.pages.push_back(take_page());
  return true;
}

uint64_t PagedKvCache::prefix_key(int32_t parent, std::span<const int32_t> tokens) const {
  // FNV-1a over the parent page and the tokens; entries are verified token by token on lookup.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint32_t v) {
    for (int b = 0; b < 4; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint32_t>(parent));
  for (int32_t t : tokens) mix(static_cast<uint32_t>(t));
  return h;
}

int32_t PagedKvCache::find_cached(int32_t parent, std::span<const int32_t> tokens) const {
  const auto [lo, hi] = index_.equal_range(prefix_key(parent, tokens));
  for (auto it = lo; it != hi; ++it) {
    const CachedPage& c = cache_[static_cast<size_t>(it->second)];
    if (c.parent == parent && std::equal(tokens.begin(), tokens.end(), c.tokens.begin()))
      return it->second;
  }
  return -1;
}

namespace {

// The parent of a prefix's first page: -1, or below it for a context (never a page index).
int32_t root_parent(int32_t context) {
  DSPARK_CHECK_KIND(invalid_input, context >= -1 && context < (int32_t{1} << 30),
                    "prefix context {} out of range", context);
  return context < 0 ? -1 : -2 - context;
}

}  // namespace

int PagedKvCache::attach_prefix(SeqId seq, std::span<const int32_t> tokens, int max_tokens,
                                int32_t context) {
  Sequence& s = seq_ref(seq);
  DSPARK_CHECK_KIND(invalid_input, s.length == 0 && s.pages.empty(),
                    "attach_prefix: sequence {} is not new", seq);
  const int ps = shape_.page_size;
  const int limit = std::min(max_tokens, static_cast<int>(tokens.size()));
  int32_t parent = root_parent(context);
  int n = 0;
  while (n + ps <= limit) {
    const int32_t page = find_cached(parent, tokens.subspan(static_cast<size_t>(n), ps));
    if (page < 0) break;
    if (refs_[static_cast<size_t>(page)]++ == 0) --idle_cached_;
    cache_[static_cast<size_t>(page)].last_use = ++tick_;
    s.pages.push_back(page);
    parent = page;
    n += ps;
  }
  s.length = n;
  return n;
}

void PagedKvCache::publish_prefix(SeqId seq, std::span<const int32_t> tokens, int n_tokens,
                                  int32_t context) {
  const Sequence& s = seq_ref(seq);
  const int ps = shape_.page_size;
  DSPARK_CHECK_KIND(
      invalid_input,
      n_tokens >= 0 && n_tokens <= static_cast<int>(tokens.size()) && n_tokens <= s.length,
      "publish_prefix: {} tokens of sequence {} (length {}, {} tokens given)", n_tokens, seq,
      s.length, tokens.size());
  int32_t parent = root_parent(context);
  for (int i = 0; (i + 1) * ps <= n_tokens; ++i) {
    const int32_t page = s.pages[static_cast<size_t>(i)];
    CachedPage& c = cache_[static_cast<size_t>(page)];
    const auto block = tokens.subspan(static_cast<size_t>(i) * ps, static_cast<size_t>(ps));
    if (!c.cached) {
      // Another sequence published the same tokens first: keep its pages, stop here.
      if (find_cached(parent, block) >= 0) return;
      c.cached = true;
      c.parent = parent;
      c.children = 0;
      c.tokens.assign(block.begin(), block.end());
      c.key = prefix_key(parent, block);
      index_.emplace(c.key, page);
      if (parent >= 0) ++cache_[static_cast<size_t>(parent)].children;
      ++n_cached_;
    }
    c.last_use = ++tick_;
    parent = page;
  }
}

bool PagedKvCache::reserve(SeqId seq, int length) {
  DSPARK_CHECK_KIND(invalid_input, length >= 0, "reserve: negative length {}", length);
  Sequence& s = seq_ref(seq);
  if (!grow(s, length)) return false;
  s.reserved_pages = std::max(s.reserved_pages, pages_needed(length, shape_.page_size));
  return true;
}

int PagedKvCache::pages_for_tokens(int length) const {
  return pages_needed(std::max(0, length), shape_.page_size);
}

void PagedKvCache::rollback_to(SeqId seq, int length) {
  Sequence& s = seq_ref(seq);
  DSPARK_CHECK_KIND(invalid_input, length >= 0 && length <= s.length,
                    "rollback_to({}) of sequence {} with length {}", length, seq, s.length);
  s.length = length;
  const size_t keep =
      static_cast<size_t>(std::max(pages_needed(length, shape_.page_size), s.reserved_pages));
  while (s.pages.size() > keep) {
    drop_page(s.pages.back());
    s.pages.pop_back();
  }
}

int PagedKvCache::length(SeqId seq) const {
  return seq_ref(seq).length;
}

std::optional<KvBatchPlan> PagedKvCache::plan(const std::vector<SeqId>& seqs,
                                              const std::vector<int>& n_new) {
  DSPARK_CHECK_KIND(invalid_input, seqs.size() == n_new.size(), "plan: {} sequences, {} counts",
                    seqs.size(), n_new.size());
  // Validate everything and count the pages first, so that failure changes nothing.
  int need_total = 0;
  for (size_t r = 0; r < seqs.size(); ++r) {
    const Sequence& s = seq_ref(seqs[r]);
    DSPARK_CHECK_KIND(invalid_input, n_new[r] >= 0, "plan: row {} appends {} tokens", r, n_new[r]);
    for (size_t q = 0; q < r; ++q) {
      DSPARK_CHECK_KIND(invalid_input, seqs[q] != seqs[r],
                        "plan: sequence {} appears in rows {} and {}", seqs[r], q, r);
    }
    const int need = pages_needed(s.length + n_new[r], shape_.page_size);
    need_total += std::max(0, need - static_cast<int>(s.pages.size()));
  }
  if (need_total > free_pages()) return std::nullopt;

  KvBatchPlan plan;
  const size_t n_rows = seqs.size();
  plan.page_indptr.reserve(n_rows + 1);
  plan.kv_lens.reserve(n_rows);
  plan.page_indptr.push_back(0);
  const int ps = shape_.page_size;
  for (size_t r = 0; r < n_rows; ++r) {
    Sequence& s = seq_ref(seqs[r]);
    const bool ok = grow(s, s.length + n_new[r]);
    DSPARK_CHECK(ok, "plan: page allocation failed after the page count was checked");
    for (int t = s.length; t < s.length + n_new[r]; ++t) {
      plan.slots.push_back(s.pages[static_cast<size_t>(t / ps)] * ps + t % ps);
    }
    s.length += n_new[r];
    // Only the pages holding valid tokens are visible to the kernels.
    const int n_pages = pages_needed(s.length, ps);
    plan.page_indices.insert(plan.page_indices.end(), s.pages.begin(), s.pages.begin() + n_pages);
    plan.page_indptr.push_back(static_cast<int32_t>(plan.page_indices.size()));
    plan.kv_lens.push_back(s.length);
  }
  return plan;
}

Tensor PagedKvCache::k_pages(int layer) const {
  DSPARK_CHECK(layer >= 0 && layer < shape_.num_layers, "k_pages: layer {} of {}", layer,
               shape_.num_layers);
  return k_.view().select(0, layer);
}

Tensor PagedKvCache::v_pages(int layer) const {
  DSPARK_CHECK(layer >= 0 && layer < shape_.num_layers, "v_pages: layer {} of {}", layer,
               shape_.num_layers);
  return (shape_.shared_kv ? k_ : v_).view().select(0, layer);
}

}  // namespace dspark
