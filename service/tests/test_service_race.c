/* test_service_race.c — the oversell demonstration: stock 10, 50 concurrent
 * buyers, work_ms=20 widening the GET→SET window. `none` oversells; mutex,
 * setnx, token and reentrant each sell exactly 10 with a clean audit and 10
 * unique order ids, every one of them in the order list. Each mode runs
 * twice: with ?pipeline=0 and with ?pipeline=1 (the stock read in the
 * acquire's round trip, the commit in the release's), same outcomes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

#define BUYERS 50
#define STOCK 10

static void run(svc_server *s, const char *mode, int pipeline)
{
    char sku[64];
    char *paths[BUYERS];
    svc_resp out[BUYERS];
    int ok = 0, sold_out = 0, other = 0;

    snprintf(sku, sizeof sku, "race_%s_p%d", mode, pipeline);
    TU_REQUIRE(svc_set_stock(s, sku, STOCK, NULL) == 200, "stock %s", sku);
    for (int i = 0; i < BUYERS; i++) {
        paths[i] = malloc(256);
        snprintf(paths[i], 256,
                 "/miaosha/%s?sku=%s&user=buyer%d&work_ms=20&wait_ms=20000&pipeline=%d", mode, sku,
                 i, pipeline);
    }
    svc_burst(s, "GET", paths, BUYERS, out);
    for (int i = 0; i < BUYERS; i++) {
        if (out[i].status == 200 || out[i].status == 409)
            TU_CHECK(svc_jbool(out[i].json, "pipeline") == pipeline, "%s: pipeline=%d ran: %s",
                     mode, pipeline, B(&out[i]));
        if (out[i].status == 200)
            ok++;
        else if (out[i].status == 409)
            sold_out++;
        else {
            other++;
            fprintf(stderr, "%s: unexpected %ld %s\n", mode, out[i].status, B(&out[i]));
        }
    }
    svc_audit a;
    TU_CHECK(svc_get_audit(s, sku, &a) == 200, "audit");
    printf("%-9s p%d 200=%d 409=%d other=%d | stock %lld sold %lld orders %lld oversold %lld "
           "undersold %lld\n",
           mode, pipeline, ok, sold_out, other, a.stock, a.sold, a.orders, a.oversold, a.undersold);

    /* Every acknowledged order id is in the list, and ids are unique. */
    char path[128];
    svc_resp o = {0};
    snprintf(path, sizeof path, "/orders/%s?limit=1000", sku);
    svc_req(s, "GET", path, NULL, NULL, &o);
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(o.json, "orders");
    int n = cJSON_GetArraySize(orders), dup = 0, missing = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (!strcmp(svc_jstr(cJSON_GetArrayItem(orders, i), "order_id"),
                        svc_jstr(cJSON_GetArrayItem(orders, j), "order_id")))
                dup++;
    for (int i = 0; i < BUYERS; i++) {
        if (out[i].status != 200)
            continue;
        const char *id = svc_jstr(out[i].json, "order_id");
        int found = 0;
        for (int j = 0; id && j < n && !found; j++)
            found = !strcmp(svc_jstr(cJSON_GetArrayItem(orders, j), "order_id"), id);
        missing += !found;
    }
    TU_CHECK(dup == 0, "%s: %d duplicate order ids", mode, dup);
    TU_CHECK(missing == 0, "%s: %d acknowledged orders missing", mode, missing);
    TU_CHECK(other == 0, "%s: %d unexpected statuses", mode, other);
    TU_CHECK(n == ok && a.orders == ok && a.sold == ok, "%s: orders %d, 200s %d, sold %lld", mode,
             n, ok, a.sold);

    if (!strcmp(mode, "none")) {
        TU_CHECK(a.oversold > 0, "none oversells: oversold %lld", a.oversold);
        TU_CHECK(ok > STOCK, "none acknowledges more than the stock: %d", ok);
    } else {
        TU_CHECK(ok == STOCK && sold_out == BUYERS - STOCK, "%s: %d sold, %d sold out", mode, ok,
                 sold_out);
        TU_CHECK(a.stock == 0 && a.sold == STOCK, "%s: stock %lld sold %lld", mode, a.stock,
                 a.sold);
        TU_CHECK(a.oversold == 0 && a.undersold == 0, "%s: oversold %lld undersold %lld", mode,
                 a.oversold, a.undersold);
        TU_CHECK(n == STOCK, "%s: %d unique order ids", mode, n);
    }
    svc_resp_free(&o);
    for (int i = 0; i < BUYERS; i++) {
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
}

int main(void)
{
    svc_server s;
    const char *extra[] = {"--instance-id", "race", NULL};
    TU_REQUIRE(svc_start(&s, tu_redis_port(), extra) == 0, "server starts");
    const char *modes[] = {"none", "mutex", "setnx", "token", "reentrant"};
    for (int i = 0; i < 5; i++)
        for (int pipeline = 0; pipeline < 2; pipeline++)
            run(&s, modes[i], pipeline);
    TU_CHECK(svc_stop(&s, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&s);
    return tu_done();
}
