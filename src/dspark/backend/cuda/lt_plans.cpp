// cuBLASLt plans of linear: creation, the process-wide cache and autotuning (lt_plans.h).
#include "dspark/backend/cuda/lt_plans.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "dspark/backend/cuda/check.h"
#include "dspark/backend/cuda/kernels.h"

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

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<int>(x) : fallback;
}

std::atomic<int>& autotune_flag() {
  static std::atomic<int> n = std::clamp(env_int("DSPARK_LT_AUTOTUNE", 0), 0, 64);
  return n;
}

uint32_t reduction_mask() {
  static const uint32_t mask =
      static_cast<uint32_t>(std::clamp(env_int("DSPARK_LT_REDUCTION_MASK", 7), 0, 7));
  return mask;
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<GemmKey, std::shared_ptr<const GemmPlan>>& plan_cache() {
  static std::map<GemmKey, std::shared_ptr<const GemmPlan>> plans;
  return plans;
}
std::vector<LinearPlanRecord>& plan_log() {
  static std::vector<LinearPlanRecord> log;
  return log;
}

// A device buffer larger than the L2 (per device, kept for the process): writing it before a
// timed call evicts the weights, so the call reads them from HBM.
void* flush_buffer(int device, size_t& bytes) {
  static std::mutex mutex;
  static std::map<int, std::pair<void*, size_t>> buffers;
  std::lock_guard lock(mutex);
  auto it = buffers.find(device);
  if (it == buffers.end()) {
    int l2 = 0;
    DSPARK_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    const size_t n = std::max<size_t>(4 * static_cast<size_t>(l2), size_t{64} << 20);
    void* p = nullptr;
    DSPARK_CUDA_CHECK(cudaMalloc(&p, n));
    it = buffers.emplace(device, std::make_pair(p, n)).first;
  }
  bytes = it->second.second;
  return it->second.first;
}

template <typename V>
V algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  V v{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return V{};
  return v;
}

// Minimum device milliseconds of `reps` calls of one candidate, each after an L2 flush (negative:
// cuBLASLt refused it). The first call (module load, first-use costs) is not timed.
float time_candidate(const GemmKey& key, const GemmPlan& plan,
                     const cublasLtMatmulHeuristicResult_t& r, cudaStream_t stream,
                     const RunCandidate& run) {
  constexpr int kReps = 3;
  size_t flush_bytes = 0;
  void* flush = flush_buffer(key.device, flush_bytes);
  if (!run(plan, r.algo, r.workspaceSize)) {
    (void)cudaGetLastError();
    return -1.0f;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  DSPARK_CUDA_CHECK(cudaEventCreate(&start));
  DSPARK_CUDA_CHECK(cudaEventCreate(&stop));
  float best = -1.0f;
  for (int i = 0; i < kReps; ++i) {
    DSPARK_CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream));
    DSPARK_CUDA_CHECK(cudaEventRecord(start, stream));
    const bool ok = run(plan, r.algo, r.workspaceSize);
    DSPARK_CUDA_CHECK(cudaEventRecord(stop, stream));
    DSPARK_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    DSPARK_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (!ok) {
      best = -1.0f;
      break;
    }
    if (best < 0.0f || ms < best) best = ms;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return best;
}

std::shared_ptr<const GemmPlan> make_plan(const GemmKey& key, cublasLtHandle_t handle,
                                          DType x_dtype, DType y_dtype, size_t workspace_bytes,
                                          cudaStream_t stream, bool capturing,
                                          const RunCandidate& run) {
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
  if (reduction_mask() != 7) pref.set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, reduction_mask());

  const int autotune = capturing ? 0 : linear_autotune();
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(autotune, 1)));
  int n_results = 0;
  DSPARK_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
      handle, plan->op, plan->a, plan->b, plan->d, plan->d, pref.get(),
      static_cast<int>(results.size()), results.data(), &n_results));
  DSPARK_CHECK_KIND(unsupported, n_results > 0,
                    "cuBLASLt has no algorithm for linear M={} N={} K={} ({} -> {}{})", key.m,
                    key.n, key.k, dtype_name(x_dtype), dtype_name(y_dtype),
                    f32 ? "" : ", f32 accumulation");
  int chosen = 0;
  if (autotune > 1 && n_results > 1) {
    std::vector<float> ms(static_cast<size_t>(n_results));
    for (int i = 0; i < n_results; ++i)
      ms[static_cast<size_t>(i)] =
          time_candidate(key, *plan, results[static_cast<size_t>(i)], stream, run);
    for (int i = 1; i < n_results; ++i) {
      const float t = ms[static_cast<size_t>(i)], best = ms[static_cast<size_t>(chosen)];
      if (t >= 0.0f && (best < 0.0f || t < best)) chosen = i;
    }
    const cublasLtMatmulAlgo_t& algo = results[static_cast<size_t>(chosen)].algo;
    LinearPlanRecord rec{key.m,
                         key.n,
                         key.k,
                         n_results,
                         chosen,
                         1e3 * ms[0],
                         1e3 * ms[static_cast<size_t>(chosen)],
                         algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                         algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                         algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                         algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                         algo_config<int32_t>(results[0].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM)};
    std::fprintf(stderr,
                 "linear autotune M=%lld N=%lld K=%lld: %d candidates, heuristic's first %.1f us "
                 "(split-K %d), chosen #%d %.1f us (algo %d, tile %u, split-K %d, reduction %u)\n",
                 static_cast<long long>(rec.m), static_cast<long long>(rec.n),
                 static_cast<long long>(rec.k), rec.candidates, rec.heuristic_us,
                 rec.heuristic_splitk, rec.chosen, rec.chosen_us, rec.algo_id, rec.tile, rec.splitk,
                 rec.reduction);
    std::lock_guard lock(cache_mutex());
    plan_log().push_back(rec);
  }
  plan->algo = results[static_cast<size_t>(chosen)].algo;
  plan->workspace_bytes = results[static_cast<size_t>(chosen)].workspaceSize;
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

