/* svc_stock.c — stock administration and the audit:
 *   PUT /stock/{sku}    set stock and initial, zero sold, clear orders,
 *                       the lock keys and the fenced mode's high-water
 *                       mark, bump the epoch (voiding purchases in
 *                       flight): one MULTI/EXEC round trip
 *   GET /stock/{sku}    the audit: stock, initial, sold, orders and
 *                       oversold = max(0, sold - (initial - stock))
 *                       undersold = max(0, (initial - stock) - sold)
 *   GET /orders/{sku}   the order records, offset/limit (limit <= 1000)
 * A SKU without a stock key was never stocked: both GETs answer 404
 * unknown_sku, as its purchases do.
 */
#include "svc_routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_gauges.h"
#include "svc_keys.h"
#include "svc_soldout.h"
#include "svc_stats.h"

static void redis_fail(svc_req *r, const char *why)
{
    svc_stats_redis_error();
    svc_reply_error(r, 503, "redis_unavailable", why, NULL);
}

/* The job's Redis connection; NULL after answering 503 when there is none. */
static redisContext *job_redis(svc_req *r, lc_conn *conn)
{
    redisContext *ctx = conn ? lc_conn_redis(conn) : NULL;
    if (ctx == NULL)
        redis_fail(r, conn ? lc_conn_errstr(conn) : "no Redis connection");
    return ctx;
}

/* A SKU's keys, all under its {sku} hash tag (svc_key); the lock keys of
 * the modes that keep one in Redis (svc_lock_key); the fenced mode's
 * high-water mark (svc_fence.c). Its fence counter, miaosha:{sku}:fence,
 * is not here on purpose: a reset keeps it. A holder from before the reset
 * may still be running with its token, and fencing works only while every
 * later grant draws a larger number than every earlier one; a counter
 * reset to 0 would hand out numbers below that holder's, and below the
 * mark, so new buyers would be fenced out and a stale one let in. The
 * mark can go (a stale read's write is voided by the epoch anyway, and
 * the next read sets it again): it describes reads of the old stock. */
typedef struct sku_keys {
    char stock[SVC_KEY_MAX], initial[SVC_KEY_MAX], sold[SVC_KEY_MAX], orders[SVC_KEY_MAX];
    char epoch[SVC_KEY_MAX], fence_hwm[SVC_KEY_MAX], buyers[SVC_KEY_MAX];
    /* the lock key of every mode whose lock lives in this Redis */
    char locks[LC_MODE_COUNT][SVC_KEY_MAX];
    int nlocks;
} sku_keys;

static void sku_keys_init(sku_keys *k, const char *sku)
{
    svc_key(k->stock, sku, "stock");
    svc_key(k->initial, sku, "initial");
    svc_key(k->sold, sku, "sold");
    svc_key(k->orders, sku, "orders");
    svc_key(k->epoch, sku, "epoch");
    svc_key(k->fence_hwm, sku, "fence_hwm");
    svc_key(k->buyers, sku, "buyers");
    k->nlocks = 0;
    for (int m = 0; m < LC_MODE_COUNT; m++)
        if (lc_mode_info_of((lc_mode)m)->lock_in_redis)
            svc_lock_key(k->locks[k->nlocks++], sku, (lc_mode)m);
}

/* Reads n pipelined replies into reps (all of them, so the connection stays
 * in step even when one is an error). On failure frees what it read and
 * copies the reason into why. A broken connection leaves ctx->err set, and
 * the next call through lc_conn reconnects. */
static int read_replies(redisContext *ctx, redisReply **reps, int n, char *why, size_t len)
{
    int got = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        void *rep = NULL;
        if (redisGetReply(ctx, &rep) != REDIS_OK || rep == NULL) {
            snprintf(why, len, "%s", ctx->errstr[0] ? ctx->errstr : "no reply");
            bad = 1;
            break;
        }
        reps[got++] = rep;
        if (reps[i]->type == REDIS_REPLY_ERROR && !bad) {
            snprintf(why, len, "%s", reps[i]->str);
            bad = 1;
        }
    }
    if (!bad)
        return 0;
    for (int k = 0; k < got; k++)
        freeReplyObject(reps[k]);
    return -1;
}

/* 404 unknown_sku: r's SKU has no stock key. A purchase answers the same
 * (svc_section.c, purchase.lua): the stock key is what makes a SKU exist,
 * and only a reset (PUT /stock) or the start-up seed creates it. */
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

