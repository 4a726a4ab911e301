// Synchronisation between the CTAs of a grid: the arrival on a counter that the kernels whose last
// CTA merges a piece of work use (kernels/arrival_counters.h: the attention's key splits, the
// stream-K linear's partial tiles).
#pragma once

#include <cuda_runtime.h>

namespace dspark::cuda::device {

// `a += 1` at GPU scope with acquire-release semantics, by one thread after a barrier: releases
// the writes of the whole CTA (the barrier orders them before it) and acquires those of the CTAs
// that added before (what cooperative groups' grid sync and CUTLASS's semaphores rely on).
// Returns the value before the addition.
__device__ __forceinline__ unsigned atomic_inc_acq_rel(unsigned* a) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(a) : "memory");
  return old;
}

}  // namespace dspark::cuda::device
