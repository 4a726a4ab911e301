// bench_cpu_gemm: the CPU small-M matrix product (backend/cpu/kernels/small_m_gemm.h) against
// OpenBLAS (sgemv for M = 1, sgemm otherwise), y[M, N] = x[M, K] . w[N, K]^T, f32.
//   - per shape (N x K) and M: ms per call and the weight bytes streamed per second. Weights are
//     taken from a pool larger than the last-level cache (--pool-mb), a new window every call, so
//     every call reads its weight from memory as a decode step does;
//   - "forward": every projection of a SmolLM2-135M-shaped target (30 layers of fused qkv
//     960x576, o 576x576, fused gate_up 3072x576, down 576x1536, then the 49152x576 LM head),
//     538 MB of distinct f32 weights, one pass per M: the matrix part of a decode step (M = 1) and
//     of a verify forward (M = gamma + 1);
//   - the thread pool's cost of one parallel_for with an empty body;
//   - with --quant TYPES: the same for block-quantized weights (backend/cpu/kernels/quant_gemm.h)
//     of each type (GB/s counts the quantized bytes), and the SmolLM2-135M forward as the bundled
//     Q4_1 GGUF holds it: every projection in Q4_1 plus the tied Q8_0 LM head (49152 x 576),
//     97 MB per token, once with q/k/v and gate/up fused (121 calls) and once as separate
//     matrices as in the file (211 calls): the per-token linear time that bounds decode tok/s.
//
//   - with --fp8-blocks: the same for FP8 block-scaled weights (E4M3 codes, one f32 scale per
//     128 x 128 block, as Hugging Face FP8 checkpoints hold them: backend/cpu/kernels.h's
//     linear_fp8_blocks), f32 x and y; GB/s counts the codes and scales;
//   - with --cpu-time (and DSPARK_THREADS=1): the calling thread's CPU time instead of the wall
//     clock, so that other processes on a shared machine hardly move the figures (they still
//     share the caches and the memory bus).
//
//   bench_cpu_gemm [--m 1,2,4,8,16] [--shapes 576x576,...] [--isa automatic|portable]
//                  [--w-dtype f32|bf16] [--pool-mb 256] [--min-ms 300] [--no-forward]
//                  [--huge-pages] [--quant q4_1,q8_0,...] [--fp8-blocks] [--no-f32] [--cpu-time]
//                  [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "dspark/backend/context.h"
#include "dspark/backend/cpu/kernels.h"
#include "dspark/backend/cpu/kernels/quant_gemm.h"
#include "dspark/backend/cpu/kernels/quant_pack.h"
#include "dspark/backend/cpu/kernels/small_m_gemm.h"
#include "dspark/core/quant.h"
#include "dspark/core/thread_pool.h"

#include <sys/mman.h>

#if DSPARK_HAVE_CBLAS
#include <cblas.h>
#endif

namespace dspark::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The clock of time_calls: wall (steady) or, with --cpu-time, the calling thread's CPU time.
bool g_cpu_time = false;
double clock_ms() {
  if (!g_cpu_time)
    return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// f32 storage from mmap, optionally backed by transparent huge pages (madvise), filled with
// `value`.
class Floats {
 public:
  Floats(size_t n, bool huge, float value) : n_(n) {
    constexpr size_t kHuge = size_t{2} << 20;
    bytes_ = (std::max<size_t>(n, 1) * sizeof(float) + kHuge - 1) / kHuge * kHuge;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    DSPARK_CHECK(p != MAP_FAILED, "mmap of {} bytes failed", bytes_);
    if (huge) madvise(p, bytes_, MADV_HUGEPAGE);
    p_ = static_cast<float*>(p);
    std::fill(p_, p_ + n_, value);
  }
  ~Floats() { munmap(p_, bytes_); }
  Floats(const Floats&) = delete;
  Floats& operator=(const Floats&) = delete;
  float* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  float* p_ = nullptr;
  size_t n_ = 0, bytes_ = 0;
};

// y[m, s.n] = x[m, s.k] . w^T with dense rows.
cpu::SmallGemmArgs gemm_args(const float* x, const void* w, DType w_dtype, float* y, int64_t m,
                             const WeightShape& s) {
  cpu::SmallGemmArgs g;
  g.x = x;
  g.ldx = s.k;
  g.w = w;
  g.w_dtype = w_dtype;
  g.y = y;
  g.ldy = s.n;
  g.m = m;
  g.n = s.n;
  g.k = s.k;
  return g;
}

void openblas(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y) {
#if DSPARK_HAVE_CBLAS
  if (m == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k), 1.0f,
                w, static_cast<blasint>(k), x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(k),
                w, static_cast<blasint>(k), 0.0f, y, static_cast<blasint>(n));
  }
