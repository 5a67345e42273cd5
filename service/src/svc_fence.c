/* svc_fence.c — the fenced mode's store (svc_store_fenced, svc_store.h):
 * the two steps of the critical section that go through the fence.
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
 * with their SHA1 and sent as EVALSHA; the section re-sends one as EVAL
 * when Redis answers NOSCRIPT, or sends it as EVAL at once where a
 * NOSCRIPT answer would come too late to send it again (the write riding
 * before the lock's release).
 *
 * Like every store it only formats commands and reads replies.
 */
#include "svc_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_keys.h"
#include "svc_scripts.h"

static int fenced_append_read(lc_pipe *p, const char *tag, const char *user, bool with_epoch,
                              int64_t token, bool eval)
{
    (void)with_epoch; /* the script always reads it: the write checks it */
    char fence[SVC_KEY_MAX], mark[SVC_KEY_MAX], stock[SVC_KEY_MAX], epoch[SVC_KEY_MAX],
        buyers[SVC_KEY_MAX], t[24] = "";
    svc_key(fence, tag, "fence");
    svc_key(mark, tag, "fence_hwm");
    svc_key(stock, tag, "stock");
    svc_key(epoch, tag, "epoch");
    svc_key(buyers, tag, "buyers");
    if (token > 0)
        snprintf(t, sizeof t, "%lld", (long long)token);
    const char *argv[] = {eval ? "EVAL" : "EVALSHA",
                          eval ? SVC_SCRIPT_FENCE_READ : SVC_SCRIPT_FENCE_READ_SHA,
                          "5",
                          fence,
                          mark,
                          stock,
                          epoch,
                          buyers,
                          t,
                          user ? user : ""};
    return lc_pipe_append_argv(p, (int)(sizeof argv / sizeof argv[0]), argv, NULL) == LC_OK ? 1
                                                                                            : -1;
}

/* An integer as GET answers it (a string) or a script passes it on. */
static int as_ll(const redisReply *e, long long *out)
{
    if (e->type == REDIS_REPLY_INTEGER) {
        *out = e->integer;
        return 0;
    }
    if (e->type != REDIS_REPLY_STRING)
        return -1;
    char *end = NULL;
    *out = strtoll(e->str, &end, 10);
    return end != e->str && *end == '\0' ? 0 : -1;
}

/* The read script's reply, {1, token, stock, epoch, bought} when it read
 * under token or {0, token, mark} when the mark refused token, into *out
 * and *token: true when read, else false with the ending in *end. A pipelined
 * read ran under the fence counter's value: when that is not this holder's
 * token, a later holder took the lock between the acquire and the read,
 * and this one is fenced out. */
static bool fenced_parse_read(redisReply *const *reps, int n, bool with_epoch, int64_t fence,
                              svc_stock_read *out, purchase_result *end, char *detail, size_t len)
{
    (void)n;
    (void)with_epoch;
    const redisReply *rep = reps[0];
    memset(out, 0, sizeof *out);
    *end = PR_REDIS_ERROR;
    if (rep == NULL) {
        *end = PR_REDIS_UNAVAILABLE;
        return false;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(detail, len, "fenced read: %.200s", rep->str);
        return false;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        snprintf(detail, len, "fenced read: unexpected reply");
        return false;
    }
    long long token = rep->element[1]->integer;
    if (rep->element[0]->integer == 0) {
        long long mark = 0;
        (void)as_ll(rep->element[2], &mark);
        snprintf(detail, len,
                 "fencing token %lld is below the stock's high-water mark %lld: a later lock "
                 "holder has read the stock (this holder's lease ran out); nothing was written",
                 token, mark);
        *end = PR_FENCED_OUT;
        return false;
    }
    if (rep->elements != 5) {
        snprintf(detail, len, "fenced read: unexpected reply");
        return false;
    }
    const redisReply *st = rep->element[2], *ep = rep->element[3], *bo = rep->element[4];
    if (bo->type != REDIS_REPLY_NIL && as_ll(bo, &out->bought) != 0) {
        snprintf(detail, len, "fenced read: the buyers hash holds a non-integer count");
        return false;
    }
    out->stocked = st->type != REDIS_REPLY_NIL;
    if (out->stocked && as_ll(st, &out->stock) != 0) {
        snprintf(detail, len, "stock key holds a non-integer value");
        *end = PR_BAD_STOCK_VALUE;
        return false;
    }
    if (ep->type == REDIS_REPLY_STRING)
        snprintf(out->epoch, sizeof out->epoch, "%s", ep->str);
    if (token != fence) {
        snprintf(detail, len,
                 "the stock was read under fencing token %lld, not this holder's %lld: a later "
                 "holder took the lock before the read; nothing was written",
                 token, (long long)fence);
        *end = PR_FENCED_OUT;
        return false;
    }
    return true;
}

