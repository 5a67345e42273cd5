/* lc_redlock.c — the redlock mode: the Redlock algorithm as the Redis docs
 * describe it ("Distributed Locks with Redis"), to the letter.
 *
 * One fresh token, the same on every node; SET key token NX PX lease goes to the N
 * independent masters at once, and the lock is held when a majority said
 * OK and the round took less than the lease; its validity is the lease
 * minus the round's time minus a clock drift allowance. A failed attempt
 * releases on every node, those that did not answer included (the SET may
 * have run there and only its reply been lost). The release is the token
 * mode's compare-and-delete script, on every node, sent as EVAL (its text
 * along: no NOSCRIPT round after a node lost its script cache).
 *
 * Why parallel, and why by hand: the round's time is subtracted from the
 * validity, so N sequential round trips would cost N times the latency and
 * one slow node would delay every node after it. hiredis' async API needs
 * an event library; instead each node has a plain context in non-blocking
 * mode: the command is formatted once, appended to every node's output
 * buffer, and one poll() loop writes and reads them all.
 *
 * A round that decides on a majority (the acquire's SET, the release)
 * returns as soon as the majority answered: the other nodes have the
 * command and will run it; only their replies are still on their way.
 * The rule for a kept context: every reply in flight on it is counted
 * (late[]), and all of them must come within the node timeout of the newest
 * command sent there; the next round reads what came without waiting,
 * sends its command behind the rest (a connection keeps its order: a late
 * SET runs before the release that follows it), and drops a context whose
 * replies are overdue, as a node that did not answer in time. A node
 * already RL_LATE_MAX replies behind is waited for first (at most its node
 * timeout), so a stopped node costs a majority round at most one node
 * timeout.
 * The other rounds (INFO, a failed attempt's release) wait for every node
 * or its timeout. On 5 loopback nodes sharing 2 CPUs this is what makes a
 * cycle cheaper: the client writes the next round while the slowest two
 * servers still run, and reads their late reply together with the next.
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
    /* Replies in flight on ctx[i] that an earlier round no longer waited
     * for (it returned on a majority), whether this round's is awaited
     * after them, and until when (lc_now_ms time: the newest command's
     * node timeout) they may all take. */
    int late[LC_REDLOCK_MAX_NODES];
    bool cur[LC_REDLOCK_MAX_NODES];
    int64_t until[LC_REDLOCK_MAX_NODES];
    /* With a restart delay: the node's uptime was read on this context,
     * and it votes from votes_at (lc_now_ms time) on. A new context is
     * unchecked: a restart always breaks the old one. */
    bool checked[LC_REDLOCK_MAX_NODES];
    int64_t votes_at[LC_REDLOCK_MAX_NODES];
};

/* A node whose context has this many earlier replies in flight is waited
 * for before the next command goes behind them. */
#define RL_LATE_MAX 2

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

lc_status lc__redlock_setup(lc_client *c, const lc_options *o, char *err, size_t errlen)
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
    if (n > 0 && !o->redlock_nodes)
        return bad(err, errlen, "redlock_nodes is NULL with redlock_node_count %d", n);
    if (n < 3 || n > LC_REDLOCK_MAX_NODES || n % 2 == 0)
        return bad(err, errlen,
                   "redlock_node_count must be odd, 3..%d (a majority of an even count "
                   "tolerates no more failures than one node fewer): got %d",
                   LC_REDLOCK_MAX_NODES, n);
    for (int i = 0; i < n; i++) {
        const char *node = o->redlock_nodes[i];
        if (lc__split_addr(node, false, c->rl_host[i], sizeof c->rl_host[i], &c->rl_port[i]) != 0)
            return bad(err, errlen,
                       "redlock node \"%s\" is not host:port (port 1..65535, no space in the "
                       "host)",
                       node ? node : "");
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

void lc__redlock_conn_free(struct lc_rl_conn *rl)
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
    rl->late[i] = 0;
    rl->cur[i] = false;
}

/* Node i answered (up) or failed (down): lc_stats.redlock_nodes_down's
 * bit. Any connection's thread. */
