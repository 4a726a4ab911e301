#!/usr/bin/env python3
"""Self-test of the drafter reference: `python3 tools/dspark_ref/self_test.py`.

Cross-checks tools/dspark_ref/dspark_ref.py against transformers' own Qwen3 modules where they
apply (RMSNorm, RoPE incl. llama3 scaling, Qwen3DecoderLayer on the block-only part, the same
layer's submodules assembled with context keys), the sequential heads against independent
formulations (full bigram matrix, separate W_g/W_c/W_o), float32 vs float64, non-causality, and
the target taps against the target goldens (tests/data/models/*/goldens.safetensors).
"""

from __future__ import annotations

import math
import os
import sys

import torch

from dspark_ref import (
    LAYOUT_DEEPSPEC,
    LAYOUT_SPECFORGE,
    REPO,
    Drafter,
    Target,
    backbone,
    decoder_layer,
    draft_block,
    expected_tensors,
    parse_config,
    rms_norm,
    rope_cos_sin,
    rope_inv_freq,
    target_taps,
)


HF_TOL = 2e-6


def _random_drafter_tensors(cfg: dict, seed: int, with_own: bool) -> dict:
    dc = parse_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in expected_tensors(dc).items():
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
        if name.endswith("norm.weight"):
            t = 1.0 + 0.2 * t
        elif len(shape) == 2 and "markov_w1" not in name:
            t = t / math.sqrt(shape[1])
        out[name] = t
    if with_own:
        for name in ("embed_tokens.weight", "lm_head.weight"):
            out[name] = torch.randn(
                dc.vocab_size, dc.hidden_size, generator=gen, dtype=torch.float64
            )
    return out


def _check(name: str, got: torch.Tensor, want: torch.Tensor, tol: float, failures: list) -> None:
    err = float((got.double() - want.double()).abs().max())
    ok = err <= tol
    print(f"  [{'ok' if ok else 'FAIL'}] {name}: max abs diff {err:.3e} (tol {tol:g})")
    if not ok:
        failures.append(name)


def _self_test_cfg(head: str, rope: dict, conf_markov: bool = True) -> dict:
    return {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 24,
        "rms_norm_eps": 1e-6,
        "vocab_size": 384,
        "attention_bias": False,
        "hidden_act": "silu",
        "rope_parameters": rope,
        "max_position_embeddings": 512,
        "block_size": 7,
        "mask_token_id": 380,
        "target_layer_ids": [0, 1, 2],
        "num_target_layers": 4,
        "num_anchors": 8,
        "markov_rank": 16,
        "markov_head_type": head,
        "enable_confidence_head": True,
        "confidence_head_with_markov": conf_markov,
    }


def _hf_layer(dr: Drafter, i: int):
    """A transformers Qwen3DecoderLayer holding drafter layer i's weights (float64, eager)."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    dc = dr.cfg
    hf_cfg = Qwen3Config(
        vocab_size=dc.vocab_size,
        hidden_size=dc.hidden_size,
        intermediate_size=dc.intermediate_size,
        num_hidden_layers=dc.num_layers,
        num_attention_heads=dc.num_heads,
        num_key_value_heads=dc.num_kv_heads,
        head_dim=dc.head_dim,
        rms_norm_eps=dc.rms_norm_eps,
        attention_bias=dc.attention_bias,
        rope_parameters=dict(dc.rope),
    )
    hf_cfg._attn_implementation = "eager"
    layer = Qwen3DecoderLayer(hf_cfg, i).double().eval()
    prefix = f"layers.{i}."
    state = {k[len(prefix) :]: v for k, v in dr.w.items() if k.startswith(prefix)}
    layer.load_state_dict(state, strict=True)
    return hf_cfg, layer


def _hf_rotary(hf_cfg, positions):
    """transformers' own cos/sin (angles in float32 there, so compare with ~1e-5 tolerance)."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    rot = Qwen3RotaryEmbedding(hf_cfg)
    x = torch.zeros(1, len(positions), dtype=torch.float64)
    return rot(x, torch.as_tensor([positions], dtype=torch.long))


