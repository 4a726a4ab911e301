#include "dspark/server/engine_worker.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/device.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/buffer.h"
#include "dspark/engine/text_generation.h"
#include "dspark/model/registry.h"
#include "dspark/server/errors.h"
#include "dspark/spec/source_factory.h"

namespace dspark::server {

// ---- RequestChannel ----------------------------------------------------------------------------

uint64_t ChannelWakeup::changes() const {
  std::lock_guard lock(mutex_);
  return changes_;
}

void ChannelWakeup::wait_after(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return changes_ != seen; });
}

void ChannelWakeup::notify() {
  {
    std::lock_guard lock(mutex_);
    ++changes_;
  }
  cv_.notify_all();
}

void RequestChannel::notify() {
  cv_.notify_all();
  if (wakeup_) wakeup_->notify();
}

RequestChannel::Update RequestChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !pieces_.empty(); });
  Update u;
  u.pieces = std::exchange(pieces_, {});
  u.done = done_;
  return u;
}

void RequestChannel::push_text(std::string_view piece) {
  if (piece.empty()) return;
  if (!has_text_) {
    has_text_ = true;
    first_text_ = Clock::now();
  }
  {
    std::lock_guard lock(mutex_);
    pieces_.push_back(Piece{std::string(piece), std::exchange(loose_, {})});
  }
  notify();
}

void RequestChannel::push_logprobs(const TokenLogprobs& entry) {
  std::lock_guard lock(mutex_);
  loose_.push_back(entry);  // delivered with the next piece (or, at the end, from output())
}

void RequestChannel::complete(RequestOutput output, int error_status) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    output_ = std::move(output);
    error_status_ = error_status;
    done_ = true;
  }
  notify();
}

// ---- EngineWorker ------------------------------------------------------------------------------

struct EngineWorker::Engine {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<TextModel> tm;
  CreatedSource source;
  std::unique_ptr<SpeculativeEngine> engine;
};

EngineWorker::EngineWorker(EngineWorkerConfig config, ServerMetrics& metrics)
    : config_(std::move(config)), metrics_(metrics) {}

EngineWorker::~EngineWorker() {
  stop();
}

void EngineWorker::start() {
  DSPARK_CHECK(!thread_.joinable(), "engine worker started twice");
  DSPARK_CHECK_KIND(invalid_input, config_.max_batch >= 1, "--max-batch must be >= 1");
  DSPARK_CHECK_KIND(invalid_input, config_.max_queue >= 1, "--max-queue must be >= 1");
  thread_ = std::thread([this] { thread_main(); });
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return loaded_ || load_error_.has_value(); });
  if (load_error_) {
    const auto [kind, message] = *load_error_;
    lock.unlock();
    thread_.join();
    detail::fail(kind, "", __FILE__, __LINE__, message);
  }
}

bool EngineWorker::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

std::shared_ptr<RequestChannel> EngineWorker::submit(std::vector<int32_t> prompt,
                                                     GenerateOptions options,
                                                     std::shared_ptr<ChannelWakeup> wakeup) {
  auto ch = std::make_shared<RequestChannel>(std::move(wakeup));
  ch->submitted_ = RequestChannel::Clock::now();
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || !running_)
      throw ApiError(503, "server_error", "the server is shutting down", {}, "unavailable",
                     "unavailable");
    if (static_cast<int>(queue_.size()) >= config_.max_queue)
      throw ApiError(503, "server_error",
                     fmt::format("the server is busy: {} requests are already waiting; retry "
                                 "later",
                                 queue_.size()),
                     {}, "queue_full", "queue_full");
    queue_.push_back(Pending{ch, std::move(prompt), std::move(options)});
  }
  cv_.notify_all();
  return ch;
}

void EngineWorker::cancel(const std::shared_ptr<RequestChannel>& channel) {
  {
    std::lock_guard lock(mutex_);
    if (channel->cancel_requested_) return;
    channel->cancel_requested_ = true;
    cancels_.push_back(channel);
  }
  cv_.notify_all();
}

