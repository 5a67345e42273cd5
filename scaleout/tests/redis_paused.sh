#!/usr/bin/env bash
# redis_paused.sh — Redis is slow: the redis-server process is frozen with
# SIGSTOP for 2 s mid-burst, then SIGCONT.
#
# A frozen Redis still accepts TCP connections (the kernel does) but never
# answers, which is what a slow or hung Redis looks like to a client.
# Expected, with buyers running through nginx (token mode, lease 3000 ms):
#   * purchases fail fast: 503 redis_unavailable after the command timeout
#     (300 ms here), far sooner than the 2 s pause; /healthz turns 503;
#   * locks held across the pause behave as documented (lockcore,
#     service/README.md): a release that timed out still runs on SIGCONT,
#     and an acquire that was buffered in the socket during the pause and
#     executed on SIGCONT after its client gave up is given back by
#     lockcore's orphan cleanup (lockcore/README.md) as soon as Redis
#     answers it. Nothing stays stuck beyond the lease in any case: sales
#     resume within lease + 1 s of SIGCONT (in practice within ~100 ms;
#     service/tests/test_service_redis_paused.c holds that to 1 s) and the
#     stock sells out;
#   * the audit is clean (oversold = undersold = 0, no acknowledged order
#     missing): a transaction sent during the pause runs on SIGCONT whole or
#     not at all, and the lease (3000 ms > 2 s pause) keeps the next holder
#     out until it has.
. "$(dirname "$0")/lib.sh"
SKU=pause
STOCK=100
CMD_TIMEOUT=300
LEASE=3000
PAUSE_MS=2000
export SCALEOUT_SERVER_ARGS="--set redis.command_timeout_ms=$CMD_TIMEOUT --set redis.connect_timeout_ms=$CMD_TIMEOUT --set server.workers=16 --set lock.lease_ms=$LEASE"
scaleout_up

load_bg "$T_DIR/load.json" --mode token --sku $SKU --stock $STOCK --requests 5000000 \
  --concurrency 12 --work-ms 10 --lease-ms $LEASE --wait-ms 5000 --target "$SCALEOUT_URL" \
  --expect safe --duration-limit 10
require "burst started selling" -- wait_until $(( $(now_ms) + 20000 )) sold_at_least $SKU 10

rpid=$(cat "$SCALEOUT_DIR/redis.pid")
sold_before=$(rcli get "miaosha:{$SKU}:sold")
kill -STOP "$rpid"
t_stop=$(now_ms)
say "redis-server (pid $rpid) frozen with SIGSTOP at sold=$sold_before"

# lease_ms as the buyers': a probe's acquire sent during the pause also
# runs on SIGCONT and holds the lock for its lease.
expect_outage paused $SKU "$t_stop" $(( 2 * CMD_TIMEOUT + 400 )) "&lease_ms=$LEASE"
while [ $(( $(now_ms) - t_stop )) -lt $PAUSE_MS ]; do sleep 0.02; done
kill -CONT "$rpid"
t_cont=$(now_ms)
say "SIGCONT after $(( t_cont - t_stop )) ms"
pttl=$(rcli pttl "miaosha:{$SKU}:lock:token")
ck "after the pause the lock (if any) has at most its lease left (pttl $pttl <= $LEASE)" -- test "$pttl" -le $LEASE
sold_cont=$(rcli get "miaosha:{$SKU}:sold")
sold_grew() { [ "$(rcli get "miaosha:{$SKU}:sold")" -gt "$sold_cont" ]; }
wait_until $(( t_cont + LEASE + 1000 )) sold_grew; st=$?
check $st "sales resumed $(( $(now_ms) - t_cont )) ms after SIGCONT (within lease + 1 s): no stuck lock"
for u in $SCALEOUT_APP_URLS; do
  ck "/healthz of $u is 200 again within 1.5 s" -- wait_until $(( t_cont + 1500 )) healthz_is "$u" 200
done

load_wait "$T_DIR/load.json"
ck "miaosha-load --expect safe passed (exit $LOAD_ST)" -- test "$LOAD_ST" -eq 0
n503=$(jfield "$LOAD_JSON" redis_unavailable)
ck "buyers got 503 redis_unavailable during the pause ($n503)" -- test "${n503:-0}" -gt 0
p99=$(jfield "$LOAD_JSON" latency_max_ms)
ck "no buyer waited out the whole pause plus its lock wait (max latency $p99 ms < 5000 + $PAUSE_MS)" -- \
  test "${p99%.*}" -lt $(( 5000 + PAUSE_MS ))
audit $SKU
ck "oversold = undersold = 0 ($A_OVER / $A_UNDER)" -- test "$A_OVER" = 0 -a "$A_UNDER" = 0
ck "order list = sold ($A_ORDERS = $A_SOLD)" -- test "$A_ORDERS" = "$A_SOLD"
ck "sold out after the pause ($A_SOLD of $STOCK)" -- test "$A_SOLD" = $STOCK -a "$A_STOCK" = 0
finish
