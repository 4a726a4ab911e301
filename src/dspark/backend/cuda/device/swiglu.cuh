// SwiGLU's value in f32: silu(gate) * up, in the one order of operations every kernel that computes
// it uses (the swiglu op, and the products that fuse it before or after them), so that their
// outputs have the same bits.
#pragma once

namespace dspark::cuda::device {

__device__ __forceinline__ float swiglu_value(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

}  // namespace dspark::cuda::device
