/* test_service_redis_errors.c — Redis answers with an error (it is up, the
 * data is wrong): 503 redis_error, never redis_unavailable, and the reply
 * says what was written; the audit and the order list likewise (a key of
 * the wrong type, a layout record PUT /stock did not write). A command refused while queuing (OOM)
 * aborts the whole transaction: nothing written. A command failing inside EXEC (WRONGTYPE on :sold)
 * fails alone: a partial write, named, logged at ERROR. The worker's connection killed during
 * work_ms: nothing was sent, so a plain 503 without an order id. A private redis-server, since
 * maxmemory is changed and connections are killed. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

static svc_server srv;

static long buy(const char *path, svc_resp *r)
{
    svc_req(&srv, "GET", path, NULL, NULL, r);
    return r->status;
}

static void *slow_buy(void *r)
{
    buy("/miaosha/token?sku=we4&work_ms=800", r);
    return NULL;
}

int main(void)
{
    tu_redis rd;
    svc_resp r = {0};
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    const char *extra[] = {"--instance-id", "rerr", NULL};
    TU_REQUIRE(svc_start(&srv, rd.port, extra) == 0, "server starts");
    int rp = rd.port;

    /* The stock key is a list: GET answers WRONGTYPE. */
    tu_redis_int(rp, "RPUSH miaosha:{we1}:stock x");
    TU_CHECK(buy("/miaosha/token?sku=we1", &r) == 503 && svc_jerr_is(&r, "redis_error") &&
                 svc_jdetail_has(&r, "WRONGTYPE"),
             "GET stock WRONGTYPE: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{we1}:lock:token") == 0, "we1 lock released");

    /* :sold is a list: INCR fails inside EXEC, SET and RPUSH apply. */
    TU_CHECK(svc_set_stock(&srv, "we2", 5, NULL) == 200, "stock we2");
    tu_redis_int(rp, "DEL miaosha:{we2}:sold");
    tu_redis_int(rp, "RPUSH miaosha:{we2}:sold x");
    TU_CHECK(buy("/miaosha/token?sku=we2&user=u1", &r) == 503 && svc_jerr_is(&r, "redis_error"),
             "partial write: %ld %s", r.status, B(&r));
    TU_CHECK(svc_jdetail_has(&r, "failed INCR sold") &&
                 svc_jdetail_has(&r, "applied SET stock, RPUSH orders"),
             "names what failed and what applied: %s", B(&r));
    const char *oid = svc_jstr(r.json, "order_id");
    TU_CHECK(oid != NULL && strlen(oid) == 36, "the order id comes back: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{we2}:stock") == 4, "SET stock applied");
    TU_CHECK(tu_redis_int(rp, "LLEN miaosha:{we2}:orders") == 1, "RPUSH orders applied");
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{we2}:lock:token") == 0, "we2 lock released");
    TU_CHECK(svc_log_has(&srv, "ERROR") && svc_log_has(&srv, "partial write"), "logged at ERROR");

    /* maxmemory reached: SET is refused while queuing, EXEC aborts. */
    TU_CHECK(svc_set_stock(&srv, "we3", 5, NULL) == 200, "stock we3");
    tu_redis_int(rp, "CONFIG SET maxmemory-policy noeviction");
    tu_redis_int(rp, "CONFIG SET maxmemory 1");
    TU_CHECK(buy("/miaosha/none?sku=we3", &r) == 503 && svc_jerr_is(&r, "redis_error") &&
                 svc_jdetail_has(&r, "nothing written"),
             "EXECABORT: %ld %s", r.status, B(&r));
    TU_CHECK(svc_jstr(r.json, "order_id") == NULL, "no order id for nothing written");
    svc_resp_free(&r);
    tu_redis_int(rp, "CONFIG SET maxmemory 0");
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{we3}:stock") == 5 &&
                 tu_redis_int(rp, "GET miaosha:{we3}:sold") == 0 &&
                 tu_redis_int(rp, "LLEN miaosha:{we3}:orders") == 0,
             "we3: nothing written");

    /* Counted as Redis errors; the service is fine afterwards. */
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &r);
    TU_CHECK(strstr(B(&r), "miaosha_redis_errors_total 3") != NULL, "3 Redis errors counted");
    svc_resp_free(&r);
    TU_CHECK(buy("/miaosha/token?sku=we3", &r) == 200, "buy after: %ld %s", r.status, B(&r));
    svc_resp_free(&r);

    /* The audit and the order list: a key of the wrong type or a layout
     * record PUT /stock did not write is the data's fault, as for a
     * purchase: 503 redis_error naming it, not redis_unavailable. */
    TU_CHECK(svc_req(&srv, "GET", "/stock/we1", NULL, NULL, &r) == 0 && r.status == 503 &&
                 svc_jerr_is(&r, "redis_error") && svc_jdetail_has(&r, "WRONGTYPE"),
             "audit, stock key a list: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_set_stock(&srv, "we5", 5, NULL) == 200, "stock we5");
    tu_redis_int(rp, "DEL miaosha:{we5}:orders");
    TU_CHECK(tu_redis_int(rp, "HSET miaosha:{we5}:orders f v") == 1, "orders a hash");
    TU_CHECK(svc_req(&srv, "GET", "/orders/we5", NULL, NULL, &r) == 0 && r.status == 503 &&
                 svc_jerr_is(&r, "redis_error") && svc_jdetail_has(&r, "WRONGTYPE"),
             "orders, order list a hash: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    char okbuf[8];
    TU_CHECK(tu_redis_str(rp, okbuf, sizeof okbuf, "SET miaosha:{we6}:layout garbage") == 0,
             "a layout record by hand");
    TU_CHECK(svc_req(&srv, "GET", "/stock/we6", NULL, NULL, &r) == 0 && r.status == 503 &&
                 svc_jerr_is(&r, "redis_error") && svc_jdetail_has(&r, "layout record"),
             "audit, a layout record not PUT's: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_req(&srv, "GET", "/orders/we6", NULL, NULL, &r) == 0 && r.status == 503 &&
                 svc_jerr_is(&r, "redis_error") && svc_jdetail_has(&r, "layout record"),
             "orders, a layout record not PUT's: %ld %s", r.status, B(&r));
    svc_resp_free(&r);

    /* The worker's connection is killed from outside during work_ms: the
     * commit was never sent, so it is a plain 503 with no order named (it
     * used to be "commit outcome unknown" with an order id). */
    TU_CHECK(svc_set_stock(&srv, "we4", 5, NULL) == 200, "stock we4");
    pthread_t th;
    TU_REQUIRE(pthread_create(&th, NULL, slow_buy, &r) == 0, "thread");
    tu_sleep_ms(300);
    TU_CHECK(tu_redis_int(rp, "CLIENT KILL TYPE normal") >= 1, "connections killed");
    pthread_join(th, NULL);
    TU_CHECK(r.status == 503 && svc_jerr_is(&r, "redis_unavailable") &&
                 svc_jdetail_has(&r, "nothing was written") &&
                 !svc_jdetail_has(&r, "outcome unknown"),
             "killed during work_ms: %ld %s", r.status, B(&r));
    TU_CHECK(svc_jstr(r.json, "order_id") == NULL, "no order id: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{we4}:stock") == 5 &&
                 tu_redis_int(rp, "GET miaosha:{we4}:sold") == 0 &&
                 tu_redis_int(rp, "LLEN miaosha:{we4}:orders") == 0,
             "we4: nothing written");
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{we4}:lock:token") == 0,
             "we4 lock released on a new connection");
    TU_CHECK(buy("/miaosha/token?sku=we4", &r) == 200, "buy after the kill: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    tu_redis_stop(&rd);
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
