/* test_service_metrics.c — /metrics graphs the lesson, and Prometheus's own
 * checker accepts it. On a private redis-server, metrics.sku_gauges=3 and
 * metrics.refresh_ms=100:
 *
 *   - traffic on four SKUs in four modes (none oversells on purpose) and a
 *     never-stocked SKU; the gauges miaosha_stock, miaosha_sold,
 *     miaosha_oversold and miaosha_undersold{sku} equal GET /stock/{sku}
 *     for the three SKUs seen last, the first one has made room (the bound),
 *     the never-stocked SKU and the seeded but never bought one are absent;
 *   - a stock set by hand in Redis shows within a few refreshes (fresh
 *     values without a Redis round trip per scrape);
 *   - a SKU split into stock buckets: the gauges sum its buckets as its
 *     audit does (oversold and undersold bucket by bucket);
 *   - the process_* series and miaosha_build_info (version as --version
 *     prints it, the git revision of the source tree);
 *   - `promtool check metrics` (Debian's prometheus package; missing, the
 *     test fails) on that live /metrics;
 *   - every miaosha_* series the Grafana dashboard (scaleout/observe) plots
 *     is in it;
 *   - Redis killed: the gauges leave /metrics rather than stay stale, and
 *     the rest is still answered;
 *   - metrics.sku_gauges=0: no gauge at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "svc_test.h"

static svc_server srv;
static tu_redis rd;

/* The value of the sample line "name{sku="sku"} v" in the body, or -1 when
 * absent. */
static long long gauge(const char *body, const char *name, const char *sku)
{
    char line[200];
    snprintf(line, sizeof line, "\n%s{sku=\"%s\"} ", name, sku);
    const char *at = strstr(body, line);
    return at ? strtoll(at + strlen(line), NULL, 10) : -1;
}

/* The value of the unlabelled sample "name v", or -1 when absent. */
static double sample(const char *body, const char *name)
{
    char line[120];
    snprintf(line, sizeof line, "\n%s ", name);
    const char *at = strstr(body, line);
    return at ? strtod(at + strlen(line), NULL) : -1;
}

static char *metrics(void)
{
    svc_resp r = {0};
    svc_req(&srv, "GET", "/metrics", NULL, NULL, &r);
    TU_CHECK(r.status == 200, "/metrics %ld", r.status);
    char *body = r.body ? strdup(r.body) : strdup("");
    svc_resp_free(&r);
    return body;
}

/* 1 when the four gauges of sku equal its audit. */
static int gauges_match(const char *body, const char *sku, const svc_audit *a)
{
    return gauge(body, "miaosha_stock", sku) == a->stock &&
           gauge(body, "miaosha_sold", sku) == a->sold &&
           gauge(body, "miaosha_oversold", sku) == a->oversold &&
           gauge(body, "miaosha_undersold", sku) == a->undersold;
}

/* Polls /metrics until sku's gauges equal its audit (up to 3 s, scaled). */
static int wait_match(const char *sku, svc_audit *a)
{
    int64_t end = lc_now_ms() + tu_slack(3000);
    int ok = 0;
    while (!ok && lc_now_ms() < end) {
        TU_REQUIRE(svc_get_audit(&srv, sku, a) == 200, "audit %s", sku);
        char *body = metrics();
        ok = gauges_match(body, sku, a);
        free(body);
        if (!ok)
            tu_sleep_ms(50);
    }
    return ok;
}

/* n buyers of sku in mode at once, work_ms widening the race. */
static void buy(const char *mode, const char *sku, int stock, int n, int work_ms)
{
    char **paths = calloc((size_t)n, sizeof *paths);
    svc_resp *out = calloc((size_t)n, sizeof *out);
    TU_REQUIRE(paths && out, "memory");
    if (stock >= 0)
        TU_REQUIRE(svc_set_stock(&srv, sku, stock, NULL) == 200, "stock %s", sku);
    for (int i = 0; i < n; i++) {
        paths[i] = malloc(200);
        snprintf(paths[i], 200, "/miaosha/%s?sku=%s&user=u%d&work_ms=%d&wait_ms=5000", mode, sku, i,
                 work_ms);
    }
    svc_burst(&srv, "POST", paths, n, out);
    for (int i = 0; i < n; i++) {
        svc_resp_free(&out[i]);
        free(paths[i]);
    }
    free(paths);
    free(out);
}

