#include "dspark/engine/generate.h"

#include <algorithm>
#include <utility>

#include "dspark/core/error.h"
#include "dspark/ops/penalties.h"

namespace dspark {
namespace {

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Streams a piece of decoded text through the stop matcher to the callback and the result.
void emit_text(GenerationSession& s, std::string_view piece) {
  if (piece.empty()) return;
  const std::string out = s.stop ? s.stop->push(piece) : std::string(piece);
  if (out.empty()) return;
  s.result.text += out;
  if (s.on_text) s.on_text(out);
}

}  // namespace

std::vector<int32_t> default_eos_token_ids(const ModelConfig& config,
                                           const GenerationDefaults& defaults) {
  std::vector<int32_t> ids;
  for (int id : config.eos_token_ids) ids.push_back(id);
  for (int id : defaults.eos_token_ids) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

void validate(const GenerateOptions& o, int64_t vocab_size) {
  validate(o.sampling, vocab_size);
  validate(o.penalties);
  DSPARK_CHECK_KIND(invalid_input, o.logprobs >= -1 && o.logprobs <= kMaxTopLogprobs,
                    "logprobs must be in [-1, {}] (got {})", kMaxTopLogprobs, o.logprobs);
  DSPARK_CHECK_KIND(invalid_input, o.max_tokens >= 0, "max_tokens must be >= 0 (got {})",
                    o.max_tokens);
  DSPARK_CHECK_KIND(invalid_input, o.page_size > 0, "page_size must be > 0 (got {})", o.page_size);
  DSPARK_CHECK_KIND(invalid_input, o.prefill_chunk > 0, "prefill_chunk must be > 0 (got {})",
                    o.prefill_chunk);
  for (const std::string& s : o.stop) {
    DSPARK_CHECK_KIND(invalid_input, !s.empty(), "stop strings must not be empty");
  }
  if (o.json) {
    DSPARK_CHECK_KIND(invalid_input, o.json->vocab && o.json->vocab->size() <= vocab_size,
                      "the structured output's vocabulary is larger than the model's ({} ids)",
                      vocab_size);
    DSPARK_CHECK_KIND(invalid_input, !o.json->eos.empty(),
                      "structured output needs an EOS token to end the document");
  }
}

const float* host_logits_rows(Context& ctx, const Tensor& logits, int64_t begin, int64_t count,
                              std::vector<float>& staging) {
  DSPARK_CHECK(logits.dim() == 2 && logits.dtype() == DType::f32 && begin >= 0 &&
                   begin + count <= logits.size(0),
               "host_logits_rows: rows [{}, {}) of {}", begin, begin + count, logits.describe());
  const int64_t v = logits.size(1);
  const float* base = logits.data_as<float>() + begin * logits.stride(0);
  if (!ctx.is_cuda() && logits.stride(0) == v) return base;
  staging.resize(static_cast<size_t>(count * v));
  for (int64_t r = 0; r < count; ++r)
    ctx.copy_async(staging.data() + r * v, base + r * logits.stride(0),
                   static_cast<size_t>(v) * sizeof(float));
  ctx.synchronize();
  return staging.data();
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::length:
      return "length";
    case FinishReason::eos:
      return "eos";
    case FinishReason::stop:
      return "stop";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
  }
  return "unknown";
}

GenerationSession begin_session(Model& model, Context& ctx, std::span<const int32_t> prompt,
                                const GenerateOptions& options, Detokenizer* detokenizer,
                                TextCallback on_text) {
  const ModelConfig& config = model.config();
  validate(options, config.vocab_size);
  DSPARK_CHECK_KIND(unsupported, options.json == nullptr,
                    "structured output runs in the speculative engine, not in plain generate()");
  DSPARK_CHECK_KIND(invalid_input, !prompt.empty(), "the prompt is empty (no tokens)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    DSPARK_CHECK_KIND(invalid_input, prompt[i] >= 0 && prompt[i] < config.vocab_size,
                      "prompt token {} at index {} is outside the vocabulary [0, {})", prompt[i], i,
                      config.vocab_size);
  }
  DSPARK_CHECK_KIND(invalid_input, options.stop.empty() || detokenizer != nullptr,
                    "stop strings need a tokenizer to decode the generated text");

  GenerationSession s;
  s.t_start = std::chrono::steady_clock::now();
  s.model = &model;
  s.ctx = &ctx;
  s.options = options;
  s.prompt.assign(prompt.begin(), prompt.end());
  const int64_t max_len = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  const int64_t pages = (max_len + options.page_size - 1) / options.page_size;
  DSPARK_CHECK_KIND(invalid_input, pages < (int64_t{1} << 30), "prompt + max_tokens too long");
  s.kv = std::make_unique<PagedKvCache>(model.kv_shape(options.page_size, static_cast<int>(pages)),
                                        model.device());
  s.seq = s.kv->create_sequence();
  s.detokenizer = detokenizer;
  s.on_text = std::move(on_text);
  if (!options.stop.empty()) s.stop.emplace(options.stop);
  s.sampled = OwnedTensor(DType::i32, Shape{1}, model.device());
  s.penalties = PenaltyHistory(options.penalties, prompt);
  s.result.n_prompt = static_cast<int>(prompt.size());
  s.result.tokens.reserve(static_cast<size_t>(options.max_tokens));
  return s;
}

