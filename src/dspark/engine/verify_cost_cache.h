// An on-disk cache of the verify cost profile (engine/verify_cost.h): an engine with the adaptive
// draft policy loads the profile a previous start measured for the same model, device and shape
// instead of profiling again. One small JSON file per key in the cache directory
// ($XDG_CACHE_HOME/dspark/verify-cost/, else ~/.cache/dspark/verify-cost/): the key in full, the
// points and how they were measured. A file is used only when its key equals the engine's in every
// field, so a changed model, device, build or shape is a miss, never a stale profile. Files are
// written atomically (a temporary file renamed over the old one); an unreadable or malformed file
// is reported (one line) and measured again; an unwritable directory is reported and skipped.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "dspark/engine/verify_cost.h"

namespace dspark {

// Bumped whenever the file layout or the way profiles are measured changes.
inline constexpr int kVerifyCostCacheFormat = 1;

// Where an engine looks for and stores its profile (SpecConfig::cost_cache).
struct VerifyCostCacheConfig {
  std::filesystem::path dir;    // empty: no cache (neither read nor written)
  std::filesystem::path model;  // the target's checkpoint (directory or file) as loaded
  // CUDA: the device's name and compute capability (e.g. "NVIDIA H200 sm_90"; required for a
  // cache on CUDA, where the engine cannot ask the runtime itself). Empty on the CPU.
  std::string accelerator;
};

// Everything a verify cost profile depends on. Two profiles may be exchanged iff their keys are
// equal.
struct VerifyCostKey {
  int format = kVerifyCostCacheFormat;
  std::string build;    // the running executable (build_identity): kernels change with it
  std::string model;    // model_identity of the target's checkpoint
  std::string device;   // "cpu" or "cuda:N"
  std::string machine;  // CPU: cpu_identity; CUDA: VerifyCostCacheConfig::accelerator
  int threads = 0;      // CPU kernel threads (the context's pool); 0 on CUDA
  std::string dtype;    // the target's activation (engine) dtype
  bool cuda_graphs = false;
  bool exact = false;  // CUDA batch-invariant numerics (Tuning::batch_invariant): other kernels
  int page_size = 0;   // target KV page size
  std::vector<int> taps;
  int max_rows = 0;
  int width = 0;        // tokens per row (gamma + 1)
  double budget_s = 0;  // profile_verify_cost's budget
  nlohmann::json to_json() const;
  bool operator==(const VerifyCostKey&) const = default;
};

// The checkpoint's identity without reading its weights (hashing gigabytes would cost more than
// the profile): the resolved path and, for a file, its size and modification time; for a
// directory, those of config.json and every weight file in it (*.safetensors, *.gguf, *.bin and
// their index files). Re-downloading, converting or editing the checkpoint changes it.
std::string model_identity(const std::filesystem::path& model);
// The CPU: its model name (/proc/cpuinfo) and the instruction-set extensions the kernels use.
std::string cpu_identity();
// The running executable: its resolved path, size and modification time (a rebuilt or upgraded
// dspark has other kernels). Empty when /proc/self/exe cannot be read.
std::string build_identity();

// $XDG_CACHE_HOME/dspark/verify-cost, else $HOME/.cache/dspark/verify-cost; empty when neither
// variable is set.
std::filesystem::path default_verify_cost_cache_dir();

// The file of `key` in `dir`: a hash of the key, ".json".
std::filesystem::path verify_cost_cache_file(const std::filesystem::path& dir,
                                             const VerifyCostKey& key);

using CacheLog = std::function<void(std::string_view)>;

// The profile stored for `key` in `dir` (VerifyCostProfile::loaded_from set), or nullopt: no file,
// a file of another key, or one that cannot be read or parsed (then one line to `log`).
std::optional<VerifyCostProfile> load_verify_cost(const std::filesystem::path& dir,
                                                  const VerifyCostKey& key, const CacheLog& log);
// Writes `profile` for `key` into `dir` (created when missing) atomically; on failure one line to
// `log` and nothing else. Returns whether the file was written.
bool store_verify_cost(const std::filesystem::path& dir, const VerifyCostKey& key,
                       const VerifyCostProfile& profile, const CacheLog& log);

}  // namespace dspark
