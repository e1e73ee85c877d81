#!/usr/bin/env bash
# text_cli.sh BUILD_DIR — `tessel train`'s text dataset flags fail early and
# clearly: a too-short or empty --data-file names the file, its size and the
# bytes needed; a missing one names the file; --dataset text with an image
# model and --data-file without --dataset text are usage errors.
set -u
build="${1:?usage: text_cli.sh BUILD_DIR}"
tessel="$build/tessel"
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad, expect
export TESSEL_NUM_THREADS=1

printf 'In the beginning \xff\xfe not UTF-8' >"$tmp/short.txt"
: >"$tmp/empty.txt"
expect short 1 "$tmp/short.txt: 29 bytes is too short: its validation split (the last 10%, 3 bytes) is shorter than one sample of seq + 1 = 129 bytes; with seq 128 the file needs at least 1281 bytes" \
  train --model gpt --data-file "$tmp/short.txt" --steps 1
expect empty 1 "$tmp/empty.txt: the text file is empty (0 bytes)" train --dataset text --data-file "$tmp/empty.txt"
expect missing 1 "$tmp/nothing.txt: cannot open: No such file or directory" \
  train --model gpt --data-file "$tmp/nothing.txt"
expect text_cnn 2 "--dataset text is token data for --model gpt, not --model cnn" train --dataset text --model cnn
expect data_file 2 "--data-file is the corpus of --dataset text" train --data-file "$tmp/short.txt"
expect gpt_mnist 2 "--model gpt trains on --dataset text" train --model gpt --dataset fashion-mnist
expect eval_every 2 "--eval-every: expected a positive integer" train --model gpt --eval-every 0

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
