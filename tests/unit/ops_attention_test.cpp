// kv_write + paged_attention against a naive double-precision attention over the logical
// (unpaged) K/V. The cache pages of each row are shuffled across the pool and every slot that
// is never written holds NaN, so a read through a wrong page or past kv_len poisons the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/attention.h"

namespace dspark {
namespace {

using test::make_tensor;
using test::random_normal;
using test::relative_rms_error;

struct RowSpec {
  int kv_len = 0;
  std::vector<int> positions;  // of the row's queries
};

struct AttnCase {
  std::string name;
  int64_t n_heads = 4, n_kv_heads = 4, head_dim = 32, page_size = 16;
  DType q_dtype = DType::f32, kv_dtype = DType::f32, out_dtype = DType::f32;
  AttentionParams params;
  std::vector<RowSpec> rows;
};

AttnCase make_case(std::string name, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                   int64_t page_size) {
  AttnCase c;
  c.name = std::move(name);
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.page_size = page_size;
  return c;
}

// Queries at positions [first, first + count).
std::vector<int> span_of(int first, int count) {
  std::vector<int> p(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) p[i] = first + i;
  return p;
}

using test::rounded;

// out[t, h, :] by the definition in ops/attention.h, in double.
std::vector<float> attention_reference(const AttnCase& c, const std::vector<float>& q,
                                       const std::vector<std::vector<float>>& k,
                                       const std::vector<std::vector<float>>& v) {
  const int64_t h_n = c.n_heads, kvh_n = c.n_kv_heads, d = c.head_dim, group = h_n / kvh_n;
  std::vector<float> out;
  int64_t t = 0;
  for (size_t r = 0; r < c.rows.size(); ++r) {
    for (int pos : c.rows[r].positions) {
      for (int64_t h = 0; h < h_n; ++h) {
        const int64_t g = h / group;
        std::vector<double> scores;
        std::vector<int> keys;
        for (int j = 0; j < c.rows[r].kv_len; ++j) {
          if (c.params.causal && j > pos) continue;
          if (c.params.sliding_window > 0 && j <= pos - c.params.sliding_window) continue;
          double s = 0;
          for (int64_t i = 0; i < d; ++i)
            s += static_cast<double>(q[(t * h_n + h) * d + i]) * k[r][(j * kvh_n + g) * d + i];
          s *= c.params.scale;
          if (c.params.softcap > 0) s = c.params.softcap * std::tanh(s / c.params.softcap);
          scores.push_back(s);
          keys.push_back(j);
        }
        std::vector<double> o(static_cast<size_t>(d), 0.0);
        if (!scores.empty()) {
          const double m = *std::max_element(scores.begin(), scores.end());
          double z = 0;
          for (double& s : scores) z += (s = std::exp(s - m));
          for (size_t a = 0; a < keys.size(); ++a)
            for (int64_t i = 0; i < d; ++i)
              o[i] += scores[a] / z * v[r][(keys[a] * kvh_n + g) * d + i];
        }
        for (double x : o) out.push_back(static_cast<float>(x));
      }
      ++t;
    }
  }
  return out;
}

void run_case(const AttnCase& c, uint32_t seed) {
  SCOPED_TRACE(c.name);
  Context ctx(Device::cpu());
  std::mt19937 gen(seed);
  const int64_t kvh = c.n_kv_heads, d = c.head_dim, ps = c.page_size;
  const int64_t n_rows = static_cast<int64_t>(c.rows.size());
  // Shuffled pages: each row gets ceil(kv_len / ps) (+1 spare for odd rows) pages of a pool with
  // unused pages in between.
  std::vector<int64_t> n_row_pages;
  int64_t total_pages = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    n_row_pages.push_back((c.rows[r].kv_len + ps - 1) / ps + (r % 2));
    total_pages += n_row_pages.back();
  }
  const int64_t pool = total_pages + 3;
  std::vector<int32_t> perm(static_cast<size_t>(pool));
  for (int64_t i = 0; i < pool; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<int32_t> page_indptr{0}, page_indices, kv_lens, q_indptr{0}, q_pos, slots;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t p = 0; p < n_row_pages[r]; ++p) page_indices.push_back(perm[page_indices.size()]);
    page_indptr.push_back(static_cast<int32_t>(page_indices.size()));
    kv_lens.push_back(c.rows[r].kv_len);
    for (int pos : c.rows[r].positions) q_pos.push_back(pos);
    q_indptr.push_back(static_cast<int32_t>(q_pos.size()));
    for (int j = 0; j < c.rows[r].kv_len; ++j)
      slots.push_back(static_cast<int32_t>(page_indices[page_indptr[r] + j / ps] * ps + j % ps));
  }
  const int64_t n_tokens = static_cast<int64_t>(q_pos.size());
  const int64_t n_kv = static_cast<int64_t>(slots.size());

