// CPU kernels of kv_write and paged_attention (contract: ops/attention.h).
// paged_attention: one task per (query token, kv head). The task loads the group's query heads
// once (pre-scaled), then walks the visible keys in chunks of kKeyChunk read through the CSR page
// table: scores for every head of the group, an online-softmax rescale per chunk, and the V rows
// accumulated into f32 per head. K/V rows are converted to f32 once per chunk for the whole group.
#include <cmath>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kKeyChunk = 64;

// A strided [.., .., D] row of a runtime float dtype loaded as f32 / stored from f32.
void load_any(DType dtype, const void* src, float* dst, int64_t n) {
  dispatch_float(dtype,
                 [&]<typename T>(TypeTag<T>) { load_f32(static_cast<const T*>(src), dst, n); });
}
void store_any(DType dtype, const float* src, void* dst, int64_t n) {
  dispatch_float(dtype, [&]<typename T>(TypeTag<T>) { store_f32(src, static_cast<T*>(dst), n); });
}
void* element(const Tensor& t, int64_t i, int64_t j) {
  return static_cast<char*>(t.data()) +
         (i * t.stride(0) + j * t.stride(1)) * static_cast<int64_t>(t.element_size());
}

struct AttentionTask {
  int64_t lo = 0, hi = 0;  // visible keys [lo, hi) of the row
  const int32_t* pages = nullptr;
};

template <typename TKV>
void attend(const AttentionTask& task, const float* q, int64_t group, int64_t head_dim,
            int64_t kv_head, const Tensor& k_pages, const Tensor& v_pages, float softcap,
            float* out, float* work) {
  const int64_t page_size = k_pages.size(1), n_kv_heads = k_pages.size(2);
  const TKV* kp = static_cast<const TKV*>(k_pages.data());
  const TKV* vp = static_cast<const TKV*>(v_pages.data());
  auto offset = [&](int64_t j) {
    const int64_t page = task.pages[j / page_size];
    return ((page * page_size + j % page_size) * n_kv_heads + kv_head) * head_dim;
  };
  float* kbuf = work;                           // [kKeyChunk, head_dim]
  float* scores = kbuf + kKeyChunk * head_dim;  // [group, kKeyChunk]
  float* m = scores + group * kKeyChunk;        // [group] running max
  float* l = m + group;                         // [group] running sum
  float* vrow = l + group;                      // [head_dim]
  for (int64_t h = 0; h < group; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  std::fill(out, out + group * head_dim, 0.0f);
  for (int64_t j0 = task.lo; j0 < task.hi; j0 += kKeyChunk) {
    const int64_t c = std::min(kKeyChunk, task.hi - j0);
    for (int64_t jj = 0; jj < c; ++jj)
      load_f32(kp + offset(j0 + jj), kbuf + jj * head_dim, head_dim);
    for (int64_t h = 0; h < group; ++h) {
      float* s = scores + h * kKeyChunk;
      float chunk_max = -INFINITY;
      for (int64_t jj = 0; jj < c; ++jj) {
        float v = dot_f32(q + h * head_dim, kbuf + jj * head_dim, head_dim);
        if (softcap > 0.0f) v = softcap * std::tanh(v / softcap);
        s[jj] = v;
        chunk_max = std::max(chunk_max, v);
      }
      const float new_max = std::max(m[h], chunk_max);
      const float correction = std::exp(m[h] - new_max);  // exp(-inf) = 0 on the first chunk
      l[h] *= correction;
      float* o = out + h * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) o[d] *= correction;
      for (int64_t jj = 0; jj < c; ++jj) {
        s[jj] = std::exp(s[jj] - new_max);
        l[h] += s[jj];
      }
      m[h] = new_max;
    }
    for (int64_t jj = 0; jj < c; ++jj) {
      load_f32(vp + offset(j0 + jj), vrow, head_dim);
      for (int64_t h = 0; h < group; ++h)
        axpy_f32(scores[h * kKeyChunk + jj], vrow, out + h * head_dim, head_dim);
    }
  }
  for (int64_t h = 0; h < group; ++h) {
    const float inv = 1.0f / l[h];
    for (int64_t d = 0; d < head_dim; ++d) out[h * head_dim + d] *= inv;
  }
}

}  // namespace

