#!/usr/bin/env bash
# openapi-lint.sh DIR — lints docs/openapi.yaml with Redocly's CLI
# (@redocly/cli, pinned below), installed from the npm registry into
# DIR/redocly (a build directory) on the first run and kept there.
#
# Fails, never skips: without npm, or when the install fails, it says so and
# exits 1. Its rules are docs/redocly.yaml's (the recommended set); an error
# or a warning fails the run. Exit 0 when the description is clean.
# The ctest openapi_lint runs it (service/tests/CMakeLists.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
# 1.x: the newest major that still runs on Debian 12's Node.js 18 as well as
# on Node.js 20 (2.x needs 20.19 or 22).
version=1.34.20
prefix=$1/redocly
bin=$prefix/node_modules/.bin/redocly
command -v npm >/dev/null || {
  echo "openapi-lint: FAIL: npm not found (Debian: apt-get install -y npm)" >&2; exit 1; }
have=$(cat "$prefix/version" 2>/dev/null || true)
if [ ! -x "$bin" ] || [ "$have" != "$version" ]; then
  rm -rf "$prefix" && mkdir -p "$prefix"
  t0=$(date +%s)
  if ! npm install --prefix "$prefix" --no-audit --no-fund --no-save --loglevel=error \
      "@redocly/cli@$version" >"$prefix/install.log" 2>&1; then
    echo "openapi-lint: FAIL: npm install @redocly/cli@$version did not succeed:" >&2
    tail -20 "$prefix/install.log" >&2
    exit 1
  fi
  echo "$version" >"$prefix/version"
  echo "openapi-lint: installed @redocly/cli@$version in $(( $(date +%s) - t0 )) s"
fi
# No telemetry and no update check: CI reaches no host but the registries,
# and each would wait for its timeout (5 s).
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
out=$("$bin" lint --config "$root/docs/redocly.yaml" --format=stylish \
  "$root/docs/openapi.yaml" 2>&1) && rc=0 || rc=$?
echo "$out"
if [ $rc -ne 0 ] || grep -qE '^ +[0-9]+:[0-9]+ +(error|warning) ' <<<"$out"; then
  echo "openapi-lint: FAIL: docs/openapi.yaml has problems (above)" >&2
  exit 1
fi
echo "openapi-lint: ok (@redocly/cli $version)"
