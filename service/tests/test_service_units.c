/* test_service_units.c — the service's parsers and formatters, in-process
 * (no server, no Redis): each table of good and hostile inputs asserts the
 * contract written in the function's header.
 *   svc_params.h   svc_valid_id, svc_parse_int, svc_params_parse (through
 *                  svc_params_parse_pairs, which runs the same checks)
 *   svc_routes.h   svc_stock_parse_body
 *   svc_log.h      svc_log_escape, svc_log_every (a repeated warning:
 *                  one line, then a summary)
 *   svc_reply.h    svc_json_add_int, svc_json_add_item, svc_reply_json,
 *                  svc_reply_error,
 *                  svc_reply_text
 *   svc_keys.h     svc_key, svc_bucket_tag
 *   svc_bucket.h   the layout: placement, shares, record, next bucket,
 *                  home bucket
 *   svc_idem.h     svc_idem_valid, svc_idem_stored_outcome
 *   svc_admin.h    svc_admin_verdict */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tu.h>

#include "svc_admin.h"
#include "svc_bucket.h"
#include "svc_idem.h"
#include "svc_keys.h"
#include "svc_log.h"
#include "svc_params.h"
#include "svc_reply.h"
#include "svc_routes.h"
#include "svc_skuset.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static cfg_config settings(void)
{
    cfg_config s;
    cfg_defaults(&s);
    s.purchase.max_work_ms = 60000;
    s.lock.max_lease_ms = 600000;
    s.lock.max_wait_ms = 60000;
    s.purchase.max_reenter = 64;
    return s;
}

/* ---- svc_valid_id ---- */

static void test_valid_id(void)
{
    char max[SVC_SKU_MAX + 2];
    memset(max, 'a', sizeof max);
    max[SVC_SKU_MAX] = '\0';
    TU_CHECK(svc_valid_id(max) == 1, "64 characters");
    max[SVC_SKU_MAX] = 'a';
    max[SVC_SKU_MAX + 1] = '\0';
    TU_CHECK(svc_valid_id(max) == 0, "65 characters");

    static const struct {
        const char *s;
        int ok;
    } t[] = {
        {"demo", 1},  {"A-z_09", 1}, {"-", 1},     {"_", 1},      {"", 0},
        {" demo", 0}, {"demo ", 0},  {"de mo", 0}, {"demo\n", 0}, {"a/b", 0},
        {"a.b", 0},   {"a%00", 0},   {"a\"b", 0},  {"a'b", 0},    {"d\xc3\xa9j\xc3\xa0", 0},
        {"\x7f", 0},  {"\x01", 0},   {"a\\b", 0},  {"{demo}", 0}, {"a:b", 0},
    };
    TU_CHECK(svc_valid_id(NULL) == 0, "NULL");
    for (size_t i = 0; i < COUNT(t); i++)
        TU_CHECK(svc_valid_id(t[i].s) == t[i].ok, "svc_valid_id(\"%s\") == %d", t[i].s, t[i].ok);
}

/* ---- svc_parse_int ---- */

static void test_parse_int(void)
{
    static const struct {
        const char *s;
        int64_t lo, hi;
        int rc;
        int64_t v;
    } t[] = {
        {"0", 0, 10, 0, 0},
        {"10", 0, 10, 0, 10},
        {"007", 0, 10, 0, 7},
        {"999999999999", 0, INT64_MAX, 0, 999999999999LL}, /* 12 digits */
        {"1", 1, 1, 0, 1},
        {"11", 0, 10, -1, 0},
        {"0", 1, 10, -1, 0},
        {"", 0, 10, -1, 0},
        {"-1", -5, 10, -1, 0},
        {"+1", 0, 10, -1, 0},
        {" 1", 0, 10, -1, 0},
        {"1 ", 0, 10, -1, 0},
        {"1.0", 0, 10, -1, 0},
        {"1e3", 0, 10000, -1, 0},
        {"0x10", 0, 100, -1, 0},
        {"1000000000000", 0, INT64_MAX, -1, 0},           /* 13 digits */
        {"99999999999999999999999", 0, INT64_MAX, -1, 0}, /* would overflow */
        {"\xef\xbc\x91", 0, 10, -1, 0},                   /* fullwidth 1 */
        {"1\n", 0, 10, -1, 0},
        {"1%00", 0, 10, -1, 0},
    };
    int64_t out;
    out = 42;
    TU_CHECK(svc_parse_int(NULL, 0, 10, &out) == -1 && out == 42, "NULL");
    for (size_t i = 0; i < COUNT(t); i++) {
        out = 42;
        int rc = svc_parse_int(t[i].s, t[i].lo, t[i].hi, &out);
        TU_CHECK(rc == t[i].rc, "svc_parse_int(\"%s\", %lld, %lld) == %d", t[i].s,
                 (long long)t[i].lo, (long long)t[i].hi, t[i].rc);
        TU_CHECK(out == (rc == 0 ? t[i].v : 42), "\"%s\": *out %lld", t[i].s, (long long)out);
    }
}

/* ---- svc_params_parse ---- */

/* A query as decoded pairs: "k=v" items, "k" alone = no '=' (value NULL). */
static int parse(const char *const *items, size_t n, unsigned allowed, svc_params *out,
                 char *detail, size_t dlen)
{
    const char *keys[64], *values[64];
    char buf[64][256];
    cfg_config s = settings();
    for (size_t i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], "%s", items[i]);
        char *eq = strchr(buf[i], '=');
        if (eq != NULL)
            *eq = '\0';
        keys[i] = buf[i];
        values[i] = eq ? eq + 1 : NULL;
    }
    return svc_params_parse_pairs(keys, values, n, &s, allowed, out, detail, dlen);
}

