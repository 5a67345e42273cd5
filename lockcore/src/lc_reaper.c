/* lc_reaper.c — the orphan-lock cleanup: one background thread per client
 * that takes over connections whose token, fenced or reentrant acquire (or
 * release)
 * timed out, reads the late reply, and gives back a lock the stalled
 * acquire was granted after its caller had already answered LC_IO.
 *
 * Why the same connection. A timeout does not cancel a command: Redis runs
 * whatever it has read, in order, once it resumes. Closing the socket does
 * not cancel it either — Redis reads the command and the FIN together, runs
 * the command, then frees the client. A compare-and-delete sent on a NEW
 * connection can therefore run before the stalled acquire still queued on
 * the old one, delete nothing, and let the ghost lock appear afterwards. On
 * the same connection Redis runs the release after the acquire, always:
 * that is the whole order argument, and why the context is handed over
 * instead of freed.
 *
 * What "undo" means per mode (the late reply tells whether the acquire was
 * granted; nothing is sent when it was not, so another holder's lock is
 * never touched — the token, and the reentrant field "<instance>:<owner>",
 * belong to this acquisition only):
 *   token      SET NX PX answered OK → the token release script
 *              (GET == token → DEL) on the same connection.
 *   fenced     the acquire script answered a number → the same release as
 *              token (the fencing token it drew stays used: the counter
 *              only grows, and nobody holds that number).
 *   reentrant  the acquire script answered nil (granted: it added one hold,
 *              HINCRBY field 1) → Redisson's unlock script for that field,
 *              ONCE, on the same connection. Once is exactly right whatever
 *              else the same owner did meanwhile: the script takes back one
 *              hold, the one this acquisition added. If it was the first
 *              hold the count goes 1 → 0 and the key is deleted (and the
 *              release published, waking waiters); if the owner already
 *              held the lock (a re-entry), the count goes back to what the
 *              owner's own guards account for, and their releases end it as
 *              usual. Force-deleting the field would be wrong for a
 *              re-entry (it would drop the owner's real hold), and running
 *              the script "until the field is gone" would be wrong for the
 *              same reason; one decrement per granted increment is the only
 *              rule that is right in both cases.
 *   release    (either mode) the late reply only needs reading: the release
 *              ran, or, when the connection died first, may not have — then
 *              the lease ends the lock, as for any holder that vanished.
 *
 * When the server closes the connection (EOF or a reset) before the reply,
 * the server has freed that client: the command has run or never will, but
 * which is unknown. token and fenced: the compare-and-delete of the token is
 * then sent
 * on a fresh connection (safe now: nothing of the old connection can run
 * after it, and deleting an absent or foreign token is a no-op). reentrant:
 * one unlock would be wrong if the acquire never ran and the owner holds a
 * hold of its own, so nothing is sent; the lease ends it (the watchdog does
 * not renew it: no local hold exists). Likewise when no reply comes within
 * LC_REAPER_WAIT_MS or the client is freed: the connection is closed (the
 * command may then still run) and the lease ends what it leaves.
 */
#include "lc_reaper.h"

#include "lc_conn.h"
#include "lc_internal.h"
#include "lc_scripts.h"
#include "lc_util.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* How long a late reply is waited for: longer than any pause worth
 * surviving, short enough that the thread never accumulates connections to
 * a Redis that is gone for good. */
#define LC_REAPER_WAIT_MS 60000
#define LC_REAPER_CHANNEL_PREFIX "redisson_lock__channel"

struct lc_orphan {
    redisContext *ctx;
    lc_mode mode;
    bool release;      /* the lock command was a release */
    bool lock_pending; /* its reply is not read yet */
    bool undo_pending; /* our release was sent, its reply not read yet */
    bool undo_failed;  /* granted, but our release could not be sent */
    int skip_before;   /* unread replies ahead of the lock command's */
    int skip_after;    /* unread replies after it (before our release's) */
    int64_t lease_ms;
    int64_t deadline; /* lc_now_ms() time */
    char *key;
    char owner[2 * LC_ID_LEN + 2];
    struct lc_orphan *next;
};

