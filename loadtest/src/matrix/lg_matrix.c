/* lg_matrix.c — see lg_matrix.h.
 *
 * How each scenario is widened so its outcome is deterministic, not lucky:
 *   race    work_ms 10 inside the section and the whole burst released at
 *           once by the engine's barrier: with no lock, every concurrent
 *           buyer reads the same stock before anyone writes it back.
 *           Lock modes get wait_ms 30000 (nobody gives up) and, for
 *           setnx/token, lease_ms 10000 (no lease ever runs out).
 *   multi   the same burst over 3 instances: each instance's in-process
 *           mutex admits one holder, so 3 overlap for work_ms at a time.
 *   slow    work_ms 300 > lease 200 (setnx/token: lease_ms=200 per request
 *           and lock.lease_ms=200; reentrant: lock.watchdog_timeout_ms=200
 *           and no lease_ms, so the watchdog renews): each lease runs out
 *           100 ms before its holder writes, so the next holder always
 *           reads the stale stock. One instance (mutex serialises there).
 *   crash   faults.enabled; one request with fault=crash_in_section
 *           (setnx: crash_before_expire) kills the instance while it holds
 *           the lock; the instance is restarted with a new instance id;
 *           probes (wait_ms 100) buy every 20 ms until the first 200 or the
 *           window (3 s) ends. Lease and watchdog timeout are 1000 ms.
 *   nested  reenter=2, one buyer at a time (concurrency 1, so `none` cannot
 *           race), wait_ms 300: a non-reentrant lock waits for itself.
 * The fault scenarios (kill, redis-restart, redis-pause) are in lg_fault.c.
 */
#include "lg_matrix.h"

#include <errno.h>
#include <stdarg.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lg_admin.h"
#include "lg_mx_proc.h"
#include "lg_proc.h"

/* mkdir -p: --out may name a directory whose parents do not exist yet. */
static int mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

const char *const lg_mode_names[LG_NMODES] = {"none", "mutex", "setnx", "token", "reentrant"};
const char *const lg_scen_names[LG_NSCEN] = {
    "race", "multi", "slow", "crash", "nested",  /* the demo (issue 4) */
    "kill", "redis-restart", "redis-pause"};     /* the faults (issue 5), lg_fault.c */
static const char *const scen_titles[LG_NSCEN] = {
    "race (1 instance)",   "multi-instance (3)", "slow holder (work > lease)",
    "crash while holding", "nested (reenter=2)", "instance kill -9 (3)",
    "Redis restart (AOF)", "Redis paused 2 s"};

static const char *expected_of(int s, int m)
{
    switch (s) {
    case S_RACE: return m == M_NONE ? "oversell" : "exact";
    case S_MULTI: return m == M_NONE || m == M_MUTEX ? "oversell" : "exact";
    case S_SLOW: return m == M_NONE || m == M_SETNX || m == M_TOKEN ? "oversell" : "exact";
    case S_CRASH: return m == M_SETNX ? "stuck" : "recovers";
    case S_NESTED: return m == M_NONE || m == M_REENTRANT ? "sells" : "blocks";
    default: return lg_fault_expected(s, m);
    }
}

#define CRASH_LEASE_MS 1000
#define CRASH_WINDOW_MS 3000
#define SLOW_LEASE_MS 200
#define SLOW_WORK_MS 300

void lg_matrix_cfg_init(lg_matrix_cfg *c)
{
    memset(c, 0, sizeof *c);
    c->redis_server = "redis-server";
    c->out_dir = "matrix-out";
    for (int i = 0; i < LG_NMODES; i++)
        c->mode_on[i] = 1;
    for (int i = 0; i < LG_NDEMO; i++)
        c->scen_on[i] = 1;
    c->time_factor = 1.0;
}

int lg_matrix_has_faults(const lg_matrix_cfg *c)
{
    for (int s = 0; s < LG_NSCEN; s++)
        if (c->scen_on[s] && LG_IS_FAULT(s))
            return 1;
    return 0;
}

void lg_matrix_select_faults(lg_matrix_cfg *c)
{
    for (int s = 0; s < LG_NSCEN; s++)
        c->scen_on[s] = LG_IS_FAULT(s);
}

static int select_list(const char *list, const char *const *names, int n, int *on, char *err,
                       size_t errlen)
{
    int tmp[16] = {0};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!strcmp(t, names[i]))
                tmp[i] = found = 1;
        if (!found) {
            snprintf(err, errlen, "unknown name '%s'", t);
            return -1;
        }
    }
    for (int i = 0; i < n; i++)
        on[i] = tmp[i];
    return 0;
}

int lg_matrix_select(lg_matrix_cfg *c, const char *modes, const char *scens, char *err,
                     size_t errlen)
{
    if (modes && select_list(modes, lg_mode_names, LG_NMODES, c->mode_on, err, errlen) < 0)
        return -1;
    if (scens && select_list(scens, lg_scen_names, LG_NSCEN, c->scen_on, err, errlen) < 0)
        return -1;
    return 0;
}

int lg_matrix_default_server(const char *argv0, char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        if (!argv0 || !realpath(argv0, self))
            return -1;
    } else {
        self[n] = 0;
    }
    char *dir = dirname(self);
    snprintf(buf, len, "%s/../service/miaosha-server", dir);
    if (access(buf, X_OK) == 0)
        return 0;
    return -1;
}

/* --- instances ------------------------------------------------------------ */

void lg_mx_log(const mctx *x, const char *fmt, ...)
{
    if (!x->cfg->log)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("matrix: ", x->cfg->log);
    vfprintf(x->cfg->log, fmt, ap);
    fputc('\n', x->cfg->log);
    fflush(x->cfg->log);
    va_end(ap);
}

int lg_mx_stopped(const mctx *x)
{
    return x->cfg->stop && *x->cfg->stop;
}

