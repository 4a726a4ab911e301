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
// the end of enqueueing (ForwardStats::step_host_ms; prefill chunks excluded). The JSON also holds
// the wall time of every engine step of each measured run ("decode_steps_ms", "verify_steps_ms",
// "round_steps_ms"; the first step also prefills), and the graphed rows are followed by the mean
// of rounds 2-9 against the last 8 when a run has 17 steps or more (whether a short run's steps
// are representative).
// Random weights are fine: costs do not depend on values (acceptance does, and is not measured
// here; random drafts are rejected, so every round drafts the full gamma).
//
//   bench_round -m TARGET [--draft SRC] [--gamma 16] [--context 1024] [--batch 1] [--rounds 32]
//               [--verify-k 1,16,32] [--graphs] [--trace [--trace-timeline CSV]] [--blocking-sync]
//               [--profile-ops] [--device cuda] [--json FILE]
// --batch B: B rows (requests) of --context random tokens each decode together (all prefilled
// before the first round: SpecConfig::prefill_first); the decode step
// reports tok/s (B per step) and reads the weights once plus every row's K/V (of a MoE model's
// routed experts only the share B rows choose: "step_weight_bytes" in the JSON). --context and
// --batch take comma lists (e.g. --context 512,4096,16384 --batch 1,4,16): every combination is
// measured in turn with the model loaded once, one table each, and the JSON holds them under
// "runs" (a single combination keeps the flat layout).
// --profile-ops: device time per op (linear, paged_attention, rms_norm, ...) of eager forwards of
// 1 and k + 1 tokens at the fixed context (backend/op_profile.h), and with --draft of the draft
// step alone, as tables and in the JSON.
// --trace (a bench built with CUPTI, bench/kernel_trace.h): with --graphs, the graphed decode
// step's and the graphed round's device timeline from a separate traced run: device ops, busy and
// idle time, the gaps between ops (the host gaps), host time blocked in synchronisation and not,
// and the kernels by device time. --trace-timeline CSV also writes the raw timelines: the traced
// round run's to CSV, the traced decode steps' to CSV with .decode before the extension
// (bench/timeline_summary.py summarises either).
// With --draft and --graphs, the graphed rounds run once more with the device synchronised after
// each commit: "draft step alone" is then the drafter's propose on an idle device (in the normal
// round, the commit's context projection, enqueued asynchronously, still runs when the next draft
// phase starts and is counted there), and its rest phase holds the commit's device time.
// --blocking-sync: waiting host threads sleep (cudaDeviceScheduleBlockingSync), so the CPU time per
// graphed round it reports is the engine's own host work, not spinning in synchronisation: the
// difference of two runs (R and 2R rounds, so the prefill and setup cancel), and per phase of the
// round (draft / verify / rest, SpecConfig::cpu_times) and of the verify phase (batch build,
// target forward, verifier launch, readback wait + acceptance).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/backend/op_profile.h"
#include "dspark/core/buffer.h"
#include "dspark/spec/dspark/dspark_source.h"
#include "dspark/spec/source_factory.h"
#include "kernel_trace.h"
#include "round_measure.h"

namespace dspark::bench {
namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : split_list(s)) out.push_back(std::stoi(item));
  return out;
}

// Where --trace-timeline's decode steps go: ".decode" before the extension of the round's file
// (t.csv: t.decode.csv; t: t.decode); none without --trace-timeline.
std::string decode_timeline_path(const std::string& round_path) {
  if (round_path.empty()) return "";
  const size_t slash = round_path.find_last_of('/');
  const size_t dot = round_path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return round_path + ".decode";
  return round_path.substr(0, dot) + ".decode" + round_path.substr(dot);
}

struct Options {
  std::string model, draft = "none", draft_vocab, device_name = "cuda", json_file;
  std::string trace_timeline;  // with --trace: the traced round's raw timeline (CSV) here, and
                               // the decode steps' (decode_timeline_path)
  std::string verify_list = "1,16,32", context_list = "1024", batch_list = "1";
  int gamma = 16, rounds = 32;
  bool draft_fp8 = false;
  bool graphs = false, profile_ops = false, trace = false, blocking_sync = false;
  bool graphs_only = false;  // with graphs: no eager verify widths, no back-to-back loops
  bool exact = false;        // batch-invariant numerics (Tuning::batch_invariant)
};

