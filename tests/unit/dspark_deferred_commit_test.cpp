// The DSpark drafter's deferred context commits (spec/dspark/dspark_source.h) on the CPU: rows
// that draft nothing in a round are staged and projected when they draft again. Through the
// engine, with schedules that switch each row's drafting on and off, every round's drafts, the
// drafter's block hidden states and its logits are bitwise those of a drafter that projects every
// commit at once, for a roomy stage and for stages so small that they are compacted, projected
// whole, or cannot hold one round's rows; greedy output stays the plain greedy output
// (unit/dspark_drafter_testing.h, check_deferred_commits).
#include <gtest/gtest.h>

#include "unit/dspark_drafter_testing.h"

namespace dspark {
namespace {

TEST(DSparkDeferredCommit, DraftsEqualEagerCommitsBitForBit) {
  test::check_deferred_commits(Device::cpu(),
                               std::filesystem::temp_directory_path() / "dspark_deferred_commit",
                               /*bitwise=*/true);
}

}  // namespace
}  // namespace dspark
