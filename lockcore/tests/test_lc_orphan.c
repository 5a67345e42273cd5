/* test_lc_orphan — the orphan-lock cleanup (lockcore/README.md, "Orphan
 * cleanup") against a private redis-server that the test pauses (SIGSTOP) and
 * resumes (SIGCONT).
 *
 * The bug it guards: an acquire that timed out while Redis was paused is
 * still executed when Redis resumes, and the lock it takes belongs to
 * nobody, so every buyer gets "busy" until its lease runs out (30 s for
 * reentrant). With the cleanup the lock is gone within a round trip of the
 * late reply, and never at the price of another holder's lock.
 */
#include "lc_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>

#define PAUSE_MS 1200  /* how long Redis stays stopped */
#define TIMEOUT_MS 200 /* the client's command timeout */

static tu_redis r;

/* SIGCONT once PAUSE_MS have passed since stopped_at; returns the time. */
static int64_t resume_at(int64_t stopped_at)
{
    tu_sleep_ms(stopped_at + PAUSE_MS - lc_now_ms());
    kill(r.pid, SIGCONT);
    return lc_now_ms();
}

static lc_stats stats(lc_client *cli)
{
    lc_stats s;
    lc_client_stats(cli, &s);
    return s;
}

/* Polls until the key is gone and the client has released `released`
 * orphans, or within_ms passes. Returns the ms it took, or -1. */
static int64_t wait_gone(lc_client *cli, const char *key, uint64_t released, int64_t within_ms)
{
    int64_t t0 = lc_now_ms();
    do {
        if (stats(cli).orphans_released >= released && tu_redis_int(r.port, "EXISTS %s", key) == 0)
            return lc_now_ms() - t0;
        tu_sleep_ms(10);
    } while (lc_now_ms() - t0 < within_ms);
    return -1;
}

/* A stalled acquire that is granted when Redis resumes: gone within 1 s,
 * and another owner acquires at once. */
static void test_late_grant(lc_client *cli, lc_mode mode)
{
    const char *m = lc_mode_name(mode);
    char key[128];
    lct_key(key, sizeof key, "late", mode);
    lc_conn *conn = lct_conn(cli), *other = lct_conn(cli);
    TU_REQUIRE(lc_conn_ping(conn) == LC_OK && lc_conn_ping(other) == LC_OK, "%s: ping", m);
    lc_stats before = stats(cli);
    lc_lock_args a = lct_args(mode, key, "stalled", mode == LC_REENTRANT ? 0 : 30000, 0);
    lc_guard *g = NULL;

    int64_t stopped = lc_now_ms();
    kill(r.pid, SIGSTOP);
    lc_status s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_IO && !g, "%s: stalled acquire: %s", m, lc_status_name(s));
    TU_CHECK(stats(cli).orphans_adopted == before.orphans_adopted + 1, "%s: adopted", m);
    resume_at(stopped);

    int64_t took = wait_gone(cli, key, before.orphans_released + 1, tu_slack(1000));
    TU_CHECK(took >= 0, "%s: orphan lock gone within 1 s of SIGCONT (took %lld ms; PTTL %lld)", m,
             (long long)took, (long long)tu_redis_int(r.port, "PTTL %s", key));
    a.owner = "next";
    s = lc_acquire(other, &a, &g);
    TU_CHECK(s == LC_OK, "%s: the next owner acquires at once: %s", m, lc_status_name(s));
    if (g)
        TU_CHECK(lc_release(other, g) == LC_OK, "%s: next released", m);
    /* the handle whose command timed out works again (a fresh connection) */
    a.owner = "stalled";
    s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_OK, "%s: the stalled handle works again: %s", m, lc_status_name(s));
    if (g)
        lc_release(conn, g);
    lc_stats after = stats(cli);
    TU_CHECK(after.orphans_released == before.orphans_released + 1 &&
                 after.orphans_unresolved == before.orphans_unresolved,
             "%s: released %llu, unresolved %llu", m,
             (unsigned long long)(after.orphans_released - before.orphans_released),
             (unsigned long long)(after.orphans_unresolved - before.orphans_unresolved));
    TU_CHECK(after.watchdog_active == 0, "%s: nothing renewed", m);
    lc_conn_free(conn);
    lc_conn_free(other);
}

/* Another owner holds the lock; a stalled acquire is refused when Redis
 * resumes. The cleanup must send nothing: the holder keeps its lock. */
