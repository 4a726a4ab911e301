// rms_norm, add_rms_norm and layer_norm: one block per row, f32 math. Pass 1 accumulates the sum of
// squares (add_rms_norm first updates the residual row in place and squares the stored, rounded
// value), pass 2 re-reads the row (from L1/L2) and writes out. Both passes give element c to the
// same thread, so `out` may alias `x` (and add_rms_norm's pass 2 reads back its own residual
// writes). Loads of x use 16-byte vectors when rows are aligned; the weight's dtype is a run-time
// kind. add_rms_norm's rows of up to 4 vectors per thread take a one-pass kernel instead that keeps
// the row in registers (add_rms_norm_regs_kernel); for calls of a few f32 rows launched plainly
// (after a cuBLASLt GEMM: a verify's o and down projections) a thread-block cluster of CTAs shares
// each row, the row's sum of squares exchanged through distributed shared memory (cluster_row_sum).
// Which one runs: choose_add_rms_norm (policy/norm.h). layer_norm (with a bias, DSA's indexer
// keys) is a plain three-pass kernel (layer_norm_kernel).
#include <algorithm>
#include <type_traits>

#include <cooperative_groups.h>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/linear_norm.h"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/policy/linear.h"
#include "dspark/backend/cuda/policy/norm.h"

namespace dspark::cuda {
namespace {

using device::FloatKind;

struct NormWeight {
  const void* data;  // [cols]
  FloatKind kind;
  bool unit_offset;  // scale by (1 + w)
  __device__ __forceinline__ float operator()(int64_t c) const {
    const float w = device::load_float(data, c, kind);
    return unit_offset ? 1.0f + w : w;
  }
};

template <typename TR, typename TX, typename TO>
struct NormParams {
  TR* residual;  // add_rms_norm only: [rows, cols], updated in place
  const TX* x;   // [rows, cols]
  TO* out;       // [rows, cols]
  int64_t residual_stride;
  int64_t x_stride;
  int64_t out_stride;
  int64_t cols;
  NormWeight weight;
  float eps;
  bool vectorized;  // x (and residual) rows 16-byte aligned, cols a multiple of the vector width
  // add_rms_norm_regs_kernel with an f32 residual only (else null): copy = bf16(the updated
  // residual), rows copy_stride apart (a model's tap; add_rms_norm_split_sums).
  __nv_bfloat16* copy;
  int64_t copy_stride;
};

// copy[0..3] = bf16(v[0..3]) (the rounding of convert) in one 8-byte store.
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* copy, const float (&v)[4]) {
  const __nv_bfloat162 lo(device::from_float<__nv_bfloat16>(v[0]),
                          device::from_float<__nv_bfloat16>(v[1]));
  const __nv_bfloat162 hi(device::from_float<__nv_bfloat16>(v[2]),
                          device::from_float<__nv_bfloat16>(v[3]));
  uint2 u;
  u.x = *reinterpret_cast<const uint32_t*>(&lo);
  u.y = *reinterpret_cast<const uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(copy) = u;
}

// out[c] = v[c] * inv_rms * w[c] for the vector starting at c0.
template <typename TO, int kW>
__device__ __forceinline__ void write_scaled(TO* out, int64_t c0, const float (&v)[kW],
                                             float inv_rms, const NormWeight& w) {
#pragma unroll
  for (int i = 0; i < kW; ++i) out[c0 + i] = device::from_float<TO>(v[i] * inv_rms * w(c0 + i));
}

template <typename TX, typename TO>
__global__ void rms_norm_kernel(NormParams<float, TX, TO> p) {
  __shared__ float s_red[32];
  pdl_wait();  // a programmatic dependent (pdl.cuh): the next kernel may launch from here on
  pdl_launch_dependents();
  const TX* x = p.x + blockIdx.x * p.x_stride;
  TO* out = p.out + blockIdx.x * p.out_stride;
  constexpr int kW = device::kVecWidth<TX>;
  float ss = 0.f;
  if (p.vectorized) {
    for (int64_t c = threadIdx.x * kW; c < p.cols; c += blockDim.x * kW) {
      float v[kW];
      device::load_vec(x + c, v);
#pragma unroll
      for (int i = 0; i < kW; ++i) ss += v[i] * v[i];
    }
  } else {
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) {
      const float v = device::to_float(x[c]);
      ss += v * v;
    }
  }
  ss = device::block_sum(ss, s_red);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(p.cols) + p.eps);
  if (p.vectorized) {
    for (int64_t c = threadIdx.x * kW; c < p.cols; c += blockDim.x * kW) {
      float v[kW];
      device::load_vec(x + c, v);
      write_scaled<TO, kW>(out, c, v, inv_rms, p.weight);
    }
  } else {
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) {
      const float v[1] = {device::to_float(x[c])};
      write_scaled<TO, 1>(out, c, v, inv_rms, p.weight);
    }
  }
}

