#!/usr/bin/env bash
# soak.sh — many purchases per lock mode through nginx and the three
# instances while faults repeat: an instance kill -9'd (and restarted), Redis
# SIGKILLed (and restarted from its AOF), Redis frozen 1-2 s (SIGSTOP, then
# SIGCONT). At the end, per mode, the audit must be exact.
#
# Usage: scaleout/soak.sh [--purchases N] [--modes "token reentrant setnx"]
#                         [--seconds S] [--chunk-seconds D] [--concurrency C]
#   --purchases N     purchases per mode, at least (default 100000)
#   --modes LIST      lock modes, space or comma separated (default: token
#                     reentrant setnx). setnx is reported, never asserted: its
#                     lock has no TTL between SETNX and PEXPIRE, so a kill
#                     there leaves it stuck for good (docs/locks.md)
#   --seconds S       time bound per mode (default 900): the mode stops there,
#                     and a safe mode that did not send N purchases by then fails;
#                     multiplied by MIAOSHA_TEST_TIME_FACTOR when set
#   --chunk-seconds D one fault every D seconds (default 12, at least 6), in
#                     the order instance kill, Redis restart, Redis pause
#   --concurrency C   buyers' keep-alive connections (default 16)
# Environment: MIAOSHA_BUILD_DIR (default build/dev), the SCALEOUT_* knobs of
# scripts/scaleout.sh. The short CI version is the ctest scaleout_soak_short
# (--purchases 5000 --chunk-seconds 6 --modes "token reentrant").
#
# How a mode runs: the SKU soak-<mode> is reset once to a stock above N (so
# every purchase that reaches the commit sells and the SKU can still sell at
# the end), then purchases go out in chunks of D seconds (`miaosha-load run
# --duration-limit D`, --stock -1 after the first), at least three, until N
# were sent; a fifth into each chunk one fault is injected and healed (the
# killed instance or Redis restarted, every /healthz 200 again) while the
# chunk still runs, so no chunk's audit falls into a fault. Purchases still
# in flight at a chunk's deadline count as transport timeouts (they may
# have sold: "unacked").
# Each chunk's miaosha-load checks its own 200s against the whole order list
# (missing, duplicate acknowledged ids); the last chunk's audit covers the
# whole run (oversold, undersold, duplicates in the list, list = sold).
# Then the lock: its key gone or expiring within one lease, and one more
# purchase through nginx is sold.
#
# Asserted per safe mode (token, reentrant): purchases >= N, every chunk
# audited, oversold = 0, undersold <= the answers that named an order
# without selling it (a 503 "commit outcome unknown" may or may not have
# committed; MULTI/EXEC makes the expected undersold 0), every order in the
# list that no 200 acknowledged explained (one of those named answers that
# did sell, a 502 from an instance killed mid-purchase, or a request still in
# flight at a chunk's end), 0 acknowledged orders missing, 0 duplicate ids,
# order list = sold, no orphan lock, sells again.
# Every process is stopped by PID at the end, also on failure or Ctrl-C
# (scaleout/tests/lib.sh's cleanup: scaleout.sh stop reads the pid files,
# which this script updates on every restart).
here=$(cd "$(dirname "$0")" && pwd)
export MIAOSHA_SOURCE_DIR=${MIAOSHA_SOURCE_DIR:-$(cd "$here/.." && pwd)}
export MIAOSHA_BUILD_DIR=${MIAOSHA_BUILD_DIR:-$MIAOSHA_SOURCE_DIR/build/dev}
# shellcheck source=scaleout/tests/lib.sh
. "$here/tests/lib.sh"

N=100000 MODES="token reentrant setnx" SECONDS_BOUND=900 CHUNK=12 CONC=16
usage() { sed -n '2,/^here=/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
  --purchases) N=${2:?}; shift 2 ;;
  --modes) MODES=${2//,/ }; shift 2 ;;
  --seconds) SECONDS_BOUND=${2:?}; shift 2 ;;
  --chunk-seconds) CHUNK=${2:?}; shift 2 ;;
  --concurrency) CONC=${2:?}; shift 2 ;;
  -h|--help) usage ;;
  *) echo "soak.sh: unknown option $1" >&2; usage ;;
  esac
