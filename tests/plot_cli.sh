#!/usr/bin/env bash
# plot_cli.sh BUILD_DIR — `tessel plot` on logs written here with printf:
#  - a PNG has the requested size (IHDR) and, inside the plot area, pixels of
#    each run's palette colour (the PNG decoded with zlib, no imaging library);
#  - SVG parses as XML; PDF starts with %PDF, ends with %%EOF, has pages;
#  - several metrics, --x time/epoch, --smooth, --log-y, --label draw;
#  - malformed lines are skipped with a "file:line" warning;
#  - no usable points, an unknown metric, a missing file, bad flags: non-zero
#    with a message naming the culprit;
#  - -o on a FIFO (or a link to a device) is refused and the FIFO left as it
#    was; an existing regular file (or the one a symlink names) is replaced,
#    and no temporary file is left behind.
set -u
build="${1:?usage: plot_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
py=/usr/bin/python3

# Two runs of 3 epochs x 40 steps: loss decaying at different rates (run b
# slower per step and per second), an eval line every 20 steps, an epoch line
# after each epoch.
write_log() { # write_log FILE RATE STEP_MS
  local f="$1" rate="$2" ms="$3" step=0
  : >"$f"
  for epoch in 1 2 3; do
    for _ in $(seq 40); do
      step=$((step + 1))
      loss=$(awk -v s="$step" -v r="$rate" 'BEGIN { printf "%.6f", 0.3 + 2 * exp(-s * r / 30) + 0.05 * ((s * 7) % 5) / 5 }')
      printf '{"step":%d,"loss":%s,"step_ms":%s}\n' "$step" "$loss" "$ms" >>"$f"
      if [ $((step % 20)) -eq 0 ]; then printf '{"step":%d,"val_loss":%s}\n' "$step" "$loss" >>"$f"; fi
    done
    printf '{"epoch":%d,"test_accuracy":%s}\n' "$epoch" "$(awk -v e="$epoch" -v r="$rate" 'BEGIN { printf "%.4f", 0.7 + 0.04 * e * r }')" >>"$f"
  done
}
write_log "$tmp/a.jsonl" 2 3.5
write_log "$tmp/b.jsonl" 1 5.0

run() { # run NAME ARGS...: tessel plot ARGS, stdout+stderr in $tmp/NAME.err, exit code in $rc
  local name="$1"
  shift
  rc=0
  timeout 60 "$tessel" plot "$@" >"$tmp/$name.err" 2>&1 || rc=$?
}
expect_ok() { # expect_ok NAME DESCRIPTION ARGS...
  local name="$1" what="$2"
  shift 2
  run "$name" "$@"
  if [ "$rc" -eq 0 ]; then ok "$what"; else bad "$what: exit $rc: $(head -3 "$tmp/$name.err")"; fi
}
expect_fail() { # expect_fail NAME DESCRIPTION MESSAGE ARGS...: non-zero, stderr has MESSAGE
  local name="$1" what="$2" msg="$3"
  shift 3
  run "$name" "$@"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -qF -- "$msg" "$tmp/$name.err"; then
    ok "$what: exit $rc, '$msg'"
  else bad "$what: exit $rc, wanted '$msg', got: $(head -3 "$tmp/$name.err")"; fi
}

# ---- PNG: size and the runs' colours in the plot area ----
expect_ok png "two runs as a 640x400 PNG" "$tmp/a.jsonl" "$tmp/b.jsonl" -o "$tmp/curves.png" --size 640x400
if $py - "$tmp/curves.png" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
pos, idat, ihdr = 8, b"", None
while pos < len(data):  # chunks: length, type, data, crc
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0], kind
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, ctype = ihdr[:4]
assert (w, h) == (640, 400), f"size {w}x{h}, wanted 640x400"
assert depth == 8 and ctype in (2, 6), f"bit depth {depth}, colour type {ctype}"
bpp = 3 if ctype == 2 else 4
raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
for y in range(h):  # undo the per-row filters (PNG spec, section 9)
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
def count(rgb, y0):  # pixels within 12 per channel of rgb, below the legend strip
    hits = 0
    for y in range(y0, h):
        r = rows[y]
        for x in range(0, stride, bpp):
            if all(abs(r[x + k] - rgb[k]) <= 12 for k in range(3)): hits += 1
    return hits