static void test_not_granted(lc_client *cli, lc_mode mode)
{
    const char *m = lc_mode_name(mode);
    char key[128], before_val[128], after_val[128];
    lc_conn *hconn = NULL, *conn = lct_conn(cli);
    lc_guard *held = lct_hold(cli, mode, "refused", key, sizeof key, &hconn);
    TU_REQUIRE(lc_conn_ping(conn) == LC_OK, "%s: ping", m);
    lc_stats before = stats(cli);
    lc_lock_args a = lct_args(mode, key, "stalled", mode == LC_REENTRANT ? 0 : 30000, 0);
    lc_guard *g = NULL;

    int64_t stopped = lc_now_ms();
    kill(r.pid, SIGSTOP);
    lc_status s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_IO, "%s: stalled acquire: %s", m, lc_status_name(s));
    resume_at(stopped);
    tu_sleep_ms(tu_slack(500)); /* the late reply has long been read */

    if (mode != LC_REENTRANT) {
        tu_redis_str(r.port, after_val, sizeof after_val, "GET %s", key);
        snprintf(before_val, sizeof before_val, "%s", lc_guard_owner_token(held));
    } else {
        snprintf(after_val, sizeof after_val, "%lld",
                 (long long)tu_redis_int(r.port, "HGET %s %s", key, lc_guard_owner_token(held)));
        snprintf(before_val, sizeof before_val, "1");
    }
    TU_CHECK(strcmp(after_val, before_val) == 0, "%s: the holder's lock is intact (%s)", m,
             after_val);
    TU_CHECK(tu_redis_int(r.port, "PTTL %s", key) > 20000, "%s: with its lease", m);
    lc_stats after = stats(cli);
    TU_CHECK(after.orphans_adopted == before.orphans_adopted + 1 &&
                 after.orphans_released == before.orphans_released,
             "%s: adopted, nothing released", m);
    s = lc_release(hconn, held);
    TU_CHECK(s == LC_OK, "%s: the holder releases its own lock: %s", m, lc_status_name(s));
    TU_CHECK(tu_redis_int(r.port, "EXISTS %s", key) == 0, "%s: and it is gone", m);
    lc_conn_free(conn);
    lc_conn_free(hconn);
}

/* The race the same-connection rule exists for: while Redis is paused the
 * stalled acquire is still queued when a cleanup on a new connection would
 * already run (at the timeout, a second before the acquire executes). Here
 * several stalled acquires are queued on different connections in an
 * order Redis picks — for reentrant two of them by one owner (a re-entry
 * of one field, so the second is granted too and the count reaches 2) —
 * and a release that timed out as well. Afterwards no ghost may remain, now
 * or a little later. */
typedef struct stall_arg {
    lc_client *cli;
    lc_mode mode;
    const char *key, *owner;
    pthread_barrier_t *ready, *stopped; /* connected; Redis stopped */
    lc_status status;
} stall_arg;

static void *stall_main(void *p)
{
    stall_arg *s = p;
    lc_conn *conn = lct_conn(s->cli);
    bool up = lc_conn_ping(conn) == LC_OK;
    pthread_barrier_wait(s->ready);
    pthread_barrier_wait(s->stopped);
    s->status = LC_MISUSE;
    if (up) {
        lc_lock_args a = lct_args(s->mode, s->key, s->owner, s->mode == LC_REENTRANT ? 0 : 30000,
                                  0);
        lc_guard *g = NULL;
        s->status = lc_acquire(conn, &a, &g);
        if (g)
            lc_release(conn, g);
    }
    lc_conn_free(conn);
    return NULL;
}

