/* test_lc_basic — single-threaded contract tests against a real Redis:
 * names, misuse, busy-then-free, TTL on acquire, non-owner release,
 * reentrancy and the single release message, token extend, and the setnx
 * fault hook leaving a lock without TTL, lc_conn_connects, and
 * lc_guard_wait_ms as whole milliseconds of the acquisition's own span. */
#include "lc_test.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pk_proc.h"

static int port;
static lc_client *cli;
static lc_conn *c1, *c2;

static const lc_mode locking[] = {LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT, LC_FENCED};

static void test_names(void)
{
    lc_mode m;
    for (int i = 0; i < LC_MODE_COUNT; i++) {
        TU_CHECK(lc_mode_parse(lc_mode_name((lc_mode)i), &m) == 0 && m == (lc_mode)i, "mode %d", i);
    }
    TU_CHECK(lc_mode_parse("Token", &m) == -1, "names are exact");
    TU_CHECK(lc_mode_parse("zookeeper", &m) == -1, "unknown mode");
    TU_CHECK(strcmp(lc_status_name(LC_BUSY), "busy") == 0, "status name");
}

static void test_misuse(void)
{
    lc_guard *g = (lc_guard *)1;
    lc_lock_args a = lct_args(LC_TOKEN, "k", "o", 0, 0);
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE && g == NULL, "token needs a lease");
    a = lct_args(LC_TOKEN, "", "o", 100, 0);
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE, "empty key");
    a = lct_args(LC_REENTRANT, "k", NULL, 0, 0);
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE, "owner required");
    a = lct_args(LC_SETNX, "k", "o", 100, -1);
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE, "negative wait");
    TU_CHECK(strstr(lc_conn_errstr(c1), "wait_ms") != NULL, "errstr names the argument: %s",
             lc_conn_errstr(c1));
    TU_CHECK(lc_release(c1, NULL) == LC_MISUSE, "NULL guard");
    a = lct_args(LC_REENTRANT, "lctest:{misuse}:lock", "o", 1000, 0);
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire");
    TU_CHECK(lc_extend(c1, g, 1000) == LC_MISUSE, "extend is token's and fenced's only");
    TU_CHECK(lc_release(c1, g) == LC_OK, "release");
    lc_options o;
    lc_options_init(&o);
    o.watchdog_timeout_ms = 5;
    lc_client *bad = NULL;
    char err[128] = "";
    TU_CHECK(lc_client_new(&o, &bad, err, sizeof err) == LC_MISUSE && !bad, "watchdog bound");
    TU_CHECK(strstr(err, "watchdog_timeout_ms") != NULL, "err names the option: %s", err);
    bad = (lc_client *)1;
    TU_CHECK(lc_client_new(NULL, &bad, err, sizeof err) == LC_MISUSE && !bad,
             "NULL options: *out set to NULL");
    lc_client_free(NULL);
    lc_conn_free(NULL);
}

/* A second acquirer with wait_ms=0 is busy while the first holds. */
static void test_busy_then_free(void)
{
    for (size_t i = 0; i < sizeof locking / sizeof *locking; i++) {
        lc_mode m = locking[i];
        char key[128];
        lct_key(key, sizeof key, "busy", m);
        lc_lock_args a1 = lct_args(m, key, "first", m == LC_REENTRANT ? 0 : 5000, 0);
        lc_lock_args a2 = lct_args(m, key, "second", m == LC_REENTRANT ? 0 : 5000, 0);
        lc_guard *g1 = NULL, *g2 = NULL;
        TU_REQUIRE(lc_acquire(c1, &a1, &g1) == LC_OK, "%s first", lc_mode_name(m));
        TU_CHECK(lc_acquire(c2, &a2, &g2) == LC_BUSY && !g2, "%s second is busy", lc_mode_name(m));
        TU_CHECK(lc_release(c1, g1) == LC_OK, "%s release", lc_mode_name(m));
        TU_CHECK(lc_acquire(c2, &a2, &g2) == LC_OK, "%s second after release", lc_mode_name(m));
        if (g2)
            TU_CHECK(lc_release(c2, g2) == LC_OK, "%s release 2", lc_mode_name(m));
    }
    /* none never excludes */
    lc_lock_args a = lct_args(LC_NONE, "lctest:{none}:lock", "x", 0, 0);
    lc_guard *g1, *g2;
    TU_CHECK(lc_acquire(c1, &a, &g1) == LC_OK && lc_acquire(c2, &a, &g2) == LC_OK, "none: both");
    lc_release(c1, g1);
    lc_release(c2, g2);
}

