#include "dspark/server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dspark/core/error.h"
#include "dspark/engine/spec_sampling.h"
#include "dspark/io/tokenizer.h"
#include "dspark/io/utf8.h"
#include "dspark/server/errors.h"
#include "dspark/server/output_format.h"

namespace dspark::server {
namespace {

// Request bodies keep their key order (tools and messages reach the chat template as sent).
using ojson = nlohmann::ordered_json;

std::string type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return "an integer";
    case ojson::value_t::number_float:
      return "a decimal number";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    default:
      return "an unsupported value";
  }
}

ApiError wrong_type(const std::string& param, const std::string& expected, const ojson& got) {
  return bad_request(fmt::format("Invalid type for '{}': expected {}, but got {} instead.", param,
                                 expected, type_name(got)),
                     param, "invalid_type", "invalid_type");
}

ApiError bad_value(const std::string& param, const std::string& message) {
  return bad_request(fmt::format("Invalid value for '{}': {}", param, message), param,
                     "invalid_value", "invalid_value");
}

ApiError unsupported(const std::string& param, const std::string& message) {
  return bad_request(fmt::format("Unsupported value for '{}': {}", param, message), param,
                     "unsupported_parameter", "unsupported");
}

// The value of `key`, or null when it is absent or JSON null.
const ojson* field(const ojson& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer field in [lo, hi]; floats (even integral ones) are a type error, like OpenAI's API.
std::optional<int64_t> int_field(const ojson& obj, const char* key, int64_t lo, int64_t hi) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw wrong_type(key, "an integer", *v);
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw bad_value(key, fmt::format("must be in [{}, {}], got {}.", lo, hi, v->dump()));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    throw bad_value(key, fmt::format("must be in [{}, {}], got {}.", lo, hi, x));
  return x;
}

std::optional<double> number_field(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x)) throw bad_value(key, "must be a finite number.");
  return x;
}

std::optional<bool> bool_field(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

// The sampling fields shared by both endpoints, over the model's defaults.
SamplingParams parse_sampling(const ojson& body, const SamplingParams& defaults) {
  SamplingParams p = defaults;
  if (auto t = number_field(body, "temperature")) {
    if (*t < 0 || *t > 2)
      throw bad_value("temperature", fmt::format("must be in [0, 2], got {}.", *t));
    p.temperature = static_cast<float>(*t);
  }
  if (auto t = number_field(body, "top_p")) {
    if (!(*t > 0 && *t <= 1))
      throw bad_value("top_p", fmt::format("must be in (0, 1], got {}.", *t));
    p.top_p = static_cast<float>(*t);
  }
  if (auto k = int_field(body, "top_k", -1, std::numeric_limits<int32_t>::max()))
    p.top_k = static_cast<int>(std::max<int64_t>(*k, 0));  // -1 (vLLM's "off") == 0
  if (auto m = number_field(body, "min_p")) {
    if (*m < 0 || *m > 1) throw bad_value("min_p", fmt::format("must be in [0, 1], got {}.", *m));
    p.min_p = static_cast<float>(*m);
  }
  if (const ojson* v = field(body, "spec_sampling")) {
    if (!v->is_string()) throw wrong_type("spec_sampling", "a string", *v);
    const std::optional<SpecSampling> mode = spec_sampling_from_name(v->get<std::string>());
    if (!mode)
      throw bad_value("spec_sampling",
                      fmt::format("must be one of {}, got '{}'.", kSpecSamplingNames,
                                  utf8::to_valid_lossy(v->get<std::string>().substr(0, 64))));
    p.spec = *mode;
  }
  return p;
}

uint64_t parse_seed(const ojson& body) {
  const ojson* v = field(body, "seed");
  if (!v) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng();
  }
  if (!v->is_number_integer()) throw wrong_type("seed", "an integer", *v);
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  return static_cast<uint64_t>(v->get<int64_t>());  // negative seeds wrap (two's complement)
}

