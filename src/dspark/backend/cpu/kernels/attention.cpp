// CPU kernels of kv_write and paged_attention (contract: ops/attention.h).
// paged_attention: one task per (row, block of the row's queries, KV head's query heads, key
// segment). A task's lanes are its queries times its heads (at most kMaxLanes); it walks the
// union of the lanes' visible keys of its segment in chunks of kKeyChunk keys at multiples of
// kKeyChunk, read through the CSR page table (converted to f32 once per chunk when the cache is not
// f32) and kept in L1 while every lane scores them, updates its online softmax and accumulates the
// values. Rows longer than a segment (kKeySegment keys) give several tasks whose partial outputs
// are folded in segment order after them (prefill-sized calls: each task folds its own segments,
// the same arithmetic), so a thread reads a KV head's rows once for all its query heads and
// long rows spread over the threads. The per-lane arithmetic (attention_lanes.h) and the segments
// depend on the lane's own query, visible keys and row length only, so a query gives the same bits
// whichever queries share its forward.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/attention_lanes.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kKeyChunk = 32;

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

// Keys are walked in segments of kKeySegment (at multiples of it), each a task of its own whose
// partial output is merged with the others in segment order: the segments of a query depend on
// its row's length only, so its bits do not depend on the other queries of the forward.
constexpr int64_t kKeySegment = 256;
constexpr int64_t kMaxLanes = 32;
// The most floats of partial outputs for which segments run as separate tasks.
constexpr int64_t kMaxPartialFloats = int64_t{1} << 18;
static_assert(kKeySegment % kKeyChunk == 0);

// Queries [t0, t1) of a row with query heads [h0, h1) of one KV head (its lanes), over key
// segments [seg0, seg1) of the row.
struct Task {
  int64_t row, t0, t1, h0, h1, seg0, seg1;
};

// Folds a segment's running max m, sum l and unnormalised output acc (l == 0: the query sees no
// key in it) into a lane's (M, L, O) over the previous segments, in segment order. The first
// non-empty segment is copied, so a query with one segment gets exactly its online softmax.
void fold_segment(bool avx2, float m, float l, const float* acc, float& M, float& L, float* O,
                  int64_t d) {
  if (!(l > 0.0f)) return;
  if (!(L > 0.0f)) {
    M = m;
    L = l;
    std::copy(acc, acc + d, O);
    return;
  }
  const float m2 = std::max(M, m);
  const float a = attention_lanes::exp_lane(M - m2), b = attention_lanes::exp_lane(m - m2);
  L = std::fma(l, b, L * a);
  attention_lanes::fold(avx2, acc, a, b, O, d);
  M = m2;
}

// O / L, or zeros when no key was visible (L == 0).
void normalize(float* O, float L, int64_t d) {
  if (!(L > 0.0f)) {
    std::fill(O, O + d, 0.0f);
    return;
  }
  const float inv = 1.0f / L;
  for (int64_t i = 0; i < d; ++i) O[i] *= inv;
}

// Per-thread buffers of one task.
struct Lanes {
  int64_t n = 0, head_dim = 0;
  bool avx2 = false;
  float* q = nullptr;       // [n, head_dim] pre-scaled queries
  float* acc = nullptr;     // [n, head_dim] unnormalised outputs
  float* scores = nullptr;  // [kKeyChunk] scores, then weights, of the current lane and chunk
  float* m = nullptr;       // [n] running max
  float* l = nullptr;       // [n] running sum of weights
  int64_t* lo = nullptr;    // [n] visible keys [lo, hi) of the lane's query
  int64_t* hi = nullptr;
};

// Lane a against the chunk's keys j0 + jj (rows k / v, jj < kKeyChunk): scores of its visible
// keys [b, e), softcap, the online-softmax step (running max and sum rescaled) and the weighted
// values added to its output.
void lane_step(const Lanes& ln, int64_t a, int64_t j0, const float* const* k, const float* const* v,
               float softcap) {
  namespace al = attention_lanes;
  const int64_t d = ln.head_dim;
  const int64_t b = std::max<int64_t>(ln.lo[a] - j0, 0);
  const int64_t e = std::min<int64_t>(ln.hi[a] - j0, kKeyChunk);
  if (e <= b) return;  // the lane sees nothing in this chunk
  float* s = ln.scores;
  al::scores(ln.avx2, ln.q + a * d, d, k + b, e - b, s + b);
  if (softcap > 0.0f) {
    for (int64_t jj = b; jj < e; ++jj) s[jj] = softcap * std::tanh(s[jj] / softcap);
  }
  const int64_t n = (e + 7) / 8 * 8;
  std::fill(s, s + b, -INFINITY);
  std::fill(s + e, s + n, -INFINITY);
  const float chunk_max = al::max_of(ln.avx2, s, n);
  const float new_max = std::max(ln.m[a], chunk_max);
  // 0 on the lane's first chunk; exactly 1 (exp_lane(0)) while the running max stands.
  const float correction = new_max == ln.m[a] ? 1.0f : al::exp_lane(ln.m[a] - new_max);
  float* o = ln.acc + a * d;
  if (correction != 1.0f) {
    ln.l[a] *= correction;
    for (int64_t i = 0; i < d; ++i) o[i] *= correction;
  }
  ln.l[a] += al::exp_shifted(ln.avx2, s, n, new_max);
  ln.m[a] = new_max;
  al::accumulate(ln.avx2, s, v, b, e, o, d);
}

