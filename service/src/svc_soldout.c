/* svc_soldout.c — the local sold-out flag and its reset listener
 * (svc_soldout.h). */
#include "svc_soldout.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "svc_bucket.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_keys.h"
#include "svc_params.h"
#include "svc_skuset.h"

/* Each SKU's flag, at its index in the set of SKUs seen (svc_skuset.h):
 * lookups take no lock. */
typedef struct entry {
    _Atomic uint64_t gen;     /* bumped by every clear */
    _Atomic uint64_t flagged; /* gen + 1 while flagged for that gen; else anything else */
} entry;

static entry table[SVC_SOLDOUT_SKUS];
static svc_skuset_slot names[SVC_SOLDOUT_SKUS];
static svc_skuset skus = SVC_SKUSET_INIT(names, SVC_SOLDOUT_SKUS);
static _Atomic int stop;
static pthread_t thread;
static int started;
static lc_client *client;
static int cluster; /* redis.cluster_nodes: each SKU's stock on its slot's master */

static entry *find(const char *sku)
{
    int i = svc_skuset_find(&skus, sku);
    return i >= 0 ? &table[i] : NULL;
}

static entry *find_or_add(const char *sku)
{
    int i = svc_skuset_add(&skus, sku, NULL, NULL);
    return i >= 0 ? &table[i] : NULL; /* NULL: the set is full */
}

int svc_soldout_is(const char *sku)
{
    const entry *e = find(sku);
    return e != NULL && atomic_load(&e->flagged) == atomic_load(&e->gen) + 1;
}

uint64_t svc_soldout_gen(const char *sku)
{
    const entry *e = find(sku);
    return e != NULL ? atomic_load(&e->gen) : 0;
}

void svc_soldout_mark(const char *sku, uint64_t gen)
{
    entry *e = find_or_add(sku);
    if (e != NULL)
        atomic_store(&e->flagged, gen + 1);
}

void svc_soldout_clear(const char *sku)
{
    /* Added even when unknown: a purchase that read before this reset and
     * marks after it must find the generation moved. */
    entry *e = find_or_add(sku);
    if (e != NULL)
        atomic_fetch_add(&e->gen, 1);
}

/* ---- the listener thread ---- */

/* 1 when a layout record as MGET answered it (nil: one bucket) is not
 * the layout this instance holds for sku (or it holds none while the SKU
 * is split): a reset this instance has not heard of. */
static int layout_moved(const char *sku, const redisReply *v)
{
    svc_layout known, now;
    int have = svc_bucket_known(sku, &known);
    if (v->type != REDIS_REPLY_STRING)
        return have && known.n > 1;
    if (svc_layout_parse(v->str, &now) != 0 || !have)
        return 1;
    return known.n != now.n || strcmp(known.id, now.id) != 0;
}

/* e's flag, given its SKU's stock v and layout record lay as read: it
 * clears when the stock holds anything but an integer <= 0 (or nothing),
 * or when the layout is not the one this instance holds (a reset split or
 * rejoined it, or refilled its buckets). An error reply (a cluster's
 * redirect given up on) tells nothing. */
static void check_one(entry *e, const char *sku, const redisReply *v, const redisReply *lay)
{
    if (v->type == REDIS_REPLY_ERROR || lay->type == REDIS_REPLY_ERROR)
        return;
    if (layout_moved(sku, lay)) {
        svc_bucket_learn(sku, NULL);
        atomic_fetch_add(&e->gen, 1);
        return;
    }
    if (v->type != REDIS_REPLY_STRING) { /* nil: the SKU is gone (404 unknown_sku) */
        atomic_fetch_add(&e->gen, 1);
        return;
    }
    char *end = NULL;
    long long st = strtoll(v->str, &end, 10);
    if (end == v->str || *end != '\0' || st > 0)
        atomic_fetch_add(&e->gen, 1);
}

/* The fallback: one MGET of every flagged SKU's stock and layout record
 * (on a cluster, where an MGET names one slot, one round trip per SKU),
 * each flag checked (check_one). */
static void check_flagged(lc_conn *conn)
{
    static char keys[2 * SVC_SOLDOUT_SKUS][SVC_KEY_MAX];
    const char *argv[2 * SVC_SOLDOUT_SKUS + 1];
    int which[SVC_SOLDOUT_SKUS];
    int n = 0;
    argv[0] = "MGET";
    for (int i = 0; i < SVC_SOLDOUT_SKUS; i++) {
        const char *sku = svc_skuset_name(&skus, i);
        if (sku == NULL || atomic_load(&table[i].flagged) != atomic_load(&table[i].gen) + 1)
            continue;
        svc_key(keys[2 * n], sku, "stock");
        svc_key(keys[2 * n + 1], sku, "layout");
        argv[2 * n + 1] = keys[2 * n];
        argv[2 * n + 2] = keys[2 * n + 1];
        which[n++] = i;
    }
    if (n == 0)
        return;
    if (cluster) {
        /* a SKU's two keys share its slot: one round trip each */
        for (int i = 0; i < n; i++) {
            lc_pipe p;
            lc_pipe_init(&p);
            (void)lc_pipe_append(&p, "GET %s", keys[2 * i]);
            (void)lc_pipe_append(&p, "GET %s", keys[2 * i + 1]);
            if (p.n == 2 && lc_conn_pipe(conn, &p) == LC_OK)
                check_one(&table[which[i]], svc_skuset_name(&skus, which[i]), p.reply[0],
                          p.reply[1]);
            lc_pipe_clear(&p);
        }
        return;
    }
    redisContext *ctx = lc_conn_redis(conn);
    if (ctx == NULL)
        return;
    redisReply *rep = redisCommandArgv(ctx, 2 * n + 1, argv, NULL);
    if (rep != NULL && rep->type == REDIS_REPLY_ARRAY && rep->elements == (size_t)(2 * n))
        for (int i = 0; i < n; i++)
            check_one(&table[which[i]], svc_skuset_name(&skus, which[i]), rep->element[2 * i],
                      rep->element[2 * i + 1]);
    freeReplyObject(rep);
}

