/* test_lc_threads — many threads against one real Redis (also run under
 * TSan): mutual exclusion around a non-atomic GET/SET increment and the
 * same run losing updates without a lock, waiters waking on release, wait
 * accuracy, and a contended storm that must leave no subscription, renewal
 * or leak behind. */
#include "lc_test.h"

#include <pthread.h>
#include <unistd.h>

static int port;
static lc_client *cli;

typedef struct incr_job {
    lc_mode mode;
    const char *key, *counter;
    int iterations;
    int64_t window_us; /* sleep between GET and SET: widens the race */
    int failures;
    int done;
} incr_job;

static void *incr_main(void *arg)
{
    incr_job *j = arg;
    lc_conn *conn = lct_conn(cli);
    char owner[32];
    for (int i = 0; i < j->iterations; i++) {
        snprintf(owner, sizeof owner, "t%p-%d", (void *)&owner, i);
        lc_lock_args a = lct_args(j->mode, j->key, owner, j->mode == LC_REENTRANT ? 0 : 10000,
                                  20000);
        lc_guard *g;
        if (lc_acquire(conn, &a, &g) != LC_OK) {
            j->failures++;
            continue;
        }
        redisContext *ctx = lc_conn_redis(conn);
        redisReply *r = redisCommand(ctx, "GET %s", j->counter);
        long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        if (r)
            freeReplyObject(r);
        if (j->window_us)
            usleep((useconds_t)j->window_us);
        r = redisCommand(ctx, "SET %s %ld", j->counter, v + 1);
        if (r)
            freeReplyObject(r);
        if (lc_release(conn, g) != LC_OK)
            j->failures++;
        j->done++;
    }
    lc_conn_free(conn);
    return NULL;
}

static long run_increments(lc_mode mode, int threads, int iterations, int64_t window_us,
                           int *failures)
{
    char key[128], counter[160];
    lct_key(key, sizeof key, "excl", mode);
    snprintf(counter, sizeof counter, "%s:counter", key);
    tu_redis_int(port, "DEL %s", counter);
    pthread_t th[64];
    incr_job jobs[64];
    for (int i = 0; i < threads; i++) {
        jobs[i] = (incr_job){mode, key, counter, iterations, window_us, 0, 0};
        pthread_create(&th[i], NULL, incr_main, &jobs[i]);
    }
    *failures = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        *failures += jobs[i].failures;
    }
    char v[32];
    tu_redis_str(port, v, sizeof v, "GET %s", counter);
    tu_redis_int(port, "DEL %s", counter);
    return atol(v);
}

/* 16 threads x 100 increments inside the lock: exactly 1600; the same
 * run under `none` loses updates, so the test can fail. */
static void test_mutual_exclusion(void)
{
    const lc_mode modes[] = {LC_NONE, LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT};
    for (int i = 0; i < 5; i++) {
        int failures;
        long total = run_increments(modes[i], 16, 100, 200, &failures);
        if (modes[i] == LC_NONE) {
            TU_CHECK(total < 1600, "none loses updates: %ld of 1600", total);
        } else {
            TU_CHECK(total == 1600 && failures == 0, "%s: counter %ld (failures %d)",
                     lc_mode_name(modes[i]), total, failures);
        }
    }
}

/* A waiter with wait_ms=5000 gets the lock within 50 ms of the release,
 * not at lease expiry (the lease here is 30 s). */
static void test_wake_on_release(void)
{
    const lc_mode modes[] = {LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT};
    for (int i = 0; i < 4; i++) {
        char key[128];
        lc_conn *conn;
        lc_guard *g = lct_hold(cli, modes[i], "wake", key, sizeof key, &conn);
        lct_waiter t = {.cli = cli, .mode = modes[i], .key = key, .wait_ms = 5000};
        pthread_t th;
        pthread_create(&th, NULL, lct_waiter_main, &t);
        tu_sleep_ms(300);
        int64_t released = lc_now_ms();
        TU_CHECK(lc_release(conn, g) == LC_OK, "release");
        pthread_join(th, NULL);
        TU_CHECK(t.status == LC_OK, "%s waiter acquired (%s)", lc_mode_name(modes[i]),
                 lc_status_name(t.status));
        TU_CHECK(t.end - released <= tu_slack(50), "%s waiter in %lld ms after release",
                 lc_mode_name(modes[i]), (long long)(t.end - released));
        lc_conn_free(conn);
    }
}