std::vector<std::string> parse_stop(const ojson& body) {
  const ojson* v = field(body, "stop");
  if (!v) return {};
  std::vector<std::string> stops;
  auto add = [&](const ojson& s, const std::string& param) {
    if (!s.is_string()) throw wrong_type(param, "a string", s);
    std::string text = s.get<std::string>();
    if (text.empty()) throw bad_value(param, "stop strings must not be empty.");
    if (text.size() > kMaxStopBytes)
      throw bad_value(param, fmt::format("stop strings are limited to {} bytes.", kMaxStopBytes));
    stops.push_back(std::move(text));
  };
  if (v->is_string()) {
    add(*v, "stop");
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings)
      throw bad_value("stop",
                      fmt::format("at most {} stop strings, got {}.", kMaxStopStrings, v->size()));
    for (size_t i = 0; i < v->size(); ++i) add((*v)[i], fmt::format("stop[{}]", i));
  } else {
    throw wrong_type("stop", "a string or an array of strings", *v);
  }
  return stops;
}

// Fields of the OpenAI API that dspark does not implement: refused when they ask for something.
void reject_unsupported(const ojson& body) {
  if (auto b = int_field(body, "best_of", std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max());
      b && *b != 1)
    throw unsupported("best_of", "only best_of = 1 is supported.");
  if (const ojson* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) throw wrong_type("logit_bias", "an object", *lb);
    if (!lb->empty()) throw unsupported("logit_bias", "logit_bias is not supported.");
  }
  if (auto echo = bool_field(body, "echo"); echo && *echo)
    throw unsupported("echo", "echo is not supported.");
  if (const ojson* s = field(body, "suffix")) {
    if (!s->is_string()) throw wrong_type("suffix", "a string", *s);
    if (!s->get<std::string>().empty()) throw unsupported("suffix", "suffix is not supported.");
  }
}

// presence_penalty, frequency_penalty (OpenAI: [-2, 2]) and repetition_penalty (vLLM: > 0).
PenaltyParams parse_penalties(const ojson& body) {
  PenaltyParams p;
  for (const auto& [key, value] :
       {std::pair{"presence_penalty", &p.presence}, std::pair{"frequency_penalty", &p.frequency}}) {
    if (auto x = number_field(body, key)) {
      if (*x < -2 || *x > 2) throw bad_value(key, fmt::format("must be in [-2, 2], got {}.", *x));
      *value = static_cast<float>(*x);
    }
  }
  if (auto x = number_field(body, "repetition_penalty")) {
    if (!(*x > 0) || *x > 1e6)
      throw bad_value("repetition_penalty", fmt::format("must be > 0 (1 = off), got {}.", *x));
    p.repetition = static_cast<float>(*x);
  }
  return p;
}

