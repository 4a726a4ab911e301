#include "dspark/engine/model_chat_template.h"

#include <optional>
#include <string>

#include "dspark/io/gguf.h"
#include "dspark/model/gguf_model.h"

namespace dspark {
namespace {

// The token string of metadata key `id_key` (e.g. tokenizer.ggml.bos_token_id), "" when absent.
std::string gguf_token(const GgufFile& file, const std::string& id_key) {
  const std::optional<int64_t> id = file.find_int(id_key);
  if (!id || !file.has("tokenizer.ggml.tokens")) return {};
  const auto& tokens = file.get("tokenizer.ggml.tokens").as_strings("tokenizer.ggml.tokens");
  return *id >= 0 && static_cast<size_t>(*id) < tokens.size() ? tokens[static_cast<size_t>(*id)]
                                                              : std::string();
}

}  // namespace

ChatTemplate load_model_chat_template(const std::filesystem::path& model) {
  if (const std::optional<std::filesystem::path> gguf = resolve_gguf_model(model)) {
    const GgufFile file = GgufFile::open(*gguf);
    std::string source = gguf_chat_template(file);
    if (source.empty()) return ChatTemplate();
    return ChatTemplate::from_string(std::move(source),
                                     gguf_token(file, "tokenizer.ggml.bos_token_id"),
                                     gguf_token(file, "tokenizer.ggml.eos_token_id"));
  }
  std::error_code ec;
  const bool has_config = std::filesystem::exists(model / "tokenizer_config.json", ec) ||
                          std::filesystem::exists(model / "chat_template.jinja", ec);
  return has_config ? ChatTemplate::from_tokenizer_config(model) : ChatTemplate();
}

}  // namespace dspark
