/* test_lc_fenced — the fenced mode against a real Redis: the fencing token
 * (lc_guard_fence) grows strictly from holder to holder, across threads
 * and after a lease ran out; a busy attempt draws no number and writes
 * nothing; the acquire script survives SCRIPT FLUSH (NOSCRIPT → EVAL); a
 * fence key that is not a counter takes no lock; the caller's commands in
 * the acquire's write see this attempt's number in the counter; misuse.
 *
 * On a private redis-server: the test flushes the script cache, which on
 * the suite's shared server would turn another test's EVALSHA, sent at the
 * same moment, into a NOSCRIPT reply. */
#include "lc_test.h"

#include <pthread.h>

static tu_redis rd;
static int port;
static lc_client *cli;
static lc_conn *c1, *c2;

/* A fresh lock key and its fence counter under one hash tag. */
static void keys(char *lock, char *fence, size_t len, const char *test)
{
    int n = (int)(lc_now_ms() % 1000000);
    snprintf(lock, len, "lctest:{fenced-%s-%d}:lock", test, n);
    snprintf(fence, len, "lctest:{fenced-%s-%d}:fence", test, n);
}

static lc_lock_args fargs(const char *lock, const char *fence, const char *owner, int64_t lease_ms,
                          int64_t wait_ms)
{
    lc_lock_args a = lct_args(LC_FENCED, lock, owner, lease_ms, wait_ms);
    a.fence_key = fence;
    return a;
}

static void test_misuse(void)
{
    lc_guard *g = (lc_guard *)1;
    lc_lock_args a = lct_args(LC_FENCED, "lctest:{fm}:lock", "o", 1000, 0);
    a.fence_key = NULL;
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE && g == NULL, "fenced needs a fence key");
    TU_CHECK(strstr(lc_conn_errstr(c1), "fence_key") != NULL, "errstr names it: %s",
             lc_conn_errstr(c1));
    a.fence_key = "";
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE, "empty fence key");
    a = fargs("lctest:{fm}:lock", "lctest:{fm}:fence", "o", 0, 0);
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_MISUSE, "fenced needs a lease");
    TU_CHECK(strstr(lc_conn_errstr(c1), "lease_ms") != NULL, "errstr names it: %s",
             lc_conn_errstr(c1));
    TU_CHECK(tu_redis_int(port, "EXISTS lctest:{fm}:fence") == 0, "misuse writes nothing");
    /* token ignores fence_key and reports no number */
    a = fargs("lctest:{fm}:lock", "lctest:{fm}:fence", "o", 1000, 0);
    a.mode = LC_TOKEN;
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "token acquire");
    TU_CHECK(lc_guard_fence(g) == 0, "token: fence 0");
    TU_CHECK(lc_release(c1, g) == LC_OK, "token release");
    TU_CHECK(tu_redis_int(port, "EXISTS lctest:{fm}:fence") == 0, "token never counts");
}

/* Holder after holder on one key: 1, 2, 3, ... and the counter says so;
 * the lock key holds the owner token, released by compare-and-delete. */
static void test_sequence(void)
{
    char lock[128], fence[128];
    keys(lock, fence, sizeof lock, "seq");
    int64_t prev = 0;
    for (int i = 0; i < 5; i++) {
        lc_lock_args a = fargs(lock, fence, "o", 5000, 0);
        lc_guard *g = NULL;
        TU_REQUIRE(lc_acquire(i % 2 ? c2 : c1, &a, &g) == LC_OK, "acquire %d", i);
        int64_t t = lc_guard_fence(g);
        TU_CHECK(t == prev + 1, "holder %d: token %lld after %lld", i, (long long)t,
                 (long long)prev);
        TU_CHECK(tu_redis_int(port, "GET %s", fence) == t, "the counter is the token");
        char v[80];
        tu_redis_str(port, v, sizeof v, "GET %s", lock);
        TU_CHECK(strcmp(v, lc_guard_owner_token(g)) == 0, "the lock holds the owner token");
        int64_t ttl = tu_redis_int(port, "PTTL %s", lock);
        TU_CHECK(ttl > 4900 && ttl <= 5000, "lease set: PTTL %lld", (long long)ttl);
        TU_CHECK(lc_release(i % 2 ? c2 : c1, g) == LC_OK, "release %d", i);
        TU_CHECK(tu_redis_int(port, "EXISTS %s", lock) == 0, "released");
        prev = t;
    }
    TU_CHECK(tu_redis_int(port, "GET %s", fence) == 5, "release leaves the counter");
}

