// The progress of a model load (model/load_progress.h): silent while short, a bar over the
// checkpoint's bytes afterwards, and every weight the loaders read counted once.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>

#include "common/test_util.h"
#include "dspark/io/gguf.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "dspark/model/gguf_model.h"
#include "dspark/model/load_progress.h"
#include "dspark/model/model.h"
#include "dspark/model/registry.h"

namespace dspark {
namespace {

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text.push_back(static_cast<char>(c));
  return text;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(LoadProgress, ABarOverTheBytesThatEndsAtTheLoadsEnd) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    LoadProgress p(1000, f, /*quiet_seconds=*/0);
    EXPECT_TRUE(LoadProgress::active());
    for (int i = 0; i < 12; ++i) p.add(100);  // more than the total: counted twice somewhere
    EXPECT_EQ(p.done(), 1200);
    p.finish();
  }
  EXPECT_FALSE(LoadProgress::active());
  const std::string text = read_all(f);
  std::fclose(f);
  EXPECT_EQ(count(text, "100%"), 1u) << text;  // only the last line
  EXPECT_NE(text.find("100%  0.00/0.00 MB  loaded in"), std::string::npos) << text;
  EXPECT_EQ(text.find("tensors"), std::string::npos) << text;  // no item count
}

TEST(LoadProgress, SilentWhileShort) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    LoadProgress p(1000, f);
    LoadProgress::add_to_active(500);
    EXPECT_EQ(p.done(), 500);
    p.finish();
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

// The loaders' weights sum to the checkpoint's bytes (each counted once, the tied embedding of
// the tiny models aside).
void expect_counted(const WeightSource& w, const ModelConfig& config) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const int64_t total = w.total_stored_bytes();
  ASSERT_GT(total, 0);
  LoadProgress p(total, f, /*quiet_seconds=*/1e9);
  const auto model = create_model(config, w, Device::cpu(), DType::f32);
  std::cout << "[" << config.architecture << "] counted " << p.done() << " of " << total
            << " bytes\n";
  EXPECT_GE(p.done(), total * 95 / 100);
  EXPECT_LE(p.done(), total);
  std::fclose(f);
}

TEST(LoadProgress, SafetensorsWeightsCountedOnce) {
  const auto dir = test::data_dir() / "models" / "qwen3";
  const SafeTensors st = SafeTensors::open(dir);
  expect_counted(SafeTensorsWeights(st), load_model_config(dir));
}

TEST(LoadProgress, GgufExpertsCountedOnce) {
  const GgufFile g = GgufFile::open(test::gguf_dir() / "tiny_qwen3_moe.gguf");
  expect_counted(GgufWeights(g, gguf_model_config(g)), gguf_model_config(g));
}

// MLX scales and biases and FP8 block scales count with their weights: a whole checkpoint loaded
// through load_model (whose own progress defers to the active one).
void expect_checkpoint_counted(const std::filesystem::path& dir) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const SafeTensors st = SafeTensors::open(dir);
  const auto total = static_cast<int64_t>(st.total_bytes());
  LoadProgress p(total, f, /*quiet_seconds=*/1e9);
  const auto model = load_model(dir, Device::cpu(), DType::f32);
  std::cout << "[" << dir.filename().string() << "] counted " << p.done() << " of " << total
            << " bytes\n";
  EXPECT_EQ(p.done(), total);  // every tensor once: none of these fixtures ties its head
  std::fclose(f);
}

TEST(LoadProgress, MlxCompanionsCountedWithTheirWeights) {
  expect_checkpoint_counted(test::data_dir() / "mlx" / "llama3_q4_g64");
}

TEST(LoadProgress, Fp8ScalesCountedWithTheirWeights) {
  expect_checkpoint_counted(test::data_dir() / "fp8" / "llama3_fp8");
}

}  // namespace
}  // namespace dspark
