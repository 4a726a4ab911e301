// CTAs per row of the CUDA add_rms_norm one-pass kernel for one test (cuda::set_norm_cluster_ctas,
// backend/cuda/kernels.h), and whether programmatic launches take them too
// (cuda::set_norm_cluster_programmatic); the previous settings come back at the end.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "dspark/backend/cuda/kernels.h"

namespace dspark::test {

// Whether the device takes the clusters at all (compute capability 9:
// backend/cuda/kernels/norm.cu).
inline bool norm_clusters_supported() {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess)
    ADD_FAILURE() << "cudaDeviceGetAttribute failed";
  return major == 9;
}

class ScopedNormCluster {
 public:
  ScopedNormCluster(int ctas, bool programmatic) {
    cuda::set_norm_cluster_ctas(ctas);
    cuda::set_norm_cluster_programmatic(programmatic);
  }
  ~ScopedNormCluster() {
    cuda::set_norm_cluster_ctas(previous_);
    cuda::set_norm_cluster_programmatic(previous_programmatic_);
  }
  ScopedNormCluster(const ScopedNormCluster&) = delete;
  ScopedNormCluster& operator=(const ScopedNormCluster&) = delete;

 private:
  const int previous_ = cuda::norm_cluster_ctas();
  const bool previous_programmatic_ = cuda::norm_cluster_programmatic();
};

}  // namespace dspark::test
