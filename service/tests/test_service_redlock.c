/* test_service_redlock.c — /miaosha/redlock against five private
 * redis-servers as the lock masters (the stock stays on the suite's
 * Redis): not offered without redlock.nodes (404 naming the key and
 * README.md's "redlock by hand", a section that exists); exit 2
 * naming redlock.nodes for an even count, a duplicate, one server under
 * two names and a node that is down at start; exact under the race (stock 10, 40 buyers, work_ms
 * 20) with all five masters and again with two of them killed, "pipeline" false in every reply;
 * with three killed, 503 and nothing sold, and no lock key left on a survivor; a holder past its
 * validity (lease 100 ms, work 300 ms) reports lock_lost and still writes, as token does. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pk_proc.h"
#include "svc_test.h"

#define NODES 5
#define BUYERS 40
#define STOCK 10

static tu_redis red[NODES];
static char node_list[NODES * 24];

static void expect_exit2(const char *nodes, const char *why)
{
    char set[512], out[8192];
    snprintf(set, sizeof set, "redlock.nodes=%s", nodes);
    const char *a[] = {"--port", "0", "--set", set, NULL};
    int rc = svc_run_exit(a, tu_slack(10000), out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "redlock.nodes") && strstr(out, why),
             "redlock.nodes=%s: exit %d, names the key and '%s': %s", nodes, rc, why, out);
}

static void test_bad_config(void)
{
    char nodes[256];
    snprintf(nodes, sizeof nodes, "127.0.0.1:%d,127.0.0.1:%d", red[0].port, red[1].port);
    expect_exit2(nodes, "odd");
    snprintf(nodes, sizeof nodes, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             red[0].port, red[1].port, red[2].port, red[3].port);
    expect_exit2(nodes, "odd");
    snprintf(nodes, sizeof nodes, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", red[0].port,
             red[1].port, red[0].port);
    expect_exit2(nodes, "twice");
    /* one server under two names (127.1 is 127.0.0.1): its one vote would
     * count twice */
    snprintf(nodes, sizeof nodes, "127.0.0.1:%d,127.0.0.1:%d,127.1:%d", red[0].port, red[1].port,
             red[0].port);
    expect_exit2(nodes, "one Redis server");
    /* A free port: nothing listens there. */
    int dead = pk_free_port();
    snprintf(nodes, sizeof nodes, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", red[0].port,
             red[1].port, dead);
    char port[16];
    snprintf(port, sizeof port, ":%d", dead);
    expect_exit2(nodes, port);
    expect_exit2(nodes, "not reachable");
}

