/* svc_stock.c — stock administration and the audit:
 *   PUT /stock/{sku}    set stock and initial, zero sold, clear orders,
 *                       the lock keys and the fenced mode's high-water
 *                       mark, change the epoch (voiding purchases in
 *                       flight); with buckets=K > 1 the same for each of K
 *                       buckets, each with its share of the stock and the
 *                       reset's id as its epoch, and the layout record
 *                       (svc_bucket.h). In the SKU's reset lock (take_turn:
 *                       resets take turns), two round trips: the old
 *                       layout read (and WATCHed), then one MULTI/EXEC
 *                       that also voids every bucket of the old layout
 *   GET /stock/{sku}    the audit: stock, initial, sold, orders and
 *                       oversold = max(0, sold - (initial - stock))
 *                       undersold = max(0, (initial - stock) - sold)
 *                       (with buckets: each summed over the buckets, the
 *                       last two bucket by bucket, and "buckets")
 *   GET /orders/{sku}   the order records, offset/limit (limit <= 1000);
 *                       with buckets, bucket after bucket
 * Each reads the layout record in its first round trip, beside what the
 * cached layout says it needs; only a layout changed since costs another.
 * On a Redis Cluster every bucket is a slot of its own (svc_keys.h): the
 * audit's and the order list's reads go out together, one write per
 * master (rq_open's each, lc_conn_pipes_each), so a round costs one round
 * trip per node, not per bucket; a reset is one transaction per bucket,
 * one round trip each, then the SKU's own, which WATCHes the layout record
 * again.
 * A SKU without a stock key and without a layout record was never
 * stocked: both GETs answer 404 unknown_sku, as its purchases do. A SKU
 * split into buckets is stocked (its layout record says so; its own stock
 * key holds 0 besides).
 */
#include "svc_routes.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uuid/uuid.h>

#include "svc_bucket.h"
#include "svc_check.h"
#include "svc_gauges.h"
#include "svc_health.h"
#include "svc_keys.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"

static void redis_fail(svc_req *r, const char *why)
{
    svc_stats_redis_error();
    svc_reply_error(r, 503, "redis_unavailable", why, NULL);
}

/* A read route's (the audit's, the orders') failed round: rc -2 (Redis
 * answered with an error, e.g. a key of the wrong type, or a layout record
 * PUT /stock did not write: the data, not Redis, is the problem, as a
 * purchase's redis_error says) → 503 redis_error; else → 503
 * redis_unavailable. */
static void read_fail(svc_req *r, int rc, const char *why)
{
    if (rc != -2) {
        redis_fail(r, why);
        return;
    }
    svc_stats_redis_error();
    svc_reply_error(r, 503, "redis_error", why, NULL);
}

/* A stock's keys, all under one hash tag (svc_key): the SKU's, or one of
 * its buckets'; the lock keys of the modes that keep one in Redis
 * (svc_lock_key); the fenced mode's high-water mark (svc_fence.c); a
 * bucket's reservations (svc_bucket.h). Its fence counter,
 * miaosha:{tag}:fence, is not here on purpose: a reset keeps it. A holder
 * from before the reset may still be running with its token, and fencing
 * works only while every later grant draws a larger number than every
 * earlier one; a counter reset to 0 would hand out numbers below that
 * holder's, and below the mark, so new buyers would be fenced out and a
 * stale one let in. The mark can go (a stale read's write is voided by the
 * epoch anyway, and the next read sets it again): it describes reads of
 * the old stock. */
typedef struct sku_keys {
    char stock[SVC_KEY_MAX], initial[SVC_KEY_MAX], sold[SVC_KEY_MAX], orders[SVC_KEY_MAX];
    char epoch[SVC_KEY_MAX], fence_hwm[SVC_KEY_MAX], buyers[SVC_KEY_MAX];
    char reserved[SVC_KEY_MAX];
    /* the lock key of every mode whose lock lives in this Redis */
    char locks[LC_MODE_COUNT][SVC_KEY_MAX];
    int nlocks;
} sku_keys;

static void sku_keys_init(sku_keys *k, const char *tag)
{
    svc_key(k->stock, tag, "stock");
    svc_key(k->initial, tag, "initial");
    svc_key(k->sold, tag, "sold");
    svc_key(k->orders, tag, "orders");
    svc_key(k->epoch, tag, "epoch");
    svc_key(k->fence_hwm, tag, "fence_hwm");
    svc_key(k->buyers, tag, "buyers");
    svc_key(k->reserved, tag, "reserved");
    k->nlocks = 0;
    for (int m = 0; m < LC_MODE_COUNT; m++)
        if (lc_mode_info_of((lc_mode)m)->lock_in_redis)
            svc_lock_key(k->locks[k->nlocks++], tag, (lc_mode)m);
}

/* Reads n pipelined replies into reps (all of them, so the connection stays
 * in step even when one is an error): 0; or, having freed what it read and
 * copied the reason into why, -1 when a reply is missing and -2 when one
 * is an error reply. A broken connection leaves ctx->err set, and the next
 * call through lc_conn reconnects. */
static int read_replies(redisContext *ctx, redisReply **reps, int n, char *why, size_t len)
{
    int got = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        void *rep = NULL;
        if (redisGetReply(ctx, &rep) != REDIS_OK || rep == NULL) {
            snprintf(why, len, "%s", ctx->errstr[0] ? ctx->errstr : "no reply");
            bad = -1;
            break;
        }
        reps[got++] = rep;
        if (reps[i]->type == REDIS_REPLY_ERROR && !bad) {
            snprintf(why, len, "%s", reps[i]->str);
            bad = -2;
        }
    }
    if (!bad)
        return 0;
    for (int k = 0; k < got; k++)
        freeReplyObject(reps[k]);
    return bad;
}

static void free_replies(redisReply **reps, int n)
{
    for (int i = 0; i < n; i++)
        freeReplyObject(reps[i]);
    free(reps);
}

/* The commands of one round of a route, as one Redis or a Redis Cluster
 * takes them. One Redis: written on the job's context, every reply read
 * in one round trip, as always. A cluster (redis.cluster_nodes): every
 * stock is a slot of its own (its tag: the SKU, or one of its buckets:
 * svc_keys.h), so the commands of one tag travel together in one lc_pipe
 * to that slot's master — lc_conn_pipe follows the redirects of a reshard
 * or a failover — one round trip per run of one tag's commands; a
 * transaction (MULTI ... EXEC) stays inside one tag and one pipe. A round
 * of independent reads (each: every command single-key, none depending on
 * another) instead fills pipe after pipe whatever the tags, sent at the
 * read by lc_conn_pipes_each: one write per master, side by side. */
