/* test_lg_integration.c — miaosha-load against the real miaosha-server
 * ($MIAOSHA_BUILD_DIR/service/miaosha-server) on the suite's redis-server.
 *
 *   test_lg_integration run     `run --expect oversell` for none, `--expect
 *                               safe` for token (one and two instances), the
 *                               expectation flags failing when they should,
 *                               Ctrl-C during a reset that is never answered,
 *                               the audit's GET retried until a late
 *                               server answers, and a short bench of /healthz
 *   test_lg_integration matrix  `matrix --quick`: exit 0 means every cell
 *                               showed its expected outcome; the three
 *                               files are written; `--lang xx` is a usage
 *                               error; then the dup-user and retry cells
 *                               with --buckets 4: one-each, as expected;
 *                               then the buckets column at full size
 *                               (stock 100 in 4, 1000 buyers)
 *   test_lg_integration faults  `matrix --faults --quick` (the faults kill,
 *                               redis-restart, redis-pause over every
 *                               mode): exit 0, and each cell's measured
 *                               outcome and figures read back from
 *                               matrix.csv; then Ctrl-C (SIGINT to the
 *                               matrix only) while its Redis is paused ends
 *                               it with 130 and stops that Redis
 * A missing server binary fails the test: it never skips.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lg_admin.h"
#include "pk_http.h"
#include "pk_proc.h"
#include "pk_redis.h"
#include "tu.h"

/* Removes a test's output directory, or keeps it (and says where) when a
 * check failed. */
static void remove_unless_failed(const char *dir, const char *what)
{
    if (tu_failed == 0)
        pk_rm_tree(dir);
    else
        fprintf(stderr, "%s kept in %s\n", what, dir);
}

static char server[1024], load[1024];
static int redis_port;

