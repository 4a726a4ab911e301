// CPU kernel of linear with FP8 block-scaled weights (WeightFormat::fp8_blocks; contract:
// ops/matmul.h). Each output row of the weight is decoded once per call (E4M3 codes to f32 through
// a 256-entry table) and multiplied with every row of x: per chunk of 64 values an f32 dot product,
// then the chunk's block scale times that sum added to the row's total in k order (the chunking of
// the CUDA kernels). A row's result depends only on that row of x: not on M, the other rows or the
// thread split.
#include <algorithm>
#include <array>
#include <vector>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/core/fp8.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace {

constexpr int64_t kScaleChunk = 64;  // elements of k per dot_f32 call

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

void linear_fp8_blocks(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
                       const Tensor& y) {
  const int64_t m = x.size(0), n = w.n, k = w.k;
  const int64_t scale_cols = (k + w.block_k - 1) / w.block_k;
  // x as f32 rows in the context's scratch (no allocation per call on a decode step).
  auto* xf = static_cast<float*>(ctx.scratch(static_cast<size_t>(m * k) * sizeof(float)));
  dispatch_float(x.dtype(), [&]<typename T>(TypeTag<T>) {
    for (int64_t r = 0; r < m; ++r) load_f32(row_ptr<const T>(x, r), xf + r * k, k);
  });
  const std::vector<float> b = bias.defined() ? vector_f32(bias) : std::vector<float>{};
  const auto* codes = static_cast<const uint8_t*>(w.data.data());
  const auto* scales = static_cast<const float*>(w.scales.data());
  const std::array<float, 256>& table = e4m3_table();
  dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
    ctx.pool().parallel_for(n, 8, [&](int64_t begin, int64_t end) {
      float* row = thread_scratch(k);
      for (int64_t i = begin; i < end; ++i) {
        const uint8_t* q = codes + i * k;
        for (int64_t j = 0; j < k; ++j) row[j] = table[q[j]];
        const float* s = scales + (i / w.block_n) * scale_cols;
        for (int64_t r = 0; r < m; ++r) {
          const float* xr = xf + r * k;
          float acc = 0.0f;
          for (int64_t c = 0; c < k; c += kScaleChunk) {
            const int64_t len = std::min(kScaleChunk, k - c);
            acc += s[c / w.block_k] * dot_f32(row + c, xr + c, len);
          }
          if (!b.empty()) acc += b[static_cast<size_t>(i)];
          row_ptr<TY>(y, r)[i] = from_f32<TY>(acc);
        }
      }
    });
  });
}

}  // namespace dspark::cpu
