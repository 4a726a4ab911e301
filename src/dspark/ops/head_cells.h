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

}  // namespace dspark
