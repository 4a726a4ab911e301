// kv_write and paged_attention: CUDA vs CPU on randomly paged caches (shuffled pages, odd page
// sizes): decode, 1-32-query verify, long causal prefill, non-causal blocks, GQA, sliding window,
// soft-cap, head_dim 16..576, rows that see no key, and decode over long contexts (split keys);
// each scenario runs twice and must repeat bit for bit. Both kernels (tensor cores for 16-bit
// caches with head_dim 64 / 128 / 256, or 576 with V pages that are the K pages (MLA's latent),
// and aligned q, CUDA cores otherwise: reached through the dtype, head_dim, the V pages or q's
// alignment); the tensor-core kernel's copies before its programmatic wait
// after a qkv_prologue that writes the step's K/V; the split merges (last CTA, combine kernel,
// cluster; reached through the context's tuning) against each other bit for bit at equal split
// counts, and the balanced split count of cluster-merged launches.
#include "dspark/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/backend/op_profile.h"
#include "dspark/ops/qkv_prologue.h"
#include "dspark/ops/rope.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct Scenario {
  std::string name;
  std::vector<int> kv_lens;  // per row, including the new queries
  std::vector<int> n_q;      // queries per row: the last n_q keys of the row
  int n_heads = 8, n_kv_heads = 2, head_dim = 64, page_size = 16;
  bool causal = true;
  int window = 0;
  float softcap = 0.0f;
  // Elements from the start of the fused q/k/v buffer to q (not 0: q is not 16-byte aligned, so
  // the CUDA-core kernel runs).
  int q_offset = 0;
  bool shared_kv = false;  // V pages are the K pages (MLA's latent)
};

// A cache holding every row's keys on shuffled pages, plus queries; runs both backends and
// returns the GPU's output.
std::vector<float> run_scenario(Contexts& ctx, const Scenario& s, DType kv_dtype, DType q_dtype,
                                uint32_t seed) {
  const int64_t n_rows = static_cast<int64_t>(s.kv_lens.size());
  std::vector<int32_t> page_indptr{0}, kv_lens, q_indptr{0}, q_pos;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int len = s.kv_lens[static_cast<size_t>(r)], nq = s.n_q[static_cast<size_t>(r)];
    page_indptr.push_back(page_indptr.back() + (len + s.page_size - 1) / s.page_size);
    kv_lens.push_back(len);
    q_indptr.push_back(q_indptr.back() + nq);
    for (int i = 0; i < nq; ++i) q_pos.push_back(len - nq + i);
  }
  const int64_t n_pages = page_indptr.back() + 3;  // a few pages nobody uses
  std::vector<int32_t> pages(static_cast<size_t>(n_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(pages.begin(), pages.end(), gen);
  pages.resize(static_cast<size_t>(page_indptr.back()));

  const Shape page_shape{n_pages, s.page_size, s.n_kv_heads, s.head_dim};
  const Pair k_pages = random_pair(kv_dtype, page_shape, seed + 1);
  const Pair own_v_pages = random_pair(kv_dtype, page_shape, seed + 2);
  const Pair& v_pages = s.shared_kv ? k_pages : own_v_pages;
  const int64_t n_tokens = q_indptr.back();
  // q: n_heads heads from element q_offset of a fused [n_tokens, (n_heads + 2 * n_kv_heads) * D]
  // buffer.
  const int64_t width = (s.n_heads + 2 * s.n_kv_heads) * s.head_dim;
  const Pair qkv = random_pair(q_dtype, Shape{n_tokens, width}, seed + 3);
  auto q_view = [&](const Tensor& t) {
    return Tensor(static_cast<char*>(t.data()) + s.q_offset * t.element_size(), t.dtype(),
                  Shape{n_tokens, s.n_heads, s.head_dim}, Shape{width, s.head_dim, 1}, t.device());
  };
  const Pair out = zeros_pair(q_dtype, Shape{n_tokens, s.n_heads, s.head_dim});
  const Pair p_indptr = vector_pair(page_indptr, Shape{n_rows + 1});
  const Pair p_indices = vector_pair(pages, Shape{static_cast<int64_t>(pages.size())});
  const Pair lens = vector_pair(kv_lens, Shape{n_rows});
  const Pair qi = vector_pair(q_indptr, Shape{n_rows + 1});
  const Pair qp = vector_pair(q_pos, Shape{n_tokens});

  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  params.causal = s.causal;
  params.sliding_window = s.window;
  params.softcap = s.softcap;
  const PagedKv kv_cpu{k_pages.cpu, v_pages.cpu, p_indptr.cpu, p_indices.cpu, lens.cpu};
  const PagedKv kv_gpu{k_pages.gpu, v_pages.gpu, p_indptr.gpu, p_indices.gpu, lens.gpu};
  paged_attention(ctx.cpu, q_view(qkv.cpu), kv_cpu, qi.cpu, qp.cpu, params, out.cpu);
  paged_attention(ctx.gpu, q_view(qkv.gpu), kv_gpu, qi.gpu, qp.gpu, params, out.gpu);
  ctx.gpu.synchronize();
  const std::string what = s.name + " kv " + name_of(kv_dtype) + " q/out " + name_of(q_dtype) +
                           " head_dim " + std::to_string(s.head_dim);
  expect_close(out.gpu, out.cpu, tolerance(q_dtype), what);

  // Rows that see no key must be exactly zero on the GPU.
  const std::vector<float> got = read(out.gpu);

  // A second launch gives the same bits: the split merge is deterministic (the last split CTA to
  // arrive merges in split order), and every arrival counter is back at zero after a launch
  // (a counter left non-zero would skip or repeat a merge here).
  const Pair again = zeros_pair(q_dtype, Shape{n_tokens, s.n_heads, s.head_dim});
  paged_attention(ctx.gpu, q_view(qkv.gpu), kv_gpu, qi.gpu, qp.gpu, params, again.gpu);
  ctx.gpu.synchronize();
  EXPECT_EQ(read(again.gpu), got) << what << ": a second launch differs";
  const int64_t per_token = s.n_heads * s.head_dim;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int32_t t = q_indptr[static_cast<size_t>(r)]; t < q_indptr[static_cast<size_t>(r) + 1];
         ++t) {
      const int pos = q_pos[static_cast<size_t>(t)];
      int hi = kv_lens[static_cast<size_t>(r)];
      if (s.causal) hi = std::min(hi, pos + 1);
      const int lo = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
      if (hi > lo) continue;
      for (int64_t i = 0; i < per_token; ++i) {
        if (got[static_cast<size_t>(t * per_token + i)] != 0.0f) {
          ADD_FAILURE() << what << " token " << t << ": a row that sees no key is not zero";
          return got;
        }
      }
    }
  }
  return got;
}

