// The golden fixtures in tests/data/models (tools/goldens/make_goldens.py): every checkpoint opens
// with SafeTensors, its config parses, its weights have the shapes the config implies, and its
// goldens.safetensors is self-consistent (shapes vs config, greedy tokens = argmax of the stored
// decision logits, margins as recorded). The model-vs-golden comparison lives with the models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/core/buffer.h"
#include "dspark/io/json_util.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "unit/model_golden_checks.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;

fs::path fixture_dir(const std::string& name) {
  return test::data_dir() / "models" / name;
}

void expect_tensor(const SafeTensors& st, const std::string& name, DType dtype,
                   const Shape& shape) {
  ASSERT_TRUE(st.contains(name)) << st.path() << ": missing " << name;
  const Tensor t = st.get(name);
  EXPECT_EQ(t.dtype(), dtype) << name;
  EXPECT_EQ(t.shape(), shape) << name << ": " << t.shape().str() << " vs " << shape.str();
}

// The Hugging Face weight names and shapes of a Llama-family decoder (with experts where the
// config has them, MLA for DeepSeek), from the config alone.
std::map<std::string, Shape> expected_weights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim,
                kv = int64_t{c.num_kv_heads} * c.head_dim, ff = c.intermediate_size;
  std::map<std::string, Shape> w;
  w["model.embed_tokens.weight"] = Shape{c.vocab_size, h};
  w["model.norm.weight"] = Shape{h};
  if (!c.tie_word_embeddings) w["lm_head.weight"] = Shape{c.vocab_size, h};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    w[p + "input_layernorm.weight"] = Shape{h};
    w[p + "post_attention_layernorm.weight"] = Shape{h};
    if (c.mla()) {
      const int64_t heads = c.num_heads, qk = c.qk_nope_head_dim + c.qk_rope_head_dim,
                    r = c.kv_lora_rank;
      if (c.q_lora_rank > 0) {
        w[p + "self_attn.q_a_proj.weight"] = Shape{c.q_lora_rank, h};
        w[p + "self_attn.q_a_layernorm.weight"] = Shape{c.q_lora_rank};
        w[p + "self_attn.q_b_proj.weight"] = Shape{heads * qk, c.q_lora_rank};
      } else {
        w[p + "self_attn.q_proj.weight"] = Shape{heads * qk, h};
      }
      w[p + "self_attn.kv_a_proj_with_mqa.weight"] = Shape{r + c.qk_rope_head_dim, h};
      w[p + "self_attn.kv_a_layernorm.weight"] = Shape{r};
      w[p + "self_attn.kv_b_proj.weight"] = Shape{heads * (c.qk_nope_head_dim + c.v_head_dim), r};
      w[p + "self_attn.o_proj.weight"] = Shape{h, heads * c.v_head_dim};
      if (c.dsa() && !c.index_shared[static_cast<size_t>(l)]) {
        const int64_t ih = c.index_n_heads, id = c.index_head_dim;
        w[p + "self_attn.indexer.wq_b.weight"] = Shape{ih * id, c.q_lora_rank};
        w[p + "self_attn.indexer.wk.weight"] = Shape{id, h};
        w[p + "self_attn.indexer.k_norm.weight"] = Shape{id};
        w[p + "self_attn.indexer.k_norm.bias"] = Shape{id};
        w[p + "self_attn.indexer.weights_proj.weight"] = Shape{ih, h};
      }
    } else {
      w[p + "self_attn.q_proj.weight"] = Shape{q, h};
      w[p + "self_attn.k_proj.weight"] = Shape{kv, h};
      w[p + "self_attn.v_proj.weight"] = Shape{kv, h};
      w[p + "self_attn.o_proj.weight"] = Shape{h, q};
    }
    if (c.attention_bias) {
      w[p + "self_attn.q_proj.bias"] = Shape{q};
      w[p + "self_attn.k_proj.bias"] = Shape{kv};
      w[p + "self_attn.v_proj.bias"] = Shape{kv};
    }
    if (c.qk_norm) {
      w[p + "self_attn.q_norm.weight"] = Shape{c.head_dim};
      w[p + "self_attn.k_norm.weight"] = Shape{c.head_dim};
    }
    if (!c.layer_moe.empty() && c.layer_moe[static_cast<size_t>(l)]) {
      const int64_t e_ff = c.moe_intermediate_size;
      w[p + "mlp.gate.weight"] = Shape{c.num_experts, h};
      if (c.moe_sigmoid_routing) w[p + "mlp.gate.e_score_correction_bias"] = Shape{c.num_experts};
      if (c.n_shared_experts > 0) {
        const int64_t s_ff = int64_t{c.n_shared_experts} * e_ff;
        w[p + "mlp.shared_experts.gate_proj.weight"] = Shape{s_ff, h};
        w[p + "mlp.shared_experts.up_proj.weight"] = Shape{s_ff, h};
        w[p + "mlp.shared_experts.down_proj.weight"] = Shape{h, s_ff};
      }
      for (int e = 0; e < c.num_experts; ++e) {
        const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
        w[x + "gate_proj.weight"] = Shape{e_ff, h};
        w[x + "up_proj.weight"] = Shape{e_ff, h};
        w[x + "down_proj.weight"] = Shape{h, e_ff};
      }
      continue;
    }
    w[p + "mlp.gate_proj.weight"] = Shape{ff, h};
    w[p + "mlp.up_proj.weight"] = Shape{ff, h};
    w[p + "mlp.down_proj.weight"] = Shape{h, ff};
  }
  return w;
}

