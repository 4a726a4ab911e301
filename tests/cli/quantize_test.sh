#!/usr/bin/env bash
# dspark quantize end to end: the tiny Llama 3 written as MLX affine checkpoints (4 bits in groups
# of 32, 8 bits in groups of 64), checked against an independent NumPy port of MLX's affine rule
# (mlx/backend/cpu/quantized.cpp: per group the edge farther from zero pinned, rint, codes from the
# f32 scale and bias, both stored in bf16 for f32 weights): every code word, scale and bias bit
# for bit, the float tensors unchanged, config.json's quantization entry (with `false` for the
# weights kept float), the copied tokenizer files, the progress bar; then dspark generate runs
# the result. A DSpark drafter gets the drafter policy and drafts for the quantized target with
# the plain greedy tokens. GGUF output (every format; Qwen3-MoE's stacked experts) against the gguf
# package.
# The refusals exit non-zero with one error line.
#   bash tests/cli/quantize_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
M=$MODELS/llama3
[[ -d $M ]] || { echo "SKIP: no fixtures"; exit 0; }
python3 -c "import numpy" 2>/dev/null || { echo "SKIP: no numpy"; exit 0; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for spec in "mlx4 32" "mlx8 64"; do
  read -r format group <<< "$spec"
  out=$TMP/$format-g$group
  "$DSPARK" quantize -m "$M" -o "$out" --format "$format" --group-size "$group" \
    > "$TMP/stdout" 2> "$TMP/stderr" || fail "quantize $spec: $(cat "$TMP/stderr")"
  grep -q "100%" "$TMP/stderr" || fail "no finished progress bar: $(cat "$TMP/stderr")"
  grep -q "weights quantized" "$TMP/stdout" || fail "no summary: $(cat "$TMP/stdout")"
  # down_proj has 160 inputs: kept float with groups of 64, said in one line.
  kept=$(grep -c "kept float" "$TMP/stderr" || true)
  [[ $kept -eq $((group == 64 ? 1 : 0)) ]] || fail "$kept 'kept float' lines: $(cat "$TMP/stderr")"
  python3 - "$M" "$out" "${format#mlx}" "$group" <<'PY'
import json, struct, sys
import numpy as np

src_dir, out_dir, bits, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def read(path):
    """name -> (safetensors dtype, raw numpy array); BF16 as uint16 bits."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    kinds = {"F32": np.float32, "BF16": np.uint16, "U32": np.uint32, "I64": np.int64}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        out[name] = (e["dtype"], np.frombuffer(data[8 + n + s:8 + n + t], kinds[e["dtype"]]).reshape(e["shape"]))
    return out

def bf16_bits(x):
    """f32 -> bf16 bits, round to nearest even."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def mlx_affine(w, bits, group):
    """MLX's affine quantization in f32: (codes, scales, biases)."""
    n_bins = np.float32(2**bits - 1)
    g = w.reshape(w.shape[0], -1, group).astype(np.float32)
    lo, hi = g.min(-1), g.max(-1)
    low_edge = np.abs(lo) > np.abs(hi)
    step = np.maximum((hi - lo) / n_bins, np.float32(1e-7)).astype(np.float32)
    scale = np.where(low_edge, step, -step).astype(np.float32)
    edge = np.where(low_edge, lo, hi).astype(np.float32)
    z = np.rint(edge / scale).astype(np.float32)
    scale = np.where(z != 0, edge / np.where(z != 0, z, 1), scale).astype(np.float32)
    bias = np.where(z != 0, edge, 0).astype(np.float32)
    q = np.clip(np.rint((g - bias[..., None]) / scale[..., None]), 0, n_bins).astype(np.uint32)
    return q.reshape(w.shape), scale, bias

def pack(q, bits):
    per = 32 // bits
    q = q.reshape(q.shape[0], -1, per)
    return np.bitwise_or.reduce(q << (bits * np.arange(per, dtype=np.uint32)), axis=-1)

src = read(f"{src_dir}/model.safetensors")
out = read(f"{out_dir}/model.safetensors")
config = json.load(open(f"{out_dir}/config.json"))
quant = config["quantization"]
assert quant["bits"] == bits and quant["group_size"] == group and quant["mode"] == "affine", quant
assert config["quantization_config"] == quant
n_quantized = 0
for name, (dtype, w) in src.items():
    module = name[: -len(".weight")]
    if name.endswith(".weight") and w.ndim == 2 and w.shape[1] % group == 0:
        q, scale, bias = mlx_affine(w, bits, group)
        assert out[name][0] == "U32", name
        assert np.array_equal(out[name][1], pack(q, bits)), f"{name}: code words differ"
        for part, ref in ((".scales", scale), (".biases", bias)):
            got_dtype, got = out[module + part]
            assert got_dtype == "BF16", (name, got_dtype)
            assert np.array_equal(got, bf16_bits(ref)), f"{module}{part} differs"
        n_quantized += 1
    else:
        assert out[name][0] == dtype and np.array_equal(out[name][1], w), f"{name} changed"
        if name.endswith(".weight") and w.ndim == 2:
            assert quant.get(module) is False, f"{module}: kept float without a false entry"
assert n_quantized > 0
expected = set(src) | {n[:-7] + p for n in src if n.endswith(".weight") and out[n][0] == "U32" for p in (".scales", ".biases")}
assert set(out) == expected, set(out) ^ expected
print(f"{out_dir}: {n_quantized} weights match the NumPy reference bit for bit")
PY
  for f in tokenizer.json tokenizer_config.json generation_config.json; do
    cmp -s "$M/$f" "$out/$f" || fail "$f not copied"
  done
  "$DSPARK" generate -m "$out" -p "Hello" -n 8 > /dev/null 2> "$TMP/gen_err" ||
    fail "generate on the $spec checkpoint: $(cat "$TMP/gen_err")"
done

# A DSpark drafter: the drafter policy and its reload check, then it drafts for the quantized
# qwen3 target with the plain greedy tokens.
Q=$MODELS/qwen3
DRAFTER=$ROOT/tests/data/drafters/qwen3_deepspec
"$DSPARK" quantize -m "$DRAFTER" -o "$TMP/drafter" --format mlx4 --group-size 32 \
  > "$TMP/stdout" 2> "$TMP/stderr" || fail "quantize the drafter: $(cat "$TMP/stderr")"
grep -q "^drafter policy: 1 confidence-head weight(s) kept as stored" "$TMP/stdout" &&
  grep -q "reloaded: one row of 192 tap features" "$TMP/stdout" ||
  fail "no drafter policy / reload line: $(cat "$TMP/stdout")"
"$DSPARK" quantize -m "$Q" -o "$TMP/qwen3" --format mlx4 --group-size 32 > /dev/null 2>&1 ||
  fail "quantize qwen3"
tokens() {  # args... -> the "tokens" of the JSON line
  "$DSPARK" generate -m "$TMP/qwen3" -p "The cat sat on the mat. The cat sat on the" -n 32 \
    --temperature 0 --json "$@" | tail -n 1 |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'
}
plain=$(tokens)
spec=$(tokens --draft "$TMP/drafter" --gamma 4)
[[ $spec == "$plain" ]] || fail "quantized drafter: $spec != plain $plain"
expect_group_error() {
  local rc=0
  "$DSPARK" quantize -m "$DRAFTER" -o "$TMP/d128" --group-size 128 > /dev/null 2> "$TMP/err" || rc=$?
  [[ $rc -eq 1 ]] && grep -q "group size 32 or 64" "$TMP/err" ||
    fail "a drafter with groups of 128: rc $rc: $(cat "$TMP/err")"
}
expect_group_error

# GGUF output: the gguf package reads the file back; every 2-D weight's blocks equal
# gguf.quants.quantize of the checkpoint's weight (q/k rows in llama.cpp's interleaved order), and
# gguf.quants.dequantize of them is within the format's error of it; the hyper-parameters and the
# tokenizer are there; dspark generate runs it.
if python3 -c "import gguf" 2>/dev/null; then
  # A random Llama 3 of hidden size 256 for the k-quants' blocks of 256 values.
  WIDE=$TMP/wide
  python3 - "$M" "$WIDE" <<'PY'
import json, os, shutil, sys
import numpy as np
from safetensors.numpy import save_file
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(f"{src}/{f}", out)
cfg = json.load(open(f"{src}/config.json"))
h, inter, hd, nh, nkv, layers, v = 256, 512, 64, 4, 2, 2, cfg["vocab_size"]
cfg.update(hidden_size=h, intermediate_size=inter, head_dim=hd, num_attention_heads=nh,
           num_key_value_heads=nkv, num_hidden_layers=layers)
json.dump(cfg, open(f"{out}/config.json", "w"))
rng = np.random.default_rng(7)
shapes = {"model.embed_tokens.weight": (v, h), "lm_head.weight": (v, h), "model.norm.weight": (h,)}
for l in range(layers):
    p = f"model.layers.{l}."
    shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                   p + "self_attn.q_proj.weight": (nh * hd, h), p + "self_attn.k_proj.weight": (nkv * hd, h),
                   p + "self_attn.v_proj.weight": (nkv * hd, h), p + "self_attn.o_proj.weight": (h, nh * hd),
                   p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                   p + "mlp.down_proj.weight": (h, inter)})
