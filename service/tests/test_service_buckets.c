/* test_service_buckets.c — a hot SKU split into stock buckets
 * (svc_bucket.h): PUT /stock's buckets, exactness at the boundaries in
 * every mode, the last unit found by every instance (no stranded stock),
 * a split SKU stocked and a never-stocked one 404 on every route, buckets
 * deleted by a reset an instance never heard of (no 404 either), the
 * round trips a purchase costs, resets under load with a changed
 * bucket count, a buyer hopping past a locked bucket (and waiting only
 * when every bucket with stock is locked), the Idempotency-Key replay
 * whichever bucket sold, and one
 * buy per user through the reservation — under concurrent clicks and with
 * a crash between the reservation and the purchase. Three instances on a
 * private redis-server (its command counts are this test's alone); a
 * fourth with purchase.limit_per_user=1 and faults. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "svc_test.h"

static svc_server ins[3]; /* a, b, c */
static tu_redis redis;    /* private: INFO commandstats counts only ours */
static int rp;            /* its port */

/* PUT /stock/{sku}?stock=n[&buckets=k] (k 0: not sent); the status, the
 * reply in *out when not NULL. */
static long put_stock(const svc_server *s, const char *sku, long long n, int k, svc_resp *out)
{
    char path[160];
    svc_resp r;
    if (k > 0)
        snprintf(path, sizeof path, "/stock/%s?stock=%lld&buckets=%d", sku, n, k);
    else
        snprintf(path, sizeof path, "/stock/%s?stock=%lld", sku, n);
    svc_req(s, "PUT", path, NULL, NULL, &r);
    long st = r.status;
    if (out != NULL)
        *out = r;
    else
        svc_resp_free(&r);
    return st;
}

/* The audit, and each bucket's stock and sold into stocks[]/solds[] (the
 * "buckets" array; *nb its length, 0 when absent). */
static long audit(const svc_server *s, const char *sku, svc_audit *a, long long *stocks,
                  long long *solds, int *nb)
{
    char path[128];
    svc_resp r;
    snprintf(path, sizeof path, "/stock/%s", sku);
    svc_req(s, "GET", path, NULL, NULL, &r);
    memset(a, 0, sizeof *a);
    *nb = 0;
    if (r.json != NULL) {
        a->stock = (long long)svc_jnum(r.json, "stock");
        a->initial = (long long)svc_jnum(r.json, "initial");
        a->sold = (long long)svc_jnum(r.json, "sold");
        a->orders = (long long)svc_jnum(r.json, "orders");
        a->oversold = (long long)svc_jnum(r.json, "oversold");
        a->undersold = (long long)svc_jnum(r.json, "undersold");
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r.json, "buckets");
        for (int b = 0; b < cJSON_GetArraySize(arr) && b < 64; b++) {
            const cJSON *e = cJSON_GetArrayItem(arr, b);
            stocks[b] = (long long)svc_jnum(e, "stock");
            solds[b] = (long long)svc_jnum(e, "sold");
            (*nb)++;
        }
    }
    long st = r.status;
    svc_resp_free(&r);
    return st;
}

/* ---- PUT /stock's buckets ---------------------------------------------- */

static void test_params(void)
{
    svc_resp r;
    TU_CHECK(put_stock(&ins[0], "bk-p", 10, 0, NULL) == 200, "no buckets");
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{bk-p}:layout") == 0, "one bucket: no layout record");
    static const char *const bad[] = {
        "/stock/bk-p?stock=10&buckets=0", "/stock/bk-p?stock=10&buckets=65",
        "/stock/bk-p?stock=10&buckets=x", "/stock/bk-p?stock=10&buckets=4&buckets=4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        svc_req(&ins[0], "PUT", bad[i], NULL, NULL, &r);
        TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "buckets"), "%s: 400 naming buckets: %s",
                 bad[i], B(&r));
        svc_resp_free(&r);
    }
    svc_req(&ins[0], "PUT", "/stock/bk-p?buckets=3", "{\"stock\":10,\"buckets\":3}", NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "buckets: give it in the query or the body"),
             "buckets twice: %s", B(&r));
    svc_resp_free(&r);
    /* One name in one place; different names may mix the two. */
    svc_req(&ins[0], "PUT", "/stock/bk-p?stock=10", "{\"stock\":10,\"buckets\":3}", NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "stock: give it in the query or the body"),
             "stock twice: %s", B(&r));
    svc_resp_free(&r);
    static const char *const mixed[][2] = {{"/stock/bk-p?stock=10", "{\"buckets\":3}"},
                                           {"/stock/bk-p?buckets=3", "{\"stock\":10}"}};
    for (int i = 0; i < 2; i++) {
        svc_req(&ins[0], "PUT", mixed[i][0], mixed[i][1], NULL, &r);
        TU_CHECK(r.status == 200 && svc_jnum(r.json, "stock") == 10 &&
                     cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.json, "buckets")) == 3,
                 "%s with %s: 10 in 3 buckets: %s", mixed[i][0], mixed[i][1], B(&r));
        svc_resp_free(&r);
    }
    svc_req(&ins[0], "PUT", "/stock/bk-p", "{\"stock\":10,\"buckets\":65}", NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "buckets: must be an integer in 1..64"),
             "body buckets 65: %s", B(&r));
    svc_resp_free(&r);

    /* The split: even, the remainder one by one, in the reply and the audit. */
    svc_req(&ins[0], "PUT", "/stock/bk-p", "{\"stock\":10,\"buckets\":4}", NULL, &r);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r.json, "buckets");
    TU_CHECK(r.status == 200 && cJSON_GetArraySize(arr) == 4 && svc_jnum(r.json, "stock") == 10,
             "body buckets 4: %s", B(&r));
    long long want[4] = {3, 3, 2, 2};
    for (int b = 0; b < 4 && cJSON_GetArraySize(arr) == 4; b++)
        TU_CHECK(svc_jnum(cJSON_GetArrayItem(arr, b), "stock") == want[b], "bucket %d share", b);
    svc_resp_free(&r);
    char rec[256];
    TU_CHECK(tu_redis_str(rp, rec, sizeof rec, "GET miaosha:{bk-p}:layout") == 0 &&
                 strncmp(rec, "4 ", 2) == 0,
             "the layout record: %s", rec);
    TU_CHECK(tu_redis_int(rp, "GET miaosha:{bk-p~2}:stock") == 2 &&
                 tu_redis_int(rp, "GET miaosha:{bk-p}:stock") == 0 &&
                 tu_redis_int(rp, "GET miaosha:{bk-p}:initial") == 10,
             "bucket keys under their own tags; the SKU's own stock 0, its initial the total");
    svc_audit a = {0};
    long long st[64], so[64];
    int nb = 0;
    TU_CHECK(audit(&ins[1], "bk-p", &a, st, so, &nb) == 200 && nb == 4 && a.stock == 10 &&
                 a.initial == 10 && st[0] == 3 && st[3] == 2,
             "another instance's audit sums the buckets: stock %lld, %d buckets", a.stock, nb);

    /* Back to one bucket: the old buckets' keys go, the SKU sells alone. */
    TU_CHECK(put_stock(&ins[1], "bk-p", 5, 1, &r) == 200 &&
                 cJSON_GetObjectItemCaseSensitive(r.json, "buckets") == NULL,
             "buckets=1: the reply has no buckets: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{bk-p}:layout") == 0 &&
                 tu_redis_int(rp, "EXISTS miaosha:{bk-p~0}:stock") == 0 &&
                 tu_redis_int(rp, "GET miaosha:{bk-p}:stock") == 5,
             "one bucket again: layout and old buckets gone");
    svc_req(&ins[0], "POST", "/miaosha/token?sku=bk-p", NULL, NULL, &r);
    TU_CHECK(r.status == 200 && svc_jnum(r.json, "bucket") < -1e17,
             "the instance that knew 4 buckets sells from the SKU's own keys, no bucket: %s",
             B(&r));
    svc_resp_free(&r);
}

/* ---- exactness at the boundaries ------------------------------------------- */

/* A burst of n buyers at once on sku (path's query after the mode); counts
 * 200s and 409 sold_out into *ok and *out; returns the others. */
static int burst(const svc_server *s, const char *mode, const char *sku, const char *extra, int n,
                 int *ok, int *out)
{
    char **paths = calloc((size_t)n, sizeof *paths);
    svc_resp *rs = calloc((size_t)n, sizeof *rs);
    int other = 0;
    *ok = *out = 0;
    for (int i = 0; i < n; i++) {
        paths[i] = malloc(256);
        snprintf(paths[i], 256, "/miaosha/%s?sku=%s&user=b%d&wait_ms=20000%s", mode, sku, i, extra);
    }
    svc_burst(s, "POST", paths, n, rs);
    for (int i = 0; i < n; i++) {
        if (rs[i].status == 200)
            (*ok)++;
        else if (rs[i].status == 409 && svc_jerr_is(&rs[i], "sold_out"))
            (*out)++;
        else {
            other++;
            fprintf(stderr, "%s %s: unexpected %ld %s\n", mode, sku, rs[i].status, B(&rs[i]));
        }
        svc_resp_free(&rs[i]);
        free(paths[i]);
    }
    free(paths);
    free(rs);
    return other;
}

