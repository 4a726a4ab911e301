#include "dspark/engine/speculative.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>

#include "dspark/backend/cuda/policy/device.h"
#include "dspark/core/thread_pool.h"
#include "dspark/engine/json_draft.h"
#include "dspark/engine/json_mask.h"
#include "dspark/engine/verify_cost.h"
#include "dspark/engine/verify_cost_cache.h"
#include "dspark/ops/penalties.h"
#include "dspark/ops/sampling.h"
#include "dspark/ops/token_mask.h"

namespace dspark {
namespace {

// A prefill chunk's one phase (its wall time only).
enum class PrefillMark { begin, end, count };

}  // namespace

struct SpeculativeEngine::Row {
  RowId id = 0;
  std::vector<int32_t> prompt;
  GenerateOptions options;
  SeqId seq = -1;
  int prefilled = 0;     // prompt tokens the target has processed
  int32_t pending = -1;  // last emitted token, not yet processed by the target
  std::unique_ptr<OutputStream> out;
  SpecTelemetry spec;
  bool done = false;
  std::vector<int32_t> kept;                // storage behind RowUpdate::kept_tokens for one commit
  PenaltyHistory penalties;                 // prompt + emitted tokens (options.penalties)
  std::vector<TokenLogprobs> logprobs;      // the round's entries, for emit (options.logprobs >= 0)
  AcceptanceEstimate accept;                // the adaptive policy's estimate of this row's drafts
  DraftProbe probe;                         // and when it offers one draft again after stopping
  std::optional<JsonMatcher> json;          // the emitted text's state (options.json)
  JsonMaskCache masks;                      // options.json's token masks by matcher state
  std::optional<JsonDraftGrammar> grammar;  // json for the draft source (ProposeRequest::grammar)
  bool wants_logprobs() const { return options.logprobs >= 0; }
  bool constrained() const { return json.has_value(); }
  // Queues logits row `row`'s mask for state m (rows of `vocab` logits).
  void add_mask(const JsonMatcher& m, int32_t row, int64_t vocab, std::vector<int32_t>& rows,
                std::vector<uint32_t>& words) {
    const std::span<const uint32_t> mask = masks.mask(*options.json, vocab, m);
    rows.push_back(row);
    words.insert(words.end(), mask.begin(), mask.end());
  }
  // Emits tokens (with the round's logprobs entries when asked for) and adds them to the history.
  bool push(std::span<const int32_t> tokens) {
    const bool finished = out->push(tokens, logprobs);
    for (const int32_t t : tokens) penalties.add_generated(t);
    if (json) {
      // Emitted tokens were sampled under the mask; the document advances up to EOS.
      for (const int32_t t : tokens) {
        if (options.json->is_eos(t)) break;
        DSPARK_CHECK(options.json->vocab->advance(*json, t),
                     "structured output: token {} does not continue the document", t);
      }
    }
    logprobs.clear();
    return finished;
  }
};

SpeculativeEngine::SpeculativeEngine(Model& target, Context& ctx, DraftSource* source,
                                     SpecConfig config, int kv_tokens)
    : target_(target),
      ctx_(ctx),
      source_(source),
      config_(config),
      kv_(target.kv_shape(config.page_size, (kv_tokens + config.page_size - 1) / config.page_size),
          target.device()) {
  DSPARK_CHECK_KIND(invalid_input, config.gamma >= 0 && config.gamma <= 64,
                    "gamma must be in [0, 64] (got {})", config.gamma);
  DSPARK_CHECK_KIND(invalid_input, config.prefill_chunk > 0, "prefill_chunk must be > 0");
  if (source_) taps_ = source_->target_taps();
  verifier_.set_cpu_clock(config_.cpu_times);
  verifier_.prepare(ctx_);  // pinned readback staging now, not in the first round
  pooled_ = AcceptanceEstimate(config_.gamma);
  if (adaptive() && !config_.verify_cost.empty()) {
    cost_.verify = config_.verify_cost;
  } else if (adaptive()) {
    const int rows = config_.max_rows > 0 ? config_.max_rows : 8;
    const bool cached = !config_.cost_cache.dir.empty();
    VerifyCostKey key;
    std::optional<VerifyCostProfile> loaded;
    if (cached) {
      key = verify_cost_key(rows);
      loaded = load_verify_cost(config_.cost_cache.dir, key, config_.log);
    }
    if (loaded) {
      profile_ = std::move(*loaded);
    } else {
      profile_ = profile_verify_cost(target_, ctx_, kv_, taps_, rows, config_.gamma + 1,
                                     config_.profile_budget_s);
      if (cached && store_verify_cost(config_.cost_cache.dir, key, profile_, config_.log))
        cost_file_ = verify_cost_cache_file(config_.cost_cache.dir, key);
    }
    if (!profile_.loaded_from.empty()) cost_file_ = profile_.loaded_from;
    cost_.verify = profile_.points;
    if (config_.log) config_.log(describe(profile_));
  }
}

VerifyCostKey SpeculativeEngine::verify_cost_key(int rows) const {
  const VerifyCostCacheConfig& c = config_.cost_cache;
  DSPARK_CHECK(!ctx_.is_cuda() || !c.accelerator.empty(),
               "a verify cost cache on CUDA needs the device's description");
  VerifyCostKey key;
  key.build = build_identity();
  key.model = model_identity(c.model);
  key.device = ctx_.device().name();
  key.machine = ctx_.is_cuda() ? c.accelerator : cpu_identity();
  key.threads = ctx_.is_cuda() ? 0 : ctx_.pool().size();
  key.dtype = std::string(dtype_name(target_.activation_dtype()));
  key.cuda_graphs = target_.cuda_graphs();
  key.exact = ctx_.is_cuda() && ctx_.cuda_tuning().batch_invariant;
  key.page_size = config_.page_size;
  key.taps = taps_;
  key.max_rows = rows;
  key.width = config_.gamma + 1;
  key.budget_s = config_.profile_budget_s;
  return key;
}

// A cached profile the rounds found much slower than the device now is (measured while the
// machine was busy) would keep the policy drafting too little at every later start: it is dropped,
// so that the next start profiles again.
SpeculativeEngine::~SpeculativeEngine() {
  constexpr int64_t kMinRounds = 32;
  constexpr double kStaleScale = 0.8;
  if (cost_file_.empty() || verify_rounds_ < kMinRounds || cost_.verify_scale >= kStaleScale)
    return;
  std::error_code ec;
  if (std::filesystem::remove(cost_file_, ec) && config_.log) {
    try {
      config_.log(fmt::format(
          "verify cost profile {} dropped: the rounds ran at {:.2f}x its times (profiled while "
          "the machine was busy?); the next start profiles again",
          cost_file_.string(), cost_.verify_scale));
    } catch (...) {  // a destructor never throws; the file is gone either way
    }
  }
}

RowId SpeculativeEngine::add(RequestInput input) {
  const int64_t vocab = target_.config().vocab_size;
  validate(input.options, vocab);
  DSPARK_CHECK_KIND(invalid_input, !input.prompt.empty(), "the prompt is empty (no tokens)");
  for (size_t i = 0; i < input.prompt.size(); ++i)
    DSPARK_CHECK_KIND(invalid_input, input.prompt[i] >= 0 && input.prompt[i] < vocab,
                      "prompt token {} at index {} is outside the vocabulary [0, {})",
                      input.prompt[i], i, vocab);
  auto row = std::make_unique<Row>();
  row->id = next_id_++;
  row->prompt = std::move(input.prompt);
  row->options = input.options;
  row->out = std::make_unique<OutputStream>(input.options, static_cast<int>(row->prompt.size()),
                                            input.detokenizer, std::move(input.on_text));
  row->out->set_logprobs_callback(std::move(input.on_logprobs));
  row->penalties = PenaltyHistory(row->options.penalties, row->prompt);
  row->accept.start_from(pooled_);
  row->probe = DraftProbe(probe_backoff_);
  row->spec.draft_policy = adaptive() ? DraftPolicy::adaptive : DraftPolicy::fixed;
  if (row->options.json) {
    row->json.emplace(&row->options.json->schema);
    row->grammar.emplace(*row->options.json, row->masks);
  }
  row->seq = kv_.create_sequence();
  if (source_) source_->begin(ctx_, row->id, row->prompt);
  // At least the last prompt token is computed again: its logits give the first token.
  if (prefix_cache_active()) attach_prefix(*row);
  const int capacity =
      reserve_tokens(static_cast<int>(row->prompt.size()), input.options.max_tokens);
  if (!kv_.reserve(row->seq, capacity)) {
    kv_.release(row->seq);
    if (source_) source_->release(row->id);
    DSPARK_FAIL(out_of_memory, "KV cache full: the request needs {} pages for {} tokens, {} free",
                kv_.pages_for_tokens(capacity), capacity, kv_.free_pages());
  }
  rows_.push_back(std::move(row));
  return rows_.back()->id;
}

void SpeculativeEngine::attach_prefix(Row& row) {
  int n = kv_.attach_prefix(row.seq, row.prompt, static_cast<int>(row.prompt.size()) - 1);
  if (n > 0 && !taps_.empty()) {
    // The source's state of the prefix (its context K/V) too: both keep the longest common length
    // that is whole pages of both caches (a shared page is never written into).
    const int granule = std::lcm(kv_.shape().page_size, source_->prefix_page());
    const int m = source_->attach_prefix(row.id, row.prompt, n / granule * granule);
    n = m / granule * granule;
    source_->trim_prefix(row.id, n);
    if (kv_.length(row.seq) > n) kv_.rollback_to(row.seq, n);
  }
  row.prefilled = n;
  row.spec.prefix_reused = n;
}

bool SpeculativeEngine::has_work() const {
  return !rows_.empty();
}

int SpeculativeEngine::reserve_tokens(int prompt_tokens, int max_tokens) const {
  const int64_t n = int64_t{prompt_tokens} + std::max(0, max_tokens) + config_.gamma + 1;
  return static_cast<int>(std::min<int64_t>(n, std::numeric_limits<int>::max() / 2));
}

bool SpeculativeEngine::can_admit(int prompt_tokens, int max_tokens) const {
  return kv_.pages_for_tokens(reserve_tokens(prompt_tokens, max_tokens)) <= kv_.free_pages();
}

bool SpeculativeEngine::cancel(RowId id) {
  for (auto& r : rows_) {
    if (r->id != id || r->done) continue;
    r->out->abort(FinishReason::cancelled);
    finish_row(*r);
    std::erase_if(rows_, [](const auto& row) { return row->done; });
    return true;
  }
  return false;
}

void SpeculativeEngine::abort_all(const std::string& message) {
  for (auto& r : rows_) {
    if (r->done) continue;
    r->out->abort(FinishReason::error, message);
    finish_row(*r);
  }
  rows_.clear();
}

std::vector<std::pair<RowId, RequestOutput>> SpeculativeEngine::take_finished() {
  return std::exchange(finished_, {});
}

void SpeculativeEngine::step() {
  // Rows that finished at admission (max_tokens 0) leave without touching the model.
  for (auto& r : rows_)
    if (r->out->finished()) finish_row(*r);
  std::erase_if(rows_, [](const auto& r) { return r->done; });
  if (rows_.empty()) return;
  const bool prefill_pending = std::any_of(rows_.begin(), rows_.end(), [](const auto& r) {
    return r->prefilled < static_cast<int>(r->prompt.size());
  });
  // A prefill chunk, then a round for every row past its prefill: a long prompt being prefilled
  // in chunks does not stall the streams that are already decoding.
  if (prefill_pending) prefill_step();
  // SpecConfig::prefill_first: the round waits until every row is prefilled.
  if (!prefill_pending || !config_.prefill_first) decode_round();
  std::erase_if(rows_, [](const auto& r) { return r->done; });
}

void SpeculativeEngine::prefill_step() {
  PhaseClock<PrefillMark> clock({&ctx_}, /*cpu_times=*/false);
  ForwardBatch batch;
  batch.row_indptr.push_back(0);
  batch.tap_layers = taps_;
  std::vector<Row*> rows;
  std::vector<Row*> completing;  // rows whose last prompt token is in this batch
  int budget = config_.prefill_chunk;
  for (auto& r : rows_) {
    const int left = static_cast<int>(r->prompt.size()) - r->prefilled;
    if (left <= 0 || budget <= 0) continue;
    const int take = std::min(left, budget);
    budget -= take;
    batch.tokens.insert(batch.tokens.end(), r->prompt.begin() + r->prefilled,
                        r->prompt.begin() + r->prefilled + take);
    batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.seqs.push_back(r->seq);
    rows.push_back(r.get());
    if (take == left) {
      batch.logit_indices.push_back(static_cast<int32_t>(batch.tokens.size()) - 1);
      completing.push_back(r.get());
    }
  }
  ForwardOutput fo = target_.forward(ctx_, kv_, batch);

  // First tokens of the rows whose prompt is complete (Philox counter = the token's position).
  std::vector<int32_t> first;
  if (!completing.empty()) {
    std::vector<SamplingParams> params;
    std::vector<uint64_t> seeds, counters;
    for (Row* r : completing) {
      params.push_back(r->options.sampling);
      seeds.push_back(r->options.seed);
      counters.push_back(r->prompt.size());
    }
    const auto m = static_cast<int64_t>(completing.size());
    if (!sampled_.view().defined() || sampled_.view().numel() < m)
      sampled_ = OwnedTensor(DType::i32, Shape{std::max<int64_t>(m, 16)}, target_.device());
    Tensor tokens = sampled_.view().slice(0, 0, m);
    // The first token's history is the prompt (only a repetition penalty applies).
    std::vector<PenaltyEntry>& edits = round_.penalties;
    edits.clear();
    round_.mask_rows.clear();
    round_.mask_words.clear();
    for (size_t i = 0; i < completing.size(); ++i) {
      Row& r = *completing[i];
      r.penalties.append_entries(static_cast<int32_t>(i), {}, edits);
      if (r.constrained())
        r.add_mask(*r.json, static_cast<int32_t>(i), fo.logits.size(1), round_.mask_rows,
                   round_.mask_words);
    }
    if (!edits.empty()) apply_penalties(ctx_, fo.logits, edits);
    if (!round_.mask_rows.empty())
      apply_token_mask(ctx_, fo.logits, round_.mask_rows, round_.mask_words);
    sample(ctx_, fo.logits, params, seeds, counters, tokens);
    first = to_vector<int32_t>(tokens);
    for (size_t i = 0; i < completing.size(); ++i) {
      Row& r = *completing[i];
      if (!r.wants_logprobs()) continue;
      const float* row =
          host_logits_rows(ctx_, fo.logits, static_cast<int64_t>(i), 1, round_.logits_host);
      r.logprobs.assign(1, token_logprobs(row, fo.logits.size(1), r.options.sampling.temperature,
                                          first[i], r.options.logprobs));
    }
  }

  std::vector<RowUpdate> updates;
  std::vector<Row*> publish;  // rows whose prompt the source publishes after its commit
  size_t ci = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& r = *rows[i];
    const int begin = batch.row_indptr[i];
    const int take = batch.row_indptr[i + 1] - begin;
    RowUpdate u;
    u.row = r.id;
    u.kept_tokens = std::span<const int32_t>(r.prompt).subspan(static_cast<size_t>(r.prefilled),
                                                               static_cast<size_t>(take));
    u.first_position = r.prefilled;
    u.tap_offset = begin;
    r.prefilled += take;
    if (ci < completing.size() && completing[ci] == &r) {
      r.pending = first[ci++];
      u.pending = r.pending;
      if (prefix_cache_active()) {
        kv_.publish_prefix(r.seq, r.prompt, r.prefilled);
        if (!taps_.empty()) publish.push_back(&r);
      }
    }
    updates.push_back(u);
  }
  if (source_) source_->commit(ctx_, updates, fo.taps);
  // The source's state of the prompts is complete after the commit.
  for (Row* r : publish) source_->publish_prefix(r->id, r->prompt, r->prefilled);
  clock.mark(PrefillMark::end);
  const double ms = clock.wall_ms(PrefillMark::begin, PrefillMark::end);
  for (Row* r : rows) {
    r->spec.prefill_ms += ms;
    if (r->pending >= 0 && r->prefilled == static_cast<int>(r->prompt.size()) &&
        r->out->n_generated() == 0) {
      if (r->push(std::span<const int32_t>(&r->pending, 1))) finish_row(*r);
    }
  }
}

