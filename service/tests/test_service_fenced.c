/* test_service_fenced.c — /miaosha/fenced: token's lock plus a fencing
 * token, with the stock's read and write both going through the fence
 * (svc_fence.c). Every case runs with ?pipeline=0 and ?pipeline=1.
 *
 *   race         stock 10, 50 buyers at once, work_ms 20: exactly 10 sold,
 *                and the orders' fencing tokens grow as the stock falls.
 *   interleave   "A reads, B acquires and reads, B writes, A writes": A
 *                (work_ms 1500, lease_ms 100) has read; once its lease is
 *                gone B buys; A's write is refused, 409 fenced_out, and the
 *                audit is exact. token, same steps: both write (oversold 1).
 *   slow         12 buyers at once, lease_ms 200 < work_ms 300 (the
 *                matrix's slow holder): fenced stays exact with fenced_out
 *                answers, token oversells.
 *   reset        PUT /stock keeps the fence counter and clears the mark;
 *                a purchase in flight across a reset answers stock_reset;
 *                buyers under repeated resets leave a clean audit.
 *   noscript     SCRIPT FLUSH: the next purchase still sells.
 *   noscript mid-section  SCRIPT FLUSH while a holder sleeps between its
 *                read and its write (keyspace events show the order): its
 *                write still runs before its release, and it and a buyer
 *                waiting on the lock both buy.
 *   bad input    lease_ms <= 0: 400 naming lease_ms.
 * /stats and /metrics count the fenced_out answers.
 *
 * On a private redis-server (keyspace events on): the noscript cases flush
 * the script cache, which on the suite's shared server would turn another
 * test's EVALSHA, sent at the same moment, into a NOSCRIPT reply; and a
 * fresh server each run is what lets the fixed SKU names and the fence
 * counters (which PUT /stock keeps) start from zero when the test runs
 * again. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "svc_test.h"

static tu_redis rd;
static svc_server srv;
static int port;
static long fenced_out_seen; /* 409 fenced_out answers, all cases */

/* Polls until `GET key` exists (want 1) or not (want 0), up to within_ms. */
static int wait_key(const char *key, int want, int64_t within_ms)
{
    int64_t until = lc_now_ms() + tu_slack(within_ms);
    while (lc_now_ms() < until) {
        if ((tu_redis_int(port, "EXISTS %s", key) == 1) == want)
            return 1;
        tu_sleep_ms(5);
    }
    return 0;
}

typedef struct counts {
    int ok, sold_out, fenced_out, other;
} counts;

static void count(const svc_resp *r, counts *c, const char *what)
{
    if (r->status == 200)
        c->ok++;
    else if (r->status == 409 && svc_jerr_is(r, "sold_out"))
        c->sold_out++;
    else if (r->status == 409 && svc_jerr_is(r, "fenced_out"))
        c->fenced_out++;
    else {
        c->other++;
        fprintf(stderr, "%s: unexpected %ld %s\n", what, r->status, B(r));
    }
}

/* The audit balances: sold = orders = initial - stock, nothing over or
 * under. */
static void check_exact(const char *sku, int ok, const char *what)
{
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, sku, &a) == 200, "%s: audit", what);
    TU_CHECK(a.oversold == 0 && a.undersold == 0, "%s: oversold %lld undersold %lld", what,
             a.oversold, a.undersold);
    TU_CHECK(a.sold == ok && a.orders == ok && a.initial - a.stock == ok,
             "%s: 200s %d, sold %lld, orders %lld, taken %lld", what, ok, a.sold, a.orders,
             a.initial - a.stock);
}

