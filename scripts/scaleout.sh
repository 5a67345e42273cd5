#!/usr/bin/env bash
# scaleout.sh — the scale-out topology on loopback, without Docker:
#
#   private redis-server (AOF on, appendfsync always, its own temp dir)
#   three miaosha-server instances (distinct ports and instance ids)
#   Debian's nginx in front (config/nginx.conf.template: round-robin,
#   keep-alive to the instances, purchases never retried)
#
# everything on 127.0.0.1 and free ports, every file in one temp dir.
#
# Usage:
#   scripts/scaleout.sh start [DIR]     start; print the addresses; DIR default: a new mktemp dir
#   scripts/scaleout.sh status DIR      which processes are alive, the audit of the default SKU
#   scripts/scaleout.sh stop DIR        stop everything started in DIR, by PID; remove DIR
#   scripts/scaleout.sh run -- CMD...   start in a temp dir, run CMD with the addresses in its
#                                       environment, always stop (also on Ctrl-C or an error);
#                                       exits with CMD's status
#
# After start, DIR/scaleout.env (shell syntax, source it) holds:
#   SCALEOUT_DIR, SCALEOUT_URL (nginx), SCALEOUT_NGINX_PORT, SCALEOUT_NGINX_PID,
#   SCALEOUT_REDIS_PORT, SCALEOUT_REDIS_PID, SCALEOUT_REDIS_CONF,
#   SCALEOUT_APP_URLS (space separated), SCALEOUT_APP<i>_URL, SCALEOUT_APP<i>_PORT,
#   SCALEOUT_APP<i>_PID, SCALEOUT_APP<i>_ID (i = 1..3)
# and `run` exports the same variables to CMD. (A Redis Cluster is
# scripts/redis-cluster.sh, whose variables are REDIS_CLUSTER_*.)
#
# Knobs (environment):
#   MIAOSHA_BUILD_DIR        build tree with service/miaosha-server (default: build/dev)
#   SCALEOUT_SERVER           the miaosha-server binary (overrides MIAOSHA_BUILD_DIR)
#   SCALEOUT_FAULTS=1         start the instances with faults.enabled=true
#   SCALEOUT_SERVER_ARGS      extra flags for every instance, word-split
#                            (e.g. "--set lock.watchdog_timeout_ms=1000")
#   SCALEOUT_ID_PREFIX        instance ids are <prefix>1..3 (default "app")
#   SCALEOUT_READ_TIMEOUT     nginx proxy_read_timeout for purchases (default 65s)
#   SCALEOUT_NGINX_TEMPLATE   template to fill (default config/nginx.conf.template)
#   SCALEOUT_NGINX            nginx binary (default /usr/sbin/nginx, else PATH)
#   SCALEOUT_REDIS_SERVER     redis-server binary (default MIAOSHA_REDIS_SERVER, else PATH)
#   SCALEOUT_KEEP_DIR=1       stop leaves DIR (logs) in place
#
# The script never writes outside DIR (nginx runs with -p DIR -e DIR/... and
# a generated main config), binds only 127.0.0.1, and stops only the PIDs it
# recorded: SIGTERM, then SIGKILL after 5 s. Every process stays in this
# script's session (why: scripts/lib/proc.sh) in a process group of its own,
# so a terminal Ctrl-C reaches only this script, which then stops them.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
me=scaleout.sh
# shellcheck source=lib/proc.sh
. "$here/scripts/lib/proc.sh"
N=3

die() { echo "$me: $*" >&2; exit 1; }
log() { echo "$me: $*" >&2; }

find_server() {
  if [ -n "${SCALEOUT_SERVER:-}" ]; then echo "$SCALEOUT_SERVER"; return; fi
  local d
  local d=${MIAOSHA_BUILD_DIR:-$here/build/dev}
  [ -x "$d/service/miaosha-server" ] && { echo "$d/service/miaosha-server"; return; }
  die "$d/service/miaosha-server not found: build it (README.md) or set MIAOSHA_BUILD_DIR or SCALEOUT_SERVER"
}

find_bin() { # name default...
  local name=$1; shift
  local c
  for c in "$@"; do [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return; }; done
  command -v "$name" || die "$name not found"
}

pick_port() { proc_free_port || die "no free port found"; }

# ---------------------------------------------------------------- start
start_redis() { # dir
  local dir=$1 rs
  rs=$(find_bin redis-server "${SCALEOUT_REDIS_SERVER:-}" "${MIAOSHA_REDIS_SERVER:-}")
  mkdir -p "$dir/redis"
  # One config file (DIR/redis.conf), so a restart (tests: kill -9 then
  # start again) uses exactly the same settings and finds the AOF in the
  # same directory.
  proc_start_redis "$rs" "$dir" "dir $dir/redis" "appendonly yes" "appendfsync always" \
      "appenddirname aof" || die "could not start redis-server (see $dir/redis.log)"
  REDIS_PORT=$PROC_REDIS_PORT REDIS_PID=$(cat "$dir/redis.pid")
}

