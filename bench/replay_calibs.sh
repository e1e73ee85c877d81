#!/usr/bin/env bash
# replay_calibs.sh LOG BUILD CAL_FILE... — how many of a run_autoshard.sh
# log's rows each calibration puts within the issue's bounds (issue 16: does
# the calibration give the same rows twice?). For each calibration file (e.g.
# bench/calib_spread.sh KEEP=DIR's), its keys matching KEYS (default: the
# kernel classes' 1-thread rates, '^kernel\.'; e.g. '^(kernel\.|parallel_efficiency)')
# replace the log's (SET=, bench/replay_autoshard.py) and the log's measured
# rows are re-predicted with BUILD's model. Measures nothing: a few seconds a
# file. Prints one line per file: its name and the rows within.
set -uo pipefail
log="${1:?usage: replay_calibs.sh LOG BUILD CAL_FILE...}"
build="${2:?usage: replay_calibs.sh LOG BUILD CAL_FILE...}"
shift 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
keys=${KEYS:-'^kernel\.'}
for f in "$@"; do
  set_keys=$(grep -E "$keys" "$f" | sed -E 's/ *= */=/; s/ *#.*//' | tr '\n' ' ')
  within=$(SET="$set_keys" REPLAY="$log" bash "$here/run_autoshard.sh" "$build" 2>&1 | grep "within")
  echo "$f: ${within:-replay failed}"
done