static void test_race(int pipeline)
{
    enum { BUYERS = 50, STOCK = 10 };
    char sku[64], what[64];
    char *paths[BUYERS];
    svc_resp out[BUYERS];
    counts c = {0};
    snprintf(sku, sizeof sku, "fenced_race_p%d", pipeline);
    snprintf(what, sizeof what, "race p%d", pipeline);
    TU_REQUIRE(svc_set_stock(&srv, sku, STOCK, NULL) == 200, "stock %s", sku);
    for (int i = 0; i < BUYERS; i++) {
        paths[i] = malloc(256);
        snprintf(paths[i], 256,
                 "/miaosha/fenced?sku=%s&user=b%d&work_ms=20&wait_ms=20000&pipeline=%d", sku, i,
                 pipeline);
    }
    svc_burst(&srv, "GET", paths, BUYERS, out);
    for (int i = 0; i < BUYERS; i++) {
        count(&out[i], &c, what);
        if (out[i].status == 200) {
            TU_CHECK(svc_jbool(out[i].json, "pipeline") == pipeline, "%s: pipeline", what);
            TU_CHECK(svc_jnum(out[i].json, "fence") >= 1, "%s: a 200 carries its fencing token",
                     what);
        }
    }
    TU_CHECK(c.ok == STOCK && c.sold_out == BUYERS - STOCK && c.fenced_out == 0 && c.other == 0,
             "%s: 200=%d sold_out=%d fenced_out=%d other=%d", what, c.ok, c.sold_out, c.fenced_out,
             c.other);
    check_exact(sku, c.ok, what);
    /* Ordered by the stock they read, the orders' tokens strictly grow: a
     * write only ever follows the reads of smaller tokens. */
    char path[128];
    svc_resp o;
    snprintf(path, sizeof path, "/orders/%s?limit=1000", sku);
    svc_req(&srv, "GET", path, NULL, NULL, &o);
    const cJSON *orders = cJSON_GetObjectItemCaseSensitive(o.json, "orders");
    double fence_at[STOCK + 1] = {0};
    int n = cJSON_GetArraySize(orders);
    for (int i = 0; i < n; i++) {
        const cJSON *rec = cJSON_GetArrayItem(orders, i);
        double before = svc_jnum(rec, "stock_before");
        if (before >= 1 && before <= STOCK)
            fence_at[(int)before] = svc_jnum(rec, "fence");
    }
    int rising = n == STOCK;
    for (int b = STOCK; b > 1; b--)
        rising = rising && fence_at[b] >= 1 && fence_at[b - 1] > fence_at[b];
    TU_CHECK(rising, "%s: tokens grow as the stock falls (%d orders)", what, n);
    svc_resp_free(&o);
    for (int i = 0; i < BUYERS; i++) {
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
}

/* A has read and sleeps past its lease; B takes the lock, reads and writes;
 * then A writes. mode fenced: A is refused. mode token: A writes too. */
static void interleave(const char *mode, int pipeline)
{
    char sku[64], what[64], lock[128];
    snprintf(sku, sizeof sku, "fenced_il_%s_p%d", mode, pipeline);
    snprintf(what, sizeof what, "interleave %s p%d", mode, pipeline);
    snprintf(lock, sizeof lock, "miaosha:{%s}:lock:%s", sku, mode);
    TU_REQUIRE(svc_set_stock(&srv, sku, 5, NULL) == 200, "stock %s", sku);
    svc_bg a = {.s = &srv};
    snprintf(a.path, sizeof a.path,
             "/miaosha/%s?sku=%s&user=A&work_ms=1500&lease_ms=100&pipeline=%d", mode, sku,
             pipeline);
    TU_REQUIRE(svc_bg_start(&a) == 0, "thread");
    /* A holds the lock (its read is in the acquire's round trip, or the
     * very next one), then its 100 ms lease runs out while it works. */
    TU_CHECK(wait_key(lock, 1, 2000), "%s: A took the lock", what);
    TU_CHECK(wait_key(lock, 0, 2000), "%s: A's lease ran out", what);
    char path[256];
    snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=B&work_ms=0&wait_ms=1000&pipeline=%d",
             mode, sku, pipeline);
    svc_resp b;
    svc_req(&srv, "GET", path, NULL, NULL, &b);
    TU_CHECK(b.status == 200, "%s: B buys while A still works: %ld %s", what, b.status, B(&b));
    TU_CHECK(svc_jnum(b.json, "stock_left") == 4, "%s: B read 5, wrote 4", what);
    svc_bg_join(&a);
    svc_audit au;
    TU_CHECK(svc_get_audit(&srv, sku, &au) == 200, "%s: audit", what);
    if (!strcmp(mode, "fenced")) {
        TU_CHECK(a.r.status == 409 && svc_jerr_is(&a.r, "fenced_out"),
                 "%s: A's stale write is refused: %ld %s", what, a.r.status, B(&a.r));
        TU_CHECK(svc_jdetail_has(&a.r, "fencing token") && svc_jstr(a.r.json, "order_id") == NULL,
                 "%s: the detail says why, no order id: %s", what, B(&a.r));
        TU_CHECK(svc_jnum(b.json, "fence") > svc_jnum(a.r.json, "fence"),
                 "%s: B's token %g > A's %g", what, svc_jnum(b.json, "fence"),
                 svc_jnum(a.r.json, "fence"));
        TU_CHECK(au.stock == 4 && au.sold == 1 && au.orders == 1 && au.oversold == 0,
                 "%s: exact: stock %lld sold %lld orders %lld oversold %lld", what, au.stock,
                 au.sold, au.orders, au.oversold);
        fenced_out_seen++;
    } else {
        TU_CHECK(a.r.status == 200, "%s: token lets A write too: %ld %s", what, a.r.status,
                 B(&a.r));
        TU_CHECK(au.sold == 2 && au.stock == 4 && au.oversold == 1,
                 "%s: oversold: stock %lld sold %lld oversold %lld", what, au.stock, au.sold,
                 au.oversold);
    }
    svc_resp_free(&a.r);
    svc_resp_free(&b);
}