for name, rgb in (("a (blue)", (0x1f, 0x77, 0xb4)), ("b (orange)", (0xff, 0x7f, 0x0e))):
    n = count(rgb, 60)
    print(f"  run {name}: {n} pixels of its colour in the plot area")
    assert n >= 50, f"run {name}: only {n} pixels of its colour"
white = sum(1 for r in rows for x in range(0, stride, bpp) if r[x:x + 3] == b"\xff\xff\xff")
assert white > w * h // 2, "the background is not mostly white"
PY
then ok "PNG is 640x400 and holds both runs' colours"; else bad "PNG check"; fi

# ---- SVG and PDF from the same drawing code ----
expect_ok svg "SVG, two panels" "$tmp/a.jsonl" "$tmp/b.jsonl" -o "$tmp/curves.svg" --metric loss,val_loss
if $py -c "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith('svg'), r.tag" \
  "$tmp/curves.svg"; then ok "SVG parses as XML"; else bad "SVG is not well-formed XML"; fi
expect_ok pdf "PDF, test accuracy by epoch" "$tmp/a.jsonl" "$tmp/b.jsonl" -o "$tmp/curves.pdf" --metric test_accuracy --x epoch
if $py - "$tmp/curves.pdf" <<'PY'
import re, sys
d = open(sys.argv[1], "rb").read()
assert d.startswith(b"%PDF-"), d[:8]
assert d.rstrip().endswith(b"%%EOF"), d[-16:]
pages = re.findall(rb"/Type\s*/Page\b", d)
assert len(pages) >= 1, "no page object"
PY
then ok "PDF starts with %PDF, ends with %%EOF and has a page"; else bad "PDF structure"; fi

# ---- the other axes and options ----
expect_ok time "--x time, three metrics, --smooth, --label" "$tmp/a.jsonl" "$tmp/b.jsonl" -o "$tmp/time.png" \
  --x time --metric loss --metric test_accuracy,val_loss --smooth 5 --label fast --label slow
expect_ok logy "--log-y" "$tmp/a.jsonl" -o "$tmp/logy.png" --log-y
expect_ok stepms "any numeric field is a metric (step_ms)" "$tmp/a.jsonl" -o "$tmp/ms.svg" --metric step_ms

# ---- malformed lines: skipped with file:line ----
{
  printf '{"step":1,"loss":2.0,"step_ms":3}\n'
  printf '{"step":2,"loss":1.9,"step_ms":3}\n'
  printf '{"step":3,"loss":\n'                 # truncated
  printf '\n'                                  # blank: fine
  printf 'garbage\n'
  printf '{"step":4,"loss":1.7,"extra":{"nested":[1,{"x":null}]},"note":"ok \\u00e9"}\n'
  printf '{"step":5,"loss":1.6} trailing\n'
  printf '{"step":6,"loss":1.5,"step_ms":3}\n'
} >"$tmp/bad.jsonl"
expect_ok malformed "a log with malformed lines still plots" "$tmp/bad.jsonl" -o "$tmp/bad.png"
for line in 3 5 7; do
  if grep -qF "plot: $tmp/bad.jsonl:$line: malformed line skipped" "$tmp/malformed.err"; then
    ok "line $line warned as malformed"; else bad "no warning for line $line: $(cat "$tmp/malformed.err")"; fi
done
n=$(grep -c "malformed" "$tmp/malformed.err")
if [ "$n" -eq 3 ]; then ok "exactly the 3 malformed lines warned (blank and nested lines are fine)"; else
  bad "$n malformed warnings: $(cat "$tmp/malformed.err")"; fi

