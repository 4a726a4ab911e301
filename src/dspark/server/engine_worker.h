// The engine thread of `dspark serve`. ONE thread owns the device context, the model, the draft
// source and the SpeculativeEngine (CUDA state stays on the thread that made it). HTTP handler
// threads never touch them: they submit a tokenized request to a bounded queue and read text
// pieces and the final result from the request's RequestChannel.
//
// Engine thread loop:
//   wait for work -> apply cancellations (queued: dropped; live: engine.cancel) ->
//   admit queued requests in arrival order while live rows < max_batch and engine.can_admit ->
//   engine.step() (an exception fails the live requests through abort_all; serving goes on) ->
//   hand finished requests to their channels -> publish gauges.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dspark/core/error.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/tokenizer.h"
#include "dspark/model/config.h"
#include "dspark/server/metrics.h"
#include "dspark/spec/ngram_source.h"

namespace dspark::server {

struct EngineWorkerConfig {
  std::filesystem::path model_dir;
  std::string device = "cpu";
  std::string draft = "none";  // source_factory.h: none, ngram, mtp, model:DIR, DIR
  std::string draft_vocab;     // --draft-vocab FILE (DraftOptions::draft_vocab)
  bool draft_fp8 = false;      // --draft-fp8 (DraftOptions::draft_fp8)
  std::optional<int> gamma;    // default: the source's natural length
  DraftPolicy draft_policy = DraftPolicy::adaptive;  // SpecConfig::draft_policy
  VerifyCostCacheConfig cost_cache;                  // SpecConfig::cost_cache (empty dir: none)
  NgramConfig ngram;
  int max_batch = 32;    // live rows at most
  int max_queue = 256;   // waiting requests at most (then 503)
  int max_context = 0;   // prompt + completion tokens per request; 0: the model's maximum
  size_t kv_memory = 0;  // target KV cache bytes; 0: default_kv_tokens()
  int page_size = 16;
  int prefill_chunk = 512;
  bool prefix_cache = true;  // reuse the target KV of repeated prompt prefixes (SpecConfig)
  bool exact = false;        // CUDA: batch-invariant numerics (Tuning::batch_invariant)
  // Testing hook: the first engine step with at least this many live rows throws instead of
  // running (0: never), to exercise the recovery path ($DSPARK_SERVE_FAIL_AT_ROWS of serve).
  int fail_at_rows = 0;
};

// On the CPU the cache shares memory with everything else: e.g. 4 requests of 4k tokens.
inline constexpr int64_t kDefaultCpuKvTokens = 16384;
// CUDA: device memory left free after the KV cache, for activations, workspaces and CUDA graphs:
// the larger of 1 GiB and a tenth of the device.
inline constexpr size_t kMinCudaMarginBytes = size_t{1} << 30;

// What the default KV size depends on.
struct KvSizing {
  int64_t per_request = 0;      // tokens one full-context request reserves (page-rounded)
  int max_batch = 1;            // requests decoded together
  bool cuda = false;            // else the CPU
  int64_t bytes_per_token = 0;  // target KV bytes per token (all layers, K and V)
  size_t free_bytes = 0;        // CUDA: free device memory after the weights are loaded
  size_t total_bytes = 0;       // CUDA: the device's memory
  bool drafter_cache = false;   // a draft model or DSpark drafter keeps a cache of its own
};
// Target KV tokens when --kv-memory is not given: room for max_batch full-context requests,
//   CPU: at most kDefaultCpuKvTokens;
//   CUDA: at most what free memory holds after a margin (kMinCudaMarginBytes or total / 10),
//     half of it when the drafter keeps its own cache (a drafter's cache per token is smaller
//     than the target's);
// and never less than one full-context request (a device too small for that fails to load).
int64_t default_kv_tokens(const KvSizing& s);

// What the HTTP side needs to know about the loaded model (read-only after start()).
struct ServedModel {
  std::optional<Tokenizer> tokenizer;  // shares the engine's data; safe to use from any thread
  std::vector<int32_t> eos_token_ids;
  GenerationDefaults defaults;
  int64_t vocab_size = 0;
  int max_context = 0;
  int kv_tokens = 0;  // target KV capacity over all rows
  int kv_pages = 0;
  int64_t kv_bytes = 0;  // the target KV cache's size
  // CUDA: the device's free and total memory once everything is loaded (0 on the CPU).
  int64_t free_bytes = 0, total_bytes = 0;
  // Device memory reserved after loading: weights, KV caches (host caches become resident as
  // they are written), the drafter's buffers.
  int64_t reserved_bytes = 0;
  std::string device;
  std::string draft_kind;  // "none", "ngram", "mtp", "model", "dspark", "dflash"
  int gamma = 0;
  // The engine's draft policy (fixed without a draft source) and its one-line notices from
  // start-up (SpecConfig::log: with the adaptive policy, the verify cost profile, measured or
  // loaded from the cache, and any cache problem).
  DraftPolicy draft_policy = DraftPolicy::fixed;
  std::vector<std::string> engine_notices;
};

// Wakes one handler that reads several channels (the choices of an n > 1 request): every change
// of a channel that shares it bumps `changes`.
class ChannelWakeup {
 public:
  // The change count now; then wait_after(count, timeout) returns once a change follows it.
  uint64_t changes() const;
  void wait_after(uint64_t seen, std::chrono::milliseconds timeout);
  void notify();

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t changes_ = 0;
};

// One request's channel between the engine thread (writer) and its HTTP handler (reader).
class RequestChannel {
 public:
  using Clock = std::chrono::steady_clock;

