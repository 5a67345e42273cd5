/* test_service_shutdown.c — SIGTERM stops accepting (a new connection gets
 * no answer), finishes in-flight
 * purchases (their locks released, their 200s delivered) and exits 0
 * within 5 s; a purchase sleeping longer than that is cut short without
 * writing anything; purchases waiting for a lock are answered 503
 * shutting_down at once (lc_lock_args.cancel), releasing what they hold —
 * also one that polls the locked buckets of a SKU in stock buckets
 * (lc_conn_retry_pause's cancel). */
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
    int64_t done_ms;
} job;

static void *one(void *arg)
{
    job *j = arg;
    svc_req(&srv, "GET", j->path, NULL, NULL, &j->r);
    j->done_ms = lc_now_ms();
    return NULL;
}

int main(void)
{
    const char *extra[] = {"--instance-id", "shutdown", NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    TU_CHECK(svc_set_stock(&srv, "sd1", 5, NULL) == 200, "stock");
    TU_CHECK(svc_set_stock(&srv, "sd2", 5, NULL) == 200, "stock");
    TU_CHECK(svc_set_stock(&srv, "sd3", 5, NULL) == 200, "stock");
    TU_CHECK(svc_set_stock(&srv, "sd4", 5, NULL) == 200, "stock");
    /* sd3's lock is held by someone else for a minute; so are both of
     * sd5's bucket locks. */
    tu_redis_int(srv.redis_port, "SET miaosha:{sd3}:lock:token outsider PX 60000");
    tu_redis_int(srv.redis_port, "SET miaosha:{sd3}:lock:setnx outsider PX 60000");
    svc_resp put;
    svc_req(&srv, "PUT", "/stock/sd5?stock=4&buckets=2", NULL, NULL, &put);
    TU_CHECK(put.status == 200, "stock in 2 buckets: %s", B(&put));
    svc_resp_free(&put);
    tu_redis_int(srv.redis_port, "SET miaosha:{sd5~0}:lock:token outsider PX 60000");
    tu_redis_int(srv.redis_port, "SET miaosha:{sd5~1}:lock:token outsider PX 60000");

    job a = {"/miaosha/token?sku=sd1&work_ms=800", {0}, 0};
    job b = {"/miaosha/reentrant?sku=sd2&work_ms=20000", {0}, 0};
    job w[3] = {{"/miaosha/token?sku=sd3&wait_ms=15000", {0}, 0},
                {"/miaosha/setnx?sku=sd3&wait_ms=15000", {0}, 0},
                {"/miaosha/token?sku=sd5&wait_ms=15000", {0}, 0}};
    /* token is not reentrant: holding the outer lock, it waits for itself */
    job n = {"/miaosha/token?sku=sd4&reenter=1&wait_ms=15000", {0}, 0};
    job *all[] = {&a, &b, &w[0], &w[1], &n, &w[2]};
    pthread_t th[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&th[i], NULL, one, all[i]);
    /* All hold their locks (sd3: the outsider) and the waiters wait. */
    int64_t t0 = lc_now_ms();
    while (lc_now_ms() - t0 < 3000 &&
           (tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd1}:lock:token") != 1 ||
            tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd2}:lock:reentrant") != 1 ||
            tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd4}:lock:token") != 1))
        tu_sleep_ms(5);
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd1}:lock:token") == 1, "sd1 held");
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd4}:lock:token") == 1,
             "sd4 outer held");
    tu_sleep_ms(300); /* the waiters are inside lc_acquire */
    t0 = lc_now_ms();
    kill(srv.pid, SIGTERM);
    /* Draining (b sleeps in its section until the 3 s cut): a new
     * connection gets no answer. */
    tu_sleep_ms(200);
    svc_resp late;
    memset(&late, 0, sizeof late);
    int late_rc = svc_req(&srv, "GET", "/healthz", NULL, NULL, &late);
    int still_running = kill(srv.pid, 0) == 0;
    TU_CHECK(late_rc != 0 && late.status == 0,
             "a new connection while draining: rc %d, status %ld %s", late_rc, late.status,
             B(&late));
    svc_resp_free(&late);
    int rc = svc_wait_exit(&srv, 8000);
    int64_t dt = lc_now_ms() - t0;
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        TU_CHECK(w[i].r.status == 503 && svc_jerr_is(&w[i].r, "shutting_down"),
                 "lock waiter %d: %ld %s", i, w[i].r.status, B(&w[i].r));
        TU_CHECK(w[i].done_ms - t0 < tu_slack(1000), "lock waiter %d answered after %lld ms", i,
                 (long long)(w[i].done_ms - t0));
        svc_resp_free(&w[i].r);
    }
    TU_CHECK(n.r.status == 503 && svc_jerr_is(&n.r, "shutting_down"), "nested waiter: %ld %s",
             n.r.status, B(&n.r));
    TU_CHECK(n.done_ms - t0 < tu_slack(1000), "nested waiter answered after %lld ms",
             (long long)(n.done_ms - t0));
    svc_resp_free(&n.r);
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd4}:lock:token") == 0,
             "the outer lock of the nested waiter was released");
    char holder[64];
    tu_redis_str(srv.redis_port, holder, sizeof holder, "GET miaosha:{sd3}:lock:token");
    TU_CHECK(strcmp(holder, "outsider") == 0, "the outsider's lock is untouched: %s", holder);
    tu_redis_str(srv.redis_port, holder, sizeof holder, "GET miaosha:{sd3}:lock:setnx");
    TU_CHECK(strcmp(holder, "outsider") == 0, "the outsider's setnx lock is untouched: %s", holder);
    tu_redis_str(srv.redis_port, holder, sizeof holder, "GET miaosha:{sd5~1}:lock:token");
    TU_CHECK(strcmp(holder, "outsider") == 0, "the outsider's bucket lock is untouched: %s",
             holder);
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd3}:sold") == 0 &&
                 tu_redis_int(srv.redis_port, "GET miaosha:{sd4}:sold") == 0 &&
                 tu_redis_int(srv.redis_port, "GET miaosha:{sd5~0}:sold") == 0 &&
                 tu_redis_int(srv.redis_port, "GET miaosha:{sd5~1}:sold") == 0,
             "the canceled purchases wrote nothing");
    tu_redis_int(srv.redis_port, "DEL miaosha:{sd3}:lock:token miaosha:{sd3}:lock:setnx");
    tu_redis_int(srv.redis_port, "DEL miaosha:{sd5~0}:lock:token miaosha:{sd5~1}:lock:token");
    TU_CHECK(still_running, "the server was still draining when the new connection came");
    TU_CHECK(rc == 0, "exit status %d", rc);
    TU_CHECK(dt < 5000, "exited in %lld ms", (long long)dt);
    TU_CHECK(a.r.status == 200, "in-flight purchase finished: %ld %s", a.r.status, B(&a.r));
    TU_CHECK(b.r.status == 503, "20 s purchase cut short: %ld %s", b.r.status, B(&b.r));
    TU_CHECK(svc_jerr_is(&b.r, "shutting_down"), "shutting_down");
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd1}:lock:token") == 0,
             "sd1 lock released");
    TU_CHECK(tu_redis_int(srv.redis_port, "EXISTS miaosha:{sd2}:lock:reentrant") == 0,
             "sd2 lock released");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd1}:sold") == 1, "sd1 sold 1");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd2}:sold") == 0, "sd2 wrote nothing");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{sd2}:stock") == 5, "sd2 stock intact");
    svc_resp_free(&a.r);
    svc_resp_free(&b.r);
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
