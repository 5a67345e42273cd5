#!/usr/bin/env bash
# instance_killed.sh token|reentrant — one of three instances dies
# mid-burst while it holds the lock.
#
# Buyers run through nginx (round-robin over three instances) with a long
# wait_ms, so every buyer queues on the Redis lock and the lock is held
# almost all the time.
#   token:     a purchase with fault=crash_in_section is sent straight to app1;
#              app1 exits right after SET NX PX, holding a token lock with a
#              1500 ms lease that nobody will release.
#   reentrant: app1 is kill -9'd while it holds the lock: we poll the lock
#              hash until its field is "app1:<owner>", freeze app1 with
#              SIGSTOP, check the field is still app1's (it cannot release
#              while frozen — this makes "while it holds the lock" certain,
#              not lucky), then SIGKILL it. Watchdog timeout 1000 ms.
# Expected: the dead holder's lock frees after its lease / watchdog timeout
# (not before — nobody released it — and not much later); the other two
# instances keep selling until the stock is gone; the audit is exact
# (oversold = undersold = 0) and every 200's order id is in the order list
# (miaosha-load --expect safe).
. "$(dirname "$0")/lib.sh"
MODE=${1:?usage: instance_killed.sh token|reentrant}
SKU=kill-$MODE
LEASE=1500       # token lease (per request)
WATCHDOG=1000    # reentrant watchdog timeout (server config)
STOCK=60

export SCALEOUT_FAULTS=1
export SCALEOUT_SERVER_ARGS="--set lock.watchdog_timeout_ms=$WATCHDOG --set server.workers=16"
scaleout_up

# token: the crashing purchase waits for the lock like every buyer, and
# token's polling is unfair — it can lose many handoffs in a row. The stock
# makes selling out take ~300 handoffs (~8 s), so it gets the lock while the
# stock lasts (missing every one of them: ~(24/25)^300, about 1e-5).
case $MODE in
token) args=(--work-ms 20 --lease-ms $LEASE) hold=$LEASE STOCK=300 ;;
reentrant) args=(--work-ms 40) hold=$WATCHDOG ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac

load_bg "$T_DIR/load.json" --mode "$MODE" --sku "$SKU" --stock $STOCK --requests $((STOCK + 440)) \
  --concurrency 24 --wait-ms 30000 "${args[@]}" --target "$SCALEOUT_URL" \
  --expect safe --duration-limit 60
require "burst started selling" -- wait_until $(( $(now_ms) + 20000 )) sold_at_least "$SKU" 3

LOCK="miaosha:{$SKU}:lock:$MODE"
if [ "$MODE" = token ]; then
  # app1 acquires (waiting its turn like every buyer) and exits inside the lock.
  http POST "$SCALEOUT_APP1_URL/miaosha/token?sku=$SKU&work_ms=20&wait_ms=30000&lease_ms=$LEASE&fault=crash_in_section&user=crasher" 35
  t_kill=$(now_ms)
  ck "the crashing purchase got no HTTP answer (code $H_CODE)" -- test "$H_CODE" = 000
  holder=$(rcli get "$LOCK")
  pttl=$(rcli pttl "$LOCK")
else
  holder="" deadline=$(( $(now_ms) + 20000 ))
  while [ "$(now_ms)" -lt "$deadline" ]; do
    if rcli hkeys "$LOCK" | grep -q "^app1:"; then
      kill -STOP "$SCALEOUT_APP1_PID"
      holder=$(rcli hkeys "$LOCK" | grep "^app1:" | head -1)
      if [ -n "$holder" ]; then kill -KILL "$SCALEOUT_APP1_PID"; t_kill=$(now_ms); break; fi
      kill -CONT "$SCALEOUT_APP1_PID"
    fi
    sleep 0.005
  done
  require "app1 was caught holding the lock and kill -9'd" -- test -n "$holder"
  pttl=$(rcli pttl "$LOCK")
fi
sold_at_kill=$(rcli get "miaosha:{$SKU}:sold")
say "app1 died at sold=$sold_at_kill holding '$holder' (pttl $pttl ms)"
ck "app1 is gone" -- wait_until $(( $(now_ms) + 3000 )) pid_gone "$SCALEOUT_APP1_PID"
ck "the dead holder's lock is in Redis" -- test -n "$holder"
ck "the lock has a TTL at most the lease/watchdog ($pttl <= $hold)" -- test "$pttl" -gt 0 -a "$pttl" -le "$hold"

lock_still_dead() {
  if [ "$MODE" = token ]; then [ "$(rcli get "$LOCK")" = "$holder" ];
  else rcli hkeys "$LOCK" | grep -qx "$holder"; fi
}
lock_freed() { ! lock_still_dead; }
wait_until $(( t_kill + hold + 3000 )) lock_freed
freed_ms=$(( $(now_ms) - t_kill ))
say "the dead holder's lock freed $freed_ms ms after the kill (lease/watchdog $hold ms, pttl at kill $pttl)"
ck "freed by expiry, not released: after >= pttl - 250 ms ($freed_ms >= $pttl - 250)" -- test "$freed_ms" -ge $(( pttl - 250 ))
ck "freed within lease + 1 s ($freed_ms <= $hold + 1000)" -- test "$freed_ms" -le $(( hold + 1000 ))

load_wait "$T_DIR/load.json"
ck "miaosha-load --expect safe passed (exit $LOAD_ST)" -- test "$LOAD_ST" -eq 0
audit "$SKU"
ck "sold out: the other instances kept selling ($sold_at_kill at the kill, $A_SOLD of $STOCK at the end)" -- test "$A_SOLD" = $STOCK -a "$A_STOCK" = 0 -a "$sold_at_kill" -lt $STOCK
ck "oversold = undersold = 0 (got $A_OVER / $A_UNDER)" -- test "$A_OVER" = 0 -a "$A_UNDER" = 0
ck "order list = sold ($A_ORDERS)" -- test "$A_ORDERS" = "$A_SOLD"
ck "no missing order" -- test "$(jfield "$LOAD_JSON" missing_orders)" = 0
say "orders per instance: $(order_instances "$SKU" | tr '\n' ' ')"
n23=$(order_instances "$SKU" | grep -c '"app[23]"')
ck "app2 and app3 both sold" -- test "$n23" = 2
finish