/* promtool check metrics on body: 0 when it finds nothing to say. */
static int promtool(const char *body)
{
    char path[] = "/tmp/miaosha-metrics-XXXXXX";
    int fd = mkstemp(path);
    TU_REQUIRE(fd >= 0, "temp file");
    size_t len = strlen(body);
    TU_REQUIRE(write(fd, body, len) == (ssize_t)len, "write");
    close(fd);
    char cmd[400], out[4096] = "";
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    TU_REQUIRE(p != NULL, "popen");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    unlink(path);
    if (rc != 0)
        fprintf(stderr, "promtool check metrics (status %d):\n%s\n", rc, out);
    return rc;
}

/* Every miaosha_* name in the dashboard's queries is a series of body
 * (a histogram's by its _bucket). */
static void dashboard_names(const char *body)
{
    const char *src = getenv("MIAOSHA_SOURCE_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/scaleout/observe/grafana/dashboards/miaosha.json",
             src ? src : ".");
    FILE *f = fopen(path, "r");
    TU_REQUIRE(f != NULL, "dashboard %s", path);
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    int names = 0;
    for (const char *p = strstr(text, "miaosha_"); p != NULL; p = strstr(p + 1, "miaosha_")) {
        char name[100];
        size_t k = 0;
        while (k + 1 < sizeof name && (p[k] == '_' || (p[k] >= 'a' && p[k] <= 'z')))
            name[k] = p[k], k++;
        name[k] = '\0';
        char sample[120];
        snprintf(sample, sizeof sample, "\n%s{", name);
        int found = strstr(body, sample) != NULL;
        for (int k2 = 0; !found && k2 < 2; k2++) { /* unlabelled, or a histogram's */
            snprintf(sample, sizeof sample, k2 ? "\n%s_bucket{" : "\n%s ", name);
            found = strstr(body, sample) != NULL;
        }
        TU_CHECK(found, "the dashboard's %s is a series of /metrics", name);
        names++;
    }
    TU_CHECK(names >= 5, "the dashboard queries miaosha_* series (%d)", names);
}

static void test_gauges(void)
{
    svc_audit a;
    buy("none", "g-none", 10, 24, 30); /* oversells */
    buy("token", "g-token", 10, 14, 0);
    buy("lua", "g-lua", 10, 14, 0);
    TU_CHECK(wait_match("g-none", &a) && a.oversold > 0,
             "g-none: gauges = audit, oversold %lld > 0", a.oversold);
    TU_CHECK(wait_match("g-token", &a) && a.sold == 10 && a.oversold == 0,
             "g-token: gauges = audit");
    TU_CHECK(wait_match("g-lua", &a) && a.sold == 10, "g-lua: gauges = audit");
    /* A never-stocked SKU is no SKU; demo was seeded, never bought. */
    svc_resp r = {0};
    svc_req(&srv, "POST", "/miaosha/token?sku=g-never", NULL, NULL, &r);
    TU_CHECK(r.status == 404, "g-never: 404 %ld", r.status);
    svc_resp_free(&r);
    /* The fourth SKU pushes out the least recently seen, g-none. */
    buy("fenced", "g-fenced", 5, 6, 0);
    TU_CHECK(wait_match("g-fenced", &a) && a.sold == 5, "g-fenced: gauges = audit");
    char *body = metrics();
    TU_CHECK(gauge(body, "miaosha_stock", "g-none") == -1, "g-none made room (sku_gauges=3)");
    TU_CHECK(gauge(body, "miaosha_stock", "g-token") >= 0 &&
                 gauge(body, "miaosha_stock", "g-lua") >= 0,
             "g-token and g-lua still there");
    TU_CHECK(gauge(body, "miaosha_stock", "g-never") == -1, "no gauge for a never-stocked SKU");
    TU_CHECK(gauge(body, "miaosha_stock", "demo") == -1, "no gauge for a SKU never seen");
    TU_CHECK(strstr(body, "# TYPE miaosha_oversold gauge\n") != NULL, "miaosha_oversold: a gauge");
    free(body);
    /* Seen again, g-none comes back (pushing out g-token, now the least
     * recent). */
    buy("none", "g-none", -1, 1, 0);
    TU_CHECK(wait_match("g-none", &a) && a.oversold > 0, "g-none back, oversold %lld", a.oversold);
    /* A value set by hand shows within a few refreshes. */
    tu_redis_int(rd.port, "SET miaosha:{g-lua}:stock 7");
    TU_CHECK(wait_match("g-lua", &a) && a.stock == 7, "g-lua: the hand-set stock 7 shows");
}

