/* cs_bench — the service's purchase critical section, straight on the lock
 * core, with no HTTP and no JSON: the reference for /miaosha/token.
 *
 *   cs_bench PORT THREADS SECONDS [WAIT_MS [MODE|lua [pipeline|plain]]]
 *
 * THREADS threads, each with its own lc_conn (as each service worker has),
 * loop exactly what service/src/svc_section.c does per purchase:
 *
 *   lc_acquire(MODE, "bench:{cs}:lock", owner = fresh uuid, lease 5000 ms,
 *              wait WAIT_MS)
 *   GET bench:{cs}:stock
 *   one pipelined round trip: MULTI; SET stock <read-1>; INCR sold;
 *                             RPUSH orders <~200-byte record>; EXEC
 *   lc_release
 *
 * MODE lua is the service's lua purchase instead (service/scripts/purchase.lua,
 * compiled in): each thread EVALSHAs the script with the service's keys
 * (stock, sold, orders, buyers) and an order record head, one round trip
 * per purchase, no lock; the reference for /miaosha/lua.
 *
 * "plain" is that; "pipeline" (the default, as the service's
 * purchase.pipeline) sends the GET in the acquire's round trip
 * (lc_acquire_pipe) and the transaction in the release's (lc_release_pipe):
 * two round trips a purchase instead of four.
 *
 * The stock starts at 10^9 so it never sells out. The order record is a
 * fixed string of the service's record size (the service builds it with
 * cJSON: that cost is part of what the comparison measures). Prints one
 * line of key=value pairs: sections/s, fairness (min/max per-thread
 * completions), busy (acquisitions not granted within WAIT_MS) and errors.
 * It also prints p50_us, the median time of one completed purchase (from
 * before the acquire to after the release, µs; 20000 means 20 ms or
 * more): with one thread, the no-HTTP counterpart of bench/run.sh's
 * one-connection p50.
 * Defaults: WAIT_MS 1000, MODE token (the lock core's defaults otherwise:
 * retry interval 10 ms + jitter). Exit 0, or 1 when Redis failed.
 */
#include "lockcore.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uuid/uuid.h>

#include "svc_scripts.h" /* the service's purchase.lua, text and SHA1 */

#define MAX_THREADS 1024
#define KEY_LOCK "bench:{cs}:lock"
#define KEY_STOCK "bench:{cs}:stock"
#define KEY_SOLD "bench:{cs}:sold"
#define KEY_ORDERS "bench:{cs}:orders"
#define KEY_BUYERS "bench:{cs}:buyers"

static lc_client *cli;
static lc_mode mode = LC_TOKEN;
static bool pipelined = true;
static bool lua; /* MODE lua: the service's purchase script, no lock */
static long long wait_ms = 1000;
static atomic_bool stop_flag;

/* Completed purchases' times in 1 µs buckets; the last bucket holds every
 * time of LAT_BUCKETS - 1 µs or more. */
#define LAT_BUCKETS 20001

typedef struct worker {
    pthread_t th;
    long done, busy, errors;
    unsigned *lat; /* LAT_BUCKETS counts, or NULL when out of memory */
} worker;

/* Seconds on lockcore's monotonic clock. */
static double now_s(void)
{
    return (double)lc_now_us() / 1e6;
}

static void lat_add(worker *w, double since_s)
{
    if (!w->lat)
        return;
    double us = (now_s() - since_s) * 1e6;
    w->lat[us >= LAT_BUCKETS - 1 ? LAT_BUCKETS - 1 : (long)us]++;
}

/* Reads the 5 replies of the MULTI pipeline; 0 when EXEC ran all three. */
static int read_pipeline(redisContext *c)
{
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        void *v = NULL;
        if (redisGetReply(c, &v) != REDIS_OK || v == NULL)
            return -1;
        redisReply *r = v;
        if (r->type == REDIS_REPLY_ERROR ||
            (i == 4 && (r->type != REDIS_REPLY_ARRAY || r->elements != 3)))
            ok = 0;
        freeReplyObject(r);
    }
    return ok ? 0 : -1;
}

