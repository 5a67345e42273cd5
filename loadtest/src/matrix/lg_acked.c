/* lg_acked.c — the acknowledged-write scenarios (lg_acked.h): a 200 that a
 * failover takes away.
 *
 * The window: Sentinel promotes replica B while the old master M still
 * takes writes — a manual SENTINEL FAILOVER, or a master paused past
 * down-after-milliseconds and resumed during the failover — and replica A
 * follows M until Sentinel reconfigures it, about a second later. Every
 * write M takes meanwhile is answered WAIT 1 by A, then lost when A
 * resyncs from B. One topology (pk_ha.h) serves every mode of the
 * scenario at once, each on SKUs of its own: a master, replicas A and B
 * (B's replica-priority 10 against A's 100, so Sentinel promotes B), three
 * Sentinels (down-after 500 ms), and two instances asking the Sentinels
 * for the master, one with redis.wait_replicas=1 and one with all.
 *
 * Made certain, not lucky: B's link to M runs through a forwarder that the
 * scenario freezes before the failover (pk_ha_freeze_link), so every write
 * from then on is on M and A only — as every write in the real window is.
 *
 *   1. every buyer (a mode on an instance) buys one unit of its stock of
 *      AK_STOCK, and the scenario waits until B has every sale; that 200
 *      must survive everywhere;
 *   2. B's link is frozen; each buyer buys AK_BEFORE more: with 1, A
 *      answers the WAIT (200); with all, B never does (503
 *      not_replicated, the order on M only);
 *   3. the failover: manual-failover sends SENTINEL FAILOVER to the first
 *      Sentinel; resume-failover SIGSTOPs M, waits for +selected-slave (the
 *      failover under way) and SIGCONTs M, which then takes writes again
 *      until A is reconfigured. The buyers go on buying all along, and
 *      AK_AFTER_MS past the first +switch-master;
 *   4. the audit through each instance (on the new master): every 200's
 *      order id must be in the order list (acked_lost counts those that
 *      are not), and no more 200s than the stock (acked_over_stock).
 *
 * With 1 the orders of step 2 (and those of the window) are gone: at least
 * AK_BEFORE per buyer; with all none of its 200s is. Meanwhile a MONITOR
 * on M records every data write it executes, and a subscriber on every
 * Sentinel the first +switch-master: the writes M still took from the
 * instances after that announcement (late_writes, late_write_ms) are how
 * long the service kept writing to the old master. The instances run with
 * purchase.local_sold_out=false, so a sold-out SKU's buyers still send
 * their scripts and lock commands and a late write cannot hide.
 */
#include "lg_acked.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "lg_admin.h"
#include "pk_ha.h"
#include "pk_proc.h"
#include "pk_redis.h"

#define AK_DOWN_AFTER_MS 500
/* Sentinel's failover-timeout is also how long it leaves a replica that
 * follows another address than the master's (the link's forwarder) before
 * it repoints it (+fix-slave-config): longer than the cell. */
#define AK_FAILOVER_TIMEOUT_MS 60000
#define AK_STOCK 10
#define AK_BEFORE 3              /* purchases per buyer between the freeze and the failover */
#define AK_AFTER_MS 1000         /* the buyers buy on the new master at least this, */
#define AK_SOLD_OUT_MAX_MS 10000 /* ... and until the wait-1 SKUs sell out there */
#define AK_FOLLOW_MAX_MS 20000   /* the instances name the new master within this */
#define AK_FAILOVER_MAX_MS 15000
#define AK_PROMOTED 1 /* the replica Sentinel promotes (replica2): its link is frozen */
#define AK_MAX_EVENTS 100000
#define AK_BUYERS (2 * LG_NMODES)

const char *lg_acked_expected(lg_mode mode)
{
    /* Every mode writes its sale on the master and WAITs the same way (the
     * lock modes after their commit, lua after its script): the lock plays
     * no part in whether an acknowledged sale survives. */
    (void)mode;
    return "lost-at-1";
}

static int64_t wall_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

typedef struct ak_run ak_run;

/* What the buyers do: step 2's purchases, then wait; buy through the
 * failover; wait while the new master's replica resyncs; buy on it until
 * sold out; stop. */
