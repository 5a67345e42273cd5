/* lc_pipe.c — the caller's commands that ride in a lock's round trip
 * (lc_pipe, lockcore.h): formatting them, handing their replies over.
 *
 * Sending them is lc_conn.c's lc__trip; which lock command they go with, and
 * what happens to their replies on each status, is lc_lock.c's. This file
 * uses no other lockcore source.
 */
#include "lockcore.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void lc_pipe_init(lc_pipe *p)
{
    memset(p, 0, sizeof *p);
}

static lc_status pipe_add(lc_pipe *p, char *cmd, long long len)
{
    if (len == -1)
        return LC_NOMEM;
    if (len < 0 || !cmd)
        return LC_MISUSE; /* -2: an invalid format string */
    if (len == 4 && memcmp(cmd, "*0\r\n", 4) == 0) {
        /* "" or blanks: a command of no arguments, which Redis never
         * answers (the round trip would wait out its timeout) */
        free(cmd);
        return LC_MISUSE;
    }
    p->cmd[p->n] = cmd;
    p->len[p->n] = (size_t)len;
    p->n++;
    return LC_OK;
}

lc_status lc_pipe_append(lc_pipe *p, const char *fmt, ...)
{
    if (!p || !fmt || p->n < 0 || p->n >= LC_PIPE_MAX)
        return LC_MISUSE;
    char *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    int len = redisvFormatCommand(&cmd, fmt, ap);
    va_end(ap);
    return pipe_add(p, cmd, len);
}

lc_status lc_pipe_append_argv(lc_pipe *p, int argc, const char **argv, const size_t *argvlen)
{
    if (!p || argc < 1 || !argv || p->n < 0 || p->n >= LC_PIPE_MAX)
        return LC_MISUSE;
    for (int i = 0; i < argc; i++)
        if (!argv[i])
            return LC_MISUSE;
    char *cmd = NULL;
    long long len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    return pipe_add(p, cmd, len);
}

redisReply *lc_pipe_take(lc_pipe *p, int i)
{
    if (!p || i < 0 || i >= p->n)
        return NULL;
    redisReply *r = p->reply[i];
    p->reply[i] = NULL;
    return r;
}

void lc_pipe_clear(lc_pipe *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n && i < LC_PIPE_MAX; i++) {
        if (p->reply[i])
            freeReplyObject(p->reply[i]);
        redisFreeCommand(p->cmd[i]);
    }
    lc_pipe_init(p);
}
