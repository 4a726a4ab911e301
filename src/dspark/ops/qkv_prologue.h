// The attention prologue of a decoder layer, after the fused QKV projection: per token, the q and k
// heads get their per-head RMSNorm (when q_norm / k_norm are given: Qwen3, Gemma 3) and RoPE, and
// k and v go into the paged cache at `slots` (slot < 0: padding, not written; CUDA only - the CPU's
// kv_write refuses it). Returns q [n, n_heads, head_dim]: a view of q_out, or - on the unfused
// path without a q norm - of qkv itself, rotated in place (qkv may be modified). With n_heads 0
// (K/V only: a drafter's context rows, whose queries are never needed) qkv is [n, 2 * n_kv_heads
// * head_dim], q_out and q_norm are unused and the result is an undefined tensor.
// Defined as, and on the CPU computed by, the unfused ops: rms_norm of a copy (q_out / k_tmp) when
// there is a norm, rope, kv_write. On CUDA one kernel does it all (one launch instead of up to
// seven) when head_dim is 64, 128 or 256 and the rotation covers the whole head (rotary_dim ==
// head_dim); other shapes run the unfused ops there too. That kernel reads `positions`, `slots`
// and the norm weights before the kernel that precedes it in the stream has finished
// (programmatic dependent launch): they must have been written before that kernel started, as
// the engine's forwards do (metadata is uploaded before a forward's first kernel).
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/tensor.h"
#include "dspark/ops/norm.h"

namespace dspark {

// QkvPrologueArgs (backend/op_params.h) holds the fused QKV output, the head counts, the optional
// norm weights, positions, RoPE inverse frequencies, slots, the layer's pages and the outputs.
Tensor qkv_prologue(Context& ctx, const QkvPrologueArgs& a);

}  // namespace dspark
