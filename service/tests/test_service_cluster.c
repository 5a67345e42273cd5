/* test_service_cluster.c — the service on a real Redis Cluster of its own
 * (pk_cluster: 3 masters, 3 replicas, cluster-node-timeout 1000 ms).
 *
 * At start: redis.cluster_nodes with redis.sentinels, or with
 * wait_replicas=all, exits 2 naming both keys; a seed that is a plain
 * Redis exits 2 naming it; no seed that answers: the service starts,
 * /healthz 503 with the reason. Then two instances whose first seed is
 * down, redis.wait_replicas=1 (WAIT on the master that wrote, per master):
 *   - a burst per mode on a SKU of each master, audited: every mode whose
 *     lock keeps buyers out (setnx, token, reentrant, fenced, redlock on
 *     three lock masters of its own, independent of the cluster) and lua
 *     sell exactly the stock, nothing oversold;
 *   - a SKU in 4 stock buckets (each a slot of its own), then reset to 2:
 *     a token and a lua burst each exact, the audit and the order list
 *     summing the buckets; a lua sale made by a probe on another master
 *     answers 200 (its WAIT on that master); the audit and the order list
 *     of a SKU in 64 buckets reach each master in one write per round;
 *   - a none and a mutex purchase whose stock key migrates to another
 *     master between its read and its commit: the commit, refused by the
 *     old master, goes again from the read once the slot has moved, and
 *     sells;
 *   - WAIT through a resharding: lua and token sales redirected by ASK and
 *     by MOVED are replicated (200), and a token sale whose release went
 *     to the new master while its order stayed on the old one, whose
 *     replica is stopped, is not (503) — the WAIT goes where the order was
 *     written;
 *   - without WAIT, one lua batch of 16 purchases over all three masters
 *     (4 SKUs, one in 3 buckets) queued behind the one worker of a third
 *     instance: one write per master, every SKU exact;
 *   - the same batch while one master is stopped (SIGSTOP): its purchases
 *     503 "outcome unknown" after redis.command_timeout_ms, the others
 *     sell; woken, it runs each script of its share once, audits exact;
 *   - an Idempotency-Key (its claim in a slot of its own) replays the sale;
 *   - the local sold-out flag of one instance clears on a reset sent to
 *     the other (the message reaches every node);
 *   - /stats shows the map (3 masters, 16384 slots, replicas), /metrics the
 *     redirect, retry and refresh counters, /healthz 200 naming the
 *     masters;
 *   - a slot left without a master (CLUSTER DELSLOTS): /healthz 503 naming
 *     it within 2 s (the probe takes the map at every probe, not every
 *     redis.cluster_refresh_ms), 200 once the slot is given back;
 *   - a master SIGKILLed: /healthz turns 503 naming it, the replica is
 *     promoted, /healthz 200 again and its SKU sells again; an idle
 *     instance's /healthz names the promoted master, not the dead one.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "pk_cluster.h"
#include "pk_proc.h"
#include "pk_redis.h"
#include "svc_test.h"

#define STOCK 12
#define BUYERS 24

static pk_cluster C;
static svc_server a, b;
static char seeds[128], lock_nodes[128];
static tu_redis locks[3];

static int slot_of(const char *sku)
{
    return lc_key_slot(sku, strlen(sku)); /* the keys' tag is {sku} */
}

/* A SKU whose slot master i serves now. */
static void sku_on(int port, const char *prefix, char *sku, size_t len)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(sku, len, "%s%d", prefix, i);
        if (pk_cluster_slot_port(&C, slot_of(sku)) == port)
            return;
    }
    TU_REQUIRE(0, "no sku on %d", port);
}

static void exit2(const char *what, const char *const *args, const char *a1, const char *a2)
{
    char out[4096];
    int st = svc_run_exit(args, tu_slack(15000), out, sizeof out);
    TU_CHECK(st == 2 && strstr(out, a1) && (!a2 || strstr(out, a2)), "%s: exit 2 naming %s: %d %s",
             what, a1, st, out);
}