#define RQ_MAX 768 /* replies of one round: a reset of 64 buckets on a cluster */

typedef struct rq {
    lc_conn *conn;
    redisContext *ctx;       /* one Redis; NULL on a cluster */
    lc_pipe p;               /* a cluster: the commands of tag not sent yet */
    char tag[SVC_TAG_MAX];   /* theirs */
    redisReply *got[RQ_MAX]; /* a cluster: the replies of the round so far */
    int ngot;
    int n;       /* commands added in the round */
    bool failed; /* a cluster: a reply missing or out of memory: nothing more
                    is sent this round */
    char why[256];
    bool each;       /* a cluster, independent reads (above) */
    lc_pipe *each_p; /* each: the round's commands, LC_PIPES_MAX pipes
                        (about 100 KB: too much for a worker's stack)
                        calloc'd at the round's first command, freed once
                        sent; NULL between rounds */
    int each_n;      /* each: pipes in use */
} rq;

/* q for r's job on conn (each: its rounds are independent reads, above):
 * 0; or -1 after answering 503 when there is no connection (one Redis:
 * none could be made). */
static int rq_open(rq *q, svc_req *r, lc_conn *conn, bool each)
{
    q->each = each && r->s->redis.cluster_nodes[0] != '\0';
    q->each_p = NULL;
    q->each_n = 0;
    q->conn = conn;
    q->ctx = NULL;
    lc_pipe_init(&q->p);
    q->tag[0] = '\0';
    q->ngot = q->n = 0;
    q->failed = false;
    q->why[0] = '\0';
    if (conn == NULL) {
        redis_fail(r, "no Redis connection");
        return -1;
    }
    if (r->s->redis.cluster_nodes[0] != '\0')
        return 0;
    q->ctx = lc_conn_redis(conn);
    if (q->ctx == NULL) {
        redis_fail(r, lc_conn_errstr(conn));
        return -1;
    }
    return 0;
}

static void rq_fail(rq *q, const char *why)
{
    if (!q->failed)
        snprintf(q->why, sizeof q->why, "%s", strncmp(why, "redis: ", 7) == 0 ? why + 7 : why);
    q->failed = true;
}

/* Keeps p's replies in order after the round's earlier ones (none once a
 * reply is missing: the round has failed), and empties p. */
static void rq_keep(rq *q, lc_pipe *p)
{
    for (int i = 0; i < p->n; i++) {
        redisReply *rep = lc_pipe_take(p, i);
        if (rep == NULL)
            rq_fail(q, "no reply");
        if (q->failed)
            freeReplyObject(rep);
        else
            q->got[q->ngot++] = rep;
    }
    lc_pipe_clear(p);
}

/* A cluster, each: sends every pipe of the round at once, keeps their
 * replies in order. */
static void rq_flush_each(rq *q)
{
    lc_pipe *pipes[LC_PIPES_MAX];
    for (int k = 0; k < q->each_n; k++)
        pipes[k] = &q->each_p[k];
    if (!q->failed && q->each_n > 0 && lc_conn_pipes_each(q->conn, pipes, q->each_n) != LC_OK)
        rq_fail(q, lc_conn_errstr(q->conn));
    for (int k = 0; k < q->each_n; k++)
        rq_keep(q, &q->each_p[k]);
    q->each_n = 0;
    free(q->each_p);
    q->each_p = NULL;
}

/* A cluster: sends the commands of q's tag not sent yet, keeps their
 * replies. */
static void rq_flush(rq *q)
{
    if (q->each) {
        rq_flush_each(q);
        return;
    }
    if (q->p.n == 0)
        return;
    if (!q->failed && lc_conn_pipe(q->conn, &q->p) != LC_OK)
        rq_fail(q, lc_conn_errstr(q->conn));
    rq_keep(q, &q->p);
}

/* Adds one command of argc arguments (NUL-terminated) naming keys of tag
 * (a keyless one: the tag of the commands around it). */
static void rq_argv(rq *q, const char *tag, int argc, const char **argv)
{
    SVC_ASSERT(q->n < RQ_MAX);
    q->n++;
    if (q->ctx != NULL) {
        redisAppendCommandArgv(q->ctx, argc, argv, NULL);
        return;
    }
    if (q->each) {
        if (q->each_p == NULL && (q->each_p = calloc(LC_PIPES_MAX, sizeof *q->each_p)) == NULL) {
            rq_fail(q, "out of memory");
            return;
        }
        if (q->each_n == 0 || q->each_p[q->each_n - 1].n == LC_PIPE_MAX) {
            SVC_ASSERT(q->each_n < LC_PIPES_MAX);
            lc_pipe_init(&q->each_p[q->each_n++]);
        }
        if (!q->failed && lc_pipe_append_argv(&q->each_p[q->each_n - 1], argc, argv, NULL) != LC_OK)
            rq_fail(q, "out of memory");
        return;
    }
    if (q->p.n > 0 &&
        (q->p.n == LC_PIPE_MAX || strcmp(q->tag, tag) != 0 || strcmp(argv[0], "MULTI") == 0))
        rq_flush(q);
    snprintf(q->tag, sizeof q->tag, "%s", tag);
    if (!q->failed && lc_pipe_append_argv(&q->p, argc, argv, NULL) != LC_OK)
        rq_fail(q, "out of memory");
}

/* rq_argv of "<cmd> <key>" and of "<cmd> <key> <arg>" (arg NULL: none). */
static void rq_cmd(rq *q, const char *tag, const char *cmd, const char *key, const char *arg)
{
    const char *argv[3] = {cmd, key, arg};
    rq_argv(q, tag, key == NULL ? 1 : arg == NULL ? 2 : 3, argv);
}

/* rq_cmd with a number as its argument. */
static void rq_cmd_ll(rq *q, const char *tag, const char *cmd, const char *key, long long v)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", v);
    rq_cmd(q, tag, cmd, key, num);
}

/* Every reply of the round into reps (n of them, as many as were added,
 * in the order added; reps NULL: out of memory, each reply read and
 * dropped): 0; or, with the reason in why (len bytes) and what it read
 * freed, -1 for a reply missing (a broken connection: the next call
 * reconnects) or out of memory, -2 for an error reply. q is ready for the
 * next round. */
