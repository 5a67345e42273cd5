#!/usr/bin/env bash
# failover.sh — the failover topology on loopback, without Docker:
#
#   a Redis master and 2 replicas (replicaof the master), watched by
#   3 Sentinels (redis-server --sentinel, quorum 2, master name "mymaster")
#   5 independent Redis masters for the redlock mode's lock nodes
#
# everything on 127.0.0.1 and free ports, every file in one temp dir, no
# persistence (a failover, not a restart, is what this topology shows).
#
# Usage:
#   scripts/failover.sh start [DIR]     start; print the addresses; DIR default: a new mktemp dir
#   scripts/failover.sh status DIR      which processes are alive, what the Sentinels say
#   scripts/failover.sh stop DIR        stop everything started in DIR, by PID; remove DIR
#   scripts/failover.sh run -- CMD...   start in a temp dir, run CMD with the addresses in its
#                                       environment, always stop (also on Ctrl-C or an error);
#                                       exits with CMD's status
#
# After start, DIR/failover.env (shell syntax, source it) holds:
#   FAILOVER_DIR, FAILOVER_MASTER_PORT, FAILOVER_MASTER_PID,
#   FAILOVER_REPLICA<i>_PORT, FAILOVER_REPLICA<i>_PID (i = 1..2),
#   FAILOVER_SENTINEL<i>_PORT, FAILOVER_SENTINEL<i>_PID (i = 1..3),
#   FAILOVER_LOCK<i>_PORT, FAILOVER_LOCK<i>_PID (i = 1..5),
#   FAILOVER_REDLOCK_NODES (host:port comma-separated, the 5 lock masters),
# and what miaosha-server reads (config keys redis.sentinels,
# redis.master_name, redis.wait_replicas, redlock.nodes):
#   MIAOSHA_REDIS_SENTINELS, MIAOSHA_REDIS_MASTER_NAME=mymaster,
#   MIAOSHA_REDIS_WAIT_REPLICAS=all (a 200 only once both replicas have the
#   order: with 1, a manual or resumed failover can promote the replica that
#   did not — docs/locks.md, "Acknowledged writes"),
#   MIAOSHA_REDLOCK_NODES (= FAILOVER_REDLOCK_NODES)
# `run` exports them all to CMD.
#
# Knobs (environment):
#   FAILOVER_REDIS_SERVER     redis-server binary (default MIAOSHA_REDIS_SERVER, else PATH)
#   FAILOVER_DOWN_AFTER_MS    Sentinel down-after-milliseconds (default 1000)
#   FAILOVER_TIMEOUT_MS       Sentinel failover-timeout (default 3000)
#   FAILOVER_KEEP_DIR=1       stop leaves DIR (logs) in place
#
# The script never writes outside DIR, binds only 127.0.0.1, and stops only
# the PIDs it recorded (SIGTERM, then SIGKILL after 5 s). Every process stays
# in this script's session (why: scripts/lib/proc.sh) in a process group of
# its own, so a terminal Ctrl-C reaches only this script, which then stops
# them.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
me=failover.sh
# shellcheck source=lib/proc.sh
. "$here/scripts/lib/proc.sh"
NAME=mymaster

die() { echo "$me: $*" >&2; exit 1; }
log() { echo "$me: $*" >&2; }

find_redis() {
  local c
  for c in "${FAILOVER_REDIS_SERVER:-}" "${MIAOSHA_REDIS_SERVER:-}"; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }
  done
  command -v redis-server || die "redis-server not found"
}

# start_redis DIR VAR [CONF_LINE...]: a plain Redis in DIR/VAR; sets VAR_PORT, VAR_PID.
start_redis() {
  local dir=$1 var=$2
  shift 2
  proc_start_redis "$RS" "$dir/$var" "$@" || die "could not start $var (see $dir/$var/redis.log)"
  eval "${var}_PORT=$PROC_REDIS_PORT ${var}_PID=$PROC_REDIS_PID"
  echo "$PROC_REDIS_PID" > "$dir/$var.pidrec"
}

# start_sentinel DIR VAR: redis-server --sentinel on a free port; its config
# file is its own (Sentinel rewrites it), in DIR/VAR.
start_sentinel() {
  local dir=$1 var=$2 port pid
  mkdir -p "$dir/$var"
  for _ in $(seq 20); do
    port=$(proc_free_port) || die "no free port"
    printf '%s\n' "bind 127.0.0.1" "port $port" "daemonize no" "dir $dir/$var" \
      "logfile $dir/$var/sentinel.log" "pidfile $dir/$var/sentinel.pid" \
      "sentinel monitor $NAME 127.0.0.1 $MASTER_PORT 2" \
      "sentinel down-after-milliseconds $NAME ${FAILOVER_DOWN_AFTER_MS:-1000}" \
      "sentinel failover-timeout $NAME ${FAILOVER_TIMEOUT_MS:-3000}" \
      "sentinel parallel-syncs $NAME 1" > "$dir/$var/sentinel.conf"
    proc_start /dev/null "$RS" "$dir/$var/sentinel.conf" --sentinel
    pid=$PROC_PID
    if proc_wait_healthy "$pid" 5000 proc_redis_ping "$port"; then
      eval "${var}_PORT=$port ${var}_PID=$pid"
      echo "$pid" > "$dir/$var.pidrec"
      return 0
    fi
    proc_stop "$pid" "$var"
  done
  die "could not start $var (see $dir/$var/sentinel.log)"
}

