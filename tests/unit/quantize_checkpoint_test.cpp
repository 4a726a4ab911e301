// dspark quantize's library (model/quantize_checkpoint.h, io/mlx_quantize.h): the tiny golden
// Llama 3 quantized into MLX affine checkpoints loads through load_model, keeps its weights as
// one block per group (4 bits: Q4_1 / Q4_A64, 8 bits: Q8_A) and decodes the greedy tokens of its
// dequantized twin; shards load as one file;
// the refusals. The codes, scales and biases themselves are checked against a NumPy port of MLX's
// rule in tests/cli/quantize_test.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/mlx_quantize.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_export.h"
#include "dspark/model/mlx_weights.h"
#include "dspark/model/quantize_checkpoint.h"
#include "dspark/model/registry.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& tag) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("dspark_quantize_{}_{}", tag, ::getpid());
  fs::remove_all(dir);
  return dir;
}

fs::path llama3() {
  return test::data_dir() / "models" / "llama3";
}

QuantizeSummary quantize(const fs::path& in, const fs::path& out, MlxQuantSpec spec,
                         int64_t max_shard_bytes = int64_t{5} << 30) {
  QuantizeOptions o;
  o.input = in;
  o.output = out;
  o.spec = spec;
  o.max_shard_bytes = max_shard_bytes;
  return quantize_checkpoint(o, nullptr);
}

std::unique_ptr<Model> dequantized_twin(const fs::path& dir) {
  const SafeTensors st = SafeTensors::open(dir);
  const MlxWeights weights(st, *read_mlx_quantization(dir / "config.json"));
  return create_model(load_model_config(dir), test::DequantizedView(weights), Device::cpu(),
                      DType::f32);
}

TEST(MlxQuantizeRows, PinsTheEdgeFartherFromZeroAndRepresentsZero) {
  // One group of 32: min -1 (the edge), max 0.5; 4 bits: step 1.5 / 15 = 0.1, z = rint(-10) =
  // -10, scale = -1 / -10 = 0.1, bias = -1; 0 is code 10.
  std::vector<float> w(32, 0.0f);
  w[0] = -1.0f;
  w[1] = 0.5f;
  uint32_t words[4];
  float scale = 0, bias = 0;
  mlx_quantize_rows(w.data(), 1, 32, MlxQuantSpec{4, 32}, words, &scale, &bias);
  EXPECT_FLOAT_EQ(scale, -1.0f / -10.0f);
  EXPECT_EQ(bias, -1.0f);
  auto code = [&](int i) { return (words[i / 8] >> (4 * (i % 8))) & 0xF; };
  EXPECT_EQ(code(0), 0u);
  EXPECT_EQ(code(1), 15u);
  EXPECT_EQ(code(3), 10u);  // 0.0
  // Max farther from zero: the scale is negative and the bias the max.
  for (float& v : w) v = -v;
  mlx_quantize_rows(w.data(), 1, 32, MlxQuantSpec{4, 32}, words, &scale, &bias);
  EXPECT_LT(scale, 0.0f);
  EXPECT_EQ(bias, 1.0f);
  EXPECT_EQ(code(0), 0u);
  EXPECT_EQ(code(3), 10u);
}

struct QuantizeCase {
  const char* name;
  MlxQuantSpec spec;
  QuantType blocks;        // in memory (mlx_block_type)
  size_t n_not_divisible;  // down_proj (160 inputs) with groups of 64
};

class QuantizeLlama : public ::testing::TestWithParam<QuantizeCase> {};