enum { PH_BEFORE, PH_FAILOVER, PH_HOLD, PH_AFTER, PH_STOP };

typedef struct buyer {
    ak_run *run;
    const instance *in;
    lg_mode mode;
    int all; /* on the wait_replicas=all instance */
    char sku[64];
    char url[400]; /* the purchase URL but its user */
    lg_idset acked;
    uint64_t requests, ok, n503, not_replicated;
    _Atomic int sold_out_after;   /* a 409 sold_out once the instances followed */
    int64_t late_writes, late_us; /* writes M took after the switch; the last one's µs after */
    pthread_t t;
    int started;
} buyer;

struct ak_run {
    mctx *x;
    lg_scenario scen;
    buyer b[AK_BUYERS];
    int nb;
    _Atomic int phase; /* PH_* */
    _Atomic int before_done;
    int sentinel_port[PK_HA_SENTINELS];
    int master_port;
    _Atomic int64_t switch_us, switch_ms, selected_us; /* wall µs; lc_now_ms */
    _Atomic int new_port;                              /* the promoted master's */
    _Atomic int stop_threads;
    struct ev {
        int64_t us;
        int who;
    } * ev; /* the data writes M executed, by buyer (the monitor's own until joined) */
    size_t nev;
    int monitor_ok;
};

/* One purchase: the status (0: no HTTP answer). */
static long buy(buyer *b, int i)
{
    char url[512], oid[64] = "", code[32] = "", *body = NULL, e[256];
    int lost = 0, deleted = 0;
    long st = 0;
    snprintf(url, sizeof url, "%s&user=%s-%d", b->url, b->all ? "all" : "one", i);
    b->requests++;
    if (lg_http_call("POST", url, NULL, NULL, 5000, &st, &body, e, sizeof e) != 0)
        st = 0;
    if (body)
        lg_parse_purchase(body, strlen(body), oid, code, &lost, &deleted);
    if (st == 200 && oid[0])
        b->ok += lg_idset_add(&b->acked, oid, strlen(oid)) == 0;
    if (st == 503) {
        b->n503++;
        b->not_replicated += !strcmp(code, "not_replicated");
    }
    free(body);
    return st;
}

static void *buyer_main(void *arg)
{
    buyer *b = arg;
    ak_run *r = b->run;
    int i = 1; /* 0 was step 1's */
    for (; i <= AK_BEFORE; i++)
        buy(b, i);
    atomic_fetch_add(&r->before_done, 1);
    for (int ph; (ph = atomic_load(&r->phase)) != PH_STOP;) {
        if (ph == PH_FAILOVER || ph == PH_AFTER) {
            if (buy(b, i++) == 409 && ph == PH_AFTER)
                atomic_store(&b->sold_out_after, 1);
            pk_sleep_ms(5);
        } else {
            pk_sleep_ms(2);
        }
    }
    return NULL;
}

/* --- the Sentinels' announcements ---------------------------------------- */

