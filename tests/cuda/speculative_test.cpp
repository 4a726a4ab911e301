// CPU vs CUDA for the speculative accept/resample op and the verifier: identical decisions
// (accepted counts and next tokens) on the same inputs and seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_consistency.h"
#include "dspark/ops/speculative.h"
#include "dspark/spec/verifier.h"

namespace dspark {
namespace {

struct AcceptInputs {
  std::vector<float> p, q;
  std::vector<int32_t> tokens, indptr, positions;
  std::vector<int64_t> seeds;
  int64_t vocab = 0;
};

// Rows with 0..6 drafts; p and q independent softmaxes of scaled normals; drafts are p's mode
// half the time (mostly accepted) and random otherwise (mostly rejected).
AcceptInputs make_inputs(int n_rows, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  AcceptInputs in;
  in.vocab = vocab;
  in.indptr.push_back(0);
  // softmax(scale * N(0, 1)): peaked enough that a draft equal to p's mode is usually accepted.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto dist = [&](std::vector<float>& out, float scale) {
    std::vector<float> row(static_cast<size_t>(vocab));
    float mx = -1e30f;
    for (auto& x : row) mx = std::max(mx, x = scale * normal(gen));
    float s = 0;
    for (auto& x : row) s += (x = std::exp(x - mx));
    for (auto& x : row) out.push_back(x / s);
  };
  for (int r = 0; r < n_rows; ++r) {
    const int k = r % 7;
    for (int j = 0; j <= k; ++j) dist(in.p, 3.0f);
    for (int j = 0; j < k; ++j) {
      dist(in.q, 2.0f);
      // Draft: argmax of the matching p row half of the time, else random.
      const float* prow = in.p.data() + (in.p.size() / vocab - (k + 1) + j) * vocab;
      int32_t best = 0;
      for (int64_t v = 1; v < vocab; ++v)
        if (prow[v] > prow[best]) best = static_cast<int32_t>(v);
      in.tokens.push_back(u(gen) < 0.5f ? best : static_cast<int32_t>(gen() % vocab));
    }
    in.indptr.push_back(static_cast<int32_t>(in.tokens.size()));
    in.seeds.push_back(static_cast<int64_t>(gen()));
    in.positions.push_back(static_cast<int32_t>(gen() % 1000));
  }
  return in;
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> run_accept(const AcceptInputs& in, Device d,
                                                                 bool with_q) {
  Context ctx(d);
  const int64_t n = static_cast<int64_t>(in.seeds.size());
  const int64_t nd = static_cast<int64_t>(in.tokens.size());
  auto p = OwnedTensor::from_vector(in.p, Shape{nd + n, in.vocab}, d);
  OwnedTensor q;
  if (with_q) q = OwnedTensor::from_vector(in.q, Shape{nd, in.vocab}, d);
  auto tokens = OwnedTensor::from_vector(in.tokens, Shape{nd}, d);
  auto indptr = OwnedTensor::from_vector(in.indptr, Shape{n + 1}, d);
  auto seeds = OwnedTensor::from_vector(in.seeds, Shape{n}, d);
  auto pos = OwnedTensor::from_vector(in.positions, Shape{n}, d);
  OwnedTensor acc(DType::i32, Shape{n}, d), next(DType::i32, Shape{n}, d);
  speculative_accept(ctx, p, with_q ? q.view() : Tensor(), tokens, indptr, seeds, pos, acc, next);
  return {to_vector<int32_t>(acc), to_vector<int32_t>(next)};
}

TEST(CudaSpeculative, AcceptMatchesCpuWithAndWithoutQ) {
  DSPARK_REQUIRE_CUDA();
  for (int64_t vocab : {5, 257, 32003}) {
    const AcceptInputs in = make_inputs(64, vocab, static_cast<uint32_t>(vocab));
    for (bool with_q : {true, false}) {
      const auto cpu = run_accept(in, Device::cpu(), with_q);
      const auto gpu = run_accept(in, test::kTestGpu, with_q);
      EXPECT_EQ(cpu.first, gpu.first) << "vocab " << vocab << " q " << with_q;
      EXPECT_EQ(cpu.second, gpu.second) << "vocab " << vocab << " q " << with_q;
      int accepted = 0, rejected = 0;
      for (size_t r = 0; r < cpu.first.size(); ++r) {
        const int k = in.indptr[r + 1] - in.indptr[r];
        accepted += cpu.first[r];
        rejected += cpu.first[r] < k;
      }
      EXPECT_GT(accepted, 0);
      EXPECT_GT(rejected, 0);
    }
  }
}

TEST(CudaSpeculative, VerifierMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  const int64_t vocab = 1000;
  const AcceptInputs in = make_inputs(32, vocab, 5);
  std::vector<float> logits(in.p.size());
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::log(in.p[i] + 1e-12f);
  const int64_t n = static_cast<int64_t>(in.seeds.size());
  const int64_t rows = static_cast<int64_t>(in.p.size()) / vocab;
  for (float temperature : {0.0f, 0.7f}) {
    std::vector<SamplingParams> params(static_cast<size_t>(n));
    for (auto& sp : params) {
      sp.temperature = temperature;
      sp.top_p = 0.95f;
    }
    std::vector<uint64_t> seeds(in.seeds.begin(), in.seeds.end());
    VerifyResult results[2];
    int i = 0;
    for (Device d : {Device::cpu(), test::kTestGpu}) {
      Context ctx(d);
      auto lt = OwnedTensor::from_vector(logits, Shape{rows, vocab}, d);
      Proposal prop;
      prop.tokens = in.tokens;
      prop.indptr = in.indptr;
      Verifier v;
      results[i++] = v.verify(ctx, lt, prop, params, seeds, in.positions);
    }
    EXPECT_EQ(results[0].n_accepted, results[1].n_accepted) << "T " << temperature;
    EXPECT_EQ(results[0].next_token, results[1].next_token) << "T " << temperature;
  }
}

}  // namespace
}  // namespace dspark
