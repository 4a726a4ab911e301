// The DSpark sequential heads, run on the device for a whole round (all rows, all steps) with no
// host synchronisation inside the left-to-right loop:
//
//   vanilla (Eq 5)  z_k = U_k + w2 . w1[x_{k-1}]
//   gated           z_k = U_k + w2 . (sigmoid(Wg [h_k ; w1[x_{k-1}]] + bg) * w1[x_{k-1}])
//   rnn (Eq 6)      [g|c|o] = Wj [s_{k-1} ; w1[x_{k-1}] ; h_k] + bj,  a = sigmoid(g)
//                   s_k = a * s_{k-1} + (1 - a) * tanh(c),  z_k = U_k + w2 . tanh(o),  s_{-1} = 0
//   none (DFlash)   z_k = U_k
//
// x_{-1} is the anchor. x_k = argmax z_k for greedy rows; otherwise x_k is drawn by inverse CDF
// from q_k = process_logits(z_k, the row's sampling parameters) with a uniform given per (row,
// step). The confidence head (Eq 7) gives logit_k = w . [h_k ; w1[x_{k-1}]] + b (or w . h_k + b);
// the caller applies the sigmoid on the host after its one read.
//
// On CUDA a greedy vanilla round is one launch for all steps where w2's columns fit the shared
// memory of the multiprocessors (ops/head_cells.h, markov_greedy_loop: a 32k draft vocabulary in
// bf16 does), else one launch per step (markov_greedy_step: gather, projection, add and argmax
// fused); elsewhere the separate ops.
//
// Layout of a round with R rows and S steps: every per-(row, step) tensor holds row i's step s at
// index s * R + i, so that one step's rows are contiguous.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/model/layers.h"
#include "dspark/ops/sampling.h"
#include "dspark/spec/dspark/drafter_config.h"
#include "dspark/spec/dspark/drafter_weights.h"

namespace dspark {

struct HeadRound {
  int rows = 0;   // R
  int steps = 0;  // S
  Tensor hidden;  // [S * R, d] activation dtype: the drafter's final hidden state h_k
  Tensor logits;  // f32 [S * R, V]: base logits U on input, corrected logits z on output
  Tensor tokens;  // i32 [(S + 1) * R]: [0, R) the anchors (input); step s writes [(s+1)R, (s+2)R)
  // Sampling: when `probs` is defined, every row is drawn from q (greedy rows get one-hot q).
  std::span<const SamplingParams> params;  // R entries
  Tensor uniforms;                         // f32 [S * R]
  Tensor probs;                            // f32 [S * R, V] output q
  Tensor confidence;                       // f32 [S * R, 1] output logits (confidence head only)
  // A draft vocabulary (greedy rounds only): the logits' columns are the token ids vocab_ids
  // (i32 [V']), and markov_w2 ([V', r]: the checkpoint's w2 rows of those ids, dense or blocks as
  // the drafter holds w2) replaces w2. Undefined (no data): the whole vocabulary.
  Tensor vocab_ids;
  WeightMatrix markov_w2;
  // Structured output: called for every step s once its logits z_s (logits rows [sR, (s+1)R))
  // are formed and before its tokens are chosen, to mask them; the earlier steps' tokens are then
  // enqueued (read them after a synchronisation). With it the head runs one step at a time, none
  // of the fused greedy loops.
  std::function<void(int64_t step)> before_select;
};

class SequentialHead {
 public:
  SequentialHead(const DrafterConfig& config, const DrafterWeights& weights, DType dtype);
  // Enqueues the whole round on ctx's stream; its scratch comes from `arena` (the caller's: a
  // CUDA graph of the round keeps reading the arena's buffer).
  void run(Context& ctx, const HeadRound& round, ActivationArena& arena);
  // The device zeros the RNN head copies into its state each round (null before the first RNN
  // round): a captured round reads them, so they must not move under a graph.
  const void* state_zeros() const { return zeros_.data(); }
  // false: the sequential head adds no bias (z_k = U_k, as the DFlash row) -- an ablation of a
  // DSpark checkpoint; the confidence head keeps its w1[x_{k-1}] feature.
  void set_markov_enabled(bool enabled) { markov_enabled_ = enabled; }
  bool markov_enabled() const { return markov_enabled_; }

 private:
  struct Scratch {
    Tensor features;       // [R, width] activation dtype (gated: [h | e], rnn: [s | e | h], else e)
    Tensor latent;         // [R, r] activation dtype: the vector that w2 projects
    Tensor proj;           // f32 [R, r] (gated) / [R, 3r] (rnn)
    Tensor bias;           // f32 [R, V]
    Tensor conf_features;  // [S * R, d + r] activation dtype (confidence with Markov)
  };
  Scratch prepare(Context& ctx, ActivationArena& arena, int rows, int steps, int64_t vocab);
  void select(Context& ctx, const HeadRound& round, int64_t begin, int64_t end);

  const DrafterConfig& config_;
  const DrafterWeights& w_;
  DType dtype_;
  Buffer zeros_;  // device zeros for the RNN state reset (copied device-to-device per round)
  bool markov_enabled_ = true;
};

}  // namespace dspark