void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots,
              const Tensor& k_pages, const Tensor& v_pages) {
  const int64_t n = k.size(0), n_kv_heads = k.size(1), head_dim = k.size(2);
  const int32_t* s = slots.data_as<int32_t>();
  const int64_t es = static_cast<int64_t>(k_pages.element_size());
  ctx.pool().parallel_for(n, 4, [&](int64_t begin, int64_t end) {
    float* buf = thread_scratch(head_dim, 0);
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t h = 0; h < n_kv_heads; ++h) {
        const int64_t dst = (static_cast<int64_t>(s[i]) * n_kv_heads + h) * head_dim * es;
        load_any(k.dtype(), element(k, i, h), buf, head_dim);
        store_any(k_pages.dtype(), buf, static_cast<char*>(k_pages.data()) + dst, head_dim);
        load_any(v.dtype(), element(v, i, h), buf, head_dim);
        store_any(v_pages.dtype(), buf, static_cast<char*>(v_pages.data()) + dst, head_dim);
      }
    }
  });
}

void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out) {
  const int64_t n_tokens = q.size(0), n_heads = q.size(1), head_dim = q.size(2);
  const int64_t n_kv_heads = kv.k_pages.size(2), group = n_heads / n_kv_heads;
  const int64_t n_rows = q_indptr.size(0) - 1;
  const int32_t* qi = q_indptr.data_as<int32_t>();
  const int32_t* pos = q_pos.data_as<int32_t>();
  const int32_t* page_indptr = kv.page_indptr.data_as<int32_t>();
  const int32_t* pages = kv.page_indices.data_as<int32_t>();
  const int32_t* kv_lens = kv.kv_lens.data_as<int32_t>();
  std::vector<int32_t> row_of(static_cast<size_t>(n_tokens));
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t t = qi[r]; t < qi[r + 1]; ++t)
      row_of[static_cast<size_t>(t)] = static_cast<int32_t>(r);
  const int64_t work_floats = kKeyChunk * head_dim + group * kKeyChunk + 2 * group + head_dim;
  dispatch_float(kv.k_pages.dtype(), [&]<typename TKV>(TypeTag<TKV>) {
    ctx.pool().parallel_for(n_tokens * n_kv_heads, 1, [&](int64_t begin, int64_t end) {
      float* qbuf = thread_scratch(group * head_dim, 0);
      float* obuf = thread_scratch(group * head_dim, 1);
      float* work = thread_scratch(work_floats, 2);
      for (int64_t item = begin; item < end; ++item) {
        const int64_t t = item / n_kv_heads, g = item % n_kv_heads;
        const int64_t r = row_of[static_cast<size_t>(t)];
        AttentionTask task;
        task.pages = pages + page_indptr[r];
        task.hi = kv_lens[r];
        const int64_t p = pos[t];
        if (params.causal) task.hi = std::min<int64_t>(task.hi, p + 1);
        if (params.sliding_window > 0)
          task.lo = std::max<int64_t>(0, p - params.sliding_window + 1);
        if (task.hi > task.lo) {
          for (int64_t h = 0; h < group; ++h) {
            float* qh = qbuf + h * head_dim;
            load_any(q.dtype(), element(q, t, g * group + h), qh, head_dim);
            for (int64_t d = 0; d < head_dim; ++d) qh[d] *= params.scale;
          }
          attend<TKV>(task, qbuf, group, head_dim, g, kv.k_pages, kv.v_pages, params.softcap, obuf,
                      work);
        } else {
          std::fill(obuf, obuf + group * head_dim, 0.0f);  // sees no key
        }
        for (int64_t h = 0; h < group; ++h)
          store_any(out.dtype(), obuf + h * head_dim, element(out, t, g * group + h), head_dim);
      }
    });
  });
}

}  // namespace dspark::cpu
