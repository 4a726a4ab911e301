// bench_cpu_attention: the CPU paged_attention op (backend/cpu/kernels/attention.cpp) at decode and
// verify shapes over growing contexts, as a forward runs it: every call takes the next of
// --layers copies of the cache (default --model-layers: a forward's whole cache, which comes from
// memory or from the caches as it would in the model's decode step); us per call, ms per token of
// the --model-layers calls, and the K/V bytes read per second. --resident times one copy over and
// over (K/V from the caches: the kernel's arithmetic alone).
//
//   bench_cpu_attention [--heads 9] [--kv-heads 3] [--head-dim 64] [--contexts 256,1024,4096]
//                       [--queries 1,8] [--kv-dtype f32|bf16|f16] [--layers N] [--resident]
//                       [--model-layers 30] [--min-ms 300] [--json FILE]
// Defaults: the bundled SmolLM2-135M-Instruct's attention (9 heads, 3 KV heads of 64, 30 layers);
// --queries are the new tokens of the row (1 = decode, 8 = verify of 7 drafts). Threads: the
// pool's (DSPARK_THREADS).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/core/buffer.h"
#include "dspark/core/thread_pool.h"
#include "dspark/ops/attention.h"

namespace dspark::bench {
namespace {

constexpr int kPage = 16;
using Clock = std::chrono::steady_clock;

OwnedTensor host_i32(const std::vector<int32_t>& v) {
  return OwnedTensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}, Device::cpu());
}