  // Pools full of NaN; K/V of all rows written in one kv_write from a fused [n, (2 kvh + 1) d]
  // projection (strided token rows).
  const std::vector<float> nan_fill(static_cast<size_t>(pool * ps * kvh * d), NAN);
  OwnedTensor k_pages = make_tensor(nan_fill, c.kv_dtype, Shape{pool, ps, kvh, d}, Device::cpu());
  OwnedTensor v_pages = make_tensor(nan_fill, c.kv_dtype, Shape{pool, ps, kvh, d}, Device::cpu());
  const int64_t width = (2 * kvh + 1) * d;
  OwnedTensor fused = make_tensor(random_normal(static_cast<size_t>(n_kv * width), seed + 1),
                                  DType::f32, Shape{n_kv, width}, Device::cpu());
  const Tensor k_new(fused.view().data(), DType::f32, Shape{n_kv, kvh, d}, Shape{width, d, 1},
                     Device::cpu());
  const Tensor v_new(static_cast<float*>(fused.view().data()) + kvh * d, DType::f32,
                     Shape{n_kv, kvh, d}, Shape{width, d, 1}, Device::cpu());
  OwnedTensor slots_t = OwnedTensor::from_vector(slots, Shape{n_kv}, Device::cpu());
  kv_write(ctx, k_new, v_new, slots_t, k_pages, v_pages);

  // The logical K/V per row (rounded to the cache dtype), and kv_write's placement checked.
  const std::vector<float> fv = to_f32_vector(fused);
  const std::vector<float> kp = to_f32_vector(k_pages), vp = to_f32_vector(v_pages);
  std::vector<std::vector<float>> k_rows(n_rows), v_rows(n_rows);
  int64_t token = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int j = 0; j < c.rows[r].kv_len; ++j, ++token) {
      for (int64_t i = 0; i < kvh * d; ++i) {
        const float kx = rounded(fv[token * width + i], c.kv_dtype);
        const float vx = rounded(fv[token * width + kvh * d + i], c.kv_dtype);
        k_rows[r].push_back(kx);
        v_rows[r].push_back(vx);
        ASSERT_EQ(kp[slots[token] * kvh * d + i], kx);
        ASSERT_EQ(vp[slots[token] * kvh * d + i], vx);
      }
    }
  }

  OwnedTensor q =
      make_tensor(random_normal(static_cast<size_t>(n_tokens * c.n_heads * d), seed + 2), c.q_dtype,
                  Shape{n_tokens, c.n_heads, d}, Device::cpu());
  OwnedTensor out =
      make_tensor(std::vector<float>(static_cast<size_t>(n_tokens * c.n_heads * d), 7.0f),
                  c.out_dtype, Shape{n_tokens, c.n_heads, d}, Device::cpu());
  PagedKv kv;
  kv.k_pages = k_pages;
  kv.v_pages = v_pages;
  OwnedTensor pi = OwnedTensor::from_vector(page_indptr, Shape{n_rows + 1}, Device::cpu());
  OwnedTensor px = OwnedTensor::from_vector(
      page_indices, Shape{static_cast<int64_t>(page_indices.size())}, Device::cpu());
  OwnedTensor kl = OwnedTensor::from_vector(kv_lens, Shape{n_rows}, Device::cpu());
  OwnedTensor qi = OwnedTensor::from_vector(q_indptr, Shape{n_rows + 1}, Device::cpu());
  OwnedTensor qp = OwnedTensor::from_vector(q_pos, Shape{n_tokens}, Device::cpu());
  kv.page_indptr = pi;
  kv.page_indices = px;
  kv.kv_lens = kl;
  paged_attention(ctx, q, kv, qi, qp, c.params, out);

  const auto ref = attention_reference(c, to_f32_vector(q), k_rows, v_rows);
  // f32 output: relative RMS error <= 1e-5 (f32 dot products and online softmax);
  // bf16 output: its own rounding (2^-9 relative per element).
  const double tol = c.out_dtype == DType::f32 ? 1e-5 : 4e-3;
  EXPECT_LE(relative_rms_error(to_f32_vector(out), ref), tol);
}

