// The names of the speculative sampling modes (SpecSampling, backend/op_params.h) that the CLI's
// --spec-sampling and the server's "spec_sampling" field accept.
#pragma once

#include <optional>
#include <string_view>

#include "dspark/backend/op_params.h"

namespace dspark {

inline constexpr const char* kSpecSamplingNames = "coupled, rejection";

std::string_view spec_sampling_name(SpecSampling mode);
// nullopt for any other name.
std::optional<SpecSampling> spec_sampling_from_name(std::string_view name);

}  // namespace dspark
