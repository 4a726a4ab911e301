#!/usr/bin/env python3
"""Writes random-weight checkpoints (N(0, 0.02), bf16, Hugging Face layout + config.json) with the
exact shapes of published models, directly on the machine that will use them (no transfer).

    python3 tools/synth/make_random_checkpoint.py --shape qwen3-8b --out /tmp/qwen3-8b
    python3 tools/synth/make_random_checkpoint.py --list

--fp8 writes a target's projections as a Hugging Face FP8 checkpoint does (F8_E4M3 codes with one
f32 weight_scale_inv per 128 x 128 block, quantization_config quant_method "fp8"; embeddings, norms
and the LM head stay bf16), as Qwen3-*-FP8 publish them.

Speed (decode cost) does not depend on weight values, so these are fine for benchmarks; acceptance
rates need trained pairs. Tensors are generated on the GPU when one is present (fast), written as
~4 GB safetensors shards with a model.safetensors.index.json. A tokenizer is not written: pass
--tokenizer DIR to copy tokenizer.json / tokenizer_config.json from a directory.
"""
import argparse
import json
import os
import shutil
import sys
import time

SHAPES = {
    # Target models.
    "qwen3-8b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                     hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                     tie_word_embeddings=False, attention_bias=False, bos_token_id=151643,
                     eos_token_id=151645),
    "qwen3-4b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                     hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                     tie_word_embeddings=True, attention_bias=False, bos_token_id=151643,
                     eos_token_id=151645),
    "llama3.1-8b": dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
                        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                        rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=8192),
                        tie_word_embeddings=False, attention_bias=False, bos_token_id=128000,
                        eos_token_id=[128001, 128008, 128009]),
    # A small Qwen3-architecture model usable as an independent draft model for qwen3-8b.
    "qwen3-0.6b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                       hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                       tie_word_embeddings=True, attention_bias=False, bos_token_id=151643,
                       eos_token_id=151645),
    # Published drafter shapes (../shared/reference/drafter-formats.md).
    "qwen3-8b-dflash-b16": dict(architectures=["DFlashDraftModel"], model_type="qwen3",
                                vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                                num_hidden_layers=5, num_attention_heads=32,
                                num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                                rope_theta=1000000.0, max_position_embeddings=40960,
                                tie_word_embeddings=False, block_size=16, num_target_layers=36,
                                dflash_config=dict(mask_token_id=151669,
                                                   target_layer_ids=[1, 9, 17, 25, 33])),
    "qwen3-8b-dspark-b7": dict(architectures=["Qwen3DSparkModel"], model_type="qwen3",
                               vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                               num_hidden_layers=5, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                               rope_theta=1000000.0, max_position_embeddings=40960,
                               tie_word_embeddings=False, block_size=7, mask_token_id=151669,
                               target_layer_ids=[1, 9, 17, 25, 33], num_target_layers=36,
                               markov_rank=256, markov_head_type="vanilla",
                               enable_confidence_head=True, confidence_head_with_markov=True,
                               num_anchors=512),
}
# The issue-4 benchmark shape: DSpark heads on the published 8B DFlash geometry (block 16).
SHAPES["qwen3-8b-dspark-b16"] = dict(SHAPES["qwen3-8b-dspark-b7"], block_size=16)


