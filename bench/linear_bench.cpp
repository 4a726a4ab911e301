// bench_linear: the CUDA linear op at decode / verify / draft shapes, the small-M tensor-core path
// (backend/cuda/kernels/gemv.cu) against cuBLASLt, in one run: device time per call (CUDA events
// around a loop of calls), weight bytes streamed per second and that as a fraction of the copy
// bandwidth measured in the same run. Each shape cycles through enough copies of its weight to
// exceed the L2 cache several times, so every call reads its weight from HBM as in a real step.
//
//   bench_linear [--shapes 6144x4096,4096x4096,24576x4096,4096x12288,151936x4096]
//                [--m 1,2,4,8,16,17,32,33,48] [--dtype bf16] [--iters 200] [--autotune N]
//                [--fp8] [--json FILE]
// --fp8 adds the FP8 weight path (ops/linear_fp8.h: E4M3 codes with per-row scales, the drafter's
// --draft-fp8) on the same shapes; its GB/s counts the bytes it reads (1 per weight + the scales).
// At M <= 16 it times both FP8 kernels (backend/cuda/kernels/gemv_fp8.cu): the tile kernel and the
// stream kernel per (chunks per stage, row tiles) = "sUxRT" (DSPARK_FP8_STREAM=U
// DSPARK_FP8_STREAM_TILES=RT): s2, s4, s2x2 on the balanced grid, and s4, s2x2 with one CTA per
// slot ("slots", DSPARK_FP8_BALANCE=0); and the x-in-registers kernel (DSPARK_FP8_STREAM=x;
// K <= 4096, else the default kernel).
// At M = 1 it also times the one-row CUDA-core kernel (backend/cuda/kernels/gemv_m1.cu, the
// default for one row; DSPARK_CUDA_GEMV_M1): column "M=1 kernel". At every M it times the
// few-rows tensor-core kernel (backend/cuda/kernels/gemv_rows.cu, DSPARK_CUDA_GEMV_ROWS; opt-in;
// K <= 4096, else the column shows cuBLASLt's time) with x staged in shared memory ("rows
// kernel") and read from global memory ("rows, x global"), and the stream-K few-rows kernel
// (backend/cuda/kernels/gemv_streamk.cu, DSPARK_CUDA_GEMV_STREAMK; M <= 48 on sm_90, else
// cuBLASLt's time): column "stream-K". Consecutive calls of a programmatic kernel
// overlap (each requests its first weights while the previous call ends), as in a forward.
// The cuBLASLt column runs with every hand-written path off.
// --autotune N adds cuBLASLt with autotuned plans (backend/cuda/lt_plans.h: the fastest of up to N
// heuristic candidates per shape) and lists what each shape's autotuning chose.
// A shape is NxK (output features x input features); the defaults are the Qwen3-8B projections
// (fused QKV, o, fused gate/up, down) and its LM head.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/kernels.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/core/buffer.h"
#include "dspark/ops/linear_fp8.h"
#include "dspark/ops/matmul.h"

