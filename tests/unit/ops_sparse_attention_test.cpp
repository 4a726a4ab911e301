// layer_norm, index_topk and sparse_paged_attention (DeepSeek sparse attention) against naive
// double-precision references over the logical (unpaged) cache rows, and sparse attention over
// every visible key against paged_attention. The pages of each row are shuffled across the pool
// and slots never written hold NaN, so a read through a wrong page or past kv_len poisons the
// output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/attention.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/sparse_attention.h"

namespace dspark {
namespace {

using test::make_tensor;
using test::random_normal;
using test::relative_rms_error;

TEST(OpsLayerNorm, MatchesReference) {
  Context ctx(Device::cpu());
  const int64_t n = 5, d = 24, wide = 40;
  const std::vector<float> x = random_normal(static_cast<size_t>(n * wide), 1, 2.0f);
  const std::vector<float> w = random_normal(static_cast<size_t>(d), 2);
  const std::vector<float> b = random_normal(static_cast<size_t>(d), 3);
  std::vector<float> want(static_cast<size_t>(n * d));
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x.data() + r * wide + 8;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += row[j];
    mean /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) var += (row[j] - mean) * (row[j] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(d) + 1e-6);
    for (int64_t j = 0; j < d; ++j)
      want[static_cast<size_t>(r * d + j)] =
          static_cast<float>((row[j] - mean) * inv * w[j] + b[j]);
  }
  const OwnedTensor xt = make_tensor(x, DType::f32, Shape{n, wide}, Device::cpu());
  for (DType out_dtype : {DType::f32, DType::bf16}) {
    OwnedTensor out(out_dtype, Shape{n, d}, Device::cpu());
    OwnedTensor out_f32(DType::f32, Shape{n, d}, Device::cpu());
    // Columns [8, 32) of a wider buffer: rows contiguous, stride 40.
    layer_norm(ctx, xt.view().slice(1, 8, 8 + d),
               make_tensor(w, DType::f32, Shape{d}, Device::cpu()).view(),
               make_tensor(b, DType::f32, Shape{d}, Device::cpu()).view(), out.view(), 1e-6f);
    convert(ctx, out.view(), out_f32.view());
    EXPECT_LT(relative_rms_error(to_vector<float>(out_f32.view()), want),
              out_dtype == DType::f32 ? 1e-6 : 4e-3)
        << dtype_name(out_dtype);
  }
}

// A pool of rows [n_pages, page_size, 1, width] holding the logical rows of each batch row in
// shuffled pages (NaN elsewhere), and the batch's page table.
struct Pool {
  int64_t page_size = 4, width = 0;
  OwnedTensor pages, page_indptr, page_indices, kv_lens;
  std::vector<std::vector<std::vector<float>>> rows;  // [batch row][slot] -> width values

