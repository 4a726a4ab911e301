#!/usr/bin/env bash
# tools/synth/make_random_checkpoint.py: --list names the MoE and MLA + MoE benchmark shapes; the
# tensor layout it writes for a config equals the golden fixtures' (names and shapes: Llama,
# Mistral, Qwen2, Qwen3, Qwen3-MoE, DeepSeek-V3, GLM-4.5); random Qwen3-MoE and DeepSeek-V3
# checkpoints it writes (the latter without a query LoRA, as deepseek-v2-lite) hold N(0, 0.02)
# bf16 weights and load and generate in dspark; random MLX 4-bit g64 and 8-bit g32 checkpoints of
# the llama3 fixture load and generate as MLX blocks.
#   bash tests/cli/random_checkpoint_test.sh <path-to-dspark> <repo-root>
set -euo pipefail
DSPARK=$1
ROOT=$2
MODELS=${DSPARK_TEST_MODELS:-$ROOT/tests/data/models}
[[ -d $MODELS/qwen3_moe && -d $MODELS/deepseek_v3 ]] || { echo "SKIP: no fixtures"; exit 0; }
python3 -c "import numpy, safetensors" 2>/dev/null || { echo "SKIP: no numpy/safetensors"; exit 0; }
TOOL=$ROOT/tools/synth/make_random_checkpoint.py
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 "$TOOL" --list > "$TMP/list.txt" || fail "--list exited $?"
grep -Eq '^qwen3-30b-a3b +30\.53 B params +61\.06 GB bf16 +6\.08 GB read per token' "$TMP/list.txt" ||
  fail "--list: $(cat "$TMP/list.txt")"
grep -Eq '^deepseek-v2-lite +15\.71 B params +31\.41 GB bf16 +4\.90 GB read per token' \
  "$TMP/list.txt" || fail "--list: $(cat "$TMP/list.txt")"

python3 - "$ROOT/tools/synth" "$MODELS" <<'PY' || fail "tensor layout"
import json, os, sys
sys.path.insert(0, sys.argv[1])
from checkpoint_shapes import tensor_shapes
from safetensors import safe_open
for name in ("llama3", "mistral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "glm4_moe",
             "deepseek_v3_mtp", "glm4_moe_mtp"):
    d = os.path.join(sys.argv[2], name)
    if not os.path.isdir(d):
        continue
    cfg = json.load(open(os.path.join(d, "config.json")))
    want = dict(tensor_shapes(cfg, mtp=name.endswith("_mtp")))
    with safe_open(os.path.join(d, "model.safetensors"), "np") as f:
        got = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    assert want == got, (name, sorted(set(want.items()) ^ set(got.items()))[:8])
    print(f"{name}: {len(got)} tensors as the fixture")
PY

# Random checkpoints of the fixtures' configs (no eos, so that 4 tokens always come),
# deepseek_v3's without q_lora_rank and with its MTP layer (--mtp 1, drafting with --draft mtp),
# in dspark.
for name in qwen3_moe deepseek_v3; do
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = None
if c["model_type"] == "deepseek_v3": c["q_lora_rank"] = None
json.dump(c, open(sys.argv[2], "w"))' "$MODELS/$name/config.json" "$TMP/$name.json"
  mtp=(); draft=()
  [[ $name == deepseek_v3 ]] && mtp=(--mtp 1) && draft=(--draft mtp --gamma 2)
  python3 "$TOOL" --config "$TMP/$name.json" --layers 3 "${mtp[@]}" --out "$TMP/$name" \
    --tokenizer "$MODELS/$name" > "$TMP/synth.log" || fail "writing $name: $(cat "$TMP/synth.log")"
  python3 - "$TMP/$name" <<'PY' || fail "$name checkpoint"