void EngineWorker::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineWorker::thread_main() {
  Engine e;
  try {
    load(e);
  } catch (const Error& err) {
    std::lock_guard lock(mutex_);
    load_error_.emplace(err.kind(), err.what());
  } catch (const std::exception& err) {
    std::lock_guard lock(mutex_);
    load_error_.emplace(ErrorKind::internal, err.what());
  }
  {
    std::lock_guard lock(mutex_);
    if (load_error_) {
      cv_.notify_all();
      return;
    }
    loaded_ = true;
    running_ = true;
  }
  cv_.notify_all();
  serve(e);
  std::lock_guard lock(mutex_);
  running_ = false;
}

int64_t default_kv_tokens(const KvSizing& s) {
  const int64_t want = s.per_request * std::max(1, s.max_batch);
  int64_t cap = kDefaultCpuKvTokens;
  if (s.cuda) {
    const size_t margin = std::max(kMinCudaMarginBytes, s.total_bytes / 10);
    size_t budget = s.free_bytes > margin ? s.free_bytes - margin : 0;
    if (s.drafter_cache) budget /= 2;
    cap =
        static_cast<int64_t>(budget / static_cast<size_t>(std::max<int64_t>(1, s.bytes_per_token)));
  }
  return std::max(s.per_request, std::min(want, cap));
}

void EngineWorker::load(Engine& e) {
  const Device device = parse_device(config_.device);
  e.ctx = std::make_unique<Context>(device);
  e.ctx->cuda_tuning().batch_invariant = config_.exact;
  e.tm = std::make_unique<TextModel>(
      load_text_model(config_.model_dir, device, default_engine_dtype(device)));
  Model& target = *e.tm->model;
  const ModelConfig& mc = target.config();

  const int max_context =
      config_.max_context > 0 ? config_.max_context : mc.max_position_embeddings;
  DSPARK_CHECK_KIND(invalid_input, max_context >= 2, "--max-context must be >= 2 (got {})",
                    max_context);
  const int page = config_.page_size;
  // A request reserves prompt + max_tokens + gamma + 1 tokens (rounded up to pages); gamma <= 64.
  const int64_t per_request = (int64_t{max_context} + 65 + page - 1) / page * page;
  const KvCacheShape unit = target.kv_shape(page, 1);
  int64_t kv_tokens = 0;
  if (config_.kv_memory > 0) {
    kv_tokens = int64_t{PagedKvCache::pages_for_bytes(unit, config_.kv_memory)} * page;
  } else {
    KvSizing sizing;
    sizing.per_request = per_request;
    sizing.max_batch = config_.max_batch;
    sizing.cuda = device.is_cuda();
    sizing.bytes_per_token = static_cast<int64_t>(PagedKvCache::bytes_per_page(unit) / page);
    if (device.is_cuda()) {
      const cuda::MemoryInfo mem = cuda::memory_info(device.index);
      sizing.free_bytes = mem.free_bytes;
      sizing.total_bytes = mem.total_bytes;
    }
    sizing.drafter_cache = config_.draft != "none" && config_.draft != "ngram";
    kv_tokens = default_kv_tokens(sizing);
  }
  DSPARK_CHECK_KIND(invalid_input, kv_tokens >= per_request,
                    "the KV cache ({} tokens) cannot hold one request of the maximum context ({} "
                    "tokens + draft slack); raise --kv-memory or lower --max-context",
                    kv_tokens, max_context);
  DSPARK_CHECK_KIND(invalid_input, kv_tokens < (int64_t{1} << 30), "--kv-memory is too large");

  DraftOptions draft;
  draft.draft = config_.draft;
  draft.draft_vocab = config_.draft_vocab;
  draft.draft_fp8 = config_.draft_fp8;
  draft.ngram = config_.ngram;
  // The drafter's own cache holds the same rows (plus per-row page rounding and draft slack).
  draft.draft_model_kv_tokens =
      static_cast<int>(kv_tokens + int64_t{config_.max_batch} * (2 * page + 65));
  e.source = create_draft_source(draft, target);
  SpecConfig spec;
  spec.gamma = config_.gamma ? *config_.gamma : e.source.default_gamma;
  spec.page_size = page;
  spec.prefill_chunk = config_.prefill_chunk;
  spec.prefix_cache = config_.prefix_cache;
  spec.draft_policy = config_.draft_policy;
  spec.max_rows = config_.max_batch;
  spec.cost_cache = config_.cost_cache;
  // The engine's notices while it starts, printed by `dspark serve` after its first line.
  auto notices = std::make_shared<std::vector<std::string>>();
  spec.log = [notices](std::string_view line) { notices->emplace_back(line); };
  e.engine = std::make_unique<SpeculativeEngine>(target, *e.ctx, e.source.source.get(), spec,
                                                 static_cast<int>(kv_tokens));

  model_.engine_notices = *notices;
  model_.tokenizer = e.tm->tokenizer;
  model_.eos_token_ids = e.tm->eos_token_ids;
  model_.defaults = e.tm->defaults;
  model_.vocab_size = mc.vocab_size;
  model_.max_context = max_context;
  model_.kv_tokens = static_cast<int>(kv_tokens);
  model_.kv_pages = e.engine->kv().shape().num_pages;
  model_.kv_bytes = static_cast<int64_t>(PagedKvCache::bytes_per_page(unit)) * model_.kv_pages;
  model_.reserved_bytes = memory_stats(device).active_bytes;
  if (device.is_cuda()) {
    const cuda::MemoryInfo mem = cuda::memory_info(device.index);
    model_.free_bytes = static_cast<int64_t>(mem.free_bytes);
    model_.total_bytes = static_cast<int64_t>(mem.total_bytes);
  }
  model_.device = device.name();
  model_.draft_kind = e.source.kind;
  model_.gamma = e.source.source ? spec.gamma : 0;
  model_.draft_policy = e.engine->adaptive() ? DraftPolicy::adaptive : DraftPolicy::fixed;
}

