// Argument checks and device dispatch of linear (contract: ops/matmul.h).
#include "dspark/ops/matmul.h"

#include <cstring>

#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/quant_gemm.h"
#include "dspark/backend/cpu/kernels/quant_pack.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/dispatch.h"
#include "dspark/ops/op_checks.h"

namespace dspark {

using namespace ops_internal;

namespace {

// True when the element ranges covered by two row-strided 2-D views overlap.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  auto span = [](const Tensor& t) {
    const char* begin = static_cast<const char*>(t.data());
    const int64_t last = (t.size(0) - 1) * t.stride(0) + t.size(1);
    return std::pair{begin, begin + last * static_cast<int64_t>(t.element_size())};
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

namespace ops_internal {

void check_linear_args(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Tensor& y) {
  constexpr const char* kOp = "linear";
  check_rank(kOp, "x", x, 2);
  check_rank(kOp, "w", w, 2);
  check_float(kOp, "x", x);
  check_float(kOp, "w", w);
  check_float(kOp, "y", y);
  check_rows_contiguous(kOp, "x", x);
  check_contiguous(kOp, "w", w);
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  DSPARK_CHECK(w.size(1) == k, "{}: x {} and w {} disagree on in_features", kOp, x.describe(),
               w.describe());
  check_shape(kOp, "y", y, Shape{m, n});
  check_rows_contiguous(kOp, "y", y);
  DSPARK_CHECK(!overlaps(x, y), "{}: y must not overlap x", kOp);
  check_on_device(kOp, "x", x, ctx);
  check_on_device(kOp, "w", w, ctx);
  check_on_device(kOp, "y", y, ctx);
  check_optional_vector(kOp, "bias", bias, n, ctx);
  if (ctx.is_cuda()) {
    const bool same_16 = x.dtype() == w.dtype() && x.dtype() != DType::f32;
    const bool both_32 = x.dtype() == DType::f32 && w.dtype() == DType::f32;
    DSPARK_CHECK_KIND(unsupported, same_16 || both_32,
                      "{} on CUDA: x and w must share a 16-bit dtype or both be f32, got {} and {}",
                      kOp, x.describe(), w.describe());
    DSPARK_CHECK_KIND(unsupported, y.dtype() == DType::f32 || y.dtype() == x.dtype(),
                      "{} on CUDA: y must be f32 or the input dtype, got {}", kOp, y.describe());
  }
}

}  // namespace ops_internal

namespace {

// linear()'s checks of a quantized w and its operands, under op name kOp.
void check_quantized_linear(Context& ctx, const char* kOp, const Tensor& x, const WeightMatrix& w,
                            const Tensor& bias, const Tensor& y) {
  check_weight_matrix(ctx, kOp, "w", w);
  check_rank(kOp, "x", x, 2);
  check_float(kOp, "x", x);
  check_float(kOp, "y", y);
  check_rows_contiguous(kOp, "x", x);
  DSPARK_CHECK(x.size(1) == w.k, "{}: x {} and w [{}, {}] ({}) disagree on in_features", kOp,
               x.describe(), w.n, w.k,
               w.format == WeightFormat::fp8_blocks ? "FP8" : quant_type_name(w.quant));
  check_shape(kOp, "y", y, Shape{x.size(0), w.n});
  check_rows_contiguous(kOp, "y", y);
  DSPARK_CHECK(!overlaps(x, y), "{}: y must not overlap x", kOp);
  check_on_device(kOp, "x", x, ctx);
  check_on_device(kOp, "y", y, ctx);
  check_optional_vector(kOp, "bias", bias, w.n, ctx);
  if (ctx.is_cuda())
    DSPARK_CHECK_KIND(unsupported, y.dtype() == DType::f32 || y.dtype() == x.dtype(),
                      "{} on CUDA: y must be f32 or the input dtype, got {}", kOp, y.describe());
  const bool fp8 = w.format == WeightFormat::fp8_blocks;
  if (fp8 && ctx.is_cuda())
    DSPARK_CHECK_KIND(unsupported,
                      x.dtype() == DType::bf16 && w.k % 16 == 0 &&
                          cuda_fp8_blocks_supported(w.block_n, w.block_k),
                      "{} on CUDA: FP8 blocks need x bf16, k a multiple of 16, block_n a multiple "
                      "of 16 and block_k 64 times a power of two; got x {}, k {}, blocks {}x{}",
                      kOp, x.describe(), w.k, w.block_n, w.block_k);
}

}  // namespace

void linear(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
            const Tensor& y) {
  if (!w.quantized()) return linear(ctx, x, w.data, bias, y);
  check_quantized_linear(ctx, "linear", x, w, bias, y);
  if (x.size(0) == 0 || w.n == 0) return;
  const bool fp8 = w.format == WeightFormat::fp8_blocks;
  if (ctx.is_cuda()) {
    if (fp8) {
      DSPARK_ON_CUDA(cuda::linear_fp8_blocks(ctx, x, w, bias, y));
    } else {
      DSPARK_ON_CUDA(cuda::linear_blocks(ctx, x, w, bias, y));
    }
  } else if (fp8) {
    cpu::linear_fp8_blocks(ctx, x, w, bias, y);
  } else {
    cpu::linear_blocks(ctx, x, w, bias, y);
  }
}

void linear_pair(Context& ctx, const Tensor& x, const WeightMatrix& wa, const Tensor& bias_a,
                 const Tensor& ya, const WeightMatrix& wb, const Tensor& bias_b, const Tensor& yb) {
  constexpr const char* kOp = "linear_pair";
  const bool blocks = wa.format == WeightFormat::blocks && wb.format == WeightFormat::blocks;
  if (ctx.is_cuda() && blocks && x.size(0) > 0 && wa.n > 0 && wb.n > 0) {
    check_quantized_linear(ctx, kOp, x, wa, bias_a, ya);
    check_quantized_linear(ctx, kOp, x, wb, bias_b, yb);
    bool done = false;
    DSPARK_ON_CUDA(done = cuda::linear_blocks_pair(ctx, x, wa, bias_a, ya, wb, bias_b, yb));
    if (done) return;
  }
  linear(ctx, x, wa, bias_a, ya);
  linear(ctx, x, wb, bias_b, yb);
}

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  check_linear_args(ctx, x, w, bias, y);
  if (x.size(0) == 0 || w.size(0) == 0) return;
  if (ctx.is_cuda()) {
    DSPARK_ON_CUDA(cuda::linear(ctx, x, w, bias, y));
  } else {
    cpu::linear(ctx, x, w, bias, y);
  }
}

void linear_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& gate_up,
                   const Tensor& out) {
  constexpr const char* kOp = "linear_swiglu";
  check_rank(kOp, "x", x, 2);
  check_rank(kOp, "out", out, 2);
  check_rank(kOp, "gate_up", gate_up, 2);
  DSPARK_CHECK(w.n % 2 == 0, "{}: w has {} rows, not gate and up rows of one width", kOp, w.n);
  const int64_t inter = w.n / 2;
  check_shape(kOp, "out", out, Shape{x.size(0), inter});
  check_shape(kOp, "gate_up", gate_up, Shape{x.size(0), w.n});
  DSPARK_CHECK(gate_up.dtype() == out.dtype(), "{}: gate_up {} and out {} must share a dtype", kOp,
               gate_up.describe(), out.describe());
  if (ctx.is_cuda() && w.quantized() && w.format == WeightFormat::blocks && x.size(0) > 0) {
    check_weight_matrix(ctx, kOp, "w", w);
    check_float(kOp, "x", x);
    check_float(kOp, "out", out);
    DSPARK_CHECK_KIND(unsupported, out.dtype() == DType::f32 || out.dtype() == x.dtype(),
                      "{} on CUDA: out must be f32 or the input dtype, got {}", kOp,
                      out.describe());
    check_rows_contiguous(kOp, "x", x);
    check_rows_contiguous(kOp, "out", out);
    check_on_device(kOp, "x", x, ctx);
    check_on_device(kOp, "out", out, ctx);
    DSPARK_CHECK(x.size(1) == w.k, "{}: x {} and w [{}, {}] disagree on in_features", kOp,
                 x.describe(), w.n, w.k);
    DSPARK_CHECK(!overlaps(x, out), "{}: out must not overlap x", kOp);
    bool done = false;
    DSPARK_ON_CUDA(done = cuda::linear_blocks_swiglu(ctx, x, w, out));
    if (done) return;
  }
  linear(ctx, x, w, Tensor{}, gate_up);
  swiglu(ctx, gate_up.slice(1, 0, inter), gate_up.slice(1, inter, w.n), out);
}

