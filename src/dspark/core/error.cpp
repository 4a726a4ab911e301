#include "dspark/core/error.h"

namespace dspark {

Error::Error(ErrorKind kind, std::string message, std::string expression, const char* file,
             int line)
    : std::runtime_error(std::move(message)),
      kind_(kind),
      expression_(std::move(expression)),
      file_(file),
      line_(line) {}

std::string Error::detailed() const {
  if (expression_.empty()) return fmt::format("{} (at {}:{})", what(), file_, line_);
  return fmt::format("{} (check `{}` failed at {}:{})", what(), expression_, file_, line_);
}

namespace detail {
void fail(ErrorKind kind, const char* expression, const char* file, int line,
          std::string message) {
  if (message.empty()) message = fmt::format("check failed: {}", expression);
  throw Error(kind, std::move(message), expression, file, line);
}
}  // namespace detail

}  // namespace dspark