static int rq_read(rq *q, redisReply **reps, int n, char *why, size_t len)
{
    SVC_ASSERT(n == q->n);
    q->n = 0;
    if (q->ctx != NULL) {
        if (reps != NULL)
            return read_replies(q->ctx, reps, n, why, len);
        /* the replies must still be read to keep the connection in step */
        for (int i = 0; i < n; i++) {
            void *rep = NULL;
            if (redisGetReply(q->ctx, &rep) != REDIS_OK)
                break;
            freeReplyObject(rep);
        }
        snprintf(why, len, "out of memory");
        return -1;
    }
    rq_flush(q);
    if (reps == NULL)
        rq_fail(q, "out of memory");
    int bad = q->failed ? -1 : 0, got = q->ngot;
    if (bad)
        snprintf(why, len, "%s", q->why);
    for (int i = 0; i < got && !bad; i++)
        if (q->got[i]->type == REDIS_REPLY_ERROR) {
            snprintf(why, len, "%s", q->got[i]->str);
            bad = -2;
        }
    for (int i = 0; i < got; i++) {
        if (bad)
            freeReplyObject(q->got[i]);
        else
            reps[i] = q->got[i];
    }
    q->ngot = 0;
    q->failed = false;
    return bad;
}

/* rq_argv of LRANGE key from to. */
static void rq_lrange(rq *q, const char *tag, const char *key, long long from, long long to)
{
    char a[24], b[24];
    snprintf(a, sizeof a, "%lld", from);
    snprintf(b, sizeof b, "%lld", to);
    const char *argv[4] = {"LRANGE", key, a, b};
    rq_argv(q, tag, 4, argv);
}

/* 404 unknown_sku: r's SKU has no stock key (and no layout record). A
 * purchase answers the same (svc_section.c, purchase.lua): the stock key
 * is what makes a SKU exist, and only a reset (PUT /stock) or the start-up
 * seed creates it. */
static void unknown_sku(svc_req *r)
{
    char detail[200];
    snprintf(detail, sizeof detail, "sku %s was never stocked (PUT /stock/%s creates it)", r->sku,
             r->sku);
    cJSON *extra = cJSON_CreateObject();
    if (extra != NULL)
        cJSON_AddStringToObject(extra, "sku", r->sku);
    svc_reply_error(r, 404, "unknown_sku", detail, extra);
}

static long long as_int(const redisReply *rep)
{
    if (rep->type == REDIS_REPLY_INTEGER)
        return rep->integer;
    if (rep->type == REDIS_REPLY_STRING)
        return strtoll(rep->str, NULL, 10);
    return 0;
}

/* The layout a GET of the layout record answered, into *l: 0, or -1 with
 * the reason in why for a record PUT /stock did not write. */
static int layout_of(const redisReply *rep, const char *sku, svc_layout *l, char *why, size_t len)
{
    memset(l, 0, sizeof *l);
    l->n = 1;
    if (rep->type == REDIS_REPLY_NIL)
        return 0;
    if (rep->type == REDIS_REPLY_STRING && svc_layout_parse(rep->str, l) == 0)
        return 0;
    snprintf(why, len, "the layout record of sku %s is not one PUT /stock wrote", sku);
    return -1;
}

static bool same_layout(const svc_layout *a, const svc_layout *b)
{
    return a->n == b->n && strcmp(a->id, b->id) == 0 && memcmp(a->salt, b->salt, (size_t)a->n) == 0;
}

/* The layout the cache holds for sku, else one bucket: the guess a route
 * reads with, in the same round trip as the layout record itself. */
static void guess_layout(const char *sku, svc_layout *l)
{
    if (!svc_bucket_known(sku, l)) {
        memset(l, 0, sizeof *l);
        l->n = 1;
    }
}

/* One stock's numbers, as the audit reads them. */
typedef struct stock_nums {
    long long stock, initial, sold, orders;
} stock_nums;

static cJSON *audit_json(const char *sku, stock_nums t, long long over, long long under,
                         long long duplicate_buyers)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddStringToObject(o, "sku", sku);
    svc_json_add_int(o, "stock", t.stock);
    svc_json_add_int(o, "initial", t.initial);
    svc_json_add_int(o, "sold", t.sold);
    svc_json_add_int(o, "orders", t.orders);
    svc_json_add_int(o, "oversold", over > 0 ? over : 0);
    svc_json_add_int(o, "undersold", under > 0 ? under : 0);
    svc_json_add_int(o, "duplicate_buyers", duplicate_buyers);
    return o;
}

/* oversold and undersold of one stock. */
static void balance(stock_nums t, long long *over, long long *under)
{
    long long taken = t.initial - t.stock;
    *over = t.sold - taken > 0 ? t.sold - taken : 0;
    *under = taken - t.sold > 0 ? taken - t.sold : 0;
}

/* A buyer's orders in one bucket, for the audit's duplicate_buyers. */
typedef struct buyer_count {
    const char *user;
    long long n;
} buyer_count;

static int by_user(const void *a, const void *b)
{
    return strcmp(((const buyer_count *)a)->user, ((const buyer_count *)b)->user);
}

/* Users holding more than allowed orders, over the buyers hashes of every
 * bucket (HGETALL replies: user, count, user, count, ...): a user's counts
 * are summed across buckets first. -1 when out of memory. */
static long long duplicates_across(redisReply *const *hashes, int n, long long allowed)
{
    size_t total = 0;
    for (int b = 0; b < n; b++)
        if (hashes[b]->type == REDIS_REPLY_ARRAY)
            total += hashes[b]->elements / 2;
    if (total == 0)
        return 0;
    buyer_count *all = malloc(total * sizeof *all);
    if (all == NULL)
        return -1;
    size_t k = 0;
    for (int b = 0; b < n; b++) {
        const redisReply *h = hashes[b];
        if (h->type != REDIS_REPLY_ARRAY)
            continue;
        for (size_t i = 0; i + 1 < h->elements; i += 2) {
            if (h->element[i]->type != REDIS_REPLY_STRING)
                continue;
            all[k].user = h->element[i]->str;
            all[k++].n = as_int(h->element[i + 1]);
        }
    }
    qsort(all, k, sizeof *all, by_user);
    long long dup = 0;
    for (size_t i = 0; i < k;) {
        long long sum = 0;
        size_t j = i;
        for (; j < k && strcmp(all[j].user, all[i].user) == 0; j++)
            sum += all[j].n;
        dup += sum > allowed;
        i = j;
    }
    free(all);
    return dup;
}

/* Adds the audit's reads of one stock: GET stock, initial, sold, LLEN
 * orders, and the buyers (HVALS for a SKU's own, HGETALL for a bucket's:
 * a user's counts are summed across buckets). */
static void append_audit(rq *q, const char *tag, bool whole)
{
    sku_keys k;
    sku_keys_init(&k, tag);
    rq_cmd(q, tag, "GET", k.stock, NULL);
    rq_cmd(q, tag, "GET", k.initial, NULL);
    rq_cmd(q, tag, "GET", k.sold, NULL);
    rq_cmd(q, tag, "LLEN", k.orders, NULL);
    rq_cmd(q, tag, whole ? "HVALS" : "HGETALL", k.buyers, NULL);
}

