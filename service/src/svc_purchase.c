/* svc_purchase.c — POST|GET /miaosha/{mode}.
 *
 * Every mode runs this same code; only lc_lock_args.mode differs, so a
 * comparison between modes varies the lock and nothing else. The critical
 * section is the seed's (shared/seeds/002), non-atomic on purpose:
 *
 *   GET stock  →  if > 0: sleep work_ms  →  one pipelined round trip
 *   MULTI; SET stock <read-1>; INCR sold; RPUSH orders <record>; EXEC
 *   →  release  →  respond
 *
 * The GET→SET race is the bug the locks exist to fix, and it stays. The
 * MULTI only makes the three writes one unit, so a purchase can never be cut
 * between "stock decremented" and "order recorded" (a process or Redis
 * failure leaves all three writes or none; issue 5's "interrupted between
 * SET stock and the order append" cannot happen). A 200 is sent only after
 * EXEC succeeded, so every acknowledged order id is in the order list; a 503
 * after the pipeline was sent carries the order id and "outcome unknown".
 */
#include "svc_routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uuid/uuid.h>

#include "svc_stats.h"

typedef struct purchase {
    svc_req *r;
    const svc_settings *s;
    int slot;
    int64_t wait_us;          /* -1 until the outer lock is held */
    int64_t lock_wait_ms;
    int lock_lost;
    int64_t busy_wait_ms;     /* >= 0: echo wait_ms in a 429 */
    long long stock_left;
    int has_stock_left;
    char order_id[SVC_UUID_LEN];
    char detail[LC_ERRSTR_LEN + 64];
} purchase;

static void crash_before_expire(void *arg)
{
    svc_log(SVC_ERROR, "fault crash_before_expire: exiting between SETNX and PEXPIRE; "
                       "lock %s is left without a TTL", (const char *)arg);
    _exit(3);
}

/* Builds the one reply of a purchase and records its outcome. */
static void respond(purchase *pu, unsigned status, const char *error, svc_outcome out)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", status == 200);
        if (error != NULL) {
            cJSON_AddStringToObject(o, "error", error);
            if (pu->detail[0])
                cJSON_AddStringToObject(o, "detail", pu->detail);
        }
        cJSON_AddStringToObject(o, "mode", lc_mode_name(pu->r->mode));
        cJSON_AddStringToObject(o, "sku", pu->r->sku);
        if (pu->order_id[0])
            cJSON_AddStringToObject(o, "order_id", pu->order_id);
        if (pu->has_stock_left)
            cJSON_AddNumberToObject(o, "stock_left", (double)pu->stock_left);
        if (pu->wait_us >= 0) {
            cJSON_AddNumberToObject(o, "lock_wait_ms", (double)pu->lock_wait_ms);
            cJSON_AddBoolToObject(o, "lock_lost", pu->lock_lost);
        }
        if (pu->busy_wait_ms >= 0)
            cJSON_AddNumberToObject(o, "wait_ms", (double)pu->busy_wait_ms);
        cJSON_AddStringToObject(o, "instance", pu->s->instance_id);
    }
    svc_reply_json(pu->r, status, o);
    svc_stats_purchase(pu->r->mode, pu->slot, out, pu->lock_lost,
                       svc_now_us() - pu->r->t0_us, pu->wait_us);
}

/* Releases held[n-1..0]; sets lock_lost when a release says the lock had
 * already gone (token lease ran out, watchdog found it lost). */
static void release_all(purchase *pu, lc_conn *conn, lc_guard **held, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        if (lc_guard_lost(held[i]))
            pu->lock_lost = 1;
        lc_status st = lc_release(conn, held[i]);
        if (st == LC_NOT_OWNER || st == LC_LOST) {
            pu->lock_lost = 1;
        } else if (st == LC_IO) {
            svc_stats_redis_error();
            svc_log(SVC_WARN, "release %s lock for sku %s failed (%s); its lease will free it",
                    lc_mode_name(pu->r->mode), pu->r->sku, lc_conn_errstr(conn));
        }
    }
    if (pu->lock_lost)
        svc_log(SVC_WARN, "%s lock for sku %s was lost while held", lc_mode_name(pu->r->mode),
                pu->r->sku);
}

/* Reads one reply of the pipeline; 0 when it is neither missing nor an
 * error reply. Copies the reason to pu->detail otherwise. */
static int pipe_reply(purchase *pu, redisContext *ctx, redisReply **out)
{
    void *rep = NULL;
    *out = NULL;
    if (redisGetReply(ctx, &rep) != REDIS_OK || rep == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "%s", ctx->errstr[0] ? ctx->errstr : "no reply");
        return -1;
    }
    *out = rep;
    if ((*out)->type == REDIS_REPLY_ERROR) {
        snprintf(pu->detail, sizeof pu->detail, "%.*s", (int)(*out)->len, (*out)->str);
        return -1;
    }
    return 0;
}

