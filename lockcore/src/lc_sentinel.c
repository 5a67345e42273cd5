/* lc_sentinel.c — the master's address from Redis Sentinel (lc_sentinel.h).
 *
 * What Redis's "Sentinel client guidelines" ask of a client: ask the
 * Sentinels in turn for the master, the first answer wins; ask again on
 * every reconnect (an I/O error, a -READONLY reply: the connection is
 * dropped and remade, lc_conn.c); listen for +switch-master so an idle
 * connection to the old master is not used again. Beyond them, as Redisson
 * and redis-py do, the watcher listens to every Sentinel, not one: the
 * failover's leader announces the switch last, up to failover-timeout after
 * the others. And an answer whose configuration epoch is older than the
 * known one is passed over (lc_sentinel.h says why). The check that the
 * address really is a master (ROLE) is lc_conn.c's, on the connection it
 * makes.
 */
#include "lc_sentinel.h"

#include "lc_util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lc_status bad(char *err, size_t errlen, const char *what, const char *node)
{
    if (err && errlen)
        snprintf(err, errlen, "lockcore: sentinel%s%s%s: %s", node ? " \"" : "", node ? node : "",
                 node ? "\"" : "", what);
    return LC_MISUSE;
}

lc_status lc__sentinel_setup(lc_sentinel *s, const lc_options *o, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->epoch = -1;
    LC_PTHREAD(pthread_mutex_init(&s->mu, NULL));
    int n = o->sentinel_count;
    if (n == 0)
        return LC_OK;
    if (n < 0 || n > LC_SENTINEL_MAX_NODES || !o->sentinels)
        return bad(err, errlen, "sentinel_count must be 0..9, with the sentinels given", NULL);
    if (!o->master_name || !*o->master_name || strlen(o->master_name) >= LC_SENTINEL_NAME_LEN)
        return bad(err, errlen, "master_name must be 1..127 bytes when sentinels are set", NULL);
    for (int i = 0; i < n; i++) {
        const char *node = o->sentinels[i];
        if (lc__split_addr(node, false, s->host[i], sizeof s->host[i], &s->port[i]) != 0)
            return bad(err, errlen, "not host:port (port 1..65535, no space in the host)",
                       node ? node : "");
        for (int j = 0; j < i; j++)
            if (s->port[j] == s->port[i] && strcmp(s->host[j], s->host[i]) == 0)
                return bad(err, errlen, "listed twice", node);
    }
    snprintf(s->master_name, sizeof s->master_name, "%s", o->master_name);
    /* Short: a dead Sentinel must not cost a connect timeout per reconnect
     * while another one would answer at once. */
    int t = o->connect_timeout_ms < 250 ? o->connect_timeout_ms : 250;
    s->timeout_ms = t > 0 ? t : 250;
    s->n = n;
    return LC_OK;
}

/* Makes host:port at epoch the current master unless a newer one is known
 * (force: take it anyway); copies the current one into host/port either
 * way. Counts a change of address. */
static void set_current(lc_sentinel *s, char *host, int *port, int64_t epoch, bool force)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    if (force || epoch >= s->epoch || !s->cur_host[0]) {
        if (s->cur_host[0] && (s->cur_port != *port || strcmp(s->cur_host, host) != 0))
            atomic_fetch_add(&s->switches, 1);
        snprintf(s->cur_host, sizeof s->cur_host, "%s", host);
        s->cur_port = *port;
        s->epoch = epoch;
    }
    snprintf(host, 256, "%s", s->cur_host);
    *port = s->cur_port;
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
}

static redisContext *connect_one(lc_sentinel *s, int i, char *why, size_t whylen)
{
    struct timeval tv = {s->timeout_ms / 1000, (s->timeout_ms % 1000) * 1000};
    redisContext *ctx = redisConnectWithTimeout(s->host[i], s->port[i], tv);
    if (!ctx || ctx->err) {
        snprintf(why, whylen, "%s:%d %s", s->host[i], s->port[i],
                 ctx ? ctx->errstr : "out of memory");
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, tv);
    return ctx;
}

/* The value of field name in SENTINEL MASTER's flat [k, v, k, v...] reply. */
static const char *field(const redisReply *r, const char *name)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && !strcmp(r->element[i]->str, name) &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            return r->element[i + 1]->str;
    return NULL;
}

/* One Sentinel's answer: 0 and host/port/epoch, or -1 with why. The
 * address is get-master-addr-by-name's, the epoch SENTINEL MASTER's
 * config-epoch, asked in one round trip: a failover's leader answers the
 * promoted replica's address from the moment it stamps the new epoch on the
 * master (SENTINEL MASTER itself names the old address until the failover
 * ends), so the two always go together. */
