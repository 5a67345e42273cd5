/* test_lc_lease — leases and the watchdog, against a real Redis:
 * expiry without renewal and whose release deletes what, the watchdog
 * keeping a lock for longer than its timeout and stopping at release, the
 * watchdog reporting a lost lock, and a SIGKILLed holder's lock freeing
 * within the watchdog timeout; releases racing renewals and same-owner
 * re-entries, and which holds keep the watchdog renewing. */
#include "lc_test.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "pk_proc.h"

static int port;

typedef struct waiter {
    lc_client *cli;
    lc_lock_args args;
    lc_status status;
    lc_guard *g;
    int64_t acquired_at;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    lc_conn *conn = lct_conn(w->cli);
    w->status = lc_acquire(conn, &w->args, &w->g);
    w->acquired_at = lc_now_ms();
    /* keep holding until the main thread has released its (expired) lock */
    tu_sleep_ms(400);
    lc_conn_free(conn);
    return NULL;
}

/* Lease 300 ms, the holder keeps going 500 ms: a waiter gets in within
 * lease + 50 ms; the late release is not-owner under token and reentrant
 * (the new holder's key survives) and deletes the new holder's key under
 * setnx (the flaw). */
static void test_expiry_without_watchdog(lc_client *cli)
{
    const lc_mode modes[] = {LC_SETNX, LC_TOKEN, LC_REENTRANT};
    for (int i = 0; i < 3; i++) {
        lc_mode m = modes[i];
        char key[128];
        lct_key(key, sizeof key, "expiry", m);
        lc_conn *conn = lct_conn(cli);
        lc_lock_args a = lct_args(m, key, "slow", 300, 0);
        lc_guard *g;
        int64_t t0 = lc_now_ms();
        TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "%s holder", lc_mode_name(m));
        /* the new holder's own lease outlives the test's checks */
        waiter w = {.cli = cli, .args = lct_args(m, key, "next", 5000, 2000)};
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        tu_sleep_ms(500 - (lc_now_ms() - t0));
        lc_status rs = lc_release(conn, g);
        int64_t exists = tu_redis_int(port, "EXISTS %s", key);
        pthread_join(th, NULL);
        TU_CHECK(w.status == LC_OK, "%s: waiter acquired (%s)", lc_mode_name(m),
                 lc_status_name(w.status));
        int64_t took = w.acquired_at - t0;
        TU_CHECK(took >= 280 && took <= tu_slack(350), "%s: waiter in after %lld ms (lease 300)",
                 lc_mode_name(m), (long long)took);
        if (m == LC_SETNX) {
            TU_CHECK(rs == LC_OK, "setnx: the late DEL 'succeeds' (%s)", lc_status_name(rs));
            TU_CHECK(exists == 0, "setnx: the late release deleted the new holder's lock");
        } else {
            TU_CHECK(rs == LC_NOT_OWNER, "%s: late release is not-owner (%s)", lc_mode_name(m),
                     lc_status_name(rs));
            TU_CHECK(exists == 1, "%s: the new holder's key survives", lc_mode_name(m));
        }
        if (w.g) {
            lc_status ws = lc_release(conn, w.g);
            TU_CHECK(ws == (m == LC_SETNX ? LC_NOT_OWNER : LC_OK), "%s: new holder's release: %s",
                     lc_mode_name(m), lc_status_name(ws));
        }
        lc_conn_free(conn);
    }
}

/* Watchdog 1000 ms, hold 3500 ms: never expires, nobody else gets in;
 * after release no renewal touches the key. */
