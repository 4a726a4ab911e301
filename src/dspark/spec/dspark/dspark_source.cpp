#include "dspark/spec/dspark/dspark_source.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>

#include <fmt/format.h>

#include "dspark/core/elapsed.h"
#include "dspark/core/philox.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/linear_fp8.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/qkv_prologue.h"
#include "dspark/ops/rope.h"
#include "dspark/ops/speculative.h"
#include "dspark/ops/token_mask.h"
#include "dspark/spec/dspark/draft_vocab.h"

namespace dspark {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kReadbackAlign = 64;  // elements: keeps the confidence logits 256-byte aligned

int64_t align_up(int64_t v, int64_t a) {
  return (v + a - 1) / a * a;
}

// Grows `t` (contents discarded) to hold at least `numel` elements; returns the first `numel`.
Tensor ensure(OwnedTensor& t, DType dtype, int64_t numel, Device device) {
  if (!t->defined() || t->numel() < numel || t.device() != device)
    t = OwnedTensor(dtype, Shape{std::max<int64_t>(numel + numel / 2, 64)}, device);
  return t->slice(0, 0, numel);
}

float sigmoid(float v) {
  return 1.0f / (1.0f + std::exp(-v));
}

KvCacheShape kv_shape_for(const DrafterConfig& c, DType dtype, const DSparkSourceOptions& o) {
  DSPARK_CHECK_KIND(invalid_input, o.page_size > 0 && o.kv_tokens > 0,
                    "dspark: page_size ({}) and kv_tokens ({}) must be positive", o.page_size,
                    o.kv_tokens);
  const int pages = (o.kv_tokens + o.page_size - 1) / o.page_size + 1;
  return KvCacheShape{c.backbone.num_layers, c.backbone.num_kv_heads,
                      c.backbone.head_dim,   dtype,
                      o.page_size,           pages};
}

}  // namespace

