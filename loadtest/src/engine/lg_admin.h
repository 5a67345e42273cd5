/* lg_admin.h — the few admin calls of a run, through libcurl (blocking,
 * calling thread): reset the stock, read the audit, page through the
 * orders; plus a generic one-shot request used by the matrix's probes.
 * curl_global_init must have been called (main does it). Return 0 or -1
 * with a reason in err; nothing is printed.
 */
#ifndef MIAOSHA_LG_ADMIN_H
#define MIAOSHA_LG_ADMIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* The most stock buckets a SKU is split into (the service's bound). */
#define LG_BUCKETS_MAX 64

typedef struct lg_audit {
    int64_t stock, initial, sold, orders, oversold, undersold;
    /* A SKU split into stock buckets: each bucket's initial stock and
     * stock left, in bucket order (the audit's "buckets"); nbuckets is 0
     * for one stock. A timeline counts oversold units bucket by bucket
     * against these, not against a guess from the trace. */
    int nbuckets;
    struct {
        int64_t initial, stock;
    } bucket[LG_BUCKETS_MAX];
} lg_audit;

/* A growable set of order ids (each < 64 bytes). */
typedef struct lg_idset {
    char (*ids)[64];
    size_t n, cap;
} lg_idset;

/* Appends id (its first len bytes, at most 63). 0, or -1 when out of
 * memory (s unchanged). Not thread-safe: one owner per set. */
int lg_idset_add(lg_idset *s, const char *id, size_t len);
void lg_idset_sort(lg_idset *s);
/* After sort: how many entries repeat an earlier one. */
size_t lg_idset_duplicates(const lg_idset *s);
/* After sort: 1 when id is present. */
int lg_idset_contains(const lg_idset *s, const char *id);
void lg_idset_free(lg_idset *s);

/* One request. body may be NULL; bearer may be NULL or "". *resp (malloc'd,
 * NUL-terminated, free() it) may be NULL when the caller does not want it.
 * timeout_ms bounds the whole request (<= 0: 10 s); the connect alone is
 * bounded by 2 s. Returns 0 when an HTTP response arrived (any status, in
 * *status), -1 with the reason in err on a transport failure (connection
 * refused, reset, timeout), a response body over 64 MiB, or when libcurl
 * cannot start; *status is then 0 and *resp NULL. Any thread. */
int lg_http_call(const char *method, const char *url, const char *bearer, const char *body,
                 long timeout_ms, long *status, char **resp, char *err, size_t errlen);
/* The same with one more request header line, "Name: value" (NULL = none),
 * e.g. an Idempotency-Key. */
int lg_http_call_hdr(const char *method, const char *url, const char *bearer, const char *header,
                     const char *body, long timeout_ms, long *status, char **resp, char *err,
                     size_t errlen);

/* Names the flag (a signal handler's) that abandons a stock reset in
 * flight: once *flag is non-zero, lg_admin_reset and lg_admin_reset_buckets
 * give up within about a second (libcurl's progress callback) and return -1
 * with "interrupted" in err; a reset not yet begun is not sent. The reads
 * (audit, orders) are not abandoned, so a run interrupted after its burst
 * still reports its audit. NULL (the default) abandons nothing. Call it
 * once, before any thread makes an admin call. */
void lg_admin_cancel_on(volatile sig_atomic_t *flag);

/* PUT {base}/stock/{sku} {"stock":N}: must answer 2xx. */
int lg_admin_reset(const char *base, const char *sku, int64_t stock, const char *token, char *err,
                   size_t errlen);
/* The same with {"stock":N,"buckets":K}: the stock split into K stock
 * buckets (1..64; 0 sends no buckets, as lg_admin_reset). */
int lg_admin_reset_buckets(const char *base, const char *sku, int64_t stock, int buckets,
                           const char *token, char *err, size_t errlen);
/* GET {base}/stock/{sku} into *a. This and lg_admin_orders retry a
 * transport failure or a 5xx (5 attempts, 100/200/400/800 ms apart: a burst may
 * end inside a Redis stall); -1 with the last reason in err. */
int lg_admin_audit(const char *base, const char *sku, lg_audit *a, char *err, size_t errlen);
/* The whole order listing's bound (ms) that lg_run and the matrix pass to
 * lg_admin_orders: a million orders is a thousand pages, seconds on a
 * loopback; five minutes leaves room for a slow server and still ends. */
#define LG_ORDERS_LIST_MS 300000

/* GET {base}/orders/{sku}?offset=&limit=1000 until exhausted, adding every
 * record's order_id to ids. Accepts a JSON array of records or an object
 * holding one ("orders"/"items"), records as objects or JSON strings.
 * Bounded as a whole by total_ms (> 0): each page is retried as
 * lg_admin_audit's GET, within what is left of total_ms (20 s at most), and
 * no page is begun once total_ms has passed — a server that keeps answering
 * full pages cannot hold the caller longer. 0, or -1 with the reason in
 * err (transport, a status other than 200, no order list, a record without
 * an order_id, out of time; ids then holds the pages already read). */
int lg_admin_orders(const char *base, const char *sku, long total_ms, lg_idset *ids, char *err,
                    size_t errlen);

/* Extracts what a purchase response says: order_id (copied, < 64 bytes,
 * "" when absent), error code ("" when absent), lock_lost and
 * deleted_other_lock (1 when true, else 0). body need not be NUL-terminated.
 * Returns 0, or -1 when it is not a JSON object. */
int lg_parse_purchase(const char *body, size_t len, char order_id[64], char error[32],
                      int *lock_lost, int *deleted_other_lock);

/* 1 when a purchase response says "local":true (a 409 sold_out answered
 * from the instance's local sold-out flag, without Redis or a worker),
 * else 0, also for a body that is not JSON. body need not be
 * NUL-terminated. */
int lg_purchase_local(const char *body, size_t len);

#endif
