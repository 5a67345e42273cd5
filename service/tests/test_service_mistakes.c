/* test_service_mistakes.c — no silent mistakes: a request the service cannot
 * serve as the client meant it is answered so, never with something else.
 * One rule per ctest (the first argument names it), each on a private
 * redis-server and server:
 *
 *   body     a purchase's JSON body is honoured, with the query's names and
 *            rules, in every mode: it buys the SKU it names for the user it
 *            names; a parameter in both the body and the query (agreeing or
 *            not), a body that is not a JSON object, an unknown member, a
 *            value of the wrong type or a NUL is a 400 naming it, and nothing
 *            is bought anywhere.
 *   unknown  a SKU without a stock key was never stocked: GET /stock, HEAD,
 *            GET /orders and a purchase in every mode (lua's script
 *            included) answer 404 unknown_sku; the purchase writes nothing,
 *            leaves no lock, sets no local sold-out flag, takes no /metrics
 *            label and stores no Idempotency-Key outcome; PUT /stock
 *            creates the SKU and the same key then buys. A stock of 0 is
 *            sold out (409), not unknown; initial alone does not make a SKU.
 *   stock    ?stock= or ?buckets= on GET /stock (and HEAD), wherever
 *            among the parameters, is a reset sent with the wrong method:
 *            405 with Allow and "a reset is PUT /stock/{sku}", nothing
 *            reset.
 *   pretty   /stats?pretty=1 indents the same JSON; pretty=0 and no
 *            parameter answer it on one line; any other value is a 400
 *            naming pretty. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

static svc_server srv;
static int rp;  /* the private redis-server's port */
static long st; /* the status of the request just made, for the message */

static const char *const modes[] = {"none",      "mutex",  "setnx", "token",
                                    "reentrant", "fenced", "lua"};
#define NMODES (int)(sizeof modes / sizeof modes[0])

static long req(const char *method, const char *path, const char *body, svc_resp *r)
{
    svc_req(&srv, method, path, body, NULL, r);
    return r->status;
}

/* One request whose reply must be status with error (NULL: a 200), its
 * detail holding detail_part (NULL: not checked). Frees the reply. */
static void expect(const char *method, const char *path, const char *body, long status,
                   const char *error, const char *detail_part)
{
    svc_resp r = {0};
    req(method, path, body, &r);
    TU_CHECK(r.status == status, "%s %s %s: status %ld, want %ld: %s", method, path,
             body ? body : "", r.status, status, B(&r));
    if (error != NULL)
        TU_CHECK(svc_jerr_is(&r, error), "%s %s %s: error %s: %s", method, path, body ? body : "",
                 error, B(&r));
    if (detail_part != NULL)
        TU_CHECK(svc_jdetail_has(&r, detail_part), "%s %s %s: detail lacks '%s': %s", method, path,
                 body ? body : "", detail_part, B(&r));
    svc_resp_free(&r);
}

/* The number of keys of sku in Redis (miaosha:{sku}:*). */
static long long sku_keys(const char *sku)
{
    char pattern[160];
    snprintf(pattern, sizeof pattern, "miaosha:{%s}:*", sku);
    return tu_redis_int(rp, "EVAL %s 0 %s", "return #redis.call('KEYS', ARGV[1])", pattern);
}

/* --- body ------------------------------------------------------------------ */

