/* reqfuzz.c — miaosha-reqfuzz, the live request fuzzer (see README.md).
 *
 * Starts its own redis-server and miaosha-server on free loopback ports
 * with the process kit (proc/: children in this session, killed with this
 * process, the server's port read from its log), then sends them
 * generated requests from a few threads over raw sockets: valid purchases,
 * stock reads and resets, and malformed ones (bad methods, huge and odd
 * URIs, %00, unknown, duplicate and bad parameters, huge and broken
 * headers, chunked and oversized bodies, broken request lines, mutated
 * bytes, pipelining), over keep-alive and fresh connections. Bounded by a
 * request count and a time limit.
 *
 * Fails (exit 1) when the server dies, answers 500, stops answering a
 * well-formed request within 10 s, stops answering /healthz, grows its RSS
 * by more than the bound after the warm-up, or does not exit 0 on SIGTERM.
 * Every failing request is printed (escaped) so it can be replayed. Exit 2:
 * bad usage or the servers could not be started.
 *
 * raw sockets, not libcurl: most of what it sends is what a client library
 * refuses to produce. Responses are read with the load generator's parser
 * (lg_http.h), which therefore meets the server's every odd reply too. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lg_http.h"
#include "pk_http.h"
#include "pk_proc.h"
#include "pk_redis.h"

#define TOKEN "fuzz-admin-token"
#define SKU "fz"
#define WELL_FORMED_TIMEOUT_MS 10000
#define MAX_RESPONSE (8u << 20)
#define MAX_RECORDED 8 /* failing requests printed per kind */
/* The server runs with the default listen.max_header_bytes (16384), so
 * libmicrohttpd's per-connection memory pool is 2 x 16384 + 4096 bytes
 * (service/README.md); request heads near its end are the odd ones. */
#define POOL_BYTES (2 * 16384 + 4096)

typedef struct opts {
    const char *server, *redis;
    long long requests;
    int max_seconds, threads, rss_growth_mb, verbose, no_pool_edge;
    unsigned seed;
} opts;

static opts O = {NULL, "redis-server", 1000000, 300, 2, 32, 0, 0, 0};
static int g_port, g_redis_port;
static pid_t g_server_pid, g_redis_pid;
static char g_dir[256];

static atomic_llong g_next; /* requests handed out */
static atomic_int g_stop;
static atomic_llong g_status[1000];
static atomic_llong g_connect_fail, g_closed, g_unparsable, g_bad_noreply, g_bad_stalled,
    g_timeouts, g_fresh, g_reused;
static atomic_int g_recorded_500, g_recorded_timeout, g_recorded_unparsable, g_recorded_stall,
    g_recorded_closed, g_recorded_503;
static pthread_mutex_t g_print = PTHREAD_MUTEX_INITIALIZER;

/* ---- a growable byte buffer for one request ---- */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void need(buf *b, size_t n)
{
    if (b->len + n + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
        fprintf(stderr, "reqfuzz: out of memory\n");
        exit(2);
    }
    b->p = p;
    b->cap = cap;
}

static void putn(buf *b, const void *d, size_t n)
{
    need(b, n);
    memcpy(b->p + b->len, d, n);
    b->len += n;
    b->p[b->len] = '\0';
}

