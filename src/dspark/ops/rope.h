// Rotary position embeddings (NeoX / HF "rotate_half" layout), with the frequency tables of the
// default, linear, Llama-3 and YaRN schemes, and partial rotary (rotary_dim < head_dim).
#pragma once

#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

// The `rope_scaling` / `rope_parameters` block of an HF config, already parsed.
struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn | dynamic(not supported)
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;          // 0 = unset
  double mscale_all_dim = 0.0;  // 0 = unset
  double attention_factor = 0.0;  // 0 = unset (derived)
  bool truncate = true;          // yarn: floor/ceil the correction range (HF default true)
};

struct RopeTable {
  int rotary_dim = 0;              // number of rotated features per head (even, <= head_dim)
  std::vector<float> inv_freq;     // [rotary_dim / 2]
  float attention_scaling = 1.0f;  // multiplies cos and sin (YaRN mscale)
};

// Builds inv_freq exactly as Hugging Face computes it (float64 on host, then cast to f32).
RopeTable make_rope_table(int head_dim, double theta, double partial_rotary_factor,
                          const RopeScaling& scaling, int max_position_embeddings);

// In place on x [n, heads, head_dim] (head_dim contiguous; any float dtype): for token i at
// position positions[i] and j < rotary_dim/2, angle = positions[i] * inv_freq[j] (f32),
//   x1' = x1*cos - x2*sin,  x2' = x2*cos + x1*sin   with x1 = x[..., j], x2 = x[..., j + rotary_dim/2]
// times attention_scaling on cos and sin; features >= rotary_dim are unchanged.
//   positions: i32 [n]; inv_freq: f32 [rotary_dim / 2] on the context's device.
void rope(Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          float attention_scaling);

}  // namespace dspark
