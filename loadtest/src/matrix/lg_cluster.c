/* lg_cluster.c — the Redis Cluster scenarios (lg_cluster.h).
 *
 * cluster-failover, per mode, on a cluster of its own (3 masters, 3
 * replicas, cluster-node-timeout 1000 ms: pk_cluster.h) and two instances
 * (the holder's and the buyer's) that know it by its seeds. Stock 1 on a
 * SKU of master A, copied to A's replica R; then, each step waited for:
 *   1. R's replication is cut for good: every node's replicas authenticate
 *      as the ACL user "repl" (masteruser), and A deletes that user, which
 *      closes R's link and refuses every reconnection (WRONGPASS), while
 *      clients, on the default user, go on. From here on A's writes never
 *      reach R — by construction, not by a race against the replication
 *      stream (a frozen or sleeping replica still reads what its socket
 *      buffered before the crash);
 *   2. the holder, a stepped purchase (?step=1: never pipelined, each
 *      stage its own round trip), is told to take its lock: it holds it on
 *      A, and only there;
 *   3. A is SIGKILLed; the cluster promotes R (cluster-replica-validity-
 *      factor 0: a replica whose link is down still stands), which has the
 *      stock and no lock;
 *   4. the holder is told to read: its connection to A is gone, the
 *      refused reconnection makes its slot map refresh from another node,
 *      and the read (WATCH epoch, GET stock) goes to R: stock 1;
 *   5. the buyer buys on the other instance: R never had the holder's
 *      lock, so the buyer takes one and sells the unit;
 *   6. the holder is told to finish: it commits stock 0 and its order on R
 *      — a holder whose lock the new master never had. Sold 2 of 1.
 * The Sentinel failover's lesson, on the cluster: a lock that had not
 * reached the replica is lost with its master. lua has no point between
 * its read and its write: its stepped purchase runs whole at step 6, after
 * the buyer's, and finds the stock gone. redlock holds its lock on the
 * matrix's lock masters, independent of the cluster (never the masters of
 * one cluster: docs/locks.md), so the buyer finds it held. The cell's
 * failover time is kill -> the surviving nodes name R for the slot.
 *
 * reshard, every mode on one cluster and one instance: per mode a SKU of
 * its own, stock reset, then the slot moved to another master as
 * redis-cli --cluster reshard does it: SETSLOT IMPORTING / MIGRATING, one
 * key MIGRATEd (the slot's keys are now on two nodes), the burst started,
 * then the other keys one by one every RS_STEP_MS while it buys (the keys
 * the burst creates on the way too), then SETSLOT NODE on every master.
 * The burst therefore meets, by construction, the split slot (an acquire
 * whose lock key is not on the old node while its read's keys are: sent
 * again whole once they are together; TRYAGAIN for a script), ASK for the
 * moved keys, and MOVED once the slot is gone. The cell is the burst's
 * audit (oversold, undersold, every 200's order in the books), the
 * instance's redirect and retry counts (GET /stats) beside it.
 */
#include "lg_cluster.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "lg_admin.h"
#include "lg_json.h"
#include "lg_mx_cell.h"
#include "pk_cluster.h"
#include "pk_proc.h"
#include "pk_redis.h"

#define CF_FAILOVER_MAX_MS 15000
#define CF_STEP_WAIT_MS 10000
#define CF_LEASE_MS 60000 /* no lease may run out in the cell: the failover loses the lock */
#define RS_STEP_MS 15     /* between two keys moved */
#define REPL_PASS "mx-repl-pass"

const char *lg_cluster_expected(lg_scenario s, lg_mode mode)
{
    if (s == LG_SCEN_RESHARD)
        /* a moving slot changes where the commands go, not what the lock
         * guarantees: the race's expectations */
        return mode == LG_MODE_NONE ? "oversell" : "exact";
    /* cluster-failover: the Sentinel failover column's, for the same
     * reasons (lg_failover.c): redlock's lock is on independent masters,
     * lua has no lock to lose */
    return mode == LG_MODE_LUA || mode == LG_MODE_REDLOCK ? "exact" : "oversell";
}