__attribute__((format(printf, 2, 3))) static void put(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    need(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void putrep(buf *b, char ch, size_t n)
{
    need(b, n);
    memset(b->p + b->len, ch, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* ---- a small per-thread generator (xorshift64*) ---- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}
static unsigned below(uint64_t *s, unsigned n)
{
    return (unsigned)(rnd(s) % n);
}
#define PICK(s, arr) ((arr)[below(s, sizeof(arr) / sizeof((arr)[0]))])

/* ---- request generation ---- */

enum {
    R_KEEP = 1,        /* well-formed: the connection may be reused */
    R_FRESH = 2,       /* send on a new connection */
    R_HALF_CLOSE = 4,  /* shut down our side after sending (maybe incomplete) */
    R_NO_REPLY_OK = 8, /* malformed: the server may close without a reply */
    R_HEAD = 16,       /* HEAD: the reply has no body; read its header only */
    R_TWO = 32,        /* two pipelined requests: two replies */
};

static const char *const modes[] = {"none", "mutex", "setnx", "token", "reentrant", "fenced"};

static void query_value(uint64_t *s, buf *b)
{
    static const char *const odd[] = {
        "",
        "-1",
        "1e3",
        "0x10",
        " 1",
        "1 ",
        "+5",
        "999999999999",
        "9999999999999",
        "18446744073709551616",
        "%00",
        "%zz",
        "%",
        "a%00b",
        "%C3%A9",
        "%FF",
        "..",
        "1.5",
        "null",
        "[]",
        "%20",
        "demo%2Fx",
        "%0d%0aX-Injected:%201",
        "\xff",
    };
    if (below(s, 2))
        put(b, "%u", below(s, 3) ? below(s, 10) : (unsigned)rnd(s));
    else
        put(b, "%s", PICK(s, odd));
}

/* A query of valid and invalid parameters for a purchase. */
static void purchase_query(uint64_t *s, buf *b, int valid)
{
    char sep = '?';
    if (valid) {
        put(b, "?sku=%s&user=u%u", below(s, 8) ? SKU : "fz2", below(s, 100000));
        if (below(s, 3) == 0)
            put(b, "&work_ms=%u", below(s, 3));
        if (below(s, 3) == 0)
            put(b, "&wait_ms=%u", below(s, 6));
        if (below(s, 4) == 0)
            put(b, "&reenter=%u", below(s, 4));
        if (below(s, 4) == 0)
            put(b, "&lease_ms=%u", 1 + below(s, 10000));
        return;
    }
    static const char *const names[] = {
        "sku",   "user", "work_ms", "lease_ms", "wait_ms", "reenter", "fault", "stock", "offset",
        "limit", "x",    "SKU",     "sku%00",   "",        "&",       "=",     "a[]",   "%73ku",
    };
    unsigned n = below(s, 5) == 0 ? 30 + below(s, 10) : 1 + below(s, 5);
    for (unsigned i = 0; i < n; i++) {
        put(b, "%c%s", sep, PICK(s, names));
        sep = '&';
        if (below(s, 6)) {
            put(b, "=");
            query_value(s, b);
        }
    }
}

static void path_for(uint64_t *s, buf *b, int valid)
{
    size_t start = b->len;
    switch (below(s, valid ? 5 : 9)) {
    case 0:
    case 1:
        put(b, "/miaosha/%s", PICK(s, modes));
        purchase_query(s, b, valid);
        break;
    case 2: put(b, "/stock/%s", SKU); break;
    case 3: put(b, "/orders/%s?offset=%u&limit=%u", SKU, below(s, 50), 1 + below(s, 20)); break;
    case 4: put(b, "%s", below(s, 2) ? "/healthz" : below(s, 2) ? "/stats" : "/metrics"); break;
    default: {
        static const char *const odd[] = {
            "/",
            "*",
            "//miaosha//token",
            "/miaosha/token/",
            "/miaosha/",
            "/miaosha/TOKEN",
            "/miaosha/../stock/fz",
            "/stock/",
            "/stock/fz/extra",
            "/stock/fz%00evil",
            "/stock/%zz",
            "/stock/a%2Fb",
            "/orders/fz?limit=0",
            "/orders/fz?limit=1001",
            "/orders/fz?offset=-1",
            "/orders/fz?offset=&limit=",
            "/orders/fz?limit",
            "/healthz?x=1",
            "/healthz#frag",
            "http://127.0.0.1/healthz",
            "/%",
            "/\xc3\xa9",
            "/stock/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 65 */
            "/miaosha/token?sku=fz&sku=fz",
            "/miaosha/token?fault=crash_in_section",
            "/miaosha/setnx?fault=crash_before_expire",
            "/miaosha/none?&&&",
            "/miaosha/none?=",
            "/metrics?%00",
            "/stats/",
            "/ stock",
            "/miaosha/mutex?reenter=9",
            "/miaosha/token?work_ms=60001",
            "/miaosha/token?lease_ms=0",
            "/miaosha/token?wait_ms=60001",
        };
        put(b, "%s", PICK(s, odd));
        if (below(s, 3) == 0) { /* long */
            size_t n, target;
            put(b, "%cpad=", strchr(b->p + start, '?') ? '&' : '?');
            switch (below(s, O.no_pool_edge ? 2 : 3)) {
            case 0: /* around the URI limit */ n = 1900 + below(s, 300); break;
            case 1: /* past it, up to past the connection's memory pool */
                n = 2048 + below(s, O.no_pool_edge ? 28000 : 40000);
                break;
            default: /* a URI that ends within 400 bytes of the pool's end */
                target = POOL_BYTES - 400 + below(s, 400);
                n = target > b->len - start ? target - (b->len - start) : 1;
                break;
            }
            putrep(b, 'a', n);
        }
        break;
    }
    }
}

static void headers_end(buf *b, uint64_t *s, unsigned flags)
{
    put(b, "Host: 127.0.0.1\r\n");
    if (below(s, 8) == 0)
        put(b, "User-Agent: miaosha-reqfuzz\r\nAccept: */*\r\n");
    if (flags & R_HEAD)
        put(b, "Connection: close\r\n");
    put(b, "\r\n");
}

/* One valid request: purchases mostly, reads, stock resets. */
static unsigned gen_valid(uint64_t *s, buf *b)
{
    unsigned k = below(s, 100);
    if (k < 70) {
        const char *m = below(s, 2) ? "POST" : "GET";
        put(b, "%s /miaosha/%s", m, PICK(s, modes));
        purchase_query(s, b, 1);
        put(b, " HTTP/1.1\r\n");
        if (m[0] == 'P' && below(s, 3) == 0) { /* a parameter in the body instead */
            put(b, "Content-Length: 11\r\n");
            headers_end(b, s, 0);
            put(b, "{\"trace\":1}");
        } else {
            headers_end(b, s, 0);
        }
        return R_KEEP;
    }
    if (k < 95) {
        unsigned flags = R_KEEP;
        const char *m = "GET";
        if (below(s, 10) == 0) {
            m = "HEAD";
            flags = R_HEAD | R_FRESH;
        }
        put(b, "%s ", m);
        switch (below(s, 5)) {
        case 0: put(b, "/stock/%s", SKU); break;
        case 1:
            put(b, "/orders/%s?offset=%u&limit=%u", SKU, below(s, 100), 1 + below(s, 20));
            break;
        case 2: put(b, "/healthz"); break;
        case 3: put(b, "/stats"); break;
        default: put(b, "/metrics"); break;
        }
        put(b, " HTTP/1.%u\r\n", below(s, 10) ? 1 : 0);
        if (b->p[b->len - 3] == '0' && !(flags & R_HEAD))
            put(b, "Connection: keep-alive\r\n");
        headers_end(b, s, flags);
        return flags;
    }
    /* A reset: keeps the stock up and the order list short. */
    put(b, "PUT /stock/%s HTTP/1.1\r\nAuthorization: Bearer " TOKEN "\r\n",
        below(s, 4) ? SKU : "fz2");
    char body[64];
    int n = snprintf(body, sizeof body, "{\"stock\":%u}", 1000000u);
    put(b, "Content-Type: application/json\r\nContent-Length: %d\r\n", n);
    headers_end(b, s, 0);
    putn(b, body, (size_t)n);
    return R_KEEP;
}

static void chunked_body(uint64_t *s, buf *b, unsigned *flags)
{
    switch (below(s, 8)) {
    case 0: put(b, "d\r\n{\"stock\":100}\r\n0\r\n\r\n"); break;
    case 1: put(b, "3\r\n{\"s\r\na;ext=1\r\ntock\":100}\r\n0\r\nTrailer: x\r\n\r\n"); break;
    case 2: put(b, "zz\r\nhello\r\n0\r\n\r\n"); break;
    case 3: put(b, "5\r\nhelloXX0\r\n\r\n"); break;
    case 4: /* announces far more than it sends */
        put(b, "fffffff\r\nabc");
        *flags |= R_HALF_CLOSE;
        break;
    case 5: /* over the 4096-byte body limit in small chunks */
        for (int i = 0; i < 40; i++) {
            put(b, "80\r\n");
            putrep(b, 'x', 128);
            put(b, "\r\n");
        }
        put(b, "0\r\n\r\n");
        break;
    case 6:
        put(b, "ffffffffffffffffffffffff\r\n\r\n");
        *flags |= R_HALF_CLOSE;
        break;
    default: put(b, "0\r\n\r\n"); break;
    }
}

/* One malformed request, or a valid one in an odd form. */
static unsigned gen_bad(uint64_t *s, buf *b, const buf *valid)
{
    /* Our side shuts down after the request: a request the server is still
     * reading (a body announced but never sent) then ends at once instead
     * of at the idle timeout, and a complete one is still answered. */
    unsigned flags = R_FRESH | R_NO_REPLY_OK | R_HALF_CLOSE;
    switch (below(s, 8)) {
    case 0: { /* methods */
        static const char *const m[] = {
            "DELETE", "PATCH", "OPTIONS", "TRACE",   "CONNECT",  "PROPFIND", "get",
            "Get",    "POSTX", "G\x01T",  "PUT\x00", "M-SEARCH", "BREW",     "PRI",
        };
        const char *mm = PICK(s, m);
        if (below(s, 10) == 0) {
            putrep(b, 'X', 10 + below(s, 5000));
        } else {
            putn(b, mm, strlen(mm) + (strcmp(mm, "PUT") == 0));
        }
        put(b, " ");
        path_for(s, b, below(s, 2));
        put(b, " HTTP/1.1\r\n");
        headers_end(b, s, 0);
        break;
    }
    case 1: /* odd URIs and parameters on well-formed requests */
        put(b, "%s ", below(s, 3) ? "GET" : below(s, 2) ? "POST" : "PUT");
        path_for(s, b, 0);
        put(b, " HTTP/1.1\r\n");
        headers_end(b, s, 0);
        /* A well-formed request must be answered, and keep-alive must work
         * after it. Not past twice the header limit: libmicrohttpd closes
         * such a head with our bytes unread, and the reset that follows may
         * discard its reply before we read it. */
        if (below(s, 2) && b->len < 2 * 16384)
            flags = R_KEEP;
        break;
    case 2: { /* headers */
        put(b, "GET ");
        path_for(s, b, 1);
        put(b, " HTTP/1.1\r\n");
        switch (below(s, 10)) {
        case 0:
            put(b, "X-Big: ");
            putrep(b, 'h', 8000 + below(s, 40000));
            put(b, "\r\n");
            break;
        case 1:
            for (unsigned i = 0, n = 100 + below(s, 600); i < n; i++)
                put(b, "X-H%u: %u\r\n", i, i);
            break;
        case 2: put(b, "NoColonHere\r\n"); break;
        case 3: putn(b, "X-Nul: a\0b\r\n", 12); break;
        case 4: put(b, "X-Fold: a\r\n  continued\r\n"); break;
        case 5: put(b, "Content-Length: 5\r\nContent-Length: 6\r\n"); break;
        case 6: put(b, "Content-Length: -1\r\n"); break;
        case 7: put(b, "Transfer-Encoding: gzip\r\n"); break;
        case 8: put(b, "Expect: 100-continue\r\nContent-Length: 0\r\n"); break;
        default: put(b, ": empty-name\r\n\x7f: x\r\n"); break;
        }
        if (below(s, 2))
            put(b, "Host: 127.0.0.1\r\n");
        put(b, "\r\n");
        break;
    }
    case 3: { /* bodies */
        const char *m = below(s, 2) ? "PUT" : "POST";
        put(b, "%s ", m);
        if (m[1] == 'U')
            put(b, "/stock/%s", SKU);
        else
            put(b, "/miaosha/%s", PICK(s, modes));
        put(b, " HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        if (below(s, 2))
            put(b, "Authorization: %s\r\n", below(s, 2) ? "Bearer " TOKEN : "Bearer nope");
        switch (below(s, 6)) {
        case 0:
            put(b, "Transfer-Encoding: chunked\r\n\r\n");
            chunked_body(s, b, &flags);
            break;
        case 1: { /* over the limit, announced */
            unsigned n = 4097 + below(s, 20000);
            put(b, "Content-Length: %u\r\n\r\n", n);
            putrep(b, 'b', n);
            break;
        }
        case 2: /* announced, never sent */
            put(b, "Content-Length: %u\r\n\r\n{\"st", below(s, 2) ? 4000 : 1000000000u);
            flags |= R_HALF_CLOSE;
            break;
        case 3: { /* odd JSON */
            static const char *const j[] = {
                "{\"stock\":-1}",
                "{\"stock\":1e999}",
                "{\"stock\":1.5}",
                "{\"stock\":\"5\"}",
                "{\"stock\":1,\"stock\":2}",
                "[1]",
                "{\"stock\":1} x",
                "{",
                "\"\\u0000\"",
                "{\"stock\":1000000001}",
                "{\"a\":{\"b\":{\"c\":[[[[[[[[]]]]]]]]}}}",
            };
            const char *body = PICK(s, j);
            put(b, "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
            break;
        }
        case 4: /* more than announced: the rest is garbage for the next request */
            put(b, "Content-Length: 2\r\n\r\n{}GARBAGE\r\n\r\n");
            break;
        default: /* both */
            put(b, "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
            break;
        }
        break;
    }
    case 4: { /* broken request lines */
        static const char *const l[] = {
            "GET\r\n\r\n",
            "GET /healthz\r\n\r\n",
            "GET /healthz HTTP/1.1 extra\r\n\r\n",
            "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
            "GET /healthz HTTP/1.1\n\n",
            "\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
            "\r\n\r\n",
            " / HTTP/1.1\r\n\r\n",
            "GET  /healthz  HTTP/1.1\r\n\r\n",
            "GET /healthz HTTP/1.1\r\r\n\r\n",
            "GET /healthz http/1.1\r\n\r\n",
            "GET /healthz HTTP/2.0\r\n\r\n",
            "GET /healthz HTTP/1.10\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            "GET /healthz HTTP/1.1\r\n",
            "GET /healthz\tHTTP/1.1\r\n\r\n",
        };
        static const char nul_line[] = "GET /heal\0thz HTTP/1.1\r\n\r\n";
        if (below(s, 20) == 0)
            putn(b, nul_line, sizeof nul_line - 1);
        else
            put(b, "%s", PICK(s, l));
        flags |= R_HALF_CLOSE;
        break;
    }
    case 5: /* random bytes */
        for (unsigned i = 0, n = below(s, 200); i < n; i++) {
            char ch = (char)rnd(s);
            putn(b, &ch, 1);
        }
        flags |= R_HALF_CLOSE;
        break;
    case 6: { /* mutations of a valid request */
        putn(b, valid->p, valid->len);
        for (unsigned i = 0, n = 1 + below(s, 4); i < n && b->len > 0; i++) {
            size_t at = below(s, (unsigned)b->len);
            switch (below(s, 3)) {
            case 0: b->p[at] = (char)rnd(s); break;
            case 1: b->p[at] ^= (char)(1u << below(s, 8)); break;
            default:
                memmove(b->p + at, b->p + at + 1, b->len - at - 1);
                b->len--;
                break;
            }
        }
        flags |= R_HALF_CLOSE;
        break;
    }
    default: /* pipelined pair of valid requests (not shut down: libmicrohttpd
              * would drop the second once it sees the end of the input) */
        putn(b, valid->p, valid->len);
        putn(b, valid->p, valid->len);
        flags = R_FRESH | R_TWO;
        break;
    }
    return flags;
}

/* ---- the connection ---- */

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Closes with a reset: a million fresh connections must not leave a
 * million TIME_WAIT sockets holding the loopback's ephemeral ports. */
static void close_hard(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

static int send_all(int fd, const char *p, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return -1; /* the server closed: normal for a refused request */
        int left = (int)(deadline - lc_now_ms());
        if (left <= 0)
            return -2;
        struct pollfd pf = {fd, POLLOUT, 0};
        poll(&pf, 1, left);
    }
    return 0;
}

static void print_escaped(FILE *f, const char *p, size_t n)
{
    size_t shown = n > 600 ? 600 : n;
    for (size_t i = 0; i < shown; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r')
            fputs("\\r", f);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\\')
            fputs("\\\\", f);
        else if (ch >= 0x20 && ch < 0x7f)
            fputc(ch, f);
        else
            fprintf(f, "\\x%02x", ch);
    }
    if (shown < n)
        fprintf(f, "... (%zu bytes in all)", n);
}

static void record(atomic_int *counter, const char *what, const buf *req, const char *resp,
                   size_t rlen)
{
    if (atomic_fetch_add(counter, 1) >= MAX_RECORDED)
        return;
    pthread_mutex_lock(&g_print);
    fprintf(stderr, "reqfuzz: %s; request (printf-escaped):\n  ", what);
    print_escaped(stderr, req->p, req->len);
    if (resp && rlen) {
        fprintf(stderr, "\n  response:\n  ");
        print_escaped(stderr, resp, rlen);
    }
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_print);
}

/* A malformed request the server has not answered within 2 ms: parked
 * (its connection left open) and polled while the worker goes on, so a
 * late reply, a 500 included, is still seen without the worker waiting.
 * libmicrohttpd keeps a connection that sent half a request until its idle
 * timeout, shut down or not; such a one counts as "left unanswered". */
#define PARK_MAX 200
#define PARK_MS 2000
#define BAD_WAIT_MS 2
typedef struct parked {
    int fd;
    int64_t deadline;
    size_t have, reqlen;
    char head[16];
    char req[600]; /* the start of the request, for the report */
} parked;

typedef struct worker {
    uint64_t rng;
    buf req, valid;
    char *rbuf;
    parked park[PARK_MAX];
    int nparked;
} worker;

/* Reads the replies to one request. Returns 1 when the connection may be
 * reused, 0 when it must be closed. */
static int exchange(worker *w, int fd, unsigned flags)
{
    int64_t deadline = lc_now_ms() +
                       ((flags & R_NO_REPLY_OK) ? BAD_WAIT_MS : WELL_FORMED_TIMEOUT_MS);
    int sent = send_all(fd, w->req.p, w->req.len, deadline);
    if (sent == -2 && !(flags & R_NO_REPLY_OK)) { /* the server stopped reading */
        atomic_fetch_add(&g_timeouts, 1);
        record(&g_recorded_timeout, "request not taken within 10 s", &w->req, NULL, 0);
        return 0;
    }
    if (flags & R_HALF_CLOSE)
        shutdown(fd, SHUT_WR);
    int replies = (flags & R_TWO) ? 2 : 1, reuse = 0;
    size_t have = 0;
    lg_http_parser p;
    lg_http_parser_init(&p, 0);
    while (replies > 0) {
        lg_http_rc rc = LG_HTTP_INCOMPLETE;
        if (flags & R_HEAD) {
            char *end = have ? memmem(w->rbuf, have, "\r\n\r\n", 4) : NULL;
            if (end && lg_http_parse(&p, w->rbuf, (size_t)(end - w->rbuf) + 4) != LG_HTTP_ERROR) {
                atomic_fetch_add(&g_status[p.status % 1000], 1);
                return 0;
            }
        } else if (have) {
            rc = lg_http_parse(&p, w->rbuf, have);
        }
        if (rc == LG_HTTP_DONE) {
            int st = p.status;
            atomic_fetch_add(&g_status[st % 1000], 1);
            if (st == 500)
                record(&g_recorded_500, "500 response", &w->req, w->rbuf, p.consumed);
            else if (st == 503 && O.verbose)
                record(&g_recorded_503, "503 response", &w->req, w->rbuf, p.consumed);
            reuse = p.keep_alive;
            memmove(w->rbuf, w->rbuf + p.consumed, have - p.consumed);
            have -= p.consumed;
            lg_http_parser_init(&p, 0);
            replies--;
            continue;
        }
        if (rc == LG_HTTP_ERROR) {
            atomic_fetch_add(&g_unparsable, 1);
            record(&g_recorded_unparsable, "a reply the parser refuses", &w->req, w->rbuf, have);
            return 0;
        }
        int left = (int)(deadline - lc_now_ms());
        if (left <= 0) {
            if ((flags & R_NO_REPLY_OK) && have == 0) {
                return 2; /* park it */
            } else if (flags & R_NO_REPLY_OK) {
                atomic_fetch_add(&g_bad_stalled, 1); /* half a reply: no wait for the rest */
            } else {
                atomic_fetch_add(&g_timeouts, 1);
                record(&g_recorded_timeout, "no reply within 10 s", &w->req, w->rbuf, have);
            }
            return 0;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, left > 200 ? 200 : left) <= 0)
            continue;
        if (have == MAX_RESPONSE) {
            atomic_fetch_add(&g_unparsable, 1);
            return 0;
        }
        ssize_t r = recv(fd, w->rbuf + have, MAX_RESPONSE - have, 0);
        if (r > 0) {
            have += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        /* the server closed (or reset) the connection */
        if (have > 0 && !(flags & R_HEAD) && lg_http_eof(&p, w->rbuf, have) == LG_HTTP_DONE) {
            atomic_fetch_add(&g_status[p.status % 1000], 1);
            if (p.status == 500)
                record(&g_recorded_500, "500 response", &w->req, w->rbuf, have);
            return 0;
        }
        if (have > 0) {
            atomic_fetch_add(&g_unparsable, 1);
            record(&g_recorded_unparsable, "a truncated reply", &w->req, w->rbuf, have);
        } else if (flags & R_NO_REPLY_OK) {
            atomic_fetch_add(&g_bad_noreply, 1);
        } else {
            atomic_fetch_add(&g_closed, 1);
            record(&g_recorded_closed, "a well-formed request closed without a reply", &w->req,
                   NULL, 0);
        }
        return 0;
    }
    return reuse && (flags & R_KEEP) && !(flags & R_HALF_CLOSE);
}

static void park_count(parked *k, atomic_llong *counter)
{
    atomic_fetch_add(counter, 1);
    if (counter == &g_bad_stalled && O.verbose) {
        buf b = {k->req, k->reqlen, 0};
        record(&g_recorded_stall, "a malformed request unanswered for 2 s", &b, NULL, 0);
    }
}

/* Polls the parked connections; wait_ms > 0 blocks until the oldest one
 * is settled (the lot is full). */
static void park_poll(worker *w, int wait_ms)
{
    struct pollfd pf[PARK_MAX];
    for (int i = 0; i < w->nparked; i++)
        pf[i] = (struct pollfd){w->park[i].fd, POLLIN, 0};
    if (w->nparked == 0 || (poll(pf, (nfds_t)w->nparked, wait_ms) < 0 && errno != EINTR))
        return;
    int64_t now = lc_now_ms();
    for (int i = 0; i < w->nparked;) {
        parked *k = &w->park[i];
        int done = 0;
        if (pf[i].revents) {
            ssize_t r = recv(k->fd, k->head + k->have, sizeof k->head - k->have, MSG_DONTWAIT);
            if (r > 0)
                k->have += (size_t)r;
            if (k->have >= 12) {
                done = 1;
                if (memcmp(k->head, "HTTP/1.", 7) == 0 && k->head[9] >= '1' && k->head[9] <= '9') {
                    int st = atoi(k->head + 9);
                    atomic_fetch_add(&g_status[st % 1000], 1);
                    if (st == 500) {
                        buf b = {k->req, k->reqlen, 0};
                        record(&g_recorded_500, "500 response (late)", &b, k->head, k->have);
                    }
                } else {
                    atomic_fetch_add(&g_unparsable, 1);
                }
            } else if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                done = 1;
                park_count(k, k->have ? &g_unparsable : &g_bad_noreply);
            }
        }
        if (!done && now >= k->deadline) {
            done = 1;
            park_count(k, &g_bad_stalled);
        }
        if (done) {
            close_hard(k->fd);
            *k = w->park[--w->nparked];
            pf[i] = pf[w->nparked];
        } else {
            i++;
        }
    }
}

static void park(worker *w, int fd)
{
    while (w->nparked == PARK_MAX)
        park_poll(w, 10);
    parked *k = &w->park[w->nparked++];
    k->fd = fd;
    k->deadline = lc_now_ms() + PARK_MS;
    k->have = 0;
    k->reqlen = w->req.len < sizeof k->req ? w->req.len : sizeof k->req;
    memcpy(k->req, w->req.p, k->reqlen);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    int fd = -1;
    w->rbuf = malloc(MAX_RESPONSE);
    if (w->rbuf == NULL)
        return NULL;
    while (!atomic_load(&g_stop) && atomic_fetch_add(&g_next, 1) < O.requests) {
        w->req.len = 0;
        w->valid.len = 0;
        unsigned vflags = gen_valid(&w->rng, &w->valid);
        unsigned flags;
        int valid = below(&w->rng, 100) < 55;
        while (!valid && (vflags & R_HEAD)) { /* a HEAD's reply has no body: not for pairs */
            w->valid.len = 0;
            vflags = gen_valid(&w->rng, &w->valid);
        }
        if (valid) {
            buf t = w->req;
            w->req = w->valid;
            w->valid = t;
            flags = vflags;
            if (below(&w->rng, 5) == 0)
                flags |= R_FRESH;
        } else {
            flags = gen_bad(&w->rng, &w->req, &w->valid);
        }
        if (flags & R_FRESH) {
            if (fd >= 0)
                close_hard(fd);
            fd = -1;
        }
        if (fd < 0) {
            fd = connect_server();
            if (fd < 0) {
                atomic_fetch_add(&g_connect_fail, 1);
                usleep(1000);
                continue;
            }
            atomic_fetch_add(&g_fresh, 1);
        } else {
            atomic_fetch_add(&g_reused, 1);
        }
        int kept = exchange(w, fd, flags);
        if (kept == 2)
            park(w, fd);
        else if (kept == 0)
            close_hard(fd);
        if (kept != 1)
            fd = -1;
        park_poll(w, 0);
    }
    while (w->nparked > 0)
        park_poll(w, 50);
    if (fd >= 0)
        close_hard(fd);
    free(w->rbuf);
    return NULL;
}

/* ---- the servers ---- */

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static void dump_file(const char *path, long max_lines)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    if (f == NULL)
        return;
    long n = 0;
    while (fgets(line, sizeof line, f))
        n++;
    rewind(f);
    for (long i = 0; fgets(line, sizeof line, f);)
        if (i++ >= n - max_lines)
            fprintf(stderr, "  | %s", line);
    fclose(f);
}

static int start_servers(void)
{
    char rlog[300], slog[300], redis_addr[64], err[512];
    snprintf(g_dir, sizeof g_dir, "/tmp/miaosha-reqfuzz-XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return -1;
    snprintf(rlog, sizeof rlog, "%s/redis.log", g_dir);
    snprintf(slog, sizeof slog, "%s/server.log", g_dir);
    /* Both die with the fuzzer, whatever ends it. */
    pk_redis_opts ro;
    pk_redis_opts_init(&ro);
    ro.server = O.redis;
    ro.dir = g_dir;
    const char *rargs[] = {"--appendonly", "no", NULL};
    ro.args = rargs;
    ro.logpath = rlog;
    ro.flags = PK_SPAWN_DIE_WITH_PARENT;
    ro.attempts = 5;
    ro.timeout_ms = 5000;
    g_redis_pid = pk_redis_start(&ro, &g_redis_port, err, sizeof err);
    if (g_redis_pid < 0) {
        g_redis_pid = 0;
        fprintf(stderr, "reqfuzz: redis-server (%s) did not start: %s; its log:\n", O.redis, err);
        dump_file(rlog, 20);
        return -1;
    }
    snprintf(redis_addr, sizeof redis_addr, "127.0.0.1:%d", g_redis_port);
    const char *sargv[] = {O.server,
                           "--listen",
                           "127.0.0.1",
                           "--port",
                           "0",
                           "--redis",
                           redis_addr,
                           "--set",
                           "admin_token=" TOKEN,
                           "--set",
                           "purchase.sku=" SKU,
                           "--set",
                           "purchase.initial_stock=1000000",
                           NULL};
    g_server_pid = pk_spawn(sargv, slog, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    if (g_server_pid < 0) {
        g_server_pid = 0;
        fprintf(stderr, "reqfuzz: miaosha-server (%s): %s\n", O.server, err);
        return -1;
    }
    /* --port 0: the port it bound is in its log */
    pk_http_wait_opts w;
    pk_http_wait_opts_init(&w);
    w.port_log = slog;
    switch (pk_http_wait_healthy(g_server_pid, &g_port, &w, NULL)) {
    case PK_HTTP_HEALTHY: return 0;
    case PK_HTTP_EXITED:
        g_server_pid = 0;
        fprintf(stderr, "reqfuzz: miaosha-server (%s) exited at start; its log:\n", O.server);
        break;
    default:
        fprintf(stderr,
                "reqfuzz: miaosha-server did not answer /healthz 200 within 10 s; its log:\n");
        break;
    }
    dump_file(slog, 20);
    return -1;
}

/* SIGTERM, then up to 15 s for the exit; returns the exit status, -1 when
 * it had to be killed, -2 - signal when a signal ended it. */
static int stop_child(pid_t pid)
{
    int status = 0;
    pk_signal_stop(pid);
    if (pk_wait_status(pid, 15000, &status))
        return WIFEXITED(status) ? WEXITSTATUS(status) : -2 - WTERMSIG(status);
    pk_kill(pid);
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: miaosha-reqfuzz --server PATH [--redis-server PATH] [--requests N]\n"
               "         [--max-seconds S] [--threads T] [--seed N] [--rss-growth-mb M]\n"
               "         [--no-pool-edge] [-v]\n"
               "Starts redis-server and miaosha-server on free loopback ports and sends them\n"
               "N (default 1000000) generated valid and malformed requests from T (2)\n"
               "threads, for at most S (300) seconds. Exit 0 pass, 1 a finding, 2 setup.\n"
               "RSS may grow by M MiB (32) after the warm-up. --no-pool-edge: no request\n"
               "URI longer than 32 KiB (none near the end of libmicrohttpd's connection\n"
               "pool). -v: print malformed requests left unanswered and 503s too.\n");
}

int main(int argc, char **argv)
{
    O.seed = (unsigned)time(NULL);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0) {
            O.verbose = 1;
            continue;
        } else if (strcmp(a, "--no-pool-edge") == 0) {
            O.no_pool_edge = 1;
            continue;
        }
        if (v == NULL) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--server") == 0)
            O.server = v;
        else if (strcmp(a, "--redis-server") == 0)
            O.redis = v;
        else if (strcmp(a, "--requests") == 0)
            O.requests = atoll(v);
        else if (strcmp(a, "--max-seconds") == 0)
            O.max_seconds = atoi(v);
        else if (strcmp(a, "--threads") == 0)
            O.threads = atoi(v);
        else if (strcmp(a, "--seed") == 0)
            O.seed = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--rss-growth-mb") == 0)
            O.rss_growth_mb = atoi(v);
        else {
            usage(stderr);
            return 2;
        }
    }
    if (O.server == NULL || O.requests < 1 || O.max_seconds < 1 || O.threads < 1 ||
        O.threads > 64 || O.rss_growth_mb < 0) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if (start_servers() != 0) {
        pk_kill_all(2000);
        return 2;
    }
    printf("reqfuzz: miaosha-server pid %d port %d, redis-server pid %d port %d, seed %u, "
           "logs in %s\n",
           (int)g_server_pid, g_port, (int)g_redis_pid, g_redis_port, O.seed, g_dir);
    fflush(stdout);

    long rss_boot = rss_kib(g_server_pid), rss_start = -1, rss_mid = -1, rss_end = -1,
         rss_max = rss_boot;
    worker *w = calloc((size_t)O.threads, sizeof *w);
    pthread_t *t = calloc((size_t)O.threads, sizeof *t);
    if (w == NULL || t == NULL)
        return 2;
    int64_t t0 = lc_now_ms(), deadline = t0 + (int64_t)O.max_seconds * 1000, last_report = t0;
    for (int i = 0; i < O.threads; i++) {
        w[i].rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)O.seed << 16) ^ (uint64_t)(i + 1);
        pthread_create(&t[i], NULL, worker_main, &w[i]);
    }
    int died = 0, died_status = 0, deadline_hit = 0;
    /* Warm-up and middle: 10 % and 50 % of the requests or of the time,
     * whichever comes first. */
    long long warm = O.requests / 10, mid = O.requests / 2;
    int64_t warm_at = t0 + (int64_t)O.max_seconds * 100, mid_at = t0 + (int64_t)O.max_seconds * 500;
    for (;;) {
        usleep(50000);
        long long done = atomic_load(&g_next);
        long r = rss_kib(g_server_pid);
        if (r > rss_max)
            rss_max = r;
        if (rss_start < 0 && (done >= warm || lc_now_ms() >= warm_at))
            rss_start = r;
        if (rss_mid < 0 && (done >= mid || lc_now_ms() >= mid_at))
            rss_mid = r;
        int status;
        if (pk_wait_status(g_server_pid, 0, &status)) {
            died = 1;
            died_status = status;
            atomic_store(&g_stop, 1);
            break;
        }
        if (lc_now_ms() >= deadline) {
            deadline_hit = 1;
            atomic_store(&g_stop, 1);
            break;
        }
        if (done >= O.requests)
            break;
        if (lc_now_ms() - last_report >= 10000) {
            last_report = lc_now_ms();
            printf("reqfuzz: %lld requests, %.0f s, server RSS %ld KiB\n", done,
                   (double)(last_report - t0) / 1000.0, r);
            fflush(stdout);
        }
    }
    for (int i = 0; i < O.threads; i++)
        pthread_join(t[i], NULL);
    double secs = (double)(lc_now_ms() - t0) / 1000.0;
    long long sent = atomic_load(&g_next);
    if (sent > O.requests)
        sent = O.requests;
    int fail = 0, health = 0, exit_status = 0;
    if (!died) {
        rss_end = rss_kib(g_server_pid);
        if (rss_start < 0)
            rss_start = rss_boot;
        if (rss_mid < 0)
            rss_mid = rss_end;
        health = pk_http_status(g_port, "/healthz", 5000);
        exit_status = stop_child(g_server_pid);
    }
    stop_child(g_redis_pid);

    long long answered = 0, n500 = atomic_load(&g_status[500]);
    printf("reqfuzz: %lld requests in %.1f s (%.0f requests/s), %d threads, seed %u%s\n", sent,
           secs, secs > 0 ? (double)sent / secs : 0.0, O.threads, O.seed,
           deadline_hit ? ", stopped by --max-seconds" : "");
    printf("reqfuzz: connections: %lld fresh, %lld requests on a reused keep-alive connection\n",
           (long long)atomic_load(&g_fresh), (long long)atomic_load(&g_reused));
    printf("reqfuzz: statuses:");
    for (int i = 0; i < 1000; i++) {
        long long n = atomic_load(&g_status[i]);
        if (n) {
            printf(" %d:%lld", i, n);
            answered += n;
        }
    }
    printf(" (%lld replies)\n", answered);
    printf("reqfuzz: malformed requests closed without a reply: %lld, left unanswered for 2 s: "
           "%lld; well-formed requests closed without a reply: %lld; unparsable replies: %lld; "
           "well-formed requests without a reply in 10 s: %lld\n",
           (long long)atomic_load(&g_bad_noreply), (long long)atomic_load(&g_bad_stalled),
           (long long)atomic_load(&g_closed), (long long)atomic_load(&g_unparsable),
           (long long)atomic_load(&g_timeouts));
    printf("reqfuzz: 500 responses: %lld\n", n500);
    if (died) {
        printf("reqfuzz: FAIL: miaosha-server died (%s %d); the end of its log:\n",
               WIFSIGNALED(died_status) ? "signal" : "exit status",
               WIFSIGNALED(died_status) ? WTERMSIG(died_status) : WEXITSTATUS(died_status));
        fflush(stdout);
        char slog[300];
        snprintf(slog, sizeof slog, "%s/server.log", g_dir);
        dump_file(slog, 40);
        return 1;
    }
    long growth = rss_end - rss_start;
    printf("reqfuzz: server RSS KiB: at start %ld, after warm-up (10%%) %ld, middle %ld, "
           "end %ld, max %ld; growth after warm-up %ld KiB (bound %d MiB)\n",
           rss_boot, rss_start, rss_mid, rss_end, rss_max, growth, O.rss_growth_mb);
    printf("reqfuzz: /healthz at the end: %d; exit status on SIGTERM: %d\n", health, exit_status);
    if (n500 > 0) {
        printf("reqfuzz: FAIL: %lld responses with status 500 (requests above)\n", n500);
        fail = 1;
    }
    if (atomic_load(&g_timeouts) > 0) {
        printf("reqfuzz: FAIL: well-formed requests went unanswered for 10 s\n");
        fail = 1;
    }
    if (atomic_load(&g_connect_fail) > 0) {
        printf("reqfuzz: FAIL: %lld connections refused\n",
               (long long)atomic_load(&g_connect_fail));
        fail = 1;
    }
    if (atomic_load(&g_closed) > 0 || atomic_load(&g_unparsable) > 0) {
        printf("reqfuzz: FAIL: well-formed requests lost their reply, or a reply was not HTTP\n");
        fail = 1;
    }
    if (growth > (long)O.rss_growth_mb * 1024) {
        printf("reqfuzz: FAIL: RSS grew by more than %d MiB after the warm-up\n", O.rss_growth_mb);
        fail = 1;
    }
    if (health != 200) {
        printf("reqfuzz: FAIL: /healthz answered %d at the end\n", health);
        fail = 1;
    }
    if (exit_status != 0) {
        printf("reqfuzz: FAIL: the server did not exit 0 on SIGTERM (%d); the end of its log:\n",
               exit_status);
        fflush(stdout);
        char slog[300];
        snprintf(slog, sizeof slog, "%s/server.log", g_dir);
        dump_file(slog, 40);
        fail = 1;
    }
    printf("reqfuzz: %s\n", fail ? "FAIL (logs kept in the directory above)" : "PASS");
    if (!fail) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "%s/server.log", g_dir);
        unlink(cmd);
        snprintf(cmd, sizeof cmd, "%s/redis.log", g_dir);
        unlink(cmd);
        rmdir(g_dir);
    }
    for (int i = 0; i < O.threads; i++) {
        free(w[i].req.p);
        free(w[i].valid.p);
    }
    free(w);
    free(t);
    return fail;
}