// A scenario with Qwen3-8B's attention layout (32 heads, 8 KV heads, head_dim 128).
Scenario qwen3_8b(std::string name, std::vector<int> kv_lens, std::vector<int> n_q) {
  return Scenario{.name = std::move(name),
                  .kv_lens = std::move(kv_lens),
                  .n_q = std::move(n_q),
                  .n_heads = 32,
                  .n_kv_heads = 8,
                  .head_dim = 128};
}

// MLA's absorbed form: n_heads query heads over one latent "head" of 512 + 64 that is both K and V.
Scenario mla(std::string name, std::vector<int> kv_lens, std::vector<int> n_q, int n_heads = 16) {
  return Scenario{.name = std::move(name),
                  .kv_lens = std::move(kv_lens),
                  .n_q = std::move(n_q),
                  .n_heads = n_heads,
                  .n_kv_heads = 1,
                  .head_dim = 576,
                  .shared_kv = true};
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> v;
  v.push_back({.name = "decode", .kv_lens = {1, 37, 300}, .n_q = {1, 1, 1}});
  v.push_back({.name = "verify", .kv_lens = {40, 100, 33, 64}, .n_q = {1, 8, 32, 17}});
  v.push_back({.name = "prefill", .kv_lens = {300}, .n_q = {300}});
  v.push_back({.name = "prefill many heads",
               .kv_lens = {150, 90},
               .n_q = {150, 90},
               .n_heads = 32,
               .n_kv_heads = 4});
  v.push_back({.name = "non-causal block", .kv_lens = {50, 19}, .n_q = {16, 16}, .causal = false});
  v.push_back({.name = "window+softcap",
               .kv_lens = {120, 70},
               .n_q = {5, 70},
               .window = 16,
               .softcap = 30.0f});
  v.push_back({.name = "mha odd pages",
               .kv_lens = {23, 77},
               .n_q = {3, 9},
               .n_heads = 4,
               .n_kv_heads = 4,
               .page_size = 5});
  v.push_back(
      {.name = "mqa 20 heads", .kv_lens = {45}, .n_q = {4}, .n_heads = 20, .n_kv_heads = 1});
  v.push_back({.name = "empty rows", .kv_lens = {0, 12, 0}, .n_q = {1, 2, 0}});
  v.push_back({.name = "long decode", .kv_lens = {3000, 1500}, .n_q = {1, 2}});
  return v;
}

TEST(CudaAttention, PagedAttentionMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1;
  for (const Scenario& base : scenarios()) {
    for (DType dtype : kFloatDTypes) {
      run_scenario(ctx, base, dtype, dtype, seed);
      seed += 10;
    }
  }
}

