// moe_route, moe_route_grouped, moe_combine and moe_group (contract: ops/moe.h).
//   moe_route: one warp per row. The row's probabilities live in shared memory; the top-k are
//   chosen by k warp-wide argmax rounds under the CPU kernel's order (larger first, equal: the
//   lower index, NaN last), so both backends choose the same experts for the same probabilities.
//   moe_route_grouped: the same, with the row's sigmoid scores and corrected scores in shared
//   memory; the warp scores each group (its top 2: every lane's best two, then two warp-wide
//   picks), then warp-wide rounds pick the groups and the experts. When every group is kept
//   (topk_group >= n_group) the groups are neither scored nor masked.
//   moe_combine: one block per row, threads over the columns, the k choices summed in order (the
//   row's expert rows and weights staged in shared memory first); a programmatic dependent of the
//   expert product before it.
//   moe_group: one warp. It counts the pairs per expert in shared memory, scans the counts into
//   offsets (and the list of experts with rows), then places the pairs 32 at a time in index
//   order: lanes choosing one expert take consecutive rows by lane (__match_any_sync), so the
//   sort is stable and equals the CPU's.
//   moe_route_and_group / moe_route_grouped_and_group: for up to kFusedRouteRows rows, one block
//   of a warp per row routes, then its first warp groups the choices from shared memory (one
//   launch instead of two: the grouping no longer waits for a kernel boundary); more rows, or
//   rows whose shared memory does not fit: the two kernels.
#include <algorithm>
#include <climits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kRouteWarps = 4;  // rows per block
// warp_top_k's register mask: 32 entries per lane.
constexpr int kMaxRouteExperts = 32 * 32;
// Routing and grouping in one launch (a block of a warp per row) for up to this many rows.
constexpr int64_t kFusedRouteRows = 32;
// moe_combine stages a row's choices in shared memory.
constexpr int kMaxCombineChoices = 64;

// (a, ia) ranks before (b, ib): larger probability first, equal ones by the lower index, NaN
// after every number; ib < 0 is "none yet".
__device__ __forceinline__ bool ranks_before(float a, int ia, float b, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  const bool a_nan = isnan(a), b_nan = isnan(b);
  if (a_nan != b_nan) return b_nan;
  if (!a_nan && a != b) return a > b;
  return ia < ib;
}

// The order of ranks_before as one unsigned key per entry, larger first: 0 for "none", 1 for NaN,
// then the numbers in increasing order (-0 as +0: the two compare equal, so they tie by index).
__device__ __forceinline__ uint32_t rank_key(float v, int i) {
  if (i < 0) return 0u;
  if (isnan(v)) return 1u;
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // numbers map above 1 (only NaNs do not)
}

// The best entry of the lane's own ones (e = lane + 32 bit, bits not taken) under ranks_before.
__device__ __forceinline__ void lane_best(const float* score, int n, int lane, uint32_t taken,
                                          float& best, int& best_i) {
  best = 0.0f;
  best_i = -1;
  for (int e = lane, bit = 0; e < n; e += 32, ++bit) {
    if (((taken >> bit) & 1u) == 0 && ranks_before(score[e], e, best, best_i)) {
      best = score[e];
      best_i = e;
    }
  }
}

// The index of the entry that ranks first among the lanes' candidates (v, i) (i < 0: none), under
// ranks_before: the largest rank_key over the warp, then the lowest index holding it; -1 if no
// lane has one. Every lane of the warp calls it and gets the result.
__device__ __forceinline__ int warp_best(float v, int i) {
  const uint32_t key = rank_key(v, i);
  const uint32_t top = __reduce_max_sync(0xffffffffu, key);
  const int win = __reduce_min_sync(0xffffffffu, key == top && i >= 0 ? i : INT_MAX);
  return win == INT_MAX ? -1 : win;
}

