/* svc_order.h — what a purchase answers and what it writes to the order
 * list, built in one place for every mode: the lock modes (svc_purchase.c,
 * svc_section.c) and the lock-free lua mode (svc_lua.c) fill the same
 * svc_order and get the same reply and the same order record, so a client
 * or an audit never needs to know which path ran.
 *
 * Nothing here does I/O; any thread, on its own svc_order. */
#ifndef MIAOSHA_SVC_ORDER_H
#define MIAOSHA_SVC_ORDER_H

#include <stdbool.h>
#include <stdint.h>

#include "svc_outcome.h"
#include "svc_reply.h"

/* The facts of one purchase that its reply and its order record report. */
typedef struct svc_order {
    const svc_req *r;            /* the request: mode, sku, user, settings, arrival */
    bool pipeline;               /* the reply's "pipeline": commands rode in the
                                    lock's round trips (lua: always, one trip) */
    char order_id[SVC_UUID_LEN]; /* "" until an order may exist */
    bool has_stock_left;
    long long stock_left;
    /* The lock's fields of the reply — lock_wait_ms, lock_lost,
     * deleted_other_lock and, when > 0, fence — are there once a lock was
     * held (lua: always, as zeros, so every mode's reply has one shape). */
    bool lock_fields;
    int64_t lock_wait_ms;
    bool lock_lost;
    bool deleted_other_lock;
    int64_t fence;                   /* fenced: the holder's fencing token; 0 otherwise */
    int64_t busy_wait_ms;            /* >= 0: a 429 echoes the wait_ms it gave up after */
    int bucket;                      /* >= 0: the stock bucket tried last (svc_bucket.h) */
    char detail[LC_ERRSTR_LEN + 64]; /* why, for every outcome but the sale */
} svc_order;

/* Starts o for r: nothing known yet (no order id, no stock left, no lock
 * fields, busy_wait_ms -1, bucket -1). */
void svc_order_init(svc_order *o, const svc_req *r);

/* The reply to a purchase that ended with res, JSON text:
 * {"ok","error"?,"detail"?,"mode","pipeline","sku","order_id"?,
 *  "stock_left"?,"lock_wait_ms"?,"lock_lost"?,"deleted_other_lock"?,
 *  "fence"?,"wait_ms"?,"bucket"?,"instance"} — the fields with "?" only when o has
 * them (service/README.md lists every one). malloc'd, the caller frees it;
 * NULL when out of memory. */
char *svc_order_reply(const svc_order *o, purchase_result res);

/* The order record the commit appends to miaosha:{sku}:orders, JSON text:
 * {"order_id","sku","user","mode","instance","received_ms","ts_ms",
 *  "lock_wait_ms","stock_before","fence"?}, received_ms and ts_ms wall
 * clock in ms (when the request arrived, and now: just before the commit).
 * With open_end the record stops after "stock_before": — the lua script
 * appends the stock it read and the closing brace — and stock_before is
 * ignored. malloc'd, the caller frees it; NULL when out of memory. */
char *svc_order_record(const svc_order *o, long long stock_before, bool open_end);

#endif
