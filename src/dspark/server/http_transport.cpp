#include "dspark/server/http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

namespace dspark::server {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr size_t kReadChunk = size_t{64} << 10;
constexpr auto kLinger = 2s;           // a refused connection's unread input is drained this long
constexpr auto kPollerTick = 100ms;    // deadlines are checked this often
constexpr auto kDrainOnShutdown = 2s;  // responses in flight get this long to finish at shutdown

// Set by the response logger when the response carries "Connection: close".
thread_local bool tl_close_after = false;

int ms_until(Clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 86'400'000));
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Error";
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ip.clear();
  port = 0;
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

// What the head of the next buffered request says about its framing.
struct Head {
  size_t head_bytes = 0;  // request line and headers, with the blank line
  size_t body_bytes = 0;  // Content-Length (0 without)
  bool chunked = false;   // Transfer-Encoding: the body's end is found by the parser
  bool expect_continue = false;
  std::string path;
  int reject_status = 0;  // non-zero: refuse the request with this status
  std::string reject_message;
};

// The end of the head (after its blank line) in `data`, or npos while incomplete.
size_t head_end(std::string_view data) {
  for (size_t i = data.find('\n'); i != std::string_view::npos; i = data.find('\n', i + 1)) {
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

Head parse_head(std::string_view head, size_t max_body_bytes) {
  Head h;
  h.head_bytes = head.size();
  const size_t line_end = head.find('\n');
  const std::string_view request_line = trim(head.substr(0, line_end));
  if (const size_t sp = request_line.find(' '); sp != std::string_view::npos) {
    const std::string_view rest = request_line.substr(sp + 1);
    h.path = std::string(rest.substr(0, rest.find(' ')));
  }
  std::optional<std::string_view> length;
  bool transfer_encoding = false;
  for (size_t pos = line_end + 1; pos < head.size();) {
    size_t next = head.find('\n', pos);
    if (next == std::string_view::npos) next = head.size();
    const std::string_view line = head.substr(pos, next - pos);
    pos = next + 1;
    if (trim(line).empty()) continue;  // the blank line that ends the head
    const size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    // Folded lines and names with whitespace are read differently by different parsers (a
    // request-smuggling shape): RFC 9112 says to refuse them.
    if (colon == std::string_view::npos || name.empty() || trim(name) != name ||
        name.find(' ') != std::string_view::npos) {
      h.reject_status = 400;
      h.reject_message = fmt::format("Malformed header line '{}'.", trim(line.substr(0, 80)));
      return h;
    }
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      if (length && *length != value) {
        h.reject_status = 400;
        h.reject_message =
            fmt::format("Conflicting Content-Length headers ('{}' and '{}').", *length, value);
        return h;
      }
      length = value;
    } else if (iequals(name, "Transfer-Encoding")) {
      transfer_encoding = true;
    } else if (iequals(name, "Expect") && iequals(value, "100-continue")) {
      h.expect_continue = true;
    }
  }
  if (length && transfer_encoding) {
    h.reject_status = 400;
    h.reject_message = "A request must not have both Content-Length and Transfer-Encoding.";
    return h;
  }
  h.chunked = transfer_encoding;
  if (length) {
    const bool digits =
        !length->empty() && length->size() <= 18 &&
        std::all_of(length->begin(), length->end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      h.reject_status = 400;
      h.reject_message = fmt::format("Invalid Content-Length '{}'.", length->substr(0, 40));
      return h;
    }
    h.body_bytes = std::stoull(std::string(*length));
    if (h.body_bytes > max_body_bytes) {
      h.reject_status = 413;
      h.reject_message = fmt::format(
          "The request body ({} bytes) is larger than the server's limit of {} bytes "
          "(--max-body-bytes).",
          h.body_bytes, max_body_bytes);
    }
  }
  return h;
}

}  // namespace

