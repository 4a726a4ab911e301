"""The published model shapes that make_random_checkpoint.py writes, and the Hugging Face tensor
layout (names and shapes) of a config.json in the families dspark loads: Llama / Mistral / Qwen2 /
Qwen3, Qwen3-MoE, DeepSeek-V3 (MLA, DeepSeek MoE), GLM-4.5 (GQA, DeepSeek MoE) and the DFlash /
DSpark drafters.

MoE experts are laid out per expert as transformers saves them (`mlp.experts.E.gate_proj.weight`
...), with the router `mlp.gate.weight`; DeepSeek MoE adds `mlp.gate.e_score_correction_bias`
(f32) and `mlp.shared_experts.*` (one MLP n_shared_experts x moe_intermediate_size wide).
"""

_QWEN3_TOKENS = dict(bos_token_id=151643, eos_token_id=151645)
# The drafters' geometry: five Qwen3-8B layers reading five of the 8B target's 36.
_DRAFTER_8B = dict(model_type="qwen3", vocab_size=151936, hidden_size=4096,
                   intermediate_size=12288, num_hidden_layers=5, num_attention_heads=32,
                   num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                   max_position_embeddings=40960, tie_word_embeddings=False, num_target_layers=36)

SHAPES = {
    # Target models.
    "qwen3-8b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                     hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                     tie_word_embeddings=False, attention_bias=False, **_QWEN3_TOKENS),
    "qwen3-4b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                     hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                     tie_word_embeddings=True, attention_bias=False, **_QWEN3_TOKENS),
    "llama3.1-8b": dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
                        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                        rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072,
                        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=8192),
                        tie_word_embeddings=False, attention_bias=False, bos_token_id=128000,
                        eos_token_id=[128001, 128008, 128009]),
    # Qwen/Qwen3-30B-A3B's config.json: 128 experts of width 768, 8 per token, on every layer.
    "qwen3-30b-a3b": dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                          vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                          num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4,
                          head_dim=128, num_experts=128, num_experts_per_tok=8,
                          moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1,
                          mlp_only_layers=[], rms_norm_eps=1e-6, rope_theta=1000000.0,
                          max_position_embeddings=40960, max_window_layers=48,
                          use_sliding_window=False, sliding_window=None,
                          tie_word_embeddings=False, attention_bias=False, **_QWEN3_TOKENS),
    # deepseek-ai/DeepSeek-V2-Lite's dimensions written as DeepSeek-V3 (the architecture dspark
    # loads): MLA without a query LoRA (q_proj), latent 512 + a 64-wide RoPE key, 1 dense layer
    # then 64 routed experts (6 per token) and 2 shared ones, YaRN x40. V2-Lite routes by softmax
    # over all experts (topk_method greedy); dspark's DeepSeek-V3 path routes as V3 does, so this
    # shape uses V3's sigmoid scores with the (zero) correction bias, noaux_tc top-k in one group
    # (n_group = topk_group = 1) and normalized weights; routed_scaling_factor is V2-Lite's 1.0.
    # The same experts, bytes and FLOPs per token; only which experts win differs.
    "deepseek-v2-lite": dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                             vocab_size=102400, hidden_size=2048, intermediate_size=10944,
                             num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
                             q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=128,
                             qk_rope_head_dim=64, v_head_dim=128, rope_interleave=True,
                             first_k_dense_replace=1, moe_layer_freq=1, n_routed_experts=64,
                             num_experts_per_tok=6, n_shared_experts=2, moe_intermediate_size=1408,
                             n_group=1, topk_group=1, scoring_func="sigmoid",
                             topk_method="noaux_tc", norm_topk_prob=True,
                             routed_scaling_factor=1.0, rms_norm_eps=1e-6, rope_theta=10000.0,
                             max_position_embeddings=163840,
                             rope_scaling=dict(type="yarn", factor=40.0, beta_fast=32.0,
                                               beta_slow=1.0, mscale=0.707, mscale_all_dim=0.707,
                                               original_max_position_embeddings=4096),
                             tie_word_embeddings=False, attention_bias=False, bos_token_id=100000,
                             eos_token_id=100001),
    # A small Qwen3-architecture model usable as an independent draft model for qwen3-8b.
    "qwen3-0.6b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=151936,
                       hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
                       tie_word_embeddings=True, attention_bias=False, **_QWEN3_TOKENS),
    # Published drafter shapes (../shared/reference/drafter-formats.md).
    "qwen3-8b-dflash-b16": dict(_DRAFTER_8B, architectures=["DFlashDraftModel"], block_size=16,
                                dflash_config=dict(mask_token_id=151669,
                                                   target_layer_ids=[1, 9, 17, 25, 33])),
    "qwen3-8b-dspark-b7": dict(_DRAFTER_8B, architectures=["Qwen3DSparkModel"], block_size=7,
                               mask_token_id=151669, target_layer_ids=[1, 9, 17, 25, 33],
                               markov_rank=256, markov_head_type="vanilla",
                               enable_confidence_head=True, confidence_head_with_markov=True,
                               num_anchors=512),
}
# The issue-4 benchmark shape: DSpark heads on the published 8B DFlash geometry (block 16).
SHAPES["qwen3-8b-dspark-b16"] = dict(SHAPES["qwen3-8b-dspark-b7"], block_size=16)

