#!/usr/bin/env bash
# bench/bundle.sh DIR — everything `bench/run.sh --no-build` needs, in one
# folder to copy to a machine that has no compiler and no -dev packages
# (bench/README.md, "Without a compiler"):
#
#   DIR/miaosha/      this tree's tracked files, with build/bench's Release
#                     binaries (and the peers' Node libraries when installed)
#   DIR/tools/bin/    redis-server, redis-cli, redis-benchmark, wrk, nginx
#   DIR/tools/lib/    the shared libraries those and the binaries load (ldd),
#                     except glibc's own: the target must run the same Debian
#                     release as this machine (or one with a newer glibc)
#   DIR/run.sh        runs bench/run.sh --no-build with tools/bin first on
#                     PATH and tools/lib on LD_LIBRARY_PATH; takes run.sh's
#                     arguments (parts, --seconds, --rounds)
#
# Build first (`bash bench/run.sh` builds build/bench). python3 (the
# service part's live-page poller, the summary's SVG) and Node.js (the
# peers part) are taken from the target machine when it has them.
set -euo pipefail
dir=${1:?usage: bench/bundle.sh DIR}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build/bench
bins=(bench/lc_bench bench/cs_bench service/miaosha-server loadtest/miaosha-load)
tools=(redis-server redis-cli redis-benchmark wrk nginx)

[ -x /usr/sbin/nginx ] && PATH=$PATH:/usr/sbin
for b in "${bins[@]}"; do
  [ -x "$BUILD/$b" ] || { echo "bundle: $BUILD/$b missing: run 'bash bench/run.sh' once first" >&2; exit 1; }
done
for t in "${tools[@]}"; do
  command -v "$t" >/dev/null || { echo "bundle: $t not found (bash scripts/deps.sh --with-tools)" >&2; exit 1; }
done
[ ! -e "$dir" ] || [ -z "$(ls -A "$dir")" ] || { echo "bundle: $dir exists and is not empty" >&2; exit 1; }

mkdir -p "$dir/miaosha" "$dir/tools/bin" "$dir/tools/lib"
dir=$(cd "$dir" && pwd)
git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 cp --parents -t "$dir/miaosha")
mkdir -p "$dir/miaosha/build/bench"
(cd "$BUILD" && cp --parents -t "$dir/miaosha/build/bench" -- "${bins[@]}")
[ -d "$BUILD/peers/node_modules" ] && cp -r "$BUILD/peers" "$dir/miaosha/build/bench/peers"

libs() { # libs FILE: the shared libraries FILE loads, glibc's own left out
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|ld-linux[^/]*)\.so' || true
}
for t in "${tools[@]}"; do
  cp -L "$(command -v "$t")" "$dir/tools/bin/"
  for l in $(libs "$(command -v "$t")"); do cp -Ln "$l" "$dir/tools/lib/"; done
done
for b in "${bins[@]}"; do
  for l in $(libs "$BUILD/$b"); do cp -Ln "$l" "$dir/tools/lib/"; done
done

cat >"$dir/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs miaosha's benchmarks with the binaries of this bundle (bench/bundle.sh).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH=$here/tools/bin:$PATH
export LD_LIBRARY_PATH=$here/tools/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec bash "$here/miaosha/bench/run.sh" --no-build "$@"
EOF
chmod +x "$dir/run.sh"
echo "bundle: $dir ($(du -sh "$dir" | cut -f1)); on the target: bash $(basename "$dir")/run.sh [parts] [--seconds N]"