/* PTTL right after acquire lies in [lease-10, lease]. */
static void test_ttl(void)
{
    const lc_mode redis_modes[] = {LC_SETNX, LC_TOKEN, LC_REENTRANT, LC_FENCED};
    const int64_t leases[] = {100, 3600000};
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 2; j++) {
            char key[128];
            lct_key(key, sizeof key, "ttl", redis_modes[i]);
            lc_lock_args a = lct_args(redis_modes[i], key, "o", leases[j], 0);
            lc_guard *g;
            TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire");
            int64_t ttl = tu_redis_int(port, "PTTL %s", key);
            TU_CHECK(ttl >= leases[j] - 10 && ttl <= leases[j], "%s lease %lld: PTTL %lld",
                     lc_mode_name(redis_modes[i]), (long long)leases[j], (long long)ttl);
            lc_release(c1, g);
        }
    }
    /* reentrant without a lease: the watchdog timeout is the lease */
    char key[128];
    lct_key(key, sizeof key, "ttl-wd", LC_REENTRANT);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "o", 0, 0);
    lc_guard *g;
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire");
    int64_t ttl = tu_redis_int(port, "PTTL %s", key);
    TU_CHECK(ttl >= 30000 - 10 && ttl <= 30000, "watchdog lease: PTTL %lld", (long long)ttl);
    lc_release(c1, g);
}

/* Overwrite the key from outside: release is not-owner, key unchanged. */
static void test_non_owner_release(void)
{
    char key[128];
    lc_guard *g;
    lct_key(key, sizeof key, "nonowner", LC_TOKEN);
    lc_lock_args a = lct_args(LC_TOKEN, key, "o", 5000, 0);
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "token acquire");
    tu_redis_int(port, "SET %s intruder PX 5000", key);
    TU_CHECK(lc_extend(c1, g, 9000) == LC_NOT_OWNER, "token extend not owner");
    TU_CHECK(lc_guard_lost(g) == 1, "extend failure marks the guard lost");
    TU_CHECK(lc_release(c1, g) == LC_NOT_OWNER, "token release not owner");
    char v[64];
    tu_redis_str(port, v, sizeof v, "GET %s", key);
    TU_CHECK(strcmp(v, "intruder") == 0, "token: key unchanged (%s)", v);

    lct_key(key, sizeof key, "nonowner", LC_REENTRANT);
    a = lct_args(LC_REENTRANT, key, "o", 5000, 0);
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "reentrant acquire");
    tu_redis_int(port, "DEL %s", key);
    tu_redis_int(port, "HSET %s intruder:x 1", key);
    TU_CHECK(lc_release(c1, g) == LC_NOT_OWNER, "reentrant release not owner");
    TU_CHECK(tu_redis_int(port, "HGET %s intruder:x", key) == 1, "reentrant: key unchanged");
    tu_redis_int(port, "DEL %s", key);
}

static void test_token_extend(void)
{
    char key[128];
    lc_guard *g;
    lct_key(key, sizeof key, "extend", LC_TOKEN);
    lc_lock_args a = lct_args(LC_TOKEN, key, "o", 1000, 0);
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire");
    TU_CHECK(strlen(lc_guard_owner_token(g)) == 36, "token is a uuid: %s", lc_guard_owner_token(g));
    char v[64];
    tu_redis_str(port, v, sizeof v, "GET %s", key);
    TU_CHECK(strcmp(v, lc_guard_owner_token(g)) == 0, "the key holds the token");
    TU_CHECK(lc_extend(c1, g, 60000) == LC_OK, "extend");
    int64_t ttl = tu_redis_int(port, "PTTL %s", key);
    TU_CHECK(ttl > 59000 && ttl <= 60000, "extended PTTL %lld", (long long)ttl);
    TU_CHECK(lc_guard_lost(g) == 0, "not lost");
    TU_CHECK(lc_release(c1, g) == LC_OK, "release");
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "deleted");
}

