/* lg_nodes.c — the matrix's redlock scenarios (lg_nodes.h): what the
 * redlock mode goes through when its lock masters fail, on the matrix's
 * five private lock masters (no persistence) and the matrix's Redis for
 * the stock.
 *
 *   nodes-down          two of the five masters SIGKILLed, then the race
 *                       burst (as the race cell): a majority of three is
 *                       left, so it must sell exactly. Then a third one
 *                       killed: no majority can be had, so every buyer
 *                       must be refused (503 redis_unavailable: fewer than
 *                       a majority answered; or 429), nothing sold, and no
 *                       lock key left on the two survivors (a failed
 *                       attempt releases on every node). Exact = all of it.
 *   node-restart        the known Redlock caveat, made deterministic: the
 *                       stock is 1; masters 3 and 4 hold the lock key for
 *                       800 ms under a foreign value ("blocker"), so buyer
 *                       A (lease 4000 ms, work 3000 ms) gets exactly
 *                       masters 0, 1 and 2, a majority. Master 2 is then
 *                       SIGKILLed and restarted empty (no AOF: it forgets
 *                       A's key). Once the blockers' PX ran out, buyer B
 *                       asks: masters 2, 3 and 4 are free, a majority, while
 *                       A's validity has seconds left. B buys the last
 *                       item, A wakes up and writes its stale read: 2 sold
 *                       of 1, the oversell.
 *   node-restart-delay  the same with redlock.restart_delay_ms = 4000 (the
 *                       longest lease asked for): the restarted master does
 *                       not vote until it has been up that long, B gets
 *                       two votes and 429 lock_busy, A alone sells: exact.
 *                       The cell first waits until every master has been up
 *                       for the delay (they vote for A only then).
 * Every wait polls a condition with a deadline (scaled by
 * cfg->time_factor); the cell leaves every master running.
 */
#include "lg_nodes.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_admin.h"
#include "lg_mx_cell.h"
#include "pk_proc.h"
#include "pk_redis.h"

#define NR_LEASE_MS 4000 /* A's lease, and the restart delay */
#define NR_WORK_MS 3000  /* A's work inside the lock */
#define NR_BLOCK_MS 800  /* the blockers' PX on masters 3 and 4 */
#define ND_PROBES 10     /* buyers with 3 of 5 masters down */

const char *lg_nodes_expected(lg_scenario scen)
{
    return scen == LG_SCEN_NODE_RESTART ? "oversell" : "exact";
}

void lg_nodes_instances(instance ins[2])
{
    snprintf(ins[0].id, sizeof ins[0].id, "mx-redlock");
    snprintf(ins[1].id, sizeof ins[1].id, "mx-redlock-delay");
    ins[1].extra[0] = "--set";
    ins[1].extra[1] = "redlock.restart_delay_ms=4000";
    ins[1].nextra = 2;
}

/* One command on lock master i: 1 a value (in out), 0 nil, -1 no answer. */
static int master_query(const mctx *x, int i, int argc, const char *const argv[], char *out,
                        size_t len)
{
    if (x->lock_pid[i] <= 0)
        return -1;
    return pk_redis_query(x->lock_port[i], 500, argc, argv, out, len);
}

static int masters_up(mctx *x, char *err, size_t errlen)
{
    for (int i = 0; i < LG_LOCK_MASTERS; i++)
        if (x->lock_pid[i] <= 0 && lg_mx_lock_spawn(x, i, err, errlen) < 0)
            return -1;
    return 0;
}

/* How many live masters hold key. */
static int keys_left(const mctx *x, const char *key)
{
    int n = 0;
    for (int i = 0; i < LG_LOCK_MASTERS; i++) {
        const char *argv[] = {"EXISTS", key};
        char out[16];
        if (master_query(x, i, 2, argv, out, sizeof out) == 1 && atoi(out) > 0)
            n++;
    }
    return n;
}

