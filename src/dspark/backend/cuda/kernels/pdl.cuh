// Programmatic dependent launch (Hopper, sm_90+; private to backend/cuda/kernels): a kernel
// launched with launch_pdl() may start while the kernel before it in the stream is still running,
// from the moment that kernel calls pdl_launch_dependents() (or exits). The rules that keep it
// exact:
//  - a PDL kernel calls pdl_wait() before it reads anything the previous kernels write, and
//    before it calls pdl_launch_dependents() itself; what it reads before the wait must have been
//    written before the previous kernel started (e.g. metadata uploaded ahead of the forward);
//  - pdl_wait() returns once the previous kernel has completed and its writes are visible.
// The launch overlaps with the previous kernel's tail, instead of starting after it; inside a
// captured graph the dependency becomes a programmatic edge. Off on GPUs before sm_90 and when the
// environment has DSPARK_CUDA_PDL=0 (then launch_pdl is a plain launch and the device calls do
// nothing).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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
  static const bool env_on = env_switch("DSPARK_CUDA_PDL", true);
  return env_on && compute_major() >= 9;
}

// After cuBLASLt (session 16): linear's cuBLASLt kernels do not all trigger their dependents early,
// and in traced verify forwards a programmatic dependent of one started 0.7-0.9 us after it ended,
// where a plain launch after a kernel starts ~0.45 us after it. So the first launch_pdl after a
// cuBLASLt GEMM of linear on the same host thread (note_cublaslt_launch) is a plain launch: the
// kernel's pdl_wait and pdl_launch_dependents then do nothing. DSPARK_PDL_AFTER_LT=1 (read once)
// keeps programmatic launches there too (the previous behaviour, for A/B measurements).
inline bool& launched_cublaslt_last() {
  static thread_local bool last = false;
  return last;
}
inline void note_cublaslt_launch() {
  launched_cublaslt_last() = true;
}
inline bool pdl_after_cublaslt() {
  static const bool on = env_switch("DSPARK_PDL_AFTER_LT", false);
  return on;
}

// The exception (session 18): qkv_prologue stays a programmatic dependent of the q/k/v GEMM before
// it. Session 16's traces had it start 0.03-0.16 us after that GEMM (`..._64x24_..._4x1`, which
// triggers its dependents early) as a programmatic dependent, and a plain launch adds ~0.3 us.
// A launcher that wants this holds a ProgrammaticAfterCublasLt around its launch_pdl;
// DSPARK_PROLOGUE_PDL_AFTER_LT=0 (read once) makes that launch plain too, for A/B measurements.
// SwiGLU after the gate/up GEMM (session 19, opt-in: DSPARK_SWIGLU_PDL_AFTER_LT=1, read once)
// holds one with that switch.
inline bool& programmatic_after_cublaslt_here() {
  static thread_local bool here = false;
  return here;
}
inline bool prologue_pdl_after_cublaslt() {
  static const bool on = env_switch("DSPARK_PROLOGUE_PDL_AFTER_LT", true);
  return on;
}
inline bool swiglu_pdl_after_cublaslt() {
  static const bool on = env_switch("DSPARK_SWIGLU_PDL_AFTER_LT", false);
  return on;
}
class ProgrammaticAfterCublasLt {
 public:
  // on: whether the launch in scope is a programmatic dependent of a cuBLASLt GEMM before it.
  explicit ProgrammaticAfterCublasLt(bool on = prologue_pdl_after_cublaslt())
      : previous_(programmatic_after_cublaslt_here()) {
    programmatic_after_cublaslt_here() = on;
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
  return pdl_enabled() &&
         (!launched_cublaslt_last() || pdl_after_cublaslt() || programmatic_after_cublaslt_here());
}

// The shared-memory carveout launch_pdl asks for, in percent of the SM's maximum: an opt-in
// measurement switch (session 18). An SM runs CTAs of one carveout at a time, so a kernel whose
// CTAs ask for another carveout than those still resident there cannot start on that SM before it
// drains; the idea was to keep every SM at the largest carveout (cuBLASLt's GEMMs and the
// attention take it) so that programmatic dependents start early. Measured on the H200
// (DSPARK_SMEM_CARVEOUT=100 against the default, one call): verify 16 5.116 -> 5.096 ms, but the
// graphed decode step 4.415 -> 4.924 ms (the one-row kernels lose their L1), so the default is
// the driver's choice (no attribute: the launches as before). DSPARK_SMEM_CARVEOUT=N (0-100, read
// once) asks for N percent.
// DSPARK_SMEM_CARVEOUT_AFTER_LT=1 (read once) limits that request to the first launch after one of
// linear's cuBLASLt GEMMs (note_cublaslt_launch: in a verify forward qkv_prologue, the norms and
// SwiGLU), leaving the one-row kernels of decode steps at the driver's choice; not yet measured.
inline bool smem_carveout_after_cublaslt_only() {
  static const bool on = env_switch("DSPARK_SMEM_CARVEOUT_AFTER_LT", false);
  return on;
}
inline int smem_carveout() {
  static const int value = [] {
    const char* v = std::getenv("DSPARK_SMEM_CARVEOUT");
    if (v == nullptr || *v == '\0' || std::strcmp(v, "off") == 0) return -1;  // the driver's
    return std::clamp(std::atoi(v), 0, 100);
  }();
  return value;
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
  cudaLaunchAttribute attrs[3] = {};
  unsigned n = 0;
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n++].val.programmaticStreamSerializationAllowed = next_launch_programmatic() ? 1 : 0;
  const bool after_cublaslt = launched_cublaslt_last();
  launched_cublaslt_last() = false;
  if (smem_carveout() >= 0 && (after_cublaslt || !smem_carveout_after_cublaslt_only())) {
    attrs[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attrs[n++].val.sharedMemCarveout = static_cast<unsigned>(smem_carveout());
  }
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
