// A fixed pool of worker threads for CPU kernels: parallel_for splits [0, n) into contiguous
// chunks, runs them on the workers and the calling thread, and returns when all are done.
// Exceptions thrown by the body are rethrown on the calling thread (never cross threads silently).
// Idle workers and the waiting caller spin briefly before they sleep: a decode step is a chain of
// calls of 20-140 us each, and waking a sleeping thread takes ~20 us.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dspark {

class ThreadPool {
 public:
  // n_threads <= 0: hardware concurrency (or DSPARK_THREADS from the environment).
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // body(begin, end) over chunks of [0, n); chunks hold at least `grain` items.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t begin, int64_t end)>& body);

  // The process-wide pool used by CPU kernels.
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  int64_t n_chunks_ = 0;
  int64_t next_chunk_ = 0;
  // Written under mutex_; atomic so that the spin before a wait may read them without it.
  std::atomic<int64_t> chunks_done_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
  std::mutex call_mutex_;  // one parallel_for at a time
};

}  // namespace dspark
