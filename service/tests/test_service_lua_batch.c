/* test_service_lua_batch.c — lua purchases queued behind a busy worker go to
 * Redis together (svc_lua_batch: every script in one write, every reply in
 * one read), against a private redis-server and real HTTP, with one worker
 * (server.workers=1) so that the queue is deterministic:
 *
 *   a setnx purchase of another SKU waits for a lock this test holds, so
 *   the only worker is busy; N lua purchases are fired and queue behind it
 *   (the test waits until /stats says all are in flight); the test then
 *   deletes the lock and the worker takes the N as one batch.
 *
 * Checked: the batch is one write of N scripts (/metrics
 * miaosha_lua_batches_total +1, miaosha_lua_batched_purchases_total +N);
 * exactly the stock is sold, the rest get 409 sold_out, the audit is exact
 * and every acknowledged order is listed; with SCRIPT FLUSH before the
 * batch, every purchase still sells and the script is sent as text once
 * (one EVAL), not once per purchase; with redis.wait_replicas=1 and no
 * replica, one WAIT answers for the batch and every sale of it is 503
 * not_replicated naming its order, which is in the order list; and a
 * batch blocked in a long WAIT does not keep a lua purchase queued while
 * workers sleep: with as many batches in WAIT as the pool lets run at once
 * (server.lua_batches), one more purchase is taken by an idle worker at
 * once. server.lua_batches bounds the batches sent at once: with Redis
 * holding writes (CLIENT PAUSE … WRITE) and idle workers left, a second
 * batch goes out with lua_batches=2 and none with lua_batches=1, whose
 * queued purchases then go together in one batch. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "svc_test.h"

#define N 12

static int rp;

/* How often Redis ran cmd (INFO commandstats). */
static long long calls(const char *cmd)
{
    return svc_redis_calls(rp, cmd);
}

/* A counter's value from /metrics; -1 when missing. */
static long long metric(const svc_server *s, const char *name)
{
    svc_resp r = {0};
    long long v = -1;
    char key[96];
    snprintf(key, sizeof key, "\n%s ", name);
    if (svc_req(s, "GET", "/metrics", NULL, NULL, &r) == 0 && r.status == 200) {
        const char *p = strstr(B(&r), key);
        if (p != NULL)
            v = atoll(p + strlen(key));
    }
    svc_resp_free(&r);
    return v;
}

typedef struct {
    const svc_server *s;
    char path[160];
    char **paths;
    int n;
    svc_resp one;
    svc_resp *out;
} call;

static void *hold_worker(void *arg)
{
    call *c = arg;
    svc_req(c->s, "POST", c->path, NULL, NULL, &c->one);
    return NULL;
}

static void *fire(void *arg)
{
    call *c = arg;
    svc_burst(c->s, "POST", c->paths, c->n, c->out);
    return NULL;
}

/* The batch scenario on server s: stock of sku, N lua buyers queued behind
 * the held worker, released together. out[N] gets their replies. Returns
 * the metrics' batch and purchase counts added by the run in *batches,
 * *batched. */
