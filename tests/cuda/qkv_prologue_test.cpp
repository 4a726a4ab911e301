// qkv_prologue: the fused CUDA kernel vs the CPU (the unfused ops convert + rms_norm + rope +
// kv_write) on the same inputs: q out, and the whole K and V page pools (slots no token writes must
// stay as they were). Head dims 64 / 128 / 256 (the fused kernel) and 96 (CUDA runs the unfused
// ops), with and without Qwen3-style q/k norms, GQA, 1 to 17 tokens, f32 and bf16 activations;
// the K/V-only form (no q heads); and a padding token (slot -1: nothing written), which the CPU
// refuses, against the CPU's ops on the other tokens.
#include "dspark/ops/qkv_prologue.h"

#include <cstring>
#include <string>
#include <vector>

#include "dspark/ops/rope.h"

#include "cuda/cuda_consistency.h"

namespace dspark::test {
namespace {

struct Inputs {
  Pair qkv, q_norm, k_norm, pos, inv_freq, slots, k_pages, v_pages, q_out, k_tmp;
  float attention_scaling = 1.0f;
};

// `padding`: token 1 (of n > 2) has slot -1 (a padded verify batch). The CPU ops refuse such slots
// (ops/attention.h kv_write), so only the CUDA-vs-CUDA test uses it.
Inputs make_inputs(DType dtype, int64_t n, int heads, int kv_heads, int hd, uint32_t seed,
                   bool padding = false) {
  Inputs in;
  in.qkv = random_pair(dtype, Shape{n, (heads + 2 * kv_heads) * int64_t{hd}}, seed);
  in.q_norm = random_pair(DType::f32, Shape{hd}, seed + 1, 0.5f);
  in.k_norm = random_pair(DType::f32, Shape{hd}, seed + 2, 0.5f);
  std::vector<int32_t> positions = random_ints(static_cast<size_t>(n), 0, 40000, seed + 3);
  positions[0] = 0;
  in.pos = vector_pair(positions, Shape{n});
  const RopeTable table = make_rope_table(hd, 1e6, 1.0, RopeScaling{}, 131072);
  in.inv_freq = vector_pair(table.inv_freq, Shape{static_cast<int64_t>(table.inv_freq.size())});
  in.attention_scaling = table.attention_scaling;
  // 8 pages of 16 slots; tokens take every other slot from 3 on (token 1 is padding if asked).
  std::vector<int32_t> slots;
  for (int64_t i = 0; i < n; ++i)
    slots.push_back(padding && i == 1 && n > 2 ? -1 : 3 + 2 * static_cast<int32_t>(i));
  in.slots = vector_pair(slots, Shape{n});
  in.k_pages = random_pair(dtype, Shape{8, 16, kv_heads, hd}, seed + 4);  // old contents
  in.v_pages = random_pair(dtype, Shape{8, 16, kv_heads, hd}, seed + 5);
  if (heads > 0) in.q_out = zeros_pair(dtype, Shape{n, heads * int64_t{hd}});  // else K/V only
  in.k_tmp = zeros_pair(dtype, Shape{n, kv_heads * int64_t{hd}});
  return in;
}

QkvPrologueArgs args_of(const Inputs& in, bool gpu, int heads, int kv_heads, int hd, bool norms) {
  auto side = [gpu](const Pair& p) { return gpu ? p.gpu.view() : p.cpu.view(); };
  QkvPrologueArgs a;
  a.qkv = side(in.qkv);
  a.n_heads = heads;
  a.n_kv_heads = kv_heads;
  a.head_dim = hd;
  if (norms) {
    a.q_norm = side(in.q_norm);
    a.k_norm = side(in.k_norm);
  }
  a.norm = RmsNormParams{1e-6f, false};
  a.positions = side(in.pos);
  a.inv_freq = side(in.inv_freq);
  a.attention_scaling = in.attention_scaling;
  a.slots = side(in.slots);
  a.k_pages = side(in.k_pages);
  a.v_pages = side(in.v_pages);
  if (heads > 0) a.q_out = side(in.q_out);
  a.k_tmp = side(in.k_tmp);
  return a;
}

TEST(CudaQkvPrologue, MatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 500;
  for (int hd : {64, 128, 256, 96}) {
    for (bool norms : {true, false}) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        for (int64_t n : {1, 3, 17}) {
          constexpr int kHeads = 8, kKvHeads = 2;
          const Inputs in = make_inputs(dtype, n, kHeads, kKvHeads, hd, seed);
          seed += 10;
          const Tensor qc = qkv_prologue(ctx.cpu, args_of(in, false, kHeads, kKvHeads, hd, norms));
          const Tensor qg = qkv_prologue(ctx.gpu, args_of(in, true, kHeads, kKvHeads, hd, norms));
          ctx.gpu.synchronize();
          const std::string what = "head_dim " + std::to_string(hd) + (norms ? " norms " : " ") +
                                   name_of(dtype) + " n=" + std::to_string(n);
          const double tol = tolerance(dtype);
          expect_close(qg, qc, tol, what + ": q");
          expect_close(in.k_pages.gpu, in.k_pages.cpu, tol, what + ": k pages");
          expect_equal(in.v_pages.gpu, in.v_pages.cpu, what + ": v pages");
        }
      }
    }
  }
}

