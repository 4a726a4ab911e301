// Test support for the DFlash / DSpark block drafter (header-only, shared by the CPU and CUDA
// suites): tiny random drafter checkpoints in the three published layouts, and an independent
// reference of the drafter forward written from the equations (naive loops in double precision;
// nothing shared with src/dspark/spec/dspark).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "dspark/core/buffer.h"
#include "dspark/engine/generate.h"
#include "dspark/engine/speculative.h"
#include "dspark/io/safetensors.h"
#include "dspark/model/config.h"
#include "dspark/model/model.h"
#include "dspark/spec/dspark/dspark_source.h"

namespace dspark::test {

// A temporary directory named after the running test (suite + name, '/' of parameterised names
// replaced): prefix_<suite>_<test>_<name>.
inline std::filesystem::path per_test_temp_dir(const std::string& prefix, const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = std::string(info->test_suite_name()) + "_" + info->name();
  std::replace(test.begin(), test.end(), '/', '_');
  return std::filesystem::temp_directory_path() / (prefix + "_" + test + "_" + name);
}

struct TinyDrafterSpec {
  std::string layout = "deepspec";  // deepspec | specforge | dflash
  std::string markov = "vanilla";   // none | vanilla | gated | rnn  (dflash: none)
  bool confidence = true;
  bool confidence_with_markov = true;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 16;
  int intermediate = 96;
  int rank = 8;
  int block_size = 4;
  std::vector<int> taps = {0, 2};
  int mask_token_id = 7;
  bool own_embedding = false;
  bool own_lm_head = false;
  bool attention_bias = false;
  uint32_t seed = 1;
  float std = 0.15f;
};

// Writes dir/config.json and dir/model.safetensors of a drafter for a target with hidden size
// `target.hidden_size` and vocabulary `target.vocab_size` (random weights, fixed seed).
inline void write_tiny_drafter(const std::filesystem::path& dir, const TinyDrafterSpec& s,
                               const ModelConfig& target) {
  using nlohmann::json;
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "dspark_thresholds.json");
  const int h = target.hidden_size, v = target.vocab_size;
  const bool dflash = s.layout == "dflash";
  const std::string markov = dflash ? "none" : s.markov;
  const bool confidence = !dflash && s.confidence;
  const bool conf_markov = confidence && s.confidence_with_markov && markov != "none";
  json cfg = {{"model_type", "qwen3"},
              {"vocab_size", v},
              {"hidden_size", h},
              {"intermediate_size", s.intermediate},
              {"num_hidden_layers", s.layers},
              {"num_attention_heads", s.heads},
              {"num_key_value_heads", s.kv_heads},
              {"head_dim", s.head_dim},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000.0},
              {"max_position_embeddings", 4096},
              {"attention_bias", s.attention_bias},
              {"tie_word_embeddings", false},
              {"block_size", s.block_size},
              {"num_target_layers", target.num_layers},
              {"dtype", "float32"}};
  json heads = json::object();
  if (!dflash) {
    heads["markov_rank"] = markov == "none" ? 0 : s.rank;
    if (markov != "none") heads["markov_head_type"] = markov;
    heads["enable_confidence_head"] = confidence;
    if (confidence) heads["confidence_head_with_markov"] = conf_markov;
  }
  if (s.layout == "deepspec") {
    cfg["architectures"] = {"Qwen3DSparkModel"};
    cfg["mask_token_id"] = s.mask_token_id;
    cfg["target_layer_ids"] = s.taps;
    cfg["num_anchors"] = 512;
    for (auto& [k, val] : heads.items()) cfg[k] = val;
  } else {
    cfg["architectures"] = {s.layout == "dflash" ? "DFlashDraftModel" : "DSparkDraftModel"};
    json dc = {{"mask_token_id", s.mask_token_id}, {"target_layer_ids", s.taps}};
    if (s.layout == "specforge") {
      dc["projector_type"] = "dspark";
      for (auto& [k, val] : heads.items()) dc[k] = val;
    }
    cfg["dflash_config"] = dc;
  }
  std::ofstream(dir / "config.json") << cfg.dump(2);

  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> tensors;
  uint32_t seed = s.seed * 7919u;
  auto add = [&](const std::string& name, Shape shape, float stddev, float mean = 0.0f) {
    OwnedTensor t = random_tensor(DType::f32, shape, seed++, stddev);
    auto* p = static_cast<float*>(t.view().data());
    for (int64_t i = 0; i < t.view().numel(); ++i) p[i] += mean;
    owned.push_back(std::move(t));
    tensors.emplace_back(name, owned.back().view());
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim, r = s.rank;
  const int64_t m = static_cast<int64_t>(s.taps.size());
  add("fc.weight", Shape{h, m * h}, s.std);
  add("hidden_norm.weight", Shape{h}, 0.1f, 1.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", Shape{h}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", Shape{h}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", Shape{q, h}, s.std);
    add(p + "self_attn.k_proj.weight", Shape{kv, h}, s.std);
    add(p + "self_attn.v_proj.weight", Shape{kv, h}, s.std);
    add(p + "self_attn.o_proj.weight", Shape{h, q}, s.std);
    if (s.attention_bias) {
      add(p + "self_attn.q_proj.bias", Shape{q}, s.std);
      add(p + "self_attn.k_proj.bias", Shape{kv}, s.std);
      add(p + "self_attn.v_proj.bias", Shape{kv}, s.std);
      add(p + "self_attn.o_proj.bias", Shape{h}, s.std);
    }
    add(p + "self_attn.q_norm.weight", Shape{s.head_dim}, 0.1f, 1.0f);
    add(p + "self_attn.k_norm.weight", Shape{s.head_dim}, 0.1f, 1.0f);
    add(p + "mlp.gate_proj.weight", Shape{s.intermediate, h}, s.std);
    add(p + "mlp.up_proj.weight", Shape{s.intermediate, h}, s.std);
    add(p + "mlp.down_proj.weight", Shape{h, s.intermediate}, s.std);
  }
  add("norm.weight", Shape{h}, 0.1f, 1.0f);
  if (s.own_embedding) add("embed_tokens.weight", Shape{v, h}, 1.0f);
  if (s.own_lm_head) add("lm_head.weight", Shape{v, h}, 0.5f);
  if (markov != "none") {
    add("markov_head.markov_w1.weight", Shape{v, r}, 1.0f);
    add("markov_head.markov_w2.weight", Shape{v, r}, 0.5f);
    if (markov == "gated") {
      add("markov_head.gate_proj.weight", Shape{r, h + r}, 0.3f);
      add("markov_head.gate_proj.bias", Shape{r}, 0.3f);
    }
    if (markov == "rnn") {
      add("markov_head.joint_proj.weight", Shape{3 * r, 2 * r + h}, 0.3f);
      add("markov_head.joint_proj.bias", Shape{3 * r}, 0.3f);
    }
  }
  if (confidence) {
    add("confidence_head.proj.weight", Shape{1, h + (conf_markov ? r : 0)}, 0.3f);
    add("confidence_head.proj.bias", Shape{1}, 0.3f);
  }
  write_safetensors(dir / "model.safetensors", tensors);
}

