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

#include "lc_cluster.h"
#include "lc_internal.h"
#include "lc_util.h"

#include <errno.h>
#include <hiredis/sds.h> /* sdslen of a context's write buffer */
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
    conn->cur = -1;
    conn->watch_slot = conn->watch_addr = -1;
    *out = conn;
    return LC_OK;
}

/* lc_conn_free is in lc_lock.c: a pending lc_acquire_send attempt goes to
 * the orphan cleanup first. */

/* lc__redis_reuse on conn's own context, counting every fresh connection in
 * conn->connects and numbering it (conn->ctx_id). */
static redisContext *node_ctx(lc_conn *conn, int addr);
static bool ctx_stale(const redisContext *ctx);

static redisContext *conn_reuse(lc_conn *conn)
{
    if (conn->client->cl.on) {
        /* the node used last, or one that serves some slot */
        lc_cluster *cl = &conn->client->cl;
        if (conn->cur < 0 && lc__cluster_ensure(cl, conn->err) != 0)
            return NULL;
        int a = conn->cur >= 0 ? conn->cur : lc__cluster_any(cl);
        if (a < 0) {
            lc__seterr(conn->err, "cluster: no node known");
            return NULL;
        }
        return node_ctx(conn, a);
    }
    bool fresh;
    redisContext *ctx = lc__redis_reuse(conn->client, &conn->ctx, conn->err, &fresh);
    if (fresh)
        conn->ctx_id = ++conn->connects; /* counted here: its address may be the old one's */
    return ctx;
}

/* lc_conn_via's bookkeeping: a call that sends the caller's commands
 * starts afresh (via_reset), then names the connection each of them went
 * over (via_add; 0: one lockcore cannot name). */
static void via_reset(lc_conn *conn)
{
    conn->via = 0;
    conn->via_split = false;
}

static void via_add(lc_conn *conn, uint64_t id)
{
    if (id == 0 || (conn->via != 0 && conn->via != id))
        conn->via_split = true;
    else
        conn->via = id;
}

bool lc_conn_held_back(const lc_conn *conn)
{
    return conn != NULL && conn->trip_held_back;
}

uint64_t lc_conn_connects(const lc_conn *conn)
{
    return conn->connects;
}

uint64_t lc_conn_via(const lc_conn *conn)
{
    return conn == NULL || conn->via_split ? 0 : conn->via;
}

lc_client *lc_conn_client(const lc_conn *conn)
{
    return conn ? conn->client : NULL;
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

static lc_status cluster_ping(lc_conn *conn);

redisContext *lc_conn_redis_key(lc_conn *conn, const char *key)
{
    if (!conn->client->cl.on || !key)
        return key ? lc_conn_redis(conn) : NULL;
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return NULL;
    }
    return lc__conn_ctx_key(conn, key);
}

lc_status lc_conn_ping(lc_conn *conn)
{
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return LC_MISUSE;
    }
    if (conn->client->cl.on)
        return cluster_ping(conn);
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

/* LC_MISUSE, with why as conn's reason when there is a conn. */
static lc_status conn_misuse(lc_conn *conn, const char *why)
{
    if (conn)
        lc__seterr(conn->err, "lockcore: %s", why);
    return LC_MISUSE;
}

lc_status lc_conn_pipe(lc_conn *conn, lc_pipe *p)
{
    if (!conn || !p || p->n < 0 || p->n > LC_PIPE_MAX)
        return conn_misuse(conn, "lc_conn_pipe: NULL or uninitialised lc_pipe");
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return LC_MISUSE;
    }
    lc__pipe_drop_replies(p);
    via_reset(conn);
    if (conn->client->cl.on) {
        if (lc__conn_pipe_slot(conn, p, -1, conn->err) == -2)
            return LC_MISUSE;
        redisContext *ctx = NULL;
        int t = lc__conn_trip(conn, &ctx, LC__TRIP_PLAIN, 0, NULL, p, false, false, NULL);
        return t == 0 && !conn->trip_gave_up ? LC_OK : LC_IO;
    }
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    if (p->n > 0)
        via_add(conn, conn->ctx_id);
    return lc__trip(ctx, 0, NULL, p, false, NULL, conn->err) == 0 ? LC_OK : LC_IO;
}

lc_status lc_conn_pipe_via(lc_conn *conn, lc_pipe *p, uint64_t via)
{
    if (!conn || !p || p->n < 0 || p->n > LC_PIPE_MAX)
        return conn_misuse(conn, "lc_conn_pipe_via: NULL or uninitialised lc_pipe");
    if (via == 0)
        return conn_misuse(conn, "lc_conn_pipe_via: via 0 names no connection");
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return LC_MISUSE;
    }
    lc__pipe_drop_replies(p);
    conn->trip_held_back = false;
    /* keyless commands only: they go where the connection goes; and the
     * router keeps track of where a WATCH or a transaction is, not behind
     * its back */
    for (int i = 0; conn->client->cl.on && i < p->n; i++) {
        lc__cmd c;
        if (lc__cmd_parse(p->cmd[i], p->len[i], &c) != 0 || c.slot != LC__CMD_KEYLESS || c.multi ||
            c.exec || c.discard || c.watch || c.unwatch) {
            lc__seterr(conn->err,
                       "lockcore: lc_conn_pipe_via: command %d names a key, is a "
                       "transaction's or a WATCH's, or is one the router does not know: not "
                       "sent",
                       i);
            return LC_MISUSE;
        }
    }
    /* the context numbered via: the one in use, or (a cluster) one parked
     * for its node, which becomes the one in use; never a new one */
    int at = -1;
    if (conn->ctx_id != via) {
        for (int i = 0; conn->nid && i < LC__CL_MAX_ADDRS && at < 0; i++)
            if (conn->nctx[i] && conn->nid[i] == via)
                at = i;
    }
    redisContext *ctx = conn->ctx_id == via ? conn->ctx : at >= 0 ? conn->nctx[at] : NULL;
    if (!ctx || ctx->err || ctx_stale(ctx) || lc__sentinel_stale(&conn->client->sn, ctx)) {
        lc__seterr(conn->err,
                   "lockcore: the connection that ran those commands is closed or was remade "
                   "since, or Sentinel has named another master: not sent");
        return LC_IO;
    }
    if (at >= 0 && !node_ctx(conn, at))
        return LC_IO; /* not reached: a parked context that is open is taken as it is */
    via_reset(conn);
    via_add(conn, via);
    return lc__trip(ctx, 0, NULL, p, false, NULL, conn->err) == 0 ? LC_OK : LC_IO;
}

/* --- independent commands over many slots (lc_conn_pipe_each) -------------- */

/* What a reply says of its command, for the router's trip below and
 * lc_conn_pipe_each: it ran (the node's answer), or a redirect, a
 * try-later, or a redirect for another slot (ASTRAY) kept it from running. */
enum { RAN = 0, MOVED, ASK, LATER, ASTRAY };

/* The router's back-off after TRYAGAIN, CLUSTERDOWN or LOADING (ms),
 * doubled after each up to the max, while command_timeout_ms lasts. */
#define BACKOFF_FIRST_MS 20
#define BACKOFF_MAX_MS 200

static int cluster_trip(lc_conn *conn, redisContext **ctxp, int kind, int argc, const char **argv,
                        lc_pipe *p, bool p_first, bool sent, redisReply **rep, int64_t until);
static redisReply *not_run_reply(const char *why);
static redisContext *route(lc_conn *conn, int slot, bool pin, int64_t deadline);

static int trip_append(redisContext *ctx, int argc, const char **argv, lc_pipe *p, bool p_first,
                       char *err);

