// CPU time consumed by the calling thread (CLOCK_THREAD_CPUTIME_ID), in milliseconds: what the
// engine's host work costs, apart from time spent waiting (with blocking synchronisation, a
// waiting thread sleeps and adds nothing). One clock read is a system call on most kernels
// (~0.2-1 us): for measurements, not for every step by default.
#pragma once

#include <ctime>

namespace dspark {

inline double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace dspark
