/* svc_fence.h — the fenced mode's read and write (svc_fence.c), the two
 * steps of the critical section that go through the fence.
 *
 * The fenced mode takes token's lock and, with it, a fencing token from
 * the lock core (lc_guard_fence: a number that grows with every grant of
 * miaosha:{sku}:fence). A lease cannot stop a holder that pauses past it;
 * the store can, if it checks the number (Kleppmann, "How to do distributed
 * locking"). Here the store is Redis, and both halves of the demo's
 * non-atomic read-then-write check it:
 *   read   raises the SKU's high-water mark miaosha:{sku}:fence_hwm to the
 *          reader's token, or refuses a reader whose token is below it;
 *   write  applies the lock modes' three writes only while the mark still
 *          equals the writer's token, else writes nothing: 409 fenced_out.
 * Fencing only the write would not do: "A reads, B acquires and reads, A
 * writes, B writes" passes a write-only check for both (A's token is the
 * highest the store has seen when A writes) and B writes the stock A
 * already decremented. With the read fenced, B's read moves the mark past
 * A, and A's write is refused. docs/locks.md, "Fencing", tells the story.
 *
 * The scripts (scripts/fence_read.lua, fence_write.lua) are compiled in
 * with their SHA1 and sent as EVALSHA; the caller re-sends one as EVAL
 * (eval = 1) when Redis answers NOSCRIPT (svc_fence_noscript), or sends it
 * as EVAL at once where a NOSCRIPT answer would come too late to send it
 * again (the write riding before the lock's release).
 *
 * Everything here only formats commands and reads replies: no I/O, no
 * logging. Any thread; the lc_pipe is the caller's.
 */
#ifndef MIAOSHA_SVC_FENCE_H
#define MIAOSHA_SVC_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include "svc_outcome.h"

/* Appends the fenced read of sku's stock to p: EVALSHA (eval: EVAL with the
 * script's text) of fence_read.lua with the fence counter, the high-water
 * mark, stock, epoch and buyers keys. token >= 1 is the reader's fencing
 * token; 0 reads under the counter's current value, for the read that
 * rides in the acquire's write before the token is known (lockcore.h,
 * lc_acquire_pipe: right after a grant the counter is the new holder's
 * token). user (NULL: none) also reads that user's order count
 * (purchase.limit_per_user), in the same step as the stock. LC_OK, or
 * lc_pipe_append's LC_MISUSE / LC_NOMEM. */
lc_status svc_fence_append_read(lc_pipe *p, const char *sku, int64_t token, const char *user,
                                int eval);

/* What a fenced read returned. */
typedef struct svc_fence_read {
    int64_t token;    /* the token the read ran under */
    int64_t mark;     /* fenced out: the high-water mark that refused it */
    long long stock;  /* the stock read; 0 when unset */
    char epoch[32];   /* the epoch read, as text ("" when unset), for the write */
    long long bought; /* the user's orders (0 when no user was given) */
} svc_fence_read;

/* Classifies the read's reply (NULL: none came). PR_COUNT when the stock
 * was read (out filled); PR_FENCED_OUT (out->token and out->mark set; the
 * reason in detail); PR_BAD_STOCK_VALUE; PR_REDIS_ERROR for an error reply
 * or a reply of the wrong shape (detail names it); PR_REDIS_UNAVAILABLE for
 * NULL (detail left to the caller). len: detail's size in bytes. */
purchase_result svc_fence_parse_read(const redisReply *rep, svc_fence_read *out, char *detail,
                                     size_t len);

/* What a fenced write stores besides its three writes, in the same step,
 * as the lock modes' MULTI does; NULL fields store nothing. */
typedef struct svc_fence_extra {
    const char *user;      /* HINCRBY buyers user 1 (limit_per_user, the audit) */
    const char *idem_key;  /* SET idem_key idem_val PX idem_ttl_ms: the */
    const char *idem_val;  /* Idempotency-Key's stored reply (svc_idem.h) */
    long long idem_ttl_ms; /* > 0 when idem_key is set */
} svc_fence_extra;

/* Appends the fenced write to p: EVALSHA (eval: EVAL) of fence_write.lua —
 * SET stock stock_after, INCR sold, RPUSH orders rec (reclen bytes) and
 * x's writes (x may be NULL), only when token is still sku's high-water
 * mark and the epoch is still epoch (the text svc_fence_parse_read gave).
 * LC_OK, LC_MISUSE, LC_NOMEM. */
lc_status svc_fence_append_write(lc_pipe *p, const char *sku, int64_t token, const char *epoch,
                                 long long stock_after, const char *rec, size_t reclen,
                                 const svc_fence_extra *x, int eval);

/* Classifies the write's reply (non-NULL): PR_SOLD; PR_FENCED_OUT (a holder
 * with a larger token has read since; detail says which mark refused
 * token); PR_STOCK_RESET (PUT /stock since the read); PR_REDIS_ERROR (an
 * error reply, a value of the wrong kind in sold or orders, a reply of the
 * wrong shape). Nothing was written on every result but PR_SOLD. */
purchase_result svc_fence_parse_write(const redisReply *rep, int64_t token, char *detail,
                                      size_t len);

/* 1 when rep is Redis's NOSCRIPT error (the script cache was flushed or
 * Redis restarted: the script did not run, send it again with eval = 1). */
int svc_fence_noscript(const redisReply *rep);

#endif