/* A busy attempt draws no number: once, and polling for 80 ms. */
static void test_busy_draws_nothing(void)
{
    char lock[128], fence[128];
    keys(lock, fence, sizeof lock, "busy");
    lc_lock_args a = fargs(lock, fence, "first", 5000, 0);
    lc_lock_args b = fargs(lock, fence, "second", 5000, 0);
    lc_guard *g1 = NULL, *g2 = (lc_guard *)1;
    TU_REQUIRE(lc_acquire(c1, &a, &g1) == LC_OK, "first");
    TU_CHECK(lc_acquire(c2, &b, &g2) == LC_BUSY && g2 == NULL, "second is busy, no guard");
    b.wait_ms = 80;
    TU_CHECK(lc_acquire(c2, &b, &g2) == LC_BUSY && g2 == NULL, "busy after waiting");
    TU_CHECK(tu_redis_int(port, "GET %s", fence) == 1, "busy attempts drew no number");
    char v[80];
    tu_redis_str(port, v, sizeof v, "GET %s", lock);
    TU_CHECK(strcmp(v, lc_guard_owner_token(g1)) == 0, "the holder's lock is untouched");
    TU_CHECK(lc_release(c1, g1) == LC_OK, "release");
    b.wait_ms = 0;
    TU_REQUIRE(lc_acquire(c2, &b, &g2) == LC_OK, "second after release");
    TU_CHECK(lc_guard_fence(g2) == 2, "second holder: 2 (%lld)", (long long)lc_guard_fence(g2));
    lc_release(c2, g2);
}

/* A holder outlives its lease: the next holder gets in (token's flaw, kept)
 * with a larger number, which is what a store can check; the late holder's
 * release is not-owner and its extend fails. */
static void test_lease_ran_out(void)
{
    char lock[128], fence[128];
    keys(lock, fence, sizeof lock, "lease");
    lc_lock_args a = fargs(lock, fence, "slow", 100, 0);
    lc_lock_args b = fargs(lock, fence, "next", 5000, 2000);
    lc_guard *slow = NULL, *next = NULL;
    TU_REQUIRE(lc_acquire(c1, &a, &slow) == LC_OK, "slow holder");
    TU_REQUIRE(lc_acquire(c2, &b, &next) == LC_OK, "the next holder gets in after the lease");
    TU_CHECK(lc_guard_fence(next) > lc_guard_fence(slow), "next %lld > slow %lld",
             (long long)lc_guard_fence(next), (long long)lc_guard_fence(slow));
    TU_CHECK(lc_extend(c1, slow, 5000) == LC_NOT_OWNER && lc_guard_lost(slow),
             "late extend: not owner, lost");
    TU_CHECK(lc_release(c1, slow) == LC_NOT_OWNER, "late release: not owner");
    TU_CHECK(tu_redis_int(port, "EXISTS %s", lock) == 1, "the next holder's lock stays");
    TU_CHECK(lc_extend(c2, next, 9000) == LC_OK, "the holder extends");
    TU_CHECK(tu_redis_int(port, "PTTL %s", lock) > 8000, "extended");
    TU_CHECK(lc_release(c2, next) == LC_OK, "release");
}

/* Threads on one key: every grant a distinct number, each thread's numbers
 * strictly increasing, and under the lock a GET/SET increment is exact. */
#define THREADS 4
#define ROUNDS 40
typedef struct fjob {
    const char *lock, *fence, *data;
    int64_t tokens[ROUNDS];
    int ok;
} fjob;

