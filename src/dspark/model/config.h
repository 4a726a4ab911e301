// The model hyper-parameters dspark needs, parsed from a Hugging Face config.json (and, later,
// GGUF metadata), plus generation_config.json.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/core/dtype.h"
#include "dspark/ops/rope.h"

namespace dspark {

struct ModelConfig {
  std::string architecture;  // the first of `architectures`, e.g. "Qwen3ForCausalLM"
  // "llama", "qwen2", "qwen3", "mistral", "qwen3_moe", "deepseek_v3", "glm4_moe", "glm_moe_dsa"
  std::string model_type;
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // `head_dim` when given, else hidden_size / num_heads; MLA: qk_rope_head_dim
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  RopeScaling rope_scaling;
  int max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2: always true)
  bool qk_norm = false;  // per-head RMSNorm of q and k before RoPE (Qwen3; GLM-4.5: use_qk_norm)
  // Sliding-window attention: window per layer (0 = full attention). Mistral: every layer when
  // `sliding_window` is set; Qwen2: layers >= max_window_layers when use_sliding_window;
  // `layer_types` ("sliding_attention" / "full_attention") wins when present.
  std::vector<int> layer_window;
  // Mixture of experts (Qwen3-MoE; num_experts 0: dense everywhere). Layer l has a MoE FFN when
  // layer_moe[l], else the dense MLP of intermediate_size: transformers' rule, l not in
  // mlp_only_layers and (l + 1) % decoder_sparse_step == 0.
  int num_experts = 0;
  int num_experts_per_tok = 0;    // top-k
  int moe_intermediate_size = 0;  // each expert's SwiGLU width
  bool norm_topk_prob = false;    // the top-k probabilities renormalised to sum to 1
  std::vector<bool> layer_moe;    // [num_layers], empty without experts
  // DeepSeek MoE routing (DeepSeek-V3 and GLM-4.5; DeepSeek's config.json says scoring_func
  // "sigmoid", topk_method "noaux_tc"): sigmoid
  // scores; experts chosen on score + e_score_correction_bias within the topk_group of n_group
  // expert groups that score best (a group: the sum of its two best corrected scores); weights
  // are the uncorrected scores (renormalised with norm_topk_prob) times routed_scaling_factor;
  // plus a shared SwiGLU expert of n_shared_experts * moe_intermediate_size on every token.
  // Layers >= first_k_dense_replace have experts. false: Qwen3-MoE's softmax routing.
  bool moe_sigmoid_routing = false;
  int n_group = 1;
  int topk_group = 1;
  double routed_scaling_factor = 1.0;
  int n_shared_experts = 0;
  // Multi-head latent attention (DeepSeek-V3; kv_lora_rank 0: standard attention). Queries come
  // from q_b_proj(rms_norm(q_a_proj(x))) (or q_proj(x) when q_lora_rank is 0, config null); keys
  // and values from one latent per token: kv_a_proj_with_mqa(x) = [c_kv (kv_lora_rank), k_rope
  // (qk_rope_head_dim, shared by the heads)], kv_b_proj(rms_norm(c_kv)) = per head [k_nope, v].
  // head_dim is qk_rope_head_dim (the rotated part, as transformers sets it).
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  bool rope_interleave = false;  // the rotated pairs are (2i, 2i + 1), not (i, i + d / 2)
  bool mla() const { return kv_lora_rank > 0; }
  // DeepSeek sparse attention (GLM-5, GlmMoeDsaForCausalLM; index_topk 0: none). Each query of an
  // MLA layer attends only to the index_topk cached keys its layer's indexer scores highest
  // (all visible keys while there are no more than that). The indexer: index_n_heads heads of
  // index_head_dim; queries wq_b(rms_norm(q_a_proj(x))), one key per token LayerNorm(wk(x)), both
  // with their first qk_rope_head_dim features rotated (interleaved pairs); per-head weights
  // weights_proj(x); score(key j) = sum_h w_h relu(q_h . k_j) / sqrt(index_n_heads *
  // index_head_dim). index_shared[l] (indexer_types "shared"): layer l has no indexer and reuses
  // the selection of the layer before it.
  int index_topk = 0;
  int index_n_heads = 0;
  int index_head_dim = 0;
  std::vector<bool> index_shared;  // [num_layers], empty without DSA
  bool dsa() const { return index_topk > 0; }
  // Next-token prediction (MTP) layers beside the decoder (DeepSeek-V3, GLM-4.5): layer indices
  // num_layers .. num_layers + n - 1 of the checkpoint (model/mtp.h). 0: none.
  int num_nextn_predict_layers = 0;
  DType torch_dtype = DType::bf16;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  int pad_token_id = -1;
  // Where the config was read from: the checkpoint directory of config.json (load_model_config) or
  // the GGUF file (gguf_model_config); empty for a parsed JSON. Loaders of a checkpoint's other
  // parts (model/mtp.h) read it through with_checkpoint_weights.
  std::filesystem::path checkpoint_path;
};

// MLA's softmax scale: (qk_nope_head_dim + qk_rope_head_dim)^-1/2, times mscale^2 with mscale =
// 0.1 * mscale_all_dim * ln(factor) + 1 when the rope scaling gives mscale_all_dim (transformers'
// DeepseekV3Attention).
float mla_softmax_scale(const ModelConfig& config);

// Parses config.json. Throws ErrorKind::io / unsupported naming the missing or bad key.
ModelConfig parse_model_config(const nlohmann::json& json);
ModelConfig load_model_config(const std::filesystem::path& model_dir);

struct GenerationDefaults {
  std::vector<int> eos_token_ids;  // merged with the model config's
  float temperature = -1.0f;       // -1 = unset
  float top_p = -1.0f;
  int top_k = -1;
  float min_p = -1.0f;
  bool do_sample = false;
};
// generation_config.json when present, else defaults (never throws for a missing file).
GenerationDefaults load_generation_defaults(const std::filesystem::path& model_dir);

}  // namespace dspark
