#!/usr/bin/env bash
# Installs the Debian packages dspark needs to build and test, skipping those already present.
# Used by `make run` and `make test`; safe to run repeatedly.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config python3 xz-utils
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev libopenblas-dev liblzma-dev
  nlohmann-json3-dev libfmt-dev libcli11-dev libcpp-httplib-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc not found: building without the CUDA backend (CPU only)"
fi

# The default target model (SmolLM2-135M-Instruct Q4_1 GGUF) into models/ when missing.
bash "$(dirname "${BASH_SOURCE[0]}")/fetch_default_model.sh"
