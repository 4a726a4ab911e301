#include "dspark/engine/spec_sampling.h"

namespace dspark {

std::string_view spec_sampling_name(SpecSampling mode) {
  return mode == SpecSampling::coupled ? "coupled" : "rejection";
}

std::optional<SpecSampling> spec_sampling_from_name(std::string_view name) {
  if (name == "coupled") return SpecSampling::coupled;
  if (name == "rejection") return SpecSampling::rejection;
  return std::nullopt;
}

}  // namespace dspark
