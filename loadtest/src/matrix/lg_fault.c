/* lg_fault.c — the matrix's fault scenarios (lg_fault.h): what a buyer-facing
 * burst over three instances on one Redis goes through when
 *
 *   kill           one instance dies (kill -9) while it holds the lock,
 *   redis-restart  the redis-server is SIGKILLed and restarted ~1 s later on
 *                  the same port from its AOF (appendfsync always),
 *   redis-pause    the redis-server is frozen with SIGSTOP for 2 s.
 *
 * Every cell: three instances (mx-fault-0..2; faults.enabled, lease 1500 ms,
 * watchdog timeout 1000 ms, Redis command/connect timeout 300 ms) and the
 * matrix's private redis-server. The main thread resets the SKU and starts
 * the burst on a thread of its own (lg_run over the three instances,
 * round-robin connections, work_ms 20 so the lock is held most of the time,
 * wait_ms 30000 so nobody gives up); it waits for the first sales, injects
 * the fault, then watches Redis (the lock key, sold, stock) every 5 ms until
 * the stock is sold out, a lock is seen stuck, or a deadline. Then it stops
 * the burst and the audit (oversold, undersold, every acknowledged order in
 * the order list) decides the cell.
 *
 * How "while it holds the lock" is made certain rather than lucky (kill):
 *   reentrant  the lock hash's field is "<instance id>:<owner>": poll until a
 *              field of any of the three instances appears (whichever
 *              holds the lock is the victim), SIGSTOP that one, wait 20 ms
 *              for any command it already sent to land, re-check the
 *              field — a frozen process cannot release — then SIGKILL.
 *   token,     the value is a random token (no owner visible), so eight
 *   fenced,    requests with fault=crash_in_section go to mx-fault-2 at once:
 *   redlock,
 *   setnx
 *              they queue for the lock among the burst's buyers and the
 *              process exits as soon as one of them holds it (for setnx
 *              after SETNX+PEXPIRE: a plain kill, the lock has its TTL —
 *              crash_before_expire, the TTL-less case, is the demo's `crash`
 *              scenario). Eight, because the lock goes to whichever poller
 *              asks first: one request among 24 buyers may wait until the
 *              stock is gone.
 *   none/mutex no Redis lock: SIGKILL when mx-fault-2's /stats shows a
 *              purchase in flight.
 *   lua        no lock at all, killed the same way: a purchase killed before
 *              its script wrote nothing, one whose script was sent is Redis's
 *              to run, whole.
 * The victim is restarted on its port at once (new instance id), and the
 * dead holder's lock is watched until it is gone: it must go by expiry —
 * not before its PTTL at the kill (nobody may release it) and not much
 * after the lease (token, fenced, setnx) / watchdog timeout (reentrant).
 *
 * Every wait polls a condition with a deadline (upper bounds scaled by
 * cfg->time_factor); Ctrl-C ends every wait, and a paused Redis always gets
 * its SIGCONT.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_admin.h"
#include "lg_fault.h"
#include "lg_json.h"
#include "lg_mx_cell.h"
#include "lg_mx_proc.h"
#include "pk_proc.h"
#include "pk_redis.h"
#include "lg_thread.h"

#define STR_(v) #v
#define STR(v) STR_(v)

#define F_LEASE_MS 1500      /* setnx/token/fenced lease: lock.lease_ms */
#define F_WATCHDOG_MS 1000   /* reentrant: lock.watchdog_timeout_ms */
#define F_CMD_TIMEOUT_MS 300 /* redis.command_timeout_ms = connect timeout */
#define F_DOWN_MS 1000       /* redis-restart: down this long */
#define F_PAUSE_MS 2000      /* redis-pause: frozen this long */
#define F_WORK_MS 20
#define F_WAIT_MS 30000
#define F_CONCURRENCY 24  /* 8 connections per instance */
#define F_REQUESTS 200000 /* an upper bound: the burst is stopped once sold out */
#define F_SOLD_BEFORE 3   /* sales before the fault */
#define F_CRASHERS 8      /* kill token/fenced/redlock/setnx: crash_in_section requests */
#define F_POLL_MS 5