int special_token_id(const fs::path& tokenizer_json, const std::string& content) {
  const nlohmann::json tok = read_json_file(tokenizer_json);
  for (const auto& t : tok.at("added_tokens"))
    if (t.at("content") == content) return t.at("id").get<int>();
  return -1;
}

class GoldenFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenFixture, CheckpointMatchesConfig) {
  const fs::path dir = fixture_dir(GetParam());
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " missing: run tools/goldens/make_goldens.py";
  const ModelConfig c = load_model_config(dir);
  const SafeTensors st = SafeTensors::open(dir);
  const auto expected = expected_weights(c);
  std::vector<std::string> names;
  for (const auto& [name, shape] : expected) {
    names.push_back(name);
    expect_tensor(st, name, DType::f32, shape);
  }
  EXPECT_EQ(st.names(), names) << "unexpected extra or missing tensors";

  // Per-fixture features the model tests rely on.
  const std::string name = GetParam();
  EXPECT_EQ(c.vocab_size, 384);
  if (!c.mla()) {
    EXPECT_LT(c.num_kv_heads, c.num_heads) << "GQA everywhere but MLA";
  }
  EXPECT_EQ(c.torch_dtype, DType::f32);
  if (name.starts_with("llama3")) {
    EXPECT_EQ(c.architecture, "LlamaForCausalLM");
    EXPECT_EQ(c.rope_scaling.type, "llama3");
    EXPECT_FALSE(c.tie_word_embeddings);
  } else if (name == "qwen2") {
    EXPECT_EQ(c.architecture, "Qwen2ForCausalLM");
    EXPECT_TRUE(c.attention_bias);
    EXPECT_TRUE(c.tie_word_embeddings);
  } else if (name == "qwen3") {
    EXPECT_TRUE(c.qk_norm);
    EXPECT_NE(c.head_dim * c.num_heads, c.hidden_size) << "head_dim must differ from H/heads";
  } else if (name == "qwen3_yarn") {
    EXPECT_EQ(c.rope_scaling.type, "yarn");
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
    EXPECT_DOUBLE_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  } else if (name == "mistral") {
    EXPECT_EQ(c.layer_window, std::vector<int>(c.num_layers, 8));
  } else if (name == "qwen3_moe") {
    EXPECT_EQ(c.architecture, "Qwen3MoeForCausalLM");
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.layer_moe, (std::vector<bool>{true, false, true, true})) << "layer 1 dense";
  } else if (name == "glm4_moe") {
    EXPECT_EQ(c.architecture, "Glm4MoeForCausalLM");
    EXPECT_TRUE(c.attention_bias);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
    EXPECT_TRUE(c.moe_sigmoid_routing);
    EXPECT_EQ(c.n_group, 4);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.8);
    EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, true, true})) << "layer 0 dense";
  } else if (name == "glm_moe_dsa") {
    EXPECT_EQ(c.architecture, "GlmMoeDsaForCausalLM");
    EXPECT_TRUE(c.mla());
    EXPECT_TRUE(c.rope_interleave);
    EXPECT_EQ(c.index_topk, 6);
    EXPECT_EQ(c.index_n_heads, 8);
    EXPECT_EQ(c.index_head_dim, 16);
    EXPECT_EQ(c.index_shared, (std::vector<bool>{false, true, false, true}));
    EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, true, true})) << "layer 0 dense";
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.0);
  } else if (name == "deepseek_v3") {
    EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
    EXPECT_TRUE(c.mla());
    EXPECT_EQ(c.q_lora_rank, 48);
    EXPECT_EQ(c.kv_lora_rank, 32);
    EXPECT_EQ(c.head_dim, c.qk_rope_head_dim);
    EXPECT_TRUE(c.rope_interleave);
    EXPECT_EQ(c.rope_scaling.type, "yarn");
    EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 0.8);
    EXPECT_TRUE(c.moe_sigmoid_routing);
    EXPECT_EQ(c.n_group, 4);
    EXPECT_EQ(c.topk_group, 2);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, true, true})) << "layer 0 dense";
  } else if (name == "deepseek_v3_q_proj") {
    EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
    EXPECT_TRUE(c.mla());
    EXPECT_EQ(c.q_lora_rank, 0) << "q_proj from the hidden state";
    EXPECT_EQ(c.kv_lora_rank, 32);
    EXPECT_TRUE(c.rope_interleave);
    EXPECT_EQ(c.rope_scaling.type, "default");
    EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, true, true, true})) << "layer 0 dense";
  }
  if (name == "llama3_sharded") {
    EXPECT_TRUE(fs::is_regular_file(dir / "model.safetensors.index.json"));
    EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
    // Same bytes as the single-file llama3 checkpoint.
    const SafeTensors single = SafeTensors::open(fixture_dir("llama3"));
    ASSERT_EQ(single.names(), st.names());
    for (const auto& n : st.names()) {
      const Tensor a = st.get(n), b = single.get(n);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << n;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << n;
    }
  }

  // Tokenizer files and generation config: eos = <|endoftext|>.
  EXPECT_TRUE(fs::is_regular_file(dir / "tokenizer.json"));
  EXPECT_TRUE(fs::is_regular_file(dir / "tokenizer_config.json"));
  const int eot = special_token_id(dir / "tokenizer.json", "<|endoftext|>");
  EXPECT_GE(eot, 0);
  EXPECT_LT(eot, c.vocab_size);
  EXPECT_GE(special_token_id(dir / "tokenizer.json", "<|im_start|>"), 0);
  EXPECT_GE(special_token_id(dir / "tokenizer.json", "<|im_end|>"), 0);
  const GenerationDefaults g = load_generation_defaults(dir);
  EXPECT_EQ(g.eos_token_ids, std::vector<int>{eot});
  const nlohmann::json tok_cfg = read_json_file(dir / "tokenizer_config.json");
  EXPECT_NE(tok_cfg.value("chat_template", "").find("<|im_start|>"), std::string::npos);
}