static redisContext *connect_to(int port)
{
    struct timeval tv = {0, 500000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

/* A pub/sub "message" reply on channel ch, or NULL. */
static const char *message_on(const redisReply *m, const char *ch)
{
    if (m->type != REDIS_REPLY_ARRAY || m->elements != 3 ||
        m->element[0]->type != REDIS_REPLY_STRING || strcmp(m->element[0]->str, "message") ||
        m->element[1]->type != REDIS_REPLY_STRING || strcmp(m->element[1]->str, ch) ||
        m->element[2]->type != REDIS_REPLY_STRING)
        return NULL;
    return m->element[2]->str;
}

/* Subscribed on every Sentinel: the first +switch-master and +selected-slave. */
static void *watch_main(void *arg)
{
    ak_run *r = arg;
    redisContext *c[PK_HA_SENTINELS] = {NULL};
    struct pollfd pf[PK_HA_SENTINELS];
    for (int i = 0; i < PK_HA_SENTINELS; i++) {
        c[i] = connect_to(r->sentinel_port[i]);
        redisReply *ok = c[i] ? redisCommand(c[i], "SUBSCRIBE +switch-master +selected-slave")
                              : NULL;
        if (ok)
            freeReplyObject(ok);
        pf[i].fd = c[i] && ok ? c[i]->fd : -1;
        pf[i].events = POLLIN;
    }
    while (!atomic_load(&r->stop_threads)) {
        if (poll(pf, PK_HA_SENTINELS, 20) <= 0)
            continue;
        for (int i = 0; i < PK_HA_SENTINELS; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & POLLIN))
                continue;
            int64_t now = wall_us();
            void *m = NULL;
            if (redisBufferRead(c[i]) != REDIS_OK) {
                pf[i].fd = -1;
                continue;
            }
            while (redisGetReplyFromReader(c[i], &m) == REDIS_OK && m) {
                const char *p = message_on(m, "+switch-master");
                int64_t zero = 0;
                int np = 0;
                if (p && sscanf(p, PK_HA_NAME " %*s %*d %*s %d", &np) == 1 &&
                    atomic_compare_exchange_strong(&r->switch_us, &zero, now)) {
                    atomic_store(&r->switch_ms, lc_now_ms());
                    atomic_store(&r->new_port, np);
                }
                zero = 0;
                if (message_on(m, "+selected-slave"))
                    atomic_compare_exchange_strong(&r->selected_us, &zero, now);
                freeReplyObject(m);
                m = NULL;
            }
        }
    }
    for (int i = 0; i < PK_HA_SENTINELS; i++)
        if (c[i])
            redisFree(c[i]);
    return NULL;
}

/* --- what the old master executed ----------------------------------------- */

static int is_data_write(const char *cmd, size_t n)
{
    static const char *const w[] = {"set",     "setnx",  "del",    "unlink",  "incr",
                                    "incrby",  "decr",   "decrby", "rpush",   "lpush",
                                    "pexpire", "expire", "hset",   "hincrby", "hdel",
                                    "evalsha", "eval",   "getdel", "psetex",  "pexpireat"};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (strlen(w[i]) == n && !strncasecmp(cmd, w[i], n))
            return 1;
    return 0;
}

/* One MONITOR line: `1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" ... "miaosha:{sku}:stock" ...`.
 * Records a data write of one of the buyers' SKUs; a command run inside a
 * script ("[0 lua]") is its script's, already counted. */
static void on_line(ak_run *r, const char *s)
{
    char *end = NULL;
    long long sec = strtoll(s, &end, 10);
    if (!end || *end != '.')
        return;
    long long usec = strtoll(end + 1, &end, 10);
    const char *addr = strchr(end, '[');
    const char *close = addr ? strchr(addr, ']') : NULL;
    if (!close || strstr(addr, " lua]") == close - 4)
        return;
    const char *cmd = strchr(close, '"');
    const char *cmd_end = cmd ? strchr(cmd + 1, '"') : NULL;
    if (!cmd_end || !is_data_write(cmd + 1, (size_t)(cmd_end - cmd - 1)))
        return;
    const char *open = strchr(cmd_end, '{');
    const char *shut = open ? strchr(open, '}') : NULL;
    if (!shut)
        return;
    for (int i = 0; i < r->nb; i++) {
        size_t n = strlen(r->b[i].sku);
        if ((size_t)(shut - open - 1) == n && !strncmp(open + 1, r->b[i].sku, n)) {
            if (r->nev < AK_MAX_EVENTS)
                r->ev[r->nev++] = (struct ev){sec * 1000000 + usec, i};
            return;
        }
    }
}

static void *monitor_main(void *arg)
{
    ak_run *r = arg;
    redisContext *c = connect_to(r->master_port);
    redisReply *ok = c ? redisCommand(c, "MONITOR") : NULL;
    r->monitor_ok = ok && ok->type == REDIS_REPLY_STATUS;
    if (ok)
        freeReplyObject(ok);
    struct pollfd pf = {r->monitor_ok ? c->fd : -1, POLLIN, 0};
    while (r->monitor_ok && !atomic_load(&r->stop_threads)) {
        if (poll(&pf, 1, 20) <= 0)
            continue;
        void *m = NULL;
        if (redisBufferRead(c) != REDIS_OK)
            break; /* a paused master resumes; a closed one ends the record */
        while (redisGetReplyFromReader(c, &m) == REDIS_OK && m) {
            const redisReply *rep = m;
            if (rep->type == REDIS_REPLY_STATUS)
                on_line(r, rep->str);
            freeReplyObject(m);
            m = NULL;
        }
    }
    if (c)
        redisFree(c);
    return NULL;
}