const char *lg_fault_expected(lg_scenario scen, lg_mode mode)
{
    (void)scen; /* every fault scenario expects the same per mode */
    /* none has no lock and mutex none across instances: both oversell
     * before any fault matters. The Redis locks must lose nothing: no
     * oversell, no undersell, every acknowledged order listed ("safe" also
     * asks that the stock sells out after the fault and that the fault's
     * time bounds hold). setnx's SETNX and PEXPIRE are two commands, so a
     * Redis fault between them can leave a lock with no TTL: "stuck" —
     * nothing lost, nothing sold any more. Whether it happens is a race the
     * matrix cannot steer, so both are accepted there (and shown):
     *   redis-pause    a SETNX whose client gave up during the pause still
     *                  runs on SIGCONT; if it finds the key free (the last
     *                  holder's lease ran out during the 2 s) it takes the
     *                  lock and its PEXPIRE is never sent. It does not when
     *                  a live buyer's SETNX on an older connection is served
     *                  first (Redis serves established connections before
     *                  the ones that queued up during the pause).
     *   redis-restart  the SIGKILL lands between a SETNX that reached the
     *                  AOF and its PEXPIRE (the kill cut off the reply).
     *   kill           the killed holder's lock has its TTL and frees by
     *                  itself (crash_before_expire is the demo's `crash`
     *                  scenario), but a live buyer's SETNX that timed out on
     *                  a starved machine (its buyer got 503) still runs when
     *                  Redis reads it; if the lock is free by then, nobody
     *                  sends its PEXPIRE. Seen under ASan on 2 vCPUs: the
     *                  same flaw as in redis-pause, without any Redis fault.
     * token, reentrant, redlock and fenced clean up after such a timeout
     * (lockcore's orphan-lock cleanup: the owner token says whose lock it
     * is); setnx has no owner to compare, so it keeps the flaw. */
    if (mode == LG_MODE_NONE || mode == LG_MODE_MUTEX)
        return "oversell";
    if (mode == LG_MODE_SETNX)
        return "safe|stuck";
    /* token, reentrant and fenced lose no lock (a holder that outlives
     * its lease in a pause is fenced out by fenced, and cannot oversell
     * token or reentrant here: work_ms is far below the lease); lua: no
     * lock to lose, a purchase is one atomic script that Redis runs whole
     * or not at all */
    return "safe";
}

void lg_fault_instances(instance ins[3])
{
    /* One flag and its value per line. */
    /* clang-format off */
    static const char *const extra[] = {
        "--set", "faults.enabled=true",
        "--set", "lock.lease_ms=" STR(F_LEASE_MS),
        "--set", "lock.watchdog_timeout_ms=" STR(F_WATCHDOG_MS),
        "--set", "redis.command_timeout_ms=" STR(F_CMD_TIMEOUT_MS),
        "--set", "redis.connect_timeout_ms=" STR(F_CMD_TIMEOUT_MS),
        "--set", "server.workers=16"};
    /* clang-format on */
    _Static_assert(sizeof extra / sizeof extra[0] <= LG_INSTANCE_MAX_EXTRA, "extra fits");
    for (int i = 0; i < 3; i++) {
        snprintf(ins[i].id, sizeof ins[i].id, "mx-fault-%d", i);
        ins[i].nextra = (int)(sizeof extra / sizeof extra[0]);
        for (int k = 0; k < ins[i].nextra; k++)
            ins[i].extra[k] = extra[k];
    }
}

/* One fault cell in progress. */
typedef struct fcell {
    mctx *x;
    lg_cell *c;
    lg_scenario scen;
    lg_mode mode;
    instance *ins;    /* [3] */
    instance *victim; /* kill: the instance killed (restarted after) */
    char sku[64], k_lock[96], k_sold[96], k_stock[96];
    long long hold_ms; /* lease / watchdog timeout; 0 = no Redis lock */
    /* the burst, on its own thread */
    lg_run_cfg rc;
    lg_run_result *r;
    volatile sig_atomic_t bstop;
    atomic_int bdone;
    pthread_t tid;
    int brc;
    char berr[256];
    /* measured */
    long long t_end; /* the fault ended: kill / Redis up / SIGCONT */
    long long t_kill;
    long long sold_at_fault;
    char holder[128]; /* kill: token value or reentrant hash field */
    int lock_node;    /* redlock: the lock master the dead holder's key was read on */
    long long pttl_at_kill;
    int victim_down; /* kill: the victim is restarting */
    int stuck, sold_out;
    uint64_t probes_503;
    uint64_t probes_busy; /* redlock: probes refused 429 by the lock masters */
    char why[200];        /* the fault could not be injected */
    char note[200];       /* what happened, for the reason */
    char checks[200];     /* bounds not met */
} fcell;

/* --- Redis and HTTP probes -------------------------------------------------- */

/* Where the cell's lock key lives: the matrix's Redis, or for redlock its
 * first lock master (every master holds the same token). */
static int lock_port(const fcell *f)
{
    return f->mode == LG_MODE_REDLOCK ? f->x->lock_port[f->lock_node] : f->x->redis_port;
}

/* An integer from a command on one key (GET holding a number, PTTL,
 * HEXISTS): the value, or LLONG_MIN for nil / no answer. A command on
 * f->k_lock goes to lock_port. */
static long long redis_int(const fcell *f, const char *cmd, const char *key, const char *arg)
{
    const char *argv[3] = {cmd, key, arg};
    char out[64];
    int port = key == f->k_lock ? lock_port(f) : f->x->redis_port;
    if (pk_redis_query(port, 500, arg ? 3 : 2, argv, out, sizeof out) != 1)
        return LLONG_MIN;
    char *end;
    long long v = strtoll(out, &end, 10);
    return end == out ? LLONG_MIN : v;
}

