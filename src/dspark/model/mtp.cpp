// MtpLayer (model/mtp.h): the checkpoint's first next-token prediction layer as a one-layer model
// of the target's family, read through a weight source that renames its tensors, and the input
// projection in front of it.
#include "dspark/model/mtp.h"

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"
#include "dspark/model/weight_source.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/norm.h"

namespace dspark {
namespace {

// The MTP layer's tensors under the names a one-layer model asks for: "model.layers.0.*" is the
// layer's block, "model.norm" its shared_head.norm, "lm_head" its shared_head.head and
// "model.embed_tokens" its embed_tokens (each the target's when the layer has no copy).
class MtpWeights final : public WeightSource {
 public:
  MtpWeights(const WeightSource& base, std::string prefix)
      : base_(base), prefix_(std::move(prefix)) {}
  bool contains(const std::string& name) const override { return base_.contains(map(name)); }
  Tensor get(const std::string& name) const override { return base_.get(map(name)); }
  Shape shape_of(const std::string& name) const override { return base_.shape_of(map(name)); }
  std::string origin() const override { return base_.origin(); }
  std::optional<QuantizedView> get_quantized(const std::string& name) const override {
    return base_.get_quantized(map(name));
  }
  int64_t stored_bytes(const std::string& name) const override {
    return base_.stored_bytes(map(name));
  }
  int64_t total_stored_bytes() const override { return base_.total_stored_bytes(); }

 private:
  std::string own_or(const std::string& own, const std::string& shared) const {
    return base_.contains(prefix_ + own) ? prefix_ + own : shared;
  }
  std::string map(const std::string& name) const {
    static const std::string kLayer = "model.layers.0.";
    if (name.rfind(kLayer, 0) == 0) return prefix_ + name.substr(kLayer.size());
    if (name == "model.norm.weight") return prefix_ + "shared_head.norm.weight";
    if (name == "lm_head.weight") return own_or("shared_head.head.weight", name);
    if (name == "model.embed_tokens.weight") return own_or("embed_tokens.weight", name);
    return name;
  }

  const WeightSource& base_;
  std::string prefix_;
};

}  // namespace

std::unique_ptr<MtpLayer> MtpLayer::load(const ModelConfig& t, Device device, DType dtype) {
  DSPARK_CHECK_KIND(invalid_input, !t.checkpoint_path.empty(),
                    "the target's MTP layer is read from its checkpoint (a safetensors directory "
                    "or a GGUF file); this target ({}) was not loaded from one",
                    t.architecture);
  const bool gguf = resolve_gguf_model(t.checkpoint_path).has_value();
  DSPARK_CHECK_KIND(invalid_input, t.num_nextn_predict_layers > 0,
                    "the target ({}) has no next-token prediction (MTP) layer: {} (DeepSeek-V3, "
                    "GLM-4.5 and GLM-5 checkpoints carry one)",
                    t.architecture,
                    gguf ? "its GGUF file has no nextn_predict_layers (llama.cpp's converter keeps "
                           "the layer for glm4moe, drops it for deepseek2)"
                         : "its config has no num_nextn_predict_layers");
  auto layer = std::unique_ptr<MtpLayer>(new MtpLayer());
  const std::string prefix = fmt::format("model.layers.{}.", t.num_layers);
  with_checkpoint_weights(t.checkpoint_path, [&](const WeightSource& w) {
    if (gguf) {
      DSPARK_CHECK_KIND(invalid_input, w.contains(prefix + "eh_proj.weight"),
                        "{}: nextn_predict_layers is {} but the file has no "
                        "blk.{}.nextn.eh_proj.weight",
                        t.checkpoint_path.string(), t.num_nextn_predict_layers, t.num_layers);
    } else {
      DSPARK_CHECK_KIND(invalid_input, w.contains(prefix + "eh_proj.weight"),
                        "{}: config.json has num_nextn_predict_layers {} but the checkpoint has no "
                        "{}eh_proj.weight (a checkpoint saved by transformers drops the MTP layer)",
                        t.checkpoint_path.string(), t.num_nextn_predict_layers, prefix);
    }
    ModelConfig c = t;
    c.num_layers = 1;
    c.num_nextn_predict_layers = 0;
    c.layer_window.assign(1, 0);
    if (!c.layer_moe.empty()) c.layer_moe.assign(1, w.contains(prefix + "mlp.gate.weight"));
    // DSA (GLM-5): the layer runs alone, so it selects its keys with its own indexer (a missing
    // self_attn.indexer.* tensor is an io error of the load) over its own cache's index keys.
    if (c.dsa()) c.index_shared.assign(1, false);
    c.tie_word_embeddings =
        t.tie_word_embeddings && !w.contains(prefix + "shared_head.head.weight");
    const MtpWeights renamed(w, prefix);
    layer->block_ = create_model(c, renamed, device, dtype);
    const WeightLoader loader(w, device, dtype);
    const int64_t h = c.hidden_size;
    layer->enorm_ = loader.load(prefix + "enorm.weight", Shape{h}, DType::f32);
    layer->hnorm_ = loader.load(prefix + "hnorm.weight", Shape{h}, DType::f32);
    loader.load_matrix({{prefix + "eh_proj.weight", Shape{h, 2 * h}}}, layer->eh_proj_,
                       layer->eh_proj_q_);
  });
  layer->eps_ = static_cast<float>(t.rms_norm_eps);
  return layer;
}

ForwardOutput MtpLayer::forward(Context& ctx, PagedKvCache& kv, ForwardBatch& batch,
                                const Tensor& hidden) {
  const auto n = static_cast<int64_t>(batch.tokens.size());
  const int64_t h = hidden_size();
  DSPARK_CHECK_KIND(invalid_input, hidden.dim() == 2 && hidden.size(0) == n && hidden.size(1) == h,
                    "MTP forward: hidden is {}, expected [{}, {}]", hidden.describe(), n, h);
  const DType dt = activation_dtype();
  const Shape rows{n, h}, cat_shape{n, 2 * h};
  arena_.begin(device(), ActivationArena::bytes_for(dt, rows) +
                             ActivationArena::bytes_for(dt, cat_shape) +
                             ActivationArena::bytes_for(DType::f32, rows));
  const Tensor embed = arena_.take(dt, rows);
  const Tensor cat = arena_.take(dt, cat_shape);
  const Tensor x = arena_.take(DType::f32, rows);
  ids_.clear();
  const int slot = ids_.add(batch.tokens);
  ids_.upload(ctx);
  gather_rows(ctx, block_->embedding_table(), ids_.view(slot), embed);
  const RmsNormParams norm{eps_, false};
  rms_norm(ctx, embed, enorm_, cat.slice(1, 0, h), norm);
  rms_norm(ctx, hidden, hnorm_, cat.slice(1, h, 2 * h), norm);
  project_rows(ctx, cat, eh_proj_.view(), Tensor{}, eh_proj_q_, 0, h, Tensor{}, x);
  batch.input_embeddings = x;
  batch.want_final_hidden = true;
  return block_->forward(ctx, kv, batch);
}

}  // namespace dspark