static void test_boundaries(void)
{
    static const char *const modes[] = {"mutex", "setnx", "token", "reentrant", "fenced", "lua"};
    static const struct {
        int k, stock;
    } cases[] = {{4, 0}, {4, 1}, {4, 3}, {4, 4}, {4, 5}, {7, 6}, {7, 8}, {64, 63}, {64, 65}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int k = cases[c].k, stock = cases[c].stock, n = stock + 12, ok, out;
            char sku[64];
            snprintf(sku, sizeof sku, "bk-e-%s-%d-%d", modes[m], k, stock);
            TU_REQUIRE(put_stock(&ins[0], sku, stock, k, NULL) == 200, "stock %s", sku);
            int other = burst(&ins[0], modes[m], sku, "&lease_ms=10000", n, &ok, &out);
            svc_audit a = {0};
            long long st[64], so[64];
            int nb = 0;
            audit(&ins[0], sku, &a, st, so, &nb);
            int empty = 0;
            for (int b = 0; b < nb; b++)
                empty += st[b] == 0;
            TU_CHECK(ok == stock && out == n - stock && other == 0,
                     "%s: %d of %d over %d buckets: %d sold, %d sold out, %d other", modes[m],
                     stock, n, k, ok, out, other);
            TU_CHECK(a.sold == stock && a.stock == 0 && a.orders == stock && a.oversold == 0 &&
                         a.undersold == 0 && nb == k && empty == k,
                     "%s %d/%d: the last unit sold, every bucket empty: sold %lld stock %lld "
                     "orders %lld over %lld under %lld, %d of %d empty",
                     modes[m], stock, k, a.sold, a.stock, a.orders, a.oversold, a.undersold, empty,
                     nb);
        }
    }
    /* none still oversells, bucket by bucket: the lock is what is missing. */
    int ok, out;
    TU_REQUIRE(put_stock(&ins[0], "bk-e-none", 8, 4, NULL) == 200, "stock none");
    burst(&ins[0], "none", "bk-e-none", "&work_ms=20", 40, &ok, &out);
    svc_audit a = {0};
    long long st[64], so[64];
    int nb = 0;
    audit(&ins[0], "bk-e-none", &a, st, so, &nb);
    TU_CHECK(a.oversold > 0 && ok > 8, "none oversells per bucket: %d sold of 8, oversold %lld", ok,
             a.oversold);
}

/* ---- the last unit: 1000 buyers, and every instance finds it ------------ */

typedef struct crowd {
    const svc_server *s;
    const char *sku;
    int each;
    pthread_barrier_t *go;
    atomic_int ok, out, other;
} crowd;

static void *crowd_buyer(void *arg)
{
    crowd *c = arg;
    void *h = NULL;
    pthread_barrier_wait(c->go);
    for (int i = 0; i < c->each; i++) {
        char path[160];
        svc_resp r;
        snprintf(path, sizeof path, "/miaosha/token?sku=%s&wait_ms=20000", c->sku);
        svc_req_keep(&h, c->s, "POST", path, &r);
        if (r.status == 200)
            atomic_fetch_add(&c->ok, 1);
        else if (r.status == 409 && svc_jerr_is(&r, "sold_out"))
            atomic_fetch_add(&c->out, 1);
        else
            atomic_fetch_add(&c->other, 1);
        svc_resp_free(&r);
    }
    svc_handle_free(h);
    return NULL;
}

static void test_last_unit(void)
{
    /* 1000 buyers (100 connections, 10 each) for one unit in 8 buckets:
     * seven empty buckets stand between most buyers and it. */
    enum { THREADS = 100, EACH = 10 };
    TU_REQUIRE(put_stock(&ins[0], "bk-last", 1, 8, NULL) == 200, "stock 1 in 8");
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, THREADS);
    crowd c = {.s = &ins[0], .sku = "bk-last", .each = EACH, .go = &go};
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, crowd_buyer, &c);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    svc_audit a = {0};
    long long st[64], so[64];
    int nb = 0;
    audit(&ins[0], "bk-last", &a, st, so, &nb);
    TU_CHECK(c.ok == 1 && c.out == THREADS * EACH - 1 && c.other == 0,
             "1000 buyers, one unit: %d sold, %d sold out, %d other", c.ok, c.out, c.other);
    TU_CHECK(a.sold == 1 && a.stock == 0 && a.oversold == 0 && a.undersold == 0,
             "the last unit sold once: sold %lld stock %lld", a.sold, a.stock);

    /* Round after round, one unit in 8 buckets, bought through a
     * different instance each time: every instance has seen every bucket
     * empty in the rounds before (and set its sold-out flag); the reset
     * through yet another instance must make each of them look again, and
     * the one buyer must find the unit wherever it lies. */
    for (int round = 0; round < 9; round++) {
        const svc_server *resetter = &ins[round % 3], *buyer = &ins[(round + 1) % 3];
        TU_REQUIRE(put_stock(resetter, "bk-strand", 1, 8, NULL) == 200, "round %d stock", round);
        svc_resp r;
        /* The notice reaches the other instances within milliseconds (on
         * a busy machine, more). A buyer that has not heard it yet either
         * answers from its sold-out flag ("local": the flag's documented
         * lag, no Redis asked) or reads the layout again before it gives
         * up (and answers stock_reset when it changed): both are asked
         * again, for at most 3 s. What must never come is a sold_out that
         * asked Redis. */
        int64_t until = lc_now_ms() + 3000;
        for (;;) {
            svc_req(buyer, "POST", "/miaosha/token?sku=bk-strand&wait_ms=5000", NULL, NULL, &r);
            bool unheard = r.status == 409 &&
                           (svc_jerr_is(&r, "stock_reset") ||
                            (svc_jerr_is(&r, "sold_out") && svc_jbool(r.json, "local") == 1));
            if (!unheard || lc_now_ms() > until)
                break;
            svc_resp_free(&r);
            usleep(20 * 1000);
        }
        TU_CHECK(r.status == 200, "round %d: instance %d finds the last unit: %ld %s", round,
                 (round + 1) % 3, r.status, B(&r));
        svc_resp_free(&r);
        for (int i = 0; i < 3; i++) {
            svc_req(&ins[i], "POST", "/miaosha/lua?sku=bk-strand", NULL, NULL, &r);
            TU_CHECK(r.status == 409 && svc_jerr_is(&r, "sold_out"),
                     "round %d: then instance %d answers sold out: %s", round, i, B(&r));
            svc_resp_free(&r);
        }
    }
}

/* A reset this instance never heard of (its notice lost: the layout
 * record and a bucket's stock written behind the service's back) after it
 * found every bucket empty and set its sold-out flag: the flag's check of
 * the layout record clears it, and the unit is found. */
static void test_unheard_reset(void)
{
    svc_resp r;
    TU_REQUIRE(put_stock(&ins[0], "bk-unheard", 0, 4, NULL) == 200, "stock 0 in 4");
    svc_req(&ins[1], "POST", "/miaosha/token?sku=bk-unheard", NULL, NULL, &r);
    TU_CHECK(r.status == 409 && svc_jerr_is(&r, "sold_out"), "sold out: %s", B(&r));
    svc_resp_free(&r);
    svc_req(&ins[1], "POST", "/miaosha/token?sku=bk-unheard", NULL, NULL, &r);
    TU_CHECK(r.status == 409 && svc_jbool(r.json, "local") == 1, "then from the flag: %s", B(&r));
    svc_resp_free(&r);
    /* the same buckets (no salts), a new reset id, one unit in bucket 2 */
    char ok1[8], ok2[8], ok3[8];
    tu_redis_str(rp, ok1, sizeof ok1, "SET miaosha:{bk-unheard}:layout %s",
                 "4 0000000000000000000000000000000000ab 0,0,0,0");
    tu_redis_str(rp, ok2, sizeof ok2, "SET miaosha:{bk-unheard~2}:stock 1");
    tu_redis_str(rp, ok3, sizeof ok3, "SET miaosha:{bk-unheard~2}:initial 1");
    TU_CHECK(!strcmp(ok1, "OK") && !strcmp(ok2, "OK") && !strcmp(ok3, "OK"),
             "a reset behind the service's back");
    long st = 0;
    int64_t t0 = lc_now_us();
    while (st != 200 && lc_now_us() - t0 < tu_slack(2000) * 1000) {
        svc_req(&ins[1], "POST", "/miaosha/token?sku=bk-unheard", NULL, NULL, &r);
        st = r.status;
        svc_resp_free(&r);
        tu_sleep_ms(20);
    }
    TU_CHECK(st == 200, "the unit is found without the notice, after %lld ms",
             (long long)(lc_now_us() - t0) / 1000);
}

