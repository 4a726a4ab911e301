// linear: y[M, N] = x[M, K] . w[N, K]^T (+ bias) through cuBLASLt, f32 accumulation.
//
// cuBLASLt is column-major. A row-major [R, C] matrix with row stride ld is the column-major
// [C, R] matrix with leading dimension ld, so y^T = w . x^T is computed as
//   D[N, M] (ld = ld_y) = op(A)[N, K] . B[K, M],  A = w as column-major [K, N] (ld K), op(A) = A^T,
//                                                  B = x as column-major [K, M] (ld = ld_x)
// ("TN" GEMM, the layout cuBLASLt's fastest kernels use). Matmul descriptors, layouts and the
// heuristic's algorithm are built once per (device, M, N, K, dtypes, row strides, pointer
// alignments) and cached. f32 inputs use CUBLAS_COMPUTE_32F (no TF32), so f32 results match the CPU
// to f32 rounding. The bias is added by a small kernel after the GEMM (any bias dtype).
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "dspark/backend/cuda/blas.h"
#include "dspark/backend/cuda/device/convert.cuh"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/kernels/common.cuh"
#include "dspark/backend/cuda/kernels/gemv.h"

namespace dspark::cuda {
namespace {

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      DSPARK_FAIL(unsupported, "linear on CUDA: unsupported dtype {}", dtype_name(dtype));
  }
}

// Largest power of two (<= 256) dividing the address: cuBLASLt's MIN_ALIGNMENT preferences.
uint32_t pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

struct GemmKey {
  int device;
  int64_t m, n, k, ld_x, ld_y;
  int x_dtype, y_dtype;
  uint32_t align_x, align_w, align_y;
  auto tie() const {
    return std::tie(device, m, n, k, ld_x, ld_y, x_dtype, y_dtype, align_x, align_w, align_y);
  }
  bool operator<(const GemmKey& o) const { return tie() < o.tie(); }
};

// Descriptors and algorithm of one GEMM shape; host objects, destroyed with the cache entry.
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;

  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
};

class PreferenceGuard {
 public:
  PreferenceGuard() { DSPARK_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_)); }
  ~PreferenceGuard() { (void)cublasLtMatmulPreferenceDestroy(pref_); }
  PreferenceGuard(const PreferenceGuard&) = delete;
  PreferenceGuard& operator=(const PreferenceGuard&) = delete;
  template <typename V>
  void set(cublasLtMatmulPreferenceAttributes_t attr, V value) {
    DSPARK_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, attr, &value, sizeof(value)));
  }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

std::shared_ptr<const GemmPlan> make_plan(const GemmKey& key, cublasLtHandle_t handle,
                                          DType x_dtype, DType y_dtype, size_t workspace_bytes) {
  auto plan = std::make_shared<GemmPlan>();
  const bool f32 = x_dtype == DType::f32;
  DSPARK_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  DSPARK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                     &trans_a, sizeof(trans_a)));
  DSPARK_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                     &trans_b, sizeof(trans_b)));
  const cudaDataType_t in_type = cuda_data_type(x_dtype), out_type = cuda_data_type(y_dtype);
  DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in_type, static_cast<uint64_t>(key.k),
                                                 static_cast<uint64_t>(key.n), key.k));
  DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, static_cast<uint64_t>(key.k),
                                                 static_cast<uint64_t>(key.m), key.ld_x));
  DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, out_type, static_cast<uint64_t>(key.n),
                                                 static_cast<uint64_t>(key.m), key.ld_y));

  PreferenceGuard pref;
  pref.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes));
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_w);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_x);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_y);
  pref.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_y);

  cublasLtMatmulHeuristicResult_t result{};
  int n_results = 0;
  DSPARK_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, plan->op, plan->a, plan->b, plan->d,
                                                     plan->d, pref.get(), 1, &result, &n_results));
  DSPARK_CHECK_KIND(unsupported, n_results > 0,
                    "cuBLASLt has no algorithm for linear M={} N={} K={} ({} -> {}{})", key.m,
                    key.n, key.k, dtype_name(x_dtype), dtype_name(y_dtype),
                    f32 ? "" : ", f32 accumulation");
  plan->algo = result.algo;
  plan->workspace_bytes = result.workspaceSize;
  return plan;
}

// The plan cache: small, process-wide, shared by all contexts (keyed by device).
std::shared_ptr<const GemmPlan> find_plan(const GemmKey& key, cublasLtHandle_t handle,
                                          DType x_dtype, DType y_dtype, size_t workspace_bytes) {
  constexpr size_t kMaxPlans = 4096;
  static std::mutex mutex;
  static std::map<GemmKey, std::shared_ptr<const GemmPlan>> plans;
  {
    std::lock_guard lock(mutex);
    if (auto it = plans.find(key); it != plans.end()) return it->second;
  }
  auto plan = make_plan(key, handle, x_dtype, y_dtype, workspace_bytes);
  std::lock_guard lock(mutex);
  if (plans.size() >= kMaxPlans) plans.clear();  // shared_ptr keeps plans in use alive
  plans.emplace(key, plan);
  return plan;
}

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
  if (try_gemv(ctx, x, w, bias, y)) return;  // small M: the bandwidth-bound kernel (gemv.cu)

  int device = 0;
  DSPARK_CUDA_CHECK(cudaGetDevice(&device));
  BlasLt& blas = ctx.blas();
  const GemmKey key{device,
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
  const auto plan = find_plan(key, static_cast<cublasLtHandle_t>(blas.handle()), x.dtype(),
                              y.dtype(), blas.workspace_bytes());
  const float alpha = 1.0f, beta = 0.0f;
  DSPARK_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(blas.handle()), plan->op, &alpha,
                                     w.data(), plan->a, x.data(), plan->b, &beta, y.data(), plan->d,
                                     y.data(), plan->d, &plan->algo, blas.workspace(),
                                     blas.workspace_bytes(), stream_of(ctx)));

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
