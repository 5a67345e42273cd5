/* svc_stats.h — request counters and latency histograms (C11 atomics, no
 * locks on the request path), rendered as GET /stats JSON and GET /metrics
 * Prometheus text.
 *
 * Percentiles come from a fixed log-scale histogram per mode: four buckets
 * per power of two of microseconds (relative error <= 25 %, reported as the
 * bucket's upper bound, capped by the exact maximum). Prometheus histograms
 * are kept per (mode, sku) with fixed second-based bounds; at most
 * SVC_STATS_SKUS distinct skus get their own label, later ones are counted
 * under sku="_other". A request rejected by validation never takes a
 * label. */
#ifndef MIAOSHA_SVC_STATS_H
#define MIAOSHA_SVC_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "svc.h"

#define SVC_STATS_SKUS 64

typedef enum {
    SVC_OUT_SOLD = 0,
    SVC_OUT_SOLD_OUT,
    SVC_OUT_LOCK_BUSY,
    SVC_OUT_ERROR,        /* 503: Redis unavailable/error, overloaded, shutting down */
    SVC_OUT_BAD_REQUEST,  /* rejected by validation (400/403) */
    SVC_OUT_COUNT
} svc_outcome;

void svc_stats_init(void);
/* The label slot of sku: 0..SVC_STATS_SKUS-1, or SVC_STATS_SKUS for _other.
 * Gives a new sku the next free label: only for validated purchases. Any
 * thread; lock-free for a sku that has a label, else takes a mutex. */
int svc_stats_sku_slot(const char *sku);
/* The label slot sku already has, or SVC_STATS_SKUS (_other); never takes a
 * label (for rejected requests, so they cannot use up the 64). Any thread,
 * lock-free. */
int svc_stats_sku_find(const char *sku);
/* One finished purchase. lock_lost / deleted_other_lock: 0 or 1, as in the
 * response. lock_wait_us: time spent acquiring when the purchase got the
 * lock or gave up with a 429; < 0 otherwise (rejected, no connection,
 * Redis error or shutdown while acquiring). */
void svc_stats_purchase(lc_mode mode, int slot, svc_outcome out, int lock_lost,
                        int deleted_other_lock, int64_t latency_us, int64_t lock_wait_us);
void svc_stats_http(unsigned status);
void svc_stats_redis_error(void);
/* Purchases handed to workers and not finished (gauge). */
void svc_stats_inflight(int delta);

/* malloc'd renderings (NULL on allocation failure); *len set. */
char *svc_stats_json(const char *instance, size_t *len);
char *svc_stats_prometheus(lc_client *client, int redis_up, size_t *len);

#endif
