/* test_service_modes.c — each mode's success path and order record, the
 * reentrancy demo (reenter=2), lock_lost, the slow holder's late release
 * (deleted_other_lock), the teaching faults, and two instances side by side
 * on one Redis. All of it twice, on a fresh server each time (the /stats
 * counts are per server): with ?pipeline=0 (lock and Redis commands in
 * separate round trips), then with the default, the pipelined section. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

static const char *modes[] = {"none", "mutex", "setnx", "token", "reentrant"};

/* This pass: "&pipeline=0", or "" for the server's default (on). */
static const char *pipe_q = "";

/* A purchase reply says which path ran. */
static void check_path(const svc_resp *r)
{
    if (r->status == 200 || r->status == 409 || r->status == 429)
        TU_CHECK(svc_jbool(r->json, "pipeline") == (pipe_q[0] ? 0 : 1), "pipeline%s: %s", pipe_q,
                 B(r));
}

static long buy(const svc_server *s, const char *mode, const char *query, svc_resp *r)
{
    char path[512];
    snprintf(path, sizeof path, "/miaosha/%s?%s%s", mode, query, pipe_q);
    svc_req(s, "GET", path, NULL, NULL, r);
    check_path(r);
    return r->status;
}

static void test_success_and_record(svc_server *s)
{
    for (int m = 0; m < 5; m++) {
        char sku[64], q[256], path[128];
        svc_resp r = {0}, o = {0};
        snprintf(sku, sizeof sku, "mode_%s", modes[m]);
        TU_CHECK(svc_set_stock(s, sku, 1, NULL) == 200, "stock %s", sku);
        int64_t before_ms = lc_now_ms();
        (void)before_ms;
        snprintf(q, sizeof q, "sku=%s&user=u_%s", sku, modes[m]);
        TU_CHECK(buy(s, modes[m], q, &r) == 200, "%s buy %ld %s", modes[m], r.status, B(&r));
        const char *oid = svc_jstr(r.json, "order_id");
        TU_CHECK(oid && strlen(oid) == 36, "%s order id", modes[m]);
        TU_CHECK(svc_jstr(r.json, "mode") && !strcmp(svc_jstr(r.json, "mode"), modes[m]), "mode");
        TU_CHECK(svc_jnum(r.json, "stock_left") == 0, "%s stock_left", modes[m]);
        TU_CHECK(svc_jbool(r.json, "lock_lost") == 0, "%s lock_lost", modes[m]);

        snprintf(path, sizeof path, "/orders/%s", sku);
        svc_req(s, "GET", path, NULL, NULL, &o);
        cJSON *rec = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o.json, "orders"), 0);
        TU_CHECK(rec != NULL, "%s record: %s", modes[m], B(&o));
        TU_CHECK(oid && svc_jstr(rec, "order_id") && !strcmp(svc_jstr(rec, "order_id"), oid),
                 "%s record order id", modes[m]);
        TU_CHECK(svc_jstr(rec, "sku") && !strcmp(svc_jstr(rec, "sku"), sku), "record sku");
        TU_CHECK(svc_jstr(rec, "user") && !strncmp(svc_jstr(rec, "user"), "u_", 2), "record user");
        TU_CHECK(svc_jstr(rec, "mode") && !strcmp(svc_jstr(rec, "mode"), modes[m]), "record mode");
        TU_CHECK(svc_jstr(rec, "instance") && !strcmp(svc_jstr(rec, "instance"), "modes-A"),
                 "record instance");
        TU_CHECK(svc_jnum(rec, "ts_ms") > 1.6e12, "record ts_ms");
        TU_CHECK(svc_jnum(rec, "received_ms") > 1.6e12 &&
                     svc_jnum(rec, "received_ms") <= svc_jnum(rec, "ts_ms") &&
                     svc_jnum(rec, "ts_ms") - svc_jnum(rec, "received_ms") < 5000,
                 "record received_ms before ts_ms");
        TU_CHECK(svc_jnum(rec, "lock_wait_ms") >= 0, "record lock_wait_ms");
        TU_CHECK(svc_jnum(rec, "stock_before") == 1, "record stock_before");
        svc_resp_free(&o);
        svc_resp_free(&r);

        TU_CHECK(buy(s, modes[m], q, &r) == 409, "%s sold out %ld", modes[m], r.status);
        svc_resp_free(&r);
        char key[128];
        snprintf(key, sizeof key, "miaosha:{%s}:lock:%s", sku, modes[m]);
        TU_CHECK(tu_redis_int(s->redis_port, "EXISTS %s", key) == 0, "%s lock released", modes[m]);
    }
}

