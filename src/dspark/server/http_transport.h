// The connection layer of `dspark serve`: cpp-httplib 0.11 parses requests and routes them, this
// class owns the connections. Left to itself the library listens with a backlog of 5, gives every
// connection a worker thread for its whole life (a client that sends one byte per second holds
// one forever: its timeout is per recv), skips a body over the limit by reading all of it, accepts
// conflicting Content-Length headers and drops pipelined requests. Here instead:
//   - the listening socket's backlog is kListenBacklog (the kernel caps it at net.core.somaxconn);
//   - one poller thread (epoll) holds every connection that is idle between requests or still
//     sending its request head (and a body of up to kBufferedBodyBytes): slow and idle clients
//     cost no worker thread, so /health and new requests are served however many there are;
//   - a request is checked before any worker sees it: conflicting or invalid Content-Length, or
//     Content-Length with Transfer-Encoding -> 400; Content-Length over max_body_bytes -> 413
//     without reading the body; a head over kMaxHeadBytes -> 431. Each closes the connection;
//   - a request must arrive whole (head and body) within request_timeout of its first byte, else
//     the connection is closed (408 when the head was incomplete); an idle keep-alive connection
//     is closed after idle_timeout;
//   - pipelined requests are answered in order, one at a time; a connection is closed after a
//     response whose request body the handler did not read whole, or that says Connection: close.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace dspark::server {

inline constexpr int kListenBacklog = 4096;
inline constexpr size_t kMaxHeadBytes = size_t{64} << 10;
inline constexpr size_t kBufferedBodyBytes = size_t{256} << 10;

struct TransportConfig {
  int threads = 16;  // worker threads (each serves one request at a time)
  size_t max_body_bytes = size_t{8} << 20;
  std::chrono::milliseconds request_timeout{30'000};  // a request's head and body, in total
  std::chrono::milliseconds idle_timeout{5'000};      // a keep-alive connection between requests
  std::chrono::milliseconds write_timeout{5'000};     // a write that makes no progress
};

// Turns a refusal made before routing (status, message, request path) into a JSON body; also the
// place to count it.
using RejectBody =
    std::function<std::string(int status, const std::string& message, const std::string& path)>;

class HttpTransport : public httplib::Server {
 public:
  HttpTransport(TransportConfig config, RejectBody reject);
  ~HttpTransport() override;

  // Binds (port 0: any free port) and raises the listen backlog; the port, or -1.
  int bind(const std::string& host, int port);
  // Like Server::set_logger; the connection layer also reads each response's Connection header.
  void set_response_logger(httplib::Logger logger);
  // Lets the requests being served finish (up to 2 s), then stops accepting, closes idle
  // connections, ends reads still in flight and joins the workers. Thread-safe, idempotent; called
  // before listen_after_bind(), that call returns at once.
  void shutdown();

 private:
  struct Conn;
  class ConnStream;
  class Poller;

  bool process_and_close_socket(socket_t sock) override;
  void close_listener();
  void serve_one(std::shared_ptr<Conn> conn);

  TransportConfig config_;
  std::unique_ptr<Poller> poller_;
};

}  // namespace dspark::server
