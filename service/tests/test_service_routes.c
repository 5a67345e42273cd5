/* test_service_routes.c — every route and every status code the service
 * documents (service/README.md, "Routes"; except 503, see test_service_redis_down.c): 200, 400,
 * 401, 403, 404, 405, 409, 413, 414, 429, 431 (every route's wrong methods and the order of the
 * route table's checks among them), plus the idle connection timeout, the limits on the
 * request head (every refusal a JSON reply, nothing written), "%00", the access log's escaping and
 * the metrics' SKU labels. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "svc_test.h"

#define TOKEN "Bearer s3cret-token"

static svc_server srv;

static long req(const char *method, const char *path, const char *body, const char *auth,
                svc_resp *r)
{
    svc_req(&srv, method, path, body, auth, r);
    return r->status;
}

/* Expects status and, for JSON errors, the error name; frees the reply. */
static void expect(const char *method, const char *path, const char *body, const char *auth,
                   long status, const char *error, const char *detail_part)
{
    svc_resp r = {0};
    req(method, path, body, auth, &r);
    TU_CHECK(r.status == status, "%s %s: status %ld, want %ld (%s)", method, path, r.status, status,
             B(&r));
    if (error != NULL) {
        const char *e = svc_jstr(r.json, "error");
        TU_CHECK(e && strcmp(e, error) == 0, "%s %s: error %s, want %s", method, path,
                 e ? e : "(none)", error);
        TU_CHECK(svc_jbool(r.json, "ok") == 0, "%s %s: ok must be false", method, path);
        TU_CHECK(strncmp(r.ctype, "application/json", 16) == 0, "%s %s: content type %s", method,
                 path, r.ctype);
    }
    if (detail_part != NULL) {
        const char *d = svc_jstr(r.json, "detail");
        TU_CHECK(d && strstr(d, detail_part), "%s %s: detail '%s' lacks '%s'", method, path,
                 d ? d : "(none)", detail_part);
    }
    svc_resp_free(&r);
}

static void test_local_routes(void)
{
    svc_resp r = {0};
    TU_CHECK(req("GET", "/healthz", NULL, NULL, &r) == 200, "healthz %ld", r.status);
    TU_CHECK(svc_jbool(r.json, "ok") == 1, "healthz ok");
    TU_CHECK(svc_jstr(r.json, "redis") && strcmp(svc_jstr(r.json, "redis"), "up") == 0,
             "healthz redis up: %s", B(&r));
    TU_CHECK(strncmp(r.ctype, "application/json", 16) == 0, "healthz type %s", r.ctype);
    svc_resp_free(&r);
    TU_CHECK(req("HEAD", "/healthz", NULL, NULL, &r) == 200, "HEAD healthz %ld", r.status);
    svc_resp_free(&r);
    expect("POST", "/healthz", NULL, NULL, 405, "method_not_allowed", NULL);
    req("DELETE", "/healthz", NULL, NULL, &r);
    TU_CHECK(r.status == 405 && strcmp(r.allow, "GET, HEAD") == 0, "405 Allow '%s'", r.allow);
    svc_resp_free(&r);
    expect("GET", "/healthz?x=1", NULL, NULL, 400, "bad_request", "unknown parameter 'x'");

    TU_CHECK(req("GET", "/stats", NULL, NULL, &r) == 200, "stats %ld", r.status);
    cJSON *modes = cJSON_GetObjectItemCaseSensitive(r.json, "modes");
    TU_CHECK(cJSON_GetObjectItemCaseSensitive(modes, "token") != NULL, "stats has token: %s",
             B(&r));
    TU_CHECK(cJSON_GetObjectItemCaseSensitive(modes, "reentrant") != NULL, "stats has reentrant");
    svc_resp_free(&r);
    TU_CHECK(req("GET", "/metrics", NULL, NULL, &r) == 200, "metrics %ld", r.status);
    TU_CHECK(strncmp(r.ctype, "text/plain", 10) == 0, "metrics type %s", r.ctype);
    TU_CHECK(strstr(B(&r), "# TYPE miaosha_redis_errors_total counter") != NULL, "metrics body");
    TU_CHECK(strstr(B(&r), "miaosha_watchdog_renewals_total") != NULL, "metrics watchdog");
    svc_resp_free(&r);
    expect("PUT", "/metrics", "{}", NULL, 405, "method_not_allowed", NULL);
    expect("GET", "/stats?mode=token", NULL, NULL, 400, "bad_request", "unknown parameter 'mode'");

    expect("GET", "/index.html", NULL, NULL, 404, "not_found", NULL); /* "/" is the live page */
    expect("GET", "/nope", NULL, NULL, 404, "not_found", NULL);
    expect("GET", "/miaosha/", NULL, NULL, 404, "not_found", NULL);
    expect("GET", "/miaosha/bogus", NULL, NULL, 404, "not_found", "unknown mode");
    expect("GET", "/miaosha/TOKEN", NULL, NULL, 404, "not_found", NULL);
    expect("GET", "/miaosha/token/x", NULL, NULL, 404, "not_found", NULL);
    expect("GET", "/healthz/", NULL, NULL, 404, "not_found", NULL);
}

/* The route table's answers for a request that names no route or the wrong
 * method: 405 carries the path's Allow and the methods to use, and comes
 * before anything about the rest of the request (an unknown mode, a bad
 * SKU); a path no route has, also a prefix without its one segment, is 404
 * whatever the method. */