static pid_t start_server(int *port, const char *id)
{
    char err[256], ports[16], redis[64];
    pk_http_wait_opts w;
    pk_http_wait_opts_init(&w);
    w.try_timeout_ms = 500;
    w.poll_ms = 50;
    for (int attempt = 0; attempt < 3; attempt++) {
        *port = pk_free_port();
        snprintf(ports, sizeof ports, "%d", *port);
        snprintf(redis, sizeof redis, "127.0.0.1:%d", redis_port);
        const char *argv[] = {server, "--port", ports, "--redis", redis, "--instance-id", id, NULL};
        char logp[256];
        snprintf(logp, sizeof logp, "/tmp/miaosha-lg-test-%s.log", id);
        pid_t pid = pk_spawn(argv, logp, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
        if (pid < 0)
            continue;
        int st = pk_http_wait_healthy(pid, port, &w, NULL);
        if (st == PK_HTTP_HEALTHY)
            return pid;
        if (st == PK_HTTP_TIMEOUT)
            pk_stop(pid, 2000);
        fprintf(stderr, "server did not come up (log %s)\n", logp);
    }
    return -1;
}

/* Runs a shell command line; returns its exit status, stdout in out. */
static int sh(const char *cmd, char *out, size_t outlen)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static long json_num(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(json, k);
    return p ? strtol(p + strlen(k), NULL, 10) : -999;
}

static void test_run(void)
{
    int p1, p2;
    pid_t s1 = start_server(&p1, "lgtest-a");
    pid_t s2 = start_server(&p2, "lgtest-b");
    TU_REQUIRE(s1 > 0 && s2 > 0, "servers up");
    static char out[65536];
    char cmd[4096];
    int rc;

    /* none oversells under a widened race */
    snprintf(cmd, sizeof cmd,
             "%s run --mode none --requests 300 --concurrency 50 --stock 20 --work-ms 10 "
             "--sku lgt-none --target http://127.0.0.1:%d --expect oversell --json",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0, "none --expect oversell exit %d\n%s", rc, out);
    TU_CHECK(json_num(out, "oversold") > 0, "none oversold %ld", json_num(out, "oversold"));
    TU_CHECK(json_num(out, "missing_orders") == 0 && json_num(out, "acked_lost") == 0,
             "none: every 200 is in the order list (acked_lost, and its former name)");
    /* the oversell seen from the buyers' side: more 200s than units */
    TU_CHECK(json_num(out, "stock_at_start") == 20 &&
                 json_num(out, "acked_over_stock") == json_num(out, "ok") - 20 &&
                 json_num(out, "acked_over_stock") > 0,
             "none: acked_over_stock = 200s beyond the stock of 20\n%s", out);
    /* the same run with --expect safe must fail */
    snprintf(cmd, sizeof cmd,
             "%s run --mode none --requests 300 --concurrency 50 --stock 20 --work-ms 10 "
             "--sku lgt-none2 --target http://127.0.0.1:%d --expect safe --csv",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 1, "none --expect safe exit %d\n%s", rc, out);
    /* --csv: a header naming the columns, then one row with as many fields */
    char *nl = strchr(out, '\n');
    int hcols = 1, rcols = 1;
    for (const char *q = out; nl && q < nl; q++)
        hcols += *q == ',';
    for (const char *q = nl ? nl + 1 : ""; *q && *q != '\n'; q++)
        rcols += *q == ',';
    TU_CHECK(
        !strncmp(out, "mode,sku,", 9) && strstr(out, ",oversold,") &&
            strstr(out, ",errors,deleted_other_lock,fenced_out,acked_lost,acked_over_stock\n") &&
            strstr(out, ",missing_orders,") && hcols == rcols,
        "csv header and row (%d / %d columns)\n%s", hcols, rcols, out);
    TU_CHECK(nl && !strncmp(nl + 1, "none,lgt-none2,", 15), "csv row\n%s", out);

    /* token sells exactly the stock */
    snprintf(cmd, sizeof cmd,
             "%s run --mode token --requests 300 --concurrency 50 --stock 20 --work-ms 5 "
             "--lease-ms 10000 --wait-ms 30000 --sku lgt-token --target http://127.0.0.1:%d "
             "--expect safe --json",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0, "token --expect safe exit %d\n%s", rc, out);
    TU_CHECK(json_num(out, "ok") == 20 && json_num(out, "sold") == 20 &&
                 json_num(out, "stock_left") == 0 && json_num(out, "orders_listed") == 20,
             "token sold exactly 20\n%s", out);
    TU_CHECK(json_num(out, "sold_out") == 280, "280 sold_out\n%s", out);
    /* answers are tallied by their error name too, and none named an order */
    TU_CHECK(json_num(out, "409 sold_out") == 280 && json_num(out, "unknown_outcome") == 0 &&
                 json_num(out, "unknown_outcome_sold") == 0,
             "by_error: 280 '409 sold_out', no unknown outcome\n%s", out);
    TU_CHECK(json_num(out, "errors") == 0 && json_num(out, "deleted_other_lock") == 0 &&
                 json_num(out, "lock_lost") == 0 && json_num(out, "acked_lost") == 0 &&
                 json_num(out, "acked_over_stock") == 0,
             "token: no errors, nothing lost or deleted, no 200 beyond the stock\n%s", out);
    /* ... and --expect oversell on it fails */
    snprintf(cmd, sizeof cmd,
             "%s run --mode token --requests 100 --concurrency 20 --stock 10 --wait-ms 30000 "
             "--sku lgt-token2 --target http://127.0.0.1:%d --expect oversell",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 1, "token --expect oversell exit %d\n%s", rc, out);

    /* fenced with every holder slower than its lease: the stale writes are
     * refused and counted (409 fenced_out, apart from sold_out), the books
     * stay exact */
    snprintf(cmd, sizeof cmd,
             "%s run --mode fenced --requests 6 --concurrency 6 --stock 3 --work-ms 300 "
             "--lease-ms 200 --wait-ms 30000 --sku lgt-fenced --target http://127.0.0.1:%d "
             "--expect safe --json",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0, "fenced --expect safe exit %d\n%s", rc, out);
    TU_CHECK(json_num(out, "fenced_out") > 0 && json_num(out, "oversold") == 0 &&
                 json_num(out, "ok") + json_num(out, "sold_out") + json_num(out, "fenced_out") ==
                     6 &&
                 json_num(out, "errors") == 0,
             "fenced: stale writes fenced out, nothing oversold\n%s", out);
    snprintf(cmd, sizeof cmd,
             "%s run --mode fenced --requests 4 --concurrency 4 --stock 3 --work-ms 300 "
             "--lease-ms 200 --wait-ms 30000 --sku lgt-fenced2 --target http://127.0.0.1:%d",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0 && strstr(out, "409 fenced_out") != NULL, "the table shows fenced_out\n%s",
             out);

    /* two instances behind the round-robin: token stays safe */
    snprintf(cmd, sizeof cmd,
             "%s run --mode token --requests 200 --concurrency 40 --stock 15 --work-ms 5 "
             "--lease-ms 10000 --wait-ms 30000 --sku lgt-token-multi --target "
             "http://127.0.0.1:%d --target http://127.0.0.1:%d --expect safe --json",
             load, p1, p2);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0 && json_num(out, "sold") == 15, "token over 2 instances exit %d\n%s", rc, out);

    /* a dead target: requests fail as connect errors, the run still ends */
    int dead = pk_free_port();
    snprintf(cmd, sizeof cmd,
             "%s run --mode token --requests 50 --concurrency 4 --stock 10 --wait-ms 5000 "
             "--sku lgt-dead --target http://127.0.0.1:%d --target http://127.0.0.1:%d "
             "--duration-limit 20 --json",
             load, p1, dead);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0 && json_num(out, "connect") > 0 && json_num(out, "sold") == 10,
             "dead target exit %d\n%s", rc, out);

    /* More connections than descriptors (ulimit -n 64, 100 connections):
     * those that cannot get a socket must not hold the run open once the
     * others have answered every request (it used to run to its deadline) */
    snprintf(cmd, sizeof cmd,
             "ulimit -n 64 && exec %s run --mode token --requests 300 --concurrency 100 "
             "--stock 20 --wait-ms 5000 --sku lgt-emfile --target http://127.0.0.1:%d "
             "--duration-limit 30 --json",
             load, p1);
    int64_t t_em = lc_now_ms();
    rc = sh(cmd, out, sizeof out);
    int64_t em_ms = lc_now_ms() - t_em;
    TU_CHECK(rc == 0 && json_num(out, "sold") == 20 && strstr(out, "\"deadline_hit\":\tfalse") &&
                 em_ms < tu_slack(10000),
             "past the fd limit: exit %d after %lld ms\n%s", rc, (long long)em_ms, out);

    /* Ctrl-C while the stock reset waits on a server that never answers
     * (a socket that listens and never accepts): exit 130 at once, not
     * after the reset's 10 s timeout */
    int silent = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof sa;
    TU_REQUIRE(silent >= 0 && bind(silent, (struct sockaddr *)&sa, sizeof sa) == 0 &&
                   listen(silent, 8) == 0 &&
                   getsockname(silent, (struct sockaddr *)&sa, &salen) == 0,
               "a silent listener");
    char target[64], ierr[64], ilog[] = "/tmp/miaosha-lg-int-XXXXXX";
    snprintf(target, sizeof target, "http://127.0.0.1:%d", ntohs(sa.sin_port));
    int ilogfd = mkstemp(ilog);
    TU_REQUIRE(ilogfd >= 0, "mkstemp");
    close(ilogfd);
    const char *int_argv[] = {load,      "run", "--target",   target, "--sku", "lgt-int",
                              "--stock", "5",   "--requests", "5",    NULL};
    pid_t ip = pk_spawn(int_argv, ilog, PK_SPAWN_DIE_WITH_PARENT, ierr, sizeof ierr);
    TU_REQUIRE(ip > 0, "miaosha-load started: %s", ierr);
    /* the reset's connection waits in the backlog: the PUT is in flight */
    struct pollfd pf = {.fd = silent, .events = POLLIN};
    TU_CHECK(poll(&pf, 1, (int)tu_slack(5000)) == 1, "the reset connected");
    int64_t t_int = lc_now_ms();
    kill(ip, SIGINT);
    int ist = -1;
    if (!pk_wait_status(ip, (int)tu_slack(8000), &ist))
        pk_kill(ip);
    long long int_ms = (long long)(lc_now_ms() - t_int);
    FILE *lf = fopen(ilog, "r");
    char iline[512] = "";
    if (lf) {
        if (!fgets(iline, sizeof iline, lf))
            iline[0] = 0;
        fclose(lf);
    }
    TU_CHECK(WIFEXITED(ist) && WEXITSTATUS(ist) == 130 && int_ms < tu_slack(3000) &&
                 strstr(iline, "interrupted") != NULL,
             "Ctrl-C during the reset: exit 130 (status %d) after %lld ms: %s", ist, int_ms, iline);
    unlink(ilog);
    close(silent);

    /* the audit's GETs are retried: a server that starts listening 50 ms
     * after the call (connection refused at first) still answers it */
    int p3 = pk_free_port();
    char ports3[16], redis3[64], base3[64], aerr[256];
    snprintf(ports3, sizeof ports3, "%d", p3);
    snprintf(redis3, sizeof redis3, "127.0.0.1:%d", redis_port);
    snprintf(base3, sizeof base3, "http://127.0.0.1:%d", p3);
    const char *late_argv[] = {"sh",          "-c",     "sleep 0.05; exec \"$0\" \"$@\"",
                               server,        "--port", ports3,
                               "--redis",     redis3,   "--instance-id",
                               "lgtest-late", NULL};
    char lerr[256];
    pid_t late = pk_spawn(late_argv, NULL, PK_SPAWN_DIE_WITH_PARENT, lerr, sizeof lerr);
    lg_audit la;
    TU_CHECK(late > 0 && lg_admin_audit(base3, "demo", &la, aerr, sizeof aerr) == 0,
             "audit retried until the late server answered: %s", aerr);
    if (late > 0)
        pk_stop(late, 5000);

    /* a server whose one trace ring another SKU took: run --timeline still
     * writes its page, and says on stderr why it is empty */
    int p4 = pk_free_port();
    char ports4[16], base4[64], html[] = "/tmp/miaosha-lg-rings-XXXXXX";
    snprintf(ports4, sizeof ports4, "%d", p4);
    snprintf(base4, sizeof base4, "http://127.0.0.1:%d", p4);
    const char *rings_argv[] = {
        server,          "--port",       ports4,  "--redis",          redis3,
        "--instance-id", "lgtest-rings", "--set", "trace.max_skus=1", NULL};
    pid_t rs = pk_spawn(rings_argv, NULL, PK_SPAWN_DIE_WITH_PARENT, lerr, sizeof lerr);
    TU_REQUIRE(rs > 0 && lg_admin_audit(base4, "demo", &la, aerr, sizeof aerr) == 0,
               "the one-ring server: %s %s", lerr, aerr);
    int hfd = mkstemp(html);
    TU_REQUIRE(hfd >= 0, "mkstemp");
    close(hfd);
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s run --mode token --sku lgt-ring-%d --stock 5 --requests 5 --target %s "
                 "--timeline %s 2>&1",
                 load, i, base4, html);
        rc = sh(cmd, out, sizeof out);
        TU_CHECK(rc == 0 && (strstr(out, "not traced there") != NULL) == (i == 1) &&
                     (i == 0 || strstr(out, "trace.max_skus") != NULL),
                 "run %d on the one-ring server: exit %d, %s\n%s", i, rc,
                 i ? "says the rings were taken" : "traced", out);
    }
    unlink(html);
    pk_stop(rs, 5000);

    /* bench */
    snprintf(cmd, sizeof cmd,
             "%s bench --target http://127.0.0.1:%d --path /healthz --concurrency 16 "
             "--duration 1 --json",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0 && json_num(out, "requests") > 100, "bench exit %d\n%s", rc, out);

    /* usage errors */
    snprintf(cmd, sizeof cmd, "%s run --mode bogus 2>/dev/null", load);
    TU_CHECK(sh(cmd, out, sizeof out) == 2, "bad mode is a usage error");
    const char *usage[] = {"run --sku 'a b'",
                           "run --requests +5",
                           "run --requests ' 5'",
                           "run --fault bogus",
                           "run --target http://127.0.0.1:+80",
                           "run --admin-token \"$(printf 's\\r\\nX: 1')\"",
                           "bench --path 'a b'",
                           "bench --duration nan",
                           "matrix --modes ''",
                           "matrix --time-factor ''",
                           "run --acked-out /nonexistent/dir/ids.txt"};
    for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s %s 2>&1", load, usage[i]);
        rc = sh(cmd, out, sizeof out);
        TU_CHECK(rc == 2, "'%s' is a usage error (exit %d)\n%s", usage[i], rc, out);
    }
    /* the environment's token is held to the flag's rules by matrix too */
    snprintf(cmd, sizeof cmd,
             "MIAOSHA_ADMIN_TOKEN=\"$(printf 's\\r\\nX: 1')\" %s matrix --quick 2>&1", load);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "admin token"),
             "matrix with a CR LF in $MIAOSHA_ADMIN_TOKEN: exit %d\n%s", rc, out);
    /* no purchase answered: not a verdict (exit 3), whatever --expect says */
    snprintf(cmd, sizeof cmd,
             "%s run --target http://127.0.0.1:%d --mode redlock --sku lgt-nolock --stock 5 "
             "--requests 10 --expect safe 2>&1",
             load, p1);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 3 && strstr(out, "no purchase was answered"),
             "every purchase refused (redlock without nodes): exit %d\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "%s run --help", load);
    TU_CHECK(sh(cmd, out, sizeof out) == 0 && strstr(out, "--expect"), "run --help");

    pk_stop(s1, 5000);
    pk_stop(s2, 5000);
}

