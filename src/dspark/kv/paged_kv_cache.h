// Paged KV cache: per layer a pool of fixed-size pages of K and V; each sequence owns a list of
// pages (its block table). Kernels see a batch's block tables as a plain CSR page table
// (ops/attention.h PagedKv). Running out of pages is an expected condition reported by status
// (reserve() returns false), not an exception.
//
// Prefix reuse: full pages of a finished prompt can be published into a prefix index keyed by
// their exact token contents and their parent page (the page holding the tokens before them), so
// a later sequence whose prompt starts with the same tokens attaches those pages instead of
// recomputing them. Pages are reference counted; a published page that no sequence holds stays
// cached until its memory is needed (least recently used leaves go first) and counts as free.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
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
  // One pool per layer that serves as both keys and values (v_pages(l) is k_pages(l)): MLA's
  // latent cache, one "head" per token of [normalised c_kv, roped k_rope] (model/mla.h).
  bool shared_kv = false;
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
  // Bytes of one page (K and V, every layer) of this shape.
  static size_t bytes_per_page(const KvCacheShape& shape);

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
  // Pages available to new tokens: never used, plus cached prefix pages no sequence holds.
  int free_pages() const { return static_cast<int>(free_list_.size()) + idle_cached_; }
  // Pages held by live sequences.
  int used_pages() const { return shape_.num_pages - free_pages(); }

  // Prefix reuse. attach_prefix: `seq` must be new (length 0). Attaches the longest run of
  // published full pages that equal tokens[0 .. n) page by page, with n <= max_tokens, sets the
  // length to n and returns n (a multiple of page_size; 0 when nothing matches).
  // `context` >= 0: a value the pages' contents also depend on besides their tokens (the MTP
  // source keys row i by token i + 1 and passes token 0 here); pages match only under the same
  // context. -1: none.
  int attach_prefix(SeqId seq, std::span<const int32_t> tokens, int max_tokens,
                    int32_t context = -1);
  // Publishes the full pages of tokens[0 .. n_tokens) of `seq` (whose KV must hold exactly those
  // tokens at those positions) for later attach_prefix calls under the same `context`. Pages
  // already published are kept; publishing stops at a page whose contents another page already
  // provides.
  void publish_prefix(SeqId seq, std::span<const int32_t> tokens, int n_tokens,
                      int32_t context = -1);
  // Published pages (held by sequences or idle).
  int cached_pages() const { return n_cached_; }

  // For a batch of rows: row r appends n_new[r] tokens to seqs[r] at positions
  // [length, length + n_new). Reserves pages (returns nullopt, changing nothing, when they run out)
  // and sets each sequence's length to length + n_new.
  std::optional<KvBatchPlan> plan(const std::vector<SeqId>& seqs, const std::vector<int>& n_new);

  // Layer l's pools: [num_pages, page_size, num_kv_heads, head_dim] (the same pool twice with
  // shared_kv).
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
  // A free page: the free list first, else the least recently used idle cached leaf (evicted).
  int32_t take_page();
  // One sequence lets go of page p.
  void drop_page(int32_t page);
  // Prefix index entry of a published page.
  struct CachedPage {
    bool cached = false;
    // Published page holding the previous page_size tokens; at the start -1, or -2 - context.
    int32_t parent = -1;
    int children = 0;  // published pages whose parent this is
    uint64_t last_use = 0;
    uint64_t key = 0;
    std::vector<int32_t> tokens;  // [page_size]
  };
  uint64_t prefix_key(int32_t parent, std::span<const int32_t> tokens) const;
  int32_t find_cached(int32_t parent, std::span<const int32_t> tokens) const;

  KvCacheShape shape_;
  Device device_;
  OwnedTensor k_;  // [num_layers, num_pages, page_size, num_kv_heads, head_dim]
  OwnedTensor v_;  // empty with shared_kv
  std::vector<int32_t> free_list_;
  std::vector<Sequence> seqs_;
  std::vector<SeqId> free_ids_;
  std::vector<int> refs_;                             // [num_pages] sequences holding each page
  std::vector<CachedPage> cache_;                     // [num_pages]
  std::unordered_multimap<uint64_t, int32_t> index_;  // prefix key -> published page
  int n_cached_ = 0;
  int idle_cached_ = 0;  // published pages with refs_ == 0
  uint64_t tick_ = 0;
};

}  // namespace dspark
