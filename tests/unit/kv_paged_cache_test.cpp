#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "dspark/kv/paged_kv_cache.h"

namespace dspark {
namespace {

KvCacheShape small_shape(int num_pages, int page_size = 4) {
  KvCacheShape s;
  s.num_layers = 2;
  s.num_kv_heads = 2;
  s.head_dim = 8;
  s.dtype = DType::f32;
  s.page_size = page_size;
  s.num_pages = num_pages;
  return s;
}

// The pages of row r in a plan, decoded back to (page, offset) for token t: an independent
// recomputation of the slot arithmetic the kernels rely on.
int32_t slot_of(const KvBatchPlan& plan, int row, int token, int page_size) {
  const int32_t page =
      plan.page_indices[static_cast<size_t>(plan.page_indptr[row] + token / page_size)];
  return page * page_size + token % page_size;
}

TEST(PagedKvCache, ReserveRollbackReleaseReturnPages) {
  PagedKvCache kv(small_shape(8), Device::cpu());
  EXPECT_EQ(kv.free_pages(), 8);
  const SeqId a = kv.create_sequence();
  const SeqId b = kv.create_sequence();
  EXPECT_NE(a, b);
  EXPECT_EQ(kv.length(a), 0);

  EXPECT_TRUE(kv.reserve(a, 9));  // 3 pages
  EXPECT_EQ(kv.used_pages(), 3);
  EXPECT_EQ(kv.length(a), 0);     // reserving does not change the length
  EXPECT_TRUE(kv.reserve(a, 5));  // already enough
  EXPECT_EQ(kv.used_pages(), 3);
  EXPECT_TRUE(kv.reserve(b, 20));  // 5 pages: exactly the rest
  EXPECT_EQ(kv.free_pages(), 0);
  EXPECT_FALSE(kv.reserve(b, 21));  // would need a 6th page
  EXPECT_EQ(kv.free_pages(), 0);

  // Give a a length through plan, then roll back: reserved pages stay with the sequence.
  kv.release(b);
  EXPECT_EQ(kv.free_pages(), 5);
  auto plan = kv.plan({a}, {9});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(kv.length(a), 9);
  EXPECT_EQ(kv.used_pages(), 3);
  kv.rollback_to(a, 4);
  EXPECT_EQ(kv.length(a), 4);
  EXPECT_EQ(kv.used_pages(), 3);  // the reservation (9 tokens) is a floor

  // A sequence without a reservation grows through plan and shrinks with rollback_to.
  const SeqId g = kv.create_sequence();
  ASSERT_TRUE(kv.plan({g}, {9}).has_value());
  EXPECT_EQ(kv.used_pages(), 6);
  kv.rollback_to(g, 8);  // 8 tokens fit in 2 pages
  EXPECT_EQ(kv.length(g), 8);
  EXPECT_EQ(kv.used_pages(), 5);
  kv.rollback_to(g, 5);
  EXPECT_EQ(kv.used_pages(), 5);
  kv.rollback_to(g, 4);
  EXPECT_EQ(kv.used_pages(), 4);
  kv.rollback_to(g, 0);
  EXPECT_EQ(kv.used_pages(), 3);
  kv.release(g);
  kv.rollback_to(a, 0);
  EXPECT_EQ(kv.used_pages(), 3);
  EXPECT_THROW(kv.rollback_to(a, 1), Error);  // beyond the length
  kv.release(a);
  EXPECT_EQ(kv.free_pages(), 8);
  EXPECT_THROW(kv.length(a), Error);  // released ids are invalid
  EXPECT_THROW(kv.release(a), Error);
  EXPECT_THROW(kv.length(123), Error);

  // Ids are reused; every page is handed out exactly once.
  const SeqId c = kv.create_sequence();
  const SeqId d = kv.create_sequence();
  ASSERT_TRUE(kv.plan({c, d}, {16, 16}).has_value());
  EXPECT_EQ(kv.free_pages(), 0);
}

TEST(PagedKvCache, PlanLayoutIsCsrWithSlots) {
  const int ps = 4;
  PagedKvCache kv(small_shape(16, ps), Device::cpu());
  const SeqId a = kv.create_sequence();
  const SeqId b = kv.create_sequence();
  const SeqId c = kv.create_sequence();
  auto p1 = kv.plan({a, b}, {6, 3});
  ASSERT_TRUE(p1.has_value());
  EXPECT_EQ(p1->slots.size(), 9u);
  EXPECT_EQ(p1->page_indptr, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(p1->kv_lens, (std::vector<int32_t>{6, 3}));
  for (int t = 0; t < 6; ++t) EXPECT_EQ(p1->slots[t], slot_of(*p1, 0, t, ps));
  for (int t = 0; t < 3; ++t) EXPECT_EQ(p1->slots[6 + t], slot_of(*p1, 1, t, ps));

  // Second step: rows in another order, one row empty, one new sequence; slots continue at the
  // previous lengths and the page lists are stable.
  const std::vector<int32_t> a_pages(p1->page_indices.begin(), p1->page_indices.begin() + 2);
  auto p2 = kv.plan({b, c, a}, {2, 0, 3});
  ASSERT_TRUE(p2.has_value());
  EXPECT_EQ(p2->kv_lens, (std::vector<int32_t>{5, 0, 9}));
  EXPECT_EQ(p2->page_indptr, (std::vector<int32_t>{0, 2, 2, 5}));
  ASSERT_EQ(p2->slots.size(), 5u);
  EXPECT_EQ(p2->slots[0], slot_of(*p2, 0, 3, ps));
  EXPECT_EQ(p2->slots[1], slot_of(*p2, 0, 4, ps));
  for (int t = 0; t < 3; ++t) EXPECT_EQ(p2->slots[2 + t], slot_of(*p2, 2, 6 + t, ps));
  EXPECT_EQ(p2->page_indices[2], a_pages[0]);
  EXPECT_EQ(p2->page_indices[3], a_pages[1]);

  // All slots of all live tokens are distinct.
  std::set<int32_t> all;
  for (int row = 0; row < 3; ++row) {
    for (int t = 0; t < p2->kv_lens[row]; ++t) all.insert(slot_of(*p2, row, t, ps));
  }
  EXPECT_EQ(all.size(), 14u);

  // Duplicate sequences in one batch and negative counts are rejected.
  EXPECT_THROW(kv.plan({a, a}, {1, 1}), Error);
  EXPECT_THROW(kv.plan({a}, {-1}), Error);
  EXPECT_THROW(kv.plan({a}, {1, 2}), Error);
}

TEST(PagedKvCache, OutOfPagesChangesNothing) {
  PagedKvCache kv(small_shape(3, 4), Device::cpu());
  const SeqId a = kv.create_sequence();
  const SeqId b = kv.create_sequence();
  ASSERT_TRUE(kv.plan({a}, {5}).has_value());  // 2 pages
  EXPECT_EQ(kv.free_pages(), 1);
  // a needs 1 more page (to 9 tokens = 3 pages), b needs 1: 2 > 1 free.
  EXPECT_FALSE(kv.plan({a, b}, {4, 1}).has_value());
  EXPECT_EQ(kv.length(a), 5);
  EXPECT_EQ(kv.length(b), 0);
  EXPECT_EQ(kv.free_pages(), 1);
  // Each alone fits.
  EXPECT_TRUE(kv.plan({b}, {4}).has_value());
  EXPECT_EQ(kv.free_pages(), 0);
  EXPECT_FALSE(kv.plan({a}, {4}).has_value());
  EXPECT_EQ(kv.length(a), 5);
  // Appending within the last page needs no new page.
  EXPECT_TRUE(kv.plan({a}, {3}).has_value());
  EXPECT_EQ(kv.length(a), 8);
}

TEST(PagedKvCache, PoolsAndSizing) {
  const KvCacheShape shape = small_shape(5, 4);
  PagedKvCache kv(shape, Device::cpu());
  const Tensor k1 = kv.k_pages(1);
  EXPECT_EQ(k1.shape(), (Shape{5, 4, 2, 8}));
  EXPECT_TRUE(k1.is_contiguous());
  EXPECT_NE(kv.k_pages(0).data(), k1.data());
  EXPECT_NE(kv.v_pages(1).data(), k1.data());
  EXPECT_THROW(kv.k_pages(2), Error);
  // One page = K and V of all layers: 2 * 2 layers * 4 tokens * 2 heads * 8 dims * 4 bytes.
  const size_t page = 2 * 2 * 4 * 2 * 8 * 4;
  EXPECT_EQ(PagedKvCache::pages_for_bytes(shape, page * 7 + page / 2), 7);
  auto zeros = to_vector<float>(kv.v_pages(0));
  EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](float x) { return x == 0.0f; }));
}