static void run_batch(const svc_server *s, const char *sku, int stock, int flush, svc_resp *out,
                      long long *batches, long long *batched)
{
    char lock_key[96], hold_sku[64];
    snprintf(hold_sku, sizeof hold_sku, "%s_hold", sku);
    snprintf(lock_key, sizeof lock_key, "miaosha:{%s}:lock:setnx", hold_sku);
    TU_REQUIRE(svc_set_stock(s, sku, stock, NULL) == 200, "stock %s", sku);
    TU_REQUIRE(svc_set_stock(s, hold_sku, 5, NULL) == 200, "stock %s", hold_sku);
    long long b0 = metric(s, "miaosha_lua_batches_total");
    long long p0 = metric(s, "miaosha_lua_batched_purchases_total");
    TU_CHECK(b0 >= 0 && p0 >= 0, "/metrics has the lua batch counters");

    /* The worker waits for a lock the test holds. */
    char okbuf[16];
    TU_REQUIRE(tu_redis_str(rp, okbuf, sizeof okbuf, "SET %s someone-else PX 60000", lock_key) ==
                       0 &&
                   !strcmp(okbuf, "OK"),
               "hold the lock");
    call hold = {.s = s};
    /* lock.max_wait_ms (60 s) bounds wait_ms */
    int64_t wait_ms = tu_slack(20000) < 60000 ? tu_slack(20000) : 60000;
    snprintf(hold.path, sizeof hold.path, "/miaosha/setnx?sku=%s&wait_ms=%lld", hold_sku,
             (long long)wait_ms);
    pthread_t th_hold, th_fire;
    TU_REQUIRE(pthread_create(&th_hold, NULL, hold_worker, &hold) == 0, "thread");
    TU_REQUIRE(svc_wait_inflight(s, 1), "the setnx purchase holds the only worker");

    char *paths[N];
    for (int i = 0; i < N; i++) {
        paths[i] = malloc(160);
        TU_REQUIRE(paths[i] != NULL, "memory");
        snprintf(paths[i], 160, "/miaosha/lua?sku=%s&user=u%d", sku, i);
    }
    call burst = {.s = s, .paths = paths, .n = N, .out = out};
    TU_REQUIRE(pthread_create(&th_fire, NULL, fire, &burst) == 0, "thread");
    TU_CHECK(svc_wait_inflight(s, 1 + N), "all %d lua purchases queued behind it", N);
    if (flush) {
        TU_CHECK(tu_redis_str(rp, okbuf, sizeof okbuf, "SCRIPT FLUSH") == 0 && !strcmp(okbuf, "OK"),
                 "SCRIPT FLUSH");
    }
    TU_CHECK(tu_redis_int(rp, "DEL %s", lock_key) == 1, "release the held lock");
    pthread_join(th_fire, NULL);
    pthread_join(th_hold, NULL);
    TU_CHECK(hold.one.status == 200 || hold.one.status == 503, "the held purchase ended: %ld %s",
             hold.one.status, B(&hold.one));
    svc_resp_free(&hold.one);
    for (int i = 0; i < N; i++)
        free(paths[i]);
    *batches = metric(s, "miaosha_lua_batches_total") - b0;
    *batched = metric(s, "miaosha_lua_batched_purchases_total") - p0;
}

/* Every acknowledged (200 or 503 with an order id) order of out is listed
 * once in GET /orders/{sku}; returns how many orders are listed. */
static int check_orders(const svc_server *s, const char *sku, svc_resp *out)
{
    char path[128];
    svc_resp o = {0};
    snprintf(path, sizeof path, "/orders/%s?limit=1000", sku);
    TU_CHECK(svc_req(s, "GET", path, NULL, NULL, &o) == 0 && o.status == 200, "orders");
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(o.json, "orders");
    int norders = cJSON_GetArraySize(orders), missing = 0;
    for (int i = 0; i < N; i++) {
        const char *id = svc_jstr(out[i].json, "order_id");
        int found = 0;
        for (int j = 0; id && j < norders; j++)
            found += !strcmp(svc_jstr(cJSON_GetArrayItem(orders, j), "order_id"), id);
        missing += id != NULL && found != 1;
    }
    TU_CHECK(missing == 0, "%s: %d acknowledged orders not listed exactly once", sku, missing);
    svc_resp_free(&o);
    return norders;
}

static void test_batch(const svc_server *s, const char *sku, int flush)
{
    const int stock = 8;
    svc_resp out[N];
    memset(out, 0, sizeof out);
    long long eval0 = calls("eval"), batches, batched;
    run_batch(s, sku, stock, flush, out, &batches, &batched);
    TU_CHECK(batches == 1 && batched == N,
             "%s: one write carried the %d scripts (%lld batches, %lld "
             "scripts)",
             sku, N, batches, batched);
    int ok = 0, sold_out = 0;
    for (int i = 0; i < N; i++) {
        if (out[i].status == 200 && svc_jstr(out[i].json, "order_id") != NULL)
            ok++;
        else if (out[i].status == 409 && svc_jerr_is(&out[i], "sold_out"))
            sold_out++;
        else
            fprintf(stderr, "%s: unexpected %ld %s\n", sku, out[i].status, B(&out[i]));
    }
    TU_CHECK(ok == stock && sold_out == N - stock, "%s: %d sold (want %d), %d sold out", sku, ok,
             stock, sold_out);
    svc_audit a;
    TU_CHECK(svc_get_audit(s, sku, &a) == 200 && a.sold == stock && a.orders == stock &&
                 a.stock == 0 && a.oversold == 0 && a.undersold == 0,
             "%s: audit sold %lld orders %lld stock %lld", sku, a.sold, a.orders, a.stock);
    TU_CHECK(check_orders(s, sku, out) == stock, "%s: %d orders listed", sku, stock);
    if (flush)
        TU_CHECK(calls("eval") == eval0 + 1,
                 "after SCRIPT FLUSH the batch sent the script's text once (EVAL %lld -> %lld)",
                 eval0, calls("eval"));
    for (int i = 0; i < N; i++)
        svc_resp_free(&out[i]);
}

