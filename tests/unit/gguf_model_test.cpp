// Models from GGUF files.
// (b) tests/data/gguf/tiny_llama.gguf is layer 0 of the tiny golden Llama 3
//     (tests/data/models/llama3) converted like llama.cpp's converter does (q/k rows permuted,
//     llama3 rope scaling as rope_freqs.weight; q/k/norms F32, other matrices F16). Its logits
//     must equal those of the same weights read from the safetensors checkpoint (rounded to f16
//     where the GGUF stores F16) within rel RMS 1e-5.
// (d) When models/SmolLM2-135M-Instruct.Q4_1.gguf exists (scripts/fetch_default_model.sh):
//     last-position logits of 3 prompts vs transformers loading the same GGUF (torch f32, CPU;
//     tests/data/gguf/smollm2_logits_golden.safetensors from tools/gguf/make_fixtures.py), on the
//     64 largest logits + 2048 fixed random ids, the same argmax, and rel RMS <= 1e-4 with the
//     weights dequantized at load, <= 1.2e-1 with the blocks kept (the 8-bit rounding of the
//     activations in every product compounds over 30 layers; the figure swings with rounding-
//     level changes of the products: 1.3-4.8% with 8-lane f32 sums per weight row, 2.2-9.3% with
//     one f32 sum per row, 2.1-7.0% with the same products summed in double).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <tuple>

#include "common/gguf_fixtures.h"
#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/error.h"
#include "dspark/core/quant_encode.h"
#include "dspark/io/gguf.h"
#include "dspark/io/gguf_writer.h"
#include "dspark/io/safetensors.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {

using test::gguf_dir;

std::filesystem::path smollm2_path() {
  if (const char* p = std::getenv("DSPARK_SMOLLM2_GGUF")) return p;
  return test::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Safetensors weights, each rounded to f16 when the GGUF file stores that tensor as F16.
class RoundedLikeGguf final : public WeightSource {
 public:
  RoundedLikeGguf(const SafeTensors& st, const GgufFile& g, const GgufWeights& names)
      : st_(st), g_(g), names_(names) {}
  bool contains(const std::string& name) const override { return st_.contains(name); }
  Tensor get(const std::string& name) const override {
    std::vector<float> v = to_vector<float>(st_.get(name));
    const std::string gname = names_.gguf_name(name);
    if (!gname.empty() && g_.tensor(gname).type == GgmlType::f16) {
      for (float& x : v) x = f16_to_f32(f32_to_f16(x));
    }
    auto& slot = cache_[name];
    slot = std::move(v);
    return Tensor(slot.data(), DType::f32, st_.get(name).shape(), Device::cpu());
  }
  std::string origin() const override { return st_.path().string(); }

 private:
  const SafeTensors& st_;
  const GgufFile& g_;
  const GgufWeights& names_;
  mutable std::map<std::string, std::vector<float>> cache_;
};

std::vector<float> all_logits(Model& model, Context& ctx, const std::vector<int32_t>& tokens) {
  const int n = static_cast<int>(tokens.size());
  PagedKvCache kv(model.kv_shape(16, (n + 15) / 16), model.device());
  ForwardBatch b;
  b.tokens = tokens;
  b.row_indptr = {0, n};
  b.seqs = {kv.create_sequence()};
  for (int i = 0; i < n; ++i) b.logit_indices.push_back(i);
  const ForwardOutput out = model.forward(ctx, kv, b);
  return to_vector<float>(out.logits);
}

TEST(GgufModel, TinyLlamaConfigFromMetadata) {
  const GgufFile g = GgufFile::open(gguf_dir() / "tiny_llama.gguf");
  const ModelConfig c = gguf_model_config(g);
  const ModelConfig hf = load_model_config(test::data_dir() / "models" / "llama3");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.num_layers, 1);
  test::expect_same_hyper_parameters(c, hf);
}

