#!/usr/bin/env python3
"""Shrinks the vanilla Markov head of an exported DSpark drafter to a lower rank, post training.

The head adds bias(prev) = W2 @ W1[prev] to the base logits (Eq 5): the V x V matrix W1 W2^T has
rank <= r. Its best rank-k approximation (Eckart-Young) comes from the QR factors of W1 and W2 and
the SVD of the small r x r core: W1' = Q1 U_k S_k^1/2, W2' = Q2 V_k S_k^1/2. The confidence head's
Markov features c . W1[prev] are mapped into the same basis (c' = S_k^-1/2 U_k^T R1 c), exact on
the kept subspace. Drafting stays lossless whatever the rank (the verifier decides); only the
acceptance can change, so measure tau again after shrinking.

    python3 tools/train/shrink_markov.py --drafter DIR --rank 48 --out DIR2
"""

import argparse
import json
import os
import shutil

import torch

import st_io


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.drafter, "config.json")))
    if cfg.get("markov_head_type") != "vanilla":
        raise SystemExit("only the vanilla Markov head can be shrunk this way")
    r = int(cfg["markov_rank"])
    if not 0 < a.rank < r:
        raise SystemExit(f"--rank must be in (0, {r})")
    tensors, meta = st_io.read(os.path.join(a.drafter, "model.safetensors"))
    w1 = tensors["markov_head.markov_w1.weight"].double()  # [V, r]
    w2 = tensors["markov_head.markov_w2.weight"].double()  # [V, r]
    q1, r1 = torch.linalg.qr(w1)
    q2, r2 = torch.linalg.qr(w2)
    u, s, vh = torch.linalg.svd(r1 @ r2.T)
    k = a.rank
    sq = s[:k].sqrt()
    w1k = q1 @ (u[:, :k] * sq)
    w2k = q2 @ (vh[:k].T * sq)
    kept = float((s[:k] ** 2).sum() / (s ** 2).sum())
    dtype = tensors["markov_head.markov_w1.weight"].dtype
    tensors["markov_head.markov_w1.weight"] = w1k.to(dtype).contiguous()
    tensors["markov_head.markov_w2.weight"] = w2k.to(dtype).contiguous()
    if cfg.get("enable_confidence_head") and cfg.get("confidence_head_with_markov"):
        p = tensors["confidence_head.proj.weight"].double()  # [1, d + r]
        d = p.shape[1] - r
        c = p[0, d:]
        ck = (u[:, :k].T @ (r1 @ c)) / sq
        tensors["confidence_head.proj.weight"] = torch.cat([p[0, :d], ck])[None].to(dtype)
    os.makedirs(a.out, exist_ok=True)
    st_io.write(os.path.join(a.out, "model.safetensors"), tensors, meta)
    cfg["markov_rank"] = k
    cfg.setdefault("dspark_training", {})["markov_rank_shrunk_from"] = r
    cfg["dspark_training"]["markov_energy_kept"] = round(kept, 6)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    for name in ("train_metrics.json", "dspark_thresholds.json"):
        if os.path.exists(os.path.join(a.drafter, name)):
            shutil.copy(os.path.join(a.drafter, name), a.out)
    print(f"markov rank {r} -> {k}: {kept:.4f} of the bias matrix's energy kept; wrote {a.out}")


if __name__ == "__main__":
    main()
