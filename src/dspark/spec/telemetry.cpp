#include "dspark/spec/telemetry.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace dspark {

void SpecTelemetry::record_round(int n_drafted, int n_accepted) {
  ++rounds;
  drafted += n_drafted;
  accepted += n_accepted;
  emitted += n_accepted + 1;
  if (static_cast<int>(drafted_at.size()) < n_drafted) {
    drafted_at.resize(static_cast<size_t>(n_drafted), 0);
    accepted_at.resize(static_cast<size_t>(n_drafted), 0);
  }
  for (int j = 0; j < n_drafted; ++j) ++drafted_at[static_cast<size_t>(j)];
  for (int j = 0; j < n_accepted; ++j) ++accepted_at[static_cast<size_t>(j)];
}

void SpecTelemetry::merge(const SpecTelemetry& o) {
  rounds += o.rounds;
  drafted += o.drafted;
  accepted += o.accepted;
  emitted += o.emitted;
  const size_t n = std::max(drafted_at.size(), o.drafted_at.size());
  drafted_at.resize(n, 0);
  accepted_at.resize(n, 0);
  for (size_t j = 0; j < o.drafted_at.size(); ++j) {
    drafted_at[j] += o.drafted_at[j];
    accepted_at[j] += o.accepted_at[j];
  }
  draft_ms += o.draft_ms;
  verify_ms += o.verify_ms;
  rest_ms += o.rest_ms;
  prefill_ms += o.prefill_ms;
  draft_cpu_ms += o.draft_cpu_ms;
  verify_cpu_ms += o.verify_cpu_ms;
  rest_cpu_ms += o.rest_cpu_ms;
  verify_batch_cpu_ms += o.verify_batch_cpu_ms;
  verify_forward_cpu_ms += o.verify_forward_cpu_ms;
  verify_launch_cpu_ms += o.verify_launch_cpu_ms;
  verify_read_cpu_ms += o.verify_read_cpu_ms;
  verify_wait_ms += o.verify_wait_ms;
  sync_wait_ms += o.sync_wait_ms;
  draft_sync_wait_ms += o.draft_sync_wait_ms;
  verify_sync_wait_ms += o.verify_sync_wait_ms;
  prefix_reused += o.prefix_reused;
  draft_budget += o.draft_budget;
  drafts_cut += o.drafts_cut;
  probes_offered += o.probes_offered;
  probes_taken += o.probes_taken;
  probes_accepted += o.probes_accepted;
  draft_policy = o.draft_policy;
}

nlohmann::json SpecTelemetry::to_json() const {
  nlohmann::json rate = nlohmann::json::array();
  for (size_t j = 0; j < drafted_at.size(); ++j)
    rate.push_back(drafted_at[j] > 0 ? static_cast<double>(accepted_at[j]) / drafted_at[j] : 0.0);
  nlohmann::json j{
      {"rounds", rounds},
      {"drafted", drafted},
      {"accepted", accepted},
      {"emitted", emitted},
      {"tau", tau()},
      {"acceptance", acceptance()},
      {"drafted_by_position", drafted_at},
      {"accepted_by_position", accepted_at},
      {"acceptance_by_position", rate},
      {"prefix_reused", prefix_reused},
      {"draft_policy", draft_policy_name(draft_policy)},
      {"mean_draft_length", mean_draft_length()},
      {"drafts_cut", drafts_cut},
      {"probes",
       {{"offered", probes_offered}, {"taken", probes_taken}, {"accepted", probes_accepted}}},
      {"timings_ms",
       {{"draft", draft_ms}, {"verify", verify_ms}, {"rest", rest_ms}, {"prefill", prefill_ms}}}};
  if (draft_cpu_ms + verify_cpu_ms + rest_cpu_ms > 0)
    j["cpu_timings_ms"] = {{"draft", draft_cpu_ms},
                           {"verify", verify_cpu_ms},
                           {"rest", rest_cpu_ms},
                           {"verify_batch", verify_batch_cpu_ms},
                           {"verify_forward", verify_forward_cpu_ms},
                           {"verify_launch", verify_launch_cpu_ms},
                           {"verify_read", verify_read_cpu_ms},
                           {"verify_wait_wall", verify_wait_ms},
                           {"sync_wait_wall", sync_wait_ms},
                           {"draft_sync_wait_wall", draft_sync_wait_ms},
                           {"verify_sync_wait_wall", verify_sync_wait_ms}};
  return j;
}

}  // namespace dspark
