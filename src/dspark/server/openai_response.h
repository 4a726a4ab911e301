// OpenAI response bodies: chat.completion / text_completion objects, their streaming chunks as
// server-sent events, usage (with dspark's `speculation` object), and the model list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "dspark/engine/speculative.h"
#include "dspark/server/openai_request.h"

namespace dspark::server {

// What every object of one response repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::chat;
  std::string id;       // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh response id for the endpoint ("chatcmpl-<24 hex>" / "cmpl-<24 hex>") and the time now.
ResponseMeta make_meta(Endpoint endpoint, std::string model);

// OpenAI's finish_reason: "stop" (EOS or a stop string), "length"; null for cancelled / error.
nlohmann::json finish_reason_json(FinishReason reason);

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "speculation": {"drafted", "accepted", "rounds", "tau", "acceptance"}}
nlohmann::json usage_json(const RequestOutput& out);

// The whole (non-streaming) response.
nlohmann::json completion_json(const ResponseMeta& meta, const RequestOutput& out);

// Streaming chunks. Chat: a first chunk with the assistant role, text deltas, a last chunk with
// the finish reason; completions: text chunks and a last chunk with the finish reason. With
// include_usage every chunk carries "usage": null and usage_chunk() (empty choices) follows the
// last one.
nlohmann::json role_chunk(const ResponseMeta& meta, bool include_usage);
nlohmann::json text_chunk(const ResponseMeta& meta, std::string_view text, bool include_usage);
nlohmann::json finish_chunk(const ResponseMeta& meta, FinishReason reason, bool include_usage);
nlohmann::json usage_chunk(const ResponseMeta& meta, const RequestOutput& out);

// "data: <json>\n\n" (invalid UTF-8 replaced, never thrown on).
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Compact JSON text for a response body (invalid UTF-8 replaced).
std::string dump_json(const nlohmann::json& j);

// GET /v1/models (one model) and GET /v1/models/{id}.
nlohmann::json model_json(const std::string& id, int64_t created, int max_context);
nlohmann::json models_json(const std::string& id, int64_t created, int max_context);

}  // namespace dspark::server