struct HttpTransport::Conn {
  explicit Conn(int s) : fd(s) {}
  ~Conn() { ::close(fd); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  const int fd;
  std::string buf;  // received, unread bytes are buf[pos..]
  size_t pos = 0;
  Clock::time_point idle_since = Clock::now();
  std::optional<Clock::time_point> request_start;  // the current request's first byte
  bool lingering = false;  // refused: drain input until EOF or linger_until, then close
  Clock::time_point linger_until;
  // The request handed to a worker.
  size_t expected = 0;   // its head + body bytes (when known)
  size_t delivered = 0;  // bytes the parser read of it
  bool must_close = false;

  size_t unread() const { return buf.size() - pos; }
  void compact() {
    buf.erase(0, pos);
    pos = 0;
  }
  Clock::time_point deadline(const TransportConfig& c) const {
    if (lingering) return linger_until;
    if (request_start) return *request_start + c.request_timeout;
    return idle_since + c.idle_timeout;
  }
};

// httplib's parser reads the request through this: buffered bytes first, then the socket, all
// within the request's deadline.
class HttpTransport::ConnStream final : public httplib::Stream {
 public:
  ConnStream(Conn& c, Clock::time_point deadline, std::chrono::milliseconds write_timeout)
      : c_(c), deadline_(deadline), write_timeout_(write_timeout) {}

