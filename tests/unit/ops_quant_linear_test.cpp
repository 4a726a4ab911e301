// linear() and gather_rows() with block-quantized weights on the CPU (ops/matmul.h,
// ops/embedding.h; kernels: backend/cpu/kernels/quant_gemm.h), for every QuantType (kQuantTypes
// and kGroupQuantTypes):
//  - accuracy: against the double-precision product of core's dequantized weight (the reference
//    values, tests/unit/quant_format_test.cpp), within the contract's 1e-2 relative RMS, for
//    M in {1, 2, 3, 5, 8, 17, 33, 70}, odd N, K of several blocks, x f32 / bf16 / f16, y f32 /
//    bf16, with and without bias, strided x and y (the padding is left alone);
//  - batch invariance: row r of an M-row call is bitwise equal to the 1-row call on that row, for
//    every M, on every ISA this CPU runs (portable, AVX2, AVX-512 VNNI), whatever the thread count,
//    in either weight layout (plain, 8 rows interleaved: N = 37 has 4 groups and 5 plain rows);
//    every path gives the same bits; every M
//    from 1 to 17 (each tile of x rows the kernels pick and their remainders) at K with full and
//    partial groups of 8 blocks;
//  - linear and gather_rows through the ops with WeightFormat::blocks_x8 weights;
//  - the interleaved layout round trip (pack, then unpack every row);
//  - the 5-bit and k-quant formats' extreme values (the largest integer sums) on every path;
//  - rows of zeros, of tiny values and with a non-finite value;
//  - gather_rows of a quantized table: the rows of dequantize_blocks;
//  - the MLX group types (Q4_A64 ... Q8_A128, every test above too): the products of their
//    expansion into Q4_1 / Q8_A blocks, bit for bit.
// Weights are random blocks: random quant bits, finite f16 scales of realistic size.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cpu/kernels/quant_gemm.h"
#include "dspark/backend/cpu/kernels/quant_pack.h"
#include "dspark/core/quant.h"
#include "dspark/core/thread_pool.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/matmul.h"

