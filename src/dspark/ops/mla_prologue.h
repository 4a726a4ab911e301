// The attention prologue of a multi-head latent attention layer (model/mla.h), after its input and
// query projections: per token, the cached latent row [rms_norm(c_kv) * kv_norm, rope(k_rope)]
// goes into the paged cache at `slots` (slot < 0: padding, not written; CUDA only - the CPU's
// kv_write refuses it), and the queries' rotated features into q_out = rope(q_rope).
// Defined as, and on the CPU computed by, the unfused ops: rms_norm of c_kv and a copy of k_rope
// into `latent`, rope of its k_rope part, kv_write of the row; a copy of q_rope into q_out, rope
// of it. Values are rounded to kv's dtype where those ops store them. On CUDA one kernel does it
// all (one launch instead of six) when the pages hold exactly the latent row, rope <= 256 and the
// rotation covers all of it; other shapes run the unfused ops there too. That kernel reads
// `positions` and `slots` before the kernel that precedes it in the stream has finished
// (programmatic dependent launch): they must have been written before that kernel started, as
// the engine's forwards do.
#pragma once

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"

namespace dspark {

// MlaPrologueArgs (backend/op_params.h): the latent's columns of the input projection, its norm,
// the queries' rotated features, positions, RoPE inverse frequencies, slots, the layer's pages
// and the outputs.
void mla_prologue(Context& ctx, const MlaPrologueArgs& a);

}  // namespace dspark