/* One purchase's critical section; 0 on success. */
static int section(lc_conn *conn, char *rec, size_t reclen)
{
    redisContext *c = lc_conn_redis(conn);
    if (c == NULL)
        return -1;
    redisReply *r = redisCommand(c, "GET %s", KEY_STOCK);
    if (r == NULL)
        return -1;
    long long before = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    if (before <= 0)
        return 0; /* sold out: the service answers 409 after the same round trip */
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, rec + 13); /* the order id sits inside the record */
    rec[13 + 36] = '"';
    redisAppendCommand(c, "MULTI");
    redisAppendCommand(c, "SET %s %lld", KEY_STOCK, before - 1);
    redisAppendCommand(c, "INCR %s", KEY_SOLD);
    redisAppendCommand(c, "RPUSH %s %b", KEY_ORDERS, rec, reclen);
    redisAppendCommand(c, "EXEC");
    return read_pipeline(c);
}

/* Appends the transaction to p; 0, or -1 when out of memory. */
static int append_commit(lc_pipe *p, long long before, char *rec, size_t reclen)
{
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, rec + 13);
    rec[13 + 36] = '"';
    if (lc_pipe_append(p, "MULTI") != LC_OK ||
        lc_pipe_append(p, "SET %s %lld", KEY_STOCK, before - 1) != LC_OK ||
        lc_pipe_append(p, "INCR %s", KEY_SOLD) != LC_OK ||
        lc_pipe_append(p, "RPUSH %s %b", KEY_ORDERS, rec, reclen) != LC_OK ||
        lc_pipe_append(p, "EXEC") != LC_OK)
        return -1;
    return 0;
}

/* One pipelined purchase: the GET in the acquire's write, the transaction
 * in the release's. Returns the acquire's status (LC_OK: *ok tells whether
 * the purchase and the release both succeeded). */
static lc_status purchase_pipelined(lc_conn *conn, const lc_lock_args *a, char *rec, size_t reclen,
                                    bool *ok)
{
    lc_pipe p;
    lc_pipe_init(&p);
    lc_guard *g = NULL;
    if (lc_pipe_append(&p, "GET %s", KEY_STOCK) != LC_OK)
        return LC_NOMEM;
    lc_status st = lc_acquire_pipe(conn, a, &p, &g);
    redisReply *r = st == LC_OK ? lc_pipe_take(&p, 0) : NULL;
    lc_pipe_clear(&p);
    if (st != LC_OK)
        return st;
    long long before = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    if (r)
        freeReplyObject(r);
    *ok = true;
    if (before > 0 && append_commit(&p, before, rec, reclen) != 0)
        *ok = false;
    /* sold out: nothing to commit, the release goes alone */
    lc_status rs = lc_release_pipe(conn, g, &p);
    if (before > 0) {
        redisReply *exec = lc_pipe_take(&p, 4);
        if (!exec || exec->type != REDIS_REPLY_ARRAY || exec->elements != 3)
            *ok = false;
        if (exec)
            freeReplyObject(exec);
    }
    lc_pipe_clear(&p);
    if (rs != LC_OK)
        *ok = false;
    return LC_OK;
}

/* The lua purchase: one EVALSHA of the service's script, as svc_lua.c
 * sends it without an Idempotency-Key (4 keys; record head, no user, no
 * limit). NOSCRIPT (a flushed cache) falls back to EVAL. */
