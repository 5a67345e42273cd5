#!/usr/bin/env bash
# lc_symbols.sh LIB HEADER [NM] — liblockcore.a exports its contract and
# nothing else (ctest lockcore_symbols).
#
# The prefix is the rule: lc_ names are the public API, declared in
# lockcore.h; lc__ (two underscores) names are lockcore's own, shared
# between its sources and never part of the contract; a file's helpers are
# static. So, both ways:
#   * every global symbol LIB defines (nm: T, D, B, R...) starts with lc_,
#     and each one that does not start with lc__ is declared in HEADER;
#   * every function HEADER declares is defined in LIB.
# Prints each offender; exit 1 when there is one.
set -euo pipefail
lib=${1:?usage: lc_symbols.sh LIB HEADER [NM]}
header=${2:?usage: lc_symbols.sh LIB HEADER [NM]}
nm=${3:-nm}
[ -f "$lib" ] || { echo "lc_symbols: no library $lib (build it first)" >&2; exit 2; }
[ -f "$header" ] || { echo "lc_symbols: no header $header" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Global symbols the archive defines (an archive member's header line has
# no type column and is skipped by NF == 3; U is not defined).
"$nm" -g --defined-only "$lib" | awk 'NF == 3 && $2 != "U" { print $3 }' | sort -u >"$tmp/defined"
[ -s "$tmp/defined" ] || { echo "lc_symbols: $nm found no global symbol in $lib" >&2; exit 2; }

# The header without its comments, whose prose names functions too; then
# every lc_ name followed by "(" is a declared function (lockcore.h has no
# function-like lc_ macro and no function pointer named lc_).
awk '{ buf = buf $0 "\n" }
     END {
       out = ""
       while ((i = index(buf, "/*")) > 0) {
         out = out substr(buf, 1, i - 1) " "
         buf = substr(buf, i + 2)
         j = index(buf, "*/")
         if (j == 0) { buf = ""; break }
         buf = substr(buf, j + 2)
       }
       printf "%s", out buf
     }' "$header" | sed 's://.*$::' >"$tmp/code"
grep -oE '\blc_[A-Za-z0-9_]+[[:space:]]*\(' "$tmp/code" | sed 's/[[:space:](]*$//' | sort -u >"$tmp/declared"
# Data symbols would need an extern declaration (none today).
grep -oE '\bextern\b[^;]*\blc_[A-Za-z0-9_]+' "$tmp/code" | grep -oE '\blc_[A-Za-z0-9_]+$' |
  sort -u >>"$tmp/declared" || true
sort -u -o "$tmp/declared" "$tmp/declared"
[ -s "$tmp/declared" ] || { echo "lc_symbols: no lc_ declaration found in $header" >&2; exit 2; }

status=0
report() { # title file
  if [ -s "$2" ]; then
    echo "FAIL: $1:"
    sed 's/^/  /' "$2"
    status=1
  fi
}
grep -v '^lc_' "$tmp/defined" >"$tmp/outside" || true
report "global symbols of $(basename "$lib") outside the lc_ namespace (make them static, or lc__)" "$tmp/outside"
grep '^lc_' "$tmp/defined" | grep -v '^lc__' >"$tmp/public" || true
comm -23 "$tmp/public" "$tmp/declared" >"$tmp/undeclared"
report "lc_ symbols of $(basename "$lib") not declared in $(basename "$header") (make them static, or lc__)" "$tmp/undeclared"
comm -13 "$tmp/defined" "$tmp/declared" >"$tmp/undefined"
report "functions $(basename "$header") declares that $(basename "$lib") does not define" "$tmp/undefined"
grep '^lc__' "$tmp/declared" >"$tmp/internal_declared" || true
report "lc__ (internal) names declared in $(basename "$header")" "$tmp/internal_declared"

[ $status -ne 0 ] || echo "ok: $(wc -l <"$tmp/public") public symbols, each declared in $(basename "$header");" \
  "$(wc -l <"$tmp/declared") declarations, each defined;" \
  "$(grep -c '^lc__' "$tmp/defined" || true) lc__ internal symbols"
exit $status