// ---- the reference ----------------------------------------------------------------------------

// The drafter's weights (host, double) and hyper-parameters read back from a checkpoint written
// above (or any drafter checkpoint with default RoPE), plus the target's embedding / LM head.
class ReferenceDrafter {
 public:
  ReferenceDrafter(const std::filesystem::path& dir, const std::filesystem::path& target_dir) {
    const nlohmann::json c = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    const nlohmann::json& f = c.contains("dflash_config") ? c["dflash_config"] : c;
    arch_ = c["architectures"][0].get<std::string>();
    d_ = c["hidden_size"];
    vocab_ = c["vocab_size"];
    layers_ = c["num_hidden_layers"];
    heads_ = c["num_attention_heads"];
    kv_heads_ = c["num_key_value_heads"];
    hd_ = c["head_dim"];
    inter_ = c["intermediate_size"];
    eps_ = c["rms_norm_eps"];
    theta_ = c.value("rope_theta", 10000.0);
    if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
      theta_ = c["rope_parameters"].value("rope_theta", theta_);
    mask_ = f["mask_token_id"];
    bias_ = c.value("attention_bias", false);
    rank_ = f.value("markov_rank", 0);
    markov_ = rank_ > 0 ? f.value("markov_head_type", std::string("vanilla")) : "none";
    confidence_ = f.value("enable_confidence_head", false);
    conf_markov_ = confidence_ && f.value("confidence_head_with_markov", false);
    offset_ = arch_ == "DFlashDraftModel" ? 1 : 0;
    const SafeTensors st = SafeTensors::open(dir);
    for (const std::string& name : st.names()) w_[name] = read(st.get(name));
    const SafeTensors tt = SafeTensors::open(target_dir);
    if (!w_.count("embed_tokens.weight"))
      w_["embed_tokens.weight"] = read(tt.get("model.embed_tokens.weight"));
    if (!w_.count("lm_head.weight"))
      w_["lm_head.weight"] =
          read(tt.contains("lm_head.weight") ? tt.get("lm_head.weight")
                                             : tt.get("model.embed_tokens.weight"));
  }

  int vocab() const { return vocab_; }
  int hidden() const { return d_; }
  int offset() const { return offset_; }
  bool has_confidence() const { return confidence_; }

  struct Block {
    std::vector<double> features;    // [N, d] context features C
    std::vector<double> hidden;      // [L, d] final hidden states of the block
    std::vector<double> base;        // [S, V] base logits of the draft rows
    std::vector<double> z;           // [S, V] corrected logits
    std::vector<int> tokens;         // [S] greedy
    std::vector<double> confidence;  // [S] (empty without a confidence head)
  };

