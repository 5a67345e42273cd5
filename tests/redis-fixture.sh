#!/usr/bin/env bash
# redis-fixture.sh start|stop DIR
#
# Starts (or stops) the test suite's private redis-server: loopback only, a
# free port chosen at random (never 6379), no RDB/AOF files. The port is
# written to DIR/port, the pid to DIR/redis.pid. Used as a ctest fixture.
set -euo pipefail
cmd=${1:?usage: redis-fixture.sh start|stop DIR}
dir=${2:?usage: redis-fixture.sh start|stop DIR}
server=${MIAOSHA_REDIS_SERVER:-$(command -v redis-server || true)}

stop() {
  if [ -f "$dir/redis.pid" ]; then
    pid=$(cat "$dir/redis.pid")
    kill "$pid" 2>/dev/null || true
    # A dead server may linger as a zombie until PID 1 reaps it (lazily in
    # containers): count that as gone.
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)" = Z ] && break
      sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/redis.pid"
  fi
}

case "$cmd" in
start)
  [ -n "$server" ] || { echo "redis-fixture: redis-server not found" >&2; exit 1; }
  mkdir -p "$dir"
  stop
  for _ in $(seq 30); do
    port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 30000 ))
    # Skip a port something already listens on: the server would fail to
    # bind after we connected to the stranger.
    if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then continue; fi
    rm -f "$dir/redis.pid"
    # Not --daemonize yes: daemonizing calls setsid(), and on a kernel with
    # sched_autogroup_enabled=1 a process alone in its session gets its own
    # scheduling group. This machine's kernel then starved it for 0.2-4 s
    # at a time under a saturating load from the tests' session (PINGs took
    # up to 4193 ms; a non-daemonized redis-server beside it, 9 ms at most;
    # with autogroup off, neither stalled). Started in the background it
    # stays in our session; its own process group keeps a terminal Ctrl-C
    # aimed at the tests away from it. It outlives this script (ctest stops
    # it with "stop").
    set -m
    "$server" --port "$port" --bind 127.0.0.1 --daemonize no \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" \
      --save "" --appendonly no --maxclients 10000 </dev/null >/dev/null 2>&1 &
    pid=$!
    set +m
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break # could not bind: next port
      if [ -s "$dir/redis.pid" ] && kill -0 "$(cat "$dir/redis.pid")" 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
        echo "$port" > "$dir/port"
        echo "redis-fixture: redis-server on 127.0.0.1:$port (pid $(cat "$dir/redis.pid"))"
        exit 0
      fi
      sleep 0.05
    done
    stop
  done
  echo "redis-fixture: could not start redis-server (see $dir/redis.log)" >&2
  exit 1
  ;;
stop) stop; rm -f "$dir/port"; echo "redis-fixture: stopped" ;;
*) echo "usage: redis-fixture.sh start|stop DIR" >&2; exit 2 ;;
esac