namespace dspark {
namespace {

using cpu::QuantGemmArgs;
using cpu::QuantGemmIsa;

constexpr int64_t kMs[] = {1, 2, 3, 4, 5, 8, 17, 33, 70};
constexpr int64_t kMaxM = 70;
constexpr int64_t kN = 37;

// An ISA and a weight layout (packed: quant_pack.h's interleaved rows).
struct Variant {
  QuantGemmIsa isa;
  bool packed;
};

std::string variant_name(const Variant& v) {
  return fmt::format("{}{}", cpu::quant_gemm_isa_name(v.isa), v.packed ? " packed" : "");
}

// Every ISA this CPU runs, each with the plain layout and the interleaved one.
std::vector<Variant> variants(QuantType type) {
  std::vector<QuantGemmIsa> isas = {QuantGemmIsa::portable};
  if (cpu::quant_gemm_has_avx2()) isas.push_back(QuantGemmIsa::avx2);
  if (cpu::quant_gemm_has_avx512()) isas.push_back(QuantGemmIsa::avx512);
  std::vector<Variant> v;
  for (const QuantGemmIsa isa : isas) {
    v.push_back({isa, false});
    v.push_back({isa, true});
  }
  return v;
}

bool is_k_quant(QuantType t) {
  return t == QuantType::q4_k || t == QuantType::q5_k || t == QuantType::q6_k;
}

bool is_group(QuantType t) {
  return quant_unit_type(t) != t;
}

// K: several blocks, not a multiple of 8 blocks (units of 32) for the legacy formats and the MLX
// group types.
int64_t k_for(QuantType t) {
  return is_k_quant(t) ? 768 : is_group(t) ? 640 : 352;
}

void put_half(uint8_t* p, float v) {
  const uint16_t bits = f32_to_f16(v).bits;
  std::memcpy(p, &bits, 2);
}

// n rows of k values of random blocks: random quant bits, f16 scales of ~0.01 of either sign, the
// mins of Q4_1 / Q5_1 / Q4_K / Q5_K chosen so the values are roughly centred on zero.
std::vector<uint8_t> random_weights(QuantType type, int64_t n, int64_t k, uint32_t seed) {
  const QuantBlock qb = quant_block(type);
  const int64_t blocks = n * (k / qb.elements);
  std::vector<uint8_t> w(static_cast<size_t>(blocks * qb.bytes));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (auto& b : w) b = static_cast<uint8_t>(byte(gen));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* p = w.data() + b * qb.bytes;
    const float d = 0.01f * u(gen) * (byte(gen) < 128 ? -1.0f : 1.0f);
    switch (type) {
      case QuantType::q4_0:
      case QuantType::q5_0:
      case QuantType::q8_0:
        put_half(p, d);
        break;
      case QuantType::q4_1:
      case QuantType::q4_a64:
      case QuantType::q4_a128:
        put_half(p, d);
        put_half(p + 2, -8.0f * d * u(gen));
        break;
      case QuantType::q5_1:
        put_half(p, d);
        put_half(p + 2, -16.0f * d * u(gen));
        break;
      case QuantType::q4_k:
      case QuantType::q5_k:
        put_half(p, std::fabs(d) * 0.05f);
        put_half(p + 2, std::fabs(d) * (type == QuantType::q4_k ? 0.25f : 0.5f) * u(gen));
        break;
      case QuantType::q6_k:
        put_half(p + 208, d * 0.05f);
        break;
      case QuantType::q8_a:
      case QuantType::q8_a64:
      case QuantType::q8_a128:
        put_half(p, d / 16.0f);
        put_half(p + 2, -8.0f * d * u(gen));
        break;
    }
  }
  return w;
}

std::vector<float> dequantized(QuantType type, const std::vector<uint8_t>& w, int64_t n,
                               int64_t k) {
  std::vector<float> out(static_cast<size_t>(n * k));
  dequantize_blocks(type, w.data(), n * (k / quant_block(type).elements), out.data());
  return out;
}

std::vector<uint8_t> packed_copy(QuantType type, const std::vector<uint8_t>& w, int64_t n,
                                 int64_t k) {
  std::vector<uint8_t> out(w.size());
  cpu::pack_rows_x8(type, w.data(), n, k, out.data());
  return out;
}

WeightMatrix weight_matrix(QuantType type, const OwnedTensor& data, int64_t n, int64_t k,
                           WeightFormat format = WeightFormat::blocks) {
  WeightMatrix wm;
  wm.format = format;
  wm.quant = type;
  wm.data = data.view();
  wm.n = n;
  wm.k = k;
  return wm;
}

OwnedTensor u8_tensor(const std::vector<uint8_t>& bytes, int64_t n) {
  const auto rows = n;
  return OwnedTensor::from_vector(bytes, Shape{rows, static_cast<int64_t>(bytes.size()) / rows},
                                  Device::cpu());
}

// y = x . w^T + bias in double.
std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& bias, int64_t m, int64_t n, int64_t k) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias.empty() ? 0.0 : bias[j];
      for (int64_t i = 0; i < k; ++i) s += static_cast<double>(x[r * k + i]) * w[j * k + i];
      y[r * n + j] = static_cast<float>(s);
    }
  return y;
}

// y [m, n] f32 = quant_gemm(x rows [row0, row0 + m)) on `pool`; w plain (re-laid here for a
// packed variant).
std::vector<float> run_kernel(ThreadPool& pool, Variant v, QuantType type,
                              const std::vector<uint8_t>& w, const std::vector<float>& x,
                              int64_t row0, int64_t m, int64_t k, const float* bias = nullptr) {
  std::vector<float> y(static_cast<size_t>(m * kN), -1.0f);
  const std::vector<uint8_t> wp = v.packed ? packed_copy(type, w, kN, k) : std::vector<uint8_t>{};
  QuantGemmArgs a;
  a.x = x.data() + row0 * k;
  a.x_dtype = DType::f32;
  a.ldx = k;
  a.w = v.packed ? wp.data() : w.data();
  a.packed = v.packed;
  a.quant = type;
  a.bias = bias;
  a.y = y.data();
  a.y_dtype = DType::f32;
  a.ldy = kN;
  a.m = m;
  a.n = kN;
  a.k = k;
  cpu::quant_gemm(pool, a, v.isa);
  return y;
}

// The weight formats linear() takes for `type` on the CPU.
std::vector<WeightFormat> formats(QuantType /*type*/) {
  return {WeightFormat::blocks, WeightFormat::blocks_x8};
}

