// dspark serve's connection layer (server/http_transport.h): a shutdown that comes before the
// accept loop starts (SIGTERM right after start-up) must still end it.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "dspark/server/http_transport.h"

namespace dspark::server {
namespace {

using namespace std::chrono_literals;

TEST(ServeTransport, ShutdownBeforeListenEndsTheAcceptLoop) {
  TransportConfig c;
  c.threads = 1;
  HttpTransport t(c, [](int, const std::string& m, const std::string&) { return m; });
  ASSERT_GT(t.bind("127.0.0.1", 0), 0);
  t.shutdown();
  auto listening = std::async(std::launch::async, [&] { return t.listen_after_bind(); });
  const bool ended = listening.wait_for(10s) == std::future_status::ready;
  if (!ended) t.stop();  // the library's own stop works once the loop runs
  ASSERT_TRUE(ended) << "listen_after_bind() still accepting 10 s after shutdown()";
  EXPECT_TRUE(listening.get());
}

TEST(ServeTransport, ShutdownWhileListeningEndsTheAcceptLoop) {
  TransportConfig c;
  c.threads = 1;
  HttpTransport t(c, [](int, const std::string& m, const std::string&) { return m; });
  ASSERT_GT(t.bind("127.0.0.1", 0), 0);
  auto listening = std::async(std::launch::async, [&] { return t.listen_after_bind(); });
  for (int i = 0; i < 10'000 && !t.is_running(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(t.is_running());
  t.shutdown();
  ASSERT_EQ(listening.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(listening.get());
  t.shutdown();  // idempotent
}

}  // namespace
}  // namespace dspark::server