// Prefix pages: publish, attach (refcounts), the partial-page and divergence limits, idle cached
// pages counting as free and being evicted leaf-first when memory is needed.
TEST(PagedKvCache, PrefixPagesAreSharedRefcountedAndEvictedLeafFirst) {
  PagedKvCache kv(small_shape(6), Device::cpu());  // page_size 4
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  const SeqId a = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(a, prompt, 9), 0);  // nothing published yet
  ASSERT_TRUE(kv.plan({a}, {10}).has_value());   // 3 pages
  kv.publish_prefix(a, prompt, 10);              // 2 full pages published
  EXPECT_EQ(kv.cached_pages(), 2);
  EXPECT_EQ(kv.used_pages(), 3);

  // Same first 8 tokens, then different: both full pages attach and are shared.
  const std::vector<int32_t> other = {1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44};
  const SeqId b = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(b, other, 10), 8);
  EXPECT_EQ(kv.length(b), 8);
  EXPECT_EQ(kv.used_pages(), 3);  // no new page for the shared ones
  auto plan_b = kv.plan({b}, {3});
  ASSERT_TRUE(plan_b.has_value());
  auto plan_a = kv.plan({a}, {0});
  ASSERT_TRUE(plan_a.has_value());
  for (int t = 0; t < 8; ++t)
    EXPECT_EQ(slot_of(*plan_b, 0, t, 4), slot_of(*plan_a, 0, t, 4)) << "token " << t;
  EXPECT_NE(slot_of(*plan_b, 0, 8, 4), slot_of(*plan_a, 0, 8, 4));

  // max_tokens caps the match to whole pages below it; a different first page matches nothing.
  const SeqId c = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(c, prompt, 7), 4);
  kv.release(c);
  const SeqId d = kv.create_sequence();
  const std::vector<int32_t> diverge = {1, 2, 3, 99, 5, 6, 7, 8};
  EXPECT_EQ(kv.attach_prefix(d, diverge, 8), 0);
  kv.release(d);

  // Releasing both holders leaves the published pages idle: counted free, still attachable.
  kv.release(a);
  kv.release(b);
  EXPECT_EQ(kv.used_pages(), 0);
  EXPECT_EQ(kv.free_pages(), 6);
  EXPECT_EQ(kv.cached_pages(), 2);
  const SeqId e = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(e, prompt, 9), 8);
  kv.release(e);

  // Memory pressure: a sequence that needs every page evicts the cached ones (leaf first, so the
  // index never points through a reused parent), and a later lookup misses.
  const SeqId f = kv.create_sequence();
  EXPECT_TRUE(kv.reserve(f, 5 * 4));  // 5 pages: 4 never used + the leaf cached page
  EXPECT_EQ(kv.cached_pages(), 1);
  EXPECT_TRUE(kv.reserve(f, 6 * 4));  // the root page too
  EXPECT_EQ(kv.cached_pages(), 0);
  EXPECT_FALSE(kv.reserve(f, 7 * 4));
  kv.release(f);
  const SeqId g = kv.create_sequence();
  EXPECT_EQ(kv.attach_prefix(g, prompt, 9), 0);
  kv.release(g);
  EXPECT_EQ(kv.free_pages(), 6);
}

