#include "dspark/server/output_format.h"

#include <fmt/format.h>

#include "dspark/core/error.h"
#include "dspark/server/errors.h"

namespace dspark::server {
namespace {

using ojson = nlohmann::ordered_json;

const ojson* member(const ojson& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

ApiError invalid(const std::string& param, const std::string& message) {
  return bad_request(fmt::format("Invalid value for '{}': {}", param, message), param,
                     "invalid_value", "invalid_value");
}

JsonSchema compile(const ojson& schema, const std::string& param) {
  try {
    return JsonSchema::compile(nlohmann::json::parse(schema.dump()));
  } catch (const Error& e) {
    throw bad_request(fmt::format("Unsupported schema in '{}': {}", param, e.what()), param,
                      "invalid_schema", "invalid_schema");
  }
}

std::optional<JsonSchema> response_format(const ojson& body) {
  const ojson* rf = member(body, "response_format");
  if (!rf) return std::nullopt;
  if (!rf->is_object()) throw invalid("response_format", "must be an object.");
  const ojson* type = member(*rf, "type");
  if (!type || !type->is_string())
    throw invalid("response_format",
                  "'type' must be \"text\", \"json_object\" or \"json_schema\".");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") return JsonSchema::any_object();
  if (t != "json_schema")
    throw invalid("response_format",
                  "'type' must be \"text\", \"json_object\" or \"json_schema\".");
  const ojson* js = member(*rf, "json_schema");
  if (!js || !js->is_object())
    throw invalid("response_format.json_schema",
                  "must be an object {\"name\": ..., \"schema\": {...}, \"strict\": ...}.");
  const ojson* name = member(*js, "name");
  if (!name || !name->is_string() || name->get<std::string>().empty())
    throw invalid("response_format.json_schema.name", "must be a non-empty string.");
  if (const ojson* strict = member(*js, "strict"); strict && !strict->is_boolean())
    throw invalid("response_format.json_schema.strict", "must be a boolean.");
  const ojson* schema = member(*js, "schema");
  if (!schema) return JsonSchema::any_object();  // OpenAI: an omitted schema is any object
  return compile(*schema, "response_format.json_schema.schema");
}

}  // namespace

OutputFormat parse_output_format(Endpoint endpoint, const ojson& body) {
  OutputFormat out;
  out.schema = response_format(body);
  const ojson* tc = member(body, "tool_choice");
  if (!tc) return out;
  if (tc->is_string() && (tc->get<std::string>() == "auto" || tc->get<std::string>() == "none"))
    return out;
  if (endpoint != Endpoint::chat)
    throw invalid("tool_choice", "tools are a chat completions field.");
  const ojson* tools = member(body, "tools");
  if (!tools || !tools->is_array() || tools->empty())
    throw invalid("tool_choice", "a required or named tool call needs a non-empty 'tools'.");
  if (out.schema)
    throw invalid("tool_choice", "a forced tool call cannot be combined with 'response_format'.");
  std::string wanted;
  if (tc->is_string()) {
    if (tc->get<std::string>() != "required")
      throw invalid("tool_choice",
                    "must be \"none\", \"auto\", \"required\" or "
                    "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
    if (tools->size() != 1)
      throw bad_request(
          "Unsupported value for 'tool_choice': \"required\" is supported with exactly one "
          "tool; name the function instead ({\"type\": \"function\", \"function\": "
          "{\"name\": ...}}).",
          "tool_choice", "unsupported_parameter", "unsupported");
  } else {
    const ojson* fn = tc->is_object() ? member(*tc, "function") : nullptr;
    const ojson* name = fn && fn->is_object() ? member(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      throw invalid("tool_choice",
                    "must be \"none\", \"auto\", \"required\" or "
                    "{\"type\": \"function\", \"function\": {\"name\": ...}}.");
    wanted = name->get<std::string>();
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& tool = (*tools)[i];
    const ojson* fn = tool.is_object() ? member(tool, "function") : nullptr;
    const ojson* name = fn && fn->is_object() ? member(*fn, "name") : nullptr;
    const std::string param = fmt::format("tools[{}]", i);
    if (!name || !name->is_string() || name->get<std::string>().empty())
      throw invalid(param,
                    "each tool must be {\"type\": \"function\", \"function\": {\"name\": "
                    "..., \"parameters\": {...}}}.");
    if (!wanted.empty() && name->get<std::string>() != wanted) continue;
    out.tool_name = name->get<std::string>();
    const ojson* params = member(*fn, "parameters");
    // No parameters: the function takes none (an empty object).
    out.schema = params ? compile(*params, param + ".function.parameters")
                        : compile(ojson::parse(R"({"type":"object","additionalProperties":false})"),
                                  param + ".function.parameters");
    return out;
  }
  throw invalid("tool_choice", fmt::format("no tool is named '{}'.", wanted));
}

}  // namespace dspark::server
