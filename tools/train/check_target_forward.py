#!/usr/bin/env python3
"""Parity check of tools/train/target_forward.py against dspark: `dspark regen` generates a few
responses on the CPU and stores the taps and final hidden states of every token in f32
(--hidden-dtype f32) together with every target weight (--all-target-weights); the PyTorch forward
then recomputes them from those weights for the same tokens (several sequences per batch,
right-padded) and both are compared. Exit 1 when a relative RMS error exceeds --tol.

    python3 tools/train/check_target_forward.py --dspark build/bin/dspark \
        --model tests/data/models/qwen3 [more targets] [--taps -1,0,1,2,3] [--tol 1e-4]

Relative RMS error of a tap = ||torch - dspark||_2 / ||dspark||_2 over all tokens (one figure
per tap, and for the final hidden state); the maximum absolute error relative to the largest
value is printed too.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st_io  # noqa: E402
from target_forward import TargetModel  # noqa: E402

PROMPTS = [
    "Explain recursion to a beginner.",
    "What is 17 times 23? Show your work.",
    "Write a haiku about the sea.",
    "Summarize the purpose of a hash table in two sentences.",
    "Give me 3 tips for writing clean code.",
    "Beautiful is better than ugly.",
]


def load_shards(d: str) -> tuple:
    seqs, taps, final = [], [], []
    for path in sorted(glob.glob(os.path.join(d, "shard_*.safetensors"))):
        f, _ = st_io.read(path)
        off = f["seq_offsets"].long().tolist()
        for s in range(len(off) - 1):
            a, b = off[s], off[s + 1]
            seqs.append(f["tokens"][a:b].long())
            taps.append(f["taps"][a:b].float())
            final.append(f["final_hidden"][a:b].float())
    return seqs, taps, final


def rel(a: torch.Tensor, b: torch.Tensor) -> tuple:
    a, b = a.double(), b.double()
    return (float((a - b).norm() / b.norm().clamp(min=1e-30)),
            float((a - b).abs().max() / b.abs().max().clamp(min=1e-30)))


def check(args, model_path: str, tmp: str) -> bool:
    """Regen + PyTorch forward + comparison for one target; prints one line per tap."""
    out = args.keep or os.path.join(tmp, "regen")
    prompts = os.path.join(tmp, "prompts.jsonl")
    with open(prompts, "w", encoding="utf-8") as f:
        for i, p in enumerate(PROMPTS[: args.prompts]):
            f.write(json.dumps({"id": f"p{i}", "prompt": p}) + "\n")
    taps = args.taps
    if not taps:  # the embedding and every layer output
        info = subprocess.run([args.dspark, "regen", "-m", model_path, "--prompts", prompts,
                               "--out", out, "-n", "1", "--limit", "1", "--taps", "none"],
                              capture_output=True, text=True)
        if info.returncode != 0:
            sys.exit(f"dspark regen failed: {info.stderr}")
        with open(os.path.join(out, "meta.json"), encoding="utf-8") as f:
            n_layers = json.load(f)["num_layers"]
        taps = ",".join(str(l) for l in range(-1, n_layers))
    cmd = [args.dspark, "regen", "-m", model_path, "--prompts", prompts, "--out", out,
           "-n", str(args.max_tokens), "--batch", "4", "--taps", taps,
           "--hidden-dtype", "f32", "--all-target-weights", "--device", args.device]
    if args.chat:
        cmd.append("--chat")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"dspark regen failed ({' '.join(cmd)}): {r.stderr}")
    seqs, ref_taps, ref_final = load_shards(out)
    tap_layers = [int(t) for t in taps.split(",")]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}.get(args.torch_dtype)
    model = TargetModel(os.path.join(out, "target_weights.safetensors"), args.device, dtype)
    got_taps, got_final = [], []
    for i in range(0, len(seqs), args.batch):
        group = seqs[i: i + args.batch]
        n = max(len(s) for s in group)
        toks = torch.zeros(len(group), n, dtype=torch.long)
        for j, s in enumerate(group):
            toks[j, : len(s)] = s
        t, fin = model.hidden(toks, tap_layers)
        for j, s in enumerate(group):
            got_taps.append(t[j, : len(s)].float().cpu())
            got_final.append(fin[j, : len(s)].float().cpu())
    n_tokens = sum(len(s) for s in seqs)
    a, b = torch.cat(got_taps), torch.cat(ref_taps)
    rows = [(f"tap {l}", *rel(a[:, k], b[:, k])) for k, l in enumerate(tap_layers)]
    rows.append(("final hidden", *rel(torch.cat(got_final), torch.cat(ref_final))))
    print(f"{model_path}: {len(seqs)} sequences, {n_tokens} tokens, {model.num_layers} "
          f"layers, rope table from {model.inv_freq_source}, weights {model.weight_dtype}, "
          f"PyTorch compute {str(model.dtype).replace('torch.', '')} on {args.device}")
    ok = True
    for name, rms, mx in rows:
        bad = rms > args.tol
        ok &= not bad
        print(f"  {name:>12}: rel RMS {rms:.2e}, max abs / max {mx:.2e}"
              f"{'  > tol ' + str(args.tol) if bad else ''}")
    worst = max(r[1] for r in rows)
    print(("PASS" if ok else "FAIL") + f": worst rel RMS {worst:.2e} (tol {args.tol:g})",
          flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dspark", required=True, help="the dspark binary")
    ap.add_argument("--model", required=True, nargs="+",
                    help="targets: model directories or GGUF files (each checked)")
    ap.add_argument("--taps", default="", help="tap layers [-1 and every layer]")
    ap.add_argument("--prompts", type=int, default=4, help="sequences (<= %d)" % len(PROMPTS))
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--chat", action="store_true", help="render prompts through the chat template")
    ap.add_argument("--batch", type=int, default=3, help="sequences per PyTorch forward")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative RMS error")
    ap.add_argument("--keep", default="", help="write the regen output here (kept; one model)")
    ap.add_argument("--device", default="cpu",
                    help="device of both dspark regen and the PyTorch forward (cuda: bf16 "
                         "weights and compute on both sides, give a bf16 tolerance, e.g. 3e-2)")
    ap.add_argument("--torch-dtype", default="", choices=["", "f32", "bf16"],
                    help="compute dtype of the PyTorch forward [f32 on cpu, bf16 on cuda]")
    args = ap.parse_args()
    ok = True
    for m in args.model:
        with tempfile.TemporaryDirectory() as tmp:
            ok &= check(args, m, tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
