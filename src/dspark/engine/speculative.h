// The speculative decoding engine: several requests (rows) decode together; each step runs one
// prefill chunk of rows that joined (when any) and then one round for every row past its prefill.
// A round (decode_round) is these phases, each a private member working on the round's scratch:
//
//   propose             the rows that decode and their drafts (DraftSource::propose)
//   build_verify_batch  [pending, drafts] per row, logits for every token
//   verify              ONE target forward over the batch, then the verifier
//   roll_back_target_kv the target KV back to the accepted length
//   commit_to_source    kept tokens, tap rows and the new pending token to the draft source
//   emit                tokens one at a time (EOS / max_tokens / stop strings see the
//                       plain-decoding stream)
//
// and a RoundClock (engine/phase_clock.h) reads the clocks at the boundaries: the draft phase is
// propose, the verify phase build_verify_batch and verify, the rest the others (SpecTelemetry).
//
// Rows have their own proposal lengths, sampling parameters and seeds. With no draft source the
// same loop is plain decoding (one token per row per round). Requests may be added between steps
// (continuous batching); finished ones are collected with take_finished().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/output_stream.h"
#include "dspark/engine/phase_clock.h"
#include "dspark/engine/verify_cost.h"
#include "dspark/engine/verify_cost_cache.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_length.h"
#include "dspark/spec/draft_source.h"
#include "dspark/spec/telemetry.h"
#include "dspark/spec/verifier.h"

namespace dspark {

struct SpecConfig {
  int gamma = 4;            // drafts per row per round at most (>= 0)
  int page_size = 16;       // target KV page size
  int prefill_chunk = 512;  // prompt tokens per prefill forward, over all rows
  // Finish every pending prefill before the next decode round (a step with prompt tokens left runs
  // only a prefill chunk), so that the rows of one batch start decoding together and no round
  // shares the device with prefill chunks: for benchmarks of the round at a fixed batch. Off: a
  // long prompt being prefilled does not stall the rows already decoding (serving).
  bool prefill_first = false;
  // Reuse the target KV of prompt prefixes seen before (PagedKvCache prefix pages). With a draft
  // source that needs target taps, only when it reuses its own state of those prefixes too
  // (DraftSource::reuses_prefixes: a DFlash/DSpark drafter's context K/V).
  bool prefix_cache = false;
  // Also measure the engine thread's CPU time per phase of each decode round
  // (SpecTelemetry::draft_cpu_ms, ..., and the verify phase's parts verify_batch_cpu_ms, ...;
  // seven clock reads per round): for benchmarks.
  bool cpu_times = false;
  // How each row's draft length is chosen per round (spec/draft_length.h). adaptive: from the
  // verify cost profiled when the engine starts (engine/verify_cost.h), the draft and round costs
  // measured as it runs, and each row's recent acceptance; rows draft 0 when drafting does not pay.
  // fixed: min(gamma, tokens left - 1) every round (what calibration and evaluation measure).
  DraftPolicy draft_policy = DraftPolicy::fixed;
  // Rows decoded together at most (the server's max batch): the largest verify batch the adaptive
  // policy profiles. 0: generate_speculative's request count, else 8.
  int max_rows = 0;
  // Wall-time budget of that profile (seconds; the smallest and largest batches are always timed).
  double profile_budget_s = 1.0;
  // The verify cost (RoundCostModel::verify points) when already known for this model and device:
  // used instead of profiling.
  std::vector<std::pair<int, double>> verify_cost;
  // Where the adaptive policy's profile is cached between runs (engine/verify_cost_cache.h): a
  // profile stored for the same key is loaded instead of measured, and a measured one is stored.
  // cost_cache.dir empty: no cache.
  VerifyCostCacheConfig cost_cache;
  // Where the engine's one-line notices go (the adaptive policy's profile, cache problems); null:
  // nowhere.
  std::function<void(std::string_view)> log;
};

struct RequestInput {
  std::vector<int32_t> prompt;
  GenerateOptions options;
  Detokenizer* detokenizer = nullptr;  // optional (needed for stop strings)
  TextCallback on_text;                // optional
  LogprobsCallback on_logprobs = {};   // optional (with options.logprobs >= 0)
};

struct RequestOutput {
  GenerateResult result;
  SpecTelemetry spec;
};

class SpeculativeEngine {
 public:
  // source: null for plain decoding. kv_tokens: capacity of the target KV cache over all rows.
  SpeculativeEngine(Model& target, Context& ctx, DraftSource* source, SpecConfig config,
                    int kv_tokens);
  ~SpeculativeEngine();