static long long sold_now(const fcell *f)
{
    return redis_int(f, "GET", f->k_sold, NULL);
}

/* One purchase straight to an instance (no burst connection): the HTTP
 * status (0 = transport failure: refused, reset, the process died), the
 * error code of the reply and the latency. */
static long probe(const fcell *f, const instance *in, const char *user, const char *params,
                  char code[32], long long *ms)
{
    char url[512], e[256], oid[64];
    snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=%s&work_ms=0%s", in->base,
             lg_mode_names[f->mode], f->sku, user, params);
    long st = 0;
    char *body = NULL;
    long long t0 = lc_now_ms();
    int rc = lg_http_call("POST", url, NULL, NULL, 5000, &st, &body, e, sizeof e);
    *ms = lc_now_ms() - t0;
    code[0] = 0;
    int lost = 0, deleted = 0;
    if (rc == 0 && body)
        lg_parse_purchase(body, strlen(body), oid, code, &lost, &deleted);
    free(body);
    return rc == 0 ? st : 0;
}

/* /stats "inflight" of an instance; -1 when it does not answer. */
static int inflight(const instance *in)
{
    char url[128], e[256];
    snprintf(url, sizeof url, "%s/stats", in->base);
    long st = 0;
    char *body = NULL;
    int n = -1;
    if (lg_http_call("GET", url, NULL, NULL, 1000, &st, &body, e, sizeof e) == 0 && st == 200 &&
        body) {
        cJSON *j = lg_json_parse(body, strlen(body));
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "inflight");
        if (cJSON_IsNumber(v))
            n = v->valueint;
        cJSON_Delete(j);
    }
    free(body);
    return n;
}

/* /stats "orphan_locks"."released" of an instance: locks the lock core gave
 * back because an acquire that had timed out was granted late
 * (lockcore/README.md, "Orphan cleanup"); 0 when it does not answer. */
static long long orphans_released(const instance *in)
{
    char url[128], e[256];
    snprintf(url, sizeof url, "%s/stats", in->base);
    long st = 0;
    char *body = NULL;
    long long n = 0;
    if (lg_http_call("GET", url, NULL, NULL, 1000, &st, &body, e, sizeof e) == 0 && st == 200 &&
        body) {
        cJSON *j = lg_json_parse(body, strlen(body));
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "orphan_locks");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "released");
        if (cJSON_IsNumber(v))
            n = (long long)v->valuedouble;
        cJSON_Delete(j);
    }
    free(body);
    return n;
}

/* --- waiting ----------------------------------------------------------------- */

/* 0 while the cell may go on; non-zero on Ctrl-C or when the burst ended
 * by itself (it should not: it is stopped once the stock is gone). */
static int interrupted(fcell *f)
{
    return lg_mx_stopped(f->x) || atomic_load(&f->bdone);
}

/* Sleeps until `until` (monotonic ms) unless interrupted; 0 when reached. */
static int hold_until(fcell *f, long long until)
{
    while (lc_now_ms() < until) {
        if (interrupted(f))
            return -1;
        pk_sleep_ms(F_POLL_MS);
    }
    return 0;
}

/* --- the burst, on its own thread ---------------------------------------- */

static void *burst_main(void *arg)
{
    fcell *f = arg;
    f->brc = lg_run(&f->rc, f->r, f->berr, sizeof f->berr);
    atomic_store(&f->bdone, 1);
    return NULL;
}

static int burst_start(fcell *f, char *err, size_t errlen)
{
    lg_run_cfg *rc = &f->rc;
    lg_run_cfg_init(rc);
    rc->mode = lg_mode_names[f->mode];
    rc->sku = f->sku;
    rc->requests = F_REQUESTS;
    rc->concurrency = F_CONCURRENCY;
    rc->stock = -1; /* reset by the caller, before the burst */
    rc->work_ms = F_WORK_MS;
    rc->wait_ms = F_WAIT_MS;
    rc->deadline_ms = lg_mx_bound(f->x, 60000);
    rc->stop = &f->bstop;
    if (lg_mx_targets(rc, f->ins, 3, err, errlen) < 0)
        return -1;
    int e = pthread_create(&f->tid, NULL, burst_main, f);
    if (e != 0) {
        snprintf(err, errlen, "pthread_create: %s", strerror(e));
        return -1;
    }
    return 0;
}

static void burst_stop(fcell *f)
{
    __atomic_store_n(&f->bstop, 1, __ATOMIC_RELAXED); /* read by the engine's threads */
    lg_pt_must(pthread_join(f->tid, NULL), "fault: join the burst");
}

/* --- kill ------------------------------------------------------------------ */

/* 1 while the dead holder's lock is still in Redis. setnx's value is "1"
 * for every holder: there the lock is the dead one's as long as its PTTL
 * only goes down (a new holder's PEXPIRE would raise it). */
