// Helpers of the CPU-vs-CUDA consistency tests (tests/cuda/*_test.cpp): every test runs an op
// through the public ops API on a CPU context and on a CUDA context with the same inputs and
// compares the results with a stated tolerance. Tests skip when no CUDA device is usable.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/core/buffer.h"
#include "dspark/core/tensor.h"

// DSPARK_CONSISTENCY_ON_CPU (a debugging aid for machines without a GPU): the "GPU" side runs on
// a second CPU context, so the tests' own logic and inputs can be checked anywhere (every
// comparison is then CPU against CPU and must pass exactly).
#if defined(DSPARK_CONSISTENCY_ON_CPU)
#define DSPARK_REQUIRE_CUDA() \
  do {                        \
  } while (0)
#else
#define DSPARK_REQUIRE_CUDA()                                                \
  do {                                                                       \
    if (!::dspark::test::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
#endif

namespace dspark::test {

// One tuning value of a context's CUDA kernel choices (backend/cuda/policy/device.h) for a scope,
// restored at its end: how a test reaches the path that other devices, shapes or settings take.
// On a CPU context (DSPARK_CONSISTENCY_ON_CPU) it changes nothing that runs.
template <typename T>
class ScopedTuning {
 public:
  ScopedTuning(Context& ctx, T cuda::Tuning::*field, T value)
      : ctx_(ctx), field_(field), saved_(ctx.cuda_tuning().*field) {
    ctx_.cuda_tuning().*field_ = value;
  }
  ~ScopedTuning() { ctx_.cuda_tuning().*field_ = saved_; }
  ScopedTuning(const ScopedTuning&) = delete;
  ScopedTuning& operator=(const ScopedTuning&) = delete;

 private:
  Context& ctx_;
  T cuda::Tuning::*field_;
  T saved_;
};

#if defined(DSPARK_CONSISTENCY_ON_CPU)
inline constexpr Device kTestGpu = Device::cpu();
#else
inline constexpr Device kTestGpu = Device::cuda(0);
#endif

inline constexpr std::array<DType, 3> kFloatDTypes = {DType::f32, DType::bf16, DType::f16};

// The same values on the host and on the GPU.
struct Pair {
  OwnedTensor cpu;
  OwnedTensor gpu;
};

inline Pair copy_pair(const Tensor& host) {
  return Pair{OwnedTensor::copy_of(host, Device::cpu()), OwnedTensor::copy_of(host, kTestGpu)};
}
inline Pair random_pair(DType dtype, Shape shape, uint32_t seed, float stddev = 1.0f) {
  const OwnedTensor host = random_tensor(dtype, shape, seed, stddev);
  return copy_pair(host.view());
}
inline Pair values_pair(const std::vector<float>& values, DType dtype, Shape shape) {
  const OwnedTensor host = make_tensor(values, dtype, shape, Device::cpu());
  return copy_pair(host.view());
}
inline Pair zeros_pair(DType dtype, Shape shape) {
  return Pair{OwnedTensor::zeros(dtype, shape, Device::cpu()),
              OwnedTensor::zeros(dtype, shape, kTestGpu)};
}
template <typename T>
Pair vector_pair(const std::vector<T>& values, Shape shape) {
  return Pair{OwnedTensor::from_vector(values, shape, Device::cpu()),
              OwnedTensor::from_vector(values, shape, kTestGpu)};
}

// The two contexts; the GPU one is synchronised before results are read.
struct Contexts {
  Context cpu{Device::cpu()};
  Context gpu{kTestGpu};
};

// Reads a float tensor of any device as f32 (the caller synchronised the GPU context).
inline std::vector<float> read(const Tensor& t) {
  return to_f32_vector(t);
}

// Relative RMS tolerance for results stored in `dtype` (one rounding of the output plus f32
// differences of summation order): f32 1e-5, f16 2e-3, bf16 1e-2.
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

inline std::string name_of(DType dtype) {
  return std::string(dtype_name(dtype));
}

// gpu vs cpu (the reference): relative RMS error <= tol, and no NaN.
inline void expect_close(const Tensor& gpu, const Tensor& cpu, double tol,
                         const std::string& what) {
  const std::vector<float> g = read(gpu), c = read(cpu);
  ASSERT_EQ(g.size(), c.size()) << what;
  const double err = relative_rms_error(g, c);
  EXPECT_LE(err, tol) << what << ": relative RMS error " << err << " (max abs "
                      << max_abs_error(g, c) << ")";
}

inline void expect_equal(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  const std::vector<float> g = read(gpu), c = read(cpu);
  ASSERT_EQ(g.size(), c.size()) << what;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = g[i] == c[i] || (g[i] != g[i] && c[i] != c[i]);
    if (!same && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0u) << what << ": first mismatch at " << first << ": gpu " << g[first]
                            << " cpu " << c[first];
}

inline std::vector<int32_t> random_ints(size_t n, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// A [rows, cols] view of columns [begin, begin + cols) of a wider contiguous [rows, width] tensor.
inline Tensor columns(const Tensor& wide, int64_t begin, int64_t cols) {
  return wide.slice(1, begin, begin + cols);
}

}  // namespace dspark::test
