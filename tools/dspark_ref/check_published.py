#!/usr/bin/env python3
"""Cross-checks the drafter fixtures against the PUBLISHED model classes (optional, manual).

Loads each fixture of tests/data/drafters with the publisher's own PyTorch modules, imported at
run time from a checkout you provide (nothing of theirs is copied into this repository), runs the
publisher's inference path and compares with goldens.safetensors:

  deepspec   deepspec.modeling.dspark.qwen3.modeling.Qwen3DSparkModel via
             deepspec.eval.dspark.draft_ops.forward_dspark_draft_block (KV cache, two rounds:
             the context arrives in two pieces, as in decoding) + sample_draft_tokens +
             predict_confidence_step
  specforge  specforge.modeling.draft.dspark.DSparkDraftModel (backbone + markov_head +
             predict_confidence, all gamma rows as in its training objective)
  dflash     z-lab dflash.model.DFlashDraftModel + the target's embedding / LM head

    python3 tools/dspark_ref/check_published.py --deepspec /path/DeepSpec \
        --specforge /path/SpecForge --dflash /path/dflash

A layout whose checkout is not given is skipped. Needs the same torch / transformers as
make_drafters.py (the publishers' modules import transformers' Qwen3 building blocks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dspark_ref as ref  # noqa: E402

HF_NORM_TOL = 5e-5  # the publishers use Qwen3RMSNorm (float32 inside) on O(10) logits


def load_goldens(fdir: str) -> tuple:
    from safetensors import safe_open

    with safe_open(os.path.join(fdir, "goldens.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def qwen3_config(cfg: dict):
    from transformers import Qwen3Config

    c = Qwen3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "auto_map")})
    for k, v in cfg.items():  # keep DSpark fields / llama rope as plain attributes
        if not hasattr(c, k):
            setattr(c, k, v)
    if cfg.get("rope_parameters"):
        c.rope_parameters = dict(cfg["rope_parameters"])
    c._attn_implementation = "eager"
    return c


def compare(name: str, got: torch.Tensor, want: torch.Tensor, tol: float, fails: list) -> None:
    err = float((got.double() - want.double()).abs().max())
    ok = err <= tol
    print(f"    [{'ok' if ok else 'FAIL'}] {name}: {err:.2e} (tol {tol:g})")
    if not ok:
        fails.append(name)


def same(name: str, got, want, fails: list) -> None:
    ok = torch.equal(torch.as_tensor(got).long(), torch.as_tensor(want).long())
    print(f"    [{'ok' if ok else 'FAIL'}] {name}: {'identical' if ok else (got, want)}")
    if not ok:
        fails.append(name)


def state_from_fixture(fdir: str, target: ref.Target, want_own: bool) -> dict:
    state = {k: v.double() for k, v in ref.load_safetensors_dir(fdir).items()}
    if want_own:  # DeepSpec's module always owns embed_tokens / lm_head (copies of the target's)
        state.setdefault("embed_tokens.weight", target.embed.double())
        state.setdefault("lm_head.weight", target.lm_head.double())
    return state


def legacy_crop_cache():
    """DynamicCache whose crop(n) keeps the first n positions (the pre-5.x meaning DeepSpec's
    draft_ops relies on; transformers 5 takes a negative count of positions to drop)."""
    from transformers import DynamicCache

    class LegacyCropCache(DynamicCache):
        def crop(self, max_length: int) -> None:
            super().crop(max_length - self.get_seq_length())

    return LegacyCropCache()


@torch.no_grad()
def check_deepspec(fdir: str, target: ref.Target, gold: dict, fails: list) -> None:
    from deepspec.eval.dspark.draft_ops import forward_dspark_draft_block
    from deepspec.modeling.dspark.qwen3.modeling import Qwen3DSparkModel

    with open(os.path.join(fdir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = Qwen3DSparkModel(qwen3_config(cfg)).double().eval()
    model.load_state_dict(state_from_fixture(fdir, target, True), strict=True)
    tokens, taps = gold["ctx.tokens"].long(), gold["ctx.taps"].double()
    n = taps.shape[0]
    split = n - 3  # round 1: context rows 0..split-1, anchor at split; round 2: the rest
    for g in (4, 7, 16):
        cache = legacy_crop_cache()
        pos = torch.arange(n + g + 8).view(1, -1)
        ids1 = torch.full((1, g), model.mask_token_id, dtype=torch.long)
        ids1[0, 0] = tokens[split]
        forward_dspark_draft_block(
            model,
            draft_input_ids=ids1,
            position_ids=pos,
            past_key_values_draft=cache,
            target_hidden_states=taps[None, :split],
            start=split,
            block_size=g,
        )
        ids = torch.full((1, g), model.mask_token_id, dtype=torch.long)
        ids[0, 0] = tokens[n]
        h = forward_dspark_draft_block(
            model,
            draft_input_ids=ids,
            position_ids=pos,
            past_key_values_draft=cache,
            target_hidden_states=taps[None, split:],
            start=n,
            block_size=g,
        )
        base = model.compute_logits(h)
        toks, corrected = model.sample_draft_tokens(
            base, first_prev_token_ids=ids[:, 0], temperature=0.0, hidden_states=h
        )
        compare(f"g{g}.hidden", h[0], gold[f"g{g}.hidden"], HF_NORM_TOL, fails)
        compare(f"g{g}.base_logits", base[0], gold[f"g{g}.base_logits"], HF_NORM_TOL, fails)
        compare(
            f"g{g}.corrected_logits",
            corrected[0],
            gold[f"g{g}.corrected_logits"],
            HF_NORM_TOL,
            fails,
        )
        same(f"g{g}.tokens", toks[0], gold[f"g{g}.tokens"], fails)
        if model.confidence_head is not None:
            prev = torch.cat([ids[:, :1], toks[:, :-1]], dim=1)
            conf = model.predict_confidence_step(h, prev_token_ids=prev).sigmoid()
            compare(f"g{g}.confidence", conf[0], gold[f"g{g}.confidence"], HF_NORM_TOL, fails)


@torch.no_grad()
def check_specforge(fdir: str, target: ref.Target, gold: dict, fails: list) -> None:
    from specforge.modeling.draft.dspark import DSparkDraftModel

    with open(os.path.join(fdir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = DSparkDraftModel(qwen3_config(cfg)).double().eval()
    model.load_state_dict(state_from_fixture(fdir, target, False), strict=True)
    tokens, taps = gold["ctx.tokens"].long(), gold["ctx.taps"].double()
    n = taps.shape[0]
    for g in (4, 7, 16):
        ids = torch.full((1, g), model.mask_token_id, dtype=torch.long)
        ids[0, 0] = tokens[n]
        h = model(
            position_ids=torch.arange(n + g).view(1, -1),
            noise_embedding=target.embed.double()[ids],
            target_hidden=taps[None],
            is_causal=False,
        )
        base = h @ target.lm_head.double().T
        toks, corrected = model.markov_head.sample_block_tokens(
            base, first_prev_token_ids=ids[:, 0], hidden_states=h
        )
        compare(f"g{g}.hidden", h[0], gold[f"g{g}.hidden"], HF_NORM_TOL, fails)
        compare(
            f"g{g}.corrected_logits",
            corrected[0],
            gold[f"g{g}.corrected_logits"],
            HF_NORM_TOL,
            fails,
        )
        same(f"g{g}.tokens", toks[0], gold[f"g{g}.tokens"], fails)
        prev = torch.cat([ids[:, :1], toks[:, :-1]], dim=1)
        conf = model.predict_confidence(h, prev_token_ids=prev).sigmoid()
        compare(f"g{g}.confidence", conf[0], gold[f"g{g}.confidence"], HF_NORM_TOL, fails)


@torch.no_grad()
def check_dflash(fdir: str, target: ref.Target, gold: dict, fails: list) -> None:
    from dflash.model import DFlashDraftModel

    with open(os.path.join(fdir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = DFlashDraftModel(qwen3_config(cfg)).double().eval()
    model.load_state_dict(state_from_fixture(fdir, target, False), strict=True)
    tokens, taps = gold["ctx.tokens"].long(), gold["ctx.taps"].double()
    n = taps.shape[0]
    for g in (4, 7, 16):
        ids = torch.full((1, g), model.mask_token_id, dtype=torch.long)
        ids[0, 0] = tokens[n]
        h = model(
            position_ids=torch.arange(n + g).view(1, -1),
            noise_embedding=target.embed.double()[ids],
            target_hidden=taps[None],
            is_causal=False,
        )
        logits = h @ target.lm_head.double().T
        compare(f"g{g}.hidden", h[0], gold[f"g{g}.hidden"], HF_NORM_TOL, fails)
        compare(f"g{g}.base_logits", logits[0], gold[f"g{g}.base_logits"], HF_NORM_TOL, fails)
        # dflash_generate: block_output_ids[:, 1:] = argmax(lm_head(h[:, 1 - g:]))
        same(f"g{g}.proposal", logits[0, 1:].argmax(-1), gold[f"g{g}.proposal"], fails)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fixtures", default=os.path.join(ref.REPO, "tests", "data", "drafters"))
    ap.add_argument("--models", default=os.path.join(ref.REPO, "tests", "data", "models"))
    ap.add_argument("--deepspec", help="checkout of deepseek-ai/DeepSpec (holds deepspec/)")
    ap.add_argument("--specforge", help="checkout of sgl-project/SpecForge (holds specforge/)")
    ap.add_argument("--dflash", help="checkout of z-lab/dflash (holds dflash/)")
    args = ap.parse_args()
    checks = {
        ref.LAYOUT_DEEPSPEC: (args.deepspec, check_deepspec),
        ref.LAYOUT_SPECFORGE: (args.specforge, check_specforge),
        ref.LAYOUT_DFLASH: (args.dflash, check_dflash),
    }
    fails: list = []
    for name in sorted(os.listdir(args.fixtures)):
        fdir = os.path.join(args.fixtures, name)
        if not os.path.exists(os.path.join(fdir, "goldens.safetensors")):
            continue
        gold, meta = load_goldens(fdir)
        src, fn = checks[meta["layout"]]
        if not src:
            print(f"{name}: skipped (no --{meta['layout']} checkout)")
            continue
        if src not in sys.path:
            sys.path.insert(0, src)
        target = ref.Target(os.path.join(ref.REPO, meta["target"]))
        print(f"{name} ({meta['layout']}, published module):")
        before = len(fails)
        fn(fdir, target, gold, fails)
        print(f"  {name}: {'ok' if len(fails) == before else 'FAILED'}")
    print("published-code check:", "FAILED " + ", ".join(fails) if fails else "all checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