/* The matrix's slow holder: every holder outlives its lease. */
static void slow(const char *mode, int pipeline)
{
    enum { BUYERS = 12, STOCK = 4 };
    char sku[64], what[64];
    char *paths[BUYERS];
    svc_resp out[BUYERS];
    counts c = {0};
    snprintf(sku, sizeof sku, "fenced_slow_%s_p%d", mode, pipeline);
    snprintf(what, sizeof what, "slow %s p%d", mode, pipeline);
    TU_REQUIRE(svc_set_stock(&srv, sku, STOCK, NULL) == 200, "stock %s", sku);
    for (int i = 0; i < BUYERS; i++) {
        paths[i] = malloc(256);
        snprintf(paths[i], 256,
                 "/miaosha/%s?sku=%s&user=s%d&work_ms=300&lease_ms=200&wait_ms=30000&pipeline=%d",
                 mode, sku, i, pipeline);
    }
    svc_burst(&srv, "GET", paths, BUYERS, out);
    for (int i = 0; i < BUYERS; i++)
        count(&out[i], &c, what);
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, sku, &a) == 200, "%s: audit", what);
    printf("%-24s 200=%d sold_out=%d fenced_out=%d other=%d | stock %lld sold %lld oversold "
           "%lld\n",
           what, c.ok, c.sold_out, c.fenced_out, c.other, a.stock, a.sold, a.oversold);
    TU_CHECK(c.other == 0, "%s: %d unexpected answers", what, c.other);
    if (!strcmp(mode, "fenced")) {
        TU_CHECK(c.fenced_out > 0, "%s: stale writes refused: %d", what, c.fenced_out);
        TU_CHECK(c.ok >= 1 && c.ok + c.sold_out + c.fenced_out == BUYERS, "%s: %d sold", what,
                 c.ok);
        check_exact(sku, c.ok, what);
        fenced_out_seen += c.fenced_out;
    } else {
        TU_CHECK(a.oversold > 0, "%s: token oversells: oversold %lld", what, a.oversold);
    }
    for (int i = 0; i < BUYERS; i++) {
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
}

static atomic_int stop, n_sold, n_reset, n_other;

static void *reset_buyer(void *arg)
{
    void *h = NULL;
    (void)arg;
    while (!atomic_load(&stop)) {
        svc_resp r;
        svc_req_keep(&h, &srv, "GET", "/miaosha/fenced?sku=fenced_rs&work_ms=5&wait_ms=5000", &r);
        if (r.status == 200)
            atomic_fetch_add(&n_sold, 1);
        else if (r.status == 409 && svc_jerr_is(&r, "stock_reset"))
            atomic_fetch_add(&n_reset, 1);
        else if (!(r.status == 409 &&
                   (svc_jerr_is(&r, "sold_out") || svc_jerr_is(&r, "fenced_out")))) {
            atomic_fetch_add(&n_other, 1);
            fprintf(stderr, "reset: unexpected reply %ld %s\n", r.status, B(&r));
        }
        svc_resp_free(&r);
    }
    svc_handle_free(h);
    return NULL;
}

