#include "dspark/spec/dspark/context_projection.h"

#include "dspark/ops/norm.h"

namespace dspark {

void project_context_features(Context& ctx, const DrafterWeights& w, float rms_norm_eps,
                              const Tensor& concat, const Tensor& c_raw, const Tensor& c) {
  const int64_t d = c_raw.size(1);
  project_rows(ctx, concat, w.fc, w.fc_scale, w.fc_q, 0, d, Tensor{}, c_raw);
  rms_norm(ctx, c_raw, w.hidden_norm, c, RmsNormParams{rms_norm_eps, false});
}

void project_context_kv(Context& ctx, const DrafterLayerWeights& w, const AttentionDims& dims,
                        const Tensor& c, const Tensor& kv) {
  const int64_t qw = dims.q_width(), kvw = dims.kv_width();
  const AttentionWeights& a = w.attn;
  const Tensor b_kv = a.qkv_bias->defined() ? a.qkv_bias->slice(0, qw, qw + 2 * kvw) : Tensor{};
  project_rows(ctx, c, a.qkv, a.qkv_scale, a.qkv_q, qw, qw + 2 * kvw, b_kv, kv);
}

}  // namespace dspark