DSparkSource::DSparkSource(DrafterConfig config, DrafterWeights weights, Model& target,
                           DSparkSourceOptions options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      target_(target),
      options_(std::move(options)),
      dtype_(target.activation_dtype()),
      block_rows_(options_.block_size > 0 ? options_.block_size : config_.block_size),
      kv_(kv_shape_for(config_, dtype_, options_), target.device()),
      head_(config_, weights_, dtype_) {
  check_drafter_fits(config_, target.config(), !weights_.embed.defined(),
                     !weights_.lm_head.defined());
  DSPARK_CHECK_KIND(invalid_input, config_.drafts_per_block(block_rows_) >= 1 && block_rows_ <= 256,
                    "dspark: a block of {} rows gives no drafts for a {} drafter", block_rows_,
                    drafter_layout_name(config_.layout));
  embed_ = weights_.embed.defined() ? weights_.embed.matrix() : target.embedding_table();
  lm_head_ = weights_.lm_head.defined() ? weights_.lm_head.matrix() : target.lm_head();
  check_draft_vocab(options_.draft_vocab, config_.backbone.vocab_size);
  head_.set_markov_enabled(options_.markov_enabled);
  const ModelConfig& c = config_.backbone;
  dims_ = AttentionDims{c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
                        static_cast<float>(c.rms_norm_eps)};
  const RopeTable table = make_rope_table(c.head_dim, c.rope_theta, c.partial_rotary_factor,
                                          c.rope_scaling, c.max_position_embeddings);
  rope_.inv_freq = OwnedTensor::from_vector(
      table.inv_freq, Shape{static_cast<int64_t>(table.inv_freq.size())}, target.device());
  rope_.attention_scaling = table.attention_scaling;
  if (options_.fp8_weights) quantize_backbone_fp8();
  if (config_.confidence_head) {
    const AcceptanceCurve* last = nullptr;
    for (const AcceptanceCurve& curve : options_.acceptance) {
      if (!curve.empty()) last = &curve;
      curves_.push_back(last);
    }
    // Positions before the first curve take it too.
    const auto first = std::find_if(curves_.begin(), curves_.end(),
                                    [](const AcceptanceCurve* p) { return p != nullptr; });
    if (first == curves_.end())
      curves_.clear();
    else
      std::fill(curves_.begin(), first, *first);
  }
}

DSparkSource::~DSparkSource() = default;

namespace {

// E4M3 codes and per-row scales of w, on w's device (ops/linear_fp8.h).
std::pair<OwnedTensor, OwnedTensor> to_fp8(Context& ctx, const Tensor& w) {
  OwnedTensor w8(DType::u8, w.shape(), w.device());
  OwnedTensor scale(DType::f32, Shape{w.size(0)}, w.device());
  quantize_rows_fp8(ctx, w, w8, scale);
  return {std::move(w8), std::move(scale)};
}

}  // namespace

void DSparkSource::quantize_backbone_fp8() {
  DSPARK_CHECK_KIND(invalid_input, target_.device().is_cuda() && dtype_ == DType::bf16,
                    "dspark: FP8 drafter weights (--draft-fp8) need a CUDA device and bf16 "
                    "activations, the target runs {} on {}",
                    dtype_name(dtype_), target_.device().name());
  const int64_t inter = config_.backbone.intermediate_size;
  const int64_t fc_in =
      static_cast<int64_t>(config_.target_layer_ids.size()) * target_.config().hidden_size;
  DSPARK_CHECK_KIND(
      invalid_input,
      dims_.hidden % 16 == 0 && dims_.q_width() % 16 == 0 && inter % 16 == 0 && fc_in % 16 == 0,
      "dspark: FP8 drafter weights (--draft-fp8) need hidden ({}), attention ({}), "
      "MLP ({}) and context-projection ({}) widths that are multiples of 16",
      dims_.hidden, dims_.q_width(), inter, fc_in);
  Context ctx(target_.device());
  std::vector<OwnedTensor> originals;  // freed once the quantization ran
  auto quantize = [&](OwnedTensor& w, OwnedTensor& scale) {
    if (!w->defined()) return;  // held as blocks (an MLX-quantized drafter): kept as they are
    auto [w8, s] = to_fp8(ctx, w);
    originals.push_back(std::move(w));
    w = std::move(w8);
    scale = std::move(s);
  };
  quantize(weights_.fc, weights_.fc_scale);  // read by every commit: m * H x d
  for (DrafterLayerWeights& l : weights_.layers) {
    quantize(l.attn.qkv, l.attn.qkv_scale);
    quantize(l.attn.o, l.attn.o_scale);
    quantize(l.mlp.gate_up, l.mlp.gate_up_scale);
    quantize(l.mlp.down, l.mlp.down_scale);
  }
  ctx.synchronize();
}

void DSparkSource::prepare_draft_vocab(Context& ctx) {
  if (vocab_ids_->defined()) return;
  const std::vector<int32_t>& ids = options_.draft_vocab;
  const auto n = static_cast<int64_t>(ids.size());
  vocab_ids_ = OwnedTensor::from_vector(ids, Shape{n}, ctx.device());
  const bool blocks =
      lm_head_.format == WeightFormat::blocks || lm_head_.format == WeightFormat::blocks_x8;
  if (blocks && !ctx.is_cuda() && !options_.fp8_weights) {
    lm_head_short_w_ = gather_block_rows(lm_head_, ids, lm_head_short_blocks_);
  } else {
    prepare_short_head(ctx);
  }
  const TableWeight& w2 = weights_.markov_w2;
  if (w2.quantized.defined()) {  // the CPU: blocks, as the LM head's cut above
    w2_short_w_ = gather_block_rows(w2.matrix(), ids, w2_short_);
  } else if (w2.dense->defined()) {
    w2_short_ = OwnedTensor(w2.dense->dtype(), Shape{n, w2.dense->size(1)}, ctx.device());
    gather_rows(ctx, w2.dense.view(), vocab_ids_, w2_short_);
    w2_short_w_ = WeightMatrix::dense(w2_short_.view());
  }
}

void DSparkSource::prepare_short_head(Context& ctx) {
  const int64_t n = vocab_ids_->size(0);
  // The rows in the engine dtype (a block-quantized target head's dequantized).
  lm_head_short_ = OwnedTensor(lm_head_.quantized() ? dtype_ : lm_head_.data.dtype(),
                               Shape{n, lm_head_.k}, ctx.device());
  gather_rows(ctx, lm_head_, vocab_ids_, lm_head_short_);
  if (options_.fp8_weights) {
    auto [w8, scale] = to_fp8(ctx, lm_head_short_);
    ctx.synchronize();  // the rows are read before the bf16 copy is freed
    lm_head_short_ = std::move(w8);
    lm_head_short_scale_ = std::move(scale);
  }
}

std::string DSparkSource::name() const {
  return config_.has_dspark_heads() ? "dspark" : "dflash";
}

DSparkSource::Row& DSparkSource::row_ref(RowId row) {
  auto it = rows_.find(row);
  DSPARK_CHECK(it != rows_.end(), "dspark: unknown row {}", row);
  return it->second;
}

void DSparkSource::begin(Context&, RowId row, std::span<const int32_t>) {
  release(row);
  Row r;
  r.seq = kv_.create_sequence();
  rows_[row] = std::move(r);
}

int DSparkSource::attach_prefix(RowId row, std::span<const int32_t> prompt, int max_tokens) {
  return kv_.attach_prefix(row_ref(row).seq, prompt, max_tokens);
}

void DSparkSource::trim_prefix(RowId row, int n) {
  Row& r = row_ref(row);
  if (kv_.length(r.seq) + static_cast<int>(r.staged.size()) > n) truncate_context(r, n);
}

void DSparkSource::publish_prefix(RowId row, std::span<const int32_t> prompt, int n) {
  kv_.publish_prefix(row_ref(row).seq, prompt, n);
}

void DSparkSource::release(RowId row) {
  auto it = rows_.find(row);
  if (it == rows_.end()) return;
  drop_staged(it->second, 0);
  kv_.release(it->second.seq);
  rows_.erase(it);
}

void DSparkSource::commit(Context& ctx, std::span<const RowUpdate> updates,
                          std::span<const Tensor> taps) {
  const auto t0 = Clock::now();
  DSPARK_CHECK(taps.size() == config_.target_layer_ids.size(),
               "dspark: commit got {} tap tensors, the drafter needs {}", taps.size(),
               config_.target_layer_ids.size());
  std::vector<SeqId> seqs;
  std::vector<int> n_new;
  std::vector<int32_t> tap_rows, positions;
  auto project_now = [&](Row& r, const RowUpdate& u) {
    const int n = static_cast<int>(u.kept_tokens.size());
    seqs.push_back(r.seq);
    n_new.push_back(n);
    for (int j = 0; j < n; ++j) {
      tap_rows.push_back(u.tap_offset + j);
      positions.push_back(u.first_position + j);
    }
  };
  deferrals_.clear();
  flush_rows_.clear();
  int64_t committed = 0, deferred = 0;
  for (const RowUpdate& u : updates) {
    Row& r = row_ref(u.row);
    if (confidence_log_ != nullptr && u.n_drafted > 0 && !r.confidence.empty()) {
      const int reached =
          std::min({u.n_drafted, u.n_accepted + 1, static_cast<int>(r.confidence.size())});
      for (int k = 0; k < reached; ++k)
        confidence_log_->push_back({k, r.confidence[static_cast<size_t>(k)], k < u.n_accepted});
    }
    r.confidence.clear();
    const bool decoding = r.pending >= 0;  // past its prompt: the commit of a verify
    r.pending = u.pending;
    const int n = static_cast<int>(u.kept_tokens.size());
    committed += n;
    if (n == 0) continue;
    const int len = kv_.length(r.seq) + static_cast<int>(r.staged.size());
    DSPARK_CHECK(u.first_position <= len,
                 "dspark: row {} commits context from position {} but holds only {} rows", u.row,
                 u.first_position, len);
    if (u.first_position < len) truncate_context(r, u.first_position);
    if (decoding && u.n_drafted == 0 && options_.deferred_rows > 0) {
      deferrals_.push_back({&r, &u});
      deferred += n;
      continue;
    }
    if (!r.staged.empty()) flush_rows_.push_back(&r);  // its staged rows come first
    project_now(r, u);
  }
  if (deferred > 0 && !make_stage_room(ctx, deferred)) {
    // More rows than the whole stage: projected now (make_stage_room projected the staged ones).
    for (const Deferral& d : deferrals_) project_now(*d.row, *d.update);
    deferrals_.clear();
  }
  if (!flush_rows_.empty()) flush_staged(ctx, flush_rows_);
  if (!seqs.empty()) project_context(ctx, seqs, n_new, tap_rows, positions, taps);
  if (!deferrals_.empty()) stage_context(ctx, deferrals_, taps);
  ++dstats_.n_commits;
  dstats_.n_rows_committed += committed;
  dstats_.last_commit_rows_committed = committed;
  dstats_.last_commit_rows_projected = static_cast<int64_t>(tap_rows.size());
  dstats_.n_rows_projected += static_cast<int64_t>(tap_rows.size());
  stats_.commit_ms += elapsed_ms(t0);
}

int64_t DSparkSource::RoundShape::conf_offset() const {
  return align_up((steps + 1) * rows, kReadbackAlign);
}

int64_t DSparkSource::RoundShape::readback_elems() const {
  return conf_offset() + steps * rows;
}

DSparkSource::RoundBuffers DSparkSource::take_round_buffers(Context& ctx, const RoundShape& s,
                                                            ActivationArena& arena) const {
  const int64_t M = s.rows * s.block, SR = s.steps * s.rows, d = dims_.hidden;
  const int64_t inter = config_.backbone.intermediate_size;
  const int64_t vocab = config_.backbone.vocab_size;
  struct Item {
    Tensor* t;
    DType dtype;
    Shape shape;
  };
  RoundBuffers b;
  std::vector<Item> items = {{&b.x, DType::f32, Shape{M, d}},
                             {&b.xn, dtype_, Shape{M, d}},
                             {&b.scratch.qkv, dtype_, Shape{M, dims_.qkv_width()}},
                             {&b.scratch.q_tmp, dtype_, Shape{M, dims_.q_width()}},
                             {&b.scratch.k_tmp, dtype_, Shape{M, dims_.kv_width()}},
                             {&b.scratch.attn, dtype_, Shape{M, dims_.q_width()}},
                             {&b.proj, DType::f32, Shape{M, d}},
                             {&b.gate_up, dtype_, Shape{M, 2 * inter}},
                             {&b.mlp, dtype_, Shape{M, inter}},
                             {&b.hd, dtype_, Shape{SR, d}},
                             {&b.logits, DType::f32, Shape{SR, s.cols}},
                             {&b.readback, DType::i32, Shape{s.readback_elems()}}};
  if (s.sampled) items.push_back({&b.probs, DType::f32, Shape{SR, vocab}});
  size_t bytes = 0;
  for (const Item& it : items) bytes += ActivationArena::bytes_for(it.dtype, it.shape);
  arena.begin(ctx.device(), bytes);
  for (const Item& it : items) *it.t = arena.take(it.dtype, it.shape);
  return b;
}

void DSparkSource::enqueue_round(Context& ctx, const RoundShape& s, const RoundMeta& m,
                                 const RoundBuffers& b, ActivationArena& head_arena,
                                 std::span<const SamplingParams> params,
                                 const std::function<void(int64_t)>& before_select) {
  const int64_t R = s.rows, S = s.steps;
  // ---- the backbone over all rows' blocks ----
  const RmsNormParams norm{dims_.rms_norm_eps, false};
  gather_rows(ctx, embed_, m.tokens, b.x);
  rms_norm(ctx, b.x, weights_.layers.front().norm_in, b.xn, norm);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dims_.head_dim));
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const DrafterLayerWeights& lw = weights_.layers[l];
    const AttentionParams attn{scale, false, config_.backbone.layer_window[l], 0.0f};
    attention_block(ctx, lw.attn, dims_, rope_, m.forward, kv_.k_pages(static_cast<int>(l)),
                    kv_.v_pages(static_cast<int>(l)), attn, b.xn, b.scratch, b.proj);
    add_rms_norm(ctx, b.x, b.proj, lw.norm_post, b.xn, norm);
    mlp_block(ctx, lw.mlp, b.xn, b.gate_up, b.mlp, b.proj);
    const bool last = l + 1 == weights_.layers.size();
    add_rms_norm(ctx, b.x, b.proj,
                 last ? weights_.norm.view() : weights_.layers[l + 1].norm_in.view(), b.xn, norm);
  }
  gather_rows(ctx, b.xn, m.draft_rows, b.hd);
  if (s.short_vocab && lm_head_short_w_.n > 0) {
    linear(ctx, b.hd, lm_head_short_w_, Tensor{}, b.logits);
  } else if (s.short_vocab) {
    project(ctx, b.hd, lm_head_short_, lm_head_short_scale_.view(), Tensor{}, b.logits);
  } else if (options_.fp8_weights && !lm_head_.quantized()) {  // quantized by propose before the
                                                               // round (no allocation here)
    linear_fp8(ctx, b.hd, lm_head8_, lm_head8_scale_, Tensor{}, b.logits);
  } else {
    linear(ctx, b.hd, lm_head_, Tensor{}, b.logits);
  }
  if (options_.record) {  // eager rounds only (never captured)
    record_.rows = static_cast<int>(R);
    record_.block_rows = static_cast<int>(s.block);
    record_.steps = static_cast<int>(S);
    record_.hidden = to_f32_vector(b.xn);
    record_.base_logits = to_f32_vector(b.logits);
  }

  // ---- the sequential head: tokens (+ q, confidence logits) on the device ----
  auto* rb = static_cast<int32_t*>(b.readback.data());
  ctx.copy_async(rb, m.anchors.data(), static_cast<size_t>(R) * sizeof(int32_t));
  HeadRound round;
  round.rows = static_cast<int>(R);
  round.steps = static_cast<int>(S);
  round.hidden = b.hd;
  round.logits = b.logits;
  round.tokens = b.readback.slice(0, 0, (S + 1) * R);
  round.params = params;
  round.confidence = Tensor(rb + s.conf_offset(), DType::f32, Shape{S * R, 1}, b.readback.device());
  if (s.short_vocab) {
    round.vocab_ids = vocab_ids_;
    round.markov_w2 = w2_short_w_;
  }
  if (s.sampled) {
    round.uniforms = m.uniforms;
    round.probs = b.probs;
  }
  round.before_select = before_select;
  head_.run(ctx, round, head_arena);
}