/* A SKU of its own keys split into buckets by a reset this instance has
 * not heard of: the SKU's own stock is then 0 and reads as sold out, so a
 * sold-out answer reads the layout record again — 409 stock_reset, not
 * sold_out (a buyer told the SKU is gone while the reset had just stocked
 * it) — and the next purchase buys from the buckets. In token and lua. */
static void test_unheard_split(void)
{
    /* lua twice: in a batch, and alone (work_ms: svc_lua_job) */
    static const char *const modes[] = {"token", "lua", "lua"};
    static const char *const extra[] = {"", "", "&work_ms=1"};
    for (int m = 0; m < 3; m++) {
        char sku[32], path[128], ok[3][8];
        svc_resp r;
        snprintf(sku, sizeof sku, "bk-split-%d", m);
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s%s", modes[m], sku, extra[m]);
        TU_REQUIRE(put_stock(&ins[0], sku, 1, 0, NULL) == 200, "stock 1, no buckets");
        svc_req(&ins[1], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "%s: the unit sold, the SKU learnt unsplit: %s", modes[m], B(&r));
        svc_resp_free(&r);
        /* what a reset into 4 buckets leaves: the record, the SKU's own
         * stock 0, one unit in bucket 2, the others empty (no salts) */
        tu_redis_str(rp, ok[0], sizeof ok[0], "SET miaosha:{%s}:layout %s", sku,
                     "4 0000000000000000000000000000000000ef 0,0,0,0");
        for (int b = 0; b < 4; b++)
            tu_redis_str(rp, ok[b == 2 ? 1 : 2], sizeof ok[1],
                         "MSET miaosha:{%s~%d}:stock %d miaosha:{%s~%d}:initial %d", sku, b, b == 2,
                         sku, b, b == 2);
        TU_CHECK(!strcmp(ok[0], "OK") && !strcmp(ok[1], "OK") && !strcmp(ok[2], "OK") &&
                     tu_redis_int(rp, "GET miaosha:{%s}:stock", sku) == 0,
                 "%s: a reset behind the service's back", modes[m]);
        svc_req(&ins[1], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 409 && svc_jerr_is(&r, "stock_reset") &&
                     svc_jdetail_has(&r, "learnt its buckets"),
                 "%s: the SKU's own stock 0 after a split is no sell-out: %ld %s", modes[m],
                 r.status, B(&r));
        svc_resp_free(&r);
        svc_req(&ins[1], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200 && svc_jnum(r.json, "bucket") == 2,
                 "%s: then the unit in bucket 2 sells: %s", modes[m], B(&r));
        svc_resp_free(&r);
        svc_req(&ins[1], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 409 && svc_jerr_is(&r, "sold_out"), "%s: and then sold out: %s",
                 modes[m], B(&r));
        svc_resp_free(&r);
    }
}

/* A reset under way: on a Redis Cluster a reset writes one bucket at a
 * time and the layout record last, so a purchase can find some buckets of
 * the layout it holds already deleted while the record still names them.
 * That is no sell-out: once every bucket is tried, a gone one answers 409
 * stock_reset (the local sold-out flag untouched), and is not remembered
 * as empty, so the next buyer finds it gone too; once the bucket is back
 * and empty, sold out. Made here by hand on one Redis: the other buckets
 * emptied, bucket 2's stock key deleted, the record left as it was. */
static void test_reset_under_way(void)
{
    static const char *const modes[] = {"token", "lua"};
    for (int m = 0; m < 2; m++) {
        char sku[32], path[96];
        svc_resp r;
        snprintf(sku, sizeof sku, "bk-underway-%s", modes[m]);
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s", modes[m], sku);
        TU_REQUIRE(put_stock(&ins[0], sku, 4, 4, NULL) == 200, "%s: stock 4 in 4", sku);
        svc_req(&ins[1], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "%s: b learns the 4 buckets: %s", sku, B(&r));
        svc_resp_free(&r);
        for (int b = 0; b < 4; b++)
            if (b == 2)
                tu_redis_int(rp, "DEL miaosha:{%s~%d}:stock", sku, b);
            else
                tu_redis_int(rp, "SET miaosha:{%s~%d}:stock 0", sku, b);
        for (int i = 0; i < 2; i++) {
            svc_req(&ins[1], "POST", path, NULL, NULL, &r);
            TU_CHECK(r.status == 409 && svc_jerr_is(&r, "stock_reset") &&
                         svc_jdetail_has(&r, "under way") && svc_jbool(r.json, "local") != 1,
                     "%s: purchase %d: a bucket gone under the record is a reset under way, not "
                     "sold out: %ld %s",
                     sku, i + 1, r.status, B(&r));
            svc_resp_free(&r);
        }
        tu_redis_int(rp, "SET miaosha:{%s~2}:stock 0", sku);
        svc_req(&ins[1], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 409 && svc_jerr_is(&r, "sold_out"),
                 "%s: the bucket back and empty: sold out: %s", sku, B(&r));
        svc_resp_free(&r);
    }
}

/* ---- stocked or not: 404 unknown_sku -------------------------------------- */

/* A SKU in buckets is stocked: its audit, its orders and its purchases
 * answer as for any stocked SKU, sold out included. A SKU never stocked is
 * 404 unknown_sku on every route, whatever other SKUs are split. */
static void test_unknown_sku(void)
{
    svc_resp r;
    TU_REQUIRE(put_stock(&ins[0], "bk-zero", 0, 4, NULL) == 200, "stock 0 in 4");
    static const char *const split[] = {"GET /stock/bk-zero", "GET /orders/bk-zero",
                                        "POST /miaosha/token?sku=bk-zero",
                                        "POST /miaosha/lua?sku=bk-zero"};
    static const char *const never[] = {
        "GET /stock/bk-never", "GET /orders/bk-never", "POST /miaosha/token?sku=bk-never",
        "POST /miaosha/fenced?sku=bk-never", "POST /miaosha/lua?sku=bk-never"};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
        char method[8], path[64];
        TU_REQUIRE(sscanf(split[i], "%7s %63s", method, path) == 2, "split[%zu]", i);
        svc_req(&ins[1], method, path, NULL, NULL, &r);
        int purchase = method[0] == 'P';
        TU_CHECK(purchase ? r.status == 409 && svc_jerr_is(&r, "sold_out") : r.status == 200,
                 "%s: a split SKU is stocked: %s", split[i], B(&r));
        if (!purchase && path[1] == 's')
            TU_CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.json, "buckets")) == 4,
                     "its audit lists 4 buckets: %s", B(&r));
        svc_resp_free(&r);
    }
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        char method[8], path[64];
        TU_REQUIRE(sscanf(never[i], "%7s %63s", method, path) == 2, "never[%zu]", i);
        svc_req(&ins[1], method, path, NULL, NULL, &r);
        TU_CHECK(r.status == 404 && svc_jerr_is(&r, "unknown_sku"), "%s: 404 unknown_sku: %s",
                 never[i], B(&r));
        svc_resp_free(&r);
    }
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{bk-never}:stock") == 0 &&
                 tu_redis_int(rp, "EXISTS miaosha:{bk-never}:layout") == 0,
             "nothing written for the never-stocked SKU");
}

/* A reset that changed the bucket count and that this instance never
 * heard of: the buckets it knows are gone (no stock key). That is no
 * unknown SKU: every gone bucket counts as empty, the layout record read
 * again says the SKU was reset (409 stock_reset), and the next purchase
 * buys from the new buckets. In the lock modes and in lua. */