TEST(CudaAttention, HeadDims) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 500;
  for (int head_dim : {16, 32, 64, 96, 128, 256, 40, 300, 576}) {
    for (DType dtype : kFloatDTypes) {
      Scenario s{.name = "head dims", .kv_lens = {70, 33}, .n_q = {1, 11}};
      s.head_dim = head_dim;
      run_scenario(ctx, s, dtype, dtype, seed);
      seed += 10;
    }
  }
}

// Shapes of the published targets, which take the tensor-core kernel for 16-bit caches:
// Qwen3-8B (32 heads, 8 KV heads, head_dim 128) decode, verify (one request, two, four at
// different contexts, with a window and soft-cap) and a drafter's non-causal block over a long
// context with split keys; head_dim 256 with a window and soft-cap; MLA's absorbed form (head_dim
// 576, one KV head whose V pages are its K pages, as model/mla.cpp calls it; tensor cores).
TEST(CudaAttention, ModelShapes) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  std::vector<Scenario> v;
  v.push_back(qwen3_8b("8b decode", {1024, 700}, {1, 1}));
  v.push_back(qwen3_8b("8b verify 17", {1041}, {17}));
  v.push_back(qwen3_8b("8b verify 33, two rows", {530, 1057}, {33, 33}));
  v.push_back(qwen3_8b("8b verify 17 x 4", {1041, 300, 2000, 17}, {17, 17, 17, 17}));
  Scenario window = qwen3_8b("8b verify 17, window 200, softcap", {1041}, {17});
  window.window = 200;
  window.softcap = 30.0f;
  v.push_back(window);
  Scenario block = qwen3_8b("8b draft block", {1040}, {16});
  block.causal = false;
  v.push_back(block);
  v.push_back({.name = "head_dim 256 window softcap",
               .kv_lens = {600, 90},
               .n_q = {9, 3},
               .n_heads = 8,
               .n_kv_heads = 4,
               .head_dim = 256,
               .window = 128,
               .softcap = 50.0f});
  // MLA's absorbed form (DeepSeek-V2-Lite: 16 heads; V3: 128) over one latent "head" of 512 + 64.
  v.push_back(mla("MLA decode, split keys", {1024}, {1}));
  v.push_back(mla("MLA verify 17, two rows", {1041, 300}, {17, 17}));
  v.push_back(mla("MLA 128 heads decode", {700}, {1}, 128));
  uint32_t seed = 1200;
  for (const Scenario& s : v) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      run_scenario(ctx, s, dtype, dtype, seed);
      seed += 10;
    }
  }
}

// Decode on the tensor-core kernel, which copies a split's first key tiles before its
// programmatic-dependent wait and merges decode tiles' splits from shared memory: the CPU within
// tolerance and a repeat launch bit for bit (run_scenario), over contexts that are and are not
// multiples of the 64-key tile, two rows, sliding windows, pages of 5, verify, a drafter's block
// and head_dim 64 / 256.
TEST(CudaAttention, TensorCoreDecodeMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  std::vector<Scenario> v;
  for (int len : {1, 63, 64, 65, 130, 1000, 1025, 3001})
    v.push_back(qwen3_8b("8b decode " + std::to_string(len), {len}, {1}));
  v.push_back(qwen3_8b("8b decode, two rows", {700, 1300}, {1, 1}));
  Scenario window = qwen3_8b("8b decode, window 100", {1000}, {1});
  window.window = 100;
  v.push_back(window);
  Scenario window2 = qwen3_8b("8b decode, window 300, two rows", {2049, 513}, {1, 1});
  window2.window = 300;
  v.push_back(window2);
  Scenario odd_pages = qwen3_8b("8b decode, pages of 5", {999}, {1});
  odd_pages.page_size = 5;
  v.push_back(odd_pages);
  v.push_back(qwen3_8b("8b verify 17", {1041}, {17}));
  Scenario block = qwen3_8b("8b draft block", {1040}, {16});
  block.causal = false;
  v.push_back(block);
  v.push_back({.name = "long small rows", .kv_lens = {3000, 1500}, .n_q = {3, 2}});
  v.push_back({.name = "head_dim 64 decode", .kv_lens = {777}, .n_q = {1}, .head_dim = 64});
  // MLA's latent: 16 heads (a 16-row tile), 4 heads (a decode tile of 4 rows), 128 heads.
  for (int len : {1, 63, 65, 1025, 3001})
    v.push_back(mla("MLA decode " + std::to_string(len), {len}, {1}));
  v.push_back(mla("MLA decode, 4 heads", {1000}, {1}, 4));
  v.push_back(mla("MLA decode, two rows, 128 heads", {300, 1100}, {1, 1}, 128));
  v.push_back(mla("MLA verify 17, 4 heads", {1041}, {17}, 4));
  Scenario mla_block = mla("MLA draft block", {1040}, {16});
  mla_block.causal = false;
  v.push_back(mla_block);
  Scenario mla_window = mla("MLA verify 9, window 100, softcap, pages of 5", {700}, {9});
  mla_window.window = 100;
  mla_window.softcap = 30.0f;
  mla_window.page_size = 5;
  v.push_back(mla_window);
  v.push_back({.name = "head_dim 256 window softcap",
               .kv_lens = {600, 90},
               .n_q = {1, 3},
               .n_heads = 8,
               .n_kv_heads = 4,
               .head_dim = 256,
               .window = 128,
               .softcap = 50.0f});
  uint32_t seed = 2100;
  for (const Scenario& s : v) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      run_scenario(ctx, s, dtype, dtype, seed);
      seed += 10;
    }
  }
}

