// The adaptive draft length (spec/draft_length.h, engine/verify_cost.h): the chooser against brute
// force, its zero-draft and full-draft ends, the acceptance estimate and the probes' backoff, the
// cost model's interpolation, the verify profile, and the engine with the adaptive policy: greedy
// output equal to plain greedy whether rows draft or not (the source stays committed), coupled
// sampling equal to plain sampling, the cut of drafts the source rates, and a source whose drafts
// are never accepted drafting rarely.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "common/test_util.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/engine/verify_cost.h"
#include "dspark/model/registry.h"
#include "dspark/spec/draft_model_source.h"
#include "dspark/spec/dspark/dspark_source.h"

namespace dspark {
namespace {

// Verify cost linear in the batch tokens: fixed + per_token * tokens.
RoundCostModel linear_cost(double fixed, double per_token, double draft_per_row = 0) {
  RoundCostModel c;
  c.verify = {{1, fixed + per_token}, {64, fixed + 64 * per_token}};
  c.draft_ms_per_row = draft_per_row;
  return c;
}

double expected_rate(std::span<const DraftLengthRow> rows, const std::vector<int>& k,
                     const RoundCostModel& cost) {
  double tokens = 0;
  int batch = 0, drafting = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    tokens += 1;
    double reach = 1;
    for (int j = 0; j < k[i]; ++j) tokens += reach *= rows[i].accept[static_cast<size_t>(j)];
    batch += 1 + k[i];
    drafting += k[i] > 0;
  }
  return tokens / cost.round_ms(batch, drafting, batch - static_cast<int>(rows.size()));
}

TEST(DraftLength, ChooserIsTheArgmaxOfExpectedTokensPerMs) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int n_rows = 1 + trial % 3, gamma = 1 + trial % 4;
    std::vector<std::vector<float>> accept(static_cast<size_t>(n_rows));
    std::vector<DraftLengthRow> rows;
    for (auto& a : accept) {
      for (int j = 0; j < gamma; ++j) a.push_back(u(rng));
      rows.push_back({a, gamma - (trial % 2)});
    }
    // A flat start (a device with idle width) then a slope: both ends of the trade.
    RoundCostModel cost;
    cost.verify = {{1, 10.0}, {1 + static_cast<int>(u(rng) * 8), 10.0}, {64, 10.0 + 60 * u(rng)}};
    cost.fixed_ms = 2;
    std::vector<int> chosen;
    choose_draft_lengths(rows, cost, chosen);
    // Brute force over every length vector.
    std::vector<int> k(static_cast<size_t>(n_rows), 0);
    double best = -1;
    while (true) {
      best = std::max(best, expected_rate(rows, k, cost));
      size_t i = 0;
      while (i < k.size() && ++k[i] > rows[i].cap) k[i++] = 0;
      if (i == k.size()) break;
    }
    EXPECT_NEAR(expected_rate(rows, chosen, cost), best, 1e-9 * best) << "trial " << trial;
    for (int i = 0; i < n_rows; ++i) EXPECT_LE(chosen[static_cast<size_t>(i)], rows[i].cap);
  }
}

TEST(DraftLength, ZeroDraftsWhenDraftingCannotPay) {
  const std::vector<float> sure(8, 0.99f);
  const std::vector<DraftLengthRow> rows = {{sure, 8}, {sure, 8}};
  std::vector<int> k;
  // Every token costs the same: a draft gains < 1 token for a full token's cost.
  choose_draft_lengths(rows, linear_cost(0, 5), k);
  EXPECT_EQ(k, (std::vector<int>{0, 0}));
  // Free verify width, but a draft step costs more than a whole plain round.
  choose_draft_lengths(rows, linear_cost(10, 0, 100), k);
  EXPECT_EQ(k, (std::vector<int>{0, 0}));
  // Acceptance 0: nothing to gain.
  const std::vector<float> never(8, 0.0f);
  choose_draft_lengths(std::vector<DraftLengthRow>{{never, 8}}, linear_cost(10, 0), k);
  EXPECT_EQ(k, std::vector<int>{0});
}

