// Hugging Face FP8 checkpoints with block scales (io/fp8_quant.h, model/fp8_weights.h) against
// NumPy (tools/fp8/make_fp8_fixtures.py, tests/data/fp8/):
//  - random F8_E4M3 tensors with bf16 / f16 / f32 scales for blocks of 16x24, 128x128 and 32x16
//    (partial last blocks) dequantize bit for bit like NumPy's e4m3(code) * scale;
//  - the tiny golden Llama 3 as an FP8 checkpoint (blocks of 128x128, f32 scales, bf16 embeddings
//    / LM head / norms, modules_to_not_convert) reads every weight bit for bit as its twin, the
//    checkpoint NumPy dequantized to f32, and decodes exactly like it (same logits, same greedy
//    tokens);
//  - the config entry and the errors (missing or misshapen scales, block sizes, fmt, quant_method).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error_checks.h"
#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/io/fp8_quant.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/fp8_weights.h"
#include "dspark/model/model.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_mentions;

fs::path fp8_data(const char* name) {
  return test::data_dir() / "fp8" / name;
}

const SafeTensors& dequant_fixture() {
  static const SafeTensors st = SafeTensors::open(fp8_data("dequant.safetensors"));
  return st;
}

// Bit-for-bit equality of two tensors' bytes (dtype and shape first).
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto* g = static_cast<const unsigned char*>(got.data());
  const auto* w = static_cast<const unsigned char*>(want.data());
  const size_t bytes = got.nbytes(), size = dtype_size(got.dtype());
  for (size_t i = 0; i < bytes; i += size) {
    ASSERT_EQ(std::memcmp(g + i, w + i, size), 0) << what << " element " << i / size;
  }
}

struct Fp8CheckpointCase {
  const char* name;
  int64_t block_n, block_k;
};

class Fp8Dequant : public ::testing::TestWithParam<Fp8CheckpointCase> {};

TEST_P(Fp8Dequant, MatchesNumPyBitForBit) {
  const Fp8CheckpointCase c = GetParam();
  const SafeTensors& st = dequant_fixture();
  const std::string weight = std::string(c.name) + ".weight";
  ASSERT_TRUE(st.is_e4m3(weight));
  const Fp8Weights weights(st, Fp8Quantization{c.block_n, c.block_k, {}});
  EXPECT_EQ(weights.shape_of(weight), st.get(weight).shape());
  expect_same_bits(weights.get(weight), st.get(std::string(c.name) + ".expected"), c.name);
}

INSTANTIATE_TEST_SUITE_P(Blocks, Fp8Dequant,
                         ::testing::Values(Fp8CheckpointCase{"b16x24_bf16", 16, 24},
                                           Fp8CheckpointCase{"b128x128_f16", 128, 128},
                                           Fp8CheckpointCase{"b32x16_f32", 32, 16}),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Fp8Checkpoint, ReadsEveryWeightAsItsNumPyTwin) {
  const SafeTensors st = SafeTensors::open(fp8_data("llama3_fp8"));
  const SafeTensors twin = SafeTensors::open(fp8_data("llama3_fp8_twin"));
  const Fp8Weights weights(st, *read_fp8_quantization(fp8_data("llama3_fp8") / "config.json"));
  int fp8 = 0;
  for (const std::string& name : twin.names()) {
    fp8 += st.is_e4m3(name) ? 1 : 0;
    expect_same_bits(weights.get(name), twin.get(name), name);
  }
  EXPECT_EQ(fp8, 4 * 7 - 1);  // every projection but layer 0's o_proj
  EXPECT_FALSE(st.is_e4m3("lm_head.weight"));
}

// The projections stay E4M3 codes with their block scales (nothing is dequantized at load, so
// nothing is said on stderr) and decode like the dequantized twin: logits within f32 summation
// error (the FP8 kernel sums each 64 products, then scales them by their block), the same greedy
// tokens.
TEST(Fp8Checkpoint, DecodesLikeItsTwin) {
  testing::internal::CaptureStderr();
  const std::unique_ptr<Model> model =
      load_model(fp8_data("llama3_fp8"), Device::cpu(), DType::f32);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  const std::unique_ptr<Model> twin =
      load_model(fp8_data("llama3_fp8_twin"), Device::cpu(), DType::f32);
  Context ctx(Device::cpu());
  const int vocab = model->config().vocab_size;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(vocab, salt);
    EXPECT_LE(test::relative_rms_error(test::last_position_logits(*model, ctx, prompt),
                                       test::last_position_logits(*twin, ctx, prompt)),
              1e-5)
        << "prompt " << salt;
    EXPECT_EQ(generate(*model, ctx, prompt, test::greedy_tokens(24)).tokens,
              generate(*twin, ctx, prompt, test::greedy_tokens(24)).tokens)
        << "prompt " << salt;
  }
}

// A scratch copy of `fixture` (or an empty directory for nullptr) whose config.json is `edit`ed.
class Scratch {
 public:
  Scratch(const char* fixture, const std::function<void(nlohmann::json&)>& edit) {
    dir_ = fs::temp_directory_path() / fmt::format("dspark_fp8_{}_{}", ::getpid(), n_++);
    fs::remove_all(dir_);
    nlohmann::json config = nlohmann::json::object();
    if (fixture != nullptr) {
      fs::copy(fp8_data(fixture), dir_, fs::copy_options::recursive);
      config = nlohmann::json::parse(std::ifstream(dir_ / "config.json"));
    } else {
      fs::create_directories(dir_);
    }
    edit(config);
    std::ofstream(dir_ / "config.json") << config.dump(2);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }
  fs::path config() const { return dir_ / "config.json"; }