static int dead_lock_held(fcell *f, long long *last_pttl)
{
    char out[256];
    if (f->mode == LG_MODE_TOKEN || f->mode == LG_MODE_FENCED || f->mode == LG_MODE_REDLOCK) {
        const char *argv[] = {"GET", f->k_lock};
        int r = pk_redis_query(lock_port(f), 500, 2, argv, out, sizeof out);
        return r < 0 || (r == 1 && !strcmp(out, f->holder));
    }
    if (f->mode == LG_MODE_REENTRANT) {
        long long v = redis_int(f, "HEXISTS", f->k_lock, f->holder);
        return v != 0;
    }
    long long p = redis_int(f, "PTTL", f->k_lock, NULL);
    if (p == LLONG_MIN)
        return 1;
    if (p == -2 || p > *last_pttl + 50)
        return 0;
    *last_pttl = p;
    return 1;
}

/* token/setnx: F_CRASHERS purchases with fault=crash_in_section sent at
 * once to the victim (the engine, without audit). They queue for the lock
 * among the burst's buyers — several of them, so that one wins it long
 * before the stock is gone (with one, a 1-in-25 chance per hand-over) — and
 * the process exits as soon as one holds it. 0 when it crashed. */
static int crash_victim(fcell *f, instance *v)
{
    lg_run_cfg rc;
    lg_run_cfg_init(&rc);
    rc.mode = lg_mode_names[f->mode];
    rc.sku = f->sku;
    rc.requests = F_CRASHERS;
    rc.concurrency = F_CRASHERS;
    rc.stock = -1;
    rc.work_ms = F_WORK_MS;
    rc.wait_ms = F_WAIT_MS;
    rc.fault = "crash_in_section";
    rc.skip_audit = 1;
    rc.deadline_ms = lg_mx_bound(f->x, 20000);
    rc.stop = f->x->cfg->stop;
    rc.admin_token = f->x->cfg->admin_token;
    char e[256];
    lg_run_result *r = calloc(1, sizeof *r);
    if (!r || lg_mx_targets(&rc, v, 1, e, sizeof e) < 0 || lg_run(&rc, r, e, sizeof e) < 0) {
        snprintf(f->why, sizeof f->why, "crash_in_section requests: %.150s",
                 r ? e : "out of memory");
        free(r);
        return -1;
    }
    uint64_t answered = r->eng.completed;
    free(r);
    if (answered > 0) {
        snprintf(f->why, sizeof f->why, "%llu crash_in_section request(s) got an answer",
                 (unsigned long long)answered);
        return -1;
    }
    return 0;
}

/* reentrant: SIGKILL whichever instance holds the lock, made certain by
 * freezing it first. Any instance will do, and one always holds it: waiting
 * for a chosen one could miss, since an instance's own buyers may keep the
 * lock among themselves for the whole burst (they barge ahead of other
 * processes). Sets f->victim; 0 when killed. */
static int kill_reentrant_holder(fcell *f)
{
    long long end = lc_now_ms() + lg_mx_bound(f->x, 20000);
    while (lc_now_ms() < end && !interrupted(f)) {
        char fields[1024];
        instance *v = NULL;
        const char *argv[] = {"HKEYS", f->k_lock};
        if (pk_redis_query(f->x->redis_port, 500, 2, argv, fields, sizeof fields) == 1) {
            for (int i = 0; i < 3 && !v; i++) {
                char prefix[80];
                snprintf(prefix, sizeof prefix, "%s-g%d:", f->ins[i].id, f->ins[i].generation);
                char *hit = strstr(fields, prefix);
                if (hit && (hit == fields || hit[-1] == '\n')) {
                    v = &f->ins[i];
                    size_t n = strcspn(hit, "\n");
                    snprintf(f->holder, sizeof f->holder, "%.*s", (int)(n < 127 ? n : 127), hit);
                }
            }
        }
        if (v) {
            kill(v->pid, SIGSTOP);
            pk_sleep_ms(20); /* a release it sent before the stop lands now */
            if (redis_int(f, "HEXISTS", f->k_lock, f->holder) == 1) {
                kill(v->pid, SIGKILL);
                f->victim = v;
                return 0;
            }
            kill(v->pid, SIGCONT);
            f->holder[0] = 0;
        }
        pk_sleep_ms(2);
    }
    snprintf(f->why, sizeof f->why, "no instance seen holding the lock");
    return -1;
}

/* none/mutex: SIGKILL the victim while its /stats shows a purchase in
 * flight. 0 when killed. */
static int kill_busy(fcell *f, instance *v)
{
    long long end = lc_now_ms() + lg_mx_bound(f->x, 20000);
    while (lc_now_ms() < end && !interrupted(f)) {
        if (inflight(v) > 0) {
            kill(v->pid, SIGKILL);
            return 0;
        }
        pk_sleep_ms(2);
    }
    snprintf(f->why, sizeof f->why, "%s never had a purchase in flight", v->id);
    return -1;
}

