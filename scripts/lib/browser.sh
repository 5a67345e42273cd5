# browser.sh — headless Chromium for the project's tests (sourced, bash).
#
# The pages miaosha writes or serves (the timelines, matrix.html, the live
# page) draw themselves with JavaScript, so a test has to run them in a real
# browser and read the DOM the script left: Debian's `chromium` with
# --headless --no-sandbox --disable-gpu and a virtual time budget (the
# page's timers and fetches run against a virtual clock, so the dump comes
# when the budget is spent, not after a guessed sleep). Each call runs one
# browser process with a profile directory of its own (several tests may
# drive Chromium at once) under a hard `timeout`.
# Sourcing defines functions only: no variable, trap or shell option is set.
# Every function is safe under `set -euo pipefail`.

# browser_bin: prints the Chromium binary ($MIAOSHA_CHROMIUM, else chromium,
# else chromium-browser on PATH). Status 1, with a line on stderr, when there
# is none: a test must fail then, never skip (scripts/deps.sh installs it).
browser_bin() {
  local b
  for b in "${MIAOSHA_CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$b" ] || continue
    if command -v "$b" >/dev/null 2>&1; then
      command -v "$b"
      return 0
    fi
  done
  echo "browser.sh: no Chromium found (apt-get install chromium; scripts/deps.sh)" >&2
  return 1
}

# _browser_run WORKDIR TIMEOUT_S ARGS...: one headless Chromium with a fresh
# profile under WORKDIR; its stderr goes to WORKDIR/chromium.log.
_browser_run() {
  local work=$1 t=$2 bin profile rc=0
  shift 2
  bin=$(browser_bin) || return 1
  mkdir -p "$work"
  profile=$(mktemp -d "$work/profile.XXXXXX")
  timeout -k 5 "$t" "$bin" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
    --no-first-run --no-default-browser-check --disable-extensions \
    --user-data-dir="$profile" "$@" 2>>"$work/chromium.log" || rc=$?
  rm -rf "$profile"
  return "$rc"
}

# browser_dump URL OUT [BUDGET_MS] [WORKDIR]: loads URL (file:// or
# http://), lets its scripts run for BUDGET_MS of virtual time (default
# 5000), and writes the serialized DOM to OUT. WORKDIR (default OUT's
# directory) holds the profile while it runs and chromium.log. Status 1 when
# Chromium is missing, failed, took longer than 90 s, or wrote no DOM.
browser_dump() {
  local url=$1 out=$2 budget=${3:-5000} work=${4:-$(dirname "$2")}
  _browser_run "$work" 90 --virtual-time-budget="$budget" --dump-dom "$url" >"$out" || return 1
  [ -s "$out" ] || { echo "browser.sh: empty DOM from $url (see $work/chromium.log)" >&2; return 1; }
}

# browser_screenshot URL PNG [BUDGET_MS] [WIDTH,HEIGHT] [WORKDIR]: the same
# load, then a PNG of the window (default 1400,900) written to PNG. Status 1
# when no PNG (by its magic bytes) came out.
browser_screenshot() {
  local url=$1 png=$2 budget=${3:-5000} size=${4:-1400,900} work=${5:-$(dirname "$2")}
  rm -f "$png"
  _browser_run "$work" 90 --virtual-time-budget="$budget" --hide-scrollbars \
    --window-size="$size" --screenshot="$png" "$url" >/dev/null || return 1
  [ "$(head -c 8 "$png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || {
    echo "browser.sh: no PNG at $png from $url (see $work/chromium.log)" >&2
    return 1
  }
}

# browser_page URL DOM PNG [BUDGET_MS]: browser_dump, then
# browser_screenshot, of the same URL.
browser_page() {
  browser_dump "$1" "$2" "${4:-5000}" && browser_screenshot "$1" "$3" "${4:-5000}"
}

# browser_cjk_glyphs PAGE DOM SELECTOR...: does the Chinese text of the
# HTML file PAGE draw as characters, not as empty boxes? A copy of PAGE
# (PAGE.cjk.html, beside it, so its relative links still resolve) gets
# scripts/lib/cjk-glyphs.js and one call per SELECTOR before </body>;
# Chromium loads the copy and the DOM is written to DOM. Prints one line
# per SELECTOR, "SELECTOR: distinct N" or what failed ("same AB": two
# characters drew the same image). Status 1 when any answer is not
# "distinct", or the browser failed.
browser_cjk_glyphs() {
  local page=$1 dom=$2 probe answers sel js="" rc=0
  shift 2
  probe=$(dirname "${BASH_SOURCE[0]}")/cjk-glyphs.js
  [ -r "$probe" ] || { echo "browser.sh: $probe is missing" >&2; return 1; }
  for sel in "$@"; do
    case $sel in *[\'\"\\]*) echo "browser.sh: selector $sel: no quotes or backslashes" >&2; return 1 ;; esac
    js+="'$sel',"
  done
  awk -v probe="$probe" -v list="$js" '
    /<\/body>/ && !done {
      print "<script>"; while ((getline l < probe) > 0) print l; print "</script>"
      print "<script>document.body.setAttribute(\"data-cjk\", [" list "].map(function (s) {"
      print "  return s + \": \" + window.miaoshaCjkGlyphs(s); }).join(\" | \"));</script>"
      done = 1
    }
    { print }' "$page" >"$page.cjk.html"
  browser_dump "file://$(cd "$(dirname "$page")" && pwd)/${page##*/}.cjk.html" "$dom" || return 1
  answers=$(grep -o 'data-cjk="[^"]*"' "$dom" | head -1 | sed 's/^data-cjk="//; s/"$//; s/&gt;/>/g; s/&amp;/\&/g')
  [ -n "$answers" ] || { echo "browser.sh: no glyph answer in $dom" >&2; return 1; }
  while IFS= read -r a; do
    echo "$a"
    [[ $a == *": distinct "* ]] || rc=1
  done < <(printf '%s\n' "${answers// | /$'\n'}")
  return "$rc"
}

# browser_count DOM TEXT: prints how many times TEXT occurs in the file DOM
# (e.g. 'class="oversold"'), 0 when none.
browser_count() {
  { grep -o -F -- "$2" "$1" || true; } | wc -l | tr -d ' '
}
