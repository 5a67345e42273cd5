/* svc_gauges.c — the per-SKU audit gauges of /metrics (svc_gauges.h).
 *
 * The table: max_skus slots, each a SKU name and the values its last read
 * found. A slot's name is written only under mu; its hash and its
 * last-seen time are atomics, so svc_gauges_seen can recognise a tracked
 * SKU and renew it without the mutex (a purchase path calls it). Two SKUs
 * with one 64-bit hash would share a slot: the second would stay
 * untracked, nothing worse. */
#include "svc_gauges.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_bucket.h"
#include "svc_check.h"
#include "svc_keys.h"

typedef struct slot {
    _Atomic uint64_t hash;              /* 0: empty */
    _Atomic int64_t seen_ms;            /* last seen, lc_now_ms */
    char sku[SVC_SKU_MAX + 1];          /* under mu */
    bool have;                          /* the last read found a stock: the values hold */
    long long stock, sold, over, under; /* the audit's; over, under summed per bucket */
} slot;

static slot *slots;
static int nslots, period_ms, started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int stop; /* under mu */
static pthread_t thread;
static lc_client *client;
static int cluster; /* redis.cluster_nodes: read_cluster */

/* FNV-1a, never 0 (0 marks an empty slot). */
static uint64_t hash_of(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ? h : 1;
}

void svc_gauges_seen(const char *sku)
{
    if (nslots == 0)
        return;
    uint64_t h = hash_of(sku);
    int64_t now = lc_now_ms();
    for (int i = 0; i < nslots; i++)
        if (atomic_load_explicit(&slots[i].hash, memory_order_acquire) == h) {
            atomic_store_explicit(&slots[i].seen_ms, now, memory_order_relaxed);
            return;
        }
    SVC_PT(pthread_mutex_lock(&mu));
    int pick = -1;
    for (int i = 0; i < nslots && pick < 0; i++)
        if (atomic_load_explicit(&slots[i].hash, memory_order_relaxed) == h)
            pick = i; /* another thread added it meanwhile */
    if (pick < 0) {
        /* An empty slot, else the least recently seen SKU's. */
        pick = 0;
        for (int i = 0; i < nslots; i++) {
            if (atomic_load_explicit(&slots[i].hash, memory_order_relaxed) == 0) {
                pick = i;
                break;
            }
            if (atomic_load_explicit(&slots[i].seen_ms, memory_order_relaxed) <
                atomic_load_explicit(&slots[pick].seen_ms, memory_order_relaxed))
                pick = i;
        }
        snprintf(slots[pick].sku, sizeof slots[pick].sku, "%s", sku);
        slots[pick].have = false;
        atomic_store_explicit(&slots[pick].hash, h, memory_order_release);
    }
    atomic_store_explicit(&slots[pick].seen_ms, now, memory_order_relaxed);
    SVC_PT(pthread_mutex_unlock(&mu));
}

/* --- the reader ---------------------------------------------------------- */

static int as_ll(const redisReply *rep, long long *out)
{
    if (rep->type == REDIS_REPLY_NIL) {
        *out = 0;
        return 0;
    }
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    char *end = NULL;
    *out = strtoll(rep->str, &end, 10);
    return end != rep->str && *end == '\0' ? 0 : -1;
}

/* What one read found for a SKU: the audit's four numbers. */
typedef struct reading {
    char sku[SVC_SKU_MAX + 1];
    svc_layout lay; /* lay.n > 1: its buckets are read in the second round trip */
    bool ok;
    long long stock, sold, over, under;
} reading;

/* Adds one stock's stock, initial and sold (three replies) to g: oversold
 * and undersold of that stock alone, as GET /stock/{sku} does bucket by
 * bucket. false when a reply is missing, not an integer, or the stock key
 * is absent. */
static bool add_stock(reading *g, redisReply *const *v)
{
    long long stock, initial, sold;
    if (v[0]->type == REDIS_REPLY_NIL || as_ll(v[0], &stock) != 0 || as_ll(v[1], &initial) != 0 ||
        as_ll(v[2], &sold) != 0)
        return false;
    long long taken = initial - stock, over = sold - taken, under = taken - sold;
    g->stock += stock;
    g->sold += sold;
    g->over += over > 0 ? over : 0;
    g->under += under > 0 ? under : 0;
    return true;
}

