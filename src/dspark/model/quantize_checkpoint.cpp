#include "dspark/model/quantize_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dspark/core/buffer.h"
#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/io/json_util.h"
#include "dspark/io/mlx_quantize.h"
#include "dspark/io/safetensors.h"
#include "dspark/io/weight_names.h"

namespace dspark {
namespace fs = std::filesystem;
namespace {

enum class Action { quantize, copy };

struct TensorPlan {
  std::string name;
  Action action = Action::copy;
  int64_t bytes_in = 0, bytes_out = 0;
  int shard = 0;
};

// Scales and biases: the weight's dtype when 16-bit, else bf16 (see the header).
DType scale_dtype_for(DType weight) {
  return weight == DType::f32 ? DType::bf16 : weight;
}

void check_spec(MlxQuantSpec s) {
  DSPARK_CHECK_KIND(unsupported,
                    (s.bits == 4 || s.bits == 8) &&
                        (s.group_size == 32 || s.group_size == 64 || s.group_size == 128),
                    "dspark quantize: bits {} with group size {} is not supported (MLX affine: "
                    "bits 4 or 8, group size 32, 64 or 128)",
                    s.bits, s.group_size);
}

std::vector<TensorPlan> plan_tensors(const SafeTensors& st, const QuantizeOptions& o,
                                     QuantizeSummary& summary) {
  std::vector<TensorPlan> plan;
  const int64_t g = o.spec.group_size;
  for (const std::string& name : st.names()) {
    const Tensor t = st.get(name);
    TensorPlan p{name, Action::copy, static_cast<int64_t>(t.nbytes()),
                 static_cast<int64_t>(t.nbytes()), 0};
    const std::optional<std::string> module = weight_module(name);
    const bool is_weight = module.has_value();
    DSPARK_CHECK_KIND(
        unsupported, !(is_weight && !dtype_is_float(t.dtype())) && !name.ends_with(".scales"),
        "{}: tensor '{}' ({} {}) looks quantized already; dspark quantize needs a float "
        "checkpoint",
        st.path().string(), name, dtype_name(t.dtype()), t.shape().str());
    if (is_weight && t.dim() == 2) {
      if (o.keep_float && o.keep_float(*module)) {
        summary.kept_by_policy.push_back(name);
      } else if (t.size(1) % g != 0) {
        summary.not_divisible.push_back(name);
      } else {
        p.action = Action::quantize;
        const int64_t rows = t.size(0), cols = t.size(1);
        p.bytes_out =
            rows * cols * o.spec.bits / 8 +
            2 * rows * (cols / g) * static_cast<int64_t>(dtype_size(scale_dtype_for(t.dtype())));
      }
    }
    plan.push_back(std::move(p));
  }
  // Shards in name order, each at most max_shard_bytes (a larger tensor gets one of its own).
  int shard = 0;
  int64_t in_shard = 0;
  for (TensorPlan& p : plan) {
    if (in_shard > 0 && in_shard + p.bytes_out > o.max_shard_bytes) {
      ++shard;
      in_shard = 0;
    }
    p.shard = shard;
    in_shard += p.bytes_out;
  }
  return plan;
}

// The output tensors of one planned tensor, appended to `owned` / `entries`.
void write_tensor(const SafeTensors& st, const TensorPlan& p, const QuantizeOptions& o,
                  std::deque<OwnedTensor>& owned,
                  std::vector<std::pair<std::string, Tensor>>& entries,
                  std::set<std::string>& as_u32) {
  const Tensor t = st.get(p.name);
  if (p.action == Action::copy) {
    // The mapping's bytes may be unaligned: the output holds its own copy.
    OwnedTensor& c = owned.emplace_back(t.dtype(), t.shape(), Device::cpu());
    std::memcpy(c.view().data(), t.data(), t.nbytes());
    entries.emplace_back(p.name, c.view());
    return;
  }
  const int64_t rows = t.size(0), cols = t.size(1), g = o.spec.group_size;
  OwnedTensor f32(DType::f32, t.shape(), Device::cpu());
  convert_host(t.data(), t.dtype(), f32.view().data(), DType::f32, t.numel());
  check_finite_weight(p.name, static_cast<const float*>(f32.view().data()), t.numel());
  const Shape groups{rows, cols / g};
  OwnedTensor& words =
      owned.emplace_back(DType::i32, Shape{rows, cols * o.spec.bits / 32}, Device::cpu());
  OwnedTensor scales32(DType::f32, groups, Device::cpu()),
      biases32(DType::f32, groups, Device::cpu());
  mlx_quantize_rows(static_cast<const float*>(f32.view().data()), rows, cols, o.spec,
                    static_cast<uint32_t*>(words.view().data()),
                    static_cast<float*>(scales32.view().data()),
                    static_cast<float*>(biases32.view().data()));
  const DType sd = scale_dtype_for(t.dtype());
  OwnedTensor& scales = owned.emplace_back(sd, groups, Device::cpu());
  OwnedTensor& biases = owned.emplace_back(sd, groups, Device::cpu());
  convert_host(scales32.view().data(), DType::f32, scales.view().data(), sd, groups.numel());
  convert_host(biases32.view().data(), DType::f32, biases.view().data(), sd, groups.numel());
  const std::string module = *weight_module(p.name);
  entries.emplace_back(p.name, words.view());
  entries.emplace_back(module + ".scales", scales.view());
  entries.emplace_back(module + ".biases", biases.view());
  as_u32.insert(p.name);
}

std::string shard_name(int shard, int n_shards) {
  if (n_shards == 1) return "model.safetensors";
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", shard + 1, n_shards);
}

void write_config(const QuantizeOptions& o, nlohmann::json config, const QuantizeSummary& s) {
  nlohmann::json q = {{"group_size", o.spec.group_size}, {"bits", o.spec.bits}, {"mode", "affine"}};
  // Weights of a quantizable kind kept float: `false`, so that loaders which quantize every
  // Linear / Embedding (mlx-lm) leave them as they are.
  for (const auto* list : {&s.kept_by_policy, &s.not_divisible}) {
    for (const std::string& name : *list) q[*weight_module(name)] = false;
  }
  config["quantization"] = q;
  config["quantization_config"] = q;
  std::ofstream out(o.output / "config.json");
  out << config.dump(2) << "\n";
  DSPARK_CHECK_KIND(io, out.good(), "{}: write failed", (o.output / "config.json").string());
}

// Tokenizer files, generation_config.json, chat templates, dspark_thresholds.json...: every
// top-level file except the config and the weights.
std::vector<std::string> copy_side_files(const QuantizeOptions& o) {
  static const std::set<std::string> kWeightExtensions = {
      ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack"};
  std::vector<std::string> copied;
  for (const fs::directory_entry& e : fs::directory_iterator(o.input)) {
    const fs::path& p = e.path();
    const std::string name = p.filename().string();
    if (!e.is_regular_file() || name == "config.json" ||
        kWeightExtensions.count(p.extension().string()) != 0 || name.ends_with(".index.json"))
      continue;
    fs::copy_file(p, o.output / name);
    copied.push_back(name);
  }
  std::sort(copied.begin(), copied.end());
  return copied;
}

}  // namespace

void check_quantize_input(const fs::path& input) {
  std::error_code ec;
  DSPARK_CHECK_KIND(io, fs::is_directory(input, ec),
                    "model directory '{}' does not exist or is not a directory", input.string());
  DSPARK_CHECK_KIND(io, fs::is_regular_file(input / "config.json", ec), "{}: no config.json",
                    input.string());
  const nlohmann::json config = read_json_file(input / "config.json");
  for (const char* key : {"quantization", "quantization_config"}) {
    const auto it = config.find(key);
    DSPARK_CHECK_KIND(unsupported, it == config.end() || it->is_null(),
                      "{}: the checkpoint is already quantized (config.json has '{}'); dspark "
                      "quantize needs a float checkpoint",
                      input.string(), key);
  }
}

QuantizeOutput::QuantizeOutput(fs::path output) : output_(std::move(output)) {
  std::error_code ec;
  if (fs::exists(output_, ec)) {
    DSPARK_CHECK_KIND(io, fs::is_directory(output_, ec) && fs::is_empty(output_, ec),
                      "output '{}' exists and is not an empty directory", output_.string());
  } else {
    created_ = true;
  }
  fs::create_directories(output_, ec);
  DSPARK_CHECK_KIND(io, !ec, "cannot create output directory '{}': {}", output_.string(),
                    ec.message());
}

QuantizeOutput::~QuantizeOutput() {
  if (committed_) return;
  std::error_code ec;
  if (created_) {
    fs::remove_all(output_, ec);
    return;
  }
  for (const auto& entry : fs::directory_iterator(output_, ec)) fs::remove_all(entry.path(), ec);
}

void check_finite_weight(const std::string& name, const float* w, int64_t n) {
  bool finite = true;  // one branch-free pass (vectorised), the index only on failure
  for (int64_t i = 0; i < n; ++i) finite &= std::fabs(w[i]) <= std::numeric_limits<float>::max();
  if (finite) return;
  for (int64_t i = 0; i < n; ++i) {
    DSPARK_CHECK_KIND(invalid_input, std::isfinite(w[i]),
                      "weight '{}' holds a non-finite value ({}) at index {}: the checkpoint is "
                      "damaged, and no quantized format represents it",
                      name, w[i], i);
  }
}

int mlx_format_bits(std::string_view format) {
  if (format == "mlx4") return 4;
  if (format == "mlx8") return 8;
  DSPARK_FAIL(unsupported, "--format '{}' is not supported (supported: mlx4, mlx8)", format);
}

QuantizeSummary quantize_checkpoint(const QuantizeOptions& o,
                                    const std::function<void(const QuantizeProgress&)>& progress) {
  check_quantize_input(o.input);
  check_spec(o.spec);
  const nlohmann::json config = read_json_file(o.input / "config.json");
  const SafeTensors st = SafeTensors::open(o.input);
  QuantizeSummary summary;
  const std::vector<TensorPlan> plan = plan_tensors(st, o, summary);
  QuantizeOutput out(o.output);

  QuantizeProgress pr;
  pr.tensors_total = static_cast<int64_t>(plan.size());
  for (const TensorPlan& p : plan) pr.bytes_total += p.bytes_in;
  if (progress) progress(pr);
  const int n_shards = plan.empty() ? 1 : plan.back().shard + 1;
  nlohmann::json weight_map = nlohmann::json::object();
  size_t next = 0;
  for (int shard = 0; shard < n_shards; ++shard) {
    std::deque<OwnedTensor> owned;  // stable addresses: `entries` views them
    std::vector<std::pair<std::string, Tensor>> entries;
    std::set<std::string> as_u32;
    for (; next < plan.size() && plan[next].shard == shard; ++next) {
      const TensorPlan& p = plan[next];
      write_tensor(st, p, o, owned, entries, as_u32);
      (p.action == Action::quantize ? summary.n_quantized : summary.n_copied) += 1;
      summary.bytes_in += p.bytes_in;
      summary.bytes_out += p.bytes_out;
      pr.tensors_done += 1;
      pr.bytes_done += p.bytes_in;
      pr.tensor = p.name;
      if (progress) progress(pr);
    }
    const std::string file = shard_name(shard, n_shards);
    write_safetensors(o.output / file, entries, {{"format", "mlx"}}, as_u32);
    for (const auto& [name, t] : entries) weight_map[name] = file;
    summary.files.push_back(o.output / file);
  }
  if (n_shards > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", summary.bytes_out}}},
                                  {"weight_map", weight_map}};
    std::ofstream(o.output / "model.safetensors.index.json") << index.dump(2) << "\n";
  }
  write_config(o, config, summary);
  summary.copied_files = copy_side_files(o);
  out.commit();
  return summary;
}

}  // namespace dspark
