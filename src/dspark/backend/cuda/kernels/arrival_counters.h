// Arrival counters for kernels whose last CTA to finish a piece of work merges it (the Markov
// step's argmax chunks, the attention's key splits; the Markov loop's grid barrier): each CTA of a
// piece adds 1 to the piece's counter after writing its partial result; the one that sees count - 1
// merges and sets the counter back to 0, so the buffer is all zeros between launches. Private to
// backend/cuda/kernels.
#pragma once

#include <cstddef>

#include "dspark/backend/context.h"

namespace dspark::cuda {

// One buffer per kernel family (two families never share a counter): linear_quant counts the K
// slices of the quantized linear's row groups (linear_quant.cu).
enum class ArrivalPool { markov_step, attention_merge, markov_loop, linear_quant, count };

// The zeroed counters of `pool` on ctx's device: `n` of them, allocated on first use and kept for
// the process (a captured graph keeps the address; `n` must be the same on every call of a
// pool). Returns nullptr when that first use falls inside a graph capture, where no memory may
// be allocated: the caller then takes its path without counters. A kernel using them assumes
// one stream at a time on the device (the engine's model).
unsigned* arrival_counters(const Context& ctx, ArrivalPool pool, size_t n);

}  // namespace dspark::cuda