/* extra: more matrix arguments (the pipeline-off run passes a server
 * argument), "" for none. */
static void test_matrix(const char *extra)
{
    char dir[] = "/tmp/miaosha-lg-matrix-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    static char out[1 << 16];
    char cmd[4096];
    /* --lang is en or zh; anything else is a usage error before anything runs */
    snprintf(cmd, sizeof cmd, "%s matrix --lang xx --out %s 2>&1", load, dir);
    int rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 2 && strstr(out, "--lang: 'xx' is not en|zh"), "--lang xx: exit %d\n%s", rc,
             out);
    snprintf(cmd, sizeof cmd, "%s matrix --help", load);
    TU_CHECK(sh(cmd, out, sizeof out) == 0 && strstr(out, "--lang LANG"), "matrix --help: --lang");
    snprintf(cmd, sizeof cmd, "%s matrix --quick --server %s --redis 127.0.0.1:%d --out %s %s",
             load, server, redis_port, dir, extra);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0, "matrix --quick exit %d\n%s", rc, out);
    const char *files[] = {"matrix.md", "matrix.csv", "matrix.svg"};
    for (int i = 0; i < 3; i++) {
        char p[512];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        TU_CHECK(stat(p, &st) == 0 && st.st_size > 100, "%s written", p);
    }
    char p[512];
    snprintf(p, sizeof p, "%s/matrix.csv", dir);
    FILE *f = fopen(p, "r");
    int rows = 0, passed = 0, bucket_rows = 0, bucket_right = 0;
    char line[2048];
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "scenario,", 9))
            continue;
        rows++;
        if (strstr(line, ",true,"))
            passed++;
        /* the stock in 4 buckets: none oversells, every other mode sells
         * exactly the stock, the last unit included (0 undersold) */
        if (!strncmp(line, "buckets,", 8)) {
            bucket_rows++;
            int none = !strncmp(line, "buckets,none,", 13);
            bucket_right += none ? strstr(line, ",oversell,oversell,true,") != NULL
                                 : strstr(line, ",exact,exact,true,") != NULL;
        }
    }
    if (f)
        fclose(f);
    TU_CHECK(rows == 64 && passed == 64, "csv rows %d passed %d (8 scenarios x 8 modes)", rows,
             passed);
    TU_CHECK(bucket_rows == 8 && bucket_right == 8,
             "the buckets column: %d rows, %d as expected (none oversell, the rest exact)",
             bucket_rows, bucket_right);
    snprintf(p, sizeof p, "%s/matrix.svg", dir);
    f = fopen(p, "r");
    int red = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "#d62728"))
            red++;
    if (f)
        fclose(f);
    TU_CHECK(red >= 6, "oversold bars are red (%d)", red);

    /* One buy per user and the Idempotency-Key replay on a SKU split into
     * 4 stock buckets: the dup-user cells stay one-each, the retry cells
     * as expected. */
    snprintf(cmd, sizeof cmd,
             "%s matrix --quick --scenarios dup-user,retry --buckets 4 --no-timelines --server %s "
             "--redis 127.0.0.1:%d --out %s/buckets %s",
             load, server, redis_port, dir, extra);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0, "matrix --buckets 4 exit %d\n%s", rc, out);
    snprintf(p, sizeof p, "%s/buckets/matrix.csv", dir);
    f = fopen(p, "r");
    rows = passed = 0;
    int one_each = 0, balanced = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "scenario,", 9))
            continue;
        rows++;
        passed += strstr(line, ",true,") != NULL;
        one_each += !strncmp(line, "dup-user,", 9) && strstr(line, ",one-each,one-each,true,");
        /* Every cell's audit is one SKU's (the retry cell's is the keyed
         * run's, the SKU its timeline draws): its figures balance. */
        const char *q = line;
        for (int i = 0; i < 5 && q != NULL; i++)
            if ((q = strchr(q, ',')) != NULL)
                q++;
        long long st = -1, so = -1, left = -1, over = -1, under = -1;
        if (q != NULL && sscanf(q, "%lld,%lld,%lld,%lld,%lld", &st, &so, &left, &over, &under) == 5)
            balanced += st > 0 && left > 0 && so + left - over + under == st;
    }
    if (f)
        fclose(f);
    TU_CHECK(rows == 16 && passed == 16 && one_each == 8 && balanced == 16,
             "--buckets 4: %d rows, %d as expected, %d dup-user cells one-each (of 8), %d audits "
             "balanced with stock left",
             rows, passed, one_each, balanced);

    /* The buckets column at its own size (not --quick): stock 100 in 4
     * buckets, 1000 buyers; none oversells, every other mode sells exactly
     * 100, the last unit included. */
    snprintf(cmd, sizeof cmd,
             "%s matrix --scenarios buckets --no-timelines --server %s --redis 127.0.0.1:%d "
             "--out %s/full %s",
             load, server, redis_port, dir, extra);
    rc = sh(cmd, out, sizeof out);
    TU_CHECK(rc == 0, "matrix --scenarios buckets exit %d\n%s", rc, out);
    snprintf(p, sizeof p, "%s/full/matrix.csv", dir);
    f = fopen(p, "r");
    rows = bucket_right = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "scenario,", 9))
            continue;
        rows++;
        /* scenario,mode,expected,measured,pass,stock,sold,stock_left,oversold,undersold,requests */
        int none = !strncmp(line, "buckets,none,", 13);
        bucket_right += none ? strstr(line, ",oversell,oversell,true,100,") != NULL
                             : strstr(line, ",exact,exact,true,100,100,0,0,0,1000,") != NULL;
    }
    if (f)
        fclose(f);
    TU_CHECK(rows == 8 && bucket_right == 8,
             "the buckets column, stock 100 and 1000 buyers: %d rows, %d as expected", rows,
             bucket_right);
    remove_unless_failed(dir, "matrix output");
}

