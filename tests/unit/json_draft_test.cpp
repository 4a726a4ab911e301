// Draft sources propose under a request's grammar (ProposeRequest::grammar, structured output):
// every raw draft (before the engine's cut) continues the document, a sampled draft's q is the
// masked, renormalised distribution, greedy output equals plain constrained decoding, and more
// drafts are accepted than when the same source drafts blind and has its drafts cut.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "common/joint3.h"
#include "common/lossless.h"
#include "common/micro_model.h"
#include "common/stat_test.h"
#include "common/test_util.h"
#include "dspark/engine/json_mask.h"
#include "dspark/engine/json_matcher.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/tokenizer.h"
#include "dspark/model/model.h"
#include "dspark/model/mtp.h"
#include "dspark/spec/draft_model_source.h"
#include "dspark/spec/mtp_source.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

using json = nlohmann::json;

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "ok": {"type": ["boolean", "null"]}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})");

std::filesystem::path qwen3() {
  return test::data_dir() / "models" / "qwen3";
}

std::filesystem::path deepseek_mtp() {
  return test::data_dir() / "models" / "deepseek_v3_mtp";
}

// Passes every call on and checks the inner source's raw proposals against the grammar at each
// row's emitted document (followed from begin / commit, as a source sees it), and their q rows
// (f32 [., vocab]) against its masks. strip: the inner source gets no grammar (it drafts blind and
// the engine cuts its drafts).
class GrammarWatch final : public ForwardingDraftSource {
 public:
  GrammarWatch(DraftSource& inner, const JsonConstraint& c, int64_t vocab, bool strip)
      : ForwardingDraftSource(inner), c_(c), vocab_(vocab), strip_(strip) {}

