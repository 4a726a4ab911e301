// cuBLASLt plans of linear: creation and the process-wide cache (lt_plans.h).
#include "dspark/backend/cuda/lt_plans.h"

#include <map>
#include <memory>
#include <mutex>

#include "dspark/backend/cuda/check.h"

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

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<GemmKey, std::shared_ptr<const GemmPlan>>& plan_cache() {
  static std::map<GemmKey, std::shared_ptr<const GemmPlan>> plans;
  return plans;
}
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
                                                 static_cast<uint64_t>(key.n),
                                                 key.ld_w > 0 ? key.ld_w : key.k));
  DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, static_cast<uint64_t>(key.k),
                                                 static_cast<uint64_t>(key.m), key.ld_x));
  DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, out_type, static_cast<uint64_t>(key.n),
                                                 static_cast<uint64_t>(key.m), key.ld_y));
  if (key.batch > 1) {  // a K split: batch b starts b k columns into w and x
    const int32_t count = key.batch;
    const int64_t k_stride = key.k, d_stride = key.m * key.ld_y;
    for (cublasLtMatrixLayout_t layout : {plan->a, plan->b, plan->d}) {
      DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      const int64_t stride = layout == plan->d ? d_stride : k_stride;
      DSPARK_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }

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

}  // namespace

uint32_t pointer_alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a >>= 1;
  return a;
}

GemmPlan::~GemmPlan() {
  if (d) (void)cublasLtMatrixLayoutDestroy(d);
  if (b) (void)cublasLtMatrixLayoutDestroy(b);
  if (a) (void)cublasLtMatrixLayoutDestroy(a);
  if (op) (void)cublasLtMatmulDescDestroy(op);
}

void run_gemm(const GemmKey& key, DType x_dtype, DType y_dtype, const LtOperands& o) {
  constexpr size_t kMaxPlans = 4096;
  std::shared_ptr<const GemmPlan> plan;
  {
    std::lock_guard lock(cache_mutex());
    const auto it = plan_cache().find(key);
    if (it != plan_cache().end()) plan = it->second;
  }
  if (!plan) {  // first call of this shape
    auto made = make_plan(key, o.handle, x_dtype, y_dtype, o.workspace_bytes);
    std::lock_guard lock(cache_mutex());
    if (plan_cache().size() >= kMaxPlans) plan_cache().clear();  // shared_ptr keeps plans alive
    plan = plan_cache().emplace(key, std::move(made)).first->second;  // another thread's if it won
  }
  const float alpha = 1.0f, beta = 0.0f;
  DSPARK_CUBLAS_CHECK(cublasLtMatmul(o.handle, plan->op, &alpha, o.w, plan->a, o.x, plan->b, &beta,
                                     o.y, plan->d, o.y, plan->d, &plan->algo, o.workspace,
                                     o.workspace_bytes, o.stream));
}

}  // namespace dspark::cuda
