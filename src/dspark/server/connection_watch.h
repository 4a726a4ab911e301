// Whether the client of a request that is being handled has gone away, for responses that are
// not streamed (a streamed response notices through its writes). cpp-httplib 0.11 does not hand
// the connection's socket to handlers, so the watch finds it among the process's descriptors by
// its address pair (local and remote IP and port, unique among live TCP connections) and then
// polls it for a hang-up. Linux only; elsewhere (or when the socket is not found) closed() is
// always false and the request simply runs to completion.
#pragma once

#include <string>

namespace dspark::server {

class ConnectionWatch {
 public:
  ConnectionWatch(const std::string& local_ip, int local_port, const std::string& remote_ip,
                  int remote_port);
  // True once the peer has closed or reset the connection.
  bool closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;  // not owned: the HTTP library closes it after the handler returns
};

}  // namespace dspark::server