  // taps: [N, m*H] (the committed rows at positions 0..N-1); the block [anchor, mask...] of L rows
  // at positions N..N+L-1; S = L - offset greedy drafts. `forced` (optional, S tokens): use
  // forced[k-1] instead of the reference's own token as the previous token of step k (teacher
  // forcing, to measure the heads of a lower-precision run independently of its token choices).
  Block block(const std::vector<float>& taps, int64_t n_ctx, int anchor, int L,
              const std::vector<int32_t>* forced = nullptr) const {
    Block b;
    const int64_t tap_width = n_ctx > 0 ? static_cast<int64_t>(taps.size()) / n_ctx : 0;
    // C = hidden_norm(fc(taps))
    std::vector<double> ctx_raw =
        matmul(std::vector<double>(taps.begin(), taps.end()), n_ctx, tap_width, w("fc.weight"), d_);
    b.features = rms_rows(ctx_raw, n_ctx, d_, w("hidden_norm.weight"));
    std::vector<double> x(static_cast<size_t>(L) * d_);
    for (int j = 0; j < L; ++j) {
      const int tok = j == 0 ? anchor : mask_;
      for (int c = 0; c < d_; ++c) x[j * d_ + c] = w("embed_tokens.weight")[tok * d_ + c];
    }
    const int qw = heads_ * hd_, kvw = kv_heads_ * hd_;
    for (int l = 0; l < layers_; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const auto xn = rms_rows(x, L, d_, w(p + "input_layernorm.weight"));
      auto proj = [&](const std::vector<double>& in, int64_t rows, const std::string& name,
                      int out) {
        auto y = matmul(in, rows, d_, w(p + "self_attn." + name + ".weight"), out);
        if (bias_) add_bias(y, rows, out, w(p + "self_attn." + name + ".bias"));
        return y;
      };
      auto q = proj(xn, L, "q_proj", qw);
      auto kb = proj(xn, L, "k_proj", kvw);
      auto vb = proj(xn, L, "v_proj", kvw);
      auto kc = proj(b.features, n_ctx, "k_proj", kvw);
      auto vc = proj(b.features, n_ctx, "v_proj", kvw);
      q = rms_rows(q, L * heads_, hd_, w(p + "self_attn.q_norm.weight"));
      kb = rms_rows(kb, L * kv_heads_, hd_, w(p + "self_attn.k_norm.weight"));
      kc = rms_rows(kc, n_ctx * kv_heads_, hd_, w(p + "self_attn.k_norm.weight"));
      for (int j = 0; j < L; ++j) {
        rope(&q[j * qw], heads_, n_ctx + j);
        rope(&kb[j * kvw], kv_heads_, n_ctx + j);
      }
      for (int64_t i = 0; i < n_ctx; ++i) rope(&kc[i * kvw], kv_heads_, i);
      // keys/values: [context ; block], every block query sees all of them (non-causal)
      std::vector<double> keys(kc), values(vc);
      keys.insert(keys.end(), kb.begin(), kb.end());
      values.insert(values.end(), vb.begin(), vb.end());
      const int64_t n_keys = n_ctx + L;
      std::vector<double> attn(static_cast<size_t>(L) * qw, 0.0);
      const int group = heads_ / kv_heads_;
      for (int j = 0; j < L; ++j)
        for (int hh = 0; hh < heads_; ++hh) {
          const int g = hh / group;
          std::vector<double> score(static_cast<size_t>(n_keys));
          double mx = -1e300;
          for (int64_t t = 0; t < n_keys; ++t) {
            double sdot = 0;
            for (int e = 0; e < hd_; ++e)
              sdot += q[j * qw + hh * hd_ + e] * keys[t * kvw + g * hd_ + e];
            score[t] = sdot / std::sqrt(static_cast<double>(hd_));
            mx = std::max(mx, score[t]);
          }
          double sum = 0;
          for (auto& sc : score) sum += (sc = std::exp(sc - mx));
          for (int64_t t = 0; t < n_keys; ++t)
            for (int e = 0; e < hd_; ++e)
              attn[j * qw + hh * hd_ + e] += score[t] / sum * values[t * kvw + g * hd_ + e];
        }
      auto o = matmul(attn, L, qw, w(p + "self_attn.o_proj.weight"), d_);
      if (bias_) add_bias(o, L, d_, w(p + "self_attn.o_proj.bias"));
      for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
      const auto xn2 = rms_rows(x, L, d_, w(p + "post_attention_layernorm.weight"));
      const auto gate = matmul(xn2, L, d_, w(p + "mlp.gate_proj.weight"), inter_);
      const auto up = matmul(xn2, L, d_, w(p + "mlp.up_proj.weight"), inter_);
      std::vector<double> act(gate.size());
      for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const auto down = matmul(act, L, inter_, w(p + "mlp.down_proj.weight"), d_);
      for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
    }
    b.hidden = rms_rows(x, L, d_, w("norm.weight"));
    const int S = L - offset_;
    const std::vector<double> hs(b.hidden.begin() + static_cast<int64_t>(offset_) * d_,
                                 b.hidden.end());
    b.base = matmul(hs, S, d_, w("lm_head.weight"), vocab_);
    b.z = b.base;
    int prev = anchor;
    std::vector<double> state(static_cast<size_t>(rank_), 0.0);
    for (int k = 0; k < S; ++k) {
      const double* h = &hs[static_cast<size_t>(k) * d_];
      if (markov_ != "none") {
        std::vector<double> e(w("markov_head.markov_w1.weight").begin() + prev * rank_,
                              w("markov_head.markov_w1.weight").begin() + (prev + 1) * rank_);
        std::vector<double> latent = e;
        if (markov_ == "gated") {
          std::vector<double> feat(h, h + d_);
          feat.insert(feat.end(), e.begin(), e.end());
          auto g = matmul(feat, 1, d_ + rank_, w("markov_head.gate_proj.weight"), rank_);
          add_bias(g, 1, rank_, w("markov_head.gate_proj.bias"));
          for (int i = 0; i < rank_; ++i) latent[i] = sigmoid(g[i]) * e[i];
        } else if (markov_ == "rnn") {
          std::vector<double> feat(state);
          feat.insert(feat.end(), e.begin(), e.end());
          feat.insert(feat.end(), h, h + d_);
          auto pj = matmul(feat, 1, 2 * rank_ + d_, w("markov_head.joint_proj.weight"), 3 * rank_);
          add_bias(pj, 1, 3 * rank_, w("markov_head.joint_proj.bias"));
          for (int i = 0; i < rank_; ++i) {
            const double a = sigmoid(pj[i]);
            state[i] = a * state[i] + (1 - a) * std::tanh(pj[rank_ + i]);
            latent[i] = std::tanh(pj[2 * rank_ + i]);
          }
        }
        const auto bias = matmul(latent, 1, rank_, w("markov_head.markov_w2.weight"), vocab_);
        for (int t = 0; t < vocab_; ++t) b.z[k * vocab_ + t] += bias[t];
      }
      int best = 0;
      for (int t = 1; t < vocab_; ++t)
        if (b.z[k * vocab_ + t] > b.z[k * vocab_ + best]) best = t;
      if (confidence_) {
        std::vector<double> feat(h, h + d_);
        if (conf_markov_)
          feat.insert(feat.end(), w("markov_head.markov_w1.weight").begin() + prev * rank_,
                      w("markov_head.markov_w1.weight").begin() + (prev + 1) * rank_);
        const auto logit =
            matmul(feat, 1, static_cast<int64_t>(feat.size()), w("confidence_head.proj.weight"), 1);
        b.confidence.push_back(sigmoid(logit[0] + w("confidence_head.proj.bias")[0]));
      }
      b.tokens.push_back(best);
      prev = forced != nullptr ? (*forced)[static_cast<size_t>(k)] : best;
    }
    return b;
  }