std::shared_ptr<const GemmPlan> cached_plan(const GemmKey& key) {
  std::lock_guard lock(cache_mutex());
  const auto it = plan_cache().find(key);
  return it == plan_cache().end() ? nullptr : it->second;
}

std::shared_ptr<const GemmPlan> create_plan(const GemmKey& key, cublasLtHandle_t handle,
                                            DType x_dtype, DType y_dtype, size_t workspace_bytes,
                                            cudaStream_t stream, bool capturing,
                                            const RunCandidate& run) {
  constexpr size_t kMaxPlans = 4096;
  auto plan = make_plan(key, handle, x_dtype, y_dtype, workspace_bytes, stream, capturing, run);
  std::lock_guard lock(cache_mutex());
  if (plan_cache().size() >= kMaxPlans) plan_cache().clear();  // shared_ptr keeps plans alive
  return plan_cache().emplace(key, plan).first->second;        // another thread's plan if it won
}

void run_gemm(const GemmKey& key, DType x_dtype, DType y_dtype, const LtOperands& o) {
  const float alpha = 1.0f, beta = 0.0f;
  std::shared_ptr<const GemmPlan> plan = cached_plan(key);
  if (!plan) {  // first call of this shape: make the plan (and autotune it when asked)
    auto run = [&](const GemmPlan& p, const cublasLtMatmulAlgo_t& algo, size_t) {
      return cublasLtMatmul(o.handle, p.op, &alpha, o.w, p.a, o.x, p.b, &beta, o.y, p.d, o.y, p.d,
                            &algo, o.workspace, o.workspace_bytes,
                            o.stream) == CUBLAS_STATUS_SUCCESS;
    };
    plan =
        create_plan(key, o.handle, x_dtype, y_dtype, o.workspace_bytes, o.stream, o.capturing, run);
  }
  DSPARK_CUBLAS_CHECK(cublasLtMatmul(o.handle, plan->op, &alpha, o.w, plan->a, o.x, plan->b, &beta,
                                     o.y, plan->d, o.y, plan->d, &plan->algo, o.workspace,
                                     o.workspace_bytes, o.stream));
}

void set_linear_autotune(int candidates) {
  autotune_flag().store(std::clamp(candidates, 0, 64));
  std::lock_guard lock(cache_mutex());
  plan_cache().clear();
}

int linear_autotune() {
  return autotune_flag().load();
}

std::vector<LinearPlanRecord> linear_plan_log() {
  std::lock_guard lock(cache_mutex());
  return plan_log();
}

}  // namespace dspark::cuda
