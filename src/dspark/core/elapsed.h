// Wall-clock milliseconds since a steady_clock time point (the host timings in stats).
#pragma once

#include <chrono>

namespace dspark {

inline double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dspark
