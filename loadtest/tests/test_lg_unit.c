/* test_lg_unit.c — miaosha-load's pieces that need no service and no Redis: the HTTP
 * response parser (Content-Length, chunked, split reads, keep-alive rules,
 * errors), the URL parser, the latency histogram's percentiles against
 * exact ones, the order-id set, the order list's overall time bound (against a
 * loopback server on a thread), the purchase-body parser, and the matrix
 * report in English (byte for byte as before) and in Chinese (--lang zh:
 * the words, the CSV unchanged, columns aligned by display width). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lg_admin.h"
#include "lg_hist.h"
#include "lg_http.h"
#include "lg_matrix_html.h"
#include "lg_matrix_report.h"
#include "lg_timeline.h"
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
                  7) == LG_HTTP_DONE &&
                 p.keep_alive == 0,
             "1.1 close");
    TU_CHECK(feed(&p, buf, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 64) == LG_HTTP_DONE &&
                 p.keep_alive == 0,
             "1.0 default close");
    TU_CHECK(feed(&p, buf,
                  "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok",
                  64) == LG_HTTP_DONE &&
                 p.keep_alive == 1,
             "1.0 keep-alive");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 204 No Content\r\n\r\n", 64) == LG_HTTP_DONE &&
                 p.body_len == 0,
             "204 no body");
    /* 100 Continue then the real answer */
    TU_CHECK(feed(&p, buf,
                  "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
                  64) == LG_HTTP_DONE &&
                 p.status == 201 && p.body_len == 1,
             "100 skipped");
    /* body until close */
    const char *eofr = "HTTP/1.1 200 OK\r\n\r\nhello";
    TU_CHECK(feed(&p, buf, eofr, 64) == LG_HTTP_INCOMPLETE, "until close: incomplete");
    TU_CHECK(lg_http_eof(&p, buf, strlen(eofr)) == LG_HTTP_DONE && p.body_len == 5 &&
                 p.keep_alive == 0,
             "until close: done at eof");
    /* truncated Content-Length body at eof is an error */
    const char *trunc = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    TU_CHECK(feed(&p, buf, trunc, 64) == LG_HTTP_INCOMPLETE &&
                 lg_http_eof(&p, buf, strlen(trunc)) == LG_HTTP_ERROR,
             "truncated");
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
                  64) == LG_HTTP_ERROR,
             "conflicting lengths");
    TU_CHECK(feed(&p, buf, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 64) ==
                 LG_HTTP_ERROR,
             "bad chunk size");
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
    TU_CHECK(a.count == h.count && a.min == h.min && a.max == h.max &&
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

/* A server that answers every request with a full page of 1000 orders,
 * forever: a listing that never runs out (on a thread, loopback only). */
typedef struct endless {
    int fd;
    atomic_int stop, pages;
    pthread_t t;
} endless;

static void *endless_run(void *arg)
{
    endless *e = arg;
    static char page[32 * 1000 + 256];
    size_t n = (size_t)snprintf(page, sizeof page, "{\"orders\":[");
    for (int i = 0; i < 1000; i++)
        n += (size_t)snprintf(page + n, sizeof page - n, "%s{\"order_id\":\"o%d\"}", i ? "," : "",
                              i);
    n += (size_t)snprintf(page + n, sizeof page - n, "]}");
    char head[128];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      n);
    while (!atomic_load(&e->stop)) {
        struct pollfd pf = {e->fd, POLLIN, 0};
        if (poll(&pf, 1, 20) <= 0)
            continue;
        int c = accept(e->fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[2048];
        struct pollfd cp = {c, POLLIN, 0};
        if (poll(&cp, 1, 1000) == 1 && recv(c, req, sizeof req, 0) > 0 &&
            send(c, head, (size_t)hn, MSG_NOSIGNAL) == hn &&
            send(c, page, n, MSG_NOSIGNAL) == (ssize_t)n)
            atomic_fetch_add(&e->pages, 1);
        close(c);
    }
    return NULL;
}

/* The order listing is bounded as a whole: a server whose pages never run
 * out ends it after total_ms, not after 100,000 pages. */
static void test_orders_bounded(void)
{
    endless e = {0};
    e.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    TU_REQUIRE(e.fd >= 0 && bind(e.fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                   listen(e.fd, 16) == 0 && getsockname(e.fd, (struct sockaddr *)&a, &l) == 0,
               "listens");
    TU_REQUIRE(pthread_create(&e.t, NULL, endless_run, &e) == 0, "server thread");
    char base[64], err[256] = "";
    snprintf(base, sizeof base, "http://127.0.0.1:%d", ntohs(a.sin_port));
    lg_idset ids = {0};
    int64_t t0 = lc_now_ms();
    int rc = lg_admin_orders(base, "endless", 300, &ids, err, sizeof err);
    int64_t took = lc_now_ms() - t0;
    TU_CHECK(rc == -1 && strstr(err, "not done after 300 ms") != NULL && ids.n >= 1000 &&
                 ids.n % 1000 == 0 && took < tu_slack(3000),
             "endless listing: rc %d after %lld ms, %zu ids, %d pages: %s", rc, (long long)took,
             ids.n, atomic_load(&e.pages), err);
    lg_idset_free(&ids);
    atomic_store(&e.stop, 1);
    pthread_join(e.t, NULL);
    close(e.fd);
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
    const char *del =
        "{\"ok\":true,\"mode\":\"setnx\",\"lock_lost\":false,\"deleted_other_lock\":true}";
    TU_CHECK(lg_parse_purchase(del, strlen(del), oid, code, &lost, &deleted) == 0 && lost == 0 &&
                 deleted == 1,
             "deleted_other_lock");
    const char *so = "{\"ok\":false,\"error\":\"sold_out\"}xyz";
    TU_CHECK(lg_parse_purchase(so, 31, oid, code, &lost, &deleted) == 0 &&
                 !strcmp(code, "sold_out") && oid[0] == 0 && lost == 0 && deleted == 0,
             "409 body, not NUL-terminated");
    TU_CHECK(lg_parse_purchase("nope", 4, oid, code, &lost, &deleted) < 0, "not json");
}

/* --- the matrix report ---------------------------------------------------- */

/* A small matrix that never ran: modes none and token; scenarios race,
 * crash and redis-pause (a fault, so the fault table shows); one DIFF, one
 * stuck cell, an expectation with alternatives, a reason with | and <. */
static void fake_matrix(lg_matrix_cfg *cfg, lg_matrix_result *r, const char *dir)
{
    lg_matrix_cfg_init(cfg);
    cfg->out_dir = dir;
    cfg->quick = 1;
    char err[64];
    TU_REQUIRE(lg_matrix_select(cfg, "none,token", "race,crash,redis-pause", err, sizeof err) == 0,
               "select: %s", err);
    memset(r, 0, sizeof *r);
    r->elapsed_s = 21.5;
    snprintf(r->redis, sizeof r->redis, "127.0.0.1:6390");
    r->mismatches = 1;
    static const struct {
        lg_scenario s;
        lg_mode m;
        const char *exp, *out;
        int64_t sold, rec, ms;
    } k[] = {
        {LG_SCEN_RACE, LG_MODE_NONE, "oversell", "oversell", 61, -1, -1},
        {LG_SCEN_RACE, LG_MODE_TOKEN, "exact", "exact", 20, -1, -1},
        {LG_SCEN_CRASH, LG_MODE_NONE, "recovers", "recovers", 1, 35, -1},
        {LG_SCEN_CRASH, LG_MODE_TOKEN, "recovers", "stuck", 0, -1, -1},
        {LG_SCEN_REDIS_PAUSE, LG_MODE_NONE, "oversell", "oversell", 95, -1, 310},
        {LG_SCEN_REDIS_PAUSE, LG_MODE_TOKEN, "safe|stuck", "safe", 20, -1, 646},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        lg_cell *c = &r->cell[k[i].s][k[i].m];
        c->ran = 1;
        c->expected = k[i].exp;
        snprintf(c->outcome, sizeof c->outcome, "%s", k[i].out);
        c->pass = strcmp(k[i].out, "stuck") != 0;
        c->stock = 20;
        c->sold = k[i].sold;
        c->oversold = c->sold > 20 ? c->sold - 20 : 0;
        c->lock_busy = 3 * i;
        c->lock_lost = i;
        c->deleted_other_lock = i / 2;
        c->acked_over_stock = (uint64_t)c->oversold; /* none's buyers hold a 200 per unit sold */
        c->acked_lost = i == 4 ? 7 : 0;
        c->recovery_ms = k[i].rec;
        c->stuck = !strcmp(k[i].out, "stuck");
        c->window_ms = 3000;
        c->fault_ms = k[i].ms >= 0 ? 2003 : -1;
        c->freed_ms = -1;
        c->failfast_ms = k[i].ms;
        c->reconnect_ms = -1;
        c->resume_ms = k[i].ms >= 0 ? 1502 : -1;
        c->n503 = k[i].ms >= 0 ? 4 : 0;
        snprintf(c->reason, sizeof c->reason, "cell %zu: a|b <c>", i);
    }
}

/* The English output of fake_matrix, as the report printed it before it
 * learnt Chinese: English must stay byte for byte the same. */
static const char golden_en_text[] =
    "\n"
    "miaosha oversell matrix (quick) — redis 127.0.0.1:6390 — 21.5 s\n"
    "mode       | race                     | crash                    | redis-pause  "
    "           \n"
    "none       | ok oversell 61/20        | ok recovers 35ms         | ok oversell "
    "95/20       \n"
    "token      | ok exact 20/20           | DIFF stuck               | ok safe 503 "
    "646ms       \n"
    "(cells: ok/DIFF vs expected, measured outcome, sold/stock or recovery time)\n"
    "\n"
    "scenario      mode      expected   measured oversold undersold lock_busy lock_"
    "lost del_other acked_lost over_stock reason\n"
    "race          none      oversell   oversell       41         0         0      "
    "   0         0          0         41 cell 0: a|b <c>\n"
    "race          token     exact      exact           0         0         3      "
    "   1         0          0          0 cell 1: a|b <c>\n"
    "crash         none      recovers   recovers        0         0         6      "
    "   2         1          0          0 cell 2: a|b <c>\n"
    "crash         token     recovers   stuck           0         0         9      "
    "   3         1          0          0 cell 3: a|b <c>\n"
    "redis-pause   none      oversell   oversell       75         0        12      "
    "   4         2          7         75 cell 4: a|b <c>\n"
    "redis-pause   token     safe|stuck safe            0         0        15      "
    "   5         2          0          0 cell 5: a|b <c>\n"
    "\n"
    "fault         mode      503s   unacked fault_ms freed_ms failfast reconnect "
    "resume (ms; - = n/a)\n"
    "redis-pause   none           4       0     2003        -      310         -   1502\n"
    "redis-pause   token          4       0     2003        -      646         -   1502\n"
    "\n"
    "1 cell(s) differ from the expected outcome\n";

static const char golden_en_md[] =
    "# miaosha oversell matrix (quick)\n"
    "\n"
    "Measured by `miaosha-load matrix` in 21.5 s against real `miaosha-server` "
    "processes on Redis 127.0.0.1:6390. Every cell is a measurement; **DIFF** marks "
    "a cell whose outcome is not the expected one.\n"
    "\n"
    "| mode | race (1 instance) | crash while holding | Redis paused 2 s |\n"
    "|---|---|---|---|\n"
    "| `none` | **ok oversell 61/20** | ok recovers 35ms | **ok oversell 95/20** |\n"
    "| `token` | ok exact 20/20 | **DIFF stuck** | ok safe 503 646ms |\n"
    "\n"
    "## Cells\n"
    "\n"
    "| scenario | mode | expected | measured | sold / stock | oversold | undersold "
    "| lock_busy | lock_lost | deleted another's lock | acked_lost | acked_over_sto"
    "ck | recovery ms | reason |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    "| race | none | oversell | oversell | 61 / 20 | 41 | 0 | 0 | 0 | 0 | 0 | 41 | "
    " | cell 0: a\\|b <c> |\n"
    "| race | token | exact | exact | 20 / 20 | 0 | 0 | 3 | 1 | 0 | 0 | 0 |  | cell"
    " 1: a\\|b <c> |\n"
    "| crash | none | recovers | recovers | 1 / 20 | 0 | 0 | 6 | 2 | 1 | 0 | 0 | 35"
    " | cell 2: a\\|b <c> |\n"
    "| crash | token | recovers | stuck **DIFF** | 0 / 20 | 0 | 0 | 9 | 3 | 1 | 0 |"
    " 0 | stuck > 3000 | cell 3: a\\|b <c> |\n"
    "| redis-pause | none | oversell | oversell | 95 / 20 | 75 | 0 | 12 | 4 | 2 | 7"
    " | 75 |  | cell 4: a\\|b <c> |\n"
    "| redis-pause | token | safe|stuck | safe | 20 / 20 | 0 | 0 | 15 | 5 | 2 | 0 |"
    " 0 |  | cell 5: a\\|b <c> |\n"
    "\n"
    "## Fault cells\n"
    "\n"
    "Times in ms (— = not applicable): how long the fault lasted, when the dead "
    "holder's lock was gone after the kill, the slowest 503 while Redis was "
    "unavailable, when every instance answered without 503 after Redis was back, the "
    "first sale after the fault ended.\n"
    "\n"
    "| scenario | mode | 503s | unacknowledged | fault | lock freed | 503 within | "
    "reconnect | next sale |\n"
    "|---|---|---|---|---|---|---|---|---|\n"
    "| redis-pause | none | 4 | 0 | 2003 | — | 310 | — | 1502 |\n"
    "| redis-pause | token | 4 | 0 | 2003 | — | 646 | — | 1502 |\n"
    "\n"
    "1 cell(s) differ from the expected outcome.\n";

typedef struct rendered {
    char *text, *md, *csv, *svg, *html; /* malloc'd, NUL-terminated */
} rendered;

static char *slurp(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    TU_REQUIRE(f != NULL, "open %s", p);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    TU_REQUIRE(m != NULL, "open_memstream");
    int ch;
    while ((ch = fgetc(f)) != EOF)
        fputc(ch, m);
    fclose(f);
    fclose(m);
    unlink(p);
    return buf;
}

/* Every x and y attribute (and translate()) of the svg lies on its
 * 1600 x 900 canvas: nothing drawn off the slide. */
static void svg_fits(const char *svg, const char *what)
{
    int n = 0, off = 0;
    for (const char *p = svg; (p = strpbrk(p, "xy(")) != NULL; p++) {
        double v = -1, v2 = -1;
        int is_x = *p == 'x';
        if (p > svg && p[-1] != ' ' && p[-1] != 'e') /* " x=", " y=", "translate(" */
            continue;
        if (*p == '(') {
            if (sscanf(p, "(%lf,%lf)", &v, &v2) != 2)
                continue;
            n++;
            off += v < 0 || v > 1600 || v2 < 0 || v2 > 900;
            continue;
        }
        if (sscanf(p + 1, "=\"%lf\"", &v) != 1 && sscanf(p + 2, "=\"%lf\"", &v) != 1)
            continue;
        n++;
        off += v < 0 || v > (is_x ? 1600 : 900);
    }
    TU_CHECK(n > 20 && off == 0, "%s svg: %d of %d coordinates off the 1600x900 canvas", what, off,
             n);
}

static void render(lg_report_lang lang, rendered *out)
{
    char dir[] = "/tmp/miaosha-lg-report-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    lg_matrix_cfg cfg;
    static lg_matrix_result r;
    fake_matrix(&cfg, &r, dir);
    size_t len = 0;
    FILE *m = open_memstream(&out->text, &len);
    TU_REQUIRE(m != NULL, "open_memstream");
    lg_matrix_print(m, &cfg, &r, lang);
    fclose(m);
    char err[256];
    TU_REQUIRE(lg_matrix_write_files(&cfg, &r, lang, err, sizeof err) == 0, "write: %s", err);
    out->md = slurp(dir, "matrix.md");
    out->csv = slurp(dir, "matrix.csv");
    out->svg = slurp(dir, "matrix.svg");
    TU_REQUIRE(lg_matrix_write_html(&cfg, &r, lang, err, sizeof err) == 0, "html: %s", err);
    out->html = slurp(dir, "matrix.html");
    rmdir(dir);
}

static void rendered_free(rendered *r)
{
    free(r->text);
    free(r->md);
    free(r->csv);
    free(r->svg);
    free(r->html);
}

/* Terminal columns of s's first n bytes, by the test's own reckoning (the
 * characters a Chinese report uses: CJK ideographs, CJK and fullwidth
 * punctuation are 2 columns), not by lg_text_width. */
static size_t columns(const char *s, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x80) {
            w++;
            i++;
            continue;
        }
        size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
        unsigned long cp = len == 2 ? (b & 0x1Fu) : len == 3 ? (b & 0x0Fu) : (b & 0x07u);
        for (size_t k = 1; k < len; k++)
            cp = cp << 6 | ((unsigned char)s[i + k] & 0x3Fu);
        w += (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
                     (cp >= 0xFF00 && cp <= 0xFF60)
                 ? 2
                 : 1;
        i += len;
    }
    return w;
}

/* The line of text that starts with prefix (at a line start), copied into
 * buf; 0 when there is none. */
static int line_starting(const char *text, const char *prefix, char *buf, size_t len)
{
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, prefix, strlen(prefix)))
            continue;
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, len, "%.*s", (int)n, p);
        return 1;
    }
    return 0;
}

