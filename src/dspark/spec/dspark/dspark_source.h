// The DFlash / DSpark block drafter as a DraftSource (CPU and CUDA).
//
// Commit: the target taps of every committed token (prompt chunks, then [pending, accepted
// drafts] after each verify; never rejected drafts) become context rows
//   C = hidden_norm(fc([tap_1 ; ... ; tap_m]))
// and each drafter layer's K = RoPE(k_norm(Wk C)), V = Wv C are projected ONCE, for all rows of
// the commit in one pass, into the drafter's own paged KV cache at the rows' absolute positions.
// Propose: every row's block [pending, mask x (L-1)] (positions P..P+L-1, P = committed length)
// goes through the layers in one batched pass (M = rows x L): q/k/v of the block, block K/V
// appended after the context, NON-causal attention, o_proj, SwiGLU, final norm; the block K/V is
// then rolled back. Base logits U = lm_head(h) of the draft rows, then the sequential head
// (markov.h) picks the tokens on the device, and ONE device->host read returns the tokens and
// confidences of the round. Pruning: with per-position thresholds t_k, a row's proposal ends at
// the first draft position k > 0 whose confidence sigmoid(logit_k) < t_k (position 0 is never
// pruned).
// Sampled rows keep q = process_logits(z_k, request params) for the verifier and draw with
// philox_uniform(seed, position of the drafted token, draft_lane(params.spec)) (the target's own
// uniform for coupled rows); greedy-only rounds leave Proposal::q undefined.
// Structured output (ProposeRequest::grammar): the block's hidden states never depend on the
// drafted tokens, only the sequential head's choices do, so every choice is masked: the head runs
// step by step and, before each step's choice, the tokens of the step before are read back, each
// constrained row's grammar moves past its token and masks that row's z_k (q_k is then the
// masked, renormalised distribution). Such a round reads the device once per step, drafts over
// the whole vocabulary (no draft vocabulary) and is never graphed; a row's drafts end after an
// EOS.
// Deferred commits: a row that drafted nothing in a round (RowUpdate::n_drafted == 0 after its
// prompt; with the adaptive draft policy, a row for which drafting does not pay) is not projected
// then: its kept tokens' target taps are copied into a staging area (the concatenated tap rows,
// as the commit gathers them) and projected when the row is next asked for drafts, in one pass
// (chunks of at most kDeferredChunkRows rows), before its block runs. A row that never drafts
// again costs the copy of its taps only. The projection of a staged row is that of an eager
// commit (the same kernels over the same rows; on the CPU bitwise equal: the products of at most
// 32 rows are batch invariant, ops/matmul.h), so the drafts do not depend on when the rows were
// projected. The staging area holds DSparkSourceOptions::deferred_rows rows over all rows; when a
// commit does not fit, the live rows are moved to the front if that frees half of it, else every
// staged row is projected.
// Capacity: a commit that does not fit the drafter's KV cache throws out_of_memory; a round whose
// blocks do not fit proposes nothing (counted in DSparkStats::n_kv_full).
// CUDA graphs: while the target's graphs are on (Model::cuda_graphs), greedy rounds on CUDA are
// captured and replayed (backend/graph_cache.h), one bucket per (rows, drafts, logit columns) with
// its own metadata and activation buffers, one graph per attention_graph_variant; what a replayed
// round does on the host is the plan, one metadata copy, the launch and the one read. Context
// commits of up to kCommitGraphMaxRows rows are graphed the same way (dspark_commit.cpp): on
// CUDA their row count is padded up a short ladder (padding rows write no K/V), one bucket per
// padded count and tap tensor set.
#pragma once

#include <filesystem>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "dspark/backend/graph_cache.h"
#include "dspark/backend/pinned_memory.h"
#include "dspark/core/buffer.h"
#include "dspark/kv/paged_kv_cache.h"
#include "dspark/model/layers.h"
#include "dspark/model/model.h"
#include "dspark/spec/draft_source.h"
#include "dspark/spec/dspark/calibration.h"
#include "dspark/spec/dspark/drafter_config.h"
#include "dspark/spec/dspark/drafter_weights.h"
#include "dspark/spec/dspark/markov.h"

