#!/usr/bin/env python3
"""A draft model whose drafts the target (almost) never accepts: the target's first N blocks (as
make_layer_draft.py cuts them) with the rows of its embedding table and LM head permuted at random,
so every proposed token is a random relabelling of what the cut model would predict. Real tensor
types and shapes, so a draft step costs what a draft model of that size costs: a stand-in for a
drafter that does not pay, for measuring what the adaptive policy spends on it on the CPU.

    python3 tools/eval/make_scrambled_draft.py MODEL.gguf OUT.gguf --layers 4

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
    ap.add_argument("--seed", type=int, default=7, help="seed of the row permutations")
    args = ap.parse_args()

    r = gguf.GGUFReader(args.model)
    arch_field = r.fields.get("general.architecture")
    if arch_field is None:
        print(f"make_scrambled_draft: {args.model} has no general.architecture", file=sys.stderr)
        return 1
    arch = arch_field.contents()
    count_key = f"{arch}.block_count"
    n_blocks = int(r.fields[count_key].contents())
    if not 1 <= args.layers <= n_blocks:
        print(f"make_scrambled_draft: --layers must be in [1, {n_blocks}]", file=sys.stderr)
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

    rng = np.random.default_rng(args.seed)
    block = re.compile(r"^blk\.(\d+)\.")
    for t in r.tensors:
        m = block.match(t.name)
        if m and int(m.group(1)) >= args.layers:
            continue
        data = np.array(t.data)
        if t.name in ("token_embd.weight", "output.weight"):
            data = data[rng.permutation(data.shape[0])]  # whole rows: the blocks stay valid
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"make_scrambled_draft: {args.out}: {args.layers} of {n_blocks} blocks, rows permuted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
