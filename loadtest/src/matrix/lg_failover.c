/* lg_failover.c — the failover scenario (lg_failover.h): the lock that a
 * Sentinel failover loses.
 *
 * Each cell builds its own topology (pk_ha.h): a master, one replica whose
 * link runs through a forwarder, three Sentinels (down-after 500 ms), and
 * the master known to everyone by a second forwarder's port (its "front").
 * Two instances ask the Sentinels for the master: the holder's and the
 * buyer's. Stock 1, copied to the replica; then:
 *
 *   1. the replica's link is frozen: from now on the master's writes stay
 *      in the forwarder's socket buffers, never on the replica;
 *   2. the holder buys with work_ms 4000 (a lease no wait of the cell
 *      outlives: fo_lease_ms) and waits until it holds the lock on the
 *      master (the lock key is there; no lock: its purchase is in flight
 *      and has read the stock);
 *   3. the front is frozen (the holder's connection stays open, without
 *      EOF: what a client sees of a master that vanished from the network)
 *      and the master is SIGKILLed; Sentinel promotes the replica, which
 *      has the stock and no lock;
 *   4. the buyer buys on the new master (503 until its instance follows
 *      the switch) while the holder still sleeps in its critical section;
 *   5. the holder wakes: its instance learned +switch-master, drops the old
 *      connection and sends the commit to the new master — the write of a
 *      holder whose lock the new master never had.
 * Then the audit: sold 2 of 1 is the lock lost. The cell's failover time
 * is kill -> the Sentinels name the new master; "resume" is kill -> the
 * buyer's 200. Every wait polls with a deadline (lg_mx_bound).
 */
#include "lg_failover.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lg_admin.h"
#include "lg_mx_cell.h"
#include "pk_ha.h"
#include "pk_proc.h"
#include "pk_redis.h"

#define FO_DOWN_AFTER_MS 500
#define FO_FAILOVER_TIMEOUT_MS 2000
#define FO_WORK_MS 4000 /* the holder's time in its critical section */
#define FO_FAILOVER_MAX_MS 10000
#define FO_LEASE_CAP_MS 300000 /* lock.max_lease_ms's default: the cap on ?lease_ms= */

const char *lg_failover_expected(lg_mode mode)
{
    /* The new master never had the lock: every mode whose lock lives in
     * Redis lets the buyer in beside the holder; none and mutex (two
     * instances) never kept him out. lua takes no lock and runs its read
     * and write as one script on the master of the moment: the holder's
     * script runs after the buyer's, on the new master, and finds the
     * stock gone. */
    if (mode == LG_MODE_LUA)
        return "exact";
    /* fenced takes token's lock on the failing master, and its fence
     * does not save it here: the fencing counter and the high-water mark
     * are keys of that master too, and the frozen link never carried the
     * holder's INCR nor its read's mark to the replica. On the promoted
     * replica the buyer's INCR hands out the very token the holder got,
     * its read sets the mark to it, and the holder's write, checked
     * against an equal mark, passes: sold 2 of 1, as token. Only a fence
     * whose counter survives the failover (replicated before the grant,
     * or kept apart from the master that fails) would refuse it. */
    if (mode == LG_MODE_FENCED)
        return "oversell";
    /* redlock keeps its lock on the matrix's independent lock masters,
     * which this failover does not touch (its instances get
     * redlock.nodes like every instance the matrix starts): the buyer
     * finds the lock held and the cell stays exact. */
    return mode > LG_MODE_REENTRANT ? "exact" : "oversell";
}

/* The lease of setnx, token, fenced and redlock (reentrant runs on its
 * watchdog): no lease may run out in the cell, or an "exact" redlock
 * would turn into an oversell for the wrong reason (the holder's lease
 * gone, not the failover) and every lock_lost would be the clock's. The
 * holder needs its work and its commit; the buyer tries for up to
 * FO_FAILOVER_MAX_MS after the kill. Both are scaled by --time-factor like
 * every upper bound of the cell, then doubled: a loaded machine stretches
 * the holder's sleep and commit as well as the failover. 28 s at factor 1
 * (the default 5 s lease against 4 s of work left a second). */
