# mpi_cli.bash — what the `tessel train`-under-mpirun tests share (sourced by tests/mpi_train.sh,
# mpi_ddp_cli.sh, mpi_faults.sh; not a test itself): $tmp, ok/bad (harness.bash), $fm (the
# training set with 1000 test images: these tests check losses and messages, not the accuracy),
# mpi NP ARGS... (mpirun, one kernel thread per process), run NAME NP ARGS... (50 MLP steps, or
# 10 CNN steps with model=cnn, JSON log in $tmp/NAME.json) and compare A B TOL [STEPS] (the two
# loss curves agree; TOL 0: exactly, every logged loss text equal). The sourcing script sets $tessel.
. "$(dirname "${BASH_SOURCE[0]}")/harness.bash" # $tmp, ok, bad
small_test_set # $fm: the training set, 1000 test images (the losses are checked, not the accuracy)
need_mpirun # fails the test without mpirun; OpenMPI's settings for root and ASan
mpi() { # mpi NP ARGS...: mpirun with NP processes, one kernel thread each
  local np="$1"
  shift
  TESSEL_NUM_THREADS=1 timeout -k 5 120 mpirun -n "$np" --oversubscribe --bind-to none "$@"
}
run() { # run NAME NP ARGS...: 50 MLP steps (NP 0: no mpirun), JSON log in $tmp/NAME.json
  local name="$1" np="$2"
  shift 2
  local rc=0 steps=(--model mlp --steps 50 --epochs 1 --eval-batch 5000 --data-dir "$fm")
  [ "${model:-mlp}" = cnn ] && steps=(--model cnn --steps 10 --epochs 1 --eval-batch 2000 --data-dir "$fm")
  if [ "$np" = 0 ]; then
    TESSEL_NUM_THREADS=2 "$tessel" train "${steps[@]}" --log-json "$tmp/$name.json" "$@" \
      >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  else
    mpi "$np" "$tessel" train "${steps[@]}" --log-json "$tmp/$name.json" "$@" \
      >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  fi
  if [ "$rc" -eq 0 ]; then ok "$name: train ${steps[*]:0:2} $* ($np processes) exits 0"; else bad "$name: exit $rc: $(tail -5 "$tmp/$name.err")"; fi
}

compare() { # compare A B TOL [STEPS (50)]: the two loss curves agree (TOL 0: exactly)
  if /usr/bin/python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "${4:-50}" <<'PY'
import json, re, struct, sys
def losses(path):
    """(text, value) of every step's loss: the text as logged, the value parsed."""
    out = []
    for line in open(path):
        r = json.loads(line)
        if "loss" in r:
            out.append((re.search(r'"loss":([^,}]*)', line).group(1), r["loss"]))
    return out
a, b, tol, n = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
assert len(a) == n and len(b) == n, f"{len(a)} and {len(b)} steps logged, expected {n}"
if tol == 0:
    # exact: the logged texts are the floats' %.9g forms (a float round-trips
    # through them), and they are equal; the parsed values too
    for text, v in a + b:
        f32 = struct.unpack("f", struct.pack("f", v))[0]
        assert text == "%.9g" % f32, f"loss {text} is not a float printed with %.9g ('{'%.9g' % f32}')"
    diff = [(i + 1, x[0], y[0]) for i, (x, y) in enumerate(zip(a, b)) if x[0] != y[0] or x[1] != y[1]]
    assert not diff, f"{len(diff)} steps differ, first: step {diff[0][0]}: {diff[0][1]} vs {diff[0][2]}"
    print(f"  all {n} losses bit-identical")
else:
    worst = max(abs(x[1] - y[1]) / max(1.0, abs(x[1])) for x, y in zip(a, b))
    print(f"  worst relative loss difference {worst:.3g}")
    assert worst <= tol, f"loss curves differ by {worst:.3g} (tolerance {tol})"
PY
  then ok "$2 equals $1 (tolerance $3)"; else bad "$2 differs from $1 (tolerance $3)"; fi
}
