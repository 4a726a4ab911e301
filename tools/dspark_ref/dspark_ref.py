#!/usr/bin/env python3
"""Independent PyTorch reference of the DSpark / DFlash block drafter (inference, one block).

Written from the equations (DSpark paper Eq 4-7, DESIGN.md section 1) and the published
config/tensor layouts, in plain tensor ops (no nn.Module of the published code). Loads a drafter
directory in any of three layouts, plus the target's Hugging Face checkpoint directory:

  deepspec   DeepSpec `Qwen3DSparkModel`: DSpark fields at the top level of config.json
  specforge  SpecForge `DSparkDraftModel`: the same fields nested under `dflash_config`
             (`projector_type: "dspark"`); also SpecForge's SGLang-normalised export
             (`Qwen3DSparkModel` with the fields copied to the top level)
  dflash     z-lab `DFlashDraftModel`: `dflash_config.{mask_token_id, target_layer_ids}`,
             no Markov / confidence head

Conventions (see docs/drafter-goldens.md):
  * target_layer_ids: id l >= 0 is the OUTPUT of target decoder layer l = HF hidden_states[l+1];
    -1 is the embedding output hidden_states[0]. The last target layer is rejected (HF's
    hidden_states[L] is already final-normed; DeepSpec asserts the same).
  * context: the N committed tokens t[0..N) give C = hidden_norm(fc(concat taps)) [N, d];
    context row i sits at position i. The anchor (last committed token, pending: no taps yet)
    sits at position N and is block row 0; rows 1..g-1 are the mask token.
  * attention: every block query (position N+j) sees all N context keys and all g block keys
    (non-causal), GQA, scale head_dim^-0.5, RoPE on q and k after q_norm / k_norm.
  * block row k (0-based) predicts the token at position N+1+k (DeepSpec / DSpark paper: the
    anchor is the first prediction position). z-lab DFlash instead reads rows 1..g-1 and row j
    predicts position N+j; the backbone is the same, only which rows are used differs.

Usage:
  python3 tools/dspark_ref/self_test.py       # the reference's own checks
  python3 tools/dspark_ref/dspark_ref.py --drafter DIR --target DIR [--prompt-index 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

import torch

LAYOUT_DEEPSPEC = "deepspec"
LAYOUT_SPECFORGE = "specforge"
LAYOUT_DFLASH = "dflash"

# SpecForge's early checkpoints nested the heads under `logit_head.` (its loader strips it).
_LEGACY_HEAD_PREFIXES = {
    "logit_head.markov_head.": "markov_head.",
    "logit_head.confidence_head.": "confidence_head.",
}


# ---- config ----------------------------------------------------------------------------------


@dataclass
class DrafterConfig:
    layout: str
    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    vocab_size: int
    attention_bias: bool
    rope: dict
    block_size: int
    mask_token_id: int
    target_layer_ids: list
    num_target_layers: int | None
    markov_rank: int = 0
    markov_head_type: str | None = None
    enable_confidence_head: bool = False
    confidence_head_with_markov: bool = False
    raw: dict = field(default_factory=dict, repr=False)


def rope_params(cfg: dict) -> dict:
    """RoPE parameters from a transformers >= 5 (`rope_parameters`) or legacy config."""
    params = cfg.get("rope_parameters")
    if params is None:
        params = dict(cfg.get("rope_scaling") or {})
        params.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    params = dict(params)
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params.pop("type")
    params.setdefault("rope_type", "default")
    return params


def detect_layout(cfg: dict) -> str:
    archs = cfg.get("architectures") or []
    nested = cfg.get("dflash_config") or {}
    if "DFlashDraftModel" in archs:
        if nested.get("projector_type", "dflash") not in ("dflash", None):
            raise ValueError(f"DFlashDraftModel with projector_type {nested['projector_type']!r}")
        return LAYOUT_DFLASH
    if "DSparkDraftModel" in archs:
        if nested.get("projector_type", "dspark") != "dspark":
            raise ValueError("DSparkDraftModel requires dflash_config.projector_type 'dspark'")
        return LAYOUT_SPECFORGE
    if "Qwen3DSparkModel" in archs:
        # SpecForge's SGLang-normalised export keeps `dflash_config` (projector_type dspark).
        return LAYOUT_SPECFORGE if nested.get("projector_type") == "dspark" else LAYOUT_DEEPSPEC
    raise ValueError(f"not a DSpark/DFlash drafter config: architectures={archs}")


def parse_config(cfg: dict) -> DrafterConfig:
    layout = detect_layout(cfg)
    nested = cfg.get("dflash_config") or {}

    def field_of(name, default=None, required=False):
        # DeepSpec: top level. SpecForge: nested (its normalised export copies some to the top
        # level; the two must then agree). DFlash: mask/target ids nested.
        top, sub = cfg.get(name), nested.get(name)
        if top is not None and sub is not None and top != sub:
            raise ValueError(f"config conflict for {name}: top-level {top!r} != nested {sub!r}")
        value = top if top is not None else sub
        if value is None:
            if required:
                raise ValueError(f"config field {name} is missing ({layout} layout)")
            return default
        return value

    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    layer_types = cfg.get("layer_types") or ["full_attention"] * int(cfg["num_hidden_layers"])
    if any(t != "full_attention" for t in layer_types):
        raise NotImplementedError(f"only full_attention drafter layers are modelled: {layer_types}")
    if cfg.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {cfg['hidden_act']}")

    dc = DrafterConfig(
        layout=layout,
        architecture=(cfg.get("architectures") or ["?"])[0],
        hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads", heads)),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        vocab_size=int(cfg["vocab_size"]),
        attention_bias=bool(cfg.get("attention_bias", False)),
        rope=rope_params(cfg),
        block_size=int(cfg["block_size"]),
        mask_token_id=int(field_of("mask_token_id", required=True)),
        target_layer_ids=[int(x) for x in field_of("target_layer_ids", required=True)],
        num_target_layers=cfg.get("num_target_layers"),
        raw=cfg,
    )
    if layout != LAYOUT_DFLASH:
        required = layout == LAYOUT_DEEPSPEC  # DeepSpec asserts them; SpecForge has defaults
        dc.markov_rank = int(field_of("markov_rank", 0, required) or 0)
        if dc.markov_rank > 0:
            dc.markov_head_type = str(field_of("markov_head_type", "vanilla", required)).lower()
            if dc.markov_head_type not in ("vanilla", "gated", "rnn"):
                raise ValueError(f"markov_head_type {dc.markov_head_type!r}")
        alpha = float(field_of("confidence_head_alpha", 0.0) or 0.0)
        dc.enable_confidence_head = bool(field_of("enable_confidence_head", alpha > 0.0, required))
        if dc.enable_confidence_head:
            dc.confidence_head_with_markov = bool(
                field_of("confidence_head_with_markov", False, required)
            )
        if dc.confidence_head_with_markov and dc.markov_rank == 0:
            raise ValueError("confidence_head_with_markov requires markov_rank > 0")
    ids = dc.target_layer_ids
    if not ids or any(b <= a for a, b in zip(ids, ids[1:])) or ids[0] < -1:
        raise ValueError(f"target_layer_ids must be strictly increasing, >= -1: {ids}")
    return dc


# ---- weights ---------------------------------------------------------------------------------


def load_safetensors_dir(path: str) -> dict:
    """All tensors of model.safetensors or of a model.safetensors.index.json shard set."""
    from safetensors.torch import load_file

    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        for k, v in load_file(os.path.join(path, name)).items():
            if k in out:
                raise ValueError(f"tensor {k} appears in two shards")
            out[k] = v
    return out


def expected_tensors(dc: DrafterConfig) -> dict:
    """name -> shape of every tensor the drafter must have (own embed/lm_head are optional)."""
    d, hd, r, v = dc.hidden_size, dc.head_dim, dc.markov_rank, dc.vocab_size
    q, kv, inter = dc.num_heads * hd, dc.num_kv_heads * hd, dc.intermediate_size
    shapes = {
        "fc.weight": (d, len(dc.target_layer_ids) * d),
        "hidden_norm.weight": (d,),
        "norm.weight": (d,),
    }
    for i in range(dc.num_layers):
        p = f"layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (d,),
                p + "post_attention_layernorm.weight": (d,),
                p + "self_attn.q_proj.weight": (q, d),
                p + "self_attn.k_proj.weight": (kv, d),
                p + "self_attn.v_proj.weight": (kv, d),
                p + "self_attn.o_proj.weight": (d, q),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (inter, d),
                p + "mlp.up_proj.weight": (inter, d),
                p + "mlp.down_proj.weight": (d, inter),
            }
        )
        if dc.attention_bias:
            for n, s in (("q", q), ("k", kv), ("v", kv), ("o", d)):
                shapes[p + f"self_attn.{n}_proj.bias"] = (s,)
    if r > 0:
        shapes["markov_head.markov_w1.weight"] = (v, r)  # nn.Embedding(V, r)
        shapes["markov_head.markov_w2.weight"] = (v, r)  # nn.Linear(r, V)
        if dc.markov_head_type == "gated":
            shapes["markov_head.gate_proj.weight"] = (r, d + r)
            shapes["markov_head.gate_proj.bias"] = (r,)
        elif dc.markov_head_type == "rnn":
            shapes["markov_head.joint_proj.weight"] = (3 * r, 2 * r + d)
            shapes["markov_head.joint_proj.bias"] = (3 * r,)
    if dc.enable_confidence_head:
        shapes["confidence_head.proj.weight"] = (
            1,
            d + (r if dc.confidence_head_with_markov else 0),
        )
        shapes["confidence_head.proj.bias"] = (1,)
    return shapes


class Target:
    """The target model through transformers (taps, embedding, LM head), in float64 by default."""

    def __init__(self, path: str, dtype=torch.float64):
        import transformers

        self.path = path
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation="eager"
        ).eval()
        self.config = self.model.config
        self.num_layers = int(self.config.num_hidden_layers)
        self.embed = self.model.get_input_embeddings().weight.detach()
        self.lm_head = self.model.get_output_embeddings().weight.detach()

    @torch.no_grad()
    def hidden_states(self, tokens) -> tuple:
        ids = torch.as_tensor(tokens, dtype=torch.long).view(1, -1)
        out = self.model(ids, output_hidden_states=True)
        return tuple(h[0] for h in out.hidden_states)


class Drafter:
    """Drafter weights (dtype of choice) + the embedding / LM head it uses (own or target's)."""

    def __init__(self, path: str, target: Target, dtype=torch.float64):
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            self.cfg = parse_config(json.load(f))
        raw = load_safetensors_dir(path)
        for old, new in _LEGACY_HEAD_PREFIXES.items():
            for k in [k for k in raw if k.startswith(old)]:
                raw[new + k[len(old) :]] = raw.pop(k)
        self.path = path
        self.init(raw, target, dtype)

    @classmethod
    def from_tensors(cls, cfg: dict, tensors: dict, target, dtype=torch.float64) -> "Drafter":
        self = cls.__new__(cls)
        self.cfg = parse_config(cfg)
        self.path = None
        self.init(dict(tensors), target, dtype)
        return self

    def init(self, raw: dict, target, dtype) -> None:
        dc = self.cfg
        shapes = expected_tensors(dc)
        own = {"embed_tokens.weight", "lm_head.weight"}
        unknown = sorted(set(raw) - set(shapes) - own)
        missing = sorted(set(shapes) - set(raw))
        if unknown or missing:
            raise ValueError(f"drafter tensors: missing {missing}, unexpected {unknown}")
        for k, s in shapes.items():
            if tuple(raw[k].shape) != s:
                raise ValueError(f"{k}: shape {tuple(raw[k].shape)}, expected {s}")
        self.w = {k: v.to(dtype) for k, v in raw.items()}
        v, d = dc.vocab_size, dc.hidden_size
        for name, attr in (("embed_tokens.weight", "embed"), ("lm_head.weight", "lm_head")):
            if name in self.w:
                tensor, source = self.w[name], "drafter"
            else:
                tensor, source = getattr(target, attr).to(dtype), "target"
            if tuple(tensor.shape) != (v, d):
                raise ValueError(
                    f"{attr} ({source}) has shape {tuple(tensor.shape)}, want {(v, d)}"
                )
            setattr(self, attr, tensor)
            setattr(self, attr + "_source", source)
        if target is not None and hasattr(target, "num_layers"):
            last = target.num_layers - 1
            if any(l >= last for l in dc.target_layer_ids):
                raise ValueError(
                    f"target_layer_ids {dc.target_layer_ids}: ids must be < {last} (the last "
                    "layer's HF hidden state is final-normed)"
                )

    @property
    def dtype(self):
        return self.embed.dtype


# ---- primitives ------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_inv_freq(rope: dict, head_dim: int) -> tuple:
    """(inverse frequencies [head_dim/2] float64, attention scaling) for the supported types."""
    theta = float(rope["rope_theta"])
    kind = rope.get("rope_type", "default")
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / float(rope["factor"]), 1.0
    if kind == "llama3":
        factor = float(rope["factor"])
        lo, hi = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
        old = float(rope["original_max_position_embeddings"])
        out = []
        for f in inv.tolist():
            wavelen = 2 * math.pi / f
            if wavelen < old / hi:  # high frequency: kept
                out.append(f)
            elif wavelen > old / lo:  # low frequency: divided by factor
                out.append(f / factor)
            else:  # smooth interpolation between the two
                s = (old / wavelen - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
        return torch.tensor(out, dtype=torch.float64), 1.0
    raise NotImplementedError(f"rope_type {kind!r}")


def rope_cos_sin(rope: dict, head_dim: int, positions, dtype) -> tuple:
    inv, scale = rope_inv_freq(rope, head_dim)
    ang = torch.as_tensor(positions, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)  # half-split (rotate_half) layout, as HF Llama/Qwen
    return (ang.cos() * scale).to(dtype), (ang.sin() * scale).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [rows, heads, hd]; cos/sin [rows, hd]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


# ---- backbone --------------------------------------------------------------------------------


@dataclass
class LayerTrace:
    ctx_k: torch.Tensor  # [N, kv_heads*hd] after k_norm + RoPE (what a KV cache holds)
    ctx_v: torch.Tensor  # [N, kv_heads*hd]
    out: torch.Tensor  # [g, d] residual stream after the layer


def project_kv(dr: Drafter, i: int, x: torch.Tensor, positions) -> tuple:
    """K (k_norm + RoPE) and V of rows x [rows, d] at `positions`, for drafter layer i."""
    dc, w, p = dr.cfg, dr.w, f"layers.{i}.self_attn."
    kvh, hd = dc.num_kv_heads, dc.head_dim
    k = linear(x, w[p + "k_proj.weight"], w.get(p + "k_proj.bias")).view(-1, kvh, hd)
    v = linear(x, w[p + "v_proj.weight"], w.get(p + "v_proj.bias")).view(-1, kvh, hd)
    k = rms_norm(k, w[p + "k_norm.weight"], dc.rms_norm_eps)
    cos, sin = rope_cos_sin(dc.rope, hd, positions, x.dtype)
    return apply_rope(k, cos, sin), v


def attention(dr: Drafter, i: int, xn: torch.Tensor, ctx: torch.Tensor, start: int):
    """Block rows xn [g, d] (normed) at positions start..start+g-1 attend, non-causally, over
    ctx [N, d] (positions 0..N-1, N == start) followed by the block itself."""
    dc, w, p = dr.cfg, dr.w, f"layers.{i}.self_attn."
    g, nh, kvh, hd = xn.shape[0], dc.num_heads, dc.num_kv_heads, dc.head_dim
    n = ctx.shape[0]
    block_pos = list(range(start, start + g))
    q = linear(xn, w[p + "q_proj.weight"], w.get(p + "q_proj.bias")).view(g, nh, hd)
    q = rms_norm(q, w[p + "q_norm.weight"], dc.rms_norm_eps)
    cos, sin = rope_cos_sin(dc.rope, hd, block_pos, xn.dtype)
    q = apply_rope(q, cos, sin)
    k_ctx, v_ctx = project_kv(dr, i, ctx, list(range(n)))
    k_blk, v_blk = project_kv(dr, i, xn, block_pos)
    k = torch.cat([k_ctx, k_blk], 0)  # [N+g, kvh, hd]
    v = torch.cat([v_ctx, v_blk], 0)
    group = nh // kvh
    out = torch.empty(g, nh, hd, dtype=xn.dtype)
    for h in range(nh):  # GQA: query head h reads kv head h // group
        kh, vh = k[:, h // group, :], v[:, h // group, :]
        scores = (q[:, h, :] @ kh.T) / math.sqrt(hd)  # [g, N+g], no mask
        out[:, h, :] = torch.softmax(scores, dim=-1) @ vh
    o = linear(out.reshape(g, nh * hd), w[p + "o_proj.weight"], w.get(p + "o_proj.bias"))
    return o, k_ctx.reshape(n, kvh * hd), v_ctx.reshape(n, kvh * hd)


def decoder_layer(dr: Drafter, i: int, x: torch.Tensor, ctx: torch.Tensor, start: int):
    dc, w, p = dr.cfg, dr.w, f"layers.{i}."
    xn = rms_norm(x, w[p + "input_layernorm.weight"], dc.rms_norm_eps)
    a, k_ctx, v_ctx = attention(dr, i, xn, ctx, start)
    x = x + a
    xn = rms_norm(x, w[p + "post_attention_layernorm.weight"], dc.rms_norm_eps)
    gate = linear(xn, w[p + "mlp.gate_proj.weight"])
    up = linear(xn, w[p + "mlp.up_proj.weight"])
    x = x + linear(torch.nn.functional.silu(gate) * up, w[p + "mlp.down_proj.weight"])
    return x, LayerTrace(k_ctx, v_ctx, x)


def target_taps(target: Target, layer_ids, tokens) -> torch.Tensor:
    """[len(tokens), m*H]: HF hidden_states[l+1] for l >= 0, hidden_states[0] for l == -1."""
    hs = target.hidden_states(tokens)
    return torch.cat([hs[0 if l == -1 else l + 1] for l in layer_ids], dim=-1)


def features_from_taps(dr: Drafter, taps: torch.Tensor) -> torch.Tensor:
    fused = linear(taps.to(dr.dtype), dr.w["fc.weight"])
    return rms_norm(fused, dr.w["hidden_norm.weight"], dr.cfg.rms_norm_eps)


def context_features(target: Target, dr: Drafter, tokens) -> torch.Tensor:
    """C [N, d] for the committed tokens (all of `tokens` are context rows 0..N-1)."""
    return features_from_taps(dr, target_taps(target, dr.cfg.target_layer_ids, tokens))


def backbone(dr: Drafter, ctx: torch.Tensor, block_ids) -> tuple:
    """Post-final-norm block hidden h [g, d] and the per-layer traces; block row j at N + j."""
    ids = torch.as_tensor(block_ids, dtype=torch.long)
    x = dr.embed[ids]
    traces = []
    for i in range(dr.cfg.num_layers):
        x, tr = decoder_layer(dr, i, x, ctx, start=ctx.shape[0])
        traces.append(tr)
    return rms_norm(x, dr.w["norm.weight"], dr.cfg.rms_norm_eps), traces


# ---- sequential heads ------------------------------------------------------------------------


def markov_step(dr: Drafter, state, prev: int, h_k: torch.Tensor):
    """(bias [V], new state) of the sequential head for one position; prev = x_{k-1}."""
    dc, w = dr.cfg, dr.w
    e = w["markov_head.markov_w1.weight"][prev]  # W1[x_{k-1}], [r]
    w2 = w["markov_head.markov_w2.weight"]  # [V, r]
    if dc.markov_head_type == "vanilla":  # Eq 5
        return w2 @ e, state
    if dc.markov_head_type == "gated":
        gate = torch.sigmoid(
            linear(
                torch.cat([h_k, e]),
                w["markov_head.gate_proj.weight"],
                w["markov_head.gate_proj.bias"],
            )
        )
        return w2 @ (gate * e), state
    # rnn, Eq 6: z = [s_{k-1}; W1[x_{k-1}]; h_k]; joint_proj rows = [gate; candidate; output]
    r = dc.markov_rank
    z = linear(
        torch.cat([state, e, h_k]),
        w["markov_head.joint_proj.weight"],
        w["markov_head.joint_proj.bias"],
    )
    g, c, o = torch.sigmoid(z[:r]), torch.tanh(z[r : 2 * r]), z[2 * r :]
    return w2 @ torch.tanh(o), g * state + (1.0 - g) * c


def confidence(dr: Drafter, h_k: torch.Tensor, prev: int) -> torch.Tensor:
    """Eq 7: sigma(w . [h_k ; W1[x_{k-1}]] + b) (or w . h_k + b without the Markov feature)."""
    w = dr.w
    feat = h_k
    if dr.cfg.confidence_head_with_markov:
        feat = torch.cat([h_k, w["markov_head.markov_w1.weight"][prev]])
    logit = linear(feat, w["confidence_head.proj.weight"], w["confidence_head.proj.bias"])[0]
    return torch.sigmoid(logit)


@dataclass
class DraftBlock:
    hidden: torch.Tensor  # [g, d] post-final-norm
    base_logits: torch.Tensor  # [g, V]
    tokens: torch.Tensor  # [g] greedy (Markov-corrected where there is a head)
    corrected_logits: torch.Tensor  # [g, V] (== base_logits without a head)
    confidence: torch.Tensor | None  # [g] sigmoid, None without a confidence head
    traces: list  # LayerTrace per drafter layer

    def proposal(self, dr: Drafter) -> torch.Tensor:
        """Tokens the published decoder sends to verification: all g rows (DSpark), rows 1..g-1
        (z-lab DFlash: row 0 sits at the anchor's own position)."""
        return self.tokens[1:] if dr.cfg.layout == LAYOUT_DFLASH else self.tokens


@torch.no_grad()
def draft_block(dr: Drafter, ctx: torch.Tensor, anchor: int, gamma: int) -> DraftBlock:
    """Greedy block: inputs [anchor, mask x (gamma-1)] at positions N..N+gamma-1."""
    ids = [int(anchor)] + [dr.cfg.mask_token_id] * (gamma - 1)
    h, traces = backbone(dr, ctx.to(dr.dtype), ids)
    base = h @ dr.lm_head.T
    corrected = base.clone()
    tokens = torch.empty(gamma, dtype=torch.long)
    conf = torch.empty(gamma, dtype=dr.dtype) if dr.cfg.enable_confidence_head else None
    state = torch.zeros(dr.cfg.markov_rank, dtype=dr.dtype)
    prev = int(anchor)  # x_{-1} = anchor
    for k in range(gamma):
        if dr.cfg.markov_rank > 0:
            bias, state = markov_step(dr, state, prev, h[k])
            corrected[k] = base[k] + bias
        tokens[k] = int(torch.argmax(corrected[k]))
        if conf is not None:
            conf[k] = confidence(dr, h[k], prev)
        prev = int(tokens[k])
    return DraftBlock(h, base, tokens, corrected, conf, traces)


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    top = torch.topk(logits, 2, dim=-1).values
    return top[..., 0] - top[..., 1]


REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--drafter", help="drafter directory (config.json + model.safetensors)")
    ap.add_argument("--target", help="target HF checkpoint directory")
    ap.add_argument("--prompt-index", type=int, default=1, help="target goldens prompt p{i}")
    ap.add_argument("--gamma", type=int, default=None)
    args = ap.parse_args()
    if not (args.drafter and args.target):
        ap.error("--drafter and --target (the reference's own checks: self_test.py)")
    from safetensors import safe_open

    target = Target(args.target)
    dr = Drafter(args.drafter, target)
    with safe_open(os.path.join(args.target, "goldens.safetensors"), "pt") as f:
        tokens = f.get_tensor(f"p{args.prompt_index}.tokens").long()
    n = tokens.numel() - 1
    ctx = context_features(target, dr, tokens[:n])
    gamma = args.gamma or dr.cfg.block_size
    blk = draft_block(dr, ctx, int(tokens[n]), gamma)
    print(f"layout {dr.cfg.layout}, embed from {dr.embed_source}, lm_head from {dr.lm_head_source}")
    print(f"N = {n}, anchor {int(tokens[n])} at position {n}, gamma {gamma}")
    print("tokens     ", blk.tokens.tolist())
    print("proposal   ", blk.proposal(dr).tolist())
    print("margins    ", [round(float(m), 3) for m in top2_margin(blk.corrected_logits)])
    if blk.confidence is not None:
        print("confidence ", [round(float(c), 3) for c in blk.confidence])
    return 0


if __name__ == "__main__":
    sys.exit(main())
