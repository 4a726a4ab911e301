// CPU vs CUDA for the speculative accept/resample op and the verifier: identical decisions
// (accepted counts and next tokens) on the same inputs and seeds, for rejection rows, coupled rows
// and batches that mix both; coupled rows emit exactly CUDA's plain draw at that position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_consistency.h"
#include "dspark/ops/sampling.h"
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

// The rows' modes: every row rejection, every row coupled, or alternating.
enum class Modes { rejection, coupled, mixed };

std::vector<int32_t> row_modes(Modes m, int64_t n) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    const bool coupled = m == Modes::coupled || (m == Modes::mixed && r % 2 == 1);
    out[static_cast<size_t>(r)] =
        static_cast<int32_t>(coupled ? SpecSampling::coupled : SpecSampling::rejection);
  }
  return out;
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> run_accept(const AcceptInputs& in, Device d,
                                                                 bool with_q, Modes m) {
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
  auto modes = OwnedTensor::from_vector(row_modes(m, n), Shape{n}, d);
  OwnedTensor acc(DType::i32, Shape{n}, d), next(DType::i32, Shape{n}, d);
  speculative_accept(ctx, p, with_q ? q.view() : Tensor(), tokens, indptr, seeds, pos, modes, acc,
                     next);
  return {to_vector<int32_t>(acc), to_vector<int32_t>(next)};
}

TEST(CudaSpeculative, AcceptMatchesCpuWithAndWithoutQ) {
  DSPARK_REQUIRE_CUDA();
  for (int64_t vocab : {5, 257, 32003}) {
    const AcceptInputs in = make_inputs(64, vocab, static_cast<uint32_t>(vocab));
    for (bool with_q : {true, false}) {
      for (Modes m : {Modes::rejection, Modes::coupled, Modes::mixed}) {
        const auto cpu = run_accept(in, Device::cpu(), with_q, m);
        const auto gpu = run_accept(in, test::kTestGpu, with_q, m);
        const int mi = static_cast<int>(m);
        EXPECT_EQ(cpu.first, gpu.first) << "vocab " << vocab << " q " << with_q << " modes " << mi;
        EXPECT_EQ(cpu.second, gpu.second)
            << "vocab " << vocab << " q " << with_q << " modes " << mi;
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
}

// Coupled rows on CUDA: the next token is CUDA's sample_from_probs of the p row where the row
// stopped, with the uniform plain sampling uses at that position (Philox lane kLaneSample).
TEST(CudaSpeculative, CoupledEmitsThePlainDraw) {
  DSPARK_REQUIRE_CUDA();
  const int64_t vocab = 32003;
  const AcceptInputs in = make_inputs(64, vocab, 9);
  const auto gpu = run_accept(in, test::kTestGpu, false, Modes::coupled);
  const int64_t n = static_cast<int64_t>(in.seeds.size());
  std::vector<float> rows, u;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t j = gpu.first[static_cast<size_t>(r)];
    const int64_t row = in.indptr[static_cast<size_t>(r)] + r + j;
    rows.insert(rows.end(), in.p.begin() + row * vocab, in.p.begin() + (row + 1) * vocab);
    u.push_back(philox_uniform(static_cast<uint64_t>(in.seeds[static_cast<size_t>(r)]),
                               static_cast<uint64_t>(in.positions[static_cast<size_t>(r)] + j),
                               kLaneSample));
  }
  Context ctx(test::kTestGpu);
  auto probs = OwnedTensor::from_vector(rows, Shape{n, vocab}, test::kTestGpu);
  auto ut = OwnedTensor::from_vector(u, Shape{n}, test::kTestGpu);
  OwnedTensor tokens(DType::i32, Shape{n}, test::kTestGpu);
  sample_from_probs(ctx, probs, ut, tokens);
  EXPECT_EQ(to_vector<int32_t>(tokens), gpu.second);
}

TEST(CudaSpeculative, VerifierMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  const int64_t vocab = 1000;
  const AcceptInputs in = make_inputs(32, vocab, 5);
  std::vector<float> logits(in.p.size());
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::log(in.p[i] + 1e-12f);
  const int64_t n = static_cast<int64_t>(in.seeds.size());
  const int64_t rows = static_cast<int64_t>(in.p.size()) / vocab;
  for (float temperature : {0.0f, 0.7f})
    for (Modes m : {Modes::rejection, Modes::coupled, Modes::mixed}) {
      std::vector<SamplingParams> params(static_cast<size_t>(n));
      const std::vector<int32_t> modes = row_modes(m, n);
      for (size_t r = 0; r < params.size(); ++r) {
        params[r].temperature = temperature;
        params[r].top_p = 0.95f;
        params[r].spec = static_cast<SpecSampling>(modes[r]);
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
      EXPECT_EQ(results[0].n_accepted, results[1].n_accepted)
          << "T " << temperature << " modes " << static_cast<int>(m);
      EXPECT_EQ(results[0].next_token, results[1].next_token)
          << "T " << temperature << " modes " << static_cast<int>(m);
    }
}

}  // namespace
}  // namespace dspark
