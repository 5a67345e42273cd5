/* test_lc_waiters — the reentrant mode's line of waiters (also under TSan):
 * every waiter gets the lock by handoff, not by its deadline; a waiter that
 * gives up does not stall the others; a release message lost while the
 * subscriber reconnects costs a bounded delay, not the holder's lease;
 * channels joined and left leave nothing subscribed; a raised cancel flag
 * ends a wait in every mode; and lc_conn_retry_pause sleeps a polling
 * mode's own pause. */
#include "lc_test.h"

#include <pthread.h>
#include <stdatomic.h>

static int port;
static lc_client *cli;

typedef struct waiter {
    const char *key;
    char owner[32];
    int64_t wait_ms, hold_ms;
    lc_status status;
    int64_t got_at;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    lc_conn *conn = lct_conn(cli);
    lc_lock_args a = lct_args(LC_REENTRANT, w->key, w->owner, 0, w->wait_ms);
    lc_guard *g = NULL;
    w->status = lc_acquire(conn, &a, &g);
    w->got_at = lc_now_ms();
    if (g) {
        tu_sleep_ms(w->hold_ms);
        lc_release(conn, g);
    }
    lc_conn_free(conn);
    return NULL;
}

/* 8 waiters on a held lock, each holding 20 ms once it has it, plus one
 * that gives up after 100 ms: all 8 get it, one after another, well before
 * their 10 s deadline. */
static void test_line(void)
{
    char key[128];
    lct_key(key, sizeof key, "line", LC_REENTRANT);
    lc_conn *conn = lct_conn(cli);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "holder", 0, 0);
    lc_guard *g;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "holder");
    waiter ws[9];
    pthread_t th[9];
    for (int i = 0; i < 9; i++) {
        ws[i] = (waiter){.key = key, .wait_ms = i == 4 ? 100 : 10000, .hold_ms = 20};
        snprintf(ws[i].owner, sizeof ws[i].owner, "w%d", i);
        pthread_create(&th[i], NULL, waiter_main, &ws[i]);
    }
    tu_sleep_ms(300);
    int64_t released = lc_now_ms();
    lc_release(conn, g);
    int64_t last = 0;
    for (int i = 0; i < 9; i++) {
        pthread_join(th[i], NULL);
        if (i == 4) {
            TU_CHECK(ws[i].status == LC_BUSY, "the impatient waiter gave up (%s)",
                     lc_status_name(ws[i].status));
            continue;
        }
        TU_CHECK(ws[i].status == LC_OK, "waiter %d acquired (%s)", i, lc_status_name(ws[i].status));
        if (ws[i].got_at - released > last)
            last = ws[i].got_at - released;
    }
    /* 8 x 20 ms of holding plus a handoff each: far from any deadline */
    TU_CHECK(last <= tu_slack(8 * 20 + 8 * 30 + 100), "the line drained in %lld ms",
             (long long)last);
    lc_conn_free(conn);
}

/* The subscriber connection is killed and the release message published
 * while it reconnects may be lost: the waiter still gets the lock within a
 * bounded delay (the starving head's poll), not after the 30 s lease. */
static void test_lost_message(void)
{
    char key[128];
    lct_key(key, sizeof key, "lostmsg", LC_REENTRANT);
    lc_conn *conn = lct_conn(cli);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "holder", 0, 0);
    lc_guard *g;
    TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "holder");
    waiter w = {.key = key, .owner = "waiter", .wait_ms = 10000, .hold_ms = 0};
    pthread_t th;
    pthread_create(&th, NULL, waiter_main, &w);
    tu_sleep_ms(200); /* the waiter is subscribed and starving */
    /* kill the subscriber and release in one pipelined write */
    redisContext *rc = redisConnect("127.0.0.1", port);
    char field[128];
    snprintf(field, sizeof field, "%s:holder", lc_client_instance_id(cli));
    redisAppendCommand(rc, "CLIENT KILL TYPE pubsub");
    redisAppendCommand(rc, "DEL %s", key);
    redisAppendCommand(rc, "PUBLISH redisson_lock__channel:%s 0", key);
    int64_t released = lc_now_ms();
    for (int i = 0; i < 3; i++) {
        redisReply *r;
        if (redisGetReply(rc, (void **)&r) == REDIS_OK)
            freeReplyObject(r);
    }
    redisFree(rc);
    pthread_join(th, NULL);
    TU_CHECK(w.status == LC_OK, "waiter acquired (%s)", lc_status_name(w.status));
    TU_CHECK(w.got_at - released <= tu_slack(500), "in %lld ms after the lost release",
             (long long)(w.got_at - released));
    TU_CHECK(lc_release(conn, g) == LC_NOT_OWNER, "the old holder's lock is gone");
    lc_conn_free(conn);
}