// Vectorised when residual and x have the same vector width (kW of the wider element type).
template <typename TR, typename TX, typename TO>
__global__ void add_rms_norm_kernel(NormParams<TR, TX, TO> p) {
  __shared__ float s_red[32];
  pdl_wait();
  pdl_launch_dependents();
  TR* res = p.residual + blockIdx.x * p.residual_stride;
  const TX* x = p.x + blockIdx.x * p.x_stride;
  TO* out = p.out + blockIdx.x * p.out_stride;
  constexpr int kW = device::kVecWidth<TX>;
  constexpr bool kCanVec = device::kVecWidth<TR> == kW;
  const bool vec = kCanVec && p.vectorized;
  float ss = 0.f;
  if constexpr (kCanVec) {
    if (vec) {
      for (int64_t c = threadIdx.x * kW; c < p.cols; c += blockDim.x * kW) {
        float r[kW], v[kW];
        device::load_vec(res + c, r);
        device::load_vec(x + c, v);
#pragma unroll
        for (int i = 0; i < kW; ++i) {
          r[i] = device::to_float(device::from_float<TR>(r[i] + v[i]));  // the stored value
          ss += r[i] * r[i];
        }
        device::store_vec(res + c, r);
      }
    }
  }
  if (!vec) {
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) {
      const TR r = device::from_float<TR>(device::to_float(res[c]) + device::to_float(x[c]));
      res[c] = r;
      const float v = device::to_float(r);
      ss += v * v;
    }
  }
  ss = device::block_sum(ss, s_red);  // its barrier also orders the residual writes above
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(p.cols) + p.eps);
  if constexpr (kCanVec) {
    if (vec) {
      for (int64_t c = threadIdx.x * kW; c < p.cols; c += blockDim.x * kW) {
        float r[kW];
        device::load_vec(res + c, r);
        write_scaled<TO, kW>(out, c, r, inv_rms, p.weight);
      }
    }
  }
  if (!vec) {
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x) {
      const float r[1] = {device::to_float(res[c])};
      write_scaled<TO, 1>(out, c, r, inv_rms, p.weight);
    }
  }
}

// Where add_rms_norm_regs_kernel's x comes from: the rows of x (add_rms_norm), or the sums of a
// K split's f32 partial products (add_rms_norm_split_sums: linear_add_rms_norm's GEMM).
template <typename TX>
struct RowsOfX {
  const TX* x;  // [rows, cols], rows `stride` apart
  int64_t stride;
  template <int kW>
  __device__ __forceinline__ void load(int64_t row, int64_t c, float (&d)[kW]) const {
    static_assert(device::kVecWidth<TX> == kW);
    device::load_vec(x + row * stride + c, d);
  }
  template <int kW>
  __device__ __forceinline__ void keep(int64_t, int64_t, const float (&)[kW]) const {}
};

