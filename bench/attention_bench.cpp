// bench_attention: the CUDA paged_attention op at decode / verify / draft-block shapes over long
// contexts, as the backend runs it (backend/cuda/policy/attention.h: kernel, key splits and their
// merge; printed per configuration): device time per call (a loop of calls captured in one CUDA
// graph, the split merge included; also enqueued eagerly, where the host's per-call work can
// dominate short calls), the K/V bytes read per second and that as a fraction of the copy
// bandwidth measured in the same run. Each configuration cycles through enough copies of its cache
// (one per "layer") to exceed the L2 cache several times, so every call reads its K/V from HBM as
// in a real step.
//
//   bench_attention [--heads 32] [--kv-heads 8] [--head-dim 128] [--mla]
//                   [--contexts 1024,4096,16384] [--queries 1,17,33] [--rows 1] [--non-causal]
//                   [--dtype bf16] [--iters 100] [--json FILE]
// Defaults: the Qwen3-8B attention (32 heads, 8 KV heads, head_dim 128); --queries are the new
// tokens per row (1 = decode, 17 = verify of 16 drafts); --non-causal times a drafter's block.
// --mla: MLA's absorbed form as model/mla.cpp calls it, --heads query heads over one KV head of
// 576 (a latent of 512 and a rope key of 64) whose V pages are its K pages (read once).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/graph.h"
#include "dspark/backend/cuda/policy/attention.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/buffer.h"
#include "dspark/ops/attention.h"

namespace dspark::bench {
namespace {

constexpr int kPage = 16;

struct Shape4 {
  int heads, kv_heads, head_dim;
};

// One "layer": a paged cache holding `rows` rows of `kv_len` keys each (pages in order); v is
// empty where V is K (--mla).
struct LayerCache {
  OwnedTensor k, v;
};

// Mean milliseconds of one paged_attention call, cycling through `layers`: `graph` replays the
// calls captured in one CUDA graph (device time, launch gaps included, no host work); otherwise
// they are enqueued eagerly (the host's per-call work shows when it is the slower side).
double time_calls(Context& ctx, const std::vector<LayerCache>& layers, const Tensor& q,
                  const Tensor& out, const OwnedTensor& page_indptr, const OwnedTensor& pages,
                  const OwnedTensor& kv_lens, const OwnedTensor& q_indptr, const OwnedTensor& q_pos,
                  const AttentionParams& params, int iters, bool graph) {
  auto call = [&](int i) {
    const LayerCache& l = layers[static_cast<size_t>(i) % layers.size()];
    const Tensor& v = l.v.view().defined() ? l.v.view() : l.k.view();
    const PagedKv kv{l.k.view(), v, page_indptr.view(), pages.view(), kv_lens.view()};
    paged_attention(ctx, q, kv, q_indptr.view(), q_pos.view(), params, out);
  };
  auto calls = [&] {
    for (int i = 0; i < iters; ++i) call(i);
  };
  for (int i = 0; i < static_cast<int>(layers.size()); ++i) call(i);  // warm-up, scratch
  ctx.synchronize();
  cuda::Graph g;
  if (graph) {
    g = cuda::Graph::capture(ctx, calls);
    g.launch(ctx);
    ctx.synchronize();
  }
  cuda::Event start, stop;
  start.record(ctx.stream());
  if (graph)
    g.launch(ctx);
  else
    calls();
  stop.record(ctx.stream());
  stop.synchronize();
  return static_cast<double>(stop.elapsed_ms_since(start)) / iters;
}

const char* merge_name(cuda::SplitMerge m) {
  switch (m) {
    case cuda::SplitMerge::last_cta:
      return "last CTA";
    case cuda::SplitMerge::cluster:
      return "cluster";
    case cuda::SplitMerge::combine:
      return "combine kernel";
    case cuda::SplitMerge::none:
      break;
  }
  return "-";
}

OwnedTensor device_i32(const std::vector<int32_t>& v) {
  return OwnedTensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}, Device::cuda(0));
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  using namespace dspark;
  using namespace dspark::bench;
  Shape4 s{32, 8, 128};
  std::string contexts_list = "1024,4096,16384", queries_list = "1,17,33", dtype_arg = "bf16";
  std::string json_file;
  int rows = 1, iters = 100;
  bool non_causal = false, mla = false;
  CLI::App app{"bench_attention: paged_attention on CUDA against the copy bandwidth"};
  app.add_option("--heads", s.heads, "query heads")->check(CLI::Range(1, 256));
  app.add_option("--kv-heads", s.kv_heads, "KV heads (divides --heads)")->check(CLI::Range(1, 256));
  app.add_option("--head-dim", s.head_dim, "head dimension")->check(CLI::Range(8, 256));
  app.add_flag("--mla", mla,
               "MLA's absorbed form: one KV head of 576 (latent 512 + rope key 64) that is both K "
               "and V; overrides --kv-heads and --head-dim");
  app.add_option("--contexts", contexts_list, "comma-separated cached tokens per row");
  app.add_option("--queries", queries_list, "comma-separated new tokens per row");
  app.add_option("--rows", rows, "rows (requests) in the batch")->check(CLI::Range(1, 256));
  app.add_flag("--non-causal", non_causal, "every query sees the whole row (a drafter's block)");
  app.add_option("--dtype", dtype_arg, "cache / query dtype: bf16 or f16");
  app.add_option("--iters", iters, "timed calls per configuration")->check(CLI::Range(1, 100000));
  app.add_option("--json", json_file, "also write the JSON result here");
  CLI11_PARSE(app, argc, argv);
  if (mla) {
    s.kv_heads = 1;
    s.head_dim = 576;
  }