void SpeculativeEngine::decode_round() {
  RoundClock clock({&ctx_}, config_.cpu_times);
  if (!propose()) return;
  clock.mark(RoundMark::proposed);
  build_verify_batch();
  clock.mark_cpu(RoundMark::batch_built);
  const ForwardOutput fo = verify(clock);
  clock.mark(RoundMark::verified);
  roll_back_target_kv();
  commit_to_source(fo.taps);
  clock.mark(RoundMark::committed);
  emit();
  clock.mark(RoundMark::emitted);
  // Rows that end here finish after this round's times are in their telemetry (finish_row hands
  // it out).
  add_round_times(clock);
  if (adaptive()) observe_round_cost(clock);
  for (Row* r : round_.ending) finish_row(*r);
}

bool SpeculativeEngine::propose() {
  RoundScratch& s = round_;
  s.rows.clear();
  s.requests.clear();
  for (auto& r : rows_) {
    if (r->done || r->pending < 0 || r->prefilled < static_cast<int>(r->prompt.size())) continue;
    s.rows.push_back(r.get());
    ProposeRequest q;
    q.row = r->id;
    // A round emits at most k + 1 tokens: never draft past max_tokens.
    const int remaining = r->options.max_tokens - r->out->n_generated();
    q.max_tokens = std::max(0, std::min(config_.gamma, remaining - 1));
    q.sampling = r->options.sampling;
    q.seed = r->options.seed;
    if (r->grammar) {
      r->grammar->reset(*r->json);
      q.grammar = &*r->grammar;
    }
    s.requests.push_back(q);
  }
  if (s.rows.empty()) return false;
  if (adaptive()) choose_lengths();

  Proposal& proposal = s.proposal;
  proposal.clear();
  const bool any_drafts = source_ && std::any_of(s.requests.begin(), s.requests.end(),
                                                 [](const auto& q) { return q.max_tokens > 0; });
  if (any_drafts) {
    source_->propose(ctx_, s.requests, proposal);
  } else {
    proposal.indptr.assign(s.rows.size() + 1, 0);
  }
  DSPARK_CHECK(proposal.indptr.size() == s.rows.size() + 1,
               "draft source returned {} entries for {}", proposal.indptr.size() - 1,
               s.rows.size());
  for (size_t i = 0; i < s.rows.size(); ++i)
    DSPARK_CHECK(proposal.count(i) <= s.requests[i].max_tokens,
                 "draft source proposed {} tokens, {} allowed", proposal.count(i),
                 s.requests[i].max_tokens);
  constrain_drafts();
  return true;
}

