/* test_lc_pipe — the caller's commands in a lock's round trip (lc_pipe,
 * lc_acquire_pipe, lc_release_pipe) against a real Redis: replies come back
 * in order and run under the lock in every mode; a busy or failed acquire
 * discards them and leaves the connection in step; a waiting acquire sends
 * them with each attempt; a timed-out call leaves a connection the next call
 * can use; a reentrant (and a token) waiter woken by a release reads what
 * the holder wrote in its release's round trip; an acquire sent ahead
 * (lc_acquire_send) ends as lc_acquire_pipe alone would, and another call
 * in between is refused (or, for what does not touch the connection's
 * Redis, runs): another owner, lease or key is not the sent acquisition;
 * a Redis whose connect times out costs the pair one connect timeout, not
 * two; a connection freed with an attempt pending gives its lock back (an
 * attempt Redis answered NOSCRIPT took none); an acquire sent ahead that
 * meets NOSCRIPT still ends with the replies of its EVAL's round;
 * lc_conn_pipes_each on one Redis sends several pipes in one write; a reply
 * the caller left unread (on the socket, in hiredis's reader, or a command
 * left in its write buffer) makes the next call reconnect.
 *
 * On a private redis-server: the test pauses Redis (CLIENT PAUSE ALL) and
 * flushes its script cache, which would stall or disturb the tests sharing
 * the suite's server; and an acquire sent ahead as EVALSHA must find the
 * script it loaded, where another test's SCRIPT FLUSH would turn it into a
 * NOSCRIPT reply that takes no lock. */
#include "lc_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

/* A waiting acquire that must make two attempts before its deadline: long
 * enough that a round trip slowed down by a loaded machine still leaves
 * time for a second one (each attempt is one round trip, 5 ms apart). */
enum { BUSY_WAIT_MS = 200 };

static tu_redis rd;
static int port;
static lc_client *cli;
static lc_conn *c1, *c2;

static const lc_mode all[] = {LC_NONE, LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT, LC_FENCED};
static const lc_mode locking[] = {LC_MUTEX, LC_SETNX, LC_TOKEN, LC_REENTRANT, LC_FENCED};

static int in_redis(lc_mode m)
{
    return m == LC_SETNX || m == LC_TOKEN || m == LC_REENTRANT || m == LC_FENCED;
}

static void data_key(char *buf, size_t len, const char *lock_key, const char *what)
{
    /* Same hash tag as the lock key. */
    snprintf(buf, len, "%.*s%s", (int)(strchr(lock_key, '}') - lock_key + 1), lock_key, what);
}

/* A string reply equal to want? Frees r. */
static int is_str(redisReply *r, const char *want)
{
    int ok = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
             strcmp(r->str, want) == 0;
    if (r)
        freeReplyObject(r);
    return ok;
}

static int is_int(redisReply *r, long long want)
{
    int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == want;
    if (r)
        freeReplyObject(r);
    return ok;
}

/* The connection answers the next command with its own reply (in step). */
static int in_step(lc_conn *conn)
{
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return 0;
    return is_str(redisCommand(ctx, "ECHO %s", "in-step"), "in-step");
}

static void test_replies_in_order(void)
{
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        lc_mode m = all[i];
        const char *mn = lc_mode_name(m);
        char key[128], stock[160];
        lct_key(key, sizeof key, "pipe-order", m);
        data_key(stock, sizeof stock, key, ":stock");
        tu_redis_int(port, "SET %s 7", stock);
        lc_lock_args a = lct_args(m, key, "o", m == LC_REENTRANT ? 0 : 5000, 0);
        lc_pipe p;
        lc_pipe_init(&p);
        TU_REQUIRE(lc_pipe_append(&p, "GET %s", stock) == LC_OK, "append");
        TU_REQUIRE(lc_pipe_append(&p, "ECHO %s", "hi") == LC_OK, "append");
        TU_REQUIRE(lc_pipe_append(&p, "EXISTS %s", key) == LC_OK, "append");
        lc_guard *g = NULL;
        TU_REQUIRE(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK && g, "%s: acquire", mn);
        TU_CHECK(is_str(lc_pipe_take(&p, 0), "7"), "%s: GET reply first", mn);
        TU_CHECK(is_str(lc_pipe_take(&p, 1), "hi"), "%s: ECHO reply second", mn);
        /* The read ran after the lock command: the lock key existed. */
        TU_CHECK(is_int(lc_pipe_take(&p, 2), in_redis(m) ? 1 : 0), "%s: EXISTS lock", mn);
        TU_CHECK(lc_pipe_take(&p, 2) == NULL && lc_pipe_take(&p, 3) == NULL, "%s: taken once", mn);
        if (in_redis(m))
            TU_CHECK(tu_redis_int(port, "PTTL %s", key) > 0, "%s: lease set", mn);
        lc_pipe_clear(&p);

        TU_REQUIRE(lc_pipe_append(&p, "MULTI") == LC_OK, "append");
        TU_REQUIRE(lc_pipe_append(&p, "SET %s %d", stock, 6) == LC_OK, "append");
        TU_REQUIRE(lc_pipe_append(&p, "EXISTS %s", key) == LC_OK, "append");
        TU_REQUIRE(lc_pipe_append(&p, "EXEC") == LC_OK, "append");
        TU_CHECK(lc_release_pipe(c1, g, &p) == LC_OK, "%s: release", mn);
        TU_CHECK(is_str(lc_pipe_take(&p, 0), "OK"), "%s: MULTI", mn);
        TU_CHECK(is_str(lc_pipe_take(&p, 1), "QUEUED") && is_str(lc_pipe_take(&p, 2), "QUEUED"),
                 "%s: QUEUED", mn);
        redisReply *exec = lc_pipe_take(&p, 3);
        /* EXEC ran before the release: the lock key still existed. */
        TU_CHECK(exec && exec->type == REDIS_REPLY_ARRAY && exec->elements == 2 &&
                     exec->element[1]->type == REDIS_REPLY_INTEGER &&
                     exec->element[1]->integer == (in_redis(m) ? 1 : 0),
                 "%s: EXEC under the lock", mn);
        if (exec)
            freeReplyObject(exec);
        lc_pipe_clear(&p);
        TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "%s: released", mn);
        TU_CHECK(tu_redis_int(port, "GET %s", stock) == 6, "%s: written", mn);
        TU_CHECK(in_step(c1), "%s: connection in step", mn);
    }
}