  try {
    cuda::require_device(0);
    const DType dtype = dtype_from_name(dtype_arg);
    DSPARK_CHECK(dtype == DType::bf16 || dtype == DType::f16, "--dtype must be bf16 or f16");
    DSPARK_CHECK(s.heads % s.kv_heads == 0, "--heads {} is not a multiple of --kv-heads {}",
                 s.heads, s.kv_heads);
    const cuda::DeviceInfo info = cuda::device_info(0);
    const double copy_bw = cuda::measure_copy_bandwidth(0);
    Context ctx(Device::cuda(0));
    nlohmann::json j = {{"device_name", info.name},
                        {"dtype", dtype_name(dtype)},
                        {"heads", s.heads},
                        {"kv_heads", s.kv_heads},
                        {"head_dim", s.head_dim},
                        {"mla", mla},
                        {"rows", rows},
                        {"causal", !non_causal},
                        {"copy_bandwidth_gbs", copy_bw / 1e9},
                        {"results", nlohmann::json::array()}};
    std::vector<std::vector<std::string>> table;
    for (const std::string& cs : split_list(contexts_list)) {
      for (const std::string& qs : split_list(queries_list)) {
        const int context = std::stoi(cs), nq = std::stoi(qs);
        DSPARK_CHECK(context >= 0 && nq >= 1, "bad context {} or queries {}", context, nq);
        const int kv_len = context + nq;
        const int pages_per_row = (kv_len + kPage - 1) / kPage;
        std::vector<int32_t> page_indptr{0}, pages, lens, q_indptr{0}, q_pos;
        for (int r = 0; r < rows; ++r) {
          for (int p = 0; p < pages_per_row; ++p) pages.push_back(r * pages_per_row + p);
          page_indptr.push_back(page_indptr.back() + pages_per_row);
          lens.push_back(kv_len);
          q_indptr.push_back(q_indptr.back() + nq);
          for (int i = 0; i < nq; ++i) q_pos.push_back(context + i);
        }
        const int64_t n_pages = static_cast<int64_t>(pages.size());
        const Shape page_shape{n_pages, kPage, s.kv_heads, s.head_dim};
        const double tensors = mla ? 1.0 : 2.0;  // K and V, or the latent as both
        const double cache_bytes = tensors * static_cast<double>(page_shape.numel() * 2);
        const double kv_read = tensors * rows * kv_len * s.kv_heads * s.head_dim * 2.0;
        const size_t copies = std::clamp<size_t>(
            static_cast<size_t>(4.0 * static_cast<double>(info.l2_bytes) / cache_bytes) + 1, 2, 64);
        std::vector<LayerCache> layers;
        for (size_t c = 0; c < copies; ++c) {
          const auto seed = static_cast<uint32_t>(2 * c + 1);
          layers.push_back(
              {random_16bit_tensor(dtype, page_shape, seed, Device::cuda(0)),
               mla ? OwnedTensor{}
                   : random_16bit_tensor(dtype, page_shape, seed + 1, Device::cuda(0))});
        }
        const int64_t n_tokens = int64_t{rows} * nq;
        const OwnedTensor q = random_16bit_tensor(
            dtype, dspark::Shape{n_tokens, s.heads, s.head_dim}, 7, Device::cuda(0));
        const OwnedTensor out = OwnedTensor::zeros(
            dtype, dspark::Shape{n_tokens, s.heads, s.head_dim}, Device::cuda(0));
        const OwnedTensor d_indptr = device_i32(page_indptr), d_pages = device_i32(pages),
                          d_lens = device_i32(lens), d_qi = device_i32(q_indptr),
                          d_qp = device_i32(q_pos);
        AttentionParams params;
        params.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
        params.causal = !non_causal;
        const cuda::AttentionShape shape{n_tokens, s.heads, s.kv_heads, s.head_dim,
                                         rows,     n_pages, kPage};
        const cuda::AttentionPlan plan = cuda::plan_attention(
            shape, cuda::attention_on_tensor_cores(dtype, dtype, s.head_dim, true, mla),
            ctx.cuda_caps(), ctx.cuda_tuning());
        const double graphed_ms = time_calls(ctx, layers, q.view(), out.view(), d_indptr, d_pages,
                                             d_lens, d_qi, d_qp, params, iters, true);
        const double eager_ms = time_calls(ctx, layers, q.view(), out.view(), d_indptr, d_pages,
                                           d_lens, d_qi, d_qp, params, iters, false);
        const double gbs = kv_read / (graphed_ms * 1e-3) / 1e9;
        const char* kernel =
            plan.kernel == cuda::AttentionKernel::tensor_core ? "tensor cores" : "CUDA cores";
        j["results"].push_back({{"context", context},
                                {"queries", nq},
                                {"kernel", kernel},
                                {"splits", plan.n_splits},
                                {"merge", merge_name(plan.merge)},
                                {"kv_bytes", kv_read},
                                {"us", graphed_ms * 1e3},
                                {"fraction_of_copy", gbs * 1e9 / copy_bw},
                                {"eager_us", eager_ms * 1e3}});
        table.push_back({std::to_string(context), std::to_string(nq),
                         fmt::format("{:.1f}", kv_read / 1e6), kernel,
                         std::to_string(plan.n_splits), merge_name(plan.merge),
                         fmt::format("{:.1f}", graphed_ms * 1e3),
                         fmt::format("{:.0f} ({:.0f}%)", gbs, 100 * gbs * 1e9 / copy_bw),
                         fmt::format("{:.1f}", eager_ms * 1e3)});
      }
    }
    std::printf(
        "bench_attention on %s, %s, %d heads / %d KV heads x %d, %d row(s), %s; copy bandwidth "
        "%.0f GB/s\n",
        info.name.c_str(), std::string(dtype_name(dtype)).c_str(), s.heads, s.kv_heads, s.head_dim,
        rows, non_causal ? "non-causal" : "causal", copy_bw / 1e9);
    const std::vector<std::string> header{"context",    "queries",        "KV MB",
                                          "kernel",     "splits",         "merge",
                                          "graphed us", "GB/s (of copy)", "eager us"};
    std::printf("%s", format_table(header, table).c_str());
    if (!json_file.empty()) std::ofstream(json_file) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
