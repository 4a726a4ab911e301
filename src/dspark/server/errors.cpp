#include "dspark/server/errors.h"

#include <nlohmann/json.hpp>

#include "dspark/core/error.h"

namespace dspark::server {

ApiError::ApiError(int status, std::string type, std::string message, std::string param,
                   std::string code, std::string kind)
    : std::runtime_error(std::move(message)),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)),
      kind_(kind.empty() ? type_ : std::move(kind)) {}

nlohmann::json ApiError::to_json() const {
  nlohmann::json e = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (!param_.empty()) e["param"] = param_;
  if (!code_.empty()) e["code"] = code_;
  return nlohmann::json{{"error", std::move(e)}};
}

ApiError bad_request(std::string message, std::string param, std::string code, std::string kind) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param),
                  std::move(code), std::move(kind));
}

ApiError from_engine_error(const Error& e) {
  switch (e.kind()) {
    case ErrorKind::invalid_input:
      return bad_request(e.what(), {}, {}, "invalid_request");
    case ErrorKind::unsupported:
      return bad_request(e.what(), {}, "unsupported", "unsupported");
    case ErrorKind::out_of_memory:
      return ApiError(503, "server_error", e.what(), {}, "out_of_memory", "out_of_memory");
    default:
      return ApiError(500, "server_error", e.what(), {}, {}, "engine");
  }
}

ApiError from_http_status(int status) {
  switch (status) {
    case 400:
      return bad_request("malformed HTTP request", {}, {}, "http_protocol");
    case 401:
      return ApiError(401, "authentication_error", "unauthorized", {}, "invalid_api_key",
                      "unauthorized");
    case 404:
      return ApiError(404, "not_found_error", "not found", {}, "not_found", "not_found");
    case 405:
      return ApiError(405, "invalid_request_error", "method not allowed", {}, "method_not_allowed",
                      "method_not_allowed");
    case 413:
      return ApiError(413, "invalid_request_error", "request body too large", {},
                      "payload_too_large", "payload_too_large");
    case 414:
      return ApiError(414, "invalid_request_error", "request URI too long", {}, "uri_too_long",
                      "http_protocol");
    case 416:
      return ApiError(416, "invalid_request_error", "bad Range header", {}, {}, "http_protocol");
    case 503:
      return ApiError(503, "server_error", "service unavailable", {}, {}, "unavailable");
    default:
      if (status >= 400 && status < 500)
        return ApiError(status, "invalid_request_error", "bad request", {}, {}, "http_protocol");
      return ApiError(status, "server_error", "internal server error", {}, {}, "internal");
  }
}

}  // namespace dspark::server