static cJSON *audit_json(const char *sku, long long stock, long long initial, long long sold,
                         long long orders, long long duplicate_buyers)
{
    long long taken = initial - stock;
    long long over = sold - taken, under = taken - sold;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddBoolToObject(o, "ok", 1);
    cJSON_AddStringToObject(o, "sku", sku);
    svc_json_add_int(o, "stock", (long long)stock);
    svc_json_add_int(o, "initial", (long long)initial);
    svc_json_add_int(o, "sold", (long long)sold);
    svc_json_add_int(o, "orders", (long long)orders);
    svc_json_add_int(o, "oversold", (long long)(over > 0 ? over : 0));
    svc_json_add_int(o, "undersold", (long long)(under > 0 ? under : 0));
    svc_json_add_int(o, "duplicate_buyers", duplicate_buyers);
    return o;
}

void svc_stock_get_job(svc_req *r, lc_conn *conn)
{
    char why[256];
    redisReply *reps[5];
    sku_keys k;
    redisContext *ctx = job_redis(r, conn);
    if (ctx == NULL)
        return;
    sku_keys_init(&k, r->sku);
    redisAppendCommand(ctx, "GET %s", k.stock);
    redisAppendCommand(ctx, "GET %s", k.initial);
    redisAppendCommand(ctx, "GET %s", k.sold);
    redisAppendCommand(ctx, "LLEN %s", k.orders);
    redisAppendCommand(ctx, "HVALS %s", k.buyers);
    if (read_replies(ctx, reps, 5, why, sizeof why) != 0) {
        redis_fail(r, why);
        return;
    }
    /* No stock key: a SKU that was never stocked, not one with zeros. */
    if (reps[0]->type == REDIS_REPLY_NIL) {
        for (int i = 0; i < 5; i++)
            freeReplyObject(reps[i]);
        unknown_sku(r);
        return;
    }
    /* Users holding more orders than purchase.limit_per_user; with no
     * limit (0), users holding more than one. */
    long long dup = 0,
              allowed = r->s->purchase.limit_per_user > 0 ? r->s->purchase.limit_per_user : 1;
    if (reps[4]->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < reps[4]->elements; i++)
            if (as_int(reps[4]->element[i]) > allowed)
                dup++;
    cJSON *o = audit_json(r->sku, as_int(reps[0]), as_int(reps[1]), as_int(reps[2]),
                          as_int(reps[3]), dup);
    for (int i = 0; i < 5; i++)
        freeReplyObject(reps[i]);
    svc_reply_json(r, 200, o);
}

void svc_stock_put_job(svc_req *r, lc_conn *conn)
{
    char why[256];
    redisReply *reps[8];
    long long n = (long long)r->p.stock;
    sku_keys k;
    redisContext *ctx = job_redis(r, conn);
    if (ctx == NULL)
        return;
    sku_keys_init(&k, r->sku);
    redisAppendCommand(ctx, "MULTI");
    redisAppendCommand(ctx, "SET %s %lld", k.stock, n);
    redisAppendCommand(ctx, "SET %s %lld", k.initial, n);
    redisAppendCommand(ctx, "SET %s 0", k.sold);
    const char *del[3 + LC_MODE_COUNT] = {"DEL", k.orders, k.buyers, k.fence_hwm};
    int ndel = 4;
    for (int i = 0; i < k.nlocks; i++)
        del[ndel++] = k.locks[i];
    redisAppendCommandArgv(ctx, ndel, del, NULL);
    /* Voids the commit of every purchase that read the old stock (they
     * WATCH this key): see svc_store.c. */
    redisAppendCommand(ctx, "INCR %s", k.epoch);
    /* Every instance's local sold-out flag of this SKU clears on it
     * (svc_soldout.h). */
    redisAppendCommand(ctx, "PUBLISH %s %s", SVC_SOLDOUT_CHANNEL, r->sku);
    redisAppendCommand(ctx, "EXEC");
    if (read_replies(ctx, reps, 8, why, sizeof why) != 0) {
        redis_fail(r, why);
        return;
    }
    int ok = reps[7]->type == REDIS_REPLY_ARRAY && reps[7]->elements == 6;
    for (int i = 0; i < 8; i++)
        freeReplyObject(reps[i]);
    if (!ok) {
        redis_fail(r, "transaction aborted");
        return;
    }
    svc_soldout_clear(r->sku); /* this instance at once; the others by the message */
    svc_gauges_seen(r->sku);
    svc_log(SVC_INFO, "stock reset: sku %s stock %lld", r->sku, n);
    svc_reply_json(r, 200, audit_json(r->sku, n, n, 0, 0, 0));
}