/* token and fenced share the token's owner check and release script. */
static bool token_like(lc_mode m)
{
    return m == LC_TOKEN || m == LC_FENCED;
}

/* Same as lc_lock.c's channel_name (Redisson's prefixName). */
static void channel_name(const char *key, char *out, size_t len)
{
    lc__channel_name(LC_REAPER_CHANNEL_PREFIX, key, out, len);
}

static void orphan_free(lc_orphan *o)
{
    if (o->ctx)
        redisFree(o->ctx);
    free(o->key);
    free(o);
}

/* The thread is done with an adopted orphan. */
static void orphan_release(lc_reaper *rp, lc_orphan *o)
{
    orphan_free(o);
    LC_PTHREAD(pthread_mutex_lock(&rp->mu));
    LC_ASSERT(rp->held > 0);
    rp->held--;
    LC_PTHREAD(pthread_mutex_unlock(&rp->mu));
}

static bool orphan_done(const lc_orphan *o)
{
    return o->skip_before == 0 && !o->lock_pending && o->skip_after == 0 && !o->undo_pending &&
           !o->undo_failed;
}

/* The server closed this client: after an EOF, or a reset (its close()
 * found unread bytes), or a write that found the socket closed. */
static bool closed_by_server(const redisContext *ctx, int err_no)
{
    return ctx->err == REDIS_ERR_EOF ||
           (ctx->err == REDIS_ERR_IO && (err_no == ECONNRESET || err_no == EPIPE));
}

/* The mode's release of this acquisition: EVAL arguments after the script
 * (keys first). Returns the number of keys; *nargs gets the count. */
static int undo_args(const lc_orphan *o, const char **args, int *nargs, char *channel, size_t chlen,
                     char *lease, size_t leaselen)
{
    if (token_like(o->mode)) {
        args[0] = o->key;
        args[1] = o->owner;
        *nargs = 2;
        return 1;
    }
    channel_name(o->key, channel, chlen);
    snprintf(lease, leaselen, "%lld", (long long)o->lease_ms);
    args[0] = o->key;
    args[1] = channel;
    args[2] = "0"; /* Redisson's unlock message */
    args[3] = lease;
    args[4] = o->owner;
    *nargs = 5;
    return 2;
}

static void count_undo(lc_client *c, const lc_orphan *o, const redisReply *r)
{
    /* token: 1 = deleted. reentrant: 0 = one hold taken back, 1 = the last
     * (deleted and published); nil = the field was gone already. */
    if (r->type != REDIS_REPLY_INTEGER || (token_like(o->mode) && r->integer != 1))
        return;
    atomic_fetch_add(&c->orphans_released, 1);
    if (o->mode == LC_REENTRANT && r->integer == 1 && atomic_load(&c->waiters) > 0) {
        char channel[LC_KEY_MAX + 64];
        channel_name(o->key, channel, sizeof channel);
        lc__pubsub_released(c, channel);
    }
}

/* Queues the mode's release of this acquisition on its own connection and
 * sends it. On failure the release was not sent whole, so it will never
 * run: o->undo_failed. */
static void send_undo(lc_orphan *o)
{
    const char *argv[3 + 5];
    char channel[LC_KEY_MAX + 64], lease[24], nk[4];
    int nargs;
    int nkeys = undo_args(o, argv + 3, &nargs, channel, sizeof channel, lease, sizeof lease);
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = "EVAL";
    argv[1] = token_like(o->mode) ? LC_SCRIPT_TOKEN_RELEASE : LC_SCRIPT_REENTRANT_RELEASE;
    argv[2] = nk;
    int done = 0;
    if (redisAppendCommandArgv(o->ctx, 3 + nargs, argv, NULL) == REDIS_OK) {
        do {
            if (redisBufferWrite(o->ctx, &done) != REDIS_OK)
                break;
        } while (!done);
    }
    if (done)
        o->undo_pending = true;
    else
        o->undo_failed = true;
}

/* With a cluster, the reaper thread's own connection is an lc_conn, whose
 * router finds the master of the orphan's key now (each client has its own
 * reaper thread). */
static _Thread_local lc_conn *own_conn;

