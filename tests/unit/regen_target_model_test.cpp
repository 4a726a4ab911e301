// dspark regen's files for a training script that runs the target itself: write_target_model
// (every weight exactly as the Llama family loads it, the rope table, the config) and stored
// hidden states in f32 (RegenOptions::hidden_dtype). The PyTorch forward built on these files is
// checked against dspark by tests/cli/target_forward_test.sh.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/core/buffer.h"
#include "dspark/core/dtype.h"
#include "dspark/io/gguf.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/model.h"
#include "dspark/ops/rope.h"
#include "regen/regen.h"

namespace dspark {
namespace {

std::vector<float> f32_of(const Tensor& t) {
  if (t.dtype() == DType::f32) return to_vector<float>(t);
  EXPECT_EQ(t.dtype(), DType::bf16);
  std::vector<float> out;
  for (const bf16 v : to_vector<bf16>(t)) out.push_back(bf16_to_f32(v));
  return out;
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / name;
}

// Every layer tensor of a safetensors checkpoint is in the file unchanged (f32 engine), the
// optional ones exactly when the family uses them, plus the shared weights, rope table, config.
void expect_checkpoint_written(const std::string& model_name, bool qkv_bias, bool qk_norm) {
  const auto dir = test::data_dir() / "models" / model_name;
  Context ctx(Device::cpu());
  auto model = load_model(dir, Device::cpu(), DType::f32);
  const auto file = temp_file("dspark_target_model_" + model_name + ".safetensors");
  write_target_model(*model, ctx, dir, file);
  const SafeTensors st = SafeTensors::open(file);
  const SafeTensors ref = SafeTensors::open(dir);
  const ModelConfig& c = model->config();
  int layer_tensors = 0;
  for (const std::string& name : st.names()) {
    if (name.rfind("model.layers.", 0) != 0) continue;
    ++layer_tensors;
    ASSERT_TRUE(ref.contains(name)) << name;
    EXPECT_EQ(f32_of(st.get(name)), f32_of(ref.get(name))) << name;
  }
  const int per_layer = 9 + (qkv_bias ? 3 : 0) + (qk_norm ? 2 : 0);
  EXPECT_EQ(layer_tensors, c.num_layers * per_layer) << model_name;
  EXPECT_EQ(f32_of(st.get("embed_tokens")), f32_of(ref.get("model.embed_tokens.weight")));
  EXPECT_EQ(f32_of(st.get("final_norm")), f32_of(ref.get("model.norm.weight")));
  const RopeTable table = make_rope_table(c.head_dim, c.rope_theta, c.partial_rotary_factor,
                                          c.rope_scaling, c.max_position_embeddings);
  EXPECT_EQ(to_vector<float>(st.get("rope_inv_freq")), table.inv_freq);
  const auto cfg = nlohmann::json::parse(st.metadata().at("config"));
  EXPECT_EQ(cfg["num_layers"], c.num_layers);
  EXPECT_EQ(cfg["num_kv_heads"], c.num_kv_heads);
  EXPECT_EQ(cfg["head_dim"], c.head_dim);
  EXPECT_EQ(cfg["qkv_bias"], qkv_bias);
  EXPECT_EQ(cfg["qk_norm"], qk_norm);
  EXPECT_EQ(cfg["layer_window"].size(), static_cast<size_t>(c.num_layers));
  EXPECT_EQ(cfg["weight_dtype"], "f32");
  std::filesystem::remove(file);
}

TEST(RegenTargetModel, CheckpointWeightsWrittenUnchanged) {
  expect_checkpoint_written("qwen3", false, true);
  expect_checkpoint_written("qwen2", true, false);
  expect_checkpoint_written("llama3", false, false);
}

// A GGUF (llama.cpp's q/k row order, F16 matrices, llama3 scaling as rope_freqs divisors): the
// matrices are the dequantized, un-permuted ones the model loads, in the engine dtype (bf16 here,
// rounded like the loader), and rope_inv_freq has the divisors applied.
TEST(RegenTargetModel, GgufWeightsInEngineDtype) {
  const auto path = test::data_dir() / "gguf" / "tiny_llama.gguf";
  Context ctx(Device::cpu());
  auto model = load_model(path, Device::cpu(), DType::bf16);
  const auto file = temp_file("dspark_target_model_gguf.safetensors");
  write_target_model(*model, ctx, path, file);
  const SafeTensors st = SafeTensors::open(file);
  const GgufFile g = GgufFile::open(path);
  const GgufWeights w(g, gguf_model_config(g));
  for (const char* name :
       {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.mlp.down_proj.weight"}) {
    const Tensor t = st.get(name);
    EXPECT_EQ(t.dtype(), DType::bf16) << name;
    std::vector<float> want = to_vector<float>(w.get(name));
    for (float& v : want) v = bf16_to_f32(f32_to_bf16(v));
    EXPECT_EQ(f32_of(t), want) << name;
  }
  EXPECT_EQ(st.get("model.layers.0.input_layernorm.weight").dtype(), DType::f32);
  const ModelConfig& c = model->config();
  RopeTable table = make_rope_table(c.head_dim, c.rope_theta, c.partial_rotary_factor,
                                    c.rope_scaling, c.max_position_embeddings);
  const std::vector<float> factors = to_vector<float>(w.get("rope_freqs.weight"));
  bool divided = false;
  for (size_t i = 0; i < table.inv_freq.size(); ++i) {
    divided |= factors[i] != 1.0f;
    table.inv_freq[i] /= factors[i];
  }
  EXPECT_TRUE(divided) << "the fixture's rope_freqs should not all be 1";
  EXPECT_EQ(to_vector<float>(st.get("rope_inv_freq")), table.inv_freq);
  EXPECT_EQ(nlohmann::json::parse(st.metadata().at("config"))["weight_dtype"], "bf16");
  std::filesystem::remove(file);
}

// Hidden states stored in f32 round to exactly the bf16 ones.
TEST(RegenTargetModel, F32HiddenStatesRoundToBf16Ones) {
  Context ctx(Device::cpu());
  auto model = load_model(test::data_dir() / "models" / "qwen3", Device::cpu(), DType::f32);
  const std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 200, 7}, {3, 4}};
  const TapRows a = compute_taps(*model, ctx, seqs, {0, 2}, true, 8192, DType::f32);
  const TapRows b = compute_taps(*model, ctx, seqs, {0, 2}, true, 8192, DType::bf16);
  ASSERT_EQ(a.taps.size(), 2 * b.taps.size());
  ASSERT_EQ(a.final_hidden.size(), 2 * b.final_hidden.size());
  for (const auto& [f32s, bf16s] :
       {std::pair{&a.taps, &b.taps}, std::pair{&a.final_hidden, &b.final_hidden}}) {
    const size_t n = bf16s->size() / 2;
    const auto* x = reinterpret_cast<const float*>(f32s->data());
    const auto* y = reinterpret_cast<const uint16_t*>(bf16s->data());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(f32_to_bf16(x[i]).bits, y[i]) << i;
  }
  EXPECT_THROW(compute_taps(*model, ctx, seqs, {0}, false, 8192, DType::f16), Error);
}

}  // namespace
}  // namespace dspark