# Each replica says master_link_status:up.
replicas_linked() {
  local p
  for p in "$REPLICA1_PORT" "$REPLICA2_PORT"; do
    redis-cli -p "$p" INFO replication 2>/dev/null | grep -q 'master_link_status:up' || return 1
  done
}

# Every Sentinel knows both replicas and the other two Sentinels.
sentinels_ready() {
  local p out
  for p in "$SENTINEL1_PORT" "$SENTINEL2_PORT" "$SENTINEL3_PORT"; do
    out=$(redis-cli -p "$p" SENTINEL master "$NAME" 2>/dev/null | tr '\n' ' ')
    [[ $out == *"num-slaves 2 "* && $out == *"num-other-sentinels 2 "* ]] || return 1
  done
}

write_env() { # dir
  local dir=$1 f=$1/failover.env i sent="" nodes=""
  {
    echo "FAILOVER_DIR=$dir"
    echo "FAILOVER_MASTER_PORT=$MASTER_PORT"
    echo "FAILOVER_MASTER_PID=$MASTER_PID"
    for i in 1 2; do
      eval "echo FAILOVER_REPLICA${i}_PORT=\$REPLICA${i}_PORT FAILOVER_REPLICA${i}_PID=\$REPLICA${i}_PID"
    done
    for i in 1 2 3; do
      eval "echo FAILOVER_SENTINEL${i}_PORT=\$SENTINEL${i}_PORT FAILOVER_SENTINEL${i}_PID=\$SENTINEL${i}_PID"
      eval "sent=\"\$sent,127.0.0.1:\$SENTINEL${i}_PORT\""
    done
    for i in 1 2 3 4 5; do
      eval "echo FAILOVER_LOCK${i}_PORT=\$LOCK${i}_PORT FAILOVER_LOCK${i}_PID=\$LOCK${i}_PID"
      eval "nodes=\"\$nodes,127.0.0.1:\$LOCK${i}_PORT\""
    done
    echo "FAILOVER_REDLOCK_NODES=${nodes#,}"
    echo "MIAOSHA_REDIS_SENTINELS=${sent#,}"
    echo "MIAOSHA_REDIS_MASTER_NAME=$NAME"
    echo "MIAOSHA_REDIS_WAIT_REPLICAS=all"
    echo "MIAOSHA_REDLOCK_NODES=${nodes#,}"
  } > "$f.tmp"
  mv "$f.tmp" "$f"
}

do_start() { # dir
  local dir=$1 i
  RS=$(find_redis)
  command -v redis-cli >/dev/null || die "redis-cli not found"
  mkdir -p "$dir"
  echo started > "$dir/.failover"    # marks DIR as ours for stop
  start_redis "$dir" MASTER
  for i in 1 2; do
    start_redis "$dir" "REPLICA$i" "replicaof 127.0.0.1 $MASTER_PORT"
  done
  proc_wait_until $(( $(proc_now_ms) + 10000 )) replicas_linked || die "replicas did not link"
  for i in 1 2 3; do start_sentinel "$dir" "SENTINEL$i"; done
  proc_wait_until $(( $(proc_now_ms) + 15000 )) sentinels_ready \
    || die "the Sentinels did not find each other and the replicas within 15 s"
  for i in 1 2 3 4 5; do start_redis "$dir" "LOCK$i"; done
  write_env "$dir"
}

do_stop() { # dir
  local dir=$1 f
  [ -f "$dir/.failover" ] || die "$dir is not a failover dir"
  for f in "$dir"/*.pidrec; do
    [ -f "$f" ] && proc_stop "$(cat "$f")" "$(basename "$f" .pidrec)"
  done
  [ "${FAILOVER_KEEP_DIR:-0}" = 1 ] || rm -rf "$dir"
}

do_status() { # dir
  local dir=$1 st=0 f pid
  [ -f "$dir/failover.env" ] || die "$dir has no failover.env"
  # shellcheck disable=SC1091
  . "$dir/failover.env"
  for f in "$dir"/*.pidrec; do
    pid=$(cat "$f")
    if proc_alive "$pid"; then echo "$(basename "$f" .pidrec) pid $pid: running"
    else echo "$(basename "$f" .pidrec) pid $pid: NOT running"; st=1; fi
  done
  echo "master per Sentinel: $(redis-cli -p "$FAILOVER_SENTINEL1_PORT" SENTINEL get-master-addr-by-name "$NAME" 2>/dev/null | tr '\n' ' ')"
  return $st
}

print_env() {
  # shellcheck disable=SC1091
  . "$1/failover.env"
  cat <<EOF
failover topology up in $1
  master:       127.0.0.1:$FAILOVER_MASTER_PORT (replicas $FAILOVER_REPLICA1_PORT, $FAILOVER_REPLICA2_PORT)
  sentinels:    MIAOSHA_REDIS_SENTINELS=$MIAOSHA_REDIS_SENTINELS (master name $NAME)
  redlock:      MIAOSHA_REDLOCK_NODES=$MIAOSHA_REDLOCK_NODES
  the service:  set -a; . $1/failover.env; set +a; build/dev/service/miaosha-server --port 8080
  stop with:    scripts/failover.sh stop $1
EOF
}

proc_topology_cli "miaosha-failover" failover.env "$@"
