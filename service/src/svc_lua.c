/* svc_lua.c — POST|GET /miaosha/lua: "the best lock is no lock".
 *
 * A stock counter needs no lock: one Lua script (scripts/purchase.lua)
 * checks the stock and, when there is some, decrements it, increments sold
 * and appends the order record, all in one atomic step and one round trip.
 * Nothing can run between its read and its writes, so it cannot oversell
 * under any load, on any number of instances, and a PUT /stock reset
 * cannot interleave with it (the epoch WATCH of the lock modes has nothing
 * to guard here).
 *
 *   sleep work_ms  →  EVALSHA purchase.lua (NOSCRIPT: EVAL)  →  respond
 *
 * work_ms is spent before the script: there is no critical section to
 * widen, and the script's atomicity is the whole point. The request, its
 * parameters, the statuses, the reply's JSON and the order record are the
 * lock modes' (svc_order.h); lease_ms, wait_ms (except for the queue
 * bound), reenter and pipeline are accepted and have nothing to act on: the
 * reply says lock_wait_ms 0, lock_lost false, pipeline true (one round trip
 * is all there is). fault=crash_in_section exits the process before the
 * script, where a lock mode would hold its lock: nothing is written and
 * nothing is left behind.
 *
 * Purchases queued behind one another go to Redis together (svc_lua_batch,
 * a batch of the worker pool, svc_pool.h): each one's checks, order id and
 * record as alone, then every script in one write and every reply in one
 * read. The scripts stay separate atomic steps, run in queue order, so a
 * batch changes what the round trips cost, not what any buyer gets: under
 * a burst the purchases that would each have woken a worker and made a
 * round trip share them.
 *
 * A SKU split into stock buckets (svc_bucket.h) runs the same script on one
 * bucket's keys: a random bucket not known to be empty first, the next one
 * not known empty while the script answers sold out (each probe one more
 * round trip), and the SKU is sold out only when every bucket is. One buy
 * per user is then checked before the script, by the reservation in the
 * user's home bucket (the script gets no limit); the sale writes the
 * Idempotency-Key's outcome into the bucket's copy of the key and the
 * purchase copies it to the SKU's (svc_idem.h). In a batch, a purchase's
 * first script rides in the batch and its probes follow alone.
 *
 * The script's text and SHA1 are compiled in (service/CMakeLists.txt), so
 * the first call needs no SCRIPT LOAD; after SCRIPT FLUSH or a Redis restart
 * the EVALSHA answers NOSCRIPT and the same script goes again as EVAL,
 * which caches it for the next purchase.
 */
#include "svc_routes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "svc_bucket.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_gauges.h"
#include "svc_idem.h"
#include "svc_keys.h"
#include "svc_order.h"
#include "svc_outcome.h"
#include "svc_pool.h"
#include "svc_replicas.h"
#include "svc_scripts.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"
#include "svc_trace.h"

typedef struct lua_purchase {
    svc_req *r;
    svc_order o;          /* its order_id is set once the script carrying it is sent */
    svc_idem id;          /* the request's Idempotency-Key, when it has one */
    char *sold_head;      /* with a key: the sale's reply up to its stock_left */
    char *sold_tail;      /* ... and after it (points into sold_head's block) */
    int found_replay;     /* the script found the key done: the reply is in r */
    uint64_t soldout_gen; /* the local sold-out flag's generation before the script */
    lc_conn *conn;
    svc_trace tr; /* this purchase's timeline: no lock, so read and write are
                     the script's one step (GET /trace/{sku}) */
    /* The SKU's stock buckets (lay.n 1: its own keys, one try). */
    svc_layout lay;
    uint64_t lay_gen;       /* what this purchase learns holds for it */
    uint64_t tried;         /* the buckets tried, a bit each */
    int probes;             /* tries that found their bucket sold out */
    bool gone;              /* a try found its bucket without a stock key */
    char tag[SVC_TAG_MAX];  /* the stock the script runs on */
    char oid[SVC_UUID_LEN]; /* the order id, for every try */
    svc_reservation rv;     /* one buy per user with buckets */
} lua_purchase;

static bool bucketed(const lua_purchase *lp)
{
    return lp->lay.n > 1;
}

/* The sale's reply as the script completes it: head, stock left, tail. */
static char *sold_text(const lua_purchase *lp)
{
    size_t h = strlen(lp->sold_head), t = strlen(lp->sold_tail);
    char *txt = malloc(h + t + 24);
    if (txt != NULL)
        snprintf(txt, h + t + 24, "%s%lld%s", lp->sold_head, lp->o.stock_left, lp->sold_tail);
    return txt;
}