TEST(GgufModel, TinyLlamaLogitsMatchSafetensorsLoad) {
  Context ctx(Device::cpu());
  const auto dir = test::data_dir() / "models" / "llama3";
  const GgufFile g = GgufFile::open(gguf_dir() / "tiny_llama.gguf");
  ModelConfig config = load_model_config(dir);
  config.num_layers = 1;  // the GGUF holds layer 0
  config.layer_window.resize(1);
  const SafeTensors st = SafeTensors::open(dir);
  const GgufWeights names(g, gguf_model_config(g));
  auto reference = create_model(config, RoundedLikeGguf(st, g, names), Device::cpu(), DType::f32);
  auto model = load_model(gguf_dir() / "tiny_llama.gguf", Device::cpu(), DType::f32);
  ASSERT_EQ(model->config().vocab_size, config.vocab_size);
  // 40 tokens reach well past the llama3 original context (32) of the fixture's rope scaling.
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % config.vocab_size);
  const std::vector<float> want = all_logits(*reference, ctx, tokens);
  const std::vector<float> got = all_logits(*model, ctx, tokens);
  const double err = test::relative_rms_error(got, want);
  std::cout << "[tiny llama gguf vs safetensors] rel RMS " << err << "\n";
  EXPECT_LE(err, 1e-5);

  // Without undoing llama.cpp's q/k permutation the logits would differ a lot: the check above
  // can fail. (Sanity: the permutation is not the identity for this head_dim.)
  std::vector<float> rows(16);
  for (int i = 0; i < 16; ++i) rows[static_cast<size_t>(i)] = static_cast<float>(i);
  unpermute_gguf_qk_rows(rows, 1, 16, 1);
  // GGUF row 2i+s holds HF row s*8+i: HF row 1 (s=0, i=1) comes from GGUF row 2.
  EXPECT_EQ(rows[1], 2.0f);
  EXPECT_EQ(rows[8], 1.0f);
}

// tests/data/gguf/tiny_qwen3_moe.gguf: the qwen3_moe golden fixture in llama.cpp's qwen3moe
// layout (tools/gguf/make_fixtures.py): stacked expert tensors, a router per MoE layer, layer 1
// dense.
TEST(GgufModel, TinyQwen3MoeConfigFromMetadata) {
  const GgufFile g = GgufFile::open(gguf_dir() / "tiny_qwen3_moe.gguf");
  const ModelConfig c = gguf_model_config(g);
  const ModelConfig hf = load_model_config(test::data_dir() / "models" / "qwen3_moe");
  EXPECT_EQ(c.architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.num_layers, hf.num_layers);
  test::expect_same_hyper_parameters(c, hf);
  EXPECT_EQ(c.num_experts, hf.num_experts);
  EXPECT_EQ(c.num_experts_per_tok, hf.num_experts_per_tok);
  EXPECT_EQ(c.moe_intermediate_size, hf.moe_intermediate_size);
  EXPECT_EQ(c.norm_topk_prob, hf.norm_topk_prob);
  EXPECT_EQ(c.layer_moe, hf.layer_moe);
}

TEST(GgufModel, TinyQwen3MoeLogitsMatchSafetensorsLoad) {
  Context ctx(Device::cpu());
  const auto dir = test::data_dir() / "models" / "qwen3_moe";
  const GgufFile g = GgufFile::open(gguf_dir() / "tiny_qwen3_moe.gguf");
  const ModelConfig config = load_model_config(dir);
  const SafeTensors st = SafeTensors::open(dir);
  const GgufWeights names(g, gguf_model_config(g));
  // Each expert is its own slice of the stacked tensor.
  EXPECT_EQ(names.gguf_name("model.layers.2.mlp.experts.5.up_proj.weight"),
            "blk.2.ffn_up_exps.weight");
  EXPECT_EQ(names.shape_of("model.layers.2.mlp.experts.5.down_proj.weight"),
            (Shape{config.hidden_size, config.moe_intermediate_size}));
  EXPECT_FALSE(names.contains("model.layers.1.mlp.experts.0.up_proj.weight"));  // dense layer
  auto reference = create_model(config, RoundedLikeGguf(st, g, names), Device::cpu(), DType::f32);
  auto model = load_model(gguf_dir() / "tiny_qwen3_moe.gguf", Device::cpu(), DType::f32);
  // The fixture's longest golden prompt (74 tokens).
  const std::vector<int32_t> tokens =
      to_vector<int32_t>(SafeTensors::open(dir / "goldens.safetensors").get("p2.tokens"));
  const std::vector<float> want = all_logits(*reference, ctx, tokens);
  const std::vector<float> got = all_logits(*model, ctx, tokens);
  const double err = test::relative_rms_error(got, want);
  std::cout << "[tiny qwen3 moe gguf vs safetensors] rel RMS " << err << "\n";
  EXPECT_LE(err, 1e-5);
}

// A weight source that hides block-quantized storage: every weight dequantized.
class DequantizedOnly final : public WeightSource {
 public:
  explicit DequantizedOnly(const WeightSource& w) : w_(w) {}
  bool contains(const std::string& name) const override { return w_.contains(name); }
  Tensor get(const std::string& name) const override { return w_.get(name); }
  Shape shape_of(const std::string& name) const override { return w_.shape_of(name); }
  std::string origin() const override { return w_.origin(); }