  bool is_readable() const override {
    if (c_.unread() > 0) return true;
    pollfd p{c_.fd, POLLIN, 0};
    return poll(&p, 1, ms_until(deadline_)) > 0;
  }
  bool is_writable() const override {
    pollfd p{c_.fd, POLLOUT, 0};
    return poll(&p, 1, static_cast<int>(write_timeout_.count())) > 0 &&
           (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (c_.unread() == 0) {
      c_.buf.clear();
      c_.pos = 0;
      pollfd p{c_.fd, POLLIN, 0};
      if (poll(&p, 1, ms_until(deadline_)) <= 0) return -1;  // the request's time is up
      c_.buf.resize(kReadChunk);
      const ssize_t n = recv(c_.fd, c_.buf.data(), kReadChunk, MSG_DONTWAIT);
      c_.buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
      if (n <= 0) return n == 0 ? 0 : -1;
    }
    const size_t n = std::min(size, c_.unread());
    std::memcpy(ptr, c_.buf.data() + c_.pos, n);
    c_.pos += n;
    c_.delivered += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    for (;;) {
      const ssize_t n = send(c_.fd, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      if (!is_writable()) return -1;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(c_.fd, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(c_.fd, false, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

 private:
  Conn& c_;
  Clock::time_point deadline_;
  std::chrono::milliseconds write_timeout_;
};

// The epoll thread holding connections between requests, and the workers that serve requests.
class HttpTransport::Poller {
 public:
  Poller(HttpTransport& t, const TransportConfig& config, RejectBody reject)
      : t_(t),
        config_(config),
        reject_(std::move(reject)),
        pool_(static_cast<size_t>(std::max(1, config.threads))) {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    wakefd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wakefd_;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, wakefd_, &ev);
    thread_ = std::thread([this] { loop(); });
  }
  ~Poller() {
    stop();
    ::close(epfd_);
    ::close(wakefd_);
  }

  // A connection that waits for its next request (new, or after a response).
  void adopt(std::shared_ptr<Conn> c) {
    std::lock_guard lock(mu_);
    if (stopped_) return;  // closes it
    c->idle_since = Clock::now();
    c->request_start.reset();
    if (c->unread() > 0) c->request_start = c->idle_since;  // pipelined
    watch(std::move(c));
  }

  // The worker is done with a connection that must not serve another request.
  void retire(std::shared_ptr<Conn> c) {
    std::lock_guard lock(mu_);
    busy_.erase(c.get());
    idle_cv_.notify_all();
    if (stopped_) return;
    refuse_more(std::move(c));
  }

  void finished(std::shared_ptr<Conn> c) {
    {
      std::lock_guard lock(mu_);
      busy_.erase(c.get());
    }
    idle_cv_.notify_all();
    adopt(std::move(c));
  }

  // Waits until no request is being served, or `timeout` passed.
  void wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    idle_cv_.wait_for(lock, timeout, [&] { return busy_.empty(); });
  }

  void stop() {
    std::call_once(stop_once_, [&] {
      {
        std::lock_guard lock(mu_);
        stopped_ = true;
        for (Conn* c : busy_) ::shutdown(c->fd, SHUT_RD);  // reads in flight end now
        waiting_.clear();
      }
      const uint64_t one = 1;
      if (::write(wakefd_, &one, sizeof one) < 0) {
      }
      thread_.join();
      pool_.shutdown();
    });
  }

 private:
  // Under mu_: registers a connection with epoll and acts on what it has buffered.
  void watch(std::shared_ptr<Conn> c) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = c->fd;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd, &ev);
    Conn& ref = *c;
    waiting_[c->fd] = std::move(c);
    if (ref.unread() > 0) decide(ref);
  }

  // Under mu_: stop reading requests: answer nothing more, drain input for a while, close.
  void refuse_more(std::shared_ptr<Conn> c) {
    ::shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    c->linger_until = Clock::now() + kLinger;
    c->buf.clear();
    c->pos = 0;
    if (waiting_.count(c->fd) == 0) watch(std::move(c));
  }

  // Under mu_: answers a request with an error and closes its connection.
  void reject(Conn& c, int status, const std::string& message, const std::string& path) {
    const std::string body = reject_(status, message, path);
    const std::string response = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
        "Connection: close\r\n\r\n{}",
        status, reason_phrase(status), body.size(), body);
    // Best effort: a small response fits a fresh socket's send buffer.
    if (send(c.fd, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
    }
    refuse_more(waiting_.at(c.fd));
  }

  void drop(int fd) {
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);
    waiting_.erase(fd);
  }

  // Under mu_: hands a complete request to a worker, refuses it, or keeps waiting.
  void decide(Conn& c) {
    if (c.lingering || c.unread() == 0) return;
    const std::string_view data(c.buf.data() + c.pos, c.unread());
    const size_t end = head_end(data);
    if (end == std::string_view::npos) {
      if (data.size() > kMaxHeadBytes)
        reject(c, 431, fmt::format("The request head is larger than {} bytes.", kMaxHeadBytes), "");
      return;
    }
    const Head h = parse_head(data.substr(0, end), config_.max_body_bytes);
    if (h.reject_status != 0) {
      reject(c, h.reject_status, h.reject_message, h.path);
      return;
    }
    // Small bodies arrive here too, so a slow sender holds no worker.
    if (!h.chunked && !h.expect_continue && h.body_bytes <= kBufferedBodyBytes &&
        data.size() < end + h.body_bytes)
      return;
    c.expected = end + h.body_bytes;
    c.delivered = 0;
    c.must_close = h.chunked;
    c.compact();
    std::shared_ptr<Conn> conn = waiting_.at(c.fd);
    drop(c.fd);
    busy_.insert(conn.get());
    pool_.enqueue([this, conn = std::move(conn)]() mutable { t_.serve_one(std::move(conn)); });
  }

  void on_event(int fd, uint32_t events) {
    auto it = waiting_.find(fd);
    if (it == waiting_.end()) return;
    Conn& c = *it->second;
    char chunk[16384];
    ssize_t n = recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    while (c.lingering && n > 0) n = recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);  // discard
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
        (n < 0 && (events & (EPOLLERR | EPOLLHUP)))) {
      drop(fd);  // the client went away (or is done reading a refusal)
      return;
    }
    if (n < 0 || c.lingering) return;
    if (c.unread() == 0) {
      c.compact();
      c.request_start = Clock::now();
    }
    c.buf.append(chunk, static_cast<size_t>(n));
    decide(c);
  }

