// parse_model_config / load_model_config / load_generation_defaults on small inline documents.
// Expected values follow transformers' config classes (defaults of LlamaConfig, Qwen2Config,
// Qwen3Config, MistralConfig; rope standardisation of modeling_rope_utils).
#include <gtest/gtest.h>

#include <cmath>

#include <unistd.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/model/config.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The keys every config needs, for `architecture`.
json base(const std::string& architecture) {
  return json{
      {"architectures", {architecture}}, {"vocab_size", 384},      {"hidden_size", 64},
      {"intermediate_size", 160},        {"num_hidden_layers", 4}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}};
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << " / " << n;
  }
}

TEST(ModelConfig, LlamaWithLegacyRopeScaling) {
  json j = base("LlamaForCausalLM");
  j.update(json::parse(R"({
    "model_type": "llama", "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "max_position_embeddings": 131072, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "pad_token_id": null,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "attention_bias": false, "mlp_bias": false, "hidden_act": "silu"})"));
  const ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 384);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.layer_window, std::vector<int>(4, 0));
  EXPECT_EQ(c.torch_dtype, DType::bf16);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c.pad_token_id, -1);
}

TEST(ModelConfig, Qwen3WithRopeParametersYarn) {
  // The transformers >= 5 layout: rope_theta nested in rope_parameters, `dtype`.
  json j = base("Qwen3ForCausalLM");
  j.update(json::parse(R"({
    "head_dim": 32, "dtype": "float32", "torch_dtype": "float16", "eos_token_id": 381,
    "max_position_embeddings": 512, "tie_word_embeddings": false,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                        "original_max_position_embeddings": 64}})"));
  const ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "qwen3");  // absent: the architecture's
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.torch_dtype, DType::f32);  // `dtype` wins over `torch_dtype`
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.0);
  EXPECT_TRUE(c.rope_scaling.truncate);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{381});
  EXPECT_EQ(c.layer_window, std::vector<int>(4, 0));

  // yarn without factor: max_position_embeddings / original_max_position_embeddings;
  // explicit beta/mscale/attention_factor/truncate are kept.
  j["rope_parameters"] = json::parse(R"({"rope_type": "yarn", "rope_theta": 10000,
      "original_max_position_embeddings": 128, "beta_fast": 16, "beta_slow": 2, "mscale": 0.7,
      "mscale_all_dim": 0.5, "attention_factor": 1.25, "truncate": false})");
  const ModelConfig y = parse_model_config(j);
  EXPECT_DOUBLE_EQ(y.rope_scaling.factor, 4.0);  // 512 / 128
  EXPECT_DOUBLE_EQ(y.rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(y.rope_scaling.beta_slow, 2.0);
  EXPECT_DOUBLE_EQ(y.rope_scaling.mscale, 0.7);
  EXPECT_DOUBLE_EQ(y.rope_scaling.mscale_all_dim, 0.5);
  EXPECT_DOUBLE_EQ(y.rope_scaling.attention_factor, 1.25);
  EXPECT_FALSE(y.rope_scaling.truncate);

  // Qwen3 without head_dim: transformers' Qwen3Config default (128), not hidden / heads.
  j.erase("head_dim");
  EXPECT_EQ(parse_model_config(j).head_dim, 128);
}