/* token, fenced, redlock: the dead holder's token into f->holder ("" when
 * none), and for redlock the lock master watched from now on
 * (f->lock_node). redlock's holder had a majority, not every master: a
 * node whose SET answered after its per-node timeout has no key, and one
 * outside the majority may hold another buyer's attempt that failed its
 * quorum and is being released. The holder's token is the value a majority
 * of the masters hold. */
static void read_holder(fcell *f)
{
    const char *argv[] = {"GET", f->k_lock};
    f->lock_node = 0;
    if (f->mode != LG_MODE_REDLOCK) {
        if (pk_redis_query(lock_port(f), 500, 2, argv, f->holder, sizeof f->holder) != 1)
            f->holder[0] = 0;
        return;
    }
    char val[LG_LOCK_MASTERS][sizeof f->holder];
    for (int i = 0; i < LG_LOCK_MASTERS; i++)
        if (pk_redis_query(f->x->lock_port[i], 500, 2, argv, val[i], sizeof val[i]) != 1)
            val[i][0] = 0;
    f->holder[0] = 0;
    for (int i = 0; i < LG_LOCK_MASTERS && !f->holder[0]; i++) {
        int same = 0;
        for (int j = 0; j < LG_LOCK_MASTERS; j++)
            same += val[i][0] && strcmp(val[i], val[j]) == 0;
        if (same > LG_LOCK_MASTERS / 2) {
            memcpy(f->holder, val[i], sizeof f->holder); /* same size, terminated */
            f->lock_node = i;
        }
    }
}

static int inject_kill(fcell *f)
{
    f->victim = &f->ins[2];
    int r = f->mode == LG_MODE_TOKEN || f->mode == LG_MODE_FENCED || f->mode == LG_MODE_SETNX ||
                    f->mode == LG_MODE_REDLOCK
                ? crash_victim(f, f->victim)
            : f->mode == LG_MODE_REENTRANT ? kill_reentrant_holder(f)
                                           : kill_busy(f, f->victim);
    if (r < 0)
        return -1;
    instance *v = f->victim;
    f->t_kill = f->t_end = lc_now_ms();
    int lock_seen = 1;
    if (f->hold_ms) {
        int tok = f->mode == LG_MODE_TOKEN || f->mode == LG_MODE_FENCED ||
                  f->mode == LG_MODE_REDLOCK;
        if (tok)
            read_holder(f);
        f->pttl_at_kill = redis_int(f, "PTTL", f->k_lock, NULL);
        lock_seen = f->pttl_at_kill > 0 && (!tok || f->holder[0]);
    }
    f->sold_at_fault = sold_now(f);
    /* reap and restart the victim whatever happens next */
    if (!pk_wait_exit(v->pid, 3000)) {
        lg_mx_instance_stop(v);
        snprintf(f->why, sizeof f->why, "%s did not exit", v->id);
        return -1;
    }
    v->pid = 0;
    char e[256];
    if (lg_mx_instance_spawn(f->x, v, e, sizeof e) < 0) {
        snprintf(f->why, sizeof f->why, "restart of %.40s: %.120s", v->id, e);
        return -1;
    }
    f->victim_down = 1;
    if (!lock_seen) {
        snprintf(f->why, sizeof f->why, "no lock in Redis right after the kill (pttl %lld)",
                 f->pttl_at_kill);
        return -1;
    }
    snprintf(f->note, sizeof f->note, "%s killed at sold %lld%s", v->id, f->sold_at_fault,
             f->hold_ms ? " holding the lock" : " mid-purchase");
    if (f->hold_ms)
        lg_addf(f->note, sizeof f->note, " (pttl %lld)", f->pttl_at_kill);
    return 0;
}

/* --- redis-restart and redis-pause ----------------------------------------- */

/* A purchase at each of `n` instances while Redis is unavailable: each must
 * be a 503 redis_unavailable within `bound_ms`. */
static void probe_unavailable(fcell *f, int n, const char *tag, long long bound_ms)
{
    for (int i = 0; i < n; i++) {
        char code[32], user[32];
        long long ms;
        snprintf(user, sizeof user, "probe-%s-%d", tag, i);
        long st = probe(f, &f->ins[i], user, "&wait_ms=0", code, &ms);
        if (st == 503 && !strcmp(code, "redis_unavailable")) {
            f->probes_503++;
            if (ms > f->c->failfast_ms)
                f->c->failfast_ms = ms;
        } else if (f->mode == LG_MODE_REDLOCK && st == 429 && !strcmp(code, "lock_busy")) {
            /* redlock's lock lives on the lock masters, which this fault
             * leaves alone: a buyer stuck on the stock's Redis holds it,
             * and a probe that does not wait is refused before it reads */
            f->probes_busy++;
        } else {
            /* mutex may answer 429 from its in-process lock first */
            lg_addf(f->checks, sizeof f->checks, "; %s %s answered %ld %s", tag, f->ins[i].id, st,
                    code);
        }
    }
    if (f->c->failfast_ms > bound_ms)
        lg_addf(f->checks, sizeof f->checks, "; 503 took %lld ms > %lld",
                (long long)f->c->failfast_ms, bound_ms);
}

