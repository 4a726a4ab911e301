// Prefix reuse with the MTP source (SpecConfig::prefix_cache, MtpSource::attach_prefix): a request
// whose prompt starts like an earlier one attaches the target's KV pages and the MTP layer's rows
// of that prefix; its output equals plain greedy decoding and every round drafts exactly the
// tokens it drafts with the cache off. The MTP row of position i also depends on token i + 1 and,
// through h_i, on the first prompt token: a prompt that changes the token after a page reuses
// that page of the target but not of the layer, and pages are keyed under the first token.
#include <gtest/gtest.h>

#include "common/mtp_checks.h"
#include "common/test_util.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/mtp.h"
#include "dspark/spec/mtp_source.h"

namespace dspark {
namespace {

// Records every proposal's drafts, in call order.
class RecordingSource final : public ForwardingDraftSource {
 public:
  using ForwardingDraftSource::ForwardingDraftSource;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    ForwardingDraftSource::propose(ctx, requests, out);
    drafts.push_back(out.tokens);
  }
  std::vector<std::vector<int32_t>> drafts;
};

// GLM-4.5 (GQA) and GLM-5 (MLA with the DSA indexer: the layer's attached rows carry its index
// keys, and the 40-token prompts are past index_topk 6).
class MtpPrefixCache : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpPrefixCache, ReusesTheLayersRowsAndDraftsAsWithoutIt) {
  const auto dir = test::mtp_fixture_dir(GetParam());
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  auto target = load_model(dir, Device::cpu(), DType::f32);
  std::vector<int32_t> shared;
  for (int i = 0; i < 40; ++i) shared.push_back(3 + (i * 7) % 50);
  std::vector<std::vector<int32_t>> prompts(6, shared);
  prompts[0].push_back(9);
  prompts[2].resize(37);
  prompts[3][32] = 300;  // the token after the layer's second page (row 31's next token)
  prompts[4][0] = 200;   // another first token: published under it
  prompts[4].push_back(9);
  prompts[5][0] = 200;
  GenerateOptions o;
  o.max_tokens = 12;
  o.eos_token_ids = {};

  struct Run {
    std::vector<RequestOutput> out;
    std::vector<std::vector<std::vector<int32_t>>> drafts;  // per request
  };
  auto run = [&](bool cache) {
    Run r;
    MtpSource mtp(MtpLayer::load(target->config(), Device::cpu(), DType::f32), *target, 1024);
    RecordingSource source(mtp);
    SpecConfig cfg;
    cfg.gamma = 3;
    cfg.page_size = 8;
    cfg.prefix_cache = cache;
    SpeculativeEngine engine(*target, ctx, &source, cfg, 1024);
    EXPECT_EQ(engine.prefix_cache_active(), cache);
    for (const auto& p : prompts) {  // one after another: each sees the pages of the ones before
      source.drafts.clear();
      engine.add(RequestInput{p, o, nullptr, {}});
      while (engine.has_work()) engine.step();
      for (auto& [id, res] : engine.take_finished()) r.out.push_back(std::move(res));
      r.drafts.push_back(source.drafts);
    }
    EXPECT_EQ(engine.kv().used_pages(), 0);
    return r;
  };
  const Run on = run(true), off = run(false);
  ASSERT_EQ(on.out.size(), prompts.size());
  ASSERT_EQ(off.out.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(on.out[i].result.tokens, generate(*target, ctx, prompts[i], o).tokens) << i;
    EXPECT_EQ(on.out[i].result.tokens, off.out[i].result.tokens) << i;
    EXPECT_EQ(on.drafts[i], off.drafts[i]) << i;
    EXPECT_GT(on.out[i].spec.drafted, 0) << i;
    EXPECT_EQ(off.out[i].spec.prefix_reused, 0) << i;
  }
  // Target pages of 8, layer pages of 16: whole pages of both.
  EXPECT_EQ(on.out[0].spec.prefix_reused, 0);
  EXPECT_EQ(on.out[1].spec.prefix_reused, 32);  // 39 tokens before the last: 2 layer pages
  EXPECT_EQ(on.out[2].spec.prefix_reused, 32);  // 36 before the last: 4 target pages
  EXPECT_EQ(on.out[3].spec.prefix_reused, 16);  // the layer's second page needs token 32
  EXPECT_EQ(on.out[4].spec.prefix_reused, 0);   // the target's pages differ from token 0
  EXPECT_EQ(on.out[5].spec.prefix_reused, 32);  // the layer's pages published under token 200
}

INSTANTIATE_TEST_SUITE_P(Families, MtpPrefixCache, ::testing::Values("glm4_moe", "glm_moe_dsa"));

}  // namespace
}  // namespace dspark