long long lg_mx_bound(const mctx *x, long long ms)
{
    double f = x->cfg->time_factor >= 1.0 ? x->cfg->time_factor : 1.0;
    return (long long)((double)ms * f);
}

int lg_mx_instance_spawn(mctx *x, instance *in, char *err, size_t errlen)
{
    if (in->port <= 0)
        in->port = lg_free_port();
    if (in->port <= 0) {
        snprintf(err, errlen, "no free port");
        return -1;
    }
    in->generation++;
    char port[16], id[64], logp[PATH_MAX + 64];
    snprintf(port, sizeof port, "%d", in->port);
    snprintf(id, sizeof id, "%s-g%d", in->id, in->generation);
    snprintf(logp, sizeof logp, "%s/%s.log", x->logdir, in->id);
    const char *argv[16 + LG_INSTANCE_MAX_EXTRA + LG_MATRIX_MAX_ARGS];
    int n = 0;
    argv[n++] = x->cfg->server;
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--redis";
    argv[n++] = x->redis_addr;
    argv[n++] = "--instance-id";
    argv[n++] = id;
    for (int i = 0; i < in->nextra; i++)
        argv[n++] = in->extra[i];
    for (int i = 0; i < x->cfg->nserver_args; i++)
        argv[n++] = x->cfg->server_args[i];
    argv[n] = NULL;
    in->pid = lg_spawn(argv, logp, err, errlen);
    if (in->pid < 0) {
        in->pid = 0;
        return -1;
    }
    snprintf(in->base, sizeof in->base, "http://127.0.0.1:%d", in->port);
    return 0;
}

int lg_mx_instance_poll(instance *in)
{
    if (in->pid <= 0)
        return -1;
    if (lg_admin_healthy(in->base, 500))
        return 1;
    if (lg_wait_exit(in->pid, 0)) {
        in->pid = 0;
        return -1;
    }
    return 0;
}

int lg_mx_instance_start(mctx *x, instance *in, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt > 0)
            in->port = 0; /* the port may be taken: pick another */
        if (lg_mx_instance_spawn(x, in, err, errlen) < 0)
            return -1;
        long long end = lg_now_ms() + 10000;
        int st = 0;
        while (lg_now_ms() < end && !lg_mx_stopped(x)) {
            st = lg_mx_instance_poll(in);
            if (st != 0)
                break;
            lg_sleep_ms(30);
        }
        if (st == 1)
            return 0;
        if (st == 0)
            lg_mx_instance_stop(in);
        if (lg_mx_stopped(x))
            break;
        if (st == 0) {
            snprintf(err, errlen, "%s did not answer /healthz 200 within 10 s (log: %s/%s.log)",
                     x->cfg->server, x->logdir, in->id);
            return -1;
        }
        snprintf(err, errlen, "%s exited at start (log: %s/%s.log)", x->cfg->server, x->logdir,
                 in->id);
    }
    if (lg_mx_stopped(x))
        snprintf(err, errlen, "interrupted");
    return -1;
}

void lg_mx_instance_stop(instance *in)
{
    if (in->pid > 0)
        lg_stop(in->pid, 5000);
    in->pid = 0;
}

static int start_redis(mctx *x, char *err, size_t errlen)
{
    if (x->cfg->redis) {
        const char *colon = strrchr(x->cfg->redis, ':');
        int port = colon ? atoi(colon + 1) : 0;
        if (!colon || port <= 0 || port > 65535) {
            snprintf(err, errlen, "--redis: expected host:port, got '%s'", x->cfg->redis);
            return -1;
        }
        snprintf(x->redis_addr, sizeof x->redis_addr, "%s", x->cfg->redis);
        x->redis_port = port;
        return 0;
    }
    snprintf(x->redis_dir, sizeof x->redis_dir, "/tmp/miaosha-matrix-redis-XXXXXX");
    if (!mkdtemp(x->redis_dir)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        x->redis_dir[0] = 0;
        return -1;
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        x->redis_port = 0;
        if (lg_mx_redis_spawn(x, err, errlen) == 0)
            return 0;
    }
    return -1;
}

int lg_mx_redis_spawn(mctx *x, char *err, size_t errlen)
{
    int port = x->redis_port > 0 ? x->redis_port : lg_free_port();
    char ports[16], logp[PATH_MAX + 32];
    snprintf(ports, sizeof ports, "%d", port);
    snprintf(logp, sizeof logp, "%s/redis.log", x->logdir);
    /* AOF for the fault scenarios: a restart must reload every write that
     * was acknowledged (appendfsync always), as issue 5 asks */
    const char *aof = x->redis_aof ? "yes" : "no";
    const char *argv[] = {x->cfg->redis_server, "--port", ports, "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", aof, "--appendfsync", "always",
                    "--dir", x->redis_dir, "--daemonize", "no", "--maxclients", "10000", NULL};
    pid_t pid = lg_spawn(argv, logp, err, errlen);
    if (pid < 0)
        return -1;
    for (int i = 0; i < 200 && !lg_mx_stopped(x); i++) {
        if (lg_redis_ping(port, 200)) {
            x->redis_pid = pid;
            x->redis_port = port;
            snprintf(x->redis_addr, sizeof x->redis_addr, "127.0.0.1:%d", port);
            return 0;
        }
        if (lg_wait_exit(pid, 0))
            break;
        lg_sleep_ms(50);
    }
    lg_stop(pid, 1000);
    snprintf(err, errlen, "could not start %s on port %d (see %s/redis.log)",
             x->cfg->redis_server, port, x->logdir);
    return -1;
}

/* --- cells ---------------------------------------------------------------- */