/* The lock vanishes with no release message (deleted from outside; the
 * same as a message lost on a half-open subscriber connection): the first
 * waiter still gets it within its 100 ms poll, not at the holder's 30 s
 * PTTL or its own deadline. */
static void test_silent_release(void)
{
    char key[128];
    lc_conn *conn;
    lc_guard *g = lct_hold(cli, LC_REENTRANT, "silent", key, sizeof key, &conn);
    lct_waiter w = {.cli = cli, .mode = LC_REENTRANT, .key = key, .wait_ms = 5000};
    pthread_t th;
    pthread_create(&th, NULL, lct_waiter_main, &w);
    tu_sleep_ms(300); /* the waiter is first in line and starving */
    int64_t gone = lc_now_ms();
    tu_redis_int(port, "DEL %s", key);
    pthread_join(th, NULL);
    TU_CHECK(w.status == LC_OK, "waiter acquired (%s)", lc_status_name(w.status));
    TU_CHECK(w.end - gone <= tu_slack(300), "in %lld ms after the silent release",
             (long long)(w.end - gone));
    lc_release(conn, g);
    lc_conn_free(conn);
}

/* Many channels joined briefly (wait_ms 1 on held locks): afterwards nothing
 * stays subscribed, and the subscriber is not left spinning. */
static void test_channels_cleaned(void)
{
    lc_conn *conn = lct_conn(cli), *other = lct_conn(cli);
    for (int i = 0; i < 200; i++) {
        char key[128];
        snprintf(key, sizeof key, "lctest:{clean-%d-%lld}:lock", i, (long long)lc_now_ms());
        lc_lock_args a = lct_args(LC_REENTRANT, key, "holder", 1000, 0);
        lc_lock_args b = lct_args(LC_REENTRANT, key, "waiter", 1000, 1);
        lc_guard *g, *gb = NULL;
        TU_REQUIRE(lc_acquire(conn, &a, &g) == LC_OK, "holder %d", i);
        lc_status s = lc_acquire(other, &b, &gb);
        TU_CHECK(s == LC_BUSY, "waiter %d busy (%s)", i, lc_status_name(s));
        lc_release(conn, g);
    }
    lc_stats s = lct_settled_stats(cli, tu_slack(2000));
    TU_CHECK(s.pubsub_channels == 0 && s.pubsub_waiters == 0, "nothing subscribed (%llu)",
             (unsigned long long)s.pubsub_channels);
    lc_conn_free(conn);
    lc_conn_free(other);
}

/* A waiter whose cancel flag is raised (a server shutting down) gives up
 * within LC_CANCEL_LATENCY_MS in every waiting mode, holding nothing. */
static void test_cancel(void)
{
    const lc_mode modes[] = {LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT};
    for (int i = 0; i < 4; i++) {
        char key[128];
        lc_conn *conn;
        lc_guard *g = lct_hold(cli, modes[i], "cancel", key, sizeof key, &conn);
        atomic_int flag = 0;
        lct_waiter j = {
            .cli = cli, .mode = modes[i], .key = key, .wait_ms = 10000, .cancel = &flag};
        pthread_t th;
        pthread_create(&th, NULL, lct_waiter_main, &j);
        tu_sleep_ms(200);
        int64_t raised = lc_now_ms();
        atomic_store(&flag, 1);
        pthread_join(th, NULL);
        TU_CHECK(j.status == LC_CANCELED, "%s: canceled (%s)", lc_mode_name(modes[i]),
                 lc_status_name(j.status));
        TU_CHECK(j.end - raised <= tu_slack(LC_CANCEL_LATENCY_MS + 30),
                 "%s: gave up %lld ms after the flag", lc_mode_name(modes[i]),
                 (long long)(j.end - raised));
        TU_CHECK(lc_release(conn, g) == LC_OK, "%s: the holder still held it",
                 lc_mode_name(modes[i]));
        lc_conn_free(conn);
    }
    lc_stats s;
    lc_client_stats(cli, &s);
    TU_CHECK(s.pubsub_waiters == 0, "no waiter left in line");
}

