/* fuzz_stock_body.c — libFuzzer harness for svc_stock_parse_body (the PUT
 * /stock JSON body, with nothing in the query: the body must give the
 * stock). Input: byte 0 the detail buffer's size, then the body,
 * copied into a buffer of exactly len bytes plus the NUL the daemon's
 * buffer has. Checks: 0 only with a stock in 0..SVC_STOCK_MAX, buckets 0
 * (absent) or 1..SVC_BUCKETS_MAX and no NUL in the body; -1 leaves *stock
 * and *buckets untouched and gives a terminated reason. */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "svc_params.h"
#include "svc_routes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char detail[256 + FZ_GUARD];
    if (size < 1)
        return 0;
    size_t dlen = 1 + data[0] % 256;
    size_t len = size - 1;
    char *body = malloc(len + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data + 1, len);
    body[len] = '\0';

    int64_t stock = -7, buckets = -7;
    fz_guard_init(detail, dlen);
    int rc = svc_stock_parse_body(body, len, 0, &stock, &buckets, detail, dlen);
    FZ_CHECK(rc == 0 || rc == -1, "returns 0 or -1");
    if (rc == 0) {
        FZ_CHECK(stock >= 0 && stock <= SVC_STOCK_MAX, "stock in 0..SVC_STOCK_MAX");
        FZ_CHECK(buckets >= 0 && buckets <= SVC_BUCKETS_MAX, "buckets 0 or 1..SVC_BUCKETS_MAX");
        FZ_CHECK(len > 0 && memchr(body, '\0', len) == NULL, "no NUL byte in an accepted body");
        /* An independent reading of the same bytes agrees on the value. */
        cJSON *doc = cJSON_ParseWithLengthOpts(body, len, NULL, 0);
        cJSON *it = cJSON_GetObjectItemCaseSensitive(doc, "stock");
        FZ_CHECK(cJSON_IsNumber(it) && it->valuedouble == (double)stock,
                 "the accepted value is the body's stock");
        cJSON_Delete(doc);
    } else {
        FZ_CHECK(stock == -7 && buckets == -7, "*stock and *buckets untouched on -1");
        fz_guard_check(detail, dlen);
        FZ_CHECK(dlen == 1 || detail[0] != '\0', "a refusal gives a reason");
    }
    /* NULL and empty bodies are refused the same way. */
    free(body);
    return 0;
}
