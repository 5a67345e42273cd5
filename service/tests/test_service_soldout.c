/* test_service_soldout.c — the local sold-out flag (svc_soldout.h) with
 * three instances on the suite's redis-server, real HTTP:
 *   - once an instance has seen a SKU sold out it answers 409 sold_out
 *     from memory ("local":true, miaosha_sold_out_local_total), and a
 *     request with an Idempotency-Key still goes to Redis;
 *   - after PUT /stock on one instance every instance sells again within
 *     100 ms (the published reset);
 *   - the same with the subscriptions killed just before the reset
 *     (CLIENT KILL TYPE pubsub) and with the stock set by hand in Redis (no
 *     message at all): the periodic check clears the flags within the bound;
 *   - purchase.local_sold_out=false never answers from memory;
 *   - the local answer (one prebuilt reply per SKU and mode, shared by
 *     every request) names the mode and SKU asked for, is the same bytes
 *     each time and carries the JSON content type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

#define N 3
#define BOUND_MS 100

static svc_server srv[N], off;
static int rp;

static long buy(const svc_server *s, const char *sku, int *local)
{
    char path[120];
    svc_resp r;
    snprintf(path, sizeof path, "/miaosha/lua?sku=%s&user=x", sku);
    svc_req(s, "POST", path, NULL, NULL, &r);
    *local = svc_jbool(r.json, "local") == 1;
    long st = r.status;
    TU_CHECK(st == 200 || (st == 409 && svc_jerr_is(&r, "sold_out")), "buy: %ld %s", st, B(&r));
    svc_resp_free(&r);
    return st;
}

static double metric(const svc_server *s, const char *name)
{
    svc_resp r;
    svc_req(s, "GET", "/metrics", NULL, NULL, &r);
    const char *at = strstr(B(&r), name);
    double v = -1;
    while (at != NULL && at > B(&r) && at[-1] != '\n')
        at = strstr(at + 1, name);
    if (at != NULL)
        v = strtod(at + strlen(name) + 1, NULL);
    svc_resp_free(&r);
    return v;
}

/* Flags sku on every instance: stock 0, a sold-out from Redis, then
 * answers from memory. */
static void flag_all(const char *sku)
{
    int local;
    TU_REQUIRE(svc_set_stock(&srv[0], sku, 0, NULL) == 200, "stock 0");
    for (int i = 0; i < N; i++) {
        TU_CHECK(buy(&srv[i], sku, &local) == 409 && !local, "instance %d: sold out from Redis", i);
        /* The reset's own message may still be on its way and clear the
         * first flag: the flag must hold soon after. */
        int64_t dl = lc_now_ms() + tu_slack(2000);
        do
            TU_CHECK(buy(&srv[i], sku, &local) == 409, "instance %d: sold out", i);
        while (!local && lc_now_ms() < dl);
        TU_CHECK(local, "instance %d: then from memory", i);
    }
}

/* After a reset at t0_ms, every instance must sell within the bound:
 * each buys one unit as soon as it answers from Redis again. */
static void every_instance_sells(const char *what, int64_t t0_ms)
{
    for (int i = 0; i < N; i++) {
        int local = 1;
        long st = 409;
        int64_t dl = t0_ms + tu_slack(2000);
        while (st != 200 && lc_now_ms() < dl)
            st = buy(&srv[i], "so1", &local);
        int64_t took = lc_now_ms() - t0_ms;
        printf("%s: instance %d sells again after %lld ms\n", what, i, (long long)took);
        TU_CHECK(st == 200, "%s: instance %d sells again", what, i);
        TU_CHECK(took <= tu_slack(BOUND_MS), "%s: instance %d within %d ms: %lld ms", what, i,
                 BOUND_MS, (long long)took);
    }
}

/* One local answer of mode on sku: its body, checked for what it names. */
static char *local_answer(const svc_server *s, const char *mode, const char *sku)
{
    char path[120];
    svc_resp r;
    snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=x", mode, sku);
    svc_req(s, "POST", path, NULL, NULL, &r);
    TU_CHECK(r.status == 409 && svc_jbool(r.json, "local") == 1, "%s %s: local: %ld %s", mode, sku,
             r.status, B(&r));
    const char *m = svc_jstr(r.json, "mode"), *k = svc_jstr(r.json, "sku");
    TU_CHECK(m != NULL && strcmp(m, mode) == 0, "%s %s: names its mode: %s", mode, sku, B(&r));
    TU_CHECK(k != NULL && strcmp(k, sku) == 0, "%s %s: names its SKU: %s", mode, sku, B(&r));
    TU_CHECK(strncmp(r.ctype, "application/json", 16) == 0, "%s %s: content type '%s'", mode, sku,
             r.ctype);
    char *body = strdup(B(&r));
    svc_resp_free(&r);
    return body;
}

