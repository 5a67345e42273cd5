#!/usr/bin/env bash
# test.sh — the test command (README.md; .ci/run calls exactly this).
#
# Installs what is missing (Debian packages, as root), checks the format,
# then builds and runs the whole suite three times and the fuzz targets:
#   format       scripts/format.sh --check (clang-format, .clang-format)
#   build/ci     -Wall -Wextra -Werror, every test
#   build/asan   ASan + UBSan, every test but those labelled "long" (the
#                longest process-orchestration runs: the matrix again with
#                pipelining off, the Sentinel failover matrix, the short
#                soak; they run in build/ci, and the code they drive runs
#                under ASan in the other tests)
#   build/tsan   TSan, the threaded tests: lock core and service (ctest label "tsan")
#   build/fuzz   clang + libFuzzer, each harness for MIAOSHA_FUZZ_SECONDS (30)
# Each ctest run starts its own private redis-server on a free loopback port.
# Environment: MIAOSHA_TEST_ONLY=format|ci|asan|tsan|fuzz runs one step; JOBS=N.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

jobs=${JOBS:-$(nproc)}
only=${MIAOSHA_TEST_ONLY:-}
status=0

run() { # name time-factor cmake-args ctest-args
  local name=$1 factor=$2 cargs=$3 targs=$4
  [ -z "$only" ] || [ "$only" = "$name" ] || return 0
  # Upper time bounds in tests scale by this (tu_slack): sanitizers are slow.
  export MIAOSHA_TEST_TIME_FACTOR=$factor
  echo "=== $name: configure and build"
  cmake -S . -B "build/$name" -DMIAOSHA_WERROR=ON $cargs >/dev/null
  cmake --build "build/$name" -j "$jobs"
  echo "=== $name: test"
  (cd "build/$name" && ctest --output-on-failure --timeout 600 $targs) || status=1
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

if [ -z "$only" ] || [ "$only" = format ]; then
  echo "=== format: every C source as .clang-format says (bash scripts/format.sh to fix)"
  bash scripts/format.sh --check || status=1
fi

run ci   1 "-DCMAKE_BUILD_TYPE=RelWithDebInfo" ""
run asan 2 "-DCMAKE_BUILD_TYPE=Debug -DMIAOSHA_SANITIZE=address,undefined" "-LE long"
run tsan 4 "-DCMAKE_BUILD_TYPE=Debug -DMIAOSHA_SANITIZE=thread" "-L tsan"

# libFuzzer: every harness for MIAOSHA_FUZZ_SECONDS (30) on its seed corpus;
# a crash, leak or timeout fails the run (fuzz/README.md).
if [ -z "$only" ] || [ "$only" = fuzz ]; then
  echo "=== fuzz: libFuzzer harnesses, ${MIAOSHA_FUZZ_SECONDS:-30} s each"
  bash fuzz/run.sh "${MIAOSHA_FUZZ_SECONDS:-30}" || status=1
fi

[ $status -eq 0 ] && echo "=== all test runs passed" || echo "=== some test runs FAILED"
exit $status