static void node_seen(lc_client *c, int i, bool up)
{
    if (up)
        atomic_fetch_and_explicit(&c->rl_down, ~(uint_fast32_t)(1u << i), memory_order_relaxed);
    else
        atomic_fetch_or_explicit(&c->rl_down, (uint_fast32_t)(1u << i), memory_order_relaxed);
}

/* Reads what node i's socket holds and takes every complete reply: an
 * earlier round's is dropped, this round's goes to *got. false: the
 * context failed (EOF, a protocol error, a reply nobody asked for). */
static bool node_read(struct lc_rl_conn *rl, int i, redisReply **got)
{
    redisContext *ctx = rl->ctx[i];
    if (redisBufferRead(ctx) != REDIS_OK)
        return false;
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(ctx, &r) != REDIS_OK)
            return false;
        if (!r)
            return true;
        if (rl->late[i] > 0) {
            rl->late[i]--;
            freeReplyObject(r);
        } else if (rl->cur[i]) {
            rl->cur[i] = false;
            *got = r;
        } else {
            freeReplyObject(r);
            return false;
        }
    }
}

/* Before every round. The rule of this file: every reply in flight on a
 * kept context is counted in late[] (an earlier round returned on a
 * majority without it), and comes within the node timeout of the newest
 * command sent there, or the context is dropped as a node that did not
 * answer in time — its commands may still run, as with any timeout.
 * Reads what has come, without waiting; drops the contexts whose replies
 * are overdue, and every idle one that is readable: the peer closed it (a
 * restarted node) or sent what nobody asked for. Replies still on their
 * way stay in flight and the round's command goes behind them (a
 * connection keeps its order, so it runs after them), except on a node
 * already RL_LATE_MAX behind: that one is waited for, at most until its
 * node timeout. */
static void drain(lc_client *c, struct lc_rl_conn *rl)
{
    bool first = true;
    for (;;) {
        struct pollfd pf[LC_REDLOCK_MAX_NODES];
        int idx[LC_REDLOCK_MAX_NODES], k = 0;
        int64_t until = INT64_MAX, now = lc_now_ms();
        for (int i = 0; i < c->rl_n; i++) {
            redisContext *ctx = rl->ctx[i];
            bool must = ctx && rl->late[i] >= RL_LATE_MAX;
            if (!ctx || (!first && !must))
                continue;
            if (must && rl->until[i] < until)
                until = rl->until[i];
            pf[k].fd = ctx->fd;
            pf[k].events = rl->late[i] > 0 && sdslen(ctx->obuf) ? POLLOUT : POLLIN;
            pf[k].revents = 0;
            idx[k++] = i;
        }
        if (k == 0 || (!first && until == INT64_MAX))
            return;
        int rc = poll(pf, (nfds_t)k, first || until <= now ? 0 : (int)(until - now));
        if (rc < 0 && errno != EINTR)
            return;
        for (int j = 0; rc > 0 && j < k; j++) {
            int i = idx[j], done = 0;
            redisReply *none = NULL;
            if (!pf[j].revents)
                continue;
            bool failed = rl->late[i] == 0 ||
                          (pf[j].events == POLLOUT &&
                           redisBufferWrite(rl->ctx[i], &done) != REDIS_OK) ||
                          (pf[j].events == POLLIN && !node_read(rl, i, &none));
            if (failed)
                node_drop(rl, i);
            if (failed || pf[j].events == POLLIN) /* a write alone is no reply */
                node_seen(c, i, !failed);
        }
        /* Only now, with what has come read: a reply that arrived in time
         * but was not read until this round is not a node that failed to
         * answer. */
        now = lc_now_ms();
        for (int j = 0; j < k; j++) {
            int i = idx[j];
            if (rl->ctx[i] && rl->late[i] > 0 && now >= rl->until[i]) {
                node_drop(rl, i); /* no reply within its node timeout */
                node_seen(c, i, false);
            }
        }
        first = false;
    }
}