  Pool(const std::vector<int>& lens, int64_t width_, uint32_t seed) : width(width_) {
    std::vector<int32_t> indptr{0}, order;
    int64_t n_pages = 0;
    for (int len : lens) {
      n_pages += (len + page_size - 1) / page_size + 1;  // one spare page per row
      indptr.push_back(static_cast<int32_t>(n_pages));
    }
    order.resize(static_cast<size_t>(n_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    std::vector<float> data(static_cast<size_t>(n_pages * page_size * width), NAN);
    for (size_t r = 0; r < lens.size(); ++r) {
      rows.emplace_back();
      for (int j = 0; j < lens[r]; ++j) {
        std::vector<float> v = random_normal(static_cast<size_t>(width), seed + 1000 * r + j);
        const int64_t page = order[static_cast<size_t>(indptr[r] + j / page_size)];
        std::copy(v.begin(), v.end(), data.begin() + (page * page_size + j % page_size) * width);
        rows.back().push_back(std::move(v));
      }
    }
    pages = make_tensor(data, DType::f32, Shape{n_pages, page_size, 1, width}, Device::cpu());
    page_indptr =
        OwnedTensor::from_vector(indptr, Shape{static_cast<int64_t>(indptr.size())}, Device::cpu());
    page_indices = OwnedTensor::from_vector(order, Shape{n_pages}, Device::cpu());
    kv_lens =
        OwnedTensor::from_vector(lens, Shape{static_cast<int64_t>(lens.size())}, Device::cpu());
  }
  PagedKv view(int64_t begin, int64_t end) const {
    const Tensor p = pages.view().slice(3, begin, end);
    return PagedKv{p, p, page_indptr.view(), page_indices.view(), kv_lens.view()};
  }
};

// Two rows: a 3-query verify-like step at the end of a 23-key row and a prefill of 9 keys (its
// first queries see fewer keys than k).
struct Batch {
  std::vector<int> lens{23, 9};
  std::vector<int32_t> q_indptr{0, 3, 12}, q_pos{20, 21, 22, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> row_of{0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  int64_t n() const { return static_cast<int64_t>(q_pos.size()); }
  OwnedTensor indptr_t() const {
    return OwnedTensor::from_vector(q_indptr, Shape{3}, Device::cpu());
  }
  OwnedTensor pos_t() const { return OwnedTensor::from_vector(q_pos, Shape{n()}, Device::cpu()); }
};

// The k best of `scores` (ties to the lower position), ascending, -1 padded.
std::vector<int32_t> top_k(const std::vector<double>& scores, int64_t k) {
  std::vector<int32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  idx.resize(std::min<size_t>(idx.size(), static_cast<size_t>(k)));
  std::sort(idx.begin(), idx.end());
  idx.resize(static_cast<size_t>(k), -1);
  return idx;
}

TEST(OpsIndexTopk, MatchesReferenceWithTiesAndShortRows) {
  Context ctx(Device::cpu());
  const Batch b;
  const int64_t heads = 3, d = 16, k = 5, key_col = 8, n = b.n();
  const Pool pool(b.lens, key_col + d, 7);
  const std::vector<float> q = random_normal(static_cast<size_t>(n * heads * d), 11);
  // Positive and negative head weights: scores of both signs, and keys scoring exactly 0.
  const std::vector<float> w = random_normal(static_cast<size_t>(n * heads), 12);
  const float scale = 0.125f;
  OwnedTensor ids(DType::i32, Shape{n, k}, Device::cpu());
  index_topk(ctx, make_tensor(q, DType::f32, Shape{n, heads, d}, Device::cpu()).view(),
             make_tensor(w, DType::f32, Shape{n, heads}, Device::cpu()).view(),
             pool.view(key_col, key_col + d), b.indptr_t().view(), b.pos_t().view(), scale,
             ids.view());
  const std::vector<int32_t> got = to_vector<int32_t>(ids.view());
  for (int64_t t = 0; t < n; ++t) {
    const auto& row = pool.rows[static_cast<size_t>(b.row_of[static_cast<size_t>(t)])];
    std::vector<double> scores;
    for (int64_t j = 0; j <= b.q_pos[static_cast<size_t>(t)]; ++j) {
      double s = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += double{q[static_cast<size_t>((t * heads + h) * d + c)]} *
                 row[static_cast<size_t>(j)][static_cast<size_t>(key_col + c)];
        s += w[static_cast<size_t>(t * heads + h)] * std::max(0.0, dot);
      }
      scores.push_back(s * scale);
    }
    const std::vector<int32_t> want = top_k(scores, k);
    EXPECT_EQ(std::vector<int32_t>(got.begin() + t * k, got.begin() + (t + 1) * k), want)
        << "query " << t;
  }
}

// Equal scores (here: all zero, every head weight 0) keep the lowest positions.
TEST(OpsIndexTopk, TiesKeepTheLowerPositions) {
  Context ctx(Device::cpu());
  const Batch b;
  const int64_t heads = 2, d = 8, k = 3, n = b.n();
  const Pool pool(b.lens, d, 8);
  OwnedTensor ids(DType::i32, Shape{n, k}, Device::cpu());
  index_topk(ctx,
             make_tensor(random_normal(static_cast<size_t>(n * heads * d), 9), DType::f32,
                         Shape{n, heads, d}, Device::cpu())
                 .view(),
             OwnedTensor::zeros(DType::f32, Shape{n, heads}, Device::cpu()).view(), pool.view(0, d),
             b.indptr_t().view(), b.pos_t().view(), 1.0f, ids.view());
  const std::vector<int32_t> got = to_vector<int32_t>(ids.view());
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> want{0, 1, 2};
    for (int32_t i = b.q_pos[static_cast<size_t>(t)] + 1; i < 3; ++i) want[i] = -1;
    EXPECT_EQ(std::vector<int32_t>(got.begin() + t * k, got.begin() + (t + 1) * k), want)
        << "query " << t;
  }
}

// out[t, h, :] by the definition in ops/sparse_attention.h, in double.
std::vector<float> sparse_reference(const Pool& pool, const Batch& b, const std::vector<float>& q,
                                    int64_t heads, int64_t dq, int64_t dv,
                                    const std::vector<int32_t>& ids, int64_t k, float scale) {
  std::vector<float> out(static_cast<size_t>(b.n() * heads * dv), 0.0f);
  for (int64_t t = 0; t < b.n(); ++t) {
    const auto& row = pool.rows[static_cast<size_t>(b.row_of[static_cast<size_t>(t)])];
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> s;
      std::vector<int32_t> keys;
      for (int64_t i = 0; i < k; ++i) {
        const int32_t j = ids[static_cast<size_t>(t * k + i)];
        if (j < 0) continue;
        double dot = 0;
        for (int64_t c = 0; c < dq; ++c)
          dot += double{q[static_cast<size_t>((t * heads + h) * dq + c)]} *
                 row[static_cast<size_t>(j)][static_cast<size_t>(c)];
        s.push_back(dot * scale);
        keys.push_back(j);
      }
      if (s.empty()) continue;
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (size_t i = 0; i < s.size(); ++i)
          acc += s[i] / sum * row[static_cast<size_t>(keys[i])][static_cast<size_t>(c)];
        out[static_cast<size_t>((t * heads + h) * dv + c)] = static_cast<float>(acc);
      }
    }
  }
  return out;
}

