/* test_service_client_gone.c — a buyer who closes its connection before its
 * purchase commits buys nothing. server.workers=1; five clients each send a
 * work_ms=300 purchase and give up after 150 ms: the first leaves during
 * its work_ms (the check before the commit), the other four while queued
 * (the check before the lock). Nothing is sold, every one is counted
 * client_gone, and a buyer who stays still buys. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

#define CLIENTS 5

static svc_server srv;

static size_t sink(char *data, size_t size, size_t nmemb, void *arg)
{
    (void)data;
    (void)arg;
    return size * nmemb;
}

/* One purchase whose client hangs up after 150 ms. */
static void *impatient(void *arg)
{
    char url[256];
    long *status = arg;
    CURL *c = curl_easy_init();
    if (c == NULL)
        return NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/miaosha/token?sku=cg1&work_ms=300", srv.port);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 150L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(c); /* closes the connection: the server sees its FIN */
    return NULL;
}

int main(void)
{
    const char *extra[] = {"--set", "server.workers=1", "--instance-id", "gone", NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    TU_REQUIRE(svc_set_stock(&srv, "cg1", 10, NULL) == 200, "stock cg1");

    pthread_t th[CLIENTS];
    long status[CLIENTS] = {0};
    for (int i = 0; i < CLIENTS; i++)
        pthread_create(&th[i], NULL, impatient, &status[i]);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CLIENTS; i++)
        TU_CHECK(status[i] == 0, "client %d got no reply (it left): %ld", i, status[i]);

    /* Wait until the worker has dealt with all five (inflight back to 0). */
    int64_t end = lc_now_ms() + tu_slack(5000);
    double inflight = -1;
    while (lc_now_ms() < end) {
        svc_resp st;
        svc_req(&srv, "GET", "/stats", NULL, NULL, &st);
        inflight = svc_jnum(st.json, "inflight");
        svc_resp_free(&st);
        if (inflight == 0)
            break;
        tu_sleep_ms(50);
    }
    TU_CHECK(inflight == 0, "every purchase finished: inflight %.0f", inflight);

    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "cg1", &a) == 200, "audit");
    TU_CHECK(a.sold == 0 && a.orders == 0 && a.stock == 10,
             "nothing sold to clients that left: sold %lld orders %lld stock %lld", a.sold,
             a.orders, a.stock);
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{cg1}:lock:token") == 0,
             "the lock was released");

    svc_resp st;
    svc_req(&srv, "GET", "/stats", NULL, NULL, &st);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(st.json, "modes"), "token");
    TU_CHECK(svc_jnum(tok, "client_gone") == CLIENTS, "/stats client_gone %.0f: %s",
             svc_jnum(tok, "client_gone"), B(&st));
    TU_CHECK(svc_jnum(tok, "sold") == 0, "/stats sold 0");
    svc_resp_free(&st);
    svc_resp m;
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &m);
    char want[128];
    snprintf(want, sizeof want, "miaosha_purchase_client_gone_total{mode=\"token\",sku=\"cg1\"} %d",
             CLIENTS);
    TU_CHECK(strstr(B(&m), want) != NULL, "/metrics: %s", want);
    svc_resp_free(&m);

    /* A buyer who stays buys. */
    svc_resp r;
    svc_req(&srv, "GET", "/miaosha/token?sku=cg1&work_ms=300", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "a patient buyer: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_get_audit(&srv, "cg1", &a) == 200 && a.sold == 1 && a.orders == 1 &&
                 a.oversold == 0 && a.undersold == 0,
             "audit after one sale: sold %lld orders %lld", a.sold, a.orders);

    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
