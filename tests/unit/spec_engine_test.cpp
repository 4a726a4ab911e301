// SpeculativeEngine as a continuous-batching engine: admission by KV capacity, requests joining
// between steps, cancellation, aborting after a failure, and KV pages returning to idle. Also the
// PhaseClock its rounds are timed with, on fake clocks.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/phase_clock.h"
#include "dspark/engine/speculative.h"
#include "dspark/model/model.h"
#include "dspark/spec/ngram_source.h"

namespace dspark {
namespace {

std::unique_ptr<Model> fixture(const std::string& name) {
  const auto dir = test::data_dir() / "models" / name;
  if (!std::filesystem::exists(dir / "config.json")) return nullptr;
  return load_model(dir, Device::cpu(), DType::f32);
}

GenerateOptions greedy(int max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.eos_token_ids = {};
  return o;
}

TEST(SpecEngine, AdmissionReservesCapacityAndPagesReturn) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  SpecConfig cfg;
  cfg.gamma = 4;
  cfg.page_size = 16;
  SpeculativeEngine engine(*model, ctx, nullptr, cfg, 64);  // 4 pages
  EXPECT_TRUE(engine.can_admit(10, 30));                    // 10 + 30 + 5 = 45 tokens: 3 pages
  EXPECT_FALSE(engine.can_admit(10, 60));                   // 75 tokens: 5 pages
  const RowId a =
      engine.add(RequestInput{{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, greedy(30), nullptr, {}});
  EXPECT_EQ(engine.kv().used_pages(), 3);
  EXPECT_FALSE(engine.can_admit(5, 20));  // 30 tokens: 2 pages, 1 free
  try {
    engine.add(RequestInput{{1, 2, 3, 4, 5}, greedy(20), nullptr, {}});
    FAIL() << "expected out_of_memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
  }
  EXPECT_EQ(engine.kv().used_pages(), 3);  // the refused request left nothing behind
  while (engine.has_work()) engine.step();
  auto done = engine.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].first, a);
  EXPECT_EQ(done[0].second.result.n_generated, 30);
  EXPECT_EQ(engine.kv().used_pages(), 0);
}

TEST(SpecEngine, JoinCancelAndContinueMatchPlain) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  const std::vector<int32_t> p1 = {5, 6, 7, 8, 5, 6, 7, 8, 5, 6}, p2 = {11, 12, 13}, p3 = {20, 21};
  const auto plain1 = generate(*model, ctx, p1, greedy(24)).tokens;
  const auto plain3 = generate(*model, ctx, p3, greedy(12)).tokens;
  NgramSource source(NgramConfig{1, 3});
  SpecConfig cfg;
  cfg.gamma = 3;
  SpeculativeEngine engine(*model, ctx, &source, cfg, 1024);
  const RowId r1 = engine.add(RequestInput{p1, greedy(24), nullptr, {}});
  const RowId r2 = engine.add(RequestInput{p2, greedy(40), nullptr, {}});
  engine.step();  // prefill both
  engine.step();
  const RowId r3 = engine.add(RequestInput{p3, greedy(12), nullptr, {}});  // joins mid-run
  engine.step();
  EXPECT_TRUE(engine.cancel(r2));
  EXPECT_FALSE(engine.cancel(r2));  // already gone
  std::map<RowId, RequestOutput> out;
  for (auto& [id, o] : engine.take_finished()) out[id] = std::move(o);
  while (engine.has_work()) {
    engine.step();
    for (auto& [id, o] : engine.take_finished()) out[id] = std::move(o);
  }
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[r1].result.tokens, plain1);
  EXPECT_EQ(out[r3].result.tokens, plain3);
  EXPECT_EQ(out[r2].result.finish_reason, FinishReason::cancelled);
  EXPECT_LT(out[r2].result.n_generated, 40);
  EXPECT_EQ(engine.kv().used_pages(), 0);
}

TEST(SpecEngine, AbortAllEndsEveryRequestWithAnError) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  SpeculativeEngine engine(*model, ctx, nullptr, SpecConfig{}, 512);
  engine.add(RequestInput{{1, 2, 3}, greedy(50), nullptr, {}});
  engine.add(RequestInput{{4, 5}, greedy(50), nullptr, {}});
  engine.step();
  engine.abort_all("device lost");
  EXPECT_FALSE(engine.has_work());
  auto done = engine.take_finished();
  ASSERT_EQ(done.size(), 2u);
  for (const auto& [id, o] : done) {
    EXPECT_EQ(o.result.finish_reason, FinishReason::error);
    EXPECT_EQ(o.result.error, "device lost");
  }
  EXPECT_EQ(engine.kv().used_pages(), 0);
}

