#!/usr/bin/env bash
# The measurement of 2026-12-01-attention-cluster-splits.patch (apply it to 022ca04 first; session
# 11's call 5, refused for lack of device time; run in session 12, call 1: rejected, see the patch). The verify attention's split count (DSPARK_ATTN_SPLIT_CTAS, and
# clusters past the portable 8 with DSPARK_ATTN_CLUSTER_SPLITS=16): bench_attention at 1k / 4k x
# 1 / 17 with 7, 8, 9 and 12 splits, then ctest -L cuda (default) and the attention and golden
# tests with 9-split clusters. Logs in $OUT/r.tgz; about 200 s with the machine's start.
cd "$(dirname "$0")/../.."
t0=$(date +%s)
mkdir -p $OUT/r
snap() { (cd $OUT && tar czf r.tgz r); }
timeout 100 env SKIP_ROUND=1 SKIP_LINEAR=1 CTEST_ARGS="-R CudaAttention.NoSuchTest" \
  OUT=$OUT/r bash scripts/gpu_small_m.sh > $OUT/r/main.log 2>&1
echo "build rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/main.log
export LD_LIBRARY_PATH="$PWD/build-gpu/deps-root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
b=build-gpu/bin/bench_attention
for v in "def:" "s8:DSPARK_ATTN_SPLIT_CTAS=320" "s9:DSPARK_ATTN_SPLIT_CTAS=360 DSPARK_ATTN_CLUSTER_SPLITS=16" \
         "s12:DSPARK_ATTN_SPLIT_CTAS=480 DSPARK_ATTN_CLUSTER_SPLITS=16"; do
  n=${v%%:*}; e=${v#*:}
  timeout 25 env $e $b --contexts 1024,4096 --queries 1,17 --json $OUT/r/attn_$n.json > $OUT/r/attn_$n.log 2>&1
  echo "attn $n rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/main.log; snap
done
timeout 70 ctest --test-dir build-gpu -L cuda --output-on-failure --timeout 60 -j 8 > $OUT/r/ctest_default.log 2>&1
echo "ctest default rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/main.log; snap
timeout 40 env DSPARK_ATTN_SPLIT_CTAS=360 DSPARK_ATTN_CLUSTER_SPLITS=16 ctest --test-dir build-gpu -L cuda \
  -R "Attention|Golden" --output-on-failure --timeout 35 -j 4 > $OUT/r/ctest_s9.log 2>&1
echo "ctest s9 rc=$? $(( $(date +%s) - t0 )) s" >> $OUT/r/main.log
cd $OUT && tar czf r.tgz r && rm -rf r
