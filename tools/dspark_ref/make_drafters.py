#!/usr/bin/env python3
"""Builds dspark's drafter fixtures: tiny random DSpark / DFlash drafters in the three published
layouts for the tiny golden targets, and the reference outputs of tools/dspark_ref/dspark_ref.py.

    python3 tools/dspark_ref/make_drafters.py --out tests/data/drafters            # all
    python3 tools/dspark_ref/make_drafters.py --out tests/data/drafters --only qwen3_dflash
    python3 tools/dspark_ref/make_drafters.py --out tests/data/drafters --verify  # recompute

Every fixture dir gets config.json (the layout's own keys), model.safetensors (f32, the layout's
tensor names) and goldens.safetensors; names and conventions: docs/drafter-goldens.md.

Context: prompt p1 of the target's goldens.safetensors, tokens t[0..n). The first N = n-1 tokens
are context rows (their target taps, positions 0..N-1); the anchor t[N] is the pending token at
position N (block row 0). For every gamma in GAMMAS one greedy block is drafted.

Precision: the target runs in float64 (transformers, eager); the taps are rounded to float32 and
STORED; the drafter then runs in float64 from the stored f32 taps and the f32 weights, so every
golden is a function of the files alone. Outputs are stored as f32.

Seeds: per fixture SEED_TRIES seeds are tried; a seed is acceptable when, for every gamma,
  * the top-1/top-2 margin of the (corrected) logits at every row is >= MIN_MARGIN,
  * the proposal has >= MIN_DISTINCT distinct tokens and never the mask token,
  * the confidences lie in [CONF_LO, CONF_HI] and span >= CONF_SPAN over all gammas,
  * the Markov head changes at least one greedy token (vs the argmax of the base logits),
  * float32 compute (weights and taps as stored) takes the same greedy tokens,
  * (own embed / lm_head) using the target's instead moves some logit by > 1.
The acceptable seed with the largest minimum margin is kept.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import shutil
import sys
from dataclasses import dataclass

import numpy as np
import safetensors
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dspark_ref as ref  # noqa: E402

FORMAT_VERSION = "1"
GAMMAS = (4, 7, 16)
PROMPT = 1  # target goldens prompt p1
MASK_TOKEN_ID = 380  # a regular vocabulary id (the last BPE merge), not in prompt p1
MIN_MARGIN = 0.05
CONF_LO, CONF_HI, CONF_SPAN = 0.05, 0.95, 0.5
SEED_TRIES = 48
MIN_DISTINCT = {4: 2, 7: 3, 16: 6}  # distinct tokens among the proposed rows, per gamma
MARKOV_RANK = 16
DRAFT_LAYERS = 2


@dataclass
class Fixture:
    name: str
    target: str  # dir under tests/data/models
    layout: str
    block_size: int
    target_layer_ids: tuple
    seed: int  # first seed tried
    head: str | None = "vanilla"  # Markov head type (None: DFlash, no head)
    confidence: bool = True
    confidence_with_markov: bool = True
    own_embed_head: bool = False  # embed_tokens.weight / lm_head.weight in the drafter
    # weight scales (see init_tensors)
    qk_norm_gain: float = 2.0
    markov_bias_std: float = 2.5
    confidence_std: float = 1.2
    own_noise: float = 0.3


FIXTURES = [
    Fixture("qwen3_deepspec", "qwen3", ref.LAYOUT_DEEPSPEC, 7, (0, 1, 2), seed=10000),
    Fixture(
        "qwen3_deepspec_rnn",
        "qwen3",
        ref.LAYOUT_DEEPSPEC,
        7,
        (0, 1, 2),
        seed=20000,
        head="rnn",
        own_embed_head=True,
    ),
    # SpecForge layout with the gated head: covers the third head type SpecForge/DeepSpec ship.
    Fixture(
        "qwen3_specforge", "qwen3", ref.LAYOUT_SPECFORGE, 7, (0, 1, 2), seed=30000, head="gated"
    ),
    Fixture(
        "qwen3_dflash",
        "qwen3",
        ref.LAYOUT_DFLASH,
        16,
        (0, 2),
        seed=40000,
        head=None,
        confidence=False,
        confidence_with_markov=False,
    ),
    # llama3 target: tap -1 (embedding output), llama3 RoPE scaling copied from the target
    # config (DeepSpec deep-copies the target config), confidence head WITHOUT the Markov feature.
    Fixture(
        "llama3_deepspec",
        "llama3",
        ref.LAYOUT_DEEPSPEC,
        7,
        (-1, 1, 2),
        seed=50000,
        confidence_with_markov=False,
    ),
]


# ---- configs ---------------------------------------------------------------------------------


def build_config(fx: Fixture, tcfg: dict) -> dict:
    """config.json as each publisher writes it."""
    ntl = int(tcfg["num_hidden_layers"])
    layer_types = ["full_attention"] * DRAFT_LAYERS
    if fx.layout == ref.LAYOUT_DEEPSPEC:
        # deepspec/modeling/dspark/qwen3/config.py build_draft_config: deepcopy(target config)
        # plus top-level DSpark fields.
        cfg = copy.deepcopy(tcfg)
        cfg.update(
            architectures=["Qwen3DSparkModel"],
            num_target_layers=ntl,
            num_hidden_layers=DRAFT_LAYERS,
            block_size=fx.block_size,
            tie_word_embeddings=False,
            layer_types=layer_types,
            mask_token_id=MASK_TOKEN_ID,
            target_layer_ids=list(fx.target_layer_ids),
            num_anchors=64,
            enable_confidence_head=fx.confidence,
            markov_rank=MARKOV_RANK,
            markov_head_type=fx.head,
        )
        if fx.confidence:
            cfg["confidence_head_with_markov"] = fx.confidence_with_markov
        cfg.pop("pad_token_id", None)  # the drafter has no padding row semantics
        return dict(sorted(cfg.items()))
    # SpecForge configs/*-dspark.json and z-lab / SpecForge *-dflash.json: Qwen3 geometry with the
    # legacy top-level rope_theta / rope_scaling.
    assert tcfg["model_type"] == "qwen3"
    rope = tcfg["rope_parameters"]
    assert rope.get("rope_type", "default") == "default"
    cfg = {
        "architectures": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "auto_map": None,
        "block_size": fx.block_size,
        "bos_token_id": None,
        "dflash_config": None,
        "dtype": "float32",
        "eos_token_id": tcfg["eos_token_id"],
        "head_dim": tcfg["head_dim"],
        "hidden_act": "silu",
        "hidden_size": tcfg["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": tcfg["intermediate_size"],
        "layer_types": layer_types,
        "max_position_embeddings": tcfg["max_position_embeddings"],
        "max_window_layers": DRAFT_LAYERS,
        "model_type": "qwen3",
        "num_attention_heads": tcfg["num_attention_heads"],
        "num_hidden_layers": DRAFT_LAYERS,
        "num_key_value_heads": tcfg["num_key_value_heads"],
        "num_target_layers": ntl,
        "rms_norm_eps": tcfg["rms_norm_eps"],
        "rope_scaling": None,
        "rope_theta": rope["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": tcfg["vocab_size"],
    }
    if fx.layout == ref.LAYOUT_SPECFORGE:
        cfg["architectures"] = ["DSparkDraftModel"]
        cfg["auto_map"] = {"AutoModel": "dspark.DSparkDraftModel"}
        cfg["dflash_config"] = {
            "attention_mode": "gqa",
            "confidence_head_alpha": 1.0 if fx.confidence else 0.0,
            "confidence_head_with_markov": fx.confidence_with_markov,
            "enable_confidence_head": fx.confidence,
            "markov_head_type": fx.head,
            "markov_rank": MARKOV_RANK,
            "mask_token_id": MASK_TOKEN_ID,
            "projector_type": "dspark",
            "target_layer_ids": list(fx.target_layer_ids),
        }
    else:
        cfg["architectures"] = ["DFlashDraftModel"]
        cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
        cfg["dflash_config"] = {
            "mask_token_id": MASK_TOKEN_ID,
            "target_layer_ids": list(fx.target_layer_ids),
        }
    return cfg


# ---- weights ---------------------------------------------------------------------------------


def init_tensors(fx: Fixture, dc: ref.DrafterConfig, target: ref.Target, seed: int) -> dict:
    """f32 tensors under the layout's names.

    Linear weights N(0, 1/fan_in); norm weights 1 + N(0, 0.15^2), q_norm / k_norm scaled by
    qk_norm_gain (sharper attention, so the identical mask rows differ through RoPE); Markov w1
    N(0, 1) and w2 scaled so the bias has std ~ markov_bias_std (the target LM head gives base
    logits of std ~ 8); confidence weights scaled so the logit has std ~ confidence_std; own
    embed / lm_head = the target's + own_noise x their std of Gaussian noise.
    """
    gen = torch.Generator().manual_seed(seed)
    r = dc.markov_rank

    def normal(shape, std=1.0, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std + mean

    out = {}
    for name, shape in ref.expected_tensors(dc).items():
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            t = fx.qk_norm_gain * normal(shape, 0.15, 1.0)
        elif name.endswith("norm.weight"):
            t = normal(shape, 0.15, 1.0)
        elif name == "markov_head.markov_w1.weight":
            t = normal(shape)
        elif name == "markov_head.markov_w2.weight":
            # bias = w2 . v with |v|^2 ~ r (vanilla: v = w1 row; gated: ~r/2; rnn: tanh, ~r/3)
            shrink = {"vanilla": 1.0, "gated": 0.5, "rnn": 0.35}[dc.markov_head_type]
            t = normal(shape, fx.markov_bias_std / math.sqrt(r * shrink))
        elif name == "confidence_head.proj.weight":
            t = normal(shape, fx.confidence_std / math.sqrt(shape[1]))
        elif name.endswith(".bias"):
            t = normal(shape, 0.3)
        else:
            t = normal(shape, 1.0 / math.sqrt(shape[1]))
        out[name] = t
    if fx.own_embed_head:
        for name, base in (
            ("embed_tokens.weight", target.embed),
            ("lm_head.weight", target.lm_head),
        ):
            base = base.double()
            out[name] = base + normal(base.shape, fx.own_noise * float(base.std()))
    return {k: v.float().contiguous() for k, v in out.items()}


# ---- goldens ---------------------------------------------------------------------------------


def run_blocks(dr: ref.Drafter, ctx: torch.Tensor, anchor: int) -> dict:
    return {g: ref.draft_block(dr, ctx, anchor, g) for g in GAMMAS}


def evaluate(fx, cfg, tensors, target, taps32, anchor) -> tuple:
    """(acceptable, reasons, min margin, blocks, drafter) for one candidate weight set."""
    dr = ref.Drafter.from_tensors(cfg, tensors, target, dtype=torch.float64)
    ctx = ref.features_from_taps(dr, taps32.double())
    blocks = run_blocks(dr, ctx, anchor)
    reasons = []
    margins = [float(ref.top2_margin(b.corrected_logits).min()) for b in blocks.values()]
    min_margin = min(margins)
    if min_margin < MIN_MARGIN:
        reasons.append(f"margin {min_margin:.3f}")
    for g, b in blocks.items():
        prop = b.proposal(dr)
        if len(set(prop.tolist())) < MIN_DISTINCT[g]:
            reasons.append(f"g{g} distinct {len(set(prop.tolist()))}")
        if dr.cfg.mask_token_id in prop.tolist():
            reasons.append(f"g{g} proposes the mask token")
        if b.confidence is not None:
            lo, hi = float(b.confidence.min()), float(b.confidence.max())
            if lo < CONF_LO or hi > CONF_HI:
                reasons.append(f"g{g} confidence [{lo:.3f}, {hi:.3f}]")
    if dr.cfg.enable_confidence_head:
        allc = torch.cat([b.confidence for b in blocks.values()])
        if float(allc.max() - allc.min()) < CONF_SPAN:
            reasons.append(f"confidence span {float(allc.max() - allc.min()):.3f}")
    if dr.cfg.markov_rank > 0:
        changed = sum(int((b.tokens != b.base_logits.argmax(-1)).sum()) for b in blocks.values())
        if changed == 0:
            reasons.append("the Markov head changes no greedy token")
    # float32 compute (weights and taps as stored) must take the same greedy tokens
    dr32 = ref.Drafter.from_tensors(cfg, tensors, target, dtype=torch.float32)
    ctx32 = ref.features_from_taps(dr32, taps32)
    f32_err = 0.0
    for g, b in blocks.items():
        b32 = ref.draft_block(dr32, ctx32, anchor, g)
        if not torch.equal(b32.tokens, b.tokens):
            reasons.append(f"g{g} f32 tokens differ")
        f32_err = max(
            f32_err, float((b32.corrected_logits.double() - b.corrected_logits).abs().max())
        )
    if fx.own_embed_head:  # the target's embed / lm_head instead of the drafter's must show
        for drop in ("embed_tokens.weight", "lm_head.weight"):
            alt = {k: v for k, v in tensors.items() if k != drop}
            dra = ref.Drafter.from_tensors(cfg, alt, target, dtype=torch.float64)
            d = max(
                float(
                    (ref.draft_block(dra, ctx, anchor, g).base_logits - b.base_logits).abs().max()
                )
                for g, b in blocks.items()
            )
            if d < 1.0:
                reasons.append(f"using the target's {drop} moves logits by only {d:.3f}")
    return not reasons, reasons, min_margin, blocks, dr, ctx, f32_err


def golden_tensors(dr, tokens, taps32, ctx, blocks) -> dict:
    n = taps32.shape[0]
    out = {
        "ctx.tokens": tokens[: n + 1].to(torch.int32),
        "ctx.taps": taps32.float(),
        "ctx.features": ctx.float(),
    }
    first = next(iter(blocks.values()))
    for i, tr in enumerate(first.traces):  # context K/V do not depend on the block
        out[f"ctx.layer{i}.k"] = tr.ctx_k.float()
        out[f"ctx.layer{i}.v"] = tr.ctx_v.float()
    for g, b in blocks.items():
        p = f"g{g}."
        out[p + "hidden"] = b.hidden.float()
        out[p + "base_logits"] = b.base_logits.float()
        out[p + "tokens"] = b.tokens.to(torch.int32)
        out[p + "corrected_logits"] = b.corrected_logits.float()
        out[p + "margin"] = ref.top2_margin(b.corrected_logits).float()
        out[p + "proposal"] = b.proposal(dr).to(torch.int32)
        if b.confidence is not None:
            out[p + "confidence"] = b.confidence.float()
        for i, tr in enumerate(b.traces):
            out[p + f"layer{i}.out"] = tr.out.float()
    return {k: v.contiguous() for k, v in out.items()}


_ST_DTYPES = {torch.float32: "F32", torch.int32: "I32"}


def save_safetensors(tensors: dict, path: str, metadata: dict) -> None:
    """safetensors with the header keys in sorted order (the library's writer orders the
    metadata map differently on every run), so regenerating gives byte-identical files."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().tobytes()
        header[name] = {
            "dtype": _ST_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = dict(sorted(metadata.items()))
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for data in blobs:
            f.write(data)


def versions() -> dict:
    return {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "numpy_version": np.__version__,
        "python_version": platform.python_version(),
    }


def context_inputs(target: ref.Target, target_dir: str, layer_ids) -> tuple:
    from safetensors import safe_open

    with safe_open(os.path.join(target_dir, "goldens.safetensors"), "pt") as f:
        tokens = f.get_tensor(f"p{PROMPT}.tokens").long()
    n = tokens.numel() - 1
    taps32 = ref.target_taps(target, layer_ids, tokens[:n]).float()
    return tokens, n, taps32


def build_fixture(fx: Fixture, models_dir: str, out_dir: str, tries: int) -> dict:
    tdir = os.path.join(models_dir, fx.target)
    with open(os.path.join(tdir, "config.json"), encoding="utf-8") as f:
        tcfg = json.load(f)
    target = ref.Target(tdir)
    cfg = build_config(fx, tcfg)
    dc = ref.parse_config(cfg)
    assert dc.layout == fx.layout, (dc.layout, fx.layout)
    tokens, n, taps32 = context_inputs(target, tdir, dc.target_layer_ids)
    anchor = int(tokens[n])
    assert MASK_TOKEN_ID not in tokens.tolist()

    best = None
    for seed in range(fx.seed, fx.seed + tries):
        tensors = init_tensors(fx, dc, target, seed)
        ok, reasons, margin, blocks, dr, ctx, f32_err = evaluate(
            fx, cfg, tensors, target, taps32, anchor
        )
        print(
            f"  seed {seed}: {'ok' if ok else 'rejected'} margin {margin:.3f} {'; '.join(reasons)}"
        )
        if ok and (best is None or margin > best[0]):
            best = (margin, seed, tensors, blocks, dr, ctx, f32_err)
    if best is None:
        raise SystemExit(f"{fx.name}: no acceptable seed in {tries} tries")
    margin, seed, tensors, blocks, dr, ctx, f32_err = best

    goldens = golden_tensors(dr, tokens, taps32, ctx, blocks)
    ranges = {
        k: [round(float(v.min()), 4), round(float(v.max()), 4)]
        for k, v in goldens.items()
        if v.dtype == torch.float32
        and not k.startswith(("ctx.layer", "g4.layer", "g7.layer", "g16.layer"))
    }
    conf = [goldens[f"g{g}.confidence"] for g in GAMMAS if f"g{g}.confidence" in goldens]
    meta = {
        "format_version": FORMAT_VERSION,
        "generator": "tools/dspark_ref/make_drafters.py",
        "fixture": fx.name,
        "layout": dc.layout,
        "architecture": dc.architecture,
        "target": f"tests/data/models/{fx.target}",
        "prompt": f"p{PROMPT}",
        "n_context": str(n),
        "anchor": str(anchor),
        "anchor_position": str(n),
        "gammas": json.dumps(list(GAMMAS)),
        "block_size": str(dc.block_size),
        "mask_token_id": str(dc.mask_token_id),
        "target_layer_ids": json.dumps(dc.target_layer_ids),
        "markov_head_type": str(dc.markov_head_type or "none"),
        "confidence_head": (
            "none"
            if not dc.enable_confidence_head
            else ("with_markov" if dc.confidence_head_with_markov else "hidden_only")
        ),
        "embed_source": dr.embed_source,
        "lm_head_source": dr.lm_head_source,
        "row_alignment": (
            "row j predicts position N+j; proposal = tokens[1:]"
            if dc.layout == ref.LAYOUT_DFLASH
            else "row k predicts position N+1+k; proposal = tokens"
        ),
        "seed": str(seed),
        "dtype": "float64 compute from the stored f32 weights and f32 taps; stored as f32",
        "min_margin": f"{margin:.6f}",
        "min_margin_threshold": str(MIN_MARGIN),
        "f32_max_logit_error": f"{f32_err:.3e}",
        "confidence_min": f"{float(torch.cat(conf).min()):.6f}" if conf else "none",
        "confidence_max": f"{float(torch.cat(conf).max()):.6f}" if conf else "none",
        "ranges": json.dumps(ranges, sort_keys=True),
        **versions(),
    }
    fdir = os.path.join(out_dir, fx.name)
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    os.makedirs(fdir)
    with open(os.path.join(fdir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    save_safetensors(tensors, os.path.join(fdir, "model.safetensors"), {"format": "pt"})
    save_safetensors(goldens, os.path.join(fdir, "goldens.safetensors"), meta)
    summary = {
        "fixture": fx.name,
        "seed": seed,
        "min_margin": round(margin, 4),
        "f32_err": f32_err,
        "confidence": [meta["confidence_min"], meta["confidence_max"]],
        "tokens": {g: blocks[g].tokens.tolist() for g in GAMMAS},
        "bytes": sum(os.path.getsize(os.path.join(fdir, x)) for x in os.listdir(fdir)),
    }
    print(
        f"{fx.name}: seed {seed}, min margin {margin:.3f}, f32 err {f32_err:.2e}, "
        f"confidence {summary['confidence']}, {summary['bytes']} bytes"
    )
    for g in GAMMAS:
        print(f"  g{g} tokens {summary['tokens'][g]}")
    return summary


def verify_fixture(fx: Fixture, models_dir: str, out_dir: str) -> bool:
    """Reload the fixture through the file-based loader (layout parsing) and recompute."""
    from safetensors import safe_open

    fdir = os.path.join(out_dir, fx.name)
    tdir = os.path.join(models_dir, fx.target)
    target = ref.Target(tdir)
    dr = ref.Drafter(fdir, target)
    tokens, n, taps32 = context_inputs(target, tdir, dr.cfg.target_layer_ids)
    ok = True
    with safe_open(os.path.join(fdir, "goldens.safetensors"), "pt") as f:
        gold = {k: f.get_tensor(k) for k in f.keys()}
    ctx = ref.features_from_taps(dr, gold["ctx.taps"].double())
    got = golden_tensors(dr, tokens, gold["ctx.taps"], ctx, run_blocks(dr, ctx, int(tokens[n])))
    worst = 0.0
    for k in sorted(set(gold) | set(got)):
        if k not in gold or k not in got:
            print(f"  {fx.name}: {k} only in {'goldens' if k in gold else 'recomputed'}")
            ok = False
            continue
        if gold[k].dtype == torch.int32:
            if not torch.equal(gold[k], got[k]):
                print(f"  {fx.name}: {k} differs")
                ok = False
        else:
            worst = max(worst, float((gold[k].double() - got[k].double()).abs().max()))
    tap_err = float((taps32.double() - gold["ctx.taps"].double()).abs().max())
    ok = ok and worst <= 1e-5 and tap_err <= 1e-5
    print(
        f"  {fx.name}: {'ok' if ok else 'MISMATCH'} (max float diff {worst:.2e}, taps from the "
        f"target {tap_err:.2e}; embed from {dr.embed_source}, lm_head from {dr.lm_head_source})"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default=os.path.join(ref.REPO, "tests", "data", "drafters"))
    ap.add_argument("--models", default=os.path.join(ref.REPO, "tests", "data", "models"))
    ap.add_argument("--only", action="append", help="fixture name (repeatable)")
    ap.add_argument("--tries", type=int, default=SEED_TRIES)
    ap.add_argument("--verify", action="store_true", help="reload the fixtures and recompute")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    fixtures = [fx for fx in FIXTURES if not args.only or fx.name in args.only]
    if args.only and len(fixtures) != len(args.only):
        ap.error(f"unknown fixture in {args.only}; have {[fx.name for fx in FIXTURES]}")
    if args.verify:
        return 0 if all([verify_fixture(fx, args.models, args.out) for fx in fixtures]) else 1
    os.makedirs(args.out, exist_ok=True)
    summaries = [build_fixture(fx, args.models, args.out, args.tries) for fx in fixtures]
    total = sum(s["bytes"] for s in summaries)
    print(f"wrote {len(summaries)} fixtures, {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