static void test_not_replicated(const svc_server *s)
{
    const int stock = 8;
    svc_resp out[N];
    memset(out, 0, sizeof out);
    long long wait0 = calls("wait"), batches, batched;
    run_batch(s, "lbrep", stock, 0, out, &batches, &batched);
    TU_CHECK(batches == 1 && batched == N, "lbrep: one batch of %d (%lld, %lld)", N, batches,
             batched);
    int unrep = 0, sold_out = 0;
    for (int i = 0; i < N; i++) {
        if (out[i].status == 503 && svc_jerr_is(&out[i], "not_replicated") &&
            svc_jstr(out[i].json, "order_id") != NULL)
            unrep++;
        else if (out[i].status == 409 && svc_jerr_is(&out[i], "sold_out"))
            sold_out++;
        else
            fprintf(stderr, "lbrep: unexpected %ld %s\n", out[i].status, B(&out[i]));
    }
    TU_CHECK(unrep == stock && sold_out == N - stock,
             "no replica: every sale of the batch is 503 not_replicated with its order id (%d), "
             "%d sold out",
             unrep, sold_out);
    /* the held setnx purchase WAITs once, the batch once */
    TU_CHECK(calls("wait") - wait0 == 2, "one WAIT for the whole batch (%lld WAITs)",
             calls("wait") - wait0);
    TU_CHECK(check_orders(s, "lbrep", out) == stock, "the unreplicated orders are on the master");
    for (int i = 0; i < N; i++)
        svc_resp_free(&out[i]);
}

/* Clients Redis holds blocked (here: in WAIT); -1 on error. */
static long long blocked_clients(void)
{
    char info[4096];
    if (tu_redis_str(rp, info, sizeof info, "INFO clients") != 0)
        return -1;
    const char *p = strstr(info, "blocked_clients:");
    return p ? atoll(p + strlen("blocked_clients:")) : -1;
}

/* Waits until want clients are blocked (at least want, with least set),
 * up to ms; 1 when they were. */
static int wait_blocked_n(long long want, int least, int64_t ms)
{
    int64_t end = lc_now_ms() + ms;
    while (lc_now_ms() < end) {
        long long n = blocked_clients();
        if (n == want || (least && n > want))
            return 1;
        tu_sleep_ms(5);
    }
    return 0;
}

static int wait_blocked(long long want, int64_t ms)
{
    return wait_blocked_n(want, 0, ms);
}

/* k batches, one purchase each, WAIT (no replica) for wait_timeout_ms on k
 * workers, k being the most batches the pool counts at once
 * (server.lua_batches);
 * one more lua purchase must still find one of the idle workers at once,
 * not wait for a WAIT to end (and then be refused: it waited longer than
 * the queue bound, wait_ms 0 + 1 s). */
