#!/usr/bin/env python3
"""Prints one metadata value of a GGUF file (our own minimal reader of the GGUF header, so that the
training pipeline needs no extra package on the GPU machine).

    python3 tools/train/gguf_meta.py MODEL.gguf tokenizer.chat_template > chat_template.jinja
    python3 tools/train/gguf_meta.py MODEL.gguf llama.block_count
    python3 tools/train/gguf_meta.py MODEL.gguf --list           # keys (arrays summarised)

A key that ends with `.block_count` may be given as `*.block_count` (the architecture prefix is
looked up from general.architecture). Exit status 1 when the key is absent.
"""

from __future__ import annotations

import struct
import sys

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}


class Reader:
    def __init__(self, f):
        self.f = f

    def read(self, fmt):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.f.read(size))[0]

    def string(self):
        n = self.read("<Q")
        return self.f.read(n).decode("utf-8", errors="replace")

    def value(self, vtype, keep=True):
        if vtype in _SCALARS:
            return self.read(_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            itype, n = self.read("<I"), self.read("<Q")
            items = [self.value(itype, keep) for _ in range(n)]
            return items if keep else f"<array of {n}>"
        raise ValueError(f"unknown GGUF value type {vtype}")


def read_metadata(path: str, want=None) -> dict:
    out = {}
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        r = Reader(f)
        version = r.read("<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        r.read("<Q")  # tensors
        n_kv = r.read("<Q")
        for _ in range(n_kv):
            key = r.string()
            vtype = r.read("<I")
            keep = want is None or key in want
            out[key] = r.value(vtype, keep)
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, key = sys.argv[1], sys.argv[2]
    if key == "--list":
        meta = read_metadata(path, want=set())
        for k, v in meta.items():
            print(f"{k} = {v if not isinstance(v, str) or len(v) < 80 else v[:80] + '...'}")
        return 0
    meta = read_metadata(path, want={key, "general.architecture"})
    if key.startswith("*."):
        key = f"{meta.get('general.architecture', '')}.{key[2:]}"
        meta = read_metadata(path, want={key})
    if key not in meta:
        print(f"{path}: no metadata key {key}", file=sys.stderr)
        return 1
    v = meta[key]
    sys.stdout.write(v if isinstance(v, str) else str(v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
