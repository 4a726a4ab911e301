#include "bench_common.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "dspark/core/error.h"

namespace dspark::bench {

const std::vector<std::string>& builtin_prompts() {
  static const std::vector<std::string> prompts = {
      "Write a short story about a lighthouse keeper who finds a message in a bottle.",
      "Explain how a hash table works, with an example in Python.",
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
      "List the planets of the solar system in order, one per line, with one fact each.",
      "Translate to French: The weather is nice today, so we will walk to the market.",
      "Summarize the following text: The quick brown fox jumps over the lazy dog. The quick "
      "brown fox jumps over the lazy dog again, because the dog is still lazy.",
      "Write a JSON object describing a book with title, author, year and a list of genres.",
      "Q: What is 17 * 23? Think step by step.\nA:",
  };
  return prompts;
}

std::vector<std::string> read_prompt_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  DSPARK_CHECK_KIND(io, in.good(), "cannot read prompt file {}", file.string());
  std::vector<std::string> out;
  std::string line;
  const bool jsonl = file.extension() == ".jsonl";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (jsonl) {  // {"prompt": "...", ...} per line (tools/train/data)
      const auto j = nlohmann::json::parse(line, nullptr, false);
      DSPARK_CHECK_KIND(io, j.is_object() && j.contains("prompt") && j["prompt"].is_string(),
                        "{}: each line must be a JSON object with a string \"prompt\"",
                        file.string());
      out.push_back(j["prompt"].get<std::string>());
      continue;
    }
    std::string p;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') {
        p += '\n';
        ++i;
      } else {
        p += line[i];
      }
    }
    out.push_back(p);
  }
  DSPARK_CHECK_KIND(io, !out.empty(), "prompt file {} has no prompts", file.string());
  return out;
}

std::vector<std::vector<int32_t>> random_token_prompts(int n, int length, int vocab,
                                                       uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (auto& p : out) {
    p.resize(static_cast<size_t>(length));
    for (auto& t : p) t = tok(gen);
  }
  return out;
}

double kv_bytes_per_token(const ModelConfig& c, DType dtype) {
  return 2.0 * c.num_layers * c.num_kv_heads * c.head_dim * static_cast<double>(dtype_size(dtype));
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t next = s.find(',', pos);
    out.push_back(s.substr(pos, next - pos));
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

std::vector<WeightShape> parse_weight_shapes(const std::string& list) {
  std::vector<WeightShape> out;
  for (const std::string& item : split_list(list)) {
    const size_t x = item.find('x');
    DSPARK_CHECK_KIND(invalid_input, x != std::string::npos, "shape '{}' is not NxK", item);
    out.push_back({std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
    DSPARK_CHECK_KIND(invalid_input, out.back().n > 0 && out.back().k > 0,
                      "shape '{}': N and K must be positive", item);
  }
  return out;
}

OwnedTensor random_16bit_tensor(DType dtype, Shape shape, uint32_t seed, Device device) {
  std::vector<uint16_t> bits(static_cast<size_t>(shape.numel()));
  uint32_t state = seed * 2654435761u + 1;
  const uint16_t exponent = dtype == DType::bf16 ? 0x3C00 : 0x2000;  // ~2^-7 (bf16), ~2^-7 (f16)
  for (uint16_t& b : bits) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<uint16_t>(exponent | ((state >> 16) & 0x807F));  // sign + low mantissa bits
  }
  OwnedTensor host = OwnedTensor::zeros(dtype, shape, Device::cpu());
  std::memcpy(host.view().data(), bits.data(), bits.size() * sizeof(uint16_t));
  return OwnedTensor::copy_of(host.view(), device);
}

std::string format_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(header.size());
  for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t i = 0; i < w.size(); ++i)
      s += fmt::format(" {:<{}} |", i < cells.size() ? cells[i] : "", w[i]);
    return s + "\n";
  };
  std::string out = line(header) + "|";
  for (size_t i = 0; i < w.size(); ++i) out += std::string(w[i] + 2, '-') + "|";
  out += "\n";
  for (const auto& r : rows) out += line(r);
  return out;
}

}  // namespace dspark::bench
