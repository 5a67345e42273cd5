#!/usr/bin/env bash
# test_timeline_browser.sh — the timeline pages in a real browser.
#
# 1. `run --timeline` of a `none` burst that oversells (work_ms widens the
#    race): headless Chromium loads the page from file:// and the DOM holds
#    exactly the audit's `oversold` highlighted units (class="oversold");
#    No lock-wait bar on a `none` lane (none takes no lock), one on every
#    `token` lane. A `lua` burst on a server with the local sold-out flag:
#    the purchases the flag answered are not traced, and the page says so
#    (lanes + left out = sent, some of them the flag's).
#    a `token` burst with --lang zh: none, and the Chinese words, drawn as
#    characters (no two distinct ones the same image: no font draws them
#    all as one empty box; scripts/lib/cjk-glyphs.js).
#    A `fenced` slow-holder burst (work_ms 300 > lease_ms 100, holders
#    queued by wait_ms): the store refuses the stale holders' writes (409
#    fenced_out); the DOM holds one mark (class="fenced-out") per
#    fenced_out record of GET /trace, which equals the run's fenced_out.
#    The same two bursts on a SKU split into 4 stock buckets (--buckets 4):
#    each bucket counts alone, against its initial stock and stock left
#    from the audit (the page carries them), so `none` shows the audit's
#    oversold and `token` none, although every bucket reads the same stock
#    values; each lane of a purchase that tried a bucket names it.
# 2. A quick matrix of two cells (race × none, token): matrix.html links to
#    both timelines; in each, the highlighted units equal the cell's
#    `oversold` in matrix.csv and the page's audit.
#    `--trials 3 --lang zh`: three CSV rows with a trial column, matrix.html
#    in Chinese (drawn as characters) with the histograms.
# 3. Escaping: the service refuses user=<script>alert(1)</script> (400), so
#    a saved /trace with that user (and an <img onerror> as SKU) goes through
#    `miaosha-load timeline`: the DOM shows both as text, and no element
#    was injected (the page's own three scripts, no <img>).
# A screenshot of every page is saved under the build directory
# (loadtest/timeline-browser/*.png). No Chromium: the test fails.
set -euo pipefail
src=${MIAOSHA_SOURCE_DIR:?}
build=${MIAOSHA_BUILD_DIR:?}
# shellcheck source=../../scripts/lib/proc.sh
. "$src/scripts/lib/proc.sh"
# shellcheck source=../../scripts/lib/browser.sh
. "$src/scripts/lib/browser.sh"

load=$build/loadtest/miaosha-load
server=$build/service/miaosha-server
out=$build/loadtest/timeline-browser
rm -rf "$out"
mkdir -p "$out"
fails=0
# ck MESSAGE CMD...: runs CMD (a test, a grep); counts a failure when it fails.
ck() {
  local msg=$1
  shift
  if "$@"; then echo "ok   $msg"; else echo "FAIL $msg"; fails=$((fails + 1)); fi
}
die() { echo "FAIL $*"; exit 1; }

browser_bin >/dev/null || die "Chromium is required for this test"
[ -x "$load" ] && [ -x "$server" ] || die "build miaosha-load and miaosha-server first"

srv_pid=""
srv2_pid=""
redis_pid=""
cleanup() {
  [ -z "$srv_pid" ] || proc_stop "$srv_pid" miaosha-server
  [ -z "$srv2_pid" ] || proc_stop "$srv2_pid" miaosha-server
  [ -z "$redis_pid" ] || proc_stop "$redis_pid" redis-server
}
trap cleanup EXIT

proc_start_redis "${MIAOSHA_REDIS_SERVER:-redis-server}" "$out/redis" || die "redis-server"
redis_pid=$PROC_REDIS_PID
port=$(proc_free_port)
# Without the local sold-out flag: every purchase then reaches a worker and
# is traced (one answered from the flag, on the HTTP thread, is not), so the
# lanes can be counted against the requests.
proc_start "$out/server.log" "$server" --port "$port" --redis "127.0.0.1:$PROC_REDIS_PORT" \
  --instance-id tl-browser --set purchase.local_sold_out=false