template <int kSplits>
struct SplitSums {
  const float* part;  // [kSplits][rows][cols]
  int64_t block;      // rows * cols
  int64_t cols;
  float* y;  // [rows, cols], rows y_stride apart: the sums, as linear would write them
  int64_t y_stride;
  // Every partial's vector is requested before the first addition (one round trip per row).
  template <int kW>
  __device__ __forceinline__ void load(int64_t row, int64_t c, float (&d)[kW]) const {
    static_assert(kW % 4 == 0);
    const float* src = part + row * cols + c;
    float4 v[kSplits][kW / 4];
#pragma unroll
    for (int s = 0; s < kSplits; ++s) {
#pragma unroll
      for (int q = 0; q < kW / 4; ++q)
        v[s][q] = *reinterpret_cast<const float4*>(src + s * block + 4 * q);
    }
#pragma unroll
    for (int q = 0; q < kW / 4; ++q) {
      float4 a = v[0][q];
#pragma unroll
      for (int s = 1; s < kSplits; ++s) {  // in K order
        a.x += v[s][q].x;
        a.y += v[s][q].y;
        a.z += v[s][q].z;
        a.w += v[s][q].w;
      }
      d[4 * q] = a.x;
      d[4 * q + 1] = a.y;
      d[4 * q + 2] = a.z;
      d[4 * q + 3] = a.w;
    }
  }
  // Called after every load of the row: y's stores cannot hold the loads back. A null y: none.
  template <int kW>
  __device__ __forceinline__ void keep(int64_t row, int64_t c, const float (&d)[kW]) const {
    if (y == nullptr) return;
#pragma unroll
    for (int q = 0; q < kW / 4; ++q)
      *reinterpret_cast<float4*>(y + row * y_stride + c + 4 * q) =
          make_float4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]);
  }
};

// A row's sum of squares when kCluster CTAs share the row (thread-block clusters of kCluster
// along x, sm_90): each warp's sum goes into slot [rank][warp] of every CTA's shared memory, and
// after the cluster barrier every warp of every CTA adds the same slots in the same order (lane l
// takes slots l, l + 32, ...), so all of them hold the same bits. `s_slots` holds 32 * kCluster
// floats. The caller arrived once on the cluster barrier at the kernel's start
// (cluster_arrive_relaxed): the wait here makes sure every peer has started before its shared
// memory is written.
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

template <int kCluster>
__device__ __forceinline__ float cluster_row_sum(float ss, float* s_slots) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Cluster = cooperative_groups::cluster_group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = (blockDim.x + 31) >> 5;
  ss = device::warp_sum(ss);
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every peer has started
  if (lane == 0) {
    const int slot = static_cast<int>(Cluster::block_rank()) * n_warps + warp;
#pragma unroll
    for (int r = 0; r < kCluster; ++r) Cluster::map_shared_rank(s_slots, r)[slot] = ss;
  }
  Cluster::sync();  // every slot written (release / acquire); no shared access after this
  float v = 0.f;
  for (int i = lane; i < kCluster * n_warps; i += 32) v += s_slots[i];
  return device::warp_sum(v);
#else
  __trap();  // launched on sm_90 only (choose_add_rms_norm)
  return ss;
#endif
}

// add_rms_norm with the row in registers: each thread holds up to kV vectors of the row (as the
// two-pass kernel deals them, c = (t + v * threads) * kW) and their weights, which it loads before
// the programmatic wait (a forward never writes weights), so after the wait a row costs one load
// of residual and x (from `src`), the block sum, and the stores: no second read, no weight load on
// the chain. For vectorised rows of at most kV * threads vectors (launch_regs picks kV). With
// kCluster > 1 a cluster of kCluster CTAs shares each row (CTA x of the grid: row x / kCluster,
// columns [rank * slice, (rank + 1) * slice) of it), so a few rows still spread over many SMs (on
// the H200 the 17 rows of a verify took ~4.1 us with one CTA per row, ~2.8 us with 8).
template <typename TR, typename TX, typename TO, int kV, int kCluster, typename Src>
__global__ void add_rms_norm_regs_kernel(NormParams<TR, TX, TO> p, Src src, int64_t slice) {
  constexpr int kW = device::kVecWidth<TR>;
  __shared__ float s_red[32 * kCluster];
  if constexpr (kCluster > 1) cluster_arrive_relaxed();
  const int64_t row = blockIdx.x / kCluster;
  const int64_t begin = (blockIdx.x % kCluster) * slice;
  const int64_t end = begin + slice < p.cols ? begin + slice : p.cols;
  const int64_t step = int64_t{blockDim.x} * kW;
  const int64_t c0 = begin + int64_t{threadIdx.x} * kW;
  float w[kV][kW];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
#pragma unroll
    for (int i = 0; i < kW; ++i) w[v][i] = c < end ? p.weight(c + i) : 0.0f;
  }
  // The product after the norm launches before this grid waits (the exception in pdl.cuh): its
  // CTAs request their first weights as SMs free up, and its own wait covers the row.
  pdl_launch_dependents();
  pdl_wait();
  TR* res = p.residual + row * p.residual_stride;
  TO* out = p.out + row * p.out_stride;
  float r[kV][kW], d[kV][kW];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < end) {
      device::load_vec(res + c, r[v]);
      src.load(row, c, d[v]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < end) {
      src.keep(row, c, d[v]);
#pragma unroll
      for (int i = 0; i < kW; ++i) {
        r[v][i] = device::to_float(device::from_float<TR>(r[v][i] + d[v][i]));  // the stored value
        ss += r[v][i] * r[v][i];
      }
      device::store_vec(res + c, r[v]);
      if constexpr (kW == 4) {
        if (p.copy != nullptr) store_bf16x4(p.copy + row * p.copy_stride + c, r[v]);
      }
    }
  }
  if constexpr (kCluster > 1)
    ss = cluster_row_sum<kCluster>(ss, s_red);
  else
    ss = device::block_sum(ss, s_red);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(p.cols) + p.eps);
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < end) {
#pragma unroll
      for (int i = 0; i < kW; ++i) out[c + i] = device::from_float<TO>(r[v][i] * inv_rms * w[v][i]);
    }
  }
}

