// The device timeline of a window of work, through CUPTI's activity API (bench-only; compiled
// with CUPTI when CMake finds it, otherwise kernel_trace_available() is false): every kernel,
// memcpy and memset with its device start and end, and the runtime API calls that block the host
// (stream / event / device synchronisation, synchronous copies) with their host start and end.
// CUPTI puts both on one clock. Records are flushed at kernel_trace_stop().
//
// What it measures that events cannot: kernel durations without event overhead, the idle time
// of the GPU between kernels ("host gaps": nothing queued), and the host time spent blocked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dspark::bench {

struct TraceSpan {
  enum class Kind { kernel, memcpy, memset, sync };
  Kind kind = Kind::kernel;
  uint64_t start_ns = 0, end_ns = 0;
  std::string name;
  uint32_t graph_id = 0;  // kernels: the graph that launched it (0: launched directly)
};

bool kernel_trace_available();
// Starts recording (throws when unavailable or already started).
void kernel_trace_start();
// Stops, flushes and returns the window's records sorted by start.
std::vector<TraceSpan> kernel_trace_stop();

// Totals over the device ops (kernels, copies, sets) of a window. Per-round figures without the
// prefill: the difference of two windows that differ only in their number of rounds (per_unit).
struct TimelineTotals {
  double ops = 0, graph_ops = 0;  // device ops, of them launched by graphs
  double window_ms = 0;           // first op start to last op end
  double busy_ms = 0;             // union of the ops
  double gap_ms = 0, gaps = 0;    // idle time between consecutive ops, and their number
  double gaps_over_5us = 0;
  double max_gap_us = 0;  // the largest (not a difference: of the longer window)
  double sync_ms = 0;     // host time blocked in synchronising calls
  double idle_ms() const { return window_ms - busy_ms; }
  double mean_gap_us() const { return gaps > 0 ? 1e3 * gap_ms / gaps : 0.0; }
  // (this - shorter) / units, max_gap_us kept.
  TimelineTotals per_unit(const TimelineTotals& shorter, double units) const;
};
TimelineTotals summarize_timeline(const std::vector<TraceSpan>& spans);

// The device time per kernel name (sum, calls) of `spans` minus those of `minus` (when given),
// largest first.
struct KernelTime {
  std::string name;
  double ms = 0;
  double calls = 0;
};
std::vector<KernelTime> kernel_times(const std::vector<TraceSpan>& spans,
                                     const std::vector<TraceSpan>* minus = nullptr);

// Writes `spans` as CSV (kind, start_ns, end_ns, graph_id, name in double quotes; one span per
// line, in order) to `path`: the raw timeline, for boundaries that totals hide. Throws when the
// file cannot be written.
void write_timeline_csv(const std::string& path, const std::vector<TraceSpan>& spans);

}  // namespace dspark::bench