static int inject_redis_restart(fcell *f)
{
    mctx *x = f->x;
    f->sold_at_fault = sold_now(f);
    pid_t pid = x->redis_pid;
    kill(pid, SIGKILL);
    long long t_down = lc_now_ms();
    pk_wait_exit(pid, 3000);
    x->redis_pid = 0;
    probe_unavailable(f, 3, "down", lg_mx_bound(x, 2 * F_CMD_TIMEOUT_MS + 500));
    if (hold_until(f, t_down + F_DOWN_MS) < 0)
        return -1;
    char e[256];
    if (lg_mx_redis_spawn(x, e, sizeof e) < 0) {
        snprintf(f->why, sizeof f->why, "restart of redis-server: %.150s", e);
        return -1;
    }
    long long t_up = f->t_end = lc_now_ms();
    f->c->fault_ms = t_up - t_down;
    /* every instance answers a purchase from Redis again (200, 409 or 429:
     * anything but 503), by itself: same processes */
    long long end = t_up + lg_mx_bound(x, 5000), worst = 0;
    for (int i = 0; i < 3; i++) {
        long long back = -1;
        for (int k = 0; back < 0 && lc_now_ms() < end && !interrupted(f); k++) {
            char code[32], user[32];
            long long ms;
            snprintf(user, sizeof user, "probe-up-%d-%d", i, k);
            long st = probe(f, &f->ins[i], user, "&wait_ms=0", code, &ms);
            if (st != 0 && st != 503)
                back = lc_now_ms() - t_up;
            else
                pk_sleep_ms(10);
        }
        if (back < 0) {
            lg_addf(f->checks, sizeof f->checks, "; %s still 503 after Redis came back",
                    f->ins[i].id);
            worst = -1;
            break;
        }
        if (back > worst)
            worst = back;
    }
    f->c->reconnect_ms = worst;
    if (worst > lg_mx_bound(x, 1000))
        lg_addf(f->checks, sizeof f->checks, "; reconnect took %lld ms > %lld", worst,
                lg_mx_bound(x, 1000));
    snprintf(f->note, sizeof f->note,
             "Redis SIGKILLed at sold %lld, down %lld ms: %llu/3 probes "
             "503 (max %lld ms), all instances back %lld ms after it answered PING",
             f->sold_at_fault, (long long)f->c->fault_ms, (unsigned long long)f->probes_503,
             (long long)(f->c->failfast_ms > 0 ? f->c->failfast_ms : 0), worst);
    if (f->probes_busy)
        lg_addf(f->note, sizeof f->note, " (%llu probe(s) 429: the lock masters are up)",
                (unsigned long long)f->probes_busy);
    return 0;
}

static int inject_redis_pause(fcell *f)
{
    mctx *x = f->x;
    f->sold_at_fault = sold_now(f);
    kill(x->redis_pid, SIGSTOP);
    long long t_stop = lc_now_ms();
    /* one probe: each takes up to the timeouts and the pause is only 2 s */
    probe_unavailable(f, 1, "paused", lg_mx_bound(x, 2 * F_CMD_TIMEOUT_MS + 400));
    int r = hold_until(f, t_stop + F_PAUSE_MS);
    kill(x->redis_pid, SIGCONT); /* always, also when interrupted */
    if (r < 0)
        return -1;
    f->t_end = lc_now_ms();
    f->c->fault_ms = f->t_end - t_stop;
    snprintf(f->note, sizeof f->note,
             "Redis SIGSTOPped at sold %lld for %lld ms: ", f->sold_at_fault,
             (long long)f->c->fault_ms);
    if (f->probes_503)
        lg_addf(f->note, sizeof f->note, "probe 503 in %lld ms", (long long)f->c->failfast_ms);
    else if (f->probes_busy)
        lg_addf(f->note, sizeof f->note, "probe 429 lock_busy (the lock masters are up)");
    else
        lg_addf(f->note, sizeof f->note, "probe not 503%s", f->checks);
    return 0;
}

/* --- after the fault --------------------------------------------------------- */

/* Watches until the stock is gone (and, for kill, the victim is back and the
 * dead holder's lock gone), a lock is stuck without TTL, or a deadline. */