std::string quant_linear_param_name(const ::testing::TestParamInfo<QuantType>& p) {
  return std::string(quant_type_name(p.param));
}

class QuantLinear : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantLinear, MatchesTheDequantizedProduct) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  Context ctx(Device::cpu());
  const std::vector<uint8_t> wbytes = random_weights(type, kN, k, 7);
  const std::vector<float> wf = dequantized(type, wbytes, kN, k);
  for (const WeightFormat format : formats(type)) {
    const bool packed = format == WeightFormat::blocks_x8;
    const OwnedTensor wt = u8_tensor(packed ? packed_copy(type, wbytes, kN, k) : wbytes, kN);
    const WeightMatrix wm = weight_matrix(type, wt, kN, k, format);
    struct Dtypes {
      DType x, y;
      bool bias;
    };
    const Dtypes combos[] = {{DType::f32, DType::f32, true},
                             {DType::bf16, DType::bf16, false},
                             {DType::f16, DType::f32, true},
                             {DType::bf16, DType::f32, true}};
    for (const Dtypes& c : combos) {
      for (const int64_t m : kMs) {
        SCOPED_TRACE(fmt::format("{} M={} N={} K={} x={} y={} bias={} packed={}",
                                 quant_type_name(type), m, kN, k, dtype_name(c.x), dtype_name(c.y),
                                 c.bias, packed));
        OwnedTensor x_buf = test::random_tensor(c.x, Shape{m, k + 3}, 100 + static_cast<int>(m));
        const Tensor x = x_buf.view().slice(1, 0, k);
        OwnedTensor bias_t;
        Tensor bias;
        if (c.bias) {
          bias_t = test::random_tensor(DType::f32, Shape{kN}, 5, 0.1f);
          bias = bias_t.view();
        }
        OwnedTensor y_buf = OwnedTensor::zeros(c.y, Shape{m, kN + 5}, Device::cpu());
        const Tensor y = y_buf.view().slice(1, 0, kN);
        linear(ctx, x, wm, bias, y);
        const std::vector<float> want = reference(
            to_f32_vector(x), wf, c.bias ? to_f32_vector(bias) : std::vector<float>{}, m, kN, k);
        const double err = test::relative_rms_error(to_f32_vector(y), want);
        EXPECT_LE(err, 1e-2);
        EXPECT_GT(err, 0.0);  // x really is rounded to 8 bits
        const std::vector<float> full = to_f32_vector(y_buf);
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = kN; j < kN + 5; ++j) ASSERT_EQ(full[r * (kN + 5) + j], 0.0f);
      }
    }
  }
}

TEST_P(QuantLinear, BatchInvariantOnEveryIsaAndThreadCount) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  const std::vector<uint8_t> w = random_weights(type, kN, k, 11);
  const std::vector<float> x = test::random_normal(static_cast<size_t>(kMaxM * k), 12);
  const std::vector<float> bias = test::random_normal(kN, 13, 0.1f);
  ThreadPool pool1(1), pool2(2), pool3(3);
  std::vector<float> first_isa;
  for (const Variant isa : variants(type)) {
    SCOPED_TRACE(fmt::format("{} isa={}", quant_type_name(type), variant_name(isa)));
    // The 1-row results of every row.
    std::vector<float> ones(static_cast<size_t>(kMaxM * kN));
    for (int64_t r = 0; r < kMaxM; ++r) {
      const std::vector<float> y = run_kernel(pool2, isa, type, w, x, r, 1, k, bias.data());
      std::memcpy(ones.data() + r * kN, y.data(), kN * sizeof(float));
    }
    for (const int64_t m : kMs) {
      for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
        if (pool != &pool2 && m != 17 && m != kMaxM) continue;
        // Rows [row0, row0 + m) so that a row sits at different positions of the tiles.
        const int64_t row0 = m == kMaxM ? 0 : 1;
        const std::vector<float> y = run_kernel(*pool, isa, type, w, x, row0, m, k, bias.data());
        ASSERT_EQ(std::memcmp(y.data(), ones.data() + row0 * kN, y.size() * sizeof(float)), 0)
            << "M=" << m << " threads=" << pool->size();
      }
    }
    if (first_isa.empty()) {
      first_isa = ones;
    } else {
      EXPECT_EQ(std::memcmp(first_isa.data(), ones.data(), ones.size() * sizeof(float)), 0)
          << "differs from the portable path";
    }
  }
}

