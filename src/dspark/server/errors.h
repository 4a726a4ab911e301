// Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}} with an HTTP status.
// Request handlers throw ApiError; the routes turn it into a response (or an SSE error chunk once a
// stream has started). Every ApiError also carries a short `kind` label for the metrics.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dspark {

class Error;

namespace server {

class ApiError : public std::runtime_error {
 public:
  // type: OpenAI's error type ("invalid_request_error", "authentication_error", "not_found_error",
  // "server_error", ...); param: the offending request field ("" for none); code: a
  // machine-readable code ("" for none); kind: the metrics label.
  ApiError(int status, std::string type, std::string message, std::string param = {},
           std::string code = {}, std::string kind = {});

  int status() const noexcept { return status_; }
  const std::string& type() const noexcept { return type_; }
  const std::string& param() const noexcept { return param_; }
  const std::string& code() const noexcept { return code_; }
  const std::string& kind() const noexcept { return kind_; }
  // {"error": {...}}; param and code are null when empty.
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string type_, param_, code_, kind_;
};

// 400 invalid_request_error naming `param`; kind is the metrics label (e.g. "invalid_value").
ApiError bad_request(std::string message, std::string param = {}, std::string code = {},
                     std::string kind = "invalid_request");
// A dspark::Error as an API error: invalid_input -> 400, out_of_memory -> 503, unsupported -> 400,
// anything else -> 500 server_error.
ApiError from_engine_error(const Error& e);
// The error for a bare HTTP status set by the HTTP library (400 bad request line or headers, 404,
// 405, 413 payload too large, 414 URI too long, ...).
ApiError from_http_status(int status);

}  // namespace server
}  // namespace dspark