static void test_methods(void)
{
    static const struct {
        const char *method, *path, *allow, *use;
    } wrong[] = {
        {"POST", "/", "GET, HEAD", "use GET"},
        {"PUT", "/stats", "GET, HEAD", "use GET"},
        {"DELETE", "/metrics", "GET, HEAD", "use GET"},
        {"OPTIONS", "/healthz", "GET, HEAD", "use GET"},
        {"get", "/healthz", "GET, HEAD", "use GET"}, /* method names are case-sensitive */
        {"PUT", "/orders/rt1", "GET, HEAD", "use GET"},
        {"POST", "/orders/b@d", "GET, HEAD", "use GET"},
        {"POST", "/trace/rt1", "GET, HEAD", "use GET"},
        {"PATCH", "/stock/rt1", "GET, HEAD, PUT", "use GET or PUT"},
        {"DELETE", "/stock/bad!sku", "GET, HEAD, PUT", "use GET or PUT"},
        {"DELETE", "/miaosha/token", "GET, POST", "use GET or POST"},
        {"PUT", "/miaosha/bogus", "GET, POST", "use GET or POST"},
        {"HEAD", "/miaosha/token", "GET, POST", NULL}, /* no body to a HEAD */
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        svc_resp r = {0};
        req(wrong[i].method, wrong[i].path, NULL, NULL, &r);
        TU_CHECK(r.status == 405 && strcmp(r.allow, wrong[i].allow) == 0,
                 "%s %s: %ld Allow '%s', want 405 '%s'", wrong[i].method, wrong[i].path, r.status,
                 r.allow, wrong[i].allow);
        if (wrong[i].use != NULL) {
            const char *d = svc_jstr(r.json, "detail");
            TU_CHECK(svc_jerr_is(&r, "method_not_allowed") && d && strcmp(d, wrong[i].use) == 0,
                     "%s %s: %s", wrong[i].method, wrong[i].path, B(&r));
        }
        svc_resp_free(&r);
    }
    static const char *const unknown[][2] = {
        {"GET", "/stock/"},  {"GET", "/stock/a/b"}, {"PUT", "/stock/"},    {"GET", "/stock"},
        {"GET", "/orders/"}, {"GET", "/trace/"},    {"GET", "/trace/a/b"}, {"GET", "/metrics/x"},
        {"GET", "/Healthz"}, {"DELETE", "/nope"},   {"POST", "/miaosha"},
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        expect(unknown[i][0], unknown[i][1], NULL, NULL, 404, "not_found", "no such route");
}

static void test_admin(void)
{
    svc_resp r = {0};
    expect("PUT", "/stock/rt1", "{\"stock\":3}", NULL, 401, "unauthorized", NULL);
    expect("PUT", "/stock/rt1", "{\"stock\":3}", "Bearer wrong", 403, "forbidden", NULL);
    expect("PUT", "/stock/rt1", "{\"stock\":3}", "Basic czNjcmV0", 401, "unauthorized", NULL);
    expect("PUT", "/stock/rt1", "{\"stock\":3}", TOKEN "x", 403, "forbidden", NULL);
    expect("PUT", "/stock/rt1", "{\"stock\":3}", "Bearer s3cret-toke", 403, "forbidden", NULL);
    expect("PUT", "/stock/rt1", "{\"stock\":3}", "Bearer", 401, "unauthorized", NULL);
    /* A 401 names the scheme; a 403 does not ask again. */
    req("PUT", "/stock/rt1", "{\"stock\":3}", NULL, &r);
    TU_CHECK(r.status == 401 && strcmp(r.www_auth, "Bearer") == 0, "401 WWW-Authenticate '%s'",
             r.www_auth);
    svc_resp_free(&r);
    req("PUT", "/stock/rt1", "{\"stock\":3}", "Bearer wrong", &r);
    TU_CHECK(r.status == 403 && r.www_auth[0] == '\0', "403 WWW-Authenticate '%s'", r.www_auth);
    svc_resp_free(&r);
    /* The SKU is checked before the token, the token before the parameters. */
    expect("PUT", "/stock/bad!sku", "{\"stock\":3}", NULL, 400, "bad_request", "sku");
    expect("PUT", "/stock/rt1?stok=1", NULL, NULL, 401, "unauthorized", NULL);
    TU_CHECK(req("PUT", "/stock/rt1", "{\"stock\":3}", TOKEN, &r) == 200, "put %ld %s", r.status,
             B(&r));
    TU_CHECK(svc_jnum(r.json, "stock") == 3 && svc_jnum(r.json, "initial") == 3 &&
                 svc_jnum(r.json, "sold") == 0,
             "put reply %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{rt1}:stock") == 3, "stock key");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{rt1}:initial") == 3, "initial key");
    TU_CHECK(req("PUT", "/stock/rt1?stock=2", NULL, TOKEN, &r) == 200, "put query %ld %s", r.status,
             B(&r));
    svc_resp_free(&r);
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{rt1}:stock") == 2, "stock key 2");
    /* The scheme in any case, spaces before the token. */
    TU_CHECK(req("PUT", "/stock/rt1?stock=2", NULL, "bearer   s3cret-token", &r) == 200,
             "lower-case scheme %ld %s", r.status, B(&r));
    svc_resp_free(&r);
    expect("PUT", "/stock/rt1?stock=2", "{\"stock\":2}", TOKEN, 400, "bad_request", "not both");
    expect("PUT", "/stock/rt1", "not json", TOKEN, 400, "bad_request", "body");
    expect("PUT", "/stock/rt1", "{\"stock\":-1}", TOKEN, 400, "bad_request", "stock");
    expect("PUT", "/stock/rt1", "{\"stock\":1.5}", TOKEN, 400, "bad_request", "stock");
    expect("PUT", "/stock/rt1", "{\"stock\":\"3\"}", TOKEN, 400, "bad_request", "stock");
    expect("PUT", "/stock/rt1", "{\"stock\":1,\"x\":1}", TOKEN, 400, "bad_request",
           "unknown field");
    expect("PUT", "/stock/rt1", NULL, TOKEN, 400, "bad_request", "stock: required");
    expect("PUT", "/stock/rt1?stock=abc", NULL, TOKEN, 400, "bad_request", "stock");
    expect("PUT", "/stock/rt1?stock=1000000001", NULL, TOKEN, 400, "bad_request", "stock");
    expect("PUT", "/stock/rt1?stok=1", NULL, TOKEN, 400, "bad_request", "unknown parameter 'stok'");
    expect("PUT", "/stock/bad!sku", "{\"stock\":1}", TOKEN, 400, "bad_request", "sku");
    expect("DELETE", "/stock/rt1", NULL, TOKEN, 405, "method_not_allowed", NULL);
    req("POST", "/stock/rt1", NULL, TOKEN, &r);
    TU_CHECK(r.status == 405 && strcmp(r.allow, "GET, HEAD, PUT") == 0, "stock Allow '%s'",
             r.allow);
    svc_resp_free(&r);
    /* 413: a body over listen.max_body_bytes (4096 by default). */
    char *big = malloc(6000);
    memset(big, ' ', 5999);
    big[0] = '{';
    memcpy(big + 5990, "\"stock\":1}", 10);
    big[5999] = '\0';
    big[5998] = '}';
    expect("PUT", "/stock/rt1", big, TOKEN, 413, "body_too_large", NULL);
    free(big);
    /* The stock is unchanged by the rejected requests. */
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{rt1}:stock") == 2, "stock still 2");
}