save_file({k: (1 + 0.1 * rng.standard_normal(s) if len(s) == 1 else rng.standard_normal(s) / 16)
           .astype(np.float32) for k, s in shapes.items()}, f"{out}/model.safetensors")
PY
  for format in q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m q5_k_m; do
    SRC=$M
    [[ $format == *_k || $format == *_k_m ]] && SRC=$WIDE
    "$DSPARK" quantize -m "$SRC" -o "$TMP/$format" --format "$format" > /dev/null 2> "$TMP/stderr" ||
      fail "quantize --format $format: $(cat "$TMP/stderr")"
    python3 - "$SRC" "$TMP/$format/model.gguf" "$format" <<'PY'
import json, sys
import gguf
import numpy as np
from safetensors.numpy import load_file

src, path, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
mix = fmt.endswith("_m")  # llama-quantize's medium mix of the base k-quant
base = fmt[:-2] if mix else fmt
cfg = json.load(open(f"{src}/config.json"))
n_layers = cfg["num_hidden_layers"]

def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

def type_of(hf):  # the type each weight must be written in
    t = base
    if mix and (hf == "lm_head.weight" or (
            hf.endswith((".self_attn.v_proj.weight", ".mlp.down_proj.weight"))
            and more_bits(int(hf.split(".")[2]), n_layers))):
        t = "q6_k"
    return t
