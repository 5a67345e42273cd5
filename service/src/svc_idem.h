/* svc_idem.h — the Idempotency-Key request header of a purchase, in every
 * mode: a retry of a purchase whose outcome the client never saw (its
 * timeout, a dropped connection) gets that outcome again instead of buying
 * twice.
 *
 * First the key is claimed for what it buys: miaosha:idem:<key> =
 * "<sku>|<fingerprint>" (SET NX GET, kept purchase.idempotency_ttl_s plus
 * the marker's lifetime, so it outlives the stored outcome), so a
 * key sent again for another SKU, mode or user is refused before anything
 * of a SKU is touched. Then one Redis string per key and SKU,
 * miaosha:{sku}:idem:<key> (the SKU's hash tag, so the lua script and the
 * lock modes' MULTI may write it with the order):
 *   "P|<fingerprint>|<token>"            in progress: SET NX before the
 *                                        purchase starts, for at most the
 *                                        longest a purchase can take
 *   "D|<fingerprint>|<status>|<body>"    done: the reply, kept
 *                                        purchase.idempotency_ttl_s
 * The fingerprint is "<mode>/<user>": with the SKU, the parameters that
 * say what is bought (work_ms, wait_ms, lease_ms and the like say how, and
 * may differ on a retry); a key seen again with another SKU or fingerprint
 * is 422 idempotency_key_reused.
 *
 * A sale's outcome is written in the same atomic step as the order (the
 * lock modes' MULTI/EXEC, the lua script), so there is never an order
 * without its outcome. A SKU split into stock buckets (svc_bucket.h)
 * sells in a bucket whose tag is not the SKU's: the sale writes the
 * outcome into the bucket's own copy of the key, miaosha:{<bucket tag>}:
 * idem:<key>, with the order, and the purchase then stores it under the
 * SKU's key (svc_idem_end) for the replays. A crash between the two
 * leaves the order and its outcome in the bucket and the SKU's key in
 * progress: a retry answers 409 in_progress until the marker expires, then
 * finds the key claimed before and looks in every bucket's copy
 * (svc_idem_begin) — the order is neither lost nor bought twice. sold_out and limit_reached are
 * stored too (they are the answer to that request; a replay after a reset still answers them).
 * Every other ending — 429 lock_busy, 409 stock_reset, 499, 503 — removes
 * the marker instead, so a retry with the same key may still buy.
 *
 * Threads: every function runs on the worker that owns the request and
 * uses its lc_conn.
 */
#ifndef MIAOSHA_SVC_IDEM_H
#define MIAOSHA_SVC_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "svc_bucket.h"
#include "svc_outcome.h"
#include "svc_reply.h"
#include "svc_trace.h"

#define SVC_IDEM_RKEY_MAX (SVC_KEY_MAX + SVC_IDEM_KEY_MAX + 8)
#define SVC_IDEM_FP_MAX (SVC_SKU_MAX + 24)

typedef struct svc_idem {
    int on;                       /* the marker is ours: end with svc_idem_end */
    char rkey[SVC_IDEM_RKEY_MAX]; /* miaosha:{sku}:idem:<key> */
    char fp[SVC_IDEM_FP_MAX];     /* "<mode>/<user>" */
    char marker[SVC_IDEM_FP_MAX + SVC_UUID_LEN + 4];
} svc_idem;

/* The key's record under tag (a SKU, or one of its buckets),
 * "miaosha:{<tag>}:idem:<key>", into buf (SVC_IDEM_RKEY_MAX bytes). Any
 * thread. */
void svc_idem_key(char *buf, const char *tag, const char *key);

/* How long a stored outcome is kept, in ms (purchase.idempotency_ttl_s). */
static inline int64_t svc_idem_ttl_ms(const cfg_config *c)
{
    return c->purchase.idempotency_ttl_s * 1000;
}

/* 1 when v is a valid Idempotency-Key: 1..SVC_IDEM_KEY_MAX bytes of
 * [A-Za-z0-9_:.-]; else 0 (NULL included). Any thread. */
