#!/usr/bin/env python3
"""The target's forward in PyTorch, for training a drafter without stored hidden states: the
outputs of the tapped layers and the final-normed hidden state of every token, computed on the
fly from the target's weights as dspark holds them after loading
(`dspark regen --all-target-weights` writes them to target_weights.safetensors;
tools/regen/regen.h).

Written from the Llama-family architecture (independent of dspark's kernels), the way
model/llama_family.cpp computes it:

  x = embed[tokens]                                  residual stream, f32
  per layer l: xn = RMSNorm(x) * w_in
               q, k, v = xn Wq (+b), xn Wk (+b), xn Wv (+b)   per-head RMSNorm of q, k (Qwen3)
               q, k = RoPE(q), RoPE(k)               rotate-half layout, partial rotary allowed
               x += softmax(q k^T / sqrt(head_dim) + causal [/ sliding window]) v  Wo (+b)
                                                     (grouped-query: kv head = q head / group)
               xn = RMSNorm(x) * w_post;  x += (silu(xn Wg) * (xn Wu)) Wd
               tap l = x                             (HF hidden_states[l + 1]; tap -1: embedding)
  final hidden = RMSNorm(x) * w_final

Matrix products run in the compute dtype (bf16 on cuda, like dspark's engine dtype there; f32 on
the CPU), norms and the residual stream in f32. Batches are right-padded: with causal attention a
valid position never sees a pad, so no padding mask is needed.

    python3 tools/train/target_forward.py WEIGHTS.safetensors --tokens 1,2,3 --taps 0,2
    python3 tools/train/target_forward.py WEIGHTS.safetensors --bench 32x512 --device cuda
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402


def default_inv_freq(cfg: dict) -> torch.Tensor | None:
    """The rotary frequencies from the config (float64 math as Hugging Face, then f32), or None
    when the scheme is not one of default / linear / llama3 (the file's table is used then)."""
    hd = int(cfg["head_dim"])
    rot = int(hd * float(cfg.get("partial_rotary_factor", 1.0)))
    rot -= rot % 2
    inv = 1.0 / float(cfg["rope_theta"]) ** (
        torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    sc = cfg.get("rope_scaling", {}) or {}
    kind = sc.get("type", "default")
    if kind in ("default", "none", ""):
        pass
    elif kind == "linear":
        inv = inv / float(sc["factor"])
    elif kind == "llama3":
        factor = float(sc["factor"])
        lo, hi = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
        old = float(sc["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / factor + smooth * inv
        low = torch.where(wavelen > old / lo, inv / factor, mid)
        inv = torch.where(wavelen < old / hi, inv, low)
    else:
        return None
    return inv.float()


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * w over the last dim; f32 in, f32 out (torch's fused kernel
    when there is one)."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class TargetModel:
    """The target of a target_weights.safetensors written with --all-target-weights."""

    def __init__(self, path: str, device, dtype: torch.dtype | None = None):
        tensors, meta = st_io.read(path)
        if "config" not in meta:
            raise ValueError(f"{path}: no layer weights (write it with `dspark regen "
                             "--all-target-weights`)")
        self.cfg = c = json.loads(meta["config"])
        self.device = torch.device(device)
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.num_layers, self.hidden_size = int(c["num_layers"]), int(c["hidden_size"])
        self.nh, self.kvh, self.hd = int(c["num_heads"]), int(c["num_kv_heads"]), int(c["head_dim"])
        self.eps = float(c["rms_norm_eps"])
        self.window = [int(w) for w in c["layer_window"]]
        self.weight_dtype = c.get("weight_dtype", "f32")
        dev, dt = self.device, self.dtype

        def mat(name):  # a matrix for the compute dtype
            return tensors[name].to(dev, dt)

        def vec(name):  # norms, biases: f32
            return tensors[name].to(dev, torch.float32) if name in tensors else None

        self.embed = tensors["embed_tokens"].to(dev, torch.float32)
        self.final_norm = vec("final_norm")
        self.lm_head = tensors["lm_head"].to(dev, torch.float32) if "lm_head" in tensors \
            else self.embed
        self.layers = []
        for l in range(self.num_layers):
            p = f"model.layers.{l}."
            a, m = p + "self_attn.", p + "mlp."
            self.layers.append({
                "in": vec(p + "input_layernorm.weight"),
                "post": vec(p + "post_attention_layernorm.weight"),
                "q": mat(a + "q_proj.weight"), "k": mat(a + "k_proj.weight"),
                "v": mat(a + "v_proj.weight"), "o": mat(a + "o_proj.weight"),
                "qb": vec(a + "q_proj.bias"), "kb": vec(a + "k_proj.bias"),
                "vb": vec(a + "v_proj.bias"), "ob": vec(a + "o_proj.bias"),
                "qn": vec(a + "q_norm.weight"), "kn": vec(a + "k_norm.weight"),
                "gate": mat(m + "gate_proj.weight"), "up": mat(m + "up_proj.weight"),
                "down": mat(m + "down_proj.weight"),
            })
        if c["qk_norm"] and self.layers[0]["qn"] is None:
            raise ValueError(f"{path}: qk_norm but no q_norm weights")
        stored = tensors["rope_inv_freq"].float()
        own = default_inv_freq(c)
        # Our own table unless the scheme (YaRN) or GGUF rope_freqs divisors need the file's.
        self.inv_freq_source = "stored"
        if own is not None and own.shape == stored.shape and \
                float((own - stored).abs().max()) <= 1e-6 * float(stored.abs().max()):
            stored, self.inv_freq_source = own, "config"
        self.inv_freq = stored.to(dev)
        self.rope_scale = float(meta.get("rope_attention_scaling", "1"))
        self.gqa_native = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")

    # ---- pieces -------------------------------------------------------------------------------

    def _lin(self, x, w, b=None):
        y = F.linear(x.to(self.dtype), w)
        return y if b is None else y + b.to(y.dtype)

    def _rope(self, x, cos, sin):
        """x [B, N, heads, hd] f32; rotates the first 2 * len(inv_freq) features (rotate-half)."""
        half = cos.shape[-1]
        x1, x2 = x[..., :half], x[..., half:2 * half]
        c, s = cos[:, :, None, :], sin[:, :, None, :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, x[..., 2 * half:]], -1)

    def _attention(self, q, k, v, window: int):
        """q [B, N, nh, hd], k/v [B, N, kvh, hd] -> [B, N, nh*hd]."""
        B, N = q.shape[:2]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        rep = self.nh // self.kvh
        mask, causal = None, True
        if window > 0:
            i = torch.arange(N, device=q.device)
            d = i.view(-1, 1) - i.view(1, -1)
            mask, causal = (d >= 0) & (d < window), False
        if rep > 1 and not self.gqa_native:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        kw = {"enable_gqa": True} if rep > 1 and self.gqa_native else {}
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, **kw)
        return o.transpose(1, 2).reshape(B, N, self.nh * self.hd)

    # ---- forward ------------------------------------------------------------------------------

    @torch.no_grad()
    def hidden(self, tokens: torch.Tensor, tap_layers) -> tuple:
        """tokens [B, N] (right-padded, any padding token). Returns (taps [B, N, m, H],
        final [B, N, H]) in the compute dtype; rows at padded positions are meaningless."""
        tokens = tokens.to(self.device)
        B, N = tokens.shape
        pos = torch.arange(N, device=self.device, dtype=torch.float32)
        ang = pos[:, None] * self.inv_freq[None, :]
        cos = (ang.cos() * self.rope_scale)[None].expand(B, N, -1)
        sin = (ang.sin() * self.rope_scale)[None].expand(B, N, -1)
        want = {l: i for i, l in enumerate(tap_layers)}
        taps = [None] * len(tap_layers)
        x = self.embed[tokens]
        if -1 in want:
            taps[want[-1]] = x.to(self.dtype)
        for l, w in enumerate(self.layers):
            xn = rms_norm(x, w["in"], self.eps)
            q = self._lin(xn, w["q"], w["qb"]).view(B, N, self.nh, self.hd).float()
            k = self._lin(xn, w["k"], w["kb"]).view(B, N, self.kvh, self.hd).float()
            v = self._lin(xn, w["v"], w["vb"]).view(B, N, self.kvh, self.hd)
            if w["qn"] is not None:
                q, k = rms_norm(q, w["qn"], self.eps), rms_norm(k, w["kn"], self.eps)
            q = self._rope(q, cos, sin).to(self.dtype)
            k = self._rope(k, cos, sin).to(self.dtype)
            o = self._attention(q, k, v, self.window[l])
            x = x + self._lin(o, w["o"], w["ob"]).float()
            xn = rms_norm(x, w["post"], self.eps)
            act = F.silu(self._lin(xn, w["gate"])) * self._lin(xn, w["up"])
            x = x + self._lin(act, w["down"]).float()
            if l in want:
                taps[want[l]] = x.to(self.dtype)
        final = rms_norm(x, self.final_norm, self.eps).to(self.dtype)
        return torch.stack(taps, 2) if taps else x.new_zeros(B, N, 0, self.hidden_size), final

    def flops_per_token(self, context: int) -> float:
        """Multiply-adds x 2 of one token's forward (no LM head) at an average context length."""
        d, f = self.hidden_size, self.layers[0]["gate"].shape[0]
        per_layer = 2 * d * (2 * self.nh * self.hd + 2 * self.kvh * self.hd) + 2 * 3 * d * f
        per_layer += 2 * 2 * self.nh * self.hd * context  # q k^T and p v
        return float(self.num_layers * per_layer)


def bench(m: TargetModel, batch: int, length: int, taps: list, repeats: int) -> dict:
    """Tokens/s and FLOP/s of hidden() on random tokens [batch, length]."""
    import time

    g = torch.Generator().manual_seed(0)
    toks = torch.randint(0, m.embed.shape[0], (batch, length), generator=g).to(m.device)
    sync = torch.cuda.synchronize if m.device.type == "cuda" else (lambda: None)
    m.hidden(toks, taps)  # warm-up
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        m.hidden(toks, taps)
    sync()
    dt = (time.perf_counter() - t0) / repeats
    flops = m.flops_per_token(length / 2) * batch * length
    return {"batch": batch, "length": length, "seconds_per_forward": round(dt, 5),
            "tok_per_s": round(batch * length / dt), "gflop_per_forward": round(flops / 1e9, 1),
            "tflop_per_s": round(flops / dt / 1e12, 3), "dtype": str(m.dtype)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("weights")
    ap.add_argument("--tokens", default="", help="comma-separated token ids: print the result")
    ap.add_argument("--taps", default="0")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--bench", default="", help="BATCHxLENGTH: time the forward on random tokens")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    m = TargetModel(args.weights, args.device)
    taps = [int(t) for t in args.taps.split(",")]
    if args.bench:
        b, n = (int(v) for v in args.bench.lower().split("x"))
        print(json.dumps(bench(m, b, n, taps, args.repeats)))
    if args.tokens:
        toks = torch.tensor([[int(t) for t in args.tokens.split(",")]])
        t, final = m.hidden(toks, taps)
        print(json.dumps({"taps_shape": list(t.shape), "final_shape": list(final.shape),
                          "final_last": [round(float(v), 5) for v in final[0, -1, :8]]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
