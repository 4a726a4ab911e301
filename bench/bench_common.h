// Shared pieces of the benchmarks: prompt sets, roofline bookkeeping, table printing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dspark/core/buffer.h"
#include "dspark/core/device.h"
#include "dspark/model/model.h"

namespace dspark::bench {

// Built-in prompts (text) used when no prompt file is given: varied tasks, some with repetition
// that prompt lookup can exploit.
const std::vector<std::string>& builtin_prompts();
// One prompt per line (\n escapes allowed).
// One prompt per line ("\\n" escapes a newline), or a .jsonl file of {"prompt": ...} objects.
std::vector<std::string> read_prompt_file(const std::filesystem::path& file);
// Random token prompts for checkpoints without a tokenizer.
std::vector<std::vector<int32_t>> random_token_prompts(int n, int length, int vocab, uint32_t seed);

// Bytes one decode step must read: weights (resident bytes after load) + K/V of `context` tokens.
struct Roofline {
  double weight_bytes = 0;
  double kv_bytes_per_token = 0;  // K + V of one token over all layers
  double copy_bandwidth = 0;      // bytes/s (read + write) measured in this run; 0 on the CPU
  double bytes_per_step(double context) const {
    return weight_bytes + kv_bytes_per_token * context;
  }
};
double kv_bytes_per_token(const ModelConfig& c, DType dtype);

// "a,b,c" -> {"a", "b", "c"} (an empty string gives no items).
std::vector<std::string> split_list(const std::string& s);

// A weight matrix shape: N output features x K input features.
struct WeightShape {
  int64_t n = 0, k = 0;
};
// "6144x4096,4096x4096" -> shapes; throws invalid_input for an item that is not NxK with N, K > 0.
std::vector<WeightShape> parse_weight_shapes(const std::string& list);

// Random bf16 / f16 values of magnitude ~0.01 on `device` (for timing: the values do not matter):
// a cheap LCG on the host, one copy.
OwnedTensor random_16bit_tensor(DType dtype, Shape shape, uint32_t seed, Device device);

std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows);

}  // namespace dspark::bench
