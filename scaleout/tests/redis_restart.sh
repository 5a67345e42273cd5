#!/usr/bin/env bash
# redis_restart.sh — Redis dies (kill -9) mid-burst and is restarted on the
# same port from its AOF (appendfsync always).
#
# Expected, with buyers running through nginx:
#   * while Redis is down every instance answers purchases with 503
#     redis_unavailable within the configured timeouts (no hang, no crash)
#     and /healthz turns 503;
#   * after the restart each instance serves again within 1 s of Redis
#     answering PING, by itself (same processes);
#   * the audit is clean: no acknowledged order lost (every 200's order id is
#     in the reloaded order list), no oversell, and undersold = 0 — the
#     service writes stock, sold and the order in one MULTI/EXEC, so a
#     purchase cut by the crash left all three writes or none.
# The lock held at the crash survives in the AOF and frees after its lease.
. "$(dirname "$0")/lib.sh"
SKU=rr
STOCK=100
CMD_TIMEOUT=500
export SCALEOUT_SERVER_ARGS="--set redis.command_timeout_ms=$CMD_TIMEOUT --set redis.connect_timeout_ms=$CMD_TIMEOUT --set server.workers=16"
scaleout_up

load_bg "$T_DIR/load.json" --mode token --sku $SKU --stock $STOCK --requests 5000000 \
  --concurrency 16 --work-ms 10 --lease-ms 2000 --wait-ms 2000 --target "$SCALEOUT_URL" \
  --expect safe --duration-limit 9
require "burst started selling" -- wait_until $(( $(now_ms) + 20000 )) sold_at_least $SKU 10

rpid=$(cat "$SCALEOUT_DIR/redis.pid")
kill -KILL "$rpid"
t_down=$(now_ms)
say "redis-server (pid $rpid) killed with SIGKILL"

# Purchases answer 503 redis_unavailable within the timeouts, on every
# instance directly and through nginx.
expect_outage down $SKU "$t_down" $(( 2 * CMD_TIMEOUT + 500 ))
ck "down: instances still running" -- bash -c "kill -0 $SCALEOUT_APP1_PID $SCALEOUT_APP2_PID $SCALEOUT_APP3_PID"

# Stay down ~1.5 s in all (the buyers keep getting 503s), then restart
# from the same config: same port, same AOF directory.
while [ $(( $(now_ms) - t_down )) -lt 1500 ]; do sleep 0.05; done
rs=${SCALEOUT_REDIS_SERVER:-${MIAOSHA_REDIS_SERVER:-redis-server}} # scaleout.sh's order
# In the background: the config says daemonize no (scripts/lib/proc.sh,
# proc_start_redis); it writes the same pidfile, so "scaleout.sh stop" finds it.
proc_start /dev/null "$rs" "$SCALEOUT_REDIS_CONF"
require "redis-server restarted from its AOF" -- wait_until $(( $(now_ms) + 10000 )) redis_up
t_up=$(now_ms)
say "redis up again after $(( t_up - t_down )) ms down; loaded sold=$(rcli get "miaosha:{$SKU}:sold")"

serves_again() { # url: a purchase gets an answer from Redis (not 503)
  http GET "$1/miaosha/token?sku=$SKU&user=probe2&wait_ms=0" 2
  [ "$H_CODE" = 200 ] || [ "$H_CODE" = 409 ] || [ "$H_CODE" = 429 ]
}
for u in $SCALEOUT_APP_URLS; do
  wait_until $(( t_up + 3000 )) serves_again "$u"; st=$?
  back=$(( $(now_ms) - t_up ))
  check $st "up: $u serves purchases again ${back} ms after Redis answered PING (within 1000 ms, got $H_CODE)"
  [ $st -eq 0 ] && [ $back -gt 1000 ] && check 1 "up: $u reconnect took $back ms > 1000 ms"
  ck "up: /healthz of $u is 200 within 1 s" -- wait_until $(( t_up + 1000 )) healthz_is "$u" 200
done

load_wait "$T_DIR/load.json"
ck "miaosha-load --expect safe passed (exit $LOAD_ST)" -- test "$LOAD_ST" -eq 0
n503=$(jfield "$LOAD_JSON" redis_unavailable)
ck "buyers saw 503 redis_unavailable during the outage ($n503)" -- test "${n503:-0}" -gt 0
ck "no acknowledged order lost (missing_orders $(jfield "$LOAD_JSON" missing_orders))" -- \
  test "$(jfield "$LOAD_JSON" missing_orders)" = 0
audit $SKU
ck "oversold = 0 ($A_OVER)" -- test "$A_OVER" = 0
ck "undersold = 0 ($A_UNDER): MULTI/EXEC leaves no torn purchase" -- test "$A_UNDER" = 0
ck "order list = sold ($A_ORDERS = $A_SOLD)" -- test "$A_ORDERS" = "$A_SOLD"
ck "buyers kept buying after the restart: sold out ($A_SOLD of $STOCK)" -- test "$A_SOLD" = $STOCK -a "$A_STOCK" = 0
finish