namespace dspark {

struct DSparkSourceOptions {
  int block_size = 0;       // block rows L per round (0: the checkpoint's block_size)
  int kv_tokens = 1 << 15;  // drafter KV capacity in tokens, over all rows
  int page_size = 16;
  // Per draft position k: the proposal ends at the first k > 0 with confidence < thresholds[k]
  // (positions past the end of the list, and position 0, are never pruned). Empty: no pruning.
  std::vector<float> thresholds;
  // Per draft position: the calibrated acceptance of a draft given its confidence (the thresholds
  // file's "acceptance"); a position without a curve uses the nearest earlier one (those before the
  // first curve use the first). Fills Proposal::acceptance; empty: the proposal carries none.
  std::vector<AcceptanceCurve> acceptance;
  // Keep host copies of the last commit's context features and of the last round (tests).
  bool record = false;
  // false: drafts from the base logits alone (z_k = U_k), ignoring the Markov / gated / RNN
  // head (an ablation: the DSpark checkpoint's backbone as plain DFlash). The confidence head
  // still runs.
  bool markov_enabled = true;
  // A draft vocabulary: greedy rounds draft over these token ids only (sorted, unique, within
  // the vocabulary; empty: the whole vocabulary). The LM head and the Markov head's w2 are cut to
  // these rows once, so a draft step reads V'/V of their bytes (EAGLE-3's draft vocabulary is the
  // same idea). Drafts stay proposals the target verifies: output is unchanged, only tokens
  // outside the list are never drafted. Sampled rounds use the whole vocabulary (their q must
  // cover it). spec/dspark/draft_vocab.h reads the list from a file.
  std::vector<int32_t> draft_vocab;
  // The backbone's projections (q/k/v, o, gate/up, down), the LM head rows it drafts with and the
  // context projection fc (read by every commit) in FP8 (E4M3 codes, one scale per row:
  // ops/linear_fp8.h), quantized once from the checkpoint's weights: about half the bytes a draft
  // step and a commit read. The target still verifies every draft, so the output is unchanged;
  // only acceptance may move. CUDA with bf16 activations only; norms and the Markov / confidence
  // heads stay in the engine dtype.
  bool fp8_weights = false;
  // Context rows staged by deferred commits (see above) at most, over all rows: each holds the
  // target's tap rows (taps x hidden values in the engine dtype; 11.5 KB for SmolLM2-135M's five
  // f32 taps), allocated on the first deferred commit. 0: every commit is projected at once.
  int deferred_rows = 2048;
};

struct DSparkStats {
  int64_t n_commits = 0;
  int64_t n_rows_committed = 0;  // context rows handed to commit (kept tokens)
  int64_t n_rows_projected = 0;  // context rows projected into the drafter KV cache
  // Deferred commits: rows staged, and staged rows released (or rolled back) before they were
  // projected. Once every row is released, n_rows_committed == n_rows_projected + n_rows_dropped.
  int64_t n_rows_staged = 0;
  int64_t n_rows_dropped = 0;
  int64_t n_stage_flushes = 0;  // passes that projected staged rows (a resuming row, a full stage)
  int64_t n_stage_compactions = 0;  // live staged rows moved to the front of a full stage
  int64_t last_commit_rows_committed = 0;
  int64_t last_commit_rows_projected = 0;
  int64_t n_rounds = 0;          // propose calls that ran the backbone
  int64_t n_block_rows = 0;      // block rows through the backbone
  int64_t n_pruned = 0;          // drafts dropped by the thresholds
  int64_t n_device_reads = 0;    // device->host reads by propose (one per round)
  int64_t n_kv_full = 0;         // rounds without drafts because the block did not fit the KV cache
  int64_t n_graph_replays = 0;   // rounds run by launching a captured CUDA graph
  int64_t n_graph_captures = 0;  // of them, the launches right after a capture
  int64_t n_graph_fallbacks = 0;  // captures that failed (the round then ran eagerly)
  // The context commits, likewise (CUDA, target graphs on, at most kCommitGraphMaxRows rows).
  int64_t n_commit_graph_replays = 0;
  int64_t n_commit_graph_captures = 0;
  int64_t n_commit_graph_fallbacks = 0;
};

// Host copies kept when DSparkSourceOptions::record is set.
struct DSparkRecord {
  int64_t n_context_rows = 0;
  std::vector<float> context_features;  // [n_context_rows, d] of the last commit
  int rows = 0;                         // R of the last round
  int block_rows = 0;                   // L
  int steps = 0;                        // S drafts computed per row
  std::vector<float> hidden;            // [R * L, d]: row i's block at [i * L, (i + 1) * L)
  std::vector<float> base_logits;       // [R * S, V]: row i's draft s at i * S + s (V' columns
                                        // with a draft vocabulary)
  std::vector<float> logits;            // corrected logits z, same layout
  std::vector<int32_t> tokens;          // [R * S] before pruning and max_tokens
  std::vector<float> confidence;        // [R * S] sigmoid; empty without a confidence head
};

class DSparkSource final : public DraftSource {
 public:
  // `target` must outlive the source (its embedding / LM head are used when the checkpoint has
  // none). Checks that the drafter fits the target (invalid_input otherwise).
  DSparkSource(DrafterConfig config, DrafterWeights weights, Model& target,
               DSparkSourceOptions options);
  ~DSparkSource() override;
  DSparkSource(const DSparkSource&) = delete;
  DSparkSource& operator=(const DSparkSource&) = delete;

