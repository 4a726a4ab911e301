#!/usr/bin/env python3
"""Trains a DSpark drafter (DFlash backbone + vanilla Markov head + confidence head) on the shards
written by `dspark regen` and exports it in the DeepSpec layout (config.json + model.safetensors,
bf16) that `dspark generate --draft DIR` loads.

Data (docs in tools/regen/regen.h): per sequence the tokens (prompt + the target's own
response), a loss mask (response tokens), the target's tapped hidden states (layer outputs
`target_layer_ids`, HF hidden_states[l+1]) and its final-normed hidden state, plus
target_weights.safetensors (the target's embedding / LM head / final norm exactly as dspark holds
them after loading, e.g. dequantized from GGUF): the drafter's embedding and LM head are these,
frozen, and the target's distribution at every position is softmax(final_hidden . lm_head^T), so
the TV term uses the real target distribution (not one-hot).

The hidden states come either from the shards (regen --taps L1,L2,..: ~7 KB per token for
SmolLM2) or, when the shards hold only tokens (regen --taps none), from the target's forward run
here on every batch (target_forward.py, frozen, no grad; bf16 on cuda) on the weights that
`regen --all-target-weights` writes to target_weights.safetensors: then only the tokens are in
memory and the data can be many times larger. Several --data directories (e.g. greedy and sampled
responses to the same prompts) are trained on together; the held-out sequences are the first
directory's responses to a random subset of its prompts, and no response to those prompts (in any
directory) is trained on.

Training example (DSpark paper, DESIGN.md section 1, drafter-formats.md): an anchor t (a response
token, the "pending" token at inference); context rows are the taps of tokens 0..t-1 at positions
0..t-1; the block is [x_t, mask x (gamma-1)] at positions t..t+gamma-1, attending non-causally to
the context and to itself. Block row k (0-based) predicts x_{t+1+k}; its target distribution is
softmax(lm_head . final_hidden[t+k]); its Markov input is x_{t+k} (teacher forcing: at inference
it is the previous drafted token, equal to the data as long as the drafts are accepted).
Many anchors of a sequence are trained in one pass (each block sees only its own context rows and
its own block, through an attention mask).

Loss: sum_k w_k (0.1 CE(z_k, x_{t+1+k}) + 0.9 TV(p_d, p_t) + 1.0 BCE(c_k, 1 - TV)) / sum_k w_k,
w_k = exp(-k / gamma) (k 0-based == exp(-(k-1)/gamma) 1-based), TV = 1/2 |p_d - p_t|_1, the BCE
target detached. The embedding and LM head are frozen.

Reported on held-out sequences: teacher-forced greedy tau (1 + mean accepted prefix, exactly
what greedy verification accepts when the drafts match the data), the same without the Markov
bias, the analytic tau 1 + sum_j prod_{i<=j} (1 - TV_i), and acceptance by position; with
--prompts-file (the regen runs' prompt files: id -> source), the greedy tau by prompt source family
(template, stdlib, code, pydoc) and template kind. The final metrics are those of the exported
(bf16-rounded) weights.

--init DIR continues from an exported drafter (every trainable tensor; its config must describe
the drafter this run builds, else a one-line refusal naming the fields; optimizer, warm-up and
schedule start fresh, unless --schedule-minutes/--schedule-start place this call inside one
longer schedule; its held-out prompts, train_metrics.json val_prompts, stay held out; the
export records init_from and cumulative steps). --eval-only --init DIR only evaluates DIR (shape
from its config) on every sequence of --data (e.g. regen output of the test prompts) or, with
--eval-held-out, on the training split's held-out sequences, and writes OUT/eval_metrics.json.

    python3 tools/train/train.py --data REGEN_DIR [REGEN_DIR...] --out DRAFTER_DIR --minutes 5 \
        [--device cuda] [--taps 1,8,14,20,27] [--target-weights FILE] [--init DRAFTER_DIR] \
        [--prompts-file PROMPTS.jsonl]
    python3 tools/train/train.py --eval-only --init DRAFTER_DIR --data REGEN_DIR \
        [--target-weights FILE] [--prompts-file PROMPTS.jsonl] [--out DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import st_io  # our own safetensors reader / writer (no extra package on the GPU machine)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "dspark_ref"))
import dspark_ref as ref  # noqa: E402  (independent reference: RoPE tables, parity check)
from target_forward import TargetModel  # noqa: E402  (the target's forward, no stored taps)


def log(msg: str) -> None:
    print(f"[train {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---- data -----------------------------------------------------------------------------------------


class RegenData:
    """All shards of one or more regen directories, concatenated (token-major). With stored hidden
    states (regen --taps) their taps and final hidden states are loaded too; without (regen
    --taps none, or on_the_fly) only tokens, loss masks and offsets: the target's forward
    (target_forward.py) computes the hidden states of each batch."""

    def __init__(self, dirs: list, device: torch.device, on_the_fly: bool = False):
        tokens, mask, taps, final, starts, lens, plens = [], [], [], [], [], [], []
        self.seq_prompt, self.seq_dir = [], []  # per sequence: prompt id, index of its directory
        base = 0
        self.meta = None
        shards, tap_sets = [], set()
        for i, d in enumerate(dirs):
            with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
                meta = json.load(f)
            if self.meta is None:
                self.meta = meta
            for k in ("hidden_size", "num_layers", "vocab_size"):
                if meta[k] != self.meta[k]:
                    raise ValueError(f"{d}: {k} {meta[k]} != {self.meta[k]} of {dirs[0]}")
            tap_sets.add(tuple(meta["tap_layers"]))
            shards += [(i, p) for p in sorted(glob.glob(os.path.join(d, "shard_*.safetensors")))]
        if not shards:
            raise ValueError(f"no shards under {dirs}")
        self.stored = not on_the_fly and all(
            {"taps", "final_hidden"} <= set(st_io.keys(p)) for _, p in shards)
        if self.stored and len(tap_sets) > 1:
            raise ValueError(f"{dirs}: different tap layers {sorted(tap_sets)}")
        names = None if self.stored else {"tokens", "loss_mask", "seq_offsets", "prompt_lens"}
        for i, path in shards:
            f, meta = st_io.read(path, names)
            t = f["tokens"].long()
            off = f["seq_offsets"].long()
            tokens.append(t)
            mask.append(f["loss_mask"].bool())
            if self.stored:
                tp = f["taps"]
                taps.append(tp.reshape(tp.shape[0], -1))
                final.append(f["final_hidden"])
            plens.append(f["prompt_lens"].long())
            starts.append(off[:-1] + base)
            lens.append(off[1:] - off[:-1])
            ids = json.loads(meta.get("ids", "[]"))
            n = off.numel() - 1
            self.seq_prompt += ids if len(ids) == n else [f"{path}:{j}" for j in range(n)]
            self.seq_dir += [i] * n
            base += t.numel()
            del f
        self.tap_layers = list(self.meta["tap_layers"])
        self.hidden = int(self.meta["hidden_size"])
        self.num_layers = int(self.meta["num_layers"])
        self.vocab = int(self.meta["vocab_size"])
        self.tokens = torch.cat(tokens).to(device)
        self.loss_mask = torch.cat(mask).to(device)
        self.taps = torch.cat(taps).to(device) if self.stored else None
        self.final = torch.cat(final).to(device) if self.stored else None
        self.starts = torch.cat(starts)
        self.lens = torch.cat(lens)
        self.prompt_lens = torch.cat(plens)
        self.n_seq = self.starts.numel()
        self.n_tokens = self.tokens.numel()
        self.device = device
        self.seq_source = None  # per sequence: its prompt's source (set_sources), or None
        self.target = None  # target_forward.TargetModel when the hidden states are computed
        self.target_s, self.target_tokens, self._events = 0.0, 0, []

    def set_sources(self, sources: dict) -> int:
        """Each sequence's source from {prompt id: source} (read_prompt_sources); returns how many
        sequences have one (none: no per-source metrics)."""
        self.seq_source = [sources.get(p) for p in self.seq_prompt]
        n = sum(s is not None for s in self.seq_source)
        if n == 0:
            self.seq_source = None
        return n

    def use_target(self, target, tap_layers: list) -> None:
        """Hidden states from `target`'s forward from now on, for these tap layers."""
        if target.hidden_size != self.hidden or target.num_layers != self.num_layers:
            raise ValueError(f"target weights: hidden {target.hidden_size}, {target.num_layers} "
                             f"layers; the shards: hidden {self.hidden}, {self.num_layers} layers")
        self.target, self.tap_layers = target, list(tap_layers)

    def batch(self, starts, n_max: int) -> tuple:
        """Tokens [B, n_max] of the sequences starting at `starts` (right-padded with whatever
        follows), their taps [B, n_max, m*H] and final hidden states [B, n_max, H]."""
        idx = (starts.view(-1, 1) + torch.arange(n_max, device=starts.device)).clamp(
            max=self.n_tokens - 1)
        toks = self.tokens[idx]
        if self.target is None:
            return toks, self.taps[idx], self.final[idx]
        cuda = toks.device.type == "cuda"
        if cuda:  # timed with events: no synchronisation until target_stats()
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        t0 = time.perf_counter()
        taps, final = self.target.hidden(toks, self.tap_layers)
        if cuda:
            ev[1].record()
            self._events.append(ev)
        else:
            self.target_s += time.perf_counter() - t0
        self.target_tokens += toks.numel()
        return toks, taps.flatten(2), final

    def target_stats(self) -> dict:
        """Time spent in the target's forward so far (padded tokens, seconds, tokens/s)."""
        for a, b in self._events:
            b.synchronize()
            self.target_s += a.elapsed_time(b) / 1000.0
        self._events.clear()
        return {"tokens": self.target_tokens, "seconds": round(self.target_s, 3),
                "tok_per_s": round(self.target_tokens / max(self.target_s, 1e-9))}

    def target_report(self) -> str:
        if self.target is None:
            return ""
        st = self.target_stats()
        return f"; target forward {st['seconds']:.1f} s, {st['tok_per_s']} tok/s"

    def load_target_weights(self, path: str, device) -> tuple:
        f, _ = st_io.read(path, {"embed_tokens", "lm_head"})
        embed = f["embed_tokens"].float()
        head = f["lm_head"].float() if "lm_head" in f else embed
        return embed.to(device), head.to(device)


