/* main.c — miaosha-load: the command line. The only file that prints. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lg_matrix.h"
#include "lg_matrix_html.h"
#include "lg_matrix_report.h"
#include "lg_run.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static const char *usage_text =
    "usage: miaosha-load run    [options]      one purchase burst, audited\n"
    "       miaosha-load bench  [options]      plain GET throughput\n"
    "       miaosha-load matrix [options]      every mode x every scenario\n"
    "       miaosha-load timeline [options]    a saved /trace drawn as an HTML timeline\n"
    "       miaosha-load --help | <command> --help\n";

static const char *run_help =
    "miaosha-load run — reset the stock, fire a concurrent purchase burst, audit it.\n"
    "\n"
    "  --mode MODE          none|mutex|setnx|token|reentrant|redlock|fenced|lua\n"
    "                       (default token; redlock needs a server with redlock.nodes)\n"
    "  --requests N         purchases to send, 1..10000000 (default 1000)\n"
    "  --concurrency C      keep-alive connections, all started together, 1..20000\n"
    "                       (default 100)\n"
    "  --stock S            stock to reset the SKU to before the burst (default 100);\n"
    "                       -1 keeps the current stock (no reset)\n"
    "  --buckets K          the reset splits the stock into K stock buckets, 1..64\n"
    "                       (one lock each; default: not sent, one bucket)\n"
    "  --sku SKU            product id [A-Za-z0-9_-]{1,64} (default demo)\n"
    "  --work-ms N          work_ms parameter, 0..600000 (simulated work inside the\n"
    "                       lock; the server refuses more than its purchase.max_work_ms)\n"
    "  --lease-ms N         lease_ms parameter, 1..86400000\n"
    "  --wait-ms N          wait_ms parameter, 0..86400000\n"
    "  --reenter N          reenter parameter, 0..64 (nested acquisitions; the server\n"
    "                       refuses more than its purchase.max_reenter)\n"
    "  --fault NAME         fault parameter (the server needs faults.enabled)\n"
    "  --users N            user ids cycle over u0..u(N-1) (default: one per request)\n"
    "  --target URL         http://host:port[/prefix]; repeat to spread\n"
    "                       the connections round-robin over instances\n"
    "                       (default http://127.0.0.1:8080); admin calls go to the first\n"
    "  --admin-token T      Bearer token for PUT /stock and --fault (or $MIAOSHA_ADMIN_TOKEN)\n"
    "  --method M           POST (default) or GET\n"
    "  --threads N          client threads (default min(2, CPUs))\n"
    "  --expect safe        exit 1 on oversold, undersold, duplicate orders, acknowledged\n"
    "                       orders lost (acked_lost), 200s beyond the stock\n"
    "                       (acked_over_stock) or a 200 without an order id\n"
    "  --expect oversell    exit 1 when the run did NOT oversell\n"
    "  --json | --csv       machine output instead of the table\n"
    "  --duration-limit S   hard deadline of the burst in seconds, 1..86400 (default\n"
    "                       120); requests still in flight then count as timeouts\n"
    "  --timeline FILE      after the burst, read GET /trace/{sku} of every target and\n"
    "                       write FILE: one self-contained HTML page (the purchases'\n"
    "                       timeline, each oversold unit highlighted, the audit)\n"
    "  --lang LANG          en (default) or zh: the language of the --timeline page\n"
    "  --acked-out FILE     after the burst, write every acknowledged order id (a 200's),\n"
    "                       one per line, sorted: a later check against the books\n"
    "                       (scaleout/soak_failover.sh compares them with the final\n"
    "                       order list, after failovers the burst's own audit saw none of)\n"
    "  --audit-wait-ms MS   let the audit after the burst keep asking for up to MS while\n"
    "                       the service cannot answer it (a failover it has not followed\n"
    "                       yet); default 0: a few quick retries, then \"not audited\"\n"
    "\n"
    "Parameters not given are not sent (the server's configured defaults apply).\n"
    "Exit status: 0 ok, 1 expectation not met, 2 usage, 3 the run could not happen\n"
    "(reset failed, server unreachable, audit unreadable, no purchase answered as a\n"
    "purchase: whatever --expect says), 130 interrupted.\n";

static const char *timeline_help =
    "miaosha-load timeline — draw saved GET /trace/{sku} replies as an HTML timeline.\n"
    "\n"
    "  --trace FILE         a saved /trace reply (JSON Lines; - = stdin); repeat it\n"
    "                       for the traces of several instances of one burst\n"
    "  --out FILE           the page to write (required)\n"
    "  --sku SKU            shown in the title (any text; escaped)\n"
    "  --mode MODE          shown in the title (any text; escaped)\n"
    "  --lang LANG          en (default) or zh\n"
    "\n"
    "The page is the one `run --timeline` writes, without the audit: the oversold\n"
    "units are counted from the trace alone (web/README.md).\n"
    "Exit status: 0 written, 1 a line is not JSON or a file cannot be read or\n"
    "written, 2 usage.\n";

static const char *bench_help =
    "miaosha-load bench — GET one path over keep-alive connections for a duration.\n"
    "\n"
    "  --target URL         http://host:port[/prefix] (default http://127.0.0.1:8080)\n"
    "  --path P             request path (default /healthz)\n"
    "  --concurrency C      connections (default 64)\n"
    "  --duration S         seconds (default 10, at most 3600)\n"
    "  --threads N          client threads (default min(2, CPUs))\n"
    "  --json               one JSON object instead of the table\n"
    "\n"
    "Requests still in flight at the end are not counted (as wrk does).\n"
    "Exit status: 0 when every answer was 2xx with no transport error, else 1;\n"
    "2 usage; 3 the run could not start; 130 interrupted.\n";

static const char *matrix_help =
    "miaosha-load matrix — run every mode through every scenario and report.\n"
    "\n"
    "  --server PATH        miaosha-server binary (default: $MIAOSHA_SERVER, else\n"
    "                       ../service/miaosha-server next to this binary)\n"
    "  --redis HOST:PORT    use this Redis (default: start a private redis-server on a\n"
    "                       free loopback port, no persistence (AOF with the fault\n"
    "                       scenarios), and stop it at the end)\n"
    "  --redis-server PATH  redis-server binary for the private one (default redis-server)\n"
    "  --out DIR            write matrix.md, matrix.csv, matrix.svg, matrix.html, one\n"
    "                       timeline-<scenario>-<mode>.html per cell and logs/\n"
    "                       (default ./matrix-out)\n"
    "  --quick              smaller stock and bursts (the test suite's form)\n"
    "  --lang LANG          en (default) or zh: the language of the table, matrix.md,\n"
    "                       matrix.svg, matrix.html and the timelines (mode names and\n"
    "                       matrix.csv stay as they are)\n"
    "  --modes LIST         comma list of modes (default all eight; redlock starts five\n"
    "                       private lock masters, redis-servers without persistence)\n"
    "  --scenarios LIST     comma list of race,multi,slow,crash,nested,dup-user,retry,\n"
    "                       buckets (the default), kill,redis-restart,redis-pause (the fault\n"
    "                       scenarios) and nodes-down,node-restart,node-restart-delay\n"
    "                       (the lock masters' faults: the redlock row only) and\n"
    "                       failover (a Sentinel failover loses a held lock; per\n"
    "                       cell a master, a replica, 3 Sentinels of its own) and\n"
    "                       manual-failover,resume-failover (SENTINEL FAILOVER, or the\n"
    "                       master paused and resumed mid-failover: acknowledged orders\n"
    "                       lost with redis.wait_replicas=1, none with all; every mode\n"
    "                       on one master, 2 replicas, 3 Sentinels per scenario) and\n"
    "                       cluster-failover,reshard (a Redis Cluster: a master killed\n"
    "                       before the lock reached its replica, per cell 3 masters\n"
    "                       and 3 replicas of its own; a burst while its SKU's slot\n"
    "                       moves to another master, every mode on one cluster)\n"
    "  --faults             run the fault scenarios instead of the demo: one instance\n"
    "                       of three dies holding the lock (kill -9; setnx, token,\n"
    "                       fenced, redlock: _exit inside the section with\n"
    "                       fault=crash_in_section), Redis SIGKILLed and restarted\n"
    "                       from its AOF, Redis paused 2 s (private Redis only)\n"
    "  --time-factor F      scale the fault scenarios' upper time bounds by F, 1..50\n"
    "                       (default $MIAOSHA_TEST_TIME_FACTOR, else 1)\n"
    "  --admin-token T      Bearer token for its PUT /stock calls, fault= requests and\n"
    "                       cluster-failover's stepped purchase (?step=1, /steps),\n"
    "                       when the instances (--config, those behind --target, or\n"
    "                       $MIAOSHA_ADMIN_TOKEN in their environment) have one\n"
    "                       (default $MIAOSHA_ADMIN_TOKEN)\n"
    "  --config FILE        config file for every miaosha-server it starts (the same\n"
    "                       as --server-arg --config --server-arg FILE); the matrix's\n"
    "                       own per-scenario settings (--set) still apply on top\n"
    "  --server-arg ARG     extra argument for every miaosha-server (repeatable)\n"
    "  --trials K           run each cell K times (1..1000, default 1): matrix.html\n"
    "                       then shows per cell the histograms of oversold units and\n"
    "                       of p50/p99 purchase latency, matrix.csv one row per trial\n"
    "                       (a trial column); the table and matrix.md show trial 1\n"
    "  --no-timelines       write no timeline-<scenario>-<mode>.html (matrix.html\n"
    "                       then has no links)\n"
    "  --buckets K          split the SKUs of the dup-user and retry cells into K\n"
    "                       stock buckets (2..64): one buy per user and the\n"
    "                       Idempotency-Key replay across buckets (the buckets\n"
    "                       scenario always splits its stock into 4)\n"
    "  --target URL         run the multi scenario through this balancer (nginx of\n"
    "                       scripts/scaleout.sh or docker-compose, in front of\n"
    "                       several instances on one Redis) instead of three\n"
    "                       instances of its own; admin calls and the audit go\n"
    "                       through it too\n"
    "\n"
    "Servers are started as child processes on free 127.0.0.1 ports and stopped by\n"
    "PID at the end, also on Ctrl-C. Exit status: 0 when every cell shows the\n"
    "expected outcome, 1 when one differs, 3 when the matrix could not run.\n";

static int parse_i64(const char *opt, const char *s, long long lo, long long hi, long long *out)
{
    char *end = (char *)s;
    errno = 0;
    /* digits after an optional '-' only: strtoll alone takes " 5" and "+5" */
    const char *digits = s[0] == '-' ? s + 1 : s;
    long long v = isdigit((unsigned char)digits[0]) ? strtoll(s, &end, 10) : 0;
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "miaosha-load: %s: '%s' is not an integer in %lld..%lld\n", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* s is 1..max bytes of printable ASCII without space (sku: only
 * [A-Za-z0-9_-]): text that goes into a request line or header as it is. */
