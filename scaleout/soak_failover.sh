#!/usr/bin/env bash
# soak_failover.sh — many purchases per mode through two instances on the
# failover topology (scripts/failover.sh: a master, two replicas, three
# Sentinels, five lock masters for redlock) while Sentinel fails the master
# over again and again, in turn by the three ways a master goes: killed
# (kill -9, then restarted as a replica of the new master), handed over
# (SENTINEL FAILOVER) and paused (SIGSTOP until the Sentinels start the
# failover, SIGCONT before the switch). The instances run with
# redis.wait_replicas=all. At the end, per mode, no acknowledged order may
# be missing.
#
# Usage: scaleout/soak_failover.sh [--purchases N] [--modes "lua redlock token"]
#                                  [--failovers K] [--chunk-seconds D]
#                                  [--seconds S] [--concurrency C]
#   --purchases N     purchases per mode, at least (default 100000)
#   --modes LIST      modes, space or comma separated (default: lua redlock
#                     token); they run at the same time, each on its SKU;
#                     oversold = 0 is asserted for lua only (below)
#   --failovers K     failovers at least (default 6; at least 3, one of each
#                     kind), one per chunk
#   --chunk-seconds D one failover every D seconds (default 20, at least 12:
#                     a manual or resumed failover leaves the old master a
#                     master ~10 s, and with wait_replicas=all every sale
#                     is 503 until it has rejoined as a replica)
#   --seconds S       time bound of the run (default 1200), multiplied by
#                     MIAOSHA_TEST_TIME_FACTOR when set
#   --concurrency C   buyers' keep-alive connections per mode (default 8)
# Environment: MIAOSHA_BUILD_DIR (default build/dev); FAILOVER_DOWN_AFTER_MS
# (default here 500) and FAILOVER_TIMEOUT_MS (default here 3000), passed to
# scripts/failover.sh. The short CI version is the ctest
# scaleout_soak_failover_short (--purchases 1500 --failovers 5
# --chunk-seconds 14 --modes lua,redlock).
#
# How it runs: each mode's SKU soakfo-<mode> is reset once to a stock above
# what can be sold; then every mode buys at once in chunks of D seconds (a
# mode that sent its N and bought through K chunks rests, its orders still
# there through the failovers to come)
# (`miaosha-load run --duration-limit D`, over both instances; --stock -1
# after the first; bounded by time, not by count: 50 000 requests a second,
# more than an outage's fast 503s use up, so no chunk ends, and is audited,
# inside one), until every mode sent N and K failovers were done. A fifth
# into each chunk one failover is injected, and healed before the next: a
# new master, both instances naming it, and (for all) both other nodes
# replicating from it. A failover that outlasts its chunk (Sentinel in TILT,
# a pause-resume whose promotion is retried) ends the chunk during the
# outage: its audit waits for the service to follow (--audit-wait-ms, the
# healing bound) instead of reading nothing.
#
# Asserted per mode: purchases >= N; every chunk audited; 0 acknowledged
# orders missing (acked_lost: each chunk checks its own 200s against the
# order list at its end, and at the end every 200 of the run — written by
# `miaosha-load run --acked-out` — is looked up in the final order list on
# the master of now, after failovers the chunk saw none of); 0 duplicate
# ids, no 200 without
# one; undersold <= the answers that named an order without selling it (a
# 503 not_replicated or outcome unknown: its order may or may not be on the
# new master); every listed order no 200 acknowledged explained by those
# answers or a request in flight at a chunk's end; order list = sold.
# oversold = 0 is asserted for lua (its read and its write are one script
# on one master); for the lock modes it is reported, not asserted: a
# purchase whose read went to the old master and whose commit, after the
# switch, goes to the new one (lockcore reconnects in between) writes a
# stock value the new master never had — the lesson of the matrix's
# failover column (docs/locks.md). It oversells when another buyer sold on
# the new master meanwhile (redlock too: its lock holds, the read is stale;
# seen once in 21 failovers) and undersells when the old master had writes
# the new one lost (token: 42 units in the same run).
# Every process is stopped by PID at the end, also on failure or Ctrl-C.
here=$(cd "$(dirname "$0")" && pwd)
export MIAOSHA_SOURCE_DIR=${MIAOSHA_SOURCE_DIR:-$(cd "$here/.." && pwd)}
export MIAOSHA_BUILD_DIR=${MIAOSHA_BUILD_DIR:-$MIAOSHA_SOURCE_DIR/build/dev}
# shellcheck source=scaleout/tests/lib.sh
. "$here/tests/lib.sh"

