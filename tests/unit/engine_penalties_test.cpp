// Penalties and logprobs through the engine: the op against a direct reference, the history's
// edits, token_logprobs against a double-precision reference, and on the tiny qwen3 fixture
// (CPU, f32) speculative decoding with penalties and logprobs against plain generate():
//   greedy: identical tokens for every draft source (the target drafting for itself, prompt
//     lookup, the DFlash fixture), all requests in one batch;
//   logprobs: per-token values equal within 1e-4 (f32 forwards of different batch shapes round
//     differently: up to ~3e-5 seen), top lists sorted, the chosen token's entry consistent;
//   coupled sampling with penalties: identical tokens for the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "common/lossless.h"
#include "common/test_util.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "dspark/ops/penalties.h"
#include "dspark/spec/draft_model_source.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

TEST(Penalties, OpMatchesDirectFormula) {
  Context ctx(Device::cpu());
  std::vector<float> v = {2.0f, -2.0f, 0.0f, 1.0f, -0.5f, 3.0f};
  OwnedTensor x = OwnedTensor::from_vector(v, Shape{2, 3}, Device::cpu());
  const std::vector<PenaltyEntry> e = {
      {0, 0, 2.0f, 0.0f}, {0, 1, 2.0f, 0.5f}, {1, 2, 1.0f, -1.0f}, {1, 1, 0.5f, 0.25f}};
  apply_penalties(ctx, x.view(), e);
  const std::vector<float> got = to_vector<float>(x.view());
  const std::vector<float> want = {1.0f, -4.5f, 0.0f, 1.0f, -0.5f * 0.5f - 0.25f, 4.0f};
  EXPECT_EQ(got, want);
  const std::vector<PenaltyEntry> twice = {{0, 0, 2.0f, 0.0f}, {0, 0, 1.0f, 1.0f}};
  EXPECT_THROW(apply_penalties(ctx, x.view(), twice), Error);
  const std::vector<PenaltyEntry> outside = {{2, 0, 2.0f, 0.0f}};
  EXPECT_THROW(apply_penalties(ctx, x.view(), outside), Error);
  const std::vector<PenaltyEntry> bad = {{0, 0, 0.0f, 0.0f}};
  EXPECT_THROW(apply_penalties(ctx, x.view(), bad), Error);
}

TEST(Penalties, HistoryEdits) {
  const std::vector<int32_t> prompt = {5, 3, 5, 9};
  PenaltyHistory h(PenaltyParams{1.5f, 0.25f, 0.5f}, prompt);
  h.add_generated(3);
  h.add_generated(7);
  h.add_generated(3);
  std::vector<PenaltyEntry> out;
  const std::vector<int32_t> extra = {7, 11};
  h.append_entries(4, extra, out);
  // Tokens 3 (prompt, generated 2), 5 and 9 (prompt only), 7 (generated 1 + 1 draft), 11 (draft).
  ASSERT_EQ(out.size(), 5u);
  const int32_t tokens[] = {3, 5, 7, 9, 11};
  const float subtract[] = {0.5f * 2 + 0.25f, 0, 0.5f * 2 + 0.25f, 0, 0.5f + 0.25f};
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].row, 4);
    EXPECT_EQ(out[i].token, tokens[i]);
    EXPECT_EQ(out[i].repetition, 1.5f);
    EXPECT_FLOAT_EQ(out[i].subtract, subtract[i]) << "token " << tokens[i];
  }
  // Presence / frequency only: the prompt is not part of the history.
  PenaltyHistory g(PenaltyParams{1.0f, 0.5f, 0.0f}, prompt);
  g.add_generated(8);
  out.clear();
  g.append_entries(0, {}, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].token, 8);
  EXPECT_EQ(out[0].subtract, 0.5f);
  PenaltyHistory off(PenaltyParams{}, prompt);
  out.clear();
  off.append_entries(0, extra, out);
  EXPECT_TRUE(out.empty());
  EXPECT_THROW(validate(PenaltyParams{0.0f, 0, 0}), Error);
  EXPECT_THROW(validate(PenaltyParams{1.0f, 2.5f, 0}), Error);
  EXPECT_THROW(validate(PenaltyParams{1.0f, 0, -3.0f}), Error);
}

TEST(TokenLogprobs, MatchDoubleReference) {
  const std::vector<float> logits = test::random_normal(1000, 3, 2.0f);
  for (const float t : {0.0f, 0.7f, 1.5f}) {
    const TokenLogprobs e = token_logprobs(logits.data(), 1000, t, 17, 5);
    const double tt = t > 0 ? t : 1.0;
    double m = -INFINITY, sum = 0;
    for (const float x : logits) m = std::max(m, static_cast<double>(x / static_cast<float>(tt)));
    for (const float x : logits)
      sum += std::exp(static_cast<double>(x / static_cast<float>(tt)) - m);
    const double lse = m + std::log(sum);
    EXPECT_NEAR(e.logprob, logits[17] / static_cast<float>(tt) - lse, 1e-5);
    ASSERT_EQ(e.top.size(), 5u);
    std::vector<int> order(1000);
    for (int i = 0; i < 1000; ++i) order[static_cast<size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)];
    });
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(e.top[k].token, order[k]);
      EXPECT_NEAR(e.top[k].logprob,
                  logits[static_cast<size_t>(order[k])] / static_cast<float>(tt) - lse, 1e-5);
    }
  }
  // NaN and -inf logits have probability 0; top_n larger than the vocabulary is cut.
  const float odd[] = {NAN, -INFINITY, 1.0f};
  const TokenLogprobs e = token_logprobs(odd, 3, 1.0f, 2, 20);
  EXPECT_EQ(e.logprob, 0.0f);
  ASSERT_EQ(e.top.size(), 3u);
  EXPECT_EQ(e.top[0].token, 2);
  EXPECT_TRUE(std::isinf(e.top[1].logprob) && e.top[1].logprob < 0);
}