void EngineWorker::finish_channel(RequestChannel& ch, RequestOutput out, int error_status) {
  const auto now = RequestChannel::Clock::now();
  const double latency = std::chrono::duration<double>(now - ch.submitted_).count();
  const double ttft =
      ch.has_text_ ? std::chrono::duration<double>(ch.first_text_ - ch.submitted_).count() : -1;
  metrics_.record_finished(out, ttft, latency);
  ch.complete(std::move(out), error_status);
}

namespace {
RequestOutput ended_output(int n_prompt, FinishReason reason, std::string message) {
  RequestOutput out;
  out.result.n_prompt = n_prompt;
  out.result.finish_reason = reason;
  out.result.error = std::move(message);
  return out;
}
}  // namespace

void EngineWorker::admit(Engine& e, std::vector<Pending>& admitted) {
  for (Pending& p : admitted) {
    RequestChannel& ch = *p.channel;
    const int n_prompt = static_cast<int>(p.prompt.size());
    auto detok = std::make_unique<TokenizerDetokenizer>(e.tm->tokenizer);
    RequestInput in;
    in.prompt = std::move(p.prompt);
    in.options = std::move(p.options);
    in.detokenizer = detok.get();
    in.on_text = [c = &ch](std::string_view piece) { c->push_text(piece); };
    if (in.options.logprobs >= 0)
      in.on_logprobs = [c = &ch](const TokenLogprobs& entry) { c->push_logprobs(entry); };
    try {
      ch.row_ = e.engine->add(std::move(in));
      live_.emplace(ch.row_, Live{p.channel, std::move(detok)});
    } catch (const Error& err) {
      const ApiError api = from_engine_error(err);
      metrics_.record_error(api.kind());
      finish_channel(ch, ended_output(n_prompt, FinishReason::error, err.what()), api.status());
    }
  }
  admitted.clear();
}

