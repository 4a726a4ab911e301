#include "dspark/engine/output_stream.h"

#include <algorithm>

#include "dspark/core/error.h"

namespace dspark {
namespace {
double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

OutputStream::OutputStream(const GenerateOptions& options, int n_prompt, Detokenizer* detokenizer,
                           TextCallback on_text)
    : options_(options),
      detokenizer_(detokenizer),
      on_text_(std::move(on_text)),
      t_start_(std::chrono::steady_clock::now()) {
  DSPARK_CHECK_KIND(invalid_input, options.stop.empty() || detokenizer != nullptr,
                    "stop strings need a tokenizer to decode the generated text");
  if (!options.stop.empty()) stop_.emplace(options.stop);
  result_.n_prompt = n_prompt;
  if (options.max_tokens <= 0) finished_ = true;
}

void OutputStream::emit_text(std::string_view piece) {
  if (piece.empty()) return;
  const std::string out = stop_ ? stop_->push(piece) : std::string(piece);
  if (out.empty()) return;
  result_.text += out;
  if (on_text_) on_text_(out);
}

bool OutputStream::push(std::span<const int32_t> tokens, std::span<const TokenLogprobs> logprobs) {
  DSPARK_CHECK(logprobs.empty() || logprobs.size() == tokens.size(),
               "OutputStream: {} logprobs entries for {} tokens", logprobs.size(), tokens.size());
  const auto& eos = options_.eos_token_ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t token = tokens[i];
    if (finished_) break;
    if (result_.tokens.empty()) t_first_token_ = std::chrono::steady_clock::now();
    result_.tokens.push_back(token);
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
      finished_ = true;
      result_.finish_reason = FinishReason::eos;
      break;
    }
    if (!logprobs.empty()) {
      result_.logprobs.push_back(logprobs[i]);
      if (on_logprobs_) on_logprobs_(logprobs[i]);
    }
    if (detokenizer_) emit_text(detokenizer_->push(token));
    if (stop_ && stop_->stopped()) {
      finished_ = true;
      result_.finish_reason = FinishReason::stop;
      result_.stop_matched = stop_->matched();
      break;
    }
    if (static_cast<int>(result_.tokens.size()) >= options_.max_tokens) {
      finished_ = true;
      result_.finish_reason = FinishReason::length;
    }
  }
  return finished_;
}

void OutputStream::abort(FinishReason reason, std::string message) {
  finished_ = true;
  aborted_ = true;
  result_.finish_reason = reason;
  result_.error = std::move(message);
}

GenerateResult OutputStream::finish() {
  finished_ = true;
  if (detokenizer_ && !aborted_ && result_.finish_reason != FinishReason::stop)
    emit_text(detokenizer_->flush());
  if (stop_ && !aborted_) {
    const std::string rest = stop_->flush();
    if (!rest.empty()) {
      result_.text += rest;
      if (on_text_) on_text_(rest);
    }
    if (stop_->stopped() && result_.finish_reason != FinishReason::stop) {
      result_.finish_reason = FinishReason::stop;
      result_.stop_matched = stop_->matched();
    }
  }
  const auto t_end = std::chrono::steady_clock::now();
  GenerateResult& r = result_;
  r.n_generated = static_cast<int>(r.tokens.size());
  GenerateTimings& t = r.timings;
  t.total_ms = ms_between(t_start_, t_end);
  if (r.n_generated > 0) {
    t.prefill_ms = ms_between(t_start_, t_first_token_);
    t.decode_ms = ms_between(t_first_token_, t_end);
  } else {
    t.prefill_ms = t.total_ms;
  }
  if (t.prefill_ms > 0) t.prefill_tok_per_s = r.n_prompt / (t.prefill_ms / 1e3);
  if (t.decode_ms > 0 && r.n_generated > 1)
    t.decode_tok_per_s = (r.n_generated - 1) / (t.decode_ms / 1e3);
  return std::move(result_);
}

}  // namespace dspark
