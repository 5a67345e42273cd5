#!/usr/bin/env bash
# redis-cluster.sh — a Redis Cluster on loopback, without Docker:
#
#   3 masters and 3 replicas, one replica per master (redis-server
#   --cluster-enabled yes, cluster-node-timeout 1000 ms, no persistence),
#   joined by redis-cli --cluster create --cluster-replicas 1
#   (REDIS_CLUSTER_REPLICAS=0: the 3 masters alone)
#
# everything on 127.0.0.1 and free ports (each node's port + 10000, its
# cluster bus port, free too), every file in one temp dir.
#
# Usage:
#   scripts/redis-cluster.sh start [DIR]     start; print the seeds; DIR default: a new mktemp dir
#   scripts/redis-cluster.sh status DIR      which nodes are alive; the cluster's state, slots,
#                                            masters and their replicas
#   scripts/redis-cluster.sh stop DIR        stop every node started in DIR, by PID; remove DIR
#   scripts/redis-cluster.sh run -- CMD...   start in a temp dir, run CMD with the seeds in its
#                                            environment, always stop (also on Ctrl-C or an
#                                            error); exits with CMD's status
#
# After start, DIR/redis-cluster.env (shell syntax, source it) holds:
#   REDIS_CLUSTER_DIR, REDIS_CLUSTER_NODE<i>_PORT, REDIS_CLUSTER_NODE<i>_PID
#   (i = 1..6, 1..3 without replicas: `redis-cli --cluster create` made 1..3 the masters; a
#   failover swaps roles, `status` says who is what now),
#   REDIS_CLUSTER_NODES (every node's host:port, comma-separated),
#   REDIS_CLUSTER_REPLICAS (replicas per master, as started),
# and what miaosha-server reads (config keys redis.cluster_nodes,
# redis.wait_replicas):
#   MIAOSHA_REDIS_CLUSTER_NODES (= REDIS_CLUSTER_NODES: every node answers
#   CLUSTER NODES, so each is a seed, and the list outlives any one of them),
#   MIAOSHA_REDIS_WAIT_REPLICAS=1 (a 200 only once the master's one replica
#   has the order; `all` is refused with a cluster: each master has its own
#   replicas, config/README.md; 0 without replicas)
# `run` exports them all to CMD.
#
# Knobs (environment):
#   REDIS_CLUSTER_REDIS_SERVER       redis-server binary (default MIAOSHA_REDIS_SERVER, else PATH)
#   REDIS_CLUSTER_CLI                redis-cli binary (default PATH)
#   REDIS_CLUSTER_NODE_TIMEOUT_MS    cluster-node-timeout: how long a master may not answer
#                                    before its replica is promoted (default 1000)
#   REDIS_CLUSTER_REPLICAS           replicas per master: 1 (default) or 0 (no failover; what
#                                    bench/run.sh uses, to compare with one Redis alone)
#   REDIS_CLUSTER_IO_THREADS         each node's io-threads, with io-threads-do-reads
#                                    (default 1: Redis's own, no I/O threads)
#   REDIS_CLUSTER_KEEP_DIR=1         stop leaves DIR (logs) in place
#
# The script never writes outside DIR, binds only 127.0.0.1, and stops only
# the PIDs it recorded (SIGTERM, then SIGKILL after 5 s). Every node stays
# in this script's session (why: scripts/lib/proc.sh) in a process group of
# its own, so a terminal Ctrl-C reaches only this script, which then stops
# them.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
me=redis-cluster.sh
# shellcheck source=lib/proc.sh
. "$here/scripts/lib/proc.sh"
MASTERS=3
REPLICAS=${REDIS_CLUSTER_REPLICAS:-1}
case "$REPLICAS" in 0|1) ;; *) echo "redis-cluster.sh: REDIS_CLUSTER_REPLICAS must be 0 or 1" >&2; exit 2 ;; esac
IO_THREADS=${REDIS_CLUSTER_IO_THREADS:-1}
case "$IO_THREADS" in ''|*[!0-9]*) IO_THREADS=0 ;; esac
[ "$IO_THREADS" -ge 1 ] && [ "$IO_THREADS" -le 128 ] ||
  { echo "redis-cluster.sh: REDIS_CLUSTER_IO_THREADS must be 1..128" >&2; exit 2; }
IO_CONF=()
[ "$IO_THREADS" -gt 1 ] && IO_CONF=("io-threads $IO_THREADS" "io-threads-do-reads yes")
NODES=$((MASTERS * (1 + REPLICAS)))
SLOTS=16384

