// Element-wise cells of the DSpark sequential heads (DSpark paper Eq 6 and the gated Markov
// variant of deepseek-ai/DeepSpec): the small per-step pieces between the head's GEMMs, so that the
// drafter's left-to-right loop stays on the device.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"

namespace dspark {

// Gated Markov head: out[r, j] = sigmoid(gate[r, j]) * x[r, j]   (computed in f32)
//   gate, x, out: [n, R] any float dtypes, rows contiguous (row strides may be wider, e.g. a
//   column slice of a concatenated feature buffer); out may alias x.
void sigmoid_gate(Context& ctx, const Tensor& gate, const Tensor& x, const Tensor& out);

// RNN head cell. proj: [n, 3R] pre-activations [g | c | o] of the joint projection
// W[s_{k-1} ; w1[x_{k-1}] ; h_k] + b; state: [n, R] s_{k-1} on input, s_k on output (in place);
// out: [n, R]. With a = sigmoid(g):
//   state = a * state + (1 - a) * tanh(c);   out = tanh(o)        (computed in f32)
// Any float dtypes, rows contiguous (row strides may be wider); out must not overlap proj.
void rnn_head_cell(Context& ctx, const Tensor& proj, const Tensor& state, const Tensor& out);

// One greedy step of the vanilla Markov head (Eq 5) for n rows, as one CUDA launch:
//   z[i, :] += w2 . w1[prev[i]]        (f32 sums of the weights' products)
//   next[i] = argmax z[i, :]           (ties -> smallest column; index_map[column] when given)
// w1: [V, r], w2: [C, r] (same float dtype, contiguous); z: f32 [n, C] rows contiguous (the
// corrected logits, updated in place); prev, next: i32 [n] (may be slices of one token buffer);
// index_map: i32 [C] or undefined. Returns false, having done nothing, where the fused kernel
// does not apply (the CPU, mixed dtypes, r > 8192, more than 16384 rows):
// the caller then runs gather_rows + linear + add + argmax, the same math up to the f32 order of
// the dot products' sums. The kernel's per-row arrival counters are per device: one stream at a
// time may run it on a device (the engine's; a captured graph keeps their address).
bool markov_greedy_step(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& prev,
                        const Tensor& z, const Tensor& next, const Tensor& index_map);

// Every greedy step of the vanilla Markov head for n rows and S steps, as one CUDA launch (step s
// reads the tokens step s - 1 wrote, as markov_greedy_step would in S launches):
//   z[s n + i, :] += w2 . w1[tokens[s n + i]];   tokens[(s + 1) n + i] = argmax z[s n + i, :]
// (through index_map when given). z: f32 [S n, C] rows contiguous; tokens: i32 [(S + 1) n] with
// the anchors in [0, n); w1, w2, index_map as for markov_greedy_step. One grid of at most one CTA
// per multiprocessor keeps its columns of w2 in shared memory for the whole loop and meets at a
// grid barrier once per step. Returns false, having done nothing, where it does not apply (the
// CPU, mixed dtypes, more than 64 rows, a w2 slice that does not fit one multiprocessor's shared
// memory - e.g. a full 152k vocabulary in bf16 -, a process that may not use every multiprocessor:
// DeviceCaps::all_sms, MPS with an active-thread percentage below 100): the caller then runs
// markov_greedy_step per step. Its grid barrier's counters are per device (one stream at a time,
// as for markov_greedy_step). The barrier needs every CTA resident at once: the grid is sized to
// the device's multiprocessor count.
bool markov_greedy_loop(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& tokens,
                        const Tensor& z, int64_t rows, int64_t steps, const Tensor& index_map);

}  // namespace dspark
