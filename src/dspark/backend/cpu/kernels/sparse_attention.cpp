// CPU kernels of index_topk and sparse_paged_attention (contract: ops/sparse_attention.h). Both run
// one query per task; a query's result depends on its own inputs only, so it does not change with
// the batch around it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

// The row of one key (slot j of a batch row) in a [n_pages, page_size, 1, W] pool, as f32 (the
// first `width` columns).
class PoolRows {
 public:
  PoolRows(const Tensor& pages, const PagedKv& kv)
      : pages_(pages),
        page_size_(pages.size(1)),
        page_indptr_(kv.page_indptr.data_as<int32_t>()),
        page_indices_(kv.page_indices.data_as<int32_t>()) {}

  void load(int64_t row, int64_t j, int64_t width, float* dst) const {
    const int64_t page = page_indices_[page_indptr_[row] + j / page_size_];
    const int64_t offset = page * pages_.stride(0) + (j % page_size_) * pages_.stride(1);
    dispatch_float(pages_.dtype(), [&]<typename T>(TypeTag<T>) {
      load_f32(static_cast<const T*>(pages_.data()) + offset, dst, width);
    });
  }

 private:
  const Tensor& pages_;
  int64_t page_size_;
  const int32_t* page_indptr_;
  const int32_t* page_indices_;
};

// The batch row of each query.
std::vector<int64_t> rows_of(const Tensor& q_indptr, int64_t n) {
  std::vector<int64_t> row(static_cast<size_t>(n));
  const int32_t* qi = q_indptr.data_as<int32_t>();
  for (int64_t r = 0; r + 1 < q_indptr.size(0); ++r)
    for (int64_t t = qi[r]; t < qi[r + 1]; ++t) row[static_cast<size_t>(t)] = r;
  return row;
}

// Element (i, j) of a 3-D view [n, H, D] with a contiguous last dim, as f32 row of D.
void load_head(const Tensor& x, int64_t t, int64_t h, float* dst) {
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    load_f32(static_cast<const T*>(x.data()) + t * x.stride(0) + h * x.stride(1), dst, x.size(2));
  });
}

}  // namespace

void index_topk(Context& ctx, const Tensor& q, const Tensor& head_weights, const PagedKv& keys,
                const Tensor& q_indptr, const Tensor& q_pos, float scale, const Tensor& ids) {
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2), k = ids.size(1);
  const std::vector<int64_t> row_of = rows_of(q_indptr, n);
  const int32_t* pos = q_pos.data_as<int32_t>();
  const int32_t* lens = keys.kv_lens.data_as<int32_t>();
  int32_t* out = ids.data_as<int32_t>();
  const PoolRows pool(keys.k_pages, keys);
  ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qh(static_cast<size_t>(heads * d)), w(static_cast<size_t>(heads)),
        key(static_cast<size_t>(d));
    std::vector<std::pair<float, int32_t>> scored;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = row_of[static_cast<size_t>(t)];
      const int64_t visible = std::min<int64_t>(int64_t{pos[t]} + 1, lens[r]);
      for (int64_t h = 0; h < heads; ++h) load_head(q, t, h, qh.data() + h * d);
      dispatch_float(head_weights.dtype(), [&]<typename T>(TypeTag<T>) {
        load_f32(row_ptr<const T>(head_weights, t), w.data(), heads);
      });
      scored.clear();
      for (int64_t j = 0; j < visible; ++j) {
        pool.load(r, j, d, key.data());
        float s = 0.0f;
        for (int64_t h = 0; h < heads; ++h)
          s +=
              w[static_cast<size_t>(h)] * std::max(0.0f, dot_f32(qh.data() + h * d, key.data(), d));
        scored.emplace_back(s * scale, static_cast<int32_t>(j));
      }
      // The k best, ties to the lower position; then in ascending position.
      const int64_t kept = std::min<int64_t>(k, visible);
      std::partial_sort(scored.begin(), scored.begin() + kept, scored.end(),
                        [](const auto& a, const auto& b) {
                          return a.first > b.first || (a.first == b.first && a.second < b.second);
                        });
      int32_t* dst = out + t * k;
      for (int64_t i = 0; i < kept; ++i) dst[i] = scored[static_cast<size_t>(i)].second;
      std::sort(dst, dst + kept);
      std::fill(dst + kept, dst + k, -1);
    }
  });
}

void sparse_paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv,
                            const Tensor& q_indptr, const Tensor& ids, float scale,
                            const Tensor& out) {
  const int64_t n = q.size(0), heads = q.size(1), dq = q.size(2), dv = out.size(2), k = ids.size(1);
  const std::vector<int64_t> row_of = rows_of(q_indptr, n);
  const int32_t* sel = ids.data_as<int32_t>();
  const PoolRows keys(kv.k_pages, kv), values(kv.v_pages, kv);
  ctx.pool().parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> kr(static_cast<size_t>(k * dq)), vr(static_cast<size_t>(k * dv)),
        qh(static_cast<size_t>(dq)), p(static_cast<size_t>(k)), acc(static_cast<size_t>(dv));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = row_of[static_cast<size_t>(t)];
      int64_t m = 0;  // the query's keys, gathered once for every head
      for (int64_t i = 0; i < k; ++i) {
        const int32_t j = sel[t * k + i];
        if (j < 0) continue;
        keys.load(r, j, dq, kr.data() + m * dq);
        values.load(r, j, dv, vr.data() + m * dv);
        ++m;
      }
      for (int64_t h = 0; h < heads; ++h) {
        load_head(q, t, h, qh.data());
        std::fill(acc.begin(), acc.end(), 0.0f);
        if (m > 0) {
          float mx = -INFINITY;
          for (int64_t i = 0; i < m; ++i) {
            p[static_cast<size_t>(i)] = scale * dot_f32(qh.data(), kr.data() + i * dq, dq);
            mx = std::max(mx, p[static_cast<size_t>(i)]);
          }
          float sum = 0.0f;
          for (int64_t i = 0; i < m; ++i) {
            p[static_cast<size_t>(i)] = std::exp(p[static_cast<size_t>(i)] - mx);
            sum += p[static_cast<size_t>(i)];
          }
          for (int64_t i = 0; i < m; ++i) {
            const float wi = p[static_cast<size_t>(i)] / sum;
            const float* v = vr.data() + i * dv;
            for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] += wi * v[c];
          }
        }
        dispatch_float(out.dtype(), [&]<typename T>(TypeTag<T>) {
          store_f32(acc.data(), static_cast<T*>(out.data()) + t * out.stride(0) + h * out.stride(1),
                    dv);
        });
      }
    }
  });
}

}  // namespace dspark::cpu
