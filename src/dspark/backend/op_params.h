// The parameter structs of the ops that the kernels take as they are (backend/{cpu,cuda}/kernels.h
// declare the kernels with the ops' arguments). The ops (ops/<op>.h) document them with the op;
// they live here, below the ops layer, so that backend/ includes nothing from ops/.
#pragma once

#include "dspark/core/quant.h"
#include "dspark/core/tensor.h"

namespace dspark {

// How a weight matrix [n, k] is stored (ops/matmul.h, ops/embedding.h).
enum class WeightFormat : uint8_t {
  dense,   // data: a float tensor [n, k] (rows contiguous)
  blocks,  // data: u8 [n, quant_row_bytes(quant, k)], each row k / elements blocks (core/quant.h)
  // data: u8 [n, k] E4M3 codes (core/fp8.h), scales: f32 [ceil(n / block_n), ceil(k / block_k)];
  // w[i][j] = e4m3(data[i][j]) * scales[i / block_n][j / block_k] (Hugging Face FP8 checkpoints'
  // block scales, io/fp8_quant.h)
  fp8_blocks,
  // CPU only, any block format: the same bytes with groups of 8 rows interleaved
  // (backend/cpu/kernels/quant_pack.h), what the CPU's integer kernels read fastest. A view of
  // rows [lo, hi) needs lo a multiple of 8 and hi a multiple of 8 or n.
  blocks_x8,
};

// A weight matrix as stored: what linear() and gather_rows() take for weights that may be
// quantized (a model keeps GGUF blocks as they are in the file).
struct WeightMatrix {
  WeightFormat format = WeightFormat::dense;
  QuantType quant = QuantType::q8_0;  // WeightFormat::blocks only
  Tensor data;
  int64_t n = 0, k = 0;              // the logical shape: n rows (outputs) of k values (inputs)
  Tensor scales;                     // WeightFormat::fp8_blocks only
  int64_t block_n = 0, block_k = 0;  // WeightFormat::fp8_blocks only: rows, columns per scale

  bool quantized() const { return format != WeightFormat::dense; }
  // A dense float weight [n, k].
  static WeightMatrix dense(const Tensor& w) {
    WeightMatrix m;
    m.data = w;
    m.n = w.dim() == 2 ? w.size(0) : 0;
    m.k = w.dim() == 2 ? w.size(1) : 0;
    return m;
  }
};

// Whether CUDA's FP8 kernels take scale blocks of block_n x block_k: block_n a multiple of 16 (the
// kernels' row tiles) and block_k 64 times a power of two (their chunks of k).
inline bool cuda_fp8_blocks_supported(int64_t block_n, int64_t block_k) {
  const int64_t chunks = block_k / 64;
  return block_n > 0 && block_n % 16 == 0 && block_k > 0 && block_k % 64 == 0 &&
         (chunks & (chunks - 1)) == 0;
}

// RMSNorm (ops/norm.h).
struct RmsNormParams {
  float eps = 1e-6f;
  bool unit_offset = false;  // scale by (1 + w) instead of w
};

// One layer's paged cache plus the page table of the rows in this batch (CSR form):
// the pages of row r are page_indices[page_indptr[r] .. page_indptr[r+1]) in order; token t of
// row r lives in page page_indices[page_indptr[r] + t / page_size] at offset t % page_size
// (ops/attention.h).
struct PagedKv {
  Tensor k_pages;       // [n_pages, page_size, n_kv_heads, head_dim]  activation dtype
  Tensor v_pages;       // [n_pages, page_size, n_kv_heads, head_dim]
  Tensor page_indptr;   // i32 [n_rows + 1]
  Tensor page_indices;  // i32 [page_indptr[n_rows]]
  Tensor kv_lens;       // i32 [n_rows]: valid tokens per row, including this step's writes
};

// DeepSeek-V3 routing (moe_route_grouped, ops/moe.h).
struct MoeGroupRouting {
  int n_group = 1;         // the experts form n_group groups of consecutive ids
  int topk_group = 1;      // groups a token may choose from
  bool normalize = false;  // norm_topk_prob
  float scale = 1.0f;      // routed_scaling_factor
};

// The (token, choice) pairs of a MoE layer grouped by expert: contiguous i32 tensors on the
// layer's device, written by moe_group and read by moe_linear, gather_rows and moe_combine
// (ops/moe.h).
struct MoeGroups {
  Tensor offsets;  // [E + 1]: expert e's grouped rows are [offsets[e], offsets[e + 1])
  Tensor active;   // [E + 1]: active[0] = A, the number of experts with rows; active[1 .. A] are
                   // those experts, ascending (the rest is unspecified)
  Tensor order;    // [n * k]: the token of each grouped row; within an expert, tokens ascend
  Tensor slots;    // [n, k]: the grouped row of each (token, choice)
};

// paged_attention (ops/attention.h).
struct AttentionParams {
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
  bool causal = true;      // false: every query of a row sees all kv_len keys of the row
  int sliding_window = 0;  // 0 = none; else a query at position p sees keys j > p - window
  float softcap = 0.0f;    // 0 = none; else scores = softcap * tanh(scores / softcap)
};

// How speculative decoding samples (ops/speculative.h, docs/spec-decoding.md):
//   coupled: the token at each sequence position is the target's own sample there, drawn from
//     Philox(seed, position) exactly as plain sampling draws it; a draft is accepted iff it equals
//     that sample. The same seed gives the same text with speculation on and off.
//   rejection: speculative sampling (accept with probability min(1, p/q), else resample from the
//     residual): same distribution, higher acceptance when q is close to p, but the text depends on
//     the drafts.
enum class SpecSampling : uint8_t { coupled, rejection };

// Logit processing and sampling (ops/sampling.h).
struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax); must be >= 0
  int top_k = 0;             // 0 = off; keep the k most probable tokens
  float top_p = 1.0f;        // 1 = off; keep the smallest set whose mass reaches top_p
  float min_p = 0.0f;        // 0 = off; keep tokens with p >= min_p * p_max
  // Speculative decoding only (the verifier and the drafters); plain sampling ignores it.
  SpecSampling spec = SpecSampling::coupled;
  bool greedy() const { return temperature <= 0.0f; }
};

