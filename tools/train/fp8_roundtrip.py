#!/usr/bin/env python3
"""Writes a copy of a DSpark / DFlash drafter whose projection weights went through FP8 (E4M3)
and back to bf16, with one scale per output row (absmax / 448): what a drafter stored in FP8 and
dequantized in its GEMMs (weights in 8 bits, activations in 16) would compute. Evaluating the copy
with `dspark regen --draft OUT` against the original measures what FP8 weights cost in acceptance
(`git show ae46487:docs/perf-notes.md`, "FP8 drafter weights: acceptance").

    python3 tools/train/fp8_roundtrip.py SRC_DRAFTER OUT_DIR [--no-markov]

Every 2-D `*_proj.weight`, `fc.weight` and (unless --no-markov) the Markov head's tables are
rounded; norms and the confidence head stay as they are. Other files of SRC are copied.
"""
import argparse
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

E4M3_MAX = 448.0


def roundtrip(t: torch.Tensor) -> torch.Tensor:
    x = t.float()
    scale = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3_MAX
    return ((x / scale).to(torch.float8_e4m3fn).float() * scale).to(t.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--no-markov", action="store_true", help="keep the Markov head in 16 bits")
    a = ap.parse_args()
    weights = load_file(os.path.join(a.src, "model.safetensors"))
    out, errors = {}, []
    for name, t in weights.items():
        pick = name.endswith("_proj.weight") or name == "fc.weight" or (
            not a.no_markov and name.startswith("markov_head."))
        if pick and t.dim() == 2 and t.shape[0] > 1:
            out[name] = roundtrip(t)
            errors.append(float((out[name].float() - t.float()).norm() / t.float().norm()))
        else:
            out[name] = t
    if not errors:
        raise SystemExit(f"{a.src}: no projection weights found")
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.src):
        if f != "model.safetensors" and os.path.isfile(os.path.join(a.src, f)):
            shutil.copy(os.path.join(a.src, f), a.out)
    save_file(out, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    print(f"{len(errors)} tensors through E4M3: relative error mean {sum(errors) / len(errors):.4f}, "
          f"max {max(errors):.4f} -> {a.out}")


if __name__ == "__main__":
    main()
