#include "cost_cache_options.h"

#include <fmt/format.h>

#include "dspark/backend/cuda/runtime.h"

namespace dspark::cli {

void add_cost_cache_options(CLI::App* sub, CostCacheArgs& args) {
  auto* dir = sub->add_option("--cost-cache", args.dir,
                              "Directory of the cached verify cost profiles of --draft-policy "
                              "adaptive (default: $XDG_CACHE_HOME/dspark/verify-cost, else "
                              "~/.cache/dspark/verify-cost)");
  sub->add_flag("--no-cost-cache", args.off,
                "Profile the verify cost at every start: neither read nor write the cache")
      ->excludes(dir);
}

VerifyCostCacheConfig cost_cache_config(const CostCacheArgs& args,
                                        const std::filesystem::path& model, Device device) {
  VerifyCostCacheConfig c;
  if (args.off) return c;
  c.dir = args.dir.empty() ? default_verify_cost_cache_dir() : std::filesystem::path(args.dir);
  c.model = model;
  if (device.is_cuda()) {
    cuda::require_device(device.index);
    const cuda::DeviceInfo info = cuda::device_info(device.index);
    c.accelerator = fmt::format("{} sm_{}{} ({} SMs, {} MiB)", info.name, info.major, info.minor,
                                info.sm_count, info.total_memory >> 20);
  }
  return c;
}

}  // namespace dspark::cli