TEST(ModelConfig, RopeVariants) {
  json j = base("LlamaForCausalLM");
  // Legacy "type" key, linear scaling, top-level rope_theta.
  j["rope_theta"] = 20000.0;
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 20000.0);
  // rope_scaling null / absent / empty: default rope, theta default 10000.
  j.erase("rope_theta");
  j["rope_scaling"] = nullptr;
  c = parse_model_config(j);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  j["rope_scaling"] = json::object();
  EXPECT_EQ(parse_model_config(j).rope_scaling.type, "default");
  // partial_rotary_factor at the top level and nested (nested wins, as in transformers).
  j["partial_rotary_factor"] = 0.5;
  EXPECT_DOUBLE_EQ(parse_model_config(j).partial_rotary_factor, 0.5);
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.25}};
  EXPECT_DOUBLE_EQ(parse_model_config(j).partial_rotary_factor, 0.25);
  // A non-empty rope_scaling wins over rope_parameters.
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 3.0}};
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_scaling.factor, 3.0);
  j.erase("rope_scaling");
  j.erase("partial_rotary_factor");
  // Per-layer-type nesting with identical entries is accepted.
  j["rope_parameters"] =
      json::parse(R"({"full_attention": {"rope_type": "default", "rope_theta": 5e5},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 5e5}})");
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_theta, 5e5);
  j["rope_parameters"]["sliding_attention"]["rope_theta"] = 1e4;
  expect_error([&] { parse_model_config(j); }, ErrorKind::unsupported, {"per layer type"});
  // llama3 without original_max_position_embeddings: max_position_embeddings (transformers).
  j["max_position_embeddings"] = 1024;
  j["rope_parameters"] = json::parse(R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                                         "high_freq_factor": 4})");
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_scaling.original_max_position_embeddings, 1024);
  // ... and a top-level original_max_position_embeddings wins (Phi-3 style).
  j["original_max_position_embeddings"] = 256;
  EXPECT_DOUBLE_EQ(parse_model_config(j).rope_scaling.original_max_position_embeddings, 256);
  j["rope_parameters"].erase("high_freq_factor");
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"'high_freq_factor'"});
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  expect_error([&] { parse_model_config(j); }, ErrorKind::unsupported, {"'dynamic'"});
  j["rope_parameters"] = {{"rope_type", "linear"}};
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"'factor'"});
  // Odd rotary dimension.
  j["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.3125}};
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"rotary dimension"});
}

TEST(ModelConfig, Qwen2SlidingWindowRules) {
  json j = base("Qwen2ForCausalLM");
  j["num_hidden_layers"] = 6;
  j["tie_word_embeddings"] = true;
  j["sliding_window"] = 32;
  j["max_window_layers"] = 4;
  // use_sliding_window false (the default): no window anywhere.
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.attention_bias);  // Qwen2: q/k/v biases always
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.layer_window, std::vector<int>(6, 0));
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{});
  EXPECT_EQ(c.bos_token_id, -1);
  // use_sliding_window: layers >= max_window_layers slide.
  j["use_sliding_window"] = true;
  c = parse_model_config(j);
  EXPECT_EQ(c.layer_window, (std::vector<int>{0, 0, 0, 0, 32, 32}));
  // layer_types wins.
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention",
                      "full_attention",    "full_attention", "full_attention"};
  c = parse_model_config(j);
  EXPECT_EQ(c.layer_window, (std::vector<int>{32, 0, 32, 0, 0, 0}));
  j["layer_types"] = json::array({"sliding_attention"});
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"layer_types", "6"});
  j["layer_types"] = {"chunked_attention", "full_attention", "full_attention",
                      "full_attention",    "full_attention", "full_attention"};
  expect_error([&] { parse_model_config(j); }, ErrorKind::unsupported, {"chunked_attention"});
  j.erase("layer_types");
  // sliding_window absent: the config-class default 4096.
  j.erase("sliding_window");
  EXPECT_EQ(parse_model_config(j).layer_window, (std::vector<int>{0, 0, 0, 0, 4096, 4096}));
  // Qwen2 ignores attention_bias = false.
  j["attention_bias"] = false;
  EXPECT_TRUE(parse_model_config(j).attention_bias);
}

TEST(ModelConfig, MistralSlidingWindowAndDefaults) {
  json j = base("MistralForCausalLM");
  j["sliding_window"] = 8;
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.layer_window, std::vector<int>(4, 8));
  EXPECT_EQ(c.bos_token_id, 1);  // MistralConfig defaults when absent
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.torch_dtype, DType::bf16);
  j["sliding_window"] = nullptr;  // Mistral v0.2+: full attention
  EXPECT_EQ(parse_model_config(j).layer_window, std::vector<int>(4, 0));
  j.erase("sliding_window");  // absent: MistralConfig default 4096
  EXPECT_EQ(parse_model_config(j).layer_window, std::vector<int>(4, 4096));
  j["sliding_window"] = 0;
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"sliding_window"});
  // num_key_value_heads absent: MistralConfig default 8 (here not a divisor of 4 heads).
  j["sliding_window"] = 8;
  j.erase("num_key_value_heads");
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"num_key_value_heads (8)"});
  j["num_attention_heads"] = 8;
  EXPECT_EQ(parse_model_config(j).num_kv_heads, 8);
  EXPECT_EQ(parse_model_config(j).head_dim, 8);
}

