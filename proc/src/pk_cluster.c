/* pk_cluster.c — a private Redis Cluster (pk_cluster.h). */
#include "pk_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "pk_proc.h"
#include "pk_redis.h"

#define BUS_OFFSET 10000 /* Redis's cluster bus: the node's port + 10000 */
#define PORT_LO 20000    /* below the kernel's ephemeral range's usual start */
#define PORT_HI 55535    /* so the bus port stays a port */
#define CREATE_TIMEOUT_MS 30000

void pk_cluster_opts_init(pk_cluster_opts *o)
{
    memset(o, 0, sizeof *o);
    o->masters = 3;
    o->replicas = 1;
    o->node_timeout_ms = 1000;
    o->timeout_ms = 30000;
}

static int stopped(volatile sig_atomic_t *stop)
{
    return stop && *stop;
}

/* 1 when nothing listens on 127.0.0.1:port (a bind succeeds). */
static int bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A port whose bus port is free too, not one of the taken ones: random in
 * PORT_LO..PORT_HI (the kernel's own choice for port 0 may lie above
 * 55535). -1 when 200 tries found none. */
static int node_port(unsigned *seed, const int *taken, int ntaken)
{
    for (int tries = 0; tries < 200; tries++) {
        int p = PORT_LO + (int)(rand_r(seed) % (PORT_HI - PORT_LO + 1));
        int dup = 0;
        for (int i = 0; i < ntaken; i++)
            dup |= taken[i] == p || taken[i] + BUS_OFFSET == p || taken[i] == p + BUS_OFFSET;
        if (!dup && bindable(p) && bindable(p + BUS_OFFSET))
            return p;
    }
    return -1;
}

static int start_node(pk_cluster *c, int i, const pk_cluster_opts *o, unsigned *seed, char *err,
                      size_t errlen)
{
    char ndir[600], log[640], timeout[24], conf[64];
    snprintf(timeout, sizeof timeout, "%d", o->node_timeout_ms);
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = node_port(seed, c->port, i);
        if (port < 0) {
            snprintf(err, errlen, "no free port pair (port, port + 10000) below 55535");
            return -1;
        }
        snprintf(ndir, sizeof ndir, "%s/node-%d", c->dir, port);
        snprintf(log, sizeof log, "%s/node-%d.log", c->dir, port);
        snprintf(conf, sizeof conf, "nodes-%d.conf", port);
        if (mkdir(ndir, 0755) != 0) {
            snprintf(err, errlen, "mkdir %s failed", ndir);
            return -1;
        }
        const char *args[40];
        int n = 0;
        args[n++] = "--cluster-enabled";
        args[n++] = "yes";
        args[n++] = "--cluster-config-file";
        args[n++] = conf;
        args[n++] = "--cluster-node-timeout";
        args[n++] = timeout;
        args[n++] = "--appendonly";
        args[n++] = "no";
        /* A replica of a fresh master syncs at once, not after 5 s. */
        args[n++] = "--repl-diskless-sync-delay";
        args[n++] = "0";
        for (int k = 0; o->args && o->args[k] && k < 16; k++)
            args[n++] = o->args[k];
        args[n] = NULL;
        pk_redis_opts ro;
        pk_redis_opts_init(&ro);
        ro.server = c->server;
        ro.port = port;
        ro.dir = ndir;
        ro.args = args;
        ro.logpath = log;
        ro.flags = PK_SPAWN_DIE_WITH_PARENT;
        ro.stop = o->stop;
        int got = 0;
        pid_t pid = pk_redis_start(&ro, &got, err, errlen);
        if (pid > 0) {
            c->pid[i] = pid;
            c->port[i] = got;
            return 0;
        }
        if (stopped(o->stop))
            return -1;
        pk_rm_tree(ndir); /* the port was taken meanwhile: another pair */
    }
    return -1;
}

