// A fixed pool of worker threads for CPU kernels: parallel_for splits [0, n) into contiguous
// chunks, runs them on the workers and the calling thread, and returns when all are done.
// Exceptions thrown by the body are rethrown on the calling thread (never cross threads silently).
// Idle workers and the waiting caller spin briefly before they sleep: a decode step is a chain of
// calls of 20-140 us each, and waking a sleeping thread takes ~20 us. Chunks are claimed and
// counted with atomics, so a running call takes no lock: on 2 cores a mutex per chunk made the
// threads collide and sleep in the kernel (futex calls) within calls.
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
  void worker_loop();
  // Claims and runs chunks of the call in claim_ until none is left; returns its generation.
  uint32_t run_chunks();

  std::vector<std::thread> workers_;
  // The current call, written by the caller before it publishes the call's generation in claim_
  // and read only by a thread that claimed one of its chunks (the call is open until that chunk
  // is counted).
  const std::function<void(int64_t, int64_t)>* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  // generation (32 bits) | chunks of the call (16) | next chunk to claim (16): one compare-exchange
  // claims a chunk only if it belongs to the call the claimer read.
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> chunks_done_{0};
  // Threads asleep (or about to sleep) on wake_, and whether the caller sleeps on done_: each side
  // stores, then loads the other's flag (sequentially consistent), so no wake-up is lost.
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;  // for sleeping only
  std::condition_variable wake_;
  std::condition_variable done_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::mutex call_mutex_;  // one parallel_for at a time
};

}  // namespace dspark