static long long fo_lease_ms(const mctx *x)
{
    long long l = 2 * lg_mx_bound(x, FO_WORK_MS + FO_FAILOVER_MAX_MS);
    return l < FO_LEASE_CAP_MS ? l : FO_LEASE_CAP_MS;
}

typedef struct holder {
    char url[512];
    long status;
    char error[32];
    int lost;
    long long answered; /* lc_now_ms() when its answer came */
} holder;

static void *hold(void *arg)
{
    holder *h = arg;
    char *body = NULL, e[256], oid[64];
    int deleted = 0;
    if (lg_http_call("POST", h->url, NULL, NULL, FO_WORK_MS + 20000, &h->status, &body, e,
                     sizeof e) != 0)
        h->status = 0;
    h->answered = lc_now_ms();
    if (body)
        lg_parse_purchase(body, strlen(body), oid, h->error, &h->lost, &deleted);
    free(body);
    return NULL;
}

static int key_exists(int port, const char *key)
{
    const char *argv[] = {"EXISTS", key};
    char out[32];
    return pk_redis_query(port, 300, 2, argv, out, sizeof out) == 1 && !strcmp(out, "1");
}

static int stats_inflight(const instance *in)
{
    char url[128], e[256], *body = NULL;
    long st = 0;
    snprintf(url, sizeof url, "%s/stats", in->base);
    int n = 0;
    if (lg_http_call("GET", url, NULL, NULL, 1000, &st, &body, e, sizeof e) == 0 && body) {
        const char *p = strstr(body, "\"inflight\":");
        n = p ? atoi(p + 11) : 0;
    }
    free(body);
    return n;
}

