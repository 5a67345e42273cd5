/* test_service_lock_keys.c — one lock key per mode. The modes keep
 * different types under their lock key (setnx and token a string,
 * reentrant a hash); on one shared key a reentrant purchase failed with
 * 503 (WRONGTYPE) while a setnx purchase held it, and setnx's plain DEL
 * deleted a reentrant holder's hash. Mixed modes on one SKU now lock
 * independently and still share the stock. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

static svc_server srv;

typedef struct job {
    char path[160];
    int64_t start_after_ms;
    svc_resp r;
} job;

static void *one(void *arg)
{
    job *j = arg;
    tu_sleep_ms(j->start_after_ms);
    svc_req(&srv, "GET", j->path, NULL, NULL, &j->r);
    return NULL;
}

static void run(job *jobs, int n)
{
    pthread_t th[8];
    for (int i = 0; i < n; i++)
        TU_REQUIRE(pthread_create(&th[i], NULL, one, &jobs[i]) == 0, "thread");
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

int main(void)
{
    const char *extra[] = {"--instance-id", "lockkeys", NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");

    /* A setnx purchase holds its lock 800 ms; reentrant and token buy
     * meanwhile (wait_ms 0: no waiting for the setnx holder). */
    TU_REQUIRE(svc_set_stock(&srv, "mx1", 10, NULL) == 200, "stock mx1");
    job a[3] = {{"/miaosha/setnx?sku=mx1&work_ms=800", 0, {0}},
                {"/miaosha/reentrant?sku=mx1&wait_ms=0", 200, {0}},
                {"/miaosha/token?sku=mx1&wait_ms=0", 200, {0}}};
    run(a, 3);
    for (int i = 0; i < 3; i++) {
        TU_CHECK(a[i].r.status == 200, "%s: %ld %s", a[i].path, a[i].r.status, B(&a[i].r));
        TU_CHECK(svc_jbool(a[i].r.json, "lock_lost") == 0 &&
                     svc_jbool(a[i].r.json, "deleted_other_lock") == 0,
                 "%s: no lock lost or deleted: %s", a[i].path, B(&a[i].r));
        svc_resp_free(&a[i].r);
    }

    /* A reentrant purchase holds its lock 800 ms; a setnx purchase buys and
     * releases meanwhile: its DEL must not touch the reentrant hash. */
    TU_REQUIRE(svc_set_stock(&srv, "mx2", 10, NULL) == 200, "stock mx2");
    job b[2] = {{"/miaosha/reentrant?sku=mx2&work_ms=800", 0, {0}},
                {"/miaosha/setnx?sku=mx2&wait_ms=0", 200, {0}}};
    run(b, 2);
    for (int i = 0; i < 2; i++) {
        TU_CHECK(b[i].r.status == 200, "%s: %ld %s", b[i].path, b[i].r.status, B(&b[i].r));
        TU_CHECK(svc_jbool(b[i].r.json, "lock_lost") == 0 &&
                     svc_jbool(b[i].r.json, "deleted_other_lock") == 0,
                 "%s: no lock lost or deleted: %s", b[i].path, B(&b[i].r));
        svc_resp_free(&b[i].r);
    }

    /* A setnx holder whose lease (300 ms) runs out during its work_ms
     * (800 ms); a reentrant buyer comes in after 100 ms and holds 800 ms.
     * On a shared key the reentrant buyer waited for the setnx lease, took
     * the key, and the setnx DEL then deleted its hash. */
    TU_REQUIRE(svc_set_stock(&srv, "mx3", 10, NULL) == 200, "stock mx3");
    job c[2] = {{"/miaosha/setnx?sku=mx3&lease_ms=300&work_ms=800", 0, {0}},
                {"/miaosha/reentrant?sku=mx3&wait_ms=2000&work_ms=800", 100, {0}}};
    run(c, 2);
    TU_CHECK(c[0].r.status == 200, "setnx: %ld %s", c[0].r.status, B(&c[0].r));
    TU_CHECK(svc_jbool(c[0].r.json, "deleted_other_lock") == 0, "setnx deleted no other lock: %s",
             B(&c[0].r));
    TU_CHECK(c[1].r.status == 200 && svc_jbool(c[1].r.json, "lock_lost") == 0,
             "reentrant kept its lock: %ld %s", c[1].r.status, B(&c[1].r));
    TU_CHECK(svc_jnum(c[1].r.json, "lock_wait_ms") < 200,
             "reentrant did not wait for the setnx lock: %s", B(&c[1].r));
    svc_resp_free(&c[0].r);
    svc_resp_free(&c[1].r);

    /* The stock is shared: every sale above came off the one counter. */
    svc_audit au;
    TU_CHECK(svc_get_audit(&srv, "mx1", &au) == 200 && au.sold == 3 && au.orders == 3,
             "mx1: three sales on one stock: sold %lld", au.sold);
    const char *held[] = {"setnx", "reentrant"};
    for (int m = 0; m < 2; m++)
        TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{mx2}:lock:%s", held[m]) == 0,
                 "mx2 %s lock released", held[m]);

    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
