/* lc_redlock.c — the redlock mode: the Redlock algorithm as the Redis docs
 * describe it ("Distributed Locks with Redis"), to the letter.
 *
 * One fresh token for every node; SET key token NX PX lease goes to the N
 * independent masters at once, and the lock is held when a majority said
 * OK and the round took less than the lease; its validity is the lease
 * minus the round's time minus a clock drift allowance. A failed attempt
 * releases on every node, those that did not answer included (the SET may
 * have run there and only its reply been lost). The release is the token
 * mode's compare-and-delete script, on every node.
 *
 * Why parallel, and why by hand: the round's time is subtracted from the
 * validity, so N sequential round trips would cost N times the latency and
 * one slow node would delay every node after it. hiredis' async API needs
 * an event library; instead each node has a plain context in non-blocking
 * mode: the command is formatted once, appended to every node's output
 * buffer, and one poll() loop writes and reads them all, until every node
 * answered or the per-node timeout passed. A node that did not answer in
 * time may still answer later, so its context is dropped and remade on the
 * next round: a kept context never has a reply in flight.
 *
 * The node contexts belong to the lc_conn (a hiredis context is not
 * thread-safe), so each caller thread has its own N sockets.
 *
 * The restart delay (lockcore.h, redlock_restart_delay_ms) is the one
 * addition to the algorithm, and off by default: a node that restarted
 * without persistence forgot what it granted, so it must not vote until
 * every lease it may have granted has run out elsewhere. The node's own
 * uptime says when that is, read once per new context.
 */
#include "lc_redlock.h"

#include "lc_conn.h"
#include "lc_internal.h"
#include "lc_scripts.h"
#include "lc_util.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lc_rl_conn {
    redisContext *ctx[LC_REDLOCK_MAX_NODES];
    /* With a restart delay: the node's uptime was read on this context,
     * and it votes from votes_at (lc_now_ms time) on. A new context is
     * unchecked: a restart always breaks the old one. */
    bool checked[LC_REDLOCK_MAX_NODES];
    int64_t votes_at[LC_REDLOCK_MAX_NODES];
};

/* --- options ------------------------------------------------------------ */

static lc_status bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static lc_status bad(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        snprintf(err, errlen, "lockcore: ");
        size_t l = strlen(err);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + l, errlen - l, fmt, ap);
        va_end(ap);
    }
    return LC_MISUSE;
}

lc_status lc_redlock_setup(lc_client *c, const lc_options *o, char *err, size_t errlen)
{
    int n = o->redlock_node_count;
    int timeout = o->redlock_node_timeout_ms ? o->redlock_node_timeout_ms : 50;
    if (timeout < 1 || timeout > 60000)
        return bad(err, errlen, "redlock_node_timeout_ms must be 1..60000");
    c->rl_node_timeout_ms = timeout;
    if (o->redlock_restart_delay_ms < 0 || o->redlock_restart_delay_ms > 86400000)
        return bad(err, errlen, "redlock_restart_delay_ms must be 0..86400000");
    c->rl_restart_delay_ms = o->redlock_restart_delay_ms;
    if (n == 0)
        return LC_OK;
    if (n < 3 || n > LC_REDLOCK_MAX_NODES || n % 2 == 0 || !o->redlock_nodes)
        return bad(err, errlen,
                   "redlock_node_count must be odd, 3..%d (a majority of an even count "
                   "tolerates no more failures than one node fewer): got %d",
                   LC_REDLOCK_MAX_NODES, n);
    for (int i = 0; i < n; i++) {
        const char *node = o->redlock_nodes[i];
        const char *colon = node ? strrchr(node, ':') : NULL;
        if (!colon || colon == node || (size_t)(colon - node) >= sizeof c->rl_host[i])
            return bad(err, errlen, "redlock node \"%s\" is not host:port", node ? node : "");
        char *end = NULL;
        long port = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end || port < 1 || port > 65535)
            return bad(err, errlen, "redlock node \"%s\": port must be 1..65535", node);
        memcpy(c->rl_host[i], node, (size_t)(colon - node));
        c->rl_host[i][colon - node] = '\0';
        c->rl_port[i] = (int)port;
        for (int j = 0; j < i; j++) {
            if (c->rl_port[j] == c->rl_port[i] && strcmp(c->rl_host[j], c->rl_host[i]) == 0)
                return bad(err, errlen,
                           "redlock node \"%s\" is listed twice (the nodes must be "
                           "independent)",
                           node);
        }
    }
    c->rl_n = n;
    return LC_OK;
}

int64_t lc_redlock_drift_ms(int64_t lease_ms)
{
    /* The reference implementation: (int)(ttl * CLOCK_DRIFT_FACTOR) + 2,
     * the factor 0.01, the 2 ms for the milliseconds' rounding. */
    return lease_ms / 100 + 2;
}

