#!/usr/bin/env bash
# dockerfile_build.sh — the Dockerfile's build steps are the CMake build.
#
# Without a Docker engine, this runs the Dockerfile's own `RUN cmake ...`
# lines (configure, build, install; extracted verbatim, only "build/docker"
# replaced by a temp dir, so the staging prefix build/docker-root moves with
# it) in the source tree, as the build stage does in /src, and checks that
# they produce the files the final stage copies. It also checks that the
# configure line carries scripts/test.sh's flags and builds without the test
# tools, that the build stage installs the same -dev packages as
# scripts/deps.sh, and the final stage the same CJK font.
. "$(dirname "$0")/lib.sh"
cd "$SRC" || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-dockerbuild.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mapfile -t runs < <(sed -n '/^FROM debian:bookworm AS build/,/^FROM /p' Dockerfile | grep '^RUN cmake ')
ck "the build stage has a configure, a build and an install step (${#runs[@]} RUN cmake lines)" -- test "${#runs[@]}" = 3
ck "configure: -DMIAOSHA_WERROR=ON as scripts/test.sh" -- bash -c "grep -q -- '-DMIAOSHA_WERROR=ON' <<<'${runs[0]}' && grep -q -- '-DMIAOSHA_WERROR=ON' scripts/test.sh"
ck "configure: Release build" -- bash -c "grep -q -- '-DCMAKE_BUILD_TYPE=Release' <<<'${runs[0]}'"
ck "configure: the product only (-DMIAOSHA_BUILD_TESTS=OFF)" -- bash -c "grep -q -- '-DMIAOSHA_BUILD_TESTS=OFF' <<<'${runs[0]}'"
ck "no test tool is faked at configure time" -- bash -c "! grep -qE -- '-DMIAOSHA_(REDIS_SERVER|NGINX|REDIS_CLI)=' Dockerfile"
ck "build: cmake --build build/docker" -- bash -c "grep -q -- '^RUN cmake --build build/docker' <<<'${runs[1]}'"
ck "install: cmake --install build/docker into a staging prefix" -- \
  bash -c "grep -q -- '^RUN cmake --install build/docker --prefix build/docker-root' <<<'${runs[2]}'"
font=$(grep -o 'fonts-[a-z0-9-]*' scripts/deps.sh | head -1)
ck "the final stage installs scripts/deps.sh's CJK font (${font:-none})" -- \
  bash -c "[ -n '$font' ] && sed -n '/^FROM debian:bookworm-slim/,\$p' Dockerfile | grep -qw -- '$font'"
for p in $(sed -n '/^FROM debian:bookworm AS build/,/^FROM /p' Dockerfile | grep -o '[a-z0-9.+-]*-dev\b' | sort -u); do
  ck "build stage package $p is one scripts/deps.sh installs" -- grep -qw -- "$p" scripts/deps.sh
done

ck "build stage installs python3-yaml, as scripts/deps.sh --unit (configure converts docs/openapi.yaml)" -- \
  bash -c "sed -n '/^FROM debian:bookworm AS build/,/^FROM /p' Dockerfile | grep -qw python3-yaml && grep -qw python3-yaml scripts/deps.sh"

for r in "${runs[@]}"; do
  cmd=${r#RUN }
  cmd=${cmd//build\/docker/$tmp/build}
  say "running: $cmd"
  start=$(now_ms)
  bash -c "$cmd" > "$tmp/out.log" 2>&1; st=$?
  check $st "step exits 0 in $(( ($(now_ms) - start) / 1000 )) s"
  [ $st -eq 0 ] || { tail -30 "$tmp/out.log"; break; }
done
copies=$(grep -o 'COPY --from=build /src/[^ ]*' Dockerfile | sed 's|.*--from=build /src/||')
ck "the final stage copies the two programs and the configuration from the install" -- \
  test "$(tr '\n' ' ' <<<"$copies")" = "build/docker-root/bin/miaosha-server build/docker-root/bin/miaosha-load build/docker-root/etc/miaosha/miaosha.json "
for c in $copies; do
  ck "the final stage's COPY source $c was installed" -- test -f "${c//build\/docker/$tmp/build}"
done
root=$tmp/build-root
ck "the installed miaosha-server runs (--version)" -- "$root/bin/miaosha-server" --version
ck "the installed miaosha-load runs (--help)" -- bash -c "'$root/bin/miaosha-load' --help >/dev/null 2>&1; test \$? -le 2"
ck "the installed miaosha.json is config/miaosha.json" -- cmp -s "$root/etc/miaosha/miaosha.json" config/miaosha.json
finish
