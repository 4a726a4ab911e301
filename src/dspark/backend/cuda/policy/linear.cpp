#include "dspark/backend/cuda/policy/linear.h"

#include "dspark/backend/cuda/policy/common.h"

namespace dspark::cuda {

using policy_detail::is_16bit;

LinearKernel choose_linear(const LinearShape& s, const Tuning& t) {
  if (t.batch_invariant) {
    const bool fits = is_16bit(s.x) && s.w == s.x && (s.y == DType::f32 || s.y == s.x) &&
                      s.aligned && s.k > 0 && s.k % 16 == 0 && s.n >= 1;
    return fits ? LinearKernel::invariant : LinearKernel::cublaslt;
  }
  const bool fits = s.m == 1 && is_16bit(s.x) && s.w == s.x && (s.y == DType::f32 || s.y == s.x) &&
                    s.aligned && s.k > 0 && s.k % 8 == 0 && s.k <= kOneRowMaxK && s.n >= 1 &&
                    s.n <= kOneRowMaxN;
  if (!fits) return LinearKernel::cublaslt;
  const bool half = s.n <= t.one_row_half_ctas_max_n && s.k <= kOneRowMaxK / 2;
  return half ? LinearKernel::one_row_half : LinearKernel::one_row;
}

int choose_linear_norm_splits(const LinearShape& s, bool w_contiguous, bool norm_fits,
                              int64_t partial_bytes, const Tuning& t) {
  const int splits =
      t.linear_norm_splits < kLinearNormMaxSplits ? t.linear_norm_splits : kLinearNormMaxSplits;
  if (t.batch_invariant || splits < 2 || s.m < 2 || s.m > t.linear_norm_max_rows || !norm_fits)
    return 0;
  if (!is_16bit(s.x) || s.w != s.x || !w_contiguous) return 0;
  if (s.k < 8 * splits || s.k % (8 * splits) != 0 || s.n % 4 != 0) return 0;
  if (splits * s.m * s.n * static_cast<int64_t>(sizeof(float)) > partial_bytes) return 0;
  return splits;
}

}  // namespace dspark::cuda