// Writes the indices of the k entries of score[0, n) that rank first to out[0, k) (shared memory
// of the warp), largest first: k warp-wide rounds (every lane of the warp calls it). Each lane
// keeps the best of its own entries (e % 32 == lane); a round takes the largest key over the lanes
// (rank_key, one __reduce_max_sync), then the lowest index among the lanes that hold it
// (__reduce_min_sync): ranks_before's order. Only the winner's lane looks at its entries again,
// with the winner marked taken in a register mask (bit e / 32). n <= kMaxRouteExperts.
__device__ void warp_top_k(const float* score, int n, int k, int32_t* out, int lane) {
  uint32_t taken = 0;
  float best;
  int best_i;
  lane_best(score, n, lane, taken, best, best_i);
  for (int j = 0; j < k; ++j) {
    const int winner = warp_best(best, best_i);
    if (winner >= 0 && winner % 32 == lane) {
      taken |= 1u << (winner / 32);
      lane_best(score, n, lane, taken, best, best_i);
    }
    if (lane == 0) out[j] = winner;
  }
  __syncwarp();  // out is read by every lane next
}

// ids_out[j] = ids[j] and w[j] = score[ids[j]] for j < k (ids: the warp's shared memory, from
// warp_top_k), each weight divided by (their sum + eps) when normalize, times scale; ids_copy
// (optional, shared memory) gets the ids too. The sum runs in order of j (every lane computes
// it); the stores spread over the lanes.
__device__ void write_choices(const float* score, const int32_t* ids, int k, bool normalize,
                              float eps, float scale, int32_t* ids_out, float* w, int32_t* ids_copy,
                              int lane) {
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += score[ids[j]];
  const float div = normalize ? sum + eps : 1.0f;
  for (int j = lane; j < k; j += 32) {
    ids_out[j] = ids[j];
    w[j] = score[ids[j]] / div * scale;
    if (ids_copy != nullptr) ids_copy[j] = ids[j];
  }
}

// One router row (the whole warp calls them; `area`: the warp's shared memory, route_floats()
// floats). The softmax routing's and the grouped routing's parameters:
struct SoftmaxRouting {
  bool normalize;
};
struct GroupedRouting {
  const float* bias;
  int groups, topk_group;
  bool normalize;
  float scale;
};
__host__ __device__ inline int route_floats(const SoftmaxRouting&, int experts, int k) {
  return experts + k;  // probabilities, chosen (i32)
}
__host__ __device__ inline int route_floats(const GroupedRouting& g, int experts, int k) {
  return 2 * experts + 2 * g.groups + k;  // s, c, group scores, kept groups (i32), chosen (i32)
}

template <typename T>
__device__ void route_row(const SoftmaxRouting& rt, const T* x, int experts, int k, float* area,
                          int32_t* ids, float* weights, int32_t* ids_copy, int lane) {
  float* p = area;
  float m = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    p[e] = device::to_float(x[e]);
    m = fmaxf(m, p[e]);
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float sum = 0.0f;
  for (int e = lane; e < experts; e += 32) {
    p[e] = expf(p[e] - m);
    sum += p[e];
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int e = lane; e < experts; e += 32) p[e] /= sum;
  __syncwarp();

  auto* chosen = reinterpret_cast<int32_t*>(p + experts);
  warp_top_k(p, experts, k, chosen, lane);
  write_choices(p, chosen, k, rt.normalize, 0.0f, 1.0f, ids, weights, ids_copy, lane);
}

