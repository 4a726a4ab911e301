// Hopper's tensor memory accelerator (TMA, sm_90): 2-D tile copies global -> shared described by
// a tensor map (CUtensorMap, encoded on the host: kernels/gemv_streamk.cu), completed on
// a shared-memory mbarrier that counts the bytes that have landed. Used by the stream-K linear
// kernel (kernels/gemv_streamk.cu). Each call here compiles to nothing useful below sm_90: the
// callers launch their TMA path on sm_90 only.
//
// Phases: an mbarrier initialised with count n completes a phase when n arrivals (arrive, or
// arrive_expect_tx, which also announces bytes to come) have happened and every announced byte
// has landed; a thread waits for the phase of parity (use count & 1) of a barrier that it and the
// issuing thread use in the same order.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dspark::cuda::device {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
#endif
}

// Makes the barriers' initialisation visible to the async proxy (before any TMA copy uses them).
__device__ __forceinline__ void fence_barrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The barrier's one arrival of this phase, announcing `bytes` of copies that complete on it.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#endif
}

// One plain arrival on the barrier (a consumer releasing a stage to its producer).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
#endif
}

// Waits until the phase of parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

// Copies the box at element coordinates (x: innermost, y) of `map` into shared memory at `dst`
// (1024-byte aligned for the 128-byte swizzle), completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y,
                                            uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
#endif
}

// Fetches the tensor map (kernel parameter space) into the TMA unit's cache ahead of its first use.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

}  // namespace dspark::cuda::device