// Qwen3MoeConfig's defaults and the MoE layer rule: experts where l is not in mlp_only_layers and
// (l + 1) % decoder_sparse_step == 0.
TEST(ModelConfig, Qwen3MoeExpertsAndLayers) {
  json j = base("Qwen3MoeForCausalLM");
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);  // no head_dim default: hidden / heads
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.layer_moe, std::vector<bool>(4, true));
  EXPECT_EQ(c.layer_window, std::vector<int>(4, 0));

  j["num_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["moe_intermediate_size"] = 32;
  j["norm_topk_prob"] = true;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  j["use_sliding_window"] = true;
  j["sliding_window"] = 16;
  c = parse_model_config(j);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(c.layer_window, std::vector<int>(4, 16));  // every layer (Qwen3-MoE's rule)

  // transformers >= 5.2x writes the count as num_local_experts.
  j.erase("num_experts");
  j["num_local_experts"] = 6;
  EXPECT_EQ(parse_model_config(j).num_experts, 6);
  // A dense architecture ignores the expert keys.
  EXPECT_EQ(parse_model_config(base("Qwen3ForCausalLM")).num_experts, 0);

  j["num_experts_per_tok"] = 7;
  expect_error([&] { parse_model_config(j); }, ErrorKind::io,
               {"num_experts_per_tok (7)", "num_experts (6)"});
  j["num_experts_per_tok"] = 2;
  j["mlp_only_layers"] = {4};
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"mlp_only_layers", "4"});
  j["mlp_only_layers"] = "all";
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"mlp_only_layers"});
  j["mlp_only_layers"] = json::array();
  j["decoder_sparse_step"] = 0;
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"decoder_sparse_step"});
}

// DeepseekV3Config's defaults, the MLA and DeepSeek MoE keys, and the refused values.
TEST(ModelConfig, DeepseekV3MlaAndMoe) {
  json j = base("DeepseekV3ForCausalLM");
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "deepseek_v3");
  EXPECT_TRUE(c.mla());
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.head_dim, 64);  // the rotary part
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_TRUE(c.moe_sigmoid_routing);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, false, false, true}));  // first 3 dense
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{1});
  EXPECT_FLOAT_EQ(mla_softmax_scale(c), 1.0f / std::sqrt(192.0f));

  // DeepSeek-V2-Lite's layout: no q LoRA; a published V3 config's keys; YaRN's softmax scale.
  j["q_lora_rank"] = nullptr;
  j["qk_rope_head_dim"] = 8;
  j["qk_nope_head_dim"] = 16;
  j["n_routed_experts"] = 8;
  j["num_experts_per_tok"] = 2;
  j["n_group"] = 4;
  j["topk_group"] = 2;
  j["first_k_dense_replace"] = 1;
  j["scoring_func"] = "sigmoid";
  j["topk_method"] = "noaux_tc";
  j["moe_layer_freq"] = 1;
  j["rope_interleave"] = false;
  j["rope_scaling"] = {{"type", "yarn"},
                       {"factor", 40},
                       {"mscale", 1.0},
                       {"mscale_all_dim", 1.0},
                       {"beta_fast", 32},
                       {"beta_slow", 1},
                       {"original_max_position_embeddings", 4096}};
  c = parse_model_config(j);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_FALSE(c.rope_interleave);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(mla_softmax_scale(c), m * m / std::sqrt(24.0), 1e-6);

  auto expect_bad = [&](const char* key, json value, ErrorKind kind,
                        std::initializer_list<std::string> needles) {
    json bad = j;
    bad[key] = std::move(value);
    expect_error([&] { parse_model_config(bad); }, kind, needles);
  };
  expect_bad("scoring_func", "softmax", ErrorKind::unsupported, {"scoring_func", "softmax"});
  expect_bad("topk_method", "greedy", ErrorKind::unsupported, {"topk_method", "greedy"});
  expect_bad("moe_layer_freq", 2, ErrorKind::unsupported, {"moe_layer_freq"});
  expect_bad("attention_bias", true, ErrorKind::unsupported, {"attention_bias"});
  expect_bad("n_group", 3, ErrorKind::io, {"n_group (3)"});
  expect_bad("n_group", 8, ErrorKind::io, {"at least 2 experts per group"});
  expect_bad("topk_group", 5, ErrorKind::io, {"topk_group (5)"});
  expect_bad("num_experts_per_tok", 5, ErrorKind::io, {"num_experts_per_tok (5)"});
  expect_bad("qk_rope_head_dim", 7, ErrorKind::io, {"qk_rope_head_dim"});
  expect_bad("kv_lora_rank", 0, ErrorKind::io, {"kv_lora_rank"});
  expect_bad("routed_scaling_factor", -1.0, ErrorKind::io, {"routed_scaling_factor"});
  expect_bad("first_k_dense_replace", -1, ErrorKind::io, {"first_k_dense_replace"});
}

