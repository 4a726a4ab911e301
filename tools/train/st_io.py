"""Minimal safetensors reader / writer on numpy + torch (our own, so that the training pipeline
needs nothing beyond torch and numpy on the GPU machine). Format: 8-byte little-endian header
length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}, then the raw little-endian tensor bytes."""

from __future__ import annotations

import json
import struct

import numpy as np
import torch

_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I32": np.int32, "I64": np.int64,
       "U8": np.uint8, "I8": np.int8, "BOOL": np.uint8, "F64": np.float64}
_TORCH_NAME = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8", torch.int8: "I8",
               torch.float64: "F64", torch.bool: "BOOL"}


def read(path: str, names=None) -> tuple:
    """({name: torch tensor}, metadata) for all tensors (or those in `names`)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, e in header.items():
        if names is not None and name not in names:
            continue
        b, end = e["data_offsets"]
        arr = np.array(raw[b:end]).view(_NP[e["dtype"]]).reshape(e["shape"])
        t = torch.from_numpy(arr)
        if e["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        elif e["dtype"] == "BOOL":
            t = t.bool()
        out[name] = t
    return out, meta


def keys(path: str) -> list:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return [k for k in header if k != "__metadata__"]


def write(path: str, tensors: dict, metadata: dict | None = None) -> None:
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        data = (t.view(torch.uint16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _TORCH_NAME[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
