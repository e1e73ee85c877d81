#!/usr/bin/env bash
# The test command: installs dependencies, builds with -Werror and runs the
# whole suite, then builds again with AddressSanitizer + UndefinedBehavior-
# Sanitizer and runs the suite once more. Both builds carry the CLI's testing
# hooks (-DTESSEL_TESTING=ON: tests/mpi_train.sh makes a rank crash or hang).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

echo "== build (Release, -Werror) =="
scripts/build.sh build -DTESSEL_WERROR=ON -DTESSEL_TESTING=ON
echo "== tests =="
(cd build && ctest --output-on-failure -j1)

echo "== build (ASan + UBSan) =="
scripts/build.sh build-asan -DTESSEL_WERROR=ON -DTESSEL_TESTING=ON -DTESSEL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== tests under sanitizers =="
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j1)
