// Chat templates: the Jinja2 template of a Hugging Face tokenizer (tokenizer_config.json's
// "chat_template", or chat_template.jinja) rendered exactly like transformers'
// `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)` does, by our own
// Jinja2 subset (io/jinja_*): transformers' sandbox with trim_blocks and lstrip_blocks, its
// tojson / raise_exception / strftime_now, jinja2's loop/namespace/macro semantics, and the
// Python behaviour of strings, lists and dicts. docs/chat-templates.md lists what is supported.
//
// Messages go through the same normalisation as in transformers 5 before rendering:
//  - keys whose value is null are dropped (an assistant message {"content": null, "tool_calls":
//    [...]} reaches the template without "content");
//  - a non-null "reasoning_content", "thinking" or "reasoning" (first found) is copied to both
//    "thinking" and "reasoning_content";
// plus one step for OpenAI clients: a content given as a list of parts must hold only
// {"type": "text", "text": ...} parts (else invalid_input). Templates that loop over
// message content themselves (e.g. Gemma 3: `{% for item in message['content'] %}`) get the list
// as it is; for all others the texts are joined with "\n" (as vLLM and llama.cpp do).
//
// Thread safety: a ChatTemplate is immutable after loading; render may be called concurrently.
// Copies share the parsed template.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace dspark {

class ChatTemplate {
 public:
  ChatTemplate();  // no template: has_template() is false

  // From a tokenizer_config.json, or a model directory holding one. The template is the
  // directory's chat_template.jinja when present (as transformers loads it), else the config's
  // "chat_template" (a string, or a list of {"name", "template"}: "default", and "tool_use" for
  // renders with tools when the list has one), else chat_template.json's "chat_template"; none
  // of these: has_template() is false. bos_token / eos_token / unk/pad/... (strings or
  // {"content": ...}) and "extra_special_tokens" become template variables. Throws io (missing
  // or invalid file, template syntax error) or unsupported (a Jinja construct we do not
  // implement, named in the message) -- never crashes on a template it cannot handle.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& file_or_dir);
  // From template source. Empty bos/eos tokens leave those variables undefined.
  static ChatTemplate from_string(std::string source, std::string bos_token = "",
                                  std::string eos_token = "");

  // messages: a JSON array of {"role", "content", optional "tool_calls"/"name"/"tool_call_id"},
  // as OpenAI clients send them (content: a string, null, or a list of text parts; see above).
  // extra: more template variables, e.g. "tools" (a list; "tools" and "documents" are none when
  // absent, like in transformers), "enable_thinking", "date_string", "builtin_tools".
  // A string "strftime_now" in extra ("YYYY-MM-DDTHH:MM:SS") pins the clock strftime_now()
  // reads (for tests); it is not passed to the template.
  // Throws invalid_input: for raise_exception(msg) in the template, with exactly msg as what()
  // (e.g. Gemma's "Conversation roles must alternate user/assistant/user/assistant/..."); for
  // malformed messages; for other errors the template raises while rendering these messages
  // ("chat template line N: ..."). unsupported: no template, or a construct we do not implement.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt = true,
                     const nlohmann::json& extra = nlohmann::json::object()) const;
  // The same for inputs parsed as ordered_json: `tojson` then prints object keys in the order of
  // the request, as Python (transformers) does. nlohmann::json sorts keys, so a template that
  // dumps tools or tool-call arguments with tojson renders them sorted through render().
  std::string render_ordered(
      const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  bool has_template() const;
  // The template source the renders use without tools ("" when none).
  const std::string& source() const;

  struct Impl;

 private:
  explicit ChatTemplate(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// A plain fallback for models without a template: "role: content\n" lines + "assistant: ".
// Content lists are joined like render() does; a null or missing content renders as "".
std::string render_plain_chat(const nlohmann::json& messages, bool add_generation_prompt);

}  // namespace dspark
