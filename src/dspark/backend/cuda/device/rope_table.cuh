// The cos/sin table of one token's position, as every CUDA kernel that applies RoPE fills it
// (rope.cu, qkv_prologue.cu, mla_prologue.cu): precise sincosf (as the CPU's std::cos / std::sin
// in f32), times the attention scaling, so their rotations agree bit for bit.
#pragma once

namespace dspark::cuda::device {

// s_cos[j], s_sin[j] for j < half, the CTA's threads striding over j. The caller synchronises
// before reading the table.
__device__ __forceinline__ void fill_rope_table(float pos, const float* inv_freq, int half,
                                                float attention_scaling, float* s_cos,
                                                float* s_sin) {
  for (int j = static_cast<int>(threadIdx.x); j < half; j += static_cast<int>(blockDim.x)) {
    float s, c;
    sincosf(pos * inv_freq[j], &s, &c);
    s_cos[j] = c * attention_scaling;
    s_sin[j] = s * attention_scaling;
  }
}

}  // namespace dspark::cuda::device
