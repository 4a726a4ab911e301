// bench_round: the cost of one speculative round's phases against one plain decode step, at a
// fixed context, through the real engine (host synchronisation included):
//   - plain decode step (no drafts);
//   - verify forwards of exactly k drafted tokens (a source proposing k random tokens), k in
//     --verify-k;
//   - with --draft: the draft step (DraftSource::propose), the verify, the rest, the whole round;
//   - with --graphs: the decode step and the verify widths again with CUDA-graph replay of the
//     target forward (Model::set_cuda_graphs), next to the eager figures of the same run; and
//     target forwards of 1 and k + 1 tokens back to back at the fixed context (no engine, one
//     synchronisation at the end), eager vs graphs: device time per forward including the gaps
//     between kernels, when the host runs ahead; and with --draft the rounds again with graphs
//     (the target's forwards and a DSpark drafter's greedy rounds replayed), as a multiple of the
//     graphed decode step.
// Every row also reports the host (CPU) time per target forward: from entering Model::forward to
// the end of enqueueing (ForwardStats::step_host_ms; prefill chunks excluded).
// Random weights are fine: costs do not depend on values (acceptance does, and is not measured
// here; random drafts are rejected, so every round drafts the full gamma).
//
//   bench_round -m TARGET [--draft SRC] [--gamma 16] [--context 1024] [--rounds 32]
//               [--verify-k 1,16,32] [--graphs] [--trace] [--blocking-sync] [--profile-ops]
//               [--device cuda] [--json FILE]
// --profile-ops: device time per op (linear, paged_attention, rms_norm, ...) of eager forwards of
// 1 and k + 1 tokens at the fixed context (backend/op_profile.h), and with --draft of the draft
// step alone, as tables and in the JSON.
// --trace (a bench built with CUPTI, bench/kernel_trace.h): with --graphs, the graphed decode
// step's and the graphed round's device timeline from a separate traced run: device ops, busy and
// idle time, the gaps between ops (the host gaps), host time blocked in synchronisation and not,
// and the kernels by device time.
// --blocking-sync: waiting host threads sleep (cudaDeviceScheduleBlockingSync), so the CPU time per
// graphed round it reports is the engine's own host work, not spinning in synchronisation: the
// difference of two runs (R and 2R rounds, so the prefill and setup cancel), and per phase of the
// round (draft / verify / rest, SpecConfig::cpu_times).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/backend/op_profile.h"
#include "dspark/core/buffer.h"
#include "dspark/core/thread_cpu_time.h"
#include "dspark/engine/speculative.h"
#include "dspark/spec/dspark/dspark_source.h"
#include "dspark/spec/source_factory.h"
#include "kernel_trace.h"