srv_pid=$PROC_PID
base=http://127.0.0.1:$port
proc_wait_healthy "$srv_pid" 10000 proc_http_ok "$base/healthz" || die "server not healthy"

json_num() { # json_num FILE KEY: the integer value of "KEY": in the JSON of FILE
  { tr -d ' \t\n' <"$1" | grep -o "\"$2\":-\?[0-9]*" || true; } | head -1 | cut -d: -f2
}

# --- 1. run --timeline ------------------------------------------------------
"$load" run --mode none --requests 200 --concurrency 40 --stock 20 --work-ms 10 \
  --target "$base" --json --timeline "$out/run-none.html" >"$out/run-none.json" ||
  die "run none failed (exit $?)"
over=$(json_num "$out/run-none.json" oversold)
ck "run none oversold ($over) > 0" [ "${over:-0}" -gt 0 ]
browser_page "file://$out/run-none.html" "$out/run-none.dom" "$out/run-none.png" ||
  die "chromium on run-none.html"
n=$(browser_count "$out/run-none.dom" 'class="oversold"')
ck "run none: $n highlighted oversold units in the DOM = audit oversold $over" [ "$n" = "$over" ]
ck "run none: the page shows the audit's oversold $over" grep -q "id=\"audit-oversold\">$over<" "$out/run-none.dom"
ck "run none: the renderer counted $over from the trace" grep -q "data-trace-oversold=\"$over\"" "$out/run-none.dom"
ck "run none: no lock-wait bar (none takes no lock)" [ "$(browser_count "$out/run-none.dom" 'class="wait"')" = 0 ]
ck "run none: every purchase traced, nothing said left out" [ "$(browser_count "$out/run-none.dom" 'class="left-out"')" = 0 ]

"$load" run --mode token --requests 60 --concurrency 20 --stock 20 --work-ms 2 --wait-ms 30000 \
  --target "$base" --json --lang zh --timeline "$out/run-token-zh.html" >"$out/run-token.json" ||
  die "run token failed"
ck "run token: audit oversold 0" [ "$(json_num "$out/run-token.json" oversold)" = 0 ]
browser_page "file://$out/run-token-zh.html" "$out/run-token-zh.dom" "$out/run-token-zh.png" ||
  die "chromium on run-token-zh.html"
ck "run token: no highlighted oversold unit" [ "$(browser_count "$out/run-token-zh.dom" 'class="oversold"')" = 0 ]
ck "run token --lang zh: Chinese labels in the DOM" grep -q '超卖件数.*购买时间线\|购买时间线.*超卖件数' \
  <(tr -d '\n' <"$out/run-token-zh.dom")
# The Chinese must draw as characters: without a CJK font the DOM above
# still holds the words, but every one is the same empty box.
if glyphs=$(browser_cjk_glyphs "$out/run-token-zh.html" "$out/run-token-zh.cjk.dom" \
  h1 .mtl-summary .mtl-legend); then g=0; else g=1; fi
