// Coupled speculative sampling (SpecSampling::coupled, ops/speculative.h) on the CPU:
//   - the op: a draft is accepted iff it equals the target's own sample at its position (the
//     inverse-CDF draw with Philox lane kLaneSample, the draw of sample()), and the next token is
//     that sample; rows of both modes mix in one call;
//   - the engine: the same seed gives the same tokens with speculation on and off, with prompt
//     lookup, draft models and DSpark block drafters on the tiny fixtures (common/lossless.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/lossless.h"
#include "common/test_util.h"
#include "dspark/core/philox.h"
#include "dspark/ops/sampling.h"
#include "dspark/ops/speculative.h"

namespace dspark {
namespace {

// p rows of `vocab` (softmax of 2 * N(0, 1)); drafts are the target's sample half the time.
struct CoupledCase {
  std::vector<float> p;
  std::vector<int32_t> tokens, indptr{0}, positions, modes;
  std::vector<int64_t> seeds;
  int64_t vocab = 0;
};

// The target's sample at `position` from the p row `row` (what plain sampling draws there).
int32_t target_sample(const CoupledCase& c, int64_t row, uint64_t seed, int64_t position) {
  Context ctx(Device::cpu());
  auto probs = OwnedTensor::from_vector(
      std::vector<float>(c.p.begin() + row * c.vocab, c.p.begin() + (row + 1) * c.vocab),
      Shape{1, c.vocab}, Device::cpu());
  const std::vector<float> u = {philox_uniform(seed, static_cast<uint64_t>(position), kLaneSample)};
  auto ut = OwnedTensor::from_vector(u, Shape{1}, Device::cpu());
  OwnedTensor token(DType::i32, Shape{1}, Device::cpu());
  sample_from_probs(ctx, probs, ut, token);
  return to_vector<int32_t>(token).front();
}

CoupledCase make_case(int n_rows, int64_t vocab) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  CoupledCase c;
  c.vocab = vocab;
  for (int r = 0; r < n_rows; ++r) {
    const int k = r % 6;
    const uint64_t seed = gen();
    const int32_t position = static_cast<int32_t>(gen() % 500);
    const int64_t row0 = static_cast<int64_t>(c.p.size()) / vocab;
    for (int j = 0; j <= k; ++j) {
      std::vector<float> row(static_cast<size_t>(vocab));
      float mx = -1e30f, s = 0.0f;
      for (auto& x : row) mx = std::max(mx, x = 2.0f * normal(gen));
      for (auto& x : row) s += (x = std::exp(x - mx));
      for (auto& x : row) c.p.push_back(x / s);
    }
    for (int j = 0; j < k; ++j) {
      const int32_t t = target_sample(c, row0 + j, seed, position + j);
      c.tokens.push_back(gen() % 2 ? t : static_cast<int32_t>((t + 1) % vocab));
    }
    c.indptr.push_back(static_cast<int32_t>(c.tokens.size()));
    c.seeds.push_back(static_cast<int64_t>(seed));
    c.positions.push_back(position);
    c.modes.push_back(
        static_cast<int32_t>(r % 3 == 2 ? SpecSampling::rejection : SpecSampling::coupled));
  }
  return c;
}

TEST(SpecCoupled, AcceptsExactlyTheTargetsSamples) {
  const CoupledCase c = make_case(48, 300);
  const auto n = static_cast<int64_t>(c.seeds.size());
  const auto nd = static_cast<int64_t>(c.tokens.size());
  const Device cpu = Device::cpu();
  Context ctx(cpu);
  auto p = OwnedTensor::from_vector(c.p, Shape{nd + n, c.vocab}, cpu);
  auto tokens = OwnedTensor::from_vector(c.tokens, Shape{nd}, cpu);
  auto indptr = OwnedTensor::from_vector(c.indptr, Shape{n + 1}, cpu);
  auto seeds = OwnedTensor::from_vector(c.seeds, Shape{n}, cpu);
  auto pos = OwnedTensor::from_vector(c.positions, Shape{n}, cpu);
  auto modes = OwnedTensor::from_vector(c.modes, Shape{n}, cpu);
  OwnedTensor acc(DType::i32, Shape{n}, cpu), next(DType::i32, Shape{n}, cpu);
  speculative_accept(ctx, p, Tensor(), tokens, indptr, seeds, pos, modes, acc, next);
  const auto n_acc = to_vector<int32_t>(acc);
  const auto next_tok = to_vector<int32_t>(next);
  int coupled_rows = 0, accepted = 0, rejected = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (c.modes[r] != static_cast<int32_t>(SpecSampling::coupled)) continue;
    ++coupled_rows;
    const int64_t d0 = c.indptr[r], k = c.indptr[r + 1] - d0;
    // Reference: walk the row, the target's sample at each position decides.
    int64_t j = 0;
    int32_t t = 0;
    for (;; ++j) {
      t = target_sample(c, d0 + r + j, static_cast<uint64_t>(c.seeds[r]), c.positions[r] + j);
      if (j == k || c.tokens[d0 + j] != t) break;
    }
    EXPECT_EQ(n_acc[r], j) << "row " << r;
    EXPECT_EQ(next_tok[r], t) << "row " << r;
    accepted += n_acc[r];
    rejected += n_acc[r] < k;
  }
  EXPECT_GT(coupled_rows, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST(SpecCoupled, SameSeedSameTokensWithAndWithoutSpeculationLlama3) {
  test::check_coupled_equals_plain("llama3", Device::cpu(),
                                   {test::dspark_fixture_source("llama3_deepspec")});
}

TEST(SpecCoupled, SameSeedSameTokensWithAndWithoutSpeculationQwen3) {
  test::check_coupled_equals_plain("qwen3", Device::cpu(),
                                   {test::dspark_fixture_source("qwen3_dflash")});
}

}  // namespace
}  // namespace dspark