static void test_start(void)
{
    char set[160];
    snprintf(set, sizeof set, "redis.cluster_nodes=%s", seeds);
    const char *with_sentinels[] = {"--set", set, "--set", "redis.sentinels=127.0.0.1:26379", NULL};
    exit2("with sentinels", with_sentinels, "redis.cluster_nodes", "redis.sentinels");
    const char *with_all[] = {"--set", set, "--set", "redis.wait_replicas=all", NULL};
    exit2("with wait_replicas=all", with_all, "redis.cluster_nodes", "redis.wait_replicas");
    /* a plain Redis among the seeds */
    char plain[96];
    snprintf(plain, sizeof plain, "redis.cluster_nodes=127.0.0.1:%d,127.0.0.1:%d", locks[0].port,
             C.port[0]);
    const char *with_plain[] = {"--set", plain, NULL};
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", locks[0].port);
    exit2("a plain Redis as a seed", with_plain, addr, "not in cluster mode");
    /* no seed answers: starts, 503 with the reason */
    char none[96];
    snprintf(none, sizeof none, "redis.cluster_nodes=127.0.0.1:%d", pk_free_port());
    const char *e[] = {"--set", none, "--set", "redis.connect_timeout_ms=200", NULL};
    svc_server s;
    TU_REQUIRE(svc_start(&s, 1, e) == 0, "starts without a seed");
    svc_resp r;
    svc_req(&s, "GET", "/healthz", NULL, NULL, &r);
    TU_CHECK(r.status == 503 && svc_jstr(r.json, "reason") &&
                 strstr(svc_jstr(r.json, "reason"), "cluster"),
             "/healthz 503 with the reason: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&s, "POST", "/miaosha/token?sku=nope", NULL, NULL, &r);
    TU_CHECK(r.status == 503 && svc_jerr_is(&r, "redis_unavailable"), "a purchase 503: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_log_has(&s, "cluster from seeds") && svc_log_has(&s, "not used"),
             "the start-up log names the seeds and says redis.host/port are not used");
    svc_stop(&s, 10000);
}

/* /healthz 200 and not one purchase yet: /stats already shows the map, and
 * while the instance stays idle the map keeps being refreshed every
 * redis.cluster_refresh_ms (here 200 ms: an age past 1 s would be a map
 * taken once and left). */
static void test_map_idle(void)
{
    char set[160];
    snprintf(set, sizeof set, "redis.cluster_nodes=%s", seeds);
    const char *e[] = {"--set", set, "--set", "redis.cluster_refresh_ms=200", NULL};
    svc_server s;
    TU_REQUIRE(svc_start(&s, 1, e) == 0, "an idle instance");
    svc_resp r;
    svc_req(&s, "GET", "/healthz", NULL, NULL, &r);
    long hs = r.status;
    svc_resp_free(&r);
    svc_req(&s, "GET", "/stats", NULL, NULL, &r);
    cJSON *cl = r.json ? cJSON_GetObjectItem(r.json, "cluster") : NULL;
    TU_CHECK(hs == 200 && cl && svc_jnum(cl, "slots_covered") == 16384,
             "/healthz %ld, /stats has the whole map before any purchase: %.300s", hs, B(&r));
    svc_resp_free(&r);
    tu_sleep_ms(1500);
    svc_req(&s, "GET", "/stats", NULL, NULL, &r);
    cl = r.json ? cJSON_GetObjectItem(r.json, "cluster") : NULL;
    double age = cl ? svc_jnum(cl, "map_age_ms") : -1;
    TU_CHECK(age >= 0 && age < tu_slack(1000), "idle 1.5 s: the map %.0f ms old", age);
    svc_resp_free(&r);
    svc_stop(&s, 10000);
}

static void burst(const char *mode, const char *sku, const char *extra)
{
    TU_REQUIRE(svc_set_stock(&a, sku, STOCK, NULL) == 200, "stock %s", sku);
    char *paths[BUYERS];
    svc_resp out[BUYERS];
    for (int i = 0; i < BUYERS; i++) {
        paths[i] = malloc(200);
        snprintf(paths[i], 200, "/miaosha/%s?sku=%s&user=u%d&work_ms=2&wait_ms=5000%s", mode, sku,
                 i, extra);
    }
    svc_burst(&a, "POST", paths, BUYERS, out);
    int sold = 0, other = 0;
    for (int i = 0; i < BUYERS; i++) {
        if (out[i].status == 200)
            sold++;
        else if (out[i].status != 409)
            other++;
        if (out[i].status != 200 && out[i].status != 409 && other == 1)
            fprintf(stderr, "%s %s: %ld %s\n", mode, sku, out[i].status, B(&out[i]));
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    svc_audit au;
    TU_CHECK(svc_get_audit(&b, sku, &au) == 200, "audit %s", sku);
    TU_CHECK(sold == STOCK && au.sold == STOCK && au.stock == 0 && au.oversold == 0 &&
                 au.undersold == 0 && au.orders == STOCK && other == 0,
             "%s on %s (slot %d): exact: %d x 200, %d other; audit sold %lld stock %lld "
             "oversold %lld orders %lld",
             mode, sku, slot_of(sku), sold, other, au.sold, au.stock, au.oversold, au.orders);
}

static double metric(const svc_server *s, const char *name)
{
    svc_resp r;
    svc_req(s, "GET", "/metrics", NULL, NULL, &r);
    const char *at = strstr(B(&r), name);
    while (at != NULL && at > B(&r) && at[-1] != '\n')
        at = strstr(at + 1, name);
    double v = at ? strtod(at + strlen(name) + 1, NULL) : -1;
    svc_resp_free(&r);
    return v;
}

static void test_modes(void)
{
    static const char *modes[] = {"setnx", "token", "reentrant", "fenced", "redlock", "lua"};
    for (int m = 0; m < 3; m++) {
        char sku[32];
        char prefix[16];
        snprintf(prefix, sizeof prefix, "c%d-", m);
        sku_on(C.port[m], prefix, sku, sizeof sku);
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            burst(modes[i], sku, !strcmp(modes[i], "lua") ? "" : "&lease_ms=10000");
    }
}

/* The layout record of sku (its "n id salt,salt,..." under the SKU's own
 * tag) names each bucket's tag; those tags land on the masters as evenly
 * as the slot map allows: with n >= 3 buckets, on all three. */
static void check_spread(const char *sku, int n)
{
    char key[96], rec[512] = "";
    snprintf(key, sizeof key, "miaosha:{%s}:layout", sku);
    const char *argv[] = {"GET", key};
    TU_REQUIRE(
        pk_redis_query(pk_cluster_slot_port(&C, slot_of(sku)), 2000, 2, argv, rec, sizeof rec) == 1,
        "the layout record of %s", sku);
    const char *salts = strchr(rec, ' ') ? strchr(strchr(rec, ' ') + 1, ' ') : NULL;
    TU_REQUIRE(atoi(rec) == n && salts != NULL, "layout record %s", rec);
    int on[3] = {0}, known = 0;
    salts++;
    for (int bk = 0; bk < n; bk++) {
        int salt = atoi(salts);
        char tag[96];
        if (salt > 0)
            snprintf(tag, sizeof tag, "%s~%d.%d", sku, bk, salt);
        else
            snprintf(tag, sizeof tag, "%s~%d", sku, bk);
        int port = pk_cluster_slot_port(&C, slot_of(tag));
        for (int m = 0; m < 3; m++)
            if (C.port[m] == port) {
                on[m]++;
                known++;
            }
        const char *comma = strchr(salts, ',');
        salts = comma ? comma + 1 : salts + strlen(salts);
    }
    int most = n / 3 + (n % 3 != 0);
    TU_CHECK(known == n && on[0] >= 1 && on[1] >= 1 && on[2] >= 1 && on[0] <= most &&
                 on[1] <= most && on[2] <= most,
             "%d buckets spread over the 3 masters: %d / %d / %d (record %s)", n, on[0], on[1],
             on[2], rec);
}

/* A SKU in stock buckets: each bucket is a slot of its own (svc_keys.h),
 * so PUT /stock resets them one transaction each, then the SKU's own keys
 * (svc_stock.c), the audit and GET /orders read them bucket by bucket, and
 * every purchase goes to its bucket's master. 4 buckets, a token burst;
 * then a reset to 2 (the 2 it drops emptied), a lua burst: each exact, the
 * audit summing the buckets, every order listed. */
static void test_buckets(void)
{
    static const char *const modes[2] = {"token", "lua"};
    const char *sku = "cl-buckets";
    /* A SKU whose first-choice tags (no salt) would put 3 buckets on fewer
     * than 3 masters: the placement must pick salts that reach all three. */
    char crowded[32] = "";
    for (int i = 0; i < 1000 && !crowded[0]; i++) {
        char cand[32], tag[48];
        int hit[3] = {0};
        snprintf(cand, sizeof cand, "spread%d", i);
        for (int bk = 0; bk < 3; bk++) {
            snprintf(tag, sizeof tag, "%s~%d", cand, bk);
            int port = pk_cluster_slot_port(&C, slot_of(tag));
            for (int m = 0; m < 3; m++)
                hit[m] |= C.port[m] == port;
        }
        if (hit[0] + hit[1] + hit[2] < 3)
            snprintf(crowded, sizeof crowded, "%s", cand);
    }
    TU_REQUIRE(crowded[0], "a SKU whose unsalted buckets crowd a master");
    {
        char body[64], path[96];
        snprintf(body, sizeof body, "{\"stock\":%d,\"buckets\":3}", STOCK);
        snprintf(path, sizeof path, "/stock/%s", crowded);
        svc_resp r;
        svc_req(&a, "PUT", path, body, NULL, &r);
        TU_CHECK(r.status == 200, "PUT %s: %ld %s", path, r.status, B(&r));
        svc_resp_free(&r);
        check_spread(crowded, 3);
    }
    for (int round = 0; round < 2; round++) {
        int nb = round == 0 ? 4 : 2;
        char body[64], path[160];
        snprintf(body, sizeof body, "{\"stock\":%d,\"buckets\":%d}", STOCK, nb);
        svc_resp r;
        svc_req(&a, "PUT", "/stock/cl-buckets", body, NULL, &r);
        const cJSON *bk = r.json ? cJSON_GetObjectItemCaseSensitive(r.json, "buckets") : NULL;
        TU_CHECK(r.status == 200 && cJSON_GetArraySize(bk) == nb,
                 "PUT /stock with %d buckets on a cluster: %ld %s", nb, r.status, B(&r));
        svc_resp_free(&r);
        if (round == 0)
            check_spread(sku, nb);
        char *paths[BUYERS];
        svc_resp out[BUYERS];
        for (int i = 0; i < BUYERS; i++) {
            paths[i] = malloc(200);
            snprintf(paths[i], 200, "/miaosha/%s?sku=%s&user=b%d-%d&work_ms=2&wait_ms=5000%s",
                     modes[round], sku, round, i, round == 0 ? "&lease_ms=10000" : "");
        }
        svc_burst(&a, "POST", paths, BUYERS, out);
        int sold = 0, other = 0;
        for (int i = 0; i < BUYERS; i++) {
            sold += out[i].status == 200;
            if (out[i].status != 200 && out[i].status != 409 && other++ == 0)
                fprintf(stderr, "buckets %s: %ld %s\n", modes[round], out[i].status, B(&out[i]));
            svc_resp_free(&out[i]);
            free(paths[i]);
        }
        svc_audit au;
        TU_CHECK(
            svc_get_audit(&b, sku, &au) == 200 && sold == STOCK && other == 0 && au.sold == STOCK &&
                au.stock == 0 && au.oversold == 0 && au.undersold == 0 && au.orders == STOCK,
            "%s in %d buckets: exact: %d x 200, %d other; audit sold %lld stock %lld "
            "oversold %lld undersold %lld orders %lld",
            modes[round], nb, sold, other, au.sold, au.stock, au.oversold, au.undersold, au.orders);
        snprintf(path, sizeof path, "/orders/%s?limit=1000", sku);
        svc_req(&b, "GET", path, NULL, NULL, &r);
        const cJSON *list = r.json ? cJSON_GetObjectItemCaseSensitive(r.json, "orders") : NULL;
        TU_CHECK(r.status == 200 && svc_jnum(r.json, "total") == STOCK &&
                     cJSON_GetArraySize(list) == STOCK,
                 "GET /orders: every order of the %d buckets: %ld %.300s", nb, r.status, B(&r));
        svc_resp_free(&r);
    }
}

/* 24 resets of one SKU at once, through one instance, the bucket count
 * changing: on a cluster a reset is one transaction per bucket, so two
 * interleaving would leave buckets of the one under the other's layout
 * record; taking turns (the reset lock), every one answers 200 and the SKU
 * is then exactly one of them. */
static void test_reset_storm(void)
{
    char why[1024];
    TU_CHECK(svc_reset_storm(&a, "cl-storm", 24, why, sizeof why) == 0, "24 resets at once: %s",
             why);
}

/* A master paused (SIGSTOP, 600 ms: under cluster-node-timeout, no
 * failover) while a reset writes its buckets, one on each master, through
 * an instance whose redis.command_timeout_ms is 200: that master's reply
 * does not come, so its bucket may or may not be written and the layout
 * record is not. The reset goes again, whole, once the master answers,
 * and answers 200 with the SKU wholly its own: a limited buyer buys
 * (before, it answered 503 "may be partly written", the layout record
 * the old reset's while the buckets carried the new one's id, and every
 * limited purchase answered stock_reset). */
static void test_reset_paused(void)
{
    char set[160];
    snprintf(set, sizeof set, "redis.cluster_nodes=%s", seeds);
    const char *e[] = {"--set",
                       set,
                       "--set",
                       "redis.command_timeout_ms=200",
                       "--set",
                       "purchase.limit_per_user=1",
                       "--instance-id",
                       "rp",
                       NULL};
    svc_server c;
    TU_REQUIRE(svc_start(&c, 1, e) == 0, "an instance with a 200 ms command timeout");
    svc_resp r;
    svc_req(&c, "PUT", "/stock/cl-paused", "{\"stock\":30,\"buckets\":3}", NULL, &r);
    TU_REQUIRE(r.status == 200, "30 in 3 buckets: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    int own = pk_cluster_slot_port(&C, slot_of("cl-paused")), pi = -1;
    for (int i = 0; i < C.n && pi < 0; i++)
        for (int s = 0; s < 16384 && pi < 0 && C.port[i] != own && C.pid[i] > 0; s += 512)
            if (pk_cluster_slot_port(&C, s) == C.port[i])
                pi = i; /* a master, not the SKU's own */
    TU_REQUIRE(pi >= 0, "a master other than the SKU's");
    svc_bg bg = {.s = &c, .method = "PUT"};
    snprintf(bg.path, sizeof bg.path, "/stock/cl-paused?stock=60&buckets=3");
    kill(C.pid[pi], SIGSTOP);
    TU_REQUIRE(svc_bg_start(&bg) == 0, "the reset");
    tu_sleep_ms(600);
    kill(C.pid[pi], SIGCONT);
    svc_bg_join(&bg);
    TU_CHECK(bg.r.status == 200, "the reset went on once the master answered: %ld %s", bg.r.status,
             B(&bg.r));
    svc_resp_free(&bg.r);
    svc_req(&c, "GET", "/stock/cl-paused", NULL, NULL, &r);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r.json, "buckets");
    int whole = svc_jnum(r.json, "initial") == 60 && cJSON_GetArraySize(arr) == 3;
    for (int k = 0; whole && k < 3; k++)
        whole = svc_jnum(cJSON_GetArrayItem(arr, k), "initial") == 20;
    TU_CHECK(whole, "the SKU is wholly the reset's: %s", B(&r));
    svc_resp_free(&r);
    svc_req(&c, "POST", "/miaosha/token?sku=cl-paused&user=after", NULL, NULL, &r);
    TU_CHECK(r.status == 200,
             "and sells to a limited buyer (every bucket's epoch the record's id): %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok after the pause");
    TU_CHECK(svc_stop(&c, 6000) == 0, "the instance stops");
}

/* With redis.wait_replicas a lua sale made by a probe (its first bucket
 * sold out, the next one on another master) is covered by a WAIT on the
 * master the probe went to: 200, not 503 not_replicated (the batch's
 * connection count moved with the switch and refused the WAIT). Stock 1 in
 * 64 buckets, so the unit is in bucket 0 and almost every purchase starts
 * elsewhere and probes; three sales, the probes counted in /stats. */
static double stats_probes(const svc_server *s)
{
    svc_resp r;
    svc_req(s, "GET", "/stats", NULL, NULL, &r);
    const cJSON *bk = r.json ? cJSON_GetObjectItemCaseSensitive(r.json, "buckets") : NULL;
    double v = bk ? svc_jnum(bk, "probes") : -1;
    svc_resp_free(&r);
    return v;
}

static void test_probe_wait(void)
{
    double p0 = stats_probes(&a);
    for (int i = 0; i < 3; i++) {
        svc_resp r;
        svc_req(&a, "PUT", "/stock/cl-probe", "{\"stock\":1,\"buckets\":64}", NULL, &r);
        TU_REQUIRE(r.status == 200, "PUT /stock/cl-probe: %ld %s", r.status, B(&r));
        svc_resp_free(&r);
        char path[96];
        snprintf(path, sizeof path, "/miaosha/lua?sku=cl-probe&user=probe%d", i);
        svc_req(&a, "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200 && r.json && svc_jnum(r.json, "bucket") == 0,
                 "the last unit, found by probing, replicated: %ld %s", r.status, B(&r));
        svc_resp_free(&r);
        svc_audit au;
        TU_CHECK(svc_get_audit(&a, "cl-probe", &au) == 200 && au.sold == 1 && au.stock == 0 &&
                     au.orders == 1,
                 "cl-probe: audit sold %lld stock %lld orders %lld", au.sold, au.stock, au.orders);
    }
    double probes = stats_probes(&a) - p0;
    TU_CHECK(probes > 0, "the purchases probed empty buckets: %.0f probes", probes);
}

/* A master's read events so far, asked on ctx (a connection kept open),
 * less those of the other clients that come and go on their own: the
 * instances' health probes (a PING a write, every 200 ms), their slot map
 * refreshes (CLUSTER NODES) and the replica's REPLCONF ACK each second. A
 * client's write that arrives whole is one read event; this INFO's own is
 * one more. -1 when INFO fails. */
static long long reads_processed(redisContext *ctx)
{
    redisReply *r = redisCommand(ctx, "INFO stats commandstats");
    long long n = -1;
    if (r != NULL && r->type == REDIS_REPLY_STRING)
        n = tu_info_field(r->str, "total_reads_processed:") -
            tu_info_field(r->str, "cmdstat_ping:calls=") -
            tu_info_field(r->str, "cmdstat_cluster|nodes:calls=") -
            tu_info_field(r->str, "cmdstat_replconf:calls=");
    freeReplyObject(r);
    return n;
}

/* One round trip per node, not per bucket: the audit of a SKU in 64
 * buckets (about 21 on each master) is one write to each master, and the
 * order list two (the lengths, then the pages). Counted as each master's
 * read events around the request, less the background clients' own
 * (reads_processed), the fewest over up to ten tries, which stop once
 * every master has had a try within its bound: a client this does not
 * know of may still fall inside one; a bucket at a time would be 21 or
 * more every time. */
static void test_audit_round_trips(void)
{
    svc_resp r;
    svc_req(&a, "PUT", "/stock/cl-rt", "{\"stock\":640,\"buckets\":64}", NULL, &r);
    TU_REQUIRE(r.status == 200, "PUT /stock/cl-rt: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    svc_req(&a, "POST", "/miaosha/lua?sku=cl-rt", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "a sale: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    redisContext *info[3];
    for (int m = 0; m < 3; m++)
        info[m] = redisConnect("127.0.0.1", C.port[m]);
    const char *paths[2] = {"/stock/cl-rt", "/orders/cl-rt?limit=5"};
    const long long rounds[2] = {1, 2};
    for (int k = 0; k < 2; k++) {
        long long fewest[3] = {1000, 1000, 1000};
        bool clean = false;
        for (int t = 0; t < 10 && !clean; t++) {
            long long r0[3];
            for (int m = 0; m < 3; m++)
                r0[m] = reads_processed(info[m]);
            svc_req(&a, "GET", paths[k], NULL, NULL, &r);
            TU_CHECK(r.status == 200, "GET %s: %ld %s", paths[k], r.status, B(&r));
            if (k == 0)
                TU_CHECK(svc_jnum(r.json, "sold") == 1 && svc_jnum(r.json, "stock") == 639,
                         "the audit sums the 64 buckets: %.200s", B(&r));
            svc_resp_free(&r);
            clean = true;
            for (int m = 0; m < 3; m++) {
                long long d = reads_processed(info[m]) - r0[m] - 1; /* less INFO's own */
                fewest[m] = d < fewest[m] ? d : fewest[m];
                clean = clean && fewest[m] <= rounds[k];
            }
        }
        for (int m = 0; m < 3; m++)
            TU_CHECK(fewest[m] >= 0 && fewest[m] <= rounds[k],
                     "GET %s: master %d read %lld writes (one per round: %lld)", paths[k], m,
                     fewest[m], rounds[k]);
    }
    for (int m = 0; m < 3; m++)
        redisFree(info[m]);
}

/* A master's count of one error reply (INFO errorstats), e.g. EXECABORT. */
static long long error_count(int port, const char *prefix)
{
    char field[64];
    snprintf(field, sizeof field, "errorstat_%s:count=", prefix);
    return tu_redis_info_num(NULL, port, "errorstats", field);
}

typedef struct hb_call {
    char path[128];
    svc_resp out;
} hb_call;

static void *hb_buy(void *arg)
{
    hb_call *c = arg;
    svc_req(&a, "POST", c->path, NULL, NULL, &c->out);
    return NULL;
}

/* A commit held back by a migration goes again. A purchase (modes none
 * and mutex: no lock in Redis) reads its SKU on master A (WATCH epoch, GET
 * stock), then works 3 s; meanwhile the slot starts moving to B and the
 * stock key alone is migrated. The commit, pinned to its WATCH on A, is
 * refused there (ASK inside MULTI: EXECABORT, nothing written; the test
 * waits for A's EXECABORT count), then the rest of the slot moves and the
 * slot is B's. The purchase reads again, on B, and sells: 200 with an
 * order, the audit exact. Before, it answered 503 with nothing written. */
static void test_held_back(void)
{
    const char *modes[] = {"none", "mutex"};
    for (int m = 0; m < 2; m++) {
        char sku[32], key[96], out[64], err[256];
        snprintf(sku, sizeof sku, "cl-hb-%s", modes[m]);
        TU_REQUIRE(svc_set_stock(&a, sku, 3, NULL) == 200, "stock %s", sku);
        int slot = slot_of(sku), from = pk_cluster_slot_port(&C, slot), to = 0;
        for (int i = 0; i < 3 && to == 0; i++) /* the masters */
            if (C.port[i] != from)
                to = C.port[i];
        TU_REQUIRE(from > 0 && to > 0, "slot %d: from %d to %d", slot, from, to);
        long long aborts0 = error_count(from, "EXECABORT");
        long long watches0 = svc_redis_calls(from, "watch");
        double held0 = metric(&a, "miaosha_redis_cluster_held_back_commits_total");
        hb_call c = {.path = ""};
        snprintf(c.path, sizeof c.path, "/miaosha/%s?sku=%s&user=hb&work_ms=3000&wait_ms=5000",
                 modes[m], sku);
        pthread_t t;
        TU_REQUIRE(pthread_create(&t, NULL, hb_buy, &c) == 0, "thread");
        int64_t until = lc_now_ms() + tu_slack(10000);
        while (svc_redis_calls(from, "watch") == watches0 && lc_now_ms() < until)
            tu_sleep_ms(5);
        TU_CHECK(svc_redis_calls(from, "watch") > watches0, "%s: the purchase read on A", modes[m]);
        int f = 0;
        TU_REQUIRE(pk_cluster_migrate_begin(&C, slot, to, &f, err, sizeof err) == 0, "begin: %s",
                   err);
        snprintf(key, sizeof key, "miaosha:{%s}:stock", sku);
        TU_REQUIRE(tu_redis_str(from, out, sizeof out, "MIGRATE 127.0.0.1 %d %s 0 5000", to, key) ==
                       0,
                   "MIGRATE %s", key);
        until = lc_now_ms() + tu_slack(10000);
        while (error_count(from, "EXECABORT") == aborts0 && lc_now_ms() < until)
            tu_sleep_ms(5);
        long long aborts = error_count(from, "EXECABORT") - aborts0;
        TU_CHECK(aborts == 1, "%s: A refused the commit once (EXECABORT %lld)", modes[m], aborts);
        TU_REQUIRE(pk_cluster_migrate_keys(slot, from, to, 1000, err, sizeof err) >= 0 &&
                       pk_cluster_migrate_end(&C, slot, from, to, err, sizeof err) == 0,
                   "the rest of the move: %s", err);
        pthread_join(t, NULL);
        TU_CHECK(c.out.status == 200 && svc_jstr(c.out.json, "order_id"),
                 "%s: the held-back commit went again and sold: %ld %s", modes[m], c.out.status,
                 B(&c.out));
        double held = metric(&a, "miaosha_redis_cluster_held_back_commits_total");
        svc_resp st;
        svc_req(&a, "GET", "/stats", NULL, NULL, &st);
        double held_stats = svc_jnum(cJSON_GetObjectItemCaseSensitive(st.json, "cluster"),
                                     "held_back_commits");
        svc_resp_free(&st);
        TU_CHECK(held0 >= 0 && held >= held0 + 1 && held_stats == held,
                 "%s: counted as held back (/metrics %g -> %g, /stats %g)", modes[m], held0, held,
                 held_stats);
        svc_resp_free(&c.out);
        svc_resp r;
        char path[64];
        snprintf(path, sizeof path, "/stock/%s", sku);
        svc_req(&a, "GET", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200 && svc_jnum(r.json, "stock") == 2 &&
                     svc_jnum(r.json, "sold") == 1 && svc_jnum(r.json, "orders") == 1,
                 "%s: one unit sold, once: %s", modes[m], B(&r));
        svc_resp_free(&r);
    }
}

/* redis.wait_replicas = 1 through a resharding: a purchase's WAIT goes over
 * the connection that wrote its order, wherever the router went since.
 *   - lua and token purchases while their SKU's slot migrates (every key
 *     moved already: ASK to the importing master), then after it moved
 *     (the instance's map still names the old master: MOVED): 200, the
 *     WAIT on the master that wrote. Before, a lua sale redirected so
 *     answered 503 not_replicated for an order that was there.
 *   - a token purchase whose lock key alone migrates while it works: its
 *     commit runs on the old master (the stock is still there), its
 *     release goes to the new one (ASK). With the old master's replica
 *     stopped: 503 not_replicated, "0 of 1" — the WAIT asked the master
 *     that wrote the order. Before, it went where the release had gone
 *     last, whose replica has the release, and answered 200 for an order
 *     no replica had. */
/* POST /miaosha/<mode>?sku=<sku>[&user=<user>] on instance a, into *r
 * (svc_resp_free it); returns the status. */
static long buy_as(const char *mode, const char *sku, const char *user, svc_resp *r)
{
    char path[128];
    snprintf(path, sizeof path, "/miaosha/%s?sku=%s%s%s", mode, sku, user ? "&user=" : "",
             user ? user : "");
    svc_req(&a, "POST", path, NULL, NULL, r);
    return r->status;
}

static void test_redirect_wait(void)
{
    const char *modes[] = {"lua", "token"};
    char err[256];
    for (int m = 0; m < 2; m++) {
        char sku[32], prefix[16];
        snprintf(prefix, sizeof prefix, "cl-rw-%s", modes[m]);
        sku_on(C.port[1], prefix, sku, sizeof sku);
        TU_REQUIRE(svc_set_stock(&a, sku, 4, NULL) == 200, "stock %s", sku);
        int slot = slot_of(sku), from = 0, to = C.port[2];
        /* a first sale writes every key a sale touches (a buyer's name:
         * the buyers' hash too): during a migration a command naming a key
         * that exists on neither side gets TRYAGAIN until the slot has
         * moved */
        svc_resp r;
        TU_REQUIRE(buy_as(modes[m], sku, "rw0", &r) == 200, "%s: the first sale: %ld %s", sku,
                   r.status, B(&r));
        svc_resp_free(&r);
        TU_REQUIRE(pk_cluster_migrate_begin(&C, slot, to, &from, err, sizeof err) == 0 &&
                       from == C.port[1] &&
                       pk_cluster_migrate_keys(slot, from, to, 1000, err, sizeof err) > 0,
                   "%s: its keys moved, the slot migrating: %s", sku, err);
        TU_CHECK(buy_as(modes[m], sku, "rw1", &r) == 200 && svc_jstr(r.json, "order_id"),
                 "%s during the move (ASK): replicated by the master that wrote: %ld %s", modes[m],
                 r.status, B(&r));
        svc_resp_free(&r);
        TU_REQUIRE(pk_cluster_migrate_end(&C, slot, from, to, err, sizeof err) == 0,
                   "the move's end: %s", err);
        TU_CHECK(buy_as(modes[m], sku, "rw2", &r) == 200 && svc_jstr(r.json, "order_id"),
                 "%s after the move (MOVED): replicated by the master that wrote: %ld %s", modes[m],
                 r.status, B(&r));
        svc_resp_free(&r);
        svc_audit au;
        TU_CHECK(svc_get_audit(&a, sku, &au) == 200 && au.sold == 3 && au.stock == 1 &&
                     au.orders == 3,
                 "%s: audit sold %lld stock %lld orders %lld", sku, au.sold, au.stock, au.orders);
    }

    char sku[32], key[96], out[64];
    sku_on(C.port[1], "cl-rw-lock", sku, sizeof sku);
    TU_REQUIRE(svc_set_stock(&a, sku, 3, NULL) == 200, "stock %s", sku);
    int slot = slot_of(sku), from = C.port[1], to = C.port[2], f = 0, ri = -1;
    svc_resp r0; /* the first sale, as above */
    TU_REQUIRE(buy_as("token", sku, NULL, &r0) == 200, "%s: the first sale: %ld %s", sku, r0.status,
               B(&r0));
    svc_resp_free(&r0);
    int rport = pk_cluster_replica_of(&C, from);
    for (int i = 0; i < C.n; i++)
        if (C.port[i] == rport && C.pid[i] > 0)
            ri = i;
    TU_REQUIRE(ri >= 0, "master %d's replica (%d)", from, rport);
    long long watches0 = svc_redis_calls(from, "watch"), evals0 = svc_redis_calls(to, "evalsha");
    hb_call c = {.path = ""};
    snprintf(c.path, sizeof c.path, "/miaosha/token?sku=%s&work_ms=%lld&wait_ms=5000", sku,
             (long long)tu_slack(2000));
    pthread_t t;
    TU_REQUIRE(pthread_create(&t, NULL, hb_buy, &c) == 0, "thread");
    int64_t until = lc_now_ms() + tu_slack(10000);
    while (svc_redis_calls(from, "watch") == watches0 && lc_now_ms() < until)
        tu_sleep_ms(5);
    TU_CHECK(svc_redis_calls(from, "watch") > watches0, "the purchase read on its master");
    snprintf(key, sizeof key, "miaosha:{%s}:lock:token", sku);
    TU_REQUIRE(pk_cluster_migrate_begin(&C, slot, to, &f, err, sizeof err) == 0 &&
                   tu_redis_str(from, out, sizeof out, "MIGRATE 127.0.0.1 %d %s 0 5000", to, key) ==
                       0,
               "the lock key alone moves: %s", err);
    kill(C.pid[ri], SIGSTOP);
    pthread_join(t, NULL);
    kill(C.pid[ri], SIGCONT);
    /* the replica catches up before anything else WAITs on its master */
    long long moff = tu_redis_info_num(NULL, from, "replication", "master_repl_offset:"), roff = -1;
    until = lc_now_ms() + tu_slack(10000);
    while ((roff = tu_redis_info_num(NULL, from, "replication", "offset=")) < moff &&
           lc_now_ms() < until)
        tu_sleep_ms(10);
    TU_CHECK(roff >= moff, "the replica caught up again (%lld of %lld)", roff, moff);
    const char *detail = svc_jstr(c.out.json, "detail");
    TU_CHECK(c.out.status == 503 && svc_jerr_is(&c.out, "not_replicated") &&
                 svc_jstr(c.out.json, "order_id") && detail && strstr(detail, "0 of 1"),
             "the order on a master whose replica is stopped: not replicated, whatever the "
             "release's master says: %ld %s",
             c.out.status, B(&c.out));
    TU_CHECK(svc_redis_calls(to, "evalsha") > evals0, "the release went to the new master");
    svc_resp_free(&c.out);
    TU_REQUIRE(pk_cluster_migrate_keys(slot, from, to, 1000, err, sizeof err) >= 0 &&
                   pk_cluster_migrate_end(&C, slot, from, to, err, sizeof err) == 0,
               "the rest of the move: %s", err);
    svc_audit au;
    TU_CHECK(svc_get_audit(&a, sku, &au) == 200 && au.sold == 2 && au.stock == 1,
             "%s: the order was written (sold %lld stock %lld)", sku, au.sold, au.stock);
}

static void test_idem(void)
{
    char sku[32];
    sku_on(C.port[1], "idem", sku, sizeof sku);
    TU_REQUIRE(svc_set_stock(&a, sku, 5, NULL) == 200, "stock");
    const char *modes[] = {"token", "lua"};
    for (int i = 0; i < 2; i++) {
        char path[120], hdr[64];
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=i%d", modes[i], sku, i);
        snprintf(hdr, sizeof hdr, "Idempotency-Key: cl-key-%d", i);
        svc_resp r1, r2;
        svc_req_hdr(&a, "POST", path, hdr, &r1);
        svc_req_hdr(&b, "POST", path, hdr, &r2);
        TU_CHECK(r1.status == 200 && r2.status == 200 && !strcmp(B(&r1), B(&r2)),
                 "%s: the replay is the sale: %ld %s / %ld %s", modes[i], r1.status, B(&r1),
                 r2.status, B(&r2));
        svc_resp_free(&r1);
        svc_resp_free(&r2);
    }
    svc_audit au;
    TU_CHECK(svc_get_audit(&a, sku, &au) == 200 && au.sold == 2, "two sold, not four (%lld)",
             au.sold);
}

static long buy(const svc_server *s, const char *sku, int *local)
{
    char path[120];
    svc_resp r;
    snprintf(path, sizeof path, "/miaosha/lua?sku=%s&user=x", sku);
    svc_req(s, "POST", path, NULL, NULL, &r);
    *local = svc_jbool(r.json, "local") == 1;
    long st = r.status;
    svc_resp_free(&r);
    return st;
}

static void test_soldout(void)
{
    char sku[32];
    sku_on(C.port[2], "so", sku, sizeof sku);
    TU_REQUIRE(svc_set_stock(&b, sku, 0, NULL) == 200, "stock 0");
    int local = 0;
    int64_t dl = lc_now_ms() + tu_slack(3000);
    while (!local && lc_now_ms() < dl)
        TU_CHECK(buy(&a, sku, &local) == 409, "sold out");
    TU_CHECK(local, "instance a answers sold out from memory");
    int64_t t0 = lc_now_ms();
    TU_REQUIRE(svc_set_stock(&b, sku, 3, NULL) == 200, "reset on b");
    long st = 409;
    while (st != 200 && lc_now_ms() < t0 + tu_slack(3000))
        st = buy(&a, sku, &local);
    TU_CHECK(st == 200, "a sells again after b's reset, %lld ms", (long long)(lc_now_ms() - t0));
}

/* GET /healthz of s every 100 ms until it answers want or until_ms (lc_now_ms)
 * passes; the last status, its body in body (len bytes). */
static long healthz_until(const svc_server *s, long want, int64_t until_ms, char *body, size_t len)
{
    long st;
    for (;;) {
        svc_resp r;
        svc_req(s, "GET", "/healthz", NULL, NULL, &r);
        st = r.status;
        snprintf(body, len, "%s", B(&r));
        svc_resp_free(&r);
        if (st == want || lc_now_ms() >= until_ms)
            return st;
        tu_sleep_ms(100);
    }
}

static void test_seen(void)
{
    svc_resp r;
    svc_req(&a, "GET", "/stats", NULL, NULL, &r);
    const cJSON *cl = cJSON_GetObjectItem(r.json, "cluster");
    const cJSON *masters = cl ? cJSON_GetObjectItem(cl, "masters") : NULL;
    TU_CHECK(cl && svc_jnum(cl, "slots_covered") == 16384 && cJSON_GetArraySize(masters) == 3 &&
                 svc_jstr(cl, "refreshed_at"),
             "/stats: the map: %s", B(&r));
    int reps = 0;
    for (int i = 0; masters && i < cJSON_GetArraySize(masters); i++)
        reps += cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(masters, i), "replicas"));
    TU_CHECK(reps == 3, "/stats: 3 replicas (%d)", reps);
    svc_resp_free(&r);
    TU_CHECK(metric(&a, "miaosha_redis_redirects_total{kind=\"moved\"}") >= 0 &&
                 metric(&a, "miaosha_redis_redirects_total{kind=\"ask\"}") >= 0 &&
                 metric(&a, "miaosha_redis_cluster_retries_total") >= 0 &&
                 metric(&a, "miaosha_redis_cluster_map_refreshes_total") >= 1 &&
                 metric(&a, "miaosha_redis_cluster_slots_covered") == 16384,
             "/metrics: the cluster's counters");
    svc_req(&a, "GET", "/healthz", NULL, NULL, &r);
    char p0[16];
    snprintf(p0, sizeof p0, ":%d", C.port[0]);
    TU_CHECK(r.status == 200 && svc_jstr(r.json, "master") &&
                 strstr(svc_jstr(r.json, "master"), p0),
             "/healthz 200 naming the masters: %s", B(&r));
    svc_resp_free(&r);
}

static void test_failover(void)
{
    char sku[32];
    sku_on(C.port[0], "fo", sku, sizeof sku);
    TU_REQUIRE(svc_set_stock(&a, sku, 100, NULL) == 200, "stock");
    int64_t t0 = lc_now_ms();
    pk_cluster_kill(&C, 0);
    svc_resp r;
    long st = 200;
    char why[400] = "";
    while (st == 200 && lc_now_ms() < t0 + tu_slack(5000)) {
        svc_req(&a, "GET", "/healthz", NULL, NULL, &r);
        st = r.status;
        if (st != 200 && svc_jstr(r.json, "reason"))
            snprintf(why, sizeof why, "%s", svc_jstr(r.json, "reason"));
        svc_resp_free(&r);
        if (st == 200)
            tu_sleep_ms(50);
    }
    char p0[16];
    snprintf(p0, sizeof p0, ":%d", C.port[0]);
    TU_CHECK(st == 503 && strstr(why, p0), "/healthz 503 naming the dead master: %s", why);
    long bought = 0;
    while (bought != 200 && lc_now_ms() < t0 + tu_slack(20000)) {
        char path[120];
        snprintf(path, sizeof path, "/miaosha/token?sku=%s&user=f", sku);
        svc_req(&a, "POST", path, NULL, NULL, &r);
        bought = r.status;
        TU_CHECK(bought == 200 || bought == 503, "200 or 503 meanwhile: %ld %s", bought, B(&r));
        snprintf(why, sizeof why, "%s", B(&r));
        /* the promoted replica has no replica of its own yet: written on
         * the master, WAIT 1 cannot be met (per master) */
        if (bought == 503 && svc_jerr_is(&r, "not_replicated") && svc_jstr(r.json, "order_id"))
            bought = 200;
        svc_resp_free(&r);
        if (bought != 200)
            tu_sleep_ms(100);
    }
    printf("failover: the SKU sells again %lld ms after the kill\n", (long long)(lc_now_ms() - t0));
    TU_CHECK(bought == 200, "writes again on the promoted replica (last: %s)", why);
    TU_CHECK(strstr(why, "not_replicated") && strstr(why, "0 of 1 replicas"),
             "WAIT per master: the promoted replica has none yet: %s", why);
    st = healthz_until(&a, 200, t0 + tu_slack(20000), why, sizeof why);
    TU_CHECK(st == 200, "/healthz 200 again (%s)", why);
    /* b has sent nothing since the kill (its workers' map still names the
     * dead master): its /healthz names the probe's map, the promoted one */
    char master[400] = "", dead[24];
    snprintf(dead, sizeof dead, ":%d,", C.port[0]);
    st = 503;
    int64_t t1 = lc_now_ms();
    while (st != 200 && lc_now_ms() < t1 + tu_slack(20000)) {
        svc_req(&b, "GET", "/healthz", NULL, NULL, &r);
        st = r.status;
        snprintf(master, sizeof master, ",%s,",
                 r.json && svc_jstr(r.json, "master") ? svc_jstr(r.json, "master") : "");
        svc_resp_free(&r);
        if (st != 200)
            tu_sleep_ms(100);
    }
    TU_CHECK(st == 200 && strlen(master) > 2 && !strstr(master, dead),
             "an idle instance names the masters now, not the dead one (%s): %s", dead, master);
}

/* --- one lua batch over every master --------------------------------------- */

#define PB_SKUS 4 /* one on each master, one in 3 buckets (one per master) */
#define PB_BUYERS 4
#define PB_STOCK 3

typedef struct pb_call {
    const svc_server *s;
    char **paths;
    int n;
    svc_resp *out;
} pb_call;

static void *pb_fire(void *arg)
{
    pb_call *c = arg;
    if (c->paths)
        svc_burst(c->s, "POST", c->paths, c->n, c->out);
    else
        svc_req(c->s, "POST", "/miaosha/setnx?sku=pb-hold&wait_ms=20000", NULL, NULL, c->out);
    return NULL;
}

/* Without redis.wait_replicas, lua purchases of many slots queued together
 * go as one batch, each script to its own slot's master, every master's
 * share in one write (lc_conn_pipe_each). One worker (server.workers=1),
 * held by a setnx purchase that waits for a lock the test holds; 16 lua
 * purchases queue behind it: 4 of a SKU on each master and 4 of a SKU in 3
 * buckets, one per master; the lock deleted, the worker takes them as one
 * batch (/metrics: one write of 16 scripts), every master ran scripts
 * (its EVALSHA count), and each SKU sold exactly its stock, audit exact. */
static void test_pipe_batch(void)
{
    char set[160];
    snprintf(set, sizeof set, "redis.cluster_nodes=%s", seeds);
    const char *e[] = {"--set", set, "--set", "server.workers=1", "--instance-id", "pb", NULL};
    svc_server c;
    TU_REQUIRE(svc_start(&c, 1, e) == 0, "a one-worker instance without WAIT");
    char skus[PB_SKUS][32];
    for (int m = 0; m < 3; m++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "pb%d-", m);
        sku_on(C.port[m], prefix, skus[m], sizeof skus[m]);
        TU_REQUIRE(svc_set_stock(&c, skus[m], PB_STOCK, NULL) == 200, "stock %s", skus[m]);
    }
    snprintf(skus[3], sizeof skus[3], "pb-buckets");
    svc_resp r;
    svc_req(&c, "PUT", "/stock/pb-buckets", "{\"stock\":3,\"buckets\":3}", NULL, &r);
    TU_REQUIRE(r.status == 200, "3 buckets: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    check_spread("pb-buckets", 3);
    TU_REQUIRE(svc_set_stock(&c, "pb-hold", 5, NULL) == 200, "stock pb-hold");
    int hold_port = pk_cluster_slot_port(&C, slot_of("pb-hold"));
    char okbuf[16];
    TU_REQUIRE(tu_redis_str(hold_port, okbuf, sizeof okbuf,
                            "SET miaosha:{pb-hold}:lock:setnx someone-else PX %s", "60000") == 0,
               "hold the lock");
    long long ev0[3];
    for (int m = 0; m < 3; m++)
        ev0[m] = svc_redis_calls(C.port[m], "evalsha");
    double b0 = metric(&c, "miaosha_lua_batches_total");
    double p0 = metric(&c, "miaosha_lua_batched_purchases_total");

    svc_resp hold_out = {0}, out[PB_SKUS * PB_BUYERS];
    memset(out, 0, sizeof out);
    pb_call hold = {.s = &c, .out = &hold_out};
    pthread_t th_hold, th_fire;
    TU_REQUIRE(pthread_create(&th_hold, NULL, pb_fire, &hold) == 0, "thread");
    TU_REQUIRE(svc_wait_inflight(&c, 1), "the setnx purchase holds the only worker");
    char *paths[PB_SKUS * PB_BUYERS];
    for (int i = 0; i < PB_SKUS * PB_BUYERS; i++) {
        paths[i] = malloc(96);
        TU_REQUIRE(paths[i] != NULL, "memory");
        snprintf(paths[i], 96, "/miaosha/lua?sku=%s&user=u%d", skus[i % PB_SKUS], i);
    }
    pb_call fire = {.s = &c, .paths = paths, .n = PB_SKUS * PB_BUYERS, .out = out};
    TU_REQUIRE(pthread_create(&th_fire, NULL, pb_fire, &fire) == 0, "thread");
    TU_CHECK(svc_wait_inflight(&c, 1 + PB_SKUS * PB_BUYERS), "all queued behind it");
    TU_CHECK(tu_redis_int(hold_port, "DEL %s", "miaosha:{pb-hold}:lock:setnx") == 1,
             "release the held lock");
    pthread_join(th_fire, NULL);
    pthread_join(th_hold, NULL);
    TU_CHECK(hold_out.status == 200, "the held purchase: %ld %s", hold_out.status, B(&hold_out));
    svc_resp_free(&hold_out);
    double batches = metric(&c, "miaosha_lua_batches_total") - b0;
    double batched = metric(&c, "miaosha_lua_batched_purchases_total") - p0;
    TU_CHECK(batches == 1 && batched == PB_SKUS * PB_BUYERS,
             "one write per master carried the %d scripts (%.0f batches, %.0f scripts)",
             PB_SKUS * PB_BUYERS, batches, batched);
    for (int m = 0; m < 3; m++) {
        long long ran = svc_redis_calls(C.port[m], "evalsha") - ev0[m];
        TU_CHECK(ran >= PB_BUYERS, "master %d ran its share: %lld scripts", m, ran);
    }
    for (int k = 0; k < PB_SKUS; k++) {
        int sold = 0, sold_out = 0;
        for (int i = k; i < PB_SKUS * PB_BUYERS; i += PB_SKUS) {
            sold += out[i].status == 200;
            sold_out += out[i].status == 409 && svc_jerr_is(&out[i], "sold_out");
        }
        svc_audit au;
        TU_CHECK(sold == PB_STOCK && sold_out == PB_BUYERS - PB_STOCK &&
                     svc_get_audit(&c, skus[k], &au) == 200 && au.sold == PB_STOCK &&
                     au.stock == 0 && au.orders == PB_STOCK && au.oversold == 0 &&
                     au.undersold == 0,
                 "%s: %d sold, %d sold out; audit sold %lld stock %lld orders %lld", skus[k], sold,
                 sold_out, au.sold, au.stock, au.orders);
    }
    for (int i = 0; i < PB_SKUS * PB_BUYERS; i++) {
        free(paths[i]);
        svc_resp_free(&out[i]);
    }
    svc_stop(&c, 10000);
}

/* --- a master that stops answering in the middle of a batch ---------------- */

/* CONFIG SET cluster-node-timeout ms on every node of C. */
static void node_timeout(const char *ms)
{
    for (int i = 0; i < C.n; i++) {
        if (C.pid[i] == 0)
            continue;
        char ok[8];
        TU_REQUIRE(
            tu_redis_str(C.port[i], ok, sizeof ok, "CONFIG SET cluster-node-timeout %s", ms) == 0,
            "cluster-node-timeout %s on %d", ms, C.port[i]);
    }
}

/* One lua batch over the three masters, as above, while the third master
 * is stopped (SIGSTOP): its share is written (the kernel takes it) and
 * no reply comes. After redis.command_timeout_ms its purchases answer 503
 * redis_unavailable "purchase outcome unknown" with their order ids, and
 * the other masters' purchases in the same batch sell as usual. Once it
 * runs again (SIGCONT) it runs each script of its share exactly once (a
 * command whose reply was lost is never sent again) and its SKU's audit is
 * exact. cluster-node-timeout is raised while the master sleeps, so that
 * no replica is promoted meanwhile; every SKU was bought once before, so
 * no layout read goes to the stopped master before the batch. */
static void test_master_hangs(void)
{
    char set[160];
    snprintf(set, sizeof set, "redis.cluster_nodes=%s", seeds);
    /* short, so the stopped master's share gives up soon; scaled for the
     * sanitizer builds like every bound of the tests */
    char timeout[48];
    snprintf(timeout, sizeof timeout, "redis.command_timeout_ms=%lld", (long long)tu_slack(300));
    const char *e[] = {"--set",         set,     "--set", "server.workers=1",
                       "--set",         timeout, "--set", "metrics.sku_gauges=0",
                       "--instance-id", "mh",    NULL};
    svc_server c;
    TU_REQUIRE(svc_start(&c, 1, e) == 0, "a one-worker instance without WAIT");
    char skus[3][32], path[96], hold_sku[32];
    svc_resp r;
    for (int m = 0; m < 3; m++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "mh%d-", m);
        sku_on(C.port[m], prefix, skus[m], sizeof skus[m]);
        TU_REQUIRE(svc_set_stock(&c, skus[m], PB_STOCK + 1, NULL) == 200, "stock %s", skus[m]);
        snprintf(path, sizeof path, "/miaosha/lua?sku=%s&user=first", skus[m]);
        svc_req(&c, "POST", path, NULL, NULL, &r);
        TU_REQUIRE(r.status == 200, "the first purchase of %s: %ld %s", skus[m], r.status, B(&r));
        svc_resp_free(&r);
    }
    sku_on(C.port[0], "mh-hold-", hold_sku, sizeof hold_sku);
    TU_REQUIRE(svc_set_stock(&c, hold_sku, 5, NULL) == 200, "stock %s", hold_sku);
    char hold_key[96], okbuf[16];
    snprintf(hold_key, sizeof hold_key, "miaosha:{%s}:lock:setnx", hold_sku);
    TU_REQUIRE(
        tu_redis_str(C.port[0], okbuf, sizeof okbuf, "SET %s someone-else PX 60000", hold_key) == 0,
        "hold the lock");
    long long ev0 = svc_redis_calls(C.port[2], "evalsha");

    enum { N = 3 * PB_BUYERS };
    svc_resp hold_out = {0}, out[N];
    memset(out, 0, sizeof out);
    char hold_path[96];
    snprintf(hold_path, sizeof hold_path, "/miaosha/setnx?sku=%s&wait_ms=20000", hold_sku);
    char *hold_paths[1] = {hold_path};
    pb_call hold = {.s = &c, .paths = hold_paths, .n = 1, .out = &hold_out};
    pthread_t th_hold, th_fire;
    TU_REQUIRE(pthread_create(&th_hold, NULL, pb_fire, &hold) == 0, "thread");
    TU_REQUIRE(svc_wait_inflight(&c, 1), "the setnx purchase holds the only worker");
    char *paths[N];
    for (int i = 0; i < N; i++) {
        paths[i] = malloc(96);
        TU_REQUIRE(paths[i] != NULL, "memory");
        snprintf(paths[i], 96, "/miaosha/lua?sku=%s&user=u%d", skus[i % 3], i);
    }
    pb_call fire = {.s = &c, .paths = paths, .n = N, .out = out};
    TU_REQUIRE(pthread_create(&th_fire, NULL, pb_fire, &fire) == 0, "thread");
    TU_CHECK(svc_wait_inflight(&c, 1 + N), "all queued behind it");
    node_timeout("60000");
    TU_REQUIRE(kill(C.pid[2], SIGSTOP) == 0, "SIGSTOP the third master");
    TU_CHECK(tu_redis_int(C.port[0], "DEL %s", hold_key) == 1, "release the held lock");
    pthread_join(th_fire, NULL);
    pthread_join(th_hold, NULL);
    TU_REQUIRE(kill(C.pid[2], SIGCONT) == 0, "SIGCONT the third master");
    TU_CHECK(hold_out.status == 200, "the held purchase: %ld %s", hold_out.status, B(&hold_out));
    svc_resp_free(&hold_out);

    for (int k = 0; k < 3; k++) {
        int sold = 0, sold_out = 0, unknown = 0;
        for (int i = k; i < N; i += 3) {
            sold += out[i].status == 200;
            sold_out += out[i].status == 409 && svc_jerr_is(&out[i], "sold_out");
            unknown += out[i].status == 503 && svc_jerr_is(&out[i], "redis_unavailable") &&
                       svc_jdetail_has(&out[i], "outcome unknown") && out[i].json &&
                       svc_jstr(out[i].json, "order_id") != NULL;
        }
        if (k < 2)
            TU_CHECK(sold == PB_STOCK && sold_out == PB_BUYERS - PB_STOCK,
                     "%s (a master that answers): %d sold, %d sold out", skus[k], sold, sold_out);
        else
            TU_CHECK(unknown == PB_BUYERS, "%s (the stopped master): %d of %d outcome unknown",
                     skus[k], unknown, PB_BUYERS);
    }
    /* The stopped master's share, run once it woke: PB_BUYERS scripts and
     * no more (a resend would have been written before the 503s). */
    long long ran = 0;
    int64_t t0 = lc_now_ms();
    while ((ran = svc_redis_calls(C.port[2], "evalsha") - ev0) < PB_BUYERS &&
           lc_now_ms() < t0 + tu_slack(5000))
        tu_sleep_ms(20);
    TU_CHECK(ran == PB_BUYERS, "the third master ran its share once: %lld scripts of %d", ran,
             PB_BUYERS);
    node_timeout("1000");
    TU_CHECK(pk_cluster_wait_ok(&C, tu_slack(10000), NULL), "the cluster is ok again");
    for (int k = 0; k < 3; k++) {
        svc_audit au;
        TU_CHECK(
            svc_get_audit(&c, skus[k], &au) == 200 && au.sold == PB_STOCK + 1 && au.stock == 0 &&
                au.orders == PB_STOCK + 1 && au.oversold == 0 && au.undersold == 0,
            "%s: audit sold %lld stock %lld orders %lld", skus[k], au.sold, au.stock, au.orders);
    }
    for (int i = 0; i < N; i++) {
        free(paths[i]);
        svc_resp_free(&out[i]);
    }
    svc_stop(&c, 10000);
}