/* --- the node contexts -------------------------------------------------- */

void lc_redlock_conn_free(struct lc_rl_conn *rl)
{
    if (!rl)
        return;
    for (int i = 0; i < LC_REDLOCK_MAX_NODES; i++) {
        if (rl->ctx[i])
            redisFree(rl->ctx[i]);
    }
    free(rl);
}

static void node_drop(struct lc_rl_conn *rl, int i)
{
    if (rl->ctx[i])
        redisFree(rl->ctx[i]);
    rl->ctx[i] = NULL;
    rl->checked[i] = false;
}

/* Drops every kept context that is readable while idle: the peer closed it
 * (a restarted node) or sent what nobody asked for. One poll() for all. */
static void drop_stale(lc_client *c, struct lc_rl_conn *rl)
{
    struct pollfd pf[LC_REDLOCK_MAX_NODES];
    int idx[LC_REDLOCK_MAX_NODES], k = 0;
    for (int i = 0; i < c->rl_n; i++) {
        if (rl->ctx[i]) {
            pf[k].fd = rl->ctx[i]->fd;
            pf[k].events = POLLIN;
            pf[k].revents = 0;
            idx[k++] = i;
        }
    }
    if (k == 0 || poll(pf, (nfds_t)k, 0) <= 0)
        return;
    for (int j = 0; j < k; j++) {
        if (pf[j].revents)
            node_drop(rl, idx[j]);
    }
}

enum { RL_SKIP, RL_WRITING, RL_READING, RL_DONE, RL_FAILED };

/* One parallel round: cmd (len bytes of RESP) to every node i with send[i],
 * each reply in rep[i] (NULL when the node failed or did not answer within
 * the node timeout; an error reply is a reply). checked_only: a node whose
 * context is gone or unchecked (check_uptimes) is not connected, and counts
 * as failed — a node that restarted since its check must not vote. Returns
 * how many failed, the last reason in conn->err. */
static int round_trip(lc_conn *conn, const bool *send, const char *cmd, size_t len,
                      redisReply **rep, bool checked_only)
{
    lc_client *c = conn->client;
    struct lc_rl_conn *rl = conn->rl;
    int st[LC_REDLOCK_MAX_NODES];
    int64_t deadline = lc_now_ms() + c->rl_node_timeout_ms;
    drop_stale(c, rl);
    for (int i = 0; i < c->rl_n; i++) {
        rep[i] = NULL;
        st[i] = send[i] ? RL_WRITING : RL_SKIP;
        if (!send[i])
            continue;
        if (checked_only && (!rl->ctx[i] || !rl->checked[i])) {
            lc_seterr(conn->err, "redlock node %s:%d: reconnected, its uptime not checked yet",
                      c->rl_host[i], c->rl_port[i]);
            st[i] = RL_FAILED;
            continue;
        }
        if (!rl->ctx[i]) {
            /* Non-blocking connect: on loopback it is done at once, to a
             * remote node the poll loop below waits for it, bounded by the
             * same deadline. */
            rl->ctx[i] = redisConnectNonBlock(c->rl_host[i], c->rl_port[i]);
            if (!rl->ctx[i] || rl->ctx[i]->err) {
                lc_seterr(conn->err, "redlock node %s:%d: %s", c->rl_host[i], c->rl_port[i],
                          rl->ctx[i] ? rl->ctx[i]->errstr : "out of memory");
                st[i] = RL_FAILED;
                continue;
            }
        }
        /* Write at once: a connected socket takes a small command without
         * a poll() first, which saves one system call per round. */
        int done = 0;
        if (redisAppendFormattedCommand(rl->ctx[i], cmd, len) != REDIS_OK ||
            redisBufferWrite(rl->ctx[i], &done) != REDIS_OK)
            st[i] = RL_FAILED;
        else if (done)
            st[i] = RL_READING;
    }
    for (;;) {
        struct pollfd pf[LC_REDLOCK_MAX_NODES];
        int idx[LC_REDLOCK_MAX_NODES], k = 0;
        for (int i = 0; i < c->rl_n; i++) {
            if (st[i] == RL_WRITING || st[i] == RL_READING) {
                pf[k].fd = rl->ctx[i]->fd;
                pf[k].events = st[i] == RL_WRITING ? POLLOUT : POLLIN;
                pf[k].revents = 0;
                idx[k++] = i;
            }
        }
        int64_t now = lc_now_ms();
        if (k == 0 || now >= deadline)
            break;
        int rc = poll(pf, (nfds_t)k, (int)(deadline - now));
        if (rc < 0 && errno != EINTR)
            break;
        for (int j = 0; rc > 0 && j < k; j++) {
            if (!pf[j].revents)
                continue;
            int i = idx[j];
            redisContext *ctx = rl->ctx[i];
            if (st[i] == RL_WRITING) {
                int done = 0;
                if (redisBufferWrite(ctx, &done) != REDIS_OK)
                    st[i] = RL_FAILED;
                else if (done)
                    st[i] = RL_READING;
                continue;
            }
            void *r = NULL;
            if (redisBufferRead(ctx) != REDIS_OK || redisGetReplyFromReader(ctx, &r) != REDIS_OK) {
                st[i] = RL_FAILED;
            } else if (r) {
                rep[i] = r;
                st[i] = RL_DONE;
            }
        }
    }
    int failed = 0;
    for (int i = 0; i < c->rl_n; i++) {
        if (st[i] == RL_SKIP || st[i] == RL_DONE)
            continue;
        failed++;
        if (st[i] != RL_FAILED || !rl->ctx[i] || !rl->ctx[i]->err)
            lc_seterr(conn->err, "redlock node %s:%d: no reply within %d ms", c->rl_host[i],
                      c->rl_port[i], c->rl_node_timeout_ms);
        else
            lc_seterr(conn->err, "redlock node %s:%d: %s", c->rl_host[i], c->rl_port[i],
                      rl->ctx[i]->errstr);
        node_drop(rl, i);
    }
    return failed;
}

