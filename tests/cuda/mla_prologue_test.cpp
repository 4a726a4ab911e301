// mla_prologue: the fused CUDA kernel vs the CPU (the unfused ops rms_norm + convert + rope +
// kv_write + convert + rope) on the same inputs: the queries' rotated features, and the whole page
// pool (slots no token writes must stay as they were). Latent ranks 32 and 512 with rope 8 and 64
// (DeepSeek's 512 + 64), 4 and 16 heads, 1 to 17 tokens, f32 and bf16, YaRN's attention scaling,
// kv and q as columns of wider buffers as the model's views are (q_b_proj's output, and q_proj's
// heads at the end of the input projection, which do not collapse into rows); a partial rotation
// (CUDA runs the unfused ops); and a padding token (slot -1: nothing written), which the CPU
// refuses, against the CPU's ops writing it elsewhere.
#include "dspark/ops/mla_prologue.h"

#include <string>
#include <vector>

#include "dspark/ops/rope.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct Shape3 {
  int r, rope, heads;
  bool wide_q = false;
};

struct Inputs {
  Pair in, norm, q, pos, inv_freq, slots, pages, latent, q_abs;
  float attention_scaling = 1.0f;
  int64_t n = 0;
  Shape3 s{};
};

constexpr int64_t kInLead = 24;  // columns of the input projection before c_kv (a q LoRA's)
constexpr int64_t kNope = 16;    // query features before the rotated ones

// `padding`: token 1 (of n > 2) has slot -1. `rotated`: inv_freq entries (rope / 2: all).
Inputs make_inputs(DType dtype, int64_t n, Shape3 s, uint32_t seed, bool padding = false,
                   int rotated = -1) {
  Inputs in;
  in.n = n;
  in.s = s;
  const int64_t lat = s.r + s.rope;
  in.in = random_pair(dtype, Shape{n, kInLead + lat + 8}, seed);
  in.norm = random_pair(DType::f32, Shape{s.r}, seed + 1, 0.5f);
  // The queries: [n, heads, nope + rope], or (wide_q) q_proj's columns at the end of a wider
  // input projection, whose heads do not collapse into rows of one stride.
  const int64_t qk = kNope + s.rope;
  in.q = s.wide_q ? random_pair(dtype, Shape{n, kInLead + s.heads * qk}, seed + 2)
                  : random_pair(dtype, Shape{n, s.heads, qk}, seed + 2);
  std::vector<int32_t> positions = random_ints(static_cast<size_t>(n), 0, 40000, seed + 3);
  positions[0] = 0;
  in.pos = vector_pair(positions, Shape{n});
  RopeScaling yarn;
  yarn.type = "yarn";
  yarn.factor = 4.0;
  yarn.original_max_position_embeddings = 4096;
  yarn.mscale = 1.0;
  yarn.mscale_all_dim = 0.8;
  const RopeTable table = make_rope_table(s.rope, 1e4, 1.0, yarn, 163840);
  std::vector<float> inv_freq = table.inv_freq;
  if (rotated >= 0) inv_freq.resize(static_cast<size_t>(rotated));
  in.inv_freq = vector_pair(inv_freq, Shape{static_cast<int64_t>(inv_freq.size())});
  in.attention_scaling = table.attention_scaling;
  std::vector<int32_t> slots;
  for (int64_t i = 0; i < n; ++i)
    slots.push_back(padding && i == 1 && n > 2 ? -1 : 3 + 2 * static_cast<int32_t>(i));
  in.slots = vector_pair(slots, Shape{n});
  in.pages = random_pair(dtype, Shape{8, 16, 1, lat}, seed + 4);  // old contents
  in.latent = zeros_pair(dtype, Shape{n, lat});
  in.q_abs = random_pair(dtype, Shape{n, s.heads, lat}, seed + 5);  // q_out: its last columns
  return in;
}

