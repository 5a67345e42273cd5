#!/usr/bin/env bash
# observe_check.sh — the compose profile observe without Docker: Debian's
# prometheus scrapes two miaosha-server instances on loopback with the
# settings of scaleout/observe/prometheus.yml (only its targets replaced by
# the instances' ports), a none and a token burst sell on SKUs of their own
# through both instances, and then every query of the Grafana dashboard
# (scaleout/observe/grafana/dashboards/miaosha.json) is asked of that
# Prometheus: each answers at least one series, the per-mode panels show
# none oversold and token exact, with the audits' numbers. What it cannot
# check is Grafana drawing them (no Grafana package in Debian).
. "$(dirname "$0")/lib.sh"
cd "$SRC" || exit 1
command -v prometheus >/dev/null ||
  { say "FAIL prometheus not installed (Debian package prometheus)"; exit 1; }
SERVER=$BUILD/service/miaosha-server
tmp=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-observe.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do proc_stop "$p"; done
  [ "$T_FAIL" -eq 0 ] && rm -rf "$tmp" || say "kept $tmp"
}
trap cleanup EXIT

require "a private redis-server" -- proc_start_redis "${MIAOSHA_REDIS_SERVER:-redis-server}" "$tmp/redis"
PIDS+=("$PROC_REDIS_PID")
ports=()
for i in 1 2; do
  p=$(proc_free_port)
  proc_start "$tmp/app$i.log" "$SERVER" --port "$p" --redis "127.0.0.1:$PROC_REDIS_PORT" \
    --instance-id "app$i" --set metrics.refresh_ms=200
  PIDS+=("$PROC_PID")
  require "app$i starts" -- proc_wait_healthy "$PROC_PID" 10000 proc_http_ok "http://127.0.0.1:$p/healthz"
  ports+=("$p")
done

# The profile's prometheus.yml, its targets on loopback, nothing else changed.
yml=scaleout/observe/prometheus.yml
sed "s|\[\"app1:8080\", \"app2:8080\", \"app3:8080\"\]|[\"127.0.0.1:${ports[0]}\", \"127.0.0.1:${ports[1]}\"]|" \
  "$yml" >"$tmp/prometheus.yml"
ck "only the targets line differs from $yml" -- \
  test "$(diff "$yml" "$tmp/prometheus.yml" | grep -c '^[<>]')" = 2
pp=$(proc_free_port)
proc_start "$tmp/prometheus.log" prometheus --config.file="$tmp/prometheus.yml" \
  --storage.tsdb.path="$tmp/tsdb" --web.listen-address="127.0.0.1:$pp"
PIDS+=("$PROC_PID")
require "prometheus is ready" -- proc_wait_healthy "$PROC_PID" 20000 proc_http_ok "http://127.0.0.1:$pp/-/ready"
# Its scrape manager takes the targets up to 5 s after the start.
both_up() {
  http GET "http://127.0.0.1:$pp/api/v1/query?query=up"
  [ "$(grep -o '"value":\[[0-9.]*,"1"\]' <<<"$H_BODY" | wc -l)" = 2 ]
}
require "prometheus scrapes both instances" -- proc_wait_healthy "$PROC_PID" 20000 both_up

# The lesson: none oversells, token does not, one SKU each, both instances.
targets=(--target "http://127.0.0.1:${ports[0]}" --target "http://127.0.0.1:${ports[1]}")
"$LOAD" run "${targets[@]}" --mode none --sku obs-none --stock 50 --requests 300 \
  --concurrency 40 --work-ms 5 --expect oversell >"$tmp/none.txt" 2>&1
check $? "the none burst oversells (miaosha-load --expect oversell)"
"$LOAD" run "${targets[@]}" --mode token --sku obs-token --stock 50 --requests 200 \
  --concurrency 40 --work-ms 1 --wait-ms 30000 --expect safe >"$tmp/token.txt" 2>&1
check $? "the token burst is exact (miaosha-load --expect safe)"
# A second, small round a little later: rate() needs two scrapes that differ.
sleep 2
"$LOAD" run "${targets[@]}" --mode token --sku obs-token --stock -1 --requests 20 \
  --concurrency 4 >/dev/null 2>&1
"$LOAD" run "${targets[@]}" --mode none --sku obs-none --stock -1 --requests 20 \
  --concurrency 4 >/dev/null 2>&1
sleep 2.5 # two more scrapes (1 s) after the gauges' refresh (200 ms)

http GET "http://127.0.0.1:${ports[0]}/stock/obs-none"
none_audit=$H_BODY
http GET "http://127.0.0.1:${ports[0]}/stock/obs-token"
token_audit=$H_BODY

# Every panel's query, asked of Prometheus; the per-mode ones checked.
python3 - "$pp" scaleout/observe/grafana/dashboards/miaosha.json "$none_audit" "$token_audit" \
  >"$tmp/queries.txt" 2>&1 <<'EOF'
import json, sys, urllib.parse, urllib.request
port, dash = sys.argv[1], json.load(open(sys.argv[2]))
audit = {"none": json.loads(sys.argv[3]), "token": json.loads(sys.argv[4])}
bad = 0
def query(expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.load(r)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]
def ok(cond, what):
    global bad
    print(("ok   " if cond else "FAIL ") + what)
    bad += not cond
for p in dash["panels"]:
    for t in p["targets"]:
        res = query(t["expr"])
        ok(len(res) > 0, f"{p['title']} / {t['refId']}: {len(res)} series: {t['expr']}")
        if "by mode" not in p["title"] and "per mode (the SKU's audit)" not in p["title"]:
            continue
        field = {"Oversold": "oversold", "Stock": "stock", "Sold": "sold"}[p["title"].split()[0]]
        for mode in ("none", "token"):
            vals = [float(r["value"][1]) for r in res if r["metric"].get("mode") == mode
                    and r["metric"].get("sku") == f"obs-{mode}"]
            want = audit[mode][field]
            ok(vals == [want], f"{p['title']}: {mode} = {vals}, the audit's {field} {want}")
ok(audit["none"]["oversold"] > 0 and audit["token"]["oversold"] == 0,
   f"none oversold {audit['none']['oversold']}, token {audit['token']['oversold']}")
sys.exit(1 if bad else 0)
EOF
rc=$?
cat "$tmp/queries.txt"
check $rc "every dashboard query answers, per mode as the audits say"
finish