static int cluster_start(mctx *x, pk_cluster *cl, const char *dir, int acl, char *err,
                         size_t errlen)
{
    static const char *const acl_args[] = {"--user",  "repl",
                                           "on",      ">" REPL_PASS,
                                           "~*",      "&*",
                                           "+@all",   "--masteruser",
                                           "repl",    "--masterauth",
                                           REPL_PASS, "--cluster-replica-validity-factor",
                                           "0",       NULL};
    pk_cluster_opts o;
    pk_cluster_opts_init(&o);
    o.server = x->cfg->redis_server;
    o.dir = dir;
    o.args = acl ? acl_args : NULL;
    o.timeout_ms = (int)lg_mx_bound(x, 30000);
    o.stop = x->cfg->stop;
    return pk_cluster_start(cl, &o, err, errlen);
}

/* A SKU of prefix whose slot the master at port serves now. */
static int sku_on(const pk_cluster *cl, int port, const char *prefix, char *sku, size_t len)
{
    for (int i = 0; i < 100000; i++) {
        snprintf(sku, len, "%s-%d", prefix, i);
        if (pk_cluster_slot_port(cl, lc_key_slot(sku, strlen(sku))) == port)
            return 0;
    }
    return -1;
}

/* "redis.cluster_nodes=127.0.0.1:p,..." of the masters as created. */
static void seeds_set(const pk_cluster *cl, char *buf, size_t len)
{
    snprintf(buf, len, "redis.cluster_nodes=");
    for (int i = 0; i < cl->masters; i++)
        lg_addf(buf, len, "%s127.0.0.1:%d", i ? "," : "", cl->port[i]);
}

/* GET key on the replica at port (READONLY first): 1 with the value in
 * out, 0 nil, -1 no answer. */
static int replica_get(int port, const char *key, char *out, size_t len)
{
    redisContext *ctx = pk_redis_connect(port, 1000);
    if (!ctx)
        return -1;
    redisReply *ro = redisCommand(ctx, "READONLY");
    redisReply *r = ro ? redisCommand(ctx, "GET %s", key) : NULL;
    int rc = !r ? -1 : r->type == REDIS_REPLY_STRING ? 1 : r->type == REDIS_REPLY_NIL ? 0 : -1;
    if (rc == 1)
        snprintf(out, len, "%s", r->str);
    if (ro)
        freeReplyObject(ro);
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return rc;
}

/* --- stepped purchases ---------------------------------------------------- */

/* The step of user on sku at base (GET /steps?sku=): its id, and its stage
 * when paused ("" while it moves). 0, or -1 when not listed. */
static int step_of(const char *base, const char *sku, const char *user, const char *token, long *id,
                   char *stage, size_t len)
{
    char url[256], e[256], *body = NULL;
    long st = 0;
    snprintf(url, sizeof url, "%s/steps?sku=%s", base, sku);
    int rc = -1;
    if (lg_http_call("GET", url, token, NULL, 2000, &st, &body, e, sizeof e) == 0 && st == 200 &&
        body) {
        cJSON *j = lg_json_parse(body, strlen(body));
        const cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(j, "steps"))
        {
            const cJSON *u = cJSON_GetObjectItemCaseSensitive(s, "user");
            if (!cJSON_IsString(u) || strcmp(u->valuestring, user) != 0)
                continue;
            const cJSON *i = cJSON_GetObjectItemCaseSensitive(s, "id");
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(s, "stage");
            const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "paused");
            *id = cJSON_IsNumber(i) ? (long)i->valuedouble : -1;
            snprintf(stage, len, "%s", cJSON_IsTrue(p) && cJSON_IsString(g) ? g->valuestring : "");
            rc = *id > 0 ? 0 : -1;
        }
        cJSON_Delete(j);
    }
    free(body);
    return rc;
}

/* Lets step id go on (what: "next" or "run") and, for next, waits until it
 * pauses at stage want (bounded): 0, or -1 with why in err. */
static int step_go(mctx *x, const char *base, const char *sku, const char *user, long id,
                   const char *what, const char *want, char *err, size_t errlen)
{
    char url[256], e[256];
    long st = 0;
    snprintf(url, sizeof url, "%s/steps/%ld/%s?wait_ms=%lld", base, id, what,
             lg_mx_bound(x, CF_STEP_WAIT_MS));
    if (lg_http_call("POST", url, x->cfg->admin_token, NULL,
                     (long)lg_mx_bound(x, CF_STEP_WAIT_MS) + 5000, &st, NULL, e, sizeof e) != 0) {
        snprintf(err, errlen, "%s of step %ld: %.200s", what, id, e);
        return -1;
    }
    if (!want)
        return 0;
    char stage[32] = "";
    long sid = 0;
    for (long long end = lc_now_ms() + lg_mx_bound(x, CF_STEP_WAIT_MS);
         !lg_mx_stopped(x) && lc_now_ms() < end; pk_sleep_ms(20))
        if (step_of(base, sku, user, x->cfg->admin_token, &sid, stage, sizeof stage) == 0 &&
            !strcmp(stage, want))
            return 0;
    snprintf(err, errlen, "the holder's step did not pause at %s (at \"%s\")", want, stage);
    return -1;
}

