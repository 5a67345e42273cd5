# proc.sh — process control for the project's shell scripts (sourced, bash).
#
# One copy of what scripts/scaleout.sh, tests/redis-fixture.sh,
# scaleout/tests/lib.sh and bench/run.sh all need: a free loopback port,
# starting a server in the background, waiting until it answers, stopping it
# by PID, one HTTP request without curl, and a private redis-server.
# Sourcing defines functions only: no variable, trap or shell option is set.
# Every function is safe under `set -euo pipefail`.
#
# Why servers stay in the caller's session (never `setsid`, never
# `--daemonize yes`): daemonizing calls setsid(), and with
# sched_autogroup_enabled=1 (Debian's default) a process alone in its session
# is a scheduling group of its own. This machine's kernel starved such a group
# for 0.2-4 s at a time while the caller's session saturated both CPUs (PINGs
# to a daemonized redis-server took up to 4193 ms; a non-daemonized one beside
# it, 9 ms at most; with autogroup off neither stalled). A server started by
# proc_start gets its own process group instead, so a terminal Ctrl-C aimed at
# the script does not reach it; the script stops it by PID.

# proc_now_ms: prints the wall clock in milliseconds.
proc_now_ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }

# proc_port_busy PORT: true when something accepts connections on
# 127.0.0.1:PORT.
proc_port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# proc_free_port: prints a random loopback port that nothing listens on and
# no socket uses (never 6379); status 1 when 100 tries found none. Ports come
# from 20000 up to just below the kernel's ephemeral range
# (net.ipv4.ip_local_port_range, 32768 by default): a port inside it may be
# the local end of some client's connection, and then a server's bind() fails
# with EADDRINUSE although nothing listens there. Only a hint all the same:
# another process may bind it first, so the caller binds it and retries with
# another port when the bind fails.
proc_free_port() {
  local p _ lo=32768 span
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
  span=$(( lo > 21000 ? lo - 20000 : 30000 ))
  for _ in $(seq 100); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % span ))
    proc_port_busy "$p" || proc_port_in_use "$p" || { echo "$p"; return 0; }
  done
  return 1
}

# proc_port_in_use PORT: true when any TCP socket (listening, connected or in
# TIME_WAIT) has PORT as its local port, from /proc/net/tcp{,6}.
proc_port_in_use() {
  local hex
  hex=$(printf ':%04X ' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v h="$hex" '{ if (index($2 " ", h)) f = 1 } END { exit !f }'
}

# proc_alive PID: true when PID exists and is not a zombie. A server that
# exited may stay unreaped for a while (its parent, a script, is gone and
# PID 1 reaps lazily in containers): that counts as gone.
proc_alive() {
  [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
  [ -n "$st" ] && [ "$st" != Z ]
}

# proc_start LOG CMD...: runs CMD in the background in the caller's session
# and its own process group (see the top of this file), stdin from
# /dev/null, stdout and stderr to LOG (truncated; /dev/null is fine). Sets
# PROC_PID. CMD must not daemonize.
proc_start() {
  local log=$1 had_m=0
  shift
  case $- in *m*) had_m=1 ;; esac
  set -m
  "$@" </dev/null >"$log" 2>&1 &
  PROC_PID=$!
  [ "$had_m" = 1 ] || set +m
  return 0
}

# proc_stop PID [NAME] [GRACE_S]: stops PID and waits until it is gone:
# SIGCONT (a SIGSTOPped process cannot act on SIGTERM), SIGTERM, then SIGKILL
# after GRACE_S seconds (default 5; NAME is for that message on stderr).
# Reaps PID when it is the caller's child. Status 0, also when PID was gone.
proc_stop() {
  local pid=$1 name=${2:-$1} grace=${3:-5} _
  if proc_alive "$pid"; then
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $(( grace * 20 ))); do proc_alive "$pid" || break; sleep 0.05; done
    if proc_alive "$pid"; then
      echo "${0##*/}: $name did not stop in $grace s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 40); do proc_alive "$pid" || break; sleep 0.05; done
    fi
  fi
  [ -z "$pid" ] || proc_alive "$pid" || wait "$pid" 2>/dev/null || true
  return 0
}

# proc_wait_until DEADLINE_MS CMD...: runs CMD every 20 ms until it succeeds
# (status 0) or the deadline (absolute, proc_now_ms clock) passes (1).
proc_wait_until() {
  local deadline=$1
  shift
  while :; do
    "$@" && return 0
    [ "$(proc_now_ms)" -ge "$deadline" ] && return 1
    sleep 0.02
  done
}

# proc_wait_healthy PID TIMEOUT_MS CHECK...: runs CHECK every 50 ms until it
# succeeds (0), PID is gone (1: e.g. the server could not bind its port) or
# TIMEOUT_MS passes (1). An empty PID skips the liveness check. CHECK is one
# of the probes below or any command.
proc_wait_healthy() {
  local pid=$1 deadline
  deadline=$(( $(proc_now_ms) + $2 ))
  shift 2
  while :; do
    [ -z "$pid" ] || proc_alive "$pid" || return 1
    "$@" && return 0
    [ "$(proc_now_ms)" -ge "$deadline" ] && return 1
    sleep 0.05
  done
}

