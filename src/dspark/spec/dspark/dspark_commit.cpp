// The DSpark drafter's context commit: the rows a round kept are projected once into the
// drafter's KV cache (context features from the target's taps, then each layer's K/V). On CUDA
// with the target's graphs on, commits of up to kCommitGraphMaxRows rows are captured and
// replayed like the draft rounds (backend/graph_cache.h); their row count is padded up a short
// ladder so that a few buckets cover every accepted length (padding rows gather tap row 0 and
// write no K/V: slot -1). Eager commits on CUDA are padded the same way, so that a replay runs
// exactly the eager kernels at the same shapes (bitwise equal).
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "dspark/ops/embedding.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/qkv_prologue.h"
#include "dspark/spec/dspark/context_projection.h"
#include "dspark/spec/dspark/dspark_source.h"

namespace dspark {
namespace {

// 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, ...: at most 1.5x the rows, few buckets.
int64_t commit_rows_bucket(int64_t n) {
  if (n <= 4) return n;
  int64_t p = 4;
  while (p < n) p = (p & (p - 1)) == 0 ? p + p / 2 : p / 3 * 4;
  return p;
}

}  // namespace

DSparkSource::CommitBuffers DSparkSource::take_commit_buffers(Context& ctx, int64_t n,
                                                              ActivationArena& arena) const {
  const int64_t m = static_cast<int64_t>(config_.target_layer_ids.size());
  const int64_t h = target_.config().hidden_size, d = dims_.hidden;
  const int64_t kvw = dims_.kv_width();
  const Shape concat_shape{n, m * h}, c_shape{n, d}, kv_shape{n, 2 * kvw}, k_shape{n, kvw};
  arena.begin(ctx.device(), ActivationArena::bytes_for(dtype_, concat_shape) +
                                ActivationArena::bytes_for(DType::f32, c_shape) +
                                ActivationArena::bytes_for(dtype_, c_shape) +
                                ActivationArena::bytes_for(dtype_, kv_shape) +
                                ActivationArena::bytes_for(dtype_, k_shape));
  CommitBuffers b;
  b.concat = arena.take(dtype_, concat_shape);
  b.c_raw = arena.take(DType::f32, c_shape);
  b.c = arena.take(dtype_, c_shape);
  b.kv = arena.take(dtype_, kv_shape);
  b.k_tmp = arena.take(dtype_, k_shape);
  return b;
}

void DSparkSource::enqueue_commit(Context& ctx, const CommitMeta& meta, const CommitBuffers& b,
                                  std::span<const Tensor> taps) {
  const int64_t m = static_cast<int64_t>(taps.size());
  const int64_t h = target_.config().hidden_size;
  for (int64_t j = 0; j < m; ++j)
    gather_rows(ctx, taps[static_cast<size_t>(j)], meta.tap_rows,
                b.concat.slice(1, j * h, (j + 1) * h));
  project_context_features(ctx, weights_, dims_.rms_norm_eps, b.concat, b.c_raw, b.c);
  const RmsNormParams norm{dims_.rms_norm_eps, false};

  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const AttentionWeights& a = weights_.layers[l].attn;
    // The k/v rows of the fused q/k/v weight: one GEMM for both.
    project_context_kv(ctx, weights_.layers[l], dims_, b.c, b.kv);
    // k_norm, RoPE at the rows' absolute positions and the K/V write: one kernel on CUDA (the
    // prologue without query heads).
    QkvPrologueArgs pro;
    pro.qkv = b.kv;
    pro.n_heads = 0;
    pro.n_kv_heads = dims_.n_kv_heads;
    pro.head_dim = dims_.head_dim;
    if (a.k_norm->defined()) pro.k_norm = a.k_norm.view();
    pro.norm = norm;
    pro.positions = meta.positions;
    pro.inv_freq = rope_.inv_freq;
    pro.attention_scaling = rope_.attention_scaling;
    pro.slots = meta.slots;
    pro.k_pages = kv_.k_pages(static_cast<int>(l));
    pro.v_pages = kv_.v_pages(static_cast<int>(l));
    pro.k_tmp = b.k_tmp;
    qkv_prologue(ctx, pro);
  }
}

DSparkSource::CommitBuckets::Entry& DSparkSource::commit_bucket(Context& ctx, int64_t rows,
                                                                std::span<const Tensor> taps) {
  CommitKey& key = commit_key_;  // reused: no allocation per round once its vectors have grown
  key.rows = rows;
  key.taps.clear();
  key.tap_rows.clear();
  for (const Tensor& t : taps) {
    key.taps.push_back(t.data());
    key.tap_rows.push_back(t.shape()[0]);
  }
  return commit_buckets_.find_or_create(ctx, key, [&](CommitBucket& bucket) {
    bucket.meta = DeviceIndices(ctx.device(), {rows, rows, rows});
    bucket.buffers = take_commit_buffers(ctx, rows, bucket.arena);
  });
}

void DSparkSource::project_context(Context& ctx, const std::vector<SeqId>& seqs,
                                   const std::vector<int>& n_new,
                                   const std::vector<int32_t>& tap_rows,
                                   const std::vector<int32_t>& positions,
                                   std::span<const Tensor> taps) {
  const auto n = static_cast<int64_t>(tap_rows.size());
  std::optional<KvBatchPlan> plan = kv_.plan(seqs, n_new);
  DSPARK_CHECK_KIND(out_of_memory, plan.has_value(),
                    "dspark: drafter KV cache full ({} free pages for {} context rows); raise "
                    "kv_tokens",
                    kv_.free_pages(), n);
  // CUDA: pad to the ladder (the record keeps the exact rows: eager, unpadded).
  const bool pad = ctx.is_cuda() && !options_.record && n <= kCommitGraphMaxRows;
  const int64_t rows = pad ? commit_rows_bucket(n) : n;
  commit_rows_.assign(tap_rows.begin(), tap_rows.end());
  commit_positions_.assign(positions.begin(), positions.end());
  commit_slots_.assign(plan->slots.begin(), plan->slots.end());
  commit_rows_.resize(static_cast<size_t>(rows), 0);
  commit_positions_.resize(static_cast<size_t>(rows), 0);
  commit_slots_.resize(static_cast<size_t>(rows), -1);

  if (pad && target_.cuda_graphs()) {
    CommitBuckets::Entry& entry = commit_bucket(ctx, rows, taps);
    CommitBucket& g = entry.bucket;
    g.meta.stage(ctx, {&commit_rows_, &commit_positions_, &commit_slots_});
    const CommitMeta m{g.meta.view(0), g.meta.view(1), g.meta.view(2)};
    commit_buckets_.run(
        ctx, entry, 0, {},
        GraphCounters{dstats_.n_commit_graph_replays, dstats_.n_commit_graph_captures,
                      dstats_.n_commit_graph_fallbacks},
        [&] { enqueue_commit(ctx, m, g.buffers, taps); },
        [&] { return fmt::format("{} rows", rows); });
    return;
  }
  meta_.clear();
  const int s_rows = meta_.add(commit_rows_);
  const int s_positions = meta_.add(commit_positions_);
  const int s_slots = meta_.add(commit_slots_);
  meta_.upload(ctx);
  const CommitBuffers b = take_commit_buffers(ctx, rows, arena_);
  enqueue_commit(ctx, CommitMeta{meta_.view(s_rows), meta_.view(s_positions), meta_.view(s_slots)},
                 b, taps);
  if (options_.record) {
    record_.n_context_rows = n;
    record_.context_features = to_f32_vector(b.c);
  }
}

}  // namespace dspark