typedef struct holder {
    char url[512];
    const char *token;
    long status;
    char error[32];
    int lost;
} holder;

static void *hold(void *arg)
{
    holder *h = arg;
    char *body = NULL, e[256], oid[64];
    int deleted = 0;
    if (lg_http_call("POST", h->url, h->token, NULL, 120000, &h->status, &body, e, sizeof e) != 0)
        h->status = 0;
    if (body)
        lg_parse_purchase(body, strlen(body), oid, h->error, &h->lost, &deleted);
    free(body);
    return NULL;
}

/* --- cluster-failover ---------------------------------------------------- */

static void cell_error(lg_cell *c, const char *why)
{
    snprintf(c->outcome, sizeof c->outcome, "error");
    snprintf(c->reason, sizeof c->reason, "%.300s", why);
}

int lg_cluster_failover_cell(mctx *x, lg_cell *c, lg_mode mode, char *err, size_t errlen)
{
    const char *m = lg_mode_names[mode];
    const char *token = x->cfg->admin_token;
    c->ran = 1;
    c->stock = 1;
    c->recovery_ms = c->freed_ms = c->failfast_ms = c->reconnect_ms = -1;
    c->fault_ms = c->resume_ms = -1;
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/cluster-failover-%s", x->logdir, m);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    pk_cluster cl;
    if (cluster_start(x, &cl, dir, 1, err, errlen) < 0)
        return -1;
    int victim = cl.port[0];
    char sku[64], prefix[48], seeds[160], why[300];
    snprintf(prefix, sizeof prefix, "mx-cfo-%s", m);
    instance ins[2];
    memset(ins, 0, sizeof ins);
    holder hd;
    memset(&hd, 0, sizeof hd);
    hd.token = token;
    pthread_t t;
    int started = 0, rc = -1;
    if (sku_on(&cl, victim, prefix, sku, sizeof sku) < 0) {
        snprintf(err, errlen, "no SKU on the first master");
        goto out;
    }
    int slot = lc_key_slot(sku, strlen(sku)), replica = pk_cluster_replica_of(&cl, victim);
    if (replica <= 0) {
        snprintf(err, errlen, "the first master has no replica");
        goto out;
    }
    seeds_set(&cl, seeds, sizeof seeds);
    for (int i = 0; i < 2; i++) {
        snprintf(ins[i].id, sizeof ins[i].id, "mx-cfo-%s-%s", i ? "buyer" : "holder", m);
        const char *extra[] = {"--set", seeds,
                               "--set", "faults.enabled=true",
                               "--set", "redis.command_timeout_ms=1000",
                               "--set", "redis.connect_timeout_ms=300"};
        for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++)
            ins[i].extra[ins[i].nextra++] = extra[k];
        if (lg_mx_instance_start(x, &ins[i], err, errlen) < 0)
            goto out;
    }
    if (lg_admin_reset(ins[0].base, sku, 1, token, err, errlen) < 0)
        goto out;
    /* 1. the stock on the replica, then the replica's link cut for good */
    char stock_key[128], v[32] = "";
    snprintf(stock_key, sizeof stock_key, "miaosha:{%s}:stock", sku);
    for (long long end = lc_now_ms() + lg_mx_bound(x, 5000);
         !(replica_get(replica, stock_key, v, sizeof v) == 1 && !strcmp(v, "1")); pk_sleep_ms(10))
        if (lc_now_ms() > end || lg_mx_stopped(x)) {
            snprintf(err, errlen, "the stock did not reach the replica");
            goto out;
        }
    const char *del[] = {"ACL", "DELUSER", "repl"};
    char out1[32];
    if (pk_redis_query(victim, 1000, 3, del, out1, sizeof out1) != 1 || strcmp(out1, "1") != 0) {
        snprintf(err, errlen, "ACL DELUSER repl on the master: %s", out1);
        goto out;
    }
    /* 2. the holder takes its lock (lua: its step waits at start) */
    char lease[32] = "";
    if (mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED ||
        mode == LG_MODE_REDLOCK)
        snprintf(lease, sizeof lease, "&lease_ms=%d", CF_LEASE_MS);
    snprintf(hd.url, sizeof hd.url, "%s/miaosha/%s?sku=%s&user=holder&work_ms=0&wait_ms=0&step=1%s",
             ins[0].base, m, sku, lease);
    if (pthread_create(&t, NULL, hold, &hd) != 0) {
        snprintf(err, errlen, "holder thread");
        goto out;
    }
    started = 1;
    long id = -1;
    char stage[32] = "";
    for (long long end = lc_now_ms() + lg_mx_bound(x, 5000);
         step_of(ins[0].base, sku, "holder", token, &id, stage, sizeof stage) != 0 ||
         strcmp(stage, "start") != 0;
         pk_sleep_ms(10))
        if (lc_now_ms() > end || lg_mx_stopped(x)) {
            cell_error(c, "the holder's step never paused at start");
            rc = 0;
            goto out;
        }
    if (mode != LG_MODE_LUA &&
        step_go(x, ins[0].base, sku, "holder", id, "next", "locked", why, sizeof why) < 0) {
        cell_error(c, why);
        rc = 0;
        goto out;
    }
    /* 3. the master dies; the replica, without the lock, is promoted */
    int vi = 0;
    for (int i = 0; i < cl.n; i++)
        if (cl.port[i] == victim)
            vi = i;
    long long t_kill = lc_now_ms();
    pk_cluster_kill(&cl, vi);
    int now = -1;
    for (long long end = t_kill + lg_mx_bound(x, CF_FAILOVER_MAX_MS);
         lc_now_ms() < end && !lg_mx_stopped(x); pk_sleep_ms(20))
        if ((now = pk_cluster_slot_port(&cl, slot)) == replica)
            break;
    if (now != replica) {
        snprintf(why, sizeof why, "no failover within %lld ms", lg_mx_bound(x, CF_FAILOVER_MAX_MS));
        cell_error(c, why);
        rc = 0;
        goto out;
    }
    c->fault_ms = lc_now_ms() - t_kill;
    /* 4. the holder reads, on the promoted replica */
    if (mode != LG_MODE_LUA &&
        step_go(x, ins[0].base, sku, "holder", id, "next", "read", why, sizeof why) < 0) {
        cell_error(c, why);
        rc = 0;
        goto out;
    }
    /* 5. the buyer, on the other instance, until an answer that is not 503 */
    char url[512];
    snprintf(url, sizeof url, "%s/miaosha/%s?sku=%s&user=buyer&work_ms=0&wait_ms=0%s", ins[1].base,
             m, sku, lease);
    long long answer_ms;
    long bst = lg_mx_buy_until_served(x, c, url, t_kill,
                                      lc_now_ms() + lg_mx_bound(x, CF_FAILOVER_MAX_MS), &answer_ms);
    /* 6. the holder finishes */
    if (step_go(x, ins[0].base, sku, "holder", id, "run", NULL, why, sizeof why) < 0) {
        cell_error(c, why);
        rc = 0;
        goto out;
    }
    pthread_join(t, NULL);
    started = 0;
    c->requests++;
    if (hd.status == 200)
        c->ok++;
    c->lock_lost = hd.lost ? 1 : 0;
    lg_audit a;
    if (lg_mx_audit_one(c, ins[1].base, sku, &a) != 0) {
        rc = 0;
        goto out;
    }
    char buyer[96];
    lg_mx_buyer_text(buyer, sizeof buyer, bst, answer_ms);
    snprintf(c->reason, sizeof c->reason,
             "sold %lld of 1; failover %lld ms (replica's link cut first); %s (%llu x 503); "
             "holder %ld%s%s, %s",
             (long long)a.sold, (long long)c->fault_ms, buyer, (unsigned long long)c->n503,
             hd.status, hd.error[0] ? " " : "", hd.error,
             mode == LG_MODE_LUA ? "its script after the buyer's"
                                 : "locked on the old master, read and wrote on the new");
    rc = 0;