/* A slot left without a master (CLUSTER DELSLOTS on every node): /healthz
 * turns 503 naming it within a few probes, not at the next periodic map
 * refresh (redis.cluster_refresh_ms, 5 s); the slot given back, 200. */
static void test_slot_lost(void)
{
    const int slot = 100;
    int owner = pk_cluster_slot_port(&C, slot);
    TU_REQUIRE(owner > 0, "slot %d has a master", slot);
    char rec[64];
    const char *del[] = {"CLUSTER", "DELSLOTS", "100"};
    for (int i = 0; i < C.n; i++)
        (void)pk_redis_query(C.port[i], 2000, 3, del, rec, sizeof rec); /* replicas refuse */
    char why[300] = "";
    int64_t t0 = lc_now_ms();
    long st = healthz_until(&a, 503, t0 + tu_slack(2000), why, sizeof why);
    TU_CHECK(st == 503 && strstr(why, "slot 100"),
             "a slot without a master: /healthz 503 naming it after %lld ms: %s",
             (long long)(lc_now_ms() - t0), why);
    const char *add[] = {"CLUSTER", "ADDSLOTS", "100"};
    TU_CHECK(pk_redis_query(owner, 2000, 3, add, rec, sizeof rec) == 1, "slot given back");
    TU_REQUIRE(pk_cluster_wait_ok(&C, (int)tu_slack(10000), NULL), "cluster ok again");
    st = healthz_until(&a, 200, lc_now_ms() + tu_slack(3000), why, sizeof why);
    TU_CHECK(st == 200, "/healthz 200 again: %ld %s", st, why);
}