template <typename T>
__device__ void route_row(const GroupedRouting& rt, const T* x, int experts, int k, float* area,
                          int32_t* ids, float* weights, int32_t* ids_copy, int lane) {
  const int groups = rt.groups;
  float* s = area;
  float* c = s + experts;
  float* group_score = c + experts;
  auto* kept = reinterpret_cast<int32_t*>(group_score + groups);
  for (int e = lane; e < experts; e += 32) {
    s[e] = 1.0f / (1.0f + expf(-device::to_float(x[e])));
    c[e] = s[e] + rt.bias[e];
  }
  __syncwarp();
  // Every group kept (topk_group >= groups, as GLM-4.5's single group): nothing to mask.
  if (rt.topk_group < groups) {
    // A group's score is the sum of its two best corrected scores: each lane keeps the best two
    // of its entries (e % 32 == lane), then the warp takes the best of the lanes' firsts, and the
    // best of the others' firsts and the winning lane's second (ranks_before's order, as the CPU's
    // top 2).
    const int group_size = experts / groups;
    for (int g = 0; g < groups; ++g) {
      const float* cg = c + g * group_size;
      float v1 = 0.0f, v2 = 0.0f;
      int i1 = -1, i2 = -1;
      for (int e = lane; e < group_size; e += 32) {
        const float v = cg[e];
        if (ranks_before(v, e, v1, i1)) {
          v2 = v1;
          i2 = i1;
          v1 = v;
          i1 = e;
        } else if (ranks_before(v, e, v2, i2)) {
          v2 = v;
          i2 = e;
        }
      }
      const int first = warp_best(v1, i1);
      const bool won = i1 >= 0 && i1 == first;
      const int second = warp_best(won ? v2 : v1, won ? i2 : i1);
      if (lane == 0) group_score[g] = cg[first] + cg[second];
    }
    __syncwarp();
    warp_top_k(group_score, groups, rt.topk_group, kept, lane);
    for (int e = lane; e < experts; e += 32) {
      bool keep = false;
      for (int i = 0; i < rt.topk_group; ++i) keep = keep || kept[i] == e / group_size;
      if (!keep) c[e] = -INFINITY;
    }
    __syncwarp();
  }
  int32_t* chosen = kept + groups;
  warp_top_k(c, experts, k, chosen, lane);
  write_choices(s, chosen, k, rt.normalize, 1e-20f, rt.scale, ids, weights, ids_copy, lane);
}

// kRouteWarps rows per block, one warp each.
template <typename T, typename R>
__global__ void moe_route_kernel(const T* logits, int64_t stride, int64_t n, int experts, int k,
                                 R rt, int32_t* ids, float* weights) {
  extern __shared__ float s_route[];  // [kRouteWarps][route_floats()]
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (r >= n) return;
  float* area = s_route + static_cast<int64_t>(warp) * route_floats(rt, experts, k);
  route_row(rt, logits + r * stride, experts, k, area, ids + r * k, weights + r * k, nullptr, lane);
}

template <typename TE, typename TO>
__global__ void moe_combine_kernel(const TE* expert_out, int64_t e_stride, const int32_t* slots,
                                   const float* weights, int k, TO* out, int64_t o_stride,
                                   int64_t cols) {
  // The row's choices, read once: the columns' loads of the k experts' values then do not wait
  // on them, and run ahead of the in-order sum.
  __shared__ const TE* s_row[kMaxCombineChoices];
  __shared__ float s_w[kMaxCombineChoices];
  pdl_wait();  // a programmatic dependent (pdl.cuh): the next kernel may launch from here on
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  for (int j = static_cast<int>(threadIdx.x); j < k; j += static_cast<int>(blockDim.x)) {
    s_row[j] = expert_out + static_cast<int64_t>(slots[r * k + j]) * e_stride;
    s_w[j] = weights[r * k + j];
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    constexpr int kBatch = 8;
    float acc = 0.0f;
    for (int j0 = 0; j0 < k; j0 += kBatch) {
      float v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        v[j] = j0 + j < k ? device::to_float(s_row[j0 + j][c]) : 0.0f;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (j0 + j < k) acc += s_w[j0 + j] * v[j];
      }
    }
    out[r * o_stride + c] = device::from_float<TO>(acc);
  }
}