out:
    for (int i = 0; i < 2; i++)
        lg_mx_instance_stop(&ins[i]); /* a paused step ends with its instance */
    if (started)
        pthread_join(t, NULL);
    pk_cluster_stop(&cl);
    return rc;
}

/* --- reshard ---------------------------------------------------------------- */

/* The instance's router counts from GET /stats: moved + ask (*redir) and
 * retries. 0, or -1. */
static int router_counts(const char *base, long long *redir, long long *retries)
{
    char url[256], e[256], *body = NULL;
    long st = 0;
    snprintf(url, sizeof url, "%s/stats", base);
    int rc = -1;
    if (lg_http_call("GET", url, NULL, NULL, 2000, &st, &body, e, sizeof e) == 0 && body) {
        cJSON *j = lg_json_parse(body, strlen(body));
        const cJSON *cl = cJSON_GetObjectItemCaseSensitive(j, "cluster");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(cl, "redirects");
        const cJSON *mv = cJSON_GetObjectItemCaseSensitive(r, "moved");
        const cJSON *ak = cJSON_GetObjectItemCaseSensitive(r, "ask");
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(cl, "retries");
        if (cJSON_IsNumber(mv) && cJSON_IsNumber(ak) && cJSON_IsNumber(rt)) {
            *redir = (long long)(mv->valuedouble + ak->valuedouble);
            *retries = (long long)rt->valuedouble;
            rc = 0;
        }
        cJSON_Delete(j);
    }
    free(body);
    return rc;
}