// Prefix reuse: requests that share a prompt prefix with an earlier one attach its KV pages
// (prefix_reused counts them), and every output still equals plain greedy decoding.
TEST(SpecEngine, PrefixCacheReusesPromptPagesAndStaysLossless) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  std::vector<int32_t> shared;
  for (int i = 0; i < 40; ++i) shared.push_back(3 + (i * 7) % 50);
  std::vector<std::vector<int32_t>> prompts = {shared, shared, shared};
  prompts[1].push_back(9);
  prompts[2].resize(37);  // a prefix of the first prompt
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(generate(*model, ctx, p, greedy(20)).tokens);

  NgramSource source(NgramConfig{1, 3});
  SpecConfig cfg;
  cfg.gamma = 3;
  cfg.page_size = 8;
  cfg.prefix_cache = true;
  SpeculativeEngine engine(*model, ctx, &source, cfg, 1024);
  ASSERT_TRUE(engine.prefix_cache_active());
  std::vector<RequestOutput> out;
  for (const auto& p : prompts) {  // one after another: each sees the pages of the ones before
    engine.add(RequestInput{p, greedy(20), nullptr, {}});
    while (engine.has_work()) engine.step();
    for (auto& [id, o] : engine.take_finished()) out.push_back(std::move(o));
  }
  ASSERT_EQ(out.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].result.tokens, plain[i]) << "request " << i;
  EXPECT_EQ(out[0].spec.prefix_reused, 0);
  EXPECT_EQ(out[1].spec.prefix_reused, 40);  // 5 full pages of the 41-token prompt
  EXPECT_EQ(out[2].spec.prefix_reused, 32);  // 4 full pages below the last prompt token
  EXPECT_EQ(engine.kv().used_pages(), 0);
  EXPECT_GT(engine.kv().cached_pages(), 0);

  // Off: nothing is reused.
  cfg.prefix_cache = false;
  SpeculativeEngine off(*model, ctx, &source, cfg, 1024);
  for (int k = 0; k < 2; ++k) {
    off.add(RequestInput{prompts[0], greedy(4), nullptr, {}});
    while (off.has_work()) off.step();
    for (auto& [id, o] : off.take_finished()) EXPECT_EQ(o.spec.prefix_reused, 0);
  }
  EXPECT_EQ(off.kv().cached_pages(), 0);
}

// SpecConfig::prefill_first: with prompts spanning several prefill chunks, no round runs until
// every row is prefilled, so the first round drafts for both rows; without it the row prefilled
// first starts decoding alone. Lossless either way.
TEST(SpecEngine, PrefillFirstStartsEveryRowTogether) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  const std::vector<int32_t> p1 = {5, 6, 7, 8, 5, 6, 7, 8}, p2 = {11, 12, 13, 11, 12, 13, 11, 12};
  const auto plain1 = generate(*model, ctx, p1, greedy(12)).tokens;
  const auto plain2 = generate(*model, ctx, p2, greedy(12)).tokens;
  NgramSource ngram(NgramConfig{1, 3});
  struct BatchSizes : ForwardingDraftSource {
    using ForwardingDraftSource::ForwardingDraftSource;
    std::vector<size_t> sizes;  // requests per propose call
    void propose(Context& c, std::span<const ProposeRequest> requests, Proposal& out) override {
      sizes.push_back(requests.size());
      inner().propose(c, requests, out);
    }
  };
  for (bool first : {false, true}) {
    BatchSizes source(ngram);
    SpecConfig cfg;
    cfg.gamma = 3;
    cfg.prefill_chunk = 4;  // two chunks per prompt
    cfg.prefill_first = first;
    const auto out = generate_speculative(
        *model, ctx, &source,
        {RequestInput{p1, greedy(12), nullptr, {}}, RequestInput{p2, greedy(12), nullptr, {}}},
        cfg);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].result.tokens, plain1) << "prefill_first " << first;
    EXPECT_EQ(out[1].result.tokens, plain2) << "prefill_first " << first;
    ASSERT_FALSE(source.sizes.empty());
    EXPECT_EQ(source.sizes.front(), first ? 2u : 1u);
  }
}

// A request's telemetry holds the time of every round it counts, its last one included (which
// ends the request): two tokens without drafts are the prefill's and one round's.
TEST(SpecEngine, TelemetryHoldsTheTimeOfTheLastRound) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  SpecConfig cfg;
  cfg.gamma = 3;
  cfg.cpu_times = true;
  const SpecTelemetry t =
      generate_speculative(*model, ctx, nullptr,
                           {RequestInput{{1, 2, 3, 4}, greedy(2), nullptr, {}}}, cfg)[0]
          .spec;
  EXPECT_EQ(t.rounds, 1);
  EXPECT_GT(t.verify_ms, 0.0);  // the round's target forward
  EXPECT_GT(t.verify_cpu_ms, 0.0);
  EXPECT_GT(t.prefill_ms, 0.0);
}