/* A SKU split into stock buckets: the gauges sum the buckets as the audit
 * does, oversold and undersold bucket by bucket. Bucket 0 oversold by 2
 * and bucket 1 undersold by 2, set by hand: summed first they would
 * cancel out, and the SKU's own keys (stock 0, initial 10) would read as
 * 10 undersold. */
static void test_bucket_gauges(void)
{
    svc_resp r = {0};
    svc_req(&srv, "PUT", "/stock/g-split?stock=10&buckets=2", NULL, NULL, &r);
    TU_REQUIRE(r.status == 200, "g-split: 10 in 2 buckets: %ld", r.status);
    svc_resp_free(&r);
    buy("none", "g-split", -1, 1, 0);
    char rec[256] = "";
    int salt[2] = {0, 0};
    tu_redis_str(rd.port, rec, sizeof rec, "GET miaosha:{g-split}:layout");
    TU_REQUIRE(sscanf(rec, "2 %*s %d,%d", &salt[0], &salt[1]) == 2, "layout record %s", rec);
    for (int b = 0; b < 2; b++) {
        char tag[64], ok[8] = "";
        if (salt[b] > 0)
            snprintf(tag, sizeof tag, "g-split~%d.%d", b, salt[b]);
        else
            snprintf(tag, sizeof tag, "g-split~%d", b);
        tu_redis_str(rd.port, ok, sizeof ok, "MSET miaosha:{%s}:stock %d miaosha:{%s}:sold %d", tag,
                     b == 0 ? 5 : 3, tag, b == 0 ? 2 : 0);
        TU_CHECK(strcmp(ok, "OK") == 0, "bucket %d set by hand", b);
    }
    svc_audit a = {0};
    int match = wait_match("g-split", &a); /* before the message reads a */
    TU_CHECK(match && a.stock == 8 && a.sold == 2 && a.oversold == 2 && a.undersold == 2,
             "g-split: gauges = audit, per-bucket sums: stock %lld sold %lld oversold %lld "
             "undersold %lld",
             a.stock, a.sold, a.oversold, a.undersold);
}