typedef struct burst_job {
    lg_run_cfg rc;
    lg_cell *c;
    lg_run_result *r;
    char err[256];
} burst_job;

static void *run_burst(void *arg)
{
    burst_job *b = arg;
    b->r = lg_mx_run_burst(&b->rc, b->c, b->err, sizeof b->err);
    return NULL;
}

/* The burst's verdict, as the race's (lg_matrix.c): oversold, then the
 * books (undersold, lost or doubled acknowledgements), then exactly the
 * stock. */
static void classify(lg_cell *c, const lg_run_result *r, long long redir, long long retries,
                     int keys)
{
    char moved[120];
    snprintf(moved, sizeof moved, "%d keys moved under it; %lld redirects, %lld retries", keys,
             redir, retries);
    if (!r->audited) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no audit: %.200s", r->audit_error);
    } else if (c->oversold > 0) {
        snprintf(c->outcome, sizeof c->outcome, "oversell");
        snprintf(c->reason, sizeof c->reason, "sold %lld of %lld (+%lld oversold); %s",
                 (long long)c->sold, (long long)c->stock, (long long)c->oversold, moved);
    } else if (c->undersold || c->dup || c->acked_lost || c->acked_over_stock || r->ok_without_id) {
        snprintf(c->outcome, sizeof c->outcome, "unsafe");
        snprintf(c->reason, sizeof c->reason,
                 "undersold %lld, duplicate ids %llu, acked_lost %llu, acked_over_stock %llu; %s",
                 (long long)c->undersold, (unsigned long long)c->dup,
                 (unsigned long long)c->acked_lost, (unsigned long long)c->acked_over_stock, moved);
    } else if (c->sold == c->stock && c->stock_left == 0) {
        snprintf(c->outcome, sizeof c->outcome, "exact");
        snprintf(c->reason, sizeof c->reason, "sold exactly %lld, every 200 in the books; %s",
                 (long long)c->sold, moved);
    } else {
        snprintf(c->outcome, sizeof c->outcome, "short");
        snprintf(c->reason, sizeof c->reason, "sold %lld of %lld: %llu errors; %s",
                 (long long)c->sold, (long long)c->stock, (unsigned long long)c->errors, moved);
    }
    if (strcmp(c->outcome, "error") != 0 && redir + retries == 0) {
        /* the move must have met the burst: by construction it does */
        snprintf(c->outcome, sizeof c->outcome, "error");
        lg_addf(c->reason, sizeof c->reason, " — no redirect at all: the move missed the burst");
    }
}

/* One reshard cell: mode m's SKU moved from master `from` to `to` under a
 * burst on in. 0, or -1 with err (the cell could not run). */