MlaPrologueArgs args_of(const Inputs& in, bool gpu) {
  auto side = [gpu](const Pair& p) { return gpu ? p.gpu.view() : p.cpu.view(); };
  const int64_t lat = in.s.r + in.s.rope;
  MlaPrologueArgs a;
  a.kv = side(in.in).slice(1, kInLead, kInLead + lat);
  a.kv_norm = side(in.norm);
  a.eps = 1e-6f;
  const int64_t qk = kNope + in.s.rope;
  Tensor q = side(in.q);
  if (in.s.wide_q) {
    q = Tensor(static_cast<char*>(q.data()) + kInLead * static_cast<int64_t>(q.element_size()),
               q.dtype(), Shape{in.n, in.s.heads, qk}, Shape{q.stride(0), qk, 1}, q.device());
  }
  a.q_rope = q.slice(2, kNope, qk);
  a.positions = side(in.pos);
  a.inv_freq = side(in.inv_freq);
  a.attention_scaling = in.attention_scaling;
  a.slots = side(in.slots);
  a.pages = side(in.pages);
  a.latent = side(in.latent);
  a.q_out = side(in.q_abs).slice(2, in.s.r, lat);
  return a;
}

std::string describe(const Inputs& in, DType dtype) {
  return "r " + std::to_string(in.s.r) + " rope " + std::to_string(in.s.rope) + " heads " +
         std::to_string(in.s.heads) + (in.s.wide_q ? " wide q " : " ") + name_of(dtype) +
         " n=" + std::to_string(in.n);
}

TEST(CudaMlaPrologue, MatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 1500;
  for (const Shape3 s : {Shape3{32, 8, 4}, Shape3{512, 64, 16, true}}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (int64_t n : {1, 3, 17}) {
        const Inputs in = make_inputs(dtype, n, s, seed);
        seed += 10;
        mla_prologue(ctx.cpu, args_of(in, false));
        mla_prologue(ctx.gpu, args_of(in, true));
        ctx.gpu.synchronize();
        const std::string what = describe(in, dtype);
        const double tol = tolerance(dtype);
        // q_abs holds q_out in its last columns; the others must be untouched.
        expect_close(in.q_abs.gpu, in.q_abs.cpu, tol, what + ": q_abs");
        expect_close(in.pages.gpu, in.pages.cpu, tol, what + ": pages");
      }
    }
  }
}

// A partial rotation (inv_freq shorter than rope / 2): CUDA runs the unfused ops.
TEST(CudaMlaPrologue, PartialRotationMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Inputs in = make_inputs(DType::bf16, 5, Shape3{32, 8, 4}, 1800, false, 2);
  mla_prologue(ctx.cpu, args_of(in, false));
  mla_prologue(ctx.gpu, args_of(in, true));
  ctx.gpu.synchronize();
  expect_close(in.q_abs.gpu, in.q_abs.cpu, tolerance(DType::bf16), "partial rotation: q_abs");
  expect_close(in.pages.gpu, in.pages.cpu, tolerance(DType::bf16), "partial rotation: pages");
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // the CPU refuses a padding slot
// A padding token (slot -1) among 5 on the fused kernel, against the CPU's ops writing that token
// to the pool's last slot instead: the pool up to that page, the last page as it was before, and
// every token's q_out (a padded row's attention is never read, but its query costs nothing).
TEST(CudaMlaPrologue, PaddingTokenWritesNothing) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  const Inputs in = make_inputs(DType::bf16, 5, Shape3{512, 64, 16, true}, 1900, true);
  const OwnedTensor old_pages = OwnedTensor::copy_of(in.pages.cpu.view(), Device::cpu());
  mla_prologue(ctx.gpu, args_of(in, true));
  const OwnedTensor cpu_slots =
      OwnedTensor::from_vector(std::vector<int32_t>{3, 127, 7, 9, 11}, Shape{5}, Device::cpu());
  MlaPrologueArgs a = args_of(in, false);
  a.slots = cpu_slots.view();
  mla_prologue(ctx.cpu, a);
  ctx.gpu.synchronize();
  const double tol = tolerance(DType::bf16);
  expect_close(in.q_abs.gpu, in.q_abs.cpu, tol, "padding: q_abs");
  expect_close(in.pages.gpu.view().slice(0, 0, 7), in.pages.cpu.view().slice(0, 0, 7), tol,
               "padding: pages 0-6");
  expect_equal(in.pages.gpu.view().slice(0, 7, 8), old_pages.view().slice(0, 7, 8),
               "padding: the last page, untouched");
}
#endif

}  // namespace
}  // namespace dspark::test