int svc_idem_valid(const char *v);

/* Claims r's key (r->idem, not empty) for r's SKU, mode and user (the first
 * claim stays for purchase.idempotency_ttl_s plus marker_ms), then sets the key's
 * in-progress marker for r's SKU with a lifetime of marker_ms (SET NX PX
 * ... GET): two round trips. For a SKU in buckets (lay, NULL or one
 * bucket: none) a key claimed before whose marker is free again is looked
 * for in every bucket's copy, on a retry only: one round trip per
 * LC_PIPE_MAX buckets (per bucket on a Redis Cluster), and one more to
 * store an outcome found there under the SKU's key (SET XX) before it is
 * answered. Returns
 *    0  the marker is ours: go on, and end with svc_idem_end (id->on = 1);
 *    1  the key's stored reply is in r (status and body as first sent,
 *       r->replayed set): answer it as it is;
 *   -1  refused, *res set: PR_IN_PROGRESS (another request with the key is
 *       running), PR_KEY_REUSED (claimed for another SKU, or stored with
 *       another fingerprint),
 *       PR_REDIS_UNAVAILABLE or PR_REDIS_ERROR, with the reason in detail
 *       (len bytes). Nothing was bought. */
int svc_idem_begin(svc_idem *id, svc_req *r, lc_conn *conn, int64_t marker_ms,
                   const svc_layout *lay, purchase_result *res, char *detail, size_t len);

/* What svc_idem_begin does with a value found under the key (the lua script
 * returns the one it finds when it is not this request's marker): 1 with
 * the stored reply in r, or -1 with *res PR_IN_PROGRESS or PR_KEY_REUSED
 * (detail as above). */
int svc_idem_found(const svc_idem *id, svc_req *r, const char *value, size_t vlen,
                   purchase_result *res, char *detail, size_t len);

/* A replayed sale (r->replayed, status 200) under redis.wait_replicas > 0:
 * its first request may have answered 503 not_replicated, and a 200 must
 * still mean that the order reached the replicas. The stored value is
 * written again unchanged (SET XX KEEPTTL: a write on this connection,
 * after the order in the replication stream), then WAIT. 0 when there is
 * nothing to wait for or the replicas have it; -1 when not: r's reply is
 * replaced by 503 not_replicated naming the stored order id. The worker
 * thread that owns conn. */
int svc_idem_replay_replicated(const svc_idem *id, svc_req *r, lc_conn *conn);

/* Ends a purchase answered with its key's stored reply (in r), for every
 * mode: svc_idem_replay_replicated, then its trace record (no order of its
 * own; error "replayed", or "not_replicated" when the replicas lack the
 * order) and its stats under label slot (svc_stats_sku_slot): replayed,
 * or a Redis error. The worker thread that owns conn and tr. */
void svc_idem_replayed(const svc_idem *id, svc_req *r, lc_conn *conn, svc_trace *tr, int slot);

/* The start of the stored value of a reply with this status,
 * "D|<fingerprint>|<status>|", for a caller that writes it with the order
 * (the body follows). Into buf (len bytes). */
void svc_idem_done_prefix(const svc_idem *id, unsigned status, char *buf, size_t len);

/* Ends a request whose marker is ours (id->on; otherwise does nothing):
 * store = 1 overwrites the marker with the reply (status, body of blen
 * bytes) for purchase.idempotency_ttl_s (SET XX: a marker that expired
 * meanwhile is not brought back); store = 0, or body NULL, deletes the
 * marker when it is still this request's (a sale's stored outcome is never
 * deleted). A failure is logged, not returned: the marker then expires by
 * itself. */
void svc_idem_end(svc_idem *id, const svc_req *r, lc_conn *conn, int store, unsigned status,
                  const char *body, size_t blen);

/* 1 for the outcomes that are the answer to a keyed request and are
 * stored (sold, sold_out, limit_reached), else 0. Any thread. */
int svc_idem_stored_outcome(purchase_result res);

#endif
