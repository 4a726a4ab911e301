#include "dspark/core/device.h"

#include <fmt/format.h>

#include "dspark/core/error.h"

namespace dspark {

std::string Device::name() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string rest = text.substr(5);
    DSPARK_CHECK_KIND(invalid_input,
                      !rest.empty() && rest.size() < 4 &&
                          rest.find_first_not_of("0123456789") == std::string::npos,
                      "bad device '{}': expected cpu, cuda or cuda:N", text);
    return Device::cuda(std::stoi(rest));
  }
  DSPARK_FAIL(invalid_input, "bad device '{}': expected cpu, cuda or cuda:N", text);
}

}  // namespace dspark