 private:
  static std::vector<double> read(const Tensor& t) {
    const std::vector<float> f = to_f32_vector(t);
    return std::vector<double>(f.begin(), f.end());
  }
  const std::vector<double>& w(const std::string& name) const {
    const auto it = w_.find(name);
    if (it == w_.end()) ADD_FAILURE() << "reference: missing tensor " << name;
    return it->second;
  }
  static double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
  // y[rows, out] = x[rows, in] . W[out, in]^T
  static std::vector<double> matmul(const std::vector<double>& x, int64_t rows, int64_t in,
                                    const std::vector<double>& wt, int64_t out) {
    std::vector<double> y(static_cast<size_t>(rows * out), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * wt[o * in + i];
        y[r * out + o] = s;
      }
    return y;
  }
  static void add_bias(std::vector<double>& y, int64_t rows, int64_t out,
                       const std::vector<double>& b) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] += b[o];
  }
  std::vector<double> rms_rows(const std::vector<double>& x, int64_t rows, int64_t dim,
                               const std::vector<double>& weight) const {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
      const double inv = 1.0 / std::sqrt(ss / dim + eps_);
      for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * weight[i];
    }
    return y;
  }
  // HF rotate_half RoPE (default scheme) on `n_heads` heads at position `pos`.
  void rope(double* v, int n_heads, int64_t pos) const {
    const int half = hd_ / 2;
    for (int hh = 0; hh < n_heads; ++hh) {
      double* x = v + hh * hd_;
      for (int i = 0; i < half; ++i) {
        const double inv_freq = 1.0 / std::pow(theta_, 2.0 * i / hd_);
        const double a = static_cast<double>(pos) * inv_freq;
        const double x1 = x[i], x2 = x[i + half];
        x[i] = x1 * std::cos(a) - x2 * std::sin(a);
        x[i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }

  std::string arch_, markov_;
  int d_ = 0, vocab_ = 0, layers_ = 0, heads_ = 0, kv_heads_ = 0, hd_ = 0, inter_ = 0;
  double eps_ = 1e-6, theta_ = 10000.0;
  int mask_ = 0, rank_ = 0, offset_ = 0;
  bool bias_ = false, confidence_ = false, conf_markov_ = false;
  std::map<std::string, std::vector<double>> w_;
};

// Relative RMS error of a (engine, f32) against b (reference, double).
inline double rel_rms(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (a.size() != b.size()) return 1e30;
  return std::sqrt(num / std::max(den, 1e-300));
}

// ---- driving a source by hand -----------------------------------------------------------------

// The taps of `tokens` (positions 0..n-1) from a fresh target forward, as host [n, m*H].
inline std::vector<float> fresh_taps(Model& target, Context& ctx,
                                     const std::vector<int32_t>& tokens,
                                     const std::vector<int>& layers) {
  PagedKvCache kv(target.kv_shape(16, static_cast<int>(tokens.size()) / 16 + 2), target.device());
  ForwardBatch b;
  b.tokens = tokens;
  b.row_indptr = {0, static_cast<int32_t>(tokens.size())};
  b.seqs = {kv.create_sequence()};
  b.tap_layers = layers;
  const ForwardOutput fo = target.forward(ctx, kv, b);
  const int64_t n = static_cast<int64_t>(tokens.size()), h = target.config().hidden_size;
  const int64_t m = static_cast<int64_t>(layers.size());
  std::vector<float> out(static_cast<size_t>(n * m * h));
  for (int64_t j = 0; j < m; ++j) {
    const std::vector<float> t = to_f32_vector(fo.taps[static_cast<size_t>(j)]);
    for (int64_t r = 0; r < n; ++r)
      std::copy_n(t.begin() + r * h, h, out.begin() + r * m * h + j * h);
  }
  return out;
}

struct DriveStats {
  double features = 0;          // max relative RMS error of the context features (first commit)
  double hidden = 0;            // ... of the block's final hidden states
  double base = 0;              // ... of the base logits
  double corrected = 0;         // ... of the corrected logits
  double confidence = 0;        // max absolute error of the confidences
  int64_t tokens = 0;           // greedy draft tokens compared
  int64_t tokens_equal = 0;     // of which identical to the reference
  int64_t tokens_decisive = 0;  // tokens whose reference top-2 gap is clear (> 1e-2 * rms)
  int64_t tokens_decisive_equal = 0;
  int64_t rows_committed = 0;  // kept tokens handed to commit
};

// Runs `rounds` greedy rounds over the prompts (one row each, all rows batched): every round
// proposes, compares each row's block with the reference computed from scratch on the taps of
// everything committed so far, then commits [pending, the first a drafts] (a cycles through
// `accepts`, i.e. forced acceptance, rejected drafts are never committed) and checks that the
// commit projected exactly the committed rows.
// `teacher_forcing`: the reference follows the engine's tokens (lower-precision runs, whose
// near-tie choices may differ); `decisive_margin`: a token counts as decisive when the
// reference's top-2 corrected logits differ by more than margin x their RMS.
inline DriveStats drive_and_compare(Model& target, Context& ctx, DSparkSource& source,
                                    const ReferenceDrafter& ref,
                                    const std::vector<std::vector<int32_t>>& prompts, int rounds,
                                    const std::vector<int>& accepts, bool teacher_forcing = false,
                                    double decisive_margin = 1e-2) {
  DriveStats st;
  const int vocab = target.config().vocab_size;
  const std::vector<int> layers = source.target_taps();
  const int L = source.block_rows();
  PagedKvCache kv(target.kv_shape(16, 256), target.device());
  const size_t n_rows = prompts.size();
  std::vector<SeqId> seqs(n_rows);
  std::vector<std::vector<int32_t>> committed = prompts;
  std::vector<int32_t> pending(n_rows);
  ForwardBatch pre;
  pre.row_indptr.push_back(0);
  pre.tap_layers = layers;
  for (size_t i = 0; i < n_rows; ++i) {
    seqs[i] = kv.create_sequence();
    source.begin(ctx, static_cast<RowId>(i), prompts[i]);
    pre.tokens.insert(pre.tokens.end(), prompts[i].begin(), prompts[i].end());
    pre.row_indptr.push_back(static_cast<int32_t>(pre.tokens.size()));
    pre.seqs.push_back(seqs[i]);
    pending[i] = static_cast<int32_t>((13 * i + 5) % static_cast<size_t>(vocab));
  }
  ForwardOutput fo = target.forward(ctx, kv, pre);
  std::vector<RowUpdate> ups(n_rows);
  for (size_t i = 0; i < n_rows; ++i) {
    ups[i].row = static_cast<RowId>(i);
    ups[i].kept_tokens = prompts[i];
    ups[i].first_position = 0;
    ups[i].tap_offset = pre.row_indptr[i];
    ups[i].pending = pending[i];
    st.rows_committed += static_cast<int64_t>(prompts[i].size());
  }
  source.commit(ctx, ups, fo.taps);
  EXPECT_EQ(source.dspark_stats().last_commit_rows_projected, pre.row_indptr.back());
  if (n_rows == 1 && source.record().n_context_rows > 0) {
    const auto rb = ref.block(fresh_taps(target, ctx, prompts[0], layers),
                              static_cast<int64_t>(prompts[0].size()), pending[0], L);
    st.features = rel_rms(source.record().context_features, rb.features);
  }

  std::vector<std::vector<int32_t>> kept(n_rows);
  for (int round = 0; round < rounds; ++round) {
    std::vector<ProposeRequest> reqs(n_rows);
    for (size_t i = 0; i < n_rows; ++i) {
      reqs[i].row = static_cast<RowId>(i);
      reqs[i].max_tokens = source.max_drafts();
    }
    Proposal p;
    source.propose(ctx, reqs, p);
    const DSparkRecord& rec = source.record();
    const int S = rec.steps;
    EXPECT_EQ(rec.rows, static_cast<int>(n_rows));
    if (rec.rows != static_cast<int>(n_rows)) return st;
    for (size_t i = 0; i < n_rows; ++i) {
      const std::vector<int32_t> engine_tokens(rec.tokens.begin() + i * S,
                                               rec.tokens.begin() + (i + 1) * S);
      const auto rb = ref.block(fresh_taps(target, ctx, committed[i], layers),
                                static_cast<int64_t>(committed[i].size()), pending[i], L,
                                teacher_forcing ? &engine_tokens : nullptr);
      const int64_t d = ref.hidden(), v = ref.vocab();
      auto slice = [](const std::vector<float>& a, int64_t begin, int64_t len) {
        return std::vector<float>(a.begin() + begin, a.begin() + begin + len);
      };
      st.hidden = std::max(st.hidden, rel_rms(slice(rec.hidden, i * L * d, L * d), rb.hidden));
      st.base = std::max(st.base, rel_rms(slice(rec.base_logits, i * S * v, S * v), rb.base));
      st.corrected = std::max(st.corrected, rel_rms(slice(rec.logits, i * S * v, S * v), rb.z));
      for (int k = 0; k < S; ++k) {
        const int32_t tok = rec.tokens[i * S + k];
        ++st.tokens;
        st.tokens_equal += tok == rb.tokens[k] ? 1 : 0;
        // The reference's margin between its best and second-best corrected logit.
        std::vector<double> row(rb.z.begin() + k * v, rb.z.begin() + (k + 1) * v);
        double ss = 0;
        for (double x : row) ss += x * x;
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<>());
        if (row[0] - row[1] > decisive_margin * std::sqrt(ss / v)) {
          ++st.tokens_decisive;
          st.tokens_decisive_equal += tok == rb.tokens[k] ? 1 : 0;
        }
        if (ref.has_confidence())
          st.confidence =
              std::max(st.confidence, std::fabs(rec.confidence[i * S + k] - rb.confidence[k]));
      }
      // Unpruned greedy proposal = the recorded tokens.
      const std::vector<int32_t> drafted(p.tokens.begin() + p.indptr[i],
                                         p.tokens.begin() + p.indptr[i + 1]);
      EXPECT_EQ(drafted,
                std::vector<int32_t>(rec.tokens.begin() + i * S, rec.tokens.begin() + (i + 1) * S));
    }
    // "Verify": the target processes [pending, drafts]; the first a drafts are kept.
    ForwardBatch vb;
    vb.row_indptr.push_back(0);
    vb.tap_layers = layers;
    std::vector<int> before(n_rows), acc(n_rows);
    for (size_t i = 0; i < n_rows; ++i) {
      before[i] = kv.length(seqs[i]);
      vb.tokens.push_back(pending[i]);
      vb.tokens.insert(vb.tokens.end(), p.tokens.begin() + p.indptr[i],
                       p.tokens.begin() + p.indptr[i + 1]);
      vb.row_indptr.push_back(static_cast<int32_t>(vb.tokens.size()));
      vb.seqs.push_back(seqs[i]);
      acc[i] = std::min(accepts[(static_cast<size_t>(round) + i) % accepts.size()], p.count(i));
    }
    fo = target.forward(ctx, kv, vb);
    int64_t expect_rows = 0;
    for (size_t i = 0; i < n_rows; ++i) {
      kv.rollback_to(seqs[i], before[i] + 1 + acc[i]);
      kept[i].assign(1, pending[i]);
      kept[i].insert(kept[i].end(), p.tokens.begin() + p.indptr[i],
                     p.tokens.begin() + p.indptr[i] + acc[i]);
      ups[i] = RowUpdate{};
      ups[i].row = static_cast<RowId>(i);
      ups[i].kept_tokens = kept[i];
      ups[i].first_position = before[i];
      ups[i].tap_offset = vb.row_indptr[i];
      ups[i].n_drafted = p.count(i);
      ups[i].n_accepted = acc[i];
      committed[i].insert(committed[i].end(), kept[i].begin(), kept[i].end());
      pending[i] = static_cast<int32_t>((pending[i] * 31 + round + 1) % vocab);
      ups[i].pending = pending[i];
      expect_rows += 1 + acc[i];
    }
    source.commit(ctx, ups, fo.taps);
    st.rows_committed += expect_rows;
    EXPECT_EQ(source.dspark_stats().last_commit_rows_committed, expect_rows);
    EXPECT_EQ(source.dspark_stats().last_commit_rows_projected, expect_rows)
        << "context rows projected in round " << round;
  }
  for (size_t i = 0; i < n_rows; ++i) source.release(static_cast<RowId>(i));
  return st;
}

// ---- greedy losslessness through the engine ---------------------------------------------------

struct LosslessCase {
  std::string target;
  std::string layout;
  std::string markov;
  int gamma = 4;
  bool thresholds = false;
};

inline std::vector<std::vector<int32_t>> lossless_prompts(int vocab) {
  std::mt19937 gen(29);
  std::uniform_int_distribution<int> tok(0, vocab - 1);
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> rep;
  const std::vector<int32_t> pattern = {tok(gen), tok(gen), tok(gen)};
  for (int i = 0; i < 6; ++i) rep.insert(rep.end(), pattern.begin(), pattern.end());
  out.push_back(rep);
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(3 + 9 * i));
    for (auto& t : p) t = tok(gen);
    out.push_back(p);
  }
  return out;
}