/* --- the cell -------------------------------------------------------------- */

static void no_times(lg_cell *c)
{
    c->recovery_ms = c->freed_ms = c->failfast_ms = c->reconnect_ms = c->resume_ms = -1;
    c->fault_ms = c->late_write_ms = -1;
}

static void fail_all(lg_cell *cells[LG_NMODES], const char *why)
{
    for (lg_mode m = 0; m < LG_NMODES; m++)
        if (cells[m]) {
            no_times(cells[m]);
            cells[m]->ran = 1;
            snprintf(cells[m]->outcome, sizeof cells[m]->outcome, "error");
            snprintf(cells[m]->reason, sizeof cells[m]->reason, "%.230s", why);
        }
}

/* Reads the buyer's order list through its instance; lost and beyond the
 * stock into *lost, *over. 0, or -1 with why. */
static int audit(buyer *b, lg_audit *a, int64_t *lost, int64_t *over, char *why, size_t len)
{
    lg_idset listed = {0};
    if (lg_admin_audit(b->in->base, b->sku, a, why, len) != 0 ||
        lg_admin_orders(b->in->base, b->sku, LG_ORDERS_LIST_MS, &listed, why, len) != 0) {
        lg_idset_free(&listed);
        return -1;
    }
    lg_idset_sort(&listed);
    lg_idset_sort(&b->acked);
    *lost = 0;
    for (size_t i = 0; i < b->acked.n; i++)
        *lost += !lg_idset_contains(&listed, b->acked.ids[i]);
    size_t distinct = b->acked.n - lg_idset_duplicates(&b->acked);
    *over = distinct > AK_STOCK ? (int64_t)distinct - AK_STOCK : 0;
    lg_idset_free(&listed);
    return 0;
}

static void fill(ak_run *r, lg_cell *c, buyer *one, buyer *all, long long failover_ms,
                 long long follow_ms)
{
    lg_audit a1, a2;
    int64_t lost1, over1, lost2, over2;
    char why[256];
    c->ran = 1;
    c->stock = AK_STOCK;
    no_times(c);
    c->fault_ms = failover_ms;
    c->requests = one->requests + all->requests;
    c->ok = one->ok;
    c->n503 = one->n503 + all->n503;
    c->errors = c->n503;
    if (audit(one, &a1, &lost1, &over1, why, sizeof why) != 0 ||
        audit(all, &a2, &lost2, &over2, why, sizeof why) != 0) {
        snprintf(c->outcome, sizeof c->outcome, "error");
        snprintf(c->reason, sizeof c->reason, "no audit: %.200s", why);
        return;
    }
    c->sold = a1.sold;
    c->stock_left = a1.stock;
    c->oversold = a1.oversold;
    c->undersold = a1.undersold;
    c->acked_lost = (uint64_t)lost1;
    c->acked_over_stock = (uint64_t)over1;
    c->acked_lost_all = lost2;
    c->acked_over_stock_all = over2;
    c->late_writes = one->late_writes + all->late_writes;
    int64_t late = one->late_us > all->late_us ? one->late_us : all->late_us;
    c->late_write_ms = r->monitor_ok ? late / 1000 : -1;
    if (lost2 > 0 || over2 > 0)
        snprintf(c->outcome, sizeof c->outcome, "lost-at-all");
    else if (lost1 > 0)
        snprintf(c->outcome, sizeof c->outcome, "lost-at-1");
    else
        snprintf(c->outcome, sizeof c->outcome, "kept");
    char late_text[96];
    if (!r->monitor_ok)
        snprintf(late_text, sizeof late_text, "no MONITOR on the old master");
    else if (c->late_writes == 0)
        snprintf(late_text, sizeof late_text, "no write on the old master after +switch-master");
    else
        snprintf(late_text, sizeof late_text,
                 "%lld writes on the old master after +switch-master, the last %lld ms after",
                 (long long)c->late_writes, (long long)c->late_write_ms);
    snprintf(c->reason, sizeof c->reason,
             "wait 1: %lld of %llu 200s lost, %lld beyond the stock of %d; all: %lld of %llu "
             "lost, %llu x 503 not_replicated; failover %lld ms, both instances on the new "
             "master %lld ms after +switch-master; %s",
             (long long)lost1, (unsigned long long)one->ok, (long long)over1, AK_STOCK,
             (long long)lost2, (unsigned long long)all->ok, (unsigned long long)all->not_replicated,
             failover_ms, follow_ms, late_text);
}