done
[[ $N =~ ^[0-9]+$ && $SECONDS_BOUND =~ ^[0-9]+$ && $CONC =~ ^[1-9][0-9]*$ && $CHUNK =~ ^[0-9]+$ ]] || usage
# Sanitizer builds are slower (scripts/test.sh sets the factor): the time
# bound stretches, the purchase count stays.
SECONDS_BOUND=$(( SECONDS_BOUND * ${MIAOSHA_TEST_TIME_FACTOR:-1} ))
[ "$CHUNK" -ge 6 ] || { echo "soak.sh: --chunk-seconds must be >= 6 (a fault and its healing fit in one chunk)" >&2; exit 2; }
for m in $MODES; do case $m in token|reentrant|setnx) ;; *) echo "soak.sh: mode $m: token, reentrant or setnx" >&2; exit 2 ;; esac; done

LEASE=3000      # token/setnx lease: longer than a pause (redis_paused.sh says why)
WATCHDOG=3000   # reentrant watchdog timeout, renewed every second
CMD_TIMEOUT=500
WAIT=5000       # buyers wait for the lock up to 5 s: a dead holder's lease is 3 s
SERVER=$BUILD/service/miaosha-server
RS=${SCALEOUT_REDIS_SERVER:-${MIAOSHA_REDIS_SERVER:-redis-server}}
export SCALEOUT_SERVER_ARGS="--set redis.command_timeout_ms=$CMD_TIMEOUT --set redis.connect_timeout_ms=$CMD_TIMEOUT --set server.workers=16 --set lock.lease_ms=$LEASE --set lock.watchdog_timeout_ms=$WATCHDOG ${SCALEOUT_SERVER_ARGS:-}"
scaleout_up
APP_PID=("" "$SCALEOUT_APP1_PID" "$SCALEOUT_APP2_PID" "$SCALEOUT_APP3_PID")
APP_PORT=("" "$SCALEOUT_APP1_PORT" "$SCALEOUT_APP2_PORT" "$SCALEOUT_APP3_PORT")
KIND=0 RESTARTS=0

jn() { local v; v=$(jfield "$1" "$2"); echo "${v:-0}"; }   # a number, 0 when absent
all_healthy() {
  local u
  for u in $SCALEOUT_APP_URLS; do healthz_is "$u" 200 || return 1; done
}

# fault_kill: kill -9 the next instance in turn, restart it on its port.
fault_kill() {
  local i=$(( RESTARTS % 3 + 1 )) pid
  RESTARTS=$((RESTARTS + 1))
  pid=${APP_PID[$i]}
  kill -KILL "$pid"
  wait_until $(( $(now_ms) + 5000 )) pid_gone "$pid"
  say "fault: app$i (pid $pid) kill -9'd"
  # Same port (nginx's config names it). A bind can fail for a moment after
  # the kill (seen once in 14 restarts: "Address already in use", the dead
  # process's connections still closing): retry for up to 10 s.
  local t_end=$(( $(now_ms) + 10000 )) log
  while :; do
    log=$SCALEOUT_DIR/app$i.restart$RESTARTS.log
    # shellcheck disable=SC2086
    proc_start "$log" "$SERVER" --listen 127.0.0.1 --port "${APP_PORT[$i]}" \
      --redis "127.0.0.1:$SCALEOUT_REDIS_PORT" --instance-id "app$i" $SCALEOUT_SERVER_ARGS
    APP_PID[i]=$PROC_PID
    echo "$PROC_PID" > "$SCALEOUT_DIR/app$i.pid"    # scaleout.sh stop stops this one
    proc_wait_healthy "$PROC_PID" 15000 proc_http_ok \
      "http://127.0.0.1:${APP_PORT[$i]}/healthz" 200 "\"instance\":\"app$i\"" && break
    if ! grep -q "in use" "$log" || [ "$(now_ms)" -ge "$t_end" ]; then break; fi
    say "app$i: port ${APP_PORT[$i]} still in use, retrying"
    proc_stop "$PROC_PID" "app$i"
    sleep 0.2
  done
  require "app$i restarted (pid $PROC_PID)" -- proc_wait_healthy "$PROC_PID" 1000 \
    proc_http_ok "http://127.0.0.1:${APP_PORT[$i]}/healthz" 200 "\"instance\":\"app$i\""
}

