# lib.sh — helpers for the scale-out fault tests (sourced, bash).
#
# The tests bring up the real topology with scripts/scaleout.sh (redis-server
# with AOF always, three miaosha-server instances, nginx), inject a fault
# with signals, and check the outcome through nginx and the audit.
# They need only bash, redis-cli and the binaries of the build tree: HTTP
# probes use bash's /dev/tcp (no curl or jq), JSON fields are read with
# grep on the service's flat replies.
#
# Assertions count failures (like tests/testutil/tu.h); `finish` prints the
# summary and sets the exit status. Every wait is a poll with a deadline.
# Process control and the HTTP probe are scripts/lib/proc.sh's.

set -uo pipefail

SRC=${MIAOSHA_SOURCE_DIR:?MIAOSHA_SOURCE_DIR not set (run through ctest)}
BUILD=${MIAOSHA_BUILD_DIR:?MIAOSHA_BUILD_DIR not set (run through ctest)}
LOAD=$BUILD/loadtest/miaosha-load
SCALEOUT=$SRC/scripts/scaleout.sh
# shellcheck source=../../scripts/lib/proc.sh
. "$SRC/scripts/lib/proc.sh"
export MIAOSHA_BUILD_DIR=$BUILD
T_NAME=$(basename "$0" .sh)
T_PASS=0
T_FAIL=0
BG_PIDS=()

say() { echo "[$T_NAME $(date +%H:%M:%S.%3N)] $*"; }
check() { # cond-status message...
  local st=$1; shift
  if [ "$st" -eq 0 ]; then T_PASS=$((T_PASS + 1)); say "ok   $*";
  else T_FAIL=$((T_FAIL + 1)); say "FAIL $*"; fi
}
ck() { # message -- command...   (passes when the command succeeds)
  local msg=$1; shift; [ "${1:-}" = -- ] && shift
  "$@"; check $? "$msg"
}
require() { # like ck, but a failure ends the test
  local msg=$1; shift; [ "${1:-}" = -- ] && shift
  "$@"; local st=$?
  check $st "$msg"
  [ $st -eq 0 ] || { say "required check failed, giving up"; exit 1; }
}
finish() {
  say "$T_PASS passed, $T_FAIL failed"
  [ "$T_FAIL" -eq 0 ]
}

now_ms() { proc_now_ms; }

# ---------------------------------------------------------------- HTTP
# http METHOD URL [timeout_s]: proc_http (one request on a fresh connection);
# sets H_CODE (000 when no HTTP answer: refused, reset or timed out), H_BODY
# and H_MS (elapsed).
http() { proc_http "$@"; }

