#include "dspark/io/fp8_quant.h"

#include <array>
#include <vector>

#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/core/fp8.h"
#include "dspark/core/thread_pool.h"
#include "dspark/io/json_util.h"

namespace dspark {
namespace {

constexpr const char* kSupportedMethods =
    "\"fp8\" (block-scaled E4M3), and MLX affine checkpoints (a \"quantization\" entry without "
    "quant_method)";

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

bool Fp8Quantization::keeps_float(const std::string& module) const {
  const std::string dotted = "." + module + ".";
  for (const std::string& entry : modules_to_not_convert) {
    if (dotted.find("." + entry + ".") != std::string::npos) return true;
  }
  return false;
}

std::optional<Fp8Quantization> read_fp8_quantization(const std::filesystem::path& config_json) {
  const nlohmann::json config = read_json_file(config_json);
  const auto it = config.find("quantization_config");
  if (it == config.end() || !it->is_object() || !it->contains("quant_method")) return std::nullopt;
  const nlohmann::json& q = *it;
  const std::string source = config_json.string() + ": quantization_config";
  const std::string method = json_string(q, "quant_method", source);
  DSPARK_CHECK_KIND(unsupported, method == "fp8",
                    "{}: quant_method '{}' is not supported (supported: {})", source, method,
                    kSupportedMethods);
  const std::string fmt = json_optional_string(q, "fmt", source).value_or("e4m3");
  DSPARK_CHECK_KIND(unsupported, fmt == "e4m3",
                    "{}: fp8 fmt '{}' is not supported (supported: e4m3, stored as F8_E4M3)",
                    source, fmt);
  const std::string scheme =
      json_optional_string(q, "activation_scheme", source).value_or("dynamic");
  DSPARK_CHECK_KIND(unsupported, scheme == "dynamic",
                    "{}: fp8 activation_scheme '{}' is not supported (supported: dynamic)", source,
                    scheme);
  const auto bs = q.find("weight_block_size");
  DSPARK_CHECK_KIND(unsupported, bs != q.end() && !bs->is_null(),
                    "{}: fp8 without weight_block_size (per-tensor scales) is not supported "
                    "(supported: block scales, weight_block_size [block_n, block_k])",
                    source);
  const bool two_ints = bs->is_array() && bs->size() == 2 && (*bs)[0].is_number_integer() &&
                        (*bs)[1].is_number_integer() && (*bs)[0].get<int64_t>() > 0 &&
                        (*bs)[1].get<int64_t>() > 0;
  DSPARK_CHECK_KIND(io, two_ints,
                    "{}: weight_block_size is {}, expected two positive integers [block_n, "
                    "block_k] such as [128, 128]",
                    source, json_brief(*bs));
  Fp8Quantization out;
  out.block_n = (*bs)[0].get<int64_t>();
  out.block_k = (*bs)[1].get<int64_t>();
  if (const auto m = q.find("modules_to_not_convert"); m != q.end() && !m->is_null()) {
    DSPARK_CHECK_KIND(io, m->is_array(),
                      "{}: modules_to_not_convert is {}, expected a list of module names", source,
                      json_brief(*m));
    for (const auto& entry : *m) {
      DSPARK_CHECK_KIND(io, entry.is_string(),
                        "{}: modules_to_not_convert holds {}, expected module names (strings)",
                        source, json_brief(entry));
      out.modules_to_not_convert.push_back(entry.get<std::string>());
    }
  }
  return out;
}

std::pair<int64_t, int64_t> fp8_quant_shape(const Fp8QuantTensor& t) {
  const Tensor& w = t.codes;
  DSPARK_CHECK_KIND(io, w.dim() == 2 && w.dtype() == DType::u8,
                    "FP8 tensor '{}' must be a 2-D F8_E4M3 tensor, got {} {}", t.name,
                    dtype_name(w.dtype()), w.shape().str());
  const int64_t n = w.size(0), k = w.size(1);
  const Shape expected{ceil_div(n, t.block_n), ceil_div(k, t.block_k)};
  DSPARK_CHECK_KIND(io, dtype_is_float(t.scale_inv.dtype()) && t.scale_inv.shape() == expected,
                    "FP8 tensor '{}' {}: its weight_scale_inv is {} {}, expected a float tensor "
                    "{} (ceil(N / {}) x ceil(K / {}), weight_block_size [{}, {}])",
                    t.name, w.shape().str(), dtype_name(t.scale_inv.dtype()),
                    t.scale_inv.shape().str(), expected.str(), t.block_n, t.block_k, t.block_n,
                    t.block_k);
  return {n, k};
}

void fp8_dequantize(const Fp8QuantTensor& t, float* out) {
  const auto [n, k] = fp8_quant_shape(t);
  std::vector<float> scales(static_cast<size_t>(t.scale_inv.numel()));
  convert_host(t.scale_inv.data(), t.scale_inv.dtype(), scales.data(), DType::f32,
               t.scale_inv.numel());
  std::array<float, 256> value{};
  for (int c = 0; c < 256; ++c) value[c] = e4m3_to_f32(static_cast<uint8_t>(c));
  const int64_t scale_cols = ceil_div(k, t.block_k);
  const auto* codes = static_cast<const uint8_t*>(t.codes.data());
  ThreadPool::global().parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* s = scales.data() + (r / t.block_n) * scale_cols;
      const uint8_t* q = codes + r * k;
      float* y = out + r * k;
      for (int64_t i = 0; i < k; ++i) y[i] = value[q[i]] * s[i / t.block_k];
    }
  });
}

}  // namespace dspark