static void test_reenter(svc_server *s)
{
    svc_resp r = {0};
    TU_CHECK(svc_set_stock(s, "reent", 100, NULL) == 200, "stock");
    TU_CHECK(buy(s, "reentrant", "sku=reent&reenter=2&wait_ms=200", &r) == 200,
             "reentrant reenter=2: %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(s->redis_port, "EXISTS miaosha:{reent}:lock:reentrant") == 0,
             "released fully");
    TU_CHECK(buy(s, "none", "sku=reent&reenter=2", &r) == 200, "none reenter %ld", r.status);
    svc_resp_free(&r);
    const char *blocking[] = {"token", "setnx", "mutex"};
    for (int i = 0; i < 3; i++) {
        int64_t t0 = lc_now_ms();
        TU_CHECK(buy(s, blocking[i], "sku=reent&reenter=2&wait_ms=200", &r) == 429,
                 "%s reenter=2 blocks on itself: %ld %s", blocking[i], r.status, B(&r));
        TU_CHECK(lc_now_ms() - t0 >= 190, "%s waited wait_ms", blocking[i]);
        TU_CHECK(svc_jstr(r.json, "error") && !strcmp(svc_jstr(r.json, "error"), "lock_busy"),
                 "lock_busy");
        svc_resp_free(&r);
        TU_CHECK(tu_redis_int(s->redis_port, "EXISTS miaosha:{reent}:lock:%s", blocking[i]) == 0,
                 "%s: the outer lock was released", blocking[i]);
        TU_CHECK(buy(s, blocking[i], "sku=reent", &r) == 200, "%s usable afterwards %ld",
                 blocking[i], r.status);
        svc_resp_free(&r);
    }
    svc_audit a;
    svc_get_audit(s, "reent", &a);
    TU_CHECK(a.sold == 5 && a.stock == 95 && a.oversold == 0 && a.undersold == 0,
             "reent audit sold %lld stock %lld", a.sold, a.stock);
}

static void test_lock_lost(svc_server *s)
{
    svc_resp r = {0};
    TU_CHECK(svc_set_stock(s, "lost", 5, NULL) == 200, "stock");
    /* token: a 50 ms lease under 300 ms of work runs out; the release finds
     * the key gone and reports it. */
    TU_CHECK(buy(s, "token", "sku=lost&lease_ms=50&work_ms=300", &r) == 200, "token %ld %s",
             r.status, B(&r));
    TU_CHECK(svc_jbool(r.json, "lock_lost") == 1, "token lock_lost: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(buy(s, "token", "sku=lost&work_ms=10", &r) == 200, "token default lease %ld",
             r.status);
    TU_CHECK(svc_jbool(r.json, "lock_lost") == 0, "not lost with the 5 s lease");
    svc_resp_free(&r);
    /* reentrant with an explicit lease: no watchdog, so it runs out too. */
    TU_CHECK(buy(s, "reentrant", "sku=lost&lease_ms=50&work_ms=300", &r) == 200,
             "reentrant lease %ld %s", r.status, B(&r));
    TU_CHECK(svc_jbool(r.json, "lock_lost") == 1, "reentrant fixed lease lost: %s", B(&r));
    svc_resp_free(&r);
    svc_req(s, "GET", "/stats", NULL, NULL, &r);
    cJSON *tok = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "modes"),
                                                  "token");
    TU_CHECK(svc_jnum(tok, "lock_lost") == 1, "stats token lock_lost 1: %s", B(&r));
    svc_resp_free(&r);
}

/* The slow holder of the seckill walkthrough (docs/locks.md, section 5). Buyer A takes the lock
 * with a 200 ms lease and works 400 ms; once A holds it, buyer B asks (5 s lease, waits up to 5 s)
 * and gets in when A's lease runs out; A releases at ~400 ms while B holds. setnx: A's plain DEL
 * deletes B's lock (A: deleted_other_lock), and B's own DEL then finds nothing (B: lock_lost).
 *   token: A's release is refused (A: lock_lost); B's lock survives and B
 *          releases it normally. Nobody deletes another's lock.
 * B starts only once A's lock key exists, so the order is not a race. */