// Glm4MoeConfig's defaults: partial rotary 0.5, rms_norm_eps 1e-5, DeepSeek MoE with one group,
// q/k norms with use_qk_norm, q/k/v biases with attention_bias.
TEST(ModelConfig, Glm4MoeDefaultsAndKeys) {
  json j = base("Glm4MoeForCausalLM");
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "glm4_moe");
  EXPECT_FALSE(c.mla());
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.moe_sigmoid_routing);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 1408);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, true, true}));

  j["use_qk_norm"] = true;
  j["attention_bias"] = true;
  j["partial_rotary_factor"] = 1.0;
  j["n_routed_experts"] = 16;
  j["first_k_dense_replace"] = 3;
  c = parse_model_config(j);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, false, false, true}));
  j["n_group"] = 16;
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"at least 2 experts per group"});
}

// GlmMoeDsaConfig's defaults (GLM-5's MLA and indexer sizes, 3 dense layers, rms_norm_eps 1e-5,
// always interleaved rope), `indexer_types` and `mlp_layer_types`, and their bad values.
TEST(ModelConfig, GlmMoeDsaDefaultsAndKeys) {
  json j = base("GlmMoeDsaForCausalLM");
  j["num_key_value_heads"] = 4;
  ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.model_type, "glm_moe_dsa");
  EXPECT_TRUE(c.mla());
  EXPECT_TRUE(c.dsa());
  EXPECT_EQ(c.q_lora_rank, 2048);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 192);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 256);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.index_topk, 2048);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_shared, std::vector<bool>(4, false));
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{1});

  j["rope_interleave"] = false;  // not a GlmMoeDsaConfig key: the rope stays interleaved
  j["index_topk"] = 6;
  j["indexer_types"] = {"full", "shared", "full", "shared"};
  j["mlp_layer_types"] = {"dense", "sparse", "dense", "sparse"};
  c = parse_model_config(j);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.index_topk, 6);
  EXPECT_EQ(c.index_shared, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, false, true}));

  auto expect_bad = [&](const char* key, json value, ErrorKind kind,
                        std::initializer_list<std::string> needles) {
    json bad = j;
    bad[key] = std::move(value);
    expect_error([&] { parse_model_config(bad); }, kind, needles);
  };
  expect_bad("indexer_types", {"shared", "full", "full", "full"}, ErrorKind::io,
             {"indexer_types[0]"});
  expect_bad("indexer_types", {"full", "dense", "full", "full"}, ErrorKind::io,
             {"indexer_types[1]", "dense"});
  expect_bad("indexer_types", {"full"}, ErrorKind::io, {"indexer_types", "4"});
  expect_bad("mlp_layer_types", {"dense", "moe", "dense", "dense"}, ErrorKind::io,
             {"mlp_layer_types[1]"});
  expect_bad("index_topk", 0, ErrorKind::io, {"index_topk"});
  expect_bad("index_head_dim", 32, ErrorKind::io, {"index_head_dim (32)"});
  expect_bad("q_lora_rank", nullptr, ErrorKind::unsupported, {"q_lora_rank"});
}

TEST(ModelConfig, LlamaDefaultsAndIdForms) {
  json j = base("LlamaForCausalLM");
  j.erase("num_key_value_heads");
  j["eos_token_id"] = 7;
  j["bos_token_id"] = nullptr;
  j["pad_token_id"] = 0;
  j["head_dim"] = 24;
  j["attention_bias"] = true;
  j["vocab_size"] = 384.0;  // integral floats are accepted
  const ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.num_kv_heads, 4);  // LlamaConfig: num_attention_heads
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.vocab_size, 384);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{7});
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  // Llama never slides, whatever the keys say.
  j["sliding_window"] = 4;
  j["use_sliding_window"] = true;
  EXPECT_EQ(parse_model_config(j).layer_window, std::vector<int>(4, 0));
}