TEST(DraftLength, FullDraftsWhenWidthIsFree) {
  const std::vector<float> good(4, 0.8f), poor(4, 0.1f);
  std::vector<int> k;
  choose_draft_lengths(std::vector<DraftLengthRow>{{good, 4}, {good, 2}}, linear_cost(10, 0), k);
  EXPECT_EQ(k, (std::vector<int>{4, 2}));
  // Width costs something: the likely row drafts, the unlikely one does not.
  choose_draft_lengths(std::vector<DraftLengthRow>{{good, 4}, {poor, 4}}, linear_cost(10, 1), k);
  EXPECT_GT(k[0], 0);
  EXPECT_EQ(k[1], 0);
}

TEST(DraftLength, AcceptanceEstimateChangesOnlyWithEvidence) {
  AcceptanceEstimate e(4);
  for (float p : e.conditional()) EXPECT_FLOAT_EQ(p, AcceptanceEstimate::kPrior);
  for (int i = 0; i < 80; ++i) e.observe(4, 1);  // draft 1 always accepted, draft 2 never
  EXPECT_GT(e.conditional()[0], 0.99f);
  EXPECT_LT(e.conditional()[1], 0.01f);
  // Drafts 3 and 4 were never reached: unchanged.
  EXPECT_FLOAT_EQ(e.conditional()[2], AcceptanceEstimate::kPrior);
  ASSERT_EQ(DraftProbe::rating().size(), 1u);
  EXPECT_FLOAT_EQ(DraftProbe::rating()[0], AcceptanceEstimate::kPrior);
  e.reset();
  for (float p : e.conditional()) EXPECT_FLOAT_EQ(p, AcceptanceEstimate::kPrior);
  // A row starts from the pooled estimate.
  AcceptanceEstimate pooled(4), row(4);
  for (int i = 0; i < 80; ++i) pooled.observe(4, 0);
  row.start_from(pooled);
  EXPECT_LT(row.conditional()[0], 0.01f);
  EXPECT_EQ(row.conditional().size(), 4u);
}

// A stopped row is offered a probe after backoff() rounds without drafts; rejected or declined
// probes double the wait up to kMaxBackoff, an accepted one restarts the estimate, and a round
// the policy drafts on its own sets the wait back to kMinBackoff.
TEST(DraftLength, ProbesBackOffUntilOneIsAccepted) {
  DraftProbe p;
  EXPECT_EQ(p.backoff(), DraftProbe::kMinBackoff);
  int probes = 0, rounds = 0;
  for (; rounds < 2000; ++rounds) {
    if (p.due()) {
      ++probes;
      EXPECT_FALSE(p.probed(probes % 2 == 0, false));  // rejected or declined alike
    } else {
      p.waited();
    }
  }
  EXPECT_EQ(p.backoff(), DraftProbe::kMaxBackoff);
  // 4, 8, ..., 256 rounds of waiting, then one probe per 256: 6 + (2000 - 508 - 6) / 257 + ...
  EXPECT_GE(probes, 7);
  EXPECT_LE(probes, 14);
  while (!p.due()) p.waited();
  EXPECT_TRUE(p.probed(true, true));  // accepted: the estimate starts over
  EXPECT_EQ(p.backoff(), DraftProbe::kMaxBackoff);
  EXPECT_FALSE(p.due());
  p.drafted();
  EXPECT_EQ(p.backoff(), DraftProbe::kMinBackoff);
  for (int i = 0; i < DraftProbe::kMinBackoff; ++i) {
    EXPECT_FALSE(p.due());
    p.waited();
  }
  EXPECT_TRUE(p.due());
  EXPECT_EQ(DraftProbe(1000).backoff(), DraftProbe::kMaxBackoff);
  EXPECT_EQ(DraftProbe(1).backoff(), DraftProbe::kMinBackoff);
}

// Drafts cut before verification move the estimate toward their ratings, from the given position.
TEST(DraftLength, AcceptanceEstimateLearnsFromRatedDrafts) {
  AcceptanceEstimate e(4);
  const std::vector<float> rated = {0.0f, 0.5f};
  for (int i = 0; i < 120; ++i) e.expect(1, rated);
  EXPECT_FLOAT_EQ(e.conditional()[0], AcceptanceEstimate::kPrior);
  EXPECT_LT(e.conditional()[1], 1e-3f);
  EXPECT_NEAR(e.conditional()[2], 0.5f, 1e-3f);
  EXPECT_FLOAT_EQ(e.conditional()[3], AcceptanceEstimate::kPrior);
  e.expect(3, rated);  // past the last position: ignored
  EXPECT_FLOAT_EQ(e.conditional()[3],
                  AcceptanceEstimate::kPrior * (1.0f - AcceptanceEstimate::kRate));
}

