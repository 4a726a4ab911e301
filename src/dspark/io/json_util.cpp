#include "dspark/io/json_util.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "dspark/core/error.h"

namespace dspark {

namespace {

const nlohmann::json* find_value(const nlohmann::json& obj, std::string_view key,
                                 std::string_view source) {
  DSPARK_CHECK_KIND(io, obj.is_object(), "{}: expected a JSON object, got {}", source,
                    json_brief(obj));
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void wrong_type(std::string_view source, std::string_view key, const char* expected,
                             const nlohmann::json& value) {
  DSPARK_FAIL(io, "{}: key '{}' must be {}, got {}", source, key, expected, json_brief(value));
}

}  // namespace

std::string json_brief(const nlohmann::json& value) {
  std::string s = value.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

nlohmann::json parse_json_text(std::string_view text, std::string_view source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at ...".
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    DSPARK_FAIL(io, "{}: invalid JSON ({})", source, what);
  }
}

nlohmann::json read_json_file(const std::filesystem::path& file) {
  std::error_code ec;
  DSPARK_CHECK_KIND(io, std::filesystem::is_regular_file(file, ec), "{}: file not found",
                    file.string());
  std::ifstream in(file, std::ios::binary);
  DSPARK_CHECK_KIND(io, in.good(), "{}: cannot open", file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  DSPARK_CHECK_KIND(io, !in.bad(), "{}: read error", file.string());
  return parse_json_text(ss.str(), file.string());
}

std::optional<int64_t> json_optional_int(const nlohmann::json& obj, std::string_view key,
                                         std::string_view source) {
  const nlohmann::json* v = find_value(obj, key, source);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<int64_t>(d);
  }
  wrong_type(source, key, "an integer", *v);
}

std::optional<double> json_optional_number(const nlohmann::json& obj, std::string_view key,
                                           std::string_view source) {
  const nlohmann::json* v = find_value(obj, key, source);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) wrong_type(source, key, "a number", *v);
  return v->get<double>();
}

std::optional<bool> json_optional_bool(const nlohmann::json& obj, std::string_view key,
                                       std::string_view source) {
  const nlohmann::json* v = find_value(obj, key, source);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) wrong_type(source, key, "true or false", *v);
  return v->get<bool>();
}

std::optional<std::string> json_optional_string(const nlohmann::json& obj, std::string_view key,
                                                std::string_view source) {
  const nlohmann::json* v = find_value(obj, key, source);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong_type(source, key, "a string", *v);
  return v->get<std::string>();
}

int64_t json_int(const nlohmann::json& obj, std::string_view key, std::string_view source) {
  const auto v = json_optional_int(obj, key, source);
  DSPARK_CHECK_KIND(io, v.has_value(), "{}: missing required key '{}'", source, key);
  return *v;
}

double json_number(const nlohmann::json& obj, std::string_view key, std::string_view source) {
  const auto v = json_optional_number(obj, key, source);
  DSPARK_CHECK_KIND(io, v.has_value(), "{}: missing required key '{}'", source, key);
  return *v;
}

std::string json_string(const nlohmann::json& obj, std::string_view key, std::string_view source) {
  auto v = json_optional_string(obj, key, source);
  DSPARK_CHECK_KIND(io, v.has_value(), "{}: missing required key '{}'", source, key);
  return std::move(*v);
}

}  // namespace dspark
