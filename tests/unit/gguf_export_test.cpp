// dspark quantize --format q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k and the mixes q4_k_m|q5_k_m
// (model/gguf_export.h): the tiny golden Llama 3 written as a GGUF `llama` file (Qwen2, Qwen3 and
// Qwen3-MoE as theirs) loads through load_model (a directory holding model.gguf), keeps its
// blocks, decodes the greedy tokens of its dequantized twin (up to near-ties) and stays close to
// the float checkpoint it came from (q/k row order, names, hyper-parameters and rope factors
// right); its tokenizer encodes as the checkpoint's tokenizer.json does; the mixes' type of every
// weight (llama-quantize's rules) and mixed files' decoding; the experts' stacks; the refusals.
// The blocks themselves are checked against the gguf package in tests/cli/quantize_test.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/gguf_fixtures.h"
#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/engine/generate.h"
#include "dspark/io/gguf.h"
#include "dspark/io/safetensors.h"
#include "dspark/io/tokenizer.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_export.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {
namespace fs = std::filesystem;

fs::path export_to(const std::string& tag, const fs::path& src, const GgufFormat& format) {
  const fs::path out =
      fs::temp_directory_path() / fmt::format("dspark_gguf_export_{}_{}", tag, ::getpid());
  fs::remove_all(out);
  QuantizeOptions o;
  o.input = src;
  o.output = out;
  export_gguf(o, format, nullptr);
  return out;
}
fs::path export_to(const std::string& tag, const fs::path& src, QuantType type) {
  return export_to(tag, src, GgufFormat{type, false});
}

// Random f32 weights of `shapes` as dir/model.safetensors.
void write_random_weights(const fs::path& dir,
                          const std::vector<std::pair<std::string, Shape>>& shapes) {
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> entries;
  uint32_t seed = 1;
  for (const auto& [name, shape] : shapes) {
    // Norm weights near 1, matrices with the std of a trained model's (1 / sqrt(fan-in)).
    OwnedTensor t = test::random_tensor(DType::f32, shape, seed++,
                                        shape.size() == 1 ? 0.1f : 1.0f / std::sqrt(256.0f));
    if (shape.size() == 1) {
      auto* v = static_cast<float*>(t.view().data());
      for (int64_t i = 0; i < shape[0]; ++i) v[i] += 1.0f;
    }
    owned.push_back(std::move(t));
  }
  for (size_t i = 0; i < shapes.size(); ++i) entries.emplace_back(shapes[i].first, owned[i].view());
  write_safetensors(dir / "model.safetensors", entries);
}