static void test_reset(int pipeline)
{
    char sku[64], what[64], lock[128], fence[128], hwm[128];
    snprintf(sku, sizeof sku, "fenced_reset_p%d", pipeline);
    snprintf(what, sizeof what, "reset p%d", pipeline);
    snprintf(lock, sizeof lock, "miaosha:{%s}:lock:fenced", sku);
    snprintf(fence, sizeof fence, "miaosha:{%s}:fence", sku);
    snprintf(hwm, sizeof hwm, "miaosha:{%s}:fence_hwm", sku);
    TU_REQUIRE(svc_set_stock(&srv, sku, 10, NULL) == 200, "stock %s", sku);
    char path[256];
    snprintf(path, sizeof path, "/miaosha/fenced?sku=%s&pipeline=%d", sku, pipeline);
    svc_resp r;
    for (int i = 0; i < 3; i++) {
        svc_req(&srv, "GET", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "%s: buy %d: %ld %s", what, i, r.status, B(&r));
        svc_resp_free(&r);
    }
    int64_t counter = tu_redis_int(port, "GET %s", fence);
    TU_CHECK(counter == 3 && tu_redis_int(port, "GET %s", hwm) == 3, "%s: counter and mark 3",
             what);
    TU_REQUIRE(svc_set_stock(&srv, sku, 10, NULL) == 200, "reset");
    TU_CHECK(tu_redis_int(port, "GET %s", fence) == counter, "%s: the reset keeps the counter",
             what);
    TU_CHECK(tu_redis_int(port, "EXISTS %s", hwm) == 0, "%s: and clears the mark", what);
    svc_req(&srv, "GET", path, NULL, NULL, &r);
    TU_CHECK(r.status == 200 && svc_jnum(r.json, "fence") == counter + 1,
             "%s: the next holder draws %lld: %ld %s", what, (long long)counter + 1, r.status,
             B(&r));
    svc_resp_free(&r);

    /* A purchase in flight across a reset: the epoch voids its write. */
    svc_bg a = {.s = &srv};
    snprintf(a.path, sizeof a.path, "/miaosha/fenced?sku=%s&work_ms=800&pipeline=%d", sku,
             pipeline);
    TU_REQUIRE(svc_bg_start(&a) == 0, "thread");
    TU_CHECK(wait_key(lock, 1, 2000), "%s: the buyer holds the lock", what);
    tu_sleep_ms(50); /* its read follows the acquire by one round trip at most */
    TU_REQUIRE(svc_set_stock(&srv, sku, 7, NULL) == 200, "reset in flight");
    svc_bg_join(&a);
    TU_CHECK(a.r.status == 409 && svc_jerr_is(&a.r, "stock_reset"),
             "%s: in flight across the reset: %ld %s", what, a.r.status, B(&a.r));
    svc_resp_free(&a.r);
    check_exact(sku, 0, what);
}

/* Buyers while the stock is reset again and again (test_service_stock_reset's
 * load, fenced): a clean audit. */
static void test_reset_load(void)
{
    enum { THREADS = 6 };
    TU_REQUIRE(svc_set_stock(&srv, "fenced_rs", 100000, NULL) == 200, "stock");
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, reset_buyer, NULL);
    for (int k = 0; k < 4; k++) {
        tu_sleep_ms(250);
        TU_CHECK(svc_set_stock(&srv, "fenced_rs", 1000 + k, NULL) == 200, "reset %d", k);
    }
    tu_sleep_ms(250);
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "fenced_rs", &a) == 200, "audit");
    TU_CHECK(a.initial == 1003 && a.oversold == 0 && a.undersold == 0 && a.sold == a.orders &&
                 a.sold == a.initial - a.stock,
             "clean audit after resets: initial %lld stock %lld sold %lld orders %lld", a.initial,
             a.stock, a.sold, a.orders);
    TU_CHECK(atomic_load(&n_sold) > 0 && atomic_load(&n_other) == 0,
             "sold %d, stock_reset %d, other %d", atomic_load(&n_sold), atomic_load(&n_reset),
             atomic_load(&n_other));
}

