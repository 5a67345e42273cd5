/* test_service_failover.c — a Sentinel failover while buyers run.
 *
 * A master with two replicas and three Sentinels (pk_ha.h: down-after 500
 * ms), the service pointed at the Sentinels with redis.wait_replicas=1.
 * Four buyers (token and lua) buy in a loop; the master is SIGKILLed. The
 * service must follow the new master within down-after + failover-timeout
 * + 1 s (scaled by tu_slack), answer only 503 meanwhile (never a crash,
 * never a connection dropped without an answer), name the new master in
 * /healthz and /stats, count the switch in /metrics, and every 200's order
 * must be in the new master's order list (the WAIT made it reach a
 * replica before the 200). It prints the failover time (kill -> first 200
 * on the new master).
 *
 * redis.wait_replicas=1 with no replica: 503 not_replicated with the
 * order id, the order written on the master (token, fenced and lua); with
 * an Idempotency-Key its retry buys nothing more and gets 503
 * not_replicated again with the same order id (the stored 200 is held back
 * until a replica has the order), nothing bought twice.
 * Bad input: Sentinels that answer nothing -> the service starts, /healthz
 * 503 with the reason, a purchase 503 naming the Sentinels, no crash; an
 * empty redis.master_name -> exit 2 naming the key.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#include "pk_ha.h"
#include "pk_proc.h"
#include "pk_redis.h"
#include "svc_test.h"

#define DOWN_AFTER_MS 500
#define FAILOVER_TIMEOUT_MS 2000
#define BUYERS 4
#define MAX_ORDERS 20000

static svc_server srv;
static atomic_int stop_buyers;
static atomic_llong kill_ms;        /* lc_now_ms of the SIGKILL; 0 before */
static atomic_llong first_after_ms; /* first 200 answered after the kill */

typedef struct buyer {
    int id;
    long n200, n503, other;
    long last_other; /* a status that is neither */
    char bad_error[128];
    char (*orders)[40];
    int norders;
} buyer;

static void *buy(void *arg)
{
    buyer *b = arg;
    void *h = NULL;
    const char *path = b->id % 2 ? "/miaosha/lua?sku=fo" : "/miaosha/token?sku=fo&wait_ms=200";
    while (!atomic_load(&stop_buyers)) {
        svc_resp r;
        long long t = lc_now_ms();
        svc_req_keep(&h, &srv, "POST", path, &r);
        if (r.status == 200) {
            b->n200++;
            const char *oid = svc_jstr(r.json, "order_id");
            if (oid && b->norders < MAX_ORDERS)
                snprintf(b->orders[b->norders++], 40, "%s", oid);
            long long k = atomic_load(&kill_ms), zero = 0;
            if (k && t > k)
                atomic_compare_exchange_strong(&first_after_ms, &zero, lc_now_ms());
        } else if (r.status == 503) {
            b->n503++;
            const char *e = svc_jstr(r.json, "error");
            if (!e || (strcmp(e, "redis_unavailable") && strcmp(e, "not_replicated") &&
                       strcmp(e, "redis_error")))
                snprintf(b->bad_error, sizeof b->bad_error, "%.120s", B(&r));
        } else if (r.status != 409 && r.status != 429) {
            b->other++;
            b->last_other = r.status;
        }
        svc_resp_free(&r);
    }
    svc_handle_free(h);
    return NULL;
}

static int master_named(int port)
{
    char want[64];
    snprintf(want, sizeof want, "\"master\":\"127.0.0.1:%d\"", port);
    svc_resp r;
    svc_req(&srv, "GET", "/healthz", NULL, NULL, &r);
    int ok = r.status == 200 && strstr(B(&r), want) != NULL;
    svc_resp_free(&r);
    return ok;
}