# proc_http METHOD URL [TIMEOUT_S]: one HTTP/1.1 request with an empty body
# on a fresh connection (Connection: close) through bash's /dev/tcp, so no
# curl is needed. URL is http://HOST:PORT[/PATH]. Sets H_CODE ("000" when
# there was no HTTP answer: refused, reset, or none within TIMEOUT_S,
# default 5), H_BODY (everything after the header) and H_MS (elapsed).
# Status 0 whatever the answer.
proc_http() {
  local m=$1 url=$2 t=${3:-5} hp path fd resp="" t0
  hp=${url#http://}
  path=/${hp#*/}
  [ "$path" = "/$hp" ] && path=/
  hp=${hp%%/*}
  t0=$(proc_now_ms)
  H_CODE=000 H_BODY=""
  if { exec {fd}<>"/dev/tcp/${hp%:*}/${hp##*:}"; } 2>/dev/null; then
    printf '%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: 0\r\n\r\n' \
      "$m" "$path" "$hp" >&"$fd" 2>/dev/null || true
    IFS= read -r -d '' -t "$t" -u "$fd" resp 2>/dev/null || true
    exec {fd}>&-
    if [[ $resp == HTTP/1.[01]\ [0-9][0-9][0-9]* ]]; then
      H_CODE=${resp:9:3}
      H_BODY=${resp#*$'\r\n\r\n'}
    fi
  fi
  H_MS=$(( $(proc_now_ms) - t0 ))
  return 0
}

# proc_http_ok URL [CODE] [TEXT]: probe for proc_wait_healthy: a GET of URL
# (2 s) answers CODE (default 200) with TEXT (default: anything) in the body.
proc_http_ok() {
  proc_http GET "$1" 2
  [ "$H_CODE" = "${2:-200}" ] && [[ $H_BODY == *"${3:-}"* ]]
}

# proc_redis_ping PORT [HOST]: probe: Redis on HOST (default 127.0.0.1):PORT
# answers PING with PONG within 2 s (no redis-cli needed).
proc_redis_ping() {
  local fd line=""
  { exec {fd}<>"/dev/tcp/${2:-127.0.0.1}/$1"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&"$fd" 2>/dev/null || true
  IFS= read -r -t 2 -u "$fd" line 2>/dev/null || true
  exec {fd}>&-
  [ "${line%$'\r'}" = +PONG ]
}

# proc_start_redis SERVER DIR [CONF_LINE...]: starts SERVER (a redis-server
# binary) on a free loopback port through DIR/redis.conf, written here:
# 127.0.0.1 only, daemonize no, pidfile DIR/redis.pid, logfile DIR/redis.log,
# dir DIR, no RDB/AOF, maxclients 10000, then CONF_LINEs (a later line wins,
# e.g. "appendonly yes"). The config file keeps the port, so a restart
# (`proc_start /dev/null SERVER DIR/redis.conf`) comes back the same. Waits
# until it answers PING and has written its pidfile; a port someone took
# first is retried with another (20 tries). Sets PROC_REDIS_PORT and
# PROC_REDIS_PID; status 1 when it could not start (see DIR/redis.log).
proc_start_redis() {
  local server=$1 dir=$2 port _
  shift 2
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
  for _ in $(seq 20); do
    port=$(proc_free_port) || return 1
    {
      printf '%s\n' "bind 127.0.0.1" "port $port" "protected-mode yes" "daemonize no" \
        "pidfile $dir/redis.pid" "logfile $dir/redis.log" "dir $dir" 'save ""' \
        "appendonly no" "maxclients 10000"
      [ $# -eq 0 ] || printf '%s\n' "$@"
    } > "$dir/redis.conf"
    rm -f "$dir/redis.pid"
    proc_start /dev/null "$server" "$dir/redis.conf"
    if proc_wait_healthy "$PROC_PID" 5000 _proc_redis_ready "$dir" "$port"; then
      PROC_REDIS_PORT=$port PROC_REDIS_PID=$PROC_PID
      return 0
    fi
    proc_stop "$PROC_PID" redis-server
  done
  return 1
}
_proc_redis_ready() { [ -s "$1/redis.pid" ] && proc_redis_ping "$2"; }

# proc_topology_cli TMPNAME ENVFILE ARGS... — the command line of a topology
# script (scaleout.sh, failover.sh, redis-cluster.sh): `start [DIR]`,
# `stop DIR`, `status DIR`, `run -- CMD...` (start in a fresh directory,
# run CMD with DIR/ENVFILE in its environment, stop on any exit, Ctrl-C
# included), anything else prints the script's header and exits 2. The
# caller defines do_start DIR, do_stop DIR, do_status DIR, print_env DIR,
# log and die, and runs under set -e: a failing step of start ends it, and
# the EXIT trap then stops what was started, once.
proc_topology_cli() {
  local tmpname=$1 envfile=$2 cmd=${3:-}
  shift 2
  [ $# -gt 0 ] && shift
  case $cmd in
  start)
    PROC_TOPO_DIR=${1:-$(mktemp -d "${TMPDIR:-/tmp}/$tmpname.XXXXXX")}
    trap 'log "start failed; stopping what was started"; do_stop "$PROC_TOPO_DIR" 2>/dev/null || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    do_start "$PROC_TOPO_DIR"
    trap - EXIT INT TERM
    print_env "$PROC_TOPO_DIR"
    ;;
  stop) do_stop "${1:?usage: $me stop DIR}"; log "stopped" ;;
  status) do_status "${1:?usage: $me status DIR}" ;;
  run)
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "usage: $me run -- CMD..."
    PROC_TOPO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$tmpname.XXXXXX")
    trap 'do_stop "$PROC_TOPO_DIR" 2>/dev/null || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    do_start "$PROC_TOPO_DIR"
    set -a
    # shellcheck disable=SC1090
    . "$PROC_TOPO_DIR/$envfile"
    set +a
    print_env "$PROC_TOPO_DIR" >&2
    local st=0
    "$@" || st=$?
    exit $st
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
  esac
}
