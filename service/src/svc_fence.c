/* svc_fence.c — the fenced mode's read and write commands and the reading
 * of their replies (svc_fence.h). */
#include "svc_fence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_keys.h"
#include "svc_scripts.h"

int svc_fence_noscript(const redisReply *rep)
{
    return rep != NULL && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

lc_status svc_fence_append_read(lc_pipe *p, const char *sku, int64_t token, const char *user,
                                int eval)
{
    char fence[SVC_KEY_MAX], mark[SVC_KEY_MAX], stock[SVC_KEY_MAX], epoch[SVC_KEY_MAX],
        buyers[SVC_KEY_MAX], t[24] = "";
    svc_key(fence, sku, "fence");
    svc_key(mark, sku, "fence_hwm");
    svc_key(stock, sku, "stock");
    svc_key(epoch, sku, "epoch");
    svc_key(buyers, sku, "buyers");
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
    return lc_pipe_append_argv(p, (int)(sizeof argv / sizeof argv[0]), argv, NULL);
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

purchase_result svc_fence_parse_read(const redisReply *rep, svc_fence_read *out, char *detail,
                                     size_t len)
{
    memset(out, 0, sizeof *out);
    if (rep == NULL)
        return PR_REDIS_UNAVAILABLE;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(detail, len, "fenced read: %.200s", rep->str);
        return PR_REDIS_ERROR;
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
        rep->element[0]->type != REDIS_REPLY_INTEGER ||
        rep->element[1]->type != REDIS_REPLY_INTEGER) {
        snprintf(detail, len, "fenced read: unexpected reply");
        return PR_REDIS_ERROR;
    }
    out->token = rep->element[1]->integer;
    if (rep->element[0]->integer == 0) {
        long long mark = 0;
        (void)as_ll(rep->element[2], &mark);
        out->mark = mark;
        snprintf(detail, len,
                 "fencing token %lld is below the stock's high-water mark %lld: a later lock "
                 "holder has read the stock (this holder's lease ran out); nothing was written",
                 (long long)out->token, mark);
        return PR_FENCED_OUT;
    }
    if (rep->elements != 5) {
        snprintf(detail, len, "fenced read: unexpected reply");
        return PR_REDIS_ERROR;
    }
    const redisReply *st = rep->element[2], *ep = rep->element[3], *bo = rep->element[4];
    if (bo->type != REDIS_REPLY_NIL && as_ll(bo, &out->bought) != 0) {
        snprintf(detail, len, "fenced read: the buyers hash holds a non-integer count");
        return PR_REDIS_ERROR;
    }
    if (st->type != REDIS_REPLY_NIL && as_ll(st, &out->stock) != 0) {
        snprintf(detail, len, "stock key holds a non-integer value");
        return PR_BAD_STOCK_VALUE;
    }
    if (ep->type == REDIS_REPLY_STRING)
        snprintf(out->epoch, sizeof out->epoch, "%s", ep->str);
    return PR_COUNT;
}

lc_status svc_fence_append_write(lc_pipe *p, const char *sku, int64_t token, const char *epoch,
                                 long long stock_after, const char *rec, size_t reclen,
                                 const svc_fence_extra *x, int eval)
{
    char mark[SVC_KEY_MAX], ep[SVC_KEY_MAX], stock[SVC_KEY_MAX], sold[SVC_KEY_MAX],
        orders[SVC_KEY_MAX], buyers[SVC_KEY_MAX], t[24], after[24], ttl[24] = "";
    svc_key(mark, sku, "fence_hwm");
    svc_key(ep, sku, "epoch");
    svc_key(stock, sku, "stock");
    svc_key(sold, sku, "sold");
    svc_key(orders, sku, "orders");
    svc_key(buyers, sku, "buyers");
    snprintf(t, sizeof t, "%lld", (long long)token);
    snprintf(after, sizeof after, "%lld", stock_after);
    const char *idem_key = x && x->idem_key && x->idem_val ? x->idem_key : NULL;
    if (idem_key)
        snprintf(ttl, sizeof ttl, "%lld", x->idem_ttl_ms);
    /* The idempotency key shares the SKU's hash slot (svc_idem.h), so it is
     * a KEYS entry like the others; "" as a key name when there is none. */
    const char *argv[] = {eval ? "EVAL" : "EVALSHA",
                          eval ? SVC_SCRIPT_FENCE_WRITE : SVC_SCRIPT_FENCE_WRITE_SHA,
                          "7",
                          mark,
                          ep,
                          stock,
                          sold,
                          orders,
                          buyers,
                          idem_key ? idem_key : "",
                          t,
                          epoch,
                          after,
                          rec,
                          x && x->user ? x->user : "",
                          idem_key ? x->idem_val : "",
                          ttl};
    enum { NARGS = sizeof argv / sizeof argv[0], REC_ARG = 13 };
    size_t lens[NARGS];
    for (size_t i = 0; i < NARGS; i++)
        lens[i] = i == REC_ARG ? reclen : strlen(argv[i]);
    return lc_pipe_append_argv(p, NARGS, argv, lens);
}

purchase_result svc_fence_parse_write(const redisReply *rep, int64_t token, char *detail,
                                      size_t len)
{
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
                 (long long)token, (long long)rep->element[1]->integer);
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
