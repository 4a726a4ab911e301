#include "dspark/model/mla.h"

#include <algorithm>
#include <vector>

#include "dspark/core/convert_host.h"
#include "dspark/core/error.h"
#include "dspark/model/weight_source.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/attention.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/mla_prologue.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/rope.h"
#include "dspark/ops/sparse_attention.h"

namespace dspark {
namespace {

// The RMSNorms inside MLA (q_a_layernorm, kv_a_layernorm) use transformers' default eps, not the
// config's rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;
// The DSA indexer's key LayerNorm (GlmMoeDsaIndexer: nn.LayerNorm(index_head_dim, eps=1e-6)).
constexpr float kIndexNormEps = 1e-6f;

// A host f32 [rows, cols] matrix as an engine-dtype tensor on `device`.
OwnedTensor upload(const std::vector<float>& host, const Shape& shape, Device device, DType dtype) {
  OwnedTensor t(dtype, shape, Device::cpu());
  convert_host(host.data(), DType::f32, t.view().data(), dtype, shape.numel());
  return device.is_cpu() ? std::move(t) : OwnedTensor::copy_of(t.view(), device);
}

std::vector<float> load_f32(const WeightLoader& host, const std::string& name, const Shape& shape) {
  const OwnedTensor t = host.load(name, shape);
  const float* p = t.view().data_as<float>();
  return std::vector<float>(p, p + shape.numel());
}

// Puts the `rope` rows starting at `first` from interleaved pairs (2i, 2i + 1) into rotate-half
// order (i, i + rope / 2) of a row-major matrix with `cols` columns.
void deinterleave_rows(std::vector<float>& w, int64_t cols, int64_t first, int rope) {
  const std::vector<float> old(w.begin() + first * cols, w.begin() + (first + rope) * cols);
  const int half = rope / 2;
  for (int j = 0; j < rope; ++j) {
    const int from = j < half ? 2 * j : 2 * (j - half) + 1;
    std::copy_n(old.begin() + from * cols, cols, w.begin() + (first + j) * cols);
  }
}

// Columns [begin, end) of every head of x [n, heads, width], as [n, heads, end - begin].
Tensor heads_cols(const Tensor& x, int64_t begin, int64_t end) {
  return x.slice(2, begin, end);
}

}  // namespace

MlaDims mla_dims(const ModelConfig& c) {
  return MlaDims{c.hidden_size,      c.num_heads,        c.q_lora_rank, c.kv_lora_rank,
                 c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,  c.index_topk,
                 c.index_n_heads,    c.index_head_dim};
}

KvBSplit split_kv_b(const std::vector<float>& kv_b, int64_t heads, int64_t nope, int64_t v,
                    int64_t r) {
  const int64_t per_head = nope + v;
  DSPARK_CHECK(static_cast<int64_t>(kv_b.size()) == heads * per_head * r,
               "split_kv_b: {} values for {} heads of {} rows of {}", kv_b.size(), heads, per_head,
               r);
  KvBSplit out;
  out.uk_t.resize(static_cast<size_t>(heads * r * nope));
  out.uv.resize(static_cast<size_t>(heads * v * r));
  for (int64_t i = 0; i < heads; ++i) {
    const float* head = kv_b.data() + i * per_head * r;
    for (int64_t a = 0; a < nope; ++a)
      for (int64_t c = 0; c < r; ++c)
        out.uk_t[static_cast<size_t>((i * r + c) * nope + a)] = head[a * r + c];
    std::copy_n(head + nope * r, v * r, out.uv.begin() + i * v * r);
  }
  return out;
}

MlaWeights load_mla_weights(const WeightSource& source, const std::string& prefix,
                            const ModelConfig& config, int layer, Device device, DType dtype) {
  const MlaDims d = mla_dims(config);
  const int64_t h = d.hidden, heads = d.n_heads, r = d.kv_lora_rank, qk = d.qk();
  const WeightLoader host(source, Device::cpu(), DType::f32);
  const WeightLoader dev(source, device, dtype);
  MlaWeights w;

  // The fused input projection: q_a_proj's rows (with q LoRA), then the latent rows (then the
  // indexer's, or q_proj's without q LoRA); q_b_proj or q_proj, whose rotated rows follow the
  // same order as k_rope's.
  const bool q_lora = d.q_lora_rank > 0;
  std::vector<float> in = q_lora
                              ? load_f32(host, prefix + "q_a_proj.weight", Shape{d.q_lora_rank, h})
                              : std::vector<float>{};
  std::vector<float> kv_a =
      load_f32(host, prefix + "kv_a_proj_with_mqa.weight", Shape{d.latent(), h});
  const int64_t q_cols = q_lora ? d.q_lora_rank : h;
  std::vector<float> q = load_f32(host, prefix + (q_lora ? "q_b_proj.weight" : "q_proj.weight"),
                                  Shape{heads * qk, q_cols});
  if (config.rope_interleave) {
    deinterleave_rows(kv_a, h, r, d.rope);
    for (int64_t i = 0; i < heads; ++i) deinterleave_rows(q, q_cols, i * qk + d.nope, d.rope);
  }
  in.insert(in.end(), kv_a.begin(), kv_a.end());
  int64_t in_rows = d.q_lora_rank + d.latent();
  if (config.dsa()) {
    w.index = config.index_shared[static_cast<size_t>(layer)] ? MlaWeights::kIndexShared
                                                              : MlaWeights::kIndexOwn;
  }
  if (w.index == MlaWeights::kIndexOwn) {
    // The indexer's rotated features are its first `rope` (of q per head, of k), in interleaved
    // pairs: reordered like MLA's (the LayerNorm before k's rotation is order-blind when its
    // weight and bias move alike).
    const std::string x = prefix + "indexer.";
    const int64_t ih = d.index_heads, id = d.index_dim;
    std::vector<float> wk = load_f32(host, x + "wk.weight", Shape{id, h});
    std::vector<float> wq = load_f32(host, x + "wq_b.weight", Shape{ih * id, d.q_lora_rank});
    std::vector<float> norm_w = load_f32(host, x + "k_norm.weight", Shape{id});
    std::vector<float> norm_b = load_f32(host, x + "k_norm.bias", Shape{id});
    std::vector<float> head_w = load_f32(host, x + "weights_proj.weight", Shape{ih, h});
    deinterleave_rows(wk, h, 0, d.rope);
    deinterleave_rows(norm_w, 1, 0, d.rope);
    deinterleave_rows(norm_b, 1, 0, d.rope);
    for (int64_t i = 0; i < ih; ++i) deinterleave_rows(wq, d.q_lora_rank, i * id, d.rope);
    // score = sum_h w_h relu(q_h . k) / sqrt(heads * dim): the constant goes into the weights.
    const auto head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ih * id)));
    for (float& v : head_w) v *= head_scale;
    in.insert(in.end(), wk.begin(), wk.end());
    in.insert(in.end(), head_w.begin(), head_w.end());
    in_rows = d.in_width();
    w.index_q = upload(wq, Shape{ih * id, d.q_lora_rank}, device, dtype);
    w.index_k_norm = upload(norm_w, Shape{id}, device, DType::f32);
    w.index_k_bias = upload(norm_b, Shape{id}, device, DType::f32);
  }
  if (!q_lora) {
    in.insert(in.end(), q.begin(), q.end());
    in_rows += d.q_in_width();
  }
  w.in = upload(in, Shape{in_rows, h}, device, dtype);
  if (q_lora) w.q = upload(q, Shape{heads * qk, q_cols}, device, dtype);
  if (q_lora)
    w.q_a_norm = dev.load(prefix + "q_a_layernorm.weight", Shape{d.q_lora_rank}, DType::f32);
  w.kv_a_norm = dev.load(prefix + "kv_a_layernorm.weight", Shape{r}, DType::f32);

  // kv_b_proj [heads * (nope + v), r]: per head the key rows W_UK[h] (stored transposed, the
  // query's absorption takes q_nope . W_UK[h]) then the value rows W_UV[h]. GGUF files of
  // llama.cpp's `deepseek2` hold it already split: k_b_proj [heads, r, nope] (W_UK[h] transposed)
  // and v_b_proj [heads, v, r].
  std::vector<float> uk_t, uv;
  if (!source.contains(prefix + "kv_b_proj.weight") &&
      source.contains(prefix + "k_b_proj.weight")) {
    uk_t = load_f32(host, prefix + "k_b_proj.weight", Shape{heads, r, d.nope});
    uv = load_f32(host, prefix + "v_b_proj.weight", Shape{heads, d.v, r});
  } else {
    KvBSplit split =
        split_kv_b(load_f32(host, prefix + "kv_b_proj.weight", Shape{heads * (d.nope + d.v), r}),
                   heads, d.nope, d.v, r);
    uk_t = std::move(split.uk_t);
    uv = std::move(split.uv);
  }
  w.w_uk_t = upload(uk_t, Shape{heads, r, d.nope}, device, dtype);
  w.w_uv = upload(uv, Shape{heads, d.v, r}, device, dtype);
  w.o = dev.load(prefix + "o_proj.weight", Shape{h, heads * d.v});
  return w;
}

