#include "dspark/spec/dspark/quantize_drafter.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/spec/dspark/context_projection.h"
#include "dspark/spec/dspark/drafter_config.h"
#include "dspark/spec/dspark/drafter_weights.h"

namespace dspark {
namespace {

// The RMS of a CPU f32 tensor; throws when a value is not finite.
double checked_rms(const Tensor& t, const char* what, const std::filesystem::path& dir) {
  const auto* v = static_cast<const float*>(t.data());
  double ss = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    DSPARK_CHECK_KIND(io, std::isfinite(v[i]),
                      "{}: the reloaded drafter's {} are not finite (value {} is {})", dir.string(),
                      what, i, v[i]);
    ss += static_cast<double>(v[i]) * v[i];
  }
  return std::sqrt(ss / static_cast<double>(t.numel()));
}

}  // namespace

bool drafter_keeps_float(std::string_view module) {
  return module.starts_with("confidence_head.") ||
         module.find(".confidence_head.") != std::string_view::npos;
}

QuantizeSummary quantize_drafter(QuantizeOptions options,
                                 const std::function<void(const QuantizeProgress&)>& progress) {
  const MlxQuantSpec s = options.spec;
  DSPARK_CHECK_KIND(unsupported,
                    (s.bits == 4 || s.bits == 8) && (s.group_size == 32 || s.group_size == 64),
                    "dspark quantize: a DFlash/DSpark drafter takes bits 4 or 8 with group size "
                    "32 or 64, not bits {} with group size {}",
                    s.bits, s.group_size);
  options.keep_float = drafter_keeps_float;
  return quantize_checkpoint(options, progress);
}

DrafterSmokeTest drafter_smoke_test(const std::filesystem::path& dir) {
  const DrafterConfig config = load_drafter_config(dir);
  const DrafterCheckpoint checkpoint = DrafterCheckpoint::open(dir);
  const DrafterCheckpointInfo info = inspect_drafter_checkpoint(checkpoint.weights());
  const auto m = static_cast<int64_t>(config.target_layer_ids.size());
  DSPARK_CHECK_KIND(io, m > 0 && info.fc_in_features % m == 0,
                    "{}: fc.weight takes {} features, not a multiple of the {} taps", dir.string(),
                    info.fc_in_features, m);
  const auto hidden = static_cast<int>(info.fc_in_features / m);
  const DrafterWeights w =
      load_drafter_weights(checkpoint.weights(), config, hidden, Device::cpu(), DType::f32);
  const ModelConfig& c = config.backbone;
  const AttentionDims dims{c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                           static_cast<float>(c.rms_norm_eps)};

  // A fixed row of taps of a typical hidden state's scale.
  std::vector<float> row(static_cast<size_t>(info.fc_in_features));
  for (size_t i = 0; i < row.size(); ++i) row[i] = std::sin(0.37f * static_cast<float>(i));
  Context ctx(Device::cpu());
  const OwnedTensor concat =
      OwnedTensor::from_vector(row, Shape{1, info.fc_in_features}, Device::cpu());
  const OwnedTensor c_raw(DType::f32, Shape{1, c.hidden_size}, Device::cpu());
  const OwnedTensor feats(DType::f32, Shape{1, c.hidden_size}, Device::cpu());
  const OwnedTensor kv(DType::f32, Shape{1, 2 * dims.kv_width()}, Device::cpu());
  project_context_features(ctx, w, dims.rms_norm_eps, concat, c_raw, feats);

  DrafterSmokeTest out;
  out.layers = c.num_layers;
  out.features = info.fc_in_features;
  out.features_rms = checked_rms(feats, "context features", dir);
  double kv_ss = 0;
  for (const DrafterLayerWeights& l : w.layers) {
    project_context_kv(ctx, l, dims, feats, kv);
    const double r = checked_rms(kv, "context K/V", dir);
    kv_ss += r * r;
    out.matrices_as_blocks += l.attn.qkv_q.defined() + l.attn.o_q.defined() +
                              l.mlp.gate_up_q.defined() + l.mlp.down_q.defined();
  }
  out.kv_rms = std::sqrt(kv_ss / static_cast<double>(std::max(1, c.num_layers)));
  out.matrices_as_blocks += w.fc_q.defined() + w.embed.quantized.defined() +
                            w.lm_head.quantized.defined() + w.markov_w1.quantized.defined() +
                            w.markov_w2.quantized.defined();
  return out;
}

}  // namespace dspark