  void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) override {
    history_[row].assign(prompt.begin(), prompt.end());
    prompt_len_[row] = prompt.size();
    inner().begin(ctx, row, prompt);
  }
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override {
    for (const RowUpdate& u : updates) {
      std::vector<int32_t>& h = history_[u.row];
      h.resize(static_cast<size_t>(u.first_position));
      h.insert(h.end(), u.kept_tokens.begin(), u.kept_tokens.end());
      if (u.pending >= 0) h.push_back(u.pending);
    }
    inner().commit(ctx, updates, taps);
  }
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    std::vector<ProposeRequest> reqs(requests.begin(), requests.end());
    for (ProposeRequest& q : reqs) {
      EXPECT_NE(q.grammar, nullptr);  // every request of these tests is constrained
      if (strip_) q.grammar = nullptr;
    }
    inner().propose(ctx, reqs, out);
    const std::vector<float> q = out.q.defined() ? to_f32_vector(out.q) : std::vector<float>{};
    for (size_t i = 0; i < reqs.size(); ++i) {
      const std::vector<int32_t>& h = history_[reqs[i].row];
      JsonMatcher m(&c_.schema);
      for (size_t t = prompt_len_[reqs[i].row]; t < h.size(); ++t)
        ASSERT_TRUE(c_.vocab->advance(m, h[t])) << "emitted token " << h[t];
      bool ended = false, allowed = true;
      for (int j = out.indptr[i]; j < out.indptr[i + 1]; ++j) {
        const int32_t t = out.tokens[static_cast<size_t>(j)];
        ++drafted;
        if (allowed && !ended && !q.empty()) check_q(q, j, m);
        if (allowed) {
          if (ended) {
            allowed = false;  // nothing is accepted after an EOS
          } else if (c_.is_eos(t)) {
            allowed = ended = m.complete();
          } else {
            allowed = c_.vocab->advance(m, t);
          }
        }
        forbidden += !allowed;
      }
    }
  }

  int64_t drafted = 0, forbidden = 0, q_rows = 0;
  double max_forbidden_mass = 0, max_sum_error = 0;

 private:
  // q row j (drafted at state m) holds nothing outside the grammar's mask and sums to 1.
  void check_q(const std::vector<float>& q, int j, const JsonMatcher& m) {
    const std::span<const uint32_t> mask = masks_.mask(c_, vocab_, m);
    double out_mass = 0, sum = 0;
    for (int64_t t = 0; t < vocab_; ++t) {
      const double p = q[static_cast<size_t>(j * vocab_ + t)];
      sum += p;
      if (!((mask[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u)) out_mass += p;
    }
    ++q_rows;
    max_forbidden_mass = std::max(max_forbidden_mass, out_mass);
    max_sum_error = std::max(max_sum_error, std::abs(sum - 1.0));
  }

  const JsonConstraint& c_;
  int64_t vocab_;
  bool strip_;
  std::map<RowId, std::vector<int32_t>> history_;
  std::map<RowId, size_t> prompt_len_;
  JsonMaskCache masks_;
};

struct Fixture {
  std::unique_ptr<Model> target;
  std::shared_ptr<const JsonConstraint> person;
  int32_t eos = 0;
};

Fixture fixture(const std::filesystem::path& dir = qwen3()) {
  Fixture f;
  f.target = load_model(dir, Device::cpu(), DType::f32);
  const Tokenizer tok = Tokenizer::from_file(dir);
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    bytes[static_cast<size_t>(id)] = tok.token_bytes(id);
  auto vocab = std::make_shared<TokenVocab>(bytes);
  f.eos = tok.eos_id() >= 0 ? tok.eos_id() : 0;
  f.person = std::make_shared<JsonConstraint>(
      JsonConstraint{JsonSchema::compile(kPerson), vocab, {f.eos}});
  return f;
}

// Requests whose prompts are random tokens: an unconstrained drafter rarely proposes JSON there.
std::vector<RequestInput> requests(const Fixture& f, const SamplingParams& sp, int n) {
  std::vector<RequestInput> reqs;
  std::mt19937 gen(11);
  std::uniform_int_distribution<int32_t> pick(3, 300);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(6 + 3 * i));
    for (auto& t : prompt) t = pick(gen);
    GenerateOptions o;
    o.max_tokens = 32;
    o.eos_token_ids = {f.eos};
    o.json = f.person;
    o.sampling = sp;
    o.seed = 100 + static_cast<uint64_t>(i);
    reqs.push_back(RequestInput{prompt, o, nullptr, {}});
  }
  return reqs;
}

struct WatchedRun {
  std::vector<RequestOutput> out;
  SpecTelemetry total;
  int64_t drafted = 0, forbidden = 0, q_rows = 0;
  double max_forbidden_mass = 0, max_sum_error = 0;
};

WatchedRun run_watched(const Fixture& f, Context& ctx, DraftSource& source,
                       const std::vector<RequestInput>& reqs, bool strip) {
  GrammarWatch watch(source, *reqs[0].options.json, f.target->config().vocab_size, strip);
  SpecConfig cfg;
  cfg.gamma = 4;
  WatchedRun r;
  r.out = generate_speculative(*f.target, ctx, &watch, reqs, cfg);
  for (const RequestOutput& o : r.out) r.total.merge(o.spec);
  r.drafted = watch.drafted;
  r.forbidden = watch.forbidden;
  r.q_rows = watch.q_rows;
  r.max_forbidden_mass = watch.max_forbidden_mass;
  r.max_sum_error = watch.max_sum_error;
  return r;
}

