// dspark regen (tools/regen/regen.h): the shards hold exactly the target's greedy continuation of
// each prompt (checked against transformers' greedy tokens in the golden fixtures), the loss mask
// marks the response, and the tap / final-hidden rows are the model's own hidden states of every
// token (prompt rows against transformers' taps, all rows against a fresh single-sequence forward).
// Also: the DSpark source's Markov switch (DSparkSourceOptions::markov_enabled) used by
// `dspark regen --no-markov`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/core/buffer.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/model.h"
#include "dspark/spec/dspark/dspark_source.h"
#include "regen/regen.h"

namespace dspark {
namespace {

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::f32) {
    const std::vector<float> v = to_vector<float>(t);
    return v;
  }
  const std::vector<bf16> v = to_vector<bf16>(t);
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_f32(v[i]);
  return out;
}

// |a - b| <= atol + rtol |b| element-wise (bf16 storage: rtol 2^-8 plus f32 compute noise).
void expect_close(const std::vector<float>& a, const std::vector<float>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - b[i]) > 2e-3f + 8e-3f * std::fabs(b[i])) {
      if (++bad <= 3) ADD_FAILURE() << what << " [" << i << "]: " << a[i] << " vs " << b[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(Regen, ShardsHoldGreedyTokensMaskAndTaps) {
  const auto model_dir = test::data_dir() / "models" / "qwen3";
  Context ctx(Device::cpu());
  auto model = load_model(model_dir, Device::cpu(), DType::f32);
  const SafeTensors g = SafeTensors::open(model_dir / "goldens.safetensors");
  const std::vector<int> taps = {0, 2};  // the goldens' taps
  const int n_prompts = 3, n_greedy = 32;

  std::vector<RegenPrompt> prompts;
  for (int i = 0; i < n_prompts; ++i)
    prompts.push_back(
        {"p" + std::to_string(i), to_vector<int32_t>(g.get("p" + std::to_string(i) + ".tokens"))});
  RegenOptions o;
  o.generate.max_tokens = n_greedy;  // no EOS: the goldens' greedy paths never pick it
  o.batch = 2;                       // fewer rows than prompts: continuous admission
  o.tap_layers = taps;
  o.final_hidden = true;
  o.shard_tokens = 60;      // several shards
  o.tap_chunk_tokens = 70;  // several tap forwards per shard
  o.progress_seconds = 0;
  const auto out = std::filesystem::temp_directory_path() / "dspark_regen_test";
  std::filesystem::remove_all(out);
  const RegenSummary sum = run_regen(*model, ctx, nullptr, prompts, o, out, {}, [](auto&) {});
  EXPECT_EQ(sum.n_sequences, n_prompts);
  EXPECT_EQ(sum.n_response_tokens, n_prompts * n_greedy);
  EXPECT_GE(sum.n_shards, 2);

  std::map<std::string, int> seen;
  const int64_t H = model->config().hidden_size;
  for (int64_t s = 0; s < sum.n_shards; ++s) {
    const auto file = out / fmt::format("shard_{:05d}.safetensors", s);
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    const SafeTensors st = SafeTensors::open(file);
    EXPECT_EQ(st.metadata().at("format"), "dspark-regen/1");
    EXPECT_EQ(nlohmann::json::parse(st.metadata().at("tap_layers")), nlohmann::json(taps));
    const auto ids = nlohmann::json::parse(st.metadata().at("ids"));
    const std::vector<int32_t> tokens = to_vector<int32_t>(st.get("tokens"));
    const std::vector<uint8_t> mask = to_vector<uint8_t>(st.get("loss_mask"));
    const std::vector<int64_t> off = to_vector<int64_t>(st.get("seq_offsets"));
    const std::vector<int32_t> plen = to_vector<int32_t>(st.get("prompt_lens"));
    const std::vector<float> tap_rows = as_f32(st.get("taps"));
    const std::vector<float> fin_rows = as_f32(st.get("final_hidden"));
    const auto T = static_cast<int64_t>(tokens.size());
    ASSERT_EQ(st.get("taps").shape(), (Shape{T, 2, H}));
    ASSERT_EQ(st.get("final_hidden").shape(), (Shape{T, H}));
    ASSERT_EQ(off.size(), ids.size() + 1);
    ASSERT_EQ(off.back(), T);
    for (size_t q = 0; q < ids.size(); ++q) {
      const std::string id = ids[q].get<std::string>();
      ++seen[id];
      const std::vector<int32_t> prompt = to_vector<int32_t>(g.get(id + ".tokens"));
      const std::vector<int32_t> greedy = to_vector<int32_t>(g.get(id + ".greedy"));
      const auto n_p = static_cast<int64_t>(prompt.size());
      ASSERT_EQ(plen[q], n_p);
      ASSERT_EQ(off[q + 1] - off[q], n_p + n_greedy) << id;
      std::vector<int32_t> want = prompt;
      want.insert(want.end(), greedy.begin(), greedy.end());
      const std::vector<int32_t> got(tokens.begin() + off[q], tokens.begin() + off[q + 1]);
      EXPECT_EQ(got, want) << id << ": regen tokens != transformers' prompt + greedy";
      for (int64_t i = 0; i < n_p + n_greedy; ++i)
        EXPECT_EQ(mask[static_cast<size_t>(off[q] + i)], i >= n_p ? 1 : 0) << id << " " << i;

      // Rows of this sequence: tap j of token i at ((off + i) * 2 + j) * H.
      auto tap_of = [&](int j, int64_t first, int64_t n) {
        std::vector<float> v;
        for (int64_t i = first; i < first + n; ++i) {
          const auto* p = tap_rows.data() + ((off[q] + i) * 2 + j) * H;
          v.insert(v.end(), p, p + H);
        }
        return v;
      };
      auto fin_of = [&](int64_t first, int64_t n) {
        const auto* p = fin_rows.data() + (off[q] + first) * H;
        return std::vector<float>(p, p + n * H);
      };
      // Prompt rows vs transformers (independent reference).
      expect_close(tap_of(0, 0, n_p), to_vector<float>(g.get(id + ".tap0")), id + " tap0 vs HF");
      expect_close(tap_of(1, 0, n_p), to_vector<float>(g.get(id + ".tap2")), id + " tap2 vs HF");
      expect_close(fin_of(0, n_p), to_vector<float>(g.get(id + ".final_hidden")),
                   id + " final_hidden vs HF");
      // Every row vs a fresh forward of this sequence alone.
      PagedKvCache kv(model->kv_shape(16, 64), Device::cpu());
      ForwardBatch b;
      b.tokens = want;
      b.row_indptr = {0, static_cast<int32_t>(want.size())};
      b.seqs = {kv.create_sequence()};
      b.tap_layers = taps;
      b.want_final_hidden = true;
      const ForwardOutput f = model->forward(ctx, kv, b);
      const int64_t n = n_p + n_greedy;
      expect_close(tap_of(0, 0, n), as_f32(f.taps[0]), id + " tap0 vs forward");
      expect_close(tap_of(1, 0, n), as_f32(f.taps[1]), id + " tap2 vs forward");
      expect_close(fin_of(0, n), as_f32(f.final_hidden), id + " final vs forward");
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n_prompts));
  for (const auto& [id, count] : seen) EXPECT_EQ(count, 1) << id;

  // responses.jsonl: one line per sequence with the response tokens; meta.json with counts.
  std::ifstream in(out / "responses.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["response_tokens"].get<std::vector<int32_t>>(),
              to_vector<int32_t>(g.get(j["id"].get<std::string>() + ".greedy")));
    ++lines;
  }
  EXPECT_EQ(lines, n_prompts);
  std::ifstream meta_in(out / "meta.json");
  const auto meta = nlohmann::json::parse(meta_in);
  EXPECT_EQ(meta["sequences"], n_prompts);
  EXPECT_EQ(meta["response_tokens"], n_prompts * n_greedy);
  std::filesystem::remove_all(out);
}

TEST(Regen, TargetWeightsFile) {
  const auto model_dir = test::data_dir() / "models" / "qwen3";
  Context ctx(Device::cpu());
  auto model = load_model(model_dir, Device::cpu(), DType::f32);
  const auto file = std::filesystem::temp_directory_path() / "dspark_regen_target.safetensors";
  write_target_weights(*model, ctx, file);
  const SafeTensors st = SafeTensors::open(file);
  const SafeTensors ref = SafeTensors::open(model_dir);
  EXPECT_EQ(to_vector<float>(st.get("embed_tokens")),
            to_vector<float>(ref.get("model.embed_tokens.weight")));
  EXPECT_EQ(to_vector<float>(st.get("lm_head")), to_vector<float>(ref.get("lm_head.weight")));
  EXPECT_EQ(to_vector<float>(st.get("final_norm")), to_vector<float>(ref.get("model.norm.weight")));
  EXPECT_EQ(st.metadata().at("tied"), "false");
  std::filesystem::remove(file);
}

// markov_enabled = false: the drafted tokens are the argmax of the base logits (z = U), while the
// fixture's Markov head changes at least one greedy token when enabled.
TEST(Regen, MarkovSwitchDraftsFromBaseLogits) {
  const auto dir = test::data_dir() / "drafters" / "qwen3_deepspec";
  const auto target_dir = test::data_dir() / "models" / "qwen3";
  if (!std::filesystem::exists(dir / "goldens.safetensors")) GTEST_SKIP() << "no fixture";
  Context ctx(Device::cpu());
  auto target = load_model(target_dir, Device::cpu(), DType::f32);
  const SafeTensors g = SafeTensors::open(dir / "goldens.safetensors");
  const std::vector<int32_t> all = to_vector<int32_t>(g.get("ctx.tokens"));
  const std::vector<int32_t> prompt(all.begin(), all.end() - 1);
  const std::vector<float> taps = to_vector<float>(g.get("ctx.taps"));
  const int64_t V = target->config().vocab_size;
  int changed_when_enabled = 0;
  for (bool enabled : {false, true}) {
    DSparkSourceOptions opt;
    opt.record = true;
    opt.kv_tokens = 1024;
    opt.markov_enabled = enabled;
    auto source = load_dspark_source(dir, *target, opt, false);
    const int64_t h = target->config().hidden_size;
    const auto m = static_cast<int64_t>(source->target_taps().size());
    const auto n = static_cast<int64_t>(prompt.size());
    Tensor host(const_cast<float*>(taps.data()), DType::f32, Shape{n, m * h});
    std::vector<Tensor> views;
    for (int64_t j = 0; j < m; ++j) views.push_back(host.slice(1, j * h, (j + 1) * h));
    source->begin(ctx, 0, prompt);
    RowUpdate u;
    u.row = 0;
    u.kept_tokens = prompt;
    u.pending = all.back();
    source->commit(ctx, std::span<const RowUpdate>(&u, 1), views);
    ProposeRequest req;
    req.row = 0;
    req.max_tokens = source->max_drafts();
    Proposal p;
    source->propose(ctx, std::span<const ProposeRequest>(&req, 1), p);
    const DSparkRecord& rec = source->record();
    ASSERT_GT(rec.steps, 1);
    for (int k = 0; k < rec.steps; ++k) {
      const auto* base = rec.base_logits.data() + k * V;
      const auto arg = static_cast<int32_t>(std::max_element(base, base + V) - base);
      if (!enabled) {
        EXPECT_EQ(rec.tokens[static_cast<size_t>(k)], arg) << "step " << k;
        EXPECT_TRUE(std::equal(base, base + V, rec.logits.data() + k * V)) << "step " << k;
      } else {
        changed_when_enabled += rec.tokens[static_cast<size_t>(k)] != arg ? 1 : 0;
      }
    }
  }
  EXPECT_GT(changed_when_enabled, 0);
}

}  // namespace
}  // namespace dspark
