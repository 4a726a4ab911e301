#include "dspark/server/openai_response.h"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dspark/io/tokenizer.h"
#include "dspark/io/utf8.h"

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

json choice(const ResponseMeta& meta, int index, json delta_or_text, json finish_reason,
            json logprobs = nullptr) {
  json c = {{"index", index},
            {"logprobs", std::move(logprobs)},
            {"finish_reason", std::move(finish_reason)}};
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

namespace {

// A forced tool call ends with "tool_calls" where free text ends with "stop".
json choice_finish_reason(const ResponseMeta& meta, FinishReason reason) {
  if (!meta.tool_name.empty() && (reason == FinishReason::eos || reason == FinishReason::stop))
    return "tool_calls";
  return finish_reason_json(reason);
}

std::string tool_call_id(const ResponseMeta& meta, size_t index) {
  return fmt::format("call_{}_{}", meta.id.substr(meta.id.find('-') + 1), index);
}

}  // namespace

json usage_json(std::span<const RequestOutput* const> outs) {
  SpecTelemetry s;
  int64_t completion = 0, cached = outs.empty() ? 0 : outs[0]->spec.prefix_reused;
  for (const RequestOutput* o : outs) {
    completion += o->result.n_generated;
    s.drafted += o->spec.drafted;
    s.accepted += o->spec.accepted;
    s.rounds += o->spec.rounds;
    s.emitted += o->spec.emitted;
    s.draft_budget += o->spec.draft_budget;
    s.draft_policy = o->spec.draft_policy;
    cached = std::min(cached, o->spec.prefix_reused);
  }
  const int64_t prompt = outs.empty() ? 0 : outs[0]->result.n_prompt;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          // OpenAI's field for prompt tokens served from a cache (our prefix cache).
          {"prompt_tokens_details", {{"cached_tokens", cached}}},
          {"speculation",
           {{"drafted", s.drafted},
            {"accepted", s.accepted},
            {"rounds", s.rounds},
            {"tau", s.tau()},
            {"acceptance", s.acceptance()},
            {"draft_policy", draft_policy_name(s.draft_policy)},
            {"mean_draft_length", s.mean_draft_length()}}}};
}