// The tensor-core kernel copies K/V before its programmatic-dependent wait, except the step's own
// keys. Here qkv_prologue (the fused kernel, itself a programmatic dependent) writes q and the new
// tokens' K/V right before paged_attention, as in a decoder layer, over slots that held K = 0,
// V = 1000: a copy of such a slot made before the wait would be far off the CPU's result. One new
// token (decode) and 17 (a verify).
TEST(CudaAttention, EarlyCopiesWaitForTheStepsKv) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  constexpr int kHeads = 32, kKvHeads = 8, kHd = 128, kPage = 16;
  constexpr DType kDtype = DType::bf16;
  const RopeTable table = make_rope_table(kHd, 1e6, 1.0, RopeScaling{}, 131072);
  const Pair inv_freq =
      vector_pair(table.inv_freq, Shape{static_cast<int64_t>(table.inv_freq.size())});
  uint32_t seed = 2500;
  for (const int n : {1, 17}) {
    for (int context : {64, 1023, 1024, 4100}) {
      const int kv_len = context + n, row_pages = (kv_len + kPage - 1) / kPage;
      const int64_t n_pages = row_pages + 2;
      std::vector<int32_t> pages(static_cast<size_t>(n_pages));
      std::iota(pages.begin(), pages.end(), 0);
      std::mt19937 gen(seed);
      std::shuffle(pages.begin(), pages.end(), gen);
      pages.resize(static_cast<size_t>(row_pages));
      std::vector<int32_t> slot_v, pos_v;
      for (int i = 0; i < n; ++i) {
        const int p = context + i;
        pos_v.push_back(p);
        slot_v.push_back(pages[static_cast<size_t>(p / kPage)] * kPage + p % kPage);
      }
      const Shape page_shape{n_pages, kPage, kKvHeads, kHd};
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> k_old(static_cast<size_t>(page_shape.numel()));
      std::vector<float> v_old(k_old.size());
      for (size_t i = 0; i < k_old.size(); ++i) {
        k_old[i] = normal(gen);
        v_old[i] = normal(gen);
      }
      for (int32_t slot : slot_v) {
        for (int64_t i = 0; i < kKvHeads * kHd; ++i) {
          k_old[static_cast<size_t>(slot * kKvHeads * kHd + i)] = 0.0f;
          v_old[static_cast<size_t>(slot * kKvHeads * kHd + i)] = 1000.0f;
        }
      }
      const Pair k_pages = values_pair(k_old, kDtype, page_shape);
      const Pair v_pages = values_pair(v_old, kDtype, page_shape);
      const Pair qkv = random_pair(kDtype, Shape{n, (kHeads + 2 * kKvHeads) * kHd}, seed + 1);
      const Pair q_out = zeros_pair(kDtype, Shape{n, kHeads * kHd});
      const Pair k_tmp = zeros_pair(kDtype, Shape{n, kKvHeads * kHd});
      const Pair pos = vector_pair(pos_v, Shape{n});
      const Pair slots = vector_pair(slot_v, Shape{n});
      const Pair p_indptr = vector_pair(std::vector<int32_t>{0, row_pages}, Shape{2});
      const Pair p_indices = vector_pair(pages, Shape{row_pages});
      const Pair lens = vector_pair(std::vector<int32_t>{kv_len}, Shape{1});
      const Pair q_indptr = vector_pair(std::vector<int32_t>{0, n}, Shape{2});
      const Pair out = zeros_pair(kDtype, Shape{n, kHeads, kHd});
      AttentionParams params;
      params.scale = 1.0f / std::sqrt(static_cast<float>(kHd));
      auto step = [&](Context& c, bool gpu) {
        auto side = [gpu](const Pair& p) { return gpu ? p.gpu.view() : p.cpu.view(); };
        QkvPrologueArgs a;
        a.qkv = side(qkv);
        a.n_heads = kHeads;
        a.n_kv_heads = kKvHeads;
        a.head_dim = kHd;
        a.norm = RmsNormParams{1e-6f, false};
        a.positions = side(pos);
        a.inv_freq = side(inv_freq);
        a.attention_scaling = table.attention_scaling;
        a.slots = side(slots);
        a.k_pages = side(k_pages);
        a.v_pages = side(v_pages);
        a.q_out = side(q_out);
        a.k_tmp = side(k_tmp);
        const Tensor q = qkv_prologue(c, a);
        const PagedKv kv{side(k_pages), side(v_pages), side(p_indptr), side(p_indices), side(lens)};
        paged_attention(c, q, kv, side(q_indptr), side(pos), params, side(out));
      };
      step(ctx.cpu, false);
      step(ctx.gpu, true);
      ctx.gpu.synchronize();
      const std::string what = "prologue + attention, " + std::to_string(n) +
                               " new tokens, context " + std::to_string(context);
      expect_close(out.gpu, out.cpu, tolerance(kDtype), what);
      seed += 10;
    }
  }
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)
// The key splits paged_attention picks for the scenario on the context's GPU, caps and tuning.
int splits_of(const Context& ctx, const Scenario& s) {
  int64_t n_tokens = 0, pages = 0;
  for (size_t r = 0; r < s.kv_lens.size(); ++r) {
    n_tokens += s.n_q[r];
    pages += (s.kv_lens[r] + s.page_size - 1) / s.page_size;
  }
  return cuda::paged_attention_splits(ctx, n_tokens, s.n_heads, s.n_kv_heads,
                                      static_cast<int64_t>(s.kv_lens.size()), pages, s.page_size);
}

