// process_logits / sample / sample_from_probs: CUDA vs CPU. The processed distributions must keep
// exactly the same tokens (threshold-defined top-k / top-p ties) with values within 1e-6 (relative
// RMS), and seeded draws must give the same tokens on both backends (thousands of draws).
#include "dspark/ops/sampling.h"

#include <cmath>

#include "cuda/cuda_consistency.h"
#include "dspark/core/philox.h"

namespace dspark::test {
namespace {

SamplingParams make(float temperature, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::vector<SamplingParams> param_rows(int64_t vocab) {
  return {make(0.0f),
          make(1.0f),
          make(0.7f, 1),
          make(0.8f, 50),
          make(1.0f, 0, 0.9f),
          make(0.6f, 0, 0.5f),
          make(1.0f, 0, 1.0f, 0.05f),
          make(1.3f, 40, 0.95f, 0.02f),
          make(0.9f, 5, 0.8f),
          make(1.0f, static_cast<int>(vocab - 1), 0.99f),
          make(2.0f, 0, 0.3f, 0.5f),
          make(0.25f, 20, 1.0f, 0.1f)};
}

// Logits N(0, 3); with `ties`, rounded to halves so that thresholds fall inside groups of ties.
Pair logits_pair(DType dtype, int64_t n, int64_t vocab, uint32_t seed, bool ties) {
  std::vector<float> v = random_normal(static_cast<size_t>(n * vocab), seed, 3.0f);
  if (ties)
    for (float& f : v) f = std::round(f * 2.0f) / 2.0f;
  return values_pair(v, dtype, Shape{n, vocab});
}

void expect_same_distribution(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  const std::vector<float> g = read(gpu), c = read(cpu);
  ASSERT_EQ(g.size(), c.size());
  size_t support_mismatch = 0;
  for (size_t i = 0; i < g.size(); ++i) support_mismatch += (g[i] > 0.0f) != (c[i] > 0.0f);
  EXPECT_EQ(support_mismatch, 0u) << what << ": kept sets differ";
  const double err = relative_rms_error(g, c);
  EXPECT_LE(err, 1e-6) << what << ": relative RMS error " << err;
}

TEST(CudaSampling, ProcessLogitsMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (int64_t vocab : {7, 1000, 32000, 151936}) {
      for (bool ties : {false, true}) {
        const std::vector<SamplingParams> params = param_rows(vocab);
        const auto n = static_cast<int64_t>(params.size());
        const Pair logits = logits_pair(dtype, n, vocab, seed++, ties);
        const Pair probs = zeros_pair(DType::f32, Shape{n, vocab});
        process_logits(ctx.cpu, logits.cpu, params, probs.cpu);
        process_logits(ctx.gpu, logits.gpu, params, probs.gpu);
        ctx.gpu.synchronize();
        expect_same_distribution(
            probs.gpu, probs.cpu,
            name_of(dtype) + " V=" + std::to_string(vocab) + (ties ? " ties" : ""));
      }
    }
  }
}

// One SamplingParams for all rows, strided logits rows, and rows without any finite logit.
TEST(CudaSampling, ProcessLogitsSharedParamsAndEdgeRows) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t n = 4, vocab = 500;
  std::vector<float> v = random_normal(static_cast<size_t>(n * (vocab + 6)), 9, 2.0f);
  for (int64_t i = 0; i < vocab + 6; ++i) v[static_cast<size_t>(i)] = -INFINITY;        // row 0
  for (int64_t i = 0; i < vocab + 6; ++i) v[static_cast<size_t>(vocab + 6 + i)] = NAN;  // row 1
  v[static_cast<size_t>(2 * (vocab + 6) + 10)] = INFINITY;  // row 2: +inf wins
  for (DType dtype : kFloatDTypes) {
    const Pair logits = values_pair(v, dtype, Shape{n, vocab + 6});
    const Pair probs = zeros_pair(DType::f32, Shape{n, vocab});
    const std::vector<SamplingParams> params = {make(0.8f, 30, 0.9f, 0.01f)};
    process_logits(ctx.cpu, columns(logits.cpu, 6, vocab), params, probs.cpu);
    process_logits(ctx.gpu, columns(logits.gpu, 6, vocab), params, probs.gpu);
    ctx.gpu.synchronize();
    expect_same_distribution(probs.gpu, probs.cpu, "edge rows " + name_of(dtype));
  }
}

TEST(CudaSampling, SampleDrawsTheSameTokens) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  int64_t draws = 0;
  uint32_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (int64_t vocab : {1000, 32000}) {
      const std::vector<SamplingParams> params = param_rows(vocab);
      const auto n = static_cast<int64_t>(params.size());
      const Pair logits = logits_pair(dtype, n, vocab, seed++, dtype == DType::bf16);
      const Pair tokens = zeros_pair(DType::i32, Shape{n});
      for (uint64_t s = 0; s < 64; ++s) {
        std::vector<uint64_t> seeds(static_cast<size_t>(n)), counters(static_cast<size_t>(n));
        for (size_t r = 0; r < seeds.size(); ++r) {
          seeds[r] = 0x9E3779B97F4A7C15ull * (s + 1) + r;
          counters[r] = 1000 * s + 7 * r;
        }
        sample(ctx.cpu, logits.cpu, params, seeds, counters, tokens.cpu);
        sample(ctx.gpu, logits.gpu, params, seeds, counters, tokens.gpu);
        ctx.gpu.synchronize();
        ASSERT_EQ(to_vector<int32_t>(tokens.gpu), to_vector<int32_t>(tokens.cpu))
            << name_of(dtype) << " V=" << vocab << " seed round " << s;
        draws += n;
      }
    }
  }
  EXPECT_GE(draws, 1000);
}

