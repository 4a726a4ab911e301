#!/usr/bin/env python3
"""A draft model cut from a GGUF target: its first N blocks, with the target's embedding, final norm
and LM head, in the same tensor types (no requantization). It shares the target's tokenizer, so
`--draft model:OUT.gguf` can propose tokens for the target: an independent draft-model source
for tests and evaluations (e.g. greedy speculative == plain greedy with a draft model), not a
trained drafter. With --scramble SEED the rows of its embedding table and LM head are permuted at
random: every proposed token is a random relabelling of what the cut model would predict, so the
target (almost) never accepts a draft, at the cost of a real draft model of that size (what the
adaptive draft policy spends on a drafter that does not pay).

    python3 tools/eval/make_layer_draft.py MODEL.gguf OUT.gguf --layers 8 [--scramble 7]

Needs the `gguf` PyPI package (scripts/setup_python.sh installs it).
"""
import argparse
import re
import sys

import gguf
import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the target's GGUF file")
    ap.add_argument("out", help="the draft model's GGUF file to write")
    ap.add_argument("--layers", type=int, required=True, help="blocks to keep (the first N)")
    ap.add_argument("--scramble", type=int, metavar="SEED",
                    help="permute the embedding and LM-head rows with this seed")
    args = ap.parse_args()

    r = gguf.GGUFReader(args.model)
    arch_field = r.fields.get("general.architecture")
    if arch_field is None:
        print(f"make_layer_draft: {args.model} has no general.architecture", file=sys.stderr)
        return 1
    arch = arch_field.contents()
    count_key = f"{arch}.block_count"
    n_blocks = int(r.fields[count_key].contents())
    if not 1 <= args.layers <= n_blocks:
        print(f"make_layer_draft: --layers must be in [1, {n_blocks}]", file=sys.stderr)
        return 1

    w = gguf.GGUFWriter(args.out, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # written by the writer itself
        vtype = field.types[0]
        if name == count_key:
            w.add_uint32(name, args.layers)
        elif vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), vtype)

    rng = np.random.default_rng(args.scramble) if args.scramble is not None else None
    block = re.compile(r"^blk\.(\d+)\.")
    kept = 0
    for t in r.tensors:
        m = block.match(t.name)
        if m and int(m.group(1)) >= args.layers:
            continue
        data = np.asarray(t.data)
        if rng is not None and t.name in ("token_embd.weight", "output.weight"):
            data = data[rng.permutation(data.shape[0])]  # whole rows: the blocks stay valid
        # The writer takes the raw bytes of quantized types with their element shape.
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
        kept += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    scrambled = "" if rng is None else ", vocabulary rows permuted"
    print(f"make_layer_draft: {args.out}: {args.layers} of {n_blocks} blocks, {kept} tensors"
          f"{scrambled}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