static void test_watchdog_keeps_lock(void)
{
    lc_client *cli = lct_client(port, 1000);
    lc_conn *c1 = lct_conn(cli), *c2 = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "watchdog", LC_REENTRANT);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "holder", 0, 0);
    lc_lock_args b = lct_args(LC_REENTRANT, key, "other", 0, 0);
    lc_guard *g, *gb;
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire");
    int64_t end = lc_now_ms() + 3500;
    int missing = 0, entered = 0, min_ttl = 1000000;
    while (lc_now_ms() < end) {
        int64_t ttl = tu_redis_int(port, "PTTL %s", key);
        if (ttl <= 0)
            missing++;
        if (ttl < min_ttl)
            min_ttl = (int)ttl;
        if (lc_acquire(c2, &b, &gb) != LC_BUSY) {
            entered++;
            if (gb)
                lc_release(c2, gb);
        }
        tu_sleep_ms(50);
    }
    TU_CHECK(missing == 0, "the key never expired (%d misses)", missing);
    TU_CHECK(entered == 0, "no other owner got in (%d)", entered);
    TU_CHECK(min_ttl > 500, "renewed every timeout/3: min PTTL %d", min_ttl);
    lc_stats s;
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_renewals >= 9 && s.watchdog_renewals <= 12, "renewals in 3.5 s: %llu",
             (unsigned long long)s.watchdog_renewals);
    TU_CHECK(s.watchdog_active == 1, "one lock under the watchdog");
    TU_CHECK(lc_release(c1, g) == LC_OK, "release");
    lc_client_stats(cli, &s);
    uint64_t after = s.watchdog_renewals;
    TU_CHECK(s.watchdog_active == 0, "nothing under the watchdog after release");
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "key gone");
    /* Put the holder's field back from outside with an 800 ms TTL: a
     * watchdog still renewing this (key, field) would push it back to
     * 1000 ms every 333 ms, so it would outlive the second below. */
    char field[128];
    snprintf(field, sizeof field, "%s:holder", lc_client_instance_id(cli));
    tu_redis_int(port, "HSET %s %s 1", key, field);
    tu_redis_int(port, "PEXPIRE %s 800", key);
    tu_sleep_ms(1000);
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_renewals == after, "no renewal after release (%llu -> %llu)",
             (unsigned long long)after, (unsigned long long)s.watchdog_renewals);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0,
             "no renewal touched the key: the re-created hash expired on its own");

    /* The renew script answering 0 marks the lock lost. */
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire again");
    tu_redis_int(port, "DEL %s", key);
    int64_t until = lc_now_ms() + 1000;
    while (!lc_guard_lost(g) && lc_now_ms() < until)
        tu_sleep_ms(10);
    TU_CHECK(lc_guard_lost(g) == 1, "watchdog reported the lock lost");
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_lost == 1, "watchdog_lost counted");
    TU_CHECK(lc_release(c1, g) == LC_LOST, "release says lost");
    lc_conn_free(c1);
    lc_conn_free(c2);
    lc_client_free(cli);
}

/* 1 when the file at path holds needle. */
static int file_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char buf[256];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return strstr(buf, needle) != NULL;
}

/* Starts lc_holder (its output in a temporary file); returns its pid once
 * it printed "acquired", or -1 (it exited, or not within 10 s). */