/* The order record, JSON. */
static char *order_record(purchase *pu, long long before)
{
    svc_req *r = pu->r;
    cJSON *o = cJSON_CreateObject();
    char *txt;
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "order_id", pu->order_id);
    cJSON_AddStringToObject(o, "sku", r->sku);
    if (r->p.seen & SVC_P_USER)
        cJSON_AddStringToObject(o, "user", r->p.user);
    else
        cJSON_AddNullToObject(o, "user");
    cJSON_AddStringToObject(o, "mode", lc_mode_name(r->mode));
    cJSON_AddStringToObject(o, "instance", pu->s->instance_id);
    cJSON_AddNumberToObject(o, "ts_ms", (double)svc_wall_ms());
    cJSON_AddNumberToObject(o, "lock_wait_ms", (double)pu->lock_wait_ms);
    cJSON_AddNumberToObject(o, "stock_before", (double)before);
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

/* GET stock and, when there is some, sleep work_ms and commit. Returns the
 * outcome; sets *status and *error (NULL on success). */
static svc_outcome section(purchase *pu, lc_conn *conn, int64_t work_ms, unsigned *status,
                           const char **error)
{
    svc_req *r = pu->r;
    char stock_key[SVC_KEY_MAX], sold_key[SVC_KEY_MAX], orders_key[SVC_KEY_MAX];
    redisContext *ctx = lc_conn_redis(conn);
    redisReply *rep;
    long long before = 0;

    *status = 503;
    *error = "redis_unavailable";
    if (ctx == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "%s", lc_conn_errstr(conn));
        return SVC_OUT_ERROR;
    }
    svc_key(stock_key, r->sku, "stock");
    svc_key(sold_key, r->sku, "sold");
    svc_key(orders_key, r->sku, "orders");

    rep = redisCommand(ctx, "GET %s", stock_key);
    if (rep == NULL) {
        snprintf(pu->detail, sizeof pu->detail, "%s", ctx->errstr);
        return SVC_OUT_ERROR;
    }
    if (rep->type == REDIS_REPLY_STRING) {
        char *end = NULL;
        before = strtoll(rep->str, &end, 10);
        if (end == rep->str || *end != '\0') {
            snprintf(pu->detail, sizeof pu->detail, "stock key holds a non-integer value");
            freeReplyObject(rep);
            *error = "bad_stock_value";
            return SVC_OUT_ERROR;
        }
    } else if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(pu->detail, sizeof pu->detail, "%s", rep->str);
        freeReplyObject(rep);
        return SVC_OUT_ERROR;
    } /* nil: never stocked, 0 */
    freeReplyObject(rep);

    if (before <= 0) {
        pu->stock_left = before < 0 ? before : 0;
        pu->has_stock_left = 1;
        *status = 409;
        *error = "sold_out";
        return SVC_OUT_SOLD_OUT;
    }

    if (work_ms > 0 && svc_sleep_work(work_ms) != 0) {
        snprintf(pu->detail, sizeof pu->detail, "server shutting down; nothing was written");
        *error = "shutting_down";
        return SVC_OUT_ERROR;
    }

    uuid_t u;
    uuid_generate_random(u);
    uuid_unparse_lower(u, pu->order_id);
    char *rec = order_record(pu, before);
    if (rec == NULL) {
        pu->order_id[0] = '\0';
        snprintf(pu->detail, sizeof pu->detail, "out of memory; nothing was written");
        *error = "out_of_memory";
        return SVC_OUT_ERROR;
    }
    /* One round trip: the transaction's replies are +OK, +QUEUED x3, then
     * EXEC's array. */
    redisAppendCommand(ctx, "MULTI");
    redisAppendCommand(ctx, "SET %s %lld", stock_key, before - 1);
    redisAppendCommand(ctx, "INCR %s", sold_key);
    redisAppendCommand(ctx, "RPUSH %s %b", orders_key, rec, strlen(rec));
    redisAppendCommand(ctx, "EXEC");
    free(rec);
    int ok = 1;
    for (int i = 0; i < 5; i++) {
        if (pipe_reply(pu, ctx, &rep) != 0) {
            ok = 0;
            if (rep == NULL) /* connection broken: the rest will not come */
                break;
        }
        if (i == 4 && rep != NULL && ok) {
            if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3) {
                snprintf(pu->detail, sizeof pu->detail, "transaction aborted");
                ok = 0;
            } else {
                for (size_t k = 0; k < 3; k++)
                    if (rep->element[k]->type == REDIS_REPLY_ERROR) {
                        snprintf(pu->detail, sizeof pu->detail, "%s", rep->element[k]->str);
                        ok = 0;
                    }
            }
        }
        freeReplyObject(rep);
    }
    if (!ok) {
        /* The order id goes back with the 503 so a client can reconcile. */
        char why[sizeof pu->detail];
        snprintf(why, sizeof why, "%s", pu->detail);
        snprintf(pu->detail, sizeof pu->detail, "commit outcome unknown: %.200s", why);
        return SVC_OUT_ERROR;
    }
    pu->stock_left = before - 1;
    pu->has_stock_left = 1;
    *status = 200;
    *error = NULL;
    return SVC_OUT_SOLD;
}

