// The product with block-quantized weights (contract and arithmetic: quant_gemm.h): the driver
// (x rows rounded to 8-bit blocks once per call, blocks of weight rows spread over the thread pool,
// each in the layout its kernel reads, bias and output dtype), the portable kernels, and the
// run-time choice of the SIMD ones (block sums on interleaved rows: quant_gemm_x8.cpp, AVX2 or
// AVX-512 VNNI; the x rows' rounding: quant_x_rows_avx2.cpp).
//
// The portable kernels decode each weight row once into its integer values and per-unit scales,
// then follow quant_gemm.h's sequence literally (exact integer block sums, std::fma), so their
// results are the SIMD kernels' bit for bit. They are written for clarity, not speed.
#include "dspark/backend/cpu/kernels/quant_gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dspark/backend/cpu/float_io.h"
#include "dspark/backend/cpu/kernels/quant_gemm_detail.h"
#include "dspark/backend/cpu/kernels/quant_pack.h"
#include "dspark/backend/cpu/kernels/small_m_gemm.h"
#include "dspark/core/error.h"
#include "dspark/core/thread_pool.h"

namespace dspark::cpu {
namespace quant_gemm_detail {

void quantize_x_row(const float* v, int64_t k, uint8_t* dst) {
  const int64_t nb = k / 32;
  auto* q = reinterpret_cast<int8_t*>(dst);
  auto* d = reinterpret_cast<float*>(dst + k);
  float* s = d + nb;
  for (int64_t b = 0; b < nb; ++b) {
    const float* x = v + 32 * b;
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      const float a = std::fabs(x[i]);
      finite = finite && a <= 3.402823466e38f;  // false for inf and NaN
      amax = std::max(amax, a);
    }
    int8_t* qb = q + 32 * b;
    int32_t* isum = reinterpret_cast<int32_t*>(d + 2 * nb);
    int32_t* isum16 = isum + nb;
    if (!finite || amax < kTinyXBlock) {
      std::fill(qb, qb + 32, int8_t{0});
      d[b] = s[b] = finite ? 0.0f : std::nanf("");
      isum[b] = isum16[b] = 0;
      continue;
    }
    const float inv = 127.0f / amax;
    int sum = 0, sum16 = 0;
    for (int i = 0; i < 32; ++i) {
      // Round to nearest, ties to even, for |t| <= 127.5 (< 2^22): the float addition rounds.
      const float t = x[i] * inv;
      const float r = (t + 12582912.0f) - 12582912.0f;
      const int qi = static_cast<int>(r);
      qb[i] = static_cast<int8_t>(qi);
      sum += qi;
      if (i == 15) sum16 = sum;
    }
    d[b] = amax / 127.0f;
    s[b] = d[b] * static_cast<float>(sum);
    isum[b] = sum;
    isum16[b] = sum16;
  }
}

namespace {

float half(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(f16{bits});
}

// One weight row as integer values and the weight's part of each unit's scale (quant_gemm.h).
struct DecodedRow {
  std::vector<int16_t> q;     // [k] integer values (Q6_K: q - 32; Q8_A: 0..255)
  std::vector<float> scale;   // [k / 32] d_w (legacy, Q6_K) or d_w * sc_u (Q4_K, Q5_K)
  std::vector<float> min;     // [k / 32] m_b (Q4_1, Q5_1) or dmin * m_u (Q4_K, Q5_K)
  std::vector<int8_t> sub16;  // [k / 16] Q6_K's scale of each 16 values
};

// The 5th bits of a Q5_0 / Q5_1 block: bit j of the u32 belongs to element j.
uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void decode_row(QuantType type, const uint8_t* row, int64_t k, DecodedRow& out) {
  const QuantBlock qb = quant_block(type);
  const int64_t nb = k / qb.elements, units = k / 32;
  out.q.resize(static_cast<size_t>(k));
  out.scale.resize(static_cast<size_t>(units));
  out.min.assign(static_cast<size_t>(units), 0.0f);
  out.sub16.assign(static_cast<size_t>(k / 16), 0);
  int16_t* q = out.q.data();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = row + b * qb.bytes;
    int16_t* y = q + b * qb.elements;
    switch (type) {
      case QuantType::q4_0:
      case QuantType::q4_1: {
        const bool with_min = type == QuantType::q4_1;
        const uint8_t* qs = p + (with_min ? 4 : 2);
        const int off = with_min ? 0 : 8;
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<int16_t>((qs[j] & 0x0F) - off);
          y[j + 16] = static_cast<int16_t>((qs[j] >> 4) - off);
        }
        out.scale[b] = half(p);
        if (with_min) out.min[b] = half(p + 2);
        break;
      }
      case QuantType::q5_0:
      case QuantType::q5_1: {
        const bool with_min = type == QuantType::q5_1;
        const uint32_t qh = u32_at(p + (with_min ? 4 : 2));
        const uint8_t* qs = p + (with_min ? 8 : 6);
        const int off = with_min ? 0 : 16;
        for (int j = 0; j < 16; ++j) {
          const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
          const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
          y[j] = static_cast<int16_t>(lo - off);
          y[j + 16] = static_cast<int16_t>(hi - off);
        }
        out.scale[b] = half(p);
        if (with_min) out.min[b] = half(p + 2);
        break;
      }
      case QuantType::q8_0:
        for (int j = 0; j < 32; ++j) y[j] = static_cast<int8_t>(p[2 + j]);
        out.scale[b] = half(p);
        break;
      case QuantType::q8_a:
        for (int j = 0; j < 32; ++j) y[j] = p[4 + j];
        out.scale[b] = half(p);
        out.min[b] = half(p + 2);
        break;
      case QuantType::q4_a64:
      case QuantType::q4_a128:
      case QuantType::q8_a64:
      case QuantType::q8_a128: {
        // Units of 32 values as Q4_1's / Q8_A's, each with the group's d and m.
        const bool nibbles = quant_unit_type(type) == QuantType::q4_1;
        const int64_t per_group = qb.elements / 32;
        for (int64_t u = 0; u < per_group; ++u) {
          int16_t* yu = y + 32 * u;
          if (nibbles) {
            const uint8_t* qs = p + 4 + 16 * u;
            for (int j = 0; j < 16; ++j) {
              yu[j] = static_cast<int16_t>(qs[j] & 0x0F);
              yu[j + 16] = static_cast<int16_t>(qs[j] >> 4);
            }
          } else {
            for (int j = 0; j < 32; ++j) yu[j] = p[4 + 32 * u + j];
          }
          out.scale[per_group * b + u] = half(p);
          out.min[per_group * b + u] = half(p + 2);
        }
        break;
      }
      case QuantType::q4_k:
      case QuantType::q5_k: {
        const bool five = type == QuantType::q5_k;
        const float d = half(p), dmin = half(p + 2);
        uint8_t sm[16];
        k_scales_mins(p + 4, sm);
        const uint8_t* qh = p + 16;
        const uint8_t* qs = p + (five ? 48 : 16);
        for (int g = 0; g < 4; ++g) {
          for (int l = 0; l < 32; ++l) {
            int lo = qs[32 * g + l] & 0x0F, hi = qs[32 * g + l] >> 4;
            if (five) {
              lo |= ((qh[l] >> (2 * g)) & 1) << 4;
              hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            y[64 * g + l] = static_cast<int16_t>(lo);
            y[64 * g + 32 + l] = static_cast<int16_t>(hi);
          }
        }
        for (int u = 0; u < 8; ++u) {
          out.scale[8 * b + u] = d * static_cast<float>(sm[u]);
          out.min[8 * b + u] = dmin * static_cast<float>(sm[8 + u]);
        }
        break;
      }
      case QuantType::q6_k: {
        const uint8_t* ql = p;
        const uint8_t* qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = half(p + 208);
        for (int h = 0; h < 2; ++h) {
          for (int l = 0; l < 32; ++l) {
            const uint8_t lo0 = ql[64 * h + l], lo1 = ql[64 * h + 32 + l], hb = qh[32 * h + l];
            int16_t* yh = y + 128 * h;
            yh[l] = static_cast<int16_t>(((lo0 & 0x0F) | ((hb & 3) << 4)) - 32);
            yh[l + 32] = static_cast<int16_t>(((lo1 & 0x0F) | (((hb >> 2) & 3) << 4)) - 32);
            yh[l + 64] = static_cast<int16_t>(((lo0 >> 4) | (((hb >> 4) & 3) << 4)) - 32);
            yh[l + 96] = static_cast<int16_t>(((lo1 >> 4) | (((hb >> 6) & 3) << 4)) - 32);
          }
        }
        for (int u = 0; u < 8; ++u) out.scale[8 * b + u] = d;
        for (int i = 0; i < 16; ++i) out.sub16[16 * b + i] = sc[i];
        break;
      }
    }
  }
}

// quant_gemm.h's block sums: per block (unit of 32 values) the exact int32 sum of its products,
// scaled into one f32 accumulator.
float dot_row(QuantType type, const DecodedRow& w, const XBlocks& x, int64_t r) {
  const int8_t* xq = x.q(r);
  const float* xd = x.d(r);
  const float* xs = x.s(r);
  const QuantType unit = quant_unit_type(type);
  const bool plus_min =
      unit == QuantType::q4_1 || unit == QuantType::q5_1 || unit == QuantType::q8_a;
  const bool minus_min = type == QuantType::q4_k || type == QuantType::q5_k;
  float acc = 0.0f;
  for (int64_t b = 0; b < x.blocks; ++b) {
    int32_t sum = 0;
    if (type == QuantType::q6_k) {
      int32_t half[2] = {};
      for (int i = 0; i < 32; ++i)
        half[i / 16] += int32_t{w.q[32 * b + i]} * int32_t{xq[32 * b + i]};
      sum = w.sub16[2 * b] * half[0] + w.sub16[2 * b + 1] * half[1];
    } else {
      for (int i = 0; i < 32; ++i) sum += int32_t{w.q[32 * b + i]} * int32_t{xq[32 * b + i]};
    }
    acc = std::fma(w.scale[b] * xd[b], static_cast<float>(sum), acc);
    if (plus_min) acc = std::fma(w.min[b], xs[b], acc);
    if (minus_min) acc = std::fma(-w.min[b], xs[b], acc);
  }
  return acc;
}

}  // namespace