static pid_t spawn_holder(const char *mode, const char *key, const char *wd, const char *lease)
{
    char exe[512], portstr[16], err[256], out[] = "/tmp/miaosha-lc-holder-XXXXXX";
    snprintf(exe, sizeof exe, "%s/lockcore/tests/lc_holder", getenv("MIAOSHA_BUILD_DIR"));
    snprintf(portstr, sizeof portstr, "%d", port);
    int fd = mkstemp(out);
    if (fd < 0)
        return -1;
    close(fd);
    const char *argv[] = {exe, portstr, mode, key, wd, lease, NULL};
    pid_t pid = pk_spawn(argv, out, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    int64_t end = lc_now_ms() + tu_slack(10000);
    while (pid > 0 && !file_has(out, "acquired")) {
        if (pk_wait_exit(pid, 0)) { /* reaped: it exited without the lock */
            pid = -1;
            break;
        }
        if (lc_now_ms() > end) {
            pk_kill(pid);
            pid = -1;
            break;
        }
        tu_sleep_ms(2);
    }
    unlink(out);
    return pid;
}

/* A holder with watchdog 1000 ms is SIGKILLed: the key is gone within
 * 1000 + 100 ms, because nothing renews it any more. */
static void test_watchdog_dies_with_holder(void)
{
    char key[128];
    lct_key(key, sizeof key, "killed", LC_REENTRANT);
    pid_t pid = spawn_holder("reentrant", key, "1000", "0");
    TU_REQUIRE(pid > 0, "holder started");
    tu_sleep_ms(800);
    int64_t ttl = tu_redis_int(port, "PTTL %s", key);
    TU_CHECK(ttl > 500, "the holder's watchdog renews it (PTTL %lld at 800 ms)", (long long)ttl);
    int64_t t0 = lc_now_ms();
    pk_kill(pid);
    while (tu_redis_int(port, "EXISTS %s", key) == 1 && lc_now_ms() - t0 < 3000)
        tu_sleep_ms(5);
    int64_t gone = lc_now_ms() - t0;
    TU_CHECK(gone <= tu_slack(1100), "key gone %lld ms after SIGKILL (<= 1100)", (long long)gone);
}

/* The last release racing a renewal: each cycle holds the lock for just
 * under one renewal period, so renewals fall right around releases, and
 * every release must be clean — a renewal that runs right after the
 * release's DEL answers 0, and that is not a loss. The period is 30 ms
 * (x MIAOSHA_TEST_TIME_FACTOR): a lease of three periods lets a renewal be
 * up to two periods late on a loaded machine before the lock would really
 * expire, which a 10 ms period (tried first) did not survive on 2 busy
 * cores. */
static void test_release_races_renewal(void)
{
    int64_t period = tu_slack(30);
    lc_client *cli = lct_client(port, 3 * period);
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "race-renew", LC_REENTRANT);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "o", 0, 0);
    int bad = 0;
    for (int i = 0; i < 100; i++) {
        lc_guard *g;
        lc_status st = lc_acquire(conn, &a, &g);
        if (st != LC_OK) {
            fprintf(stderr, "cycle %d: acquire %s\n", i, lc_status_name(st));
            bad++;
            continue;
        }
        usleep((useconds_t)(period * 1000 - 2000 + (i % 5) * 500));
        if ((st = lc_release(conn, g)) != LC_OK) {
            fprintf(stderr, "cycle %d: release %s\n", i, lc_status_name(st));
            bad++;
        }
    }
    lc_stats s;
    lc_client_stats(cli, &s);
    TU_CHECK(bad == 0, "every cycle clean (%d bad)", bad);
    TU_CHECK(s.watchdog_lost == 0, "no false loss reported (%llu)",
             (unsigned long long)s.watchdog_lost);
    TU_CHECK(s.watchdog_renewals > 0, "renewals ran (%llu)",
             (unsigned long long)s.watchdog_renewals);
    lc_conn_free(conn);
    lc_client_free(cli);
}

/* A reentrant guard released without a connection: LC_MISUSE, and the
 * watchdog must not go on renewing it for the life of the process. */
static void test_release_without_conn(void)
{
    lc_client *cli = lct_client(port, 300);
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "nullconn", LC_REENTRANT);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "o", 0, 0);
    lc_guard *g;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "acquire");
    TU_CHECK(lc_release(NULL, g) == LC_MISUSE, "NULL conn is misuse");
    lc_stats s;
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_active == 0, "renewal stopped");
    int64_t until = lc_now_ms() + 1500;
    while (tu_redis_int(port, "EXISTS %s", key) == 1 && lc_now_ms() < until)
        tu_sleep_ms(20);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "the lease frees it (nothing renews it)");
    lc_conn_free(conn);
    lc_client_free(cli);
}

/* Re-entering after the watchdog found the lock lost takes a fresh lock that
 * the watchdog renews, instead of joining the dead hold. */
