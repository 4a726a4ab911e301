#include "dspark/server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dspark/engine/json_output.h"
#include "dspark/engine/text_generation.h"
#include "dspark/server/chat_prompt.h"
#include "dspark/server/connection_watch.h"
#include "dspark/server/errors.h"
#include "dspark/server/http_transport.h"
#include "dspark/server/openai_request.h"
#include "dspark/server/openai_response.h"
#include "dspark/server/output_format.h"

namespace dspark::server {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr auto kPollInterval = 50ms;  // how often a waiting handler checks its client

// The metrics label of a path.
std::string route_of(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) return "models";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

// The methods a known path accepts ("" for unknown paths).
std::string allowed_methods(const std::string& path) {
  const std::string route = route_of(path);
  if (route == "chat" || route == "completions") return "POST";
  if (route == "other") return "";
  return "GET, HEAD";
}

// "application/json", optionally with "; charset=utf-8" (any case, quoted or not) and other
// parameters.
bool json_media_type(std::string_view value) {
  auto lower_trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  size_t semi = value.find(';');
  if (lower_trim(value.substr(0, semi)) != "application/json") return false;
  while (semi != std::string_view::npos) {
    const std::string_view rest = value.substr(semi + 1);
    semi = rest.find(';');
    const std::string_view param = rest.substr(0, semi);
    if (semi != std::string_view::npos) semi += value.size() - rest.size();
    const size_t eq = param.find('=');
    if (eq == std::string_view::npos || lower_trim(param.substr(0, eq)) != "charset") continue;
    std::string charset = lower_trim(param.substr(eq + 1));
    if (charset.size() >= 2 && charset.front() == '"' && charset.back() == '"')
      charset = charset.substr(1, charset.size() - 2);
    if (charset != "utf-8" && charset != "utf8") return false;
  }
  return true;
}

bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

// The channels of one request's choices (n of them; index i = choice i).
using Choices = std::vector<std::shared_ptr<RequestChannel>>;

// The request's outputs, in choice order (all channels done).
std::vector<const RequestOutput*> outputs(const Choices& channels) {
  std::vector<const RequestOutput*> outs;
  for (const auto& ch : channels) outs.push_back(&ch->output());
  return outs;
}

// The error a request that ended without completing reports.
ApiError ended_error(const RequestOutput& out, int status) {
  const std::string& why = out.result.error;
  if (out.result.finish_reason == FinishReason::cancelled || status == 503)
    return ApiError(503, "server_error", why.empty() ? "the request was cancelled" : why, {},
                    "unavailable", "unavailable");
  if (status == 400) return bad_request(why, {}, "invalid_value", "invalid_request");
  return ApiError(status >= 500 ? status : 500, "server_error",
                  why.empty() ? "the engine failed this request" : why, {}, "engine_error",
                  "engine");
}

}  // namespace

struct HttpServer::Impl {
  // One streamed response: shared by the content provider and its releaser. A member, not in the
  // anonymous namespace: the provider's lambdas (members of Impl) hold it.
  struct StreamState {
    Choices channels;
    std::shared_ptr<ChannelWakeup> wakeup;  // n > 1: any channel's change
    std::vector<ChoiceStream> choices;
    std::vector<bool> done;  // per choice: its finish chunk was written
    ResponseMeta meta;
    bool include_usage = false;
    bool began = false;
    bool finished = false;  // the last event was written (or the request ended)
  };

  ServerConfig config;
  ServerMetrics metrics;
  EngineWorker worker;
  HttpTransport svr;
  PromptContext prompt_ctx;
  ChatPrompt chat;
  std::string model_id;
  int64_t created = 0;
  int port = -1;
  std::once_flag stop_once;

  explicit Impl(ServerConfig c)
      : config(std::move(c)),
        worker(config.engine, metrics),
        svr(transport_config(config),
            [this](int status, const std::string& message, const std::string& path) {
              return refusal(status, message, path);
            }) {}