#else
  (void)m, (void)n, (void)k, (void)x, (void)w, (void)y;
#endif
}

// Runs `call(i)` (i = 0, 1, ...) in 5 batches of at least min_ms / 5 each (3 calls at least),
// after 2 warm-up calls; returns ms per call of the fastest batch (the machine is shared: other
// jobs only ever make a batch slower).
template <typename F>
double time_calls(double min_ms, F&& call) {
  call(0);
  call(1);
  int64_t i = 2;
  double best = 1e300;
  for (int batch = 0; batch < 5; ++batch) {
    int64_t calls = 0;
    const double t0 = clock_ms();
    double elapsed = 0;
    while (calls < 3 || elapsed < min_ms / 5) {
      call(i++);
      ++calls;
      elapsed = clock_ms() - t0;
    }
    best = std::min(best, elapsed / static_cast<double>(calls));
  }
  return best;
}

struct Args {
  std::string m_list = "1,2,4,8,16";
  std::string shapes = "576x576,192x576,960x576,1536x576,3072x576,576x1536,49152x576,49152x48";
  std::string isa = "automatic";
  std::string w_dtype = "f32";
  int pool_mb = 256;
  double min_ms = 300;
  bool no_forward = false;
  bool huge_pages = false;
  std::string quant;  // quantized types to time ("" = none)
  bool fp8_blocks = false;
  bool no_f32 = false;
  bool cpu_time = false;
  std::string json_file;
};

// Bytes from mmap (optionally transparent huge pages) holding random blocks of `type` whose f16
// scales are finite and of realistic size (so the arithmetic is that of real weights).
class QuantBytes {
 public:
  QuantBytes(QuantType type, size_t bytes, bool huge, uint32_t seed) {
    constexpr size_t kHuge = size_t{2} << 20;
    const QuantBlock qb = quant_block(type);
    bytes =
        std::max<size_t>(bytes / static_cast<size_t>(qb.bytes), 1) * static_cast<size_t>(qb.bytes);
    n_ = bytes;
    mapped_ = (bytes + kHuge - 1) / kHuge * kHuge;
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    DSPARK_CHECK(p != MAP_FAILED, "mmap of {} bytes failed", mapped_);
    if (huge) madvise(p, mapped_, MADV_HUGEPAGE);
    p_ = static_cast<uint8_t*>(p);
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n_; i += 8) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::memcpy(p_ + i, &state, std::min<size_t>(8, n_ - i));
    }
    const uint16_t d = f32_to_f16(0.01f).bits, m = f32_to_f16(-0.05f).bits;
    std::vector<int> d_at = {0}, m_at;
    if (type == QuantType::q4_1 || type == QuantType::q5_1 || type == QuantType::q4_k ||
        type == QuantType::q5_k || quant_unit_type(type) != type)
      m_at = {2};
    if (type == QuantType::q6_k) d_at = {208};
    for (size_t b = 0; b + static_cast<size_t>(qb.bytes) <= n_;
         b += static_cast<size_t>(qb.bytes)) {
      for (int o : d_at) std::memcpy(p_ + b + o, &d, 2);
      for (int o : m_at) std::memcpy(p_ + b + o, &m, 2);
    }
  }
  ~QuantBytes() { munmap(p_, mapped_); }
  QuantBytes(const QuantBytes&) = delete;
  QuantBytes& operator=(const QuantBytes&) = delete;
  const uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0, mapped_ = 0;
};

cpu::QuantGemmArgs quant_args(const float* x, const uint8_t* w, QuantType type, float* y, int64_t m,
                              const WeightShape& s, cpu::QuantGemmIsa isa) {
  cpu::QuantGemmArgs g;
  g.x = x;
  g.x_dtype = DType::f32;
  g.ldx = s.k;
  g.w = w;
  g.quant = type;
  // As a model loaded on the CPU holds them (the bytes are random: either layout reads them).
  g.packed = isa != cpu::QuantGemmIsa::portable;
  g.y = y;
  g.y_dtype = DType::f32;
  g.ldy = s.n;
  g.m = m;
  g.n = s.n;
  g.k = s.k;
  return g;
}

