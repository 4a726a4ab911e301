// RoPE: frequency tables against Hugging Face's (tests/data/rope/hf_rope_tables.json, dumped by
// tools/rope_reference.py from transformers' ROPE_INIT_FUNCTIONS), and the rotation against a
// naive double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/ops/rope.h"

namespace dspark {
namespace {

using test::random_tensor;
using test::relative_rms_error;

TEST(OpsRope, TablesMatchHuggingFace) {
  const auto path = test::data_dir() / "rope" / "hf_rope_tables.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  const nlohmann::json doc = nlohmann::json::parse(in);
  int n_cases = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const auto& s = c.at("scaling");
    RopeScaling scaling;
    scaling.type = s.at("type");
    scaling.factor = s.at("factor");
    scaling.low_freq_factor = s.at("low_freq_factor");
    scaling.high_freq_factor = s.at("high_freq_factor");
    scaling.original_max_position_embeddings = s.at("original_max_position_embeddings");
    scaling.beta_fast = s.at("beta_fast");
    scaling.beta_slow = s.at("beta_slow");
    scaling.mscale = s.at("mscale");
    scaling.mscale_all_dim = s.at("mscale_all_dim");
    scaling.attention_factor = s.at("attention_factor");
    scaling.truncate = s.at("truncate");
    const RopeTable table =
        make_rope_table(c.at("head_dim"), c.at("theta"), c.at("partial_rotary_factor"), scaling,
                        c.at("max_position_embeddings"));
    const std::vector<double> hf = c.at("inv_freq");
    ASSERT_EQ(table.inv_freq.size(), hf.size());
    EXPECT_EQ(table.rotary_dim, static_cast<int>(2 * hf.size()));
    double worst = 0;
    for (size_t i = 0; i < hf.size(); ++i)
      worst = std::max(worst, std::fabs(table.inv_freq[i] - hf[i]) / hf[i]);
    EXPECT_LE(worst, 1e-6) << "largest relative inv_freq error";
    const double af = c.at("attention_factor");
    EXPECT_LE(std::fabs(table.attention_scaling - af) / af, 1e-6);
    ++n_cases;
  }
  EXPECT_GE(n_cases, 15);
}

TEST(OpsRope, TableErrors) {
  RopeScaling dynamic;
  dynamic.type = "dynamic";
  EXPECT_THROW(make_rope_table(128, 1e4, 1.0, dynamic, 4096), Error);
  EXPECT_THROW(make_rope_table(0, 1e4, 1.0, RopeScaling{}, 4096), Error);
  EXPECT_THROW(make_rope_table(64, -1.0, 1.0, RopeScaling{}, 4096), Error);
  EXPECT_THROW(make_rope_table(64, 1e4, 0.0, RopeScaling{}, 4096), Error);
  EXPECT_THROW(make_rope_table(64, 1e4, 1.5, RopeScaling{}, 4096), Error);
}

// x' for one head: angle = float(pos) * inv_freq[j] in f32 (the op's definition, as HF computes
// it), then cos/sin and the rotation in double.
void rope_reference(std::vector<float>& head, int64_t pos, const std::vector<float>& inv_freq,
                    double scaling) {
  const size_t half = inv_freq.size();
  for (size_t j = 0; j < half; ++j) {
    const float angle = static_cast<float>(pos) * inv_freq[j];
    const double c = std::cos(static_cast<double>(angle)) * scaling;
    const double s = std::sin(static_cast<double>(angle)) * scaling;
    const double x1 = head[j], x2 = head[j + half];
    head[j] = static_cast<float>(x1 * c - x2 * s);
    head[j + half] = static_cast<float>(x2 * c + x1 * s);
  }
}

TEST(OpsRope, RotationMatchesReference) {
  Context ctx(Device::cpu());
  struct Case {
    int64_t n, heads, head_dim;
    double partial;
    DType dtype;
    float scaling;
  };
  for (const Case& c :
       {Case{1, 1, 2, 1.0, DType::f32, 1.0f}, Case{3, 4, 64, 1.0, DType::f32, 1.0f},
        Case{17, 2, 128, 0.5, DType::f32, 1.25f}, Case{33, 3, 96, 0.25, DType::bf16, 1.0f},
        Case{5, 8, 128, 1.0, DType::bf16, 0.875f}, Case{9, 2, 80, 0.4, DType::f16, 1.0f}}) {
    SCOPED_TRACE(fmt::format("n={} heads={} head_dim={} partial={} {}", c.n, c.heads, c.head_dim,
                             c.partial, dtype_name(c.dtype)));
    const RopeTable table =
        make_rope_table(static_cast<int>(c.head_dim), 1e4, c.partial, RopeScaling{}, 4096);
    // x is the q part of a fused [n, (heads + 2) * head_dim] projection: token stride is wider.
    const int64_t width = (c.heads + 2) * c.head_dim;
    OwnedTensor fused = random_tensor(c.dtype, Shape{c.n, width}, 5 + c.n);
    const Tensor x(fused.view().data(), c.dtype, Shape{c.n, c.heads, c.head_dim},
                   Shape{width, c.head_dim, 1}, Device::cpu());
    std::vector<int32_t> pos(static_cast<size_t>(c.n));
    for (int64_t i = 0; i < c.n; ++i) pos[i] = static_cast<int32_t>((i * 7919) % 40000 + (i & 1));
    OwnedTensor pos_t = OwnedTensor::from_vector(pos, Shape{c.n}, Device::cpu());
    OwnedTensor freq_t = OwnedTensor::from_vector(
        table.inv_freq, Shape{static_cast<int64_t>(table.inv_freq.size())}, Device::cpu());
    const std::vector<float> before = to_f32_vector(fused);
    rope(ctx, x, pos_t, freq_t, c.scaling);
    const std::vector<float> after = to_f32_vector(fused);
    std::vector<float> got, ref;
    for (int64_t i = 0; i < c.n; ++i) {
      for (int64_t h = 0; h < c.heads; ++h) {
        const size_t off = static_cast<size_t>(i * width + h * c.head_dim);
        std::vector<float> head(before.begin() + off, before.begin() + off + c.head_dim);
        rope_reference(head, pos[i], table.inv_freq, c.scaling);
        for (int64_t d = 0; d < c.head_dim; ++d) {
          got.push_back(after[off + d]);
          ref.push_back(head[d]);
          if (d >= table.rotary_dim) {
            ASSERT_EQ(after[off + d], before[off + d]);  // not rotated
          }
        }
      }
      for (int64_t j = c.heads * c.head_dim; j < width; ++j)  // k, v parts untouched
        ASSERT_EQ(after[i * width + j], before[i * width + j]);
    }
    // f32: 1e-6 (f32 cos/sin and arithmetic); 16-bit: the storage rounding.
    const double tol = c.dtype == DType::f32 ? 1e-6 : (c.dtype == DType::bf16 ? 4e-3 : 6e-4);
    EXPECT_LE(relative_rms_error(got, ref), tol);
  }
}

TEST(OpsRope, InvalidArgumentsThrow) {
  Context ctx(Device::cpu());
  OwnedTensor x = random_tensor(DType::f32, Shape{2, 3, 8}, 1);
  OwnedTensor pos = OwnedTensor::from_vector(std::vector<int32_t>{0, 1}, Shape{2}, Device::cpu());
  OwnedTensor pos_bad = OwnedTensor::from_vector(std::vector<int32_t>{0}, Shape{1}, Device::cpu());
  OwnedTensor freq = OwnedTensor::from_vector(std::vector<float>{1, 0.5f}, Shape{2}, Device::cpu());
  OwnedTensor freq_long =
      OwnedTensor::from_vector(std::vector<float>(5, 1.0f), Shape{5}, Device::cpu());
  EXPECT_NO_THROW(rope(ctx, x, pos, freq, 1.0f));
  EXPECT_THROW(rope(ctx, x, pos_bad, freq, 1.0f), Error);
  EXPECT_THROW(rope(ctx, x, pos, freq_long, 1.0f), Error);
  OwnedTensor x2 = random_tensor(DType::f32, Shape{2, 24}, 1);
  EXPECT_THROW(rope(ctx, x2, pos, freq, 1.0f), Error);
  OwnedTensor freq_bf16 = random_tensor(DType::bf16, Shape{2}, 1);
  EXPECT_THROW(rope(ctx, x, pos, freq_bf16, 1.0f), Error);
}

}  // namespace
}  // namespace dspark
