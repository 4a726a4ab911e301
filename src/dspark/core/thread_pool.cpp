#include "dspark/core/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace dspark {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) {
    if (const char* env = std::getenv("DSPARK_THREADS")) n_threads = std::atoi(env);
  }
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
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
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return chunks_done_ == n_chunks_; });
  body_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int /*index*/) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stop_ || (generation_ != seen && next_chunk_ < n_chunks_); });
    if (stop_) return;
    seen = generation_;
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