/* Reads pub/sub messages on a raw subscriber connection for `ms`. */
static int count_messages(redisContext *sub, int64_t ms)
{
    int n = 0;
    int64_t end = lc_now_ms() + ms;
    struct timeval tv = {0, 50000};
    redisSetTimeout(sub, tv);
    while (lc_now_ms() < end) {
        redisReply *r = NULL;
        if (redisGetReply(sub, (void **)&r) != REDIS_OK) {
            /* timeout: the context is dead after it, reconnecting is not
             * needed for counting — stop once the window is over */
            break;
        }
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            strcmp(r->element[0]->str, "message") == 0)
            n++;
        freeReplyObject(r);
    }
    return n;
}

/* Reentrancy: hold count 3; two releases keep it with the lease reset;
 * the third deletes it and publishes exactly one message. */
static void test_reentrancy(void)
{
    char key[128], channel[200], field[128];
    lct_key(key, sizeof key, "reentry", LC_REENTRANT);
    snprintf(channel, sizeof channel, "redisson_lock__channel:%s", key);
    struct timeval tv = {2, 0};
    redisContext *sub = redisConnectWithTimeout("127.0.0.1", port, tv);
    TU_REQUIRE(sub && !sub->err, "subscriber");
    redisReply *r = redisCommand(sub, "SUBSCRIBE %s", channel);
    TU_REQUIRE(r && r->type == REDIS_REPLY_ARRAY, "subscribed");
    freeReplyObject(r);

    lc_lock_args a = lct_args(LC_REENTRANT, key, "req-1", 2000, 0);
    lc_guard *g[3];
    for (int i = 0; i < 3; i++)
        TU_REQUIRE(lc_acquire(c1, &a, &g[i]) == LC_OK, "acquire %d", i + 1);
    snprintf(field, sizeof field, "%s:req-1", lc_client_instance_id(cli));
    TU_CHECK(strcmp(lc_guard_owner_token(g[0]), field) == 0, "field is instance:owner");
    TU_CHECK(tu_redis_int(port, "HGET %s %s", key, field) == 3, "hold count 3");
    /* another owner of the same process cannot enter */
    lc_lock_args other = lct_args(LC_REENTRANT, key, "req-2", 2000, 0);
    lc_guard *go;
    TU_CHECK(lc_acquire(c2, &other, &go) == LC_BUSY, "other owner busy");
    tu_sleep_ms(300);
    TU_CHECK(lc_release(c1, g[2]) == LC_OK, "release 1");
    int64_t ttl = tu_redis_int(port, "PTTL %s", key);
    /* 300 ms after the acquisition: ~1700 without the reset */
    TU_CHECK(ttl >= 1900 && ttl <= 2000, "lease reset on partial release: %lld", (long long)ttl);
    tu_sleep_ms(150);
    TU_CHECK(lc_release(c1, g[1]) == LC_OK, "release 2");
    ttl = tu_redis_int(port, "PTTL %s", key);
    TU_CHECK(ttl >= 1900 && ttl <= 2000,
             "lease reset again on the second release (~1850 "
             "without): %lld",
             (long long)ttl);
    TU_CHECK(tu_redis_int(port, "HGET %s %s", key, field) == 1, "hold count 1");
    TU_CHECK(count_messages(sub, 200) == 0, "no message before the last release");
    redisFree(sub);
    sub = redisConnectWithTimeout("127.0.0.1", port, tv);
    r = redisCommand(sub, "SUBSCRIBE %s", channel);
    freeReplyObject(r);
    TU_CHECK(lc_release(c1, g[0]) == LC_OK, "release 3");
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "key gone");
    TU_CHECK(count_messages(sub, 300) == 1, "exactly one release message");
    redisFree(sub);
}