TEST_P(QuantLinear, EveryRowCountUpTo17MatchesOneRowBitForBit) {
  const QuantType type = GetParam();
  // Legacy: 11 blocks (a group of 8, then a pair and a single block), 16 (two full groups), 18
  // (two groups and a pair); k-quants: 3 and 6 super-blocks; MLX groups: 12 and 20 units.
  const std::vector<int64_t> ks = is_k_quant(type) ? std::vector<int64_t>{768, 1536}
                                  : is_group(type) ? std::vector<int64_t>{384, 640}
                                                   : std::vector<int64_t>{352, 512, 576};
  constexpr int64_t kRows = 18;
  ThreadPool pool(2);
  for (const int64_t k : ks) {
    const std::vector<uint8_t> w = random_weights(type, kN, k, 51);
    const std::vector<float> x = test::random_normal(static_cast<size_t>(kRows * k), 52);
    std::vector<float> first;
    for (const Variant isa : variants(type)) {
      SCOPED_TRACE(fmt::format("{} K={} isa={}", quant_type_name(type), k, variant_name(isa)));
      std::vector<float> ones(static_cast<size_t>(kRows * kN));
      for (int64_t r = 0; r < kRows; ++r) {
        const std::vector<float> y = run_kernel(pool, isa, type, w, x, r, 1, k);
        std::memcpy(ones.data() + r * kN, y.data(), kN * sizeof(float));
      }
      for (int64_t m = 1; m <= 17; ++m)
        for (const int64_t row0 : {int64_t{0}, int64_t{1}}) {
          const std::vector<float> y = run_kernel(pool, isa, type, w, x, row0, m, k);
          ASSERT_EQ(std::memcmp(y.data(), ones.data() + row0 * kN, y.size() * sizeof(float)), 0)
              << "M=" << m << " row0=" << row0;
        }
      if (first.empty()) first = ones;
      EXPECT_EQ(std::memcmp(first.data(), ones.data(), ones.size() * sizeof(float)), 0)
          << "differs from the portable path";
    }
  }
}

// quant_gemm_grouped (a MoE layer's experts in one call): each product's bits are those of
// quant_gemm on it alone, on every ISA and layout, with products of 0 to 3 rows.
TEST_P(QuantLinear, GroupedProductsAreEachProductAlone) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  constexpr int kProducts = 4;
  const int64_t rows[kProducts] = {2, 0, 3, 1};
  ThreadPool pool(2);
  std::vector<std::vector<uint8_t>> w;
  for (int p = 0; p < kProducts; ++p) w.push_back(random_weights(type, kN, k, 61 + p));
  const std::vector<float> x = test::random_normal(static_cast<size_t>(6 * k), 62);
  for (const Variant v : variants(type)) {
    SCOPED_TRACE(fmt::format("{} isa={}", quant_type_name(type), variant_name(v)));
    std::vector<std::vector<uint8_t>> wp;
    for (const auto& wi : w) wp.push_back(v.packed ? packed_copy(type, wi, kN, k) : wi);
    std::vector<float> y(static_cast<size_t>(6 * kN), -1.0f);
    QuantGemmArgs shared;
    shared.x_dtype = DType::f32;
    shared.ldx = k;
    shared.quant = type;
    shared.packed = v.packed;
    shared.y_dtype = DType::f32;
    shared.ldy = kN;
    shared.n = kN;
    shared.k = k;
    std::vector<cpu::QuantGemmProblem> problems;
    int64_t row0 = 0;
    for (int p = 0; p < kProducts; ++p) {
      problems.push_back(
          {x.data() + row0 * k, wp[static_cast<size_t>(p)].data(), y.data() + row0 * kN, rows[p]});
      row0 += rows[p];
    }
    cpu::quant_gemm_grouped(pool, shared, problems, v.isa);
    row0 = 0;
    for (int p = 0; p < kProducts; ++p) {
      if (rows[p] > 0) {
        const std::vector<float> alone =
            run_kernel(pool, v, type, w[static_cast<size_t>(p)], x, row0, rows[p], k);
        ASSERT_EQ(std::memcmp(alone.data(), y.data() + row0 * kN, alone.size() * sizeof(float)), 0)
            << "product " << p;
      }
      row0 += rows[p];
    }
  }
}

