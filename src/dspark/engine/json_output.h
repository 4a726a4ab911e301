// Structured output for a text model: the token trie of its tokenizer, and the constraint a
// request's schema makes (a JSON-Schema file, or any JSON object).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "dspark/engine/json_matcher.h"
#include "dspark/io/tokenizer.h"

namespace dspark {

// Every token's bytes (Tokenizer::token_bytes) in a trie: built once per model.
std::shared_ptr<const TokenVocab> json_token_vocab(const Tokenizer& tokenizer);

// The schema in a JSON file; invalid_input naming the file for an unreadable file, bad JSON or
// a schema outside the supported subset (engine/json_schema.h).
JsonSchema load_json_schema(const std::filesystem::path& file);

// A constraint ending with `eos` (invalid_input when it is empty: the document could not end).
std::shared_ptr<const JsonConstraint> make_json_constraint(JsonSchema schema,
                                                           const Tokenizer& tokenizer,
                                                           std::vector<int32_t> eos);

}  // namespace dspark