// Structured output: a row's drafts end at the first one the document does not accept (bytes
// that do not continue it, or EOS before it is complete), and after an EOS. The target's mask
// gives such a draft probability 0, so verification rejects it and everything after it; cutting
// it there is lossless and spares the verify forward those positions. Sources that draft under
// the grammar (ProposeRequest::grammar) propose no such draft; this is the net for the others.
// Then, with the adaptive policy and a source that rates its drafts (Proposal::acceptance), each
// row keeps the drafts that pay for their verify rows (cut_drafts). Both cuts depend only on the
// drafts, never on the target's output at their positions, so verification stays exact.
void SpeculativeEngine::constrain_drafts() {
  RoundScratch& s = round_;
  Proposal& p = s.proposal;
  s.drafts_kept.clear();
  bool cut = false;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Row& r = *s.rows[i];
    int keep = p.count(i);
    if (r.grammar) {
      r.grammar->reset(*r.json);  // the source moved it over its drafts
      keep = r.grammar->allowed_prefix(
          std::span<const int32_t>(p.tokens.data() + p.indptr[i], static_cast<size_t>(keep)));
    }
    cut = cut || keep < p.count(i);
    s.drafts_kept.push_back(keep);
  }
  s.drafts_rated.assign(s.drafts_kept.begin(), s.drafts_kept.end());
  s.acceptance_indptr.assign(p.indptr.begin(), p.indptr.end());
  s.acceptance.clear();
  if (adaptive() && !p.acceptance.empty()) {
    DSPARK_CHECK(p.acceptance.size() == p.tokens.size(), "draft source rated {} of {} drafts",
                 p.acceptance.size(), p.tokens.size());
    s.acceptance.swap(p.acceptance);
    cut = cut_drafts() || cut;
  }
  p.acceptance.clear();
  if (!cut) return;
  // Compact tokens (and the rows of q) in place: each kept draft moves to an earlier or equal
  // index, so no row is overwritten before it is moved.
  int32_t w = 0;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const int32_t begin = p.indptr[i];
    for (int32_t j = 0; j < s.drafts_kept[i]; ++j, ++w) {
      const int32_t src = begin + j;
      if (src == w) continue;
      p.tokens[static_cast<size_t>(w)] = p.tokens[static_cast<size_t>(src)];
      if (p.q.defined())
        ctx_.copy_async(p.q.rows(w, w + 1).data(), p.q.rows(src, src + 1).data(),
                        p.q.rows(src, src + 1).nbytes());
    }
  }
  for (size_t i = 0; i < s.rows.size(); ++i) p.indptr[i + 1] = p.indptr[i] + s.drafts_kept[i];
  p.tokens.resize(static_cast<size_t>(w));
  if (p.q.defined()) p.q = w > 0 ? p.q.rows(0, w) : Tensor();
}

