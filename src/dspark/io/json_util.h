// Reading JSON files and typed fields with one-line ErrorKind::io messages that name the source
// (usually a file path) and the key: "config.json: key 'hidden_size' must be an integer, got
// \"64\"". Shared by the config, safetensors and tokenizer loaders.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dspark {

// Parses a whole file. Throws io "<file>: file not found" / "<file>: invalid JSON (...)".
nlohmann::json read_json_file(const std::filesystem::path& file);
// Parses text; `source` names it in the error message.
nlohmann::json parse_json_text(std::string_view text, std::string_view source);

// The value of `key` in object `obj`, or nullopt when the key is absent or null.
// Throws io naming source and key when the value has the wrong type. Integers accept integral
// floats (e.g. 4096.0); numbers accept integers.
std::optional<int64_t> json_optional_int(const nlohmann::json& obj, std::string_view key,
                                         std::string_view source);
std::optional<double> json_optional_number(const nlohmann::json& obj, std::string_view key,
                                           std::string_view source);
std::optional<bool> json_optional_bool(const nlohmann::json& obj, std::string_view key,
                                       std::string_view source);
std::optional<std::string> json_optional_string(const nlohmann::json& obj, std::string_view key,
                                                std::string_view source);

// Required variants: throw io "<source>: missing required key 'key'" when absent or null.
int64_t json_int(const nlohmann::json& obj, std::string_view key, std::string_view source);
double json_number(const nlohmann::json& obj, std::string_view key, std::string_view source);
std::string json_string(const nlohmann::json& obj, std::string_view key, std::string_view source);

// A short rendering of a value for error messages (truncated to ~60 characters).
std::string json_brief(const nlohmann::json& value);

}  // namespace dspark
