/* lc_conn.c — Redis connections: the caller's lc_conn handle, and the
 * connect / reuse / script-call helpers (lc_conn.h) that the watchdog and
 * subscriber threads also use for their own contexts.
 *
 * An lc_conn connects lazily and reconnects on the next call after any I/O error (the
 * hiredis context keeps ctx->err set) or when the socket turns out closed
 * by the peer before a command is sent (lc__redis_reuse), so a handle
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

/* lc_conn_free is in lc_lock.c: a pending lc_acquire_send attempt goes to
 * the orphan cleanup first. */

/* lc__redis_reuse on conn's own context, counting every fresh connection in
 * conn->connects. */
static redisContext *conn_reuse(lc_conn *conn)
{
    bool fresh;
    redisContext *ctx = lc__redis_reuse(conn->client, &conn->ctx, conn->err, &fresh);
    if (fresh)
        conn->connects++; /* counted here: its address may be the old one's */
    return ctx;
}

uint64_t lc_conn_connects(const lc_conn *conn)
{
    return conn->connects;
}

redisContext *lc__conn_ctx(lc_conn *conn)
{
    if (conn->sent != LC_SENT_NONE)
        return conn->ctx;
    return conn_reuse(conn);
}

#define SENT_PENDING "lockcore: an acquire sent by lc_acquire_send is still unread"

redisContext *lc_conn_redis(lc_conn *conn)
{
    /* The caller's commands would read the attempt's replies as theirs. */
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return NULL;
    }
    return conn_reuse(conn);
}

lc_status lc_conn_ping(lc_conn *conn)
{
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return LC_MISUSE;
    }
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    redisReply *r = redisCommand(ctx, "PING");
    lc_status s = r && r->type == REDIS_REPLY_STATUS ? LC_OK : LC_IO;
    if (s != LC_OK)
        lc__seterr(conn->err, "redis: %s", r ? r->str : ctx->errstr);
    if (r)
        freeReplyObject(r);
    return s;
}

lc_status lc_conn_pipe(lc_conn *conn, lc_pipe *p)
{
    if (!conn || !p || p->n < 0 || p->n > LC_PIPE_MAX)
        return LC_MISUSE;
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return LC_MISUSE;
    }
    lc__pipe_drop_replies(p);
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    return lc__trip(ctx, 0, NULL, p, false, NULL, conn->err) == 0 ? LC_OK : LC_IO;
}

const char *lc_conn_errstr(const lc_conn *conn)
{
    return conn->err;
}

/* --- connect, reuse, script call (lc_conn.h) ---------------------------- */