static void test_gone_buckets(void)
{
    static const char *const modes[] = {"token", "lua"};
    for (int m = 0; m < 2; m++) {
        char sku[32], path[96];
        svc_resp r;
        snprintf(sku, sizeof sku, "bk-gone-%s", modes[m]);
        TU_REQUIRE(put_stock(&ins[0], sku, 8, 4, NULL) == 200, "%s: stock 8 in 4", sku);
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s", modes[m], sku);
        svc_req(&ins[2], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "%s: c learns the 4 buckets: %s", sku, B(&r));
        svc_resp_free(&r);
        /* behind the service's back: the 4 buckets deleted, 2 new ones */
        for (int b = 0; b < 4; b++)
            tu_redis_int(rp, "DEL miaosha:{%s~%d}:stock", sku, b);
        char ok[3][8];
        tu_redis_str(rp, ok[0], sizeof ok[0], "SET miaosha:{%s}:layout %s", sku,
                     "2 00000000000000000000000000000000000c 7,7");
        for (int b = 0; b < 2; b++)
            tu_redis_str(rp, ok[1 + b], sizeof ok[1 + b],
                         "MSET miaosha:{%s~%d.7}:stock 1 miaosha:{%s~%d.7}:initial 1", sku, b, sku,
                         b);
        TU_CHECK(!strcmp(ok[0], "OK") && !strcmp(ok[1], "OK") && !strcmp(ok[2], "OK"),
                 "%s: a reset behind the service's back", sku);
        svc_req(&ins[2], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 409 && svc_jerr_is(&r, "stock_reset"),
                 "%s: gone buckets are no unknown SKU: 409 stock_reset: %s", sku, B(&r));
        svc_resp_free(&r);
        svc_req(&ins[2], "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "%s: then a sale from the new buckets: %s", sku, B(&r));
        svc_resp_free(&r);
    }
}

/* ---- round trips -------------------------------------------------------- */

/* The bucket, probes and hops of the last trace record of sku on s (-1
 * each when there is none). */
static void last_trace3(const svc_server *s, const char *sku, int *bucket, int *probes, int *hops)
{
    char path[128];
    svc_resp r;
    snprintf(path, sizeof path, "/trace/%s", sku);
    svc_req(s, "GET", path, NULL, NULL, &r);
    *bucket = *probes = *hops = -1;
    const char *line = r.body, *last = NULL;
    for (const char *p = line; p != NULL && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '{')
            last = p;
    if (last != NULL) {
        const char *b = strstr(last, "\"bucket\":"), *q = strstr(last, "\"probes\":"),
                   *h = strstr(last, "\"hops\":");
        if (b != NULL && q != NULL && h != NULL) {
            *bucket = atoi(b + 9);
            *probes = atoi(q + 9);
            *hops = atoi(h + 7);
        }
    }
    svc_resp_free(&r);
}

/* The hops of the purchase that made order_id, from sku's trace on s (a
 * purchase ending beside it may be the last record); -1 when not there. */
static int trace_hops_of(const svc_server *s, const char *sku, const char *order_id)
{
    char path[128], key[96];
    svc_resp r;
    snprintf(path, sizeof path, "/trace/%s", sku);
    snprintf(key, sizeof key, "\"order_id\":\"%s\"", order_id ? order_id : "?");
    svc_req(s, "GET", path, NULL, NULL, &r);
    int hops = -1;
    for (const char *p = r.body; p != NULL && *p;
         p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        const char *eol = strchr(p, '\n'), *k = strstr(p, key), *h = strstr(p, "\"hops\":");
        if (k != NULL && h != NULL && (eol == NULL || (k < eol && h < eol)))
            hops = atoi(h + 7);
    }
    svc_resp_free(&r);
    return hops;
}

static void last_trace(const svc_server *s, const char *sku, int *bucket, int *probes)
{
    int hops;
    last_trace3(s, sku, bucket, probes, &hops);
}

/* /stats' buckets.skus.<sku>.hops on s (sku NULL: buckets.hops, every
 * SKU's); -1 when it has none. */
static long long stats_hops(const svc_server *s, const char *sku)
{
    svc_resp r;
    svc_req(s, "GET", "/stats", NULL, NULL, &r);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r.json, "buckets");
    if (sku != NULL)
        e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "skus"), sku);
    long long v = e != NULL ? (long long)svc_jnum(e, "hops") : -1;
    svc_resp_free(&r);
    return v;
}

static void test_round_trips(void)
{
    svc_resp r;
    /* The layout is learnt from the reset: no read of it after. */
    TU_REQUIRE(put_stock(&ins[0], "bk-rt", 100, 4, NULL) == 200, "stock");
    TU_REQUIRE(put_stock(&ins[0], "bk-rt1", 100, 0, NULL) == 200, "stock");
    /* Every section WATCHes its stock's epoch once (svc_store.c): WATCHes
     * count sections; GETs count the stock reads, the layout's and the
     * lock scripts' own. */
    static const char *const cmds[] = {"watch", "get", "exec", "evalsha", "set"};
    long long c0[5], c1[5], c2[5];
    for (int i = 0; i < 5; i++)
        c0[i] = svc_redis_calls(rp, cmds[i]);
    svc_req(&ins[0], "POST", "/miaosha/token?sku=bk-rt1", NULL, NULL, &r);
    svc_resp_free(&r);
    for (int i = 0; i < 5; i++)
        c1[i] = svc_redis_calls(rp, cmds[i]);
    svc_req(&ins[0], "POST", "/miaosha/token?sku=bk-rt", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "bucketed sale: %s", B(&r));
    svc_resp_free(&r);
    for (int i = 0; i < 5; i++)
        c2[i] = svc_redis_calls(rp, cmds[i]);
    TU_CHECK(c1[0] - c0[0] == 1 && c1[2] - c0[2] == 1, "one bucket: one section, one EXEC");
    for (int i = 0; i < 5; i++)
        TU_CHECK(c2[i] - c1[i] == c1[i] - c0[i],
                 "a bucket with stock: the same commands as one bucket: %s %lld vs %lld", cmds[i],
                 c2[i] - c1[i], c1[i] - c0[i]);

    /* One unit in 4 buckets: each empty bucket probed is one more section
     * (its WATCH), counted in the trace and /stats. */
    int probed = 0;
    for (int round = 0; round < 6; round++) {
        TU_REQUIRE(put_stock(&ins[0], "bk-rt", 1, 4, NULL) == 200, "stock");
        long long g0 = svc_redis_calls(rp, "watch");
        svc_req(&ins[0], "POST", "/miaosha/token?sku=bk-rt&trace=1", NULL, NULL, &r);
        long long g1 = svc_redis_calls(rp, "watch");
        int bucket, probes;
        last_trace(&ins[0], "bk-rt", &bucket, &probes);
        TU_CHECK(r.status == 200 && probes >= 0 && probes <= 3 &&
                     svc_jnum(r.json, "bucket") == bucket && bucket == 0,
                 "the unit is in bucket 0 (the remainder's first): bucket %d, %d probes: %s",
                 bucket, probes, B(&r));
        TU_CHECK(g1 - g0 == 1 + probes, "%d probes: %lld sections (1 + probes)", probes, g1 - g0);
        probed += probes;
        svc_resp_free(&r);
    }
    TU_CHECK(probed > 0, "a random start sometimes probes: %d probes in 6 rounds", probed);
    svc_req(&ins[0], "GET", "/stats", NULL, NULL, &r);
    const cJSON *bk = cJSON_GetObjectItemCaseSensitive(r.json, "buckets");
    const cJSON *sku = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(bk, "skus"), "bk-rt");
    TU_CHECK(svc_jnum(sku, "probes") >= probed &&
                 cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(sku, "sold")) == 4 &&
                 svc_jnum(bk, "rechecks") >= 0,
             "/stats counts the probes and the sales per bucket: %s", B(&r));
    svc_resp_free(&r);
}

/* ---- a locked bucket: the buyer hops on -------------------------------- */

/* A buyer whose bucket's lock is held moves on to a bucket not yet tried
 * (a hop: that try takes the lock only if it is free) instead of waiting
 * for it; when every bucket with stock is locked, token's buyer (a
 * polling mode) pauses a retry interval and tries them all again — its
 * wait is a poll of every bucket — and answers lock_busy when the wait is
 * spent, never sold_out while a locked bucket holds stock; it sells from
 * the first bucket whose lock comes free. Locks held by hand (another
 * holder's token key, with a lease) make it deterministic: a random start
 * without hops would wait at a locked bucket 7 times in 8, and a wait at
 * the last bucket tried would find the one lock that comes free 1 time in
 * 8. */
