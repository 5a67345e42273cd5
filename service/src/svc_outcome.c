/* svc_outcome.c — the purchase outcome table (svc_outcome.h). */
#include "svc_outcome.h"

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
};
