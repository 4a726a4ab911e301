// dspark quantize's library (model/quantize_checkpoint.h, io/mlx_quantize.h): the tiny golden
// Llama 3 quantized into MLX affine checkpoints loads through load_model, keeps its 4-bit weights
// as Q4_1 blocks and decodes the greedy tokens of its dequantized twin; shards load as one file;
// the refusals. The codes, scales and biases themselves are checked against a NumPy port of MLX's
// rule in tests/cli/quantize_test.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/mlx_quantize.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
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

// The quantized model's greedy tokens against its dequantized twin's. With 4-bit blocks the
// products round x to 8 bits (logits within ~1.5% relative RMS of the twin's), so a near-tie may
// break the other way and the two greedy runs part: each token the quantized model picks must be
// the twin's argmax on the same prefix, or trail it by at most 6x the RMS difference of the two
// models' logits there (a broken weight trails by whole logits), and at least 90% must be the
// twin's argmax. Dense weights (8-bit: dequantized at load): exactly the twin's tokens.
void expect_twins_greedy_tokens(Model& model, Model& twin, Context& ctx,
                                const std::vector<int32_t>& prompt, bool blocks) {
  const std::vector<int32_t> tokens = generate(model, ctx, prompt, test::greedy_tokens(24)).tokens;
  if (!blocks) {
    EXPECT_EQ(tokens, generate(twin, ctx, prompt, test::greedy_tokens(24)).tokens);
    return;
  }
  std::vector<int32_t> seq = prompt;
  int exact = 0;
  for (int32_t t : tokens) {
    const std::vector<float> l = test::last_position_logits(twin, ctx, seq);
    const std::vector<float> q = test::last_position_logits(model, ctx, seq);
    double ss = 0;
    for (size_t i = 0; i < l.size(); ++i) ss += (q[i] - l[i]) * static_cast<double>(q[i] - l[i]);
    const float best = *std::max_element(l.begin(), l.end());
    exact += l[static_cast<size_t>(t)] == best;
    EXPECT_LE(best - l[static_cast<size_t>(t)], 6 * std::sqrt(ss / static_cast<double>(l.size())))
        << "token " << seq.size() - prompt.size();
    seq.push_back(t);
  }
  std::cout << exact << " of " << tokens.size() << " tokens are the twin's argmax\n";
  EXPECT_GE(exact, static_cast<int>(tokens.size()) * 9 / 10);
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

struct Case {
  const char* name;
  MlxQuantSpec spec;
  bool blocks;             // 4-bit: Q4_1 blocks in memory
  size_t n_not_divisible;  // down_proj (160 inputs) with groups of 64
};

class QuantizeLlama : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeLlama, LoadsAndDecodesItsDequantizedTwinsTokens) {
  const Case c = GetParam();
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
  EXPECT_EQ(model->lm_head().quantized(), c.blocks);
  EXPECT_EQ(model->embedding_table().quantized(), c.blocks);
  Context ctx(Device::cpu());
  const int vocab = model->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    const double err = test::relative_rms_error(test::last_position_logits(*model, ctx, prompt),
                                                test::last_position_logits(*twin, ctx, prompt));
    std::cout << c.name << " prompt " << salt << ": relative RMS " << err << "\n";
    EXPECT_LE(err, c.blocks ? 3e-2 : 1e-5) << c.name << " prompt " << salt;
    expect_twins_greedy_tokens(*model, *twin, ctx, prompt, c.blocks);
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
                         ::testing::Values(Case{"q4_g32", {4, 32}, true, 0},
                                           Case{"q4_g64", {4, 64}, true, 4},
                                           Case{"q8_g32", {8, 32}, false, 0}),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(QuantizeCheckpoint, ShardsLoadAsTheSingleFile) {
  const fs::path one = scratch("one"), many = scratch("many");
  quantize(llama3(), one, {4, 32});
  const QuantizeSummary s = quantize(llama3(), many, {4, 32}, 40000);
  EXPECT_GT(s.files.size(), 2u);
  EXPECT_TRUE(fs::exists(many / "model.safetensors.index.json"));
  const SafeTensors a = SafeTensors::open(one), b = SafeTensors::open(many);
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) {
    const Tensor x = a.get(name), y = b.get(name);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.nbytes()), 0) << name;
  }
  fs::remove_all(one);
  fs::remove_all(many);
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