DSparkSource::GraphBuckets::Entry& DSparkSource::graph_bucket(Context& ctx, const RoundShape& s) {
  return graph_buckets_.find_or_create(
      ctx, GraphKey{s.rows, s.steps, s.cols}, [&](GraphBucket& bucket) {
        const int64_t R = s.rows, M = R * s.block;
        bucket.meta = DeviceIndices(ctx.device(), {M, M, M, R + 1, R + 1, R, s.steps * R, R,
                                                   std::max<int64_t>(kv_.shape().num_pages, 1)});
        bucket.buffers = take_round_buffers(ctx, s, bucket.arena);
      });
}

std::function<void(int64_t)> DSparkSource::grammar_step(Context& ctx,
                                                        std::span<const ProposeRequest> requests,
                                                        std::span<const size_t> active,
                                                        const RoundBuffers& b,
                                                        std::vector<int>& keep) {
  return [this, &ctx, requests, active, &b, &keep](int64_t s) {
    const auto R = static_cast<int64_t>(active.size());
    grammar_tokens_.resize(static_cast<size_t>(R));
    if (s > 0) {  // the tokens of step s - 1 (the round's tokens: anchors, then step by step)
      ctx.copy_async(grammar_tokens_.data(), static_cast<const int32_t*>(b.readback.data()) + s * R,
                     static_cast<size_t>(R) * sizeof(int32_t));
      ctx.synchronize();
    }
    grammar_rows_.clear();
    grammar_words_.clear();
    for (int64_t a = 0; a < R; ++a) {
      DraftGrammar* g = requests[active[static_cast<size_t>(a)]].grammar;
      int& k = keep[static_cast<size_t>(a)];
      if (!g || k < s) continue;  // unconstrained, or its drafts already ended
      if (s > 0) {
        if (!g->advance(grammar_tokens_[static_cast<size_t>(a)])) {
          k = static_cast<int>(s) - 1;  // never after a masked choice; dropped all the same
          continue;
        }
        if (g->ended()) {
          k = static_cast<int>(s);  // the EOS is the row's last draft
          continue;
        }
      }
      const std::span<const uint32_t> mask = g->mask(b.logits.size(1));
      grammar_rows_.push_back(static_cast<int32_t>(s * R + a));
      grammar_words_.insert(grammar_words_.end(), mask.begin(), mask.end());
    }
    if (!grammar_rows_.empty()) apply_token_mask(ctx, b.logits, grammar_rows_, grammar_words_);
  };
}

