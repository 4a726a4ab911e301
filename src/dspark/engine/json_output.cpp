#include "dspark/engine/json_output.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"

namespace dspark {

std::shared_ptr<const TokenVocab> json_token_vocab(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  return std::make_shared<TokenVocab>(bytes);
}

JsonSchema load_json_schema(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  DSPARK_CHECK_KIND(invalid_input, in.good(), "cannot read the JSON schema file {}", file.string());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json schema;
  try {
    schema = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    DSPARK_FAIL(invalid_input, "the JSON schema file {} is not JSON: {}", file.string(), e.what());
  }
  try {
    return JsonSchema::compile(schema);
  } catch (const Error& e) {
    DSPARK_FAIL(invalid_input, "unsupported schema in {}: {}", file.string(), e.what());
  }
}

std::shared_ptr<const JsonConstraint> make_json_constraint(JsonSchema schema,
                                                           const Tokenizer& tokenizer,
                                                           std::vector<int32_t> eos) {
  DSPARK_CHECK_KIND(invalid_input, !eos.empty(),
                    "structured output needs an EOS token and the model defines none");
  return std::make_shared<JsonConstraint>(
      JsonConstraint{std::move(schema), json_token_vocab(tokenizer), std::move(eos)});
}

}  // namespace dspark
