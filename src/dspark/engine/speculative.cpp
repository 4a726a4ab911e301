#include "dspark/engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "dspark/core/thread_cpu_time.h"
#include "dspark/ops/sampling.h"

namespace dspark {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

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
  std::vector<int32_t> kept;  // storage behind RowUpdate::kept_tokens for one commit
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
}

SpeculativeEngine::~SpeculativeEngine() = default;

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
  row->seq = kv_.create_sequence();
  // At least the last prompt token is computed again: its logits give the first token.
  if (prefix_cache_active()) {
    row->prefilled =
        kv_.attach_prefix(row->seq, row->prompt, static_cast<int>(row->prompt.size()) - 1);
    row->spec.prefix_reused = row->prefilled;
  }
  const int capacity =
      reserve_tokens(static_cast<int>(row->prompt.size()), input.options.max_tokens);
  if (!kv_.reserve(row->seq, capacity)) {
    kv_.release(row->seq);
    DSPARK_FAIL(out_of_memory, "KV cache full: the request needs {} pages for {} tokens, {} free",
                kv_.pages_for_tokens(capacity), capacity, kv_.free_pages());
  }
  if (source_) source_->begin(ctx_, row->id, row->prompt);
  rows_.push_back(std::move(row));
  return rows_.back()->id;
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
  const auto t0 = Clock::now();
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
    sample(ctx_, fo.logits, params, seeds, counters, tokens);
    first = to_vector<int32_t>(tokens);
  }

  std::vector<RowUpdate> updates;
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
      if (prefix_cache_active()) kv_.publish_prefix(r.seq, r.prompt, r.prefilled);
    }
    updates.push_back(u);
  }
  if (source_) source_->commit(ctx_, updates, fo.taps);
  const double ms = ms_since(t0);
  for (Row* r : rows) {
    r->spec.prefill_ms += ms;
    if (r->pending >= 0 && r->prefilled == static_cast<int>(r->prompt.size()) &&
        r->out->n_generated() == 0) {
      if (r->out->push(std::span<const int32_t>(&r->pending, 1))) finish_row(*r);
    }
  }
}

