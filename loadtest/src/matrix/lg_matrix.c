/* lg_matrix.c — the matrix's runner and its demo scenarios (see
 * lg_matrix.h): which instances each scenario needs, one cell after the
 * other, and how each cell is judged. The processes are lg_mx_proc.c's, the
 * fault scenarios lg_fault.c's, the output the report room's.
 *
 * How each scenario is widened so its outcome is deterministic, not lucky:
 *   race    work_ms 10 inside the section and the whole burst released at
 *           once by the engine's barrier: with no lock, every concurrent
 *           buyer reads the same stock before anyone writes it back.
 *           Lock modes get wait_ms 30000 (nobody gives up) and, for
 *           setnx/token/fenced, lease_ms 10000 (no lease ever runs out).
 *   multi   the same burst over 3 instances: each instance's in-process
 *           mutex admits one holder, so 3 overlap for work_ms at a time.
 *   slow    work_ms 300 > lease 200 (setnx/token/fenced: lease_ms=200 per
 *           request and lock.lease_ms=200; reentrant:
 *           lock.watchdog_timeout_ms=200 and no lease_ms, so the watchdog
 *           renews): each lease runs out 100 ms before its holder writes,
 *           so the next holder always reads the stale stock. One instance
 *           (mutex serialises there). fenced: the next holder's read moves
 *           the fence past the late holder, whose write is refused (409
 *           fenced_out): every holder but the last is fenced out, the
 *           books stay exact and most of the stock stays unsold — the cell
 *           is "exact" with the stale writes counted.
 *   crash   faults.enabled; one request with fault=crash_in_section
 *           (setnx: crash_before_expire) kills the instance while it holds
 *           the lock; the instance is restarted with a new instance id;
 *           probes (wait_ms 100) buy every 20 ms until the first 200 or the
 *           window (3 s) ends. Lease and watchdog timeout are 1000 ms
 *           (token and fenced recover when the lease runs out).
 *   nested  reenter=2, one buyer at a time (concurrency 1, so `none` cannot
 *           race), wait_ms 300: a non-reentrant lock waits for itself.
 *   buckets the race's burst on a SKU whose stock is split into 4 stock
 *           buckets (PUT /stock's buckets): one lock per bucket, so 4
 *           holders at a time; each buyer starts in a random bucket and
 *           moves on while the one it tried is sold out (or locked: it
 *           hops, svc_tries.c), so the safe modes sell the last unit
 *           (exact, 0 undersold) and none oversells in every bucket.
 *           One instance (mutex is one process lock per bucket: exact
 *           there).
 *   dup-user, retry  the buyer scenarios, lg_mx_buyers.c: five concurrent
 *           clicks per buyer against purchase.limit_per_user=1 (work_ms
 *           10), and a first request given up by its client after 50 ms
 *           (work_ms 200) retried with and without an Idempotency-Key.
 * lua (no lock, one atomic script) runs the same cells: work_ms is spent
 * before its script, so no width of any window can make it oversell; its
 * crash request dies before the script, holding nothing.
 * The fault scenarios (kill, redis-restart, redis-pause) are in lg_fault.c,
 * the Sentinel failover in lg_failover.c, the acknowledged writes a manual
 * or resumed failover loses in lg_acked.c (every mode on one failover),
 * the Redis Cluster's failover and resharding in lg_cluster.c.
 */
#include "lg_matrix.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lg_acked.h"
#include "lg_admin.h"
#include "lg_cluster.h"
#include "lg_failover.h"
#include "lg_fault.h"
#include "lg_mx_buyers.h"
#include "lg_mx_cell.h"
#include "lg_mx_proc.h"
#include "lg_mx_timeline.h"
#include "lg_nodes.h"
#include "pk_proc.h"

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

/* lua takes no lock, so nothing of a lock can go wrong: exact in every
 * race, "recovers" at once from a crash (the fault request dies before its
 * script: nothing sold, nothing held) and "sells" when nested (reenter has
 * no lock to re-enter and is ignored). */