static void test_params_good(void)
{
    svc_params p;
    char detail[160];
    const char *all[] = {"sku=demo-1",
                         "user=u_2",
                         "work_ms=0",
                         "lease_ms=1",
                         "wait_ms=60000",
                         "reenter=64",
                         "fault=crash_in_section",
                         "pipeline=1"};
    TU_CHECK(parse(all, COUNT(all), SVC_P_PURCHASE, &p, detail, sizeof detail) == 0,
             "every purchase parameter at its bound: %s", detail);
    TU_CHECK(p.seen == SVC_P_PURCHASE, "seen %#x", p.seen);
    TU_CHECK(strcmp(p.sku, "demo-1") == 0 && strcmp(p.user, "u_2") == 0, "sku/user");
    TU_CHECK(p.work_ms == 0 && p.lease_ms == 1 && p.wait_ms == 60000 && p.reenter == 64, "numbers");
    TU_CHECK(p.fault == SVC_FAULT_CRASH_IN_SECTION, "fault");
    TU_CHECK(p.pipeline == 1, "pipeline");

    const char *before[] = {"fault=crash_before_expire"};
    TU_CHECK(parse(before, 1, SVC_P_PURCHASE, &p, detail, sizeof detail) == 0 &&
                 p.fault == SVC_FAULT_CRASH_BEFORE_EXPIRE,
             "crash_before_expire");

    /* Nothing given: defaults, limit 100. */
    memset(&p, 0x5a, sizeof p);
    TU_CHECK(parse(NULL, 0, SVC_P_PURCHASE, &p, detail, sizeof detail) == 0, "empty query");
    TU_CHECK(p.seen == 0 && p.work_ms == 0 && p.reenter == 0 && p.fault == SVC_FAULT_NONE &&
                 p.limit == SVC_LIMIT_DEFAULT && p.sku[0] == '\0',
             "empty query resets *out");

    /* Paging: empty values keep the defaults, the bounds are inclusive. */
    const char *empty[] = {"offset=", "limit="};
    TU_CHECK(parse(empty, 2, SVC_P_OFFSET | SVC_P_LIMIT, &p, detail, sizeof detail) == 0 &&
                 p.offset == 0 && p.limit == SVC_LIMIT_DEFAULT &&
                 p.seen == (SVC_P_OFFSET | SVC_P_LIMIT),
             "?offset=&limit=");
    const char *bounds[] = {"offset=1000000000", "limit=1000"};
    TU_CHECK(parse(bounds, 2, SVC_P_OFFSET | SVC_P_LIMIT, &p, detail, sizeof detail) == 0 &&
                 p.offset == SVC_OFFSET_MAX && p.limit == SVC_LIMIT_MAX,
             "paging maxima");
    const char *stock[] = {"stock=1000000000"};
    TU_CHECK(parse(stock, 1, SVC_P_STOCK, &p, detail, sizeof detail) == 0 &&
                 p.stock == SVC_STOCK_MAX,
             "stock maximum");
    const char *zero[] = {"stock=0"};
    TU_CHECK(parse(zero, 1, SVC_P_STOCK, &p, detail, sizeof detail) == 0 && p.stock == 0,
             "stock 0");
    const char *buckets[] = {"stock=7", "buckets=64"};
    TU_CHECK(parse(buckets, 2, SVC_P_STOCK | SVC_P_BUCKETS, &p, detail, sizeof detail) == 0 &&
                 p.stock == 7 && p.buckets == SVC_BUCKETS_MAX,
             "buckets maximum");

    char sku64[80] = "sku=";
    memset(sku64 + 4, 'z', SVC_SKU_MAX);
    sku64[4 + SVC_SKU_MAX] = '\0';
    const char *longest[] = {sku64};
    TU_CHECK(parse(longest, 1, SVC_P_SKU, &p, detail, sizeof detail) == 0 &&
                 strlen(p.sku) == SVC_SKU_MAX,
             "64-character sku");
}