static void watch(fcell *f)
{
    lg_cell *c = f->c;
    mctx *x = f->x;
    instance *v = f->victim;
    long long t0 = f->t_end, last_sale = t0;
    long long end = t0 + f->hold_ms + lg_mx_bound(x, 20000);
    long long last_pttl = f->pttl_at_kill, last_sold = LLONG_MIN;
    int watch_lock = f->scen == LG_SCEN_KILL && f->hold_ms > 0;
    while (!interrupted(f)) {
        long long now = lc_now_ms();
        if (f->victim_down) {
            int st = lg_mx_instance_poll(v);
            if (st == 1) {
                f->victim_down = 0;
                c->fault_ms = now - f->t_kill;
            } else if (st < 0 || now - f->t_kill > lg_mx_bound(x, 10000)) {
                snprintf(f->why, sizeof f->why, "%s did not come back after the kill", v->id);
                return;
            }
        }
        if (watch_lock && c->freed_ms < 0 && !dead_lock_held(f, &last_pttl))
            c->freed_ms = now - t0;
        long long sold = sold_now(f), stock = redis_int(f, "GET", f->k_stock, NULL);
        if (sold != LLONG_MIN && last_sold != LLONG_MIN && sold > last_sold) {
            last_sale = now;
            if (c->resume_ms < 0)
                c->resume_ms = now - t0;
        }
        if (sold != LLONG_MIN)
            last_sold = sold;
        if (stock == 0 && !f->victim_down && (!watch_lock || c->freed_ms >= 0)) {
            f->sold_out = 1;
            return;
        }
        /* nobody sold for longer than any lease and the lock has no TTL
         * (twice, 50 ms apart: a live setnx holder is without TTL only
         * between its SETNX and PEXPIRE): it will never go by itself */
        if (now - last_sale > f->hold_ms + lg_mx_bound(x, 1000) &&
            redis_int(f, "PTTL", f->k_lock, NULL) == -1) {
            pk_sleep_ms(50);
            if (redis_int(f, "PTTL", f->k_lock, NULL) == -1) {
                f->stuck = 1;
                return;
            }
        }
        if (now > end)
            return;
        pk_sleep_ms(F_POLL_MS);
    }
}

/* The bounds a Redis lock mode must meet besides a clean audit. */
static void check_bounds(fcell *f)
{
    lg_cell *c = f->c;
    long long slack = lg_mx_bound(f->x, 1000);
    if (f->scen == LG_SCEN_KILL && f->hold_ms) {
        if (c->freed_ms < 0)
            lg_addf(f->checks, sizeof f->checks, "; the dead holder's lock never went");
        else if (c->freed_ms < f->pttl_at_kill - 250)
            lg_addf(f->checks, sizeof f->checks, "; lock gone after %lld ms, before its TTL (%lld)",
                    (long long)c->freed_ms, f->pttl_at_kill);
        else if (c->freed_ms > f->hold_ms + slack)
            lg_addf(f->checks, sizeof f->checks, "; lock gone only after %lld ms",
                    (long long)c->freed_ms);
    }
    if (f->scen == LG_SCEN_REDIS_PAUSE && c->resume_ms > f->hold_ms + slack)
        lg_addf(f->checks, sizeof f->checks, "; first sale %lld ms after SIGCONT > lease + %lld",
                (long long)c->resume_ms, slack);
}

static void classify(fcell *f)
{
    lg_cell *c = f->c;
    const lg_run_result *r = f->r;
    lg_mx_fill_from_run(c, r);
    /* the burst is stopped on purpose once sold out: requests it never sent
     * are not errors */
    c->errors = r->redis_unavailable + r->other_http + r->transport_errors;
    c->n503 = r->redis_unavailable;
    c->unacked = r->unacknowledged;
    char audit[160];
    snprintf(audit, sizeof audit,
             "sold %lld/%lld, %llu acked_lost, %llu acked_over_stock, %llu unacked, %llu 503s",
             (long long)c->sold, (long long)c->stock, (unsigned long long)c->acked_lost,
             (unsigned long long)c->acked_over_stock, (unsigned long long)c->unacked,
             (unsigned long long)c->n503);
    const char *o;
    if (f->why[0]) {
        o = "error";
        snprintf(c->reason, sizeof c->reason, "%s", f->why);
        snprintf(c->outcome, sizeof c->outcome, "%s", o);
        return;
    }
    if (!r->audited) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no audit: %.200s", r->audit_error);
        return;
    }
    check_bounds(f);
    if (c->oversold > 0)
        o = "oversell";
    else if (c->undersold || c->dup || c->acked_lost || c->acked_over_stock || r->ok_without_id)
        o = "unsafe";
    else if (f->stuck)
        o = "stuck";
    else if (!f->sold_out)
        o = "short";
    else if (f->scen == LG_SCEN_KILL && f->hold_ms && f->sold_at_fault >= c->stock)
        o = "missed"; /* the kill came after the stock was gone: it showed nothing */
    else if (f->checks[0] && f->hold_ms)
        o = "late";
    else
        o = "safe";
    snprintf(c->outcome, sizeof c->outcome, "%s", o);
    snprintf(c->reason, sizeof c->reason, "%s; ", f->note);
    if (c->freed_ms >= 0)
        lg_addf(c->reason, sizeof c->reason, "lock gone %lld ms after, ", (long long)c->freed_ms);
    if (f->stuck)
        lg_addf(c->reason, sizeof c->reason, "lock without TTL, no sale since; ");
    else if (c->resume_ms >= 0 && f->scen != LG_SCEN_KILL)
        lg_addf(c->reason, sizeof c->reason, "next sale +%lld ms; ", (long long)c->resume_ms);
    if (f->scen == LG_SCEN_REDIS_PAUSE && f->hold_ms) {
        /* An acquire that timed out during the pause runs when Redis
         * resumes; without the lock core's cleanup its lock would block
         * the SKU for a whole lease, held by nobody. */
        long long given_back = 0;
        for (int i = 0; i < 3; i++)
            given_back += orphans_released(&f->ins[i]);
        lg_addf(c->reason, sizeof c->reason, "%lld orphan lock(s) given back; ", given_back);
    }
    lg_addf(c->reason, sizeof c->reason, "%s", audit);
    if (c->fenced_out > 0) /* fenced: a holder the fault made outlive its lease */
        lg_addf(c->reason, sizeof c->reason, ", %llu fenced out",
                (unsigned long long)c->fenced_out);
    if (c->oversold > 0)
        lg_addf(c->reason, sizeof c->reason, " (+%lld oversold)", (long long)c->oversold);
    if (c->undersold)
        lg_addf(c->reason, sizeof c->reason, " (undersold %lld)", (long long)c->undersold);
    if (f->checks[0] && f->hold_ms)
        lg_addf(c->reason, sizeof c->reason, "%s", f->checks);
}

