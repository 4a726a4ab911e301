#include "dspark/spec/dspark/markov.h"

#include "dspark/core/error.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/head_cells.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/softmax.h"

namespace dspark {

SequentialHead::SequentialHead(const DrafterConfig& config, const DrafterWeights& weights,
                               DType dtype)
    : config_(config), w_(weights), dtype_(dtype) {}

SequentialHead::Scratch SequentialHead::prepare(Context& ctx, ActivationArena& arena, int rows,
                                                int steps, int64_t vocab) {
  const int64_t R = rows, S = steps;
  const int64_t d = config_.backbone.hidden_size, r = config_.markov_rank;
  const MarkovHeadType type = markov_enabled_ ? config_.markov_head : MarkovHeadType::none;
  int64_t width = r;
  if (type == MarkovHeadType::gated) width = d + r;
  if (type == MarkovHeadType::rnn) width = 2 * r + d;
  const bool markov = type != MarkovHeadType::none;
  const bool conf_markov = config_.confidence_head && config_.confidence_with_markov;

  struct Item {
    Tensor* t;
    DType dtype;
    Shape shape;
  };
  Scratch s;
  std::vector<Item> items;
  if (markov) {
    items.push_back({&s.features, dtype_, Shape{R, width}});
    items.push_back({&s.latent, dtype_, Shape{R, r}});
    items.push_back({&s.bias, DType::f32, Shape{R, vocab}});
    if (type == MarkovHeadType::gated) items.push_back({&s.proj, DType::f32, Shape{R, r}});
    if (type == MarkovHeadType::rnn) items.push_back({&s.proj, DType::f32, Shape{R, 3 * r}});
  }
  if (conf_markov) items.push_back({&s.conf_features, dtype_, Shape{S * R, d + r}});
  size_t bytes = 0;
  for (const Item& it : items) bytes += ActivationArena::bytes_for(it.dtype, it.shape);
  arena.begin(ctx.device(), std::max<size_t>(bytes, 256));
  for (const Item& it : items) *it.t = arena.take(it.dtype, it.shape);
  return s;
}

// Chooses the tokens of entries [begin, end) of the (step-major) round; the token of entry k is
// written at tokens[k + R], after the previous step's.
void SequentialHead::select(Context& ctx, const HeadRound& round, int64_t begin, int64_t end) {
  const int64_t R = round.rows;
  const Tensor z = round.logits.rows(begin, end);
  const Tensor out = round.tokens.slice(0, begin + R, end + R);
  if (!round.probs.defined()) {
    argmax(ctx, z, out, round.vocab_ids);  // a draft vocabulary's column -> its token id
    return;
  }
  // Per-row parameters repeat for every step covered (rows are step-major).
  std::vector<SamplingParams> params;
  params.reserve(static_cast<size_t>(end - begin));
  for (int64_t k = begin; k < end; ++k) params.push_back(round.params[static_cast<size_t>(k % R)]);
  const Tensor q = round.probs.rows(begin, end);
  process_logits(ctx, z, params, q);
  sample_from_probs(ctx, q, round.uniforms.slice(0, begin, end), out);
}

void SequentialHead::run(Context& ctx, const HeadRound& round, ActivationArena& arena) {
  const int64_t R = round.rows, S = round.steps;
  DSPARK_CHECK(R > 0 && S > 0, "sequential head: empty round ({} rows, {} steps)", R, S);
  DSPARK_CHECK(static_cast<int64_t>(round.params.size()) == R,
               "sequential head: {} sampling parameters for {} rows", round.params.size(), R);
  const int64_t d = config_.backbone.hidden_size, r = config_.markov_rank;
  const MarkovHeadType type = markov_enabled_ ? config_.markov_head : MarkovHeadType::none;
  DSPARK_CHECK(!round.vocab_ids.defined() || !round.probs.defined(),
               "sequential head: a draft vocabulary is for greedy rounds only");
  const Scratch sc =
      prepare(ctx, arena, static_cast<int>(R), static_cast<int>(S), round.logits.size(1));
  const WeightMatrix w1 = w_.markov_w1.matrix();
  const WeightMatrix w2 = round.markov_w2.data.defined() ? round.markov_w2 : w_.markov_w2.matrix();

  const bool masked = static_cast<bool>(round.before_select);
  if (type == MarkovHeadType::none && masked) {
    for (int64_t s = 0; s < S; ++s) {  // a step's mask depends on the earlier steps' tokens
      round.before_select(s);
      select(ctx, round, s * R, (s + 1) * R);
    }
  } else if (type == MarkovHeadType::none) {
    select(ctx, round, 0, S * R);  // every step at once: no dependence on earlier tokens
  } else {
    if (type == MarkovHeadType::rnn) {
      // s_{-1} = 0: a device-to-device copy of zeros over the whole feature buffer (state
      // columns included); the zeros are allocated once (grow-only).
      const size_t bytes = static_cast<size_t>(sc.features.numel()) * sc.features.element_size();
      if (zeros_.bytes() < bytes || zeros_.device() != ctx.device()) {
        ctx.synchronize();
        zeros_ = Buffer(ctx.device(), bytes);
        const std::vector<char> host(bytes, 0);
        ctx.copy_async(zeros_.data(), host.data(), bytes);
      }
      ctx.copy_async(sc.features.data(), zeros_.data(), bytes);
    }
    // Greedy vanilla rounds on CUDA: every step in one launch when w2's columns fit the GPU's
    // shared memory (a draft vocabulary), else one launch per step below. Both take dense tables
    // (the CPU's blocks go through the separate ops).
    const bool fused = type == MarkovHeadType::vanilla && !round.probs.defined() && !masked &&
                       !w1.quantized() && !w2.quantized();
    const bool looped = fused && markov_greedy_loop(ctx, w1.data, w2.data, round.tokens,
                                                    round.logits, R, S, round.vocab_ids);
    for (int64_t s = 0; s < S && !looped; ++s) {
      const Tensor prev = round.tokens.slice(0, s * R, (s + 1) * R);
      const Tensor h = round.hidden.rows(s * R, (s + 1) * R);
      Tensor latent = sc.latent;
      // Greedy vanilla steps on CUDA: gather, projection, add and argmax in one launch.
      if (fused &&
          markov_greedy_step(ctx, w1.data, w2.data, prev, round.logits.rows(s * R, (s + 1) * R),
                             round.tokens.slice(0, (s + 1) * R, (s + 2) * R), round.vocab_ids))
        continue;
      switch (type) {
        case MarkovHeadType::vanilla:
          gather_rows(ctx, w1, prev, sc.features);
          latent = sc.features;
          break;
        case MarkovHeadType::gated: {
          const Tensor e = sc.features.slice(1, d, d + r);
          convert(ctx, h, sc.features.slice(1, 0, d));
          gather_rows(ctx, w1, prev, e);
          linear(ctx, sc.features, w_.markov_proj, w_.markov_proj_bias, sc.proj);
          sigmoid_gate(ctx, sc.proj, e, sc.latent);
          break;
        }
        case MarkovHeadType::rnn:
          gather_rows(ctx, w1, prev, sc.features.slice(1, r, 2 * r));
          convert(ctx, h, sc.features.slice(1, 2 * r, 2 * r + d));
          linear(ctx, sc.features, w_.markov_proj, w_.markov_proj_bias, sc.proj);
          rnn_head_cell(ctx, sc.proj, sc.features.slice(1, 0, r), sc.latent);
          break;
        case MarkovHeadType::none:
          break;
      }
      linear(ctx, latent, w2, Tensor{}, sc.bias);
      const Tensor z = round.logits.rows(s * R, (s + 1) * R);
      add(ctx, z, sc.bias, z);
      if (masked) round.before_select(s);
      select(ctx, round, s * R, (s + 1) * R);
    }
  }

  if (config_.confidence_head) {
    if (config_.confidence_with_markov) {
      convert(ctx, round.hidden, sc.conf_features.slice(1, 0, d));
      gather_rows(ctx, w1, round.tokens.slice(0, 0, S * R), sc.conf_features.slice(1, d, d + r));
      linear(ctx, sc.conf_features, w_.confidence_w, w_.confidence_b, round.confidence);
    } else {
      linear(ctx, round.hidden, w_.confidence_w, w_.confidence_b, round.confidence);
    }
  }
}

}  // namespace dspark