static void test_failover(const char *dir)
{
    pk_ha h;
    pk_ha_opts o = {.server = getenv("MIAOSHA_REDIS_SERVER"),
                    .dir = dir,
                    .replicas = 2,
                    .down_after_ms = DOWN_AFTER_MS,
                    .failover_timeout_ms = FAILOVER_TIMEOUT_MS,
                    .flags = PK_SPAWN_DIE_WITH_PARENT};
    char err[256];
    TU_REQUIRE(pk_ha_start(&h, &o, err, sizeof err) == 0, "topology: %s", err);
    char sentinels[128];
    snprintf(sentinels, sizeof sentinels, "redis.sentinels=%s", h.sentinels);
    const char *extra[] = {"--set", sentinels,
                           "--set", "redis.master_name=" PK_HA_NAME,
                           "--set", "redis.wait_replicas=1",
                           "--set", "redis.wait_timeout_ms=250",
                           "--set", "redis.command_timeout_ms=300",
                           "--set", "redis.connect_timeout_ms=300",
                           "--set", "server.workers=8",
                           NULL};
    /* --redis names a port nobody listens on: with Sentinels it is unused */
    TU_REQUIRE(svc_start(&srv, pk_free_port(), extra) == 0, "server starts");
    TU_CHECK(master_named(h.master_port), "/healthz names the master %d", h.master_port);
    TU_CHECK(svc_set_stock(&srv, "fo", 1000000, NULL) == 200, "stock");

    buyer b[BUYERS];
    pthread_t t[BUYERS];
    memset(b, 0, sizeof b);
    for (int i = 0; i < BUYERS; i++) {
        b[i].id = i;
        b[i].orders = calloc(MAX_ORDERS, 40);
        TU_REQUIRE(b[i].orders != NULL, "memory");
        TU_REQUIRE(pthread_create(&t[i], NULL, buy, &b[i]) == 0, "buyer thread");
    }
    tu_sleep_ms(400);
    atomic_store(&kill_ms, lc_now_ms());
    pk_kill(h.master_pid);
    h.master_pid = 0;
    int64_t bound = tu_slack(DOWN_AFTER_MS + FAILOVER_TIMEOUT_MS + 1000);
    while (atomic_load(&first_after_ms) == 0 && lc_now_ms() - atomic_load(&kill_ms) < bound)
        tu_sleep_ms(10);
    long long took = atomic_load(&first_after_ms) ? atomic_load(&first_after_ms) - kill_ms : -1;
    tu_sleep_ms(300); /* sales on the new master */
    atomic_store(&stop_buyers, 1);
    for (int i = 0; i < BUYERS; i++)
        pthread_join(t[i], NULL);
    printf("failover: kill -> first 200 on the new master: %lld ms (bound %lld ms)\n", took,
           (long long)bound);
    TU_CHECK(took >= 0, "no 200 within %lld ms of the kill", (long long)bound);

    int newport = pk_ha_master_port(&h);
    TU_CHECK(newport > 0 && newport != h.master_port, "a new master: %d", newport);
    long n200 = 0, n503 = 0;
    for (int i = 0; i < BUYERS; i++) {
        n200 += b[i].n200;
        n503 += b[i].n503;
        TU_CHECK(b[i].other == 0, "buyer %d: %ld answers neither 200/409/429 nor 503 (last %ld)", i,
                 b[i].other, b[i].last_other);
        TU_CHECK(b[i].bad_error[0] == 0, "buyer %d: a 503 with an unexpected error: %s", i,
                 b[i].bad_error);
    }
    printf("failover: %ld sold, %ld 503 answers\n", n200, n503);
    TU_CHECK(n503 > 0, "no 503 while there was no master");
    TU_CHECK(pk_wait_exit(srv.pid, 0) == 0, "the server is alive");
    int64_t t0 = lc_now_ms();
    while (!master_named(newport) && lc_now_ms() - t0 < tu_slack(2000))
        tu_sleep_ms(20);
    TU_CHECK(master_named(newport), "/healthz names the new master %d", newport);

    svc_resp r;
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &r);
    const char *m = strstr(B(&r), "\nmiaosha_master_switches_total ");
    TU_CHECK(m && atoi(m + 31) >= 1, "master switch counted: %.80s", m ? m : "(absent)");
    svc_resp_free(&r);
    svc_req(&srv, "GET", "/stats", NULL, NULL, &r);
    char want[64];
    snprintf(want, sizeof want, "\"master\":\"127.0.0.1:%d\"", newport);
    TU_CHECK(strstr(B(&r), want) != NULL, "/stats names the new master: %.200s", B(&r));
    svc_resp_free(&r);

    /* Every acknowledged order is on the new master. */
    redisContext *c = pk_redis_connect(newport, 2000);
    TU_REQUIRE(c != NULL, "connect to the new master");
    redisReply *l = redisCommand(c, "LRANGE miaosha:{fo}:orders 0 -1");
    TU_REQUIRE(l && l->type == REDIS_REPLY_ARRAY, "order list");
    long missing = 0;
    for (int i = 0; i < BUYERS; i++) {
        for (int k = 0; k < b[i].norders; k++) {
            int found = 0;
            for (size_t e = 0; e < l->elements && !found; e++)
                found = strstr(l->element[e]->str, b[i].orders[k]) != NULL;
            missing += !found;
        }
        free(b[i].orders);
    }
    TU_CHECK(missing == 0, "%ld acknowledged orders missing after the failover (of %ld)", missing,
             n200);
    freeReplyObject(l);
    redisFree(c);
    TU_CHECK(svc_stop(&srv, 5000) == 0, "clean stop");
    pk_ha_stop(&h);
}