TEST_P(QuantizeLlama, LoadsAndDecodesItsDequantizedTwinsTokens) {
  const QuantizeCase c = GetParam();
  const fs::path out = scratch(c.name);
  const QuantizeSummary s = quantize(llama3(), out, c.spec);
  EXPECT_EQ(s.not_divisible.size(), c.n_not_divisible);
  EXPECT_EQ(s.files.size(), 1u);
  EXPECT_TRUE(fs::exists(out / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  // 4 layers x 7 projections + embed_tokens + lm_head.
  EXPECT_EQ(s.n_quantized + static_cast<int64_t>(s.not_divisible.size()), 30);
  const std::optional<MlxQuantization> q = read_mlx_quantization(out / "config.json");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->defaults.bits, c.spec.bits);
  EXPECT_EQ(q->defaults.group_size, c.spec.group_size);
  for (const std::string& name : s.not_divisible)
    EXPECT_FALSE(q->spec_of(name.substr(0, name.size() - 7)).has_value()) << name;

  std::unique_ptr<Model> model = load_model(out, Device::cpu(), DType::f32);
  std::unique_ptr<Model> twin = dequantized_twin(out);
  std::unique_ptr<Model> original = load_model(llama3(), Device::cpu(), DType::f32);
  ASSERT_TRUE(model->lm_head().quantized());
  ASSERT_TRUE(model->embedding_table().quantized());
  EXPECT_EQ(model->lm_head().quant, c.blocks);
  EXPECT_EQ(model->embedding_table().quant, c.blocks);
  Context ctx(Device::cpu());
  const int vocab = model->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const double err = test::relative_rms_error(test::last_position_logits(*model, ctx, prompt),
                                                test::last_position_logits(*twin, ctx, prompt));
    std::cout << c.name << " prompt " << salt << ": relative RMS " << err << "\n";
    EXPECT_LE(err, 3e-2) << c.name << " prompt " << salt;
    const double vs_float =
        test::relative_rms_error(test::last_position_logits(*twin, ctx, prompt),
                                 test::last_position_logits(*original, ctx, prompt));
    std::cout << c.name << " prompt " << salt << ": relative RMS to the float model " << vs_float
              << "\n";
    EXPECT_LE(vs_float, c.spec.bits == 4 ? 0.35 : 0.05) << c.name << " prompt " << salt;
    test::expect_twins_greedy_tokens(*model, *twin, ctx, prompt, true);
  }
  // Greedy speculative decoding of the quantized target equals its plain greedy decoding.
  std::vector<RequestInput> reqs;
  std::vector<std::vector<int32_t>> plain;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    plain.push_back(generate(*model, ctx, prompt, test::greedy_tokens(16)).tokens);
    reqs.push_back(RequestInput{prompt, test::greedy_tokens(16), nullptr, {}});
  }
  NgramSource source(NgramConfig{1, 3});
  SpecConfig cfg;
  cfg.gamma = 4;
  const auto spec_out = generate_speculative(*model, ctx, &source, std::move(reqs), cfg);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(spec_out[i].result.tokens, plain[i]);
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Specs, QuantizeLlama,
                         ::testing::Values(QuantizeCase{"q4_g32", {4, 32}, QuantType::q4_1, 0},
                                           QuantizeCase{"q4_g64", {4, 64}, QuantType::q4_a64, 4},
                                           QuantizeCase{"q8_g32", {8, 32}, QuantType::q8_a, 0}),
                         [](const auto& p) { return std::string(p.param.name); });

// Expects the same tensor names and bytes in both checkpoints.
void expect_same_tensors(const fs::path& a_dir, const fs::path& b_dir) {
  const SafeTensors a = SafeTensors::open(a_dir), b = SafeTensors::open(b_dir);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const Tensor x = a.get(name), y = b.get(name);
    ASSERT_EQ(x.dtype(), y.dtype()) << name;
    ASSERT_EQ(x.nbytes(), y.nbytes()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << name;
  }
}

TEST(QuantizeCheckpoint, ShardsLoadAsTheSingleFile) {
  const fs::path one = scratch("one"), many = scratch("many");
  quantize(llama3(), one, {4, 32});
  const QuantizeSummary s = quantize(llama3(), many, {4, 32}, 40000);
  EXPECT_GT(s.files.size(), 2u);
  EXPECT_TRUE(fs::exists(many / "model.safetensors.index.json"));
  expect_same_tensors(one, many);
  fs::remove_all(one);
  fs::remove_all(many);
}

TEST(QuantizeCheckpoint, ReadsAShardedSource) {
  // tests/data/models/llama3_sharded holds llama3's weights in two shards with an index.
  const fs::path one = scratch("from_one"), two = scratch("from_shards");
  quantize(llama3(), one, {4, 32});
  quantize(test::data_dir() / "models" / "llama3_sharded", two, {4, 32});
  expect_same_tensors(one, two);
  fs::remove_all(one);
  fs::remove_all(two);
}