bool rows_aligned16(const void* base, int64_t stride, size_t elem, int64_t cols, int width) {
  return device::is_aligned16(base) && (stride * static_cast<int64_t>(elem)) % 16 == 0 &&
         cols % width == 0;
}

int threads_for(int64_t cols, int width) {
  return static_cast<int>(std::clamp<int64_t>(ceil_div(ceil_div(cols, width), 32) * 32, 32, 1024));
}

// The plan of an add_rms_norm launch (policy/norm.h) for rows of `vectors` vectors of TR / TX,
// made just before the launch (whether it is programmatic depends on the launch before it).
template <typename TR, typename TX>
NormPlan norm_plan(const Context& ctx, int64_t rows, int64_t vectors, bool vectorized) {
  constexpr bool kF32 = std::is_same_v<TR, float> && std::is_same_v<TX, float>;
  return choose_add_rms_norm(rows, vectors, vectorized, kF32, next_launch_programmatic(),
                             ctx.cuda_caps(), ctx.cuda_tuning());
}

// The one-pass kernel as `plan` says: one CTA per row with plan.vectors_per_thread vectors per
// thread, or a cluster of plan.cluster_ctas CTAs per row with one vector per thread.
template <typename TR, typename TX, typename TO, typename Src>
void launch_regs(Context& ctx, const NormParams<TR, TX, TO>& p, const Src& src, int64_t rows,
                 const NormPlan& plan) {
  constexpr int kW = device::kVecWidth<TR>;
  const int64_t vectors = p.cols / kW;
  const int cluster = plan.cluster_ctas;
  const int per_thread = plan.vectors_per_thread;
  if (cluster > 1) {
    const int64_t slice_vectors = ceil_div(vectors, int64_t{cluster});
    const dim3 grid(static_cast<unsigned>(rows * cluster));
    const dim3 block(static_cast<unsigned>(ceil_div(slice_vectors, int64_t{32}) * 32));
    const int64_t slice = slice_vectors * kW;
    auto launch = [&]<int kC>() {
      launch_pdl_cluster(add_rms_norm_regs_kernel<TR, TX, TO, 1, kC, Src>, grid, block, 0,
                         stream_of(ctx), dim3(kC, 1, 1), p, src, slice);
    };
    if constexpr (std::is_same_v<TR, float> && std::is_same_v<TX, float>) {
      if (cluster == 2)
        launch.template operator()<2>();
      else if (cluster == 4)
        launch.template operator()<4>();
      else
        launch.template operator()<8>();
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>(rows));
  const dim3 block(static_cast<unsigned>(ceil_div(ceil_div(vectors, per_thread), 32) * 32));
  auto launch = [&]<int kV>() {
    launch_pdl(add_rms_norm_regs_kernel<TR, TX, TO, kV, 1, Src>, grid, block, 0, stream_of(ctx), p,
               src, p.cols);
  };
  if (per_thread == 1)
    launch.template operator()<1>();
  else if (per_thread == 2)
    launch.template operator()<2>();
  else
    launch.template operator()<4>();
}

NormWeight make_weight(const Tensor& weight, const RmsNormParams& params) {
  return NormWeight{weight.data(), float_kind(weight.dtype()), params.unit_offset};
}

// The fields every norm launch sets: out and its row stride, the row length, weight and eps.
template <typename TR, typename TX, typename TO>
NormParams<TR, TX, device_t<TO>> norm_params(const Tensor& out, int64_t cols, const Tensor& weight,
                                             const RmsNormParams& params) {
  NormParams<TR, TX, device_t<TO>> p{};
  p.out = device_ptr<TO>(out);
  p.out_stride = row_view(out).stride;
  p.cols = cols;
  p.weight = make_weight(weight, params);
  p.eps = params.eps;
  return p;
}

// ---- layer_norm ------------------------------------------------------------------------------

struct LayerNormParams {
  const void* x;  // [rows, cols], rows x_stride apart
  void* out;      // [rows, cols], rows out_stride apart
  const void* weight;
  const void* bias;
  FloatKind x_kind, out_kind, weight_kind, bias_kind;
  int64_t x_stride, out_stride;
  int cols;
  float eps;
};

// One block per row, f32 math in three passes over the row: the mean, the biased variance of the
// centred values (two passes rather than E[x^2] - mean^2, which cancels), then the output. Element
// c belongs to the same thread in every pass, so `out` may alias `x`. A small op (the DSA
// indexer's keys, one row of index_head_dim per token): operand dtypes are run-time kinds.
__global__ void layer_norm_kernel(LayerNormParams p) {
  __shared__ float s_red[32];
  const int64_t xr = static_cast<int64_t>(blockIdx.x) * p.x_stride;
  const int64_t orow = static_cast<int64_t>(blockIdx.x) * p.out_stride;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < p.cols; c += blockDim.x)
    sum += device::load_float(p.x, xr + c, p.x_kind);
  const float mean = device::block_sum(sum, s_red) / static_cast<float>(p.cols);
  float var = 0.0f;
  for (int c = threadIdx.x; c < p.cols; c += blockDim.x) {
    const float v = device::load_float(p.x, xr + c, p.x_kind) - mean;
    var += v * v;
  }
  const float inv =
      1.0f / sqrtf(device::block_sum(var, s_red) / static_cast<float>(p.cols) + p.eps);
  for (int c = threadIdx.x; c < p.cols; c += blockDim.x) {
    const float v = (device::load_float(p.x, xr + c, p.x_kind) - mean) * inv;
    device::store_float(p.out, orow + c, p.out_kind,
                        v * device::load_float(p.weight, c, p.weight_kind) +
                            device::load_float(p.bias, c, p.bias_kind));
  }
}

}  // namespace

