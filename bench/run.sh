#!/usr/bin/env bash
# bench/run.sh [all|lockcore|peers|service|fenced|pipeline|lua|trace|load|scaleout|buckets|cluster]...
#              [--seconds N] [--rounds N] [--connections N]
#              [--redis-io-threads N] [--set KEY=VALUE]... [--no-build]
#
# miaosha's benchmarks in one command. Builds what it needs (Release, in
# build/bench), starts its own redis-server (and miaosha-server instances,
# nginx, a Redis Cluster) on free 127.0.0.1 ports, runs each part with the reference measured
# in the same run, alternating reference and subject (A/B/A/B) and taking
# medians, prints a summary table of figures, ratios, targets and verdicts
# (also written to bench/out/summary.md, .tsv and .svg), and stops
# everything it started, by PID, also on Ctrl-C.
#
#   --seconds N  each wrk / miaosha-load / cs_bench measurement (default 10)
#   --rounds N   alternating rounds, medians reported (default 3)
#   --connections N  the load's connections in the buckets and cluster parts,
#                whose targets ask for 64 or more (default 64; 1..1024; a
#                target set at a count the run did not use: no verdict);
#                on 8+ CPUs their servers get as many workers
#   --redis-io-threads N  the bench's one Redis and the cluster part's
#                masters run N I/O threads (io-threads, io-threads-do-reads;
#                default 1: Redis's own default, none)
#   --set KEY=VALUE  passed to the miaosha-servers of the buckets and
#                cluster parts (their --set: a config key, e.g.
#                server.workers=32), after the bench's own settings; the
#                summary names them and marks those parts' verdicts "(with
#                --set)". For trying a setting on a lent machine in the same
#                call: a target's verdict is the defaults'
#   --no-build   use the binaries already in build/bench as they are: no
#                package install, no configure, no build, no npm install
#                (a machine with the binaries but no compiler: bench/README.md)
#
# The buckets and cluster parts also print, for each wrk run, the CPU the
# server, Redis (each master) and the rest of the machine spent, the Redis
# commands a sale and the lua batches' size (bench/README.md, "Reading the
# output").
#
# Verdicts: ok / MISSED against the target; a target that holds only where
# the processes have CPUs of their own reads "n/a (needs ≥ N CPUs; this
# machine has M)" below that count, with the figure still shown.
# Benchmarks are not tests: the exit status is 0 whenever the benchmarks ran,
# whatever the figures; 1 only when something could not be started/measured.
# See bench/README.md for what each figure means and how to read it.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/lib/proc.sh
. "$ROOT/scripts/lib/proc.sh"
BUILD=$ROOT/build/bench
DUR=10      # seconds per wrk / miaosha-load / cs_bench measurement
ROUNDS=3    # alternating rounds; medians are reported
WAIT_MS=1000 # ?wait_ms= of the purchase benchmarks (and cs_bench's wait)
NO_BUILD=0
CONNS=64    # wrk's connections in the buckets and cluster parts
RIO=1       # the I/O threads of the bench's Redis and the cluster's masters
OUT=$ROOT/bench/out # the summary as .md, .tsv and .svg (git-ignored)
SRV_SET=()  # --set KEY=VALUE: added to every miaosha-server's flags
parts=()

usage() {
  sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}
while [ $# -gt 0 ]; do
  case "$1" in
    all|lockcore|peers|service|fenced|pipeline|lua|trace|load|scaleout|buckets|cluster) parts+=("$1") ;;
    --no-build) NO_BUILD=1 ;;
    --seconds) [ $# -ge 2 ] || usage 2; DUR=$2; shift ;;
    --seconds=*) DUR=${1#*=} ;;
    --rounds) [ $# -ge 2 ] || usage 2; ROUNDS=$2; shift ;;
    --rounds=*) ROUNDS=${1#*=} ;;
    --connections) [ $# -ge 2 ] || usage 2; CONNS=$2; shift ;;
    --connections=*) CONNS=${1#*=} ;;
    --set) [ $# -ge 2 ] || usage 2; SRV_SET+=(--set "$2"); shift ;;
    --set=*) SRV_SET+=(--set "${1#*=}") ;;
    --redis-io-threads) [ $# -ge 2 ] || usage 2; RIO=$2; shift ;;
    --redis-io-threads=*) RIO=${1#*=} ;;
    -h|--help) usage 0 ;;
    *) echo "bench: unknown argument '$1'" >&2; usage 2 ;;
  esac
  shift
