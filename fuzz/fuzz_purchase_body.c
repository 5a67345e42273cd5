/* fuzz_purchase_body.c — libFuzzer harness for svc_params_parse_body (a
 * purchase's JSON body, the query's parameters as members). Input: byte 0
 * the detail buffer's size, bytes 1-2 the parameters the query already
 * gave (SVC_P_* bits, masked to a purchase's), then the body, copied into
 * a buffer of exactly len bytes plus the NUL the daemon's buffer has.
 * Checks the header's contract: 0 or -1; on -1 a terminated reason; on 0
 * the query's bits kept, no parameter in both places, only a purchase's
 * parameters added, each within its bounds (the query's), an accepted
 * body one JSON object without a NUL whose members are exactly the added
 * parameters. */
#include "fuzz_common.h"

#include <cjson/cJSON.h>

#include "svc_params.h"

#define ALLOWED (SVC_P_PURCHASE | SVC_P_TRACE)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char detail[256 + FZ_GUARD];
    if (size < 3)
        return 0;
    size_t dlen = 1 + data[0] % 256;
    unsigned query = ((unsigned)data[1] | (unsigned)data[2] << 8) & ALLOWED;
    size_t len = size - 3;
    char *body = malloc(len + 1);
    if (body == NULL)
        return 0;
    memcpy(body, data + 3, len);
    body[len] = '\0';

    cfg_config s;
    cfg_defaults(&s);
    svc_params out;
    memset(&out, 0, sizeof out);
    out.limit = SVC_LIMIT_DEFAULT;
    out.seen = query;
    fz_guard_init(detail, dlen);
    int rc = svc_params_parse_body(body, len, &s, ALLOWED, &out, detail, dlen);
    FZ_CHECK(rc == 0 || rc == -1, "returns 0 or -1");
    if (rc == -1) {
        fz_guard_check(detail, dlen);
        FZ_CHECK(dlen == 1 || detail[0] != '\0', "a refusal gives a reason");
        FZ_CHECK(len > 0, "an empty body adds nothing and is never refused");
    } else {
        unsigned added = out.seen & ~query;
        FZ_CHECK((out.seen & query) == query, "the query's parameters stay");
        FZ_CHECK((added & ~(unsigned)ALLOWED) == 0, "only a purchase's parameters are added");
        FZ_CHECK(len == 0 || memchr(body, '\0', len) == NULL, "no NUL byte in an accepted body");
        if (added & SVC_P_SKU)
            FZ_CHECK(svc_valid_id(out.sku), "sku matches [A-Za-z0-9_-]{1,64}");
        if (added & SVC_P_USER)
            FZ_CHECK(svc_valid_id(out.user), "user matches [A-Za-z0-9_-]{1,64}");
        FZ_CHECK(out.work_ms >= 0 && out.work_ms <= s.purchase.max_work_ms, "work_ms in bounds");
        FZ_CHECK(out.lease_ms >= 0 && out.lease_ms <= s.lock.max_lease_ms, "lease_ms in bounds");
        FZ_CHECK(!(added & SVC_P_LEASE_MS) || out.lease_ms >= 1, "a given lease_ms is >= 1");
        FZ_CHECK(out.wait_ms >= 0 && out.wait_ms <= s.lock.max_wait_ms, "wait_ms in bounds");
        FZ_CHECK(out.reenter >= 0 && out.reenter <= s.purchase.max_reenter, "reenter in bounds");
        FZ_CHECK(out.pipeline == 0 || out.pipeline == 1, "pipeline 0 or 1");
        FZ_CHECK(out.trace == 0 || out.trace == 1, "trace 0 or 1");
        FZ_CHECK(out.fault == SVC_FAULT_NONE || (added & SVC_P_FAULT), "fault only when given");
        if (len > 0) {
            /* An independent reading: one object, as many members as added
             * parameters (a duplicate or an unknown one was refused). */
            cJSON *doc = cJSON_ParseWithOpts(body, NULL, 1); /* body[len] is its NUL */
            FZ_CHECK(cJSON_IsObject(doc), "an accepted body is one JSON object");
            int members = cJSON_GetArraySize(doc), bits = __builtin_popcount(added);
            FZ_CHECK(members == bits, "every member is one added parameter");
            cJSON_Delete(doc);
        }
    }
    free(body);
    return 0;
}