# ---- errors that name what is wrong ----
printf '{"step":1,"loss":null,"step_ms":3}\n{"step":2,"loss":null,"step_ms":3}\n' >"$tmp/nulls.jsonl"
expect_fail nopoints "only null losses" "nulls.jsonl: no usable points for metric 'loss'" "$tmp/nulls.jsonl" -o "$tmp/x.png"
expect_fail nopoints2 "one run without points fails the plot" "nulls.jsonl: no usable points for metric 'loss'" \
  "$tmp/a.jsonl" "$tmp/nulls.jsonl" -o "$tmp/x.png"
expect_fail epochloss "loss by epoch (step lines have no epoch)" "none has an \"epoch\" field" "$tmp/a.jsonl" -o "$tmp/x.png" --x epoch
expect_fail unknown "unknown metric" "unknown metric 'acuracy': no log has it" "$tmp/a.jsonl" -o "$tmp/x.png" --metric acuracy
expect_fail missing "missing file" "$tmp/nope.jsonl: cannot open: No such file or directory" "$tmp/nope.jsonl" -o "$tmp/x.png"
expect_fail size "bad --size" "--size: expected WIDTHxHEIGHT" "$tmp/a.jsonl" -o "$tmp/x.png" --size 640by400
expect_fail size0 "tiny --size" "got '10x10'" "$tmp/a.jsonl" -o "$tmp/x.png" --size 10x10
expect_fail ext "unknown -o extension" "unknown extension '.jpg' in '$tmp/x.jpg'" "$tmp/a.jsonl" -o "$tmp/x.jpg"
expect_fail smooth "--smooth 0" "--smooth: expected an integer from 1" "$tmp/a.jsonl" -o "$tmp/x.png" --smooth 0
expect_fail xaxis "--x wall" "--x: unknown x axis 'wall' (valid: step, time, epoch)" "$tmp/a.jsonl" -o "$tmp/x.png" --x wall
expect_fail labels "more labels than files" "--label given 2 times for 1 log file" "$tmp/a.jsonl" -o "$tmp/x.png" --label a --label b
expect_fail noout "no -o" "-o OUT.png|.svg|.pdf is required" "$tmp/a.jsonl"
if [ ! -e "$tmp/x.png" ] && [ ! -e "$tmp/x.jpg" ]; then ok "failed runs wrote nothing"; else bad "a failed run left x.png"; fi

# ---- output: never over a FIFO; atomic replacement of a regular file ----
mkfifo "$tmp/fifo.png"
expect_fail fifo "-o on a FIFO" "exists and is a FIFO, not a regular file: refusing" "$tmp/a.jsonl" -o "$tmp/fifo.png"
if [ -p "$tmp/fifo.png" ]; then ok "the FIFO is still a FIFO"; else bad "the FIFO was replaced"; fi
ln -s /dev/null "$tmp/null.svg"
expect_fail devnull "-o on a link to /dev/null" "is a character device" "$tmp/a.jsonl" -o "$tmp/null.svg"
echo "old" >"$tmp/replace.png"
expect_ok replace "an existing regular file is replaced" "$tmp/a.jsonl" -o "$tmp/replace.png"
if [ "$(head -c 4 "$tmp/replace.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then ok "replaced by a PNG"; else
  bad "replace.png: $(head -c 8 "$tmp/replace.png" | od -An -c)"; fi
echo "old" >"$tmp/real.png"
ln -s real.png "$tmp/link.png"
expect_ok link "-o through a symlink to a regular file" "$tmp/a.jsonl" -o "$tmp/link.png"
if [ -L "$tmp/link.png" ] && [ "$(head -c 4 "$tmp/real.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then
  ok "the file the link names is replaced, the link kept"; else bad "symlink output: $(ls -l "$tmp/link.png")"; fi
left=$(find "$tmp" -name '*.tmp-*' | wc -l)
if [ "$left" -eq 0 ]; then ok "no temporary files left behind"; else bad "$left temporary files left: $(find "$tmp" -name '*.tmp-*')"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
