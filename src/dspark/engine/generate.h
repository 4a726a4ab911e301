// Plain (non-speculative) generation for one prompt: prefill, then one token per step, with
// seeded sampling, EOS / stop strings / max_tokens, streaming text and timings.
//
// The loop is split into named phases over a GenerationSession so that a speculative loop can
// replace the one-token step (decode_step + sample_token) by draft -> verify -> commit and reuse
// the rest (prefill, emit_tokens, finish):
//
//   GenerationSession s = begin_session(model, ctx, prompt, options, detokenizer, on_text);
//   Tensor logits = prefill(s);
//   while (!s.finished) {
//     const int32_t token = sample_token(s, logits);
//     if (emit_tokens(s, {&token, 1})) break;
//     logits = decode_step(s, token);
//   }
//   GenerateResult r = finish(s);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/engine/json_matcher.h"
#include "dspark/engine/penalties.h"
#include "dspark/engine/stop.h"
#include "dspark/engine/token_logprobs.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/config.h"
#include "dspark/model/model.h"
#include "dspark/ops/sampling.h"

namespace dspark {

// Turns generated tokens into text pieces as they arrive (implemented over the tokenizer's
// IncrementalDecoder by the caller; tests may provide their own).
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  // Text completed by this token ("" while a multi-byte character or merge is pending).
  virtual std::string push(int32_t token) = 0;
  // Whatever is still pending at the end.
  virtual std::string flush() = 0;
};

struct GenerateOptions {
  SamplingParams sampling;  // temperature 0 = greedy
  PenaltyParams penalties;  // repetition / presence / frequency (engine/penalties.h)
  // Log-probabilities of the generated tokens (engine/token_logprobs.h): -1 off; 0..kMaxTopLogprobs
  // the chosen token's, with this many most probable alternatives.
  int logprobs = -1;
  uint64_t seed = 0;                   // sampling seed; the Philox counter is the token position
  int max_tokens = 256;                // generated tokens at most (>= 0)
  std::vector<int32_t> eos_token_ids;  // generation ends after one of these (kept in tokens, not
                                       // in text)
  std::vector<std::string> stop;       // stop strings, matched on the decoded text
  // Structured output (engine/json_matcher.h): every sampled token keeps the text a prefix of a
  // document the schema accepts; EOS only once it is complete. Null: free text. Only the
  // SpeculativeEngine applies it (plain generate() refuses it).
  std::shared_ptr<const JsonConstraint> json;
  int page_size = 16;       // KV cache page size
  int prefill_chunk = 512;  // prompt tokens per forward (bounds activation memory)
};

inline constexpr int kMaxTopLogprobs = 20;

// The EOS set of a model: config.json's eos_token_id(s) merged with generation_config.json's.
std::vector<int32_t> default_eos_token_ids(const ModelConfig& config,
                                           const GenerationDefaults& defaults);

// Throws invalid_input naming the bad field.
void validate(const GenerateOptions& options, int64_t vocab_size);

// cancelled: the client went away or the request was cancelled; error: the engine failed it.
enum class FinishReason { length, eos, stop, cancelled, error };
std::string_view finish_reason_name(FinishReason reason);

struct GenerateTimings {
  double prefill_ms = 0;  // prompt forward(s) + the first sampled token
  double decode_ms = 0;   // every later token
  double total_ms = 0;
  double prefill_tok_per_s = 0;  // prompt tokens / prefill time
  double decode_tok_per_s = 0;   // tokens after the first / decode time
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (an EOS token that ended generation included)
  std::string text;             // emitted text (without a matched stop string and what follows)
  // With GenerateOptions::logprobs >= 0: one entry per generated token, except an EOS token that
  // ended generation (its text is not part of `text`).
  std::vector<TokenLogprobs> logprobs;
  int n_prompt = 0;
  int n_generated = 0;
  FinishReason finish_reason = FinishReason::length;
  std::string stop_matched;  // the stop string when finish_reason == stop
  std::string error;         // what failed when finish_reason == error
  GenerateTimings timings;
};

using TextCallback = std::function<void(std::string_view piece)>;
// Called with each entry of GenerateResult::logprobs as it is recorded (before its token's text).
using LogprobsCallback = std::function<void(const TokenLogprobs& entry)>;

// Logits rows [begin, begin + count) of `logits` (f32 [n, V] on ctx's device) in host memory: the
// tensor's own rows on the CPU; on CUDA a copy into `staging` (waits for the device).
const float* host_logits_rows(Context& ctx, const Tensor& logits, int64_t begin, int64_t count,
                              std::vector<float>& staging);

// ---- phases ------------------------------------------------------------------------------------

struct GenerationSession {
  Model* model = nullptr;
  Context* ctx = nullptr;
  GenerateOptions options;
  std::vector<int32_t> prompt;
  std::unique_ptr<PagedKvCache> kv;
  SeqId seq = -1;
  Detokenizer* detokenizer = nullptr;  // optional: no text without it
  TextCallback on_text;                // optional
  std::optional<StopStringMatcher> stop;
  OwnedTensor sampled;  // i32 [1] on the model's device
  PenaltyHistory penalties;
  std::vector<PenaltyEntry> penalty_entries;      // sample_token's scratch
  std::vector<float> logits_host;                 // sample_token's scratch (CUDA logprobs)
  std::optional<TokenLogprobs> pending_logprobs;  // the sampled token's, until emitted

  GenerateResult result;
  bool finished = false;
  std::chrono::steady_clock::time_point t_start, t_first_token;
};

// Validates, sizes a KV cache for prompt + max_tokens, and creates the sequence.
GenerationSession begin_session(Model& model, Context& ctx, std::span<const int32_t> prompt,
                                const GenerateOptions& options, Detokenizer* detokenizer = nullptr,
                                TextCallback on_text = {});
// Runs the prompt through the model (in chunks); returns the logits of the last prompt token
// (f32 [1, V] on the device, valid until the next forward).
Tensor prefill(GenerationSession& s);
// Draws the next token from logits [1, V] with the session's sampling params, after its penalties
// (applied to `logits` in place); the Philox counter is the position the token will occupy. With
// logprobs on, the token's entry is kept for emit_tokens.
int32_t sample_token(GenerationSession& s, const Tensor& logits);
// Appends `token` to the sequence; returns its logits [1, V].
Tensor decode_step(GenerationSession& s, int32_t token);
// Records generated tokens in order, streams their text, and applies EOS / stop / max_tokens;
// returns true when generation has finished (tokens after the finishing one are ignored).
bool emit_tokens(GenerationSession& s, std::span<const int32_t> tokens);
// Flushes held-back text, fills timings, releases the sequence; returns the result.
GenerateResult finish(GenerationSession& s);

// The whole plain loop.
GenerateResult generate(Model& model, Context& ctx, std::span<const int32_t> prompt,
                        const GenerateOptions& options, Detokenizer* detokenizer = nullptr,
                        TextCallback on_text = {});

}  // namespace dspark