static const char *expected_of(lg_scenario s, lg_mode m, int buckets)
{
    if (s == LG_SCEN_FAILOVER)
        return lg_failover_expected(m);
    if (lg_scen_is_acked(s))
        return lg_acked_expected(m);
    if (lg_scen_is_cluster(s))
        return lg_cluster_expected(s, m);
    /* The limit is checked in the same atomic step as the write: it holds
     * wherever the stock check does on one instance, not under none. On a
     * SKU split into buckets (--buckets) the count is a reservation taken
     * by a script in the buyer's home bucket, atomic in every mode, none
     * included. An Idempotency-Key's marker and stored outcome need no lock
     * at all. */
    if (s == LG_SCEN_DUP_USER)
        return m == LG_MODE_NONE && buckets < 2 ? "duplicates" : "one-each";
    if (s == LG_SCEN_RETRY)
        return "once";
    if (m == LG_MODE_LUA && !lg_scen_is_fault(s))
        return s == LG_SCEN_CRASH ? "recovers" : s == LG_SCEN_NESTED ? "sells" : "exact";
    switch (s) {
    case LG_SCEN_RACE:
    case LG_SCEN_BUCKETS: return m == LG_MODE_NONE ? "oversell" : "exact";
    case LG_SCEN_MULTI: return m == LG_MODE_NONE || m == LG_MODE_MUTEX ? "oversell" : "exact";
    case LG_SCEN_SLOW:
        /* fenced: exact, with its stale writes fenced out (judge); redlock as
         * token: a holder past its validity still writes */
        return m == LG_MODE_NONE || m == LG_MODE_SETNX || m == LG_MODE_TOKEN || m == LG_MODE_REDLOCK
                   ? "oversell"
                   : "exact";
    case LG_SCEN_CRASH: return m == LG_MODE_SETNX ? "stuck" : "recovers";
    case LG_SCEN_NESTED: return m == LG_MODE_NONE || m == LG_MODE_REENTRANT ? "sells" : "blocks";
    default: return lg_scen_is_redlock(s) ? lg_nodes_expected(s) : lg_fault_expected(s, m);
    }
}

#define CRASH_LEASE_MS 1000
#define CRASH_WINDOW_MS 3000
#define SLOW_LEASE_MS 200
#define SLOW_WORK_MS 300

/* --- cells ---------------------------------------------------------------- */

static void classify_burst(lg_cell *c, const lg_run_result *r, lg_scenario scen)
{
    if (!r->audited) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no audit: %.200s", r->audit_error);
        return;
    }
    if (c->oversold > 0) {
        snprintf(c->outcome, sizeof c->outcome, "oversell");
        snprintf(c->reason, sizeof c->reason, "sold %lld of %lld (+%lld oversold), %llu lock_lost",
                 (long long)c->sold, (long long)c->stock, (long long)c->oversold,
                 (unsigned long long)c->lock_lost);
        return;
    }
    int clean = c->undersold == 0 && c->dup == 0 && c->acked_lost == 0 &&
                c->acked_over_stock == 0 && r->ok_without_id == 0;
    if (!clean) {
        snprintf(c->outcome, sizeof c->outcome, "unsafe");
        snprintf(c->reason, sizeof c->reason,
                 "undersold %lld, duplicate ids %llu, acked_lost %llu, acked_over_stock %llu",
                 (long long)c->undersold, (unsigned long long)c->dup,
                 (unsigned long long)c->acked_lost, (unsigned long long)c->acked_over_stock);
        return;
    }
    if (c->sold == c->stock && c->stock_left == 0) {
        snprintf(c->outcome, sizeof c->outcome, "%s", scen == LG_SCEN_NESTED ? "sells" : "exact");
        snprintf(c->reason, sizeof c->reason, "sold exactly %lld, %llu sold_out, %llu orders",
                 (long long)c->sold, (unsigned long long)c->sold_out,
                 (unsigned long long)r->orders_listed);
        if (c->fenced_out > 0) {
            size_t l = strlen(c->reason);
            snprintf(c->reason + l, sizeof c->reason - l, ", %llu fenced out",
                     (unsigned long long)c->fenced_out);
        }
        return;
    }
    /* fenced: the books balance and what is left was refused by the fence,
     * not lost — every buyer that did not buy was answered sold_out or
     * fenced_out (a stale write refused, nothing written). */
    if (c->fenced_out > 0 && c->sold + c->stock_left == c->stock &&
        c->ok + c->sold_out + c->fenced_out == c->requests) {
        snprintf(c->outcome, sizeof c->outcome, "exact");
        snprintf(c->reason, sizeof c->reason,
                 "exact, %llu fenced out: sold %lld of %lld, %lld left, %llu orders",
                 (unsigned long long)c->fenced_out, (long long)c->sold, (long long)c->stock,
                 (long long)c->stock_left, (unsigned long long)r->orders_listed);
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
    snprintf(c->reason, sizeof c->reason, "sold %lld of %lld: %llu lock_busy, %llu errors",
             (long long)c->sold, (long long)c->stock, (unsigned long long)c->lock_busy,
             (unsigned long long)c->errors);
}

