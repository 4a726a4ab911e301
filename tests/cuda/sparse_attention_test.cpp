// index_topk and sparse_paged_attention (DeepSeek sparse attention): CUDA vs CPU. The pages of
// each row are shuffled across the pool and slots never written hold NaN, so a read through a
// wrong page or past kv_len poisons the result. index_topk must give the CPU's ids exactly: its
// inputs are small integers (bf16-exact, every dot product and sum exact in f32), so both devices
// compute the same scores whatever their order of summation, with many ties on purpose, and
// negative head weights that turn relu's zeros into -0 (a tie with +0 on the CPU).
// Batches of few queries split each query's keys over several CTAs and merge their candidates;
// a batch of 303 (over twice the SMs of an H100 / H200) does not. sparse_paged_attention: relative
// RMS error within tolerance(out dtype) (f32 1e-5, bf16 1e-2).
#include "dspark/ops/sparse_attention.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

// A pool [n_pages, page_size, 1, width] holding each batch row's keys in shuffled pages (one
// spare page per row; unwritten slots NaN), and the batch's page table, on both devices.
struct PoolPair {
  Pair pages, page_indptr, page_indices, kv_lens;

  PoolPair(const std::vector<int>& lens, int64_t page_size, int64_t width, DType dtype,
           uint32_t seed, bool small_ints) {
    std::vector<int32_t> indptr{0};
    int64_t n_pages = 0;
    for (int len : lens) {
      n_pages += (len + page_size - 1) / page_size + 1;
      indptr.push_back(static_cast<int32_t>(n_pages));
    }
    std::vector<int32_t> order(static_cast<size_t>(n_pages));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 gen(seed);
    std::shuffle(order.begin(), order.end(), gen);
    std::uniform_int_distribution<int> small(-2, 2);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> data(static_cast<size_t>(n_pages * page_size * width), NAN);
    for (size_t r = 0; r < lens.size(); ++r) {
      for (int j = 0; j < lens[r]; ++j) {
        const int64_t page = order[static_cast<size_t>(indptr[r] + j / page_size)];
        float* row = data.data() + (page * page_size + j % page_size) * width;
        for (int64_t c = 0; c < width; ++c)
          row[c] = small_ints ? static_cast<float>(small(gen)) : normal(gen);
      }
    }
    pages = values_pair(data, dtype, Shape{n_pages, page_size, 1, width});
    page_indptr = vector_pair(indptr, Shape{static_cast<int64_t>(indptr.size())});
    page_indices = vector_pair(order, Shape{n_pages});
    kv_lens = vector_pair(lens, Shape{static_cast<int64_t>(lens.size())});
  }
  // Columns [begin, end) of the pool as keys (and values) of both devices.
  PagedKv cpu(int64_t begin, int64_t end) const {
    const Tensor p = pages.cpu.view().slice(3, begin, end);
    return PagedKv{p, p, page_indptr.cpu.view(), page_indices.cpu.view(), kv_lens.cpu.view()};
  }
  PagedKv gpu(int64_t begin, int64_t end) const {
    const Tensor p = pages.gpu.view().slice(3, begin, end);
    return PagedKv{p, p, page_indptr.gpu.view(), page_indices.gpu.view(), kv_lens.gpu.view()};
  }
};

// The queries of a batch: per row, `queries[r]` consecutive positions ending at kv_len - 1 (a
// verify step, or a prefill chunk), possibly none.
struct Queries {
  std::vector<int32_t> indptr{0}, pos;
  Queries(const std::vector<int>& lens, const std::vector<int>& queries) {
    for (size_t r = 0; r < lens.size(); ++r) {
      for (int i = 0; i < queries[r]; ++i) pos.push_back(lens[r] - queries[r] + i);
      indptr.push_back(static_cast<int32_t>(pos.size()));
    }
  }
  int64_t n() const { return static_cast<int64_t>(pos.size()); }
};

std::vector<int32_t> host_ids(const Tensor& t) {
  const OwnedTensor h = OwnedTensor::copy_of(t, Device::cpu());
  const int32_t* p = h.view().data_as<int32_t>();
  return std::vector<int32_t>(p, p + h.view().numel());
}

std::vector<float> small_ints(size_t n, int lo, int hi, uint32_t seed) {
  const std::vector<int32_t> v = random_ints(n, lo, hi, seed);
  return std::vector<float>(v.begin(), v.end());
}

struct TopkCase {
  std::vector<int> lens, queries;
  int64_t heads, dim, k, page_size;
  DType pool_dtype, q_dtype;
  bool zero_q;  // every score 0: the k lowest positions win
};

