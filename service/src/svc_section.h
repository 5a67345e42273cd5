/* svc_section.h — the critical section of a locked purchase, the one
 * sequence every lock mode runs (svc_section.c). Only the lock differs
 * between modes, so a comparison between modes varies the lock and nothing
 * else. The lock-free lua mode has no section (svc_lua.c).
 *
 * svc_purchase.c fills an svc_section from the request and calls
 * svc_section_start as soon as a worker takes the request (the lock's
 * first attempt leaves then); svc_tries.c runs it (svc_section_run) once
 * the worker is free to wait for it, and starts and runs the later tries;
 * the outcome and the facts in x->o make the reply.
 *
 * The section runs on one stock: a SKU's, or one bucket of a SKU split
 * into buckets (x->tag). Trying the next bucket when one is sold out is
 * the purchase's loop around the section (svc_tries.c), not the
 * section's.
 *
 * A stepped purchase (x->step) stops at each stage of the section —
 * locked, read, written, released — until told to go on; without a step
 * every stop is a no-op, so both run the same code.
 *
 * Threads: both calls run on the worker that owns x->conn (a stepped
 * purchase's own thread).
 */
#ifndef MIAOSHA_SVC_SECTION_H
#define MIAOSHA_SVC_SECTION_H

#include <stdbool.h>
#include <stdint.h>

#include "svc_idem.h"
#include "svc_order.h"
#include "svc_step.h"
#include "svc_store.h"
#include "svc_trace.h"

#define SVC_SECTION_MAX_HOLDS (1 + 64) /* the outer hold and reenter's */

typedef struct svc_section {
    /* Set by the caller before svc_section_start. */
    svc_req *r;
    lc_conn *conn;
    const char *tag;          /* the stock's hash tag: r->sku, or the bucket's
                                 this run sells from (svc_bucket.h) */
    const lc_mode_info *lock; /* the mode's facts (lc_mode_info_of) */
    lc_lock_args a;           /* the outer acquisition; reenter's reuse it */
    bool pipeline;            /* commands ride in the lock's round trips */
    bool limited;             /* one buy per user: count the user's orders */
    const char *epoch;        /* NULL, or the epoch the stock must carry
                                 (a reservation's, svc_bucket.h: the reset
                                 it was counted under); a read finding
                                 another ends 409 stock_reset, nothing
                                 written */
    int64_t work_ms;          /* time spent inside the section */
    int64_t wait_ms;          /* the wait asked for (a.wait_ms: what the
                                 worker queue left of it) */
    int64_t queued_ms;        /* time the request waited for a worker */
    svc_order o;              /* what the reply and the order record say */
    svc_trace tr;             /* the purchase's timeline (GET /trace) */
    svc_idem id;              /* the Idempotency-Key, when id.on */
    svc_step *step;           /* NULL, or the stepped purchase this is: it
                                 stops at each stage (svc_step.h) */
    int64_t waited_before_us; /* time the purchase's earlier tries spent on
                                 their locks (stock buckets: hops, pauses,
                                 probes' acquisitions); the lock wait below
                                 and the reply's lock_wait_ms include it */
    /* NULL, or told when the outer lock is taken (held true, with when its
     * fixed lease certainly ends in µs, 0 if it has none) and when it is
     * released (held false): stock buckets publish this instance's own
     * holds (svc_bucket_hold). Called on the section's thread. */
    void (*on_hold)(struct svc_section *x, bool held, int64_t lease_gone_us);

    /* Set by the section, for the caller. */
    int64_t wait_us;    /* time to the outer lock, waited_before_us
                           included; -1 when not held */
    int64_t gave_up_us; /* -1, or how long a 429 waited for the lock,
                           waited_before_us included */
    char *sold_reply;   /* with a key: the sale's reply, stored with the
                           order (malloc'd; the caller frees it) */

    /* The section's own. */
    const svc_store *store;
    lc_pipe rp;        /* the read riding with the first attempt */
    lc_status read_st; /* LC_OK, or why rp could not be built */
    int read_n;        /* replies of the read */
    bool read_came;    /* read_rep holds them */
    redisReply *read_rep[SVC_STORE_MAX_REPLIES];
    redisContext *read_ctx; /* the context that carried the read */
    lc_guard *held[SVC_SECTION_MAX_HOLDS];
    int nheld;
    int64_t acq_t0_us;               /* when the first attempt was sent */
    int64_t lease_gone_us;           /* fixed lease: when the outer lock has
                                        certainly expired; 0 = n/a */
    uint64_t write_via;              /* lc_conn_via right after the write */
    char new_order_id[SVC_UUID_LEN]; /* minted while the acquire travels */
} svc_section;

/* Sends the outer lock's first attempt (lc_acquire_send) — with the stock
 * read riding in its write when x->pipeline — and mints the order id while
 * it travels. Every field of the first group must be set. Cannot fail: a
 * failure shows in svc_section_run. May be called again on x once
 * svc_section_run has returned, to run the section once more (on another
 * bucket, x->tag and x->a changed): the section's own fields start afresh,
 * x->o is the caller's to reset. */
void svc_section_start(svc_section *x);

/* The critical section, after svc_section_start: acquire (the outer lock,
 * then reenter's nested holds), read the stock, decide, work, commit, WAIT
 * for replicas, release. Returns the outcome; its facts (order id, stock
 * left, the lock's fields, the reason) are in x->o. Holds nothing when it
 * returns. A stepped purchase abandoned or shut down while paused before
 * its commit ends PR_STEP_ABANDONED or PR_SHUTTING_DOWN, nothing written. */
purchase_result svc_section_run(svc_section *x);

#endif