// One edit of apply_penalties (ops/penalties.h): logits[row, token] -> repetition, then subtract.
struct PenaltyEntry {
  int32_t row = 0;
  int32_t token = 0;
  float repetition = 1.0f;  // x > 0 ? x / repetition : x * repetition (1: unchanged)
  float subtract = 0.0f;    // then x - subtract
};

// Optional parts of linear_add_rms_norm (ops/linear_norm.h).
struct LinearNormExtras {
  // When defined ([M, N], any float dtype): also residual_copy = the updated residual, converted
  // to its dtype (a model's hidden-state tap). CUDA writes an f32 residual's bf16 copy from the
  // norm kernel of the K split; elsewhere a convert follows.
  Tensor residual_copy;
  // false: y is scratch and its contents afterwards are unspecified (CUDA's K split then skips
  // the stores of y).
  bool keep_y = true;
};

// The attention prologue of a decoder layer (ops/qkv_prologue.h).
struct QkvPrologueArgs {
  Tensor qkv;  // [n, (n_heads + 2 * n_kv_heads) * head_dim]: q heads, then k heads, then v heads
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  Tensor q_norm, k_norm;  // [head_dim] or undefined (no norm)
  RmsNormParams norm;     // eps, unit_offset of both norms
  Tensor positions;       // i32 [n]
  Tensor inv_freq;        // f32 [rotary_dim / 2] (ops/rope.h)
  float attention_scaling = 1.0f;
  Tensor slots;    // i32 [n]
  Tensor k_pages;  // [n_pages, page_size, n_kv_heads, head_dim]
  Tensor v_pages;
  Tensor q_out;  // [n, n_heads * head_dim], qkv's dtype, contiguous: q (see the return value)
  Tensor k_tmp;  // [n, n_kv_heads * head_dim], qkv's dtype, contiguous: the unfused path's k
};

// MLA's attention prologue (ops/mla_prologue.h): the latent row [rms_norm(c_kv), rope(k_rope)]
// of each token into the paged cache, and rope of the queries' rotated features.
struct MlaPrologueArgs {
  Tensor kv;       // [n, kv_lora_rank + rope]: c_kv, then k_rope (rows may be a wider buffer's)
  Tensor kv_norm;  // [kv_lora_rank]: the latent's RMSNorm weight
  float eps = 1e-6f;
  Tensor q_rope;     // [n, heads, rope]: the queries' rotated features (last dim contiguous)
  Tensor positions;  // i32 [n]
  Tensor inv_freq;   // f32 [rope / 2] (ops/rope.h)
  float attention_scaling = 1.0f;
  Tensor slots;   // i32 [n]
  Tensor pages;   // [n_pages, page_size, 1, kv_lora_rank + rope]: the layer's shared K/V pool
  Tensor latent;  // [n, kv_lora_rank + rope], kv's dtype, contiguous: the unfused path's rows
  Tensor q_out;   // [n, heads, rope], kv's dtype (last dim contiguous): rope(q_rope)
};

}  // namespace dspark
