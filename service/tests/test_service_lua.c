/* test_service_lua.c — the lua mode (svc_lua.c, scripts/purchase.lua)
 * against a private redis-server (so that SCRIPT FLUSH and the command
 * counts are this test's alone) and real HTTP:
 *   - the boundaries: stock 0 (409 sold_out, stock_left 0, nothing written),
 *     stock 1 and stock N with N+k concurrent buyers: exactly N sold, never
 *     N+1 — the check-and-decrement's off-by-one is a known bug of script
 *     seckills;
 *   - the order record (the lock modes' fields, stock_before from the
 *     script) and the audit;
 *   - NOSCRIPT after SCRIPT FLUSH: the purchase still sells (EVAL), and the
 *     next one is an EVALSHA again;
 *   - a race run with work_ms widened: exactly the stock, every
 *     acknowledged order listed once;
 *   - corrupted keys: bad_stock_value and redis_error, nothing written;
 *   - /stats counts the sales under "lua". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

static svc_server srv;
static int rp;

/* A burst of n buyers of sku with work_ms; counts 200s and 409s, checks
 * every other status away, and checks the audit and the order list: exactly
 * want sold, every acknowledged id listed once. */
static void burst(const char *sku, int n, int stock, int work_ms, int want)
{
    char **paths = calloc((size_t)n, sizeof *paths);
    svc_resp *out = calloc((size_t)n, sizeof *out);
    TU_REQUIRE(paths && out, "memory");
    TU_REQUIRE(svc_set_stock(&srv, sku, stock, NULL) == 200, "stock %s", sku);
    for (int i = 0; i < n; i++) {
        paths[i] = malloc(200);
        snprintf(paths[i], 200, "/miaosha/lua?sku=%s&user=b%d&work_ms=%d", sku, i, work_ms);
    }
    svc_burst(&srv, "POST", paths, n, out);
    int ok = 0, sold_out = 0, other = 0;
    for (int i = 0; i < n; i++) {
        if (out[i].status == 200) {
            ok++;
            TU_CHECK(svc_jstr(out[i].json, "order_id") != NULL, "200 with an order id: %s",
                     B(&out[i]));
        } else if (out[i].status == 409) {
            sold_out++;
            TU_CHECK(svc_jerr_is(&out[i], "sold_out") && svc_jnum(out[i].json, "stock_left") == 0 &&
                         svc_jstr(out[i].json, "order_id") == NULL,
                     "409 sold_out, stock_left 0, no order id: %s", B(&out[i]));
        } else {
            other++;
            fprintf(stderr, "%s: unexpected %ld %s\n", sku, out[i].status, B(&out[i]));
        }
    }
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, sku, &a) == 200, "audit");
    printf("%s: %d buyers, stock %d, work_ms %d: 200=%d 409=%d other=%d | stock %lld sold %lld "
           "orders %lld\n",
           sku, n, stock, work_ms, ok, sold_out, other, a.stock, a.sold, a.orders);
    TU_CHECK(other == 0, "%s: %d unexpected statuses", sku, other);
    TU_CHECK(ok == want && sold_out == n - want, "%s: %d sold (want %d), %d sold out", sku, ok,
             want, sold_out);
    TU_CHECK(a.stock == stock - want && a.sold == want && a.orders == want && a.oversold == 0 &&
                 a.undersold == 0,
             "%s: audit stock %lld sold %lld orders %lld oversold %lld undersold %lld", sku,
             a.stock, a.sold, a.orders, a.oversold, a.undersold);

    char path[128];
    svc_resp o = {0};
    snprintf(path, sizeof path, "/orders/%s?limit=1000", sku);
    TU_CHECK(svc_req(&srv, "GET", path, NULL, NULL, &o) == 0 && o.status == 200, "orders");
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(o.json, "orders");
    int norders = cJSON_GetArraySize(orders), dup = 0, missing = 0;
    for (int i = 0; i < norders; i++)
        for (int j = i + 1; j < norders; j++)
            if (!strcmp(svc_jstr(cJSON_GetArrayItem(orders, i), "order_id"),
                        svc_jstr(cJSON_GetArrayItem(orders, j), "order_id")))
                dup++;
    for (int i = 0; i < n; i++) {
        const char *id = out[i].status == 200 ? svc_jstr(out[i].json, "order_id") : NULL;
        int found = 0;
        for (int j = 0; id && j < norders && !found; j++)
            found = !strcmp(svc_jstr(cJSON_GetArrayItem(orders, j), "order_id"), id);
        missing += id != NULL && !found;
    }
    TU_CHECK(norders == want && dup == 0 && missing == 0,
             "%s: %d orders listed, %d duplicate ids, %d acknowledged missing", sku, norders, dup,
             missing);
    svc_resp_free(&o);
    for (int i = 0; i < n; i++) {
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    free(paths);
    free(out);
}

