// bench_quantize: the error and speed of `dspark quantize`'s block encoders (core/quant_encode.h).
// Each type quantizes the same values and dequantizes them back; the table gives the relative RMS
// error (sqrt(sum (x - y)^2 / sum x^2)), the largest error of one value in units of its
// sub-block's step ((max - min) / codes over 32 values, 16 for Q6_K), and the encoder's rate on
// the pool's threads (DSPARK_THREADS).
//
//   bench_quantize [--types q4_k,q5_k,q6_k,q8_0,q4_0,q4_1,q5_0,q5_1] [--values 1048576]
//                  [--dist gaussian|t4] [--safetensors FILE] [--json FILE]
//
// --safetensors takes every 2-D floating-point tensor of the file (each row quantized as a row,
// tensors whose rows do not fit a type's blocks skipped for that type) instead of random values.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/core/quant.h"
#include "dspark/core/quant_encode.h"
#include "dspark/core/thread_pool.h"
#include "dspark/io/safetensors.h"

namespace dspark {
namespace {

using Clock = std::chrono::steady_clock;

// Values in rows: random ones as one row, or each 2-D tensor of a safetensors file.
struct Rows {
  std::vector<std::vector<float>> tensors;
  std::vector<int64_t> row_length;
};

Rows random_rows(int64_t n, const std::string& dist) {
  std::mt19937 gen(1);
  std::normal_distribution<double> normal(0.0, 0.02);
  std::student_t_distribution<double> heavy(4.0);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = static_cast<float>(dist == "t4" ? heavy(gen) : normal(gen));
  return {{std::move(x)}, {n}};
}

Rows safetensors_rows(const std::string& file) {
  const SafeTensors st = SafeTensors::open(file);
  Rows r;
  for (const std::string& name : st.names()) {
    const Tensor t = st.get(name);
    if (t.dim() != 2 ||
        !(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16))
      continue;
    std::vector<float> x(static_cast<size_t>(t.numel()));
    convert_host(t.data(), t.dtype(), x.data(), DType::f32, t.numel());
    r.tensors.push_back(std::move(x));
    r.row_length.push_back(t.size(1));
  }
  DSPARK_CHECK_KIND(invalid_input, !r.tensors.empty(), "{}: no 2-D float tensors", file);
  return r;
}

struct Result {
  std::string type;
  int64_t values = 0;
  double relative_rms = 0, worst_steps = 0, mvalues_per_s = 0;
};

Result measure(QuantType type, const Rows& rows) {
  const QuantBlock block = quant_block(type);
  const int sub = type == QuantType::q6_k ? 16 : 32;
  const int bits = type == QuantType::q8_0   ? 8
                   : type == QuantType::q6_k ? 6
                   : type == QuantType::q5_0 || type == QuantType::q5_1 || type == QuantType::q5_k
                       ? 5
                       : 4;
  const auto codes = static_cast<float>((1 << bits) - 1);
  Result r{std::string(quant_type_name(type))};
  double err = 0.0, sum = 0.0, seconds = 0.0;
  for (size_t i = 0; i < rows.tensors.size(); ++i) {
    if (rows.row_length[i] % block.elements != 0) continue;
    const std::vector<float>& x = rows.tensors[i];
    const int64_t n_blocks = static_cast<int64_t>(x.size()) / block.elements;
    std::vector<uint8_t> q(static_cast<size_t>(n_blocks * block.bytes));
    std::vector<float> y(x.size());
    const auto t0 = Clock::now();
    quantize_blocks(type, x.data(), n_blocks, q.data());
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    dequantize_blocks(type, q.data(), n_blocks, y.data());
    for (size_t s = 0; s < x.size(); s += static_cast<size_t>(sub)) {
      float lo = 0.0f, hi = 0.0f;
      for (int l = 0; l < sub; ++l) {
        lo = std::min(lo, x[s + l]);
        hi = std::max(hi, x[s + l]);
      }
      const float step = (hi - lo) / codes;
      for (int l = 0; l < sub; ++l) {
        const double d = static_cast<double>(x[s + l]) - y[s + l];
        err += d * d;
        sum += static_cast<double>(x[s + l]) * x[s + l];
        if (step > 0.0f) r.worst_steps = std::max(r.worst_steps, std::fabs(d) / step);
      }
    }
    r.values += static_cast<int64_t>(x.size());
  }
  r.relative_rms = sum > 0.0 ? std::sqrt(err / sum) : 0.0;
  r.mvalues_per_s = seconds > 0.0 ? static_cast<double>(r.values) / seconds / 1e6 : 0.0;
  return r;
}

int run(const std::string& types, int64_t values, const std::string& dist, const std::string& file,
        const std::string& json_file) {
  const Rows rows = file.empty() ? random_rows(values, dist) : safetensors_rows(file);
  const std::string source = file.empty()
                                 ? fmt::format("{} random values ({})", values, dist)
                                 : fmt::format("{} ({} tensors)", file, rows.tensors.size());
  std::vector<std::vector<std::string>> table;
  nlohmann::json j = {{"source", source}, {"threads", ThreadPool::global().size()}};
  for (const std::string& name : bench::split_list(types)) {
    const auto type = quant_type_from_name(name);
    DSPARK_CHECK_KIND(invalid_input, type && quant_type_encodable(*type),
                      "--types: '{}' is not a type quantize writes (q8_0, q4_0, q4_1, q5_0, q5_1, "
                      "q4_k, q5_k, q6_k)",
                      name);
    const Result r = measure(*type, rows);
    if (r.values == 0) {
      table.push_back({r.type, "0", "-", "-", "-"});
      continue;
    }
    table.push_back({r.type, std::to_string(r.values), fmt::format("{:.4f}%", 100 * r.relative_rms),
                     fmt::format("{:.2f}", r.worst_steps), fmt::format("{:.1f}", r.mvalues_per_s)});
    j["types"][r.type] = {{"values", r.values},
                          {"relative_rms", r.relative_rms},
                          {"worst_error_steps", r.worst_steps},
                          {"mvalues_per_s", r.mvalues_per_s}};
  }
  std::printf(
      "%s, %d threads\n%s\n", source.c_str(), ThreadPool::global().size(),
      bench::format_table({"type", "values", "relative RMS", "worst (steps)", "Mvalues/s"}, table)
          .c_str());
  if (!json_file.empty()) std::ofstream(json_file) << j.dump(2) << "\n";
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace dspark

int main(int argc, char** argv) {
  CLI::App app("bench_quantize: error and speed of dspark quantize's block encoders");
  std::string types = "q4_k,q5_k,q6_k,q8_0,q4_0,q4_1,q5_0,q5_1", dist = "gaussian", file, json_file;
  int64_t values = int64_t{1} << 20;
  app.add_option("--types", types, "Comma-separated block types")->capture_default_str();
  app.add_option("--values", values, "Random values (a multiple of 256)")
      ->check(CLI::Range(int64_t{256}, int64_t{1} << 32))
      ->capture_default_str();
  app.add_option("--dist", dist, "Random values: gaussian (sigma 0.02) or t4 (Student's t, 4 dof)")
      ->check(CLI::IsMember({"gaussian", "t4"}))
      ->capture_default_str();
  app.add_option("--safetensors", file, "Quantize this file's 2-D float tensors instead");
  app.add_option("--json", json_file, "Also write the JSON result here");
  CLI11_PARSE(app, argc, argv);
  if (values % 256 != 0) {
    std::fprintf(stderr, "--values must be a multiple of 256\n");
    return 2;
  }
  try {
    return dspark::run(types, values, dist, file, json_file);
  } catch (const dspark::Error& e) {
    std::fprintf(stderr, "bench_quantize: %s\n", e.what());
    return 1;
  }
}