static void rule_body(void)
{
    char path[200], body[200];
    /* A JSON body naming the SKU and the user, in every mode: the body's
     * SKU and user are bought, the default SKU is not touched. */
    TU_REQUIRE(svc_set_stock(&srv, "other", 100, NULL) == 200, "stock other");
    svc_audit before;
    TU_REQUIRE(svc_get_audit(&srv, "demo", &before) == 200, "the default SKU is seeded");
    for (int m = 0; m < NMODES; m++) {
        svc_resp r = {0};
        snprintf(path, sizeof path, "/miaosha/%s", modes[m]);
        snprintf(body, sizeof body, "{\"sku\":\"other\",\"user\":\"amy-%s\"}", modes[m]);
        st = req("POST", path, body, &r);
        TU_CHECK(st == 200, "%s: a body buys: %ld %s", modes[m], r.status, B(&r));
        const char *sku = svc_jstr(r.json, "sku");
        TU_CHECK(sku && strcmp(sku, "other") == 0, "%s: the body's SKU: %s", modes[m], B(&r));
        svc_resp_free(&r);
    }
    svc_audit a, after;
    st = svc_get_audit(&srv, "other", &a);
    TU_CHECK(st == 200 && a.sold == NMODES && a.stock == 100 - NMODES,
             "other sold %d (sold %lld, stock %lld)", NMODES, a.sold, a.stock);
    st = svc_get_audit(&srv, "demo", &after);
    TU_CHECK(st == 200 && after.sold == before.sold && after.stock == before.stock,
             "the default SKU untouched (sold %lld -> %lld)", before.sold, after.sold);
    /* The body's user is the order's user. */
    svc_resp o = {0};
    st = req("GET", "/orders/other?limit=1000", NULL, &o);
    TU_CHECK(st == 200, "orders: %s", B(&o));
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(o.json, "orders"), *it;
    int amys = 0;
    cJSON_ArrayForEach(it, orders)
    {
        const char *u = svc_jstr(it, "user");
        amys += u && strncmp(u, "amy-", 4) == 0;
    }
    TU_CHECK(amys == NMODES, "every order's user is the body's (%d of %d)", amys, NMODES);
    svc_resp_free(&o);

    /* Every parameter under its query name and rules: numbers, 0/1 and
     * booleans for the flags. */
    expect("POST", "/miaosha/token",
           "{\"sku\":\"other\",\"user\":\"bo\",\"work_ms\":1,\"wait_ms\":100,\"lease_ms\":2000,"
           "\"reenter\":0,\"pipeline\":false,\"trace\":1}",
           200, NULL, NULL);
    expect("POST", "/miaosha/reentrant", "{\"sku\":\"other\",\"reenter\":2,\"pipeline\":1}", 200,
           NULL, NULL);
    svc_resp r = {0};
    st = req("POST", "/miaosha/token", "{\"sku\":\"other\",\"pipeline\":0}", &r);
    TU_CHECK(st == 200 && svc_jbool(r.json, "pipeline") == 0, "pipeline 0 from the body: %s",
             B(&r));
    svc_resp_free(&r);
    st = req("POST", "/miaosha/token", "{}", &r);
    TU_CHECK(st == 200 && svc_jstr(r.json, "sku") && strcmp(svc_jstr(r.json, "sku"), "demo") == 0,
             "an empty object is the defaults: %s", B(&r));
    svc_resp_free(&r);

    /* Refused, each naming what is wrong; nothing bought. */
    svc_audit demo_before;
    TU_REQUIRE(svc_get_audit(&srv, "other", &before) == 200, "audit before the refusals");
    TU_REQUIRE(svc_get_audit(&srv, "demo", &demo_before) == 200, "demo before the refusals");
    /* in both places: disagreeing, and agreeing (one rule) */
    expect("POST", "/miaosha/token?sku=demo", "{\"sku\":\"other\",\"user\":\"amy\"}", 400,
           "bad_request", "sku: given in both the query and the body");
    expect("POST", "/miaosha/lua?sku=other", "{\"sku\":\"other\"}", 400, "bad_request",
           "sku: given in both the query and the body");
    expect("POST", "/miaosha/fenced?user=a", "{\"sku\":\"other\",\"user\":\"b\"}", 400,
           "bad_request", "user: given in both");
    /* the query's rules, named, "body: " in front */
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"work_ms\":\"5\"}", 400, "bad_request",
           "body: work_ms: must be an integer in 0..");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"work_ms\":1.5}", 400, "bad_request",
           "body: work_ms: must be an integer");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"lease_ms\":0}", 400, "bad_request",
           "body: lease_ms: must be an integer in 1..");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"wait_ms\":-1}", 400, "bad_request",
           "body: wait_ms:");
    expect("POST", "/miaosha/token", "{\"sku\":\"bad sku\"}", 400, "bad_request",
           "body: sku: must match");
    expect("POST", "/miaosha/token", "{\"sku\":5}", 400, "bad_request", "body: sku: must match");
    expect("POST", "/miaosha/token", "{\"user\":null,\"sku\":\"other\"}", 400, "bad_request",
           "body: user:");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"pipeline\":2}", 400, "bad_request",
           "body: pipeline:");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"skew\":1}", 400, "bad_request",
           "body: unknown parameter 'skew'");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"stock\":1}", 400, "bad_request",
           "body: unknown parameter 'stock'");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\",\"sku\":\"demo\"}", 400, "bad_request",
           "body: duplicate parameter 'sku'");
    expect("POST", "/miaosha/token", "{\"sku\":\"oth\\u0000er\"}", 400, "bad_request",
           "body: a NUL character");
    expect("POST", "/miaosha/token", "sku=other&user=amy", 400, "bad_request",
           "body: must be a JSON object");
    expect("POST", "/miaosha/token", "[{\"sku\":\"other\"}]", 400, "bad_request",
           "body: must be a JSON object");
    expect("POST", "/miaosha/token", "{\"sku\":\"other\"} x", 400, "bad_request",
           "body: must be a JSON object");
    st = svc_get_audit(&srv, "other", &after);
    TU_CHECK(st == 200 && after.sold == before.sold && after.stock == before.stock,
             "no refused body bought anything (sold %lld -> %lld)", before.sold, after.sold);
    st = svc_get_audit(&srv, "demo", &a);
    TU_CHECK(st == 200 && a.sold == demo_before.sold,
             "nor anything of the default SKU (sold %lld -> %lld)", demo_before.sold, a.sold);
}

