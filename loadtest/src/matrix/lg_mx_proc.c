/* lg_mx_proc.c — the matrix's processes; see lg_mx_proc.h. */
#include "lg_mx_proc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pk_http.h"
#include "pk_proc.h"
#include "pk_redis.h"

void lg_mx_log(const mctx *x, const char *fmt, ...)
{
    if (!x->cfg->log)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("matrix: ", x->cfg->log);
    vfprintf(x->cfg->log, fmt, ap);
    fputc('\n', x->cfg->log);
    fflush(x->cfg->log);
    va_end(ap);
}

int lg_mx_stopped(const mctx *x)
{
    return x->cfg->stop && *x->cfg->stop;
}

long long lg_mx_bound(const mctx *x, long long ms)
{
    double f = x->cfg->time_factor >= 1.0 ? x->cfg->time_factor : 1.0;
    return (long long)((double)ms * f);
}

int lg_mx_instance_spawn(mctx *x, instance *in, char *err, size_t errlen)
{
    if (in->port <= 0)
        in->port = pk_free_port();
    if (in->port <= 0) {
        snprintf(err, errlen, "no free port");
        return -1;
    }
    in->generation++;
    char port[16], id[64], logp[PATH_MAX + 64];
    snprintf(port, sizeof port, "%d", in->port);
    snprintf(id, sizeof id, "%s-g%d", in->id, in->generation);
    snprintf(logp, sizeof logp, "%s/%s.log", x->logdir, in->id);
    const char *argv[16 + LG_INSTANCE_MAX_EXTRA + LG_MATRIX_MAX_ARGS];
    int n = 0;
    argv[n++] = x->cfg->server;
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--redis";
    argv[n++] = x->redis_addr;
    argv[n++] = "--instance-id";
    argv[n++] = id;
    for (int i = 0; i < in->nextra; i++)
        argv[n++] = in->extra[i];
    if (x->lock_on) {
        /* A node timeout far above a loaded machine's stalls: only a dead
         * lock master fails a round. */
        argv[n++] = "--set";
        argv[n++] = x->lock_nodes;
        argv[n++] = "--set";
        argv[n++] = "redlock.node_timeout_ms=250";
    }
    for (int i = 0; i < x->cfg->nserver_args; i++)
        argv[n++] = x->cfg->server_args[i];
    argv[n] = NULL;
    in->pid = pk_spawn(argv, logp, 0, err, errlen);
    if (in->pid < 0) {
        in->pid = 0;
        return -1;
    }
    snprintf(in->base, sizeof in->base, "http://127.0.0.1:%d", in->port);
    return 0;
}

int lg_mx_instance_poll(instance *in)
{
    if (in->pid <= 0)
        return -1;
    if (pk_http_status(in->port, "/healthz", 500) == 200)
        return 1;
    if (pk_wait_exit(in->pid, 0)) {
        in->pid = 0;
        return -1;
    }
    return 0;
}

int lg_mx_instance_wait(mctx *x, instance *in, long long ms)
{
    if (in->pid <= 0)
        return -1;
    pk_http_wait_opts w;
    pk_http_wait_opts_init(&w);
    w.timeout_ms = (int)ms;
    w.try_timeout_ms = 500;
    w.stop = x->cfg->stop;
    int st = pk_http_wait_healthy(in->pid, &in->port, &w, NULL);
    if (st == PK_HTTP_EXITED)
        in->pid = 0;
    return st == PK_HTTP_HEALTHY ? 1 : st == PK_HTTP_EXITED ? -1 : 0;
}

int lg_mx_instance_start(mctx *x, instance *in, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt > 0)
            in->port = 0; /* the port may be taken: pick another */
        if (lg_mx_instance_spawn(x, in, err, errlen) < 0)
            return -1;
        int st = lg_mx_instance_wait(x, in, 10000);
        if (st == 1)
            return 0;
        if (st == 0)
            lg_mx_instance_stop(in);
        if (lg_mx_stopped(x))
            break;
        if (st == 0) {
            snprintf(err, errlen, "%s did not answer /healthz 200 within 10 s (log: %s/%s.log)",
                     x->cfg->server, x->logdir, in->id);
            return -1;
        }
        snprintf(err, errlen, "%s exited at start (log: %s/%s.log)", x->cfg->server, x->logdir,
                 in->id);
    }
    if (lg_mx_stopped(x))
        snprintf(err, errlen, "interrupted");
    return -1;
}

void lg_mx_instance_stop(instance *in)
{
    if (in->pid > 0)
        pk_stop(in->pid, 5000);
    in->pid = 0;
}

/* Starts a redis-server (x->cfg->redis_server) with args on *port (a free
 * one per attempt when 0), in dir, its log in logp; 0 with *port and *pid
 * set, or -1 with err (both left as they were). */
static int start_redis(mctx *x, int *port, pid_t *pid, const char *dir, const char *const *args,
                       const char *logp, int attempts, char *err, size_t errlen)
{
    pk_redis_opts o;
    pk_redis_opts_init(&o);
    o.server = x->cfg->redis_server;
    o.port = *port;
    o.dir = dir;
    o.args = args;
    o.logpath = logp;
    o.attempts = attempts;
    o.timeout_ms = 10000;
    o.stop = x->cfg->stop;
    int got = 0;
    pid_t p = pk_redis_start(&o, &got, err, errlen);
    if (p < 0)
        return -1;
    *pid = p;
    *port = got;
    return 0;
}

