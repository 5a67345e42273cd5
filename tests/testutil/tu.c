/* tu.c — see tu.h. */
#include "tu.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

int64_t tu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tu_slack(int64_t ms)
{
    const char *f = getenv("MIAOSHA_TEST_TIME_FACTOR");
    double factor = f ? atof(f) : 1.0;
    return factor > 1.0 ? (int64_t)(ms * factor) : ms;
}

void tu_sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
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

static int port_answers(int port)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

int tu_redis_start(tu_redis *r, int keep_port, const char *const *extra_args)
{
    const char *server = getenv("MIAOSHA_REDIS_SERVER");
    if (!server)
        server = "redis-server";
    if (!keep_port) {
        snprintf(r->dir, sizeof r->dir, "/tmp/miaosha-tu-redis-XXXXXX");
        if (!mkdtemp(r->dir))
            return -1;
    }
    srand((unsigned)(getpid() ^ tu_now_ms()));
    for (int attempt = 0; attempt < 20; attempt++) {
        if (!keep_port) {
            r->port = 20000 + rand() % 30000;
            if (port_answers(r->port))
                continue;
        }
        char port[16];
        snprintf(port, sizeof port, "%d", r->port);
        const char *argv[64] = {server, "--port", port, "--bind", "127.0.0.1", "--dir", r->dir,
                                "--save", "", "--appendonly", "no", "--daemonize", "no",
                                "--loglevel", "warning", "--logfile", ""};
        int n = 17;
        for (int i = 0; extra_args && extra_args[i] && n < 62; i++)
            argv[n++] = extra_args[i];
        argv[n] = NULL;
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            /* Dies with the test, however the test ends (a failed
             * TU_REQUIRE, a crash, a timeout kill): no server left behind. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() == 1)
                _exit(127); /* the test already died before prctl */
            int devnull = open("/dev/null", O_WRONLY);
            if (devnull >= 0) {
                dup2(devnull, 1);
                dup2(devnull, 2);
            }
            execvp(server, (char *const *)argv);
            _exit(127);
        }
        for (int i = 0; i < 100; i++) {
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid)
                break; /* exited: port taken or bad args */
            if (port_answers(r->port)) {
                r->pid = pid;
                return 0;
            }
            tu_sleep_ms(50);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (keep_port)
            tu_sleep_ms(200); /* the old socket may linger briefly */
    }
    return -1;
}

void tu_redis_kill(tu_redis *r, int hard)
{
    if (r->pid > 0) {
        kill(r->pid, hard ? SIGKILL : SIGTERM);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

void tu_redis_stop(tu_redis *r)
{
    tu_redis_kill(r, 1);
    if (r->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0) {
        }
        r->dir[0] = 0;
    }
}

static redisReply *vcommand(int port, const char *fmt, va_list ap)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        r = redisvCommand(c, fmt, ap);
    }
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