/* The audit of sku under layout *l from its replies (5 per bucket). */
static cJSON *audit_of(const svc_req *r, const svc_layout *l, redisReply **reps)
{
    /* Users holding more orders than purchase.limit_per_user; with no
     * limit (0), users holding more than one. */
    long long allowed = r->s->purchase.limit_per_user > 0 ? r->s->purchase.limit_per_user : 1;
    if (l->n == 1) {
        stock_nums t = {as_int(reps[0]), as_int(reps[1]), as_int(reps[2]), as_int(reps[3])};
        long long dup = 0, over, under;
        if (reps[4]->type == REDIS_REPLY_ARRAY)
            for (size_t i = 0; i < reps[4]->elements; i++)
                if (as_int(reps[4]->element[i]) > allowed)
                    dup++;
        balance(t, &over, &under);
        return audit_json(r->sku, t, over, under, dup);
    }
    /* A sum of per-bucket balances: one bucket's oversell cannot hide
     * behind another's undersell. */
    stock_nums sum = {0, 0, 0, 0};
    long long over = 0, under = 0;
    redisReply *hashes[SVC_BUCKETS_MAX];
    cJSON *arr = cJSON_CreateArray();
    for (int b = 0; b < l->n; b++) {
        redisReply **q = reps + 5 * b;
        stock_nums t = {as_int(q[0]), as_int(q[1]), as_int(q[2]), as_int(q[3])};
        long long o, u;
        balance(t, &o, &u);
        over += o;
        under += u;
        sum.stock += t.stock;
        sum.initial += t.initial;
        sum.sold += t.sold;
        sum.orders += t.orders;
        hashes[b] = q[4];
        cJSON *e = cJSON_CreateObject();
        svc_json_add_int(e, "stock", t.stock);
        svc_json_add_int(e, "initial", t.initial);
        svc_json_add_int(e, "sold", t.sold);
        svc_json_add_int(e, "orders", t.orders);
        if (e == NULL || !cJSON_AddItemToArray(arr, e))
            cJSON_Delete(e);
    }
    long long dup = duplicates_across(hashes, l->n, allowed);
    cJSON *o = dup < 0 ? NULL : audit_json(r->sku, sum, over, under, dup);
    if (o == NULL || arr == NULL || !cJSON_AddItemToObject(o, "buckets", arr)) {
        cJSON_Delete(arr);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

void svc_stock_get_job(svc_req *r, lc_conn *conn)
{
    char why[256], lkey[SVC_KEY_MAX];
    rq q;
    if (rq_open(&q, r, conn, true) != 0)
        return;
    svc_key(lkey, r->sku, "layout");
    svc_layout l, now;
    guess_layout(r->sku, &l);
    /* The layout record rides with the reads the cached layout asks for;
     * a layout changed since is read again, once per change. */
    for (int tries = 0;; tries++) {
        int n = 1 + 5 * l.n;
        redisReply **reps = calloc((size_t)n, sizeof *reps);
        if (reps == NULL) {
            svc_reply_json(r, 503, NULL);
            return;
        }
        rq_cmd(&q, r->sku, "GET", lkey, NULL);
        for (int b = 0; b < l.n; b++) {
            char tag[SVC_TAG_MAX];
            svc_layout_tag(&l, r->sku, b, tag);
            append_audit(&q, tag, l.n == 1);
        }
        int rc = rq_read(&q, reps, n, why, sizeof why);
        if (rc != 0) {
            free(reps);
            read_fail(r, rc, why);
            return;
        }
        if (layout_of(reps[0], r->sku, &now, why, sizeof why) != 0) {
            free_replies(reps, n);
            read_fail(r, -2, why);
            return;
        }
        /* No stock key and no buckets: a SKU that was never stocked, not
         * one with zeros. */
        if (same_layout(&now, &l) && l.n == 1 && reps[1]->type == REDIS_REPLY_NIL) {
            free_replies(reps, n);
            unknown_sku(r);
            return;
        }
        if (same_layout(&now, &l)) {
            svc_reply_json(r, 200, audit_of(r, &l, reps + 1));
            free_replies(reps, n);
            return;
        }
        free_replies(reps, n);
        if (tries == 3) { /* as a reset answers then: not an audit of no layout */
            redis_fail(r, "the layout kept changing under concurrent resets");
            return;
        }
        l = now;
    }
}

/* Adds the reset of one bucket under tag to q's transaction: stock and
 * initial set to n (a bucket that is gone: deleted), sold 0, orders,
 * buyers, reservations, fence mark and locks deleted, the epoch set to
 * the reset's id. Returns the commands queued. */
static int append_reset(rq *q, const char *tag, long long n, bool gone, const char *id)
{
    sku_keys k;
    sku_keys_init(&k, tag);
    int c = 0;
    if (!gone) {
        rq_cmd_ll(q, tag, "SET", k.stock, n);
        rq_cmd_ll(q, tag, "SET", k.initial, n);
        rq_cmd(q, tag, "SET", k.sold, "0");
        c += 3;
    }
    const char *del[8 + LC_MODE_COUNT] = {"DEL", k.orders, k.buyers, k.fence_hwm, k.reserved};
    int ndel = 5;
    if (gone) {
        del[ndel++] = k.stock;
        del[ndel++] = k.initial;
        del[ndel++] = k.sold;
    }
    for (int i = 0; i < k.nlocks; i++)
        del[ndel++] = k.locks[i];
    rq_argv(q, tag, ndel, del);
    /* Voids the commit of every purchase that read the old stock (they
     * WATCH this key): see svc_store.c. A bucket's epoch is the id of the
     * reset that wrote it, not a count: a purchase holding a reservation
     * of one reset sells only in a bucket of that same reset
     * (svc_bucket.h, "one buy per user"), which a count could not tell. */
    rq_cmd(q, tag, "SET", k.epoch, id);
    return c + 2;
}

/* 1 when tag is one of layout l's buckets of sku. */
static bool in_layout(const svc_layout *l, const char *sku, const char *tag)
{
    char t[SVC_TAG_MAX];
    for (int b = 0; b < l->n && l->n > 1; b++) {
        svc_layout_tag(l, sku, b, t);
        if (strcmp(t, tag) == 0)
            return true;
    }
    return false;
}

/* The buckets' part of a reset (old: the layout read, l: the new one):
 * the old layout's buckets that the new one does not keep are emptied, so
 * an instance that has not heard of this reset sells nothing there; the
 * new ones get their share. Inside the reset's transaction (own false), or
 * each bucket a transaction of its own (a cluster: a bucket is a slot).
 * The commands each bucket queued into queued[]; returns the buckets. */
static int append_buckets(rq *q, const svc_req *r, const svc_layout *old, const svc_layout *l,
                          const char *id, bool own, int *queued)
{
    long long n = (long long)r->p.stock;
    char tag[SVC_TAG_MAX];
    int t = 0;
    for (int pass = 0; pass < 2; pass++) {
        const svc_layout *of = pass == 0 ? old : l;
        for (int b = 0; of->n > 1 && b < of->n; b++) {
            svc_layout_tag(of, r->sku, b, tag);
            if (pass == 0 && in_layout(l, r->sku, tag))
                continue;
            if (own)
                rq_cmd(q, tag, "MULTI", NULL, NULL);
            queued[t++] = append_reset(q, tag, pass == 0 ? 0 : svc_layout_share(n, l->n, b),
                                       pass == 0, id);
            if (own)
                rq_cmd(q, tag, "EXEC", NULL, NULL);
        }
    }
    return t;
}

/* A reset on a Redis Cluster whose replies stopped coming after some of
 * its buckets' transactions were sent (reset_exec's -2): those may have
 * run, on the masters that got them, while the layout record was not
 * written — the SKU is partly this reset's until a reset of it succeeds.
 * Says so in why (len bytes), after the cause. */
static void partly_written(char *why, size_t len)
{
    char cause[160];
    snprintf(cause, sizeof cause, "%.150s", why);
    snprintf(why, len,
             "%s; the reset may be partly written (on a Redis Cluster each bucket is a "
             "transaction of its own): until a reset of this SKU succeeds some buckets may hold "
             "this one's stock, and limited purchases answer stock_reset; send it again",
             cause);
}

/* A cluster: every bucket's transaction (append_buckets), then the layout
 * record WATCHed and read again on the SKU's master (a bucket's EXEC on
 * the same master ended put_job's WATCH), so the SKU's own transaction,
 * next on that connection, runs only if no other reset wrote the record
 * since old was read. A reset that changed the record meanwhile may have
 * had its buckets overwritten by these: this reset then goes again, whole,
 * and the last one to write the record wrote every bucket after the
 * other's. 1 to go on, 0 when the record changed (go again), -1 with the
 * reason in why, -2 when the replies stopped coming (some buckets may be
 * written). */
static int reset_buckets_apart(rq *q, const svc_req *r, const svc_layout *old, const svc_layout *l,
                               const char *id, char *why, size_t len)
{
    char lkey[SVC_KEY_MAX];
    svc_key(lkey, r->sku, "layout");
    int queued[2 * SVC_BUCKETS_MAX], nt = append_buckets(q, r, old, l, id, true, queued), total = 2;
    if (nt == 0)
        return 1; /* no bucket: put_job's WATCH stands, nothing went between */
    for (int t = 0; t < nt; t++)
        total += 2 + queued[t];
    rq_cmd(q, r->sku, "WATCH", lkey, NULL);
    rq_cmd(q, r->sku, "GET", lkey, NULL);
    redisReply **reps = calloc((size_t)total, sizeof *reps);
    if (rq_read(q, reps, total, why, len) != 0) {
        free(reps);
        return -2;
    }
    int rc = 1;
    for (int t = 0, at = 0; t < nt; t++) {
        at += 1 + queued[t];
        const redisReply *exec = reps[at++];
        if (rc == 1 && exec->type == REDIS_REPLY_NIL) {
            rc = 0; /* a bucket on the SKU's master: put_job's WATCH saw the
                       record change (another reset): go again */
        } else if (rc == 1 &&
                   !(exec->type == REDIS_REPLY_ARRAY && exec->elements == (size_t)queued[t])) {
            snprintf(why, len, "a bucket's transaction was refused: %.200s",
                     exec->type == REDIS_REPLY_ERROR ? exec->str : "unexpected reply");
            rc = -1;
        }
    }
    svc_layout now;
    char e[200];
    if (layout_of(reps[total - 1], r->sku, &now, e, sizeof e) != 0)
        now.n = 1; /* not ours: as put_job took it */
    if (rc != -1 && !same_layout(&now, old))
        rc = 0;
    free_replies(reps, total);
    return rc;
}

/* The reset's transaction, after the layout record was read (old: the
 * layout it read; one Redis: WATCHed): 1 done, 0 when the record changed
 * meanwhile (EXEC refused: go again), -1 with the reason in why; on a
 * cluster -2 when replies stopped coming after bucket transactions were
 * sent (partly_written). */
static int reset_exec(rq *q, const svc_req *r, const svc_layout *old, const svc_layout *l,
                      const char *id, const char *record, char *why, size_t len)
{
    long long n = (long long)r->p.stock;
    char lkey[SVC_KEY_MAX];
    svc_key(lkey, r->sku, "layout");
    int queued = 0;
    if (q->ctx == NULL) {
        int rc = reset_buckets_apart(q, r, old, l, id, why, len);
        if (rc <= 0)
            return rc;
        rq_cmd(q, r->sku, "MULTI", NULL, NULL);
    } else {
        int each[2 * SVC_BUCKETS_MAX];
        rq_cmd(q, r->sku, "MULTI", NULL, NULL);
        int nt = append_buckets(q, r, old, l, id, false, each);
        for (int t = 0; t < nt; t++)
            queued += each[t];
    }
    /* The SKU's own keys: its stock with one bucket; with several, stock 0
     * (an instance that still takes the SKU for unsplit finds it sold out)
     * and initial, so a starting instance never seeds it again. */
    sku_keys k;
    sku_keys_init(&k, r->sku);
    rq_cmd_ll(q, r->sku, "SET", k.stock, l->n > 1 ? 0 : n);
    rq_cmd_ll(q, r->sku, "SET", k.initial, n);
    rq_cmd(q, r->sku, "SET", k.sold, "0");
    const char *del[3 + LC_MODE_COUNT] = {"DEL", k.orders, k.buyers, k.fence_hwm};
    int ndel = 4;
    for (int i = 0; i < k.nlocks; i++)
        del[ndel++] = k.locks[i];
    rq_argv(q, r->sku, ndel, del);
    rq_cmd(q, r->sku, "INCR", k.epoch, NULL);
    if (l->n > 1)
        rq_cmd(q, r->sku, "SET", lkey, record);
    else
        rq_cmd(q, r->sku, "DEL", lkey, NULL);
    /* Every instance's local sold-out flag and bucket layout of this SKU
     * clear on it (svc_soldout.h); the message names the new layout. On a
     * cluster it reaches the subscribers of every node. */
    char msg[SVC_SKU_MAX + 1 + SVC_LAYOUT_MAX];
    snprintf(msg, sizeof msg, "%s %s", r->sku, record);
    rq_cmd(q, r->sku, "PUBLISH", SVC_SOLDOUT_CHANNEL, l->n > 1 ? msg : r->sku);
    rq_cmd(q, r->sku, "EXEC", NULL, NULL);
    queued += 7;
    int total = queued + 2;
    redisReply **reps = calloc((size_t)total, sizeof *reps);
    if (rq_read(q, reps, total, why, len) != 0) {
        free(reps);
        return q->ctx == NULL ? -2 : -1; /* a cluster: the buckets' transactions ran */
    }
    const redisReply *exec = reps[total - 1];
    int rc = exec->type == REDIS_REPLY_NIL ? 0 : 1;
    if (rc == 1 && !(exec->type == REDIS_REPLY_ARRAY && exec->elements == (size_t)queued)) {
        snprintf(why, len, "transaction aborted");
        rc = -1;
    }
    free_replies(reps, total);
    return rc;
}

/* The placement's view of a Redis Cluster (svc_layout_place's owner): the
 * master serving a slot in the health probe's slot map (kept fresh without
 * purchases, read without a round trip), numbered in the order first met. */
typedef struct owners {
    lc_client *client;
    int n;
    char addr[SVC_BUCKETS_MAX][LC_ADDR_LEN];
} owners;

static int owner_of(void *arg, int slot)
{
    owners *o = arg;
    char addr[LC_ADDR_LEN];
    if (lc_cluster_slot_master(o->client, slot, addr, sizeof addr) != 0)
        return -1;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->addr[i], addr) == 0)
            return i;
    if (o->n == SVC_BUCKETS_MAX)
        return -1;
    snprintf(o->addr[o->n], sizeof o->addr[o->n], "%s", addr);
    return o->n++;
}