static void test_purchase(void)
{
    svc_resp r = {0};
    TU_CHECK(req("GET", "/miaosha/token?sku=rt1&user=alice", NULL, NULL, &r) == 200, "buy 1 %ld %s",
             r.status, B(&r));
    TU_CHECK(svc_jbool(r.json, "ok") == 1, "ok true");
    TU_CHECK(svc_jstr(r.json, "mode") && strcmp(svc_jstr(r.json, "mode"), "token") == 0, "mode");
    TU_CHECK(svc_jstr(r.json, "sku") && strcmp(svc_jstr(r.json, "sku"), "rt1") == 0, "sku");
    TU_CHECK(svc_jstr(r.json, "order_id") && strlen(svc_jstr(r.json, "order_id")) == 36,
             "order id %s", B(&r));
    TU_CHECK(svc_jnum(r.json, "stock_left") == 1, "stock_left %s", B(&r));
    TU_CHECK(svc_jnum(r.json, "lock_wait_ms") >= 0, "lock_wait_ms");
    TU_CHECK(svc_jbool(r.json, "lock_lost") == 0, "lock_lost false");
    svc_resp_free(&r);
    TU_CHECK(req("POST", "/miaosha/token?sku=rt1&user=bob", NULL, NULL, &r) == 200,
             "POST buy %ld %s", r.status, B(&r));
    TU_CHECK(svc_jnum(r.json, "stock_left") == 0, "stock_left 0");
    svc_resp_free(&r);
    TU_CHECK(req("GET", "/miaosha/token?sku=rt1", NULL, NULL, &r) == 409, "sold out %ld %s",
             r.status, B(&r));
    TU_CHECK(svc_jstr(r.json, "error") && strcmp(svc_jstr(r.json, "error"), "sold_out") == 0,
             "sold_out error");
    svc_resp_free(&r);
    expect("GET", "/miaosha/none?sku=never_stocked", NULL, NULL, 404, "unknown_sku", NULL);

    /* Audit and orders. */
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "rt1", &a) == 200, "audit");
    TU_CHECK(a.stock == 0 && a.initial == 2 && a.sold == 2 && a.orders == 2 && a.oversold == 0 &&
                 a.undersold == 0,
             "audit %lld %lld %lld %lld %lld %lld", a.stock, a.initial, a.sold, a.orders,
             a.oversold, a.undersold);
    TU_CHECK(req("HEAD", "/stock/rt1", NULL, NULL, &r) == 200, "HEAD stock");
    svc_resp_free(&r);
    /* An oversold SKU, made by hand: the audit formulas. */
    tu_redis_int(srv.redis_port, "SET miaosha:{rt3}:initial 10");
    tu_redis_int(srv.redis_port, "SET miaosha:{rt3}:stock 7");
    tu_redis_int(srv.redis_port, "SET miaosha:{rt3}:sold 5");
    svc_get_audit(&srv, "rt3", &a);
    TU_CHECK(a.oversold == 2 && a.undersold == 0, "oversold = 5 - (10 - 7) = 2: %lld", a.oversold);
    tu_redis_int(srv.redis_port, "SET miaosha:{rt3}:sold 1");
    svc_get_audit(&srv, "rt3", &a);
    TU_CHECK(a.oversold == 0 && a.undersold == 2, "undersold = (10 - 7) - 1 = 2: %lld",
             a.undersold);
    expect("GET", "/stock/rt1?x=1", NULL, NULL, 400, "bad_request", "unknown parameter 'x'");

    TU_CHECK(req("GET", "/orders/rt1", NULL, NULL, &r) == 200, "orders %ld", r.status);
    cJSON *orders = cJSON_GetObjectItemCaseSensitive(r.json, "orders");
    TU_CHECK(cJSON_GetArraySize(orders) == 2, "2 orders: %s", B(&r));
    TU_CHECK(svc_jnum(r.json, "total") == 2, "total");
    cJSON *o0 = cJSON_GetArrayItem(orders, 0);
    TU_CHECK(svc_jstr(o0, "user") && strcmp(svc_jstr(o0, "user"), "alice") == 0, "first user");
    svc_resp_free(&r);
    TU_CHECK(req("GET", "/orders/rt1?offset=1&limit=1", NULL, NULL, &r) == 200, "orders page");
    orders = cJSON_GetObjectItemCaseSensitive(r.json, "orders");
    TU_CHECK(cJSON_GetArraySize(orders) == 1, "1 order: %s", B(&r));
    o0 = cJSON_GetArrayItem(orders, 0);
    TU_CHECK(svc_jstr(o0, "user") && strcmp(svc_jstr(o0, "user"), "bob") == 0, "second user");
    svc_resp_free(&r);
    TU_CHECK(req("GET", "/orders/rt1?offset=&limit=", NULL, NULL, &r) == 200 &&
                 cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.json, "orders")) == 2 &&
                 svc_jnum(r.json, "offset") == 0 && svc_jnum(r.json, "limit") == 100,
             "empty paging parameters mean the defaults: %s", B(&r));
    svc_resp_free(&r);
    expect("GET", "/orders/rt1?limit=1001", NULL, NULL, 400, "bad_request", "limit");
    expect("GET", "/orders/rt1?limit=0", NULL, NULL, 400, "bad_request", "limit");
    expect("GET", "/orders/rt1?offset=-1", NULL, NULL, 400, "bad_request", "offset");
    expect("GET", "/orders/rt1?sku=rt1", NULL, NULL, 400, "bad_request", "unknown parameter 'sku'");
    expect("GET", "/orders/b@d", NULL, NULL, 400, "bad_request", "sku");
    expect("POST", "/orders/rt1", NULL, NULL, 405, "method_not_allowed", NULL);

    /* 400: every purchase parameter validated. */
    static const struct {
        const char *q, *detail;
    } bad[] = {
        {"sku=bad!", "sku"},
        {"sku=", "sku"},
        {"sku", "missing value"},
        {"sku=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "sku"},
        {"user=a%20b", "user"},
        {"work_ms=60001", "work_ms"},
        {"work_ms=-1", "work_ms"},
        {"work_ms=1e3", "work_ms"},
        {"lease_ms=0", "lease_ms"},
        {"lease_ms=300001", "lease_ms"},
        {"wait_ms=abc", "wait_ms"},
        {"wait_ms=60001", "wait_ms"},
        {"reenter=9", "reenter"},
        {"fault=boom", "fault"},
        {"x=1", "unknown parameter 'x'"},
        {"stock=1", "unknown parameter 'stock'"},
        {"sku=a&sku=b", "duplicate parameter 'sku'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "/miaosha/token?%s", bad[i].q);
        expect("GET", path, NULL, NULL, 400, "bad_request", bad[i].detail);
    }
    expect("GET", "/miaosha/token?fault=crash_in_section", NULL, NULL, 403, "faults_disabled",
           NULL);
    expect("GET", "/miaosha/setnx?fault=crash_before_expire", NULL, NULL, 403, "faults_disabled",
           NULL);
    req("PUT", "/miaosha/token", NULL, NULL, &r);
    TU_CHECK(r.status == 405 && strcmp(r.allow, "GET, POST") == 0, "purchase Allow '%s'", r.allow);
    svc_resp_free(&r);

    /* 429: another holder has the lock. */
    TU_CHECK(svc_set_stock(&srv, "rt2", 5, TOKEN) == 200, "stock rt2");
    tu_redis_int(srv.redis_port, "SET miaosha:{rt2}:lock:token someone-else PX 20000");
    tu_redis_int(srv.redis_port, "SET miaosha:{rt2}:lock:setnx someone-else PX 20000");
    TU_CHECK(req("GET", "/miaosha/token?sku=rt2&wait_ms=100", NULL, NULL, &r) == 429, "busy %ld %s",
             r.status, B(&r));
    TU_CHECK(svc_jstr(r.json, "error") && strcmp(svc_jstr(r.json, "error"), "lock_busy") == 0,
             "lock_busy");
    TU_CHECK(svc_jnum(r.json, "wait_ms") == 100, "wait_ms echoed");
    TU_CHECK(r.ms >= 90, "waited %.1f ms for the lock", r.ms);
    svc_resp_free(&r);
    char holder[64];
    tu_redis_str(srv.redis_port, holder, sizeof holder, "GET miaosha:{rt2}:lock:token");
    TU_CHECK(strcmp(holder, "someone-else") == 0, "the other holder's lock is untouched");
    expect("GET", "/miaosha/setnx?sku=rt2", NULL, NULL, 429, "lock_busy", NULL);
    /* reentrant locks are hashes of "<instance>:<owner>" -> count. */
    tu_redis_int(srv.redis_port, "DEL miaosha:{rt2}:lock:token miaosha:{rt2}:lock:setnx");
    tu_redis_int(srv.redis_port, "HSET miaosha:{rt2}:lock:reentrant other:owner 1");
    tu_redis_int(srv.redis_port, "PEXPIRE miaosha:{rt2}:lock:reentrant 20000");
    expect("GET", "/miaosha/reentrant?sku=rt2&wait_ms=50", NULL, NULL, 429, "lock_busy", NULL);
    tu_redis_int(srv.redis_port, "DEL miaosha:{rt2}:lock:reentrant");
    expect("GET", "/miaosha/token?sku=rt2", NULL, NULL, 200, NULL, NULL);

    /* 414: a URI over listen.max_uri_bytes (2048 by default). */
    char *longp = malloc(3100);
    strcpy(longp, "/miaosha/token?user=");
    memset(longp + 20, 'a', 3000);
    longp[3020] = '\0';
    expect("GET", longp, NULL, NULL, 414, "uri_too_long", "listen.max_uri_bytes");
    free(longp);

    /* Stats and metrics count what happened. */
    TU_CHECK(req("GET", "/stats", NULL, NULL, &r) == 200, "stats");
    cJSON *tok = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "modes"),
                                                  "token");
    TU_CHECK(svc_jnum(tok, "sold") == 3, "token sold 3: %s", B(&r));
    TU_CHECK(svc_jnum(tok, "sold_out") == 1, "token sold_out 1");
    TU_CHECK(svc_jnum(tok, "lock_busy") == 1, "token lock_busy 1");
    cJSON *lat = cJSON_GetObjectItemCaseSensitive(tok, "latency_ms");
    TU_CHECK(svc_jnum(lat, "p50") > 0 && svc_jnum(lat, "max") >= svc_jnum(lat, "p99"),
             "latency percentiles");
    /* the 429 above waited its 100 ms for the lock: lock wait counts it */
    cJSON *lw = cJSON_GetObjectItemCaseSensitive(tok, "lock_wait_ms");
    TU_CHECK(svc_jnum(lw, "count") == svc_jnum(tok, "sold") + svc_jnum(tok, "sold_out") +
                                          svc_jnum(tok, "lock_busy") &&
                 svc_jnum(lw, "max") >= 90,
             "lock wait includes the purchase that gave up: %s", B(&r));
    svc_resp_free(&r);
    TU_CHECK(req("GET", "/metrics", NULL, NULL, &r) == 200, "metrics");
    TU_CHECK(strstr(B(&r), "miaosha_purchase_sold_total{mode=\"token\",sku=\"rt1\"} 2") != NULL,
             "metrics sold for rt1");
    /* A (mode, sku) pair that has seen a request exports its zeros too. */
    TU_CHECK(
        strstr(B(&r), "miaosha_purchase_lock_lost_total{mode=\"token\",sku=\"rt1\"} 0\n") != NULL &&
            strstr(B(&r), "miaosha_purchase_errors_total{mode=\"token\",sku=\"rt1\"} 0\n") != NULL,
        "zero-valued counters of a seen pair are exported");
    TU_CHECK(strstr(B(&r), "mode=\"mutex\",sku=\"rt1\"") == NULL, "no series for an unseen pair");
    TU_CHECK(
        strstr(
            B(&r),
            "miaosha_purchase_duration_seconds_bucket{mode=\"token\",sku=\"rt1\",le=\"+Inf\"}") !=
            NULL,
        "metrics histogram");
    TU_CHECK(strstr(B(&r), "miaosha_http_responses_total{code=\"429\"}") != NULL, "429 counted");
    svc_resp_free(&r);
}

