#include "common/model_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "dspark/core/buffer.h"
#include "dspark/kv/paged_kv_cache.h"

namespace dspark::test {

std::vector<int32_t> fixed_prompt(int vocab, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < 9; ++i) p.push_back((7 + 31 * i + 13 * salt) % vocab);
  return p;
}

GenerateOptions greedy_tokens(int n) {
  GenerateOptions o;
  o.max_tokens = n;
  o.eos_token_ids = {};
  return o;
}

std::vector<float> last_position_logits(Model& m, Context& ctx,
                                        const std::vector<int32_t>& prompt) {
  PagedKvCache kv(m.kv_shape(16, 8), ctx.device());
  const SeqId seq = kv.create_sequence();
  ForwardBatch b;
  b.tokens = prompt;
  b.row_indptr = {0, static_cast<int32_t>(prompt.size())};
  b.seqs = {seq};
  b.logit_indices = {static_cast<int32_t>(prompt.size()) - 1};
  const Tensor logits = m.forward(ctx, kv, b).logits;
  ctx.synchronize();
  return to_f32_vector(logits);
}

int expect_twins_greedy_tokens(Model& model, Model& twin, Context& ctx,
                               const std::vector<int32_t>& prompt, bool blocks,
                               bool share_per_prompt) {
  const std::vector<int32_t> tokens = generate(model, ctx, prompt, test::greedy_tokens(24)).tokens;
  if (!blocks) {
    EXPECT_EQ(tokens, generate(twin, ctx, prompt, test::greedy_tokens(24)).tokens);
    return static_cast<int>(tokens.size());
  }
  std::vector<int32_t> seq = prompt;
  int exact = 0;
  for (int32_t t : tokens) {
    const std::vector<float> l = test::last_position_logits(twin, ctx, seq);
    const std::vector<float> q = test::last_position_logits(model, ctx, seq);
    double ss = 0;
    for (size_t i = 0; i < l.size(); ++i) ss += (q[i] - l[i]) * static_cast<double>(q[i] - l[i]);
    const float best = *std::max_element(l.begin(), l.end());
    exact += l[static_cast<size_t>(t)] == best;
    EXPECT_LE(best - l[static_cast<size_t>(t)], 6 * std::sqrt(ss / static_cast<double>(l.size())))
        << "token " << seq.size() - prompt.size();
    seq.push_back(t);
  }
  std::cout << exact << " of " << tokens.size() << " tokens are the twin's argmax\n";
  if (share_per_prompt) {
    EXPECT_GE(exact, static_cast<int>(tokens.size()) * 9 / 10);
  }
  return exact;
}

std::vector<int32_t> random_token_ids(int64_t vocab, int n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = tok(gen);
  return out;
}

std::vector<float> forward_row_logits(Model& model, Context& ctx, PagedKvCache& kv,
                                      const ForwardRows& rows, size_t wanted) {
  ForwardBatch b;
  b.row_indptr.push_back(0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int first = static_cast<int>(b.tokens.size());
    b.tokens.insert(b.tokens.end(), rows[r].second.begin(), rows[r].second.end());
    b.row_indptr.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seqs.push_back(rows[r].first);
    if (r == wanted)
      for (int i = first; i < static_cast<int>(b.tokens.size()); ++i) b.logit_indices.push_back(i);
  }
  return to_f32_vector(model.forward(ctx, kv, b).logits);
}

}  // namespace dspark::test
