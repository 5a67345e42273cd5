#!/usr/bin/env bash
# redis-fixture.sh start DIR [CONF_LINE...] | stop DIR
#
# Starts (or stops) the test suite's private redis-server: loopback only, a
# free port chosen at random (never 6379), no RDB/AOF files; CONF_LINEs are
# added to its redis.conf (bench/run.sh's --redis-io-threads). The port is
# written to DIR/port, the pid to DIR/redis.pid. Used as a ctest fixture.
# The server stays in the caller's session, not daemonized (why:
# scripts/lib/proc.sh), and outlives this script: ctest stops it with "stop".
set -euo pipefail
cmd=${1:?usage: redis-fixture.sh start DIR [CONF_LINE...] | stop DIR}
dir=${2:?usage: redis-fixture.sh start DIR [CONF_LINE...] | stop DIR}
shift 2
server=${MIAOSHA_REDIS_SERVER:-$(command -v redis-server || true)}
. "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/proc.sh"

stop() {
  if [ -f "$dir/redis.pid" ]; then
    proc_stop "$(cat "$dir/redis.pid")" redis-server
    rm -f "$dir/redis.pid"
  fi
}

case "$cmd" in
start)
  [ -n "$server" ] || { echo "redis-fixture: redis-server not found" >&2; exit 1; }
  mkdir -p "$dir"
  stop
  rm -f "$dir/port"
  if ! proc_start_redis "$server" "$dir" "$@"; then
    echo "redis-fixture: could not start redis-server (see $dir/redis.log)" >&2
    exit 1
  fi
  echo "$PROC_REDIS_PORT" > "$dir/port"
  echo "redis-fixture: redis-server on 127.0.0.1:$PROC_REDIS_PORT (pid $PROC_REDIS_PID)"
  ;;
stop) stop; rm -f "$dir/port"; echo "redis-fixture: stopped" ;;
*) echo "usage: redis-fixture.sh start DIR [CONF_LINE...] | stop DIR" >&2; exit 2 ;;
esac