/* A busy acquire hands back no reply; a waiting one resends the commands
 * with each attempt (token, reentrant) — setnx sends them only with the
 * PEXPIRE of a won SETNX, mutex only once the lock is held. */
static void test_busy_discards(void)
{
    for (size_t i = 0; i < sizeof locking / sizeof *locking; i++) {
        lc_mode m = locking[i];
        const char *mn = lc_mode_name(m);
        char key[128], stock[160], count[160];
        lc_conn *hc = NULL;
        lc_guard *held = lct_hold(cli, m, "pipe-busy", key, sizeof key, &hc);
        data_key(stock, sizeof stock, key, ":stock");
        data_key(count, sizeof count, key, ":count");
        tu_redis_int(port, "SET %s 5", stock);
        lc_lock_args a = lct_args(m, key, "second", m == LC_REENTRANT ? 0 : 5000, 0);
        lc_pipe p;
        lc_pipe_init(&p);
        lc_pipe_append(&p, "GET %s", stock);
        lc_guard *g = NULL;
        TU_CHECK(lc_acquire_pipe(c2, &a, &p, &g) == LC_BUSY && !g, "%s: busy", mn);
        TU_CHECK(lc_pipe_take(&p, 0) == NULL, "%s: no reply on busy", mn);
        TU_CHECK(in_step(c2), "%s: in step after busy", mn);
        lc_pipe_clear(&p);

        /* A write, only to count the attempts (real callers send reads). */
        lc_pipe_append(&p, "INCR %s", count);
        a.wait_ms = BUSY_WAIT_MS;
        TU_CHECK(lc_acquire_pipe(c2, &a, &p, &g) == LC_BUSY && !g, "%s: busy after wait", mn);
        TU_CHECK(lc_pipe_take(&p, 0) == NULL, "%s: no reply after wait", mn);
        int64_t sent = tu_redis_int(port, "GET %s", count);
        if (m == LC_TOKEN || m == LC_REENTRANT || m == LC_FENCED)
            TU_CHECK(sent >= 2, "%s: sent with every attempt (%lld)", mn, (long long)sent);
        else
            TU_CHECK(sent == -1, "%s: never sent without the lock (%lld)", mn, (long long)sent);
        TU_CHECK(in_step(c2), "%s: in step after waiting", mn);
        lc_pipe_clear(&p);

        TU_CHECK(lc_release(hc, held) == LC_OK, "%s: holder release", mn);
        lc_pipe_append(&p, "GET %s", stock);
        a.wait_ms = 0;
        TU_CHECK(lc_acquire_pipe(c2, &a, &p, &g) == LC_OK, "%s: acquire after release", mn);
        TU_CHECK(is_str(lc_pipe_take(&p, 0), "5"), "%s: reply after release", mn);
        if (g)
            TU_CHECK(lc_release(c2, g) == LC_OK, "%s: release", mn);
        lc_pipe_clear(&p);
        lc_conn_free(hc);
    }
}

/* An error reply to the lock command is LC_IO with nothing handed back and
 * the connection in step; an error reply to the caller's command is the
 * caller's reply. */