die() { echo "$me: $*" >&2; exit 1; }
log() { echo "$me: $*" >&2; }

find_bin() { # name candidate...
  local name=$1 c
  shift
  for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done
  command -v "$name" || die "$name not found"
}

# start_node DIR VAR: a cluster-enabled Redis in DIR/VAR; sets VAR_PORT, VAR_PID.
# proc_start_redis takes a free port and tries another when the server
# exits: that is also what happens when the bus port (port + 10000) is
# taken, since the node then fails to bind it.
start_node() {
  local dir=$1 var=$2
  proc_start_redis "$RS" "$dir/$var" "cluster-enabled yes" "cluster-config-file nodes.conf" \
    "cluster-node-timeout ${REDIS_CLUSTER_NODE_TIMEOUT_MS:-1000}" \
    "repl-diskless-sync-delay 0" ${IO_CONF[@]+"${IO_CONF[@]}"} || die "could not start $var (see $dir/$var/redis.log)"
  eval "${var}_PORT=$PROC_REDIS_PORT ${var}_PID=$PROC_REDIS_PID"
  echo "$PROC_REDIS_PID" > "$dir/$var.pidrec"
}

# info PORT: CLUSTER INFO of the node at PORT, without the CRs.
info() { { "$CLI" -h 127.0.0.1 -p "$1" CLUSTER INFO 2>/dev/null || true; } | tr -d '\r'; }

# Every node says cluster_state:ok with every slot served and knows the
# replicas as replicas (gossip spreads the roles a while after the create),
# and every replica's link to its master is up (else the first purchases
# WAIT for a replica still syncing).
cluster_ready() {
  local i p out links=0
  for i in $(seq $NODES); do
    eval "p=\$NODE${i}_PORT"
    out=$(info "$p")
    [[ $out == *"cluster_state:ok"* && $out == *"cluster_slots_ok:$SLOTS"* ]] || return 1
    out=$("$CLI" -h 127.0.0.1 -p "$p" CLUSTER NODES 2>/dev/null || true)
    [ "$(awk '$3 ~ /slave/' <<<"$out" | wc -l)" -eq $((NODES - MASTERS)) ] || return 1
    out=$("$CLI" -h 127.0.0.1 -p "$p" INFO replication 2>/dev/null || true)
    [[ $out != *"master_link_status:up"* ]] || links=$((links + 1))
  done
  [ "$links" -eq $((NODES - MASTERS)) ]
}

write_env() { # dir
  local dir=$1 f=$1/redis-cluster.env i nodes=""
  {
    echo "REDIS_CLUSTER_DIR=$dir"
    for i in $(seq $NODES); do
      eval "echo REDIS_CLUSTER_NODE${i}_PORT=\$NODE${i}_PORT; echo REDIS_CLUSTER_NODE${i}_PID=\$NODE${i}_PID"
      eval "nodes=\"\$nodes,127.0.0.1:\$NODE${i}_PORT\""
    done
    echo "REDIS_CLUSTER_NODES=${nodes#,}"
    echo "REDIS_CLUSTER_REPLICAS=$REPLICAS"
    echo "MIAOSHA_REDIS_CLUSTER_NODES=${nodes#,}"
    echo "MIAOSHA_REDIS_WAIT_REPLICAS=$REPLICAS"
  } > "$f.tmp"
  mv "$f.tmp" "$f"
}

do_start() { # dir
  local dir=$1 i p addrs=()
  RS=$(find_bin redis-server "${REDIS_CLUSTER_REDIS_SERVER:-}" "${MIAOSHA_REDIS_SERVER:-}")
  CLI=$(find_bin redis-cli "${REDIS_CLUSTER_CLI:-}")
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  echo started > "$dir/.redis-cluster"    # marks DIR as ours for stop
  for i in $(seq $NODES); do
    start_node "$dir" "NODE$i"
    eval "p=\$NODE${i}_PORT"
    addrs+=("127.0.0.1:$p")
  done
  # The first MASTERS addresses become the masters, the others their
  # replicas (redis-cli warns that they share a host: they do, on purpose).
  timeout 60 "$CLI" --cluster create "${addrs[@]}" --cluster-replicas "$REPLICAS" --cluster-yes \
    > "$dir/create.log" 2>&1 || { tail -5 "$dir/create.log" >&2; die "redis-cli --cluster create failed (see $dir/create.log)"; }
  proc_wait_until $(( $(proc_now_ms) + 30000 )) cluster_ready ||
    die "the cluster did not reach cluster_state:ok with $SLOTS slots and every replica linked within 30 s"
  write_env "$dir"
}