st = load_file(f"{src}/model.safetensors")
r = gguf.GGUFReader(path)

def field(key):
    f = r.fields[key]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        return len(f.data)
    return f.parts[f.data[0]][0].item()

assert field("general.architecture") == "llama"
assert field("llama.block_count") == cfg["num_hidden_layers"]
assert field("llama.embedding_length") == cfg["hidden_size"]
assert field("llama.attention.head_count_kv") == cfg["num_key_value_heads"]
assert field("tokenizer.ggml.model") == "gpt2"
assert field("tokenizer.ggml.tokens") == cfg["vocab_size"]
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

def interleave(w, heads):  # llama.cpp's q/k row order: pairs (r, r + half) of each head
    return w.reshape(heads, 2, w.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(w.shape)

names = {"model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight"}
layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down"}
for l in range(cfg["num_hidden_layers"]):
    for hf, g in layer.items():
        names[f"model.layers.{l}.{hf}.weight"] = f"blk.{l}.{g}.weight"
tensors = {t.name: t for t in r.tensors}
tols = {"q8_0": 0.01, "q4_0": 0.15, "q4_1": 0.1, "q5_0": 0.08, "q5_1": 0.05, "q4_k": 0.12,
        "q5_k": 0.06, "q6_k": 0.03}
errors, promoted = [], 0
for hf, g in names.items():
    w = st[hf].astype(np.float32)
    if ".q_proj." in hf:
        w = interleave(w, nh)
    if ".k_proj." in hf:
        w = interleave(w, nkv)
    t = tensors[g]
    want = type_of(hf)
    promoted += want != base
    qtype, tol = getattr(gguf.GGMLQuantizationType, want.upper()), tols[want]
    assert t.tensor_type == qtype, (g, t.tensor_type, want)
    assert list(t.shape) == [w.shape[1], w.shape[0]], (g, t.shape)
    if not want.endswith("_k"):  # the gguf package has no k-quant quantizer
        ref = gguf.quants.quantize(w, qtype)
        assert np.array_equal(np.asarray(t.data).reshape(ref.shape), ref), f"{g}: blocks differ from gguf's"
    back = gguf.quants.dequantize(np.asarray(t.data), qtype).reshape(w.shape)
    err = np.sqrt(np.mean((back - w) ** 2) / np.mean(w ** 2))
    errors.append(err)
    assert err < tol, (g, err)
for hf, g in (("model.norm.weight", "output_norm.weight"),):
    assert tensors[g].tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(tensors[g].data), st[hf])
assert "rope_freqs.weight" in tensors  # llama3 rope scaling
what = "" if base.endswith("_k") else " equal gguf.quants.quantize's blocks;"
if mix:
    assert promoted == 3, promoted  # the head, layer 1's v_proj and down_proj (of 2 layers)
    what += f" {promoted} in Q6_K;"
