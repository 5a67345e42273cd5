#!/usr/bin/env bash
# demo.sh — the oversell matrix in one command (README.md, first command).
#
# Installs what is missing (Debian packages, as root; otherwise prints the
# apt-get line), builds in build/demo, then runs `miaosha-load matrix`: it
# starts a private redis-server on a free loopback port and the service
# instances each scenario needs, drives every lock mode through every
# scenario, prints the table, writes out/matrix/{matrix.md,matrix.csv,
# matrix.svg}, and stops everything it started — also on Ctrl-C.
#
#   bash scripts/demo.sh [--quick] [extra miaosha-load matrix options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
echo "=== building (build/demo)"
cmake -S . -B build/demo -DCMAKE_BUILD_TYPE=Release -DMIAOSHA_WERROR=OFF >/dev/null
cmake --build build/demo -j "$(nproc)" --target miaosha-server miaosha-load >/dev/null
echo "=== running the oversell matrix (about a minute; --quick for less)"
exec build/demo/loadtest/miaosha-load matrix \
  --server build/demo/service/miaosha-server --out out/matrix "$@"
