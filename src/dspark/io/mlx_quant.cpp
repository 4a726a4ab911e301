#include "dspark/io/mlx_quant.h"

#include <cstring>
#include <vector>

#include "dspark/core/dtype.h"
#include "dspark/core/error.h"
#include "dspark/core/quant.h"
#include "dspark/core/thread_pool.h"
#include "dspark/io/json_util.h"

namespace dspark {
namespace {

MlxQuantSpec spec_from_json(const nlohmann::json& obj, const std::string& source) {
  MlxQuantSpec s;
  s.bits = static_cast<int>(json_int(obj, "bits", source));
  s.group_size = static_cast<int>(json_int(obj, "group_size", source));
  if (const auto mode = json_optional_string(obj, "mode", source)) {
    DSPARK_CHECK_KIND(unsupported, *mode == "affine",
                      "{}: MLX quantization mode '{}' is not supported (supported: affine)", source,
                      *mode);
  }
  return s;
}

// The tensor's values as f32 (safetensors data may be unaligned: read through memcpy).
std::vector<float> floats_of(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype(), [&]<typename S>(TypeTag<S>) {
    const auto* p = static_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < out.size(); ++i) {
      S v;
      std::memcpy(&v, p + i * sizeof(S), sizeof(S));
      out[i] = to_f32(v);
    }
  });
  return out;
}

uint32_t word_at(const Tensor& packed, int64_t i) {
  uint32_t w;
  std::memcpy(&w, static_cast<const unsigned char*>(packed.data()) + i * 4, 4);
  return w;
}

// The f16 of `v` when it converts exactly.
std::optional<f16> exact_f16(float v) {
  const f16 h = f32_to_f16(v);
  const float back = f16_to_f32(h);
  if (std::memcmp(&back, &v, sizeof(float)) != 0) return std::nullopt;
  return h;
}

}  // namespace

std::optional<MlxQuantSpec> MlxQuantization::spec_of(const std::string& module) const {
  const auto it = modules.find(module);
  return it == modules.end() ? std::optional<MlxQuantSpec>(defaults) : it->second;
}

std::optional<MlxQuantization> read_mlx_quantization(const std::filesystem::path& config_json) {
  const nlohmann::json config = read_json_file(config_json);
  const std::string file = config_json.string();
  const nlohmann::json* q = nullptr;
  std::string key = "quantization";
  if (const auto it = config.find(key); it != config.end() && !it->is_null()) {
    q = &*it;
  } else if (const auto jt = config.find("quantization_config");
             jt != config.end() && jt->is_object() && !jt->contains("quant_method")) {
    key = "quantization_config";
    q = &*jt;
  }
  if (q == nullptr) return std::nullopt;
  const std::string source = file + ": " + key;
  DSPARK_CHECK_KIND(io, q->is_object(), "{} is not an object", source);
  MlxQuantization out;
  out.defaults = spec_from_json(*q, source);
  for (const auto& [name, value] : q->items()) {
    if (value.is_boolean()) {
      DSPARK_CHECK_KIND(io, !value.get<bool>(),
                        "{}: module '{}' maps to true (expected false or "
                        "{{\"group_size\", \"bits\"}})",
                        source, name);
      out.modules[name] = std::nullopt;
    } else if (value.is_object()) {
      out.modules[name] = spec_from_json(value, source + "." + name);
    }
  }
  return out;
}

void check_mlx_quant_spec(const std::string& tensor, MlxQuantSpec spec) {
  const bool bits_ok = spec.bits == 4 || spec.bits == 8;
  const bool group_ok = spec.group_size == 32 || spec.group_size == 64 || spec.group_size == 128;
  DSPARK_CHECK_KIND(
      io, bits_ok && group_ok,
      "tensor '{}' is MLX-quantized with bits {} and group_size {}, which dspark does "
      "not support (supported: bits 4 or 8, group_size 32, 64 or 128)",
      tensor, spec.bits, spec.group_size);
}

