// gather_rows (embedding lookup): one block per output row; ids outside [0, V) give zero rows.
// Same-dtype rows are copied with 16-byte vectors when table and output rows are aligned.
#include <algorithm>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

template <typename TIn, typename TOut>
struct GatherParams {
  const TIn* table;    // [vocab, cols], rows table_stride apart
  const int32_t* ids;  // [n]
  TOut* out;           // [n, cols], rows out_stride apart
  int64_t vocab;
  int64_t cols;
  int64_t table_stride;
  int64_t out_stride;
  bool vectorized;  // same dtype, rows 16-byte aligned, cols a multiple of the vector width
};

template <typename TIn, typename TOut>
__global__ void gather_rows_kernel(GatherParams<TIn, TOut> p) {
  const int64_t row = blockIdx.x;
  const int32_t id = p.ids[row];
  TOut* dst = p.out + row * p.out_stride;
  if (id < 0 || id >= p.vocab) {
    for (int64_t c = threadIdx.x; c < p.cols; c += blockDim.x)
      dst[c] = device::from_float<TOut>(0.f);
    return;
  }
  const TIn* src = p.table + static_cast<int64_t>(id) * p.table_stride;
  if constexpr (std::is_same_v<TIn, TOut>) {
    if (p.vectorized) {
      constexpr int kW = device::kVecWidth<TIn>;
      const int64_t n_vec = p.cols / kW;
      for (int64_t v = threadIdx.x; v < n_vec; v += blockDim.x)
        reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
      return;
    }
  }
  // Converting: kBatch loads before their stores (one at a time, each load would wait for the
  // store before it, which may alias the table as far as the compiler knows: 16 dependent
  // round trips per thread for a 4,096-wide bf16 row into f32, ~7 us per forward).
  constexpr int kBatch = 8;
  const int64_t step = blockDim.x;
  for (int64_t c0 = threadIdx.x; c0 < p.cols; c0 += kBatch * step) {
    float v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t c = c0 + i * step;
      if (c < p.cols) v[i] = device::to_float(src[c]);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t c = c0 + i * step;
      if (c < p.cols) dst[c] = device::from_float<TOut>(v[i]);
    }
  }
}

}  // namespace

void gather_rows(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out) {
  const RowView tv = row_view(table);
  const RowView ov = row_view(out);
  const int64_t n = ids.numel();
  if (n == 0 || ov.cols == 0) return;
  dispatch_float(table.dtype(), [&]<typename TI>(TypeTag<TI>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      using DI = device_t<TI>;
      using DO = device_t<TO>;
      GatherParams<DI, DO> p{};
      p.table = device_ptr<TI>(table);
      p.ids = static_cast<const int32_t*>(ids.data());
      p.out = device_ptr<TO>(out);
      p.vocab = tv.rows;
      p.cols = ov.cols;
      p.table_stride = tv.stride;
      p.out_stride = ov.stride;
      constexpr int kW = device::kVecWidth<DI>;
      p.vectorized = std::is_same_v<DI, DO> && device::is_aligned16(p.table) &&
                     device::is_aligned16(p.out) && p.cols % kW == 0 && tv.stride % kW == 0 &&
                     ov.stride % kW == 0;
      const int threads = static_cast<int>(
          std::clamp<int64_t>(ceil_div(p.vectorized ? p.cols / kW : p.cols, 32) * 32, 32, 256));
      gather_rows_kernel<<<static_cast<unsigned>(n), threads, 0, stream_of(ctx)>>>(p);
      DSPARK_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace dspark::cuda
