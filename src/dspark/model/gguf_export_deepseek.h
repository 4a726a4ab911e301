// The DeepSeek-family parts of `dspark quantize`'s GGUF output (model/gguf_export.h):
// DeepseekV3ForCausalLM as llama.cpp's `deepseek2` (MLA), Glm4MoeForCausalLM as `glm4moe` and
// GlmMoeDsaForCausalLM (GLM-5) as `glm-dsa`,
// laid out as llama.cpp's convert_hf_to_gguf.py lays them out (tools/gguf/make_fixtures.py
// --deepseek-moe is our independent reference of that layout):
//   - DeepSeek MoE keys: expert_gating_func 2 (sigmoid), expert groups, shared experts
//     (`ffn_*_shexp`), expert_weights_scale / _norm, leading_dense_block_count; the router's score
//     correction as `blk.N.exp_probs_b.bias`;
//   - deepseek2: head_count_kv 1, key_length / value_length of the absorbed form (kv_lora_rank +
//     rope, kv_lora_rank), the per-head sizes as key_length_mla / value_length_mla, q_lora_rank,
//     kv_lora_rank, YaRN's mscale_all_dim as yarn_log_multiplier = 0.1 mscale_all_dim, and
//     kv_b_proj split per head into attn_k_b ([heads, kv_lora_rank, nope]: the key rows
//     transposed) and attn_v_b ([heads, v, kv_lora_rank]);
//   - glm4moe: partial rotary as rope.dimension_count, post_attention_layernorm as
//     `post_attention_norm`;
//   - glm-dsa: deepseek2's MLA plus the DSA indexer: attention.indexer.{head_count,key_length,
//     top_k}, attention.indexer.types (per decoder layer, true: its own indexer), each full
//     layer's `blk.N.indexer.{attn_q_b,attn_k,proj,k_norm}` tensors;
//   - next-token (MTP) layers: block_count counts them and nextn_predict_layers names them (for
//     deepseek2 only when the checkpoint holds their tensors, as the converter does).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dspark/io/gguf.h"
#include "dspark/model/config.h"

namespace dspark {

// "deepseek2" for DeepseekV3ForCausalLM, "glm4moe" for Glm4MoeForCausalLM, "glm-dsa" for
// GlmMoeDsaForCausalLM, "" for others.
std::string deepseek_gguf_architecture(const ModelConfig& c);

// Throws ErrorKind::unsupported (naming what, with `where`) for what such a file cannot hold:
// MLA where the file has none or none where it has it, rotated pairs of the other kind, GLM-5
// without its indexer or q LoRA, YaRN with an mscale other than 1 (or 0 without mscale_all_dim:
// the file is read back with mscale 1) or an attention_factor, MoE layers other than all after a
// run of leading dense ones, softmax routing.
void check_deepseek_gguf(const ModelConfig& c, const std::string& arch, const std::string& where);

// The next-token layers the file declares: the config's count, for deepseek2 only when the
// checkpoint holds their tensors (`has_mtp_tensors`).
int deepseek_gguf_nextn(const ModelConfig& c, const std::string& arch, bool has_mtp_tensors);

// The architecture's attention, rope and MoE keys (`arch`.*), appended to `m`.
void add_deepseek_gguf_metadata(const ModelConfig& c, const std::string& arch, int nextn,
                                std::vector<std::pair<std::string, GgufValue>>& m);

// The GGUF name of `hf` where the family names it otherwise than gguf_name_of: glm4moe's
// `post_attention_norm`, the score correction `exp_probs_b.bias`; nullopt for the others.
std::optional<std::string> deepseek_gguf_name(const std::string& arch, const std::string& hf);

}  // namespace dspark
