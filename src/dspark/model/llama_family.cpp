// Llama / Qwen2 / Qwen3 / Mistral / Qwen3-MoE / DeepSeek-V3 / GLM-4.5 / GLM-5: pre-norm decoder
// layers (RMSNorm -> GQA attention with RoPE, or DeepSeek's multi-head latent attention, sparse in
// GLM-5 (model/mla.h) -> residual -> RMSNorm -> SwiGLU MLP, or a mixture of SwiGLU experts
// (model/moe.h) -> residual), final RMSNorm, LM head (tied or not).
//
// Forward data flow (residual stream x in f32, matmul inputs in the activation dtype):
//   x = embed(tokens); xn = norm_in[0](x)
//   per layer l: o = attn(xn); x += o, xn = norm_post[l](x)      (add_rms_norm, fused with the
//                                                                o and down projections:
//                                                                ops/linear_norm.h)
//                d = mlp(xn);  x += d, xn = next_norm(x)          (next = norm_in[l+1] or final)
//   after layer l, x is tap l; after the last layer, xn is the final hidden state.
//   logits = lm_head(gather(xn, logit_indices)).
#include "dspark/model/llama_family.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "dspark/backend/graph_cache.h"
#include "dspark/backend/pinned_memory.h"
#include "dspark/core/elapsed.h"
#include "dspark/model/layers.h"
#include "dspark/model/mla.h"
#include "dspark/model/moe.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/rope.h"
#include "dspark/ops/softmax.h"