TEST_P(QuantLinear, BatchInvariantThroughTheOp) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  Context ctx(Device::cpu());
  const std::vector<uint8_t> wbytes = random_weights(type, kN, k, 21);
  for (const WeightFormat format : formats(type)) {
    const bool packed = format == WeightFormat::blocks_x8;
    const OwnedTensor wt = u8_tensor(packed ? packed_copy(type, wbytes, kN, k) : wbytes, kN);
    const WeightMatrix wm = weight_matrix(type, wt, kN, k, format);
    const int64_t m = 17;
    OwnedTensor x = test::random_tensor(DType::bf16, Shape{m, k}, 22);
    OwnedTensor bias = test::random_tensor(DType::bf16, Shape{kN}, 23, 0.1f);
    OwnedTensor y = OwnedTensor::zeros(DType::bf16, Shape{m, kN}, Device::cpu());
    linear(ctx, x.view(), wm, bias.view(), y.view());
    OwnedTensor y1 = OwnedTensor::zeros(DType::bf16, Shape{1, kN}, Device::cpu());
    for (int64_t r = 0; r < m; ++r) {
      linear(ctx, x.view().slice(0, r, r + 1), wm, bias.view(), y1.view());
      ASSERT_EQ(
          std::memcmp(y1.view().data(), y.view().slice(0, r, r + 1).data(), kN * sizeof(uint16_t)),
          0)
          << "row " << r << " packed " << packed;
    }
  }
}

TEST_P(QuantLinear, ZeroTinyAndNonFiniteRows) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  const std::vector<uint8_t> w = random_weights(type, kN, k, 31);
  // 8 rows: the widest tile of x rows (rows 3-7 ordinary).
  std::vector<float> x = test::random_normal(static_cast<size_t>(8 * k), 32);
  std::fill(x.begin(), x.begin() + k, 0.0f);              // row 0: zeros
  for (int64_t i = 0; i < k; ++i) x[k + i] *= 1e-32f;     // row 1: tiny (rounds to zeros)
  x[2 * k + 5] = std::numeric_limits<float>::infinity();  // row 2: one inf
  ThreadPool pool(2);
  for (const Variant isa : variants(type)) {
    SCOPED_TRACE(fmt::format("{} isa={}", quant_type_name(type), variant_name(isa)));
    for (const int64_t m : {4, 8}) {
      const std::vector<float> y = run_kernel(pool, isa, type, w, x, 0, m, k);
      for (int64_t j = 0; j < kN; ++j) {
        EXPECT_EQ(y[j], 0.0f) << "M=" << m;
        EXPECT_EQ(y[kN + j], 0.0f) << "M=" << m;
        EXPECT_TRUE(std::isnan(y[2 * kN + j])) << "M=" << m;
        for (int64_t r = 3; r < m; ++r) EXPECT_TRUE(std::isfinite(y[r * kN + j])) << "M=" << m;
      }
    }
  }
}

TEST_P(QuantLinear, GatherRowsDequantizes) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  Context ctx(Device::cpu());
  const std::vector<uint8_t> wbytes = random_weights(type, kN, k, 41);
  const std::vector<float> wf = dequantized(type, wbytes, kN, k);
  for (const WeightFormat format : formats(type)) {
    const bool packed = format == WeightFormat::blocks_x8;
    const OwnedTensor wt = u8_tensor(packed ? packed_copy(type, wbytes, kN, k) : wbytes, kN);
    const WeightMatrix wm = weight_matrix(type, wt, kN, k, format);
    const std::vector<int32_t> ids = {0, 36, 5, 5, 17};
    const OwnedTensor id_t = OwnedTensor::from_vector(ids, Shape{5}, Device::cpu());
    for (const DType dt : {DType::f32, DType::bf16}) {
      OwnedTensor out_buf = OwnedTensor::zeros(dt, Shape{5, k + 3}, Device::cpu());
      const Tensor out = out_buf.view().slice(1, 0, k);
      gather_rows(ctx, wm, id_t.view(), out);
      const std::vector<float> got = to_f32_vector(out);
      for (size_t i = 0; i < ids.size(); ++i)
        for (int64_t c = 0; c < k; ++c) {
          float want = wf[static_cast<size_t>(ids[i] * k + c)];
          if (dt == DType::bf16) want = bf16_to_f32(f32_to_bf16(want));
          ASSERT_EQ(got[i * k + c], want)
              << dtype_name(dt) << " id " << ids[i] << " col " << c << " packed " << packed;
        }
    }
  }
}