void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params) {
  const RowView xv = row_view(x);
  if (xv.rows == 0 || xv.cols == 0) return;
  dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      using DX = device_t<TX>;
      auto p = norm_params<float, DX, TO>(out, xv.cols, weight, params);
      p.x = device_ptr<TX>(x);
      p.x_stride = xv.stride;
      constexpr int kW = device::kVecWidth<DX>;
      p.vectorized = rows_aligned16(p.x, xv.stride, sizeof(DX), xv.cols, kW);
      launch_pdl(rms_norm_kernel<DX, device_t<TO>>, dim3(static_cast<unsigned>(xv.rows)),
                 dim3(threads_for(xv.cols, kW)), 0, stream_of(ctx), p);
    });
  });
}

void layer_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& out, float eps) {
  const RowView xv = row_view(x), ov = row_view(out);
  if (xv.rows == 0 || xv.cols == 0) return;
  LayerNormParams p{};
  p.x = x.data();
  p.out = out.data();
  p.weight = weight.data();
  p.bias = bias.data();
  p.x_kind = float_kind(x.dtype());
  p.out_kind = float_kind(out.dtype());
  p.weight_kind = float_kind(weight.dtype());
  p.bias_kind = float_kind(bias.dtype());
  p.x_stride = xv.stride;
  p.out_stride = ov.stride;
  p.cols = static_cast<int>(xv.cols);
  p.eps = eps;
  const int threads = static_cast<int>(std::clamp<int64_t>(ceil_div(xv.cols, 32) * 32, 32, 256));
  layer_norm_kernel<<<static_cast<unsigned>(xv.rows), threads, 0, stream_of(ctx)>>>(p);
  DSPARK_CUDA_CHECK_LAUNCH();
}