  static TransportConfig transport_config(const ServerConfig& c) {
    TransportConfig t;
    t.threads = c.http_threads > 0 ? c.http_threads : c.engine.max_batch + c.engine.max_queue + 16;
    t.max_body_bytes = c.max_body_bytes;
    t.request_timeout = c.request_timeout;
    return t;
  }

  // A request the connection layer refused before routing (bad framing, too large, too slow).
  std::string refusal(int status, const std::string& message, const std::string& path) {
    const char* code = status == 413   ? "payload_too_large"
                       : status == 408 ? "request_timeout"
                       : status == 431 ? "headers_too_large"
                                       : "invalid_framing";
    const ApiError e(status, "invalid_request_error", message, {}, code,
                     status == 413 ? "payload_too_large" : "http_protocol");
    metrics.record_error(e.kind());
    metrics.record_response(route_of(path.substr(0, path.find('?'))), status);
    return dump_json(e.to_json());
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    metrics.record_error(e.kind());
    res.status = e.status();
    res.set_content(dump_json(e.to_json()), "application/json");
    if (e.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  }

  // Runs a handler body; every exception becomes an OpenAI-shaped error response.
  template <typename F>
  void guarded(httplib::Response& res, F&& body) {
    try {
      body();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, from_engine_error(e));
    } catch (const std::bad_alloc&) {
      send_error(res, ApiError(503, "server_error", "out of host memory", {}, "out_of_memory",
                               "out_of_memory"));
    } catch (const std::exception& e) {
      send_error(res, ApiError(500, "server_error", std::string("internal error: ") + e.what(), {},
                               {}, "internal"));
    }
  }

  void check_auth(const httplib::Request& req) const {
    if (config.api_key.empty()) return;
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok = h.size() > kBearer.size() && h.compare(0, kBearer.size(), kBearer) == 0 &&
                    same_secret(std::string_view(h).substr(kBearer.size()), config.api_key);
    if (!ok)
      throw ApiError(401, "authentication_error",
                     h.empty() ? "Missing API key: send 'Authorization: Bearer <key>'."
                               : "Incorrect API key provided.",
                     {}, "invalid_api_key", "unauthorized");
  }