# fault_restart: SIGKILL redis-server, 1 s down, restart from the same config
# (port, AOF directory; it rewrites the pidfile scaleout.sh stop reads).
fault_restart() {
  local rpid t0
  rpid=$(cat "$SCALEOUT_DIR/redis.pid")
  kill -KILL "$rpid"; t0=$(now_ms)
  wait_until $(( t0 + 5000 )) pid_gone "$rpid"
  say "fault: redis-server (pid $rpid) SIGKILLed"
  while [ $(( $(now_ms) - t0 )) -lt 1000 ]; do sleep 0.05; done
  proc_start /dev/null "$RS" "$SCALEOUT_REDIS_CONF"
  require "redis-server restarted from its AOF ($(( $(now_ms) - t0 )) ms after the kill)" -- \
    wait_until $(( $(now_ms) + 30000 )) redis_up
}

# fault_pause: SIGSTOP redis-server for 1-2 s, then SIGCONT.
fault_pause() {
  local rpid ms
  rpid=$(cat "$SCALEOUT_DIR/redis.pid")
  ms=$(( 1000 + RANDOM % 1001 ))
  kill -STOP "$rpid"
  say "fault: redis-server (pid $rpid) SIGSTOPped for $ms ms"
  sleep "$(( ms / 1000 )).$(printf %03d $(( ms % 1000 )))"
  kill -CONT "$rpid"
}

