/* test_service_redis_down.c — Redis stopped: purchases and the audit answer
 * 503 redis_unavailable within the configured timeout (never a hang),
 * /healthz turns 503; Redis back: the same service process recovers by
 * itself. At start, /healthz is 200 only once the default SKU is seeded,
 * with Redis down at first or refusing the seed (out of memory). Uses a private redis-server so the
 * shared one is never disturbed. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

static long get(svc_server *s, const char *path, svc_resp *r)
{
    svc_req(s, "GET", path, NULL, NULL, r);
    return r->status;
}

/* Polls /healthz every 20 ms until it answers `want` or within_ms passed;
 * returns the last status. */
static long wait_healthz(svc_server *s, long want, int64_t within_ms)
{
    svc_resp r;
    long hs = 0;
    int64_t t0 = lc_now_ms();
    while (lc_now_ms() - t0 < within_ms) {
        hs = get(s, "/healthz", &r);
        svc_resp_free(&r);
        if (hs == want)
            break;
        tu_sleep_ms(20);
    }
    return hs;
}

int main(void)
{
    tu_redis rd;
    svc_server s;
    svc_resp r = {0};
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    const char *extra[] = {"--set", "redis.command_timeout_ms=300", "--set",
                           "redis.connect_timeout_ms=300", "--instance-id", "down",
                           /* the sold-out SKU's purchases must reach Redis,
                              not the local sold-out flag */
                           "--set", "purchase.local_sold_out=false", NULL};
    TU_REQUIRE(svc_start(&s, rd.port, extra) == 0, "server starts");
    TU_CHECK(svc_set_stock(&s, "down", 10, NULL) == 200, "stock");
    TU_CHECK(get(&s, "/miaosha/token?sku=down", &r) == 200, "buy while up %ld", r.status);
    svc_resp_free(&r);

    /* Stop Redis. */
    tu_redis_kill(&rd, 1);
    const char *modes[] = {"none", "mutex", "setnx", "token", "reentrant"};
    for (int m = 0; m < 5; m++) {
        char path[128];
        snprintf(path, sizeof path, "/miaosha/%s?sku=down&wait_ms=100", modes[m]);
        int64_t t0 = lc_now_ms();
        long st = get(&s, path, &r);
        int64_t dt = lc_now_ms() - t0;
        TU_CHECK(st == 503, "%s while down: %ld %s", modes[m], st, B(&r));
        TU_CHECK(svc_jstr(r.json, "error") &&
                     !strcmp(svc_jstr(r.json, "error"), "redis_unavailable"),
                 "%s: redis_unavailable: %s", modes[m], B(&r));
        TU_CHECK(dt < tu_slack(1500), "%s: answered in %lld ms", modes[m], (long long)dt);
        svc_resp_free(&r);
    }
    TU_CHECK(get(&s, "/stock/down", &r) == 503, "audit while down %ld", r.status);
    svc_resp_free(&r);
    TU_CHECK(get(&s, "/orders/down", &r) == 503, "orders while down %ld", r.status);
    svc_resp_free(&r);
    int64_t t0 = lc_now_ms();
    long hs = wait_healthz(&s, 503, 3000);
    TU_CHECK(hs == 503, "healthz 503 while down");
    TU_CHECK(lc_now_ms() - t0 < tu_slack(1500), "healthz turned 503 in %lld ms",
             (long long)(lc_now_ms() - t0));
    TU_CHECK(get(&s, "/stats", &r) == 200, "stats still answer");
    svc_resp_free(&r);
    TU_CHECK(get(&s, "/metrics", &r) == 200 && strstr(B(&r), "miaosha_redis_up 0"),
             "metrics show redis down");
    svc_resp_free(&r);

    /* Redis back on the same port (empty: no persistence here). */
    TU_REQUIRE(tu_redis_start(&rd, 1, NULL) == 0, "redis restarts");
    t0 = lc_now_ms();
    hs = wait_healthz(&s, 200, 5000);
    TU_CHECK(hs == 200, "healthz 200 again");
    TU_CHECK(lc_now_ms() - t0 < tu_slack(1500), "recovered in %lld ms",
             (long long)(lc_now_ms() - t0));
    TU_CHECK(svc_set_stock(&s, "down", 3, NULL) == 200, "stock after recovery");
    for (int m = 0; m < 5; m++) {
        char path[128];
        snprintf(path, sizeof path, "/miaosha/%s?sku=down", modes[m]);
        long st = get(&s, path, &r);
        TU_CHECK(st == (m < 3 ? 200 : 409), "%s after recovery: %ld %s", modes[m], st, B(&r));
        svc_resp_free(&r);
    }
    svc_audit a;
    TU_CHECK(svc_get_audit(&s, "down", &a) == 200 && a.sold == 3 && a.oversold == 0 &&
                 a.undersold == 0,
             "clean audit after recovery");

    /* Redis paused (SIGSTOP) 2 s: requests fail fast with 503 after the
     * command timeout instead of hanging; /healthz turns 503; then back. */
    kill(rd.pid, SIGSTOP);
    t0 = lc_now_ms();
    long st = get(&s, "/miaosha/token?sku=down", &r);
    int64_t dt = lc_now_ms() - t0;
    TU_CHECK(st == 503, "token while paused: %ld %s", st, B(&r));
    TU_CHECK(dt < tu_slack(1500), "failed fast: %lld ms", (long long)dt);
    svc_resp_free(&r);
    hs = wait_healthz(&s, 503, 3000 - (lc_now_ms() - t0));
    TU_CHECK(hs == 503, "healthz 503 while paused");
    TU_CHECK(lc_now_ms() - t0 < tu_slack(2000), "within %lld ms", (long long)(lc_now_ms() - t0));
    while (lc_now_ms() - t0 < 2000)
        tu_sleep_ms(20);
    kill(rd.pid, SIGCONT);
    hs = wait_healthz(&s, 200, 5000);
    TU_CHECK(hs == 200, "healthz 200 after the pause");
    TU_CHECK(svc_set_stock(&s, "down", 1, NULL) == 200, "stock after the pause");
    TU_CHECK(get(&s, "/miaosha/reentrant?sku=down", &r) == 200, "buy after the pause: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(kill(s.pid, 0) == 0, "same process throughout");
    TU_CHECK(svc_stop(&s, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&s);

    /* Redis down at start: the default SKU is seeded as soon as Redis
     * answers, before /healthz says 200 (it used to stay unstocked: a
     * README that starts Redis and the server together met a 404). */
    tu_redis_kill(&rd, 1);
    svc_server late;
    const char *at_start[] = {"--set", "redis.command_timeout_ms=300",
                              "--set", "redis.connect_timeout_ms=300",
                              "--set", "purchase.sku=late",
                              "--set", "purchase.initial_stock=7",
                              NULL};
    TU_REQUIRE(svc_start(&late, rd.port, at_start) == 0, "server starts with Redis down");
    TU_CHECK(wait_healthz(&late, 503, 3000) == 503, "healthz 503 while Redis is down");
    TU_REQUIRE(tu_redis_start(&rd, 1, NULL) == 0, "redis starts");
    TU_CHECK(wait_healthz(&late, 200, 5000) == 200, "healthz 200 once Redis answers");
    TU_CHECK(svc_get_audit(&late, "late", &a) == 200 && a.initial == 7 && a.stock == 7,
             "the default SKU was seeded before healthz turned 200 (initial %lld)",
             (long long)a.initial);
    TU_CHECK(svc_log_has(&late, "sku late: seeded"), "the seed is logged");
    TU_CHECK(svc_stop(&late, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&late);

    /* Redis answers PING but refuses the seed (out of memory: maxmemory 1
     * byte, no eviction): /healthz stays 503 — it used to turn 200 with
     * the default SKU missing — until Redis takes the seed. The first probe
     * and the seed run before the server listens, so the first answer is
     * already the verdict. */
    char ok[16] = "";
    TU_REQUIRE(tu_redis_str(rd.port, ok, sizeof ok, "CONFIG SET maxmemory 1") == 0 &&
                   strcmp(ok, "OK") == 0,
               "maxmemory 1");
    svc_server full;
    const char *refused[] = {"--set", "purchase.sku=full", "--set", "purchase.initial_stock=5",
                             NULL};
    TU_REQUIRE(svc_start(&full, rd.port, refused) == 0, "server starts with Redis refusing writes");
    long hst = get(&full, "/healthz", &r);
    TU_CHECK(hst == 503, "healthz 503 while the seed is refused: %ld %s", hst, B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_log_has(&full, "sku full: not seeded yet (OOM"), "the refusal is logged");
    TU_REQUIRE(tu_redis_str(rd.port, ok, sizeof ok, "CONFIG SET maxmemory 0") == 0 &&
                   strcmp(ok, "OK") == 0,
               "maxmemory back to 0");
    TU_CHECK(wait_healthz(&full, 200, 5000) == 200, "healthz 200 once Redis takes the seed");
    TU_CHECK(svc_get_audit(&full, "full", &a) == 200 && a.initial == 5 && a.stock == 5,
             "the default SKU was seeded before healthz turned 200 (initial %lld)",
             (long long)a.initial);
    TU_CHECK(svc_stop(&full, 6000) == 0, "SIGTERM exit 0");
    tu_redis_stop(&rd);
    if (tu_failed)
        svc_dump_log(&full);
    return tu_done();
}
