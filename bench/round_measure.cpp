// bench_round's measurements (round_measure.h).
#include "round_measure.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "bench_common.h"
#include "dspark/core/thread_cpu_time.h"
#include "dspark/engine/speculative.h"
#include "dspark/kv/paged_kv_cache.h"

namespace dspark::bench {

void RandomDraftSource::propose(Context&, std::span<const ProposeRequest> requests, Proposal& out) {
  for (const auto& r : requests) {
    for (int i = 0; i < r.max_tokens; ++i) out.tokens.push_back(dist_(gen_));
    out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
  }
}

PhaseMs measure(Model& target, Context& ctx, DraftSource* source, int gamma,
                const std::vector<std::vector<int32_t>>& prompts, int rounds, bool trace,
                bool cpu_times, const std::function<void()>& at_measured_run) {
  SpecConfig cfg;
  cfg.gamma = gamma;
  cfg.cpu_times = cpu_times;
  // Every row starts decoding at once: with several rows, no measured round shares the device
  // with another row's prefill chunks or runs at a smaller batch.
  cfg.prefill_first = true;
  // One engine for the warm-up and the measured runs, with the prompt prefix cache: where the
  // source needs no target taps (plain decode, random drafts) a later run reuses the first run's
  // prompt K/V and computes only the prompts' last page again, instead of every prompt (context
  // 16k x batch 16: 262k prompt tokens per run). Sources with taps prefill every run, as before.
  cfg.prefix_cache = true;
  // One request per prompt, each of exactly `n_rounds` full rounds' tokens (n_rounds <= rounds).
  auto requests = [&](int n_rounds) {
    std::vector<RequestInput> reqs;
    for (const std::vector<int32_t>& prompt : prompts) {
      RequestInput r;
      r.prompt = prompt;
      r.options.max_tokens = n_rounds * (gamma + 1) + 1;
      r.options.eos_token_ids = {};
      reqs.push_back(std::move(r));
    }
    return reqs;
  };
  // The KV capacity generate_speculative gives the longest run: the cached prompt pages of the
  // previous run are the ones the next run attaches, so a run never needs more.
  SpeculativeEngine engine(target, ctx, source, cfg,
                           static_cast<int>(speculative_kv_tokens(requests(rounds), cfg)));
  // A run to completion; the first row's telemetry (every row runs the same rounds).
  std::vector<double> step_ms;  // of the last run
  auto run = [&](int n_rounds) {
    RowId first = -1;
    for (RequestInput& r : requests(n_rounds)) {
      const RowId id = engine.add(std::move(r));
      if (first < 0) first = id;
    }
    SpecTelemetry spec;
    step_ms.clear();
    while (engine.has_work()) {
      const auto t0 = std::chrono::steady_clock::now();
      engine.step();
      step_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      for (auto& [id, o] : engine.take_finished())
        if (id == first) spec = std::move(o.spec);
    }
    return spec;
  };
  // Warm-up: kernel selection, buffers, and with graphs every capture the measured run needs
  // (one per forward shape and attention split count: the same rounds at the same context, at
  // least twice, since the first forward of a split count runs eagerly and the second captures;
  // again while a run still captured something, at most 4 runs: a capture inside the measured run
  // would add its instantiation to the round times).
  if (target.cuda_graphs()) {
    for (int i = 0; i < 4; ++i) {
      const int64_t captured = target.forward_stats().graph_captures;
      run(rounds);
      if (i >= 1 && target.forward_stats().graph_captures == captured) break;
    }
  } else {
    run(2);
  }
  target.reset_forward_stats();
  // The measured run: max_tokens fixes the number of rounds (none skipped or shortened).
  ctx.synchronize();
  if (at_measured_run) at_measured_run();
  if (trace) kernel_trace_start();
  const double cpu0 = thread_cpu_ms();
  const SpecTelemetry t = run(rounds);
  ctx.synchronize();
  const double cpu_ms = thread_cpu_ms() - cpu0;
  std::vector<TraceSpan> spans;
  if (trace) spans = kernel_trace_stop();
  PhaseMs m;
  m.step_ms = step_ms;
  m.trace = std::move(spans);
  m.stats = target.forward_stats();
  if (m.stats.step_forwards > 0)
    m.host_ms_per_forward = m.stats.step_host_ms / static_cast<double>(m.stats.step_forwards);
  m.rounds = static_cast<double>(t.rounds);
  if (t.rounds == 0) return m;
  m.cpu_ms = cpu_ms;
  m.cpu_ms_per_round = cpu_ms / static_cast<double>(t.rounds);  // the prefill included
  m.draft_cpu = t.draft_cpu_ms / t.rounds;
  m.verify_cpu = t.verify_cpu_ms / t.rounds;
  m.rest_cpu = t.rest_cpu_ms / t.rounds;
  m.verify_batch_cpu = t.verify_batch_cpu_ms / t.rounds;
  m.verify_forward_cpu = t.verify_forward_cpu_ms / t.rounds;
  m.verify_launch_cpu = t.verify_launch_cpu_ms / t.rounds;
  m.verify_read_cpu = t.verify_read_cpu_ms / t.rounds;
  m.verify_wait = t.verify_wait_ms / t.rounds;
  m.sync_wait = t.sync_wait_ms / t.rounds;
  m.draft_sync_wait = t.draft_sync_wait_ms / t.rounds;
  m.verify_sync_wait = t.verify_sync_wait_ms / t.rounds;
  m.draft = t.draft_ms / t.rounds;
  m.verify = t.verify_ms / t.rounds;
  m.rest = t.rest_ms / t.rounds;
  m.round = m.draft + m.verify + m.rest;
  return m;
}

std::string step_drift(const std::vector<double>& step_ms) {
  constexpr size_t kWindow = 8;
  if (step_ms.size() < 2 * kWindow + 1) return "";
  auto mean = [&](size_t from) {
    double sum = 0;
    for (size_t i = from; i < from + kWindow; ++i) sum += step_ms[i];
    return sum / kWindow;
  };
  return fmt::format("steps 2-{} {:.3f} ms, last {} {:.3f} ms", kWindow + 1, mean(1), kWindow,
                     mean(step_ms.size() - kWindow));
}

void ProfiledProposals::propose(Context& ctx, std::span<const ProposeRequest> requests,
                                Proposal& out) {
  set_op_profiling(true);
  inner().propose(ctx, requests, out);
  set_op_profiling(false);
  ++proposals_;
}

void SyncedCommits::commit(Context& ctx, std::span<const RowUpdate> updates,
                           std::span<const Tensor> taps) {
  inner().commit(ctx, updates, taps);
  ctx.synchronize();
}

void print_op_profile(const std::string& title, const std::vector<OpTime>& ops, double per,
                      nlohmann::json& j) {
  double total = 0;
  for (const OpTime& t : ops) total += t.ms;
  std::vector<std::vector<std::string>> op_rows;
  for (const OpTime& t : ops) {
    j[t.op] = {{"calls_per_forward", t.calls / per}, {"ms_per_forward", t.ms / per}};
    op_rows.push_back({t.op, fmt::format("{:.1f}", t.calls / per),
                       fmt::format("{:.2f}", 1e3 * t.ms / static_cast<double>(t.calls)),
                       fmt::format("{:.3f}", t.ms / per),
                       fmt::format("{:.1f}%", 100 * t.ms / total)});
  }
  std::printf(
      "%s (profiled: %.3f ms each)\n%s", title.c_str(), total / per,
      format_table({"op", "calls", "us per call", "ms per forward", "share"}, op_rows).c_str());
}

void report_trace(const std::string& title, const std::function<PhaseMs(int)>& traced_run,
                  int rounds, nlohmann::json& j, size_t top, const std::string& timeline_csv) {
  const PhaseMs a = traced_run(rounds), b = traced_run(2 * rounds);
  if (!timeline_csv.empty()) write_timeline_csv(timeline_csv, a.trace);
  const double units = b.rounds - a.rounds;
  const TimelineTotals t = summarize_timeline(b.trace).per_unit(summarize_timeline(a.trace), units);
  const double host_ms = b.round - t.sync_ms;
  j = {{"device_ops_per_round", t.ops},
       {"graph_ops_per_round", t.graph_ops},
       {"window_ms", t.window_ms},
       {"busy_ms", t.busy_ms},
       {"idle_ms", t.idle_ms()},
       {"mean_gap_us", t.mean_gap_us()},
       {"max_gap_us_longer_run", t.max_gap_us},
       {"gaps_over_5us_per_round", t.gaps_over_5us},
       {"host_blocked_ms", t.sync_ms},
       {"host_not_blocked_ms", host_ms},
       {"traced_round_ms", b.round},
       {"rounds_difference", units}};
  std::printf(
      "%s, per round (difference of %.0f and %.0f traced rounds): %.0f device ops (%.0f from "
      "graphs), busy %.3f of %.3f ms, idle %.3f ms; gap between ops mean %.2f us, %.1f gaps > 5 "
      "us (largest %.1f us); host blocked %.3f ms, not blocked %.3f ms (traced round %.3f ms)\n",
      title.c_str(), a.rounds, b.rounds, t.ops, t.graph_ops, t.busy_ms, t.window_ms, t.idle_ms(),
      t.mean_gap_us(), t.gaps_over_5us, t.max_gap_us, t.sync_ms, host_ms, b.round);
  const std::vector<KernelTime> kernels = kernel_times(b.trace, &a.trace);
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < std::min(top, kernels.size()); ++i) {
    const KernelTime& k = kernels[i];
    const std::string name = k.name.size() > 64 ? k.name.substr(0, 61) + "..." : k.name;
    j["kernels"].push_back(
        {{"name", k.name}, {"calls_per_round", k.calls / units}, {"ms_per_round", k.ms / units}});
    rows.push_back({name, fmt::format("{:.1f}", k.calls / units),
                    fmt::format("{:.2f}", 1e3 * k.ms / k.calls),
                    fmt::format("{:.3f}", k.ms / units)});
  }
  std::printf("%s", format_table({"kernel", "calls", "us per call", "ms per round"}, rows).c_str());
}

