// Multi-head latent attention (DeepSeek-V2 / V3) in its absorbed form. Each token caches one latent
// row of width kv_lora_rank + qk_rope_head_dim - [rms_norm(c_kv), rope(k_rope)] - shared by every
// head (an MQA cache of one "head"; the KV cache's shared_kv pool serves as keys and values). Per
// head h, with kv_b_proj's rows split into W_UK[h] [nope, kv_lora_rank] and W_UV[h] [v,
// kv_lora_rank]:
//   query  q_abs[h] = [W_UK[h]^T q_nope[h], rope(q_rope[h])]        (width kv_lora_rank + rope)
//   score  q_abs[h] . latent_j = q_nope[h] . (W_UK[h] c_kv_j) + q_rope[h] . k_rope_j
//   output W_UV[h] (sum_j softmax_j c_kv_j)                          (the latent part of attention)
// which is transformers' expanded form (k_nope = W_UK c_kv, v = W_UV c_kv) with the up-projections
// moved off the keys: a step reads the latents once, not per-head K/V. Prefill uses the same path.
//
// DeepSeek sparse attention (GLM-5, config.dsa()): the cached row also holds the token's indexer
// key after the latent ([latent, index key], every layer alike; layers that reuse the previous
// layer's selection leave it unused), written with the latent, so it is paged and rolled back with
// it. A layer with its own indexer scores the visible keys of each query (index_topk) and keeps
// the best index_topk; every layer then attends over the selected keys only
// (sparse_paged_attention, ops/sparse_attention.h). Its fused input projection also holds the
// indexer's wk and weights_proj rows.
#pragma once

#include <string>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/backend/op_params.h"
#include "dspark/core/buffer.h"
#include "dspark/core/tensor.h"
#include "dspark/model/config.h"
#include "dspark/model/layers.h"

namespace dspark {

class WeightSource;

struct MlaDims {
  int hidden = 0;
  int n_heads = 0;
  int q_lora_rank = 0;  // 0: q_proj from the hidden state
  int kv_lora_rank = 0;
  int nope = 0;  // qk_nope_head_dim
  int rope = 0;  // qk_rope_head_dim
  int v = 0;     // v_head_dim
  // The DSA indexer (index_topk 0: none).
  int index_topk = 0;
  int index_heads = 0;
  int index_dim = 0;
  int qk() const { return nope + rope; }
  int latent() const { return kv_lora_rank + rope; }
  int row() const { return latent() + index_dim; }  // one cached row per token
  // Without q LoRA the query rows end the fused input projection (one product of the hidden
  // state): their width there.
  int q_in_width() const { return q_lora_rank > 0 ? 0 : n_heads * qk(); }
  // The fused input projection: [q_a, c_kv, k_rope] (+ [index key, index head weights]), or
  // without q LoRA [c_kv, k_rope, q].
  int in_width() const {
    return q_lora_rank + latent() + (index_topk > 0 ? index_dim + index_heads : 0) + q_in_width();
  }
};
MlaDims mla_dims(const ModelConfig& config);

// kv_b_proj [heads * (nope + v), r] (row-major; per head the key rows W_UK[h], then the value rows
// W_UV[h]) split per head: uk_t [heads, r, nope] (W_UK[h] transposed, as llama.cpp's `deepseek2`
// stores attn_k_b) and uv [heads, v, r] (attn_v_b).
struct KvBSplit {
  std::vector<float> uk_t, uv;
};
KvBSplit split_kv_b(const std::vector<float>& kv_b, int64_t heads, int64_t nope, int64_t v,
                    int64_t r);

struct MlaWeights {
  OwnedTensor in;         // [in_width, hidden]: q_a_proj rows (with q LoRA), then
                          // kv_a_proj_with_mqa's (then the indexer's, or without q LoRA q_proj's)
  OwnedTensor q_a_norm;   // [q_lora_rank] f32, empty without q LoRA
  OwnedTensor q;          // [n_heads * qk, q_lora_rank] q_b_proj; empty without q LoRA
  OwnedTensor kv_a_norm;  // [kv_lora_rank] f32
  OwnedTensor w_uk_t;     // [n_heads, kv_lora_rank, nope]: W_UK[h]^T
  OwnedTensor w_uv;       // [n_heads, v, kv_lora_rank]: W_UV[h]
  OwnedTensor o;          // [hidden, n_heads * v]
  // DSA. kIndexOwn: the layer's indexer (in's last rows are its wk, then weights_proj scaled by
  // 1 / sqrt(index_heads * index_dim)); kIndexShared: the previous layer's selection.
  enum Index { kIndexNone, kIndexOwn, kIndexShared };
  Index index = kIndexNone;
  OwnedTensor index_q;       // [index_heads * index_dim, q_lora_rank] wq_b
  OwnedTensor index_k_norm;  // [index_dim] f32 LayerNorm weight
  OwnedTensor index_k_bias;  // [index_dim] f32 LayerNorm bias
};

// Loads `prefix` + "q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight" (or
// "q_proj.weight"), "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight",
// "o_proj.weight" (prefix e.g. "model.layers.3.self_attn."). With config.rope_interleave the rows
// of the rotated q and k_rope features are put in rotate-half order ((2i, 2i + 1) pairs become
// (i, i + rope / 2)): scores are dot products of q and k rotated alike, so the model computes the
// same function with the plain rope op. A missing or mis-shaped tensor throws ErrorKind::io.
// DSA models (config.dsa()): layer `layer` also loads "indexer.wq_b.weight", "indexer.wk.weight",
// "indexer.k_norm.{weight,bias}" and "indexer.weights_proj.weight" unless it is a shared layer;
// their rotated features are reordered alike.
MlaWeights load_mla_weights(const WeightSource& source, const std::string& prefix,
                            const ModelConfig& config, int layer, Device device, DType dtype);

// Scratch of mla_block for n tokens (from the forward's arena), activation dtype.
struct MlaScratch {
  Tensor in;       // [n, in_width]
  Tensor q_a;      // [n, q_lora_rank] (normalised), or [n, 0] without q LoRA
  Tensor q;        // [n, n_heads * qk] with q LoRA; [0, n_heads * qk] without (q is in `in`)
  Tensor q_abs;    // [n, n_heads, latent]
  Tensor latent;   // [n, row]: the rows written to the cache
  Tensor attn;     // [n, n_heads, latent]
  Tensor attn_v;   // [n, n_heads * v]
  Tensor index_q;  // DSA: [n, index_heads, index_dim]; else [n, 0, 0]
  Tensor ids;      // DSA: i32 [n, index_topk], the selected keys (kept from layer to layer)
};

// out[n, hidden] = o_proj(MLA(xn)) for the normalised input xn [n, hidden]: the new tokens'
// latents go into `pages` (a shared_kv pool [n_pages, page_size, 1, row]) at meta.slots, then
// every query attends over its row's cached latents (causal, `params.scale`: mla_softmax_scale;
// DSA: over the selected ones only); then `then` (optional, as in attention_block).
void mla_block(Context& ctx, const MlaWeights& w, const MlaDims& dims, const RopeOnDevice& rope,
               const ForwardMeta& meta, const Tensor& pages, const AttentionParams& params,
               const Tensor& xn, const MlaScratch& scratch, const Tensor& out,
               const ResidualNorm* then = nullptr);

}  // namespace dspark
