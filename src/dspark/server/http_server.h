// `dspark serve`: the OpenAI-compatible HTTP server (cpp-httplib) in front of the engine thread.
//
//   POST /v1/chat/completions   chat (template from tokenizer_config.json), streaming or not
//   POST /v1/completions        raw prompt (text or token ids), streaming or not
//   GET  /v1/models             the served model; GET /v1/models/{id}
//   GET  /health                200 while the engine thread runs
//   GET  /metrics               Prometheus text (metrics.h)
//
// Handler threads parse and tokenize (openai_request.h), submit to the EngineWorker and relay the
// request's text as it arrives (server-sent events) or the whole response at the end. A client
// that goes away cancels its request. Errors use the OpenAI shape (errors.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "dspark/server/engine_worker.h"

namespace dspark::server {

struct ServerConfig {
  EngineWorkerConfig engine;
  std::string host = "127.0.0.1";
  int port = 8000;         // 0: any free port (see port())
  std::string api_key;     // non-empty: /v1/* need "Authorization: Bearer <api_key>"
  std::string model_name;  // the served model id; default: the model directory's name
  size_t max_body_bytes = size_t{8} << 20;  // larger bodies get 413 (read no further)
  // A request's head and body must arrive within this long of its first byte (else 408 / closed).
  std::chrono::milliseconds request_timeout{30'000};
  int http_threads = 0;  // 0: max_batch + max_queue + 16 (one per in-flight request)
  // Requests without "spec_sampling" use this (--spec-sampling).
  SpecSampling spec_sampling = SpecSampling::coupled;
};

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Loads the model (on the engine thread) and the chat template, and binds the port. Throws
  // dspark::Error (io: the port cannot be bound).
  void start();
  int port() const;
  const ServedModel& model() const;
  const std::string& model_id() const;
  std::string chat_template_description() const;
  // Why the chat template could not be loaded ("" when it was, or the model has none).
  std::string chat_template_error() const;
  // Serves until stop(); returns false when listening failed.
  bool run();
  // Ends every request (503 / an error chunk), then stops listening. Thread-safe, idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspark::server
