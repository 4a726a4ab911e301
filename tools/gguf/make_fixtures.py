#!/usr/bin/env python3
"""GGUF test fixtures for dspark (tests/unit/gguf_*_test.cpp), written with the `gguf` package
(gguf-py, llama.cpp's reference reader/writer) so that the references are independent of our C++.

    pip install gguf safetensors tokenizers numpy      (+ torch transformers for --smollm2)
    python3 tools/gguf/make_fixtures.py                 # tests/data/gguf/*
    python3 tools/gguf/make_fixtures.py --smollm2 models/SmolLM2-135M-Instruct.Q4_1.gguf

Writes into tests/data/gguf/:
  dequant.gguf            random blocks of every supported type (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
                          Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) plus one Q2_K tensor (a type we do not
                          read),
                          quant bytes uniformly random, f16 scales drawn from sane ranges
  dequant_golden.safetensors   gguf.quants.dequantize() of each tensor, f32
  tiny_llama_quant.gguf   all 4 layers of it with every matrix block-quantized (Q8_0, Q4_0, Q5_0,
                          Q5_1, Q4_1; v_proj in another type than q/k) by gguf.quants.quantize
  tiny_llama_k.gguf       one layer 256 wide of seeded random blocks in a Q4_K_M-like mix (Q4_K,
                          Q5_K, Q6_K; the gguf package cannot quantize to K-quants)
  tiny_llama.gguf         the first layer of the tiny golden Llama 3 (tests/data/models/llama3)
                          converted the way llama.cpp's convert_hf_to_gguf.py does it: q/k rows
                          permuted to the interleaved RoPE layout, llama3 rope scaling as a
                          `rope_freqs.weight` tensor, tokenizer as gpt2 / llama-bpe. To stay
                          under 200 KB: one layer, q/k/norms F32, the other matrices F16.
  tiny_qwen3_moe.gguf      the tiny golden Qwen3-MoE (tests/data/models/qwen3_moe) in llama.cpp's
                          `qwen3moe` layout: router `ffn_gate_inp` F32 [E, H], experts stacked
                          into `ffn_{gate,up,down}_exps` [E, rows, cols] (F16), the dense layer
                          (mlp_only_layers) as `ffn_gate/up/down` (which llama.cpp itself does not
                          write for qwen3moe), norms F32, other matrices F16; q/k unpermuted (the
                          converter permutes Llama only)
With --smollm2 FILE (needs torch + transformers + tokenizers):
  smollm2_tokenizer_golden.json   ids from Hugging Face `tokenizers` for a set of strings; the
                          reference tokenizer is built from the GGUF vocabulary and merges with
                          SmolLM2's tokenizer.json pipeline (Digits(individual) + ByteLevel)
  smollm2_logits_golden.safetensors   transformers' logits (AutoModelForCausalLM with
                          gguf_file=..., torch f32 CPU) for a few prompts: the last position, on
                          the 64 largest logits plus 2048 fixed random vocabulary ids
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "gguf")

# (type, offsets of the f16 scale fields in a block)
SCALE_FIELDS = {
    Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2],
    Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.Q2_K: [80, 82],
}

SMOLLM2_STRINGS = [
    "Hello world",
    "The capital of France is Paris.",
    "  leading spaces and trailing  ",
    "Numbers: 12345 and 3.14159, year 2024!",
    "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "Unicode: café, naïve, 北京, Ελληνικά, emoji 😀👍",
    "Tabs\tand\nnewlines\r\n mixed   whitespace",
    "don't can't won't I'm you're they've",
    "<|endoftext|>special<repo_name>tokens",
    "١٢٣ Arabic digits and ½ fractions",
    "",
]

SMOLLM2_PROMPTS = [
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "def add(a, b):\n    return",
]


def random_quant_rows(qtype, rows, cols, rng, scale_range=0.05):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        scale = rng.uniform(-scale_range, scale_range, size=n_blocks).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, cols // block_elems * block_bytes)


def make_dequant(rng):
    path = os.path.join(OUT, "dequant.gguf")
    w = gguf.GGUFWriter(path, arch="test")
    w.add_string("test.string", "héllo")
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.strings", ["a", "bb", ""])
    w.add_float32("test.f32", 0.5)
    w.add_bool("test.bool", True)
    w.add_uint64("test.u64", 1 << 40)
    golden = {}
    rows, cols = 3, 512
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    w.add_tensor("t.F32", x)
    golden["t.F32"] = x
    h = x.astype(np.float16)
    w.add_tensor("t.F16", h)
    golden["t.F16"] = h.astype(np.float32)
    bf = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated bf16 bits (any bits are valid)
    w.add_tensor("t.BF16", bf.view(np.uint8).reshape(rows, cols * 2), raw_dtype=Q.BF16)
    golden["t.BF16"] = gguf.quants.dequantize(bf.view(np.uint8).reshape(rows, cols * 2), Q.BF16)
    for qtype in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q2_K):
        raw = random_quant_rows(qtype, rows, cols, rng)
        name = f"t.{qtype.name}"
        w.add_tensor(name, raw, raw_dtype=qtype)
        if qtype != Q.Q2_K:  # dspark does not read Q2_K: the test expects an error
            golden[name] = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    # A 3-D tensor (shape order check): ne = {4, 3, 2} -> row-major [2, 3, 4].
    cube = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    w.add_tensor("t.cube", cube)
    golden["t.cube"] = cube
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file({k: np.ascontiguousarray(v) for k, v in golden.items()},
              os.path.join(OUT, "dequant_golden.safetensors"))
    print("wrote", path, os.path.getsize(path), "bytes")


def permute(w, n_head, n_head_kv):
    # convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half rows -> interleaved pairs.
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(cfg):
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    base = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    dim = cfg["head_dim"]
    factor = rp["factor"]
    low, high = rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32), base


def add_bpe_tokenizer(w, tok_json, pre):
    model = tok_json["model"]
    vocab = dict(model["vocab"])
    for t in tok_json.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    n = max(vocab.values()) + 1
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [gguf.TokenType.UNUSED] * n
    for s, i in vocab.items():
        tokens[i] = s
        types[i] = gguf.TokenType.NORMAL
    for t in tok_json.get("added_tokens", []):
        types[t["id"]] = gguf.TokenType.CONTROL if t["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    return n


F32_TENSORS = ("attn_q", "attn_k")  # the rest of the 2-D weights are stored F16


def tiny_llama_type(name):
    """tiny_llama.gguf: q/k and norms F32, the other matrices F16."""
    return None


def tiny_llama_quant_type(name):
    """tiny_llama_quant.gguf: every block-32 type, v_proj in another type than q/k (two parts of
    one fused projection)."""
    if name.startswith("token_embd"):
        return Q.Q8_0
    if name.startswith("output."):
        return Q.Q4_1
    layer = int(name.split(".")[1])
    kind = (Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q5_1)[layer % 4]
    if ".attn_v." in name:
        return Q.Q8_0 if kind != Q.Q8_0 else Q.Q4_1
    return kind


def tiny_llama_k_type(name):
    """tiny_llama_k.gguf (hidden 256): a Q4_K_M-like mix, Q4_K with Q6_K for v, down and output."""
    if name.startswith("token_embd"):
        return Q.Q4_K
    if name.startswith("output.") or ".attn_v." in name or ".ffn_down." in name:
        return Q.Q6_K
    return Q.Q5_K if ".ffn_up." in name else Q.Q4_K


def make_tiny_llama(n_layers=1, file="tiny_llama.gguf", qtype_of=tiny_llama_type, widen=None):
    """The tiny golden Llama 3 as llama.cpp's converter writes it; with qtype_of giving a
    quantization type, 2-D tensors are quantized with the gguf package; `widen` (hidden size)
    replaces the weights by seeded random ones of that width (for the 256-value K-quant blocks)."""
    src = os.path.join(ROOT, "tests", "data", "models", "llama3")
    cfg = json.load(open(os.path.join(src, "config.json")))
    st = load_file(os.path.join(src, "model.safetensors"))
    if widen:
        rng = np.random.default_rng(20261203)
        h, inter, hd = widen, 2 * widen, cfg["head_dim"] * 4
        nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        v = cfg["vocab_size"]
        cfg = dict(cfg, hidden_size=h, intermediate_size=inter, head_dim=hd)
        shapes = {"model.embed_tokens.weight": (v, h), "lm_head.weight": (v, h),
                  "model.norm.weight": (h,)}
        for l in range(n_layers):
            p = f"model.layers.{l}."
            shapes.update({p + "input_layernorm.weight": (h,),
                           p + "post_attention_layernorm.weight": (h,),
                           p + "self_attn.q_proj.weight": (nh * hd, h),
                           p + "self_attn.k_proj.weight": (nkv * hd, h),
                           p + "self_attn.v_proj.weight": (nkv * hd, h),
                           p + "self_attn.o_proj.weight": (h, nh * hd),
                           p + "mlp.gate_proj.weight": (inter, h),
                           p + "mlp.up_proj.weight": (inter, h),
                           p + "mlp.down_proj.weight": (h, inter)})
        st = {k: (1.0 + 0.1 * rng.standard_normal(s)) if len(s) == 1
              else np.zeros(s, dtype=np.float32) for k, s in shapes.items()}
    path = os.path.join(OUT, file)
    w = gguf.GGUFWriter(path, arch="llama")
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w.add_name("tiny llama3 fixture")
    w.add_block_count(n_layers)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    factors, theta = llama3_rope_factors(cfg)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_file_type(1)
    tok_json = json.load(open(os.path.join(src, "tokenizer.json")))
    n_vocab = add_bpe_tokenizer(w, tok_json, "llama-bpe")
    assert n_vocab == cfg["vocab_size"], (n_vocab, cfg["vocab_size"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(False)

    def put(name, x):
        x = x.astype(np.float32)
        qtype = qtype_of(name) if x.ndim == 2 else None
        if qtype is not None and widen:  # random blocks (the gguf package has no K quantizer)
            scale = 0.5 / math.sqrt(x.shape[1]) / (63 * 15 if qtype != Q.Q6_K else 127 * 31)
            raw = random_quant_rows(qtype, x.shape[0], x.shape[1], rng, scale)
            w.add_tensor(name, raw, raw_dtype=qtype)
            return
        if qtype is not None:
            w.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
            return
        f32 = x.ndim == 1 or any(f".{k}." in name for k in F32_TENSORS)
        w.add_tensor(name, x if f32 else x.astype(np.float16))

    put("token_embd.weight", st["model.embed_tokens.weight"])
    put("output_norm.weight", st["model.norm.weight"])
    put("output.weight", st["lm_head.weight"])
    w.add_tensor("rope_freqs.weight", factors)
    for l in range(n_layers):
        p = f"model.layers.{l}."
        put(f"blk.{l}.attn_norm.weight", st[p + "input_layernorm.weight"])
        put(f"blk.{l}.ffn_norm.weight", st[p + "post_attention_layernorm.weight"])
        put(f"blk.{l}.attn_q.weight", permute(st[p + "self_attn.q_proj.weight"], nh, nh))
        put(f"blk.{l}.attn_k.weight", permute(st[p + "self_attn.k_proj.weight"], nh, nkv))
        put(f"blk.{l}.attn_v.weight", st[p + "self_attn.v_proj.weight"])
        put(f"blk.{l}.attn_output.weight", st[p + "self_attn.o_proj.weight"])
        put(f"blk.{l}.ffn_gate.weight", st[p + "mlp.gate_proj.weight"])
        put(f"blk.{l}.ffn_up.weight", st[p + "mlp.up_proj.weight"])
        put(f"blk.{l}.ffn_down.weight", st[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path, os.path.getsize(path), "bytes")


def qwen_writer(path, arch, cfg, src):
    """A GGUFWriter for a Qwen-family checkpoint: hyper-parameters and tokenizer as llama.cpp's
    converter writes them (the MoE keys are added by the caller)."""
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_name(f"tiny {arch} fixture")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(cfg.get("rope_parameters", cfg).get("rope_theta", cfg.get("rope_theta")))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    tok_json = json.load(open(os.path.join(src, "tokenizer.json")))
    assert add_bpe_tokenizer(w, tok_json, "qwen2") == cfg["vocab_size"]
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(False)
    return w


QWEN_LAYER_NAMES = [("attn_norm", "input_layernorm"), ("ffn_norm", "post_attention_layernorm"),
                    ("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                    ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                    ("attn_q_norm", "self_attn.q_norm"), ("attn_k_norm", "self_attn.k_norm")]


def write_qwen_dense(src, path, arch):
    """A dense Qwen2 / Qwen3 checkpoint directory as a GGUF file of llama.cpp's `qwen2` / `qwen3`
    layout, every tensor F32 (the same values as the checkpoint's f32 ones): q/k rows as stored
    (the converter permutes Llama's only), Qwen2's q/k/v biases as `attn_{q,k,v}.bias`, Qwen3's
    per-head norms as `attn_{q,k}_norm`, no `output.weight` for tied embeddings. Used by
    tests/cli/gguf_qwen_test.sh (written at test time, not committed)."""
    cfg = json.load(open(os.path.join(src, "config.json")))
    st = load_file(os.path.join(src, "model.safetensors"))
    w = qwen_writer(path, arch, cfg, src)
    w.add_file_type(0)

    def put(name, hf):
        if hf in st:
            w.add_tensor(name, st[hf].astype(np.float32))

    put("token_embd.weight", "model.embed_tokens.weight")
    put("output_norm.weight", "model.norm.weight")
    if not cfg.get("tie_word_embeddings", False):
        put("output.weight", "lm_head.weight")
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for g, hf in QWEN_LAYER_NAMES:
            put(f"blk.{l}.{g}.weight", p + hf + ".weight")
        for g in ("q", "k", "v"):
            put(f"blk.{l}.attn_{g}.bias", f"{p}self_attn.{g}_proj.bias")
        for g in ("gate", "up", "down"):
            put(f"blk.{l}.ffn_{g}.weight", f"{p}mlp.{g}_proj.weight")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_deepseek_moe(src, path, arch, q8_0=False):
    """A DeepSeek-V3 (GGUF architecture `deepseek2`), GLM-4.5 (`glm4moe`) or GLM-5 (`glm-dsa`)
    checkpoint directory as a GGUF file the way llama.cpp's convert_hf_to_gguf.py writes one,
    every tensor F32:
      - DeepSeek MoE: expert_gating_func 2 (sigmoid; glm-dsa only when the config names
        `scoring_func`, as the converter writes it), groups, shared experts (`*_shexp`), the
        score correction as `exp_probs_b.bias`, experts stacked per layer, the leading dense
        layers' count;
      - deepseek2: head_count_kv 1, key_length / value_length of the absorbed form (kv_lora_rank +
        rope, kv_lora_rank), the per-head sizes as key_length_mla / value_length_mla, kv_b_proj
        split per head into attn_k_b (transposed: [heads, kv_lora_rank, nope]) and attn_v_b,
        YaRN's mscale_all_dim as yarn_log_multiplier = 0.1 * mscale_all_dim;
      - glm-dsa: deepseek2's MLA plus the DSA indexer: attention.indexer.{head_count,key_length,
        top_k}, `indexer_types` as the bool array attention.indexer.types (true: "full"), and each
        full layer's indexer tensors under the names gguf-py maps them to
        (blk.N.indexer.{attn_q_b,attn_k,proj,k_norm}), stored as the checkpoint has them;
      - glm4moe: partial rotary as rope.dimension_count, q/k/v biases, q/k norms,
        post_attention_layernorm as `post_attention_norm`;
      - the next-token prediction (MTP) layers when the checkpoint holds them (config
        num_nextn_predict_layers and model.layers.{num_hidden_layers}.eh_proj.weight, e.g.
        tests/data/models/*_mtp): block_count counts them and nextn_predict_layers names them, as
        llama.cpp's converter does for glm4moe (and DeepSeek-V3.2; its deepseek2 converter drops
        them); their own tensors as blk.{N}.nextn.{eh_proj,enorm,hnorm,shared_head_norm} and,
        when the checkpoint has them, nextn.{embed_tokens,shared_head_head} (gguf-py's
        MODEL_TENSOR.NEXTN_*), the rest of the block as any other block. A glm4moe config that
        declares the layer without its tensors keeps block_count / nextn_predict_layers as the
        converter writes them.
    With q8_0, the matrices (2-D, and the stacked experts) whose rows are a multiple of 32 values
    are written as Q8_0 (gguf.quants.quantize), except the routers; the rest stays F32.
    Used by tests/cli/gguf_moe_test.sh and tests/unit/spec_mtp_gguf_test.cpp (written at test
    time, not committed)."""
    cfg = json.load(open(os.path.join(src, "config.json")))
    st = load_file(os.path.join(src, "model.safetensors"))
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    n_layers = cfg["num_hidden_layers"]
    nextn = cfg.get("num_nextn_predict_layers", 0)
    mtp_layers = [n_layers + i for i in range(nextn)
                  if f"model.layers.{n_layers + i}.eh_proj.weight" in st]
    if arch not in ("glm4moe", "glm-dsa") and not mtp_layers:
        nextn = 0
    mla = arch in ("deepseek2", "glm-dsa")
    w = gguf.GGUFWriter(path, arch=arch)
    w.add_name(f"tiny {arch} fixture")
    w.add_block_count(n_layers + nextn)
    if nextn:
        w.add_nextn_predict_layers(nextn)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_rope_freq_base(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    if mla:
        r, nope, rd = cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
        w.add_head_count_kv(1)
        if cfg.get("q_lora_rank"):
            w.add_q_lora_rank(cfg["q_lora_rank"])
        w.add_kv_lora_rank(r)
        w.add_key_length(r + rd)
        w.add_value_length(r)
        w.add_key_length_mla(nope + rd)
        w.add_value_length_mla(cfg["v_head_dim"])
        w.add_rope_dimension_count(rd)
        if rope.get("rope_type", rope.get("type")) == "yarn":
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(rope["factor"])
            w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
            if rope.get("mscale_all_dim"):
                w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])
    else:
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        partial = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))
        w.add_rope_dimension_count(int(head_dim * partial))
    w.add_expert_count(cfg["n_routed_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_shared_count(cfg["n_shared_experts"])
    w.add_expert_group_count(cfg["n_group"])
    w.add_expert_group_used_count(cfg["topk_group"])
    w.add_expert_weights_scale(cfg["routed_scaling_factor"])
    if cfg.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    if arch != "glm-dsa" or cfg.get("scoring_func") == "sigmoid":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_leading_dense_block_count(cfg["first_k_dense_replace"])
    if arch == "glm-dsa":
        w.add_indexer_head_count(cfg["index_n_heads"])
        w.add_indexer_key_length(cfg["index_head_dim"])
        w.add_indexer_top_k(cfg["index_topk"])
        if "indexer_types" in cfg:  # the converter's add_indexer_types (newer than gguf 0.19)
            w.add_array(f"{arch}.attention.indexer.types",
                        [t == "full" for t in cfg["indexer_types"]])
    tok_json = json.load(open(os.path.join(src, "tokenizer.json")))
    assert add_bpe_tokenizer(w, tok_json, "qwen2") == cfg["vocab_size"]
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_add_bos_token(False)
    w.add_file_type(0)

    def put(name, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if (q8_0 and (x.ndim == 2 or name.endswith("_exps.weight")) and x.shape[-1] % 32 == 0
                and "ffn_gate_inp" not in name):
            q = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(x, q), raw_dtype=q)
        else:
            w.add_tensor(name, x)

    put("token_embd.weight", st["model.embed_tokens.weight"])
    put("output_norm.weight", st["model.norm.weight"])
    put("output.weight", st["lm_head.weight"])
    heads = cfg["num_attention_heads"]
    for l in range(n_layers + len(mtp_layers)):
        p = f"model.layers.{l}."
        if l >= n_layers:
            for hf, key in (("eh_proj", gguf.MODEL_TENSOR.NEXTN_EH_PROJ),
                            ("enorm", gguf.MODEL_TENSOR.NEXTN_ENORM),
                            ("hnorm", gguf.MODEL_TENSOR.NEXTN_HNORM),
                            ("shared_head.norm", gguf.MODEL_TENSOR.NEXTN_SHARED_HEAD_NORM),
                            ("shared_head.head", gguf.MODEL_TENSOR.NEXTN_SHARED_HEAD_HEAD),
                            ("embed_tokens", gguf.MODEL_TENSOR.NEXTN_EMBED_TOKENS)):
                if f"{p}{hf}.weight" in st:
                    name = gguf.TENSOR_NAMES[key].format(bid=l)
                    put(f"{name}.weight", st[f"{p}{hf}.weight"])
        put(f"blk.{l}.attn_norm.weight", st[p + "input_layernorm.weight"])
        norm2 = "ffn_norm" if mla else "post_attention_norm"
        put(f"blk.{l}.{norm2}.weight", st[p + "post_attention_layernorm.weight"])
        a = p + "self_attn."
        put(f"blk.{l}.attn_output.weight", st[a + "o_proj.weight"])
        if mla:
            if a + "q_a_proj.weight" in st:
                put(f"blk.{l}.attn_q_a.weight", st[a + "q_a_proj.weight"])
                put(f"blk.{l}.attn_q_a_norm.weight", st[a + "q_a_layernorm.weight"])
                put(f"blk.{l}.attn_q_b.weight", st[a + "q_b_proj.weight"])
            else:
                put(f"blk.{l}.attn_q.weight", st[a + "q_proj.weight"])
            put(f"blk.{l}.attn_kv_a_mqa.weight", st[a + "kv_a_proj_with_mqa.weight"])
            put(f"blk.{l}.attn_kv_a_norm.weight", st[a + "kv_a_layernorm.weight"])
            kv_b = st[a + "kv_b_proj.weight"].reshape(heads, nope + cfg["v_head_dim"], r)
            put(f"blk.{l}.attn_k_b.weight", kv_b[:, :nope, :].transpose(0, 2, 1))
            put(f"blk.{l}.attn_v_b.weight", kv_b[:, nope:, :])
            for hf, key in (("wq_b.weight", gguf.MODEL_TENSOR.INDEXER_ATTN_Q_B),
                            ("wk.weight", gguf.MODEL_TENSOR.INDEXER_ATTN_K),
                            ("weights_proj.weight", gguf.MODEL_TENSOR.INDEXER_PROJ),
                            ("k_norm.weight", gguf.MODEL_TENSOR.INDEXER_K_NORM),
                            ("k_norm.bias", gguf.MODEL_TENSOR.INDEXER_K_NORM)):
                if f"{a}indexer.{hf}" in st:  # a "full" indexer layer of glm-dsa
                    name = gguf.TENSOR_NAMES[key].format(bid=l)
                    put(f"{name}.{hf.rsplit('.', 1)[1]}", st[f"{a}indexer.{hf}"])
        else:
            for g in ("q", "k", "v"):
                put(f"blk.{l}.attn_{g}.weight", st[f"{a}{g}_proj.weight"])
                put(f"blk.{l}.attn_{g}.bias", st[f"{a}{g}_proj.bias"])
            for g in ("q", "k"):
                if f"{a}{g}_norm.weight" in st:
                    put(f"blk.{l}.attn_{g}_norm.weight", st[f"{a}{g}_norm.weight"])
        m = p + "mlp."
        if m + "gate.weight" not in st:  # a leading dense layer
            for g in ("gate", "up", "down"):
                put(f"blk.{l}.ffn_{g}.weight", st[f"{m}{g}_proj.weight"])
            continue
        put(f"blk.{l}.ffn_gate_inp.weight", st[m + "gate.weight"])
        put(f"blk.{l}.exp_probs_b.bias", st[m + "gate.e_score_correction_bias"])
        for g in ("gate", "up", "down"):
            experts = [st[f"{m}experts.{e}.{g}_proj.weight"] for e in range(cfg["n_routed_experts"])]
            put(f"blk.{l}.ffn_{g}_exps.weight", np.stack(experts))
            put(f"blk.{l}.ffn_{g}_shexp.weight", st[f"{m}shared_experts.{g}_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny_qwen3_moe(file="tiny_qwen3_moe.gguf"):
    src = os.path.join(ROOT, "tests", "data", "models", "qwen3_moe")
    cfg = json.load(open(os.path.join(src, "config.json")))
    st = load_file(os.path.join(src, "model.safetensors"))
    n_layers = cfg["num_hidden_layers"]
    n_experts = cfg.get("num_experts", cfg.get("num_local_experts"))
    path = os.path.join(OUT, file)
    w = qwen_writer(path, "qwen3moe", cfg, src)
    w.add_expert_count(n_experts)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_expert_weights_norm(bool(cfg["norm_topk_prob"]))
    w.add_file_type(1)

    def put(name, x, f32=False):
        x = x.astype(np.float32)
        w.add_tensor(name, x if f32 or x.ndim == 1 else x.astype(np.float16))

    put("token_embd.weight", st["model.embed_tokens.weight"])
    put("output_norm.weight", st["model.norm.weight"])
    put("output.weight", st["lm_head.weight"])
    for l in range(n_layers):
        p = f"model.layers.{l}."
        for g, hf in QWEN_LAYER_NAMES:
            put(f"blk.{l}.{g}.weight", st[p + hf + ".weight"])
        if p + "mlp.gate.weight" not in st:  # a dense layer (mlp_only_layers)
            for g in ("gate", "up", "down"):
                put(f"blk.{l}.ffn_{g}.weight", st[f"{p}mlp.{g}_proj.weight"])
            continue
        put(f"blk.{l}.ffn_gate_inp.weight", st[p + "mlp.gate.weight"], f32=True)
        for g in ("gate", "up", "down"):
            experts = [st[f"{p}mlp.experts.{e}.{g}_proj.weight"] for e in range(n_experts)]
            put(f"blk.{l}.ffn_{g}_exps.weight", np.stack(experts))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path, os.path.getsize(path), "bytes")


def gguf_field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def make_smollm2(path):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, AddedToken
    r = gguf.GGUFReader(path)
    tokens = gguf_field(r, "tokenizer.ggml.tokens")
    types = gguf_field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ")) for m in gguf_field(r, "tokenizer.ggml.merges")]
    assert gguf_field(r, "tokenizer.ggml.pre") == "smollm"
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == 3])
    cases = []
    for s in SMOLLM2_STRINGS:
        ids = tok.encode(s, add_special_tokens=False).ids
        cases.append({"text": s, "ids": ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    out = os.path.join(OUT, "smollm2_tokenizer_golden.json")
    json.dump({"source": os.path.basename(path), "cases": cases}, open(out, "w"),
              ensure_ascii=False, indent=1)
    print("wrote", out)

    import torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(path)),
                                                 gguf_file=os.path.basename(path),
                                                 torch_dtype=torch.float32)
    model.eval()
    rng = np.random.default_rng(1234)
    subset = np.sort(rng.choice(len(tokens), size=2048, replace=False))
    golden = {}
    for p, prompt in enumerate(SMOLLM2_PROMPTS):
        ids = tok.encode(prompt, add_special_tokens=False).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].float().numpy()
        top = np.argsort(-logits)[:64]
        keep = np.unique(np.concatenate([top, subset])).astype(np.int32)
        golden[f"prompt{p}.ids"] = np.array(ids, dtype=np.int32)
        golden[f"prompt{p}.vocab_ids"] = keep
        golden[f"prompt{p}.logits"] = logits[keep].astype(np.float32)
        print(f"prompt {p}: {len(ids)} tokens, argmax {int(top[0])} {tokens[int(top[0])]!r}")
    out = os.path.join(OUT, "smollm2_logits_golden.safetensors")
    save_file(golden, out, metadata={"prompts": json.dumps(SMOLLM2_PROMPTS),
                                     "source": os.path.basename(path)})
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf: also write its goldens")
    ap.add_argument("--only-moe", action="store_true", help="only write tiny_qwen3_moe.gguf")
    ap.add_argument("--qwen-dense", nargs=3, metavar=("SRC_DIR", "OUT_GGUF", "ARCH"),
                    help="only write SRC_DIR (a dense Qwen2 / Qwen3 checkpoint) as OUT_GGUF of "
                         "GGUF architecture ARCH (qwen2 / qwen3), every tensor F32")
    ap.add_argument("--deepseek-moe", nargs=3, metavar=("SRC_DIR", "OUT_GGUF", "ARCH"),
                    help="only write SRC_DIR (a DeepSeek-V3, GLM-4.5 or GLM-5 checkpoint) as "
                         "OUT_GGUF of GGUF architecture ARCH (deepseek2 / glm4moe / glm-dsa), "
                         "every tensor F32")
    ap.add_argument("--q8-0", action="store_true",
                    help="with --deepseek-moe: matrices whose rows are a multiple of 32 values in "
                         "Q8_0 (routers, norms, biases in F32)")
    args = ap.parse_args()
    if args.deepseek_moe:
        write_deepseek_moe(*args.deepseek_moe, q8_0=args.q8_0)
        return 0
    if args.qwen_dense:
        write_qwen_dense(*args.qwen_dense)
        return 0
    os.makedirs(OUT, exist_ok=True)
    make_tiny_qwen3_moe()
    if args.only_moe:
        return 0
    make_dequant(np.random.default_rng(20260529))
    make_tiny_llama()
    make_tiny_llama(4, "tiny_llama_quant.gguf", tiny_llama_quant_type)
    make_tiny_llama(1, "tiny_llama_k.gguf", tiny_llama_k_type, widen=256)
    if args.smollm2:
        make_smollm2(args.smollm2)


if __name__ == "__main__":
    sys.exit(main())
