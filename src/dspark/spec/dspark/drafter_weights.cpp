#include "dspark/spec/dspark/drafter_weights.h"

#include <string>

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/io/mlx_quant.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/mlx_weights.h"
#include "dspark/model/weight_source.h"

namespace dspark {
namespace {

// "" or "model." : the prefix under which the checkpoint stores the drafter.
std::string root_prefix(const WeightSource& w) {
  if (w.contains("fc.weight")) return "";
  if (w.contains("model.fc.weight")) return "model.";
  DSPARK_FAIL(io, "{}: no 'fc.weight' tensor: not a DFlash/DSpark drafter checkpoint", w.origin());
}

// The name of a head tensor, accepting SpecForge's early "logit_head." nesting.
std::string head_name(const WeightSource& w, const std::string& root, const std::string& name) {
  if (w.contains(root + name)) return root + name;
  if (w.contains(root + "logit_head." + name)) return root + "logit_head." + name;
  return root + name;  // missing: the loader reports it under its canonical name
}

}  // namespace

DrafterCheckpoint DrafterCheckpoint::open(const std::filesystem::path& dir) {
  DrafterCheckpoint c;
  c.st_ = std::make_unique<SafeTensors>(SafeTensors::open(dir));
  if (std::optional<MlxQuantization> q = read_mlx_quantization(dir / "config.json")) {
    c.source_ = std::make_unique<MlxWeights>(*c.st_, std::move(*q));
  } else {
    c.source_ = std::make_unique<SafeTensorsWeights>(*c.st_);
  }
  return c;
}

DrafterCheckpoint::DrafterCheckpoint(DrafterCheckpoint&&) noexcept = default;
DrafterCheckpoint::~DrafterCheckpoint() = default;

DrafterCheckpointInfo inspect_drafter_checkpoint(const WeightSource& w) {
  const std::string root = root_prefix(w);
  DrafterCheckpointInfo info;
  info.has_embedding = w.contains(root + "embed_tokens.weight");
  info.has_lm_head = w.contains(root + "lm_head.weight");
  const Shape fc = w.shape_of(root + "fc.weight");
  DSPARK_CHECK_KIND(io, fc.size() == 2, "{}: fc.weight must be a matrix, got {}", w.origin(),
                    fc.str());
  info.fc_in_features = fc[1];
  return info;
}

DrafterWeights load_drafter_weights(const WeightSource& source, const DrafterConfig& config,
                                    int target_hidden, Device device, DType dtype) {
  const std::string root = root_prefix(source);
  const ModelConfig& c = config.backbone;
  const int64_t d = c.hidden_size, inter = c.intermediate_size, hd = c.head_dim;
  const int64_t qw = static_cast<int64_t>(c.num_heads) * hd;
  const int64_t kvw = static_cast<int64_t>(c.num_kv_heads) * hd;
  const int64_t vocab = c.vocab_size, r = config.markov_rank;
  const int64_t m = static_cast<int64_t>(config.target_layer_ids.size());

  WeightLoader w(source, device, dtype);
  DrafterWeights out;
  w.load_matrix({{root + "fc.weight", Shape{d, m * target_hidden}}}, out.fc, out.fc_q);
  out.hidden_norm = w.load(root + "hidden_norm.weight", Shape{d}, DType::f32);
  out.norm = w.load(root + "norm.weight", Shape{d}, DType::f32);
  if (w.contains(root + "embed_tokens.weight"))
    out.embed = TableWeight::load(w, root + "embed_tokens.weight", Shape{vocab, d});
  if (w.contains(root + "lm_head.weight"))
    out.lm_head = TableWeight::load(w, root + "lm_head.weight", Shape{vocab, d});

  out.layers.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("{}layers.{}.", root, l);
    DrafterLayerWeights& lw = out.layers[static_cast<size_t>(l)];
    lw.norm_in = w.load(p + "input_layernorm.weight", Shape{d}, DType::f32);
    lw.norm_post = w.load(p + "post_attention_layernorm.weight", Shape{d}, DType::f32);
    const std::string a = p + "self_attn.";
    const std::vector<WeightLoader::Part> qkv = {{a + "q_proj.weight", Shape{qw, d}},
                                                 {a + "k_proj.weight", Shape{kvw, d}},
                                                 {a + "v_proj.weight", Shape{kvw, d}}};
    w.load_matrix(qkv, lw.attn.qkv, lw.attn.qkv_q);
    if (c.attention_bias) {
      lw.attn.qkv_bias = w.load_concat({{a + "q_proj.bias", Shape{qw}},
                                        {a + "k_proj.bias", Shape{kvw}},
                                        {a + "v_proj.bias", Shape{kvw}}},
                                       DType::f32);
      lw.attn.o_bias = w.load(a + "o_proj.bias", Shape{d}, DType::f32);
    }
    lw.attn.q_norm = w.load(a + "q_norm.weight", Shape{hd}, DType::f32);
    lw.attn.k_norm = w.load(a + "k_norm.weight", Shape{hd}, DType::f32);
    w.load_matrix({{a + "o_proj.weight", Shape{d, qw}}}, lw.attn.o, lw.attn.o_q);
    const std::string mp = p + "mlp.";
    w.load_matrix(
        {{mp + "gate_proj.weight", Shape{inter, d}}, {mp + "up_proj.weight", Shape{inter, d}}},
        lw.mlp.gate_up, lw.mlp.gate_up_q);
    w.load_matrix({{mp + "down_proj.weight", Shape{d, inter}}}, lw.mlp.down, lw.mlp.down_q);
  }

  if (config.markov_head != MarkovHeadType::none) {
    auto markov_table = [&](const char* name) {
      const std::string full = head_name(source, root, name);
      if (!device.is_cuda()) return TableWeight::load(w, full, Shape{vocab, r});
      TableWeight t;
      t.dense = w.load(full, Shape{vocab, r});
      return t;
    };
    out.markov_w1 = markov_table("markov_head.markov_w1.weight");
    out.markov_w2 = markov_table("markov_head.markov_w2.weight");
    if (config.markov_head == MarkovHeadType::gated) {
      out.markov_proj =
          w.load(head_name(source, root, "markov_head.gate_proj.weight"), Shape{r, d + r});
      out.markov_proj_bias =
          w.load(head_name(source, root, "markov_head.gate_proj.bias"), Shape{r}, DType::f32);
    } else if (config.markov_head == MarkovHeadType::rnn) {
      out.markov_proj =
          w.load(head_name(source, root, "markov_head.joint_proj.weight"), Shape{3 * r, 2 * r + d});
      out.markov_proj_bias =
          w.load(head_name(source, root, "markov_head.joint_proj.bias"), Shape{3 * r}, DType::f32);
    }
  }
  if (config.confidence_head) {
    const int64_t in = d + (config.confidence_with_markov ? r : 0);
    out.confidence_w = w.load(head_name(source, root, "confidence_head.proj.weight"), Shape{1, in});
    out.confidence_b =
        w.load(head_name(source, root, "confidence_head.proj.bias"), Shape{1}, DType::f32);
  }
  return out;
}

}  // namespace dspark
