// OpenAI response bodies: chat.completion / text_completion objects, their streaming chunks as
// server-sent events, usage (with dspark's `speculation` object), and the model list.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/engine/speculative.h"
#include "dspark/server/openai_request.h"

namespace dspark {
class Tokenizer;
}

namespace dspark::server {

// What every object of one response repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::chat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  // With logprobs (GenerateOptions::logprobs >= 0): the tokenizer that names the tokens.
  const Tokenizer* logprobs_tokenizer = nullptr;
  // A forced tool call (ParsedRequest::tool_name): chat messages carry the text as the call's
  // arguments in tool_calls, and finish_reason is "tool_calls" where it would be "stop".
  std::string tool_name;
};

// One streamed choice: its index, its completions text_offset so far (characters), and how many of
// its logprobs entries were sent.
struct ChoiceStream {
  int index = 0;
  int64_t text_offset = 0;
  size_t logprobs_sent = 0;  // entries of the result already streamed
};

// A fresh response id for the endpoint ("chatcmpl-<24 hex>" / "cmpl-<24 hex>") and the time now.
ResponseMeta make_meta(Endpoint endpoint, std::string model);

// OpenAI's finish_reason: "stop" (EOS or a stop string), "length"; null for cancelled / error.
nlohmann::json finish_reason_json(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
//  "speculation": {"drafted", "accepted", "rounds", "tau", "acceptance", "draft_policy",
//  "mean_draft_length"}} over the choices of
// one request: the prompt counted once, completion tokens and speculation counters summed, cached
// tokens those every choice reused (the least).
nlohmann::json usage_json(std::span<const RequestOutput* const> outs);

// The logprobs object of a choice: chat {"content": [{token, logprob, bytes, top_logprobs}],
// "refusal": null}; completions {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
// (text_offset counts characters from `text_offset` on and is advanced). Log-probabilities below
// -9999 (a token of probability 0) read -9999, as OpenAI's API writes them.
nlohmann::json logprobs_json(const ResponseMeta& meta, std::span<const TokenLogprobs> entries,
                             int64_t& text_offset);

// The whole (non-streaming) response: choice i from outs[i].
nlohmann::json completion_json(const ResponseMeta& meta,
                               std::span<const RequestOutput* const> outs);

// Streaming chunks, each for one choice. Chat: a first chunk with the assistant role, text
// deltas, a last chunk with the finish reason; completions: text chunks and a last chunk with the
// finish reason. With logprobs, a text chunk carries the entries of its tokens and the last chunk
// those not sent yet. With include_usage every chunk carries "usage": null and usage_chunk()
// (empty choices) follows the last one.
nlohmann::json role_chunk(const ResponseMeta& meta, int index, bool include_usage);
nlohmann::json text_chunk(const ResponseMeta& meta, ChoiceStream& choice, std::string_view text,
                          std::span<const TokenLogprobs> logprobs, bool include_usage);
nlohmann::json finish_chunk(const ResponseMeta& meta, ChoiceStream& choice,
                            const RequestOutput& out, bool include_usage);
nlohmann::json usage_chunk(const ResponseMeta& meta, std::span<const RequestOutput* const> outs);

// "data: <json>\n\n" (invalid UTF-8 replaced, never thrown on).
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Compact JSON text for a response body (invalid UTF-8 replaced).
std::string dump_json(const nlohmann::json& j);

// GET /v1/models (one model) and GET /v1/models/{id}.
nlohmann::json model_json(const std::string& id, int64_t created, int max_context);
nlohmann::json models_json(const std::string& id, int64_t created, int max_context);

}  // namespace dspark::server