int main(void)
{
    pk_cluster_opts o;
    pk_cluster_opts_init(&o);
    char dir[] = "/tmp/svc-cluster.XXXXXX", err[256];
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    o.dir = dir;
    o.server = getenv("MIAOSHA_REDIS_SERVER");
    TU_REQUIRE(pk_cluster_start(&C, &o, err, sizeof err) == 0, "cluster: %s", err);
    for (int i = 0; i < 3; i++)
        TU_REQUIRE(tu_redis_start(&locks[i], 0, NULL) == 0, "lock master %d", i);
    snprintf(lock_nodes, sizeof lock_nodes, "redlock.nodes=127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             locks[0].port, locks[1].port, locks[2].port);
    snprintf(seeds, sizeof seeds, "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", pk_free_port(),
             C.port[1], C.port[2]);
    test_start();
    char set[160];
    snprintf(set, sizeof set, "redis.cluster_nodes=%s", seeds);
    const char *e[] = {"--set", set,
                       "--set", lock_nodes,
                       "--set", "redis.wait_replicas=1",
                       "--set", "redis.wait_timeout_ms=1000",
                       "--set", "redis.command_timeout_ms=2000",
                       NULL};
    TU_REQUIRE(svc_start(&a, 1, e) == 0 && svc_start(&b, 1, e) == 0, "two instances");
    test_map_idle();
    test_modes();
    test_buckets();
    test_reset_storm();
    test_reset_paused();
    test_probe_wait();
    test_audit_round_trips();
    test_held_back();
    test_redirect_wait();
    test_pipe_batch();
    test_master_hangs();
    test_idem();
    test_soldout();
    test_seen();
    test_slot_lost();
    test_failover();
    svc_stop(&a, 10000);
    svc_stop(&b, 10000);
    for (int i = 0; i < 3; i++)
        tu_redis_stop(&locks[i]);
    pk_cluster_stop(&C);
    pk_rm_tree(dir);
    return tu_done();
}