LoopMs forward_loop(Model& target, Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                    int width, int n) {
  constexpr int kPage = 16, kChunk = 512;
  int64_t pages = 0;
  for (const auto& prompt : prompts)
    pages += (static_cast<int64_t>(prompt.size()) + width) / kPage + 2;
  PagedKvCache kv(target.kv_shape(kPage, static_cast<int>(pages)), ctx.device());
  std::vector<SeqId> seqs;
  ForwardBatch step;
  step.row_indptr = {0};
  for (const auto& prompt : prompts) {
    const SeqId seq = kv.create_sequence();
    seqs.push_back(seq);
    const int context = static_cast<int>(prompt.size());
    for (int begin = 0; begin < context; begin += kChunk) {
      const int end = std::min(context, begin + kChunk);
      ForwardBatch b;
      b.tokens.assign(prompt.begin() + begin, prompt.begin() + end);
      b.row_indptr = {0, end - begin};
      b.seqs = {seq};
      target.forward(ctx, kv, b);
    }
    for (int i = 0; i < width; ++i) {
      step.logit_indices.push_back(static_cast<int32_t>(step.tokens.size()));
      step.tokens.push_back(prompt[static_cast<size_t>(i) % prompt.size()]);
    }
    step.row_indptr.push_back(static_cast<int32_t>(step.tokens.size()));
    step.seqs.push_back(seq);
  }
  auto run = [&](int count) {
    for (int i = 0; i < count; ++i) {
      target.forward(ctx, kv, step);
      for (size_t r = 0; r < seqs.size(); ++r)
        kv.rollback_to(seqs[r], static_cast<int>(prompts[r].size()));
    }
  };
  run(4);  // warm-up (with graphs: the eager step and the capture)
  ctx.synchronize();
  target.reset_forward_stats();
  const auto start = std::chrono::steady_clock::now();
  run(n);
  ctx.synchronize();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  LoopMs out;
  out.stats = target.forward_stats();
  out.ms = ms / n;
  out.host_ms = out.stats.host_ms / static_cast<double>(std::max<int64_t>(out.stats.forwards, 1));
  return out;
}

}  // namespace dspark::bench
