// PhaseClock: the engine thread's clocks read at the boundaries between consecutive phases of one
// piece of work (a decode round's draft / verify / rest, a prefill chunk), so that the work itself
// reads as its phases and the timing as a list of boundaries. Every boundary (mark) reads the wall
// clock; with cpu_times also the thread's CPU time (core/thread_cpu_time.h, a system call) and the
// context's synchronise wall time (Context::synchronize_wall_ms, a counter, no clock read). A
// boundary inside a phase whose CPU time is split (mark_cpu) reads the CPU time only, and only with
// cpu_times. Without cpu_times a clock reads nothing but the wall clock, once per mark.
//
// `Mark` is an enum of the boundaries in order: its first enumerator is where the first phase
// begins (read by the constructor), and its last, `count`, is their number. The readings live in
// the object (no allocation); a clock lives for one piece of work. `Clocks` are the real clocks
// (EngineClocks) or a test's fake ones.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <utility>

#include "dspark/backend/context.h"
#include "dspark/core/thread_cpu_time.h"

namespace dspark {

// The engine thread's clocks: steady_clock, its CPU time, and `ctx`'s time inside synchronize().
struct EngineClocks {
  const Context* ctx = nullptr;
  static std::chrono::steady_clock::time_point wall() { return std::chrono::steady_clock::now(); }
  static double cpu_ms() { return thread_cpu_ms(); }
  double sync_ms() const { return ctx->synchronize_wall_ms(); }
};

template <class Mark, class Clocks = EngineClocks>
class PhaseClock {
 public:
  // Reads the first boundary (Mark{}).
  PhaseClock(Clocks clocks, bool cpu_times) : clocks_(std::move(clocks)), cpu_times_(cpu_times) {
    mark(Mark{});
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  // A boundary between phases: the wall clock, then (cpu_times) the CPU time and the sync time.
  void mark(Mark m) {
    const size_t i = index(m);
    wall_[i] = clocks_.wall();
    if (!cpu_times_) return;
    cpu_[i] = clocks_.cpu_ms();
    sync_[i] = clocks_.sync_ms();
  }
  // A boundary inside a phase: the CPU time only (cpu_times; nothing otherwise).
  void mark_cpu(Mark m) {
    if (cpu_times_) cpu_[index(m)] = clocks_.cpu_ms();
  }

  bool cpu_times() const { return cpu_times_; }
  // Wall milliseconds from boundary `from` to boundary `to` (both marked).
  double wall_ms(Mark from, Mark to) const {
    return std::chrono::duration<double, std::milli>(wall_[index(to)] - wall_[index(from)]).count();
  }
  // The CPU time read at `m` (0 unless read), and the span between two boundaries.
  double cpu_at(Mark m) const { return cpu_[index(m)]; }
  double cpu_ms(Mark from, Mark to) const { return cpu_at(to) - cpu_at(from); }
  // Wall milliseconds spent in Context::synchronize between two boundaries (0 unless read).
  double sync_ms(Mark from, Mark to) const { return sync_[index(to)] - sync_[index(from)]; }

 private:
  using TimePoint = decltype(std::declval<Clocks&>().wall());
  static constexpr size_t kMarks = static_cast<size_t>(Mark::count);
  static constexpr size_t index(Mark m) { return static_cast<size_t>(m); }

  Clocks clocks_;
  bool cpu_times_;
  std::array<TimePoint, kMarks> wall_{};
  std::array<double, kMarks> cpu_{}, sync_{};
};

}  // namespace dspark