static void test_hop(void)
{
    svc_resp r;
    char ok[64];
    TU_REQUIRE(put_stock(&ins[0], "bk-h", 40, 8, NULL) == 200, "stock: 5 in each of 8 buckets");
    for (int b = 0; b < 7; b++)
        TU_REQUIRE(tu_redis_str(rp, ok, sizeof ok,
                                "SET miaosha:{bk-h~%d}:lock:token someone-else PX 60000", b) == 0,
                   "bucket %d locked by another holder", b);
    /* Each hop is one acquisition with a wait of 0 that found the lock
     * held: one section's commands sent (its WATCH) and answered busy. The
     * trace, /stats and /metrics count them. */
    long long hopped = 0;
    for (int i = 0; i < 5; i++) {
        const svc_server *s = &ins[i % 3];
        long long w0 = svc_redis_calls(rp, "watch"), h0 = stats_hops(s, "bk-h");
        int64_t t0 = lc_now_ms();
        svc_req(s, "POST", "/miaosha/token?sku=bk-h&wait_ms=3000&trace=1", NULL, NULL, &r);
        int64_t took = lc_now_ms() - t0;
        TU_CHECK(r.status == 200 && svc_jnum(r.json, "bucket") == 7 && took < 2000,
                 "sale %d: from bucket 7, the one not locked, without waiting (%lld ms): %s", i,
                 (long long)took, B(&r));
        svc_resp_free(&r);
        int bucket, probes, hops;
        last_trace3(s, "bk-h", &bucket, &probes, &hops);
        long long sections = svc_redis_calls(rp, "watch") - w0, h1 = stats_hops(s, "bk-h");
        TU_CHECK(bucket == 7 && probes == 0 && hops >= 0 && hops <= 7 && sections == hops + 1 &&
                     h1 - (h0 < 0 ? 0 : h0) == hops,
                 "sale %d: the trace's %d hops are its tries before bucket 7 (%lld sections) and "
                 "/stats counts them (%lld -> %lld)",
                 i, hops, sections, h0, h1);
        hopped += hops;
    }
    /* Bucket 7 is empty now; the seven with stock are all locked: the buyer
     * probes bucket 7 once and hops past the seven, round after round,
     * until its 300 ms are spent. */
    svc_req(&ins[0], "GET", "/metrics", NULL, NULL, &r);
    const char *m = strstr(B(&r), "\nmiaosha_lock_busy_total ");
    long long busy0 = m != NULL ? atoll(m + strlen("\nmiaosha_lock_busy_total ")) : -1;
    svc_resp_free(&r);
    int64_t t0 = lc_now_ms();
    svc_req(&ins[0], "POST", "/miaosha/token?sku=bk-h&wait_ms=300&trace=1", NULL, NULL, &r);
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(r.status == 429 && svc_jerr_is(&r, "lock_busy") &&
                 svc_jnum(r.json, "wait_ms") == 300 && took >= 300 && took < 300 + tu_slack(300),
             "every bucket with stock locked: lock_busy after the wait (%lld ms), not sold_out: %s",
             (long long)took, B(&r));
    svc_resp_free(&r);
    int bucket, probes, hops;
    last_trace3(&ins[0], "bk-h", &bucket, &probes, &hops);
    TU_CHECK(bucket >= 0 && bucket < 7 && probes == 1 && hops >= 14 && hops <= 255,
             "the lock_busy purchase's trace: ended at bucket %d after %d hops (rounds of 7), "
             "%d probe",
             bucket, hops, probes);
    hopped += hops;
    svc_req(&ins[0], "GET", "/metrics", NULL, NULL, &r);
    m = strstr(B(&r), "\nmiaosha_lock_busy_total ");
    long long busy1 = m != NULL ? atoll(m + strlen("\nmiaosha_lock_busy_total ")) : -1;
    const char *mh = strstr(B(&r), "\nmiaosha_bucket_hops_total ");
    TU_CHECK(busy0 >= 0 && busy1 - busy0 == hops && mh != NULL &&
                 atoll(mh + strlen("\nmiaosha_bucket_hops_total ")) == stats_hops(&ins[0], NULL),
             "/metrics: its %d hops are lockcore's busy acquisitions (%lld -> %lld); "
             "miaosha_bucket_hops_total is /stats' buckets.hops",
             hops, busy0, busy1);
    svc_resp_free(&r);
    TU_CHECK(stats_hops(&ins[0], "bk-h") + stats_hops(&ins[1], "bk-h") +
                     stats_hops(&ins[2], "bk-h") ==
                 hopped,
             "the instances' /stats count every hop (%lld)", hopped);
    svc_audit a;
    long long st[64], so[64];
    int nb;
    TU_CHECK(audit(&ins[0], "bk-h", &a, st, so, &nb) == 200 && a.sold == 5 && a.stock == 35 &&
                 a.oversold == 0 && nb == 8 && so[7] == 5,
             "audit: 5 sold, all from bucket 7");

    /* The last unit behind a lock whose lease ends: every other bucket is
     * found empty, the locked one waited for, and sold. The reply's
     * lock_wait_ms is the whole wait (hops and pauses), not the last try's. */
    TU_REQUIRE(put_stock(&ins[1], "bk-h1", 1, 8, NULL) == 200, "stock: 1 unit, in bucket 0");
    TU_REQUIRE(tu_redis_str(rp, ok, sizeof ok,
                            "SET miaosha:{bk-h1~0}:lock:token someone-else PX 400") == 0,
               "bucket 0 locked for 400 ms");
    t0 = lc_now_ms();
    svc_req(&ins[1], "POST", "/miaosha/token?sku=bk-h1&wait_ms=5000", NULL, NULL, &r);
    took = lc_now_ms() - t0;
    TU_CHECK(r.status == 200 && svc_jnum(r.json, "bucket") == 0 && took >= 300 &&
                 svc_jnum(r.json, "lock_wait_ms") >= 300 &&
                 svc_jnum(r.json, "lock_wait_ms") <= took + 1,
             "the last unit sold from the locked bucket once its lease ended (%lld ms): %s",
             (long long)took, B(&r));
    svc_resp_free(&r);
    TU_CHECK(audit(&ins[1], "bk-h1", &a, st, so, &nb) == 200 && a.sold == 1 && a.stock == 0 &&
                 a.undersold == 0 && a.oversold == 0,
             "audit: the unit sold once");

    /* Every bucket locked, with stock; one lock (bucket 5's) comes free
     * after 300 ms, the others after a minute. The buyer polls them all
     * and sells from bucket 5 soon after its lease ends — twice, each time
     * from a random start. */
    for (int round = 0; round < 2; round++) {
        char sku[32];
        snprintf(sku, sizeof sku, "bk-hp%d", round);
        TU_REQUIRE(put_stock(&ins[2], sku, 16, 8, NULL) == 200, "stock: 2 in each of 8 buckets");
        for (int b = 0; b < 8; b++)
            TU_REQUIRE(tu_redis_str(rp, ok, sizeof ok,
                                    "SET miaosha:{%s~%d}:lock:token someone-else PX %d", sku, b,
                                    b == 5 ? 300 : 60000) == 0,
                       "bucket %d locked", b);
        char path[96];
        snprintf(path, sizeof path, "/miaosha/token?sku=%s&wait_ms=5000", sku);
        t0 = lc_now_ms();
        svc_req(&ins[2], "POST", path, NULL, NULL, &r);
        took = lc_now_ms() - t0;
        TU_CHECK(r.status == 200 && svc_jnum(r.json, "bucket") == 5 && took >= 250 && took < 2000,
                 "round %d: sold from bucket 5 once its lock came free (%lld ms): %s", round,
                 (long long)took, B(&r));
        svc_resp_free(&r);
        for (int b = 0; b < 8; b++)
            tu_redis_int(rp, "DEL miaosha:{%s~%d}:lock:token", sku, b);
    }
}

/* ---- this instance's own holds: waited for, not tried ---------------- */

/* How many of sku's two buckets' token locks exist now. */
static int locks_count(const char *sku)
{
    int held = 0;
    for (int b = 0; b < 2; b++)
        held += tu_redis_int(rp, "EXISTS miaosha:{%s~%d}:lock:token", sku, b) == 1;
    return held;
}

/* 1 once n of them exist (within 5 s), else 0. */
static int locks_held(const char *sku, int n)
{
    for (int i = 0; i < 500; i++) {
        if (locks_count(sku) >= n)
            return 1;
        tu_sleep_ms(10);
    }
    return 0;
}

/* Two buyers of one instance hold both buckets' locks (their sections
 * take work_ms); a third buyer of that instance arrives.
 *   plain: its first try never waits: with every bucket marked it still
 *          tries one (one hop); then, every bucket with stock held here, it
 *          waits for a release here instead of polling the locks. The
 *          second holder never tried the first one's bucket.
 *   lease: lease_ms shorter than the holders' sections: the third buys
 *          once the first lease has run out, not when the holders release
 *          (a hold counts only until its lease's end, so an expired lease
 *          is taken as from another instance).
 *   reset: the SKU is reset (PUT /stock through this instance) while both
 *          hold: the reset deleted their locks and cleared this instance's
 *          marks. A fourth buyer takes one bucket again (work_ms); the
 *          third goes to the other one at once, without a hop (had the old
 *          marks stayed, every bucket would look held here, and the third
 *          would wait behind the fourth half the time). */
