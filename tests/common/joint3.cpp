#include "common/joint3.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dspark/engine/speculative.h"

namespace dspark::test {

std::vector<double> processed_probs(const std::vector<float>& logits, const SamplingParams& sp) {
  const int v = static_cast<int>(logits.size());
  std::vector<double> z(logits.begin(), logits.end());
  for (auto& x : z) x /= sp.temperature;
  std::vector<bool> keep(static_cast<size_t>(v), true);
  if (sp.top_k > 0)
    for (int i = 0; i < v; ++i) {
      int greater = 0;
      for (int j = 0; j < v; ++j) greater += z[j] > z[i];
      keep[i] = greater < sp.top_k;
    }
  double m = -INFINITY;
  for (int i = 0; i < v; ++i)
    if (keep[i]) m = std::max(m, z[i]);
  std::vector<double> p(static_cast<size_t>(v), 0.0);
  double s = 0;
  for (int i = 0; i < v; ++i)
    if (keep[i]) s += (p[i] = std::exp(z[i] - m));
  for (auto& x : p) x /= s;
  std::vector<double> out = p;
  for (int i = 0; i < v; ++i) {
    double above = 0;
    for (int j = 0; j < v; ++j)
      if (p[j] > p[i]) above += p[j];
    if (!(above < sp.top_p)) out[i] = 0;
  }
  s = std::accumulate(out.begin(), out.end(), 0.0);
  for (auto& x : out) x /= s;
  return out;
}

std::vector<double> exact_joint3(Model& model, Context& ctx, const std::vector<int32_t>& prompt,
                                 const SamplingParams& sp) {
  const int vocab = model.config().vocab_size;
  std::vector<std::vector<int32_t>> prefixes = {prompt};
  for (int a = 0; a < vocab; ++a) {
    prefixes.push_back(prompt);
    prefixes.back().push_back(a);
    for (int b = 0; b < vocab; ++b) {
      prefixes.push_back(prompt);
      prefixes.back().push_back(a);
      prefixes.back().push_back(b);
    }
  }
  PagedKvCache kv(model.kv_shape(16, static_cast<int>(prefixes.size()) + 4), model.device());
  ForwardBatch batch;
  batch.row_indptr.push_back(0);
  for (const auto& p : prefixes) {
    batch.tokens.insert(batch.tokens.end(), p.begin(), p.end());
    batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.logit_indices.push_back(static_cast<int32_t>(batch.tokens.size()) - 1);
    batch.seqs.push_back(kv.create_sequence());
  }
  const std::vector<float> logits = to_f32_vector(model.forward(ctx, kv, batch).logits);
  auto dist = [&](size_t row) {
    const auto begin = logits.begin() + static_cast<int64_t>(row) * vocab;
    return processed_probs(std::vector<float>(begin, begin + vocab), sp);
  };
  std::vector<double> joint(static_cast<size_t>(vocab) * vocab * vocab);
  const auto p0 = dist(0);
  size_t row = 1;
  for (int a = 0; a < vocab; ++a) {
    const auto p1 = dist(row++);
    for (int b = 0; b < vocab; ++b) {
      const auto p2 = dist(row++);
      for (int c = 0; c < vocab; ++c)
        joint[(static_cast<size_t>(a) * vocab + b) * vocab + c] = p0[a] * p1[b] * p2[c];
    }
  }
  return joint;
}

Joint3Run sample_joint3(Model& model, Context& ctx, DraftSource* source,
                        const std::vector<int32_t>& prompt, const SamplingParams& sp,
                        int64_t n_samples, int gamma, int max_tokens, uint64_t seed_salt) {
  constexpr int64_t kBatch = 20000;
  const int vocab = model.config().vocab_size;
  SpecConfig cfg;
  cfg.gamma = gamma;
  Joint3Run run;
  run.observed.assign(static_cast<size_t>(vocab) * vocab * vocab, 0);
  for (int64_t base = 0; base < n_samples; base += kBatch) {
    std::vector<RequestInput> reqs;
    for (int64_t i = base; i < std::min(n_samples, base + kBatch); ++i) {
      RequestInput r;
      r.prompt = prompt;
      r.options.sampling = sp;
      r.options.seed = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed_salt;
      r.options.max_tokens = max_tokens;
      r.options.eos_token_ids = {};
      reqs.push_back(std::move(r));
    }
    const auto out = generate_speculative(model, ctx, source, std::move(reqs), cfg);
    for (const auto& o : out) {
      const auto& t = o.result.tokens;
      EXPECT_GE(t.size(), 3u);
      if (t.size() < 3) continue;
      ++run.observed[(static_cast<size_t>(t[0]) * vocab + t[1]) * vocab + t[2]];
      run.spec.merge(o.spec);
    }
  }
  return run;
}

}  // namespace dspark::test
