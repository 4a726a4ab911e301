// moe_linear (contract: ops/moe.h) and linear_per_head (ops/matmul.h) on the device: many small
// matrices, each multiplying its own rows, in one launch. moe_linear's experts read the grouping
// on the device, so a MoE layer needs no host round trip; linear_per_head's heads each take every
// token's columns of that head.
//  - Grid: x over tiles of kWarps * kRowsPerWarp weight rows of one matrix, y over the matrices:
//    for moe_linear the slots of the active-expert list (moe_group's `active`), a CTA whose slot
//    is past the list's length returning at once, so only the chosen experts' weights are read;
//    for linear_per_head the heads. A tile is read once per group of C of its rows (the rows past
//    the first C re-read it from L2).
//  - A warp owns kRowsPerWarp weight rows; lane l reads 16-byte chunks l, l + 32, ... of them
//    (kUnroll chunks per row in flight per iteration) and multiplies each by the same chunk of C
//    rows of x (L1-resident: every CTA of the expert reads them).
//  - Per output, a lane sums its chunks in column order and the warp adds its lanes with a xor
//    butterfly: the order depends on K only, so a row's result does not depend on how many rows
//    the call or its expert has.
//  - Launched as a programmatic dependent (pdl.cuh) of the kernel before it.
//  - moe_linear_gather: grouped row r of x is the tokens' row order[r]. (SwiGLU is not computed
//    here as x is loaded: every warp of every row tile would compute it again; verify of 16 on
//    a bf16 Qwen3-30B-A3B shape took 1.45x as long that way.)
#include <algorithm>
#include <limits>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv_tile.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kWarps = 4, kRowsPerWarp = 2, kUnroll = 4;

template <typename T, typename TY>
struct MoeLinearParams {
  const T* w;              // [E * n, k]
  const T* x;              // matrix e's row r at x + e * x_matrix_stride + r * x_stride
  TY* y;                   // matrix e's row r at y + e * y_matrix_stride + r * y_stride
  const int32_t* offsets;  // moe_linear's grouping, or null: matrix blockIdx.y, rows [0, rows)
  const int32_t* active;
  int64_t n, k, x_stride, y_stride;
  int64_t x_matrix_stride = 0, y_matrix_stride = 0;
  int rows = 0;
  const int32_t* order = nullptr;  // moe_linear_gather: x row of grouped row r
};

template <typename T, typename TY, int C>
__global__ void __launch_bounds__(kWarps * 32) moe_linear_kernel(MoeLinearParams<T, TY> p) {
  constexpr int kVec = device::kVecWidth<T>;
  pdl_wait();  // a programmatic dependent (pdl.cuh): the next kernel may launch from here on
  pdl_launch_dependents();
  const int slot = static_cast<int>(blockIdx.y);
  int64_t e = slot;
  int lo = 0, hi = p.rows;
  if (p.offsets != nullptr) {
    if (slot >= p.active[0]) return;
    e = p.active[1 + slot];
    lo = p.offsets[e];
    hi = p.offsets[e + 1];
  }
  const T* x = p.x + e * p.x_matrix_stride;
  TY* y = p.y + e * p.y_matrix_stride;
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
        const int64_t xrow = p.order != nullptr ? p.order[r + c] : r + c;
        const T* xr = x + xrow * p.x_stride;
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
          y[static_cast<int64_t>(r + c) * p.y_stride + row0 + i] = device::from_float<TY>(s);
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
    launch_pdl(moe_linear_kernel<T, TY, 1>, grid, block, 0, stream, p);
  } else if (rows_per_expert <= 2) {
    launch_pdl(moe_linear_kernel<T, TY, 2>, grid, block, 0, stream, p);
  } else if (rows_per_expert <= 4) {
    launch_pdl(moe_linear_kernel<T, TY, 4>, grid, block, 0, stream, p);
  } else {
    launch_pdl(moe_linear_kernel<T, TY, 8>, grid, block, 0, stream, p);
  }
}

