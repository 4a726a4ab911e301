// linear: y[M, N] = x[M, K] . w[N, K]^T (+ bias), f32 accumulation: one row of 16-bit weights on
// the one-row kernel (gemv_m1.cu), everything else through cuBLASLt (choose_linear,
// policy/linear.h); with Tuning::batch_invariant, 16-bit weights at any M on gemv_invariant.cu.
//
// cuBLASLt is column-major. A row-major [R, C] matrix with row stride ld is the column-major
// [C, R] matrix with leading dimension ld, so y^T = w . x^T is computed as
//   D[N, M] (ld = ld_y) = op(A)[N, K] . B[K, M],  A = w as column-major [K, N] (ld K), op(A) = A^T,
//                                                  B = x as column-major [K, M] (ld = ld_x)
// ("TN" GEMM, the layout cuBLASLt's fastest kernels use). Matmul descriptors, layouts and the
// algorithm are built once per (device, M, N, K, dtypes, row strides, pointer alignments) and
// cached (backend/cuda/lt_plans.h: the heuristic's first algorithm). f32 inputs use
// CUBLAS_COMPUTE_32F (no TF32), so f32 results match the CPU to f32 rounding. The bias is added by
// a small kernel after the GEMM (any bias dtype).
#include <algorithm>

#include "dspark/backend/cuda/blas.h"
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"
#include "dspark/backend/cuda/kernels/pdl.cuh"
#include "dspark/backend/cuda/lt_plans.h"

namespace dspark::cuda {
namespace {

template <typename TY>
struct BiasParams {
  TY* y;             // [rows, cols], rows y_stride apart
  const void* bias;  // [cols]
  device::FloatKind bias_kind;
  int64_t cols;
  int64_t y_stride;
};

template <typename TY>
__global__ void add_bias_kernel(BiasParams<TY> p) {
  TY* y = p.y + blockIdx.x * p.y_stride;
  for (int64_t c = blockIdx.y * blockDim.x + threadIdx.x; c < p.cols;
       c += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    y[c] =
        device::from_float<TY>(device::to_float(y[c]) + device::load_float(p.bias, c, p.bias_kind));
  }
}

}  // namespace

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const RowView xv = row_view(x), yv = row_view(y);
  const int64_t m = xv.rows, k = xv.cols, n = w.size(0);
  if (m == 0 || n == 0) return;
  DSPARK_CHECK_KIND(unsupported, k > 0, "linear on CUDA: K must be positive");
  DSPARK_CHECK_KIND(unsupported, x.dtype() == w.dtype(),
                    "linear on CUDA: x ({}) and w ({}) must have the same dtype",
                    dtype_name(x.dtype()), dtype_name(w.dtype()));
  DSPARK_CHECK_KIND(unsupported, y.dtype() == DType::f32 || y.dtype() == x.dtype(),
                    "linear on CUDA: output {} for {} inputs (f32 or the input dtype)",
                    dtype_name(y.dtype()), dtype_name(x.dtype()));
  const LinearKernel kernel = choose_linear(linear_shape(x, w, y), ctx.cuda_tuning());
  if (kernel == LinearKernel::invariant) return linear_invariant(ctx, x, w, bias, y);
  if (kernel != LinearKernel::cublaslt)  // one row (decode steps): gemv_m1.cu
    return linear_one_row(ctx, x, w, bias, y, kernel == LinearKernel::one_row_half);

  BlasLt& blas = ctx.blas();
  const GemmKey key{current_device(),
                    m,
                    n,
                    k,
                    m == 1 ? k : xv.stride,  // a single row: any ld >= K is equivalent
                    m == 1 ? n : yv.stride,
                    static_cast<int>(x.dtype()),
                    static_cast<int>(y.dtype()),
                    pointer_alignment(x.data()),
                    pointer_alignment(w.data()),
                    pointer_alignment(y.data())};
  run_gemm(key, x.dtype(), y.dtype(),
           LtOperands{static_cast<cublasLtHandle_t>(blas.handle()), w.data(), x.data(), y.data(),
                      blas.workspace(), blas.workspace_bytes(), stream_of(ctx)});
  note_cublaslt_launch();

  if (!bias.defined() || bias.numel() == 0) return;
  dispatch_float(y.dtype(), [&]<typename TY>(TypeTag<TY>) {
    BiasParams<device_t<TY>> p{device_ptr<TY>(y), bias.data(), float_kind(bias.dtype()), n,
                               yv.stride};
    constexpr int kThreads = 256;
    const dim3 grid(static_cast<unsigned>(m),
                    static_cast<unsigned>(std::min<int64_t>(ceil_div(n, kThreads), 64)));
    add_bias_kernel<<<grid, kThreads, 0, stream_of(ctx)>>>(p);
    DSPARK_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace dspark::cuda