static void test_errors(void)
{
    char key[128], hash[160];
    lct_key(key, sizeof key, "pipe-err", LC_REENTRANT);
    tu_redis_int(port, "SET %s not-a-hash", key);
    lc_lock_args a = lct_args(LC_REENTRANT, key, "o", 0, 0);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "ECHO %s", "x");
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire_pipe(c1, &a, &p, &g) == LC_IO && !g, "WRONGTYPE script: io");
    TU_CHECK(lc_pipe_take(&p, 0) == NULL, "no reply on io");
    TU_CHECK(in_step(c1), "in step after an error reply");
    lc_pipe_clear(&p);

    lct_key(key, sizeof key, "pipe-err2", LC_TOKEN);
    data_key(hash, sizeof hash, key, ":hash");
    tu_redis_int(port, "HSET %s f 1", hash);
    a = lct_args(LC_TOKEN, key, "o", 5000, 0);
    lc_pipe_append(&p, "GET %s", hash);
    TU_CHECK(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK, "caller's error reply: ok");
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(r && r->type == REDIS_REPLY_ERROR, "caller's error reply handed back");
    if (r)
        freeReplyObject(r);
    TU_CHECK(lc_release_pipe(c1, g, &p) == LC_OK, "release resends nothing it was not given");
    lc_pipe_clear(&p);

    for (int k = 0; k < LC_PIPE_MAX; k++)
        TU_REQUIRE(lc_pipe_append(&p, "PING") == LC_OK, "append %d", k);
    TU_CHECK(lc_pipe_append(&p, "PING") == LC_MISUSE, "full pipe");
    const char *argv[] = {"PING"};
    TU_CHECK(lc_pipe_append_argv(&p, 1, argv, NULL) == LC_MISUSE, "full pipe (argv)");
    lc_pipe_clear(&p);
    TU_CHECK(lc_pipe_append_argv(&p, 0, argv, NULL) == LC_MISUSE, "no argument");
    const char *holed[] = {"GET", NULL};
    TU_CHECK(lc_pipe_append_argv(&p, 2, holed, NULL) == LC_MISUSE, "a NULL argument");
    /* Redis never answers a command of no arguments: refused here rather
     * than waited for until the command timeout. */
    TU_CHECK(lc_pipe_append(&p, "") == LC_MISUSE && lc_pipe_append(&p, "   ") == LC_MISUSE &&
                 p.n == 0,
             "an empty command");
    lc_pipe_clear(NULL);

    /* A pipe never initialised (garbage everywhere, its reply pointers
     * too: none of them may be freed): the lock is released all the same,
     * none of it sent, and the status says so. */
    lct_key(key, sizeof key, "pipe-uninit", LC_TOKEN);
    a = lct_args(LC_TOKEN, key, "o", 5000, 0);
    lc_pipe junk;
    memset(&junk, 0xA5, sizeof junk);
    junk.n = 99;
    TU_CHECK(lc_acquire_pipe(c1, &a, &junk, &g) == LC_MISUSE && g == NULL &&
                 strstr(lc_conn_errstr(c1), "not initialised"),
             "an uninitialised pipe to acquire: misuse (%s)", lc_conn_errstr(c1));
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire");
    TU_CHECK(lc_release_pipe(c1, g, &junk) == LC_MISUSE &&
                 strstr(lc_conn_errstr(c1), "not initialised"),
             "an uninitialised pipe: misuse (%s)", lc_conn_errstr(c1));
    TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "the lock was released");
    TU_CHECK(lc_conn_pipe(c1, &junk) == LC_MISUSE && strstr(lc_conn_errstr(c1), "lc_pipe"),
             "lc_conn_pipe names it: %s", lc_conn_errstr(c1));
}

/* A paused Redis: the acquire times out (LC_IO, no reply); the next call
 * on the same handle reconnects and gets its own replies, not stale ones. */
static void test_timeout(void)
{
    lc_client *fast = lct_client_t(port, 0, 200);
    lc_conn *c = lct_conn(fast);
    char key[128], stock[160];
    lct_key(key, sizeof key, "pipe-timeout", LC_TOKEN);
    data_key(stock, sizeof stock, key, ":stock");
    tu_redis_int(port, "SET %s 3", stock);
    TU_REQUIRE(in_step(c), "connected");
    lc_lock_args a = lct_args(LC_TOKEN, key, "o", 300, 0);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", stock);
    char ok[16];
    TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "CLIENT PAUSE 600 ALL") == 0, "pause");
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire_pipe(c, &a, &p, &g) == LC_IO && !g, "paused: io");
    TU_CHECK(lc_pipe_take(&p, 0) == NULL, "paused: no reply");
    tu_sleep_ms(700);
    /* The timed-out SET NX ran when the pause ended: its lease frees it. */
    a.wait_ms = 2000;
    TU_CHECK(lc_acquire_pipe(c, &a, &p, &g) == LC_OK, "after the pause: ok (%s)",
             lc_conn_errstr(c));
    TU_CHECK(is_str(lc_pipe_take(&p, 0), "3"), "after the pause: its own reply");
    if (g)
        TU_CHECK(lc_release(c, g) == LC_OK, "release");
    TU_CHECK(in_step(c), "in step");
    lc_pipe_clear(&p);
    lc_conn_free(c);
    lc_client_free(fast);
}

/* A waiter woken by the holder's release reads, in its acquire's round
 * trip, what the holder wrote in its release's. */
typedef struct pipe_waiter {
    lc_mode mode;
    const char *key, *stock, *tries; /* tries: INCRed by each attempt */
    lc_status status;
    char got[32];
    int64_t end;
} pipe_waiter;

static void *pipe_waiter_main(void *arg)
{
    pipe_waiter *w = arg;
    lc_conn *conn = lct_conn(cli);
    lc_lock_args a = lct_args(w->mode, w->key, "waiter", w->mode == LC_REENTRANT ? 0 : 30000, 5000);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", w->stock);
    lc_pipe_append(&p, "INCR %s", w->tries);
    lc_guard *g = NULL;
    w->status = lc_acquire_pipe(conn, &a, &p, &g);
    w->end = lc_now_ms();
    redisReply *r = lc_pipe_take(&p, 0);
    if (r && r->type == REDIS_REPLY_STRING)
        snprintf(w->got, sizeof w->got, "%s", r->str);
    if (r)
        freeReplyObject(r);
    lc_pipe_clear(&p);
    if (g)
        lc_release(conn, g);
    lc_conn_free(conn);
    return NULL;
}