namespace dspark {
namespace {

constexpr const char* kRopeFreqsName = "rope_freqs.weight";

struct FamilyTraits {
  bool qkv_bias_always = false;  // Qwen2: q/k/v biases regardless of config.attention_bias
  bool o_bias_with_attention_bias = true;  // Llama/Qwen3: o_proj has a bias iff attention_bias
  bool qk_norm = false;                    // Qwen3
};

constexpr FamilyTraits kLlama{false, true, false};
constexpr FamilyTraits kQwen2{true, false, false};
constexpr FamilyTraits kQwen3{false, true, true};
constexpr FamilyTraits kMistral{false, false, false};
// Qwen3-MoE is Qwen3 with expert FFNs (the config's num_experts and layer_moe); DeepSeek-V3 has
// MLA instead of q/k/v projections (config.mla()) and DeepSeek MoE; GLM-4.5 is Mistral's GQA
// (q/k/v biases with attention_bias, optional q/k norms: config.qk_norm, partial rotary) with
// DeepSeek MoE; GLM-5 is DeepSeek-V3 with sparse attention (config.dsa()).
constexpr std::pair<const char*, FamilyTraits> kArchitectures[] = {
    {"LlamaForCausalLM", kLlama},     {"Qwen2ForCausalLM", kQwen2},
    {"Qwen3ForCausalLM", kQwen3},     {"MistralForCausalLM", kMistral},
    {"Qwen3MoeForCausalLM", kQwen3},  {"DeepseekV3ForCausalLM", kMistral},
    {"Glm4MoeForCausalLM", kMistral}, {"GlmMoeDsaForCausalLM", kMistral}};

LlamaFamilyTensors tensors_of(const FamilyTraits& t, const ModelConfig& c) {
  return LlamaFamilyTensors{t.qkv_bias_always || c.attention_bias,
                            t.o_bias_with_attention_bias && c.attention_bias,
                            t.qk_norm || c.qk_norm};
}

struct LayerWeights {
  OwnedTensor norm_in;    // [H] f32 (input_layernorm)
  OwnedTensor norm_post;  // [H] f32 (post_attention_layernorm)
  AttentionWeights attn;
  MlaWeights mla;  // MLA models (config.mla()) instead of attn
  MlpWeights mlp;  // a dense layer's FFN
  MoeWeights moe;  // a MoE layer's FFN (config.layer_moe)
};

bool has_moe_layer(const ModelConfig& c) {
  return std::find(c.layer_moe.begin(), c.layer_moe.end(), true) != c.layer_moe.end();
}
bool has_dense_layer(const ModelConfig& c) {
  return std::find(c.layer_moe.begin(), c.layer_moe.end(), false) != c.layer_moe.end() ||
         !has_moe_layer(c);
}

// Whether the batch wants the logits of every token, in order (verify steps and batched decode):
// the LM head then reads the final norm's output directly, without gather_rows.
bool logits_of_every_row(const ForwardBatch& b) {
  if (b.logit_indices.size() != b.tokens.size() || b.logit_indices.empty()) return false;
  for (size_t i = 0; i < b.logit_indices.size(); ++i) {
    if (b.logit_indices[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

void validate_config(const ModelConfig& c) {
  DSPARK_CHECK_KIND(io,
                    c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 &&
                        c.num_layers > 0 && c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0,
                    "config.json of {}: vocab_size, hidden_size, intermediate_size, "
                    "num_hidden_layers, num_attention_heads, num_key_value_heads and head_dim "
                    "must be positive",
                    c.architecture);
  DSPARK_CHECK_KIND(io, c.num_heads % c.num_kv_heads == 0,
                    "config.json: num_attention_heads ({}) is not a multiple of "
                    "num_key_value_heads ({})",
                    c.num_heads, c.num_kv_heads);
  DSPARK_CHECK_KIND(
      io, c.layer_window.empty() || static_cast<int>(c.layer_window.size()) == c.num_layers,
      "config: {} sliding-window entries for {} layers", c.layer_window.size(), c.num_layers);
  DSPARK_CHECK_KIND(io, c.rms_norm_eps > 0, "config.json: rms_norm_eps must be positive");
  DSPARK_CHECK_KIND(io, c.layer_moe.empty() || static_cast<int>(c.layer_moe.size()) == c.num_layers,
                    "config: {} MoE layer entries for {} layers", c.layer_moe.size(), c.num_layers);
  if (has_moe_layer(c)) {
    DSPARK_CHECK_KIND(io,
                      c.num_experts > 0 && c.moe_intermediate_size > 0 &&
                          c.num_experts_per_tok > 0 && c.num_experts_per_tok <= c.num_experts,
                      "config of {}: num_experts ({}) and moe_intermediate_size ({}) must be "
                      "positive and num_experts_per_tok ({}) in [1, num_experts]",
                      c.architecture, c.num_experts, c.moe_intermediate_size,
                      c.num_experts_per_tok);
  }
}

// Loads `a` + "{q,k,v,o}_proj.weight" (and the biases / per-head norms the flags name) of a GQA
// attention block with the dims `d`.
void load_attention(const WeightLoader& w, const std::string& a, const AttentionDims& d,
                    const LlamaFamilyTensors& t, AttentionWeights& out) {
  const int64_t h = d.hidden, qw = d.q_width(), kvw = d.kv_width();
  w.load_matrix({{a + "q_proj.weight", Shape{qw, h}},
                 {a + "k_proj.weight", Shape{kvw, h}},
                 {a + "v_proj.weight", Shape{kvw, h}}},
                out.qkv, out.qkv_q);
  if (t.qkv_bias) {
    out.qkv_bias = w.load_concat({{a + "q_proj.bias", Shape{qw}},
                                  {a + "k_proj.bias", Shape{kvw}},
                                  {a + "v_proj.bias", Shape{kvw}}},
                                 DType::f32);
  }
  if (t.qk_norm) {
    out.q_norm = w.load(a + "q_norm.weight", Shape{d.head_dim}, DType::f32);
    out.k_norm = w.load(a + "k_norm.weight", Shape{d.head_dim}, DType::f32);
  }
  w.load_matrix({{a + "o_proj.weight", Shape{h, qw}}}, out.o, out.o_q);
  if (t.o_bias) out.o_bias = w.load(a + "o_proj.bias", Shape{h}, DType::f32);
}

class LlamaFamilyModel final : public Model {
 public:
  LlamaFamilyModel(const ModelConfig& config, const FamilyTraits& traits,
                   const WeightSource& weights, Device device, DType dtype);

  const ModelConfig& config() const override { return config_; }
  Device device() const override { return device_; }
  DType activation_dtype() const override { return dtype_; }
  KvCacheShape kv_shape(int page_size, int num_pages) const override {
    if (config_.mla()) {  // one latent row per token, serving as key and value (model/mla.h)
      return KvCacheShape{config_.num_layers, 1, mla_.row(), dtype_, page_size, num_pages, true};
    }
    return KvCacheShape{
        config_.num_layers, config_.num_kv_heads, config_.head_dim, dtype_, page_size, num_pages};
  }
  ForwardOutput forward(Context& ctx, PagedKvCache& kv, const ForwardBatch& batch) override;
  WeightMatrix embedding_table() const override { return embed_.matrix(); }
  WeightMatrix lm_head() const override {
    return lm_head_.defined() ? lm_head_.matrix() : embed_.matrix();
  }
  Tensor final_norm() const override { return final_norm_; }

  void set_cuda_graphs(bool enabled) override { graphs_enabled_ = enabled; }
  bool cuda_graphs() const override { return graphs_enabled_; }
  ForwardStats forward_stats() const override { return stats_; }
  void reset_forward_stats() override { stats_ = ForwardStats{}; }
  int64_t routed_expert_bytes() const override {
    int64_t bytes = 0;
    for (const LayerWeights& lw : layers_)
      if (lw.moe.defined()) bytes += lw.moe.expert_bytes();
    return bytes;
  }

 private:
  struct Activations {
    Tensor x, xn, proj, gate_up, mlp, logit_rows, logits;
    Tensor argmax;  // i32 [m]: ForwardBatch::want_argmax
    AttentionScratch attn;
    MlaScratch mla;  // MLA models only (instead of attn)
    MoeScratch moe;  // MoE layers only
    std::vector<Tensor> taps;
  };
  // Host side of one forward: positions continue each sequence; the KV plan.
  struct HostPlan {
    std::vector<int32_t> positions;
    KvBatchPlan kv;
  };
  // Device views of one forward's inputs.
  struct ForwardViews {
    Tensor tokens;         // i32 [n]
    Tensor logit_indices;  // i32 [m]
    ForwardMeta meta;
  };
  void validate(const PagedKvCache& kv, const ForwardBatch& batch) const;
  // Visits every activation tensor of a forward with n tokens, m logit rows and n_taps taps.
  template <typename F>
  void for_each_activation(int64_t n, int64_t m, size_t n_taps, Activations& a, F&& f) const;
  void prepare_activations(int64_t n, int64_t m, size_t n_taps, ActivationArena& arena,
                           Activations& act) const;
  HostPlan plan_host(PagedKvCache& kv, const ForwardBatch& b) const;
  // Enqueues every kernel of the forward (the same sequence, eager or captured); with
  // want_argmax on CUDA, the argmax's copy into argmax_host (pinned, m values).
  void enqueue(Context& ctx, PagedKvCache& kv, const ForwardBatch& b, const ForwardViews& v,
               const Activations& a, int32_t* argmax_host) const;
  ForwardOutput output(const ForwardBatch& b, const Activations& a,
                       const int32_t* argmax_host) const;
  // The pinned host memory of an eager forward's argmax copy (CUDA; grown after a sync).
  int32_t* eager_argmax_host(Context& ctx, int64_t m);
  ForwardOutput forward_eager(Context& ctx, PagedKvCache& kv, const ForwardBatch& b,
                              const HostPlan& h);

  // ---- CUDA graphs (backend/graph_cache.h) ----
  // A bucket: one forward shape on one KV cache (and context: the cache adds it to the key). It
  // owns the device buffers its graphs read (metadata at fixed offsets, activations), so replays
  // never depend on buffers that eager forwards may reallocate. One graph per
  // attention_graph_variant (replays stay bitwise equal to eager forwards).
  struct GraphKey {
    int64_t n_tokens = 0, n_rows = 0, n_logits = 0;
    bool logits_of_every_row = false;  // logits_of_every_row(batch): no gather before the LM head
    bool want_argmax = false;
    std::vector<int> taps;
    const void* k_pool = nullptr;
    const void* v_pool = nullptr;
    int num_pages = 0, page_size = 0;
    auto tie() const {
      return std::tie(n_tokens, n_rows, n_logits, logits_of_every_row, want_argmax, taps, k_pool,
                      v_pool, num_pages, page_size);
    }
    bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
  };
  struct GraphBucket {
    DeviceIndices meta;  // slots: tokens, positions, slots, q_indptr, page_indptr, kv_lens,
                         // logit indices, page indices (capacity grows; graphs then recaptured)
    ActivationArena arena;
    Activations act;
    PinnedBuffer argmax_host;  // want_argmax: the argmax's copy (m values)
    size_t bytes() const { return arena.capacity(); }
  };
  using GraphBuckets = GraphCache<GraphKey, GraphBucket>;
  static constexpr int64_t kGraphMaxTokens = ForwardStats::kStepTokens;  // larger: eager
  // More than the verify shapes a request cycles through (gamma + 1 <= 65) and the decode and
  // prefill-chunk shapes beside them; kGraphBucketsMaxBytes bounds their memory.
  static constexpr size_t kGraphMaxBuckets = 96;
  bool graph_eligible(const Context& ctx, const ForwardBatch& b) const;
  GraphBuckets::Entry& graph_bucket(Context& ctx, PagedKvCache& kv, const ForwardBatch& b);
  ForwardOutput forward_graphed(Context& ctx, PagedKvCache& kv, const ForwardBatch& b,
                                const HostPlan& h);

  ModelConfig config_;
  FamilyTraits traits_;
  Device device_;
  DType dtype_;
  AttentionDims dims_;
  MlaDims mla_;             // MLA models
  TableWeight embed_;       // [V, H]
  TableWeight lm_head_;     // [V, H], empty when tied
  OwnedTensor final_norm_;  // [H] f32
  std::vector<LayerWeights> layers_;
  RopeOnDevice rope_;
  bool has_moe_ = false;

  PackedIndices meta_;
  ActivationArena arena_;
  Activations act_;
  PinnedBuffer eager_argmax_host_;

  bool graphs_enabled_ = graphs_enabled_by_env();
  struct ReplayTimes {  // the last forward_graphed, when it replayed a graph
    bool replayed = false;
    double stage_ms = 0, launch_ms = 0;
  };
  ReplayTimes last_replay_;
  GraphBuckets graph_buckets_{"", kGraphMaxBuckets};
  ForwardStats stats_;
};

LlamaFamilyModel::LlamaFamilyModel(const ModelConfig& config, const FamilyTraits& traits,
                                   const WeightSource& weights, Device device, DType dtype)
    : config_(config), traits_(traits), device_(device), dtype_(dtype) {
  validate_config(config_);
  DSPARK_CHECK_KIND(unsupported, dtype_is_float(dtype), "engine dtype {} is not a float type",
                    dtype_name(dtype));
  if (config_.layer_window.empty()) config_.layer_window.assign(config_.num_layers, 0);
  const ModelConfig& c = config_;
  dims_ = AttentionDims{c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                        static_cast<float>(c.rms_norm_eps)};
  mla_ = mla_dims(c);
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const LlamaFamilyTensors tensors = tensors_of(traits, c);
  has_moe_ = has_moe_layer(c);

  WeightLoader w(weights, device, dtype);
  embed_ = TableWeight::load(w, "model.embed_tokens.weight", Shape{c.vocab_size, h});
  final_norm_ = w.load("model.norm.weight", Shape{h}, DType::f32);
  if (!c.tie_word_embeddings)
    lm_head_ = TableWeight::load(w, "lm_head.weight", Shape{c.vocab_size, h});

  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    LayerWeights& lw = layers_[static_cast<size_t>(l)];
    lw.norm_in = w.load(p + "input_layernorm.weight", Shape{h}, DType::f32);
    lw.norm_post = w.load(p + "post_attention_layernorm.weight", Shape{h}, DType::f32);
    const std::string a = p + "self_attn.";
    if (c.mla()) {
      lw.mla = load_mla_weights(weights, a, c, l, device, dtype);
    } else {
      load_attention(w, a, dims_, tensors, lw.attn);
    }
    const std::string m = p + "mlp.";
    if (has_moe_ && c.layer_moe[static_cast<size_t>(l)]) {
      lw.moe = load_moe_weights(w, m, c);
      continue;
    }
    load_mlp_weights(w, m, h, inter, lw.mlp);
  }

  const RopeTable table = llama_family_rope_table(c, w);
  rope_.inv_freq = OwnedTensor::from_vector(
      table.inv_freq, Shape{static_cast<int64_t>(table.inv_freq.size())}, device);
  rope_.attention_scaling = table.attention_scaling;
}

void LlamaFamilyModel::validate(const PagedKvCache& kv, const ForwardBatch& b) const {
  const KvCacheShape& s = kv.shape();
  const KvCacheShape want = kv_shape(s.page_size, s.num_pages);
  DSPARK_CHECK_KIND(invalid_input,
                    s.num_layers == want.num_layers && s.num_kv_heads == want.num_kv_heads &&
                        s.head_dim == want.head_dim && s.shared_kv == want.shared_kv &&
                        s.dtype == dtype_ && kv.device() == device_,
                    "KV cache ({} layers, {} kv heads, head_dim {}{}, {}, {}) does not fit the "
                    "model ({} layers, {} kv heads, head_dim {}{}, {}, {})",
                    s.num_layers, s.num_kv_heads, s.head_dim, s.shared_kv ? ", shared K/V" : "",
                    dtype_name(s.dtype), kv.device().name(), want.num_layers, want.num_kv_heads,
                    want.head_dim, want.shared_kv ? ", shared K/V" : "", dtype_name(dtype_),
                    device_.name());
  const size_t n_rows = b.seqs.size();
  DSPARK_CHECK_KIND(invalid_input, !b.tokens.empty(), "forward: empty batch");
  DSPARK_CHECK_KIND(invalid_input, b.row_indptr.size() == n_rows + 1,
                    "forward: row_indptr has {} entries for {} rows", b.row_indptr.size(), n_rows);
  DSPARK_CHECK_KIND(invalid_input, b.row_indptr.front() == 0,
                    "forward: row_indptr must start at 0");
  for (size_t r = 0; r < n_rows; ++r) {
    DSPARK_CHECK_KIND(invalid_input, b.row_indptr[r] <= b.row_indptr[r + 1],
                      "forward: row_indptr decreases at row {}", r);
  }
  DSPARK_CHECK_KIND(invalid_input, b.row_indptr.back() == static_cast<int32_t>(b.tokens.size()),
                    "forward: row_indptr ends at {} but there are {} tokens", b.row_indptr.back(),
                    b.tokens.size());
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    DSPARK_CHECK_KIND(invalid_input, b.tokens[i] >= 0 && b.tokens[i] < config_.vocab_size,
                      "forward: token {} at index {} is outside the vocabulary [0, {})",
                      b.tokens[i], i, config_.vocab_size);
  }
  for (int32_t idx : b.logit_indices) {
    DSPARK_CHECK_KIND(invalid_input, idx >= 0 && idx < static_cast<int32_t>(b.tokens.size()),
                      "forward: logit index {} outside [0, {})", idx, b.tokens.size());
  }
  for (int layer : b.tap_layers) {
    DSPARK_CHECK_KIND(invalid_input, layer >= kTapEmbedding && layer < config_.num_layers,
                      "forward: tap layer {} outside [-1, {})", layer, config_.num_layers);
  }
  if (b.input_embeddings.defined()) {
    const Tensor& e = b.input_embeddings;
    DSPARK_CHECK_KIND(invalid_input,
                      e.dim() == 2 && e.size(0) == static_cast<int64_t>(b.tokens.size()) &&
                          e.size(1) == config_.hidden_size && e.device() == device_ &&
                          dtype_is_float(e.dtype()),
                      "forward: input_embeddings must be a float [{}, {}] tensor on {}",
                      b.tokens.size(), config_.hidden_size, device_.name());
  }
  for (SeqId seq : b.seqs) (void)kv.length(seq);  // throws invalid_input for unknown sequences
}

template <typename F>
void LlamaFamilyModel::for_each_activation(int64_t n, int64_t m, size_t n_taps, Activations& a,
                                           F&& f) const {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  f(a.x, DType::f32, Shape{n, h});
  f(a.xn, dtype_, Shape{n, h});
  if (config_.mla()) {
    const int64_t heads = mla_.n_heads, lat = mla_.latent();
    f(a.mla.in, dtype_, Shape{n, mla_.in_width()});
    f(a.mla.q_a, dtype_, Shape{n, int64_t{mla_.q_lora_rank}});
    f(a.mla.q, dtype_, Shape{mla_.q_lora_rank > 0 ? n : 0, heads * mla_.qk()});
    f(a.mla.q_abs, dtype_, Shape{n, heads, lat});
    f(a.mla.latent, dtype_, Shape{n, int64_t{mla_.row()}});
    f(a.mla.attn, dtype_, Shape{n, heads, lat});
    f(a.mla.attn_v, dtype_, Shape{n, heads * mla_.v});
    const bool dsa = config_.dsa();
    f(a.mla.index_q, dtype_,
      Shape{dsa ? n : 0, int64_t{mla_.index_heads}, int64_t{mla_.index_dim}});
    f(a.mla.ids, DType::i32, Shape{dsa ? n : 0, std::max<int64_t>(mla_.index_topk, 1)});
  } else {
    f(a.attn.qkv, dtype_, Shape{n, dims_.qkv_width()});
    f(a.attn.q_tmp, dtype_, Shape{n, dims_.q_width()});  // qkv_prologue's q out and k scratch
    f(a.attn.k_tmp, dtype_, Shape{n, dims_.kv_width()});
    f(a.attn.attn, dtype_, Shape{n, dims_.q_width()});
  }
  f(a.proj, DType::f32, Shape{n, h});
  const int64_t dense_rows = has_dense_layer(config_) ? n : 0;
  f(a.gate_up, dtype_, Shape{dense_rows, 2 * inter});
  f(a.mlp, dtype_, Shape{dense_rows, inter});
  if (has_moe_) {
    const int64_t k = config_.num_experts_per_tok, e_inter = config_.moe_intermediate_size;
    f(a.moe.router_logits, DType::f32, Shape{n, int64_t{config_.num_experts}});
    f(a.moe.ids, DType::i32, Shape{n, k});
    f(a.moe.weights, DType::f32, Shape{n, k});
    const int64_t groups = int64_t{config_.num_experts} + 1;
    f(a.moe.groups.offsets, DType::i32, Shape{groups});
    f(a.moe.groups.active, DType::i32, Shape{groups});
    f(a.moe.groups.order, DType::i32, Shape{n * k});
    f(a.moe.groups.slots, DType::i32, Shape{n, k});
    f(a.moe.rows, dtype_, Shape{n * k, h});
    f(a.moe.gate_up, dtype_, Shape{n * k, 2 * e_inter});
    f(a.moe.act, dtype_, Shape{n * k, e_inter});
    f(a.moe.expert_out, dtype_, Shape{n * k, h});
    const int64_t shared = int64_t{config_.n_shared_experts} * e_inter,
                  shared_rows = shared > 0 ? n : 0;
    f(a.moe.shared_gate_up, dtype_, Shape{shared_rows, 2 * shared});
    f(a.moe.shared_act, dtype_, Shape{shared_rows, shared});
    f(a.moe.shared_out, DType::f32, Shape{shared_rows, h});
  }
  a.taps.resize(n_taps);
  for (Tensor& t : a.taps) f(t, dtype_, Shape{n, h});
  f(a.logit_rows, dtype_, Shape{m, h});
  f(a.logits, DType::f32, Shape{m, static_cast<int64_t>(config_.vocab_size)});
  f(a.argmax, DType::i32, Shape{m});
}

void LlamaFamilyModel::prepare_activations(int64_t n, int64_t m, size_t n_taps,
                                           ActivationArena& arena, Activations& act) const {
  size_t bytes = 0;
  for_each_activation(n, m, n_taps, act, [&](Tensor&, DType dtype, const Shape& shape) {
    bytes += ActivationArena::bytes_for(dtype, shape);
  });
  arena.begin(device_, bytes);
  for_each_activation(n, m, n_taps, act, [&](Tensor& t, DType dtype, const Shape& shape) {
    t = arena.take(dtype, shape);
  });
}

ForwardOutput LlamaFamilyModel::forward(Context& ctx, PagedKvCache& kv, const ForwardBatch& b) {
  const auto start = std::chrono::steady_clock::now();
  DSPARK_CHECK_KIND(invalid_input, ctx.device() == device_,
                    "forward: context on {} for a model on {}", ctx.device().name(),
                    device_.name());
  validate(kv, b);
  const HostPlan h = plan_host(kv, b);
  ForwardOutput out =
      graph_eligible(ctx, b) ? forward_graphed(ctx, kv, b, h) : forward_eager(ctx, kv, b, h);
  const double ms = elapsed_ms(start);
  ++stats_.forwards;
  stats_.host_ms += ms;
  if (static_cast<int64_t>(b.tokens.size()) <= ForwardStats::kStepTokens) {
    ++stats_.step_forwards;
    stats_.step_host_ms += ms;
    if (last_replay_.replayed) {
      ++stats_.step_replays;
      stats_.step_replay_host_ms += ms;
      stats_.step_stage_ms += last_replay_.stage_ms;
      stats_.step_launch_ms += last_replay_.launch_ms;
    }
  }
  last_replay_ = {};
  return out;
}

LlamaFamilyModel::HostPlan LlamaFamilyModel::plan_host(PagedKvCache& kv,
                                                       const ForwardBatch& b) const {
  // Host metadata: positions continue each sequence; the plan reserves pages (or changes nothing).
  const size_t n_rows = b.seqs.size();
  HostPlan h;
  std::vector<int> n_new(n_rows);
  h.positions.resize(b.tokens.size());
  for (size_t r = 0; r < n_rows; ++r) {
    n_new[r] = b.row_indptr[r + 1] - b.row_indptr[r];
    const int start = kv.length(b.seqs[r]);
    for (int i = 0; i < n_new[r]; ++i)
      h.positions[static_cast<size_t>(b.row_indptr[r] + i)] = start + i;
  }
  std::optional<KvBatchPlan> plan = kv.plan(b.seqs, n_new);
  DSPARK_CHECK_KIND(out_of_memory, plan.has_value(),
                    "KV cache full: {} free pages cannot hold {} new tokens", kv.free_pages(),
                    b.tokens.size());
  h.kv = std::move(*plan);
  return h;
}

ForwardOutput LlamaFamilyModel::forward_eager(Context& ctx, PagedKvCache& kv, const ForwardBatch& b,
                                              const HostPlan& h) {
  const auto n = static_cast<int64_t>(b.tokens.size());
  const auto m = static_cast<int64_t>(b.logit_indices.size());
  meta_.clear();
  const int s_tokens = meta_.add(b.tokens);
  const int s_positions = meta_.add(h.positions);
  const int s_slots = meta_.add(h.kv.slots);
  const int s_q_indptr = meta_.add(b.row_indptr);
  const int s_page_indptr = meta_.add(h.kv.page_indptr);
  const int s_page_indices = meta_.add(h.kv.page_indices);
  const int s_kv_lens = meta_.add(h.kv.kv_lens);
  const int s_logits = meta_.add(b.logit_indices);
  meta_.upload(ctx);
  const ForwardViews v{
      meta_.view(s_tokens), meta_.view(s_logits),
      ForwardMeta{meta_.view(s_positions), meta_.view(s_slots), meta_.view(s_q_indptr),
                  meta_.view(s_page_indptr), meta_.view(s_page_indices), meta_.view(s_kv_lens)}};
  prepare_activations(n, m, b.tap_layers.size(), arena_, act_);
  int32_t* argmax_host = b.want_argmax && ctx.is_cuda() ? eager_argmax_host(ctx, m) : nullptr;
  enqueue(ctx, kv, b, v, act_, argmax_host);
  return output(b, act_, argmax_host);
}

int32_t* LlamaFamilyModel::eager_argmax_host(Context& ctx, int64_t m) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(m, 1)) * sizeof(int32_t);
  if (eager_argmax_host_.bytes() < bytes) {
    ctx.synchronize();  // a queued copy may still write the old buffer
    eager_argmax_host_ = PinnedBuffer(std::max<size_t>(2 * bytes, 4096));
  }
  return static_cast<int32_t*>(eager_argmax_host_.data());
}

void LlamaFamilyModel::enqueue(Context& ctx, PagedKvCache& kv, const ForwardBatch& b,
                               const ForwardViews& v, const Activations& a,
                               int32_t* argmax_host) const {
  const auto m = static_cast<int64_t>(b.logit_indices.size());
  const ForwardMeta& meta = v.meta;
  // The first tap of a layer comes from the norm after its MLP (ResidualNorm::tap); the rest
  // (the embedding's, a layer named twice) from a convert.
  auto first_tap = [&](int layer) {
    for (size_t i = 0; i < b.tap_layers.size(); ++i)
      if (b.tap_layers[i] == layer) return static_cast<int>(i);
    return -1;
  };
  auto save_taps = [&](int layer, int done) {
    for (size_t i = 0; i < b.tap_layers.size(); ++i) {
      if (b.tap_layers[i] == layer && static_cast<int>(i) != done) convert(ctx, a.x, a.taps[i]);
    }
  };

  const RmsNormParams norm{static_cast<float>(config_.rms_norm_eps), false};
  if (b.input_embeddings.defined()) {
    convert(ctx, b.input_embeddings, a.x);
  } else {
    gather_rows(ctx, embed_.matrix(), v.tokens, a.x);
  }
  save_taps(kTapEmbedding, -1);
  rms_norm(ctx, a.x, layers_.front().norm_in, a.xn, norm);
  const float scale = config_.mla() ? mla_softmax_scale(config_)
                                    : 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  for (int l = 0; l < config_.num_layers; ++l) {
    const LayerWeights& lw = layers_[static_cast<size_t>(l)];
    const AttentionParams params{scale, true, config_.layer_window[static_cast<size_t>(l)], 0.0f};
    const ResidualNorm post{a.x, lw.norm_post, a.xn, norm, Tensor{}};
    if (config_.mla()) {
      mla_block(ctx, lw.mla, mla_, rope_, meta, kv.k_pages(l), params, a.xn, a.mla, a.proj, &post);
    } else {
      attention_block(ctx, lw.attn, dims_, rope_, meta, kv.k_pages(l), kv.v_pages(l), params, a.xn,
                      a.attn, a.proj, &post);
    }
    const bool last = l + 1 == config_.num_layers;
    const int tap = first_tap(l);
    const ResidualNorm next{
        a.x, last ? final_norm_.view() : layers_[static_cast<size_t>(l) + 1].norm_in.view(), a.xn,
        norm, tap >= 0 ? a.taps[static_cast<size_t>(tap)] : Tensor{}};
    if (lw.moe.defined()) {
      moe_block(ctx, lw.moe, a.xn, a.moe, a.proj, &next);
    } else {
      mlp_block(ctx, lw.mlp, a.xn, a.gate_up, a.mlp, a.proj, &next);
    }
    save_taps(l, tap);
  }

  if (logits_of_every_row(b)) {
    linear(ctx, a.xn, lm_head(), Tensor{}, a.logits);  // the rows in order: no gather
  } else if (m > 0) {
    gather_rows(ctx, a.xn, v.logit_indices, a.logit_rows);
    linear(ctx, a.logit_rows, lm_head(), Tensor{}, a.logits);
  }
  if (b.want_argmax && m > 0) {
    argmax(ctx, a.logits, a.argmax);
    if (argmax_host != nullptr)
      ctx.copy_async(argmax_host, a.argmax.data(), static_cast<size_t>(m) * sizeof(int32_t));
  }
}

ForwardOutput LlamaFamilyModel::output(const ForwardBatch& b, const Activations& a,
                                       const int32_t* argmax_host) const {
  ForwardOutput out;
  if (b.want_argmax)
    out.argmax = argmax_host != nullptr ? argmax_host : a.argmax.data_as<int32_t>();
  out.logits = a.logits;
  out.taps = a.taps;
  if (b.want_final_hidden) out.final_hidden = a.xn;
  return out;
}

// ---- CUDA graphs -------------------------------------------------------------------------------

bool LlamaFamilyModel::graph_eligible(const Context& ctx, const ForwardBatch& b) const {
  const auto n = static_cast<int64_t>(b.tokens.size());
  if (!graphs_enabled_ || !ctx.is_cuda() || b.input_embeddings.defined() || n > kGraphMaxTokens)
    return false;
  // A MoE layer whose experts need the grouping on the host is not capturable.
  return std::all_of(layers_.begin(), layers_.end(), [&](const LayerWeights& lw) {
    return !lw.moe.defined() || moe_on_device(ctx, lw.moe, dtype_, n);
  });
}

LlamaFamilyModel::GraphBuckets::Entry& LlamaFamilyModel::graph_bucket(Context& ctx,
                                                                      PagedKvCache& kv,
                                                                      const ForwardBatch& b) {
  GraphKey key;
  key.n_tokens = static_cast<int64_t>(b.tokens.size());
  key.n_rows = static_cast<int64_t>(b.seqs.size());
  key.n_logits = static_cast<int64_t>(b.logit_indices.size());
  key.logits_of_every_row = logits_of_every_row(b);
  key.want_argmax = b.want_argmax;
  key.taps = b.tap_layers;
  key.k_pool = kv.k_pages(0).data();
  key.v_pool = kv.v_pages(0).data();
  key.num_pages = kv.shape().num_pages;
  key.page_size = kv.shape().page_size;
  return graph_buckets_.find_or_create(ctx, key, [&](GraphBucket& bucket) {
    const int64_t n = key.n_tokens, rows = key.n_rows, m = key.n_logits;
    bucket.meta = DeviceIndices(device_, {n, n, n, rows + 1, rows + 1, rows, m,
                                          std::max<int64_t>(kv.shape().num_pages, 1)});
    prepare_activations(n, m, b.tap_layers.size(), bucket.arena, bucket.act);
    if (key.want_argmax)
      bucket.argmax_host =
          PinnedBuffer(static_cast<size_t>(std::max<int64_t>(m, 1)) * sizeof(int32_t));
  });
}

ForwardOutput LlamaFamilyModel::forward_graphed(Context& ctx, PagedKvCache& kv,
                                                const ForwardBatch& b, const HostPlan& h) {
  enum Slot { kTokens, kPositions, kSlots, kQIndptr, kPageIndptr, kKvLens, kLogits, kPages };
  GraphBuckets::Entry& entry = graph_bucket(ctx, kv, b);
  GraphBucket& g = entry.bucket;
  const auto n_pages = static_cast<int64_t>(h.kv.page_indices.size());
  if (n_pages > g.meta.capacity(kPages)) {
    // Graphs bake the metadata buffer's address: a larger one means capturing again.
    ctx.synchronize();
    g.meta.grow(kPages, 2 * n_pages);
    entry.graphs.clear();
  }
  // One copy of all metadata from pinned memory, in the order of the slots.
  const auto t_stage = std::chrono::steady_clock::now();
  g.meta.stage(ctx, {&b.tokens, &h.positions, &h.kv.slots, &b.row_indptr, &h.kv.page_indptr,
                     &h.kv.kv_lens, &b.logit_indices, &h.kv.page_indices});
  const auto t_staged = std::chrono::steady_clock::now();
  const ForwardViews v{
      g.meta.view(kTokens), g.meta.view(kLogits),
      ForwardMeta{g.meta.view(kPositions), g.meta.view(kSlots), g.meta.view(kQIndptr),
                  g.meta.view(kPageIndptr), g.meta.view(kPages), g.meta.view(kKvLens)}};
  const int variant = attention_graph_variant(
      ctx, AttentionGraphShape{static_cast<int64_t>(b.tokens.size()), config_.num_heads,
                               kv.shape().num_kv_heads, static_cast<int64_t>(b.seqs.size()),
                               n_pages, kv.shape().page_size});

  auto* argmax_host = static_cast<int32_t*>(g.argmax_host.data());  // null without want_argmax
  const GraphSet::Outcome outcome = graph_buckets_.run(
      ctx, entry, variant, {},
      GraphCounters{stats_.graph_replays, stats_.graph_captures, stats_.graph_fallbacks},
      [&] { enqueue(ctx, kv, b, v, g.act, argmax_host); },
      [&] {
        return fmt::format("{} tokens, {} rows, {} splits", b.tokens.size(), b.seqs.size(),
                           variant);
      });
  if (outcome == GraphSet::Outcome::replayed) {
    using Ms = std::chrono::duration<double, std::milli>;
    last_replay_ = {true, Ms(t_staged - t_stage).count(),
                    Ms(std::chrono::steady_clock::now() - t_staged).count()};
  }
  return output(b, g.act, argmax_host);
}

template <FamilyTraits kTraits>
std::unique_ptr<Model> create(const ModelConfig& config, const WeightSource& weights, Device device,
                              DType dtype) {
  return std::make_unique<LlamaFamilyModel>(config, kTraits, weights, device, dtype);
}

}  // namespace

std::optional<LlamaFamilyTensors> llama_family_tensors(const ModelConfig& config) {
  for (const auto& [name, traits] : kArchitectures)
    if (config.architecture == name) return tensors_of(traits, config);
  return std::nullopt;
}

RopeTable llama_family_rope_table(const ModelConfig& c, const WeightLoader& weights) {
  RopeTable table = make_rope_table(c.head_dim, c.rope_theta, c.partial_rotary_factor,
                                    c.rope_scaling, c.max_position_embeddings);
  if (weights.contains(kRopeFreqsName)) {
    const auto n = static_cast<int64_t>(table.inv_freq.size());
    const std::vector<float> factors =
        to_vector<float>(weights.load(kRopeFreqsName, Shape{n}, DType::f32).view());
    for (int64_t i = 0; i < n; ++i)
      table.inv_freq[static_cast<size_t>(i)] /= factors[static_cast<size_t>(i)];
  }
  return table;
}

std::vector<std::pair<std::string, ModelFactory>> llama_family_architectures() {
  static_assert(std::size(kArchitectures) == 8, "one factory per architecture below");
  return {{"LlamaForCausalLM", &create<kLlama>},     {"Qwen2ForCausalLM", &create<kQwen2>},
          {"Qwen3ForCausalLM", &create<kQwen3>},     {"MistralForCausalLM", &create<kMistral>},
          {"Qwen3MoeForCausalLM", &create<kQwen3>},  {"DeepseekV3ForCausalLM", &create<kMistral>},
          {"Glm4MoeForCausalLM", &create<kMistral>}, {"GlmMoeDsaForCausalLM", &create<kMistral>}};
}

}  // namespace dspark