static void test_reenter_after_loss(void)
{
    lc_client *cli = lct_client(port, 300);
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "reloss", LC_REENTRANT);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "o", 0, 0);
    lc_guard *old, *fresh;
    TU_REQUIRE(lc_acquire(conn, &a, &old) == LC_OK, "acquire");
    tu_redis_int(port, "DEL %s", key);
    int64_t until = lc_now_ms() + 1000;
    while (!lc_guard_lost(old) && lc_now_ms() < until)
        tu_sleep_ms(5);
    TU_REQUIRE(lc_guard_lost(old), "loss seen");
    TU_REQUIRE(lc_acquire(conn, &a, &fresh) == LC_OK, "re-acquire");
    TU_CHECK(lc_guard_lost(fresh) == 0, "the new guard is not born lost");
    tu_sleep_ms(700); /* > watchdog timeout: only renewal keeps it */
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 1, "the new lock is renewed");
    TU_CHECK(lc_release(conn, fresh) == LC_OK, "release the new lock");
    TU_CHECK(lc_release(conn, old) == LC_LOST, "the old guard reports the loss");
    lc_conn_free(conn);
    lc_client_free(cli);
}

/* Two threads with one owner id (the contract allows it; the service uses
 * one owner per request): the last release by one races a re-entry by the
 * other, so a hold is added while the entry's last hold is being released.
 * The lock the second thread then holds must be renewed like any other: it
 * outlives the watchdog timeout and its release is clean. Each round, on a
 * key of its own, starts the re-entry and, 0-300 us later (both threads
 * spin, so the offsets are what they say), the release, so that some rounds
 * land the re-entry inside the release's round trip; then every re-entered
 * lock is held past the watchdog timeout. */
typedef struct same_owner {
    lc_conn *conn;
    lc_lock_args args;
    atomic_int *go;
    lc_status status;
    lc_guard *g;
} same_owner;

static void spin_us(int64_t us)
{
    int64_t t0 = lc_now_us();
    while (lc_now_us() - t0 < us) {
    }
}

static void *reenter_main(void *arg)
{
    same_owner *s = arg;
    while (!atomic_load(s->go)) {
    }
    s->status = lc_acquire(s->conn, &s->args, &s->g);
    return NULL;
}

static void test_release_races_same_owner_reentry(void)
{
    enum { ROUNDS = 100 };
    int64_t timeout = 3 * tu_slack(200);
    lc_client *cli = lct_client(port, timeout);
    lc_conn *c1 = lct_conn(cli), *c2 = lct_conn(cli);
    char keys[ROUNDS][128];
    lc_guard *held[ROUNDS] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        lct_key(keys[r], sizeof keys[r], "same-owner", LC_REENTRANT);
        snprintf(keys[r] + strlen(keys[r]), 8, ":%d", r);
        lc_lock_args a = lct_args(LC_REENTRANT, keys[r], "shared", 0, 0);
        lc_guard *g1;
        TU_REQUIRE(lc_acquire(c1, &a, &g1) == LC_OK, "round %d: first hold", r);
        atomic_int go = 0;
        same_owner s = {.conn = c2, .args = a, .go = &go};
        pthread_t th;
        pthread_create(&th, NULL, reenter_main, &s);
        tu_sleep_ms(1); /* the thread is spinning */
        atomic_store(&go, 1);
        spin_us(r % 50 * 6);
        lc_status r1 = lc_release(c1, g1);
        pthread_join(th, NULL);
        TU_CHECK(r1 == LC_OK, "round %d: the racing release (%s)", r, lc_status_name(r1));
        TU_CHECK(s.status == LC_OK, "round %d: the re-entry (%s)", r, lc_status_name(s.status));
        held[r] = s.g;
    }
    tu_sleep_ms(timeout * 3 / 2); /* > watchdog timeout: only renewal keeps them */
    int expired = 0;
    for (int r = 0; r < ROUNDS; r++) {
        lc_status st = held[r] ? lc_release(c2, held[r]) : LC_OK;
        if (st != LC_OK) {
            fprintf(stderr, "round %d: the re-entered lock's release: %s\n", r, lc_status_name(st));
            expired++;
        }
    }
    TU_CHECK(expired == 0, "every re-entered lock was renewed (%d of %d expired)", expired,
             (int)ROUNDS);
    lc_stats s;
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_lost == 0, "no loss reported (%llu)", (unsigned long long)s.watchdog_lost);
    TU_CHECK(s.watchdog_active == 0, "nothing renewed afterwards (%llu)",
             (unsigned long long)s.watchdog_active);
    lc_conn_free(c1);
    lc_conn_free(c2);
    lc_client_free(cli);
}

