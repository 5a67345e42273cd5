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

# browser_count DOM TEXT: prints how many times TEXT occurs in the file DOM
# (e.g. 'class="oversold"'), 0 when none.
browser_count() {
  { grep -o -F -- "$2" "$1" || true; } | wc -l | tr -d ' '
}