# run_mode MODE: the chunks, the faults, the checks; appends a summary row.
ROWS=()
run_mode() {
  local mode=$1 sku=soak-$1 t0 deadline k left j st tk stock_arg
  local s_sent=0 s_ok=0 s_503=0 s_502=0 s_other=0 s_tr=0 s_busy=0 s_missing=0 s_dupack=0
  local s_noid=0 s_unk=0 s_unk_sold=0 unaudited=0 fk=0 fr=0 fp=0 fail0=$T_FAIL
  local stock=$(( N + CHUNK * 5000 + 1000 ))   # more than can be sent: never sold out
  t0=$(now_ms); deadline=$(( t0 + SECONDS_BOUND * 1000 ))
  # The first chunk resets the SKU (--stock), every later one keeps it (-1).
  # A chunk is bounded by time, not by count: its request budget (5000 per
  # second) outlasts its CHUNK seconds on this machine, so a chunk never ends
  # inside a fault (a count-bounded one ran out while Redis was down — 503s
  # come fast — and its audit found Redis down).
  for (( k = 0; s_sent < N || k < 3; k++ )); do
    left=$(( (deadline - $(now_ms)) / 1000 ))
    [ "$left" -ge "$CHUNK" ] || { say "$mode: time bound ${SECONDS_BOUND}s reached after $k chunks"; break; }
    [ "$k" -eq 0 ] && stock_arg=$stock || stock_arg=-1
    tk=$(now_ms)
    load_bg "$T_DIR/$mode.$k.json" --mode "$mode" --sku "$sku" --stock "$stock_arg" \
      --requests $(( CHUNK * 5000 )) --concurrency "$CONC" --wait-ms $WAIT --target "$SCALEOUT_URL" \
      --duration-limit "$CHUNK"
    # The fault a fifth into the chunk (at least 1 s), healed well before its end.
    while [ $(( $(now_ms) - tk )) -lt $(( CHUNK * 200 > 1000 ? CHUNK * 200 : 1000 )) ]; do sleep 0.05; done
    if proc_alive "$LOAD_PID"; then
      case $(( KIND % 3 )) in
      0) fault_kill; fk=$((fk + 1)) ;;
      1) fault_restart; fr=$((fr + 1)) ;;
      2) fault_pause; fp=$((fp + 1)) ;;
      esac
      KIND=$((KIND + 1))
      wait_until $(( $(now_ms) + 15000 )) all_healthy; st=$?
      check $st "$mode chunk $k: every instance healthy again after the fault ($(( $(now_ms) - tk )) ms into the chunk)"
      proc_alive "$LOAD_PID" || say "WARN $mode chunk $k: the chunk ended before the fault healed (its audit may have failed)"
    else
      say "WARN $mode chunk $k: ended within its first fifth; no fault in it"
    fi
    wait "$LOAD_PID"; st=$?
    j=$(cat "$T_DIR/$mode.$k.json")
    [ -s "$T_DIR/$mode.$k.json.err" ] && say "$mode chunk $k stderr: $(tr '\n' ' ' < "$T_DIR/$mode.$k.json.err")"
    if [ -z "$j" ]; then check 1 "$mode chunk $k: miaosha-load gave no result (exit $st)"; unaudited=$((unaudited + 1)); continue; fi
    s_sent=$(( s_sent + $(jn "$j" sent) ))
    s_ok=$(( s_ok + $(jn "$j" ok) ))
    s_busy=$(( s_busy + $(jn "$j" lock_busy) ))
    s_503=$(( s_503 + $(jn "$j" 503) ))   # the status tally: every 503
    s_502=$(( s_502 + $(jn "$j" 502) ))
    s_other=$(( s_other + $(jn "$j" other_http) ))
    s_tr=$(( s_tr + $(jn "$j" transport_errors) ))
    s_noid=$(( s_noid + $(jn "$j" ok_without_order_id) ))
    s_unk=$(( s_unk + $(jn "$j" unknown_outcome) ))
    if [ "$(jfield "$j" audited)" = true ]; then
      s_missing=$(( s_missing + $(jn "$j" missing_orders) ))
      s_dupack=$(( s_dupack + $(jn "$j" duplicate_acknowledged_ids) ))
      s_unk_sold=$(( s_unk_sold + $(jn "$j" unknown_outcome_sold) ))
      J_LAST=$j
    else
      unaudited=$((unaudited + 1))
      say "WARN $mode chunk $k not audited: $(jfield "$j" audit_error)"
    fi
    say "$mode chunk $k: sent $(jn "$j" sent) ok $(jn "$j" ok) 503 $(jn "$j" 503)" \
      "other $(jn "$j" other_http) transport $(jn "$j" transport_errors) busy $(jn "$j" lock_busy)" \
      "missing $(jn "$j" missing_orders) sold $(jfield "$j" sold) in $(jfield "$j" elapsed_s) s"
  done
  local dur=$(( ($(now_ms) - t0) / 1000 ))
  # The whole run: the audit after the last chunk, the lock, one more sale.
  audit "$sku"
  local over=${A_OVER:-?} under=${A_UNDER:-?} sold=${A_SOLD:-?} orders=${A_ORDERS:-?}
  local dups dupl="?"
  dupl=$(jfield "${J_LAST:-}" duplicate_order_ids); dups=$(( ${dupl:-0} + s_dupack ))
  local lockkey="miaosha:{$sku}:lock:$mode" pttl hold=$LEASE lockok=1 sells=1 unacked
  [ "$mode" = reentrant ] && hold=$WATCHDOG
  pttl=$(rcli pttl "$lockkey")
  [ "${pttl:--2}" -eq -2 ] || { [ "$pttl" -gt 0 ] && [ "$pttl" -le "$hold" ]; } || lockok=0
  http POST "$SCALEOUT_URL/miaosha/$mode?sku=$sku&user=soak-last&wait_ms=$(( hold + 2000 ))" $(( hold / 1000 + 5 ))
  [ "$H_CODE" = 200 ] || sells=0
  say "$mode: lock $lockkey pttl $pttl (-2 = gone, <= $hold); last purchase $H_CODE $H_BODY"
  unacked=$(( ${orders:-0} - s_ok ))
  local verdict=ok
  if [ "$mode" = setnx ]; then
    say "$mode (reported, not asserted): sent $s_sent/$N oversold $over undersold $under missing $s_missing dups $dups lock pttl $pttl sells again $sells"
    verdict=report
  else
    ck "$mode: sent $s_sent >= $N purchases" -- test "$s_sent" -ge "$N"
    ck "$mode: every chunk audited ($unaudited not)" -- test "$unaudited" = 0
    ck "$mode: oversold = 0 ($over)" -- test "$over" = 0
    ck "$mode: undersold $under <= answers naming an order with an unknown outcome ($s_unk)" -- test "$under" -le "$s_unk"
    ck "$mode: unacknowledged orders $unacked <= unknown outcomes that sold ($s_unk_sold) + 502s ($s_502) + transport ($s_tr)" -- test "$unacked" -le $(( s_unk_sold + s_502 + s_tr ))
    ck "$mode: 0 acknowledged orders missing ($s_missing)" -- test "$s_missing" = 0
    ck "$mode: 0 duplicate order ids ($dups) and 0 200 without id ($s_noid)" -- test "$dups" = 0 -a "$s_noid" = 0
    ck "$mode: order list = sold ($orders = $sold)" -- test "$orders" = "$sold"
    ck "$mode: no orphan lock (pttl $pttl: gone or <= $hold ms)" -- test "$lockok" = 1
    ck "$mode: the SKU sells again (last purchase $H_CODE)" -- test "$sells" = 1
    [ "$T_FAIL" -eq "$fail0" ] || verdict=FAIL
  fi
  ROWS+=("$(printf '| %-9s | %7s | %7s | %5s | %7s | %5s | %5s | %5s | %5s | %4s | %5s | %4s | %4s | %4s | %5s | %-8s | %4s s | %s |' \
    "$mode" "$s_sent" "$s_ok" "$s_503" "$s_unk/$s_unk_sold" "$s_502" "$(( s_other - s_502 ))" "$s_tr" "$s_busy" "$over" "$under" \
    "$s_missing" "$dups" "$unacked" "$pttl" "$fk/$fr/$fp" "$dur" "$verdict")")
}

summary() {
  [ ${#ROWS[@]} -gt 0 ] || return 0
  echo
  echo "| mode      | purchases | sold (200) | 503 | unknown | 502 | other | transport | 429 | oversold | undersold | missing | dups | unacked | lock pttl | faults k/r/p | duration | verdict |"
  printf '%s\n' "${ROWS[@]}"
  echo "(503: every 503, redis_unavailable and redis_error together; unknown: answers that named an order without"
  echo " selling it / of those, orders that did sell; unacked: orders listed whose buyer got no 200;"
  echo " lock pttl: ms left on the lock key at the end, -2 = gone, -1 = no TTL (stuck);"
  echo " faults: instance kill -9 / Redis SIGKILL + restart / Redis SIGSTOP 1-2 s)"
  ROWS=()
}
# The table of the modes done so far also when a required step gives up;
# then lib.sh's cleanup (with the exit status it would have seen).
trap 'st=$?; summary; (exit $st); cleanup' EXIT
say "soak: $N purchases per mode, modes: $MODES, a fault every ${CHUNK}s, bound ${SECONDS_BOUND}s per mode, concurrency $CONC"
for m in $MODES; do run_mode "$m"; done
summary
finish
