#!/usr/bin/env bash
# readme-run.sh [--list] README... — runs the shell blocks a README marks
# as runnable, in order, the way a newcomer pastes them into one shell, in
# a fresh copy of the tree; fails when a command fails as written. The
# ctest readme_runnable runs README.md and README.zh.md.
#
# A block is runnable when the line right before its ```sh fence is
#   <!-- runnable -->
# (GitHub shows nothing of it). Such a block must run, as written, after
# the runnable blocks above it and on a machine set up by scripts/deps.sh:
# no placeholder, no root, no command a newcomer would have to change. The
# blocks of one README must stop what they start in the background (its
# last runnable block does). CONTRIBUTING.md, "Runnable README blocks".
#
# What this runner changes, and nothing else:
#   - ports: every whole number 6390..6399 or 8080..8089 in the marked
#     blocks becomes a free loopback port, one per number, the same in
#     every block of a README, so that the run never meets a server of the
#     machine or of another test (a newcomer keeps the README's ports);
#   - curl runs with --fail-with-body (a shell function in front of it), so
#     an HTTP error answer fails the block as it would stop a reader; a
#     curl given -f/-sf/--fail already fails so (curl refuses both).
# Where: a copy of the tracked files (and those not yet committed, as git
# ls-files --others --exclude-standard lists them) in a temp dir, so
# build/dev is a fresh build tree and nothing lands in the checkout. The
# READMEs run one after the other in that copy (the second one finds the
# first one's build), each in a new bash (set -e, pipefail, xtrace) in a
# process group of its own.
# Stopping: when a README's blocks end, fail or pass READMERUN_TIMEOUT_S
# (default 240) in all, every process of that group still alive is
# stopped by its PID (SIGTERM, SIGKILL after 5 s) — a process left running
# by blocks that passed is a failure too (the README forgot to stop it).
# Prints each block's README line and seconds; on a failure the log's
# tail. --list prints the marked blocks as they would run, runs nothing.
# READMERUN_KEEP=1 keeps the copy and the logs. Exit 0, 1 on a failure,
# 2 on bad usage.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=lib/proc.sh
. "$src/scripts/lib/proc.sh"
me=readme-run.sh
list=0
[ "${1:-}" = --list ] && { list=1; shift; }
[ $# -gt 0 ] || { echo "usage: $me [--list] README..." >&2; exit 2; }
limit_s=${READMERUN_TIMEOUT_S:-240}

# blocks README: the marked blocks as one script body, each block preceded
# by a line `#@block LINE` (LINE: its fence's line in README). A marker
# not followed by a ```sh fence is an error (status 1).
blocks() {
  awk -v f="$1" '
    mark && !in_block {
      if ($0 ~ /^```sh[ \t]*$/) { in_block = 1; mark = 0; print "#@block " NR; next }
      printf "%s:%d: <!-- runnable --> is not followed by a ```sh fence\n", f, NR - 1 > "/dev/stderr"
      bad = 1; mark = 0
    }
    in_block { if ($0 ~ /^```[ \t]*$/) { in_block = 0; next } print; next }
    /^<!-- runnable -->[ \t]*$/ { mark = 1 }
    END { if (in_block) { print f ": a runnable block is not closed" > "/dev/stderr"; bad = 1 } exit bad }
  ' "$1"
}

# group_pids PGID: the live (not zombie) processes of process group PGID.
group_pids() {
  local f st pid
  for f in /proc/[0-9]*/stat; do
    { read -r st <"$f"; } 2>/dev/null || continue
    pid=${f#/proc/}
    pid=${pid%/stat}
    st=${st##*) }
    # shellcheck disable=SC2086
    set -- $st # state, ppid, pgrp, ...
    [ "${3:-}" = "$PGID_WANTED" ] && [ "$1" != Z ] && echo "$pid"
  done
  return 0
}

# stop_group PGID: stops every process left in the group by its PID;
# prints what it stopped.
stop_group() {
  local p left
  left=$(PGID_WANTED=$1 group_pids)
  for p in $left; do
    echo "$me: stopping $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-120)"
    proc_stop "$p" "pid $p" 5
  done
}

work=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-readme.XXXXXX")
tree=$work/tree
keep=${READMERUN_KEEP:-0}
cleanup() { [ "$keep" = 1 ] && echo "$me: kept $work" || rm -rf "$work"; }
trap cleanup EXIT

if [ "$list" = 0 ]; then
  mkdir -p "$tree"
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$src" ls-files -z --cached --others --exclude-standard |
      tar -C "$src" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$tree" -xf -
  else
    tar -C "$src" --exclude=./build --exclude=./out -cf - . | tar -C "$tree" -xf -
  fi
fi

fails=0
t_all=$(proc_now_ms)
for readme in "$@"; do
  path=$src/$readme
  [ -r "$path" ] || { echo "$me: $readme: not found" >&2; exit 2; }
  body=$(blocks "$path") || { fails=$((fails + 1)); continue; }
  [ -n "$body" ] || { echo "$me: $readme: no block is marked <!-- runnable -->"; fails=$((fails + 1)); continue; }
  # one free port per README port number
  sub=()
  taken=" "
  ports=""
  for n in $(grep -v '^#@block' <<<"$body" | grep -oE '\b(639[0-9]|808[0-9])\b' | sort -u || true); do
    while :; do
      p=$(proc_free_port) || { echo "$me: no free port" >&2; exit 1; }
      [[ $taken == *" $p "* ]] || break
    done
    taken+="$p "
    ports+=" $n→$p"
    sub+=(-e "s/\\b$n\\b/$p/g")
  done
  [ ${#sub[@]} -eq 0 ] || body=$(sed -E "${sub[@]}" <<<"$body")
  if [ "$list" = 1 ]; then
    printf '### %s\n%s\n' "$readme" "$body"
    continue
  fi
  script=$work/${readme//\//_}.sh
  log=$work/${readme//\//_}.log
  marks=$work/${readme//\//_}.marks
  {
    printf '%s\n' 'proc_now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }' \
      "cd '$tree'" "set -eo pipefail" 'PS4="+ "' \
      'curl() { case " $* " in *" -f "*|*" -sf "*|*" --fail "*) command curl "$@" ;; *) command curl --fail-with-body "$@" ;; esac; }' 'set -x'
    while IFS= read -r line; do
      if [[ $line == '#@block '* ]]; then
        printf '{ set +x; } 2>/dev/null; echo "#@block %s $(proc_now_ms)" >>%q; set -x\n' \
          "${line#\#@block }" "$marks"
      else
        printf '%s\n' "$line"
      fi
    done <<<"$body"
    printf '{ set +x; } 2>/dev/null; echo "#@end $(proc_now_ms)" >>%q\n' "$marks"
  } >"$script"

  echo "=== $readme: $(grep -c '^#@block' <<<"$body") runnable block(s), ports${ports:- none}"
  proc_start "$log" bash "$script"
  pid=$PROC_PID
  deadline=$((t_all + limit_s * 1000))
  while proc_alive "$pid" && [ "$(proc_now_ms)" -lt "$deadline" ]; do sleep 0.2; done
  status=0
  if proc_alive "$pid"; then
    echo "$me: $readme: still running after ${limit_s} s in all: stopping it"
    stop_group "$pid"
    status=124
  fi
  if wait "$pid" 2>/dev/null; then st=0; else st=$?; fi
  [ "$status" = 124 ] || status=$st
  # what the blocks left running: a passing run must have stopped it all
  for _ in $(seq 50); do [ -z "$(PGID_WANTED=$pid group_pids)" ] && break; sleep 0.1; done
  left=$(stop_group "$pid")
  # each block: its README line and how long it took
  awk -v f="$readme" '
    /^#@block / { if (line) printf "  %s:%-5s %6.1f s\n", f, line, ($3 - t) / 1000; line = $2; t = $3 }
    /^#@end / { if (line) printf "  %s:%-5s %6.1f s\n", f, line, ($2 - t) / 1000; line = "" }
    END { if (line) printf "  %s:%-5s  (did not finish)\n", f, line }' "$marks"
  if [ "$status" != 0 ] || [ -n "$left" ]; then
    fails=$((fails + 1))
    echo "FAIL $readme: exit status $status${left:+; left running:}"
    [ -z "$left" ] || printf '%s\n' "$left"
    echo "--- the last 60 lines of $log:"
    tail -n 60 "$log"
  else
    echo "ok   $readme: every runnable block ran as written"
  fi
done
[ "$list" = 1 ] && exit 0
echo "$me: $(( ($(proc_now_ms) - t_all) / 1000 )) s"
[ "$fails" -eq 0 ] || { keep=1; exit 1; }