void mla_block(Context& ctx, const MlaWeights& w, const MlaDims& d, const RopeOnDevice& rope_table,
               const ForwardMeta& meta, const Tensor& pages, const AttentionParams& params,
               const Tensor& xn, const MlaScratch& s, const Tensor& out, const ResidualNorm* then) {
  const int64_t n = xn.size(0), heads = d.n_heads, r = d.kv_lora_rank, lat = d.latent();
  linear(ctx, xn, w.in.view(), Tensor{}, s.in.slice(1, 0, w.in.view().size(0)));

  // Queries [n, heads, qk]: q_b_proj(rms_norm(q_a)), or q_proj(xn), the last columns of s.in.
  Tensor q3;
  if (d.q_lora_rank > 0) {
    rms_norm(ctx, s.in.slice(1, 0, d.q_lora_rank), w.q_a_norm.view(), s.q_a,
             RmsNormParams{kLatentNormEps, false});
    linear(ctx, s.q_a, w.q.view(), Tensor{}, s.q);
    q3 = s.q.reshape(Shape{n, heads, d.qk()});
  } else {
    const Tensor q = s.in.slice(1, d.in_width() - d.q_in_width(), d.in_width());
    q3 = Tensor(q.data(), q.dtype(), Shape{n, heads, d.qk()}, Shape{q.stride(0), d.qk(), 1},
                q.device());
  }

  // The cached row [rms_norm(c_kv), rope(k_rope)], written before attention reads it, and the
  // absorbed query [q_nope[h] . W_UK[h], rope(q_rope[h])] per head.
  const Tensor kv = s.in.slice(1, d.q_lora_rank, d.q_lora_rank + lat);
  const int64_t index_in = d.q_lora_rank + lat;  // the indexer's columns of s.in
  if (w.index == MlaWeights::kIndexNone) {
    MlaPrologueArgs pro;
    pro.kv = kv;
    pro.kv_norm = w.kv_a_norm.view();
    pro.eps = kLatentNormEps;
    pro.q_rope = heads_cols(q3, d.nope, d.qk());
    pro.positions = meta.positions;
    pro.inv_freq = rope_table.inv_freq;
    pro.attention_scaling = rope_table.attention_scaling;
    pro.slots = meta.slots;
    pro.pages = pages;
    pro.latent = s.latent;
    pro.q_out = heads_cols(s.q_abs, r, lat);
    mla_prologue(ctx, pro);
  } else {
    // DSA: the row also holds the index key (a layer with its own indexer writes it).
    rms_norm(ctx, kv.slice(1, 0, r), w.kv_a_norm.view(), s.latent.slice(1, 0, r),
             RmsNormParams{kLatentNormEps, false});
    convert(ctx, kv.slice(1, r, lat), s.latent.slice(1, r, lat));
    const Tensor latent3 = s.latent.reshape(Shape{n, 1, int64_t{d.row()}});
    rope(ctx, heads_cols(latent3, r, lat), meta.positions, rope_table.inv_freq,
         rope_table.attention_scaling);
    if (w.index == MlaWeights::kIndexOwn) {
      // The index key: LayerNorm(wk x) with its first `rope` features rotated, after the latent.
      layer_norm(ctx, s.in.slice(1, index_in, index_in + d.index_dim), w.index_k_norm.view(),
                 w.index_k_bias.view(), s.latent.slice(1, lat, d.row()), kIndexNormEps);
      rope(ctx, heads_cols(latent3, lat, lat + d.rope), meta.positions, rope_table.inv_freq,
           rope_table.attention_scaling);
    }
    kv_write(ctx, latent3, latent3, meta.slots, pages, pages);
    convert(ctx, heads_cols(q3, d.nope, d.qk()), heads_cols(s.q_abs, r, lat));
    rope(ctx, heads_cols(s.q_abs, r, lat), meta.positions, rope_table.inv_freq,
         rope_table.attention_scaling);
  }
  linear_per_head(ctx, heads_cols(q3, 0, d.nope), w.w_uk_t.view(), heads_cols(s.q_abs, 0, r));

  // One latent "head" serves every query head as key and value; the value part of each output is
  // its first kv_lora_rank columns.
  const PagedKv cache{pages, pages, meta.page_indptr, meta.page_indices, meta.kv_lens};
  if (w.index == MlaWeights::kIndexNone) {
    paged_attention(ctx, s.q_abs, cache, meta.q_indptr, meta.positions, params, s.attn);
  } else {
    if (w.index == MlaWeights::kIndexOwn) {
      // The indexer's queries [n, index_heads, index_dim] from the normalised q LoRA, rotated
      // alike; its head weights are the last columns of s.in (pre-scaled at load).
      linear(ctx, s.q_a, w.index_q.view(), Tensor{},
             s.index_q.reshape(Shape{n, int64_t{d.index_heads} * d.index_dim}));
      rope(ctx, heads_cols(s.index_q, 0, d.rope), meta.positions, rope_table.inv_freq,
           rope_table.attention_scaling);
      const Tensor keys = pages.slice(3, lat, d.row());
      index_topk(ctx, s.index_q,
                 s.in.slice(1, index_in + d.index_dim, index_in + d.index_dim + d.index_heads),
                 PagedKv{keys, keys, meta.page_indptr, meta.page_indices, meta.kv_lens},
                 meta.q_indptr, meta.positions, 1.0f, s.ids);
    }
    sparse_paged_attention(ctx, s.q_abs, cache, meta.q_indptr, s.ids, params.scale,
                           heads_cols(s.attn, 0, r));
  }
  linear_per_head(ctx, heads_cols(s.attn, 0, r), w.w_uv.view(),
                  s.attn_v.reshape(Shape{n, heads, d.v}));
  project_then(ctx, s.attn_v, w.o.view(), Tensor{}, QuantizedWeight{}, Tensor{}, out, then);
}

}  // namespace dspark
