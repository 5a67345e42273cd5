/* test_lg_unit.c — miaosha-load's pieces that need no server: the HTTP
 * response parser (Content-Length, chunked, split reads, keep-alive rules,
 * errors), the URL parser, the latency histogram's percentiles against
 * exact ones, the order-id set, and the purchase-body parser. */
#include <stdlib.h>
#include <string.h>

#include "lg_admin.h"
#include "lg_hist.h"
#include "lg_http.h"
#include "tu.h"

/* Feeds s to a parser in pieces of `step` bytes, as reads would. */
static lg_http_rc feed(lg_http_parser *p, char *buf, const char *s, size_t step)
{
    size_t n = strlen(s), have = 0;
    lg_http_rc rc = LG_HTTP_INCOMPLETE;
    lg_http_parser_init(p, 0);
    while (have < n) {
        size_t k = n - have < step ? n - have : step;
        memcpy(buf + have, s + have, k);
        have += k;
        rc = lg_http_parse(p, buf, have);
        if (rc != LG_HTTP_INCOMPLETE)
            return rc;
    }
    return rc;
}

static void test_content_length(void)
{
    const char *r = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "content-length: 11\r\n\r\n{\"ok\":true}";
    for (size_t step = 1; step <= strlen(r); step++) {
        char buf[512];
        lg_http_parser p;
        lg_http_rc rc = feed(&p, buf, r, step);
        TU_CHECK(rc == LG_HTTP_DONE, "step %zu rc %d", step, rc);
        TU_CHECK(p.status == 200 && p.keep_alive == 1, "step %zu", step);
        TU_CHECK(p.body_len == 11 && memcmp(buf + p.body_off, "{\"ok\":true}", 11) == 0,
                 "step %zu body", step);
        TU_CHECK(p.consumed == strlen(r), "consumed %zu", p.consumed);
    }
}

static void test_chunked(void)
{
    const char *r = "HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\n{\"ok\"\r\n"
                    "B;ext=1\r\n:false,\"e\":\r\n"
                    "3\r\n\"x\"\r\n"
                    "1\r\n}\r\n"
                    "0\r\nX-Trailer: 1\r\n\r\n";
    const char *want = "{\"ok\":false,\"e\":\"x\"}";
    for (size_t step = 1; step <= strlen(r); step++) {
        char buf[512];
        lg_http_parser p;
        lg_http_rc rc = feed(&p, buf, r, step);
        TU_CHECK(rc == LG_HTTP_DONE, "step %zu rc %d", step, rc);
        TU_CHECK(p.status == 409, "status %d", p.status);
        TU_CHECK(p.body_len == strlen(want) && memcmp(buf + p.body_off, want, p.body_len) == 0,
                 "step %zu body '%.*s'", step, (int)p.body_len, buf + p.body_off);
        TU_CHECK(p.consumed == strlen(r), "consumed %zu of %zu", p.consumed, strlen(r));
    }
}

static void test_keepalive_rules(void)
{
    char buf[512];
    lg_http_parser p;
    TU_CHECK(feed(&p, buf, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                  7) == LG_HTTP_DONE && p.keep_alive == 0, "1.1 close");
    TU_CHECK(feed(&p, buf, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 64) == LG_HTTP_DONE &&
                 p.keep_alive == 0, "1.0 default close");
    TU_CHECK(feed(&p, buf, "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok",
                  64) == LG_HTTP_DONE && p.keep_alive == 1, "1.0 keep-alive");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 204 No Content\r\n\r\n", 64) == LG_HTTP_DONE &&
                 p.body_len == 0, "204 no body");
    /* 100 Continue then the real answer */
    TU_CHECK(feed(&p, buf, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
                  64) == LG_HTTP_DONE && p.status == 201 && p.body_len == 1, "100 skipped");
    /* body until close */
    const char *eofr = "HTTP/1.1 200 OK\r\n\r\nhello";
    TU_CHECK(feed(&p, buf, eofr, 64) == LG_HTTP_INCOMPLETE, "until close: incomplete");
    TU_CHECK(lg_http_eof(&p, buf, strlen(eofr)) == LG_HTTP_DONE && p.body_len == 5 &&
                 p.keep_alive == 0, "until close: done at eof");
    /* truncated Content-Length body at eof is an error */
    const char *trunc = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    TU_CHECK(feed(&p, buf, trunc, 64) == LG_HTTP_INCOMPLETE &&
                 lg_http_eof(&p, buf, strlen(trunc)) == LG_HTTP_ERROR, "truncated");
    /* pipelined bytes after the response are not consumed */
    const char *two = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\naHTTP/1.1 200 OK\r\n";
    TU_CHECK(feed(&p, buf, two, 200) == LG_HTTP_DONE && p.consumed == 39, "consumed %zu",
             p.consumed);
}

