#!/usr/bin/env python3
"""Writes random-weight checkpoints (N(0, 0.02), bf16, Hugging Face layout + config.json) with the
exact shapes of published models, directly on the machine that will use them (no transfer).

    python3 tools/synth/make_random_checkpoint.py --shape qwen3-8b --out /tmp/qwen3-8b
    python3 tools/synth/make_random_checkpoint.py --list

--list prints each shape's parameters, its bf16 size and the bf16 bytes one decode token reads
(every weight except the routed experts it does not select and the untied embedding's other
rows). The shapes (checkpoint_shapes.py):
  qwen3-8b, qwen3-4b, llama3.1-8b, qwen3-0.6b   dense targets (16.4, 8.0, 16.1, 1.2 GB)
  qwen3-30b-a3b     Qwen3MoeForCausalLM, Qwen3-30B-A3B's config: 48 layers of 128 experts (width
                    768, 8 per token), GQA 32/4 heads; 61.1 GB, 6.1 GB read per token
  deepseek-v2-lite  DeepSeek-V2-Lite's dimensions as DeepseekV3ForCausalLM: MLA (no query LoRA,
                    latent 512 + RoPE key 64), 27 layers, the first dense, then 64 routed experts
                    (width 1408, 6 per token) and 2 shared; 31.4 GB, 4.9 GB read per token.
                    Routing is V3's (sigmoid scores, noaux_tc, n_group = topk_group = 1,
                    normalized), the one dspark's DeepSeek-V3 path runs: V2-Lite's own softmax
                    routing picks other experts at the same cost.
  qwen3-0.6b, qwen3-8b-dflash-b16, qwen3-8b-dspark-b7/-b16   draft models and drafters
A GLM-4.5-Air shape (106.9 B parameters) is not listed: 214 GB in bf16 does not fit one H200.
--config FILE writes random weights for any config.json of the families checkpoint_shapes.py lays
out; --layers N and --vocab N shrink a shape (num_hidden_layers, vocab_size) for quick checks;
--mtp N adds N next-token (MTP) layers to a DeepSeek-V3 or GLM-4.5 shape (`--draft mtp`).

--fp8 writes a target's projections as a Hugging Face FP8 checkpoint does (F8_E4M3 codes with one
f32 weight_scale_inv per 128 x 128 block, quantization_config quant_method "fp8"; embeddings, norms,
routers and the LM head stay bf16), as Qwen3-*-FP8 publish them.

--mlx BITS (4 or 8, with --group-size 32 / 64 / 128, default 64) writes the checkpoint as mlx-lm
quantizes one: every projection, the embedding and the LM head as uint32-packed codes with bf16
`scales` and `biases` per group (random codes; one scale per tensor, exact in f16, and the bias
centring the codes), config.json `quantization` {group_size, bits}. About a quarter (4-bit) of the
bf16 bytes, so an 8B shape is written in seconds rather than quantized from 16 GB.

Speed (decode cost) does not depend on weight values, so these are fine for benchmarks; acceptance
rates need trained pairs. Tensors are generated with torch on the GPU when one is present (fast),
else with torch or NumPy on the CPU (--fp8 needs torch), and streamed into ~4 GB safetensors
shards with a model.safetensors.index.json. A tokenizer is not written: pass --tokenizer DIR to
copy tokenizer.json / tokenizer_config.json from a directory.
"""
import argparse
import json
import os
import shutil
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_shapes import DRAFTERS, SHAPES, f32_tensor, numel, sizes, tensor_shapes  # noqa: E402

