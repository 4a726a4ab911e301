// Which kernel runs linear_fp8 on CUDA (kernels/gemv_fp8.cu): a pure function of the launch's
// rows (x is taken 64 rows per launch), N, K and the multiprocessor count. Host-only.
#pragma once

#include <cstdint>

#include "dspark/backend/cuda/policy/device.h"

namespace dspark::cuda {

// The deepest K of the x-in-registers kernel (16 warps x 4 chunks of 64).
inline constexpr int64_t kFp8RegistersMaxK = 4096;

enum class Fp8Kernel {
  tile,            // one CTA per 16 weight rows
  registers,       // x in registers, a persistent grid (M <= 16, K <= kFp8RegistersMaxK)
  stream4,         // the stream kernel, 4 chunks per pipeline stage, one row tile per step
  stream2,         // the stream kernel, 2 chunks per stage
  stream2_tiles2,  // the stream kernel, 2 chunks per stage, two row tiles per step
};

// For a launch of m rows (1..64) of x: with M <= 16, the x-in-registers kernel where K fits
// (86-95% of the copy bandwidth at M 1..8 on the H200, where the stream kernel reaches 79-84%),
// else for M <= 8 the stream kernel with stages of 4, else (M 9..16, where x's loads keep L1 busy)
// stages of 2 over two row tiles when every CTA slot (two per multiprocessor) still gets a block,
// stages of 2 when every row tile gets its own slot, else the tile kernel; the tile kernel for
// M > 16. `m_invariant` (a target's block-scaled weights): never the x-in-registers kernel, whose
// split of K differs from the others', so that a row's bits do not depend on M up to 64 (verify
// rows equal decode rows).
Fp8Kernel choose_linear_fp8(int64_t m, int64_t n, int64_t k, const DeviceCaps& caps,
                            bool m_invariant = false);

}  // namespace dspark::cuda