// Greedy speculative decoding with a tiny random drafter (written to `dir`) emits exactly the
// plain greedy tokens of `generate()` on the same device, all prompts batched. The engine dtype
// is f32 by default (also on CUDA): the tiny targets' greedy margins are far above f32 error but
// not above bf16 error, and bf16 verify batches of k + 1 tokens may round differently from plain
// single-token decode steps (see tests/common/lossless.h).
inline void check_dspark_lossless(const LosslessCase& c, Device device,
                                  const std::filesystem::path& dir, DType dtype = DType::f32) {
  const auto target_dir = data_dir() / "models" / c.target;
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no " << c.target;
  Context ctx(device);
  auto target = load_model(target_dir, device, dtype);
  TinyDrafterSpec spec;
  spec.layout = c.layout;
  spec.markov = c.markov;
  spec.block_size = c.gamma;
  spec.seed = static_cast<uint32_t>(c.gamma + 100);
  write_tiny_drafter(dir, spec, target->config());

  GenerateOptions o;
  o.max_tokens = 20;
  o.eos_token_ids = {};
  const auto prompts = lossless_prompts(target->config().vocab_size);
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(generate(*target, ctx, p, o).tokens);

  DSparkSourceOptions opt;
  opt.block_size = c.gamma;
  opt.kv_tokens = 4096;
  if (c.thresholds) {
    // 0.5 everywhere except 1.0 at position gamma / 2, which always prunes there (a sigmoid in
    // f32 stays below 1 for the tiny drafters' logits); position 0 is never pruned.
    opt.thresholds.assign(static_cast<size_t>(c.gamma), 0.5f);
    opt.thresholds[static_cast<size_t>(c.gamma / 2)] = 1.0f;
  }
  auto source = load_dspark_source(dir, *target, opt);
  std::vector<RequestInput> reqs;
  for (const auto& p : prompts) reqs.push_back(RequestInput{p, o, nullptr, {}});
  SpecConfig cfg;
  cfg.gamma = c.gamma;
  cfg.prefill_chunk = 40;  // several prefill chunks across rows
  const auto out = generate_speculative(*target, ctx, source.get(), std::move(reqs), cfg);
  SpecTelemetry total;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(out[i].result.tokens, plain[i]) << device.name() << " prompt " << i;
    total.merge(out[i].spec);
  }
  const DSparkStats& ds = source->dspark_stats();
  EXPECT_EQ(ds.n_rows_projected + ds.n_rows_dropped, ds.n_rows_committed);
  EXPECT_EQ(ds.n_device_reads, ds.n_rounds);
  EXPECT_GT(total.drafted, 0);
  if (c.thresholds && c.layout != "dflash") {
    EXPECT_GT(ds.n_pruned, 0);
  }
  if (!c.thresholds) {
    EXPECT_EQ(ds.n_pruned, 0);
  }
  std::printf(
      "[ lossless ] %-5s %-6s %-9s %-7s gamma=%2d thr=%d rounds=%lld drafted=%lld "
      "accepted=%lld pruned=%lld ctx_rows=%lld\n",
      device.name().c_str(), c.target.c_str(), c.layout.c_str(), c.markov.c_str(), c.gamma,
      c.thresholds ? 1 : 0, static_cast<long long>(total.rounds),
      static_cast<long long>(total.drafted), static_cast<long long>(total.accepted),
      static_cast<long long>(ds.n_pruned), static_cast<long long>(ds.n_rows_projected));
}

