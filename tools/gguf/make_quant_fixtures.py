#!/usr/bin/env python3
"""Block-format fixtures for tests/unit/quant_format_test.cpp: for every block type of
core/quant.h, random blocks and the `gguf` package's dequantization of them (gguf.quants, the
Python reference that ships with llama.cpp), so that dspark's dequantize_blocks is checked bit for
bit against a reference that is not our C++.

    pip install gguf numpy
    python3 tools/gguf/make_quant_fixtures.py          # writes tests/data/quant/*

Per type T (q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k q6_k), into tests/data/quant/:
  T.blocks   the raw blocks, back to back (n_blocks * block bytes)
  T.f32      gguf.quants.dequantize(blocks, T): n_blocks * block values, little-endian f32
Every byte of a block is uniformly random except the f16 scales (d, dmin, m of the legacy
types), which are finite: mostly of magnitude 1e-4 .. 1 with a random sign, plus a few blocks
with scale 0, a subnormal scale, the largest finite f16 and 1.0 (no NaN, no inf). The quant
bits of the first blocks are forced to all-zero and all-one patterns. SOURCE.md records the
package versions.
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "quant")

# name -> (gguf type, offsets of the f16 scale fields within a block, blocks written)
TYPES = {
    "q4_0": (Q.Q4_0, [0], 40),
    "q4_1": (Q.Q4_1, [0, 2], 40),
    "q5_0": (Q.Q5_0, [0], 40),
    "q5_1": (Q.Q5_1, [0, 2], 40),
    "q8_0": (Q.Q8_0, [0], 40),
    "q4_k": (Q.Q4_K, [0, 2], 20),
    "q5_k": (Q.Q5_K, [0, 2], 20),
    "q6_k": (Q.Q6_K, [208], 20),
}

# Special f16 scale values placed in the first blocks: 0, -0, the smallest subnormal, a
# subnormal, the smallest normal, 1, the largest finite f16.
SPECIAL = np.array([0.0, -0.0, 2.0**-24, 1.5 * 2.0**-20, 2.0**-14, 1.0, 65504.0], dtype=np.float16)


def random_scales(rng, count):
    mag = 10.0 ** rng.uniform(-4.0, 0.0, size=count)
    sign = np.where(rng.random(count) < 0.5, -1.0, 1.0)
    s = (mag * sign).astype(np.float16)
    assert np.all(np.isfinite(s))
    return s


def make_blocks(rng, qtype, scale_offsets, n_blocks):
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    # Quant-bit patterns: block 0 all zero bits, block 1 all one bits (scales are set below).
    blocks[0, :] = 0
    blocks[1, :] = 0xFF
    for off in scale_offsets:
        s = random_scales(rng, n_blocks)
        s[2 : 2 + len(SPECIAL)] = SPECIAL if off == scale_offsets[0] else SPECIAL[::-1]
        blocks[:, off : off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
    return blocks, block_values


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261203)
    lines = []
    total = 0
    for name, (qtype, scale_offsets, n_blocks) in TYPES.items():
        blocks, block_values = make_blocks(rng, qtype, scale_offsets, n_blocks)
        values = gguf.quants.dequantize(blocks.reshape(-1), qtype).astype("<f4")
        assert values.shape == (n_blocks * block_values,), values.shape
        assert np.all(np.isfinite(values)), name
        with open(os.path.join(OUT, f"{name}.blocks"), "wb") as f:
            f.write(blocks.tobytes())
        with open(os.path.join(OUT, f"{name}.f32"), "wb") as f:
            f.write(values.tobytes())
        size = blocks.nbytes + values.nbytes
        total += size
        lines.append(f"| {name} | {n_blocks} | {blocks.shape[1]} | {block_values} | {size} |")
    version = getattr(gguf, "__version__", None)
    if version is None:
        from importlib.metadata import version as pkg_version

        version = pkg_version("gguf")
    with open(os.path.join(OUT, "SOURCE.md"), "w") as f:
        f.write(
            "# Block-format fixtures (tests/unit/quant_format_test.cpp)\n\n"
            "Written by `python3 tools/gguf/make_quant_fixtures.py` (see its docstring) with the\n"
            f"`gguf` package {version} and numpy {np.__version__} (PyPI), seed 20261203.\n\n"
            "`T.blocks`: random blocks of type T back to back (finite f16 scales: random\n"
            "magnitudes 1e-4..1 of either sign, plus 0, -0, subnormals, 1 and 65504 in blocks 2-8;\n"
            "block 0 all-zero quant bits, block 1 all-one). `T.f32`: `gguf.quants.dequantize` of\n"
            "them, little-endian f32.\n\n"
            "| type | blocks | bytes/block | values/block | file bytes |\n"
            "|---|---|---|---|---|\n" + "\n".join(lines) + f"\n\nTotal {total} bytes.\n"
        )
    print(f"wrote {len(TYPES)} types, {total} bytes, into {OUT} (gguf {version})")


if __name__ == "__main__":
    main()