static lc_status ensure_nodes(lc_conn *conn)
{
    if (conn->client->rl_n == 0) {
        lc_seterr(conn->err, "lockcore: redlock mode needs redlock_nodes in lc_options");
        return LC_MISUSE;
    }
    if (!conn->rl && !(conn->rl = calloc(1, sizeof *conn->rl)))
        return LC_NOMEM;
    return LC_OK;
}

/* --- the restart delay --------------------------------------------------- */

/* Reads the uptime of every node whose context has not been checked yet
 * (connecting it first), in one parallel round: INFO server. A node up for
 * less than the restart delay votes once it has been up that long. A node
 * that failed stays unchecked and gets no SET this attempt. */
static void check_uptimes(lc_conn *conn)
{
    lc_client *c = conn->client;
    struct lc_rl_conn *rl = conn->rl;
    bool send[LC_REDLOCK_MAX_NODES];
    int k = 0;
    drop_stale(c, rl); /* a node restarted since its check: check again */
    for (int i = 0; i < c->rl_n; i++) {
        send[i] = !rl->ctx[i] || !rl->checked[i];
        k += send[i];
    }
    if (k == 0)
        return;
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
    redisReply *rep[LC_REDLOCK_MAX_NODES];
    round_trip(conn, send, info, sizeof info - 1, rep, false);
    int64_t now = lc_now_ms();
    for (int i = 0; i < c->rl_n; i++) {
        redisReply *r = rep[i];
        if (!r)
            continue;
        const char *u = r->type == REDIS_REPLY_STRING ? strstr(r->str, "uptime_in_seconds:") : NULL;
        if (u) {
            /* How long the node has surely been up. Redis counts whole
             * seconds of its clock since a start time it also cut to whole
             * seconds, so the figure can run up to a second ahead of the
             * truth (started at 10.9, asked at 11.2: "1"): one second less
             * is the safe bound. */
            int64_t up_ms = strtoll(u + 18, NULL, 10) * 1000 - 1000;
            if (up_ms < 0)
                up_ms = 0;
            int64_t rest = c->rl_restart_delay_ms - up_ms;
            rl->checked[i] = true;
            rl->votes_at[i] = rest > 0 ? now + rest : 0;
        } else {
            lc_seterr(conn->err, "redlock node %s:%d: INFO server gave no uptime_in_seconds",
                      c->rl_host[i], c->rl_port[i]);
        }
        freeReplyObject(r);
    }
}

/* --- release ------------------------------------------------------------ */

/* The token's compare-and-delete on every node: EVALSHA, then EVAL to the
 * nodes that answered NOSCRIPT (flushed or restarted). Sets how many nodes
 * answered the script and how many deleted the key. */
static lc_status unlock_all(lc_conn *conn, const char *key, const char *token, int *answered,
                            int *deleted)
{
    lc_client *c = conn->client;
    bool send[LC_REDLOCK_MAX_NODES];
    redisReply *rep[LC_REDLOCK_MAX_NODES];
    *answered = *deleted = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *argv[] = {pass ? "EVAL" : "EVALSHA",
                              pass ? LC_SCRIPT_TOKEN_RELEASE : LC_SCRIPT_TOKEN_RELEASE_SHA, "1",
                              key, token};
        char *cmd = NULL;
        int len = redisFormatCommandArgv(&cmd, 5, argv, NULL);
        if (len < 0)
            return LC_NOMEM;
        if (pass == 0) {
            for (int i = 0; i < c->rl_n; i++)
                send[i] = true;
        }
        round_trip(conn, send, cmd, (size_t)len, rep, false);
        redisFreeCommand(cmd);
        bool again = false;
        for (int i = 0; i < c->rl_n; i++) {
            redisReply *r = rep[i];
            bool noscript = r && r->type == REDIS_REPLY_ERROR &&
                            strncmp(r->str, "NOSCRIPT", 8) == 0;
            if (send[i] && r && r->type == REDIS_REPLY_INTEGER) {
                (*answered)++;
                *deleted += r->integer == 1;
            } else if (r && r->type == REDIS_REPLY_ERROR && !noscript) {
                lc_seterr(conn->err, "redlock node %s:%d: %s", c->rl_host[i], c->rl_port[i],
                          r->str);
            }
            send[i] = noscript;
            again |= noscript;
            if (r)
                freeReplyObject(r);
        }
        if (!again)
            break;
    }
    return LC_OK;
}