static void test_noscript(int pipeline)
{
    char sku[64], path[256], ok[16];
    snprintf(sku, sizeof sku, "fenced_ns_p%d", pipeline);
    TU_REQUIRE(svc_set_stock(&srv, sku, 3, NULL) == 200, "stock");
    snprintf(path, sizeof path, "/miaosha/fenced?sku=%s&pipeline=%d", sku, pipeline);
    for (int i = 0; i < 2; i++) {
        TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "SCRIPT FLUSH") == 0 && !strcmp(ok, "OK"),
                   "SCRIPT FLUSH");
        svc_resp r;
        svc_req(&srv, "GET", path, NULL, NULL, &r);
        TU_CHECK(r.status == 200, "noscript p%d: buys after SCRIPT FLUSH: %ld %s", pipeline,
                 r.status, B(&r));
        svc_resp_free(&r);
    }
    check_exact(sku, 2, "noscript");
}

/* Reads keyspace events from sub until the lock key's first "del" (the
 * holder's release); returns 1 when the stock key's "set" (the holder's
 * write) came before it, 0 when after or never, -1 when no release came. */
static int write_before_release(redisContext *sub, const char *lock, const char *stock)
{
    int wrote = 0;
    for (;;) {
        redisReply *m = NULL;
        if (redisGetReply(sub, (void **)&m) != REDIS_OK || m == NULL)
            return -1;
        int released = 0;
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 4 &&
            m->element[2]->type == REDIS_REPLY_STRING &&
            m->element[3]->type == REDIS_REPLY_STRING) {
            const char *ch = strchr(m->element[2]->str, ':'); /* after __keyspace@0__ */
            const char *ev = m->element[3]->str;
            if (ch != NULL && !strcmp(ch + 1, stock) && !strcmp(ev, "set"))
                wrote = 1;
            released = ch != NULL && !strcmp(ch + 1, lock) && !strcmp(ev, "del");
        }
        freeReplyObject(m);
        if (released)
            return wrote;
    }
}

/* SCRIPT FLUSH while holder A sleeps work_ms between its read and its
 * write, buyer B waiting on the lock. A's write rides before its release
 * when pipelining; had it gone as EVALSHA it would answer NOSCRIPT, the
 * release behind it would run, and the write sent again afterwards would
 * find the mark moved by B's read: 409 fenced_out for a holder that never
 * lost its lock (B's retry lands in that gap only sometimes — the flake
 * this case pins down). Keyspace events show the order itself, every
 * time: the stock's "set" must come before the lock's "del". */