// The rated drafts (the first drafts_rated[i] of row i, rated s.acceptance) cut to the lengths
// with the highest expected tokens per millisecond for the rest of the round: the draft step has
// run, so its cost counts as a fixed part of the round, and only the verify rows still depend on
// the lengths.
bool SpeculativeEngine::cut_drafts() {
  RoundScratch& s = round_;
  RoundCostModel& cost = s.cut_cost;
  cost = cost_;  // the verify points' storage is reused: no allocation per round
  int drafting = 0, asked = 0;
  for (const ProposeRequest& q : s.requests) {
    drafting += q.max_tokens > 0;
    asked += q.max_tokens;
  }
  cost.fixed_ms += cost.draft_ms_per_row * drafting + cost.draft_ms_per_token * asked;
  cost.draft_ms_per_row = cost.draft_ms_per_token = 0;
  s.choice.clear();
  for (size_t i = 0; i < s.rows.size(); ++i)
    s.choice.push_back({std::span<const float>(s.acceptance)
                            .subspan(static_cast<size_t>(s.acceptance_indptr[i]),
                                     static_cast<size_t>(s.drafts_rated[i])),
                        s.drafts_rated[i]});
  choose_draft_lengths(s.choice, cost, s.lengths);
  bool cut = false;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    s.drafts_kept[i] = std::min(s.drafts_kept[i], s.lengths[i]);
    cut = cut || s.lengths[i] < s.drafts_rated[i];
  }
  return cut;
}

