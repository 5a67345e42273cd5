/* svc_outcome.h — every way a purchase ends, with its one HTTP status,
 * error code and /stats outcome: shared by the lock modes' path
 * (svc_purchase.c, svc_section.c) and the lock-free lua path (svc_lua.c), so a purchase
 * answers the same whatever path it took, and nothing compares error
 * strings. */
#ifndef MIAOSHA_SVC_OUTCOME_H
#define MIAOSHA_SVC_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "svc_reply.h"
#include "svc_stats.h"

/* A queued purchase answers 503 overloaded without touching Redis when it
 * waited for a worker longer than wait_ms + work_ms + this (ms): its client
 * has very likely given up. */
#define QUEUE_GRACE_MS 1000

/* Every way a purchase ends. svc_result maps each to its one HTTP status,
 * its error code (NULL for the sale) and its /stats outcome, so that the
 * mapping is written once and nothing compares error strings. */
typedef enum {
    PR_SOLD,
    PR_SOLD_OUT,
    PR_LOCK_BUSY,
    PR_REDIS_UNAVAILABLE, /* no connection, no reply, or a lock call failed on Redis */
    PR_REDIS_ERROR,       /* Redis answered with an error (data or transaction) */
    PR_BAD_STOCK_VALUE,   /* the stock key holds a non-integer */
    PR_LOCK_ERROR,        /* lc_acquire refused otherwise (misuse, no memory) */
    PR_SHUTTING_DOWN,
    PR_OVERLOADED, /* queued for a worker beyond any use */
    PR_OUT_OF_MEMORY,
    PR_CLIENT_GONE,    /* the client closed its connection: nothing done */
    PR_STOCK_RESET,    /* PUT /stock reset the SKU meanwhile: nothing written */
    PR_FENCED_OUT,     /* fenced: a later lock holder read the stock since this
                          holder did (its lease ran out): nothing written */
    PR_LIMIT_REACHED,  /* the user holds purchase.limit_per_user orders */
    PR_IN_PROGRESS,    /* Idempotency-Key: its first request is still running */
    PR_KEY_REUSED,     /* Idempotency-Key: stored with other parameters */
    PR_NOT_REPLICATED, /* written, but WAIT saw fewer than redis.wait_replicas replicas */
    PR_STEP_ABANDONED, /* a stepped purchase left paused for teach.step_timeout_s before
                          its commit: its lock released, nothing written (svc_step.h) */
    PR_UNKNOWN_SKU,    /* the SKU's stock key does not exist: never stocked (PUT /stock
                          creates it); nothing written */
    PR_COUNT           /* the number of outcomes, not an outcome */
} purchase_result;

/* One row per purchase_result. */
typedef struct svc_result_info {
    unsigned status;   /* HTTP status */
    const char *error; /* error code; NULL for the sale */
    svc_outcome out;   /* the /stats and /metrics outcome */
    int redis_error;   /* counted in miaosha_redis_errors_total */
} svc_result_info;

/* Indexed by purchase_result. Read-only; any thread. */
extern const svc_result_info svc_result[PR_COUNT];

/* The /stats and /metrics label slot a finished purchase of sku is counted
 * under: svc_stats_sku_slot (a new SKU takes the next label), except for
 * PR_UNKNOWN_SKU, which never takes one (svc_stats_sku_find), as a request
 * rejected by validation never does: made-up SKUs cannot use up the
 * labels. Any thread. */
int svc_result_slot(purchase_result res, const char *sku);

/* true when a purchase that ended so found its SKU stocked in Redis (a
 * sale, sold out, the user's limit, a reset meanwhile, a sale the replicas
 * lack): the SKU then counts as seen for the audit gauges
 * (svc_gauges_seen). Any thread. */
bool svc_result_found_sku(purchase_result res);

/* How a purchase ends whose bucket search ended with rc, as
 * svc_bucket_search_end returns it: 0 PR_SOLD_OUT, 1 PR_STOCK_RESET, -1
 * PR_REDIS_UNAVAILABLE, -2 PR_REDIS_ERROR. Any thread. */
purchase_result svc_result_of_search(int rc);

/* Whether a purchase taken from the worker queue may start, before it
 * touches Redis: true when it may; else false with *why set to
 * PR_SHUTTING_DOWN (the shutdown's step 2, svc_abort_work: requests still
 * pending some seconds after SIGTERM are being abandoned), PR_OVERLOADED
 * (it waited for a worker longer than wait_ms + work_ms + QUEUE_GRACE_MS;
 * both in ms) or PR_CLIENT_GONE (its client closed the connection while it
 * was queued), and the reason in detail (len bytes). Nothing was tried
 * then. The worker thread that runs r. */
bool svc_purchase_admit(const svc_req *r, int64_t wait_ms, int64_t work_ms, purchase_result *why,
                        char *detail, size_t len);

#endif
