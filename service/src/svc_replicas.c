/* svc_replicas.c — WAIT after a purchase's write, and the replica set that
 * redis.wait_replicas = all waits for (svc_replicas.h). */
#include "svc_replicas.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svc_check.h"
#include "svc_log.h"

#define SPLIT                                                                                      \
    "the write went over more than one connection to Redis (a redirect between its commands, "     \
    "or a reconnect): no one WAIT can count it, whether it reached a replica is unknown"

#define MAX_REPLICAS 32
#define ADDR_LEN 300
#define SENTINEL_EVERY_MS 1000

/* What the probe thread knows (it alone writes these). */
static int on;
static int nsent;
static char sent_host[LC_SENTINEL_MAX_NODES][256];
static int sent_port[LC_SENTINEL_MAX_NODES];
static char master_name[128];
static redisContext *sctx; /* the Sentinel last answered, kept open */
static int sctx_i;
static int64_t sentinel_due_ms;
static int sentinel_answered; /* since start: a down replica only Sentinel knows of */
static char set[MAX_REPLICAS][ADDR_LEN];
static int nset;
static char cur_master[ADDR_LEN];

/* What the workers read. */
static _Atomic int wanted = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char known_text[MAX_REPLICAS * 24];

int svc_replicas_wanted(const cfg_config *s)
{
    if (s->redis.wait_replicas != CFG_WAIT_REPLICAS_ALL)
        return s->redis.wait_replicas;
    return atomic_load_explicit(&wanted, memory_order_acquire);
}

int svc_wait_replicas(const cfg_config *s, lc_conn *conn, uint64_t via, char *detail, size_t len)
{
    int n = svc_replicas_wanted(s);
    int all = s->redis.wait_replicas == CFG_WAIT_REPLICAS_ALL;
    if (s->redis.wait_replicas <= 0 || n == 0)
        return 0;
    if (n < 0) {
        snprintf(detail, len,
                 "redis.wait_replicas is all and the replicas of the master are not known yet "
                 "(the health probe has not read them): the order is on the master only");
        return -1;
    }
    if (via == 0) {
        snprintf(detail, len, "%s", SPLIT);
        return -1;
    }
    lc_pipe p;
    lc_pipe_init(&p);
    if (lc_pipe_append(&p, "WAIT %d %d", n, s->redis.wait_timeout_ms) != LC_OK) {
        lc_pipe_clear(&p);
        snprintf(detail, len, "out of memory before WAIT");
        return -1;
    }
    /* over the write's own connection, never a new one: lockcore refuses
     * when it was closed or remade since (a missing reply is seen below) */
    (void)lc_conn_pipe_via(conn, &p, via);
    redisReply *r = lc_pipe_take(&p, 0);
    lc_pipe_clear(&p);
    int rc = -1;
    if (r == NULL)
        snprintf(detail, len, "WAIT: %.200s",
                 lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
    else if (r->type == REDIS_REPLY_INTEGER && r->integer >= n)
        rc = 0;
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(detail, len, "the write reached %lld of %d replicas within %d ms%s", r->integer, n,
                 s->redis.wait_timeout_ms,
                 all ? " (redis.wait_replicas = all: every replica the master is known to have, "
                       "one that is down included)"
                     : "");
    else
        snprintf(detail, len, "WAIT: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    if (r)
        freeReplyObject(r);
    return rc;
}

/* --- the set for all (the probe thread) ----------------------------------- */

void svc_replicas_setup(const cfg_config *s, const lc_options *lo)
{
    on = s->redis.wait_replicas == CFG_WAIT_REPLICAS_ALL;
    nsent = 0;
    for (int i = 0; on && i < lo->sentinel_count && i < LC_SENTINEL_MAX_NODES; i++) {
        const char *colon = strrchr(lo->sentinels[i], ':');
        size_t hl = colon ? (size_t)(colon - lo->sentinels[i]) : 0;
        if (!colon || hl == 0 || hl >= sizeof sent_host[0])
            continue; /* lockcore has refused it already */
        memcpy(sent_host[nsent], lo->sentinels[i], hl);
        sent_host[nsent][hl] = '\0';
        sent_port[nsent++] = atoi(colon + 1);
    }
    snprintf(master_name, sizeof master_name, "%s", lo->master_name ? lo->master_name : "");
}

/* "host:port" with host as a numeric address: Sentinel may name a replica
 * by its host name (announce-hostnames) where the master's INFO gives its
 * address, and one replica must not count twice. A name that does not
 * resolve stays as it is. The probe thread (getaddrinfo may block). */
static void canon(const char *host, const char *port, char *out, size_t len)
{
    unsigned char b[sizeof(struct in6_addr)];
    char num[INET6_ADDRSTRLEN] = "";
    if (inet_pton(AF_INET, host, b) != 1 && inet_pton(AF_INET6, host, b) != 1) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(host, NULL, &hints, &res) == 0 && res)
            (void)getnameinfo(res->ai_addr, res->ai_addrlen, num, sizeof num, NULL, 0,
                              NI_NUMERICHOST);
        if (res)
            freeaddrinfo(res);
    }
    snprintf(out, len, "%s:%s", num[0] ? num : host, port);
}