// K/V only (no q heads: a DSpark drafter's context rows): the fused kernel vs the CPU's unfused
// ops, with and without the k norm.
TEST(CudaQkvPrologue, KvOnlyMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  uint32_t seed = 700;
  for (int hd : {64, 128}) {
    for (bool norms : {true, false}) {
      for (int64_t n : {1, 17}) {
        constexpr int kKvHeads = 8;
        const Inputs in = make_inputs(DType::bf16, n, 0, kKvHeads, hd, seed);
        seed += 10;
        const Tensor qc = qkv_prologue(ctx.cpu, args_of(in, false, 0, kKvHeads, hd, norms));
        const Tensor qg = qkv_prologue(ctx.gpu, args_of(in, true, 0, kKvHeads, hd, norms));
        ctx.gpu.synchronize();
        const std::string what = "K/V only, head_dim " + std::to_string(hd) +
                                 (norms ? " norms" : "") + " n=" + std::to_string(n);
        EXPECT_FALSE(qc.defined() || qg.defined()) << what;
        expect_close(in.k_pages.gpu, in.k_pages.cpu, tolerance(DType::bf16), what + ": k pages");
        expect_equal(in.v_pages.gpu, in.v_pages.cpu, what + ": v pages");
      }
    }
  }
}

#if !defined(DSPARK_CONSISTENCY_ON_CPU)  // the CPU refuses a padding slot
// Rows `rows` of a tensor, in that order (a copy on the host).
OwnedTensor take_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  const OwnedTensor host = OwnedTensor::copy_of(t, Device::cpu());
  OwnedTensor out = OwnedTensor::zeros(t.dtype(), shape, Device::cpu());
  const size_t row_bytes = static_cast<size_t>(t.numel() / t.size(0)) * t.element_size();
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.view().data()) + i * row_bytes,
                static_cast<const char*>(host.view().data()) + rows[i] * row_bytes, row_bytes);
  return out;
}

// A padding token (slot -1: its K/V go nowhere) among 5 on the fused kernel, against the CPU's ops
// on the other four tokens (the CPU refuses the slot): q of those tokens, and the whole K and V
// pools (a padding token's write anywhere would show); every fused head dim, with and without
// norms.
TEST(CudaQkvPrologue, PaddingTokenMatchesCpu) {
  DSPARK_REQUIRE_CUDA();
  Contexts ctx;
  constexpr int kHeads = 4, kKvHeads = 2;
  constexpr int64_t kTokens = 5;
  const std::vector<int64_t> kept = {0, 2, 3, 4};  // token 1 is the padding (make_inputs)
  uint32_t seed = 900;
  for (int hd : {64, 128, 256}) {
    for (bool norms : {true, false}) {
      const Inputs in = make_inputs(DType::bf16, kTokens, kHeads, kKvHeads, hd, seed, true);
      seed += 10;
      const Tensor qg = qkv_prologue(ctx.gpu, args_of(in, true, kHeads, kKvHeads, hd, norms));
      // The CPU's operands: the kept tokens' rows; its pages are the same old contents.
      QkvPrologueArgs a = args_of(in, false, kHeads, kKvHeads, hd, norms);
      const OwnedTensor qkv = take_rows(a.qkv, kept), pos = take_rows(a.positions, kept);
      const OwnedTensor slots = take_rows(a.slots, kept);
      const auto n = static_cast<int64_t>(kept.size());
      const OwnedTensor q_out =
          OwnedTensor::zeros(DType::bf16, Shape{n, kHeads * int64_t{hd}}, Device::cpu());
      const OwnedTensor k_tmp =
          OwnedTensor::zeros(DType::bf16, Shape{n, kKvHeads * int64_t{hd}}, Device::cpu());
      a.qkv = qkv;
      a.positions = pos;
      a.slots = slots;
      a.q_out = q_out;
      a.k_tmp = k_tmp;
      const Tensor qc = qkv_prologue(ctx.cpu, a);
      ctx.gpu.synchronize();
      const std::string what = "head_dim " + std::to_string(hd) + (norms ? " norms" : "");
      const OwnedTensor qg_kept = take_rows(qg, kept);
      expect_close(qg_kept, qc, tolerance(DType::bf16), what + ": q");
      expect_close(in.k_pages.gpu, in.k_pages.cpu, tolerance(DType::bf16), what + ": k pages");
      expect_equal(in.v_pages.gpu, in.v_pages.cpu, what + ": v pages");
    }
  }
}
#endif

}  // namespace
}  // namespace dspark::test
