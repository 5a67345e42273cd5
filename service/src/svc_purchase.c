/* svc_purchase.c — POST|GET /miaosha/{mode} for the lock modes: what comes
 * before the critical section and after it. The section itself, the same
 * for every lock mode, is svc_section.c; the lock-free lua mode has its own
 * path (svc_lua.c).
 *
 * Three parts (svc_pool.h):
 *   begin   the checks (queue bound, shutdown, client gone), the
 *           Idempotency-Key's claim, the lock's arguments, and the first
 *           attempt sent (svc_section_start) as soon as a worker takes the
 *           request — when the worker has just released the purchase
 *           before, ahead of that one's reply;
 *   run     the section (svc_section_run);
 *   respond the reply, the Idempotency-Key's stored outcome, the trace and
 *           the stats — left to run after the worker's next purchase has
 *           begun when it needs no Redis (no Idempotency-Key). Under
 *           contention the releasing worker usually takes the lock again,
 *           so the reply and the connection's resume ride in the next
 *           acquire's round trip instead of keeping the lock free.
 *
 * Stock buckets (svc_bucket.h): for a SKU split into buckets, begin first
 * takes the user's reservation in their home bucket (one buy per user) and
 * aims the first try at a bucket; run goes on over the others while a try
 * finds its bucket sold out or locked (svc_tries.h). A SKU without buckets
 * runs exactly as before: its own keys, one try.
 *
 * Waiting: time spent in the worker queue counts against the request's
 * wait_ms (the lock gets what is left, never below 0 = try once); a request
 * that sat in the queue longer than wait_ms + work_ms + QUEUE_GRACE_MS is
 * answered 503 overloaded without touching Redis (its client has very
 * likely given up).
 */
#include "svc_routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_check.h"
#include "svc_clock.h"
#include "svc_gauges.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"
#include "svc_step.h"
#include "svc_tries.h"

/* The one reply of a purchase; ends its Idempotency-Key (a sale's reply is
 * the one stored with the order) and records its outcome. */
static void respond(svc_purchase *pu, purchase_result res)
{
    SVC_ASSERT(res >= 0 && res < PR_COUNT);
    svc_section *x = &pu->x;
    svc_req *r = x->r;
    unsigned status = svc_result[res].status;
    if (svc_result[res].redis_error)
        svc_stats_redis_error();
    bool sale = res == PR_SOLD || res == PR_NOT_REPLICATED;
    if (sale && x->id.on && svc_purchase_bucketed(pu) && x->sold_reply != NULL) {
        /* Written with the order under the bucket's tag; the replays read
         * the SKU's key (svc_idem.h). */
        svc_idem_end(&x->id, r, x->conn, 1, 200, x->sold_reply, strlen(x->sold_reply));
    }
    char *txt = res == PR_SOLD && x->sold_reply != NULL ? x->sold_reply
                                                        : svc_order_reply(&x->o, res);
    if (txt != x->sold_reply)
        free(x->sold_reply);
    x->sold_reply = NULL;
    if (res == PR_SOLD_OUT && r->s->purchase.local_sold_out)
        svc_soldout_mark(r->sku, pu->soldout_gen);
    if (svc_result_found_sku(res))
        svc_gauges_seen(r->sku);
    if (sale)
        x->id.on = 0; /* its outcome was written with the order */
    if (x->id.on)
        svc_idem_end(&x->id, r, x->conn,
                     res != PR_SOLD && svc_idem_stored_outcome(res) && txt != NULL, status, txt,
                     txt ? strlen(txt) : 0);
    svc_reply_text(r, status, txt, txt ? strlen(txt) : 0, NULL);
    if (svc_purchase_bucketed(pu))
        svc_trace_hops(&x->tr, pu->hops);
    svc_trace_end(&x->tr, x->new_order_id, status, svc_result[res].error, x->o.lock_lost,
                  x->o.deleted_other_lock);
    if (svc_purchase_bucketed(pu))
        svc_bucket_count(r->sku, pu->lay.n, x->o.bucket, res == PR_SOLD, pu->probes, pu->hops);
    /* Lock wait counts a purchase that gave up (429) too: it waited for the
     * lock all the same, and leaving it out would hide contention. */
    svc_stats_purchase(r->mode, svc_result_slot(res, r->sku), svc_result[res].out, x->o.lock_lost,
                       x->o.deleted_other_lock, lc_now_us() - r->t0_us,
                       x->wait_us >= 0 ? x->wait_us : x->gave_up_us);
}

/* One buy per user with buckets: the reservation goes back unless an
 * order may exist (sold, or an outcome unknown that named the order). */
static void settle_reservation(svc_purchase *pu, lc_conn *conn)
{
    if (pu->rv.held && pu->x.o.order_id[0] == '\0')
        svc_bucket_unreserve(conn, pu->x.r->sku, &pu->lay, pu->x.r->p.user, &pu->rv);
}

/* Everything before the lock, and the lock's first attempt sent. true when
 * the purchase goes on in svc_section_run; false when it was answered
 * here (pu is then done with). */