/* The sale's three writes and its extras (the buyer's count, the
 * Idempotency-Key's reply), applied by the script only while s->fence is
 * still the SKU's high-water mark and the epoch is the one the read saw. */
static int fenced_append_write(lc_pipe *p, const svc_sale *s, const svc_stock_read *rd, bool eval)
{
    const char *tag = s->tag;
    char mark[SVC_KEY_MAX], ep[SVC_KEY_MAX], stock[SVC_KEY_MAX], sold[SVC_KEY_MAX],
        orders[SVC_KEY_MAX], buyers[SVC_KEY_MAX], t[24], after[24], ttl[24] = "";
    svc_key(mark, tag, "fence_hwm");
    svc_key(ep, tag, "epoch");
    svc_key(stock, tag, "stock");
    svc_key(sold, tag, "sold");
    svc_key(orders, tag, "orders");
    svc_key(buyers, tag, "buyers");
    snprintf(t, sizeof t, "%lld", (long long)s->fence);
    snprintf(after, sizeof after, "%lld", s->stock_after);
    const char *idem_key = s->idem_key && s->idem_val ? s->idem_key : NULL;
    if (idem_key)
        snprintf(ttl, sizeof ttl, "%lld", s->idem_ttl_ms);
    /* The idempotency key shares the stock's hash slot (svc_idem.h: a
     * bucket's sale writes it under the bucket's tag), so it is a KEYS
     * entry like the others; without one KEYS[7] is left out (an empty key
     * name would be a key of slot 0: on a Redis Cluster, a script naming
     * two slots). */
    const char *argv[] = {eval ? "EVAL" : "EVALSHA",
                          eval ? SVC_SCRIPT_FENCE_WRITE : SVC_SCRIPT_FENCE_WRITE_SHA,
                          idem_key ? "7" : "6",
                          mark,
                          ep,
                          stock,
                          sold,
                          orders,
                          buyers,
                          idem_key,
                          t,
                          rd->epoch,
                          after,
                          s->record,
                          s->user ? s->user : "",
                          idem_key ? s->idem_val : "",
                          ttl};
    enum { NARGS = sizeof argv / sizeof argv[0] };
    const char *args[NARGS];
    int argc = 0;
    for (int i = 0; i < NARGS; i++)
        if (i != 9 || idem_key)
            args[argc++] = argv[i];
    return lc_pipe_append_argv(p, argc, args, NULL) == LC_OK ? 1 : -1;
}

static purchase_result fenced_parse_write(redisReply *const *reps, int n, const svc_sale *s,
                                          bool *written, char *detail, size_t len)
{
    (void)n;
    const redisReply *rep = reps[0];
    long long token = (long long)s->fence;
    *written = rep == NULL; /* no reply: the script may have run */
    if (rep == NULL)
        return PR_REDIS_UNAVAILABLE;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(detail, len, "fenced write: %.200s; nothing was written", rep->str);
        return PR_REDIS_ERROR;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        snprintf(detail, len, "fenced write: unexpected reply");
        return PR_REDIS_ERROR;
    }
    switch (rep->element[0]->integer) {
    case 1: return PR_SOLD;
    case 0:
        snprintf(detail, len,
                 "fencing token %lld is no longer the stock's high-water mark (%lld): a later "
                 "lock holder has read the stock since this holder did (its lease ran out); "
                 "nothing was written",
                 token, (long long)rep->element[1]->integer);
        return PR_FENCED_OUT;
    case -1:
        snprintf(detail, len,
                 "the SKU's stock was reset (PUT /stock) during the purchase; nothing was written");
        return PR_STOCK_RESET;
    default:
        snprintf(detail, len,
                 "sold or orders key holds the wrong kind of value; nothing was written");
        return PR_REDIS_ERROR;
    }
}

const svc_store svc_store_fenced = {
    .append_read = fenced_append_read,
    .parse_read = fenced_parse_read,
    .append_write = fenced_append_write,
    .parse_write = fenced_parse_write,
};