static void respond(lua_purchase *lp, purchase_result res)
{
    SVC_ASSERT(res >= 0 && res < PR_COUNT);
    svc_req *r = lp->r;
    unsigned status = svc_result[res].status;
    if (svc_result[res].redis_error)
        svc_stats_redis_error();
    bool sale = res == PR_SOLD || res == PR_NOT_REPLICATED;
    if (sale && lp->id.on && bucketed(lp) && lp->sold_head != NULL) {
        /* Written by the script under the bucket's tag; the replays read
         * the SKU's key (svc_idem.h). */
        char *stored = sold_text(lp);
        if (stored != NULL)
            svc_idem_end(&lp->id, r, lp->conn, 1, 200, stored, strlen(stored));
        free(stored);
    }
    char *txt = res == PR_SOLD && lp->sold_head != NULL ? sold_text(lp)
                                                        : svc_order_reply(&lp->o, res);
    free(lp->sold_head);
    lp->sold_head = lp->sold_tail = NULL;
    if (res == PR_SOLD_OUT && r->s->purchase.local_sold_out)
        svc_soldout_mark(r->sku, lp->soldout_gen);
    if (svc_result_found_sku(res))
        svc_gauges_seen(r->sku);
    if (sale)
        lp->id.on = 0; /* its outcome was written by the script */
    if (lp->id.on)
        svc_idem_end(&lp->id, r, lp->conn,
                     res != PR_SOLD && svc_idem_stored_outcome(res) && txt != NULL, status, txt,
                     txt ? strlen(txt) : 0);
    svc_reply_text(r, status, txt, txt ? strlen(txt) : 0, NULL);
    svc_trace_end(&lp->tr, lp->o.order_id, status, svc_result[res].error, 0, 0);
    if (bucketed(lp))
        svc_bucket_count(r->sku, lp->lay.n, lp->o.bucket, res == PR_SOLD, lp->probes, 0);
    svc_stats_purchase(r->mode, svc_result_slot(res, r->sku), svc_result[res].out, 0, 0,
                       lc_now_us() - r->t0_us, -1);
}

/* With an Idempotency-Key: the sale's reply split around its stock_left,
 * which only the script knows (a placeholder is printed, then cut out).
 * 0, or -1 when out of memory. */
static int split_sold_reply(lua_purchase *lp)
{
    static const char field[] = "\"stock_left\":";
    lp->o.stock_left = LLONG_MIN;
    lp->o.has_stock_left = true;
    char *txt = svc_order_reply(&lp->o, PR_SOLD);
    lp->o.has_stock_left = false;
    if (txt == NULL)
        return -1;
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", LLONG_MIN);
    char *at = strstr(txt, field);
    SVC_ASSERT(at != NULL && strncmp(at + strlen(field), digits, strlen(digits)) == 0);
    at += strlen(field);
    *at = '\0';
    lp->sold_head = txt;
    lp->sold_tail = at + strlen(digits);
    return 0;
}

/* Appends one call of the script to pipe: EVALSHA, or EVAL with its text
 * (eval). 0, or -1 when out of memory (nothing appended). */
static int append_script(const lua_purchase *lp, lc_pipe *pipe, const char *rec, int eval)
{
    char stock_key[SVC_KEY_MAX], sold_key[SVC_KEY_MAX], orders_key[SVC_KEY_MAX];
    char buyers_key[SVC_KEY_MAX], epoch_key[SVC_KEY_MAX], idem_key[SVC_IDEM_RKEY_MAX], limit[24],
        ttl[24];
    const svc_req *r = lp->r;
    svc_key(stock_key, lp->tag, "stock");
    svc_key(sold_key, lp->tag, "sold");
    svc_key(orders_key, lp->tag, "orders");
    svc_key(buyers_key, lp->tag, "buyers");
    svc_key(epoch_key, lp->tag, "epoch");
    /* A reservation (one buy per user, buckets) was counted under one
     * reset: the script sells only where the stock is that reset's. */
    const bool check = lp->rv.held;
    if (lp->id.on)
        svc_idem_key(idem_key, lp->tag, r->idem); /* the SKU's, or the bucket's copy */
    /* With buckets the user's reservation has counted them already. */
    snprintf(limit, sizeof limit, "%lld",
             bucketed(lp) ? 0LL : (long long)r->s->purchase.limit_per_user);
    snprintf(ttl, sizeof ttl, "%lld", (long long)svc_idem_ttl_ms(r->s));
    char *done_head = NULL;
    if (lp->id.on) {
        char prefix[SVC_IDEM_FP_MAX + 16];
        svc_idem_done_prefix(&lp->id, 200, prefix, sizeof prefix);
        size_t n = strlen(prefix) + strlen(lp->sold_head) + 1;
        if ((done_head = malloc(n)) == NULL)
            return -1;
        snprintf(done_head, n, "%s%s", prefix, lp->sold_head);
    }
    /* The script's KEYS and ARGV (scripts/purchase.lua): without a key
     * and without a check, KEYS[5] and ARGV[4..7] are left out; a check
     * without a key passes stand-ins for them. */
    const bool keyed = lp->id.on;
    const char *args[20];
    int argc = 0;
    args[argc++] = eval ? "EVAL" : "EVALSHA";
    args[argc++] = eval ? SVC_SCRIPT_PURCHASE : SVC_SCRIPT_PURCHASE_SHA;
    args[argc++] = check ? "6" : keyed ? "5" : "4";
    args[argc++] = stock_key;
    args[argc++] = sold_key;
    args[argc++] = orders_key;
    args[argc++] = buyers_key;
    if (keyed || check)
        args[argc++] = keyed ? idem_key : epoch_key;
    if (check)
        args[argc++] = epoch_key;
    args[argc++] = rec;
    args[argc++] = (r->p.seen & SVC_P_USER) ? r->p.user : "";
    args[argc++] = limit;
    if (keyed || check) {
        args[argc++] = keyed ? lp->id.marker : "";
        args[argc++] = keyed ? done_head : "";
        args[argc++] = keyed ? lp->sold_tail : "";
        args[argc++] = keyed ? ttl : "";
    }
    if (check)
        args[argc++] = lp->rv.epoch;
    int rc = lc_pipe_append_argv(pipe, argc, args, NULL) == LC_OK ? 0 : -1;
    free(done_head);
    return rc;
}

