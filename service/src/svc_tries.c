/* svc_tries.c — one purchase's tries over a SKU's stock buckets
 * (svc_tries.h): the bucket each try sells from, its lock's arguments,
 * the hops past locked buckets and the rounds over them.
 *
 * For a SKU split into buckets (svc_bucket.h) the purchase's begin
 * (svc_purchase.c) aims the first try at a random bucket among those not
 * known to be empty (after, with one buy per user, the user's reservation
 * in their home bucket); the purchase's run runs the section on that
 * bucket and, while it answers sold out, on the next bucket not known
 * empty — each such probe costs the section's round trips (two pipelined)
 * — until one sells, refuses, or none is left: then, and only after the
 * layout record was read again, the SKU is sold out. A try hops: it takes
 * the lock only if it is free, and a held one sends it on (svc_tries_aim,
 * svc_tries_others). A polling mode's buyer who found every bucket with
 * stock locked pauses as its lock's own wait would, then tries them again
 * (next_round); the others' last try waits. A bucket found locked is tried
 * again before sold out. A polling mode with a fixed lease also knows this
 * instance's own tries and holds (svc_bucket_claim, svc_bucket_hold: a
 * hint, never a lock): it draws among the buckets not held here, and when
 * every bucket with stock is held here it waits for a release here, or a
 * held lease's end, instead of pausing and polling. The section itself is
 * the same, on the bucket's keys and lock. A SKU without buckets runs
 * exactly as before: its own keys, one try.
 */
#include "svc_tries.h"

#include <stdio.h>
#include <string.h>

#include <uuid/uuid.h>

#include "svc_clock.h"
#include "svc_keys.h"
#include "svc_shutdown.h"

/* The lock's arguments: the stock's lock key for this mode (the SKU's, or
 * the bucket's), the owner (only reentrant's lock uses it: its hash field;
 * the other modes' holders are told apart by the lock core's own token),
 * the lease (the request's, else the watchdog for a mode that has one,
 * else lock.lease_ms) and the wait the worker queue and earlier tries
 * (spent_ms) left. */
static void lock_args(svc_purchase *pu, int64_t spent_ms)
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
static uint64_t held_here(const svc_purchase *pu)
{
    return pu->hint ? svc_bucket_held_here(pu->x.r->sku, (lc_mode)pu->x.r->mode, pu->lay.n,
                                           lc_now_us(), NULL, NULL)
                    : 0;
}

/* Whether a bucket not known empty is left that this purchase has neither
 * tried nor found locked, nor sees held here (after `after`, the bucket of
 * the last try). */
static bool untried_left(const svc_purchase *pu, int after)
{
    uint64_t skip = svc_bucket_empty(pu->x.r->sku, pu->lay_gen) | pu->tried | pu->busy |
                    held_here(pu);
    return svc_bucket_next(pu->lay.n, skip, after, 0) >= 0;
}

/* The section's on_hold: this instance's holds of a bucket's lock, for its
 * other purchases (svc_bucket_hold). */
void svc_tries_publish_hold(svc_section *x, bool held, int64_t lease_gone_us)
{
    svc_purchase *pu = (svc_purchase *)(void *)x; /* x is its first member */
    if (held)
        pu->claim_us = 0; /* the hold replaces the claim */
    svc_bucket_hold(x->r->sku, x->a.mode, x->o.bucket, held, lease_gone_us);
}

/* Aims the next try at bucket b (lay.n 1: the SKU's own keys, b 0): its
 * tag, lock and a fresh record of facts. */
void svc_tries_aim(svc_purchase *pu, int b)
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
    if (svc_purchase_bucketed(pu)) {
        x->o.bucket = b;
        svc_trace_bucket(&x->tr, b, pu->probes);
    }
    lock_args(pu, spent_ms);
    /* A hop: this try takes the lock only if it is free, and a held lock
     * sends the buyer on (svc_tries_others) instead of waiting for it — a
     * round trip where a wait is a retry interval or a hand-over. A
     * polling mode's every try hops: its wait is a pause between rounds
     * over the locked buckets (next_round), the lock's own polling spread
     * over them. A mode whose waiter is handed the lock (mutex) hops while
     * another bucket not known empty has been neither tried nor found
     * locked; then the try waits, as a SKU's one lock does. A stepped
     * purchase never hops (its steps show one bucket's lock), nor one that
     * re-enters (a nested hold that a mode refuses must wait for itself, as
     * without buckets), nor one whose mode queues its waiters
     * (reentrant's are woken by the release message and line up behind a
     * starving first waiter, which a try without a wait would barge past:
     * lc_mode_info.queues_waiters). */
    pu->hop = svc_purchase_bucketed(pu) && x->step == NULL && r->p.reenter == 0 &&
              !x->lock->queues_waiters && (x->lock->polls || (!pu->waited && untried_left(pu, b)));
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
static bool next_round(svc_purchase *pu, lc_conn *conn, purchase_result *res)
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

/* The section on the bucket svc_tries_aim chose, its claim there ended after. */
purchase_result svc_tries_run(svc_purchase *pu)
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
int svc_tries_pick(svc_purchase *pu, lc_conn *conn, int after, purchase_result *end)
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
purchase_result svc_tries_others(svc_purchase *pu, lc_conn *conn, purchase_result res)
{
    svc_section *x = &pu->x;
    while ((res == PR_SOLD_OUT || res == PR_UNKNOWN_SKU || (res == PR_LOCK_BUSY && pu->hop)) &&
           svc_purchase_bucketed(pu)) {
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
        int b = svc_tries_pick(pu, conn, last, &res);
        if (b < 0)
            break;
        svc_tries_aim(pu, b);
        svc_section_start(x);
        res = svc_tries_run(pu);
    }
    if (res == PR_SOLD_OUT && !svc_purchase_bucketed(pu) &&
        svc_bucket_unsplit_reset(conn, x->r->sku, &pu->lay, &pu->lay_gen)) {
        x->o.has_stock_left = false;
        snprintf(x->o.detail, sizeof x->o.detail, "%s", SVC_BUCKET_RESET_UNLEARNT);
        res = PR_STOCK_RESET;
    }
    return res;
}
