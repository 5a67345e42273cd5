/* lc_conn.c — Redis connections: the caller's lc_conn handle, and the
 * connect / reuse / script-call helpers (lc_conn.h) that the watchdog and
 * subscriber threads also use for their own contexts.
 *
 * An lc_conn connects lazily and reconnects on the next call after any I/O error (the
 * hiredis context keeps ctx->err set) or when the socket turns out closed
 * by the peer before a command is sent (lc_redis_reuse), so a handle
 * outlives a Redis restart without the caller doing anything — and without
 * its first command after the restart failing.
 */
#include "lc_conn.h"

#include "lc_internal.h"
#include "lc_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

lc_status lc_conn_new(lc_client *c, lc_conn **out)
{
    if (!c || !out)
        return LC_MISUSE;
    lc_conn *conn = calloc(1, sizeof *conn);
    if (!conn) {
        *out = NULL;
        return LC_NOMEM;
    }
    conn->client = c;
    conn->rng = (unsigned)(lc_now_ms() ^ (uintptr_t)conn ^ (unsigned)getpid());
    *out = conn;
    return LC_OK;
}

void lc_conn_free(lc_conn *conn)
{
    if (!conn)
        return;
    if (conn->ctx)
        redisFree(conn->ctx);
    free(conn);
}

redisContext *lc_conn_redis(lc_conn *conn)
{
    return lc_redis_reuse(conn->client, &conn->ctx, conn->err);
}

lc_status lc_conn_ping(lc_conn *conn)
{
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    redisReply *r = redisCommand(ctx, "PING");
    lc_status s = r && r->type == REDIS_REPLY_STATUS ? LC_OK : LC_IO;
    if (s != LC_OK)
        lc_seterr(conn->err, "redis: %s", r ? r->str : ctx->errstr);
    if (r)
        freeReplyObject(r);
    return s;
}

const char *lc_conn_errstr(const lc_conn *conn)
{
    return conn->err;
}

/* --- connect, reuse, script call (lc_conn.h) ---------------------------- */

redisContext *lc_redis_connect(lc_client *c, char *err)
{
    struct timeval ct = {c->connect_timeout_ms / 1000, (c->connect_timeout_ms % 1000) * 1000};
    struct timeval cmd = {c->command_timeout_ms / 1000, (c->command_timeout_ms % 1000) * 1000};
    redisContext *ctx = redisConnectWithTimeout(c->host, c->port, ct);
    if (!ctx) {
        lc_seterr(err, "redis %s:%d: out of memory", c->host, c->port);
        return NULL;
    }
    if (ctx->err) {
        lc_seterr(err, "redis %s:%d: %s", c->host, c->port, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, cmd);
    redisEnableKeepAlive(ctx);
    if (c->password[0] || c->db > 0) {
        /* AUTH and SELECT pipelined: one round trip however many. */
        int n = 0;
        if (c->password[0]) {
            redisAppendCommand(ctx, "AUTH %s", c->password);
            n++;
        }
        if (c->db > 0) {
            redisAppendCommand(ctx, "SELECT %d", c->db);
            n++;
        }
        for (int i = 0; i < n; i++) {
            redisReply *r = NULL;
            if (redisGetReply(ctx, (void **)&r) != REDIS_OK || !r || r->type == REDIS_REPLY_ERROR) {
                lc_seterr(err, "redis %s:%d: %s", c->host, c->port,
                          r ? r->str : ctx->errstr);
                if (r)
                    freeReplyObject(r);
                redisFree(ctx);
                return NULL;
            }
            freeReplyObject(r);
        }
    }
    return ctx;
}

/* A reply-less socket must have nothing to read: EOF means the peer closed
 * it (Redis restarted, or a timeout/CLIENT KILL), bytes mean a reply nobody
 * read. Either way the next command would fail or read the wrong reply.
 * One non-blocking recv per call: ~1 us against a round trip of 10-100. */
static bool socket_stale(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

redisContext *lc_redis_reuse(lc_client *c, redisContext **ctx, char *err)
{
    if (*ctx && !(*ctx)->err && !socket_stale((*ctx)->fd))
        return *ctx;
    if (*ctx)
        redisFree(*ctx);
    *ctx = lc_redis_connect(c, err);
    return *ctx;
}

redisReply *lc_eval(redisContext *ctx, const char *sha, const char *body, int nkeys, int nargs,
                    const char **args, char *err)
{
    /* argv: EVALSHA sha nkeys args... */
    const char *argv[16];
    char nk[16];
    if (nargs > 13) {
        lc_seterr(err, "lockcore: too many script arguments (%d)", nargs);
        return NULL;
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = sha;
    argv[2] = nk;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    redisReply *r = redisCommandArgv(ctx, 3 + nargs, argv, NULL);
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        argv[0] = "EVAL";
        argv[1] = body;
        r = redisCommandArgv(ctx, 3 + nargs, argv, NULL);
    }
    if (!r) {
        lc_seterr(err, "redis: %s", ctx->err ? ctx->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        lc_seterr(err, "redis: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}
