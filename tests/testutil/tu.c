/* tu.c — see tu.h. Starting and stopping processes is the process kit's
 * (proc/: pk_proc.h, pk_redis.h), shared with the load generator's matrix;
 * this file only gives it the suite's defaults. */
#include "tu.h"

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pk_proc.h"
#include "pk_redis.h"

_Atomic long tu_passed;
_Atomic long tu_failed;

int tu_check_(int ok, const char *expr, const char *file, int line, const char *fmt, ...)
{
    if (ok) {
        tu_passed++;
        return 1;
    }
    tu_failed++;
    va_list ap;
    va_start(ap, fmt);
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "FAIL %s:%d: %s: %s\n", file, line, expr, msg);
    return 0;
}

int tu_done(void)
{
    long p = tu_passed, f = tu_failed;
    printf("%ld passed, %ld failed\n", p, f);
    fflush(stdout);
    return f == 0 && p > 0 ? 0 : 1;
}

int64_t tu_slack(int64_t ms)
{
    const char *f = getenv("MIAOSHA_TEST_TIME_FACTOR");
    double factor = f ? atof(f) : 1.0;
    return factor > 1.0 ? (int64_t)(ms * factor) : ms;
}

void tu_sleep_ms(int64_t ms)
{
    pk_sleep_ms((long long)ms);
}

int tu_redis_port(void)
{
    const char *dir = getenv("MIAOSHA_TEST_REDIS_DIR");
    char path[512];
    int port = 0;
    if (!dir) {
        fprintf(stderr, "tu: MIAOSHA_TEST_REDIS_DIR is not set: run the test through ctest\n");
        _exit(1);
    }
    snprintf(path, sizeof path, "%s/port", dir);
    FILE *f = fopen(path, "r");
    if (!f || fscanf(f, "%d", &port) != 1 || port <= 0) {
        fprintf(stderr, "tu: no redis-server fixture (%s): the suite needs redis-server\n", path);
        _exit(1);
    }
    fclose(f);
    return port;
}

int tu_redis_start(tu_redis *r, int keep_port, const char *const *extra_args)
{
    if (!keep_port) {
        snprintf(r->dir, sizeof r->dir, "/tmp/miaosha-tu-redis-XXXXXX");
        if (!mkdtemp(r->dir))
            return -1;
        r->port = 0;
    }
    const char *args[64] = {"--appendonly", "no", "--loglevel", "warning", "--logfile", ""};
    int n = 6;
    for (int i = 0; extra_args && extra_args[i] && n < 63; i++)
        args[n++] = extra_args[i];
    args[n] = NULL;
    pk_redis_opts o;
    pk_redis_opts_init(&o);
    o.server = getenv("MIAOSHA_REDIS_SERVER");
    o.port = keep_port ? r->port : 0;
    o.dir = r->dir;
    o.args = args;
    /* Dies with the test, however the test ends (a failed TU_REQUIRE, a
     * crash, a timeout kill): no server left behind. */
    o.flags = PK_SPAWN_DIE_WITH_PARENT;
    o.attempts = 20;
    o.timeout_ms = 5000;
    char err[256];
    int port = 0;
    pid_t pid = pk_redis_start(&o, &port, err, sizeof err);
    if (pid < 0) {
        fprintf(stderr, "tu_redis_start: %s\n", err);
        return -1;
    }
    r->pid = pid;
    r->port = port;
    return 0;
}

void tu_redis_kill(tu_redis *r, int hard)
{
    if (r->pid > 0) {
        if (hard)
            pk_kill(r->pid);
        else
            pk_stop(r->pid, (int)tu_slack(10000));
        r->pid = 0;
    }
}

void tu_redis_stop(tu_redis *r)
{
    tu_redis_kill(r, 1);
    if (r->dir[0]) {
        pk_rm_tree(r->dir);
        r->dir[0] = 0;
    }
}

static redisReply *vcommand(int port, const char *fmt, va_list ap)
{
    redisContext *c = pk_redis_connect(port, 2000);
    redisReply *r = c ? redisvCommand(c, fmt, ap) : NULL;
    if (c)
        redisFree(c);
    return r;
}

int64_t tu_redis_int(int port, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcommand(port, fmt, ap);
    va_end(ap);
    int64_t v = INT64_MIN;
    if (r) {
        switch (r->type) {
        case REDIS_REPLY_INTEGER: v = r->integer; break;
        case REDIS_REPLY_STRING: {
            char *end = NULL;
            long long n = strtoll(r->str, &end, 10);
            v = r->len > 0 && end && *end == 0 ? (int64_t)n : (int64_t)r->len;
            break;
        }
        case REDIS_REPLY_ARRAY: v = (int64_t)r->elements; break;
        case REDIS_REPLY_NIL: v = -1; break;
        default: break;
        }
        freeReplyObject(r);
    }
    return v;
}

int tu_redis_str(int port, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcommand(port, fmt, ap);
    va_end(ap);
    int rc = -1;
    buf[0] = 0;
    if (r) {
        if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) {
            snprintf(buf, len, "%.*s", (int)r->len, r->str);
            rc = 0;
        } else if (r->type == REDIS_REPLY_NIL) {
            rc = 0;
        }
        freeReplyObject(r);
    }
    return rc;
}

long long tu_redis_info_num(redisContext *ctx, int port, const char *section, const char *field)
{
    redisContext *own = ctx ? NULL : redisConnect("127.0.0.1", port);
    redisContext *c = ctx ? ctx : own;
    redisReply *r = c && !c->err ? redisCommand(c, "INFO %s", section) : NULL;
    long long n = r && r->type == REDIS_REPLY_STRING ? tu_info_field(r->str, field) : -1;
    freeReplyObject(r);
    if (own)
        redisFree(own);
    return n;
}

long long tu_info_field(const char *info, const char *field)
{
    const char *at = strstr(info, field);
    return at != NULL ? atoll(at + strlen(field)) : 0;
}