namespace {

double clamp_logprob(float lp) {
  return std::max(static_cast<double>(lp), -9999.0);  // also -inf -> -9999 (JSON has no -inf)
}

json bytes_json(const std::string& raw) {
  json b = json::array();
  for (const char c : raw) b.push_back(static_cast<unsigned char>(c));
  return b;
}

size_t utf8_chars(const std::string& text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

}  // namespace

json logprobs_json(const ResponseMeta& meta, std::span<const TokenLogprobs> entries,
                   int64_t& text_offset) {
  const Tokenizer& tok = *meta.logprobs_tokenizer;
  // A token's raw bytes (a byte-level BPE token may hold part of a UTF-8 character) and its text.
  auto raw = [&](int32_t id) { return tok.decode(std::span<const int32_t>(&id, 1)); };
  if (meta.endpoint == Endpoint::chat) {
    json content = json::array();
    for (const TokenLogprobs& e : entries) {
      const std::string bytes = raw(e.token);
      json top = json::array();
      for (const TokenLogprob& t : e.top) {
        const std::string b = raw(t.token);
        top.push_back({{"token", utf8::to_valid_lossy(b)},
                       {"logprob", clamp_logprob(t.logprob)},
                       {"bytes", bytes_json(b)}});
      }
      content.push_back({{"token", utf8::to_valid_lossy(bytes)},
                         {"logprob", clamp_logprob(e.logprob)},
                         {"bytes", bytes_json(bytes)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       offsets = json::array();
  for (const TokenLogprobs& e : entries) {
    const std::string text = utf8::to_valid_lossy(raw(e.token));
    tokens.push_back(text);
    token_logprobs.push_back(clamp_logprob(e.logprob));
    // The legacy shape: the N most probable tokens and the chosen one (up to N + 1 keys).
    json top = json::object();
    for (const TokenLogprob& t : e.top)
      top[utf8::to_valid_lossy(raw(t.token))] = clamp_logprob(t.logprob);
    top[text] = clamp_logprob(e.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(utf8_chars(text));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

json completion_json(const ResponseMeta& meta, std::span<const RequestOutput* const> outs) {
  json choices = json::array();
  for (size_t i = 0; i < outs.size(); ++i) {
    const GenerateResult& r = outs[i]->result;
    json c = {{"index", i},
              {"logprobs", nullptr},
              {"finish_reason", choice_finish_reason(meta, r.finish_reason)}};
    if (meta.logprobs_tokenizer) {
      int64_t offset = 0;
      c["logprobs"] = logprobs_json(meta, r.logprobs, offset);
    }
    if (meta.endpoint == Endpoint::chat && !meta.tool_name.empty()) {
      const json call = {{"id", tool_call_id(meta, i)},
                         {"type", "function"},
                         {"function", {{"name", meta.tool_name}, {"arguments", r.text}}}};
      c["message"] = {{"role", "assistant"},
                      {"content", nullptr},
                      {"refusal", nullptr},
                      {"tool_calls", json::array({call})}};
    } else if (meta.endpoint == Endpoint::chat) {
      c["message"] = {{"role", "assistant"}, {"content", r.text}, {"refusal", nullptr}};
    } else {
      c["text"] = r.text;
    }
    if (r.finish_reason == FinishReason::stop) c["stop_reason"] = r.stop_matched;
    choices.push_back(std::move(c));
  }
  return {{"id", meta.id},
          {"object", object_name(meta.endpoint, false)},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", nullptr},
          {"choices", std::move(choices)},
          {"usage", usage_json(outs)}};
}

json role_chunk(const ResponseMeta& meta, int index, bool include_usage) {
  json j = chunk_base(meta, include_usage);
  json delta = {{"role", "assistant"}, {"content", ""}};
  if (!meta.tool_name.empty()) {
    // The call's id and name first; its arguments follow in text chunks.
    const json call = {{"index", 0},
                       {"id", tool_call_id(meta, static_cast<size_t>(index))},
                       {"type", "function"},
                       {"function", {{"name", meta.tool_name}, {"arguments", ""}}}};
    delta = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({call})}};
  }
  j["choices"] = json::array({choice(meta, index, std::move(delta), nullptr)});
  return j;
}

json text_chunk(const ResponseMeta& meta, ChoiceStream& cs, std::string_view text,
                std::span<const TokenLogprobs> logprobs, bool include_usage) {
  json j = chunk_base(meta, include_usage);
  json body = meta.endpoint == Endpoint::chat ? json{{"content", text}} : json(text);
  if (!meta.tool_name.empty())
    body = {{"tool_calls", json::array({{{"index", 0}, {"function", {{"arguments", text}}}}})}};
  json lp = nullptr;
  if (meta.logprobs_tokenizer) {
    lp = logprobs_json(meta, logprobs, cs.text_offset);
    cs.logprobs_sent += logprobs.size();
  }
  j["choices"] = json::array({choice(meta, cs.index, std::move(body), nullptr, std::move(lp))});
  return j;
}

json finish_chunk(const ResponseMeta& meta, ChoiceStream& cs, const RequestOutput& out,
                  bool include_usage) {
  json j = chunk_base(meta, include_usage);
  json body = meta.endpoint == Endpoint::chat ? json::object() : json("");
  json lp = nullptr;
  const std::vector<TokenLogprobs>& all = out.result.logprobs;
  if (meta.logprobs_tokenizer && cs.logprobs_sent < all.size()) {
    lp = logprobs_json(meta, std::span(all).subspan(cs.logprobs_sent), cs.text_offset);
    cs.logprobs_sent = all.size();
  }
  j["choices"] =
      json::array({choice(meta, cs.index, std::move(body),
                          choice_finish_reason(meta, out.result.finish_reason), std::move(lp))});
  return j;
}

json usage_chunk(const ResponseMeta& meta, std::span<const RequestOutput* const> outs) {
  json j = chunk_base(meta, false);
  j["choices"] = json::array();
  j["usage"] = usage_json(outs);
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