done
case "$DUR" in ''|*[!0-9]*) echo "bench: --seconds wants a whole number >= 1" >&2; exit 2 ;; esac
case "$ROUNDS" in ''|*[!0-9]*) echo "bench: --rounds wants a whole number >= 1" >&2; exit 2 ;; esac
[ "$DUR" -ge 1 ] && [ "$ROUNDS" -ge 1 ] || { echo "bench: --seconds and --rounds must be >= 1" >&2; exit 2; }
case "$CONNS" in ''|*[!0-9]*) echo "bench: --connections wants a whole number from 1 to 1024" >&2; exit 2 ;; esac
[ "$CONNS" -ge 1 ] && [ "$CONNS" -le 1024 ] || { echo "bench: --connections wants a whole number from 1 to 1024" >&2; exit 2; }
case "$RIO" in ''|*[!0-9]*) RIO=0 ;; esac
[ "$RIO" -ge 1 ] && [ "$RIO" -le 128 ] || { echo "bench: --redis-io-threads wants a whole number from 1 to 128" >&2; exit 2; }
RIO_CONF=() # the redis.conf lines of --redis-io-threads
[ "$RIO" -gt 1 ] && RIO_CONF=("io-threads $RIO" "io-threads-do-reads yes")
[ ${#parts[@]} -eq 0 ] && parts=(all)
want() { local p; for p in "${parts[@]}"; do [ "$p" = all ] || [ "$p" = "$1" ] && return 0; done; return 1; }

log() { printf '%s\n' "$*" >&2; }
section() { printf '\n=== %s\n' "$*"; }

# ---------------------------------------------------------------- cleanup --
WORK=$(mktemp -d /tmp/miaosha-bench.XXXXXX)
chmod 755 "$WORK" # nginx workers (user nobody) read the static file in it
PIDS=()           # everything started in the background, stopped by PID
REDIS_DIR=$WORK/redis
SCALEOUT_STARTED=0
RCLUSTER_DIR=$WORK/redis-cluster # the cluster part's (scripts/redis-cluster.sh)

# Every server runs in this script's session (why: scripts/lib/proc.sh).
stop_pid() { proc_stop "$1" "" 6; } # stop_pid PID: SIGTERM, SIGKILL after 6 s
forget_pid() { local p keep=(); for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done; PIDS=("${keep[@]}"); }

cleanup() {
  trap - EXIT INT TERM
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${PIDS[$i]}"; done
  if [ "$SCALEOUT_STARTED" = 1 ]; then bash "$ROOT/scripts/scaleout.sh" stop "$WORK/scaleout" >/dev/null 2>&1; fi
  [ -f "$RCLUSTER_DIR/.redis-cluster" ] && bash "$ROOT/scripts/redis-cluster.sh" stop "$RCLUSTER_DIR" >/dev/null 2>&1
  [ -f "$REDIS_DIR/redis.pid" ] && bash "$ROOT/tests/redis-fixture.sh" stop "$REDIS_DIR" >/dev/null 2>&1
  # The servers run at log.level=warn: whatever they logged is worth a look
  # (e.g. why /healthz answered 503), so show it before the logs go.
  local f
  for f in "$WORK"/server-*.log; do
    [ -s "$f" ] || continue
    echo "--- $(basename "$f") (warnings and errors, last 20 lines)"
    tail -20 "$f"
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log "bench: interrupted, stopping what it started"; exit 130' INT TERM

# ------------------------------------------------------------------ build --
have() { command -v "$1" >/dev/null 2>&1; }
[ -x /usr/sbin/nginx ] && ! have nginx && PATH=$PATH:/usr/sbin # Debian's nginx, outside a user's PATH
# What the chosen parts run: the programs they need on PATH, and the
# binaries of build/bench.
tools=(redis-server redis-cli timeout awk)
bins=()
want lockcore && bins+=(bench/lc_bench)
want peers && bins+=(bench/lc_bench)
if want service || want fenced || want pipeline || want lua || want trace || want load || want scaleout ||
   want buckets || want cluster; then
  tools+=(wrk); bins+=(service/miaosha-server)
fi
want service || want pipeline || want lua && bins+=(bench/cs_bench)
want service || want load || want buckets && bins+=(loadtest/miaosha-load)
want service || want scaleout && tools+=(nginx)
want service && tools+=(python3) # bench/live_poll.py
want lua && tools+=(redis-benchmark sha1sum)

if [ "$NO_BUILD" = 1 ]; then
  section "no build: the binaries in $BUILD as they are"
  missing=()
  for t in "${tools[@]}"; do have "$t" || missing+=("$t (not on PATH)"); done
  for b in $(printf '%s\n' "${bins[@]}" | sort -u); do [ -x "$BUILD/$b" ] || missing+=("$BUILD/$b"); done
  if [ ${#missing[@]} -gt 0 ]; then
    log "bench: --no-build, and the chosen parts need what is not here:"
    printf '  %s\n' "${missing[@]}" >&2
    log "  (build on a machine with a compiler with 'bash bench/run.sh', and bring the binaries"
    log "   and the tools as bench/README.md, \"Without a compiler\", says; PATH: $PATH)"
    exit 1
  fi
  for b in $(printf '%s\n' "${bins[@]}" | sort -u); do echo "using $BUILD/$b"; done
else
  section "build (Release, $BUILD)"
  lack=0
  for t in "${tools[@]}" cmake cc; do have "$t" || lack=1; done
  # the peers part's redis-py is a Python package, not a command
  want peers && ! /usr/bin/python3 -c 'import redis' >/dev/null 2>&1 && lack=1
  if [ "$lack" = 1 ]; then
    bash "$ROOT/scripts/deps.sh" --with-tools || { log "bench: missing tools (see above)"; exit 1; }
  fi
  if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1 &&
         cmake --build "$BUILD" -j"$(nproc)" --target lc_bench cs_bench miaosha-server miaosha-load >>"$WORK/cmake.log" 2>&1; }; then
    tail -30 "$WORK/cmake.log" >&2; log "bench: build failed"; exit 1
  fi
  echo "built lc_bench cs_bench miaosha-server miaosha-load"
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
SRV=$BUILD/service/miaosha-server
LOAD=$BUILD/loadtest/miaosha-load

# The peers part's Node libraries: bench/peers/package.json and its
# lockfile, installed by `npm ci` into a folder of the bench's own (never
# by the tests). PEERS_NODE says why they cannot run, empty when they can.
PEERS_DIR=$BUILD/peers
PEERS_NODE=""
if want peers; then
  if ! have node; then
    PEERS_NODE="node not installed"
  elif [ "$NO_BUILD" = 0 ] && ! cmp -s "$ROOT/bench/peers/package-lock.json" "$PEERS_DIR/package-lock.json"; then
    if ! have npm; then
      PEERS_NODE="npm not installed"
    else
      rm -rf "$PEERS_DIR" && mkdir -p "$PEERS_DIR" &&
        cp "$ROOT/bench/peers/package.json" "$ROOT/bench/peers/package-lock.json" "$PEERS_DIR/"
      if timeout 300 npm ci --prefix "$PEERS_DIR" --no-audit --no-fund >"$WORK/npm.log" 2>&1; then
        echo "installed the peers' Node libraries (npm ci) in $PEERS_DIR"
      else
        tail -5 "$WORK/npm.log" >&2
        rm -f "$PEERS_DIR/package-lock.json" # so that the next run tries again
        PEERS_NODE="npm ci failed (offline?): see above"
      fi
    fi
  fi
  if [ -z "$PEERS_NODE" ] && [ ! -d "$PEERS_DIR/node_modules/redlock" ]; then
    PEERS_NODE="the Node libraries are not in $PEERS_DIR/node_modules"
  fi
fi

# ---------------------------------------------------------------- helpers --
free_port() { proc_free_port; }

# http METHOD PORT PATH -> prints "STATUS BODY" (proc_http: bash /dev/tcp, no curl needed)
http() { proc_http "$1" "http://127.0.0.1:$2$3" 5; printf '%s %s\n' "$H_CODE" "$H_BODY"; }

wait_healthy() { # wait_healthy PID PORT [PATH]: 200 within 10 s
  proc_wait_healthy "$1" 10000 proc_http_ok "http://127.0.0.1:$2${3:-/healthz}"
}

# start_server NAME [miaosha-server args...] -> sets SERVER_PORT SERVER_PID
# (and PORT_PID[SERVER_PORT])
declare -A PORT_PID=()
start_server() {
  local name=$1; shift
  SERVER_PORT=$(free_port) || return 1
  proc_start "$WORK/server-$name.log" "$SRV" --port "$SERVER_PORT" --redis "127.0.0.1:$REDIS_PORT" \
    --instance-id "bench-$name" --set log.level=warn "$@"
  SERVER_PID=$PROC_PID
  PIDS+=("$SERVER_PID")
  PORT_PID[$SERVER_PORT]=$SERVER_PID
  if ! wait_healthy "$SERVER_PID" "$SERVER_PORT"; then
    log "bench: miaosha-server $name did not become healthy on port $SERVER_PORT:"
    tail -5 "$WORK/server-$name.log" >&2
    return 1
  fi
  echo "miaosha-server $name: 127.0.0.1:$SERVER_PORT pid $SERVER_PID ${*:-(defaults)}"
}

# start_nginx BODY_FILE -> sets NGINX_PORT NGINX_PID; serves GET /static
start_nginx() {
  local pre=$WORK/nginx
  mkdir -p "$pre/html" "$pre/tmp" "$pre/logs"
  cp "$1" "$pre/html/static"
  chmod -R a+rX "$pre/html"
  NGINX_PORT=$(free_port) || return 1
  cat >"$pre/nginx.conf" <<EOF
# generated by bench/run.sh: nginx serving one small static file
worker_processes 2;
daemon off;
pid $pre/nginx.pid;
error_log $pre/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    keepalive_timeout 65;
    default_type application/json;
    client_body_temp_path $pre/tmp/body;
    proxy_temp_path $pre/tmp/proxy;
    fastcgi_temp_path $pre/tmp/fastcgi;
    uwsgi_temp_path $pre/tmp/uwsgi;
    scgi_temp_path $pre/tmp/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $pre/html;
        location = /static { }
    }
}
EOF
  proc_start "$pre/logs/stdout.log" "$NGINX" -p "$pre" -e "$pre/logs/error.log" -c "$pre/nginx.conf"
  NGINX_PID=$PROC_PID
  PIDS+=("$NGINX_PID")
  if ! wait_healthy "$NGINX_PID" "$NGINX_PORT" /static; then
    log "bench: nginx did not start:"; tail -5 "$pre/logs/error.log" >&2; return 1
  fi
  echo "nginx (static file, $(wc -c <"$1") bytes): 127.0.0.1:$NGINX_PORT pid $NGINX_PID"
}

# What a wrk run cost each process (the buckets and cluster parts: where
# their ratios' ceiling is). WATCH_PIDS holds "LABEL:PID" of the processes
# to watch (empty: nothing is watched), WATCH_REDIS "PORT" of the Redis
# servers whose commands are counted. watch_end sets WATCH_CPU, e.g.
# "CPU: server 310 %, redis 98 %, the rest 150 %; the machine 40 % busy"
# (100 % = one CPU; "the rest" is mostly wrk), and WATCH_CMDS, the commands
# those Redis servers ran meanwhile.
WATCH_PIDS=() WATCH_REDIS=() WATCH_LUA=""
# watch_server PORT REDIS_PORT... : watch the miaosha-server on PORT (its
# lua batches too) and the Redis servers on the REDIS_PORTs (the bench's
# one Redis or the cluster's masters), "redis"/"master N" in the note
watch_server() {
  local port=$1 p n=0 pid
  shift
  WATCH_PIDS=("server:${PORT_PID[$port]}") WATCH_REDIS=() WATCH_LUA=$port
  for p in "$@"; do
    pid=$(redis-cli -h 127.0.0.1 -p "$p" INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
    n=$((n + 1))
    if [ $# -eq 1 ]; then WATCH_PIDS+=("redis:$pid"); else WATCH_PIDS+=("master $n:$pid"); fi
    WATCH_REDIS+=("$p")
  done
}
watch_none() { WATCH_PIDS=() WATCH_REDIS=() WATCH_LUA=""; }
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100) # the ticks of /proc's CPU times a second
watch_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}'; } # utime + stime
# the machine's CPU ticks so far, "BUSY ALL" (user nice system irq softirq; and idle iowait)
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
watch_cmds() {
  local p t=0 v
  for p in "${WATCH_REDIS[@]}"; do
    v=$(redis-cli -h 127.0.0.1 -p "$p" INFO stats 2>/dev/null | tr -d '\r' | sed -n 's/^total_commands_processed://p')
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
watch_begin() {
  WATCH_CPU="" WATCH_CMDS=""
  [ ${#WATCH_PIDS[@]} -gt 0 ] || return 0
  local w
  W_B0=""
  [ -z "$WATCH_LUA" ] || W_B0=$(lua_batch_counts "$WATCH_LUA")
  W_T0=() W_C0=$(watch_cmds) W_NS0=$(date +%s%N) W_S0=$(machine_ticks)
  for w in "${WATCH_PIDS[@]}"; do W_T0+=("$(watch_ticks "${w#*:}")"); done
}
watch_end() {
  [ ${#WATCH_PIDS[@]} -gt 0 ] || return 0
  local i w t s1 busy all own=0 parts=() wall
  s1=$(machine_ticks)
  # the wall-clock time in ticks (CLK_TCK a second): a process's ticks over
  # it are its share of one CPU
  wall=$(( ($(date +%s%N) - W_NS0) * CLK_TCK / 1000000000 ))
  busy=$(( ${s1% *} - ${W_S0% *} )) all=$(( ${s1#* } - ${W_S0#* } ))
  [ "$all" -gt 0 ] && [ "$wall" -gt 0 ] || return 0
  for i in "${!WATCH_PIDS[@]}"; do
    w=${WATCH_PIDS[$i]}
    t=$(( $(watch_ticks "${w#*:}") - ${W_T0[$i]:-0} ))
    own=$((own + t))
    parts+=("${w%%:*} $((t * 100 / wall)) %")
  done
  # "the rest": every other busy tick of the machine's CPUs (/proc/stat)
  WATCH_CPU="CPU: $(IFS=,; echo "${parts[*]}" | sed 's/,/, /g'), the rest $(((busy - own) * 100 / wall)) % (wrk, mostly); the machine $((busy * 100 / all)) % busy"
  [ ${#WATCH_REDIS[@]} -eq 0 ] || WATCH_CMDS=$(( $(watch_cmds) - W_C0 ))
  # the server's lua batches meanwhile (none in a lock mode's run)
  [ -z "$W_B0" ] || WATCH_CPU="$WATCH_CPU$(lua_batch_counts "$WATCH_LUA" | awk -v b0="${W_B0% *}" -v p0="${W_B0#* }" '
      { b = $1 - b0; p = $2 - p0; if (b > 0) printf "; %d lua batches of %.1f purchases", b, p / b }')"
}
# lua_batch_counts PORT -> "BATCHES PURCHASES" of the server's /metrics so far
lua_batch_counts() {
  http GET "$1" /metrics | awk '$1 == "miaosha_lua_batches_total" { b = $2 } $1 == "miaosha_lua_batched_purchases_total" { p = $2 }
    END { print b + 0, p + 0 }'
}
# watch_note SOLD -> "; CPU: …; N Redis commands a sale" (empty when nothing is watched)
watch_note() {
  [ -n "$WATCH_CPU" ] || return 0
  printf '; %s' "$WATCH_CPU"
  [ -z "$WATCH_CMDS" ] || [ "${1:-0}" -le 0 ] || awk -v c="$WATCH_CMDS" -v s="$1" 'BEGIN { printf "; %.1f Redis commands a sale", c / s }'
}

# wrk_run URL [CONNECTIONS [SCRIPT]] -> sets WRK_RPS WRK_REQ WRK_SECS WRK_NON2XX WRK_ERRS WRK_P50_US
# (SCRIPT: a wrk Lua script that makes the requests)
wrk_run() {
  local out c=${2:-64} script=()
  [ -z "${3:-}" ] || script=(-s "$3")
  watch_begin
  out=$(timeout $((DUR + 30)) wrk -t"$((c < WRK_THREADS ? c : WRK_THREADS))" -c"$c" -d"${DUR}s" --latency "${script[@]}" "$1" 2>&1)
  watch_end
  # "     50%  312.00us" in the latency distribution, in microseconds
  WRK_P50_US=$(printf '%s\n' "$out" | awk '$1 == "50%" { v = $2; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v)
    print (u == "us") ? v : (u == "ms") ? v * 1000 : (u == "s") ? v * 1000000 : v; exit }')
  WRK_RPS=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ {print $2}')
  WRK_REQ=$(printf '%s\n' "$out" | awk '/ requests in / {print $1}')
  WRK_SECS=$(printf '%s\n' "$out" | awk '/ requests in / {sub(/s,$/, "", $4); print $4}')
  WRK_NON2XX=$(printf '%s\n' "$out" | awk '/Non-2xx/ {print $NF}')
  WRK_ERRS=$(printf '%s\n' "$out" | awk '/Socket errors/ {print}')
  WRK_NON2XX=${WRK_NON2XX:-0}
  if [ -z "$WRK_RPS" ]; then log "bench: wrk failed: $out"; WRK_RPS=0; WRK_SECS=$DUR; fi
  case "$WRK_SECS" in *ms) WRK_SECS=$(awk -v v="${WRK_SECS%ms}" 'BEGIN{print v/1000}') ;; *m) WRK_SECS=$DUR ;; esac
}

# load_run PORT PATH [CONC] [SECONDS] -> sets LOAD_RPS (miaosha-load bench)
load_run() {
  local out
  out=$(timeout $((${4:-$DUR} + 30)) "$LOAD" bench --target "http://127.0.0.1:$1" --path "$2" \
        --concurrency "${3:-64}" --duration "${4:-$DUR}" --json 2>&1)
  LOAD_RPS=$(printf '%s\n' "$out" | sed -n 's/.*"requests_per_s":\([0-9.]*\).*/\1/p')
  LOAD_ERRS=$(printf '%s\n' "$out" | sed -n 's/.*"errors":\([0-9]*\).*/\1/p')
  LOAD_NON2XX=$(printf '%s\n' "$out" | sed -n 's/.*"non_2xx":\([0-9]*\).*/\1/p')
  [ -n "$LOAD_RPS" ] || { log "bench: miaosha-load bench failed: $out"; LOAD_RPS=0; }
}

# purchase_wrk PORT MODE [QUERY [CONNECTIONS]] -> sets BUY_RPS (successful
# purchases/s from the audit); QUERY is appended ("&pipeline=0")
BENCH_SKU=bench
BENCH_BUCKETS="" # set: the reset splits the stock into that many stock buckets
purchase_wrk() {
  local port=$1 mode=$2 r sold
  r=$(http PUT "$port" "/stock/$BENCH_SKU?stock=1000000000${BENCH_BUCKETS:+&buckets=$BENCH_BUCKETS}")
  case "$r" in 200*) ;; *) log "bench: stock reset failed on port $port: $r"; BUY_RPS=0; return ;; esac
  wrk_run "http://127.0.0.1:$port/miaosha/$mode?sku=$BENCH_SKU&wait_ms=$WAIT_MS${3:-}" "${4:-64}"
  r=$(http GET "$port" "/stock/$BENCH_SKU")
  # the SKU's sold, the first one (a stock in buckets lists each bucket's after it)
  sold=$(printf '%s\n' "$r" | grep -o '"sold":[0-9]*' | head -1 | cut -d: -f2)
  BUY_SOLD=${sold:-0}
  BUY_RPS=$(awk -v s="${sold:-0}" -v t="$WRK_SECS" 'BEGIN{printf "%.0f", (t > 0) ? s / t : 0}')
  BUY_NOTE="sold ${sold:-?} of $WRK_REQ answered, non-2xx $WRK_NON2XX${WRK_ERRS:+, $WRK_ERRS}$(watch_note "${sold:-0}")"
}

# buys_ab PORT CONNECTIONS LABEL_A MODE_A QUERY_A LABEL_B MODE_B QUERY_B ->
# sets AB_A and AB_B: the medians of ROUNDS alternating purchase_wrk runs, A
# then B in each round (so drift hits both alike), each run echoed as
# "  round R: LABEL RPS/s (note)"
buys_ab() {
  local port=$1 conns=$2 r a=() b=()
  for ((r = 1; r <= ROUNDS; r++)); do
    purchase_wrk "$port" "$4" "$5" "$conns"; a+=("$BUY_RPS"); echo "  round $r: $3 $BUY_RPS/s ($BUY_NOTE)"
    purchase_wrk "$port" "$7" "$8" "$conns"; b+=("$BUY_RPS"); echo "  round $r: $6 $BUY_RPS/s ($BUY_NOTE)"
  done
  AB_A=$(median "${a[@]}") AB_B=$(median "${b[@]}")
}

# cs_run THREADS [pipeline|plain [MODE]] -> sets CS_RPS and CS_P50 (µs) (the section as the
# service's default, purchase.pipeline=true, unless told; MODE token unless
# told, lua = the service's purchase script)
cs_run() {
  local out
  out=$(timeout $((DUR + 30)) "$BUILD/bench/cs_bench" "$REDIS_PORT" "$1" "$DUR" "$WAIT_MS" "${3:-token}" "${2:-pipeline}" 2>&1)
  CS_RPS=$(printf '%s\n' "$out" | sed -n 's/.*sections_per_s=\([0-9.]*\).*/\1/p')
  CS_P50=$(printf '%s\n' "$out" | sed -n 's/.*p50_us=\([0-9]*\).*/\1/p')
  CS_NOTE=$(printf '%s\n' "$out" | sed -n 's/.*\(fairness=.*\)/\1/p')
  [ -n "$CS_RPS" ] || { log "bench: cs_bench failed: $out"; CS_RPS=0; }
}

# rcli ARGS...: redis-cli against the bench's Redis (raw replies: not a tty)
rcli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

# redis_cpu_us -> the bench Redis's CPU time so far (user + system), in µs
redis_cpu_us() { echo $(( $(watch_ticks "$(cat "$REDIS_DIR/redis.pid")") * 1000000 / CLK_TCK )); }

# evalsha_stats -> "CALLS USEC" of EVALSHA so far (INFO commandstats)
evalsha_stats() {
  rcli INFO commandstats | tr -d '\r' |
    awk -F'[:=,]' '$1 == "cmdstat_evalsha" { c = $3; u = $5 } END { print c + 0, u + 0 }'
}

# lua_ceiling -> CEIL_RPS CEIL_USEC CEIL_CPU CEIL_OK CEIL_NOTE: what Redis
# alone does with the purchase script: redis-benchmark, pipelined, sending
# EVALSHA LUA_SHA with the keys and arguments the server sends for
# /miaosha/lua?sku=BENCH_SKU (no user, no Idempotency-Key; LUA_REC the
# record head, LUA_LIMIT purchase.limit_per_user). The stock is reset high
# (PUT /stock, which also empties the order list), a short probe sizes the
# run to about DUR seconds (at most CEIL_MAX_N calls, so the order list
# stays a few hundred MB), and afterwards every EVALSHA Redis ran must have
# sold (sold grew by the calls INFO commandstats counted) with stock left:
# else CEIL_OK=0. CEIL_USEC is EVALSHA's usec_per_call over the run,
# CEIL_CPU Redis's CPU µs per call.
CEIL_CLIENTS=16
CEIL_PIPELINE=16
CEIL_MAX_N=2000000
ceil_bench() { # ceil_bench N -> redis-benchmark's requests/s
  timeout $((DUR * 3 + 30)) redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c "$CEIL_CLIENTS" -P "$CEIL_PIPELINE" -n "$1" -q \
    EVALSHA "$LUA_SHA" 4 "miaosha:{$BENCH_SKU}:stock" "miaosha:{$BENCH_SKU}:sold" "miaosha:{$BENCH_SKU}:orders" \
    "miaosha:{$BENCH_SKU}:buyers" "$LUA_REC" "" "${LUA_LIMIT:-0}" 2>&1 |
    tr '\r' '\n' | sed -n 's/.* \([0-9.]*\) requests per second.*/\1/p' | tail -1
}
lua_ceiling() {
  local r probe n s0 s1 c0 c1 sold0 sold1 stock1 calls sold
  CEIL_RPS=0 CEIL_USEC=0 CEIL_CPU=0 CEIL_OK=0
  r=$(http PUT "$SVC_PORT" "/stock/$BENCH_SKU?stock=1000000000")
  case "$r" in 200*) ;; *) CEIL_NOTE="stock reset failed: $r"; return ;; esac
  probe=$(ceil_bench 20000)
  n=$(awk -v p="${probe:-0}" -v d="$DUR" -v m="$CEIL_MAX_N" 'BEGIN{ n = int(p * d); if (n < 20000) n = 20000; if (n > m) n = m; print n }')
  # redis-benchmark stops counting at N replies with up to clients x
  # pipeline calls still queued in Redis: let those run before each reading.
  sleep 0.3
  sold0=$(http GET "$SVC_PORT" "/stock/$BENCH_SKU" | sed -n 's/.*"sold":\([0-9]*\).*/\1/p')
  s0=$(evalsha_stats) c0=$(redis_cpu_us)
  CEIL_RPS=$(ceil_bench "$n"); CEIL_RPS=${CEIL_RPS:-0}
  sleep 0.3
  c1=$(redis_cpu_us) s1=$(evalsha_stats)
  r=$(http GET "$SVC_PORT" "/stock/$BENCH_SKU")
  sold1=$(printf '%s\n' "$r" | sed -n 's/.*"sold":\([0-9]*\).*/\1/p')
  stock1=$(printf '%s\n' "$r" | sed -n 's/.*"stock":\([0-9-]*\).*/\1/p')
  sold=$((${sold1:-0} - ${sold0:-0}))
  read -r calls CEIL_USEC CEIL_CPU < <(awk -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" 'BEGIN{
    split(s0, a, " "); split(s1, b, " "); calls = b[1] - a[1]
    if (calls > 0) printf "%d %.2f %.1f\n", calls, (b[2] - a[2]) / calls, (c1 - c0) / calls
    else print 0, 0, 0 }')
  CEIL_NOTE="$calls calls ($n counted), sold $sold, stock left ${stock1:-?}; EVALSHA ${CEIL_USEC} us a call, Redis CPU ${CEIL_CPU} us a purchase"
  if [ "$calls" -ge "$n" ] && [ "$sold" = "$calls" ] && [ "${stock1:-0}" -gt 0 ] && [ "$CEIL_RPS" != 0 ]; then
    CEIL_OK=1
  else
    CEIL_NOTE="$CEIL_NOTE  <- not every call sold: round excluded"
  fi
}

# responses_total PORT -> sum of miaosha_http_responses_total over codes
responses_total() {
  http GET "$1" /metrics | awk '/^miaosha_http_responses_total/ {s += $NF} END {printf "%.0f", s}'
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
fmt() { awk -v v="$1" 'BEGIN{ printf "%.0f", v }'; }

# Summary rows: part | figure | subject | reference | ratio | target | verdict
SUMMARY=()
row() { SUMMARY+=("$1|$2|$3|$4|$5|$6|$7"); }
# judge VALUE OP LIMIT -> ok / MISSED
# JUDGE_NOTE: added to each verdict (the buckets and cluster parts' under
# --set: settings that are not the defaults)
JUDGE_NOTE=""
judge() { awk -v v="$1" -v l="$3" -v op="$2" -v w="$JUDGE_NOTE" 'BEGIN{
  if (v == "n/a") { print "MISSED" w; exit }
  ok = (op == ">=") ? (v + 0 >= l + 0) : (v + 0 <= l + 0); print (ok ? "ok" : "MISSED") w }'; }
target_row() { # part figure subject reference OP LIMIT [ratio]
  local r=${7:-$(ratio "$3" "$4")}
  row "$1" "$2" "$(fmt "$3")" "$(fmt "$4")" "$r" "$5 $6" "$(judge "$r" "$5" "$6")"
}

# cpu_target_row MIN_CPUS part figure subject reference OP LIMIT [ratio]:
# target_row for a target that holds only where the processes measured
# (servers, Redis, lock masters, load generator) have CPUs of their own:
# below MIN_CPUS (nproc) the figure and ratio are shown and the verdict is
# n/a with the reason, since there the ratio measures how the CPUs are
# shared, not the code (bench/README.md, "Verdicts by CPU count"). Every
# such target calls this, with its minimum.
NCPU=$(nproc)
# Where there are CPUs to spare (8 or more), the load generator and the
# servers that the CPU-counting targets measure (the buckets and cluster
# parts) get more threads: wrk 4 instead of 2; those miaosha-servers half
# the CPUs as server.io_threads instead of the default 2, and
# 64 workers instead of 16 (or --connections' count, when more), one per
# connection (a purchase holds its
# worker for its round trips), so that neither the load generator nor the
# service's thread counts are the ceiling the ratio measures. Reference and
# subject always get the same. Below 8 CPUs: as before.
WRK_THREADS=$((NCPU >= 8 ? 4 : 2))
WIDE_IO=$((NCPU >= 8 ? NCPU / 2 : 2))
WIDE=() # the flags of those servers
[ "$WIDE_IO" -gt 2 ] && WIDE=(--set "server.io_threads=$WIDE_IO" --set "server.workers=$((CONNS > 64 ? CONNS : 64))")
WIDE_PORT=""
# wide_server -> WIDE_PORT: the buckets and cluster parts' reference server
# (the default one where WIDE is empty)
wide_server() {
  [ -z "$WIDE_PORT" ] || return 0
  if [ ${#WIDE[@]} -eq 0 ] && [ ${#SRV_SET[@]} -eq 0 ]; then
    [ -n "$SVC_PORT" ] || { start_server default || return 1; SVC_PORT=$SERVER_PORT; }
    WIDE_PORT=$SVC_PORT
  else
    start_server wide "${WIDE[@]}" "${SRV_SET[@]}" || return 1
    WIDE_PORT=$SERVER_PORT
  fi
}
cpu_target_row() {
  local min=$1; shift
  local r=${7:-$(ratio "$3" "$4")} v
  if [ "$NCPU" -ge "$min" ]; then v=$(judge "$r" "$5" "$6"); else v="n/a (needs ≥ $min CPUs; this machine has $NCPU)"; fi
  row "$1" "$2" "$(fmt "$3")" "$(fmt "$4")" "$r" "$5 $6 on $min+ CPUs" "$v"
}

# conn_target_row CONNS_WANTED MIN_CPUS PART FIGURE A B OP TARGET —
# cpu_target_row for a target set at a number of connections ("64":
# exactly, "64+": at least): a run with another --connections shows the
# figures and the ratio without a verdict.
conn_target_row() {
  local want=$1 n=${1%+}
  shift
  if [ "$CONNS" = "$n" ] || { [ "$want" != "$n" ] && [ "$CONNS" -ge "$n" ]; }; then
    cpu_target_row "$@"
    return
  fi
  row "$2" "$3" "$(fmt "$4")" "$(fmt "$5")" "$(ratio "$4" "$5")" "$6 $7 on $1+ CPUs, $want connections" \
    "n/a (the target is at $want connections; this run used $CONNS)"
}

# scaleout: scripts/scaleout.sh (redis with AOF + 3 instances + nginx) with a
# copy of config/nginx.conf.template that adds one static file location, so
# the static reference is served by the balancer's own nginx process.
scaleout_part() {
  local tpl=$WORK/lb.conf.template cdir=$WORK/scaleout
  mkdir -p "$WORK/lbstatic"
  printf '{"ok":true,"redis":"up","instance":"app1"}' >"$WORK/lbstatic/static"
  chmod -R a+rX "$WORK/lbstatic"
  awk -v root="$WORK/lbstatic" '{ l[NR] = $0; if ($0 == "}") last = NR }
    END { for (i = 1; i <= NR; i++) {
            if (i == last) printf "\n    # added by bench/run.sh: the static-file reference\n    location = /static { root %s; }\n", root
            print l[i] } }' "$ROOT/config/nginx.conf.template" >"$tpl"
  SCALEOUT_STARTED=1
  if ! SCALEOUT_SERVER=$SRV SCALEOUT_NGINX=$NGINX SCALEOUT_NGINX_TEMPLATE=$tpl \
       timeout 120 bash "$ROOT/scripts/scaleout.sh" start "$cdir" >"$WORK/scaleout.log" 2>&1; then
    cat "$WORK/scaleout.log" >&2
    echo "scaleout: scripts/scaleout.sh start failed, skipped"
    row scaleout "nginx + 3 instances vs 1 instance" - - - - "MISSED (scaleout.sh start failed)"
    return 0
  fi
  # shellcheck disable=SC1091
  . "$cdir/scaleout.env"
  local np=$SCALEOUT_NGINX_PORT ap=$SCALEOUT_APP1_PORT
  echo "scale-out topology (scripts/scaleout.sh): nginx 127.0.0.1:$np pid $SCALEOUT_NGINX_PID; instances $SCALEOUT_APP_URLS;"
  echo "  redis 127.0.0.1:$SCALEOUT_REDIS_PORT (AOF, appendfsync always); direct = instance 1 ($SCALEOUT_APP1_URL), same Redis"
  case "$(http GET "$np" /static)" in 200*) ;; *) echo "scaleout: nginx static location not served"; ;; esac
  local mode r
  for mode in token reentrant; do
    echo "/miaosha/$mode?wait_ms=$WAIT_MS successful purchases/s (wrk -t2 -c64 -d${DUR}s), alternating: direct, nginx"
    local d=() n=()
    for ((r = 1; r <= ROUNDS; r++)); do
      purchase_wrk "$ap" "$mode"; d+=("$BUY_RPS"); echo "  round $r: 1 instance direct  $BUY_RPS/s ($BUY_NOTE)"
      purchase_wrk "$np" "$mode"; n+=("$BUY_RPS"); echo "  round $r: nginx + 3         $BUY_RPS/s ($BUY_NOTE)"
    done
    info_row scaleout "$mode buys/s: nginx + 3 instances vs 1 direct" "$(median "${n[@]}")" "$(median "${d[@]}")"
  done
  echo "GET /healthz through nginx vs nginx's own static file (same nginx), alternating; also nginx 'return 200' (/lb-healthz)"
  local hs=() hn=() hr=()
  for ((r = 1; r <= ROUNDS; r++)); do
    wrk_run "http://127.0.0.1:$np/static"; hs+=("$WRK_RPS")
    wrk_run "http://127.0.0.1:$np/healthz"; hn+=("$WRK_RPS"); local hbad="$WRK_NON2XX${WRK_ERRS:+, $WRK_ERRS}"
    wrk_run "http://127.0.0.1:$np/lb-healthz"; hr+=("$WRK_RPS")
    echo "  round $r: nginx static ${hs[-1]} req/s, /healthz via nginx ${hn[-1]} req/s (non-2xx $hbad), nginx return 200 ${hr[-1]} req/s"
  done
  info_row scaleout "GET /healthz via nginx vs nginx static file" "$(median "${hn[@]}")" "$(median "${hs[@]}")"
  info_row scaleout "nginx return 200 vs nginx static file" "$(median "${hr[@]}")" "$(median "${hs[@]}")"
  bash "$ROOT/scripts/scaleout.sh" stop "$cdir" >/dev/null 2>&1
  SCALEOUT_STARTED=0
}

# info_row part figure subject reference: a measured ratio with no target
info_row() { row "$1" "$2" "$(fmt "$3")" "$(fmt "$4")" "$(ratio "$3" "$4")" - "measured (no target)"; }

# ------------------------------------------------------------------ redis --
section "redis"
bash "$ROOT/tests/redis-fixture.sh" start "$REDIS_DIR" ${RIO_CONF[@]+"${RIO_CONF[@]}"} || { log "bench: cannot start redis-server"; exit 1; }
REDIS_PORT=$(cat "$REDIS_DIR/port")
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# the settings away from their defaults, named in the header and summary
SETTINGS=""
[ "$CONNS" = 64 ] || SETTINGS+="; --connections $CONNS"
[ "$RIO" = 1 ] || SETTINGS+="; --redis-io-threads $RIO"
[ ${#SRV_SET[@]} -eq 0 ] || SETTINGS+="; the servers with ${SRV_SET[*]}"
echo "machine: $NCPU CPUs, load average $LOAD_START; each measurement ${DUR}s, $ROUNDS alternating rounds, medians$SETTINGS"

# --------------------------------------------------------------- lockcore --
if want lockcore; then
  LC_SECS=$(awk -v d="$DUR" 'BEGIN{ s = d / 5; if (s < 1) s = 1; print s }')
  section "lockcore: lc_bench $REDIS_PORT $LC_SECS"
  timeout 900 "$BUILD/bench/lc_bench" "$REDIS_PORT" "$LC_SECS" 2>&1 | tee "$WORK/lc_bench.out"
  [ "${PIPESTATUS[0]}" = 0 ] || log "bench: lc_bench failed"
  out=$(cat "$WORK/lc_bench.out")
  # per-mode uncontended ratios
  while read -r m cyc raw rt _; do
    row lockcore "uncontended $m acquire+release/s vs raw hiredis loop" "$(fmt "$cyc")" "$(fmt "$raw")" "$rt" ">= 0.9" "$(judge "$rt" ">=" 0.9)"
  done < <(printf '%s\n' "$out" | awk '$1 ~ /^(setnx|token|reentrant|fenced)$/ && $5 == ">=" {print $1, $2, $3, $4}')
  # contended: reentrant vs token, 8 and 32 threads
  printf '%s\n' "$out" | awk '
    /^contended/ && match($0, /[0-9]+ threads/) { th = substr($0, RSTART, RLENGTH); sub(/ threads/, "", th) }
    /medians: token/ { tok = $3; sub(/,/, "", tok); re = $5; ts = $(NF - 4); rs = $(NF - 1) }
    /reentrant\/token =/ && match($0, /worst [0-9.]+/) { print th, re, tok, substr($0, RSTART + 6, RLENGTH - 6), rs, ts }' >"$WORK/lc_contended"
  while read -r th re tok fair rs ts; do
    target_row lockcore "contended $th threads: reentrant vs token sections/s (medians of 3)" "$re" "$tok" ">=" 0.8
    row lockcore "contended $th threads: reentrant fairness min/max (worst of 3)" "-" "-" "$fair" ">= 0.5" "$(judge "$fair" ">=" 0.5)"
    row lockcore "contended $th threads: Redis script us per section, reentrant vs token" "$rs" "$ts" \
      "$(ratio "$rs" "$ts")" - "measured (no target)"
  done <"$WORK/lc_contended"
  [ -s "$WORK/lc_contended" ] || row lockcore "lc_bench" - - - - "MISSED (no output)"
  # pipelined section: reentrant vs token with fairness, 8 and 32 threads
  printf '%s\n' "$out" | awk '
    /^pipelined critical sections/ && match($0, /, [0-9]+ threads/) { th = substr($0, RSTART + 2, RLENGTH - 2); sub(/ threads/, "", th) }
    /pipelined: token/ { tok = $3; sub(/,/, "", tok); re = $5 }
    /pipelined: reentrant vs token/ && match($0, /worst [0-9.]+/) { print th, re, tok, substr($0, RSTART + 6, RLENGTH - 6) }' >"$WORK/lc_piped"
  while read -r th re tok fair; do
    target_row lockcore "pipelined section, $th threads: reentrant vs token sections/s" "$re" "$tok" ">=" 0.8
    row lockcore "pipelined section, $th threads: reentrant fairness (worst of 3)" "-" "-" "$fair" ">= 0.5" "$(judge "$fair" ">=" 0.5)"
  done <"$WORK/lc_piped"

  # redlock on 5 independent lock masters (private redis-servers on loopback,
  # stopped by PID with the rest) against token on the one Redis: lc_bench
  # alternates them in one run, 1 thread (target) and 8 (shown).
  nodes="" rl_ok=1
  for i in 1 2 3 4 5; do
    if ! proc_start_redis redis-server "$WORK/lock-master-$i"; then
      log "bench: lock master $i did not start"; rl_ok=0; break
    fi
    PIDS+=("$PROC_REDIS_PID")
    nodes="$nodes${nodes:+,}127.0.0.1:$PROC_REDIS_PORT"
  done
  if [ "$rl_ok" = 1 ]; then
    echo "redlock nodes: $nodes"
    timeout 300 "$BUILD/bench/lc_bench" "$REDIS_PORT" "$LC_SECS" redlock "$nodes" 2>&1 | tee "$WORK/lc_redlock.out"
    while read -r th rl tok rt _; do
      if [ "$th" = 1 ]; then
        cpu_target_row 8 lockcore "redlock (5 masters) vs token (1 node) cycles/s, 1 thread" "$rl" "$tok" ">=" 0.5 "$rt"
      else
        info_row lockcore "redlock (5 masters) vs token (1 node) cycles/s, $th threads" "$rl" "$tok"
      fi
    done < <(awk '$1 ~ /^[0-9]+$/ && NF >= 5 {print $1, $2, $3, $4}' "$WORK/lc_redlock.out")
    grep -qE '^ +1 ' "$WORK/lc_redlock.out" || row lockcore "redlock vs token" - - - ">= 0.5 on 8+ CPUs" "MISSED (no output)"
  else
    row lockcore "redlock (5 masters) vs token cycles/s, 1 thread" - - - ">= 0.5 on 8+ CPUs" "MISSED (lock masters did not start)"
  fi
fi

# ------------------------------------------------------------------ peers --
# Token acquire+release on one key from 8 clients, on the same Redis:
# lockcore (lc_bench ... peer) against widely used lock libraries, each with
# its library's defaults (bench/README.md, "The peers"), alternating rounds.
if want peers; then
  PEER_SECS=$(awk -v d="$DUR" 'BEGIN{ s = d / 2; if (s < 1) s = 1; print s }')
  section "peers: token acquire+release, 8 clients, one key, ${PEER_SECS}s per run, alternating"
  PY=""
  for p in /usr/bin/python3 python3; do "$p" -c 'import redis' 2>/dev/null && { PY=$p; break; }; done
  peer_names=(lockcore redis-py node-redlock redis-semaphore)
  declare -A peer_why=() peer_vals=()
  [ -n "$PY" ] || peer_why[redis-py]="python3 redis package not installed: python3-redis"
  if [ -n "$PEERS_NODE" ]; then peer_why[node-redlock]=$PEERS_NODE; peer_why[redis-semaphore]=$PEERS_NODE; fi
  peer_run() { # peer_run NAME: its one "peer ..." line
    case "$1" in
      lockcore) timeout 120 "$BUILD/bench/lc_bench" "$REDIS_PORT" "$PEER_SECS" peer ;;
      redis-py) timeout 120 "$PY" "$ROOT/bench/redis_py_lock.py" "$REDIS_PORT" "$PEER_SECS" 8 ;;
      node-redlock) NODE_PATH=$PEERS_DIR/node_modules timeout 120 node "$ROOT/bench/peers/redlock.js" "$REDIS_PORT" "$PEER_SECS" 8 ;;
      redis-semaphore) NODE_PATH=$PEERS_DIR/node_modules timeout 120 node "$ROOT/bench/peers/semaphore.js" "$REDIS_PORT" "$PEER_SECS" 8 ;;
    esac >"$WORK/peer.out" 2>&1
    grep '^peer' "$WORK/peer.out" || { tail -3 "$WORK/peer.out" | sed 's/^/    /' >&2; return 1; }
  }
  for ((r = 1; r <= ROUNDS; r++)); do
    for n in "${peer_names[@]}"; do
      [ -z "${peer_why[$n]:-}" ] || continue
      if o=$(peer_run "$n"); then
        peer_vals[$n]="${peer_vals[$n]:-} $(printf '%s\n' "$o" | sed -n 's/.*cycles_per_s=\([0-9.]*\).*/\1/p')"
        echo "  round $r: $o"
      else
        echo "  round $r: $n failed (output above)"
      fi
    done
  done
  for n in "${peer_names[@]}"; do [ -z "${peer_why[$n]:-}" ] || echo "$n: not run, ${peer_why[$n]}"; done
  # shellcheck disable=SC2086 # the values are whitespace-separated numbers
  lc=$(median ${peer_vals[lockcore]:-})
  best="" best_rate=0
  for n in "${peer_names[@]:1}"; do
    if [ -n "${peer_why[$n]:-}" ]; then
      row peers "token acquire+release/s, 8 clients: lockcore vs $n" - - - - "n/a (${peer_why[$n]})"
    elif [ -z "${peer_vals[$n]:-}" ]; then
      row peers "token acquire+release/s, 8 clients: lockcore vs $n" - - - - "MISSED (every run failed)"
    else
      # shellcheck disable=SC2086
      m=$(median ${peer_vals[$n]})
      info_row peers "token acquire+release/s, 8 clients: lockcore vs $n" "$lc" "$m"
      if awk -v a="$m" -v b="$best_rate" 'BEGIN{ exit !(a > b) }'; then best=$n best_rate=$m; fi
    fi
  done
  if [ -z "${peer_vals[lockcore]:-}" ]; then
    row peers "token acquire+release/s, 8 clients: lockcore vs the best peer" - - - ">= 1.5" "MISSED (lc_bench peer failed)"
  elif [ -z "$best" ]; then
    row peers "token acquire+release/s, 8 clients: lockcore vs the best peer" "$(fmt "$lc")" - - ">= 1.5" "n/a (no peer could run)"
  else
    target_row peers "token acquire+release/s, 8 clients: lockcore vs the best peer ($best)" "$lc" "$best_rate" ">=" 1.5
  fi
fi

# ---------------------------------------------------------------- service --
SVC_PORT=""
if want service || want load; then
  section "miaosha-server instances"
  start_server default || exit 1; SVC_PORT=$SERVER_PORT
fi

if want service; then
  section "service"
  # Peak RSS, on a fresh default instance: idle, then 1000 open keep-alive
  # connections (miaosha-load bench keeps each one busy with GET /healthz).
  start_server rss || exit 1
  RSS_PORT=$SERVER_PORT RSS_PID=$SERVER_PID
  sleep 2
  idle_hwm=$(awk '/^VmHWM/ {print $2}' /proc/"$RSS_PID"/status)
  "$LOAD" bench --target "http://127.0.0.1:$RSS_PORT" --path /healthz --concurrency 1000 --duration 4 --json \
    >"$WORK/rss-load.json" 2>&1 &
  lpid=$!; PIDS+=("$lpid")
  sleep 2.5
  conns=$(ls /proc/"$RSS_PID"/fd 2>/dev/null | wc -l)
  busy_rss=$(awk '/^VmRSS/ {print $2}' /proc/"$RSS_PID"/status)
  timeout 30 tail --pid="$lpid" -f /dev/null; wait "$lpid" 2>/dev/null; forget_pid "$lpid"
  busy_hwm=$(awk '/^VmHWM/ {print $2}' /proc/"$RSS_PID"/status)
  echo "RSS idle: VmHWM ${idle_hwm} kB; with 1000 connections: VmRSS ${busy_rss} kB (open fds ${conns}), VmHWM ${busy_hwm} kB"
  echo "  load: $(cat "$WORK/rss-load.json")"
  stop_pid "$RSS_PID"; forget_pid "$RSS_PID"
  row service "peak RSS idle (MiB)" "$(awk -v k="$idle_hwm" 'BEGIN{printf "%.1f", k/1024}')" - - "<= 16" \
    "$(judge "$(awk -v k="$idle_hwm" 'BEGIN{print k/1024}')" "<=" 16)"
  row service "peak RSS, 1000 open connections (MiB)" "$(awk -v k="$busy_hwm" 'BEGIN{printf "%.1f", k/1024}')" - - "<= 64" \
    "$(judge "$(awk -v k="$busy_hwm" 'BEGIN{print k/1024}')" "<=" 64)"

  # /healthz vs nginx serving a static file with the same body.
  http GET "$SVC_PORT" /healthz | cut -d' ' -f2- | tr -d '\n' >"$WORK/healthz.body"
  start_nginx "$WORK/healthz.body" || exit 1
  echo "GET /healthz (wrk -t2 -c64 -d${DUR}s), A/B alternating: nginx static, miaosha-server"
  hn=() hs=() bad=0
  for ((r = 1; r <= ROUNDS; r++)); do
    wrk_run "http://127.0.0.1:$NGINX_PORT/static"; n_rps=$WRK_RPS n_bad=$WRK_NON2XX${WRK_ERRS:+x}
    wrk_run "http://127.0.0.1:$SVC_PORT/healthz"; s_rps=$WRK_RPS s_bad=$WRK_NON2XX${WRK_ERRS:+x}
    note=""
    if [ "$n_bad" != 0 ] || [ "$s_bad" != 0 ]; then
      note="  <- non-2xx/errors: round excluded"; bad=$((bad + 1))
    else
      hn+=("$n_rps"); hs+=("$s_rps")
    fi
    echo "  round $r: nginx $n_rps req/s (non-2xx $n_bad), miaosha-server $s_rps req/s (non-2xx $WRK_NON2XX${WRK_ERRS:+, $WRK_ERRS})$note"
    # The server logs why /healthz turned 503 (the Redis probe, WARN level).
    [ "$s_bad" != 0 ] && grep -h "redis" "$WORK/server-default.log" | tail -5 | sed 's/^/    server: /'
  done
  if [ ${#hs[@]} -gt 0 ]; then
    target_row service "GET /healthz req/s vs nginx static file" "$(median "${hs[@]}")" "$(median "${hn[@]}")" ">=" 1.0
  else
    row service "GET /healthz req/s vs nginx static file" - - - ">= 1.0" "MISSED (every round had non-2xx/errors)"
  fi
  [ "$bad" -gt 0 ] && row service "  rounds excluded (non-2xx answers, e.g. /healthz 503)" "$bad" - - - "see rounds above"

  # /miaosha/token purchases/s vs the raw critical-section loop.
  start_server w8 --set server.workers=8 || exit 1; W8_PORT=$SERVER_PORT
  start_server w64 --set server.workers=64 || exit 1; W64_PORT=$SERVER_PORT
  DEF_WORKERS=$("$SRV" --print-config | sed -n 's/.*"workers": *\([0-9]*\).*/\1/p')
  echo "/miaosha/token?wait_ms=$WAIT_MS successful purchases/s (wrk -t2 -c64 -d${DUR}s; sold from the audit),"
  echo "vs cs_bench (the same critical section on lockcore, no HTTP; both pipelined, the default), alternating"
  c64=() sd=() s64=() c8=() s8=()
  for ((r = 1; r <= ROUNDS; r++)); do
    cs_run 64; c64+=("$CS_RPS"); echo "  round $r: cs_bench 64 threads    $CS_RPS/s ($CS_NOTE)"
    purchase_wrk "$SVC_PORT" token; sd+=("$BUY_RPS"); echo "  round $r: service defaults     $BUY_RPS/s ($BUY_NOTE)"
    purchase_wrk "$W64_PORT" token; s64+=("$BUY_RPS"); echo "  round $r: service workers=64   $BUY_RPS/s ($BUY_NOTE)"
    cs_run 8; c8+=("$CS_RPS"); echo "  round $r: cs_bench 8 threads     $CS_RPS/s ($CS_NOTE)"
    purchase_wrk "$W8_PORT" token; s8+=("$BUY_RPS"); echo "  round $r: service workers=8    $BUY_RPS/s ($BUY_NOTE)"
  done
  m_c64=$(median "${c64[@]}") m_sd=$(median "${sd[@]}") m_s64=$(median "${s64[@]}")
  m_c8=$(median "${c8[@]}") m_s8=$(median "${s8[@]}")
  target_row service "token buys/s, 64 connections: defaults (workers=${DEF_WORKERS:-?}) vs cs_bench 64 threads" "$m_sd" "$m_c64" ">=" 0.8
  info_row service "token buys/s: workers=64 vs cs_bench 64 threads" "$m_s64" "$m_c64"
  target_row service "token buys/s: workers=8 vs cs_bench 8 threads" "$m_s8" "$m_c8" ">=" 0.8
  info_row service "token buys/s: workers=8 vs workers=64" "$m_s8" "$m_s64"

  # /healthz with the live page (GET /) open vs not, on the default
  # instance. "Open" is a background loop making the page's requests once a
  # second (bench/live_poll.py: what service/web/live.js fetches per poll,
  # /stats, /metrics, the audit and the trace's header and 100-record tail
  # of the SKU the token runs above bought): no browser, whose own CPU on a
  # small machine would be measured instead of the server's.
  last_seq=$(http GET "$SVC_PORT" "/trace/$BENCH_SKU?since=999999999999" | sed -n 's/.*"last_seq":\([0-9]*\).*/\1/p')
  tail_from=$(( ${last_seq:-0} > 100 ? ${last_seq:-0} - 100 : 0 ))
  echo "GET /healthz (wrk -t2 -c64 -d${DUR}s), alternating: without, with the live page's polling (trace from seq $tail_from)"
  lw=() lo=()
  for ((r = 1; r <= ROUNDS; r++)); do
    wrk_run "http://127.0.0.1:$SVC_PORT/healthz"; lo+=("$WRK_RPS"); o_bad=$WRK_NON2XX
    proc_start "$WORK/live-poll.log" python3 "$ROOT/bench/live_poll.py" "$SVC_PORT" "$BENCH_SKU" "$tail_from"
    lp=$PROC_PID; PIDS+=("$lp"); sleep 0.5 # python started, first poll made
    wrk_run "http://127.0.0.1:$SVC_PORT/healthz"; lw+=("$WRK_RPS")
    stop_pid "$lp"; forget_pid "$lp"
    polls=$(grep -c ' /stats$' "$WORK/live-poll.log")
    echo "  round $r: without ${lo[-1]} req/s (non-2xx $o_bad); with the page ${lw[-1]} req/s (non-2xx $WRK_NON2XX; $polls polls, non-200 answers to them: $(grep -vc '^200 ' "$WORK/live-poll.log"))"
  done
  target_row service "GET /healthz req/s: live page open vs not" "$(median "${lw[@]}")" "$(median "${lo[@]}")" ">=" 0.98
fi

# fenced (token's lock plus the fenced read and write, two scripts instead
# of GET and MULTI) against token, on the same server, alternating. Part of
# the service part; `fenced` alone runs just this.
if want service || want fenced; then
  section "service: /miaosha/fenced vs /miaosha/token, 8 connections"
  [ -n "$SVC_PORT" ] || { start_server default || exit 1; SVC_PORT=$SERVER_PORT; }
  echo "successful purchases/s, 8 connections (wrk -c8 -d${DUR}s; sold from the audit), alternating: token, fenced"
  buys_ab "$SVC_PORT" 8 "token " token "" fenced fenced ""
  target_row service "buys/s, 8 connections: fenced vs token" "$AB_B" "$AB_A" ">=" 0.8
fi

# --------------------------------------------------------------- pipeline --
# The purchase's pipelined section (purchase.pipeline, ?pipeline=0|1) against
# the four-round-trip one, on the same server, alternating.
if want pipeline; then
  section "pipeline: /miaosha/{token,reentrant} with ?pipeline=1 vs ?pipeline=0"
  [ -n "$SVC_PORT" ] || { start_server default || exit 1; SVC_PORT=$SERVER_PORT; }
  for mode in token reentrant; do
    for c in 8 64; do
      echo "/miaosha/$mode?wait_ms=$WAIT_MS successful purchases/s, $c connections (wrk -c$c -d${DUR}s), alternating: off, on"
      buys_ab "$SVC_PORT" "$c" "pipeline off" "$mode" "&pipeline=0" "pipeline on " "$mode" "&pipeline=1"
      if [ "$c" = 64 ]; then
        cpu_target_row 8 pipeline "$mode buys/s, $c connections: pipeline on vs off" "$AB_B" "$AB_A" ">=" "$([ "$mode" = token ] && echo 1.6 || echo 1.5)"
      else
        info_row pipeline "$mode buys/s, $c connections: pipeline on vs off" "$AB_B" "$AB_A"
      fi
    done
  done
  echo "/miaosha/token, one buyer at a time (wrk -t1 -c1 -d${DUR}s), p50 latency, alternating: off, on"
  lon=() loff=()
  for ((r = 1; r <= ROUNDS; r++)); do
    purchase_wrk "$SVC_PORT" token "&pipeline=0" 1; loff+=("$WRK_P50_US"); echo "  round $r: pipeline off p50 ${WRK_P50_US}us ($BUY_RPS/s)"
    purchase_wrk "$SVC_PORT" token "&pipeline=1" 1; lon+=("$WRK_P50_US"); echo "  round $r: pipeline on  p50 ${WRK_P50_US}us ($BUY_RPS/s)"
  done
  # No target: the ratio is (2w + c + F) / (4w + c + F) for a round trip's
  # own cost w, the commands' work c and the HTTP request's F, so it nears
  # 0.5 only where a round trip costs far more than c + F (separate hosts;
  # bench/README.md, "What pipelining can save on this machine").
  info_row pipeline "token p50 latency (us), 1 connection: pipeline on vs off" "$(median "${lon[@]}")" "$(median "${loff[@]}")"

  # The same comparison with no HTTP at all: cs_bench runs the purchase's
  # section straight on the lock core, pipelined and plain. The service
  # only adds work around the section, which pulls both of its ratios
  # towards 1, so these are the best the targets above can see on this
  # machine: a target beyond them is beyond the round trip, not the service.
  [ -n "${DEF_WORKERS:-}" ] || DEF_WORKERS=$("$SRV" --print-config | sed -n 's/.*"workers": *\([0-9]*\).*/\1/p')
  for mode in token reentrant; do
    echo "no-HTTP reference: cs_bench $mode, ${DEF_WORKERS:-16} threads (the service's workers), alternating: plain, pipelined"
    a=() b=()
    for ((r = 1; r <= ROUNDS; r++)); do
      cs_run "${DEF_WORKERS:-16}" plain "$mode"; a+=("$CS_RPS"); echo "  round $r: plain     $CS_RPS/s ($CS_NOTE)"
      cs_run "${DEF_WORKERS:-16}" pipeline "$mode"; b+=("$CS_RPS"); echo "  round $r: pipelined $CS_RPS/s ($CS_NOTE)"
    done
    info_row pipeline "no HTTP: cs_bench $mode sections/s, ${DEF_WORKERS:-16} threads: pipelined vs plain" "$(median "${b[@]}")" "$(median "${a[@]}")"
  done
  echo "no-HTTP reference: cs_bench token, 1 thread, p50 of a purchase, alternating: plain, pipelined"
  a=() b=()
  for ((r = 1; r <= ROUNDS; r++)); do
    cs_run 1 plain token; a+=("$CS_P50"); echo "  round $r: plain     p50 ${CS_P50}us ($CS_RPS/s)"
    cs_run 1 pipeline token; b+=("$CS_P50"); echo "  round $r: pipelined p50 ${CS_P50}us ($CS_RPS/s)"
  done
  info_row pipeline "no HTTP: cs_bench token p50 latency (us), 1 thread: pipelined vs plain" "$(median "${b[@]}")" "$(median "${a[@]}")"
fi

# -------------------------------------------------------------------- lua --
# The best lock is no lock: the purchase as one atomic script (/miaosha/lua)
# against the token lock's, on the same server, alternating.
if want lua; then
  section "lua: /miaosha/lua vs /miaosha/token, vs cs_bench lua, vs Redis alone"
  [ -n "$SVC_PORT" ] || { start_server default || exit 1; SVC_PORT=$SERVER_PORT; }
  echo "successful purchases/s, 64 connections (wrk -c64 -d${DUR}s; sold from the audit), alternating: token, lua"
  buys_ab "$SVC_PORT" 64 token token "" "lua  " lua ""
  info_row lua "buys/s, 64 connections: lua (no lock) vs token" "$AB_B" "$AB_A"

  # Redis alone with the very script: is the tree's purchase.lua the one
  # the server runs? Its SHA1 is what the server's EVALSHA names; only the
  # server (and cs_bench, from the same build) has loaded a purchase script
  # into this Redis so far. Then Redis alone gets what the server sends:
  # the tree's script loaded (SCRIPT LOAD, its SHA), the server's settings
  # for the arguments, and an order record the server itself wrote for the
  # size.
  lua_file=$ROOT/service/scripts/purchase.lua
  case "$(rcli SCRIPT EXISTS "$(sha1sum "$lua_file" | cut -d' ' -f1)")" in
    1) LUA_SAME="the server runs this tree's purchase.lua" LUA_SAME_OK=1 ;;
    *) LUA_SAME="the server's script differs from this tree's purchase.lua (binaries from another tree?)" LUA_SAME_OK=0 ;;
  esac
  LUA_SHA=$(rcli -x SCRIPT LOAD <"$lua_file")
  LUA_LIMIT=$("$SRV" --print-config | sed -n 's/.*"limit_per_user": *\([0-9]*\).*/\1/p')
  last=$(rcli LINDEX "miaosha:{$BENCH_SKU}:orders" -1)
  case "$last" in
    *'"stock_before":'*'}') LUA_REC=${last%\"stock_before\":*}'"stock_before":' ;;
    *) LUA_REC='{"order_id":"00000000-0000-4000-8000-000000000000","sku":"bench","user":null,"mode":"lua","instance":"bench-default","received_ms":1700000000000,"ts_ms":1700000000000,"lock_wait_ms":0,"stock_before":' ;;
  esac
  echo "Redis alone: redis-benchmark -c $CEIL_CLIENTS -P $CEIL_PIPELINE EVALSHA $LUA_SHA 4 miaosha:{$BENCH_SKU}:{stock,sold,orders,buyers}" \
       "<record head, ${#LUA_REC} bytes> \"\" ${LUA_LIMIT:-0} ($LUA_SAME)"

  # The same script from server.workers threads with no HTTP (cs_bench
  # lua), through the service, and from redis-benchmark: Redis's ceiling.
  workers=$("$SRV" --print-config | sed -n 's/.*"workers": *\([0-9]*\).*/\1/p')
  echo "lua purchases/s, alternating: cs_bench lua (${workers:-16} threads, no HTTP), the service (wrk -c64), Redis alone;"
  echo "  Redis CPU per purchase (/proc/PID/stat of redis-server) through the service and alone"
  clua=() slua=() scpu=() ceil=() ccpu=() cusec=() ceil_bad=0
  for ((r = 1; r <= ROUNDS; r++)); do
    cs_run "${workers:-16}" pipeline lua; clua+=("$CS_RPS"); echo "  round $r: cs_bench lua  $CS_RPS/s ($CS_NOTE)"
    c0=$(redis_cpu_us)
    purchase_wrk "$SVC_PORT" lua; slua+=("$BUY_RPS")
    c1=$(redis_cpu_us)
    scpu+=("$(awk -v a="$c0" -v b="$c1" -v n="$BUY_SOLD" 'BEGIN{ printf "%.1f", (n > 0) ? (b - a) / n : 0 }')")
    echo "  round $r: service lua   $BUY_RPS/s ($BUY_NOTE; Redis CPU ${scpu[-1]} us a purchase)"
    lua_ceiling
    echo "  round $r: Redis alone   $CEIL_RPS/s ($CEIL_NOTE)"
    if [ "$CEIL_OK" = 1 ]; then ceil+=("$CEIL_RPS"); ccpu+=("$CEIL_CPU"); cusec+=("$CEIL_USEC"); else ceil_bad=$((ceil_bad + 1)); fi
  done
  cpu_target_row 8 lua "lua buys/s, 64 connections vs cs_bench lua, ${workers:-16} threads" "$(median "${slua[@]}")" "$(median "${clua[@]}")" ">=" 0.7
  if [ ${#ceil[@]} -gt 0 ]; then
    cpu_target_row 8 lua "lua buys/s, 64 connections vs Redis alone (redis-benchmark EVALSHA)" "$(median "${slua[@]}")" "$(median "${ceil[@]}")" ">=" 0.8
    row lua "  Redis alone: EVALSHA usec_per_call (INFO commandstats)" "$(median "${cusec[@]}")" - - - "measured (no target)"
    row lua "  Redis CPU us per purchase: through the service vs alone" "$(median "${scpu[@]}")" "$(median "${ccpu[@]}")" \
      "$(ratio "$(median "${scpu[@]}")" "$(median "${ccpu[@]}")")" - "measured (no target)"
  else
    row lua "lua buys/s, 64 connections vs Redis alone (redis-benchmark EVALSHA)" "$(fmt "$(median "${slua[@]}")")" - - ">= 0.8 on 8+ CPUs" "MISSED (no valid Redis-alone run: see rounds)"
  fi
  [ "$ceil_bad" -gt 0 ] && row lua "  Redis-alone rounds excluded (not every call sold)" "$ceil_bad" - - - "see rounds above"
  [ "$LUA_SAME_OK" = 1 ] || row lua "  Redis alone ran this tree's purchase.lua, the server another" - - - - "check the binaries"

  # Most buyers come after the sale: the local sold-out flag answers them
  # from memory. Stock 0, one purchase sets the flag, then wrk.
  r=$(http PUT "$SVC_PORT" "/stock/soldout?stock=0")
  http GET "$SVC_PORT" "/miaosha/token?sku=soldout" >/dev/null
  echo "sold-out answers (stock 0, the local flag set) vs GET /healthz, req/s (wrk -c64 -d${DUR}s), alternating"
  hz=() so=()
  for ((r = 1; r <= ROUNDS; r++)); do
    wrk_run "http://127.0.0.1:$SVC_PORT/healthz"; hz+=("$WRK_RPS"); echo "  round $r: /healthz  $WRK_RPS req/s (non-2xx $WRK_NON2XX)"
    wrk_run "http://127.0.0.1:$SVC_PORT/miaosha/token?sku=soldout"; so+=("$WRK_RPS"); echo "  round $r: sold out  $WRK_RPS req/s (409s $WRK_NON2XX)"
  done
  target_row lua "sold-out answers req/s (local flag) vs GET /healthz req/s" "$(median "${so[@]}")" "$(median "${hz[@]}")" ">=" 0.8
fi

# ---------------------------------------------------------------- buckets --
# A hot SKU's stock split into stock buckets (PUT /stock's buckets): one
# lock per bucket, so K holders at a time instead of one. token and
# reentrant with 64 connections (--connections), 8 buckets against 1, alternating on one
# server and one Redis; then the end of a sale, where buckets run out
# unevenly and buyers probe empty ones.
bucket_buys() { # bucket_buys PORT MODE K -> BUY_RPS (K 1: no buckets parameter)
  BENCH_BUCKETS=$([ "$3" -gt 1 ] && echo "$3")
  purchase_wrk "$1" "$2" "" "$CONNS"
  BENCH_BUCKETS=""
}
stats_probes() { # stats_probes PORT -> the /stats buckets.probes so far
  http GET "$1" /stats | sed -n 's/.*"buckets":{"probes":\([0-9]*\).*/\1/p'
}
if want buckets; then
  [ ${#SRV_SET[@]} -eq 0 ] || JUDGE_NOTE=" (with --set)"
  section "buckets: /miaosha/{token,reentrant}, stock in 8 buckets vs 1, $CONNS connections"
  wide_server || exit 1
  watch_server "$WIDE_PORT" "$REDIS_PORT"
  for mode in token reentrant; do
    echo "/miaosha/$mode?wait_ms=$WAIT_MS successful purchases/s, $CONNS connections (wrk -c$CONNS -d${DUR}s), alternating: 1 bucket, 8 buckets"
    a=() b=()
    for ((r = 1; r <= ROUNDS; r++)); do
      bucket_buys "$WIDE_PORT" "$mode" 1; a+=("$BUY_RPS"); echo "  round $r: 1 bucket  $BUY_RPS/s ($BUY_NOTE)"
      bucket_buys "$WIDE_PORT" "$mode" 8; b+=("$BUY_RPS"); echo "  round $r: 8 buckets $BUY_RPS/s ($BUY_NOTE)"
    done
    if [ "$mode" = token ]; then
      conn_target_row 64 2 buckets "token buys/s, $CONNS connections: 8 buckets vs 1" "$(median "${b[@]}")" "$(median "${a[@]}")" ">=" 1.5
      conn_target_row 64 8 buckets "token buys/s, $CONNS connections: 8 buckets vs 1 (many CPUs)" "$(median "${b[@]}")" "$(median "${a[@]}")" ">=" 3
    else
      info_row buckets "reentrant buys/s, $CONNS connections: 8 buckets vs 1" "$(median "${b[@]}")" "$(median "${a[@]}")"
    fi
  done

  # The end of a sale: 40000 units sold down to their last 5 % by one
  # burst (the buckets run out unevenly, as in a real sale), then the
  # last 2000 by a second, timed; the empty buckets its buyers probed
  # come from /stats. miaosha-load, 64 connections (--connections), token.
  echo "the last 5 % of a sale: 38000 of 40000 sold, then the last 2000 timed (miaosha-load run -c$CONNS, token), alternating: 1 bucket, 8 buckets"
  ea=() eb=() pb=()
  for ((r = 1; r <= ROUNDS; r++)); do
    for k in 1 8; do
      bk=(); [ "$k" -gt 1 ] && bk=(--buckets "$k")
      "$LOAD" run --mode token --sku bench-end --stock 40000 "${bk[@]}" --requests 38000 --concurrency "$CONNS" \
        --wait-ms "$WAIT_MS" --target "http://127.0.0.1:$WIDE_PORT" --json >"$WORK/end-fill.json" 2>&1
      p0=$(stats_probes "$WIDE_PORT")
      "$LOAD" run --mode token --sku bench-end --stock -1 --requests 2000 --concurrency "$CONNS" \
        --wait-ms "$WAIT_MS" --target "http://127.0.0.1:$WIDE_PORT" --json >"$WORK/end-last.json" 2>&1
      p1=$(stats_probes "$WIDE_PORT")
      rps=$(tr -d ' \t\r\n' <"$WORK/end-last.json" | grep -o '"throughput_rps":[0-9.]*' | cut -d: -f2)
      ok=$(tr -d ' \t\r\n' <"$WORK/end-last.json" | grep -o '"ok":[0-9]*' | head -1 | cut -d: -f2)
      probes=$(( ${p1:-0} - ${p0:-0} ))
      if [ "$k" = 1 ]; then ea+=("${rps:-0}"); else eb+=("${rps:-0}"); pb+=("$probes"); fi
      echo "  round $r: $k bucket(s): the last 2000 at ${rps%.*}/s (${ok:-?} sold; $probes empty buckets probed)"
    done
  done
  watch_none
  info_row buckets "last 5 % of a sale, token buys/s: 8 buckets vs 1" "$(median "${eb[@]}")" "$(median "${ea[@]}")"
  row buckets "  empty buckets probed while the last 2000 sold (8 buckets)" "$(median "${pb[@]}")" - - - "measured (no target)"

  # lua on a Redis Cluster of 3 masters, 3 buckets vs 1 (one bucket per
  # master, as PUT /stock places them there) needs the cluster: the cluster
  # part measures it.
  want cluster || row buckets "lua buys/s on a 3-master Redis Cluster: 3 buckets vs 1" - - - ">= 2.1 on 8+ CPUs" "in the cluster part: bash bench/run.sh buckets cluster"
  JUDGE_NOTE=""
fi

# ---------------------------------------------------------------- cluster --
# A Redis Cluster of 3 masters, no replicas (scripts/redis-cluster.sh)
# against the bench's one Redis, each behind a miaosha-server of the same
# build and settings. One SKU: its keys share the hash tag {sku}, so every
# purchase is one master's either way, and the ratio is what the router
# costs. 64 SKUs: their slots spread them over the 3 masters, so the
# cluster can do what three Redis threads do, where it has the CPUs.
CLUSTER_SKUS=64
# skus_setup PORT PREFIX N: PUT /stock of PREFIX0..PREFIX(N-1), stock 10^9
skus_setup() {
  local i r
  for ((i = 0; i < $3; i++)); do
    r=$(http PUT "$1" "/stock/$2$i?stock=1000000000")
    case "$r" in 200*) ;; *) log "bench: stock reset of $2$i failed on port $1: $r"; return 1 ;; esac
  done
}
# skus_sold PORT PREFIX N -> the sum of the N SKUs' sold (their audits)
skus_sold() {
  local i t=0 v
  for ((i = 0; i < $3; i++)); do
    v=$(http GET "$1" "/stock/$2$i" | grep -o '"sold":[0-9]*' | head -1 | cut -d: -f2)
    t=$((t + ${v:-0}))
  done
  echo "$t"
}
# skus_wrk PORT MODE PREFIX N -> BUY_RPS BUY_NOTE: the N stocks reset, then
# wrk -c64 (--connections) with each request buying the next of the N SKUs (the two threads
# start apart); purchases/s from the audits' sold
skus_wrk() {
  local port=$1 mode=$2 pre=$3 n=$4 sold
  skus_setup "$port" "$pre" "$n" || { BUY_RPS=0; BUY_NOTE="stock reset failed"; return; }
  BENCH_SKU_PATH="/miaosha/$mode?wait_ms=$WAIT_MS&sku=$pre" BENCH_SKU_N=$n \
    wrk_run "http://127.0.0.1:$port" "$CONNS" "$WORK/skus.lua"
  sold=$(skus_sold "$port" "$pre" "$n")
  BUY_RPS=$(awk -v s="$sold" -v t="$WRK_SECS" 'BEGIN{printf "%.0f", (t > 0) ? s / t : 0}')
  BUY_NOTE="sold $sold of $WRK_REQ answered, non-2xx $WRK_NON2XX${WRK_ERRS:+, $WRK_ERRS}$(watch_note "$sold")"
}
# skus_per_master PREFIX -> how many of the SKUs' stock keys each master of
# the cluster holds, as "N N N" (its masters from CLUSTER NODES)
skus_per_master() {
  local seed m
  seed=$(sed -n 's/^REDIS_CLUSTER_NODE1_PORT=//p' "$RCLUSTER_DIR/redis-cluster.env")
  redis-cli -p "$seed" CLUSTER NODES | tr -d '\r' |
    awk '$3 ~ /master/ && $3 !~ /fail/ && NF >= 9 { sub(/@.*/, "", $2); print $2 }' |
    while read -r m; do
      printf '%s ' "$(redis-cli -h "${m%:*}" -p "${m##*:}" --scan --pattern "miaosha:{$1*}:stock" | wc -l)"
    done
}
if want cluster; then
  [ ${#SRV_SET[@]} -eq 0 ] || JUDGE_NOTE=" (with --set)"
  section "cluster: a Redis Cluster of 3 masters (no replicas) vs one Redis; 1 SKU and $CLUSTER_SKUS SKUs"
  wide_server || exit 1
  # cluster-node-timeout 5000 ms, not the script's 1000: on a machine the
  # load starves, a master that misses a second of pings is failed over in
  # the middle of a measurement, which is not what this part measures.
  # No replicas: the reference is one Redis alone, and a master streaming
  # every write to a replica does more per command (measured: bench/README.md),
  # which would be charged to the router.
  if ! REDIS_CLUSTER_REPLICAS=0 REDIS_CLUSTER_NODE_TIMEOUT_MS=5000 REDIS_CLUSTER_IO_THREADS=$RIO timeout 120 bash "$ROOT/scripts/redis-cluster.sh" start "$RCLUSTER_DIR" \
       >"$WORK/redis-cluster.log" 2>&1; then
    cat "$WORK/redis-cluster.log" >&2
    echo "cluster: scripts/redis-cluster.sh start failed, skipped"
    row cluster "3-master Redis Cluster vs one Redis" - - - - "MISSED (redis-cluster.sh start failed)"
  elif ! start_server cluster "${WIDE[@]}" "${SRV_SET[@]}" --set "redis.cluster_nodes=$(sed -n 's/^REDIS_CLUSTER_NODES=//p' "$RCLUSTER_DIR/redis-cluster.env")"; then
    row cluster "3-master Redis Cluster vs one Redis" - - - - "MISSED (no miaosha-server on the cluster: see above)"
  else
    CL_PORT=$SERVER_PORT CL_PID=$SERVER_PID
    CL_MASTERS=() # the masters' ports (no replicas: every node is one)
    for ((i = 1; ; i++)); do
      p=$(sed -n "s/^REDIS_CLUSTER_NODE${i}_PORT=//p" "$RCLUSTER_DIR/redis-cluster.env")
      [ -n "$p" ] || break
      CL_MASTERS+=("$p")
    done
    watch_one() { watch_server "$WIDE_PORT" "$REDIS_PORT"; }
    watch_cl() { watch_server "$CL_PORT" "${CL_MASTERS[@]}"; }
    grep -E '^ *(master|seeds)' "$WORK/redis-cluster.log"
    cat >"$WORK/skus.lua" <<'EOF'
-- generated by bench/run.sh: each request buys the next of N SKUs
-- (BENCH_SKU_PATH .. 0 .. N-1), each wrk thread from a SKU of its own
local n = tonumber(os.getenv("BENCH_SKU_N"))
local path = os.getenv("BENCH_SKU_PATH")
local started = 0
function setup(thread)
  thread:set("first", started * 29)
  started = started + 1
end
function init(args)
  i = first or 0
end
function request()
  i = (i + 1) % n
  return wrk.format("GET", path .. i)
end
EOF
    for mode in token lua; do
      echo "/miaosha/$mode?wait_ms=$WAIT_MS, one SKU, successful purchases/s (wrk -c$CONNS -d${DUR}s), alternating: one Redis, the cluster"
      a=() b=()
      for ((r = 1; r <= ROUNDS; r++)); do
        watch_one; purchase_wrk "$WIDE_PORT" "$mode" "" "$CONNS"; a+=("$BUY_RPS"); echo "  round $r: one Redis $BUY_RPS/s ($BUY_NOTE)"
        watch_cl; purchase_wrk "$CL_PORT" "$mode" "" "$CONNS"; b+=("$BUY_RPS"); echo "  round $r: cluster   $BUY_RPS/s ($BUY_NOTE)"
      done
      target_row cluster "$mode buys/s, 1 SKU, $CONNS connections: 3-master cluster vs one Redis" "$(median "${b[@]}")" "$(median "${a[@]}")" ">=" 0.9
    done
    if want buckets; then
      # the stock buckets' cluster figure: one hot SKU in 3 buckets, one on
      # each master (PUT /stock places them so), against the same SKU in one
      echo "/miaosha/lua?wait_ms=$WAIT_MS on the cluster, one SKU, successful purchases/s (wrk -c$CONNS -d${DUR}s), alternating: 1 bucket, 3 buckets"
      a=() b=()
      for ((r = 1; r <= ROUNDS; r++)); do
        watch_cl; bucket_buys "$CL_PORT" lua 1; a+=("$BUY_RPS"); echo "  round $r: 1 bucket  $BUY_RPS/s ($BUY_NOTE)"
        bucket_buys "$CL_PORT" lua 3; b+=("$BUY_RPS"); echo "  round $r: 3 buckets $BUY_RPS/s ($BUY_NOTE)"
      done
      cpu_target_row 8 buckets "lua buys/s on a 3-master Redis Cluster: 3 buckets vs 1" "$(median "${b[@]}")" "$(median "${a[@]}")" ">=" 2.1
    fi
    skus_setup "$CL_PORT" bench-c "$CLUSTER_SKUS" || true
    echo "$CLUSTER_SKUS SKUs (bench-c0..bench-c$((CLUSTER_SKUS - 1))) on each master, by their hash slots: $(skus_per_master bench-c)"
    for mode in lua token; do
      echo "/miaosha/$mode?wait_ms=$WAIT_MS, $CLUSTER_SKUS SKUs in turn, successful purchases/s (wrk -c$CONNS -d${DUR}s), alternating: one Redis, the cluster"
      a=() b=()
      for ((r = 1; r <= ROUNDS; r++)); do
        watch_one; skus_wrk "$WIDE_PORT" "$mode" bench-c "$CLUSTER_SKUS"; a+=("$BUY_RPS"); echo "  round $r: one Redis $BUY_RPS/s ($BUY_NOTE)"
        watch_cl; skus_wrk "$CL_PORT" "$mode" bench-c "$CLUSTER_SKUS"; b+=("$BUY_RPS"); echo "  round $r: cluster   $BUY_RPS/s ($BUY_NOTE)"
      done
      conn_target_row 64+ 8 cluster "$mode buys/s, $CLUSTER_SKUS SKUs, $CONNS connections: 3-master cluster vs one Redis" "$(median "${b[@]}")" "$(median "${a[@]}")" ">=" 2.4
    done
    watch_none
    # its server first: one left without its cluster only logs and retries
    stop_pid "$CL_PID"; forget_pid "$CL_PID"
  fi
  [ -f "$RCLUSTER_DIR/.redis-cluster" ] && bash "$ROOT/scripts/redis-cluster.sh" stop "$RCLUSTER_DIR" >/dev/null 2>&1
  JUDGE_NOTE=""
fi

# ------------------------------------------------------------------ trace --
# The purchase trace (GET /trace/{sku}) costs one record copy under a short
# per-SKU mutex per purchase; this measures it where it is most contended:
# every purchase on one SKU, so on one ring.
if want trace; then
  section "trace: /miaosha/token with ?trace=1 vs ?trace=0, one SKU"
  [ -n "$SVC_PORT" ] || { start_server default || exit 1; SVC_PORT=$SERVER_PORT; }
  echo "/miaosha/token?wait_ms=$WAIT_MS successful purchases/s, 64 connections (wrk -c64 -d${DUR}s), alternating: off, on"
  buys_ab "$SVC_PORT" 64 "trace off" token "&trace=0" "trace on " token "&trace=1"
  target_row trace "token buys/s, 64 connections: trace on vs off" "$AB_B" "$AB_A" ">=" 0.95
fi

# ------------------------------------------------------------------- load --
if want load; then
  section "load: miaosha-load bench vs wrk, GET /healthz, 64 connections, ${DUR}s, alternating"
  echo "(server-side: responses counted by the server's /metrics over the same run, as a cross-check of the clients' counting)"
  lr=() lw=() ll=() lsr=() bad=0
  for ((r = 1; r <= ROUNDS; r++)); do
    m0=$(responses_total "$SVC_PORT")
    wrk_run "http://127.0.0.1:$SVC_PORT/healthz"
    m1=$(responses_total "$SVC_PORT")
    load_run "$SVC_PORT" /healthz 64
    m2=$(responses_total "$SVC_PORT")
    sw=$(awk -v a="$m0" -v b="$m1" -v t="$WRK_SECS" 'BEGIN{printf "%.0f", (b - a - 1) / t}')
    sl=$(awk -v a="$m1" -v b="$m2" -v t="$DUR" 'BEGIN{printf "%.0f", (b - a - 1) / t}')
    rr=$(ratio "$LOAD_RPS" "$WRK_RPS")
    note=""
    if [ "${LOAD_NON2XX:-0}" != 0 ] || [ "${LOAD_ERRS:-0}" != 0 ] || [ "$WRK_NON2XX" != 0 ] || [ -n "$WRK_ERRS" ]; then
      note="  <- non-2xx/errors: round excluded"; bad=$((bad + 1))
    else
      lr+=("$rr"); lw+=("$WRK_RPS"); ll+=("$LOAD_RPS"); lsr+=("$(ratio "$sl" "$sw")")
    fi
    echo "  round $r: wrk $WRK_RPS req/s (non-2xx $WRK_NON2XX${WRK_ERRS:+, $WRK_ERRS}; server-side $sw/s)," \
         "miaosha-load $LOAD_RPS req/s (non-2xx ${LOAD_NON2XX:-?}, errors ${LOAD_ERRS:-?}; server-side $sl/s), ratio $rr$note"
  done
  if [ ${#lr[@]} -gt 0 ]; then
    target_row load "miaosha-load vs wrk req/s on /healthz (median of ratios)" "$(median "${ll[@]}")" "$(median "${lw[@]}")" ">=" 0.9 "$(median "${lr[@]}")"
    row load "  same, counted by the server (/metrics)" - - "$(median "${lsr[@]}")" - "cross-check"
    [ "$bad" -gt 0 ] && row load "  rounds excluded (non-2xx answers or transport errors)" "$bad" - - - "see rounds above"
  else
    row load "miaosha-load vs wrk req/s on /healthz" - - - ">= 0.9" "MISSED (every round had non-2xx/errors)"
  fi
fi

# --------------------------------------------------------------- scaleout --
if want scaleout; then
  section "scaleout"
  scaleout_part
fi

# ---------------------------------------------------------------- summary --
# Printed, and written to bench/out/: summary.txt (as printed), summary.md
# (a Markdown table), summary.tsv (tab-separated, for tools) and
# summary.svg (each ratio as a bar against its target: summary_svg.py).
MACHINE="machine: $NCPU CPUs (nproc), load average $(cut -d' ' -f1-3 /proc/loadavg) (at the start: $LOAD_START); ${DUR}s per measurement, medians of $ROUNDS alternating rounds$SETTINGS"
section "summary (ratios are what count — see bench/README.md)"
summary_fmt='%-9s %-76s %10s %10s %6s %-18s %s\n'
{
  echo "$MACHINE"
  printf "$summary_fmt" part figure subject reference ratio target verdict
  printf "$summary_fmt" --------- "$(printf '%076d' 0 | tr 0 -)" ---------- ---------- ------ ------------------ -------
  for s in "${SUMMARY[@]}"; do
    IFS='|' read -r p f a b rt t v <<<"$s"
    printf "$summary_fmt" "$p" "$f" "$a" "$b" "$rt" "$t" "$v"
  done
} | tee "$WORK/summary.txt"
if mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ]; then
  cp "$WORK/summary.txt" "$OUT/summary.txt"
  {
    printf '# bench/run.sh %s\n\n%s\n\n' "${parts[*]}" "$MACHINE"
    echo "| part | figure | subject | reference | ratio | target | verdict |"
    echo "|---|---|---:|---:|---:|---|---|"
    for s in "${SUMMARY[@]}"; do
      IFS='|' read -r p f a b rt t v <<<"$s"
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$p" "$f" "$a" "$b" "$rt" "$t" "$v"
    done
  } >"$OUT/summary.md"
  {
    printf '# %s\n' "$MACHINE"
    printf 'part\tfigure\tsubject\treference\tratio\ttarget\tverdict\n'
    for s in "${SUMMARY[@]}"; do printf '%s\n' "$s" | tr '|' '\t'; done
  } >"$OUT/summary.tsv"
  if have python3 && python3 "$ROOT/bench/summary_svg.py" "$OUT/summary.tsv" "$OUT/summary.svg"; then
    echo "written: $OUT/summary.txt, summary.md, summary.tsv, summary.svg"
  else
    echo "written: $OUT/summary.txt, summary.md, summary.tsv (no summary.svg: needs python3)"
  fi
else
  log "bench: cannot write $OUT: the summary is only printed above"
fi
exit 0