/* How often Redis ran cmd (INFO commandstats). */
static long long calls(const char *cmd)
{
    return svc_redis_calls(rp, cmd);
}

static void test_stock_zero(void)
{
    svc_resp r = {0};
    TU_REQUIRE(svc_set_stock(&srv, "lz", 0, NULL) == 200, "stock 0");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lz&user=u", NULL, NULL, &r) == 0 &&
                 r.status == 409 && svc_jerr_is(&r, "sold_out") &&
                 svc_jnum(r.json, "stock_left") == 0 && svc_jstr(r.json, "order_id") == NULL,
             "stock 0: 409 sold_out, stock_left 0: %ld %s", r.status, B(&r));
    TU_CHECK(!strcmp(svc_jstr(r.json, "mode") ? svc_jstr(r.json, "mode") : "", "lua"),
             "mode lua: %s", B(&r));
    svc_resp_free(&r);
    /* never stocked at all: 404 unknown_sku, from the script itself */
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lnever", NULL, NULL, &r) == 0 &&
                 r.status == 404 && svc_jerr_is(&r, "unknown_sku") &&
                 svc_jstr(r.json, "order_id") == NULL,
             "no stock key: 404 unknown_sku: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "lz", &a) == 200 && a.stock == 0 && a.sold == 0 && a.orders == 0,
             "stock 0: nothing written (sold %lld orders %lld)", a.sold, a.orders);
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{lnever}:stock") == 0 &&
                 tu_redis_int(rp, "EXISTS miaosha:{lnever}:sold") == 0,
             "a sold-out or never-stocked purchase writes no key");
}

/* Two purchases one after the other: the reply's shape, and the records
 * the lock modes write, with the stock each one read. */