TEST_P(GoldenFixture, GoldensAreSelfConsistent) {
  const fs::path dir = fixture_dir(GetParam());
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " missing: run tools/goldens/make_goldens.py";
  const ModelConfig c = load_model_config(dir);
  const SafeTensors gold = SafeTensors::open(dir / "goldens.safetensors");
  const auto& meta = gold.metadata();
  for (const char* key : {"transformers_version", "torch_version", "taps", "min_margin",
                          "n_prompts", "prompts", "n_greedy"})
    ASSERT_TRUE(meta.count(key)) << "metadata lacks " << key;
  const auto taps = nlohmann::json::parse(meta.at("taps")).get<std::vector<int>>();
  EXPECT_EQ(taps, (std::vector<int>{0, c.num_layers - 2}));
  const int n_prompts = std::stoi(meta.at("n_prompts"));
  const int n_greedy = std::stoi(meta.at("n_greedy"));
  EXPECT_EQ(n_prompts, 3);
  EXPECT_EQ(n_greedy, 32);
  EXPECT_EQ(nlohmann::json::parse(meta.at("prompts")).size(), static_cast<size_t>(n_prompts));
  const double min_margin_recorded = std::stod(meta.at("min_margin"));
  EXPECT_GE(min_margin_recorded, 0.05);

  const int64_t v = c.vocab_size, h = c.hidden_size;
  double min_margin = INFINITY;
  int64_t longest = 0;
  for (int i = 0; i < n_prompts; ++i) {
    const std::string p = fmt::format("p{}.", i);
    ASSERT_TRUE(gold.contains(p + "tokens"));
    const Tensor tokens_t = gold.get(p + "tokens");
    ASSERT_EQ(tokens_t.dtype(), DType::i32);
    ASSERT_EQ(tokens_t.dim(), 1);
    const int64_t n = tokens_t.size(0);
    longest = std::max(longest, n);
    EXPECT_GE(n, 12);
    for (int32_t t : to_vector<int32_t>(tokens_t)) EXPECT_TRUE(t >= 0 && t < v) << t;
    expect_tensor(gold, p + "logits", DType::f32, Shape{n, v});
    for (int l : taps) expect_tensor(gold, p + fmt::format("tap{}", l), DType::f32, Shape{n, h});
    expect_tensor(gold, p + "final_hidden", DType::f32, Shape{n, h});
    expect_tensor(gold, p + "greedy", DType::i32, Shape{n_greedy});
    expect_tensor(gold, p + "greedy_logits", DType::f32, Shape{n_greedy, v});
    expect_tensor(gold, p + "greedy_margin", DType::f32, Shape{n_greedy});
    if (HasFatalFailure() || HasNonfatalFailure()) return;

    for (const char* what : {"logits", "final_hidden", "greedy_logits"})
      for (float x : to_vector<float>(gold.get(p + what)))
        ASSERT_TRUE(std::isfinite(x)) << p << what;
    // Each greedy token is the argmax of its decision row, by the recorded margin.
    const auto greedy = to_vector<int32_t>(gold.get(p + "greedy"));
    const auto dec = to_vector<float>(gold.get(p + "greedy_logits"));
    const auto margins = to_vector<float>(gold.get(p + "greedy_margin"));
    for (int k = 0; k < n_greedy; ++k) {
      const float* row = dec.data() + k * v;
      const int64_t top = std::max_element(row, row + v) - row;
      float second = -INFINITY;
      for (int64_t j = 0; j < v; ++j)
        if (j != top) second = std::max(second, row[j]);
      EXPECT_EQ(top, greedy[k]) << p << "greedy step " << k;
      EXPECT_NEAR(row[top] - second, margins[k], 1e-5) << p << "margin " << k;
      min_margin = std::min(min_margin, static_cast<double>(row[top] - second));
    }
    // Causality: the prompt's last logits row and the first decision row are the same position
    // of the same prefix (computed in two forwards of different lengths).
    const auto logits = to_vector<float>(gold.get(p + "logits"));
    double max_diff = 0;
    for (int64_t j = 0; j < v; ++j)
      max_diff =
          std::max(max_diff, std::fabs(static_cast<double>(logits[(n - 1) * v + j]) - dec[j]));
    EXPECT_LT(max_diff, 1e-3) << p << "last prompt row vs first greedy decision row";
    // DSA: transformers' selection of each indexer layer, ascending, -1 padded; the prompts run
    // past index_topk, so the sparse choice is exercised.
    for (int l = 0; c.dsa() && l < c.num_layers; ++l) {
      const std::string name = p + fmt::format("index{}.ids", l);
      if (c.index_shared[static_cast<size_t>(l)]) {
        EXPECT_FALSE(gold.contains(name)) << name;
        continue;
      }
      expect_tensor(gold, name, DType::i32, Shape{n, c.index_topk});
      if (HasFatalFailure()) return;
      const auto ids = to_vector<int32_t>(gold.get(name));
      EXPECT_GT(n, 2 * c.index_topk) << "prompt vs index_topk";
      for (int64_t t = 0; t < n; ++t) {
        const int64_t kept = std::min<int64_t>(t + 1, c.index_topk);
        for (int64_t j = 0; j < c.index_topk; ++j) {
          const int32_t id = ids[static_cast<size_t>(t * c.index_topk + j)];
          if (j >= kept) {
            EXPECT_EQ(id, -1) << name << " row " << t;
          } else {
            EXPECT_TRUE(id >= 0 && id <= t) << name << " row " << t << ": " << id;
            if (j > 0) {
              EXPECT_GT(id, ids[static_cast<size_t>(t * c.index_topk + j - 1)]);
            }
          }
        }
      }
    }
  }
  if (c.dsa()) {
    ASSERT_TRUE(meta.count("min_index_gap"));
    EXPECT_GE(std::stod(meta.at("min_index_gap")), 1e-4);
  }
  EXPECT_NEAR(min_margin, min_margin_recorded, 1e-5);
  if (c.layer_window[0] > 0) {
    EXPECT_GT(longest, 4 * c.layer_window[0]) << "prompt vs window";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenFixture, ::testing::ValuesIn(test::golden_model_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace dspark