void lg_mx_fill_from_run(lg_cell *c, const lg_run_result *r)
{
    c->requests = r->requests;
    c->ok = r->ok;
    c->sold_out = r->sold_out;
    c->lock_busy = r->lock_busy;
    c->errors = lg_run_errors(r) + r->not_sent;
    c->lock_lost = r->lock_lost;
    c->deleted_other_lock = r->deleted_other_lock;
    c->dup = r->dup_orders + r->dup_ok_ids;
    c->missing = r->missing;
    c->elapsed_s = r->eng.elapsed_s;
    if (r->audited) {
        c->stock = r->audit.initial;
        c->sold = r->audit.sold;
        c->stock_left = r->audit.stock;
        c->oversold = r->audit.oversold;
        c->undersold = r->audit.undersold;
    }
}

static void classify_burst(lg_cell *c, const lg_run_result *r, int scen)
{
    if (!r->audited) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no audit: %.200s", r->audit_error);
        return;
    }
    if (c->oversold > 0) {
        snprintf(c->outcome, sizeof c->outcome, "oversell");
        snprintf(c->reason, sizeof c->reason,
                 "sold %lld of %lld (+%lld oversold), %llu lock_lost", (long long)c->sold,
                 (long long)c->stock, (long long)c->oversold, (unsigned long long)c->lock_lost);
        return;
    }
    int clean = c->undersold == 0 && c->dup == 0 && c->missing == 0 && r->ok_without_id == 0;
    if (!clean) {
        snprintf(c->outcome, sizeof c->outcome, "unsafe");
        snprintf(c->reason, sizeof c->reason,
                 "undersold %lld, duplicate ids %llu, missing orders %llu",
                 (long long)c->undersold, (unsigned long long)c->dup,
                 (unsigned long long)c->missing);
        return;
    }
    if (c->sold == c->stock && c->stock_left == 0) {
        snprintf(c->outcome, sizeof c->outcome, "%s", scen == S_NESTED ? "sells" : "exact");
        snprintf(c->reason, sizeof c->reason, "sold exactly %lld, %llu sold_out, %llu orders",
                 (long long)c->sold, (unsigned long long)c->sold_out,
                 (unsigned long long)r->orders_listed);
        return;
    }
    if (c->sold == 0 && c->lock_busy == c->requests) {
        snprintf(c->outcome, sizeof c->outcome, "blocks");
        snprintf(c->reason, sizeof c->reason,
                 "all %llu buyers lock_busy: the lock waits for itself",
                 (unsigned long long)c->lock_busy);
        return;
    }
    snprintf(c->outcome, sizeof c->outcome, "short");
    snprintf(c->reason, sizeof c->reason,
             "sold %lld of %lld: %llu lock_busy, %llu errors", (long long)c->sold,
             (long long)c->stock, (unsigned long long)c->lock_busy, (unsigned long long)c->errors);
}

int lg_mx_targets(lg_run_cfg *rc, const instance *ins, int nins, char *err, size_t errlen)
{
    for (int i = 0; i < nins && i < LG_MAX_TARGETS; i++) {
        char e2[256];
        if (lg_url_parse(ins[i].base, &rc->targets[i], e2, sizeof e2) < 0) {
            snprintf(err, errlen, "%s", e2);
            return -1;
        }
    }
    rc->ntargets = nins < LG_MAX_TARGETS ? nins : LG_MAX_TARGETS;
    return 0;
}

typedef struct burst {
    int64_t stock, work_ms, lease_ms, wait_ms, reenter;
    uint64_t requests;
    int concurrency;
} burst;

static int run_burst(mctx *x, lg_cell *c, int scen, int mode, instance *ins, int nins,
                     const burst *b, char *err, size_t errlen)
{
    lg_run_cfg rc;
    lg_run_cfg_init(&rc);
    char sku[64];
    snprintf(sku, sizeof sku, "mx-%s-%s", lg_scen_names[scen], lg_mode_names[mode]);
    rc.mode = lg_mode_names[mode];
    rc.sku = sku;
    rc.requests = b->requests;
    rc.concurrency = b->concurrency;
    rc.stock = b->stock;
    rc.work_ms = b->work_ms;
    rc.wait_ms = b->wait_ms;
    rc.reenter = b->reenter;
    /* reentrant runs on its watchdog: an explicit lease_ms would switch it
     * off (issue 3), so it is only sent to setnx and token */
    rc.lease_ms = mode == M_SETNX || mode == M_TOKEN ? b->lease_ms : -1;
    rc.deadline_ms = 90000;
    rc.stop = x->cfg->stop;
    rc.admin_token = x->cfg->admin_token;
    if (lg_mx_targets(&rc, ins, nins, err, errlen) < 0)
        return -1;
    lg_run_result *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (lg_run(&rc, r, err, errlen) < 0) {
        free(r);
        return -1;
    }
    c->ran = 1;
    c->recovery_ms = -1;
    lg_mx_fill_from_run(c, r);
    classify_burst(c, r, scen);
    free(r);
    return 0;
}