static void test_slow_holder_release(svc_server *s)
{
    const char *pair[] = {"setnx", "token"};
    for (int m = 0; m < 2; m++) {
        char sku[32], key[64];
        snprintf(sku, sizeof sku, "slow_%s", pair[m]);
        snprintf(key, sizeof key, "miaosha:{%s}:lock:%s", sku, pair[m]);
        TU_CHECK(svc_set_stock(s, sku, 5, NULL) == 200, "stock %s", sku);
        svc_bg a = {.s = s}, b = {.s = s};
        snprintf(a.path, sizeof a.path, "/miaosha/%s?sku=%s&lease_ms=200&work_ms=400%s", pair[m],
                 sku, pipe_q);
        snprintf(b.path, sizeof b.path,
                 "/miaosha/%s?sku=%s&lease_ms=5000&work_ms=400&wait_ms=5000%s", pair[m], sku,
                 pipe_q);
        TU_REQUIRE(svc_bg_start(&a) == 0, "thread");
        int64_t limit = lc_now_ms() + 5000;
        while (tu_redis_int(s->redis_port, "EXISTS %s", key) != 1 && lc_now_ms() < limit)
            ;
        svc_req(s, "GET", b.path, NULL, NULL, &b.r);
        svc_bg_join(&a);
        check_path(&a.r);
        check_path(&b.r);
        TU_CHECK(a.r.status == 200 && b.r.status == 200, "%s: A %ld %s | B %ld %s", pair[m],
                 a.r.status, B(&a.r), b.r.status, B(&b.r));
        int a_deleted = svc_jbool(a.r.json, "deleted_other_lock"),
            a_lost = svc_jbool(a.r.json, "lock_lost");
        int b_deleted = svc_jbool(b.r.json, "deleted_other_lock"),
            b_lost = svc_jbool(b.r.json, "lock_lost");
        if (m == 0)
            TU_CHECK(a_deleted == 1 && a_lost == 1 && b_deleted == 0 && b_lost == 1,
                     "setnx: A lost its lock (lease ran out) and its late DEL deleted B's, B "
                     "found it gone: %s | %s",
                     B(&a.r), B(&b.r));
        else
            TU_CHECK(a_deleted == 0 && a_lost == 1 && b_deleted == 0 && b_lost == 0,
                     "token: A's late release refused, B's lock kept: %s | %s", B(&a.r), B(&b.r));
        svc_resp_free(&a.r);
        svc_resp_free(&b.r);
    }
    /* No Redis lock, nothing to delete: none and mutex never report it. */
    svc_resp n = {0};
    TU_CHECK(svc_set_stock(s, "slow_none", 5, NULL) == 200, "stock slow_none");
    TU_CHECK(buy(s, "none", "sku=slow_none&lease_ms=50&work_ms=100", &n) == 200 &&
                 svc_jbool(n.json, "deleted_other_lock") == 0,
             "none: deleted_other_lock false: %s", B(&n));
    svc_resp_free(&n);
    svc_resp st = {0};
    svc_req(s, "GET", "/stats", NULL, NULL, &st);
    cJSON *modes_o = cJSON_GetObjectItemCaseSensitive(st.json, "modes");
    TU_CHECK(
        svc_jnum(cJSON_GetObjectItemCaseSensitive(modes_o, "setnx"), "deleted_other_lock") == 1 &&
            svc_jnum(cJSON_GetObjectItemCaseSensitive(modes_o, "token"), "deleted_other_lock") == 0,
        "stats count deleted_other_lock: %s", B(&st));
    svc_resp_free(&st);
    svc_req(s, "GET", "/metrics", NULL, NULL, &st);
    TU_CHECK(
        strstr(
            B(&st),
            "miaosha_purchase_deleted_other_lock_total{mode=\"setnx\",sku=\"slow_setnx\"} 1\n") !=
            NULL,
        "metrics count deleted_other_lock");
    svc_resp_free(&st);
}

/* With an admin token configured, ?fault= needs it as PUT /stock does:
 * 401 without (WWW-Authenticate: Bearer), 403 with a wrong one, and
 * nothing happens; with the right one the fault runs. */
static void test_fault_auth(int redis_port)
{
    svc_server f;
    svc_resp r = {0};
    const char *extra[] = {"--set",         "faults.enabled=true", "--set", "admin_token=f4ult-t0k",
                           "--instance-id", "faults-auth",         NULL};
    const char *path = "/miaosha/token?sku=fault2&fault=crash_in_section";
    TU_REQUIRE(svc_start(&f, redis_port, extra) == 0, "faults server with a token");
    TU_CHECK(svc_set_stock(&f, "fault2", 5, "Bearer f4ult-t0k") == 200, "stock");
    svc_req(&f, "GET", path, NULL, NULL, &r);
    TU_CHECK(r.status == 401 && svc_jerr_is(&r, "unauthorized"), "no token: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    svc_req(&f, "GET", path, NULL, "Bearer wrong", &r);
    TU_CHECK(r.status == 403 && svc_jerr_is(&r, "forbidden"), "wrong token: %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_req(&f, "GET", "/healthz", NULL, NULL, &r) == 0 && r.status == 200,
             "still running after the refused faults: %ld", r.status);
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(redis_port, "EXISTS miaosha:{fault2}:lock:token") == 0,
             "the refused faults took no lock");
    svc_req(&f, "GET", path, NULL, "Bearer f4ult-t0k", &r);
    svc_resp_free(&r);
    TU_CHECK(svc_wait_exit(&f, 5000) == 3, "with the token the fault runs: exit 3");
    tu_redis_int(redis_port, "DEL miaosha:{fault2}:lock:token");
}