  void expire() {
    const Clock::time_point now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : waiting_)
      if (c->deadline(config_) <= now) late.push_back(fd);
    for (const int fd : late) {
      Conn& c = *waiting_.at(fd);
      if (c.lingering || c.unread() == 0) {
        drop(fd);
      } else {
        reject(c, 408,
               fmt::format("The request did not arrive within {} s.",
                           std::chrono::duration<double>(config_.request_timeout).count()),
               "");
      }
    }
  }

  void loop() {
    std::vector<epoll_event> events(256);
    for (;;) {
      const int n = epoll_wait(epfd_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(kPollerTick.count()));
      std::lock_guard lock(mu_);
      if (stopped_) return;
      for (int i = 0; i < n; ++i)
        if (events[i].data.fd != wakefd_) on_event(events[i].data.fd, events[i].events);
      expire();
    }
  }

  HttpTransport& t_;
  const TransportConfig& config_;
  RejectBody reject_;
  std::mutex mu_;
  std::condition_variable idle_cv_;
  bool stopped_ = false;
  std::unordered_map<int, std::shared_ptr<Conn>> waiting_;
  std::unordered_set<Conn*> busy_;
  int epfd_ = -1, wakefd_ = -1;
  std::thread thread_;
  httplib::ThreadPool pool_;
  std::once_flag stop_once_;
};

HttpTransport::HttpTransport(TransportConfig config, RejectBody reject)
    : config_(std::move(config)) {
  poller_ = std::make_unique<Poller>(*this, config_, std::move(reject));
  // The library's own pool only hands accepted sockets to the poller.
  new_task_queue = [] { return new httplib::ThreadPool(1); };
  set_keep_alive_timeout(std::max<time_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(config_.idle_timeout).count()));
  set_keep_alive_max_count(1'000'000);
  set_payload_max_length(config_.max_body_bytes);
  set_response_logger(nullptr);
}

HttpTransport::~HttpTransport() {
  shutdown();
}

int HttpTransport::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  // The library listens with a backlog of 5: bursts of connects would be dropped (SYN retries).
  if (bound >= 0 && ::listen(svr_sock_, kListenBacklog) != 0) return -1;
  return bound;
}

void HttpTransport::set_response_logger(httplib::Logger logger) {
  set_logger(
      [logger = std::move(logger)](const httplib::Request& req, const httplib::Response& res) {
        if (res.get_header_value("Connection") == "close") tl_close_after = true;
        if (logger) logger(req, res);
      });
}

void HttpTransport::shutdown() {
  // Responses in flight finish first (a stream's last events included): the library ends a
  // chunked response early once the server is stopped.
  poller_->wait_idle(kDrainOnShutdown);
  close_listener();  // the accept loop
  poller_->stop();
}

void HttpTransport::close_listener() {
  // The library's stop() does nothing until listen_after_bind() has marked the server running,
  // so a stop that came first (a signal right after start-up) would leave the accept loop
  // running forever. With the socket closed here that loop ends at once, or never starts.
  const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
  if (sock == INVALID_SOCKET) return;
  ::shutdown(sock, SHUT_RDWR);  // wakes an accept() in progress
  ::close(sock);
}

bool HttpTransport::process_and_close_socket(socket_t sock) {
  const int one = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  poller_->adopt(std::make_shared<Conn>(sock));
  return true;
}

void HttpTransport::serve_one(std::shared_ptr<Conn> conn) {
  const Clock::time_point deadline =
      conn->request_start.value_or(Clock::now()) + config_.request_timeout;
  ConnStream stream(*conn, deadline, config_.write_timeout);
  tl_close_after = false;
  bool closed = false;
  const bool ok = process_request(stream, !is_running(), closed, {});
  const bool keep = ok && !closed && !tl_close_after && !conn->must_close &&
                    conn->delivered == conn->expected && is_running();
  if (keep) {
    poller_->finished(std::move(conn));
  } else {
    poller_->retire(std::move(conn));
  }
}

}  // namespace dspark::server