/* Reads n pipelined replies into reps; false when the connection broke
 * (every reply read is freed then; lc_conn_redis reconnects next time). */
static bool read_n(redisContext *ctx, redisReply **reps, int n)
{
    for (int i = 0; i < n; i++) {
        void *rep = NULL;
        if (redisGetReply(ctx, &rep) != REDIS_OK || rep == NULL) {
            for (int k = 0; k < i; k++)
                freeReplyObject(reps[k]);
            return false;
        }
        reps[i] = rep;
    }
    return true;
}

static void append_stock(redisContext *ctx, const char *tag)
{
    static const char *const keys[3] = {"stock", "initial", "sold"};
    for (int k = 0; k < 3; k++) {
        char key[SVC_KEY_MAX];
        svc_key(key, tag, keys[k]);
        redisAppendCommand(ctx, "GET %s", key);
    }
}

/* One round trip of p's commands on conn (on a cluster they name one
 * slot): the replies in p, or false when one is missing (p emptied). */
static bool pipe_sent(lc_conn *conn, lc_pipe *p, int n)
{
    if (p->n == n && lc_conn_pipe(conn, p) == LC_OK)
        return true;
    lc_pipe_clear(p);
    return false;
}

/* read_all on a Redis Cluster, where every stock is a slot of its own
 * (svc_keys.h): per SKU one round trip for its layout record and its own
 * stock, initial and sold (one tag: one slot), then one per bucket. */
static void read_cluster(lc_conn *conn, reading *g, int n)
{
    static const char *const keys[3] = {"stock", "initial", "sold"};
    for (int i = 0; i < n; i++) {
        char key[SVC_KEY_MAX], tag[SVC_TAG_MAX];
        lc_pipe p;
        lc_pipe_init(&p);
        svc_key(key, g[i].sku, "layout");
        (void)lc_pipe_append(&p, "GET %s", key);
        for (int k = 0; k < 3; k++) {
            svc_key(key, g[i].sku, keys[k]);
            (void)lc_pipe_append(&p, "GET %s", key);
        }
        g[i].lay.n = 1;
        if (!pipe_sent(conn, &p, 4))
            continue;
        const redisReply *v = p.reply[0];
        if (v->type == REDIS_REPLY_NIL)
            g[i].ok = add_stock(&g[i], p.reply + 1); /* no stock key: not a SKU (any more) */
        else if (v->type != REDIS_REPLY_STRING || svc_layout_parse(v->str, &g[i].lay) != 0)
            g[i].lay.n = 1; /* a record PUT /stock did not write: left out */
        lc_pipe_clear(&p);
        bool ok = g[i].lay.n > 1;
        for (int b = 0; ok && b < g[i].lay.n; b++) {
            svc_layout_tag(&g[i].lay, g[i].sku, b, tag);
            for (int k = 0; k < 3; k++) {
                svc_key(key, tag, keys[k]);
                (void)lc_pipe_append(&p, "GET %s", key);
            }
            /* a bucket without a stock key: a reset between the reads */
            ok = pipe_sent(conn, &p, 3) && add_stock(&g[i], p.reply);
            lc_pipe_clear(&p);
        }
        if (g[i].lay.n > 1)
            g[i].ok = ok;
    }
}

/* One read of every tracked SKU, at most two round trips for all of them
 * (on a Redis Cluster: read_cluster): the layout record and the SKU's own
 * stock, initial and sold; then, for the SKUs split into stock buckets,
 * every bucket's three. A SKU in buckets sums them as its audit does. The
 * values go back to the slots still holding the same SKU. */