static int connect_srv(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)srv.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TU_REQUIRE(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect");
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Sends one raw request (exact bytes) on a fresh connection and reads the
 * reply until the server closes or the body (Content-Length) is complete.
 * Returns the status (0 when none came); the body goes into body. */
static int raw_request(const char *req, size_t len, char *body, size_t blen)
{
    int fd = connect_srv();
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, req + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    static char buf[65536];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        const char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strcasestr(buf, "\r\nContent-Length:");
        if (end && cl && cl < end && got >= (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10))
            break;
    }
    close(fd);
    buf[got] = '\0';
    int status = 0;
    sscanf(buf, "HTTP/1.%*d %d", &status);
    const char *end = strstr(buf, "\r\n\r\n");
    snprintf(body, blen, "%s", end ? end + 4 : "");
    return status;
}

/* A purchase with one "X-Pad" header sized so that the request head costs
 * exactly cost bytes by the documented rule: request line + headers, each
 * header line and each query parameter counted 64 bytes more. */
static int padded_purchase(const char *sku, size_t cost, char *body, size_t blen)
{
    char uri[128], head[512];
    snprintf(uri, sizeof uri, "/miaosha/token?sku=%s&user=pad", sku);
    size_t fixed = strlen("GET ") + strlen(uri) + strlen(" HTTP/1.1\r\n") + strlen("\r\n") +
                   (strlen("Host: x\r\n") + 64) + (strlen("X-Pad: \r\n") + 64) + 2 * 64;
    TU_REQUIRE(cost > fixed, "cost %zu > %zu", cost, fixed);
    size_t pad = cost - fixed;
    char *req = malloc(cost + 64);
    int n = snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: x\r\nX-Pad: ", uri);
    memcpy(req, head, (size_t)n);
    memset(req + n, 'p', pad);
    memcpy(req + n + pad, "\r\n\r\n", 4);
    int st = raw_request(req, (size_t)n + pad + 4, body, blen);
    free(req);
    return st;
}

