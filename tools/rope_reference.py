#!/usr/bin/env python3
"""Dumps Hugging Face RoPE frequency tables (inv_freq, attention factor) as JSON test fixtures.

The C++ test tests/unit/ops_rope_test.cpp rebuilds every case with dspark::make_rope_table and
compares against these tables. Regenerate with:

    python3 tools/rope_reference.py --out tests/data/rope/hf_rope_tables.json

Needs torch + transformers. The tables come from transformers' own code paths:
`ROPE_INIT_FUNCTIONS[type]` for linear / llama3 / yarn, and a model's
`compute_default_rope_parameters` for the default type (Llama for full rotary, GLM for partial
rotary, since Llama's default ignores partial_rotary_factor).
"""

import argparse
import json
import math

import torch
import transformers
from transformers import GlmConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.glm.modeling_glm import GlmRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

# Each case: the arguments of dspark::make_rope_table plus the HF rope_parameters dict.
# Fields absent from `hf` are absent from the HF config too (HF applies its own defaults).
CASES = [
    dict(name="default_qwen3", head_dim=128, theta=1e6, prf=1.0, max_pos=40960,
         hf={"rope_type": "default"}),
    dict(name="default_llama2", head_dim=64, theta=10000.0, prf=1.0, max_pos=4096,
         hf={"rope_type": "default"}),
    dict(name="default_odd_theta", head_dim=96, theta=12345.678, prf=1.0, max_pos=2048,
         hf={"rope_type": "default"}),
    dict(name="default_partial_half", head_dim=128, theta=10000.0, prf=0.5, max_pos=8192,
         hf={"rope_type": "default"}),
    dict(name="default_partial_0.4", head_dim=80, theta=10000.0, prf=0.4, max_pos=2048,
         hf={"rope_type": "default"}),
    dict(name="linear_4", head_dim=128, theta=10000.0, prf=1.0, max_pos=16384,
         hf={"rope_type": "linear", "factor": 4.0}),
    dict(name="linear_partial", head_dim=96, theta=10000.0, prf=0.25, max_pos=4096,
         hf={"rope_type": "linear", "factor": 2.0}),
    dict(name="llama3_1", head_dim=128, theta=500000.0, prf=1.0, max_pos=131072,
         hf={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    dict(name="llama3_2", head_dim=64, theta=500000.0, prf=1.0, max_pos=131072,
         hf={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    dict(name="llama3_partial", head_dim=128, theta=500000.0, prf=0.5, max_pos=131072,
         hf={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0,
             "high_freq_factor": 8.0, "original_max_position_embeddings": 4096}),
    dict(name="yarn_qwen", head_dim=128, theta=1e6, prf=1.0, max_pos=131072,
         hf={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    dict(name="yarn_deepseek", head_dim=64, theta=10000.0, prf=1.0, max_pos=163840,
         hf={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    dict(name="yarn_mscale_ratio", head_dim=64, theta=10000.0, prf=1.0, max_pos=163840,
         hf={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
             "mscale": 0.707, "mscale_all_dim": 1.0}),
    dict(name="yarn_mscale_only", head_dim=64, theta=10000.0, prf=1.0, max_pos=65536,
         hf={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
             "mscale": 0.707}),
    dict(name="yarn_gpt_oss", head_dim=64, theta=150000.0, prf=1.0, max_pos=131072,
         hf={"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
             "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
    dict(name="yarn_attention_factor", head_dim=128, theta=1e6, prf=1.0, max_pos=65536,
         hf={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32768,
             "attention_factor": 0.875, "beta_fast": 16.0, "beta_slow": 2.0}),
    dict(name="yarn_partial", head_dim=128, theta=10000.0, prf=0.5, max_pos=32768,
         hf={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}),
    dict(name="yarn_default_original_max", head_dim=64, theta=10000.0, prf=1.0, max_pos=8192,
         hf={"rope_type": "yarn", "factor": 4.0}),
]


def hf_table(case):
    hf = dict(case["hf"])
    hf["rope_theta"] = case["theta"]
    if case["prf"] != 1.0:
        hf["partial_rotary_factor"] = case["prf"]
    common = dict(hidden_size=case["head_dim"] * 2, num_attention_heads=2,
                  head_dim=case["head_dim"], max_position_embeddings=case["max_pos"],
                  rope_parameters=hf)
    if hf["rope_type"] == "default":
        if case["prf"] != 1.0:
            config = GlmConfig(**common)
            return GlmRotaryEmbedding.compute_default_rope_parameters(config)
        config = LlamaConfig(**common)
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    config = LlamaConfig(**common)
    return ROPE_INIT_FUNCTIONS[hf["rope_type"]](config, "cpu")


def dspark_scaling(case):
    """The dspark::RopeScaling fields for this case (0 = unset, as in ops/rope.h)."""
    hf = case["hf"]
    return {
        "type": hf["rope_type"],
        "factor": float(hf.get("factor", 1.0)),
        "low_freq_factor": float(hf.get("low_freq_factor", 1.0)),
        "high_freq_factor": float(hf.get("high_freq_factor", 4.0)),
        # HF falls back to max_position_embeddings when the config has no original value.
        "original_max_position_embeddings": float(hf.get("original_max_position_embeddings", 0)),
        "beta_fast": float(hf.get("beta_fast", 32.0)),
        "beta_slow": float(hf.get("beta_slow", 1.0)),
        "mscale": float(hf.get("mscale", 0.0)),
        "mscale_all_dim": float(hf.get("mscale_all_dim", 0.0)),
        "attention_factor": float(hf.get("attention_factor", 0.0)),
        "truncate": bool(hf.get("truncate", True)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/data/rope/hf_rope_tables.json")
    args = parser.parse_args()
    out = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "cases": []}
    for case in CASES:
        inv_freq, attention_factor = hf_table(case)
        assert inv_freq.dtype == torch.float32, inv_freq.dtype
        out["cases"].append({
            "name": case["name"],
            "head_dim": case["head_dim"],
            "theta": case["theta"],
            "partial_rotary_factor": case["prf"],
            "max_position_embeddings": case["max_pos"],
            "scaling": dspark_scaling(case),
            # float32 values written as the exact doubles they represent
            "inv_freq": [float(v) for v in inv_freq.tolist()],
            "attention_factor": float(attention_factor),
        })
        assert all(math.isfinite(v) for v in out["cases"][-1]["inv_freq"])
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(out['cases'])} RoPE tables to {args.out}")


if __name__ == "__main__":
    main()