/* --- unknown --------------------------------------------------------------- */

static void rule_unknown(void)
{
    char path[200];
    svc_resp r = {0};
    /* The audit, HEAD and the order list. */
    expect("GET", "/stock/nosuch", NULL, 404, "unknown_sku", "PUT /stock/nosuch creates it");
    st = req("HEAD", "/stock/nosuch", NULL, &r);
    TU_CHECK(st == 404, "HEAD: %ld", r.status);
    svc_resp_free(&r);
    expect("GET", "/orders/nosuch", NULL, 404, "unknown_sku", "never stocked");
    expect("GET", "/orders/nosuch?offset=0&limit=5", NULL, 404, "unknown_sku", NULL);

    /* A purchase in every mode, twice (a second one must not be answered
     * from a sold-out flag), then once with an Idempotency-Key. */
    for (int m = 0; m < NMODES; m++)
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "/miaosha/%s?sku=nosuch&user=u%d", modes[m], k);
            st = req(k ? "GET" : "POST", path, NULL, &r);
            TU_CHECK(st == 404 && svc_jerr_is(&r, "unknown_sku") &&
                         svc_jdetail_has(&r, "nothing was written") &&
                         svc_jstr(r.json, "order_id") == NULL && svc_jbool(r.json, "local") != 1,
                     "%s: 404 unknown_sku, no order, not local: %ld %s", modes[m], r.status, B(&r));
            const char *mode = svc_jstr(r.json, "mode"), *sku = svc_jstr(r.json, "sku");
            TU_CHECK(mode && strcmp(mode, modes[m]) == 0 && sku && strcmp(sku, "nosuch") == 0,
                     "%s: the reply names its mode and SKU: %s", modes[m], B(&r));
            svc_resp_free(&r);
        }
    st = svc_req_hdr(&srv, "POST", "/miaosha/lua?sku=nosuch&user=k", "Idempotency-Key: nk-1", &r);
    TU_CHECK(st == 0 && r.status == 404 && svc_jerr_is(&r, "unknown_sku"), "keyed: 404: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
    st = svc_req_hdr(&srv, "POST", "/miaosha/token?sku=nosuch&user=k2", "Idempotency-Key: nk-2",
                     &r);
    TU_CHECK(st == 0 && r.status == 404 && svc_jerr_is(&r, "unknown_sku"),
             "keyed token: 404: %ld %s", r.status, B(&r));
    svc_resp_free(&r);

    /* Nothing written: the SKU's only keys are the fenced mode's counter
     * and mark (its acquire draws a token whatever the stock), no stock,
     * sold, orders, buyers or lock key. */
    const char *absent[] = {"stock",      "initial",    "sold",           "orders",     "buyers",
                            "lock:setnx", "lock:token", "lock:reentrant", "lock:fenced"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{nosuch}:%s", absent[i]) == 0,
                 "no miaosha:{nosuch}:%s left", absent[i]);
    TU_CHECK(sku_keys("nosuch") <= 2, "at most :fence and :fence_hwm (%lld keys)",
             sku_keys("nosuch"));

    /* Counted as unknown_sku per mode, under no SKU label of its own. */
    st = req("GET", "/stats", NULL, &r);
    TU_CHECK(st == 200, "stats");
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(r.json, "modes");
    for (int m = 0; m < NMODES; m++) {
        double n = svc_jnum(cJSON_GetObjectItemCaseSensitive(ms, modes[m]), "unknown_sku");
        double want = 2 + (strcmp(modes[m], "lua") == 0 || strcmp(modes[m], "token") == 0);
        TU_CHECK(n == want, "/stats %s unknown_sku %.0f, want %.0f", modes[m], n, want);
    }
    svc_resp_free(&r);
    st = req("GET", "/metrics", NULL, &r);
    TU_CHECK(st == 200, "metrics");
    TU_CHECK(strstr(B(&r), "sku=\"nosuch\"") == NULL, "no sku=\"nosuch\" label");
    TU_CHECK(strstr(B(&r), "miaosha_purchase_unknown_sku_total{mode=\"lua\",sku=\"_other\"} 3") !=
                 NULL,
             "miaosha_purchase_unknown_sku_total under _other");
    svc_resp_free(&r);
    /* The trace records what a worker ran: the 404s, with their status. */
    st = req("GET", "/trace/nosuch", NULL, &r);
    TU_CHECK(st == 200 && strstr(B(&r), "\"status\":404") &&
                 strstr(B(&r), "\"error\":\"unknown_sku\""),
             "traced as 404 unknown_sku: %ld", r.status);
    svc_resp_free(&r);

    /* A reset creates the SKU: the audit, the orders and every mode buy at
     * once, and the same Idempotency-Key buys (a 404 is not stored). */
    TU_REQUIRE(svc_set_stock(&srv, "nosuch", 20, NULL) == 200, "PUT creates it");
    svc_audit a;
    st = svc_get_audit(&srv, "nosuch", &a);
    TU_CHECK(st == 200 && a.stock == 20 && a.initial == 20, "audit after the reset");
    expect("GET", "/orders/nosuch", NULL, 200, NULL, NULL);
    for (int m = 0; m < NMODES; m++) {
        snprintf(path, sizeof path, "/miaosha/%s?sku=nosuch", modes[m]);
        expect("POST", path, NULL, 200, NULL, NULL);
    }
    st = svc_req_hdr(&srv, "POST", "/miaosha/lua?sku=nosuch&user=k", "Idempotency-Key: nk-1", &r);
    TU_CHECK(st == 0 && r.status == 200 && r.replayed[0] == '\0',
             "the same key buys after the reset: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    st = svc_req_hdr(&srv, "POST", "/miaosha/token?sku=nosuch&user=k2", "Idempotency-Key: nk-2",
                     &r);
    TU_CHECK(st == 0 && r.status == 200 && r.replayed[0] == '\0',
             "token: the same key buys after the reset: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    st = svc_get_audit(&srv, "nosuch", &a);
    TU_CHECK(st == 200 && a.sold == NMODES + 2 && a.oversold == 0, "sold %d after the reset (%lld)",
             NMODES + 2, a.sold);

    /* Stock 0 is a SKU that is sold out, not one that does not exist. */
    TU_REQUIRE(svc_set_stock(&srv, "zero", 0, NULL) == 200, "stock 0");
    expect("GET", "/stock/zero", NULL, 200, NULL, NULL);
    for (int m = 0; m < NMODES; m++) {
        snprintf(path, sizeof path, "/miaosha/%s?sku=zero", modes[m]);
        expect("POST", path, NULL, 409, "sold_out", NULL);
    }
    /* A sold-out flag does not outlive its SKU: with the stock key deleted
     * by hand, the local answer stops within the flag's 50 ms check and
     * the SKU is unknown again. */
    expect("POST", "/miaosha/token?sku=zero", NULL, 409, "sold_out", NULL);
    st = req("POST", "/miaosha/token?sku=zero", NULL, &r);
    TU_CHECK(st == 409 && svc_jbool(r.json, "local") == 1, "zero: answered from the flag: %s",
             B(&r));
    svc_resp_free(&r);
    tu_redis_int(rp, "DEL miaosha:{zero}:stock");
    int64_t end = lc_now_ms() + tu_slack(1000);
    do {
        st = req("POST", "/miaosha/token?sku=zero", NULL, &r);
        svc_resp_free(&r);
    } while (st != 404 && lc_now_ms() < end && (tu_sleep_ms(10), 1));
    TU_CHECK(st == 404, "zero without a stock key: 404 within 1 s, not a local 409 (%ld)", st);
    /* Only the stock key makes a SKU: initial and sold alone do not. */
    tu_redis_int(rp, "SET miaosha:{half}:initial 5");
    tu_redis_int(rp, "SET miaosha:{half}:sold 0");
    expect("GET", "/stock/half", NULL, 404, "unknown_sku", NULL);
    expect("POST", "/miaosha/token?sku=half", NULL, 404, "unknown_sku", NULL);
    expect("POST", "/miaosha/lua?sku=half", NULL, 404, "unknown_sku", NULL);
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{half}:sold") == 0, "half: nothing sold");
}

/* --- stock ----------------------------------------------------------------- */

static void rule_stock(void)
{
    const char *paths[] = {
        "/stock/demo?stock=-1",    "/stock/demo?stock=5",         "/stock/demo?stock",
        "/stock/demo?stock=abc",   "/stock/demo?stock=1&stock=2", "/stock/demo?buckets=4",
        "/stock/demo?buckets=abc", "/stock/demo?x=1&stock=5",     "/stock/demo?limit=2&buckets=3",
        "/stock/demo?x=1&stock"};
    svc_audit before, after;
    TU_REQUIRE(svc_get_audit(&srv, "demo", &before) == 200, "audit before");
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        svc_resp r = {0};
        st = req("GET", paths[i], NULL, &r);
        TU_CHECK(st == 405 && svc_jerr_is(&r, "method_not_allowed") &&
                     svc_jdetail_has(&r, "a reset is PUT /stock/{sku}") &&
                     strcmp(r.allow, "GET, HEAD, PUT") == 0,
                 "GET %s: 405, Allow '%s': %ld %s", paths[i], r.allow, r.status, B(&r));
        svc_resp_free(&r);
    }
    svc_resp r = {0};
    st = req("HEAD", "/stock/demo?stock=3", NULL, &r);
    TU_CHECK(st == 405 && strcmp(r.allow, "GET, HEAD, PUT") == 0, "HEAD: 405: %ld", r.status);
    svc_resp_free(&r);
    /* An unknown SKU with ?stock= is the same wrong method, before Redis. */
    expect("GET", "/stock/nosuch?stock=3", NULL, 405, "method_not_allowed", "a reset is PUT");
    expect("GET", "/stock/nosuch?buckets=4", NULL, 405, "method_not_allowed", "a reset is PUT");
    /* Other parameters are still unknown parameters. */
    expect("GET", "/stock/demo?x=1", NULL, 400, "bad_request", "unknown parameter 'x'");
    expect("GET", "/stock/demo?STOCK=5", NULL, 400, "bad_request", "unknown parameter 'STOCK'");
    st = svc_get_audit(&srv, "demo", &after);
    TU_CHECK(st == 200 && after.stock == before.stock && after.initial == before.initial,
             "nothing reset (stock %lld -> %lld)", before.stock, after.stock);
    /* The reset itself, with the method it takes. */
    svc_resp p = {0};
    st = req("PUT", "/stock/demo?stock=7", NULL, &p);
    TU_CHECK(st == 200 && svc_jnum(p.json, "stock") == 7, "PUT ?stock=7: %s", B(&p));
    svc_resp_free(&p);
}

