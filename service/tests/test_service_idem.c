/* test_service_idem.c — one buy per user (purchase.limit_per_user) and the
 * Idempotency-Key header, real HTTP against the suite's redis-server:
 *   - the limit at its boundary, limit 1 and limit 2: concurrent clicks of
 *     one user (work_ms widens the section) under token and lua never buy
 *     more than the limit (409 limit_reached, the audit's duplicate_buyers
 *     0); under none the same clicks buy more (the lesson), and the audit
 *     counts the duplicate buyer; a stock reset clears the buyers; no
 *     ?user= is a 400 while a limit is set;
 *   - Idempotency-Key: a replay returns the first status and body with
 *     Idempotent-Replayed: true; the key with another user, SKU or mode is
 *     422 idempotency_key_reused (nothing bought or marked on the other
 *     SKU), with another work_ms a replay; a replay while the first runs (work_ms) is 409
 *     in_progress; the stored outcome's PTTL is purchase.idempotency_ttl_s;
 *     sold_out is stored, lock_busy is not (a retry can buy); concurrent
 *     duplicates of keyed purchases leave exactly one order per key, each
 *     with its stored outcome; bad keys (and a key sent twice) are 400
 *     naming the header with nothing written. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_test.h"

#define TTL_S 600

static svc_server lim1, lim2, open_;
static int rp;
static const char *const modes[] = {"token", "fenced", "lua"};

/* n concurrent clicks of one user; returns how many bought, checks that
 * every other reply is 409 limit_reached. */
static int clicks(const svc_server *s, const char *mode, const char *sku, const char *user, int n,
                  int work_ms, int *limited)
{
    char **paths = calloc((size_t)n, sizeof *paths);
    svc_resp *out = calloc((size_t)n, sizeof *out);
    TU_REQUIRE(paths && out, "memory");
    for (int i = 0; i < n; i++) {
        paths[i] = malloc(200);
        snprintf(paths[i], 200, "/miaosha/%s?sku=%s&user=%s&work_ms=%d&wait_ms=5000", mode, sku,
                 user, work_ms);
    }
    svc_burst(s, "POST", paths, n, out);
    int ok = 0;
    *limited = 0;
    for (int i = 0; i < n; i++) {
        if (out[i].status == 200)
            ok++;
        else if (out[i].status == 409 && svc_jerr_is(&out[i], "limit_reached"))
            (*limited)++;
        else
            TU_CHECK(0, "%s %s: unexpected %ld %s", mode, sku, out[i].status, B(&out[i]));
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    free(paths);
    free(out);
    return ok;
}

static long long dup_buyers(const svc_server *s, const char *sku)
{
    char path[100];
    svc_resp r;
    snprintf(path, sizeof path, "/stock/%s", sku);
    svc_req(s, "GET", path, NULL, NULL, &r);
    long long d = (long long)svc_jnum(r.json, "duplicate_buyers");
    svc_resp_free(&r);
    return d;
}

static void test_limit(void)
{
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        for (int limit = 1; limit <= 2; limit++) {
            const svc_server *s = limit == 1 ? &lim1 : &lim2;
            char sku[40];
            int limited;
            snprintf(sku, sizeof sku, "lim%d%s", limit, modes[m]);
            TU_REQUIRE(svc_set_stock(s, sku, 100, NULL) == 200, "stock");
            int ok = clicks(s, modes[m], sku, "alice", 8, 100, &limited);
            printf("%s limit %d: 8 concurrent clicks bought %d, %d limit_reached\n", modes[m],
                   limit, ok, limited);
            TU_CHECK(ok == limit, "%s limit %d: bought %d, want exactly the limit", modes[m], limit,
                     ok);
            TU_CHECK(limited == 8 - limit, "%s: %d limit_reached", modes[m], limited);
            svc_audit a;
            svc_get_audit(s, sku, &a);
            TU_CHECK(a.orders == limit && a.stock == 100 - limit, "%s: orders %lld stock %lld",
                     modes[m], a.orders, a.stock);
            TU_CHECK(dup_buyers(s, sku) == 0, "%s: no duplicate buyer", modes[m]);
            /* one more, alone: still the limit; another user buys */
            ok = clicks(s, modes[m], sku, "alice", 1, 0, &limited);
            TU_CHECK(ok == 0 && limited == 1, "%s: alice at the limit", modes[m]);
            ok = clicks(s, modes[m], sku, "bob", 1, 0, &limited);
            TU_CHECK(ok == 1, "%s: bob buys", modes[m]);
            /* a reset clears the buyers */
            TU_REQUIRE(svc_set_stock(s, sku, 10, NULL) == 200, "reset");
            TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{%s}:buyers", sku) == 0, "buyers cleared");
            ok = clicks(s, modes[m], sku, "alice", 1, 0, &limited);
            TU_CHECK(ok == 1, "%s: alice buys again after the reset", modes[m]);
        }
    }
    /* none: the count is read and written with nothing around them, so
     * concurrent clicks all read 0 and all buy: the duplicates the limit
     * cannot stop without a lock or a script. */
    int limited;
    TU_REQUIRE(svc_set_stock(&lim1, "limnone", 100, NULL) == 200, "stock");
    int ok = clicks(&lim1, "none", "limnone", "carol", 6, 300, &limited);
    printf("none limit 1: 6 concurrent clicks bought %d\n", ok);
    TU_CHECK(ok > 1, "none: duplicates expected, bought %d", ok);
    TU_CHECK(dup_buyers(&lim1, "limnone") == 1, "the audit counts carol as a duplicate buyer");

    svc_resp r;
    svc_req(&lim1, "POST", "/miaosha/token?sku=limnone", NULL, NULL, &r);
    TU_CHECK(r.status == 400 && svc_jdetail_has(&r, "user"), "no user with a limit: %ld %s",
             r.status, B(&r));
    svc_resp_free(&r);
}

