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
 * Stock buckets (svc_bucket.h): for a SKU split into buckets, begin picks
 * a random bucket among those not known to be empty (and, with one buy
 * per user, first takes the user's reservation in their home bucket); run
 * runs the section on that bucket and, while it answers sold out, on the
 * next bucket not known empty — each such probe costs the section's round
 * trips (two pipelined) — until one sells, refuses, or none is left: then,
 * and only after the layout record was read again, the SKU is sold out.
 * A try hops: it takes the lock only if it is free, and a held one sends
 * it on (aim, other_buckets). A polling mode's buyer who found every
 * bucket with stock locked pauses as its lock's own wait would, then tries
 * them again (next_round); the others' last try waits. A bucket found
 * locked is tried again before sold out. A polling mode with a fixed
 * lease also knows this instance's own tries and holds (svc_bucket_claim,
 * svc_bucket_hold: a hint, never a lock): it draws among the buckets not
 * held here, and when every bucket with stock is held here it waits for a
 * release here, or a held lease's end, instead of pausing and polling.
 * The section itself is the same, on the bucket's keys and lock. A SKU
 * without buckets runs exactly as before: its own keys, one try.
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

#include <uuid/uuid.h>

#include "svc_bucket.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_gauges.h"
#include "svc_keys.h"
#include "svc_section.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"
#include "svc_step.h"

typedef struct purchase {
    svc_section x;
    uint64_t soldout_gen; /* the local sold-out flag's generation before the read */
    purchase_result res;  /* the section's outcome, for svc_purchase_finish */
    char lock_key[SVC_KEY_MAX], fence_key[SVC_KEY_MAX], owner[SVC_UUID_LEN];
    /* The SKU's stock buckets (lay.n 1: its own keys, one try). */
    svc_layout lay;
    uint64_t lay_gen;      /* what this purchase learns holds for it */
    uint64_t tried;        /* the buckets whose section ran, a bit each */
    uint64_t busy;         /* the buckets a hop found locked, a bit each */
    int probes;            /* tries that found their bucket sold out */
    bool gone;             /* a try found its bucket without a stock key */
    int hops;              /* hops that found their bucket locked */
    int64_t lock_wait_us;  /* the tries' time on their locks so far */
    bool hop;              /* this try is a hop: it does not wait */
    bool waited;           /* a try has waited: no more hops */
    bool hint;             /* uses this instance's claims (svc_bucket_hold):
                              a polling mode that hops */
    int64_t claim_us;      /* its try's claim on its bucket, until then; 0
                              when it publishes none */
    int64_t start_us;      /* the first try's start: later ones wait less */
    char tag[SVC_TAG_MAX]; /* the bucket of the try (x.tag) */
    svc_reservation rv;    /* one buy per user with buckets */
} purchase;

static bool bucketed(const purchase *pu)
{
    return pu->lay.n > 1;
}

/* The one reply of a purchase; ends its Idempotency-Key (a sale's reply is
 * the one stored with the order) and records its outcome. */
