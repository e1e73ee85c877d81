"""text_data.py — tessel's byte-level text dataset in Python, bit for bit.

For PyTorch scripts that must see what `tessel train --dataset text` sees:
the same 90/10 split, the same training windows in the same order (the
loader's (seed, epoch) permutation and per-sample keys), and the same fixed
validation windows. tests/test_text.c checks this file against the C loader
(src/data/text.c, src/data/loader_order.c, src/data/dataset.c ts_shuffle).

    from text_data import TextData
    d = TextData("/usr/local/share/tessel/kjv.txt", seq=128, batch=16, seed=0, eval_batches=20)
    x, y = d.train_batch(step)      # step 0, 1, ...: numpy int64 (B, T) each
    x, y = d.valid_batch(k)         # k in [0, eval_batches)

Run as a script, it writes the int32 little-endian x of `steps` training
batches and then of `eval_batches` validation batches to stdout (the test's
dump): text_data.py FILE SEQ BATCH SEED STEPS EVAL_BATCHES
"""
import sys

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
KJV = "/usr/local/share/tessel/kjv.txt"
VALID_SEED = 0  # tools/train_text.c TEXT_VALID_SEED: fixed, whatever --seed


def splitmix64(x):
    """(new state, output) of util/prng.h ts_splitmix64."""
    x = (x + GOLDEN) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


class Xoshiro:
    """util/prng.h: xoshiro256** seeded by splitmix64."""

    def __init__(self, seed):
        self.s = []
        x = seed & M64
        for _ in range(4):
            x, z = splitmix64(x)
            self.s.append(z)

    def next(self):
        s = self.s
        rotl = lambda v, k: ((v << k) | (v >> (64 - k))) & M64
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        limit = M64 - (M64 % n)
        while True:
            x = self.next()
            if x < limit:
                return x % n


def shuffle(n, seed):
    """data/dataset.c ts_shuffle: Fisher-Yates from the top."""
    r = Xoshiro(seed)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = r.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def ld_hash(a, b):
    """data/loader_order.c ld_hash."""
    x = (a ^ ((b * GOLDEN) & M64) ^ 0x6A09E667F3BCC909) & M64
    return splitmix64(x)[1]


def sample_key(seed, epoch, index):
    return ld_hash(ld_hash(seed ^ 0xA5A5A5A5A5A5A5A5, epoch), index)


def train_bytes(n):
    """ts_text_train_bytes: the first n * 9 // 10 bytes train."""
    return n * 9 // 10


def valid_start(seed, i, L, seq):
    """ts_text_valid_start."""
    x = (seed ^ ((i * 0xD1B54A32D192ED03) & M64)) & M64
    return splitmix64(x)[1] % (L - seq)


class TextData:
    def __init__(self, path, seq, batch, seed=0, eval_batches=20, valid_seed=VALID_SEED):
        data = np.fromfile(path, dtype=np.uint8)
        nt = train_bytes(len(data))
        self.train, self.valid = data[:nt], data[nt:]
        if len(self.valid) < seq + 1:
            raise ValueError(f"{path}: {len(data)} bytes is too short for seq {seq}")
        self.seq, self.batch, self.seed = seq, batch, seed
        self.n = (len(self.train) - 1) // seq  # training slots (samples)
        self.steps_per_epoch = self.n // batch  # the last partial batch is dropped
        self.eval_batches, self.valid_seed = eval_batches, valid_seed
        self._order = (None, None)

    def _epoch_order(self, epoch):
        if self._order[0] != epoch:
            self._order = (epoch, shuffle(self.n, ld_hash(self.seed, epoch)))
        return self._order[1]

    def train_start(self, epoch, i):
        """Where training sample (slot) i starts in epoch `epoch`."""
        seq, L = self.seq, len(self.train)
        m = min(seq, L - seq - i * seq)
        return i * seq + sample_key(self.seed, epoch, i) % m

    def _windows(self, data, starts):
        idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(self.seq + 1)[None, :]
        w = data[idx].astype(np.int64)
        return w[:, :-1], w[:, 1:]

    def train_batch(self, step):
        """Global batch `step` (0-based, epochs following each other): x, y (B, T)."""
        epoch, s = divmod(step, self.steps_per_epoch)
        order = self._epoch_order(epoch)
        idx = order[s * self.batch:(s + 1) * self.batch]
        return self._windows(self.train, [self.train_start(epoch, i) for i in idx])

    def valid_batch(self, k):
        first = k * self.batch
        starts = [valid_start(self.valid_seed, i, len(self.valid), self.seq) for i in range(first, first + self.batch)]
        return self._windows(self.valid, starts)


if __name__ == "__main__":
    path, seq, batch, seed, steps, nval = sys.argv[1], *map(int, sys.argv[2:7])
    d = TextData(path, seq, batch, seed, nval)
    out = sys.stdout.buffer
    for st in range(steps):
        out.write(d.train_batch(st)[0].astype("<i4").tobytes())
    for k in range(nval):
        out.write(d.valid_batch(k)[0].astype("<i4").tobytes())