void check_topk(const TopkCase& c, uint32_t seed) {
  Contexts ctx;
  const Queries qs(c.lens, c.queries);
  const int64_t n = qs.n(), key_col = 8;  // keys: columns [8, 8 + dim) of a wider pool
  const PoolPair pool(c.lens, c.page_size, key_col + c.dim + 4, c.pool_dtype, seed, true);
  std::vector<float> q = small_ints(static_cast<size_t>(n * c.heads * c.dim), -2, 2, seed + 1);
  if (c.zero_q) std::fill(q.begin(), q.end(), 0.0f);
  // Weights of both signs: -0 scores, and scores that tie across heads.
  const std::vector<float> w = small_ints(static_cast<size_t>(n * c.heads), -2, 3, seed + 2);
  const Pair qt = values_pair(q, c.q_dtype, Shape{n, c.heads, c.dim});
  const Pair wt = values_pair(w, DType::f32, Shape{n, c.heads});
  const Pair indptr = vector_pair(qs.indptr, Shape{static_cast<int64_t>(qs.indptr.size())});
  const Pair pos = vector_pair(qs.pos, Shape{n});
  const Pair ids =
      vector_pair(std::vector<int32_t>(static_cast<size_t>(n * c.k), -7), Shape{n, c.k});
  const float scale = 0.25f;
  index_topk(ctx.cpu, qt.cpu.view(), wt.cpu.view(), pool.cpu(key_col, key_col + c.dim),
             indptr.cpu.view(), pos.cpu.view(), scale, ids.cpu.view());
  index_topk(ctx.gpu, qt.gpu.view(), wt.gpu.view(), pool.gpu(key_col, key_col + c.dim),
             indptr.gpu.view(), pos.gpu.view(), scale, ids.gpu.view());
  ctx.gpu.synchronize();
  const std::vector<int32_t> want = host_ids(ids.cpu.view()), got = host_ids(ids.gpu.view());
  ASSERT_EQ(got.size(), want.size());
  for (int64_t t = 0; t < n; ++t) {
    const auto b = want.begin() + t * c.k, g = got.begin() + t * c.k;
    EXPECT_TRUE(std::equal(b, b + c.k, g))
        << "query " << t << " (position " << qs.pos[static_cast<size_t>(t)] << ") of k " << c.k
        << ", heads " << c.heads << " x " << c.dim << ", pool " << name_of(c.pool_dtype)
        << ": first difference at " << (std::mismatch(b, b + c.k, g).first - b);
  }
}

TEST(CudaSparseAttention, IndexTopkSmallKMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  uint32_t seed = 10;
  for (DType pool_dtype : {DType::f32, DType::bf16}) {
    // Verify rows (3 and 5 queries), a prefill row whose first queries see fewer than k keys, a
    // row without queries, a one-key row.
    check_topk({{23, 9, 40, 300, 1}, {3, 9, 0, 5, 1}, 3, 16, 6, 4, pool_dtype, pool_dtype, false},
               seed++);
    check_topk({{23, 9, 40, 300, 1}, {3, 9, 0, 5, 1}, 3, 16, 6, 4, pool_dtype, DType::f32, true},
               seed++);
    // A prefill of 300 queries: enough CTAs without splitting the keys (one kernel, no merge).
    check_topk({{600, 40}, {300, 3}, 2, 8, 6, 4, pool_dtype, pool_dtype, false}, seed++);
    // Heads not a multiple of the kernel's head groups, page size 16, k = 1.
    check_topk({{100, 57}, {4, 2}, 11, 32, 1, 16, pool_dtype, DType::bf16, false}, seed++);
  }
}

TEST(CudaSparseAttention, IndexTopk2048MatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  uint32_t seed = 40;
  // GLM-5's k: rows shorter than, equal to and just above k, and long ones whose candidate
  // buffer is cut several times; verify rows of 4 queries.
  check_topk({{2047, 2048, 2049, 9000, 5},
              {1, 2, 4, 4, 5},
              8,
              32,
              2048,
              64,
              DType::bf16,
              DType::bf16,
              false},
             seed++);
  // One long row and one query: the keys are split across CTAs, then merged.
  check_topk({{40000}, {1}, 4, 16, 2048, 64, DType::bf16, DType::bf16, false}, seed++);
  check_topk({{40000, 30000}, {2, 1}, 4, 16, 2048, 64, DType::f32, DType::f32, true}, seed++);
  // Many ties: 2 heads of 4 take few distinct scores.
  check_topk({{12000, 3000}, {1, 3}, 2, 4, 2048, 16, DType::f32, DType::f32, false}, seed++);
}