  std::string name() const override;
  std::vector<int> target_taps() const override { return config_.target_layer_ids; }
  void begin(Context& ctx, RowId row, std::span<const int32_t> prompt) override;
  void commit(Context& ctx, std::span<const RowUpdate> updates,
              std::span<const Tensor> taps) override;
  void propose(Context& ctx, std::span<const ProposeRequest> requests, Proposal& out) override;
  void release(RowId row) override;
  DraftStats stats() const override { return stats_; }
  bool defers_idle_commits() const override { return options_.deferred_rows > 0; }
  // The context K/V of a prompt's prefix is published and attached with the drafter's KV pages.
  bool reuses_prefixes() const override { return true; }
  int prefix_page() const override { return kv_.shape().page_size; }
  int attach_prefix(RowId row, std::span<const int32_t> prompt, int max_tokens) override;
  void trim_prefix(RowId row, int n) override;
  void publish_prefix(RowId row, std::span<const int32_t> prompt, int n) override;

  const DrafterConfig& config() const { return config_; }
  const DSparkStats& dspark_stats() const { return dstats_; }
  const DSparkRecord& record() const { return record_; }
  int block_rows() const { return block_rows_; }
  // Drafts a full block yields (L - row offset): the most a row can get per round.
  int max_drafts() const { return config_.drafts_per_block(block_rows_); }
  void set_thresholds(std::vector<float> thresholds) {
    options_.thresholds = std::move(thresholds);
  }
  const std::vector<float>& thresholds() const { return options_.thresholds; }
  // When set, every commit appends the reached draft positions of the row's last proposal.
  void set_confidence_log(std::vector<ConfidenceSample>* log) { confidence_log_ = log; }

 private:
  struct Row {
    SeqId seq = -1;
    int32_t pending = -1;
    std::vector<float> confidence;  // the last proposal's confidences (drafted positions)
    // Deferred context rows: their rows of stage_, for positions kv length, kv length + 1, ...
    std::vector<int32_t> staged;
  };
  Row& row_ref(RowId row);
  void project_context(Context& ctx, const std::vector<SeqId>& seqs, const std::vector<int>& n_new,
                       const std::vector<int32_t>& tap_rows, const std::vector<int32_t>& positions,
                       std::span<const Tensor> taps);

  // ---- deferred commits (dspark_deferred.cpp) ----
  // Rows projected per pass of a flush: the CPU's batch-invariant product (ops/matmul.h).
  static constexpr int64_t kDeferredChunkRows = 32;
  struct Deferral {
    Row* row;
    const RowUpdate* update;
  };
  // Drops a row's context from `position` on (staged rows, then projected ones).
  void truncate_context(Row& r, int position);
  // Makes room for `n` staged rows: moves the live rows to the front when that frees half the
  // stage, else projects every staged row. False when `n` exceeds the whole stage.
  bool make_stage_room(Context& ctx, int64_t n);
  // The deferred updates' tap rows into the stage.
  void stage_context(Context& ctx, std::span<const Deferral> deferrals,
                     std::span<const Tensor> taps);
  // Projects the rows' staged context into the drafter's KV cache.
  void flush_staged(Context& ctx, std::span<Row* const> rows);
  void drop_staged(Row& r, size_t keep);   // staged rows from index `keep` on
  std::vector<Tensor> stage_taps() const;  // stage_ as the commit's tap tensors
  OwnedTensor stage_;                      // [deferred_rows, taps x hidden] engine dtype
  int64_t stage_top_ = 0;     // rows of stage_ written since it was last empty or compacted
  int64_t stage_live_ = 0;    // of them, held by a row
  PackedIndices stage_meta_;  // the tap rows a deferred commit copies
  std::vector<Deferral> deferrals_;
  std::vector<Row*> flush_rows_;

