#!/usr/bin/env python3
"""FP8 (block-scaled E4M3) fixtures for tests/unit/fp8_checkpoint_test.cpp.

Writes, with NumPy only (the E4M3 rounding and the reference dequantization are done here,
independently of dspark's C++; safetensors I/O and the bf16 rounding are
tools/mlx/make_mlx_fixtures.py's):
  tests/data/fp8/dequant.safetensors: random F8_E4M3 tensors `b{BN}x{BK}_{scale dtype}` with their
    `.weight_scale_inv` (blocks of BN x BK, the last row and column blocks partial; scales in bf16,
    f16 or f32) and `.expected`, NumPy's f32 e4m3(code) * scale; plus the tensors of the error
    tests: `no_scale.weight` (no scales), `bad_scale.weight` (scales of the wrong shape for blocks
    of 16 x 16), `kept.weight` (F8_E4M3 in a module the test keeps in floats) and `not_a_weight`.
  tests/data/fp8/llama3_fp8/: the tiny golden Llama 3 (tests/data/models/llama3) as Hugging Face
    FP8 checkpoints are published: every projection F8_E4M3 with f32 `weight_scale_inv` for blocks
    of 128 x 128 (this model's dims, 32 to 160, make the last block of every row partial, K = 64
    or 160, and gate/up's second row block partial, N = 160); embed_tokens, lm_head and the norms in bf16; layer 0's o_proj kept in
    bf16 through modules_to_not_convert (with lm_head). Per block scale = max |w| / 448 (1 for an
    all-zero block), code = e4m3(w / scale) rounded to nearest, ties to even, saturated.
  tests/data/fp8/llama3_fp8_twin/: the same checkpoint dequantized by NumPy: the FP8 projections
    as f32 e4m3(code) * scale, every other tensor as stored (bf16); config.json without
    quantization_config.

Run from the repository root: python3 tools/fp8/make_fp8_fixtures.py
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mlx"))
from make_mlx_fixtures import (bf16_bits, read_safetensors, store_float,  # noqa: E402
                               write_checkpoint, write_safetensors)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "fp8")
SRC = os.path.join(ROOT, "tests", "data", "models", "llama3")

NOT_CONVERTED = ["lm_head", "model.layers.0.self_attn.o_proj"]


def e4m3_values():
    """The f32 value of each of the 256 E4M3 codes (NaN for 0x7F and 0xFF)."""
    c = np.arange(256)
    e, m = (c >> 3) & 15, (c & 7).astype(np.float64)
    mag = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    mag[(e == 15) & (m == 7)] = np.nan
    return np.where(c & 0x80, -mag, mag).astype(np.float32)


VALUES = e4m3_values()


def to_e4m3(x):
    """E4M3 codes of f32 x: the nearest of the 127 non-negative finite values (ties to the even
    code, i.e. an even mantissa), saturated to 448, with the sign bit of x."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x).astype(np.float64)
    grid = VALUES[:0x7F].astype(np.float64)  # codes 0..126, increasing
    hi = np.clip(np.searchsorted(grid, a, side="left"), 1, 0x7E)
    lo = hi - 1
    d_lo, d_hi = a - grid[lo], grid[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo)
    code = np.where(a >= 448.0, 0x7E, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def dequantize(codes, scales, bn, bk):
    """NumPy's f32 reference: e4m3(code) * scale of the code's block, one rounding."""
    n, k = codes.shape
    s = np.repeat(np.repeat(scales.astype(np.float32), bn, axis=0), bk, axis=1)[:n, :k]
    return (VALUES[codes] * s).astype(np.float32)


def blocks_of(n, k, bn, bk):
    return -(-n // bn), -(-k // bk)


def make_dequant(rng):
    finite = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
    tensors = {}
    for n, k, bn, bk, dtype in [(40, 56, 16, 24, "BF16"), (136, 20, 128, 128, "F16"),
                                (33, 40, 32, 16, "F32")]:
        codes = rng.choice(finite, size=(n, k))
        sd, s_arr, s_f = store_float(rng.uniform(1e-4, 1e-2, size=blocks_of(n, k, bn, bk)), dtype)
        name = f"b{bn}x{bk}_{dtype.lower()}"
        tensors[name + ".weight"] = ("F8_E4M3", codes)
        tensors[name + ".weight_scale_inv"] = (sd, s_arr)
        tensors[name + ".expected"] = ("F32", dequantize(codes, s_f, bn, bk))
    small = rng.choice(finite, size=(20, 20))
    tensors["no_scale.weight"] = ("F8_E4M3", small)
    tensors["bad_scale.weight"] = ("F8_E4M3", small)
    tensors["bad_scale.weight_scale_inv"] = ("F32", np.ones((1, 2), dtype=np.float32))
    tensors["kept.weight"] = ("F8_E4M3", small)
    tensors["kept.weight_scale_inv"] = ("F32", np.ones((2, 2), dtype=np.float32))
    tensors["not_a_weight"] = ("F8_E4M3", small)
    write_safetensors(os.path.join(OUT, "dequant.safetensors"), tensors)


def quantize(w, bn, bk):
    """Per block scale = max |w| / 448 (1 for an all-zero block), codes = e4m3(w / scale)."""
    n, k = w.shape
    rows, cols = blocks_of(n, k, bn, bk)
    scales = np.ones((rows, cols), dtype=np.float32)
    codes = np.zeros((n, k), dtype=np.uint8)
    for i in range(rows):
        for j in range(cols):
            block = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk].astype(np.float32)
            amax = np.float32(np.abs(block).max())
            s = amax / np.float32(448) if amax > 0 else np.float32(1)
            scales[i, j] = s
            codes[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk] = to_e4m3(block / s)
    return codes, scales


def is_converted(key, w):
    module = key[: -len(".weight")]
    return (w.ndim == 2 and key.endswith(".weight") and "embed_tokens" not in key
            and module not in NOT_CONVERTED)


def make_model():
    weights = read_safetensors(os.path.join(SRC, "model.safetensors"))
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    bn = bk = 128
    fp8, twin = {}, {}
    for key, w in weights.items():
        if not is_converted(key, w):
            bits, _ = bf16_bits(w)
            fp8[key] = twin[key] = ("BF16", bits)
            continue
        codes, scales = quantize(w, bn, bk)
        fp8[key] = ("F8_E4M3", codes)
        fp8[key + "_scale_inv"] = ("F32", scales)
        twin[key] = ("F32", dequantize(codes, scales, bn, bk))
    write_checkpoint(os.path.join(OUT, "llama3_fp8_twin"), config, twin)
    config = dict(config)
    config["quantization_config"] = {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [bn, bk], "modules_to_not_convert": NOT_CONVERTED}
    write_checkpoint(os.path.join(OUT, "llama3_fp8"), config, fp8)


def main():
    os.makedirs(OUT, exist_ok=True)
    make_dequant(np.random.default_rng(35))
    make_model()
    return 0


if __name__ == "__main__":
    sys.exit(main())