static void test_faults(int redis_port)
{
    svc_server f;
    svc_resp r = {0};
    const char *extra[] = {"--set", "faults.enabled=true", "--instance-id", "faults", NULL};

    TU_REQUIRE(svc_start(&f, redis_port, extra) == 0, "faults server");
    TU_CHECK(svc_set_stock(&f, "fault1", 5, NULL) == 200, "stock");
    TU_CHECK(buy(&f, "token", "sku=fault1&fault=crash_before_expire", &r) == 400,
             "crash_before_expire needs setnx: %ld", r.status);
    svc_resp_free(&r);
    buy(&f, "token", "sku=fault1&fault=crash_in_section", &r);
    svc_resp_free(&r);
    TU_CHECK(svc_wait_exit(&f, 5000) == 3, "crash_in_section exits with 3");
    TU_CHECK(svc_log_has(&f, "fault crash_in_section"), "logged before exiting");
    int64_t ttl = tu_redis_int(redis_port, "PTTL miaosha:{fault1}:lock:token");
    TU_CHECK(ttl > 0, "the dead holder's token lock keeps its lease: pttl %lld", (long long)ttl);
    tu_redis_int(redis_port, "DEL miaosha:{fault1}:lock:token");

    TU_REQUIRE(svc_start(&f, redis_port, extra) == 0, "faults server again");
    buy(&f, "setnx", "sku=fault1&fault=crash_before_expire", &r);
    svc_resp_free(&r);
    TU_CHECK(svc_wait_exit(&f, 5000) == 3, "crash_before_expire exits with 3");
    TU_CHECK(tu_redis_int(redis_port, "PTTL miaosha:{fault1}:lock:setnx") == -1,
             "setnx lock left without a TTL");
    TU_REQUIRE(svc_start(&f, redis_port, extra) == 0, "faults server third time");
    TU_CHECK(buy(&f, "setnx", "sku=fault1&wait_ms=100", &r) == 429, "stuck: %ld", r.status);
    svc_resp_free(&r);
    tu_redis_int(redis_port, "DEL miaosha:{fault1}:lock:setnx");
    TU_CHECK(svc_stop(&f, 6000) == 0, "faults server stops");
}

static void test_two_instances(svc_server *a, int redis_port)
{
    svc_server b;
    svc_resp r = {0};
    const char *extra[] = {"--instance-id", "modes-B", NULL};
    TU_REQUIRE(svc_start(&b, redis_port, extra) == 0, "second instance");
    svc_req(&b, "GET", "/healthz", NULL, NULL, &r);
    TU_CHECK(svc_jstr(r.json, "instance") && !strcmp(svc_jstr(r.json, "instance"), "modes-B"),
             "instance B: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_set_stock(a, "shared", 2, NULL) == 200, "stock");
    TU_CHECK(buy(a, "token", "sku=shared&user=x", &r) == 200, "buy on A");
    svc_resp_free(&r);
    TU_CHECK(buy(&b, "token", "sku=shared&user=y", &r) == 200, "buy on B");
    svc_resp_free(&r);
    TU_CHECK(buy(&b, "token", "sku=shared&user=z", &r) == 409, "sold out on B");
    svc_resp_free(&r);
    svc_req(&b, "GET", "/orders/shared", NULL, NULL, &r);
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(r.json, "orders");
    TU_CHECK(cJSON_GetArraySize(orders) == 2, "two orders");
    TU_CHECK(!strcmp(svc_jstr(cJSON_GetArrayItem(orders, 0), "instance"), "modes-A") &&
                 !strcmp(svc_jstr(cJSON_GetArrayItem(orders, 1), "instance"), "modes-B"),
             "orders name their instance: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(svc_stop(&b, 6000) == 0, "B stops");
}

int main(void)
{
    svc_server s;
    int port = tu_redis_port();
    const char *extra[] = {"--instance-id", "modes-A", NULL};
    const char *passes[] = {"&pipeline=0", ""};
    for (int pass = 0; pass < 2; pass++) {
        pipe_q = passes[pass];
        TU_REQUIRE(svc_start(&s, port, extra) == 0, "server starts");
        test_success_and_record(&s);
        test_reenter(&s);
        test_lock_lost(&s);
        test_slow_holder_release(&s);
        test_two_instances(&s, port);
        test_faults(port);
        test_fault_auth(port);
        TU_CHECK(svc_stop(&s, 6000) == 0, "SIGTERM exit 0");
        if (tu_failed)
            svc_dump_log(&s);
    }
    return tu_done();
}
