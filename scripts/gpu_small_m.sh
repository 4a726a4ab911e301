#!/usr/bin/env bash
# GPU session for the small-M linear kernel (issue 6): build, `ctest -L cuda`, bench_linear (kernel
# vs cuBLASLt per shape), then bench_round on the Qwen3-8B shape with its DSpark b16 drafter, with
# the opt-in kernel (DSPARK_CUDA_GEMV=1) and without it, eager and graphs, in one call.
#   bash scripts/gpu_small_m.sh        (carry .carry/debs; logs and JSON under $OUT)
# Environment: CTEST_ARGS (e.g. "-R CudaGemv"), LINEAR_ARGS (bench_linear flags), VERIFY (verify
# widths, default 1,4,16,32), CONTEXT / BATCH (bench_round's lists, default 1024 / 1),
# ROUND_ARGS (bench_round flags instead of the drafter + --graphs, e.g. --profile-ops), ROUNDS
# (see below), ATTENTION (see below), TAIL (lines shown), SKIP_LINEAR / SKIP_ROUND (skip those),
# ROUND_TIMEOUT (seconds per bench_round run, default 150), ROUND_COUNT (its --rounds, default 32),
# GRID (one run per context x batch).
source "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
TAIL="${TAIL:-80}"
export JOBS="${JOBS:-16}" DSPARK_BUILD_BENCH=ON
export EXTRA_TARGETS="dspark bench_round bench_linear bench_attention ${EXTRA_TARGETS:-}"
OUT=/tmp/gpu-check bash scripts/gpu_check.sh build-gpu >"$out/check.log" 2>&1
echo "gpu_check exit $? ($(( $(date +%s) - t0 )) s)"
cp /tmp/gpu-check/ctest.log "$out/" 2>/dev/null
grep -E "tests passed|FAILED|Failed|\*\*\*" "$out/check.log" | head -20
lib="$repo/build-gpu/deps-root/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"
bin="$repo/build-gpu/bin"
[ -n "${SKIP_LINEAR:-}" ] || TAIL=60 run 120 linear "$bin/bench_linear" ${LINEAR_ARGS:-} --json "$out/linear.json"
# ATTENTION: bench_attention runs, one per ';'-separated flag set (e.g. "--queries 1,17;--non-causal
# --queries 16").
IFS=';' read -r -a attention_runs <<<"${ATTENTION:-}"
# ATTENTION_NO_PDL=1 repeats each with programmatic dependent launch off (DSPARK_CUDA_PDL=0).
for i in "${!attention_runs[@]}"; do
  TAIL=30 run 200 "attention_$i" "$bin/bench_attention" ${attention_runs[$i]} \
    --json "$out/attention_$i.json"
  [ -n "${ATTENTION_NO_PDL:-}" ] && TAIL=30 run 200 "attention_nopdl_$i" env DSPARK_CUDA_PDL=0 \
    "$bin/bench_attention" ${attention_runs[$i]} --json "$out/attention_nopdl_$i.json"
done
[ -n "${SKIP_ROUND:-}" ] && exit 0
models=/tmp/dspark-models
random_checkpoints "$models" qwen3-8b qwen3-8b-dspark-b16
echo "synth done ($(( $(date +%s) - t0 )) s)"
round=("$bin/bench_round" -m "$models/qwen3-8b" --device cuda --rounds "${ROUND_COUNT:-32}"
  --verify-k ${VERIFY:-1,4,16,32} ${ROUND_ARGS:---draft $models/qwen3-8b-dspark-b16 --gamma 16 --graphs})
