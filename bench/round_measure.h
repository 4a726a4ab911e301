// bench_round's measurements (round_bench.cpp wires them to the command line): speculative rounds
// through the real engine for B rows at a fixed context, with the round's phases, CPU clocks and
// an optional device timeline; target forwards back to back; the op profile of a draft step.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dspark/backend/context.h"
#include "dspark/backend/op_profile.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_source.h"
#include "kernel_trace.h"

namespace dspark::bench {

// Proposes exactly max_tokens random tokens per row: fixes the verify width.
class RandomDraftSource final : public DraftSource {
 public:
  explicit RandomDraftSource(int vocab) : dist_(0, vocab - 1) {}
  std::string name() const override { return "random"; }
  void begin(Context&, RowId, std::span<const int32_t>) override {}
  void commit(Context&, std::span<const RowUpdate>, std::span<const Tensor>) override {}
  void propose(Context&, std::span<const ProposeRequest> requests, Proposal& out) override;
  void release(RowId) override {}

 private:
  std::mt19937 gen_{3};
  std::uniform_int_distribution<int32_t> dist_;
};

struct PhaseMs {
  double draft = 0, verify = 0, rest = 0, round = 0;
  double rounds = 0;
  double host_ms_per_forward = 0;  // target forwards of the measured run (decode / verify)
  ForwardStats stats;              // of the measured run
  std::vector<TraceSpan> trace;    // with a trace: the measured run's device timeline
  double cpu_ms = 0;               // CPU time of this thread (the engine's) in the whole run
  double cpu_ms_per_round = 0;     // cpu_ms / rounds (the prefill included)
  // With cpu_times: the engine thread's CPU time per round in each phase (SpecTelemetry).
  double draft_cpu = 0, verify_cpu = 0, rest_cpu = 0;
  // verify_cpu in parts (SpecTelemetry::verify_batch_cpu_ms, ...): batch build, target forward,
  // verifier enqueue, readback wait + acceptance; and the wait's wall time.
  double verify_batch_cpu = 0, verify_forward_cpu = 0, verify_launch_cpu = 0, verify_read_cpu = 0;
  double verify_wait = 0;
  double sync_wait = 0;  // cpu_times: wall ms per round inside Context::synchronize
  double draft_sync_wait = 0, verify_sync_wait = 0;  // the part of it in those phases
  // Wall ms of each engine step of the measured run, in order: the first also prefills (the
  // prompts' last page), each later one is one round of every row.
  std::vector<double> step_ms;
};

// "steps 2-9 X ms, last 8 Y ms": the mean wall time of the first 8 rounds after the prefilling
// step and of the last 8 (whether steps slow down as a run goes on); empty for < 17 steps.
std::string step_drift(const std::vector<double>& step_ms);

// Per-round means over `rounds` rounds of one request per prompt (all rows decode in every round:
// no end of sequence, the same max_tokens) after a warm-up run. With `trace`, the measured run is
// recorded through CUPTI (kernel_trace.h), which slows launches: its times are for the timeline.
// `at_measured_run` (optional) is called after the warm-up runs, right before the measured one
// (e.g. to snapshot a draft source's counters).
PhaseMs measure(Model& target, Context& ctx, DraftSource* source, int gamma,
                const std::vector<std::vector<int32_t>>& prompts, int rounds, bool trace = false,
                bool cpu_times = false, const std::function<void()>& at_measured_run = {});

// Forwards to a draft source and profiles its propose() calls only (op profiler on around them):
// the ops of the draft step, apart from the target's verify forward.
class ProfiledProposals final : public ForwardingDraftSource {
 public:
  using ForwardingDraftSource::ForwardingDraftSource;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override;
  int64_t proposals() const { return proposals_; }

 private:
  int64_t proposals_ = 0;
};

// Forwards to a draft source and waits for the device at the end of every commit(), so that the
// engine's draft phase (propose) starts on an idle device: its time is the draft step alone, and
// the rest phase holds the commit's device work (the context projection of the committed rows),
// which otherwise runs asynchronously into the next draft phase.
class SyncedCommits final : public ForwardingDraftSource {
 public:
  using ForwardingDraftSource::ForwardingDraftSource;
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override;
};

// Prints the op profile `ops` (take_op_profile) per `per` calls of what was profiled, and stores
// it under j.
void print_op_profile(const std::string& title, const std::vector<OpTime>& ops, double per,
                      nlohmann::json& j);

// Traces the measurement twice, with `rounds` and 2 x `rounds` rounds, and prints / stores the
// difference per round: the prefill and the warm-up cancel out. Host time not blocked = the
// longer run's wall time per round minus the time per round its thread spent blocked in CUDA
// synchronisation. The `top` kernels by device time per round follow. A non-empty `timeline_csv`
// also gets the shorter run's raw timeline (write_timeline_csv).
void report_trace(const std::string& title, const std::function<PhaseMs(int)>& traced_run,
                  int rounds, nlohmann::json& j, size_t top, const std::string& timeline_csv = "");

// `n` target forwards of `width` tokens per row (all logits), one row per prompt, back to back
// at a fixed context (the KV is rolled back after each forward, a host-only operation), one
// synchronisation at the end: the time per forward when the host runs ahead of the GPU, i.e.
// device time including the gaps between kernels, plus the host time per forward.
struct LoopMs {
  double ms = 0, host_ms = 0;
  ForwardStats stats;
};
LoopMs forward_loop(Model& target, Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                    int width, int n);

}  // namespace dspark::bench
