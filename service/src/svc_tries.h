/* svc_tries.h — one purchase's tries (svc_tries.c), private to the lock
 * modes' purchase (svc_purchase.c), which owns the state below and answers
 * the request.
 *
 * A SKU in stock buckets (svc_bucket.h) is sold from one bucket per try:
 * the first drawn at random among those not known to be empty (and, for a
 * polling mode with a fixed lease, neither stepped nor re-entering, not
 * held by this instance's other purchases), the next one
 * after a try that found its bucket sold out. A try hops: it takes its
 * bucket's lock only if it is free, and a held one sends the buyer on; a
 * polling mode's buyer who found every bucket with stock locked pauses as
 * its lock's own wait would, then tries them again. Each try runs the one
 * critical section (svc_section.c) on its bucket's keys and lock. A SKU
 * without buckets takes exactly one try on its own keys.
 *
 * Threads: every call runs on the worker that owns the purchase (its
 * x.conn).
 */
#ifndef MIAOSHA_SVC_TRIES_H
#define MIAOSHA_SVC_TRIES_H

#include <stdbool.h>
#include <stdint.h>

#include "svc_bucket.h"
#include "svc_keys.h"
#include "svc_section.h"

/* A purchase of a lock mode, from its begin to its reply (zeroed by its
 * begin, svc_purchase.c). */
typedef struct svc_purchase {
    svc_section x;        /* first: svc_tries_publish_hold casts back */
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
} svc_purchase;

/* Whether the SKU is split into buckets (else its own keys, one try). */
static inline bool svc_purchase_bucketed(const svc_purchase *pu)
{
    return pu->lay.n > 1;
}

/* Aims the next try at bucket b (b 0 for a SKU without buckets): its tag,
 * its lock's arguments (the lock key, owner, lease and the wait that the
 * worker queue and the earlier tries left), a fresh record of facts, and
 * whether the try hops. pu->x.r, conn, lock and lay must be set. */
void svc_tries_aim(svc_purchase *pu, int b);

/* The bucket the next try sells from: the start (after < 0) or the next
 * one after `after` not known empty nor tried. When none is left the
 * layout record is read again on conn (one round trip). Returns the
 * bucket; -1 when the search ended: *end then says how (sold_out,
 * stock_reset, redis_unavailable, ...) with the reason in pu->x.o.detail. */
int svc_tries_pick(svc_purchase *pu, lc_conn *conn, int after, purchase_result *end);

/* The section on the bucket svc_tries_aim chose (svc_section_start already
 * called); this instance's claim on the bucket ends after it. Returns the
 * section's outcome. */
purchase_result svc_tries_run(svc_purchase *pu);

/* After the first try's outcome res: the next buckets while a try finds
 * its bucket sold out or gone, or a hop finds it locked, and one is left
 * (pausing between rounds for a polling mode, within the purchase's
 * wait). Returns the last try's outcome, or how the search ended; a SKU
 * without buckets found sold out ends stock_reset when a reset into
 * buckets this instance has not heard of yet refilled it. */
purchase_result svc_tries_others(svc_purchase *pu, lc_conn *conn, purchase_result res);

/* The section's on_hold for a polling mode with buckets: publishes this
 * instance's holds of a bucket's lock to its other purchases
 * (svc_bucket_hold). x is the svc_purchase's first member. */
void svc_tries_publish_hold(svc_section *x, bool held, int64_t lease_gone_us);

#endif