  // The request body, at most max_body_bytes (chunked bodies included; a larger Content-Length
  // was refused before the handler ran).
  std::string read_body(const httplib::Request& req, httplib::Response& res,
                        const httplib::ContentReader& reader) {
    std::string body;
    if (const size_t n = req.get_header_value<uint64_t>("Content-Length");
        n <= config.max_body_bytes)
      body.reserve(n);
    bool too_big = false;
    const bool ok = reader([&](const char* data, size_t n) {
      if (body.size() + n > config.max_body_bytes) {
        too_big = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (too_big || res.status == 413) {
      res.set_header("Connection", "close");
      throw ApiError(
          413, "invalid_request_error",
          fmt::format("The request body is larger than {} bytes.", config.max_body_bytes), {},
          "payload_too_large", "payload_too_large");
    }
    if (!ok) {
      res.set_header("Connection", "close");
      throw bad_request("The request body could not be read.", {}, {}, "http_protocol");
    }
    return body;
  }

  // Only application/json (charset utf-8 if given): a browser page can send text/plain, form and
  // multipart bodies cross-origin without a CORS preflight, JSON it cannot.
  static void check_json_content_type(const httplib::Request& req, httplib::Response& res) {
    const std::string value = req.get_header_value("Content-Type");
    if (!json_media_type(value)) {
      res.set_header("Connection", "close");  // the body is not read
      throw ApiError(415, "invalid_request_error",
                     value.empty()
                         ? "Missing Content-Type: send 'Content-Type: application/json'."
                         : fmt::format("Unsupported Content-Type '{}': send 'application/json' "
                                       "(UTF-8).",
                                       utf8_safe(value)),
                     {}, "unsupported_media_type", "unsupported_media_type");
    }
  }

  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res,
                       const httplib::ContentReader& reader) {
    guarded(res, [&] {
      check_auth(req);
      check_json_content_type(req, res);
      ParsedRequest pr;
      {
        const std::string body = read_body(req, res, reader);  // freed before generation
        pr = parse_request(endpoint, body, prompt_ctx);
      }
      ResponseMeta meta = make_meta(endpoint, pr.model);
      if (pr.options.logprobs >= 0) meta.logprobs_tokenizer = prompt_ctx.tokenizer;
      meta.tool_name = pr.tool_name;
      auto wakeup = pr.n > 1 ? std::make_shared<ChannelWakeup>() : nullptr;
      Choices channels = submit_choices(pr, wakeup);
      if (pr.stream) {
        start_stream(res, std::move(channels), std::move(wakeup), std::move(meta),
                     pr.include_usage);
      } else {
        respond_when_done(req, res, channels, meta);
      }
    });
  }

  // n requests, choice i sampling with seed + i; all or none are queued.
  Choices submit_choices(ParsedRequest& pr, const std::shared_ptr<ChannelWakeup>& wakeup) {
    Choices channels;
    try {
      for (int i = 0; i < pr.n; ++i) {
        GenerateOptions options = pr.options;
        options.seed = pr.options.seed + static_cast<uint64_t>(i);
        channels.push_back(worker.submit(pr.prompt, std::move(options), wakeup));
      }
    } catch (...) {
      for (const auto& ch : channels) worker.cancel(ch);
      throw;
    }
    return channels;
  }

  void respond_when_done(const httplib::Request& req, httplib::Response& res,
                         const Choices& channels, const ResponseMeta& meta) {
    const ConnectionWatch watch(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
    for (const auto& ch : channels) {
      for (;;) {
        if (ch->wait(kPollInterval).done) break;
        if (watch.closed()) {
          for (const auto& c : channels) worker.cancel(c);
          // Nobody reads this; it keeps the logs and metrics honest.
          res.set_header("Connection", "close");
          send_error(res, ApiError(499, "invalid_request_error", "the client closed the connection",
                                   {}, "client_closed", "client_disconnected"));
          return;
        }
      }
      const FinishReason reason = ch->output().result.finish_reason;
      if (reason == FinishReason::error || reason == FinishReason::cancelled) {
        for (const auto& c : channels) worker.cancel(c);  // the other choices are not needed
        send_error(res, ended_error(ch->output(), ch->error_status()));
        return;
      }
    }
    res.status = 200;
    res.set_content(dump_json(completion_json(meta, outputs(channels))), "application/json");
  }

  static bool write(httplib::DataSink& sink, const std::string& data) {
    return sink.write(data.data(), data.size());
  }

  void start_stream(httplib::Response& res, Choices channels, std::shared_ptr<ChannelWakeup> wakeup,
                    ResponseMeta meta, bool include_usage) {
    auto st = std::make_shared<StreamState>();
    st->channels = std::move(channels);
    st->wakeup = std::move(wakeup);
    for (size_t i = 0; i < st->channels.size(); ++i)
      st->choices.push_back(ChoiceStream{.index = static_cast<int>(i)});
    st->done.assign(st->channels.size(), false);
    st->meta = std::move(meta);
    st->include_usage = include_usage;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    // Exactly "text/event-stream": cpp-httplib never compresses that type (events must flow).
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) { return stream_step(*st, sink); },
        [this, st](bool) {
          // The stream ended early (client gone, write failed): cancel at the next round.
          if (!st->finished)
            for (const auto& ch : st->channels) worker.cancel(ch);
        });
  }

  // One call of the content provider: waits briefly, relays new text of every choice, ends a
  // choice with its finish chunk and the stream once every choice has ended.
  bool stream_step(StreamState& st, httplib::DataSink& sink) {
    const size_t n = st.channels.size();
    if (!st.began) {
      st.began = true;
      if (st.meta.endpoint == Endpoint::chat) {
        std::string events;
        for (size_t i = 0; i < n; ++i)
          events += sse_event(role_chunk(st.meta, static_cast<int>(i), st.include_usage));
        if (!write(sink, events)) return false;
      }
    }
    // One choice: block on its channel. Several: look at each, then sleep until any changes.
    const uint64_t seen = st.wakeup ? st.wakeup->changes() : 0;
    const auto timeout = n == 1 ? kPollInterval : std::chrono::milliseconds(0);
    std::string events;
    bool any = false, all_done = true;
    for (size_t i = 0; i < n; ++i) {
      if (st.done[i]) continue;
      const RequestChannel::Update u = st.channels[i]->wait(timeout);
      for (const RequestChannel::Piece& piece : u.pieces)
        events += sse_event(
            text_chunk(st.meta, st.choices[i], piece.text, piece.logprobs, st.include_usage));
      any = any || !u.pieces.empty() || u.done;
      if (!u.done) {
        all_done = false;
        continue;
      }
      const RequestOutput& out = st.channels[i]->output();
      const FinishReason reason = out.result.finish_reason;
      if (reason == FinishReason::error || reason == FinishReason::cancelled) {
        // One choice failed: the stream ends with its error (the others are cancelled).
        const ApiError e = ended_error(out, st.channels[i]->error_status());
        metrics.record_error(e.kind());
        for (const auto& ch : st.channels) worker.cancel(ch);
        events += sse_event(e.to_json());
        events += kSseDone;
        st.finished = true;
        if (!write(sink, events)) return false;
        sink.done();
        return true;
      }
      events += sse_event(finish_chunk(st.meta, st.choices[i], out, st.include_usage));
      st.done[i] = true;
    }
    if (!sink.is_writable()) return false;
    if (all_done) {
      if (st.include_usage) events += sse_event(usage_chunk(st.meta, outputs(st.channels)));
      events += kSseDone;
      st.finished = true;
    }
    if (!events.empty() && !write(sink, events)) return false;
    if (st.finished) {
      sink.done();
      return true;
    }
    if (!any && st.wakeup) st.wakeup->wait_after(seen, kPollInterval);
    return true;
  }

  // 405 for a known path with the wrong method, else 404.
  void not_routed(const httplib::Request& req, httplib::Response& res) {
    const std::string allow = allowed_methods(req.path);
    if (!allow.empty()) {
      res.set_header("Allow", allow);
      send_error(res, ApiError(405, "invalid_request_error",
                               fmt::format("Method {} is not allowed on {} (allowed: {}).",
                                           req.method, req.path, allow),
                               {}, "method_not_allowed", "method_not_allowed"));
    } else {
      send_error(res, ApiError(404, "invalid_request_error",
                               fmt::format("Unknown route {} {}.", req.method, utf8_safe(req.path)),
                               {}, "unknown_route", "not_found"));
    }
  }

  static std::string utf8_safe(const std::string& s) {
    std::string out;
    for (const char c : s.substr(0, 200)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    return out;
  }

  void routes() {
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& reader) {
      handle_generate(Endpoint::chat, req, res, reader);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) {
      handle_generate(Endpoint::completions, req, res, reader);
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        check_auth(req);
        res.set_content(dump_json(models_json(model_id, created, prompt_ctx.max_context)),
                        "application/json");
      });
    });
    svr.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        check_auth(req);
        if (req.matches[1] != model_id)
          throw ApiError(404, "invalid_request_error",
                         fmt::format("The model '{}' does not exist.", utf8_safe(req.matches[1])),
                         "model", "model_not_found", "model_not_found");
        res.set_content(dump_json(model_json(model_id, created, prompt_ctx.max_context)),
                        "application/json");
      });
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (worker.running()) {
        res.set_content(R"({"status":"ok"})", "application/json");
      } else {
        send_error(res, ApiError(503, "server_error", "the engine is not running", {},
                                 "unavailable", "unavailable"));
      }
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(), "text/plain; version=0.0.4");
    });

    // Everything else: 405 on known paths, 404 elsewhere (bodies drained, bounded).
    auto drain = [this](const httplib::Request& req, httplib::Response& res,
                        const httplib::ContentReader& reader) {
      size_t n_read = 0;
      reader([&](const char*, size_t n) { return (n_read += n) <= config.max_body_bytes; });
      not_routed(req, res);
    };
    auto plain = [this](const httplib::Request& req, httplib::Response& res) {
      not_routed(req, res);
    };
    svr.Get(".*", plain);
    svr.Options(".*", plain);
    svr.Post(".*", drain);
    svr.Put(".*", drain);
    svr.Patch(".*", drain);
    svr.Delete(".*", drain);

    // Statuses the library sets itself (bad request line or headers, 413, 414, ...).
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request&, httplib::Response& res) {
          if (!res.body.empty() || res.content_provider_)
            return httplib::Server::HandlerResponse::Unhandled;
          const ApiError e = from_http_status(res.status);
          metrics.record_error(e.kind());
          res.set_content(dump_json(e.to_json()), "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }));
    svr.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          send_error(res, ApiError(500, "server_error", "internal error", {}, {}, "internal"));
        });
    svr.set_response_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.record_response(route_of(req.path), res.status);
    });
  }
};

