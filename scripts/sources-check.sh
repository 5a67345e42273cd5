#!/usr/bin/env bash
# sources-check.sh — every module README's "Sources" table matches the tree:
# each file it lists exists, and each file of the module is listed.
#
# A module is a top-level folder with a README.md (docs/ and the root are
# not modules). Its "## Sources" section holds a Markdown table whose first
# column names files in backquotes, relative to the module:
#   `src/svc_http.c/.h`          src/svc_http.c and src/svc_http.h
#   `a.lua`, `b.lua`             several in one cell
#   `tests/test_service_<name>.c` a family: <...> matches any name (at
#                                least one file must match)
#   `corpus/`                    a folder: every file below it
#   `../scripts/lib/proc.sh`     outside the module: must exist, that is all
# Every file git tracks under the module counts, except README.md itself.
# Prints each mismatch; exit 1 when there is one, 2 on bad usage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v git >/dev/null || { echo "sources-check: needs git" >&2; exit 2; }
status=0
fail() { echo "sources-check: $*"; status=1; }

for readme in */README.md; do
  mod=${readme%/README.md}
  [ "$mod" = docs ] && continue
  if ! grep -q '^## Sources' "$readme"; then
    fail "$readme has no \"## Sources\" table"
    continue
  fi
  # First cells of the table rows after "## Sources" (up to the next "## ").
  tokens=$(awk '
    /^## Sources/ { on = 1; next }
    on && /^## / { exit }
    on && /^\|/ {
      split($0, cell, "|"); c = cell[2]
      while (match(c, /`[^`]+`/)) { print substr(c, RSTART + 1, RLENGTH - 2); c = substr(c, RSTART + RLENGTH) }
    }' "$readme")
  listed=$(mktemp); : >"$listed"
  while IFS= read -r t; do
    [ -n "$t" ] || continue
    case "$t" in
      *' '*|*'('*) continue ;; # prose in backquotes (a command, a name), not a path
    esac
    if [[ "$t" == ../* ]]; then
      [ -e "$mod/$t" ] || fail "$readme lists $t, which does not exist"
      continue
    fi
    if [[ "$t" == */ ]]; then
      n=$(git ls-files -- "$mod/$t" | tee -a "$listed" | wc -l)
      [ "$n" -gt 0 ] || fail "$readme lists the folder $t, which holds no tracked file"
      continue
    fi
    paths=("$t")
    if [[ "$t" == *.c/.h ]]; then paths=("${t%/.h}" "${t%.c/.h}.h"); fi
    for p in "${paths[@]}"; do
      if [[ "$p" == *'<'*'>'* ]]; then
        glob=$(printf '%s' "$p" | sed 's/<[^>]*>/*/g')
        n=$(git ls-files -- "$mod/$glob" | tee -a "$listed" | wc -l)
        [ "$n" -gt 0 ] || fail "$readme lists $p, which matches no file"
      elif [ -e "$mod/$p" ]; then
        echo "$mod/$p" >>"$listed"
      else
        fail "$readme lists $p, which does not exist"
      fi
    done
  done <<<"$tokens"
  while IFS= read -r f; do
    [ "$f" = "$readme" ] && continue
    grep -qxF "$f" "$listed" || fail "$readme does not list ${f#"$mod"/}"
  done < <(git ls-files -- "$mod")
  rm -f "$listed"
done
[ $status -eq 0 ] && echo "sources-check: every module README lists its files"
exit $status