std::pair<int64_t, int64_t> mlx_quant_shape(const MlxQuantTensor& t) {
  check_mlx_quant_spec(t.name, t.spec);
  const Tensor& w = t.packed;
  DSPARK_CHECK_KIND(io, w.dim() == 2 && w.element_size() == 4 && !dtype_is_float(w.dtype()),
                    "MLX-quantized tensor '{}' must be a 2-D U32 tensor, got {} {}", t.name,
                    dtype_name(w.dtype()), w.shape().str());
  const int64_t rows = w.size(0);
  const int64_t cols = w.size(1) * 32 / t.spec.bits;
  const Shape groups{rows, cols / t.spec.group_size};
  DSPARK_CHECK_KIND(io, cols % t.spec.group_size == 0,
                    "MLX-quantized tensor '{}' has {} values per row, not a multiple of its "
                    "group_size {}",
                    t.name, cols, t.spec.group_size);
  for (const Tensor* s : {&t.scales, &t.biases}) {
    const char* what = s == &t.scales ? "scales" : "biases";
    DSPARK_CHECK_KIND(io, dtype_is_float(s->dtype()) && s->shape() == groups,
                      "MLX-quantized tensor '{}': {} are {} {}, expected a float tensor {} "
                      "(bits {}, group_size {})",
                      t.name, what, dtype_name(s->dtype()), s->shape().str(), groups.str(),
                      t.spec.bits, t.spec.group_size);
  }
  return {rows, cols};
}

void mlx_dequantize(const MlxQuantTensor& t, float* out) {
  const auto [rows, cols] = mlx_quant_shape(t);
  const std::vector<float> scales = floats_of(t.scales), biases = floats_of(t.biases);
  const int bits = t.spec.bits;
  const int per_word = 32 / bits;
  const uint32_t mask = (1u << bits) - 1;
  const int64_t words = cols / per_word, groups = cols / t.spec.group_size;
  ThreadPool::global().parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* y = out + r * cols;
      for (int64_t i = 0; i < cols; ++i) {
        const uint32_t word = word_at(t.packed, r * words + i / per_word);
        const auto q = static_cast<float>((word >> (bits * (i % per_word))) & mask);
        const size_t g = static_cast<size_t>(r * groups + i / t.spec.group_size);
        const float scaled = scales[g] * q;
        y[i] = scaled + biases[g];
      }
    }
  });
}

QuantType mlx_block_type(MlxQuantSpec spec) {
  DSPARK_CHECK((spec.bits == 4 || spec.bits == 8) &&
                   (spec.group_size == 32 || spec.group_size == 64 || spec.group_size == 128),
               "mlx_block_type: bits {}, group_size {}", spec.bits, spec.group_size);
  switch (spec.group_size) {
    case 32:
      return spec.bits == 4 ? QuantType::q4_1 : QuantType::q8_a;
    case 64:
      return spec.bits == 4 ? QuantType::q4_a64 : QuantType::q8_a64;
    default:
      return spec.bits == 4 ? QuantType::q4_a128 : QuantType::q8_a128;
  }
}

bool mlx_repack_blocks(const MlxQuantTensor& t, uint8_t* out) {
  const auto [rows, cols] = mlx_quant_shape(t);
  const int bits = t.spec.bits, group = t.spec.group_size;
  const QuantType type = mlx_block_type(t.spec);
  const std::vector<float> scales = floats_of(t.scales), biases = floats_of(t.biases);
  const int64_t groups = cols / group, units = group / 32;
  const int64_t row_bytes = quant_row_bytes(type, cols), block_bytes = quant_block(type).bytes;
  const int64_t words = cols * bits / 32, unit_words = bits;  // 32 values = `bits` words
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t at = static_cast<size_t>(r * groups + g);
      const std::optional<f16> d = exact_f16(scales[at]), m = exact_f16(biases[at]);
      if (!d || !m) return false;
      uint8_t* block = out + r * row_bytes + g * block_bytes;
      std::memcpy(block, &d->bits, 2);
      std::memcpy(block + 2, &m->bits, 2);
      for (int64_t u = 0; u < units; ++u) {
        // Value j of the unit: word j / (32 / bits), bits bits * (j % (32 / bits)) up.
        uint8_t q[32];
        for (int w = 0; w < unit_words; ++w) {
          const uint32_t word = word_at(t.packed, r * words + (g * units + u) * unit_words + w);
          for (int j = 0; j < 32 / bits; ++j)
            q[w * (32 / bits) + j] =
                static_cast<uint8_t>((word >> (bits * j)) & ((1u << bits) - 1));
        }
        uint8_t* codes = block + 4 + u * bits * 4;  // 16 or 32 bytes per unit
        if (bits == 8) {
          std::memcpy(codes, q, 32);
        } else {
          for (int j = 0; j < 16; ++j) codes[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
        }
      }
    }
  }
  return true;
}

}  // namespace dspark