static void read_all(lc_conn **conn)
{
    reading *g = calloc((size_t)nslots, sizeof *g);
    redisReply **reps = NULL;
    int n = 0;
    if (g == NULL)
        goto out;
    SVC_PT(pthread_mutex_lock(&mu));
    for (int i = 0; i < nslots; i++)
        if (atomic_load_explicit(&slots[i].hash, memory_order_relaxed) != 0)
            memcpy(g[n++].sku, slots[i].sku, sizeof g[0].sku);
    SVC_PT(pthread_mutex_unlock(&mu));
    if (n == 0)
        goto out;
    if (*conn == NULL && lc_conn_new(client, conn) != LC_OK)
        goto out;
    if (cluster) {
        read_cluster(*conn, g, n);
        goto out;
    }
    redisContext *ctx = lc_conn_redis(*conn);
    if (ctx == NULL)
        goto out;
    for (int i = 0; i < n; i++) {
        char key[SVC_KEY_MAX];
        svc_key(key, g[i].sku, "layout");
        redisAppendCommand(ctx, "GET %s", key);
        append_stock(ctx, g[i].sku);
    }
    reps = calloc((size_t)4 * (size_t)n, sizeof *reps);
    if (reps == NULL || !read_n(ctx, reps, 4 * n)) {
        /* out of memory: the replies still have to be read to keep the
         * connection in step; a broken one is already done with */
        for (int i = 0; reps == NULL && i < 4 * n; i++) {
            void *rep = NULL;
            if (redisGetReply(ctx, &rep) != REDIS_OK)
                break;
            freeReplyObject(rep);
        }
        goto out;
    }
    int nb = 0; /* the buckets to read */
    for (int i = 0; i < n; i++) {
        redisReply **v = reps + 4 * i;
        g[i].lay.n = 1;
        if (v[0]->type == REDIS_REPLY_NIL)
            g[i].ok = add_stock(&g[i], v + 1); /* no stock key: not a SKU (any more) */
        else if (v[0]->type == REDIS_REPLY_STRING && svc_layout_parse(v[0]->str, &g[i].lay) == 0)
            nb += g[i].lay.n;
        /* else a record PUT /stock did not write: left out */
    }
    for (int i = 0; i < 4 * n; i++)
        freeReplyObject(reps[i]);
    free(reps);
    reps = NULL;
    if (nb == 0)
        goto out;
    for (int i = 0; i < n; i++)
        for (int b = 0; g[i].lay.n > 1 && b < g[i].lay.n; b++) {
            char tag[SVC_TAG_MAX];
            svc_layout_tag(&g[i].lay, g[i].sku, b, tag);
            append_stock(ctx, tag);
        }
    reps = calloc((size_t)3 * (size_t)nb, sizeof *reps);
    if (reps == NULL || !read_n(ctx, reps, 3 * nb)) {
        for (int i = 0; reps == NULL && i < 3 * nb; i++) {
            void *rep = NULL;
            if (redisGetReply(ctx, &rep) != REDIS_OK)
                break;
            freeReplyObject(rep);
        }
        goto out;
    }
    int at = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].lay.n == 1)
            continue;
        /* A bucket without a stock key: a reset between the two round
         * trips; the next read sees the new layout. */
        bool ok = true;
        for (int b = 0; b < g[i].lay.n; b++, at += 3)
            ok = add_stock(&g[i], reps + at) && ok;
        g[i].ok = ok;
    }
    for (int i = 0; i < 3 * nb; i++)
        freeReplyObject(reps[i]);
    free(reps);
    reps = NULL;
out:
    free(reps);
    if (g != NULL) {
        SVC_PT(pthread_mutex_lock(&mu));
        for (int s = 0; s < nslots; s++) {
            if (atomic_load_explicit(&slots[s].hash, memory_order_relaxed) == 0)
                continue;
            bool have = false;
            for (int i = 0; i < n; i++)
                if (strcmp(slots[s].sku, g[i].sku) == 0 && g[i].ok) {
                    slots[s].stock = g[i].stock;
                    slots[s].sold = g[i].sold;
                    slots[s].over = g[i].over;
                    slots[s].under = g[i].under;
                    have = true;
                }
            slots[s].have = have;
        }
        SVC_PT(pthread_mutex_unlock(&mu));
    }
    free(g);
}

static void *reader(void *arg)
{
    (void)arg;
    lc_conn *conn = NULL;
    SVC_PT(pthread_mutex_lock(&mu));
    while (!stop) {
        SVC_PT(pthread_mutex_unlock(&mu));
        read_all(&conn);
        /* lc_now_us is CLOCK_MONOTONIC, the condition variable's clock */
        int64_t due_us = lc_now_us() + (int64_t)period_ms * 1000;
        struct timespec ts = {(time_t)(due_us / 1000000), (long)(due_us % 1000000) * 1000};
        SVC_PT(pthread_mutex_lock(&mu));
        int rc = 0;
        while (!stop && rc != ETIMEDOUT) {
            rc = pthread_cond_timedwait(&cv, &mu, &ts);
            SVC_ASSERT(rc == 0 || rc == ETIMEDOUT);
        }
    }
    SVC_PT(pthread_mutex_unlock(&mu));
    lc_conn_free(conn);
    return NULL;
}