/* canon for "host:port" text. */
static void canon_addr(const char *addr, char *out, size_t len)
{
    char host[ADDR_LEN];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host) {
        snprintf(out, len, "%s", addr);
        return;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    canon(host, colon + 1, out, len);
}

static int known(const char *addr)
{
    for (int i = 0; i < nset; i++)
        if (!strcmp(set[i], addr))
            return 1;
    return 0;
}

/* Adds addr unless it is the master or known; 1 when added. */
static int add(const char *addr)
{
    if (!addr[0] || !strcmp(addr, cur_master) || known(addr) || nset == MAX_REPLICAS)
        return 0;
    snprintf(set[nset++], ADDR_LEN, "%s", addr);
    return 1;
}

static void drop(const char *addr)
{
    for (int i = 0; i < nset; i++)
        if (!strcmp(set[i], addr)) {
            memmove(set[i], set[nset - 1], ADDR_LEN);
            nset--;
            return;
        }
}

/* "slave0:ip=127.0.0.1,port=7002,state=online,..." lines of INFO
 * replication: 1 when the reply was read (the set may not change). */
static int from_info(lc_conn *conn, int *changed)
{
    lc_pipe p;
    lc_pipe_init(&p);
    if (lc_pipe_append(&p, "INFO replication") != LC_OK) {
        lc_pipe_clear(&p);
        return 0;
    }
    (void)lc_conn_pipe(conn, &p);
    redisReply *r = lc_pipe_take(&p, 0);
    lc_pipe_clear(&p);
    int ok = r && r->type == REDIS_REPLY_STRING;
    for (const char *line = ok ? r->str : ""; line && *line;) {
        const char *end = strchr(line, '\n');
        char ip[256], addr[ADDR_LEN];
        int port;
        if (!strncmp(line, "slave", 5) &&
            sscanf(line, "slave%*d:ip=%255[^,],port=%d", ip, &port) == 2) {
            char ps[16];
            snprintf(ps, sizeof ps, "%d", port);
            canon(ip, ps, addr, sizeof addr);
            *changed |= add(addr);
        }
        line = end ? end + 1 : NULL;
    }
    if (r)
        freeReplyObject(r);
    return ok;
}

/* The value of field name in a flat [k, v, k, v...] array reply, or NULL. */
static const char *field(const redisReply *m, const char *name)
{
    if (m->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < m->elements; i += 2)
        if (m->element[i]->type == REDIS_REPLY_STRING && !strcmp(m->element[i]->str, name) &&
            m->element[i + 1]->type == REDIS_REPLY_STRING)
            return m->element[i + 1]->str;
    return NULL;
}

