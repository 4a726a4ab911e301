// Draft vocabularies (DSparkSourceOptions::draft_vocab, --draft-vocab FILE) on the CPU: the file
// format, greedy losslessness with every draft inside the list, and what the cut computes: the
// base logits are the full LM head's columns of the list, the corrected logits of the first draft
// (whose Markov input is the anchor in both runs) are the full run's columns too, and every draft
// is the list's id of the best column.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>

#include "dspark/spec/dspark/draft_vocab.h"
#include "dspark/spec/dspark/drafter_weights.h"
#include "dspark/spec/source_factory.h"
#include "unit/dspark_drafter_testing.h"
#include "unit/quantized_drafter_testing.h"

namespace dspark {
namespace {

std::filesystem::path write_file(const std::string& name, const std::string& text) {
  const auto path = test::per_test_temp_dir("draft_vocab", name);
  std::ofstream(path) << text;
  return path;
}

TEST(DraftVocab, ReadsJsonListsSortedAndUnique) {
  EXPECT_EQ(read_draft_vocab(write_file("a.json", "[5, 3, 5, 9, 0]")),
            (std::vector<int32_t>{0, 3, 5, 9}));
  EXPECT_EQ(read_draft_vocab(write_file("b.json", R"({"token_ids": [2, 1], "source": "x"})")),
            (std::vector<int32_t>{1, 2}));
  for (const char* bad : {"[]", "[-1]", "[1.5]", R"({"ids": [1]})", R"("abc")", "[1, \"2\"]"})
    EXPECT_THROW(read_draft_vocab(write_file("bad.json", bad)), Error) << bad;
  EXPECT_NO_THROW(check_draft_vocab(std::vector<int32_t>{0, 4, 9}, 10));
  EXPECT_NO_THROW(check_draft_vocab(std::vector<int32_t>{}, 10));
  EXPECT_THROW(check_draft_vocab(std::vector<int32_t>{0, 10}, 10), Error);
  EXPECT_THROW(check_draft_vocab(std::vector<int32_t>{4, 2}, 10), Error);
  EXPECT_THROW(check_draft_vocab(std::vector<int32_t>{4, 4}, 10), Error);
}

// Forwards to a DSpark source; checks every draft against the list and keeps a copy of the
// source's record after each proposal.
class Recorder final : public ForwardingDraftSource {
 public:
  Recorder(DSparkSource& source, std::set<int32_t> allowed)
      : ForwardingDraftSource(source), source_(source), allowed_(std::move(allowed)) {}
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    source_.propose(ctx, requests, out);
    for (int32_t t : out.tokens) {
      if (!allowed_.empty()) {
        EXPECT_TRUE(allowed_.contains(t)) << "draft " << t;
      }
    }
    drafted += static_cast<int64_t>(out.tokens.size());
    records.push_back(source_.record());
  }

  std::vector<DSparkRecord> records;
  int64_t drafted = 0;

 private:
  DSparkSource& source_;
  std::set<int32_t> allowed_;
};

struct SpecRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<DSparkRecord> records;
  int64_t drafted = 0;
};

SpecRun run_spec(Model& target, Context& ctx, const std::filesystem::path& dir,
                 const std::vector<std::vector<int32_t>>& prompts, std::vector<int32_t> vocab) {
  DSparkSourceOptions opt;
  opt.block_size = 6;
  opt.record = true;
  opt.draft_vocab = vocab;
  auto source = load_dspark_source(dir, target, opt, false);
  Recorder rec(*source, std::set<int32_t>(vocab.begin(), vocab.end()));
  GenerateOptions o;
  o.max_tokens = 20;
  o.eos_token_ids = {};
  std::vector<RequestInput> reqs;
  for (const auto& p : prompts) reqs.push_back(RequestInput{p, o, nullptr, {}});
  SpecConfig cfg;
  cfg.gamma = 6;
  const auto out = generate_speculative(target, ctx, &rec, std::move(reqs), cfg);
  SpecRun r;
  for (const auto& o_i : out) r.tokens.push_back(o_i.result.tokens);
  r.records = std::move(rec.records);
  r.drafted = rec.drafted;
  return r;
}

// The qwen3 fixture target, loaded once per test. expect_cut_matches_full: greedy speculative
// decoding with the drafter at `dir`, over the whole vocabulary and over a list of every other id
// plus the ids the plain outputs use (so that drafts can be accepted): both emit the plain tokens,
// and the cut's logits are the full run's columns (above).
class DraftVocabCut : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto target_dir = test::data_dir() / "models" / "qwen3";
    if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no qwen3";
    target_ = load_model(target_dir, Device::cpu(), DType::f32);
  }
  void expect_cut_matches_full(const std::filesystem::path& dir, const std::string& what);
  // A tiny drafter of block 6 (Markov rank `rank`) for the target, written into a scratch dir.
  std::filesystem::path write_drafter(const std::string& name, int rank) {
    const auto dir = test::per_test_temp_dir("draft_vocab", name);
    test::TinyDrafterSpec spec;
    spec.block_size = 6;
    spec.rank = rank;
    test::write_tiny_drafter(dir, spec, target_->config());
    return dir;
  }
  std::unique_ptr<Model> target_;
};

