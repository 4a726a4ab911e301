// CPU kernels of kv_write and paged_attention (contract: ops/attention.h).
// paged_attention: one task per (row, kv head, block of up to kQueryBlock queries of the row). A
// task's "lanes" are its (query, head of the kv group) pairs; it walks the union of the lanes'
// visible keys in chunks of kKeyChunk read through the CSR page table, converting each K/V row to
// f32 once for all lanes (so a 32-token verify or a drafter block reads the cache a few times, not
// 32 times), with an online-softmax rescale per lane and chunk and f32 accumulators.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
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

// The hot loops are compiled twice where GCC can (target_clones: baseline x86-64 and AVX2, picked
// at load time by the CPU's features; "arch=haswell" would match Intel Haswell-family models
// only, so AMD CPUs ran the baseline clone): AVX2 runs the same arithmetic in wider registers (no
// reassociation; FMA is not enabled, so no contraction), so the results are bitwise those of the
// baseline build.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define DSPARK_AVX2_CLONES __attribute__((target_clones("default", "avx2")))
#else
#define DSPARK_AVX2_CLONES
#endif

// The score of lane a against key jj, from its scaled query and key (dot_f32's arithmetic), or
// -inf where the key is masked; then the lane's online-softmax step over the chunk: its running
// max / sum are rescaled and scores[a] becomes the chunk's weights (0 where masked).
DSPARK_AVX2_CLONES
void softmax_step(const Lanes& ln, int64_t a, int64_t c, float softcap) {
  const int64_t d = ln.head_dim;
  float* s = ln.scores + a * kKeyChunk;
  float chunk_max = -INFINITY;
  for (int64_t jj = 0; jj < c; ++jj) {
    if (s[jj] == -INFINITY) continue;
    if (softcap > 0.0f) s[jj] = softcap * std::tanh(s[jj] / softcap);
    chunk_max = std::max(chunk_max, s[jj]);
  }
  if (chunk_max == -INFINITY) {  // the lane sees nothing in this chunk
    std::fill(s, s + c, 0.0f);
    return;
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

// Scores of keys [j0, j0 + c) for every lane, key jj at krow[jj] (f32), one dot_f32 each: the
// way for few lanes (decode: one query per task).
DSPARK_AVX2_CLONES
void score_rows(const Lanes& ln, int64_t j0, int64_t c, const float* const* krow) {
  const int64_t d = ln.head_dim;
  for (int64_t a = 0; a < ln.n; ++a) {
    float* s = ln.scores + a * kKeyChunk;
    for (int64_t jj = 0; jj < c; ++jj) {
      const int64_t j = j0 + jj;
      s[jj] = j >= ln.lo[a] && j < ln.hi[a] ? dot_f32(ln.q + a * d, krow[jj], d) : -INFINITY;
    }
  }
}

// The same scores from the chunk's keys transposed (kt[i * kKeyChunk + jj] = value i of key jj,
// d a multiple of 16): the same products and sums as dot_f32 (partial sums of the values i with
// i % 16 = l, in increasing i, then the same tree), 8 keys at a time in the vector lanes, so no
// horizontal sums: the way for many lanes (a verify's queries share each transposed chunk).
DSPARK_AVX2_CLONES
void score_transposed(const Lanes& ln, int64_t j0, int64_t c, const float* kt) {
  typedef float V8 __attribute__((vector_size(32)));
  const int64_t d = ln.head_dim;
  for (int64_t a = 0; a < ln.n; ++a) {
    float* s = ln.scores + a * kKeyChunk;
    const float* q = ln.q + a * d;
    for (int64_t k0 = 0; k0 < c; k0 += 8) {
      // lo[l] / hi[l]: the partial sums l and l + 8 of 8 keys.
      V8 lo[8] = {}, hi[8] = {};
      for (int64_t i0 = 0; i0 < d; i0 += 16) {
        for (int l = 0; l < 8; ++l) {
          V8 k;
          std::memcpy(&k, kt + (i0 + l) * kKeyChunk + k0, sizeof(k));
          lo[l] += q[i0 + l] * k;
        }
        for (int l = 0; l < 8; ++l) {
          V8 k;
          std::memcpy(&k, kt + (i0 + 8 + l) * kKeyChunk + k0, sizeof(k));
          hi[l] += q[i0 + 8 + l] * k;
        }
      }
      for (int l = 0; l < 8; ++l) lo[l] += hi[l];
      for (int w = 4; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) lo[l] += lo[l + w];
      const int64_t n = std::min<int64_t>(8, c - k0);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t j = j0 + k0 + k;
        // + 0.0f: dot_f32's sum with its (empty) tail.
        s[k0 + k] = j >= ln.lo[a] && j < ln.hi[a] ? lo[0][k] + 0.0f : -INFINITY;
      }
    }
  }
}

// acc[a] += sum_jj weight[a][jj] * V[jj], keys in increasing order for every lane (axpy_f32's
// arithmetic), the lane's D outputs held in registers over the chunk.
template <int D>
DSPARK_AVX2_CLONES void accumulate_fixed(const Lanes& ln, int64_t c, const float* const* vrow) {
  for (int64_t a = 0; a < ln.n; ++a) {
    const float* w = ln.scores + a * kKeyChunk;
    float* o = ln.acc + a * D;
    float r[D];
    for (int i = 0; i < D; ++i) r[i] = o[i];
    for (int64_t jj = 0; jj < c; ++jj) {
      if (w[jj] == 0.0f) continue;
      const float* v = vrow[jj];
      for (int i = 0; i < D; ++i) r[i] += w[jj] * v[i];
    }
    for (int i = 0; i < D; ++i) o[i] = r[i];
  }
}

DSPARK_AVX2_CLONES
void accumulate_chunk(const Lanes& ln, int64_t c, const float* const* vrow) {
  if (ln.head_dim == 64) return accumulate_fixed<64>(ln, c, vrow);
  if (ln.head_dim == 128) return accumulate_fixed<128>(ln, c, vrow);
  const int64_t d = ln.head_dim;
  for (int64_t a = 0; a < ln.n; ++a) {
    const float* w = ln.scores + a * kKeyChunk;
    float* o = ln.acc + a * d;
    for (int64_t jj = 0; jj < c; ++jj)
      if (w[jj] != 0.0f) axpy_f32(w[jj], vrow[jj], o, d);
  }
}

// Lanes from which the transposed scores pay for the transpose (a verify of 8 queries has 8 x the
// kv group's heads).
constexpr int64_t kTransposeLanes = 6;

// kbuf / vbuf: kKeyChunk rows of d f32 each (the keys and values converted when the cache is not
// f32); kt: d x kKeyChunk f32.
template <typename TKV>
void attend(const Lanes& ln, int64_t key_lo, int64_t key_hi, const int32_t* pages, int64_t kv_head,
            const Tensor& k_pages, const Tensor& v_pages, float softcap, float* kbuf, float* vbuf,
            float* kt) {
  const int64_t d = ln.head_dim;
  const int64_t page_size = k_pages.size(1), n_kv_heads = k_pages.size(2);
  const TKV* kp = static_cast<const TKV*>(k_pages.data());
  const TKV* vp = static_cast<const TKV*>(v_pages.data());
  auto offset = [&](int64_t j) {
    const int64_t page = pages[j / page_size];
    return ((page * page_size + j % page_size) * n_kv_heads + kv_head) * d;
  };
  // Row jj of a chunk as f32: in the cache itself when it holds f32, else converted into buf.
  auto row = [&](const TKV* base, int64_t j, float* buf) -> const float* {
    if constexpr (std::is_same_v<TKV, float>) {
      return base + offset(j);
    } else {
      load_f32(base + offset(j), buf, d);
      return buf;
    }
  };
  const bool transpose = ln.n >= kTransposeLanes && d % 16 == 0;
  const float* rows[kKeyChunk];
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += kKeyChunk) {
    const int64_t c = std::min(kKeyChunk, key_hi - j0);
    for (int64_t jj = 0; jj < c; ++jj) rows[jj] = row(kp, j0 + jj, kbuf + jj * d);
    if (transpose) {
      for (int64_t jj = 0; jj < c; ++jj)
        for (int64_t i = 0; i < d; ++i) kt[i * kKeyChunk + jj] = rows[jj][i];
      for (int64_t jj = c; jj < (c + 7) / 8 * 8; ++jj)
        for (int64_t i = 0; i < d; ++i) kt[i * kKeyChunk + jj] = 0.0f;
      score_transposed(ln, j0, c, kt);
    } else {
      score_rows(ln, j0, c, rows);
    }
    for (int64_t a = 0; a < ln.n; ++a) softmax_step(ln, a, c, softcap);
    for (int64_t jj = 0; jj < c; ++jj) rows[jj] = row(vp, j0 + jj, vbuf + jj * d);
    accumulate_chunk(ln, c, rows);
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
      float* work = thread_scratch(max_lanes * (kKeyChunk + 2 + 4) + 3 * kKeyChunk * d, 2);
      ln.scores = work;
      ln.m = ln.scores + max_lanes * kKeyChunk;
      ln.l = ln.m + max_lanes;
      ln.lo = reinterpret_cast<int64_t*>(ln.l + max_lanes);
      ln.hi = ln.lo + max_lanes;
      float* kbuf = reinterpret_cast<float*>(ln.hi + max_lanes);
      float* vbuf = kbuf + kKeyChunk * d;
      float* kt = vbuf + kKeyChunk * d;
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
                    kv.v_pages, params.softcap, kbuf, vbuf, kt);
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