/* A watchdog-mode re-entry inside an explicit-lease hold renews the lock
 * only while that re-entry is held: once it is released the lock keeps the
 * lease that release set and runs out, as an explicit lease does (Redisson
 * renews for the watchdog-mode acquisitions only). The reverse, an
 * explicit-lease re-entry inside a watchdog-mode hold, leaves renewal on. */
static void test_watchdog_reentry_inside_lease(void)
{
    int64_t timeout = 3 * tu_slack(200);
    lc_client *cli = lct_client(port, timeout);
    lc_conn *conn = lct_conn(cli);
    char key[128];
    lct_key(key, sizeof key, "wd-in-lease", LC_REENTRANT);
    lc_lock_args lease = lct_args(LC_REENTRANT, key, "o", timeout, 0);
    lc_lock_args wd = lct_args(LC_REENTRANT, key, "o", 0, 0);
    lc_guard *outer, *inner;
    lc_stats s;
    TU_REQUIRE(lc_acquire(conn, &lease, &outer) == LC_OK, "explicit-lease hold");
    TU_REQUIRE(lc_acquire(conn, &wd, &inner) == LC_OK, "watchdog-mode re-entry");
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_active == 1, "renewed while the re-entry is held (%llu)",
             (unsigned long long)s.watchdog_active);
    tu_sleep_ms(timeout * 2);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 1, "the watchdog keeps it meanwhile");
    TU_CHECK(lc_release(conn, inner) == LC_OK, "release the re-entry");
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_active == 0, "renewal stops with the re-entry (%llu)",
             (unsigned long long)s.watchdog_active);
    int64_t until = lc_now_ms() + 3 * timeout;
    while (tu_redis_int(port, "EXISTS %s", key) == 1 && lc_now_ms() < until)
        tu_sleep_ms(20);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "then its lease runs out");
    lc_status st = lc_release(conn, outer);
    TU_CHECK(st == LC_NOT_OWNER, "the explicit hold's release finds it gone (%s)",
             lc_status_name(st));

    lct_key(key, sizeof key, "lease-in-wd", LC_REENTRANT);
    TU_REQUIRE(lc_acquire(conn, &wd, &outer) == LC_OK, "watchdog-mode hold");
    TU_REQUIRE(lc_acquire(conn, &lease, &inner) == LC_OK, "explicit-lease re-entry");
    TU_CHECK(lc_release(conn, inner) == LC_OK, "release the re-entry");
    lc_client_stats(cli, &s);
    TU_CHECK(s.watchdog_active == 1, "still renewed for the watchdog-mode hold (%llu)",
             (unsigned long long)s.watchdog_active);
    tu_sleep_ms(timeout * 2);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 1, "kept past its lease");
    st = lc_release(conn, outer);
    TU_CHECK(st == LC_OK, "the watchdog-mode hold's release (%s)", lc_status_name(st));
    lc_conn_free(conn);
    lc_client_free(cli);
}

int main(void)
{
    port = tu_redis_port();
    lc_client *cli = lct_client(port, 0);
    test_expiry_without_watchdog(cli);
    lc_client_free(cli);
    test_watchdog_keeps_lock();
    test_watchdog_dies_with_holder();
    test_release_races_renewal();
    test_release_without_conn();
    test_reenter_after_loss();
    test_release_races_same_owner_reentry();
    test_watchdog_reentry_inside_lease();
    return tu_done();
}
