// moe_linear on the device (contract: ops/moe.h): every expert's rows times its matrix in one
// launch, with the grouping read on the device, so a MoE layer needs no host round trip.
//  - Grid: x over tiles of kWarps * kRowsPerWarp weight rows of one expert, y over the slots of
//    the active-expert list (moe_group's `active`); a CTA whose slot is past the list's length
//    returns at once. So only the chosen experts' weights are read, each once per group of C
//    of its rows (the rows past the first C re-read the tile from L2).
//  - A warp owns kRowsPerWarp weight rows; lane l reads 16-byte chunks l, l + 32, ... of them
//    (kUnroll chunks per row in flight per iteration) and multiplies each by the same chunk of C
//    rows of x (L1-resident: every CTA of the expert reads them).
//  - Per output, a lane sums its chunks in column order and the warp adds its lanes with a xor
//    butterfly: the order depends on K only, so a row's result does not depend on how many rows
//    the call or its expert has.
#include <algorithm>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"

namespace dspark::cuda {
namespace {

constexpr int kWarps = 4, kRowsPerWarp = 2, kUnroll = 4;

template <typename T, typename TY>
struct MoeLinearParams {
  const T* w;  // [E * n, k]
  const T* x;  // [m, k], rows x_stride apart
  TY* y;       // [m, n], rows y_stride apart
  const int32_t* offsets;
  const int32_t* active;
  int64_t n, k, x_stride, y_stride;
};

template <typename T, typename TY, int C>
__global__ void __launch_bounds__(kWarps * 32) moe_linear_kernel(MoeLinearParams<T, TY> p) {
  constexpr int kVec = device::kVecWidth<T>;
  const int slot = static_cast<int>(blockIdx.y);
  if (slot >= p.active[0]) return;
  const int64_t e = p.active[1 + slot];
  const int lo = p.offsets[e], hi = p.offsets[e + 1];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRowsPerWarp;
  if (row0 >= p.n) return;
  const bool second = row0 + 1 < p.n;
  const T* w0 = p.w + (e * p.n + row0) * p.k;
  const T* w1 = second ? w0 + p.k : w0;
  for (int r = lo; r < hi; r += C) {
    float acc[kRowsPerWarp][C];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
#pragma unroll
      for (int c = 0; c < C; ++c) acc[i][c] = 0.0f;
    }
    for (int64_t col0 = int64_t{lane} * kVec; col0 < p.k; col0 += 32 * kVec * kUnroll) {
      uint4 a[kRowsPerWarp][kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t col = col0 + int64_t{u} * 32 * kVec;
        if (col < p.k) {
          a[0][u] = gemv_tile::load_stream(w0 + col);
          a[1][u] = gemv_tile::load_stream(w1 + col);
        }
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        if (r + c >= hi) break;
        const T* xr = p.x + static_cast<int64_t>(r + c) * p.x_stride;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t col = col0 + int64_t{u} * 32 * kVec;
          if (col >= p.k) break;
          float xv[kVec];
          device::load_vec(xr + col, xv);
#pragma unroll
          for (int i = 0; i < kRowsPerWarp; ++i) {
            const T* we = reinterpret_cast<const T*>(&a[i][u]);
            float s = acc[i][c];
#pragma unroll
            for (int v = 0; v < kVec; ++v) s = fmaf(device::to_float(we[v]), xv[v], s);
            acc[i][c] = s;
          }
        }
      }
    }
#pragma unroll
    for (int c = 0; c < C; ++c) {
      if (r + c >= hi) break;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        float s = acc[i][c];
#pragma unroll
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0 && (i == 0 || second))
          p.y[static_cast<int64_t>(r + c) * p.y_stride + row0 + i] = device::from_float<TY>(s);
      }
    }
  }
}

template <typename T, typename TY>
void launch(const MoeLinearParams<T, TY>& p, int64_t rows_per_expert, unsigned slots,
            cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, int64_t{kWarps} * kRowsPerWarp)), slots);
  const dim3 block(kWarps * 32);
  if (rows_per_expert <= 1) {
    moe_linear_kernel<T, TY, 1><<<grid, block, 0, stream>>>(p);
  } else if (rows_per_expert <= 2) {
    moe_linear_kernel<T, TY, 2><<<grid, block, 0, stream>>>(p);
  } else if (rows_per_expert <= 4) {
    moe_linear_kernel<T, TY, 4><<<grid, block, 0, stream>>>(p);
  } else {
    moe_linear_kernel<T, TY, 8><<<grid, block, 0, stream>>>(p);
  }
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_linear(Context& ctx, const Tensor& x, const Tensor& w, const MoeGroups& g,
                const Tensor& y) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t experts = g.offsets.size(0) - 1, m = xv.rows, k = xv.cols;
  DSPARK_CHECK(w.is_contiguous() && device::is_aligned16(w.data()) &&
                   device::is_aligned16(x.data()) &&
                   (xv.stride * static_cast<int64_t>(dtype_size(x.dtype()))) % 16 == 0,
               "moe_linear: w must be contiguous and w and x rows 16-byte aligned");
  DSPARK_CHECK(x.dtype() == w.dtype() && (y.dtype() == x.dtype() || y.dtype() == DType::f32),
               "moe_linear: x {} and w {} must share a dtype, y {} be it or f32",
               dtype_name(x.dtype()), dtype_name(w.dtype()), dtype_name(y.dtype()));
  // At most min(E, m) experts have rows; a token lists an expert at most once, so an expert has
  // at most as many rows as there are tokens.
  const auto slots = static_cast<unsigned>(std::min(experts, m));
  const int64_t tokens = g.slots.size(0);
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
      if constexpr (std::is_same_v<TY, T> || std::is_same_v<TY, float>) {
        using DT = device_t<T>;
        using DY = device_t<TY>;
        const MoeLinearParams<DT, DY> p{static_cast<const DT*>(w.data()),
                                        static_cast<const DT*>(x.data()),
                                        static_cast<DY*>(y.data()),
                                        g.offsets.data_as<int32_t>(),
                                        g.active.data_as<int32_t>(),
                                        w.size(0) / experts,
                                        k,
                                        xv.stride,
                                        yv.stride};
        launch(p, tokens, slots, stream_of(ctx));
      }
    });
  });
}

}  // namespace dspark::cuda
