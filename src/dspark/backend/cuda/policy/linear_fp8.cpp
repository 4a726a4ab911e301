#include "dspark/backend/cuda/policy/linear_fp8.h"

namespace dspark::cuda {

Fp8Kernel choose_linear_fp8(int64_t m, int64_t n, int64_t k, const DeviceCaps& caps,
                            bool m_invariant) {
  constexpr int64_t kRowTile = 16;  // weight rows per tile
  if (m > 16) return Fp8Kernel::tile;
  if (k <= kFp8RegistersMaxK && !m_invariant) return Fp8Kernel::registers;
  if (m <= 8) return Fp8Kernel::stream4;
  const int64_t slots = 2 * static_cast<int64_t>(caps.sm_count);
  if (n >= 2 * kRowTile * slots) return Fp8Kernel::stream2_tiles2;
  return n <= kRowTile * slots ? Fp8Kernel::stream2 : Fp8Kernel::tile;
}

}  // namespace dspark::cuda