// FP8 block-scaled weights: per shape (K a multiple of 128) and M, random E4M3 codes (no NaN)
// and scales from a pool larger than the caches, a new window every call.
void run_fp8_blocks(const Args& a, const std::vector<int64_t>& ms,
                    const std::vector<WeightShape>& shapes, nlohmann::json& out) {
  constexpr int64_t kBlock = 128;
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  const size_t pool_bytes = static_cast<size_t>(a.pool_mb) << 20;
  std::vector<uint8_t> codes(pool_bytes);
  std::vector<float> x(static_cast<size_t>(max_m * 16384)), y(static_cast<size_t>(max_m * 65536));
  {
    std::mt19937 gen(5);
    for (uint8_t& c : codes) {
      c = static_cast<uint8_t>(gen());
      if ((c & 0x7F) == 0x7F) c = static_cast<uint8_t>(c ^ 1);  // no NaN
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(gen);
  }
  Context ctx(Device::cpu());
  std::vector<std::vector<std::string>> rows;
  nlohmann::json jf = nlohmann::json::array();
  for (const WeightShape& s : shapes) {
    if (s.k % kBlock != 0 || s.n % kBlock != 0 || s.k > 16384 || s.n > 65536) continue;
    const auto wbytes = static_cast<size_t>(s.n * s.k);
    if (wbytes > codes.size()) continue;
    const size_t windows = std::max<size_t>(1, codes.size() / wbytes);
    std::vector<float> scales(static_cast<size_t>((s.n / kBlock) * (s.k / kBlock)), 1.0f / 448);
    WeightMatrix w;
    w.format = WeightFormat::fp8_blocks;
    w.scales = Tensor(scales.data(), DType::f32, Shape{s.n / kBlock, s.k / kBlock});
    w.n = s.n;
    w.k = s.k;
    w.block_n = kBlock;
    w.block_k = kBlock;
    double t1 = 0;
    for (const int64_t m : ms) {
      const Tensor xt(x.data(), DType::f32, Shape{m, s.k});
      const Tensor yt(y.data(), DType::f32, Shape{m, s.n});
      const double t = time_calls(a.min_ms, [&](int64_t i) {
        w.data = Tensor(codes.data() + (static_cast<size_t>(i) % windows) * wbytes, DType::u8,
                        Shape{s.n, s.k});
        cpu::linear_fp8_blocks(ctx, xt, w, Tensor(), yt);
      });
      if (m == ms.front()) t1 = t;
      const double bytes = static_cast<double>(wbytes + scales.size() * sizeof(float));
      const double gbs = bytes / (t * 1e6);
      rows.push_back({fmt::format("{}x{}", s.n, s.k), std::to_string(m), fmt::format("{:.4f}", t),
                      fmt::format("{:.1f}", gbs), fmt::format("{:.2f}", t / t1)});
      jf.push_back({{"n", s.n}, {"k", s.k}, {"m", m}, {"ms", t}, {"gbs", gbs}});
    }
  }
  if (!rows.empty()) {
    fmt::print("\nFP8 block-scaled weights (128 x 128 blocks):\n{}\n",
               format_table({"N x K", "M", "ms", "GB/s", "/ first M"}, rows));
  }
  out["fp8_blocks_shapes"] = jf;
}

// The quantized part: per type, shape and M; then the SmolLM2-135M Q4_1 forward.
void run_quant(const Args& a, ThreadPool& pool, const std::vector<int64_t>& ms,
               const std::vector<WeightShape>& shapes, nlohmann::json& out) {
  const cpu::QuantGemmIsa isa = a.isa == "portable" ? cpu::QuantGemmIsa::portable
                                : a.isa == "avx2"   ? cpu::QuantGemmIsa::avx2
                                                    : cpu::quant_gemm_default_isa();
  out["quant_isa"] = cpu::quant_gemm_isa_name(isa);
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  std::vector<float> x(static_cast<size_t>(max_m * 8192));
  {
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(gen);
  }
  std::vector<float> y(static_cast<size_t>(max_m * 65536));
  const size_t pool_bytes = static_cast<size_t>(a.pool_mb) << 20;

  std::vector<std::vector<std::string>> rows;
  nlohmann::json jq = nlohmann::json::array();
  for (const std::string& name : split_list(a.quant)) {
    const std::optional<QuantType> type = quant_type_from_name(name);
    DSPARK_CHECK_KIND(invalid_input, type.has_value(), "--quant: unknown type {}", name);
    const QuantBytes wpool(*type, pool_bytes, a.huge_pages, 7);
    for (const WeightShape& s : shapes) {
      if (s.k % quant_block(*type).elements != 0) continue;
      const int64_t row_bytes = quant_row_bytes(*type, s.k);
      const auto wbytes = static_cast<size_t>(s.n * row_bytes);
      DSPARK_CHECK_KIND(invalid_input, wbytes <= wpool.size() && s.k <= 8192 && s.n <= 65536,
                        "shape {}x{} too large", s.n, s.k);
      const size_t windows = std::max<size_t>(1, wpool.size() / wbytes);
      double t1 = 0;
      for (const int64_t m : ms) {
        const double t = time_calls(a.min_ms, [&](int64_t i) {
          const uint8_t* w = wpool.data() + (static_cast<size_t>(i) % windows) * wbytes;
          cpu::quant_gemm(pool, quant_args(x.data(), w, *type, y.data(), m, s, isa), isa);
        });
        if (m == ms.front()) t1 = t;
        const double gbs = static_cast<double>(wbytes) / (t * 1e6);
        const double gops = 2.0 * static_cast<double>(m * s.n * s.k) / (t * 1e6);
        rows.push_back({std::string(quant_type_name(*type)), fmt::format("{}x{}", s.n, s.k),
                        std::to_string(m), fmt::format("{:.4f}", t), fmt::format("{:.1f}", gbs),
                        fmt::format("{:.1f}", gops), fmt::format("{:.2f}", t / t1)});
        jq.push_back({{"type", quant_type_name(*type)},
                      {"n", s.n},
                      {"k", s.k},
                      {"m", m},
                      {"ms", t},
                      {"gbs", gbs},
                      {"gops", gops}});
      }
    }
  }
  if (!rows.empty()) {
    fmt::print("\nquantized weights ({}):\n{}\n", cpu::quant_gemm_isa_name(isa),
               format_table({"type", "N x K", "M", "ms", "GB/s", "GOP/s", "/ first M"}, rows));
  }
  out["quant_shapes"] = jq;

  if (a.no_forward) return;
  // SmolLM2-135M-Instruct.Q4_1.gguf: 30 layers of Q4_1 projections + the tied Q8_0 LM head.
  struct Proj {
    WeightShape s;
    QuantType t;
  };
  for (const bool fused : {true, false}) {
    std::vector<Proj> layer;
    if (fused) {
      layer = {{{960, 576}, QuantType::q4_1},
               {{576, 576}, QuantType::q4_1},
               {{3072, 576}, QuantType::q4_1},
               {{576, 1536}, QuantType::q4_1}};
    } else {
      layer = {{{576, 576}, QuantType::q4_1},  {{192, 576}, QuantType::q4_1},
               {{192, 576}, QuantType::q4_1},  {{576, 576}, QuantType::q4_1},
               {{1536, 576}, QuantType::q4_1}, {{1536, 576}, QuantType::q4_1},
               {{576, 1536}, QuantType::q4_1}};
    }
    std::vector<Proj> all;
    for (int l = 0; l < 30; ++l) all.insert(all.end(), layer.begin(), layer.end());
    all.push_back({{49152, 576}, QuantType::q8_0});
    std::vector<std::unique_ptr<QuantBytes>> ws;
    double total_bytes = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const auto bytes = static_cast<size_t>(all[i].s.n * quant_row_bytes(all[i].t, all[i].s.k));
      ws.push_back(std::make_unique<QuantBytes>(all[i].t, bytes, a.huge_pages,
                                                static_cast<uint32_t>(100 + i)));
      total_bytes += static_cast<double>(bytes);
    }
    std::vector<std::vector<std::string>> frows;
    nlohmann::json jf = nlohmann::json::array();
    double t1 = 0;
    for (const int64_t m : ms) {
      const double t = time_calls(a.min_ms * 3, [&](int64_t) {
        for (size_t i = 0; i < all.size(); ++i)
          cpu::quant_gemm(
              pool, quant_args(x.data(), ws[i]->data(), all[i].t, y.data(), m, all[i].s, isa), isa);
      });
      if (m == ms.front()) t1 = t;
      frows.push_back({std::to_string(m), fmt::format("{:.3f}", t),
                       fmt::format("{:.1f}", total_bytes / (t * 1e6)),
                       fmt::format("{:.0f}", 1e3 / t), fmt::format("{:.2f}", t / t1)});
      jf.push_back({{"m", m},
                    {"ms", t},
                    {"gbs", total_bytes / (t * 1e6)},
                    {"calls_per_s", 1e3 / t},
                    {"vs_first_m", t / t1}});
    }
    fmt::print(
        "SmolLM2-135M Q4_1 + Q8_0 LM head per forward, {} ({} calls, {:.1f} MB of blocks):\n{}\n",
        fused ? "q/k/v and gate/up fused" : "separate matrices as in the file", all.size(),
        total_bytes / 1e6, format_table({"M", "ms", "GB/s", "forwards/s", "/ first M"}, frows));
    out[fused ? "quant_forward_fused" : "quant_forward_separate"] = jf;
    out["quant_forward_bytes"] = total_bytes;
  }
}