import json, sys
from safetensors import safe_open
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["num_hidden_layers"] == 3 and c["torch_dtype"] == "bfloat16" and "dtype" not in c, c
with safe_open(sys.argv[1] + "/model.safetensors", "np") as f:
    kinds = {f.get_slice(k).get_dtype() for k in f.keys()}
    mtp = c.get("num_nextn_predict_layers", 0) if c["model_type"] == "deepseek_v3" else 0
    assert mtp in (0, 1), mtp
    # Layer 3 only as the MTP layer (deepseek_v3 with --mtp 1).
    assert any(k.startswith("model.layers.3.") for k in f.keys()) == (mtp == 1)
    if mtp:
        assert f.get_slice("model.layers.3.eh_proj.weight").get_shape() == [
            c["hidden_size"], 2 * c["hidden_size"]]
assert kinds <= {"BF16", "F32"}, kinds
# The bf16 values: N(0, 0.02) weights, unit norms.
import numpy as np, struct
raw = open(sys.argv[1] + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
def values(name):
    b, e = header[name]["data_offsets"]
    u = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=np.uint16).astype(np.uint32) << 16
    return u.view(np.float32)
w = values("model.embed_tokens.weight")
assert abs(w.std() - 0.02) < 0.001 and abs(w.mean()) < 0.001, (w.mean(), w.std())
assert (values("model.norm.weight") == 1).all()
PY
  "$DSPARK" generate -m "$TMP/$name" -p "Hello world" -n 4 --temperature 0 "${draft[@]}" --json \
    > "$TMP/out.json" 2> "$TMP/err" || fail "generate $name: $(cat "$TMP/err")"
  python3 -c 'import json, sys
d = json.loads(open(sys.argv[1]).read().rstrip("\n").split("\n")[-1])
assert len(d["tokens"]) == 4, d' "$TMP/out.json" || fail "$name did not generate 4 tokens"
  echo "$name: random checkpoint generates"
done

# --mlx: the projections, embedding and LM head as mlx-lm stores them (U32 codes, bf16 scales
# and biases, config.json quantization), loaded and run as MLX blocks.
[[ -d $MODELS/llama3 ]] || { echo "SKIP: no llama3 fixture for --mlx"; exit 0; }
python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = None
json.dump(c, open(sys.argv[2], "w"))' "$MODELS/llama3/config.json" "$TMP/llama3.json"
for spec in "4 64" "8 32"; do
  set -- $spec
  out="$TMP/llama3-mlx$1-g$2"
  python3 "$TOOL" --config "$TMP/llama3.json" --layers 2 --mlx "$1" --group-size "$2" \
    --out "$out" --tokenizer "$MODELS/llama3" > "$TMP/synth.log" ||
    fail "writing mlx$1 g$2: $(cat "$TMP/synth.log")"
  python3 - "$out" "$1" "$2" <<'PY' || fail "mlx$1 g$2 checkpoint"
import json, sys
from safetensors import safe_open
out, bits, group = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = json.load(open(out + "/config.json"))
assert c["quantization"] == {"group_size": group, "bits": bits}, c
with safe_open(out + "/model.safetensors", "np") as f:
    w = f.get_slice("model.layers.0.self_attn.q_proj.weight")
    s = f.get_slice("model.layers.0.self_attn.q_proj.scales")
    n, k = 64, 64  # the fixture's hidden size
    assert w.get_dtype() == "U32" and w.get_shape() == [n, k * bits // 32], w.get_shape()
    assert s.get_dtype() == "BF16" and s.get_shape() == [n, k // group], s.get_shape()
    assert f.get_slice("model.embed_tokens.weight").get_dtype() == "U32"
    assert f.get_slice("model.norm.weight").get_dtype() == "BF16"
PY
  "$DSPARK" generate -m "$out" -p "Hello world" -n 4 --temperature 0 --json \
    > "$TMP/out.json" 2> "$TMP/err" || fail "generate mlx$1 g$2: $(cat "$TMP/err")"
  ! grep -q "dequantized" "$TMP/err" || fail "mlx$1 g$2 not run as blocks: $(cat "$TMP/err")"
  python3 -c 'import json, sys
d = json.loads(open(sys.argv[1]).read().rstrip("\n").split("\n")[-1])
assert len(d["tokens"]) == 4, d' "$TMP/out.json" || fail "mlx$1 g$2 did not generate 4 tokens"
  echo "llama3 mlx$1 g$2: random checkpoint generates"
done
