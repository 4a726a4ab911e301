// Hopper's warpgroup MMA (wgmma, sm_90a): D[64 x N] (f32, registers) += A[64 x 16] . B[16 x N]
// with both operands in shared memory, read through matrix descriptors, issued asynchronously by
// the 4 warps of a warpgroup together. Used by the stream-K linear kernel
// (kernels/gemv_streamk.cu). Every call compiles to nothing except for sm_90a (the only machine
// code with wgmma): callers launch their wgmma path on compute capability 9.0 only.
//
//  - Operands: K-major tiles (rows of 64 16-bit elements = 128 bytes, as a TMA box of 64 columns
//    writes them with the 128-byte swizzle), 1024-byte aligned; desc_sw128(address + 32 s) is the
//    tile's k16 step s (0-3). A = 64 rows (M), B = N rows (N = 8 .. 48).
//  - Accumulators: warp w of the warpgroup holds rows 16 w .. 16 w + 15; lane (g = lane / 4,
//    c = lane % 4) holds, for column block j (8 columns), d[4 j + 0, 1] = (row g, columns 8 j + 2c,
//    + 1) and d[4 j + 2, 3] = (row g + 8, the same columns): mma.m16n8's C layout (mma.cuh).
//  - Order: fence() before the first MMA of a batch (after the accumulators were written by other
//    instructions), commit() after the batch, wait<0>() before the accumulators are read or the
//    operands overwritten, then hold(d) so that the compiler reads them only after the wait.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace dspark::cuda::device::wgmma {

// The descriptor of a K-major, 128-byte-swizzled tile at shared address `addr`: start address
// (bits 0-13, in 16 bytes), leading offset 16 bytes (unused by this layout), stride offset 1024
// bytes between 8-row groups (bits 32-45), base offset 0 (bits 49-51: 1024-byte aligned tiles),
// layout 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ uint64_t desc_sw128(unsigned addr) {
  return (static_cast<uint64_t>(addr & 0x3FFFF) >> 4) | (uint64_t{16 >> 4} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

// Waits until at most N committed batches of this warp are still in flight.
template <int N>
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

// Ties the accumulators to this point: after wait(), the compiler may not read them earlier.
template <int R>
__device__ __forceinline__ void hold(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// m64nNk16 with f32 accumulation, T = __nv_bfloat16 or __half; d has N / 2 floats per thread.
template <int N>
struct Wgmma;

// clang-format off
// One wgmma for the dtype string TY ("bf16" / "f16"); REGS: the accumulators' operand list,
// IA / IB / IP: the operand numbers of the descriptors and of the scale-d flag (always 1: add).
#define DSPARK_WGMMA_ASM(TY, N, REGS, IA, IB, IP, ...)                                       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IP ", 0;\n"                              \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, %" IA \
               ", %" IB ", p, 1, 1, 0, 0;\n}\n"                                               \
               : __VA_ARGS__                                                                 \
               : "l"(a), "l"(b), "r"(1))
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSPARK_WGMMA_BODY(N, REGS, IA, IB, IP, ...)           \
  if constexpr (std::is_same_v<T, __nv_bfloat16>)             \
    DSPARK_WGMMA_ASM("bf16", N, REGS, IA, IB, IP, __VA_ARGS__); \
  else                                                        \
    DSPARK_WGMMA_ASM("f16", N, REGS, IA, IB, IP, __VA_ARGS__);
#else
#define DSPARK_WGMMA_BODY(N, REGS, IA, IB, IP, ...)
#endif
#define DSPARK_WGMMA_M64N(N, REGS, IA, IB, IP, ...)                                      \
  template <>                                                                           \
  struct Wgmma<N> {                                                                     \
    template <typename T>                                                               \
    static __device__ __forceinline__ void run(float(&d)[N / 2], uint64_t a, uint64_t b) { \
      DSPARK_WGMMA_BODY(N, REGS, IA, IB, IP, __VA_ARGS__)                               \
    }                                                                                   \
  };

DSPARK_WGMMA_M64N(8,
                  "%0, %1, %2, %3",
                  "4", "5", "6",
                  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]))
DSPARK_WGMMA_M64N(16,
                  "%0, %1, %2, %3, %4, %5, %6, %7",
                  "8", "9", "10",
                  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                  "+f"(d[6]), "+f"(d[7]))
DSPARK_WGMMA_M64N(24,
                  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11",
                  "12", "13", "14",
                  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]))
DSPARK_WGMMA_M64N(32,
                  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15",
                  "16", "17", "18",
                  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]))
DSPARK_WGMMA_M64N(40,
                  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                  "%18, %19",
                  "20", "21", "22",
                  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                  "+f"(d[18]), "+f"(d[19]))
DSPARK_WGMMA_M64N(48,
                  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                  "%18, %19, %20, %21, %22, %23",
                  "24", "25", "26",
                  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                  "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]))
// clang-format on

#undef DSPARK_WGMMA_M64N
#undef DSPARK_WGMMA_BODY
#undef DSPARK_WGMMA_ASM

// d += A . B for a 64 x 16 A tile and an N x 16 B tile (descriptors a, b).
template <typename T, int N>
__device__ __forceinline__ void mma(float (&d)[N / 2], uint64_t a, uint64_t b) {
  Wgmma<N>::template run<T>(d, a, b);
}

}  // namespace dspark::cuda::device::wgmma
