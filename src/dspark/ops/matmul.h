// Dense projections. The HF Linear convention: a weight is [out_features, in_features].
#pragma once

#include <span>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/buffer.h"
#include "dspark/core/tensor.h"

namespace dspark {

// y[M, N] = x[M, K] . w[N, K]^T (+ bias[N])     accumulation in f32
//   CPU: any float dtypes (bf16/f16 converted to f32); M <= 32 through dspark's small-M kernel
//   (backend/cpu/kernels/small_m_gemm.h: batch invariant), larger M through OpenBLAS sgemm;
//   CUDA: x and w of the same 16-bit dtype (bf16 or f16) or both f32; y f32 or the input dtype;
//   the kernel of backend/cuda/policy/linear.h. x and y rows contiguous (row strides may
//   exceed K / N: slices of wider buffers); w contiguous. bias (optional, may be an undefined
//   Tensor) [N] any float dtype. y must not overlap x (checked conservatively: the address ranges
//   spanned by their rows must not meet).
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);

// The same for a weight in any stored format (WeightMatrix, backend/op_params.h): a dense one is
// the call above; block-quantized rows (GGUF, core/quant.h: k a multiple of the block's values,
// data u8 [n, quant_row_bytes] contiguous) give y = x . dequantize(w)^T with f32 sums, where the
// kernels may first round each block of 32 values of a row of x to 8 bits with one f32 scale
// (as llama.cpp does): y then matches the f32 product of the dequantized weight to ~1e-2
// relative RMS. FP8 blocks (WeightFormat::fp8_blocks) give f32 sums over each 64 values of k
// (x unrounded) times their block's scale, added in k order: CPU any float x; CUDA x bf16, k a
// multiple of 16, block_n a multiple of 16 and block_k 64 times a power of two (the tensor-core
// kernels of ops/linear_fp8.h). A row's result does not depend on M or on the other rows (on
// CUDA: for the block formats at M <= 64, the x-in-registers FP8 kernel excepted). x any float
// dtype on the CPU, bf16 / f16 / f32 on CUDA; y f32 or x's dtype.
void linear(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& bias,
            const Tensor& y);

// ya = x . wa^T (+ bias_a) and yb = x . wb^T (+ bias_b): linear() of each, bit for bit (a
// stacked projection whose parts differ in block type, e.g. Q4_K q/k rows and Q6_K v rows). CUDA:
// both products in one launch where linear takes the few-row kernel for both and the kernel is
// built for the two types (backend/cuda/kernels/linear_quant_gemv.h); every other call, and the
// CPU, as two linear() calls. ya and yb share no element (e.g. column ranges of one y).
void linear_pair(Context& ctx, const Tensor& x, const WeightMatrix& wa, const Tensor& bias_a,
                 const Tensor& ya, const WeightMatrix& wb, const Tensor& bias_b, const Tensor& yb);

// out[M, I] = swiglu(x . w^T) for w [2I, K] holding the gate rows then the up rows (an MLP's
// stacked gate/up projection): the values of linear(ctx, x, w, {}, gate_up) then swiglu(ctx,
// gate_up[:, :I], gate_up[:, I:], out), bit for bit, with gate_up [M, 2I] of out's dtype, which is
// scratch: a fused kernel leaves it unwritten. CUDA: block-quantized w at the rows where linear
// takes the few-row kernel runs as one launch (backend/cuda/kernels/linear_quant_gemv.cu), every
// other call as those two ops.
void linear_swiglu(Context& ctx, const Tensor& x, const WeightMatrix& w, const Tensor& gate_up,
                   const Tensor& out);

// y[t, h, :] = x[t, h, :] . w[h]^T for every token t < n and head h < H: each head its own
// matrix (MLA's absorbed projections). x [n, H, K], w [H, N, K] contiguous, y [n, H, N], with x's
// and y's last dim contiguous (other strides free: e.g. columns of each head of a wider buffer),
// f32 sums. CPU: linear() per head. CUDA: x and w of one dtype (bf16, f16, f32), y f32 or it, K
// and x's strides whole 16-byte units: one launch for every head, a row's sums in an order fixed by
// K (a token's result does not depend on n); otherwise linear() per head.
void linear_per_head(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y);

// Rows [begin, end) of w as a WeightMatrix of end - begin rows (a view: no copy). Blocks
// interleaved by 8 rows split at a multiple of 8 (or end at the last row), FP8 blocks at a
// multiple of block_n; otherwise throws invalid_input.
WeightMatrix weight_rows(const WeightMatrix& w, int64_t begin, int64_t end);

// The layout of `quant` blocks that linear() and gather_rows() read fastest on `device`:
// WeightFormat::blocks_x8 on a CPU with the AVX2 kernels (8 rows interleaved,
// backend/cpu/kernels/quant_pack.h), else WeightFormat::blocks.
WeightFormat preferred_block_format(Device device, QuantType quant);

// The block type `device`'s kernels take for weights stored as `quant`: CUDA takes MLX's groups
// of 64 and 128 (core/quant.h: kGroupQuantTypes) as their 32-value blocks (quant_unit_type,
// converted by expand_quant_groups: the same values, 6-18% more bytes), the CPU every type as
// stored.
QuantType preferred_block_type(Device device, QuantType quant);

// n rows of k values of `quant` blocks from the plain layout (WeightFormat::blocks) at src into
// `format` at dst (host memory, the same number of bytes; they must not overlap).
void relayout_blocks(QuantType quant, int64_t n, int64_t k, const uint8_t* src, WeightFormat format,
                     uint8_t* dst);

// Rows ids[i] of a block-quantized weight held in host memory (WeightFormat::blocks or
// blocks_x8) as a [ids.size(), row bytes] u8 tensor in the layout preferred_block_format(CPU)
// gives, and the WeightMatrix over it (its data views `storage`). The same bytes per row: the
// products of a row are those of the source row. Throws invalid_input for a weight on a CUDA
// device, another format or an id outside [0, n).
WeightMatrix gather_block_rows(const WeightMatrix& w, std::span<const int32_t> ids,
                               OwnedTensor& storage);

}  // namespace dspark