// GenerateOptions::logprobs from chat's logprobs (bool) + top_logprobs, or completions' logprobs
// (the number of alternatives).
int parse_logprobs(Endpoint endpoint, const ojson& body) {
  if (endpoint == Endpoint::completions) {
    if (field(body, "top_logprobs"))
      throw bad_value("top_logprobs",
                      "top_logprobs is a chat completions field; completions take 'logprobs': N.");
    const auto n = int_field(body, "logprobs", 0, kMaxTopLogprobs);
    return n ? static_cast<int>(*n) : -1;
  }
  const bool wants = bool_field(body, "logprobs").value_or(false);
  const auto top = int_field(body, "top_logprobs", 0, kMaxTopLogprobs);
  if (top && !wants)
    throw bad_value("top_logprobs", "'logprobs' must be true when 'top_logprobs' is given.");
  return wants ? static_cast<int>(top.value_or(0)) : -1;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (the chat
// template joins them, or loops over them when it is written to).
ojson validated_content(const ojson& content, const std::string& param) {
  if (content.is_string()) return content;
  if (!content.is_array())
    throw wrong_type(param, "a string or an array of content parts", content);
  ojson parts = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string p = fmt::format("{}[{}]", param, i);
    if (!part.is_object()) throw wrong_type(p, "an object", part);
    const ojson* type = field(part, "type");
    if (!type)
      throw bad_request(fmt::format("Missing required parameter: '{}.type'.", p), p + ".type",
                        "missing_required_parameter", "missing_field");
    if (!type->is_string()) throw wrong_type(p + ".type", "a string", *type);
    if (type->get<std::string>() != "text")
      throw unsupported(p + ".type",
                        fmt::format("content parts of type '{}' are not supported (text only).",
                                    utf8::to_valid_lossy(type->get<std::string>().substr(0, 64))));
    const ojson* text = field(part, "text");
    if (!text)
      throw bad_request(fmt::format("Missing required parameter: '{}.text'.", p), p + ".text",
                        "missing_required_parameter", "missing_field");
    if (!text->is_string()) throw wrong_type(p + ".text", "a string", *text);
    parts.push_back(ojson{{"type", "text"}, {"text", *text}});
  }
  return parts;
}

// Validated messages in the shape the chat renderer takes.
ojson parse_messages(const ojson& body) {
  const ojson* v = field(body, "messages");
  if (!v)
    throw bad_request("Missing required parameter: 'messages'.", "messages",
                      "missing_required_parameter", "missing_field");
  if (!v->is_array()) throw wrong_type("messages", "an array", *v);
  if (v->empty()) throw bad_value("messages", "expected a non-empty array of messages.");
  static const std::vector<std::string> kRoles = {"system", "developer", "user", "assistant",
                                                  "tool"};
  ojson out = ojson::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const ojson& m = (*v)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw wrong_type(p, "an object", m);
    const ojson* role = field(m, "role");
    if (!role)
      throw bad_request(fmt::format("Missing required parameter: '{}.role'.", p), p + ".role",
                        "missing_required_parameter", "missing_field");
    if (!role->is_string()) throw wrong_type(p + ".role", "a string", *role);
    const std::string r = role->get<std::string>();
    if (std::find(kRoles.begin(), kRoles.end(), r) == kRoles.end())
      throw bad_value(p + ".role",
                      fmt::format("unknown role '{}' (system, developer, user, assistant or tool).",
                                  utf8::to_valid_lossy(r.substr(0, 64))));
    ojson msg = {{"role", r == "developer" ? "system" : r}};
    const ojson* content = field(m, "content");
    const ojson* tool_calls = field(m, "tool_calls");
    if (content) {
      msg["content"] = validated_content(*content, p + ".content");
    } else if (!(r == "assistant" && tool_calls)) {
      throw bad_request(fmt::format("Missing required parameter: '{}.content'.", p), p + ".content",
                        "missing_required_parameter", "missing_field");
    }
    if (const ojson* name = field(m, "name")) {
      if (!name->is_string()) throw wrong_type(p + ".name", "a string", *name);
      msg["name"] = *name;
    }
    if (tool_calls) {
      if (!tool_calls->is_array()) throw wrong_type(p + ".tool_calls", "an array", *tool_calls);
      msg["tool_calls"] = *tool_calls;
    }
    if (const ojson* id = field(m, "tool_call_id")) {
      if (!id->is_string()) throw wrong_type(p + ".tool_call_id", "a string", *id);
      msg["tool_call_id"] = *id;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// Template variables a chat request supplies: tools and chat_template_kwargs.
ojson parse_template_extra(const ojson& body) {
  ojson extra = ojson::object();
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw wrong_type("chat_template_kwargs", "an object", *kw);
    for (auto it = kw->begin(); it != kw->end(); ++it) extra[it.key()] = it.value();
  }
  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) throw wrong_type("tools", "an array", *tools);
    extra["tools"] = *tools;
  }
  return extra;
}

std::vector<int32_t> encode(const PromptContext& ctx, const std::string& text, bool special,
                            const char* param) {
  // A text longer than max_context tokens of the longest kind cannot fit: refuse it before the
  // tokenizer spends tens of bytes of memory per byte of text on it.
  if (ctx.max_prompt_bytes > 0 && text.size() > ctx.max_prompt_bytes)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens; the prompt "
                                  "is {} bytes, more than such a context can hold ({} bytes).",
                                  ctx.max_context, text.size(), ctx.max_prompt_bytes),
                      param, "context_length_exceeded", "context_length_exceeded");
  try {
    return ctx.tokenizer->encode(text, special);
  } catch (const Error& e) {
    throw bad_request(fmt::format("'{}' could not be tokenized: {}", param, e.what()), param,
                      "invalid_value", "invalid_value");
  }
}