void linear_per_head(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y) {
  constexpr const char* kOp = "linear_per_head";
  check_rank(kOp, "x", x, 3);
  check_rank(kOp, "w", w, 3);
  check_rank(kOp, "y", y, 3);
  check_float(kOp, "x", x);
  check_float(kOp, "w", w);
  check_float(kOp, "y", y);
  const int64_t n = x.size(0), heads = x.size(1), k = x.size(2), rows = w.size(1);
  check_shape(kOp, "w", w, Shape{heads, rows, k});
  check_shape(kOp, "y", y, Shape{n, heads, rows});
  DSPARK_CHECK(w.is_contiguous(), "{}: w must be contiguous", kOp);
  DSPARK_CHECK(x.stride(2) == 1 && y.stride(2) == 1, "{}: x's and y's last dim must be contiguous",
               kOp);
  check_on_device(kOp, "x", x, ctx);
  check_on_device(kOp, "w", w, ctx);
  check_on_device(kOp, "y", y, ctx);
  if (n == 0) return;
  if (ctx.is_cuda()) {
    bool done = false;
    DSPARK_ON_CUDA(done = cuda::linear_per_head(ctx, x, w, y));
    if (done) return;
  }
  for (int64_t h = 0; h < heads; ++h)
    linear(ctx, x.select(1, h), w.select(0, h), Tensor{}, y.select(1, h));
}