void DraftVocabCut::expect_cut_matches_full(const std::filesystem::path& dir,
                                            const std::string& what) {
  Model& target = *target_;
  Context ctx(Device::cpu());
  const int vocab_size = static_cast<int>(target.config().vocab_size);
  const auto prompts = test::lossless_prompts(vocab_size);
  GenerateOptions o;
  o.max_tokens = 20;
  o.eos_token_ids = {};
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(generate(target, ctx, p, o).tokens);

  std::set<int32_t> ids;
  for (int32_t i = 0; i < vocab_size; i += 2) ids.insert(i);
  for (const auto& p : plain) ids.insert(p.begin(), p.end());
  const std::vector<int32_t> vocab(ids.begin(), ids.end());
  ASSERT_LT(vocab.size(), static_cast<size_t>(vocab_size));

  const SpecRun full = run_spec(target, ctx, dir, prompts, {});
  const SpecRun cut = run_spec(target, ctx, dir, prompts, vocab);
  EXPECT_EQ(full.tokens, plain) << what;
  EXPECT_EQ(cut.tokens, plain) << what;
  EXPECT_GT(cut.drafted, 0) << what;

  // The first rounds of both runs draft from the same context (the prompts' first tokens).
  ASSERT_FALSE(full.records.empty());
  ASSERT_FALSE(cut.records.empty());
  const DSparkRecord& f = full.records.front();
  const DSparkRecord& c = cut.records.front();
  ASSERT_EQ(f.rows, c.rows);
  ASSERT_EQ(f.steps, c.steps);
  const auto v = static_cast<int64_t>(vocab.size());
  ASSERT_EQ(c.base_logits.size(), static_cast<size_t>(c.rows * c.steps) * vocab.size());
  for (int64_t row = 0; row < int64_t{c.rows} * c.steps; ++row) {
    const bool first_draft = row % c.steps == 0;
    for (int64_t j = 0; j < v; ++j) {
      const size_t at_full = static_cast<size_t>(row * vocab_size + vocab[static_cast<size_t>(j)]);
      const size_t at_cut = static_cast<size_t>(row * v + j);
      ASSERT_NEAR(c.base_logits[at_cut], f.base_logits[at_full], 1e-4) << what << row << " " << j;
      if (first_draft) {
        ASSERT_NEAR(c.logits[at_cut], f.logits[at_full], 1e-4) << what << row << " " << j;
      }
    }
    // The draft is the list's id of the best corrected column (ties: the first).
    const auto begin = c.logits.begin() + row * v;
    const auto best = std::max_element(begin, begin + v) - begin;
    EXPECT_EQ(c.tokens[static_cast<size_t>(row)], vocab[static_cast<size_t>(best)]) << what << row;
  }
}

TEST_F(DraftVocabCut, GreedyLosslessWithDraftsFromTheList) {
  expect_cut_matches_full(write_drafter("drafter", test::TinyDrafterSpec{}.rank), "float drafter ");
}

// A 4-bit drafter whose Markov tables qualify (rank 32): on the CPU they stay blocks, and the
// cut's w2 rows are the same blocks (gather_block_rows), so the cut still computes the full
// run's columns.
TEST_F(DraftVocabCut, GreedyLosslessWithAQuantizedMarkovHead) {
  const auto dir = test::quantized_copy(write_drafter("rank32", 32), "draft_vocab_rank32", {4, 32});
  const DrafterCheckpoint ckpt = DrafterCheckpoint::open(dir);
  const DrafterWeights w =
      load_drafter_weights(ckpt.weights(), load_drafter_config(dir), target_->config().hidden_size,
                           Device::cpu(), DType::f32);
  EXPECT_TRUE(w.markov_w1.quantized.defined());
  EXPECT_TRUE(w.markov_w2.quantized.defined());
  expect_cut_matches_full(dir, "4-bit drafter ");
  std::filesystem::remove_all(dir);
}

TEST(DraftVocab, RefusedForOtherSources) {
  const auto target_dir = test::data_dir() / "models" / "qwen3";
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no qwen3";
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  DraftOptions o;
  o.draft = "ngram";
  o.draft_vocab = write_file("v.json", "[1, 2]").string();
  EXPECT_THROW(create_draft_source(o, *target), Error);
  // A list outside the vocabulary is refused when the drafter is created.
  const auto dir = test::per_test_temp_dir("draft_vocab", "drafter");
  test::write_tiny_drafter(dir, test::TinyDrafterSpec{}, target->config());
  o.draft = dir.string();
  o.draft_vocab =
      write_file("big.json", fmt::format("[1, {}]", target->config().vocab_size)).string();
  EXPECT_THROW(create_draft_source(o, *target), Error);
  o.draft_vocab = write_file("ok.json", "[1, 2, 3]").string();
  EXPECT_NO_THROW(create_draft_source(o, *target));
}

}  // namespace
}  // namespace dspark