static int text_ok(const char *s, size_t max, int sku)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (sku ? !(isalnum(ch) || ch == '_' || ch == '-') : (ch <= ' ' || ch >= 0x7f))
            return 0;
    }
    return 1;
}

/* The admin token goes into an Authorization header as it is: 1 when it
 * can, else 0 after saying why. */
static int admin_token_ok(const char *t)
{
    if (text_ok(t, 255, 0))
        return 1;
    fprintf(stderr, "miaosha-load: the admin token (--admin-token or $MIAOSHA_ADMIN_TOKEN): at "
                    "most 255 printable characters, no space or control character\n");
    return 0;
}

typedef struct progress_state {
    int tty;
    int drawn;
} progress_state;

static void progress_bar(void *ud, uint64_t done, uint64_t total, double elapsed)
{
    progress_state *p = ud;
    if (!p->tty)
        return;
    if (total) {
        int width = 40;
        int fill = (int)(done * (uint64_t)width / (total ? total : 1));
        if (fill > width)
            fill = width;
        fprintf(stderr, "\r[%.*s%*s] %llu/%llu %.1fs ", fill,
                "########################################", width - fill, "",
                (unsigned long long)done, (unsigned long long)total, elapsed);
    } else {
        fprintf(stderr, "\r%llu requests %.1fs ", (unsigned long long)done, elapsed);
    }
    p->drawn = 1;
}

