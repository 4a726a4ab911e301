// DSpark head cells (contract: ops/head_cells.h): one block per row, threads stride over the
// columns; operand dtypes are read at run time (the operands are small: rows x rank).
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"

namespace dspark::cuda {
namespace {

constexpr int kThreads = 256;

// A [rows, cols] operand of a run-time float dtype: base pointer, row stride (elements), kind.
struct AnyRows {
  void* data;
  int64_t stride;
  device::FloatKind kind;
  __device__ __forceinline__ float load(int64_t r, int64_t c) const {
    return device::load_float(data, r * stride + c, kind);
  }
  __device__ __forceinline__ void store(int64_t r, int64_t c, float v) const {
    device::store_float(data, r * stride + c, kind, v);
  }
};

AnyRows any_rows(const Tensor& t) {
  return AnyRows{t.data(), row_view(t).stride, float_kind(t.dtype())};
}

__device__ __forceinline__ float sigmoid(float v) {
  return 1.0f / (1.0f + expf(-v));
}

__global__ void sigmoid_gate_kernel(AnyRows gate, AnyRows x, AnyRows out, int64_t cols) {
  const int64_t r = blockIdx.x;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out.store(r, c, sigmoid(gate.load(r, c)) * x.load(r, c));
}

__global__ void rnn_head_cell_kernel(AnyRows proj, AnyRows state, AnyRows out, int64_t rank) {
  const int64_t r = blockIdx.x;
  for (int64_t j = threadIdx.x; j < rank; j += blockDim.x) {
    const float a = sigmoid(proj.load(r, j));
    const float cand = tanhf(proj.load(r, rank + j));
    const float s = state.load(r, j);
    state.store(r, j, a * s + (1.0f - a) * cand);
    out.store(r, j, tanhf(proj.load(r, 2 * rank + j)));
  }
}

}  // namespace

void sigmoid_gate(Context& ctx, const Tensor& gate, const Tensor& x, const Tensor& out) {
  const RowView v = row_view(gate);
  if (v.rows == 0 || v.cols == 0) return;
  sigmoid_gate_kernel<<<static_cast<unsigned>(v.rows), kThreads, 0, stream_of(ctx)>>>(
      any_rows(gate), any_rows(x), any_rows(out), v.cols);
  DSPARK_CUDA_CHECK_LAUNCH();
}

void rnn_head_cell(Context& ctx, const Tensor& proj, const Tensor& state, const Tensor& out) {
  const RowView v = row_view(state);
  if (v.rows == 0 || v.cols == 0) return;
  rnn_head_cell_kernel<<<static_cast<unsigned>(v.rows), kThreads, 0, stream_of(ctx)>>>(
      any_rows(proj), any_rows(state), any_rows(out), v.cols);
  DSPARK_CUDA_CHECK_LAUNCH();
}

}  // namespace dspark::cuda
