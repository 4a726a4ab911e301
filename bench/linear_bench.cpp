// bench_linear: the CUDA linear op at decode / verify / draft shapes, on the kernel the backend
// picks for each shape (backend/cuda/policy/linear.h: the one-row kernel for M = 1 where it fits,
// else cuBLASLt): device time per call (CUDA events around a loop of calls), weight bytes
// streamed per second and that as a fraction of the copy bandwidth measured in the same run. Each
// shape cycles through enough copies of its weight to exceed the L2 cache several times, so every
// call reads its weight from HBM as in a real step. Consecutive calls of a programmatic kernel
// overlap (each requests its first weights while the previous call ends), as in a forward.
//
//   bench_linear [--shapes 6144x4096,4096x4096,24576x4096,4096x12288,151936x4096]
//                [--m 1,2,4,8,16,17,32,33,48] [--dtype bf16] [--iters 200] [--fp8]
//                [--quant Q4_K,Q6_K,Q8_0] [--json FILE]
// --fp8 adds the FP8 weight path (ops/linear_fp8.h: E4M3 codes with per-row scales, the drafter's
// --draft-fp8) on the same shapes, on the kernel policy/linear_fp8.h picks; its GB/s counts the
// bytes it reads (1 per weight + the scales); and the same codes with 128x128 block scales (a
// Hugging Face FP8 checkpoint's, WeightFormat::fp8_blocks: the M-invariant kernels).
// --quant adds block-quantized weights of those GGUF types (core/quant.h; random blocks with sane
// f16 scales) on the same shapes and rows, through linear's WeightMatrix overload on the kernel
// policy/linear_quant.h picks (the few-row dp4a kernel with its tiles and warps per row; the
// tensor-core kernel with its plan: slices of K x row groups, warps on K x row tiles in flight; or
// dequantize + cuBLASLt); its GB/s counts the blocks' bytes
// (quantized values and scales), and "vs dense" is the dense call's time over its time; the JSON
// also holds an FNV-1a digest of the last call's output bytes ("y_fnv1a"), to tell whether a kernel
// change kept the same bits.
// A shape is NxK (output features x input features); the defaults are the Qwen3-8B projections
// (fused QKV, o, fused gate/up, down) and its LM head.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cuda/policy/linear.h"
#include "dspark/backend/cuda/policy/linear_fp8.h"
#include "dspark/backend/cuda/policy/linear_quant.h"
#include "dspark/backend/cuda/runtime.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/buffer.h"
#include "dspark/core/quant.h"
#include "dspark/ops/linear_fp8.h"
#include "dspark/ops/matmul.h"