/* The private redis-server on x->redis_port (a free one per attempt when
 * 0). */
static int redis_spawn(mctx *x, int attempts, char *err, size_t errlen)
{
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/redis.log", x->logdir);
    /* AOF for the fault scenarios: a restart must reload every write that
     * was acknowledged (appendfsync always) */
    const char *args[] = {"--appendonly",
                          x->redis_aof ? "yes" : "no",
                          "--appendfsync",
                          "always",
                          "--maxclients",
                          "10000",
                          NULL};
    if (start_redis(x, &x->redis_port, &x->redis_pid, x->redis_dir, args, logp, attempts, err,
                    errlen) < 0)
        return -1;
    snprintf(x->redis_addr, sizeof x->redis_addr, "127.0.0.1:%d", x->redis_port);
    return 0;
}

int lg_mx_redis_start(mctx *x, char *err, size_t errlen)
{
    if (x->cfg->redis) {
        const char *colon = strrchr(x->cfg->redis, ':');
        char *end = NULL;
        long port = colon && colon[1] >= '0' && colon[1] <= '9' ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || end == NULL || *end != '\0' || port <= 0 || port > 65535) {
            snprintf(err, errlen, "--redis: expected host:port, got '%s'", x->cfg->redis);
            return -1;
        }
        snprintf(x->redis_addr, sizeof x->redis_addr, "%s", x->cfg->redis);
        x->redis_port = (int)port;
        return 0;
    }
    snprintf(x->redis_dir, sizeof x->redis_dir, "/tmp/miaosha-matrix-redis-XXXXXX");
    if (!mkdtemp(x->redis_dir)) {
        snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
        x->redis_dir[0] = 0;
        return -1;
    }
    x->redis_port = 0;
    return redis_spawn(x, 5, err, errlen);
}

int lg_mx_redis_spawn(mctx *x, char *err, size_t errlen)
{
    return redis_spawn(x, 1, err, errlen);
}

int lg_mx_lock_spawn(mctx *x, int i, char *err, size_t errlen)
{
    char logp[PATH_MAX + 32];
    snprintf(logp, sizeof logp, "%s/lock-master-%d.log", x->logdir, i);
    const char *args[] = {"--appendonly", "no", "--maxclients", "10000", NULL};
    return start_redis(x, &x->lock_port[i], &x->lock_pid[i], x->lock_dir[i], args, logp,
                       x->lock_port[i] > 0 ? 3 : 5, err, errlen);
}

void lg_mx_lock_kill(mctx *x, int i)
{
    pk_kill(x->lock_pid[i]);
    x->lock_pid[i] = 0;
}

int lg_mx_locks_start(mctx *x, char *err, size_t errlen)
{
    size_t used = (size_t)snprintf(x->lock_nodes, sizeof x->lock_nodes, "redlock.nodes=");
    for (int i = 0; i < LG_LOCK_MASTERS; i++) {
        snprintf(x->lock_dir[i], sizeof x->lock_dir[i], "/tmp/miaosha-matrix-lock-XXXXXX");
        if (!mkdtemp(x->lock_dir[i])) {
            snprintf(err, errlen, "mkdtemp: %s", strerror(errno));
            x->lock_dir[i][0] = 0;
            return -1;
        }
        x->lock_port[i] = 0;
        if (lg_mx_lock_spawn(x, i, err, errlen) < 0)
            return -1;
        used += (size_t)snprintf(x->lock_nodes + used, sizeof x->lock_nodes - used,
                                 "%s127.0.0.1:%d", i ? "," : "", x->lock_port[i]);
    }
    x->lock_on = 1;
    return 0;
}

void lg_mx_shutdown(mctx *x)
{
    if (x->redis_pid > 0)
        pk_stop(x->redis_pid, 3000);
    x->redis_pid = 0;
    for (int i = 0; i < LG_LOCK_MASTERS; i++) {
        if (x->lock_pid[i] > 0)
            pk_stop(x->lock_pid[i], 3000);
        x->lock_pid[i] = 0;
        pk_rm_tree(x->lock_dir[i]);
        x->lock_dir[i][0] = 0;
    }
    pk_kill_all(2000);
    pk_rm_tree(x->redis_dir); /* dump.rdb, appendonlydir/ */
    x->redis_dir[0] = 0;
}

int lg_mx_targets(lg_run_cfg *rc, const instance *ins, int nins, char *err, size_t errlen)
{
    for (int i = 0; i < nins && i < LG_MAX_TARGETS; i++) {
        char e2[256];
        if (lg_url_parse(ins[i].base, &rc->targets[i], e2, sizeof e2) < 0) {
            snprintf(err, errlen, "%s", e2);
            return -1;
        }
    }
    rc->ntargets = nins < LG_MAX_TARGETS ? nins : LG_MAX_TARGETS;
    return 0;
}