typedef struct keyed {
    const char *path;
    const char *header;
    svc_resp out;
} keyed;

static void *keyed_req(void *arg)
{
    keyed *k = arg;
    svc_req_hdr(&open_, "POST", k->path, k->header, &k->out);
    return NULL;
}

static void test_idempotency(void)
{
    char path[200], hdr[120];
    svc_resp a, b;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        const char *mode = modes[m];
        char sku[40];
        snprintf(sku, sizeof sku, "idem%s", mode);
        TU_REQUIRE(svc_set_stock(&open_, sku, 10, NULL) == 200, "stock");
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u1", mode, sku);
        snprintf(hdr, sizeof hdr, "Idempotency-Key: order-1.%s:x_y", mode);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        svc_req_hdr(&open_, "POST", path, hdr, &b);
        TU_CHECK(a.status == 200 && a.replayed[0] == '\0', "%s first: %ld [%s]", mode, a.status,
                 a.replayed);
        TU_CHECK(b.status == 200 && strcmp(b.replayed, "true") == 0 && strcmp(B(&a), B(&b)) == 0,
                 "%s replay: same status and body, Idempotent-Replayed: true (%s | %s | %s)", mode,
                 B(&a), B(&b), b.replayed);
        svc_resp_free(&a);
        svc_resp_free(&b);
        svc_audit au;
        svc_get_audit(&open_, sku, &au);
        TU_CHECK(au.orders == 1 && au.stock == 9, "%s: one order for two requests (%lld)", mode,
                 au.orders);
        int64_t pttl = tu_redis_int(rp, "PTTL miaosha:{%s}:idem:order-1.%s:x_y", sku, mode);
        TU_CHECK(pttl > (TTL_S - 60) * 1000LL && pttl <= TTL_S * 1000LL,
                 "%s: the outcome's PTTL %lld ms is purchase.idempotency_ttl_s", mode,
                 (long long)pttl);
        int64_t claim_pttl = tu_redis_int(rp, "PTTL miaosha:idem:order-1.%s:x_y", mode);
        TU_CHECK(claim_pttl > pttl, "%s: the key's claim (PTTL %lld) outlives its outcome (%lld)",
                 mode, (long long)claim_pttl, (long long)pttl);

        /* the key with another user, another SKU, another mode: 422, and
         * nothing is bought or marked on the other SKU */
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u2", mode, sku);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        TU_CHECK(a.status == 422 && svc_jerr_is(&a, "idempotency_key_reused"), "%s 422: %ld %s",
                 mode, a.status, B(&a));
        svc_resp_free(&a);
        char other[48];
        snprintf(other, sizeof other, "%s-other", sku);
        TU_REQUIRE(svc_set_stock(&open_, other, 10, NULL) == 200, "stock");
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u1", mode, other);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        TU_CHECK(a.status == 422 && svc_jerr_is(&a, "idempotency_key_reused") &&
                     svc_jdetail_has(&a, sku),
                 "%s, the key on another sku: 422 naming the first: %ld %s", mode, a.status, B(&a));
        svc_resp_free(&a);
        svc_get_audit(&open_, other, &au);
        TU_CHECK(au.orders == 0 && au.stock == 10 &&
                     tu_redis_int(rp, "EXISTS miaosha:{%s}:idem:order-1.%s:x_y", other, mode) == 0,
                 "%s: nothing bought or marked on the other sku", mode);
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u1",
                 strcmp(mode, "token") ? "token" : "lua", sku);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        TU_CHECK(a.status == 422 && svc_jerr_is(&a, "idempotency_key_reused"),
                 "%s, the key with another mode: %ld %s", mode, a.status, B(&a));
        svc_resp_free(&a);
        /* how it is bought (work_ms here) is not what is bought: a replay */
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u1&work_ms=5", mode, sku);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        TU_CHECK(a.status == 200 && strcmp(a.replayed, "true") == 0,
                 "%s, the key with another work_ms: replayed (%ld %s)", mode, a.status, B(&a));
        svc_resp_free(&a);

        /* a replay while the first still works */
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u3&work_ms=1500", mode, sku);
        snprintf(hdr, sizeof hdr, "Idempotency-Key: slow-%s", mode);
        keyed first = {path, hdr, {0}};
        pthread_t th;
        pthread_create(&th, NULL, keyed_req, &first);
        char mk[120];
        int64_t dl = lc_now_ms() + tu_slack(3000);
        do { /* poll until the first request's marker is there */
            tu_redis_str(rp, mk, sizeof mk, "GET miaosha:{%s}:idem:slow-%s", sku, mode);
        } while (mk[0] != 'P' && lc_now_ms() < dl);
        TU_CHECK(mk[0] == 'P', "%s: in-progress marker set (%s)", mode, mk);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        pthread_join(th, NULL);
        TU_CHECK(a.status == 409 && svc_jerr_is(&a, "in_progress"), "%s in_progress: %ld %s", mode,
                 a.status, B(&a));
        TU_CHECK(first.out.status == 200, "%s: the first one bought: %ld %s", mode,
                 first.out.status, B(&first.out));
        svc_resp_free(&a);
        svc_req_hdr(&open_, "POST", path, hdr, &b);
        TU_CHECK(b.status == 200 && strcmp(B(&b), B(&first.out)) == 0 && b.replayed[0] == 't',
                 "%s: after it, the replay: %s", mode, B(&b));
        svc_resp_free(&b);
        svc_resp_free(&first.out);

        /* sold_out is stored: a replay after a restock still says it */
        TU_REQUIRE(svc_set_stock(&open_, sku, 0, NULL) == 200, "stock 0");
        snprintf(path, sizeof path, "/miaosha/%s?sku=%s&user=u4", mode, sku);
        snprintf(hdr, sizeof hdr, "Idempotency-Key: so-%s", mode);
        svc_req_hdr(&open_, "POST", path, hdr, &a);
        TU_REQUIRE(svc_set_stock(&open_, sku, 5, NULL) == 200, "stock 5");
        svc_req_hdr(&open_, "POST", path, hdr, &b);
        TU_CHECK(a.status == 409 && svc_jerr_is(&a, "sold_out") && b.status == 409 &&
                     strcmp(B(&a), B(&b)) == 0 && b.replayed[0] == 't',
                 "%s: sold_out stored and replayed: %s | %s", mode, B(&a), B(&b));
        svc_resp_free(&a);
        svc_resp_free(&b);
    }

    /* lock_busy is not stored: the retry with the key buys */
    TU_REQUIRE(svc_set_stock(&open_, "idembusy", 5, NULL) == 200, "stock");
    char ok_[16];
    TU_CHECK(tu_redis_str(rp, ok_, sizeof ok_, "SET miaosha:{idembusy}:lock:token someone") == 0,
             "hold the lock");
    svc_req_hdr(&open_, "POST", "/miaosha/token?sku=idembusy&user=u5&wait_ms=0",
                "Idempotency-Key: busy-1", &a);
    TU_CHECK(a.status == 429, "lock held: %ld %s", a.status, B(&a));
    TU_CHECK(tu_redis_int(rp, "EXISTS miaosha:{idembusy}:idem:busy-1") == 0,
             "a 429 leaves no record of the key");
    tu_redis_int(rp, "DEL miaosha:{idembusy}:lock:token");
    svc_req_hdr(&open_, "POST", "/miaosha/token?sku=idembusy&user=u5&wait_ms=0",
                "Idempotency-Key: busy-1", &b);
    TU_CHECK(b.status == 200 && b.replayed[0] == '\0', "the retry buys: %ld %s", b.status, B(&b));
    svc_resp_free(&a);
    svc_resp_free(&b);

    /* bad keys: 400 naming the header, nothing written */
    /* "Name;" is how curl sends a header with an empty value */
    const char *bad[] = {"Idempotency-Key;", "Idempotency-Key: a b", "Idempotency-Key: a/b",
                         "Idempotency-Key: "
                         "12345678901234567890123456789012345678901234567890123456789012345",
                         /* two keys: two claims on one request */
                         "Idempotency-Key: two-1\nIdempotency-Key: two-2",
                         "Idempotency-Key: two-3\nidempotency-key: two-4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        svc_req_hdr(&open_, "POST", "/miaosha/lua?sku=idembusy&user=u6", bad[i], &a);
        TU_CHECK(a.status == 400 && svc_jdetail_has(&a, "Idempotency-Key"), "'%s': %ld %s", bad[i],
                 a.status, B(&a));
        svc_resp_free(&a);
    }
    svc_audit au;
    svc_get_audit(&open_, "idembusy", &au);
    TU_CHECK(au.orders == 1, "bad keys bought nothing: %lld orders", au.orders);

    /* Concurrent duplicates: 8 keys, each sent 3 times at once, work_ms
     * widening every window: exactly one order per key, each order with
     * its key's stored outcome. */
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        enum { KEYS = 8, COPIES = 3, N = KEYS * COPIES };
        char sku[40], paths[N][160], hdrs[N][80];
        keyed k[N];
        pthread_t th[N];
        snprintf(sku, sizeof sku, "idemrace%s", modes[m]);
        TU_REQUIRE(svc_set_stock(&open_, sku, 100, NULL) == 200, "stock");
        for (int i = 0; i < N; i++) {
            snprintf(paths[i], sizeof paths[i],
                     "/miaosha/%s?sku=%s&user=r%d&work_ms=200&wait_ms=10000", modes[m], sku,
                     i % KEYS);
            snprintf(hdrs[i], sizeof hdrs[i], "Idempotency-Key: race-%s-%d", modes[m], i % KEYS);
            k[i] = (keyed){paths[i], hdrs[i], {0}};
            pthread_create(&th[i], NULL, keyed_req, &k[i]);
        }
        int ok = 0, busy = 0;
        for (int i = 0; i < N; i++) {
            pthread_join(th[i], NULL);
            if (k[i].out.status == 200)
                ok++;
            else if (k[i].out.status == 409 && svc_jerr_is(&k[i].out, "in_progress"))
                busy++;
            else
                TU_CHECK(0, "unexpected %ld %s", k[i].out.status, B(&k[i].out));
        }
        svc_get_audit(&open_, sku, &au);
        printf("%s: %d keys x %d copies: 200=%d in_progress=%d, orders %lld\n", modes[m], KEYS,
               COPIES, ok, busy, au.orders);
        TU_CHECK(au.orders == KEYS && au.sold == KEYS, "%s: one order per key: %lld", modes[m],
                 au.orders);
        for (int i = 0; i < KEYS; i++) {
            char v[1024];
            tu_redis_str(rp, v, sizeof v, "GET miaosha:{%s}:idem:race-%s-%d", sku, modes[m], i);
            TU_CHECK(strncmp(v, "D|", 2) == 0 && strstr(v, "|200|") != NULL,
                     "%s key %d: its stored outcome is the sale: %.80s", modes[m], i, v);
        }
        for (int i = 0; i < N; i++)
            svc_resp_free(&k[i].out);
    }
}

int main(void)
{
    rp = tu_redis_port();
    const char *e1[] = {"--set", "purchase.limit_per_user=1", NULL};
    const char *e2[] = {"--set", "purchase.limit_per_user=2", NULL};
    const char *e0[] = {"--set", "purchase.idempotency_ttl_s=600", NULL};
    TU_REQUIRE(svc_start(&lim1, rp, e1) == 0, "server limit 1");
    TU_REQUIRE(svc_start(&lim2, rp, e2) == 0, "server limit 2");
    TU_REQUIRE(svc_start(&open_, rp, e0) == 0, "server no limit");
    test_limit();
    test_idempotency();
    TU_CHECK(svc_stop(&lim1, 6000) == 0, "stop");
    TU_CHECK(svc_stop(&lim2, 6000) == 0, "stop");
    TU_CHECK(svc_stop(&open_, 6000) == 0, "stop");
    return tu_done();
}