 private:
  const WeightSource& w_;
};

// tiny_qwen3_moe.gguf with every stacked expert tensor re-encoded as Q8_0 (written here with
// dspark's encoder and writer): each expert's blocks are its slice of the stacked tensor, and the
// model that keeps them as blocks matches the one given the same weights dequantized, up to the
// 8-bit rounding of activations that block-quantized linear does (ops/matmul.h).
TEST(GgufModel, TinyQwen3MoeQuantizedExperts) {
  const GgufFile src = GgufFile::open(gguf_dir() / "tiny_qwen3_moe.gguf");
  const std::vector<std::pair<std::string, GgufValue>> meta(src.metadata().begin(),
                                                            src.metadata().end());
  std::vector<GgufTensorOut> outs;
  for (const GgufTensorInfo& t : src.tensors()) {
    const bool experts = t.name.ends_with("_exps.weight");
    outs.push_back({t.name, experts ? GgmlType::q8_0 : t.type, t.shape});
  }
  const auto path = std::filesystem::temp_directory_path() /
                    fmt::format("dspark_tiny_qwen3_moe_q8_{}.gguf", ::getpid());
  write_gguf(path, meta, outs, [&](size_t i, uint8_t* dst) {
    const GgufTensorInfo& t = src.tensors()[i];
    if (outs[i].type == GgmlType::q8_0) {
      const std::vector<float> v = src.dequantize(t.name);
      quantize_blocks(QuantType::q8_0, v.data(), t.numel / 32, dst);
    } else {
      std::memcpy(dst, src.data(t), t.bytes);
    }
  });
  const GgufFile q = GgufFile::open(path);
  std::filesystem::remove(path);  // the mapping stays valid
  const ModelConfig config = gguf_model_config(q);
  const GgufWeights weights(q, config);
  for (const std::string name : {"model.layers.0.mlp.experts.0.gate_proj.weight",
                                 "model.layers.2.mlp.experts.5.up_proj.weight",
                                 "model.layers.3.mlp.experts.7.down_proj.weight"}) {
    const std::optional<QuantizedView> v = weights.get_quantized(name);
    ASSERT_TRUE(v.has_value()) << name;
    EXPECT_EQ(v->quant, QuantType::q8_0);
    EXPECT_EQ((Shape{v->n, v->k}), weights.shape_of(name));
    std::vector<float> from_blocks(static_cast<size_t>(v->n * v->k));
    dequantize_to_f32(GgmlType::q8_0, static_cast<const uint8_t*>(v->blocks.data()), v->n * v->k,
                      from_blocks.data(), name);
    EXPECT_EQ(from_blocks, to_vector<float>(weights.get(name))) << name;
  }
  Context ctx(Device::cpu());
  auto blocks = create_model(config, weights, Device::cpu(), DType::f32);
  auto dense = create_model(config, DequantizedOnly(weights), Device::cpu(), DType::f32);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % config.vocab_size);
  const double err =
      test::relative_rms_error(all_logits(*blocks, ctx, tokens), all_logits(*dense, ctx, tokens));
  std::cout << "[tiny qwen3 moe, Q8_0 experts as blocks vs dequantized] rel RMS " << err << "\n";
  EXPECT_GT(err, 0.0);  // the experts did run as blocks (activations rounded to 8 bits)
  EXPECT_LE(err, 2e-2);
}

TEST(GgufModel, PathResolution) {
  EXPECT_FALSE(resolve_gguf_model(test::data_dir() / "models" / "llama3").has_value());
  EXPECT_EQ(*resolve_gguf_model(gguf_dir() / "tiny_llama.gguf"), gguf_dir() / "tiny_llama.gguf");
  try {
    (void)resolve_gguf_model(gguf_dir());  // several .gguf files, no config.json
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("tiny_llama.gguf"), std::string::npos) << e.what();
  }
  // A non-llama architecture is unsupported, naming it.
  try {
    (void)load_model(gguf_dir() / "dequant.gguf", Device::cpu(), DType::f32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("'test'"), std::string::npos) << e.what();
  }
}

// deepseek2 metadata as llama.cpp's converter writes it (no tensors: every layer dense), read back
// through a file: the MLA sizes from the *_mla keys, YaRN's mscale_all_dim from the log
// multiplier, block_count less the next-token layers, DeepSeek MoE's keys; softmax routing
// (DeepSeek-V2's) and a MoE layer without its router are refused.
ModelConfig deepseek2_config(int64_t gating, int64_t dense_layers) {
  return test::config_from_metadata(test::deepseek_metadata("deepseek2", gating, dense_layers));
}

