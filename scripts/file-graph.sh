#!/usr/bin/env bash
# file-graph.sh BUILD_DIR — checks that no module's source files stand in a
# circle: "file A uses a function or variable that file B defines" must
# point one way only, inside lockcore/, config/, service/, loadtest/ and proc/
# (their tests, bench/ and fuzz/ are left out). Each module keeps shared
# helpers in leaf files with their own small header (lc_util.c,
# svc_reply.c, lg_matrix_cfg.c...), so the files can be read bottom-up.
#
# Reads the object files of a build (any configuration), so it sees what
# the compiler linked, not what the includes suggest: `nm` lists what each
# object defines and what it needs; tsort(1) finds a circle if there is one.
# Prints the order it found per module, or the circle; exit 1 on a circle.
set -euo pipefail
build=${1:?usage: file-graph.sh BUILD_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$build" ] || { echo "file-graph: no build directory $build" >&2; exit 2; }
command -v nm >/dev/null && command -v tsort >/dev/null ||
  { echo "file-graph: needs nm (binutils) and tsort (coreutils)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for module in lockcore config service loadtest proc; do
  objs=()
  # <build>/<module>/CMakeFiles/<target>.dir/<path below the module>.c.o,
  # kept only when that source still exists (a stale object of a moved file
  # would draw a file that is gone).
  while IFS= read -r o; do
    rel=${o#"$build/$module/CMakeFiles/"}
    rel=${rel#*.dir/}
    [ -f "$src/$module/${rel%.o}" ] && objs+=("$o")
  done < <(find "$build/$module/CMakeFiles" -name '*.c.o' -not -path '*/tests/*' 2>/dev/null | sort)
  [ ${#objs[@]} -gt 0 ] || { echo "file-graph: no objects of $module in $build (build it first)" >&2; exit 2; }
  : >"$tmp/def"; : >"$tmp/use"; : >"$tmp/edges"
  for o in "${objs[@]}"; do
    f=$(basename "$o" .c.o)
    nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 { print $3, f }' >>"$tmp/def"
    nm -u "$o" | awk -v f="$f" '{ print $2, f }' >>"$tmp/use"
    echo "$f $f" >>"$tmp/edges" # every file appears, even one that nobody uses
  done
  sort -o "$tmp/def" -u "$tmp/def"
  sort -o "$tmp/use" -u "$tmp/use"
  # "definer user": the definer comes first in the order.
  join "$tmp/use" "$tmp/def" | awk '$2 != $3 { print $3, $2 }' | sort -u >>"$tmp/edges"
  if order=$(tsort "$tmp/edges" 2>"$tmp/err"); then
    echo "$module: no circle; bottom-up: $(tr '\n' ' ' <<<"$order")"
  else
    echo "$module: CIRCLE among: $(grep -v 'input contains a loop' "$tmp/err" | sed 's/^tsort: //' | tr '\n' ' ')"
    status=1
  fi
done
exit $status