/* The display columns at which each " | " of line starts. */
static int bar_columns(const char *line, size_t *cols, int max)
{
    int n = 0;
    for (const char *p = strstr(line, " | "); p && n < max; p = strstr(p + 3, " | "))
        cols[n++] = columns(line, (size_t)(p - line));
    return n;
}

static void test_report_lang(void)
{
    lg_report_lang l = LG_LANG_ZH;
    TU_CHECK(lg_report_lang_parse("en", &l) == 0 && l == LG_LANG_EN, "en");
    TU_CHECK(lg_report_lang_parse("zh", &l) == 0 && l == LG_LANG_ZH, "zh");
    const char *bad[] = {"xx", "ZH", "zh-CN", "", "en ", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        l = LG_LANG_ZH;
        TU_CHECK(lg_report_lang_parse(bad[i], &l) == -1 && l == LG_LANG_ZH, "'%s' refused",
                 bad[i] ? bad[i] : "(null)");
    }
    TU_CHECK(lg_text_width("") == 0 && lg_text_width("redis-pause") == 11, "ascii");
    TU_CHECK(lg_text_width("超卖") == 4 && lg_text_width("Redis 重启") == 10, "CJK: 2 columns");
    TU_CHECK(lg_text_width("（快速）") == 8 && lg_text_width("、") == 2, "CJK punctuation");
    TU_CHECK(lg_text_width("—") == 1 && lg_text_width("\xff") == 1 &&
                 lg_text_width("\xe8\xb6") == 2 &&
                 lg_text_width("a\xe8\xb6"
                               "b") == 4,
             "em dash narrow, invalid bytes one column each");
}

