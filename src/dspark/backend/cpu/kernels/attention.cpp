// CPU kernels of kv_write and paged_attention (contract: ops/attention.h).
// paged_attention: one task per (row, kv head, block of up to kQueryBlock queries of the row). A
// task's "lanes" are its (query, head of the kv group) pairs; it walks the union of the lanes'
// visible keys in chunks of kKeyChunk read through the CSR page table, converting each K/V row to
// f32 once for all lanes (so a 32-token verify or a drafter block reads the cache a few times, not
// 32 times), with an online-softmax rescale per lane and chunk and f32 accumulators.
#include <algorithm>
#include <cmath>
#include <vector>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kKeyChunk = 64;
constexpr int64_t kQueryBlock = 16;

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

struct Task {
  int64_t row, t0, t1, kv_head;
};

// Per-thread buffers of one task.
struct Lanes {
  int64_t n = 0, head_dim = 0;
  float* q = nullptr;       // [n, head_dim] pre-scaled queries
  float* acc = nullptr;     // [n, head_dim] unnormalised outputs
  float* scores = nullptr;  // [n, kKeyChunk] scores, then weights, of the current chunk
  float* m = nullptr;       // [n] running max
  float* l = nullptr;       // [n] running sum of weights
  int64_t* lo = nullptr;    // [n] visible keys [lo, hi) of the lane's query
  int64_t* hi = nullptr;
};

// The hot loops are compiled twice where GCC can (target_clones: baseline x86-64 and Haswell,
// picked at load time by the CPU): AVX2 runs the same arithmetic in wider registers (no
// reassociation, no FMA contraction under -std=c++20), so the results are bitwise those of the
// baseline build.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define DSPARK_AVX2_CLONES __attribute__((target_clones("default", "arch=haswell")))
#else
#define DSPARK_AVX2_CLONES
#endif

// Scores of keys [j0, j0 + c) (rows of kbuf) for every lane, then the lane's online-softmax step:
// its running max / sum are rescaled and scores[a] becomes the chunk's weights (0 where masked).
DSPARK_AVX2_CLONES
void score_chunk(const Lanes& ln, int64_t j0, int64_t c, const float* kbuf, float softcap) {
  const int64_t d = ln.head_dim;
  for (int64_t a = 0; a < ln.n; ++a) {
    float* s = ln.scores + a * kKeyChunk;
    float chunk_max = -INFINITY;
    for (int64_t jj = 0; jj < c; ++jj) {
      const int64_t j = j0 + jj;
      float v = -INFINITY;
      if (j >= ln.lo[a] && j < ln.hi[a]) {
        v = dot_f32(ln.q + a * d, kbuf + jj * d, d);
        if (softcap > 0.0f) v = softcap * std::tanh(v / softcap);
        chunk_max = std::max(chunk_max, v);
      }
      s[jj] = v;
    }
    if (chunk_max == -INFINITY) {  // the lane sees nothing in this chunk
      std::fill(s, s + c, 0.0f);
      continue;
    }
    const float new_max = std::max(ln.m[a], chunk_max);
    const float correction = std::exp(ln.m[a] - new_max);  // 0 on the lane's first chunk
    float* o = ln.acc + a * d;
    if (correction != 1.0f) {
      ln.l[a] *= correction;
      for (int64_t i = 0; i < d; ++i) o[i] *= correction;
    }
    for (int64_t jj = 0; jj < c; ++jj) {
      s[jj] = std::exp(s[jj] - new_max);  // masked: exp(-inf) = 0
      ln.l[a] += s[jj];
    }
    ln.m[a] = new_max;
  }
}

// acc[a] += sum_jj weight[a][jj] * V[jj], keys in increasing order for every lane.
DSPARK_AVX2_CLONES
void accumulate_chunk(const Lanes& ln, int64_t c, const float* vbuf) {
  const int64_t d = ln.head_dim;
  for (int64_t a = 0; a < ln.n; ++a) {
    const float* w = ln.scores + a * kKeyChunk;
    float* o = ln.acc + a * d;
    for (int64_t jj = 0; jj < c; ++jj)
      if (w[jj] != 0.0f) axpy_f32(w[jj], vbuf + jj * d, o, d);
  }
}

