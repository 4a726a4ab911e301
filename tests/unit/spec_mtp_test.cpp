// The MTP draft source (spec/mtp_source.h, model/mtp.h) on the CPU (f32): the layer's logits and
// the source's drafts against the PyTorch reference of tools/mtp/make_mtp_fixtures.py, commits
// after verification against a source fed the same text at once (rollback of the chained rows),
// refusals, and greedy / coupled-sampling losslessness, with a bigram fixture whose drafts are
// accepted by construction.
#include <gtest/gtest.h>

#include <unistd.h>
#include <string>
#include <vector>

#include "common/mtp_checks.h"
#include "common/test_util.h"
#include "dspark/core/error.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/mtp.h"
#include "dspark/ops/softmax.h"
#include "dspark/spec/mtp_source.h"
#include "dspark/spec/source_factory.h"

namespace dspark {
namespace {

using test::kCpu;

std::unique_ptr<MtpSource> make_source(const Model& target) {
  return std::make_unique<MtpSource>(MtpLayer::load(target.config(), kCpu, DType::f32), target,
                                     4096);
}

std::vector<float> softmax_host(const float* logits, int64_t n) {
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  std::vector<float> p(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[static_cast<size_t>(i)] = std::exp(logits[i] - mx);
  for (float& v : p) v = static_cast<float>(v / sum);
  return p;
}

class MtpFamily : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = test::mtp_fixture_dir(GetParam());
    if (!std::filesystem::exists(dir_ / "mtp_goldens.safetensors"))
      GTEST_SKIP() << "fixture " << dir_ << " missing";
  }
  std::filesystem::path dir_;
};

TEST_P(MtpFamily, LayerLogitsMatchReference) {
  Context ctx(kCpu);
  auto target = load_model(dir_, kCpu, DType::f32);
  auto layer = MtpLayer::load(target->config(), kCpu, DType::f32);
  const int64_t vocab = target->config().vocab_size, h = target->config().hidden_size;
  for (const test::MtpGolden& g : test::load_mtp_goldens(dir_)) {
    PagedKvCache tkv(target->kv_shape(16, 64), kCpu);
    const ForwardOutput to =
        test::mtp_target_forward(ctx, *target, tkv, tkv.create_sequence(), g.context);
    PagedKvCache kv(layer->kv_shape(16, 64), kCpu);
    const SeqId seq = kv.create_sequence();
    ForwardOutput out = test::mtp_context_rows(ctx, *layer, kv, seq, g, to.final_hidden);
    const auto k = static_cast<int>(g.drafts.size());
    for (int step = 0; step < k; ++step) {
      const std::vector<float> want(g.logits.begin() + step * vocab,
                                    g.logits.begin() + (step + 1) * vocab);
      EXPECT_LE(test::relative_rms_error(to_f32_vector(out.logits), want), 1e-4)
          << GetParam() << " context " << g.context.size() << " step " << step;
      if (step + 1 == k) break;
      // Chain: h' of the last row with the reference's draft, at the next position.
      const int64_t last = out.final_hidden.size(0) - 1;
      OwnedTensor hp = OwnedTensor::copy_of(out.final_hidden.rows(last, last + 1), kCpu);
      ForwardBatch b;
      b.tokens = {g.drafts[static_cast<size_t>(step)]};
      b.row_indptr = {0, 1};
      b.seqs = {seq};
      b.logit_indices = {0};
      out = layer->forward(ctx, kv, b, hp.view().reshape(Shape{1, h}));
    }
  }
}

TEST_P(MtpFamily, SourceDraftsMatchReference) {
  Context ctx(kCpu);
  auto target = load_model(dir_, kCpu, DType::f32);
  const int64_t vocab = target->config().vocab_size;
  for (const test::MtpGolden& g : test::load_mtp_goldens(dir_)) {
    PagedKvCache tkv(target->kv_shape(16, 64), kCpu);
    const ForwardOutput to =
        test::mtp_target_forward(ctx, *target, tkv, tkv.create_sequence(), g.context);
    const auto n = static_cast<int32_t>(g.context.size());
    // The prompt committed at once, and in two chunks (the first without a pending token).
    for (int32_t cut : {n, n / 2}) {
      auto src = make_source(*target);
      src->begin(ctx, 0, g.context);
      RowUpdate a;
      a.kept_tokens = std::span<const int32_t>(g.context).first(static_cast<size_t>(cut));
      a.pending = cut == n ? g.pending : -1;
      src->commit(ctx, std::span<const RowUpdate>(&a, 1), to.taps);
      if (cut < n) {
        RowUpdate b;
        b.kept_tokens = std::span<const int32_t>(g.context).subspan(static_cast<size_t>(cut));
        b.first_position = cut;
        b.tap_offset = cut;
        b.pending = g.pending;
        src->commit(ctx, std::span<const RowUpdate>(&b, 1), to.taps);
      }
      EXPECT_EQ(test::mtp_propose_greedy(ctx, *src, static_cast<int>(g.drafts.size())), g.drafts)
          << GetParam() << " context " << n << " cut " << cut;
      EXPECT_LE(test::relative_rms_error(test::mtp_first_draft_q(ctx, *src),
                                         softmax_host(g.logits.data(), vocab)),
                1e-4);
    }
  }
}

// After a verify (some drafts accepted, the rest rolled back) the source proposes what a source
// given the committed text at once proposes.
TEST_P(MtpFamily, CommitAfterVerifyMatchesFreshSource) {
  Context ctx(kCpu);
  auto target = load_model(dir_, kCpu, DType::f32);
  const test::MtpGolden g = test::load_mtp_goldens(dir_).back();
  PagedKvCache tkv(target->kv_shape(16, 64), kCpu);
  const SeqId seq = tkv.create_sequence();
  auto src = make_source(*target);
  src->begin(ctx, 0, g.context);
  {
    const ForwardOutput to = test::mtp_target_forward(ctx, *target, tkv, seq, g.context);
    RowUpdate u;
    u.kept_tokens = g.context;
    u.pending = g.pending;
    src->commit(ctx, std::span<const RowUpdate>(&u, 1), to.taps);
  }
  std::vector<int32_t> text = g.context;
  int32_t pending = g.pending;
  // Round 1 keeps one draft, round 2 none, round 3 two; the next pending token is arbitrary.
  const std::vector<std::pair<int, int32_t>> rounds = {{1, 5}, {0, 9}, {2, 11}};
  for (const auto& [accept, next] : rounds) {
    const std::vector<int32_t> drafts = test::mtp_propose_greedy(ctx, *src, 3);
    ASSERT_EQ(drafts.size(), 3u);
    std::vector<int32_t> verify = {pending};
    verify.insert(verify.end(), drafts.begin(), drafts.end());
    const int len = tkv.length(seq);
    const ForwardOutput vo = test::mtp_target_forward(ctx, *target, tkv, seq, verify);
    tkv.rollback_to(seq, len + 1 + accept);
    const std::vector<int32_t> kept(verify.begin(), verify.begin() + 1 + accept);
    RowUpdate u;
    u.kept_tokens = kept;
    u.first_position = len;
    u.pending = next;
    u.n_drafted = 3;
    u.n_accepted = accept;
    src->commit(ctx, std::span<const RowUpdate>(&u, 1), vo.taps);
    text.insert(text.end(), kept.begin(), kept.end());
    pending = next;

    PagedKvCache fkv(target->kv_shape(16, 64), kCpu);
    const ForwardOutput fo =
        test::mtp_target_forward(ctx, *target, fkv, fkv.create_sequence(), text);
    auto fresh = make_source(*target);
    fresh->begin(ctx, 0, text);
    RowUpdate f;
    f.kept_tokens = text;
    f.pending = pending;
    fresh->commit(ctx, std::span<const RowUpdate>(&f, 1), fo.taps);
    EXPECT_EQ(test::mtp_propose_greedy(ctx, *src, 3), test::mtp_propose_greedy(ctx, *fresh, 3))
        << GetParam() << " after accepting " << accept;
    EXPECT_LE(test::relative_rms_error(test::mtp_first_draft_q(ctx, *src),
                                       test::mtp_first_draft_q(ctx, *fresh)),
              1e-4);
  }
}

// Rounds without drafts defer the source's commits (mtp_source.h): a proposal after them equals
// that of a source that absorbed every commit at once, also when the row's stage overflows (a
// stage of 2 rows) and across a round with drafts.
TEST_P(MtpFamily, DeferredCommitsProposeAsEagerOnes) {
  Context ctx(kCpu);
  auto target = load_model(dir_, kCpu, DType::f32);
  const int32_t vocab = target->config().vocab_size;
  const test::MtpGolden g = test::load_mtp_goldens(dir_).back();
  PagedKvCache tkv(target->kv_shape(16, 64), kCpu);
  const SeqId seq = tkv.create_sequence();
  std::vector<std::unique_ptr<MtpSource>> srcs;
  for (int deferred : {0, MtpSource::kDeferredRows, 2})
    srcs.push_back(std::make_unique<MtpSource>(MtpLayer::load(target->config(), kCpu, DType::f32),
                                               *target, 4096, 16, deferred));
  EXPECT_FALSE(srcs[0]->defers_idle_commits());
  EXPECT_TRUE(srcs[1]->defers_idle_commits());
  auto commit_all = [&](const std::vector<int32_t>& kept, int first, int32_t next, int drafted,
                        const ForwardOutput& fo) {
    RowUpdate u;
    u.kept_tokens = kept;
    u.first_position = first;
    u.pending = next;
    u.n_drafted = drafted;
    for (auto& s : srcs) s->commit(ctx, std::span<const RowUpdate>(&u, 1), fo.taps);
  };
  for (auto& s : srcs) s->begin(ctx, 0, g.context);
  commit_all(g.context, 0, g.pending, 0,
             test::mtp_target_forward(ctx, *target, tkv, seq, g.context));
  int32_t pending = g.pending;
  // Rounds without drafts: the target keeps its pending token; the next one is arbitrary.
  auto idle_rounds = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const int len = tkv.length(seq);
      const ForwardOutput fo = test::mtp_target_forward(ctx, *target, tkv, seq, {pending});
      const int32_t next = (pending * 7 + 3) % vocab;
      commit_all({pending}, len, next, 0, fo);
      pending = next;
    }
  };
  auto expect_same_proposals = [&](const char* when) {
    const std::vector<int32_t> want = test::mtp_propose_greedy(ctx, *srcs[0], 3);
    const std::vector<float> q = test::mtp_first_draft_q(ctx, *srcs[0]);
    for (size_t i = 1; i < srcs.size(); ++i) {
      EXPECT_EQ(test::mtp_propose_greedy(ctx, *srcs[i], 3), want) << GetParam() << " " << when;
      EXPECT_LE(test::relative_rms_error(test::mtp_first_draft_q(ctx, *srcs[i]), q), 1e-5)
          << GetParam() << " " << when;
    }
    return want;
  };
  idle_rounds(5);
  const std::vector<int32_t> drafts = expect_same_proposals("after 5 rounds without drafts");
  EXPECT_GT(srcs[1]->stats().catch_up_ms, 0.0);
  // A round with 3 drafts, one accepted, then 3 rounds without drafts.
  std::vector<int32_t> verify = {pending};
  verify.insert(verify.end(), drafts.begin(), drafts.end());
  const int len = tkv.length(seq);
  const ForwardOutput vo = test::mtp_target_forward(ctx, *target, tkv, seq, verify);
  tkv.rollback_to(seq, len + 2);
  pending = (pending * 5 + 1) % vocab;
  commit_all({verify[0], verify[1]}, len, pending, 3, vo);
  idle_rounds(3);
  expect_same_proposals("after a drafting round and 3 without drafts");
}