static void test_race(lc_client *cli, lc_mode mode)
{
    const char *m = lc_mode_name(mode);
    char key[128];
    lct_key(key, sizeof key, "race", mode);
    lc_stats before = stats(cli);
    enum { N = 4 };
    static const char *const owners[N] = {"a", "a", "b", "c"};
    stall_arg args[N];
    pthread_t th[N];
    pthread_barrier_t ready, stopped;
    pthread_barrier_init(&ready, NULL, N + 1);
    pthread_barrier_init(&stopped, NULL, N + 1);
    for (int i = 0; i < N; i++) {
        args[i] = (stall_arg){cli, mode, key, owners[i], &ready, &stopped, LC_OK};
        TU_REQUIRE(pthread_create(&th[i], NULL, stall_main, &args[i]) == 0, "thread");
    }
    pthread_barrier_wait(&ready);
    int64_t stopped_at = lc_now_ms();
    kill(r.pid, SIGSTOP);
    pthread_barrier_wait(&stopped);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&ready);
    pthread_barrier_destroy(&stopped);
    int io = 0;
    for (int i = 0; i < N; i++)
        io += args[i].status == LC_IO;
    TU_CHECK(io == N, "%s: every stalled acquire timed out (%d of %d)", m, io, N);
    int64_t resumed = resume_at(stopped_at);

    /* Once every adopted command is settled the key stays absent. */
    int64_t until = resumed + tu_slack(1000);
    while (lc_now_ms() < until && tu_redis_int(r.port, "EXISTS %s", key) != 0)
        tu_sleep_ms(10);
    TU_CHECK(tu_redis_int(r.port, "EXISTS %s", key) == 0, "%s: no ghost within 1 s (PTTL %lld)", m,
             (long long)tu_redis_int(r.port, "PTTL %s", key));
    tu_sleep_ms(300);
    TU_CHECK(tu_redis_int(r.port, "EXISTS %s", key) == 0, "%s: nor later", m);
    lc_stats after = stats(cli);
    TU_CHECK(after.orphans_adopted - before.orphans_adopted == N, "%s: %llu adopted of %d", m,
             (unsigned long long)(after.orphans_adopted - before.orphans_adopted), N);
    /* At least one stalled acquire was granted late and given back. Usually
     * exactly one (token) or owner "a"'s two re-entries (reentrant), when
     * Redis runs the four queued commands in one pass; but a command Redis
     * ran just before SIGSTOP took effect answers first on resume, its
     * give-back can run before a later-queued acquire, which is then
     * granted (and given back) too — sequentially, never two holders at
     * once: the key is checked absent above either way. */
    uint64_t rel = after.orphans_released - before.orphans_released;
    TU_CHECK(rel >= 1 && rel <= N, "%s: released %llu (1..%d)", m, (unsigned long long)rel, N);
    TU_CHECK(after.orphans_unresolved == before.orphans_unresolved, "%s: none unresolved", m);

    lc_conn *conn = lct_conn(cli);
    lc_lock_args a = lct_args(mode, key, "after", mode == LC_REENTRANT ? 0 : 30000, 0);
    lc_guard *g = NULL;
    lc_status s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_OK, "%s: free afterwards: %s", m, lc_status_name(s));
    if (g)
        lc_release(conn, g);
    lc_conn_free(conn);
}

/* A release that timed out: the late reply is read, and the release ran. */
static void test_late_release(lc_client *cli, lc_mode mode)
{
    const char *m = lc_mode_name(mode);
    char key[128];
    lc_conn *conn = NULL;
    lc_guard *held = lct_hold(cli, mode, "release", key, sizeof key, &conn);
    lc_stats before = stats(cli);
    int64_t stopped = lc_now_ms();
    kill(r.pid, SIGSTOP);
    lc_status s = lc_release(conn, held);
    TU_CHECK(s == LC_IO, "%s: stalled release: %s", m, lc_status_name(s));
    resume_at(stopped);
    int64_t t0 = lc_now_ms();
    while (lc_now_ms() - t0 < tu_slack(1000) && tu_redis_int(r.port, "EXISTS %s", key) != 0)
        tu_sleep_ms(10);
    TU_CHECK(tu_redis_int(r.port, "EXISTS %s", key) == 0, "%s: released once Redis resumed", m);
    lc_stats after = stats(cli);
    TU_CHECK(after.orphans_adopted == before.orphans_adopted + 1 &&
                 after.orphans_released == before.orphans_released,
             "%s: adopted; nothing more to release", m);
    TU_CHECK(after.watchdog_active == 0, "%s: renewal stopped", m);
    lc_conn_free(conn);
}

/* The server closes the connection before answering: CLIENT PAUSE WRITE
 * holds the acquire inside Redis (read, not run), CLIENT KILL frees its
 * client, so it never runs. The reaper sees EOF and cannot tell whether it
 * ran: token sends its compare-and-delete on a fresh connection (nothing
 * to delete here); reentrant leaves it to the lease (counted unresolved).
 * Either way nothing is left, and no other connection's lock is touched. */