N=100000 MODES="lua redlock token" K=6 CHUNK=20 SECONDS_BOUND=1200 CONC=8
usage() { sed -n '2,/^here=/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
  --purchases) N=${2:?}; shift 2 ;;
  --modes) MODES=${2//,/ }; shift 2 ;;
  --failovers) K=${2:?}; shift 2 ;;
  --chunk-seconds) CHUNK=${2:?}; shift 2 ;;
  --seconds) SECONDS_BOUND=${2:?}; shift 2 ;;
  --concurrency) CONC=${2:?}; shift 2 ;;
  -h|--help) usage ;;
  *) echo "soak_failover.sh: unknown option $1" >&2; usage ;;
  esac
done
[[ $N =~ ^[0-9]+$ && $K =~ ^[0-9]+$ && $CHUNK =~ ^[0-9]+$ && $SECONDS_BOUND =~ ^[0-9]+$ &&
   $CONC =~ ^[1-9][0-9]*$ ]] || usage
[ "$K" -ge 3 ] || { echo "soak_failover.sh: --failovers must be >= 3 (one of each kind)" >&2; exit 2; }
[ "$CHUNK" -ge 12 ] || { echo "soak_failover.sh: --chunk-seconds must be >= 12" >&2; exit 2; }
for m in $MODES; do
  case $m in none|mutex|setnx|token|reentrant|redlock|fenced|lua) ;;
  *) echo "soak_failover.sh: unknown mode $m" >&2; exit 2 ;; esac
done
SECONDS_BOUND=$(( SECONDS_BOUND * ${MIAOSHA_TEST_TIME_FACTOR:-1} ))
export FAILOVER_DOWN_AFTER_MS=${FAILOVER_DOWN_AFTER_MS:-500}
export FAILOVER_TIMEOUT_MS=${FAILOVER_TIMEOUT_MS:-3000}
SERVER=$BUILD/service/miaosha-server
RS=${FAILOVER_REDIS_SERVER:-${MIAOSHA_REDIS_SERVER:-redis-server}}
NAME=mymaster
APP_PIDS=()

cleanup_failover() {
  local st=$? p f
  for p in "${BG_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for p in "${APP_PIDS[@]}"; do proc_stop "$p" app 2>/dev/null; done
  if [ -n "${T_DIR:-}" ]; then
    if [ "$st" -ne 0 ] || [ "$T_FAIL" -ne 0 ]; then
      for f in "$T_DIR"/app*.log; do [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 15 "$f"; }; done
      echo "--- the Sentinels' events"
      grep -h -E "switch-master|[+-]sdown|[+-]odown|try-failover|elected|selected-slave|promoted|convert-to-slave|failover-end|abort|tilt|fix-slave|reboot" \
        "$T_DIR"/f/SENTINEL*/sentinel.log 2>/dev/null | sort -k3,4 | tail -n 80
    fi
    [ -f "$T_DIR/f/.failover" ] && FAILOVER_KEEP_DIR=1 "$SRC/scripts/failover.sh" stop "$T_DIR/f" >/dev/null 2>&1
    if grep -l -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T_DIR"/app*.log 2>/dev/null; then
      say "FAIL sanitizer report in an instance log"
      [ "$st" -eq 0 ] && st=1
    fi
    rm -rf "$T_DIR"
  fi
  exit "$st"
}

# --- the topology -----------------------------------------------------------
[ -x "$LOAD" ] && [ -x "$SERVER" ] || { say "FAIL build miaosha-load and miaosha-server first"; exit 1; }
T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-soakfo.XXXXXX")
trap 'st=$?; summary; (exit $st); cleanup_failover' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
summary() { :; }
if ! "$SRC/scripts/failover.sh" start "$T_DIR/f" >"$T_DIR/start.log" 2>&1; then
  cat "$T_DIR/start.log"; say "FAIL the failover topology did not start"; exit 1