/* Resets of one SKU take turns: each holds the SKU's reset lock,
 * miaosha:{sku}:lock:reset, a reentrant lock in watchdog mode (Redisson's
 * lock() without a lease: renewed while the reset runs, however long
 * Redis makes it; lapsing lock.watchdog_timeout_ms after an instance that
 * died holding it), owned by the reset's id. On one Redis a reset is one
 * transaction anyway, but on a Redis Cluster it is one transaction per
 * bucket, and two resets interleaving there would leave buckets of the
 * one under the layout record of the other; and without turns concurrent
 * resets go again on each other's WATCH until one gives up. A reset waits
 * for its turn up to RESET_WAIT_MAX_MS, or lock.max_wait_ms when that is
 * shorter, then answers 429 lock_busy: it waits on one of the admin pool's
 * few workers, which the audits and order lists share, and a turn held
 * longer than that is one whose instance died (its lock lapses with the
 * watchdog's timeout), not a reset still running. */
#define RESET_WAIT_MAX_MS 5000

/* The reset's turn (take_turn above): 0 with *g held, or -1 once r is
 * answered (429 lock_busy, 503 shutting_down, or 503 redis_unavailable
 * when the lock could not be reached). */
static int take_turn(svc_req *r, lc_conn *conn, const char *id, lc_guard **g)
{
    char key[SVC_KEY_MAX], why[SVC_KEY_MAX + 400];
    svc_key(key, r->sku, "lock:reset");
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = LC_REENTRANT;
    a.key = key;
    a.owner = id;
    a.lease_ms = 0; /* the watchdog's */
    a.wait_ms = r->s->lock.max_wait_ms < RESET_WAIT_MAX_MS ? r->s->lock.max_wait_ms
                                                           : RESET_WAIT_MAX_MS;
    a.cancel = svc_cancel_flag();
    lc_status st = lc_acquire(conn, &a, g);
    if (st == LC_OK)
        return 0;
    if (st == LC_BUSY) {
        snprintf(why, sizeof why,
                 "another reset of sku %s held its turn (%s) for the whole wait of %lld ms; "
                 "nothing was written",
                 r->sku, key, (long long)a.wait_ms);
        svc_reply_error(r, 429, "lock_busy", why, NULL);
    } else if (st == LC_CANCELED) {
        svc_reply_error(r, 503, "shutting_down", "server shutting down; nothing was written", NULL);
    } else {
        snprintf(why, sizeof why, "the reset's turn (%s): %s: %.200s; nothing was written", key,
                 lc_status_name(st), lc_conn_errstr(conn));
        redis_fail(r, why);
    }
    return -1;
}