static int reshard_cell(mctx *x, pk_cluster *cl, instance *in, lg_cell *c, lg_mode mode, int from,
                        int to, char *err, size_t errlen)
{
    const char *m = lg_mode_names[mode];
    int q = x->cfg->quick;
    char sku[64], prefix[48];
    snprintf(prefix, sizeof prefix, "mx-reshard-%s", m);
    if (sku_on(cl, from, prefix, sku, sizeof sku) < 0) {
        snprintf(err, errlen, "no SKU on 127.0.0.1:%d", from);
        return -1;
    }
    int slot = lc_key_slot(sku, strlen(sku));
    int64_t stock = q ? 20 : 50;
    if (lg_admin_reset(in->base, sku, stock, x->cfg->admin_token, err, errlen) < 0)
        return -1;
    long long r0 = 0, t0 = 0, r1 = 0, t1 = 0;
    (void)router_counts(in->base, &r0, &t0);
    int src = 0;
    if (pk_cluster_migrate_begin(cl, slot, to, &src, err, errlen) < 0)
        return -1;
    int keys = pk_cluster_migrate_keys(slot, src, to, 1, err, errlen);
    if (keys < 0)
        return -1;
    burst_job b;
    memset(&b, 0, sizeof b);
    lg_run_cfg_init(&b.rc);
    b.rc.mode = m;
    b.rc.sku = sku;
    b.rc.requests = (uint64_t)stock * 3;
    b.rc.concurrency = 16;
    b.rc.stock = -1; /* reset above: a PUT /stock would meet the split slot */
    b.rc.work_ms = 5;
    b.rc.wait_ms = 10000;
    b.rc.lease_ms = mode == LG_MODE_SETNX || mode == LG_MODE_TOKEN || mode == LG_MODE_FENCED ||
                            mode == LG_MODE_REDLOCK
                        ? 10000
                        : -1;
    b.rc.deadline_ms = lg_mx_bound(x, 60000);
    b.rc.stop = x->cfg->stop;
    b.rc.admin_token = x->cfg->admin_token;
    b.c = c;
    if (lg_mx_targets(&b.rc, in, 1, err, errlen) < 0)
        return -1;
    pthread_t t;
    if (pthread_create(&t, NULL, run_burst, &b) != 0) {
        snprintf(err, errlen, "burst thread");
        return -1;
    }
    /* the rest of the keys, one by one, while it buys; then the slot */
    int rc = 0, empty = 0;
    while (empty < 3 && !lg_mx_stopped(x)) {
        pk_sleep_ms(RS_STEP_MS);
        int n = pk_cluster_migrate_keys(slot, src, to, 1, err, errlen);
        if (n < 0) {
            rc = -1;
            break;
        }
        keys += n;
        empty = n == 0 ? empty + 1 : 0;
    }
    if (rc == 0 && pk_cluster_migrate_end(cl, slot, src, to, err, errlen) < 0)
        rc = -1;
    pthread_join(t, NULL);
    if (rc < 0 || !b.r) {
        if (!b.r && rc == 0)
            snprintf(err, errlen, "%s", b.err);
        free(b.r);
        return -1;
    }
    (void)router_counts(in->base, &r1, &t1);
    classify(c, b.r, r1 - r0, t1 - t0, keys);
    free(b.r);
    return 0;
}

int lg_reshard_run(mctx *x, lg_scenario s, lg_cell *cells[LG_NMODES], char *err, size_t errlen)
{
    (void)s;
    char dir[PATH_MAX + 32], seeds[160];
    snprintf(dir, sizeof dir, "%s/reshard", x->logdir);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    pk_cluster cl;
    if (cluster_start(x, &cl, dir, 0, err, errlen) < 0)
        return -1;
    seeds_set(&cl, seeds, sizeof seeds);
    instance in;
    memset(&in, 0, sizeof in);
    snprintf(in.id, sizeof in.id, "mx-reshard");
    const char *extra[] = {"--set", seeds};
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++)
        in.extra[in.nextra++] = extra[k];
    int rc = -1, k = 0;
    if (lg_mx_instance_start(x, &in, err, errlen) < 0)
        goto out;
    for (lg_mode m = 0; m < LG_NMODES; m++, k++) {
        lg_cell *c = cells[m];
        if (!c)
            continue;
        if (lg_mx_stopped(x)) {
            snprintf(err, errlen, "interrupted");
            goto out;
        }
        memset(c, 0, sizeof *c);
        c->ran = 1;
        c->recovery_ms = c->freed_ms = c->failfast_ms = c->reconnect_ms = -1;
        c->fault_ms = c->resume_ms = -1;
        char e[256];
        /* from one master to the next, round the three */
        if (reshard_cell(x, &cl, &in, c, m, cl.port[k % 3], cl.port[(k + 1) % 3], e, sizeof e) <
            0) {
            snprintf(c->outcome, sizeof c->outcome, "error");
            snprintf(c->reason, sizeof c->reason, "%.300s", e);
        }
    }
    rc = 0;
out:
    lg_mx_instance_stop(&in);
    pk_cluster_stop(&cl);
    return rc;
}
