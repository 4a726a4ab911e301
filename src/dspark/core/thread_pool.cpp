#include "dspark/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dspark {
namespace {

// How long an idle worker, or a caller waiting for the workers, spins before it sleeps on its
// condition variable. On a 2-core VM a woken thread starts ~15-23 us after the notify, while the
// CPU kernels' calls of a SmolLM2 decode step take 20-140 us each: with the spin a step's linears
// took 5.7-7.6 ms instead of 8.3-11.2 ms. Longer spins gained nothing more and cost CPU time under
// load.
constexpr auto kSpin = std::chrono::microseconds(30);

// The chunk fields of ThreadPool::claim_ are 16 bits wide.
constexpr int64_t kMaxChunks = 0xffff;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until ready() or kSpin has passed; returns ready().
template <typename Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) {
    if (const char* env = std::getenv("DSPARK_THREADS")) n_threads = std::atoi(env);
  }
  if (n_threads <= 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

uint32_t ThreadPool::run_chunks() {
  uint64_t v = claim_.load(std::memory_order_acquire);
  for (;;) {
    const auto gen = static_cast<uint32_t>(v >> 32);
    const auto total = static_cast<uint32_t>((v >> 16) & 0xffff),
               next = static_cast<uint32_t>(v & 0xffff);
    if (next >= total) return gen;
    if (!claim_.compare_exchange_weak(v, v + 1, std::memory_order_acquire)) continue;
    try {
      (*body_)(next * chunk_, std::min(n_, (next + 1) * chunk_));
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (chunks_done_.fetch_add(1) + 1 == total && caller_waiting_.load()) {
      std::lock_guard lock(mutex_);
      done_.notify_all();
    }
    v = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int64_t n_chunks =
      std::min({max_chunks, static_cast<int64_t>(size()) * 4, int64_t{kMaxChunks}});
  if (n_chunks <= 1 || workers_.empty()) {
    body(0, n);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  body_ = &body;
  n_ = n;
  chunk_ = (n + n_chunks - 1) / n_chunks;
  error_ = nullptr;
  chunks_done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = (claim_.load(std::memory_order_relaxed) >> 32) + 1;
  claim_.store((gen << 32) | (static_cast<uint64_t>(n_chunks) << 16));  // publishes the call
  if (sleepers_.load() > 0) {
    { std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }
  run_chunks();  // the calling thread works too
  const auto all = static_cast<uint32_t>(n_chunks);
  if (!spin_until([&] { return chunks_done_.load(std::memory_order_acquire) == all; })) {
    std::unique_lock lock(mutex_);
    caller_waiting_.store(true);
    done_.wait(lock, [&] { return chunks_done_.load() == all; });
    caller_waiting_.store(false, std::memory_order_relaxed);
  }
  body_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  const auto ready = [&] {
    return stop_.load() || static_cast<uint32_t>(claim_.load() >> 32) != seen;
  };
  for (;;) {
    if (!spin_until(ready)) {
      std::unique_lock lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, ready);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = run_chunks();
  }
}

}  // namespace dspark