/* A subscription: SUBSCRIBE sent on a fresh connection, its context in
 * *ctx_out (kept from here on: lc_conn_redis would see the unread messages
 * as a connection out of step and replace it). NULL on failure. */
static lc_conn *subscribe(redisContext **ctx_out)
{
    lc_conn *c = NULL;
    if (lc_conn_new(client, &c) != LC_OK)
        return NULL;
    redisContext *ctx = lc_conn_redis(c);
    int done = 0;
    if (ctx != NULL && redisAppendCommand(ctx, "SUBSCRIBE %s", SVC_SOLDOUT_CHANNEL) == REDIS_OK) {
        while (!done && redisBufferWrite(ctx, &done) == REDIS_OK) {
        }
    }
    if (!done) {
        lc_conn_free(c);
        return NULL;
    }
    *ctx_out = ctx;
    return c;
}

/* A reset's message: "<sku>" (one bucket) or "<sku> <layout record>"
 * (svc_stock.c). The flag clears; the layout is learnt from the message,
 * so no instance reads it again. */
static void on_message(const redisReply *m)
{
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 3 ||
        m->element[0]->type != REDIS_REPLY_STRING || strcmp(m->element[0]->str, "message") != 0 ||
        m->element[2]->type != REDIS_REPLY_STRING)
        return;
    char sku[SVC_SKU_MAX + 1];
    const char *txt = m->element[2]->str, *sp = strchr(txt, ' ');
    size_t n = sp != NULL ? (size_t)(sp - txt) : strlen(txt);
    if (n == 0 || n > SVC_SKU_MAX)
        return;
    memcpy(sku, txt, n);
    sku[n] = '\0';
    if (!svc_valid_id(sku))
        return;
    svc_layout l;
    memset(&l, 0, sizeof l);
    l.n = 1;
    int known = sp == NULL || svc_layout_parse(sp + 1, &l) == 0;
    svc_soldout_clear(sku);
    svc_bucket_learn(sku, known ? &l : NULL);
}

static void *listener(void *arg)
{
    (void)arg;
    lc_conn *poll_conn = NULL, *sub = NULL;
    redisContext *ctx = NULL; /* sub's */
    int64_t next_check = 0, next_sub = 0;
    int was_down = 0;
    SVC_ASSERT(lc_conn_new(client, &poll_conn) == LC_OK);
    while (!atomic_load(&stop)) {
        int64_t now = lc_now_us();
        if (sub == NULL && now >= next_sub) {
            sub = subscribe(&ctx);
            next_sub = now + SVC_SOLDOUT_POLL_MS * 1000;
            /* The resets before this subscription went unheard: every
             * bucket layout is read again when next needed. */
            if (sub != NULL)
                svc_bucket_forget_all();
            if (sub != NULL && was_down)
                svc_log(SVC_INFO, "sold-out flag: subscribed to %s again", SVC_SOLDOUT_CHANNEL);
            was_down = sub == NULL;
        }
        int wait_ms = (int)((next_check - now) / 1000);
        if (wait_ms < 0)
            wait_ms = 0;
        if (wait_ms > SVC_SOLDOUT_POLL_MS)
            wait_ms = SVC_SOLDOUT_POLL_MS;
        if (sub != NULL) {
            struct pollfd pfd = {ctx->fd, POLLIN, 0};
            int pr = poll(&pfd, 1, wait_ms);
            int broken = pr < 0 || (pfd.revents & (POLLERR | POLLNVAL));
            if (!broken && pr > 0) {
                void *m = NULL;
                broken = redisBufferRead(ctx) != REDIS_OK;
                while (!broken && redisGetReplyFromReader(ctx, &m) == REDIS_OK && m != NULL) {
                    on_message(m);
                    freeReplyObject(m);
                    m = NULL;
                }
                broken = broken || ctx->err != 0;
            }
            if (broken) {
                /* Messages may be lost until the next subscription: the
                 * poll below covers them. */
                lc_conn_free(sub);
                sub = NULL;
                ctx = NULL;
                was_down = 1;
                svc_log(SVC_WARN, "sold-out flag: subscription to %s lost; polling",
                        SVC_SOLDOUT_CHANNEL);
            }
        } else {
            struct timespec ts = {0, (long)wait_ms * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (lc_now_us() >= next_check) {
            check_flagged(poll_conn);
            next_check = lc_now_us() + SVC_SOLDOUT_POLL_MS * 1000;
        }
    }
    lc_conn_free(sub);
    lc_conn_free(poll_conn);
    return NULL;
}

int svc_soldout_start(const lc_options *lo)
{
    char err[LC_ERRSTR_LEN];
    if (lc_client_new(lo, &client, err, sizeof err) != LC_OK)
        return -1;
    cluster = lo->cluster_node_count > 0;
    if (pthread_create(&thread, NULL, listener, NULL) != 0) {
        lc_client_free(client);
        client = NULL;
        return -1;
    }
    started = 1;
    return 0;
}

void svc_soldout_stop(void)
{
    if (!started)
        return;
    atomic_store(&stop, 1);
    SVC_PT(pthread_join(thread, NULL));
    lc_client_free(client);
    client = NULL;
    started = 0;
}