static void test_report_en(void)
{
    rendered en;
    render(LG_LANG_EN, &en);
    TU_CHECK(!strcmp(en.text, golden_en_text), "English table as before:\n%s", en.text);
    TU_CHECK(!strcmp(en.md, golden_en_md), "English matrix.md as before:\n%s", en.md);
    /* no XML declaration, one plain font, English words */
    TU_CHECK(!strncmp(en.svg, "<svg xmlns=", 11) &&
                 strstr(en.svg, "font-family=\"sans-serif\" font-size=\"13\">\n") &&
                 strstr(en.svg, ">miaosha: sold vs stock per lock mode and scenario (quick)<") &&
                 strstr(en.svg, ">token (DIFF)<") && strstr(en.svg, ">stuck<"),
             "English svg:\n%.600s", en.svg);
    /* a slide: 16:9, and a legend for the colours and the labels */
    TU_CHECK(strstr(en.svg, "width=\"1600\" height=\"900\" viewBox=\"0 0 1600 900\"") != NULL,
             "the svg is 16:9:\n%.300s", en.svg);
    TU_CHECK(strstr(en.svg, ">oversold: sold more than the stock<") &&
                 strstr(en.svg, ">exact: sold the stock<") && strstr(en.svg, ">the stock<") &&
                 strstr(en.svg, "12/10 above a bar = sold / stock") &&
                 strstr(en.svg, "\"(DIFF)\" after a mode"),
             "the svg's legend");
    svg_fits(en.svg, "en");
    TU_CHECK(strstr(en.html, "<h2>How to read a cell</h2>") &&
                 strstr(en.html, "<td class=\"pass\">ok exact 20/20</td>") &&
                 strstr(en.html, "<td class=\"diff\">DIFF exact 20/20</td>") &&
                 strstr(en.html, "<td class=\"pass oversold\">ok oversell 200/20</td>") &&
                 strstr(en.html, "sold / stock: the units acknowledged as sold"),
             "matrix.html's legend: ok, DIFF, sold/stock, the colours");
    TU_CHECK(!strncmp(en.csv, "scenario,mode,expected,measured,pass,", 37) &&
                 strstr(en.csv, "\nredis-pause,token,safe|stuck,safe,true,20,20,"),
             "csv:\n%s", en.csv);
    rendered_free(&en);
}