/* One purchase: the HTTP status (0: no answer) and the reply's error code
 * and lock_lost. */
static long buy(const instance *in, const char *sku, const char *user, const char *params,
                char code[32], int *lost)
{
    char url[512], e[256], oid[64];
    snprintf(url, sizeof url, "%s/miaosha/redlock?sku=%s&user=%s%s", in->base, sku, user, params);
    long st = 0;
    char *body = NULL;
    int deleted = 0;
    code[0] = 0;
    *lost = 0;
    int rc = lg_http_call("POST", url, NULL, NULL, 15000, &st, &body, e, sizeof e);
    if (rc == 0 && body)
        lg_parse_purchase(body, strlen(body), oid, code, lost, &deleted);
    free(body);
    return rc == 0 ? st : 0;
}

/* --- nodes-down --------------------------------------------------------- */

static int nodes_down(mctx *x, lg_cell *c, instance *in, char *err, size_t errlen)
{
    int q = x->cfg->quick;
    lg_run_cfg rc;
    lg_run_cfg_init(&rc);
    rc.mode = "redlock";
    rc.sku = "mx-nodes-down-redlock";
    rc.requests = q ? 200 : 1000;
    rc.concurrency = q ? 50 : 100;
    rc.stock = q ? 20 : 100;
    rc.work_ms = 10;
    rc.wait_ms = 30000;
    rc.lease_ms = 10000;
    rc.deadline_ms = 90000;
    rc.stop = x->cfg->stop;
    rc.admin_token = x->cfg->admin_token;
    if (lg_mx_targets(&rc, in, 1, err, errlen) < 0)
        return -1;
    lg_mx_lock_kill(x, 3);
    lg_mx_lock_kill(x, 4);
    lg_run_result *r = lg_mx_run_burst(&rc, c, err, errlen);
    if (!r)
        return -1;
    int audited = r->audited;
    int exact2 = audited && c->oversold == 0 && c->undersold == 0 && c->dup == 0 &&
                 c->acked_lost == 0 && c->acked_over_stock == 0 && r->ok_without_id == 0 &&
                 c->sold == c->stock && c->stock_left == 0;
    if (!audited)
        snprintf(c->reason, sizeof c->reason, "2 of 5 down: no audit: %.150s", r->audit_error);
    else
        snprintf(c->reason, sizeof c->reason, "2 of 5 down: sold %lld/%lld, %llu errors; ",
                 (long long)c->sold, (long long)c->stock, (unsigned long long)c->errors);
    free(r);

    /* A third master down: no majority. */
    lg_mx_lock_kill(x, 2);
    const char *sku = "mx-nodes-down3-redlock";
    char key[96];
    snprintf(key, sizeof key, "miaosha:{%s}:lock:redlock", sku);
    if (lg_admin_reset(in->base, sku, 5, x->cfg->admin_token, err, errlen) < 0)
        return -1;
    int refused = 0, sold = 0;
    for (int i = 0; i < ND_PROBES && !lg_mx_stopped(x); i++) {
        char user[32], code[32];
        int lost;
        snprintf(user, sizeof user, "down3-%d", i);
        long st = buy(in, sku, user, "&work_ms=0&wait_ms=100", code, &lost);
        if ((st == 503 && !strcmp(code, "redis_unavailable")) ||
            (st == 429 && !strcmp(code, "lock_busy"))) {
            refused++;
            c->n503 += st == 503;
        }
        sold += st == 200;
    }
    lg_audit a;
    char e[256];
    int audit_ok = lg_admin_audit(in->base, sku, &a, e, sizeof e) == 0;
    int left = keys_left(x, key);
    lg_addf(c->reason, sizeof c->reason,
            "3 of 5 down: %d/%d buyers refused (%llu 503), %s sold, lock key on %d of 2 survivors",
            refused, ND_PROBES, (unsigned long long)c->n503,
            audit_ok ? (a.sold == 0 ? "nothing" : "SOME") : "(no audit)", left);
    int refused_all = audit_ok && a.sold == 0 && sold == 0 && refused == ND_PROBES && left == 0;
    const char *o = !audited          ? "error"
                    : c->oversold > 0 ? "oversell"
                    : !exact2         ? "short"
                    : !audit_ok       ? "error"
                    : a.sold > 0      ? "sells"
                    : !refused_all    ? "unsafe"
                                      : "exact";
    snprintf(c->outcome, sizeof c->outcome, "%s", o);
    return 0;
}