static void test_record(void)
{
    svc_resp r[3] = {{0}};
    TU_REQUIRE(svc_set_stock(&srv, "lrec", 2, NULL) == 200, "stock 2");
    TU_CHECK(svc_req(&srv, "POST", "/miaosha/lua?sku=lrec&user=alice", NULL, NULL, &r[0]) == 0 &&
                 r[0].status == 200,
             "first: %s", B(&r[0]));
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lrec", NULL, NULL, &r[1]) == 0 &&
                 r[1].status == 200,
             "second: %s", B(&r[1]));
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lrec&user=carol", NULL, NULL, &r[2]) == 0 &&
                 r[2].status == 409,
             "third: sold out: %s", B(&r[2]));
    TU_CHECK(svc_jbool(r[0].json, "ok") == 1 && svc_jnum(r[0].json, "stock_left") == 1 &&
                 svc_jnum(r[1].json, "stock_left") == 0 &&
                 svc_jnum(r[0].json, "lock_wait_ms") == 0 &&
                 svc_jbool(r[0].json, "lock_lost") == 0 &&
                 svc_jbool(r[0].json, "deleted_other_lock") == 0 &&
                 !strcmp(svc_jstr(r[0].json, "sku"), "lrec") &&
                 !strcmp(svc_jstr(r[0].json, "instance"), "lua-test"),
             "reply fields: %s", B(&r[0]));

    svc_resp o = {0};
    TU_CHECK(svc_req(&srv, "GET", "/orders/lrec", NULL, NULL, &o) == 0 && o.status == 200,
             "orders");
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(o.json, "orders");
    TU_REQUIRE(cJSON_GetArraySize(orders) == 2, "two records: %s", B(&o));
    const cJSON *a = cJSON_GetArrayItem(orders, 0), *b = cJSON_GetArrayItem(orders, 1);
    TU_CHECK(!strcmp(svc_jstr(a, "order_id"), svc_jstr(r[0].json, "order_id")) &&
                 !strcmp(svc_jstr(b, "order_id"), svc_jstr(r[1].json, "order_id")),
             "records in purchase order, ids as acknowledged");
    TU_CHECK(!strcmp(svc_jstr(a, "sku"), "lrec") && !strcmp(svc_jstr(a, "user"), "alice") &&
                 cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(b, "user")) &&
                 !strcmp(svc_jstr(a, "mode"), "lua") &&
                 !strcmp(svc_jstr(a, "instance"), "lua-test"),
             "record fields: %s", B(&o));
    TU_CHECK(svc_jnum(a, "stock_before") == 2 && svc_jnum(b, "stock_before") == 1,
             "stock_before 2 then 1: %s", B(&o));
    TU_CHECK(svc_jnum(a, "lock_wait_ms") == 0 &&
                 svc_jnum(a, "ts_ms") >= svc_jnum(a, "received_ms") &&
                 svc_jnum(a, "received_ms") > 1e12,
             "timestamps: %s", B(&o));
    svc_resp_free(&o);
    for (int i = 0; i < 3; i++)
        svc_resp_free(&r[i]);
}

static void test_noscript(void)
{
    svc_resp r = {0};
    TU_REQUIRE(svc_set_stock(&srv, "lns", 3, NULL) == 200, "stock 3");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lns", NULL, NULL, &r) == 0 && r.status == 200,
             "before the flush: %s", B(&r));
    svc_resp_free(&r);
    char okbuf[16];
    TU_CHECK(tu_redis_str(rp, okbuf, sizeof okbuf, "SCRIPT FLUSH") == 0 && !strcmp(okbuf, "OK"),
             "SCRIPT FLUSH");
    long long eval0 = calls("eval"), sha0 = calls("evalsha");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lns", NULL, NULL, &r) == 0 && r.status == 200 &&
                 svc_jnum(r.json, "stock_left") == 1,
             "after SCRIPT FLUSH: sells through EVAL: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(calls("eval") == eval0 + 1 && calls("evalsha") == sha0 + 1,
             "NOSCRIPT: one EVALSHA, one EVAL (eval %lld -> %lld, evalsha %lld -> %lld)", eval0,
             calls("eval"), sha0, calls("evalsha"));
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lns", NULL, NULL, &r) == 0 && r.status == 200 &&
                 svc_jnum(r.json, "stock_left") == 0,
             "then cached again: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(calls("eval") == eval0 + 1 && calls("evalsha") == sha0 + 2,
             "the EVAL cached the script: no second EVAL");
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "lns", &a) == 200 && a.sold == 3 && a.orders == 3 &&
                 a.stock == 0 && a.oversold == 0 && a.undersold == 0,
             "audit after the flush: sold %lld orders %lld stock %lld", a.sold, a.orders, a.stock);
}