// The 64-key tiles per row that paged_attention_splits counts (from the page count).
int64_t tiles_of(const Scenario& s) {
  int64_t pages = 0;
  for (int len : s.kv_lens) pages += (len + s.page_size - 1) / s.page_size;
  const int64_t keys = pages * s.page_size / static_cast<int64_t>(s.kv_lens.size());
  return (keys + 63) / 64;
}

// Whether split launches on this context may be cluster-merged (sm_90, and the tuning's on).
bool cluster_merges(const Context& ctx) {
  return ctx.cuda_caps().compute_major == 9 && ctx.cuda_tuning().attention_cluster_merge;
}

// Runs the scenario (run_scenario) with the cluster merge on or off
// (Tuning::attention_cluster_merge), its output in `got`; returns the combine kernel's launches
// (op profile).
int64_t run_clustered(Contexts& ctx, const Scenario& s, DType dtype, uint32_t seed, bool cluster,
                      std::vector<float>& got) {
  const ScopedTuning<bool> merge(ctx.gpu, &cuda::Tuning::attention_cluster_merge, cluster);
  (void)take_op_profile();
  set_op_profiling(true);
  got = run_scenario(ctx, s, dtype, dtype, seed);
  set_op_profiling(false);
  int64_t calls = 0;
  for (const OpTime& t : take_op_profile())
    if (t.op == "paged_attention_combine") calls += t.calls;
  return calls;
}

// The split count of cluster-merged launches (multi-token tiles on sm_90) is balanced: at most
// the capped count (8, the cluster's limit), no fewer splits would give each CTA at most as many
// 64-key tiles (the kernel deals a row's tiles evenly), and a split has at least one tile.
// Qwen3-8B's verify at context 1k: 17 tiles, at most 3 per CTA (6 splits, not 7, on the H200's
// 132 multiprocessors). The results match the CPU.
TEST(CudaAttention, SplitCountsAreBalanced) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  if (!cluster_merges(ctx.gpu)) GTEST_SKIP() << "no cluster-merged launches";
  uint32_t seed = 1500;
  for (const Scenario& s :
       {qwen3_8b("8b verify 17 at 1k", {1041}, {17}), qwen3_8b("8b verify 33 at 4k", {4129}, {33}),
        qwen3_8b("8b verify 17 x 4", {1041, 1041, 1041, 1041}, {17, 17, 17, 17}),
        qwen3_8b("8b verify 17 at 300", {317}, {17})}) {
    const int64_t tiles = tiles_of(s);
    const int64_t n = splits_of(ctx.gpu, s);
    int64_t plain = 0;  // the count without the cluster merge: the CTA target's
    {
      const ScopedTuning<bool> merge(ctx.gpu, &cuda::Tuning::attention_cluster_merge, false);
      plain = splits_of(ctx.gpu, s);
    }
    const int64_t capped = std::min<int64_t>(plain, 8);
    const auto most = [&](int64_t splits) { return (tiles + splits - 1) / splits; };
    EXPECT_GE(n, 1) << s.name;
    EXPECT_LE(n, std::max<int64_t>(tiles, 1)) << s.name;
    EXPECT_LE(n, capped) << s.name;
    EXPECT_EQ(most(n), most(capped)) << s.name;
    if (n > 1) {
      EXPECT_GT(most(n - 1), most(n)) << s.name << ": " << n << " splits of " << tiles;
    }
    if (s.name == "8b verify 17 at 1k" && ctx.gpu.cuda_caps().sm_count == 132) {
      EXPECT_EQ(n, 6) << s.name;
    }
    for (DType dtype : {DType::bf16, DType::f16}) {
      run_scenario(ctx, s, dtype, dtype, seed);
      seed += 10;
    }
  }
}