// SpecConfig::cpu_times: the engine thread's CPU time per round phase is measured only when asked
// (it costs clock reads), is positive then, stays within the run's CPU time, and is in the JSON.
TEST(SpecEngine, CpuTimesPerPhaseOnlyWhenAsked) {
  auto model = fixture("qwen3");
  if (!model) GTEST_SKIP() << "fixture missing";
  Context ctx(Device::cpu());
  NgramSource source(NgramConfig{1, 3});
  auto run = [&](bool cpu_times) {
    SpecConfig cfg;
    cfg.gamma = 3;
    cfg.cpu_times = cpu_times;
    return generate_speculative(*model, ctx, &source,
                                {RequestInput{{1, 2, 3, 4, 1, 2, 3, 4}, greedy(24), nullptr, {}}},
                                cfg)[0]
        .spec;
  };
  const SpecTelemetry off = run(false);
  EXPECT_GT(off.rounds, 0);
  EXPECT_EQ(off.draft_cpu_ms + off.verify_cpu_ms + off.rest_cpu_ms, 0.0);
  EXPECT_EQ(off.verify_batch_cpu_ms + off.verify_forward_cpu_ms + off.verify_launch_cpu_ms +
                off.verify_read_cpu_ms + off.verify_wait_ms,
            0.0);
  EXPECT_FALSE(off.to_json().contains("cpu_timings_ms"));

  const SpecTelemetry on = run(true);
  EXPECT_GT(on.verify_cpu_ms, 0.0);  // the target's CPU forwards run on this thread's clock
  EXPECT_GE(on.draft_cpu_ms, 0.0);
  EXPECT_GE(on.rest_cpu_ms, 0.0);
  // CPU time of a phase can exceed its wall time only through other threads, which this clock
  // does not count: the forward's worker threads are not the engine thread.
  EXPECT_LE(on.draft_cpu_ms + on.verify_cpu_ms + on.rest_cpu_ms,
            on.draft_ms + on.verify_ms + on.rest_ms + 1.0);
  EXPECT_TRUE(on.to_json().contains("cpu_timings_ms"));
  // The verify phase's parts add up to it; on the CPU the forward is most of it.
  EXPECT_NEAR(on.verify_batch_cpu_ms + on.verify_forward_cpu_ms + on.verify_launch_cpu_ms +
                  on.verify_read_cpu_ms,
              on.verify_cpu_ms, 1e-6);
  EXPECT_GT(on.verify_forward_cpu_ms, 0.0);
  EXPECT_GE(on.verify_batch_cpu_ms, 0.0);
  EXPECT_GE(on.verify_launch_cpu_ms, 0.0);
  EXPECT_GE(on.verify_read_cpu_ms, 0.0);
  EXPECT_GE(on.verify_wait_ms, 0.0);
  EXPECT_TRUE(on.to_json()["cpu_timings_ms"].contains("verify_forward"));
  // Context::synchronize returns at once on the CPU: no wall time inside it.
  EXPECT_EQ(on.sync_wait_ms, 0.0);
  EXPECT_EQ(on.draft_sync_wait_ms + on.verify_sync_wait_ms, 0.0);  // its parts by phase
  EXPECT_TRUE(on.to_json()["cpu_timings_ms"].contains("sync_wait_wall"));
  EXPECT_TRUE(on.to_json()["cpu_timings_ms"].contains("draft_sync_wait_wall"));
  EXPECT_TRUE(on.to_json()["cpu_timings_ms"].contains("verify_sync_wait_wall"));
}

// Fake clocks for PhaseClock: the test sets the time; every read is counted.
struct FakeTime {
  int64_t wall_ns = 0;
  double cpu_ms = 0, sync_ms = 0;
  int wall_reads = 0, cpu_reads = 0, sync_reads = 0;
};
struct FakeClocks {
  FakeTime* time;
  std::chrono::steady_clock::time_point wall() const {
    ++time->wall_reads;
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(time->wall_ns));
  }
  double cpu_ms() const {
    ++time->cpu_reads;
    return time->cpu_ms;
  }
  double sync_ms() const {
    ++time->sync_reads;
    return time->sync_ms;
  }
};
enum class TestMark { begin, first, inside, second, count };
using FakeClock = PhaseClock<TestMark, FakeClocks>;