static void test_held_here(void)
{
    const char *skus[] = {"bk-w", "bk-wl", "bk-wr"};
    const char *work[] = {"1500", "4000&lease_ms=1000", "4000"};
    for (int t = 0; t < 3; t++) {
        const char *sku = skus[t];
        TU_REQUIRE(put_stock(&ins[0], sku, 10, 2, NULL) == 200, "%s: 5 in each of 2 buckets", sku);
        svc_bg hold[2];
        for (int i = 0; i < 2; i++) {
            hold[i] = (svc_bg){.s = &ins[0], .method = "POST"};
            snprintf(hold[i].path, sizeof hold[i].path,
                     "/miaosha/token?sku=%s&wait_ms=5000&work_ms=%s", sku, work[t]);
            TU_REQUIRE(svc_bg_start(&hold[i]) == 0, "thread");
            TU_REQUIRE(locks_held(sku, i + 1), "%s: holder %d has its bucket's lock", sku, i);
        }
        svc_bg again = {.s = &ins[0], .method = "POST"};
        if (t == 2) {
            TU_REQUIRE(put_stock(&ins[0], sku, 10, 2, NULL) == 200, "%s: reset while held", sku);
            TU_REQUIRE(locks_count(sku) == 0, "%s: the reset freed both", sku);
            snprintf(again.path, sizeof again.path,
                     "/miaosha/token?sku=%s&wait_ms=5000&work_ms=4000", sku);
            TU_REQUIRE(svc_bg_start(&again) == 0, "thread");
            TU_REQUIRE(locks_held(sku, 1), "%s: the fourth buyer holds a bucket's lock", sku);
        }
        char path[160];
        snprintf(path, sizeof path, "/miaosha/token?sku=%s&wait_ms=5000&trace=1", sku);
        svc_resp r;
        int64_t t0 = lc_now_ms();
        svc_req(&ins[0], "POST", path, NULL, NULL, &r);
        int64_t took = lc_now_ms() - t0;
        int hops = trace_hops_of(&ins[0], sku, svc_jstr(r.json, "order_id"));
        for (int i = 0; i < 2; i++)
            svc_bg_join(&hold[i]);
        if (t == 2) {
            svc_bg_join(&again);
            svc_resp_free(&again.r);
        }
        int want = t == 2 ? 0 : 1;
        TU_CHECK(r.status == 200 && hops == want,
                 "%s: the third buyer sold after %d hop(s): %d hops, %lld ms: %s", sku, want, hops,
                 (long long)took, B(&r));
        TU_CHECK(stats_hops(&ins[0], sku) == want,
                 "%s: the second holder went to the bucket not held here: %lld hops in all", sku,
                 stats_hops(&ins[0], sku));
        if (t == 0)
            TU_CHECK(hold[0].r.status == 200 && hold[1].r.status == 200,
                     "%s: both holders sold: %s / %s", sku, B(&hold[0].r), B(&hold[1].r));
        else
            TU_CHECK(took < 3000,
                     "%s: the third sold %s, not at the holders' release (4000 ms): %lld ms", sku,
                     t == 1 ? "once the first lease (1000 ms) ran out" : "after the reset",
                     (long long)took);
        for (int i = 0; i < 2; i++)
            svc_resp_free(&hold[i].r);
        svc_resp_free(&r);
    }
}

/* ---- resets under load, the bucket count changing -------------------------- */

#define LOAD_BUYERS 6
#define MAX_SALES 20000

static atomic_int load_stop;
static atomic_int n_sales, n_reset, n_other;
static int64_t sale_at[MAX_SALES]; /* when each 200's request was sent (lc_now_us) */
static char sale_id[MAX_SALES][40];

static void *load_buyer(void *arg)
{
    /* One lock mode on the SKU: lua's script takes no lock, so mixed with
     * token on one stock it would race token's read and write (as on a SKU
     * without buckets). */
    int i = (int)(intptr_t)arg;
    const svc_server *s = &ins[i % 2];
    void *h = NULL;
    char path[160];
    snprintf(path, sizeof path, "/miaosha/token?sku=bk-load&wait_ms=5000&work_ms=%d", i % 3);
    while (!atomic_load(&load_stop)) {
        svc_resp r;
        int64_t t = lc_now_us();
        svc_req_keep(&h, s, "POST", path, &r);
        if (r.status == 200) {
            int k = atomic_fetch_add(&n_sales, 1);
            const char *id = svc_jstr(r.json, "order_id");
            if (k < MAX_SALES && id != NULL) {
                sale_at[k] = t;
                snprintf(sale_id[k], sizeof sale_id[k], "%s", id);
            }
        } else if (r.status == 409 && svc_jerr_is(&r, "stock_reset")) {
            atomic_fetch_add(&n_reset, 1);
        } else if (!(r.status == 409 && svc_jerr_is(&r, "sold_out"))) {
            atomic_fetch_add(&n_other, 1);
            fprintf(stderr, "load: unexpected %ld %s\n", r.status, B(&r));
        }
        svc_resp_free(&r);
    }
    svc_handle_free(h);
    return NULL;
}

static void test_reset_under_load(void)
{
    TU_REQUIRE(put_stock(&ins[0], "bk-load", 100000, 4, NULL) == 200, "stock");
    pthread_t th[LOAD_BUYERS];
    for (int i = 0; i < LOAD_BUYERS; i++)
        pthread_create(&th[i], NULL, load_buyer, (void *)(intptr_t)i);
    /* Resets through both instances, the bucket count changing each time;
     * the last one's stock outlasts the rest of the run. */
    static const int ks[] = {8, 1, 3, 64, 2, 1, 5};
    int64_t last_reset_done = 0;
    int nk = (int)(sizeof ks / sizeof ks[0]);
    for (int k = 0; k < nk; k++) {
        tu_sleep_ms(250);
        TU_CHECK(put_stock(&ins[k % 2], "bk-load", 1000 + k, ks[k], NULL) == 200, "reset %d", k);
        last_reset_done = lc_now_us();
    }
    int sales_before = atomic_load(&n_sales);
    tu_sleep_ms(400);
    atomic_store(&load_stop, 1);
    for (int i = 0; i < LOAD_BUYERS; i++)
        pthread_join(th[i], NULL);

    svc_audit a = {0};
    long long st[64], so[64];
    int nb = 0;
    audit(&ins[1], "bk-load", &a, st, so, &nb);
    printf("reset under load: %d sales, %d stock_reset, %d other; audit stock %lld initial %lld "
           "sold %lld orders %lld over %lld under %lld, %d buckets\n",
           n_sales, n_reset, n_other, a.stock, a.initial, a.sold, a.orders, a.oversold, a.undersold,
           nb);
    TU_CHECK(a.initial == 1000 + nk - 1 && nb == ks[nk - 1], "the last reset's stock and layout");
    TU_CHECK(a.oversold == 0 && a.undersold == 0 && a.sold == a.orders &&
                 a.sold == a.initial - a.stock,
             "a clean audit after resets with changing buckets under load");
    TU_CHECK(a.sold > 0 && n_sales > sales_before, "purchases went on after the last reset");
    TU_CHECK(n_other == 0, "no other errors: %d", n_other);

    /* Every sale whose request left after the last reset had answered is
     * in the new layout's orders: none sold from a bucket of an old one. */
    char path[128];
    int listed = 0, missing = 0, after = 0;
    char(*ids)[40] = calloc(2000, sizeof *ids);
    for (int off = 0; off < 2000; off += 1000) {
        svc_resp r;
        snprintf(path, sizeof path, "/orders/bk-load?offset=%d&limit=1000", off);
        svc_req(&ins[0], "GET", path, NULL, NULL, &r);
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r.json, "orders");
        for (int i = 0; i < cJSON_GetArraySize(arr) && listed < 2000; i++) {
            const cJSON *o = cJSON_GetArrayItem(arr, i);
            TU_CHECK(svc_jnum(o, "bucket") >= 0 && svc_jnum(o, "bucket") < ks[nk - 1],
                     "each listed order names its bucket");
            snprintf(ids[listed++], 40, "%s",
                     svc_jstr(o, "order_id") ? svc_jstr(o, "order_id") : "");
        }
        svc_resp_free(&r);
    }
    TU_CHECK(listed == a.orders, "GET /orders lists every bucket's orders: %d of %lld", listed,
             a.orders);
    int total = n_sales < MAX_SALES ? n_sales : MAX_SALES;
    for (int k = 0; k < total; k++) {
        if (sale_at[k] <= last_reset_done)
            continue;
        after++;
        int found = 0;
        for (int j = 0; j < listed && !found; j++)
            found = strcmp(ids[j], sale_id[k]) == 0;
        missing += !found;
    }
    free(ids);
    TU_CHECK(after > 0 && missing == 0,
             "%d sales sent after the last reset answered, %d not in its orders", after, missing);
}

/* ---- Idempotency-Key ------------------------------------------------------ */

static void test_idem(void)
{
    svc_resp r1, r2;
    for (int lua = 0; lua < 2; lua++) {
        const char *mode = lua ? "lua" : "token";
        char sku[32], path[128], hdr[64], key[32];
        snprintf(sku, sizeof sku, "bk-idem-%s", mode);
        snprintf(key, sizeof key, "bk-key-%s", mode);
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=ik", mode, sku);
        snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key);
        TU_REQUIRE(put_stock(&ins[0], sku, 10, 4, NULL) == 200, "stock");
        svc_req_hdr(&ins[0], "POST", path, hdr, &r1);
        svc_req_hdr(&ins[1], "POST", path, hdr, &r2);
        TU_CHECK(r1.status == 200 && r2.status == 200 && !strcmp(r2.replayed, "true") &&
                     !strcmp(B(&r1), B(&r2)) && svc_jnum(r1.json, "bucket") >= 0,
                 "%s: the replay answers the original sale, bucket included: %s / %s", mode, B(&r1),
                 B(&r2));
        svc_resp_free(&r2);
        /* A crash between the sale (written with its outcome in the
         * bucket) and the copy under the SKU's key: the SKU's copy is gone,
         * the claim stays. The retry finds the bucket's copy. */
        TU_CHECK(tu_redis_int(rp, "DEL miaosha:{%s}:idem:%s", sku, key) == 1, "drop the copy");
        svc_req_hdr(&ins[2], "POST", path, hdr, &r2);
        TU_CHECK(r2.status == 200 && !strcmp(r2.replayed, "true") && !strcmp(B(&r1), B(&r2)),
                 "%s: after a crash before the copy, the retry answers the sale from its "
                 "bucket: %s",
                 mode, B(&r2));
        svc_audit a = {0};
        long long st[64], so[64];
        int nb = 0;
        audit(&ins[0], sku, &a, st, so, &nb);
        TU_CHECK(a.sold == 1 && a.orders == 1, "%s: one order for three requests: %lld", mode,
                 a.sold);
        svc_resp_free(&r1);
        svc_resp_free(&r2);
    }
}

