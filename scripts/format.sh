#!/usr/bin/env bash
# format.sh [--check] — formats every tracked C source and header (*.c, *.h
# from git ls-files) with clang-format and the repository's .clang-format.
#
#   bash scripts/format.sh            rewrite the files in place
#   bash scripts/format.sh --check    change nothing; list the files that are
#                                     not formatted and exit 1 (0 when all are)
#
# clang-format comes from Debian's clang-format package (version 14 on
# Debian 12; .clang-format uses only options it knows). When it is missing
# this prints the exact apt-get line and exits 2, as scripts/deps.sh does.
# CLANG_FORMAT=path overrides the binary.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "format.sh needs clang-format (Debian package clang-format); run as root:" >&2
  echo "  apt-get update && apt-get install -y clang-format" >&2
  exit 2
fi

mapfile -t files < <(git ls-files -- '*.c' '*.h')
[ ${#files[@]} -gt 0 ] || { echo "format.sh: no tracked C files" >&2; exit 0; }

if [ $check -eq 0 ]; then
  "$cf" -i --style=file -- "${files[@]}"
  exit 0
fi

# --check: compare clang-format's output with each file, write nothing.
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file -- "$f" | cmp -s - "$f"; then
    bad+=("$f")
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not formatted (run: bash scripts/format.sh):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted"
