#include "kernel_trace.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "dspark/core/error.h"

#if DSPARK_HAVE_CUPTI
#include <cupti.h>
#endif

namespace dspark::bench {

#if DSPARK_HAVE_CUPTI
namespace {

std::mutex g_mutex;
std::vector<TraceSpan> g_spans;
bool g_running = false;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  DSPARK_FAIL(internal, "CUPTI {}: {}", what, msg ? msg : "unknown error");
}

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

bool is_blocking_call(std::string_view name) {
  return name.find("Synchronize") != std::string_view::npos || name == "cudaMemcpy" ||
         name == "cudaMemcpy_v3020" || name.starts_with("cudaMemcpy_") || name == "cudaMemset";
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<TraceSpan> spans;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    TraceSpan s;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        s = {TraceSpan::Kind::kernel, k->start, k->end, k->name ? k->name : "?", k->graphId};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        s = {TraceSpan::Kind::memcpy, m->start, m->end, "memcpy", m->graphId};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        s = {TraceSpan::Kind::memset, m->start, m->end, "memset", m->graphId};
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const char* name = nullptr;
        cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
        if (name == nullptr || !is_blocking_call(name)) continue;
        s = {TraceSpan::Kind::sync, a->start, a->end, name, 0};
        break;
      }
      default:
        continue;
    }
    spans.push_back(std::move(s));
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.insert(g_spans.end(), spans.begin(), spans.end());
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_RUNTIME};

}  // namespace

bool kernel_trace_available() {
  return true;
}

void kernel_trace_start() {
  DSPARK_CHECK(!g_running, "kernel trace already started");
  static const bool registered = [] {
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register");
    return true;
  }();
  (void)registered;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_spans.clear();
  }
  for (CUpti_ActivityKind k : kKinds) check(cuptiActivityEnable(k), "enable");
  g_running = true;
}

std::vector<TraceSpan> kernel_trace_stop() {
  DSPARK_CHECK(g_running, "kernel trace not started");
  for (CUpti_ActivityKind k : kKinds) check(cuptiActivityDisable(k), "disable");
  check(cuptiActivityFlushAll(1), "flush");
  g_running = false;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<TraceSpan> out = std::move(g_spans);
  g_spans.clear();
  std::sort(out.begin(), out.end(),
            [](const TraceSpan& a, const TraceSpan& b) { return a.start_ns < b.start_ns; });
  return out;
}

#else

bool kernel_trace_available() {
  return false;
}
void kernel_trace_start() {
  DSPARK_FAIL(unsupported, "bench built without CUPTI: no kernel trace");
}
std::vector<TraceSpan> kernel_trace_stop() {
  DSPARK_FAIL(unsupported, "bench built without CUPTI: no kernel trace");
}

#endif

TimelineTotals summarize_timeline(const std::vector<TraceSpan>& spans) {
  TimelineTotals s;
  uint64_t first = UINT64_MAX, last = 0, busy_end = 0;
  for (const TraceSpan& t : spans) {  // sorted by start
    if (t.kind == TraceSpan::Kind::sync) {
      s.sync_ms += static_cast<double>(t.end_ns - t.start_ns) / 1e6;
      continue;
    }
    s.ops += 1;
    if (t.graph_id != 0) s.graph_ops += 1;
    if (first == UINT64_MAX) {
      first = t.start_ns;
    } else {
      const double gap = t.start_ns > busy_end ? static_cast<double>(t.start_ns - busy_end) : 0.0;
      s.gap_ms += gap / 1e6;
      s.gaps += 1;
      s.max_gap_us = std::max(s.max_gap_us, gap / 1e3);
      if (gap > 5e3) s.gaps_over_5us += 1;
    }
    const uint64_t begin = std::max(t.start_ns, busy_end);
    if (t.end_ns > begin) s.busy_ms += static_cast<double>(t.end_ns - begin) / 1e6;
    busy_end = std::max(busy_end, t.end_ns);
    last = std::max(last, t.end_ns);
  }
  if (first != UINT64_MAX) s.window_ms = static_cast<double>(last - first) / 1e6;
  return s;
}

TimelineTotals TimelineTotals::per_unit(const TimelineTotals& o, double units) const {
  TimelineTotals d;
  if (units <= 0) return d;
  d.ops = (ops - o.ops) / units;
  d.graph_ops = (graph_ops - o.graph_ops) / units;
  d.window_ms = (window_ms - o.window_ms) / units;
  d.busy_ms = (busy_ms - o.busy_ms) / units;
  d.gap_ms = (gap_ms - o.gap_ms) / units;
  d.gaps = (gaps - o.gaps) / units;
  d.gaps_over_5us = (gaps_over_5us - o.gaps_over_5us) / units;
  d.max_gap_us = max_gap_us;
  d.sync_ms = (sync_ms - o.sync_ms) / units;
  return d;
}

std::vector<KernelTime> kernel_times(const std::vector<TraceSpan>& spans,
                                     const std::vector<TraceSpan>* minus) {
  std::map<std::string, KernelTime> by_name;
  auto add = [&](const std::vector<TraceSpan>& v, double sign) {
    for (const TraceSpan& t : v) {
      if (t.kind == TraceSpan::Kind::sync) continue;
      KernelTime& k = by_name[t.name];
      k.name = t.name;
      k.ms += sign * static_cast<double>(t.end_ns - t.start_ns) / 1e6;
      k.calls += sign;
    }
  };
  add(spans, 1.0);
  if (minus != nullptr) add(*minus, -1.0);
  std::vector<KernelTime> out;
  for (auto& [name, k] : by_name)
    if (k.calls > 0) out.push_back(std::move(k));
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.ms > b.ms; });
  return out;
}

void write_timeline_csv(const std::string& path, const std::vector<TraceSpan>& spans) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  DSPARK_CHECK(f != nullptr, "cannot write the timeline to {}", path);
  static constexpr const char* kKinds[] = {"kernel", "memcpy", "memset", "sync"};
  std::fprintf(f, "kind,start_ns,end_ns,graph_id,name\n");
  for (const TraceSpan& t : spans) {
    std::string name;  // quoted, quotes doubled: a demangled name may hold commas
    for (char c : t.name) {
      name += c;
      if (c == '"') name += c;
    }
    std::fprintf(f, "%s,%llu,%llu,%u,\"%s\"\n", kKinds[static_cast<int>(t.kind)],
                 static_cast<unsigned long long>(t.start_ns),
                 static_cast<unsigned long long>(t.end_ns), t.graph_id, name.c_str());
  }
  const bool ok = std::fclose(f) == 0;
  DSPARK_CHECK(ok, "cannot write the timeline to {}", path);
}

}  // namespace dspark::bench
