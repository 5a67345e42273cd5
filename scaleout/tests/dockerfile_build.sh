#!/usr/bin/env bash
# dockerfile_build.sh — the Dockerfile's build steps are the CMake build.
#
# Without a Docker engine, this runs the Dockerfile's own `RUN cmake ...`
# lines (extracted verbatim, only the build directory build/docker replaced
# by a temp dir) in the source tree, as the build stage does in /src, and
# checks that they produce the binaries the final stage copies. It also
# checks that the configure line carries scripts/test.sh's flags and that
# the build stage installs the same -dev packages as scripts/deps.sh.
. "$(dirname "$0")/lib.sh"
cd "$SRC" || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-dockerbuild.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mapfile -t runs < <(sed -n '/^FROM debian:bookworm AS build/,/^FROM /p' Dockerfile | grep '^RUN cmake ')
ck "the build stage has a configure and a build step (${#runs[@]} RUN cmake lines)" -- test "${#runs[@]}" = 2
ck "configure: -DMIAOSHA_WERROR=ON as scripts/test.sh" -- bash -c "grep -q -- '-DMIAOSHA_WERROR=ON' <<<'${runs[0]}' && grep -q -- '-DMIAOSHA_WERROR=ON' scripts/test.sh"
ck "configure: Release build" -- bash -c "grep -q -- '-DCMAKE_BUILD_TYPE=Release' <<<'${runs[0]}'"
ck "build: the miaosha-server and miaosha-load targets" -- bash -c "grep -q -- '--target miaosha-server miaosha-load' <<<'${runs[1]}'"
for p in $(sed -n '/^FROM debian:bookworm AS build/,/^FROM /p' Dockerfile | grep -o '[a-z0-9.+-]*-dev\b' | sort -u); do
  ck "build stage package $p is one scripts/deps.sh installs" -- grep -qw -- "$p" scripts/deps.sh
done

for r in "${runs[@]}"; do
  cmd=${r#RUN }
  cmd=${cmd//build\/docker/$tmp/build}
  say "running: $cmd"
  start=$(now_ms)
  bash -c "$cmd" > "$tmp/out.log" 2>&1; st=$?
  check $st "step exits 0 in $(( ($(now_ms) - start) / 1000 )) s"
  [ $st -eq 0 ] || { tail -30 "$tmp/out.log"; break; }
done
for c in $(grep -o 'COPY --from=build /src/build/docker/[^ ]*' Dockerfile | sed 's|.*/src/build/docker/||'); do
  ck "the final stage's COPY source $c was built" -- test -x "$tmp/build/$c"
done
ck "the built miaosha-server runs (--version)" -- "$tmp/build/service/miaosha-server" --version
ck "the built miaosha-load runs (--help)" -- bash -c "'$tmp/build/loadtest/miaosha-load' --help >/dev/null 2>&1; test \$? -le 2"
finish