static void *fjob_main(void *arg)
{
    fjob *j = arg;
    lc_conn *conn = lct_conn(cli);
    redisContext *ctx = NULL;
    char owner[32];
    snprintf(owner, sizeof owner, "t%p", arg);
    for (int i = 0; i < ROUNDS; i++) {
        lc_lock_args a = fargs(j->lock, j->fence, owner, 10000, 10000);
        lc_guard *g = NULL;
        if (lc_acquire(conn, &a, &g) != LC_OK)
            break;
        j->tokens[i] = lc_guard_fence(g);
        ctx = lc_conn_redis(conn);
        redisReply *r = ctx ? redisCommand(ctx, "GET %s", j->data) : NULL;
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        if (r)
            freeReplyObject(r);
        r = ctx ? redisCommand(ctx, "SET %s %lld", j->data, v + 1) : NULL;
        if (r)
            freeReplyObject(r);
        if (lc_release(conn, g) != LC_OK)
            break;
        j->ok++;
    }
    lc_conn_free(conn);
    return NULL;
}

static void test_threads(void)
{
    char lock[128], fence[128], data[128];
    keys(lock, fence, sizeof lock, "threads");
    snprintf(data, sizeof data, "%.*s:data", (int)(strchr(lock, '}') - lock + 1), lock);
    fjob jobs[THREADS];
    pthread_t th[THREADS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < THREADS; i++) {
        jobs[i].lock = lock;
        jobs[i].fence = fence;
        jobs[i].data = data;
        TU_REQUIRE(pthread_create(&th[i], NULL, fjob_main, &jobs[i]) == 0, "thread");
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    static int seen[THREADS * ROUNDS + 1];
    memset(seen, 0, sizeof seen);
    int total = 0, bad = 0;
    for (int i = 0; i < THREADS; i++) {
        total += jobs[i].ok;
        for (int k = 0; k < jobs[i].ok; k++) {
            int64_t t = jobs[i].tokens[k];
            if (t < 1 || t > THREADS * ROUNDS || seen[t]++ || (k > 0 && t <= jobs[i].tokens[k - 1]))
                bad++;
        }
    }
    TU_CHECK(total == THREADS * ROUNDS, "%d of %d sections", total, THREADS * ROUNDS);
    TU_CHECK(bad == 0, "%d tokens repeated, out of range or not increasing", bad);
    TU_CHECK(tu_redis_int(port, "GET %s", fence) == THREADS * ROUNDS, "one number per grant");
    TU_CHECK(tu_redis_int(port, "GET %s", data) == THREADS * ROUNDS, "exact under the lock");
}

/* SCRIPT FLUSH: the EVALSHA answers NOSCRIPT, the EVAL takes the lock and
 * the next number, once. */
static void test_noscript(void)
{
    char lock[128], fence[128];
    keys(lock, fence, sizeof lock, "noscript");
    tu_redis_int(port, "SET %s 41", fence);
    char ok[16];
    TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "SCRIPT FLUSH") == 0 && !strcmp(ok, "OK"),
               "SCRIPT FLUSH");
    lc_lock_args a = fargs(lock, fence, "o", 5000, 0);
    lc_guard *g = NULL;
    TU_REQUIRE(lc_acquire(c1, &a, &g) == LC_OK, "acquire after SCRIPT FLUSH");
    TU_CHECK(lc_guard_fence(g) == 42, "one number drawn: %lld", (long long)lc_guard_fence(g));
    TU_CHECK(tu_redis_int(port, "GET %s", fence) == 42, "the counter moved once");
    TU_CHECK(lc_release(c1, g) == LC_OK, "release");
    /* and with commands riding along */
    TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "SCRIPT FLUSH") == 0, "SCRIPT FLUSH");
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", fence);
    TU_REQUIRE(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK, "piped acquire after SCRIPT FLUSH");
    redisReply *r = lc_pipe_take(&p, 0);
    TU_CHECK(r && r->type == REDIS_REPLY_STRING && atoll(r->str) == 43 && lc_guard_fence(g) == 43,
             "the read after the EVAL sees 43 (%s, token %lld)", r ? r->str : "none",
             (long long)lc_guard_fence(g));
    if (r)
        freeReplyObject(r);
    lc_pipe_clear(&p);
    TU_CHECK(lc_release(c1, g) == LC_OK, "release");
}

