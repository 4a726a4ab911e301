// Element-wise ops over [rows, cols] views with row strides: swiglu, add, convert. f32 math; grid
// (rows, column chunks), each thread strides over its chunk so that accesses are coalesced.
#include <algorithm>

#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/device/swiglu.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/pdl.cuh"

namespace dspark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItemsPerThread = 4;  // columns per thread per block-row chunk

// A [rows, cols] operand: base pointer and row stride.
template <typename T>
struct Operand {
  T* data;
  int64_t stride;
  __device__ __forceinline__ T* row(int64_t r) const { return data + r * stride; }
};

template <typename T>
Operand<device_t<T>> operand(const Tensor& t) {
  return Operand<device_t<T>>{device_ptr<T>(t), row_view(t).stride};
}

struct Silu {
  __device__ __forceinline__ float operator()(float g, float u) const {
    return device::swiglu_value(g, u);
  }
};
struct Add {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

template <typename Op, typename TA, typename TB, typename TO>
__global__ void binary_kernel(Operand<const TA> a, Operand<const TB> b, Operand<TO> out,
                              int64_t cols, Op op) {
  pdl_wait();  // a programmatic dependent (pdl.cuh): the next kernel may launch from here on
  pdl_launch_dependents();
  const int64_t r = blockIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * kThreads * kItemsPerThread;
  const int64_t end = std::min<int64_t>(cols, begin + kThreads * kItemsPerThread);
  const TA* pa = a.row(r);
  const TB* pb = b.row(r);
  TO* po = out.row(r);
  // Every load before the first store: stored one by one in the loop, each item's loads would wait
  // for the previous item's store (out may alias a or b), four round trips.
  float va[kItemsPerThread], vb[kItemsPerThread];
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int64_t c = begin + threadIdx.x + i * kThreads;
    if (c < end) {
      va[i] = device::to_float(pa[c]);
      vb[i] = device::to_float(pb[c]);
    }
  }
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int64_t c = begin + threadIdx.x + i * kThreads;
    if (c < end) po[c] = device::from_float<TO>(op(va[i], vb[i]));
  }
}

template <typename TS, typename TO>
__global__ void convert_kernel(Operand<const TS> src, Operand<TO> out, int64_t cols) {
  const int64_t r = blockIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * kThreads * kItemsPerThread;
  const int64_t end = std::min<int64_t>(cols, begin + kThreads * kItemsPerThread);
  const TS* ps = src.row(r);
  TO* po = out.row(r);
  float v[kItemsPerThread];  // loads before stores, as binary_kernel
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int64_t c = begin + threadIdx.x + i * kThreads;
    if (c < end) v[i] = device::to_float(ps[c]);
  }
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int64_t c = begin + threadIdx.x + i * kThreads;
    if (c < end) po[c] = device::from_float<TO>(v[i]);
  }
}

dim3 grid_for(const RowView& v) {
  return dim3(static_cast<unsigned>(v.rows),
              static_cast<unsigned>(ceil_div(v.cols, kThreads * kItemsPerThread)));
}

template <typename Op>
void launch_binary(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out, Op op) {
  const RowView ov = row_view(out);
  if (ov.rows == 0 || ov.cols == 0) return;
  dispatch_float(a.dtype(), [&]<typename TA>(TypeTag<TA>) {
    dispatch_float(b.dtype(), [&]<typename TB>(TypeTag<TB>) {
      dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
        const auto pa = operand<TA>(a);
        const auto pb = operand<TB>(b);
        launch_pdl(binary_kernel<Op, device_t<TA>, device_t<TB>, device_t<TO>>, grid_for(ov),
                   dim3(kThreads), 0, stream_of(ctx),
                   Operand<const device_t<TA>>{pa.data, pa.stride},
                   Operand<const device_t<TB>>{pb.data, pb.stride}, operand<TO>(out), ov.cols, op);
      });
    });
  });
}

}  // namespace

void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out) {
  launch_binary(ctx, gate, up, out, Silu{});
}

void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  launch_binary(ctx, a, b, out, Add{});
}

void convert(Context& ctx, const Tensor& src, const Tensor& out) {
  const RowView ov = row_view(out);
  if (ov.rows == 0 || ov.cols == 0) return;
  dispatch_float(src.dtype(), [&]<typename TS>(TypeTag<TS>) {
    dispatch_float(out.dtype(), [&]<typename TO>(TypeTag<TO>) {
      const auto ps = operand<TS>(src);
      convert_kernel<<<grid_for(ov), kThreads, 0, stream_of(ctx)>>>(
          Operand<const device_t<TS>>{ps.data, ps.stride}, operand<TO>(out), ov.cols);
      DSPARK_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace dspark::cuda
