#!/usr/bin/python3
"""make_idx.py DIR — a small Fashion-MNIST-shaped dataset for the CLI tests:
256 training and 100 test images of 1x28x28 with random pixels and labels
(seeded), as IDX files in DIR (created)."""
import os
import random
import struct
import sys

d = sys.argv[1]
os.makedirs(d)
rng = random.Random(1)


def idx(path, magic, dims, n):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", x) for x in dims))
        f.write(bytes(rng.randrange(256 if magic == 0x803 else 10) for _ in range(n)))


for split, n in (("train", 256), ("t10k", 100)):
    idx(f"{d}/{split}-images-idx3-ubyte", 0x803, (n, 28, 28), n * 784)
    idx(f"{d}/{split}-labels-idx1-ubyte", 0x801, (n,), n)