int pk_cluster_start(pk_cluster *c, const pk_cluster_opts *o, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    int n = o->masters * (1 + o->replicas);
    if (o->masters < 3 || o->replicas < 0 || o->replicas > 3 || n > PK_CLUSTER_MAX_NODES ||
        o->dir == NULL) {
        snprintf(err, errlen,
                 "a cluster needs 3.. masters, 0..3 replicas each, at most %d nodes "
                 "and a directory",
                 PK_CLUSTER_MAX_NODES);
        return -1;
    }
    snprintf(c->server, sizeof c->server, "%s", o->server ? o->server : "redis-server");
    snprintf(c->dir, sizeof c->dir, "%s/cluster.XXXXXX", o->dir);
    if (mkdtemp(c->dir) == NULL) {
        snprintf(err, errlen, "mkdtemp under %s failed", o->dir);
        c->dir[0] = '\0';
        return -1;
    }
    c->masters = o->masters;
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    for (int i = 0; i < n; i++) {
        if (start_node(c, i, o, &seed, err, errlen) != 0) {
            pk_cluster_stop(c);
            return -1;
        }
        c->n = i + 1;
    }
    /* redis-cli --cluster create 127.0.0.1:P ... --cluster-replicas R
     * --cluster-yes: the first `masters` addresses become the masters. */
    char addr[PK_CLUSTER_MAX_NODES][32], reps[8], log[600];
    const char *argv[PK_CLUSTER_MAX_NODES + 8];
    int a = 0;
    argv[a++] = o->cli ? o->cli : "redis-cli";
    argv[a++] = "--cluster";
    argv[a++] = "create";
    for (int i = 0; i < n; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", c->port[i]);
        argv[a++] = addr[i];
    }
    snprintf(reps, sizeof reps, "%d", o->replicas);
    argv[a++] = "--cluster-replicas";
    argv[a++] = reps;
    argv[a++] = "--cluster-yes";
    argv[a] = NULL;
    snprintf(log, sizeof log, "%s/create.log", c->dir);
    pid_t cli = pk_spawn(argv, log, PK_SPAWN_DIE_WITH_PARENT, err, errlen);
    int status = -1;
    if (cli > 0 && !pk_wait_status(cli, CREATE_TIMEOUT_MS, &status)) {
        pk_kill(cli);
        status = -1;
    }
    if (cli <= 0 || status != 0) {
        if (cli > 0)
            snprintf(err, errlen, "redis-cli --cluster create failed (see %s)", log);
        pk_cluster_stop(c);
        return -1;
    }
    if (!pk_cluster_wait_ok(c, o->timeout_ms, o->stop)) {
        snprintf(err, errlen, "the cluster did not reach cluster_state:ok within %d ms",
                 o->timeout_ms);
        pk_cluster_stop(c);
        return -1;
    }
    return 0;
}

/* 1 when the node at port says cluster_state:ok with every slot served. */
static int node_ok(int port)
{
    redisContext *ctx = pk_redis_connect(port, 500);
    if (ctx == NULL)
        return 0;
    redisReply *r = redisCommand(ctx, "CLUSTER INFO");
    int ok = r != NULL && r->type == REDIS_REPLY_STRING &&
             strstr(r->str, "cluster_state:ok") != NULL &&
             strstr(r->str, "cluster_slots_ok:16384") != NULL;
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return ok;
}

int pk_cluster_wait_ok(const pk_cluster *c, int timeout_ms, volatile sig_atomic_t *stop)
{
    long long end = lc_now_ms() + timeout_ms;
    for (;;) {
        int all = c->n > 0;
        for (int i = 0; i < c->n && all; i++)
            if (c->pid[i] > 0 && !node_ok(c->port[i]))
                all = 0;
        if (all)
            return 1;
        if (lc_now_ms() >= end || stopped(stop))
            return 0;
        pk_sleep_ms(50);
    }
}

int pk_cluster_slot_port(const pk_cluster *c, int slot)
{
    for (int i = 0; i < c->n; i++) {
        if (c->pid[i] <= 0)
            continue;
        redisContext *ctx = pk_redis_connect(c->port[i], 500);
        if (ctx == NULL)
            continue;
        redisReply *r = redisCommand(ctx, "CLUSTER SLOTS");
        int port = -1;
        /* [[start, end, [ip, port, id], replicas...], ...] */
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
            const redisReply *e = r->element[k];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 &&
                e->element[0]->integer <= slot && slot <= e->element[1]->integer &&
                e->element[2]->type == REDIS_REPLY_ARRAY && e->element[2]->elements >= 2)
                port = (int)e->element[2]->element[1]->integer;
        }
        if (r)
            freeReplyObject(r);
        redisFree(ctx);
        if (port > 0)
            return port;
    }
    return -1;
}

int pk_cluster_node_id(int port, char *id, size_t len)
{
    const char *argv[] = {"CLUSTER", "MYID"};
    return pk_redis_query(port, 2000, 2, argv, id, len) == 1 ? 0 : -1;
}

int pk_cluster_replica_of(const pk_cluster *c, int master_port)
{
    char want[32];
    snprintf(want, sizeof want, "master_port:%d\r", master_port);
    for (int i = 0; i < c->n; i++) {
        if (c->pid[i] <= 0 || c->port[i] == master_port)
            continue;
        char info[2048];
        const char *argv[] = {"INFO", "replication"};
        if (pk_redis_query(c->port[i], 1000, 2, argv, info, sizeof info) == 1 &&
            strstr(info, "role:slave") && strstr(info, want))
            return c->port[i];
    }
    return -1;
}