void SpeculativeEngine::choose_lengths() {
  RoundScratch& s = round_;
  s.choice.clear();
  for (size_t i = 0; i < s.rows.size(); ++i)
    s.choice.push_back({s.rows[i]->accept.conditional(), s.requests[i].max_tokens});
  choose_draft_lengths(s.choice, cost_, s.lengths);
  // Rows given no draft whose probe is due (DraftProbe): offered one draft rated at the prior,
  // beside the other rows' drafts as chosen; the policy takes a probe where it pays.
  s.probing.assign(s.rows.size(), 0);
  bool offered = false;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    s.probing[i] = s.lengths[i] == 0 && s.requests[i].max_tokens > 0 && s.rows[i]->probe.due();
    offered = offered || s.probing[i];
  }
  if (offered) {
    s.choice.clear();
    for (size_t i = 0; i < s.rows.size(); ++i) {
      s.choice.push_back(s.probing[i]
                             ? DraftLengthRow{DraftProbe::rating(), 1}
                             : DraftLengthRow{s.rows[i]->accept.conditional(), s.lengths[i]});
    }
    choose_draft_lengths(s.choice, cost_, s.probe_lengths);
    for (size_t i = 0; i < s.rows.size(); ++i)
      if (s.probing[i]) s.lengths[i] = s.probe_lengths[i];
  }
  for (size_t i = 0; i < s.rows.size(); ++i) s.requests[i].max_tokens = s.lengths[i];
}