static void lua_loop(worker *w, lc_conn *conn)
{
    /* Same shape and size as the service's record head. */
    char rec[256];
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%36s\",\"sku\":\"bench\",\"user\":null,\"mode\":\"lua\","
             "\"instance\":\"6f1c9a5e-3b7d-4c2a-9e8f-0a1b2c3d4e5f\",\"received_ms\":1699999999990,"
             "\"ts_ms\":1700000000000,\"lock_wait_ms\":0,\"stock_before\":",
             "");
    while (!atomic_load(&stop_flag)) {
        double t0 = now_s();
        redisContext *c = lc_conn_redis(conn);
        if (c == NULL) {
            w->errors++;
            continue;
        }
        const char *argv[] = {"EVALSHA",  SVC_SCRIPT_PURCHASE_SHA,
                              "4",        KEY_STOCK,
                              KEY_SOLD,   KEY_ORDERS,
                              KEY_BUYERS, rec,
                              "",         "0"};
        redisReply *r = redisCommandArgv(c, 10, argv, NULL);
        if (r != NULL && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOSCRIPT", 8)) {
            freeReplyObject(r);
            argv[0] = "EVAL";
            argv[1] = SVC_SCRIPT_PURCHASE;
            r = redisCommandArgv(c, 10, argv, NULL);
        }
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1) {
            w->done++;
            lat_add(w, t0);
        } else
            w->errors++;
        freeReplyObject(r);
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    lc_conn *conn;
    if (lc_conn_new(cli, &conn) != LC_OK) {
        w->errors++;
        return NULL;
    }
    if (lua) {
        lua_loop(w, conn);
        lc_conn_free(conn);
        return NULL;
    }
    /* Same shape and size as the service's order record. */
    char rec[256];
    snprintf(rec, sizeof rec,
             "{\"order_id\":\"%36s\",\"sku\":\"bench\",\"user\":null,\"mode\":\"%s\","
             "\"instance\":\"6f1c9a5e-3b7d-4c2a-9e8f-0a1b2c3d4e5f\",\"received_ms\":1699999999990,"
             "\"ts_ms\":1700000000000,"
             "\"lock_wait_ms\":0,\"stock_before\":999999999}",
             "", lc_mode_name(mode));
    size_t reclen = strlen(rec);
    char owner[40];
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    a.key = KEY_LOCK;
    a.owner = owner;
    a.lease_ms = mode == LC_REENTRANT ? 0 : 5000;
    a.wait_ms = wait_ms;
    while (!atomic_load(&stop_flag)) {
        double t0 = now_s();
        uuid_t u;
        uuid_generate_random(u);
        uuid_unparse_lower(u, owner);
        lc_guard *g = NULL;
        if (pipelined) {
            bool ok = false;
            lc_status st = purchase_pipelined(conn, &a, rec, reclen, &ok);
            if (st == LC_BUSY)
                w->busy++;
            else if (st == LC_OK && ok) {
                w->done++;
                lat_add(w, t0);
            } else
                w->errors++;
            continue;
        }
        lc_status st = lc_acquire(conn, &a, &g);
        if (st == LC_BUSY) {
            w->busy++;
            continue;
        }
        if (st != LC_OK) {
            w->errors++;
            continue;
        }
        int rc = section(conn, rec, reclen);
        st = lc_release(conn, g);
        if (rc == 0 && st == LC_OK) {
            w->done++;
            lat_add(w, t0);
        } else
            w->errors++;
    }
    lc_conn_free(conn);
    return NULL;
}