void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params) {
  const RowView rv = row_view(residual), xv = row_view(x);
  if (xv.rows == 0 || xv.cols == 0) return;
  dispatch_float(residual.dtype(), [&]<typename TR>(TypeTag<TR>) {
    dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        using DR = device_t<TR>;
        using DX = device_t<TX>;
        auto p = norm_params<DR, DX, TO>(out, xv.cols, weight, params);
        p.residual = device_ptr<TR>(residual);
        p.x = device_ptr<TX>(x);
        p.residual_stride = rv.stride;
        p.x_stride = xv.stride;
        constexpr int kW = device::kVecWidth<DX>;
        p.vectorized = device::kVecWidth<DR> == kW &&
                       rows_aligned16(p.x, xv.stride, sizeof(DX), xv.cols, kW) &&
                       rows_aligned16(p.residual, rv.stride, sizeof(DR), xv.cols, kW);
        // Rows in registers (vectorised rows of at most 4 vectors per thread), else two passes.
        if constexpr (device::kVecWidth<DR> == kW) {
          const NormPlan plan = norm_plan<DR, DX>(ctx, xv.rows, xv.cols / kW, p.vectorized);
          if (plan.vectors_per_thread > 0) {
            launch_regs(ctx, p, RowsOfX<DX>{p.x, p.x_stride}, xv.rows, plan);
            return;
          }
        }
        const dim3 grid(static_cast<unsigned>(xv.rows));
        launch_pdl(add_rms_norm_kernel<DR, DX, device_t<TO>>, grid, dim3(threads_for(xv.cols, kW)),
                   0, stream_of(ctx), p);
      });
    });
  });
}

bool add_rms_norm_split_sums_fits(const Tensor& residual, const Tensor& y) {
  const RowView rv = row_view(residual), yv = row_view(y);
  return residual.dtype() == DType::f32 && y.dtype() == DType::f32 &&
         rows_aligned16(residual.data(), rv.stride, 4, rv.cols, 4) &&
         rows_aligned16(y.data(), yv.stride, 4, rv.cols, 4) &&
         rv.cols / 4 <= int64_t{4} * kNormRowThreads;
}

bool add_rms_norm_split_sums_copies(const Tensor& residual, const Tensor& copy) {
  const RowView rv = row_view(residual), cv = row_view(copy);
  return residual.dtype() == DType::f32 && copy.dtype() == DType::bf16 && cv.rows == rv.rows &&
         cv.cols == rv.cols && rows_aligned16(residual.data(), rv.stride, 4, rv.cols, 4) &&
         reinterpret_cast<uintptr_t>(copy.data()) % 8 == 0 && (cv.stride * 2) % 8 == 0;
}

void add_rms_norm_split_sums(Context& ctx, const Tensor& residual, const float* part, int splits,
                             const Tensor& y, const Tensor& weight, const Tensor& out,
                             const RmsNormParams& params, const Tensor& copy) {
  const RowView rv = row_view(residual);
  if (rv.rows == 0 || rv.cols == 0) return;
  const int64_t y_stride = y.defined() ? row_view(y).stride : 0;
  DSPARK_CHECK(!copy.defined() || add_rms_norm_split_sums_copies(residual, copy),
               "add_rms_norm_split_sums: a copy it cannot write");
  dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
    auto p = norm_params<float, float, TO>(out, rv.cols, weight, params);
    p.residual = device_ptr<float>(residual);
    p.residual_stride = rv.stride;
    p.vectorized = true;
    if (copy.defined()) {
      p.copy = static_cast<__nv_bfloat16*>(copy.data());
      p.copy_stride = row_view(copy).stride;
    }
    const NormPlan plan = norm_plan<float, float>(ctx, rv.rows, rv.cols / 4, true);
    auto launch = [&]<int kSplits>() {
      const SplitSums<kSplits> src{part, rv.rows * rv.cols, rv.cols,
                                   y.defined() ? device_ptr<float>(y) : nullptr, y_stride};
      launch_regs(ctx, p, src, rv.rows, plan);
    };
    static_assert(kLinearNormMaxSplits == 4);
    if (splits == 2)
      launch.template operator()<2>();
    else if (splits == 3)
      launch.template operator()<3>();
    else
      launch.template operator()<4>();
  });
}

}  // namespace dspark::cuda