Tensor prefill(GenerationSession& s) {
  const auto n = static_cast<int32_t>(s.prompt.size());
  Tensor logits;
  for (int32_t begin = 0; begin < n; begin += s.options.prefill_chunk) {
    const int32_t end = std::min(n, begin + s.options.prefill_chunk);
    ForwardBatch batch;
    batch.tokens.assign(s.prompt.begin() + begin, s.prompt.begin() + end);
    batch.row_indptr = {0, end - begin};
    batch.seqs = {s.seq};
    if (end == n) batch.logit_indices = {end - begin - 1};
    logits = s.model->forward(*s.ctx, *s.kv, batch).logits;
  }
  return logits;
}

int32_t sample_token(GenerationSession& s, const Tensor& logits) {
  const SamplingParams params[1] = {s.options.sampling};
  const uint64_t seeds[1] = {s.options.seed};
  const uint64_t counters[1] = {static_cast<uint64_t>(s.kv->length(s.seq))};
  if (s.penalties.active()) {
    s.penalty_entries.clear();
    s.penalties.append_entries(0, {}, s.penalty_entries);
    apply_penalties(*s.ctx, logits, s.penalty_entries);
  }
  sample(*s.ctx, logits, params, seeds, counters, s.sampled);
  const int32_t token = to_vector<int32_t>(s.sampled).front();  // waits for the device
  if (s.options.logprobs >= 0)
    s.pending_logprobs =
        token_logprobs(host_logits_rows(*s.ctx, logits, 0, 1, s.logits_host), logits.size(1),
                       s.options.sampling.temperature, token, s.options.logprobs);
  if (s.result.tokens.empty()) s.t_first_token = std::chrono::steady_clock::now();
  return token;
}

Tensor decode_step(GenerationSession& s, int32_t token) {
  ForwardBatch batch;
  batch.tokens = {token};
  batch.row_indptr = {0, 1};
  batch.seqs = {s.seq};
  batch.logit_indices = {0};
  return s.model->forward(*s.ctx, *s.kv, batch).logits;
}

bool emit_tokens(GenerationSession& s, std::span<const int32_t> tokens) {
  const auto& eos = s.options.eos_token_ids;
  for (const int32_t token : tokens) {
    if (s.finished) break;
    if (static_cast<int>(s.result.tokens.size()) >= s.options.max_tokens) {
      s.finished = true;
      s.result.finish_reason = FinishReason::length;
      break;
    }
    s.result.tokens.push_back(token);
    s.penalties.add_generated(token);
    std::optional<TokenLogprobs> lp = std::exchange(s.pending_logprobs, std::nullopt);
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) {
      s.finished = true;
      s.result.finish_reason = FinishReason::eos;
      break;
    }
    if (lp && lp->token == token) s.result.logprobs.push_back(std::move(*lp));
    if (s.detokenizer) emit_text(s, s.detokenizer->push(token));
    if (s.stop && s.stop->stopped()) {
      s.finished = true;
      s.result.finish_reason = FinishReason::stop;
      s.result.stop_matched = s.stop->matched();
      break;
    }
    if (static_cast<int>(s.result.tokens.size()) >= s.options.max_tokens) {
      s.finished = true;
      s.result.finish_reason = FinishReason::length;
    }
  }
  return s.finished;
}

GenerateResult finish(GenerationSession& s) {
  s.finished = true;
  if (s.detokenizer && s.result.finish_reason != FinishReason::stop) {
    emit_text(s, s.detokenizer->flush());
  }
  if (s.stop) {
    const std::string rest = s.stop->flush();
    if (!rest.empty()) {
      s.result.text += rest;
      if (s.on_text) s.on_text(rest);
    }
    if (s.stop->stopped() && s.result.finish_reason != FinishReason::stop) {
      s.result.finish_reason = FinishReason::stop;  // completed by the flushed text
      s.result.stop_matched = s.stop->matched();
    }
  }
  const auto t_end = std::chrono::steady_clock::now();
  GenerateResult& r = s.result;
  r.n_generated = static_cast<int>(r.tokens.size());
  GenerateTimings& t = r.timings;
  t.total_ms = ms_between(s.t_start, t_end);
  if (r.n_generated > 0) {
    t.prefill_ms = ms_between(s.t_start, s.t_first_token);
    t.decode_ms = ms_between(s.t_first_token, t_end);
  } else {
    t.prefill_ms = t.total_ms;
  }
  if (t.prefill_ms > 0) t.prefill_tok_per_s = r.n_prompt / (t.prefill_ms / 1e3);
  if (t.decode_ms > 0 && r.n_generated > 1) {
    t.decode_tok_per_s = (r.n_generated - 1) / (t.decode_ms / 1e3);
  }
  if (s.kv && s.seq >= 0) {
    s.kv->release(s.seq);
    s.seq = -1;
  }
  return std::move(s.result);
}

GenerateResult generate(Model& model, Context& ctx, std::span<const int32_t> prompt,
                        const GenerateOptions& options, Detokenizer* detokenizer,
                        TextCallback on_text) {
  GenerationSession s = begin_session(model, ctx, prompt, options, detokenizer, std::move(on_text));
  if (options.max_tokens > 0) {
    Tensor logits = prefill(s);
    while (true) {
      const int32_t token = sample_token(s, logits);
      if (emit_tokens(s, {&token, 1})) break;
      logits = decode_step(s, token);
    }
  }
  return finish(s);
}

}  // namespace dspark