void SpeculativeEngine::observe_round_cost(const RoundClock& clock) {
  // EWMA weight of a round's measurement; the first drafting round (warm-up: first-touch of the
  // drafter's buffers, CUDA graph captures) is not used.
  constexpr double kRate = 0.1;
  const RoundScratch& s = round_;
  int drafting = 0, drafts = 0;
  for (const ProposeRequest& q : s.requests) {
    drafting += q.max_tokens > 0;
    drafts += q.max_tokens;
  }
  // The draft step's cost, with the commit when only drafting rows pay for it (a source that
  // defers the others'), less the catch-up of rows that resumed drafting (once per resumption).
  const double catch_up = source_->stats().catch_up_ms;
  const double resumed_ms = catch_up - catch_up_ms_;
  catch_up_ms_ = catch_up;
  const bool commit_drafts = source_->defers_idle_commits();
  const double commit_ms = clock.wall_ms(RoundMark::verified, RoundMark::committed);
  if (drafting > 0 && draft_cost_samples_++ > 0) {
    const double ms = clock.wall_ms(RoundMark::begin, RoundMark::proposed) +
                      (commit_drafts ? commit_ms : 0.0) - resumed_ms;
    draft_fit_.observe(drafting, drafts, std::max(0.0, ms));
    draft_fit_.apply(cost_);
  }
  const double profiled =
      cost_.verify_ms(static_cast<int>(s.batch.tokens.size())) / cost_.verify_scale;
  if (profiled > 0) {
    ++verify_rounds_;
    const double ratio = clock.wall_ms(RoundMark::proposed, RoundMark::verified) / profiled;
    cost_.verify_scale += kRate * (ratio - cost_.verify_scale);
  }
  const double rest =
      clock.wall_ms(commit_drafts ? RoundMark::committed : RoundMark::verified, RoundMark::emitted);
  cost_.fixed_ms += kRate * (rest - cost_.fixed_ms);
}

// The verify batch: [pending, drafts] per row, logits for every token.
void SpeculativeEngine::build_verify_batch() {
  RoundScratch& s = round_;
  const Proposal& proposal = s.proposal;
  ForwardBatch& batch = s.batch;
  batch.tokens.clear();
  batch.row_indptr.assign(1, 0);
  batch.seqs.clear();
  batch.tap_layers = taps_;  // same size every round: no allocation
  s.params.clear();
  s.seeds.clear();
  s.positions.clear();
  s.length_before.clear();
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Row& r = *s.rows[i];
    const int len = kv_.length(r.seq);
    s.length_before.push_back(len);
    batch.tokens.push_back(r.pending);
    batch.tokens.insert(batch.tokens.end(), proposal.tokens.begin() + proposal.indptr[i],
                        proposal.tokens.begin() + proposal.indptr[i + 1]);
    batch.row_indptr.push_back(static_cast<int32_t>(batch.tokens.size()));
    batch.seqs.push_back(r.seq);
    s.params.push_back(r.options.sampling);
    s.seeds.push_back(r.options.seed);
    s.positions.push_back(len + 1);
  }
  batch.logit_indices.resize(batch.tokens.size());
  for (size_t t = 0; t < batch.tokens.size(); ++t) batch.logit_indices[t] = static_cast<int32_t>(t);
  // A greedy round takes the target's argmax from the forward itself, unless penalties change the
  // logits after the forward.
  const bool penalized = std::any_of(s.rows.begin(), s.rows.end(), [](const Row* r) {
    return r->penalties.active() || r->constrained();
  });
  batch.want_argmax = Verifier::is_greedy(proposal, s.params) && !penalized;
}

// One target forward over the batch, then the verifier: accepted counts and next tokens.
ForwardOutput SpeculativeEngine::verify(RoundClock& clock) {
  RoundScratch& s = round_;
  ForwardOutput fo = target_.forward(ctx_, kv_, s.batch);
  clock.mark_cpu(RoundMark::forwarded);
  penalize_verify_logits(fo.logits);
  verifier_.verify(ctx_, fo.logits, s.proposal, s.params, s.seeds, s.positions, s.verified,
                   fo.argmax);
  round_logprobs(fo.logits);
  return fo;
}