int run(const Args& a) {
  ThreadPool& pool = ThreadPool::global();
  const cpu::SmallGemmIsa isa =
      a.isa == "portable" ? cpu::SmallGemmIsa::portable : cpu::small_gemm_default_isa();
  const DType w_dtype = dtype_from_name(a.w_dtype);
  DSPARK_CHECK_KIND(invalid_input, w_dtype == DType::f32 || w_dtype == DType::bf16,
                    "--w-dtype f32 or bf16");
  std::vector<int64_t> ms;
  for (const auto& s : split_list(a.m_list)) ms.push_back(std::stoll(s));
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  const std::vector<WeightShape> shapes = parse_weight_shapes(a.shapes);
  nlohmann::json out;
  out["isa"] = cpu::small_gemm_isa_name(isa);
  out["threads"] = pool.size();
  out["w_dtype"] = a.w_dtype;
  out["openblas"] = DSPARK_HAVE_CBLAS != 0;
  out["huge_pages"] = a.huge_pages;
  out["cpu_time"] = a.cpu_time;
  DSPARK_CHECK_KIND(
      invalid_input, !a.cpu_time || pool.size() == 1,
      "--cpu-time counts the calling thread only: run with DSPARK_THREADS=1 (the pool "
      "has {} threads)",
      pool.size());
  g_cpu_time = a.cpu_time;

  // Thread pool cost: a parallel_for of two chunks of ~20 us of work each, against the same work
  // on the calling thread alone (the difference is the cost of waking and joining the workers).
  // Not with --cpu-time (one thread).
  if (!a.cpu_time) {
    auto busy = [](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        const auto t0 = Clock::now();
        while (ms_since(t0) < 0.02) {
        }
      }
    };
    const double serial_us = 1e3 * time_calls(a.min_ms, [&](int64_t) { busy(0, 2); });
    const double pool_us =
        1e3 * time_calls(a.min_ms, [&](int64_t) { pool.parallel_for(2, 1, busy); });
    const double ideal_us = serial_us / std::min(2, pool.size());
    out["parallel_for_overhead_us"] = pool_us - ideal_us;
    fmt::print(
        "thread pool: {} threads, 2 x 20 us of work: {:.1f} us in parallel_for ({:.1f} us over "
        "the ideal {:.1f} us)\n",
        pool.size(), pool_us, pool_us - ideal_us, ideal_us);
  }

  if (!a.quant.empty()) run_quant(a, pool, ms, shapes, out);
  if (a.fp8_blocks) run_fp8_blocks(a, ms, shapes, out);
  if (a.no_f32) {
    if (!a.json_file.empty()) std::ofstream(a.json_file) << out.dump(2) << "\n";
    fmt::print("{}\n", out.dump());
    return 0;
  }

  // The weight pool, f32 values (and a bf16 copy when asked).
  const int64_t pool_floats = static_cast<int64_t>(a.pool_mb) << 18;
  Floats wpool(static_cast<size_t>(pool_floats), a.huge_pages, 0.0f);
  {
    std::mt19937 gen(1);
    std::normal_distribution<float> nd(0.0f, 0.05f);
    for (size_t i = 0; i < wpool.size(); ++i) wpool.data()[i] = nd(gen);
  }
  std::vector<bf16> wpool16;
  if (w_dtype == DType::bf16) {
    wpool16.resize(wpool.size());
    for (size_t i = 0; i < wpool.size(); ++i) wpool16[i] = f32_to_bf16(wpool.data()[i]);
  }
  std::vector<float> x(static_cast<size_t>(max_m * 8192), 0.5f);
  std::vector<float> y(static_cast<size_t>(max_m * 65536));

  std::vector<std::vector<std::string>> rows;
  nlohmann::json jshapes = nlohmann::json::array();
  for (const WeightShape& s : shapes) {
    const int64_t wfloats = s.n * s.k;
    DSPARK_CHECK_KIND(invalid_input, wfloats <= pool_floats && s.k <= 8192 && s.n <= 65536,
                      "shape {}x{} too large", s.n, s.k);
    const int64_t windows = std::max<int64_t>(1, pool_floats / wfloats);
    const double wbytes = static_cast<double>(wfloats) * static_cast<double>(dtype_size(w_dtype));
    double ours_m1 = 0;
    for (const int64_t m : ms) {
      auto ours = [&](int64_t i) {
        const int64_t offset = (i % windows) * wfloats;
        const void* w = w_dtype == DType::f32 ? static_cast<const void*>(wpool.data() + offset)
                                              : static_cast<const void*>(wpool16.data() + offset);
        cpu::small_gemm(pool, gemm_args(x.data(), w, w_dtype, y.data(), m, s), isa);
      };
      const double t_ours = time_calls(a.min_ms, ours);
      if (m == 1) ours_m1 = t_ours;
      double t_blas = 0;
      if (DSPARK_HAVE_CBLAS && w_dtype == DType::f32) {
        t_blas = time_calls(a.min_ms, [&](int64_t i) {
          openblas(m, s.n, s.k, x.data(), wpool.data() + (i % windows) * wfloats, y.data());
        });
      }
      const double gflops = 2.0 * static_cast<double>(m * wfloats) / (t_ours * 1e6);
      rows.push_back({fmt::format("{}x{}", s.n, s.k), std::to_string(m),
                      t_blas > 0 ? fmt::format("{:.3f}", t_blas) : "-",
                      t_blas > 0 ? fmt::format("{:.1f}", wbytes / (t_blas * 1e6)) : "-",
                      fmt::format("{:.3f}", t_ours), fmt::format("{:.1f}", wbytes / (t_ours * 1e6)),
                      fmt::format("{:.1f}", gflops),
                      t_blas > 0 ? fmt::format("{:.2f}x", t_blas / t_ours) : "-",
                      ours_m1 > 0 ? fmt::format("{:.2f}", t_ours / ours_m1) : "-"});
      jshapes.push_back({{"n", s.n},
                         {"k", s.k},
                         {"m", m},
                         {"openblas_ms", t_blas},
                         {"openblas_gbs", t_blas > 0 ? wbytes / (t_blas * 1e6) : 0.0},
                         {"ours_ms", t_ours},
                         {"ours_gbs", wbytes / (t_ours * 1e6)},
                         {"ours_gflops", gflops},
                         {"ours_vs_m1", ours_m1 > 0 ? t_ours / ours_m1 : 0.0}});
    }
  }
  fmt::print("\n{}\n", format_table({"N x K", "M", "OpenBLAS ms", "OpenBLAS GB/s", "ours ms",
                                     "ours GB/s", "ours GFLOP/s", "speedup", "ours / ours M=1"},
                                    rows));
  out["shapes"] = jshapes;

  if (!a.no_forward) {
    // SmolLM2-135M projections: 30 x (qkv, o, gate_up, down) + LM head, distinct weights.
    std::vector<WeightShape> layer = {{960, 576}, {576, 576}, {3072, 576}, {576, 1536}};
    std::vector<WeightShape> all;
    for (int l = 0; l < 30; ++l) all.insert(all.end(), layer.begin(), layer.end());
    all.push_back({49152, 576});
    std::vector<std::unique_ptr<Floats>> ws;
    double total_bytes = 0;
    for (const WeightShape& s : all) {
      ws.push_back(std::make_unique<Floats>(static_cast<size_t>(s.n * s.k), a.huge_pages, 0.01f));
      total_bytes += static_cast<double>(s.n * s.k) * 4.0;
    }
    std::vector<std::vector<std::string>> frows;
    nlohmann::json jf = nlohmann::json::array();
    double ours1 = 0, blas1 = 0;
    for (const int64_t m : ms) {
      auto pass = [&](bool use_blas) {
        for (size_t i = 0; i < all.size(); ++i) {
          const WeightShape& s = all[i];
          if (use_blas) {
            openblas(m, s.n, s.k, x.data(), ws[i]->data(), y.data());
          } else {
            cpu::small_gemm(pool, gemm_args(x.data(), ws[i]->data(), DType::f32, y.data(), m, s),
                            isa);
          }
        }
      };
      const double t_ours = time_calls(a.min_ms * 3, [&](int64_t) { pass(false); });
      const double t_blas =
          DSPARK_HAVE_CBLAS ? time_calls(a.min_ms * 3, [&](int64_t) { pass(true); }) : 0.0;
      if (m == 1) ours1 = t_ours, blas1 = t_blas;
      frows.push_back({std::to_string(m), t_blas > 0 ? fmt::format("{:.2f}", t_blas) : "-",
                       blas1 > 0 ? fmt::format("{:.2f}", t_blas / blas1) : "-",
                       fmt::format("{:.2f}", t_ours),
                       fmt::format("{:.1f}", total_bytes / (t_ours * 1e6)),
                       ours1 > 0 ? fmt::format("{:.2f}", t_ours / ours1) : "-"});
      jf.push_back({{"m", m},
                    {"openblas_ms", t_blas},
                    {"ours_ms", t_ours},
                    {"ours_gbs", total_bytes / (t_ours * 1e6)},
                    {"ours_vs_m1", ours1 > 0 ? t_ours / ours1 : 0.0},
                    {"openblas_vs_m1", blas1 > 0 ? t_blas / blas1 : 0.0}});
    }
    fmt::print(
        "SmolLM2-135M projections per forward ({:.0f} MB of f32 weights):\n{}\n", total_bytes / 1e6,
        format_table({"M", "OpenBLAS ms", "OpenBLAS / M=1", "ours ms", "ours GB/s", "ours / M=1"},
                     frows));
    out["forward_weight_bytes"] = total_bytes;
    out["forward"] = jf;
  }

  if (!a.json_file.empty()) std::ofstream(a.json_file) << out.dump(2) << "\n";
  fmt::print("{}\n", out.dump());
  return 0;
}

}  // namespace
}  // namespace dspark::bench

