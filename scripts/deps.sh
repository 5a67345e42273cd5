#!/usr/bin/env bash
# deps.sh [--unit | --with-tools] — installs what miaosha needs from Debian's
# packages.
#
# Build: compiler, CMake, pkg-config and the -dev packages of hiredis,
# libmicrohttpd, cJSON, libuuid and libcurl; python3-yaml (docs/openapi.yaml
# becomes the JSON the server serves at GET /openapi.json when CMake
# configures); git and clang-format for the formatter check
# (scripts/format.sh reads the tracked files from git).
# That is all the unit tier needs: --unit installs nothing else
# (MIAOSHA_TEST_ONLY=unit scripts/test.sh).
# The other tests: redis-server, nginx and chromium (headless, for the
# pages' browser tests: scripts/lib/browser.sh) with a CJK font, so that the
# pages' Chinese draws as characters, not empty boxes (the browser tests
# compare the glyphs: scripts/lib/cjk-glyphs.js); docker-compose (only
# validates docker-compose.yml), procps; curl, wrk and ab (apache2-utils),
# which README.md's recipes use and the test of its runnable blocks runs
# (scripts/readme-run.sh); clang and libFuzzer's runtime for the fuzz
# targets; python3-jsonschema (service_openapi validates the server's
# answers against the OpenAPI description), prometheus (its promtool
# checks /metrics and the observe profile's prometheus.yml) and npm
# (openapi_lint installs Redocly's CLI with it; left out when a Node.js
# with its own npm is already there, which Debian's npm would conflict
# with).
# The font is fonts-wqy-microhei, the smallest of Debian's CJK sans fonts
# that covers simplified Chinese: 1.6 MB to download, 5 MB installed
# (fonts-wqy-zenhei: 7.5 / 16 MB; fonts-noto-cjk: 57 / 91 MB).
# --with-tools adds the other tools of the benchmarks (redis-py, /usr/bin/time).
# As root it runs apt-get; otherwise it prints the exact apt-get line.
set -euo pipefail
unit=(build-essential cmake pkg-config git
      libhiredis-dev libmicrohttpd-dev libcjson-dev uuid-dev libcurl4-openssl-dev
      python3-yaml clang-format)
pkgs=("${unit[@]}" ca-certificates procps
      redis-server redis-tools nginx-light docker-compose chromium fonts-wqy-microhei
      curl wrk apache2-utils clang libclang-rt-dev python3-jsonschema prometheus)
command -v npm >/dev/null || pkgs+=(npm)
case "${1:-}" in
  "") ;;
  --unit) pkgs=("${unit[@]}") ;;
  --with-tools) pkgs+=(python3-redis time) ;;
  *) echo "usage: $0 [--unit | --with-tools]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "miaosha needs these Debian packages; run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the packaged redis/nginx services from starting on
# their default ports: the project starts its own servers on free ports.
pol=/usr/sbin/policy-rc.d
had_pol=0; [ -e "$pol" ] && had_pol=1
[ $had_pol -eq 1 ] || { printf '#!/bin/sh\nexit 101\n' > "$pol"; chmod +x "$pol"; }
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ $had_pol -eq 1 ] || rm -f "$pol"