/* Why a sent script has no reply, into detail. */
static void no_reply(lua_purchase *lp, lc_conn *conn)
{
    snprintf(lp->o.detail, sizeof lp->o.detail, "%.200s",
             lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
}

/* One call of the script (see append_script). The reply (caller frees), or
 * NULL with the reason in detail; *sent is 0 when the command could not
 * even be built (out of memory: nothing went to Redis). */
static redisReply *call_script(lua_purchase *lp, lc_conn *conn, const char *rec, int eval,
                               int *sent)
{
    lc_pipe p;
    lc_pipe_init(&p);
    *sent = append_script(lp, &p, rec, eval) == 0;
    if (*sent)
        (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
    redisReply *rep = *sent ? lc_pipe_take(&p, 0) : NULL;
    lc_pipe_clear(&p);
    if (rep == NULL && !*sent)
        snprintf(lp->o.detail, sizeof lp->o.detail, "out of memory; nothing was written");
    else if (rep == NULL)
        no_reply(lp, conn);
    return rep;
}

static int is_noscript(const redisReply *rep)
{
    return rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

/* Maps the script's reply (NULL: none came; detail says why) and frees it. */
static purchase_result map_reply(lua_purchase *lp, redisReply *rep)
{
    if (rep == NULL) {
        /* The script may have run: the order id goes back with the 503 so
         * a client can look for it in GET /orders. */
        char why[sizeof lp->o.detail];
        memcpy(why, lp->o.detail, sizeof why);
        snprintf(lp->o.detail, sizeof lp->o.detail, "purchase outcome unknown: %.200s", why);
        return PR_REDIS_UNAVAILABLE;
    }
    purchase_result res = PR_REDIS_ERROR;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(lp->o.detail, sizeof lp->o.detail, "purchase script: %.200s; nothing was written",
                 rep->str);
    } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
               rep->element[0]->type == REDIS_REPLY_INTEGER &&
               rep->element[1]->type == REDIS_REPLY_INTEGER) {
        long long code = rep->element[0]->integer, n = rep->element[1]->integer;
        if (code == 1) {
            lp->o.stock_left = n;
            lp->o.has_stock_left = true;
            /* the script read n + 1 and wrote n, in one step */
            svc_trace_step(&lp->tr, n + 1, n);
            res = PR_SOLD;
        } else if (code == 0) {
            lp->o.stock_left = n < 0 ? n : 0;
            lp->o.has_stock_left = true;
            svc_trace_read(&lp->tr, n);
            res = PR_SOLD_OUT;
        } else if (code == 2) {
            snprintf(lp->o.detail, sizeof lp->o.detail,
                     "user %s already holds %lld order(s) of this sku (purchase.limit_per_user "
                     "= %lld); nothing was written",
                     lp->r->p.user, n, (long long)lp->r->s->purchase.limit_per_user);
            res = PR_LIMIT_REACHED;
        } else if (code == 5) {
            snprintf(lp->o.detail, sizeof lp->o.detail, "%s", SVC_BUCKET_RESET_RESERVED);
            res = PR_STOCK_RESET;
        } else if (code == 4) {
            snprintf(lp->o.detail, sizeof lp->o.detail,
                     "sku %s was never stocked (PUT /stock/%s creates it); nothing was written",
                     lp->r->sku, lp->r->sku);
            res = PR_UNKNOWN_SKU;
        } else if (code == -1) {
            snprintf(lp->o.detail, sizeof lp->o.detail, "stock key holds a non-integer value");
            res = PR_BAD_STOCK_VALUE;
        } else {
            snprintf(lp->o.detail, sizeof lp->o.detail,
                     "sold, orders or buyers key holds the wrong kind of value; nothing was "
                     "written");
        }
    } else if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
               rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[0]->integer == 3 &&
               rep->element[1]->type == REDIS_REPLY_STRING) {
        /* The key is not ours any more (our marker expired and another
         * request took it, or that one finished): its answer, not a sale. */
        int rc = svc_idem_found(&lp->id, lp->r, rep->element[1]->str, rep->element[1]->len, &res,
                                lp->o.detail, sizeof lp->o.detail);
        lp->found_replay = rc == 1;
        lp->id.on = 0; /* not ours to end */
    } else {
        snprintf(lp->o.detail, sizeof lp->o.detail, "purchase script: unexpected reply type %d",
                 rep->type);
    }
    freeReplyObject(rep);
    if (res != PR_SOLD)
        lp->o.order_id[0] = '\0'; /* nothing was written: no such order */
    return res;
}

