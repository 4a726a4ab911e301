#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/buffer.h"
#include "dspark/core/dtype.h"
#include "dspark/core/philox.h"
#include "dspark/core/progress_bar.h"
#include "dspark/core/tensor.h"
#include "dspark/core/thread_pool.h"

namespace dspark {
namespace {

TEST(DType, Bf16RoundTripAndRounding) {
  for (float v : {0.0f, 1.0f, -2.5f, 3.14159f, 65504.0f, 1e-20f}) {
    const float r = bf16_to_f32(f32_to_bf16(v));
    EXPECT_NEAR(r, v, std::fabs(v) * 1.0f / 128.0f) << v;
  }
  // 1 + 2^-8 is exactly halfway between two bf16 values: rounds to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256.0f)), 1.0f);
}

TEST(DType, F16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 0.333f, 65504.0f, 6.1e-5f, 5.96e-8f, -1e-6f}) {
    const float r = f16_to_f32(f32_to_f16(v));
    EXPECT_NEAR(r, v, std::max(std::fabs(v) / 1024.0f, 6e-8f)) << v;
  }
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(DType, Names) {
  EXPECT_EQ(dtype_from_name("BF16"), DType::bf16);
  EXPECT_EQ(dtype_name(DType::i64), "i64");
  EXPECT_THROW(dtype_from_name("F8_E4M3"), Error);
}

TEST(Tensor, SliceSelectReshape) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor t(v.data(), DType::f32, Shape{2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(static_cast<float*>(s.data())[0], 4.0f);
  Tensor r = t.select(0, 1);
  EXPECT_EQ(r.shape(), (Shape{3, 4}));
  EXPECT_EQ(static_cast<float*>(r.data())[0], 12.0f);
  EXPECT_EQ(t.reshape(Shape{6, -1}).shape(), (Shape{6, 4}));
  EXPECT_THROW(t.reshape(Shape{5, -1}), Error);
  EXPECT_THROW(s.reshape(Shape{16}), Error);
  auto host = to_vector<float>(s);
  ASSERT_EQ(host.size(), 16u);
  EXPECT_EQ(host[4], 8.0f);   // first batch, second kept row
  EXPECT_EQ(host[8], 16.0f);  // second batch, first kept row
}

TEST(Buffer, CountsActiveAndPeak) {
  const MemoryStats before = memory_stats(Device::cpu());
  {
    Buffer a(Device::cpu(), 1000);
    Buffer b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(memory_stats(Device::cpu()).active_bytes, before.active_bytes + 1000);
    EXPECT_GE(memory_stats(Device::cpu()).peak_bytes, before.active_bytes + 1000);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).active_bytes, before.active_bytes);
}

TEST(ThreadPool, CoversRangeAndRethrows) {
  ThreadPool pool(3);
  std::vector<int> hit(1000, 0);
  pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hit[i] += 1;
  });
  for (int h : hit) EXPECT_EQ(h, 1);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int64_t b, int64_t) {
                                   if (b > 50) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
}

// Back-to-back calls (workers still finishing the previous call's claims), calls after the workers
// fell asleep, and calls that throw: every item runs exactly once, in its own call.
TEST(ThreadPool, ManyCallsSpinningAndSleeping) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hit(4096);
  for (int call = 0; call < 3000; ++call) {
    const int64_t n = 1 + (call * 37) % 4096;
    pool.parallel_for(n, 1 + call % 5, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hit[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < 4096; ++i) {
      ASSERT_EQ(hit[i].load(), i < n ? 1 : 0) << "call " << call << " item " << i;
      hit[i].store(0);
    }
    if (call % 500 == 499) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the workers sleep
      EXPECT_THROW(pool.parallel_for(64, 1,
                                     [](int64_t b, int64_t e) {
                                       if (b <= 10 && 10 < e) throw std::runtime_error("boom");
                                     }),
                   std::runtime_error);
    }
  }
}

TEST(ProgressBar, OneLinePerTenthOutsideATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressBar bar(f, "tensors");
  for (int64_t i = 0; i <= 200; ++i) bar.update(i / 2, 100, i * 5, 1000, "w");
  bar.finish();
  std::rewind(f);
  std::string text;
  for (int c; (c = std::fgetc(f)) != EOF;) text.push_back(static_cast<char>(c));
  std::fclose(f);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 11) << text;
  EXPECT_NE(text.find("[" + std::string(30, '#') + "] 100%  100/100 tensors  0.00/0.00 MB  w"),
            std::string::npos)
      << text;
}

TEST(Philox, KnownAnswerAndUniformRange) {
  // Known-answer vector from the Random123 distribution (philox4x32_10, all-zero inputs).
  const Philox4 r = philox4x32(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const float u = philox_uniform(42, static_cast<uint64_t>(i), i % 4);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Context, CpuAndNoCudaMessage) {
  Context cpu(Device::cpu());
  EXPECT_FALSE(cpu.is_cuda());
  if (!cuda::built_with_cuda()) {
    try {
      Context gpu(Device::cuda(0));
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos);
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    }
  }
}

TEST(Device, Parse) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cuda:1"), Device::cuda(1));
  EXPECT_THROW(parse_device("tpu"), Error);
  EXPECT_THROW(parse_device("cuda:x"), Error);
}

}  // namespace
}  // namespace dspark