static void test_waiter_reads_release_write(void)
{
    const lc_mode modes[] = {LC_REENTRANT, LC_TOKEN, LC_FENCED};
    for (size_t i = 0; i < 3; i++) {
        lc_mode m = modes[i];
        const char *mn = lc_mode_name(m);
        char key[128], stock[160], tries[160];
        lc_conn *hc = NULL;
        lc_guard *held = lct_hold(cli, m, "pipe-wait", key, sizeof key, &hc);
        data_key(stock, sizeof stock, key, ":stock");
        data_key(tries, sizeof tries, key, ":tries");
        tu_redis_int(port, "SET %s 42", stock);
        pipe_waiter w = {.mode = m, .key = key, .stock = stock, .tries = tries};
        pthread_t th;
        TU_REQUIRE(pthread_create(&th, NULL, pipe_waiter_main, &w) == 0, "thread");
        /* Released once the waiter waits: it has tried and failed (and a
         * reentrant one has joined its channel's subscribed line). */
        int64_t until = lc_now_ms() + tu_slack(5000);
        int waiting = 0;
        while (!waiting && lc_now_ms() < until) {
            lc_stats ps;
            lc_client_stats(cli, &ps);
            waiting = tu_redis_int(port, "GET %s", tries) >= 1 &&
                      (m != LC_REENTRANT || (ps.pubsub_waiters >= 1 && ps.pubsub_channels >= 1));
            if (!waiting)
                tu_sleep_ms(5);
        }
        TU_CHECK(waiting, "%s: the waiter waits", mn);
        lc_pipe p;
        lc_pipe_init(&p);
        lc_pipe_append(&p, "SET %s %d", stock, 41);
        int64_t released = lc_now_ms();
        TU_CHECK(lc_release_pipe(hc, held, &p) == LC_OK, "%s: release", mn);
        TU_CHECK(is_str(lc_pipe_take(&p, 0), "OK"), "%s: SET reply", mn);
        lc_pipe_clear(&p);
        pthread_join(th, NULL);
        TU_CHECK(w.status == LC_OK, "%s: waiter acquired (%s)", mn, lc_status_name(w.status));
        TU_CHECK(strcmp(w.got, "41") == 0, "%s: waiter read the holder's write (%s)", mn, w.got);
        /* reentrant: woken by the release (not its 100 ms retry); token:
         * its next poll (5 ms + jitter). */
        TU_CHECK(w.end - released <= tu_slack(60), "%s: woken %lld ms after release", mn,
                 (long long)(w.end - released));
        lc_conn_free(hc);
    }
    lc_stats st = lct_settled_stats(cli, tu_slack(1000));
    TU_CHECK(st.pubsub_waiters == 0 && st.pubsub_channels == 0, "no waiter, no channel left");
}

/* lc_acquire_send, then lc_acquire_pipe: the same replies, lock and
 * statuses as lc_acquire_pipe alone, in every mode (those that send nothing
 * ahead included); a busy lock still waits and resends; a call for another
 * key, lc_conn_pipe and a second send are refused while the attempt is
 * pending, and the right call still ends it; each acquisition has a token of
 * its own. */
static void test_send_ahead(void)
{
    char prev_token[160] = "";
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        lc_mode m = all[i];
        const char *mn = lc_mode_name(m);
        char key[128], stock[160];
        lct_key(key, sizeof key, "pipe-send", m);
        data_key(stock, sizeof stock, key, ":stock");
        tu_redis_int(port, "SET %s 7", stock);
        lc_lock_args a = lct_args(m, key, "o", m == LC_REENTRANT ? 0 : 5000, 0);
        for (int round = 0; round < 2; round++) {
            lc_pipe p;
            lc_pipe_init(&p);
            TU_REQUIRE(lc_pipe_append(&p, "GET %s", stock) == LC_OK, "append");
            TU_REQUIRE(lc_pipe_append(&p, "EXISTS %s", key) == LC_OK, "append");
            TU_REQUIRE(lc_acquire_send(c1, &a, &p) == LC_OK, "%s: send", mn);
            lc_guard *g = NULL;
            TU_REQUIRE(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK && g, "%s: acquire", mn);
            TU_CHECK(is_str(lc_pipe_take(&p, 0), "7"), "%s: GET reply", mn);
            TU_CHECK(is_int(lc_pipe_take(&p, 1), in_redis(m) ? 1 : 0), "%s: ran under the lock",
                     mn);
            if (m == LC_TOKEN || m == LC_FENCED) {
                char v[160] = "";
                tu_redis_str(port, v, sizeof v, "GET %s", key);
                TU_CHECK(strcmp(v, lc_guard_owner_token(g)) == 0,
                         "%s: the sent token is the guard's (%s)", mn, v);
                TU_CHECK(strcmp(prev_token, lc_guard_owner_token(g)) != 0,
                         "%s: a fresh token each time", mn);
                snprintf(prev_token, sizeof prev_token, "%s", lc_guard_owner_token(g));
            }
            TU_CHECK(lc_release(c1, g) == LC_OK, "%s: release", mn);
            lc_pipe_clear(&p);
            TU_CHECK(in_step(c1), "%s: connection in step", mn);
        }
    }

    /* Busy: the sent attempt fails, the wait resends with each attempt. */
    const lc_mode waiting[] = {LC_TOKEN, LC_REENTRANT, LC_FENCED};
    for (size_t i = 0; i < sizeof waiting / sizeof *waiting; i++) {
        lc_mode m = waiting[i];
        const char *mn = lc_mode_name(m);
        char key[128], count[160];
        lc_conn *hc = NULL;
        lc_guard *held = lct_hold(cli, m, "pipe-send-busy", key, sizeof key, &hc);
        data_key(count, sizeof count, key, ":count");
        lc_lock_args a = lct_args(m, key, "second", m == LC_REENTRANT ? 0 : 5000, BUSY_WAIT_MS);
        lc_pipe p;
        lc_pipe_init(&p);
        lc_pipe_append(&p, "INCR %s", count);
        lc_guard *g = NULL;
        TU_REQUIRE(lc_acquire_send(c2, &a, &p) == LC_OK, "%s: send", mn);
        TU_CHECK(lc_acquire_pipe(c2, &a, &p, &g) == LC_BUSY && !g, "%s: busy", mn);
        TU_CHECK(lc_pipe_take(&p, 0) == NULL, "%s: no reply on busy", mn);
        int64_t sent = tu_redis_int(port, "GET %s", count);
        TU_CHECK(sent >= 2, "%s: sent ahead, then again (%lld)", mn, (long long)sent);
        TU_CHECK(in_step(c2), "%s: in step after busy", mn);
        lc_pipe_clear(&p);
        TU_CHECK(lc_release(hc, held) == LC_OK, "%s: holder release", mn);
        lc_conn_free(hc);
    }

    /* Misuse while an attempt is pending. */
    char key[128], other[128];
    lct_key(key, sizeof key, "pipe-send-misuse", LC_TOKEN);
    lct_key(other, sizeof other, "pipe-send-other", LC_TOKEN);
    lc_lock_args a = lct_args(LC_TOKEN, key, "o", 5000, 0);
    lc_lock_args b = lct_args(LC_TOKEN, other, "o", 5000, 0);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "ECHO %s", "mine");
    lc_guard *g = NULL;
    TU_REQUIRE(lc_acquire_send(c1, &a, &p) == LC_OK, "send");
    TU_CHECK(lc_acquire_send(c1, &a, &p) == LC_MISUSE, "a second send is refused");
    TU_CHECK(lc_acquire_pipe(c1, &b, &p, &g) == LC_MISUSE && !g, "another key is refused");
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE && !g, "another p is refused");
    lc_pipe q;
    lc_pipe_init(&q);
    lc_pipe_append(&q, "PING");
    TU_CHECK(lc_conn_pipe(c1, &q) == LC_MISUSE, "lc_conn_pipe is refused");
    lc_pipe_clear(&q);
    TU_CHECK(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK && g, "the sent acquisition still ends");
    TU_CHECK(is_str(lc_pipe_take(&p, 0), "mine"), "with its own reply");
    TU_CHECK(lc_release(c1, g) == LC_OK, "release");
    lc_pipe_clear(&p);
    TU_CHECK(in_step(c1), "in step after the refusals");
    TU_CHECK(lc_acquire_send(NULL, &a, NULL) == LC_MISUSE, "NULL conn");
}