static void test_wait_frees_queue(const svc_server *s, int k, int64_t wait_timeout_ms)
{
    TU_REQUIRE(svc_set_stock(s, "lbwait", 100, NULL) == 200, "stock lbwait");
    call c[k + 1];
    pthread_t th[k + 1];
    memset(c, 0, sizeof c);
    for (int i = 0; i <= k; i++) {
        c[i].s = s;
        snprintf(c[i].path, sizeof c[i].path, "/miaosha/lua?sku=lbwait&user=w%d", i);
    }
    int64_t t0 = lc_now_ms();
    int started = 0;
    for (int i = 0; i < k; i++) {
        TU_REQUIRE(pthread_create(&th[i], NULL, hold_worker, &c[i]) == 0, "thread");
        started++;
        int blocked = wait_blocked(i + 1, tu_slack(5000));
        TU_CHECK(blocked, "purchase %d blocks in WAIT", i);
        if (!blocked)
            break;
    }
    if (started == k) {
        TU_REQUIRE(pthread_create(&th[k], NULL, hold_worker, &c[k]) == 0, "thread");
        started++;
        /* Well before the first WAIT ends: with the batching workers
         * counted until their WAITs end, nobody would take it until then. */
        int64_t left = wait_timeout_ms - (lc_now_ms() - t0);
        TU_CHECK(left > 200 && wait_blocked(k + 1, left - 100),
                 "one more purchase is taken by an idle worker while %d batches WAIT "
                 "(%lld ms left; %lld clients blocked)",
                 k, (long long)left, blocked_clients());
    }
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        TU_CHECK(c[i].one.status == 503 && svc_jerr_is(&c[i].one, "not_replicated") &&
                     svc_jstr(c[i].one.json, "order_id") != NULL,
                 "purchase %d: 503 not_replicated with its order id, got %ld %s", i,
                 c[i].one.status, B(&c[i].one));
        svc_resp_free(&c[i].one);
    }
}

/* On server s (4 workers, server.lua_batches=k, k 1 or 2, Redis commands
 * given as long as the test pauses them): with Redis holding writes, one
 * lua purchase's batch is sent and held; M more lua purchases then queue.
 * With k=2 at least one more worker takes some of them and sends a batch
 * (the bound is counted when a woken worker takes its batch, so two wakes
 * close together may start one batch more); with k=1 nobody does (3
 * workers stay idle, the held batch counted before the M come), and once
 * Redis lets go the M go as one batch: 2 batches in all. */
