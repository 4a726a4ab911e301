#include "dspark/server/metrics.h"

#include <fmt/format.h>

namespace dspark::server {
namespace {

const std::vector<double> kLatencyBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                            1,     2.5,  5,     10,   30,  60,   120};

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void line(std::string& out, std::string_view name, T value) {
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, std::string_view name) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

ServerMetrics::ServerMetrics() : ttft_(kLatencyBounds), latency_(kLatencyBounds) {}

void ServerMetrics::record_response(std::string_view route, int status) {
  std::lock_guard lock(mutex_);
  ++responses_[{std::string(route), status}];
}

void ServerMetrics::record_error(std::string_view kind) {
  std::lock_guard lock(mutex_);
  ++errors_[std::string(kind)];
}

void ServerMetrics::record_finished(const RequestOutput& out, double ttft_s, double latency_s) {
  std::lock_guard lock(mutex_);
  ++finished_[std::string(finish_reason_name(out.result.finish_reason))];
  prompt_tokens_ += out.result.n_prompt;
  prefix_reused_tokens_ += out.spec.prefix_reused;
  generation_tokens_ += out.result.n_generated;
  drafted_ += out.spec.drafted;
  accepted_ += out.spec.accepted;
  rounds_ += out.spec.rounds;
  emitted_ += out.spec.emitted;
  draft_budget_ += out.spec.draft_budget;
  probes_offered_ += out.spec.probes_offered;
  probes_taken_ += out.spec.probes_taken;
  probes_accepted_ += out.spec.probes_accepted;
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  latency_.observe(latency_s);
}

void ServerMetrics::record_step(bool failed) {
  std::lock_guard lock(mutex_);
  ++steps_;
  if (failed) ++step_failures_;
}

void ServerMetrics::set_gauges(const EngineGauges& g) {
  std::lock_guard lock(mutex_);
  gauges_ = g;
}

EngineGauges ServerMetrics::gauges() const {
  std::lock_guard lock(mutex_);
  return gauges_;
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  header(out, "dspark_http_responses_total", "counter", "HTTP responses by route and status.");
  for (const auto& [key, n] : responses_)
    out += fmt::format("dspark_http_responses_total{{route=\"{}\",status=\"{}\"}} {}\n", key.first,
                       key.second, n);
  header(out, "dspark_errors_total", "counter", "Error responses and stream errors by kind.");
  for (const auto& [kind, n] : errors_)
    out += fmt::format("dspark_errors_total{{kind=\"{}\"}} {}\n", kind, n);
  header(out, "dspark_requests_finished_total", "counter",
         "Requests that left the engine, by finish reason (eos, stop, length, cancelled, error).");
  for (const auto& [reason, n] : finished_)
    out += fmt::format("dspark_requests_finished_total{{reason=\"{}\"}} {}\n", reason, n);

  header(out, "dspark_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  line(out, "dspark_prompt_tokens_total", prompt_tokens_);
  header(out, "dspark_prefix_reused_tokens_total", "counter",
         "Prompt tokens whose target KV came from the prefix cache (not recomputed).");
  line(out, "dspark_prefix_reused_tokens_total", prefix_reused_tokens_);
  header(out, "dspark_generation_tokens_total", "counter",
         "Generated tokens of finished requests.");
  line(out, "dspark_generation_tokens_total", generation_tokens_);
  header(out, "dspark_spec_drafted_tokens_total", "counter", "Draft tokens proposed.");
  line(out, "dspark_spec_drafted_tokens_total", drafted_);
  header(out, "dspark_spec_accepted_tokens_total", "counter", "Draft tokens accepted.");
  line(out, "dspark_spec_accepted_tokens_total", accepted_);
  header(out, "dspark_spec_rounds_total", "counter", "Target verify forwards (per request row).");
  line(out, "dspark_spec_rounds_total", rounds_);
  header(out, "dspark_spec_emitted_tokens_total", "counter", "Tokens emitted by decode rounds.");
  line(out, "dspark_spec_emitted_tokens_total", emitted_);
  header(out, "dspark_spec_tau", "gauge",
         "Tokens emitted per target forward over finished requests (emitted / rounds).");
  line(out, "dspark_spec_tau", rounds_ > 0 ? static_cast<double>(emitted_) / rounds_ : 0.0);
  header(out, "dspark_spec_acceptance_rate", "gauge", "Accepted / drafted tokens.");
  line(out, "dspark_spec_acceptance_rate",
       drafted_ > 0 ? static_cast<double>(accepted_) / drafted_ : 0.0);
  header(out, "dspark_spec_draft_policy", "gauge",
         "The draft length policy (--draft-policy): 1 for the one in use.");
  for (const DraftPolicy p : {DraftPolicy::adaptive, DraftPolicy::fixed})
    out += fmt::format("dspark_spec_draft_policy{{policy=\"{}\"}} {}\n", draft_policy_name(p),
                       p == gauges_.draft_policy ? 1 : 0);
  header(out, "dspark_spec_mean_draft_length", "gauge",
         "Mean draft length the policy chose per round over finished requests (the most the "
         "draft source was asked for).");
  line(out, "dspark_spec_mean_draft_length",
       rounds_ > 0 ? static_cast<double>(draft_budget_) / rounds_ : 0.0);
  header(out, "dspark_spec_probes_total", "counter",
         "Rounds of finished requests in which the adaptive policy offered a row that had stopped "
         "drafting one draft again (offered), took it (taken), and it was accepted (accepted).");
  out += fmt::format("dspark_spec_probes_total{{outcome=\"offered\"}} {}\n", probes_offered_);
  out += fmt::format("dspark_spec_probes_total{{outcome=\"taken\"}} {}\n", probes_taken_);
  out += fmt::format("dspark_spec_probes_total{{outcome=\"accepted\"}} {}\n", probes_accepted_);

  header(out, "dspark_engine_steps_total", "counter", "Engine steps run.");
  line(out, "dspark_engine_steps_total", steps_);
  header(out, "dspark_engine_step_failures_total", "counter",
         "Engine steps that threw (their requests were failed, the server kept serving).");
  line(out, "dspark_engine_step_failures_total", step_failures_);

  header(out, "dspark_queue_depth", "gauge", "Requests waiting for admission.");
  line(out, "dspark_queue_depth", gauges_.queue_depth);
  header(out, "dspark_live_rows", "gauge", "Requests being decoded.");
  line(out, "dspark_live_rows", gauges_.live_rows);
  header(out, "dspark_max_batch", "gauge", "Live rows at most (--max-batch).");
  line(out, "dspark_max_batch", gauges_.max_batch);
  header(out, "dspark_kv_pages_used", "gauge", "Target KV cache pages in use (reserved).");
  line(out, "dspark_kv_pages_used", gauges_.kv_pages_used);
  header(out, "dspark_kv_pages_total", "gauge", "Target KV cache pages.");
  line(out, "dspark_kv_pages_total", gauges_.kv_pages_total);
  header(out, "dspark_kv_pages_cached", "gauge",
         "Pages of published prompt prefixes (held by requests or idle; idle ones are reused or "
         "evicted on demand and count as free).");
  line(out, "dspark_kv_pages_cached", gauges_.kv_pages_cached);
  header(out, "dspark_kv_page_size_tokens", "gauge", "Tokens per KV page.");
  line(out, "dspark_kv_page_size_tokens", gauges_.kv_page_size);

  header(out, "dspark_time_to_first_text_seconds", "histogram",
         "From submission to the first streamed text.");
  ttft_.render(out, "dspark_time_to_first_text_seconds");
  header(out, "dspark_request_latency_seconds", "histogram",
         "From submission to the end of the request.");
  latency_.render(out, "dspark_request_latency_seconds");
  return out;
}

}  // namespace dspark::server