void svc_purchase_job(svc_req *r, lc_conn *conn)
{
    purchase pu;
    const svc_settings *s = svc_http_settings();
    const svc_params *p = &r->p;
    char lock_key[SVC_KEY_MAX], owner[SVC_UUID_LEN];
    lc_guard *held[1 + 64];
    int nheld = 0;
    uuid_t u;

    memset(&pu, 0, sizeof pu);
    pu.r = r;
    pu.s = s;
    pu.slot = svc_stats_sku_slot(r->sku);
    pu.wait_us = -1;
    pu.busy_wait_ms = -1;
    if (conn == NULL) {
        snprintf(pu.detail, sizeof pu.detail, "no Redis connection");
        svc_stats_redis_error();
        respond(&pu, 503, "redis_unavailable", SVC_OUT_ERROR);
        return;
    }
    if (svc_abort_work()) {
        snprintf(pu.detail, sizeof pu.detail, "server shutting down");
        respond(&pu, 503, "shutting_down", SVC_OUT_ERROR);
        return;
    }

    svc_key(lock_key, r->sku, "lock");
    uuid_generate_random(u);
    uuid_unparse_lower(u, owner);
    int64_t work_ms = (p->seen & SVC_P_WORK_MS) ? p->work_ms : s->work_ms;
    lc_lock_args a;
    memset(&a, 0, sizeof a);
    a.mode = r->mode;
    a.key = lock_key;
    a.owner = owner;
    if (p->seen & SVC_P_LEASE_MS)
        a.lease_ms = p->lease_ms;
    else
        a.lease_ms = r->mode == LC_REENTRANT ? 0 : s->lease_ms; /* 0 = watchdog */
    a.wait_ms = (p->seen & SVC_P_WAIT_MS) ? p->wait_ms : s->wait_ms;
    if (p->fault == SVC_FAULT_CRASH_BEFORE_EXPIRE) {
        a.after_setnx = crash_before_expire;
        a.after_setnx_arg = lock_key;
    }

    /* Outer acquisition, then the nested ones (reenter=N), same key and
     * owner, each with the request's wait_ms. */
    int64_t t = svc_now_us();
    lc_guard *g = NULL;
    lc_status st = lc_acquire(conn, &a, &g);
    if (st == LC_OK) {
        pu.wait_us = svc_now_us() - t;
        pu.lock_wait_ms = lc_guard_wait_ms(g);
        held[nheld++] = g;
        if (p->fault == SVC_FAULT_CRASH_IN_SECTION) {
            svc_log(SVC_ERROR, "fault crash_in_section: exiting while holding %s lock %s",
                    lc_mode_name(r->mode), lock_key);
            _exit(3);
        }
        a.after_setnx = NULL;
        for (int i = 0; i < p->reenter && st == LC_OK && nheld < (int)(sizeof held / sizeof held[0]); i++) {
            st = lc_acquire(conn, &a, &g);
            if (st == LC_OK)
                held[nheld++] = g;
            else if (st == LC_BUSY)
                snprintf(pu.detail, sizeof pu.detail,
                         "nested acquisition %d of %d not granted within %lld ms "
                         "(mode %s is not reentrant)", i + 1, p->reenter,
                         (long long)a.wait_ms, lc_mode_name(r->mode));
        }
    } else if (st == LC_BUSY) {
        snprintf(pu.detail, sizeof pu.detail, "lock not acquired within %lld ms",
                 (long long)a.wait_ms);
    }
    if (st != LC_OK) {
        svc_outcome out = SVC_OUT_ERROR;
        unsigned status = 503;
        const char *error = "redis_unavailable";
        if (st == LC_BUSY) {
            out = SVC_OUT_LOCK_BUSY;
            status = 429;
            error = "lock_busy";
            pu.busy_wait_ms = a.wait_ms;
        } else {
            snprintf(pu.detail, sizeof pu.detail, "lock %s: %s", lc_status_name(st),
                     lc_conn_errstr(conn));
            if (st == LC_IO)
                svc_stats_redis_error();
            else
                error = "lock_error"; /* misuse/nomem: still never a 500 */
        }
        release_all(&pu, conn, held, nheld);
        respond(&pu, status, error, out);
        return;
    }

    unsigned status;
    const char *error;
    svc_outcome out = section(&pu, conn, work_ms, &status, &error);
    if (out == SVC_OUT_ERROR && strcmp(error, "redis_unavailable") == 0)
        svc_stats_redis_error();
    release_all(&pu, conn, held, nheld);
    respond(&pu, status, error, out);
}