DRAFTERS = ("DFlashDraftModel", "Qwen3DSparkModel")
_DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
ARCHITECTURES = _DENSE + ("Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM",
                          "Glm4MoeForCausalLM") + DRAFTERS


_O_BIAS = ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM") + DRAFTERS


def f32_tensor(name):
    """True for the tensors stored f32 whatever the checkpoint's dtype (DeepSeek's router bias)."""
    return name.endswith("e_score_correction_bias")


def _head_dim(cfg, arch):
    if cfg.get("head_dim"):
        return cfg["head_dim"]
    if arch == "Qwen3ForCausalLM" and "head_dim" not in cfg:
        return 128  # Qwen3Config's default
    return cfg["hidden_size"] // cfg["num_attention_heads"]


def moe_layers(cfg):
    """Which layers have routed experts (the rest a dense MLP), as transformers decides."""
    arch, n = cfg["architectures"][0], cfg["num_hidden_layers"]
    if arch == "Qwen3MoeForCausalLM":
        dense = set(cfg.get("mlp_only_layers") or [])
        step = cfg.get("decoder_sparse_step", 1)
        return [l not in dense and (l + 1) % step == 0 for l in range(n)]
    if arch in ("DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"):
        first = cfg.get("first_k_dense_replace", 3 if arch == "DeepseekV3ForCausalLM" else 1)
        return [l >= first for l in range(n)]
    return [False] * n


def expert_counts(cfg):
    """(routed experts, experts per token, shared experts) of a MoE config."""
    if cfg["architectures"][0] == "Qwen3MoeForCausalLM":
        e = cfg.get("num_experts", cfg.get("num_local_experts", 128))
        return e, cfg.get("num_experts_per_tok", 8), 0
    return (cfg.get("n_routed_experts", 128), cfg.get("num_experts_per_tok", 8),
            cfg.get("n_shared_experts", 1))


def _mlp(p, h, inter):
    yield p + "gate_proj.weight", (inter, h)
    yield p + "up_proj.weight", (inter, h)
    yield p + "down_proj.weight", (h, inter)


def _moe(p, cfg):
    h, inter = cfg["hidden_size"], cfg["moe_intermediate_size"]
    experts, _, shared = expert_counts(cfg)
    yield p + "gate.weight", (experts, h)
    if cfg["architectures"][0] != "Qwen3MoeForCausalLM":
        yield p + "gate.e_score_correction_bias", (experts,)
        if shared:
            yield from _mlp(p + "shared_experts.", h, shared * inter)
    for e in range(experts):
        yield from _mlp(f"{p}experts.{e}.", h, inter)


def _mla(a, cfg):
    h, nh, r = cfg["hidden_size"], cfg["num_attention_heads"], cfg["kv_lora_rank"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    q_lora = cfg.get("q_lora_rank")
    if q_lora:
        yield a + "q_a_proj.weight", (q_lora, h)
        yield a + "q_a_layernorm.weight", (q_lora,)
        yield a + "q_b_proj.weight", (nh * (nope + rope), q_lora)
    else:
        yield a + "q_proj.weight", (nh * (nope + rope), h)
    yield a + "kv_a_proj_with_mqa.weight", (r + rope, h)
    yield a + "kv_a_layernorm.weight", (r,)
    yield a + "kv_b_proj.weight", (nh * (nope + v), r)
    yield a + "o_proj.weight", (h, nh * v)


def _gqa(a, cfg, arch):
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv, hd = cfg.get("num_key_value_heads", nh), _head_dim(cfg, arch)
    qkv_bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    for proj, rows in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)):
        yield a + f"{proj}_proj.weight", (rows, h)
        if qkv_bias:
            yield a + f"{proj}_proj.bias", (rows,)
    yield a + "o_proj.weight", (h, nh * hd)
    # Llama and Qwen3 give o_proj a bias with attention_bias; Qwen2, Mistral and GLM-4.5 never.
    if cfg.get("attention_bias", False) and arch in _O_BIAS:
        yield a + "o_proj.bias", (h,)
    qk_norm = (arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM") + DRAFTERS
               or (arch == "Glm4MoeForCausalLM" and cfg.get("use_qk_norm", False)))
    if qk_norm:
        yield a + "q_norm.weight", (hd,)
        yield a + "k_norm.weight", (hd,)