/* Ends the reset's turn. A release that fails leaves the lock to lapse
 * with its watchdog (this instance stops renewing it): logged, the reset
 * itself is done or answered. */
static void end_turn(const svc_req *r, lc_conn *conn, lc_guard *g)
{
    lc_status st = lc_release(conn, g);
    if (st != LC_OK)
        svc_log(SVC_WARN, "stock reset of sku %s: its turn's lock was not released (%s: %s)",
                r->sku, lc_status_name(st), lc_conn_errstr(conn));
}

void svc_stock_put_job(svc_req *r, lc_conn *conn)
{
    char why[512], lkey[SVC_KEY_MAX], record[SVC_LAYOUT_MAX] = "";
    long long n = (long long)r->p.stock;
    int nb = r->p.buckets > 1 ? (int)r->p.buckets : 1;
    if (conn == NULL) {
        redis_fail(r, "no Redis connection");
        return;
    }
    svc_key(lkey, r->sku, "layout");
    svc_layout l;
    owners *own = NULL;
    if (r->s->redis.cluster_nodes[0] != '\0' && svc_health_client() != NULL &&
        (own = calloc(1, sizeof *own)) != NULL)
        own->client = svc_health_client(); /* on a Redis Cluster: spread over its masters */
    svc_layout_place(r->sku, nb, own != NULL ? owner_of : NULL, own, &l);
    free(own);
    /* The reset's id: every bucket it writes keeps it as its epoch, and
     * with buckets the layout record names it. */
    char id[SVC_UUID_LEN];
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, id);
    if (nb > 1) {
        snprintf(l.id, sizeof l.id, "%s", id);
        SVC_ASSERT(svc_layout_format(&l, record, sizeof record) == 0);
    }
    lc_guard *turn = NULL;
    if (take_turn(r, conn, id, &turn) != 0)
        return;
    /* A client that gave up while the reset waited must not have it run
     * later, unseen, over the sales made since. */
    if (svc_client_gone(r)) {
        end_turn(r, conn, turn);
        svc_reply_error(r, 499, "client_gone",
                        "client closed its connection while the reset waited for its turn; "
                        "nothing was written",
                        NULL);
        return;
    }
    rq q;
    if (rq_open(&q, r, conn, false) != 0) {
        end_turn(r, conn, turn);
        return;
    }
    /* The old layout, WATCHed (on a cluster again once the buckets are
     * reset: reset_buckets_apart): a reset that changes it meanwhile makes
     * this one read it again. Resets take turns (take_turn), so that is
     * only one whose turn lapsed, or another program's. */
    /* A cluster reset cut short after bucket transactions went out (a
     * master paused or unreachable) goes again, whole, while its turn
     * allows: it writes the same shares and the same id, so running twice
     * is running once, and a master back within RESET_WAIT_MAX_MS leaves
     * the SKU wholly reset instead of partly. */
    int rc = 0;
    bool partly = false;
    int64_t again_until = lc_now_ms() + RESET_WAIT_MAX_MS;
    for (int tries = 0; (rc == 0 && tries < 5) || (rc < 0 && partly); tries++) {
        if (partly && rc < 0 &&
            (lc_now_ms() >= again_until || svc_client_gone(r) || svc_sleep_work(200) != 0))
            break;
        redisReply *reps[2];
        svc_layout old;
        rq_cmd(&q, r->sku, "WATCH", lkey, NULL);
        rq_cmd(&q, r->sku, "GET", lkey, NULL);
        if (rq_read(&q, reps, 2, why, sizeof why) != 0) {
            rc = -1;
            if (!partly)
                break;
            continue;
        }
        if (layout_of(reps[1], r->sku, &old, why, sizeof why) != 0) {
            /* not ours: reset over it, as for a SKU never split */
            svc_log(SVC_WARN, "stock reset: %s; replaced", why);
            old.n = 1;
        }
        freeReplyObject(reps[0]);
        freeReplyObject(reps[1]);
        rc = reset_exec(&q, r, &old, &l, id, record, why, sizeof why);
        partly |= rc == -2;
    }
    if (rc < 0 && partly)
        partly_written(why, sizeof why);
    if (rc == 1) {
        /* this instance at once, still in its turn (a reset after it on
         * this instance learns its own layout later); the others by the
         * message */
        svc_soldout_clear(r->sku);
        svc_bucket_learn(r->sku, &l);
    }
    end_turn(r, conn, turn);
    if (rc <= 0) {
        redis_fail(r, rc == 0 ? "the layout kept changing under concurrent resets" : why);
        return;
    }
    svc_gauges_seen(r->sku);
    if (nb > 1)
        svc_log(SVC_INFO, "stock reset: sku %s stock %lld in %d buckets", r->sku, n, nb);
    else
        svc_log(SVC_INFO, "stock reset: sku %s stock %lld", r->sku, n);
    stock_nums t = {n, n, 0, 0};
    cJSON *o = audit_json(r->sku, t, 0, 0, 0);
    if (nb > 1 && o != NULL) {
        cJSON *arr = cJSON_AddArrayToObject(o, "buckets");
        for (int b = 0; arr != NULL && b < nb; b++) {
            cJSON *e = cJSON_CreateObject();
            long long share = svc_layout_share(n, nb, b);
            svc_json_add_int(e, "stock", share);
            svc_json_add_int(e, "initial", share);
            svc_json_add_int(e, "sold", 0);
            svc_json_add_int(e, "orders", 0);
            if (e == NULL || !cJSON_AddItemToArray(arr, e))
                cJSON_Delete(e);
        }
    }
    svc_reply_json(r, 200, o);
}