do_stop() { # dir
  local dir=$1 f
  [ -f "$dir/.redis-cluster" ] || die "$dir is not a Redis Cluster dir"
  for f in "$dir"/*.pidrec; do
    [ -f "$f" ] && proc_stop "$(cat "$f")" "$(basename "$f" .pidrec)"
  done
  [ "${REDIS_CLUSTER_KEEP_DIR:-0}" = 1 ] || rm -rf "$dir"
}

# The masters and replicas as CLUSTER NODES of a node that answers says:
# "master ADDR slots RANGES; replicas ADDR..." per master, in slot order,
# failed ones marked.
roles() { # port
  { "$CLI" -h 127.0.0.1 -p "$1" CLUSTER NODES 2>/dev/null || true; } | tr -d '\r' | awk '
    { addr = $2; sub(/@.*/, "", addr); id[NR] = $1; a[$1] = addr; fl[$1] = $3; of[$1] = $4
      s = ""; for (k = 9; k <= NF; k++) s = s (s == "" ? "" : ",") $k; sl[$1] = s }
    END {
      for (n = 1; n <= NR; n++) { x = id[n]; if (fl[x] ~ /master/ && sl[x] != "") order[++m] = x }
      for (j = 1; j <= m; j++) {
        x = order[j]; r = ""
        for (n = 1; n <= NR; n++) { y = id[n]; if (of[y] == x) r = r " " a[y] (fl[y] ~ /fail/ ? " (failed)" : "") }
        printf "%d\tmaster %s%s slots %s; replicas%s\n", sl[x] + 0, a[x], (fl[x] ~ /fail/ ? " (failed)" : ""), sl[x], (r == "" ? " none" : r)
      }
      for (n = 1; n <= NR; n++) { x = id[n]; if (fl[x] ~ /master/ && sl[x] == "") printf "99999\tmaster %s without slots%s\n", a[x], (fl[x] ~ /fail/ ? " (failed)" : "") }
    }' | sort -n | cut -f2-
}

do_status() { # dir
  local dir=$1 st=0 f pid i p port="" out state slots size
  [ -f "$dir/redis-cluster.env" ] || die "$dir has no redis-cluster.env"
  CLI=$(find_bin redis-cli "${REDIS_CLUSTER_CLI:-}")
  # shellcheck disable=SC1091
  . "$dir/redis-cluster.env"
  NODES=$((MASTERS * (1 + ${REDIS_CLUSTER_REPLICAS:-1}))) # as started
  for i in $(seq $NODES); do
    eval "pid=\$REDIS_CLUSTER_NODE${i}_PID p=\$REDIS_CLUSTER_NODE${i}_PORT"
    if proc_alive "$pid"; then
      echo "NODE$i 127.0.0.1:$p pid $pid: running"
      [ -n "$port" ] || port=$p
    else
      echo "NODE$i 127.0.0.1:$p pid $pid: NOT running"
      st=1
    fi
  done
  [ -n "$port" ] || { echo "no node is running"; return 1; }
  out=$(info "$port")
  state=$(sed -n 's/^cluster_state://p' <<<"$out")
  slots=$(sed -n 's/^cluster_slots_ok://p' <<<"$out")
  size=$(sed -n 's/^cluster_size://p' <<<"$out")
  echo "cluster_state:${state:-?}, ${slots:-?} of $SLOTS slots ok, ${size:-?} masters serving slots (CLUSTER INFO of 127.0.0.1:$port)"
  roles "$port"
  echo "seeds: MIAOSHA_REDIS_CLUSTER_NODES=$MIAOSHA_REDIS_CLUSTER_NODES"
  [ "$state" = ok ] && [ "$slots" = "$SLOTS" ] || st=1
  return $st
}

print_env() {
  # shellcheck disable=SC1091
  . "$1/redis-cluster.env"
  cat <<EOF
Redis Cluster up in $1
$(roles "$REDIS_CLUSTER_NODE1_PORT" | sed 's/^/  /')
  seeds:        MIAOSHA_REDIS_CLUSTER_NODES=$MIAOSHA_REDIS_CLUSTER_NODES
                (or: build/dev/service/miaosha-server --set redis.cluster_nodes=$MIAOSHA_REDIS_CLUSTER_NODES)
  the service:  set -a; . $1/redis-cluster.env; set +a; build/dev/service/miaosha-server --port 8080
  stop with:    scripts/redis-cluster.sh stop $1
EOF
}

proc_topology_cli "miaosha-redis-cluster" redis-cluster.env "$@"