template <typename TKV>
void attend(const Lanes& ln, int64_t key_lo, int64_t key_hi, const int32_t* pages, int64_t kv_head,
            const Tensor& k_pages, const Tensor& v_pages, float softcap, float* kbuf, float* vbuf) {
  const int64_t d = ln.head_dim;
  const int64_t page_size = k_pages.size(1), n_kv_heads = k_pages.size(2);
  const TKV* kp = static_cast<const TKV*>(k_pages.data());
  const TKV* vp = static_cast<const TKV*>(v_pages.data());
  auto offset = [&](int64_t j) {
    const int64_t page = pages[j / page_size];
    return ((page * page_size + j % page_size) * n_kv_heads + kv_head) * d;
  };
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += kKeyChunk) {
    const int64_t c = std::min(kKeyChunk, key_hi - j0);
    for (int64_t jj = 0; jj < c; ++jj) load_f32(kp + offset(j0 + jj), kbuf + jj * d, d);
    score_chunk(ln, j0, c, kbuf, softcap);
    for (int64_t jj = 0; jj < c; ++jj) load_f32(vp + offset(j0 + jj), vbuf + jj * d, d);
    accumulate_chunk(ln, c, vbuf);
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
  const int64_t n_heads = q.size(1), d = q.size(2);
  const int64_t n_kv_heads = kv.k_pages.size(2), group = n_heads / n_kv_heads;
  const int64_t n_rows = q_indptr.size(0) - 1;
  const int32_t* qi = q_indptr.data_as<int32_t>();
  const int32_t* pos = q_pos.data_as<int32_t>();
  const int32_t* page_indptr = kv.page_indptr.data_as<int32_t>();
  const int32_t* pages = kv.page_indices.data_as<int32_t>();
  const int32_t* kv_lens = kv.kv_lens.data_as<int32_t>();
  // Query blocks of up to kQueryBlock tokens, smaller when that leaves fewer than ~4 tasks per
  // thread (a short verify batch: 8 tokens x 3 KV heads were 3 tasks for 2 threads). A smaller
  // block re-reads the row's keys (from cache) but changes no result: each lane's arithmetic
  // depends on its own query and the key chunks only.
  int64_t block = kQueryBlock;
  const int64_t want_tasks = 4 * static_cast<int64_t>(ctx.pool().size());
  auto count_tasks = [&](int64_t b) {
    int64_t n = 0;
    for (int64_t r = 0; r < n_rows; ++r) n += (qi[r + 1] - qi[r] + b - 1) / b * n_kv_heads;
    return n;
  };
  while (block > 1 && count_tasks(block) < want_tasks) block /= 2;
  std::vector<Task> tasks;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t t0 = qi[r]; t0 < qi[r + 1]; t0 += block)
      for (int64_t g = 0; g < n_kv_heads; ++g)
        tasks.push_back({r, t0, std::min<int64_t>(t0 + block, qi[r + 1]), g});
  const int64_t max_lanes = kQueryBlock * group;
  dispatch_float(kv.k_pages.dtype(), [&]<typename TKV>(TypeTag<TKV>) {
    ctx.pool().parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
      Lanes ln;
      ln.head_dim = d;
      ln.q = thread_scratch(max_lanes * d, 0);
      ln.acc = thread_scratch(max_lanes * d, 1);
      float* work = thread_scratch(max_lanes * (kKeyChunk + 2 + 4) + 2 * kKeyChunk * d, 2);
      ln.scores = work;
      ln.m = ln.scores + max_lanes * kKeyChunk;
      ln.l = ln.m + max_lanes;
      ln.lo = reinterpret_cast<int64_t*>(ln.l + max_lanes);
      ln.hi = ln.lo + max_lanes;
      float* kbuf = reinterpret_cast<float*>(ln.hi + max_lanes);
      float* vbuf = kbuf + kKeyChunk * d;
      for (int64_t task_index = begin; task_index < end; ++task_index) {
        const Task& task = tasks[static_cast<size_t>(task_index)];
        const int64_t kv_len = kv_lens[task.row];
        ln.n = (task.t1 - task.t0) * group;
        int64_t key_lo = kv_len, key_hi = 0;
        for (int64_t t = task.t0; t < task.t1; ++t) {
          const int64_t p = pos[t];
          const int64_t lo =
              params.sliding_window > 0 ? std::max<int64_t>(0, p - params.sliding_window + 1) : 0;
          const int64_t hi = params.causal ? std::min<int64_t>(kv_len, p + 1) : kv_len;
          for (int64_t h = 0; h < group; ++h) {
            const int64_t a = (t - task.t0) * group + h;
            ln.lo[a] = lo;
            ln.hi[a] = hi;
            ln.m[a] = -INFINITY;
            ln.l[a] = 0.0f;
            float* qa = ln.q + a * d;
            load_any(q.dtype(), element(q, t, task.kv_head * group + h), qa, d);
            for (int64_t i = 0; i < d; ++i) qa[i] *= params.scale;
          }
          if (hi > lo) {
            key_lo = std::min(key_lo, lo);
            key_hi = std::max(key_hi, hi);
          }
        }
        std::fill(ln.acc, ln.acc + ln.n * d, 0.0f);
        attend<TKV>(ln, key_lo, key_hi, pages + page_indptr[task.row], task.kv_head, kv.k_pages,
                    kv.v_pages, params.softcap, kbuf, vbuf);
        for (int64_t a = 0; a < ln.n; ++a) {
          float* o = ln.acc + a * d;
          const float inv = ln.l[a] > 0.0f ? 1.0f / ln.l[a] : 0.0f;  // no visible key: zeros
          for (int64_t i = 0; i < d; ++i) o[i] *= inv;
          const int64_t t = task.t0 + a / group, h = task.kv_head * group + a % group;
          store_any(out.dtype(), o, element(out, t, h), d);
        }
      }
    });
  });
}

}  // namespace dspark::cpu
