# prologue.bash — sourced by the side-by-side bench scripts (not a test:
# no .sh suffix). After `bench_prologue NAME BINARY [torch]`:
#   $bin   the benchmark binary in the build folder ($1 of the script, else build/)
#   $tmp   a scratch folder, removed on exit
# It refuses a missing binary (or, with `torch`, a Python without torch) and
# warns when the load average says other jobs share the cores.
# `ab_step_args BUILD_A BUILD_B [bench_convnet_step flags]` (the A/B trace
# scripts) sets $a, $b, the flags array (default: ResNet-20 bf16, 8 steps, 2
# warm-up) and $steps (the flags' --steps).
bench_prologue() {
  local name="$1" binary="$2" need_torch="${3:-}"
  bin="$build/$binary"
  if [ ! -x "$bin" ]; then
    echo "$name: no $bin (build first: scripts/build.sh build)" >&2
    exit 2
  fi
  if [ "$need_torch" = torch ] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    echo "$name: /usr/bin/python3 cannot import torch: run scripts/install-deps.sh" >&2
    exit 2
  fi
  local load
  load="$(cut -d' ' -f1 /proc/loadavg)"
  if /usr/bin/python3 -c "import sys; sys.exit(float('$load') < 0.5)"; then
    echo "$name: warning: load average $load — other processes share the cores; timings will be noisy" >&2
  fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
}

ab_step_args() {
  a="$1" b="$2"
  shift 2
  flags=("$@")
  [ ${#flags[@]} -eq 0 ] && flags=(--model resnet20 --amp bf16 --steps 8 --warmup 2)
  steps=8
  for ((i = 0; i < ${#flags[@]}; i++)); do [ "${flags[$i]}" = --steps ] && steps="${flags[$((i + 1))]}"; done
  return 0
}