void block_portable(QuantType type, const XBlocks& x, int64_t m, const uint8_t* w,
                    int64_t w_row_bytes, int64_t ncols, float* out) {
  thread_local DecodedRow row;
  const int64_t k = x.blocks * 32;
  for (int64_t j = 0; j < ncols; ++j) {
    decode_row(type, w + j * w_row_bytes, k, row);
    for (int64_t r = 0; r < m; ++r) out[r * kBlockCols + j] = dot_row(type, row, x, r);
  }
}

}  // namespace quant_gemm_detail

namespace {

// The calling thread's x blocks (grow, never shrink; 64-byte aligned).
uint8_t* x_buffer(int64_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  const size_t need = static_cast<size_t>(bytes) + 64;
  if (buffer.size() < need) buffer.resize(need);
  const auto addr = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - addr % 64) % 64);
}

// Per-thread f32 outputs of a block of weight rows (grow, never shrink).
float* out_buffer(int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// Per-thread weight rows re-laid for a kernel (grow, never shrink).
uint8_t* w_buffer(int64_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < bytes) buffer.resize(static_cast<size_t>(bytes));
  return buffer.data();
}

// Weight rows j0 .. j0+ncols-1 of a call, as the kernel of its ISA reads them: the SIMD kernels
// take groups of 8 interleaved rows (pointers in g, `groups` of them), the portable ones plain
// rows (returned). Rows that are not in the needed layout (a plain matrix,
// a packed matrix's last n % 8 rows; or packed rows for the portable kernels) are re-laid into a
// per-thread buffer.
const uint8_t* block_rows(const QuantGemmArgs& a, int64_t row_bytes, bool x8, int64_t j0,
                          int64_t ncols, const uint8_t* (&g)[2], int64_t& groups) {
  const int64_t full = a.packed ? a.n / 8 * 8 : 0;  // rows in interleaved groups
  if (!x8) {
    if (!a.packed || j0 >= full) return a.w + j0 * row_bytes;
    uint8_t* rows = w_buffer(ncols * row_bytes);
    for (int64_t j = 0; j < ncols; ++j)
      unpack_row_x8(a.quant, a.w, a.n, a.k, j0 + j, rows + j * row_bytes);
    return rows;
  }
  groups = (ncols + 7) / 8;
  uint8_t* scratch = nullptr;
  for (int64_t q = 0; q < groups; ++q) {
    const int64_t r0 = j0 + 8 * q;
    if (r0 + 8 <= full) {
      g[q] = a.w + r0 * row_bytes;
      continue;
    }
    if (!scratch) scratch = w_buffer(16 * row_bytes);
    const uint8_t* rows[8];
    for (int r = 0; r < 8; ++r) rows[r] = r0 + r < a.n ? a.w + (r0 + r) * row_bytes : nullptr;
    uint8_t* dst = scratch + 8 * q * row_bytes;
    pack_group_x8(a.quant, rows, a.k, dst);
    g[q] = dst;
  }
  return nullptr;
}

}  // namespace