void svc_orders_job(svc_req *r, lc_conn *conn)
{
    char why[256];
    redisReply *reps[3];
    long long off = (long long)r->p.offset, lim = (long long)r->p.limit;
    sku_keys k;
    redisContext *ctx = job_redis(r, conn);
    if (ctx == NULL)
        return;
    sku_keys_init(&k, r->sku);
    redisAppendCommand(ctx, "LLEN %s", k.orders);
    redisAppendCommand(ctx, "LRANGE %s %lld %lld", k.orders, off, off + lim - 1);
    redisAppendCommand(ctx, "EXISTS %s", k.stock); /* same round trip */
    if (read_replies(ctx, reps, 3, why, sizeof why) != 0) {
        redis_fail(r, why);
        return;
    }
    int stocked = as_int(reps[2]) > 0;
    freeReplyObject(reps[2]);
    if (!stocked) {
        freeReplyObject(reps[0]);
        freeReplyObject(reps[1]);
        unknown_sku(r);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_CreateArray();
    if (o != NULL && arr != NULL) {
        cJSON_AddBoolToObject(o, "ok", 1);
        cJSON_AddStringToObject(o, "sku", r->sku);
        svc_json_add_int(o, "total", (long long)as_int(reps[0]));
        svc_json_add_int(o, "offset", (long long)off);
        svc_json_add_int(o, "limit", (long long)lim);
        if (reps[1]->type == REDIS_REPLY_ARRAY) {
            for (size_t i = 0; i < reps[1]->elements; i++) {
                const redisReply *e = reps[1]->element[i];
                if (e->type != REDIS_REPLY_STRING)
                    continue;
                /* Records are stored as JSON; anything else is passed on as
                 * a string rather than dropped. */
                cJSON *rec = svc_params_json(e->str, NULL);
                cJSON_AddItemToArray(arr, rec ? rec : cJSON_CreateString(e->str));
            }
        }
        cJSON_AddItemToObject(o, "orders", arr);
        arr = NULL;
    }
    cJSON_Delete(arr);
    freeReplyObject(reps[0]);
    freeReplyObject(reps[1]);
    svc_reply_json(r, 200, o);
}

int svc_stock_seed(lc_conn *conn, const char *sku, long long initial, char *err, size_t errlen)
{
    sku_keys k;
    redisContext *ctx = lc_conn_redis(conn);
    if (ctx == NULL) {
        snprintf(err, errlen, "%s", lc_conn_errstr(conn));
        return -1;
    }
    sku_keys_init(&k, sku);
    /* Seeds only a SKU that has neither stock nor initial, atomically, so
     * instances starting together (or a restart) never reset a sale. */
    redisReply *rep = redisCommand(
        ctx, "EVAL %s 3 %s %s %s %lld",
        "if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then "
        "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); "
        "redis.call('SET', KEYS[3], 0); return 1 end return 0",
        k.stock, k.initial, k.sold, initial);
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s", rep ? rep->str : ctx->errstr);
        freeReplyObject(rep);
        return -1;
    }
    int seeded = rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    freeReplyObject(rep);
    snprintf(err, errlen, "%s", seeded ? "seeded" : "already stocked");
    return 0;
}

/* PUT body: {"stock":N} and nothing else. */
int svc_stock_parse_body(const char *body, size_t len, int64_t *stock, char *detail, size_t dlen)
{
    const char *end = NULL;
    cJSON *doc;
    if (body == NULL || len == 0) {
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
    int found = 0, rc = 0;
    int64_t v = 0;
    for (cJSON *it = doc->child; it != NULL && rc == 0; it = it->next) {
        if (it->string == NULL || strcmp(it->string, "stock") != 0) {
            snprintf(detail, dlen, "body: unknown field '%.40s'", it->string ? it->string : "");
            rc = -1;
        } else if (found++) {
            snprintf(detail, dlen, "body: duplicate field 'stock'");
            rc = -1;
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
    if (rc == 0 && !found) {
        snprintf(detail, dlen, "stock: required (JSON body {\"stock\":N} or ?stock=N)");
        rc = -1;
    }
    if (rc == 0)
        *stock = v;
    cJSON_Delete(doc);
    return rc;
}