/* Runs the script and maps its reply: EVALSHA first, or straight EVAL with
 * eval (when this connection just learnt that Redis lacks the script). */
static purchase_result run_script(lua_purchase *lp, lc_conn *conn, const char *rec, int eval)
{
    int sent;
    redisReply *rep = call_script(lp, conn, rec, eval, &sent);
    if (rep != NULL && !eval && is_noscript(rep)) {
        /* SCRIPT FLUSH or a restarted Redis: nothing ran, send the text */
        freeReplyObject(rep);
        rep = call_script(lp, conn, rec, 1, &sent);
    }
    if (rep == NULL && !sent) {
        lp->o.order_id[0] = '\0';
        return PR_OUT_OF_MEMORY;
    }
    return map_reply(lp, rep);
}

/* Aims the next try at bucket b (lay.n 1: the SKU's own keys, b 0). A
 * later try starts from what the first was given: the order id, no stock
 * left known, no reason, and (with a key) the sale's reply naming b. 0, or
 * -1 when out of memory for that reply. */
static int aim(lua_purchase *lp, int b)
{
    svc_layout_tag(&lp->lay, lp->r->sku, b, lp->tag);
    bool later = lp->tried != 0;
    lp->tried |= (uint64_t)1 << b;
    if (!bucketed(lp))
        return 0;
    lp->o.bucket = b;
    svc_trace_bucket(&lp->tr, b, lp->probes);
    if (!later)
        return 0;
    memcpy(lp->o.order_id, lp->oid, sizeof lp->oid);
    lp->o.has_stock_left = false;
    lp->o.detail[0] = '\0';
    if (lp->sold_head == NULL)
        return 0;
    free(lp->sold_head);
    lp->sold_head = lp->sold_tail = NULL;
    return split_sold_reply(lp);
}

/* The bucket the next try runs on: the start (after < 0) or the next one
 * after `after` not known empty nor tried; when none is left, the layout
 * record read again (svc_bucket.h). The bucket, or -1 with the ending in
 * *end and its reason in detail. */
static int pick_bucket(lua_purchase *lp, lc_conn *conn, int after, purchase_result *end)
{
    const char *sku = lp->r->sku;
    uint64_t skip = svc_bucket_empty(sku, lp->lay_gen) | lp->tried;
    int b = svc_bucket_next(lp->lay.n, skip, after, svc_bucket_rand());
    if (b >= 0)
        return b;
    svc_bucket_count_recheck();
    int rc = svc_bucket_search_end(conn, sku, &lp->lay, &lp->lay_gen, lp->gone, lp->o.detail,
                                   sizeof lp->o.detail);
    lp->o.order_id[0] = '\0';
    lp->o.has_stock_left = rc == 0;
    lp->o.stock_left = 0;
    *end = svc_result_of_search(rc);
    return -1;
}

/* One buy per user with buckets: the reservation goes back unless an
 * order may exist (sold, or an outcome unknown that named the order). */
static void settle_reservation(lua_purchase *lp, lc_conn *conn)
{
    if (lp->rv.held && lp->o.order_id[0] == '\0')
        svc_bucket_unreserve(conn, lp->r->sku, &lp->lay, lp->r->p.user, &lp->rv);
}

/* The SKU's layout (svc_bucket_layout: cached, or one round trip): 0, or
 * -1 when r is answered. */
static int lua_layout(lua_purchase *lp, lc_conn *conn)
{
    int rc = svc_bucket_layout(conn, lp->r->sku, &lp->lay, &lp->lay_gen, lp->o.detail,
                               sizeof lp->o.detail);
    if (rc == 0)
        return 0;
    respond(lp, rc == -1 ? PR_REDIS_UNAVAILABLE : PR_REDIS_ERROR);
    return -1;
}

/* With buckets the user's reservation (one buy per user) and the first
 * bucket: 0 to go on (lp aimed), -1 when r is answered. */
static int lua_buckets(lua_purchase *lp, lc_conn *conn)
{
    const svc_req *r = lp->r;
    int rc, b = 0;
    if (bucketed(lp)) {
        long long limit = (long long)r->s->purchase.limit_per_user;
        if (limit > 0 && (r->p.seen & SVC_P_USER)) {
            long long held = 0;
            rc = svc_bucket_reserve(conn, r->sku, &lp->lay, r->p.user, limit, &lp->rv, &held,
                                    lp->o.detail, sizeof lp->o.detail);
            if (rc != 1) {
                respond(lp, rc == 0   ? PR_LIMIT_REACHED
                            : rc == 2 ? PR_STOCK_RESET
                                      : PR_REDIS_UNAVAILABLE);
                return -1;
            }
        }
        purchase_result end;
        b = pick_bucket(lp, conn, -1, &end);
        if (b < 0) {
            settle_reservation(lp, conn);
            respond(lp, end);
            return -1;
        }
    }
    (void)aim(lp, b); /* the first try: nothing to rebuild */
    return 0;
}

