// CTAs per row of the CUDA add_rms_norm one-pass kernel for one test (cuda::set_norm_cluster_ctas,
// backend/cuda/kernels.h); the previous setting comes back at the end.
#pragma once

#include "dspark/backend/cuda/kernels.h"

namespace dspark::test {

class ScopedNormCluster {
 public:
  explicit ScopedNormCluster(int ctas) { cuda::set_norm_cluster_ctas(ctas); }
  ~ScopedNormCluster() { cuda::set_norm_cluster_ctas(previous_); }
  ScopedNormCluster(const ScopedNormCluster&) = delete;
  ScopedNormCluster& operator=(const ScopedNormCluster&) = delete;

 private:
  const int previous_ = cuda::norm_cluster_ctas();
};

}  // namespace dspark::test
