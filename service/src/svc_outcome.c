/* svc_outcome.c — the purchase outcome table (svc_outcome.h). */
#include "svc_outcome.h"

#include <stdio.h>

#include "svc_clock.h"
#include "svc_shutdown.h"

const svc_result_info svc_result[PR_COUNT] = {
    [PR_SOLD] = {200, NULL, SVC_OUT_SOLD, 0},
    [PR_SOLD_OUT] = {409, "sold_out", SVC_OUT_SOLD_OUT, 0},
    [PR_LOCK_BUSY] = {429, "lock_busy", SVC_OUT_LOCK_BUSY, 0},
    [PR_REDIS_UNAVAILABLE] = {503, "redis_unavailable", SVC_OUT_ERROR, 1},
    [PR_REDIS_ERROR] = {503, "redis_error", SVC_OUT_ERROR, 1},
    [PR_BAD_STOCK_VALUE] = {503, "bad_stock_value", SVC_OUT_ERROR, 0},
    [PR_LOCK_ERROR] = {503, "lock_error", SVC_OUT_ERROR, 0}, /* still never a 500 */
    [PR_SHUTTING_DOWN] = {503, "shutting_down", SVC_OUT_ERROR, 0},
    [PR_OVERLOADED] = {503, "overloaded", SVC_OUT_ERROR, 0},
    [PR_OUT_OF_MEMORY] = {503, "out_of_memory", SVC_OUT_ERROR, 0},
    /* nginx's "client closed request": nobody reads it, but the access log
     * and miaosha_http_responses_total{code="499"} show it */
    [PR_CLIENT_GONE] = {499, "client_gone", SVC_OUT_CLIENT_GONE, 0},
    [PR_STOCK_RESET] = {409, "stock_reset", SVC_OUT_STOCK_RESET, 0},
    [PR_FENCED_OUT] = {409, "fenced_out", SVC_OUT_FENCED_OUT, 0},
    [PR_LIMIT_REACHED] = {409, "limit_reached", SVC_OUT_LIMIT_REACHED, 0},
    [PR_IN_PROGRESS] = {409, "in_progress", SVC_OUT_IDEM_CONFLICT, 0},
    [PR_KEY_REUSED] = {422, "idempotency_key_reused", SVC_OUT_IDEM_CONFLICT, 0},
    /* with the order id: it may or may not survive a failover */
    [PR_NOT_REPLICATED] = {503, "not_replicated", SVC_OUT_ERROR, 1},
    /* counted with client_gone: the one driving it went away */
    [PR_STEP_ABANDONED] = {409, "step_abandoned", SVC_OUT_CLIENT_GONE, 0},
    [PR_UNKNOWN_SKU] = {404, "unknown_sku", SVC_OUT_UNKNOWN_SKU, 0},
};

int svc_result_slot(purchase_result res, const char *sku)
{
    return res == PR_UNKNOWN_SKU ? svc_stats_sku_find(sku) : svc_stats_sku_slot(sku);
}

bool svc_result_found_sku(purchase_result res)
{
    return res == PR_SOLD || res == PR_SOLD_OUT || res == PR_LIMIT_REACHED ||
           res == PR_STOCK_RESET || res == PR_NOT_REPLICATED;
}

purchase_result svc_result_of_search(int rc)
{
    return rc == 0    ? PR_SOLD_OUT
           : rc == 1  ? PR_STOCK_RESET
           : rc == -1 ? PR_REDIS_UNAVAILABLE
                      : PR_REDIS_ERROR;
}

bool svc_purchase_admit(const svc_req *r, int64_t wait_ms, int64_t work_ms, purchase_result *why,
                        char *detail, size_t len)
{
    if (svc_abort_work()) {
        snprintf(detail, len, "server shutting down");
        *why = PR_SHUTTING_DOWN;
        return false;
    }
    int64_t queued_ms = (lc_now_us() - r->queued_us) / 1000;
    if (queued_ms > wait_ms + work_ms + QUEUE_GRACE_MS) {
        snprintf(detail, len,
                 "waited %lld ms for a worker, more than wait_ms + work_ms + %d ms; nothing "
                 "was tried",
                 (long long)queued_ms, QUEUE_GRACE_MS);
        *why = PR_OVERLOADED;
        return false;
    }
    /* A client that gave up while queued (its FIN has arrived) gets nothing
     * done: working for it would only delay the buyers still there. */
    if (svc_client_gone(r)) {
        snprintf(detail, len, "client closed its connection while queued; nothing was tried");
        *why = PR_CLIENT_GONE;
        return false;
    }
    return true;
}