/* The locks s has taken so far (lockcore's count in its /metrics). */
static long long locks_taken(const svc_server *s)
{
    svc_resp r;
    svc_req(s, "GET", "/metrics", NULL, NULL, &r);
    const char *needle = "\nmiaosha_lock_acquired_total ";
    const char *at = strstr(B(&r), needle);
    long long n = at != NULL ? atoll(at + strlen(needle)) : 0;
    svc_resp_free(&r);
    return n;
}

/* Resets of one SKU take turns (the reset lock, a reentrant lock in
 * watchdog mode): a reset whose turn is held — here by hand, as another
 * instance's reset would hold it, with a 1.5 s lease — waits for it, then
 * runs; one whose client gives up while it waits runs nothing when its
 * turn comes (499, the stock as it was); 24 resets at once through one
 * instance all answer 200 and leave the SKU exactly one of them. */
static void test_reset_turns(void)
{
    TU_REQUIRE(put_stock(&ins[0], "bk-turn", 10, 4, NULL) == 200, "stock");
    TU_REQUIRE(tu_redis_int(rp, "HSET miaosha:{bk-turn}:lock:reset other 1") == 1 &&
                   tu_redis_int(rp, "PEXPIRE miaosha:{bk-turn}:lock:reset 1500") == 1,
               "the turn held by hand");
    int64_t t0 = lc_now_ms();
    long st = put_stock(&ins[1], "bk-turn", 20, 2, NULL);
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(st == 200 && took >= 1000, "the reset waited for the turn held: %ld after %lld ms", st,
             (long long)took);

    TU_REQUIRE(tu_redis_int(rp, "HSET miaosha:{bk-turn}:lock:reset other 1") == 1 &&
                   tu_redis_int(rp, "PEXPIRE miaosha:{bk-turn}:lock:reset 1000") == 1,
               "the turn held by hand again");
    long long taken0 = locks_taken(&ins[1]);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)ins[1].port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static const char put[] = "PUT /stock/bk-turn?stock=7&buckets=3 HTTP/1.1\r\nHost: t\r\n"
                              "Content-Length: 0\r\n\r\n";
    TU_REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
                   write(fd, put, sizeof put - 1) == (ssize_t)(sizeof put - 1),
               "a reset sent");
    tu_sleep_ms(200);
    close(fd); /* gives up while the reset waits for its turn */
    int64_t deadline = lc_now_ms() + tu_slack(5000);
    while (locks_taken(&ins[1]) == taken0 && lc_now_ms() < deadline)
        tu_sleep_ms(20); /* its turn, once the lease held by hand lapsed */
    while (tu_redis_int(rp, "EXISTS miaosha:{bk-turn}:lock:reset") != 0 && lc_now_ms() < deadline)
        tu_sleep_ms(5); /* and the turn over: whatever it did is done */
    svc_audit a;
    long long stocks[64], solds[64];
    int nb = 0;
    audit(&ins[0], "bk-turn", &a, stocks, solds, &nb);
    TU_CHECK(locks_taken(&ins[1]) == taken0 + 1 && a.initial == 20 && nb == 2,
             "the reset given up took its turn and ran nothing (initial %lld in %d buckets)",
             a.initial, nb);
    char why[1024];
    TU_CHECK(svc_reset_storm(&ins[2], "bk-turn", 24, why, sizeof why) == 0, "24 resets at once: %s",
             why);
}

/* ---- one buy per user ------------------------------------------------------ */

static void test_limit_across_reset(const svc_server *f);

static void test_limit(void)
{
    svc_server f;
    const char *extra[] = {
        "--instance-id",       "bk-limit", "--set", "purchase.limit_per_user=1", "--set",
        "faults.enabled=true", NULL};
    TU_REQUIRE(svc_start(&f, rp, extra) == 0, "limit server");
    enum { USERS = 12, CLICKS = 5 };
    static const char *const modes[] = {"none", "token", "lua"};
    for (size_t m = 0; m < 3; m++) {
        char sku[32];
        snprintf(sku, sizeof sku, "bk-dup-%s", modes[m]);
        TU_REQUIRE(put_stock(&f, sku, 100, 4, NULL) == 200, "stock");
        char *paths[USERS * CLICKS];
        svc_resp rs[USERS * CLICKS];
        for (int i = 0; i < USERS * CLICKS; i++) {
            paths[i] = malloc(160);
            snprintf(paths[i], 160, "/miaosha/%s?sku=%s&user=u%d&work_ms=10&wait_ms=20000",
                     modes[m], sku, i / CLICKS);
        }
        svc_burst(&f, "POST", paths, USERS * CLICKS, rs);
        int ok = 0, limited = 0, other = 0;
        for (int i = 0; i < USERS * CLICKS; i++) {
            if (rs[i].status == 200)
                ok++;
            else if (rs[i].status == 409 && svc_jerr_is(&rs[i], "limit_reached"))
                limited++;
            else
                other++;
            svc_resp_free(&rs[i]);
            free(paths[i]);
        }
        svc_resp r;
        char path[64];
        snprintf(path, sizeof path, "/stock/%s", sku);
        svc_req(&f, "GET", path, NULL, NULL, &r);
        TU_CHECK(ok == USERS && limited == USERS * (CLICKS - 1) && other == 0 &&
                     svc_jnum(r.json, "duplicate_buyers") == 0 && svc_jnum(r.json, "sold") == USERS,
                 "%s: five clicks each, one order each across the buckets: %d sold, %d "
                 "limit_reached, %d other; %s",
                 modes[m], ok, limited, other, B(&r));
        svc_resp_free(&r);
    }

    /* Nothing sold: the reservation goes back. */
    TU_REQUIRE(put_stock(&f, "bk-give", 1, 2, NULL) == 200, "stock");
    svc_resp r;
    svc_req(&f, "POST", "/miaosha/token?sku=bk-give&user=first", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "the one unit: %s", B(&r));
    svc_resp_free(&r);
    svc_req(&f, "POST", "/miaosha/token?sku=bk-give&user=late", NULL, NULL, &r);
    TU_CHECK(r.status == 409 && svc_jerr_is(&r, "sold_out"), "then sold out: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(rp, "HGET miaosha:{bk-give~0}:reserved late") == -1 &&
                 tu_redis_int(rp, "HGET miaosha:{bk-give~1}:reserved late") == -1,
             "the sold-out buyer's reservation was given back");
    TU_CHECK(tu_redis_int(rp, "HGET miaosha:{bk-give~0}:reserved first") +
                     tu_redis_int(rp, "HGET miaosha:{bk-give~1}:reserved first") ==
                 0, /* 1 in the home bucket, -1 (nil) in the other */
             "the buyer's reservation stays with the order");

    /* A crash between the reservation and the purchase: the reservation
     * stays without an order, and the user is refused until the reset. */
    TU_REQUIRE(put_stock(&f, "bk-crash", 10, 4, NULL) == 200, "stock");
    svc_req(&f, "POST", "/miaosha/token?sku=bk-crash&user=crasher&fault=crash_in_section", NULL,
            NULL, &r);
    svc_resp_free(&r);
    TU_CHECK(svc_wait_exit(&f, 5000) == 3, "crash_in_section exits with 3");
    tu_redis_int(rp, "EVAL %s 0",
                 "for _, k in ipairs(redis.call('KEYS', 'miaosha:{bk-crash~*}:lock:token')) do "
                 "redis.call('DEL', k) end return 0");
    TU_REQUIRE(svc_start(&f, rp, extra) == 0, "limit server again");
    svc_req(&f, "POST", "/miaosha/token?sku=bk-crash&user=crasher", NULL, NULL, &r);
    TU_CHECK(r.status == 409 && svc_jerr_is(&r, "limit_reached"),
             "the crashed buyer's reservation stands: %s", B(&r));
    svc_resp_free(&r);
    svc_req(&f, "POST", "/miaosha/lua?sku=bk-crash&user=other", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "another buyer buys: %s", B(&r));
    svc_resp_free(&r);
    svc_audit a = {0};
    long long st[64], so[64];
    int nb = 0;
    audit(&f, "bk-crash", &a, st, so, &nb);
    TU_CHECK(a.sold == 1 && a.stock == 9 && a.oversold == 0 && a.undersold == 0,
             "no order of the crashed buyer, the stock exact: sold %lld stock %lld", a.sold,
             a.stock);
    TU_REQUIRE(put_stock(&f, "bk-crash", 10, 4, NULL) == 200, "reset");
    svc_req(&f, "POST", "/miaosha/token?sku=bk-crash&user=crasher", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "after the reset the buyer buys again: %s", B(&r));
    svc_resp_free(&r);

    test_limit_across_reset(&f);
    TU_CHECK(svc_stop(&f, 6000) == 0, "limit server stops");
}