/* --- faults ---------------------------------------------------------------- */

#define CSV_MAX_COLS 40

typedef struct csv_row {
    char buf[2048];
    char *col[CSV_MAX_COLS];
    int n;
} csv_row;

/* Splits one line of matrix.csv: only the last column (reason) is quoted,
 * so the first ncols-1 commas separate fields. */
static void csv_split(csv_row *r, const char *line, int ncols)
{
    snprintf(r->buf, sizeof r->buf, "%s", line);
    r->buf[strcspn(r->buf, "\n")] = 0;
    r->n = 0;
    char *p = r->buf;
    while (r->n < CSV_MAX_COLS) {
        r->col[r->n++] = p;
        char *comma = r->n < ncols ? strchr(p, ',') : NULL;
        if (!comma)
            break;
        *comma = 0;
        p = comma + 1;
    }
}

static const char *csv_get(const csv_row *hdr, const csv_row *r, const char *name)
{
    for (int i = 0; i < hdr->n && i < r->n; i++)
        if (!strcmp(hdr->col[i], name))
            return r->col[i];
    return "";
}

static long long csv_num(const csv_row *hdr, const csv_row *r, const char *name)
{
    const char *v = csv_get(hdr, r, name);
    return *v ? strtoll(v, NULL, 10) : -1;
}

