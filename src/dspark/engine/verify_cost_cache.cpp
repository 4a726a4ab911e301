#include "dspark/engine/verify_cost_cache.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dspark {
namespace fs = std::filesystem;
namespace {

// "<size> <modification time, ns since 1970>" of a file, or "missing" when it cannot be stat'ed.
std::string stamp(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) return "missing";
  const auto mtime = fs::last_write_time(file, ec);
  if (ec) return "missing";
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::file_clock::to_sys(mtime).time_since_epoch());
  return fmt::format("{} {}", size, ns.count());
}

bool is_weight_file(const std::string& name) {
  auto ends_with = [&](std::string_view tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail.data(), tail.size()) == 0;
  };
  return name == "config.json" || ends_with(".safetensors") || ends_with(".gguf") ||
         ends_with(".bin") || ends_with(".index.json");
}

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// Why `points` are not a profile's points (empty when they are).
std::string check_points(const nlohmann::json& points) {
  if (!points.is_array() || points.empty()) return "no points";
  int last = 0;
  for (const auto& p : points) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number())
      return "a point is not [tokens, ms]";
    const int n = p[0].get<int>();
    const double ms = p[1].get<double>();
    if (n <= last) return "the points' tokens do not ascend";
    if (!std::isfinite(ms) || ms < 0) return "a point's time is not a finite, non-negative number";
    last = n;
  }
  return {};
}

}  // namespace

nlohmann::json VerifyCostKey::to_json() const {
  return {{"format", format},   {"build", build},
          {"model", model},     {"device", device},
          {"machine", machine}, {"threads", threads},
          {"dtype", dtype},     {"cuda_graphs", cuda_graphs},
          {"exact", exact},     {"page_size", page_size},
          {"taps", taps},       {"max_rows", max_rows},
          {"width", width},     {"budget_s", budget_s}};
}

std::string model_identity(const fs::path& model) {
  std::error_code ec;
  fs::path resolved = fs::weakly_canonical(model, ec);
  if (ec) resolved = fs::absolute(model, ec);
  std::string out = resolved.string();
  if (!fs::is_directory(resolved, ec)) return out + ": " + stamp(resolved);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(resolved, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_weight_file(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) out += fmt::format("; {} {}", name, stamp(resolved / name));
  return out;
}

std::string cpu_identity() {
  std::string name;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; name.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) name = line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  if (name.empty()) name = "unknown cpu";
#if defined(__x86_64__) || defined(__i386__)
  // The extensions the CPU kernels choose between at run time.
  const std::pair<const char*, bool> isa[] = {{"avx2", __builtin_cpu_supports("avx2")},
                                              {"fma", __builtin_cpu_supports("fma")},
                                              {"f16c", __builtin_cpu_supports("f16c")},
                                              {"avx512f", __builtin_cpu_supports("avx512f")},
                                              {"avx512bw", __builtin_cpu_supports("avx512bw")},
                                              {"avx512vl", __builtin_cpu_supports("avx512vl")},
                                              {"avx512vnni", __builtin_cpu_supports("avx512vnni")}};
  for (const auto& [flag, has] : isa)
    if (has) name += std::string(" +") + flag;
#endif
  return name;
}

std::string build_identity() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.string() + ": " + stamp(exe);
}

fs::path default_verify_cost_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return fs::path(xdg) / "dspark" / "verify-cost";
  const char* home = std::getenv("HOME");
  if (home && *home) return fs::path(home) / ".cache" / "dspark" / "verify-cost";
  return {};
}

fs::path verify_cost_cache_file(const fs::path& dir, const VerifyCostKey& key) {
  return dir / fmt::format("{:016x}.json", fnv1a(key.to_json().dump()));
}

std::optional<VerifyCostProfile> load_verify_cost(const fs::path& dir, const VerifyCostKey& key,
                                                  const CacheLog& log) {
  const fs::path file = verify_cost_cache_file(dir, key);
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  auto ignore = [&](const std::string& why) -> std::optional<VerifyCostProfile> {
    if (log)
      log(fmt::format("ignoring the verify cost cache file {} ({}); profiling again", file.string(),
                      why));
    return std::nullopt;
  };
  std::ifstream in(file, std::ios::binary);
  if (!in) return ignore("cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return ignore("not JSON");
  if (!j.contains("key") || !j.contains("points")) return ignore("no key or points");
  // Another key with the same hash (or an older format): a miss, overwritten by this engine's.
  if (j["key"] != key.to_json()) return std::nullopt;
  if (const std::string why = check_points(j["points"]); !why.empty()) return ignore(why);
  VerifyCostProfile profile;
  for (const auto& p : j["points"])
    profile.points.emplace_back(p[0].get<int>(), p[1].get<double>());
  profile.loaded_from = file.string();
  return profile;
}

bool store_verify_cost(const fs::path& dir, const VerifyCostKey& key,
                       const VerifyCostProfile& profile, const CacheLog& log) {
  auto fail = [&](const std::string& why) {
    if (log)
      log(fmt::format("cannot write the verify cost cache in {} ({}); continuing without it",
                      dir.string(), why));
    return false;
  };
  if (profile.points.empty()) return false;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ec.message());
  nlohmann::json points = nlohmann::json::array();
  for (const auto& [n, ms] : profile.points) points.push_back({n, ms});
  const nlohmann::json j = {
      {"key", key.to_json()},
      {"points", std::move(points)},
      {"profiled", {{"seconds", profile.seconds}, {"forwards", profile.forwards}}}};
  const fs::path file = verify_cost_cache_file(dir, key);
  // A temporary name of this write, renamed over the file: readers see the old file or the
  // whole new one, and engines starting together never interleave their writes.
  static std::atomic<int> writes{0};
  const fs::path tmp = fs::path(file).concat(
      fmt::format(".tmp{}.{}", static_cast<long>(getpid()), writes.fetch_add(1)));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << '\n';
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return fail("cannot write " + tmp.string());
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return fail(why);
  }
  return true;
}

}  // namespace dspark