/* After a try whose bucket was sold out: the next bucket, while one is
 * left, each its own round trip. A bucket whose stock key is gone (the
 * script's unknown SKU) was deleted by a reset that changed the bucket
 * count: nothing to sell there, never a 404 for a SKU in buckets, and
 * never sold out while the layout record still names it (a reset under
 * way: stock_reset, as in svc_tries.c). Returns the last try's outcome,
 * or how the search ended. */
static purchase_result other_buckets(lua_purchase *lp, lc_conn *conn, const char *rec,
                                     purchase_result res)
{
    while ((res == PR_SOLD_OUT || res == PR_UNKNOWN_SKU) && bucketed(lp)) {
        int last = lp->o.bucket;
        /* a gone bucket is not remembered: the next buyer must find it
         * gone too, not take the SKU for sold out */
        if (res == PR_UNKNOWN_SKU)
            lp->gone = true;
        else
            svc_bucket_mark_empty(lp->r->sku, lp->lay_gen, last);
        lp->probes++;
        int b = pick_bucket(lp, conn, last, &res);
        if (b < 0)
            break;
        if (aim(lp, b) != 0) {
            lp->o.order_id[0] = '\0';
            snprintf(lp->o.detail, sizeof lp->o.detail, "out of memory; nothing was written");
            return PR_OUT_OF_MEMORY;
        }
        res = run_script(lp, conn, rec, 0);
    }
    return res;
}

/* A SKU of its own keys whose script found it sold out: a reset into
 * buckets this instance has not heard of yet reads the same (the SKU's own
 * stock stays 0), so the layout record is read again
 * (svc_bucket_unsplit_reset) and such a reset answers 409 stock_reset.
 * memo (NULL: none) holds what a batch has read again already: one read
 * after the batch's scripts ran covers every purchase of that SKU whose
 * script ran in the batch (not one sent again after NOSCRIPT, later).
 * Returns res or PR_STOCK_RESET. */
typedef struct unsplit_memo {
    int n;
    const char *sku[SVC_POOL_BATCH_MAX];
    bool reset[SVC_POOL_BATCH_MAX];
} unsplit_memo;

static purchase_result unsplit_end(lua_purchase *lp, lc_conn *conn, purchase_result res,
                                   unsplit_memo *memo)
{
    if (res != PR_SOLD_OUT || bucketed(lp))
        return res;
    const char *sku = lp->r->sku;
    int i = 0;
    while (memo != NULL && i < memo->n && strcmp(memo->sku[i], sku) != 0)
        i++;
    bool reset;
    if (memo != NULL && i < memo->n) {
        reset = memo->reset[i];
    } else {
        reset = svc_bucket_unsplit_reset(conn, sku, &lp->lay, &lp->lay_gen);
        if (memo != NULL && memo->n < SVC_POOL_BATCH_MAX) {
            memo->sku[memo->n] = sku;
            memo->reset[memo->n++] = reset;
        }
    }
    if (!reset)
        return res;
    lp->o.order_id[0] = '\0';
    lp->o.has_stock_left = false;
    snprintf(lp->o.detail, sizeof lp->o.detail, "%s", SVC_BUCKET_RESET_UNLEARNT);
    return PR_STOCK_RESET;
}

/* The first steps of every lua purchase: lp set up, its record started,
 * the worker's connection and the queue bound checked. 0 to go on; -1 when
 * r is answered. */
static int lua_start(lua_purchase *lp, svc_req *r, lc_conn *conn, int64_t wait_ms, int64_t work_ms)
{
    memset(lp, 0, sizeof *lp);
    lp->r = r;
    lp->conn = conn;
    svc_order_init(&lp->o, r);
    /* the lock modes' fields, so every mode's reply has one shape: one
     * round trip is all there is, and no lock was waited for */
    lp->o.pipeline = true;
    lp->o.lock_fields = true;
    lp->soldout_gen = svc_soldout_gen(r->sku);
    svc_trace_begin(&lp->tr, r);
    if (conn == NULL) {
        snprintf(lp->o.detail, sizeof lp->o.detail, "no Redis connection");
        respond(lp, PR_REDIS_UNAVAILABLE);
        return -1;
    }
    purchase_result not_now;
    if (!svc_purchase_admit(r, wait_ms, work_ms, &not_now, lp->o.detail, sizeof lp->o.detail)) {
        respond(lp, not_now);
        return -1;
    }
    return 0;
}

/* The last steps before the script: the client still there (unless
 * gone_checked: the admission check has just looked, with nothing in
 * between), Redis reachable, the order id minted and the record's head
 * built (*rec, malloc'd). 0 to send the script; -1 when r is answered; -2 when r is
 * answered because Redis could not be reached. */
