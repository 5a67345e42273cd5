/* fuzz_params.c — libFuzzer harness for svc_params_parse_pairs (the query
 * validation of every route). Input: byte 0-1 the allowed SVC_P_* mask,
 * byte 2 the detail buffer's size, then a query string split on '&' into
 * name[=value] pairs (no percent decoding: libmicrohttpd has done that
 * before the service sees a pair, so any byte may reach it). Checks the
 * header's contract: detail terminated within dlen, and on success only
 * known, allowed, distinct names with values within their bounds. */
#include "fuzz_common.h"

#include "svc_params.h"

static const struct {
    const char *name;
    unsigned bit;
} known[] = {
    {"sku", SVC_P_SKU},           {"user", SVC_P_USER},       {"work_ms", SVC_P_WORK_MS},
    {"lease_ms", SVC_P_LEASE_MS}, {"wait_ms", SVC_P_WAIT_MS}, {"reenter", SVC_P_REENTER},
    {"fault", SVC_P_FAULT},       {"stock", SVC_P_STOCK},     {"offset", SVC_P_OFFSET},
    {"limit", SVC_P_LIMIT},
};

static unsigned bit_of(const char *name)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0)
            return known[i].bit;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAXP = 64 };
    const char *keys[MAXP], *values[MAXP];
    char detail[256 + FZ_GUARD];
    svc_params out;
    size_t n = 0;
    if (size < 3)
        return 0;
    unsigned allowed = ((unsigned)data[0] | (unsigned)data[1] << 8) & 0x3ffu;
    size_t dlen = 1 + data[2] % 256;
    char *q = malloc(size - 3 + 1);
    if (q == NULL)
        return 0;
    memcpy(q, data + 3, size - 3);
    q[size - 3] = '\0';
    for (char *p = q; n < MAXP;) {
        char *amp = strchr(p, '&');
        if (amp)
            *amp = '\0';
        char *eq = strchr(p, '=');
        if (eq)
            *eq = '\0';
        keys[n] = p;
        values[n] = eq ? eq + 1 : NULL;
        n++;
        if (!amp)
            break;
        p = amp + 1;
    }

    cfg_config s;
    cfg_defaults(&s); /* the caps' defaults: 60000, 300000, 60000, 8 */

    fz_guard_init(detail, dlen);
    int rc = svc_params_parse_pairs(keys, values, n, &s, allowed, &out, detail, dlen);
    FZ_CHECK(rc == 0 || rc == -1, "returns 0 or -1");
    if (rc == -1) {
        fz_guard_check(detail, dlen);
        FZ_CHECK(dlen == 1 || detail[0] != '\0', "a refusal gives a reason");
    } else {
        unsigned seen = 0;
        FZ_CHECK(n <= SVC_MAX_ARGS, "at most SVC_MAX_ARGS arguments accepted");
        for (size_t i = 0; i < n; i++) {
            unsigned bit = bit_of(keys[i]);
            FZ_CHECK(bit != 0 && (allowed & bit), "only known, allowed names accepted");
            FZ_CHECK((seen & bit) == 0, "duplicates refused");
            seen |= bit;
            FZ_CHECK(values[i] != NULL || bit == SVC_P_OFFSET || bit == SVC_P_LIMIT,
                     "a missing value is refused except for offset and limit");
        }
        FZ_CHECK(out.seen == seen, "seen = the names present");
        if (seen & SVC_P_SKU)
            FZ_CHECK(svc_valid_id(out.sku), "sku matches [A-Za-z0-9_-]{1,64}");
        if (seen & SVC_P_USER)
            FZ_CHECK(svc_valid_id(out.user), "user matches [A-Za-z0-9_-]{1,64}");
        FZ_CHECK(out.work_ms >= 0 && out.work_ms <= s.purchase.max_work_ms, "work_ms in bounds");
        FZ_CHECK(out.lease_ms >= ((seen & SVC_P_LEASE_MS) ? 1 : 0) &&
                     out.lease_ms <= s.lock.max_lease_ms,
                 "lease_ms in bounds");
        FZ_CHECK(out.wait_ms >= 0 && out.wait_ms <= s.lock.max_wait_ms, "wait_ms in bounds");
        FZ_CHECK(out.reenter >= 0 && out.reenter <= s.purchase.max_reenter, "reenter in bounds");
        FZ_CHECK(out.stock >= 0 && out.stock <= SVC_STOCK_MAX, "stock in bounds");
        FZ_CHECK(out.offset >= 0 && out.offset <= SVC_OFFSET_MAX, "offset in bounds");
        FZ_CHECK(out.limit >= 1 && out.limit <= SVC_LIMIT_MAX, "limit in bounds");
        FZ_CHECK(out.fault == SVC_FAULT_NONE || out.fault == SVC_FAULT_CRASH_BEFORE_EXPIRE ||
                     out.fault == SVC_FAULT_CRASH_IN_SECTION,
                 "fault in its enum");
        FZ_CHECK((seen & SVC_P_FAULT) || out.fault == SVC_FAULT_NONE, "fault only when given");
    }
    free(q);
    return 0;
}