def _pe(dr: Drafter, positions):
    """Our float64 cos/sin with a batch dim, for feeding transformers' modules (RoPE itself is
    checked against transformers in step 1; HF computes the angles in float32)."""
    cos, sin = rope_cos_sin(dr.cfg.rope, dr.cfg.head_dim, positions, torch.float64)
    return cos[None], sin[None]


@torch.no_grad()
def self_test() -> int:
    from transformers.models.qwen3 import modeling_qwen3 as mq

    failures: list = []
    default_rope = {"rope_type": "default", "rope_theta": 1000000.0}
    llama3_rope = {
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,
    }
    gen = torch.Generator().manual_seed(7)

    print("1. RMSNorm and RoPE vs transformers")
    x = torch.randn(5, 64, generator=gen, dtype=torch.float64)
    norm = mq.Qwen3RMSNorm(64, eps=1e-6).double()
    norm.weight.copy_(1 + 0.3 * torch.randn(64, generator=gen, dtype=torch.float64))
    # Qwen3RMSNorm normalises in float32 whatever the input dtype: every comparison with
    # transformers' modules therefore has a float32-sized tolerance (HF_TOL).
    _check("rms_norm vs Qwen3RMSNorm", rms_norm(x, norm.weight, 1e-6), norm(x), HF_TOL, failures)
    for label, rope in (("default", default_rope), ("llama3", llama3_rope)):
        dr_cfg = _self_test_cfg("vanilla", rope)
        dr = Drafter.from_tensors(dr_cfg, _random_drafter_tensors(dr_cfg, 1, True), None)
        hf_cfg, _ = _hf_layer(dr, 0)
        pos = list(range(0, 300, 7))
        cos_hf, sin_hf = _hf_rotary(hf_cfg, pos)
        cos, sin = rope_cos_sin(rope, 24, pos, torch.float64)
        _check(f"rope cos ({label}), positions <= 294", cos, cos_hf[0], 5e-5, failures)
        _check(f"rope sin ({label}), positions <= 294", sin, sin_hf[0], 5e-5, failures)
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

        inv_hf = Qwen3RotaryEmbedding(hf_cfg).inv_freq.double()
        inv, _ = rope_inv_freq(rope, 24)
        _check(
            f"rope inv_freq ({label}) relative",
            (inv - inv_hf) / inv,
            torch.zeros_like(inv),
            1e-6,
            failures,
        )

    for head in ("vanilla", "gated", "rnn"):
        for label, rope in (("default", default_rope), ("llama3", llama3_rope)):
            cfg = _self_test_cfg(head, rope, conf_markov=(head != "gated"))
            dr = Drafter.from_tensors(cfg, _random_drafter_tensors(cfg, 11, True), None)
            print(f"2. decoder layer vs transformers Qwen3 modules ({head} head, {label} rope)")
            g, n = 7, 9
            xb = torch.randn(g, 64, generator=gen, dtype=torch.float64)
            ctx = torch.randn(n, 64, generator=gen, dtype=torch.float64)
            for i in range(dr.cfg.num_layers):
                hf_cfg, layer = _hf_layer(dr, i)
                # (a) block only (N = 0): a Qwen3DecoderLayer with no mask is exactly DFlash
                # attention without context.
                pe = _pe(dr, list(range(g)))
                want = layer(xb[None], attention_mask=None, position_embeddings=pe)
                want = want[0] if isinstance(want, tuple) else want
                got, _ = decoder_layer(dr, i, xb, ctx[:0], start=0)
                _check(f"layer {i}, N=0 vs Qwen3DecoderLayer", got, want[0], HF_TOL, failures)
                # (b) with context: the same layer's HF submodules assembled the DFlash way
                # (context rows projected by k_proj/v_proj, placed before the block keys).
                att = layer.self_attn
                xn = layer.input_layernorm(xb[None])
                pe_all = _pe(dr, list(range(n + g)))
                hd = dr.cfg.head_dim
                qh = att.q_norm(att.q_proj(xn).view(1, g, -1, hd)).transpose(1, 2)
                kin = torch.cat([ctx[None], xn], 1)
                kh = att.k_norm(att.k_proj(kin).view(1, n + g, -1, hd)).transpose(1, 2)
                vh = att.v_proj(kin).view(1, n + g, -1, hd).transpose(1, 2)
                cos, sin = pe_all
                qh, _ = mq.apply_rotary_pos_emb(qh, qh, cos[:, n:], sin[:, n:])
                kh, _ = mq.apply_rotary_pos_emb(kh, kh, cos, sin)
                ao, _ = mq.eager_attention_forward(att, qh, kh, vh, None, scaling=att.scaling)
                hmid = xb[None] + att.o_proj(ao.reshape(1, g, -1))
                want = hmid + layer.mlp(layer.post_attention_layernorm(hmid))
                got, _ = decoder_layer(dr, i, xb, ctx, start=n)
                _check(f"layer {i}, N={n} vs HF submodules", got, want[0], HF_TOL, failures)

            print(f"3. heads ({head}): independent formulations")
            c = torch.randn(n, 64, generator=gen, dtype=torch.float64)
            blk = draft_block(dr, c, anchor=33, gamma=g)
            w = dr.w
            w1, w2 = w["markov_head.markov_w1.weight"], w["markov_head.markov_w2.weight"]
            prev = [33] + blk.tokens[:-1].tolist()
            if head == "vanilla":  # the full V x V bigram matrix B = W1 W2^T (Eq 5)
                bigram = w1 @ w2.T
                want = blk.base_logits + bigram[prev]
            elif head == "gated":
                gp = w["markov_head.gate_proj.weight"]
                feats = torch.cat([blk.hidden, w1[prev]], 1)
                gate = torch.sigmoid(feats @ gp.T + w["markov_head.gate_proj.bias"])
                want = blk.base_logits + (gate * w1[prev]) @ w2.T
            else:  # Eq 6 with W_g, W_c, W_o as separate matrices, batched over positions
                jp, jb = w["markov_head.joint_proj.weight"], w["markov_head.joint_proj.bias"]
                r = dr.cfg.markov_rank
                wg, wc, wo = jp[:r], jp[r : 2 * r], jp[2 * r :]
                bg, bc, bo = jb[:r], jb[r : 2 * r], jb[2 * r :]
                s = torch.zeros(r, dtype=torch.float64)
                rows = []
                for k in range(g):
                    z = torch.cat([s, w1[prev[k]], blk.hidden[k]])
                    o = wo @ z + bo
                    gk = torch.sigmoid(wg @ z + bg)
                    s = gk * s + (1 - gk) * torch.tanh(wc @ z + bc)
                    rows.append(blk.base_logits[k] + w2 @ torch.tanh(o))
                want = torch.stack(rows)
            _check(f"corrected logits ({head})", blk.corrected_logits, want, 1e-10, failures)
            ok = torch.equal(blk.tokens, blk.corrected_logits.argmax(-1))
            print(f"  [{'ok' if ok else 'FAIL'}] tokens are the argmax of corrected logits")
            if not ok:
                failures.append(f"tokens ({head})")
            pw, pb = w["confidence_head.proj.weight"], w["confidence_head.proj.bias"]
            feats = (
                torch.cat([blk.hidden, w1[prev]], 1)
                if dr.cfg.confidence_head_with_markov
                else blk.hidden
            )
            _check(
                f"confidence ({head})",
                blk.confidence,
                torch.sigmoid(feats @ pw[0] + pb),
                1e-12,
                failures,
            )

            print("4. float32 vs float64")
            t32 = {k: v.float() for k, v in dr.w.items()}
            dr32 = Drafter.from_tensors(cfg, t32, None, dtype=torch.float32)
            blk32 = draft_block(dr32, c.float(), anchor=33, gamma=g)
            _check("base logits f32 vs f64", blk32.base_logits, blk.base_logits, 1e-3, failures)

    print("5. the block is non-causal and sees the context")
    cfg = _self_test_cfg("vanilla", default_rope)
    dr = Drafter.from_tensors(cfg, _random_drafter_tensors(cfg, 5, True), None)
    c = torch.randn(6, 64, generator=gen, dtype=torch.float64)
    h_a, _ = backbone(dr, c, [33, 380, 380, 380])
    h_b, _ = backbone(dr, c, [33, 380, 380, 7])  # change the LAST block input
    d0 = float((h_a[0] - h_b[0]).abs().max())
    print(f"  [{'ok' if d0 > 1e-6 else 'FAIL'}] row 0 depends on row 3 (non-causal): {d0:.3e}")
    if d0 <= 1e-6:
        failures.append("non-causal")
    c2 = c.clone()
    c2[0] += 1.0
    h_c, _ = backbone(dr, c2, [33, 380, 380, 380])
    dctx = float((h_a - h_c).abs().max())
    print(f"  [{'ok' if dctx > 1e-6 else 'FAIL'}] context row 0 reaches the block: {dctx:.3e}")
    if dctx <= 1e-6:
        failures.append("context")

    print("6. taps vs the target goldens (HF float32 hidden states)")
    for tname in ("qwen3", "llama3"):
        tdir = os.path.join(REPO, "tests", "data", "models", tname)
        if not os.path.isdir(tdir):
            print(f"  [skip] {tdir} absent")
            continue
        from safetensors import safe_open

        target = Target(tdir)
        with safe_open(os.path.join(tdir, "goldens.safetensors"), "pt") as f:
            tokens = f.get_tensor("p1.tokens").long()
            taps = target_taps(target, [-1, 0, 2], tokens)
            hs0 = target.model.get_input_embeddings()(tokens.view(1, -1))[0]
            _check(f"{tname} tap -1 == embedding output", taps[:, :64], hs0, 1e-12, failures)
            _check(
                f"{tname} tap 0 vs p1.tap0",
                taps[:, 64:128],
                f.get_tensor("p1.tap0"),
                1e-4,
                failures,
            )
            _check(
                f"{tname} tap 2 vs p1.tap2", taps[:, 128:], f.get_tensor("p1.tap2"), 1e-4, failures
            )

    print("7. layout parsing")
    base = _self_test_cfg("rnn", default_rope)
    sf = {
        k: v
        for k, v in base.items()
        if k
        not in (
            "mask_token_id",
            "target_layer_ids",
            "markov_rank",
            "markov_head_type",
            "enable_confidence_head",
            "confidence_head_with_markov",
            "num_anchors",
        )
    }
    sf["architectures"] = ["DSparkDraftModel"]
    sf["dflash_config"] = {
        k: base[k]
        for k in (
            "mask_token_id",
            "target_layer_ids",
            "markov_rank",
            "markov_head_type",
            "enable_confidence_head",
            "confidence_head_with_markov",
        )
    }
    sf["dflash_config"]["projector_type"] = "dspark"
    a, b = parse_config(base), parse_config(sf)
    same = all(
        getattr(a, k) == getattr(b, k)
        for k in (
            "mask_token_id",
            "target_layer_ids",
            "markov_rank",
            "markov_head_type",
            "enable_confidence_head",
            "confidence_head_with_markov",
        )
    )
    ok = same and a.layout == LAYOUT_DEEPSPEC and b.layout == LAYOUT_SPECFORGE
    print(f"  [{'ok' if ok else 'FAIL'}] DeepSpec top-level == SpecForge nested fields")
    if not ok:
        failures.append("layout")

    print("self-test:", "FAILED " + ", ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(self_test())
