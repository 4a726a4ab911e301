// Dequantized rows of a block-quantized matrix (quant_rows.h; gather_rows_blocks: ops/embedding.h):
// a CTA of 64 threads per (output row, 2,048 values of it). The CTA copies the blocks of its values
// into shared memory with 16-byte loads (the 16-byte chunks around them: a row's blocks need not
// be 16-byte aligned), then each thread turns 32 values into f32 with decode32 (quant_blocks.cuh:
// the reference's arithmetic in its order, so f32 results are the host's bit for bit) and stores
// them in the output dtype, 16 bytes at a time where the output rows allow. Rows outside the table
// (gather ids outside [0, V)) give zeros.
#include <algorithm>
#include <type_traits>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/vec.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/quant_blocks.cuh"
#include "dspark/backend/cuda/kernels/quant_rows.h"

namespace dspark::cuda {
namespace {

constexpr int kThreads = 64;                     // one group of 32 values each
constexpr int64_t kChunkValues = kThreads * 32;  // values per CTA (a multiple of 256)
// The most bytes of kChunkValues values (Q8_0: 34 per 32) plus the chunks around them.
constexpr int kStageBytes = static_cast<int>(kChunkValues / 32 * 34) + 32;

template <typename TO>
struct RowsParams {
  const uint8_t* w;  // [n][row_bytes]
  int64_t row_bytes, n, k;
  int64_t w_bytes;     // n * row_bytes
  bool w_aligned;      // w 16-byte aligned: vector copies
  const int32_t* ids;  // [rows] or null: row row0 + i
  int64_t row0;
  TO* out;  // [rows][k], rows out_stride apart
  int64_t out_stride;
  bool out_aligned;  // out and its row stride 16-byte aligned
};

template <QuantType Q, typename TO>
__global__ void __launch_bounds__(kThreads) dequantize_rows_kernel(RowsParams<TO> p) {
  constexpr int64_t E = quant::quant_block_elements(Q), B = quant::quant_block_bytes(Q);
  __shared__ __align__(16) uint8_t stage[kStageBytes];
  const int64_t i = blockIdx.x;
  const int64_t row = p.ids != nullptr ? int64_t{p.ids[i]} : p.row0 + i;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * kChunkValues;
  const int64_t v1 = min(v0 + kChunkValues, p.k);
  TO* out = p.out + i * p.out_stride;
  const int64_t v = v0 + 32 * threadIdx.x;  // this thread's 32 values
  float y[32];
  if (row < 0 || row >= p.n) {
#pragma unroll
    for (int j = 0; j < 32; ++j) y[j] = 0.0f;
  } else {
    // Bytes [a, b) of the tensor hold the chunk's blocks; copy the 16-byte chunks around them.
    const int64_t a = row * p.row_bytes + v0 / E * B, b = row * p.row_bytes + v1 / E * B;
    const int64_t a16 = a & ~int64_t{15};
    const int n_vec = static_cast<int>((b - a16 + 15) / 16);
    for (int c = threadIdx.x; c < n_vec; c += kThreads) {
      const int64_t off = a16 + 16 * int64_t{c};
      if (p.w_aligned && off + 16 <= p.w_bytes) {
        reinterpret_cast<uint4*>(stage)[c] = __ldg(reinterpret_cast<const uint4*>(p.w + off));
      } else {
        for (int j = 0; j < 16; ++j)
          stage[16 * c + j] = off + j < p.w_bytes ? p.w[off + j] : uint8_t{0};
      }
    }
    __syncthreads();
    if (v < v1) {
      const uint8_t* blk = stage + (a - a16) + (v / E - v0 / E) * B;
      quant::decode32<Q>(blk, static_cast<int>(v % E / 32), y);
    }
  }
  if (v >= v1) return;
  if (p.out_aligned) {
    constexpr int W = device::kVecWidth<TO>;
#pragma unroll
    for (int j = 0; j < 32; j += W) {
      float part[W];
#pragma unroll
      for (int e = 0; e < W; ++e) part[e] = y[j + e];
      device::store_vec(out + v + j, part);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) out[v + j] = device::from_float<TO>(y[j]);
  }
}

void dequantize_rows_impl(Context& ctx, const WeightMatrix& w, const int32_t* ids, int64_t row0,
                          int64_t rows, const Tensor& out) {
  const RowView ov = row_view(out);
  if (rows == 0 || w.k == 0) return;
  const int64_t row_bytes = quant_row_bytes(w.quant, w.k);
  const auto* data = static_cast<const uint8_t*>(w.data.data());
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(ceil_div(w.k, kChunkValues)));
  dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
    using D = device_t<TO>;
    RowsParams<D> p{};
    p.w = data;
    p.row_bytes = row_bytes;
    p.n = w.n;
    p.k = w.k;
    p.w_bytes = w.n * row_bytes;
    p.w_aligned = device::is_aligned16(data);
    p.ids = ids;
    p.row0 = row0;
    p.out = device_ptr<TO>(out);
    p.out_stride = ov.stride;
    p.out_aligned =
        device::is_aligned16(p.out) && (ov.stride * static_cast<int64_t>(sizeof(D))) % 16 == 0;
    quant::dispatch_quant(w.quant, [&]<QuantType Q>(quant::QuantTag<Q>) {
      dequantize_rows_kernel<Q, D><<<grid, kThreads, 0, stream_of(ctx)>>>(p);
      DSPARK_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void dequantize_rows(Context& ctx, const WeightMatrix& w, int64_t row0, const Tensor& out) {
  dequantize_rows_impl(ctx, w, nullptr, row0, row_view(out).rows, out);
}

void gather_rows_blocks(Context& ctx, const WeightMatrix& table, const Tensor& ids,
                        const Tensor& out) {
  dequantize_rows_impl(ctx, table, static_cast<const int32_t*>(ids.data()), 0, ids.numel(), out);
}

}  // namespace dspark::cuda
