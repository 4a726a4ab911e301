// What a request asks of the output's form: free text, a JSON document (response_format
// json_object / json_schema), or a call of one function (tools with tool_choice "required" or
// naming a function): the function's arguments as a JSON document of its parameters' schema.
// Parsed and compiled on the HTTP handler threads; every problem is an ApiError (400 naming the
// field, and for schemas the unsupported keyword and its path).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "dspark/engine/json_matcher.h"
#include "dspark/server/openai_request.h"

namespace dspark::server {

struct OutputFormat {
  std::optional<JsonSchema> schema;  // none: free text
  std::string tool_name;             // a forced function call: the output is its arguments
};

// From response_format, tools and tool_choice of a request body.
OutputFormat parse_output_format(Endpoint endpoint, const nlohmann::ordered_json& body);

}  // namespace dspark::server
