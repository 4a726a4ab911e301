#include "dspark/io/mlx_quantize.h"

#include <algorithm>
#include <cmath>

#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"

namespace dspark {
namespace {

struct GroupAffine {
  float scale = 0, bias = 0;
};

GroupAffine group_affine(const float* g, int size, float n_bins) {
  float lo = g[0], hi = g[0];
  for (int i = 1; i < size; ++i) {
    lo = std::min(lo, g[i]);
    hi = std::max(hi, g[i]);
  }
  const bool low_edge = std::fabs(lo) > std::fabs(hi);
  const float step = std::max((hi - lo) / n_bins, 1e-7f);
  const float edge = low_edge ? lo : hi;
  GroupAffine a{low_edge ? step : -step, 0.0f};
  const float z = std::nearbyint(edge / a.scale);
  if (z != 0.0f) {
    a.scale = edge / z;
    a.bias = edge;
  }
  return a;
}

}  // namespace

void mlx_quantize_rows(const float* w, int64_t rows, int64_t cols, MlxQuantSpec spec,
                       uint32_t* words, float* scales, float* biases) {
  check_mlx_quant_spec("mlx_quantize_rows", spec);
  const int gs = spec.group_size, bits = spec.bits;
  DSPARK_CHECK(cols % gs == 0, "mlx_quantize_rows: {} values per row, not a multiple of {}", cols,
               gs);
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const int per_word = 32 / bits;
  const int64_t groups = cols / gs, row_words = cols / per_word;
  ThreadPool::global().parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint32_t* out = words + r * row_words;
      std::fill(out, out + row_words, 0u);
      for (int64_t g = 0; g < groups; ++g) {
        const float* x = w + r * cols + g * gs;
        const GroupAffine a = group_affine(x, gs, n_bins);
        scales[r * groups + g] = a.scale;
        biases[r * groups + g] = a.bias;
        for (int i = 0; i < gs; ++i) {
          const float q = std::clamp(std::nearbyint((x[i] - a.bias) / a.scale), 0.0f, n_bins);
          const int64_t col = g * gs + i;
          out[col / per_word] |= static_cast<uint32_t>(q) << (bits * (col % per_word));
        }
      }
    }
  });
}

}  // namespace dspark
