#!/usr/bin/env bash
# Writes the King James Bible as plain text, one verse per line, for
# `tessel train --model gpt` (the default --data-file):
#   scripts/make-kjv.sh [OUT]        [/usr/local/share/tessel/kjv.txt]
# From Debian's bible-kjv package (public domain text): `bible -f` prints
# "Ge1:1 In the beginning God created ..." lines; the verse reference (the
# text up to the first space) is dropped. The result is 4137850 bytes of
# ASCII, 31102 lines; a different size is reported (another package version)
# but kept. Idempotent: an existing file of the right size is left alone.
set -euo pipefail
out=${1:-/usr/local/share/tessel/kjv.txt}
want_bytes=4137850
command -v bible >/dev/null || { echo "make-kjv: 'bible' not found: install Debian's bible-kjv package" >&2; exit 1; }
if [ -f "$out" ] && [ "$(stat -c %s "$out")" -eq "$want_bytes" ]; then exit 0; fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# -f formats the whole range; on a pipe it never wraps lines (COLUMNS unset)
COLUMNS= bible -f "Genesis 1:1-Revelation 22:21" | sed 's/^[^ ]* //' > "$tmp"
bytes=$(stat -c %s "$tmp")
[ "$bytes" -gt 0 ] || { echo "make-kjv: 'bible' printed nothing" >&2; exit 1; }
mv "$tmp" "$out"
trap - EXIT
if [ "$bytes" -ne "$want_bytes" ]; then
  echo "make-kjv: note: $out has $bytes bytes, not the $want_bytes of bible-kjv 4.x (numbers in README were measured on that)" >&2
fi
echo "make-kjv: wrote $out ($bytes bytes)" >&2