# jfield JSON KEY: the first "KEY":value of a flat JSON text (strings unquoted).
jfield() {
  local v
  v=$(grep -o "\"$2\":[[:space:]]*\(\"[^\"]*\"\|[^,}[:space:]]*\)" <<<"$1" | head -1)
  v=${v#*\":}; v=${v#"${v%%[![:space:]]*}"}; v=${v#\"}; echo "${v%\"}"
}

# stats_requests URL MODE: the instance's /stats request count of MODE.
stats_requests() {
  http GET "$1/stats" 3
  local v
  v=$(grep -o "\"$2\":{\"requests\":[0-9]*" <<<"$H_BODY" | head -1)
  echo "${v##*:}"
}

# audit SKU: GET /stock/SKU through nginx; sets A_STOCK A_INITIAL A_SOLD
# A_ORDERS A_OVER A_UNDER (empty when unreadable).
audit() {
  http GET "$SCALEOUT_URL/stock/$1" 5
  A_STOCK=$(jfield "$H_BODY" stock) A_INITIAL=$(jfield "$H_BODY" initial)
  A_SOLD=$(jfield "$H_BODY" sold) A_ORDERS=$(jfield "$H_BODY" orders)
  A_OVER=$(jfield "$H_BODY" oversold) A_UNDER=$(jfield "$H_BODY" undersold)
  say "audit $1: $H_CODE $H_BODY"
}

# order_instances SKU: "count instance" lines of the order list (≤ 1000 orders).
order_instances() {
  http GET "$SCALEOUT_URL/orders/$1?limit=1000" 5
  grep -o '"instance":"[^"]*"' <<<"$H_BODY" | sort | uniq -c
}

# wait_until DEADLINE_MS CMD...: polls CMD every 20 ms until it succeeds
# (0) or the deadline (absolute, now_ms clock) passes (1).
wait_until() { proc_wait_until "$@"; }

# A process that exited but was not reaped yet (a zombie: its parent, the
# topology script, is gone) counts as gone.
pid_gone() { ! proc_alive "$1"; }
rcli() { redis-cli -p "$SCALEOUT_REDIS_PORT" "$@" 2>/dev/null; }
redis_up() { [ "$(rcli ping)" = PONG ]; }

# ---------------------------------------------------------------- topology
# scaleout_up: starts the topology (knobs: SCALEOUT_* environment, see
# scripts/scaleout.sh) in a fresh temp dir and loads its addresses; the EXIT
# trap stops it and every background job, by PID.
scaleout_up() {
  [ -x "$LOAD" ] || { say "FAIL $LOAD missing (build miaosha-load)"; exit 1; }
  command -v redis-cli >/dev/null || { say "FAIL redis-cli missing"; exit 1; }
  T_DIR=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-scaleout.XXXXXX")
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if ! "$SCALEOUT" start "$T_DIR/c" >"$T_DIR/start.log" 2>&1; then
    cat "$T_DIR/start.log"; say "FAIL the scale-out topology did not start"; exit 1
  fi
  # shellcheck disable=SC1091
  . "$T_DIR/c/scaleout.env"
  say "scaleout: nginx $SCALEOUT_URL, apps $SCALEOUT_APP_URLS, redis $SCALEOUT_REDIS_PORT"
}

cleanup() {
  local st=$? p
  for p in "${BG_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null; done
  for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
  if [ -n "${T_DIR:-}" ]; then
    if [ "$st" -ne 0 ] || [ "$T_FAIL" -ne 0 ]; then
      for f in "$T_DIR"/c/app*.log "$T_DIR"/c/redis.log "$T_DIR"/c/nginx/logs/error.log; do
        [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 15 "$f"; }
      done
    fi
    [ -f "$T_DIR/c/.scaleout" ] && SCALEOUT_KEEP_DIR=1 "$SCALEOUT" stop "$T_DIR/c" >/dev/null 2>&1
    # ASan/UBSan builds: a report from an instance (also one written while it
    # shut down) fails the test.
    if grep -l -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T_DIR"/c/app*.log 2>/dev/null; then
      grep -h -A20 -E "ERROR: (Address|Leak)Sanitizer|runtime error:" "$T_DIR"/c/app*.log | head -60
      say "FAIL sanitizer report in an instance log"
      [ "$st" -eq 0 ] && st=1
    fi
    rm -rf "$T_DIR"
  fi
  exit "$st"
}

# load_bg OUTFILE ARGS...: miaosha-load run --json in the background.
load_bg() {
  local out=$1; shift
  "$LOAD" run --json "$@" >"$out" 2>"$out.err" &
  LOAD_PID=$!
  BG_PIDS+=("$LOAD_PID")
}
# load_wait: waits for the background load; sets LOAD_ST and LOAD_JSON.
load_wait() {
  wait "$LOAD_PID"; LOAD_ST=$?
  LOAD_JSON=$(cat "$1")
  say "load exit $LOAD_ST: $(tr -d '\n' <<<"$LOAD_JSON")"
  [ -s "$1.err" ] && say "load stderr: $(tr '\n' ' ' < "$1.err")"
}

healthz_is() { # url status — for wait_until
  http GET "$1/healthz" 2; [ "$H_CODE" = "$2" ]
}

sold_at_least() { # sku n
  local v; v=$(rcli get "miaosha:{$1}:sold"); [ "${v:-0}" -ge "$2" ]
}

# expect_outage LABEL SKU T0_MS LIMIT_MS [QUERY] — Redis is unreachable
# since T0_MS: a token purchase (plus QUERY, e.g. "&lease_ms=3000") on every
# instance and through nginx answers 503 redis_unavailable within LIMIT_MS,
# and every instance's /healthz turns 503 within 2.5 s of T0_MS: the probe
# marks Redis down after two failed probes in a row, each up to 2 x 300 ms
# (a PING and a retry on a new connection) with 200 ms between them, so one
# lost reply under load is not an outage (service/src/svc_health.h).
expect_outage() {
  local label=$1 sku=$2 t0=$3 limit=$4 query=${5:-} u
  for u in $SCALEOUT_APP_URLS "$SCALEOUT_URL"; do
    http GET "$u/miaosha/token?sku=$sku&user=probe&wait_ms=0$query" 5
    ck "$label: purchase at $u -> $H_CODE $(jfield "$H_BODY" error) in $H_MS ms (503 redis_unavailable within $limit ms)" -- \
      test "$H_CODE" = 503 -a "$(jfield "$H_BODY" error)" = redis_unavailable -a "$H_MS" -le "$limit"
  done
  for u in $SCALEOUT_APP_URLS; do
    ck "$label: /healthz of $u turns 503 within 2.5 s" -- wait_until $(( t0 + 2500 )) healthz_is "$u" 503
  done
}