/* The records of one LRANGE reply into arr, each as parsed JSON (with
 * "bucket" when b >= 0); anything else is passed on as a string rather
 * than dropped. */
static void add_records(cJSON *arr, const redisReply *rep, int b)
{
    if (rep->type != REDIS_REPLY_ARRAY)
        return;
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_STRING)
            continue;
        cJSON *rec = svc_params_json(e->str, NULL);
        if (rec != NULL && b >= 0 && cJSON_IsObject(rec))
            svc_json_add_int(rec, "bucket", b);
        (void)svc_json_add_item(arr, NULL, rec ? rec : cJSON_CreateString(e->str));
    }
}

static void orders_reply(svc_req *r, long long total, cJSON *arr)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL && arr != NULL) {
        cJSON_AddBoolToObject(o, "ok", 1);
        cJSON_AddStringToObject(o, "sku", r->sku);
        svc_json_add_int(o, "total", total);
        svc_json_add_int(o, "offset", (long long)r->p.offset);
        svc_json_add_int(o, "limit", (long long)r->p.limit);
        if (!svc_json_add_item(o, "orders", arr)) { /* freed: no list is not an empty one */
            cJSON_Delete(o);
            o = NULL;
        }
        arr = NULL;
    }
    cJSON_Delete(arr);
    svc_reply_json(r, 200, o);
}

