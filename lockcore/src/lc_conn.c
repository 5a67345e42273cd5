/* lc_conn.c — one Redis connection for one caller thread.
 *
 * Connects lazily and reconnects on the next call after any I/O error (the
 * hiredis context keeps ctx->err set) or when the socket turns out closed
 * by the peer before a command is sent (lc_redis_reuse), so a handle
 * outlives a Redis restart without the caller doing anything — and without
 * its first command after the restart failing.
 */
#include "lc_internal.h"

#include <stdlib.h>
#include <string.h>
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