/* RL_UNCHECKED: failed without being asked (a node reconnected and not yet
 * checked): as RL_FAILED, but it says nothing of whether the node is up. */
enum { RL_SKIP, RL_WAITING, RL_DONE, RL_FAILED, RL_UNCHECKED };

/* When a round may return before every node answered. */
typedef enum {
    RL_UNTIL_ALL,     /* every node answered or timed out */
    RL_UNTIL_GRANTED, /* a majority answered a status reply (SET's OK) */
    RL_UNTIL_DELETED  /* a majority answered the integer 1 (a key deleted) */
} rl_until;

static bool counts(rl_until until, const redisReply *r)
{
    if (until == RL_UNTIL_GRANTED)
        return r->type == REDIS_REPLY_STATUS;
    return until == RL_UNTIL_DELETED && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

/* One parallel round: cmd (len bytes of RESP) to every node i with send[i],
 * each reply in rep[i] (NULL when the node failed or did not answer within
 * the node timeout; an error reply is a reply). checked_only: a node whose
 * context is gone or unchecked (check_uptimes) is not connected, and counts
 * as failed — a node that restarted since its check must not vote.
 * until: with RL_UNTIL_GRANTED or RL_UNTIL_DELETED the round returns as
 * soon as a majority gave that answer; the other nodes have the command
 * (written, or in their context's buffer) and their replies stay in
 * flight (rep[i] NULL, not failed), read by the next round's drain() or
 * behind its own reply. Returns how many failed, the last reason in
 * conn->err. */
static int round_trip(lc_conn *conn, const bool *send, const char *cmd, size_t len,
                      redisReply **rep, bool checked_only, rl_until until)
{
    lc_client *c = conn->client;
    struct lc_rl_conn *rl = conn->rl;
    int st[LC_REDLOCK_MAX_NODES];
    int quorum = c->rl_n / 2 + 1, got = 0;
    drain(c, rl);
    int64_t deadline = lc_now_ms() + c->rl_node_timeout_ms;
    for (int i = 0; i < c->rl_n; i++) {
        rep[i] = NULL;
        st[i] = send[i] ? RL_WAITING : RL_SKIP;
        if (!send[i])
            continue;
        if (checked_only && (!rl->ctx[i] || !rl->checked[i])) {
            lc__seterr(conn->err, "redlock node %s:%d: reconnected, its uptime not checked yet",
                       c->rl_host[i], c->rl_port[i]);
            st[i] = RL_UNCHECKED;
            continue;
        }
        if (!rl->ctx[i]) {
            /* Non-blocking connect: on loopback it is done at once, to a
             * remote node the poll loop below waits for it, bounded by the
             * same deadline. */
            rl->ctx[i] = redisConnectNonBlock(c->rl_host[i], c->rl_port[i]);
            if (!rl->ctx[i] || rl->ctx[i]->err) {
                lc__seterr(conn->err, "redlock node %s:%d: %s", c->rl_host[i], c->rl_port[i],
                           rl->ctx[i] ? rl->ctx[i]->errstr : "out of memory");
                st[i] = RL_FAILED;
                continue;
            }
        }
        /* Write at once: a connected socket takes a small command without
         * a poll() first, which saves one system call per node. */
        int done = 0;
        if (redisAppendFormattedCommand(rl->ctx[i], cmd, len) != REDIS_OK ||
            redisBufferWrite(rl->ctx[i], &done) != REDIS_OK) {
            st[i] = RL_FAILED;
            continue;
        }
        rl->cur[i] = true;
        rl->until[i] = deadline;
    }
    for (;;) {
        /* Once the majority is in, only a command not yet written is
         * waited for: every node has been sent it when the round returns
         * (or counts as failed), a release included. */
        bool decided = until != RL_UNTIL_ALL && got >= quorum;
        struct pollfd pf[LC_REDLOCK_MAX_NODES];
        int idx[LC_REDLOCK_MAX_NODES], k = 0;
        int64_t now = lc_now_ms(), next = INT64_MAX;
        for (int i = 0; i < c->rl_n; i++) {
            if (st[i] != RL_WAITING || (decided && !sdslen(rl->ctx[i]->obuf)))
                continue;
            if (now >= rl->until[i]) {
                st[i] = RL_FAILED; /* no reply within the node timeout */
                continue;
            }
            next = rl->until[i] < next ? rl->until[i] : next;
            pf[k].fd = rl->ctx[i]->fd;
            pf[k].events = sdslen(rl->ctx[i]->obuf) ? POLLOUT : POLLIN;
            pf[k].revents = 0;
            idx[k++] = i;
        }
        if (k == 0)
            break;
        int rc = poll(pf, (nfds_t)k, (int)(next - now));
        if (rc < 0 && errno != EINTR)
            break;
        for (int j = 0; rc > 0 && j < k; j++) {
            if (!pf[j].revents)
                continue;
            int i = idx[j], done = 0;
            if (pf[j].events == POLLOUT) {
                if (redisBufferWrite(rl->ctx[i], &done) != REDIS_OK)
                    st[i] = RL_FAILED;
            } else if (!node_read(rl, i, &rep[i])) {
                if (rep[i])
                    freeReplyObject(rep[i]);
                rep[i] = NULL;
                st[i] = RL_FAILED;
            } else if (rep[i]) {
                st[i] = RL_DONE;
                got += counts(until, rep[i]);
            }
        }
    }
    int failed = 0;
    for (int i = 0; i < c->rl_n; i++) {
        if (st[i] == RL_SKIP)
            continue;
        if (st[i] == RL_DONE)
            node_seen(c, i, true);
        if (st[i] == RL_DONE || (st[i] == RL_WAITING && until != RL_UNTIL_ALL && got >= quorum)) {
            /* Answered, or still on its way after the majority came in:
             * then an earlier round's reply from now on. */
            if (rl->cur[i]) {
                rl->cur[i] = false;
                rl->late[i]++;
            }
            continue;
        }
        failed++;
        if (st[i] != RL_UNCHECKED)
            node_seen(c, i, false);
        if (!rl->ctx[i] || !rl->ctx[i]->err)
            lc__seterr(conn->err, "redlock node %s:%d: no reply within %d ms", c->rl_host[i],
                       c->rl_port[i], c->rl_node_timeout_ms);
        else
            lc__seterr(conn->err, "redlock node %s:%d: %s", c->rl_host[i], c->rl_port[i],
                       rl->ctx[i]->errstr);
        node_drop(rl, i);
    }
    return failed;
}

static lc_status ensure_nodes(lc_conn *conn)
{
    if (conn->client->rl_n == 0) {
        lc__seterr(conn->err, "lockcore: redlock mode needs redlock_nodes in lc_options");
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
    drain(c, rl); /* a node restarted since its check: check again */
    for (int i = 0; i < c->rl_n; i++) {
        send[i] = !rl->ctx[i] || !rl->checked[i];
        k += send[i];
    }
    if (k == 0)
        return;
    static const char info[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";
    redisReply *rep[LC_REDLOCK_MAX_NODES];
    round_trip(conn, send, info, sizeof info - 1, rep, false, RL_UNTIL_ALL);
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
            lc__seterr(conn->err, "redlock node %s:%d: INFO server gave no uptime_in_seconds",
                       c->rl_host[i], c->rl_port[i]);
        }
        freeReplyObject(r);
    }
}

/* --- release ------------------------------------------------------------ */

/* The token's compare-and-delete on every node, in one round, as EVAL:
 * the script's text travels with it, so a node that lost its script cache
 * (flushed, restarted) runs it all the same. EVALSHA would need a second
 * command after NOSCRIPT, and a reply read after the round returned (see
 * until) can no longer send anything: the release would stay undone there
 * until the lease ran out. until: RL_UNTIL_DELETED returns once a majority
 * deleted the key, the others' commands sent and their replies in flight;
 * RL_UNTIL_ALL waits for every node. Sets how many nodes answered the
 * script and how many deleted the key. */
static lc_status unlock_all(lc_conn *conn, const char *key, const char *token, rl_until until,
                            int *answered, int *deleted)
{
    lc_client *c = conn->client;
    bool send[LC_REDLOCK_MAX_NODES];
    redisReply *rep[LC_REDLOCK_MAX_NODES];
    *answered = *deleted = 0;
    const char *argv[] = {"EVAL", LC_SCRIPT_TOKEN_RELEASE, "1", key, token};
    char *cmd = NULL;
    int len = redisFormatCommandArgv(&cmd, 5, argv, NULL);
    if (len < 0)
        return LC_NOMEM;
    for (int i = 0; i < c->rl_n; i++)
        send[i] = true;
    round_trip(conn, send, cmd, (size_t)len, rep, false, until);
    redisFreeCommand(cmd);
    for (int i = 0; i < c->rl_n; i++) {
        redisReply *r = rep[i];
        if (r && r->type == REDIS_REPLY_INTEGER) {
            (*answered)++;
            *deleted += r->integer == 1;
        } else if (r && r->type == REDIS_REPLY_ERROR) {
            lc__seterr(conn->err, "redlock node %s:%d: %s", c->rl_host[i], c->rl_port[i], r->str);
        }
        if (r)
            freeReplyObject(r);
    }
    return LC_OK;
}

lc_status lc__redlock_release(lc_conn *conn, const char *key, const char *token,
                              int64_t valid_until)
{
    lc_status s = ensure_nodes(conn);
    if (s != LC_OK)
        return s;
    int answered, deleted;
    /* The hold ended when the release began: a round that crosses the
     * validity did not leave the critical section unprotected. */
    int64_t began = lc_now_ms();
    if ((s = unlock_all(conn, key, token, RL_UNTIL_DELETED, &answered, &deleted)) != LC_OK)
        return s;
    int quorum = conn->client->rl_n / 2 + 1;
    if (began >= valid_until) {
        lc__seterr(conn->err, "redlock: released after its validity ran out");
        return LC_LOST;
    }
    if (deleted >= quorum)
        return LC_OK;
    if (answered < quorum)
        return LC_IO;
    lc__seterr(conn->err, "redlock: only %d of %d nodes held this token", deleted,
               conn->client->rl_n);
    return LC_NOT_OWNER;
}

/* --- acquire ------------------------------------------------------------ */

lc_status lc__redlock_acquire(lc_conn *conn, const lc_lock_args *a, const char *token,
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
        round_trip(conn, all, cmd, (size_t)len, rep, c->rl_restart_delay_ms > 0, RL_UNTIL_GRANTED);
        int64_t elapsed = lc_now_ms() - t0;
        int granted = 0, answered = 0;
        for (int i = 0; i < n; i++) {
            redisReply *r = rep[i];
            if (r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_NIL)) {
                answered++;
                granted += r->type == REDIS_REPLY_STATUS;
            } else if (r) {
                lc__seterr(conn->err, "redlock node %s:%d SET NX PX: %s", c->rl_host[i],
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
        if (unlock_all(conn, a->key, token, RL_UNTIL_ALL, &ans_u, &del_u) != LC_OK) {
            redisFreeCommand(cmd);
            return LC_NOMEM;
        }
        if (answered < quorum) {
            redisFreeCommand(cmd);
            lc__seterr(conn->err, "redlock: %d of %d nodes answered, %d needed", answered, n,
                       quorum);
            return LC_IO;
        }
        int64_t now = lc_now_ms();
        if (now >= deadline || lc__canceled(a->cancel)) {
            redisFreeCommand(cmd);
            return now >= deadline ? LC_BUSY : LC_CANCELED;
        }
        int64_t nap = lc__retry_nap_ms(c->retry_interval_ms, &conn->rng, LC_REDLOCK);
        if (a->cancel && nap > LC_CANCEL_LATENCY_MS)
            nap = LC_CANCEL_LATENCY_MS;
        lc__sleep_ms(nap < deadline - now ? nap : deadline - now);
    }
}