static int ask_one(lc_sentinel *s, int i, char *host, int *port, int64_t *epoch, char *why,
                   size_t whylen)
{
    redisContext *ctx = connect_one(s, i, why, whylen);
    if (!ctx)
        return -1;
    redisAppendCommand(ctx, "SENTINEL get-master-addr-by-name %s", s->master_name);
    redisAppendCommand(ctx, "SENTINEL MASTER %s", s->master_name);
    redisReply *a = NULL, *m = NULL;
    if (redisGetReply(ctx, (void **)&a) == REDIS_OK)
        (void)redisGetReply(ctx, (void **)&m);
    int rc = -1;
    const char *e = m && m->type == REDIS_REPLY_ARRAY ? field(m, "config-epoch") : NULL;
    if (!a || !m)
        snprintf(why, whylen, "%s:%d %s", s->host[i], s->port[i], ctx->errstr);
    else if (a->type == REDIS_REPLY_ARRAY && a->elements == 2 &&
             a->element[0]->type == REDIS_REPLY_STRING &&
             a->element[1]->type == REDIS_REPLY_STRING && a->element[0]->len < 256 && e) {
        snprintf(host, 256, "%s", a->element[0]->str);
        *port = atoi(a->element[1]->str);
        *epoch = strtoll(e, NULL, 10);
        rc = *port > 0 && *port <= 65535 ? 0 : -1;
        if (rc != 0)
            snprintf(why, whylen, "%s:%d bad port", s->host[i], s->port[i]);
    } else if (a->type == REDIS_REPLY_ERROR)
        snprintf(why, whylen, "%s:%d %s", s->host[i], s->port[i], a->str);
    else
        snprintf(why, whylen, "%s:%d knows no master %s", s->host[i], s->port[i], s->master_name);
    if (a)
        freeReplyObject(a);
    if (m)
        freeReplyObject(m);
    redisFree(ctx);
    return rc;
}

/* Whether an answer may be taken: nothing known yet, the same address, or
 * a configuration at least as new as the known one. */
static bool acceptable(lc_sentinel *s, const char *host, int port, int64_t epoch)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    bool ok = !s->cur_host[0] || (s->cur_port == port && !strcmp(s->cur_host, host)) ||
              epoch >= s->epoch;
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
    return ok;
}

static int ask_all(lc_sentinel *s, char *host, int *port, char *err)
{
    char all[LC_ERRSTR_LEN] = "", best_host[256] = "";
    int answered = 0, best_port = 0;
    int64_t best_epoch = -1;
    for (int i = 0; i < s->n; i++) {
        char why[160];
        int64_t epoch = -1;
        if (ask_one(s, i, host, port, &epoch, why, sizeof why) == 0) {
            answered++;
            if (acceptable(s, host, *port, epoch)) {
                set_current(s, host, port, epoch, false);
                return 0;
            }
            if (epoch > best_epoch) {
                best_epoch = epoch;
                best_port = *port;
                snprintf(best_host, sizeof best_host, "%s", host);
            }
            snprintf(why, sizeof why, "%.48s:%d names %.48s:%d of an older epoch %lld", s->host[i],
                     s->port[i], host, *port, (long long)epoch);
        }
        size_t used = strlen(all);
        snprintf(all + used, sizeof all - used, "%s%s", used ? "; " : "", why);
    }
    if (answered > 0) {
        /* every answer older than an announcement: the announced master
         * stands; all of them older: the group was rebuilt, its newest wins */
        snprintf(host, 256, "%s", best_host);
        *port = best_port;
        set_current(s, host, port, best_epoch, answered == s->n);
        return 0;
    }
    lc__seterr(err, "sentinel: no master %s (%s)", s->master_name, all);
    return -1;
}

static bool stopping(lc_sentinel *s)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    bool stop = s->stop;
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
    return stop;
}

/* "+switch-master" payload: "<name> <old-ip> <old-port> <new-ip> <new-port>".
 * The announcement of the switch from the current master is taken at once
 * (the epoch it brings is above the known one); the same switch announced
 * again by another Sentinel changes nothing; one from another address (a
 * switch missed, or a late announcement of an older one) is checked with
 * every Sentinel. */