// The same instructions as the dense small-M kernels need (AVX2, FMA, F16C).
bool quant_gemm_has_avx2() {
  return small_gemm_has_avx2();
}

bool quant_gemm_has_avx512() {
#if defined(__x86_64__)
  static const bool has =
      quant_gemm_has_avx2() && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return has;
#else
  return false;
#endif
}

QuantGemmIsa quant_gemm_default_isa() {
  if (quant_gemm_has_avx512()) return QuantGemmIsa::avx512;
  return quant_gemm_has_avx2() ? QuantGemmIsa::avx2 : QuantGemmIsa::portable;
}

std::string_view quant_gemm_isa_name(QuantGemmIsa isa) {
  switch (isa) {
    case QuantGemmIsa::automatic:
      return "automatic";
    case QuantGemmIsa::portable:
      return "portable";
    case QuantGemmIsa::avx2:
      return "avx2";
    case QuantGemmIsa::avx512:
      return "avx512";
  }
  return "?";
}

void quant_gemm(ThreadPool& pool, const QuantGemmArgs& a, QuantGemmIsa isa) {
  const QuantGemmProblem one{a.x, a.w, a.y, a.m};
  quant_gemm_grouped(pool, a, std::span<const QuantGemmProblem>(&one, 1), isa);
}

