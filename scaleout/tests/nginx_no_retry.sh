#!/usr/bin/env bash
# nginx_no_retry.sh [control] — the balancer fault: nginx must not resend a
# purchase to another instance.
#
# nginx runs with proxy_read_timeout 1s for /miaosha/. A purchase
# (GET — the method nginx considers idempotent and would retry by default —
# with work_ms) is sent through nginx; the test finds the instance that took
# it (its /stats "inflight" goes to 1) and then
#   hang: freezes it with SIGSTOP until nginx has timed out, then SIGCONT:
#         the client gets 504; nginx has closed its connection to the
#         instance, so the thawed purchase finds its client gone before the
#         commit and writes nothing (499 client_gone) → no order;
#   die:  kill -9 it mid-request: the client gets 502, no order.
# In both cases the other instances' request counters for the mode must not
# move: nginx did not send the purchase anywhere else.
#
# `control` runs the hang case with the template's
# "proxy_next_upstream off" replaced by nginx's default
# ("error timeout") and asserts that the purchase then reaches another
# instance — proof that this test detects a retrying balancer. (It used to
# be sold there as well; since the service checks before the commit whether
# its client is still there, the copies nginx gave up on write nothing, and
# a retried click is sold at most once unless an instance froze after its
# commit began.)
. "$(dirname "$0")/lib.sh"
VARIANT=${1:-normal}
SKU=noretry
# The control buys without a lock: with a lock, the retried copy would just
# wait for (or be refused by) the frozen holder's lock, which hides the
# double sale that a retrying balancer causes for any purchase that is slow
# after its lock (or whose lock lease ran out).
MODE=token
[ "$VARIANT" = control ] && MODE=none
export SCALEOUT_READ_TIMEOUT=1s
if [ "$VARIANT" = control ]; then
  tpl_dir=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-tpl.XXXXXX")
  sed 's/proxy_next_upstream off;/proxy_next_upstream error timeout;/' \
    "$SRC/config/nginx.conf.template" > "$tpl_dir/nginx.conf.template"
  grep -q 'proxy_next_upstream off' "$tpl_dir/nginx.conf.template" && { echo "sed failed"; exit 1; }
  export SCALEOUT_NGINX_TEMPLATE=$tpl_dir/nginx.conf.template
fi
scaleout_up
[ -n "${tpl_dir:-}" ] && rm -rf "$tpl_dir"

http PUT "$SCALEOUT_URL/stock/$SKU?stock=100"
require "stock reset" -- test "$H_CODE" = 200

inflight() { http GET "$1/stats" 2; [ "$(jfield "$H_BODY" inflight)" -ge 1 ] 2>/dev/null; }
find_victim() { # sets VICTIM (1..3) to the instance with a purchase in flight
  local i u
  for i in 1 2 3; do
    eval "u=\$SCALEOUT_APP${i}_URL"
    pid_gone "$(eval echo "\$SCALEOUT_APP${i}_PID")" && continue
    inflight "$u" && { VICTIM=$i; return 0; }
  done
  return 1
}
victim_idle() { ! inflight "$(eval echo "\$SCALEOUT_APP${VICTIM}_URL")"; }
token_requests() { # prints the three instances' token request counts
  local i u
  for i in 1 2 3; do eval "u=\$SCALEOUT_APP${i}_URL"; printf '%s ' "$(stats_requests "$u" "$MODE")"; done
}
# Orders of one buyer, read from Redis itself (in the control nginx has
# marked every instance down after three timeouts and would answer 502).
user_orders() { rcli lrange "miaosha:{$SKU}:orders" 0 -1 | grep -c "\"user\":\"$1\""; }

# one_purchase USER WORK_MS LEASE_MS ACTION: runs the scenario; sets P_CODE,
# P_MS, VICTIM, BEFORE and AFTER (request counters of app1..3 for $MODE).
one_purchase() {
  local user=$1 work=$2 lease=$3 action=$4 out=$T_DIR/purchase.$1 vpid q
  q="sku=$SKU&user=$user&work_ms=$work"
  [ "$MODE" = none ] || q="$q&lease_ms=$lease"
  BEFORE=$(token_requests)
  ( http GET "$SCALEOUT_URL/miaosha/$MODE?$q" 15
    echo "$H_CODE $H_MS $H_BODY" > "$out" ) &
  local cpid=$!
  BG_PIDS+=("$cpid")
  VICTIM=""
  require "[$user] the purchase reached an instance" -- wait_until $(( $(now_ms) + 3000 )) find_victim
  vpid=$(eval echo "\$SCALEOUT_APP${VICTIM}_PID")
  say "[$user] app$VICTIM (pid $vpid) holds the purchase: $action"
  if [ "$action" = hang ]; then
    kill -STOP "$vpid"
    wait "$cpid"
    kill -CONT "$vpid"
    # the thawed instance finishes the sale it was given (work_ms, EXEC)
    ck "[$user] app$VICTIM finished its purchase after SIGCONT" -- \
      wait_until $(( $(now_ms) + 5000 )) victim_idle
  else
    kill -KILL "$vpid"
    wait "$cpid"
  fi
  read -r P_CODE P_MS _ < "$out"
  say "[$user] client got $P_CODE after $P_MS ms: $(cut -d' ' -f3- "$out")"
  AFTER=$(token_requests)
  say "[$user] $MODE requests per instance before: $BEFORE after: $AFTER"
}