// kbuf / vbuf: kKeyChunk rows of d f32 each (the keys and values converted when the cache is not
// f32).
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
  // Row jj of a chunk as f32: in the cache itself when it holds f32, else converted into buf.
  auto row = [&](const TKV* base, int64_t j, float* buf) -> const float* {
    if constexpr (std::is_same_v<TKV, float>) {
      return base + offset(j);
    } else {
      load_f32(base + offset(j), buf, d);
      return buf;
    }
  };
  const float* krows[kKeyChunk];
  const float* vrows[kKeyChunk];
  for (int64_t j0 = key_lo / kKeyChunk * kKeyChunk; j0 < key_hi; j0 += kKeyChunk) {
    const int64_t b = std::max<int64_t>(key_lo - j0, 0);
    const int64_t e = std::min(kKeyChunk, key_hi - j0);
    for (int64_t jj = b; jj < e; ++jj) {
      krows[jj] = row(kp, j0 + jj, kbuf + jj * d);
      vrows[jj] = row(vp, j0 + jj, vbuf + jj * d);
    }
    for (int64_t a = 0; a < ln.n; ++a) lane_step(ln, a, j0, krows, vrows, softcap);
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
  const int64_t n_rows = q_indptr.size(0) - 1, n_tokens = q.size(0);
  const int32_t* qi = q_indptr.data_as<int32_t>();
  const int32_t* pos = q_pos.data_as<int32_t>();
  const int32_t* page_indptr = kv.page_indptr.data_as<int32_t>();
  const int32_t* pages = kv.page_indices.data_as<int32_t>();
  const int32_t* kv_lens = kv.kv_lens.data_as<int32_t>();
  auto row_segments = [&](int64_t r) {
    return std::max<int64_t>((kv_lens[r] + kKeySegment - 1) / kKeySegment, 1);
  };
  int64_t segments = 1;
  for (int64_t r = 0; r < n_rows; ++r) segments = std::max(segments, row_segments(r));
  // Segments as tasks of their own when their partial outputs are small (decode, verify);
  // otherwise (prefill) each task folds its segments in order itself. Same bits either way.
  const int64_t part_stride = d + 2;
  const bool split =
      segments > 1 && n_tokens * n_heads * segments * part_stride <= kMaxPartialFloats;
  // A task's lanes: up to kMaxLanes query heads of one KV head, times its block of queries.
  const int64_t heads_per_task = std::min(group, kMaxLanes);
  const int64_t head_tasks = n_kv_heads * ((group + heads_per_task - 1) / heads_per_task);
  // Query blocks of up to kMaxLanes / heads_per_task tokens, smaller when that leaves fewer than
  // ~4 tasks per thread. A smaller block re-reads the row's keys (from cache) but changes no
  // result.
  int64_t block = std::max<int64_t>(kMaxLanes / heads_per_task, 1);
  const int64_t want_tasks = 4 * static_cast<int64_t>(ctx.pool().size());
  auto count_tasks = [&](int64_t b) {
    int64_t n = 0;
    for (int64_t r = 0; r < n_rows; ++r)
      n += (qi[r + 1] - qi[r] + b - 1) / b * head_tasks * (split ? row_segments(r) : 1);
    return n;
  };
  while (block > 1 && count_tasks(block) < want_tasks) block /= 2;
  std::vector<Task> tasks;
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t nseg = row_segments(r);
    for (int64_t t0 = qi[r]; t0 < qi[r + 1]; t0 += block) {
      const int64_t t1 = std::min<int64_t>(t0 + block, qi[r + 1]);
      for (int64_t kvh = 0; kvh < n_kv_heads; ++kvh) {
        for (int64_t h = kvh * group; h < (kvh + 1) * group; h += heads_per_task) {
          const int64_t h1 = std::min(h + heads_per_task, (kvh + 1) * group);
          if (split) {
            for (int64_t seg = 0; seg < nseg; ++seg)
              tasks.push_back({r, t0, t1, h, h1, seg, seg + 1});
          } else {
            tasks.push_back({r, t0, t1, h, h1, 0, nseg});
          }
        }
      }
    }
  }
  // split: each (token, head, segment)'s running max, sum and unnormalised output.
  thread_local std::vector<float> partial_buffer;
  if (split)
    partial_buffer.resize(static_cast<size_t>(n_tokens * n_heads * segments * part_stride));
  float* const partial = partial_buffer.data();
  auto part_of = [&](int64_t t, int64_t h, int64_t seg) {
    return partial + ((t * n_heads + h) * segments + seg) * part_stride;
  };
  const bool avx2 = attention_lanes::has_avx2();
  dispatch_float(kv.k_pages.dtype(), [&]<typename TKV>(TypeTag<TKV>) {
    ctx.pool().parallel_for(static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
      Lanes ln;
      ln.head_dim = d;
      ln.avx2 = avx2;
      ln.q = thread_scratch(kMaxLanes * d, 0);
      ln.acc = thread_scratch(kMaxLanes * d, 1);
      float* work = thread_scratch(kKeyChunk + kMaxLanes * 8 + 2 * kKeyChunk * d, 2);
      ln.scores = work;
      ln.m = ln.scores + kKeyChunk;
      ln.l = ln.m + kMaxLanes;
      ln.lo = reinterpret_cast<int64_t*>(ln.l + kMaxLanes);
      ln.hi = ln.lo + kMaxLanes;
      float* run_m = reinterpret_cast<float*>(ln.hi + kMaxLanes);  // the lanes' folded segments
      float* run_l = run_m + kMaxLanes;
      float* kbuf = run_l + kMaxLanes;
      float* vbuf = kbuf + kKeyChunk * d;
      float* run_o = split ? nullptr : thread_scratch(kMaxLanes * d, 3);
      for (int64_t task_index = begin; task_index < end; ++task_index) {
        const Task& task = tasks[static_cast<size_t>(task_index)];
        const int64_t kv_len = kv_lens[task.row];
        const int64_t nh = task.h1 - task.h0;
        ln.n = (task.t1 - task.t0) * nh;
        // Lane a: token t0 + a / nh, query head h0 + a % nh.
        for (int64_t a = 0; a < ln.n; ++a) {
          float* qa = ln.q + a * d;
          load_any(q.dtype(), element(q, task.t0 + a / nh, task.h0 + a % nh), qa, d);
          for (int64_t i = 0; i < d; ++i) qa[i] *= params.scale;
          run_m[a] = -INFINITY;
          run_l[a] = 0.0f;
        }
        for (int64_t seg = task.seg0; seg < task.seg1; ++seg) {
          const int64_t seg_lo = seg * kKeySegment, seg_hi = std::min(seg_lo + kKeySegment, kv_len);
          int64_t key_lo = kv_len, key_hi = 0;
          for (int64_t a = 0; a < ln.n; ++a) {
            const int64_t p = pos[task.t0 + a / nh];
            const int64_t lo =
                params.sliding_window > 0 ? std::max<int64_t>(0, p - params.sliding_window + 1) : 0;
            const int64_t hi = params.causal ? std::min<int64_t>(kv_len, p + 1) : kv_len;
            ln.lo[a] = std::max(lo, seg_lo);
            ln.hi[a] = std::min(hi, seg_hi);
            ln.m[a] = -INFINITY;
            ln.l[a] = 0.0f;
            if (ln.hi[a] > ln.lo[a]) {
              key_lo = std::min(key_lo, ln.lo[a]);
              key_hi = std::max(key_hi, ln.hi[a]);
            }
          }
          std::fill(ln.acc, ln.acc + ln.n * d, 0.0f);
          attend<TKV>(ln, key_lo, key_hi, pages + page_indptr[task.row], task.h0 / group,
                      kv.k_pages, kv.v_pages, params.softcap, kbuf, vbuf);
          for (int64_t a = 0; a < ln.n; ++a) {
            if (split) {
              float* part = part_of(task.t0 + a / nh, task.h0 + a % nh, seg);
              part[0] = ln.m[a];
              part[1] = ln.l[a];
              std::copy(ln.acc + a * d, ln.acc + (a + 1) * d, part + 2);
            } else {
              fold_segment(avx2, ln.m[a], ln.l[a], ln.acc + a * d, run_m[a], run_l[a],
                           run_o + a * d, d);
            }
          }
        }
        if (split) continue;
        for (int64_t a = 0; a < ln.n; ++a) {
          float* o = run_o + a * d;
          normalize(o, run_l[a], d);
          store_any(out.dtype(), o, element(out, task.t0 + a / nh, task.h0 + a % nh), d);
        }
      }
    });
  });
  if (!split) return;
  // The segments of each (token, head) folded in order, as a task folds them without the split.
  float* o = thread_scratch(d, 0);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = qi[r]; t < qi[r + 1]; ++t) {
      for (int64_t h = 0; h < n_heads; ++h) {
        float m = -INFINITY, l = 0.0f;
        for (int64_t seg = 0; seg < row_segments(r); ++seg) {
          const float* part = part_of(t, h, seg);
          fold_segment(avx2, part[0], part[1], part + 2, m, l, o, d);
        }
        normalize(o, l, d);
        store_any(out.dtype(), o, element(out, t, h), d);
      }
    }
  }
}

}  // namespace dspark::cpu