static void test_process(void)
{
    char *body = metrics();
    const char *names[] = {"process_cpu_seconds_total",
                           "process_resident_memory_bytes",
                           "process_virtual_memory_bytes",
                           "process_open_fds",
                           "process_max_fds",
                           "process_start_time_seconds"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double v = sample(body, names[i]);
        TU_CHECK(v > 0 || (i == 0 && v == 0), "%s present, %g", names[i], v);
    }
    double start = sample(body, "process_start_time_seconds"), now = (double)time(NULL);
    TU_CHECK(start > now - 120 && start <= now + 1,
             "start time %.2f within the last 2 minutes (%.0f)", start, now);
    TU_CHECK(sample(body, "process_resident_memory_bytes") > 1e6, "resident memory > 1 MB");
    TU_CHECK(sample(body, "process_open_fds") >= 3, "open fds >= 3");
    /* build_info: the version --version prints, the source tree's commit */
    char ver[200] = "";
    const char *args[] = {SVC_TEST_SERVER, "--version", NULL};
    TU_CHECK(svc_run_exit(args, 5000, ver, sizeof ver) == 0, "--version");
    const char *space = strchr(ver, ' ');
    char want[120];
    snprintf(want, sizeof want, "miaosha_build_info{version=\"%.*s\",revision=\"",
             space ? (int)strcspn(space + 1, "\n") : 0, space ? space + 1 : "");
    const char *bi = strstr(body, want);
    TU_CHECK(bi != NULL, "build_info with the version of --version (%s): %s", ver,
             strstr(body, "miaosha_build_info{") ? strstr(body, "miaosha_build_info{") : "none");
    /* The revision: 12 hex digits (and -dirty) naming a commit of the
     * source tree's history (the binary may be older than HEAD when a
     * commit came after the build). */
    char rev[64] = "", cmd[600];
    const char *rv = bi ? bi + strlen(want) : "";
    size_t hex = strspn(rv, "0123456789abcdef");
    snprintf(rev, sizeof rev, "%.*s", (int)(hex < 40 ? hex : 40), rv);
    snprintf(cmd, sizeof cmd, "git -C '%s' cat-file -e '%s^{commit}' 2>/dev/null",
             getenv("MIAOSHA_SOURCE_DIR") ? getenv("MIAOSHA_SOURCE_DIR") : ".", rev);
    TU_CHECK(hex == 12 && (rv[12] == '"' || strncmp(rv + 12, "-dirty\"", 7) == 0) &&
                 system(cmd) == 0,
             "revision %.20s is a commit of the source tree", rv);
    TU_CHECK(bi && strstr(bi, "compiler=\"") && strstr(bi, "\"} 1\n"), "compiler label, value 1");
    free(body);
}

int main(void)
{
    memset(&rd, 0, sizeof rd);
    TU_REQUIRE(tu_redis_start(&rd, 0, NULL) == 0, "private redis");
    const char *extra[] = {
        "--instance-id",          "metrics", "--set", "metrics.sku_gauges=3", "--set",
        "metrics.refresh_ms=100", NULL};
    TU_REQUIRE(svc_start(&srv, rd.port, extra) == 0, "server starts");

    test_gauges();
    test_bucket_gauges();
    test_process();
    char *body = metrics();
    TU_CHECK(promtool(body) == 0,
             "promtool check metrics accepts /metrics (Debian: apt-get install prometheus)");
    dashboard_names(body);
    free(body);

    /* Redis gone: no stale gauge, the rest still answered. */
    tu_redis_kill(&rd, 1);
    int64_t end = lc_now_ms() + tu_slack(5000);
    int gone = 0;
    while (!gone && lc_now_ms() < end) {
        body = metrics();
        gone = strstr(body, "\nmiaosha_stock{") == NULL &&
               strstr(body, "\nmiaosha_purchase_requests_total{") != NULL;
        free(body);
        if (!gone)
            tu_sleep_ms(100);
    }
    TU_CHECK(gone, "Redis down: the gauges leave /metrics, the counters stay");
    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");

    /* metrics.sku_gauges=0: none at all. */
    TU_REQUIRE(tu_redis_start(&rd, 1, NULL) == 0, "redis again");
    const char *off[] = {"--set", "metrics.sku_gauges=0", NULL};
    TU_REQUIRE(svc_start(&srv, rd.port, off) == 0, "server with no gauges");
    buy("token", "g-off", 3, 2, 0);
    tu_sleep_ms(300);
    body = metrics();
    TU_CHECK(strstr(body, "miaosha_stock") == NULL && strstr(body, "process_open_fds") != NULL,
             "sku_gauges=0: no miaosha_stock, the rest there");
    free(body);
    TU_CHECK(svc_stop(&srv, 6000) == 0, "SIGTERM exit 0");
    if (tu_failed)
        svc_dump_log(&srv);
    tu_redis_stop(&rd);
    return tu_done();
}