/* Answers from memory for each of the modes on sku, twice each: the same
 * bytes every time, and each mode's own. */
static void shared_answers(const char *sku)
{
    static const char *modes[] = {"lua", "token", "none"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        int local = 0;
        int64_t dl = lc_now_ms() + tu_slack(2000);
        char path[120];
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=x", modes[i], sku);
        do { /* the first sold-out of a mode may come from Redis */
            svc_resp r;
            svc_req(&srv[2], "POST", path, NULL, NULL, &r);
            local = r.status == 409 && svc_jbool(r.json, "local") == 1;
            svc_resp_free(&r);
        } while (!local && lc_now_ms() < dl);
        char *a = local_answer(&srv[2], modes[i], sku), *b = local_answer(&srv[2], modes[i], sku);
        TU_CHECK(strcmp(a, b) == 0, "%s %s: the same bytes twice:\n%s\n%s", modes[i], sku, a, b);
        free(a);
        free(b);
    }
}

int main(void)
{
    rp = tu_redis_port();
    for (int i = 0; i < N; i++)
        TU_REQUIRE(svc_start(&srv[i], rp, NULL) == 0, "server %d", i);
    const char *e[] = {"--set", "purchase.local_sold_out=false", NULL};
    TU_REQUIRE(svc_start(&off, rp, e) == 0, "server without the flag");

    flag_all("so1");
    for (int i = 0; i < N; i++)
        TU_CHECK(metric(&srv[i], "miaosha_sold_out_local_total") >= 1,
                 "instance %d counts its local answers", i);
    /* A keyed request is not answered from the flag. */
    svc_resp r;
    svc_req_hdr(&srv[1], "POST", "/miaosha/lua?sku=so1&user=k", "Idempotency-Key: so-k1", &r);
    TU_CHECK(r.status == 409 && svc_jbool(r.json, "local") != 1, "keyed: from Redis: %s", B(&r));
    svc_resp_free(&r);

    /* 1. the published reset */
    int64_t t0 = lc_now_ms();
    TU_REQUIRE(svc_set_stock(&srv[0], "so1", N, NULL) == 200, "reset");
    every_instance_sells("published reset", t0);

    /* 2. the subscriptions dropped just before the reset */
    flag_all("so1");
    TU_CHECK(tu_redis_int(rp, "CLIENT KILL TYPE pubsub") >= N, "subscriptions killed");
    t0 = lc_now_ms();
    TU_REQUIRE(svc_set_stock(&srv[0], "so1", N, NULL) == 200, "reset");
    every_instance_sells("reset with the subscriptions lost", t0);

    /* 3. no message at all: the stock set by hand */
    flag_all("so1");
    char ok[16];
    t0 = lc_now_ms();
    TU_REQUIRE(tu_redis_str(rp, ok, sizeof ok, "SET miaosha:{so1}:stock %d", N) == 0, "SET");
    every_instance_sells("stock set in Redis", t0);

    /* 4. switched off: every sold-out is Redis's */
    int local = 0;
    TU_REQUIRE(svc_set_stock(&off, "so2", 0, NULL) == 200, "stock 0");
    for (int k = 0; k < 5; k++) {
        int l;
        buy(&off, "so2", &l);
        local |= l;
    }
    TU_CHECK(!local && metric(&off, "miaosha_sold_out_local_total") == 0,
             "purchase.local_sold_out=false: never from memory");

    /* 5. the shared local answer, per SKU and mode */
    flag_all("so3");
    flag_all("so4");
    shared_answers("so3");
    shared_answers("so4");

    for (int i = 0; i < N; i++)
        TU_CHECK(svc_stop(&srv[i], 6000) == 0, "stop %d", i);
    TU_CHECK(svc_stop(&off, 6000) == 0, "stop");
    return tu_done();
}