/* The script cache flushed before a send: the EVALSHA sent ahead answers
 * NOSCRIPT, lc_acquire_pipe sends the EVAL with the caller's commands
 * again, and hands back the replies of that round, which ran under the
 * lock (those of the first ran without it). */
static void test_send_noscript(void)
{
    const lc_mode modes[] = {LC_REENTRANT, LC_FENCED};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        lc_mode m = modes[i];
        const char *mn = lc_mode_name(m);
        char key[128], stock[160], ok[16];
        lct_key(key, sizeof key, "pipe-send-noscript", m);
        data_key(stock, sizeof stock, key, ":stock");
        tu_redis_int(port, "SET %s 7", stock);
        lc_lock_args a = lct_args(m, key, "o", m == LC_REENTRANT ? 0 : 5000, 0);
        lc_pipe p;
        lc_pipe_init(&p);
        lc_pipe_append(&p, "GET %s", stock);
        lc_pipe_append(&p, "EXISTS %s", key);
        TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "SCRIPT FLUSH") == 0 && !strcmp(ok, "OK"),
                   "SCRIPT FLUSH");
        TU_REQUIRE(lc_acquire_send(c1, &a, &p) == LC_OK, "%s: send", mn);
        lc_guard *g = NULL;
        TU_CHECK(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK && g, "%s: acquire after NOSCRIPT (%s)",
                 mn, lc_conn_errstr(c1));
        TU_CHECK(is_str(lc_pipe_take(&p, 0), "7"), "%s: GET reply", mn);
        TU_CHECK(is_int(lc_pipe_take(&p, 1), 1), "%s: the replies of the EVAL's round", mn);
        if (g)
            TU_CHECK(lc_release(c1, g) == LC_OK, "%s: release", mn);
        lc_pipe_clear(&p);
        TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "%s: released", mn);
        TU_CHECK(in_step(c1), "%s: in step", mn);
    }
}

/* Between lc_acquire_send and its lc_acquire_pipe, per call: what would
 * send on the connection's Redis context is refused (LC_MISUSE, or NULL
 * from lc_conn_redis), what does not runs; the attempt then ends as
 * always and the connection stays in step. */