static void expect_json_error(int status, const char *body, int want, const char *error,
                              const char *what)
{
    cJSON *j = cJSON_Parse(body);
    const char *e = svc_jstr(j, "error");
    TU_CHECK(status == want, "%s: status %d, want %d (%.200s)", what, status, want, body);
    TU_CHECK(e && strcmp(e, error) == 0, "%s: JSON error %s, want %s (%.200s)", what,
             e ? e : "(none)", error, body);
    cJSON_Delete(j);
}

/* Framings libmicrohttpd lets through, answered at once with a JSON 400
 * (it waited for a gzip body until the idle timeout, and read the second
 * Content-Length's extra byte as the next request); and "Expect:
 * 100-continue" without a body, followed by a stray CRLF: answered, not
 * "100 Continue" and a close. */
static void test_framing(void)
{
    static char body[65536];
    TU_CHECK(svc_set_stock(&srv, "fr1", 5, TOKEN) == 200, "stock fr1");
    const char te[] = "POST /miaosha/token?sku=fr1 HTTP/1.1\r\nHost: x\r\n"
                      "Transfer-Encoding: gzip\r\n\r\n";
    int64_t t0 = lc_now_ms();
    int st = raw_request(te, sizeof te - 1, body, sizeof body);
    expect_json_error(st, body, 400, "bad_request", "Transfer-Encoding: gzip");
    TU_CHECK(strstr(body, "Transfer-Encoding") != NULL && lc_now_ms() - t0 < 5000,
             "names Transfer-Encoding, at once (%lld ms): %.200s", (long long)(lc_now_ms() - t0),
             body);
    const char cl[] = "POST /miaosha/token?sku=fr1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                      "Content-Length: 3\r\nConnection: close\r\n\r\n{}x";
    st = raw_request(cl, sizeof cl - 1, body, sizeof body);
    expect_json_error(st, body, 400, "bad_request", "Content-Length 2 and 3");
    svc_audit a;
    TU_CHECK(svc_get_audit(&srv, "fr1", &a) == 200 && a.stock == 5 && a.sold == 0,
             "fr1: nothing sold (stock %lld, sold %lld)", a.stock, a.sold);
    const char ex[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n\r\n";
    st = raw_request(ex, sizeof ex - 1, body, sizeof body);
    TU_CHECK(st == 200 && strstr(body, "\"ok\":true") != NULL,
             "Expect: 100-continue, no body, a stray CRLF: %d %.200s", st, body);
}

/* The request head's limits (listen.max_header_bytes 16384, max_uri_bytes
 * 2048): just under is served, just over is a JSON 431/414 and nothing is
 * written; libmicrohttpd never drops the reply or an argument. */
static void test_head_limits(void)
{
    static char body[65536];
    TU_CHECK(svc_set_stock(&srv, "hl1", 100, TOKEN) == 200, "stock hl1");
    /* exactly at the limit, and a few sizes below: served */
    for (size_t under = 0; under <= 600; under += 150) {
        int st = padded_purchase("hl1", 16384 - under, body, sizeof body);
        TU_CHECK(st == 200 && strstr(body, "\"order_id\""), "head %zu bytes: %d %.200s",
                 16384 - under, st, body);
    }
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{hl1}:sold") == 5, "5 sold");
    /* over it, up to where libmicrohttpd's pool (2x + 4 KiB) ends: JSON 431 */
    size_t over[] = {16385, 16500, 20000, 30000};
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        int st = padded_purchase("hl1", over[i], body, sizeof body);
        expect_json_error(st, body, 431, "headers_too_large", "over the header limit");
    }
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{hl1}:sold") == 5, "no write when refused");
    TU_CHECK(tu_redis_int(srv.redis_port, "LLEN miaosha:{hl1}:orders") == 5, "no order either");

    /* many small header lines, just under and over: each costs 64 more */
    {
        char *req = malloc(32768);
        size_t n = (size_t)sprintf(req, "GET /miaosha/token?sku=hl1 HTTP/1.1\r\nHost: x\r\n");
        for (int i = 0; i < 200; i++) /* 74 bytes each: 14976 in all */
            n += (size_t)sprintf(req + n, "X-%03d: v\r\n", i);
        memcpy(req + n, "\r\n", 2);
        int st = raw_request(req, n + 2, body, sizeof body);
        TU_CHECK(st == 200, "200 header lines: %d %.200s", st, body);
        n = (size_t)sprintf(req, "GET /miaosha/token?sku=hl1 HTTP/1.1\r\nHost: x\r\n");
        for (int i = 0; i < 260; i++) /* 19416 */
            n += (size_t)sprintf(req + n, "X-%03d: v\r\n", i);
        memcpy(req + n, "\r\n", 2);
        st = raw_request(req, n + 2, body, sizeof body);
        expect_json_error(st, body, 431, "headers_too_large", "260 header lines");
        free(req);
    }
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{hl1}:sold") == 6, "one more sold");

    /* long URIs: just over max_uri_bytes, and up to the header limit */
    size_t uris[] = {2049, 8000, 16000};
    for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
        char *req = malloc(uris[i] + 64);
        int n = sprintf(req, "GET /miaosha/token?sku=hl1&user=");
        memset(req + n, 'u', uris[i] - (size_t)(n - 4));
        n += (int)(uris[i] - (size_t)(n - 4));
        n += sprintf(req + n, " HTTP/1.1\r\nHost: x\r\n\r\n");
        int st = raw_request(req, (size_t)n, body, sizeof body);
        expect_json_error(st, body, 414, "uri_too_long", "long URI");
        free(req);
    }
    /* more query fields than any route takes: refused before libmicrohttpd
     * could drop one for want of memory (a dropped sku= would buy the
     * default SKU) */
    {
        char uri[512] = "/miaosha/token?";
        for (int i = 0; i < 40; i++)
            strcat(uri, "a&");
        strcat(uri, "sku=hl1");
        expect("GET", uri, NULL, NULL, 400, "bad_request", "too many parameters");
    }
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{hl1}:sold") == 6, "nothing more sold");
}