// The split merge by the last split CTA (Tuning::attention_merge_rows 16: every tile) against the
// combine kernel (0: none): the same bits, for decode tiles (a warp per row) and for 16-row tiles
// (the two-phase merge), on both kernels (bf16: tensor cores, f32: CUDA cores), at the Qwen3-8B
// head layout over a long context (split keys: checked) and with a few small rows.
TEST(CudaAttention, LastCtaMergeEqualsCombineKernel) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  // The combine kernel itself: the cluster merge would take the tiles that merge_rows 0 leaves to
  // it, at another split count (its own test is below).
  const ScopedTuning<bool> no_cluster(ctx.gpu, &cuda::Tuning::attention_cluster_merge, false);
  std::vector<Scenario> v{qwen3_8b("8b decode", {1024}, {1}),
                          qwen3_8b("8b verify 17", {1041}, {17}),
                          qwen3_8b("8b verify 5 + 9", {700, 1300}, {5, 9})};
  Scenario block = qwen3_8b("8b draft block", {1040}, {16});
  block.causal = false;
  v.push_back(block);
  v.push_back({.name = "long small rows", .kv_lens = {3000, 1500}, .n_q = {3, 2}});
  v.push_back(mla("MLA decode", {1024}, {1}));
  v.push_back(mla("MLA decode, 4 heads", {1500}, {1}, 4));
  v.push_back(mla("MLA verify 3, 2 heads", {2000}, {3}, 2));
  uint32_t seed = 1700;
  for (const Scenario& s : v) {
    EXPECT_GT(splits_of(ctx.gpu, s), 1) << s.name << ": no split keys, nothing to merge";
    for (DType dtype : {DType::bf16, DType::f32}) {
      std::vector<float> combine, last_cta;
      {
        const ScopedTuning<int> rows(ctx.gpu, &cuda::Tuning::attention_merge_rows, 0);
        combine = run_scenario(ctx, s, dtype, dtype, seed);
      }
      {
        const ScopedTuning<int> rows(ctx.gpu, &cuda::Tuning::attention_merge_rows, 16);
        last_cta = run_scenario(ctx, s, dtype, dtype, seed);
      }
      EXPECT_EQ(last_cta, combine) << s.name << " " << name_of(dtype);
      seed += 10;
    }
  }
}