fi
# shellcheck disable=SC1091
. "$T_DIR/f/failover.env"
SENT=("$FAILOVER_SENTINEL1_PORT" "$FAILOVER_SENTINEL2_PORT" "$FAILOVER_SENTINEL3_PORT")
# each Redis node: its name in failover.sh's directory, by port
declare -A NODE_OF
NODE_OF[$FAILOVER_MASTER_PORT]=MASTER
NODE_OF[$FAILOVER_REPLICA1_PORT]=REPLICA1
NODE_OF[$FAILOVER_REPLICA2_PORT]=REPLICA2
APP_URLS=() TARGETS=()
for i in 1 2; do
  port=$(proc_free_port)
  proc_start "$T_DIR/app$i.log" env MIAOSHA_REDIS_SENTINELS="$MIAOSHA_REDIS_SENTINELS" \
    MIAOSHA_REDIS_MASTER_NAME="$MIAOSHA_REDIS_MASTER_NAME" \
    MIAOSHA_REDIS_WAIT_REPLICAS="$MIAOSHA_REDIS_WAIT_REPLICAS" \
    MIAOSHA_REDLOCK_NODES="$MIAOSHA_REDLOCK_NODES" \
    "$SERVER" --listen 127.0.0.1 --port "$port" --instance-id "soakfo$i" \
    --set redis.command_timeout_ms=500 --set redis.connect_timeout_ms=500 \
    --set redis.wait_timeout_ms=300 --set server.workers=16 --set lock.lease_ms=3000 \
    --set lock.watchdog_timeout_ms=3000
  APP_PIDS+=("$PROC_PID")
  require "app$i up (wait_replicas $MIAOSHA_REDIS_WAIT_REPLICAS)" -- proc_wait_healthy "$PROC_PID" 15000 \
    proc_http_ok "http://127.0.0.1:$port/healthz" 200
  APP_URLS+=("http://127.0.0.1:$port")
  TARGETS+=(--target "http://127.0.0.1:$port")
done
say "failover topology: master $FAILOVER_MASTER_PORT, replicas $FAILOVER_REPLICA1_PORT $FAILOVER_REPLICA2_PORT," \
  "sentinels ${SENT[*]}, instances ${APP_URLS[*]}"

# --- the failovers ----------------------------------------------------------
scli() { redis-cli -p "$1" "${@:2}" 2>/dev/null; }
# master_port: the master as the first Sentinel that answers names it
master_port() {
  local s out
  for s in "${SENT[@]}"; do
    out=$(scli "$s" SENTINEL get-master-addr-by-name "$NAME" | sed -n 2p)
    [ -n "$out" ] && { echo "$out"; return; }
  done
}
# every Sentinel names a master other than $1
switched_from() {
  local s p
  for s in "${SENT[@]}"; do
    p=$(scli "$s" SENTINEL get-master-addr-by-name "$NAME" | sed -n 2p)
    [ -n "$p" ] && [ "$p" != "$1" ] || return 1
  done
}
failover_started() {
  local s
  for s in "${SENT[@]}"; do
    scli "$s" SENTINEL master "$NAME" | grep -q failover_in_progress && return 0
  done
  return 1
}
# healed: both instances name the master of now, and both other nodes
# replicate from it (wait_replicas=all waits for them). The master of now,
# not the one the failover promoted: on a loaded machine Sentinel may fail
# over again on its own (down-after 500 ms).
healed() {
  local u m
  m=$(master_port)
  [ -n "$m" ] || return 1
  for u in "${APP_URLS[@]}"; do
    http GET "$u/healthz" 2
    [ "$H_CODE" = 200 ] && [[ $H_BODY == *"\"master\":\"127.0.0.1:$m\""* ]] || return 1
  done
  [ "$(scli "$m" INFO replication | grep -c 'state=online')" -ge 2 ]
}
node_pid() { cat "$T_DIR/f/${NODE_OF[$1]}.pidrec"; }

# restart PORT NEWPORT: the killed node back, as a replica of the new master
restart_as_replica() {
  local port=$1 to=$2 name=${NODE_OF[$1]}
  proc_start /dev/null "$RS" "$T_DIR/f/$name/redis.conf" --replicaof 127.0.0.1 "$to"
  echo "$PROC_PID" > "$T_DIR/f/$name.pidrec"   # failover.sh stop stops this one
}

