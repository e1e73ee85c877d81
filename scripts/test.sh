#!/usr/bin/env bash
# The test command: installs dependencies, builds with -Werror and runs the
# whole suite, then builds again with AddressSanitizer + UndefinedBehavior-
# Sanitizer and runs the suite once more. Both builds carry the CLI's testing
# hooks (-DTESSEL_TESTING=ON: tests/mpi_faults.sh makes a rank crash or hang).
# Two tests at a time (-j2): tests/CMakeLists.txt gives the tests that keep both
# cores busy the lock "cpu" (never two of them at once); the others (start-up,
# waiting, one thread) run beside them, and every test's idle OpenMP threads sleep instead of
# spinning (OMP_WAIT_POLICY=passive, tests/CMakeLists.txt). CI's budget is about 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

echo "== build (Release, -Werror) =="
scripts/build.sh build -DTESSEL_WERROR=ON -DTESSEL_TESTING=ON
echo "== tests =="
(cd build && ctest --output-on-failure -j2)

echo "== build (ASan + UBSan) =="
# No examples or benchmarks (-DTESSEL_EXTRAS=OFF): no test runs them but bench_train_step, which
# is built with the tests; the plain build above compiles them all with -Werror.
scripts/build.sh build-asan -DTESSEL_WERROR=ON -DTESSEL_TESTING=ON -DTESSEL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTESSEL_EXTRAS=OFF
echo "== tests under sanitizers =="
# Trimmed to keep CI near 15 minutes on 2 cores: the sanitizer pass leaves out
#  - multihost: namespace hosts, launchers and fault handling (process behaviour, not memory);
#    3 minutes under ASan, and the same tessel code paths run under ASan in mpi_train;
#  - test_resnet_reference: PyTorch comparisons (90 s plain); the same ResNet kernels, batch norm
#    and autocast run under ASan in test_resnet_spmd, test_amp and resnet_train;
#  - spmd_train: `tessel train --mesh` against 1 device (31 s under ASan). The same code runs under
#    ASan in one process in mpi_train (the MLP on 1 device, data=4, data=2,model=2, fsdp=2, fsdp=4,
#    data=2,fsdp=2: spmd_train's data=8 and data=4,model=2 are those programs with more devices)
#    and mpi_ddp_cli (the CNN on 1 device and on data=2), and bad --mesh values are refused under
#    ASan in cli_messages, mesh_axes and mesh_limits (spmd_train's size-less `--mesh data`: plain only).
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j2 -E '^(multihost|test_resnet_reference|spmd_train)$')