/* wait_ms=300 on a held lock: busy after 300-400 ms. */
static void test_wait_accuracy(void)
{
    const lc_mode modes[] = {LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT};
    for (int i = 0; i < 4; i++) {
        char key[128];
        lc_conn *conn;
        lc_guard *g = lct_hold(cli, modes[i], "waitacc", key, sizeof key, &conn);
        lct_waiter t = {.cli = cli, .mode = modes[i], .key = key, .wait_ms = 300};
        pthread_t th;
        pthread_create(&th, NULL, lct_waiter_main, &t);
        pthread_join(th, NULL);
        TU_CHECK(t.status == LC_BUSY, "%s: busy (%s)", lc_mode_name(modes[i]),
                 lc_status_name(t.status));
        TU_CHECK(t.end - t.start >= 300 && t.end - t.start <= tu_slack(400),
                 "%s: busy after %lld ms", lc_mode_name(modes[i]), (long long)(t.end - t.start));
        lc_release(conn, g);
        lc_conn_free(conn);
    }
}

typedef struct storm_job {
    lc_mode mode;
    const char *key;
    int iterations, ok, other;
    int64_t max_wait_ms; /* the longest single acquisition */
} storm_job;

static void *storm_main(void *arg)
{
    storm_job *j = arg;
    lc_conn *conn = lct_conn(cli);
    char owner[32];
    snprintf(owner, sizeof owner, "storm-%p", (void *)j);
    for (int i = 0; i < j->iterations; i++) {
        lc_lock_args a = lct_args(j->mode, j->key, owner, j->mode == LC_REENTRANT ? 0 : 10000,
                                  60000);
        lc_guard *g;
        int64_t t0 = lc_now_ms();
        lc_status s = lc_acquire(conn, &a, &g);
        if (lc_now_ms() - t0 > j->max_wait_ms)
            j->max_wait_ms = lc_now_ms() - t0;
        if (s == LC_OK && lc_release(conn, g) == LC_OK)
            j->ok++;
        else
            j->other++;
    }
    lc_conn_free(conn);
    return NULL;
}

/* 16 threads x 1000 contended acquire/release per mode: every cycle
 * succeeds, and afterwards no channel stays subscribed, no renewal stays
 * scheduled (ASan/LSan check the memory). */
static void test_storm(void)
{
    const lc_mode modes[] = {LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT};
    int iterations = getenv("LC_STORM_ITERATIONS") ? atoi(getenv("LC_STORM_ITERATIONS")) : 1000;
    for (int i = 0; i < 4; i++) {
        char key[128], channel[200];
        lct_key(key, sizeof key, "storm", modes[i]);
        snprintf(channel, sizeof channel, "redisson_lock__channel:%s", key);
        storm_job jobs[16];
        pthread_t th[16];
        int64_t t0 = lc_now_ms();
        for (int k = 0; k < 16; k++) {
            jobs[k] = (storm_job){modes[i], key, iterations, 0, 0, 0};
            pthread_create(&th[k], NULL, storm_main, &jobs[k]);
        }
        int ok = 0, other = 0;
        int64_t max_wait = 0;
        for (int k = 0; k < 16; k++) {
            pthread_join(th[k], NULL);
            ok += jobs[k].ok;
            other += jobs[k].other;
            if (jobs[k].max_wait_ms > max_wait)
                max_wait = jobs[k].max_wait_ms;
        }
        int64_t ms = lc_now_ms() - t0;
        printf("storm %-9s %d cycles in %lld ms, longest acquisition %lld ms\n",
               lc_mode_name(modes[i]), ok, (long long)ms, (long long)max_wait);
        /* A stalled line (a lost wake-up) shows as an acquisition that took
         * seconds although the lock changed hands every few ms. */
        TU_CHECK(max_wait <= tu_slack(3000), "%s: longest acquisition %lld ms",
                 lc_mode_name(modes[i]), (long long)max_wait);
        TU_CHECK(ok == 16 * iterations && other == 0, "%s storm: %d ok, %d failed",
                 lc_mode_name(modes[i]), ok, other);
        lc_stats s = lct_settled_stats(cli, 2000);
        TU_CHECK(s.pubsub_channels == 0 && s.pubsub_waiters == 0, "%s: no subscription left (%llu)",
                 lc_mode_name(modes[i]), (unsigned long long)s.pubsub_channels);
        TU_CHECK(s.watchdog_active == 0, "%s: no renewal left", lc_mode_name(modes[i]));
        redisContext *rc = redisConnect("127.0.0.1", port);
        redisReply *r = redisCommand(rc, "PUBSUB NUMSUB %s", channel);
        TU_CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[1]->integer == 0,
                 "%s: PUBSUB NUMSUB is 0", lc_mode_name(modes[i]));
        if (r)
            freeReplyObject(r);
        redisFree(rc);
        TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "%s: lock key gone",
                 lc_mode_name(modes[i]));
    }
}

int main(void)
{
    port = tu_redis_port();
    cli = lct_client(port, 0);
    test_mutual_exclusion();
    test_wake_on_release();
    test_wait_accuracy();
    test_storm();
    lc_client_free(cli);
    return tu_done();
}