/* One crash cell: crash the holder, restart, probe until a sale. */
static int run_crash(mctx *x, lg_cell *c, int mode, instance *in, int64_t stock, char *err,
                     size_t errlen)
{
    const char *m = lg_mode_names[mode];
    char sku[64];
    snprintf(sku, sizeof sku, "mx-crash-%s", m);
    c->ran = 1;
    c->stock = stock;
    c->window_ms = CRASH_WINDOW_MS;
    c->recovery_ms = -1;
    if (in->pid <= 0 && lg_mx_instance_start(x, in, err, errlen) < 0)
        return -1;
    if (lg_admin_reset(in->base, sku, stock, x->cfg->admin_token, err, errlen) < 0)
        return -1;
    const char *fault = mode == M_SETNX ? "crash_before_expire" : "crash_in_section";
    char lease[32] = "";
    if (mode == M_SETNX || mode == M_TOKEN)
        snprintf(lease, sizeof lease, "&lease_ms=%d", CRASH_LEASE_MS);
    char url[512];
    snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=crasher&work_ms=0&wait_ms=1000%s&fault=%s",
             in->base, m, sku, lease, fault);
    long st = 0;
    char *body = NULL, e2[256];
    int rc = lg_http_call("POST", url, NULL, NULL, 5000, &st, &body, e2, sizeof e2);
    long long t_crash = lg_now_ms();
    if (rc == 0) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "fault request answered %ld instead of crashing: %.120s%s",
                 st, body ? body : "", st == 403 ? " (faults.enabled not set?)" : "");
        free(body);
        return 0;
    }
    free(body);
    if (!lg_wait_exit(in->pid, 3000)) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "instance did not exit after %s", fault);
        lg_mx_instance_stop(in);
        return 0;
    }
    in->pid = 0;
    if (lg_mx_instance_start(x, in, err, errlen) < 0)
        return -1;
    long long restarted = lg_now_ms() - t_crash;
    uint64_t probes = 0, busy = 0, other = 0;
    for (int i = 0; !lg_mx_stopped(x); i++) {
        long long now = lg_now_ms();
        if (now - t_crash > CRASH_WINDOW_MS)
            break;
        snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=probe%d&work_ms=0&wait_ms=100%s",
                 in->base, m, sku, i, lease);
        rc = lg_http_call("POST", url, NULL, NULL, 3000, &st, NULL, e2, sizeof e2);
        probes++;
        if (rc == 0 && st == 200) {
            c->recovery_ms = lg_now_ms() - t_crash;
            c->ok = 1;
            break;
        }
        if (rc == 0 && st == 429)
            busy++;
        else
            other++;
        lg_sleep_ms(20);
    }
    c->requests = probes;
    c->lock_busy = busy;
    c->errors = other;
    lg_audit a;
    if (lg_admin_audit(in->base, sku, &a, e2, sizeof e2) == 0) {
        c->sold = a.sold;
        c->stock_left = a.stock;
        c->oversold = a.oversold;
        c->undersold = a.undersold;
    }
    if (c->recovery_ms < 0) {
        c->stuck = 1;
        snprintf(c->outcome, sizeof c->outcome, "%s", busy && !other ? "stuck" : "error");
        snprintf(c->reason, sizeof c->reason,
                 "no sale for %d ms after the crash: %llu of %llu probes lock_busy, %llu other "
                 "(restart took %lld ms)",
                 CRASH_WINDOW_MS, (unsigned long long)busy, (unsigned long long)probes,
                 (unsigned long long)other, restarted);
    } else {
        snprintf(c->outcome, sizeof c->outcome, "recovers");
        if (mode == M_TOKEN || mode == M_REENTRANT)
            snprintf(c->reason, sizeof c->reason,
                     "first sale %lld ms after the crash: %s (%d ms) ran out; restart %lld ms, "
                     "%llu probes lock_busy before",
                     (long long)c->recovery_ms,
                     mode == M_TOKEN ? "the lease" : "the watchdog timeout", CRASH_LEASE_MS,
                     restarted, (unsigned long long)busy);
        else
            snprintf(c->reason, sizeof c->reason,
                     "first sale %lld ms after the crash: no lock outlives the process (restart "
                     "%lld ms)",
                     (long long)c->recovery_ms, restarted);
    }
    /* clears the stuck lock too (PUT /stock deletes the lock key) */
    lg_admin_reset(in->base, sku, 0, x->cfg->admin_token, e2, sizeof e2);
    return 0;
}

/* expected is one outcome or several separated by '|' */
static int outcome_matches(const char *expected, const char *outcome)
{
    size_t n = strlen(outcome);
    for (const char *p = expected; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, outcome, n))
            return 1;
        if (!bar)
            break;
        p = bar + 1;
    }
    return 0;
}

static void judge(lg_cell *c, int scen, int mode)
{
    c->expected = expected_of(scen, mode);
    c->pass = outcome_matches(c->expected, c->outcome);
    if (scen == S_SLOW) {
        /* The other half of the slow holder (seed 002 §3.4): setnx's late
         * DEL deletes a later holder's lock; token's and reentrant's owner
         * checks never do. */
        int want = mode == M_SETNX;
        size_t l = strlen(c->reason);
        snprintf(c->reason + l, sizeof c->reason - l, "; %llu release(s) deleted another's lock",
                 (unsigned long long)c->deleted_other_lock);
        if ((c->deleted_other_lock > 0) != want) {
            c->pass = 0;
            l = strlen(c->reason);
            snprintf(c->reason + l, sizeof c->reason - l, " — expected %s",
                     want ? "some" : "none");
        }
    }
    if (c->pass && scen == S_CRASH && (mode == M_TOKEN || mode == M_REENTRANT)) {
        /* recovery must come from the lease / watchdog running out, not
         * earlier (that would mean the lock did not survive the crash) and
         * not much later */
        if (c->recovery_ms < CRASH_LEASE_MS / 2 || c->recovery_ms > CRASH_LEASE_MS + 2000) {
            c->pass = 0;
            size_t l = strlen(c->reason);
            snprintf(c->reason + l, sizeof c->reason - l, " — outside [%d, %d] ms",
                     CRASH_LEASE_MS / 2, CRASH_LEASE_MS + 2000);
        }
    }
}

