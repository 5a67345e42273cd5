/* svc_store.c — the plain store (svc_store.h): the lock modes' read and
 * write, the seckill walkthrough's GET then SET (docs/locks.md, section 0).
 *
 * The read WATCHes the stock's epoch (the SKU's, or its bucket's) before
 * the GET: PUT /stock changes the epoch in its transaction (counts the
 * SKU's up, sets a bucket's to the reset's id), so a reset between the read and the
 * commit makes EXEC answer nil and nothing is written — a purchase in flight never writes its old
 * stock-1 over the new stock. UNWATCH first drops a watch an earlier purchase on this connection
 * left behind (it ended without EXEC). WATCH changes nothing lockcore relies on (it never sends
 * EXEC), so the read may ride in the acquire's write.
 *
 * The write is one MULTI/EXEC, so a crash or a Redis restart leaves all of
 * its writes or none. It is not a rollback: a command Redis rejects while
 * executing (WRONGTYPE, only possible when someone corrupted the keys)
 * fails alone while the others apply. So the commit ends as one of
 *   EXEC's array all OK                 → sold
 *   EXECABORT (refused while queuing:
 *   OOM, syntax)                        → redis_error, nothing written
 *   some elements of EXEC's array are
 *   errors                              → redis_error naming the failed
 *                                         and applied writes (partial)
 *   no reply (connection lost, timeout) → redis_unavailable, outcome unknown
 *   EXEC answered nil (the epoch moved) → stock_reset, nothing written
 */
#include "svc_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_keys.h"