start_app() { # dir i server
  local dir=$1 i=$2 server=$3 port pid id code
  id="${SCALEOUT_ID_PREFIX:-app}$i"
  local -a extra=()
  [ "${SCALEOUT_FAULTS:-0}" = 1 ] && extra+=(--set faults.enabled=true)
  # shellcheck disable=SC2206
  [ -n "${SCALEOUT_SERVER_ARGS:-}" ] && extra+=($SCALEOUT_SERVER_ARGS)
  for _ in $(seq 20); do
    port=$(pick_port)
    proc_start "$dir/app$i.log" "$server" --listen 127.0.0.1 --port "$port" \
      --redis "127.0.0.1:$REDIS_PORT" --instance-id "$id" "${extra[@]}"
    pid=$PROC_PID
    if proc_wait_healthy "$pid" 10000 proc_http_ok "http://127.0.0.1:$port/healthz" 200 "\"instance\":\"$id\""; then
      eval "APP${i}_PORT=$port APP${i}_PID=$pid APP${i}_ID=$id"
      return 0
    fi
    proc_stop "$pid" "app$i"
    grep -q "in use" "$dir/app$i.log" 2>/dev/null || { tail -5 "$dir/app$i.log" >&2; die "app$i did not start"; }
  done
  die "could not start app$i"
}

fill_template() { # template out
  # The same placeholders the official nginx image's envsubst step fills;
  # only the LB_* names are replaced (sed: no gettext-base needed).
  sed -e "s|\${LB_LISTEN}|$LB_LISTEN|g" -e "s|\${LB_APP1}|$LB_APP1|g" \
      -e "s|\${LB_APP2}|$LB_APP2|g" -e "s|\${LB_APP3}|$LB_APP3|g" \
      -e "s|\${LB_READ_TIMEOUT}|$LB_READ_TIMEOUT|g" "$1" > "$2"
  ! grep -q '\${LB_[A-Z0-9_]*}' "$2" || die "unfilled placeholder in $2"
}

# nginx answers its own /lb-healthz and its pidfile names the master we started.
nginx_ready() { # dir port pid
  proc_http_ok "http://127.0.0.1:$2/lb-healthz" && [ -s "$1/nginx/nginx.pid" ] &&
    [ "$(cat "$1/nginx/nginx.pid")" = "$3" ]
}

start_nginx() { # dir
  local dir=$1 ngx tpl port pid
  ngx=$(find_bin nginx "${SCALEOUT_NGINX:-}" /usr/sbin/nginx)
  tpl=${SCALEOUT_NGINX_TEMPLATE:-$here/config/nginx.conf.template}
  [ -r "$tpl" ] || die "template $tpl not readable"
  mkdir -p "$dir/nginx/logs"
  # nginx's workers drop to an unprivileged user when started as root; they
  # must be able to reach the temp dirs below.
  chmod 711 "$dir"
  for _ in $(seq 20); do
    port=$(pick_port)
    LB_LISTEN="127.0.0.1:$port" LB_APP1="127.0.0.1:$APP1_PORT" LB_APP2="127.0.0.1:$APP2_PORT" \
      LB_APP3="127.0.0.1:$APP3_PORT" LB_READ_TIMEOUT=${SCALEOUT_READ_TIMEOUT:-65s}
    fill_template "$tpl" "$dir/nginx/miaosha.conf"
    cat > "$dir/nginx/nginx.conf" <<EOF
# Generated by scripts/scaleout.sh; the site config is $tpl, filled.
daemon off;
master_process on;
worker_processes 1;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
    client_body_temp_path $dir/nginx/client_body;
    proxy_temp_path $dir/nginx/proxy;
    fastcgi_temp_path $dir/nginx/fastcgi;
    uwsgi_temp_path $dir/nginx/uwsgi;
    scgi_temp_path $dir/nginx/scgi;
    keepalive_timeout 65s;
    include $dir/nginx/miaosha.conf;
}
EOF
    "$ngx" -t -q -p "$dir/nginx" -e "$dir/nginx/logs/error.log" -c "$dir/nginx/nginx.conf" \
      || die "nginx -t failed for $dir/nginx/nginx.conf"
    proc_start "$dir/nginx/logs/stdout.log" \
      "$ngx" -p "$dir/nginx" -e "$dir/nginx/logs/error.log" -c "$dir/nginx/nginx.conf"
    pid=$PROC_PID
    if proc_wait_healthy "$pid" 5000 nginx_ready "$dir" "$port" "$pid"; then
      NGINX_PORT=$port NGINX_PID=$pid
      return 0
    fi
    proc_stop "$pid" nginx
    grep -q "in use" "$dir/nginx/logs/error.log" 2>/dev/null || { tail -5 "$dir/nginx/logs/error.log" >&2; die "nginx did not start"; }
  done
  die "could not start nginx"
}

