#include "dspark/server/openai_response.h"

#include <chrono>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dspark::server {
namespace {

using json = nlohmann::json;

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json chunk_base(const ResponseMeta& meta, bool include_usage) {
  json j = {{"id", meta.id},
            {"object", object_name(meta.endpoint, true)},
            {"created", meta.created},
            {"model", meta.model},
            {"system_fingerprint", nullptr}};
  if (include_usage) j["usage"] = nullptr;
  return j;
}

json choice(const ResponseMeta& meta, json delta_or_text, json finish_reason) {
  json c = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
  if (meta.endpoint == Endpoint::chat) {
    c["delta"] = std::move(delta_or_text);
  } else {
    c["text"] = std::move(delta_or_text);
  }
  return c;
}

}  // namespace

ResponseMeta make_meta(Endpoint endpoint, std::string model) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  ResponseMeta m;
  m.endpoint = endpoint;
  m.id = fmt::format("{}-{:016x}{:08x}", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl", rng(),
                     static_cast<uint32_t>(rng()));
  m.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  m.model = std::move(model);
  return m;
}

json finish_reason_json(FinishReason reason) {
  switch (reason) {
    case FinishReason::eos:
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    default:
      return nullptr;
  }
}

json usage_json(const RequestOutput& out) {
  const GenerateResult& r = out.result;
  const SpecTelemetry& s = out.spec;
  return {{"prompt_tokens", r.n_prompt},
          {"completion_tokens", r.n_generated},
          {"total_tokens", r.n_prompt + r.n_generated},
          // OpenAI's field for prompt tokens served from a cache (our prefix cache).
          {"prompt_tokens_details", {{"cached_tokens", s.prefix_reused}}},
          {"speculation",
           {{"drafted", s.drafted},
            {"accepted", s.accepted},
            {"rounds", s.rounds},
            {"tau", s.tau()},
            {"acceptance", s.acceptance()}}}};
}

json completion_json(const ResponseMeta& meta, const RequestOutput& out) {
  const GenerateResult& r = out.result;
  json c = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason_json(r.finish_reason)}};
  if (meta.endpoint == Endpoint::chat) {
    c["message"] = {{"role", "assistant"}, {"content", r.text}, {"refusal", nullptr}};
  } else {
    c["text"] = r.text;
  }
  if (r.finish_reason == FinishReason::stop) c["stop_reason"] = r.stop_matched;
  return {{"id", meta.id},
          {"object", object_name(meta.endpoint, false)},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", nullptr},
          {"choices", json::array({std::move(c)})},
          {"usage", usage_json(out)}};
}

json role_chunk(const ResponseMeta& meta, bool include_usage) {
  json j = chunk_base(meta, include_usage);
  j["choices"] = json::array({choice(meta, {{"role", "assistant"}, {"content", ""}}, nullptr)});
  return j;
}

json text_chunk(const ResponseMeta& meta, std::string_view text, bool include_usage) {
  json j = chunk_base(meta, include_usage);
  json body = meta.endpoint == Endpoint::chat ? json{{"content", text}} : json(text);
  j["choices"] = json::array({choice(meta, std::move(body), nullptr)});
  return j;
}

json finish_chunk(const ResponseMeta& meta, FinishReason reason, bool include_usage) {
  json j = chunk_base(meta, include_usage);
  json body = meta.endpoint == Endpoint::chat ? json::object() : json("");
  j["choices"] = json::array({choice(meta, std::move(body), finish_reason_json(reason))});
  return j;
}

json usage_chunk(const ResponseMeta& meta, const RequestOutput& out) {
  json j = chunk_base(meta, false);
  j["choices"] = json::array();
  j["usage"] = usage_json(out);
  return j;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

json model_json(const std::string& id, int64_t created, int max_context) {
  return {{"id", id},
          {"object", "model"},
          {"created", created},
          {"owned_by", "dspark"},
          {"max_model_len", max_context}};
}

json models_json(const std::string& id, int64_t created, int max_context) {
  return {{"object", "list"}, {"data", json::array({model_json(id, created, max_context)})}};
}

}  // namespace dspark::server