int lg_acked_run(mctx *x, lg_scenario s, lg_cell *cells[LG_NMODES], char *err, size_t errlen)
{
    const char *scen = lg_scen_names[s];
    int resume = s == LG_SCEN_RESUME_FAILOVER;
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/%s", x->logdir, scen);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    ak_run *r = calloc(1, sizeof *r);
    if (r)
        r->ev = malloc(AK_MAX_EVENTS * sizeof *r->ev);
    if (!r || !r->ev) {
        if (r)
            free(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r->x = x;
    r->scen = s;
    pk_ha h;
    pk_ha_opts o = {.server = x->cfg->redis_server,
                    .dir = dir,
                    .replicas = 2,
                    .proxied = 1,
                    .down_after_ms = AK_DOWN_AFTER_MS,
                    .failover_timeout_ms = AK_FAILOVER_TIMEOUT_MS,
                    .replica_priority = {100, 10},
                    .stop = x->cfg->stop};
    if (pk_ha_start(&h, &o, err, errlen) < 0) {
        free(r->ev);
        free(r);
        return -1;
    }
    memcpy(r->sentinel_port, h.sentinel_port, sizeof r->sentinel_port);
    r->master_port = h.master_port;
    char sentinels[160];
    snprintf(sentinels, sizeof sentinels, "redis.sentinels=%s", h.sentinels);
    instance ins[2];
    memset(ins, 0, sizeof ins);
    pthread_t watcher, monitor;
    int watching = 0, monitoring = 0, paused = 0;
    int rc = -1;
    for (int i = 0; i < 2; i++) {
        snprintf(ins[i].id, sizeof ins[i].id, "mx-%s-%s", scen, i ? "all" : "one");
        const char *extra[] = {"--set", sentinels,
                               "--set", "redis.master_name=" PK_HA_NAME,
                               "--set", "redis.command_timeout_ms=300",
                               "--set", "redis.connect_timeout_ms=300",
                               "--set", "redis.wait_timeout_ms=300",
                               "--set", i ? "redis.wait_replicas=all" : "redis.wait_replicas=1",
                               "--set", "purchase.local_sold_out=false"};
        for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++)
            ins[i].extra[ins[i].nextra++] = extra[k];
        if (lg_mx_instance_start(x, &ins[i], err, errlen) < 0)
            goto out;
    }
    for (lg_mode m = 0; m < LG_NMODES; m++) {
        if (!cells[m])
            continue;
        for (int all = 0; all < 2; all++) {
            buyer *b = &r->b[r->nb++];
            b->run = r;
            b->in = &ins[all];
            b->mode = m;
            b->all = all;
            char sku[64];
            snprintf(sku, sizeof sku, "mx-%s-%s-%s", scen, lg_mode_names[m], all ? "all" : "1");
            memcpy(b->sku, sku, sizeof sku);
            snprintf(b->url, sizeof b->url, "%s/miaosha/%s?sku=%s&work_ms=0&wait_ms=2000",
                     ins[all].base, lg_mode_names[m], sku);
            if (lg_admin_reset(b->in->base, b->sku, AK_STOCK, x->cfg->admin_token, err, errlen) < 0)
                goto out;
        }
    }
    /* 1: one sale each, on every replica (a WAIT that a loaded machine made
     * time out is tried again) */
    for (int i = 0; i < r->nb; i++) {
        long st = 0;
        for (int t = 0; t < 5 && st != 200; t++)
            st = buy(&r->b[i], 0);
        if (st != 200) {
            char why[160];
            snprintf(why, sizeof why, "%s on the %s instance: the first purchase answered %ld",
                     lg_mode_names[r->b[i].mode], r->b[i].all ? "all" : "wait 1", st);
            fail_all(cells, why);
            rc = 0;
            goto out;
        }
    }
    for (int i = 0; i < r->nb; i++) {
        char key[128], v[32] = "", mv[32] = "";
        snprintf(key, sizeof key, "miaosha:{%s}:sold", r->b[i].sku);
        const char *get[] = {"GET", key};
        pk_redis_query(h.master_port, 300, 2, get, mv, sizeof mv);
        for (long long end = lc_now_ms() + lg_mx_bound(x, 5000);
             !(pk_redis_query(h.replica_port[AK_PROMOTED], 300, 2, get, v, sizeof v) == 1 &&
               mv[0] && !strcmp(v, mv));
             pk_sleep_ms(10))
            if (lc_now_ms() > end || lg_mx_stopped(x)) {
                fail_all(cells, "the first sales did not reach the replica to be promoted");
                rc = 0;
                goto out;
            }
    }
    watching = pthread_create(&watcher, NULL, watch_main, r) == 0;
    monitoring = pthread_create(&monitor, NULL, monitor_main, r) == 0;
    if (!watching || !monitoring) {
        snprintf(err, errlen, "threads");
        goto out;
    }
    /* 2: B stops receiving; the buyers buy AK_BEFORE each */
    pk_ha_freeze_link(&h, AK_PROMOTED, 1);
    for (int i = 0; i < r->nb; i++)
        r->b[i].started = pthread_create(&r->b[i].t, NULL, buyer_main, &r->b[i]) == 0;
    for (long long end = lc_now_ms() + lg_mx_bound(x, 30000);
         atomic_load(&r->before_done) < r->nb && lc_now_ms() < end && !lg_mx_stopped(x);)
        pk_sleep_ms(5);
    /* 3: the failover, the buyers buying on */
    atomic_store(&r->phase, PH_FAILOVER);
    long long t0 = lc_now_ms();
    if (resume) {
        kill(h.master_pid, SIGSTOP);
        paused = 1;
        for (long long end = t0 + lg_mx_bound(x, AK_FAILOVER_MAX_MS);
             !atomic_load(&r->selected_us) && lc_now_ms() < end && !lg_mx_stopped(x);)
            pk_sleep_ms(2);
        kill(h.master_pid, SIGCONT);
        paused = 0;
        if (!atomic_load(&r->selected_us)) {
            fail_all(cells, "the Sentinels never selected a replica while the master was paused");
            rc = 0;
            goto out;
        }
    } else {
        const char *fo[] = {"SENTINEL", "FAILOVER", PK_HA_NAME};
        char ok[64] = "";
        if (pk_redis_query(h.sentinel_port[0], 1000, 3, fo, ok, sizeof ok) != 1 ||
            strcmp(ok, "OK") != 0) {
            char why[160];
            snprintf(why, sizeof why, "SENTINEL FAILOVER answered '%s'", ok);
            fail_all(cells, why);
            rc = 0;
            goto out;
        }
    }
    for (long long end = t0 + lg_mx_bound(x, AK_FAILOVER_MAX_MS);
         !atomic_load(&r->switch_us) && lc_now_ms() < end && !lg_mx_stopped(x);)
        pk_sleep_ms(5);
    if (!atomic_load(&r->switch_us)) {
        char why[96];
        snprintf(why, sizeof why, "no +switch-master within %lld ms",
                 lg_mx_bound(x, AK_FAILOVER_MAX_MS));
        fail_all(cells, why);
        rc = 0;
        goto out;
    }
    long long failover_ms = atomic_load(&r->switch_ms) - t0;
    /* the buyers go on until both instances name the new master (their
     * health probe's view) */
    char want[64];
    snprintf(want, sizeof want, "\"master\":\"127.0.0.1:%d\"", atomic_load(&r->new_port));
    long long follow_ms = -1;
    for (long long end = atomic_load(&r->switch_ms) + lg_mx_bound(x, AK_FOLLOW_MAX_MS);
         follow_ms < 0 && lc_now_ms() < end && !lg_mx_stopped(x); pk_sleep_ms(20)) {
        int both = 1;
        for (int i = 0; i < 2 && both; i++) {
            char url[128], *body = NULL, e[128];
            long st = 0;
            snprintf(url, sizeof url, "%s/healthz", ins[i].base);
            both = lg_http_call("GET", url, NULL, NULL, 1000, &st, &body, e, sizeof e) == 0 &&
                   body && strstr(body, want);
            free(body);
        }
        if (both)
            follow_ms = lc_now_ms() - atomic_load(&r->switch_ms);
    }
    /* Then, once the new master's replica has resynced (until then its
     * WAIT 1 fails: 503 not_replicated), the wait-1 SKUs sell out there —
     * on a stock that never saw the window's sales: acked_over_stock. The
     * MONITOR on the old master records on. */
    atomic_store(&r->phase, PH_HOLD);
    char online[8192] = "";
    const char *info[] = {"INFO", "replication"};
    for (long long end = lc_now_ms() + lg_mx_bound(x, AK_SOLD_OUT_MAX_MS);
         follow_ms >= 0 && lc_now_ms() < end && !lg_mx_stopped(x) &&
         !strstr(online, "state=online");
         pk_sleep_ms(20))
        pk_redis_query(atomic_load(&r->new_port), 300, 2, info, online, sizeof online);
    atomic_store(&r->phase, PH_AFTER);
    long long t_follow = lc_now_ms();
    for (int done = 0; !done && !lg_mx_stopped(x) && follow_ms >= 0; pk_sleep_ms(10)) {
        done = lc_now_ms() >= t_follow + AK_AFTER_MS;
        for (int i = 0; i < r->nb && done; i++)
            done = r->b[i].all || atomic_load(&r->b[i].sold_out_after);
        done |= lc_now_ms() >= t_follow + lg_mx_bound(x, AK_SOLD_OUT_MAX_MS);
    }
    if (follow_ms < 0) {
        char why[128];
        snprintf(why, sizeof why, "the instances did not name the new master within %lld ms",
                 lg_mx_bound(x, AK_FOLLOW_MAX_MS));
        fail_all(cells, why);
        rc = 0;
        goto out;
    }
    atomic_store(&r->phase, PH_STOP);
    for (int i = 0; i < r->nb; i++)
        if (r->b[i].started)
            pthread_join(r->b[i].t, NULL), r->b[i].started = 0;
    atomic_store(&r->stop_threads, 1);
    pthread_join(monitor, NULL);
    pthread_join(watcher, NULL);
    watching = monitoring = 0;
    /* 4: the books on the new master, and the old master's late writes */
    int64_t sw = atomic_load(&r->switch_us);
    for (size_t k = 0; k < r->nev; k++) {
        buyer *b = &r->b[r->ev[k].who];
        if (r->ev[k].us > sw) {
            b->late_writes++;
            if (r->ev[k].us - sw > b->late_us)
                b->late_us = r->ev[k].us - sw;
        }
    }
    for (int i = 0; i + 1 < r->nb; i += 2)
        fill(r, cells[r->b[i].mode], &r->b[i], &r->b[i + 1], failover_ms, follow_ms);
    rc = 0;
out:
    if (paused)
        kill(h.master_pid, SIGCONT);
    atomic_store(&r->phase, PH_STOP);
    for (int i = 0; i < r->nb; i++)
        if (r->b[i].started)
            pthread_join(r->b[i].t, NULL);
    atomic_store(&r->stop_threads, 1);
    if (monitoring)
        pthread_join(monitor, NULL);
    if (watching)
        pthread_join(watcher, NULL);
    for (int i = 0; i < r->nb; i++)
        lg_idset_free(&r->b[i].acked);
    for (int i = 0; i < 2; i++)
        lg_mx_instance_stop(&ins[i]);
    pk_ha_stop(&h);
    free(r->ev);
    free(r);
    return rc;
}