void DSparkSource::propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) {
  const auto t0 = Clock::now();
  const size_t n_req = requests.size();
  const int L = block_rows_, offset = config_.draft_row_offset();
  const int D = L - offset;
  const int64_t vocab = config_.backbone.vocab_size;

  std::vector<size_t> active;
  int steps = 0;
  bool any_sampled = false, constrained = false;
  for (size_t i = 0; i < n_req; ++i) {
    const ProposeRequest& q = requests[i];
    if (q.max_tokens <= 0) continue;
    const Row& r = row_ref(q.row);
    DSPARK_CHECK(r.pending >= 0, "dspark: row {} has no pending token to draft from", q.row);
    active.push_back(i);
    steps = std::max(steps, std::min(q.max_tokens, D));
    any_sampled = any_sampled || !q.sampling.greedy();
    constrained = constrained || q.grammar != nullptr;
  }
  // Rows that resume drafting: their deferred context first (the block attends to it).
  flush_rows_.clear();
  for (const size_t i : active) {
    Row& r = row_ref(requests[i].row);
    if (!r.staged.empty()) flush_rows_.push_back(&r);
  }
  if (!flush_rows_.empty()) flush_staged(ctx, flush_rows_);
  const int64_t base = static_cast<int64_t>(out.tokens.size());
  if (active.empty()) {
    for (size_t i = 0; i < n_req; ++i) out.indptr.push_back(static_cast<int32_t>(base));
    ++stats_.n_propose_calls;
    stats_.propose_ms += elapsed_ms(t0);
    return;
  }
  DSPARK_CHECK(!any_sampled || base == 0,
               "dspark: a sampled proposal must be the only one in `out`");
  RoundShape shape;
  shape.rows = static_cast<int64_t>(active.size());
  shape.steps = steps;
  shape.block = L;
  // A draft vocabulary cuts the LM head and w2 (greedy rounds; sampled ones need q over all V, and
  // grammar masks address the whole vocabulary).
  shape.short_vocab = !options_.draft_vocab.empty() && !any_sampled && !constrained;
  shape.sampled = any_sampled;
  if (shape.short_vocab) prepare_draft_vocab(ctx);
  // FP8 of a dense LM head (a block-quantized one is used as it is).
  if (!shape.short_vocab && options_.fp8_weights && !lm_head_.quantized() && !lm_head8_->defined())
    std::tie(lm_head8_, lm_head8_scale_) = to_fp8(ctx, lm_head_.data);
  shape.cols = shape.short_vocab ? vocab_ids_->numel() : vocab;
  const int64_t R = shape.rows, S = shape.steps, M = R * L;

  // ---- host metadata: blocks [pending, mask x (L-1)] at positions P..P+L-1 ----
  std::vector<int32_t> tokens(static_cast<size_t>(M)), positions(static_cast<size_t>(M));
  std::vector<int32_t> q_indptr(static_cast<size_t>(R) + 1), draft_rows(static_cast<size_t>(S * R));
  std::vector<int32_t> anchors(static_cast<size_t>(R));
  std::vector<int> lengths(static_cast<size_t>(R));
  std::vector<SeqId> seqs(static_cast<size_t>(R));
  std::vector<SamplingParams> params(static_cast<size_t>(R));
  for (int64_t a = 0; a < R; ++a) {
    const ProposeRequest& q = requests[active[static_cast<size_t>(a)]];
    const Row& r = row_ref(q.row);
    const int len = kv_.length(r.seq);
    seqs[a] = r.seq;
    lengths[a] = len;
    anchors[a] = r.pending;
    params[a] = q.sampling;
    q_indptr[a] = static_cast<int32_t>(a * L);
    for (int j = 0; j < L; ++j) {
      tokens[a * L + j] = j == 0 ? r.pending : config_.mask_token_id;
      positions[a * L + j] = len + j;
    }
    for (int64_t s = 0; s < S; ++s)
      draft_rows[s * R + a] = static_cast<int32_t>(a * L + offset + s);
  }
  q_indptr[R] = static_cast<int32_t>(M);
  // The drafter's uniforms, bit-cast into the packed i32 upload (one host->device copy).
  std::vector<int32_t> uniform_bits;
  if (any_sampled) {
    uniform_bits.resize(static_cast<size_t>(S * R));
    for (int64_t a = 0; a < R; ++a) {
      const ProposeRequest& q = requests[active[static_cast<size_t>(a)]];
      // Draft s sits at sequence position P + 1 + s (P: the pending token's position).
      for (int64_t s = 0; s < S; ++s) {
        const float u = philox_uniform(q.seed, static_cast<uint64_t>(lengths[a] + 1 + s),
                                       draft_lane(q.sampling.spec));
        std::memcpy(&uniform_bits[static_cast<size_t>(s * R + a)], &u, sizeof(float));
      }
    }
  }
  // Structured output: drafts row a keeps (S until its grammar ends the output; grammar_step).
  std::vector<int> grammar_keep(static_cast<size_t>(R), static_cast<int>(S));
  std::optional<KvBatchPlan> plan = kv_.plan(seqs, std::vector<int>(static_cast<size_t>(R), L));
  if (!plan) {
    // No room for the blocks this round: propose nothing (decoding stays exact, only slower).
    for (size_t i = 0; i < n_req; ++i) out.indptr.push_back(static_cast<int32_t>(base));
    ++dstats_.n_kv_full;
    ++stats_.n_propose_calls;
    stats_.propose_ms += elapsed_ms(t0);
    return;
  }

  // ---- the device work: replayed from a graph, or enqueued eagerly ----
  const bool graphed =
      ctx.is_cuda() && target_.cuda_graphs() && !any_sampled && !options_.record && !constrained;
  RoundBuffers bufs;
  if (graphed) {
    enum Slot {
      kTokens,
      kPositions,
      kSlots,
      kQIndptr,
      kPageIndptr,
      kKvLens,
      kDraftRows,
      kAnchors,
      kPages
    };
    GraphBuckets::Entry& entry = graph_bucket(ctx, shape);
    GraphBucket& g = entry.bucket;
    g.meta.stage(ctx, {&tokens, &positions, &plan->slots, &q_indptr, &plan->page_indptr,
                       &plan->kv_lens, &draft_rows, &anchors, &plan->page_indices});
    const RoundMeta m{
        g.meta.view(kTokens), g.meta.view(kDraftRows), g.meta.view(kAnchors), Tensor{},
        ForwardMeta{g.meta.view(kPositions), g.meta.view(kSlots), g.meta.view(kQIndptr),
                    g.meta.view(kPageIndptr), g.meta.view(kPages), g.meta.view(kKvLens)}};
    const int variant = attention_graph_variant(
        ctx, AttentionGraphShape{M, dims_.n_heads, dims_.n_kv_heads, R,
                                 static_cast<int64_t>(plan->page_indices.size()),
                                 kv_.shape().page_size});
    const void* baked[] = {head_.state_zeros()};
    graph_buckets_.run(
        ctx, entry, variant, baked,
        GraphCounters{dstats_.n_graph_replays, dstats_.n_graph_captures, dstats_.n_graph_fallbacks},
        [&] { enqueue_round(ctx, shape, m, g.buffers, g.head_arena, params); },
        [&] { return fmt::format("{} rows, {} drafts", R, S); });
    bufs = g.buffers;
  } else {
    meta_.clear();
    const int s_tokens = meta_.add(tokens);
    const int s_positions = meta_.add(positions);
    const int s_slots = meta_.add(plan->slots);
    const int s_q_indptr = meta_.add(q_indptr);
    const int s_page_indptr = meta_.add(plan->page_indptr);
    const int s_page_indices = meta_.add(plan->page_indices);
    const int s_kv_lens = meta_.add(plan->kv_lens);
    const int s_draft_rows = meta_.add(draft_rows);
    const int s_anchors = meta_.add(anchors);
    const int s_uniforms = meta_.add(uniform_bits);
    meta_.upload(ctx);
    const RoundMeta m{
        meta_.view(s_tokens), meta_.view(s_draft_rows), meta_.view(s_anchors),
        any_sampled ? Tensor(meta_.view(s_uniforms).data(), DType::f32, Shape{S * R}, ctx.device())
                    : Tensor{},
        ForwardMeta{meta_.view(s_positions), meta_.view(s_slots), meta_.view(s_q_indptr),
                    meta_.view(s_page_indptr), meta_.view(s_page_indices), meta_.view(s_kv_lens)}};
    bufs = take_round_buffers(ctx, shape, arena_);
    enqueue_round(ctx, shape, m, bufs, head_arena_, params,
                  constrained ? grammar_step(ctx, requests, active, bufs, grammar_keep)
                              : std::function<void(int64_t)>{});
  }
  // The block's K/V leave the cache again (the work is already enqueued in stream order).
  for (int64_t a = 0; a < R; ++a) kv_.rollback_to(seqs[a], lengths[a]);

  // ---- the round's one device->host read: tokens, then confidence logits ----
  const bool has_conf = config_.confidence_head;
  const int64_t conf_at = shape.conf_offset();
  const int64_t read_elems = (has_conf ? shape.readback_elems() : (S + 1) * R) - R;
  const size_t read_bytes = static_cast<size_t>(read_elems) * sizeof(int32_t);
  int32_t* host_read = nullptr;
  if (ctx.is_cuda()) {
    // The previous round's copy into it has run (that round synchronised after it).
    if (host_read_pinned_.bytes() < read_bytes)
      host_read_pinned_ = PinnedBuffer(std::max<size_t>(2 * read_bytes, 4096));
    host_read = static_cast<int32_t*>(host_read_pinned_.data());
  } else {
    host_read_.resize(static_cast<size_t>(read_elems));
    host_read = host_read_.data();
  }
  ctx.copy_async(host_read, static_cast<const int32_t*>(bufs.readback.data()) + R, read_bytes);
  ctx.synchronize();
  ++dstats_.n_device_reads;
  auto token_at = [&](int64_t a, int64_t s) { return host_read[static_cast<size_t>(s * R + a)]; };
  auto conf_at_fn = [&](int64_t a, int64_t s) {
    float v;
    std::memcpy(&v, &host_read[static_cast<size_t>(conf_at - R + s * R + a)], sizeof(float));
    return sigmoid(v);
  };
  const int64_t cols = shape.cols;
  if (options_.record) {
    record_.logits = to_f32_vector(bufs.logits);
    record_.tokens.assign(static_cast<size_t>(R * S), 0);
    record_.confidence.clear();
    if (has_conf) record_.confidence.assign(static_cast<size_t>(R * S), 0.0f);
    std::vector<float> base_copy = record_.base_logits, z = record_.logits;
    for (int64_t a = 0; a < R; ++a)
      for (int64_t s = 0; s < S; ++s) {
        const size_t dst = static_cast<size_t>(a * S + s), src = static_cast<size_t>(s * R + a);
        record_.tokens[dst] = token_at(a, s);
        if (has_conf) record_.confidence[dst] = conf_at_fn(a, s);
        std::copy_n(base_copy.begin() + static_cast<int64_t>(src) * cols, cols,
                    record_.base_logits.begin() + static_cast<int64_t>(dst) * cols);
        std::copy_n(z.begin() + static_cast<int64_t>(src) * cols, cols,
                    record_.logits.begin() + static_cast<int64_t>(dst) * cols);
      }
  }

  // ---- proposals: max_tokens, then threshold pruning (position 0 never pruned) ----
  std::vector<int32_t> q_rows;
  size_t next_active = 0;
  for (size_t i = 0; i < n_req; ++i) {
    const bool is_active = next_active < active.size() && active[next_active] == i;
    if (is_active) {
      const auto a = static_cast<int64_t>(next_active++);
      const int full = std::min(
          {requests[i].max_tokens, static_cast<int>(S), grammar_keep[static_cast<size_t>(a)]});
      int n = full;
      if (has_conf) {
        for (int k = 1; k < full; ++k) {
          if (static_cast<size_t>(k) < options_.thresholds.size() &&
              conf_at_fn(a, k) < options_.thresholds[static_cast<size_t>(k)]) {
            n = k;
            break;
          }
        }
        Row& r = row_ref(requests[i].row);
        r.confidence.resize(static_cast<size_t>(n));
        for (int k = 0; k < n; ++k) r.confidence[static_cast<size_t>(k)] = conf_at_fn(a, k);
        if (!curves_.empty())
          for (int k = 0; k < n; ++k)
            out.acceptance.push_back(
                curves_[std::min(static_cast<size_t>(k), curves_.size() - 1)]->at(
                    r.confidence[static_cast<size_t>(k)]));
      }
      dstats_.n_pruned += full - n;
      for (int k = 0; k < n; ++k) {
        out.tokens.push_back(token_at(a, k));
        q_rows.push_back(static_cast<int32_t>(k * R + a));
      }
    }
    out.indptr.push_back(static_cast<int32_t>(out.tokens.size()));
  }
  const auto n_drafts = static_cast<int64_t>(out.tokens.size()) - base;
  stats_.n_drafted += n_drafts;
  if (any_sampled && n_drafts > 0) {
    // q in proposal order: one gather of the drafted rows out of the round's [S * R, V].
    const Tensor idx = ensure(q_index_, DType::i32, n_drafts, ctx.device());
    ctx.copy_async(idx.data(), q_rows.data(), q_rows.size() * sizeof(int32_t));
    const Tensor q =
        ensure(q_, DType::f32, n_drafts * vocab, ctx.device()).reshape(Shape{n_drafts, vocab});
    gather_rows(ctx, bufs.probs, idx, q);
    out.q = q;
  }
  ++dstats_.n_rounds;
  dstats_.n_block_rows += M;
  ++stats_.n_propose_calls;
  stats_.propose_ms += elapsed_ms(t0);
}

