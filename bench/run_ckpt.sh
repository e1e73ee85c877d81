#!/usr/bin/env bash
# run_ckpt.sh [BUILD_DIR (build/)] [DIR (/tmp/tessel_bench_ckpt)] — checkpoint
# save/restore time of the ResNet-50 and the GPT training state (parameters +
# AdamW moments (+ running statistics), f32; the GPT: GPT-2 small's 124 M
# parameters, 1.49 GB) against the disk measured in the same run on the same
# directory: per model, dd writes the same number of bytes with conv=fsync
# (sequential write bandwidth, durable like a save) and reads them back after
# dropping the page cache (when root). Prints both and the ratios (the issue's
# target: >= 50% of the disk's bandwidth), and the time a training step waits
# for a background save against the whole save (target: <= 10%): the caller's
# wait inside the save plus how much longer the step run during the save took
# than the one before it (bench/ckpt_io.c). Saves go through ts_ckpt_saver, as
# in `tessel train --save-dir`.
#   MODELS="resnet50 gpt" (default) | resnet20 | mlp ...; ROUNDS=N (5: the median leaves out the
#   first round, whose save maps the snapshot memory and whose step allocates the spare);
#   GPT=L,D,H,T,V another GPT (e.g. GPT=2,64,2,16,256 for a quick run);
#   TESSEL_CKPT_PRIORITY=low (default: the saver's threads at nice 19) | idle | normal.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../build}"
dir="${2:-/tmp/tessel_bench_ckpt}"
mkdir -p "$dir" || exit 2
status=0
for model in ${MODELS:-${MODEL:-resnet50 gpt}}; do
  extra=()
  [ "$model" = gpt ] && [ -n "${GPT:-}" ] && extra=(--gpt "$GPT")
  echo "== $model"
  if ! out="$("$build/bench_ckpt_io" --model "$model" --dir "$dir/ckpt" --rounds "${ROUNDS:-5}" "${extra[@]}")"; then
    status=1
    continue
  fi
  echo "$out"
  bytes=$(echo "$out" | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
  mb=$(( (bytes + 1048575) / 1048576 ))
  w=$( { dd if=/dev/zero of="$dir/dd.bin" bs=1M count="$mb" conv=fsync 2>&1 >/dev/null; } | tail -1)
  sync; [ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches
  r=$( { dd if="$dir/dd.bin" of=/dev/null bs=1M 2>&1 >/dev/null; } | tail -1)
  rm -rf "$dir/dd.bin" "$dir/ckpt"
  echo "dd write (conv=fsync): $w"
  echo "dd read: $r"
  /usr/bin/python3 - "$out" "$w" "$r" "$bytes" <<'PY' || status=1
import os, re, sys
out, w, r, b = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
f = dict(kv.split("=") for kv in out.split()[3:])
def secs(line):
    m = re.search(r"copied, ([0-9.e+-]+) s", line)
    return float(m.group(1)) if m else float("nan")
mb = (b + 1048575) // 1048576 * 1048576
dw, dr = mb / secs(w) / 1e9, mb / secs(r) / 1e9
print(f"save {float(f['save_GBps']):.3f} GB/s vs dd write {dw:.3f} GB/s: {float(f['save_GBps']) / dw:.2f}x")
print(f"load {float(f['load_GBps']):.3f} GB/s vs dd read {dr:.3f} GB/s: {float(f['load_GBps']) / dr:.2f}x"
      + ("" if f["cold_load"] == "1" else " (tessel's load read the page cache: not root)"))
print(f"step wait {float(f['step_wait_median_s']):.4f} s (in the save call {float(f['snapshot_median_s']):.4f} s; "
      f"step {float(f['step_median_s']):.3f} s, during the save {float(f['step_during_save_median_s']):.3f} s) = "
      f"{float(f['step_wait_fraction']):.3f} of a background save ({float(f['save_median_s']):.3f} s; target <= 0.10: "
      f"{'met' if float(f['step_wait_fraction']) <= 0.10 else 'MISSED'})")
print(f"save under a busy step loop: {float(f['busy_save_s']):.3f} s over {f['busy_steps']} steps "
      f"(mean step {float(f['busy_step_s']):.3f} s; saver priority {os.environ.get('TESSEL_CKPT_PRIORITY', 'low')})")
PY
done
exit $status
