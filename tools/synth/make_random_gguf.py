#!/usr/bin/env python3
"""Writes a random-weight GGUF file with the exact shapes of a published Llama or Qwen3-MoE model
and the tensor types of one of llama.cpp's quantization mixes, for speed benchmarks of quantized
decoding:

    python3 tools/synth/make_random_gguf.py --shape llama3.1-8b --mix Q4_K_M --out /tmp/l8b.gguf
    python3 tools/synth/make_random_gguf.py --shape qwen3-30b-a3b --layers 24 --out /tmp/q30.gguf

Dense shapes are written as llama.cpp's `llama` architecture, Qwen3-MoE shapes as `qwen3moe`
(q/k norms, the router `ffn_gate_inp` in F32, the experts stacked per layer as
`ffn_{gate,up,down}_exps` [experts, rows, cols], each matrix of the experts in the mix's type).

Blocks are random bytes with small f16 scales (a valid block of any value is as costly to decode
as a trained one), written with the `gguf` package. Mixes (as llama.cpp's llama-quantize assigns
types; close enough for bandwidth, not a bit-exact replica of its rules):
  Q4_K_M  Q4_K everywhere, Q6_K for output, attn_v and ffn_down (ffn_down_exps) of the first and
          last eighth of the layers and of every third layer between (llama.cpp's use_more_bits)
  Q8_0, Q4_0, Q6_K  that type for every matrix
  BF16    every matrix in bf16 (random signs and mantissas, exponents of 2^-8 .. 2^-5): the
          unquantized twin, for comparing bf16 decoding on the same file
Norms are F32. The tokenizer is a placeholder that llama.cpp and dspark both load (a byte-level
BPE vocabulary: the 256 byte tokens, "te" for the one merge, then "t257", "t258", ... up to the
vocabulary size), so the two can run the same file; benchmarks use random token prompts.
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_shapes import SHAPES  # noqa: E402

# The shapes this writer lays out: dense Llama / Qwen3 (as `llama`) and Qwen3-MoE (`qwen3moe`).
DENSE = sorted(n for n, c in SHAPES.items()
               if c["architectures"][0] in ("LlamaForCausalLM", "Qwen3ForCausalLM"))
MOE = sorted(n for n, c in SHAPES.items() if c["architectures"][0] == "Qwen3MoeForCausalLM")

# Offsets of the f16 scale fields in a block, per type.
SCALE_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_K: [0, 2], Q.Q6_K: [208]}
# The largest |integer code x sub-scale| of a type: scales are drawn so weights stay ~1/sqrt(k).
CODE_RANGE = {Q.Q8_0: 127, Q.Q4_0: 8, Q.Q4_K: 63 * 15, Q.Q6_K: 127 * 31}


def random_bf16(rows, cols, rng, experts=0):
    """[rows, cols] of random bf16 bit patterns as uint16 ([experts, rows, cols] when experts > 0):
    the random bits keep their sign and mantissa, two of the exponent bits pick 2^-8 .. 2^-5 (bit
    operations only, so tens of GB are written in about a minute)."""
    n = max(experts, 1) * rows * cols
    bits = np.frombuffer(rng.bytes(2 * n), dtype=np.uint16)
    bits = (bits & np.uint16(0x807F)) | ((np.uint16(119) + ((bits >> np.uint16(7)) & np.uint16(3)))
                                         << np.uint16(7))
    shape = (rows, cols)
    return bits.reshape((experts,) + shape if experts else shape)


def random_blocks(qtype, rows, cols, rng, experts=0):
    """[rows, row bytes] of random blocks ([experts, rows, row bytes] when experts > 0)."""
    if qtype == Q.BF16:
        return random_bf16(rows, cols, rng, experts)
    elems, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = max(experts, 1) * rows * cols // elems
    raw = np.frombuffer(rng.bytes(n_blocks * nbytes), dtype=np.uint8).reshape(n_blocks, nbytes)
    raw = raw.copy()
    scale = 1.0 / math.sqrt(cols) / CODE_RANGE[qtype]
    for off in SCALE_FIELDS[qtype]:
        s = rng.uniform(0.5 * scale, scale, size=n_blocks).astype(np.float16)
        raw[:, off:off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
    shape = (rows, cols // elems * nbytes)
    return raw.reshape((experts,) + shape if experts else shape)


def byte_tokens():
    """GPT-2's byte-level alphabet: the printable bytes as themselves, the others from U+0100 on."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def add_placeholder_tokenizer(w, vocab):
    tokens = byte_tokens() + ["te"] + [f"t{i}" for i in range(257, vocab)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_token_merges(["t e"])
    w.add_bos_token_id(vocab - 2)
    w.add_eos_token_id(vocab - 1)


def mix_type(mix, name, layer, n_layers):
    if mix != "Q4_K_M":
        return {"Q8_0": Q.Q8_0, "Q4_0": Q.Q4_0, "Q6_K": Q.Q6_K, "BF16": Q.BF16}[mix]
    if name == "output":
        return Q.Q6_K
    if name in ("attn_v", "ffn_down", "ffn_down_exps"):
        more = layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2
        return Q.Q6_K if more else Q.Q4_K
    return Q.Q4_K


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="llama3.1-8b", choices=DENSE + MOE)
    ap.add_argument("--layers", type=int, default=0,
                    help="write only the first N decoder layers (a smaller file of the same widths)")
    ap.add_argument("--mix", default="Q4_K_M", choices=["Q4_K_M", "Q8_0", "Q4_0", "Q6_K", "BF16"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    c = SHAPES[a.shape]
    moe = a.shape in MOE
    h, inter, n_layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    if a.layers > 0:
        n_layers = min(n_layers, a.layers)
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim", h // nh)
    v = c["vocab_size"]
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    w = gguf.GGUFWriter(a.out, arch="qwen3moe" if moe else "llama")
    w.add_name(f"random {a.shape} {a.mix}")
    w.add_block_count(n_layers)
    w.add_context_length(min(c.get("max_position_embeddings", 4096), 131072))
    w.add_embedding_length(h)
    w.add_feed_forward_length(inter)
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(c.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_vocab_size(v)
    add_placeholder_tokenizer(w, v)
    if moe:
        w.add_expert_count(c["num_experts"])
        w.add_expert_used_count(c["num_experts_per_tok"])
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
        w.add_expert_weights_norm(bool(c["norm_topk_prob"]))
    # (GGUF name, mix role, layer, (rows, cols), experts: 0 for a plain matrix)
    tensors = [("token_embd.weight", "token_embd", -1, (v, h), 0),
               ("output.weight", "output", -1, (v, h), 0)]
    for l in range(n_layers):
        for name, shape in (("attn_q", (nh * hd, h)), ("attn_k", (nkv * hd, h)),
                            ("attn_v", (nkv * hd, h)), ("attn_output", (h, nh * hd))):
            tensors.append((f"blk.{l}.{name}.weight", name, l, shape, 0))
        if moe:
            e, mi = c["num_experts"], c["moe_intermediate_size"]
            for name, shape in (("ffn_gate_exps", (mi, h)), ("ffn_up_exps", (mi, h)),
                                ("ffn_down_exps", (h, mi))):
                tensors.append((f"blk.{l}.{name}.weight", name, l, shape, e))
        else:
            for name, shape in (("ffn_gate", (inter, h)), ("ffn_up", (inter, h)),
                                ("ffn_down", (h, inter))):
                tensors.append((f"blk.{l}.{name}.weight", name, l, shape, 0))
    total = 0
    for i, (full, name, layer, (rows, cols), experts) in enumerate(tensors):
        qtype = Q.Q4_K if name == "token_embd" and a.mix == "Q4_K_M" else \
            mix_type(a.mix, name, layer, n_layers)
        raw = random_blocks(qtype, rows, cols, rng, experts)
        total += raw.nbytes
        w.add_tensor(full, raw, raw_dtype=qtype)
        if experts and layer % 4 == 3:
            print(f"  layer {layer + 1}/{n_layers}: {total / 1e9:.1f} GB, {time.time() - t0:.0f} s",
                  file=sys.stderr)
    ones = (1.0 + 0.05 * rng.standard_normal(h)).astype(np.float32)
    w.add_tensor("output_norm.weight", ones)
    for l in range(n_layers):
        w.add_tensor(f"blk.{l}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{l}.ffn_norm.weight", ones)
        if moe:
            head_ones = (1.0 + 0.05 * rng.standard_normal(hd)).astype(np.float32)
            w.add_tensor(f"blk.{l}.attn_q_norm.weight", head_ones)
            w.add_tensor(f"blk.{l}.attn_k_norm.weight", head_ones)
            router = (rng.standard_normal((c["num_experts"], h)) / math.sqrt(h))
            w.add_tensor(f"blk.{l}.ffn_gate_inp.weight", router.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {a.shape} {a.mix}, {total / 1e9:.2f} GB of blocks, "
          f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