HttpServer::HttpServer(ServerConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& s = *impl_;
  s.worker.start();
  const ServedModel& m = s.worker.model();
  s.chat = load_chat_prompt(s.config.engine.model_dir);
  s.model_id = s.config.model_name.empty() ? std::filesystem::absolute(s.config.engine.model_dir)
                                                 .lexically_normal()
                                                 .filename()
                                                 .string()
                                           : s.config.model_name;
  if (s.model_id.empty()) s.model_id = "model";
  s.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();

  PromptContext& p = s.prompt_ctx;
  p.model_id = s.model_id;
  p.tokenizer = &*m.tokenizer;
  p.render_chat = s.chat.render;
  p.chat_add_special_tokens = s.chat.add_special_tokens;
  p.eos_token_ids = m.eos_token_ids;
  p.chat_eos_token_ids = m.eos_token_ids;
  if (const int32_t eos = m.tokenizer->eos_id();
      eos >= 0 && eos < m.vocab_size &&
      std::find(p.chat_eos_token_ids.begin(), p.chat_eos_token_ids.end(), eos) ==
          p.chat_eos_token_ids.end())
    p.chat_eos_token_ids.push_back(eos);
  p.default_sampling = default_sampling(m.defaults);
  p.default_sampling.spec = s.config.spec_sampling;
  p.vocab_size = m.vocab_size;
  p.max_context = m.max_context;
  p.max_prompt_bytes = max_prompt_bytes(*m.tokenizer, m.max_context);
  p.json_vocab = json_token_vocab(*m.tokenizer);

  s.routes();
  s.port = s.svr.bind(s.config.host, s.config.port);
  if (s.port < 0) {
    s.worker.stop();
    DSPARK_FAIL(io, "cannot listen on {}:{} (address in use, or not a local address)",
                s.config.host, s.config.port);
  }
}

int HttpServer::port() const {
  return impl_->port;
}

const ServedModel& HttpServer::model() const {
  return impl_->worker.model();
}

const std::string& HttpServer::model_id() const {
  return impl_->model_id;
}

std::string HttpServer::chat_template_description() const {
  return impl_->chat.description;
}

std::string HttpServer::chat_template_error() const {
  return impl_->chat.load_error;
}

bool HttpServer::run() {
  return impl_->svr.listen_after_bind();
}

void HttpServer::stop() {
  Impl& s = *impl_;
  std::call_once(s.stop_once, [&] {
    s.worker.stop();  // every waiting handler sees its request end
    s.svr.shutdown();
  });
}

}  // namespace dspark::server
