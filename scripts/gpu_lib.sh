# Sourced by the GPU-machine session scripts (gpu_session.sh, gpu_diag.sh, gpu_small_m.sh): sets
# `repo` (and cds there), `out` ($OUT, or gpu-session-logs), `t0`, packs $out at exit when it
# holds more than 8 files (pack_out), and defines
#   run SECONDS NAME CMD...   a time-boxed step: log in $out/NAME.log, its last ${TAIL:-14}
#                             non-JSON lines and the exit status echoed;
#   random_checkpoints DIR SHAPE...  random-weight checkpoints for the benchmarks.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="${OUT:-$repo/gpu-session-logs}"
mkdir -p "$out"
t0=$(date +%s)

# The device tool returns at most 8 files from $OUT, counting those in subfolders: when a session
# leaves more under $out (subfolders included), everything but earlier archives is packed into one
# gpu-out-PID.tar.gz at exit (unpack with `tar xzf`), so that no log or JSON is dropped (a nested
# session script packs its own folder first).
pack_out() {
  local n
  n=$(find "$out" -type f | wc -l)
  if [ "$n" -gt 8 ]; then
    (cd "$out" && find . -type f ! -name 'gpu-out-*.tar.gz' -printf '%P\n' |
      tar czf "gpu-out-$$.tar.gz" -T - --remove-files) &&
      find "$out" -mindepth 1 -type d -empty -delete &&
      echo "packed the files of $out into gpu-out-$$.tar.gz"
  fi
}
trap pack_out EXIT

# random_checkpoints DIR SHAPE...: tools/synth's random-weight checkpoints (with the Qwen3
# tokenizer) in DIR/SHAPE, each written once per machine; prints synth's summary line.
random_checkpoints() {
  local dir=$1 s
  shift
  mkdir -p "$dir/tok"
  [ -f "$dir/tok/tokenizer.json" ] || python3 -c "import lzma; open('$dir/tok/tokenizer.json', 'wb').write(lzma.open('tests/data/tokenizers/qwen3/tokenizer.json.xz').read())"
  for s in "$@"; do
    [ -f "$dir/$s/config.json" ] || timeout 200 python3 tools/synth/make_random_checkpoint.py \
      --shape "$s" --out "$dir/$s" --tokenizer "$dir/tok" 2>&1 | tail -n 1
  done
}

run() {  # seconds name cmd...
  local limit=$1 name=$2
  shift 2
  echo "== $name ($(( $(date +%s) - t0 )) s): $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -v '^{' "$out/$name.log" | tail -n "${TAIL:-14}"
  echo "(exit $rc)"
}