static void test_params_hostile(void)
{
    char big[300];
    memset(big, '9', sizeof big);
    memcpy(big, "work_ms=", 8);
    big[sizeof big - 1] = '\0';
    char longname[200];
    memset(longname, 'n', sizeof longname);
    memcpy(longname + 150, "=1", 3);
    char sku65[80] = "sku=";
    memset(sku65 + 4, 'z', SVC_SKU_MAX + 1);
    sku65[5 + SVC_SKU_MAX] = '\0';

    static const struct {
        const char *q[3];
        size_t n;
        unsigned allowed;
        const char *detail; /* what detail must contain */
    } t[] = {
        {{"foo=1"}, 1, SVC_P_PURCHASE, "unknown parameter 'foo'"},
        {{"stock=5"}, 1, SVC_P_PURCHASE, "unknown parameter 'stock'"},
        {{"sku=a"}, 1, 0, "unknown parameter 'sku'"},
        {{"SKU=a"}, 1, SVC_P_PURCHASE, "unknown parameter 'SKU'"},
        {{"=1"}, 1, SVC_P_PURCHASE, "unknown parameter ''"},
        {{"sku=a", "sku=b"}, 2, SVC_P_PURCHASE, "duplicate parameter 'sku'"},
        {{"work_ms"}, 1, SVC_P_PURCHASE, "work_ms: missing value"},
        {{"sku"}, 1, SVC_P_PURCHASE, "sku: missing value"},
        {{"work_ms="}, 1, SVC_P_PURCHASE, "work_ms: must be an integer in 0..60000"},
        {{"work_ms=-1"}, 1, SVC_P_PURCHASE, "work_ms: must be an integer in 0..60000"},
        {{"work_ms=60001"}, 1, SVC_P_PURCHASE, "work_ms: must be an integer in 0..60000"},
        {{"work_ms=1e3"}, 1, SVC_P_PURCHASE, "work_ms: must be an integer"},
        {{"work_ms= 5"}, 1, SVC_P_PURCHASE, "work_ms: must be an integer"},
        {{"work_ms=5\n"}, 1, SVC_P_PURCHASE, "work_ms: must be an integer"},
        {{"work_ms=\xef\xbc\x95"}, 1, SVC_P_PURCHASE, "work_ms: must be an integer"},
        {{"lease_ms=0"}, 1, SVC_P_PURCHASE, "lease_ms: must be an integer in 1..600000"},
        {{"wait_ms=60001"}, 1, SVC_P_PURCHASE, "wait_ms: must be an integer in 0..60000"},
        {{"reenter=65"}, 1, SVC_P_PURCHASE, "reenter: must be an integer in 0..64"},
        {{"reenter=99999999999999999999"}, 1, SVC_P_PURCHASE, "reenter: must be an integer"},
        {{"pipeline=2"}, 1, SVC_P_PURCHASE, "pipeline: must be an integer in 0..1"},
        {{"pipeline=true"}, 1, SVC_P_PURCHASE, "pipeline: must be an integer"},
        {{"fault=crash"}, 1, SVC_P_PURCHASE, "fault: must be crash_before_expire or"},
        {{"fault="}, 1, SVC_P_PURCHASE, "fault: must be"},
        {{"fault=CRASH_IN_SECTION"}, 1, SVC_P_PURCHASE, "fault: must be"},
        {{"sku="}, 1, SVC_P_PURCHASE, "sku: must match [A-Za-z0-9_-]{1,64}"},
        {{"sku=de mo"}, 1, SVC_P_PURCHASE, "sku: must match"},
        {{"sku=a\"b"}, 1, SVC_P_PURCHASE, "sku: must match"},
        {{"sku=d\xc3\xa9j\xc3\xa0"}, 1, SVC_P_PURCHASE, "sku: must match"},
        {{"sku=a%00b"}, 1, SVC_P_PURCHASE, "sku: must match"},
        {{"user=x/y"}, 1, SVC_P_PURCHASE, "user: must match"},
        {{"stock=-1"}, 1, SVC_P_STOCK, "stock: must be an integer in 0..1000000000"},
        {{"stock=1000000001"}, 1, SVC_P_STOCK, "stock: must be an integer in 0..1000000000"},
        {{"stock="}, 1, SVC_P_STOCK, "stock: must be an integer"},
        {{"buckets=0"}, 1, SVC_P_STOCK | SVC_P_BUCKETS, "buckets: must be an integer in 1..64"},
        {{"buckets=65"}, 1, SVC_P_STOCK | SVC_P_BUCKETS, "buckets: must be an integer in 1..64"},
        {{"buckets=4"}, 1, SVC_P_STOCK, "unknown parameter 'buckets'"},
        {{"limit=0"}, 1, SVC_P_LIMIT, "limit: must be an integer in 1..1000"},
        {{"limit=1001"}, 1, SVC_P_LIMIT, "limit: must be an integer in 1..1000"},
        {{"offset=-1"}, 1, SVC_P_OFFSET, "offset: must be an integer in 0..1000000000"},
        {{"offset=1000000001"}, 1, SVC_P_OFFSET, "offset: must be an integer"},
        {{"limit"}, 1, SVC_P_LIMIT, NULL}, /* no '=': the default, accepted below */
    };
    svc_params p;
    char detail[160];
    for (size_t i = 0; i < COUNT(t); i++) {
        if (t[i].detail == NULL)
            continue;
        detail[0] = '\0';
        int rc = parse(t[i].q, t[i].n, t[i].allowed, &p, detail, sizeof detail);
        TU_CHECK(rc == -1 && strstr(detail, t[i].detail) != NULL,
                 "[%s%s%s] -> -1, detail \"%s\" contains \"%s\"", t[i].q[0], t[i].n > 1 ? " " : "",
                 t[i].n > 1 ? t[i].q[1] : "", detail, t[i].detail);
    }

    /* An argument without '=' for a paging parameter keeps its default. */
    const char *lim[] = {"limit"};
    TU_CHECK(parse(lim, 1, SVC_P_LIMIT, &p, detail, sizeof detail) == 0 &&
                 p.limit == SVC_LIMIT_DEFAULT,
             "?limit");

    const char *huge[] = {big};
    TU_CHECK(parse(huge, 1, SVC_P_PURCHASE, &p, detail, sizeof detail) == -1 &&
                 strstr(detail, "work_ms: must be an integer") != NULL,
             "291-digit work_ms");
    const char *s65[] = {sku65};
    TU_CHECK(parse(s65, 1, SVC_P_PURCHASE, &p, detail, sizeof detail) == -1, "65-character sku");

    /* A hostile name is quoted printable and cut at 40 bytes. */
    const char *ctl[] = {"a\x01\x1b[31mb\x7f\xc3\xa9=1"};
    TU_CHECK(parse(ctl, 1, SVC_P_PURCHASE, &p, detail, sizeof detail) == -1, "control name");
    int clean = 1;
    for (const char *c = detail; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
            clean = 0;
    TU_CHECK(clean && strstr(detail, "'a?\?[31mb?\?\?'") != NULL, "detail printable: %s", detail);
    const char *ln[] = {longname};
    TU_CHECK(parse(ln, 1, SVC_P_PURCHASE, &p, detail, sizeof detail) == -1 && strlen(detail) < 70,
             "a 150-byte name is cut: %s", detail);

    /* It stops at the first bad argument: what follows is not read. */
    const char *stop[] = {"foo=1", "sku=demo"};
    TU_CHECK(parse(stop, 2, SVC_P_PURCHASE, &p, detail, sizeof detail) == -1 &&
                 (p.seen & SVC_P_SKU) == 0,
             "stops at the first bad argument");

    /* More than SVC_MAX_ARGS arguments. */
    const char *many[SVC_MAX_ARGS + 1];
    for (int i = 0; i <= SVC_MAX_ARGS; i++)
        many[i] = "x=1";
    TU_CHECK(parse(many, SVC_MAX_ARGS + 1, SVC_P_PURCHASE, &p, detail, sizeof detail) == -1,
             "33 arguments");

    /* A short detail buffer is still terminated. */
    char small[8];
    memset(small, 'x', sizeof small);
    const char *bad[] = {"foo=1"};
    TU_CHECK(parse(bad, 1, SVC_P_PURCHASE, &p, small, sizeof small) == -1 &&
                 memchr(small, '\0', sizeof small) != NULL,
             "8-byte detail terminated");
}

/* ---- svc_stock_parse_body ---- */

static void test_stock_body(void)
{
    static const struct {
        const char *body;
        int rc;
        int64_t v, k; /* stock, buckets (0: none given) */
        const char *detail;
    } t[] = {
        {"{\"stock\":0}", 0, 0, 0, NULL},
        {"{\"stock\":1000000000}", 0, 1000000000, 0, NULL},
        {" \n\t{ \"stock\" : 42 }\r\n ", 0, 42, 0, NULL},
        {"{\"stock\":1e3}", 0, 1000, 0, NULL},
        {"{\"stock\":1000.0}", 0, 1000, 0, NULL},
        {"{}", -1, 0, 0, "stock: required"},
        {"[]", -1, 0, 0, "body: must be a JSON object"},
        {"[{\"stock\":1}]", -1, 0, 0, "body: must be a JSON object"},
        {"5", -1, 0, 0, "body: must be a JSON object"},
        {"\"stock\"", -1, 0, 0, "body: must be a JSON object"},
        {"null", -1, 0, 0, "body: must be a JSON object"},
        {"stock=5", -1, 0, 0, "body: must be a JSON object"},
        {"{\"stock\":5", -1, 0, 0, "body: must be a JSON object"},
        {"{\"stock\":5} x", -1, 0, 0, "body: must be a JSON object"},
        {"{\"stock\":5}{}", -1, 0, 0, "body: must be a JSON object"},
        {"{'stock':5}", -1, 0, 0, "body: must be a JSON object"},
        {"{\"stock\":-1}", -1, 0, 0, "stock: must be an integer in 0..1000000000"},
        {"{\"stock\":1000000001}", -1, 0, 0, "stock: must be an integer in 0..1000000000"},
        {"{\"stock\":99999999999999999999999}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":1e400}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":-1e400}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":1.5}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":\"5\"}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":null}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":true}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":[5]}", -1, 0, 0, "stock: must be an integer"},
        {"{\"stock\":5,\"stock\":6}", -1, 0, 0, "body: duplicate field 'stock'"},
        {"{\"stock\":5,\"x\":1}", -1, 0, 0, "body: unknown field 'x'"},
        {"{\"Stock\":5}", -1, 0, 0, "body: unknown field 'Stock'"},
        {"{\"st\xc3\xb6"
         "ck\":5}",
         -1, 0, 0, "body: unknown field"},
        {"{\"a\\\"b\":5}", -1, 0, 0, "body: unknown field 'a\"b'"},
        {"{\"\":5}", -1, 0, 0, "body: unknown field ''"},
        /* the stock buckets (svc_bucket.h) */
        {"{\"stock\":100,\"buckets\":4}", 0, 100, 4, NULL},
        {"{\"buckets\":64,\"stock\":0}", 0, 0, 64, NULL},
        {"{\"stock\":3,\"buckets\":1}", 0, 3, 1, NULL},
        {"{\"stock\":3,\"buckets\":0}", -1, 0, 0, "buckets: must be an integer in 1..64"},
        {"{\"stock\":3,\"buckets\":65}", -1, 0, 0, "buckets: must be an integer in 1..64"},
        {"{\"stock\":3,\"buckets\":2.5}", -1, 0, 0, "buckets: must be an integer"},
        {"{\"stock\":3,\"buckets\":\"4\"}", -1, 0, 0, "buckets: must be an integer"},
        {"{\"stock\":3,\"buckets\":4,\"buckets\":4}", -1, 0, 0, "body: duplicate field 'buckets'"},
        {"{\"buckets\":4}", -1, 0, 0, "stock: required"},
    };
    char detail[160];
    for (size_t i = 0; i < COUNT(t); i++) {
        int64_t v = -7, k = -7;
        detail[0] = '\0';
        int rc = svc_stock_parse_body(t[i].body, strlen(t[i].body), 0, &v, &k, detail,
                                      sizeof detail);
        TU_CHECK(rc == t[i].rc, "body %s -> %d (detail %s)", t[i].body, t[i].rc, detail);
        if (t[i].rc == 0)
            TU_CHECK(v == t[i].v && k == t[i].k, "body %s -> stock %lld buckets %lld", t[i].body,
                     (long long)v, (long long)k);
        else
            TU_CHECK(v == -7 && k == -7 && strstr(detail, t[i].detail) != NULL,
                     "body %s: *stock and *buckets untouched, detail \"%s\" contains \"%s\"",
                     t[i].body, detail, t[i].detail);
    }

    /* With parameters in the query: each name in one place only. */
    static const struct {
        unsigned q; /* SVC_P_* bits the query gave */
        const char *body;
        int rc;
        int64_t v, k; /* after: stock (-7: untouched), buckets */
        const char *detail;
    } qt[] = {
        {SVC_P_STOCK, "", 0, -7, 0, NULL},
        {SVC_P_STOCK, "{\"buckets\":4}", 0, -7, 4, NULL},
        {SVC_P_STOCK, "{}", 0, -7, 0, NULL},
        {SVC_P_STOCK | SVC_P_BUCKETS, "", 0, -7, 0, NULL},
        {SVC_P_BUCKETS, "{\"stock\":9}", 0, 9, 0, NULL},
        {SVC_P_BUCKETS, "", -1, -7, -7, "stock: required"},
        {SVC_P_BUCKETS, "{}", -1, -7, -7, "stock: required"},
        {SVC_P_STOCK, "{\"stock\":2}", -1, -7, -7,
         "stock: give it in the query or the body, not both"},
        {SVC_P_STOCK, "{\"buckets\":4,\"stock\":2}", -1, -7, -7, "stock: give it in the query"},
        {SVC_P_BUCKETS, "{\"stock\":9,\"buckets\":4}", -1, -7, -7,
         "buckets: give it in the query or the body, not both"},
        {SVC_P_STOCK, "{\"buckets\":0}", -1, -7, -7, "buckets: must be an integer in 1..64"},
        {SVC_P_STOCK, "{\"x\":1}", -1, -7, -7, "body: unknown field 'x'"},
        {SVC_P_STOCK, "not json", -1, -7, -7, "body: must be a JSON object"},
    };
    for (size_t i = 0; i < COUNT(qt); i++) {
        int64_t v = -7, k = -7;
        detail[0] = '\0';
        int rc = svc_stock_parse_body(qt[i].body, strlen(qt[i].body), qt[i].q, &v, &k, detail,
                                      sizeof detail);
        TU_CHECK(rc == qt[i].rc && v == qt[i].v && k == qt[i].k &&
                     (qt[i].detail == NULL || strstr(detail, qt[i].detail) != NULL),
                 "query bits %u, body %s -> %d, stock %lld, buckets %lld, detail \"%s\"", qt[i].q,
                 qt[i].body, rc, (long long)v, (long long)k, detail);
    }

    int64_t v = -7, k = -7;
    TU_CHECK(svc_stock_parse_body(NULL, 0, 0, &v, &k, detail, sizeof detail) == -1 && v == -7 &&
                 strstr(detail, "stock: required") != NULL,
             "no body");
    TU_CHECK(svc_stock_parse_body("", 0, 0, &v, &k, detail, sizeof detail) == -1 && v == -7,
             "empty");
    /* A NUL inside the announced length: refused, not cut there. */
    static const char nul[] = "{\"stock\":5}\0{\"x\":1}";
    TU_CHECK(svc_stock_parse_body(nul, sizeof nul - 1, 0, &v, &k, detail, sizeof detail) == -1 &&
                 v == -7 && strstr(detail, "NUL byte") != NULL,
             "NUL inside the body");

    /* Huge: 1 MiB of whitespace around a valid object, and a deep nest. */
    size_t n = 1 << 20;
    char *big = malloc(n + 1);
    TU_REQUIRE(big != NULL, "malloc");
    memset(big, ' ', n);
    memcpy(big + n / 2, "{\"stock\":7}", 11);
    big[n] = '\0';
    TU_CHECK(svc_stock_parse_body(big, n, 0, &v, &k, detail, sizeof detail) == 0 && v == 7,
             "1 MiB of whitespace");
    v = -7;
    for (size_t i = 0; i < n / 2; i++)
        big[i] = '[';
    for (size_t i = n / 2; i < n; i++)
        big[i] = ']';
    TU_CHECK(svc_stock_parse_body(big, n, 0, &v, &k, detail, sizeof detail) == -1 && v == -7,
             "512 Ki nested arrays");
    free(big);

    /* A short detail buffer is still terminated. */
    char small[6];
    memset(small, 'x', sizeof small);
    TU_CHECK(svc_stock_parse_body("[]", 2, 0, &v, &k, small, sizeof small) == -1 &&
                 memchr(small, '\0', sizeof small) != NULL,
             "6-byte detail terminated");
}