static int lua_ready(lua_purchase *lp, lc_conn *conn, char **rec, int gone_checked)
{
    *rec = NULL;
    if (!gone_checked && svc_client_gone(lp->r)) {
        snprintf(lp->o.detail, sizeof lp->o.detail,
                 "client closed its connection before the purchase; nothing was written");
        respond(lp, PR_CLIENT_GONE);
        return -1;
    }
    /* Connect first, so that "Redis unreachable" is told apart from "sent,
     * no answer" (outcome unknown); on a Redis Cluster to the master of
     * the stock the script runs on (the SKU's, or its bucket's). */
    char stock_key[SVC_KEY_MAX];
    svc_key(stock_key, lp->tag, "stock");
    if (lc_conn_redis_key(conn, stock_key) == NULL) {
        snprintf(lp->o.detail, sizeof lp->o.detail, "%s; nothing was written",
                 lc_conn_errstr(conn));
        respond(lp, PR_REDIS_UNAVAILABLE);
        return -2;
    }
    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, lp->o.order_id);
    memcpy(lp->oid, lp->o.order_id, sizeof lp->oid);
    *rec = svc_order_record(&lp->o, 0, true);
    if (*rec == NULL || (lp->id.on && split_sold_reply(lp) != 0)) {
        free(*rec);
        *rec = NULL;
        lp->o.order_id[0] = '\0';
        snprintf(lp->o.detail, sizeof lp->o.detail, "out of memory; nothing was written");
        respond(lp, PR_OUT_OF_MEMORY);
        return -1;
    }
    return 0;
}

static int64_t work_ms_of(const svc_req *r)
{
    return (r->p.seen & SVC_P_WORK_MS) ? r->p.work_ms : r->s->purchase.work_ms;
}

static int64_t wait_ms_of(const svc_req *r)
{
    return (r->p.seen & SVC_P_WAIT_MS) ? r->p.wait_ms : r->s->lock.wait_ms;
}

void svc_lua_job(svc_req *r, lc_conn *conn)
{
    lua_purchase lp;
    const cfg_config *s = r->s;
    int64_t work_ms = work_ms_of(r);
    if (lua_start(&lp, r, conn, wait_ms_of(r), work_ms) != 0)
        return;
    if (r->p.fault == SVC_FAULT_CRASH_IN_SECTION) {
        svc_log(SVC_ERROR,
                "fault crash_in_section: exiting before the lua purchase of sku %s; no lock "
                "to leave behind",
                r->sku);
        _exit(3);
    }
    if (lua_layout(&lp, conn) != 0)
        return;
    if (r->idem[0]) {
        /* Before work_ms: a replay while this one works is 409 in_progress.
         * The marker outlives work_ms and a few round trips. */
        int64_t marker_ms = work_ms + 8LL * s->redis.command_timeout_ms + 5000;
        purchase_result not_now;
        int rc = svc_idem_begin(&lp.id, r, conn, marker_ms, &lp.lay, &not_now, lp.o.detail,
                                sizeof lp.o.detail);
        if (rc == 1) {
            svc_idem_replayed(&lp.id, r, conn, &lp.tr, svc_stats_sku_slot(r->sku));
            return;
        }
        if (rc < 0) {
            respond(&lp, not_now);
            return;
        }
    }
    if (lua_buckets(&lp, conn) != 0)
        return;
    if (work_ms > 0 && svc_sleep_work(work_ms) != 0) {
        snprintf(lp.o.detail, sizeof lp.o.detail, "server shutting down; nothing was written");
        settle_reservation(&lp, conn);
        respond(&lp, PR_SHUTTING_DOWN);
        return;
    }
    char *rec;
    if (lua_ready(&lp, conn, &rec, 0) != 0) {
        settle_reservation(&lp, conn);
        return;
    }
    purchase_result res = other_buckets(&lp, conn, rec, run_script(&lp, conn, rec, 0));
    uint64_t via = lc_conn_via(conn); /* the sale's connection */
    free(rec);
    settle_reservation(&lp, conn);
    if (lp.found_replay) {
        free(lp.sold_head);
        svc_idem_replayed(&lp.id, r, conn, &lp.tr, svc_stats_sku_slot(r->sku));
        return;
    }
    res = unsplit_end(&lp, conn, res, NULL);
    if (res == PR_SOLD && svc_wait_replicas(s, conn, via, lp.o.detail, sizeof lp.o.detail) != 0)
        res = PR_NOT_REPLICATED; /* with the order id: written on the master */
    respond(&lp, res);
}

int svc_lua_batches(const svc_req *r)
{
    return svc_mode_lock(r->mode) == NULL && r->idem[0] == '\0' && work_ms_of(r) == 0 &&
           r->p.fault == SVC_FAULT_NONE;
}

