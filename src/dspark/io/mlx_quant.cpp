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

// Values [first, first + n) of row r of the packed codes: each row a little-endian stream of
// `bits`-bit values (bits <= 8), value i at stream bits [bits * i, bits * (i + 1)), rows starting
// at a word.
void codes_at(const MlxQuantTensor& t, int64_t r, int64_t first, int n, uint8_t* q) {
  const int bits = t.spec.bits;
  const int64_t row_bytes = t.packed.size(1) * 4;
  const auto* row = static_cast<const unsigned char*>(t.packed.data()) + r * row_bytes;
  const unsigned mask = (1u << bits) - 1;
  for (int j = 0; j < n; ++j) {
    const int64_t bit = (first + j) * bits;
    const int64_t byte = bit >> 3;
    unsigned v = row[byte];
    if (byte + 1 < row_bytes) v |= static_cast<unsigned>(row[byte + 1]) << 8;
    q[j] = static_cast<uint8_t>((v >> (bit & 7)) & mask);
  }
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
  const bool bits_ok = spec.bits == 2 || spec.bits == 3 || spec.bits == 4 || spec.bits == 5 ||
                       spec.bits == 6 || spec.bits == 8;
  const bool group_ok = spec.group_size == 32 || spec.group_size == 64 || spec.group_size == 128;
  DSPARK_CHECK_KIND(
      io, bits_ok && group_ok,
      "tensor '{}' is MLX-quantized with bits {} and group_size {}, which dspark does "
      "not support (supported: bits 2, 3, 4, 5, 6 or 8, group_size 32, 64 or 128)",
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
  const int group = t.spec.group_size;
  const int64_t groups = cols / group;
  ThreadPool::global().parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> q(static_cast<size_t>(group));
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        codes_at(t, r, g * group, group, q.data());
        const size_t at = static_cast<size_t>(r * groups + g);
        float* y = out + r * cols + g * group;
        for (int i = 0; i < group; ++i) {
          const float scaled = scales[at] * static_cast<float>(q[static_cast<size_t>(i)]);
          y[i] = scaled + biases[at];
        }
      }
    }
  });
}

QuantType mlx_block_type(MlxQuantSpec spec) {
  DSPARK_CHECK(spec.bits >= 2 && spec.bits <= 8 && spec.bits != 7 &&
                   (spec.group_size == 32 || spec.group_size == 64 || spec.group_size == 128),
               "mlx_block_type: bits {}, group_size {}", spec.bits, spec.group_size);
  const bool nibbles = spec.bits <= 4;
  switch (spec.group_size) {
    case 32:
      return nibbles ? QuantType::q4_1 : QuantType::q8_a;
    case 64:
      return nibbles ? QuantType::q4_a64 : QuantType::q8_a64;
    default:
      return nibbles ? QuantType::q4_a128 : QuantType::q8_a128;
  }
}

bool mlx_repack_blocks(const MlxQuantTensor& t, uint8_t* out) {
  const auto [rows, cols] = mlx_quant_shape(t);
  const int group = t.spec.group_size;
  const QuantType type = mlx_block_type(t.spec);
  const bool nibbles = t.spec.bits <= 4;
  const std::vector<float> scales = floats_of(t.scales), biases = floats_of(t.biases);
  const int64_t groups = cols / group, units = group / 32;
  const int64_t row_bytes = quant_row_bytes(type, cols), block_bytes = quant_block(type).bytes;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t at = static_cast<size_t>(r * groups + g);
      const std::optional<f16> d = exact_f16(scales[at]), m = exact_f16(biases[at]);
      if (!d || !m) return false;
      uint8_t* block = out + r * row_bytes + g * block_bytes;
      std::memcpy(block, &d->bits, 2);
      std::memcpy(block + 2, &m->bits, 2);
      for (int64_t u = 0; u < units; ++u) {
        uint8_t q[32];
        codes_at(t, r, (g * units + u) * 32, 32, q);
        // 16 bytes of nibbles (codes of up to 4 bits, in Q4_1's order) or 32 of bytes per unit.
        uint8_t* codes = block + 4 + u * (nibbles ? 16 : 32);
        if (nibbles) {
          for (int j = 0; j < 16; ++j) codes[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
        } else {
          std::memcpy(codes, q, 32);
        }
      }
    }
  }
  return true;
}

}  // namespace dspark