/* One command of the batch: its pipe and its index there, its slot, and
 * whether it goes again alone after the rest (it did not run, or no master
 * could take it). */
typedef struct each_cmd {
    lc_pipe *p;
    int i;
    int slot;
    bool alone;
} each_cmd;

/* One master's share of the batch: its context (NULL: nothing was sent to
 * it) and its commands, the batch's cmd[at .. at + n - 1] in order (ci).
 * They travel in chunks of up to LC_PIPE_MAX, written one after another on
 * the one context's buffer and sent in one write, read back in the same
 * order. */
typedef struct each_group {
    int addr;
    redisContext *ctx;
    uint64_t id; /* ctx's number (lc_conn_via) */
    int at, n;
} each_group;

/* Chunk c of group g as a pipe borrowing the batch's command text. */
static void each_chunk(const each_group *g, const each_cmd *cmd, const int *ci, int c, lc_pipe *q)
{
    q->n = 0;
    for (int k = c * LC_PIPE_MAX; k < g->n && q->n < LC_PIPE_MAX; k++) {
        const each_cmd *e = &cmd[ci[g->at + k]];
        q->cmd[q->n] = e->p->cmd[e->i];
        q->len[q->n] = e->p->len[e->i];
        q->reply[q->n++] = NULL;
    }
}

/* Sends command i of p (of slot) alone through the router (lc_conn_pipe's
 * rules: redirects, back-offs, a lost reply never sent again): its reply
 * into p->reply[i]. The master is found first, so that a command never
 * sent (no master answers before deadline, lc_now_ms) gets an error reply
 * saying why, not the NULL of a lost one. 0 when the reply came and the
 * command ran; -1 otherwise. */
static int each_alone(lc_conn *conn, lc_pipe *p, int i, int slot, int64_t deadline)
{
    if (lc_now_ms() >= deadline) {
        lc__seterr(conn->err,
                   "cluster: slot %d: the batch's command_timeout_ms passed before this "
                   "command could go again: not sent again",
                   slot);
        p->reply[i] = not_run_reply(conn->err);
        return -1;
    }
    if (!route(conn, slot, false, deadline)) {
        p->reply[i] = not_run_reply(conn->err);
        return -1;
    }
    lc_pipe q;
    q.n = 1;
    q.cmd[0] = p->cmd[i];
    q.len[0] = p->len[i];
    q.reply[0] = NULL;
    redisContext *ctx = NULL;
    int rc = cluster_trip(conn, &ctx, LC__TRIP_PLAIN, 0, NULL, &q, false, false, NULL, deadline);
    p->reply[i] = q.reply[0];
    return rc == 0 && q.reply[0] != NULL ? 0 : -1;
}

/* What reply r of a command of slot, read from node addr, says: RAN (the
 * node's answer, an error reply included), or that the command did not
 * run there — MOVED or ASK for its slot, TRYAGAIN, CLUSTERDOWN, LOADING:
 * it goes again (LATER); a redirect naming another slot: the node and the
 * router disagree about what was sent, and it is not sent again (ASTRAY).
 * A MOVED fixes the map, so the command's second try goes straight to the
 * new master; moved[] (*nmoved) holds the slots whose MOVED this batch
 * has applied and counted already (once per slot, as the router counts
 * once per batch). *later is set on a TRYAGAIN, CLUSTERDOWN or LOADING
 * (the resends then wait a back-off first), and a refresh made due for
 * the last two. */
static int each_state(lc_conn *conn, const redisReply *r, int slot, int addr, int *moved,
                      int *nmoved, bool *later)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return RAN;
    lc_cluster *cl = &conn->client->cl;
    lc__redirect rd;
    if (lc__redirect_parse(r->str, r->len, &rd) == 0) {
        if (rd.slot != slot)
            return ASTRAY;
        if (rd.kind == LC__REDIR_MOVED) {
            int k = 0;
            while (k < *nmoved && moved[k] != slot)
                k++;
            const char *host = rd.host[0] ? rd.host : lc__cluster_at(cl, addr)->host;
            int tg = lc__cluster_addr(cl, host, rd.port);
            if (k == *nmoved && tg >= 0 && tg != addr) {
                moved[(*nmoved)++] = slot;
                lc__cluster_moved(cl, slot, tg, addr);
                atomic_fetch_add(&cl->moved, 1);
            }
        }
        return LATER;
    }
    if (!lc__cluster_try_later(r->str, r->len))
        return RAN;
    /* CLUSTERDOWN or LOADING may be a master the map still names after a
     * failover: the resend goes by a refreshed map (TRYAGAIN alone is a
     * migration step, the map is right) */
    if (strncmp(r->str, "TRYAGAIN", 8) != 0)
        atomic_store(&cl->due, 1);
    *later = true;
    return LATER;
}

lc_status lc_conn_pipe_each(lc_conn *conn, lc_pipe *p)
{
    return lc_conn_pipes_each(conn, &p, 1);
}

/* Without a cluster: every pipe in one write on the one connection, then
 * every reply read — one round trip, where lc_conn_pipe would take one per
 * pipe. A failed write leaves every reply NULL (what left is unknown). */
static lc_status pipes_one_redis(lc_conn *conn, lc_pipe *const *pipes, int np)
{
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    via_add(conn, conn->ctx_id);
    for (int k = 0; k < np; k++)
        if (trip_append(ctx, 0, NULL, pipes[k], false, conn->err) != 0)
            return LC_IO; /* nothing written; the context is not used again */
    if (lc__trip_send(ctx, 0, NULL, NULL, false, conn->err) != 0)
        return LC_IO; /* part of it may have left: outcome unknown */
    for (int k = 0; k < np; k++)
        if (lc__trip_recv(ctx, false, pipes[k], false, NULL, conn->err) != 0)
            return LC_IO; /* the connection is broken: the rest stay NULL */
    return LC_OK;
}

