// Prefix reuse with a DSpark drafter (SpecConfig::prefix_cache, DraftSource::reuses_prefixes): a
// request whose prompt starts like an earlier one attaches the target's KV pages and the drafter's
// context K/V of that prefix, so neither is computed again; its output equals plain greedy
// decoding, and its rounds draft and accept exactly as they do with the cache off (the drafter's
// context is the same). The reused length is whole pages of both caches (target pages of 8,
// drafter pages of 16 here).
#include <gtest/gtest.h>

#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

TEST(DSparkPrefixCache, ReusesTheDraftersContextAndStaysLossless) {
  const auto dir = test::drafter_fixture_dir("qwen3_deepspec");
  const auto target_dir = test::data_dir() / "models" / "qwen3";
  if (!std::filesystem::exists(dir / "config.json") ||
      !std::filesystem::exists(target_dir / "config.json"))
    GTEST_SKIP() << "fixtures missing";
  Context ctx(Device::cpu());
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  std::vector<int32_t> shared;
  for (int i = 0; i < 40; ++i) shared.push_back(3 + (i * 7) % 50);
  std::vector<std::vector<int32_t>> prompts = {shared, shared, shared};
  prompts[0].push_back(9);
  prompts[2].resize(37);
  GenerateOptions o;
  o.max_tokens = 20;
  o.eos_token_ids = {};

  auto run = [&](bool cache, std::vector<RequestOutput>& out) {
    auto source = load_dspark_source(dir, *target, DSparkSourceOptions{}, false);
    SpecConfig cfg;
    cfg.gamma = 7;
    cfg.page_size = 8;
    cfg.prefix_cache = cache;
    SpeculativeEngine engine(*target, ctx, source.get(), cfg, 1024);
    EXPECT_EQ(engine.prefix_cache_active(), cache);
    for (const auto& p : prompts) {  // one after another: each sees the pages of the ones before
      engine.add(RequestInput{p, o, nullptr, {}});
      while (engine.has_work()) engine.step();
      for (auto& [id, r] : engine.take_finished()) out.push_back(std::move(r));
    }
    EXPECT_EQ(engine.kv().used_pages(), 0);
  };
  std::vector<RequestOutput> on, off;
  run(true, on);
  run(false, off);
  ASSERT_EQ(on.size(), 3u);
  ASSERT_EQ(off.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(on[i].result.tokens, generate(*target, ctx, prompts[i], o).tokens) << i;
    EXPECT_EQ(on[i].result.tokens, off[i].result.tokens) << i;
    EXPECT_EQ(on[i].spec.drafted, off[i].spec.drafted) << i;
    EXPECT_EQ(on[i].spec.accepted, off[i].spec.accepted) << i;
    EXPECT_EQ(off[i].spec.prefix_reused, 0) << i;
  }
  EXPECT_EQ(on[0].spec.prefix_reused, 0);
  EXPECT_EQ(on[1].spec.prefix_reused, 32);  // 40 prompt tokens before the last: 2 drafter pages
  EXPECT_EQ(on[2].spec.prefix_reused, 32);  // 36 before the last: 4 target pages, 2 drafter ones
  EXPECT_GT(on[1].spec.accepted, 0);
}

}  // namespace
}  // namespace dspark