// One (context, batch) configuration: `batch` rows of `context` random tokens each, every
// measurement of the command line on them; prints its table and returns its JSON.
nlohmann::json run_config(const Options& o, Model& target, Context& ctx, CreatedSource* created,
                          int context, int batch, double bandwidth, double weight_bytes) {
  const DType dtype = ctx.device().is_cuda() ? DType::bf16 : DType::f32;
  const double kv_token = kv_bytes_per_token(target.config(), dtype);
  const std::vector<std::vector<int32_t>> prompts =
      random_token_prompts(batch, context, target.config().vocab_size, 11);
  const std::vector<int> widths = parse_list(o.verify_list);
  std::vector<std::vector<std::string>> rows;
  auto host_cell = [](const PhaseMs& p) {
    return fmt::format("host {:.3f} ms", p.host_ms_per_forward);
  };
  target.set_cuda_graphs(false);  // the eager figures first, whatever DSPARK_CUDA_GRAPHS says
  const PhaseMs plain = measure(target, ctx, nullptr, 0, prompts, o.rounds);
  nlohmann::json j = {{"context", context}, {"batch", batch}};
  // Bytes a decode step reads: the weights once, every row's K/V (the context grows by half the
  // measured rounds on average). Of a MoE model's routed experts only the share the step's rows
  // choose: 1 - (1 - k / E)^batch of them for rows routed independently and uniformly.
  const ModelConfig& mc = target.config();
  const double routed = static_cast<double>(target.routed_expert_bytes());
  const double share =
      mc.num_experts > 0
          ? 1.0 - std::pow(1.0 - static_cast<double>(mc.num_experts_per_tok) / mc.num_experts,
                           static_cast<double>(batch))
          : 1.0;
  const double read_weight_bytes = weight_bytes - routed * (1.0 - share);
  const double step_bytes = read_weight_bytes + kv_token * batch * (context + o.rounds / 2.0);
  j["step_weight_bytes"] = read_weight_bytes;
  const double gbs = step_bytes / (plain.round * 1e-3) / 1e9;
  const double tok_s = batch / (plain.round * 1e-3);
  j["decode_step_ms"] = plain.round;
  j["decode_steps_ms"] = plain.step_ms;
  j["decode_gbs"] = gbs;
  j["decode_fraction_of_copy_bandwidth"] = bandwidth > 0 ? gbs * 1e9 / bandwidth : 0.0;
  j["decode_host_ms_per_forward"] = plain.host_ms_per_forward;
  j["decode_tok_per_s"] = tok_s;
  rows.push_back({"decode step", fmt::format("{:.3f}", plain.round), "1.00",
                  fmt::format("{:.0f} tok/s, {:.0f} GB/s, {}", tok_s, gbs, host_cell(plain))});

  RandomDraftSource random_source(target.config().vocab_size);
  for (int k : o.graphs_only ? std::vector<int>{} : widths) {
    const PhaseMs v = measure(target, ctx, &random_source, k, prompts, o.rounds);
    j["verify_ms"][std::to_string(k)] = v.verify;
    j["verify_host_ms_per_forward"][std::to_string(k)] = v.host_ms_per_forward;
    rows.push_back({fmt::format("verify {} drafts", k), fmt::format("{:.3f}", v.verify),
                    fmt::format("{:.2f}", v.verify / plain.round), host_cell(v)});
  }
  double graphed_decode_ms = 0;
  if (o.graphs) {
    target.set_cuda_graphs(true);
    // Host time per replayed step forward, and its metadata staging and graph launch.
    auto per_replay = [](const ForwardStats& s, double total) {
      return s.step_replays > 0 ? total / static_cast<double>(s.step_replays) : 0.0;
    };
    auto graph_json = [&](const PhaseMs& p, double ms) {
      return nlohmann::json{
          {"ms", ms},
          {"host_ms_per_forward", p.host_ms_per_forward},
          {"host_ms_per_replay", per_replay(p.stats, p.stats.step_replay_host_ms)},
          {"stage_ms_per_replay", per_replay(p.stats, p.stats.step_stage_ms)},
          {"launch_ms_per_replay", per_replay(p.stats, p.stats.step_launch_ms)},
          {"forwards", p.stats.forwards},
          {"graph_replays", p.stats.graph_replays},
          {"graph_captures", p.stats.graph_captures},
          {"graph_fallbacks", p.stats.graph_fallbacks}};
    };
    auto replay_cell = [&](const PhaseMs& p) {
      return fmt::format("replays: host {:.3f} ms (stage {:.3f}, launch {:.3f}), {} of {}",
                         per_replay(p.stats, p.stats.step_replay_host_ms),
                         per_replay(p.stats, p.stats.step_stage_ms),
                         per_replay(p.stats, p.stats.step_launch_ms), p.stats.graph_replays,
                         p.stats.step_forwards);
    };
    const PhaseMs g = measure(target, ctx, nullptr, 0, prompts, o.rounds);
    graphed_decode_ms = g.round;
    const double g_gbs = step_bytes / (g.round * 1e-3) / 1e9;
    j["graphs"]["decode_step_ms"] = g.round;
    j["graphs"]["decode_steps_ms"] = g.step_ms;
    j["graphs"]["decode_gbs"] = g_gbs;
    j["graphs"]["decode_fraction_of_copy_bandwidth"] =
        bandwidth > 0 ? g_gbs * 1e9 / bandwidth : 0.0;
    j["graphs"]["decode"] = graph_json(g, g.round);
    j["graphs"]["decode_speedup"] = plain.round / g.round;
    j["graphs"]["decode_tok_per_s"] = batch / (g.round * 1e-3);
    if (o.trace)
      report_trace(
          "decode step (graphs, traced)",
          [&](int n) { return measure(target, ctx, nullptr, 0, prompts, n, true); }, o.rounds,
          j["graphs"]["decode_trace"], 16, decode_timeline_path(o.trace_timeline));
    rows.push_back({"decode step (graphs)", fmt::format("{:.3f}", g.round),
                    fmt::format("{:.2f}", g.round / plain.round),
                    fmt::format("{:.0f} tok/s, {:.0f} GB/s, {}; {}", batch / (g.round * 1e-3),
                                g_gbs, host_cell(g), replay_cell(g))});
    if (const std::string d = step_drift(g.step_ms); !d.empty())
      rows.push_back({"  decode steps (graphs)", "", "", d});
    for (int k : widths) {
      const PhaseMs v = measure(target, ctx, &random_source, k, prompts, o.rounds);
      j["graphs"]["verify_ms"][std::to_string(k)] = v.verify;
      j["graphs"]["verify"][std::to_string(k)] = graph_json(v, v.verify);
      j["graphs"]["verify_steps_ms"][std::to_string(k)] = v.step_ms;
      rows.push_back({fmt::format("verify {} drafts (graphs)", k), fmt::format("{:.3f}", v.verify),
                      fmt::format("{:.2f}", v.verify / plain.round),
                      fmt::format("{}; {}", host_cell(v), replay_cell(v))});
      if (const std::string d = step_drift(v.step_ms); !d.empty())
        rows.push_back({fmt::format("  verify {} steps (graphs)", k), "", "", d});
    }
    // Back-to-back forwards (no engine, no per-step synchronisation): device-bound time.
    std::vector<int> loop_widths = {1};
    for (int k : widths) loop_widths.push_back(k + 1);
    if (o.graphs_only) loop_widths.clear();
    for (int w : loop_widths) {
      target.set_cuda_graphs(false);
      const LoopMs e = forward_loop(target, ctx, prompts, w, o.rounds);
      target.set_cuda_graphs(true);
      const LoopMs gl = forward_loop(target, ctx, prompts, w, o.rounds);
      j["forward_loop"][std::to_string(w)] = {{"eager_ms", e.ms},
                                              {"eager_host_ms", e.host_ms},
                                              {"graphs_ms", gl.ms},
                                              {"graphs_host_ms", gl.host_ms},
                                              {"graph_replays", gl.stats.graph_replays},
                                              {"forwards", gl.stats.forwards}};
      rows.push_back({fmt::format("{} tokens x{} back to back, eager", w, o.rounds),
                      fmt::format("{:.3f}", e.ms), fmt::format("{:.2f}", e.ms / plain.round),
                      fmt::format("host {:.3f} ms", e.host_ms)});
      rows.push_back({fmt::format("{} tokens x{} back to back, graphs", w, o.rounds),
                      fmt::format("{:.3f}", gl.ms), fmt::format("{:.2f}", gl.ms / plain.round),
                      fmt::format("host {:.3f} ms, {} of {} replayed", gl.host_ms,
                                  gl.stats.graph_replays, gl.stats.forwards)});
    }
    target.set_cuda_graphs(false);
  }
  if (o.profile_ops) {  // device time per op of eager forwards (backend/op_profile.h)
    std::vector<int> loop_widths = {1};
    for (int k : widths) loop_widths.push_back(k + 1);
    target.set_cuda_graphs(false);
    for (int w : loop_widths) {
      set_op_profiling(true);
      const LoopMs e = forward_loop(target, ctx, prompts, w, o.rounds);
      set_op_profiling(false);
      const double forwards = o.rounds + 4.0;  // forward_loop's warm-up forwards are recorded too
      print_op_profile(fmt::format("ops of a {}-token forward at context {} (eager, {:.3f} ms "
                                   "unprofiled)",
                                   w, context, e.ms),
                       take_op_profile(), forwards, j["op_profile"][std::to_string(w)]);
    }
  }
  if (created != nullptr) {
    const int gamma = o.gamma;
    const PhaseMs s = measure(target, ctx, created->source.get(), gamma, prompts, o.rounds);
    j["draft"] = {{"source", o.draft},
                  {"fp8_weights", o.draft_fp8},
                  {"kind", created->kind},
                  {"gamma", gamma},
                  {"draft_ms", s.draft},
                  {"verify_ms", s.verify},
                  {"rest_ms", s.rest},
                  {"round_ms", s.round},
                  {"rounds", s.rounds},
                  {"draft_over_decode", s.draft / plain.round},
                  {"round_over_decode", s.round / plain.round}};
    rows.push_back({fmt::format("draft step ({} x{})", created->kind, gamma),
                    fmt::format("{:.3f}", s.draft), fmt::format("{:.2f}", s.draft / plain.round),
                    ""});
    rows.push_back({"  verify", fmt::format("{:.3f}", s.verify),
                    fmt::format("{:.2f}", s.verify / plain.round), ""});
    rows.push_back({"  rest (commit, rollback, emit)", fmt::format("{:.3f}", s.rest),
                    fmt::format("{:.2f}", s.rest / plain.round), ""});
    rows.push_back({"full round", fmt::format("{:.3f}", s.round),
                    fmt::format("{:.2f}", s.round / plain.round), ""});
    if (o.graphs) {  // the same rounds with the target's (and a DSpark drafter's) graphs
      target.set_cuda_graphs(true);
      const auto* dspark = dynamic_cast<const DSparkSource*>(created->source.get());
      // With the engine's per-phase CPU clocks (seven clock reads per round): with spinning waits,
      // the rounds' host work outside Context::synchronize is their CPU time minus the wall time
      // spent inside it.
      // The drafter's counters before the measured run (after measure's warm-up runs).
      DSparkStats ds0{};
      const PhaseMs gs =
          measure(target, ctx, created->source.get(), gamma, prompts, o.rounds, false, true, [&] {
            if (dspark) ds0 = dspark->dspark_stats();
          });
      const DSparkStats ds1 = dspark ? dspark->dspark_stats() : DSparkStats{};
      // The drafter rounds of that measured run and those of them that replayed a graph.
      const int64_t gs_drafter_rounds = ds1.n_rounds - ds0.n_rounds;
      const int64_t gs_drafter_replays = ds1.n_graph_replays - ds0.n_graph_replays;
      const double host_work = gs.draft_cpu + gs.verify_cpu + gs.rest_cpu - gs.sync_wait;
      // The same by phase (spinning waits): CPU in the phase minus its wall time in synchronize.
      const double draft_work = gs.draft_cpu - gs.draft_sync_wait;
      const double verify_work = gs.verify_cpu - gs.verify_sync_wait;
      const double rest_work = host_work - draft_work - verify_work;
      // The draft step alone: the same graphed rounds with the device idle when propose starts
      // (SyncedCommits), and the commit's device time in the rest phase.
      SyncedCommits synced(*created->source);
      const PhaseMs alone = measure(target, ctx, &synced, gamma, prompts, o.rounds);
      const DSparkStats ds = dspark ? dspark->dspark_stats() : DSparkStats{};
      if (o.trace)
        report_trace(
            "DSpark round (graphs, traced)",
            [&](int n) {
              return measure(target, ctx, created->source.get(), gamma, prompts, n, true);
            },
            o.rounds, j["graphs"]["round_trace"], 24, o.trace_timeline);
      // Host CPU per round: two runs (rounds and 2 x rounds) with the engine's per-phase CPU
      // clocks, differenced so that the prefill and the setup cancel out. Only meaningful with
      // --blocking-sync (spinning waits burn CPU while the device works).
      double cpu_round = gs.cpu_ms_per_round;
      PhaseMs cpu2;
      if (o.blocking_sync) {
        const PhaseMs cpu1 =
            measure(target, ctx, created->source.get(), gamma, prompts, o.rounds, false, true);
        cpu2 =
            measure(target, ctx, created->source.get(), gamma, prompts, 2 * o.rounds, false, true);
        if (cpu2.rounds > cpu1.rounds)
          cpu_round = (cpu2.cpu_ms - cpu1.cpu_ms) / (cpu2.rounds - cpu1.rounds);
        j["graphs"]["cpu_per_round_ms"] = {{"total", cpu_round},
                                           {"draft", cpu2.draft_cpu},
                                           {"verify", cpu2.verify_cpu},
                                           {"rest", cpu2.rest_cpu},
                                           {"rounds", {cpu1.rounds, cpu2.rounds}}};
        // The verify phase in parts (CPU of the engine thread per round), next to the wall
        // times of the target forward's replays (ForwardStats) and of the readback wait.
        const ForwardStats& fs = cpu2.stats;
        const double replays = static_cast<double>(std::max<int64_t>(fs.step_replays, 1));
        j["graphs"]["cpu_per_round_ms"]["verify_parts"] = {
            {"batch", cpu2.verify_batch_cpu},
            {"forward", cpu2.verify_forward_cpu},
            {"verifier_launch", cpu2.verify_launch_cpu},
            {"readback", cpu2.verify_read_cpu},
            {"readback_wait_wall", cpu2.verify_wait},
            {"forward_replays", fs.step_replays},
            {"forward_wall_per_replay", fs.step_replay_host_ms / replays},
            {"forward_stage_wall_per_replay", fs.step_stage_ms / replays},
            {"forward_launch_wall_per_replay", fs.step_launch_ms / replays}};
      }
      target.set_cuda_graphs(false);
      const double dec = graphed_decode_ms;
      j["graphs"]["draft"] = {
          {"draft_ms", gs.draft},
          {"verify_ms", gs.verify},
          {"rest_ms", gs.rest},
          {"round_ms", gs.round},
          {"rounds", gs.rounds},
          {"draft_over_decode", gs.draft / dec},
          {"round_over_decode", gs.round / dec},
          {"draft_alone_ms", alone.draft},
          {"draft_alone_over_decode", alone.draft / dec},
          {"commit_synced_ms", alone.rest},
          {"drafter_graph_replays", ds.n_graph_replays},
          {"drafter_graph_captures", ds.n_graph_captures},
          {"drafter_graph_fallbacks", ds.n_graph_fallbacks},
          {"drafter_rounds", ds.n_rounds},
          {"cpu_ms_per_round", cpu_round},
          {"blocking_sync", o.blocking_sync},
          {"round_cpu_ms", gs.draft_cpu + gs.verify_cpu + gs.rest_cpu},
          {"round_sync_wait_ms", gs.sync_wait},
          {"round_host_work_outside_waits_ms", host_work},
          {"round_steps_ms", gs.step_ms},
          {"round_host_work_outside_waits_by_phase_ms",
           {{"draft", draft_work}, {"verify", verify_work}, {"rest", rest_work}}},
          // The verify phase's host work in parts (spinning waits: the readback's CPU minus the
          // wall time of its wait): batch build, target forward (staging and graph launch),
          // verifier enqueue, readback and acceptance.
          {"round_host_work_verify_parts_ms",
           {{"batch", gs.verify_batch_cpu},
            {"forward", gs.verify_forward_cpu},
            {"verifier_launch", gs.verify_launch_cpu},
            {"readback", gs.verify_read_cpu - gs.verify_wait}}},
          // The measured run of those rounds alone: target step forwards (verifies; prefill chunks
          // above ForwardStats::kStepTokens excluded) and drafter rounds that replayed a graph.
          {"measured_run",
           {{"target_step_forwards", gs.stats.step_forwards},
            {"target_step_replays", gs.stats.step_replays},
            {"target_graph_captures", gs.stats.graph_captures},
            {"drafter_rounds", gs_drafter_rounds},
            {"drafter_graph_replays", gs_drafter_replays},
            {"drafter_graph_captures", ds1.n_graph_captures - ds0.n_graph_captures}}}};
      const std::string replayed =
          dspark ? fmt::format("drafter: {} of {} rounds replayed (whole run)", ds.n_graph_replays,
                               ds.n_rounds)
                 : std::string("drafter eager");
      rows.push_back({fmt::format("draft step ({} x{}, graphs)", created->kind, gamma),
                      fmt::format("{:.3f}", gs.draft), fmt::format("{:.2f}", gs.draft / dec),
                      replayed});
      rows.push_back({"  draft step alone (graphs, device idle before)",
                      fmt::format("{:.3f}", alone.draft), fmt::format("{:.2f}", alone.draft / dec),
                      fmt::format("the commit's device work not included: rest with it {:.3f} ms",
                                  alone.rest)});
      rows.push_back({"  verify (graphs)", fmt::format("{:.3f}", gs.verify),
                      fmt::format("{:.2f}", gs.verify / dec),
                      fmt::format("measured run: {} of {} target steps replayed, {} captures; "
                                  "drafter {} of {} rounds replayed",
                                  gs.stats.step_replays, gs.stats.step_forwards,
                                  gs.stats.graph_captures, gs_drafter_replays, gs_drafter_rounds)});
      rows.push_back({"  rest (graphs)", fmt::format("{:.3f}", gs.rest),
                      fmt::format("{:.2f}", gs.rest / dec), ""});
      rows.push_back({"full round (graphs)", fmt::format("{:.3f}", gs.round),
                      fmt::format("{:.2f}", gs.round / dec),
                      fmt::format("x graphed decode step; CPU {:.3f} ms per round{}", cpu_round,
                                  o.blocking_sync ? " (blocking sync)" : " (spinning waits)")});
      if (!o.blocking_sync)  // spinning waits: their wall time is CPU time too
        rows.push_back(
            {"  host work per round outside waits", fmt::format("{:.3f}", host_work), "",
             fmt::format("engine thread CPU {:.3f} ms in the rounds - {:.3f} ms inside "
                         "synchronize; by phase: draft / verify / rest {:.3f} / {:.3f} / {:.3f}",
                         gs.draft_cpu + gs.verify_cpu + gs.rest_cpu, gs.sync_wait, draft_work,
                         verify_work, rest_work)});
      if (!o.blocking_sync)
        rows.push_back(
            {"    verify phase's host work", fmt::format("{:.3f}", verify_work), "",
             fmt::format("batch {:.3f}, forward {:.3f}, verifier launch {:.3f}, readback {:.3f}",
                         gs.verify_batch_cpu, gs.verify_forward_cpu, gs.verify_launch_cpu,
                         gs.verify_read_cpu - gs.verify_wait)});
      if (o.blocking_sync)
        rows.push_back({"  CPU per round: draft / verify / rest",
                        fmt::format("{:.3f}", cpu2.draft_cpu + cpu2.verify_cpu + cpu2.rest_cpu), "",
                        fmt::format("{:.3f} / {:.3f} / {:.3f} ms (engine thread, blocking sync)",
                                    cpu2.draft_cpu, cpu2.verify_cpu, cpu2.rest_cpu)});
      if (o.blocking_sync) {  // the parts as stored in the JSON above
        const nlohmann::json& vp = j["graphs"]["cpu_per_round_ms"]["verify_parts"];
        auto at = [&](const char* key) { return vp[key].get<double>(); };
        rows.push_back(
            {"    verify CPU: batch / forward / verifier launch / readback",
             fmt::format("{:.3f}",
                         at("batch") + at("forward") + at("verifier_launch") + at("readback")),
             "",
             fmt::format("{:.3f} / {:.3f} / {:.3f} / {:.3f} ms (readback: wait {:.3f} ms wall "
                         "+ acceptance; forward replay {:.3f} ms wall: stage {:.3f}, launch "
                         "{:.3f})",
                         at("batch"), at("forward"), at("verifier_launch"), at("readback"),
                         at("readback_wait_wall"), at("forward_wall_per_replay"),
                         at("forward_stage_wall_per_replay"),
                         at("forward_launch_wall_per_replay"))});
      }
    }
    if (o.profile_ops) {  // the ops of the draft step alone (eager, as measured above)
      (void)take_op_profile();
      ProfiledProposals profiled(*created->source);
      (void)measure(target, ctx, &profiled, gamma, prompts, o.rounds);
      print_op_profile(fmt::format("ops of a draft step ({} x{}; {:.3f} ms unprofiled)",
                                   created->kind, gamma, s.draft),
                       take_op_profile(), static_cast<double>(profiled.proposals()),
                       j["op_profile"]["draft"]);
    }
  }
  std::printf("context %d, batch %d\n%s", context, batch,
              format_table({"phase", "ms", "x decode step", ""}, rows).c_str());
  return j;
}