/* Sentinels that answer nothing: start, 503 with the reason, no crash. */
static void test_no_sentinel(void)
{
    char sentinels[96];
    snprintf(sentinels, sizeof sentinels, "redis.sentinels=127.0.0.1:%d,127.0.0.1:%d",
             pk_free_port(), pk_free_port());
    const char *extra[] = {"--set", sentinels, "--set", "redis.connect_timeout_ms=200", NULL};
    TU_REQUIRE(svc_start(&srv, pk_free_port(), extra) == 0, "server starts without a Sentinel");
    svc_resp r;
    svc_req(&srv, "GET", "/healthz", NULL, NULL, &r);
    TU_CHECK(r.status == 503 && strstr(B(&r), "\"reason\":\"sentinel: no master mymaster"),
             "/healthz: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "POST", "/miaosha/token?sku=fo", NULL, NULL, &r);
    TU_CHECK(r.status == 503 && svc_jerr_is(&r, "redis_unavailable") &&
                 svc_jdetail_has(&r, "sentinel"),
             "purchase: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&srv, "POST", "/miaosha/lua?sku=fo", NULL, NULL, &r);
    TU_CHECK(r.status == 503 && svc_jdetail_has(&r, "sentinel"), "lua: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_stop(&srv, 5000) == 0, "clean stop");
}

/* wait_replicas=1 on a Redis with no replica: the write is on the master,
 * WAIT sees 0 replicas, so 503 not_replicated with the order id (which is
 * in the order list), for a lock mode, fenced (WAIT after its script) and
 * lua. */
static void test_not_replicated(void)
{
    tu_redis rd;
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    const char *extra[] = {"--set", "redis.wait_replicas=1", "--set", "redis.wait_timeout_ms=50",
                           NULL};
    TU_REQUIRE(svc_start(&srv, rd.port, extra) == 0, "server starts");
    TU_CHECK(svc_set_stock(&srv, "nr", 10, NULL) == 200, "stock");
    const char *paths[] = {"/miaosha/token?sku=nr", "/miaosha/fenced?sku=nr",
                           "/miaosha/lua?sku=nr"};
    for (int i = 0; i < 3; i++) {
        svc_resp r;
        svc_req(&srv, "POST", paths[i], NULL, NULL, &r);
        const char *oid = svc_jstr(r.json, "order_id");
        TU_CHECK(r.status == 503 && svc_jerr_is(&r, "not_replicated") && oid &&
                     svc_jdetail_has(&r, "0 of 1 replicas"),
                 "%s: %ld %s", paths[i], r.status, B(&r));
        char found[64] = "";
        if (oid) {
            redisContext *c = pk_redis_connect(rd.port, 2000);
            redisReply *l = c ? redisCommand(c, "LRANGE miaosha:{nr}:orders 0 -1") : NULL;
            for (size_t e = 0; l && l->type == REDIS_REPLY_ARRAY && e < l->elements; e++)
                if (strstr(l->element[e]->str, oid))
                    snprintf(found, sizeof found, "%s", oid);
            if (l)
                freeReplyObject(l);
            if (c)
                redisFree(c);
        }
        TU_CHECK(found[0] != 0, "%s: the order is on the master", paths[i]);
        svc_resp_free(&r);
    }
    /* With an Idempotency-Key the sale stored its 200 in the same step as
     * the order. The retry of a 503 not_replicated buys nothing more, and
     * the stored 200 is not replayed while the replicas still lack the
     * order (there is none here): 503 not_replicated again, the same order
     * id. */
    const char *keyed[] = {"token", "fenced", "lua"};
    for (int i = 0; i < 3; i++) {
        char path[96], hdr[96];
        snprintf(path, sizeof path, "/miaosha/%s?sku=nr&user=k%d", keyed[i], i);
        snprintf(hdr, sizeof hdr, "Idempotency-Key: nr-%s", keyed[i]);
        svc_resp a, b;
        svc_req_hdr(&srv, "POST", path, hdr, &a);
        svc_req_hdr(&srv, "POST", path, hdr, &b);
        const char *oa = svc_jstr(a.json, "order_id"), *ob = svc_jstr(b.json, "order_id");
        TU_CHECK(a.status == 503 && svc_jerr_is(&a, "not_replicated") && oa, "%s keyed: %ld %s",
                 keyed[i], a.status, B(&a));
        TU_CHECK(b.status == 503 && svc_jerr_is(&b, "not_replicated") && oa && ob &&
                     strcmp(oa, ob) == 0,
                 "%s keyed retry: still not replicated, the same order (%ld %s)", keyed[i],
                 b.status, B(&b));
        /* the replay's 503 has the shape of every purchase's reply */
        TU_CHECK(svc_jstr(b.json, "mode") != NULL && !strcmp(svc_jstr(b.json, "mode"), keyed[i]) &&
                     svc_jstr(b.json, "sku") != NULL && !strcmp(svc_jstr(b.json, "sku"), "nr") &&
                     svc_jstr(b.json, "instance") != NULL &&
                     cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(b.json, "pipeline")),
                 "%s keyed retry: mode, pipeline, sku and instance (%s)", keyed[i], B(&b));
        svc_resp_free(&a);
        svc_resp_free(&b);
    }
    svc_audit au;
    svc_get_audit(&srv, "nr", &au);
    TU_CHECK(au.orders == 6 && au.stock == 4, "six sales in all, none twice (%lld orders)",
             au.orders);
    TU_CHECK(svc_stop(&srv, 5000) == 0, "clean stop");
    tu_redis_stop(&rd);
}

/* An empty master name with Sentinels: exit 2 naming the key. */
static void test_empty_master_name(const char *dir)
{
    char log[512];
    snprintf(log, sizeof log, "%s/bad.log", dir);
    const char *argv[] = {SVC_TEST_SERVER,      "--set", "redis.sentinels=127.0.0.1:26379", "--set",
                          "redis.master_name=", NULL};
    char err[256];
    pid_t pid = pk_spawn(argv, log, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    TU_REQUIRE(pid > 0, "spawn: %s", err);
    int st = 0;
    TU_CHECK(pk_wait_status(pid, (int)tu_slack(5000), &st) == 1 && WIFEXITED(st) &&
                 WEXITSTATUS(st) == 2,
             "exit 2 for an empty master_name (status %d)", st);
    FILE *f = fopen(log, "r");
    char buf[1024] = "";
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    TU_CHECK(strstr(buf, "redis.master_name") != NULL, "names the key: %s", buf);
}

int main(void)
{
    char dir[] = "/tmp/miaosha-failover-test-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "temp dir");
    test_empty_master_name(dir);
    test_not_replicated();
    test_no_sentinel();
    test_failover(dir);
    pk_rm_tree(dir);
    return tu_done();
}
