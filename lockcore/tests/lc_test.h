/* lc_test.h — helpers shared by lockcore's tests. */
#ifndef MIAOSHA_LC_TEST_H
#define MIAOSHA_LC_TEST_H

#include "lockcore.h"
#include "tu.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A client on the redis-server at `port`, with test-sized knobs: a 2 s
 * command timeout so a loaded machine does not turn into I/O errors (the
 * tests of timeouts set their own), 5 ms polling. */
static inline lc_client *lct_client_t(int port, int64_t watchdog_ms, int timeout_ms)
{
    lc_options o;
    lc_options_init(&o);
    o.redis_port = port;
    o.connect_timeout_ms = timeout_ms;
    o.command_timeout_ms = timeout_ms;
    o.retry_interval_ms = 5;
    if (watchdog_ms > 0)
        o.watchdog_timeout_ms = watchdog_ms;
    lc_client *c = NULL;
    char err[256];
    signal(SIGPIPE, SIG_IGN); /* hiredis writes with write(): lockcore/README.md */
    if (lc_client_new(&o, &c, err, sizeof err) != LC_OK) {
        fprintf(stderr, "lc_client_new: %s\n", err);
        exit(1);
    }
    return c;
}

static inline lc_client *lct_client(int port, int64_t watchdog_ms)
{
    return lct_client_t(port, watchdog_ms, 2000);
}

static inline lc_conn *lct_conn(lc_client *c)
{
    lc_conn *conn = NULL;
    if (lc_conn_new(c, &conn) != LC_OK)
        exit(1);
    return conn;
}

static inline lc_lock_args lct_args(lc_mode mode, const char *key, const char *owner,
                                    int64_t lease_ms, int64_t wait_ms)
{
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    a.key = key;
    a.owner = owner;
    a.lease_ms = lease_ms;
    a.wait_ms = wait_ms;
    /* One counter for every fenced test: its numbers only have to grow. */
    if (mode == LC_FENCED)
        a.fence_key = "lctest:fence";
    return a;
}

/* A fresh key per test and mode, so tests never see each other's locks. */
static inline void lct_key(char *buf, size_t len, const char *test, lc_mode mode)
{
    snprintf(buf, len, "lctest:{%s-%s-%d}:lock", test, lc_mode_name(mode),
             (int)(lc_now_ms() % 1000000));
}

/* Takes the lock of a fresh key (written to key, keylen bytes) as owner
 * "holder" on a new connection (*conn, the caller frees it): lease 30 s,
 * reentrant on its watchdog. Ends the test if it cannot. */
static inline lc_guard *lct_hold(lc_client *cli, lc_mode mode, const char *test, char *key,
                                 size_t keylen, lc_conn **conn)
{
    lct_key(key, keylen, test, mode);
    *conn = lct_conn(cli);
    lc_lock_args a = lct_args(mode, key, "holder", mode == LC_REENTRANT ? 0 : 30000, 0);
    lc_guard *g = NULL;
    TU_REQUIRE(lc_acquire(*conn, &a, &g) == LC_OK, "%s: holder", lc_mode_name(mode));
    return g;
}

/* The client's counters once no channel stays subscribed, or after
 * within_ms: the subscriber thread sends UNSUBSCRIBE after the last waiter
 * left, so it lags a little. Polls every 10 ms. */
static inline lc_stats lct_settled_stats(lc_client *cli, int64_t within_ms)
{
    lc_stats s;
    int64_t until = lc_now_ms() + within_ms;
    do {
        lc_client_stats(cli, &s);
        if (s.pubsub_channels == 0)
            break;
        tu_sleep_ms(10);
    } while (lc_now_ms() < until);
    return s;
}

/* One acquisition on its own thread and connection, timed: the shape of
 * every "a waiter, while the main thread holds the lock" test. Owner
 * "waiter"; lease 30 s (reentrant: the watchdog); released at once. */
typedef struct lct_waiter {
    lc_client *cli;
    lc_mode mode;
    const char *key;
    int64_t wait_ms;
    const atomic_int *cancel; /* NULL: none */
    lc_status status;
    int64_t start, end; /* lc_now_ms() around lc_acquire */
} lct_waiter;

static inline void *lct_waiter_main(void *arg)
{
    lct_waiter *w = arg;
    lc_conn *conn = lct_conn(w->cli);
    lc_lock_args a = lct_args(w->mode, w->key, "waiter", w->mode == LC_REENTRANT ? 0 : 30000,
                              w->wait_ms);
    a.cancel = w->cancel;
    lc_guard *g = NULL;
    w->start = lc_now_ms();
    w->status = lc_acquire(conn, &a, &g);
    w->end = lc_now_ms();
    if (g)
        lc_release(conn, g);
    lc_conn_free(conn);
    return NULL;
}

#endif
