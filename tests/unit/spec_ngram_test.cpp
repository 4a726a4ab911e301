#include <gtest/gtest.h>

#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

TEST(NgramLookup, ProposesContinuationOfMostRecentLongestMatch) {
  NgramConfig cfg{1, 3};
  // ... 5 6 7 8 ... 5 6 7 9 ... 6 7 | pending = 7: suffix [6 7] (n=2; [x 6 7] n=3 has no earlier
  // match) most recently continued by 9.
  std::vector<int32_t> h = {1, 5, 6, 7, 8, 2, 5, 6, 7, 9, 3, 6, 7};
  EXPECT_EQ(NgramSource::lookup(h, 3, cfg), (std::vector<int32_t>{9, 3, 6}));
  EXPECT_EQ(NgramSource::lookup(h, 1, cfg), (std::vector<int32_t>{9}));
  EXPECT_TRUE(NgramSource::lookup(h, 0, cfg).empty());
  // No earlier occurrence of the last token: nothing.
  std::vector<int32_t> none = {1, 2, 3, 4};
  EXPECT_TRUE(NgramSource::lookup(none, 4, cfg).empty());
  // The continuation is cut at the end of the history.
  std::vector<int32_t> tail = {4, 4};
  EXPECT_EQ(NgramSource::lookup(tail, 5, cfg), (std::vector<int32_t>{4}));
  // ngram_min = 2 ignores single-token matches.
  EXPECT_TRUE(NgramSource::lookup(std::vector<int32_t>{3, 1, 2, 3}, 2, NgramConfig{2, 3}).empty());
}

TEST(NgramSource, TracksHistoryThroughCommits) {
  Context ctx(Device::cpu());
  NgramSource src(NgramConfig{1, 2});
  const std::vector<int32_t> prompt = {1, 2, 3, 1, 2};
  src.begin(ctx, 0, prompt);
  RowUpdate u;
  u.row = 0;
  u.kept_tokens = prompt;
  u.first_position = 0;
  u.pending = 3;  // history 1 2 3 1 2 3
  src.commit(ctx, std::span<const RowUpdate>(&u, 1), {});
  Proposal out;
  ProposeRequest req{0, 4, {}, 0};
  src.propose(ctx, std::span<const ProposeRequest>(&req, 1), out);
  // suffix [2 3] matched at positions 1..2 -> continues 1 2 3 (cut at history end).
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{1, 2, 3}));
  // Verify accepted 1 draft (token 1) then target emitted 9.
  const std::vector<int32_t> kept = {3, 1};
  RowUpdate v;
  v.row = 0;
  v.kept_tokens = kept;
  v.first_position = 5;
  v.pending = 9;
  src.commit(ctx, std::span<const RowUpdate>(&v, 1), {});
  out.clear();
  src.propose(ctx, std::span<const ProposeRequest>(&req, 1), out);
  EXPECT_TRUE(out.tokens.empty());  // 9 never occurred before
}

}  // namespace
}  // namespace dspark