/* What the fault cells must show (loadtest/README.md). */
static const char *fault_expected(const char *scen, const char *mode)
{
    (void)scen; /* the same per mode in every fault scenario */
    if (!strcmp(mode, "none") || !strcmp(mode, "mutex"))
        return "oversell";
    if (!strcmp(mode, "setnx"))
        return "safe|stuck"; /* a lock left without TTL: a race, see lg_fault.c */
    return "safe";
}

static void check_fault_row(const csv_row *h, const csv_row *r)
{
    const char *scen = csv_get(h, r, "scenario"), *mode = csv_get(h, r, "mode");
    const char *got = csv_get(h, r, "measured"), *want = fault_expected(scen, mode);
    char cell[64];
    snprintf(cell, sizeof cell, "%s/%s", scen, mode);
    /* want: one outcome or alternatives separated by '|' */
    int match = 0;
    for (const char *w = want; *w && !match;) {
        size_t len = strcspn(w, "|");
        match = strlen(got) == len && !strncmp(w, got, len);
        w += len + (w[len] == '|');
    }
    TU_CHECK(match, "%s: measured %s, expected %s (%s)", cell, got, want, csv_get(h, r, "reason"));
    TU_CHECK(!strcmp(csv_get(h, r, "pass"), "true"), "%s: the matrix judged it as expected", cell);
    if (!strcmp(want, "oversell")) {
        TU_CHECK(csv_num(h, r, "oversold") > 0, "%s oversold", cell);
        return;
    }
    /* the Redis lock modes and lua: nothing lost, whatever the fault */
    TU_CHECK(csv_num(h, r, "oversold") == 0 && csv_num(h, r, "undersold") == 0,
             "%s: oversold %lld undersold %lld", cell, csv_num(h, r, "oversold"),
             csv_num(h, r, "undersold"));
    TU_CHECK(csv_num(h, r, "acked_lost") == 0 && csv_num(h, r, "acked_over_stock") == 0,
             "%s: no acknowledged order lost, no 200 beyond the stock", cell);
    TU_CHECK(csv_num(h, r, "missing_orders") == 0 && csv_num(h, r, "duplicate_ids") == 0,
             "%s: no acknowledged order missing, no duplicate id", cell);
    if (!strcmp(got, "safe"))
        TU_CHECK(csv_num(h, r, "sold") == csv_num(h, r, "stock") &&
                     csv_num(h, r, "stock_left") == 0,
                 "%s: sold out after the fault", cell);
    if (!strcmp(got, "stuck"))
        TU_CHECK(csv_num(h, r, "sold") < csv_num(h, r, "stock"), "%s: stuck = stopped selling",
                 cell);
    long long hold = !strcmp(mode, "reentrant") ? 1000 : 1500; /* watchdog / lease */
    int lockless = !strcmp(mode, "lua"); /* no lock to free: the kill's bounds are the lock's */
    if (!strcmp(scen, "kill") && lockless) {
        TU_CHECK(csv_num(h, r, "fault_ms") >= 0, "%s: the killed instance came back", cell);
    } else if (!strcmp(scen, "kill") && !strcmp(got, "stuck")) {
        TU_CHECK(csv_num(h, r, "fault_ms") >= 0, "%s: the killed instance came back", cell);
    } else if (!strcmp(scen, "kill")) {
        long long freed = csv_num(h, r, "freed_ms");
        /* freed by expiry: not long before the lease/watchdog timeout (the
         * PTTL at the kill is checked by the matrix itself), not much after */
        TU_CHECK(freed >= hold / 2 && freed <= hold + tu_slack(1000),
                 "%s: the dead holder's lock freed after %lld ms (hold %lld)", cell, freed, hold);
        TU_CHECK(csv_num(h, r, "fault_ms") >= 0, "%s: the killed instance came back", cell);
    } else if (!strcmp(scen, "redis-restart")) {
        TU_CHECK(csv_num(h, r, "redis_unavailable") > 0, "%s: buyers saw 503s while down (%lld)",
                 cell, csv_num(h, r, "redis_unavailable"));
        long long back = csv_num(h, r, "reconnect_ms");
        TU_CHECK(back >= 0 && back <= tu_slack(1000), "%s: instances back %lld ms after Redis",
                 cell, back);
        TU_CHECK(csv_num(h, r, "fault_ms") >= 1000, "%s: Redis was down >= 1 s (%lld)", cell,
                 csv_num(h, r, "fault_ms"));
    } else {
        long long ff = csv_num(h, r, "failfast_ms");
        /* redlock's lock masters are not paused: its probe, which does not
         * wait, may be refused 429 by a buyer stuck on the stock's Redis */
        if (strcmp(mode, "redlock") != 0 || ff >= 0)
            TU_CHECK(ff >= 0 && ff <= tu_slack(1000), "%s: 503 within %lld ms while paused", cell,
                     ff);
        TU_CHECK(csv_num(h, r, "redis_unavailable") > 0, "%s: buyers saw 503s while paused", cell);
        if (!strcmp(got, "safe"))
            TU_CHECK(csv_num(h, r, "resume_ms") <= hold + tu_slack(1000),
                     "%s: sales resumed %lld ms after SIGCONT (no lock beyond its lease)", cell,
                     csv_num(h, r, "resume_ms"));
    }
}

/* Reads DIR/matrix.csv (its header names the columns) and calls check on
 * every row; returns the number of rows. */
static int each_csv_row(const char *dir, void (*check)(const csv_row *h, const csv_row *r))
{
    char p[512], line[2048];
    snprintf(p, sizeof p, "%s/matrix.csv", dir);
    FILE *f = fopen(p, "r");
    TU_REQUIRE(f != NULL, "%s written", p);
    static csv_row hdr, row;
    int rows = 0, ncols = 0;
    if (fgets(line, sizeof line, f)) {
        csv_split(&hdr, line, CSV_MAX_COLS);
        ncols = hdr.n;
    }
    while (fgets(line, sizeof line, f)) {
        csv_split(&row, line, ncols);
        rows++;
        check(&hdr, &row);
    }
    fclose(f);
    return rows;
}