// The completions prompt: a string, token ids, or a batch of one of either.
std::vector<int32_t> parse_prompt(const ojson& body, const PromptContext& ctx) {
  const ojson* v = field(body, "prompt");
  if (!v)
    throw bad_request("Missing required parameter: 'prompt'.", "prompt",
                      "missing_required_parameter", "missing_field");
  const ojson* p = v;
  if (v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array())) {
    if (v->size() != 1)
      throw unsupported("prompt", fmt::format("batches of prompts are not supported (got {}); send "
                                              "one request per prompt.",
                                              v->size()));
    p = &v->front();
  }
  if (p->is_string()) {
    const std::string& text = p->get_ref<const std::string&>();
    if (text.empty()) throw bad_value("prompt", "the prompt is empty.");
    std::vector<int32_t> ids = encode(ctx, text, /*special=*/true, "prompt");
    if (ids.empty()) throw bad_value("prompt", "the prompt encodes to no tokens.");
    return ids;
  }
  if (!p->is_array()) throw wrong_type("prompt", "a string or an array of token ids", *p);
  if (p->empty()) throw bad_value("prompt", "the prompt is empty.");
  std::vector<int32_t> ids;
  ids.reserve(p->size());
  for (size_t i = 0; i < p->size(); ++i) {
    const ojson& t = (*p)[i];
    const std::string param = fmt::format("prompt[{}]", i);
    if (!t.is_number_integer()) throw wrong_type(param, "an integer token id", t);
    if (t.is_number_unsigned() ? t.get<uint64_t>() >= static_cast<uint64_t>(ctx.vocab_size)
                               : (t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size))
      throw bad_value(param, fmt::format("token id {} is outside the vocabulary [0, {}).", t.dump(),
                                         ctx.vocab_size));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

std::vector<int32_t> chat_prompt(const ojson& body, const PromptContext& ctx) {
  const ojson messages = parse_messages(body);
  const ojson extra = parse_template_extra(body);
  std::string text;
  try {
    text = ctx.render_chat(messages, extra);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    // invalid_input: the template refused these messages (raise_exception, bad roles order...);
    // anything else is the server's limitation (a construct the renderer does not implement).
    if (e.kind() == ErrorKind::invalid_input)
      throw bad_request(fmt::format("The chat template rejected these messages: {}", e.what()),
                        "messages", "invalid_value", "chat_template");
    throw ApiError(500, "server_error",
                   fmt::format("The chat template could not be rendered: {}", e.what()), {},
                   "chat_template_error", "chat_template");
  }
  // A template without tool support ignores `tools`: refuse rather than drop them silently.
  if (const auto tools = extra.find("tools"); tools != extra.end() && !tools->empty()) {
    ojson without = extra;
    without.erase("tools");
    if (ctx.render_chat(messages, without) == text)
      throw bad_request(
          "This model's chat template does not render 'tools' (the prompt is the same with and "
          "without them); describe the tools in a message instead.",
          "tools", "tools_unsupported", "unsupported_parameter");
  }
  std::vector<int32_t> ids = encode(ctx, text, ctx.chat_add_special_tokens, "messages");
  if (ids.empty()) throw bad_value("messages", "the conversation renders to no tokens.");
  return ids;
}

}  // namespace

size_t max_prompt_bytes(const Tokenizer& tokenizer, int max_context) {
  size_t longest = 1;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const int32_t one[1] = {id};
    longest = std::max(longest, tokenizer.decode(one).size() + 1);  // +1: a stripped lead space
  }
  return 2 * longest * static_cast<size_t>(std::max(max_context, 1));
}

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

