// The emission side of a request, shared by plain and speculative decoding: generated tokens
// arrive one at a time (also from an accepted burst) and go through EOS, max_tokens, the
// detokenizer and the stop-string matcher exactly as plain decoding sees them. An EOS inside a
// burst ends the request; the tokens after it are dropped.
#pragma once

#include <chrono>
#include <optional>
#include <span>

#include "dspark/engine/generate.h"
#include "dspark/engine/stop.h"

namespace dspark {

class OutputStream {
 public:
  OutputStream(const GenerateOptions& options, int n_prompt, Detokenizer* detokenizer,
               TextCallback on_text);

  // Emits tokens in order until one finishes the request; returns finished(). `logprobs`: empty,
  // or one entry per token (recorded with it, except for an EOS token that ends the request).
  bool push(std::span<const int32_t> tokens, std::span<const TokenLogprobs> logprobs = {});
  // Receives each logprobs entry as it is recorded (streaming).
  void set_logprobs_callback(LogprobsCallback cb) { on_logprobs_ = std::move(cb); }
  bool finished() const { return finished_; }
  int n_generated() const { return static_cast<int>(result_.tokens.size()); }
  // Ends the request early (cancelled, or error with a message): nothing more is emitted, and
  // text held back by the stop matcher is dropped.
  void abort(FinishReason reason, std::string message = {});
  // Flushes held-back text and fills n_generated and timings; call once at the end.
  GenerateResult finish();

 private:
  void emit_text(std::string_view piece);

  GenerateOptions options_;
  Detokenizer* detokenizer_;
  TextCallback on_text_;
  LogprobsCallback on_logprobs_;
  std::optional<StopStringMatcher> stop_;
  GenerateResult result_;
  bool finished_ = false;
  bool aborted_ = false;
  std::chrono::steady_clock::time_point t_start_, t_first_token_;
};

}  // namespace dspark