print(f"{path}: {len(names)} weights{what} dequantized within {max(errors):.4f} relative RMS")
PY
    "$DSPARK" generate -m "$TMP/$format" -p "Hello" -n 8 > /dev/null 2> "$TMP/gen_err" ||
      fail "generate on the $format GGUF: $(cat "$TMP/gen_err")"
  done
  # Qwen3-MoE (8 experts, layer 1 dense) as a `qwen3moe` file in Q8_0: each projection's experts
  # stacked in one tensor whose blocks equal gguf.quants.quantize of the stacked weights, the
  # router F32 and unchanged, the expert keys there.
  MOE=$MODELS/qwen3_moe
  "$DSPARK" quantize -m "$MOE" -o "$TMP/moe" --format q8_0 > /dev/null 2> "$TMP/stderr" ||
    fail "quantize qwen3_moe: $(cat "$TMP/stderr")"
  python3 - "$MOE" "$TMP/moe/model.gguf" <<'PY'
import json, sys
import gguf
import numpy as np
from safetensors.numpy import load_file

src, path = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{src}/config.json"))
st = load_file(f"{src}/model.safetensors")
r = gguf.GGUFReader(path)
tensors = {t.name: t for t in r.tensors}
assert bytes(r.fields["general.architecture"].parts[-1]).decode() == "qwen3moe"
def u32(key):
    return r.fields[key].parts[-1][0].item()
assert u32("qwen3moe.expert_count") == cfg["num_local_experts"]
assert u32("qwen3moe.expert_used_count") == cfg["num_experts_per_tok"]
assert u32("qwen3moe.expert_feed_forward_length") == cfg["moe_intermediate_size"]
n, stacks = cfg["num_local_experts"], 0
for l in range(cfg["num_hidden_layers"]):
    if l in cfg["mlp_only_layers"]:
        assert f"blk.{l}.ffn_gate_inp.weight" not in tensors
        continue
    router = tensors[f"blk.{l}.ffn_gate_inp.weight"]
    assert router.tensor_type == gguf.GGMLQuantizationType.F32
    assert np.array_equal(np.asarray(router.data).reshape(n, -1), st[f"model.layers.{l}.mlp.gate.weight"])
    for proj in ("gate", "up", "down"):
        w = np.stack([st[f"model.layers.{l}.mlp.experts.{e}.{proj}_proj.weight"] for e in range(n)])
        t = tensors[f"blk.{l}.ffn_{proj}_exps.weight"]
        assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0, (t.name, t.tensor_type)
        assert list(t.shape) == [w.shape[2], w.shape[1], w.shape[0]], (t.name, t.shape)
        ref = gguf.quants.quantize(w.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        assert np.array_equal(np.asarray(t.data).reshape(ref.shape), ref), f"{t.name}: blocks differ"
        stacks += 1
print(f"{path}: {stacks} expert stacks equal gguf.quants.quantize's blocks, routers F32")
PY
  "$DSPARK" generate -m "$TMP/moe" -p "Hello" -n 8 > /dev/null 2> "$TMP/gen_err" ||
    fail "generate on the qwen3moe GGUF: $(cat "$TMP/gen_err")"
else
  echo "SKIP (GGUF part): no gguf package"
fi

# expect_error <rc> <message substring> -- <dspark args...>
expect_error() {
  local want_rc=$1 want_msg=$2
  shift 3
  local rc=0
  "$DSPARK" "$@" > /dev/null 2> "$TMP/err" || rc=$?
  [[ $rc -eq $want_rc ]] || fail "dspark $*: exit $rc, want $want_rc: $(cat "$TMP/err")"
  [[ $(wc -l < "$TMP/err") -eq 1 ]] && grep -q '^error: ' "$TMP/err" ||
    fail "dspark $*: stderr is not one error line: $(cat "$TMP/err")"
  grep -qi -- "$want_msg" "$TMP/err" || fail "dspark $*: message lacks '$want_msg': $(cat "$TMP/err")"
  echo "ok   (dspark $*): $(cat "$TMP/err")"
}
expect_error 1 "does not exist" -- quantize -m "$TMP/none" -o "$TMP/x1"
expect_error 1 "already quantized" -- quantize -m "$TMP/mlx4-g32" -o "$TMP/x2"
expect_error 1 "not an empty directory" -- quantize -m "$M" -o "$TMP/mlx4-g32"
expect_error 2 "format" -- quantize -m "$M" -o "$TMP/x3" --format q2_k
expect_error 1 "drafter" -- quantize -m "$DRAFTER" -o "$TMP/x5" --format q8_0
mkdir "$TMP/gemma2" && cp "$M"/* "$TMP/gemma2/" &&
  sed -i 's/"LlamaForCausalLM"/"Gemma2ForCausalLM"/' "$TMP/gemma2/config.json"
expect_error 1 "Gemma2ForCausalLM" -- quantize -m "$TMP/gemma2" -o "$TMP/x6" --format q4_1
expect_error 2 "group-size" -- quantize -m "$M" -o "$TMP/x4" --group-size 48
echo "PASS"