/* One Sentinel: 1 when it names the same master and listed its replicas. */
static int ask_sentinel(int i, int timeout_ms, int *changed)
{
    if (!sctx || sctx_i != i || sctx->err) {
        if (sctx)
            redisFree(sctx);
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        sctx = redisConnectWithTimeout(sent_host[i], sent_port[i], tv);
        sctx_i = i;
        if (!sctx || sctx->err) {
            if (sctx)
                redisFree(sctx);
            sctx = NULL;
            return 0;
        }
        redisSetTimeout(sctx, tv);
    }
    int ok = 0;
    redisReply *a = redisCommand(sctx, "SENTINEL get-master-addr-by-name %s", master_name);
    char addr[ADDR_LEN] = "";
    if (a && a->type == REDIS_REPLY_ARRAY && a->elements == 2 &&
        a->element[0]->type == REDIS_REPLY_STRING && a->element[1]->type == REDIS_REPLY_STRING)
        canon(a->element[0]->str, a->element[1]->str, addr, sizeof addr);
    if (a)
        freeReplyObject(a);
    /* A Sentinel that has not seen the switch yet lists the old master's
     * replicas, the new master among them: ask another. */
    if (!addr[0] || strcmp(addr, cur_master) != 0)
        return 0;
    redisReply *r = redisCommand(sctx, "SENTINEL REPLICAS %s", master_name);
    if (r && r->type == REDIS_REPLY_ARRAY) {
        ok = 1;
        for (size_t k = 0; k < r->elements; k++) {
            const char *ip = field(r->element[k], "ip"), *port = field(r->element[k], "port");
            if (ip && port) {
                canon(ip, port, addr, sizeof addr);
                *changed |= add(addr); /* down ones too: see svc_replicas.h */
            }
        }
    }
    if (r)
        freeReplyObject(r);
    return ok;
}

static void publish(void)
{
    char text[sizeof known_text] = "";
    size_t used = 0;
    for (int i = 0; i < nset && used < sizeof text; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", i ? "," : "", set[i]);
    SVC_PT(pthread_mutex_lock(&mu));
    snprintf(known_text, sizeof known_text, "%s", text);
    SVC_PT(pthread_mutex_unlock(&mu));
    atomic_store_explicit(&wanted, nset, memory_order_release);
}

void svc_replicas_refresh(lc_conn *conn, const char *named, int timeout_ms)
{
    if (!on || !named[0])
        return;
    char master[ADDR_LEN];
    canon_addr(named, master, sizeof master);
    int changed = 0;
    if (cur_master[0] && strcmp(master, cur_master) != 0) {
        /* A switch: the old master is a replica of the new one from now on
         * (Sentinel lists it so, down or not), the new one is no replica. */
        char old[ADDR_LEN];
        snprintf(old, sizeof old, "%s", cur_master);
        snprintf(cur_master, sizeof cur_master, "%s", master);
        drop(master);
        add(old);
        changed = 1;
        sentinel_due_ms = 0;
    }
    snprintf(cur_master, sizeof cur_master, "%s", master);
    int info_ok = from_info(conn, &changed);
    int64_t now = lc_now_ms();
    if (nsent > 0 && now >= sentinel_due_ms) {
        /* Once a second whether or not one answered: with every Sentinel
         * down, a round costs each of them a connect timeout, which must
         * not hold up every probe (the probe turns /healthz down). */
        sentinel_due_ms = now + SENTINEL_EVERY_MS;
        for (int k = 0; k < nsent; k++) {
            int i = (sctx_i + k) % nsent; /* the one that answered last, first */
            if (ask_sentinel(i, timeout_ms, &changed)) {
                sentinel_answered = 1;
                break;
            }
        }
    }
    /* Known once the master answered and, with Sentinels, one of them too:
     * a replica that is down at start is only on Sentinel's list. */
    int first = atomic_load(&wanted) < 0 && info_ok && (nsent == 0 || sentinel_answered);
    if (first || (changed && atomic_load(&wanted) >= 0)) {
        publish();
        char text[sizeof known_text];
        svc_replicas_known(text, sizeof text);
        svc_log(SVC_INFO, "redis: redis.wait_replicas = all: %d replica(s) of %s%s%s%s", nset,
                cur_master, nset ? " (" : "", text, nset ? ")" : "");
    }
}

void svc_replicas_known(char *buf, size_t len)
{
    SVC_PT(pthread_mutex_lock(&mu));
    snprintf(buf, len, "%s", known_text);
    SVC_PT(pthread_mutex_unlock(&mu));
}

void svc_replicas_stop(void)
{
    if (sctx)
        redisFree(sctx);
    sctx = NULL;
    nset = 0;
    cur_master[0] = '\0';
    sentinel_answered = 0;
    sentinel_due_ms = 0;
    atomic_store(&wanted, -1);
    SVC_PT(pthread_mutex_lock(&mu));
    known_text[0] = '\0';
    SVC_PT(pthread_mutex_unlock(&mu));
}