TEST(QuantizeCheckpoint, Bf16WeightsKeepBf16ScalesAndTheirBlocks) {
  // llama3 rounded to bf16: scales and biases in bf16, float tensors copied as bf16, and the
  // 4-bit weights load as Q4_1 blocks.
  const fs::path src = scratch("bf16_src"), out = scratch("bf16_out");
  fs::create_directories(src);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(llama3() / f, src / f);
  const SafeTensors st = SafeTensors::open(llama3());
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> entries;
  for (const std::string& name : st.names()) {
    const Tensor t = st.get(name);
    OwnedTensor& c = owned.emplace_back(DType::bf16, t.shape(), Device::cpu());
    convert_host(t.data(), t.dtype(), c.view().data(), DType::bf16, t.numel());
  }
  size_t i = 0;
  for (const std::string& name : st.names()) entries.emplace_back(name, owned[i++].view());
  write_safetensors(src / "model.safetensors", entries);
  quantize(src, out, {4, 32});
  const SafeTensors q = SafeTensors::open(out);
  EXPECT_EQ(q.get("model.layers.0.self_attn.q_proj.scales").dtype(), DType::bf16);
  EXPECT_EQ(q.get("model.layers.0.self_attn.q_proj.biases").dtype(), DType::bf16);
  EXPECT_EQ(q.get("model.norm.weight").dtype(), DType::bf16);
  std::unique_ptr<Model> model = load_model(out, Device::cpu(), DType::f32);
  EXPECT_TRUE(model->lm_head().quantized());
  fs::remove_all(src);
  fs::remove_all(out);
}

ErrorKind failure_kind(const std::function<void()>& f, const std::string& expect) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no error, expected: " << expect;
  return ErrorKind::internal;
}

// A copy of the golden Llama 3 whose weight `name` holds a NaN at index 5.
fs::path llama3_with_nan(const std::string& tag, const std::string& name) {
  const fs::path dir = scratch(tag);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(llama3()))
    if (e.path().filename() != "model.safetensors" && e.path().extension() != ".safetensors")
      fs::copy(e.path(), dir / e.path().filename());
  const SafeTensors st = SafeTensors::open(llama3() / "model.safetensors");
  std::deque<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> entries;
  for (const std::string& n : st.names()) {
    const Tensor t = st.get(n);
    OwnedTensor& c = owned.emplace_back(t.dtype(), t.shape(), Device::cpu());
    std::memcpy(c.view().data(), t.data(), t.nbytes());
    if (n == name) static_cast<float*>(c.view().data())[5] = std::nanf("");
    entries.emplace_back(n, c.view());
  }
  write_safetensors(dir / "model.safetensors", entries);
  return dir;
}

TEST(QuantizeCheckpoint, NonFiniteWeightRefusedAndNothingLeftBehind) {
  const std::string bad = "model.layers.0.mlp.gate_proj.weight";
  const fs::path src = llama3_with_nan("nan_src", bad), out = scratch("nan_out");
  EXPECT_EQ(failure_kind(
                [&] {
                  quantize(src, out, {4, 32});
                },
                "weight '" + bad + "'"),
            ErrorKind::invalid_input);
  EXPECT_FALSE(fs::exists(out));  // created by the run, removed with what it held
  fs::create_directories(out);    // an empty directory given: emptied again, kept
  QuantizeOptions o;
  o.input = src;
  o.output = out;
  EXPECT_EQ(failure_kind([&] { export_gguf(o, QuantType::q8_0, nullptr); },
                         "non-finite value (nan) at index 5"),
            ErrorKind::invalid_input);
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_TRUE(fs::is_empty(out));
  fs::remove_all(out);
  fs::remove_all(src);
}

TEST(QuantizeCheckpoint, Refusals) {
  const fs::path out = scratch("refused");
  EXPECT_EQ(failure_kind(
                [&] {
                  quantize("/nonexistent/model", out, {4, 64});
                },
                "does not exist"),
            ErrorKind::io);
  EXPECT_EQ(failure_kind(
                [&] {
                  quantize(test::data_dir() / "mlx" / "llama3_q4_g32", out, {4, 64});
                },
                "already quantized"),
            ErrorKind::unsupported);
  EXPECT_EQ(failure_kind(
                [&] {
                  quantize(llama3(), out, {3, 64});
                },
                "bits 3 with group size 64"),
            ErrorKind::unsupported);
  EXPECT_EQ(failure_kind(
                [&] {
                  quantize(llama3(), out, {4, 16});
                },
                "group size 16"),
            ErrorKind::unsupported);
  EXPECT_EQ(failure_kind([] { mlx_format_bits("q4_k"); }, "'q4_k' is not supported"),
            ErrorKind::unsupported);
  EXPECT_FALSE(fs::exists(out));  // nothing written for a refused job
  fs::create_directories(out);
  std::ofstream(out / "x") << "x";
  EXPECT_EQ(failure_kind(
                [&] {
                  quantize(llama3(), out, {4, 64});
                },
                "not an empty directory"),
            ErrorKind::io);
  fs::remove_all(out);
}

}  // namespace
}  // namespace dspark