 private:
  fs::path dir_;
  static inline int n_ = 0;
};

// A config.json holding only `quantization_config`.
Scratch config_with(const char* quantization_config) {
  return Scratch(nullptr, [&](nlohmann::json& c) {
    c["quantization_config"] = nlohmann::json::parse(quantization_config);
  });
}

TEST(Fp8Config, ReadsTheEntry) {
  const Scratch full = config_with(
      R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
          "weight_block_size": [128, 64], "modules_to_not_convert": ["lm_head", "mlp.gate"]})");
  const std::optional<Fp8Quantization> q = read_fp8_quantization(full.config());
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->block_n, 128);
  EXPECT_EQ(q->block_k, 64);
  EXPECT_TRUE(q->keeps_float("lm_head"));
  EXPECT_TRUE(q->keeps_float("model.layers.3.mlp.gate"));
  EXPECT_FALSE(q->keeps_float("model.layers.3.mlp.gate_proj"));
  EXPECT_FALSE(q->keeps_float("model.lm_head_extra"));
  // Qwen3-*-FP8 configs have no "fmt"; a null modules_to_not_convert lists nothing.
  const Scratch qwen = config_with(
      R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
          "modules_to_not_convert": null})");
  EXPECT_EQ(read_fp8_quantization(qwen.config())->block_k, 128);
  // No quantization_config, or MLX's (no quant_method): not FP8.
  EXPECT_FALSE(
      read_fp8_quantization(Scratch(nullptr, [](nlohmann::json&) {}).config()).has_value());
  EXPECT_FALSE(
      read_fp8_quantization(config_with(R"({"group_size": 64, "bits": 4})").config()).has_value());
}

TEST(Fp8Config, RefusesWhatItDoesNotSupport) {
  const auto refused = [](const char* entry, ErrorKind kind,
                          std::initializer_list<const char*> parts) {
    const Scratch s = config_with(entry);
    expect_mentions(error_of([&] { read_fp8_quantization(s.config()); }, kind), parts);
  };
  refused(R"({"quant_method": "gptq", "bits": 4})", ErrorKind::unsupported,
          {"quant_method 'gptq'", "\"fp8\"", "MLX"});
  refused(R"({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]})",
          ErrorKind::unsupported, {"'e5m2'", "e4m3"});
  refused(R"({"quant_method": "fp8", "activation_scheme": "static",
              "weight_block_size": [128, 128]})",
          ErrorKind::unsupported, {"'static'", "dynamic"});
  refused(R"({"quant_method": "fp8"})", ErrorKind::unsupported,
          {"weight_block_size", "per-tensor"});
  for (const char* bad :
       {R"([128])", R"([128, 128, 1])", R"([128, "128"])", R"([0, 128])", R"(128)"}) {
    const std::string entry =
        fmt::format(R"({{"quant_method": "fp8", "weight_block_size": {}}})", bad);
    refused(entry.c_str(), ErrorKind::io, {"weight_block_size", "two positive integers"});
  }
  refused(R"({"quant_method": "fp8", "weight_block_size": [128, 128],
              "modules_to_not_convert": "lm_head"})",
          ErrorKind::io, {"modules_to_not_convert", "list"});
}

TEST(Fp8Weights, NamesTheTensorOfEachBadWeight) {
  const SafeTensors& st = dequant_fixture();
  const Fp8Weights weights(st, Fp8Quantization{16, 16, {"kept"}});
  expect_mentions(error_of([&] { weights.get("no_scale.weight"); }, ErrorKind::io),
                  {"'no_scale.weight'", "'no_scale.weight_scale_inv'", "missing"});
  expect_mentions(error_of([&] { weights.get("bad_scale.weight"); }, ErrorKind::io),
                  {"'bad_scale.weight'", "[1, 2]", "expected a float tensor [2, 2]",
                   "weight_block_size [16, 16]"});
  expect_mentions(error_of([&] { weights.get("kept.weight"); }, ErrorKind::io),
                  {"'kept.weight'", "modules_to_not_convert", "'kept'"});
  expect_mentions(error_of([&] { weights.shape_of("not_a_weight"); }, ErrorKind::io),
                  {"'not_a_weight'", "\".weight\""});
}

TEST(Fp8Weights, LoadErrorsNameTheTensor) {
  // Blocks of 32 rows: q_proj's [64, 64] needs [2, 1] scales where the file has [1, 1].
  const Scratch blocks("llama3_fp8", [](nlohmann::json& c) {
    c["quantization_config"]["weight_block_size"] = {32, 128};
  });
  expect_mentions(
      error_of([&] { load_model(blocks.dir(), Device::cpu(), DType::f32); }, ErrorKind::io),
      {"weight_scale_inv", "expected a float tensor [2, 1]", "weight_block_size [32, 128]"});
  // F8_E4M3 weights without an fp8 quantization_config: their scales are unknown.
  const Scratch plain("llama3_fp8", [](nlohmann::json& c) { c.erase("quantization_config"); });
  expect_mentions(
      error_of([&] { load_model(plain.dir(), Device::cpu(), DType::f32); }, ErrorKind::unsupported),
      {"F8_E4M3", "quant_method \"fp8\""});
}

}  // namespace
}  // namespace dspark
