// Per-request speculative decoding telemetry: rounds, drafted / accepted tokens (in total and by
// draft position), tau (tokens emitted per target forward in the decode rounds) and time per phase.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/spec/draft_length.h"

namespace dspark {

struct SpecTelemetry {
  int64_t rounds = 0;               // target verify forwards
  int64_t drafted = 0;              // draft tokens proposed
  int64_t accepted = 0;             // draft tokens accepted
  int64_t emitted = 0;              // tokens produced by the rounds (accepted + the target's token)
  std::vector<int64_t> drafted_at;  // [position] proposals that reached draft position j
  std::vector<int64_t> accepted_at;  // [position] proposals whose draft j was accepted
  double draft_ms = 0;               // DraftSource::propose
  double verify_ms = 0;              // target forward + verification (includes the one device read)
  double rest_ms = 0;                // commit, KV rollback, emission, host bookkeeping
  double prefill_ms = 0;             // prompt forwards, first token and the source's prompt commit
  // The engine thread's CPU time in the same three phases of the decode rounds, when
  // SpecConfig::cpu_times is on (zero otherwise).
  double draft_cpu_ms = 0, verify_cpu_ms = 0, rest_cpu_ms = 0;
  // verify_cpu_ms split (cpu_times only; the four add up to it): building the verify batch; the
  // target's Model::forward (validation, KV plan, metadata staging, graph launch or eager
  // enqueue); the verifier enqueueing its kernels and the readback; waiting for the readback (the
  // device's forward and acceptance; with blocking sync the thread sleeps, so this is the cost of
  // the wait itself) and the host acceptance loop. verify_wait_ms: the wall time of that last part.
  double verify_batch_cpu_ms = 0, verify_forward_cpu_ms = 0, verify_launch_cpu_ms = 0,
         verify_read_cpu_ms = 0, verify_wait_ms = 0;
  // cpu_times only: wall time the engine thread spent in Context::synchronize during the rounds
  // (the drafter's and the verifier's readback waits). With spinning waits (the CUDA default) that
  // time is CPU time too, so draft + verify + rest CPU minus it is the rounds' host work outside
  // the waits. draft_ / verify_sync_wait_ms: the part of it inside those phases (the rest's is the
  // difference), so that the host work outside the waits can be split by phase.
  double sync_wait_ms = 0, draft_sync_wait_ms = 0, verify_sync_wait_ms = 0;
  int64_t prefix_reused = 0;  // prompt tokens whose target KV came from the prefix cache
  // The draft policy of the rounds, and the sum over rounds of the draft length it chose (the
  // most the source was asked for; it may propose fewer): draft_budget / rounds is the mean
  // chosen draft length.
  DraftPolicy draft_policy = DraftPolicy::fixed;
  int64_t draft_budget = 0;
  // Drafts the adaptive policy cut after the source rated them (Proposal::acceptance): proposed,
  // never verified, not counted in drafted.
  int64_t drafts_cut = 0;
  // The adaptive policy's probes (spec/draft_length.h, DraftProbe): rounds a stopped row was
  // offered one draft at the prior, those the policy took, and those whose draft was accepted.
  int64_t probes_offered = 0, probes_taken = 0, probes_accepted = 0;
  double mean_draft_length() const {
    return rounds > 0 ? static_cast<double>(draft_budget) / rounds : 0.0;
  }

  void record_round(int n_drafted, int n_accepted);
  double tau() const { return rounds > 0 ? static_cast<double>(emitted) / rounds : 0.0; }
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0; }
  void merge(const SpecTelemetry& other);
  nlohmann::json to_json() const;
};

}  // namespace dspark