  // ---- the context commit's device work (dspark_commit.cpp) ----
  struct CommitMeta {
    Tensor tap_rows, positions, slots;  // i32 [n]; slot -1: a padding row (no K/V write)
  };
  struct CommitBuffers {
    Tensor concat, c_raw, c, kv, k_tmp;
  };
  CommitBuffers take_commit_buffers(Context& ctx, int64_t n, ActivationArena& arena) const;
  // gather taps -> fc -> hidden_norm -> per layer: K/V GEMM, k_norm + RoPE + K/V write.
  void enqueue_commit(Context& ctx, const CommitMeta& m, const CommitBuffers& b,
                      std::span<const Tensor> taps);
  struct CommitKey {
    int64_t rows = 0;               // padded
    std::vector<const void*> taps;  // the tap tensors' addresses and rows: a graph bakes them
    std::vector<int64_t> tap_rows;
    auto tie() const { return std::tie(rows, taps, tap_rows); }
    bool operator<(const CommitKey& o) const { return tie() < o.tie(); }
  };
  struct CommitBucket {
    DeviceIndices meta;  // tap rows, positions, slots
    ActivationArena arena;
    CommitBuffers buffers;
    size_t bytes() const { return arena.capacity(); }
  };
  using CommitBuckets = GraphCache<CommitKey, CommitBucket>;  // one variant (no attention)
  static constexpr int64_t kCommitGraphMaxRows = 64;
  // The tap addresses in the key follow the target's verify buckets (one per verify shape): as
  // many as those (see evict_lru_bucket).
  static constexpr size_t kCommitMaxBuckets = 96;
  CommitBuckets::Entry& commit_bucket(Context& ctx, int64_t rows, std::span<const Tensor> taps);

  // One round: R rows of L block rows, S drafts each, `cols` logit columns.
  struct RoundShape {
    int64_t rows = 0, steps = 0, block = 0, cols = 0;
    bool short_vocab = false, sampled = false;
    int64_t conf_offset() const;     // of the confidence logits in the readback (elements)
    int64_t readback_elems() const;  // i32 tokens [(S + 1) R] | pad | f32 logits [S R]
  };
  // The device metadata a round's kernels read.
  struct RoundMeta {
    Tensor tokens, draft_rows, anchors, uniforms;
    ForwardMeta forward;
  };
  // A round's activations and its readback area, carved from one arena.
  struct RoundBuffers {
    Tensor x, xn, proj, gate_up, mlp, hd, logits, probs, readback;
    AttentionScratch scratch;
  };
  RoundBuffers take_round_buffers(Context& ctx, const RoundShape& s, ActivationArena& arena) const;
  // Enqueues the round's kernels: backbone, LM head, sequential head, tokens into the readback.
  // before_select: HeadRound::before_select (structured output; empty otherwise).
  // Structured output: the HeadRound::before_select of an eager round over requests[active[a]]
  // (row a): moves each row's grammar past its previous draft and masks its logits row; keep[a]
  // becomes the drafts row a keeps once its grammar ended the output.
  std::function<void(int64_t)> grammar_step(Context& ctx, std::span<const ProposeRequest> requests,
                                            std::span<const size_t> active, const RoundBuffers& b,
                                            std::vector<int>& keep);
  std::vector<int32_t> grammar_tokens_, grammar_rows_;
  std::vector<uint32_t> grammar_words_;
  void enqueue_round(Context& ctx, const RoundShape& s, const RoundMeta& m, const RoundBuffers& b,
                     ActivationArena& head_arena, std::span<const SamplingParams> params,
                     const std::function<void(int64_t)>& before_select = {});