static void test_report_zh(void)
{
    rendered en, zh;
    render(LG_LANG_EN, &en);
    render(LG_LANG_ZH, &zh);
    /* the words */
    const char *text_words[] = {"miaosha 超卖矩阵（快速） — redis 127.0.0.1:6390 — 21.5 秒\n",
                                "并发竞争",
                                "持锁崩溃",
                                "Redis 暂停",
                                "符合 超卖 61/20",
                                "符合 准确 20/20",
                                "符合 恢复 35ms",
                                "不符 卡死",
                                "符合 安全 503 646ms",
                                "安全或卡死",
                                "锁丢失",
                                "误删他锁",
                                "\n1 个格子与预期不符\n"};
    for (size_t i = 0; i < sizeof text_words / sizeof text_words[0]; i++)
        TU_CHECK(strstr(zh.text, text_words[i]) != NULL, "zh table has '%s':\n%s", text_words[i],
                 zh.text);
    const char *english[] = {"ok ", "DIFF", "oversell", "exact", "recovers", "stuck", "scenario"};
    char table[4096];
    const char *end = strstr(zh.text, "场景");
    snprintf(table, sizeof table, "%.*s", end ? (int)(end - zh.text) : 0, zh.text);
    for (size_t i = 0; i < sizeof english / sizeof english[0]; i++)
        TU_CHECK(strstr(table, english[i]) == NULL, "no '%s' in the zh table:\n%s", english[i],
                 table);
    const char *md_words[] = {
        "# miaosha 超卖矩阵（快速）\n",
        "| 模式 | 并发竞争（1 个实例） | 持锁时崩溃 | Redis 暂停 2 秒 |\n",
        "| `none` | **符合 超卖 61/20** | 符合 恢复 35ms | **符合 超卖 95/20** |\n",
        "| `token` | 符合 准确 20/20 | **不符 卡死** | 符合 安全 503 646ms |\n",
        "| 持锁崩溃 | token | 恢复 | 卡死 **不符** | 0 / 20 |",
        "卡死 > 3000",
        "| Redis 暂停 | token | 安全或卡死 | 安全 |",
        "## 故障场景的格子",
        "\n1 个格子与预期不符。\n"};
    for (size_t i = 0; i < sizeof md_words / sizeof md_words[0]; i++)
        TU_CHECK(strstr(zh.md, md_words[i]) != NULL, "zh matrix.md has '%s':\n%s", md_words[i],
                 zh.md);
    TU_CHECK(!strncmp(zh.svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 44),
             "zh svg declares UTF-8:\n%.200s", zh.svg);
    TU_CHECK(strstr(zh.svg, "font-family=\"'Noto Sans CJK SC', ") &&
                 strstr(zh.svg, "'WenQuanYi Micro Hei', ") && strstr(zh.svg, "sans-serif\" "),
             "zh svg names CJK fonts, then sans-serif");
    TU_CHECK(strstr(zh.svg, "售出量与库存（快速）") && strstr(zh.svg, ">并发竞争（1 个实例）<") &&
                 strstr(zh.svg, ">token（不符）<") && strstr(zh.svg, ">卡死<") &&
                 strstr(zh.svg, "标注：崩溃后第一笔成交") && strstr(zh.svg, "#d62728"),
             "zh svg words:\n%s", zh.svg);
    TU_CHECK(strstr(zh.svg, ">超卖：售出多于库存<") && strstr(zh.svg, "柱上的 12/10 = 售出 / 库存"),
             "the zh svg's legend");
    svg_fits(zh.svg, "zh");
    TU_CHECK(strstr(zh.html, "<h2>怎样读一个格子</h2>") &&
                 strstr(zh.html, "<td class=\"diff\">不符 准确 20/20</td>"),
             "the zh matrix.html's legend");
    /* programs read the csv: the same bytes in every language */
    TU_CHECK(!strcmp(zh.csv, en.csv), "csv identical in zh and en");
    /* columns aligned by display width: every row's " | " at the header's
     * column; the reason column and the fault figures end where their
     * headings do */
    char hdr[1024], row[1024];
    size_t hc[8], rc[8];
    TU_REQUIRE(line_starting(zh.text, "模式", hdr, sizeof hdr), "zh header:\n%s", zh.text);
    int nh = bar_columns(hdr, hc, 8);
    TU_CHECK(nh == 3 && hc[0] == 10 && hc[1] == 10 + 3 + 24 && hc[2] == 10 + 2 * (3 + 24),
             "header bars at %zu %zu %zu", hc[0], hc[1], hc[2]);
    const char *rows[] = {"none ", "token "};
    for (size_t i = 0; i < 2; i++) {
        TU_REQUIRE(line_starting(zh.text, rows[i], row, sizeof row), "row %s", rows[i]);
        int nr = bar_columns(row, rc, 8);
        TU_CHECK(nr == nh && !memcmp(hc, rc, sizeof hc[0] * (size_t)nh) &&
                     columns(row, strlen(row)) == columns(hdr, strlen(hdr)),
                 "row '%s' aligned with '%s'", row, hdr);
    }
    TU_REQUIRE(line_starting(zh.text, "场景", hdr, sizeof hdr), "zh cells header");
    size_t reason_col = columns(hdr, (size_t)(strstr(hdr, "原因") - hdr));
    int cells = 0;
    for (const char *p = zh.text; (p = strstr(p, "cell ")) != NULL; p += 5) {
        const char *bol = p;
        while (bol > zh.text && bol[-1] != '\n')
            bol--;
        TU_CHECK(columns(bol, (size_t)(p - bol)) == reason_col, "reason at column %zu, not %zu",
                 columns(bol, (size_t)(p - bol)), reason_col);
        cells++;
    }
    TU_CHECK(cells == 6, "6 cell lines (%d)", cells);
    TU_REQUIRE(line_starting(zh.text, "故障 ", hdr, sizeof hdr), "zh fault header");
    size_t resume_end = columns(hdr, (size_t)(strstr(hdr, "恢复") - hdr)) + 4;
    TU_REQUIRE(line_starting(zh.text, "Redis 暂停    token          4 ", row, sizeof row),
               "fault row");
    TU_CHECK(columns(row, strlen(row)) == resume_end, "fault figures end at %zu, heading at %zu",
             columns(row, strlen(row)), resume_end);
    rendered_free(&en);
    rendered_free(&zh);
}