TEST_P(QuantLinear, InterleavedLayoutRoundTrips) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type), row_bytes = quant_row_bytes(type, k);
  const std::vector<uint8_t> w = random_weights(type, kN, k, 61);
  const std::vector<uint8_t> packed = packed_copy(type, w, kN, k);
  EXPECT_NE(std::memcmp(packed.data(), w.data(), 8 * static_cast<size_t>(row_bytes)), 0);
  std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
  for (int64_t r = 0; r < kN; ++r) {
    cpu::unpack_row_x8(type, packed.data(), kN, k, r, row.data());
    ASSERT_EQ(std::memcmp(row.data(), w.data() + r * row_bytes, row.size()), 0) << "row " << r;
  }
}

// The largest integer sums the kernels of every format but Q8_0 can meet (every value at its
// extreme, x at +-127, Q6_K's scales at -128; Q8_A's bytes 255 and 0, which AVX2 multiplies as
// 127 and -128; the 4-bit formats' 16 products of 15 * 127 in one int16 lane on AVX2): no int16
// pair sum or int32 sum overflows on any path, and every path gives the same bits and the
// dequantized product.
TEST_P(QuantLinear, ExtremeValuesAgreeOnEveryIsa) {
  const QuantType type = GetParam();
  const bool q8_a = quant_unit_type(type) == QuantType::q8_a;
  if (type == QuantType::q8_0) GTEST_SKIP() << "8-bit signed values: int32 sums only";
  const int64_t k = 512, m = 3;
  const QuantBlock qb = quant_block(type);
  std::vector<uint8_t> w(static_cast<size_t>(kN * quant_row_bytes(type, k)), 0xFF);
  for (size_t b = 0; b < w.size(); b += static_cast<size_t>(qb.bytes)) {
    uint8_t* p = w.data() + b;
    if (type == QuantType::q6_k) {
      std::memset(p + 192, 0x80, 16);
      put_half(p + 208, 1e-3f);
    } else {
      put_half(p, 1e-3f);
      if (type != QuantType::q5_0) put_half(p + 2, 1e-4f);  // Q5_0's fifth bits stay set
      if (q8_a)
        for (int64_t j = 0; j < qb.elements; ++j) p[4 + j] = j % 3 == 0 ? 0 : 255;
    }
  }
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < k; ++i) {
    x[i] = 1.0f;
    x[k + i] = -1.0f;
    x[2 * k + i] = i % 2 ? 1.0f : -1.0f;
  }
  const std::vector<float> want = reference(x, dequantized(type, w, kN, k), {}, m, kN, k);
  ThreadPool pool(1);
  std::vector<float> first;
  for (const Variant v : variants(type)) {
    SCOPED_TRACE(variant_name(v));
    const std::vector<float> y = run_kernel(pool, v, type, w, x, 0, m, k);
    EXPECT_LE(test::relative_rms_error(y, want), 1e-2);
    if (first.empty()) {
      first = y;
    } else {
      EXPECT_EQ(std::memcmp(y.data(), first.data(), y.size() * sizeof(float)), 0);
    }
  }
}