lc_status lc_redlock_release(lc_conn *conn, const char *key, const char *token, int64_t valid_until)
{
    lc_status s = ensure_nodes(conn);
    if (s != LC_OK)
        return s;
    int answered, deleted;
    if ((s = unlock_all(conn, key, token, &answered, &deleted)) != LC_OK)
        return s;
    int quorum = conn->client->rl_n / 2 + 1;
    if (lc_now_ms() >= valid_until) {
        lc_seterr(conn->err, "redlock: released after its validity ran out");
        return LC_LOST;
    }
    if (deleted >= quorum)
        return LC_OK;
    if (answered < quorum)
        return LC_IO;
    lc_seterr(conn->err, "redlock: only %d of %d nodes held this token", deleted,
              conn->client->rl_n);
    return LC_NOT_OWNER;
}

/* --- acquire ------------------------------------------------------------ */

lc_status lc_redlock_acquire(lc_conn *conn, const lc_lock_args *a, const char *token,
                             int64_t deadline, int64_t *valid_until)
{
    lc_status s = ensure_nodes(conn);
    if (s != LC_OK)
        return s;
    lc_client *c = conn->client;
    int n = c->rl_n, quorum = n / 2 + 1;
    int64_t drift = lc_redlock_drift_ms(a->lease_ms);
    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)a->lease_ms);
    const char *argv[] = {"SET", a->key, token, "NX", "PX", lease_s};
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, 6, argv, NULL);
    if (len < 0)
        return LC_NOMEM;
    bool all[LC_REDLOCK_MAX_NODES];
    for (;;) {
        redisReply *rep[LC_REDLOCK_MAX_NODES];
        if (c->rl_restart_delay_ms > 0) {
            check_uptimes(conn);
            int64_t now = lc_now_ms();
            for (int i = 0; i < n; i++)
                all[i] = conn->rl->checked[i] && now >= conn->rl->votes_at[i];
        } else {
            for (int i = 0; i < n; i++)
                all[i] = true;
        }
        int64_t t0 = lc_now_ms();
        round_trip(conn, all, cmd, (size_t)len, rep, c->rl_restart_delay_ms > 0);
        int64_t elapsed = lc_now_ms() - t0;
        int granted = 0, answered = 0;
        for (int i = 0; i < n; i++) {
            redisReply *r = rep[i];
            if (r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_NIL)) {
                answered++;
                granted += r->type == REDIS_REPLY_STATUS;
            } else if (r) {
                lc_seterr(conn->err, "redlock node %s:%d SET NX PX: %s", c->rl_host[i],
                          c->rl_port[i], r->str);
            }
            if (r)
                freeReplyObject(r);
        }
        if (granted >= quorum && a->lease_ms - elapsed - drift > 0) {
            *valid_until = t0 + a->lease_ms - drift;
            redisFreeCommand(cmd);
            return LC_OK;
        }
        /* Not held: give back what this attempt may have taken, on every
         * node, before anyone waits on it for a lease. */
        int ans_u, del_u;
        if (unlock_all(conn, a->key, token, &ans_u, &del_u) != LC_OK) {
            redisFreeCommand(cmd);
            return LC_NOMEM;
        }
        if (answered < quorum) {
            redisFreeCommand(cmd);
            lc_seterr(conn->err, "redlock: %d of %d nodes answered, %d needed", answered, n,
                      quorum);
            return LC_IO;
        }
        int64_t now = lc_now_ms();
        if (now >= deadline || lc_canceled(a->cancel)) {
            redisFreeCommand(cmd);
            return now >= deadline ? LC_BUSY : LC_CANCELED;
        }
        /* A random delay, so that clients that split the votes do not
         * collide again in lockstep. */
        int64_t span = 2 * c->retry_interval_ms;
        int64_t nap = rand_r(&conn->rng) % (span + 1);
        if (a->cancel && nap > LC_CANCEL_LATENCY_MS)
            nap = LC_CANCEL_LATENCY_MS;
        lc_sleep_ms(nap < deadline - now ? nap : deadline - now);
    }
}