AttentionParams params_of(int64_t head_dim, bool causal = true, int window = 0,
                          float softcap = 0.0f) {
  AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.causal = causal;
  p.sliding_window = window;
  p.softcap = softcap;
  return p;
}

TEST(OpsAttention, CausalPrefill) {
  AttnCase c = make_case("prefill", 4, 4, 64, 16);
  c.params = params_of(64);
  c.rows = {{37, span_of(0, 37)}, {1, span_of(0, 1)}, {16, span_of(0, 16)}};
  run_case(c, 1);
  c.name = "prefill bf16";
  c.q_dtype = c.kv_dtype = c.out_dtype = DType::bf16;
  run_case(c, 2);
}

// Decode and multi-token verify (1..32 queries per row) over a longer cached prefix, with GQA.
TEST(OpsAttention, MultiTokenVerifyGqa) {
  AttnCase c = make_case("verify", 8, 2, 32, 16);
  c.params = params_of(32);
  c.rows = {{101, span_of(100, 1)},
            {132, span_of(100, 32)},
            {105, span_of(100, 5)},
            {17, span_of(0, 17)},
            {300, span_of(297, 3)}};
  for (auto [q, kv, out] : {std::tuple{DType::f32, DType::f32, DType::f32},
                            {DType::bf16, DType::bf16, DType::f32},
                            {DType::bf16, DType::bf16, DType::bf16},
                            {DType::f32, DType::f16, DType::f32}}) {
    c.name =
        fmt::format("verify q={} kv={} out={}", dtype_name(q), dtype_name(kv), dtype_name(out));
    c.q_dtype = q;
    c.kv_dtype = kv;
    c.out_dtype = out;
    run_case(c, 3);
  }
}

// Rows longer than a key segment (256 keys, kernels/attention.cpp): decode and verify rows (the
// segments as tasks of their own, merged after), and with a long prefill row in the same call
// (each task folding its segments itself); a sliding window across segment boundaries.
TEST(OpsAttention, RowsAcrossKeySegments) {
  AttnCase c = make_case("segments", 6, 2, 32, 16);
  c.params = params_of(32);
  c.rows = {{600, span_of(599, 1)}, {530, span_of(522, 8)}, {257, span_of(256, 1)}};
  run_case(c, 10);
  c.name = "segments with a prefill row";
  c.rows.push_back({700, span_of(100, 600)});
  run_case(c, 11);
  c.name = "segments, sliding window";
  c.params = params_of(32, true, /*window=*/300);
  run_case(c, 12);
}

// KV heads with more query heads than a task's 32 lanes, not a multiple of them (48 per KV head):
// a KV head's heads split over several tasks.
TEST(OpsAttention, WideQueryGroups) {
  AttnCase c = make_case("wide groups", 96, 2, 8, 16);
  c.params = params_of(8);
  c.rows = {{40, span_of(36, 4)}, {300, span_of(299, 1)}};
  run_case(c, 13);
}

// Drafter block attention: every block query sees [prefix ++ whole block].
TEST(OpsAttention, NonCausalBlock) {
  AttnCase c = make_case("block", 4, 2, 64, 16);
  c.params = params_of(64, /*causal=*/false);
  c.rows = {{50, span_of(34, 16)}, {16, span_of(0, 16)}, {7, span_of(4, 3)}};
  run_case(c, 4);
  c.name = "block bf16";
  c.q_dtype = c.kv_dtype = DType::bf16;
  run_case(c, 5);
}

TEST(OpsAttention, SlidingWindowAndSoftcap) {
  AttnCase c = make_case("window", 4, 1, 32, 8);
  c.params = params_of(32, true, /*window=*/8);
  c.rows = {{70, span_of(60, 10)}, {20, span_of(0, 20)}, {9, span_of(8, 1)}};
  run_case(c, 6);
  c.name = "softcap";
  c.params = params_of(32, true, 0, /*softcap=*/2.0f);
  c.params.scale = 1.0f;  // scores of order sqrt(32): the cap matters
  run_case(c, 7);
  c.name = "window + softcap, non-causal";
  c.params = params_of(32, false, 5, 3.0f);
  run_case(c, 8);
}

