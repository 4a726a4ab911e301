// CUDA launchers, one per op (implemented in backend/cuda/kernels/<op>.cu; no CUDA includes here).
// They enqueue on ctx.cuda_stream() and never synchronise. The ops layer
// (ops/*.cpp) validates shapes, dtypes and devices first; these assume valid arguments and take
// exactly the op's arguments (see ops/<op>.h for the documented shapes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dspark/backend/context.h"
#include "dspark/core/tensor.h"
#include "dspark/ops/activation.h"
#include "dspark/ops/attention.h"
#include "dspark/ops/embedding.h"
#include "dspark/ops/head_cells.h"
#include "dspark/ops/linear_norm.h"
#include "dspark/ops/matmul.h"
#include "dspark/ops/norm.h"
#include "dspark/ops/qkv_prologue.h"
#include "dspark/ops/rope.h"
#include "dspark/ops/sampling.h"
#include "dspark/ops/softmax.h"
#include "dspark/ops/speculative.h"

namespace dspark::cuda {

void gather_rows(Context& ctx, const Tensor& table, const Tensor& ids, const Tensor& out);
void rms_norm(Context& ctx, const Tensor& x, const Tensor& weight, const Tensor& out,
              const RmsNormParams& params);
void add_rms_norm(Context& ctx, const Tensor& residual, const Tensor& x, const Tensor& weight,
                  const Tensor& out, const RmsNormParams& params);
// CTAs per row of add_rms_norm's one-pass kernel (kernels/norm.cu; also linear_add_rms_norm's
// split sums) for calls of at most 64 rows with an f32 residual and x on sm_90, launched plainly
// (right after a cuBLASLt GEMM, kernels/pdl.cuh; or with PDL off): a thread-block cluster of 2, 4
// or 8 CTAs shares each row (1: one CTA per row). 8 unless the environment has
// DSPARK_NORM_CLUSTER=N (read once) or after set_norm_cluster_ctas (rounded down to 1, 2, 4 or
// 8). Programmatic launches (after our own kernels: decode steps, the drafter) keep one CTA per
// row unless DSPARK_NORM_CLUSTER_PDL=1 or set_norm_cluster_programmatic(true): clustered there,
// session 17's decode step was 0.74 ms slower. Process-wide; for benchmarks and tests.
// norm_cluster_launches counts the clustered launches.
void set_norm_cluster_ctas(int ctas);
int norm_cluster_ctas();
void set_norm_cluster_programmatic(bool on);
bool norm_cluster_programmatic();
uint64_t norm_cluster_launches();
void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
// The small-M tensor-core path of linear (kernels/gemv.cu, M <= 48 with 16-bit weights): off by
// default (every linear through cuBLASLt); on when the environment has DSPARK_CUDA_GEMV=1 or after
// set_small_m_linear(true). Process-wide; for benchmarks and tests.
void set_small_m_linear(bool enabled);
bool small_m_linear_enabled();
// linear with one row of x on CUDA cores (kernels/gemv_m1.cu: 16-bit weights, K % 8 == 0, K <=
// 16,384, N <= 65,536), for decode steps; tried before the other kernels and cuBLASLt. On by
// default; off when the environment has DSPARK_CUDA_GEMV_M1=0 (read once) or after
// set_m1_linear(false). Process-wide; for benchmarks and tests.
void set_m1_linear(bool enabled);
bool m1_linear_enabled();
// That kernel in CTAs of 8 warps, two per multiprocessor, for linears of N <= n (and K <= 8,192):
// they fit beside another kernel's CTA (a decode attention's) where the 16-warp CTAs' registers
// do not, so their first weight loads overlap it. n = kM1HalfCtasDefaultMaxN (the q/k/v and o
// projections of the 8B shapes) unless the environment has DSPARK_CUDA_GEMV_M1_HALF_MAX_N=n (read
// once; 0: off) or after set_m1_half_ctas_max_n. Process-wide; for benchmarks and tests.
inline constexpr int64_t kM1HalfCtasDefaultMaxN = 6144;
void set_m1_half_ctas_max_n(int64_t n);
int64_t m1_half_ctas_max_n();
// linear with 1-32 rows of x on tensor cores (kernels/gemv_rows.cu: 16-bit weights, K % 8 == 0,
// K <= 4096, N <= 65,536), for verify steps; tried after the one-row kernel, before the small-M
// kernel and cuBLASLt. Opt-in (slower than cuBLASLt at M = 16-17, session 7): off unless the
// environment has DSPARK_CUDA_GEMV_ROWS=1 (read once) or after set_rows_linear(true).
// Process-wide; for benchmarks and tests.
void set_rows_linear(bool enabled);
bool rows_linear_enabled();
// The few-rows kernel reading x from global memory (L1) in its MMA loop instead of staging it in
// shared memory (also DSPARK_CUDA_GEMV_ROWS_X=global): a measurement switch.
// DSPARK_CUDA_GEMV_ROWS_MAX_N (read once) keeps the kernel to linears of at most that many
// outputs.
void set_rows_linear_x_global(bool enabled);
bool rows_linear_x_global();
// linear with 1-48 rows of x by the stream-K few-rows kernel (kernels/gemv_streamk.cu: compute
// capability 9.0, 16-bit weights and x by TMA, wgmma; a programmatic dependent that requests its
// first weights before it waits), for verify and draft steps; tried after the one-row, few-rows
// and small-M kernels, before cuBLASLt. Opt-in: off unless the environment has
// DSPARK_CUDA_GEMV_STREAMK=1 (read once) or after set_streamk_linear(true);
// DSPARK_CUDA_GEMV_STREAMK_STAGES (2-12, default 8, fewer where the shared memory would not fit;
// read once) sets its pipeline depth. Process-wide; for benchmarks and tests.
void set_streamk_linear(bool enabled);
bool streamk_linear_enabled();
// Whether the current device can run the stream-K kernel (compute capability 9.0 and the driver's
// tensor-map encoder), and how many times it has been launched in this process (for tests: a call
// that the kernel declined went to cuBLASLt).
bool streamk_linear_available();
uint64_t streamk_linear_launches();
// linear's cuBLASLt algorithm per shape (backend/cuda/lt_plans.h): 0 (the default unless the
// environment has DSPARK_LT_AUTOTUNE=N) takes the heuristic's first candidate; N > 1 times up to N
// candidates when a shape is first seen (outside graph capture; each call after an L2 flush) and
// keeps the fastest. Setting it forgets every cached plan. Process-wide; for benchmarks and tests.
void set_linear_autotune(int candidates);
int linear_autotune();
// One autotuned plan: what was timed and what was kept.
struct LinearPlanRecord {
  int64_t m, n, k;
  int candidates;  // heuristic candidates timed
  int chosen;      // the fastest one's index (0: the heuristic's first)
  double heuristic_us, chosen_us;
  int32_t algo_id;
  uint32_t tile;
  int32_t splitk;
  uint32_t reduction;  // cublasLtReductionScheme_t of the chosen one
  int32_t heuristic_splitk;
};
// Every plan autotuned since the process started, in order.
std::vector<LinearPlanRecord> linear_plan_log();
// linear_add_rms_norm (ops/linear_norm.h; kernels/linear_norm.cu): for 2..max rows (48 unless
// the environment has DSPARK_LT_SPLIT_NORM_MAX_ROWS=N, read once, or after
// set_linear_norm_max_rows) of 16-bit x and w, with an f32 y and residual, the GEMM is a
// strided-batch cuBLASLt GEMM over S slices of K into f32 partial sums, which add_rms_norm's
// one-pass kernel adds as its x (and writes to y): no split-K reduce kernel. S =
// kLinearNormDefaultSplits unless the environment has DSPARK_LT_SPLIT_NORM=S (read once; 2 to
// kLinearNormMaxSplits, 0 or 1: linear then add_rms_norm) or after set_linear_norm_splits. Off
// while one of the opt-in linears above is on. Process-wide; for benchmarks and tests.
// linear_norm_split_launches counts the calls that took the K split.
inline constexpr int kLinearNormDefaultSplits = 2;
inline constexpr int kLinearNormMaxSplits = 4;
void linear_add_rms_norm(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y,
                         const Tensor& residual, const Tensor& weight, const Tensor& out,
                         const RmsNormParams& params, const LinearNormExtras& extras);
void set_linear_norm_splits(int splits);
int linear_norm_splits();
void set_linear_norm_max_rows(int rows);
int linear_norm_max_rows();
uint64_t linear_norm_split_launches();
// paged_attention on tensor cores (kernels/attention_mma.cu) for 16-bit caches with head_dim
// 64 / 128 / 256: on by default; off when the environment has DSPARK_ATTENTION_MMA=0 or after
// set_mma_attention(false) (every call then runs the CUDA-core kernel). Process-wide.
void set_mma_attention(bool enabled);
bool mma_attention_enabled();
// paged_attention with split keys: query tiles of at most this many rows (0..16) are merged by
// their last split CTA, bigger ones by the separate combine kernel (same values either way). 4 by
// default (decode); DSPARK_ATTN_MERGE=0 gives 0, DSPARK_ATTN_MERGE_ROWS=N gives N. Process-wide.
void set_attention_merge_rows(int rows);
int attention_merge_rows();
// paged_attention on tensor cores, decode variant: 2 (default), the early variant (K/V of the
// keys below each row's new tokens copied before the programmatic-dependent wait, the page ids of
// later tiles looked up during the math, and the split merge of decode tiles through shared
// memory), or 1, the previous path (the same bits). 1 when the environment has
// DSPARK_ATTN_DECODE=1 (read once) or after set_attention_decode(1). Process-wide; the early
// variant needs the K/V below a row's new tokens to be written before the kernel that precedes
// paged_attention started (ops/attention.h).
void set_attention_decode(int variant);
int attention_decode();
// paged_attention on tensor cores, cluster variant (the default on sm_90): for launches
// with split keys whose query tiles are left to the combine kernel (more rows than
// attention_merge_rows(): verify, draft blocks), the split CTAs of a tile form one thread-block
// cluster and merge the splits through distributed shared memory (the combine kernel's bits, no
// combine launch). With it on (sm_90), paged_attention_splits caps such launches at 8 splits on
// either kernel. On by default; off when the environment has DSPARK_ATTN_CLUSTER=0 (read once) or
// after set_attention_cluster(false). Process-wide.
void set_attention_cluster(bool enabled);
bool attention_cluster();
// paged_attention_splits for cluster-merged launches: of the split counts that give each split
// CTA at most as many 64-key tiles as the CTA target's count, the fewest (fewer CTAs to merge;
// e.g. a verify of 17 tokens at context 1,024: 6 splits instead of 7). On by default; off when the
// environment has DSPARK_ATTN_BALANCED_SPLITS=0 (read once) or after
// set_attention_balanced_splits(false). Process-wide; graphs are keyed by the resulting count.
void set_attention_balanced_splits(bool enabled);
bool attention_balanced_splits();
// paged_attention on the row-warp tensor-core kernel (kernels/attention_rows.cu; opt-in: faster
// than attention_mma.cu alone for several requests, slower in the graphed verify on the H200) for
// launches of at least two queries per request (verify, draft blocks, prefill) over at least
// attention_rows_min_requests() requests (4 by default), with 16-bit caches and head_dim 64 /
// 128: `key_groups` (1, 2 or 4) warps per m16 tile of query rows, 0 = off (the default).
// DSPARK_ATTN_ROWS=0/1/2/4 and DSPARK_ATTN_ROWS_MIN_REQUESTS=N (read once);
// set_attention_rows_tokens caps its tokens per CTA (0: the default tiling;
// DSPARK_ATTN_ROWS_TOKENS). Process-wide; paged_attention_splits follows the tiling, and graphs
// are keyed by its count. attention_rows_launches counts its launches.
void set_attention_rows(int key_groups);
int attention_rows();
void set_attention_rows_min_requests(int requests);
int attention_rows_min_requests();
void set_attention_rows_tokens(int tokens);
uint64_t attention_rows_launches();
void swiglu(Context& ctx, const Tensor& gate, const Tensor& up, const Tensor& out);
void add(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
void convert(Context& ctx, const Tensor& src, const Tensor& out);
void rope(Context& ctx, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
          float attention_scaling);
void softmax(Context& ctx, const Tensor& x, const Tensor& out);
void log_softmax(Context& ctx, const Tensor& x, const Tensor& out);
void argmax(Context& ctx, const Tensor& x, const Tensor& out, const Tensor& index_map);
void process_logits(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
                    const Tensor& probs);
void sample(Context& ctx, const Tensor& logits, std::span<const SamplingParams> params,
            std::span<const uint64_t> seeds, std::span<const uint64_t> counters,
            const Tensor& tokens);
void sample_from_probs(Context& ctx, const Tensor& probs, const Tensor& uniforms,
                       const Tensor& tokens);
void kv_write(Context& ctx, const Tensor& k, const Tensor& v, const Tensor& slots,
              const Tensor& k_pages, const Tensor& v_pages);
// The fused prologue (ops/qkv_prologue.h); the ops layer has checked that it applies (head_dim 64,
// 128 or 256, full rotation, contiguous pages).
void qkv_prologue(Context& ctx, const QkvPrologueArgs& a);
void paged_attention(Context& ctx, const Tensor& q, const PagedKv& kv, const Tensor& q_indptr,
                     const Tensor& q_pos, const AttentionParams& params, const Tensor& out);
void speculative_accept(Context& ctx, const Tensor& p, const Tensor& q, const Tensor& draft_tokens,
                        const Tensor& draft_indptr, const Tensor& seeds, const Tensor& positions,
                        const Tensor& n_accepted, const Tensor& next_token);

void sigmoid_gate(Context& ctx, const Tensor& gate, const Tensor& x, const Tensor& out);
void rnn_head_cell(Context& ctx, const Tensor& proj, const Tensor& state, const Tensor& out);
// false: the fused kernel does not apply (see ops/head_cells.h), nothing was launched.
bool markov_greedy_step(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& prev,
                        const Tensor& z, const Tensor& next, const Tensor& index_map);
bool markov_greedy_loop(Context& ctx, const Tensor& w1, const Tensor& w2, const Tensor& tokens,
                        const Tensor& z, int64_t rows, int64_t steps, const Tensor& index_map);

// FP8 weights with per-row scales (ops/linear_fp8.h); the ops layer checked the shapes.
void quantize_rows_fp8(Context& ctx, const Tensor& w, const Tensor& w8, const Tensor& scale);
void linear_fp8(Context& ctx, const Tensor& x, const Tensor& w8, const Tensor& scale,
                const Tensor& bias, const Tensor& y);
// linear_fp8's kernel for M <= 16: 0 = one CTA per 16-row tile, 2 or 4 = the stream kernel with
// that many 64-byte chunks per pipeline stage (also DSPARK_FP8_STREAM), and 1 or 2 row tiles per
// stream step (2 only with stages of 2; DSPARK_FP8_STREAM_TILES): the same results either way;
// 8 = the x-in-registers kernel (DSPARK_FP8_STREAM=x; K <= 4096, else the default), whose split
// of K differs (results equal to rounding). Process-wide; for benchmarks and tests.
// set_fp8_stream_default() restores the choice by M and N (gemv_fp8.cu); fp8_stream() returns
// the setting (opaque) for set_fp8_stream_raw. set_fp8_balanced(false) (DSPARK_FP8_BALANCE=0)
// gives the stream kernel one CTA per slot (2 per SM) instead of a grid where every CTA walks the
// same number of row blocks.
void set_fp8_stream(int chunks_per_stage, int row_tiles = 1);
void set_fp8_stream_default();
int fp8_stream();
void set_fp8_stream_raw(int setting);
void set_fp8_balanced(bool balanced);
bool fp8_balanced();

}  // namespace dspark::cuda