static void test_send_pending_calls(void)
{
    char key[128], okey[128], rkey[128];
    lct_key(key, sizeof key, "pipe-pend", LC_TOKEN);
    lct_key(okey, sizeof okey, "pipe-pend-other", LC_TOKEN);
    lct_key(rkey, sizeof rkey, "pipe-pend-re", LC_REENTRANT);
    lc_lock_args a = lct_args(LC_TOKEN, key, "o", 5000, 0);
    lc_lock_args o = lct_args(LC_TOKEN, okey, "o", 30000, 0);
    lc_lock_args n = lct_args(LC_NONE, okey, "o", 0, 0);
    lc_lock_args r = lct_args(LC_REENTRANT, rkey, "o", 0, 0);
    lc_guard *og = NULL, *ng = NULL, *rg = NULL, *g = NULL;
    TU_REQUIRE(lc_acquire(c1, &o, &og) == LC_OK, "other lock");
    TU_REQUIRE(lc_acquire(c1, &n, &ng) == LC_OK, "none guard");
    TU_REQUIRE(lc_acquire(c1, &r, &rg) == LC_OK, "reentrant guard (watchdog)");
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "ECHO %s", "mine");
    TU_REQUIRE(lc_acquire_send(c1, &a, &p) == LC_OK, "send");

    TU_CHECK(lc_conn_ping(c1) == LC_MISUSE, "ping is refused");
    TU_CHECK(strstr(lc_conn_errstr(c1), "lc_acquire_send") != NULL, "errstr says why: %s",
             lc_conn_errstr(c1));
    TU_CHECK(lc_conn_redis(c1) == NULL, "lc_conn_redis is refused (NULL)");
    TU_CHECK(lc_extend(c1, og, 60000) == LC_MISUSE, "extend is refused");
    TU_CHECK(tu_redis_int(port, "PTTL %s", okey) <= 30000, "nothing extended");
    TU_CHECK(lc_release(c1, ng) == LC_OK, "a none release without commands runs");
    TU_CHECK(lc_release(c1, og) == LC_MISUSE, "a token release is refused (guard freed)");
    TU_CHECK(tu_redis_int(port, "EXISTS %s", okey) == 1, "nothing deleted: its lease frees it");
    TU_CHECK(lc_release(c1, rg) == LC_MISUSE, "a reentrant release is refused (guard freed)");

    TU_CHECK(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK && g, "the sent acquisition still ends");
    TU_CHECK(is_str(lc_pipe_take(&p, 0), "mine"), "with its own reply");
    TU_CHECK(lc_extend(c1, g, 6000) == LC_OK, "extend runs again");
    TU_CHECK(lc_release(c1, g) == LC_OK, "release runs again");
    TU_CHECK(lc_conn_ping(c1) == LC_OK, "ping runs again");
    TU_CHECK(in_step(c1), "in step after the refusals");
    lc_pipe_clear(&p);
    tu_redis_int(port, "DEL %s %s", okey, rkey);
}

/* The match check of lc_acquire_pipe covers every field the sent attempt
 * used: another owner (reentrant's hash field; the guard would release a
 * field the attempt never wrote), lease or fence key is refused and
 * leaves the attempt pending. */
static void test_send_mismatch(void)
{
    const lc_mode modes[] = {LC_TOKEN, LC_REENTRANT, LC_FENCED};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        lc_mode m = modes[i];
        const char *mn = lc_mode_name(m);
        char key[128];
        lct_key(key, sizeof key, "pipe-mismatch", m);
        lc_lock_args a = lct_args(m, key, "o", 5000, 0);
        lc_lock_args other_owner = a, other_lease = a, other_fence = a;
        other_owner.owner = "someone-else";
        other_lease.lease_ms = 6000;
        other_fence.fence_key = "lctest:other-fence";
        lc_guard *g = NULL;
        TU_REQUIRE(lc_acquire_send(c1, &a, NULL) == LC_OK, "%s: send", mn);
        TU_CHECK(lc_acquire(c1, &other_owner, &g) == LC_MISUSE && !g, "%s: another owner", mn);
        TU_CHECK(lc_acquire(c1, &other_lease, &g) == LC_MISUSE && !g, "%s: another lease", mn);
        if (m == LC_FENCED)
            TU_CHECK(lc_acquire(c1, &other_fence, &g) == LC_MISUSE && !g, "%s: another fence key",
                     mn);
        TU_CHECK(lc_acquire(c1, &a, &g) == LC_OK && g, "%s: the sent one ends", mn);
        if (m == LC_REENTRANT) {
            char field[160];
            snprintf(field, sizeof field, "%s:o", lc_client_instance_id(cli));
            TU_CHECK(tu_redis_int(port, "HEXISTS %s %s", key, field) == 1 &&
                         strcmp(lc_guard_owner_token(g), field) == 0,
                     "%s: the guard's field is the one written", mn);
        }
        TU_CHECK(lc_release(c1, g) == LC_OK, "%s: release", mn);
        TU_CHECK(in_step(c1), "%s: in step", mn);
    }
}

/* A listener whose accept queue is full: the kernel drops further SYNs, so
 * a connect to it waits its whole timeout. Returns its port; *fds gets the
 * listener and the connection that fills the queue. */
static int blackhole(int fds[2])
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    TU_REQUIRE(fds[0] >= 0 && bind(fds[0], (struct sockaddr *)&sa, sizeof sa) == 0 &&
                   listen(fds[0], 0) == 0 && getsockname(fds[0], (struct sockaddr *)&sa, &len) == 0,
               "listener");
    fds[1] = socket(AF_INET, SOCK_STREAM, 0);
    TU_REQUIRE(fds[1] >= 0 && connect(fds[1], (struct sockaddr *)&sa, sizeof sa) == 0,
               "the connection that fills the accept queue");
    return ntohs(sa.sin_port);
}

/* Redis unreachable (every connect times out): lc_acquire_send waits one
 * connect timeout and sends nothing; the lc_acquire_pipe after it answers
 * LC_IO with that connect's reason at once, not after a second timeout. A
 * refused call in between does not replace the reason. */
