// The chat renderer of the served model: its chat template (tokenizer_config.json, rendered by
// io/chat_template.h) or, for a model without one, the plain "role: content" fallback.
#pragma once

#include <filesystem>
#include <string>

#include "dspark/server/openai_request.h"

namespace dspark::server {

struct ChatPrompt {
  ChatRenderer render;
  // Whether the rendered text is encoded with the tokenizer's special-token template (the plain
  // fallback needs e.g. Llama's BOS; a chat template writes its own).
  bool add_special_tokens = false;
  std::string description;  // for the startup line
  std::string load_error;   // why the template could not be loaded ("" when it was)
};

// A template that cannot be loaded (syntax error, unsupported construct) does not stop the
// server: load_error says why and chat requests fail with a 500 naming it.
ChatPrompt load_chat_prompt(const std::filesystem::path& model_dir);

}  // namespace dspark::server