  // Validates the request (invalid_input naming the problem), reserves its KV capacity (prompt +
  // max_tokens + gamma + 1 tokens, so a running request never runs out: out_of_memory when the
  // cache cannot hold it; check can_admit first) and queues it for prefill.
  RowId add(RequestInput input);
  // Whether the KV cache can hold a new request of this size now.
  bool can_admit(int prompt_tokens, int max_tokens) const;
  // Ends a request between steps (finish reason `cancelled`); false when the id is not live.
  bool cancel(RowId id);
  // Ends every live request with finish reason `error` and `message` (after a step threw).
  void abort_all(const std::string& message);
  int live_rows() const { return static_cast<int>(rows_.size()); }
  // One step (a prefill chunk when a row needs one, then one round); no-op when idle.
  void step();
  bool has_work() const;
  std::vector<std::pair<RowId, RequestOutput>> take_finished();
  const PagedKvCache& kv() const { return kv_; }
  // The adaptive policy's cost model (empty verify points with the fixed policy).
  const RoundCostModel& round_cost() const { return cost_; }
  // The verify cost profile taken at construction (empty with the fixed policy).
  const VerifyCostProfile& verify_profile() const { return profile_; }
  bool adaptive() const {
    return config_.draft_policy == DraftPolicy::adaptive && source_ != nullptr && config_.gamma > 0;
  }
  // Whether prompt prefixes are reused (SpecConfig::prefix_cache, and a source without taps or one
  // that reuses its own state of the prefixes).
  bool prefix_cache_active() const {
    return config_.prefix_cache && (taps_.empty() || source_->reuses_prefixes());
  }

 private:
  struct Row;
  void prefill_step();
  void decode_round();
  void finish_row(Row& row);
  // Attaches the published KV (and the source's state) of the prompt's longest cached prefix.
  void attach_prefix(Row& row);
  int reserve_tokens(int prompt_tokens, int max_tokens) const;
  // The cost cache's key of this engine's profile of verify batches of up to `rows` rows.
  VerifyCostKey verify_cost_key(int rows) const;

  // The boundaries of a decode round's phases: draft from begin to proposed, verify to verified
  // (its CPU time split where the batch is built and where the target's forward returns), rest to
  // emitted (through committed: the target KV rolled back and the source's commit done).
  enum class RoundMark {
    begin,
    proposed,
    batch_built,
    forwarded,
    verified,
    committed,
    emitted,
    count
  };
  using RoundClock = PhaseClock<RoundMark>;
  // decode_round's phases in order (RoundScratch says what each one fills).
  bool propose();  // false: no row decodes this round
  // The adaptive policy: each row's draft budget this round (ProposeRequest::max_tokens).
  void choose_lengths();
  void constrain_drafts();
  bool cut_drafts();  // false: every rated draft stays
  // The round's draft and fixed costs into the cost model (adaptive policy).
  void observe_round_cost(const RoundClock& clock);
  void build_verify_batch();
  ForwardOutput verify(RoundClock& clock);  // marks `forwarded`
  // The round's penalties on the verify logits (each row with the drafts before its position).
  void penalize_verify_logits(const Tensor& logits);
  // The logprobs entries of the tokens the round emits (Row::logprobs), from the verify logits.
  void round_logprobs(const Tensor& logits);
  void roll_back_target_kv();
  void commit_to_source(std::span<const Tensor> taps);
  void emit();
  // The round's times (and with cpu_times its CPU and sync times) into each row's telemetry.
  void add_round_times(const RoundClock& clock);