TEST_P(MtpFamily, GreedyAndCoupledSpeculativeEqualPlain) {
  const test::MtpLosslessStats s = test::check_mtp_lossless(dir_, kCpu);
  EXPECT_GT(s.drafted, 0);
}

TEST_P(MtpFamily, BigramFixtureAcceptsTheDrafts) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("dspark_mtp_bigram_" + GetParam() + "_" + std::to_string(::getpid()));
  test::write_bigram_mtp_fixture(GetParam(), out);
  const test::MtpLosslessStats s = test::check_mtp_lossless(out, kCpu);
  std::filesystem::remove_all(out);
  EXPECT_GT(s.drafted, 100);
  EXPECT_GT(s.acceptance(), 0.95);
}

INSTANTIATE_TEST_SUITE_P(Families, MtpFamily,
                         ::testing::Values("deepseek_v3", "glm4_moe", "glm_moe_dsa"));

std::string error_of(const DraftOptions& o, Model& target) {
  try {
    create_draft_source(o, target);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MtpSourceFactory, SelectsMtpAndRefusesTargetsWithoutIt) {
  const std::filesystem::path models = test::data_dir() / "models";
  if (!std::filesystem::exists(test::mtp_fixture_dir("glm4_moe") / "config.json"))
    GTEST_SKIP() << "MTP fixture missing";
  DraftOptions o;
  o.draft = "mtp";
  auto glm = load_model(test::mtp_fixture_dir("glm4_moe"), kCpu, DType::f32);
  const CreatedSource created = create_draft_source(o, *glm);
  ASSERT_NE(created.source, nullptr);
  EXPECT_EQ(created.kind, "mtp");
  EXPECT_EQ(created.source->name(), "mtp");
  EXPECT_GT(created.default_gamma, 0);

  auto llama = load_model(models / "llama3", kCpu, DType::f32);
  EXPECT_NE(error_of(o, *llama).find("no next-token prediction (MTP) layer"), std::string::npos)
      << error_of(o, *llama);
  // The config declares a layer that the checkpoint (saved by transformers) does not hold.
  auto deepseek = load_model(models / "deepseek_v3", kCpu, DType::f32);
  EXPECT_NE(error_of(o, *deepseek).find("eh_proj.weight"), std::string::npos)
      << error_of(o, *deepseek);
  // A GGUF target without next-token layers (the GGUF MTP layer: spec_mtp_gguf_test.cpp).
  auto gguf = load_model(test::data_dir() / "gguf" / "tiny_llama.gguf", kCpu, DType::f32);
  EXPECT_NE(error_of(o, *gguf).find("its GGUF file has no nextn_predict_layers"), std::string::npos)
      << error_of(o, *gguf);
  o.draft_vocab = "vocab.txt";
  EXPECT_NE(error_of(o, *glm).find("--draft-vocab"), std::string::npos);
}

}  // namespace
}  // namespace dspark