/* A timeline page of a hand-written trace: hostile values stay inside the
 * JSON block (no "</script>" in the data, < > & as \u escapes), the title
 * escapes the SKU, a line that is not JSON is refused. */
static void test_timeline_page(void)
{
    const char *trace =
        "{\"header\":true,\"sku\":\"</script><b>x\",\"instance\":\"i1\",\"anchor_wall_us\":"
        "1795457331551013,\"anchor_mono_us\":4319440152,\"oldest_seq\":3,\"last_seq\":4}\n"
        "\r\n"
        "{\"seq\":3,\"instance\":\"i1\",\"worker\":0,\"user\":\"<script>alert(1)</script>&\","
        "\"received_us\":4320177173,\"stock_read\":5,\"stock_written\":4,\"status\":200}\n";
    lg_trace_set set;
    lg_trace_set_init(&set);
    char err[256];
    TU_REQUIRE(lg_trace_add_text(&set, trace, strlen(trace), err, sizeof err) == 0, "add: %s", err);
    TU_CHECK(set.records == 1 && set.instances == 1, "records %llu instances %d",
             (unsigned long long)set.records, set.instances);
    TU_CHECK(set.truncated == 1, "oldest_seq 3 > 1: records were overwritten");
    TU_CHECK(strstr(set.json, "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\\u0026") != NULL,
             "escaped user: %s", set.json);
    TU_CHECK(strchr(set.json, '<') == NULL && strchr(set.json, '>') == NULL &&
                 strchr(set.json, '&') == NULL,
             "no raw < > & in the data: %s", set.json);
    TU_CHECK(strstr(set.json, "1795457331551013") != NULL, "µs anchor kept exactly: %s", set.json);

    char dir[] = "/tmp/miaosha-lg-timeline-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char path[600];
    snprintf(path, sizeof path, "%s/t.html", dir);
    lg_audit a = {.stock = 4, .initial = 5, .sold = 1, .orders = 1};
    /* the burst sent 9: 8 not in the trace, 5 of them answered by the flag */
    lg_timeline_page page = {"<img src=x>", "none", "a \"caption\" & more", "zh", &a, 9, 5};
    TU_REQUIRE(lg_timeline_write(path, &page, &set, err, sizeof err) == 0, "write: %s", err);
    char *html = slurp(dir, "t.html");
    TU_CHECK(strstr(html, "<img") == NULL && strstr(html, "&lt;img src=x&gt;") != NULL,
             "the SKU is escaped");
    TU_CHECK(strstr(html, "a &quot;caption&quot; &amp; more") != NULL, "the caption is escaped");
    TU_CHECK(strstr(html, "<script>alert") == NULL && strstr(html, "</script><b>") == NULL,
             "nothing of the data leaves its block");
    TU_CHECK(strstr(html, "id=\"audit-oversold\">0<") != NULL, "the audit's oversold");
    TU_CHECK(strstr(html, "lang: 'zh'") != NULL && strstr(html, "购买时间线") != NULL,
             "Chinese page");
    TU_CHECK(strstr(html, "window.miaoshaTimeline") != NULL, "the renderer is inlined");
    TU_CHECK(strstr(html, "<p class=\"left-out\" data-sent=\"9\" data-left-out=\"8\" "
                          "data-local=\"5\">") != NULL &&
                 strstr(html, "5 由实例本地的售罄标记直接回答") != NULL &&
                 strstr(html, "3 因其他原因没有追踪") != NULL,
             "the page says what it leaves out: 5 from the flag, 3 other");
    free(html);

    /* a saved trace (nothing sent known): nothing said about the rest */
    page.sent = page.sold_out_local = 0;
    page.lang = "en";
    TU_REQUIRE(lg_timeline_write(path, &page, &set, err, sizeof err) == 0, "write: %s", err);
    html = slurp(dir, "t.html");
    TU_CHECK(strstr(html, "left-out") == NULL, "no left-out line without a burst");
    rmdir(dir);
    free(html);
    lg_trace_set_free(&set);

    lg_trace_set_init(&set);
    const char *bad = "{\"seq\":1}\nalert(1)\n";
    TU_CHECK(lg_trace_add_text(&set, bad, strlen(bad), err, sizeof err) < 0 &&
                 strstr(err, "line 2") != NULL,
             "a line that is not JSON: %s", err);
    lg_trace_set_free(&set);
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
    test_orders_bounded();
    test_purchase_body();
    test_report_lang();
    test_report_en();
    test_report_zh();
    test_timeline_page();
    return tu_done();
}