/* --- node-restart ---------------------------------------------------------- */

typedef struct buyer {
    const instance *in;
    const char *sku, *user, *params;
    long status;
    char code[32];
    int lost;
} buyer;

static void *buyer_main(void *arg)
{
    buyer *b = arg;
    b->status = buy(b->in, b->sku, b->user, b->params, b->code, &b->lost);
    return NULL;
}

/* The longest a master has to be up for, at most: 1 when every master's
 * uptime_in_seconds x 1000 >= ms. */
static int masters_older_than(const mctx *x, long long ms)
{
    for (int i = 0; i < LG_LOCK_MASTERS; i++) {
        const char *argv[] = {"INFO", "server"};
        char out[4096];
        if (master_query(x, i, 2, argv, out, sizeof out) != 1)
            return 0;
        /* as the lock core reads it: the whole seconds Redis reports can
         * run a second ahead, so one less is what the master has surely
         * been up (lc_redlock.c) */
        const char *u = strstr(out, "uptime_in_seconds:");
        if (!u || (strtoll(u + 18, NULL, 10) - 1) * 1000 < ms)
            return 0;
    }
    return 1;
}

static int node_restart(mctx *x, lg_cell *c, lg_scenario scen, instance *in, char *err,
                        size_t errlen)
{
    int delay = scen == LG_SCEN_NODE_RESTART_DELAY;
    char sku[64], key[128];
    snprintf(sku, sizeof sku, "mx-%s-redlock", lg_scen_names[scen]);
    snprintf(key, sizeof key, "miaosha:{%s}:lock:redlock", sku);
    c->ran = 1;
    c->stock = 1;
    if (delay) {
        long long end = lc_now_ms() + lg_mx_bound(x, NR_LEASE_MS + 4000);
        while (!masters_older_than(x, NR_LEASE_MS) && lc_now_ms() < end && !lg_mx_stopped(x))
            pk_sleep_ms(100);
        if (!masters_older_than(x, NR_LEASE_MS)) {
            snprintf(c->outcome, sizeof c->outcome, "error");
            snprintf(c->reason, sizeof c->reason, "the lock masters were not up for %d ms in time",
                     NR_LEASE_MS);
            return 0;
        }
    }
    if (lg_admin_reset(in->base, sku, 1, x->cfg->admin_token, err, errlen) < 0)
        return -1;
    char px[16];
    snprintf(px, sizeof px, "%d", NR_BLOCK_MS);
    for (int i = 3; i < LG_LOCK_MASTERS; i++) {
        const char *argv[] = {"SET", key, "blocker", "PX", px};
        char out[16];
        master_query(x, i, 5, argv, out, sizeof out);
    }
    char pa[128];
    snprintf(pa, sizeof pa, "&work_ms=%d&lease_ms=%d&wait_ms=0", NR_WORK_MS, NR_LEASE_MS);
    buyer a = {in, sku, "A", pa, 0, "", 0};
    pthread_t ta;
    if (pthread_create(&ta, NULL, buyer_main, &a) != 0) {
        snprintf(err, errlen, "pthread_create failed");
        return -1;
    }
    long long t_a = lc_now_ms();
    /* A holds once master 0 has a key. */
    char why[160] = "";
    int held = 0;
    while (!held && lc_now_ms() - t_a < lg_mx_bound(x, 2000) && !lg_mx_stopped(x)) {
        const char *argv[] = {"GET", key};
        char out[64];
        held = master_query(x, 0, 2, argv, out, sizeof out) == 1;
        if (!held)
            pk_sleep_ms(5);
    }
    int a_on = keys_left(x, key); /* A's 3 and the 2 blockers */
    long long t_restart = -1;
    if (!held) {
        snprintf(why, sizeof why, "buyer A did not take the lock");
    } else {
        lg_mx_lock_kill(x, 2);
        if (lg_mx_lock_spawn(x, 2, why, sizeof why) == 0) {
            t_restart = lc_now_ms() - t_a;
            why[0] = 0; /* pk_redis_start leaves a text there on success too */
        }
    }
    buyer b = {in, sku, "B", "&work_ms=0&wait_ms=0", 0, "", 0};
    if (t_restart >= 0) {
        /* B asks once the blockers' PX ran out. */
        long long end = lc_now_ms() + lg_mx_bound(x, NR_BLOCK_MS + 2000);
        while (keys_left(x, key) > 2 && lc_now_ms() < end)
            pk_sleep_ms(5);
        long long t_b = lc_now_ms() - t_a;
        if (t_b > NR_WORK_MS - 500)
            snprintf(why, sizeof why, "too late for B: %lld ms after A, A works %d ms", t_b,
                     NR_WORK_MS);
        else
            buyer_main(&b);
    }
    pthread_join(ta, NULL);
    lg_audit au;
    char e[256];
    if (!why[0] && lg_admin_audit(in->base, sku, &au, e, sizeof e) != 0)
        snprintf(why, sizeof why, "no audit: %.120s", e);
    if (why[0]) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "%s", why);
        return 0;
    }
    c->requests = 2;
    c->ok = (a.status == 200) + (b.status == 200);
    c->lock_busy = (b.status == 429);
    c->lock_lost = a.lost + b.lost;
    c->errors = (a.status != 200 && a.status != 409) +
                (b.status != 200 && b.status != 409 && b.status != 429);
    c->sold = au.sold;
    c->stock_left = au.stock;
    c->oversold = au.oversold;
    c->undersold = au.undersold;
    snprintf(c->reason, sizeof c->reason,
             "A held %d keys (3 + 2 blockers); master 2 restarted empty %lld ms after A; B: %ld "
             "%s%s; A: %ld%s; sold %lld of 1",
             a_on, t_restart, b.status, b.code,
             delay ? " (the restarted master waits 4000 ms to vote)" : "", a.status,
             a.lost ? " lock_lost" : "", (long long)au.sold);
    const char *o = au.oversold > 0                                      ? "oversell"
                    : au.sold == 1 && au.stock == 0 && au.undersold == 0 ? "exact"
                                                                         : "short";
    snprintf(c->outcome, sizeof c->outcome, "%s", o);
    return 0;
}

int lg_nodes_cell(mctx *x, lg_cell *c, lg_scenario scen, instance ins[2], char *err, size_t errlen)
{
    c->recovery_ms = c->fault_ms = c->freed_ms = c->failfast_ms = c->reconnect_ms = c->resume_ms =
        -1;
    if (!x->lock_on) {
        snprintf(err, errlen, "no lock masters");
        return -1;
    }
    instance *in = &ins[scen == LG_SCEN_NODE_RESTART_DELAY];
    if (masters_up(x, err, errlen) < 0)
        return -1;
    if (in->pid <= 0 && lg_mx_instance_start(x, in, err, errlen) < 0)
        return -1;
    int rc = scen == LG_SCEN_NODES_DOWN ? nodes_down(x, c, in, err, errlen)
                                        : node_restart(x, c, scen, in, err, errlen);
    /* Every master back for the next cell (a failed restart is that
     * cell's error). */
    char e[256];
    masters_up(x, e, sizeof e);
    return rc;
}
