#!/usr/bin/env bash
# bench/cpu_cost.sh [--seconds N] [--rounds N]
#
# Where a lua purchase's time goes: per round, alternating, GET /healthz
# (answered on the HTTP thread), /miaosha/lua (a worker and one EVALSHA)
# with wrk -t2 -c64, and cs_bench lua (the same script from server.workers
# threads, no HTTP). For each it prints the rate and the CPU each process
# spent per operation (µs: utime+stime from /proc/PID/stat for
# miaosha-server and redis-server, /usr/bin/time for wrk and cs_bench),
# Redis's own usec_per_call of EVALSHA (INFO commandstats) and how busy the
# machine's CPUs were (/proc/stat). If the CPUs are ~100 % busy the run is
# CPU-bound and the best rate is (number of CPUs) / (sum of the per-op
# CPU). Needs the Release tree bench/run.sh builds (build/bench), wrk,
# redis-cli and /usr/bin/time. Starts its own redis-server and
# miaosha-server on free loopback ports and stops them by PID.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib/proc.sh
. "$ROOT/scripts/lib/proc.sh"
BUILD=$ROOT/build/bench
SRV=$BUILD/service/miaosha-server
CS=$BUILD/bench/cs_bench
DUR=5 ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) DUR=${2:?}; shift ;;
    --rounds) ROUNDS=${2:?}; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cpu_cost: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
case "$DUR$ROUNDS" in ''|*[!0-9]*) echo "cpu_cost: --seconds and --rounds want whole numbers" >&2; exit 2 ;; esac
for t in wrk redis-cli redis-server /usr/bin/time "$SRV" "$CS"; do
  command -v "$t" >/dev/null || { echo "cpu_cost: $t not found (bash bench/run.sh lua builds build/bench)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/miaosha-cost.XXXXXX)
RPID="" SPID=""
cleanup() {
  [ -z "$SPID" ] || proc_stop "$SPID"
  [ -z "$RPID" ] || proc_stop "$RPID"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
proc_start_redis "$(command -v redis-server)" "$WORK/redis" || { echo "cpu_cost: no redis-server" >&2; exit 1; }
RP=$PROC_REDIS_PORT RPID=$PROC_REDIS_PID
PORT=$(proc_free_port) || exit 1
proc_start "$WORK/server.log" "$SRV" --port "$PORT" --redis "127.0.0.1:$RP" --instance-id cost \
  --set log.level=warn
SPID=$PROC_PID
proc_wait_healthy "$SPID" 10000 proc_http_ok "http://127.0.0.1:$PORT/healthz" ||
  { echo "cpu_cost: miaosha-server did not start" >&2; cat "$WORK/server.log" >&2; exit 1; }
WORKERS=$("$SRV" --print-config | sed -n 's/.*"workers": *\([0-9]*\).*/\1/p')

ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; } # utime + stime
cpus() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; } # busy idle
hz=$(getconf CLK_TCK)
rcli() { timeout 10 redis-cli -p "$RP" "$@"; }
reset_stock() {
  rcli set "miaosha:{bench}:stock" 1000000000 >/dev/null
  rcli del "miaosha:{bench}:sold" "miaosha:{bench}:orders" >/dev/null
}
# measure NAME CMD...: runs CMD under /usr/bin/time and prints one line.
measure() {
  local name=$1 out ops s0 s1 r0 r1 b0 b1 i0 i1 t0 t1 es
  shift
  rcli config resetstat >/dev/null
  s0=$(ticks "$SPID") r0=$(ticks "$RPID") t0=$(proc_now_ms)
  read -r b0 i0 < <(cpus)
  out=$(timeout $((DUR + 30)) /usr/bin/time -f "CLIENTCPU %U %S" "$@" 2>&1)
  s1=$(ticks "$SPID") r1=$(ticks "$RPID") t1=$(proc_now_ms)
  read -r b1 i1 < <(cpus)
  es=$(rcli info commandstats | tr -d '\r' | awk -F'[=,:]' '/^cmdstat_evalsha:/ {print $3, $5}')
  case $name in
    lua) ops=$(rcli get "miaosha:{bench}:sold") ;;
    cs_lua) ops=$(printf '%s\n' "$out" | sed -n 's/.* sections=\([0-9]*\).*/\1/p') ;;
    *) ops=$(printf '%s\n' "$out" | awk '/ requests in / {print $1}') ;;
  esac
  awk -v n="$name" -v ops="${ops:-0}" -v ms=$((t1 - t0)) -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v hz="$hz" \
      -v c="$(printf '%s\n' "$out" | awk '/^CLIENTCPU/ {print $2 + $3}')" -v b=$((b1 - b0)) -v i=$((i1 - i0)) \
      -v es="${es:-0 0}" 'BEGIN { split(es, e, " "); o = (ops > 0) ? ops : 1
    printf "  %-8s %7.0f/s  CPU us/op: miaosha-server %5.1f  redis-server %5.1f  client %5.1f  |  EVALSHA %.1f us/call  |  CPUs busy %3.0f%%\n",
      n, ops * 1000 / ms, s * 1e6 / hz / o, r * 1e6 / hz / o, c * 1e6 / o,
      (e[1] > 0) ? e[2] / e[1] : 0, (b + i > 0) ? 100 * b / (b + i) : 0 }'
}
echo "cpu_cost: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), server.workers=$WORKERS, ${DUR}s each, wrk -t2 -c64"
echo "  (client = wrk for healthz and lua, cs_bench for cs_lua)"
for ((k = 1; k <= ROUNDS; k++)); do
  echo "round $k"
  measure healthz wrk -t2 -c64 -d"${DUR}s" "http://127.0.0.1:$PORT/healthz"
  reset_stock
  measure lua wrk -t2 -c64 -d"${DUR}s" "http://127.0.0.1:$PORT/miaosha/lua?sku=bench&wait_ms=1000"
  reset_stock
  measure cs_lua "$CS" "$RP" "$WORKERS" "$DUR" 1000 lua pipeline
done
