#!/usr/bin/env bash
# run.sh [SECONDS] — builds the libFuzzer harnesses (clang, build/fuzz) and
# runs each for SECONDS (default 60) on a copy of its seed corpus, so the
# repository is never modified. Exits 1 when any harness finds a crash, a
# leak, a timeout or an out-of-memory, and prints the reproducer's path and
# the command that replays it. Installs nothing: without clang it prints
# the apt-get line and exits 1.
# Environment: FUZZ_TARGETS="params lg_http" runs a subset; FUZZ_BUILD_DIR
# (default build/fuzz); JOBS (default 2) for the build.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
case $secs in ''|*[!0-9]*) echo "usage: fuzz/run.sh [SECONDS]" >&2; exit 2 ;; esac
targets=${FUZZ_TARGETS:-params stock_body purchase_body config_json config_args lg_http}
bdir=${FUZZ_BUILD_DIR:-build/fuzz}

if ! command -v clang >/dev/null 2>&1; then
  echo "fuzz/run.sh needs clang with libFuzzer; as root:" >&2
  echo "  apt-get update && apt-get install -y clang libclang-rt-dev" >&2
  exit 1
fi

echo "=== fuzz: configure and build ($bdir)"
# Warnings are not errors here: clang warns where gcc (the test builds) is
# silent, and the harnesses' job is finding crashes, not lint.
cmake -S . -B "$bdir" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMIAOSHA_FUZZ=ON \
  -DMIAOSHA_WERROR=OFF >/dev/null
cmake --build "$bdir" -j "${JOBS:-2}" --target fuzz_harnesses >/dev/null

work=$(mktemp -d /tmp/miaosha-fuzz-XXXXXX)
status=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for t in $targets; do
  bin=$bdir/fuzz/fuzz_$t
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp fuzz/corpus/"$t"/* "$work/$t/corpus/"
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  echo "=== fuzz: $t for ${secs} s"
  rc=0
  "$bin" "$work/$t/corpus" "${dict[@]}" -max_total_time="$secs" -timeout=10 \
    -rss_limit_mb=1024 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$work/$t/artifacts/" >"$work/$t/log" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|stat::new_units_added|stat::peak_rss_mb)' \
    "$work/$t/log" | tr '\n' ' '; echo
  found=$(ls "$work/$t/artifacts" 2>/dev/null || true)
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    status=1
    echo "!!! fuzz: $t FAILED (exit $rc); the end of its log:" >&2
    tail -n 40 "$work/$t/log" >&2
    for a in $found; do
      echo "!!! reproducer: $work/$t/artifacts/$a" >&2
      echo "    replay: $bin $work/$t/artifacts/$a" >&2
    done
  fi
done
if [ $status -eq 0 ]; then
  echo "=== fuzz: all harnesses clean"
  rm -rf "$work"
else
  echo "=== fuzz: FAILED; logs, corpora and reproducers kept in $work" >&2
fi
exit $status