// ---- loading ----------------------------------------------------------------------------------

std::unique_ptr<DSparkSource> load_dspark_source(const std::filesystem::path& dir, Model& target,
                                                 DSparkSourceOptions options,
                                                 bool read_thresholds_file_flag) {
  DrafterConfig config = load_drafter_config(dir);
  const DrafterCheckpoint checkpoint = DrafterCheckpoint::open(dir);
  const DrafterCheckpointInfo info = inspect_drafter_checkpoint(checkpoint.weights());
  const ModelConfig& t = target.config();
  check_drafter_fits(config, t, !info.has_embedding, !info.has_lm_head);
  const int64_t want = static_cast<int64_t>(config.target_layer_ids.size()) * t.hidden_size;
  DSPARK_CHECK_KIND(invalid_input, info.fc_in_features == want,
                    "drafter fc.weight takes {} features, but {} taps of the target's hidden size "
                    "{} give {}",
                    info.fc_in_features, config.target_layer_ids.size(), t.hidden_size, want);
  DrafterWeights weights = load_drafter_weights(checkpoint.weights(), config, t.hidden_size,
                                                target.device(), target.activation_dtype());
  const std::filesystem::path file = dir / kThresholdsFileName;
  std::error_code ec;
  if (options.thresholds.empty() && read_thresholds_file_flag &&
      std::filesystem::is_regular_file(file, ec)) {
    ThresholdsFile contents = read_thresholds_file(file);
    options.thresholds = std::move(contents.thresholds);
    if (options.acceptance.empty()) options.acceptance = std::move(contents.acceptance);
  }
  return std::make_unique<DSparkSource>(std::move(config), std::move(weights), target,
                                        std::move(options));
}

}  // namespace dspark
