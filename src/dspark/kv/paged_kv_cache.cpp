#include "dspark/kv/paged_kv_cache.h"

#include <algorithm>

namespace dspark {
namespace {

int pages_needed(int length, int page_size) {
  return (length + page_size - 1) / page_size;
}

size_t page_bytes(const KvCacheShape& shape) {
  // K and V of one page in every layer.
  return 2 * static_cast<size_t>(shape.num_layers) * static_cast<size_t>(shape.page_size) *
         static_cast<size_t>(shape.num_kv_heads) * static_cast<size_t>(shape.head_dim) *
         dtype_size(shape.dtype);
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
  v_ = OwnedTensor::zeros(shape.dtype, pool, device);
  free_list_.reserve(static_cast<size_t>(shape.num_pages));
  // A stack: page 0 is handed out first.
  for (int p = shape.num_pages - 1; p >= 0; --p) free_list_.push_back(p);
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
  free_list_.insert(free_list_.end(), s.pages.rbegin(), s.pages.rend());
  s = Sequence{};
  free_ids_.push_back(seq);
}

bool PagedKvCache::grow(Sequence& s, int length) {
  const int need = pages_needed(length, shape_.page_size) - static_cast<int>(s.pages.size());
  if (need > free_pages()) return false;
  for (int i = 0; i < need; ++i) {
    s.pages.push_back(free_list_.back());
    free_list_.pop_back();
  }
  return true;
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
    free_list_.push_back(s.pages.back());
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
  return v_.view().select(0, layer);
}

}  // namespace dspark