// Values uniform in [-1, 1) from a cheap LCG, as `T`: scores of a few tenths, so the lanes' running
// maxima still move along the keys.
template <typename T>
OwnedTensor random_values(Shape shape, uint32_t seed) {
  std::vector<T> v(static_cast<size_t>(shape.numel()));
  uint32_t x = seed * 2654435761u + 12345u;
  for (T& e : v) {
    x = x * 1664525u + 1013904223u;
    e = from_f32<T>(static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
  return OwnedTensor::from_vector(v, shape, Device::cpu());
}

OwnedTensor random_cache(DType dtype, Shape shape, uint32_t seed) {
  if (dtype == DType::bf16) return random_values<bf16>(shape, seed);
  if (dtype == DType::f16) return random_values<f16>(shape, seed);
  return random_values<float>(shape, seed);
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  using namespace dspark;
  using namespace dspark::bench;
  int heads = 9, kv_heads = 3, head_dim = 64, layers = 0, model_layers = 30;
  std::string contexts_list = "256,1024,4096", queries_list = "1,8", dtype_arg = "f32", json_file;
  double min_ms = 300;
  bool resident = false;
  CLI::App app{"bench_cpu_attention: the CPU paged_attention at decode / verify shapes"};
  app.add_option("--heads", heads, "query heads")->check(CLI::Range(1, 256));
  app.add_option("--kv-heads", kv_heads, "KV heads (divides --heads)")->check(CLI::Range(1, 256));
  app.add_option("--head-dim", head_dim, "head dimension")->check(CLI::Range(8, 512));
  app.add_option("--contexts", contexts_list, "comma-separated cached tokens of the row");
  app.add_option("--queries", queries_list, "comma-separated new tokens of the row");
  app.add_option("--kv-dtype", dtype_arg, "the cache's dtype: f32, bf16 or f16");
  app.add_option("--layers", layers,
                 "copies of the cache the calls cycle through (default: --model-layers)")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--resident", resident, "one copy of the cache, called over and over");
  app.add_option("--model-layers", model_layers, "layers per token for the ms/token column")
      ->check(CLI::Range(1, 1000));
  app.add_option("--min-ms", min_ms, "timed milliseconds per configuration, at least")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--json", json_file, "also write the JSON result here");
  CLI11_PARSE(app, argc, argv);

  try {
    DSPARK_CHECK(dtype_arg == "f32" || dtype_arg == "bf16" || dtype_arg == "f16",
                 "--kv-dtype must be f32, bf16 or f16, not '{}'", dtype_arg);
    const DType dtype = dtype_from_name(dtype_arg);
    DSPARK_CHECK(heads % kv_heads == 0, "--heads {} is not a multiple of --kv-heads {}", heads,
                 kv_heads);
    Context ctx(Device::cpu());
    nlohmann::json j = {{"heads", heads},
                        {"kv_heads", kv_heads},
                        {"head_dim", head_dim},
                        {"kv_dtype", dtype_name(dtype)},
                        {"threads", ctx.pool().size()},
                        {"model_layers", model_layers},
                        {"resident", resident},
                        {"results", nlohmann::json::array()}};
    std::vector<std::vector<std::string>> table;
    for (const std::string& cs : split_list(contexts_list)) {
      for (const std::string& qs : split_list(queries_list)) {
        const int context = std::stoi(cs), nq = std::stoi(qs);
        DSPARK_CHECK(context >= 0 && nq >= 1, "bad context {} or queries {}", context, nq);
        const int kv_len = context + nq, n_pages = (kv_len + kPage - 1) / kPage;
        const Shape page_shape{n_pages, kPage, kv_heads, head_dim};
        const double kv_read = 2.0 * kv_len * kv_heads * head_dim * dtype_size(dtype);
        const int copies = resident ? 1 : layers > 0 ? layers : model_layers;
        std::vector<std::pair<OwnedTensor, OwnedTensor>> caches;
        for (int c = 0; c < copies; ++c) {
          const auto seed = static_cast<uint32_t>(2 * c + 1);
          caches.emplace_back(random_cache(dtype, page_shape, seed),
                              random_cache(dtype, page_shape, seed + 1));
        }
        std::vector<int32_t> pages(static_cast<size_t>(n_pages)), q_pos;
        for (int p = 0; p < n_pages; ++p) pages[static_cast<size_t>(p)] = p;
        for (int i = 0; i < nq; ++i) q_pos.push_back(context + i);
        const OwnedTensor page_indptr = host_i32({0, n_pages}), page_ids = host_i32(pages),
                          lens = host_i32({kv_len}), q_indptr = host_i32({0, nq}),
                          positions = host_i32(q_pos);
        const OwnedTensor q = random_values<float>(Shape{nq, heads, head_dim}, 7);
        const OwnedTensor out =
            OwnedTensor::zeros(DType::f32, Shape{nq, heads, head_dim}, Device::cpu());
        AttentionParams params;
        params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        auto call = [&](int64_t i) {
          const auto& c = caches[static_cast<size_t>(i % copies)];
          const PagedKv kv{c.first.view(), c.second.view(), page_indptr.view(), page_ids.view(),
                           lens.view()};
          paged_attention(ctx, q.view(), kv, q_indptr.view(), positions.view(), params, out.view());
        };
        for (int i = 0; i < std::min(copies, 64); ++i) call(i);  // warm-up
        // Batches of at least min_ms / 5 (and a whole cycle of copies); the fastest batch's mean.
        double best = 1e300;
        int64_t i = 0;
        for (int batch = 0; batch < 5; ++batch) {
          const auto t0 = Clock::now();
          int64_t calls = 0;
          double ms = 0;
          do {
            call(i++);
            ++calls;
            ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          } while (ms < min_ms / 5 || calls < copies);
          best = std::min(best, ms / static_cast<double>(calls));
        }
        const double gbs = kv_read / (best * 1e-3) / 1e9;
        j["results"].push_back({{"context", context},
                                {"queries", nq},
                                {"copies", copies},
                                {"kv_bytes", kv_read},
                                {"ms_per_call", best},
                                {"ms_per_token", best * model_layers},
                                {"gbs", gbs}});
        table.push_back({std::to_string(context), std::to_string(nq),
                         fmt::format("{:.2f}", kv_read / 1e6), std::to_string(copies),
                         fmt::format("{:.1f}", best * 1e3),
                         fmt::format("{:.3f}", best * model_layers), fmt::format("{:.1f}", gbs)});
      }
    }
    std::printf("bench_cpu_attention: %d heads / %d KV heads x %d, %s cache, %d threads%s\n", heads,
                kv_heads, head_dim, std::string(dtype_name(dtype)).c_str(), ctx.pool().size(),
                resident ? ", one resident copy" : "");
    const std::vector<std::string> header{
        "context", "queries", "KV MB", "copies", "us/call", fmt::format("ms x {}", model_layers),
        "GB/s"};
    std::printf("%s", format_table(header, table).c_str());
    if (!json_file.empty()) std::ofstream(json_file) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