/* Every instance healthy: started when down, waited for when a previous
 * cell's restart is still coming up. 0 or -1. */
static int instances_ready(mctx *x, instance ins[3], char *err, size_t errlen)
{
    for (int i = 0; i < 3; i++) {
        if (lg_mx_instance_wait(x, &ins[i], lg_mx_bound(x, 10000)) == 1)
            continue;
        lg_mx_instance_stop(&ins[i]);
        if (lg_mx_instance_start(x, &ins[i], err, errlen) < 0)
            return -1;
    }
    return 0;
}

int lg_fault_cell(mctx *x, lg_cell *c, lg_scenario scen, lg_mode mode, instance ins[3], char *err,
                  size_t errlen)
{
    fcell *f = calloc(1, sizeof *f);
    lg_run_result *r = calloc(1, sizeof *r);
    if (!f || !r) {
        free(f);
        free(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    f->x = x;
    f->c = c;
    f->scen = scen;
    f->mode = mode;
    f->ins = ins;
    f->r = r;
    f->hold_ms = mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED ||
                         mode == LG_MODE_REDLOCK
                     ? F_LEASE_MS
                 : mode == LG_MODE_REENTRANT ? F_WATCHDOG_MS
                                             : 0;
    snprintf(f->sku, sizeof f->sku, "mx-%s-%s", lg_scen_names[scen], lg_mode_names[mode]);
    snprintf(f->k_lock, sizeof f->k_lock, "miaosha:{%s}:lock:%s", f->sku, lg_mode_names[mode]);
    snprintf(f->k_sold, sizeof f->k_sold, "miaosha:{%s}:sold", f->sku);
    snprintf(f->k_stock, sizeof f->k_stock, "miaosha:{%s}:stock", f->sku);
    c->ran = 1;
    c->recovery_ms = c->fault_ms = c->freed_ms = c->failfast_ms = c->reconnect_ms = c->resume_ms =
        -1;
    c->stock = x->cfg->quick ? 40 : 80;
    int rc = -1;
    /* a failed restart in an earlier cell may have left Redis or an
     * instance down: bring them back first */
    if (x->redis_pid <= 0 && lg_mx_redis_spawn(x, err, errlen) < 0)
        goto out;
    if (instances_ready(x, ins, err, errlen) < 0)
        goto out;
    if (lg_admin_reset(ins[0].base, f->sku, c->stock, f->x->cfg->admin_token, err, errlen) < 0 ||
        burst_start(f, err, errlen) < 0)
        goto out;
    long long end = lc_now_ms() + lg_mx_bound(x, 15000);
    long long sold = LLONG_MIN;
    while (!interrupted(f) && lc_now_ms() < end &&
           ((sold = sold_now(f)) == LLONG_MIN || sold < F_SOLD_BEFORE))
        pk_sleep_ms(F_POLL_MS);
    int injected = -1;
    if (sold == LLONG_MIN || sold < F_SOLD_BEFORE)
        snprintf(f->why, sizeof f->why, "the burst did not start selling");
    else if (scen == LG_SCEN_KILL)
        injected = inject_kill(f);
    else if (scen == LG_SCEN_REDIS_RESTART)
        injected = inject_redis_restart(f);
    else
        injected = inject_redis_pause(f);
    if (injected == 0)
        watch(f);
    else if (!f->why[0])
        snprintf(f->why, sizeof f->why, "%s",
                 lg_mx_stopped(x) ? "interrupted" : "the burst ended early");
    burst_stop(f);
    if (f->brc < 0) {
        snprintf(err, errlen, "%.200s", f->berr);
        goto out;
    }
    classify(f);
    rc = 0;
out:
    free(r);
    free(f);
    return rc;
}
