#!/usr/bin/env python3
"""MLX affine-quantized fixtures for tests/unit/mlx_quant_test.cpp and mlx_model_test.cpp.

Writes, with NumPy only (the packing done here independently of dspark's C++):
  tests/data/mlx/unpack.safetensors: for bits in {2, 3, 4, 5, 6, 8} x group_size in
    {32, 64, 128} a random MLX-quantized tensor `b{B}_g{G}` (.weight U32, .scales / .biases in
    bf16, f16 or f32) and `.expected`, NumPy's f32 dequantization scales * q + biases; plus `b4_g64_inexact` and
    `b8_g64_inexact`, whose bf16 scales do not convert to f16 exactly (too small for f16).
  tests/data/mlx/llama3_q4_g32/, llama3_q4_g64/, llama3_q8_g64/: the tiny golden Llama 3
    (tests/data/models/llama3) quantized as mlx-lm does (every projection, embed_tokens and
    lm_head; per group scale = (max - min) / (2^B - 1), bias = min, both stored in bf16,
    q = round((w - bias) / scale) clipped), config.json with "quantization". The 4-bit g32 one has
    per-module entries: layer 0's o_proj not quantized (stored f32), layer 3's down_proj in
    8 bits. Modules whose inputs are not a multiple of the group (down_proj: 160) get groups of 32
    through a per-module entry.
  tests/data/mlx/llama3_q3_g64/: the same in 3 bits, groups of 64, with layer 1's down_proj in 5
    bits and layer 2's in 6 (groups of 32), layer 3's o_proj in 2 bits.

Run from the repository root: python3 tools/mlx/make_mlx_fixtures.py
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "mlx")
SRC = os.path.join(ROOT, "tests", "data", "models", "llama3")

# Safetensors dtype -> (NumPy type of the stored bits, bytes); F8_E4M3 for
# tools/fp8/make_fp8_fixtures.py, which writes through write_safetensors below.
DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2),
          "U32": (np.uint32, 4), "I32": (np.int32, 4), "F8_E4M3": (np.uint8, 1)}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype=np.float32).reshape(info["shape"])
    return out


def write_safetensors(path, tensors):
    """tensors: name -> (dtype name, numpy array of the stored bits)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        raw = np.ascontiguousarray(arr.astype(DTYPES[dtype][0])).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16; returns (uint16 bits, the f32 values they hold)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def pack(q, bits):
    """q: uint32 [rows, cols] values < 2^bits -> U32 words [rows, cols * bits / 32]: each row a
    little-endian stream of `bits`-bit values, value i in stream bits [bits * i, bits * (i + 1)).
    For bits 2, 4 and 8 that is value j of a word in its bits [bits * j, bits * (j + 1)); for 3, 5
    and 6 values cross bytes as MLX's extract_bits reads them (8 values in 3 or 5 bytes, 4 in 3)."""
    rows, cols = q.shape
    assert cols * bits % 32 == 0
    planes = (q.astype(np.uint32)[:, :, None] >> np.arange(bits, dtype=np.uint32)) & 1
    stream = np.packbits(planes.reshape(rows, cols * bits).astype(np.uint8), axis=1,
                         bitorder="little")
    return np.ascontiguousarray(stream).view("<u4").reshape(rows, cols * bits // 32)


def dequantize(q, scales, biases, group):
    """NumPy's f32 reference: scales * q + biases, one rounding per operation."""
    rows, cols = q.shape
    s = np.repeat(scales.astype(np.float32), group, axis=1)
    b = np.repeat(biases.astype(np.float32), group, axis=1)
    return (s * q.astype(np.float32)).astype(np.float32) + b


def store_float(values, dtype):
    """(safetensors dtype, stored array, the f32 values it holds) of `values` in `dtype`."""
    if dtype == "BF16":
        bits, held = bf16_bits(values)
        return dtype, bits, held
    if dtype == "F16":
        h = values.astype(np.float16)
        return dtype, h, h.astype(np.float32)
    f = values.astype(np.float32)
    return dtype, f, f


def add_inexact(tensors, rng, bits):
    """`b{bits}_g64_inexact`: bf16 scales too small for f16 (4 rows of 128 values)."""
    rows, cols, group = 4, 128, 64
    q = rng.integers(0, 2 ** bits, size=(rows, cols), dtype=np.uint32)
    s_bits, s_f = bf16_bits(rng.uniform(1e-9, 2e-9, size=(rows, cols // group)))
    b_bits, b_f = bf16_bits(rng.uniform(-0.5, 0.5, size=(rows, cols // group)))
    name = f"b{bits}_g64_inexact"
    tensors[name + ".weight"] = ("U32", pack(q, bits))
    tensors[name + ".scales"] = ("BF16", s_bits)
    tensors[name + ".biases"] = ("BF16", b_bits)
    tensors[name + ".expected"] = ("F32", dequantize(q, s_f, b_f, group))


def add_random(tensors, rng, cases):
    """`b{bits}_g{group}` for each (bits, group) of `cases`: 6 rows of 256 random codes, scales
    and biases that f16 holds exactly (F32 ones too, so 4-bit ones repack to Q4_1), stored in
    bf16, f16 and f32 in turn."""
    for i, (bits, group) in enumerate(cases):
        rows, cols = 6, 256
        q = rng.integers(0, 2 ** bits, size=(rows, cols), dtype=np.uint32)
        dtype = ["BF16", "F16", "F32"][i % 3]
        scales = rng.uniform(1e-3, 0.05, size=(rows, cols // group)).astype(np.float16)
        biases = rng.uniform(-0.5, 0.5, size=(rows, cols // group)).astype(np.float16)
        sd, s_arr, s_f = store_float(scales.astype(np.float32), dtype)
        bd, b_arr, b_f = store_float(biases.astype(np.float32), dtype)
        name = f"b{bits}_g{group}"
        tensors[name + ".weight"] = ("U32", pack(q, bits))
        tensors[name + ".scales"] = (sd, s_arr)
        tensors[name + ".biases"] = (bd, b_arr)
        tensors[name + ".expected"] = ("F32", dequantize(q, s_f, b_f, group))


def make_unpack(rng):
    tensors = {}
    add_random(tensors, rng, [(b, g) for b in (4, 8) for g in (32, 64, 128)])
    # bf16 scales below f16's range: the Q4_1 / Q8_A repacks must refuse them. The 8-bit one has
    # its own generator, so that the tensors above keep their values.
    add_inexact(tensors, rng, 4)
    add_inexact(tensors, np.random.default_rng(358), 8)
    # Bits 2, 3, 5 and 6 (3, 5, 6: values across bytes), from their own generator.
    add_random(tensors, np.random.default_rng(36),
               [(b, g) for b in (2, 3, 5, 6) for g in (32, 64, 128)])
    write_safetensors(os.path.join(OUT, "unpack.safetensors"), tensors)


def quantize(w, bits, group):
    """mlx-lm's affine scheme as the task states it; returns (q, scale bits, bias bits)."""
    rows, cols = w.shape
    g = w.astype(np.float32).reshape(rows, cols // group, group)
    lo, hi = g.min(axis=-1), g.max(axis=-1)
    scale = (hi - lo) / np.float32(2 ** bits - 1)
    scale = np.where(scale == 0, np.float32(1), scale)
    s_bits, s_f = bf16_bits(scale)
    b_bits, b_f = bf16_bits(lo)
    q = np.rint((g - b_f[..., None]) / s_f[..., None])
    q = np.clip(q, 0, 2 ** bits - 1).astype(np.uint32).reshape(rows, cols)
    return q, s_bits, b_bits


def write_checkpoint(out, config, tensors):
    """A checkpoint directory: model.safetensors (see write_safetensors) and config.json."""
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def make_model(name, bits, group, modules):
    weights = read_safetensors(os.path.join(SRC, "model.safetensors"))
    with open(os.path.join(SRC, "config.json")) as f:
        config = json.load(f)
    tensors = {}
    for key, w in weights.items():
        module = key[: -len(".weight")] if key.endswith(".weight") else None
        spec = modules.get(module, {"bits": bits, "group_size": group})
        if w.ndim != 2 or module is None or spec is False:
            tensors[key] = ("F32", w)
            continue
        if w.shape[1] % spec["group_size"] != 0:  # down_proj's 160 inputs: groups of 32
            spec = modules[module] = {"group_size": 32, "bits": spec["bits"]}
        q, s, b = quantize(w, spec["bits"], spec["group_size"])
        tensors[key] = ("U32", pack(q, spec["bits"]))
        tensors[module + ".scales"] = ("BF16", s)
        tensors[module + ".biases"] = ("BF16", b)
    quant = {"group_size": group, "bits": bits, "mode": "affine"}
    quant.update(modules)
    config["quantization"] = quant
    config["quantization_config"] = quant
    write_checkpoint(os.path.join(OUT, name), config, tensors)


def main():
    os.makedirs(OUT, exist_ok=True)
    make_unpack(np.random.default_rng(35))
    make_model("llama3_q4_g32", 4, 32, {
        "model.layers.0.self_attn.o_proj": False,
        "model.layers.3.mlp.down_proj": {"group_size": 32, "bits": 8},
    })
    make_model("llama3_q8_g64", 8, 64, {})
    make_model("llama3_q4_g64", 4, 64, {})
    make_model("llama3_q3_g64", 3, 64, {
        "model.layers.1.mlp.down_proj": {"group_size": 32, "bits": 5},
        "model.layers.2.mlp.down_proj": {"group_size": 32, "bits": 6},
        "model.layers.3.self_attn.o_proj": {"group_size": 64, "bits": 2},
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