// Rows without visible keys get zeros (kv_len 0, a query before the window's keys).
TEST(OpsAttention, RowsWithNoVisibleKeys) {
  AttnCase c = make_case("empty rows", 2, 2, 16, 4);
  c.params = params_of(16);
  c.rows = {{0, span_of(0, 2)}, {6, span_of(3, 3)}, {0, span_of(0, 1)}};
  run_case(c, 9);
}

// Odd sizes: page size 5, head_dim 17, multi-query (1 kv head for 3 heads), f16 cache.
TEST(OpsAttention, OddSizes) {
  AttnCase c = make_case("odd", 3, 1, 17, 5);
  c.params = params_of(17);
  c.rows = {{23, span_of(0, 23)}, {11, span_of(9, 2)}, {1, span_of(0, 1)}, {33, span_of(1, 32)}};
  c.kv_dtype = DType::f16;
  run_case(c, 10);
}

// A query's output does not depend on how many queries its row has: the 8 queries of a verify
// row (24 lanes per kv head) against each query alone (3 lanes) and against a prefill of the
// row's last 460 queries, over 600 keys (three key segments), bit for bit, for an f32 and a bf16
// cache (SmolLM2's heads: 9 over 3 kv heads, 64).
TEST(OpsAttention, VerifyQueriesEqualSingleQueriesBitForBit) {
  constexpr int64_t kHeads = 9, kKvHeads = 3, kD = 64, kPage = 16, kPages = 40, kLen = 600;
  constexpr int64_t kQ = 8, kPrefill = 460;
  Context ctx(Device::cpu());
  for (const DType kv_dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(kv_dtype));
    const Shape page_shape{kPages, kPage, kKvHeads, kD};
    OwnedTensor k_pages = make_tensor(random_normal(static_cast<size_t>(page_shape.numel()), 71),
                                      kv_dtype, page_shape, Device::cpu());
    OwnedTensor v_pages = make_tensor(random_normal(static_cast<size_t>(page_shape.numel()), 72),
                                      kv_dtype, page_shape, Device::cpu());
    std::vector<int32_t> pages(static_cast<size_t>(kPages));
    for (int64_t i = 0; i < kPages; ++i)
      pages[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5) % kPages);
    // Query t sits at position kLen - kPrefill + t; the verify takes the last kQ.
    OwnedTensor q = make_tensor(random_normal(static_cast<size_t>(kPrefill * kHeads * kD), 73),
                                DType::f32, Shape{kPrefill, kHeads, kD}, Device::cpu());
    const OwnedTensor px = OwnedTensor::from_vector(pages, Shape{kPages}, Device::cpu());
    auto run = [&](int64_t t0, int64_t n) {
      std::vector<int32_t> pos;
      for (int64_t t = t0; t < t0 + n; ++t)
        pos.push_back(static_cast<int32_t>(kLen - kPrefill + t));
      const OwnedTensor pi =
          OwnedTensor::from_vector(std::vector<int32_t>{0, kPages}, Shape{2}, Device::cpu());
      const OwnedTensor kl =
          OwnedTensor::from_vector(std::vector<int32_t>{kLen}, Shape{1}, Device::cpu());
      const OwnedTensor qi = OwnedTensor::from_vector(
          std::vector<int32_t>{0, static_cast<int32_t>(n)}, Shape{2}, Device::cpu());
      const OwnedTensor qp = OwnedTensor::from_vector(pos, Shape{n}, Device::cpu());
      PagedKv kv;
      kv.k_pages = k_pages;
      kv.v_pages = v_pages;
      kv.page_indptr = pi;
      kv.page_indices = px;
      kv.kv_lens = kl;
      OwnedTensor out = OwnedTensor::zeros(DType::f32, Shape{n, kHeads, kD}, Device::cpu());
      paged_attention(ctx, q.view().slice(0, t0, t0 + n), kv, qi, qp, params_of(kD), out);
      return to_f32_vector(out);
    };
    const std::vector<float> all = run(kPrefill - kQ, kQ);
    for (int64_t t = 0; t < kQ; ++t) {
      const std::vector<float> one = run(kPrefill - kQ + t, 1);
      ASSERT_EQ(std::memcmp(one.data(), all.data() + t * kHeads * kD, one.size() * sizeof(float)),
                0)
          << "query " << t;
    }
    // The last kPrefill queries of the row at once (a prefill: enough partial outputs that each
    // task folds its key segments itself) against the verify's and single queries above.
    const std::vector<float> prefill = run(0, kPrefill);
    const size_t tail = static_cast<size_t>(kQ * kHeads * kD);
    ASSERT_EQ(std::memcmp(prefill.data() + prefill.size() - tail, all.data(), tail * sizeof(float)),
              0);
  }
}