TEST(GgufModel, Deepseek2ConfigFromMetadata) {
  const ModelConfig c = deepseek2_config(2, 2);
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.kv_lora_rank, 32);
  EXPECT_EQ(c.qk_nope_head_dim, 16);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.v_head_dim, 16);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_TRUE(c.rope_interleave);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale, 1.0);
  EXPECT_NEAR(c.rope_scaling.mscale_all_dim, 0.8, 1e-6);  // 0.08 stored as f32
  EXPECT_TRUE(c.moe_sigmoid_routing);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_NEAR(c.routed_scaling_factor, 2.5, 1e-6);
  EXPECT_EQ(c.layer_moe, (std::vector<bool>{false, false}));

  for (const auto& [gating, dense, kind, needle] :
       {std::tuple{int64_t{1}, int64_t{2}, ErrorKind::unsupported, "expert_gating_func 1"},
        std::tuple{int64_t{2}, int64_t{1}, ErrorKind::io, "blk.1.ffn_gate_inp.weight"}}) {
    try {
      (void)deepseek2_config(gating, dense);
      ADD_FAILURE() << "expected an error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

// A GGUF file's weights with their quantized storage hidden: every tensor dequantized to f32.
class DequantizedGguf final : public WeightSource {
 public:
  explicit DequantizedGguf(const GgufWeights& w) : w_(w) {}
  bool contains(const std::string& name) const override { return w_.contains(name); }
  Tensor get(const std::string& name) const override { return w_.get(name); }
  std::string origin() const override { return w_.origin(); }

 private:
  const GgufWeights& w_;
};

void check_smollm2_logits(Model& m, Context& ctx, double tolerance, const std::string& what);

TEST(GgufModel, SmolLM2LogitsMatchTransformers) {
  const auto path = smollm2_path();
  if (!std::filesystem::exists(path)) {
    std::cout << "SKIPPED: " << path << " not found (scripts/fetch_default_model.sh)\n";
    GTEST_SKIP() << path << " not found (scripts/fetch_default_model.sh)";
  }
  Context ctx(Device::cpu());
  const GgufFile file = GgufFile::open(path);
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  const DequantizedGguf dequantized(weights);
  // The weights dequantized at load (the reference's own computation), then as dspark runs the
  // file: Q4_1 / Q8_0 blocks in memory, products with 8-bit rounded activations (ops/matmul.h).
  for (const bool native : {false, true}) {
    auto model = native ? create_model(config, weights, Device::cpu(), DType::f32)
                        : create_model(config, dequantized, Device::cpu(), DType::f32);
    check_smollm2_logits(*model, ctx, native ? 1.2e-1 : 1e-4, native ? "blocks" : "dequantized");
  }
}

void check_smollm2_logits(Model& m, Context& ctx, double tolerance, const std::string& what) {
  Model* model = &m;
  const SafeTensors ref = SafeTensors::open(gguf_dir() / "smollm2_logits_golden.safetensors");
  for (int p = 0; p < 3; ++p) {
    const std::string k = "prompt" + std::to_string(p);
    const std::vector<int32_t> ids = to_vector<int32_t>(ref.get(k + ".ids"));
    const std::vector<int32_t> vocab_ids = to_vector<int32_t>(ref.get(k + ".vocab_ids"));
    const std::vector<float> want = to_vector<float>(ref.get(k + ".logits"));
    const std::vector<float> all = all_logits(*model, ctx, ids);
    const int64_t v = model->config().vocab_size;
    std::vector<float> got;
    size_t best_got = 0, best_want = 0;
    for (size_t i = 0; i < vocab_ids.size(); ++i) {
      got.push_back(
          all[static_cast<size_t>((static_cast<int64_t>(ids.size()) - 1) * v + vocab_ids[i])]);
      if (got[i] > got[best_got]) best_got = i;
      if (want[i] > want[best_want]) best_want = i;
    }
    const double err = test::relative_rms_error(got, want);
    std::cout << "[SmolLM2 Q4_1 vs transformers, " << what << "] prompt " << p << ": rel RMS "
              << err << ", max abs " << test::max_abs_error(got, want) << "\n";
    EXPECT_LE(err, tolerance) << what << " prompt " << p;
    EXPECT_EQ(vocab_ids[best_got], vocab_ids[best_want]) << what << " argmax of prompt " << p;
  }
}

}  // namespace
}  // namespace dspark