// The cluster merge (sm_90, Tuning::attention_cluster_merge): split launches whose tiles have more
// rows than the last-CTA merge takes (attention_merge_rows, 4) merge their splits in a
// thread-block cluster of the tile's split CTAs, with no combine launch on tensor cores (op
// profile); the CUDA-core kernel (f32) still takes the combine kernel. Its split count is capped
// at 8 and balanced (SplitCountsAreBalanced), so against the combine kernel (the merge off) the
// bits are compared where both launches have the same split count (most scenarios here; elsewhere
// only the CPU tolerance of run_scenario applies): 16 and 17 queries per row, 1 and 3 rows (tiles
// crossing rows: several segments per cluster), causal and not, 2..15 splits, Qwen3-8B's layout,
// head_dim 64 and 256 (window, soft-cap), MHA on pages of 5 and an MQA tile of 16 heads.
TEST(CudaAttention, ClusterMergeEqualsCombineKernel) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  if (!cluster_merges(ctx.gpu)) GTEST_SKIP() << "no cluster-merged launches";
  const ScopedTuning<int> rows(ctx.gpu, &cuda::Tuning::attention_merge_rows, 4);
  std::vector<Scenario> v;
  for (int len : {100, 300, 1041})
    v.push_back(qwen3_8b("8b verify 16, context " + std::to_string(len), {len}, {16}));
  v.push_back(qwen3_8b("8b verify 17, context 500", {500}, {17}));
  for (int len : {480, 1040}) {
    Scenario block = qwen3_8b("8b draft block, context " + std::to_string(len), {len}, {16});
    block.causal = false;
    v.push_back(block);
  }
  v.push_back(qwen3_8b("8b verify 16, three rows", {700, 1300, 90}, {16, 16, 16}));
  Scenario blocks = qwen3_8b("8b blocks of 17, three rows", {400, 1000, 64}, {17, 17, 17});
  blocks.causal = false;
  v.push_back(blocks);
  v.push_back({.name = "head_dim 64 verify 16", .kv_lens = {400}, .n_q = {16}});
  v.push_back({.name = "head_dim 64 verify 16, long", .kv_lens = {900}, .n_q = {16}});
  // 8 heads over 4 KV heads: tiles of 2 heads x 8 tokens (crossing the rows).
  Scenario wide{.name = "head_dim 256, window, softcap", .kv_lens = {600, 90}, .n_q = {9, 3}};
  wide.n_kv_heads = 4;
  wide.head_dim = 256;
  wide.window = 128;
  wide.softcap = 50.0f;
  v.push_back(wide);
  Scenario mha{.name = "mha, pages of 5", .kv_lens = {300, 77}, .n_q = {17, 9}};
  mha.n_heads = mha.n_kv_heads = 4;  // tiles of 16 tokens x 1 head
  mha.page_size = 5;
  v.push_back(mha);
  v.push_back(
      {.name = "mqa 20 heads", .kv_lens = {500}, .n_q = {16}, .n_heads = 20, .n_kv_heads = 1});
  v.push_back(mla("MLA verify 17, two rows", {1041, 300}, {17, 17}));
  uint32_t seed = 2600;
  int compared = 0;  // scenarios compared bit for bit
  for (const Scenario& s : v) {
    int splits = 0;
    {
      const ScopedTuning<bool> merge(ctx.gpu, &cuda::Tuning::attention_cluster_merge, false);
      splits = splits_of(ctx.gpu, s);
    }
    const int cluster_splits = splits_of(ctx.gpu, s);
    EXPECT_GT(splits, 1) << s.name << ": no split keys, nothing to merge";
    EXPECT_GT(cluster_splits, 1) << s.name;
    EXPECT_LE(cluster_splits, std::min(splits, 8)) << s.name;
    if (splits == cluster_splits) ++compared;
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      std::vector<float> combine, cluster;
      EXPECT_GT(run_clustered(ctx, s, dtype, seed, false, combine), 0)
          << s.name << " " << name_of(dtype);
      const int64_t calls = run_clustered(ctx, s, dtype, seed, true, cluster);
      if (dtype == DType::f32) {
        EXPECT_GT(calls, 0) << s.name << ": the CUDA-core kernel's splits need the combine kernel";
      } else {
        EXPECT_EQ(calls, 0) << s.name << " " << name_of(dtype) << ": a combine launch";
      }
      if (splits == cluster_splits) {
        EXPECT_EQ(cluster, combine) << s.name << " " << name_of(dtype);
      }
      seed += 10;
    }
  }
  EXPECT_GE(compared, 6) << "too few scenarios with the same split count either way";
}

// Decode tiles merged in a cluster of their split CTAs (sm_90, the tuning's
// attention_decode_cluster_splits 16) against the last split CTA's merge from shared memory (the
// same field 0): the same bits where both launches have the same split count (at most 16 key
// tiles per row; rows of more than 32 keep the last-CTA merge either way), the CPU within
// tolerance otherwise (run_scenario); Qwen3-8B's heads, one and two rows, a window, head_dim 64
// and 256.
TEST(CudaAttention, DecodeClusterMergeEqualsLastCtaMerge) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  if (!cluster_merges(ctx.gpu)) GTEST_SKIP() << "no cluster-merged launches";
  std::vector<Scenario> v;
  for (int len : {130, 500, 900, 1000, 1025, 3001})
    v.push_back(qwen3_8b("8b decode " + std::to_string(len), {len}, {1}));
  v.push_back(qwen3_8b("8b decode, two rows", {700, 900}, {1, 1}));
  Scenario window = qwen3_8b("8b decode, window 300", {1000}, {1});
  window.window = 300;
  v.push_back(window);
  v.push_back({.name = "head_dim 64 decode", .kv_lens = {777}, .n_q = {1}, .head_dim = 64});
  v.push_back({.name = "head_dim 256 decode", .kv_lens = {600}, .n_q = {1}, .head_dim = 256});
  v.push_back(mla("MLA decode, 4 heads", {1000}, {1}, 4));
  v.push_back(mla("MLA decode, 2 heads", {300}, {1}, 2));
  uint32_t seed = 3100;
  int compared = 0;
  for (const Scenario& s : v) {
    int last_splits = 0, cluster_splits = 0;
    std::vector<float> last_cta, cluster;
    for (DType dtype : {DType::bf16, DType::f16}) {
      {
        const ScopedTuning<int> off(ctx.gpu, &cuda::Tuning::attention_decode_cluster_splits, 0);
        last_splits = splits_of(ctx.gpu, s);
        last_cta = run_scenario(ctx, s, dtype, dtype, seed);
      }
      cluster_splits = splits_of(ctx.gpu, s);
      cluster = run_scenario(ctx, s, dtype, dtype, seed);
      EXPECT_LE(cluster_splits, last_splits) << s.name;
      if (last_splits == cluster_splits && cluster_splits > 1) {
        EXPECT_EQ(cluster, last_cta) << s.name << " " << name_of(dtype);
        ++compared;
      }
      seed += 10;
    }
  }
  EXPECT_GE(compared, 8) << "too few scenarios with the same split count either way";
}