# GRID=1: one bench_round run per (context, batch) of the CONTEXT and BATCH lists, each with its own
# ROUND_TIMEOUT and its own log and JSON (round_NAME_cC_bB), so that a timeout loses one
# combination only; otherwise one run measures every combination in turn.
if [ -n "${GRID:-}" ]; then
  shapes=()
  for c in ${CONTEXT//,/ }; do for b in ${BATCH//,/ }; do shapes+=("$c $b"); done; done
else
  shapes=("${CONTEXT:-1024} ${BATCH:-1}")
fi
# ROUNDS: cublas (default linear path), small_m (DSPARK_CUDA_GEMV=1), cuda_core_attn (cublas with
# the CUDA-core attention kernel: DSPARK_ATTENTION_MMA=0), vocab32k (cublas with a 32k draft
# vocabulary for the drafter: --draft-vocab), small_m_vocab32k (both), nopdl_vocab32k (vocab32k
# with programmatic dependent launch off: DSPARK_CUDA_PDL=0), nomerge_vocab32k (vocab32k with the
# attention's split merge in the separate combine kernel: DSPARK_ATTN_MERGE=0), blocking_vocab32k
# (vocab32k with --blocking-sync: CPU time per round and per phase), autotune_vocab32k (vocab32k
# with cuBLASLt plans autotuned over 16 candidates: DSPARK_LT_AUTOTUNE=16), noreduce_vocab32k
# (vocab32k without split-K reduce kernels: DSPARK_LT_REDUCTION_MASK=0), merge16_vocab32k
# (vocab32k with every attention tile merged by its last split CTA: DSPARK_ATTN_MERGE_ROWS=16),
# steps_vocab32k (vocab32k with one Markov launch per step instead of the whole-loop kernel:
# DSPARK_MARKOV_LOOP=0), fp8_vocab32k (vocab32k with the drafter's weights in FP8: --draft-fp8),
# fp8s2_vocab32k / fp8s4_vocab32k (fp8_vocab32k with the FP8 stream kernel, stages of 2 / 4
# chunks: DSPARK_FP8_STREAM=2 / 4; fp8t_vocab32k forces the tile kernel: DSPARK_FP8_STREAM=0;
# fp8x_vocab32k the x-in-registers kernel where K <= 4096 (the default since session 5):
# DSPARK_FP8_STREAM=x);
# a name containing "noearly" takes the previous attention path instead of the early variant
# (copies before the PDL wait; DSPARK_ATTN_DECODE=1), one containing "trace" adds --trace (CUPTI
# timeline per kernel, and the raw timeline as round_NAME_timeline.csv), one containing "blocking"
# --blocking-sync, one containing "nom1" cuBLASLt for the target's one-row linear calls instead of
# the one-row kernel (DSPARK_CUDA_GEMV_M1=0; that kernel is the default since session 7), one
# containing "gemvrows" the few-rows kernel for its verify steps (DSPARK_CUDA_GEMV_ROWS=1, opt-in),
# one containing "rowsxg" that kernel's x read from global memory (DSPARK_CUDA_GEMV_ROWS_X=global),
# one containing "rowsnN" that kernel for linears of N outputs or fewer only
# (DSPARK_CUDA_GEMV_ROWS_MAX_N=N), one containing "ltmaskN" (N in 0-7) cuBLASLt's split-K
# reduction schemes restricted to the mask N (DSPARK_LT_REDUCTION_MASK=N; 0: no split-K, 1: in
# place), one containing "ltpdl" programmatic edges into the captured cuBLASLt linears
# (DSPARK_LT_PDL=1: only with docs/experiments/2026-12-01-linear-pdl-probe.patch applied; a data
# race, session 11), one containing "streamk" the stream-K few-rows kernel for 1-48 rows
# (DSPARK_CUDA_GEMV_STREAMK=1) and one containing "nostreamk" cuBLASLt there instead
# (DSPARK_CUDA_GEMV_STREAMK=0), one containing "skstN" (N in 2-12) that kernel's pipeline stages
# (DSPARK_CUDA_GEMV_STREAMK_STAGES=N), one containing "sknN" that kernel for linears of N outputs
# or fewer only (DSPARK_CUDA_GEMV_STREAMK_MAX_N=N), one containing "sknopdl" that kernel launched
# without programmatic serialisation (DSPARK_CUDA_GEMV_STREAMK_PDL=0), one containing "arowsN" (N
# in 0, 1, 2, 4) the row-warp attention kernel off or with N key groups (DSPARK_ATTN_ROWS=N), one
# containing "arowstN" its tokens per CTA capped at N (DSPARK_ATTN_ROWS_TOKENS=N) and one
# containing "lnormN" (N in 0-8) the o and down projections' K split into N partial sums added by
# the norm kernel (DSPARK_LT_SPLIT_NORM=N; 0: cuBLASLt's GEMM, then add_rms_norm), one containing
# "ltat" cuBLASLt's plans autotuned over 16 candidates (DSPARK_LT_AUTOTUNE=16, as the autotune
# names above), one containing "plainlt" a plain launch for the kernel after each cuBLASLt GEMM
# (DSPARK_PDL_AFTER_LT=0, the default since session 16) and one containing "pdllt" a programmatic
# one there (DSPARK_PDL_AFTER_LT=1, the previous behaviour), and one containing "ncN" (N in 1, 2, 4,
# 8) add_rms_norm's one-pass kernel with N CTAs per row (DSPARK_NORM_CLUSTER=N; 1: one CTA per
# row, the kernel before session 17), one containing "prplain" a plain launch for qkv_prologue
# after the q/k/v GEMM too (DSPARK_PROLOGUE_PDL_AFTER_LT=0; by default it is programmatic since
# session 18), one containing "cvoff" the driver's shared-memory carveout for dspark's launches
# (DSPARK_SMEM_CARVEOUT=off, the default) and one containing "cvmax" the largest one
# (DSPARK_SMEM_CARVEOUT=100: session 18 measured the decode step 0.5 ms slower with it), and one
# containing "cvlt" the largest one for the first launch after each cuBLASLt GEMM only
# (DSPARK_SMEM_CARVEOUT=100 DSPARK_SMEM_CARVEOUT_AFTER_LT=1), and one containing "swpdl" SwiGLU
# as a programmatic dependent of the gate/up GEMM (DSPARK_SWIGLU_PDL_AFTER_LT=1), and one containing
# "m1hN" the one-row kernel in CTAs of 8 warps for linears of N outputs or fewer
# (DSPARK_CUDA_GEMV_M1_HALF_MAX_N=N).
for r in ${ROUNDS-small_m cublas}; do
  (
    export DSPARK_CUDA_GEMV=$([[ "$r" == small_m* ]] && echo 1 || echo 0)
    [ "$r" = cuda_core_attn ] && export DSPARK_ATTENTION_MMA=0
    [[ "$r" == nopdl* ]] && export DSPARK_CUDA_PDL=0
    [[ "$r" == nomerge* ]] && export DSPARK_ATTN_MERGE=0
    [[ "$r" == autotune* ]] && export DSPARK_LT_AUTOTUNE=16
    [[ "$r" == noreduce* ]] && export DSPARK_LT_REDUCTION_MASK=0
    [[ "$r" == merge16* ]] && export DSPARK_ATTN_MERGE_ROWS=16
    [[ "$r" == steps* ]] && export DSPARK_MARKOV_LOOP=0
    extra=()
    [[ "$r" == fp8* ]] && extra+=(--draft-fp8)
    [[ "$r" == fp8s2* ]] && export DSPARK_FP8_STREAM=2
    [[ "$r" == fp8s4* ]] && export DSPARK_FP8_STREAM=4
    [[ "$r" == fp8t_* ]] && export DSPARK_FP8_STREAM=0
    [[ "$r" == fp8x_* ]] && export DSPARK_FP8_STREAM=x
    [[ "$r" == *noearly* ]] && export DSPARK_ATTN_DECODE=1
    [[ "$r" == *nom1* ]] && export DSPARK_CUDA_GEMV_M1=0
    [[ "$r" == *gemvrows* ]] && export DSPARK_CUDA_GEMV_ROWS=1
    [[ "$r" == *ltpdl* ]] && export DSPARK_LT_PDL=1
    [[ "$r" == *rowsxg* ]] && export DSPARK_CUDA_GEMV_ROWS_X=global
    [[ "$r" =~ rowsn([0-9]+) ]] && export DSPARK_CUDA_GEMV_ROWS_MAX_N="${BASH_REMATCH[1]}"
    [[ "$r" =~ ltmask([0-7]) ]] && export DSPARK_LT_REDUCTION_MASK="${BASH_REMATCH[1]}"
    [[ "$r" == *streamk* ]] && export DSPARK_CUDA_GEMV_STREAMK=1
    [[ "$r" == *nostreamk* ]] && export DSPARK_CUDA_GEMV_STREAMK=0
    [[ "$r" =~ skst([0-9]+) ]] && export DSPARK_CUDA_GEMV_STREAMK_STAGES="${BASH_REMATCH[1]}"
    [[ "$r" =~ skn([0-9]+) ]] && export DSPARK_CUDA_GEMV_STREAMK_MAX_N="${BASH_REMATCH[1]}"
    [[ "$r" == *sknopdl* ]] && export DSPARK_CUDA_GEMV_STREAMK_PDL=0
    [[ "$r" =~ arows([0-4]) ]] && export DSPARK_ATTN_ROWS="${BASH_REMATCH[1]}"
    [[ "$r" =~ arowst([0-9]+) ]] && export DSPARK_ATTN_ROWS_TOKENS="${BASH_REMATCH[1]}"
    [[ "$r" =~ lnorm([0-8]) ]] && export DSPARK_LT_SPLIT_NORM="${BASH_REMATCH[1]}"
    [[ "$r" == *ltat* ]] && export DSPARK_LT_AUTOTUNE=16
    [[ "$r" == *plainlt* ]] && export DSPARK_PDL_AFTER_LT=0
    [[ "$r" == *pdllt* ]] && export DSPARK_PDL_AFTER_LT=1
    [[ "$r" =~ nc([1248]) ]] && export DSPARK_NORM_CLUSTER="${BASH_REMATCH[1]}"
    [[ "$r" == *prplain* ]] && export DSPARK_PROLOGUE_PDL_AFTER_LT=0
    [[ "$r" == *cvoff* ]] && export DSPARK_SMEM_CARVEOUT=off
    [[ "$r" == *cvmax* ]] && export DSPARK_SMEM_CARVEOUT=100
    [[ "$r" == *cvlt* ]] && export DSPARK_SMEM_CARVEOUT=100 DSPARK_SMEM_CARVEOUT_AFTER_LT=1
    [[ "$r" == *swpdl* ]] && export DSPARK_SWIGLU_PDL_AFTER_LT=1
    [[ "$r" =~ m1h([0-9]+) ]] && export DSPARK_CUDA_GEMV_M1_HALF_MAX_N="${BASH_REMATCH[1]}"
    [[ "$r" == *blocking* ]] && extra+=(--blocking-sync)
    [[ "$r" == *trace* ]] && extra+=(--trace --trace-timeline "$out/round_${r}_timeline.csv")
    if [[ "$r" == *vocab32k* ]]; then  # the drafter drafts over ids 0..32767 only (--draft-vocab)
      python3 -c "import json; json.dump(list(range(32768)), open('$models/vocab32k.json', 'w'))"
      extra+=(--draft-vocab "$models/vocab32k.json")
    fi
    for shape in "${shapes[@]}"; do
      read -r c b <<<"$shape"
      name="round_$r"
      [ -n "${GRID:-}" ] && name="round_${r}_c${c}_b${b}"
      run "${ROUND_TIMEOUT:-150}" "$name" "${round[@]}" --context "$c" --batch "$b" "${extra[@]}" \
        --json "$out/$name.json"
    done
  )
done
echo "session done ($(( $(date +%s) - t0 )) s)"