static void test_corrupt(void)
{
    svc_resp r = {0};
    tu_redis_int(rp, "SET miaosha:{lbad}:stock abc");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lbad", NULL, NULL, &r) == 0 &&
                 r.status == 503 && svc_jerr_is(&r, "bad_stock_value") &&
                 svc_jstr(r.json, "order_id") == NULL,
             "non-integer stock: 503 bad_stock_value: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_REQUIRE(svc_set_stock(&srv, "lbad2", 5, NULL) == 200, "stock 5");
    tu_redis_int(rp, "SET miaosha:{lbad2}:orders x");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lbad2", NULL, NULL, &r) == 0 &&
                 r.status == 503 && svc_jerr_is(&r, "redis_error") &&
                 svc_jstr(r.json, "order_id") == NULL,
             "orders not a list: 503 redis_error: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{lbad2}:stock") == 5 &&
                 tu_redis_int(rp, "GET miaosha:{lbad2}:sold") == 0,
             "all or nothing: the stock and sold untouched");
    /* "007" is digits, but DECR refuses it: refused before any write */
    TU_REQUIRE(svc_set_stock(&srv, "lbad4", 5, NULL) == 200, "stock 5");
    tu_redis_int(rp, "SET miaosha:{lbad4}:sold 007");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lbad4", NULL, NULL, &r) == 0 &&
                 r.status == 503 && svc_jerr_is(&r, "redis_error"),
             "sold not canonical: 503 redis_error: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{lbad4}:stock") == 5 &&
                 tu_redis_int(rp, "LLEN miaosha:{lbad4}:orders") == 0,
             "all or nothing: the stock and orders untouched");
    tu_redis_int(rp, "SET miaosha:{lbad4}:stock 99999999999999999999");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lbad4", NULL, NULL, &r) == 0 &&
                 r.status == 503 && svc_jerr_is(&r, "bad_stock_value"),
             "stock beyond 64 bits: 503 bad_stock_value: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    tu_redis_int(rp, "DEL miaosha:{lbad3}:stock");
    tu_redis_int(rp, "RPUSH miaosha:{lbad3}:stock x");
    TU_CHECK(svc_req(&srv, "GET", "/miaosha/lua?sku=lbad3", NULL, NULL, &r) == 0 &&
                 r.status == 503 && svc_jerr_is(&r, "redis_error") &&
                 svc_jdetail_has(&r, "WRONGTYPE"),
             "stock a list: 503 redis_error WRONGTYPE: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
}

static void test_stats(void)
{
    svc_resp r = {0};
    TU_CHECK(svc_req(&srv, "GET", "/stats", NULL, NULL, &r) == 0 && r.status == 200, "stats");
    const cJSON *modes = cJSON_GetObjectItemCaseSensitive(r.json, "modes");
    const cJSON *lua = cJSON_GetObjectItemCaseSensitive(modes, "lua");
    TU_CHECK(lua != NULL && svc_jnum(lua, "sold") > 0 && svc_jnum(lua, "sold_out") > 0,
             "/stats has a lua row with its sales: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_req(&srv, "GET", "/metrics", NULL, NULL, &r) == 0 && r.status == 200 &&
                 strstr(B(&r), "mode=\"lua\"") != NULL,
             "/metrics labels mode=\"lua\"");
    svc_resp_free(&r);
}

int main(void)
{
    tu_redis rd;
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    rp = rd.port;
    const char *extra[] = {"--instance-id", "lua-test", "--set", "server.workers=32", NULL};
    TU_REQUIRE(svc_start(&srv, rp, extra) == 0, "server starts");

    test_stock_zero();
    test_record();
    burst("lone", 20, 1, 0, 1);     /* stock 1: one buyer of 20 */
    burst("lone_w", 20, 1, 20, 1);  /* the same with work_ms */
    burst("lexact", 40, 40, 0, 40); /* stock N, N buyers: all sell */
    burst("lnk", 64, 25, 0, 25);    /* N + k: exactly N, never N+1 */
    burst("lrace", 50, 10, 20, 10); /* the race run: work_ms widened */
    test_noscript();
    test_corrupt();
    test_stats();

    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    tu_redis_stop(&rd);
    return tu_done();
}