static void test_errors(void)
{
    char buf[512];
    lg_http_parser p;
    TU_CHECK(feed(&p, buf, "SSH-2.0-OpenSSH\r\n\r\n", 64) == LG_HTTP_ERROR, "not http");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 20 OK\r\n\r\n", 64) == LG_HTTP_ERROR, "short status");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 64) == LG_HTTP_ERROR,
             "bad length");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                  64) == LG_HTTP_ERROR, "conflicting lengths");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 64) ==
                 LG_HTTP_ERROR, "bad chunk size");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 200 OK\r\nBadHeader\r\n\r\n", 64) == LG_HTTP_ERROR,
             "header without colon");
    /* a header larger than the limit */
    char big[2048];
    lg_http_parser_init(&p, 128);
    memset(big, 'a', sizeof big);
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    TU_CHECK(lg_http_parse(&p, big, sizeof big) == LG_HTTP_ERROR, "header limit");
}

static void test_url(void)
{
    lg_url u;
    char err[256];
    TU_CHECK(lg_url_parse("http://127.0.0.1:8080", &u, err, sizeof err) == 0 && u.port == 8080 &&
                 !strcmp(u.ip, "127.0.0.1") && !strcmp(u.prefix, ""),
             "plain");
    TU_CHECK(lg_url_parse("http://localhost/api/", &u, err, sizeof err) == 0 && u.port == 80 &&
                 !strcmp(u.ip, "127.0.0.1") && !strcmp(u.prefix, "/api") &&
                 !strcmp(u.base, "http://localhost:80/api"),
             "prefix '%s' base '%s'", u.prefix, u.base);
    TU_CHECK(lg_url_parse("https://127.0.0.1", &u, err, sizeof err) < 0, "https refused");
    /* .invalid never resolves (RFC 6761) */
    TU_CHECK(lg_url_parse("http://no-such-host.invalid:80", &u, err, sizeof err) < 0 &&
                 strstr(err, "cannot resolve") != NULL,
             "an unknown name is refused: %s", err);
    TU_CHECK(lg_url_parse("http://127.0.0.1:0", &u, err, sizeof err) < 0, "port 0");
    TU_CHECK(lg_url_parse("http://127.0.0.1:99999", &u, err, sizeof err) < 0, "port range");
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hist(void)
{
    /* index/upper round trip: every value lands in a bucket whose upper
     * bound is >= it and within 0.8 % */
    for (uint64_t v = 0; v < 5000000; v += v < 1000 ? 1 : v / 97) {
        int i = lg_hist_index(v);
        uint64_t up = lg_hist_upper(i);
        TU_CHECK(i >= 0 && i < LG_HIST_BUCKETS, "index %d", i);
        if (up < v || (double)(up - v) > 0.008 * (double)v + 1) {
            TU_CHECK(0, "v %llu upper %llu", (unsigned long long)v, (unsigned long long)up);
            break;
        }
    }
    static lg_hist h;
    lg_hist_init(&h);
    TU_CHECK(lg_hist_percentile(&h, 50) == 0, "empty");
    enum { N = 20000 };
    static uint64_t vals[N];
    srand(42);
    for (int i = 0; i < N; i++) {
        /* a long-tailed mix: mostly ~1 ms, some 10-300 ms */
        vals[i] = (uint64_t)(rand() % 100 < 95 ? 500 + rand() % 1500 : 10000 + rand() % 290000);
        lg_hist_record(&h, vals[i]);
    }
    qsort(vals, N, sizeof vals[0], cmp_u64);
    const double pcts[] = {50, 90, 99, 99.9};
    for (size_t k = 0; k < sizeof pcts / sizeof pcts[0]; k++) {
        uint64_t rank = (uint64_t)(pcts[k] / 100.0 * N + 0.999999);
        uint64_t exact = vals[rank - 1];
        uint64_t got = lg_hist_percentile(&h, pcts[k]);
        double rel = (double)(got > exact ? got - exact : exact - got) / (double)exact;
        TU_CHECK(got >= exact && rel < 0.008, "p%g exact %llu got %llu", pcts[k],
                 (unsigned long long)exact, (unsigned long long)got);
    }
    TU_CHECK(lg_hist_percentile(&h, 100) == vals[N - 1] && h.max == vals[N - 1], "max");
    TU_CHECK(h.min == vals[0] && h.count == N, "min/count");
    /* merge = recording everything into one */
    static lg_hist a, b;
    lg_hist_init(&a);
    lg_hist_init(&b);
    for (int i = 0; i < N; i++)
        lg_hist_record(i % 2 ? &a : &b, vals[i]);
    lg_hist_merge(&a, &b);
    TU_CHECK(a.count == h.count && a.sum == h.sum &&
                 lg_hist_percentile(&a, 99) == lg_hist_percentile(&h, 99),
             "merge");
    /* single value */
    lg_hist_init(&a);
    lg_hist_record(&a, 123456);
    TU_CHECK(lg_hist_percentile(&a, 50) == 123456, "single value clipped to max");
}

static void test_idset(void)
{
    lg_idset s = {0};
    const char *ids[] = {"c", "a", "b", "a", "d", "c"};
    for (int i = 0; i < 6; i++)
        lg_idset_add(&s, ids[i], strlen(ids[i]));
    lg_idset_sort(&s);
    TU_CHECK(s.n == 6 && lg_idset_duplicates(&s) == 2, "dups %zu", lg_idset_duplicates(&s));
    TU_CHECK(lg_idset_contains(&s, "d") && !lg_idset_contains(&s, "e"), "contains");
    for (int i = 0; i < 5000; i++) {
        char id[32];
        snprintf(id, sizeof id, "id-%d", i);
        lg_idset_add(&s, id, strlen(id));
    }
    lg_idset_sort(&s);
    TU_CHECK(s.n == 5006 && lg_idset_contains(&s, "id-4999"), "grow");
    lg_idset_free(&s);
}

static void test_purchase_body(void)
{
    char oid[64], code[32];
    int lost, deleted;
    const char *ok = "{\"ok\":true,\"mode\":\"token\",\"order_id\":\"0b5d\",\"lock_lost\":true,"
                     "\"deleted_other_lock\":false}";
    TU_CHECK(lg_parse_purchase(ok, strlen(ok), oid, code, &lost, &deleted) == 0 &&
                 !strcmp(oid, "0b5d") && lost == 1 && deleted == 0 && code[0] == 0,
             "200 body");
    const char *del = "{\"ok\":true,\"mode\":\"setnx\",\"lock_lost\":false,\"deleted_other_lock\":true}";
    TU_CHECK(lg_parse_purchase(del, strlen(del), oid, code, &lost, &deleted) == 0 && lost == 0 &&
                 deleted == 1,
             "deleted_other_lock");
    const char *so = "{\"ok\":false,\"error\":\"sold_out\"}xyz";
    TU_CHECK(lg_parse_purchase(so, 31, oid, code, &lost, &deleted) == 0 && !strcmp(code, "sold_out") &&
                 oid[0] == 0 && lost == 0 && deleted == 0,
             "409 body, not NUL-terminated");
    TU_CHECK(lg_parse_purchase("nope", 4, oid, code, &lost, &deleted) < 0, "not json");
}

int main(void)
{
    test_content_length();
    test_chunked();
    test_keepalive_rules();
    test_errors();
    test_url();
    test_hist();
    test_idset();
    test_purchase_body();
    return tu_done();
}
