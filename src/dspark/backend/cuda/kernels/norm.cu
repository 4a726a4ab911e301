// rms_norm and add_rms_norm: one block per row, f32 math. Pass 1 accumulates the sum of squares
// (add_rms_norm first updates the residual row in place and squares the stored, rounded value),
// pass 2 re-reads the row (from L1/L2) and writes out. Both passes give element c to the same
// thread, so `out` may alias `x` (and add_rms_norm's pass 2 reads back its own residual writes).
// Loads of x use 16-byte vectors when rows are aligned; the weight's dtype is a run-time kind.
// add_rms_norm's rows of up to 4 vectors per thread take a one-pass kernel instead that keeps the
// row in registers (add_rms_norm_regs_kernel; DSPARK_NORM_REG_THREADS).
#include <algorithm>
#include <cstdlib>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/reduce.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

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
};

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

// add_rms_norm with the row in registers: each thread holds up to kV vectors of the row (as the
// two-pass kernel deals them, c = (t + v * threads) * kW) and their weights, which it loads before
// the programmatic wait (a forward never writes weights), so after the wait a row costs one load
// of residual and x, the block sum, and the stores: no second read, no weight load on the chain.
// For vectorised rows of at most kV * threads vectors (add_rms_norm picks kV; session 12).
template <typename TR, typename TX, typename TO, int kV>
__global__ void add_rms_norm_regs_kernel(NormParams<TR, TX, TO> p) {
  constexpr int kW = device::kVecWidth<TX>;
  static_assert(device::kVecWidth<TR> == kW);
  __shared__ float s_red[32];
  const int64_t step = int64_t{blockDim.x} * kW;
  const int64_t c0 = int64_t{threadIdx.x} * kW;
  float w[kV][kW];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
#pragma unroll
    for (int i = 0; i < kW; ++i) w[v][i] = c < p.cols ? p.weight(c + i) : 0.0f;
  }
  pdl_wait();
  pdl_launch_dependents();
  TR* res = p.residual + blockIdx.x * p.residual_stride;
  const TX* x = p.x + blockIdx.x * p.x_stride;
  TO* out = p.out + blockIdx.x * p.out_stride;
  float r[kV][kW], d[kV][kW];
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < p.cols) {
      device::load_vec(res + c, r[v]);
      device::load_vec(x + c, d[v]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < p.cols) {
#pragma unroll
      for (int i = 0; i < kW; ++i) {
        r[v][i] = device::to_float(device::from_float<TR>(r[v][i] + d[v][i]));  // the stored value
        ss += r[v][i] * r[v][i];
      }
      device::store_vec(res + c, r[v]);
    }
  }
  ss = device::block_sum(ss, s_red);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(p.cols) + p.eps);
#pragma unroll
  for (int v = 0; v < kV; ++v) {
    const int64_t c = c0 + v * step;
    if (c < p.cols) {
#pragma unroll
      for (int i = 0; i < kW; ++i) out[c + i] = device::from_float<TO>(r[v][i] * inv_rms * w[v][i]);
    }
  }
}

// The most threads per row of add_rms_norm_regs_kernel: 256, or DSPARK_NORM_REG_THREADS=N (read
// once; a multiple of 32 up to 1024; 0 keeps every row on the two-pass kernel).
int norm_reg_threads() {
  static const int n = [] {
    const char* v = std::getenv("DSPARK_NORM_REG_THREADS");
    if (v == nullptr || *v == '\0') return 256;
    return std::clamp(std::atoi(v) / 32 * 32, 0, 1024);
  }();
  return n;
}

bool rows_aligned16(const void* base, int64_t stride, size_t elem, int64_t cols, int width) {
  return device::is_aligned16(base) && (stride * static_cast<int64_t>(elem)) % 16 == 0 &&
         cols % width == 0;
}

int threads_for(int64_t cols, int width) {
  return static_cast<int>(std::clamp<int64_t>(ceil_div(ceil_div(cols, width), 32) * 32, 32, 1024));
}

NormWeight make_weight(const Tensor& weight, const RmsNormParams& params) {
  return NormWeight{weight.data(), float_kind(weight.dtype()), params.unit_offset};
}

}  // namespace

void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params) {
  const RowView xv = row_view(x), ov = row_view(out);
  if (xv.rows == 0 || xv.cols == 0) return;
  dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      using DX = device_t<TX>;
      NormParams<float, DX, device_t<TO>> p{};
      p.x = device_ptr<TX>(x);
      p.out = device_ptr<TO>(out);
      p.x_stride = xv.stride;
      p.out_stride = ov.stride;
      p.cols = xv.cols;
      p.weight = make_weight(weight, params);
      p.eps = params.eps;
      constexpr int kW = device::kVecWidth<DX>;
      p.vectorized = rows_aligned16(p.x, xv.stride, sizeof(DX), xv.cols, kW);
      launch_pdl(rms_norm_kernel<DX, device_t<TO>>, dim3(static_cast<unsigned>(xv.rows)),
                 dim3(threads_for(xv.cols, kW)), 0, stream_of(ctx), p);
    });
  });
}

void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params) {
  const RowView rv = row_view(residual), xv = row_view(x), ov = row_view(out);
  if (xv.rows == 0 || xv.cols == 0) return;
  dispatch_float(residual.dtype(), [&]<typename TR>(TypeTag<TR>) {
    dispatch_float(x.dtype(), [&]<typename TX>(TypeTag<TX>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        using DR = device_t<TR>;
        using DX = device_t<TX>;
        NormParams<DR, DX, device_t<TO>> p{};
        p.residual = device_ptr<TR>(residual);
        p.x = device_ptr<TX>(x);
        p.out = device_ptr<TO>(out);
        p.residual_stride = rv.stride;
        p.x_stride = xv.stride;
        p.out_stride = ov.stride;
        p.cols = xv.cols;
        p.weight = make_weight(weight, params);
        p.eps = params.eps;
        constexpr int kW = device::kVecWidth<DX>;
        p.vectorized = device::kVecWidth<DR> == kW &&
                       rows_aligned16(p.x, xv.stride, sizeof(DX), xv.cols, kW) &&
                       rows_aligned16(p.residual, rv.stride, sizeof(DR), xv.cols, kW);
        const dim3 grid(static_cast<unsigned>(xv.rows));
        // Rows in registers (vectorised rows of at most 4 vectors per thread), else two passes.
        const int64_t vectors = xv.cols / kW, max_threads = norm_reg_threads();
        const int64_t per_thread = max_threads > 0 ? ceil_div(vectors, max_threads) : 0;
        if constexpr (device::kVecWidth<DR> == kW) {
          if (p.vectorized && per_thread >= 1 && per_thread <= 4) {
            const dim3 block(
                static_cast<unsigned>(ceil_div(ceil_div(vectors, per_thread), 32) * 32));
            auto launch = [&]<int kV>() {
              launch_pdl(add_rms_norm_regs_kernel<DR, DX, device_t<TO>, kV>, grid, block, 0,
                         stream_of(ctx), p);
            };
            if (per_thread == 1)
              launch.template operator()<1>();
            else if (per_thread == 2)
              launch.template operator()<2>();
            else
              launch.template operator()<4>();
            return;
          }
        }
        launch_pdl(add_rms_norm_kernel<DR, DX, device_t<TO>>, grid, dim3(threads_for(xv.cols, kW)),
                   0, stream_of(ctx), p);
      });
    });
  });
}

}  // namespace dspark::cuda