WeightMatrix weight_rows(const WeightMatrix& w, int64_t begin, int64_t end) {
  DSPARK_CHECK_KIND(invalid_input, 0 <= begin && begin < end && end <= w.n,
                    "weight_rows: rows [{}, {}) of {}", begin, end, w.n);
  WeightMatrix part = w;
  part.n = end - begin;
  if (w.format == WeightFormat::dense) {
    part.data = w.data.rows(begin, end);
    return part;
  }
  DSPARK_CHECK_KIND(
      invalid_input,
      w.format != WeightFormat::blocks_x8 || (begin % 8 == 0 && (end % 8 == 0 || end == w.n)),
      "weight_rows: rows [{}, {}) split a group of 8 interleaved rows", begin, end);
  part.data = w.data.rows(begin, end);
  if (w.format == WeightFormat::fp8_blocks) {
    DSPARK_CHECK_KIND(invalid_input, begin % w.block_n == 0,
                      "weight_rows: rows from {} of FP8 blocks of {} rows", begin, w.block_n);
    const int64_t b0 = begin / w.block_n;
    part.scales = w.scales.rows(b0, b0 + (part.n + w.block_n - 1) / w.block_n);
  }
  return part;
}

WeightFormat preferred_block_format(Device device, QuantType /*every format interleaves*/) {
  const bool x8 = !device.is_cuda() && cpu::quant_gemm_default_isa() != cpu::QuantGemmIsa::portable;
  return x8 ? WeightFormat::blocks_x8 : WeightFormat::blocks;
}

QuantType preferred_block_type(Device device, QuantType quant) {
  return device.is_cuda() ? quant_unit_type(quant) : quant;
}

void relayout_blocks(QuantType quant, int64_t n, int64_t k, const uint8_t* src, WeightFormat format,
                     uint8_t* dst) {
  DSPARK_CHECK(format == WeightFormat::blocks || format == WeightFormat::blocks_x8,
               "relayout_blocks: not a block format");
  if (format == WeightFormat::blocks) {
    std::memcpy(dst, src, static_cast<size_t>(n * quant_row_bytes(quant, k)));
  } else {
    cpu::pack_rows_x8(quant, src, n, k, dst);
  }
}

WeightMatrix gather_block_rows(const WeightMatrix& w, std::span<const int32_t> ids,
                               OwnedTensor& storage) {
  DSPARK_CHECK_KIND(invalid_input,
                    w.format == WeightFormat::blocks || w.format == WeightFormat::blocks_x8,
                    "gather_block_rows: not a block-quantized weight");
  DSPARK_CHECK_KIND(invalid_input, !w.data.device().is_cuda(),
                    "gather_block_rows: the weight must be in host memory");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t row_bytes = quant_row_bytes(w.quant, w.k);
  const auto* src = static_cast<const uint8_t*>(w.data.data());
  OwnedTensor plain(DType::u8, Shape{n, row_bytes}, Device::cpu());
  auto* rows = static_cast<uint8_t*>(plain.view().data());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[static_cast<size_t>(i)];
    DSPARK_CHECK_KIND(invalid_input, id >= 0 && id < w.n,
                      "gather_block_rows: row {} outside [0, {})", id, w.n);
    uint8_t* dst = rows + i * row_bytes;
    if (w.format == WeightFormat::blocks) {
      std::memcpy(dst, src + id * row_bytes, static_cast<size_t>(row_bytes));
    } else {
      cpu::unpack_row_x8(w.quant, src, w.n, w.k, id, dst);
    }
  }
  WeightMatrix out;
  out.format = preferred_block_format(Device::cpu(), w.quant);
  out.quant = w.quant;
  out.n = n;
  out.k = w.k;
  if (out.format == WeightFormat::blocks) {
    storage = std::move(plain);
  } else {
    storage = OwnedTensor(DType::u8, Shape{n, row_bytes}, Device::cpu());
    relayout_blocks(w.quant, n, w.k, rows, out.format,
                    static_cast<uint8_t*>(storage.view().data()));
  }
  out.data = storage.view();
  return out;
}

}  // namespace dspark