/* lc_conn_retry_pause: the polling modes' pause (retry_interval_ms 200:
 * 200..300 ms for token, 0..400 for redlock), capped by max_ms, cut by a
 * raised cancel flag; refused for a mode that does not poll. Lower bounds
 * are exact (a sleep never ends early); upper ones leave room for a busy
 * machine, below the next bound that would tell a wrong pause. */
static void test_retry_pause(void)
{
    lc_options o;
    lc_options_init(&o);
    o.redis_port = port;
    o.retry_interval_ms = 200;
    lc_client *c = NULL;
    char err[256];
    TU_REQUIRE(lc_client_new(&o, &c, err, sizeof err) == LC_OK, "client: %s", err);
    lc_conn *conn = lct_conn(c);
    int64_t slept = -1;
    for (lc_mode m = 0; m < LC_MODE_COUNT; m++) {
        bool polls = lc_mode_info_of(m)->polls;
        TU_CHECK(polls == (m == LC_SETNX || m == LC_TOKEN || m == LC_FENCED || m == LC_REDLOCK),
                 "%s: polls %d", lc_mode_name(m), polls);
        TU_CHECK(lc_mode_info_of(m)->queues_waiters == (m == LC_REENTRANT), "%s: queues_waiters",
                 lc_mode_name(m));
        TU_CHECK(lc_mode_info_of(m)->min_lease_ms == (m == LC_REDLOCK ? 3 : 1),
                 "%s: min_lease_ms %lld", lc_mode_name(m),
                 (long long)lc_mode_info_of(m)->min_lease_ms);
        if (!polls)
            TU_CHECK(lc_conn_retry_pause(conn, m, 100, NULL, &slept) == LC_MISUSE && slept == 0,
                     "%s: no pause to take (misuse)", lc_mode_name(m));
    }
    int64_t lo = 100000, hi = 0;
    for (int i = 0; i < 3; i++) {
        int64_t t0 = lc_now_ms();
        TU_CHECK(lc_conn_retry_pause(conn, LC_TOKEN, 10000, NULL, &slept) == LC_OK, "token pause");
        int64_t took = lc_now_ms() - t0;
        lo = slept < lo ? slept : lo;
        hi = slept > hi ? slept : hi;
        TU_CHECK(took >= slept && took <= slept + tu_slack(20), "slept %lld, took %lld",
                 (long long)slept, (long long)took);
    }
    TU_CHECK(lo >= 200 && hi < 300 + tu_slack(100), "token: 3 pauses in %lld..%lld ms",
             (long long)lo, (long long)hi);
    TU_CHECK(lc_conn_retry_pause(conn, LC_TOKEN, 30, NULL, &slept) == LC_OK && slept >= 30 &&
                 slept < 30 + tu_slack(100),
             "capped at max_ms 30: %lld", (long long)slept);
    TU_CHECK(lc_conn_retry_pause(conn, LC_REDLOCK, 10000, NULL, &slept) == LC_OK &&
                 slept < 400 + tu_slack(100),
             "redlock: 0..400 ms: %lld", (long long)slept);
    atomic_int flag = 0;
    int64_t t0 = lc_now_ms();
    TU_CHECK(lc_conn_retry_pause(conn, LC_FENCED, 0, &flag, &slept) == LC_OK && slept == 0,
             "max_ms 0: no pause");
    atomic_store(&flag, 1);
    TU_CHECK(lc_conn_retry_pause(conn, LC_TOKEN, 10000, &flag, &slept) == LC_CANCELED &&
                 lc_now_ms() - t0 < tu_slack(100),
             "a raised flag: canceled at once");
    TU_CHECK(lc_conn_retry_pause(NULL, LC_TOKEN, 10, NULL, &slept) == LC_MISUSE &&
                 lc_conn_retry_pause(conn, LC_TOKEN, -1, NULL, NULL) == LC_MISUSE,
             "NULL conn, negative max_ms: misuse");
    lc_conn_free(conn);
    lc_client_free(c);
}

int main(void)
{
    port = tu_redis_port();
    cli = lct_client(port, 0);
    test_line();
    test_lost_message();
    test_silent_release();
    test_channels_cleaned();
    test_cancel();
    test_retry_pause();
    lc_client_free(cli);
    return tu_done();
}