int main(int argc, char** argv) {
  dspark::bench::Args a;
  CLI::App app{"CPU small-M matrix product vs OpenBLAS"};
  app.add_option("--m", a.m_list, "input rows, comma-separated");
  app.add_option("--shapes", a.shapes, "weight shapes NxK, comma-separated");
  app.add_option("--isa", a.isa,
                 "automatic | portable | avx2 (avx2: the quantized products without AVX-512)");
  app.add_option("--w-dtype", a.w_dtype, "f32 | bf16 (bf16: ours only)");
  app.add_option("--pool-mb", a.pool_mb, "weight pool rotated through (MB)")
      ->check(CLI::Range(1, 8192));
  app.add_option("--min-ms", a.min_ms, "time per measurement")->check(CLI::Range(1.0, 1e6));
  app.add_flag("--no-forward", a.no_forward, "skip the SmolLM2-shaped forward sweep");
  app.add_flag("--huge-pages", a.huge_pages,
               "weights in transparent huge pages (madvise(MADV_HUGEPAGE)) instead of 4 KiB pages");
  app.add_option(
      "--quant", a.quant,
      "also time these block-quantized types (q4_0,q4_1,q5_0,q5_1,q8_0,q4_k,q5_k,q6_k,q8_a; "
      "MLX's groups of 64 / 128: q4_a64,q4_a128,q8_a64,q8_a128)");
  app.add_flag("--fp8-blocks", a.fp8_blocks,
               "also time FP8 block-scaled weights (E4M3, 128 x 128 blocks; K and N multiples of "
               "128)");
  app.add_flag("--no-f32", a.no_f32, "skip the f32 / bf16 weights (with --quant or --fp8-blocks)");
  app.add_flag("--cpu-time", a.cpu_time,
               "time with the calling thread's CPU clock (needs DSPARK_THREADS=1): steadier on a "
               "shared machine");
  app.add_option("--json", a.json_file, "also write the JSON result to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    return dspark::bench::run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_gemm: %s\n", e.what());
    return 1;
  }
}