/* libmicrohttpd decodes the URI before the service sees it: "%00" would cut
 * "demo%00evil" to "demo". Refused in any position. */
static void test_encoded_nul(void)
{
    TU_CHECK(svc_set_stock(&srv, "nul1", 5, TOKEN) == 200, "stock nul1");
    expect("GET", "/stock/nul1%00evil", NULL, NULL, 400, "bad_request", "%00");
    expect("GET", "/miaosha/token?sku=nul1&user=a%00b", NULL, NULL, 400, "bad_request", "%00");
    expect("PUT", "/stock/nul1%00x?stock=1", NULL, TOKEN, 400, "bad_request", "%00");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{nul1}:stock") == 5, "nul1 untouched");
    TU_CHECK(tu_redis_int(srv.redis_port, "GET miaosha:{nul1}:sold") == 0, "nothing sold");
}

/* The access log prints the decoded URL: a "%0A" must not start a line;
 * every route is in it, /healthz's fast path included. */
static void test_access_log_escaped(void)
{
    expect("GET", "/x%0AFAKE%20ERROR%20line", NULL, NULL, 404, "not_found", NULL);
    TU_CHECK(svc_log_has(&srv, "access GET /x\\x0aFAKE ERROR line 404"), "escaped access line");
    FILE *f = fopen(srv.log, "r");
    char line[2048];
    int forged = 0;
    while (f && fgets(line, sizeof line, f))
        forged |= strncmp(line, "FAKE", 4) == 0;
    if (f)
        fclose(f);
    TU_CHECK(!forged, "no forged log line");
    /* /healthz, answered on its own fast path, is logged like any request */
    expect("GET", "/healthz", NULL, NULL, 200, NULL, NULL);
    TU_CHECK(svc_log_has(&srv, "access GET /healthz 200"), "/healthz in the access log");
}