namespace dspark::bench {
namespace {

// Proposes exactly max_tokens random tokens: fixes the verify width.
class RandomDraftSource final : public DraftSource {
 public:
  explicit RandomDraftSource(int vocab) : dist_(0, vocab - 1) {}
  std::string name() const override { return "random"; }
  void begin(Context&, RowId, std::span<const int32_t>) override {}
  void commit(Context&, std::span<const RowUpdate>, std::span<const Tensor>) override {}
  void propose(Context&, std::span<const ProposeRequest> requests, Proposal& out) override {
    for (const auto& r : requests) {
      for (int i = 0; i < r.max_tokens; ++i) out.tokens.push_back(dist_(gen_));
      out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
    }
  }
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
};

// Per-round means over `rounds` rounds after a warm-up request.
// With `trace`, the measured run is recorded through CUPTI (kernel_trace.h), which slows launches:
// its times are for the timeline only.
PhaseMs measure(Model& target, Context& ctx, DraftSource* source, int gamma,
                const std::vector<int32_t>& prompt, int rounds, bool trace = false,
                bool cpu_times = false) {
  SpecConfig cfg;
  cfg.gamma = gamma;
  cfg.cpu_times = cpu_times;
  auto run = [&](int n_rounds) {
    RequestInput r;
    r.prompt = prompt;
    r.options.max_tokens = n_rounds * (gamma + 1) + 1;
    r.options.eos_token_ids = {};
    auto out = generate_speculative(target, ctx, source, {std::move(r)}, cfg);
    return out[0].spec;
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
  // Fix the number of rounds: cap max_tokens so that no round can be skipped or shortened.
  SpecConfig fixed = cfg;
  RequestInput r;
  r.prompt = prompt;
  r.options.eos_token_ids = {};
  r.options.max_tokens = rounds * (gamma + 1) + 1;
  ctx.synchronize();
  if (trace) kernel_trace_start();
  const double cpu0 = thread_cpu_ms();
  auto out = generate_speculative(target, ctx, source, {std::move(r)}, fixed);
  ctx.synchronize();
  const double cpu_ms = thread_cpu_ms() - cpu0;
  std::vector<TraceSpan> spans;
  if (trace) spans = kernel_trace_stop();
  const SpecTelemetry& t = out[0].spec;
  PhaseMs m;
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
  m.draft = t.draft_ms / t.rounds;
  m.verify = t.verify_ms / t.rounds;
  m.rest = t.rest_ms / t.rounds;
  m.round = m.draft + m.verify + m.rest;
  return m;
}

// Forwards to a draft source and profiles its propose() calls only (op profiler on around them):
// the ops of the draft step, apart from the target's verify forward.
class ProfiledProposals final : public ForwardingDraftSource {
 public:
  using ForwardingDraftSource::ForwardingDraftSource;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    set_op_profiling(true);
    inner().propose(ctx, requests, out);
    set_op_profiling(false);
    ++proposals_;
  }
  int64_t proposals() const { return proposals_; }

 private:
  int64_t proposals_ = 0;
};

// Prints the op profile `ops` (take_op_profile) per `per` calls of what was profiled, and stores
// it under j[key].
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

// Traces the measurement twice, with `rounds` and 2 x `rounds` rounds, and prints / stores the
// difference per round: the prefill and the warm-up cancel out. Host time not blocked = the
// longer run's wall time per round minus the time per round its thread spent blocked in CUDA
// synchronisation. The `top` kernels by device time per round follow.
void report_trace(const std::string& title, const std::function<PhaseMs(int)>& traced_run,
                  int rounds, nlohmann::json& j, size_t top) {
  const PhaseMs a = traced_run(rounds), b = traced_run(2 * rounds);
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

// `n` target forwards of `width` tokens (all logits) back to back at a fixed context (the KV is
// rolled back after each forward, a host-only operation), one synchronisation at the end: the time
// per forward when the host runs ahead of the GPU, i.e. device time including the gaps between
// kernels, plus the host time per forward.
struct LoopMs {
  double ms = 0, host_ms = 0;
  ForwardStats stats;
};

LoopMs forward_loop(Model& target, Context& ctx, const std::vector<int32_t>& prompt, int width,
                    int n) {
  constexpr int kPage = 16, kChunk = 512;
  const int context = static_cast<int>(prompt.size());
  PagedKvCache kv(target.kv_shape(kPage, (context + width) / kPage + 2), ctx.device());
  const SeqId seq = kv.create_sequence();
  for (int begin = 0; begin < context; begin += kChunk) {
    const int end = std::min(context, begin + kChunk);
    ForwardBatch b;
    b.tokens.assign(prompt.begin() + begin, prompt.begin() + end);
    b.row_indptr = {0, end - begin};
    b.seqs = {seq};
    target.forward(ctx, kv, b);
  }
  ForwardBatch step;
  for (int i = 0; i < width; ++i) {
    step.tokens.push_back(prompt[static_cast<size_t>(i) % prompt.size()]);
    step.logit_indices.push_back(i);
  }
  step.row_indptr = {0, width};
  step.seqs = {seq};
  auto run = [&](int count) {
    for (int i = 0; i < count; ++i) {
      target.forward(ctx, kv, step);
      kv.rollback_to(seq, context);
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

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : split_list(s)) out.push_back(std::stoi(item));
  return out;
}

int main_impl(int argc, char** argv) {
  std::string draft_vocab;
  std::string model, draft = "none", device_name = "cuda", json_file, verify_list = "1,16,32";
  int gamma = 16, context = 1024, rounds = 32;
  bool graphs = false, profile_ops = false, trace = false, blocking_sync = false;
  CLI::App app{"bench_round: speculative round phases vs a plain decode step"};
  app.add_option("-m,--model", model, "target model directory")->required();
  app.add_option("--draft", draft, "draft source (as dspark generate --draft)");
  app.add_option("--draft-vocab", draft_vocab, "as dspark generate --draft-vocab");
  app.add_option("--gamma", gamma, "drafts per round for --draft")->check(CLI::Range(1, 64));
  app.add_option("--context", context, "prompt (context) length")->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", rounds, "measured rounds")->check(CLI::Range(1, 100000));
  app.add_option("--verify-k", verify_list, "verify widths (drafted tokens) to time");
  app.add_flag("--graphs", graphs,
               "also time decode and verify with CUDA-graph replay of the target forward");
  app.add_flag("--trace", trace,
               "also record the decode step's and the round's device timeline (CUPTI): idle "
               "gaps between kernels, host time blocked, kernel times");
  app.add_flag("--blocking-sync", blocking_sync,
               "CUDA: waiting host threads sleep instead of spinning, so the CPU time per round "
               "reported is the host's own work (slower rounds: each wait wakes up late)");
  app.add_option("--device", device_name, "cpu | cuda | cuda:N");
  app.add_option("--json", json_file, "also write the JSON result here");
  app.add_flag("--profile-ops", profile_ops,
               "also time every op of eager forwards of 1 and k + 1 tokens (device time per op)");
  CLI11_PARSE(app, argc, argv);
  if (trace && !kernel_trace_available()) {
    std::fprintf(stderr, "error: --trace needs a bench built with CUPTI\n");
    return 2;
  }
  if (trace && (!graphs || device_name == "cpu")) {
    std::fprintf(stderr,
                 "error: --trace traces the graphed decode step and round: it needs "
                 "--graphs and a CUDA device\n");
    return 2;
  }

  const Device device = parse_device(device_name);
  if (blocking_sync && device.is_cuda()) cuda::set_blocking_sync(device.index);
  Context ctx(device);
  const DType dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  const double bandwidth = device.is_cuda() ? cuda::measure_copy_bandwidth(device.index) : 0.0;
  const int64_t before = memory_stats(device).active_bytes;
  std::unique_ptr<Model> target = load_model(model, device, dtype);
  const double weight_bytes = static_cast<double>(memory_stats(device).active_bytes - before);
  const double kv_token = kv_bytes_per_token(target->config(), dtype);
  const std::vector<int32_t> prompt =
      random_token_prompts(1, context, target->config().vocab_size, 11)[0];

  nlohmann::json j = {
      {"model", model},   {"device", device.name()},      {"context", context},
      {"rounds", rounds}, {"weight_bytes", weight_bytes}, {"copy_bandwidth_gbs", bandwidth / 1e9}};
  std::vector<std::vector<std::string>> rows;
  auto host_cell = [](const PhaseMs& p) {
    return fmt::format("host {:.3f} ms", p.host_ms_per_forward);
  };
  target->set_cuda_graphs(false);  // the eager figures first, whatever DSPARK_CUDA_GRAPHS says
  const PhaseMs plain = measure(*target, ctx, nullptr, 0, prompt, rounds);
  const double step_bytes = weight_bytes + kv_token * (context + rounds / 2.0);
  const double gbs = step_bytes / (plain.round * 1e-3) / 1e9;
  j["decode_step_ms"] = plain.round;
  j["decode_gbs"] = gbs;
  j["decode_fraction_of_copy_bandwidth"] = bandwidth > 0 ? gbs * 1e9 / bandwidth : 0.0;
  j["decode_host_ms_per_forward"] = plain.host_ms_per_forward;
  rows.push_back({"decode step", fmt::format("{:.3f}", plain.round), "1.00",
                  fmt::format("{:.0f} GB/s, {}", gbs, host_cell(plain))});

  RandomDraftSource random_source(target->config().vocab_size);
  const std::vector<int> widths = parse_list(verify_list);
  for (int k : widths) {
    const PhaseMs v = measure(*target, ctx, &random_source, k, prompt, rounds);
    j["verify_ms"][std::to_string(k)] = v.verify;
    j["verify_host_ms_per_forward"][std::to_string(k)] = v.host_ms_per_forward;
    rows.push_back({fmt::format("verify {} drafts", k), fmt::format("{:.3f}", v.verify),
                    fmt::format("{:.2f}", v.verify / plain.round), host_cell(v)});
  }
  double graphed_decode_ms = 0;
  if (graphs) {
    target->set_cuda_graphs(true);
    auto graph_json = [](const PhaseMs& p, double ms) {
      return nlohmann::json{{"ms", ms},
                            {"host_ms_per_forward", p.host_ms_per_forward},
                            {"forwards", p.stats.forwards},
                            {"graph_replays", p.stats.graph_replays},
                            {"graph_captures", p.stats.graph_captures},
                            {"graph_fallbacks", p.stats.graph_fallbacks}};
    };
    const PhaseMs g = measure(*target, ctx, nullptr, 0, prompt, rounds);
    graphed_decode_ms = g.round;
    const double g_gbs = step_bytes / (g.round * 1e-3) / 1e9;
    j["graphs"]["decode_step_ms"] = g.round;
    j["graphs"]["decode_gbs"] = g_gbs;
    j["graphs"]["decode_fraction_of_copy_bandwidth"] =
        bandwidth > 0 ? g_gbs * 1e9 / bandwidth : 0.0;
    j["graphs"]["decode"] = graph_json(g, g.round);
    j["graphs"]["decode_speedup"] = plain.round / g.round;
    if (trace)
      report_trace(
          "decode step (graphs, traced)",
          [&](int n) { return measure(*target, ctx, nullptr, 0, prompt, n, true); }, rounds,
          j["graphs"]["decode_trace"], 16);
    rows.push_back({"decode step (graphs)", fmt::format("{:.3f}", g.round),
                    fmt::format("{:.2f}", g.round / plain.round),
                    fmt::format("{:.0f} GB/s, {}, {} of {} replayed", g_gbs, host_cell(g),
                                g.stats.graph_replays, g.stats.step_forwards)});
    for (int k : widths) {
      const PhaseMs v = measure(*target, ctx, &random_source, k, prompt, rounds);
      j["graphs"]["verify_ms"][std::to_string(k)] = v.verify;
      j["graphs"]["verify"][std::to_string(k)] = graph_json(v, v.verify);
      rows.push_back({fmt::format("verify {} drafts (graphs)", k), fmt::format("{:.3f}", v.verify),
                      fmt::format("{:.2f}", v.verify / plain.round),
                      fmt::format("{}, {} of {} replayed", host_cell(v), v.stats.graph_replays,
                                  v.stats.step_forwards)});
    }
    // Back-to-back forwards (no engine, no per-step synchronisation): device-bound time.
    std::vector<int> loop_widths = {1};
    for (int k : widths) loop_widths.push_back(k + 1);
    for (int w : loop_widths) {
      target->set_cuda_graphs(false);
      const LoopMs e = forward_loop(*target, ctx, prompt, w, rounds);
      target->set_cuda_graphs(true);
      const LoopMs gl = forward_loop(*target, ctx, prompt, w, rounds);
      j["forward_loop"][std::to_string(w)] = {{"eager_ms", e.ms},
                                              {"eager_host_ms", e.host_ms},
                                              {"graphs_ms", gl.ms},
                                              {"graphs_host_ms", gl.host_ms},
                                              {"graph_replays", gl.stats.graph_replays},
                                              {"forwards", gl.stats.forwards}};
      rows.push_back({fmt::format("{} tokens x{} back to back, eager", w, rounds),
                      fmt::format("{:.3f}", e.ms), fmt::format("{:.2f}", e.ms / plain.round),
                      fmt::format("host {:.3f} ms", e.host_ms)});
      rows.push_back({fmt::format("{} tokens x{} back to back, graphs", w, rounds),
                      fmt::format("{:.3f}", gl.ms), fmt::format("{:.2f}", gl.ms / plain.round),
                      fmt::format("host {:.3f} ms, {} of {} replayed", gl.host_ms,
                                  gl.stats.graph_replays, gl.stats.forwards)});
    }
    target->set_cuda_graphs(false);
  }
  if (profile_ops) {  // device time per op of eager forwards (backend/op_profile.h)
    std::vector<int> loop_widths = {1};
    for (int k : widths) loop_widths.push_back(k + 1);
    target->set_cuda_graphs(false);
    for (int w : loop_widths) {
      set_op_profiling(true);
      const LoopMs e = forward_loop(*target, ctx, prompt, w, rounds);
      set_op_profiling(false);
      const double forwards = rounds + 4.0;  // forward_loop's warm-up forwards are recorded too
      print_op_profile(fmt::format("ops of a {}-token forward at context {} (eager, {:.3f} ms "
                                   "unprofiled)",
                                   w, context, e.ms),
                       take_op_profile(), forwards, j["op_profile"][std::to_string(w)]);
    }
  }
  if (draft != "none") {
    DraftOptions o;
    o.draft = draft;
    o.draft_vocab = draft_vocab;
    CreatedSource created = create_draft_source(o, *target);
    const PhaseMs s = measure(*target, ctx, created.source.get(), gamma, prompt, rounds);
    j["draft"] = {{"source", draft},
                  {"kind", created.kind},
                  {"gamma", gamma},
                  {"draft_ms", s.draft},
                  {"verify_ms", s.verify},
                  {"rest_ms", s.rest},
                  {"round_ms", s.round},
                  {"rounds", s.rounds},
                  {"draft_over_decode", s.draft / plain.round},
                  {"round_over_decode", s.round / plain.round}};
    rows.push_back({fmt::format("draft step ({} x{})", created.kind, gamma),
                    fmt::format("{:.3f}", s.draft), fmt::format("{:.2f}", s.draft / plain.round),
                    ""});
    rows.push_back({"  verify", fmt::format("{:.3f}", s.verify),
                    fmt::format("{:.2f}", s.verify / plain.round), ""});
    rows.push_back({"  rest (commit, rollback, emit)", fmt::format("{:.3f}", s.rest),
                    fmt::format("{:.2f}", s.rest / plain.round), ""});
    rows.push_back({"full round", fmt::format("{:.3f}", s.round),
                    fmt::format("{:.2f}", s.round / plain.round), ""});
    if (graphs) {  // the same rounds with the target's (and a DSpark drafter's) graphs
      target->set_cuda_graphs(true);
      const auto* dspark = dynamic_cast<const DSparkSource*>(created.source.get());
      const PhaseMs gs = measure(*target, ctx, created.source.get(), gamma, prompt, rounds);
      const DSparkStats ds = dspark ? dspark->dspark_stats() : DSparkStats{};
      if (trace)
        report_trace(
            "DSpark round (graphs, traced)",
            [&](int n) {
              return measure(*target, ctx, created.source.get(), gamma, prompt, n, true);
            },
            rounds, j["graphs"]["round_trace"], 24);
      // Host CPU per round: two runs (rounds and 2 x rounds) with the engine's per-phase CPU
      // clocks, differenced so that the prefill and the setup cancel out. Only meaningful with
      // --blocking-sync (spinning waits burn CPU while the device works).
      double cpu_round = gs.cpu_ms_per_round;
      PhaseMs cpu2;
      if (blocking_sync) {
        const PhaseMs cpu1 =
            measure(*target, ctx, created.source.get(), gamma, prompt, rounds, false, true);
        cpu2 = measure(*target, ctx, created.source.get(), gamma, prompt, 2 * rounds, false, true);
        if (cpu2.rounds > cpu1.rounds)
          cpu_round = (cpu2.cpu_ms - cpu1.cpu_ms) / (cpu2.rounds - cpu1.rounds);
        j["graphs"]["cpu_per_round_ms"] = {{"total", cpu_round},
                                           {"draft", cpu2.draft_cpu},
                                           {"verify", cpu2.verify_cpu},
                                           {"rest", cpu2.rest_cpu},
                                           {"rounds", {cpu1.rounds, cpu2.rounds}}};
      }
      target->set_cuda_graphs(false);
      const double dec = graphed_decode_ms;
      j["graphs"]["draft"] = {{"draft_ms", gs.draft},
                              {"verify_ms", gs.verify},
                              {"rest_ms", gs.rest},
                              {"round_ms", gs.round},
                              {"rounds", gs.rounds},
                              {"draft_over_decode", gs.draft / dec},
                              {"round_over_decode", gs.round / dec},
                              {"drafter_graph_replays", ds.n_graph_replays},
                              {"drafter_graph_captures", ds.n_graph_captures},
                              {"drafter_graph_fallbacks", ds.n_graph_fallbacks},
                              {"drafter_rounds", ds.n_rounds},
                              {"cpu_ms_per_round", cpu_round},
                              {"blocking_sync", blocking_sync}};
      const std::string replayed =
          dspark ? fmt::format("drafter: {} of {} rounds replayed (whole run)", ds.n_graph_replays,
                               ds.n_rounds)
                 : std::string("drafter eager");
      rows.push_back({fmt::format("draft step ({} x{}, graphs)", created.kind, gamma),
                      fmt::format("{:.3f}", gs.draft), fmt::format("{:.2f}", gs.draft / dec),
                      replayed});
      rows.push_back({"  verify (graphs)", fmt::format("{:.3f}", gs.verify),
                      fmt::format("{:.2f}", gs.verify / dec), ""});
      rows.push_back({"  rest (graphs)", fmt::format("{:.3f}", gs.rest),
                      fmt::format("{:.2f}", gs.rest / dec), ""});
      rows.push_back({"full round (graphs)", fmt::format("{:.3f}", gs.round),
                      fmt::format("{:.2f}", gs.round / dec),
                      fmt::format("x graphed decode step; CPU {:.3f} ms per round{}", cpu_round,
                                  blocking_sync ? " (blocking sync)" : " (spinning waits)")});
      if (blocking_sync)
        rows.push_back({"  CPU per round: draft / verify / rest",
                        fmt::format("{:.3f}", cpu2.draft_cpu + cpu2.verify_cpu + cpu2.rest_cpu), "",
                        fmt::format("{:.3f} / {:.3f} / {:.3f} ms (engine thread, blocking sync)",
                                    cpu2.draft_cpu, cpu2.verify_cpu, cpu2.rest_cpu)});
    }
    if (profile_ops) {  // the ops of the draft step alone (eager, as measured above)
      (void)take_op_profile();
      ProfiledProposals profiled(*created.source);
      (void)measure(*target, ctx, &profiled, gamma, prompt, rounds);
      print_op_profile(fmt::format("ops of a draft step ({} x{}; {:.3f} ms unprofiled)",
                                   created.kind, gamma, s.draft),
                       take_op_profile(), static_cast<double>(profiled.proposals()),
                       j["op_profile"]["draft"]);
    }
  }
  std::printf("%s", format_table({"phase", "ms", "x decode step", ""}, rows).c_str());
  if (bandwidth > 0)
    std::printf("copy bandwidth %.0f GB/s; weights %.2f GB; context %d\n", bandwidth / 1e9,
                weight_bytes / 1e9, context);
  std::printf("%s\n", j.dump().c_str());
  if (!json_file.empty()) std::ofstream(json_file) << j.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  try {
    return dspark::bench::main_impl(argc, argv);
  } catch (const dspark::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