/* ---- svc_log_escape ---- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Checks one escape of src into len bytes against the header's contract:
 * terminated, only printable ASCII, every '\' starts a whole \xNN, and
 * undoing the escapes gives src, or a prefix of it followed by "...". */
static void check_escape(const char *src, size_t len)
{
    char dst[512], back[512];
    size_t nb = 0;
    int ok = 1, cut = 0;
    memset(dst, '#', sizeof dst);
    svc_log_escape(dst, len, src);
    if (memchr(dst, '\0', len) == NULL) {
        TU_CHECK(0, "len %zu: not terminated", len);
        return;
    }
    size_t n = strlen(dst);
    for (size_t i = 0; i < n && ok; i++) {
        unsigned char ch = (unsigned char)dst[i];
        if (ch < 0x20 || ch >= 0x7f) {
            ok = 0;
        } else if (ch == '\\') {
            int whole = i + 3 < n;
            int hi = whole ? hexval(dst[i + 2]) : -1;
            int lo = whole ? hexval(dst[i + 3]) : -1;
            if (!whole || dst[i + 1] != 'x' || hi < 0 || lo < 0)
                ok = 0;
            else
                back[nb++] = (char)(hi * 16 + lo), i += 3;
        } else if (ch == '.' && strcmp(dst + i, "...") == 0) {
            cut = 1;
            break;
        } else {
            back[nb++] = (char)ch;
        }
    }
    back[nb] = '\0';
    const char *s = src ? src : "";
    if (len < 4)
        ok = ok && n == 0;
    else if (ok && !cut)
        ok = strcmp(back, s) == 0;
    else if (ok)
        ok = strncmp(back, s, nb) == 0 && nb < strlen(s);
    TU_CHECK(ok && n < len, "escape of %zu-byte text into %zu bytes: \"%s\"", strlen(s), len, dst);
}