def tensor_shapes(cfg):
    """Yields (name, shape) of every tensor in HF layout for the config."""
    h, i_, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    arch = cfg["architectures"][0]
    drafter = arch in ("DFlashDraftModel", "Qwen3DSparkModel")
    prefix = "" if drafter else "model."
    if drafter:
        taps = (cfg.get("target_layer_ids") or cfg["dflash_config"]["target_layer_ids"])
        yield "fc.weight", (h, len(taps) * h)
        yield "hidden_norm.weight", (h,)
    else:
        yield "model.embed_tokens.weight", (v, h)
    for l in range(cfg["num_hidden_layers"]):
        p = f"{prefix}layers.{l}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)
        yield p + "self_attn.q_proj.weight", (nh * hd, h)
        yield p + "self_attn.k_proj.weight", (nkv * hd, h)
        yield p + "self_attn.v_proj.weight", (nkv * hd, h)
        yield p + "self_attn.o_proj.weight", (h, nh * hd)
        if cfg["model_type"] == "qwen3":
            yield p + "self_attn.q_norm.weight", (hd,)
            yield p + "self_attn.k_norm.weight", (hd,)
        yield p + "mlp.gate_proj.weight", (i_, h)
        yield p + "mlp.up_proj.weight", (i_, h)
        yield p + "mlp.down_proj.weight", (h, i_)
    yield prefix + "norm.weight", (h,)
    if not drafter and not cfg.get("tie_word_embeddings", False):
        yield "lm_head.weight", (v, h)
    if arch == "Qwen3DSparkModel":
        r = cfg["markov_rank"]
        yield "markov_head.markov_w1.weight", (v, r)
        yield "markov_head.markov_w2.weight", (v, r)
        yield "confidence_head.proj.weight", (1, h + r)
        yield "confidence_head.proj.bias", (1,)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--shard-gb", type=float, default=4.0)
    ap.add_argument("--tokenizer", help="directory to copy tokenizer.json / tokenizer_config.json from")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--fp8", action="store_true",
                    help="the projections as F8_E4M3 with 128x128 block scales (targets only)")
    args = ap.parse_args()
    if args.list:
        for name, cfg in sorted(SHAPES.items()):
            n = sum(_numel(s) for _, s in tensor_shapes(cfg))
            print(f"{name:24s} {n / 1e9:6.2f} B params  {2 * n / 1e9:6.2f} GB bf16")
        return 0
    if not args.shape or not args.out:
        ap.error("--shape and --out are required")

    import torch
    from safetensors.torch import save_file

    cfg = dict(SHAPES[args.shape])
    cfg["torch_dtype"] = "bfloat16"
    if args.fp8:
        if cfg["architectures"][0] in ("DFlashDraftModel", "Qwen3DSparkModel"):
            ap.error("--fp8 writes targets only")
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}
    os.makedirs(args.out, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(args.seed)
    shard_limit = int(args.shard_gb * 1e9)
    shards, current, current_bytes = [], {}, 0
    t0 = time.time()
    total = 0

    def flush():
        nonlocal current, current_bytes
        if current:
            shards.append(current)
            current, current_bytes = {}, 0

    names_by_shard = []
    for name, shape in tensor_shapes(cfg):
        if name.endswith("norm.weight"):
            t = torch.ones(shape, dtype=torch.bfloat16)
        elif name.endswith(".bias"):
            t = torch.zeros(shape, dtype=torch.bfloat16)
        else:
            t = (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * args.std)
            if args.fp8 and name.endswith("_proj.weight"):
                codes, scales = _fp8_blocks(torch, t)
                current[name + "_scale_inv"] = scales
                current_bytes += scales.numel() * 4
                total += scales.numel() * 4
                t = codes
            else:
                t = t.to(torch.bfloat16).cpu()
        nbytes = t.numel() * t.element_size()
        if current and current_bytes + nbytes > shard_limit:
            flush()
        current[name] = t.contiguous()
        current_bytes += nbytes
        total += nbytes
    flush()

    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors"
        save_file(shard, os.path.join(args.out, fname), metadata={"format": "pt"})
        for k in shard:
            weight_map[k] = fname
        print(f"synth: wrote {fname} "
              f"({sum(t.numel() * t.element_size() for t in shard.values()) / 1e9:.2f} GB, "
              f"{time.time() - t0:.0f} s)", flush=True)
    if len(shards) > 1:
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if args.tokenizer:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(args.tokenizer, fn)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(args.out, fn))
    print(f"synth: {args.shape} -> {args.out}: {total / 1e9:.2f} GB in {time.time() - t0:.0f} s")
    return 0


def _fp8_blocks(torch, w, block=128):
    """E4M3 codes of w (f32 [N, K]) with one scale per block x block (the last ones partial):
    scale = amax / 448 (1 for an all-zero block), codes = w / scale rounded to nearest."""
    n, k = w.shape
    rows, cols = -(-n // block), -(-k // block)
    padded = torch.zeros(rows * block, cols * block, device=w.device, dtype=torch.float32)
    padded[:n, :k] = w
    blocks = padded.view(rows, block, cols, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scales = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = (blocks / scales[:, None, :, None]).view(rows * block, cols * block)[:n, :k]
    return q.to(torch.float8_e4m3fn).cpu().contiguous(), scales.cpu().contiguous()


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


if __name__ == "__main__":
    sys.exit(main())