/* Rejected purchases never take one of the 64 SKU labels. */
static void test_metrics_labels(void)
{
    svc_resp r = {0};
    expect("GET", "/miaosha/token?sku=bad!", NULL, NULL, 400, "bad_request", "sku");
    for (int i = 0; i < 70; i++) {
        char path[128];
        snprintf(path, sizeof path, "/miaosha/token?sku=made_up_%d&bogus=1", i);
        expect("GET", path, NULL, NULL, 400, "bad_request", "bogus");
    }
    TU_CHECK(svc_set_stock(&srv, "lbl1", 1, TOKEN) == 200, "stock lbl1");
    expect("GET", "/miaosha/token?sku=lbl1", NULL, NULL, 200, NULL, NULL);
    TU_CHECK(req("GET", "/metrics", NULL, NULL, &r) == 200, "metrics");
    TU_CHECK(strstr(B(&r), "sku=\"\"") == NULL, "no empty sku label");
    TU_CHECK(strstr(B(&r), "made_up_") == NULL, "no label for a rejected request's SKU");
    TU_CHECK(strstr(B(&r), "miaosha_purchase_sold_total{mode=\"token\",sku=\"lbl1\"} 1") != NULL,
             "a valid purchase still gets its label");
    TU_CHECK(strstr(B(&r), "miaosha_purchase_bad_requests_total{mode=\"token\",sku=\"_other\"}") !=
                 NULL,
             "bad requests counted under _other");
    svc_resp_free(&r);
}

/* Reads a reply's head (up to the blank line) into buf; returns its length
 * (0 when nothing came before the connection closed or timed out). */
static size_t read_head(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n") != NULL)
            break;
    }
    buf[got] = '\0';
    return got;
}

/* A body over listen.max_body_bytes (4096) is refused at once, chunked or
 * not, with Connection: close: a chunked upload that keeps sending (4 KiB
 * chunks, bounded by 64 MiB or 5 s) gets its 413 as soon as the body
 * crosses the limit. It used to be read to its end (5.7 GB in 2 s) before
 * the 413, which then came without Connection: close. */