/* Stock 10, BUYERS at once; returns the 200s and fills the audit. */
static int race(const svc_server *s, const char *sku, svc_audit *a, int *other)
{
    char *paths[BUYERS];
    svc_resp out[BUYERS];
    int ok = 0;
    *other = 0;
    TU_REQUIRE(svc_set_stock(s, sku, STOCK, NULL) == 200, "stock %s", sku);
    for (int i = 0; i < BUYERS; i++) {
        paths[i] = malloc(256);
        snprintf(paths[i], 256, "/miaosha/redlock?sku=%s&user=b%d&work_ms=20&wait_ms=20000", sku,
                 i);
    }
    svc_burst(s, "GET", paths, BUYERS, out);
    for (int i = 0; i < BUYERS; i++) {
        if (out[i].status == 200 || out[i].status == 409)
            TU_CHECK(svc_jbool(out[i].json, "pipeline") == 0, "redlock never pipelines: %s",
                     B(&out[i]));
        if (out[i].status == 200)
            ok++;
        else if (out[i].status != 409) {
            (*other)++;
            fprintf(stderr, "%s: unexpected %ld %s\n", sku, out[i].status, B(&out[i]));
        }
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    TU_CHECK(svc_get_audit(s, sku, a) == 200, "audit %s", sku);
    return ok;
}

static int lock_keys_left(const char *sku)
{
    int n = 0;
    char key[128];
    snprintf(key, sizeof key, "miaosha:{%s}:lock:redlock", sku);
    for (int i = 0; i < NODES; i++)
        if (red[i].pid > 0 && tu_redis_int(red[i].port, "EXISTS %s", key) == 1)
            n++;
    return n;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    size_t used = 0;
    for (int i = 0; i < NODES; i++) {
        TU_REQUIRE(tu_redis_start(&red[i], 0, NULL) == 0, "lock master %d", i);
        used += (size_t)snprintf(node_list + used, sizeof node_list - used, "%s127.0.0.1:%d",
                                 i ? "," : "", red[i].port);
    }
    test_bad_config();

    /* Not configured: not offered, and the 404 says why. */
    svc_server plain;
    const char *pa[] = {"--instance-id", "rl-plain", NULL};
    TU_REQUIRE(svc_start(&plain, tu_redis_port(), pa) == 0, "server without redlock.nodes");
    svc_resp r = {0};
    svc_req(&plain, "POST", "/miaosha/redlock?sku=rl_plain", NULL, NULL, &r);
    TU_CHECK(
        r.status == 404 && svc_jerr_is(&r, "not_found") && svc_jdetail_has(&r, "redlock.nodes") &&
            svc_jdetail_has(&r, "README.md, \"redlock by hand\""),
        "redlock without nodes: 404 naming redlock.nodes and the recipe: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    /* ... to a section that exists */
    char readme[600], line[300];
    const char *src = getenv("MIAOSHA_SOURCE_DIR");
    snprintf(readme, sizeof readme, "%s/README.md", src ? src : ".");
    FILE *rf = fopen(readme, "r");
    int section = 0;
    while (rf != NULL && fgets(line, sizeof line, rf) != NULL)
        section |= strcmp(line, "### redlock by hand\n") == 0;
    if (rf != NULL)
        fclose(rf);
    TU_CHECK(section, "%s has the section the 404 names, \"redlock by hand\"", readme);
    TU_CHECK(svc_stop(&plain, 6000) == 0, "plain server: SIGTERM exit 0");

    char set[600];
    snprintf(set, sizeof set, "redlock.nodes=%s", node_list);
    svc_server s;
    /* A per-node timeout far above a loaded machine's stalls, so that only
     * a dead node fails a round. */
    const char *ea[] = {
        "--instance-id", "rl", "--set", set, "--set", "redlock.node_timeout_ms=500", NULL};
    TU_REQUIRE(svc_start(&s, tu_redis_port(), ea) == 0, "server with 5 lock masters");

    svc_audit a;
    int other, ok = race(&s, "rl_race5", &a, &other);
    TU_CHECK(ok == STOCK && other == 0 && a.sold == STOCK && a.stock == 0 && a.oversold == 0 &&
                 a.undersold == 0,
             "5 masters: exact (%d sold, %d other, audit sold %lld oversold %lld)", ok, other,
             a.sold, a.oversold);
    TU_CHECK(lock_keys_left("rl_race5") == 0, "no lock key left after the race");

    tu_redis_kill(&red[3], 1);
    tu_redis_kill(&red[4], 1);
    ok = race(&s, "rl_race3", &a, &other);
    TU_CHECK(ok == STOCK && other == 0 && a.sold == STOCK && a.oversold == 0,
             "2 of 5 masters down: still exact (%d sold, %d other)", ok, other);
    /* the probe thread logs the masters that stopped answering, once */
    char down_line[300];
    snprintf(down_line, sizeof down_line,
             "redlock: 2 of 5 lock masters not answering (127.0.0.1:%d, 127.0.0.1:%d): a "
             "majority still grants the lock",
             red[3].port, red[4].port);
    int64_t until = lc_now_ms() + tu_slack(3000);
    while (!svc_log_has(&s, down_line) && lc_now_ms() < until) {
        svc_req(&s, "POST", "/miaosha/redlock?sku=rl_race3&user=more", NULL, NULL, &r);
        svc_resp_free(&r);
        pk_sleep_ms(50);
    }
    TU_CHECK(svc_log_has(&s, down_line), "logged: %s", down_line);

    tu_redis_kill(&red[2], 1);
    TU_REQUIRE(svc_set_stock(&s, "rl_down", STOCK, NULL) == 200, "stock rl_down");
    int n503 = 0;
    for (int i = 0; i < 5; i++) {
        char path[128];
        snprintf(path, sizeof path, "/miaosha/redlock?sku=rl_down&user=d%d&wait_ms=200", i);
        svc_req(&s, "POST", path, NULL, NULL, &r);
        n503 += r.status == 503 && svc_jerr_is(&r, "redis_unavailable") &&
                svc_jdetail_has(&r, "redlock");
        if (r.status != 503)
            fprintf(stderr, "3 down: %ld %s\n", r.status, B(&r));
        svc_resp_free(&r);
    }
    TU_CHECK(svc_get_audit(&s, "rl_down", &a) == 200 && a.sold == 0 && a.stock == STOCK,
             "3 of 5 down: nothing sold (sold %lld)", a.sold);
    TU_CHECK(n503 == 5, "3 of 5 down: every buyer 503 redis_unavailable naming redlock (%d)", n503);
    TU_CHECK(lock_keys_left("rl_down") == 0, "no lock key left on a survivor");
    for (int i = 2; i < NODES; i++)
        TU_REQUIRE(tu_redis_start(&red[i], 1, NULL) == 0, "restart master %d", i);

    /* A lease shorter than the clock-drift allowance: refused up front,
     * 400 naming lease_ms (not a 503 lock_error); 3 ms is taken. */
    TU_REQUIRE(svc_set_stock(&s, "rl_short", STOCK, NULL) == 200, "stock rl_short");
    svc_req(&s, "POST", "/miaosha/redlock?sku=rl_short&lease_ms=2", NULL, NULL, &r);
    TU_CHECK(r.status == 400 && svc_jerr_is(&r, "bad_request") &&
                 svc_jdetail_has(&r, "lease_ms: must be at least 3 for mode redlock"),
             "lease_ms=2: 400 naming lease_ms: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&s, "POST", "/miaosha/redlock?sku=rl_short&lease_ms=3", NULL, NULL, &r);
    TU_CHECK(r.status != 400 && !svc_jerr_is(&r, "lock_error"), "lease_ms=3 taken: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&s, "POST", "/miaosha/token?sku=rl_short&lease_ms=1", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "token takes lease_ms=1: %ld %s", r.status, B(&r));
    svc_resp_free(&r);

    /* Past its validity: lease 100 ms, work 300 ms. */
    TU_REQUIRE(svc_set_stock(&s, "rl_slow", STOCK, NULL) == 200, "stock rl_slow");
    svc_req(&s, "POST", "/miaosha/redlock?sku=rl_slow&user=slow&lease_ms=100&work_ms=300", NULL,
            NULL, &r);
    TU_CHECK(r.status == 200 && svc_jbool(r.json, "lock_lost") == 1,
             "a holder past its validity reports lock_lost and still writes: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    /* the restarted masters answer purchases: logged as back (a purchase
     * may return on its majority before the others' replies are read) */
    until = lc_now_ms() + tu_slack(3000);
    while (!svc_log_has(&s, "redlock: every lock master answers again") && lc_now_ms() < until) {
        svc_req(&s, "POST", "/miaosha/redlock?sku=rl_slow&user=back", NULL, NULL, &r);
        svc_resp_free(&r);
        pk_sleep_ms(50);
    }
    TU_CHECK(svc_log_has(&s, "redlock: every lock master answers again"),
             "logged: every lock master answers again");

    TU_CHECK(svc_stop(&s, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&s);
    for (int i = 0; i < NODES; i++)
        tu_redis_stop(&red[i]);
    return tu_done();
}