TEST(DraftLength, DraftCostFitRecoversRowAndTokenCosts) {
  DraftCostFit fit;
  RoundCostModel c;
  for (int i = 0; i < 30; ++i) {
    const int rows = 1 + i % 4, drafts = rows * (1 + i % 3);
    fit.observe(rows, drafts, 2.0 * rows + 0.5 * drafts);
  }
  fit.apply(c);
  EXPECT_NEAR(c.draft_ms_per_row, 2.0, 0.05);
  EXPECT_NEAR(c.draft_ms_per_token, 0.5, 0.05);
  // One shape only: no negative cost.
  DraftCostFit same;
  for (int i = 0; i < 10; ++i) same.observe(2, 4, 6.0);
  same.apply(c);
  EXPECT_GE(c.draft_ms_per_row, 0);
  EXPECT_GE(c.draft_ms_per_token, 0);
  EXPECT_NEAR(2 * c.draft_ms_per_row + 4 * c.draft_ms_per_token, 6.0, 0.1);
}

TEST(DraftLength, CostModelInterpolatesAndExtrapolates) {
  RoundCostModel c;
  c.verify = {{1, 10}, {4, 16}, {8, 32}};
  EXPECT_DOUBLE_EQ(c.verify_ms(1), 10);
  EXPECT_DOUBLE_EQ(c.verify_ms(2), 12);
  EXPECT_DOUBLE_EQ(c.verify_ms(6), 24);
  EXPECT_DOUBLE_EQ(c.verify_ms(10), 40);
  c.draft_ms_per_row = 3;
  c.fixed_ms = 1;
  c.draft_ms_per_token = 0.5;
  EXPECT_DOUBLE_EQ(c.round_ms(4, 2, 3), 16 + 6 + 1.5 + 1);
  c.verify_scale = 2;
  EXPECT_DOUBLE_EQ(c.verify_ms(6), 48);
  EXPECT_EQ(parse_draft_policy("adaptive"), DraftPolicy::adaptive);
  EXPECT_EQ(parse_draft_policy("fixed"), DraftPolicy::fixed);
  EXPECT_THROW(parse_draft_policy("sometimes"), Error);
}

std::filesystem::path model_dir(const std::string& name) {
  return test::data_dir() / "models" / name;
}

TEST(DraftLength, VerifyProfileCoversTheBatchAndFreesItsPages) {
  if (!std::filesystem::exists(model_dir("qwen3") / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(model_dir("qwen3"), Device::cpu(), DType::f32);
  PagedKvCache kv(target->kv_shape(16, 64), Device::cpu());
  const int free = kv.free_pages();
  const VerifyCostProfile p = profile_verify_cost(*target, ctx, kv, {}, 4, 5, 10.0);
  ASSERT_GE(p.points.size(), 2u);
  EXPECT_EQ(p.points.front().first, 1);
  EXPECT_EQ(p.points.back().first, 20);
  for (size_t i = 1; i < p.points.size(); ++i) EXPECT_GT(p.points[i].first, p.points[i - 1].first);
  for (const auto& [n, ms] : p.points) EXPECT_GT(ms, 0) << n;
  EXPECT_EQ(kv.free_pages(), free);
  EXPECT_NE(describe(p).find("20 tokens"), std::string::npos);
  // Out of budget at once: the two smallest batches still give a slope.
  const VerifyCostProfile quick = profile_verify_cost(*target, ctx, kv, {}, 4, 5, 0.0);
  ASSERT_EQ(quick.points.size(), 2u);
  EXPECT_EQ(quick.points[0].first, 1);
  EXPECT_EQ(quick.points[1].first, 2);
}

std::vector<std::vector<int32_t>> prompts(int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 6 + 3 * r; ++i)
      p.push_back(static_cast<int32_t>((7 * i + 13 * r + 1) % vocab));
    out.push_back(p);
  }
  return out;
}