def _layer(p, cfg, arch, moe):
    """A decoder layer's tensors under prefix p: its norms, attention, and MLP or routed experts."""
    h = cfg["hidden_size"]
    yield p + "input_layernorm.weight", (h,)
    yield p + "post_attention_layernorm.weight", (h,)
    if arch == "DeepseekV3ForCausalLM":
        yield from _mla(p + "self_attn.", cfg)
    else:
        yield from _gqa(p + "self_attn.", cfg, arch)
    if moe:
        yield from _moe(p + "mlp.", cfg)
    else:
        yield from _mlp(p + "mlp.", h, cfg["intermediate_size"])


def _mtp(cfg):
    """The next-token (MTP) layers of DeepSeek-V3 / GLM-4.5 after the decoder's last layer, as the
    published checkpoints hold them: a whole decoder layer (with routed experts) plus eh_proj,
    enorm, hnorm and shared_head.norm; DeepSeek-V3's also hold a copy of the embedding and of the
    head (embed_tokens, shared_head.head)."""
    arch, n = cfg["architectures"][0], cfg["num_hidden_layers"]
    if arch not in ("DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"):
        return
    h = cfg["hidden_size"]
    for l in range(n, n + cfg.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{l}."
        yield p + "eh_proj.weight", (h, 2 * h)
        yield p + "enorm.weight", (h,)
        yield p + "hnorm.weight", (h,)
        yield p + "shared_head.norm.weight", (h,)
        if arch == "DeepseekV3ForCausalLM":
            yield p + "embed_tokens.weight", (cfg["vocab_size"], h)
            yield p + "shared_head.head.weight", (cfg["vocab_size"], h)
        yield from _layer(p, cfg, arch, True)


def tensor_shapes(cfg, mtp=False):
    """Yields (name, shape) of every tensor in Hugging Face layout for the config; with `mtp` also
    its num_nextn_predict_layers next-token layers (transformers' save_pretrained drops them)."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    arch = cfg["architectures"][0]
    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture {arch} is not one of {', '.join(ARCHITECTURES)}")
    drafter = arch in DRAFTERS
    prefix = "" if drafter else "model."
    if drafter:
        taps = (cfg.get("target_layer_ids") or cfg["dflash_config"]["target_layer_ids"])
        yield "fc.weight", (h, len(taps) * h)
        yield "hidden_norm.weight", (h,)
    else:
        yield "model.embed_tokens.weight", (v, h)
    moe = moe_layers(cfg)
    for l in range(cfg["num_hidden_layers"]):
        yield from _layer(f"{prefix}layers.{l}.", cfg, arch, moe[l])
    yield prefix + "norm.weight", (h,)
    if not drafter and not cfg.get("tie_word_embeddings", False):
        yield "lm_head.weight", (v, h)
    if mtp:
        yield from _mtp(cfg)
    if arch == "Qwen3DSparkModel":
        r = cfg["markov_rank"]
        yield "markov_head.markov_w1.weight", (v, r)
        yield "markov_head.markov_w2.weight", (v, r)
        yield "confidence_head.proj.weight", (1, h + r)
        yield "confidence_head.proj.bias", (1,)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def sizes(cfg):
    """(parameters, bf16 bytes, bf16 bytes one decode token reads): a token reads every weight
    except the routed experts it does not select and all but one row of an untied embedding."""
    experts, top_k, _ = expert_counts(cfg)
    params = total = read = 0
    for name, shape in tensor_shapes(cfg):
        n = numel(shape)
        b = n * (4 if f32_tensor(name) else 2)
        params += n
        total += b
        if ".experts." in name:
            read += b * top_k / experts
        elif name == "model.embed_tokens.weight" and not cfg.get("tie_word_embeddings", False):
            read += 2 * shape[1]
        else:
            read += b
    return params, total, int(read)
