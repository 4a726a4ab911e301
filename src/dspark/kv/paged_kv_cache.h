// Paged KV cache: per layer a pool of fixed-size pages of K and V; each sequence owns a list of
// pages (its block table). Kernels see a batch's block tables as a plain CSR page table
// (ops/attention.h PagedKv). Running out of pages is an expected condition reported by status
// (reserve() returns false), not an exception.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/ops/attention.h"

namespace dspark {

using SeqId = int32_t;

struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::f32;
  int page_size = 16;  // tokens per page
  int num_pages = 0;   // pages per layer pool
};

// Host-side description of one forward batch's view of the cache, built by PagedKvCache::plan and
// uploaded by the model as one packed i32 buffer.
struct KvBatchPlan {
  std::vector<int32_t> slots;         // [n_tokens] page * page_size + offset of each new token
  std::vector<int32_t> page_indptr;   // [n_rows + 1]
  std::vector<int32_t> page_indices;  // [page_indptr.back()]
  std::vector<int32_t> kv_lens;       // [n_rows] valid tokens per row after this batch's writes
};

class PagedKvCache {
 public:
  PagedKvCache(const KvCacheShape& shape, Device device);
  // Pages that fit in `bytes` for this shape (for sizing from a memory budget).
  static int pages_for_bytes(const KvCacheShape& shape, size_t bytes);

  const KvCacheShape& shape() const { return shape_; }
  Device device() const { return device_; }

  SeqId create_sequence();
  // Frees the sequence's pages; the id becomes invalid.
  void release(SeqId seq);
  // Ensures capacity for `length` tokens and keeps it reserved for the sequence until release()
  // (rollback_to never frees below it); false (and no change) when pages run out.
  [[nodiscard]] bool reserve(SeqId seq, int length);
  // Pages that reserving `length` tokens for a new sequence takes.
  int pages_for_tokens(int length) const;
  // Drops tokens >= length (length <= current length) and frees pages no longer needed (keeping
  // the reserved capacity).
  void rollback_to(SeqId seq, int length);
  int length(SeqId seq) const;
  int free_pages() const { return static_cast<int>(free_list_.size()); }
  int used_pages() const { return shape_.num_pages - free_pages(); }

  // For a batch of rows: row r appends n_new[r] tokens to seqs[r] at positions
  // [length, length + n_new). Reserves pages (returns nullopt, changing nothing, when they run out)
  // and sets each sequence's length to length + n_new.
  std::optional<KvBatchPlan> plan(const std::vector<SeqId>& seqs, const std::vector<int>& n_new);

  // Layer l's pools: [num_pages, page_size, num_kv_heads, head_dim].
  Tensor k_pages(int layer) const;
  Tensor v_pages(int layer) const;

 private:
  struct Sequence {
    bool live = false;
    int length = 0;
    int reserved_pages = 0;  // floor kept by rollback_to
    std::vector<int32_t> pages;
  };
  Sequence& seq_ref(SeqId seq);
  const Sequence& seq_ref(SeqId seq) const;
  // Takes pages from the free list until `s` holds `length` tokens; false (no change) if short.
  bool grow(Sequence& s, int length);

  KvCacheShape shape_;
  Device device_;
  OwnedTensor k_;  // [num_layers, num_pages, page_size, num_kv_heads, head_dim]
  OwnedTensor v_;
  std::vector<int32_t> free_list_;
  std::vector<Sequence> seqs_;
  std::vector<SeqId> free_ids_;
};

}  // namespace dspark