# failover: one of the next kind; a failover Sentinel gave up (it aborts one
# whose chosen replica stops answering for a moment: a starved machine) is
# said, not counted, and its kind comes again at the next chunk.
FO_KIND=0 FO_TRIES=0 FO_DONE=0 FO_KILL=0 FO_MANUAL=0 FO_PAUSE=0 FO_MS=() HEAL_MS=()
failover() {
  local old new t0 t1 pid kind=$(( FO_KIND % 3 ))
  FO_TRIES=$((FO_TRIES + 1))
  old=$(master_port)
  [ -n "$old" ] || { check 1 "failover: no Sentinel names a master"; return; }
  pid=$(node_pid "$old")
  t0=$(now_ms)
  local what=("kill -9" "SENTINEL FAILOVER" "pause-resume") st
  case $kind in
  0) kill -KILL "$pid"; wait_until $(( t0 + 5000 )) pid_gone "$pid"
     say "failover try $FO_TRIES: master $old (pid $pid) kill -9'd" ;;
  1) say "failover try $FO_TRIES: SENTINEL FAILOVER ($(scli "${SENT[0]}" SENTINEL FAILOVER "$NAME"))" ;;
  2) kill -STOP "$pid"
     wait_until $(( t0 + 15000 )) failover_started; st=$?
     kill -CONT "$pid"
     say "failover try $FO_TRIES: master $old (pid $pid) SIGSTOPped, SIGCONTed $(( $(now_ms) - t0 )) ms later$([ $st = 0 ] && echo ", the failover under way" || echo ": no failover started")" ;;
  esac
  wait_until $(( t0 + 20000 )) switched_from "$old"; st=$?
  t1=$(now_ms)
  new=$(master_port)
  if [ "$st" -ne 0 ]; then
    say "WARN failover try $FO_TRIES (${what[$kind]}): no switch within 20 s (the master is still $new); tried again at the next chunk"
    if [ "$kind" = 0 ]; then   # the master stays dead: it comes back as it was
      proc_start /dev/null "$RS" "$T_DIR/f/${NODE_OF[$old]}/redis.conf"
      echo "$PROC_PID" > "$T_DIR/f/${NODE_OF[$old]}.pidrec"
    fi
    return
  fi
  FO_KIND=$((FO_KIND + 1))
  FO_DONE=$((FO_DONE + 1))
  case $kind in 0) FO_KILL=$((FO_KILL + 1)) ;; 1) FO_MANUAL=$((FO_MANUAL + 1)) ;; 2) FO_PAUSE=$((FO_PAUSE + 1)) ;; esac
  say "failover $FO_DONE (${what[$kind]}): every Sentinel names a new master ($old -> $new) after $(( t1 - t0 )) ms"
  [ "$kind" = 0 ] && [ -n "$new" ] && restart_as_replica "$old" "$new"
  # a starved Sentinel enters TILT and does nothing for 30 s, demoting the
  # old master included: the bound allows for it
  wait_until $(( t1 + 90000 )) healed; st=$?
  check $st "failover $FO_DONE: healed $(( $(now_ms) - t1 )) ms after the switch (instances on $(master_port), two replicas online)"
  FO_MS+=("$(( t1 - t0 ))") HEAL_MS+=("$(( $(now_ms) - t1 ))")
}

# --- the run ----------------------------------------------------------------
declare -A S_SENT S_OK S_503 S_NOTREP S_TR S_BUSY S_LOST S_DUPACK S_NOID S_UNK S_UNK_SOLD S_UNAUD S_OTHER
for m in $MODES; do
  for v in S_SENT S_OK S_503 S_NOTREP S_TR S_BUSY S_LOST S_DUPACK S_NOID S_UNK S_UNK_SOLD S_UNAUD S_OTHER; do
    eval "$v[$m]=0"
  done
