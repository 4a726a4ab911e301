#include "dspark/server/connection_watch.h"

#if defined(__linux__)
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#endif

namespace dspark::server {

#if defined(__linux__)
namespace {

// The numeric IP and port of a socket address, as cpp-httplib reports them.
bool ip_and_port(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  char host[NI_MAXHOST] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  ip = host;
  return true;
}

bool matches(int fd, const std::string& local_ip, int local_port, const std::string& remote_ip,
             int remote_port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  std::string ip;
  int port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (!ip_and_port(addr, len, ip, port) || port != local_port || ip != local_ip) return false;
  len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  return ip_and_port(addr, len, ip, port) && port == remote_port && ip == remote_ip;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const std::string& local_ip, int local_port,
                                 const std::string& remote_ip, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (matches(static_cast<int>(fd), local_ip, local_port, remote_ip, remote_port)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool ConnectionWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

#else

ConnectionWatch::ConnectionWatch(const std::string&, int, const std::string&, int) {}
bool ConnectionWatch::closed() const {
  return false;
}

#endif

}  // namespace dspark::server