static void respond(purchase *pu, purchase_result res)
{
    SVC_ASSERT(res >= 0 && res < PR_COUNT);
    svc_section *x = &pu->x;
    svc_req *r = x->r;
    unsigned status = svc_result[res].status;
    if (svc_result[res].redis_error)
        svc_stats_redis_error();
    bool sale = res == PR_SOLD || res == PR_NOT_REPLICATED;
    if (sale && x->id.on && bucketed(pu) && x->sold_reply != NULL) {
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
    if (bucketed(pu))
        svc_trace_hops(&x->tr, pu->hops);
    svc_trace_end(&x->tr, x->new_order_id, status, svc_result[res].error, x->o.lock_lost,
                  x->o.deleted_other_lock);
    if (bucketed(pu))
        svc_bucket_count(r->sku, pu->lay.n, x->o.bucket, res == PR_SOLD, pu->probes, pu->hops);
    /* Lock wait counts a purchase that gave up (429) too: it waited for the
     * lock all the same, and leaving it out would hide contention. */
    svc_stats_purchase(r->mode, svc_result_slot(res, r->sku), svc_result[res].out, x->o.lock_lost,
                       x->o.deleted_other_lock, lc_now_us() - r->t0_us,
                       x->wait_us >= 0 ? x->wait_us : x->gave_up_us);
}

/* One buy per user with buckets: the reservation goes back unless an
 * order may exist (sold, or an outcome unknown that named the order). */
static void settle_reservation(purchase *pu, lc_conn *conn)
{
    if (pu->rv.held && pu->x.o.order_id[0] == '\0')
        svc_bucket_unreserve(conn, pu->x.r->sku, &pu->lay, pu->x.r->p.user, &pu->rv);
}

/* The lock's arguments: the stock's lock key for this mode (the SKU's, or
 * the bucket's), the owner (only reentrant's lock uses it: its hash field;
 * the other modes' holders are told apart by the lock core's own token),
 * the lease (the request's, else the watchdog for a mode that has one,
 * else lock.lease_ms) and the wait the worker queue and earlier tries
 * (spent_ms) left. */
static void lock_args(purchase *pu, int64_t spent_ms)
{
    svc_section *x = &pu->x;
    const svc_req *r = x->r;
    lc_lock_args *a = &x->a;
    svc_lock_key(pu->lock_key, x->tag, r->mode);
    svc_key(pu->fence_key, x->tag, "fence");
    if (x->lock->uses_owner) {
        uuid_t u;
        uuid_generate_random(u);
        uuid_unparse_lower(u, pu->owner);
    } else {
        snprintf(pu->owner, sizeof pu->owner, "%s", "-");
    }
    a->mode = (lc_mode)r->mode;
    a->key = pu->lock_key;
    a->fence_key = pu->fence_key; /* fenced's counter; the other modes ignore it */
    a->owner = pu->owner;
    if (r->p.seen & SVC_P_LEASE_MS)
        a->lease_ms = r->p.lease_ms;
    else
        a->lease_ms = x->lock->watchdog ? 0 : r->s->lock.lease_ms;
    int64_t used = x->queued_ms + spent_ms;
    a->wait_ms = x->wait_ms > used ? x->wait_ms - used : 0;
    a->cancel = svc_cancel_flag();
}

/* The buckets this instance's other purchases claim or hold now, a bit
 * each (0 for a purchase that does not use them). */
static uint64_t held_here(const purchase *pu)
{
    return pu->hint ? svc_bucket_held_here(pu->x.r->sku, (lc_mode)pu->x.r->mode, pu->lay.n,
                                           lc_now_us(), NULL, NULL)
                    : 0;
}

/* Whether a bucket not known empty is left that this purchase has neither
 * tried nor found locked, nor sees held here (after `after`, the bucket of
 * the last try). */
static bool untried_left(const purchase *pu, int after)
{
    uint64_t skip = svc_bucket_empty(pu->x.r->sku, pu->lay_gen) | pu->tried | pu->busy |
                    held_here(pu);
    return svc_bucket_next(pu->lay.n, skip, after, 0) >= 0;
}

/* The section's on_hold: this instance's holds of a bucket's lock, for its
 * other purchases (svc_bucket_hold). */
static void publish_hold(svc_section *x, bool held, int64_t lease_gone_us)
{
    purchase *pu = (purchase *)(void *)x; /* x is its first member */
    if (held)
        pu->claim_us = 0; /* the hold replaces the claim */
    svc_bucket_hold(x->r->sku, x->a.mode, x->o.bucket, held, lease_gone_us);
}

/* Aims the next try at bucket b (lay.n 1: the SKU's own keys, b 0): its
 * tag, lock and a fresh record of facts. */
static void aim(purchase *pu, int b)
{
    svc_section *x = &pu->x;
    const svc_req *r = x->r;
    int64_t spent_ms = 0;
    if (pu->start_us != 0) { /* not the first try */
        svc_order_init(&x->o, r);
        spent_ms = (lc_now_us() - pu->start_us) / 1000;
    } else {
        pu->start_us = lc_now_us();
    }
    svc_layout_tag(&pu->lay, r->sku, b, pu->tag);
    x->tag = pu->tag;
    if (pu->hint) {
        /* until the try's replies at the latest (setnx's acquisition is
         * two commands); a taken lock's lease then */
        int64_t until = lc_now_us() +
                        (x->lock->two_step_acquire ? 2 : 1) *
                            (int64_t)r->s->redis.command_timeout_ms * 1000 +
                        1;
        pu->claim_us = svc_bucket_claim(r->sku, (lc_mode)r->mode, b, until) ? until : 0;
    }
    pu->tried |= (uint64_t)1 << b;
    if (bucketed(pu)) {
        x->o.bucket = b;
        svc_trace_bucket(&x->tr, b, pu->probes);
    }
    lock_args(pu, spent_ms);
    /* A hop: this try takes the lock only if it is free, and a held lock
     * sends the buyer on (other_buckets) instead of waiting for it — a
     * round trip where a wait is a retry interval or a hand-over. A
     * polling mode's every try hops: its wait is a pause between rounds
     * over the locked buckets (next_round), the lock's own polling spread
     * over them. A mode whose waiter is handed the lock (mutex) hops while
     * another bucket not known empty has been neither tried nor found
     * locked; then the try waits, as a SKU's one lock does. A stepped
     * purchase never hops (its steps show one bucket's lock), nor one that
     * re-enters (a nested hold that a mode refuses must wait for itself, as
     * without buckets), nor reentrant's: its waiters are woken by the
     * release message and queue behind a starving first waiter, which a
     * try without a wait would barge past (lc_lock.c). */
    pu->hop = bucketed(pu) && x->step == NULL && r->p.reenter == 0 && x->a.mode != LC_REENTRANT &&
              (x->lock->polls || (!pu->waited && untried_left(pu, b)));
    if (pu->hop)
        x->a.wait_ms = 0;
    else
        pu->waited = true;
    x->waited_before_us = pu->lock_wait_us;
}

/* After a polling mode's hop found its bucket locked: when no bucket with
 * stock is left untried in this round (every one is empty, or was found
 * locked), the pause the lock's own wait takes between two tries
 * (lc_conn_retry_pause), then another round over the locked ones — a poll
 * of every bucket where the lock alone polls one. true when the search
 * goes on; false when the wait is spent (*res stays the hop's lock_busy)
 * or a shutdown ended it (*res shutting_down). */
static bool next_round(purchase *pu, lc_conn *conn, purchase_result *res)
{
    svc_section *x = &pu->x;
    if (!x->lock->polls || untried_left(pu, x->o.bucket))
        return true;
    int64_t left = x->wait_ms - x->queued_ms - (lc_now_us() - pu->start_us) / 1000;
    if (left <= 0)
        return false;
    int64_t t0 = lc_now_us(); /* in µs: a sum of rounds' ms would drift */
    unsigned since = 0;
    int64_t first_end = 0;
    uint64_t here = pu->hint ? svc_bucket_held_here(x->r->sku, (lc_mode)x->r->mode, pu->lay.n, t0,
                                                    &since, &first_end)
                             : 0;
    uint64_t open = (pu->lay.n < 64 ? ((uint64_t)1 << pu->lay.n) - 1 : ~(uint64_t)0) &
                    ~svc_bucket_empty(x->r->sku, pu->lay_gen);
    bool canceled;
    if ((open & here) != 0 && (open & ~here) == 0) {
        /* Every bucket with stock is held here: the first release here (or
         * the first of their leases to run out) is the moment to try. */
        int64_t until = t0 + left * 1000;
        canceled = svc_bucket_wait_here(x->r->sku, since, first_end < until ? first_end : until,
                                        x->a.cancel) != 0;
    } else {
        canceled = lc_conn_retry_pause(conn, x->a.mode, left, x->a.cancel, NULL) == LC_CANCELED;
    }
    if (canceled) {
        snprintf(x->o.detail, sizeof x->o.detail,
                 "server shutting down while waiting for the lock; nothing was written");
        x->o.busy_wait_ms = -1;
        x->wait_us = x->gave_up_us = -1; /* as a canceled acquire: no lock wait counted */
        *res = PR_SHUTTING_DOWN;
        return false;
    }
    pu->lock_wait_us += lc_now_us() - t0;
    pu->busy = 0;
    return true;
}

/* The section on the bucket aim chose, its claim there ended after. */
static purchase_result run_try(purchase *pu)
{
    purchase_result res = svc_section_run(&pu->x);
    if (pu->claim_us != 0)
        svc_bucket_unclaim(pu->x.r->sku, (lc_mode)pu->x.r->mode, pu->x.o.bucket, pu->claim_us);
    pu->claim_us = 0;
    return res;
}

/* The bucket the next try sells from: the start (after < 0: drawn among
 * those not known empty) or the next one after `after` not known empty nor
 * tried — one a hop found locked only when no other is left. When none is
 * left the layout record is read again: a reset this instance has not
 * heard of yet may have refilled the SKU. Returns the bucket; else -1
 * (sold out: every bucket empty), or the ending in *end with the reason
 * in x->o.detail. */
static int pick_bucket(purchase *pu, lc_conn *conn, int after, purchase_result *end)
{
    svc_section *x = &pu->x;
    const char *sku = x->r->sku;
    uint64_t skip = svc_bucket_empty(sku, pu->lay_gen) | pu->tried;
    int b = svc_bucket_next(pu->lay.n, skip | pu->busy | held_here(pu), after, svc_bucket_rand());
    if (b < 0)
        b = svc_bucket_next(pu->lay.n, skip | pu->busy, after, svc_bucket_rand());
    if (b < 0)
        b = svc_bucket_next(pu->lay.n, skip, after, svc_bucket_rand());
    if (b >= 0)
        return b;
    /* what the last try left (a hop's lock_busy) is not this ending's */
    x->o.busy_wait_ms = -1;
    svc_bucket_count_recheck();
    int rc = svc_bucket_search_end(conn, sku, &pu->lay, &pu->lay_gen, pu->gone, x->o.detail,
                                   sizeof x->o.detail);
    x->o.has_stock_left = rc == 0;
    x->o.stock_left = 0;
    *end = svc_result_of_search(rc);
    return -1;
}

/* After a try that found its bucket sold out, or a hop that found it
 * locked: the next bucket, while one is left. A bucket without a stock key
 * (the section's unknown_sku) is one a reset that changed the bucket count
 * deleted: nothing to sell there, and the SKU is stocked all the same (its
 * layout record says so), so never 404 — when no bucket is left, the
 * layout record read again tells sold out from a reset (stock_reset), and
 * a record that still names a gone bucket is a reset under way (on a
 * cluster one transaction per bucket, the record last): stock_reset too,
 * never sold out. A
 * SKU of its own keys found sold out reads it again too: a reset into
 * buckets this instance has not heard of yet reads as sold out there
 * (svc_bucket_unsplit_reset). Returns the last try's outcome, or how the
 * search ended. */
static purchase_result other_buckets(purchase *pu, lc_conn *conn, purchase_result res)
{
    svc_section *x = &pu->x;
    while ((res == PR_SOLD_OUT || res == PR_UNKNOWN_SKU || (res == PR_LOCK_BUSY && pu->hop)) &&
           bucketed(pu)) {
        int last = x->o.bucket;
        if (x->wait_us >= 0 || x->gave_up_us >= 0) /* each counts the tries before */
            pu->lock_wait_us = x->wait_us >= 0 ? x->wait_us : x->gave_up_us;
        if (res == PR_LOCK_BUSY) { /* a hop: locked, not empty */
            pu->tried &= ~((uint64_t)1 << last);
            pu->busy |= (uint64_t)1 << last;
            pu->hops++;
            if (!next_round(pu, conn, &res))
                break;
        } else {
            /* a gone bucket is not remembered: the next buyer must find
             * it gone too, not take the SKU for sold out */
            if (res == PR_UNKNOWN_SKU)
                pu->gone = true;
            else
                svc_bucket_mark_empty(x->r->sku, pu->lay_gen, last);
            pu->probes++;
        }
        int b = pick_bucket(pu, conn, last, &res);
        if (b < 0)
            break;
        aim(pu, b);
        svc_section_start(x);
        res = run_try(pu);
    }
    if (res == PR_SOLD_OUT && !bucketed(pu) &&
        svc_bucket_unsplit_reset(conn, x->r->sku, &pu->lay, &pu->lay_gen)) {
        x->o.has_stock_left = false;
        snprintf(x->o.detail, sizeof x->o.detail, "%s", SVC_BUCKET_RESET_UNLEARNT);
        res = PR_STOCK_RESET;
    }
    return res;
}

/* Everything before the lock, and the lock's first attempt sent. true when
 * the purchase goes on in svc_section_run; false when it was answered
 * here (pu is then done with). */
static bool begin_purchase(purchase *pu, svc_req *r, lc_conn *conn)
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
    if (bucketed(pu)) {
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
            x->on_hold = publish_hold;
            pu->hint = x->step == NULL && p->reenter == 0;
        }
        purchase_result end;
        b = pick_bucket(pu, conn, -1, &end);
        if (b < 0) {
            settle_reservation(pu, conn);
            respond(pu, end);
            return false;
        }
    }
    x->queued_ms = (lc_now_us() - r->queued_us) / 1000;
    aim(pu, b);
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
    purchase *pu = malloc(sizeof *pu);
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
    purchase *pu = r->job_state;
    r->job_state = NULL;
    r->finish = NULL;
    respond(pu, pu->res);
    free(pu);
}

void svc_purchase_job(svc_req *r, lc_conn *conn)
{
    purchase local;
    purchase *pu = r->job_state;
    r->job_state = NULL;
    if (pu == (purchase *)(void *)&answered)
        return;
    if (pu == NULL) { /* not begun (no memory for it): here, on the stack */
        pu = &local;
        if (!begin_purchase(pu, r, conn))
            return;
    }
    purchase_result res = other_buckets(pu, conn, run_try(pu));
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