typedef struct burst {
    int64_t stock, work_ms, lease_ms, wait_ms, reenter;
    uint64_t requests;
    int concurrency;
    int buckets; /* 0: the SKU's own stock; else PUT /stock's buckets */
} burst;

static int run_burst(mctx *x, lg_cell *c, lg_scenario scen, lg_mode mode, instance *ins, int nins,
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
    rc.buckets = b->buckets;
    rc.work_ms = b->work_ms;
    rc.wait_ms = b->wait_ms;
    rc.reenter = b->reenter;
    /* reentrant runs on its watchdog: an explicit lease_ms would switch it
     * off (lockcore.h: watchdog_timeout_ms applies without an explicit
     * lease), so it is only sent to setnx, token, fenced and redlock */
    rc.lease_ms = mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED ||
                          mode == LG_MODE_REDLOCK
                      ? b->lease_ms
                      : -1;
    rc.deadline_ms = 90000;
    rc.stop = x->cfg->stop;
    rc.admin_token = x->cfg->admin_token;
    if (lg_mx_targets(&rc, ins, nins, err, errlen) < 0)
        return -1;
    lg_run_result *r = lg_mx_run_burst(&rc, c, err, errlen);
    if (!r)
        return -1;
    c->recovery_ms = -1;
    classify_burst(c, r, scen);
    free(r);
    return 0;
}

/* One crash cell: crash the holder, restart, probe until a sale. */
static int run_crash(mctx *x, lg_cell *c, lg_mode mode, instance *in, int64_t stock, char *err,
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
    const char *fault = mode == LG_MODE_SETNX ? "crash_before_expire" : "crash_in_section";
    char lease[32] = "";
    if (mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED ||
        mode == LG_MODE_REDLOCK)
        snprintf(lease, sizeof lease, "&lease_ms=%d", CRASH_LEASE_MS);
    char url[512];
    snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=crasher&work_ms=0&wait_ms=1000%s&fault=%s",
             in->base, m, sku, lease, fault);
    long st = 0;
    char *body = NULL, e2[256];
    int rc = lg_http_call("POST", url, x->cfg->admin_token, NULL, 5000, &st, &body, e2, sizeof e2);
    long long t_crash = lc_now_ms();
    if (rc == 0) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason,
                 "fault request answered %ld instead of crashing: %.120s%s", st, body ? body : "",
                 st == 403 ? " (faults.enabled not set?)" : "");
        free(body);
        return 0;
    }
    free(body);
    if (!pk_wait_exit(in->pid, 3000)) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "instance did not exit after %s", fault);
        lg_mx_instance_stop(in);
        return 0;
    }
    in->pid = 0;
    if (lg_mx_instance_start(x, in, err, errlen) < 0)
        return -1;
    long long restarted = lc_now_ms() - t_crash;
    uint64_t probes = 0, busy = 0, other = 0;
    for (int i = 0; !lg_mx_stopped(x); i++) {
        long long now = lc_now_ms();
        if (now - t_crash > CRASH_WINDOW_MS)
            break;
        snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=probe%d&work_ms=0&wait_ms=100%s",
                 in->base, m, sku, i, lease);
        rc = lg_http_call("POST", url, NULL, NULL, 3000, &st, NULL, e2, sizeof e2);
        probes++;
        if (rc == 0 && st == 200) {
            c->recovery_ms = lc_now_ms() - t_crash;
            c->ok = 1;
            break;
        }
        if (rc == 0 && st == 429)
            busy++;
        else
            other++;
        pk_sleep_ms(20);
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
        if (mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED || mode == LG_MODE_REENTRANT ||
            mode == LG_MODE_REDLOCK)
            snprintf(c->reason, sizeof c->reason,
                     "first sale %lld ms after the crash: %s (%d ms) ran out; restart %lld ms, "
                     "%llu probes lock_busy before",
                     (long long)c->recovery_ms,
                     mode == LG_MODE_REENTRANT ? "the watchdog timeout" : "the lease",
                     CRASH_LEASE_MS, restarted, (unsigned long long)busy);
        else
            snprintf(c->reason, sizeof c->reason,
                     "first sale %lld ms after the crash: %s (restart %lld ms)",
                     (long long)c->recovery_ms,
                     mode == LG_MODE_LUA ? "no lock to leave behind"
                                         : "no lock outlives the process",
                     restarted);
    }
    /* clears the stuck lock too (PUT /stock deletes the lock key) */
    lg_admin_reset(in->base, sku, 0, x->cfg->admin_token, e2, sizeof e2);
    return 0;
}