/* setnx fault hook: the holder dies between SETNX and PEXPIRE. */
static void test_setnx_crash(void)
{
    char key[128], cmd[512], portstr[16];
    lct_key(key, sizeof key, "crash", LC_SETNX);
    snprintf(portstr, sizeof portstr, "%d", port);
    snprintf(cmd, sizeof cmd, "%s/lockcore/tests/lc_holder", getenv("MIAOSHA_BUILD_DIR"));
    const char *argv[] = {cmd, portstr, "setnx", key, "30000", "5000", "crash_before_expire", NULL};
    char err[256];
    pid_t pid = pk_spawn(argv, NULL, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    TU_REQUIRE(pid > 0, "holder started: %s", err);
    int status = 0;
    TU_REQUIRE(pk_wait_status(pid, (int)tu_slack(30000), &status), "holder exited");
    TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "holder exited in the hook (%d)",
             status);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 1, "the lock exists");
    TU_CHECK(tu_redis_int(port, "PTTL %s", key) == -1, "and has no TTL: stuck forever");
    lc_lock_args a = lct_args(LC_SETNX, key, "late", 1000, 50);
    lc_guard *g;
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_BUSY, "every later buyer is busy");
    tu_redis_int(port, "DEL %s", key);
}

/* lc_conn_connects: 0 before the first command, 1 after it, the same while
 * that connection lasts, and one more when a call had to connect again —
 * here the server closed the connection (CLIENT KILL from another one). */
static void test_connects(void)
{
    lc_conn *c = lct_conn(cli);
    TU_CHECK(lc_conn_connects(c) == 0, "no connection before the first command");
    TU_CHECK(lc_conn_ping(c) == LC_OK && lc_conn_connects(c) == 1, "one after the first");
    TU_CHECK(lc_conn_ping(c) == LC_OK && lc_conn_connects(c) == 1, "the same one after the second");
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "CLIENT ID");
    (void)lc_conn_pipe(c, &p);
    redisReply *id = lc_pipe_take(&p, 0);
    lc_pipe_clear(&p);
    TU_REQUIRE(id != NULL && id->type == REDIS_REPLY_INTEGER, "CLIENT ID");
    TU_CHECK(tu_redis_int(port, "CLIENT KILL ID %lld", id->integer) == 1, "the server closes it");
    freeReplyObject(id);
    /* The closed socket is seen before the next command (or, at worst,
     * that command fails and the one after it connects). */
    lc_status st = lc_conn_ping(c);
    if (st != LC_OK)
        st = lc_conn_ping(c);
    TU_CHECK(st == LC_OK && lc_conn_connects(c) == 2, "the next call connected again (%llu)",
             (unsigned long long)lc_conn_connects(c));
    lc_conn_free(c);
}

/* The wait is the floor of the acquisition's span in µs, so it can never
 * exceed the whole milliseconds of a span measured around the call. Two
 * millisecond clock readings could: a ~50 µs acquire across a millisecond
 * boundary read 1 ms (of 200 tries, some always cross one). */
static void test_wait_ms_floor(void)
{
    int over = 0;
    for (int i = 0; i < 200; i++) {
        lc_lock_args a = lct_args(LC_TOKEN, "lctest:{wait}:lock", "w", 5000, 0);
        lc_guard *g = NULL;
        int64_t t0 = lc_now_us();
        lc_status st = lc_acquire(c1, &a, &g);
        int64_t span_ms = (lc_now_us() - t0) / 1000;
        TU_REQUIRE(st == LC_OK, "acquire %d", i);
        if (lc_guard_wait_ms(g) > span_ms)
            over++;
        TU_CHECK(lc_release(c1, g) == LC_OK, "release %d", i);
    }
    TU_CHECK(over == 0, "lc_guard_wait_ms above the measured span %d times of 200", over);
}

int main(void)
{
    port = tu_redis_port();
    cli = lct_client(port, 0);
    c1 = lct_conn(cli);
    c2 = lct_conn(cli);
    test_names();
    test_misuse();
    test_busy_then_free();
    test_ttl();
    test_non_owner_release();
    test_token_extend();
    test_reentrancy();
    test_setnx_crash();
    test_connects();
    test_wait_ms_floor();
    lc_conn_free(c1);
    lc_conn_free(c2);
    lc_client_free(cli);
    return tu_done();
}