int lg_matrix_run(const lg_matrix_cfg *cfg, lg_matrix_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    mctx x;
    memset(&x, 0, sizeof x);
    x.cfg = cfg;
    x.res = res;
    long long t0 = lg_now_ms();
    if (mkdir_p(cfg->out_dir) < 0) {
        snprintf(err, errlen, "%s: %s", cfg->out_dir, strerror(errno));
        return -1;
    }
    snprintf(x.logdir, sizeof x.logdir, "%s/logs", cfg->out_dir);
    if (mkdir(x.logdir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", x.logdir, strerror(errno));
        return -1;
    }
    if (access(cfg->server, X_OK) != 0) {
        snprintf(err, errlen, "server binary %s: %s", cfg->server, strerror(errno));
        return -1;
    }
    int faults = lg_matrix_has_faults(cfg);
    if (faults && cfg->redis) {
        snprintf(err, errlen, "the fault scenarios kill, pause and restart Redis: they run on "
                              "the private redis-server only (drop --redis)");
        return -1;
    }
    x.redis_aof = faults;
    int rc = -1;
    instance base[3], slow, crash, fault[3];
    memset(fault, 0, sizeof fault);
    lg_fault_instances(fault);
    memset(base, 0, sizeof base);
    memset(&slow, 0, sizeof slow);
    memset(&crash, 0, sizeof crash);
    for (int i = 0; i < 3; i++)
        snprintf(base[i].id, sizeof base[i].id, "mx-base-%d", i);
    snprintf(slow.id, sizeof slow.id, "mx-slow");
    slow.extra[0] = "--set";
    slow.extra[1] = "lock.lease_ms=200";
    slow.extra[2] = "--set";
    slow.extra[3] = "lock.watchdog_timeout_ms=200";
    slow.nextra = 4;
    snprintf(crash.id, sizeof crash.id, "mx-crash");
    crash.extra[0] = "--set";
    crash.extra[1] = "faults.enabled=true";
    crash.extra[2] = "--set";
    crash.extra[3] = "lock.lease_ms=1000";
    crash.extra[4] = "--set";
    crash.extra[5] = "lock.watchdog_timeout_ms=1000";
    crash.nextra = 6;

    if (start_redis(&x, err, errlen) < 0)
        goto out;
    snprintf(res->redis, sizeof res->redis, "%s%s", x.redis_addr,
             cfg->redis ? "" : " (private)");
    lg_mx_log(&x, "redis at %s; server %s; logs in %s", res->redis, cfg->server, x.logdir);

    int q = cfg->quick;
    burst race = {q ? 20 : 100, 10, 10000, 30000, -1, q ? 200 : 1000, q ? 50 : 100};
    burst slowb = {q ? 4 : 10, SLOW_WORK_MS, SLOW_LEASE_MS, 30000, -1, q ? 12 : 30, q ? 12 : 30};
    burst nested = {q ? 3 : 5, 0, 5000, 300, 2, q ? 6 : 10, 1};
    /* multi: three instances of ours, or the balancer given as --target */
    int own_multi = cfg->scen_on[S_MULTI] && !cfg->target;
    instance lb;
    memset(&lb, 0, sizeof lb);
    lb.pid = -1;
    if (cfg->target)
        snprintf(lb.base, sizeof lb.base, "%s", cfg->target);
    int nbase = own_multi ? 3 : 1;
    if (cfg->scen_on[S_RACE] || own_multi || cfg->scen_on[S_NESTED]) {
        for (int i = 0; i < nbase; i++)
            if (lg_mx_instance_start(&x, &base[i], err, errlen) < 0)
                goto out;
        lg_mx_log(&x, "%d instance(s) up", nbase);
    }
    for (int s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        if (s == S_SLOW && lg_mx_instance_start(&x, &slow, err, errlen) < 0)
            goto out;
        if (s == S_CRASH && lg_mx_instance_start(&x, &crash, err, errlen) < 0)
            goto out;
        for (int i = 0; i < 3 && LG_IS_FAULT(s); i++)
            if (fault[i].pid <= 0 && lg_mx_instance_start(&x, &fault[i], err, errlen) < 0)
                goto out;
        for (int m = 0; m < LG_NMODES; m++) {
            if (!cfg->mode_on[m])
                continue;
            if (lg_mx_stopped(&x)) {
                snprintf(err, errlen, "interrupted");
                goto out;
            }
            lg_cell *c = &res->cell[s][m];
            int r;
            switch (s) {
            case S_RACE: r = run_burst(&x, c, s, m, base, 1, &race, err, errlen); break;
            case S_MULTI:
                r = cfg->target ? run_burst(&x, c, s, m, &lb, 1, &race, err, errlen)
                                : run_burst(&x, c, s, m, base, 3, &race, err, errlen);
                break;
            case S_SLOW: r = run_burst(&x, c, s, m, &slow, 1, &slowb, err, errlen); break;
            case S_CRASH: r = run_crash(&x, c, m, &crash, q ? 5 : 10, err, errlen); break;
            case S_NESTED: r = run_burst(&x, c, s, m, base, 1, &nested, err, errlen); break;
            default: r = lg_fault_cell(&x, c, s, m, fault, err, errlen); break;
            }
            if (lg_mx_stopped(&x)) {
                /* interrupted mid-cell: its numbers mean nothing */
                memset(c, 0, sizeof *c);
                snprintf(err, errlen, "interrupted");
                goto out;
            }
            if (r < 0) {
                /* one cell could not run: record it, go on */
                c->ran = 1;
                snprintf(c->outcome, sizeof c->outcome, "error");
                snprintf(c->reason, sizeof c->reason, "%.230s", err);
            }
            judge(c, s, m);
            if (!c->pass)
                res->mismatches++;
            lg_mx_log(&x, "%-6s %-9s expected %-8s measured %-8s %s  %s", lg_scen_names[s],
                      lg_mode_names[m], c->expected, c->outcome, c->pass ? "ok  " : "DIFF",
                      c->reason);
        }
        if (s == S_SLOW)
            lg_mx_instance_stop(&slow);
        if (s == S_CRASH)
            lg_mx_instance_stop(&crash);
    }
    rc = 0;
out:
    for (int i = 0; i < 3; i++)
        lg_mx_instance_stop(&base[i]);
    lg_mx_instance_stop(&slow);
    lg_mx_instance_stop(&crash);
    for (int i = 0; i < 3; i++)
        lg_mx_instance_stop(&fault[i]);
    if (x.redis_pid > 0)
        lg_stop(x.redis_pid, 3000);
    lg_proc_kill_all(2000);
    lg_rm_tree(x.redis_dir); /* dump.rdb, appendonlydir/ */
    res->elapsed_s = (double)(lg_now_ms() - t0) / 1000.0;
    return rc;
}

/* --- output --------------------------------------------------------------- */

static void cell_short(int s, const lg_cell *c, char *buf, size_t len)
{
    if (!c->ran) {
        snprintf(buf, len, "-");
        return;
    }
    const char *verdict = c->pass ? "ok" : "DIFF";
    if (LG_IS_FAULT(s) && (!strcmp(c->outcome, "safe") || !strcmp(c->outcome, "late"))) {
        /* the fault's headline figure; sold/stock is the stock by definition */
        if (s == S_KILL)
            snprintf(buf, len, "%s %s freed %lldms", verdict, c->outcome, (long long)c->freed_ms);
        else if (s == S_REDIS_RESTART)
            snprintf(buf, len, "%s %s back %lldms", verdict, c->outcome,
                     (long long)c->reconnect_ms);
        else
            snprintf(buf, len, "%s %s 503 %lldms", verdict, c->outcome,
                     (long long)c->failfast_ms);
        return;
    }
    if (!strcmp(c->expected, "stuck") || !strcmp(c->expected, "recovers")) {
        if (c->recovery_ms >= 0)
            snprintf(buf, len, "%s %s %lldms", c->pass ? "ok" : "DIFF", c->outcome,
                     (long long)c->recovery_ms);
        else
            snprintf(buf, len, "%s %s", c->pass ? "ok" : "DIFF", c->outcome);
        return;
    }
    snprintf(buf, len, "%s %s %lld/%lld", c->pass ? "ok" : "DIFF", c->outcome, (long long)c->sold,
             (long long)c->stock);
}

/* A fault measurement in ms, "-" when not measured. */
static void fmt_ms(char *buf, size_t len, int64_t ms)
{
    if (ms < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%lld", (long long)ms);
}

void lg_matrix_print(FILE *o, const lg_matrix_cfg *cfg, const lg_matrix_result *r)
{
    fprintf(o, "\nmiaosha oversell matrix%s — redis %s — %.1f s\n", cfg->quick ? " (quick)" : "",
            r->redis, r->elapsed_s);
    if (cfg->target && cfg->scen_on[S_MULTI])
        fprintf(o, "multi-instance scenario through %s\n", cfg->target);
    fprintf(o, "%-10s", "mode");
    for (int s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fprintf(o, " | %-24s", lg_scen_names[s]);
    fputc('\n', o);
    for (int m = 0; m < LG_NMODES; m++) {
        if (!cfg->mode_on[m])
            continue;
        fprintf(o, "%-10s", lg_mode_names[m]);
        for (int s = 0; s < LG_NSCEN; s++) {
            if (!cfg->scen_on[s])
                continue;
            char b[64];
            cell_short(s, &r->cell[s][m], b, sizeof b);
            fprintf(o, " | %-24s", b);
        }
        fputc('\n', o);
    }
    fputs("(cells: ok/DIFF vs expected, measured outcome, sold/stock or recovery time)\n\n", o);
    fputs("scenario      mode      expected   measured oversold undersold lock_busy lock_lost "
          "del_other reason\n",
          o);
    for (int s = 0; s < LG_NSCEN; s++)
        for (int m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            fprintf(o, "%-13s %-9s %-10s %-8s %8lld %9lld %9llu %9llu %9llu %s\n",
                    lg_scen_names[s], lg_mode_names[m], c->expected, c->outcome, (long long)c->oversold,
                    (long long)c->undersold, (unsigned long long)c->lock_busy,
                    (unsigned long long)c->lock_lost, (unsigned long long)c->deleted_other_lock,
                    c->reason);
        }
    if (lg_matrix_has_faults(cfg)) {
        fputs("\nfault         mode      503s   unacked fault_ms freed_ms failfast reconnect "
              "resume (ms; - = n/a)\n",
              o);
        for (int s = S_KILL; s < LG_NSCEN; s++)
            for (int m = 0; m < LG_NMODES; m++) {
                const lg_cell *c = &r->cell[s][m];
                if (!c->ran)
                    continue;
                char v[5][24];
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                       c->reconnect_ms, c->resume_ms};
                for (int k = 0; k < 5; k++)
                    fmt_ms(v[k], sizeof v[k], ms[k]);
                fprintf(o, "%-13s %-9s %6llu %7llu %8s %8s %8s %9s %6s\n", lg_scen_names[s],
                        lg_mode_names[m], (unsigned long long)c->n503,
                        (unsigned long long)c->unacked, v[0], v[1], v[2], v[3], v[4]);
            }
    }
    fprintf(o, "\n%d cell(s) differ from the expected outcome\n", r->mismatches);
}

static void csv_field(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void md_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
    }
}

static int write_md(const char *path, const lg_matrix_cfg *cfg, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "# miaosha oversell matrix%s\n\n", cfg->quick ? " (quick)" : "");
    fprintf(f, "Measured by `miaosha-load matrix` in %.1f s against real `miaosha-server` "
               "processes on Redis %s. Every cell is a measurement; **DIFF** marks a cell whose "
               "outcome is not the expected one.\n\n",
            r->elapsed_s, r->redis);
    if (cfg->target && cfg->scen_on[S_MULTI])
        fprintf(f, "The multi-instance scenario went through `%s` (a balancer in front of the "
                   "instances), not through instances of the matrix's own.\n\n",
                cfg->target);
    fputs("| mode |", f);
    for (int s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fprintf(f, " %s |", s == S_MULTI && cfg->target ? "multi-instance (via --target)"
                                                             : scen_titles[s]);
    fputs("\n|---|", f);
    for (int s = 0; s < LG_NSCEN; s++)
        if (cfg->scen_on[s])
            fputs("---|", f);
    fputc('\n', f);
    for (int m = 0; m < LG_NMODES; m++) {
        if (!cfg->mode_on[m])
            continue;
        fprintf(f, "| `%s` |", lg_mode_names[m]);
        for (int s = 0; s < LG_NSCEN; s++) {
            if (!cfg->scen_on[s])
                continue;
            const lg_cell *c = &r->cell[s][m];
            char b[64];
            cell_short(s, c, b, sizeof b);
            int bad = !strcmp(c->outcome, "oversell") || !strcmp(c->outcome, "stuck") ||
                      !strcmp(c->outcome, "blocks");
            fprintf(f, " %s%s%s |", bad ? "**" : "", b, bad ? "**" : "");
        }
        fputc('\n', f);
    }
    fputs("\n## Cells\n\n| scenario | mode | expected | measured | sold / stock | oversold | "
          "undersold | lock_busy | lock_lost | deleted another's lock | recovery ms | reason |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
          f);
    for (int s = 0; s < LG_NSCEN; s++)
        for (int m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            fprintf(f, "| %s | %s | %s | %s%s | %lld / %lld | %lld | %lld | %llu | %llu | %llu | ",
                    lg_scen_names[s], lg_mode_names[m], c->expected, c->outcome,
                    c->pass ? "" : " **DIFF**", (long long)c->sold, (long long)c->stock,
                    (long long)c->oversold, (long long)c->undersold,
                    (unsigned long long)c->lock_busy, (unsigned long long)c->lock_lost,
                    (unsigned long long)c->deleted_other_lock);
            if (c->recovery_ms >= 0)
                fprintf(f, "%lld", (long long)c->recovery_ms);
            else if (c->stuck)
                fprintf(f, "stuck > %lld", (long long)c->window_ms);
            fputs(" | ", f);
            md_text(f, c->reason);
            fputs(" |\n", f);
        }
    if (lg_matrix_has_faults(cfg)) {
        fputs("\n## Fault cells\n\nTimes in ms (— = not applicable): how long the fault "
              "lasted, when the dead holder's lock was gone after the kill, the slowest 503 "
              "while Redis was unavailable, when every instance answered without 503 after "
              "Redis was back, the first sale after the fault ended.\n\n"
              "| scenario | mode | 503s | unacknowledged | fault | lock freed | 503 within | "
              "reconnect | next sale |\n|---|---|---|---|---|---|---|---|---|\n",
              f);
        for (int s = S_KILL; s < LG_NSCEN; s++)
            for (int m = 0; m < LG_NMODES; m++) {
                const lg_cell *c = &r->cell[s][m];
                if (!c->ran)
                    continue;
                fprintf(f, "| %s | %s | %llu | %llu |", lg_scen_names[s], lg_mode_names[m],
                        (unsigned long long)c->n503, (unsigned long long)c->unacked);
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                       c->reconnect_ms, c->resume_ms};
                for (int k = 0; k < 5; k++) {
                    char v[24];
                    fmt_ms(v, sizeof v, ms[k]);
                    fprintf(f, " %s |", strcmp(v, "-") ? v : "—");
                }
                fputc('\n', f);
            }
    }
    fprintf(f, "\n%d cell(s) differ from the expected outcome.\n", r->mismatches);
    return fclose(f) == 0 ? 0 : -1;
}