static void test_noscript_mid_section(void)
{
    for (int pipeline = 0; pipeline < 2; pipeline++) {
        char sku[64], what[64], lock[128], stock[128], mark[128], ok[16];
        snprintf(sku, sizeof sku, "fenced_nsm_p%d", pipeline);
        snprintf(what, sizeof what, "noscript mid-section p%d", pipeline);
        snprintf(lock, sizeof lock, "miaosha:{%s}:lock:fenced", sku);
        snprintf(stock, sizeof stock, "miaosha:{%s}:stock", sku);
        snprintf(mark, sizeof mark, "miaosha:{%s}:fence_hwm", sku);
        TU_REQUIRE(svc_set_stock(&srv, sku, 5, NULL) == 200, "stock %s", sku);
        int64_t ev_ms = tu_slack(10000);
        redisContext *sub = redisConnectWithTimeout(
            "127.0.0.1", port, (struct timeval){ev_ms / 1000, (ev_ms % 1000) * 1000});
        TU_REQUIRE(sub != NULL && !sub->err, "subscriber connects");
        redisSetTimeout(sub, (struct timeval){ev_ms / 1000, (ev_ms % 1000) * 1000});
        redisReply *r = redisCommand(sub, "PSUBSCRIBE __keyspace@0__:miaosha:{%s}:*", sku);
        TU_REQUIRE(r != NULL && r->type == REDIS_REPLY_ARRAY, "%s: PSUBSCRIBE", what);
        freeReplyObject(r);

        svc_bg a = {.s = &srv}, b = {.s = &srv};
        snprintf(a.path, sizeof a.path,
                 "/miaosha/fenced?sku=%s&user=A&work_ms=1500&wait_ms=5000&pipeline=%d", sku,
                 pipeline);
        snprintf(b.path, sizeof b.path,
                 "/miaosha/fenced?sku=%s&user=B&work_ms=0&wait_ms=10000&pipeline=%d", sku,
                 pipeline);
        TU_REQUIRE(svc_bg_start(&a) == 0, "thread");
        /* A has read once the mark exists (its read raised it). */
        int64_t until = lc_now_ms() + tu_slack(5000);
        while (tu_redis_int(port, "EXISTS %s", mark) != 1 && lc_now_ms() < until)
            tu_sleep_ms(5);
        TU_REQUIRE(tu_redis_int(port, "EXISTS %s", mark) == 1, "%s: A has read", what);
        TU_REQUIRE(svc_bg_start(&b) == 0, "thread");
        TU_REQUIRE(tu_redis_str(port, ok, sizeof ok, "SCRIPT FLUSH") == 0 && !strcmp(ok, "OK"),
                   "SCRIPT FLUSH");
        /* Checked after the flush: A's write, still to come, follows it. */
        TU_REQUIRE(tu_redis_int(port, "GET %s", stock) == 5,
                   "%s: A has not written before the flush", what);
        svc_bg_join(&a);
        svc_bg_join(&b);
        int order = write_before_release(sub, lock, stock);
        TU_CHECK(order == 1, "%s: A's write ran before its release (%d: 0 after, -1 no release)",
                 what, order);
        TU_CHECK(a.r.status == 200, "%s: A buys: %ld %s", what, a.r.status, B(&a.r));
        TU_CHECK(b.r.status == 200, "%s: B buys after A: %ld %s", what, b.r.status, B(&b.r));
        svc_audit au;
        TU_CHECK(svc_get_audit(&srv, sku, &au) == 200 && au.sold == 2 && au.orders == 2 &&
                     au.stock == 3 && au.oversold == 0,
                 "%s: sold %lld orders %lld stock %lld", what, au.sold, au.orders, au.stock);
        svc_resp_free(&a.r);
        svc_resp_free(&b.r);
        redisFree(sub);
    }
}

static void test_bad_lease(void)
{
    const char *bad[] = {"0", "-5"};
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "/miaosha/fenced?sku=fenced_bad&lease_ms=%s", bad[i]);
        svc_resp r;
        svc_req(&srv, "POST", path, NULL, NULL, &r);
        TU_CHECK(r.status == 400 && svc_jerr_is(&r, "bad_request") &&
                     svc_jdetail_has(&r, "lease_ms"),
                 "lease_ms=%s: %ld %s", bad[i], r.status, B(&r));
        svc_resp_free(&r);
    }
}

static void test_counted(void)
{
    svc_resp st;
    svc_req(&srv, "GET", "/stats", NULL, NULL, &st);
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(st.json, "modes"), "fenced");
    double n = svc_jnum(f, "fenced_out");
    TU_CHECK(n >= (double)fenced_out_seen && n >= 1, "/stats fenced.fenced_out %g (seen %ld)", n,
             fenced_out_seen);
    svc_resp_free(&st);
    svc_resp m;
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &m);
    const char *line = strstr(
        B(&m), "miaosha_purchase_fenced_out_total{mode=\"fenced\",sku=\"fenced_il_fenced_p0\"} 1");
    TU_CHECK(line != NULL, "/metrics counts the interleave's fenced_out");
    TU_CHECK(strstr(B(&m), "miaosha_purchase_fenced_out_total{mode=\"token\"") != NULL,
             "/metrics: the series exists for the other modes too");
    svc_resp_free(&m);
}

int main(void)
{
    const char *rargs[] = {"--notify-keyspace-events", "Kg$", NULL};
    TU_REQUIRE(tu_redis_start(&rd, 0, rargs) == 0, "private redis-server");
    port = rd.port;
    const char *extra[] = {"--instance-id", "fenced", NULL};
    TU_REQUIRE(svc_start(&srv, port, extra) == 0, "server starts");
    test_bad_lease();
    for (int p = 0; p < 2; p++) {
        test_race(p);
        interleave("fenced", p);
        interleave("token", p);
        slow("fenced", p);
        slow("token", p);
        test_reset(p);
        test_noscript(p);
    }
    test_reset_load();
    test_counted();
    test_noscript_mid_section();
    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    tu_redis_stop(&rd);
    return tu_done();
}