static void handle(lc_sentinel *s, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    char name[LC_SENTINEL_NAME_LEN], oh[256], nh[256], err[LC_ERRSTR_LEN];
    int op, np;
    if (sscanf(r->element[2]->str, "%127s %255s %d %255s %d", name, oh, &op, nh, &np) != 5 ||
        strcmp(name, s->master_name) != 0 || np <= 0 || np > 65535)
        return;
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    bool again = s->cur_port == np && !strcmp(s->cur_host, nh);
    bool next = !s->cur_host[0] || (s->cur_port == op && !strcmp(s->cur_host, oh));
    int64_t epoch = s->epoch < 0 ? -1 : s->epoch + 1;
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
    if (again)
        return;
    if (next)
        set_current(s, nh, &np, epoch, true);
    else
        (void)ask_all(s, nh, &np, err);
}

/* Subscribed to +switch-master on sentinel i, or NULL (why in why). */
static redisContext *subscribe(lc_sentinel *s, int i)
{
    char why[160];
    redisContext *ctx = connect_one(s, i, why, sizeof why);
    redisReply *r = ctx ? redisCommand(ctx, "SUBSCRIBE +switch-master") : NULL;
    if (!r) {
        if (ctx)
            redisFree(ctx);
        return NULL;
    }
    freeReplyObject(r);
    return ctx;
}

/* The watcher: subscribed to +switch-master on every Sentinel at once; one
 * that fails is subscribed again 200 ms later. Wakes every 100 ms to see
 * stop. */
static void *watch(void *arg)
{
    lc_sentinel *s = arg;
    redisContext *ctx[LC_SENTINEL_MAX_NODES] = {NULL};
    int64_t retry_at[LC_SENTINEL_MAX_NODES] = {0};
    while (!stopping(s)) {
        bool fresh = false;
        for (int i = 0; i < s->n && !stopping(s); i++)
            if (!ctx[i] && lc_now_ms() >= retry_at[i]) {
                ctx[i] = subscribe(s, i);
                fresh |= ctx[i] != NULL;
                if (!ctx[i])
                    retry_at[i] = lc_now_ms() + 200;
            }
        if (fresh) {
            /* a switch while that Sentinel was not listened to */
            char host[256], err[LC_ERRSTR_LEN];
            int port;
            (void)ask_all(s, host, &port, err);
        }
        struct pollfd pf[LC_SENTINEL_MAX_NODES];
        for (int i = 0; i < s->n; i++) {
            pf[i].fd = ctx[i] ? ctx[i]->fd : -1;
            pf[i].events = POLLIN;
            pf[i].revents = 0;
        }
        int n = poll(pf, (nfds_t)s->n, 100);
        if (n < 0 && errno != EINTR)
            lc__sleep_ms(20);
        for (int i = 0; n > 0 && i < s->n; i++) {
            if (!ctx[i] || !(pf[i].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            bool ok = redisBufferRead(ctx[i]) == REDIS_OK;
            void *reply = NULL;
            while (ok && (ok = redisGetReplyFromReader(ctx[i], &reply) == REDIS_OK) && reply) {
                handle(s, reply);
                freeReplyObject(reply);
                reply = NULL;
            }
            if (!ok) {
                redisFree(ctx[i]);
                ctx[i] = NULL;
                retry_at[i] = lc_now_ms() + 100;
            }
        }
    }
    for (int i = 0; i < s->n; i++)
        if (ctx[i])
            redisFree(ctx[i]);
    return NULL;
}

int lc__sentinel_resolve(lc_sentinel *s, char *host, int *port, char *err)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    if (!s->started && !s->stop)
        s->started = pthread_create(&s->thread, NULL, watch, s) == 0;
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
    return ask_all(s, host, port, err);
}

bool lc__sentinel_stale(lc_sentinel *s, const redisContext *ctx)
{
    if (s->n == 0 || !ctx->tcp.host)
        return false;
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    bool stale = s->cur_host[0] &&
                 (ctx->tcp.port != s->cur_port || strcmp(ctx->tcp.host, s->cur_host));
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
    return stale;
}

void lc__sentinel_current(lc_sentinel *s, char *buf, size_t len)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    if (s->cur_host[0])
        snprintf(buf, len, "%s:%d", s->cur_host, s->cur_port);
    else if (len)
        buf[0] = '\0';
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
}

void lc__sentinel_shutdown(lc_sentinel *s)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    s->stop = true;
    bool started = s->started;
    LC_PTHREAD(pthread_mutex_unlock(&s->mu));
    if (started)
        LC_PTHREAD(pthread_join(s->thread, NULL));
    LC_PTHREAD(pthread_mutex_destroy(&s->mu));
}
