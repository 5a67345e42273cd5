/* svc_store.h — how the critical section reads the stock and writes a sale.
 *
 * Two stores behind one interface, so the section (svc_section.c) reads
 * the same for every lock mode:
 *   svc_store_plain   the seckill walkthrough's read and write (docs/locks.md), non-atomic
 *                     on purpose (svc_store.c): WATCH the stock's epoch,
 *                     GET stock; later MULTI, SET stock <read-1>, INCR
 *                     sold, RPUSH orders <record>, EXEC. Between the two
 *                     only the lock keeps another buyer out: that gap is
 *                     the race the lock modes exist to close.
 *   svc_store_fenced  the same read and write through the fence
 *                     (svc_fence.c): the store itself refuses a holder
 *                     whose fencing token is no longer the newest.
 * The section picks one by lc_mode_info.issues_fence.
 *
 * A store only formats commands and reads their replies: no I/O, no
 * logging. Any thread; the pipes and replies are the caller's.
 */
#ifndef MIAOSHA_SVC_STORE_H
#define MIAOSHA_SVC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "svc.h"
#include "svc_outcome.h"

/* The most replies one read or one write of a store produces. */
#define SVC_STORE_MAX_REPLIES 8

/* What a read found. */
typedef struct svc_stock_read {
    long long stock;          /* the stock; a SKU never stocked reads 0 */
    bool stocked;             /* the stock key exists; false: a SKU never stocked (its
                                 reset, PUT /stock, creates the key), 404 unknown_sku */
    long long bought;         /* the user's orders of this SKU; 0 without a user */
    char epoch[SVC_UUID_LEN]; /* the epoch the read saw: fenced's write
                                 checks it, and so does a purchase holding a
                                 reservation (svc_section.h) */
} svc_stock_read;

/* What a sale writes, in one atomic step. */
typedef struct svc_sale {
    const char *tag;       /* the stock's hash tag: the SKU or one of its
                              buckets (svc_keys.h) */
    int64_t fence;         /* fenced: the holder's fencing token */
    long long stock_after; /* the stock the read found, minus one */
    const char *record;    /* the order record (svc_order_record) */
    const char *user;      /* NULL, or HINCRBY buyers user 1 */
    const char *idem_key;  /* NULL, or SET idem_key idem_val PX idem_ttl_ms: */
    const char *idem_val;  /* the Idempotency-Key's stored reply, written */
    long long idem_ttl_ms; /* with the order (svc_idem.h) */
} svc_sale;

typedef struct svc_store {
    /* Appends the read of the stock under tag (a SKU, or one of its buckets:
     * svc_keys.h) to p, and with user (NULL: none) that user's order count
     * there in the same step; with epoch the stock's epoch too (fenced
     * always reads it). fence: the reader's fencing
     * token (fenced; 0 reads under the counter's current value, for the
     * read that rides in the acquire's write before the token is known).
     * eval: a script goes as its text (EVAL) rather than its SHA1. Returns
     * the number of replies it adds (1..SVC_STORE_MAX_REPLIES), or -1 when
     * out of memory. */
    int (*append_read)(lc_pipe *p, const char *tag, const char *user, bool epoch, int64_t fence,
                       bool eval);
    /* Reads the n replies of that read (reps[i] NULL: it never came; none
     * is freed). true with *out filled; else false with the ending in *end
     * and its reason in detail (len bytes) — for a missing reply
     * PR_REDIS_UNAVAILABLE with detail left to the caller, who knows the
     * connection's error. epoch and fence as for append_read (the holder's
     * token). */
    bool (*parse_read)(redisReply *const *reps, int n, bool epoch, int64_t fence,
                       svc_stock_read *out, purchase_result *end, char *detail, size_t len);
    /* Appends the sale's write to p, valid only while what rd read still
     * holds (the epoch; fenced: the mark). eval as for append_read. Returns
     * the number of replies it adds, or -1 when out of memory. */
    int (*append_write)(lc_pipe *p, const svc_sale *s, const svc_stock_read *rd, bool eval);
    /* Classifies the n replies of that write: PR_SOLD, or why not (detail,
     * len bytes). *written says whether the order may exist all the same —
     * its id then goes back with the 503 so the client can look for it:
     * the outcome is unknown (a missing reply: PR_REDIS_UNAVAILABLE, detail
     * left to the caller) or some writes applied and others failed
     * (PR_REDIS_ERROR). */
    purchase_result (*parse_write)(redisReply *const *reps, int n, const svc_sale *s, bool *written,
                                   char *detail, size_t len);
} svc_store;

extern const svc_store svc_store_plain;  /* svc_store.c */
extern const svc_store svc_store_fenced; /* svc_fence.c */

/* true when rep is Redis's NOSCRIPT error: the script cache was flushed or
 * Redis restarted, nothing ran, and the command may go again as EVAL. */
bool svc_store_noscript(const redisReply *rep);

#endif