struct SparseCase {
  std::vector<int> lens, queries;
  int64_t heads, dq, dv, k, page_size;
  DType pool_dtype, out_dtype;
};

void check_sparse(const SparseCase& c, uint32_t seed) {
  Contexts ctx;
  const Queries qs(c.lens, c.queries);
  const int64_t n = qs.n();
  const PoolPair pool(c.lens, c.page_size, c.dq, c.pool_dtype, seed, false);
  // Each query's ids: a random subset of its visible keys, ascending, with -1 entries scattered
  // among them; the last query of each row selects nothing when `k` is small enough to test it.
  std::mt19937 gen(seed + 1);
  std::vector<int32_t> ids(static_cast<size_t>(n * c.k), -1);
  for (size_t r = 0; r + 1 < qs.indptr.size(); ++r) {
    for (int32_t t = qs.indptr[r]; t < qs.indptr[r + 1]; ++t) {
      if (t == qs.indptr[r + 1] - 1 && r % 2 == 1) continue;  // a query with no key: zeros
      std::vector<int32_t> keys(static_cast<size_t>(qs.pos[static_cast<size_t>(t)] + 1));
      std::iota(keys.begin(), keys.end(), 0);
      std::shuffle(keys.begin(), keys.end(), gen);
      keys.resize(std::min<size_t>(keys.size(), static_cast<size_t>(c.k)));
      std::sort(keys.begin(), keys.end());
      for (size_t i = 0; i < keys.size(); ++i)
        if (gen() % 5 == 0) keys[i] = -1;
      std::copy(keys.begin(), keys.end(), ids.begin() + t * c.k);
    }
  }
  const Pair idt = vector_pair(ids, Shape{n, c.k});
  const Pair qt = random_pair(DType::f32, Shape{n, c.heads, c.dq}, seed + 2);
  const Pair indptr = vector_pair(qs.indptr, Shape{static_cast<int64_t>(qs.indptr.size())});
  const Pair out = zeros_pair(c.out_dtype, Shape{n, c.heads, c.dv});
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.dq));
  // K: the whole row (dq columns), V: its first dv columns (MLA's shared latent).
  const PagedKv kv_cpu = pool.cpu(0, c.dq), kv_gpu = pool.gpu(0, c.dq);
  sparse_paged_attention(ctx.cpu, qt.cpu.view(),
                         PagedKv{kv_cpu.k_pages, kv_cpu.k_pages.slice(3, 0, c.dv),
                                 kv_cpu.page_indptr, kv_cpu.page_indices, kv_cpu.kv_lens},
                         indptr.cpu.view(), idt.cpu.view(), scale, out.cpu.view());
  sparse_paged_attention(ctx.gpu, qt.gpu.view(),
                         PagedKv{kv_gpu.k_pages, kv_gpu.k_pages.slice(3, 0, c.dv),
                                 kv_gpu.page_indptr, kv_gpu.page_indices, kv_gpu.kv_lens},
                         indptr.gpu.view(), idt.gpu.view(), scale, out.gpu.view());
  ctx.gpu.synchronize();
  expect_close(out.gpu.view(), out.cpu.view(), tolerance(c.out_dtype),
               "heads " + std::to_string(c.heads) + " dq " + std::to_string(c.dq) + " dv " +
                   std::to_string(c.dv) + " k " + std::to_string(c.k) + " pool " +
                   name_of(c.pool_dtype) + " out " + name_of(c.out_dtype));
}

TEST(CudaSparseAttention, SparsePagedAttentionMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  uint32_t seed = 70;
  for (DType pool_dtype : {DType::f32, DType::bf16}) {
    for (DType out_dtype : {DType::f32, DType::bf16}) {
      // The fixture's shape (latent 32 + rope 8), verify rows and a prefill.
      check_sparse({{23, 9, 50}, {3, 9, 2}, 4, 40, 32, 6, 4, pool_dtype, out_dtype}, seed++);
      // GLM-5's shape: 576 / 512 columns, more heads than a CTA takes, k = 2048 over long rows.
      check_sparse({{3000, 2100}, {2, 3}, 20, 576, 512, 2048, 64, pool_dtype, out_dtype}, seed++);
      // Middle widths and a k that is not a multiple of the key tile.
      check_sparse({{200, 77}, {1, 4}, 5, 192, 128, 45, 16, pool_dtype, out_dtype}, seed++);
    }
  }
}

}  // namespace
}  // namespace dspark::test