/* The id of the stepped purchase of user, from GET /steps (polled until
 * it is listed); -1 when it never is. */
static long long step_id(const svc_server *f, const char *user)
{
    int64_t deadline = lc_now_ms() + tu_slack(5000);
    while (lc_now_ms() < deadline) {
        svc_resp r;
        svc_req(f, "GET", "/steps", NULL, NULL, &r);
        long long id = -1;
        cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r.json, "steps"))
        {
            const char *u = svc_jstr(e, "user");
            if (u != NULL && strcmp(u, user) == 0)
                id = (long long)svc_jnum(e, "id");
        }
        svc_resp_free(&r);
        if (id > 0)
            return id;
        tu_sleep_ms(5);
    }
    return -1;
}

/* The user's reservations of sku over its k buckets (the buckets' own
 * tags: PUT without salts). */
static long long reservations(const char *sku, int k, const char *user)
{
    long long n = 0;
    for (int b = 0; b < k; b++) {
        char cmd[160];
        snprintf(cmd, sizeof cmd, "HGET miaosha:{%s~%d}:reserved %s", sku, b, user);
        long long v = tu_redis_int(rp, cmd);
        n += v > 0 ? v : 0;
    }
    return n;
}

/* A reset between a buyer's reservation and the sale: the reservation was
 * counted under the old stock, so the sale must not land in the new one —
 * an order the new stock's count never saw, after which the user could buy
 * the whole limit again. token and fenced stopped right after their lock
 * (stepped purchases: the reservation taken, the stock not read yet), lua
 * in its work_ms (taken after the reservation): the reset comes (the
 * bucket count changed for token and lua, kept for fenced), then each
 * answers 409 stock_reset with nothing written, and the same user buys
 * exactly once in the new stock. */
static void test_limit_across_reset(const svc_server *f)
{
    static const char *const modes[] = {"token", "fenced", "lua"};
    static const int after[] = {2, 4, 8};
    for (int m = 0; m < 3; m++) {
        char sku[32], user[32], path[200];
        snprintf(sku, sizeof sku, "bk-lr-%s", modes[m]);
        snprintf(user, sizeof user, "racer-%s", modes[m]);
        TU_REQUIRE(put_stock(f, sku, 20, 4, NULL) == 200, "stock %s", sku);
        bool lua = strcmp(modes[m], "lua") == 0;
        svc_bg bg = {.s = f, .method = "POST"};
        if (lua)
            snprintf(bg.path, sizeof bg.path, "/miaosha/lua?sku=%s&user=%s&work_ms=%lld", sku, user,
                     (long long)tu_slack(3000));
        else
            snprintf(bg.path, sizeof bg.path, "/miaosha/%s?sku=%s&user=%s&step=1", modes[m], sku,
                     user);
        TU_REQUIRE(svc_bg_start(&bg) == 0, "buyer thread");
        long long id = -1;
        svc_resp r;
        if (lua) {
            /* the reservation is there: the purchase is in its work_ms */
            int64_t deadline = lc_now_ms() + tu_slack(5000);
            while (reservations(sku, 4, user) != 1 && lc_now_ms() < deadline)
                tu_sleep_ms(5);
            TU_CHECK(reservations(sku, 4, user) == 1, "%s: reserved", modes[m]);
        } else {
            id = step_id(f, user);
            TU_REQUIRE(id > 0, "%s: the stepped purchase is listed", modes[m]);
            snprintf(path, sizeof path, "/steps/%lld/next", id);
            svc_req(f, "POST", path, NULL, NULL, &r);
            cJSON *st = cJSON_GetObjectItemCaseSensitive(r.json, "step");
            TU_CHECK(r.status == 200 && svc_jstr(st, "stage") != NULL &&
                         strcmp(svc_jstr(st, "stage"), "locked") == 0 &&
                         reservations(sku, 4, user) == 1,
                     "%s: locked, reserved: %s", modes[m], B(&r));
            svc_resp_free(&r);
        }
        TU_REQUIRE(put_stock(f, sku, 20, after[m], NULL) == 200, "%s: the reset", modes[m]);
        if (!lua) {
            snprintf(path, sizeof path, "/steps/%lld/run", id);
            svc_req(f, "POST", path, NULL, NULL, &r);
            svc_resp_free(&r);
        }
        svc_bg_join(&bg);
        TU_CHECK(bg.r.status == 409 && svc_jerr_is(&bg.r, "stock_reset") &&
                     svc_jdetail_has(&bg.r, "reservation"),
                 "%s: the purchase reserved before the reset sells nothing after it: %ld %s",
                 modes[m], bg.r.status, B(&bg.r));
        svc_resp_free(&bg.r);
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=%s", modes[m], sku, user);
        svc_req(f, "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "%s: then the user buys in the new stock: %s", modes[m], B(&r));
        svc_resp_free(&r);
        svc_req(f, "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 409 && svc_jerr_is(&r, "limit_reached"), "%s: once: %s", modes[m],
                 B(&r));
        svc_resp_free(&r);
        snprintf(path, sizeof path, "/stock/%s", sku);
        svc_req(f, "GET", path, NULL, NULL, &r);
        TU_CHECK(svc_jnum(r.json, "sold") == 1 && svc_jnum(r.json, "stock") == 19 &&
                     svc_jnum(r.json, "duplicate_buyers") == 0,
                 "%s: one order after the reset: %s", modes[m], B(&r));
        svc_resp_free(&r);
    }

    /* A layout this instance learnt before a reset it has not heard of
     * (written behind its back: the record and both buckets' epochs under
     * a new id): the reservation finds its home bucket written by another
     * reset — 409 stock_reset, nothing reserved, the record read again at
     * once — and the next purchase buys under the new layout. */
    TU_REQUIRE(put_stock(f, "bk-lr-stale", 8, 2, NULL) == 200, "stock bk-lr-stale");
    static const char *const id = "0000000000000000000000000000000000cd";
    char ok[3][8];
    tu_redis_str(rp, ok[0], sizeof ok[0], "SET miaosha:{bk-lr-stale}:layout %s",
                 "2 0000000000000000000000000000000000cd 0,0");
    tu_redis_str(rp, ok[1], sizeof ok[1], "SET miaosha:{bk-lr-stale~0}:epoch %s", id);
    tu_redis_str(rp, ok[2], sizeof ok[2], "SET miaosha:{bk-lr-stale~1}:epoch %s", id);
    TU_CHECK(!strcmp(ok[0], "OK") && !strcmp(ok[1], "OK") && !strcmp(ok[2], "OK"),
             "a reset behind the service's back");
    svc_resp r;
    svc_req(f, "POST", "/miaosha/token?sku=bk-lr-stale&user=late", NULL, NULL, &r);
    TU_CHECK(r.status == 409 && svc_jerr_is(&r, "stock_reset") &&
                 reservations("bk-lr-stale", 2, "late") == 0,
             "a stale layout: stock_reset, nothing reserved: %s", B(&r));
    svc_resp_free(&r);
    svc_req(f, "POST", "/miaosha/token?sku=bk-lr-stale&user=late", NULL, NULL, &r);
    TU_CHECK(r.status == 200 && reservations("bk-lr-stale", 2, "late") == 1,
             "then the user buys under the new layout: %s", B(&r));
    svc_resp_free(&r);
}

int main(void)
{
    TU_REQUIRE(tu_redis_start(&redis, 0, NULL) == 0, "private redis-server");
    rp = redis.port;
    static const char *const ids[] = {"bk-a", "bk-b", "bk-c"};
    for (int i = 0; i < 3; i++) {
        /* a trace ring for each of the test's SKUs; no audit gauges, whose
         * once-a-second reads of every SKU would land in test_round_trips'
         * command counts now and then */
        const char *extra[] = {"--instance-id",
                               ids[i],
                               "--set",
                               "trace.max_skus=256",
                               "--set",
                               "trace.ring_size=64",
                               "--set",
                               "metrics.sku_gauges=0",
                               NULL};
        TU_REQUIRE(svc_start(&ins[i], rp, extra) == 0, "instance %s starts", ids[i]);
    }
    test_params();
    test_boundaries();
    test_last_unit();
    test_unheard_reset();
    test_unheard_split();
    test_unknown_sku();
    test_gone_buckets();
    test_reset_under_way();
    test_round_trips();
    test_hop();
    test_held_here();
    test_reset_under_load();
    test_reset_turns();
    test_idem();
    test_limit();
    for (int i = 0; i < 3; i++) {
        TU_CHECK(svc_stop(&ins[i], 6000) == 0, "instance %d: SIGTERM exit 0", i);
        if (tu_failed)
            svc_dump_log(&ins[i]);
    }
    tu_redis_stop(&redis);
    return tu_done();
}