  // ---- CUDA graphs of greedy rounds ----
  struct GraphKey {
    int64_t rows = 0, steps = 0, cols = 0;
    auto tie() const { return std::tie(rows, steps, cols); }
    bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
  };
  struct GraphBucket {
    DeviceIndices meta;  // tokens, positions, slots, q_indptr, page_indptr, kv_lens, draft rows,
                         // anchors, page indices
    ActivationArena arena, head_arena;
    RoundBuffers buffers;
    size_t bytes() const { return arena.capacity() + head_arena.capacity(); }
  };
  using GraphBuckets = GraphCache<GraphKey, GraphBucket>;  // by attention_graph_variant
  // A request's last rounds draft fewer steps (gamma - 1, gamma - 2, ...): one shape each (see
  // evict_lru_bucket).
  static constexpr size_t kGraphMaxBuckets = 96;
  GraphBuckets::Entry& graph_bucket(Context& ctx, const RoundShape& s);

  DrafterConfig config_;
  DrafterWeights weights_;
  Model& target_;
  DSparkSourceOptions options_;
  DType dtype_;
  int block_rows_ = 0;
  WeightMatrix embed_;    // [V, d] the checkpoint's or the target's (may be block-quantized)
  WeightMatrix lm_head_;  // [V, d]
  // The draft vocabulary's device tables, built on its first greedy round: ids i32 [V'], the LM
  // head's and w2's rows of those ids (w2_short_w_ over w2_short_: dense rows, or blocks where
  // the drafter holds w2 as blocks).
  OwnedTensor vocab_ids_, lm_head_short_, w2_short_;
  WeightMatrix w2_short_w_;
  // On the CPU a block-quantized LM head's rows stay blocks (the same products, a quarter of the
  // bytes of f32 rows for Q8_0): lm_head_short_w_ over lm_head_short_blocks_ (n = 0: unused).
  OwnedTensor lm_head_short_blocks_;
  WeightMatrix lm_head_short_w_;
  void prepare_draft_vocab(Context& ctx);
  void prepare_short_head(Context& ctx);  // lm_head_short_ (and its FP8 scales)
  // FP8 drafting (options_.fp8_weights): the per-row scales of lm_head_short_ (then E4M3 codes),
  // and the whole LM head's codes and scales, made on the first round that drafts over it.
  OwnedTensor lm_head_short_scale_, lm_head8_, lm_head8_scale_;
  void quantize_backbone_fp8();
  AttentionDims dims_;
  RopeOnDevice rope_;
  PagedKvCache kv_;
  SequentialHead head_;
  std::unordered_map<RowId, Row> rows_;

  PackedIndices meta_;
  ActivationArena arena_, head_arena_;  // eager rounds
  GraphBuckets graph_buckets_{"a draft round", kGraphMaxBuckets};
  CommitBuckets commit_buckets_{"a drafter commit", kCommitMaxBuckets};
  std::vector<int32_t> commit_rows_, commit_positions_, commit_slots_;  // padded, reused
  CommitKey commit_key_;                                                // lookup key, reused
  OwnedTensor q_;        // f32 [n drafts, V]: the proposal's q (compacted)
  OwnedTensor q_index_;  // i32, grow-only
  // The round's readback: pinned on CUDA (the copy is plain DMA and the host then waits once, in
  // the stream synchronisation; a copy to pageable memory waits inside the copy call, through
  // the driver's bounce buffer), plain on the CPU. Grow-only.
  PinnedBuffer host_read_pinned_;
  std::vector<int32_t> host_read_;

  DraftStats stats_;
  DSparkStats dstats_;
  DSparkRecord record_;
  std::vector<ConfidenceSample>* confidence_log_ = nullptr;
  // Per draft position, the curve of options_.acceptance it uses (the nearest earlier non-empty
  // one); empty without curves or without a confidence head.
  std::vector<const AcceptanceCurve*> curves_;
};

// The thresholds file read next to a checkpoint when present (see spec/dspark/calibration.h).
inline constexpr const char* kThresholdsFileName = "dspark_thresholds.json";

// Loads a block drafter checkpoint directory for `target` (on the target's device and dtype): the
// layout from config.json, the fit checks (invalid_input naming the mismatch), the weights, and
// dir/dspark_thresholds.json when present and options.thresholds is empty.
std::unique_ptr<DSparkSource> load_dspark_source(const std::filesystem::path& dir, Model& target,
                                                 DSparkSourceOptions options = {},
                                                 bool read_thresholds_file = true);

}  // namespace dspark
