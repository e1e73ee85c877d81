#!/usr/bin/env python3
# fused_bytes.py INSPECT_TXT [MIN_ELEMENTS] — bytes read and written per step by the
# memory-bound kernels (fused, reduce, ...) of the device program that `tessel inspect`
# prints: `BUILD/tessel inspect --model resnet20 --batch 128 > F; python3 bench/fused_bytes.py F`
# (stop 30: 1016.8 MiB on stop 29's build, 941.7 with sibling sums in one pass).
# slice, convert) of the device program printed by `tessel inspect`, counting only
# operands/results of the streamed size (broadcast per-channel vectors are negligible).
import re, sys
from math import prod
SZ = {'f32': 4, 'bf16': 2, 'f16': 2, 'f64': 8, 'i32': 4, 'i64': 8, 'bool': 1, 'u8': 1}
text = open(sys.argv[1]).read()
prog = text[text.index('== program'):]
info = {}
tot_r = tot_w = 0; kinds = {}
big = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 16
for line in prog.splitlines():
    m = re.match(r'%(\d+) = (\w+)(?:\((.*?)\))?(.*): (\w+)\[([\d,]*)\]\s*$', line)
    if not m: continue
    nid, op, args, rest, dt, shp = m.groups(); args = args or ""
    shape = [int(s) for s in shp.split(',') if s]
    n = prod(shape) if shape else 1
    info[nid] = (dt, n)
    if op in ('input', 'constant', 'reshape', 'conv2d', 'conv2d_bwd_data', 'conv2d_bwd_filter', 'dot_general',
              'max_pool', 'avg_pool', 'all_reduce', 'iota') or op.startswith('conv') or op.startswith('pool'):
        continue
    of = re.search(r'of=\[([\d,]*)\]', rest)
    stream = prod(int(s) for s in of.group(1).split(',')) if of else n
    if op == 'reduce': stream = info[re.findall(r'%(\d+)', args)[0]][1]
    if stream < big: continue
    rd = 0
    for a in re.findall(r'%(\d+)', args):
        d, an = info[a]
        if an == stream: rd += an * SZ[d]
    wr = n * SZ[dt] if n == stream else 0
    tot_r += rd; tot_w += wr
    k = kinds.setdefault(op, [0, 0, 0]); k[0] += 1; k[1] += rd; k[2] += wr
print(f"memory-bound kernels over >= {big} elements: read {tot_r/2**20:.1f} MiB, written {tot_w/2**20:.1f} MiB, total {(tot_r+tot_w)/2**20:.1f} MiB per step")
for op, (c, r, w) in sorted(kinds.items()):
    print(f"  {op}: {c} kernels, read {r/2**20:.1f} MiB, written {w/2**20:.1f} MiB")