// (a) every raw draft continues the document, (b) greedy output equals plain constrained
// decoding, (c) no fewer accepted drafts than the same source drafting blind; and drafting blind
// does propose forbidden tokens on this fixture (else (a) would prove nothing).
// (a) every raw draft continues the document, (b) greedy output equals plain constrained
// decoding, (c) no fewer accepted drafts than the same source drafting blind; and drafting blind
// does propose forbidden tokens on these fixtures (else (a) would prove nothing).
void check_greedy_drafts(const Fixture& f, const std::vector<test::NamedSource>& sources) {
  Context ctx(Device::cpu());
  const std::vector<RequestInput> reqs = requests(f, SamplingParams{}, 4);
  SpecConfig cfg;
  cfg.gamma = 4;
  const auto plain = generate_speculative(*f.target, ctx, nullptr, reqs, cfg);
  for (const auto& sc : sources) {
    auto masked_source = sc.make(*f.target);
    auto blind_source = sc.make(*f.target);
    const WatchedRun masked = run_watched(f, ctx, *masked_source, reqs, false);
    const WatchedRun blind = run_watched(f, ctx, *blind_source, reqs, true);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(masked.out[i].result.tokens, plain[i].result.tokens) << sc.name << " " << i;
      EXPECT_EQ(blind.out[i].result.tokens, plain[i].result.tokens) << sc.name << " " << i;
    }
    std::printf(
        "[ grammar  ] %s: masked drafted %lld accepted %lld tau %.2f | blind drafted %lld "
        "forbidden %lld accepted %lld tau %.2f\n",
        sc.name.c_str(), static_cast<long long>(masked.drafted),
        static_cast<long long>(masked.total.accepted), masked.total.tau(),
        static_cast<long long>(blind.drafted), static_cast<long long>(blind.forbidden),
        static_cast<long long>(blind.total.accepted), blind.total.tau());
    EXPECT_GT(masked.drafted, 0) << sc.name;
    EXPECT_EQ(masked.forbidden, 0) << sc.name;
    EXPECT_GT(blind.forbidden, 0) << sc.name;
    EXPECT_GE(masked.total.accepted, blind.total.accepted) << sc.name;
    EXPECT_GE(masked.total.tau(), blind.total.tau()) << sc.name;
  }
}

TEST(JsonDraft, GreedyDraftsFollowTheGrammar) {
  if (!std::filesystem::exists(qwen3() / "config.json")) GTEST_SKIP() << "fixture missing";
  check_greedy_drafts(fixture(), test::self_ngram_fixture_sources("qwen3", "qwen3_dflash"));
}

// The MTP layer chooses its drafts through the same steps as a draft model.
TEST(JsonDraft, MtpDraftsFollowTheGrammar) {
  if (!std::filesystem::exists(deepseek_mtp() / "config.json")) GTEST_SKIP() << "fixture missing";
  check_greedy_drafts(fixture(deepseek_mtp()),
                      {{"mtp", [](Model& target) -> std::unique_ptr<DraftSource> {
                          return std::make_unique<MtpSource>(
                              MtpLayer::load(target.config(), Device::cpu(), DType::f32), target,
                              4096);
                        }}});
}

// Sampled drafts are drawn from q masked by the grammar and renormalised, and that is the q the
// verifier gets; coupled sampling still emits exactly plain sampling's tokens.
TEST(JsonDraft, SampledDraftsDrawFromTheMaskedDistribution) {
  if (!std::filesystem::exists(qwen3() / "config.json")) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  const Fixture f = fixture();
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_p = 0.95f;
  for (const SpecSampling mode : {SpecSampling::coupled, SpecSampling::rejection}) {
    sp.spec = mode;
    const std::vector<RequestInput> reqs = requests(f, sp, 3);
    SpecConfig cfg;
    cfg.gamma = 4;
    const auto plain = generate_speculative(*f.target, ctx, nullptr, reqs, cfg);
    const std::vector<test::NamedSource> sources =
        test::self_ngram_fixture_sources("qwen3", "qwen3_dflash");
    for (const auto& sc : sources) {
      if (sc.name == "ngram") continue;  // deterministic drafts: no q
      auto source = sc.make(*f.target);
      const WatchedRun r = run_watched(f, ctx, *source, reqs, false);
      const std::string what =
          sc.name + (mode == SpecSampling::coupled ? " coupled" : " rejection");
      EXPECT_GT(r.q_rows, 0) << what;
      EXPECT_EQ(r.forbidden, 0) << what;
      EXPECT_LE(r.max_forbidden_mass, 1e-6) << what;
      EXPECT_LE(r.max_sum_error, 1e-4) << what;
      if (mode == SpecSampling::coupled) {
        for (size_t i = 0; i < reqs.size(); ++i)
          EXPECT_EQ(r.out[i].result.tokens, plain[i].result.tokens) << what << " " << i;
      }
      // The target drafting for itself under the same mask: q equals the target's p, so every
      // draft that continues the document is accepted.
      if (sc.name == "draft-model:self") {
        EXPECT_GT(r.total.acceptance(), 0.9) << what;
      }
    }
  }
}