static void test_batch_bound(const svc_server *s, int k)
{
    enum { M = 6 };
    char sku[32], okbuf[16];
    snprintf(sku, sizeof sku, "lbbound%d", k);
    TU_REQUIRE(svc_set_stock(s, sku, 100, NULL) == 200, "stock %s", sku);
    call first = {.s = s};
    snprintf(first.path, sizeof first.path, "/miaosha/lua?sku=%s&user=first", sku);
    /* one sale first, so that the script is loaded and the batch below
     * is one EVALSHA each */
    hold_worker(&first);
    TU_CHECK(first.one.status == 200, "%s: a sale before the pause: %ld %s", sku, first.one.status,
             B(&first.one));
    svc_resp_free(&first.one);
    long long b0 = metric(s, "miaosha_lua_batches_total");
    long long p0 = metric(s, "miaosha_lua_batched_purchases_total");

    TU_REQUIRE(tu_redis_str(rp, okbuf, sizeof okbuf, "CLIENT PAUSE %lld WRITE",
                            (long long)tu_slack(30000)) == 0 &&
                   !strcmp(okbuf, "OK"),
               "pause Redis's writes");
    pthread_t th_first, th_fire;
    TU_REQUIRE(pthread_create(&th_first, NULL, hold_worker, &first) == 0, "thread");
    TU_CHECK(wait_blocked(1, tu_slack(5000)), "%s: the first batch is sent and held", sku);
    char *paths[M];
    svc_resp out[M];
    memset(out, 0, sizeof out);
    for (int i = 0; i < M; i++) {
        paths[i] = malloc(160);
        TU_REQUIRE(paths[i] != NULL, "memory");
        snprintf(paths[i], 160, "/miaosha/lua?sku=%s&user=q%d", sku, i);
    }
    call burst = {.s = s, .paths = paths, .n = M, .out = out};
    TU_REQUIRE(pthread_create(&th_fire, NULL, fire, &burst) == 0, "thread");
    TU_CHECK(svc_wait_inflight(s, 1 + M), "%s: %d more lua purchases in flight", sku, M);
    if (k == 2) {
        TU_CHECK(wait_blocked_n(2, 1, tu_slack(5000)),
                 "lua_batches=2: a second batch is sent while the first is held (%lld blocked)",
                 blocked_clients());
    } else {
        /* a woken worker would send within a millisecond or so */
        TU_CHECK(!wait_blocked_n(2, 1, 300),
                 "lua_batches=1: no second batch while the first is held (%lld blocked)",
                 blocked_clients());
    }
    TU_CHECK(tu_redis_str(rp, okbuf, sizeof okbuf, "CLIENT UNPAUSE") == 0 && !strcmp(okbuf, "OK"),
             "unpause");
    pthread_join(th_fire, NULL);
    pthread_join(th_first, NULL);
    int ok = first.one.status == 200;
    for (int i = 0; i < M; i++) {
        ok += out[i].status == 200;
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    svc_resp_free(&first.one);
    TU_CHECK(ok == 1 + M, "%s: every purchase sold (%d of %d)", sku, ok, 1 + M);
    long long batches = metric(s, "miaosha_lua_batches_total") - b0;
    long long batched = metric(s, "miaosha_lua_batched_purchases_total") - p0;
    TU_CHECK(batched == 1 + M, "%s: %lld purchases batched, want %d", sku, batched, 1 + M);
    if (k == 1)
        TU_CHECK(batches == 2, "lua_batches=1: the held batch and one of the %d queued (%lld)", M,
                 batches);
}

int main(void)
{
    tu_redis rd;
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    rp = rd.port;

    svc_server one;
    const char *extra[] = {"--instance-id", "batch", "--set", "server.workers=1", NULL};
    TU_REQUIRE(svc_start(&one, rp, extra) == 0, "server starts");
    test_batch(&one, "lbatch", 0);
    test_batch(&one, "lbflush", 1);
    TU_CHECK(svc_stop(&one, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&one);

    svc_server rep;
    const char *extra_rep[] = {"--instance-id",
                               "batch-rep",
                               "--set",
                               "server.workers=1",
                               "--set",
                               "redis.wait_replicas=1",
                               "--set",
                               "redis.wait_timeout_ms=50",
                               NULL};
    TU_REQUIRE(svc_start(&rep, rp, extra_rep) == 0, "server with wait_replicas=1 starts");
    test_not_replicated(&rep);
    TU_CHECK(svc_stop(&rep, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&rep);

    for (int k = 1; k <= 2; k++) {
        char batches_set[48], id[32];
        snprintf(batches_set, sizeof batches_set, "server.lua_batches=%d", k);
        snprintf(id, sizeof id, "batch-bound%d", k);
        svc_server b;
        const char *extra_b[] = {"--instance-id",
                                 id,
                                 "--set",
                                 "server.workers=4",
                                 "--set",
                                 batches_set,
                                 "--set",
                                 "redis.command_timeout_ms=60000",
                                 NULL};
        TU_REQUIRE(svc_start(&b, rp, extra_b) == 0, "server with %s starts", batches_set);
        test_batch_bound(&b, k);
        TU_CHECK(svc_stop(&b, 6000) == 0, "SIGTERM exit 0");
        if (tu_failed)
            svc_dump_log(&b);
    }

    /* k batches at once (server.lua_batches); one more worker stays idle */
    const int k = 2;
    int64_t wait_timeout_ms = 2000 + tu_slack(1500);
    char workers[48], wait_to[48], cmd_to[48];
    snprintf(workers, sizeof workers, "server.workers=%d", k + 1);
    snprintf(wait_to, sizeof wait_to, "redis.wait_timeout_ms=%lld", (long long)wait_timeout_ms);
    snprintf(cmd_to, sizeof cmd_to, "redis.command_timeout_ms=%lld",
             (long long)wait_timeout_ms + 5000);
    svc_server slow;
    const char *extra_slow[] = {"--instance-id",
                                "batch-wait",
                                "--set",
                                workers,
                                "--set",
                                "server.lua_batches=2",
                                "--set",
                                "redis.wait_replicas=1",
                                "--set",
                                wait_to,
                                "--set",
                                cmd_to,
                                NULL};
    TU_REQUIRE(svc_start(&slow, rp, extra_slow) == 0, "server with a long WAIT starts");
    test_wait_frees_queue(&slow, k, wait_timeout_ms);
    TU_CHECK(svc_stop(&slow, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&slow);
    tu_redis_stop(&rd);
    return tu_done();
}
