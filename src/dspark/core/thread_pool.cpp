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
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
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

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int64_t n_chunks = std::min<int64_t>(max_chunks, static_cast<int64_t>(size()) * 4);
  if (n_chunks <= 1 || workers_.empty()) {
    body(0, n);
    return;
  }
  std::lock_guard call_lock(call_mutex_);
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    n_ = n;
    n_chunks_ = n_chunks;
    chunk_ = (n + n_chunks - 1) / n_chunks;
    next_chunk_ = 0;
    chunks_done_ = 0;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  // The calling thread works too.
  for (;;) {
    int64_t c;
    {
      std::lock_guard lock(mutex_);
      if (next_chunk_ >= n_chunks_) break;
      c = next_chunk_++;
    }
    try {
      body(c * chunk_, std::min(n, (c + 1) * chunk_));
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    ++chunks_done_;
  }
  spin_until([&] { return chunks_done_.load(std::memory_order_acquire) == n_chunks; });
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return chunks_done_ == n_chunks_; });
  body_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int /*index*/) {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    });
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || (generation_ != seen && next_chunk_ < n_chunks_); });
    if (stop_) return;
    seen = generation_.load();
    while (body_ && next_chunk_ < n_chunks_) {
      const int64_t c = next_chunk_++;
      const auto* body = body_;
      const int64_t n = n_, chunk = chunk_;
      lock.unlock();
      try {
        (*body)(c * chunk, std::min(n, (c + 1) * chunk));
      } catch (...) {
        lock.lock();
        if (!error_) error_ = std::current_exception();
        lock.unlock();
      }
      lock.lock();
      if (++chunks_done_ == n_chunks_) done_.notify_all();
    }
  }
}

}  // namespace dspark