// A grammar that forbids one token.
class Forbid final : public DraftGrammar {
 public:
  explicit Forbid(int32_t token) : token_(token) {}
  std::span<const uint32_t> mask(int64_t) override { return {}; }
  bool advance(int32_t t) override { return t != token_; }
  bool ended() const override { return false; }
  int allowed_prefix(std::span<const int32_t> tokens) const override {
    return static_cast<int>(std::find(tokens.begin(), tokens.end(), token_) - tokens.begin());
  }

 private:
  int32_t token_;
};

// The most recent occurrence of the suffix continues with a forbidden token: the lookup takes an
// older occurrence whose continuation is allowed, else the longest allowed start.
TEST(JsonDraft, NgramLookupSkipsForbiddenContinuations) {
  const NgramConfig cfg{1, 2};
  const std::vector<int32_t> h = {7, 8, 1, 2, 3, 9, 8, 1, 5, 6, 9, 8, 1};
  EXPECT_EQ(NgramSource::lookup(h, 3, cfg), (std::vector<int32_t>{5, 6, 9}));
  const Forbid no5(5), no9(9), no2(2);
  EXPECT_EQ(NgramSource::lookup(h, 3, cfg, &no5), (std::vector<int32_t>{2, 3, 9}));
  // Both full continuations hold a 9: the longest allowed start ({5, 6}).
  EXPECT_EQ(NgramSource::lookup(h, 3, cfg, &no9), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(NgramSource::lookup(h, 3, cfg, &no2), (std::vector<int32_t>{5, 6, 9}));
  const Forbid no1(1);  // the only continuation starts with the forbidden token
  EXPECT_EQ(NgramSource::lookup(std::vector<int32_t>{8, 1, 8}, 2, cfg, &no1),
            std::vector<int32_t>{});
}

// The micro models' 8 tokens as JSON bytes; token 7 (no bytes) is EOS.
const std::vector<std::string> kMicroBytes = {"{", "}", "\"", "a", ":", "1", " ", ""};
constexpr int32_t kMicroEos = 7;

// Whether token t may follow `tokens` under constraint c.
bool micro_allows(const JsonConstraint& c, const std::vector<int32_t>& tokens, int32_t t) {
  JsonMatcher m(&c.schema);
  for (const int32_t x : tokens)
    if (!c.vocab->advance(m, x)) return false;
  if (c.is_eos(t)) return m.complete();
  return c.vocab->advance(m, t);
}

// Rejection sampling with a draft model whose q differs strongly from p, both masked by a JSON
// grammar: the joint distribution of the first three tokens must be the target's masked one
// (enumerated with plain forwards; mask, then temperature / top-p), by a G-test at false-alarm
// rate 1e-3. A q left unmasked while the draft is drawn masked (or the reverse) skews it.
TEST(JsonDraft, MaskedDraftsKeepTheExactDistribution) {
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const auto dir = std::filesystem::temp_directory_path() / ("dspark_micro_" + test);
  test::write_micro_llama(dir / "target", test::MicroModelSpec{.seed = 1});
  test::write_micro_llama(dir / "draft", test::MicroModelSpec{.seed = 1, .std = 0.9f});
  Context ctx(Device::cpu());
  auto target = load_model(dir / "target", Device::cpu(), DType::f32);
  const auto c = std::make_shared<JsonConstraint>(JsonConstraint{
      JsonSchema::any_object(), std::make_shared<TokenVocab>(kMicroBytes), {kMicroEos}});
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_p = 0.95f;
  sp.spec = SpecSampling::rejection;
  const std::vector<int32_t> prompt = {1, 5, 2};
  constexpr int V = 8;

  // The exact masked joint: one forward per prefix of up to two generated tokens.
  std::vector<std::vector<int32_t>> gens = {{}};
  for (int a = 0; a < V; ++a) {
    gens.push_back({a});
    for (int b = 0; b < V; ++b) gens.push_back({a, b});
  }
  PagedKvCache kv(target->kv_shape(16, static_cast<int>(gens.size()) + 4), target->device());
  ForwardBatch batch;
  batch.row_indptr.push_back(0);
  for (const auto& g : gens) {
    batch.tokens.insert(batch.tokens.end(), prompt.begin(), prompt.end());
    batch.tokens.insert(batch.tokens.end(), g.begin(), g.end());
    batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.logit_indices.push_back(static_cast<int32_t>(batch.tokens.size()) - 1);
    batch.seqs.push_back(kv.create_sequence());
  }
  const std::vector<float> logits = to_f32_vector(target->forward(ctx, kv, batch).logits);
  auto dist = [&](size_t row) {
    std::vector<float> z(logits.begin() + static_cast<int64_t>(row) * V,
                         logits.begin() + static_cast<int64_t>(row + 1) * V);
    for (int t = 0; t < V; ++t)
      if (!micro_allows(*c, gens[row], t)) z[static_cast<size_t>(t)] = -INFINITY;
    return test::processed_probs(z, sp);
  };
  std::vector<double> expected(static_cast<size_t>(V) * V * V, 0.0);
  const auto p0 = dist(0);
  for (int a = 0; a < V; ++a) {
    const auto p1 = dist(1 + static_cast<size_t>(a) * (V + 1));
    for (int b = 0; b < V; ++b) {
      if (b == kMicroEos) continue;  // the output ends: no third token
      const auto p2 = dist(2 + static_cast<size_t>(a) * (V + 1) + static_cast<size_t>(b));
      for (int cc = 0; cc < V; ++cc)
        expected[(static_cast<size_t>(a) * V + b) * V + cc] = p0[a] * p1[b] * p2[cc];
    }
  }

  DraftModelSource source(load_model(dir / "draft", Device::cpu(), DType::f32), 20000 * 32);
  const int64_t n = test::stat_samples(60000);
  std::vector<int64_t> observed(expected.size(), 0);
  SpecTelemetry total;
  SpecConfig cfg;
  cfg.gamma = 4;
  for (int64_t base = 0; base < n; base += 20000) {
    std::vector<RequestInput> reqs;
    for (int64_t i = base; i < std::min(n, base + 20000); ++i) {
      RequestInput r;
      r.prompt = prompt;
      r.options.sampling = sp;
      r.options.seed = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + 7;
      r.options.max_tokens = 6;
      r.options.eos_token_ids = {kMicroEos};
      r.options.json = c;
      reqs.push_back(std::move(r));
    }
    for (const RequestOutput& o : generate_speculative(*target, ctx, &source, reqs, cfg)) {
      const std::vector<int32_t>& t = o.result.tokens;
      ASSERT_GE(t.size(), 3u);  // an EOS cannot come before the third token of any object
      ++observed[(static_cast<size_t>(t[0]) * V + t[1]) * V + t[2]];
      total.merge(o.spec);
    }
  }
  const test::GTestResult g = test::g_test(observed, expected, 1e-3);
  std::printf("[ exact    ] masked rejection samples=%lld acceptance=%.3f: %s\n",
              static_cast<long long>(n), total.acceptance(), g.summary().c_str());
  EXPECT_TRUE(g.pass()) << g.summary();
  EXPECT_GT(total.acceptance(), 0.05);
  EXPECT_LT(total.acceptance(), 0.95);
}

}  // namespace
}  // namespace dspark
