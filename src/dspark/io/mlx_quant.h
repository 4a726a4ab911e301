// MLX (mlx-lm) affine quantization: the config.json entry and the unpacking of its tensors.
//
// A quantized linear or embedding `X` of an MLX checkpoint is three tensors:
//   X.weight  U32 [out, in * bits / 32]  each row a little-endian stream of `bits`-bit values,
//                                        value i in stream bits [bits * i, bits * i + bits): for
//                                        bits 2, 4 and 8 value j of a word in its bits [bits * j,
//                                        bits * j + bits); for 3, 5 and 6 values cross bytes (8
//                                        values in 3 or 5 bytes, 4 in 3), as MLX packs them
//   X.scales, X.biases  [out, in / group_size] in bf16, f16 or f32
// and w[o][i] = scales[o][i / G] * q[o][i] + biases[o][i / G] (f32: one product, one sum).
// config.json says {"quantization": {"group_size": G, "bits": B, ...}} (newer files also
// "quantization_config"); a key naming a module maps to false (not quantized) or to its own
// {"group_size", "bits"}. dspark supports bits 2, 3, 4, 5, 6 and 8 with groups of 32, 64 and 128.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "dspark/core/quant.h"
#include "dspark/core/tensor.h"

namespace dspark {

struct MlxQuantSpec {
  int bits = 0;
  int group_size = 0;
};

struct MlxQuantization {
  MlxQuantSpec defaults;
  // Per-module entries ("model.layers.0.mlp.down_proj"): nullopt when the module is not quantized.
  std::map<std::string, std::optional<MlxQuantSpec>> modules;
  // The spec of `module` (a tensor name without ".weight"); nullopt when it is not quantized.
  std::optional<MlxQuantSpec> spec_of(const std::string& module) const;
};

// The MLX quantization of the config.json at `config_json`: its "quantization" object, else a
// "quantization_config" without a "quant_method" (another method's); nullopt when there is none.
// Throws ErrorKind::io for a malformed entry, ErrorKind::unsupported for a "mode" other than
// "affine". Bits and group sizes are checked per tensor (check_mlx_quant_spec).
std::optional<MlxQuantization> read_mlx_quantization(const std::filesystem::path& config_json);

// Throws ErrorKind::io naming `tensor`, its bits and group size and the supported ones unless
// bits is 2, 3, 4, 5, 6 or 8 and the group 32, 64 or 128.
void check_mlx_quant_spec(const std::string& tensor, MlxQuantSpec spec);

// One quantized tensor's parts (CPU views: `packed` i32 (the U32 words), scales / biases float).
struct MlxQuantTensor {
  std::string name;  // the weight's name, for errors
  MlxQuantSpec spec;
  Tensor packed, scales, biases;
};

// Checks the spec and the shapes of the three tensors against each other (ErrorKind::io naming
// the tensor); returns {rows, values per row}.
std::pair<int64_t, int64_t> mlx_quant_shape(const MlxQuantTensor& t);

// w = scale * q + bias in f32, [rows, cols] row-major into `out`.
void mlx_dequantize(const MlxQuantTensor& t, float* out);

// The block type an MLX tensor of `spec` (a supported one) is held in (core/quant.h), one block
// per group: 2 to 4 bits in groups of 32 GGUF Q4_1, of 64 Q4_A64, of 128 Q4_A128 (4-bit codes:
// the file's bytes for 4 bits, 4/3 of them for 3, twice for 2); 5 to 8 bits Q8_A, Q8_A64,
// Q8_A128 (8-bit codes: 8/5 and 4/3 of the file's bytes for 5 and 6). bf16 scale and bias become
// f16 d and m.
QuantType mlx_block_type(MlxQuantSpec spec);

// The tensor as blocks of mlx_block_type(spec), quant_row_bytes(type, cols) bytes per row into
// `out`: per group d = scale, m = bias as f16, then the codes (up to 4 bits: each unit of 32
// values' nibbles in Q4_1's order; else one byte each). Returns false (out partly written) when a
// scale or bias does not convert to f16 exactly: the blocks would then not dequantize to the MLX
// weight.
bool mlx_repack_blocks(const MlxQuantTensor& t, uint8_t* out);

}  // namespace dspark
