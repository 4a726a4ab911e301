#include "common/gguf_fixtures.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "common/test_util.h"
#include "dspark/io/gguf_writer.h"
#include "dspark/model/gguf_model.h"

namespace dspark::test {

bool python_has_gguf() {
  static const bool has =
      std::system("python3 -c 'import gguf, numpy, safetensors' > /dev/null 2>&1") == 0;
  return has;
}

void write_deepseek_moe_gguf(const std::filesystem::path& src, const std::filesystem::path& out,
                             const std::string& arch, bool q8_0) {
  const std::string cmd =
      fmt::format("python3 '{}' --deepseek-moe '{}' '{}' {}{} > /dev/null",
                  (source_dir() / "tools" / "gguf" / "make_fixtures.py").string(), src.string(),
                  out.string(), arch, q8_0 ? " --q8-0" : "");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

GgufMetadata deepseek_metadata(const std::string& arch, std::optional<int64_t> gating,
                               int64_t dense_layers) {
  const std::string p = arch + ".";
  GgufMetadata meta = {
      {"general.architecture", gguf_string(arch)},
      {p + "block_count", gguf_u32(3)},
      {p + "nextn_predict_layers", gguf_u32(1)},
      {p + "embedding_length", gguf_u32(64)},
      {p + "feed_forward_length", gguf_u32(160)},
      {p + "context_length", gguf_u32(512)},
      {p + "vocab_size", gguf_u32(384)},
      {p + "attention.head_count", gguf_u32(4)},
      {p + "attention.head_count_kv", gguf_u32(1)},
      {p + "attention.key_length", gguf_u32(40)},
      {p + "attention.value_length", gguf_u32(32)},
      {p + "attention.key_length_mla", gguf_u32(24)},
      {p + "attention.value_length_mla", gguf_u32(16)},
      {p + "attention.q_lora_rank", gguf_u32(48)},
      {p + "attention.kv_lora_rank", gguf_u32(32)},
      {p + "attention.layer_norm_rms_epsilon", gguf_f32(1e-6)},
      {p + "rope.dimension_count", gguf_u32(8)},
      {p + "rope.freq_base", gguf_f32(10000.0)},
      {p + "rope.scaling.type", gguf_string("yarn")},
      {p + "rope.scaling.factor", gguf_f32(4.0)},
      {p + "rope.scaling.original_context_length", gguf_u32(64)},
      {p + "rope.scaling.yarn_log_multiplier", gguf_f32(0.08)},
      {p + "expert_count", gguf_u32(8)},
      {p + "expert_used_count", gguf_u32(2)},
      {p + "expert_feed_forward_length", gguf_u32(32)},
      {p + "expert_shared_count", gguf_u32(1)},
      {p + "expert_group_count", gguf_u32(4)},
      {p + "expert_group_used_count", gguf_u32(2)},
      {p + "expert_weights_scale", gguf_f32(2.5)},
      {p + "expert_weights_norm", gguf_bool(true)},
      {p + "leading_dense_block_count", gguf_u32(dense_layers)},
  };
  if (gating) meta.emplace_back(p + "expert_gating_func", gguf_u32(*gating));
  return meta;
}

ModelConfig config_from_metadata(const GgufMetadata& metadata,
                                 const std::vector<std::string>& tensors) {
  static std::atomic<int> serial{0};
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("dspark_meta_{}_{}.gguf", ::getpid(), serial++);
  std::vector<GgufTensorOut> outs;
  for (const std::string& name : tensors) outs.push_back({name, GgmlType::f32, Shape{1}});
  write_gguf(path, metadata, outs, [](size_t, uint8_t* dst) { std::memset(dst, 0, 4); });
  struct Remove {
    std::filesystem::path path;
    ~Remove() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  } remove{path};
  const GgufFile g = GgufFile::open(path);
  return gguf_model_config(g);
}

void expect_same_hyper_parameters(const ModelConfig& c, const ModelConfig& hf) {
  EXPECT_EQ(c.vocab_size, hf.vocab_size);
  EXPECT_EQ(c.hidden_size, hf.hidden_size);
  EXPECT_EQ(c.intermediate_size, hf.intermediate_size);
  EXPECT_EQ(c.num_heads, hf.num_heads);
  EXPECT_EQ(c.num_kv_heads, hf.num_kv_heads);
  EXPECT_EQ(c.head_dim, hf.head_dim);
  EXPECT_NEAR(c.rms_norm_eps, hf.rms_norm_eps, 1e-12);
  EXPECT_EQ(c.rope_theta, hf.rope_theta);
  EXPECT_EQ(c.max_position_embeddings, hf.max_position_embeddings);
  EXPECT_EQ(c.tie_word_embeddings, hf.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, hf.eos_token_ids);
}

}  // namespace dspark::test