/* A fence key that is not a counter: the script fails before writing. */
static void test_bad_fence_key(void)
{
    char lock[128], fence[128];
    keys(lock, fence, sizeof lock, "badfence");
    tu_redis_int(port, "SET %s not-a-number", fence);
    lc_lock_args a = fargs(lock, fence, "o", 5000, 0);
    lc_guard *g = NULL;
    TU_CHECK(lc_acquire(c1, &a, &g) == LC_IO && g == NULL, "LC_IO");
    TU_CHECK(strstr(lc_conn_errstr(c1), "integer") != NULL, "Redis says why: %s",
             lc_conn_errstr(c1));
    TU_CHECK(tu_redis_int(port, "EXISTS %s", lock) == 0, "no lock without its number");
    TU_CHECK(lc_conn_ping(c1) == LC_OK, "the connection is in step");
}

/* The caller's commands after the script see this attempt's number; a busy
 * attempt's replies are dropped; the release carries writes. */
static void test_pipe(void)
{
    char lock[128], fence[128], stock[160];
    keys(lock, fence, sizeof lock, "pipe");
    snprintf(stock, sizeof stock, "%.*s:stock", (int)(strchr(lock, '}') - lock + 1), lock);
    tu_redis_int(port, "SET %s 7", stock);
    lc_lock_args a = fargs(lock, fence, "o", 5000, 0);
    lc_lock_args b = fargs(lock, fence, "other", 5000, 0);
    lc_pipe p;
    lc_pipe_init(&p);
    lc_pipe_append(&p, "GET %s", fence);
    lc_pipe_append(&p, "GET %s", stock);
    lc_guard *g = NULL, *g2 = NULL;
    TU_REQUIRE(lc_acquire_pipe(c1, &a, &p, &g) == LC_OK, "piped acquire");
    redisReply *f = lc_pipe_take(&p, 0), *s = lc_pipe_take(&p, 1);
    TU_CHECK(f && f->type == REDIS_REPLY_STRING && atoll(f->str) == lc_guard_fence(g),
             "the counter right after the script is the token (%s vs %lld)", f ? f->str : "none",
             (long long)lc_guard_fence(g));
    TU_CHECK(s && s->type == REDIS_REPLY_STRING && !strcmp(s->str, "7"), "the read");
    if (f)
        freeReplyObject(f);
    if (s)
        freeReplyObject(s);
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "GET %s", stock);
    TU_CHECK(lc_acquire_pipe(c2, &b, &p, &g2) == LC_BUSY && !g2, "busy");
    TU_CHECK(lc_pipe_take(&p, 0) == NULL, "no reply on busy");
    TU_CHECK(lc_conn_ping(c2) == LC_OK, "in step after busy");
    lc_pipe_clear(&p);
    lc_pipe_append(&p, "SET %s 6", stock);
    TU_CHECK(lc_release_pipe(c1, g, &p) == LC_OK, "piped release");
    redisReply *w = lc_pipe_take(&p, 0);
    TU_CHECK(w && w->type == REDIS_REPLY_STATUS, "the write's reply");
    if (w)
        freeReplyObject(w);
    lc_pipe_clear(&p);
    TU_CHECK(tu_redis_int(port, "GET %s", stock) == 6 && tu_redis_int(port, "EXISTS %s", lock) == 0,
             "written, then released");
}

int main(void)
{
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis-server");
    port = rd.port;
    cli = lct_client(port, 0);
    c1 = lct_conn(cli);
    c2 = lct_conn(cli);
    test_misuse();
    test_sequence();
    test_busy_draws_nothing();
    test_lease_ran_out();
    test_threads();
    test_noscript();
    test_bad_fence_key();
    test_pipe();
    lc_conn_free(c1);
    lc_conn_free(c2);
    lc_client_free(cli);
    tu_redis_stop(&rd);
    return tu_done();
}