int svc_gauges_start(const lc_options *lo, int max_skus, int refresh_ms)
{
    char err[LC_ERRSTR_LEN];
    if (max_skus <= 0)
        return 0;
    slots = calloc((size_t)max_skus, sizeof *slots);
    if (slots == NULL)
        return -1;
    if (lc_client_new(lo, &client, err, sizeof err) != LC_OK) {
        free(slots);
        slots = NULL;
        return -1;
    }
    cluster = lo->cluster_node_count > 0;
    pthread_condattr_t ca;
    SVC_PT(pthread_condattr_init(&ca));
    SVC_PT(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    SVC_PT(pthread_cond_init(&cv, &ca));
    SVC_PT(pthread_condattr_destroy(&ca));
    period_ms = refresh_ms;
    nslots = max_skus;
    if (pthread_create(&thread, NULL, reader, NULL) != 0) {
        nslots = 0;
        lc_client_free(client);
        client = NULL;
        free(slots);
        slots = NULL;
        return -1;
    }
    started = 1;
    return 0;
}

void svc_gauges_stop(void)
{
    if (!started)
        return;
    SVC_PT(pthread_mutex_lock(&mu));
    stop = 1;
    SVC_PT(pthread_cond_signal(&cv));
    SVC_PT(pthread_mutex_unlock(&mu));
    SVC_PT(pthread_join(thread, NULL));
    lc_client_free(client);
    client = NULL;
    started = 0;
    /* The table stays: an HTTP thread may still render it. */
}

/* --- the rendering ------------------------------------------------------- */

typedef struct row {
    char sku[SVC_SKU_MAX + 1];
    long long v[4]; /* stock, sold, oversold, undersold */
} row;

static int by_sku(const void *a, const void *b)
{
    return strcmp(((const row *)a)->sku, ((const row *)b)->sku);
}

void svc_gauges_render(svc_buf *b)
{
    if (nslots == 0)
        return;
    row *rows = calloc((size_t)nslots, sizeof *rows);
    if (rows == NULL) {
        b->oom = 1;
        return;
    }
    int n = 0;
    SVC_PT(pthread_mutex_lock(&mu));
    for (int i = 0; i < nslots; i++) {
        const slot *s = &slots[i];
        if (atomic_load_explicit(&s->hash, memory_order_relaxed) == 0 || !s->have)
            continue;
        memcpy(rows[n].sku, s->sku, sizeof rows[n].sku);
        rows[n].v[0] = s->stock;
        rows[n].v[1] = s->sold;
        rows[n].v[2] = s->over;
        rows[n].v[3] = s->under;
        n++;
    }
    SVC_PT(pthread_mutex_unlock(&mu));
    qsort(rows, (size_t)n, sizeof *rows, by_sku);
    static const struct {
        const char *name, *help;
    } fam[4] = {
        {"miaosha_stock", "The SKU's stock counter in Redis (GET /stock/{sku} stock)."},
        {"miaosha_sold", "Units the SKU's purchases recorded as sold (GET /stock/{sku} sold)."},
        {"miaosha_oversold",
         "Units sold that the stock counter never lost: max(0, sold - (initial - stock)), the "
         "race; for a SKU in stock buckets, summed bucket by bucket."},
        {"miaosha_undersold",
         "Stock that left without a recorded sale: max(0, (initial - stock) - sold); for a SKU "
         "in stock buckets, summed bucket by bucket."},
    };
    for (int f = 0; f < 4; f++) {
        svc_buf_printf(b,
                       "# HELP %s %s Read from Redis every metrics.refresh_ms.\n# TYPE %s gauge\n",
                       fam[f].name, fam[f].help, fam[f].name);
        for (int i = 0; i < n; i++) /* a SKU is [A-Za-z0-9_-]: nothing to escape */
            svc_buf_printf(b, "%s{sku=\"%s\"} %lld\n", fam[f].name, rows[i].sku, rows[i].v[f]);
    }
    free(rows);
}
