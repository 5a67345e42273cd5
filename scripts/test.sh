#!/usr/bin/env bash
# test.sh — the test command (README.md; .ci/run calls exactly this).
#
# Installs what is missing (Debian packages, as root), checks the format,
# then builds and runs the suite in these steps:
#   format       scripts/format.sh --check (clang-format, .clang-format)
#   unit         build/unit, -Werror, configured with MIAOSHA_TEST_TIER=unit:
#                only the tests labelled "unit" (no redis-server, service
#                process, nginx, Chromium or docker-compose; none of them
#                looked up), after the format check: the one-minute loop. In
#                the full run it shows that the unit tier still configures
#                and builds on its own.
#   ci           build/ci, -Wall -Wextra -Werror, every test
#   asan         build/asan, ASan + UBSan, every test but those labelled
#                "long" (the longest process-orchestration runs: the matrix
#                again with pipelining off, the Sentinel failover matrices,
#                the Redis Cluster matrix and scripts/redis-cluster.sh's
#                test, the short soaks, the READMEs' runnable blocks; they run in
#                build/ci, and the code they drive runs under ASan in the
#                other tests)
#   tsan         build/tsan, TSan, the threaded tests: lock core and service
#                (ctest label "tsan")
#   fuzz         build/fuzz, clang + libFuzzer, each harness for
#                MIAOSHA_FUZZ_SECONDS (30)
# Each ctest run that needs Redis starts its own private redis-server on a
# free loopback port; a missing redis-server fails it, never skips it.
# Environment: MIAOSHA_TEST_ONLY=format|unit|redis|ci|asan|tsan|fuzz runs
# one step (unit: the format check and the unit tier, with only the
# packages that needs, `scripts/deps.sh --unit`; redis: the tests labelled
# "redis" in build/ci); JOBS=N.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-$(nproc)}
only=${MIAOSHA_TEST_ONLY:-}
status=0
case "$only" in
  ""|format|unit|redis|ci|asan|tsan|fuzz) ;;
  *) echo "MIAOSHA_TEST_ONLY=$only: one of format unit redis ci asan tsan fuzz" >&2; exit 2 ;;
esac
if [ "$only" = unit ]; then
  bash scripts/deps.sh --unit
else
  bash scripts/deps.sh
fi

run() { # step in-the-full-run(0|1) build-dir time-factor cmake-args ctest-args
  local name=$1 full=$2 dir=$3 factor=$4 cargs=$5 targs=$6
  [ "$only" = "$name" ] || { [ -z "$only" ] && [ "$full" = 1 ]; } || return 0
  # Upper time bounds in tests scale by this (tu_slack): sanitizers are slow.
  export MIAOSHA_TEST_TIME_FACTOR=$factor
  echo "=== $name: configure and build"
  cmake -S . -B "build/$dir" -DMIAOSHA_WERROR=ON $cargs >/dev/null
  cmake --build "build/$dir" -j "$jobs"
  echo "=== $name: test"
  (cd "build/$dir" && ctest --output-on-failure --timeout 600 $targs) || status=1
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

if [ -z "$only" ] || [ "$only" = format ] || [ "$only" = unit ]; then
  echo "=== format: every C source as .clang-format says (bash scripts/format.sh to fix)"
  bash scripts/format.sh --check || status=1
fi

# Every step but unit names MIAOSHA_TEST_TIER empty: every test registered,
# even in a build directory whose cache says otherwise. redis runs only when
# asked for (ci runs its tests already).
all="-DMIAOSHA_TEST_TIER="
run unit  1 unit 1 "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMIAOSHA_TEST_TIER=unit" "-L ^unit$"
run ci    1 ci   1 "-DCMAKE_BUILD_TYPE=RelWithDebInfo $all" ""
run redis 0 ci   1 "-DCMAKE_BUILD_TYPE=RelWithDebInfo $all" "-L ^redis$"
run asan  1 asan 2 "-DCMAKE_BUILD_TYPE=Debug -DMIAOSHA_SANITIZE=address,undefined $all" "-LE long"
run tsan  1 tsan 4 "-DCMAKE_BUILD_TYPE=Debug -DMIAOSHA_SANITIZE=thread $all" "-L tsan"

# libFuzzer: every harness for MIAOSHA_FUZZ_SECONDS (30) on its seed corpus;
# a crash, leak or timeout fails the run (fuzz/README.md).
if [ -z "$only" ] || [ "$only" = fuzz ]; then
  echo "=== fuzz: libFuzzer harnesses, ${MIAOSHA_FUZZ_SECONDS:-30} s each"
  bash fuzz/run.sh "${MIAOSHA_FUZZ_SECONDS:-30}" || status=1
fi

[ $status -eq 0 ] && echo "=== all test runs passed" || echo "=== some test runs FAILED"
exit $status
