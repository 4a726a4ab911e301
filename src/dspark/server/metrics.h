// Server metrics in the Prometheus text exposition format (GET /metrics): requests by route and
// status, errors by kind, finished requests by reason, tokens in/out, speculation counters and tau,
// latency histograms, and the engine gauges (queue depth, live rows, KV pages). Thread-safe: HTTP
// handler threads and the engine thread record into it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dspark/engine/speculative.h"

namespace dspark::server {

// Cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "<name>_bucket{le=...} n" lines, then _sum and _count.
  void render(std::string& out, std::string_view name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

struct EngineGauges {
  int queue_depth = 0;  // requests waiting for admission
  int live_rows = 0;    // requests in the engine
  int kv_pages_used = 0;
  int kv_pages_total = 0;
  int kv_pages_cached = 0;  // published prompt-prefix pages (held or idle)
  int kv_page_size = 0;
  int max_batch = 0;
  DraftPolicy draft_policy = DraftPolicy::fixed;  // the engine's (ServedModel::draft_policy)
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One HTTP response on a route ("chat", "completions", "models", "health", "metrics", "other").
  void record_response(std::string_view route, int status);
  // One error response (or stream error) by kind (ApiError::kind()).
  void record_error(std::string_view kind);
  // A request that left the engine: its tokens, speculation counters, finish reason, and times
  // from submission to the first text and to the end (seconds; ttft < 0 when no text came).
  void record_finished(const RequestOutput& out, double ttft_s, double latency_s);
  void record_step(bool failed);
  void set_gauges(const EngineGauges& g);
  EngineGauges gauges() const;

  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> responses_;
  std::map<std::string, int64_t> errors_;
  std::map<std::string, int64_t> finished_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, prefix_reused_tokens_ = 0;
  int64_t drafted_ = 0, accepted_ = 0, rounds_ = 0, emitted_ = 0, draft_budget_ = 0;
  int64_t probes_offered_ = 0, probes_taken_ = 0, probes_accepted_ = 0;
  int64_t steps_ = 0, step_failures_ = 0;
  Histogram ttft_, latency_;
  EngineGauges gauges_;
};

}  // namespace dspark::server
