#include "dspark/backend/cuda/policy/norm.h"

namespace dspark::cuda {

NormPlan choose_add_rms_norm(int64_t rows, int64_t vectors, bool vectorized, bool f32_rows,
                             bool programmatic, const DeviceCaps& caps, const Tuning& t) {
  NormPlan plan;
  if (!vectorized || vectors <= 0) return plan;
  const int64_t per_thread = (vectors + kNormRowThreads - 1) / kNormRowThreads;
  if (per_thread > 4) return plan;
  plan.vectors_per_thread = static_cast<int>(per_thread);
  // A cluster of CTAs per row: sm_90 only (other GPUs run the compute_80 PTX, which has none).
  const int ctas = t.norm_cluster_ctas >= 8   ? 8
                   : t.norm_cluster_ctas >= 4 ? 4
                   : t.norm_cluster_ctas >= 2 ? 2
                                              : 1;
  if (ctas > 1 && !t.batch_invariant && f32_rows &&
      (!programmatic || t.norm_cluster_programmatic) && rows <= kNormClusterMaxRows &&
      caps.compute_major == 9 && (vectors + ctas - 1) / ctas <= 1024)
    plan.cluster_ctas = ctas;
  return plan;
}

}  // namespace dspark::cuda