void svc_orders_job(svc_req *r, lc_conn *conn)
{
    char why[256], lkey[SVC_KEY_MAX], tag[SVC_TAG_MAX];
    long long off = (long long)r->p.offset, lim = (long long)r->p.limit;
    rq q;
    if (rq_open(&q, r, conn, true) != 0)
        return;
    svc_key(lkey, r->sku, "layout");
    svc_layout l, now;
    guess_layout(r->sku, &l);
    for (int tries = 0;; tries++) {
        /* One bucket: its length and its page at once. Several: every
         * bucket's length, then the pages the window covers. The last
         * reply: whether the SKU's own stock key exists. */
        int n = (l.n == 1 ? 3 : 1 + l.n) + 1;
        redisReply *reps[2 + SVC_BUCKETS_MAX];
        char own_stock[SVC_KEY_MAX];
        svc_key(own_stock, r->sku, "stock");
        rq_cmd(&q, r->sku, "GET", lkey, NULL);
        for (int b = 0; b < l.n; b++) {
            sku_keys k;
            svc_layout_tag(&l, r->sku, b, tag);
            sku_keys_init(&k, tag);
            rq_cmd(&q, tag, "LLEN", k.orders, NULL);
            if (l.n == 1)
                rq_lrange(&q, tag, k.orders, off, off + lim - 1);
        }
        rq_cmd(&q, r->sku, "EXISTS", own_stock, NULL);
        int rc = rq_read(&q, reps, n, why, sizeof why);
        if (rc != 0) {
            read_fail(r, rc, why);
            return;
        }
        int bad = layout_of(reps[0], r->sku, &now, why, sizeof why);
        if (bad || !same_layout(&now, &l)) {
            for (int i = 0; i < n; i++)
                freeReplyObject(reps[i]);
            if (bad) {
                read_fail(r, -2, why);
                return;
            }
            if (tries == 3) { /* the pages of an old layout would be a wrong list */
                redis_fail(r, "the layout kept changing under concurrent resets");
                return;
            }
            l = now;
            continue;
        }
        /* No stock key and no buckets: never stocked (a split SKU is). */
        if (l.n == 1 && as_int(reps[n - 1]) == 0) {
            for (int i = 0; i < n; i++)
                freeReplyObject(reps[i]);
            unknown_sku(r);
            return;
        }
        cJSON *arr = cJSON_CreateArray();
        if (l.n == 1) {
            long long total = as_int(reps[1]);
            if (arr != NULL)
                add_records(arr, reps[2], -1);
            for (int i = 0; i < n; i++)
                freeReplyObject(reps[i]);
            orders_reply(r, total, arr);
            return;
        }
        long long total = 0, len[SVC_BUCKETS_MAX], from[SVC_BUCKETS_MAX];
        int pages = 0, which[SVC_BUCKETS_MAX];
        for (int b = 0; b < l.n; b++) {
            len[b] = as_int(reps[1 + b]);
            total += len[b];
        }
        for (int i = 0; i < n; i++)
            freeReplyObject(reps[i]);
        /* The window [off, off + lim) over the buckets' lists one after
         * the other. */
        long long skip = off, want = lim;
        for (int b = 0; b < l.n && want > 0; b++) {
            if (skip >= len[b]) {
                skip -= len[b];
                continue;
            }
            from[b] = skip;
            long long take = len[b] - skip < want ? len[b] - skip : want;
            svc_layout_tag(&l, r->sku, b, tag);
            sku_keys k;
            sku_keys_init(&k, tag);
            rq_lrange(&q, tag, k.orders, from[b], from[b] + take - 1);
            which[pages++] = b;
            want -= take;
            skip = 0;
        }
        rc = pages > 0 ? rq_read(&q, reps, pages, why, sizeof why) : 0;
        if (rc != 0) {
            cJSON_Delete(arr);
            read_fail(r, rc, why);
            return;
        }
        for (int i = 0; i < pages; i++) {
            if (arr != NULL)
                add_records(arr, reps[i], which[i]);
            freeReplyObject(reps[i]);
        }
        orders_reply(r, total, arr);
        return;
    }
}

int svc_stock_seed(lc_conn *conn, const char *sku, long long initial, char *err, size_t errlen)
{
    sku_keys k;
    lc_pipe p;
    lc_pipe_init(&p);
    sku_keys_init(&k, sku);
    /* Seeds only a SKU that has neither stock nor initial, atomically, so
     * instances starting together (or a restart) never reset a sale. */
    (void)lc_pipe_append(
        &p, "EVAL %s 3 %s %s %s %lld",
        "if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then "
        "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); "
        "redis.call('SET', KEYS[3], 0); return 1 end return 0",
        k.stock, k.initial, k.sold, initial);
    (void)lc_conn_pipe(conn, &p);
    redisReply *rep = lc_pipe_take(&p, 0);
    lc_pipe_clear(&p);
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        const char *e = lc_conn_errstr(conn);
        snprintf(err, errlen, "%s", rep ? rep->str : strncmp(e, "redis: ", 7) == 0 ? e + 7 : e);
        freeReplyObject(rep);
        return -1;
    }
    int seeded = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    freeReplyObject(rep);
    snprintf(err, errlen, "%s", seeded ? "seeded" : "already stocked");
    return 0;
}

/* PUT body: {"stock":N}, {"buckets":K} or both, each given once, in the
 * body or the query (svc_routes.h). */
int svc_stock_parse_body(const char *body, size_t len, unsigned in_query, int64_t *stock,
                         int64_t *buckets, char *detail, size_t dlen)
{
    const char *end = NULL;
    cJSON *doc;
    int stock_in_query = (in_query & SVC_P_STOCK) != 0;
    if (body == NULL || len == 0) {
        if (stock_in_query) {
            *buckets = 0;
            return 0;
        }
        snprintf(detail, dlen, "stock: required (JSON body {\"stock\":N} or ?stock=N)");
        return -1;
    }
    if (memchr(body, '\0', len) != NULL) {
        snprintf(detail, dlen, "body: NUL byte in JSON");
        return -1;
    }
    doc = svc_params_json(body, &end);
    if (doc == NULL || !cJSON_IsObject(doc)) {
        snprintf(detail, dlen, "body: must be a JSON object {\"stock\":N}");
        cJSON_Delete(doc);
        return -1;
    }
    int found = 0, found_b = 0, rc = 0;
    int64_t v = 0, k = 0;
    for (cJSON *it = doc->child; it != NULL && rc == 0; it = it->next) {
        int is_b = it->string != NULL && strcmp(it->string, "buckets") == 0;
        const char *name = is_b ? "buckets" : "stock";
        if (it->string == NULL || (strcmp(it->string, "stock") != 0 && !is_b)) {
            snprintf(detail, dlen, "body: unknown field '%.40s'", it->string ? it->string : "");
            rc = -1;
        } else if (in_query & (is_b ? SVC_P_BUCKETS : SVC_P_STOCK)) {
            /* One rule, whatever the two values: as a purchase's body. */
            snprintf(detail, dlen, "%s: give it in the query or the body, not both", name);
            rc = -1;
        } else if (is_b ? found_b++ : found++) {
            snprintf(detail, dlen, "body: duplicate field '%s'", name);
            rc = -1;
        } else if (is_b) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 1 ||
                it->valuedouble > (double)SVC_BUCKETS_MAX ||
                it->valuedouble != (double)(long long)it->valuedouble) {
                snprintf(detail, dlen, "buckets: must be an integer in 1..%d", SVC_BUCKETS_MAX);
                rc = -1;
            } else {
                k = (int64_t)it->valuedouble;
            }
        } else if (!cJSON_IsNumber(it) || it->valuedouble < 0 ||
                   it->valuedouble > (double)SVC_STOCK_MAX ||
                   it->valuedouble != (double)(long long)it->valuedouble) {
            snprintf(detail, dlen, "stock: must be an integer in 0..%lld",
                     (long long)SVC_STOCK_MAX);
            rc = -1;
        } else {
            v = (int64_t)it->valuedouble;
        }
    }
    if (rc == 0 && !found && !stock_in_query) {
        snprintf(detail, dlen, "stock: required (JSON body {\"stock\":N} or ?stock=N)");
        rc = -1;
    }
    if (rc == 0) {
        if (found)
            *stock = v;
        *buckets = found_b ? k : 0;
    }
    cJSON_Delete(doc);
    return rc;
}