int lg_failover_cell(mctx *x, lg_cell *c, lg_mode mode, char *err, size_t errlen)
{
    const char *m = lg_mode_names[mode];
    c->ran = 1;
    c->stock = 1;
    c->recovery_ms = c->freed_ms = c->failfast_ms = c->reconnect_ms = -1;
    c->fault_ms = c->resume_ms = -1;
    char dir[PATH_MAX + 32], sku[64], lock_key[128], stock_key[128];
    snprintf(dir, sizeof dir, "%s/failover-%s", x->logdir, m);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    snprintf(sku, sizeof sku, "mx-failover-%s", m);
    snprintf(lock_key, sizeof lock_key, "miaosha:{%s}:lock:%s", sku, m);
    snprintf(stock_key, sizeof stock_key, "miaosha:{%s}:stock", sku);

    pk_ha h;
    pk_ha_opts o = {.server = x->cfg->redis_server,
                    .dir = dir,
                    .replicas = 1,
                    .proxied = 1,
                    .fronted = 1,
                    .down_after_ms = FO_DOWN_AFTER_MS,
                    .failover_timeout_ms = FO_FAILOVER_TIMEOUT_MS,
                    .stop = x->cfg->stop};
    if (pk_ha_start(&h, &o, err, errlen) < 0)
        return -1;
    char sentinels[160];
    snprintf(sentinels, sizeof sentinels, "redis.sentinels=%s", h.sentinels);
    instance ins[2];
    memset(ins, 0, sizeof ins);
    int rc = -1;
    pthread_t t;
    int started = 0;
    holder hd;
    memset(&hd, 0, sizeof hd);
    for (int i = 0; i < 2; i++) {
        snprintf(ins[i].id, sizeof ins[i].id, "mx-fo-%s-%s", i ? "buyer" : "holder", m);
        const char *extra[] = {"--set", sentinels,
                               "--set", "redis.master_name=" PK_HA_NAME,
                               "--set", "redis.command_timeout_ms=300",
                               "--set", "redis.connect_timeout_ms=300"};
        for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++)
            ins[i].extra[ins[i].nextra++] = extra[k];
        if (lg_mx_instance_start(x, &ins[i], err, errlen) < 0)
            goto out;
    }
    if (lg_admin_reset(ins[0].base, sku, 1, x->cfg->admin_token, err, errlen) < 0)
        goto out;
    /* the stock reached the replica: only what comes after is held back */
    const char *get[] = {"GET", stock_key};
    char v[32] = "";
    for (long long end = lc_now_ms() + lg_mx_bound(x, 5000);
         !(pk_redis_query(h.replica_port[0], 300, 2, get, v, sizeof v) == 1 && !strcmp(v, "1"));
         pk_sleep_ms(10)) {
        if (lc_now_ms() > end || lg_mx_stopped(x)) {
            snprintf(err, errlen, "the stock did not reach the replica");
            goto out;
        }
    }
    pk_ha_freeze(&h, 1);

    char lease[32] = "";
    if (mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED ||
        mode == LG_MODE_REDLOCK)
        snprintf(lease, sizeof lease, "&lease_ms=%lld", fo_lease_ms(x));
    snprintf(hd.url, sizeof hd.url, "%s/miaosha/%s?sku=%s&user=holder&work_ms=%d&wait_ms=0%s",
             ins[0].base, m, sku, FO_WORK_MS, lease);
    if (pthread_create(&t, NULL, hold, &hd) != 0) {
        snprintf(err, errlen, "holder thread");
        goto out;
    }
    started = 1;
    int has_lock = mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_REENTRANT;
    long long end = lc_now_ms() + lg_mx_bound(x, 5000);
    while (!(has_lock ? key_exists(h.master_port, lock_key) : stats_inflight(&ins[0]) > 0)) {
        if (lc_now_ms() > end || lg_mx_stopped(x)) {
            snprintf(c->outcome, sizeof c->outcome, "error");
            snprintf(c->reason, sizeof c->reason, "the holder never held the lock");
            rc = 0;
            goto out;
        }
        pk_sleep_ms(5);
    }
    pk_sleep_ms(50); /* its stock read (with the acquire, or right after) is done */

    pk_ha_freeze_front(&h, 1);
    long long t_kill = lc_now_ms();
    pk_kill(h.master_pid);
    h.master_pid = 0;
    int newport = -1;
    for (end = t_kill + lg_mx_bound(x, FO_FAILOVER_MAX_MS); lc_now_ms() < end && !lg_mx_stopped(x);
         pk_sleep_ms(10)) {
        newport = pk_ha_master_port(&h);
        if (newport > 0 && newport != h.addr_port)
            break;
    }
    if (newport <= 0 || newport == h.addr_port) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no failover within %lld ms",
                 lg_mx_bound(x, FO_FAILOVER_MAX_MS));
        rc = 0;
        goto out;
    }
    c->fault_ms = lc_now_ms() - t_kill;

    /* The buyer, on the other instance, until an answer that is not 503. */
    char url[512];
    snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=buyer&work_ms=0&wait_ms=0%s", ins[1].base,
             m, sku, lease);
    long long answer_ms; /* kill -> the buyer's last answer, whatever it was */
    long bst = lg_mx_buy_until_served(x, c, url, t_kill,
                                      t_kill + lg_mx_bound(x, FO_FAILOVER_MAX_MS), &answer_ms);
    pthread_join(t, NULL);
    started = 0;
    c->requests++;
    if (hd.status == 200)
        c->ok++;
    c->lock_lost = hd.lost ? 1 : 0;
    /* The buyer's answer came while the holder still held (it had not
     * answered yet): what the cell is about, 200 beside the holder (the
     * lock lost) or 429 (the lock kept). */
    int buyer_first = bst != 0 && bst != 503 && t_kill + answer_ms < hd.answered;

    lg_audit a;
    if (lg_mx_audit_one(c, ins[1].base, sku, &a) != 0) {
        rc = 0;
        goto out;
    }
    /* The buyer's time is that of its last answer, the 429 of a lock kept
     * as well as the 200 of a lock lost (resume_ms, the CSV's "resume",
     * counts a 200 only and stays -1 otherwise: never print that). */
    char buyer[96];
    lg_mx_buyer_text(buyer, sizeof buyer, bst, answer_ms);
    snprintf(c->reason, sizeof c->reason,
             "sold %lld of 1; failover %lld ms; %s (%llu x 503)%s; holder %ld%s%s",
             (long long)a.sold, (long long)c->fault_ms, buyer, (unsigned long long)c->n503,
             buyer_first ? ", while the holder held" : " — not before the holder answered",
             hd.status, hd.error[0] ? " " : "", hd.error);
    rc = 0;
out:
    if (started) {
        pk_ha_freeze_front(&h, 0);
        pthread_join(t, NULL);
    }
    for (int i = 0; i < 2; i++)
        lg_mx_instance_stop(&ins[i]);
    pk_ha_stop(&h);
    return rc;
}