// ---- deferred context commits (spec/dspark/dspark_source.h) ---------------------------------

// What one propose call drafted, and (with DSparkSourceOptions::record) the drafter's state behind
// it.
struct DraftRoundTrace {
  std::vector<int32_t> indptr, tokens;
  std::vector<float> hidden, logits;
  bool operator==(const DraftRoundTrace&) const = default;
};

// Asks for drafts only on the rounds of a schedule (row r drafts in round t when
// (t + 2 r) % period < on), so that rows have runs of rounds without drafts between drafting ones;
// records each round that reached the drafter.
class ScheduledDraftSource final : public ForwardingDraftSource {
 public:
  ScheduledDraftSource(DSparkSource& inner, int period, int on)
      : ForwardingDraftSource(inner), dspark_(inner), period_(period), on_(on) {}
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override {
    std::vector<ProposeRequest> asked(requests.begin(), requests.end());
    bool any = false;
    for (ProposeRequest& q : asked) {
      if ((round_ + 2 * q.row) % period_ >= on_) q.max_tokens = 0;
      any = any || q.max_tokens > 0;
    }
    ++round_;
    const int64_t rounds_before = dspark_.dspark_stats().n_rounds;
    inner().propose(ctx, asked, out);
    if (!any || dspark_.dspark_stats().n_rounds == rounds_before) return;
    const DSparkRecord& rec = dspark_.record();
    trace.push_back({out.indptr, out.tokens, rec.hidden, rec.logits});
  }
  std::vector<DraftRoundTrace> trace;