// A random model shaped for the k-quants' blocks of 256 values (hidden 256, 4 heads of 64, 2 KV
// heads, 2 layers) with the tokenizer and config of tests/data/models/`fixture`: "llama3" (its
// rope scaling; MLP 512) or, with `experts` > 0, "qwen3_moe" (q/k norms; `experts` experts of 256,
// top 2, every layer sparse), written to a temporary directory.
fs::path write_wide_model(const std::string& tag, const std::string& fixture, int64_t experts) {
  const fs::path src = test::data_dir() / "models" / fixture;
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("dspark_gguf_wide_{}_{}", tag, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(src / f, dir / f);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
  const int64_t h = 256, inter = 512, hd = 64, nh = 4, nkv = 2, layers = 2, expert_inter = 256;
  const int64_t vocab = config["vocab_size"].get<int64_t>();
  config["hidden_size"] = h;
  config["intermediate_size"] = inter;
  config["head_dim"] = hd;
  config["num_attention_heads"] = nh;
  config["num_key_value_heads"] = nkv;
  config["num_hidden_layers"] = layers;
  if (experts > 0) {
    config["moe_intermediate_size"] = expert_inter;
    config["num_local_experts"] = experts;
    config["mlp_only_layers"] = nlohmann::json::array();
  }
  std::ofstream(dir / "config.json") << config.dump(2);
  std::vector<std::pair<std::string, Shape>> shapes = {{"model.embed_tokens.weight", {vocab, h}},
                                                       {"lm_head.weight", {vocab, h}},
                                                       {"model.norm.weight", {h}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    shapes.insert(shapes.end(), {{p + "input_layernorm.weight", {h}},
                                 {p + "post_attention_layernorm.weight", {h}},
                                 {p + "self_attn.q_proj.weight", {nh * hd, h}},
                                 {p + "self_attn.k_proj.weight", {nkv * hd, h}},
                                 {p + "self_attn.v_proj.weight", {nkv * hd, h}},
                                 {p + "self_attn.o_proj.weight", {h, nh * hd}}});
    if (experts == 0) {
      shapes.insert(shapes.end(), {{p + "mlp.gate_proj.weight", {inter, h}},
                                   {p + "mlp.up_proj.weight", {inter, h}},
                                   {p + "mlp.down_proj.weight", {h, inter}}});
      continue;
    }
    shapes.insert(shapes.end(), {{p + "self_attn.q_norm.weight", {hd}},
                                 {p + "self_attn.k_norm.weight", {hd}},
                                 {p + "mlp.gate.weight", {experts, h}}});
    for (int64_t e = 0; e < experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
      shapes.insert(shapes.end(), {{x + "gate_proj.weight", {expert_inter, h}},
                                   {x + "up_proj.weight", {expert_inter, h}},
                                   {x + "down_proj.weight", {h, expert_inter}}});
    }
  }
  write_random_weights(dir, shapes);
  return dir;
}
fs::path write_wide_llama(const std::string& tag) {
  return write_wide_model(tag, "llama3", 0);
}

// The GGUF file in `out` loads with its blocks and decodes the greedy tokens of its dequantized
// twin (up to near-ties), whose last logits are within `vs_float` relative RMS of the float
// checkpoint `src`'s, for `prompts` prompts. At least 90% of all their tokens are the twin's
// argmax: how often a near-tie falls on one prompt's 24 tokens varies with the weights' values
// (20 prompts of the Q6_K file: 20-24 of 24, 22.9 on average).
void expect_decodes_like_twin(const fs::path& out, const fs::path& src, double vs_float,
                              int prompts, const std::string& what) {
  std::unique_ptr<Model> model = load_model(out, Device::cpu(), DType::f32);
  EXPECT_TRUE(model->lm_head().quantized());
  const GgufFile file = GgufFile::open(out / "model.gguf");
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  std::unique_ptr<Model> twin =
      create_model(config, test::DequantizedView(weights), Device::cpu(), DType::f32);
  std::unique_ptr<Model> original = load_model(src, Device::cpu(), DType::f32);
  Context ctx(Device::cpu());
  int exact = 0;
  for (int salt = 0; salt < prompts; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(config.vocab_size, salt);
    const double err = test::relative_rms_error(test::last_position_logits(*twin, ctx, prompt),
                                                test::last_position_logits(*original, ctx, prompt));
    std::cout << what << " prompt " << salt << ": relative RMS to the float model " << err << "\n";
    EXPECT_LE(err, vs_float) << what << " prompt " << salt;
    exact += test::expect_twins_greedy_tokens(*model, *twin, ctx, prompt, true, false);
  }
  EXPECT_GE(exact, prompts * 24 * 9 / 10) << what;
}

// Each named tensor of `file` has its type.
void expect_types(const GgufFile& file,
                  std::initializer_list<std::pair<const char*, GgmlType>> types) {
  for (const auto& [name, type] : types) EXPECT_EQ(file.tensor(name).type, type) << name;
}

// A Q4_K_M file of write_wide_model(`fixture`, `experts`) holds the mix's `types`, loads, keeps
// its blocks (the LM head Q6_K) and decodes like its dequantized twin, within Q4_K's error of the
// float model.
void expect_q4_k_m_file(const std::string& fixture, int64_t experts,
                        std::initializer_list<std::pair<const char*, GgmlType>> types) {
  const std::string tag = "q4_k_m_" + fixture;
  const fs::path src = write_wide_model(tag, fixture, experts);
  const fs::path out = export_to(tag, src, GgufFormat{QuantType::q4_k, true});
  expect_types(GgufFile::open(out / "model.gguf"), types);
  EXPECT_EQ(load_model(out, Device::cpu(), DType::f32)->lm_head().quant, QuantType::q6_k);
  expect_decodes_like_twin(out, src, 0.6, 2, tag);
  fs::remove_all(out);
  fs::remove_all(src);
}

struct ExportCase {
  const char* name;
  QuantType type;
  // Relative RMS of the last logits against the float checkpoint's: 4 bits move the tiny random
  // model's logits by 20-26% (as MLX's 4 bits do, tests/unit/quantize_checkpoint_test.cpp), 8
  // bits by 1.5%; the wide random model of the k-quants amplifies its weights' error more (Q4_K
  // weights within 8% RMS, tests/cli/quantize_test.sh: logits 24-46% over 20 prompts, under
  // the plain range rule of 12e524a or the scale search; Q5_K 13-29%; Q6_K 2%: logits 6-12%).
  double vs_float;
};

class GgufExport : public ::testing::TestWithParam<ExportCase> {};

TEST_P(GgufExport, LoadsAndDecodesLikeItsTwinAndTheFloatModel) {
  const ExportCase c = GetParam();
  const bool k_quant = quant_block(c.type).elements == 256;
  const fs::path src = k_quant ? write_wide_llama(c.name) : test::data_dir() / "models" / "llama3";
  const fs::path out = export_to(c.name, src, c.type);
  ASSERT_TRUE(fs::exists(out / "model.gguf"));
  EXPECT_EQ(load_model(out, Device::cpu(), DType::f32)->lm_head().quant, c.type);
  expect_decodes_like_twin(out, src, c.vs_float, 3, c.name);
  fs::remove_all(out);
  if (k_quant) fs::remove_all(src);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufExport,
                         ::testing::Values(ExportCase{"q8_0", QuantType::q8_0, 2e-2},
                                           ExportCase{"q4_0", QuantType::q4_0, 0.35},
                                           ExportCase{"q4_1", QuantType::q4_1, 0.35},
                                           ExportCase{"q5_0", QuantType::q5_0, 0.2},
                                           ExportCase{"q5_1", QuantType::q5_1, 0.2},
                                           ExportCase{"q4_k", QuantType::q4_k, 0.6},
                                           ExportCase{"q5_k", QuantType::q5_k, 0.3},
                                           ExportCase{"q6_k", QuantType::q6_k, 0.12}),
                         [](const auto& p) { return std::string(p.param.name); });

// llama-quantize's medium mix on a 32-layer model: the head and the tied embedding in Q6_K; v_proj
// and down_proj in Q6_K in layers 0-3, 6, 9, ..., 27 and 28-31, in the base type elsewhere; the
// other weights in the base type; a row that is not a multiple of 256 in the fallback type, of 32
// nowhere (F32).
TEST(GgufExportMix, ChoosesLlamaQuantizesTypes) {
  const GgufFormat m{QuantType::q4_k, true};
  EXPECT_EQ(gguf_weight_type(m, "lm_head.weight", 4096, {32, false}), QuantType::q6_k);
  EXPECT_EQ(gguf_weight_type(m, "model.embed_tokens.weight", 4096, {32, false}), QuantType::q4_k);
  EXPECT_EQ(gguf_weight_type(m, "model.embed_tokens.weight", 4096, {32, true}), QuantType::q6_k);
  const std::vector<int> more = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
  for (int l = 0; l < 32; ++l) {
    const bool more_bits = std::find(more.begin(), more.end(), l) != more.end();
    const QuantType want = more_bits ? QuantType::q6_k : QuantType::q4_k;
    const std::string p = fmt::format("model.layers.{}.", l);
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.v_proj.weight", 4096, {32, false}), want) << l;
    EXPECT_EQ(gguf_weight_type(m, p + "mlp.down_proj.weight", 14336, {32, false}), want) << l;
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.q_proj.weight", 4096, {32, false}),
              QuantType::q4_k);
    EXPECT_EQ(gguf_weight_type(m, p + "mlp.up_proj.weight", 4096, {32, false}), QuantType::q4_k);
  }
  const GgufFormat m5{QuantType::q5_k, true};
  EXPECT_EQ(gguf_weight_type(m5, "model.layers.5.self_attn.o_proj.weight", 4096, {32, false}),
            QuantType::q5_k);
  EXPECT_EQ(gguf_weight_type(m5, "model.layers.31.mlp.down_proj.weight", 4096, {32, false}),
            QuantType::q6_k);
  // Rows of 160 values: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; of 48: F32.
  EXPECT_EQ(gguf_weight_type(m, "model.layers.5.mlp.up_proj.weight", 160, {32, false}),
            QuantType::q5_0);
  EXPECT_EQ(gguf_weight_type(m5, "model.layers.5.mlp.up_proj.weight", 160, {32, false}),
            QuantType::q5_1);
  EXPECT_EQ(gguf_weight_type(m, "lm_head.weight", 160, {32, false}), QuantType::q8_0);
  EXPECT_EQ(gguf_weight_type(m, "lm_head.weight", 48, {32, false}), std::nullopt);
  // Single-type formats: every weight in the type, F32 when the row does not fit its blocks.
  const GgufFormat pure{QuantType::q4_k, false};
  EXPECT_EQ(gguf_weight_type(pure, "lm_head.weight", 4096, {32, false}), QuantType::q4_k);
  EXPECT_EQ(gguf_weight_type(pure, "model.layers.0.mlp.down_proj.weight", 160, {32, false}),
            std::nullopt);
  // A MoE router stays F32 in every format, as llama-quantize leaves `ffn_gate_inp`.
  EXPECT_EQ(gguf_weight_type(pure, "model.layers.0.mlp.gate.weight", 4096, {32, false, 128}),
            std::nullopt);
  EXPECT_EQ(gguf_weight_type(m, "model.layers.0.mlp.gate.weight", 4096, {32, false, 128}),
            std::nullopt);
  EXPECT_EQ(gguf_format("q4_k_m")->base, QuantType::q4_k);
  EXPECT_TRUE(gguf_format("q5_k_m")->medium);
  EXPECT_FALSE(gguf_format("q5_k")->medium);
  EXPECT_FALSE(gguf_format("q3_k_m").has_value());
}

// The mixes' rules for MoE and 70B models (llama-quantize's): the experts' and shared experts' down
// projections follow down_proj's layers; with 8 experts k_proj and v_proj are Q8_0 and (Q4_K_M)
// o_proj Q5_K; with other counts (Qwen3-30B-A3B's 128) the dense rules hold; a 70B model's v_proj
// is Q5_K where a dense model's is Q4_K.
TEST(GgufExportMix, ChoosesLlamaQuantizesTypesForMoeAnd70B) {
  const GgufFormat m{QuantType::q4_k, true}, m5{QuantType::q5_k, true};
  const GgufMixModel moe48{48, false, 128}, moe8{32, false, 8};
  for (int l : {0, 5, 6, 8, 44}) {
    const QuantType want =
        l == 6 ? QuantType::q4_k : QuantType::q6_k;  // 48 layers: 0-5, 8, ..., 42-47
    const std::string p = fmt::format("model.layers.{}.", l);
    EXPECT_EQ(gguf_weight_type(m, p + "mlp.experts.17.down_proj.weight", 768, moe48), want) << l;
    EXPECT_EQ(gguf_weight_type(m, p + "mlp.shared_experts.down_proj.weight", 768, moe48), want)
        << l;
    EXPECT_EQ(gguf_weight_type(m, p + "mlp.experts.17.up_proj.weight", 2048, moe48),
              QuantType::q4_k);
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.v_proj.weight", 2048, moe48), want) << l;
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.k_proj.weight", 2048, moe48), QuantType::q4_k);
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.o_proj.weight", 4096, moe48), QuantType::q4_k);
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.k_proj.weight", 4096, moe8), QuantType::q8_0);
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.v_proj.weight", 4096, moe8), QuantType::q8_0);
    EXPECT_EQ(gguf_weight_type(m, p + "self_attn.o_proj.weight", 4096, moe8), QuantType::q5_k);
    EXPECT_EQ(gguf_weight_type(m5, p + "self_attn.o_proj.weight", 4096, moe8), QuantType::q5_k);
    EXPECT_EQ(gguf_weight_type(m5, p + "self_attn.v_proj.weight", 4096, moe8), QuantType::q8_0);
  }
  const GgufMixModel dense80{80, false, 0, false}, llama70b{80, false, 0, true};
  EXPECT_EQ(gguf_weight_type(m, "model.layers.11.self_attn.v_proj.weight", 8192, dense80),
            QuantType::q4_k);
  EXPECT_EQ(gguf_weight_type(m, "model.layers.11.self_attn.v_proj.weight", 8192, llama70b),
            QuantType::q5_k);
  EXPECT_EQ(gguf_weight_type(m, "model.layers.12.self_attn.v_proj.weight", 8192, llama70b),
            QuantType::q6_k);
  EXPECT_EQ(gguf_weight_type(m5, "model.layers.11.self_attn.v_proj.weight", 8192, llama70b),
            QuantType::q5_k);
  EXPECT_EQ(gguf_weight_type(m, "model.layers.11.mlp.down_proj.weight", 28672, llama70b),
            QuantType::q4_k);
}

// The tiny golden Qwen3-MoE (8 experts, layer 1 dense: mlp_only_layers) in Q8_0: a `qwen3moe`
// file with the expert keys, each projection's experts stacked in one [experts, rows, cols]
// tensor, the router F32, no router in the dense layer; it decodes like its dequantized twin,
// close to the float checkpoint.
TEST(GgufExportMoe, WritesQwen3MoeFile) {
  const fs::path src = test::data_dir() / "models" / "qwen3_moe";
  const fs::path out = export_to("qwen3_moe", src, QuantType::q8_0);
  const GgufFile file = GgufFile::open(out / "model.gguf");
  EXPECT_EQ(file.get_string("general.architecture"), "qwen3moe");
  EXPECT_EQ(file.get_int("qwen3moe.expert_count"), 8);
  EXPECT_EQ(file.get_int("qwen3moe.expert_used_count"), 2);
  EXPECT_EQ(file.get_int("qwen3moe.expert_feed_forward_length"), 32);
  EXPECT_EQ(file.get_int("qwen3moe.feed_forward_length"), 160);
  EXPECT_EQ(file.tensor("blk.0.ffn_gate_exps.weight").shape, (Shape{8, 32, 64}));
  EXPECT_EQ(file.tensor("blk.0.ffn_down_exps.weight").shape, (Shape{8, 64, 32}));
  EXPECT_EQ(file.tensor("blk.0.ffn_up_exps.weight").type, GgmlType::q8_0);
  EXPECT_EQ(file.tensor("blk.0.ffn_gate_inp.weight").type, GgmlType::f32);
  EXPECT_FALSE(file.contains("blk.1.ffn_gate_inp.weight"));
  EXPECT_EQ(file.tensor("blk.1.ffn_down.weight").type, GgmlType::q8_0);
  EXPECT_TRUE(file.contains("blk.0.attn_k_norm.weight"));
  expect_decodes_like_twin(out, src, 5e-2, 2, "qwen3_moe");
  fs::remove_all(out);
}

// A Q4_K_M file of a wide random Qwen3-MoE of 8 experts (layer 1 of 2 gets more bits) holds the
// mix's types and decodes like its dequantized twin, within Q4_K's error of the float model.
TEST(GgufExportMoe, WritesAndDecodesAQ4KMQwen3MoeFile) {
  expect_q4_k_m_file("qwen3_moe", 8,
                     {{"output.weight", GgmlType::q6_k},
                      {"blk.0.attn_q.weight", GgmlType::q4_k},
                      {"blk.0.attn_k.weight", GgmlType::q8_0},
                      {"blk.1.attn_v.weight", GgmlType::q8_0},
                      {"blk.0.attn_output.weight", GgmlType::q5_k},
                      {"blk.0.ffn_down_exps.weight", GgmlType::q4_k},
                      {"blk.1.ffn_down_exps.weight", GgmlType::q6_k},
                      {"blk.1.ffn_gate_exps.weight", GgmlType::q4_k},
                      {"blk.1.ffn_gate_inp.weight", GgmlType::f32}});
}

// DeepSeek-V3 (`deepseek2`: MLA, kv_b_proj split into attn_k_b / attn_v_b, YaRN's log
// multiplier), GLM-4.5 (`glm4moe`) and GLM-5 (`glm-dsa`: the indexer), with and without their
// next-token layer, in Q8_0: the file holds the tensors and metadata of the independent reference
// converter (tools/gguf/make_fixtures.py --deepseek-moe, laid out as llama.cpp's
// convert_hf_to_gguf.py writes them): every reference key with its value, every tensor with its
// name and shape, the same bytes where both wrote the same type (Q8_0 as gguf.quants.quantize,
// F32), the same values within Q8_0's rounding where the reference left a 3-D tensor F32 that
// llama-quantize quantizes (attn_v_b); and it decodes like its dequantized twin, near the float
// checkpoint.
struct DeepseekCase {
  const char* fixture;
  const char* arch;
  // Relative RMS of the last logits against the float checkpoint's. 8-bit rounding moves the tiny
  // GLM-4.5's by up to 6.5% on these prompts (its routers' near ties), GLM-5's by 20% on one (its
  // indexers' top 6 of the prompt's keys flip, as in spec_mtp_gguf_test.cpp); the reference
  // converter's Q8_0 bytes are the same.
  double vs_float;
};
class GgufExportDeepseek : public ::testing::TestWithParam<DeepseekCase> {};

TEST_P(GgufExportDeepseek, MatchesTheReferenceConverter) {
  const DeepseekCase k = GetParam();
  const fs::path src = test::data_dir() / "models" / k.fixture;
  const fs::path out = export_to(k.fixture, src, QuantType::q8_0);
  const GgufFile ours = GgufFile::open(out / "model.gguf");
  EXPECT_EQ(ours.get_string("general.architecture"), k.arch);
  if (test::python_has_gguf()) {
    const fs::path ref_path = out.string() + "_reference.gguf";
    test::write_deepseek_moe_gguf(src, ref_path, k.arch, true);
    ASSERT_FALSE(HasFatalFailure());
    const GgufFile ref = GgufFile::open(ref_path);
    for (const auto& [key, value] : ref.metadata()) {
      if (key.starts_with("general.") || key.starts_with("tokenizer.")) continue;
      ASSERT_TRUE(ours.has(key)) << key;
      if (value.is_array()) continue;
      if (value.type == GgufValue::Type::boolean) {
        EXPECT_EQ(ours.find(key)->as_bool(key), value.as_bool(key)) << key;
        continue;
      }
      if (value.type == GgufValue::Type::string) {
        EXPECT_EQ(ours.find(key)->as_string(key), value.as_string(key)) << key;
        continue;
      }
      EXPECT_NEAR(ours.find(key)->as_double(key), value.as_double(key),
                  1e-6 * std::abs(value.as_double(key)))
          << key;
    }
    EXPECT_EQ(ours.tensors().size(), ref.tensors().size());
    for (const GgufTensorInfo& r : ref.tensors()) {
      ASSERT_TRUE(ours.contains(r.name)) << r.name;
      const GgufTensorInfo& o = ours.tensor(r.name);
      EXPECT_EQ(o.shape, r.shape) << r.name;
      if (o.type == r.type) {
        EXPECT_EQ(std::memcmp(ours.data(o), ref.data(r), r.bytes), 0) << r.name;
        continue;
      }
      // The reference writes the 3-D attn_k_b / attn_v_b F32; llama-quantize quantizes them.
      EXPECT_TRUE(r.name.ends_with("attn_v_b.weight") || r.name.ends_with("attn_k_b.weight"))
          << r.name << " is " << ggml_type_name(o.type) << ", the reference's "
          << ggml_type_name(r.type);
      const int64_t n = r.shape.numel();
      std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      dequantize_to_f32(o.type, ours.data(o), n, a.data(), r.name);
      dequantize_to_f32(r.type, ref.data(r), n, b.data(), r.name);
      EXPECT_LE(test::relative_rms_error(a, b), 1e-2) << r.name;
    }
  } else {
    std::cout << "python3 with the gguf package missing: the reference comparison is skipped\n";
  }
  EXPECT_TRUE(ours.contains("blk.1.exp_probs_b.bias"));
  EXPECT_EQ(ours.tensor("blk.1.ffn_gate_inp.weight").type, GgmlType::f32);
  expect_decodes_like_twin(out, src, k.vs_float, 2, k.fixture);
  fs::remove_all(out);
  fs::remove(out.string() + "_reference.gguf");
}

INSTANTIATE_TEST_SUITE_P(Families, GgufExportDeepseek,
                         ::testing::Values(DeepseekCase{"deepseek_v3", "deepseek2", 5e-2},
                                           DeepseekCase{"deepseek_v3_mtp", "deepseek2", 5e-2},
                                           DeepseekCase{"glm4_moe", "glm4moe", 0.1},
                                           DeepseekCase{"glm4_moe_mtp", "glm4moe", 0.1},
                                           DeepseekCase{"glm_moe_dsa", "glm-dsa", 0.25},
                                           DeepseekCase{"glm_moe_dsa_mtp", "glm-dsa", 0.25}),
                         [](const auto& p) { return std::string(p.param.fixture); });

// A deepseek2 file keeps YaRN's mscale_all_dim only and is read back with mscale 1: the tiny
// DeepSeek-V3's YaRN with mscale 0 (or DeepSeek-V2's 0.707) beside its mscale_all_dim is refused,
// naming the values, and nothing is written.
TEST(GgufExportDeepseek, RefusesYarnItCannotReadBack) {
  const fs::path src = test::data_dir() / "models" / "deepseek_v3";
  const fs::path copy = fs::temp_directory_path() / fmt::format("dspark_gguf_yarn_{}", ::getpid());
  const fs::path out = fs::temp_directory_path() / fmt::format("dspark_gguf_yarn_o_{}", ::getpid());
  for (const double mscale : {0.0, 0.707}) {
    fs::remove_all(copy);
    fs::remove_all(out);
    fs::create_directories(copy);
    for (const auto& f : fs::directory_iterator(src))
      fs::copy_file(f.path(), copy / f.path().filename());
    nlohmann::json config = nlohmann::json::parse(std::ifstream(copy / "config.json"));
    ASSERT_EQ(config["rope_parameters"]["rope_type"], "yarn");  // transformers 5's key
    config["rope_parameters"]["mscale"] = mscale;
    std::ofstream(copy / "config.json") << config.dump();
    QuantizeOptions o;
    o.input = copy;
    o.output = out;
    try {
      export_gguf(o, QuantType::q8_0, nullptr);
      ADD_FAILURE() << "mscale " << mscale << " exported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("mscale_all_dim 0.8"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out)) << mscale;
  }
  fs::remove_all(copy);
}

// A MoE checkpoint with an expert's projection missing is refused naming the stack, and leaves no
// output behind.
TEST(GgufExportMoe, RefusesAMissingExpert) {
  const fs::path src = test::data_dir() / "models" / "qwen3_moe";
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("dspark_gguf_moe_gap_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(src / f, dir / f);
  const SafeTensors st = SafeTensors::open(src);
  std::vector<std::pair<std::string, Tensor>> entries;
  for (const std::string& name : st.names()) {
    if (name != "model.layers.2.mlp.experts.5.up_proj.weight")
      entries.emplace_back(name, st.get(name));
  }
  write_safetensors(dir / "model.safetensors", entries);
  const fs::path out =
      fs::temp_directory_path() / fmt::format("dspark_gguf_moe_gap_out_{}", ::getpid());
  fs::remove_all(out);
  QuantizeOptions o;
  o.input = dir;
  o.output = out;
  try {
    export_gguf(o, QuantType::q8_0, nullptr);
    ADD_FAILURE() << "exported without expert 5's up_proj";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("expert 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("blk.2.ffn_up_exps.weight"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

// A Q4_K_M file of the wide random model (2 layers: layer 1 gets more bits) holds the mix's types,
// loads, keeps its blocks and decodes like its dequantized twin, within Q4_K's error of the float
// model.
TEST(GgufExportMix, WritesAndDecodesAQ4KMFile) {
  expect_q4_k_m_file("llama3", 0,
                     {{"output.weight", GgmlType::q6_k},
                      {"token_embd.weight", GgmlType::q4_k},
                      {"blk.0.attn_v.weight", GgmlType::q4_k},
                      {"blk.1.attn_v.weight", GgmlType::q6_k},
                      {"blk.1.ffn_down.weight", GgmlType::q6_k},
                      {"blk.1.ffn_up.weight", GgmlType::q4_k}});
}

// Qwen2 (q/k/v biases, tied embeddings) and Qwen3 (q/k norms; and with YaRN rope scaling) as GGUF
// `qwen2` / `qwen3` files in Q8_0: the architecture is named, q/k rows stay as stored, the biases
// and norms are written (F32), YaRN's keys too, and the file decodes like its dequantized twin,
// close to the float checkpoint (YaRN's frequencies and attention factor read back as written).
TEST(GgufExportQwen, WritesQwen2AndQwen3Files) {
  for (const std::string fixture : {"qwen2", "qwen3", "qwen3_yarn"}) {
    const std::string arch = fixture == "qwen2" ? "qwen2" : "qwen3";
    const fs::path src = test::data_dir() / "models" / fixture;
    const fs::path out = export_to(fixture, src, QuantType::q8_0);
    const GgufFile file = GgufFile::open(out / "model.gguf");
    EXPECT_EQ(file.get_string("general.architecture"), arch);
    EXPECT_EQ(file.has("qwen3.rope.scaling.type"), fixture == "qwen3_yarn");
    if (fixture == "qwen3_yarn") {
      EXPECT_EQ(file.get_string("qwen3.rope.scaling.type"), "yarn");
      EXPECT_EQ(file.get_int("qwen3.rope.scaling.original_context_length"), 64);
      EXPECT_EQ(gguf_model_config(file).rope_scaling.factor, 4.0);
    }
    EXPECT_EQ(file.contains("blk.0.attn_q.bias"), arch == "qwen2");
    EXPECT_EQ(file.contains("blk.0.attn_q_norm.weight"), arch == "qwen3");
    EXPECT_EQ(file.contains("output.weight"), arch == "qwen3");  // Qwen2's fixture ties them
    expect_decodes_like_twin(out, src, 5e-2, 2, fixture);
    fs::remove_all(out);
  }
}

TEST(GgufExportTokenizer, EncodesAsTheCheckpoint) {
  const fs::path src = test::data_dir() / "models" / "llama3";
  const fs::path out = export_to("tok", src, QuantType::q8_0);
  const GgufFile file = GgufFile::open(out / "model.gguf");
  const Tokenizer a = Tokenizer::from_file(src), b = Tokenizer::from_gguf(file);
  for (const char* text :
       {"Hello world", "The cat sat on the mat. 12345 !!", "  spaced\n\nlines", "héllo wörld"}) {
    EXPECT_EQ(a.encode(text, true), b.encode(text, true)) << text;
    EXPECT_EQ(a.encode(text, false), b.encode(text, false)) << text;
  }
  EXPECT_EQ(gguf_eos_token_ids(file), load_model_config(src).eos_token_ids);
  fs::remove_all(out);
}

TEST(GgufExportErrors, RefusesWhatTheLlamaArchitectureCannotHold) {
  const fs::path out = fs::temp_directory_path() / fmt::format("dspark_gguf_no_{}", ::getpid());
  fs::remove_all(out);
  QuantizeOptions o;
  o.output = out;
  // An architecture dspark does not run (the tiny Llama's config renamed).
  const fs::path other = fs::temp_directory_path() / fmt::format("dspark_gguf_g2_{}", ::getpid());
  fs::remove_all(other);
  fs::create_directories(other);
  for (const auto& f : fs::directory_iterator(test::data_dir() / "models" / "llama3"))
    fs::copy_file(f.path(), other / f.path().filename());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(other / "config.json"));
  config["architectures"] = {"Gemma2ForCausalLM"};
  std::ofstream(other / "config.json") << config.dump();
  o.input = other;
  try {
    export_gguf(o, QuantType::q8_0, nullptr);
    ADD_FAILURE() << "Gemma2ForCausalLM exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Gemma2ForCausalLM"), std::string::npos) << e.what();
  }
  fs::remove_all(other);
  o.input = test::data_dir() / "mlx" / "llama3_q4_g32";
  try {
    export_gguf(o, QuantType::q8_0, nullptr);
    ADD_FAILURE() << "an MLX checkpoint exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(gguf_format_type("q2_k").has_value());
  EXPECT_EQ(gguf_format_type("q4_1"), QuantType::q4_1);
}

}  // namespace
}  // namespace dspark