/* Runs `miaosha-load matrix ARGS --server S --out DIR` (its stderr into
 * DIR/stderr), prints its output and how long it took, checks it exits 0;
 * then passes each row of its matrix.csv to check and returns how many. */
static int matrix_rows(const char *dir, const char *args,
                       void (*check)(const csv_row *h, const csv_row *r))
{
    static char out[1 << 16];
    char cmd[4096];
    int64_t t0 = lc_now_ms();
    snprintf(cmd, sizeof cmd, "%s matrix %s --server %s --out %s 2>%s/stderr", load, args, server,
             dir, dir);
    int rc = sh(cmd, out, sizeof out);
    fprintf(stderr, "%s\nmatrix %s: exit %d in %lld ms\n", out, args, rc,
            (long long)(lc_now_ms() - t0));
    TU_CHECK(rc == 0, "matrix %s exit %d", args, rc);
    return each_csv_row(dir, check);
}

/* One cell of the lock masters' scenarios (test_matrix_redlock). */
static void check_redlock_row(const csv_row *h, const csv_row *r)
{
    const char *scen = csv_get(h, r, "scenario"), *mode = csv_get(h, r, "mode");
    const char *got = csv_get(h, r, "measured");
    TU_CHECK(!strcmp(mode, "redlock"), "%s: only the redlock row runs (%s)", scen, mode);
    TU_CHECK(!strcmp(csv_get(h, r, "pass"), "true"), "%s: as expected: %s (%s)", scen, got,
             csv_get(h, r, "reason"));
    if (!strcmp(scen, "node-restart"))
        TU_CHECK(!strcmp(got, "oversell") && csv_num(h, r, "oversold") == 1,
                 "node-restart: a second holder oversells (%s)", got);
    else
        TU_CHECK(!strcmp(got, "exact") && csv_num(h, r, "oversold") == 0 &&
                     csv_num(h, r, "sold") == csv_num(h, r, "stock"),
                 "%s: exact (%s)", scen, got);
}

/* The first negative duration ("-1 ms", "-20ms") in a reason, or NULL: a
 * time printed before it was taken (a -1 "not measured" shown as a
 * measurement). A minus inside a word ("mx-fo-1") is not one. */
static const char *negative_duration(const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p != '-' || !isdigit((unsigned char)p[1]) ||
            (p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '-')))
            continue;
        const char *q = p + 1;
        while (isdigit((unsigned char)*q))
            q++;
        if (*q == ' ')
            q++;
        if (!strncmp(q, "ms", 2) && !isalnum((unsigned char)q[2]))
            return p;
    }
    return NULL;
}

/* One cell of the failover scenario (test_failover). */
static void check_failover_row(const csv_row *h, const csv_row *r)
{
    const char *mode = csv_get(h, r, "mode"), *got = csv_get(h, r, "measured");
    const char *want = !strcmp(mode, "lua") || !strcmp(mode, "redlock") ? "exact" : "oversell";
    TU_CHECK(!strcmp(got, want), "failover/%s: measured %s, expected %s (%s)", mode, got, want,
             csv_get(h, r, "reason"));
    TU_CHECK(!strcmp(csv_get(h, r, "pass"), "true"), "failover/%s judged as expected", mode);
    TU_CHECK(csv_num(h, r, "sold") == (!strcmp(want, "exact") ? 1 : 2),
             "failover/%s: sold %lld of 1", mode, csv_num(h, r, "sold"));
    long long ok = csv_num(h, r, "ok");
    TU_CHECK(csv_num(h, r, "acked_over_stock") == (ok > 1 ? ok - 1 : 0),
             "failover/%s: %lld 200s for 1 unit, acked_over_stock %lld", mode, ok,
             csv_num(h, r, "acked_over_stock"));
    TU_CHECK(csv_num(h, r, "fault_ms") > 0, "failover/%s: the failover took %lld ms", mode,
             csv_num(h, r, "fault_ms"));
    /* redlock's lock is kept on its own masters and its lease outlasts the
     * cell (lg_failover.c, fo_lease_ms): its holder never lost it */
    if (!strcmp(mode, "redlock"))
        TU_CHECK(csv_num(h, r, "lock_lost") == 0, "failover/redlock: the holder kept its lock (%s)",
                 csv_get(h, r, "reason"));
    const char *reason = csv_get(h, r, "reason");
    TU_CHECK(negative_duration(reason) == NULL, "failover/%s: a negative duration in '%s'", mode,
             reason);
    /* every cell's buyer answered after the kill, and its time is printed
     * (redlock's 429 as well as the 200 of a lost lock) */
    TU_CHECK(strstr(reason, " ms after the kill") != NULL, "failover/%s: the buyer's time in '%s'",
             mode, reason);
}

/* One cell of manual-failover / resume-failover (test_acked): the 200s
 * answered with redis.wait_replicas=1 while the promoted replica's link was
 * frozen are gone (at least the AK_BEFORE = 3 bought before the failover),
 * and the new master sold its stock again (200s beyond the stock); with all
 * no 200 is lost and none is beyond the stock; the old master took no write
 * from the instances later than a request already on its way when the
 * first Sentinel announced the switch. */
