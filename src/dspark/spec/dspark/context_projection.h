// The drafter's context projection (docs/dspark-drafter.md), shared by the DSpark source's commit
// and the check `dspark quantize` runs on a written drafter: rows of concatenated target taps
// become context features, then each layer's K/V, with the weights in any form they load in
// (dense, FP8, block-quantized).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/spec/dspark/drafter_weights.h"

namespace dspark {

// c_raw [n, d] f32 = fc(concat [n, m * H]); c [n, d] (any float dtype) = hidden_norm(c_raw).
void project_context_features(Context& ctx, const DrafterWeights& w, float rms_norm_eps,
                              const Tensor& concat, const Tensor& c_raw, const Tensor& c);

// kv [n, 2 * kv_width] = the k/v rows of the layer's fused q/k/v weight (and bias) applied to
// c [n, d], before k_norm and RoPE.
void project_context_kv(Context& ctx, const DrafterLayerWeights& w, const AttentionDims& dims,
                        const Tensor& c, const Tensor& kv);

}  // namespace dspark