TEST(CudaSampling, SampleLargeVocabulary) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const int64_t vocab = 151936;
  const std::vector<SamplingParams> params = {make(1.0f), make(0.7f, 0, 0.95f),
                                              make(1.0f, 64, 1.0f, 0.05f)};
  const auto n = static_cast<int64_t>(params.size());
  const Pair logits = logits_pair(DType::bf16, n, vocab, 77, false);
  const Pair tokens = zeros_pair(DType::i32, Shape{n});
  for (uint64_t s = 0; s < 16; ++s) {
    const std::vector<uint64_t> seeds(static_cast<size_t>(n), 1234 + s);
    const std::vector<uint64_t> counters = {s, s + 1, s + 2};
    sample(ctx.cpu, logits.cpu, params, seeds, counters, tokens.cpu);
    sample(ctx.gpu, logits.gpu, params, seeds, counters, tokens.gpu);
    ctx.gpu.synchronize();
    EXPECT_EQ(to_vector<int32_t>(tokens.gpu), to_vector<int32_t>(tokens.cpu)) << "round " << s;
  }
}

TEST(CudaSampling, SampleFromProbsDrawsTheSameTokens) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  for (int64_t vocab : {1, 3, 257, 5000}) {
    const int64_t n = 1000;
    std::vector<float> probs = random_normal(static_cast<size_t>(n * vocab), 5, 1.0f);
    for (float& p : probs) p = p < -0.5f ? 0.0f : std::fabs(p);  // many exact zeros
    probs[3] = -1.0f;                                            // negative entries count as 0
    probs[static_cast<size_t>(vocab)] = NAN;
    for (int64_t i = 0; i < vocab; ++i) probs[static_cast<size_t>(2 * vocab + i)] = 0.0f;  // row 2
    std::vector<float> u(static_cast<size_t>(n));
    for (size_t r = 0; r < u.size(); ++r) u[r] = philox_uniform(42, r, 0);
    u[0] = 0.0f;
    u[1] = 0.99999994f;
    const Pair p = values_pair(probs, DType::f32, Shape{n, vocab});
    const Pair uniforms = values_pair(u, DType::f32, Shape{n});
    const Pair tokens = zeros_pair(DType::i32, Shape{n});
    sample_from_probs(ctx.cpu, p.cpu, uniforms.cpu, tokens.cpu);
    sample_from_probs(ctx.gpu, p.gpu, uniforms.gpu, tokens.gpu);
    ctx.gpu.synchronize();
    EXPECT_EQ(to_vector<int32_t>(tokens.gpu), to_vector<int32_t>(tokens.cpu)) << "V=" << vocab;
  }
}

}  // namespace
}  // namespace dspark::test
