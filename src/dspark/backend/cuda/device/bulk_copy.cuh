// Bulk copies global -> shared by the copy engine of sm_90 (cp.async.bulk), with completion on a
// shared-memory mbarrier: one thread issues a whole contiguous range (16-byte aligned, a multiple
// of 16 bytes) where cp.async needs an instruction per 16 bytes from every lane. Only for device
// code compiled for compute capability 9.0 and above; callers keep a cp.async path for the rest.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace dspark::cuda::device {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// A barrier at shared-space address `bar` (8 bytes, 8-byte aligned) expecting `count` arrivals
// per phase. Before the async proxy may complete transactions on it, the initialising thread
// runs mbar_init_fence().
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Orders this thread's earlier generic-proxy accesses of shared memory (and those of the threads
// it synchronised with) before its later async-proxy ones: a slot read by ld.shared can then be
// refilled by a bulk copy.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// One arrival on `bar` that also expects `bytes` of transactions in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from gmem to the shared-space
// address dst; their arrival completes that many transactions on `bar`. Weights stream past L1.
__device__ __forceinline__ void bulk_copy_g2s(unsigned dst, const void* gmem, unsigned bytes,
                                              unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(gmem), "r"(bytes), "r"(bar)
      : "memory");
}

// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n"
      " .reg .pred done;\n"
      " WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

#endif

}  // namespace dspark::cuda::device