/* --- pretty ---------------------------------------------------------------- */

static void rule_pretty(void)
{
    svc_resp flat = {0}, pretty = {0}, zero = {0};
    TU_REQUIRE(req("GET", "/stats", NULL, &flat) == 200, "stats");
    TU_CHECK(strchr(B(&flat), '\n') == NULL, "no parameter: one line");
    st = req("GET", "/stats?pretty=0", NULL, &zero);
    TU_CHECK(st == 200 && strchr(B(&zero), '\n') == NULL &&
                 strncmp(B(&zero), "{\"ok\":true,", 11) == 0,
             "pretty=0: one line: %.60s", B(&zero));
    st = req("GET", "/stats?pretty=1", NULL, &pretty);
    TU_CHECK(st == 200 && strncmp(pretty.ctype, "application/json", 16) == 0, "pretty=1: 200 JSON");
    TU_CHECK(strncmp(B(&pretty), "{\n  \"ok\": true,\n  \"instance\": ", 30) == 0,
             "two spaces per level, one member per line: %.60s", B(&pretty));
    TU_CHECK(strstr(B(&pretty), "\n    \"token\": {\n      \"requests\": ") != NULL,
             "nested members indented by level");
    TU_CHECK(pretty.len > 0 && B(&pretty)[pretty.len - 1] == '\n', "ends with a newline");
    /* The same document: every member of the flat one, same types. */
    TU_CHECK(pretty.json != NULL && flat.json != NULL &&
                 cJSON_GetArraySize(pretty.json) == cJSON_GetArraySize(flat.json),
             "same members (%d, %d)", cJSON_GetArraySize(pretty.json),
             cJSON_GetArraySize(flat.json));
    cJSON *pm = cJSON_GetObjectItemCaseSensitive(pretty.json, "modes");
    cJSON *fm = cJSON_GetObjectItemCaseSensitive(flat.json, "modes");
    TU_CHECK(cJSON_GetArraySize(pm) == cJSON_GetArraySize(fm) && cJSON_GetArraySize(pm) >= NMODES,
             "same modes");
    svc_resp_free(&flat);
    svc_resp_free(&pretty);
    svc_resp_free(&zero);
    svc_resp h = {0};
    st = req("HEAD", "/stats?pretty=1", NULL, &h);
    TU_CHECK(st == 200, "HEAD pretty: %ld", h.status);
    svc_resp_free(&h);
    const char *bad[] = {"/stats?pretty=2", "/stats?pretty=", "/stats?pretty", "/stats?pretty=yes",
                         "/stats?pretty=1&pretty=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect("GET", bad[i], NULL, 400, "bad_request", "pretty");
    expect("GET", "/stats?x=1", NULL, 400, "bad_request", "unknown parameter 'x'");
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*run)(void);
    } rules[] = {
        {"body", rule_body},
        {"unknown", rule_unknown},
        {"stock", rule_stock},
        {"pretty", rule_pretty},
    };
    void (*run)(void) = NULL;
    for (size_t i = 0; argc == 2 && i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(argv[1], rules[i].name) == 0)
            run = rules[i].run;
    if (run == NULL) {
        fprintf(stderr, "usage: %s body|unknown|stock|pretty\n", argv[0]);
        return 2;
    }
    tu_redis rd;
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    rp = rd.port;
    const char *extra[] = {"--instance-id", "mistakes", NULL};
    TU_REQUIRE(svc_start(&srv, rp, extra) == 0, "server starts");
    run();
    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    tu_redis_stop(&rd);
    return tu_done();
}