/* With redis.wait_replicas on a Redis Cluster, a batch goes to one slot,
 * so to one master, and the WAIT after it to that master: the slot of r's
 * stock, when it is known before the batch — a SKU known to keep its own
 * keys (one bucket; their tag is {sku}). A SKU in stock buckets, or whose
 * layout is not known yet, draws its bucket, and so its slot, purchase by
 * purchase: -1, a batch of its own. */
static int batch_slot(const svc_req *r)
{
    svc_layout l;
    if (svc_bucket_known(r->sku, &l) && l.n == 1)
        return lc_key_slot(r->sku, strlen(r->sku));
    return -1;
}

static void batch_run(svc_req **rs, int n, lc_conn *conn);

void svc_lua_batch(svc_req **rs, int n, lc_conn *conn)
{
    SVC_ASSERT(n >= 1 && n <= SVC_POOL_BATCH_MAX && n <= LC_PIPE_MAX);
    /* Without WAIT the whole batch goes at once, on a cluster each script
     * to its own slot's master, every master's share in one write
     * (lc_conn_pipe_each): many SKUs, or one SKU's buckets, cost one round
     * trip per master, side by side. */
    if (n == 1 || rs[0]->s->redis.cluster_nodes[0] == '\0' || rs[0]->s->redis.wait_replicas == 0) {
        batch_run(rs, n, conn);
        return;
    }
    /* One batch per slot, each in queue order (the order between SKUs
     * changes nothing any buyer gets). */
    int slot[SVC_POOL_BATCH_MAX], done[SVC_POOL_BATCH_MAX] = {0};
    for (int i = 0; i < n; i++)
        slot[i] = batch_slot(rs[i]);
    for (int i = 0; i < n; i++) {
        if (done[i])
            continue;
        svc_req *sub[SVC_POOL_BATCH_MAX];
        int m = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && (j == i || (slot[i] >= 0 && slot[j] == slot[i]))) {
                done[j] = 1;
                sub[m++] = rs[j];
            }
        batch_run(sub, m, conn);
    }
}

/* The master lp's script goes to on a Redis Cluster, "host:port" into at
 * (LC_ADDR_LEN bytes), as conn's own map says — the map lc_conn_redis_key
 * has just routed (and, after a refused connection, refreshed) by: what a
 * batch's "could not be reached" covers. The health probe's map would
 * lag it after a failover, and one unreachable master would then refuse
 * purchases bound for another without trying. "" with one Redis, or when
 * no master is known for the slot. */
static void script_master(const lua_purchase *lp, lc_conn *conn, char *at)
{
    at[0] = '\0';
    if (lp->r->s->redis.cluster_nodes[0] == '\0')
        return;
    char stock_key[SVC_KEY_MAX];
    svc_key(stock_key, lp->tag, "stock");
    (void)lc_cluster_slot_master(lc_conn_client(conn), lc_key_slot(stock_key, strlen(stock_key)),
                                 at, LC_ADDR_LEN);
}

/* svc_lua_batch of n purchases: their scripts in one pipe to one Redis, or
 * on a cluster each to its slot's master (one slot's, with WAIT). */