static void test_send_unreachable(void)
{
    enum { CONNECT_MS = 400 };
    int fds[2];
    int bport = blackhole(fds);
    lc_client *bc = lct_client_t(bport, 0, CONNECT_MS);
    lc_conn *conn = lct_conn(bc);
    const lc_mode modes[] = {LC_TOKEN, LC_REENTRANT, LC_FENCED};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        lc_mode m = modes[i];
        const char *mn = lc_mode_name(m);
        lc_lock_args a = lct_args(m, "lctest:{down}:lock", "o", 5000, 1000);
        lc_stats before, after;
        lc_client_stats(bc, &before);
        int64_t t0 = lc_now_ms();
        TU_CHECK(lc_acquire_send(conn, &a, NULL) == LC_OK, "%s: send", mn);
        int64_t t1 = lc_now_ms();
        char reason[LC_ERRSTR_LEN];
        snprintf(reason, sizeof reason, "%s", lc_conn_errstr(conn));
        TU_CHECK(t1 - t0 >= CONNECT_MS - 50, "%s: the send waited its connect timeout (%lld ms)",
                 mn, (long long)(t1 - t0));
        TU_CHECK(lc_conn_ping(conn) == LC_MISUSE, "%s: ping refused while pending", mn);
        lc_guard *g = NULL;
        lc_status st = lc_acquire(conn, &a, &g);
        int64_t took = lc_now_ms() - t1;
        lc_client_stats(bc, &after);
        TU_CHECK(st == LC_IO && !g, "%s: LC_IO (%s)", mn, lc_status_name(st));
        /* A second connect would cost CONNECT_MS at least, however fast the
         * machine: that floor is the bound. */
        TU_CHECK(took < CONNECT_MS, "%s: answered without a second connect timeout (%lld ms)", mn,
                 (long long)took);
        TU_CHECK(reason[0] && strcmp(lc_conn_errstr(conn), reason) == 0,
                 "%s: the send's connect failure is the reason: %s", mn, lc_conn_errstr(conn));
        TU_CHECK(after.io_errors == before.io_errors + 1, "%s: one I/O error counted", mn);
    }
    lc_conn_free(conn);
    lc_client_free(bc);
    close(fds[1]);
    close(fds[0]);
}

/* lc_conn_free with an attempt pending: the attempt ran and took the lock
 * (its lease is long), and nobody will read its reply; the orphan cleanup
 * gives it back, as for an attempt that timed out. */
static void test_send_then_free(void)
{
    const lc_mode modes[] = {LC_TOKEN, LC_REENTRANT, LC_FENCED};
    /* Load the scripts: an EVALSHA Redis does not know answers NOSCRIPT
     * and takes no lock (test_noscript_then_free). */
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        lc_lock_args a = lct_args(modes[i], "lctest:{pipe-warm}:lock", "o", 1000, 0);
        lc_guard *g = NULL;
        TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK && lc_release(c1, g) == LC_OK, "warm-up");
    }
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        lc_mode m = modes[i];
        const char *mn = lc_mode_name(m);
        char key[128];
        lct_key(key, sizeof key, "pipe-send-free", m);
        lc_conn *conn = lct_conn(cli);
        lc_lock_args a = lct_args(m, key, "o", m == LC_REENTRANT ? 0 : 60000, 0);
        lc_pipe p;
        lc_pipe_init(&p);
        lc_pipe_append(&p, "ECHO %s", "never read");
        lc_stats before, after;
        lc_client_stats(cli, &before);
        TU_REQUIRE(lc_acquire_send(conn, &a, &p) == LC_OK, "%s: send", mn);
        lc_conn_free(conn);
        lc_pipe_clear(&p);
        int64_t until = lc_now_ms() + tu_slack(5000);
        for (;;) { /* the key goes, then the reaper reads the release's reply */
            lc_client_stats(cli, &after);
            if ((tu_redis_int(port, "EXISTS %s", key) == 0 &&
                 after.orphans_released > before.orphans_released) ||
                lc_now_ms() >= until)
                break;
            tu_sleep_ms(10);
        }
        TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0,
                 "%s: the lock the abandoned attempt took is given back", mn);
        TU_CHECK(after.orphans_released == before.orphans_released + 1,
                 "%s: counted as an orphan released", mn);
    }
}

/* lc_conn_free with an attempt pending that Redis answers NOSCRIPT (its
 * script cache was flushed): the attempt never ran, so nothing is given
 * back or counted, neither released nor unresolved, and the cleanup closes
 * the connection on that reply rather than holding it for a lease. */
static void test_noscript_then_free(void)
{
    const lc_mode modes[] = {LC_REENTRANT, LC_FENCED};
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        lc_mode m = modes[i];
        const char *mn = lc_mode_name(m);
        char key[128], ok[16];
        lct_key(key, sizeof key, "pipe-noscript-free", m);
        lc_conn *conn = lct_conn(cli);
        redisContext *ctx = lc_conn_redis(conn);
        redisReply *idr = ctx ? redisCommand(ctx, "CLIENT ID") : NULL;
        TU_REQUIRE(idr && idr->type == REDIS_REPLY_INTEGER, "%s: CLIENT ID", mn);
        long long id = idr->integer;
        freeReplyObject(idr);
        lc_lock_args a = lct_args(m, key, "o", m == LC_REENTRANT ? 0 : 60000, 0);
        lc_stats before, after;
        lc_client_stats(cli, &before);
        TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "SCRIPT FLUSH") == 0 && !strcmp(ok, "OK"),
                   "SCRIPT FLUSH");
        TU_REQUIRE(lc_acquire_send(conn, &a, NULL) == LC_OK, "%s: send", mn);
        lc_conn_free(conn);
        int64_t until = lc_now_ms() + tu_slack(5000);
        int64_t listed = 1;
        while ((listed = tu_redis_int(port, "CLIENT LIST ID %lld", id)) != 0 && lc_now_ms() < until)
            tu_sleep_ms(10);
        TU_CHECK(listed == 0, "%s: the cleanup closed the connection on the NOSCRIPT reply", mn);
        lc_client_stats(cli, &after);
        TU_CHECK(tu_redis_int(port, "EXISTS %s", key) == 0, "%s: no lock taken", mn);
        TU_CHECK(after.orphans_adopted == before.orphans_adopted + 1, "%s: adopted", mn);
        TU_CHECK(after.orphans_released == before.orphans_released &&
                     after.orphans_unresolved == before.orphans_unresolved,
                 "%s: nothing released or unresolved (%llu, %llu)", mn,
                 (unsigned long long)(after.orphans_released - before.orphans_released),
                 (unsigned long long)(after.orphans_unresolved - before.orphans_unresolved));
    }
}

