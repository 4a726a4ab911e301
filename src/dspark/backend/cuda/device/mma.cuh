// Tensor-core building blocks shared by the hand-written kernels (small-M linear, attention):
// the m16n8k16 MMA with f32 accumulation for bf16 / f16 operands, two floats packed into one
// 32-bit operand register, and 16-byte asynchronous copies global -> shared (cp.async, sm_80+).
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, c = lane % 4; a register holds two consecutive
// k, the lower k in its low half):
//   A (16 x 16, row-major): a0 = (row g, k 2c..2c+1), a1 = (row g+8, k 2c..), a2 = (row g,
//   k 2c+8..), a3 = (row g+8, k 2c+8..);  B (16 x 8): b0 = (k 2c..2c+1, col g), b1 = (k 2c+8..,
//   col g);  C / D (16 x 8, f32): d0, d1 = (row g, cols 2c, 2c+1), d2, d3 = (row g+8, same cols).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace dspark::cuda::device {

// d += a . b, m16n8k16, f32 accumulation; T is __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T (nearest even) in one register: `lo` in the low half (the lower k).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    static_assert(sizeof(v) == sizeof(r));
    __builtin_memcpy(&r, &v, sizeof(r));
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    static_assert(sizeof(v) == sizeof(r));
    __builtin_memcpy(&r, &v, sizeof(r));
  }
  return r;
}

// Four 8x8 matrices of 16-bit elements from shared memory (ldmatrix; _at: from a shared-space
// address): lanes 8j .. 8j + 7 give the addresses of matrix j's 8 rows (16 contiguous bytes each),
// and lane (g = lane / 4, c = lane % 4) receives in r[j] the elements (row g, columns 2c and
// 2c + 1), the lower column in the low half: m16n8k16 A fragments (rows = M) or B fragments
// (rows = N).
__device__ __forceinline__ void ldmatrix_x4_at(uint32_t (&r)[4], unsigned smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  ldmatrix_x4_at(r, static_cast<unsigned>(__cvta_generic_to_shared(row)));
}

// Four 8x8 matrices of 16-bit elements from shared memory, transposed (ldmatrix .trans): lanes
// 8j .. 8j + 7 give the addresses of matrix j's 8 rows (16 contiguous bytes each), and lane
// (g = lane / 4, c = lane % 4) receives in r[j] the elements (row 2c, column g) in the low half and
// (row 2c + 1, column g) in the high half: an m16n8k16 B fragment pair when the rows are keys.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// 16 bytes global -> shared without passing through registers (L2 only: .cg).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
// cp_async16 to a shared-space address.
__device__ __forceinline__ void cp_async16_at(unsigned smem_address, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_address), "l"(gmem)
               : "memory");
}
// cp_async16 under a predicate, branch-free: when `issue`, the first `src_bytes` (0 or 16) bytes
// come from gmem and the rest of the 16 are zeros (src_bytes 0: zeros, gmem not read but still a
// valid, aligned address); when !issue, nothing.
__device__ __forceinline__ void cp_async16_if(void* smem, const void* gmem, int src_bytes,
                                              bool issue) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " setp.ne.b32 p, %3, 0;\n"
      " @p cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
      "}\n" ::"r"(s),
      "l"(gmem), "r"(src_bytes), "r"(static_cast<int>(issue))
      : "memory");
}
// 16 bytes global -> shared, of which the first `src_bytes` (0..16) are read and the rest are
// zeros (src_bytes 0: gmem not read but still a valid, aligned address); the bytes stay out of L1
// (.cg) and L2 fetches 256 bytes at a time: for streams read once, such as weights.
__device__ __forceinline__ void cp_async16_stream(void* smem, const void* gmem, int src_bytes) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
// cp_async16_stream of the 16-byte chunks v = first, first + step, ... < n of the bytes from offset
// a0 (a multiple of 16) of the `w_bytes`-long global array `w`, to dst + 16 v; the chunks at its
// end read only its bytes (zeros for the rest; none at all past it).
__device__ __forceinline__ void cp_async16_stream_chunks(uint8_t* dst, const uint8_t* w,
                                                         int64_t w_bytes, int64_t a0, int n,
                                                         int first, int step) {
  const uint8_t* src = w + a0;
  if (a0 + 16 * int64_t{n} <= w_bytes) {
    for (int v = first; v < n; v += step) cp_async16_stream(dst + 16 * v, src + 16 * v, 16);
  } else {
    for (int v = first; v < n; v += step) {
      const int64_t left = w_bytes - (a0 + 16 * v);
      const int bytes = left >= 16 ? 16 : static_cast<int>(left > 0 ? left : 0);
      cp_async16_stream(dst + 16 * v, bytes > 0 ? src + 16 * v : w, bytes);
    }
  }
}
// cp_async16_stream of all 16 bytes to a shared-memory address (__cvta_generic_to_shared).
__device__ __forceinline__ void cp_async16_stream_at(unsigned smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, 16;" ::"r"(smem), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace dspark::cuda::device