TEST(OpsSparsePagedAttention, SelectedKeysMatchReference) {
  Context ctx(Device::cpu());
  const Batch b;
  const int64_t heads = 4, dq = 20, dv = 12, k = 4, n = b.n();
  const Pool pool(b.lens, 24, 21);
  const std::vector<float> q = random_normal(static_cast<size_t>(n * heads * dq), 22);
  // Any visible keys, some -1 entries; query 4 (position 1) selects none.
  std::vector<int32_t> ids(static_cast<size_t>(n * k), -1);
  std::mt19937 rng(23);
  for (int64_t t = 0; t < n; ++t) {
    if (t == 4) continue;
    for (int64_t i = 0; i < k; ++i) {
      const int pos = b.q_pos[static_cast<size_t>(t)];
      if (i < 3 || t % 2 == 0)
        ids[static_cast<size_t>(t * k + i)] = static_cast<int32_t>(rng() % (pos + 1));
    }
  }
  const float scale = 0.3f;
  OwnedTensor out(DType::f32, Shape{n, heads, dv}, Device::cpu());
  sparse_paged_attention(ctx, make_tensor(q, DType::f32, Shape{n, heads, dq}, Device::cpu()).view(),
                         pool.view(0, 24), b.indptr_t().view(),
                         OwnedTensor::from_vector(ids, Shape{n, k}, Device::cpu()).view(), scale,
                         out.view());
  const std::vector<float> got = to_vector<float>(out.view());
  const std::vector<float> want = sparse_reference(pool, b, q, heads, dq, dv, ids, k, scale);
  EXPECT_LT(relative_rms_error(got, want), 1e-6);
  for (int64_t c = 0; c < heads * dv; ++c)
    EXPECT_EQ(got[static_cast<size_t>(4 * heads * dv + c)], 0.0f);
}

// With every visible key selected, sparse attention is causal paged attention.
TEST(OpsSparsePagedAttention, AllVisibleKeysEqualPagedAttention) {
  Context ctx(Device::cpu());
  const Batch b;
  const int64_t heads = 4, d = 16, k = 32, n = b.n();
  const Pool pool(b.lens, d, 31);
  const OwnedTensor q = make_tensor(random_normal(static_cast<size_t>(n * heads * d), 32),
                                    DType::f32, Shape{n, heads, d}, Device::cpu());
  std::vector<int32_t> ids(static_cast<size_t>(n * k), -1);
  for (int64_t t = 0; t < n; ++t)
    for (int32_t j = 0; j <= b.q_pos[static_cast<size_t>(t)]; ++j)
      ids[static_cast<size_t>(t * k + j)] = j;
  OwnedTensor sparse(DType::f32, Shape{n, heads, d}, Device::cpu());
  OwnedTensor dense(DType::f32, Shape{n, heads, d}, Device::cpu());
  sparse_paged_attention(ctx, q.view(), pool.view(0, d), b.indptr_t().view(),
                         OwnedTensor::from_vector(ids, Shape{n, k}, Device::cpu()).view(), 0.25f,
                         sparse.view());
  paged_attention(ctx, q.view(), pool.view(0, d), b.indptr_t().view(), b.pos_t().view(),
                  AttentionParams{0.25f, true, 0, 0.0f}, dense.view());
  EXPECT_LT(relative_rms_error(to_vector<float>(sparse.view()), to_vector<float>(dense.view())),
            1e-6);
}

TEST(OpsSparsePagedAttention, RejectsKeysBeyondTheRow) {
  Context ctx(Device::cpu());
  const Batch b;
  const int64_t heads = 2, d = 8, n = b.n();
  const Pool pool(b.lens, d, 41);
  std::vector<int32_t> ids(static_cast<size_t>(n), 0);
  ids[5] = 9;  // row 1 holds 9 keys: 0..8
  OwnedTensor out(DType::f32, Shape{n, heads, d}, Device::cpu());
  EXPECT_THROW(
      sparse_paged_attention(ctx,
                             make_tensor(random_normal(static_cast<size_t>(n * heads * d), 42),
                                         DType::f32, Shape{n, heads, d}, Device::cpu())
                                 .view(),
                             pool.view(0, d), b.indptr_t().view(),
                             OwnedTensor::from_vector(ids, Shape{n, 1}, Device::cpu()).view(), 1.0f,
                             out.view()),
      Error);
}

}  // namespace
}  // namespace dspark