/* The mode's release on the thread's own connection, never on o->ctx. */
static bool undo_fresh(lc_client *c, const lc_orphan *o, redisContext **own)
{
    const char *args[5];
    char channel[LC_KEY_MAX + 64], lease[24], err[LC_ERRSTR_LEN];
    int nargs;
    int nkeys = undo_args(o, args, &nargs, channel, sizeof channel, lease, sizeof lease);
    if (c->cl.on) {
        if (!own_conn && lc_conn_new(c, &own_conn) != LC_OK)
            return false;
        redisReply *r = token_like(o->mode)
                            ? lc__conn_eval(own_conn, LC_SCRIPT_TOKEN_RELEASE_SHA,
                                            LC_SCRIPT_TOKEN_RELEASE, nkeys, nargs, args)
                            : lc__conn_eval(own_conn, LC_SCRIPT_REENTRANT_RELEASE_SHA,
                                            LC_SCRIPT_REENTRANT_RELEASE, nkeys, nargs, args);
        if (!r)
            return false;
        count_undo(c, o, r);
        freeReplyObject(r);
        return true;
    }
    redisContext *ctx = lc__redis_reuse(c, own, err, NULL);
    if (!ctx)
        return false;
    redisReply *r = token_like(o->mode)
                        ? lc__eval(ctx, LC_SCRIPT_TOKEN_RELEASE_SHA, LC_SCRIPT_TOKEN_RELEASE, nkeys,
                                   nargs, args, err)
                        : lc__eval(ctx, LC_SCRIPT_REENTRANT_RELEASE_SHA,
                                   LC_SCRIPT_REENTRANT_RELEASE, nkeys, nargs, args, err);
    if (!r)
        return false;
    count_undo(c, o, r);
    freeReplyObject(r);
    return true;
}

/* Nothing more will be read from o->ctx; settle what is still open.
 *   undo_failed: the acquire ran and was granted (its reply said so) and our
 *     release never left: the release on a fresh connection is safe, since
 *     nothing queued on o->ctx can create the lock again.
 *   token, server closed: the outcome is unknown, but nothing of o->ctx
 *     runs any more, and a compare-and-delete of a token is harmless when
 *     the key is absent or holds another token, and idempotent (a timed-out
 *     token release is that same compare-and-delete, sent again).
 *   else (reentrant, or the connection still open at the deadline): left to
 *     the lease. */
static void give_up(lc_client *c, lc_orphan *o, bool server_closed, redisContext **own)
{
    bool fresh = o->undo_failed ||
                 (server_closed && token_like(o->mode) && (o->lock_pending || o->undo_pending));
    if (!o->undo_failed && !o->lock_pending && !o->undo_pending)
        return; /* only the caller's pipelined replies were left: no lock at stake */
    if (!(fresh && undo_fresh(c, o, own)))
        atomic_fetch_add(&c->orphans_unresolved, 1);
    o->lock_pending = o->undo_pending = o->undo_failed = false;
}

/* One reply read from o->ctx, in the order the replies were queued. */
static void on_reply(lc_client *c, lc_orphan *o, redisReply *r)
{
    if (o->skip_before > 0) {
        o->skip_before--;
    } else if (o->lock_pending) {
        o->lock_pending = false;
        bool granted = !o->release && (o->mode == LC_TOKEN    ? r->type == REDIS_REPLY_STATUS
                                       : o->mode == LC_FENCED ? r->type == REDIS_REPLY_INTEGER
                                                              : r->type == REDIS_REPLY_NIL);
        /* A release sent as EVALSHA to a Redis that had lost its scripts
         * did not run: send it again (as EVAL), or the lease would end it. */
        if (o->release && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0)
            granted = true;
        /* Sent before the caller's later replies are read: Redis still runs
         * it after them, which is all that matters. */
        if (granted)
            send_undo(o);
    } else if (o->skip_after > 0) {
        o->skip_after--;
    } else if (o->undo_pending) {
        o->undo_pending = false;
        count_undo(c, o, r);
    }
}

/* Reads every complete reply in o->ctx's buffer. Returns true when o is
 * finished (resolved, or given up) and may be freed. */