namespace dspark::bench {
namespace {

// FNV-1a over a host tensor's bytes.
uint64_t fnv1a(const Tensor& t) {
  const auto* b = static_cast<const uint8_t*>(t.data());
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

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

const char* kernel_name(cuda::LinearKernel k) {
  switch (k) {
    case cuda::LinearKernel::one_row:
      return "one-row";
    case cuda::LinearKernel::one_row_half:
      return "one-row, 8-warp CTAs";
    case cuda::LinearKernel::invariant:
      return "batch-invariant";
    case cuda::LinearKernel::cublaslt:
      break;
  }
  return "cuBLASLt";
}

// Random blocks of `q` for an [n, k] matrix (a cheap LCG: the values do not matter for timing),
// with every f16 scale set to a small normal number.
std::vector<uint8_t> random_quant_blocks(QuantType q, int64_t n, int64_t k, uint32_t seed) {
  const QuantBlock b = quant_block(q);
  const int64_t blocks = n * (k / b.elements);
  std::vector<uint8_t> data(static_cast<size_t>(blocks * b.bytes));
  uint32_t state = seed * 2654435761u + 1;
  for (uint8_t& v : data) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(state >> 24);
  }
  const f16 scale = f32_to_f16(0.002f);
  std::vector<int> halves;  // byte offsets of a block's f16 scales
  switch (q) {
    case QuantType::q4_0:
    case QuantType::q5_0:
    case QuantType::q8_0:
      halves = {0};
      break;
    case QuantType::q4_1:
    case QuantType::q5_1:
    case QuantType::q4_k:
    case QuantType::q5_k:
    case QuantType::q8_a:
    case QuantType::q4_a64:
    case QuantType::q4_a128:
    case QuantType::q8_a64:
    case QuantType::q8_a128:
      halves = {0, 2};
      break;
    case QuantType::q6_k:
      halves = {208};
      break;
  }
  for (int64_t i = 0; i < blocks; ++i)
    for (int off : halves) std::memcpy(data.data() + i * b.bytes + off, &scale, sizeof(scale));
  return data;
}

std::string quant_kernel_name(const cuda::LinearBlocksChoice& c) {
  if (c.kernel == cuda::LinearBlocksKernel::dequantize) return "dequantize + dense";
  if (c.kernel == cuda::LinearBlocksKernel::gemv) {
    return fmt::format("gemv {} tiles, {} warps/row", c.gemv_plan.tiles, c.gemv_plan.warps_k);
  }
  const cuda::QuantMmaPlan& p = c.plan;
  return fmt::format("mma {}x{} CTAs, {}x{} warps", p.slices, p.row_groups, p.warps_k, p.warps_r);
}

const char* kernel_name(cuda::Fp8Kernel k) {
  switch (k) {
    case cuda::Fp8Kernel::registers:
      return "x in registers";
    case cuda::Fp8Kernel::stream4:
      return "stream, stages of 4";
    case cuda::Fp8Kernel::stream2:
      return "stream, stages of 2";
    case cuda::Fp8Kernel::stream2_tiles2:
      return "stream, 2 x 2";
    case cuda::Fp8Kernel::tile:
      break;
  }
  return "tile";
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  using namespace dspark;
  using namespace dspark::bench;
  std::string shapes_list = "6144x4096,4096x4096,24576x4096,4096x12288,151936x4096";
  std::string m_list = "1,2,4,8,16,17,32,33,48", dtype_name_arg = "bf16", json_file;
  std::string quant_list;
  int iters = 200;
  bool fp8 = false;
  CLI::App app{"bench_linear: the CUDA linear op per shape against the copy bandwidth"};
  app.add_option("--shapes", shapes_list, "comma-separated NxK weight shapes");
  app.add_option("--m", m_list, "comma-separated token counts (rows of x)");
  app.add_option("--dtype", dtype_name_arg, "bf16 or f16");
  app.add_option("--iters", iters, "timed calls per configuration")->check(CLI::Range(1, 100000));
  app.add_flag("--fp8", fp8, "also time the FP8 weight path (bf16 only)");
  app.add_option("--quant", quant_list,
                 "also time block-quantized weights of these GGUF types (Q4_K,Q6_K,Q8_0,...)");
  app.add_option("--json", json_file, "also write the JSON result here");
  CLI11_PARSE(app, argc, argv);

  try {
    cuda::require_device(0);
    const DType dtype = dtype_from_name(dtype_name_arg);
    DSPARK_CHECK(dtype == DType::bf16 || dtype == DType::f16, "--dtype must be bf16 or f16");
    DSPARK_CHECK(!fp8 || dtype == DType::bf16, "--fp8 takes bf16 activations");
    const std::vector<WeightShape> shapes = parse_weight_shapes(shapes_list);
    std::vector<int64_t> ms;
    for (const std::string& s : split_list(m_list)) ms.push_back(std::stoll(s));
    std::vector<QuantType> quants;
    for (const std::string& name : split_list(quant_list)) {
      const std::optional<QuantType> q = quant_type_from_name(name);
      DSPARK_CHECK(q.has_value(),
                   "--quant: unknown type '{}' (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, "
                   "Q5_K, Q6_K)",
                   name);
      quants.push_back(*q);
    }
    const cuda::DeviceInfo info = cuda::device_info(0);
    const double copy_bw = cuda::measure_copy_bandwidth(0);
    Context ctx(Device::cuda(0));

    nlohmann::json j = {{"device_name", info.name},
                        {"dtype", dtype_name(dtype)},
                        {"copy_bandwidth_gbs", copy_bw / 1e9},
                        {"iters", iters},
                        {"results", nlohmann::json::array()}};
    std::vector<std::vector<std::string>> rows, quant_rows;
    std::map<std::pair<size_t, int64_t>, double> dense_ms;  // (shape, M) -> the dense call
    auto cell = [&](double call_ms, double bytes) {
      const double gbs = bytes / (call_ms * 1e-3) / 1e9;
      return fmt::format("{:.1f} us, {:.0f} GB/s ({:.0f}%)", call_ms * 1e3, gbs,
                         100 * gbs * 1e9 / copy_bw);
    };
    for (size_t si = 0; si < shapes.size(); ++si) {
      const WeightShape& s = shapes[si];
      const double bytes = static_cast<double>(s.n * s.k) * static_cast<double>(dtype_size(dtype));
      const size_t copies = std::clamp<size_t>(
          static_cast<size_t>(4.0 * static_cast<double>(info.l2_bytes) / bytes) + 1, 1, 64);
      std::vector<OwnedTensor> weights;
      for (size_t c = 0; c < copies; ++c)
        weights.push_back(random_16bit_tensor(dtype, Shape{s.n, s.k}, static_cast<uint32_t>(c + 1),
                                              Device::cuda(0)));
      std::vector<OwnedTensor> w8, scales;  // --fp8: E4M3 codes of every copy
      std::vector<WeightMatrix> w8_blocks;  // the same codes with block scales
      const OwnedTensor block_scales =
          fp8 ? OwnedTensor::from_vector(
                    std::vector<float>(
                        static_cast<size_t>(((s.n + 127) / 128) * ((s.k + 127) / 128)),
                        1.0f / 448.0f),
                    Shape{(s.n + 127) / 128, (s.k + 127) / 128}, Device::cuda(0))
              : OwnedTensor{};
      for (size_t c = 0; fp8 && c < copies; ++c) {
        w8.emplace_back(DType::u8, Shape{s.n, s.k}, Device::cuda(0));
        scales.emplace_back(DType::f32, Shape{s.n}, Device::cuda(0));
        quantize_rows_fp8(ctx, weights[c], w8.back(), scales.back());
        WeightMatrix w;
        w.format = WeightFormat::fp8_blocks;
        w.data = w8.back().view();
        w.scales = block_scales.view();
        w.n = s.n;
        w.k = s.k;
        w.block_n = w.block_k = 128;
        w8_blocks.push_back(w);
      }
      for (int64_t m : ms) {
        const OwnedTensor x = random_16bit_tensor(dtype, Shape{m, s.k}, 99, Device::cuda(0));
        const OwnedTensor y = OwnedTensor::zeros(dtype, Shape{m, s.n}, Device::cuda(0));
        const cuda::LinearShape shape{m, s.n, s.k, dtype, dtype, dtype, true};
        const cuda::LinearKernel kernel = cuda::choose_linear(shape, ctx.cuda_tuning());
        const double ms_call = time_loop(ctx, copies, iters, [&](int i) {
          linear(ctx, x, weights[static_cast<size_t>(i) % copies].view(), Tensor{}, y);
        });
        const double gbs = bytes / (ms_call * 1e-3) / 1e9;
        dense_ms[{si, m}] = ms_call;
        nlohmann::json r = {{"n", s.n},
                            {"k", s.k},
                            {"m", m},
                            {"weight_bytes", bytes},
                            {"kernel", kernel_name(kernel)},
                            {"ms", ms_call},
                            {"gbs", gbs},
                            {"fraction_of_copy", gbs * 1e9 / copy_bw}};
        std::vector<std::string> row = {fmt::format("{}x{}", s.n, s.k),
                                        std::to_string(m),
                                        kernel_name(kernel),
                                        cell(ms_call, bytes),
                                        "-",
                                        "-"};
        if (fp8) {
          const cuda::Fp8Kernel fk =
              cuda::choose_linear_fp8(std::min<int64_t>(m, 64), s.n, s.k, ctx.cuda_caps());
          const double fp8_ms = time_loop(ctx, copies, iters, [&](int i) {
            const size_t c = static_cast<size_t>(i) % copies;
            linear_fp8(ctx, x, w8[c], scales[c], Tensor{}, y);
          });
          const double fp8_bytes = static_cast<double>(s.n * (s.k + 4));
          const double fp8_gbs = fp8_bytes / (fp8_ms * 1e-3) / 1e9;
          r["fp8_kernel"] = kernel_name(fk);
          r["fp8_ms"] = fp8_ms;
          r["fp8_gbs"] = fp8_gbs;
          r["fp8_fraction_of_copy"] = fp8_gbs * 1e9 / copy_bw;
          row[4] = kernel_name(fk);
          row[5] = cell(fp8_ms, fp8_bytes);
          const double blocks_ms = time_loop(ctx, copies, iters, [&](int i) {
            linear(ctx, x, w8_blocks[static_cast<size_t>(i) % copies], Tensor{}, y);
          });
          const double blocks_bytes = static_cast<double>(s.n * s.k);
          r["fp8_blocks_kernel"] = kernel_name(
              cuda::choose_linear_fp8(std::min<int64_t>(m, 64), s.n, s.k, ctx.cuda_caps(), true));
          r["fp8_blocks_ms"] = blocks_ms;
          r["fp8_blocks_fraction_of_copy"] = blocks_bytes / (blocks_ms * 1e-3) / copy_bw;
          row.push_back(cell(blocks_ms, blocks_bytes));
        }
        j["results"].push_back(std::move(r));
        rows.push_back(std::move(row));
      }
      weights.clear();
      for (QuantType q : quants) {
        const int64_t row_bytes = quant_row_bytes(q, s.k);
        const double q_bytes = static_cast<double>(s.n) * static_cast<double>(row_bytes);
        const size_t q_copies = std::clamp<size_t>(
            static_cast<size_t>(4.0 * static_cast<double>(info.l2_bytes) / q_bytes) + 1, 1, 64);
        const std::vector<uint8_t> host = random_quant_blocks(q, s.n, s.k, 7);
        std::vector<OwnedTensor> blocks;
        std::vector<WeightMatrix> matrices;
        for (size_t c = 0; c < q_copies; ++c) {
          blocks.push_back(OwnedTensor::from_vector(host, Shape{s.n, row_bytes}, Device::cuda(0)));
          WeightMatrix w;
          w.format = WeightFormat::blocks;
          w.quant = q;
          w.data = blocks.back().view();
          w.n = s.n;
          w.k = s.k;
          matrices.push_back(w);
        }
        for (int64_t m : ms) {
          const OwnedTensor x = random_16bit_tensor(dtype, Shape{m, s.k}, 99, Device::cuda(0));
          const OwnedTensor y = OwnedTensor::zeros(dtype, Shape{m, s.n}, Device::cuda(0));
          const cuda::LinearBlocksChoice choice = cuda::choose_linear_blocks(
              cuda::LinearBlocksShape{m, s.n, s.k, q, dtype, dtype, true}, ctx.cuda_caps(),
              ctx.cuda_tuning());
          const double q_ms = time_loop(ctx, q_copies, iters, [&](int i) {
            linear(ctx, x, matrices[static_cast<size_t>(i) % q_copies], Tensor{}, y);
          });
          const double q_gbs = q_bytes / (q_ms * 1e-3) / 1e9;
          const auto dense = dense_ms.find({si, m});
          const OwnedTensor y_host = OwnedTensor::copy_of(y.view(), Device::cpu());
          nlohmann::json r = {{"n", s.n},
                              {"k", s.k},
                              {"m", m},
                              {"quant", std::string(quant_type_name(q))},
                              {"weight_bytes", q_bytes},
                              {"kernel", quant_kernel_name(choice)},
                              {"ms", q_ms},
                              {"gbs", q_gbs},
                              {"fraction_of_copy", q_gbs * 1e9 / copy_bw},
                              {"y_fnv1a", fmt::format("{:016x}", fnv1a(y_host.view()))}};
          if (choice.kernel == cuda::LinearBlocksKernel::mma) {
            const cuda::QuantMmaPlan& p = choice.plan;
            r["plan"] = {{"slices", p.slices},
                         {"slice_sbs", p.slice_sbs},
                         {"warps_k", p.warps_k},
                         {"warps_r", p.warps_r},
                         {"tiles_per_cta", p.tiles_per_cta},
                         {"row_groups", p.row_groups},
                         {"smem_bytes", p.smem_bytes}};
          }
          if (dense != dense_ms.end()) r["dense_ms"] = dense->second;
          j["quant_results"].push_back(std::move(r));
          quant_rows.push_back(
              {fmt::format("{}x{}", s.n, s.k), std::to_string(m), std::string(quant_type_name(q)),
               quant_kernel_name(choice), cell(q_ms, q_bytes),
               dense == dense_ms.end() ? "-" : fmt::format("{:.2f}x", dense->second / q_ms)});
        }
      }
    }
    std::printf("bench_linear on %s, %s, copy bandwidth %.0f GB/s (read + write)\n",
                info.name.c_str(), std::string(dtype_name(dtype)).c_str(), copy_bw / 1e9);
    for (auto& row : rows)
      if (row.size() < 7) row.push_back("-");
    std::printf("%s", format_table({"NxK", "M", "kernel", "time, GB/s (of copy)", "FP8 kernel",
                                    "FP8 time, GB/s (of copy)", "FP8 128x128 blocks"},
                                   rows)
                          .c_str());
    if (!quant_rows.empty()) {
      std::printf("\nblock-quantized weights (GB/s of the blocks' bytes)\n");
      std::printf("%s",
                  format_table({"NxK", "M", "type", "kernel", "time, GB/s (of copy)", "vs dense"},
                               quant_rows)
                      .c_str());
    }
    if (!json_file.empty()) std::ofstream(json_file) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