void quant_gemm_grouped(ThreadPool& pool, const QuantGemmArgs& shared,
                        std::span<const QuantGemmProblem> problems, QuantGemmIsa isa) {
  namespace d = quant_gemm_detail;
  const QuantBlock qb = quant_block(shared.quant);
  const int64_t n = shared.n, k = shared.k;
  int64_t rows = 0, max_m = 0;
  for (const QuantGemmProblem& p : problems) {
    DSPARK_CHECK(p.m >= 0, "quant_gemm: negative size m={}", p.m);
    DSPARK_CHECK(p.m <= 1 || shared.ldx >= k, "quant_gemm: ldx {} < k {}", shared.ldx, k);
    DSPARK_CHECK(p.m <= 1 || shared.ldy >= n, "quant_gemm: ldy {} < n {}", shared.ldy, n);
    rows += p.m;
    max_m = std::max(max_m, p.m);
  }
  DSPARK_CHECK(n >= 0 && k >= 0, "quant_gemm: negative size n={} k={}", n, k);
  DSPARK_CHECK(k % qb.elements == 0, "quant_gemm: k {} is not a multiple of {}'s {} values", k,
               quant_type_name(shared.quant), qb.elements);
  DSPARK_CHECK(dtype_is_float(shared.x_dtype) && dtype_is_float(shared.y_dtype),
               "quant_gemm: float inputs and outputs only (x {}, y {})", dtype_name(shared.x_dtype),
               dtype_name(shared.y_dtype));
  if (isa == QuantGemmIsa::automatic) isa = quant_gemm_default_isa();
  DSPARK_CHECK_KIND(unsupported, isa != QuantGemmIsa::avx2 || quant_gemm_has_avx2(),
                    "quant_gemm: this CPU lacks AVX2/FMA/F16C");
  DSPARK_CHECK_KIND(unsupported, isa != QuantGemmIsa::avx512 || quant_gemm_has_avx512(),
                    "quant_gemm: this CPU lacks AVX-512 F/BW/VL/VNNI");
  if (rows == 0 || n == 0) return;
  const bool x8 = isa == QuantGemmIsa::avx2 || isa == QuantGemmIsa::avx512;

  // x rounded to 8-bit blocks, once per call: the problems' rows one after the other (rows spread
  // over the pool when there are many). first[p]: problem p's first row there.
  const int64_t x_row_bytes = d::x_row_bytes(k);
  uint8_t* xbase = x_buffer(rows * x_row_bytes);
  // The calling thread's buffer, grown once and reused (every linear() of a decode step comes
  // through here); the pool's threads read it through this reference.
  thread_local std::vector<int64_t> first_rows;
  std::vector<int64_t>& first = first_rows;
  first.assign(problems.size() + 1, 0);
  for (size_t p = 0; p < problems.size(); ++p) first[p + 1] = first[p] + problems[p].m;
  dispatch_float(shared.x_dtype, [&]<typename TX>(TypeTag<TX>) {
    auto quantize_rows = [&](int64_t r0, int64_t r1) {
      size_t p =
          static_cast<size_t>(std::upper_bound(first.begin(), first.end(), r0) - first.begin()) - 1;
      for (int64_t r = r0; r < r1; ++r) {
        while (r >= first[p + 1]) ++p;
        const TX* src = static_cast<const TX*>(problems[p].x) + (r - first[p]) * shared.ldx;
        const float* v;
        if constexpr (std::is_same_v<TX, float>) {
          v = src;
        } else {
          float* f = thread_scratch(k, 3);
          load_f32(src, f, k);
          v = f;
        }
        if (x8) {
#if defined(__x86_64__)
          d::quantize_x_row_avx2(v, k, xbase + r * x_row_bytes);
#endif
        } else {
          d::quantize_x_row(v, k, xbase + r * x_row_bytes);
        }
      }
    };
    if (rows * k >= (int64_t{1} << 16)) {
      pool.parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(k, 1)), quantize_rows);
    } else {
      quantize_rows(0, rows);
    }
  });

  const int64_t row_bytes = quant_row_bytes(shared.quant, k);
  const int64_t n_blocks = (n + d::kBlockCols - 1) / d::kBlockCols;
  const auto n_problems = static_cast<int64_t>(problems.size());
  // Blocks of weight rows, of every problem, taken by the pool's threads one chunk at a time (the
  // pool makes up to 4 chunks per thread: small enough to even out two threads, one of which the
  // shared machine may delay). A call of fewer than kSerialMacs multiply-adds (~6 us) stays on the
  // calling thread: waking the workers costs more.
  constexpr int64_t kSerialMacs = int64_t{1} << 17;
  const int64_t total = n_problems * n_blocks;
  const int64_t grain = rows * n * k < kSerialMacs ? total : 1;
  dispatch_float(shared.y_dtype, [&]<typename TO>(TypeTag<TO>) {
    pool.parallel_for(total, grain, [&](int64_t b0, int64_t b1) {
      float* out = out_buffer(max_m * d::kBlockCols);
      for (int64_t i = b0; i < b1; ++i) {
        const auto p = static_cast<size_t>(i / n_blocks);
        const QuantGemmProblem& pr = problems[p];
        const int64_t m = pr.m;
        if (m == 0) continue;
        QuantGemmArgs a = shared;
        a.x = pr.x;
        a.w = pr.w;
        a.y = pr.y;
        a.m = m;
        d::XBlocks xb;
        xb.row_bytes = x_row_bytes;
        xb.blocks = k / 32;
        xb.base = xbase + first[p] * x_row_bytes;
        const int64_t j0 = (i % n_blocks) * d::kBlockCols;
        const int64_t ncols = std::min(d::kBlockCols, n - j0);
        if (k == 0) {
          std::fill(out, out + m * d::kBlockCols, 0.0f);
        } else {
          const uint8_t* g[2] = {};
          int64_t groups = 0;
          const uint8_t* wrows = block_rows(a, row_bytes, x8, j0, ncols, g, groups);
          if (x8) {
#if defined(__x86_64__)
            d::block_x8(a.quant, isa == QuantGemmIsa::avx512, xb, m, g, groups, out);
#endif
          } else {
            d::block_portable(a.quant, xb, m, wrows, row_bytes, ncols, out);
          }
        }
        for (int64_t r = 0; r < m; ++r) {
          TO* yr = static_cast<TO*>(a.y) + r * a.ldy + j0;
          const float* o = out + r * d::kBlockCols;
          if (a.bias) {
            for (int64_t j = 0; j < ncols; ++j) yr[j] = from_f32<TO>(o[j] + a.bias[j0 + j]);
          } else {
            for (int64_t j = 0; j < ncols; ++j) yr[j] = from_f32<TO>(o[j]);
          }
        }
      }
    });
  });
}

}  // namespace dspark::cpu
