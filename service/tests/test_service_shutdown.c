/* test_service_shutdown.c — SIGTERM stops accepting, finishes in-flight
 * purchases (their locks released, their 200s delivered) and exits 0
 * within 5 s; a purchase sleeping longer than that is cut short without
 * writing anything. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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
    const char *extra[] = {"--instance-id", "shutdown", NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    TU_CHECK(svc_set_stock(&srv, "sd1", 5, NULL) == 200, "stock");
    TU_CHECK(svc_set_stock(&srv, "sd2", 5, NULL) == 200, "stock");

    job a = {"/miaosha/token?sku=sd1&work_ms=800", {0}};
    job b = {"/miaosha/reentrant?sku=sd2&work_ms=20000", {0}};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, one, &a);
    pthread_create(&tb, NULL, one, &b);
    /* Both hold their locks now. */
    int64_t t0 = tu_now_ms();
    while (tu_now_ms() - t0 < 3000 &&
           (tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd1}:lock") != 1 ||
            tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd2}:lock") != 1))
        tu_sleep_ms(5);
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd1}:lock") == 1, "sd1 held");
    t0 = tu_now_ms();
    kill(srv.pid, SIGTERM);
    int rc = svc_wait_exit(&srv, 8000);
    int64_t dt = tu_now_ms() - t0;
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    TU_CHECK(rc == 0, "exit status %d", rc);
    TU_CHECK(dt < 5000, "exited in %lld ms", (long long)dt);
    TU_CHECK(a.r.status == 200, "in-flight purchase finished: %ld %s", a.r.status, B(&a.r));
    TU_CHECK(b.r.status == 503, "20 s purchase cut short: %ld %s", b.r.status, B(&b.r));
    TU_CHECK(svc_jstr(b.r.json, "error") && !strcmp(svc_jstr(b.r.json, "error"), "shutting_down"),
             "shutting_down");
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd1}:lock") == 0, "sd1 lock released");
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd2}:lock") == 0, "sd2 lock released");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd1}:sold") == 1, "sd1 sold 1");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd2}:sold") == 0, "sd2 wrote nothing");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd2}:stock") == 5, "sd2 stock intact");
    svc_resp_free(&a.r);
    svc_resp_free(&b.r);
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