static void progress_clear(progress_state *p)
{
    if (p->tty && p->drawn)
        fprintf(stderr, "\r%70s\r", "");
}

/* run --timeline: the trace of every distinct target, after the burst. */
static int write_run_timeline(const char *path, const lg_run_cfg *cfg, const lg_run_result *res,
                              lg_report_lang lang)
{
    lg_trace_set set;
    lg_trace_set_init(&set);
    char err[512];
    int rc = 0;
    for (int i = 0; i < cfg->ntargets && rc == 0; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++)
            seen |= strcmp(cfg->targets[k].base, cfg->targets[i].base) == 0;
        if (!seen && lg_trace_fetch(&set, cfg->targets[i].base, cfg->sku, &res->marks[i], err,
                                    sizeof err) < 0) {
            fprintf(stderr, "miaosha-load: --timeline: %s\n", err);
            rc = -1;
        }
    }
    lg_timeline_page page = {cfg->sku,
                             cfg->mode,
                             NULL,
                             lang == LG_LANG_ZH ? "zh" : "en",
                             res->audited ? &res->audit : NULL,
                             res->requests - res->not_sent,
                             res->sold_out_local};
    if (rc == 0 && lg_timeline_write(path, &page, &set, err, sizeof err) < 0) {
        fprintf(stderr, "miaosha-load: --timeline: %s\n", err);
        rc = -1;
    }
    if (rc == 0)
        fprintf(stderr, "miaosha-load: timeline of %llu purchase(s) written to %s\n",
                (unsigned long long)set.records, path);
    if (set.untraced[0])
        fprintf(stderr, "miaosha-load: --timeline: not traced there: %s\n", set.untraced);
    lg_trace_set_free(&set);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    enum {
        O_MODE = 256,
        O_REQ,
        O_CONC,
        O_STOCK,
        O_SKU,
        O_WORK,
        O_LEASE,
        O_WAIT,
        O_REENTER,
        O_USERS,
        O_TARGET,
        O_TOKEN,
        O_EXPECT,
        O_JSON,
        O_CSV,
        O_DEADLINE,
        O_FAULT,
        O_METHOD,
        O_THREADS,
        O_TIMELINE,
        O_LANG,
        O_BUCKETS,
        O_ACKED_OUT,
        O_AUDIT_WAIT,
        O_HELP
    };
    static const struct option opts[] = {{"mode", required_argument, 0, O_MODE},
                                         {"requests", required_argument, 0, O_REQ},
                                         {"concurrency", required_argument, 0, O_CONC},
                                         {"stock", required_argument, 0, O_STOCK},
                                         {"sku", required_argument, 0, O_SKU},
                                         {"work-ms", required_argument, 0, O_WORK},
                                         {"lease-ms", required_argument, 0, O_LEASE},
                                         {"wait-ms", required_argument, 0, O_WAIT},
                                         {"reenter", required_argument, 0, O_REENTER},
                                         {"users", required_argument, 0, O_USERS},
                                         {"target", required_argument, 0, O_TARGET},
                                         {"admin-token", required_argument, 0, O_TOKEN},
                                         {"expect", required_argument, 0, O_EXPECT},
                                         {"json", no_argument, 0, O_JSON},
                                         {"csv", no_argument, 0, O_CSV},
                                         {"duration-limit", required_argument, 0, O_DEADLINE},
                                         {"fault", required_argument, 0, O_FAULT},
                                         {"method", required_argument, 0, O_METHOD},
                                         {"threads", required_argument, 0, O_THREADS},
                                         {"timeline", required_argument, 0, O_TIMELINE},
                                         {"lang", required_argument, 0, O_LANG},
                                         {"buckets", required_argument, 0, O_BUCKETS},
                                         {"acked-out", required_argument, 0, O_ACKED_OUT},
                                         {"audit-wait-ms", required_argument, 0, O_AUDIT_WAIT},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    const char *timeline = NULL;
    lg_report_lang lang = LG_LANG_EN;
    lg_run_cfg cfg;
    lg_run_cfg_init(&cfg);
    cfg.admin_token = getenv("MIAOSHA_ADMIN_TOKEN");
    lg_expect expect = LG_EXPECT_NONE;
    int json = 0, csv = 0;
    long long v;
    char err[512];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_MODE:
            if (strcmp(optarg, "none") && strcmp(optarg, "mutex") && strcmp(optarg, "setnx") &&
                strcmp(optarg, "token") && strcmp(optarg, "reentrant") &&
                strcmp(optarg, "redlock") && strcmp(optarg, "fenced") && strcmp(optarg, "lua")) {
                fprintf(stderr,
                        "miaosha-load: --mode: '%s' is not "
                        "none|mutex|setnx|token|reentrant|redlock|fenced|lua\n",
                        optarg);
                return 2;
            }
            cfg.mode = optarg;
            break;
        case O_REQ:
            if (parse_i64("--requests", optarg, 1, 10000000, &v))
                return 2;
            cfg.requests = (uint64_t)v;
            break;
        case O_CONC:
            if (parse_i64("--concurrency", optarg, 1, 20000, &v))
                return 2;
            cfg.concurrency = (int)v;
            break;
        case O_STOCK:
            if (parse_i64("--stock", optarg, -1, 1000000000, &v))
                return 2;
            cfg.stock = v;
            break;
        case O_BUCKETS:
            if (parse_i64("--buckets", optarg, 1, 64, &v))
                return 2;
            cfg.buckets = (int)v;
            break;
        case O_SKU:
            if (!text_ok(optarg, 64, 1)) {
                fprintf(stderr, "miaosha-load: --sku: '%s' must match [A-Za-z0-9_-]{1,64}\n",
                        optarg);
                return 2;
            }
            cfg.sku = optarg;
            break;
        case O_WORK:
            if (parse_i64("--work-ms", optarg, 0, 600000, &v))
                return 2;
            cfg.work_ms = v;
            break;
        case O_LEASE:
            if (parse_i64("--lease-ms", optarg, 1, 86400000, &v))
                return 2;
            cfg.lease_ms = v;
            break;
        case O_WAIT:
            if (parse_i64("--wait-ms", optarg, 0, 86400000, &v))
                return 2;
            cfg.wait_ms = v;
            break;
        case O_REENTER:
            if (parse_i64("--reenter", optarg, 0, 64, &v))
                return 2;
            cfg.reenter = v;
            break;
        case O_USERS:
            if (parse_i64("--users", optarg, 1, 1000000000, &v))
                return 2;
            cfg.users = (uint64_t)v;
            break;
        case O_TARGET:
            if (cfg.ntargets >= LG_MAX_TARGETS) {
                fprintf(stderr, "miaosha-load: at most %d --target\n", LG_MAX_TARGETS);
                return 2;
            }
            if (lg_url_parse(optarg, &cfg.targets[cfg.ntargets], err, sizeof err) < 0) {
                fprintf(stderr, "miaosha-load: --target %s\n", err);
                return 2;
            }
            cfg.ntargets++;
            break;
        case O_TOKEN:
            if (!admin_token_ok(optarg))
                return 2;
            cfg.admin_token = optarg;
            break;
        case O_EXPECT:
            if (strcmp(optarg, "safe") == 0)
                expect = LG_EXPECT_SAFE;
            else if (strcmp(optarg, "oversell") == 0)
                expect = LG_EXPECT_OVERSELL;
            else {
                fprintf(stderr, "miaosha-load: --expect: 'safe' or 'oversell'\n");
                return 2;
            }
            break;
        case O_JSON: json = 1; break;
        case O_CSV: csv = 1; break;
        case O_DEADLINE:
            if (parse_i64("--duration-limit", optarg, 1, 86400, &v))
                return 2;
            cfg.deadline_ms = v * 1000;
            break;
        case O_FAULT:
            if (strcmp(optarg, "crash_before_expire") != 0 &&
                strcmp(optarg, "crash_in_section") != 0) {
                fprintf(stderr,
                        "miaosha-load: --fault: '%s' is not crash_before_expire or "
                        "crash_in_section\n",
                        optarg);
                return 2;
            }
            cfg.fault = optarg;
            break;
        case O_METHOD:
            if (strcmp(optarg, "POST") && strcmp(optarg, "GET")) {
                fprintf(stderr, "miaosha-load: --method: POST or GET\n");
                return 2;
            }
            cfg.method = optarg;
            break;
        case O_THREADS:
            if (parse_i64("--threads", optarg, 1, 64, &v))
                return 2;
            cfg.threads = (int)v;
            break;
        case O_TIMELINE:
            if (!*optarg) {
                fprintf(stderr, "miaosha-load: --timeline: empty file name\n");
                return 2;
            }
            timeline = optarg;
            cfg.trace_marks = 1;
            break;
        case O_LANG:
            if (lg_report_lang_parse(optarg, &lang) < 0) {
                fprintf(stderr, "miaosha-load: --lang: '%s' is not en|zh\n", optarg);
                return 2;
            }
            break;
        case O_ACKED_OUT:
            if (!*optarg) {
                fprintf(stderr, "miaosha-load: --acked-out: empty file name\n");
                return 2;
            }
            cfg.acked_out = optarg;
            break;
        case O_AUDIT_WAIT:
            if (parse_i64("--audit-wait-ms", optarg, 0, 600000, &v))
                return 2;
            cfg.audit_wait_ms = v;
            break;
        case O_HELP: fputs(run_help, stdout); return 0;
        default: fputs(run_help, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "miaosha-load run: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (json && csv) {
        fprintf(stderr, "miaosha-load: --json and --csv exclude each other\n");
        return 2;
    }
    if (cfg.buckets > 0 && cfg.stock < 0) {
        fprintf(stderr, "miaosha-load: --buckets splits the stock of the reset: not with "
                        "--stock -1\n");
        return 2;
    }
    if (cfg.admin_token && *cfg.admin_token && !admin_token_ok(cfg.admin_token))
        return 2;        /* $MIAOSHA_ADMIN_TOKEN */
    if (cfg.acked_out) { /* found out before the burst, not after it */
        FILE *f = fopen(cfg.acked_out, "a");
        if (f == NULL || fclose(f) != 0) {
            fprintf(stderr, "miaosha-load: --acked-out %s: cannot write it: %s\n", cfg.acked_out,
                    strerror(errno));
            return 2;
        }
    }
    if (cfg.ntargets == 0) {
        lg_url_parse("http://127.0.0.1:8080", &cfg.targets[0], err, sizeof err);
        cfg.ntargets = 1;
    }
    progress_state ps = {isatty(2), 0};
    cfg.progress = progress_bar;
    cfg.progress_ud = &ps;
    cfg.stop = &g_stop;
    lg_run_result *res = malloc(sizeof *res);
    if (!res) {
        fprintf(stderr, "miaosha-load: out of memory\n");
        return 3;
    }
    int rc = lg_run(&cfg, res, err, sizeof err);
    progress_clear(&ps);
    if (rc < 0) {
        fprintf(stderr, "miaosha-load: %s\n", err);
        free(res);
        return g_stop ? 130 : 3;
    }
    if (json)
        lg_report_json(stdout, &cfg, res, expect);
    else if (csv)
        lg_report_csv(stdout, &cfg, res, expect, 1);
    else
        lg_report_table(stdout, &cfg, res, expect);
    if (!res->audited)
        fprintf(stderr, "miaosha-load: audit failed: %s\n", res->audit_error);
    int status = lg_run_check(res, expect);
    /* A run that sold nothing because it never reached a purchase (every
     * request unanswered or refused as a 4xx: a dead target, a bad
     * --fault, a mode the server does not offer) or whose audit could not
     * be read is no verdict at all, whatever --expect says. */
    uint64_t answered = res->ok + res->sold_out + res->fenced_out + res->lock_busy +
                        res->redis_unavailable;
    if (cfg.requests > 0 && answered == 0) {
        fprintf(stderr,
                "miaosha-load: no purchase was answered (%llu without an answer, %llu other "
                "HTTP answers%s%s): the run did not happen\n",
                (unsigned long long)res->transport_errors, (unsigned long long)res->other_http,
                res->nerrs > 0 ? ", e.g. " : "", res->nerrs > 0 ? res->errs[0].error : "");
        status = 3;
    } else if (!res->audited) {
        status = 3;
    }
    if (timeline && write_run_timeline(timeline, &cfg, res, lang) < 0 && status == 0)
        status = 3;
    if (g_stop)
        status = 130;
    free(res);
    return status;
}

