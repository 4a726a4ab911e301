// The chat template of a model given the way `load_text_model` takes it: a Hugging Face
// directory (tokenizer_config.json / chat_template.jinja) or a GGUF file (tokenizer.chat_template
// with the file's BOS / EOS token strings).
#pragma once

#include <filesystem>

#include "dspark/io/chat_template.h"

namespace dspark {

// has_template() is false when the model has none. Throws like ChatTemplate's loaders (io for a
// broken file or template syntax, unsupported for a construct we do not implement).
ChatTemplate load_model_chat_template(const std::filesystem::path& model);

}  // namespace dspark
