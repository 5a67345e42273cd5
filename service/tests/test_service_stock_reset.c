/* test_service_stock_reset.c — a stock reset (PUT /stock) under live
 * traffic. The reset deletes the held lock and sets a new stock; a
 * purchase in flight, which read the old stock, used to write old-1 over
 * the new stock afterwards (the audit then showed hundreds oversold).
 * The reset now bumps the SKU's epoch, which every purchase WATCHes from
 * its stock read to its commit: the in-flight commit writes nothing and
 * answers 409 stock_reset, and the audit stays clean. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

#define BUYERS 8

static svc_server srv;
static atomic_int stop;
static atomic_int n_sold, n_reset, n_other;

static void *buyer(void *arg)
{
    void *h = NULL;
    (void)arg;
    while (!atomic_load(&stop)) {
        svc_resp r;
        svc_req_keep(&h, &srv, "GET", "/miaosha/token?sku=rs1&work_ms=5&wait_ms=5000", &r);
        if (r.status == 200)
            atomic_fetch_add(&n_sold, 1);
        else if (r.status == 409 && svc_jerr_is(&r, "stock_reset"))
            atomic_fetch_add(&n_reset, 1);
        else if (!(r.status == 409 && svc_jerr_is(&r, "sold_out"))) {
            atomic_fetch_add(&n_other, 1);
            fprintf(stderr, "unexpected reply %ld %s\n", r.status, B(&r));
        }
        svc_resp_free(&r);
    }
    svc_handle_free(h);
    return NULL;
}

int main(void)
{
    const char *extra[] = {"--instance-id", "reset", NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    TU_REQUIRE(svc_set_stock(&srv, "rs1", 100000, NULL) == 200, "stock rs1");

    pthread_t th[BUYERS];
    for (int i = 0; i < BUYERS; i++)
        pthread_create(&th[i], NULL, buyer, NULL);
    /* Several resets while the buyers keep the lock busy. */
    for (int k = 0; k < 5; k++) {
        tu_sleep_ms(300);
        TU_CHECK(svc_set_stock(&srv, "rs1", 1000 + k, NULL) == 200, "reset %d", k);
    }
    tu_sleep_ms(300);
    atomic_store(&stop, 1);
    for (int i = 0; i < BUYERS; i++)
        pthread_join(th[i], NULL);

    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "rs1", &a) == 200, "audit");
    printf("sold %d, stock_reset %d, other %d; audit stock %lld initial %lld sold %lld orders "
           "%lld oversold %lld undersold %lld\n",
           n_sold, n_reset, n_other, a.stock, a.initial, a.sold, a.orders, a.oversold, a.undersold);
    TU_CHECK(a.initial == 1004, "the last reset's stock: %lld", a.initial);
    TU_CHECK(a.oversold == 0 && a.undersold == 0,
             "a clean audit after resets under load: oversold %lld undersold %lld", a.oversold,
             a.undersold);
    TU_CHECK(a.sold == a.orders && a.sold == a.initial - a.stock,
             "sold %lld = orders %lld = initial - stock %lld", a.sold, a.orders,
             a.initial - a.stock);
    TU_CHECK(n_sold > 0, "purchases went through: %d", n_sold);
    TU_CHECK(n_reset >= 1, "a purchase in flight met a reset: %d", n_reset);
    TU_CHECK(n_other == 0, "no other errors: %d", n_other);

    svc_resp st;
    svc_req(&srv, "GET", "/stats", NULL, NULL, &st);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(st.json, "modes"), "token");
    TU_CHECK(svc_jnum(tok, "stock_reset") == n_reset, "/stats stock_reset %.0f, replies %d",
             svc_jnum(tok, "stock_reset"), n_reset);
    svc_resp_free(&st);
    svc_resp m;
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &m);
    TU_CHECK(strstr(B(&m), "miaosha_purchase_stock_reset_total{mode=\"token\",sku=\"rs1\"}") !=
                 NULL,
             "/metrics counts stock_reset");
    svc_resp_free(&m);

    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