done
jn() { local v; v=$(jfield "$1" "$2"); echo "${v:-0}"; }
enough() {
  local m
  [ "$FO_DONE" -ge "$K" ] && [ "$FO_KILL" -ge 1 ] && [ "$FO_MANUAL" -ge 1 ] && [ "$FO_PAUSE" -ge 1 ] ||
    return 1
  for m in $MODES; do [ "${S_SENT[$m]}" -ge "$N" ] || return 1; done
}
STOCK=$(( N * 2 + CHUNK * (K + 2) * 20000 ))   # more than can be sold: never sold out
t_start=$(now_ms); deadline=$(( t_start + SECONDS_BOUND * 1000 ))
say "soak with failovers: $N purchases per mode ($MODES), >= $K failovers, one every ${CHUNK}s, wait_replicas $MIAOSHA_REDIS_WAIT_REPLICAS"
declare -A PIDS
for (( k = 0; ; k++ )); do
  enough && [ "$k" -ge 3 ] && break
  [ $(( (deadline - $(now_ms)) / 1000 )) -ge "$CHUNK" ] || { say "time bound ${SECONDS_BOUND}s reached after $k chunks"; break; }
  tk=$(now_ms)
  PIDS=()
  for m in $MODES; do
    # a mode that sent its N and has bought through K chunks rests: its
    # orders still go through the failovers to come (the end looks them
    # all up), and the lists stay small enough to resync in seconds
    [ "$k" -ge "$K" ] && [ "${S_SENT[$m]}" -ge "$N" ] && continue
    [ "$k" -eq 0 ] && stock=$STOCK || stock=-1
    load_bg "$T_DIR/$m.$k.json" --mode "$m" --sku "soakfo-$m" --stock "$stock" \
      --requests $(( CHUNK * 50000 )) --concurrency "$CONC" --wait-ms 5000 "${TARGETS[@]}" \
      --duration-limit "$CHUNK" --acked-out "$T_DIR/$m.$k.acked" --audit-wait-ms 90000
    PIDS[$m]=$LOAD_PID
  done
  while [ $(( $(now_ms) - tk )) -lt $(( CHUNK * 200 )) ]; do sleep 0.05; done
  enough || failover
  for m in $MODES; do
    [ -n "${PIDS[$m]:-}" ] || continue
    wait "${PIDS[$m]}"; st=$?
    j=$(cat "$T_DIR/$m.$k.json")
    [ -s "$T_DIR/$m.$k.json.err" ] && say "$m chunk $k stderr: $(tr '\n' ' ' < "$T_DIR/$m.$k.json.err")"
    if [ -z "$j" ]; then check 1 "$m chunk $k: miaosha-load gave no result (exit $st)"; S_UNAUD[$m]=$(( S_UNAUD[$m] + 1 )); continue; fi
    S_SENT[$m]=$(( S_SENT[$m] + $(jn "$j" sent) ))
    S_OK[$m]=$(( S_OK[$m] + $(jn "$j" ok) ))
    S_BUSY[$m]=$(( S_BUSY[$m] + $(jn "$j" lock_busy) ))
    S_503[$m]=$(( S_503[$m] + $(jn "$j" 503) ))   # the status tally: every 503
    S_NOTREP[$m]=$(( S_NOTREP[$m] + $(jn "$j" "503 not_replicated") ))
    S_OTHER[$m]=$(( S_OTHER[$m] + $(jn "$j" other_http) ))
    S_TR[$m]=$(( S_TR[$m] + $(jn "$j" transport_errors) ))
    S_NOID[$m]=$(( S_NOID[$m] + $(jn "$j" ok_without_order_id) ))
    S_UNK[$m]=$(( S_UNK[$m] + $(jn "$j" unknown_outcome) ))
    if [ "$(jfield "$j" audited)" = true ]; then
      S_LOST[$m]=$(( S_LOST[$m] + $(jn "$j" acked_lost) ))
      S_DUPACK[$m]=$(( S_DUPACK[$m] + $(jn "$j" duplicate_acknowledged_ids) ))
      S_UNK_SOLD[$m]=$(( S_UNK_SOLD[$m] + $(jn "$j" unknown_outcome_sold) ))
      eval "J_LAST_$m=\$j"
    else
      S_UNAUD[$m]=$(( S_UNAUD[$m] + 1 ))
      say "WARN $m chunk $k not audited: $(jfield "$j" audit_error)"
    fi
    say "$m chunk $k: sent $(jn "$j" sent) ok $(jn "$j" ok) 503 $(jn "$j" redis_unavailable)" \
      "(not_replicated $(jn "$j" "503 not_replicated")) transport $(jn "$j" transport_errors)" \
      "acked_lost $(jn "$j" acked_lost) sold $(jfield "$j" sold) in $(jfield "$j" elapsed_s) s"
  done
done
dur=$(( ($(now_ms) - t_start) / 1000 ))