static void test_log_escape(void)
{
    static const struct {
        const char *src, *want;
    } t[] = {
        {"GET", "GET"},
        {"/miaosha/none?sku=demo&x=\"q\"", "/miaosha/none?sku=demo&x=\"q\""},
        {"a\nb", "a\\x0ab"},
        {"a\r\n\t", "a\\x0d\\x0a\\x09"},
        {"\\", "\\x5c"},
        {"\x7f", "\\x7f"},
        {"\x1b[31m", "\\x1b[31m"},
        {"d\xc3\xa9j\xc3\xa0", "d\\xc3\\xa9j\\xc3\\xa0"},
        {"\xff\x80", "\\xff\\x80"},
        {"", ""},
    };
    char dst[128];
    for (size_t i = 0; i < COUNT(t); i++) {
        svc_log_escape(dst, sizeof dst, t[i].src);
        TU_CHECK(strcmp(dst, t[i].want) == 0, "escape -> \"%s\", want \"%s\"", dst, t[i].want);
    }
    svc_log_escape(dst, sizeof dst, NULL);
    TU_CHECK(dst[0] == '\0', "NULL is the empty string");

    memcpy(dst, "untouched", 10);
    svc_log_escape(dst, 0, "abc");
    TU_CHECK(strcmp(dst, "untouched") == 0, "len 0 leaves dst untouched");
    svc_log_escape(dst, 1, "abc");
    TU_CHECK(dst[0] == '\0', "len 1: empty");
    svc_log_escape(dst, 10, "abcdefghijklmnop");
    TU_CHECK(strcmp(dst, "abcdef...") == 0, "cut with ...: %s", dst);
    /* Whole only with room for "..." to spare; under 4 bytes, empty. */
    svc_log_escape(dst, 7, "abc");
    TU_CHECK(strcmp(dst, "abc") == 0, "whole in 7 bytes: %s", dst);
    svc_log_escape(dst, 6, "abc");
    TU_CHECK(strcmp(dst, "ab...") == 0, "cut in 6 bytes: %s", dst);
    svc_log_escape(dst, 3, "abc");
    TU_CHECK(dst[0] == '\0', "3 bytes: empty");

    /* Every length, every hostile shape: never an unterminated buffer, a
     * control byte, a split \xNN or a line break. */
    static const char *const hostile[] = {
        "abcdefghijklmnopqrstuvwxyz",
        "\n\n\n\n\n\n\n\n",
        "a\nb\nc\nd\ne\nf",
        "\\\\\\\\\\\\",
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
        "x\x01y\x02z\x03",
        "...",
        "%00%0a%0d",
        NULL,
    };
    for (size_t i = 0; i < COUNT(hostile); i++)
        for (size_t len = 1; len <= 48; len++)
            check_escape(hostile[i], len);
    char huge[400];
    for (size_t i = 0; i < sizeof huge - 1; i++)
        huge[i] = (char)(1 + i % 255);
    huge[sizeof huge - 1] = '\0';
    check_escape(huge, 512);
    check_escape(huge, 100);
}

/* ---- reply and JSON helpers ---- */

/* ---- svc_log_every ---- */