  // Text as the engine emitted it (one piece per token, or more tokens where stop-string
  // hold-back released them together), with the logprobs entries recorded since the previous
  // piece (requests with logprobs).
  struct Piece {
    std::string text;
    std::vector<TokenLogprobs> logprobs;
  };
  struct Update {
    // Pieces that arrived since the last wait: a stream relays each as its own chunk, as
    // OpenAI's API does, however late the handler wakes.
    std::vector<Piece> pieces;
    bool done = false;  // the request has ended: output() is valid
  };
  explicit RequestChannel(std::shared_ptr<ChannelWakeup> wakeup = nullptr)
      : wakeup_(std::move(wakeup)) {}
  // Handler: waits up to `timeout` for text or the end of the request.
  Update wait(std::chrono::milliseconds timeout);
  // Handler, once done: the result (finish_reason error / cancelled carry result.error).
  const RequestOutput& output() const { return output_; }
  // HTTP status for finish_reason error: 500 for engine failures, 400 for a request the engine
  // refused, 503 when the server is stopping.
  int error_status() const { return error_status_; }

  // Engine thread.
  void push_text(std::string_view piece);
  void push_logprobs(const TokenLogprobs& entry);
  void complete(RequestOutput output, int error_status = 500);

 private:
  friend class EngineWorker;
  void notify();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<ChannelWakeup> wakeup_;
  std::vector<Piece> pieces_;
  std::vector<TokenLogprobs> loose_;  // entries not yet attached to a piece
  bool done_ = false;
  RequestOutput output_;
  int error_status_ = 500;
  // Engine-thread state.
  RowId row_ = -1;
  bool cancel_requested_ = false;  // guarded by the worker's mutex
  Clock::time_point submitted_, first_text_;
  bool has_text_ = false;
};

class EngineWorker {
 public:
  EngineWorker(EngineWorkerConfig config, ServerMetrics& metrics);
  ~EngineWorker();
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Starts the engine thread, which loads the model and the draft source; returns once it is
  // ready. A load failure is rethrown here as dspark::Error (same kind and message).
  void start();
  const ServedModel& model() const { return model_; }
  // Queues a request (prompt validated by the caller). Throws ApiError 503 when the queue is full
  // or the worker is stopping. `wakeup` (optional) is notified of every change of the channel.
  std::shared_ptr<RequestChannel> submit(std::vector<int32_t> prompt, GenerateOptions options,
                                         std::shared_ptr<ChannelWakeup> wakeup = nullptr);
  // The client went away: the request leaves the queue, or the engine between two steps.
  void cancel(const std::shared_ptr<RequestChannel>& channel);
  // Ends every request (cancelled, status 503) and joins the engine thread. Idempotent.
  void stop();
  bool running() const;

 private:
  struct Pending {
    std::shared_ptr<RequestChannel> channel;
    std::vector<int32_t> prompt;
    GenerateOptions options;
  };
  struct Live {
    std::shared_ptr<RequestChannel> channel;
    std::unique_ptr<Detokenizer> detokenizer;
  };
  struct Engine;  // engine-thread state (context, model, source, SpeculativeEngine)

  void thread_main();
  void load(Engine& e);
  void serve(Engine& e);
  void admit(Engine& e, std::vector<Pending>& admitted);
  void dispatch_finished(Engine& e);
  void publish_gauges(const SpeculativeEngine& engine);
  void finish_channel(RequestChannel& ch, RequestOutput out, int error_status);

  EngineWorkerConfig config_;
  ServerMetrics& metrics_;
  ServedModel model_;
  std::thread thread_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  std::vector<std::shared_ptr<RequestChannel>> cancels_;
  bool stopping_ = false;
  bool running_ = false;
  // Load outcome (start() waits for it).
  bool loaded_ = false;
  std::optional<std::pair<ErrorKind, std::string>> load_error_;

  std::map<RowId, Live> live_;     // engine thread only
  bool failure_injected_ = false;  // engine thread only
};

}  // namespace dspark::server
