// OpenAI request bodies (POST /v1/chat/completions, POST /v1/completions) parsed and validated into
// an engine request: prompt token ids + GenerateOptions + streaming flags. Every problem is an
// ApiError (400 naming the field, 404 for an unknown model) thrown before anything reaches the
// engine. Runs on the HTTP handler threads: it only uses the (thread-safe) tokenizer and the chat
// renderer given in PromptContext.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/engine/generate.h"
#include "dspark/engine/json_matcher.h"

namespace dspark {

class Tokenizer;

namespace server {

enum class Endpoint { chat, completions };

// Renders validated chat messages (each {"role", "content", optional "name" / "tool_calls" /
// "tool_call_id"}) into the prompt text, with the generation prompt appended. `extra` holds the
// template variables the request supplies ("tools", and the entries of "chat_template_kwargs").
// Throws ApiError (or dspark::Error, reported as 400) when the template rejects the conversation.
// Objects keep the request's key order (ordered_json), as Python dicts do for transformers.
using ChatRenderer = std::function<std::string(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& extra)>;

// What parsing needs to know about the served model.
struct PromptContext {
  std::string model_id;  // the served model name (requests must name it)
  const Tokenizer* tokenizer = nullptr;
  ChatRenderer render_chat;                 // chat messages -> prompt text
  bool chat_add_special_tokens = false;     // encode rendered chats with the tokenizer's template
  std::vector<int32_t> eos_token_ids;       // completions end at these
  std::vector<int32_t> chat_eos_token_ids;  // chat completions end at these
  SamplingParams default_sampling;          // the model's generation_config.json
  int64_t vocab_size = 0;
  int max_context = 0;  // prompt + completion tokens at most
  // Prompt texts longer than this are refused without tokenizing (0: no limit); see
  // max_prompt_bytes().
  size_t max_prompt_bytes = 0;
  // Every token's bytes in a trie, for structured output's masks (null: refused with 400).
  std::shared_ptr<const TokenVocab> json_vocab;
};

// A bound no prompt that fits max_context tokens exceeds: twice max_context tokens of the
// vocabulary's longest decoded token (the factor leaves room for normalizers that drop bytes).
size_t max_prompt_bytes(const Tokenizer& tokenizer, int max_context);

struct ParsedRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;            // as requested (echoed in responses)
  std::vector<int32_t> prompt;  // token ids
  GenerateOptions options;      // sampling, penalties, logprobs, seed, max_tokens, EOS, stop
  int n = 1;                    // choices; choice i samples with seed options.seed + i
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // tool_choice forced a call of this function: the output (a JSON document of its parameters'
  // schema, options.json) is returned as the call's arguments.
  std::string tool_name;
};

// Limits on request fields that have no natural bound in the model.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 1024;
inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kMaxChoices = 16;  // n

// Parses a request body. Throws ApiError.
ParsedRequest parse_request(Endpoint endpoint, std::string_view body, const PromptContext& ctx);

// Nesting depth of the JSON text (brackets outside strings), stopping once it exceeds `limit`;
// used to refuse absurdly nested bodies before the recursive parser sees them.
int json_nesting_depth(std::string_view text, int limit);

}  // namespace server
}  // namespace dspark
