#include "common/mtp_checks.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/mtp.h"
#include "dspark/spec/mtp_source.h"
#include "test_util.h"

namespace dspark::test {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool zeroed_in_bigram(const std::string& name) {
  return ends_with(name, "self_attn.o_proj.weight") || ends_with(name, "down_proj.weight");
}

// Random prompts of 3 .. 48 tokens and a repetitive one (one batch: rows of different lengths,
// several prefill chunks each).
std::vector<std::vector<int32_t>> mtp_prompts(int vocab) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> tok(3, vocab - 1);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {3, 7, 12, 20, 48}) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = tok(gen);
    prompts.push_back(p);
  }
  std::vector<int32_t> rep;
  for (int i = 0; i < 6; ++i) rep.insert(rep.end(), {tok(gen), 17, 42});
  prompts.push_back(rep);
  return prompts;
}

std::unique_ptr<DraftSource> mtp_source(Model& target) {
  return std::make_unique<MtpSource>(
      MtpLayer::load(target.config(), target.device(), target.activation_dtype()), target, 8192);
}

}  // namespace

std::filesystem::path mtp_fixture_dir(const std::string& family) {
  return data_dir() / "models" / (family + "_mtp");
}

std::vector<MtpGolden> load_mtp_goldens(const std::filesystem::path& dir) {
  const SafeTensors st = SafeTensors::open(dir / "mtp_goldens.safetensors");
  std::vector<MtpGolden> out;
  for (int c = 0;; ++c) {
    const std::string p = "c" + std::to_string(c) + ".";
    if (!st.contains(p + "context")) break;
    MtpGolden g;
    g.context = to_vector<int32_t>(st.get(p + "context"));
    g.pending = to_vector<int32_t>(st.get(p + "pending")).at(0);
    g.logits = to_f32_vector(st.get(p + "logits"));
    g.drafts = to_vector<int32_t>(st.get(p + "drafts"));
    out.push_back(std::move(g));
  }
  return out;
}

ForwardOutput mtp_target_forward(Context& ctx, Model& target, PagedKvCache& kv, SeqId seq,
                                 const std::vector<int32_t>& tokens) {
  ForwardBatch b;
  b.tokens = tokens;
  b.row_indptr = {0, static_cast<int32_t>(tokens.size())};
  b.seqs = {seq};
  b.tap_layers = {target.config().num_layers - 1};
  b.want_final_hidden = true;
  return target.forward(ctx, kv, b);
}

ForwardOutput mtp_context_rows(Context& ctx, MtpLayer& layer, PagedKvCache& kv, SeqId seq,
                               const MtpGolden& g, const Tensor& hidden) {
  const auto n = static_cast<int32_t>(g.context.size());
  ForwardBatch b;
  b.tokens.assign(g.context.begin() + 1, g.context.end());
  b.tokens.push_back(g.pending);
  b.row_indptr = {0, n};
  b.seqs = {seq};
  b.logit_indices = {n - 1};
  return layer.forward(ctx, kv, b, hidden);
}

std::vector<int32_t> mtp_propose_greedy(Context& ctx, MtpSource& src, int k) {
  ProposeRequest q;
  q.max_tokens = k;
  Proposal p;
  src.propose(ctx, std::span<const ProposeRequest>(&q, 1), p);
  return p.tokens;
}

std::vector<float> mtp_first_draft_q(Context& ctx, MtpSource& src) {
  ProposeRequest q;
  q.max_tokens = 1;
  q.sampling.temperature = 1.0f;
  q.seed = 3;
  Proposal p;
  src.propose(ctx, std::span<const ProposeRequest>(&q, 1), p);
  EXPECT_TRUE(p.q.defined());
  return p.q.defined() ? to_f32_vector(p.q) : std::vector<float>{};
}

std::filesystem::path write_bigram_mtp_fixture(const std::string& family,
                                               const std::filesystem::path& out) {
  const std::filesystem::path src = mtp_fixture_dir(family);
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(src / "config.json", out / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const SafeTensors st = SafeTensors::open(src);
  const ModelConfig c = load_model_config(src);
  const std::string mtp = "model.layers." + std::to_string(c.num_layers) + ".";
  const int64_t h = c.hidden_size;
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : st.names()) {
    std::string from = name;
    if (name == mtp + "shared_head.norm.weight") from = "model.norm.weight";
    if (name == mtp + "shared_head.head.weight") from = "lm_head.weight";
    std::vector<float> v = to_f32_vector(st.get(from));
    if (zeroed_in_bigram(name)) std::fill(v.begin(), v.end(), 0.0f);
    if (name == mtp + "enorm.weight") std::fill(v.begin(), v.end(), 1.0f);
    if (name == mtp + "eh_proj.weight") {  // [h, 2h]: the embedding half the identity
      std::fill(v.begin(), v.end(), 0.0f);
      for (int64_t i = 0; i < h; ++i) v[static_cast<size_t>(i * 2 * h + i)] = 1.0f;
    }
    owned.push_back(make_tensor(v, DType::f32, st.get(name).shape(), Device::cpu()));
    tensors.emplace_back(name, owned.back().view());
  }
  write_safetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
  return out;
}

MtpLosslessStats check_mtp_lossless(const std::filesystem::path& dir, Device device, DType dtype) {
  Context ctx(device);
  auto target = load_model(dir, device, dtype);
  const auto prompts = mtp_prompts(target->config().vocab_size);
  GenerateOptions greedy;
  greedy.max_tokens = 20;
  greedy.eos_token_ids = {};
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(generate(*target, ctx, p, greedy).tokens);
  MtpLosslessStats stats;
  // Fixed draft lengths, then the adaptive policy (rows that stop drafting defer their commits
  // and absorb them when they draft again: mtp_source.h).
  for (int gamma : {1, 2, 3, 5, -5}) {
    auto source = mtp_source(*target);
    std::vector<RequestInput> reqs;
    for (const auto& p : prompts) reqs.push_back(RequestInput{p, greedy, nullptr, {}});
    SpecConfig cfg;
    cfg.gamma = std::abs(gamma);
    if (gamma < 0) cfg.draft_policy = DraftPolicy::adaptive;
    cfg.prefill_chunk = 7;  // prompts cut across chunks: the source carries positions over
    const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(out[i].result.tokens, plain[i])
          << device.name() << " " << dir.filename() << " gamma " << gamma << " prompt " << i;
      stats.drafted += out[i].spec.drafted;
      stats.accepted += out[i].spec.accepted;
    }
  }

  GenerateOptions sampled = greedy;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.top_p = 0.9f;
  sampled.sampling.spec = SpecSampling::coupled;
  std::vector<RequestInput> reqs;
  std::vector<std::vector<int32_t>> plain_sampled;
  for (const auto& p : prompts)
    for (uint64_t seed : {1, 2}) {
      sampled.seed = seed;
      plain_sampled.push_back(generate(*target, ctx, p, sampled).tokens);
      reqs.push_back(RequestInput{p, sampled, nullptr, {}});
    }
  auto source = mtp_source(*target);
  SpecConfig cfg;
  cfg.gamma = 3;
  cfg.prefill_chunk = 7;
  const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
  for (size_t i = 0; i < plain_sampled.size(); ++i)
    EXPECT_EQ(out[i].result.tokens, plain_sampled[i])
        << device.name() << " " << dir.filename() << " coupled request " << i;
  std::printf("[ mtp ] %s %s greedy drafted=%lld accepted=%lld acceptance=%.3f\n",
              device.name().c_str(), dir.filename().c_str(), stats.drafted, stats.accepted,
              stats.acceptance());
  return stats;
}

}  // namespace dspark::test