ck "run token --lang zh: the Chinese draws as distinct glyphs ($(echo $glyphs))" [ "$g" = 0 ]
ck "run token: one lane per purchase (60)" [ "$(browser_count "$out/run-token-zh.dom" 'class="lane')" = 60 ]
ck "run token: a lock-wait bar on every lane (60)" [ "$(browser_count "$out/run-token-zh.dom" 'class="wait"')" = 60 ]

# With the local sold-out flag (the default): once the stock is gone most
# purchases are answered on the HTTP thread and never traced. The page
# says how many it leaves out and why, and lanes + left out = sent.
port2=$(proc_free_port)
proc_start "$out/server-flag.log" "$server" --port "$port2" --redis "127.0.0.1:$PROC_REDIS_PORT" \
  --instance-id tl-flag
srv2_pid=$PROC_PID
proc_wait_healthy "$srv2_pid" 10000 proc_http_ok "http://127.0.0.1:$port2/healthz" || die "server 2 not healthy"
"$load" run --mode lua --sku tl-flag --requests 300 --concurrency 20 --stock 5 \
  --target "http://127.0.0.1:$port2" --json --timeline "$out/run-flag.html" >"$out/run-flag.json" ||
  die "run lua (flag) failed"
proc_stop "$srv2_pid" miaosha-server
srv2_pid=""
browser_dump "file://$out/run-flag.html" "$out/run-flag.dom" || die "chromium on run-flag.html"
lanes=$(browser_count "$out/run-flag.dom" 'class="lane')
left=$(grep -o 'data-left-out="[0-9]*"' "$out/run-flag.dom" | grep -o '[0-9]*' || true)
flag=$(grep -o 'data-local="[0-9]*"' "$out/run-flag.dom" | grep -o '[0-9]*' || true)
ck "run lua with the flag: $lanes lanes + ${left:-no} left out = 300 sent" [ "$((lanes + ${left:-0}))" = 300 ]
ck "run lua with the flag: ${flag:-no} of them answered by the flag (> 0)" [ "${flag:-0}" -gt 0 ]
ck "run lua with the flag: the page says why" grep -q "answered by an instance's local sold-out flag" "$out/run-flag.dom"
ck "run lua: no lock-wait bar (lua takes no lock)" [ "$(browser_count "$out/run-flag.dom" 'class="wait"')" = 0 ]

# Four stock buckets: their counters read the same values (5, 4, ... in
# each), so only a count bucket by bucket matches the audit.
"$load" run --mode none --sku tl-buckets --buckets 4 --requests 200 --concurrency 40 --stock 20 \
  --work-ms 10 --target "$base" --json --timeline "$out/run-none-buckets.html" \
  >"$out/run-none-buckets.json" || die "run none --buckets failed (exit $?)"
over=$(json_num "$out/run-none-buckets.json" oversold)
ck "run none --buckets 4: oversold ($over) > 0" [ "${over:-0}" -gt 0 ]
browser_page "file://$out/run-none-buckets.html" "$out/run-none-buckets.dom" \
  "$out/run-none-buckets.png" || die "chromium on run-none-buckets.html"
n=$(browser_count "$out/run-none-buckets.dom" 'class="oversold"')
ck "run none --buckets 4: $n highlighted oversold units = audit oversold $over" [ "$n" = "$over" ]
# The page counts against each bucket's ends from the audit, not against
# the trace's last commit (not always Redis's last write: the race itself).
ends=$(grep -o 'buckets: \[[^]]*\]' "$out/run-none-buckets.html" | grep -o 'initial: [0-9]*' | wc -l)
ck "run none --buckets 4: the page carries the audit's 4 bucket ends ($ends)" [ "$ends" = 4 ]
"$load" run --mode token --sku tl-buckets-t --buckets 4 --requests 60 --concurrency 20 --stock 20 \
  --work-ms 2 --wait-ms 30000 --target "$base" --json --timeline "$out/run-token-buckets.html" \
  >"$out/run-token-buckets.json" || die "run token --buckets failed"
ck "run token --buckets 4: audit oversold 0" [ "$(json_num "$out/run-token-buckets.json" oversold)" = 0 ]
browser_page "file://$out/run-token-buckets.html" "$out/run-token-buckets.dom" \
  "$out/run-token-buckets.png" || die "chromium on run-token-buckets.html"
ck "run token --buckets 4: no highlighted oversold unit" \
  [ "$(browser_count "$out/run-token-buckets.dom" 'class="oversold"')" = 0 ]
proc_http GET "$base/trace/tl-buckets-t"
[ "$H_CODE" = 200 ] || die "GET /trace/tl-buckets-t answered $H_CODE"
tb=$(printf '%s\n' "$H_BODY" | grep -c '"bucket":' || true)
ck "run token --buckets 4: every purchase that tried a bucket has its lane name it ($tb >= 20 sales)" \
  bash -c '[ "$1" = "$2" ] && [ "$2" -ge 20 ]' _ "$(browser_count "$out/run-token-buckets.dom" 'data-bucket=')" "$tb"

# A slow holder in fenced mode: every lease runs out while its holder
# works, the next waiter gets in and raises the fence, and the stale
# holder's write is refused. Stock 100: nothing sells out, every 409 is a
# fenced_out.
"$load" run --mode fenced --sku tl-fenced --requests 12 --concurrency 6 --stock 100 --work-ms 300 \
  --lease-ms 100 --wait-ms 5000 --target "$base" --json --timeline "$out/run-fenced.html" \
  >"$out/run-fenced.json" || die "run fenced failed (exit $?)"
fo=$(json_num "$out/run-fenced.json" fenced_out)
ck "run fenced: fenced_out answers ($fo) > 0" [ "${fo:-0}" -gt 0 ]
proc_http GET "$base/trace/tl-fenced"
[ "$H_CODE" = 200 ] || die "GET /trace/tl-fenced answered $H_CODE"
printf '%s\n' "$H_BODY" >"$out/run-fenced.jsonl"
tfo=$(grep -c '"error":"fenced_out"' "$out/run-fenced.jsonl" || true)
ck "run fenced: the trace holds the run's $fo fenced_out answers ($tfo)" [ "$tfo" = "$fo" ]
browser_page "file://$out/run-fenced.html" "$out/run-fenced.dom" "$out/run-fenced.png" ||
  die "chromium on run-fenced.html"
n=$(browser_count "$out/run-fenced.dom" 'class="fenced-out"')
ck "run fenced: $n fenced-out marks in the DOM = $tfo fenced_out records in the trace" [ "$n" = "$tfo" ]
ck "run fenced: the renderer counted $tfo" grep -q "data-fenced-out=\"$tfo\"" "$out/run-fenced.dom"
ck "run fenced: the legend names fenced_out" grep -q 'write refused by the fence (fenced_out)' "$out/run-fenced.dom"
ck "run none: no fenced-out mark" [ "$(browser_count "$out/run-none.dom" 'class="fenced-out"')" = 0 ]

# --- 2. matrix.html and its timelines -----------------------------------------
"$load" matrix --quick --modes none,token --scenarios race --server "$server" \
  --out "$out/mx" >"$out/mx.txt" 2>"$out/mx.err" || die "matrix failed (see $out/mx.err)"
browser_page "file://$out/mx/matrix.html" "$out/matrix.dom" "$out/matrix.png" ||
  die "chromium on matrix.html"
ck "matrix.html links both cells to their timelines" [ "$(browser_count "$out/matrix.dom" 'href="timeline-race-')" = 2 ]
for mode in none token; do
  csv_over=$(awk -F, -v m="$mode" '$1 == "race" && $2 == m { print $9 }' "$out/mx/matrix.csv")
  page="$out/mx/timeline-race-$mode.html"
  browser_page "file://$page" "$out/mx-$mode.dom" "$out/timeline-race-$mode.png" ||
    die "chromium on $page"
  n=$(browser_count "$out/mx-$mode.dom" 'class="oversold"')
  ck "matrix race/$mode: $n highlighted oversold units = matrix.csv oversold $csv_over" \
    [ "$n" = "${csv_over:-missing}" ]
  ck "matrix race/$mode: the page's audit says $csv_over" grep -q "id=\"audit-oversold\">$csv_over<" "$out/mx-$mode.dom"
  ck "matrix.html cell race/$mode carries oversold $csv_over" grep -q "data-oversold=\"$csv_over\"" "$out/matrix.dom"
done
ck "matrix race/none oversold > 0" [ "$(awk -F, '$1 == "race" && $2 == "none" { print ($9 > 0) }' "$out/mx/matrix.csv")" = 1 ]

# --- 2b. --trials, in Chinese ----------------------------------------------------
"$load" matrix --quick --modes none --scenarios race --trials 3 --lang zh --server "$server" \
  --out "$out/mx3" >"$out/mx3.txt" 2>"$out/mx3.err" || die "matrix --trials 3 failed"
ck "matrix --trials 3: a trial column" grep -q '^scenario,mode,trial,expected,' "$out/mx3/matrix.csv"
ck "matrix --trials 3: rows race,none,1..3" \
  test "$(grep -c '^race,none,[123],oversell,oversell,true,' "$out/mx3/matrix.csv")" = 3
browser_page "file://$out/mx3/matrix.html" "$out/matrix-trials.dom" "$out/matrix-trials-zh.png" ||
  die "chromium on the trials' matrix.html"
ck "matrix.html --lang zh: Chinese title, mode name as in the URL" \
  grep -q '超卖矩阵.*<th>none</th>' <(tr -d '\n' <"$out/matrix-trials.dom")
if glyphs=$(browser_cjk_glyphs "$out/mx3/matrix.html" "$out/matrix-trials.cjk.dom" h1 thead); then
  g=0
else
  g=1
fi
ck "matrix.html --lang zh: the Chinese draws as distinct glyphs ($(echo $glyphs))" [ "$g" = 0 ]
ck "matrix.html: the trials table (3 trials of race/none)" \
  grep -q 'data-scenario="race" data-mode="none" data-trials="3"' "$out/matrix-trials.dom"
ck "matrix.html: three histograms for the cell" \
  test "$(browser_count "$out/matrix-trials.dom" 'class="hist"')" = 3

# --- 3. escaping ------------------------------------------------------------
proc_http POST "$base/miaosha/none?sku=esc&user=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
ck "the service refuses user=<script>... ($H_CODE)" [ "$H_CODE" = 400 ]
proc_http PUT "$base/stock/esc?stock=1" # a never-stocked SKU is 404 unknown_sku
ck "sku esc stocked ($H_CODE)" [ "$H_CODE" = 200 ]
proc_http POST "$base/miaosha/none?sku=esc&user=u1"
ck "a plain purchase of sku esc ($H_CODE)" grep -qx '200\|409' <<<"$H_CODE"
proc_http GET "$base/trace/esc"
[ "$H_CODE" = 200 ] || die "GET /trace/esc answered $H_CODE"
printf '%s' "$H_BODY" | sed -e 's|"user":"u1"|"user":"<script>alert(1)</script>"|' \
  -e 's|"sku":"esc"|"sku":"</script><img src=x onerror=alert(2)>"|' >"$out/esc.jsonl"
grep -q '"user":"<script>alert(1)</script>"' "$out/esc.jsonl" || die "trace edit failed"
"$load" timeline --trace "$out/esc.jsonl" --sku '<img src=x onerror=alert(3)>' --mode none \
  --out "$out/esc.html" || die "timeline failed"
ck "esc.html holds no raw <script>alert / <img src=x" \
  test "$(grep -c '<script>alert\|<img src=x' "$out/esc.html")" = 0
browser_page "file://$out/esc.html" "$out/esc.dom" "$out/esc.png" || die "chromium on esc.html"
ck "the user <script>alert(1)</script> is shown as text" grep -q '&lt;script&gt;alert(1)&lt;/script&gt;' "$out/esc.dom"
ck "the SKU <img ...> is shown as text" grep -q '&lt;img src=x onerror=alert(3)&gt;' "$out/esc.dom"
ck "no element injected: the page's own 3 scripts" [ "$(browser_count "$out/esc.dom" '<script')" = 3 ]
ck "no element injected: no <img>" [ "$(browser_count "$out/esc.dom" '<img')" = 0 ]

ls "$out"/*.png
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks passed"