/* Whether the redlock cell of s runs: not through --target, whose
 * instances are not the matrix's and know nothing of its lock masters.
 * (failover's own instances get them like every instance the matrix
 * starts: lg_mx_instance_start.) */
static int redlock_cell_runs(const lg_matrix_cfg *cfg, lg_scenario s)
{
    return cfg->mode_on[LG_MODE_REDLOCK] && cfg->scen_on[s] && !(s == LG_SCEN_MULTI && cfg->target);
}

static void judge(lg_cell *c, lg_scenario scen, lg_mode mode, int buckets);

/* manual-failover and resume-failover: every selected mode on one
 * failover per trial (lg_acked_run); reshard: every selected mode on one
 * cluster per trial (lg_reshard_run); then each cell judged. 0, or -1 when
 * interrupted (err says so). */
static int run_acked(mctx *x, lg_scenario s, lg_matrix_result *res, char *err, size_t errlen)
{
    const lg_matrix_cfg *cfg = x->cfg;
    for (int k = 0; k < res->ntrials; k++) {
        lg_cell *cells[LG_NMODES] = {NULL};
        for (lg_mode m = 0; m < LG_NMODES; m++)
            if (cfg->mode_on[m] && (m != LG_MODE_REDLOCK || redlock_cell_runs(cfg, s)))
                cells[m] = k == 0 ? &res->cell[s][m] : &res->more[k - 1][s][m];
        if (lg_mx_stopped(x)) {
            snprintf(err, errlen, "interrupted");
            return -1;
        }
        int r = s == LG_SCEN_RESHARD ? lg_reshard_run(x, s, cells, err, errlen)
                                     : lg_acked_run(x, s, cells, err, errlen);
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            lg_cell *c = cells[m];
            if (!c)
                continue;
            if (lg_mx_stopped(x)) {
                memset(c, 0, sizeof *c);
                continue;
            }
            if (r < 0) {
                c->ran = 1;
                snprintf(c->outcome, sizeof c->outcome, "error");
                snprintf(c->reason, sizeof c->reason, "%.230s", err);
            }
            judge(c, s, m, x->cfg->buckets);
            if (!c->pass)
                res->mismatches++;
            lg_mx_log(x, "%-6s %-9s%s expected %-8s measured %-8s %s  %s", lg_scen_names[s],
                      lg_mode_names[m], res->ntrials > 1 ? " trial" : "", c->expected, c->outcome,
                      c->pass ? "ok  " : "DIFF", c->reason);
        }
        if (lg_mx_stopped(x)) {
            snprintf(err, errlen, "interrupted");
            return -1;
        }
    }
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

