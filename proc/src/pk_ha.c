/* pk_ha.c — master, replicas and Sentinels on loopback (pk_ha.h). */
#include "pk_ha.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_proc.h"
#include "pk_redis.h"

/* One redis-server of the group (a Sentinel when conf is given), its log
 * <dir>/<name>.log. */
static pid_t start_redis(const pk_ha_opts *o, const char *name, const char *conf,
                         const char *const *args, int *port, char *err, size_t errlen)
{
    char log[512];
    snprintf(log, sizeof log, "%s/%s.log", o->dir, name);
    pk_redis_opts ro;
    pk_redis_opts_init(&ro);
    ro.server = o->server;
    ro.dir = o->dir;
    ro.conf = conf;
    ro.args = args;
    ro.logpath = log;
    ro.flags = o->flags;
    ro.attempts = 10;
    ro.timeout_ms = 5000;
    ro.stop = o->stop;
    return pk_redis_start(&ro, port, err, errlen);
}

static pid_t start_sentinel(const pk_ha_opts *o, int i, int master_port, int *port, char *err,
                            size_t errlen)
{
    char conf[512], name[32];
    snprintf(conf, sizeof conf, "%s/sentinel%d.conf", o->dir, i);
    snprintf(name, sizeof name, "sentinel%d", i);
    FILE *f = fopen(conf, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write", conf);
        return -1;
    }
    /* one file per Sentinel, which it rewrites; its port, address and
     * directory come from pk_redis_start's options */
    fprintf(f,
            "sentinel monitor %s 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds %s %d\n"
            "sentinel failover-timeout %s %d\n"
            "sentinel parallel-syncs %s 1\n",
            PK_HA_NAME, master_port, PK_HA_NAME, o->down_after_ms, PK_HA_NAME,
            o->failover_timeout_ms, PK_HA_NAME);
    fclose(f);
    const char *args[] = {"--sentinel", NULL};
    return start_redis(o, name, conf, args, port, err, errlen);
}

static int has_line(int port, int argc, const char *const *argv, const char *needle)
{
    char out[8192];
    return pk_redis_query(port, 500, argc, argv, out, sizeof out) == 1 && strstr(out, needle);
}

/* Polls cond(h, arg) every 50 ms up to ms, or until *stop. */
static int wait_for(pk_ha *h, int (*cond)(pk_ha *, int), int arg, int ms,
                    volatile sig_atomic_t *stop)
{
    for (long long end = lc_now_ms() + ms; lc_now_ms() < end && !(stop && *stop); pk_sleep_ms(50))
        if (cond(h, arg))
            return 1;
    return 0;
}

static int linked(pk_ha *h, int i)
{
    const char *argv[] = {"INFO", "replication"};
    return has_line(h->replica_port[i], 2, argv, "master_link_status:up");
}

static int sentinel_ready(pk_ha *h, int i)
{
    const char *argv[] = {"SENTINEL", "master", PK_HA_NAME};
    char slaves[32];
    snprintf(slaves, sizeof slaves, "num-slaves\n%d\n", h->replicas);
    char out[8192];
    return pk_redis_query(h->sentinel_port[i], 500, 3, argv, out, sizeof out) == 1 &&
           strstr(out, slaves) && strstr(out, "num-other-sentinels\n2\n");
}

int pk_ha_start(pk_ha *h, const pk_ha_opts *o, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    h->replicas = o->replicas == 2 ? 2 : 1;
    h->master_pid = start_redis(o, "master", NULL, NULL, &h->master_port, err, errlen);
    if (h->master_pid < 0)
        goto fail;
    h->addr_port = h->master_port;
    if (o->fronted && !(h->front = pk_fwd_start(h->master_port, &h->addr_port, err, errlen)))
        goto fail;
    for (int i = 0; i < h->replicas; i++) {
        int to = h->master_port;
        if (o->proxied && !(h->link[i] = pk_fwd_start(h->master_port, &to, err, errlen)))
            goto fail;
        char tos[16], name[32], prio[16];
        snprintf(tos, sizeof tos, "%d", to);
        snprintf(name, sizeof name, "replica%d", i + 1);
        snprintf(prio, sizeof prio, "%d", o->replica_priority[i]);
        const char *args[] = {
            "--replicaof", "127.0.0.1",
            tos,           o->replica_priority[i] > 0 ? "--replica-priority" : NULL,
            prio,          NULL};
        h->replica_pid[i] = start_redis(o, name, NULL, args, &h->replica_port[i], err, errlen);
        if (h->replica_pid[i] < 0)
            goto fail;
        if (!wait_for(h, linked, i, 10000, o->stop)) {
            if (o->stop && *o->stop)
                snprintf(err, errlen, "interrupted");
            else
                snprintf(err, errlen, "replica %d: no link to the master within 10 s", i + 1);
            goto fail;
        }
    }
    size_t used = 0;
    for (int i = 0; i < PK_HA_SENTINELS; i++) {
        h->sentinel_pid[i] = start_sentinel(o, i + 1, h->addr_port, &h->sentinel_port[i], err,
                                            errlen);
        if (h->sentinel_pid[i] < 0)
            goto fail;
        used += (size_t)snprintf(h->sentinels + used, sizeof h->sentinels - used, "%s127.0.0.1:%d",
                                 i ? "," : "", h->sentinel_port[i]);
    }
    for (int i = 0; i < PK_HA_SENTINELS; i++) {
        if (!wait_for(h, sentinel_ready, i, 15000, o->stop)) {
            if (o->stop && *o->stop)
                snprintf(err, errlen, "interrupted");
            else
                snprintf(err, errlen,
                         "sentinel %d: did not see the replicas and the others in 15 s", i + 1);
            goto fail;
        }
    }
    return 0;
fail:
    pk_ha_stop(h);
    return -1;
}

void pk_ha_freeze(pk_ha *h, int frozen)
{
    for (int i = 0; i < h->replicas; i++)
        if (h->link[i])
            pk_fwd_freeze(h->link[i], frozen);
}

void pk_ha_freeze_link(pk_ha *h, int i, int frozen)
{
    if (i >= 0 && i < h->replicas && h->link[i])
        pk_fwd_freeze(h->link[i], frozen);
}

void pk_ha_freeze_front(pk_ha *h, int frozen)
{
    if (h->front)
        pk_fwd_freeze(h->front, frozen);
}

int pk_ha_master_port(const pk_ha *h)
{
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", PK_HA_NAME};
    for (int i = 0; i < PK_HA_SENTINELS; i++) {
        char out[128];
        if (h->sentinel_port[i] > 0 &&
            pk_redis_query(h->sentinel_port[i], 300, 3, argv, out, sizeof out) == 1) {
            const char *nl = strchr(out, '\n');
            if (nl)
                return atoi(nl + 1);
        }
    }
    return -1;
}

void pk_ha_stop(pk_ha *h)
{
    for (int i = 0; i < PK_HA_SENTINELS; i++)
        if (h->sentinel_pid[i] > 0)
            pk_stop(h->sentinel_pid[i], 2000);
    for (int i = 0; i < 2; i++) {
        if (h->replica_pid[i] > 0)
            pk_stop(h->replica_pid[i], 2000);
        pk_fwd_stop(h->link[i]);
        h->link[i] = NULL;
        h->replica_pid[i] = 0;
    }
    if (h->master_pid > 0)
        pk_stop(h->master_pid, 2000);
    pk_fwd_stop(h->front);
    h->front = NULL;
    memset(h->sentinel_pid, 0, sizeof h->sentinel_pid);
    h->master_pid = 0;
}