static bool begin_purchase(svc_purchase *pu, svc_req *r, lc_conn *conn)
{
    const cfg_config *s = r->s;
    const svc_params *p = &r->p;
    svc_section *x = &pu->x;

    memset(pu, 0, sizeof *pu);
    x->r = r;
    x->conn = conn;
    x->lock = svc_mode_lock(r->mode);
    x->step = svc_step_self(); /* NULL unless this runs on a step's thread */
    svc_order_init(&x->o, r);
    x->wait_us = -1;
    x->gave_up_us = -1;
    pu->soldout_gen = svc_soldout_gen(r->sku);
    svc_trace_begin(&x->tr, r);
    if (conn == NULL) {
        snprintf(x->o.detail, sizeof x->o.detail, "no Redis connection");
        respond(pu, PR_REDIS_UNAVAILABLE);
        return false;
    }
    x->work_ms = (p->seen & SVC_P_WORK_MS) ? p->work_ms : s->purchase.work_ms;
    x->wait_ms = (p->seen & SVC_P_WAIT_MS) ? p->wait_ms : s->lock.wait_ms;
    /* A lock on servers of its own (redlock) shares no connection with the
     * stock: nothing can ride with it, and the reply's "pipeline" says so.
     * A stepped purchase stops between the lock and the read and between
     * the commit and the release: each goes on its own round trip. */
    x->pipeline = x->lock->carries_commands && x->step == NULL &&
                  ((p->seen & SVC_P_PIPELINE) ? p->pipeline : s->purchase.pipeline);
    x->limited = s->purchase.limit_per_user > 0 && (p->seen & SVC_P_USER);
    purchase_result not_now;
    if (!svc_purchase_admit(r, x->wait_ms, x->work_ms, &not_now, x->o.detail, sizeof x->o.detail)) {
        respond(pu, not_now);
        return false;
    }
    int lrc = svc_bucket_layout(conn, r->sku, &pu->lay, &pu->lay_gen, x->o.detail,
                                sizeof x->o.detail);
    if (lrc != 0) {
        respond(pu, lrc == -1 ? PR_REDIS_UNAVAILABLE : PR_REDIS_ERROR);
        return false;
    }
    if (r->idem[0]) {
        /* The marker outlives the longest this purchase can take: every
         * lock wait, work_ms and a few round trips. */
        int64_t marker_ms = (1 + p->reenter) * x->wait_ms + x->work_ms +
                            8LL * s->redis.command_timeout_ms + 5000;
        int rc = svc_idem_begin(&x->id, r, conn, marker_ms, &pu->lay, &not_now, x->o.detail,
                                sizeof x->o.detail);
        if (rc == 1) {
            svc_idem_replayed(&x->id, r, conn, &x->tr, svc_stats_sku_slot(r->sku));
            return false;
        }
        if (rc < 0) {
            respond(pu, not_now);
            return false;
        }
    }
    int b = 0;
    if (svc_purchase_bucketed(pu)) {
        /* The user's count lives in their home bucket, not under the lock
         * of the bucket that sells: a reservation there, atomic in every
         * mode, instead of the section's own check. */
        if (x->limited) {
            long long held = 0;
            int rc = svc_bucket_reserve(conn, r->sku, &pu->lay, p->user,
                                        (long long)s->purchase.limit_per_user, &pu->rv, &held,
                                        x->o.detail, sizeof x->o.detail);
            if (rc != 1) {
                x->o.pipeline = x->pipeline; /* as the section's replies say it */
                respond(pu, rc == 0   ? PR_LIMIT_REACHED
                            : rc == 2 ? PR_STOCK_RESET
                                      : PR_REDIS_UNAVAILABLE);
                return false;
            }
            x->limited = false;
            x->epoch = pu->rv.epoch; /* the sale only where that reset's stock is */
        }
        if (svc_bucket_hint_mode((lc_mode)r->mode)) {
            x->on_hold = svc_tries_publish_hold;
            pu->hint = x->step == NULL && p->reenter == 0;
        }
        purchase_result end;
        b = svc_tries_pick(pu, conn, -1, &end);
        if (b < 0) {
            settle_reservation(pu, conn);
            respond(pu, end);
            return false;
        }
    }
    x->queued_ms = (lc_now_us() - r->queued_us) / 1000;
    svc_tries_aim(pu, b);
    svc_section_start(x);
    return true;
}

int svc_purchase_begins_ahead(const svc_req *r)
{
    /* One buy per user on a SKU in buckets: its reservation is a round
     * trip of its own, as a key's marker is. */
    svc_layout lay;
    if (r->s->purchase.limit_per_user > 0 && svc_bucket_known(r->sku, &lay) && lay.n > 1)
        return 0;
    return svc_mode_lock(r->mode)->sends_ahead && r->idem[0] == '\0';
}

/* r->job_state after a begin that answered the request itself. */
static char answered;

void svc_purchase_begin(svc_req *r, lc_conn *conn)
{
    svc_purchase *pu = malloc(sizeof *pu);
    if (pu == NULL)
        return; /* svc_purchase_job does it all, on its stack */
    if (begin_purchase(pu, r, conn)) {
        r->job_state = pu;
    } else {
        free(pu);
        r->job_state = &answered;
    }
}

void svc_purchase_finish(svc_req *r, lc_conn *conn)
{
    (void)conn; /* the next purchase's acquire may be in flight on it */
    svc_purchase *pu = r->job_state;
    r->job_state = NULL;
    r->finish = NULL;
    respond(pu, pu->res);
    free(pu);
}

void svc_purchase_job(svc_req *r, lc_conn *conn)
{
    svc_purchase local;
    svc_purchase *pu = r->job_state;
    r->job_state = NULL;
    if (pu == (svc_purchase *)(void *)&answered)
        return;
    if (pu == NULL) { /* not begun (no memory for it): here, on the stack */
        pu = &local;
        if (!begin_purchase(pu, r, conn))
            return;
    }
    purchase_result res = svc_tries_others(pu, conn, svc_tries_run(pu));
    settle_reservation(pu, conn);
    /* The answer can wait until the worker has sent its next purchase's
     * acquire (svc_pool.h) when it needs no Redis: an Idempotency-Key's
     * outcome is stored by respond, on this connection. */
    if (pu != &local && !pu->x.id.on) {
        pu->res = res;
        r->job_state = pu;
        r->finish = svc_purchase_finish;
        return;
    }
    respond(pu, res);
    if (pu != &local)
        free(pu);
}