void EngineWorker::dispatch_finished(Engine& e) {
  for (auto& [id, out] : e.engine->take_finished()) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    const bool failed = out.result.finish_reason == FinishReason::error;
    finish_channel(*it->second.channel, std::move(out), failed ? 500 : 200);
    live_.erase(it);
  }
}

void EngineWorker::serve(Engine& e) {
  SpeculativeEngine& engine = *e.engine;
  std::vector<Pending> admitted;
  std::vector<std::shared_ptr<RequestChannel>> cancels;
  std::vector<Pending> dropped;
  publish_gauges(engine);
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] {
        return stopping_ || !cancels_.empty() || engine.has_work() ||
               (!queue_.empty() && engine.live_rows() < config_.max_batch &&
                engine.can_admit(static_cast<int>(queue_.front().prompt.size()),
                                 queue_.front().options.max_tokens));
      });
      stopping = stopping_;
      cancels = std::exchange(cancels_, {});
      // Cancelled requests still waiting leave the queue now.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->channel->cancel_requested_ || stopping) {
          dropped.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      // Admission in arrival order (no overtaking: a large request at the head is not starved).
      int live = engine.live_rows();
      while (!stopping && !queue_.empty() && live < config_.max_batch &&
             engine.can_admit(static_cast<int>(queue_.front().prompt.size()),
                              queue_.front().options.max_tokens)) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        ++live;
      }
    }
    for (Pending& p : dropped)
      finish_channel(*p.channel,
                     ended_output(static_cast<int>(p.prompt.size()), FinishReason::cancelled,
                                  stopping ? "the server is shutting down" : "cancelled"),
                     503);
    dropped.clear();
    for (auto& ch : cancels)
      if (ch->row_ >= 0) engine.cancel(ch->row_);
    cancels.clear();
    if (stopping) {
      for (auto& [id, live] : live_) engine.cancel(id);
      for (auto& [id, out] : engine.take_finished()) {
        auto it = live_.find(id);
        if (it == live_.end()) continue;
        out.result.error = "the server is shutting down";
        finish_channel(*it->second.channel, std::move(out), 503);
        live_.erase(it);
      }
      break;
    }
    admit(e, admitted);
    if (engine.has_work()) {
      bool failed = false;
      try {
        if (config_.fail_at_rows > 0 && !failure_injected_ &&
            engine.live_rows() >= config_.fail_at_rows) {
          failure_injected_ = true;
          DSPARK_FAIL(internal, "injected failure ({} live rows)", engine.live_rows());
        }
        engine.step();
      } catch (const std::exception& err) {
        // The step's state is unknown: every live request fails, the server keeps serving.
        failed = true;
        const std::string message = std::string("engine step failed: ") + err.what();
        std::fprintf(stderr, "dspark serve: %s\n", message.c_str());
        metrics_.record_error("engine");
        engine.abort_all(message);
      }
      metrics_.record_step(failed);
    }
    // Gauges first: a client that has its response then reads /metrics sees its row gone.
    publish_gauges(engine);
    dispatch_finished(e);
  }
  publish_gauges(engine);
}

void EngineWorker::publish_gauges(const SpeculativeEngine& engine) {
  EngineGauges g;
  {
    std::lock_guard lock(mutex_);
    g.queue_depth = static_cast<int>(queue_.size());
  }
  g.live_rows = engine.live_rows();
  g.kv_pages_used = engine.kv().used_pages();
  g.kv_pages_total = engine.kv().shape().num_pages;
  g.kv_pages_cached = engine.kv().cached_pages();
  g.kv_page_size = engine.kv().shape().page_size;
  g.max_batch = config_.max_batch;
  g.draft_policy = model_.draft_policy;
  metrics_.set_gauges(g);
}

}  // namespace dspark::server