/* The whole of f (a file or stdin) into a malloc'd buffer; NULL on a read
 * error or out of memory. */
/* A saved trace: a ring of at most trace.ring_size (100000) records of a
 * few hundred bytes each per instance, so 256 MiB is more than any real
 * one; past that (a device, a wrong file) the read stops: NULL. */
#define TRACE_FILE_MAX ((size_t)256 << 20)

static char *slurp(FILE *f, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *p = malloc(cap);
    while (p) {
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        if (cap >= TRACE_FILE_MAX) {
            free(p);
            errno = EFBIG;
            return NULL;
        }
        char *q = realloc(p, cap * 2);
        if (!q) {
            free(p);
            return NULL;
        }
        p = q;
        cap *= 2;
    }
    if (p && ferror(f)) {
        free(p);
        return NULL;
    }
    *len = n;
    return p;
}

static int cmd_timeline(int argc, char **argv)
{
    enum { O_TRACE = 256, O_OUT, O_SKU, O_MODE, O_LANG, O_HELP };
    static const struct option opts[] = {{"trace", required_argument, 0, O_TRACE},
                                         {"out", required_argument, 0, O_OUT},
                                         {"sku", required_argument, 0, O_SKU},
                                         {"mode", required_argument, 0, O_MODE},
                                         {"lang", required_argument, 0, O_LANG},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    const char *traces[64], *out = NULL, *sku = NULL, *mode = NULL;
    int ntraces = 0;
    lg_report_lang lang = LG_LANG_EN;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_TRACE:
            if (ntraces == 64) {
                fprintf(stderr, "miaosha-load: at most 64 --trace\n");
                return 2;
            }
            traces[ntraces++] = optarg;
            break;
        case O_OUT: out = optarg; break;
        case O_SKU: sku = optarg; break;
        case O_MODE: mode = optarg; break;
        case O_LANG:
            if (lg_report_lang_parse(optarg, &lang) < 0) {
                fprintf(stderr, "miaosha-load: --lang: '%s' is not en|zh\n", optarg);
                return 2;
            }
            break;
        case O_HELP: fputs(timeline_help, stdout); return 0;
        default: fputs(timeline_help, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "miaosha-load timeline: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!out || !*out || ntraces == 0) {
        fprintf(stderr, "miaosha-load timeline: --trace FILE and --out FILE are required\n");
        return 2;
    }
    lg_trace_set set;
    lg_trace_set_init(&set);
    char err[512];
    int rc = 0;
    for (int i = 0; i < ntraces && rc == 0; i++) {
        int std = strcmp(traces[i], "-") == 0;
        FILE *f = std ? stdin : fopen(traces[i], "r");
        size_t len = 0;
        char *text = f ? slurp(f, &len) : NULL;
        if (f && !std)
            fclose(f);
        if (!text) {
            fprintf(stderr, "miaosha-load: %s: cannot read%s\n", traces[i],
                    errno == EFBIG ? " (more than 256 MiB)" : "");
            rc = 1;
        } else if (lg_trace_add_text(&set, text, len, err, sizeof err) < 0) {
            fprintf(stderr, "miaosha-load: %s: %s\n", traces[i], err);
            rc = 1;
        }
        free(text);
    }
    lg_timeline_page page = {sku, mode, NULL, lang == LG_LANG_ZH ? "zh" : "en", NULL, 0, 0};
    if (rc == 0 && lg_timeline_write(out, &page, &set, err, sizeof err) < 0) {
        fprintf(stderr, "miaosha-load: %s\n", err);
        rc = 1;
    }
    lg_trace_set_free(&set);
    return rc;
}

static int cmd_bench(int argc, char **argv)
{
    enum { O_TARGET = 256, O_PATH, O_CONC, O_DUR, O_THREADS, O_JSON, O_HELP };
    static const struct option opts[] = {{"target", required_argument, 0, O_TARGET},
                                         {"path", required_argument, 0, O_PATH},
                                         {"concurrency", required_argument, 0, O_CONC},
                                         {"duration", required_argument, 0, O_DUR},
                                         {"threads", required_argument, 0, O_THREADS},
                                         {"json", no_argument, 0, O_JSON},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    lg_bench_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    char err[512];
    int have_target = 0, json = 0, c;
    long long v;
    cfg.path = "/healthz";
    cfg.concurrency = 64;
    cfg.duration_s = 10;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_TARGET:
            if (lg_url_parse(optarg, &cfg.target, err, sizeof err) < 0) {
                fprintf(stderr, "miaosha-load: --target %s\n", err);
                return 2;
            }
            have_target = 1;
            break;
        case O_PATH:
            if (optarg[0] != '/' || !text_ok(optarg, 1024, 0)) {
                fprintf(stderr,
                        "miaosha-load: --path: '%s' must start with '/' and hold no space "
                        "or control character\n",
                        optarg);
                return 2;
            }
            cfg.path = optarg;
            break;
        case O_CONC:
            if (parse_i64("--concurrency", optarg, 1, 20000, &v))
                return 2;
            cfg.concurrency = (int)v;
            break;
        case O_DUR: {
            char *end;
            double d = strtod(optarg, &end);
            if (end == optarg || *end || !(d >= 0.001 && d <= 3600)) {
                fprintf(stderr, "miaosha-load: --duration: seconds in 0.001..3600\n");
                return 2;
            }
            cfg.duration_s = d;
            break;
        }
        case O_THREADS:
            if (parse_i64("--threads", optarg, 1, 64, &v))
                return 2;
            cfg.threads = (int)v;
            break;
        case O_JSON: json = 1; break;
        case O_HELP: fputs(bench_help, stdout); return 0;
        default: fputs(bench_help, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "miaosha-load bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!have_target)
        lg_url_parse("http://127.0.0.1:8080", &cfg.target, err, sizeof err);
    progress_state ps = {isatty(2), 0};
    cfg.progress = progress_bar;
    cfg.progress_ud = &ps;
    cfg.stop = &g_stop;
    lg_engine_result *res = malloc(sizeof *res);
    if (!res)
        return 3;
    int rc = lg_bench(&cfg, res, err, sizeof err);
    progress_clear(&ps);
    if (rc < 0) {
        fprintf(stderr, "miaosha-load: %s\n", err);
        free(res);
        return 3;
    }
    lg_report_bench(stdout, &cfg, res, json);
    uint64_t bad = 0;
    for (int k = 1; k < LG_ERR_COUNT; k++)
        bad += res->errors[k];
    for (int s = 100; s < 600; s++)
        if (s < 200 || s >= 300)
            bad += res->status[s];
    int status = bad || res->completed == 0 ? 1 : 0;
    free(res);
    return g_stop ? 130 : status;
}

static int cmd_matrix(int argc, char **argv, const char *argv0)
{
    enum {
        O_SERVER = 256,
        O_REDIS,
        O_REDIS_SERVER,
        O_OUT,
        O_QUICK,
        O_MODES,
        O_SCEN,
        O_SARG,
        O_FAULTS,
        O_TFACTOR,
        O_TARGET,
        O_CONFIG,
        O_TOKEN,
        O_LANG,
        O_TRIALS,
        O_NO_TIMELINES,
        O_MX_BUCKETS,
        O_HELP
    };
    static const struct option opts[] = {{"server", required_argument, 0, O_SERVER},
                                         {"redis", required_argument, 0, O_REDIS},
                                         {"redis-server", required_argument, 0, O_REDIS_SERVER},
                                         {"out", required_argument, 0, O_OUT},
                                         {"quick", no_argument, 0, O_QUICK},
                                         {"modes", required_argument, 0, O_MODES},
                                         {"scenarios", required_argument, 0, O_SCEN},
                                         {"server-arg", required_argument, 0, O_SARG},
                                         {"faults", no_argument, 0, O_FAULTS},
                                         {"time-factor", required_argument, 0, O_TFACTOR},
                                         {"target", required_argument, 0, O_TARGET},
                                         {"config", required_argument, 0, O_CONFIG},
                                         {"admin-token", required_argument, 0, O_TOKEN},
                                         {"lang", required_argument, 0, O_LANG},
                                         {"trials", required_argument, 0, O_TRIALS},
                                         {"no-timelines", no_argument, 0, O_NO_TIMELINES},
                                         {"buckets", required_argument, 0, O_MX_BUCKETS},
                                         {"help", no_argument, 0, O_HELP},
                                         {0, 0, 0, 0}};
    long long v;
    lg_matrix_cfg cfg;
    lg_matrix_cfg_init(&cfg);
    cfg.admin_token = getenv("MIAOSHA_ADMIN_TOKEN");
    lg_report_lang lang = LG_LANG_EN;
    char err[512];
    int c, faults = 0, scenarios = 0;
    const char *tf = getenv("MIAOSHA_TEST_TIME_FACTOR");
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_FAULTS: faults = 1; break;
        case O_TFACTOR:
            if (!*optarg) {
                fprintf(stderr,
                        "miaosha-load: --time-factor: expected a number in 1..50, got ''\n");
                return 2;
            }
            tf = optarg;
            break;
        case O_SERVER: cfg.server = optarg; break;
        case O_REDIS: cfg.redis = optarg; break;
        case O_REDIS_SERVER: cfg.redis_server = optarg; break;
        case O_TOKEN:
            if (!admin_token_ok(optarg))
                return 2;
            cfg.admin_token = optarg;
            break;
        case O_TARGET: {
            lg_url u;
            if (lg_url_parse(optarg, &u, err, sizeof err) < 0) {
                fprintf(stderr, "miaosha-load: --target: %s\n", err);
                return 2;
            }
            if (strlen(optarg) >= LG_MATRIX_URL_MAX) {
                fprintf(stderr, "miaosha-load: --target: URL too long\n");
                return 2;
            }
            cfg.target = optarg;
            break;
        }
        case O_OUT: cfg.out_dir = optarg; break;
        case O_QUICK: cfg.quick = 1; break;
        case O_LANG:
            if (lg_report_lang_parse(optarg, &lang) < 0) {
                fprintf(stderr, "miaosha-load: --lang: '%s' is not en|zh\n", optarg);
                return 2;
            }
            break;
        case O_TRIALS:
            if (parse_i64("--trials", optarg, 1, LG_MATRIX_MAX_TRIALS, &v))
                return 2;
            cfg.trials = (int)v;
            break;
        case O_NO_TIMELINES: cfg.no_timelines = 1; break;
        case O_MX_BUCKETS:
            if (parse_i64("--buckets", optarg, 2, 64, &v))
                return 2;
            cfg.buckets = (int)v;
            break;
        case O_MODES:
            if (lg_matrix_select(&cfg, optarg, NULL, err, sizeof err) < 0) {
                fprintf(stderr, "miaosha-load: --modes: %s\n", err);
                return 2;
            }
            break;
        case O_SCEN:
            scenarios = 1;
            if (lg_matrix_select(&cfg, NULL, optarg, err, sizeof err) < 0) {
                fprintf(stderr, "miaosha-load: --scenarios: %s\n", err);
                return 2;
            }
            break;
        case O_SARG:
        case O_CONFIG:
            if (cfg.nserver_args + (c == O_CONFIG) >= LG_MATRIX_MAX_ARGS) {
                fprintf(stderr, "miaosha-load: too many --server-arg / --config\n");
                return 2;
            }
            if (c == O_CONFIG)
                cfg.server_args[cfg.nserver_args++] = "--config";
            cfg.server_args[cfg.nserver_args++] = optarg;
            break;
        case O_HELP: fputs(matrix_help, stdout); return 0;
        default: fputs(matrix_help, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "miaosha-load matrix: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (cfg.admin_token && *cfg.admin_token && !admin_token_ok(cfg.admin_token))
        return 2; /* $MIAOSHA_ADMIN_TOKEN, as run checks it */
    if (faults && scenarios) {
        fprintf(stderr, "miaosha-load: --faults and --scenarios: give one of them\n");
        return 2;
    }
    if (faults)
        lg_matrix_select_faults(&cfg);
    if (lg_matrix_has_faults(&cfg) && cfg.redis) {
        fprintf(stderr, "miaosha-load: the fault scenarios stop and restart Redis: they run "
                        "on their own private redis-server (drop --redis)\n");
        return 2;
    }
    if (tf && *tf) {
        char *end;
        errno = 0;
        cfg.time_factor = strtod(tf, &end);
        if (errno || *end || !(cfg.time_factor >= 1.0 && cfg.time_factor <= 50.0)) {
            fprintf(stderr, "miaosha-load: --time-factor: expected a number in 1..50, got '%s'\n",
                    tf);
            return 2;
        }
    }
    static char server_buf[4096];
    if (!cfg.server) {
        cfg.server = getenv("MIAOSHA_SERVER");
        if (!cfg.server && lg_matrix_default_server(argv0, server_buf, sizeof server_buf) == 0)
            cfg.server = server_buf;
        if (!cfg.server) {
            fprintf(stderr, "miaosha-load: no miaosha-server found: pass --server PATH\n");
            return 3;
        }
    }
    cfg.stop = &g_stop;
    cfg.log = stderr;
    cfg.lang = lang == LG_LANG_ZH ? "zh" : "en";
    lg_matrix_result *res = calloc(1, sizeof *res);
    if (!res)
        return 3;
    int rc = lg_matrix_run(&cfg, res, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "miaosha-load: matrix: %s\n", err);
        lg_matrix_result_free(res);
        free(res);
        return g_stop ? 130 : 3;
    }
    lg_matrix_print(stdout, &cfg, res, lang);
    if (lg_matrix_write_files(&cfg, res, lang, err, sizeof err) < 0 ||
        lg_matrix_write_html(&cfg, res, lang, err, sizeof err) < 0) {
        fprintf(stderr, "miaosha-load: matrix: %s\n", err);
        lg_matrix_result_free(res);
        free(res);
        return 3;
    }
    printf(lang == LG_LANG_ZH
               ? "已写入 %s/matrix.md、%s/matrix.csv、%s/matrix.svg、%s/matrix.html\n"
               : "wrote %s/matrix.md, %s/matrix.csv, %s/matrix.svg, %s/matrix.html\n",
           cfg.out_dir, cfg.out_dir, cfg.out_dir, cfg.out_dir);
    int status = res->mismatches ? 1 : 0;
    if (res->mismatches)
        fprintf(stderr, "miaosha-load: matrix: %d cell(s) differ from the expected outcome\n",
                res->mismatches);
    lg_matrix_result_free(res);
    free(res);
    return g_stop ? 130 : status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage_text, stdout);
        fputs("\n", stdout);
        fputs(run_help, stdout);
        fputs("\n", stdout);
        fputs(bench_help, stdout);
        fputs("\n", stdout);
        fputs(matrix_help, stdout);
        fputs("\n", stdout);
        fputs(timeline_help, stdout);
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* one descriptor per connection: allow as many as the hard limit does */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "miaosha-load: curl_global_init failed\n");
        return 3;
    }
    lg_admin_cancel_on(&g_stop);
    int rc;
    if (!strcmp(argv[1], "run"))
        rc = cmd_run(argc - 1, argv + 1);
    else if (!strcmp(argv[1], "bench"))
        rc = cmd_bench(argc - 1, argv + 1);
    else if (!strcmp(argv[1], "matrix"))
        rc = cmd_matrix(argc - 1, argv + 1, argv[0]);
    else if (!strcmp(argv[1], "timeline"))
        rc = cmd_timeline(argc - 1, argv + 1);
    else {
        fprintf(stderr, "miaosha-load: unknown command '%s'\n%s", argv[1], usage_text);
        rc = 2;
    }
    curl_global_cleanup();
    return rc;
}