# Other instances' counters must not have moved; the victim's may have (a
# dead one answers nothing, so its counter is skipped).
others_unchanged() {
  local i b a
  for i in 1 2 3; do
    [ "$i" = "$VICTIM" ] && continue
    b=$(cut -d' ' -f$i <<<"$BEFORE"); a=$(cut -d' ' -f$i <<<"$AFTER")
    [ -n "$a" ] || continue   # instance already dead in an earlier case
    [ "$a" = "$b" ] || return 1
  done
}
retried_somewhere() { ! others_unchanged; }
# stats_field URL NAME: the sum of NAME over the modes of URL's /stats.
stats_field() {
  http GET "$1/stats" 3
  grep -o "\"$2\":[0-9]*" <<<"$H_BODY" | awk -F: '{ n += $2 } END { print n + 0 }'
}

if [ "$VARIANT" = control ]; then
  one_purchase hangc 1500 0 hang
  # a retried purchase lands on another instance, which also outlives the
  # 1 s timeout; wait until every instance has finished its copy
  sleep_until_idle() { local i u; for i in 1 2 3; do eval "u=\$SCALEOUT_APP${i}_URL"; inflight "$u" && return 1; done; return 0; }
  wait_until $(( $(now_ms) + 8000 )) sleep_until_idle
  n=$(user_orders hangc)
  say "control: with retries on, one click was sold $n times"
  ck "control: nginx retried the purchase on another instance" -- retried_somewhere
  ck "control: the copies nginx gave up on wrote nothing: at most one order ($n)" -- test "$n" -le 1
  finish; exit $?
fi

# 1. instance hangs mid-purchase: 504, no retry, and no order: the thawed
#    instance finds nginx's connection closed before its commit
one_purchase hang 1500 20000 hang
ck "hang: client got 504 from nginx (got $P_CODE)" -- test "$P_CODE" = 504
ck "hang: the 504 came after ~proxy_read_timeout ($P_MS ms in 900..4000)" -- test "$P_MS" -ge 900 -a "$P_MS" -le 4000
ck "hang: nginx did not send the purchase to another instance ($BEFORE -> $AFTER)" -- others_unchanged
n=$(user_orders hang)
ck "hang: no order recorded for the click nginx gave up on (got $n)" -- test "$n" = 0
vurl=$(eval echo "\$SCALEOUT_APP${VICTIM}_URL")
ck "hang: the thawed instance counted it client_gone ($(stats_field "$vurl" client_gone))" -- \
  test "$(stats_field "$vurl" client_gone)" -ge 1

# 2. instance dies mid-purchase: 502, no retry, no order
one_purchase die 3000 1500 die
ck "die: client got 502 from nginx (got $P_CODE)" -- test "$P_CODE" = 502
ck "die: nginx did not send the purchase to another instance ($BEFORE -> $AFTER)" -- others_unchanged
n=$(user_orders die)
ck "die: no order recorded for the click (got $n)" -- test "$n" = 0

audit "$SKU"
ck "audit clean after both faults (oversold $A_OVER, undersold $A_UNDER, sold $A_SOLD = orders $A_ORDERS)" -- \
  test "$A_OVER" = 0 -a "$A_UNDER" = 0 -a "$A_SOLD" = "$A_ORDERS"
# The balancer still serves purchases with two instances (the dead one's
# token lock frees after its 1500 ms lease; nginx may answer one more 502
# before it marks the dead instance down).
buy_ok() { http GET "$SCALEOUT_URL/miaosha/token?sku=$SKU&user=after&wait_ms=300"; [ "$H_CODE" = 200 ]; }
ck "purchases through nginx still work with the remaining instances (last $H_CODE)" -- \
  wait_until $(( $(now_ms) + 5000 )) buy_ok
finish