redisContext *lc__redis_connect(lc_client *c, char *err)
{
    struct timeval ct = {c->connect_timeout_ms / 1000, (c->connect_timeout_ms % 1000) * 1000};
    struct timeval cmd = {c->command_timeout_ms / 1000, (c->command_timeout_ms % 1000) * 1000};
    char mhost[256];
    int mport = c->port;
    const char *host = c->host;
    if (c->sn.n) {
        /* Asked at every connect: a reconnect is what follows an I/O error
         * or a -READONLY reply, and must find the master of now. */
        if (lc__sentinel_resolve(&c->sn, mhost, &mport, err) != 0)
            return NULL;
        host = mhost;
    }
    redisContext *ctx = redisConnectWithTimeout(host, mport, ct);
    if (!ctx) {
        lc__seterr(err, "redis %s:%d: out of memory", host, mport);
        return NULL;
    }
    if (ctx->err) {
        lc__seterr(err, "redis %s:%d: %s", host, mport, ctx->errstr);
        redisFree(ctx);
        return NULL;
    }
    redisSetTimeout(ctx, cmd);
    redisEnableKeepAlive(ctx);
    /* AUTH, SELECT and (Sentinel: the guidelines' check that the address
     * named is a master now, not a demoted one) ROLE pipelined: one round
     * trip however many. */
    int n = 0;
    if (c->password[0]) {
        redisAppendCommand(ctx, "AUTH %s", c->password);
        n++;
    }
    if (c->db > 0) {
        redisAppendCommand(ctx, "SELECT %d", c->db);
        n++;
    }
    if (c->sn.n) {
        redisAppendCommand(ctx, "ROLE");
        n++;
    }
    for (int i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(ctx, (void **)&r) != REDIS_OK || !r || r->type == REDIS_REPLY_ERROR) {
            lc__seterr(err, "redis %s:%d: %s", host, mport, r ? r->str : ctx->errstr);
            if (r)
                freeReplyObject(r);
            redisFree(ctx);
            return NULL;
        }
        bool not_master = c->sn.n && i == n - 1 &&
                          !(r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                            r->element[0]->type == REDIS_REPLY_STRING &&
                            strcmp(r->element[0]->str, "master") == 0);
        freeReplyObject(r);
        if (not_master) {
            lc__seterr(err, "redis %s:%d: named master of %s by Sentinel, but not a master (yet)",
                       host, mport, c->sn.master_name);
            redisFree(ctx);
            return NULL;
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

redisContext *lc__redis_reuse(lc_client *c, redisContext **ctx, char *err, bool *fresh)
{
    if (fresh)
        *fresh = false;
    if (*ctx && !(*ctx)->err && !socket_stale((*ctx)->fd) && !lc__sentinel_stale(&c->sn, *ctx))
        return *ctx;
    if (*ctx)
        redisFree(*ctx);
    *ctx = lc__redis_connect(c, err);
    if (fresh)
        *fresh = *ctx != NULL;
    return *ctx;
}

/* A replica (a demoted master, or a replica Sentinel named before the
 * switch): the context is marked broken, so its next use reconnects and
 * asks the Sentinels again. Only once its replies are all read. */
static void mark_broken(redisContext *ctx)
{
    if (!ctx->err) {
        ctx->err = REDIS_ERR_OTHER;
        snprintf(ctx->errstr, sizeof ctx->errstr, "%s", "READONLY: connected to a replica");
    }
}

/* After a -READONLY reply r (the server is a replica now): marks ctx
 * broken, so lc__redis_reuse reconnects — and with Sentinels asks again where
 * the master is. Anything else: nothing. */
static void mark_readonly(redisContext *ctx, const redisReply *r)
{
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0)
        mark_broken(ctx);
}

redisReply *lc__eval(redisContext *ctx, const char *sha, const char *body, int nkeys, int nargs,
                     const char **args, char *err)
{
    /* argv: EVALSHA sha nkeys args... */
    const char *argv[16];
    char nk[16];
    if (nargs > 13) {
        lc__seterr(err, "lockcore: too many script arguments (%d)", nargs);
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
        lc__seterr(err, "redis: %s", ctx->err ? ctx->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        lc__seterr(err, "redis: %s", r->str);
        mark_readonly(ctx, r);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* --- the caller's commands in a lock's round trip (lc_conn.h) ----------- */

void lc__pipe_drop_replies(lc_pipe *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n && i < LC_PIPE_MAX; i++) {
        if (p->reply[i])
            freeReplyObject(p->reply[i]);
        p->reply[i] = NULL;
    }
}

/* Appends argv and p's commands to ctx's output buffer, in lc__trip's
 * order. Appending only fills hiredis's output buffer: whoever writes it
 * (the first read, or lc__trip_send) sends every command in one write. */
static int trip_append(redisContext *ctx, int argc, const char **argv, lc_pipe *p, bool p_first,
                       char *err)
{
    int np = p ? p->n : 0;
    int ok = REDIS_OK;
    for (int i = 0; ok == REDIS_OK && p_first && i < np; i++)
        ok = redisAppendFormattedCommand(ctx, p->cmd[i], p->len[i]);
    if (ok == REDIS_OK && argc > 0)
        ok = redisAppendCommandArgv(ctx, argc, argv, NULL);
    for (int i = 0; ok == REDIS_OK && !p_first && i < np; i++)
        ok = redisAppendFormattedCommand(ctx, p->cmd[i], p->len[i]);
    if (ok != REDIS_OK) {
        /* Nothing was written, but the output buffer may hold part of the
         * batch: the context must not be used again. */
        lc__seterr(err, "redis: %s", ctx->err ? ctx->errstr : "out of memory");
        if (!ctx->err)
            ctx->err = REDIS_ERR_OOM;
        return -1;
    }
    return 0;
}

int lc__trip_send(redisContext *ctx, int argc, const char **argv, lc_pipe *p, bool p_first,
                  char *err)
{
    lc__pipe_drop_replies(p);
    if (trip_append(ctx, argc, argv, p, p_first, err) != 0)
        return -1;
    int done = 0;
    while (!done)
        if (redisBufferWrite(ctx, &done) != REDIS_OK) {
            lc__seterr(err, "redis: %s", ctx->errstr[0] ? ctx->errstr : "write failed");
            if (!ctx->err)
                ctx->err = REDIS_ERR_IO;
            return -1;
        }
    return 0;
}

int lc__trip(redisContext *ctx, int argc, const char **argv, lc_pipe *p, bool p_first,
             redisReply **rep, char *err)
{
    lc__pipe_drop_replies(p);
    if (trip_append(ctx, argc, argv, p, p_first, err) != 0) {
        if (rep)
            *rep = NULL;
        return -1;
    }
    return lc__trip_recv(ctx, argc > 0, p, p_first, rep, err);
}

int lc__trip_recv(redisContext *ctx, bool has_cmd, lc_pipe *p, bool p_first, redisReply **rep,
                  char *err)
{
    int np = p ? p->n : 0;
    int argc = has_cmd ? 1 : 0;
    if (rep)
        *rep = NULL;
    int total = np + (argc > 0 ? 1 : 0);
    bool readonly = false;
    for (int k = 0; k < total; k++) {
        void *r = NULL;
        if (redisGetReply(ctx, &r) != REDIS_OK || !r) {
            lc__seterr(err, "redis: %s", ctx->err ? ctx->errstr : "no reply");
            if (!ctx->err)
                ctx->err = REDIS_ERR_EOF;
            return -1;
        }
        int pi = p_first ? k : k - (argc > 0 ? 1 : 0); /* index into p, or -1: the command */
        if (p_first && k == np)
            pi = -1;
        if (((redisReply *)r)->type == REDIS_REPLY_ERROR &&
            strncmp(((redisReply *)r)->str, "READONLY", 8) == 0)
            readonly = true; /* marked once every reply is read: err stops reading */
        if (pi >= 0)
            p->reply[pi] = r;
        else if (rep)
            *rep = r;
        else
            freeReplyObject(r);
    }
    if (readonly)
        mark_broken(ctx);
    return 0;
}