/* Runs f with stderr going to a file; returns what it wrote (static). */
static const char *captured(void (*f)(void))
{
    static char out[8192];
    char path[] = "/tmp/miaosha-log-XXXXXX";
    int fd = mkstemp(path);
    TU_REQUIRE(fd >= 0, "mkstemp");
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    f();
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return out;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static svc_log_repeat rep = SVC_LOG_REPEAT_INIT;

/* An outage's 50 failed retries within a second. */
static void fifty(void)
{
    for (int i = 0; i < 50; i++)
        svc_log_every(&rep, SVC_WARN, "redis: probe %d failed", i);
}

static void over(void)
{
    svc_log_every_end(&rep, SVC_WARN, "redis: probes failed");
}

static void test_log_every(void)
{
    const char *out = captured(fifty);
    TU_CHECK(lines(out) == 1 && strstr(out, "WARN  redis: probe 0 failed\n") != NULL,
             "50 repeats: one line, the first: %s", out);
    out = captured(over);
    TU_CHECK(lines(out) == 1 && strstr(out, "redis: probes failed (49 more in the last 1 s)"),
             "the end sums up the rest: %s", out);
    out = captured(over);
    TU_CHECK(out[0] == '\0', "nothing held back: no summary: '%s'", out);
    out = captured(fifty);
    TU_CHECK(lines(out) == 1 && strstr(out, "probe 0 failed\n"),
             "after the end, the next one is written at once: %s", out);
    /* the window passed: the next line carries the count */
    rep.last_ms -= SVC_LOG_EVERY_MS;
    out = captured(fifty);
    TU_CHECK(lines(out) == 1 && strstr(out, "probe 0 failed (49 more in the last 10 s)\n"),
             "after the window, one line with the count: %s", out);
}

static void test_json_add_int(void)
{
    static const struct {
        long long v;
        const char *want;
    } t[] = {
        {0, "{\"k\":0}"},
        {-1, "{\"k\":-1}"},
        {1000000000, "{\"k\":1000000000}"},
        {9007199254740993LL, "{\"k\":9007199254740993}"}, /* 2^53 + 1: not a double */
        {LLONG_MAX, "{\"k\":9223372036854775807}"},
        {LLONG_MIN, "{\"k\":-9223372036854775808}"},
    };
    for (size_t i = 0; i < COUNT(t); i++) {
        cJSON *o = cJSON_CreateObject();
        TU_REQUIRE(o != NULL, "cJSON");
        cJSON *m = svc_json_add_int(o, "k", t[i].v);
        char *txt = cJSON_PrintUnformatted(o);
        TU_CHECK(m != NULL && txt != NULL && strcmp(txt, t[i].want) == 0, "%lld -> %s", t[i].v,
                 txt ? txt : "(null)");
        free(txt);
        cJSON_Delete(o);
    }
    TU_CHECK(svc_json_add_int(NULL, "k", 1) == NULL, "NULL object");
    /* an item that cannot be added is freed, not left to leak (ASan's
     * leak check would name it) */
    TU_CHECK(svc_json_add_item(NULL, "k", cJSON_CreateString("x")) == 0 &&
                 svc_json_add_item(NULL, NULL, cJSON_CreateObject()) == 0 &&
                 svc_json_add_item(NULL, "k", NULL) == 0,
             "svc_json_add_item with no object: 0, the item freed");
    cJSON *arr = cJSON_CreateArray();
    TU_CHECK(arr != NULL && svc_json_add_item(arr, NULL, cJSON_CreateNumber(1)) == 1 &&
                 cJSON_GetArraySize(arr) == 1,
             "svc_json_add_item into an array");
    cJSON_Delete(arr);

    /* A key with quotes, control bytes and UTF-8 is escaped: the text
     * parses back to the same key and value. */
    static const char key[] = "a\"b\\c\n\x01\xc3\xa9";
    cJSON *o = cJSON_CreateObject();
    TU_REQUIRE(o != NULL, "cJSON");
    svc_json_add_int(o, key, 12345678901234LL);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON *back = txt ? cJSON_Parse(txt) : NULL;
    cJSON *m = back ? cJSON_GetObjectItemCaseSensitive(back, key) : NULL;
    TU_CHECK(m != NULL && cJSON_IsNumber(m) && m->valuedouble == 12345678901234.0,
             "hostile key round-trips: %s", txt ? txt : "(null)");
    cJSON_Delete(back);
    free(txt);
    cJSON_Delete(o);
}

static void test_reply(void)
{
    svc_req r;
    memset(&r, 0, sizeof r);

    /* detail with quotes, control bytes, UTF-8 and 64 KiB: valid JSON that
     * gives it back unchanged. */
    static const char hostile[] = "say \"no\" \\ \n\t\x01 d\xc3\xa9j\xc3\xa0 </script>";
    size_t bign = 64 * 1024;
    char *big = malloc(bign + 1);
    TU_REQUIRE(big != NULL, "malloc");
    for (size_t i = 0; i < bign; i++)
        big[i] = hostile[i % (sizeof hostile - 1)];
    big[bign] = '\0';
    const char *details[] = {hostile, big};
    for (size_t i = 0; i < COUNT(details); i++) {
        svc_reply_error(&r, 400, "bad_request", details[i], NULL);
        cJSON *doc = r.resp ? cJSON_ParseWithLength(r.resp, r.resp_len) : NULL;
        cJSON *d = doc ? cJSON_GetObjectItemCaseSensitive(doc, "detail") : NULL;
        TU_CHECK(r.status == 400 && doc != NULL && cJSON_IsFalse(cJSON_GetObjectItem(doc, "ok")) &&
                     strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "error")),
                            "bad_request") == 0 &&
                     d != NULL && strcmp(cJSON_GetStringValue(d), details[i]) == 0,
                 "error reply %zu round-trips", i);
        TU_CHECK(r.resp != NULL && strlen(r.resp) == r.resp_len, "resp_len");
        cJSON_Delete(doc);
    }
    free(big);

    /* No detail member for NULL or "". */
    svc_reply_error(&r, 404, "not_found", "", NULL);
    TU_CHECK(r.status == 404 && strcmp(r.resp, "{\"ok\":false,\"error\":\"not_found\"}") == 0,
             "empty detail: %s", r.resp);
    svc_reply_error(&r, 404, "not_found", NULL, NULL);
    TU_CHECK(strcmp(r.resp, "{\"ok\":false,\"error\":\"not_found\"}") == 0, "NULL detail");

    /* extra's members follow, in order; extra is consumed. */
    cJSON *extra = cJSON_CreateObject();
    svc_json_add_int(extra, "wait_ms", LLONG_MAX);
    cJSON_AddStringToObject(extra, "why", "a\"b");
    svc_reply_error(&r, 429, "lock_busy", "busy", extra);
    TU_CHECK(strcmp(r.resp, "{\"ok\":false,\"error\":\"lock_busy\",\"detail\":\"busy\","
                            "\"wait_ms\":9223372036854775807,\"why\":\"a\\\"b\"}") == 0,
             "extra members: %s", r.resp);

    /* svc_reply_json: NULL is a 503 with no body; a new reply replaces the
     * old one. */
    svc_reply_json(&r, 200, NULL);
    TU_CHECK(r.status == 503 && r.resp == NULL && r.resp_len == 0, "NULL object: 503");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", 1);
    svc_reply_json(&r, 200, o);
    TU_CHECK(r.status == 200 && strcmp(r.resp, "{\"ok\":true}") == 0 && r.resp_len == 11,
             "object reply");

    /* svc_reply_text: takes the body over; NULL is a 503 with no type. */
    char *body = strdup("x 1\n");
    svc_reply_text(&r, 200, body, 4, "text/plain");
    TU_CHECK(r.status == 200 && r.resp == body && r.resp_len == 4 &&
                 strcmp(r.ctype, "text/plain") == 0,
             "text reply");
    svc_reply_text(&r, 200, NULL, 0, "text/plain");
    TU_CHECK(r.status == 503 && r.resp == NULL && r.ctype == NULL, "NULL text: 503");
    free(r.resp);
}

static void test_key(void)
{
    char buf[SVC_KEY_MAX], sku[SVC_SKU_MAX + 1];
    svc_key(buf, "demo", "stock");
    TU_CHECK(strcmp(buf, "miaosha:{demo}:stock") == 0, "key: %s", buf);
    memset(sku, 'z', SVC_SKU_MAX);
    sku[SVC_SKU_MAX] = '\0';
    svc_key(buf, sku, "initial");
    TU_CHECK(strlen(buf) == strlen("miaosha:{}:initial") + SVC_SKU_MAX &&
                 strncmp(buf, "miaosha:{zzz", 12) == 0 &&
                 strcmp(buf + strlen(buf) - 9, "}:initial") == 0,
             "the longest key fits: %s", buf);
}

/* ---- svc_bucket.h: the layout ---- */