// Which kernel runs: the tensor-core one for a 16-bit cache and q with head_dim 64 / 128 / 256 (or
// 576 with V pages that are the K pages) and 16-byte aligned q rows (the profiler records it), the
// CUDA-core one for f32, other head dims (576 with V pages of their own) or a q that starts one
// element into its buffer (attention_on_tensor_cores,
// backend/cuda/policy/attention.h); both match the CPU (run_scenario).
TEST(CudaAttention, TensorCoreKernelRunsWhenItFits) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  auto runs_mma = [&](int head_dim, DType dtype, int q_offset = 0, bool shared_kv = false) {
    Scenario s{.name = "kernel choice", .kv_lens = {200, 75}, .n_q = {4, 1}, .head_dim = head_dim};
    s.q_offset = q_offset;
    s.shared_kv = shared_kv;
    (void)take_op_profile();
    set_op_profiling(true);
    run_scenario(ctx, s, dtype, dtype, 77);
    set_op_profiling(false);
    bool seen = false;
    for (const OpTime& t : take_op_profile()) seen = seen || t.op == "paged_attention_mma";
    return seen;
  };
  EXPECT_TRUE(runs_mma(128, DType::bf16));
  EXPECT_TRUE(runs_mma(64, DType::f16));
  EXPECT_TRUE(runs_mma(256, DType::bf16));
  EXPECT_TRUE(runs_mma(576, DType::bf16, 0, true));
  EXPECT_TRUE(runs_mma(576, DType::f16, 0, true));
  EXPECT_FALSE(runs_mma(576, DType::bf16));  // V pages of their own
  EXPECT_FALSE(runs_mma(576, DType::f32, 0, true));
  EXPECT_FALSE(runs_mma(128, DType::f32));
  EXPECT_FALSE(runs_mma(96, DType::bf16));
  EXPECT_FALSE(runs_mma(128, DType::bf16, 1));
  EXPECT_FALSE(runs_mma(64, DType::f16, 1));
}
#endif

// q / out in another dtype than the cache.
TEST(CudaAttention, MixedDtypes) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  Scenario s{.name = "mixed", .kv_lens = {64, 9}, .n_q = {4, 9}};
  run_scenario(ctx, s, DType::bf16, DType::f32, 900);
  run_scenario(ctx, s, DType::f32, DType::bf16, 901);
}

TEST(CudaAttention, KvWriteMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t n_pages = 9, page_size = 7, n_kv_heads = 3, head_dim = 24, n = 20;
  std::vector<int32_t> slots(static_cast<size_t>(n_pages * page_size));
  std::iota(slots.begin(), slots.end(), 0);
  std::mt19937 gen(3);
  std::shuffle(slots.begin(), slots.end(), gen);
  slots.resize(static_cast<size_t>(n));
  const Pair s = vector_pair(slots, Shape{n});
  uint32_t seed = 700;
  for (DType page_dtype : kFloatDTypes) {
    for (DType src_dtype : kFloatDTypes) {
      const Shape page_shape{n_pages, page_size, n_kv_heads, head_dim};
      const Pair k_pages = random_pair(page_dtype, page_shape, seed++);
      const Pair v_pages = random_pair(page_dtype, page_shape, seed++);
      // k and v are slices of a fused [n, (q + k + v) heads * D] buffer.
      const int64_t width = (4 + 2 * n_kv_heads) * head_dim;
      const Pair qkv = random_pair(src_dtype, Shape{n, width}, seed++);
      auto heads = [&](const Tensor& t, int64_t first_head) {
        return Tensor(static_cast<char*>(t.data()) + first_head * head_dim * t.element_size(),
                      t.dtype(), Shape{n, n_kv_heads, head_dim}, Shape{width, head_dim, 1},
                      t.device());
      };
      kv_write(ctx.cpu, heads(qkv.cpu, 4), heads(qkv.cpu, 4 + n_kv_heads), s.cpu, k_pages.cpu,
               v_pages.cpu);
      kv_write(ctx.gpu, heads(qkv.gpu, 4), heads(qkv.gpu, 4 + n_kv_heads), s.gpu, k_pages.gpu,
               v_pages.gpu);
      ctx.gpu.synchronize();
      const std::string what = name_of(src_dtype) + " -> " + name_of(page_dtype);
      expect_equal(k_pages.gpu, k_pages.cpu, "k " + what);
      expect_equal(v_pages.gpu, v_pages.cpu, "v " + what);
    }
  }
}

}  // namespace
}  // namespace dspark::test