  Model& target_;
  Context& ctx_;
  DraftSource* source_;
  SpecConfig config_;
  PagedKvCache kv_;
  Verifier verifier_;
  std::vector<int> taps_;
  VerifyCostProfile profile_;        // adaptive policy
  std::filesystem::path cost_file_;  // the profile's cache file (read or written), if any
  int64_t verify_rounds_ = 0;        // rounds whose verify time updated cost_.verify_scale
  RoundCostModel cost_;
  DraftCostFit draft_fit_;
  int draft_cost_samples_ = 0;
  double catch_up_ms_ = 0;     // the source's DraftStats::catch_up_ms at the last round's end
  AcceptanceEstimate pooled_;  // over all rows: a new row's starting estimate
  // A new row's DraftProbe backoff: the longest a row's failed probes reached since a row last
  // drafted on its own (so rows of a drafter that is never accepted start out probing rarely).
  int probe_backoff_ = DraftProbe::kMinBackoff;
  std::vector<std::unique_ptr<Row>> rows_;  // live rows in arrival order
  std::vector<std::pair<RowId, RequestOutput>> finished_;
  RowId next_id_ = 0;
  OwnedTensor sampled_;  // i32 [rows] first tokens after prefill
  // decode_round's per-round host arrays, kept between rounds (cleared, not freed): a round in
  // steady state allocates none of them. The phase that fills each one is named first.
  struct RoundScratch {
    std::vector<Row*> rows;                  // propose: this round's rows
    std::vector<ProposeRequest> requests;    // propose
    Proposal proposal;                       // propose
    ForwardBatch batch;                      // build_verify_batch
    std::vector<SamplingParams> params;      // build_verify_batch (per row)
    std::vector<uint64_t> seeds;             // build_verify_batch
    std::vector<int32_t> positions;          // build_verify_batch: position of draft 1
    std::vector<int32_t> length_before;      // build_verify_batch: the KV length before the round
    VerifyResult verified;                   // verify
    std::vector<RowUpdate> updates;          // commit_to_source (and Row::kept)
    std::vector<int32_t> burst;              // emit: one row's tokens
    std::vector<Row*> ending;                // emit: the rows this round ends
    std::vector<PenaltyEntry> penalties;     // verify: the penalty edits of the logits
    std::vector<float> logits_host;          // verify: logits rows copied for logprobs (CUDA)
    std::vector<DraftLengthRow> choice;      // propose: the adaptive policy's inputs
    std::vector<int> lengths;                // propose: and its choice
    std::vector<char> probing;               // propose: rows offered a probe (DraftProbe)
    std::vector<int> probe_lengths;          // propose: the choice with the probes offered
    std::vector<int32_t> drafts_kept;        // propose: drafts each row keeps (constrain_drafts)
    std::vector<int32_t> drafts_rated;       // propose: of the proposal, those the policy could cut
    std::vector<float> acceptance;           // propose: Proposal::acceptance, before the cut
    std::vector<int32_t> acceptance_indptr;  // propose: and its rows (the proposal's indptr)
    RoundCostModel cut_cost;                 // propose: cut_drafts' cost model
    std::vector<int32_t> mask_rows;          // verify: logits rows with a structured-output mask
    std::vector<uint32_t> mask_words;        // verify: and their masks (ops/token_mask.h)
  };
  RoundScratch round_;
};

// Target KV tokens that hold every request at once (prompt + max_tokens + gamma + 1, plus a page of
// slack each): the capacity generate_speculative gives its engine.
int64_t speculative_kv_tokens(std::span<const RequestInput> requests, const SpecConfig& config);

// Runs the requests as one batch to completion (results in input order).
std::vector<RequestOutput> generate_speculative(Model& target, Context& ctx, DraftSource* source,
                                                std::vector<RequestInput> requests,
                                                const SpecConfig& config);

}  // namespace dspark