lc_status lc_conn_pipes_each(lc_conn *conn, lc_pipe *const *pipes, int np)
{
    if (!conn || !pipes || np < 0 || np > LC_PIPES_MAX)
        return conn_misuse(conn, "NULL pipes, or np not 0..LC_PIPES_MAX");
    int n = 0;
    for (int k = 0; k < np; k++) {
        if (!pipes[k] || pipes[k]->n < 0 || pipes[k]->n > LC_PIPE_MAX)
            return conn_misuse(conn, "a NULL or uninitialised lc_pipe");
        for (int j = 0; j < k; j++)
            if (pipes[j] == pipes[k]) /* its replies would overwrite each other */
                return conn_misuse(conn, "one lc_pipe given twice");
        n += pipes[k]->n;
    }
    conn->trip_held_back = false;
    if (conn->sent != LC_SENT_NONE) {
        lc__seterr(conn->err, "%s", SENT_PENDING);
        return LC_MISUSE;
    }
    via_reset(conn);
    if (!conn->client->cl.on && np == 1)
        return lc_conn_pipe(conn, pipes[0]); /* lc_conn_pipe_each: exactly that */
    for (int k = 0; k < np; k++)
        lc__pipe_drop_replies(pipes[k]);
    if (n == 0)
        return LC_OK;
    if (!conn->client->cl.on)
        return pipes_one_redis(conn, pipes, np);
    lc_cluster *cl = &conn->client->cl;
    /* cmd: the batch's commands; grp: each one's master share (-1: none);
     * ci: the commands by share; g: the shares; moved: the slots whose MOVED
     * this batch applied (each_state). */
    each_cmd *cmd = malloc((size_t)n * sizeof *cmd);
    int *grp = malloc((size_t)n * sizeof *grp), *ci = malloc((size_t)n * sizeof *ci);
    int *moved = malloc((size_t)n * sizeof *moved);
    each_group *g = malloc((size_t)n * sizeof *g);
    lc_status st = LC_OK;
    if (!cmd || !grp || !ci || !moved || !g) {
        lc__seterr(conn->err, "lockcore: out of memory");
        st = LC_NOMEM;
        goto out;
    }
    int m = 0;
    for (int k = 0; k < np; k++)
        for (int i = 0; i < pipes[k]->n; i++, m++) {
            lc__cmd c;
            if (lc__cmd_parse(pipes[k]->cmd[i], pipes[k]->len[i], &c) != 0 || c.slot < 0 ||
                c.multi || c.exec || c.discard || c.watch || c.unwatch) {
                lc__seterr(conn->err,
                           "lockcore: cluster: command %d of pipe %d is not one command of one "
                           "slot (keys of two slots, no key, a transaction or WATCH, or one the "
                           "router does not know): not sent",
                           i, k);
                st = LC_MISUSE;
                goto out;
            }
            cmd[m] = (each_cmd){.p = pipes[k], .i = i, .slot = c.slot, .alone = false};
        }
    if (lc__cluster_ensure(cl, conn->err) != 0) {
        for (int j = 0; j < n; j++)
            cmd[j].p->reply[cmd[j].i] = not_run_reply(conn->err);
        st = LC_IO;
        goto out;
    }
    /* The masters' shares, each in the batch's order. */
    int ng = 0;
    for (int j = 0; j < n; j++) {
        int a = lc__cluster_master(cl, cmd[j].slot), k = 0;
        grp[j] = -1;
        if (a < 0) {
            cmd[j].alone = true; /* no master in the map: the router waits for one */
            continue;
        }
        while (k < ng && g[k].addr != a)
            k++;
        if (k == ng)
            g[ng++] = (each_group){.addr = a, .ctx = NULL, .id = 0, .at = 0, .n = 0};
        g[k].n++;
        grp[j] = k;
    }
    for (int k = 0, at = 0; k < ng; k++) {
        g[k].at = at;
        at += g[k].n;
        g[k].n = 0;
    }
    for (int j = 0; j < n; j++)
        if (grp[j] >= 0) {
            each_group *e = &g[grp[j]];
            ci[e->at + e->n++] = j;
        }
    /* Every master's share written first, then every reply read: the
     * masters run their shares at the same time. */
    for (int k = 0; k < ng; k++) {
        redisContext *ctx = node_ctx(conn, g[k].addr);
        if (!ctx) {
            lc__cluster_failed(cl, g[k].addr); /* nothing sent: the router retries it */
            for (int c = 0; c < g[k].n; c++)
                cmd[ci[g[k].at + c]].alone = true;
            continue;
        }
        /* the whole share in one write; a failed one leaves ctx->err set:
         * the share's read sees it */
        int bad = 0;
        for (int c = 0; !bad && c * LC_PIPE_MAX < g[k].n; c++) {
            lc_pipe q;
            each_chunk(&g[k], cmd, ci, c, &q);
            bad = trip_append(ctx, 0, NULL, &q, false, conn->err);
        }
        if (!bad)
            (void)lc__trip_send(ctx, 0, NULL, NULL, false, conn->err);
        g[k].ctx = ctx;
        g[k].id = conn->ctx_id;
    }
    int nmoved = 0;
    bool later = false; /* a TRYAGAIN, CLUSTERDOWN or LOADING came */
    /* The masters' replies are read one master after another, within one
     * command_timeout_ms for them all: each read's socket timeout is what
     * is left of it (at least 1 ms, for replies already there), so masters
     * that hang cost the batch one timeout, not one each. */
    int64_t T = conn->client->command_timeout_ms, read_by = lc_now_ms() + T;
    for (int k = 0; k < ng; k++) {
        if (!g[k].ctx)
            continue;
        bool broken = false;
        for (int c = 0; c * LC_PIPE_MAX < g[k].n; c++) {
            lc_pipe q;
            each_chunk(&g[k], cmd, ci, c, &q);
            if (!broken) {
                int64_t left = read_by - lc_now_ms();
                left = left < 1 ? 1 : left;
                if (left < T)
                    (void)redisSetTimeout(g[k].ctx,
                                          (struct timeval){left / 1000, (left % 1000) * 1000});
                /* a reply that did not come stays NULL, as do the share's
                 * after it: sent, outcome unknown */
                int rr = lc__trip_recv(g[k].ctx, false, &q, false, NULL, conn->err);
                if (left < T && g[k].ctx->fd >= 0)
                    (void)redisSetTimeout(g[k].ctx, (struct timeval){T / 1000, (T % 1000) * 1000});
                if (rr != 0) {
                    lc__cluster_failed(cl, g[k].addr);
                    st = LC_IO;
                    broken = true;
                }
            }
            for (int x = 0; x < q.n; x++) {
                each_cmd *e = &cmd[ci[g[k].at + c * LC_PIPE_MAX + x]];
                redisReply *r = q.reply[x];
                q.reply[x] = NULL;
                int state = r ? each_state(conn, r, e->slot, g[k].addr, moved, &nmoved, &later)
                              : RAN;
                if (state == LATER) {
                    freeReplyObject(r);
                    e->alone = true;
                    continue;
                }
                if (state == ASTRAY) {
                    freeReplyObject(r);
                    char at[LC_ADDR_LEN] = "?";
                    lc__cluster_addr_text(lc__cluster_at(cl, g[k].addr), at, sizeof at);
                    lc__seterr(conn->err,
                               "cluster: slot %d: %s redirected the command for another slot: "
                               "not sent again",
                               e->slot, at);
                    r = not_run_reply(conn->err);
                    st = LC_IO;
                } else {
                    via_add(conn, g[k].id); /* ran there, or sent there and lost */
                }
                e->p->reply[e->i] = r;
            }
        }
    }
    /* What did not run goes again, one by one, after the rest, within one
     * command_timeout_ms for them all: a master that is down or loading
     * costs the batch one wait, not one per command. */
    int64_t deadline = lc_now_ms() + conn->client->command_timeout_ms;
    if (later)
        lc__sleep_ms(BACKOFF_FIRST_MS); /* told to try later: not at once */
    for (int j = 0; j < n; j++)
        if (cmd[j].alone && each_alone(conn, cmd[j].p, cmd[j].i, cmd[j].slot, deadline) != 0)
            st = LC_IO;
out:
    free(cmd);
    free(grp);
    free(ci);
    free(moved);
    free(g);
    return st;
}

const char *lc_conn_errstr(const lc_conn *conn)
{
    return conn->err;
}

/* --- connect, reuse, script call (lc_conn.h) ---------------------------- */

static redisContext *connect_at(lc_client *c, const char *host, int mport, char *err);

redisContext *lc__redis_connect(lc_client *c, char *err)
{
    char mhost[256];
    int mport = c->port;
    const char *host = c->host;
    if (c->sn.n) {
        /* Asked at every connect: a reconnect is what follows an I/O error
         * or a -READONLY reply, and must find the master of now. */
        if (lc__sentinel_resolve(&c->sn, mhost, &mport, err) != 0)
            return NULL;
        host = mhost;
    } else if (c->cl.on) {
        /* A connection whose commands name no key (the subscriber's):
         * any master will do, classic pub/sub reaches every node. */
        if (lc__cluster_ensure(&c->cl, err) != 0)
            return NULL;
        int a = lc__cluster_any(&c->cl);
        if (a < 0) {
            lc__seterr(err, "cluster: no node known");
            return NULL;
        }
        host = lc__cluster_at(&c->cl, a)->host;
        mport = lc__cluster_at(&c->cl, a)->port;
        redisContext *ctx = connect_at(c, host, mport, err);
        if (!ctx)
            lc__cluster_failed(&c->cl, a);
        return ctx;
    }
    return connect_at(c, host, mport, err);
}