write_env() { # dir
  local dir=$1 f=$1/scaleout.env urls="" i
  {
    echo "SCALEOUT_DIR=$dir"
    echo "SCALEOUT_URL=http://127.0.0.1:$NGINX_PORT"
    echo "SCALEOUT_NGINX_PORT=$NGINX_PORT"
    echo "SCALEOUT_NGINX_PID=$NGINX_PID"
    echo "SCALEOUT_REDIS_PORT=$REDIS_PORT"
    echo "SCALEOUT_REDIS_PID=$REDIS_PID"
    echo "SCALEOUT_REDIS_CONF=$dir/redis.conf"
    for i in $(seq $N); do
      eval "echo SCALEOUT_APP${i}_URL=http://127.0.0.1:\$APP${i}_PORT"
      eval "echo SCALEOUT_APP${i}_PORT=\$APP${i}_PORT"
      eval "echo SCALEOUT_APP${i}_PID=\$APP${i}_PID"
      eval "echo SCALEOUT_APP${i}_ID=\$APP${i}_ID"
      eval "urls=\"\$urls http://127.0.0.1:\$APP${i}_PORT\""
    done
    echo "SCALEOUT_APP_URLS=\"${urls# }\""
  } > "$f.tmp"
  mv "$f.tmp" "$f"
}

do_start() { # dir
  local dir=$1 server i
  server=$(find_server)
  mkdir -p "$dir"
  echo started > "$dir/.scaleout"    # marks DIR as ours for stop
  start_redis "$dir"
  echo "$REDIS_PID" > "$dir/redis.pidrec"
  for i in $(seq $N); do
    start_app "$dir" "$i" "$server"
    eval "echo \$APP${i}_PID > \"$dir/app$i.pid\""
  done
  start_nginx "$dir"
  echo "$NGINX_PID" > "$dir/nginx.pidrec"
  write_env "$dir"
}

# ---------------------------------------------------------------- stop
do_stop() { # dir
  local dir=$1 f pid
  [ -f "$dir/.scaleout" ] || die "$dir is not a scale-out topology dir"
  [ -f "$dir/nginx.pidrec" ] && proc_stop "$(cat "$dir/nginx.pidrec")" nginx
  for f in "$dir"/app*.pid; do
    [ -f "$f" ] && proc_stop "$(cat "$f")" "$(basename "$f" .pid)"
  done
  # The redis pid may have changed (a test restarted it): the pidfile is the
  # truth while it runs, the record is the fallback.
  for f in "$dir/redis.pid" "$dir/redis.pidrec"; do
    [ -s "$f" ] && { pid=$(cat "$f"); proc_stop "$pid" redis-server; }
  done
  # SCALEOUT_KEEP_DIR=1 keeps the logs (the tests scan them for sanitizer
  # reports written at exit, then remove the dir themselves).
  [ "${SCALEOUT_KEEP_DIR:-0}" = 1 ] || rm -rf "$dir"
}

do_status() { # dir
  local dir=$1 st=0 name pid
  [ -f "$dir/scaleout.env" ] || die "$dir has no scaleout.env"
  # shellcheck disable=SC1091
  . "$dir/scaleout.env"
  for name in REDIS NGINX APP1 APP2 APP3; do
    eval "pid=\$SCALEOUT_${name}_PID"
    [ "$name" = REDIS ] && [ -s "$dir/redis.pid" ] && pid=$(cat "$dir/redis.pid")
    if proc_alive "$pid"; then echo "$name pid $pid: running"; else echo "$name pid $pid: NOT running"; st=1; fi
  done
  echo "nginx:  $SCALEOUT_URL   redis: 127.0.0.1:$SCALEOUT_REDIS_PORT"
  echo "apps:   $SCALEOUT_APP_URLS"
  proc_http GET "$SCALEOUT_URL/stock/demo" 2
  echo "audit:  $H_CODE $H_BODY"
  return $st
}

print_env() {
  # shellcheck disable=SC1091
  . "$1/scaleout.env"
  cat <<EOF
scale-out topology up in $1
  nginx (buy here): $SCALEOUT_URL/miaosha/token?sku=demo
  instances:        $SCALEOUT_APP_URLS
  redis:            127.0.0.1:$SCALEOUT_REDIS_PORT (AOF, appendfsync always)
  environment:      . $1/scaleout.env
  stop with:        scripts/scaleout.sh stop $1
EOF
}

proc_topology_cli "miaosha-scaleout" scaleout.env "$@"
