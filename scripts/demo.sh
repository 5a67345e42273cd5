#!/usr/bin/env bash
# demo.sh — the oversell matrix in one command (README.md, first command).
#
# Installs what is missing (Debian packages, as root; otherwise prints the
# apt-get line), builds the two programs in build/dev (the build directory
# of every recipe; its cached options are kept), then runs `miaosha-load
# matrix`: it starts a private redis-server on a free loopback port and the
# service instances each scenario needs, drives every lock mode through the
# default scenarios (race, multi, slow, crash, nested, dup-user, retry,
# buckets; not the Sentinel failovers, the faults, redlock's node
# scenarios or the Redis Cluster's), prints the table,
# writes out/matrix/{matrix.md,matrix.csv,matrix.svg,matrix.html} and the
# timelines, and stops everything it started — also on Ctrl-C.
#
#   bash scripts/demo.sh [--quick] [extra miaosha-load matrix options]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
echo "=== building (build/dev)"
cmake -S . -B build/dev >/dev/null
cmake --build build/dev -j "$(nproc)" --target miaosha-server miaosha-load >/dev/null
echo "=== running the oversell matrix (1-2 minutes on a 2-core machine; --quick for less)"
exec build/dev/loadtest/miaosha-load matrix \
  --server build/dev/service/miaosha-server --out out/matrix "$@"
