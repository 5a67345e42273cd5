/* test_service_redis_paused.c — a purchase whose lock acquire timed out
 * while Redis was paused (SIGSTOP) must not leave a lock behind. The
 * acquire is still executed when Redis resumes; before lockcore's orphan
 * cleanup the lock it took belonged to nobody and every buyer got
 * lock_busy until its lease ran out (30 s). Now the SKU sells again within
 * 1 s of SIGCONT, for token and reentrant, and /stats and /metrics count
 * the lock the cleanup gave back. Uses a private redis-server. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "svc_test.h"

#define PAUSE_MS 1200

static long get(svc_server *s, const char *path, svc_resp *r)
{
    svc_req(s, "GET", path, NULL, NULL, r);
    return r->status;
}

static double orphans_released(svc_server *s)
{
    svc_resp r;
    double v = -1;
    if (get(s, "/stats", &r) == 200 && r.json) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(r.json, "orphan_locks");
        v = o ? svc_jnum(o, "released") : -1;
    }
    svc_resp_free(&r);
    return v;
}

static void paused_once(svc_server *s, tu_redis *rd, const char *mode)
{
    char path[160];
    svc_resp r;
    /* token: a 30 s lease; reentrant: the default, its watchdog's 30 s */
    snprintf(path, sizeof path, "/miaosha/%s?sku=paused&wait_ms=0%s", mode,
             strcmp(mode, "token") == 0 ? "&lease_ms=30000" : "");
    TU_CHECK(get(s, path, &r) == 200, "%s: sells before the pause: %s", mode, B(&r));
    svc_resp_free(&r);
    double released = orphans_released(s);

    int64_t stopped = lc_now_ms();
    kill(rd->pid, SIGSTOP);
    long st = get(s, path, &r);
    TU_CHECK(st == 503, "%s: 503 while paused: %ld %s", mode, st, B(&r));
    svc_resp_free(&r);
    while (lc_now_ms() - stopped < PAUSE_MS)
        tu_sleep_ms(10);
    kill(rd->pid, SIGCONT);
    int64_t resumed = lc_now_ms();

    /* Buy until a sale, for up to 1 s: a lock left by the stalled acquire
     * would answer 429 lock_busy for the rest of its 30 s lease. */
    long last = 0;
    char body[256] = "";
    while (lc_now_ms() - resumed < tu_slack(1000)) {
        last = get(s, path, &r);
        snprintf(body, sizeof body, "%s", B(&r));
        svc_resp_free(&r);
        if (last == 200)
            break;
        tu_sleep_ms(50);
    }
    TU_CHECK(last == 200, "%s: sells again within 1 s of SIGCONT (%lld ms): %ld %s", mode,
             (long long)(lc_now_ms() - resumed), last, body);
    TU_CHECK(orphans_released(s) >= released + 1, "%s: /stats orphan_locks.released counted", mode);
}

int main(void)
{
    tu_redis rd;
    svc_server s;
    svc_resp r = {0};
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    const char *extra[] = {"--set",
                           "redis.command_timeout_ms=200",
                           "--set",
                           "redis.connect_timeout_ms=200",
                           "--set",
                           "server.workers=1",
                           "--instance-id",
                           "paused",
                           NULL};
    TU_REQUIRE(svc_start(&s, rd.port, extra) == 0, "server starts");
    TU_CHECK(svc_set_stock(&s, "paused", 100, NULL) == 200, "stock");
    paused_once(&s, &rd, "token");
    paused_once(&s, &rd, "reentrant");

    TU_CHECK(get(&s, "/metrics", &r) == 200 &&
                 strstr(B(&r), "miaosha_orphan_locks_released_total 2") &&
                 strstr(B(&r), "miaosha_orphan_locks_unresolved_total 0"),
             "/metrics counts both orphans");
    svc_resp_free(&r);
    svc_audit a;
    TU_CHECK(svc_get_audit(&s, "paused", &a) == 200 && a.oversold == 0 && a.undersold == 0,
             "clean audit");
    TU_CHECK(svc_stop(&s, 6000) == 0, "SIGTERM exit 0");
    tu_redis_stop(&rd);
    if (tu_failed)
        svc_dump_log(&s);
    return tu_done();
}
