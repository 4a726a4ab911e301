// Golden checks of the decoder families against Hugging Face outputs
// (tools/goldens/make_goldens.py, fixtures in tests/data/models/<name>/). Shared by the CPU suite
// (f32) and the CUDA suite (bf16).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/engine/generate.h"
#include "dspark/io/safetensors.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"

namespace dspark::test {

inline const std::vector<std::string>& golden_model_names() {
  static const std::vector<std::string> names = {
      "llama3",    "llama3_sharded", "qwen2",    "qwen3",       "qwen3_yarn",        "mistral",
      "qwen3_moe", "deepseek_v3",    "glm4_moe", "glm_moe_dsa", "deepseek_v3_q_proj"};
  return names;
}

// tests/data/models, or $DSPARK_TEST_MODELS (fixtures generated elsewhere).
inline std::filesystem::path golden_models_dir() {
  if (const char* env = std::getenv("DSPARK_TEST_MODELS")) return env;
  return data_dir() / "models";
}

struct GoldenPrompt {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [n, V]
  std::map<int, std::vector<float>> taps;
  std::vector<float> final_hidden;
  std::vector<int32_t> greedy;
  // f32 top-1/top-2 logit margins at each greedy decision (filled by with_greedy_margins; empty:
  // every decision is checked strictly).
  std::vector<float> greedy_margins;
};

struct GoldenSet {
  std::vector<int> taps;
  std::vector<GoldenPrompt> prompts;
};

inline GoldenSet load_golden_set(const std::filesystem::path& model_dir) {
  const SafeTensors st = SafeTensors::open(model_dir / "goldens.safetensors");
  GoldenSet g;
  g.taps = nlohmann::json::parse(st.metadata().at("taps")).get<std::vector<int>>();
  const int n_prompts = std::stoi(st.metadata().at("n_prompts"));
  for (int i = 0; i < n_prompts; ++i) {
    const std::string p = fmt::format("p{}.", i);
    GoldenPrompt gp;
    gp.tokens = to_vector<int32_t>(st.get(p + "tokens"));
    gp.logits = to_vector<float>(st.get(p + "logits"));
    for (int l : g.taps) gp.taps[l] = to_vector<float>(st.get(fmt::format("{}tap{}", p, l)));
    gp.final_hidden = to_vector<float>(st.get(p + "final_hidden"));
    gp.greedy = to_vector<int32_t>(st.get(p + "greedy"));
    g.prompts.push_back(std::move(gp));
  }
  return g;
}

// The worst relative RMS error seen per quantity, for the report line.
struct WorstErrors {
  std::map<std::string, std::pair<double, std::string>> worst;  // quantity -> (error, where)
  void add(const std::string& what, double err, const std::string& where) {
    auto& w = worst[what];
    if (err >= w.first) w = {err, where};
  }
  std::string str() const {
    std::string s;
    for (const auto& [what, w] : worst)
      s += fmt::format("{} {:.2e} ({})  ", what, w.first, w.second);
    return s;
  }
};

inline std::vector<float> rows_of(const std::vector<float>& all, int64_t width, int64_t begin,
                                  int64_t end) {
  return std::vector<float>(all.begin() + begin * width, all.begin() + end * width);
}

inline int pages_for(int tokens, int page_size) {
  return (tokens + page_size - 1) / page_size;
}

// One prompt as one row: logits at every position, the taps and the final hidden state.
inline void check_single_prompt_forward(Model& model, Context& ctx, const GoldenSet& g, int prompt,
                                        double tol, WorstErrors& worst) {
  const GoldenPrompt& gp = g.prompts[static_cast<size_t>(prompt)];
  const int n = static_cast<int>(gp.tokens.size());
  PagedKvCache kv(model.kv_shape(16, pages_for(n, 16)), model.device());
  ForwardBatch b;
  b.tokens = gp.tokens;
  b.row_indptr = {0, n};
  b.seqs = {kv.create_sequence()};
  for (int i = 0; i < n; ++i) b.logit_indices.push_back(i);
  b.tap_layers = g.taps;
  b.want_final_hidden = true;
  const ForwardOutput out = model.forward(ctx, kv, b);
  const std::string where = fmt::format("p{}", prompt);
  const double e_logits = relative_rms_error(to_f32_vector(out.logits), gp.logits);
  EXPECT_LE(e_logits, tol) << "logits of " << where;
  worst.add("logits", e_logits, where);
  ASSERT_EQ(out.taps.size(), g.taps.size());
  for (size_t t = 0; t < g.taps.size(); ++t) {
    const int l = g.taps[t];
    const double e = relative_rms_error(to_f32_vector(out.taps[t]), gp.taps.at(l));
    EXPECT_LE(e, tol) << "tap " << l << " of " << where;
    worst.add(fmt::format("tap{}", l), e, where);
  }
  const double e_final = relative_rms_error(to_f32_vector(out.final_hidden), gp.final_hidden);
  EXPECT_LE(e_final, tol) << "final hidden of " << where;
  worst.add("final_hidden", e_final, where);
  EXPECT_EQ(kv.length(b.seqs[0]), n);
}

// Fills greedy_margins from a reference model (the CPU f32 model, which matches Hugging Face to
// ~1e-6): the top-2 margin of the logits at each greedy decision, teacher-forced on the golden
// path.
inline void with_greedy_margins(Model& reference, Context& ctx, GoldenSet& g) {
  for (GoldenPrompt& gp : g.prompts) {
    const int n = static_cast<int>(gp.tokens.size());
    const int k = static_cast<int>(gp.greedy.size());
    PagedKvCache kv(reference.kv_shape(16, pages_for(n + k, 16)), reference.device());
    ForwardBatch b;
    b.tokens = gp.tokens;
    b.tokens.insert(b.tokens.end(), gp.greedy.begin(), gp.greedy.end() - 1);
    b.row_indptr = {0, static_cast<int32_t>(b.tokens.size())};
    b.seqs = {kv.create_sequence()};
    for (int i = 0; i < k; ++i) b.logit_indices.push_back(n - 1 + i);
    const std::vector<float> logits = to_f32_vector(reference.forward(ctx, kv, b).logits);
    const auto vocab = static_cast<int64_t>(reference.config().vocab_size);
    gp.greedy_margins.clear();
    for (int i = 0; i < k; ++i) {
      std::vector<float> row = rows_of(logits, vocab, i, i + 1);
      std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
      gp.greedy_margins.push_back(row[0] - row[1]);
    }
  }
}

// A greedy decision may differ from the golden one only where the reference margin is below
// `min_margin` (a close call at the tested precision; min_margin 0 = never). Returns whether a
// mismatch at `step` is allowed, printing the exception.
inline bool close_call(const GoldenPrompt& gp, int step, float min_margin,
                       const std::string& what) {
  const auto i = static_cast<size_t>(step);
  if (i >= gp.greedy_margins.size() || gp.greedy_margins[i] >= min_margin) return false;
  std::cout << fmt::format(
      "  {}: differs at greedy step {}, a close call (reference margin {:.3f} < {})\n", what, step,
      gp.greedy_margins[i], min_margin);
  return true;
}

// Greedy continuation through engine/generate: token-identical to Hugging Face's, or identical up
// to a close call (then the paths may diverge).
inline void check_greedy_generate(Model& model, Context& ctx, const GoldenSet& g, int prompt,
                                  float min_margin = 0.0f) {
  const GoldenPrompt& gp = g.prompts[static_cast<size_t>(prompt)];
  GenerateOptions o;
  o.max_tokens = static_cast<int>(gp.greedy.size());
  o.eos_token_ids = model.config().eos_token_ids;  // never the argmax on these paths
  o.prefill_chunk = 7;                             // exercise chunked prefill too
  const GenerateResult r = generate(model, ctx, gp.tokens, o);
  ASSERT_EQ(r.tokens.size(), gp.greedy.size());
  const auto diff = std::mismatch(r.tokens.begin(), r.tokens.end(), gp.greedy.begin());
  const auto step = static_cast<int>(diff.first - r.tokens.begin());
  if (step < static_cast<int>(r.tokens.size()) &&
      !close_call(gp, step, min_margin, fmt::format("generate p{}", prompt))) {
    EXPECT_EQ(r.tokens, gp.greedy)
        << "greedy continuation of p" << prompt << " differs at step " << step;
  }
  EXPECT_EQ(r.n_prompt, static_cast<int>(gp.tokens.size()));
  EXPECT_EQ(r.finish_reason, FinishReason::length);
}

// Every prompt as one row of a single batch (ragged rows), prefill split into chunks of different
// sizes per row (rows that are done contribute 0 tokens), then 32 batched greedy decode steps.
// Logits of every prompt position and every greedy decision must match the per-prompt goldens.
inline void check_batched(Model& model, Context& ctx, const GoldenSet& g,
                          const std::vector<int>& chunk_per_row, double tol, WorstErrors& worst,
                          const std::string& label, float min_margin = 0.0f) {
  const int n_rows = static_cast<int>(g.prompts.size());
  const int64_t vocab = model.config().vocab_size;
  int total = 0;
  for (const auto& p : g.prompts) total += static_cast<int>(p.tokens.size() + p.greedy.size());
  PagedKvCache kv(model.kv_shape(4, pages_for(total, 4) + n_rows), model.device());
  std::vector<SeqId> seqs;
  for (int r = 0; r < n_rows; ++r) seqs.push_back(kv.create_sequence());

  // Prefill.
  std::vector<std::vector<float>> logits(static_cast<size_t>(n_rows));
  std::vector<int> done(static_cast<size_t>(n_rows), 0);
  while (true) {
    ForwardBatch b;
    b.row_indptr = {0};
    std::vector<std::pair<int, int>> taken;  // (row, count)
    for (int r = 0; r < n_rows; ++r) {
      const auto& toks = g.prompts[static_cast<size_t>(r)].tokens;
      const int left = static_cast<int>(toks.size()) - done[static_cast<size_t>(r)];
      const int take = std::min(left, chunk_per_row[static_cast<size_t>(r) % chunk_per_row.size()]);
      for (int i = 0; i < take; ++i) {
        b.logit_indices.push_back(static_cast<int32_t>(b.tokens.size()));
        b.tokens.push_back(toks[static_cast<size_t>(done[static_cast<size_t>(r)] + i)]);
      }
      b.row_indptr.push_back(static_cast<int32_t>(b.tokens.size()));
      b.seqs.push_back(seqs[static_cast<size_t>(r)]);
      taken.emplace_back(r, take);
    }
    if (b.tokens.empty()) break;
    const std::vector<float> out = to_f32_vector(model.forward(ctx, kv, b).logits);
    int64_t row0 = 0;
    for (const auto& [r, take] : taken) {
      const auto part = rows_of(out, vocab, row0, row0 + take);
      logits[static_cast<size_t>(r)].insert(logits[static_cast<size_t>(r)].end(), part.begin(),
                                            part.end());
      row0 += take;
      done[static_cast<size_t>(r)] += take;
    }
  }
  std::vector<int32_t> next(static_cast<size_t>(n_rows));
  for (int r = 0; r < n_rows; ++r) {
    const GoldenPrompt& gp = g.prompts[static_cast<size_t>(r)];
    const double e = relative_rms_error(logits[static_cast<size_t>(r)], gp.logits);
    EXPECT_LE(e, tol) << label << ": prompt logits of row " << r;
    worst.add(label, e, fmt::format("p{}", r));
    EXPECT_EQ(kv.length(seqs[static_cast<size_t>(r)]), static_cast<int>(gp.tokens.size()));
    next[static_cast<size_t>(r)] = gp.greedy.front();
  }

  // Batched greedy decode: every row feeds the golden token and must predict the next one.
  const int steps = static_cast<int>(g.prompts.front().greedy.size()) - 1;
  for (int step = 0; step < steps; ++step) {
    ForwardBatch b;
    b.row_indptr = {0};
    for (int r = 0; r < n_rows; ++r) {
      b.tokens.push_back(g.prompts[static_cast<size_t>(r)].greedy[static_cast<size_t>(step)]);
      b.row_indptr.push_back(r + 1);
      b.seqs.push_back(seqs[static_cast<size_t>(r)]);
      b.logit_indices.push_back(r);
    }
    const std::vector<float> out = to_f32_vector(model.forward(ctx, kv, b).logits);
    for (int r = 0; r < n_rows; ++r) {
      const auto row = rows_of(out, vocab, r, r + 1);
      const auto argmax =
          static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      const GoldenPrompt& gp = g.prompts[static_cast<size_t>(r)];
      if (argmax != gp.greedy[static_cast<size_t>(step) + 1] &&
          close_call(gp, step + 1, min_margin, fmt::format("{} row {}", label, r))) {
        continue;
      }
      EXPECT_EQ(argmax, g.prompts[static_cast<size_t>(r)].greedy[static_cast<size_t>(step) + 1])
          << label << ": batched greedy step " << step + 1 << " of row " << r;
    }
  }
}

}  // namespace dspark::test