def default_taps(num_layers: int) -> list:
    """5 taps spread from layer 1 to L-3 (DFlash's spread; never the last layer); shallow targets
    (L < 10, the test models) tap 0 .. L-2. The same rule as pipeline.sh."""
    lo, hi = (1, num_layers - 3) if num_layers >= 10 else (0, num_layers - 2)
    n = min(5, hi - lo + 1)
    return sorted({round(lo + i * (hi - lo) / max(1, n - 1)) for i in range(n)})


def split_by_prompt(data: RegenData, fraction: float, val_max: int, rng, held_prompts=None) -> tuple:
    """(val sequence ids, train sequence ids): held-out prompts drawn among those of the first
    data directory (its sequences are the held-out ones); every sequence of a held-out prompt in
    any directory (other samples of it) is left out of training. `held_prompts` (a run continued
    with --init: the prompt ids its source run held out) replaces the draw, so that no held-out
    prompt of this run was trained on before even when the data covers other prompts."""
    first = sorted({p for p, d in zip(data.seq_prompt, data.seq_dir) if d == 0})
    n_val = max(4, int(round(fraction * len(first))))
    n_val = min(n_val, val_max, max(1, len(first) // 4))
    held = set(rng.permutation(np.array(first, dtype=object))[:n_val].tolist())
    if held_prompts is not None:
        held = set(held_prompts)
    val = [i for i, (p, d) in enumerate(zip(data.seq_prompt, data.seq_dir)) if d == 0 and p in held]
    train = [i for i, p in enumerate(data.seq_prompt) if p not in held]
    return np.array(val, dtype=np.int64), np.array(train, dtype=np.int64)


def sample_batch(data: RegenData, seq_ids, anchors: int, gamma: int, rng: np.random.Generator):
    """Padded index tensors for a batch of sequences and up to `anchors` anchors each (<= 0:
    every response position)."""
    B = len(seq_ids)
    lens = data.lens[seq_ids]
    n_max = int(lens.max())
    starts = data.starts[seq_ids]
    if anchors <= 0:  # every response position
        anchors = max(1, int((data.lens[seq_ids] - data.prompt_lens[seq_ids]).max()) - 1)
    anchor = np.full((B, anchors), -1, dtype=np.int64)
    for i, s in enumerate(seq_ids):
        p, n = int(data.prompt_lens[s]), int(data.lens[s])
        cand = np.arange(p, n - 1)  # response tokens with at least one token after them
        if cand.size == 0:
            continue
        pick = cand if cand.size <= anchors else rng.choice(cand, anchors, replace=False)
        anchor[i, : pick.size] = np.sort(pick)
    return (
        starts.to(data.device),
        lens.to(data.device),
        n_max,
        torch.from_numpy(anchor).to(data.device),
    )


# ---- model ----------------------------------------------------------------------------------------


class RMSNorm(torch.nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)


def rotate(x, cos, sin):
    """x [..., S, heads, hd]; cos/sin [..., S, hd] (half-split layout, as HF Llama/Qwen)."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(-2) + rot * sin.unsqueeze(-2)


class Layer(torch.nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, nh, kvh, hd, eps = c["hidden_size"], c["num_attention_heads"], \
            c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
        self.nh, self.kvh, self.hd = nh, kvh, hd
        self.input_layernorm = RMSNorm(d, eps)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.q_proj = torch.nn.Linear(d, nh * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, kvh * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, kvh * hd, bias=False)
        self.o_proj = torch.nn.Linear(nh * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, eps)
        self.k_norm = RMSNorm(hd, eps)
        self.gate_proj = torch.nn.Linear(d, c["intermediate_size"], bias=False)
        self.up_proj = torch.nn.Linear(d, c["intermediate_size"], bias=False)
        self.down_proj = torch.nn.Linear(c["intermediate_size"], d, bias=False)

    def kv(self, x, cos, sin):
        """K (k_norm + RoPE) and V of rows x [B, S, d]."""
        B, S, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(B, S, self.kvh, self.hd))
        v = self.v_proj(x).view(B, S, self.kvh, self.hd)
        return rotate(k, cos, sin), v

    def forward(self, x, ctx, cos_b, sin_b, cos_c, sin_c, mask):
        """x [B, Q, d] block rows; ctx [B, N, d] context features; mask [B, 1, Q, N+Q] bool."""
        B, Q, _ = x.shape
        xn = self.input_layernorm(x)
        q = rotate(self.q_norm(self.q_proj(xn).view(B, Q, self.nh, self.hd)), cos_b, sin_b)
        kc, vc = self.kv(ctx, cos_c, sin_c)
        kb, vb = self.kv(xn, cos_b, sin_b)
        k = torch.cat([kc, kb], 1)
        v = torch.cat([vc, vb], 1)
        rep = self.nh // self.kvh
        dt = v.dtype
        k = k.to(dt).repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(
            q.to(dt).transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask
        )
        x = x + self.o_proj(o.transpose(1, 2).reshape(B, Q, self.nh * self.hd))
        xn = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(xn)) * self.up_proj(xn))


class Drafter(torch.nn.Module):
    def __init__(self, c: dict, embed: torch.Tensor, lm_head: torch.Tensor):
        super().__init__()
        self.c = c
        d, r, V = c["hidden_size"], c["markov_rank"], c["vocab_size"]
        m = len(c["target_layer_ids"])
        self.fc = torch.nn.Linear(m * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, c["rms_norm_eps"])
        self.layers = torch.nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(d, c["rms_norm_eps"])
        self.markov_w1 = torch.nn.Embedding(V, r)
        self.markov_w2 = torch.nn.Linear(r, V, bias=False)
        self.confidence = torch.nn.Linear(d + r, 1)
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", lm_head, persistent=False)
        for mod in self.modules():
            if isinstance(mod, torch.nn.Linear):
                torch.nn.init.normal_(mod.weight, std=0.02)
                if mod.bias is not None:
                    torch.nn.init.zeros_(mod.bias)
        torch.nn.init.normal_(self.markov_w1.weight, std=0.02)
        torch.nn.init.zeros_(self.markov_w2.weight)  # starts as plain DFlash
        inv, _ = ref.rope_inv_freq(c["rope_parameters"], c["head_dim"])
        self.register_buffer("inv_freq", inv.float(), persistent=False)

    def rope(self, positions):
        ang = positions.float().unsqueeze(-1) * self.inv_freq
        ang = torch.cat([ang, ang], -1)
        return ang.cos(), ang.sin()

    def block_hidden(self, taps, tokens_pad, anchor, n_valid, gamma, mask_id):
        """taps [B, N, m*H]; tokens_pad [B, N]; anchor [B, A] (-1: none); n_valid [B].
        Returns h [B, A, gamma, d] (after the final norm)."""
        B, N, _ = taps.shape
        A = anchor.shape[1]
        if not torch.is_autocast_enabled():
            taps = taps.to(self.fc.weight.dtype)
        ctx = self.hidden_norm(self.fc(taps))
        a = anchor.clamp(min=0)
        ids = torch.full((B, A, gamma), mask_id, dtype=torch.long, device=taps.device)
        ids[:, :, 0] = torch.gather(tokens_pad, 1, a)
        x = self.embed[ids].reshape(B, A * gamma, -1)
        kpos = torch.arange(gamma, device=taps.device)
        pos_b = (a.unsqueeze(-1) + kpos).reshape(B, A * gamma)
        cos_b, sin_b = self.rope(pos_b)
        cos_c, sin_c = self.rope(torch.arange(N, device=taps.device).expand(B, N))
        # mask: query (a, k) sees context rows j < anchor[a] (and < n_valid) and its own block.
        j = torch.arange(N, device=taps.device)
        ctx_ok = (j.view(1, 1, N) < anchor.unsqueeze(-1)) & (j.view(1, 1, N) < n_valid.view(B, 1, 1))
        ctx_ok = ctx_ok.unsqueeze(2).expand(B, A, gamma, N).reshape(B, A * gamma, N)
        blk = torch.arange(A, device=taps.device).repeat_interleave(gamma)
        blk_ok = (blk.view(-1, 1) == blk.view(1, -1)).expand(B, A * gamma, A * gamma)
        mask = torch.cat([ctx_ok, blk_ok], -1).unsqueeze(1)
        for layer in self.layers:
            x = layer(x, ctx, cos_b, sin_b, cos_c, sin_c, mask)
        return self.norm(x).reshape(B, A, gamma, -1)


# ---- loss -----------------------------------------------------------------------------------------


def gather_rows(data: RegenData, starts, lens, anchor, gamma):
    """Block rows (b, a, k): `valid`, the global token index of t+k, and the position t+k
    within the batch's padded rows (for the batch's final hidden states)."""
    B, A = anchor.shape
    k = torch.arange(gamma, device=anchor.device)
    pos = anchor.unsqueeze(-1) + k  # position t+k: hidden used as the target distribution
    valid = (anchor.unsqueeze(-1) >= 0) & (pos + 1 < lens.view(B, 1, 1))
    gidx = starts.view(B, 1, 1) + pos.clamp(min=0)
    valid &= data.loss_mask[(gidx + 1).clamp(max=data.n_tokens - 1)]
    return valid, gidx, pos.clamp(min=0)


def block_loss(model, data, h, valid, gidx, pos, final, gamma, weights, lm_head, chunk_rows=8192):
    """Loss and statistics over the valid rows (chunked over rows to bound the [rows, V] memory);
    final [B, N, H]: the batch's final hidden states (target distributions).
    Returns (loss, stats dict of tensors [gamma] summed)."""
    kk = torch.arange(gamma, device=h.device).expand_as(valid)[valid]
    hv = h[valid]
    g = gidx[valid]
    prev = data.tokens[g]
    y = data.tokens[g + 1]
    b = torch.arange(valid.shape[0], device=h.device).view(-1, 1, 1).expand_as(valid)[valid]
    fin = final[b, pos[valid]]
    n = hv.shape[0]
    total = h.new_zeros((), dtype=torch.float32)
    wsum = weights[kk].sum()
    st = {n_: torch.zeros(gamma, device=h.device) for n_ in
          ("rows", "match", "match_nomarkov", "accept", "conf", "ce", "tv")}
    match_rows = torch.zeros(n, dtype=torch.bool, device=h.device)
    match_rows_nm = torch.zeros(n, dtype=torch.bool, device=h.device)
    for s in range(0, n, chunk_rows):
        e = min(n, s + chunk_rows)
        hc, pc, yc, kc = hv[s:e], prev[s:e], y[s:e], kk[s:e]
        u = (hc @ lm_head.to(hc.dtype).T).float()
        w1 = model.markov_w1(pc)
        z = u + model.markov_w2(w1.to(hc.dtype) if torch.is_autocast_enabled() else w1).float()
        logp = F.log_softmax(z, -1)
        with torch.no_grad():
            pt = F.softmax((fin[s:e].to(hc.dtype) @ lm_head.to(hc.dtype).T).float(), -1)
        pd = logp.exp()
        tv = 0.5 * (pd - pt).abs().sum(-1)
        ce = -logp.gather(1, yc.view(-1, 1)).squeeze(1)
        acc = (1.0 - tv).detach().clamp(0.0, 1.0)
        feat = torch.cat([hc, w1.to(hc.dtype)], -1)
        c_logit = model.confidence(feat).float().squeeze(-1)
        bce = F.binary_cross_entropy_with_logits(c_logit, acc, reduction="none")
        wk = weights[kc]
        total = total + (wk * (0.1 * ce + 0.9 * tv + 1.0 * bce)).sum()
        with torch.no_grad():
            m_ = z.argmax(-1) == yc
            mn = u.argmax(-1) == yc
            match_rows[s:e] = m_
            match_rows_nm[s:e] = mn
            for name, val in (("rows", torch.ones_like(tv)), ("match", m_.float()),
                              ("match_nomarkov", mn.float()), ("accept", acc),
                              ("conf", torch.sigmoid(c_logit)), ("ce", ce.detach()),
                              ("tv", tv.detach())):
                st[name].index_add_(0, kc, val.float())
    st["match_rows"] = match_rows
    st["match_rows_nm"] = match_rows_nm
    return total / wsum.clamp(min=1e-9), st


def accepted_prefix(valid, match_rows):
    """Per anchor: length of the leading run of matches over the valid positions."""
    full = torch.zeros(valid.shape, dtype=torch.bool, device=valid.device)
    full[valid] = match_rows
    run = torch.cumprod(full.long(), dim=-1)
    return run.sum(-1), valid[..., 0]


# ---- export ---------------------------------------------------------------------------------------


def drafter_config(args, data: RegenData, mask_id: int) -> dict:
    d = data.hidden
    hd = args.head_dim if args.head_dim > 0 else (
        64 if d >= 256 and d % 64 == 0 else 16 if d % 16 == 0 else d)
    nh = d // hd
    kvh = args.kv_heads if args.kv_heads > 0 else (3 if nh % 3 == 0 else 2 if nh % 2 == 0 else nh)
    inter = args.intermediate if args.intermediate > 0 else int(math.ceil(d * 8 / 3 / 32) * 32)
    return {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": d,
        "intermediate_size": inter,
        "num_hidden_layers": args.layers,
        "num_attention_heads": nh,
        "num_key_value_heads": kvh,
        "head_dim": hd,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": data.vocab,
        "max_position_embeddings": 32768,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "rope_theta": args.rope_theta,
        "rope_parameters": {"rope_theta": args.rope_theta, "rope_type": "default"},
        "torch_dtype": "bfloat16",
        "block_size": args.gamma,
        "mask_token_id": mask_id,
        "target_layer_ids": data.tap_layers,
        "num_target_layers": data.num_layers,
        "num_anchors": args.anchors,
        "markov_rank": args.markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
    }


def export_tensors(model: Drafter) -> dict:
    out = {
        "fc.weight": model.fc.weight,
        "hidden_norm.weight": model.hidden_norm.weight,
        "norm.weight": model.norm.weight,
        "markov_head.markov_w1.weight": model.markov_w1.weight,
        "markov_head.markov_w2.weight": model.markov_w2.weight,
        "confidence_head.proj.weight": model.confidence.weight,
        "confidence_head.proj.bias": model.confidence.bias,
    }
    for i, L in enumerate(model.layers):
        p = f"layers.{i}."
        out.update({
            p + "input_layernorm.weight": L.input_layernorm.weight,
            p + "post_attention_layernorm.weight": L.post_attention_layernorm.weight,
            p + "self_attn.q_proj.weight": L.q_proj.weight,
            p + "self_attn.k_proj.weight": L.k_proj.weight,
            p + "self_attn.v_proj.weight": L.v_proj.weight,
            p + "self_attn.o_proj.weight": L.o_proj.weight,
            p + "self_attn.q_norm.weight": L.q_norm.weight,
            p + "self_attn.k_norm.weight": L.k_norm.weight,
            p + "mlp.gate_proj.weight": L.gate_proj,
            p + "mlp.up_proj.weight": L.up_proj,
            p + "mlp.down_proj.weight": L.down_proj,
        })
    return {k: (v.weight if isinstance(v, torch.nn.Linear) else v).detach() for k, v in out.items()}


def export(model: Drafter, cfg: dict, out_dir: str, extra: dict) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.to(torch.bfloat16).contiguous().cpu() for k, v in export_tensors(model).items()}
    shapes = ref.expected_tensors(ref.parse_config(cfg))
    assert set(shapes) == set(tensors), (set(shapes) ^ set(tensors))
    for k, s in shapes.items():
        assert tuple(tensors[k].shape) == s, (k, tensors[k].shape, s)
    st_io.write(os.path.join(out_dir, "model.safetensors"), tensors, metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**cfg, "dspark_training": extra}, f, indent=2)
        f.write("\n")
    return tensors


# ---- --init: continue from an exported drafter --------------------------------------------------

# Config fields that must agree between an --init drafter and this run, with the flag (or data
# property) that sets each here.
INIT_FIELDS = {
    "architectures": "Qwen3DSparkModel", "hidden_size": "the target's hidden size",
    "num_hidden_layers": "--layers", "num_attention_heads": "--head-dim",
    "num_key_value_heads": "--kv-heads", "head_dim": "--head-dim",
    "intermediate_size": "--intermediate", "hidden_act": "silu", "rms_norm_eps": "1e-6",
    "attention_bias": "no bias", "rope_theta": "--rope-theta", "rope_parameters": "--rope-theta",
    "vocab_size": "the target's vocabulary", "block_size": "--gamma",
    "mask_token_id": "--mask-token-id", "target_layer_ids": "--taps",
    "num_target_layers": "the target's layers", "markov_rank": "--markov-rank",
    "markov_head_type": "vanilla", "enable_confidence_head": "true",
    "confidence_head_with_markov": "true",
}


def read_init(init_dir: str) -> tuple:
    """(config.json, train_metrics.json or {}) of an exported drafter directory."""
    path = os.path.join(init_dir, "config.json")
    if not os.path.isfile(path) or not os.path.isfile(os.path.join(init_dir, "model.safetensors")):
        raise SystemExit(f"--init {init_dir}: not an exported drafter (config.json + "
                         "model.safetensors)")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    metrics = {}
    mpath = os.path.join(init_dir, "train_metrics.json")
    if os.path.isfile(mpath):
        with open(mpath, encoding="utf-8") as f:
            metrics = json.load(f)
    return cfg, metrics


def init_from_config(args, init_cfg: dict) -> None:
    """--eval-only: the drafter's shape is the --init directory's (its flags here are ignored)."""
    args.layers = int(init_cfg.get("num_hidden_layers", args.layers))
    args.markov_rank = int(init_cfg.get("markov_rank", args.markov_rank))
    args.head_dim = int(init_cfg.get("head_dim", 0))
    args.kv_heads = int(init_cfg.get("num_key_value_heads", 0))
    args.intermediate = int(init_cfg.get("intermediate_size", 0))
    args.rope_theta = float(init_cfg.get("rope_theta", args.rope_theta))
    args.gamma = int(init_cfg.get("block_size", args.gamma))


def check_init_config(cfg: dict, init_cfg: dict, init_dir: str) -> None:
    """Refuses (one line) when the --init drafter's config does not describe the drafter this run
    builds: every field of INIT_FIELDS must be equal."""
    bad = []
    for k, how in INIT_FIELDS.items():
        mine, theirs = cfg.get(k), init_cfg.get(k)
        if isinstance(mine, float) or isinstance(theirs, float):
            same = theirs is not None and mine is not None and float(mine) == float(theirs)
        else:
            same = mine == theirs
        if not same:
            bad.append(f"{k} {json.dumps(theirs)} != {json.dumps(mine)} ({how})")
    if bad:
        raise SystemExit(f"--init {init_dir}: config.json does not fit this run (its value != "
                         f"this run's): " + "; ".join(bad))


@torch.no_grad()
def load_init(model: Drafter, init_dir: str) -> int:
    """Copies every trainable tensor from init_dir/model.safetensors into the model (export()'s
    names, inverted through export_tensors: its values are views of the parameters). Refuses
    missing, unexpected or misshapen tensors. Returns the number of tensors loaded."""
    path = os.path.join(init_dir, "model.safetensors")
    tensors, _ = st_io.read(path)
    dst = export_tensors(model)
    missing = sorted(set(dst) - set(tensors))
    extra = sorted(set(tensors) - set(dst))
    if missing or extra:
        raise SystemExit(f"--init {init_dir}: model.safetensors does not match the drafter: "
                         f"missing {missing[:6]}{' ...' if len(missing) > 6 else ''}, unexpected "
                         f"{extra[:6]}{' ...' if len(extra) > 6 else ''}")
    for k, v in dst.items():
        if tuple(tensors[k].shape) != tuple(v.shape):
            raise SystemExit(f"--init {init_dir}: {k} has shape {tuple(tensors[k].shape)}, the "
                             f"drafter's is {tuple(v.shape)}")
        v.copy_(tensors[k].to(v.dtype))
    return len(dst)


def init_record(init_dir: str, init_cfg: dict) -> dict:
    """The `init_from` entry of a continued run: the source's own training record (steps,
    seconds, sequences, its held-out tau) and its cumulative steps / seconds."""
    src = init_cfg.get("dspark_training", {}) or {}
    prev = src.get("init_from") or {}
    return {"dir": os.path.abspath(init_dir),
            "steps": src.get("steps"), "train_seconds": src.get("train_seconds"),
            "sequences": src.get("sequences"), "val_tau_greedy": src.get("val_tau_greedy"),
            "cumulative_steps": int(src.get("steps") or 0) + int(prev.get("cumulative_steps") or 0),
            "cumulative_train_seconds": round(float(src.get("train_seconds") or 0.0) + float(
                prev.get("cumulative_train_seconds") or 0.0), 1)}


@torch.no_grad()
def round_to_bf16(model: Drafter) -> None:
    """The trainable parameters as export() writes them (bf16), kept in their dtype: the final
    evaluation then measures the exported drafter, the one --init loads again."""
    for p in model.parameters():
        p.copy_(p.to(torch.bfloat16).to(p.dtype))


@torch.no_grad()
def parity_check(cfg, tensors, data: RegenData, embed, lm_head, gamma, mask_id) -> float:
    """The exported (bf16) weights through this script's training forward vs the independent
    reference (tools/dspark_ref) on one held-out anchor, both in float64: base logits, and the
    Markov-corrected logits / confidence at block row 0. Returns the max relative error."""
    class T:  # the reference's view of the target: embedding + LM head
        pass

    tgt = T()
    tgt.embed, tgt.lm_head, tgt.num_layers = embed.double().cpu(), lm_head.double().cpu(), data.num_layers
    dr = ref.Drafter.from_tensors(cfg, {k: v.double() for k, v in tensors.items()}, tgt)
    s = data.n_seq - 1
    n, p = int(data.lens[s]), int(data.prompt_lens[s])
    t = min(n - 2, p + (n - p) // 2)
    if t < p:
        return 0.0
    toks, taps, _ = data.batch(data.starts[s: s + 1].to(data.device), n)
    taps, toks = taps[0].double().cpu(), toks[0].cpu()
    ctx = ref.features_from_taps(dr, taps[:t])
    blk = ref.draft_block(dr, ctx, int(toks[t]), gamma)

    m = Drafter(cfg, tgt.embed, tgt.lm_head).double()
    for k, v in export_tensors(m).items():
        v.copy_(tensors[k].double())
    h = m.block_hidden(taps.unsqueeze(0), toks.unsqueeze(0), torch.tensor([[t]]),
                       torch.tensor([n]), gamma, mask_id)[0, 0]
    u = h @ tgt.lm_head.T
    err = float((u - blk.base_logits).abs().max() / blk.base_logits.abs().max())
    w1 = m.markov_w1(torch.tensor([int(toks[t])]))
    z0 = u[0] + m.markov_w2(w1)[0]
    err = max(err, float((z0 - blk.corrected_logits[0]).abs().max() / z0.abs().max()))
    c0 = torch.sigmoid(m.confidence(torch.cat([h[0:1], w1], -1)))[0, 0]
    err = max(err, float((c0 - blk.confidence[0]).abs()))
    return err


# ---- main -----------------------------------------------------------------------------------------


def chain_rounds(anchor, lens, prompt_lens, L):
    """Greedy speculative decoding along each sequence, from its accepted prefix lengths L[b, a]
    at every anchor a (anchor[b, a] = t, all response positions): the first round's anchor is the
    first response token; a round accepting L(t) drafts emits L(t) + 1 tokens and the next anchor
    is t + L(t) + 1. Returns [(tokens emitted, rounds)] per sequence of the batch."""
    out = []
    anchor, L = anchor.cpu().numpy(), L.cpu().numpy()
    for b in range(anchor.shape[0]):
        emitted, rounds = 0, 0
        acc = {int(t): int(l) for t, l in zip(anchor[b], L[b]) if t >= 0}
        t, end = int(prompt_lens[b]), int(lens[b]) - 1
        while t < end and t in acc:
            step = min(acc[t] + 1, end - t)
            emitted += step
            rounds += 1
            t += step
        out.append((emitted, rounds))
    return out


# ---- held-out metrics by prompt source ----------------------------------------------------------


def read_prompt_sources(files: list) -> dict:
    """{prompt id: source} from prompt files (JSON lines with "id" and "source", as written by
    make_prompts.py: "template:<kind>", "stdlib:<module>", "code:<module>", "pydoc:<topic>");
    lines without a source are skipped. An id without "id" is its line number, as dspark regen
    numbers them."""
    out = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            n = 0
            for line in f:
                if not line.strip():
                    continue
                j = json.loads(line)
                pid = j.get("id", n)
                pid = pid if isinstance(pid, str) else json.dumps(pid)
                n += 1
                if isinstance(j.get("source"), str):
                    out[pid] = j["source"]
    return out


def source_groups(source: str | None) -> list:
    """The groups a sequence counts in: its source family (the part before ':'), and for templated
    questions also the template kind ("template:arith"); "unknown" without a source."""
    if not source:
        return ["unknown"]
    family = source.split(":", 1)[0]
    return [family, source] if family == "template" and source != family else [family]


def tau_by_source(sources: list, rounds: list, rounds_nm: list) -> dict:
    """{group: {sequences, tau_greedy, tau_greedy_no_markov, rounds}} over held-out sequences with
    sources[i] and chain_rounds results rounds[i] (Markov on) / rounds_nm[i] (off); families first
    (most sequences first), each template kind after the families."""
    acc = {}
    for src, (e, r), (en, rn) in zip(sources, rounds, rounds_nm):
        for g in source_groups(src):
            a = acc.setdefault(g, [0, 0, 0, 0, 0])
            a[0] += 1
            a[1] += e
            a[2] += r
            a[3] += en
            a[4] += rn
    order = sorted(acc, key=lambda g: (":" in g, -acc[g][0], g))
    return {g: {"sequences": acc[g][0], "tau_greedy": round(acc[g][1] / max(1, acc[g][2]), 4),
                "tau_greedy_no_markov": round(acc[g][3] / max(1, acc[g][4]), 4),
                "rounds": acc[g][2]} for g in order}


def format_by_source(by_source: dict) -> str:
    """One short line: "template 3.91/120 (arith 4.52/30, ...), stdlib 3.10/80" (tau/sequences)."""
    fam = [g for g in by_source if ":" not in g]
    parts = []
    for g in fam:
        s = f"{g} {by_source[g]['tau_greedy']:.2f}/{by_source[g]['sequences']}"
        kinds = [k for k in by_source if k.startswith(g + ":")]
        if kinds:
            s += " (" + ", ".join(f"{k.split(':', 1)[1]} {by_source[k]['tau_greedy']:.2f}/"
                                  f"{by_source[k]['sequences']}" for k in kinds) + ")"
        parts.append(s)
    return ", ".join(parts)


def evaluate(model, data, val_ids, args, weights, lm_head, mask_id, autocast, per_sequence=False):
    """Held-out metrics with EVERY response position as an anchor: per-position statistics over
    uniform anchors, and tau of greedy speculative decoding simulated along each sequence
    (chain_rounds; uniform-anchor averages overweight the easy stretches that decoding crosses in
    few rounds); by prompt source when the sequences' sources are known (data.seq_source), and
    per sequence with `per_sequence`."""
    model.eval()
    rng = np.random.default_rng(1234)
    agg = None
    seq_rounds, seq_rounds_nm = [], []  # chain_rounds per held-out sequence, in val_ids order
    loss_sum, n_batches = 0.0, 0
    batch = max(1, args.eval_batch)
    with torch.no_grad(), autocast():
        for i in range(0, len(val_ids), batch):
            ids = val_ids[i: i + batch]
            starts, lens, n_max, anchor = sample_batch(data, ids, 0, args.gamma, rng)
            toks, taps, final = data.batch(starts, n_max)
            h = model.block_hidden(taps, toks, anchor, lens, args.gamma, mask_id)
            valid, gidx, pos = gather_rows(data, starts, lens, anchor, args.gamma)
            loss, st = block_loss(model, data, h, valid, gidx, pos, final, args.gamma, weights,
                                  lm_head)
            loss_sum += float(loss)
            n_batches += 1
            L, _ = accepted_prefix(valid, st.pop("match_rows"))
            Ln, _ = accepted_prefix(valid, st.pop("match_rows_nm"))
            plens = data.prompt_lens[ids].tolist()
            seq_rounds += chain_rounds(anchor, lens, plens, L)
            seq_rounds_nm += chain_rounds(anchor, lens, plens, Ln)
            agg = st if agg is None else {k: agg[k] + st[k] for k in agg}
    model.train()
    em, rd = sum(e for e, _ in seq_rounds), sum(r for _, r in seq_rounds)
    em_nm, rd_nm = sum(e for e, _ in seq_rounds_nm), sum(r for _, r in seq_rounds_nm)
    rows = agg["rows"].clamp(min=1)
    accept = (agg["accept"] / rows).tolist()
    out = {
        "loss": loss_sum / max(1, n_batches),
        "tau_greedy": em / max(1, rd),
        "tau_greedy_no_markov": em_nm / max(1, rd_nm),
        "tau_analytic_uniform": 1.0 + float(np.sum(np.cumprod(accept))),
        "match_by_position": [round(x, 4) for x in (agg["match"] / rows).tolist()],
        "match_no_markov_by_position": [round(x, 4) for x in (agg["match_nomarkov"] / rows).tolist()],
        "accept_by_position": [round(x, 4) for x in accept],
        "confidence_by_position": [round(x, 4) for x in (agg["conf"] / rows).tolist()],
        "ce_by_position": [round(x, 4) for x in (agg["ce"] / rows).tolist()],
        "rounds": rd,
    }
    if data.seq_source is not None:  # --prompts-file: tau by prompt source
        out["tau_by_source"] = tau_by_source([data.seq_source[i] for i in val_ids], seq_rounds,
                                             seq_rounds_nm)
    if per_sequence:
        out["per_sequence"] = [
            {"prompt": data.seq_prompt[i], "source": None if data.seq_source is None else
             data.seq_source[i], "emitted": e, "rounds": r, "emitted_no_markov": en,
             "rounds_no_markov": rn}
            for i, (e, r), (en, rn) in zip(val_ids.tolist(), seq_rounds, seq_rounds_nm)]
    return out


def by_source_suffix(ev: dict) -> str:
    """The short per-source part of an eval log line (empty without sources)."""
    return f"; by source (tau/n): {format_by_source(ev['tau_by_source'])}" \
        if "tau_by_source" in ev else ""


def log_by_source(ev: dict) -> None:
    """One line per source group (families, then template kinds)."""
    for g, v in ev.get("tau_by_source", {}).items():
        log(f"  {g:<18} tau_greedy {v['tau_greedy']:.3f} (no markov "
            f"{v['tau_greedy_no_markov']:.3f}), {v['sequences']} sequences, {v['rounds']} rounds")


def eval_only(args, model, data, val_ids, weights, lm_head, mask_id, autocast, cfg,
              init_from) -> int:
    """--eval-only: the --init drafter's held-out metrics (per source, per sequence), logged and
    written to OUT/eval_metrics.json when --out is given."""
    t0 = time.time()
    ev = evaluate(model, data, val_ids, args, weights, lm_head, mask_id, autocast,
                  per_sequence=True)
    log(f"eval-only {args.init}: {len(val_ids)} sequences in {time.time() - t0:.1f} s; tau_greedy "
        f"{ev['tau_greedy']:.4f} (no markov {ev['tau_greedy_no_markov']:.4f}, analytic "
        f"{ev['tau_analytic_uniform']:.4f}) loss {ev['loss']:.4f}, {ev['rounds']} rounds; match@k "
        f"{ev['match_by_position']}{data.target_report()}")
    log_by_source(ev)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        res = {"init": os.path.abspath(args.init), "init_from": init_from, "drafter": cfg,
               "data": {"directories": list(args.data), "sequences": int(data.n_seq),
                        "evaluated": int(len(val_ids)),
                        "selection": "held-out split" if args.eval_held_out else "all",
                        "prompts_files": list(args.prompts_file),
                        "hidden_states_stored": data.stored, "tap_layers": data.tap_layers},
               "device": str(args.device), "target_forward": data.target_stats(), "eval": ev}
        path = os.path.join(args.out, "eval_metrics.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
            f.write("\n")
        log(f"wrote {path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, nargs="+", help="regen output directories")
    ap.add_argument("--out", default="",
                    help="drafter directory to write (--eval-only: where eval_metrics.json goes)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--minutes", type=float, default=5.0, help="training time budget")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time)")
    ap.add_argument("--schedule-minutes", type=float, default=0.0,
                    help="length of the cosine learning-rate schedule in minutes when it spans "
                         "several calls (0: --minutes)")
    ap.add_argument("--schedule-start", type=float, default=0.0,
                    help="minutes of --schedule-minutes already trained by earlier calls (with "
                         "--init: this call continues the schedule from there)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--markov-rank", type=int, default=96)
    ap.add_argument("--head-dim", type=int, default=0)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--intermediate", type=int, default=0)
    ap.add_argument("--rope-theta", type=float, default=100000.0)
    ap.add_argument("--gamma", type=int, default=7, help="block size")
    ap.add_argument("--anchors", type=int, default=0,
                    help="anchors per sequence per step [cuda 48, cpu 16]")
    ap.add_argument("--batch", type=int, default=0, help="sequences per step [cuda 32, cpu 8]")
    ap.add_argument("--eval-batch", type=int, default=4, help="sequences per evaluation pass")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--val-fraction", type=float, default=0.03,
                    help="held-out share of the first --data directory's prompts")
    ap.add_argument("--val-max", type=int, default=256, help="held-out prompts at most")
    ap.add_argument("--target-weights", default="",
                    help="target_weights.safetensors [the first --data directory's]; written "
                         "with --all-target-weights it lets shards without hidden states train")
    ap.add_argument("--taps", default="",
                    help="tap layers when the target's forward computes the hidden states "
                         "[stored shards: theirs; else 5 spread over the depth, as pipeline.sh]")
    ap.add_argument("--on-the-fly", action="store_true",
                    help="compute taps / final hidden states with the target's forward even when "
                         "the shards hold them (default: only when they do not)")
    ap.add_argument("--eval-every", type=float, default=60.0, help="seconds between evaluations")
    ap.add_argument("--log-every", type=float, default=10.0, help="seconds between log lines")
    ap.add_argument("--mask-token-id", type=int, default=-1,
                    help="default: the least frequent token id of the data (ties: lowest id)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--untrained", action="store_true", help="export the initial weights (tests)")
    ap.add_argument("--init", default="",
                    help="start from this exported drafter (config.json + model.safetensors) "
                         "instead of random weights; its config must fit the run (same drafter "
                         "flags, taps, gamma, target); optimizer and schedule start fresh, and "
                         "its held-out prompts (train_metrics.json) stay held out")
    ap.add_argument("--eval-only", action="store_true",
                    help="with --init: only evaluate that drafter (its config gives the shape; "
                         "the drafter flags are ignored) on every sequence of --data, or on the "
                         "training split's held-out ones with --eval-held-out")
    ap.add_argument("--eval-held-out", action="store_true",
                    help="--eval-only: the held-out sequences a training run on this --data "
                         "would use (the --init run's held-out prompts when it lists them)")
    ap.add_argument("--prompts-file", nargs="+", default=[],
                    help="the prompt files of the regen runs (JSON lines with id and source, as "
                         "make_prompts.py writes them): held-out tau by source family "
                         "(template, stdlib, code, pydoc) and template kind")
    args = ap.parse_args()
    if args.eval_only and not args.init:
        raise SystemExit("--eval-only needs --init DIR (the drafter to evaluate)")
    if not args.eval_only and not args.out:
        raise SystemExit("--out DIR is required (the drafter directory to write)")
    init_cfg, init_metrics = read_init(args.init) if args.init else (None, None)
    if args.eval_only:
        init_from_config(args, init_cfg)

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.anchors = args.anchors or (48 if cuda else 16)
    args.batch = args.batch or (32 if cuda else 8)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    t0 = time.time()
    data = RegenData(args.data, device, on_the_fly=args.on_the_fly)
    tw = args.target_weights or os.path.join(args.data[0], "target_weights.safetensors")
    init_taps = list(init_cfg.get("target_layer_ids", [])) if init_cfg else []
    if data.stored:
        if args.taps and [int(t) for t in args.taps.split(",")] != data.tap_layers:
            raise SystemExit(f"--taps {args.taps}: the shards hold taps {data.tap_layers} "
                             "(--on-the-fly computes others)")
        embed, lm_head = data.load_target_weights(tw, device)
        source = "stored in the shards"
    else:
        target = TargetModel(tw, device)
        taps = [int(t) for t in args.taps.split(",")] if args.taps else (
            init_taps or default_taps(data.num_layers))
        data.use_target(target, taps)
        embed, lm_head = target.embed, target.lm_head
        source = (f"computed by the target's forward ({tw}: weights {target.weight_dtype}, "
                  f"compute {str(target.dtype).replace('torch.', '')})")
    log(f"data: {data.n_seq} sequences, {data.n_tokens} tokens "
        f"({int(data.loss_mask.sum())} response) from {len(args.data)} directories, taps "
        f"{data.tap_layers} of {data.num_layers} layers, hidden {data.hidden}, vocab {data.vocab}; "
        f"hidden states {source}; loaded in {time.time() - t0:.1f} s")
    if args.prompts_file:
        n_src = data.set_sources(read_prompt_sources(args.prompts_file))
        log(f"prompt sources ({', '.join(args.prompts_file)}): {n_src} of {data.n_seq} "
            f"sequences" + ("" if n_src else ": no prompt id matches, no per-source metrics"))
    if args.mask_token_id >= 0:
        mask_id = args.mask_token_id
    elif init_cfg and "mask_token_id" in init_cfg:  # the --init drafter's (learned with it)
        mask_id = int(init_cfg["mask_token_id"])
    else:
        counts = torch.bincount(data.tokens, minlength=data.vocab)
        mask_id = int(torch.argmin(counts))
    cfg = drafter_config(args, data, mask_id)
    if init_cfg is not None:
        check_init_config(cfg, init_cfg, args.init)
    log(f"drafter: {cfg['num_hidden_layers']} layers, d {cfg['hidden_size']}, heads "
        f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']}x{cfg['head_dim']}, "
        f"intermediate {cfg['intermediate_size']}, markov rank {cfg['markov_rank']}, "
        f"gamma {args.gamma}, mask token {mask_id}")

    model = Drafter(cfg, embed, lm_head).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"trainable parameters: {n_params / 1e6:.2f} M ({2 * n_params / 2**20:.1f} MiB bf16)")
    init_from = None
    if args.init:
        n_loaded = load_init(model, args.init)
        init_from = init_record(args.init, init_cfg)
        log(f"init: {n_loaded} tensors from {args.init} (trained {init_from['steps']} steps, "
            f"{init_from['train_seconds']} s on {init_from['sequences']} sequences; cumulative "
            f"{init_from['cumulative_steps']} steps; held-out tau {init_from['val_tau_greedy']})")
    all_seqs = args.eval_only and not args.eval_held_out  # no split needed
    held_prompts = None if all_seqs else (init_metrics or {}).get("val_prompts")
    if held_prompts is not None:
        first = {p for p, d in zip(data.seq_prompt, data.seq_dir) if d == 0}
        n_there = len(first & set(held_prompts))
        if n_there == 0:
            log(f"warning: none of the {len(held_prompts)} held-out prompts of {args.init} is in "
                "the data: a new draw (the held-out tau may include prompts it trained on)")
            held_prompts = None
        else:
            log(f"held-out prompts: the {len(held_prompts)} of {args.init} ({n_there} in the data)")
    elif args.init and not all_seqs:
        log(f"warning: {args.init} lists no held-out prompts (train_metrics.json val_prompts): a "
            "new draw (the held-out tau may include prompts it trained on)")
    val_ids, train_ids = split_by_prompt(data, args.val_fraction, args.val_max, rng, held_prompts)
    if all_seqs:
        val_ids = np.arange(data.n_seq, dtype=np.int64)
    n_val = len(val_ids)
    # Recorded for a later --init run (those of the --init drafter absent from this data too).
    val_prompts = sorted({data.seq_prompt[i] for i in val_ids.tolist()} | set(held_prompts or []))
    log(f"held out: {n_val} sequences (prompts of {args.data[0]}); training on "
        f"{len(train_ids)} sequences" if not args.eval_only else
        f"evaluating {n_val} sequences ({'the held-out split' if args.eval_held_out else 'all'})")
    weights = torch.exp(-torch.arange(args.gamma, device=device, dtype=torch.float32) / args.gamma)

    def autocast():
        if cuda:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.autocast("cpu", enabled=False)

    if args.eval_only:
        return eval_only(args, model, data, val_ids, weights, lm_head, mask_id, autocast, cfg,
                         init_from)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                            betas=(0.9, 0.95))
    budget = args.minutes * 60.0
    schedule = (args.schedule_minutes or args.minutes) * 60.0
    sched_start = args.schedule_start * 60.0
    if args.schedule_minutes and sched_start + budget > schedule + 1e-6:
        sys.exit(f"--schedule-start {args.schedule_start} + --minutes {args.minutes} runs past "
                 f"--schedule-minutes {args.schedule_minutes}")
    history = []
    first = evaluate(model, data, val_ids, args, weights, lm_head, mask_id, autocast)
    log(f"eval ({'init' if args.init else 'untrained'}): tau_greedy {first['tau_greedy']:.3f} "
        f"loss {first['loss']:.4f}{by_source_suffix(first)}")
    history.append({"step": 0, "seconds": 0.0, **first})
    step, t_start = 0, time.time()
    t_log = t_eval = t_start
    tokens_seen = 0
    order = rng.permutation(train_ids)
    cursor = 0
    while not args.untrained:
        el = time.time() - t_start
        if (args.max_steps and step >= args.max_steps) or (not args.max_steps and el >= budget):
            break
        frac = step / args.max_steps if args.max_steps else (sched_start + el) / schedule
        lr = args.lr * min(1.0, (step + 1) / args.warmup)
        lr *= args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))
        for gopt in opt.param_groups:
            gopt["lr"] = lr
        if cursor + args.batch > len(order):
            order, cursor = rng.permutation(train_ids), 0
        ids = np.sort(order[cursor: cursor + args.batch])
        cursor += args.batch
        starts, lens, n_max, anchor = sample_batch(data, ids, args.anchors, args.gamma, rng)
        with autocast():
            toks, taps, final = data.batch(starts, n_max)
            h = model.block_hidden(taps, toks, anchor, lens, args.gamma, mask_id)
            valid, gidx, pos = gather_rows(data, starts, lens, anchor, args.gamma)
            if not bool(valid.any()):  # no response position in this batch
                continue
            loss, st = block_loss(model, data, h, valid, gidx, pos, final, args.gamma, weights,
                                  lm_head)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += int(valid.sum())
        now = time.time()
        if now - t_log >= args.log_every:
            t_log = now
            rows = st["rows"].clamp(min=1)
            log(f"step {step} {now - t_start:.0f}/{budget:.0f} s lr {lr:.2e} loss {float(loss.detach()):.4f} "
                f"|g| {float(gn.detach()):.2f} match@k {[round(x, 2) for x in (st['match'] / rows).tolist()]} "
                f"{tokens_seen / (now - t_start):.0f} rows/s{data.target_report()}")
        if now - t_eval >= args.eval_every:
            t_eval = now
            ev = evaluate(model, data, val_ids, args, weights, lm_head, mask_id, autocast)
            history.append({"step": step, "seconds": now - t_start, **ev})
            log(f"eval step {step}: tau_greedy {ev['tau_greedy']:.3f} (no markov "
                f"{ev['tau_greedy_no_markov']:.3f}, analytic {ev['tau_analytic_uniform']:.3f}) loss "
                f"{ev['loss']:.4f}{by_source_suffix(ev)}")
    train_s = time.time() - t_start
    round_to_bf16(model)  # the final metrics are the exported drafter's
    final = evaluate(model, data, val_ids, args, weights, lm_head, mask_id, autocast)
    history.append({"step": step, "seconds": train_s, **final})
    log(f"final: {step} steps in {train_s:.0f} s; held-out tau_greedy {final['tau_greedy']:.3f} "
        f"(no markov {final['tau_greedy_no_markov']:.3f}, analytic {final['tau_analytic_uniform']:.3f}), "
        f"match@k {final['match_by_position']}{data.target_report()}")
    log_by_source(final)

    extra = {"steps": step, "train_seconds": round(train_s, 1), "sequences": int(data.n_seq),
             "tokens": int(data.n_tokens), "val_sequences": int(n_val),
             "val_tau_greedy": round(final["tau_greedy"], 4), "seed": args.seed}
    if init_from is not None:
        extra["init_from"] = init_from
        extra["cumulative_steps"] = init_from["cumulative_steps"] + step
        extra["cumulative_train_seconds"] = round(init_from["cumulative_train_seconds"] + train_s, 1)
    tensors = export(model, cfg, args.out, extra)
    err = parity_check(cfg, tensors, data, embed, lm_head, args.gamma, mask_id)
    log(f"export: {args.out} ({sum(v.numel() for v in tensors.values()) * 2 / 2**20:.1f} MiB); "
        f"parity with tools/dspark_ref (float64, exported weights): max rel err {err:.2e}")
    if err > 1e-6:
        raise SystemExit(f"parity check failed: {err}")
    metrics = {"config": {k: v for k, v in vars(args).items()}, "drafter": cfg,
               "params": n_params, "steps": step, "train_seconds": train_s,
               "data": {"sequences": int(data.n_seq), "tokens": int(data.n_tokens),
                        "response_tokens": int(data.loss_mask.sum()), "val_sequences": int(n_val),
                        "directories": list(args.data), "hidden_states_stored": data.stored,
                        "tap_layers": data.tap_layers},
               "target_forward": data.target_stats(),
               "parity_rel_err": err, "final": final, "history": history,
               "val_prompts": val_prompts}
    if init_from is not None:
        metrics["init_from"] = init_from
        metrics["cumulative_steps"] = extra["cumulative_steps"]
        metrics["cumulative_train_seconds"] = extra["cumulative_train_seconds"]
    with open(os.path.join(args.out, "train_metrics.json"), "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
