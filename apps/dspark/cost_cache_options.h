// --cost-cache DIR / --no-cost-cache of the commands that take --draft-policy: where the adaptive
// policy's verify cost profile is cached (engine/verify_cost_cache.h).
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "dspark/core/device.h"
#include "dspark/engine/verify_cost_cache.h"

namespace dspark::cli {

struct CostCacheArgs {
  std::string dir;   // --cost-cache (empty: the default directory)
  bool off = false;  // --no-cost-cache
};

void add_cost_cache_options(CLI::App* sub, CostCacheArgs& args);

// The cache of an engine on `device` for the target at `model`: dir empty with --no-cost-cache
// (or when neither XDG_CACHE_HOME nor HOME is set and --cost-cache is not given).
VerifyCostCacheConfig cost_cache_config(const CostCacheArgs& args,
                                        const std::filesystem::path& model, Device device);

}  // namespace dspark::cli