TEST(OpsAttention, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  const int64_t ps = 4, kvh = 2, d = 8;
  OwnedTensor k_pages = OwnedTensor::zeros(DType::f32, Shape{3, ps, kvh, d}, Device::cpu());
  OwnedTensor v_pages = OwnedTensor::zeros(DType::f32, Shape{3, ps, kvh, d}, Device::cpu());
  OwnedTensor v_other = OwnedTensor::zeros(DType::bf16, Shape{3, ps, kvh, d}, Device::cpu());
  OwnedTensor k = OwnedTensor::zeros(DType::f32, Shape{2, kvh, d}, Device::cpu());
  auto i32 = [](std::vector<int32_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return OwnedTensor::from_vector(v, Shape{n}, Device::cpu());
  };
  EXPECT_NO_THROW(kv_write(ctx, k, k, i32({0, 11}), k_pages, v_pages));
  EXPECT_THROW(kv_write(ctx, k, k, i32({0, 12}), k_pages, v_pages), Error);  // slot past the pool
  EXPECT_THROW(kv_write(ctx, k, k, i32({0}), k_pages, v_pages), Error);
  EXPECT_THROW(kv_write(ctx, k, k, i32({0, 1}), k_pages, v_other), Error);
  OwnedTensor k_wrong = OwnedTensor::zeros(DType::f32, Shape{2, kvh, d + 1}, Device::cpu());
  EXPECT_THROW(kv_write(ctx, k_wrong, k_wrong, i32({0, 1}), k_pages, v_pages), Error);

  OwnedTensor q = OwnedTensor::zeros(DType::f32, Shape{2, 4, d}, Device::cpu());
  OwnedTensor out = OwnedTensor::zeros(DType::f32, Shape{2, 4, d}, Device::cpu());
  OwnedTensor pi = i32({0, 2}), px = i32({2, 0}), kl = i32({5}), qi = i32({0, 2}), qp = i32({3, 4});
  auto kv_of = [&](const Tensor& indptr, const Tensor& idx, const Tensor& lens) {
    return PagedKv{k_pages, v_pages, indptr, idx, lens};
  };
  const AttentionParams params;
  EXPECT_NO_THROW(paged_attention(ctx, q, kv_of(pi, px, kl), qi, qp, params, out));
  OwnedTensor q3 = OwnedTensor::zeros(DType::f32, Shape{2, 3, d}, Device::cpu());
  OwnedTensor out3 = OwnedTensor::zeros(DType::f32, Shape{2, 3, d}, Device::cpu());
  EXPECT_THROW(paged_attention(ctx, q3, kv_of(pi, px, kl), qi, qp, params, out3), Error);
  OwnedTensor bad_page = i32({2, 3});
  EXPECT_THROW(paged_attention(ctx, q, kv_of(pi, bad_page, kl), qi, qp, params, out), Error);
  OwnedTensor long_row = i32({9});  // 2 pages of 4 hold 8 tokens
  EXPECT_THROW(paged_attention(ctx, q, kv_of(pi, px, long_row), qi, qp, params, out), Error);
  OwnedTensor qi_bad = i32({0, 1});
  EXPECT_THROW(paged_attention(ctx, q, kv_of(pi, px, kl), qi_bad, qp, params, out), Error);
  OwnedTensor pi_bad = i32({0, 3});  // past the end of page_indices
  EXPECT_THROW(paged_attention(ctx, q, kv_of(pi_bad, px, kl), qi, qp, params, out), Error);
  AttentionParams neg_window;
  neg_window.sliding_window = -1;
  EXPECT_THROW(paged_attention(ctx, q, kv_of(pi, px, kl), qi, qp, neg_window, out), Error);
  OwnedTensor out_bad = OwnedTensor::zeros(DType::f32, Shape{2, 4, d + 1}, Device::cpu());
  EXPECT_THROW(paged_attention(ctx, q, kv_of(pi, px, kl), qi, qp, params, out_bad), Error);
}

}  // namespace
}  // namespace dspark