/* A connection to host:mport with AUTH, SELECT, (Sentinel) ROLE and the
 * timeouts applied, or NULL with the reason in err. */
static redisContext *connect_at(lc_client *c, const char *host, int mport, char *err)
{
    struct timeval ct = {c->connect_timeout_ms / 1000, (c->connect_timeout_ms % 1000) * 1000};
    struct timeval cmd = {c->command_timeout_ms / 1000, (c->command_timeout_ms % 1000) * 1000};
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

/* A context between commands must have nothing to read: EOF on its
 * socket means the peer closed it (Redis restarted, or a timeout/CLIENT
 * KILL), bytes mean a reply nobody read — on the socket, or already in
 * hiredis's reader (two replies that came in one segment, one read) — and a
 * command still in its write buffer is one whose reply nobody will read.
 * Either way the next command would fail or read the wrong reply. One
 * non-blocking recv per call: ~1 us against a round trip of 10-100. */
static bool ctx_stale(const redisContext *ctx)
{
    const redisReader *rd = ctx->reader;
    if (sdslen(ctx->obuf) > 0 || (rd != NULL && (rd->pos < rd->len || rd->ridx >= 0)))
        return true;
    char b;
    ssize_t n = recv(ctx->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

redisContext *lc__redis_reuse(lc_client *c, redisContext **ctx, char *err, bool *fresh)
{
    if (fresh)
        *fresh = false;
    if (*ctx && !(*ctx)->err && !ctx_stale(*ctx) && !lc__sentinel_stale(&c->sn, *ctx))
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

/* argv (16 places) and nk (16 bytes) as EVALSHA sha nkeys args...: 0, or
 * -1 with err set when more than 13 arguments would not fit. */
static int evalsha_argv(const char *argv[16], char nk[16], const char *sha, int nkeys, int nargs,
                        const char **args, char *err)
{
    if (nargs > 13) {
        lc__seterr(err, "lockcore: too many script arguments (%d)", nargs);
        return -1;
    }
    snprintf(nk, 16, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = sha;
    argv[2] = nk;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    return 0;
}

redisReply *lc__eval(redisContext *ctx, const char *sha, const char *body, int nkeys, int nargs,
                     const char **args, char *err)
{
    const char *argv[16];
    char nk[16];
    if (evalsha_argv(argv, nk, sha, nkeys, nargs, args, err) != 0)
        return NULL;
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

/* --- Redis Cluster: routing and redirects (lc_conn.h) ------------------------ */

/* conn's context to node addr, made current (the one in use parked in
 * nctx, with its number), connected or reconnected as lc__redis_reuse
 * would. A fresh connection counts in lc_conn_connects and gets the next
 * number; a switch keeps each context's own, so that lc_conn_via can name
 * the node's connection that ran a command however often conn moved since.
 * NULL with the reason in conn->err. */
static redisContext *node_ctx(lc_conn *conn, int addr)
{
    lc_client *c = conn->client;
    if (!conn->nctx && !(conn->nctx = calloc(LC__CL_MAX_ADDRS, sizeof *conn->nctx))) {
        lc__seterr(conn->err, "lockcore: out of memory");
        return NULL;
    }
    if (!conn->nid && !(conn->nid = calloc(LC__CL_MAX_ADDRS, sizeof *conn->nid))) {
        lc__seterr(conn->err, "lockcore: out of memory");
        return NULL;
    }
    if (conn->cur != addr) {
        if (conn->cur >= 0) {
            conn->nctx[conn->cur] = conn->ctx;
            conn->nid[conn->cur] = conn->ctx_id;
        } else if (conn->ctx) {
            redisFree(conn->ctx);
        }
        conn->ctx = conn->nctx[addr];
        conn->ctx_id = conn->ctx ? conn->nid[addr] : 0;
        conn->nctx[addr] = NULL;
        conn->nid[addr] = 0;
        conn->cur = addr;
    }
    if (conn->ctx && !conn->ctx->err && !ctx_stale(conn->ctx))
        return conn->ctx;
    if (conn->ctx)
        redisFree(conn->ctx);
    if (conn->watch_addr == addr)
        conn->watch_addr = -1; /* its WATCH went with the old connection */
    const lc__cl_addr *a = lc__cluster_at(&c->cl, addr);
    conn->ctx = connect_at(c, a->host, a->port, conn->err);
    conn->ctx_id = conn->ctx ? ++conn->connects : 0;
    return conn->ctx;
}

/* The node a batch of slot goes to first: slot's master in the map (the
 * map taken or refreshed first when due), or for a batch naming no key the
 * node used last; pinned to the node holding this connection's WATCH of
 * slot when pin (the batch ends a transaction). A refused connection makes
 * the map refresh from another node, and is tried again with a growing
 * back-off while the next wait ends before deadline (lc_now_ms). NULL with
 * conn->err set. */
static redisContext *route(lc_conn *conn, int slot, bool pin, int64_t deadline)
{
    lc_client *c = conn->client;
    lc_cluster *cl = &c->cl;
    int64_t backoff = BACKOFF_FIRST_MS;
    for (;;) {
        if (lc__cluster_ensure(cl, conn->err) != 0)
            return NULL;
        int a = slot >= 0 ? lc__cluster_master(cl, slot)
                          : (conn->cur >= 0 ? conn->cur : lc__cluster_any(cl));
        if (pin && slot >= 0 && conn->watch_addr >= 0 && conn->watch_slot == slot)
            a = conn->watch_addr;
        if (a < 0) {
            lc__seterr(conn->err, "cluster: no master serves slot %d in the slot map", slot);
            atomic_store(&cl->due, 1);
        } else {
            redisContext *ctx = node_ctx(conn, a);
            if (ctx)
                return ctx;
            lc__cluster_failed(cl, a); /* nothing was sent: ask another node where to go */
        }
        if (lc_now_ms() + backoff > deadline)
            return NULL;
        atomic_fetch_add(&cl->retries, 1);
        lc__sleep_ms(backoff);
        backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
    }
}

redisContext *lc__conn_ctx_key(lc_conn *conn, const char *key)
{
    if (!conn->client->cl.on)
        return lc__conn_ctx(conn);
    if (conn->sent != LC_SENT_NONE)
        return conn->ctx;
    return route(conn, lc_key_slot(key, strlen(key)), false,
                 lc_now_ms() + conn->client->command_timeout_ms);
}

int lc__conn_pipe_slot(const lc_conn *conn, const lc_pipe *p, int want, char *err)
{
    if (!conn->client->cl.on)
        return -1;
    int slot = want;
    for (int i = 0; p && i < p->n; i++) {
        lc__cmd cmd;
        if (lc__cmd_parse(p->cmd[i], p->len[i], &cmd) != 0 || cmd.slot == LC__CMD_UNKNOWN) {
            lc__seterr(err,
                       "lockcore: cluster: command %d of the pipe names keys the router cannot "
                       "find (not one of the commands lockcore knows): not sent",
                       i);
            return -2;
        }
        if (cmd.slot == LC__CMD_CROSS || (cmd.slot >= 0 && slot >= 0 && cmd.slot != slot)) {
            lc__seterr(err,
                       "lockcore: cluster: command %d of the pipe names a key of slot %d, "
                       "another command or the lock slot %d: one batch goes to one master, "
                       "not sent",
                       i, cmd.slot, slot);
            return -2;
        }
        if (cmd.slot >= 0)
            slot = cmd.slot;
    }
    return slot;
}

/* --- the router's trip -------------------------------------------------------- */

/* One command of a batch, in the order sent. */
typedef struct tcmd {
    const char *resp;
    size_t len;
    int pi; /* index in p, or -1: the lock command */
    lc__cmd info;
} tcmd;

/* A unit: one command, or MULTI ... EXEC/DISCARD (a transaction runs, or
 * is discarded, as a whole). */
typedef struct tunit {
    int k0, k1;   /* commands k0..k1 */
    bool lock;    /* holds the lock command */
    bool block;   /* a transaction */
    bool pinned;  /* a transaction of the slot whose WATCH is on one node */
    bool free;    /* a command a second run cannot change (UNWATCH, PING) */
    bool gone;    /* given up: did not run, not sent again */
    uint64_t via; /* the connection it ran over (lc_conn_via); 0: not yet */
    bool twice;   /* ran, then went again (a free unit with its tail, a
                     batch sent whole): over two connections */
    /* after a round: */
    int state;  /* RAN, or what kept it from running (ASTRAY: a redirect
                   for another slot than the batch's) */
    int target; /* MOVED, ASK: the node named (address index) */
} tunit;

typedef struct trip {
    lc_conn *conn;
    int slot;
    int n;
    tcmd cmd[LC_PIPE_MAX + 1];
    redisReply **reply[LC_PIPE_MAX + 1]; /* where command k's reply lives */
    int nu;
    tunit u[LC_PIPE_MAX + 1];
} trip;

/* What kept reply r from running, or RAN; *target the node a redirect
 * names (host "" is the host of node `from`). A redirect is followed only
 * for the batch's own slot: one naming another slot (or a batch naming no
 * key) says the node and the router disagree about what was sent, and
 * neither the map nor the command may follow it (ASTRAY). */
static int reply_state(trip *t, const redisReply *r, int from, int *target)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return RAN;
    lc__redirect rd;
    if (lc__redirect_parse(r->str, r->len, &rd) == 0) {
        if (rd.slot < 0 || rd.slot >= LC__SLOTS || rd.slot != t->slot)
            return ASTRAY;
        lc_cluster *cl = &t->conn->client->cl;
        const char *host = rd.host[0] || from < 0 ? rd.host : lc__cluster_at(cl, from)->host;
        *target = lc__cluster_addr(cl, host, rd.port);
        if (*target < 0)
            return LATER; /* the book is full: wait for a map */
        return rd.kind == LC__REDIR_MOVED ? MOVED : ASK;
    }
    return lc__cluster_try_later(r->str, r->len) ? LATER : RAN;
}

/* Classifies unit u after a round on node `from`. A transaction did not
 * run when EXEC answered a redirect (the transaction discarded at EXEC),
 * or EXECABORT while every command refused on queuing was refused for a
 * redirect or a TRYAGAIN: nothing of it ran. */
static void classify(trip *t, tunit *u, int from)
{
    u->state = RAN;
    u->target = -1;
    if (!u->block) {
        u->state = reply_state(t, *t->reply[u->k0], from, &u->target);
        return;
    }
    const redisReply *last = *t->reply[u->k1];
    if (!t->cmd[u->k1].info.exec || !last)
        return; /* DISCARD, or a block left open: nothing to redo */
    int st = reply_state(t, last, from, &u->target);
    if (st != RAN) {
        u->state = st;
        return;
    }
    if (last->type != REDIS_REPLY_ERROR || strncmp(last->str, "EXECABORT", 9) != 0)
        return;
    int kind = RAN, target = -1;
    for (int k = u->k0 + 1; k < u->k1; k++) {
        const redisReply *r = *t->reply[k];
        if (!r || r->type != REDIS_REPLY_ERROR)
            continue;
        int tg = -1, s = reply_state(t, r, from, &tg);
        if (s == RAN)
            return; /* refused for another reason: the caller's error */
        if (kind == RAN) {
            kind = s;
            target = tg;
        } else if (kind != s || target != tg) {
            kind = kind == ASTRAY || s == ASTRAY ? ASTRAY : LATER;
        }
    }
    u->state = kind;
    u->target = target;
}

/* WATCH, UNWATCH, EXEC and DISCARD that were sent to node `at` (commands
 * sent[0..ns-1], each after an ASKING when asking): where this
 * connection's WATCH of the slot is now. */
static void track_watch(trip *t, const int *sent, int ns, int at, bool asking)
{
    lc_conn *conn = t->conn;
    for (int i = 0; i < ns; i++) {
        const tcmd *c = &t->cmd[sent[i]];
        const redisReply *r = *t->reply[sent[i]];
        if (c->info.watch && r && r->type == REDIS_REPLY_STATUS) {
            conn->watch_addr = at;
            conn->watch_slot = t->slot;
            conn->watch_asking = asking;
        } else if ((c->info.unwatch || c->info.exec || c->info.discard) && conn->watch_addr == at) {
            conn->watch_addr = -1; /* EXEC and DISCARD unwatch, whatever they answer */
        }
    }
}

/* Whether the batch is a WATCH split from its keys by a migration: it
 * holds a WATCH, part of it ran on this node and part was sent on by ASK,
 * and everything that ran can run again unchanged (the WATCH, UNWATCH,
 * PING, reads). Following the ASK would leave the WATCH on one node and
 * the keys it guards on the other, and the transaction after it could
 * never run (EXEC goes where the WATCH is); sent again whole once the slot
 * is on one node, it can. */
static bool watch_split(const trip *t)
{
    bool watch = false, ran = false, asked = false;
    for (int i = 0; i < t->nu; i++) {
        const tunit *u = &t->u[i];
        const lc__cmd *c = &t->cmd[u->k0].info;
        if (u->block)
            return false;
        watch |= c->watch;
        asked |= u->state == ASK;
        if (u->state == RAN && !u->free) {
            if (!c->watch && !c->reads)
                return false;
            ran = true;
        }
    }
    return watch && ran && asked;
}

/* The units that go again after a round, into r[] (*nr): for an acquire
 * whose lock command did not run, the whole batch (lc_acquire_pipe's
 * commands may go with every attempt), and for a WATCH split from its keys
 * (watch_split) the whole batch too, after a back-off; otherwise the
 * longest tail of units none of which ran (a command that ran may not run
 * twice, and what goes again must run after everything that ran: the
 * batch's order is kept). A pinned transaction never goes again (its WATCH
 * is on the node that answered); a UNWATCH or PING that ran does not stop
 * the tail and goes again with it: a UNWATCH that ran on the node the rest
 * left would leave the WATCH of an earlier batch on the connection the rest
 * goes to (a read that answered sold out, say), which would void the next
 * transaction there. *whole: the whole batch goes again, some of which
 * ran. */
static void to_resend(trip *t, int kind, int *r, int *nr, bool *whole)
{
    *nr = 0;
    *whole = false;
    for (int i = 0; i < t->nu; i++)
        if (kind == LC__TRIP_ACQUIRE && t->u[i].lock && t->u[i].state != RAN) {
            for (int j = 0; j < t->nu; j++) {
                r[(*nr)++] = j;
                *whole |= t->u[j].state == RAN && !t->u[j].free;
            }
            return;
        }
    if (watch_split(t)) {
        for (int j = 0; j < t->nu; j++)
            r[(*nr)++] = j;
        *whole = true;
        return;
    }
    int start = t->nu;
    while (start > 0) {
        const tunit *u = &t->u[start - 1];
        if (u->state == RAN && !u->free)
            break;
        start--;
    }
    bool any = false;
    for (int i = start; i < t->nu; i++)
        any |= t->u[i].state != RAN && !t->u[i].pinned;
    for (int i = start; any && i < t->nu; i++)
        if ((t->u[i].state != RAN && !t->u[i].pinned) || (t->u[i].state == RAN && t->u[i].free))
            r[(*nr)++] = i;
}

/* resend's ASKING: none; before every unit (they follow an ASK to the
 * node it named); before the transactions pinned to a WATCH taken through
 * an ASK only (the other commands of the batch go as they would: an
 * ASKING would let the importing node serve a key it does not hold yet). */
enum { ASKING_NONE = 0, ASKING_ALL, ASKING_PINNED };

/* Appends unit commands in r[0..nr-1] (after ASKINGs as asking says) to
 * ctx and reads every reply: seq[] gets the order sent (-1: an ASKING).
 * 0; or -1 when a reply did not come, with conn->trip_* telling what it
 * left unread before and after the lock command's. */
static int resend(trip *t, redisContext *ctx, const int *r, int nr, int asking)
{
    lc_conn *conn = t->conn;
    int seq[2 * (LC_PIPE_MAX + 1)], len = 0, ok = REDIS_OK;
    for (int i = 0; i < nr; i++) {
        const tunit *u = &t->u[r[i]];
        if (asking == ASKING_ALL || (asking == ASKING_PINNED && u->pinned)) {
            seq[len++] = -1;
            ok = ok == REDIS_OK ? redisAppendCommand(ctx, "ASKING") : ok;
        }
        for (int k = u->k0; k <= u->k1; k++) {
            seq[len++] = k;
            if (*t->reply[k])
                freeReplyObject(*t->reply[k]);
            *t->reply[k] = NULL;
            ok = ok == REDIS_OK ? redisAppendFormattedCommand(ctx, t->cmd[k].resp, t->cmd[k].len)
                                : ok;
        }
    }
    conn->trip_lock_unread = false;
    conn->trip_unread_before = conn->trip_unread_after = 0;
    if (ok != REDIS_OK) {
        /* nothing written, but the output buffer holds part of the batch */
        lc__seterr(conn->err, "redis: %s", ctx->err ? ctx->errstr : "out of memory");
        if (!ctx->err)
            ctx->err = REDIS_ERR_OOM;
        return -1;
    }
    for (int i = 0; i < len; i++) {
        void *rp = NULL;
        if (redisGetReply(ctx, &rp) != REDIS_OK || !rp) {
            lc__seterr(conn->err, "redis: %s", ctx->err ? ctx->errstr : "no reply");
            if (!ctx->err)
                ctx->err = REDIS_ERR_EOF;
            for (int q = i; q < len; q++)
                if (seq[q] >= 0 && t->cmd[seq[q]].pi < 0) {
                    conn->trip_lock_unread = true;
                    conn->trip_unread_before = q - i;
                    conn->trip_unread_after = len - q - 1;
                }
            return -1;
        }
        if (seq[i] < 0)
            freeReplyObject(rp); /* ASKING's +OK */
        else
            *t->reply[seq[i]] = rp;
    }
    return 0;
}

/* A reply standing for a command the router gave up on before it ran: an
 * error naming why, so the caller sees the reason, not the last redirect
 * (which would read as the node's own answer). NULL when out of memory. */
static redisReply *not_run_reply(const char *why)
{
    redisReply *r = calloc(1, sizeof *r);
    if (r && !(r->str = strdup(why))) {
        free(r);
        return NULL;
    }
    if (r) {
        r->type = REDIS_REPLY_ERROR;
        r->len = strlen(r->str);
    }
    return r;
}

/* The first word of the first TRYAGAIN, CLUSTERDOWN or LOADING among the
 * replies, into w (n bytes); "" when there is none. */
static void later_word(const trip *t, char *w, size_t n)
{
    w[0] = '\0';
    for (int k = 0; k < t->n; k++) {
        const redisReply *r = *t->reply[k];
        if (r && r->type == REDIS_REPLY_ERROR && lc__cluster_try_later(r->str, r->len)) {
            size_t len = strcspn(r->str, " ");
            snprintf(w, n, "%.*s", (int)(len < n ? len : n - 1), r->str);
            return;
        }
    }
}

static int cluster_trip(lc_conn *conn, redisContext **ctxp, int kind, int argc, const char **argv,
                        lc_pipe *p, bool p_first, bool sent, redisReply **rep, int64_t until)
{
    lc_client *c = conn->client;
    lc_cluster *cl = &c->cl;
    trip t;
    memset(&t, 0, sizeof t);
    t.conn = conn;
    t.slot = -1;
    redisReply *lrep = NULL;
    char *lock_resp = NULL;
    long long lock_len = 0;
    int rc = -1, np = p ? p->n : 0;
    /* one budget for the whole trip: finding the master, the redirects
     * and the back-offs (each round trip's own wait is hiredis's command
     * timeout on its socket) */
    int64_t t0 = lc_now_ms(), deadline = t0 + c->command_timeout_ms;
    if (until > 0 && until < deadline)
        deadline = until; /* a budget shared with the caller's other trips */
    conn->trip_lock_unread = false;
    conn->trip_unread_before = conn->trip_unread_after = 0;
    conn->trip_gave_up = false;
    if (np > 0) /* lc_conn_held_back: the last call that sent the caller's commands */
        conn->trip_held_back = false;
    if (rep)
        *rep = NULL;
    if (argc > 0 && (lock_len = redisFormatCommandArgv(&lock_resp, argc, argv, NULL)) < 0) {
        lc__seterr(conn->err, "lockcore: out of memory");
        if (sent && conn->ctx && !conn->ctx->err)
            conn->ctx->err = REDIS_ERR_OOM; /* its replies will never be read */
        return -1;
    }
    /* the batch in the order sent */
    for (int pass = 0; pass < 3; pass++) {
        if ((pass == 0 && p_first) || (pass == 2 && !p_first)) {
            for (int i = 0; i < np; i++) {
                t.cmd[t.n] = (tcmd){p->cmd[i], p->len[i], i, {0}};
                t.reply[t.n++] = &p->reply[i];
            }
        } else if (pass == 1 && argc > 0) {
            t.cmd[t.n] = (tcmd){lock_resp, (size_t)lock_len, -1, {0}};
            t.reply[t.n++] = &lrep;
        }
    }
    bool any_exec = false;
    for (int k = 0; k < t.n; k++) {
        if (lc__cmd_parse(t.cmd[k].resp, t.cmd[k].len, &t.cmd[k].info) != 0)
            t.cmd[k].info.slot = LC__CMD_UNKNOWN;
        if (t.slot < 0 && t.cmd[k].info.slot >= 0)
            t.slot = t.cmd[k].info.slot;
        any_exec |= t.cmd[k].info.exec;
    }
    /* The public entry points refuse a batch of two slots; this catches
     * lockcore's own callers too (a script whose keys hash apart), which
     * would otherwise go to one master and fail there, or worse, run part
     * of the batch on a node that does not own the rest. */
    for (int k = 0; k < t.n && !sent; k++) {
        int ks = t.cmd[k].info.slot;
        if (ks == LC__CMD_CROSS || (ks >= 0 && ks != t.slot)) {
            if (ks == LC__CMD_CROSS)
                lc__seterr(conn->err,
                           "lockcore: cluster: command %d of the batch names keys of two "
                           "slots: one batch goes to one master, not sent",
                           k);
            else
                lc__seterr(conn->err,
                           "lockcore: cluster: command %d of the batch names a key of slot %d, "
                           "the batch's is %d: one batch goes to one master, not sent",
                           k, ks, t.slot);
            goto out;
        }
    }
    for (int k = 0; k < t.n; k++) {
        tunit *u = &t.u[t.nu++];
        u->k0 = k;
        if (t.cmd[k].info.multi)
            while (k + 1 < t.n && !t.cmd[k].info.exec && !t.cmd[k].info.discard)
                k++;
        u->k1 = k;
        u->block = u->k1 > u->k0;
        u->free = !u->block && t.cmd[k].info.free;
        for (int q = u->k0; q <= u->k1; q++)
            u->lock |= t.cmd[q].pi < 0;
        u->pinned = u->block && t.cmd[u->k1].info.exec && conn->watch_addr >= 0 &&
                    conn->watch_slot == t.slot && t.slot >= 0;
    }

    /* the first round: on one node, the batch as it would go to one Redis */
    redisContext *ctx;
    int first;
    bool asked = false;
    if (sent) {
        ctx = conn->ctx;
        first = lc__trip_recv(ctx, argc > 0, p, p_first, &lrep, conn->err);
    } else {
        ctx = route(conn, t.slot, any_exec, deadline);
        if (!ctx)
            goto out;
        /* A transaction pinned to a WATCH taken through an ASK: the node is
         * importing the slot, and refuses each queued command with a MOVED
         * back to the node migrating it unless an ASKING comes first (one
         * before MULTI covers the whole block: Redis keeps the flag until
         * EXEC). Only the pinned units get one. */
        asked = any_exec && conn->watch_asking && conn->watch_addr >= 0 &&
                conn->watch_addr == conn->cur && conn->watch_slot == t.slot;
        if (asked) {
            int all[LC_PIPE_MAX + 1];
            for (int i = 0; i < t.nu; i++)
                all[i] = i;
            first = resend(&t, ctx, all, t.nu, ASKING_PINNED);
        } else {
            first = lc__trip(ctx, argc, argv, p, p_first, &lrep, conn->err);
        }
    }
    *ctxp = ctx;
    int from = conn->cur;
    if (first != 0) {
        if (!asked) { /* resend says itself what it left unread */
            int missing = 0;
            for (int i = 0; i < np; i++)
                missing += p->reply[i] == NULL;
            conn->trip_lock_unread = argc > 0 && lrep == NULL;
            conn->trip_unread_before = conn->trip_lock_unread && p_first ? missing : 0;
            conn->trip_unread_after = conn->trip_lock_unread && !p_first ? missing : 0;
        }
        if (conn->watch_addr == from)
            conn->watch_addr = -1;
        lc__cluster_failed(cl, from);
        for (int i = 0; i < t.nu; i++)
            t.u[i].via = conn->ctx_id; /* sent over it: a lost reply counts there */
        goto out;
    }
    int sent_k[LC_PIPE_MAX + 1];
    for (int k = 0; k < t.n; k++)
        sent_k[k] = k;
    track_watch(&t, sent_k, t.n, from, false); /* a WATCH goes without ASKING here */

    bool visited[LC__CL_MAX_ADDRS] = {false};
    if (from >= 0)
        visited[from] = true;
    int redirects = 0;
    int64_t backoff = BACKOFF_FIRST_MS;
    bool gave_up = false; /* some commands did not run and do not go again */
    int tryagain_at = -1; /* the node whose TRYAGAIN the last back-off was for */
    for (;;) {
        bool dnr = false, astray = false;
        for (int i = 0; i < t.nu; i++) {
            classify(&t, &t.u[i], from);
            if (t.u[i].state == RAN && t.u[i].via == 0 && !t.u[i].gone)
                t.u[i].via = conn->ctx_id; /* node from's, the one in use */
            dnr |= t.u[i].state != RAN;
            astray |= t.u[i].state == ASTRAY;
        }
        if (!dnr)
            break;
        if (astray) {
            char at[LC_ADDR_LEN] = "?";
            if (from >= 0)
                lc__cluster_addr_text(lc__cluster_at(cl, from), at, sizeof at);
            lc__seterr(conn->err,
                       "cluster: slot %d: %s redirected the batch for another slot: not sent "
                       "again",
                       t.slot, at);
            goto not_run;
        }
        int r[LC_PIPE_MAX + 1], nr;
        bool whole;
        to_resend(&t, kind, r, &nr, &whole);
        /* What did not run and does not go again (a command after it ran,
         * whose order a resend would change; a transaction pinned to its
         * WATCH's node) gets the reason as its reply, not the redirect,
         * which would read as the node's own answer. */
        bool again[LC_PIPE_MAX + 1] = {false};
        for (int i = 0; i < nr; i++)
            again[r[i]] = true;
        for (int i = 0; i < t.nu; i++) {
            tunit *u = &t.u[i];
            if (u->state == RAN || again[i])
                continue;
            lc__seterr(conn->err,
                       "cluster: slot %d: a command did not run (%s) and %s: not sent again",
                       t.slot,
                       u->state == MOVED    ? "MOVED"
                       : u->state == ASK    ? "ASK"
                       : u->state == ASTRAY ? "a redirect for another slot"
                                            : "TRYAGAIN, CLUSTERDOWN or LOADING",
                       u->pinned ? "its transaction's WATCH is on that node"
                                 : "a command after it in the batch ran");
            for (int k = u->k0; k <= u->k1; k++) {
                if (*t.reply[k])
                    freeReplyObject(*t.reply[k]);
                *t.reply[k] = not_run_reply(conn->err);
            }
            conn->trip_held_back |= u->pinned &&
                                    (u->state == ASK || u->state == LATER || u->state == MOVED);
            u->state = RAN;
            u->gone = true;
            gave_up = true;
        }
        if (nr == 0)
            break;
        int st = -1, tg = -1;
        bool same = true;
        for (int i = 0; i < nr; i++) {
            const tunit *u = &t.u[r[i]];
            if (u->state == RAN)
                continue;
            if (st < 0) {
                st = u->state;
                tg = u->target;
            } else if (u->state != st || u->target != tg) {
                same = false;
            }
        }
        bool follow = same && !whole && (st == MOVED || st == ASK) && !(st == MOVED && visited[tg]);
        char at[LC_ADDR_LEN] = "";
        if (tg >= 0)
            lc__cluster_addr_text(lc__cluster_at(cl, tg), at, sizeof at);
        if (follow) {
            /* An ASK after a TRYAGAIN at the node it names is a migration
             * step (the old node has no key, the new one not all of them
             * yet), not nodes that disagree: the back-offs and
             * command_timeout_ms bound it, not the redirect count. */
            bool migrating = st == ASK && tryagain_at == tg;
            if (!migrating && ++redirects > LC__CL_MAX_REDIRECTS) {
                lc__seterr(conn->err,
                           "cluster: slot %d: too many redirects (%d), the last %s to %s (its "
                           "nodes disagree about it): not sent again",
                           t.slot, LC__CL_MAX_REDIRECTS, st == MOVED ? "MOVED" : "ASK", at);
                goto not_run;
            }
            if (st == MOVED) {
                lc__cluster_moved(cl, t.slot, tg, from);
                atomic_fetch_add(&cl->moved, 1);
                visited[tg] = true;
            } else {
                atomic_fetch_add(&cl->ask, 1);
            }
            ctx = node_ctx(conn, tg);
            if (!ctx) {
                lc__cluster_failed(cl, tg);
                goto not_run; /* nothing sent; node_ctx said why */
            }
        } else {
            /* TRYAGAIN, CLUSTERDOWN, LOADING; the slot's keys on two nodes
             * (part ran, part was redirected: a migration under way); a
             * MOVED back to a node already tried; redirects that disagree.
             * Nothing of what goes again ran: wait, then the map's master. */
            /* A refresh is due, except for TRYAGAIN alone or ASKs alone (a
             * migration step: the map is right, the keys are between two
             * nodes): CLUSTERDOWN or LOADING may be a master the map still
             * names after a failover, restarted and loading, or a slot no
             * longer served where the map says. */
            char lw[16];
            later_word(&t, lw, sizeof lw);
            if ((st != LATER || strcmp(lw, "TRYAGAIN") != 0) && !(same && st == ASK))
                atomic_store(&cl->due, 1);
            tryagain_at = st == LATER && strcmp(lw, "TRYAGAIN") == 0 ? from : -1;
            if (lc_now_ms() + backoff > deadline) {
                lc__seterr(conn->err, "cluster: slot %d: %s: retried for %lld ms: not sent again",
                           t.slot,
                           whole || !same ? "its keys are on two nodes (a migration)"
                           : st == LATER  ? (lw[0] ? lw : "TRYAGAIN, CLUSTERDOWN or LOADING")
                                          : "MOVED back to a node already tried",
                           (long long)(lc_now_ms() - t0));
                goto not_run;
            }
            atomic_fetch_add(&cl->retries, 1);
            lc__sleep_ms(backoff);
            backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
            ctx = route(conn, t.slot, false, deadline);
            if (!ctx)
                goto not_run; /* nothing sent; route said why */
        }
        *ctxp = ctx;
        from = conn->cur;
        for (int i = 0; i < nr; i++) {
            tunit *u = &t.u[r[i]];
            u->twice |= !u->free && u->via != 0 && u->via != conn->ctx_id;
        }
        if (resend(&t, ctx, r, nr, follow && st == ASK ? ASKING_ALL : ASKING_NONE) != 0) {
            if (conn->watch_addr == from)
                conn->watch_addr = -1;
            lc__cluster_failed(cl, from);
            for (int i = 0; i < nr; i++)
                if (t.u[r[i]].via == 0)
                    t.u[r[i]].via = conn->ctx_id; /* sent over it: a lost reply counts there */
            goto out;
        }
        int ns = 0;
        for (int i = 0; i < nr; i++)
            for (int k = t.u[r[i]].k0; k <= t.u[r[i]].k1; k++)
                sent_k[ns++] = k;
        track_watch(&t, sent_k, ns, from, follow && st == ASK);
    }
    /* lc_conn_pipe's caller hears that some of its commands did not run
     * (conn->trip_gave_up); a lock's trip answers for its lock command,
     * p's replies say the rest */
    conn->trip_gave_up = gave_up;
    rc = 0;
    goto out;
not_run:
    /* Every reply came, but what was redirected or told to wait did not
     * run: its reply becomes the reason (conn->err), and the caller hears
     * "not run" (LC__TRIP_NOT_RUN), not a reply of the node's. */
    for (int i = 0; i < t.nu; i++) {
        if (t.u[i].state == RAN)
            continue;
        for (int k = t.u[i].k0; k <= t.u[i].k1; k++) {
            if (*t.reply[k])
                freeReplyObject(*t.reply[k]);
            *t.reply[k] = not_run_reply(conn->err);
        }
    }
    rc = LC__TRIP_NOT_RUN;
out:
    /* lc_conn_via: where the caller's commands ran (the lock command's
     * node does not matter to it) */
    for (int i = 0; i < t.nu; i++)
        if (!t.u[i].lock && (t.u[i].via != 0 || t.u[i].twice))
            via_add(conn, t.u[i].twice ? 0 : t.u[i].via);
    free(lock_resp);
    if (rep)
        *rep = lrep;
    else if (lrep)
        freeReplyObject(lrep);
    return rc;
}

void lc__conn_via_note(lc_conn *conn, const redisContext *ctx, const lc_pipe *p)
{
    if (!p || p->n == 0)
        return;
    via_reset(conn);
    via_add(conn, ctx != NULL && ctx == conn->ctx ? conn->ctx_id : 0);
}

int lc__conn_trip(lc_conn *conn, redisContext **ctx, int kind, int argc, const char **argv,
                  lc_pipe *p, bool p_first, bool sent, redisReply **rep)
{
    if (conn->client->cl.on) {
        if (p && p->n > 0)
            via_reset(conn);
        return cluster_trip(conn, ctx, kind, argc, argv, p, p_first, sent, rep, 0);
    }
    lc__conn_via_note(conn, *ctx, p);
    return sent ? lc__trip_recv(*ctx, argc > 0, p, p_first, rep, conn->err)
                : lc__trip(*ctx, argc, argv, p, p_first, rep, conn->err);
}

redisReply *lc__conn_eval(lc_conn *conn, const char *sha, const char *body, int nkeys, int nargs,
                          const char **args)
{
    if (!conn->client->cl.on) {
        redisContext *ctx = lc__conn_ctx(conn);
        return ctx ? lc__eval(ctx, sha, body, nkeys, nargs, args, conn->err) : NULL;
    }
    const char *argv[16];
    char nk[16];
    if (evalsha_argv(argv, nk, sha, nkeys, nargs, args, conn->err) != 0)
        return NULL;
    redisContext *ctx = NULL;
    redisReply *r = NULL;
    int t = cluster_trip(conn, &ctx, LC__TRIP_PLAIN, 3 + nargs, argv, NULL, false, false, &r, 0);
    if (t == 0 && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        /* this node's script cache lacks it (a redirect, a promoted
         * replica): its text, once, to the same slot */
        freeReplyObject(r);
        r = NULL;
        argv[0] = "EVAL";
        argv[1] = body;
        t = cluster_trip(conn, &ctx, LC__TRIP_PLAIN, 3 + nargs, argv, NULL, false, false, &r, 0);
    }
    if (t != 0) {
        if (r)
            freeReplyObject(r); /* not run: conn->err says why */
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        lc__seterr(conn->err, "redis: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

void lc__conn_close(lc_conn *conn)
{
    if (!conn)
        return;
    if (conn->ctx)
        redisFree(conn->ctx);
    for (int i = 0; conn->nctx && i < LC__CL_MAX_ADDRS; i++)
        if (conn->nctx[i])
            redisFree(conn->nctx[i]);
    free(conn->nctx);
    free(conn->nid);
    free(conn);
}

static lc_status cluster_ping(lc_conn *conn)
{
    lc_cluster *cl = &conn->client->cl;
    if (lc__cluster_ensure(cl, conn->err) != 0)
        return LC_IO;
    bool seen[LC__CL_MAX_ADDRS] = {false};
    char why[LC_ERRSTR_LEN] = "";
    int uncovered = 0, first_gap = -1, bad = 0;
    for (int s = 0; s < LC__SLOTS; s++) {
        int a = lc__cluster_master(cl, s);
        if (a < 0) {
            uncovered++;
            if (first_gap < 0)
                first_gap = s;
            continue;
        }
        if (seen[a])
            continue;
        seen[a] = true;
        redisContext *ctx = node_ctx(conn, a);
        redisReply *r = ctx ? redisCommand(ctx, "PING") : NULL;
        if (!r || r->type != REDIS_REPLY_STATUS) {
            char at[LC_ADDR_LEN];
            lc__cluster_addr_text(lc__cluster_at(cl, a), at, sizeof at);
            if (!bad++)
                lc__seterr(why, "cluster: master %s of slot %d: %s", at, s,
                           r     ? r->str
                           : ctx ? ctx->errstr
                                 : conn->err);
            lc__cluster_failed(cl, a);
        }
        if (r)
            freeReplyObject(r);
    }
    if (bad) {
        memcpy(conn->err, why, sizeof why);
        return LC_IO;
    }
    if (uncovered) {
        lc__seterr(conn->err, "cluster: %d slots have no master in the map (slot %d first)",
                   uncovered, first_gap);
        atomic_store(&cl->due, 1);
        return LC_IO;
    }
    return LC_OK;
}