static void check_acked_row(const csv_row *h, const csv_row *r)
{
    const char *scen = csv_get(h, r, "scenario"), *mode = csv_get(h, r, "mode");
    const char *reason = csv_get(h, r, "reason");
    char cell[64];
    snprintf(cell, sizeof cell, "%s/%s", scen, mode);
    TU_CHECK(!strcmp(csv_get(h, r, "measured"), "lost-at-1") &&
                 !strcmp(csv_get(h, r, "pass"), "true"),
             "%s: measured %s (%s)", cell, csv_get(h, r, "measured"), reason);
    TU_CHECK(csv_num(h, r, "acked_lost") >= 3 && csv_num(h, r, "acked_over_stock") > 0,
             "%s: wait 1 lost %lld acknowledged orders, %lld 200s beyond the stock", cell,
             csv_num(h, r, "acked_lost"), csv_num(h, r, "acked_over_stock"));
    TU_CHECK(csv_num(h, r, "acked_lost_all") == 0 && csv_num(h, r, "acked_over_stock_all") == 0,
             "%s: all lost none (%lld, %lld beyond the stock)", cell,
             csv_num(h, r, "acked_lost_all"), csv_num(h, r, "acked_over_stock_all"));
    TU_CHECK(csv_num(h, r, "fault_ms") > 0, "%s: the failover took %lld ms", cell,
             csv_num(h, r, "fault_ms"));
    long long late = csv_num(h, r, "late_write_ms");
    TU_CHECK(late >= 0 && late <= tu_slack(300),
             "%s: the last write on the old master %lld ms after +switch-master (%lld writes)",
             cell, late, csv_num(h, r, "late_writes"));
}

/* SIGINT to the matrix (not its group) while its Redis is frozen: it must
 * exit 130 and leave no Redis behind. */
static void test_faults_interrupt(void)
{
    char dir[] = "/tmp/miaosha-lg-faults-int-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char errp[600], err[64];
    snprintf(errp, sizeof errp, "%s/stderr", dir);
    const char *argv[] = {load,      "matrix",   "--scenarios", "redis-pause", "--modes", "token",
                          "--quick", "--server", server,        "--out",       dir,       NULL};
    pid_t pid = pk_spawn(argv, errp, PK_SPAWN_DIE_WITH_PARENT, err, sizeof err);
    TU_REQUIRE(pid > 0, "matrix started");
    /* the private Redis's port, from the matrix's first log line */
    int port = 0;
    int64_t end = lc_now_ms() + tu_slack(20000);
    while (!port && lc_now_ms() < end) {
        FILE *f = fopen(errp, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            const char *p = strstr(line, "redis at 127.0.0.1:");
            if (p)
                port = atoi(p + strlen("redis at 127.0.0.1:"));
        }
        if (f)
            fclose(f);
        tu_sleep_ms(20);
    }
    TU_CHECK(port > 0, "private redis port logged");
    /* paused = the port accepts but never answers a PING */
    int paused = 0;
    end = lc_now_ms() + tu_slack(30000);
    while (port && !paused && lc_now_ms() < end && !pk_wait_exit(pid, 0)) {
        paused = !pk_redis_ping(port, 150);
        if (!paused)
            tu_sleep_ms(10);
    }
    TU_CHECK(paused, "the matrix paused its Redis");
    int64_t t0 = lc_now_ms();
    kill(pid, SIGINT);
    int st = -1;
    if (!pk_wait_status(pid, (int)tu_slack(15000), &st))
        pk_kill(pid);
    TU_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130, "Ctrl-C: exit 130 (status %d) after %lld ms",
             st, (long long)(lc_now_ms() - t0));
    TU_CHECK(!port || !pk_redis_ping(port, 300), "Ctrl-C: its Redis was stopped");
    remove_unless_failed(dir, "interrupt output");
}

/* --- the lock masters' faults (redlock) -------------------------------------- */

/* matrix --modes redlock --scenarios nodes-down,node-restart,node-restart-delay:
 * one cell each, as expected: 2 of 5 masters down sells exactly and 3 of 5
 * sells nothing; a master restarted empty lets a second holder in (the
 * oversell); with the restart delay it does not. */
static void test_matrix_redlock(void)
{
    char dir[] = "/tmp/miaosha-lg-redlock-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    char args[256];
    snprintf(args, sizeof args,
             "--quick --modes redlock,token --scenarios nodes-down,node-restart,node-restart-delay "
             "--redis 127.0.0.1:%d",
             redis_port);
    int rows = matrix_rows(dir, args, check_redlock_row);
    TU_CHECK(rows == 3, "3 cells (redlock only), got %d", rows);
    remove_unless_failed(dir, "redlock matrix output");
}

static void test_faults(void)
{
    char dir[] = "/tmp/miaosha-lg-faults-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    int rows = matrix_rows(dir, "--faults --quick", check_fault_row);
    TU_CHECK(rows == 24, "24 fault cells (3 scenarios x 8 modes), got %d", rows);
    static char out[1 << 16];
    char cmd[4096], p[512], line[2048];
    snprintf(p, sizeof p, "%s/matrix.md", dir);
    FILE *f = fopen(p, "r");
    int fault_table = 0;
    while (f && fgets(line, sizeof line, f))
        fault_table |= strstr(line, "## Fault cells") != NULL;
    if (f)
        fclose(f);
    TU_CHECK(fault_table, "matrix.md has the fault table");
    snprintf(p, sizeof p, "%s/matrix.svg", dir);
    struct stat stt;
    TU_CHECK(stat(p, &stt) == 0 && stt.st_size > 100, "matrix.svg written");
    /* usage: the faults need the private Redis */
    snprintf(cmd, sizeof cmd, "%s matrix --faults --redis 127.0.0.1:%d 2>/dev/null", load,
             redis_port);
    TU_CHECK(sh(cmd, out, sizeof out) == 2, "--faults with --redis is a usage error");
    remove_unless_failed(dir, "fault matrix output");
    test_faults_interrupt();
}

/* matrix --scenarios failover: per mode, a Sentinel failover while a
 * holder sleeps in its critical section. The Redis locks lose their lock
 * (the new master never had it): sold 2 of 1, fenced too (its fencing
 * counter and mark were on the lost master: the buyer gets the holder's
 * very token); lua and redlock (its lock on the matrix's independent lock
 * masters, which the failover does not touch) stay exact; every cell says
 * how long the failover took. */
static void test_failover(void)
{
    TU_CHECK(negative_duration("buyer 429 -1 ms after the kill") != NULL &&
                 negative_duration("mx-fo-1: 12 ms, -3x") == NULL,
             "the negative-duration check tells -1 ms from a name's minus");
    char dir[] = "/tmp/miaosha-lg-failover-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    int rows = matrix_rows(dir, "--scenarios failover", check_failover_row);
    TU_CHECK(rows == 8, "8 failover cells, got %d", rows);
    remove_unless_failed(dir, "failover matrix output");
}