// The call's shape, whichever op it comes from.
struct Launch {
  int64_t n = 0, k = 0, x_stride = 0, y_stride = 0, x_matrix_stride = 0, y_matrix_stride = 0;
  const int32_t* offsets = nullptr;
  const int32_t* active = nullptr;
  unsigned matrices = 0;  // grid.y
  int rows = 0;           // without offsets: every matrix's rows
  int64_t max_rows = 0;   // the most rows a matrix has (picks C)
  const int32_t* order = nullptr;
};

void launch_typed(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                  const Launch& l) {
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
      if constexpr (std::is_same_v<TY, T> || std::is_same_v<TY, float>) {
        using DT = device_t<T>;
        using DY = device_t<TY>;
        MoeLinearParams<DT, DY> p{static_cast<const DT*>(w.data()),
                                  static_cast<const DT*>(x.data()),
                                  static_cast<DY*>(y.data()),
                                  l.offsets,
                                  l.active,
                                  l.n,
                                  l.k,
                                  l.x_stride,
                                  l.y_stride};
        p.x_matrix_stride = l.x_matrix_stride;
        p.y_matrix_stride = l.y_matrix_stride;
        p.rows = l.rows;
        p.order = l.order;
        launch(p, l.max_rows, l.matrices, stream_of(ctx));
      }
    });
  });
}

}  // namespace

void moe_linear(Context& ctx, const Tensor& x, const Tensor& w, const MoeGroups& g, const Tensor& y,
                bool gather) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t experts = g.offsets.size(0) - 1, m = g.order.size(0);
  DSPARK_CHECK(w.is_contiguous() && device::is_aligned16(w.data()) &&
                   device::is_aligned16(x.data()) &&
                   (xv.stride * static_cast<int64_t>(dtype_size(x.dtype()))) % 16 == 0,
               "moe_linear: w must be contiguous and w and x rows 16-byte aligned");
  DSPARK_CHECK(x.dtype() == w.dtype() && (y.dtype() == x.dtype() || y.dtype() == DType::f32),
               "moe_linear: x {} and w {} must share a dtype, y {} be it or f32",
               dtype_name(x.dtype()), dtype_name(w.dtype()), dtype_name(y.dtype()));
  Launch l;
  l.n = w.size(0) / experts;
  l.k = w.size(1);
  l.order = gather ? g.order.data_as<int32_t>() : nullptr;
  l.x_stride = xv.stride;
  l.y_stride = yv.stride;
  l.offsets = g.offsets.data_as<int32_t>();
  l.active = g.active.data_as<int32_t>();
  // At most min(E, m) experts have rows; a token lists an expert at most once, so an expert has
  // at most as many rows as there are tokens.
  l.matrices = static_cast<unsigned>(std::min(experts, m));
  l.max_rows = g.slots.size(0);
  launch_typed(ctx, x, w, y, l);
}

bool linear_per_head(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y) {
  const int64_t n = x.size(0), heads = x.size(1), k = x.size(2);
  const auto bytes = static_cast<int64_t>(dtype_size(x.dtype()));
  const bool dtypes =
      (x.dtype() == DType::bf16 || x.dtype() == DType::f16 || x.dtype() == DType::f32) &&
      x.dtype() == w.dtype() && (y.dtype() == x.dtype() || y.dtype() == DType::f32);
  const bool aligned = device::is_aligned16(w.data()) && device::is_aligned16(x.data()) &&
                       (k * bytes) % 16 == 0 && (x.stride(0) * bytes) % 16 == 0 &&
                       (x.stride(1) * bytes) % 16 == 0;
  if (!dtypes || !aligned || n > std::numeric_limits<int>::max()) return false;
  Launch l;
  l.n = w.size(1);
  l.k = k;
  l.x_stride = x.stride(0);
  l.y_stride = y.stride(0);
  l.x_matrix_stride = x.stride(1);
  l.y_matrix_stride = y.stride(1);
  l.matrices = static_cast<unsigned>(heads);
  l.rows = static_cast<int>(n);
  l.max_rows = n;
  launch_typed(ctx, x, w, y, l);
  return true;
}

}  // namespace dspark::cuda