// gather_block_rows (a draft vocabulary's cut of a block-quantized LM head): the products of the
// gathered rows are those of the same rows of the whole matrix, bit for bit, from either layout.
TEST_P(QuantLinear, GatheredRowsGiveTheSameProducts) {
  const QuantType type = GetParam();
  const int64_t k = k_for(type);
  Context ctx(Device::cpu());
  const std::vector<uint8_t> wbytes = random_weights(type, kN, k, 71);
  const std::vector<int32_t> ids = {kN - 1, 0, 5, 3, 17, 18, 19, 20, 21, 22, 2, 9};
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t m = 7;
  OwnedTensor x = test::random_tensor(DType::f32, Shape{m, k}, 72);
  for (const WeightFormat format : formats(type)) {
    const bool packed = format == WeightFormat::blocks_x8;
    const OwnedTensor wt = u8_tensor(packed ? packed_copy(type, wbytes, kN, k) : wbytes, kN);
    const WeightMatrix wm = weight_matrix(type, wt, kN, k, format);
    OwnedTensor y = OwnedTensor::zeros(DType::f32, Shape{m, kN}, Device::cpu());
    linear(ctx, x.view(), wm, Tensor{}, y.view());
    OwnedTensor storage;
    const WeightMatrix cut = gather_block_rows(wm, ids, storage);
    EXPECT_EQ(cut.n, n);
    EXPECT_EQ(cut.format, preferred_block_format(Device::cpu(), type));
    OwnedTensor yc = OwnedTensor::zeros(DType::f32, Shape{m, n}, Device::cpu());
    linear(ctx, x.view(), cut, Tensor{}, yc.view());
    const std::vector<float> all = to_f32_vector(y), got = to_f32_vector(yc);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(got[r * n + i], all[r * kN + ids[static_cast<size_t>(i)]])
            << "row " << r << " id " << ids[static_cast<size_t>(i)] << " packed " << packed;
    const std::vector<int32_t> bad = {static_cast<int32_t>(kN)};
    EXPECT_THROW(gather_block_rows(wm, bad, storage), Error);
  }
}