// moe_group's work for one warp (every lane calls it): ids (global or shared memory), s_next
// [experts] of shared memory.
__device__ void group_pairs(const int32_t* ids, int64_t m, int k, int experts, int32_t* offsets,
                            int32_t* active, int32_t* order, int32_t* slots, int32_t* s_next,
                            int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  for (int e = lane; e < experts; e += 32) s_next[e] = 0;
  __syncwarp();
  for (int64_t i = lane; i < m; i += 32) atomicAdd(&s_next[ids[i]], 1);
  __syncwarp();
  int base = 0, used = 0;
  for (int e0 = 0; e0 < experts; e0 += 32) {
    const int e = e0 + lane;
    const int c = e < experts ? s_next[e] : 0;
    int inclusive = c;
    for (int o = 1; o < 32; o *= 2) {
      const int v = __shfl_up_sync(kAll, inclusive, o);
      if (lane >= o) inclusive += v;
    }
    const unsigned has_rows = __ballot_sync(kAll, c > 0);
    if (e < experts) {
      offsets[e] = s_next[e] = base + inclusive - c;
      if (c > 0) active[1 + used + __popc(has_rows & ((1u << lane) - 1))] = e;
    }
    base += __shfl_sync(kAll, inclusive, 31);
    used += __popc(has_rows);
  }
  if (lane == 0) {
    offsets[experts] = base;
    active[0] = used;
  }
  __syncwarp();
  for (int64_t i0 = 0; i0 < m; i0 += 32) {
    const int64_t i = i0 + lane;
    const int e = i < m ? ids[i] : -1;
    const unsigned same = __match_any_sync(kAll, e);
    const int rank = __popc(same & ((1u << lane) - 1));
    const int at = e >= 0 ? s_next[e] + rank : 0;
    __syncwarp();
    if (e >= 0 && rank == 0) s_next[e] += __popc(same);
    __syncwarp();
    if (e >= 0) {
      order[at] = static_cast<int32_t>(i / k);
      slots[i] = at;
    }
  }
}

__global__ void moe_group_kernel(const int32_t* ids, int64_t m, int k, int experts,
                                 int32_t* offsets, int32_t* active, int32_t* order,
                                 int32_t* slots) {
  extern __shared__ int32_t s_next[];  // [experts]: counts, then each expert's next row
  group_pairs(ids, m, k, experts, offsets, active, order, slots, s_next,
              static_cast<int>(threadIdx.x));
}

// Routing and grouping in one launch: one block, a warp per router row, then the first warp
// groups the choices (from shared memory). The same operations as moe_route_kernel then
// moe_group_kernel, so the same results.
template <typename T, typename R>
__global__ void moe_route_group_kernel(const T* logits, int64_t stride, int n, int experts, int k,
                                       R rt, int32_t* ids, float* weights, int32_t* offsets,
                                       int32_t* active, int32_t* order, int32_t* slots) {
  // [n][route_floats()] per row, then the choices [n * k] (i32), then s_next [experts] (i32).
  extern __shared__ float s_fused[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int area = route_floats(rt, experts, k);
  auto* s_ids = reinterpret_cast<int32_t*>(s_fused + static_cast<int64_t>(n) * area);
  int32_t* s_next = s_ids + n * k;
  if (warp < n) {
    route_row(rt, logits + warp * stride, experts, k, s_fused + warp * area, ids + warp * k,
              weights + warp * k, s_ids + warp * k, lane);
  }
  __syncthreads();
  if (warp == 0)
    group_pairs(s_ids, int64_t{n} * k, k, experts, offsets, active, order, slots, s_next, lane);
}

}  // namespace

void moe_group(Context& ctx, const Tensor& ids, const MoeGroups& g) {
  const int experts = static_cast<int>(g.offsets.size(0) - 1), k = static_cast<int>(ids.size(1));
  const size_t shared = static_cast<size_t>(experts) * sizeof(int32_t);
  DSPARK_CHECK(shared <= 48 * 1024, "moe_group: {} experts exceed the kernel's shared memory",
               experts);
  moe_group_kernel<<<1, 32, shared, stream_of(ctx)>>>(
      ids.data_as<int32_t>(), ids.numel(), k, experts, g.offsets.data_as<int32_t>(),
      g.active.data_as<int32_t>(), g.order.data_as<int32_t>(), g.slots.data_as<int32_t>());
  DSPARK_CUDA_CHECK_LAUNCH();
}