FP8_BLOCK = 128
CHUNK = 1 << 26  # elements generated at once (rows of a larger tensor)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--config", help="a config.json to write random weights for (instead of --shape)")
    ap.add_argument("--out")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (quick checks)")
    ap.add_argument("--mtp", type=int,
                    help="num_nextn_predict_layers: next-token (MTP) layers after the last one "
                         "(DeepSeek-V3 and GLM-4.5 shapes), for `--draft mtp`")
    ap.add_argument("--vocab", type=int,
                    help="override vocab_size (quick checks; special token ids beyond it are dropped)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--shard-gb", type=float, default=4.0)
    ap.add_argument("--tokenizer", help="directory to copy tokenizer.json / tokenizer_config.json from")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--fp8", action="store_true",
                    help="the projections as F8_E4M3 with 128x128 block scales (targets only)")
    ap.add_argument("--mlx", type=int, choices=(4, 8),
                    help="the projections, embedding and LM head MLX-quantized with this many bits")
    ap.add_argument("--group-size", type=int, choices=(32, 64, 128), default=64,
                    help="values per scale and bias with --mlx (default 64)")
    args = ap.parse_args()
    if args.list:
        for name, cfg in sorted(SHAPES.items()):
            params, total, read = sizes(cfg)
            print(f"{name:24s} {params / 1e9:6.2f} B params  {total / 1e9:6.2f} GB bf16  "
                  f"{read / 1e9:6.2f} GB read per token")
        return 0
    if not args.out or (args.shape is None) == (args.config is None):
        ap.error("--out and one of --shape or --config are required")
    for flag, value in (("--layers", args.layers), ("--vocab", args.vocab)):
        if value is not None and value < 1:
            ap.error(f"{flag} must be positive, got {value}")
    if args.mtp is not None and args.mtp < 0:
        ap.error(f"--mtp must be >= 0, got {args.mtp}")

    if args.shape:
        cfg = json.loads(json.dumps(SHAPES[args.shape]))
        label = args.shape
    else:
        with open(args.config) as f:
            cfg = json.load(f)
        label = args.config
    drafter = cfg["architectures"][0] in DRAFTERS
    if args.layers is not None:
        cfg["num_hidden_layers"] = args.layers
        if cfg.get("mlp_only_layers"):
            cfg["mlp_only_layers"] = [l for l in cfg["mlp_only_layers"] if l < args.layers]
    if args.mtp is not None:
        if cfg["architectures"][0] not in ("DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"):
            ap.error("--mtp takes DeepSeek-V3 and GLM-4.5 shapes")
        cfg["num_nextn_predict_layers"] = args.mtp
    if args.vocab is not None:
        if drafter:
            ap.error("--vocab shrinks targets only")
        cfg["vocab_size"] = args.vocab
        _drop_token_ids(cfg, args.vocab)
    cfg.pop("dtype", None)  # transformers >= 4.56 writes `dtype`, which wins over torch_dtype
    cfg["torch_dtype"] = "bfloat16"
    if args.fp8:
        if drafter:
            ap.error("--fp8 writes targets only")
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic",
                                      "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    if args.mlx:
        if args.fp8:
            ap.error("--mlx and --fp8 exclude each other")
        if drafter:
            ap.error("--mlx writes targets only (drafters: dspark quantize --format mlx4|mlx8)")
        cfg["quantization"] = {"group_size": args.group_size, "bits": args.mlx}
        cfg["quantization_config"] = dict(cfg["quantization"])
    try:
        entries = _plan(cfg, args.fp8, (args.mlx, args.group_size) if args.mlx else None,
                        bool(args.mtp))
    except (KeyError, ValueError) as e:
        ap.error(f"{label}: cannot lay out its tensors: {e}")
    gen = _generator(args.seed, args.std, args.fp8)
    if gen is None:
        ap.error("--fp8 needs torch")

    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    shards = _shards(entries, int(args.shard_gb * 1e9))
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = (f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1
                 else "model.safetensors")
        nbytes = _write_shard(os.path.join(args.out, fname), shard, gen)
        total += nbytes
        for e in shard:
            weight_map[e["name"]] = fname
        print(f"synth: wrote {fname} ({nbytes / 1e9:.2f} GB, {time.time() - t0:.0f} s)", flush=True)
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
    print(f"synth: {label} -> {args.out}: {total / 1e9:.2f} GB in {time.time() - t0:.0f} s "
          f"({gen.backend})")
    return 0