static int redis_setup(int port, int reset)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        fprintf(stderr, "cs_bench: cannot connect to 127.0.0.1:%d\n", port);
        if (c)
            redisFree(c);
        return -1;
    }
    redisReply *r = reset ? redisCommand(c, "MSET %s 1000000000 %s 0", KEY_STOCK, KEY_SOLD) : NULL;
    if (r)
        freeReplyObject(r);
    r = redisCommand(c, "DEL %s %s %s", KEY_ORDERS, KEY_LOCK, KEY_BUYERS);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr,
                "usage: cs_bench PORT THREADS SECONDS [WAIT_MS [MODE|lua [pipeline|plain]]]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    int threads = atoi(argv[2]);
    double seconds = atof(argv[3]);
    if (argc > 4)
        wait_ms = atoll(argv[4]);
    lua = argc > 5 && strcmp(argv[5], "lua") == 0;
    if (argc > 5 && !lua && lc_mode_parse(argv[5], &mode) != 0) {
        fprintf(stderr, "cs_bench: unknown mode '%s'\n", argv[5]);
        return 2;
    }
    if (mode == LC_FENCED) {
        /* fenced's section is the service's two fence scripts, not this
         * GET and MULTI */
        fprintf(stderr, "cs_bench: mode '%s' is not measured here (bench/run.sh's service part)\n",
                argv[5]);
        return 2;
    }
    if (argc > 6 && strcmp(argv[6], "pipeline") != 0 && strcmp(argv[6], "plain") != 0) {
        fprintf(stderr, "cs_bench: the section is 'pipeline' or 'plain', not '%s'\n", argv[6]);
        return 2;
    }
    if (argc > 6)
        pipelined = strcmp(argv[6], "pipeline") == 0;
    if (port <= 0 || port > 65535 || threads < 1 || threads > MAX_THREADS || seconds <= 0 ||
        seconds > 3600 || wait_ms < 0) {
        fprintf(stderr, "cs_bench: bad arguments (threads 1..%d, seconds (0, 3600])\n",
                MAX_THREADS);
        return 2;
    }
    if (redis_setup(port, 1) != 0)
        return 1;
    lc_options o;
    lc_options_init(&o);
    o.redis_port = port;
    char err[256];
    if (lc_client_new(&o, &cli, err, sizeof err) != LC_OK) {
        fprintf(stderr, "cs_bench: %s\n", err);
        return 1;
    }
    static worker ws[MAX_THREADS];
    for (int i = 0; i < threads; i++)
        ws[i].lat = calloc(LAT_BUCKETS, sizeof *ws[i].lat);
    double t0 = now_s();
    for (int i = 0; i < threads; i++)
        pthread_create(&ws[i].th, NULL, worker_main, &ws[i]);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop_flag, true);
    long total = 0, busy = 0, errors = 0, mn = -1, mx = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(ws[i].th, NULL);
        total += ws[i].done;
        busy += ws[i].busy;
        errors += ws[i].errors;
        if (mn < 0 || ws[i].done < mn)
            mn = ws[i].done;
        if (ws[i].done > mx)
            mx = ws[i].done;
    }
    /* Sections completed in the stop window still count: divide by the
     * time until the last thread stopped. */
    double elapsed = now_s() - t0;
    /* The median purchase time over every thread's histogram. */
    long timed = 0, seen = 0, p50_us = -1;
    for (int i = 0; i < threads; i++)
        for (long b = 0; ws[i].lat && b < LAT_BUCKETS; b++)
            timed += ws[i].lat[b];
    for (long b = 0; timed > 0 && b < LAT_BUCKETS && p50_us < 0; b++) {
        for (int i = 0; i < threads; i++)
            seen += ws[i].lat ? ws[i].lat[b] : 0;
        if (2 * seen >= timed)
            p50_us = b;
    }
    for (int i = 0; i < threads; i++)
        free(ws[i].lat);
    lc_client_free(cli);
    redis_setup(port, 0); /* drop the order list, keep Redis small */
    printf("cs_bench mode=%s section=%s threads=%d wait_ms=%lld seconds=%.2f sections=%ld "
           "sections_per_s=%.0f p50_us=%ld "
           "fairness=%.2f busy=%ld errors=%ld\n",
           lua ? "lua" : lc_mode_name(mode), pipelined ? "pipeline" : "plain", threads, wait_ms,
           elapsed, total, total / elapsed, p50_us, mx ? (double)mn / (double)mx : 0.0, busy,
           errors);
    return errors > 0 && total == 0 ? 1 : 0;
}
