// Structured output with speculative (rejection) sampling on CUDA: drafts cut at the first token
// the JSON document does not accept have their rows of q (the drafts' distributions, on the
// device) compacted by the engine with copy_async (SpeculativeEngine::constrain_drafts), and the
// verifier must read the moved rows. Constrained rows sit before unconstrained ones, whose q rows
// therefore move; another fixture model drafts, so q differs from p and every accept / reject
// decision and every resample from norm(max(0, p - q)) depends on the right row of q. The CUDA
// engine's tokens must equal the CPU engine's for every row. The draft model drafts blind there
// (its requests' grammars removed), as a source that ignores them would; drafting under the
// grammar (the draft's logits masked on the device, q the masked distribution) is checked the
// same way.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda_consistency.h"
#include "dspark/engine/json_output.h"
#include "dspark/engine/speculative.h"
#include "dspark/engine/text_generation.h"
#include "dspark/model/registry.h"
#include "dspark/spec/draft_model_source.h"

namespace dspark {
namespace {

bool fixtures_present() {
  const auto models = test::data_dir() / "models";
  return std::filesystem::exists(models / "qwen3" / "config.json") &&
         std::filesystem::exists(models / "llama3" / "config.json");
}

// Passes every call on, with the requests' grammars removed: the inner source drafts blind.
class Blind final : public ForwardingDraftSource {
 public:
  using ForwardingDraftSource::ForwardingDraftSource;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    std::vector<ProposeRequest> reqs(requests.begin(), requests.end());
    for (ProposeRequest& q : reqs) q.grammar = nullptr;
    inner().propose(ctx, reqs, out);
  }
};

struct MixedRun {
  std::vector<RequestOutput> out;
  std::vector<bool> constrained;
  std::vector<std::string> text;
};

// Rows alternate constrained (a JSON object) and unconstrained, rejection sampling at T = 1, the
// llama3 fixture (same tokenizer) drafting for the qwen3 fixture, gamma 4, the fixed policy (every
// round asks for 4 drafts).
MixedRun run_mixed(Device device, uint64_t seed, bool blind) {
  const auto models = test::data_dir() / "models";
  Context ctx(device);
  TextModel tm = load_text_model(models / "qwen3", device, DType::f32);
  DraftModelSource source(load_model(models / "llama3", device, DType::f32), 4096);
  const auto json = make_json_constraint(JsonSchema::any_object(), tm.tokenizer, tm.eos_token_ids);
  const std::vector<std::string> prompts = {"The cat sat on the mat.", "Once upon a time",
                                            "A list of numbers: 1, 2, 3", "Hello"};
  MixedRun r;
  std::vector<RequestInput> reqs;
  for (size_t i = 0; i < 2 * prompts.size(); ++i) {
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = 1.0f;
    o.sampling.spec = SpecSampling::rejection;
    o.seed = seed + i;
    o.eos_token_ids = tm.eos_token_ids;
    const bool constrained = i % 2 == 0;
    if (constrained) o.json = json;
    r.constrained.push_back(constrained);
    reqs.push_back(RequestInput{tm.tokenizer.encode(prompts[i / 2]), o, nullptr, {}});
  }
  SpecConfig cfg;
  cfg.gamma = 4;
  cfg.draft_policy = DraftPolicy::fixed;
  Blind blind_source(source);
  DraftSource* drafter = blind ? static_cast<DraftSource*>(&blind_source) : &source;
  r.out = generate_speculative(*tm.model, ctx, drafter, std::move(reqs), cfg);
  for (const auto& o : r.out) r.text.push_back(tm.tokenizer.decode(o.result.tokens, true));
  return r;
}

TEST(CudaStructuredSpec, CutDraftsKeepTheirDistributionsOnCuda) {
  DSPARK_REQUIRE_CUDA();
  if (!fixtures_present()) GTEST_SKIP() << "fixture missing";
  for (const uint64_t seed : {1u, 2u, 3u}) {
    const MixedRun cpu = run_mixed(Device::cpu(), seed, true);
    const MixedRun gpu = run_mixed(test::kTestGpu, seed, true);
    ASSERT_EQ(gpu.out.size(), cpu.out.size());
    int64_t cut = 0, plain_drafted = 0, plain_accepted = 0;
    for (size_t i = 0; i < gpu.out.size(); ++i) {
      const SpecTelemetry& s = gpu.out[i].spec;
      EXPECT_EQ(gpu.out[i].result.tokens, cpu.out[i].result.tokens)
          << "seed " << seed << " row " << i << (gpu.constrained[i] ? " (JSON)" : "");
      if (gpu.constrained[i]) {
        cut += s.draft_budget - s.drafted;  // drafts the grammar cut
        const size_t first = gpu.text[i].find_first_not_of(" \t\n\r");
        ASSERT_NE(first, std::string::npos) << "row " << i;
        EXPECT_EQ(gpu.text[i][first], '{') << gpu.text[i];  // a JSON object's text
      } else {
        plain_drafted += s.drafted;
        plain_accepted += s.accepted;
      }
    }
    // The constrained rows' drafts were cut (so the later rows' q moved), and the unconstrained
    // rows' drafts were verified against q: the fixtures' distributions barely overlap, so most
    // are rejected and the next token is drawn from norm(max(0, p - q)). (With the q rows left
    // where they were, accept decisions and residual draws change: the tokens differ.)
    EXPECT_GT(cut, 0) << "seed " << seed;
    EXPECT_GT(plain_drafted, 100) << "seed " << seed;
    EXPECT_LT(plain_accepted, plain_drafted) << "seed " << seed;
  }
}

// The draft model drafts under the grammar on the device: its logits rows masked by
// apply_token_mask, q the masked, renormalised distribution; the CUDA engine's tokens equal the
// CPU engine's.
TEST(CudaStructuredSpec, MaskedDraftsOnCudaEqualTheCpu) {
  DSPARK_REQUIRE_CUDA();
  if (!fixtures_present()) GTEST_SKIP() << "fixture missing";
  for (const uint64_t seed : {1u, 2u}) {
    const MixedRun cpu = run_mixed(Device::cpu(), seed, false);
    const MixedRun gpu = run_mixed(test::kTestGpu, seed, false);
    ASSERT_EQ(gpu.out.size(), cpu.out.size());
    int64_t json_drafted = 0;
    for (size_t i = 0; i < gpu.out.size(); ++i) {
      EXPECT_EQ(gpu.out[i].result.tokens, cpu.out[i].result.tokens)
          << "seed " << seed << " row " << i << (gpu.constrained[i] ? " (JSON)" : "");
      if (gpu.constrained[i]) json_drafted += gpu.out[i].spec.drafted;
    }
    EXPECT_GT(json_drafted, 0) << "seed " << seed;
  }
}

}  // namespace
}  // namespace dspark
