// dspark serve: the OpenAI-compatible HTTP server (src/dspark/server). Prints one line when it
// listens ("dspark serve: ... listening on http://HOST:PORT") and serves until SIGINT / SIGTERM.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "commands.h"
#include "cost_cache_options.h"
#include "dspark/core/error.h"
#include "dspark/engine/spec_sampling.h"
#include "dspark/server/http_server.h"

namespace dspark::cli {
namespace {

int g_signal_pipe[2] = {-1, -1};

extern "C" void on_signal(int) {
  const char byte = 1;
  const ssize_t n = write(g_signal_pipe[1], &byte, 1);
  (void)n;
}

struct ServeArgs {
  server::ServerConfig config;
  std::string kv_memory;
  std::string max_body_bytes;
  double request_timeout_s = 30;
  std::optional<int> gamma;
  std::string draft_policy = "adaptive";
  CostCacheArgs cost_cache;
  std::string spec_sampling = "coupled";
};

// "1073741824", "512M", "4G", "4GiB", "1.5G" -> bytes (K/M/G/T are powers of 1024).
size_t parse_bytes(const std::string& text, const char* flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    DSPARK_FAIL(invalid_input, "{}: '{}' is not a size (e.g. 2147483648, 512M, 4G)", flag, text);
  }
  std::string unit = text.substr(used);
  if (unit.size() >= 2 &&
      (unit.substr(unit.size() - 2) == "iB" || unit.substr(unit.size() - 2) == "ib"))
    unit.resize(unit.size() - 2);
  else if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b'))
    unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    DSPARK_CHECK_KIND(invalid_input, unit.empty(), "{}: unknown unit in '{}' (use K, M, G or T)",
                      flag, text);
  }
  const double bytes = value * scale;
  DSPARK_CHECK_KIND(invalid_input, bytes >= 1 && bytes < 1e18, "{}: '{}' is out of range", flag,
                    text);
  return static_cast<size_t>(bytes);
}