int main_impl(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_round: speculative round phases vs a plain decode step"};
  app.add_option("-m,--model", o.model, "target model directory")->required();
  app.add_option("--draft", o.draft, "draft source (as dspark generate --draft)");
  app.add_option("--draft-vocab", o.draft_vocab, "as dspark generate --draft-vocab");
  app.add_flag("--draft-fp8", o.draft_fp8, "as dspark generate --draft-fp8");
  app.add_option("--gamma", o.gamma, "drafts per round for --draft")->check(CLI::Range(1, 64));
  app.add_option("--context", o.context_list,
                 "prompt (context) length per row; a comma list measures each (e.g. 512,4096)");
  app.add_option("--batch", o.batch_list,
                 "rows decoding together; a comma list measures each (e.g. 1,4,16)");
  app.add_option("--rounds", o.rounds, "measured rounds")->check(CLI::Range(1, 100000));
  app.add_option("--verify-k", o.verify_list, "verify widths (drafted tokens per row) to time");
  app.add_flag("--graphs", o.graphs,
               "also time decode and verify with CUDA-graph replay of the target forward");
  app.add_flag("--graphs-only", o.graphs_only,
               "with --graphs: time verify widths with graphs only and skip the back-to-back "
               "forward loops (the eager decode step stays, as the reference): a third of the "
               "forwards, for context x batch sweeps");
  app.add_flag("--exact", o.exact,
               "batch-invariant numerics (dspark's --exact: Tuning::batch_invariant), to measure "
               "their cost against the default kernels");
  app.add_flag("--trace", o.trace,
               "also record the decode step's and the round's device timeline (CUPTI): idle "
               "gaps between kernels, host time blocked, kernel times");
  app.add_option("--trace-timeline", o.trace_timeline,
                 "with --trace: also write the traced round run's raw device timeline (every "
                 "kernel, copy and blocking call with its start and end) as CSV to this file, "
                 "and the traced decode steps' to the same name with .decode before the "
                 "extension (t.csv: t.decode.csv)");
  app.add_flag("--blocking-sync", o.blocking_sync,
               "CUDA: waiting host threads sleep instead of spinning, so the CPU time per round "
               "reported is the host's own work (slower rounds: each wait wakes up late)");
  app.add_option("--device", o.device_name, "cpu | cuda | cuda:N");
  app.add_option("--json", o.json_file, "also write the JSON result here");
  app.add_flag("--profile-ops", o.profile_ops,
               "also time every op of eager forwards of 1 and k + 1 tokens (device time per op)");
  CLI11_PARSE(app, argc, argv);
  if (o.trace && !kernel_trace_available()) {
    std::fprintf(stderr, "error: --trace needs a bench built with CUPTI\n");
    return 2;
  }
  if (!o.trace_timeline.empty() && !o.trace) {
    std::fprintf(stderr, "error: --trace-timeline needs --trace\n");
    return 2;
  }
  if (o.graphs_only && !o.graphs) {
    std::fprintf(stderr, "error: --graphs-only needs --graphs\n");
    return 2;
  }
  if (o.trace && (!o.graphs || o.device_name == "cpu")) {
    std::fprintf(stderr,
                 "error: --trace traces the graphed decode step and round: it needs "
                 "--graphs and a CUDA device\n");
    return 2;
  }
  std::vector<int> contexts, batches;
  try {
    contexts = parse_list(o.context_list);
    batches = parse_list(o.batch_list);
    (void)parse_list(o.verify_list);
  } catch (const std::exception&) {
    std::fprintf(stderr, "error: --context, --batch and --verify-k take comma lists of integers\n");
    return 2;
  }
  auto positive = [](const std::vector<int>& v, int hi) {
    return !v.empty() && std::all_of(v.begin(), v.end(), [&](int x) { return x >= 1 && x <= hi; });
  };
  if (!positive(contexts, 1 << 20) || !positive(batches, 4096)) {
    std::fprintf(stderr, "error: --context must be in [1, 1048576] and --batch in [1, 4096]\n");
    return 2;
  }

  const Device device = parse_device(o.device_name);
  if (o.blocking_sync && device.is_cuda()) cuda::set_blocking_sync(device.index);
  Context ctx(device);
  ctx.cuda_tuning().batch_invariant = o.exact;
  const DType dtype = device.is_cuda() ? DType::bf16 : DType::f32;
  const double bandwidth = device.is_cuda() ? cuda::measure_copy_bandwidth(device.index) : 0.0;
  const int64_t before = memory_stats(device).active_bytes;
  std::unique_ptr<Model> target = load_model(o.model, device, dtype);
  const double weight_bytes = static_cast<double>(memory_stats(device).active_bytes - before);

  std::optional<CreatedSource> created;
  if (o.draft != "none") {
    DraftOptions d;
    d.draft = o.draft;
    d.draft_vocab = o.draft_vocab;
    d.draft_fp8 = o.draft_fp8;
    // The drafter's own KV: every row of the largest configuration, through the longest run
    // (--blocking-sync measures 2 x --rounds rounds).
    const int64_t per_row = *std::max_element(contexts.begin(), contexts.end()) +
                            int64_t{2} * o.rounds * (o.gamma + 1) + 2 * o.gamma + 64;
    const int64_t need = per_row * *std::max_element(batches.begin(), batches.end());
    d.draft_model_kv_tokens =
        static_cast<int>(std::clamp<int64_t>(need, d.draft_model_kv_tokens, int64_t{1} << 30));
    created = create_draft_source(d, *target);
  }

  nlohmann::json j = {
      {"model", o.model}, {"device", device.name()},      {"rounds", o.rounds},
      {"exact", o.exact}, {"weight_bytes", weight_bytes}, {"copy_bandwidth_gbs", bandwidth / 1e9}};
  const bool sweep = contexts.size() * batches.size() > 1;
  for (int context : contexts) {
    for (int batch : batches) {
      nlohmann::json r = run_config(o, *target, ctx, created ? &*created : nullptr, context, batch,
                                    bandwidth, weight_bytes);
      if (sweep)
        j["runs"].push_back(std::move(r));
      else
        j.update(r);
    }
  }
  if (bandwidth > 0)
    std::printf(
        "copy bandwidth %.0f GB/s; weights %.2f GB (routed experts %.2f GB, of which a "
        "decode step reads its rows' share)\n",
        bandwidth / 1e9, weight_bytes / 1e9,
        static_cast<double>(target->routed_expert_bytes()) / 1e9);
  std::printf("%s\n", j.dump().c_str());
  if (!o.json_file.empty()) std::ofstream(o.json_file) << j.dump(2) << "\n";
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