// Row i's logits row j (scoring draft j + 1) sees the drafts 1..j as generated tokens: its
// penalties count them, and its structured-output mask is that of the document after them (a
// snapshot of the row's matcher advanced over the drafts, which constrain_drafts keeps to drafts
// the document accepts).
void SpeculativeEngine::penalize_verify_logits(const Tensor& logits) {
  RoundScratch& s = round_;
  std::vector<PenaltyEntry>& edits = s.penalties;
  edits.clear();
  s.mask_rows.clear();
  s.mask_words.clear();
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Row& r = *s.rows[i];
    if (!r.penalties.active() && !r.constrained()) continue;
    const int32_t row0 = s.batch.row_indptr[i];
    const std::span<const int32_t> drafts(s.proposal.tokens.data() + s.proposal.indptr[i],
                                          static_cast<size_t>(s.proposal.count(i)));
    std::optional<JsonMatcher> state = r.json;
    bool eos = false;  // after an EOS draft the document stays complete: only EOS follows
    for (size_t j = 0; j <= drafts.size(); ++j) {
      const auto row = row0 + static_cast<int32_t>(j);
      r.penalties.append_entries(row, drafts.first(j), edits);
      if (!state) continue;
      r.add_mask(*state, row, logits.size(1), s.mask_rows, s.mask_words);
      if (j == drafts.size()) break;
      const JsonConstraint& c = *r.options.json;
      eos = eos || c.is_eos(drafts[j]);
      if (!eos && !c.vocab->advance(*state, drafts[j])) state.reset();
    }
  }
  if (!edits.empty()) apply_penalties(ctx_, logits, edits);
  if (!s.mask_rows.empty()) apply_token_mask(ctx_, logits, s.mask_rows, s.mask_words);
}

// The emitted tokens of row i are its accepted drafts, then the target's token: logits rows
// row0 .. row0 + n_accepted.
void SpeculativeEngine::round_logprobs(const Tensor& logits) {
  RoundScratch& s = round_;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Row& r = *s.rows[i];
    r.logprobs.clear();
    if (!r.wants_logprobs()) continue;
    const int32_t row0 = s.batch.row_indptr[i];
    const int32_t n_acc = s.verified.n_accepted[i];
    const float* rows = host_logits_rows(ctx_, logits, row0, n_acc + 1, s.logits_host);
    const int64_t v = logits.size(1);
    for (int32_t j = 0; j <= n_acc; ++j) {
      const int32_t token =
          j < n_acc ? s.proposal.tokens[s.proposal.indptr[i] + j] : s.verified.next_token[i];
      r.logprobs.push_back(token_logprobs(rows + j * v, v, r.options.sampling.temperature, token,
                                          r.options.logprobs));
    }
  }
}

// The target keeps [pending, accepted drafts]; the rest of its KV is dropped.
void SpeculativeEngine::roll_back_target_kv() {
  const RoundScratch& s = round_;
  for (size_t i = 0; i < s.rows.size(); ++i)
    kv_.rollback_to(s.rows[i]->seq, s.length_before[i] + 1 + s.verified.n_accepted[i]);
}

// Each row's kept tokens (Row::kept, also what emit sends on) and the source's update.
void SpeculativeEngine::commit_to_source(std::span<const Tensor> taps) {
  RoundScratch& s = round_;
  const Proposal& proposal = s.proposal;
  std::vector<RowUpdate>& updates = s.updates;
  updates.assign(s.rows.size(), RowUpdate{});
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Row& r = *s.rows[i];
    const int n_acc = s.verified.n_accepted[i];
    r.kept.assign(1, r.pending);
    r.kept.insert(r.kept.end(), proposal.tokens.begin() + proposal.indptr[i],
                  proposal.tokens.begin() + proposal.indptr[i] + n_acc);
    RowUpdate& u = updates[i];
    u.row = r.id;
    u.kept_tokens = r.kept;
    u.first_position = s.length_before[i];
    u.tap_offset = s.batch.row_indptr[i];
    u.pending = s.verified.next_token[i];
    u.n_drafted = proposal.count(i);
    u.n_accepted = n_acc;
  }
  if (source_) source_->commit(ctx_, updates, taps);
}