static void test_buckets(void)
{
    char tag[SVC_TAG_MAX], key[SVC_KEY_MAX], sku[SVC_SKU_MAX + 1];
    svc_bucket_tag(tag, "demo", 3, 0);
    TU_CHECK(strcmp(tag, "demo~3") == 0, "tag %s", tag);
    svc_bucket_tag(tag, "demo", 63, 255);
    TU_CHECK(strcmp(tag, "demo~63.255") == 0, "tag with a salt %s", tag);
    /* The longest bucket key fits. */
    memset(sku, 'z', SVC_SKU_MAX);
    sku[SVC_SKU_MAX] = '\0';
    svc_bucket_tag(tag, sku, 63, 255);
    svc_lock_key(key, tag, LC_REENTRANT);
    TU_CHECK(strlen(key) == strlen("miaosha:{~63.255}:lock:reentrant") + SVC_SKU_MAX,
             "the longest bucket key fits: %s", key);

    /* The shares: even, the remainder one by one, summing to the stock. */
    static const long long stocks[] = {0, 1, 3, 4, 5, 99, 100, 101, 1000000000};
    for (size_t i = 0; i < COUNT(stocks); i++) {
        for (int n = 1; n <= SVC_BUCKETS_MAX; n++) {
            long long sum = 0, lo = stocks[i], hi = 0;
            for (int b = 0; b < n; b++) {
                long long v = svc_layout_share(stocks[i], n, b);
                sum += v;
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
                if (b > 0)
                    TU_CHECK(v <= svc_layout_share(stocks[i], n, b - 1),
                             "the remainder goes to the first buckets");
            }
            TU_CHECK(sum == stocks[i] && hi - lo <= 1, "stock %lld over %d: sum %lld, %lld..%lld",
                     stocks[i], n, sum, lo, hi);
        }
    }

    /* The placement: K distinct slots, salts only where needed, and the
     * first buckets' tags the same whatever K. */
    const char *skus[] = {"demo", "a", "hot-sku_1", sku};
    for (size_t i = 0; i < COUNT(skus); i++) {
        svc_layout all, some;
        svc_layout_place(skus[i], SVC_BUCKETS_MAX, NULL, NULL, &all);
        int slots[SVC_BUCKETS_MAX], clashes = 0, salted = 0;
        for (int b = 0; b < all.n; b++) {
            svc_layout_tag(&all, skus[i], b, tag);
            slots[b] = lc_key_slot(tag, strlen(tag));
            for (int k = 0; k < b; k++)
                clashes += slots[k] == slots[b];
            salted += all.salt[b] > 0;
        }
        TU_CHECK(all.n == SVC_BUCKETS_MAX && clashes == 0 && all.id[0] == '\0',
                 "sku %.8s: 64 buckets on 64 slots (%d clashes)", skus[i], clashes);
        TU_CHECK(salted < 8, "sku %.8s: %d salts needed", skus[i], salted);
        svc_layout_place(skus[i], 5, NULL, NULL, &some);
        TU_CHECK(some.n == 5 && memcmp(some.salt, all.salt, 5) == 0,
                 "a smaller layout shares its buckets' tags");
    }
    /* Each bucket is one slot: every key the service names for it (its
     * stock, locks, fence, idempotency copy) hashes where its tag does, so
     * no script or MULTI on a bucket crosses slots on a Redis Cluster. */
    {
        static const char *const suffixes[] = {"stock", "initial", "sold",      "orders",  "buyers",
                                               "epoch", "fence",   "fence_hwm", "reserved"};
        svc_layout l8;
        svc_layout_place("demo", 8, NULL, NULL, &l8);
        int off = 0;
        for (int b = 0; b < l8.n; b++) {
            char k[SVC_KEY_MAX + SVC_IDEM_KEY_MAX + 16];
            svc_layout_tag(&l8, "demo", b, tag);
            int slot = lc_key_slot(tag, strlen(tag));
            for (size_t i = 0; i < COUNT(suffixes); i++) {
                svc_key(k, tag, suffixes[i]);
                off += lc_key_slot(k, strlen(k)) != slot;
            }
            for (int m = 0; m < LC_MODE_COUNT; m++) {
                svc_lock_key(k, tag, (lc_mode)m);
                off += lc_key_slot(k, strlen(k)) != slot;
            }
            svc_idem_key(k, tag, "key-1");
            off += lc_key_slot(k, strlen(k)) != slot;
        }
        svc_key(key, "demo", "layout");
        TU_CHECK(off == 0 && lc_key_slot(key, strlen(key)) == lc_key_slot("demo", 4),
                 "every key of a bucket in its tag's slot (%d off); the layout in the SKU's", off);
    }

    svc_layout one;
    svc_layout_place("demo", 1, NULL, NULL, &one);
    svc_layout_tag(&one, "demo", 0, tag);
    TU_CHECK(one.n == 1 && strcmp(tag, "demo") == 0, "one bucket: the SKU's own tag");

    /* The record: round trip, and what is refused. */
    svc_layout l, back;
    svc_layout_place("demo", 4, NULL, NULL, &l);
    snprintf(l.id, sizeof l.id, "%s", "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9");
    l.salt[2] = 7;
    char rec[SVC_LAYOUT_MAX];
    TU_CHECK(svc_layout_format(&l, rec, sizeof rec) == 0 &&
                 strcmp(rec, "4 0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9 0,0,7,0") == 0,
             "record %s", rec);
    memset(&back, 0x5a, sizeof back);
    TU_CHECK(svc_layout_parse(rec, &back) == 0 && back.n == 4 && strcmp(back.id, l.id) == 0 &&
                 memcmp(back.salt, l.salt, 4) == 0,
             "parsed back");
    svc_layout_place("demo", SVC_BUCKETS_MAX, NULL, NULL, &l);
    memset(l.salt, 255, sizeof l.salt);
    memset(l.id, 'f', SVC_UUID_LEN - 1);
    l.id[SVC_UUID_LEN - 1] = '\0';
    TU_CHECK(svc_layout_format(&l, rec, sizeof rec) == 0 && svc_layout_parse(rec, &back) == 0 &&
                 back.n == SVC_BUCKETS_MAX && back.salt[63] == 255,
             "the longest record fits SVC_LAYOUT_MAX (%zu bytes)", strlen(rec));
    TU_CHECK(svc_layout_format(&l, rec, 40) == -1, "a short buffer is refused");
    static const char *const bad[] = {
        "",
        "1 abc 0",
        "65 abc " /* n too large */,
        "4 abc 0,0,0",
        "4 abc 0,0,0,0,0",
        "4 abc 0,0,0,256",
        "4 ABC 0,0,0,0",
        "4  0,0,0,0",
        "4 abc 0,0,0,0 ",
        "04 abc 0,0,0,0",
        "4 abc 0,0,0,01",
        "2 abc -1,0",
        "2 abc 0;0",
        "2 "
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        " 0,0" /* 37 chars */,
    };
    for (size_t i = 0; i < COUNT(bad); i++) {
        memset(&back, 0x5a, sizeof back);
        TU_CHECK(svc_layout_parse(bad[i], &back) == -1 && back.n == 0x5a5a5a5a,
                 "record \"%s\" refused, out untouched", bad[i]);
    }

    /* The next bucket: a start drawn among the open ones, then in order,
     * skipping what is known empty or tried; -1 when none is left. */
    int seen[8] = {0};
    for (uint64_t r = 0; r < 800; r++) {
        int b = svc_bucket_next(8, 0x05u /* 0 and 2 empty */, -1, r);
        TU_CHECK(b >= 0 && b < 8 && b != 0 && b != 2, "start %d", b);
        if (b >= 0 && b < 8)
            seen[b]++;
    }
    TU_CHECK(seen[1] == 134 && seen[7] == 133, "starts spread evenly: %d %d", seen[1], seen[7]);
    TU_CHECK(svc_bucket_next(8, 0x05u, 1, 0) == 3, "after 1, 2 skipped");
    TU_CHECK(svc_bucket_next(8, 0x05u, 7, 0) == 1, "after 7, wraps past 0");
    TU_CHECK(svc_bucket_next(4, 0x0eu, 0, 0) == 0, "the only one left, even when it is after");
    TU_CHECK(svc_bucket_next(4, 0x0fu, -1, 3) == -1 && svc_bucket_next(4, 0x0fu, 2, 3) == -1,
             "none left");
    TU_CHECK(svc_bucket_next(SVC_BUCKETS_MAX, ~(uint64_t)0 >> 1, -1, 12345) == 63,
             "the 64th bucket");

    /* The home bucket: stable, within range, spread. */
    int home[4] = {0};
    for (int u = 0; u < 400; u++) {
        char user[16];
        snprintf(user, sizeof user, "u%d", u);
        int h = svc_bucket_home(user, 4);
        TU_CHECK(h >= 0 && h < 4 && h == svc_bucket_home(user, 4), "home of %s", user);
        if (h >= 0 && h < 4)
            home[h]++;
    }
    TU_CHECK(home[0] > 50 && home[1] > 50 && home[2] > 50 && home[3] > 50,
             "homes spread: %d %d %d %d", home[0], home[1], home[2], home[3]);
    TU_CHECK(svc_bucket_home("anyone", 1) == 0, "one bucket: home 0");
}