static int write_csv(const char *path, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs("scenario,mode,expected,measured,pass,stock,sold,stock_left,oversold,undersold,"
          "requests,ok,sold_out,lock_busy,errors,lock_lost,deleted_other_lock,duplicate_ids,"
          "missing_orders,stuck,"
          "recovery_ms,elapsed_s,redis_unavailable,unacknowledged,fault_ms,freed_ms,"
          "failfast_ms,reconnect_ms,resume_ms,reason\n",
          f);
    for (int s = 0; s < LG_NSCEN; s++)
        for (int m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (!c->ran)
                continue;
            fprintf(f, "%s,%s,%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%llu,%llu,%llu,%llu,%llu,%llu,"
                       "%llu,%llu,%llu,%d,%lld,%.3f,",
                    lg_scen_names[s], lg_mode_names[m], c->expected, c->outcome,
                    c->pass ? "true" : "false", (long long)c->stock, (long long)c->sold,
                    (long long)c->stock_left, (long long)c->oversold, (long long)c->undersold,
                    (unsigned long long)c->requests, (unsigned long long)c->ok,
                    (unsigned long long)c->sold_out, (unsigned long long)c->lock_busy,
                    (unsigned long long)c->errors, (unsigned long long)c->lock_lost,
                    (unsigned long long)c->deleted_other_lock, (unsigned long long)c->dup,
                    (unsigned long long)c->missing, c->stuck,
                    (long long)c->recovery_ms, c->elapsed_s);
            if (LG_IS_FAULT(s)) {
                const int64_t ms[5] = {c->fault_ms, c->freed_ms, c->failfast_ms,
                                       c->reconnect_ms, c->resume_ms};
                fprintf(f, "%llu,%llu,", (unsigned long long)c->n503,
                        (unsigned long long)c->unacked);
                for (int k = 0; k < 5; k++)
                    if (ms[k] >= 0)
                        fprintf(f, "%lld,", (long long)ms[k]);
                    else
                        fputc(',', f);
            } else {
                fputs(",,,,,,,", f);
            }
            csv_field(f, c->reason);
            fputc('\n', f);
        }
    return fclose(f) == 0 ? 0 : -1;
}