ROWS=()
for m in $MODES; do
  http GET "${APP_URLS[0]}/stock/soakfo-$m" 5
  over=$(jfield "$H_BODY" oversold) under=$(jfield "$H_BODY" undersold)
  sold=$(jfield "$H_BODY" sold) orders=$(jfield "$H_BODY" orders)
  say "audit soakfo-$m: $H_CODE $H_BODY"
  eval "jl=\${J_LAST_$m:-}"
  # every 200 of the whole run against the final order list on the master
  # of now: a later failover could take what a chunk's own audit saw
  cat "$T_DIR/$m".*.acked 2>/dev/null | LC_ALL=C sort -u > "$T_DIR/$m.acked"
  redis-cli -p "$(master_port)" LRANGE "miaosha:{soakfo-$m}:orders" 0 -1 2>/dev/null |
    grep -o '"order_id":"[^"]*"' | cut -d'"' -f4 | LC_ALL=C sort -u > "$T_DIR/$m.listed"
  lost_all=$(LC_ALL=C comm -23 "$T_DIR/$m.acked" "$T_DIR/$m.listed" | wc -l)
  acked_all=$(wc -l < "$T_DIR/$m.acked")
  dupl=$(jfield "$jl" duplicate_order_ids); dups=$(( ${dupl:-0} + S_DUPACK[$m] ))
  unacked=$(( ${orders:-0} - S_OK[$m] ))
  ck "$m: sent ${S_SENT[$m]} >= $N purchases" -- test "${S_SENT[$m]}" -ge "$N"
  ck "$m: every chunk audited (${S_UNAUD[$m]} not)" -- test "${S_UNAUD[$m]}" = 0
  ck "$m: 0 acknowledged orders lost (acked_lost ${S_LOST[$m]} at the chunks' ends; $lost_all of all $acked_all 200s of the run missing from the final list)" -- \
    test "${S_LOST[$m]}" = 0 -a "$lost_all" = 0 -a "$acked_all" -eq "${S_OK[$m]}"
  ck "$m: undersold ${under:-?} <= answers naming an order without selling it (${S_UNK[$m]})" -- test "${under:-1}" -le "${S_UNK[$m]}"
  ck "$m: unacknowledged orders $unacked <= those answers that sold (${S_UNK_SOLD[$m]}) + transport (${S_TR[$m]})" -- \
    test "$unacked" -le $(( S_UNK_SOLD[$m] + S_TR[$m] ))
  ck "$m: 0 duplicate order ids ($dups), 0 200 without id (${S_NOID[$m]})" -- test "$dups" = 0 -a "${S_NOID[$m]}" = 0
  ck "$m: order list = sold (${orders:-?} = ${sold:-?})" -- test "${orders:-a}" = "${sold:-b}"
  case $m in
  lua) ck "$m: oversold = 0 (${over:-?})" -- test "${over:-1}" = 0 ;;
  *) say "$m: oversold ${over:-?} (reported, not asserted: a read on the old master, a commit on the new one)" ;;
  esac
  ROWS+=("$(printf '| %-9s | %7s | %7s | %6s | %7s | %9s | %4s | %8s | %9s | %7s | %s s |' "$m" "${S_SENT[$m]}" \
    "${S_OK[$m]}" "${S_503[$m]}" "${S_NOTREP[$m]}" "${S_UNK[$m]}/${S_UNK_SOLD[$m]}" "$lost_all" "${over:-?}" \
    "${under:-?}" "$unacked" "$dur")")
done
ck "failovers: $FO_DONE >= $K (kill $FO_KILL, manual $FO_MANUAL, pause $FO_PAUSE)" -- \
  test "$FO_DONE" -ge "$K" -a "$FO_KILL" -ge 1 -a "$FO_MANUAL" -ge 1 -a "$FO_PAUSE" -ge 1
summary() {
  [ ${#ROWS[@]} -gt 0 ] || return 0
  echo
  echo "| mode      | purchases | sold (200) | 503 | not_replicated | unknown | acked_lost | oversold | undersold | unacked | duration |"
  printf '%s\n' "${ROWS[@]}"
  echo "failovers: $FO_DONE of $FO_TRIES tried (kill $FO_KILL, manual $FO_MANUAL, pause-resume $FO_PAUSE);" \
    "to the switch ms: ${FO_MS[*]}; switch to healed ms: ${HEAL_MS[*]}"
  echo "(503: every 503; unknown: answers that named an order without selling it / of those, orders that"
  echo " did sell; unacked: orders listed whose buyer got no 200; wait_replicas $MIAOSHA_REDIS_WAIT_REPLICAS)"
  ROWS=()
}
finish