/* One command on a fresh connection to port that must answer +OK. */
static int ok_cmd(int port, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int ok_cmd(int port, char *err, size_t errlen, const char *fmt, ...)
{
    redisContext *ctx = pk_redis_connect(port, 5000);
    if (ctx == NULL) {
        snprintf(err, errlen, "127.0.0.1:%d does not answer", port);
        return -1;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        snprintf(err, errlen, "127.0.0.1:%d: %s", port,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : ctx->errstr);
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return ok ? 0 : -1;
}

int pk_cluster_migrate_begin(const pk_cluster *c, int slot, int to_port, int *from_port, char *err,
                             size_t errlen)
{
    int from = pk_cluster_slot_port(c, slot);
    char from_id[64], to_id[64];
    if (from <= 0 || pk_cluster_node_id(from, from_id, sizeof from_id) != 0 ||
        pk_cluster_node_id(to_port, to_id, sizeof to_id) != 0) {
        snprintf(err, errlen, "slot %d: its owner or 127.0.0.1:%d does not answer", slot, to_port);
        return -1;
    }
    if (from == to_port) {
        snprintf(err, errlen, "slot %d is on 127.0.0.1:%d already", slot, to_port);
        return -1;
    }
    if (ok_cmd(to_port, err, errlen, "CLUSTER SETSLOT %d IMPORTING %s", slot, from_id) != 0 ||
        ok_cmd(from, err, errlen, "CLUSTER SETSLOT %d MIGRATING %s", slot, to_id) != 0)
        return -1;
    *from_port = from;
    return 0;
}

int pk_cluster_migrate_keys(int slot, int from_port, int to_port, int max, char *err, size_t errlen)
{
    redisContext *ctx = pk_redis_connect(from_port, 5000);
    if (ctx == NULL) {
        snprintf(err, errlen, "127.0.0.1:%d does not answer", from_port);
        return -1;
    }
    redisReply *keys = redisCommand(ctx, "CLUSTER GETKEYSINSLOT %d %d", slot, max);
    int moved = -1;
    if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "CLUSTER GETKEYSINSLOT on 127.0.0.1:%d: %s", from_port,
                 keys && keys->type == REDIS_REPLY_ERROR ? keys->str : ctx->errstr);
    } else {
        moved = 0;
        for (size_t k = 0; k < keys->elements && moved >= 0; k++) {
            const redisReply *key = keys->element[k];
            redisReply *r = redisCommand(ctx, "MIGRATE 127.0.0.1 %d %b 0 5000", to_port, key->str,
                                         key->len);
            if (r != NULL && r->type == REDIS_REPLY_STATUS) {
                moved++;
            } else {
                snprintf(err, errlen, "MIGRATE %.*s: %s", (int)(key->len > 80 ? 80 : key->len),
                         key->str, r && r->type == REDIS_REPLY_ERROR ? r->str : ctx->errstr);
                moved = -1;
            }
            if (r)
                freeReplyObject(r);
        }
    }
    if (keys)
        freeReplyObject(keys);
    redisFree(ctx);
    return moved;
}

int pk_cluster_migrate_end(const pk_cluster *c, int slot, int from_port, int to_port, char *err,
                           size_t errlen)
{
    char to_id[64];
    if (pk_cluster_node_id(to_port, to_id, sizeof to_id) != 0) {
        snprintf(err, errlen, "127.0.0.1:%d does not answer", to_port);
        return -1;
    }
    if (ok_cmd(to_port, err, errlen, "CLUSTER SETSLOT %d NODE %s", slot, to_id) != 0 ||
        ok_cmd(from_port, err, errlen, "CLUSTER SETSLOT %d NODE %s", slot, to_id) != 0)
        return -1;
    for (int i = 0; i < c->n; i++) {
        if (c->pid[i] <= 0 || c->port[i] == to_port || c->port[i] == from_port)
            continue;
        char e2[160];
        (void)ok_cmd(c->port[i], e2, sizeof e2, "CLUSTER SETSLOT %d NODE %s", slot, to_id);
        /* a replica refuses it and learns the move from the cluster bus */
    }
    return 0;
}

void pk_cluster_kill(pk_cluster *c, int i)
{
    if (i < 0 || i >= c->n || c->pid[i] <= 0)
        return;
    pk_kill(c->pid[i]);
    c->pid[i] = 0;
}

void pk_cluster_stop(pk_cluster *c)
{
    for (int i = 0; i < c->n; i++) {
        if (c->pid[i] > 0)
            pk_stop(c->pid[i], 5000);
        c->pid[i] = 0;
    }
    if (c->dir[0])
        pk_rm_tree(c->dir);
    c->dir[0] = '\0';
    c->n = 0;
}