// ---- through the engine --------------------------------------------------------------------

std::filesystem::path qwen3() {
  return test::data_dir() / "models" / "qwen3";
}

std::vector<std::vector<int32_t>> prompts() {
  std::vector<std::vector<int32_t>> out;
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> tok(3, 300);
  const std::vector<int32_t> pattern = {tok(gen), tok(gen), tok(gen)};
  std::vector<int32_t> rep;
  for (int i = 0; i < 6; ++i) rep.insert(rep.end(), pattern.begin(), pattern.end());
  out.push_back(rep);  // prompt lookup finds matches; repetition penalty has work to do
  for (size_t n : {7, 19, 31}) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = tok(gen);
    out.push_back(p);
  }
  return out;
}

std::vector<test::NamedSource> sources() {
  return test::self_ngram_fixture_sources("qwen3", "qwen3_dflash");
}

GenerateOptions options(PenaltyParams p, float temperature, uint64_t seed) {
  GenerateOptions o;
  o.max_tokens = 24;
  o.eos_token_ids = {};
  o.penalties = p;
  o.sampling.temperature = temperature;
  o.seed = seed;
  o.logprobs = 3;
  return o;
}

void expect_same_logprobs(const GenerateResult& spec, const GenerateResult& plain,
                          const std::string& what) {
  ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size()) << what;
  ASSERT_EQ(spec.logprobs.size(), spec.tokens.size()) << what;
  for (size_t i = 0; i < spec.logprobs.size(); ++i) {
    const TokenLogprobs& a = spec.logprobs[i];
    const TokenLogprobs& b = plain.logprobs[i];
    EXPECT_EQ(a.token, spec.tokens[i]) << what;
    EXPECT_NEAR(a.logprob, b.logprob, 1e-4) << what << " token " << i;
    ASSERT_EQ(a.top.size(), 3u) << what;
    double mass = 0;
    for (size_t k = 0; k < a.top.size(); ++k) {
      EXPECT_EQ(a.top[k].token, b.top[k].token) << what << " token " << i;
      EXPECT_NEAR(a.top[k].logprob, b.top[k].logprob, 1e-4) << what << " token " << i;
      if (k > 0) {
        EXPECT_GE(a.top[k - 1].logprob, a.top[k].logprob) << what;
      }
      if (a.top[k].token == a.token) {
        EXPECT_EQ(a.top[k].logprob, a.logprob) << what;
      }
      mass += std::exp(static_cast<double>(a.top[k].logprob));
    }
    EXPECT_LE(mass, 1.0 + 1e-6) << what;
  }
}

void check_engine_equals_plain(float temperature) {
  if (!std::filesystem::exists(qwen3() / "config.json")) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  auto target = load_model(qwen3(), Device::cpu(), DType::f32);
  const auto ps = prompts();
  const std::vector<PenaltyParams> settings = {
      {1.3f, 0.0f, 0.0f}, {1.0f, 0.8f, 0.5f}, {0.8f, -0.5f, 1.0f}};
  int changed = 0;  // requests whose tokens the penalties change (or the test proves little)
  for (const PenaltyParams& pen : settings) {
    std::vector<RequestInput> reqs;
    std::vector<GenerateResult> plain;
    for (size_t i = 0; i < ps.size(); ++i) {
      const GenerateOptions o = options(pen, temperature, 11 + i);
      plain.push_back(generate(*target, ctx, ps[i], o));
      changed += plain.back().tokens !=
                 generate(*target, ctx, ps[i], options({}, temperature, 11 + i)).tokens;
      reqs.push_back(RequestInput{ps[i], o, nullptr, {}});
    }
    for (const auto& sc : sources()) {
      auto source = sc.make(*target);
      SpecConfig cfg;
      cfg.gamma = 4;
      const auto out = generate_speculative(*target, ctx, source.get(), reqs, cfg);
      SpecTelemetry total;
      for (size_t i = 0; i < ps.size(); ++i) {
        const std::string what = sc.name + " T=" + std::to_string(temperature) + " penalties (" +
                                 std::to_string(pen.repetition) + ", " +
                                 std::to_string(pen.presence) + ", " +
                                 std::to_string(pen.frequency) + ") prompt " + std::to_string(i);
        EXPECT_EQ(out[i].result.tokens, plain[i].tokens) << what;
        expect_same_logprobs(out[i].result, plain[i], what);
        total.merge(out[i].spec);
      }
      // The target drafting for itself (without penalties): many emitted tokens are accepted
      // drafts, whose logprobs come from verify rows.
      if (sc.name == "draft-model:self") {
        EXPECT_GT(total.acceptance(), 0.3);
      }
    }
  }
  EXPECT_GE(changed, 4);
}

TEST(EnginePenalties, GreedySpeculativeEqualsPlain) {
  check_engine_equals_plain(0.0f);
}

TEST(EnginePenalties, CoupledSamplingEqualsPlain) {
  check_engine_equals_plain(0.9f);
}

}  // namespace
}  // namespace dspark