// Two phases on fake time: 1.5 ms (CPU 1 ms, 0.25 ms in synchronize), then 3.5 ms whose CPU time
// is split at `inside` (2 + 0.5 ms; 0.125 ms in synchronize).
void run_two_phases(FakeClock& clock, FakeTime& time) {
  time.wall_ns += 1'500'000;
  time.cpu_ms += 1.0;
  time.sync_ms += 0.25;
  clock.mark(TestMark::first);
  time.wall_ns += 3'000'000;
  time.cpu_ms += 2.0;
  clock.mark_cpu(TestMark::inside);
  time.wall_ns += 500'000;
  time.cpu_ms += 0.5;
  time.sync_ms += 0.125;
  clock.mark(TestMark::second);
}

// Each phase gets the time that passed between its boundaries; the split inside a phase reads
// the CPU clock alone.
TEST(PhaseClock, AttributesTimeToThePhaseBetweenItsBoundaries) {
  FakeTime time;
  time.wall_ns = 1'000'000'000;
  time.cpu_ms = 50.0;
  time.sync_ms = 7.0;
  FakeClock clock({&time}, /*cpu_times=*/true);
  run_two_phases(clock, time);
  EXPECT_DOUBLE_EQ(clock.wall_ms(TestMark::begin, TestMark::first), 1.5);
  EXPECT_DOUBLE_EQ(clock.wall_ms(TestMark::first, TestMark::second), 3.5);
  EXPECT_DOUBLE_EQ(clock.wall_ms(TestMark::begin, TestMark::second), 5.0);
  EXPECT_DOUBLE_EQ(clock.cpu_ms(TestMark::begin, TestMark::first), 1.0);
  EXPECT_DOUBLE_EQ(clock.cpu_ms(TestMark::first, TestMark::inside), 2.0);
  EXPECT_DOUBLE_EQ(clock.cpu_ms(TestMark::inside, TestMark::second), 0.5);
  EXPECT_DOUBLE_EQ(clock.cpu_at(TestMark::inside), 53.0);
  EXPECT_DOUBLE_EQ(clock.sync_ms(TestMark::begin, TestMark::first), 0.25);
  EXPECT_DOUBLE_EQ(clock.sync_ms(TestMark::first, TestMark::second), 0.125);
  // Three boundaries read every clock, the split only the CPU time.
  EXPECT_EQ(time.wall_reads, 3);
  EXPECT_EQ(time.cpu_reads, 4);
  EXPECT_EQ(time.sync_reads, 3);
}

// Without cpu_times a boundary reads the wall clock alone and a split reads nothing: the CPU and
// sync spans stay zero.
TEST(PhaseClock, WithoutCpuTimesReadsOnlyTheWallClock) {
  FakeTime time;
  time.cpu_ms = 10.0;
  time.sync_ms = 3.0;
  FakeClock clock({&time}, /*cpu_times=*/false);
  EXPECT_FALSE(clock.cpu_times());
  run_two_phases(clock, time);
  EXPECT_DOUBLE_EQ(clock.wall_ms(TestMark::begin, TestMark::first), 1.5);
  EXPECT_DOUBLE_EQ(clock.wall_ms(TestMark::first, TestMark::second), 3.5);
  EXPECT_EQ(clock.cpu_ms(TestMark::begin, TestMark::second), 0.0);
  EXPECT_EQ(clock.cpu_at(TestMark::inside), 0.0);
  EXPECT_EQ(clock.sync_ms(TestMark::begin, TestMark::second), 0.0);
  EXPECT_EQ(time.wall_reads, 3);
  EXPECT_EQ(time.cpu_reads, 0);
  EXPECT_EQ(time.sync_reads, 0);
}

// The real clocks: wall and CPU time do not run backwards, and a CPU context spends no time in
// synchronize().
TEST(PhaseClock, EngineClocksAreMonotonic) {
  Context ctx(Device::cpu());
  PhaseClock<TestMark, EngineClocks> clock({&ctx}, /*cpu_times=*/true);
  clock.mark(TestMark::first);
  clock.mark_cpu(TestMark::inside);
  clock.mark(TestMark::second);
  EXPECT_GE(clock.wall_ms(TestMark::begin, TestMark::first), 0.0);
  EXPECT_GE(clock.wall_ms(TestMark::first, TestMark::second), 0.0);
  EXPECT_GE(clock.cpu_ms(TestMark::begin, TestMark::first), 0.0);
  EXPECT_GE(clock.cpu_ms(TestMark::first, TestMark::inside), 0.0);
  EXPECT_GE(clock.cpu_ms(TestMark::inside, TestMark::second), 0.0);
  EXPECT_GT(clock.cpu_at(TestMark::begin), 0.0);
  EXPECT_DOUBLE_EQ(clock.sync_ms(TestMark::begin, TestMark::second), 0.0);
}

}  // namespace
}  // namespace dspark
