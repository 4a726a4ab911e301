#include "dspark/model/exact_numerics.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dspark/core/quant.h"

namespace dspark {

std::vector<std::string> batch_invariance_gaps(const Model& model) {
  std::vector<std::string> gaps;
  const WeightMatrix head = model.lm_head();
  if (head.format == WeightFormat::blocks || head.format == WeightFormat::blocks_x8)
    gaps.push_back(fmt::format("{} weights", quant_type_name(head.quant)));
  return gaps;
}

std::string exact_notice(const Model& model) {
  const std::vector<std::string> gaps = batch_invariance_gaps(model);
  if (gaps.empty()) return {};
  return fmt::format(
      "--exact does not cover these yet on CUDA: {}; speculative output may still differ from "
      "plain decoding",
      fmt::join(gaps, ", "));
}

}  // namespace dspark
