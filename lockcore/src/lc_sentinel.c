/* lc_sentinel.c — the master's address from Redis Sentinel (lc_sentinel.h).
 *
 * What Redis's "Sentinel client guidelines" ask of a client, and no more:
 * ask the Sentinels in turn for get-master-addr-by-name, the first answer
 * wins; ask again on every reconnect (an I/O error, a -READONLY reply: the
 * connection is dropped and remade, lc_conn.c); listen for +switch-master
 * so an idle connection to the old master is not used again. The check
 * that the address really is a master (ROLE) is lc_conn.c's, on the
 * connection it makes.
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
        const char *colon = node ? strrchr(node, ':') : NULL;
        if (!colon || colon == node || (size_t)(colon - node) >= sizeof s->host[i])
            return bad(err, errlen, "not host:port", node ? node : "");
        char *end = NULL;
        long port = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end || port < 1 || port > 65535)
            return bad(err, errlen, "port must be 1..65535", node);
        memcpy(s->host[i], node, (size_t)(colon - node));
        s->host[i][colon - node] = '\0';
        s->port[i] = (int)port;
    }
    snprintf(s->master_name, sizeof s->master_name, "%s", o->master_name);
    /* Short: a dead Sentinel must not cost a connect timeout per reconnect
     * while another one would answer at once. */
    int t = o->connect_timeout_ms < 250 ? o->connect_timeout_ms : 250;
    s->timeout_ms = t > 0 ? t : 250;
    s->n = n;
    return LC_OK;
}

static void set_current(lc_sentinel *s, const char *host, int port)
{
    LC_PTHREAD(pthread_mutex_lock(&s->mu));
    if (s->cur_host[0] && (s->cur_port != port || strcmp(s->cur_host, host) != 0))
        atomic_fetch_add(&s->switches, 1);
    snprintf(s->cur_host, sizeof s->cur_host, "%s", host);
    s->cur_port = port;
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

/* One Sentinel's answer: 0 and host/port, or -1 with why. */
static int ask_one(lc_sentinel *s, int i, char *host, int *port, char *why, size_t whylen)
{
    redisContext *ctx = connect_one(s, i, why, whylen);
    if (!ctx)
        return -1;
    redisReply *r = redisCommand(ctx, "SENTINEL get-master-addr-by-name %s", s->master_name);
    int rc = -1;
    if (!r)
        snprintf(why, whylen, "%s:%d %s", s->host[i], s->port[i], ctx->errstr);
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[0]->type == REDIS_REPLY_STRING &&
             r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < 256) {
        snprintf(host, 256, "%s", r->element[0]->str);
        *port = atoi(r->element[1]->str);
        rc = *port > 0 && *port <= 65535 ? 0 : -1;
        if (rc != 0)
            snprintf(why, whylen, "%s:%d bad port", s->host[i], s->port[i]);
    } else if (r->type == REDIS_REPLY_ERROR)
        snprintf(why, whylen, "%s:%d %s", s->host[i], s->port[i], r->str);
    else
        snprintf(why, whylen, "%s:%d knows no master %s", s->host[i], s->port[i], s->master_name);
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return rc;
}

static int ask_all(lc_sentinel *s, char *host, int *port, char *err)
{
    char all[LC_ERRSTR_LEN] = "";
    for (int i = 0; i < s->n; i++) {
        char why[160];
        if (ask_one(s, i, host, port, why, sizeof why) == 0) {
            set_current(s, host, *port);
            return 0;
        }
        size_t used = strlen(all);
        snprintf(all + used, sizeof all - used, "%s%s", used ? "; " : "", why);
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

static void nap(lc_sentinel *s, int64_t ms)
{
    for (int64_t until = lc_now_ms() + ms; lc_now_ms() < until && !stopping(s);)
        lc__sleep_ms(20);
}

/* "+switch-master" payload: "<name> <old-ip> <old-port> <new-ip> <new-port>". */
static void handle(lc_sentinel *s, redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return;
    char name[LC_SENTINEL_NAME_LEN], oh[256], nh[256];
    int op, np;
    if (sscanf(r->element[2]->str, "%127s %255s %d %255s %d", name, oh, &op, nh, &np) != 5)
        return;
    if (strcmp(name, s->master_name) == 0 && np > 0 && np <= 65535)
        set_current(s, nh, np);
}

/* The watcher: subscribed to +switch-master on one Sentinel at a time; on
 * any error the next one. Wakes every 100 ms to see stop. */
static void *watch(void *arg)
{
    lc_sentinel *s = arg;
    for (int i = 0; !stopping(s); i = (i + 1) % s->n) {
        char why[160], host[256], err[LC_ERRSTR_LEN];
        int port;
        redisContext *ctx = connect_one(s, i, why, sizeof why);
        redisReply *r = ctx ? redisCommand(ctx, "SUBSCRIBE +switch-master") : NULL;
        if (!r) {
            if (ctx)
                redisFree(ctx);
            nap(s, 200);
            continue;
        }
        freeReplyObject(r);
        /* A switch while no Sentinel was listened to is caught here. */
        (void)ask_all(s, host, &port, err);
        int ok = 1;
        while (ok && !stopping(s)) {
            struct pollfd pf = {ctx->fd, POLLIN, 0};
            int n = poll(&pf, 1, 100);
            if (n < 0 && errno != EINTR)
                ok = 0;
            if (ok && n > 0)
                ok = redisBufferRead(ctx) == REDIS_OK;
            void *reply = NULL;
            while (ok && (ok = redisGetReplyFromReader(ctx, &reply) == REDIS_OK) && reply) {
                handle(s, reply);
                freeReplyObject(reply);
                reply = NULL;
            }
        }
        redisFree(ctx);
        if (!stopping(s))
            nap(s, 100);
    }
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
