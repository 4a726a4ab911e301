// The block-sum formats (every block format; quant_gemm.h) on weights in the interleaved layout
// (quant_pack.h), for AVX2 + FMA + F16C and for AVX-512 VNNI + VL + DQ (256-bit vectors, except
// the Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K tiles of two groups, which take 512-bit ones: Zen 4 runs
// those as two halves, Sapphire Rapids at full width, where a verify of 4-8 rows gets 10-20%
// faster). The library is built for baseline x86-64, so the kernels carry target attributes and run
// only after quant_gemm_has_avx2() / quant_gemm_has_avx512() said yes. The tiles:
// quant_gemm_x8_impl.h.
#include "dspark/backend/cpu/kernels/quant_gemm_detail.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace dspark::cpu::quant_gemm_detail {

#define X8_NS x8_avx2
#define X8_TARGET __attribute__((target("avx2,fma,f16c")))
#define X8_INLINE __attribute__((target("avx2,fma,f16c"), always_inline))
#define X8_VNNI 0
#include "dspark/backend/cpu/kernels/quant_gemm_x8_impl.h"
#undef X8_NS
#undef X8_TARGET
#undef X8_INLINE
#undef X8_VNNI

#define X8_NS x8_avx512
#define X8_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define X8_INLINE                                                                       \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"), \
                 always_inline))
#define X8_VNNI 1
#include "dspark/backend/cpu/kernels/quant_gemm_x8_impl.h"
#undef X8_NS
#undef X8_TARGET
#undef X8_INLINE
#undef X8_VNNI

void block_x8(QuantType type, bool avx512, const XBlocks& x, int64_t m, const uint8_t* const* g,
              int64_t groups, float* out) {
  if (avx512) return x8_avx512::block_x8_isa(type, x, m, g, groups, out);
  x8_avx2::block_x8_isa(type, x, m, g, groups, out);
}

}  // namespace dspark::cpu::quant_gemm_detail

#endif  // __x86_64__