// One token at a time: accepted drafts, then the target's token. The rows whose stream ends are
// collected in `ending`, for decode_round to finish once the round's times are in.
void SpeculativeEngine::emit() {
  RoundScratch& s = round_;
  s.ending.clear();
  for (size_t i = 0; i < s.rows.size(); ++i) {
    Row& r = *s.rows[i];
    const int32_t next = s.verified.next_token[i];
    s.burst.assign(r.kept.begin() + 1, r.kept.end());
    s.burst.push_back(next);
    r.pending = next;
    r.spec.record_round(s.proposal.count(i), s.verified.n_accepted[i]);
    r.spec.draft_budget += s.requests[i].max_tokens;
    r.spec.drafts_cut += s.drafts_rated[i] - s.proposal.count(i);
    const bool probed = adaptive() && s.probing[i];
    r.spec.probes_offered += probed;
    if (s.requests[i].max_tokens > 0) {
      const int n = s.proposal.count(i), accepted = s.verified.n_accepted[i];
      r.accept.observe(n, accepted);
      pooled_.observe(n, accepted);
      if (probed) {
        ++r.spec.probes_taken;
        r.spec.probes_accepted += accepted > 0;
        if (r.probe.probed(true, accepted > 0)) {
          r.accept.reset();
        } else {
          probe_backoff_ = std::max(probe_backoff_, r.probe.backoff());
        }
      } else {
        r.probe.drafted();
        probe_backoff_ = DraftProbe::kMinBackoff;
      }
      // Drafts the policy cut (cut_drafts) were never verified: their rating stands in for the
      // outcome, so that a row whose drafts are all cut still learns that drafting does not pay.
      if (accepted == n && n < s.drafts_rated[i] && !s.acceptance.empty()) {
        const auto rated = std::span<const float>(s.acceptance)
                               .subspan(static_cast<size_t>(s.acceptance_indptr[i] + n),
                                        static_cast<size_t>(s.drafts_rated[i] - n));
        r.accept.expect(n, rated);
        pooled_.expect(n, rated);
      }
    } else if (probed) {  // declined: one draft at the prior does not pay for this batch
      r.probe.probed(false, false);
      probe_backoff_ = std::max(probe_backoff_, r.probe.backoff());
    } else {
      r.probe.waited();
    }
    if (r.push(s.burst)) s.ending.push_back(&r);
  }
}

void SpeculativeEngine::add_round_times(const RoundClock& clock) {
  using M = RoundMark;
  const double draft_ms = clock.wall_ms(M::begin, M::proposed);
  const double verify_ms = clock.wall_ms(M::proposed, M::verified);
  const double rest_ms = clock.wall_ms(M::verified, M::emitted);
  // The verifier's clock read between enqueueing and waiting (none when it enqueued nothing).
  const double enqueued =
      verifier_.enqueued_cpu_ms() > 0 ? verifier_.enqueued_cpu_ms() : clock.cpu_at(M::verified);
  const double wait_ms = verifier_.wait_ms();
  for (Row* r : round_.rows) {
    SpecTelemetry& t = r->spec;
    t.draft_ms += draft_ms;
    t.verify_ms += verify_ms;
    t.rest_ms += rest_ms;
    if (!clock.cpu_times()) continue;
    t.draft_cpu_ms += clock.cpu_ms(M::begin, M::proposed);
    t.verify_cpu_ms += clock.cpu_ms(M::proposed, M::verified);
    t.rest_cpu_ms += clock.cpu_ms(M::verified, M::emitted);
    t.verify_batch_cpu_ms += clock.cpu_ms(M::proposed, M::batch_built);
    t.verify_forward_cpu_ms += clock.cpu_ms(M::batch_built, M::forwarded);
    t.verify_launch_cpu_ms += enqueued - clock.cpu_at(M::forwarded);
    t.verify_read_cpu_ms += clock.cpu_at(M::verified) - enqueued;
    t.verify_wait_ms += wait_ms;
    t.sync_wait_ms += clock.sync_ms(M::begin, M::emitted);
    t.draft_sync_wait_ms += clock.sync_ms(M::begin, M::proposed);
    t.verify_sync_wait_ms += clock.sync_ms(M::proposed, M::verified);
  }
}

void SpeculativeEngine::finish_row(Row& r) {
  if (r.done) return;
  r.done = true;
  // Release must not fail a request that is ending (it may follow a failed step).
  try {
    if (source_) source_->release(r.id);
  } catch (const Error&) {
  }
  kv_.release(r.seq);
  finished_.emplace_back(r.id, RequestOutput{r.out->finish(), r.spec});
}

int64_t speculative_kv_tokens(std::span<const RequestInput> requests, const SpecConfig& config) {
  int64_t tokens = 0;
  for (const auto& r : requests)
    tokens += static_cast<int64_t>(r.prompt.size()) + std::max(0, r.options.max_tokens) +
              config.gamma + 1 + config.page_size;
  return tokens;
}

std::vector<RequestOutput> generate_speculative(Model& target, Context& ctx, DraftSource* source,
                                                std::vector<RequestInput> requests,
                                                const SpecConfig& config) {
  const int64_t tokens = speculative_kv_tokens(requests, config);
  DSPARK_CHECK_KIND(invalid_input, tokens < (int64_t{1} << 30), "requests too long");
  SpecConfig c = config;
  if (c.max_rows <= 0) c.max_rows = static_cast<int>(requests.size());
  SpeculativeEngine engine(target, ctx, source, c, static_cast<int>(tokens));
  std::vector<RowId> ids;
  for (auto& r : requests) ids.push_back(engine.add(std::move(r)));
  std::vector<RequestOutput> out(ids.size());
  while (engine.has_work()) {
    engine.step();
    for (auto& [id, o] : engine.take_finished())
      out[static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin())] = std::move(o);
  }
  return out;
}

}  // namespace dspark