static void judge(lg_cell *c, lg_scenario scen, lg_mode mode, int buckets)
{
    c->expected = expected_of(scen, mode, buckets);
    c->pass = outcome_matches(c->expected, c->outcome);
    if (scen == LG_SCEN_SLOW && mode == LG_MODE_FENCED && c->pass && c->fenced_out == 0) {
        /* exact only because no holder outlived its lease would not show
         * the fence at work */
        c->pass = 0;
        size_t l = strlen(c->reason);
        snprintf(c->reason + l, sizeof c->reason - l, " — expected stale writes fenced out");
    }
    if (scen == LG_SCEN_SLOW) {
        /* The other half of the slow holder (docs/locks.md): setnx's late
         * DEL deletes a later holder's lock; token's, fenced's and
         * reentrant's owner checks never do. */
        int want = mode == LG_MODE_SETNX;
        size_t l = strlen(c->reason);
        snprintf(c->reason + l, sizeof c->reason - l, "; %llu release(s) deleted another's lock",
                 (unsigned long long)c->deleted_other_lock);
        if ((c->deleted_other_lock > 0) != want) {
            c->pass = 0;
            l = strlen(c->reason);
            snprintf(c->reason + l, sizeof c->reason - l, " — expected %s", want ? "some" : "none");
        }
    }
    if (scen == LG_SCEN_RETRY && c->doubles == 0) {
        /* the lesson's other half: the same retries without a key buy twice */
        c->pass = 0;
        size_t l = strlen(c->reason);
        snprintf(c->reason + l, sizeof c->reason - l, " — expected double orders without keys");
    }
    if (c->pass && scen == LG_SCEN_CRASH &&
        (mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED || mode == LG_MODE_REENTRANT ||
         mode == LG_MODE_REDLOCK)) {
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
    res->ntrials = cfg->trials > 1 ? cfg->trials : 1;
    if (res->ntrials > 1) {
        res->more = calloc((size_t)res->ntrials - 1, sizeof *res->more);
        if (!res->more) {
            snprintf(err, errlen, "out of memory for %d trials", res->ntrials);
            return -1;
        }
    }
    mctx x;
    memset(&x, 0, sizeof x);
    x.cfg = cfg;
    long long t0 = lc_now_ms();
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
        snprintf(err, errlen,
                 "the fault scenarios kill, pause and restart Redis: they run on "
                 "the private redis-server only (drop --redis)");
        return -1;
    }
    x.redis_aof = faults;
    int rc = -1;
    instance base[3], slow, crash, fault[3], dup, nodes[2];
    memset(fault, 0, sizeof fault);
    lg_fault_instances(fault);
    memset(nodes, 0, sizeof nodes);
    lg_nodes_instances(nodes);
    memset(base, 0, sizeof base);
    memset(&slow, 0, sizeof slow);
    memset(&crash, 0, sizeof crash);
    memset(&dup, 0, sizeof dup);
    snprintf(dup.id, sizeof dup.id, "mx-dup-user");
    dup.extra[0] = "--set";
    dup.extra[1] = "purchase.limit_per_user=1";
    dup.nextra = 2;
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

    if (lg_mx_redis_start(&x, err, errlen) < 0)
        goto out;
    snprintf(res->redis, sizeof res->redis, "%s%s", x.redis_addr, cfg->redis ? "" : " (private)");
    lg_mx_log(&x, "redis at %s; server %s; logs in %s", res->redis, cfg->server, x.logdir);
    /* The redlock row's five lock masters, before any instance: every
     * instance then gets redlock.nodes. */
    int redlock_runs = 0;
    for (lg_scenario s = 0; s < LG_NSCEN; s++)
        redlock_runs |= redlock_cell_runs(cfg, s);
    if (redlock_runs) {
        if (lg_mx_locks_start(&x, err, errlen) < 0)
            goto out;
        lg_mx_log(&x, "redlock lock masters: %s", x.lock_nodes + strlen("redlock.nodes="));
    }

    int q = cfg->quick;
    burst race = {q ? 20 : 100, 10, 10000, 30000, -1, q ? 200 : 1000, q ? 50 : 100, 0};
    burst bucketsb = race;
    bucketsb.buckets = 4;
    burst slowb = {q ? 4 : 10, SLOW_WORK_MS, SLOW_LEASE_MS, 30000, -1, q ? 12 : 30, q ? 12 : 30, 0};
    burst nested = {q ? 3 : 5, 0, 5000, 300, 2, q ? 6 : 10, 1, 0};
    /* multi: three instances of ours, or the balancer given as --target */
    int own_multi = cfg->scen_on[LG_SCEN_MULTI] && !cfg->target;
    instance lb;
    memset(&lb, 0, sizeof lb);
    lb.pid = -1;
    if (cfg->target)
        snprintf(lb.base, sizeof lb.base, "%s", cfg->target);
    int nbase = own_multi ? 3 : 1;
    if (cfg->scen_on[LG_SCEN_RACE] || own_multi || cfg->scen_on[LG_SCEN_NESTED] ||
        cfg->scen_on[LG_SCEN_RETRY] || cfg->scen_on[LG_SCEN_BUCKETS]) {
        for (int i = 0; i < nbase; i++)
            if (lg_mx_instance_start(&x, &base[i], err, errlen) < 0)
                goto out;
        lg_mx_log(&x, "%d instance(s) up", nbase);
    }
    for (lg_scenario s = 0; s < LG_NSCEN; s++) {
        if (!cfg->scen_on[s])
            continue;
        if (lg_scen_is_acked(s) || s == LG_SCEN_RESHARD) {
            if (run_acked(&x, s, res, err, errlen) < 0)
                goto out;
            continue;
        }
        if (s == LG_SCEN_SLOW && lg_mx_instance_start(&x, &slow, err, errlen) < 0)
            goto out;
        if (s == LG_SCEN_CRASH && lg_mx_instance_start(&x, &crash, err, errlen) < 0)
            goto out;
        if (s == LG_SCEN_DUP_USER && lg_mx_instance_start(&x, &dup, err, errlen) < 0)
            goto out;
        for (int i = 0; i < 3 && lg_scen_is_fault(s); i++)
            if (fault[i].pid <= 0 && lg_mx_instance_start(&x, &fault[i], err, errlen) < 0)
                goto out;
        /* the instances whose traces make the cell's timeline */
        const char *tl[LG_MX_TL_MAX];
        int ntl = 0;
        if (s == LG_SCEN_MULTI)
            for (int i = 0; i < (cfg->target ? 1 : 3); i++)
                tl[ntl++] = cfg->target ? lb.base : base[i].base;
        else if (s == LG_SCEN_SLOW)
            tl[ntl++] = slow.base;
        else if (s == LG_SCEN_CRASH)
            tl[ntl++] = crash.base;
        else if (s == LG_SCEN_DUP_USER)
            tl[ntl++] = dup.base;
        else if (lg_scen_is_fault(s))
            for (int i = 0; i < 3; i++)
                tl[ntl++] = fault[i].base;
        else if (lg_scen_is_redlock(s))
            /* its instance starts with its first cell (base filled then): a
             * mark taken before is unknown, and the page holds all the
             * fresh instance traced */
            tl[ntl++] = nodes[s == LG_SCEN_NODE_RESTART_DELAY].base;
        else
            tl[ntl++] = base[0].base;
        for (lg_mode m = 0; m < LG_NMODES; m++) {
            if (!cfg->mode_on[m] || (lg_scen_is_redlock(s) && m != LG_MODE_REDLOCK))
                continue;
            if (m == LG_MODE_REDLOCK && !redlock_cell_runs(cfg, s)) {
                lg_mx_log(&x, "%-6s %-9s not run: %s", lg_scen_names[s], lg_mode_names[m],
                          s == LG_SCEN_FAILOVER
                              ? "the failover cell's instances have no lock masters"
                              : "the instances behind --target have no lock masters");
                continue;
            }
            for (int k = 0; k < res->ntrials; k++) {
                if (lg_mx_stopped(&x)) {
                    snprintf(err, errlen, "interrupted");
                    goto out;
                }
                lg_cell *c = k == 0 ? &res->cell[s][m] : &res->more[k - 1][s][m];
                /* failover, cluster-failover: the cell's traces are on
                 * instances of its own, gone when it ends (and base[] may
                 * not run at all) */
                int want_tl = k == 0 && !cfg->no_timelines && s != LG_SCEN_FAILOVER &&
                              s != LG_SCEN_CLUSTER_FAILOVER;
                lg_trace_mark marks[LG_MX_TL_MAX];
                if (want_tl)
                    lg_mx_timeline_mark(tl, ntl, s, m, marks);
                int r;
                switch (s) {
                case LG_SCEN_RACE: r = run_burst(&x, c, s, m, base, 1, &race, err, errlen); break;
                case LG_SCEN_BUCKETS:
                    r = run_burst(&x, c, s, m, base, 1, &bucketsb, err, errlen);
                    break;
                case LG_SCEN_MULTI:
                    r = cfg->target ? run_burst(&x, c, s, m, &lb, 1, &race, err, errlen)
                                    : run_burst(&x, c, s, m, base, 3, &race, err, errlen);
                    break;
                case LG_SCEN_SLOW: r = run_burst(&x, c, s, m, &slow, 1, &slowb, err, errlen); break;
                case LG_SCEN_CRASH: r = run_crash(&x, c, m, &crash, q ? 5 : 10, err, errlen); break;
                case LG_SCEN_NESTED:
                    r = run_burst(&x, c, s, m, base, 1, &nested, err, errlen);
                    break;
                case LG_SCEN_DUP_USER:
                    r = lg_mx_dup_user(&x, c, m, &dup, q ? 5 : 10, err, errlen);
                    break;
                case LG_SCEN_RETRY:
                    r = lg_mx_retry(&x, c, m, &base[0], q ? 4 : 8, err, errlen);
                    break;
                case LG_SCEN_FAILOVER: r = lg_failover_cell(&x, c, m, err, errlen); break;
                case LG_SCEN_CLUSTER_FAILOVER:
                    r = lg_cluster_failover_cell(&x, c, m, err, errlen);
                    break;
                default:
                    r = lg_scen_is_redlock(s) ? lg_nodes_cell(&x, c, s, nodes, err, errlen)
                                              : lg_fault_cell(&x, c, s, m, fault, err, errlen);
                    break;
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
                judge(c, s, m, cfg->buckets);
                if (!c->pass)
                    res->mismatches++;
                if (res->ntrials > 1)
                    lg_mx_log(&x, "%-6s %-9s trial %d/%d expected %-8s measured %-8s %s  %s",
                              lg_scen_names[s], lg_mode_names[m], k + 1, res->ntrials, c->expected,
                              c->outcome, c->pass ? "ok  " : "DIFF", c->reason);
                else
                    lg_mx_log(&x, "%-6s %-9s expected %-8s measured %-8s %s  %s", lg_scen_names[s],
                              lg_mode_names[m], c->expected, c->outcome, c->pass ? "ok  " : "DIFF",
                              c->reason);
                char e2[256];
                if (want_tl && c->ran &&
                    lg_mx_timeline_write(cfg, s, m, c, tl, marks, ntl, e2, sizeof e2) < 0)
                    lg_mx_log(&x, "%-6s %-9s no timeline: %s", lg_scen_names[s], lg_mode_names[m],
                              e2);
            }
        }
        if (s == LG_SCEN_SLOW)
            lg_mx_instance_stop(&slow);
        if (s == LG_SCEN_CRASH)
            lg_mx_instance_stop(&crash);
        if (s == LG_SCEN_DUP_USER)
            lg_mx_instance_stop(&dup);
    }
    rc = 0;
out:
    for (int i = 0; i < 3; i++)
        lg_mx_instance_stop(&base[i]);
    lg_mx_instance_stop(&slow);
    lg_mx_instance_stop(&crash);
    lg_mx_instance_stop(&dup);
    for (int i = 0; i < 3; i++)
        lg_mx_instance_stop(&fault[i]);
    for (int i = 0; i < 2; i++)
        lg_mx_instance_stop(&nodes[i]);
    lg_mx_shutdown(&x);
    res->elapsed_s = (double)(lc_now_ms() - t0) / 1000.0;
    return rc;
}