// A page published by one sequence is not published again by a second sequence that computed
// the same tokens itself; the second one's pages are freed normally.
TEST(PagedKvCache, DuplicatePublishKeepsTheFirstPages) {
  PagedKvCache kv(small_shape(8), Device::cpu());
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const SeqId a = kv.create_sequence();
  const SeqId b = kv.create_sequence();
  ASSERT_TRUE(kv.plan({a, b}, {8, 8}).has_value());
  kv.publish_prefix(a, prompt, 8);
  kv.publish_prefix(b, prompt, 8);
  EXPECT_EQ(kv.cached_pages(), 2);
  kv.release(b);
  EXPECT_EQ(kv.used_pages(), 2);
  kv.release(a);
  EXPECT_EQ(kv.used_pages(), 0);
  EXPECT_EQ(kv.free_pages(), 8);
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// shared_kv (MLA's latent cache): one pool per layer, returned as both K and V, and half the
// bytes per page of a K/V cache of the same shape.
TEST(PagedKvCache, SharedKvPoolIsBothKeysAndValues) {
  KvCacheShape shared = small_shape(8);
  shared.shared_kv = true;
  PagedKvCache kv(shared, Device::cpu());
  for (int l = 0; l < shared.num_layers; ++l) {
    EXPECT_EQ(kv.k_pages(l).data(), kv.v_pages(l).data()) << l;
    EXPECT_EQ(kv.k_pages(l).shape(), (Shape{8, 4, 2, 8}));
  }
  EXPECT_NE(kv.k_pages(0).data(), kv.k_pages(1).data());
  const size_t bytes = 1 << 16;
  EXPECT_EQ(PagedKvCache::pages_for_bytes(shared, bytes),
            2 * PagedKvCache::pages_for_bytes(small_shape(8), bytes));
  // Pages, lengths and rollback work as for separate pools.
  const SeqId a = kv.create_sequence();
  ASSERT_TRUE(kv.plan({a}, {6}).has_value());
  EXPECT_EQ(kv.length(a), 6);
  kv.rollback_to(a, 3);
  EXPECT_EQ(kv.length(a), 3);
  kv.release(a);
  EXPECT_EQ(kv.free_pages(), 8);
}

}  // namespace
}  // namespace dspark