// The MLX group types give the products of their expansion into 32-value blocks
// (expand_quant_groups: Q4_1 / Q8_A blocks with the group's d and m, what CUDA runs) bit for bit,
// on every ISA, in either layout, for every row count of the tiles.
class QuantGroups : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantGroups, ProductsAreThoseOfTheExpandedBlocks) {
  const QuantType type = GetParam(), unit = quant_unit_type(type);
  ThreadPool pool(2);
  for (const int64_t k : {int64_t{384}, int64_t{640}}) {
    const std::vector<uint8_t> w = random_weights(type, kN, k, 81);
    std::vector<uint8_t> expanded(static_cast<size_t>(kN * quant_row_bytes(unit, k)));
    expand_quant_groups(type, w.data(), kN * (k / quant_block(type).elements), expanded.data());
    const std::vector<float> x = test::random_normal(static_cast<size_t>(17 * k), 82);
    const std::vector<float> bias = test::random_normal(kN, 83, 0.1f);
    for (const Variant v : variants(type)) {
      for (const int64_t m : {1, 2, 3, 4, 5, 8, 9, 17}) {
        SCOPED_TRACE(
            fmt::format("{} K={} isa={} M={}", quant_type_name(type), k, variant_name(v), m));
        const std::vector<float> got = run_kernel(pool, v, type, w, x, 0, m, k, bias.data());
        const std::vector<float> want =
            run_kernel(pool, v, unit, expanded, x, 0, m, k, bias.data());
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantLinear, ::testing::ValuesIn(kQuantTypes),
                         quant_linear_param_name);
INSTANTIATE_TEST_SUITE_P(MlxGroups, QuantLinear, ::testing::ValuesIn(kGroupQuantTypes),
                         quant_linear_param_name);
INSTANTIATE_TEST_SUITE_P(MlxGroups, QuantGroups, ::testing::ValuesIn(kGroupQuantTypes),
                         quant_linear_param_name);

// linear_swiglu on the CPU: the product into the scratch, then swiglu, bit for bit; its argument
// checks (a row count that is not gate and up rows of one width, shapes, the scratch's dtype).
TEST(QuantLinearSwiglu, IsTheProductThenSwiglu) {
  Context ctx(Device::cpu());
  constexpr int64_t kInter = 37, kK = 512, kM = 3;
  const OwnedTensor wt =
      u8_tensor(test::random_quant_blocks(QuantType::q4_k, 2 * kInter, kK, 90), 2 * kInter);
  const WeightMatrix wm = weight_matrix(QuantType::q4_k, wt, 2 * kInter, kK);
  const OwnedTensor x = test::random_tensor(DType::f32, Shape{kM, kK}, 91);
  for (const DType dt : {DType::f32, DType::bf16}) {
    OwnedTensor scratch = OwnedTensor::zeros(dt, Shape{kM, 2 * kInter}, Device::cpu());
    OwnedTensor out = OwnedTensor::zeros(dt, Shape{kM, kInter}, Device::cpu());
    linear_swiglu(ctx, x.view(), wm, scratch.view(), out.view());
    OwnedTensor gu = OwnedTensor::zeros(dt, Shape{kM, 2 * kInter}, Device::cpu());
    OwnedTensor want = OwnedTensor::zeros(dt, Shape{kM, kInter}, Device::cpu());
    linear(ctx, x.view(), wm, Tensor{}, gu.view());
    swiglu(ctx, gu.view().slice(1, 0, kInter), gu.view().slice(1, kInter, 2 * kInter), want.view());
    EXPECT_EQ(to_f32_vector(out), to_f32_vector(want)) << dtype_name(dt);
  }
  OwnedTensor scratch = OwnedTensor::zeros(DType::f32, Shape{kM, 2 * kInter}, Device::cpu());
  OwnedTensor out = OwnedTensor::zeros(DType::f32, Shape{kM, kInter}, Device::cpu());
  const WeightMatrix odd = weight_matrix(QuantType::q4_k, wt, 2 * kInter - 1, kK);
  EXPECT_THROW(linear_swiglu(ctx, x.view(), odd, scratch.view(), out.view()), Error);
  OwnedTensor wide = OwnedTensor::zeros(DType::f32, Shape{kM, kInter + 1}, Device::cpu());
  EXPECT_THROW(linear_swiglu(ctx, x.view(), wm, scratch.view(), wide.view()), Error);
  OwnedTensor bf16_scratch = OwnedTensor::zeros(DType::bf16, Shape{kM, 2 * kInter}, Device::cpu());
  EXPECT_THROW(linear_swiglu(ctx, x.view(), wm, bf16_scratch.view(), out.view()), Error);
}

// linear_pair on the CPU: two linears, each part into its columns of one y, bit for bit (with
// biases, types that differ); its argument checks (a y of the wrong width, an x of the wrong K).
TEST(QuantLinearPair, IsTwoLinears) {
  Context ctx(Device::cpu());
  constexpr int64_t kA = 40, kB = 24, kK = 512, kM = 3;
  const OwnedTensor ta = u8_tensor(test::random_quant_blocks(QuantType::q4_k, kA, kK, 92), kA);
  const OwnedTensor tb = u8_tensor(test::random_quant_blocks(QuantType::q6_k, kB, kK, 93), kB);
  const WeightMatrix wa = weight_matrix(QuantType::q4_k, ta, kA, kK);
  const WeightMatrix wb = weight_matrix(QuantType::q6_k, tb, kB, kK);
  const OwnedTensor x = test::random_tensor(DType::f32, Shape{kM, kK}, 94);
  const OwnedTensor bias = test::random_tensor(DType::f32, Shape{kA + kB}, 95);
  OwnedTensor got = OwnedTensor::zeros(DType::f32, Shape{kM, kA + kB}, Device::cpu());
  linear_pair(ctx, x.view(), wa, bias.view().slice(0, 0, kA), got.view().slice(1, 0, kA), wb,
              bias.view().slice(0, kA, kA + kB), got.view().slice(1, kA, kA + kB));
  OwnedTensor want = OwnedTensor::zeros(DType::f32, Shape{kM, kA + kB}, Device::cpu());
  linear(ctx, x.view(), wa, bias.view().slice(0, 0, kA), want.view().slice(1, 0, kA));
  linear(ctx, x.view(), wb, bias.view().slice(0, kA, kA + kB), want.view().slice(1, kA, kA + kB));
  EXPECT_EQ(to_f32_vector(got), to_f32_vector(want));
  OwnedTensor narrow = OwnedTensor::zeros(DType::f32, Shape{kM, kB - 1}, Device::cpu());
  EXPECT_THROW(linear_pair(ctx, x.view(), wa, Tensor{}, got.view().slice(1, 0, kA), wb, Tensor{},
                           narrow.view()),
               Error);
  const OwnedTensor short_x = test::random_tensor(DType::f32, Shape{kM, kK - 256}, 96);
  EXPECT_THROW(linear_pair(ctx, short_x.view(), wa, Tensor{}, got.view().slice(1, 0, kA), wb,
                           Tensor{}, got.view().slice(1, kA, kA + kB)),
               Error);
}

}  // namespace
}  // namespace dspark
