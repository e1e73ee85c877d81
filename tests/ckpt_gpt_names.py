#!/usr/bin/python3
"""ckpt_gpt_names.py — the names and shapes of a GPT export (run by
tests/ckpt_gpt.sh): the safetensors file `tessel ckpt export` wrote must hold
exactly the parameters of nanoGPT's model.py GPT (tests/torch_gpt.py: the same
module names; nn.Linear weights (out, in), so c_attn is (3C, C) and (3C)),
each with nanoGPT's shape and dtype F32. nanoGPT's lm_head.weight is tied to
transformer.wte.weight (the same Parameter) and is not written.

usage: ckpt_gpt_names.py FILE LAYERS D_MODEL SEQ VOCAB     (exit 0 on a match)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ckpt_torch import read_safetensors_header  # noqa: E402
from torch_gpt import GPT  # noqa: E402


def main():
    path, layers, d, seq, vocab = sys.argv[1], *map(int, sys.argv[2:6])
    header = read_safetensors_header(path)
    got = {k: (v["dtype"], tuple(v["shape"])) for k, v in header.items() if k != "__metadata__"}
    heads = 1  # the head count does not change any shape
    want = {k: ("F32", tuple(v.shape)) for k, v in GPT(layers, d, heads, seq, vocab).state_dict().items()}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    wrong = sorted(f"{k}: {got[k]} (nanoGPT {want[k]})" for k in set(got) & set(want) if got[k] != want[k])
    for what, items in (("missing", missing), ("not nanoGPT's", extra), ("wrong dtype/shape", wrong)):
        if items:
            print(f"ckpt_gpt_names: {what}: {', '.join(items[:8])}")
    if missing or extra or wrong:
        sys.exit(1)
    print(f"{len(got)} tensors with nanoGPT's names and shapes")


if __name__ == "__main__":
    main()