namespace {

// moe_route / moe_route_grouped (rt), and with g the grouping too: in one launch where the rows
// fit the fused kernel (true), else the route kernel alone (false: the caller groups).
template <typename R>
bool launch_route(Context& ctx, const char* op, const Tensor& logits, const R& rt,
                  const Tensor& ids, const Tensor& weights, const MoeGroups* g) {
  const RowView lv = row_view(logits);
  const int experts = static_cast<int>(lv.cols), k = static_cast<int>(ids.size(1));
  const size_t area = static_cast<size_t>(route_floats(rt, experts, k)) * sizeof(float);
  DSPARK_CHECK(experts <= kMaxRouteExperts && kRouteWarps * area <= 48 * 1024,
               "{}: {} experts (the kernel takes up to {}, in 48 KB of shared memory per {} rows)",
               op, experts, kMaxRouteExperts, kRouteWarps);
  const int64_t n = lv.rows;
  const size_t fused = static_cast<size_t>(n) * (area + static_cast<size_t>(k) * 4) +
                       static_cast<size_t>(experts) * 4;
  const bool fuse = g != nullptr && n <= kFusedRouteRows && fused <= 48 * 1024;
  dispatch_float(logits.dtype(), [&]<typename T>(TypeTag<T>) {
    if (fuse) {
      moe_route_group_kernel<<<1, static_cast<unsigned>(32 * n), fused, stream_of(ctx)>>>(
          device_ptr<T>(logits), lv.stride, static_cast<int>(n), experts, k, rt,
          ids.data_as<int32_t>(), weights.data_as<float>(), g->offsets.data_as<int32_t>(),
          g->active.data_as<int32_t>(), g->order.data_as<int32_t>(), g->slots.data_as<int32_t>());
    } else {
      const auto blocks = static_cast<unsigned>(ceil_div(n, int64_t{kRouteWarps}));
      moe_route_kernel<<<blocks, 32 * kRouteWarps, kRouteWarps * area, stream_of(ctx)>>>(
          device_ptr<T>(logits), lv.stride, n, experts, k, rt, ids.data_as<int32_t>(),
          weights.data_as<float>());
    }
    DSPARK_CUDA_CHECK_LAUNCH();
  });
  return fuse;
}

GroupedRouting grouped_routing(const Tensor& bias, const MoeGroupRouting& p) {
  return {bias.data_as<float>(), p.n_group, p.topk_group, p.normalize, p.scale};
}

}  // namespace

void moe_route(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
               const Tensor& weights) {
  launch_route(ctx, "moe_route", logits, SoftmaxRouting{normalize}, ids, weights, nullptr);
}

void moe_route_grouped(Context& ctx, const Tensor& logits, const Tensor& bias,
                       const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights) {
  launch_route(ctx, "moe_route_grouped", logits, grouped_routing(bias, p), ids, weights, nullptr);
}

void moe_route_and_group(Context& ctx, const Tensor& logits, bool normalize, const Tensor& ids,
                         const Tensor& weights, const MoeGroups& g) {
  if (!launch_route(ctx, "moe_route", logits, SoftmaxRouting{normalize}, ids, weights, &g))
    moe_group(ctx, ids, g);
}

void moe_route_grouped_and_group(Context& ctx, const Tensor& logits, const Tensor& bias,
                                 const MoeGroupRouting& p, const Tensor& ids, const Tensor& weights,
                                 const MoeGroups& g) {
  if (!launch_route(ctx, "moe_route_grouped", logits, grouped_routing(bias, p), ids, weights, &g))
    moe_group(ctx, ids, g);
}

void moe_combine(Context& ctx, const Tensor& expert_out, const Tensor& slots, const Tensor& weights,
                 const Tensor& out) {
  const RowView ev = row_view(expert_out), ov = row_view(out);
  DSPARK_CHECK(slots.size(1) <= kMaxCombineChoices, "moe_combine: {} choices per token (up to {})",
               slots.size(1), kMaxCombineChoices);
  const int threads = static_cast<int>(std::clamp<int64_t>(ceil_div(ov.cols, 32) * 32, 32, 512));
  dispatch_float(expert_out.dtype(), [&]<typename TE>(TypeTag<TE>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      launch_pdl(moe_combine_kernel<device_t<TE>, device_t<TO>>,
                 dim3(static_cast<unsigned>(ov.rows)), dim3(static_cast<unsigned>(threads)), 0,
                 stream_of(ctx), device_ptr<TE>(expert_out), ev.stride, slots.data_as<int32_t>(),
                 weights.data_as<float>(), static_cast<int>(slots.size(1)), device_ptr<TO>(out),
                 ov.stride, ov.cols);
      DSPARK_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace dspark::cuda