/* What the small label above a bar measures, per scenario (shown under the
 * scenario's name). */
static const char *svg_note_caption(int s)
{
    switch (s) {
    case S_CRASH: return "label: first sale after the crash";
    case S_KILL: return "label: dead holder's lock freed after";
    case S_REDIS_RESTART: return "label: all instances serve again after";
    case S_REDIS_PAUSE: return "label: 503 while paused within";
    default: return NULL;
    }
}

/* The small label above a bar: the crash's recovery time, the fault's
 * headline figure (not on an oversold bar), or "stuck". 0 when there is
 * none. */
static int svg_note(int s, const lg_cell *c, char *b, size_t len)
{
    int64_t ms = s == S_CRASH           ? c->recovery_ms
                 : s == S_KILL          ? c->freed_ms
                 : s == S_REDIS_RESTART ? c->reconnect_ms
                 : s == S_REDIS_PAUSE   ? c->failfast_ms
                                        : -1;
    if (!strcmp(c->outcome, "stuck"))
        snprintf(b, len, "stuck");
    else if (ms >= 0 && c->oversold == 0)
        snprintf(b, len, "%lldms", (long long)ms);
    else
        return 0;
    return 1;
}

/* Grouped bars: one group per scenario, one bar per mode, height =
 * sold / stock (the dashed line is the stock); red = oversold, green =
 * exactly the stock, grey = nothing sold (stuck / blocks), orange = other. */
