#!/usr/bin/env bash
# redis_cluster_script.sh — scripts/redis-cluster.sh as a person uses it:
# start prints the seeds and leaves a cluster of 3 masters with a replica
# each and all 16384 slots served; status says so (and fails once a node is
# gone); a key written through one node is read through another (redis-cli
# -c follows the MOVED); stop leaves no process, port or directory behind;
# `run -- CMD` hands CMD the seeds, returns its status and stops everything.
. "$(dirname "$0")/lib.sh"
RC=$SRC/scripts/redis-cluster.sh
T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-rc-test.XXXXXX")
# On any exit: whatever the test started is stopped by PID, the logs shown
# when something failed.
cleanup_rc() {
  local st=$? f
  if [ -f "$T_DIR/c/.redis-cluster" ]; then
    if [ "$st" -ne 0 ] || [ "$T_FAIL" -ne 0 ]; then
      for f in "$T_DIR"/c/create.log "$T_DIR"/c/NODE*/redis.log; do
        [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 8 "$f"; }
      done
    fi
    "$RC" stop "$T_DIR/c" >/dev/null 2>&1
  fi
  [ -f "$T_DIR/run-pids" ] && while read -r p; do proc_stop "$p"; done <"$T_DIR/run-pids"
  rm -rf "$T_DIR"
}
trap cleanup_rc EXIT
port_dead() { ! proc_redis_ping "$1"; }
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$(now_ms)
require "start: 3 masters, 3 replicas, cluster_state:ok" -- \
  bash -c '"$0" start "$1" >"$2" 2>&1' "$RC" "$T_DIR/c" "$T_DIR/start.log"
say "started in $(( $(now_ms) - t0 )) ms"
cat "$T_DIR/start.log"
ck "start prints the seeds" -- grep -q 'MIAOSHA_REDIS_CLUSTER_NODES=127.0.0.1:' "$T_DIR/start.log"
# shellcheck disable=SC1091
. "$T_DIR/c/redis-cluster.env"
ports=() pids=()
for i in 1 2 3 4 5 6; do
  eval "ports+=(\$REDIS_CLUSTER_NODE${i}_PORT) pids+=(\$REDIS_CLUSTER_NODE${i}_PID)"
done
ck "six distinct ports (${ports[*]})" -- test "$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)" = 6
for i in 0 1 2 3 4 5; do
  ck "node $((i + 1)) pid ${pids[$i]} is alive" -- proc_alive "${pids[$i]}"
done
ck "the seeds are the six nodes" -- \
  test "$MIAOSHA_REDIS_CLUSTER_NODES" = "$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')"
ck "the service WAITs for the master's one replica (wait_replicas=1)" -- \
  test "$MIAOSHA_REDIS_WAIT_REPLICAS" = 1

# The cluster as Redis itself reports it, asked of the last node.
cinfo=$(redis-cli -p "${ports[5]}" CLUSTER INFO | tr -d '\r')
ck "CLUSTER INFO: cluster_state:ok" -- grep -qx 'cluster_state:ok' <<<"$cinfo"
ck "CLUSTER INFO: 16384 slots ok" -- grep -qx 'cluster_slots_ok:16384' <<<"$cinfo"
ck "CLUSTER INFO: 3 masters serve slots" -- grep -qx 'cluster_size:3' <<<"$cinfo"
nodes=$(redis-cli -p "${ports[5]}" CLUSTER NODES | tr -d '\r')
ck "CLUSTER NODES: 3 masters, 3 replicas" -- \
  test "$(awk '$3 ~ /master/' <<<"$nodes" | wc -l),$(awk '$3 ~ /slave/' <<<"$nodes" | wc -l)" = 3,3
ck "CLUSTER NODES: every master has a replica" -- \
  test "$(awk '$3 ~ /slave/ { print $4 }' <<<"$nodes" | sort -u | wc -l)" = 3

# A hash tag decides the slot, so {sku} keys of one SKU meet on one master;
# a write through node 1 is read through node 6 (-c follows MOVED).
ck "SET through node 1, GET through node 6" -- bash -c \
  '[ "$(redis-cli -c -p "$1" SET "miaosha:{rc-test}:stock" 7)" = OK ] &&
   [ "$(redis-cli -c -p "$2" GET "miaosha:{rc-test}:stock")" = 7 ]' _ "${ports[0]}" "${ports[5]}"

"$RC" status "$T_DIR/c" >"$T_DIR/status.log" 2>&1
check $? "status: exit 0 while every node runs"
cat "$T_DIR/status.log"
ck "status: cluster_state:ok, 16384 slots ok, 3 masters" -- \
  grep -q 'cluster_state:ok, 16384 of 16384 slots ok, 3 masters serving slots' "$T_DIR/status.log"
ck "status: three masters, each with its replica" -- \
  test "$(grep -c '^master 127.0.0.1:[0-9]* slots [0-9].*; replicas 127.0.0.1:[0-9]*$' "$T_DIR/status.log")" = 3

# A replica gone: status fails and names it.
proc_stop "${pids[5]}" node6
"$RC" status "$T_DIR/c" >"$T_DIR/status2.log" 2>&1
st=$?
ck "status: exit 1 with node 6 stopped" -- test "$st" = 1
ck "status: names node 6 as not running" -- grep -q "^NODE6 .*NOT running" "$T_DIR/status2.log"

"$RC" stop "$T_DIR/c" >"$T_DIR/stop.log" 2>&1
check $? "stop: exit 0"
for i in 0 1 2 3 4 5; do
  ck "stop: node $((i + 1)) pid ${pids[$i]} is gone" -- pid_gone "${pids[$i]}"
  ck "stop: port ${ports[$i]} answers no more" -- port_dead "${ports[$i]}"
done
ck "stop: DIR removed" -- test ! -e "$T_DIR/c"

# run -- CMD: the environment is CMD's, its status is run's, and every
# node is stopped afterwards (CMD writes the pids for this check).
"$RC" run -- bash -c 'for i in 1 2 3 4 5 6; do eval "echo \$REDIS_CLUSTER_NODE${i}_PID"; done >"$0";
  [ "$(redis-cli -c -p "${MIAOSHA_REDIS_CLUSTER_NODES##*:}" SET "miaosha:{rc-run}:stock" 1)" = OK ] || exit 9
  exit 3' "$T_DIR/run-pids" >"$T_DIR/run.log" 2>&1
st=$?
ck "run: CMD's status 3 is run's (the seeds reached CMD and answered)" -- test "$st" = 3
ck "run: CMD saw six node pids" -- test "$(grep -c '^[0-9][0-9]*$' "$T_DIR/run-pids" 2>/dev/null)" = 6
while read -r p; do
  ck "run: node pid $p is gone afterwards" -- pid_gone "$p"
done <"$T_DIR/run-pids"
say "took $(( $(now_ms) - t0 )) ms"
finish
