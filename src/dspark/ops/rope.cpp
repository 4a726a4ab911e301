// RoPE frequency tables (Hugging Face's default / linear / llama3 / yarn inv_freq, in double then
// cast to f32) and the argument checks and device dispatch of the rotation (contract: ops/rope.h).
#include "dspark/ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

// YaRN's attention scaling of one factor: 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1).
double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// The dimension index at which the rotation count over `max_pos` positions is `n_rotations`.
double yarn_correction_dim(double n_rotations, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (n_rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
}

}  // namespace

RopeTable make_rope_table(int head_dim, double theta, double partial_rotary_factor,
                          const RopeScaling& scaling, int max_position_embeddings) {
  constexpr const char* kOp = "make_rope_table";
  DSPARK_CHECK_KIND(invalid_input, head_dim > 0, "{}: head_dim must be > 0, got {}", kOp, head_dim);
  DSPARK_CHECK_KIND(invalid_input, theta > 0.0, "{}: rope_theta must be > 0, got {}", kOp, theta);
  DSPARK_CHECK_KIND(invalid_input, partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0,
                    "{}: partial_rotary_factor must be in (0, 1], got {}", kOp,
                    partial_rotary_factor);
  // HF: dim = int(head_dim * partial_rotary_factor); frequencies for arange(0, dim, 2) / dim.
  const int dim = static_cast<int>(static_cast<double>(head_dim) * partial_rotary_factor);
  DSPARK_CHECK_KIND(invalid_input, dim >= 2, "{}: rotary dim {} (head_dim {} x {}) is below 2", kOp,
                    dim, head_dim, partial_rotary_factor);
  const int half = (dim + 1) / 2;
  RopeTable table;
  table.rotary_dim = 2 * half;
  DSPARK_CHECK_KIND(invalid_input, table.rotary_dim <= head_dim,
                    "{}: rotary dim {} exceeds head_dim {}", kOp, table.rotary_dim, head_dim);
  std::vector<double> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / dim);

  double attention_factor = 1.0;
  const std::string& type = scaling.type;
  if (type == "default" || type.empty()) {
    // nothing to scale
  } else if (type == "linear") {
    DSPARK_CHECK_KIND(invalid_input, scaling.factor > 0.0, "{}: linear factor must be > 0, got {}",
                      kOp, scaling.factor);
    for (double& f : inv) f /= scaling.factor;
  } else if (type == "llama3") {
    const double factor = scaling.factor;
    const double old_len = scaling.original_max_position_embeddings > 0.0
                               ? scaling.original_max_position_embeddings
                               : static_cast<double>(max_position_embeddings);
    DSPARK_CHECK_KIND(invalid_input,
                      factor > 0.0 && scaling.low_freq_factor > 0.0 &&
                          scaling.high_freq_factor > scaling.low_freq_factor,
                      "{}: llama3 needs factor > 0 and high_freq_factor > low_freq_factor > 0",
                      kOp);
    const double low_freq_wavelen = old_len / scaling.low_freq_factor;
    const double high_freq_wavelen = old_len / scaling.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= factor;
      } else if (wavelen >= high_freq_wavelen) {  // medium: interpolate
        const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - smooth) * f / factor + smooth * f;
      }
    }
  } else if (type == "yarn") {
    const double original_max = scaling.original_max_position_embeddings > 0.0
                                    ? scaling.original_max_position_embeddings
                                    : static_cast<double>(max_position_embeddings);
    // factor unset (<= 0): HF derives it from the context extension ratio.
    const double factor =
        scaling.factor > 0.0 ? scaling.factor : max_position_embeddings / original_max;
    if (scaling.attention_factor > 0.0) {
      attention_factor = scaling.attention_factor;
    } else if (scaling.mscale != 0.0 && scaling.mscale_all_dim != 0.0) {
      attention_factor =
          yarn_get_mscale(factor, scaling.mscale) / yarn_get_mscale(factor, scaling.mscale_all_dim);
    } else {
      attention_factor = yarn_get_mscale(factor, 1.0);
    }
    const double beta_fast = scaling.beta_fast != 0.0 ? scaling.beta_fast : 32.0;
    const double beta_slow = scaling.beta_slow != 0.0 ? scaling.beta_slow : 1.0;
    double low = yarn_correction_dim(beta_fast, dim, theta, original_max);
    double high = yarn_correction_dim(beta_slow, dim, theta, original_max);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // HF: prevent a singular ramp
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
      double& f = inv[static_cast<size_t>(i)];
      f = (f / factor) * (1.0 - extrapolation) + f * extrapolation;
    }
  } else {
    DSPARK_FAIL(unsupported, "{}: RoPE scaling type '{}' is not supported", kOp, type);
  }

  table.inv_freq.resize(inv.size());
  for (size_t i = 0; i < inv.size(); ++i) table.inv_freq[i] = static_cast<float>(inv[i]);
  table.attention_scaling = static_cast<float>(attention_factor);
  return table;
}

void rope(Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          float attention_scaling) {
  constexpr const char* kOp = "rope";
  check_rank(kOp, "x", x, 3);
  check_float(kOp, "x", x);
  check_rows_contiguous(kOp, "x", x);
  check_vector(kOp, "positions", positions, DType::i32, x.size(0));
  check_vector(kOp, "inv_freq", inv_freq, DType::f32, -1);
  DSPARK_CHECK(2 * inv_freq.size(0) <= x.size(2), "{}: rotary dim 2 x {} exceeds head_dim {}", kOp,
               inv_freq.size(0), x.size(2));
  check_on_device(kOp, "x", x, ctx);
  check_on_device(kOp, "positions", positions, ctx);
  check_on_device(kOp, "inv_freq", inv_freq, ctx);
  if (x.numel() == 0 || inv_freq.size(0) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::rope(ctx, x, positions, inv_freq, attention_scaling));
  } else {
    cpu::rope(ctx, x, positions, inv_freq, attention_scaling);
  }
}

}  // namespace dspark