/* matrix --scenarios manual-failover,resume-failover for lua and two lock
 * modes: one topology and one failover per scenario (lg_acked.c). */
static void test_acked(void)
{
    char dir[] = "/tmp/miaosha-lg-acked-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    int rows = matrix_rows(dir,
                           "--scenarios manual-failover,resume-failover --modes token,fenced,lua",
                           check_acked_row);
    TU_CHECK(rows == 6, "6 cells (2 scenarios x 3 modes), got %d", rows);
    remove_unless_failed(dir, "acked matrix output");
}

/* One cell of cluster-failover or reshard (test_cluster). */
static void check_cluster_row(const csv_row *h, const csv_row *r)
{
    const char *scen = csv_get(h, r, "scenario"), *mode = csv_get(h, r, "mode");
    const char *got = csv_get(h, r, "measured"), *reason = csv_get(h, r, "reason");
    int failover = !strcmp(scen, "cluster-failover");
    TU_CHECK(failover || !strcmp(scen, "reshard"), "only the cluster scenarios ran (%s)", scen);
    /* cluster-failover: the Sentinel column's expectations, for its
     * reasons (lg_cluster.c); reshard: the race's */
    const char *want = failover ? (!strcmp(mode, "lua") || !strcmp(mode, "redlock") ? "exact"
                                                                                    : "oversell")
                                : (!strcmp(mode, "none") ? "oversell" : "exact");
    TU_CHECK(!strcmp(got, want), "%s/%s: measured %s, expected %s (%s)", scen, mode, got, want,
             reason);
    TU_CHECK(!strcmp(csv_get(h, r, "pass"), "true"), "%s/%s judged as expected", scen, mode);
    TU_CHECK(negative_duration(reason) == NULL, "%s/%s: a negative duration in '%s'", scen, mode,
             reason);
    if (failover) {
        TU_CHECK(csv_num(h, r, "sold") == (!strcmp(want, "exact") ? 1 : 2),
                 "cluster-failover/%s: sold %lld of 1", mode, csv_num(h, r, "sold"));
        long long ok = csv_num(h, r, "ok");
        TU_CHECK(csv_num(h, r, "acked_over_stock") == (ok > 1 ? ok - 1 : 0),
                 "cluster-failover/%s: %lld 200s for 1 unit, acked_over_stock %lld", mode, ok,
                 csv_num(h, r, "acked_over_stock"));
        TU_CHECK(csv_num(h, r, "fault_ms") > 0, "cluster-failover/%s: the failover took %lld ms",
                 mode, csv_num(h, r, "fault_ms"));
        TU_CHECK(strstr(reason, " ms after the kill") != NULL,
                 "cluster-failover/%s: the buyer's time in '%s'", mode, reason);
        if (!strcmp(mode, "redlock"))
            TU_CHECK(csv_num(h, r, "lock_lost") == 0,
                     "cluster-failover/redlock: the holder kept its lock (%s)", reason);
        return;
    }
    /* reshard: every unit sold, every 200 in the books, and the move met
     * the burst (lg_cluster.c's classify says so in the reason) */
    TU_CHECK(csv_num(h, r, "sold") >= csv_num(h, r, "stock") && csv_num(h, r, "stock") > 0,
             "reshard/%s: sold %lld of %lld", mode, csv_num(h, r, "sold"), csv_num(h, r, "stock"));
    TU_CHECK(strstr(reason, "keys moved under it") != NULL && strstr(reason, "no redirect") == NULL,
             "reshard/%s: the slot moved under the burst, redirects followed (%s)", mode, reason);
    if (strcmp(mode, "none") != 0)
        TU_CHECK(csv_num(h, r, "oversold") == 0 && csv_num(h, r, "undersold") == 0 &&
                     csv_num(h, r, "missing_orders") == 0,
                 "reshard/%s: nothing oversold, undersold or lost (%s)", mode, reason);
}

/* matrix --scenarios cluster-failover,reshard: every mode on a Redis
 * Cluster of its own (pk_cluster.h) — a master killed after its replica's
 * link was cut and while a holder held the lock on it, and a slot moved
 * under a burst (lg_cluster.c). */
static void test_cluster(void)
{
    char dir[] = "/tmp/miaosha-lg-cluster-XXXXXX";
    TU_REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    int rows = matrix_rows(dir, "--quick --scenarios cluster-failover,reshard", check_cluster_row);
    TU_CHECK(rows == 16, "16 cells (2 scenarios x 8 modes), got %d", rows);
    remove_unless_failed(dir, "cluster matrix output");
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* hiredis writes with write() */
    const char *bd = getenv("MIAOSHA_BUILD_DIR");
    TU_REQUIRE(bd != NULL, "MIAOSHA_BUILD_DIR is set (run through ctest)");
    snprintf(server, sizeof server, "%s/service/miaosha-server", bd);
    snprintf(load, sizeof load, "%s/loadtest/miaosha-load", bd);
    TU_REQUIRE(access(server, X_OK) == 0, "server binary %s exists", server);
    TU_REQUIRE(access(load, X_OK) == 0, "load binary %s exists", load);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *what = argc > 1 ? argv[1] : "run";
    if (!strcmp(what, "failover")) { /* its own Redis processes, no shared one */
        test_failover();
        return tu_done();
    }
    if (!strcmp(what, "acked")) {
        test_acked();
        pk_kill_all(2000);
        return tu_done();
    }
    if (!strcmp(what, "cluster")) { /* its own clusters */
        test_cluster();
        pk_kill_all(2000);
        return tu_done();
    }
    redis_port = tu_redis_port();
    if (!strcmp(what, "run"))
        test_run();
    else if (!strcmp(what, "matrix"))
        test_matrix(argc > 2 ? argv[2] : "");
    else if (!strcmp(what, "faults"))
        test_faults();
    else if (!strcmp(what, "redlock"))
        test_matrix_redlock();
    else
        TU_CHECK(0, "unknown test '%s'", what);
    pk_kill_all(2000);
    curl_global_cleanup();
    return tu_done();
}