TEST(ModelConfig, Errors) {
  expect_error([] { parse_model_config(base("GPT2LMHeadModel")); }, ErrorKind::unsupported,
               {"unknown architecture 'GPT2LMHeadModel'", "supported:", "LlamaForCausalLM",
                "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"});
  json j = base("Qwen3ForCausalLM");
  j.erase("architectures");
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"config.json", "'architectures'"});
  j["architectures"] = json::array();
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"'architectures'"});
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    json k = base("Qwen3ForCausalLM");
    k.erase(key);
    expect_error([&] { parse_model_config(k); }, ErrorKind::io,
                 {"config.json", "missing required key", fmt::format("'{}'", key)});
  }
  j = base("LlamaForCausalLM");
  j["hidden_size"] = "64";
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"'hidden_size'", "integer"});
  j = base("LlamaForCausalLM");
  j["hidden_size"] = -64;
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"'hidden_size'", "positive"});
  j = base("LlamaForCausalLM");
  j["hidden_size"] = 66;  // not a multiple of 4 heads, no head_dim
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"hidden_size (66)"});
  j = base("LlamaForCausalLM");
  j["hidden_act"] = "gelu";
  expect_error([&] { parse_model_config(j); }, ErrorKind::unsupported, {"'gelu'"});
  j = base("LlamaForCausalLM");
  j["mlp_bias"] = true;
  expect_error([&] { parse_model_config(j); }, ErrorKind::unsupported, {"mlp_bias"});
  j = base("LlamaForCausalLM");
  j["torch_dtype"] = "float64";
  expect_error([&] { parse_model_config(j); }, ErrorKind::unsupported, {"'float64'"});
  j = base("LlamaForCausalLM");
  j["eos_token_id"] = json::array({1, "x"});
  expect_error([&] { parse_model_config(j); }, ErrorKind::io, {"'eos_token_id'"});
  expect_error([] { parse_model_config(json::array()); }, ErrorKind::io, {"JSON object"});
}

class TempModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("dspark_config_test_{}_{}",
                       ::testing::UnitTest::GetInstance()->current_test_info()->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(TempModelDir, LoadModelConfigNamesTheFile) {
  expect_error([&] { load_model_config(dir_ / "nope"); }, ErrorKind::io, {"nope", "not found"});
  expect_error([&] { load_model_config(dir_); }, ErrorKind::io,
               {(dir_ / "config.json").string(), "file not found"});
  write("config.json", "{\"architectures\": [\"LlamaForCausalLM\"],");
  expect_error([&] { load_model_config(dir_); }, ErrorKind::io,
               {(dir_ / "config.json").string(), "invalid JSON"});
  json j = base("LlamaForCausalLM");
  j.erase("intermediate_size");
  write("config.json", j.dump());
  expect_error([&] { load_model_config(dir_); }, ErrorKind::io,
               {(dir_ / "config.json").string(), "'intermediate_size'"});
  j["intermediate_size"] = 160;
  write("config.json", j.dump());
  EXPECT_EQ(load_model_config(dir_).intermediate_size, 160);
}

TEST_F(TempModelDir, GenerationDefaults) {
  // Nothing there: defaults, no throw.
  GenerationDefaults g = load_generation_defaults(dir_);
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_EQ(g.temperature, -1.0f);
  EXPECT_EQ(g.top_k, -1);
  EXPECT_FALSE(g.do_sample);

  json cfg = base("Qwen3ForCausalLM");
  cfg["eos_token_id"] = json::array({5, 9});
  write("config.json", cfg.dump());
  write("generation_config.json", R"({"eos_token_id": [9, 3], "temperature": 0.6,
      "top_p": 0.95, "top_k": 20, "min_p": 0.05, "do_sample": true, "bos_token_id": 1})");
  g = load_generation_defaults(dir_);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{9, 3, 5}));  // generation's, then config's new ones
  EXPECT_FLOAT_EQ(g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(g.top_p, 0.95f);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FLOAT_EQ(g.min_p, 0.05f);
  EXPECT_TRUE(g.do_sample);

  write("generation_config.json", R"({"eos_token_id": 4})");
  g = load_generation_defaults(dir_);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{4, 5, 9}));
  EXPECT_EQ(g.temperature, -1.0f);

  write("generation_config.json", R"({"temperature": "hot"})");
  expect_error([&] { load_generation_defaults(dir_); }, ErrorKind::io,
               {"generation_config.json", "'temperature'"});
  write("generation_config.json", "{");
  expect_error([&] { load_generation_defaults(dir_); }, ErrorKind::io,
               {"generation_config.json", "invalid JSON"});
}

}  // namespace
}  // namespace dspark