static void batch_run(svc_req **rs, int n, lc_conn *conn)
{
    lua_purchase *lps = calloc((size_t)n, sizeof *lps);
    if (lps == NULL) {
        for (int i = 0; i < n; i++)
            svc_lua_job(rs[i], conn); /* one by one, as without batches */
        return;
    }
    char *recs[SVC_POOL_BATCH_MAX] = {0};
    int sent[SVC_POOL_BATCH_MAX] = {0}; /* 1 + the script's reply index, or 0 */
    int nsent = 0, sold = 0, reloaded = 0;
    /* Where Redis could not be reached, the rest do not try again: one
     * connect timeout for the batch, not one per purchase (the purchases
     * behind would each wait for all of them). With one Redis that is the
     * whole batch; on a cluster the purchases whose master it was. */
    const bool cluster = rs[0]->s->redis.cluster_nodes[0] != '\0';
    int ndown = 0;
    char down_at[SVC_POOL_BATCH_MAX][LC_ADDR_LEN];
    char down_why[SVC_POOL_BATCH_MAX][sizeof lps[0].o.detail];
    lc_pipe p;
    lc_pipe_init(&p);
    for (int i = 0; i < n; i++) {
        lua_purchase *lp = &lps[i];
        SVC_ASSERT(svc_lua_batches(rs[i]));
        if (lua_start(lp, rs[i], conn, wait_ms_of(rs[i]), 0) != 0)
            continue;
        if (!cluster && ndown > 0) {
            memcpy(lp->o.detail, down_why[0], sizeof down_why[0]);
            respond(lp, PR_REDIS_UNAVAILABLE);
            continue;
        }
        /* The layout (cached, unless this is the SKU's first purchase
         * here), and with buckets a reservation and the first bucket. */
        if (lua_layout(lp, conn) != 0 || lua_buckets(lp, conn) != 0)
            continue;
        char at[LC_ADDR_LEN];
        script_master(lp, conn, at);
        int d = 0;
        while (cluster && d < ndown && strcmp(down_at[d], at) != 0)
            d++;
        if (cluster && d < ndown) {
            memcpy(lp->o.detail, down_why[d], sizeof down_why[d]);
            settle_reservation(lp, conn);
            respond(lp, PR_REDIS_UNAVAILABLE);
            continue;
        }
        /* lua_start's admission check has just peeked at the client's
         * socket: nothing happens between it and the send (but the first
         * look at a SKU's layout, or a reservation, a round trip). */
        int rc = lua_ready(lp, conn, &recs[i], !bucketed(lp));
        if (rc != 0)
            settle_reservation(lp, conn);
        if (rc == -2) {
            script_master(lp, conn, at); /* the master tried last, by a map refreshed since */
            memcpy(down_at[ndown], at, sizeof at);
            memcpy(down_why[ndown], lp->o.detail, sizeof down_why[ndown]);
            ndown++; /* at most one per purchase: n <= SVC_POOL_BATCH_MAX */
        }
        if (rc != 0)
            continue;
        if (append_script(lp, &p, recs[i], 0) != 0) {
            free(recs[i]);
            recs[i] = NULL;
            lp->o.order_id[0] = '\0';
            snprintf(lp->o.detail, sizeof lp->o.detail, "out of memory; nothing was written");
            settle_reservation(lp, conn);
            respond(lp, PR_OUT_OF_MEMORY);
            continue;
        }
        sent[i] = ++nsent;
    }
    /* Every script in one write, every reply in one read: Redis runs them
     * one after another, each atomic, in queue order. */
    /* One WAIT covers the sales that went over one connection: the
     * batch's, or (a NOSCRIPT retry, a probe) the one that sold. Sales
     * over more than one — a batch over several masters, a redirect, a
     * reconnect — leave no WAIT that can count them all (split). */
    uint64_t via = 0, batch_via = 0;
    bool split = false;
    if (nsent > 0) {
        svc_stats_lua_batch(nsent);
        (void)lc_conn_pipe_each(conn, &p); /* a missing reply is seen below */
        batch_via = lc_conn_via(conn);
    }
    purchase_result res[SVC_POOL_BATCH_MAX];
    unsplit_memo memo = {0};
    for (int i = 0; i < n; i++) {
        if (!sent[i])
            continue;
        lua_purchase *lp = &lps[i];
        redisReply *rep = lc_pipe_take(&p, sent[i] - 1);
        uint64_t sale_via = batch_via;
        bool again = false; /* its script ran after the batch's (memo) */
        if (rep != NULL && is_noscript(rep)) {
            /* SCRIPT FLUSH or a restarted Redis: this script did not run
             * (those before it in the batch may have, had the flush come
             * between them). The first to get NOSCRIPT goes again as EVAL,
             * which caches the script for the rest, which go again as
             * EVALSHA, each in turn, so the batch's order is kept. (On a
             * cluster each master caches its own: the first EVALSHA to
             * another master that answers NOSCRIPT goes again as EVAL,
             * run_script's own fallback, one more round trip.) */
            freeReplyObject(rep);
            res[i] = run_script(lp, conn, recs[i], !reloaded);
            sale_via = lc_conn_via(conn);
            reloaded = 1;
            again = true;
        } else {
            if (rep == NULL)
                no_reply(lp, conn);
            res[i] = map_reply(lp, rep);
        }
        /* A bucket sold out: the probes go alone, before the WAIT (a sale
         * made by one is on the node the probe went to: on a cluster
         * perhaps another master than the batch's). */
        purchase_result in_batch = res[i];
        res[i] = other_buckets(lp, conn, recs[i], res[i]);
        if (in_batch != PR_SOLD && res[i] == PR_SOLD)
            sale_via = lc_conn_via(conn); /* the probe's connection */
        res[i] = unsplit_end(lp, conn, res[i], again ? NULL : &memo);
        if (res[i] == PR_SOLD) {
            split |= sale_via == 0 || (via != 0 && via != sale_via);
            via = sale_via;
        }
        settle_reservation(lp, conn);
        sold += res[i] == PR_SOLD;
    }
    lc_pipe_clear(&p);
    /* One WAIT covers every write before it on its connection: sent over
     * the sales' own (lockcore refuses when it broke or was remade since,
     * as after a missing reply). */
    char why[sizeof lps[0].o.detail];
    int replicated = 1;
    if (sold > 0 && rs[0]->s->redis.wait_replicas > 0) {
        /* up to redis.wait_timeout_ms: the queue wakes another worker */
        svc_pool_batch_waits();
        replicated = svc_wait_replicas(rs[0]->s, conn, split ? 0 : via, why, sizeof why) == 0;
    }
    for (int i = 0; i < n; i++) {
        if (!sent[i])
            continue;
        if (res[i] == PR_SOLD && !replicated) {
            memcpy(lps[i].o.detail, why, sizeof why);
            res[i] = PR_NOT_REPLICATED; /* with the order id: written on the master */
        }
        free(recs[i]);
        respond(&lps[i], res[i]);
    }
    free(lps);
}