namespace dspark::bench {
namespace {

// Mean device milliseconds of one call, over `iters` calls of call(i) (i cycles through `copies`
// weight copies).
template <typename Call>
double time_loop(Context& ctx, size_t copies, int iters, Call call) {
  for (int i = 0; i < static_cast<int>(copies); ++i) call(i);  // warm-up, plans
  ctx.synchronize();
  cuda::Event start, stop;
  start.record(ctx.stream());
  for (int i = 0; i < iters; ++i) call(i);
  stop.record(ctx.stream());
  stop.synchronize();
  return static_cast<double>(stop.elapsed_ms_since(start)) / iters;
}

// Mean device milliseconds of one linear call, over `iters` calls cycling through `weights`.
double time_calls(Context& ctx, const std::vector<OwnedTensor>& weights, const Tensor& x,
                  const Tensor& y, int iters) {
  return time_loop(ctx, weights.size(), iters, [&](int i) {
    linear(ctx, x, weights[static_cast<size_t>(i) % weights.size()].view(), Tensor{}, y);
  });
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  using namespace dspark;
  using namespace dspark::bench;
  std::string shapes_list = "6144x4096,4096x4096,24576x4096,4096x12288,151936x4096";
  std::string m_list = "1,2,4,8,16,17,32,33,48", dtype_name_arg = "bf16", json_file;
  int iters = 200, autotune = 0;
  bool fp8 = false;
  CLI::App app{"bench_linear: small-M tensor-core linear vs cuBLASLt on CUDA"};
  app.add_option("--shapes", shapes_list, "comma-separated NxK weight shapes");
  app.add_option("--m", m_list, "comma-separated token counts (rows of x)");
  app.add_option("--dtype", dtype_name_arg, "bf16 or f16");
  app.add_option("--iters", iters, "timed calls per configuration")->check(CLI::Range(1, 100000));
  app.add_option("--autotune", autotune, "also time autotuned cuBLASLt plans (N candidates)")
      ->check(CLI::Range(0, 64));
  app.add_flag("--fp8", fp8, "also time the FP8 weight path (bf16 only)");
  app.add_option("--json", json_file, "also write the JSON result here");
  CLI11_PARSE(app, argc, argv);

  try {
    cuda::require_device(0);
    const DType dtype = dtype_from_name(dtype_name_arg);
    DSPARK_CHECK(dtype == DType::bf16 || dtype == DType::f16, "--dtype must be bf16 or f16");
    const std::vector<WeightShape> shapes = parse_weight_shapes(shapes_list);
    std::vector<int64_t> ms;
    for (const std::string& s : split_list(m_list)) ms.push_back(std::stoll(s));
    const cuda::DeviceInfo info = cuda::device_info(0);
    const double copy_bw = cuda::measure_copy_bandwidth(0);
    const int fp8_stream_setting = cuda::fp8_stream();
    const bool fp8_balanced_setting = cuda::fp8_balanced();
    Context ctx(Device::cuda(0));

    nlohmann::json j = {{"device_name", info.name},
                        {"dtype", dtype_name(dtype)},
                        {"copy_bandwidth_gbs", copy_bw / 1e9},
                        {"iters", iters},
                        {"results", nlohmann::json::array()}};
    std::vector<std::vector<std::string>> rows;
    for (const WeightShape& s : shapes) {
      const double bytes = static_cast<double>(s.n * s.k) * static_cast<double>(dtype_size(dtype));
      const size_t copies = std::clamp<size_t>(
          static_cast<size_t>(4.0 * static_cast<double>(info.l2_bytes) / bytes) + 1, 1, 64);
      std::vector<OwnedTensor> weights;
      for (size_t c = 0; c < copies; ++c)
        weights.push_back(random_16bit_tensor(dtype, Shape{s.n, s.k}, static_cast<uint32_t>(c + 1),
                                              Device::cuda(0)));
      std::vector<OwnedTensor> w8, scales;  // --fp8: E4M3 codes of every copy
      for (size_t c = 0; fp8 && c < copies; ++c) {
        w8.emplace_back(DType::u8, Shape{s.n, s.k}, Device::cuda(0));
        scales.emplace_back(DType::f32, Shape{s.n}, Device::cuda(0));
        quantize_rows_fp8(ctx, weights[c], w8.back(), scales.back());
      }
      for (int64_t m : ms) {
        const OwnedTensor x = random_16bit_tensor(dtype, Shape{m, s.k}, 99, Device::cuda(0));
        const OwnedTensor y = OwnedTensor::zeros(dtype, Shape{m, s.n}, Device::cuda(0));
        // cuBLASLt: every hand-written 16-bit path off (restored below).
        const bool m1_setting = cuda::m1_linear_enabled();
        const bool rows_setting = cuda::rows_linear_enabled();
        const bool streamk_setting = cuda::streamk_linear_enabled();
        cuda::set_streamk_linear(false);
        cuda::set_small_m_linear(false);
        cuda::set_m1_linear(false);
        cuda::set_rows_linear(false);
        const double cublas_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
        double tuned_ms = 0.0;
        if (autotune > 1) {
          cuda::set_linear_autotune(autotune);
          tuned_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
          cuda::set_linear_autotune(0);
        }
        cuda::set_small_m_linear(true);
        const double ours_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
        const double ours_gbs = bytes / (ours_ms * 1e-3) / 1e9;
        cuda::set_small_m_linear(false);
        double m1_ms = 0.0;
        if (m == 1) {
          cuda::set_m1_linear(true);
          m1_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
        }
        // The few-rows kernel (gemv_rows.cu; opt-in; where it declines, cuBLASLt's time), then
        // with x read from global memory in the MMA loop instead of shared memory.
        cuda::set_m1_linear(false);
        cuda::set_rows_linear(true);
        const double rows_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
        const bool rows_x_setting = cuda::rows_linear_x_global();
        cuda::set_rows_linear_x_global(true);
        const double rows_xg_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
        cuda::set_rows_linear_x_global(rows_x_setting);
        cuda::set_rows_linear(false);
        // The stream-K kernel (gemv_streamk.cu; every M it takes, M = 1 too).
        cuda::set_streamk_linear(true);
        const double streamk_ms = time_calls(ctx, weights, x.view(), y.view(), iters);
        const double streamk_gbs = bytes / (streamk_ms * 1e-3) / 1e9;
        cuda::set_streamk_linear(streamk_setting);
        cuda::set_rows_linear(rows_setting);
        cuda::set_m1_linear(m1_setting);
        const double rows_gbs = bytes / (rows_ms * 1e-3) / 1e9;
        const double cublas_gbs = bytes / (cublas_ms * 1e-3) / 1e9;
        j["results"].push_back({{"n", s.n},
                                {"k", s.k},
                                {"m", m},
                                {"weight_bytes", bytes},
                                {"small_m_ms", ours_ms},
                                {"small_m_gbs", ours_gbs},
                                {"small_m_fraction_of_copy", ours_gbs * 1e9 / copy_bw},
                                {"cublas_ms", cublas_ms},
                                {"cublas_gbs", cublas_gbs},
                                {"cublas_fraction_of_copy", cublas_gbs * 1e9 / copy_bw}});
        const double m1_gbs = m1_ms > 0 ? bytes / (m1_ms * 1e-3) / 1e9 : 0.0;
        j["results"].back()["rows_ms"] = rows_ms;
        j["results"].back()["rows_gbs"] = rows_gbs;
        j["results"].back()["rows_fraction_of_copy"] = rows_gbs * 1e9 / copy_bw;
        j["results"].back()["rows_x_global_ms"] = rows_xg_ms;
        j["results"].back()["streamk_ms"] = streamk_ms;
        j["results"].back()["streamk_gbs"] = streamk_gbs;
        j["results"].back()["streamk_fraction_of_copy"] = streamk_gbs * 1e9 / copy_bw;
        if (m1_ms > 0) {
          j["results"].back()["m1_ms"] = m1_ms;
          j["results"].back()["m1_gbs"] = m1_gbs;
          j["results"].back()["m1_fraction_of_copy"] = m1_gbs * 1e9 / copy_bw;
        }
        // The FP8 kernels for M <= 16 (cuda::set_fp8_stream): the tile kernel, and the stream
        // kernel per (chunks per stage, row tiles), with the balanced grid and (the last two)
        // with one CTA per slot (cuda::set_fp8_balanced(false)); larger M has the tile kernel
        // only.
        struct Fp8Variant {
          int stages, row_tiles;
          bool balanced;
        };
        static constexpr Fp8Variant kFp8Variants[] = {{0, 1, true}, {2, 1, true}, {4, 1, true},
                                                      {2, 2, true}, {8, 1, true}, {4, 1, false},
                                                      {2, 2, false}};
        constexpr int kVariants = static_cast<int>(std::size(kFp8Variants));
        std::vector<std::string> fp8_cells(kVariants, "-");
        for (int v = 0; fp8 && v < (m <= 16 ? kVariants : 1); ++v) {
          const Fp8Variant& fv = kFp8Variants[v];
          cuda::set_fp8_stream(fv.stages, fv.row_tiles);
          cuda::set_fp8_balanced(fv.balanced);
          const double fp8_ms = time_loop(ctx, copies, iters, [&](int i) {
            const size_t c = static_cast<size_t>(i) % copies;
            linear_fp8(ctx, x, w8[c], scales[c], Tensor{}, y);
          });
          const double fp8_gbs = static_cast<double>(s.n * (s.k + 4)) / (fp8_ms * 1e-3) / 1e9;
          const std::string key = v == 0 ? "fp8"
                                  : fv.stages == 8
                                      ? "fp8_xreg"
                                      : fmt::format("fp8_stream{}x{}{}", fv.stages, fv.row_tiles,
                                                    fv.balanced ? "" : "_slots");
          j["results"].back()[key + "_ms"] = fp8_ms;
          j["results"].back()[key + "_gbs"] = fp8_gbs;
          j["results"].back()[key + "_fraction_of_copy"] = fp8_gbs * 1e9 / copy_bw;
          fp8_cells[static_cast<size_t>(v)] =
              fmt::format("{:.1f} ({:.0f}%)", fp8_ms * 1e3, 100 * fp8_gbs * 1e9 / copy_bw);
        }
        cuda::set_fp8_balanced(fp8_balanced_setting);
        cuda::set_fp8_stream_raw(fp8_stream_setting);
        if (autotune > 1) {
          const double tuned_gbs = bytes / (tuned_ms * 1e-3) / 1e9;
          j["results"].back()["cublas_autotuned_ms"] = tuned_ms;
          j["results"].back()["cublas_autotuned_gbs"] = tuned_gbs;
        }
        std::vector<std::string> row = {
            fmt::format("{}x{}", s.n, s.k),
            std::to_string(m),
            fmt::format("{:.1f}", ours_ms * 1e3),
            fmt::format("{:.0f} ({:.0f}%)", ours_gbs, 100 * ours_gbs * 1e9 / copy_bw),
            fmt::format("{:.1f}", cublas_ms * 1e3),
            fmt::format("{:.0f} ({:.0f}%)", cublas_gbs, 100 * cublas_gbs * 1e9 / copy_bw),
            autotune > 1 ? fmt::format("{:.1f}", tuned_ms * 1e3) : std::string("-"),
            m1_ms > 0 ? fmt::format("{:.1f} ({:.0f}%)", m1_ms * 1e3, 100 * m1_gbs * 1e9 / copy_bw)
                      : std::string("-"),
            fmt::format("{:.1f} ({:.0f}%)", rows_ms * 1e3, 100 * rows_gbs * 1e9 / copy_bw),
            fmt::format("{:.1f}", rows_xg_ms * 1e3),
            fmt::format("{:.1f} ({:.0f}%)", streamk_ms * 1e3, 100 * streamk_gbs * 1e9 / copy_bw)};
        row.insert(row.end(), fp8_cells.begin(), fp8_cells.end());
        rows.push_back(std::move(row));
      }
    }
    std::printf("bench_linear on %s, %s, copy bandwidth %.0f GB/s (read + write)\n",
                info.name.c_str(), std::string(dtype_name(dtype)).c_str(), copy_bw / 1e9);
    std::printf("%s",
                format_table({"NxK", "M", "small-M us", "small-M GB/s (of copy)", "cuBLASLt us",
                              "cuBLASLt GB/s (of copy)", "autotuned us", "M=1 kernel us (of copy)",
                              "rows kernel us (of copy)", "rows, x global us",
                              "stream-K us (of copy)", "FP8 tile us (of copy)", "FP8 s2", "FP8 s4",
                              "FP8 s2x2", "FP8 x in regs", "FP8 s4 slots", "FP8 s2x2 slots"},
                             rows)
                    .c_str());
    if (autotune > 1) {  // what autotuning chose per shape (timed there after an L2 flush)
      j["autotune"] = nlohmann::json::array();
      for (const cuda::LinearPlanRecord& r : cuda::linear_plan_log()) {
        std::printf(
            "autotune M=%lld N=%lld K=%lld: %d candidates, first %.1f us (split-K %d), "
            "chosen #%d %.1f us (algo %d, tile %u, split-K %d, reduction %u)\n",
            static_cast<long long>(r.m), static_cast<long long>(r.n), static_cast<long long>(r.k),
            r.candidates, r.heuristic_us, r.heuristic_splitk, r.chosen, r.chosen_us, r.algo_id,
            r.tile, r.splitk, r.reduction);
        j["autotune"].push_back({{"m", r.m},
                                 {"n", r.n},
                                 {"k", r.k},
                                 {"candidates", r.candidates},
                                 {"chosen", r.chosen},
                                 {"heuristic_us", r.heuristic_us},
                                 {"chosen_us", r.chosen_us},
                                 {"algo_id", r.algo_id},
                                 {"tile", r.tile},
                                 {"splitk", r.splitk},
                                 {"reduction", r.reduction},
                                 {"heuristic_splitk", r.heuristic_splitk}});
      }
    }
    if (!json_file.empty()) std::ofstream(json_file) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