ParsedRequest parse_request(Endpoint endpoint, std::string_view text, const PromptContext& ctx) {
  if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth)
    throw bad_request(
        fmt::format("The request body is nested deeper than {} levels.", kMaxJsonDepth), {},
        "invalid_json", "invalid_json");
  ojson body;
  try {
    body = ojson::parse(text);
  } catch (const ojson::exception& e) {
    // nlohmann's message names the byte offset (and invalid UTF-8 inside strings).
    throw bad_request(
        fmt::format("The request body is not valid JSON: {}", utf8::to_valid_lossy(e.what())), {},
        "invalid_json", "invalid_json");
  }
  if (!body.is_object())
    throw bad_request(
        fmt::format("The request body must be a JSON object, got {}.", type_name(body)), {},
        "invalid_json", "invalid_json");

  ParsedRequest r;
  r.endpoint = endpoint;
  const ojson* model = field(body, "model");
  if (!model)
    throw bad_request("Missing required parameter: 'model'.", "model", "missing_required_parameter",
                      "missing_field");
  if (!model->is_string()) throw wrong_type("model", "a string", *model);
  r.model = model->get<std::string>();
  if (r.model != ctx.model_id)
    throw ApiError(404, "invalid_request_error",
                   fmt::format("The model '{}' does not exist; this server serves '{}'.",
                               utf8::to_valid_lossy(r.model.substr(0, 256)), ctx.model_id),
                   "model", "model_not_found", "model_not_found");

  reject_unsupported(body);
  OutputFormat format = parse_output_format(endpoint, body);
  r.tool_name = format.tool_name;
  r.options.sampling = parse_sampling(body, ctx.default_sampling);
  r.options.penalties = parse_penalties(body);
  r.options.logprobs = parse_logprobs(endpoint, body);
  r.n = static_cast<int>(int_field(body, "n", 1, kMaxChoices).value_or(1));
  r.options.seed = parse_seed(body);
  r.options.stop = parse_stop(body);
  r.stream = bool_field(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) throw wrong_type("stream_options", "an object", *so);
    if (!r.stream)
      throw bad_value("stream_options", "stream_options is only allowed when 'stream' is true.");
    r.include_usage = bool_field(*so, "include_usage").value_or(false);
  }

  // max_completion_tokens (chat's current name) wins over the legacy max_tokens.
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> max_tokens = int_field(body, "max_completion_tokens", 1, kHuge);
  const char* max_param = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = int_field(body, "max_tokens", 1, kHuge);
    max_param = "max_tokens";
  }
  if (max_tokens && *max_tokens >= ctx.max_context)
    throw bad_value(max_param, fmt::format("{} is too large: this model's maximum context length "
                                           "is {} tokens (prompt + completion).",
                                           *max_tokens, ctx.max_context));

  // The prompt last: tokenizing is the expensive part.
  r.prompt = endpoint == Endpoint::chat ? chat_prompt(body, ctx) : parse_prompt(body, ctx);
  r.options.eos_token_ids = endpoint == Endpoint::chat ? ctx.chat_eos_token_ids : ctx.eos_token_ids;
  const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
  const char* prompt_param = endpoint == Endpoint::chat ? "messages" : "prompt";
  if (n_prompt >= ctx.max_context)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens; the prompt "
                                  "has {} tokens, leaving no room for a completion.",
                                  ctx.max_context, n_prompt),
                      prompt_param, "context_length_exceeded", "context_length_exceeded");
  if (max_tokens && n_prompt + *max_tokens > ctx.max_context)
    throw bad_request(
        fmt::format("This model's maximum context length is {} tokens. However, "
                    "you requested {} tokens ({} in the prompt, {} for the "
                    "completion). Reduce the prompt or {}.",
                    ctx.max_context, n_prompt + *max_tokens, n_prompt, *max_tokens, max_param),
        prompt_param, "context_length_exceeded", "context_length_exceeded");
  r.options.max_tokens = static_cast<int>(max_tokens.value_or(ctx.max_context - n_prompt));
  if (format.schema) {
    if (!ctx.json_vocab || r.options.eos_token_ids.empty())
      throw unsupported(format.tool_name.empty() ? "response_format" : "tool_choice",
                        "structured output needs the model's vocabulary and an EOS token.");
    r.options.json = std::make_shared<JsonConstraint>(
        JsonConstraint{std::move(*format.schema), ctx.json_vocab, r.options.eos_token_ids});
  }
  try {
    validate(r.options, ctx.vocab_size);
  } catch (const Error& e) {
    throw bad_request(e.what(), {}, "invalid_value", "invalid_value");
  }
  return r;
}

}  // namespace dspark::server