static void test_server_closed(lc_client *cli, lc_mode mode)
{
    const char *m = lc_mode_name(mode);
    char key[128];
    lct_key(key, sizeof key, "closed", mode);
    lc_conn *conn = lct_conn(cli);
    TU_REQUIRE(lc_conn_ping(conn) == LC_OK, "%s: ping", m);
    lc_stats before = stats(cli);
    char ok[16];
    TU_REQUIRE(tu_redis_str(r.port, ok, sizeof ok, "CLIENT PAUSE 5000 WRITE") == 0 &&
                   !strcmp(ok, "OK"),
               "CLIENT PAUSE");
    lc_lock_args a = lct_args(mode, key, "closed", mode == LC_REENTRANT ? 0 : 30000, 0);
    lc_guard *g = NULL;
    lc_status s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_IO, "%s: held by the pause: %s", m, lc_status_name(s));
    TU_CHECK(tu_redis_int(r.port, "CLIENT KILL TYPE normal SKIPME yes") >= 1, "%s: killed", m);
    TU_CHECK(tu_redis_str(r.port, ok, sizeof ok, "CLIENT UNPAUSE") == 0 && !strcmp(ok, "OK"),
             "%s: unpaused", m);
    uint64_t want = before.orphans_unresolved + (mode == LC_REENTRANT);
    int64_t t0 = lc_now_ms();
    while (lc_now_ms() - t0 < tu_slack(1000) && stats(cli).orphans_unresolved < want)
        tu_sleep_ms(10);
    tu_sleep_ms(100); /* token: the fresh compare-and-delete */
    lc_stats after = stats(cli);
    TU_CHECK(after.orphans_adopted == before.orphans_adopted + 1, "%s: adopted", m);
    TU_CHECK(after.orphans_unresolved == want && after.orphans_released == before.orphans_released,
             "%s: unresolved +%llu, released +%llu", m,
             (unsigned long long)(after.orphans_unresolved - before.orphans_unresolved),
             (unsigned long long)(after.orphans_released - before.orphans_released));
    TU_CHECK(tu_redis_int(r.port, "EXISTS %s", key) == 0, "%s: the killed acquire never ran", m);
    s = lc_acquire(conn, &a, &g);
    TU_CHECK(s == LC_OK, "%s: the handle reconnects: %s", m, lc_status_name(s));
    if (g)
        lc_release(conn, g);
    lc_conn_free(conn);
}

/* Freeing the client while an adopted command still waits for Redis: the
 * reaper stops at once (the lease ends the lock). */
static void test_shutdown(void)
{
    lc_client *cli = lct_client_t(r.port, 30000, TIMEOUT_MS);
    lc_conn *conn = lct_conn(cli);
    TU_REQUIRE(lc_conn_ping(conn) == LC_OK, "ping");
    lc_lock_args a = lct_args(LC_TOKEN, "orphan:{shutdown}:lock", "o", 30000, 0);
    lc_guard *g = NULL;
    int64_t stopped = lc_now_ms();
    kill(r.pid, SIGSTOP);
    TU_CHECK(lc_acquire(conn, &a, &g) == LC_IO, "stalled");
    TU_CHECK(stats(cli).orphans_adopted == 1, "adopted");
    lc_conn_free(conn);
    int64_t t0 = lc_now_ms();
    lc_client_free(cli);
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(took < tu_slack(200), "lc_client_free with an orphan pending took %lld ms",
             (long long)took);
    resume_at(stopped);
}

int main(void)
{
    memset(&r, 0, sizeof r);
    TU_REQUIRE(tu_redis_start(&r, 0, NULL) == 0, "private redis-server");
    lc_client *cli = lct_client_t(r.port, 30000, TIMEOUT_MS);
    const lc_mode modes[] = {LC_TOKEN, LC_REENTRANT, LC_FENCED};
    /* Load the scripts first: an EVALSHA stalled on a Redis that does not
     * know the script yet answers NOSCRIPT late, and takes no lock. */
    lc_conn *warm = lct_conn(cli);
    for (int i = 0; i < 3; i++) {
        lc_lock_args a = lct_args(modes[i], "orphan:{warm}:lock", "o", 1000, 0);
        lc_guard *g = NULL;
        TU_REQUIRE(lc_acquire(warm, &a, &g) == LC_OK && lc_release(warm, g) == LC_OK, "warm-up");
    }
    lc_conn_free(warm);
    for (int i = 0; i < 3; i++) {
        test_late_grant(cli, modes[i]);
        test_not_granted(cli, modes[i]);
        test_race(cli, modes[i]);
        test_late_release(cli, modes[i]);
        test_server_closed(cli, modes[i]);
    }
    lc_client_free(cli);
    test_shutdown();
    tu_redis_stop(&r);
    return tu_done();
}
