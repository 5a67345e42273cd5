/* pk_redis.c — private redis-servers and one-shot commands (pk_redis.h). */
#include "pk_redis.h"

#include <hiredis/hiredis.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "pk_proc.h"

redisContext *pk_redis_connect(int port, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
        return c;
    if (c)
        redisFree(c);
    return NULL;
}

int pk_redis_ping(int port, int timeout_ms)
{
    redisContext *c = pk_redis_connect(port, timeout_ms);
    redisReply *r = c ? redisCommand(c, "PING") : NULL;
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    return ok;
}

void pk_redis_opts_init(pk_redis_opts *o)
{
    memset(o, 0, sizeof *o);
    o->server = "redis-server";
    o->attempts = 1;
    o->timeout_ms = 10000;
    o->retry_pause_ms = 200;
}

static int stopped(const pk_redis_opts *o)
{
    return o->stop && *o->stop;
}

/* 1 when the server answering on port is process pid (INFO server's
 * process_id): a port taken by another server between pk_free_port and
 * our bind answers PING too, while ours exits. */
static int answered_by(int port, pid_t pid)
{
    const char *argv[] = {"INFO", "server"};
    char out[4096];
    if (pk_redis_query(port, 500, 2, argv, out, sizeof out) != 1)
        return 0;
    const char *f = strstr(out, "process_id:");
    return f != NULL && atol(f + strlen("process_id:")) == (long)pid;
}

pid_t pk_redis_start(const pk_redis_opts *o, int *port, char *err, size_t errlen)
{
    const char *server = o->server ? o->server : "redis-server";
    int attempts = o->attempts > 0 ? o->attempts : 1;
    snprintf(err, errlen, "interrupted");
    for (int attempt = 0; attempt < attempts && !stopped(o); attempt++) {
        if (attempt > 0 && o->port > 0)
            pk_sleep_ms(o->retry_pause_ms);
        int p = o->port > 0 ? o->port : pk_free_port();
        if (p <= 0) {
            snprintf(err, errlen, "no free port");
            continue;
        }
        char ports[16];
        snprintf(ports, sizeof ports, "%d", p);
        const char *argv[64];
        int n = 0;
        argv[n++] = server;
        if (o->conf)
            argv[n++] = o->conf; /* redis-server takes the file first, then options */
        /* --daemonize no: a daemon calls setsid() (see pk_proc.h) */
        const char *own[] = {"--port", ports,    "--bind", "127.0.0.1",   "--dir",
                             o->dir,   "--save", "",       "--daemonize", "no"};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            argv[n++] = own[i];
        for (int i = 0; o->args && o->args[i] && n < 63; i++)
            argv[n++] = o->args[i];
        argv[n] = NULL;
        pid_t pid = pk_spawn(argv, o->logpath, o->flags, err, errlen);
        if (pid < 0)
            return -1;
        long long end = lc_now_ms() + o->timeout_ms;
        int exited = 0, foreign = 0;
        while (!stopped(o)) {
            if (pk_redis_ping(p, 200)) {
                if (answered_by(p, pid)) {
                    *port = p;
                    return pid;
                }
                foreign = 1;
                break;
            }
            if ((exited = pk_wait_exit(pid, 0)) != 0 || lc_now_ms() >= end)
                break;
            pk_sleep_ms(50);
        }
        if (!exited)
            pk_stop(pid, 1000); /* never a reaped pid: it may be another process's now */
        snprintf(err, errlen, "could not start %s on port %d: %s (see %s)", server, p,
                 foreign      ? "another server answers there"
                 : exited     ? "it exited"
                 : stopped(o) ? "interrupted"
                              : "no PING answer",
                 o->logpath ? o->logpath : "no log");
    }
    return -1;
}

/* Appends a scalar reply to out (truncating); 1 value, 0 nil, -1 other. */
static int append_scalar(const redisReply *e, char *out, size_t outlen, size_t *used)
{
    char num[32];
    const char *v;
    size_t len;
    switch (e->type) {
    case REDIS_REPLY_NIL: return 0;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        v = e->str;
        len = e->len;
        break;
    case REDIS_REPLY_INTEGER:
        len = (size_t)snprintf(num, sizeof num, "%lld", e->integer);
        v = num;
        break;
    default: return -1;
    }
    size_t room = outlen - *used - 1;
    if (len > room)
        len = room;
    memcpy(out + *used, v, len);
    *used += len;
    out[*used] = 0;
    return 1;
}

int pk_redis_query(int port, int timeout_ms, int argc, const char *const argv[], char *out,
                   size_t outlen)
{
    if (outlen < 1)
        return -1;
    out[0] = 0;
    redisContext *c = pk_redis_connect(port, timeout_ms);
    redisReply *r = c ? redisCommandArgv(c, argc, (const char **)argv, NULL) : NULL;
    int rc = -1;
    size_t used = 0;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        rc = 1;
        for (size_t i = 0; i < r->elements && rc == 1; i++) {
            if (i > 0 && used + 1 < outlen) {
                out[used++] = '\n';
                out[used] = 0;
            }
            if (append_scalar(r->element[i], out, outlen, &used) < 0)
                rc = -1;
        }
    } else if (r) {
        rc = append_scalar(r, out, outlen, &used);
    }
    if (r)
        freeReplyObject(r);
    if (c)
        redisFree(c);
    if (rc < 0)
        out[0] = 0;
    return rc;
}