void SpeculativeEngine::decode_round() {
  const auto t0 = Clock::now();
  const bool cpu_times = config_.cpu_times;
  const double c0 = cpu_times ? thread_cpu_ms() : 0.0;
  const double sync0 = cpu_times ? ctx_.synchronize_wall_ms() : 0.0;
  RoundScratch& s = round_;
  std::vector<Row*>& rows = s.rows;
  std::vector<ProposeRequest>& requests = s.requests;
  rows.clear();
  requests.clear();
  for (auto& r : rows_) {
    if (r->done || r->pending < 0 || r->prefilled < static_cast<int>(r->prompt.size())) continue;
    rows.push_back(r.get());
    ProposeRequest q;
    q.row = r->id;
    // A round emits at most k + 1 tokens: never draft past max_tokens.
    const int remaining = r->options.max_tokens - r->out->n_generated();
    q.max_tokens = std::max(0, std::min(config_.gamma, remaining - 1));
    q.sampling = r->options.sampling;
    q.seed = r->options.seed;
    requests.push_back(q);
  }
  if (rows.empty()) return;

  Proposal& proposal = s.proposal;
  proposal.clear();
  const bool any_drafts = source_ && std::any_of(requests.begin(), requests.end(),
                                                 [](const auto& q) { return q.max_tokens > 0; });
  if (any_drafts) {
    source_->propose(ctx_, requests, proposal);
  } else {
    proposal.indptr.assign(rows.size() + 1, 0);
  }
  DSPARK_CHECK(proposal.indptr.size() == rows.size() + 1, "draft source returned {} entries for {}",
               proposal.indptr.size() - 1, rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    DSPARK_CHECK(proposal.count(i) <= requests[i].max_tokens,
                 "draft source proposed {} tokens, {} allowed", proposal.count(i),
                 requests[i].max_tokens);
  const auto t1 = Clock::now();
  const double c1 = cpu_times ? thread_cpu_ms() : 0.0;
  const double sync1 = cpu_times ? ctx_.synchronize_wall_ms() : 0.0;

  // The verify batch: [pending, drafts] per row, logits for every token.
  ForwardBatch& batch = s.batch;
  batch.tokens.clear();
  batch.row_indptr.assign(1, 0);
  batch.seqs.clear();
  batch.tap_layers = taps_;  // same size every round: no allocation
  s.params.clear();
  s.seeds.clear();
  s.positions.clear();
  s.length_before.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& r = *rows[i];
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
  // A greedy round takes the target's argmax from the forward itself.
  batch.want_argmax = Verifier::is_greedy(proposal, s.params);
  const double cb = cpu_times ? thread_cpu_ms() : 0.0;
  ForwardOutput fo = target_.forward(ctx_, kv_, batch);
  const double cf = cpu_times ? thread_cpu_ms() : 0.0;
  VerifyResult& vr = s.verified;
  verifier_.verify(ctx_, fo.logits, proposal, s.params, s.seeds, s.positions, vr, fo.argmax);
  const auto t2 = Clock::now();
  const double c2 = cpu_times ? thread_cpu_ms() : 0.0;
  const double sync2 = cpu_times ? ctx_.synchronize_wall_ms() : 0.0;

  // Commit: the target keeps [pending, accepted drafts]; the rest of its KV is dropped.
  std::vector<RowUpdate>& updates = s.updates;
  updates.assign(rows.size(), RowUpdate{});
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& r = *rows[i];
    const int n_acc = vr.n_accepted[i];
    kv_.rollback_to(r.seq, s.length_before[i] + 1 + n_acc);
    r.kept.assign(1, r.pending);
    r.kept.insert(r.kept.end(), proposal.tokens.begin() + proposal.indptr[i],
                  proposal.tokens.begin() + proposal.indptr[i] + n_acc);
    RowUpdate& u = updates[i];
    u.row = r.id;
    u.kept_tokens = r.kept;
    u.first_position = s.length_before[i];
    u.tap_offset = batch.row_indptr[i];
    u.pending = vr.next_token[i];
    u.n_drafted = proposal.count(i);
    u.n_accepted = n_acc;
  }
  if (source_) source_->commit(ctx_, updates, fo.taps);

  // Emit one token at a time: accepted drafts, then the target's token. Rows that end here finish
  // after this round's times are in their telemetry (finish_row hands it out).
  std::vector<int32_t>& burst = s.burst;
  std::vector<Row*>& ending = s.ending;
  ending.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& r = *rows[i];
    const int n_acc = vr.n_accepted[i];
    burst.assign(r.kept.begin() + 1, r.kept.end());
    burst.push_back(vr.next_token[i]);
    r.pending = vr.next_token[i];
    r.spec.record_round(proposal.count(i), n_acc);
    if (r.out->push(burst)) ending.push_back(&r);
  }
  const double draft_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double verify_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  const double rest_ms = ms_since(t2);
  const double c3 = cpu_times ? thread_cpu_ms() : 0.0;
  // The verifier's clock read between enqueueing and waiting (none when it enqueued nothing).
  const double ce = verifier_.enqueued_cpu_ms() > 0 ? verifier_.enqueued_cpu_ms() : c2;
  const double wait_ms = verifier_.wait_ms();
  const double sync_ms = cpu_times ? ctx_.synchronize_wall_ms() - sync0 : 0.0;
  for (Row* r : rows) {
    r->spec.draft_ms += draft_ms;
    r->spec.verify_ms += verify_ms;
    r->spec.rest_ms += rest_ms;
    if (!cpu_times) continue;
    r->spec.draft_cpu_ms += c1 - c0;
    r->spec.verify_cpu_ms += c2 - c1;
    r->spec.rest_cpu_ms += c3 - c2;
    r->spec.verify_batch_cpu_ms += cb - c1;
    r->spec.verify_forward_cpu_ms += cf - cb;
    r->spec.verify_launch_cpu_ms += ce - cf;
    r->spec.verify_read_cpu_ms += c2 - ce;
    r->spec.verify_wait_ms += wait_ms;
    r->spec.sync_wait_ms += sync_ms;
    r->spec.draft_sync_wait_ms += sync1 - sync0;
    r->spec.verify_sync_wait_ms += sync2 - sync1;
  }
  for (Row* r : ending) finish_row(*r);
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
  SpeculativeEngine engine(target, ctx, source, config, static_cast<int>(tokens));
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