static int write_svg(const char *path, const lg_matrix_cfg *cfg, const lg_matrix_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int nscen = 0;
    double maxratio = 2.0;
    for (int s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        nscen++;
        for (int m = 0; m < LG_NMODES; m++) {
            const lg_cell *c = &r->cell[s][m];
            if (c->ran && c->stock > 0 && (double)c->sold / (double)c->stock > maxratio)
                maxratio = (double)c->sold / (double)c->stock;
        }
    }
    if (maxratio > 12)
        maxratio = 12; /* taller bars are clipped, their label says the truth */
    /* a bar and its gap fit a "1000/1000" label at 9 px */
    const int left = 60, top = 60, ph = 320, bw = 34, gap = 14, gw = LG_NMODES * (bw + gap) + 24;
    int width = left + (nscen ? nscen : 1) * gw + 20, height = top + ph + 110;
    if (width < 780)
        width = 780; /* the subtitle */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">miaosha: sold vs "
               "stock per lock mode and scenario%s</text>\n",
            left, cfg->quick ? " (quick)" : "");
    fprintf(f, "<text x=\"%d\" y=\"42\" fill=\"#555\">bar = sold / stock; dashed line = stock; "
               "red = oversold, green = exact, grey = nothing sold, orange = other</text>\n",
            left);
    /* axis */
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", left, top, left,
            top + ph);
    for (int t = 0; t <= (int)maxratio; t++) {
        double y = top + ph - ph * (double)t / maxratio;
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%dx</text>\n", left - 6, y + 4, t);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", left,
                y, width - 20, y);
    }
    double ystock = top + ph - ph * 1.0 / maxratio;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\" "
               "stroke-dasharray=\"6,4\"/>\n",
            left, ystock, width - 20, ystock);
    int g = 0;
    for (int s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        int gx = left + 10 + g * gw;
        int bi = 0;
        for (int m = 0; m < LG_NMODES; m++) {
            if (!cfg->mode_on[m])
                continue;
            const lg_cell *c = &r->cell[s][m];
            int x = gx + bi * (bw + gap);
            bi++;
            if (!c->ran)
                continue;
            double ratio = c->stock > 0 ? (double)c->sold / (double)c->stock : 0;
            double shown = ratio > maxratio ? maxratio : ratio;
            double h = ph * shown / maxratio;
            const char *color = c->oversold > 0        ? "#d62728"
                                : c->sold == 0         ? "#9e9e9e"
                                : c->sold == c->stock  ? "#2ca02c"
                                                       : "#ff7f0e";
            if (h < 2)
                h = 2;
            fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\">"
                       "<title>%s / %s: ",
                    x, top + ph - h, bw, h, color, lg_scen_names[s], lg_mode_names[m]);
            xml_text(f, c->reason);
            fputs("</title></rect>\n", f);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%lld/%lld"
                       "</text>\n",
                    x + bw / 2, top + ph - h - 4, (long long)c->sold, (long long)c->stock);
            char b[32];
            if (svg_note(s, c, b, sizeof b)) {
                fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\" "
                           "fill=\"#333\">%s</text>\n",
                        x + bw / 2, top + ph - h - 15, b);
            }
            fprintf(f, "<text transform=\"translate(%d,%d) rotate(45)\" font-size=\"10\">%s%s"
                       "</text>\n",
                    x + 8, top + ph + 8, lg_mode_names[m], c->pass ? "" : " (DIFF)");
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n",
                gx + (LG_NMODES * (bw + gap)) / 2, top + ph + 90, lg_scen_names[s]);
        if (svg_note_caption(s))
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"9\" "
                       "fill=\"#555\">%s</text>\n",
                    gx + (LG_NMODES * (bw + gap)) / 2, top + ph + 103, svg_note_caption(s));
        g++;
    }
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

int lg_matrix_write_files(const lg_matrix_cfg *cfg, const lg_matrix_result *r, char *err,
                          size_t errlen)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/matrix.md", cfg->out_dir);
    if (write_md(p, cfg, r) < 0)
        goto fail;
    snprintf(p, sizeof p, "%s/matrix.csv", cfg->out_dir);
    if (write_csv(p, r) < 0)
        goto fail;
    snprintf(p, sizeof p, "%s/matrix.svg", cfg->out_dir);
    if (write_svg(p, cfg, r) < 0)
        goto fail;
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", p, strerror(errno));
    return -1;
}
