/* test_service_overload.c — the bounded worker queue. With server.workers=1
 * and server.max_queue=1: one purchase runs, one waits, the next is
 * answered 503 overloaded at once. Time spent waiting for a worker counts
 * against wait_ms, and a purchase that waited longer than wait_ms + work_ms
 * + 1 s is answered 503 overloaded without touching Redis. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

static svc_server srv;

typedef struct job {
    const char *path;
    svc_resp r;
} job;

static void *one(void *arg)
{
    job *j = arg;
    svc_req(&srv, "GET", j->path, NULL, NULL, &j->r);
    return NULL;
}

int main(void)
{
    const char *extra[] = {"--set",         "server.workers=1", "--set", "server.max_queue=1",
                           "--instance-id", "overload",         NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    const char *skus[] = {"ov1", "ov2", "ov3"};
    for (int i = 0; i < 3; i++)
        TU_REQUIRE(svc_set_stock(&srv, skus[i], 5, NULL) == 200, "stock %s", skus[i]);

    /* A runs 2.5 s; B waits for the worker (wait_ms 0, so its budget is
     * 0 + 0 + 1 s); C finds the queue full. */
    job a = {"/miaosha/none?sku=ov1&work_ms=2500", {0}};
    job b = {"/miaosha/none?sku=ov2&wait_ms=0", {0}};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, one, &a);
    tu_sleep_ms(300);
    pthread_create(&tb, NULL, one, &b);
    tu_sleep_ms(300);
    svc_resp c = {0};
    int64_t t0 = lc_now_ms();
    svc_req(&srv, "GET", "/miaosha/none?sku=ov3", NULL, NULL, &c);
    int64_t dt = lc_now_ms() - t0;
    TU_CHECK(c.status == 503 && svc_jerr_is(&c, "overloaded"), "queue full: %ld %s", c.status,
             B(&c));
    TU_CHECK(svc_jdetail_has(&c, "server.max_queue"), "detail names the key: %s", B(&c));
    TU_CHECK(dt < tu_slack(300), "refused at once: %lld ms", (long long)dt);
    svc_resp_free(&c);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    TU_CHECK(a.r.status == 200, "the running purchase: %ld %s", a.r.status, B(&a.r));
    TU_CHECK(b.r.status == 503 && svc_jerr_is(&b.r, "overloaded") &&
                 svc_jdetail_has(&b.r, "waited"),
             "queued past its budget: %ld %s", b.r.status, B(&b.r));
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{ov2}:sold") == 0, "ov2: nothing tried");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{ov3}:sold") == 0, "ov3: nothing tried");
    svc_resp_free(&a.r);
    svc_resp_free(&b.r);

    /* Within its budget a queued purchase runs: queued ~1.2 s of a 5 s
     * wait_ms. */
    job d = {"/miaosha/none?sku=ov1&work_ms=1500", {0}};
    job e = {"/miaosha/none?sku=ov3&wait_ms=5000", {0}};
    pthread_create(&ta, NULL, one, &d);
    tu_sleep_ms(300);
    pthread_create(&tb, NULL, one, &e);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    TU_CHECK(d.r.status == 200, "d: %ld %s", d.r.status, B(&d.r));
    TU_CHECK(e.r.status == 200, "queued within wait_ms: %ld %s", e.r.status, B(&e.r));
    svc_resp_free(&d.r);
    svc_resp_free(&e.r);

    /* The refusals are counted as purchase errors. */
    svc_resp m = {0};
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &m);
    TU_CHECK(strstr(B(&m), "miaosha_purchase_errors_total{mode=\"none\",sku=\"ov3\"} 1") != NULL &&
                 strstr(B(&m), "miaosha_purchase_errors_total{mode=\"none\",sku=\"ov2\"} 1") !=
                     NULL,
             "errors counted");
    TU_CHECK(strstr(B(&m), "code=\"503\"} 2") != NULL, "two 503s");
    svc_resp_free(&m);
    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