def _drop_token_ids(cfg, vocab):
    for key in ("bos_token_id", "pad_token_id"):
        if isinstance(cfg.get(key), int) and cfg[key] >= vocab:
            cfg[key] = None
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list):
        cfg["eos_token_id"] = [t for t in eos if t < vocab]
    elif isinstance(eos, int) and eos >= vocab:
        cfg["eos_token_id"] = None


def _plan(cfg, fp8, mlx=None, mtp=False):
    """The stored tensors: name, safetensors dtype, shape and what fills it (ones, zeros, randn,
    fp8 codes or their block scales, MLX codes, scales and biases). Units (a weight and its
    scales) stay in one shard."""
    units = []
    for name, shape in tensor_shapes(cfg, mtp):
        if mlx and _mlx_quantized(name, shape, mlx[1]):
            bits, group = mlx
            n, k = shape
            module = name[: -len(".weight")]
            scale = 2.0 ** (-4 - bits)  # codes spread about as N(0, 0.02)
            units.append([dict(name=name, dtype="U32", shape=(n, k * bits // 32), fill="mlx_codes"),
                          dict(name=module + ".scales", dtype="BF16", shape=(n, k // group),
                               fill="const", value=scale),
                          dict(name=module + ".biases", dtype="BF16", shape=(n, k // group),
                               fill="const", value=-scale * 2 ** (bits - 1))])
            continue
        if f32_tensor(name):
            units.append([dict(name=name, dtype="F32", shape=shape, fill="zeros")])
        elif name.endswith("norm.weight"):
            units.append([dict(name=name, dtype="BF16", shape=shape, fill="ones")])
        elif name.endswith(".bias"):
            units.append([dict(name=name, dtype="BF16", shape=shape, fill="zeros")])
        elif fp8 and name.endswith("_proj.weight"):
            n, k = shape
            scales = (-(-n // FP8_BLOCK), -(-k // FP8_BLOCK))
            units.append([dict(name=name, dtype="F8_E4M3", shape=shape, fill="fp8"),
                          dict(name=name + "_scale_inv", dtype="F32", shape=scales,
                               fill="fp8_scales")])
        else:
            units.append([dict(name=name, dtype="BF16", shape=shape, fill="randn")])
    return units


_ITEMSIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U32": 4}


def _mlx_quantized(name, shape, group):
    """What mlx-lm quantizes: the linear layers and embeddings (2-D weights) whose rows split
    into whole groups; norms, biases and routers stay float."""
    return (len(shape) == 2 and name.endswith(".weight") and shape[1] % group == 0
            and not name.endswith("norm.weight") and not name.endswith("mlp.gate.weight"))


def _nbytes(e):
    return numel(e["shape"]) * _ITEMSIZE[e["dtype"]]


def _shards(units, limit):
    shards, current, size = [], [], 0
    for unit in units:
        b = sum(_nbytes(e) for e in unit)
        if current and size + b > limit:
            shards.append(current)
            current, size = [], 0
        current += unit
        size += b
    if current:
        shards.append(current)
    return shards


def _write_shard(path, entries, gen):
    """A safetensors file: the JSON header (padded to 8 bytes), then each tensor's bytes, streamed
    as they are generated."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for e in entries:
        header[e["name"]] = {"dtype": e["dtype"], "shape": list(e["shape"]),
                             "data_offsets": [offset, offset + _nbytes(e)]}
        offset += _nbytes(e)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pending_scales = None
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for e in entries:
            if e["fill"] == "fp8":
                codes, pending_scales = gen.fp8(e["shape"])
                f.write(codes)
            elif e["fill"] == "fp8_scales":
                f.write(pending_scales)
            elif e["fill"] == "mlx_codes":
                for chunk in gen.words(e["shape"]):
                    f.write(chunk)
            elif e["fill"] == "const":  # a power of two: exact in bf16 and f16
                bf16 = struct.unpack("<I", struct.pack("<f", e["value"]))[0] >> 16
                f.write(struct.pack("<H", bf16) * numel(e["shape"]))
            else:
                for chunk in gen.chunks(e["fill"], e["shape"], e["dtype"]):
                    f.write(chunk)
    return offset


def _generator(seed, std, fp8):
    try:
        import torch
    except ImportError:
        return None if fp8 else _NumpyGen(seed, std)
    return _TorchGen(torch, seed, std)


def _row_chunks(shape):
    rows = shape[0] if len(shape) > 1 else 1
    per_row = numel(shape) // rows
    step = max(1, CHUNK // max(per_row, 1))
    for r in range(0, rows, step):
        yield min(step, rows - r) * per_row


class _NumpyGen:
    backend = "numpy, cpu"

    def __init__(self, seed, std):
        import numpy as np
        self.np, self.rng, self.std = np, np.random.default_rng(seed), std

    def chunks(self, fill, shape, dtype):
        np = self.np
        for n in _row_chunks(shape):
            if fill == "randn":
                x = self.rng.standard_normal(n, dtype=np.float32)
                x *= self.std
            else:
                x = np.full(n, 1.0 if fill == "ones" else 0.0, dtype=np.float32)
            if dtype == "F32":
                yield x.tobytes()
                continue
            # f32 -> bf16, rounded to nearest even.
            u = x.view(np.uint32)
            u += 0x7FFF + ((u >> 16) & 1)
            yield (u >> 16).astype(np.uint16).tobytes()

    def words(self, shape):
        for n in _row_chunks(shape):
            yield self.rng.integers(0, 1 << 32, n, dtype=self.np.uint32).tobytes()


class _TorchGen:
    def __init__(self, torch, seed, std):
        self.torch, self.std = torch, std
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.backend = f"torch, {self.device}"
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def chunks(self, fill, shape, dtype):
        torch = self.torch
        for n in _row_chunks(shape):
            if fill == "randn":
                x = torch.randn(n, generator=self.gen, device=self.device) * self.std
            else:
                x = torch.full((n,), 1.0 if fill == "ones" else 0.0, device=self.device)
            if dtype == "F32":
                yield x.cpu().numpy().tobytes()
            else:
                yield x.to(torch.bfloat16).view(torch.int16).cpu().numpy().tobytes()

    def words(self, shape):
        torch = self.torch
        for n in _row_chunks(shape):
            x = torch.randint(-(1 << 31), 1 << 31, (n,), generator=self.gen, device=self.device,
                              dtype=torch.int32)
            yield x.cpu().numpy().tobytes()

    def fp8(self, shape):
        """E4M3 codes of a random [N, K] weight with one scale per block x block (the last ones
        partial): scale = amax / 448 (1 for an all-zero block), codes = w / scale rounded to
        nearest."""
        torch, block = self.torch, FP8_BLOCK
        w = torch.randn(shape, generator=self.gen, device=self.device) * self.std
        n, k = w.shape
        rows, cols = -(-n // block), -(-k // block)
        padded = torch.zeros(rows * block, cols * block, device=w.device, dtype=torch.float32)
        padded[:n, :k] = w
        blocks = padded.view(rows, block, cols, block)
        amax = blocks.abs().amax(dim=(1, 3))
        scales = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        q = (blocks / scales[:, None, :, None]).view(rows * block, cols * block)[:n, :k]
        codes = q.to(torch.float8_e4m3fn).view(torch.uint8).cpu().contiguous().numpy()
        return codes.tobytes(), scales.cpu().contiguous().numpy().tobytes()


if __name__ == "__main__":
    sys.exit(main())
