// Programmatic dependent launch (Hopper, sm_90+; private to backend/cuda/kernels): a kernel
// launched with launch_pdl() may start while the kernel before it in the stream is still running,
// from the moment that kernel calls pdl_launch_dependents() (or exits). The rules that keep it
// exact:
//  - a PDL kernel calls pdl_wait() before it reads anything the previous kernels write, and
//    before it calls pdl_launch_dependents() itself; what it reads before the wait must have been
//    written before the previous kernel started (e.g. metadata uploaded ahead of the forward);
//  - pdl_wait() returns once the previous kernel has completed and its writes are visible.
// The exception: a short kernel between two longer ones may trigger its dependents before its own
// wait (qkv_prologue, add_rms_norm's one-pass kernel), so that the next kernel's pre-wait loads
// (weights, metadata, cached K/V) overlap the kernel before it. The dependent's wait still returns
// only after the early-triggering grid has completed, but the dependent may start before that
// grid's predecessor has: what it reads before its wait must have been written before that
// predecessor started, and that predecessor must trigger only after its own wait (two early
// triggers in a row would let the dependent start before the kernel three back has completed).
// The launch overlaps with the previous kernel's tail, instead of starting after it; inside a
// captured graph the dependency becomes a programmatic edge. Off on GPUs before sm_90 and when the
// environment has DSPARK_CUDA_PDL=0, a kill switch (then launch_pdl is a plain launch and the
// device calls do nothing).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launch_pdl asks for programmatic serialisation on the current device.
inline bool pdl_enabled() {
  static const bool env_on = [] {
    const char* env = std::getenv("DSPARK_CUDA_PDL");
    return env == nullptr || env[0] != '0';
  }();
  return env_on && compute_major() >= 9;
}

// After cuBLASLt: linear's cuBLASLt kernels do not all trigger their dependents early, and in
// traced verify forwards a programmatic dependent of one started 0.7-0.9 us after it ended, where
// a plain launch after a kernel starts ~0.45 us after it. So the first launch_pdl after a cuBLASLt
// GEMM of linear on the same host thread (note_cublaslt_launch) is a plain launch: the kernel's
// pdl_wait and pdl_launch_dependents then do nothing.
inline bool& launched_cublaslt_last() {
  static thread_local bool last = false;
  return last;
}
inline void note_cublaslt_launch() {
  launched_cublaslt_last() = true;
}

// The exception: qkv_prologue stays a programmatic dependent of the q/k/v GEMM before it. That
// GEMM's kernel triggers its dependents early, and traces had the prologue start 0.03-0.16 us
// after it as a programmatic dependent, where a plain launch adds ~0.3 us. A launcher that wants
// this holds a ProgrammaticAfterCublasLt around its launch_pdl.
inline bool& programmatic_after_cublaslt_here() {
  static thread_local bool here = false;
  return here;
}
class ProgrammaticAfterCublasLt {
 public:
  ProgrammaticAfterCublasLt() : previous_(programmatic_after_cublaslt_here()) {
    programmatic_after_cublaslt_here() = true;
  }
  ~ProgrammaticAfterCublasLt() { programmatic_after_cublaslt_here() = previous_; }
  ProgrammaticAfterCublasLt(const ProgrammaticAfterCublasLt&) = delete;
  ProgrammaticAfterCublasLt& operator=(const ProgrammaticAfterCublasLt&) = delete;

 private:
  bool previous_;
};
// Whether the next launch_pdl on this host thread will be a programmatic one (it consumes the
// note above; this does not).
inline bool next_launch_programmatic() {
  return pdl_enabled() && (!launched_cublaslt_last() || programmatic_after_cublaslt_here());
}

// launch_pdl with the grid's CTAs grouped into thread-block clusters of `cluster` CTAs (sm_90;
// each dimension divides the grid's); a cluster of {1, 1, 1} is a plain launch_pdl.
template <typename... Params, typename... Args>
void launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                        cudaStream_t stream, dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  unsigned n = 0;
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n++].val.programmaticStreamSerializationAllowed = next_launch_programmatic() ? 1 : 0;
  launched_cublaslt_last() = false;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = cluster.x;
    attrs[n].val.clusterDim.y = cluster.y;
    attrs[n++].val.clusterDim.z = cluster.z;
  }
  config.attrs = attrs;
  config.numAttrs = n;
  DSPARK_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_cluster(kernel, grid, block, smem, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace dspark::cuda
