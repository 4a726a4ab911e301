# Sourced by the GPU-machine session scripts (gpu_session.sh, gpu_diag.sh, gpu_small_m.sh): sets
# `repo` (and cds there), `out` ($OUT, or gpu-session-logs), `t0`, and defines
#   run SECONDS NAME CMD...   a time-boxed step: log in $out/NAME.log, its last ${TAIL:-14}
#                             non-JSON lines and the exit status echoed.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="${OUT:-$repo/gpu-session-logs}"
mkdir -p "$out"
t0=$(date +%s)

run() {  # seconds name cmd...
  local limit=$1 name=$2
  shift 2
  echo "== $name ($(( $(date +%s) - t0 )) s): $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -v '^{' "$out/$name.log" | tail -n "${TAIL:-14}"
  echo "(exit $rc)"
}