 private:
  DSparkSource& dspark_;
  int period_, on_;
  int round_ = 0;
};

struct ScheduledRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<DraftRoundTrace> trace;
  DSparkStats stats;
};

// Six greedy rows of 40 tokens, gamma 4, through the engine with the drafter in `dir` and a stage
// of `deferred_rows` rows (0: eager commits).
inline ScheduledRun run_scheduled(Model& target, Context& ctx, const std::filesystem::path& dir,
                                  int deferred_rows, int period, int on, bool record) {
  DSparkSourceOptions opt;
  opt.kv_tokens = 4096;
  opt.record = record;
  opt.deferred_rows = deferred_rows;
  auto source = load_dspark_source(dir, target, opt, false);
  ScheduledDraftSource scheduled(*source, period, on);
  GenerateOptions o;
  o.max_tokens = 40;
  o.eos_token_ids = {};
  std::vector<RequestInput> reqs;
  for (const auto& p : lossless_prompts(target.config().vocab_size))
    reqs.push_back(RequestInput{p, o, nullptr, {}});
  SpecConfig cfg;
  cfg.gamma = 4;
  cfg.prefill_chunk = 40;
  ScheduledRun r;
  for (const RequestOutput& out :
       generate_speculative(target, ctx, &scheduled, std::move(reqs), cfg))
    r.tokens.push_back(out.result.tokens);
  r.trace = std::move(scheduled.trace);
  r.stats = source->dspark_stats();
  return r;
}

// Deferred commits against eager ones on `device` (f32, the qwen3 tiny target, a tiny drafter
// written to `dir`), for schedules with runs of rounds without drafts and for a roomy stage, one
// small enough to be compacted and one smaller than a round's rows: greedy output == plain greedy,
// committed == projected + dropped, fewer rows projected, and the same drafts in every round.
// `bitwise` (the CPU): each round's block hidden states and logits too, bit for bit (the drafter
// records them, which keeps its rounds and commits eager). Otherwise the target's CUDA graphs are
// on (graphed commits of staged rows) and rounds whose drafts differ are only counted (GEMMs of
// other row counts may round differently).
inline void check_deferred_commits(Device device, const std::filesystem::path& dir, bool bitwise) {
  const auto target_dir = data_dir() / "models" / "qwen3";
  if (!std::filesystem::exists(target_dir / "config.json")) GTEST_SKIP() << "no qwen3";
  Context ctx(device);
  auto target = load_model(target_dir, device, DType::f32);
  TinyDrafterSpec spec;
  spec.block_size = 4;
  write_tiny_drafter(dir, spec, target->config());

  GenerateOptions o;
  o.max_tokens = 40;
  o.eos_token_ids = {};
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : lossless_prompts(target->config().vocab_size))
    plain.push_back(generate(*target, ctx, p, o).tokens);
  target->set_cuda_graphs(!bitwise && device.is_cuda());

  for (const auto& [period, on] : {std::pair{5, 1}, std::pair{7, 3}, std::pair{1, 1}}) {
    const ScheduledRun eager = run_scheduled(*target, ctx, dir, 0, period, on, bitwise);
    EXPECT_EQ(eager.tokens, plain);
    EXPECT_EQ(eager.stats.n_rows_staged, 0);
    EXPECT_EQ(eager.stats.n_rows_projected, eager.stats.n_rows_committed);
    ASSERT_FALSE(eager.trace.empty());
    // 2048: the default; 40: compacted when rows resume (or projected whole); 3: fewer than one
    // round's rows (six).
    for (const int rows : {2048, 40, 3}) {
      const ScheduledRun deferred = run_scheduled(*target, ctx, dir, rows, period, on, bitwise);
      EXPECT_EQ(deferred.tokens, plain) << rows;
      ASSERT_EQ(deferred.trace.size(), eager.trace.size()) << rows;
      size_t differ = 0;
      for (size_t t = 0; t < eager.trace.size(); ++t) {
        const bool same = deferred.trace[t] == eager.trace[t];
        differ += same ? 0 : 1;
        if (bitwise) {
          EXPECT_TRUE(same) << "round " << t << " period " << period << " stage " << rows;
        }
      }
      const DSparkStats& s = deferred.stats;
      EXPECT_EQ(s.n_rows_committed, eager.stats.n_rows_committed);
      EXPECT_EQ(s.n_rows_projected + s.n_rows_dropped, s.n_rows_committed) << rows;
      if (on < period) {
        EXPECT_GT(s.n_rows_staged, 0) << rows;
        EXPECT_GT(s.n_stage_flushes, 0) << rows;
        EXPECT_GT(s.n_rows_dropped, 0) << rows;  // rows end between drafting rounds
        EXPECT_LT(s.n_rows_projected, eager.stats.n_rows_projected) << rows;
        if (rows == 40) {
          EXPECT_GT(s.n_stage_compactions, 0);
        }
      }
      std::printf(
          "[ deferred ] %s period %d on %d stage %4d: committed %lld projected %lld (eager %lld) "
          "staged %lld dropped %lld flushes %lld compactions %lld rounds %zu differing %zu\n",
          device.name().c_str(), period, on, rows, static_cast<long long>(s.n_rows_committed),
          static_cast<long long>(s.n_rows_projected),
          static_cast<long long>(eager.stats.n_rows_projected),
          static_cast<long long>(s.n_rows_staged), static_cast<long long>(s.n_rows_dropped),
          static_cast<long long>(s.n_stage_flushes), static_cast<long long>(s.n_stage_compactions),
          eager.trace.size(), differ);
    }
  }
  target->set_cuda_graphs(false);
}

// ---- the published-layout fixtures (tests/data/drafters, docs/drafter-goldens.md) --------------