int run_serve(ServeArgs& a) {
  server::ServerConfig& c = a.config;
  c.engine.gamma = a.gamma;
  c.engine.draft_policy = parse_draft_policy(a.draft_policy);
  c.engine.cost_cache =
      cost_cache_config(a.cost_cache, c.engine.model_dir, parse_device(c.engine.device));
  c.spec_sampling = *spec_sampling_from_name(a.spec_sampling);
  if (!a.kv_memory.empty()) c.engine.kv_memory = parse_bytes(a.kv_memory, "--kv-memory");
  if (!a.max_body_bytes.empty())
    c.max_body_bytes = parse_bytes(a.max_body_bytes, "--max-body-bytes");
  c.request_timeout = std::chrono::milliseconds(static_cast<int64_t>(a.request_timeout_s * 1000));
  // Testing hook (docs/server.md): fail the first step with this many live rows.
  if (const char* rows = std::getenv("DSPARK_SERVE_FAIL_AT_ROWS"))
    c.engine.fail_at_rows = std::atoi(rows);
  DSPARK_CHECK_KIND(invalid_input, c.engine.ngram.ngram_min <= c.engine.ngram.ngram_max,
                    "--ngram-min ({}) must be <= --ngram-max ({})", c.engine.ngram.ngram_min,
                    c.engine.ngram.ngram_max);

  // SIGINT / SIGTERM: the handler only writes a byte to a pipe (async-signal-safe); a waiter
  // thread reads it and stops the server. (Blocking the signals instead is not enough: OpenBLAS
  // starts its threads before main.)
  DSPARK_CHECK_KIND(io, pipe(g_signal_pipe) == 0, "serve: cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  server::HttpServer srv(c);
  srv.start();
  const server::ServedModel& m = srv.model();
  // CUDA: what stays free once the weights and caches are reserved.
  const std::string free_memory =
      m.total_bytes > 0 ? fmt::format(" ({:.0f} of {:.0f} MiB free)", m.free_bytes / 1048576.0,
                                      m.total_bytes / 1048576.0)
                        : "";
  std::printf(
      "dspark serve: model '%s' on %s, draft %s (gamma %d, %s), max batch %d, max context %d, KV "
      "%d "
      "tokens (%d pages, %.0f MiB), %.0f MiB reserved%s, %s; listening on http://%s:%d\n",
      srv.model_id().c_str(), m.device.c_str(), m.draft_kind.c_str(), m.gamma,
      std::string(draft_policy_name(m.draft_policy)).c_str(), c.engine.max_batch, m.max_context,
      m.kv_tokens, m.kv_pages, static_cast<double>(m.kv_bytes) / (1 << 20),
      static_cast<double>(m.reserved_bytes) / (1 << 20), free_memory.c_str(),
      srv.chat_template_description().c_str(), c.host.c_str(), srv.port());
  std::fflush(stdout);
  for (const std::string& line : m.engine_notices)
    std::fprintf(stderr, "dspark serve: %s\n", line.c_str());
  if (const std::string why = srv.chat_template_error(); !why.empty())
    std::fprintf(stderr,
                 "warning: the chat template could not be loaded (%s): chat requests "
                 "will fail; completions work\n",
                 why.c_str());

  std::thread waiter([&] {
    char byte = 0;
    while (read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    srv.stop();
  });
  const bool ok = srv.run();
  srv.stop();
  on_signal(0);  // wakes the waiter when run() ended by itself
  waiter.join();
  DSPARK_CHECK_KIND(io, ok, "the server stopped listening on {}:{}", c.host, srv.port());
  std::printf("dspark serve: stopped\n");
  return 0;
}

CLI::Validator int_in(int lo, int hi) {
  return CLI::Range(lo, hi);
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  server::ServerConfig& c = args->config;
  CLI::App* sub = app.add_subcommand(
      "serve", "Serve an OpenAI-compatible HTTP API (continuous batching, speculative decoding)");
  sub->add_option("-m,--model", c.engine.model_dir,
                  "Model directory (config.json, safetensors, tokenizer.json)")
      ->required();
  sub->add_option("--draft", c.engine.draft,
                  "Speculative decoding: none, ngram (prompt lookup), mtp (the target's own "
                  "next-token prediction layer: DeepSeek-V3, GLM-4.5, GLM-5), model:DIR or DIR (a "
                  "DFlash/DSpark drafter, or a draft model)")
      ->capture_default_str();
  sub->add_option("--draft-vocab", c.engine.draft_vocab,
                  "A DSpark/DFlash drafter drafts greedy rounds over only these token ids (a JSON "
                  "list, e.g. from tools/train/make_draft_vocab.py)");
  sub->add_flag(
      "--draft-fp8", c.engine.draft_fp8,
      "A DSpark/DFlash drafter's projections and LM head in FP8 (E4M3, per-row scales; CUDA, "
      "bf16): about half the bytes per draft step, same output (the target verifies)");
  sub->add_option("--gamma", args->gamma,
                  "Drafted tokens per round at most (default: the drafter's block, else 4)")
      ->check(int_in(0, 64));
  add_draft_policy_option(sub, args->draft_policy);
  add_exact_option(sub, c.engine.exact);
  add_cost_cache_options(sub, args->cost_cache);
  add_spec_sampling_option(sub, args->spec_sampling)
      ->description(
          "Default for requests without \"spec_sampling\": coupled (the same seed gives the "
          "same text as without a drafter) or rejection (speculative sampling: often more drafts "
          "accepted, but the text depends on the drafter)");
  sub->add_option("--ngram-min", c.engine.ngram.ngram_min, "Prompt lookup: shortest n-gram")
      ->check(int_in(1, 64))
      ->capture_default_str();
  sub->add_option("--ngram-max", c.engine.ngram.ngram_max, "Prompt lookup: longest n-gram")
      ->check(int_in(1, 64))
      ->capture_default_str();
  sub->add_option("--host", c.host, "Address to listen on")->capture_default_str();
  sub->add_option("--port", c.port, "Port to listen on (0: any free port, printed at start)")
      ->check(int_in(0, 65535))
      ->capture_default_str();
  sub->add_option("--max-batch", c.engine.max_batch, "Requests decoded together at most")
      ->check(int_in(1, 4096))
      ->capture_default_str();
  sub->add_option("--max-queue", c.engine.max_queue,
                  "Requests waiting for admission at most; more get 503")
      ->check(int_in(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--max-context", c.engine.max_context,
                  "Prompt + completion tokens per request at most (default: the model's "
                  "max_position_embeddings)")
      ->check(int_in(2, 1 << 24));
  sub->add_option("--kv-memory", args->kv_memory,
                  "Target KV cache size in bytes (K/M/G/T suffixes: 512M, 4G; default: room for "
                  "--max-batch full-context requests, at most 16384 tokens on the CPU and on CUDA "
                  "the memory free after the weights less max(1 GiB, 10%), halved when a drafter "
                  "keeps its own cache; at least one full-context request)");
  sub->add_option("--max-body-bytes", args->max_body_bytes,
                  "Largest request body (K/M/G suffixes); larger ones get 413 before they are read "
                  "(default 8M)");
  sub->add_option("--request-timeout", args->request_timeout_s,
                  "Seconds a client has to send a request's head and body, counted from its first "
                  "byte; slower connections are dropped (408)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  sub->add_option("--http-threads", c.http_threads,
                  "HTTP worker threads, each serving one request at a time (default: max-batch + "
                  "max-queue + 16); idle and slow connections hold none")
      ->check(int_in(1, 1 << 16));
  sub->add_flag("!--no-prefix-cache", c.engine.prefix_cache,
                "Recompute every prompt instead of reusing the target KV of prompt prefixes seen "
                "before (reuse is off anyway with DFlash/DSpark drafters, which need the target's "
                "hidden states of every prompt token)");
  sub->add_option("--api-key", c.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (also $DSPARK_API_KEY)")
      ->envname("DSPARK_API_KEY");
  sub->add_option("--served-model-name", c.model_name,
                  "The model id clients send (default: the model directory's name)");
  sub->add_option("--device", c.engine.device, "cpu, cuda or cuda:N")->capture_default_str();
  return [args] { return run_serve(*args); };
}

}  // namespace dspark::cli