// 20 tokens, no EOS: every row decodes the same number of rounds.
GenerateOptions short_options() {
  GenerateOptions o;
  o.max_tokens = 20;
  o.eos_token_ids = {};
  return o;
}

struct PolicyRun {
  std::vector<RequestOutput> out;
  SpecTelemetry total;
};

PolicyRun run_policy(Model& target, Context& ctx, DraftSource* source, const GenerateOptions& o,
                     const std::vector<std::vector<int32_t>>& ps, DraftPolicy policy,
                     std::vector<std::pair<int, double>> verify_cost) {
  std::vector<RequestInput> reqs;
  for (const auto& p : ps) reqs.push_back(RequestInput{p, o, nullptr, {}});
  SpecConfig cfg;
  cfg.gamma = 4;
  cfg.draft_policy = policy;
  cfg.verify_cost = std::move(verify_cost);
  PolicyRun r;
  r.out = generate_speculative(target, ctx, source, std::move(reqs), cfg);
  for (const auto& o2 : r.out) r.total.merge(o2.spec);
  return r;
}

// Greedy: plain == fixed == adaptive with verify width free (rows draft), costly (rows never draft)
// and profiled; with the self draft model and the DSpark fixture drafter, which keeps committing
// every kept token while its rows draft nothing.
TEST(DraftLength, AdaptiveGreedyEqualsPlainGreedy) {
  if (!std::filesystem::exists(model_dir("qwen3") / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(model_dir("qwen3"), Device::cpu(), DType::f32);
  GenerateOptions o = short_options();
  const auto ps = prompts(target->config().vocab_size);
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : ps) plain.push_back(generate(*target, ctx, p, o).tokens);
  const std::vector<std::pair<int, double>> flat = {{1, 10.0}, {64, 10.0}};
  // Every batch token costs 10x a whole one-token round: never pays, whatever the measured
  // verify scale and fixed cost of this machine.
  const std::vector<std::pair<int, double>> steep = {{1, 10.0}, {64, 6310.0}};
  for (const std::string source_name : {"self", "dspark"}) {
    for (int c = 0; c < 4; ++c) {
      std::unique_ptr<DraftSource> source;
      DSparkSource* dspark = nullptr;
      if (source_name == "self") {
        source = std::make_unique<DraftModelSource>(
            load_model(model_dir("qwen3"), Device::cpu(), DType::f32), 4096);
      } else {
        const auto dir = test::data_dir() / "drafters" / "qwen3_dflash";
        if (!std::filesystem::exists(dir / "config.json")) continue;
        DSparkSourceOptions opt;
        opt.kv_tokens = 4096;
        auto s = load_dspark_source(dir, *target, opt, false);
        dspark = s.get();
        source = std::move(s);
      }
      const DraftPolicy policy = c == 0 ? DraftPolicy::fixed : DraftPolicy::adaptive;
      const auto cost = c == 1 ? flat : c == 2 ? steep : std::vector<std::pair<int, double>>{};
      const PolicyRun r = run_policy(*target, ctx, source.get(), o, ps, policy, cost);
      for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_EQ(r.out[i].result.tokens, plain[i]) << source_name << " case " << c << " row " << i;
      EXPECT_EQ(r.total.draft_policy, policy);
      // Fixed drafts every round; adaptive with free width drafts from the first round on (and
      // keeps drafting with the self draft, whose drafts are accepted; the fixture drafter's are
      // not, so its rows may stop).
      if (c == 0 || (c == 1 && source_name == "self")) {
        EXPECT_GT(r.total.mean_draft_length(), 0.5) << source_name << c;
      }
      if (c == 1) {
        EXPECT_GT(r.total.drafted, 0) << source_name;
      }
      if (c == 2) {
        EXPECT_EQ(r.total.drafted, 0) << source_name;
        EXPECT_EQ(r.total.mean_draft_length(), 0) << source_name;
      }
      if (dspark) {
        const DSparkStats& ds = dspark->dspark_stats();
        EXPECT_EQ(ds.n_rows_projected + ds.n_rows_dropped, ds.n_rows_committed);
      }
      std::printf("[ adaptive ] %-6s case %d rounds=%lld drafted=%lld mean_len=%.2f tau=%.2f\n",
                  source_name.c_str(), c, static_cast<long long>(r.total.rounds),
                  static_cast<long long>(r.total.drafted), r.total.mean_draft_length(),
                  r.total.tau());
    }
  }
}

// Coupled sampling with the adaptive policy: the same seed gives the plain sampling tokens.
TEST(DraftLength, AdaptiveCoupledSamplingEqualsPlainSampling) {
  if (!std::filesystem::exists(model_dir("qwen3") / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(model_dir("qwen3"), Device::cpu(), DType::f32);
  GenerateOptions o = short_options();
  o.sampling.temperature = 0.8f;
  o.sampling.top_p = 0.9f;
  o.sampling.spec = SpecSampling::coupled;
  const auto ps = prompts(target->config().vocab_size);
  for (uint64_t seed : {1u, 2u}) {
    o.seed = seed;
    std::vector<std::vector<int32_t>> plain;
    for (const auto& p : ps) plain.push_back(generate(*target, ctx, p, o).tokens);
    DraftModelSource source(load_model(model_dir("qwen3"), Device::cpu(), DType::f32), 4096);
    const PolicyRun r =
        run_policy(*target, ctx, &source, o, ps, DraftPolicy::adaptive, {{1, 10.0}, {64, 10.0}});
    for (size_t i = 0; i < ps.size(); ++i)
      EXPECT_EQ(r.out[i].result.tokens, plain[i]) << "seed " << seed << " row " << i;
    EXPECT_GT(r.total.drafted, 0);
  }
}

// A source whose drafts carry the given rating by position in their row (Proposal::acceptance).
class RatedSource : public ForwardingDraftSource {
 public:
  RatedSource(DraftSource& inner, std::vector<float> by_position)
      : ForwardingDraftSource(inner), by_position_(std::move(by_position)) {}
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    ForwardingDraftSource::propose(ctx, requests, out);
    out.acceptance.clear();
    for (size_t i = 0; i + 1 < out.indptr.size(); ++i)
      for (int j = 0; j < out.count(i); ++j)
        out.acceptance.push_back(by_position_[static_cast<size_t>(j) % by_position_.size()]);
  }

 private:
  std::vector<float> by_position_;
};

// Proposes, for each row, tokens the target never emits next: the row's plain greedy token at that
// position plus one (the plain outputs of its prompt are given), so every draft is rejected.
class WrongSource final : public DraftSource {
 public:
  WrongSource(std::map<std::vector<int32_t>, std::vector<int32_t>> plain, int64_t vocab)
      : plain_(std::move(plain)), vocab_(vocab) {}
  std::string name() const override { return "wrong"; }
  void begin(Context&, RowId row, std::span<const int32_t> prompt) override {
    rows_[row] = {&plain_.at(std::vector<int32_t>(prompt.begin(), prompt.end())), 0};
  }
  void commit(Context&, std::span<const RowUpdate> updates, std::span<const Tensor>) override {
    for (const RowUpdate& u : updates)
      if (u.pending >= 0) rows_[u.row].emitted += u.n_accepted + 1;
  }
  void propose(Context&, std::span<const ProposeRequest> requests, Proposal& out) override {
    for (const ProposeRequest& q : requests) {
      const Row& r = rows_.at(q.row);
      for (int j = 0; j < q.max_tokens; ++j) {
        const auto at = std::min(static_cast<size_t>(r.emitted + j), r.plain->size() - 1);
        out.tokens.push_back(static_cast<int32_t>(((*r.plain)[at] + 1) % vocab_));
      }
      out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
    }
  }
  void release(RowId) override {}

 private:
  struct Row {
    const std::vector<int32_t>* plain;
    int emitted;  // tokens emitted so far (the pending one included)
  };
  std::map<std::vector<int32_t>, std::vector<int32_t>> plain_;
  int64_t vocab_;
  std::map<RowId, Row> rows_;
};

// A source whose drafts are never accepted, where one draft costs the round ~30% more: the row
// drafts while its estimate falls from the prior, then only its probes draft, ever more rarely
// (before probes, the estimate drifted back toward the prior and the row drafted again every few
// dozen rounds). Output equal to plain greedy.
TEST(DraftLength, AdaptiveRarelyDraftsWhenNothingIsAccepted) {
  if (!std::filesystem::exists(model_dir("qwen3") / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(model_dir("qwen3"), Device::cpu(), DType::f32);
  GenerateOptions o = short_options();
  o.max_tokens = 240;
  const std::vector<std::vector<int32_t>> ps = {prompts(target->config().vocab_size)[0]};
  std::map<std::vector<int32_t>, std::vector<int32_t>> plain;
  for (const auto& p : ps) plain[p] = generate(*target, ctx, p, o).tokens;
  WrongSource source(plain, target->config().vocab_size);
  const PolicyRun r = run_policy(*target, ctx, &source, o, ps, DraftPolicy::adaptive,
                                 {{1, 10.0}, {64, 10.0 + 63 * 3.0}});
  EXPECT_EQ(r.out[0].result.tokens, plain[ps[0]]);
  EXPECT_EQ(r.total.accepted, 0);
  ASSERT_FALSE(r.total.drafted_at.empty());
  const int64_t drafting_rounds = r.total.drafted_at[0];
  std::printf("[ probes ] rounds=%lld drafting rounds=%lld drafted=%lld\n",
              static_cast<long long>(r.total.rounds), static_cast<long long>(drafting_rounds),
              static_cast<long long>(r.total.drafted));
  // The estimate's fall from the prior (at most ~19 rounds at kRate 0.1 to below 0.1) and the
  // probes after 4, 8, ..., 128 rounds.
  EXPECT_GE(r.total.rounds, 239);
  EXPECT_LE(drafting_rounds, 30);
  // Probes after 4, 8, 16, ...: offered at least 3 times, all taken (one draft at the prior pays
  // at this cost), none accepted.
  EXPECT_GE(r.total.probes_offered, 3);
  EXPECT_EQ(r.total.probes_taken, r.total.probes_offered);
  EXPECT_EQ(r.total.probes_accepted, 0);
}

// The adaptive policy cuts rated drafts that do not pay (greedy and coupled sampling stay equal
// to plain decoding, the sampled rows' q compacted with their drafts) and keeps those that do.
TEST(DraftLength, AdaptiveCutsRatedDrafts) {
  if (!std::filesystem::exists(model_dir("qwen3") / "config.json")) GTEST_SKIP();
  Context ctx(Device::cpu());
  auto target = load_model(model_dir("qwen3"), Device::cpu(), DType::f32);
  const auto ps = prompts(target->config().vocab_size);
  const std::vector<std::pair<int, double>> flat = {{1, 10.0}, {64, 10.0}};
  for (const bool sampled : {false, true}) {
    GenerateOptions o = short_options();
    if (sampled) {
      o.sampling.temperature = 0.8f;
      o.sampling.top_p = 0.9f;
      o.sampling.spec = SpecSampling::coupled;
      o.seed = 3;
    }
    std::vector<std::vector<int32_t>> plain;
    for (const auto& p : ps) plain.push_back(generate(*target, ctx, p, o).tokens);
    std::vector<PolicyRun> runs;
    for (const std::vector<float>& rating :
         {std::vector<float>{1.0f}, std::vector<float>{0.0f}, std::vector<float>{1.0f, 0.0f}}) {
      DraftModelSource inner(load_model(model_dir("qwen3"), Device::cpu(), DType::f32), 4096);
      RatedSource source(inner, rating);
      runs.push_back(run_policy(*target, ctx, &source, o, ps, DraftPolicy::adaptive, flat));
      for (size_t i = 0; i < ps.size(); ++i)
        EXPECT_EQ(runs.back().out[i].result.tokens, plain[i])
            << "sampled " << sampled << " rating " << rating[0] << " row " << i;
    }
    const SpecTelemetry &all = runs[0].total, &none = runs[1].total, &first = runs[2].total;
    EXPECT_GT(all.drafted, 0);
    EXPECT_EQ(all.drafts_cut, 0);
    EXPECT_EQ(none.drafted, 0);
    EXPECT_GT(none.drafts_cut, 0);
    // [1, 0, 1, 0]: only the first draft of a row pays.
    EXPECT_GT(first.drafted, 0);
    EXPECT_GT(first.drafts_cut, 0);
    EXPECT_EQ(first.drafted_at.size(), 1u);
  }
}

}  // namespace
}  // namespace dspark