static void test_body_limit_early(void)
{
    enum { CHUNK = 4096, MAX_BODY = 4096 };
    char head[4096];
    /* Content-Length over the limit: refused before the body is read. */
    int fd = connect_srv();
    const char *cl = "POST /miaosha/token?sku=rt1 HTTP/1.1\r\nHost: x\r\n"
                     "Content-Length: 100000\r\n\r\n";
    TU_CHECK(write(fd, cl, strlen(cl)) > 0, "write");
    read_head(fd, head, sizeof head);
    int status = 0;
    sscanf(head, "HTTP/1.%*d %d", &status);
    TU_CHECK(status == 413, "Content-Length over the limit: %d %s", status, head);
    TU_CHECK(strcasestr(head, "\r\nConnection: close\r\n") != NULL,
             "413 (Content-Length) says Connection: close: %s", head);
    close(fd);

    fd = connect_srv();
    const char *ch = "POST /miaosha/token?sku=rt1 HTTP/1.1\r\nHost: x\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n";
    TU_CHECK(write(fd, ch, strlen(ch)) > 0, "write");
    static char chunk[CHUNK + 16];
    int n = snprintf(chunk, sizeof chunk, "%x\r\n", CHUNK);
    memset(chunk + n, 'a', CHUNK);
    memcpy(chunk + n + CHUNK, "\r\n", 2);
    size_t clen = (size_t)n + CHUNK + 2;
    long long sent = 0;
    int answered = 0;
    int64_t t0 = lc_now_ms();
    while (sent < 64LL << 20 && lc_now_ms() - t0 < 5000) {
        if (send(fd, chunk, clen, MSG_NOSIGNAL) != (ssize_t)clen)
            break; /* the server closed: its reply is waiting */
        sent += CHUNK;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)tu_slack(50)) > 0) {
            answered = 1;
            break;
        }
    }
    size_t got = read_head(fd, head, sizeof head);
    status = 0;
    sscanf(head, "HTTP/1.%*d %d", &status);
    printf("chunked upload: %lld body bytes sent in %lld ms, reply %s\n", sent,
           (long long)(lc_now_ms() - t0), answered ? "came while sending" : "did not come");
    TU_CHECK(got > 0 && status == 413, "chunked body over the limit: %d %s", status, head);
    TU_CHECK(sent <= MAX_BODY + 3 * CHUNK,
             "413 before much more than the limit was sent: %lld bytes", sent);
    TU_CHECK(strcasestr(head, "\r\nConnection: close\r\n") != NULL,
             "413 (chunked) says Connection: close: %s", head);
    close(fd);
}

/* A client that never finishes its headers is dropped after
 * listen.connection_timeout_s (2 s here). (An idle timeout: one that
 * trickles a byte now and then is not; see service/README.md.) */
static void test_slowloris(void)
{
    int fd = connect_srv();
    const char *partial = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    TU_CHECK(write(fd, partial, strlen(partial)) > 0, "write");
    int64_t t0 = lc_now_ms();
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    int64_t dt = lc_now_ms() - t0;
    TU_CHECK(n <= 0 && dt >= 1500 && dt < 6000, "closed after %lld ms (n=%zd)", (long long)dt, n);
    close(fd);
}

int main(void)
{
    const char *extra[] = {
        "--set", "admin_token=s3cret-token", "--set",         "listen.connection_timeout_s=2",
        "--set", "log.access=true",          "--instance-id", "routes-1",
        NULL};
    TU_REQUIRE(svc_start(&srv, tu_redis_port(), extra) == 0, "server starts");
    tu_redis_int(srv.redis_port,
                 "DEL miaosha:{rt1}:stock miaosha:{rt1}:initial miaosha:{rt1}:sold "
                 "miaosha:{rt1}:orders miaosha:{rt1}:lock:setnx miaosha:{rt1}:lock:token "
                 "miaosha:{rt1}:lock:reentrant");
    tu_redis_int(srv.redis_port, "DEL miaosha:{never_stocked}:stock");
    test_local_routes();
    test_methods();
    test_admin();
    test_purchase();
    test_head_limits();
    test_encoded_nul();
    test_access_log_escaped();
    test_metrics_labels();
    test_slowloris();
    test_body_limit_early();
    test_framing();
    /* Still healthy after all of that: never a 500, never a crash. */
    svc_resp r = {0};
    TU_CHECK(req("GET", "/healthz", NULL, NULL, &r) == 200, "still healthy");
    svc_resp_free(&r);
    TU_CHECK(req("GET", "/metrics", NULL, NULL, &r) == 200, "metrics at the end");
    TU_CHECK(strstr(B(&r), "miaosha_http_responses_total{code=\"200\"}") != NULL,
             "responses are counted");
    TU_CHECK(strstr(B(&r), "code=\"500\"") == NULL, "never a 500");
    svc_resp_free(&r);
    TU_CHECK(svc_log_has(&srv, "access GET /stats 200"), "the access log is on");
    TU_CHECK(!svc_log_has(&srv, " 500 "), "no 500 in the access log");
    int rc = svc_stop(&srv, 6000);
    TU_CHECK(rc == 0, "SIGTERM: exit status %d", rc);
    if (tu_failed)
        svc_dump_log(&srv);
    return tu_done();
}