/* lc_conn_pipes_each without a cluster: three pipes (16 + 16 + 2
 * commands) in one write — one read event for Redis besides the INFO that
 * counts them, asked on a connection kept open — every reply in its place. */
static void test_pipes_one_redis(void)
{
    redisContext *info = redisConnect("127.0.0.1", port);
    TU_REQUIRE(info && !info->err, "INFO connection");
    TU_REQUIRE(lc_conn_ping(c1) == LC_OK, "c1 connected");
    lc_pipe pp[3];
    lc_pipe *pipes[3] = {&pp[0], &pp[1], &pp[2]};
    for (int i = 0; i < 3; i++)
        lc_pipe_init(&pp[i]);
    for (int j = 0; j < 34; j++)
        lc_pipe_append(&pp[j / 16], "ECHO e%d", j);
    long long before = -1, after = -1;
    for (int round = 0; round < 2; round++) {
        *(round ? &after : &before) = tu_redis_info_num(info, 0, "stats", "total_reads_processed:");
        if (round == 0)
            TU_CHECK(lc_conn_pipes_each(c1, pipes, 3) == LC_OK, "three pipes (%s)",
                     lc_conn_errstr(c1));
    }
    TU_CHECK(before >= 0 && after - before == 2, "one write: %lld read events, INFO's included",
             after - before);
    int good = 0;
    for (int j = 0; j < 34; j++) {
        char want[8];
        snprintf(want, sizeof want, "e%d", j);
        good += is_str(lc_pipe_take(&pp[j / 16], j % 16), want);
    }
    TU_CHECK(good == 34, "every reply in its place (%d of 34)", good);
    for (int i = 0; i < 3; i++)
        lc_pipe_clear(&pp[i]);
    redisFree(info);
}

/* A reply the caller left unread on the context lc_conn_redis lends —
 * still on the socket, already in hiredis's reader (two replies that came
 * in one segment, one read), or a command never sent from its write
 * buffer — makes the next lockcore call reconnect instead of reading that
 * reply as its own (which would put every later reply one behind). */
static void test_left_unread(void)
{
    static const char *const how[] = {"on the socket", "in the reader", "in the write buffer"};
    for (int k = 0; k < 3; k++) {
        char key[128];
        lct_key(key, sizeof key, "pipe-unread", LC_TOKEN);
        lc_lock_args a = lct_args(LC_TOKEN, key, "o", 5000, 0);
        lc_conn *conn = lct_conn(cli);
        redisContext *ctx = lc_conn_redis(conn);
        TU_REQUIRE(ctx != NULL, "%s: lc_conn_redis", how[k]);
        uint64_t before = lc_conn_connects(conn);
        TU_REQUIRE(redisAppendCommand(ctx, "ECHO %s", "left") == REDIS_OK, "append");
        if (k == 0) { /* sent, its reply waits on the socket */
            int done = 0;
            while (!done)
                TU_REQUIRE(redisBufferWrite(ctx, &done) == REDIS_OK, "write");
            struct pollfd pf = {.fd = ctx->fd, .events = POLLIN};
            TU_REQUIRE(poll(&pf, 1, (int)tu_slack(2000)) == 1, "the reply came");
        } else if (k == 1) { /* sent and read into the reader, not taken */
            int done = 0;
            while (!done)
                TU_REQUIRE(redisBufferWrite(ctx, &done) == REDIS_OK, "write");
            struct pollfd pf = {.fd = ctx->fd, .events = POLLIN};
            TU_REQUIRE(poll(&pf, 1, (int)tu_slack(2000)) == 1 && redisBufferRead(ctx) == REDIS_OK,
                       "the reply read into the reader");
        }
        lc_guard *g = NULL;
        lc_status st = lc_acquire(conn, &a, &g);
        char tok[128];
        TU_CHECK(st == LC_OK && g != NULL &&
                     tu_redis_str(port, tok, sizeof tok, "GET %s", key) == 0 &&
                     strcmp(tok, lc_guard_owner_token(g)) == 0,
                 "%s: the acquire read its own reply (%s: %s)", how[k], lc_status_name(st),
                 lc_conn_errstr(conn));
        TU_CHECK(lc_conn_connects(conn) == before + 1, "%s: on a new connection (%llu -> %llu)",
                 how[k], (unsigned long long)before, (unsigned long long)lc_conn_connects(conn));
        TU_CHECK(g != NULL && lc_release(conn, g) == LC_OK && in_step(conn),
                 "%s: released, in step", how[k]);
        lc_conn_free(conn);
    }
}

int main(void)
{
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis-server");
    port = rd.port;
    cli = lct_client(port, 0);
    c1 = lct_conn(cli);
    c2 = lct_conn(cli);
    test_replies_in_order();
    test_busy_discards();
    test_errors();
    test_waiter_reads_release_write();
    test_timeout();
    test_send_ahead();
    test_send_noscript();
    test_send_pending_calls();
    test_send_mismatch();
    test_send_unreachable();
    test_send_then_free();
    test_noscript_then_free();
    test_pipes_one_redis();
    test_left_unread();
    lc_conn_free(c1);
    lc_conn_free(c2);
    lc_client_free(cli);
    tu_redis_stop(&rd);
    return tu_done();
}
