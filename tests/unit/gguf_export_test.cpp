// dspark quantize --format q8_0|q4_0|q4_1|q5_0|q5_1 (model/gguf_export.h): the tiny golden Llama 3
// written as a GGUF `llama` file loads through load_model (a directory holding model.gguf), keeps
// its blocks, decodes the greedy tokens of its dequantized twin (up to near-ties) and stays close
// to the float checkpoint it came from (q/k row order, names, hyper-parameters and rope factors
// right); its tokenizer encodes as the checkpoint's tokenizer.json does; the refusals. The blocks
// themselves are checked against the gguf package in tests/cli/quantize_test.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fmt/format.h>

#include "common/model_runs.h"
#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/engine/generate.h"
#include "dspark/io/gguf.h"
#include "dspark/io/tokenizer.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_export.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {
namespace fs = std::filesystem;

fs::path export_to(const std::string& tag, const fs::path& src, QuantType type) {
  const fs::path out =
      fs::temp_directory_path() / fmt::format("dspark_gguf_export_{}_{}", tag, ::getpid());
  fs::remove_all(out);
  QuantizeOptions o;
  o.input = src;
  o.output = out;
  export_gguf(o, type, nullptr);
  return out;
}

struct Case {
  const char* name;
  QuantType type;
  // Relative RMS of the last logits against the float checkpoint's: 4 bits move the tiny random
  // model's logits by 20-26% (as MLX's 4 bits do, tests/unit/quantize_checkpoint_test.cpp), 8
  // bits by 1.5%.
  double vs_float;
};

class GgufExport : public ::testing::TestWithParam<Case> {};

TEST_P(GgufExport, LoadsAndDecodesLikeItsTwinAndTheFloatModel) {
  const Case c = GetParam();
  const fs::path src = test::data_dir() / "models" / "llama3";
  const fs::path out = export_to(c.name, src, c.type);
  ASSERT_TRUE(fs::exists(out / "model.gguf"));
  std::unique_ptr<Model> model = load_model(out, Device::cpu(), DType::f32);
  EXPECT_TRUE(model->lm_head().quantized());
  EXPECT_EQ(model->lm_head().quant, c.type);
  const GgufFile file = GgufFile::open(out / "model.gguf");
  const ModelConfig config = gguf_model_config(file);
  const GgufWeights weights(file, config);
  std::unique_ptr<Model> twin =
      create_model(config, test::DequantizedView(weights), Device::cpu(), DType::f32);
  std::unique_ptr<Model> original = load_model(src, Device::cpu(), DType::f32);
  Context ctx(Device::cpu());
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = test::fixed_prompt(config.vocab_size, salt);
    const double err = test::relative_rms_error(test::last_position_logits(*twin, ctx, prompt),
                                                test::last_position_logits(*original, ctx, prompt));
    std::cout << c.name << " prompt " << salt << ": relative RMS to the float model " << err
              << "\n";
    EXPECT_LE(err, c.vs_float) << c.name << " prompt " << salt;
    test::expect_twins_greedy_tokens(*model, *twin, ctx, prompt, true);
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Types, GgufExport,
                         ::testing::Values(Case{"q8_0", QuantType::q8_0, 2e-2},
                                           Case{"q4_0", QuantType::q4_0, 0.35},
                                           Case{"q4_1", QuantType::q4_1, 0.35},
                                           Case{"q5_0", QuantType::q5_0, 0.2},
                                           Case{"q5_1", QuantType::q5_1, 0.2}),
                         [](const auto& p) { return std::string(p.param.name); });

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
  o.input = test::data_dir() / "models" / "qwen3";
  try {
    export_gguf(o, QuantType::q8_0, nullptr);
    ADD_FAILURE() << "qwen3 exported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("Qwen3ForCausalLM"), std::string::npos) << e.what();
  }
  o.input = test::data_dir() / "mlx" / "llama3_q4_g32";
  try {
    export_gguf(o, QuantType::q8_0, nullptr);
    ADD_FAILURE() << "an MLX checkpoint exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(gguf_format_type("q4_k").has_value());
  EXPECT_EQ(gguf_format_type("q4_1"), QuantType::q4_1);
}

}  // namespace
}  // namespace dspark
