#include "error_checks.h"

#include <gtest/gtest.h>

namespace dspark::test {

std::string error_of(const std::function<void()>& f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no dspark::Error thrown";
  return "";
}

void expect_mentions(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " in: " << msg;
}

}  // namespace dspark::test
