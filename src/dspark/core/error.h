// One error reporter for every check in dspark: DSPARK_CHECK records the failed expression, the
// file and line, and a formatted message, and throws dspark::Error. CUDA/cuBLAS checks in the CUDA
// backend report through the same function (see backend/cuda/check.h).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dspark {

// What kind of failure, so callers (CLI, server) can map errors to exit codes / HTTP statuses.
enum class ErrorKind {
  internal,      // a broken invariant inside dspark
  invalid_input, // bad user input: flags, request fields, prompt
  io,            // missing/corrupt files, unsupported formats
  unsupported,   // a valid request dspark cannot serve (architecture, dtype, built without CUDA)
  device,        // CUDA / cuBLAS runtime failure
  out_of_memory,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, std::string expression = {}, const char* file = "",
        int line = 0);

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& expression() const noexcept { return expression_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  // "message (expression at file:line)" for logs; what() is the message alone, fit for users.
  std::string detailed() const;

 private:
  ErrorKind kind_;
  std::string expression_;
  const char* file_;
  int line_;
};

namespace detail {
[[noreturn]] void fail(ErrorKind kind, const char* expression, const char* file, int line,
                       std::string message);

inline std::string check_message() { return {}; }
template <typename... Args>
std::string check_message(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}
}  // namespace detail

}  // namespace dspark

// DSPARK_CHECK(cond, "format {}", args...): an internal invariant / argument check.
#define DSPARK_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::dspark::detail::fail(::dspark::ErrorKind::internal, #cond, __FILE__, __LINE__,      \
                             ::dspark::detail::check_message(__VA_ARGS__));                 \
  } while (0)

// DSPARK_CHECK_KIND(kind, cond, "format {}", args...): a check whose failure has a specific kind.
#define DSPARK_CHECK_KIND(kind, cond, ...)                                                  \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::dspark::detail::fail(::dspark::ErrorKind::kind, #cond, __FILE__, __LINE__,          \
                             ::dspark::detail::check_message(__VA_ARGS__));                 \
  } while (0)

// DSPARK_FAIL(kind, "format {}", args...): unconditional failure of a given kind.
#define DSPARK_FAIL(kind, ...)                                                              \
  ::dspark::detail::fail(::dspark::ErrorKind::kind, "", __FILE__, __LINE__,                 \
                         ::dspark::detail::check_message(__VA_ARGS__))
