#!/usr/bin/env bash
# install_check.sh — the product builds, installs and is usable without the
# test tools.
#
# Configures a fresh build of the source tree with -DMIAOSHA_BUILD_TESTS=OFF
# (Release, into a temp dir), builds it with -j2, `cmake --install`s it to a
# temp prefix, checks that lockcore's test hooks stayed out of it
# (lockcore/testing/lc_testhooks.h, and no lc__ name or hook in the
# installed lockcore.h), then uses only what was installed:
#   * <prefix>/bin/miaosha-server with <prefix>/etc/miaosha/miaosha.json,
#     on the suite's redis-server and a free loopback port: /healthz is 200
#     and a token purchase sells one unit;
#   * a small C program that acquires and releases a token lock on the
#     suite's Redis, compiled with `pkg-config --cflags --libs lockcore`
#     (PKG_CONFIG_PATH at the prefix);
#   * the same program built by a CMake project through
#     find_package(miaosha) and target_link_libraries(... miaosha::lockcore).
. "$(dirname "$0")/lib.sh"
RPORT=$(cat "${MIAOSHA_TEST_REDIS_DIR:?run through ctest (the redis fixture)}/port")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/miaosha-install.XXXXXX")
prefix=$tmp/prefix
SERVER_PID=""
on_exit() {
  local st=$?
  [ -n "$SERVER_PID" ] && proc_stop "$SERVER_PID" miaosha-server
  rm -rf "$tmp"
  exit "$st"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step() { # message log command...: runs command, its output to log; shows the log's tail on failure
  local msg=$1 log=$2 st t0
  shift 2
  t0=$(now_ms)
  "$@" >"$log" 2>&1; st=$?
  [ $st -eq 0 ] || tail -30 "$log"
  require "$msg ($(( ($(now_ms) - t0) / 1000 )) s)" -- test $st -eq 0
}

# ---------------------------------------------------------------- build
step "configure -DMIAOSHA_BUILD_TESTS=OFF" "$tmp/configure.log" \
  cmake -S "$SRC" -B "$tmp/build" -DMIAOSHA_BUILD_TESTS=OFF -DMIAOSHA_WERROR=ON \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix"
ck "the test tools were not looked up (no redis-server/nginx/redis-cli in the cache)" -- \
  bash -c "! grep -qE '^MIAOSHA_(REDIS_SERVER|NGINX|REDIS_CLI):' '$tmp/build/CMakeCache.txt'"
step "build" "$tmp/build.log" cmake --build "$tmp/build" -j2
ck "no test or benchmark was built" -- \
  bash -c "! ls '$tmp/build/lockcore/tests/test_lc_basic' '$tmp/build/config/tests/config_test' \
    '$tmp/build/bench/lc_bench' '$tmp/build/tests/testutil/libmiaosha_testutil.a' \
    '$tmp/build/proc/test_pk' 2>/dev/null | grep -q ."
step "cmake --install" "$tmp/install.log" cmake --install "$tmp/build"
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$tmp/build/CMakeCache.txt")
for f in bin/miaosha-server bin/miaosha-load etc/miaosha/miaosha.json include/lockcore.h \
         "$libdir/liblockcore.a" "$libdir/pkgconfig/lockcore.pc" "$libdir/cmake/miaosha/miaoshaConfig.cmake"; do
  ck "installed: $f" -- test -f "$prefix/$f"
done
ck "lockcore's test hooks (lockcore/testing) are not installed" -- \
  bash -c "! find '$prefix' -name lc_testhooks.h | grep -q ."
ck "the installed lockcore.h names no lc__ internal and no test hook" -- \
  bash -c "! grep -nE 'lc__|after_setnx' '$prefix/include/lockcore.h'"

# ---------------------------------------------------------------- the server
sku=install-$$
for _ in 1 2 3 4 5; do
  port=$(proc_free_port)
  proc_start "$tmp/server.log" "$prefix/bin/miaosha-server" --config "$prefix/etc/miaosha/miaosha.json" \
    --listen 127.0.0.1 --port "$port" --redis "127.0.0.1:$RPORT"
  SERVER_PID=$PROC_PID
  proc_wait_healthy "$SERVER_PID" 10000 proc_http_ok "http://127.0.0.1:$port/healthz" && break
  proc_stop "$SERVER_PID" miaosha-server
  SERVER_PID=""
  grep -q "in use" "$tmp/server.log" || break
done
[ -n "$SERVER_PID" ] || cat "$tmp/server.log"
require "the installed miaosha-server answers /healthz 200 on port ${port:-?}" -- test -n "$SERVER_PID"
url=http://127.0.0.1:$port
http PUT "$url/stock/$sku?stock=3"
ck "PUT /stock/$sku?stock=3 -> $H_CODE" -- test "$H_CODE" = 200
http GET "$url/miaosha/token?sku=$sku&user=installer"
ck "a token purchase -> $H_CODE $H_BODY" -- test "$H_CODE" = 200 -a "$(jfield "$H_BODY" ok)" = true
http GET "$url/stock/$sku"
ck "the audit: sold 1, stock 2 ($H_BODY)" -- \
  test "$(jfield "$H_BODY" sold)" = 1 -a "$(jfield "$H_BODY" stock)" = 2 -a "$(jfield "$H_BODY" oversold)" = 0
proc_stop "$SERVER_PID" miaosha-server
SERVER_PID=""

# ---------------------------------------------------------------- lockcore users
mkdir -p "$tmp/consumer"
cat > "$tmp/consumer/main.c" <<'EOF'
/* A lockcore user outside the tree: acquires and releases a token lock on
 * 127.0.0.1:PORT and checks the key in Redis in between and after. */
#include <lockcore.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static long long key_exists(lc_conn *conn, const char *key)
{
    redisContext *ctx = lc_conn_redis(conn);
    redisReply *r = ctx ? redisCommand(ctx, "EXISTS %s", key) : NULL;
    long long n = (r && r->type == REDIS_REPLY_INTEGER) ? r->integer : -1;
    freeReplyObject(r);
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: consumer PORT KEY\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    lc_options o;
    lc_options_init(&o);
    o.redis_port = atoi(argv[1]);
    lc_client *c;
    char err[256];
    if (lc_client_new(&o, &c, err, sizeof err) != LC_OK) {
        fprintf(stderr, "lc_client_new: %s\n", err);
        return 1;
    }
    lc_conn *conn;
    if (lc_conn_new(c, &conn) != LC_OK)
        return 1;
    lc_lock_args a = {0};
    a.mode = LC_TOKEN;
    a.key = argv[2];
    a.owner = "install-check";
    a.lease_ms = 10000;
    lc_guard *g;
    lc_status acq = lc_acquire(conn, &a, &g);
    long long held = acq == LC_OK ? key_exists(conn, argv[2]) : -1;
    lc_status rel = acq == LC_OK ? lc_release(conn, g) : LC_MISUSE;
    long long after = key_exists(conn, argv[2]);
    printf("acquire %s, key held %lld, release %s, key after %lld %s\n", lc_status_name(acq), held,
           lc_status_name(rel), after, lc_conn_errstr(conn));
    lc_conn_free(conn);
    lc_client_free(c);
    return acq == LC_OK && held == 1 && rel == LC_OK && after == 0 ? 0 : 1;
}
EOF

export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig
flags=$(pkg-config --cflags --libs lockcore 2>&1)
say "pkg-config --cflags --libs lockcore: $flags"
# shellcheck disable=SC2086
step "cc main.c \$(pkg-config --cflags --libs lockcore)" "$tmp/cc.log" \
  cc -Wall -Wextra -Werror -o "$tmp/consumer/pc-consumer" "$tmp/consumer/main.c" $flags
out=$("$tmp/consumer/pc-consumer" "$RPORT" "miaosha:{$sku-pc}:lock" 2>&1)
check $? "the pkg-config program takes and gives back a token lock: $out"

cat > "$tmp/consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(lockcore_consumer LANGUAGES C)
find_package(miaosha 0.1 REQUIRED)
add_executable(cmake-consumer main.c)
target_link_libraries(cmake-consumer PRIVATE miaosha::lockcore)
EOF
step "a CMake project: find_package(miaosha), miaosha::lockcore (configure)" "$tmp/consumer-configure.log" \
  cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
step "the CMake project builds" "$tmp/consumer-build.log" cmake --build "$tmp/consumer/build"
out=$("$tmp/consumer/build/cmake-consumer" "$RPORT" "miaosha:{$sku-cmake}:lock" 2>&1)
check $? "the CMake program takes and gives back a token lock: $out"
finish
