/* svc_stats.h — request counters and latency histograms, rendered as
 * GET /stats JSON and GET /metrics Prometheus text.
 *
 * Threads: every function may be called from any thread, concurrently.
 * The counters are C11 atomics, so the request path takes no lock; only
 * the first purchase of a new SKU takes a mutex to give it a label. A
 * rendering reads the counters one by one while requests go on: each
 * counter is exact, the set of them is not one instant's snapshot.
 *
 * Units: durations are passed in microseconds (monotonic, svc_clock.h);
 * /stats shows milliseconds (latency_ms, lock_wait_ms, 3 decimals) and
 * uptime_s in seconds; /metrics shows seconds, as Prometheus expects.
 *
 * Percentiles come from a fixed log-scale histogram per mode: four buckets
 * per power of two of microseconds (relative error <= 25 %, reported as the
 * bucket's upper bound, capped by the exact maximum). Prometheus histograms
 * are kept per (mode, sku) with fixed second-based bounds; at most
 * SVC_STATS_SKUS distinct skus get their own label, later ones are counted
 * under sku="_other". A request rejected by validation never takes a
 * label.
 *
 * Errors: recording never fails (an out-of-range mode, slot or outcome is
 * ignored); a rendering returns NULL when memory runs out. Nothing here
 * logs or exits. Counters live for the process (static storage) and are
 * never reset.
 */
#ifndef MIAOSHA_SVC_STATS_H
#define MIAOSHA_SVC_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "svc.h"
#include "svc_mode.h"

#define SVC_STATS_SKUS 64

/* How a purchase ended, as /stats and /metrics count it (svc_outcome.c
 * maps each of its results to one). */
typedef enum {
    SVC_OUT_SOLD = 0,      /* 200 */
    SVC_OUT_SOLD_OUT,      /* 409 */
    SVC_OUT_LOCK_BUSY,     /* 429 */
    SVC_OUT_ERROR,         /* 503: Redis unavailable/error, overloaded, shutting down */
    SVC_OUT_BAD_REQUEST,   /* rejected by validation (400/401/403) */
    SVC_OUT_CLIENT_GONE,   /* 499: the client left before the lock or the commit;
                              409 step_abandoned: a stepped purchase's driver left */
    SVC_OUT_STOCK_RESET,   /* 409 stock_reset: PUT /stock voided the commit */
    SVC_OUT_FENCED_OUT,    /* 409 fenced_out: the fence refused a stale holder */
    SVC_OUT_LIMIT_REACHED, /* 409 limit_reached: the user holds purchase.limit_per_user */
    SVC_OUT_REPLAYED,      /* an Idempotency-Key replay: the stored reply again */
    SVC_OUT_IDEM_CONFLICT, /* 409 in_progress, 422 idempotency_key_reused */
    SVC_OUT_UNKNOWN_SKU,   /* 404 unknown_sku: the SKU was never stocked */
    SVC_OUT_COUNT
} svc_outcome;

/* Starts the uptime clock. Main thread, once, before the first request. */
void svc_stats_init(void);
/* The label slot of sku: 0..SVC_STATS_SKUS-1, or SVC_STATS_SKUS for _other.
 * Gives a new sku the next free label: only for validated purchases. Any
 * thread; lock-free for a sku that has a label, else takes a mutex. */
int svc_stats_sku_slot(const char *sku);
/* The label slot sku already has, or SVC_STATS_SKUS (_other); never takes a
 * label (for rejected requests, so they cannot use up the 64). Any thread,
 * lock-free. */
int svc_stats_sku_find(const char *sku);
/* One finished purchase. slot: from svc_stats_sku_slot or _find.
 * lock_lost / deleted_other_lock: 0 or 1, as in the response. latency_us:
 * from the request's arrival to its reply (< 0 counts as 0; not recorded
 * for SVC_OUT_BAD_REQUEST). lock_wait_us: time spent acquiring when the
 * purchase got the lock or gave up with a 429; < 0 otherwise (rejected, no
 * connection, Redis error or shutdown while acquiring, and every purchase
 * of a mode that takes no lock: lua). */
void svc_stats_purchase(svc_mode mode, int slot, svc_outcome out, int lock_lost,
                        int deleted_other_lock, int64_t latency_us, int64_t lock_wait_us);
/* One HTTP response with this status (600 and above are ignored;
 * /metrics shows 100..599). */
void svc_stats_http(unsigned status);
/* One Redis failure seen by a request (miaosha_redis_errors_total). */
void svc_stats_redis_error(void);
/* One commit a Redis Cluster slot migration held back (nothing written)
 * that the purchase reads, decides and sends again under its lock
 * (svc_section.c; /stats cluster.held_back_commits,
 * miaosha_redis_cluster_held_back_commits_total). Any thread. */
void svc_stats_held_back(void);
/* Purchases handed to workers and not finished (gauge): +1 when one is
 * queued, -1 when its job is done. */
void svc_stats_inflight(int delta);
/* One purchase answered 409 sold_out from the local sold-out flag, without
 * Redis (miaosha_sold_out_local_total; it is counted as sold_out too). */
void svc_stats_sold_out_local(void);
/* One batch of n lua scripts sent in one write (svc_lua_batch):
 * miaosha_lua_batches_total and miaosha_lua_batched_purchases_total. Any
 * thread. */
void svc_stats_lua_batch(int n);

/* The GET /stats body: {"ok":true,"instance":...,"master":... (the Redis
 * master in use, svc_health_master),"master_switches":...,"cluster":{...}
 * (the slot map and redirect counters, on a Redis Cluster only),
 * "uptime_s":...,"redis_errors":...,"inflight":...,"sold_out_local":...,
 * "orphan_locks":{"adopted","released","unresolved"} (lockcore's orphan
 * cleanup, lc_stats.orphans_*; zeros when client is NULL),"modes":{<mode>:
 * {requests, one count per outcome (sold, sold_out, lock_busy, errors,
 * bad_requests, client_gone, stock_reset, fenced_out, limit_reached,
 * replayed, idempotency_conflicts, unknown_sku), lock_lost,
 * deleted_other_lock, latency_ms and lock_wait_ms {count,p50,p90,p99,max}}}
 * (the offered modes only: no redlock without redlock.nodes),"buckets":{...}}
 * (svc_bucket_stats_json: the sales per stock bucket and the empty buckets
 * probed). instance and master are JSON-escaped. Returns a malloc'd
 * NUL-terminated string the caller frees, with its length in *len; NULL on
 * out of memory (*len untouched). */
char *svc_stats_json(const char *instance, lc_client *client, size_t *len);
/* The GET /metrics body (Prometheus text format 0.0.4): the per-(mode, sku)
 * counters and histograms, HTTP responses by status, Redis errors,
 * redis_up (given: the probe's status), in-flight purchases, when client
 * is not NULL lockcore's lc_client_stats, then the per-SKU audit gauges
 * (svc_gauges_render), the process_* series and miaosha_build_info
 * (svc_process_render). Ownership and NULL as svc_stats_json. */
char *svc_stats_prometheus(lc_client *client, int redis_up, size_t *len);

#endif