struct FixtureGamma {
  int gamma = 0;
  double hidden = 0, base = 0, corrected = 0;   // relative RMS errors
  double confidence = 0;                        // max absolute error
  int tokens = 0, tokens_equal = 0;             // drafted rows compared, identical ones
  int tokens_until_mismatch = 0;                // identical tokens before the first mismatch
  int decisive_tokens = 0, decisive_equal = 0;  // rows with reference margin > margin_floor,
                                                // before the first mismatch
  std::vector<int32_t> proposal, expected_proposal;
};
struct FixtureResult {
  bool present = false;
  double taps = 0;      // our target's taps vs ctx.taps (relative RMS)
  double features = 0;  // relative RMS
  std::vector<FixtureGamma> gammas;
};

inline std::filesystem::path drafter_fixture_dir(const std::string& name) {
  return data_dir() / "drafters" / name;
}

// Loads the fixture's drafter for `target_name` on `device` / `dtype`, commits ctx.tokens[0..N)
// with the fixture's own taps (so the drafter is compared in isolation), proposes one block per
// gamma in {4, 7, 16} and compares with the goldens.
inline FixtureResult run_drafter_fixture(const std::string& name, const std::string& target_name,
                                         Device device, DType dtype, double margin_floor) {
  FixtureResult res;
  const auto dir = drafter_fixture_dir(name);
  const auto target_dir = data_dir() / "models" / target_name;
  if (!std::filesystem::exists(dir / "goldens.safetensors") ||
      !std::filesystem::exists(target_dir / "config.json"))
    return res;
  res.present = true;
  Context ctx(device);
  auto target = load_model(target_dir, device, dtype);
  const SafeTensors g = SafeTensors::open(dir / "goldens.safetensors");
  const std::vector<int32_t> all = to_vector<int32_t>(g.get("ctx.tokens"));
  const std::vector<int32_t> prompt(all.begin(), all.end() - 1);
  const int32_t anchor = all.back();
  const auto n = static_cast<int64_t>(prompt.size());
  const std::vector<float> taps = to_f32_vector(g.get("ctx.taps"));
  const std::vector<float> features = to_f32_vector(g.get("ctx.features"));
  auto to_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };

  for (int gamma : {4, 7, 16}) {
    DSparkSourceOptions opt;
    opt.block_size = gamma;
    opt.record = true;
    opt.kv_tokens = 1024;
    auto source = load_dspark_source(dir, *target, opt, false);
    const std::vector<int> layers = source->target_taps();
    if (gamma == 4) res.taps = rel_rms(fresh_taps(*target, ctx, prompt, layers), to_d(taps));
    // The fixture's taps as one tensor per layer (column slices of [N, m*H]) on the device.
    const int64_t h = target->config().hidden_size, m = static_cast<int64_t>(layers.size());
    const OwnedTensor dev = OwnedTensor::copy_of(
        Tensor(const_cast<float*>(taps.data()), DType::f32, Shape{n, m * h}), device);
    std::vector<Tensor> tap_views;
    for (int64_t j = 0; j < m; ++j) tap_views.push_back(dev->slice(1, j * h, (j + 1) * h));
    source->begin(ctx, 0, prompt);
    RowUpdate u;
    u.row = 0;
    u.kept_tokens = prompt;
    u.pending = anchor;
    source->commit(ctx, std::span<const RowUpdate>(&u, 1), tap_views);
    if (gamma == 4) res.features = rel_rms(source->record().context_features, to_d(features));
    ProposeRequest req;
    req.row = 0;
    req.max_tokens = source->max_drafts();
    Proposal p;
    source->propose(ctx, std::span<const ProposeRequest>(&req, 1), p);
    const DSparkRecord& rec = source->record();
    const int off = source->config().draft_row_offset();
    const int64_t vocab = target->config().vocab_size;
    auto rows_from = [&](const std::string& key, int64_t first, int64_t width) {
      const std::vector<float> v = to_f32_vector(g.get(key));
      return to_d(std::vector<float>(v.begin() + first * width, v.end()));
    };
    FixtureGamma fg;
    fg.gamma = gamma;
    const std::string pre = fmt::format("g{}.", gamma);
    fg.hidden = rel_rms(rec.hidden, to_d(to_f32_vector(g.get(pre + "hidden"))));
    fg.base = rel_rms(rec.base_logits, rows_from(pre + "base_logits", off, vocab));
    fg.corrected = rel_rms(rec.logits, rows_from(pre + "corrected_logits", off, vocab));
    const std::vector<int32_t> gold = to_vector<int32_t>(g.get(pre + "tokens"));
    const std::vector<float> margin = to_f32_vector(g.get(pre + "margin"));
    bool mismatch = false;
    for (int k = 0; k < rec.steps; ++k) {
      const bool eq = rec.tokens[static_cast<size_t>(k)] == gold[static_cast<size_t>(k + off)];
      ++fg.tokens;
      fg.tokens_equal += eq ? 1 : 0;
      if (!mismatch && margin[static_cast<size_t>(k + off)] > margin_floor) {
        ++fg.decisive_tokens;
        fg.decisive_equal += eq ? 1 : 0;
      }
      if (!eq) mismatch = true;
      if (!mismatch) ++fg.tokens_until_mismatch;
    }
    if (g.contains(pre + "confidence")) {
      const std::vector<float> conf = to_f32_vector(g.get(pre + "confidence"));
      for (int k = 0; k < std::min<int>(rec.steps, fg.tokens_until_mismatch + 1); ++k)
        fg.confidence = std::max<double>(
            fg.confidence,
            std::fabs(rec.confidence[static_cast<size_t>(k)] - conf[static_cast<size_t>(k + off)]));
    }
    fg.proposal = p.tokens;
    fg.expected_proposal = to_vector<int32_t>(g.get(pre + "proposal"));
    res.gammas.push_back(fg);
  }
  return res;
}

struct FixtureName {
  std::string fixture;
  std::string target;
};
inline std::vector<FixtureName> drafter_fixtures() {
  return {{"qwen3_deepspec", "qwen3"},
          {"qwen3_deepspec_rnn", "qwen3"},
          {"qwen3_specforge", "qwen3"},
          {"qwen3_dflash", "qwen3"},
          {"llama3_deepspec", "llama3"}};
}

}  // namespace dspark::test