static bool drain(lc_client *c, lc_orphan *o, redisContext **own)
{
    while (!orphan_done(o)) {
        if (o->undo_failed) {
            give_up(c, o, false, own);
            return true;
        }
        void *rep = NULL;
        if (redisGetReplyFromReader(o->ctx, &rep) != REDIS_OK) {
            give_up(c, o, false, own); /* a protocol error: nothing is known */
            return true;
        }
        if (!rep)
            return false; /* needs more bytes */
        on_reply(c, o, rep);
        freeReplyObject(rep);
    }
    return true;
}

/* The caller's failed call left ctx->err set; an EOF already says the
 * server closed. Otherwise clear it (a timeout is not a broken connection:
 * the reply may still come) and finish sending what the timeout may have
 * interrupted. */
static bool take_over(lc_client *c, lc_orphan *o, redisContext **own)
{
    if (o->ctx->err == REDIS_ERR_EOF) {
        give_up(c, o, true, own);
        return true;
    }
    o->ctx->err = 0;
    o->ctx->errstr[0] = '\0';
    int done = 0;
    do {
        if (redisBufferWrite(o->ctx, &done) != REDIS_OK) {
            give_up(c, o, closed_by_server(o->ctx, errno), own);
            return true;
        }
    } while (!done);
    return drain(c, o, own);
}

static void *reaper_main(void *arg)
{
    lc_client *c = arg;
    lc_reaper *rp = &c->reaper;
    lc_orphan *list = NULL;
    redisContext *own = NULL; /* for the token compare-and-delete after a close */
    struct pollfd *pf = NULL;
    size_t pf_cap = 0;

    for (;;) {
        LC_PTHREAD(pthread_mutex_lock(&rp->mu));
        bool stop = rp->stop;
        lc_orphan *fresh = rp->incoming;
        rp->incoming = NULL;
        LC_PTHREAD(pthread_mutex_unlock(&rp->mu));
        while (fresh) {
            lc_orphan *o = fresh;
            fresh = o->next;
            if (!stop && take_over(c, o, &own)) {
                orphan_release(rp, o);
            } else {
                o->next = list;
                list = o;
            }
        }
        if (stop)
            break;

        size_t n = 0;
        int64_t now = lc_now_ms(), wake = now + LC_REAPER_WAIT_MS;
        for (lc_orphan *o = list; o; o = o->next) {
            n++;
            if (o->deadline < wake)
                wake = o->deadline;
        }
        if (n + 1 > pf_cap) {
            struct pollfd *grown = realloc(pf, (n + 1) * sizeof *pf);
            if (!grown) {
                lc__sleep_ms(10); /* no memory for the poll set: look again soon */
                continue;
            }
            pf = grown;
            pf_cap = n + 1;
        }
        pf[0] = (struct pollfd){rp->wake_fd, POLLIN, 0};
        size_t i = 1;
        for (lc_orphan *o = list; o; o = o->next, i++)
            pf[i] = (struct pollfd){o->ctx->fd, POLLIN, 0};
        int64_t wait = wake > now ? wake - now : 0;
        if (poll(pf, n + 1, (int)wait) < 0 && errno != EINTR)
            lc__sleep_ms(10);
        if (pf[0].revents) {
            uint64_t v;
            while (read(rp->wake_fd, &v, sizeof v) > 0) {
            }
        }

        now = lc_now_ms();
        lc_orphan **pp = &list;
        i = 1;
        while (*pp) {
            lc_orphan *o = *pp;
            bool finished = false;
            if (pf[i].revents) {
                /* Readable (or closed): one read() does not block. */
                int e = redisBufferRead(o->ctx) == REDIS_OK ? 0 : errno;
                if (o->ctx->err) {
                    give_up(c, o, closed_by_server(o->ctx, e), &own);
                    finished = true;
                } else {
                    finished = drain(c, o, &own);
                }
            }
            if (!finished && now >= o->deadline) {
                give_up(c, o, false, &own);
                finished = true;
            }
            i++;
            if (finished) {
                *pp = o->next;
                orphan_release(rp, o);
            } else {
                pp = &o->next;
            }
        }
    }

    while (list) {
        lc_orphan *o = list;
        list = o->next;
        if (o->lock_pending || o->undo_pending || o->undo_failed)
            atomic_fetch_add(&c->orphans_unresolved, 1);
        orphan_release(rp, o);
    }
    if (own)
        redisFree(own);
    lc__conn_close(own_conn);
    own_conn = NULL;
    free(pf);
    return NULL;
}