/* ---- svc_idem_valid ---- */

static void test_idem_key(void)
{
    char max[SVC_IDEM_KEY_MAX + 2];
    memset(max, '9', sizeof max);
    max[SVC_IDEM_KEY_MAX] = '\0';
    TU_CHECK(svc_idem_valid(max) == 1, "64 characters");
    max[SVC_IDEM_KEY_MAX] = '9';
    max[SVC_IDEM_KEY_MAX + 1] = '\0';
    TU_CHECK(svc_idem_valid(max) == 0, "65 characters");
    static const struct {
        const char *s;
        int ok;
    } t[] = {
        {"k", 1},         {"order-1.a:b_c", 1}, {"A-Z.a-z:0-9_", 1}, {"", 0},     {" k", 0},
        {"k ", 0},        {"a b", 0},           {"a/b", 0},          {"a|b", 0},  {"a\nb", 0},
        {"a%00", 0},      {"{k}", 0},           {"a\"b", 0},         {"\x7f", 0}, {"\x01", 0},
        {"d\xc3\xa9", 0}, {"a,b", 0},           {"a;b", 0},          {"a=b", 0},  {"*", 0},
    };
    TU_CHECK(svc_idem_valid(NULL) == 0, "NULL");
    for (size_t i = 0; i < COUNT(t); i++)
        TU_CHECK(svc_idem_valid(t[i].s) == t[i].ok, "svc_idem_valid(\"%s\") == %d", t[i].s,
                 t[i].ok);
    /* what a replay may answer: the purchase's own answers, never a transient one */
    TU_CHECK(svc_idem_stored_outcome(PR_SOLD) && svc_idem_stored_outcome(PR_SOLD_OUT) &&
                 svc_idem_stored_outcome(PR_LIMIT_REACHED),
             "sold, sold_out, limit_reached are stored");
    for (int r = 0; r < PR_COUNT; r++)
        if (r != PR_SOLD && r != PR_SOLD_OUT && r != PR_LIMIT_REACHED)
            TU_CHECK(!svc_idem_stored_outcome((purchase_result)r), "%s is not stored",
                     svc_result[r].error);
}

/* ---- svc_admin_verdict ---- */

static void test_admin_verdict(void)
{
    static const struct {
        const char *token, *auth;
        int want;
    } t[] = {
        /* no token configured: everything passes, credentials or not */
        {NULL, NULL, 0},
        {"", NULL, 0},
        {"", "Bearer x", 0},
        {NULL, "Basic eDp5", 0},
        /* no usable credentials: 401 */
        {"s3cret", NULL, 401},
        {"s3cret", "", 401},
        {"s3cret", "Bearer", 401},
        {"s3cret", "Basic czNjcmV0", 401},
        {"s3cret", "Bearers3cret", 401},
        {"s3cret", " Bearer s3cret", 401},
        {"s3cret", "Token s3cret", 401},
        /* Bearer: the token decides */
        {"s3cret", "Bearer s3cret", 0},
        {"s3cret", "bearer s3cret", 0},
        {"s3cret", "BEARER s3cret", 0},
        {"s3cret", "Bearer    s3cret", 0},
        {"s3cret", "Bearer ", 401},
        {"s3cret", "Bearer    ", 401},
        {"s3cret", "Bearer s3cre", 403},
        {"s3cret", "Bearer s3cretx", 403},
        {"s3cret", "Bearer S3cret", 403},
        {"s3cret", "Bearer s3cret ", 403},
        {"s3cret", "Bearer \ts3cret", 403},
        {"s3cret", "Bearer x3cret", 403},
        {"s3cret", "Bearer s3crex", 403},
        {"a", "Bearer a", 0},
        {"a", "Bearer b", 403},
    };
    for (size_t i = 0; i < COUNT(t); i++) {
        int got = svc_admin_verdict(t[i].token, t[i].auth);
        TU_CHECK(got == t[i].want, "svc_admin_verdict(%s, %s) = %d, want %d",
                 t[i].token ? t[i].token : "NULL", t[i].auth ? t[i].auth : "NULL", got, t[i].want);
    }
    /* A token as long as a header line may be: compared to its last byte. */
    char tok[4097], auth[4105];
    memset(tok, 'k', sizeof tok - 1);
    tok[sizeof tok - 1] = '\0';
    snprintf(auth, sizeof auth, "Bearer %s", tok);
    TU_CHECK(svc_admin_verdict(tok, auth) == 0, "4096-byte token");
    auth[sizeof auth - 3] = 'j'; /* the token's last byte; the one after is the NUL */
    TU_CHECK(svc_admin_verdict(tok, auth) == 403, "4096-byte token, last byte wrong");
}

/* The set of SKUs the per-SKU tables index: an index per name that never
 * changes, init once per new index, a full set and a too-long name refused. */
static int inits[4];
static void count_init(int i, void *arg)
{
    inits[i] += *(int *)arg;
}

static void test_skuset(void)
{
    static svc_skuset_slot places[4];
    static svc_skuset set = SVC_SKUSET_INIT(places, 4);
    const char *names[] = {"a", "b", "demo", "hot-sku_1"};
    int idx[4], one = 1, seen = 0;
    TU_CHECK(svc_skuset_find(&set, "a") == -1 && svc_skuset_name(&set, 0) == NULL,
             "an empty set knows no name");
    for (int i = 0; i < 4; i++) {
        idx[i] = svc_skuset_add(&set, names[i], count_init, &one);
        TU_CHECK(idx[i] >= 0 && idx[i] < 4 && !(seen & (1 << idx[i])), "%s: index %d", names[i],
                 idx[i]);
        if (idx[i] >= 0 && idx[i] < 4)
            seen |= 1 << idx[i];
    }
    for (int i = 0; i < 4; i++) {
        const char *n = svc_skuset_name(&set, idx[i]);
        TU_CHECK(svc_skuset_find(&set, names[i]) == idx[i] &&
                     svc_skuset_add(&set, names[i], count_init, &one) == idx[i] && n != NULL &&
                     strcmp(n, names[i]) == 0 && inits[idx[i]] == 1,
                 "%s: found at its index, added again there, init ran once (%d)", names[i],
                 inits[idx[i]]);
    }
    char too_long[SVC_SKU_MAX + 2];
    memset(too_long, 'x', sizeof too_long - 1);
    too_long[sizeof too_long - 1] = '\0';
    TU_CHECK(svc_skuset_add(&set, "e", NULL, NULL) == -1 && svc_skuset_find(&set, "e") == -1,
             "a full set refuses a fifth name");
    TU_CHECK(svc_skuset_add(&set, too_long, NULL, NULL) == -1,
             "a name over SVC_SKU_MAX is refused");
}

int main(void)
{
    test_valid_id();
    test_parse_int();
    test_params_good();
    test_params_hostile();
    test_stock_body();
    test_log_escape();
    test_log_every();
    test_json_add_int();
    test_reply();
    test_key();
    test_buckets();
    test_skuset();
    test_idem_key();
    test_admin_verdict();
    return tu_done();
}