bool svc_store_noscript(const redisReply *rep)
{
    return rep != NULL && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

static int plain_append_read(lc_pipe *p, const char *tag, const char *user, bool with_epoch,
                             int64_t fence, bool eval)
{
    (void)fence;
    (void)eval;
    char stock[SVC_KEY_MAX], epoch[SVC_KEY_MAX], buyers[SVC_KEY_MAX];
    svc_key(stock, tag, "stock");
    svc_key(epoch, tag, "epoch");
    svc_key(buyers, tag, "buyers");
    /* One buy per user: the user's order count is read with the stock, in
     * the critical section, so it is exactly as atomic as the stock check
     * is under the mode's lock (none: not at all, which is that row's
     * lesson). */
    if (lc_pipe_append(p, "UNWATCH") != LC_OK || lc_pipe_append(p, "WATCH %s", epoch) != LC_OK ||
        lc_pipe_append(p, "GET %s", stock) != LC_OK ||
        (user != NULL && lc_pipe_append(p, "HGET %s %s", buyers, user) != LC_OK) ||
        (with_epoch && lc_pipe_append(p, "GET %s", epoch) != LC_OK))
        return -1;
    return 3 + (user != NULL) + with_epoch;
}

static bool plain_parse_read(redisReply *const *reps, int n, bool with_epoch, int64_t fence,
                             svc_stock_read *out, purchase_result *end, char *detail, size_t len)
{
    (void)fence;
    memset(out, 0, sizeof *out);
    const redisReply *get = reps[2], *hget = n - with_epoch == 4 ? reps[3] : NULL;
    const redisReply *ep = with_epoch ? reps[n - 1] : NULL;
    for (int i = 0; i < n; i++) {
        if (reps[i] == NULL) { /* replies come in order: the rest are missing too */
            *end = PR_REDIS_UNAVAILABLE;
            return false;
        }
    }
    for (int i = 0; i < n; i++) {
        if (i != 2 && reps[i]->type == REDIS_REPLY_ERROR) {
            snprintf(detail, len, "WATCH epoch, HGET buyers or GET epoch: %.200s", reps[i]->str);
            *end = PR_REDIS_ERROR;
            return false;
        }
    }
    if (hget != NULL && hget->type == REDIS_REPLY_STRING)
        out->bought = strtoll(hget->str, NULL, 10);
    if (ep != NULL && ep->type == REDIS_REPLY_STRING)
        snprintf(out->epoch, sizeof out->epoch, "%s", ep->str);
    if (get->type == REDIS_REPLY_STRING) {
        out->stocked = true;
        char *e = NULL;
        out->stock = strtoll(get->str, &e, 10);
        if (e == get->str || *e != '\0') {
            snprintf(detail, len, "stock key holds a non-integer value");
            *end = PR_BAD_STOCK_VALUE;
            return false;
        }
    } else if (get->type == REDIS_REPLY_ERROR) {
        /* Redis answered (e.g. WRONGTYPE: the stock key is not a string):
         * the server's data is wrong, Redis is not unavailable. */
        snprintf(detail, len, "GET stock: %.200s", get->str);
        *end = PR_REDIS_ERROR;
        return false;
    } /* nil: never stocked (stocked stays false) */
    return true;
}

static int plain_append_write(lc_pipe *p, const svc_sale *s, const svc_stock_read *rd, bool eval)
{
    (void)rd; /* the WATCH the read set is the check */
    (void)eval;
    char stock[SVC_KEY_MAX], sold[SVC_KEY_MAX], orders[SVC_KEY_MAX], buyers[SVC_KEY_MAX];
    svc_key(stock, s->tag, "stock");
    svc_key(sold, s->tag, "sold");
    svc_key(orders, s->tag, "orders");
    svc_key(buyers, s->tag, "buyers");
    int writes = 3 + (s->user != NULL) + (s->idem_key != NULL);
    /* One round trip: +OK, +QUEUED per write, then EXEC's array. The buyers
     * hash counts every user's orders (limit_per_user, the audit's
     * duplicate_buyers). */
    if (lc_pipe_append(p, "MULTI") != LC_OK ||
        lc_pipe_append(p, "SET %s %lld", stock, s->stock_after) != LC_OK ||
        lc_pipe_append(p, "INCR %s", sold) != LC_OK ||
        lc_pipe_append(p, "RPUSH %s %b", orders, s->record, strlen(s->record)) != LC_OK ||
        (s->user && lc_pipe_append(p, "HINCRBY %s %s 1", buyers, s->user) != LC_OK) ||
        (s->idem_key && lc_pipe_append(p, "SET %s %s PX %lld", s->idem_key, s->idem_val,
                                       s->idem_ttl_ms) != LC_OK) ||
        lc_pipe_append(p, "EXEC") != LC_OK)
        return -1;
    return writes + 2;
}

static purchase_result plain_parse_write(redisReply *const *reps, int n, const svc_sale *s,
                                         bool *written, char *detail, size_t len)
{
    const char *names[5] = {"SET stock", "INCR sold", "RPUSH orders"};
    int writes = 3;
    if (s->user)
        names[writes++] = "HINCRBY buyers";
    if (s->idem_key)
        names[writes++] = "SET idempotency key";
    const redisReply *exec = reps[n - 1];
    *written = false;
    if (exec == NULL) {
        *written = true; /* the transaction may have run */
        return PR_REDIS_UNAVAILABLE;
    }
    if (exec->type == REDIS_REPLY_NIL) {
        snprintf(detail, len,
                 "the SKU's stock was reset (PUT /stock) during the purchase; nothing was written");
        return PR_STOCK_RESET;
    }
    if (exec->type == REDIS_REPLY_ARRAY && exec->elements == (size_t)writes) {
        char failed[200] = "", applied[96] = "";
        for (int k = 0; k < writes; k++) {
            const redisReply *e = exec->element[k];
            bool bad = e->type == REDIS_REPLY_ERROR;
            char *list = bad ? failed : applied;
            size_t size = bad ? sizeof failed : sizeof applied, used = strlen(list);
            snprintf(list + used, size - used, "%s%s%s%.60s%s", used ? ", " : "", names[k],
                     bad ? " (" : "", bad ? e->str : "", bad ? ")" : "");
        }
        if (!failed[0])
            return PR_SOLD;
        snprintf(detail, len, "partial write: failed %.190s; applied %.90s", failed,
                 applied[0] ? applied : "nothing");
        *written = true;
        return PR_REDIS_ERROR;
    }
    /* EXECABORT: Redis discarded the transaction. Name the command refused
     * while queuing when there is one. */
    const char *why = exec->type == REDIS_REPLY_ERROR ? exec->str : "transaction discarded";
    for (int i = 0; i < n - 1; i++) {
        if (reps[i]->type == REDIS_REPLY_ERROR) {
            why = reps[i]->str;
            break;
        }
    }
    snprintf(detail, len, "transaction refused by Redis, nothing written: %.200s", why);
    return PR_REDIS_ERROR;
}

const svc_store svc_store_plain = {
    .append_read = plain_append_read,
    .parse_read = plain_parse_read,
    .append_write = plain_append_write,
    .parse_write = plain_parse_write,
};