void lc__reaper_init(lc_reaper *r)
{
    memset(r, 0, sizeof *r);
    LC_PTHREAD(pthread_mutex_init(&r->mu, NULL));
    r->wake_fd = -1;
}

void lc__reaper_adopt(lc_conn *conn, const lc_orphan_cmd *cmd)
{
    if (!token_like(cmd->mode) && cmd->mode != LC_REENTRANT)
        return; /* setnx keeps its flaw: no owner to compare */
    redisContext *ctx = conn->ctx;
    /* No context: the connect failed, nothing was sent. No error on it:
     * Redis answered (an error reply), so the command did not run. Other
     * error kinds (a protocol error) leave the reply stream unusable. */
    if (!ctx || (ctx->err != REDIS_ERR_IO && ctx->err != REDIS_ERR_EOF))
        return;
    if (strlen(cmd->owner) >= sizeof((lc_orphan *)0)->owner)
        return;
    lc_client *c = conn->client;
    lc_orphan *o = calloc(1, sizeof *o);
    if (!o || !(o->key = strdup(cmd->key))) {
        free(o);
        atomic_fetch_add(&c->orphans_unresolved, 1);
        return;
    }
    o->mode = cmd->mode;
    o->release = cmd->release;
    o->lock_pending = true;
    o->skip_before = cmd->replies_before;
    o->skip_after = cmd->replies_after;
    o->lease_ms = cmd->lease_ms;
    o->deadline = lc_now_ms() + LC_REAPER_WAIT_MS;
    snprintf(o->owner, sizeof o->owner, "%s", cmd->owner);

    lc_reaper *rp = &c->reaper;
    LC_PTHREAD(pthread_mutex_lock(&rp->mu));
    if (!rp->started && !rp->stop) {
        if (rp->wake_fd < 0)
            rp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (rp->wake_fd >= 0 && pthread_create(&rp->thread, NULL, reaper_main, c) == 0)
            rp->started = true;
    }
    bool ok = rp->started && !rp->stop && rp->held < LC_REAPER_MAX;
    if (ok) {
        rp->held++;
        o->ctx = ctx;
        conn->ctx = NULL; /* conn reconnects on its next use */
        conn->ctx_id = 0;
        o->next = rp->incoming;
        rp->incoming = o;
        uint64_t one = 1;
        if (write(rp->wake_fd, &one, sizeof one) < 0) {
            /* EAGAIN only: the counter is full, so a wake-up is pending. */
        }
    }
    LC_PTHREAD(pthread_mutex_unlock(&rp->mu));
    if (!ok) {
        orphan_free(o);
        atomic_fetch_add(&c->orphans_unresolved, 1);
        return;
    }
    atomic_fetch_add(&c->orphans_adopted, 1);
}

void lc__reaper_shutdown(lc_client *c)
{
    lc_reaper *rp = &c->reaper;
    LC_PTHREAD(pthread_mutex_lock(&rp->mu));
    rp->stop = true;
    bool started = rp->started;
    if (started) {
        uint64_t one = 1;
        if (write(rp->wake_fd, &one, sizeof one) < 0) {
            /* EAGAIN only: a wake-up is pending anyway. */
        }
    }
    LC_PTHREAD(pthread_mutex_unlock(&rp->mu));
    if (started)
        LC_PTHREAD(pthread_join(rp->thread, NULL));
    /* The thread took every orphan queued before stop; none can be queued
     * after it (adopt checks stop). */
    LC_ASSERT(rp->incoming == NULL && rp->held == 0);
    if (rp->wake_fd >= 0)
        close(rp->wake_fd);
    LC_PTHREAD(pthread_mutex_destroy(&rp->mu));
}
