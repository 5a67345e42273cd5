/* lc_lock.c — acquire, release and extend for every mode.
 *
 * Each mode sends exactly the commands of its step in the lock story (see
 * lockcore.h, lockcore/README.md and docs/locks.md); the differences between
 * modes are the lesson, so none is "improved" here. What all modes share is
 * in this file: argument checks, the wait loop's deadline arithmetic (never
 * sleep past wait_ms), counters, and the guard.
 */
#include "lc_internal.h"

#include "lc_conn.h"
#include "lc_reaper.h"
#include "lc_redlock.h"
#include "lc_scripts.h"
#include "lc_testhooks.h"
#include "lc_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#define LC_MAX_DURATION_MS 86400000LL /* 24 h bounds every lease and wait */
#define LC_CHANNEL_PREFIX "redisson_lock__channel"
#define LC_UNLOCK_MESSAGE "0" /* Redisson's LockPubSub.UNLOCK_MESSAGE */

struct lc_guard {
    lc_mode mode;
    lc_client *client;
    int64_t lease_ms; /* the lease set in Redis (reentrant: the watchdog's) */
    int64_t wait_ms;
    lc_mutex_entry *mx;
    lc_hold *hold;
    bool watchdog;       /* reentrant without an explicit lease */
    int64_t valid_until; /* redlock: lc_now_ms() time its validity ends */
    int64_t fence;       /* fenced: the fencing token; 0 otherwise */
    atomic_int lost;
    char owner_token[2 * LC_ID_LEN + 2];
    char key[];
};

/* lc__hook_after_setnx's hook (lc_testhooks.h): per thread, so only the
 * acquisition of the thread that set it can call it. */
static _Thread_local void (*after_setnx_fn)(void *arg);
static _Thread_local void *after_setnx_arg;

void lc__hook_after_setnx(void (*fn)(void *arg), void *arg)
{
    after_setnx_fn = fn;
    after_setnx_arg = fn ? arg : NULL;
}

/* Redisson's prefixName(): a key that carries a hash tag keeps it, so the
 * channel hashes to the key's slot; otherwise the whole key becomes one. */
static void channel_name(const char *key, char *out, size_t len)
{
    lc__channel_name(LC_CHANNEL_PREFIX, key, out, len);
}

static lc_status fail_io(lc_conn *conn)
{
    atomic_fetch_add(&conn->client->io_errors, 1);
    return LC_IO;
}

static lc_status misuse(lc_conn *conn, const char *why)
{
    if (conn)
        lc__seterr(conn->err, "lockcore: %s", why);
    return LC_MISUSE;
}

static lc_status check_args(lc_conn *conn, const lc_lock_args *a)
{
    if (!conn || !a)
        return misuse(conn, "NULL conn or args");
    if ((unsigned)a->mode >= LC_MODE_COUNT)
        return misuse(conn, "unknown mode");
    size_t klen = a->key ? strlen(a->key) : 0;
    if (klen == 0 || klen > LC_KEY_MAX)
        return misuse(conn, "key must be 1..512 bytes");
    size_t olen = a->owner ? strlen(a->owner) : 0;
    if (olen == 0 || olen >= LC_ID_LEN)
        return misuse(conn, "owner must be 1..63 bytes");
    if (a->wait_ms < 0 || a->wait_ms > LC_MAX_DURATION_MS)
        return misuse(conn, "wait_ms must be 0..86400000");
    if ((a->mode == LC_SETNX || a->mode == LC_TOKEN || a->mode == LC_REDLOCK ||
         a->mode == LC_FENCED) &&
        (a->lease_ms <= 0 || a->lease_ms > LC_MAX_DURATION_MS))
        return misuse(conn, "lease_ms must be 1..86400000 for setnx, token, redlock and fenced");
    size_t flen = a->fence_key ? strlen(a->fence_key) : 0;
    if (a->mode == LC_FENCED && (flen == 0 || flen > LC_KEY_MAX))
        return misuse(conn, "fence_key must be 1..512 bytes for fenced");
    if (a->mode == LC_REENTRANT && (a->lease_ms < 0 || a->lease_ms > LC_MAX_DURATION_MS))
        return misuse(conn, "lease_ms must be 0..86400000 for reentrant");
    if (a->mode == LC_REDLOCK && conn->client->rl_n == 0)
        return misuse(conn, "redlock mode needs redlock_nodes in lc_options");
    /* No round trip is quick enough to leave such a lease any validity:
     * every attempt would read as contention. */
    if (a->mode == LC_REDLOCK && a->lease_ms <= lc_redlock_drift_ms(a->lease_ms))
        return misuse(conn, "lease_ms must exceed redlock's clock-drift allowance (lease_ms/100 "
                            "+ 2 ms): at least 3");
    if (conn->client->cl.on && a->mode == LC_FENCED &&
        lc_key_slot(a->fence_key, flen) != lc_key_slot(a->key, klen))
        return misuse(conn, "cluster: fence_key must be in the lock key's hash slot (one script "
                            "names both)");
    return LC_OK;
}

/* With a cluster: p's commands must name keys of the lock key's slot only,
 * which the router can find (one batch goes to one master). LC_OK, or
 * LC_MISUSE with the reason in conn->err. */
static lc_status check_pipe_slot(lc_conn *conn, const char *key, const lc_pipe *p)
{
    if (!conn->client->cl.on || !p || p->n == 0)
        return LC_OK;
    return lc__conn_pipe_slot(conn, p, lc_key_slot(key, strlen(key)), conn->err) == -2 ? LC_MISUSE
                                                                                       : LC_OK;
}

/* --- the caller's commands (lc_pipe) ------------------------------------ */

/* none and mutex: the caller's commands alone, one round trip (none when
 * there are no commands). */
static lc_status pipe_alone(lc_conn *conn, lc_pipe *p)
{
    if (!p || p->n == 0)
        return LC_OK;
    redisContext *ctx = lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    return lc__conn_trip(conn, &ctx, LC__TRIP_PLAIN, 0, NULL, p, false, false, NULL) == 0 ? LC_OK
                                                                                          : LC_IO;
}

/* lc__trip for a lock command (argv) and the caller's p, noting what a
 * failure left unread on the connection (conn->trip_*): the orphan cleanup
 * must read past exactly those replies to find the lock command's. Replies
 * come in order, so after a missing one every later one is missing too. */
static int lock_trip(lc_conn *conn, redisContext **ctxp, int argc, const char **argv, lc_pipe *p,
                     bool p_first, redisReply **rep)
{
    int t;
    redisContext *ctx = *ctxp;
    if (conn->client->cl.on) {
        /* the router notes what a failure left unread itself (lc_conn.h) */
        bool written = conn->sent == LC_SENT_WRITTEN, pending = conn->sent != LC_SENT_NONE;
        conn->sent = LC_SENT_NONE;
        if (pending && !written) {
            *rep = NULL;
            conn->trip_lock_unread = false;
            return -1;
        }
        return lc__conn_trip(conn, ctxp, p_first ? LC__TRIP_RELEASE : LC__TRIP_ACQUIRE, argc, argv,
                             p, p_first, written, rep);
    }
    lc__conn_via_note(conn, ctx, p);
    if (conn->sent != LC_SENT_NONE) {
        /* lc_acquire_send wrote this very attempt (same argv, same p):
         * only its replies are left to read; a failed write fails here, as
         * it would have in lc__trip. */
        bool written = conn->sent == LC_SENT_WRITTEN;
        conn->sent = LC_SENT_NONE;
        if (written) {
            t = lc__trip_recv(ctx, argc > 0, p, p_first, rep, conn->err);
        } else {
            t = -1;
            *rep = NULL;
        }
    } else {
        t = lc__trip(ctx, argc, argv, p, p_first, rep, conn->err);
    }
    int np = p ? p->n : 0, missing = 0;
    for (int i = 0; t != 0 && i < np; i++)
        missing += p->reply[i] == NULL;
    conn->trip_lock_unread = t != 0 && *rep == NULL;
    conn->trip_unread_before = conn->trip_lock_unread && p_first ? missing : 0;
    conn->trip_unread_after = conn->trip_lock_unread && !p_first ? missing : 0;
    return t;
}

/* A script by EVALSHA (EVAL on NOSCRIPT, as lc__eval) with p's commands
 * after it (acquire) or before it (p_first: release). Returns the script's
 * reply, or NULL on I/O or an error reply (reason in conn->err). On
 * NOSCRIPT an acquire's commands go again with the EVAL (the first ones ran
 * without the lock: their replies are dropped); a release's have run, and
 * keep their replies. */
/* EVALSHA sha nkeys args... into argv (16 slots; nk: 16 bytes); returns argc. */
static int eval_argv(const char **argv, char *nk, const char *sha, int nkeys, int nargs,
                     const char **args)
{
    LC_ASSERT(nargs <= 13);
    snprintf(nk, 16, "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = sha;
    argv[2] = nk;
    for (int i = 0; i < nargs; i++)
        argv[3 + i] = args[i];
    return 3 + nargs;
}

static redisReply *eval_trip(lc_conn *conn, redisContext *ctx, const char *sha, const char *body,
                             int nkeys, int nargs, const char **args, lc_pipe *p, bool p_first)
{
    const char *argv[16];
    char nk[16];
    eval_argv(argv, nk, sha, nkeys, nargs, args);
    redisReply *r = NULL;
    int t = lock_trip(conn, &ctx, 3 + nargs, argv, p, p_first, &r);
    if (t == 0 && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        r = NULL;
        argv[0] = "EVAL";
        argv[1] = body;
        t = lock_trip(conn, &ctx, 3 + nargs, argv, p_first ? NULL : p, p_first, &r);
    }
    if (t != 0 || r->type == REDIS_REPLY_ERROR) {
        if (r && r->type == REDIS_REPLY_ERROR)
            lc__seterr(conn->err, "redis: %s", r->str);
        if (r)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* --- one attempt per mode ----------------------------------------------- */
/* Each returns LC_OK (with *got telling whether the lock was taken) or LC_IO;
 * p (may be NULL) rides with the attempt, its replies kept only when the
 * lock was taken. */

static lc_status setnx_try(lc_conn *conn, const lc_lock_args *a, lc_pipe *p, bool *got)
{
    redisContext *ctx = conn->client->cl.on ? lc__conn_ctx_key(conn, a->key) : lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    redisReply *r = NULL;
    if (conn->client->cl.on) {
        const char *sargv[] = {"SETNX", a->key, "1"};
        if (lc__conn_trip(conn, &ctx, LC__TRIP_PLAIN, 3, sargv, NULL, false, false, &r) == -1 &&
            r) {
            freeReplyObject(r); /* not run keeps its reply: the reason */
            r = NULL;
        }
    } else {
        r = redisCommand(ctx, "SETNX %s 1", a->key);
    }
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        lc__seterr(conn->err, "redis SETNX: %s", r ? r->str : ctx->errstr);
        if (r)
            freeReplyObject(r);
        return LC_IO;
    }
    *got = r->integer == 1;
    freeReplyObject(r);
    if (!*got)
        return LC_OK;
    if (after_setnx_fn)
        after_setnx_fn(after_setnx_arg);
    /* The second command is the flaw: a crash before it (or its failure)
     * leaves a lock with no TTL, held by nobody, forever. The caller's
     * commands may ride with it: the gap stays where it was. */
    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)a->lease_ms);
    const char *argv[] = {"PEXPIRE", a->key, lease_s};
    r = NULL;
    if (lc__conn_trip(conn, &ctx, LC__TRIP_ACQUIRE, 3, argv, p, false, false, &r) != 0 ||
        r->type != REDIS_REPLY_INTEGER) {
        lc__seterr(conn->err, "redis PEXPIRE after SETNX (lock left without TTL): %s",
                   r && r->type == REDIS_REPLY_ERROR ? r->str : ctx->errstr);
        if (r)
            freeReplyObject(r);
        return LC_IO;
    }
    freeReplyObject(r);
    return LC_OK;
}

static lc_status token_try(lc_conn *conn, const lc_lock_args *a, const char *token, lc_pipe *p,
                           bool *got)
{
    redisContext *ctx = lc__conn_ctx_key(conn, a->key);
    if (!ctx)
        return LC_IO;
    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)a->lease_ms);
    const char *argv[] = {"SET", a->key, token, "NX", "PX", lease_s};
    redisReply *r = NULL;
    if (lock_trip(conn, &ctx, 6, argv, p, false, &r) != 0 ||
        (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_NIL)) {
        lc__seterr(conn->err, "redis SET NX PX: %s",
                   r && r->type == REDIS_REPLY_ERROR ? r->str : ctx->errstr);
        if (r)
            freeReplyObject(r);
        return LC_IO;
    }
    *got = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!*got)
        lc__pipe_drop_replies(p);
    return LC_OK;
}

/* fenced: token's SET NX PX and the INCR of the caller's fence counter in
 * one script; *fence is the number when the lock was taken. */
static lc_status fenced_try(lc_conn *conn, const lc_lock_args *a, const char *token, lc_pipe *p,
                            bool *got, int64_t *fence)
{
    redisContext *ctx = lc__conn_ctx_key(conn, a->key);
    if (!ctx)
        return LC_IO;
    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)a->lease_ms);
    const char *args[] = {a->key, a->fence_key, token, lease_s};
    redisReply *r = eval_trip(conn, ctx, LC_SCRIPT_FENCED_ACQUIRE_SHA, LC_SCRIPT_FENCED_ACQUIRE, 2,
                              4, args, p, false);
    if (!r)
        return LC_IO;
    if (r->type != REDIS_REPLY_INTEGER && r->type != REDIS_REPLY_NIL) {
        lc__seterr(conn->err, "fenced acquire: unexpected reply type %d", r->type);
        freeReplyObject(r);
        lc__pipe_drop_replies(p);
        return LC_IO;
    }
    *got = r->type == REDIS_REPLY_INTEGER;
    if (*got)
        *fence = r->integer;
    freeReplyObject(r);
    if (!*got)
        lc__pipe_drop_replies(p);
    return LC_OK;
}

/* *ttl: the holder's PTTL when not acquired (Redisson's return value). */
static lc_status reentrant_try(lc_conn *conn, const char *key, const char *field, int64_t lease,
                               lc_pipe *p, bool *got, int64_t *ttl)
{
    redisContext *ctx = lc__conn_ctx_key(conn, key);
    if (!ctx)
        return LC_IO;
    char lease_s[24];
    snprintf(lease_s, sizeof lease_s, "%lld", (long long)lease);
    const char *args[] = {key, lease_s, field};
    redisReply *r = eval_trip(conn, ctx, LC_SCRIPT_REENTRANT_ACQUIRE_SHA,
                              LC_SCRIPT_REENTRANT_ACQUIRE, 1, 3, args, p, false);
    if (!r)
        return LC_IO;
    *got = r->type == REDIS_REPLY_NIL;
    *ttl = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (!*got)
        lc__pipe_drop_replies(p);
    return LC_OK;
}

/* --- waiting ------------------------------------------------------------ */

/* setnx, token and fenced: try, then poll every retry interval plus jitter
 * (so waiters that started together do not retry in lockstep), and try one
 * last time at the deadline. */
static lc_status poll_acquire(lc_conn *conn, const lc_lock_args *a, const char *token, lc_pipe *p,
                              int64_t deadline, int64_t *fence)
{
    for (;;) {
        bool got = false;
        lc_status s = a->mode == LC_SETNX    ? setnx_try(conn, a, p, &got)
                      : a->mode == LC_FENCED ? fenced_try(conn, a, token, p, &got, fence)
                                             : token_try(conn, a, token, p, &got);
        if (s != LC_OK)
            return s;
        if (got)
            return LC_OK;
        int64_t now = lc_now_ms();
        if (now >= deadline)
            return LC_BUSY;
        if (lc__canceled(a->cancel))
            return LC_CANCELED;
        int64_t nap = lc__retry_nap_ms(conn->client->retry_interval_ms, &conn->rng, a->mode);
        if (a->cancel && nap > LC_CANCEL_LATENCY_MS)
            nap = LC_CANCEL_LATENCY_MS;
        lc__sleep_ms(nap < deadline - now ? nap : deadline - now);
    }
}

/* reentrant: Redisson's tryLock(waitTime) — try; subscribe to the channel;
 * try again; then sleep until a release message or the holder's PTTL.
 *
 * Fairness vs throughput: a newcomer normally tries first ("barging", as
 * Redisson does): the lock passes straight to whoever asks next, with no
 * wake-up on the critical path. But a thread that releases and at once asks
 * again would win every time, starving the woken waiter, whose message
 * arrives a hop later. So once the first waiter in line has been first for
 * barge_limit_ms (5 ms), newcomers queue behind it and the next release hands
 * the lock over in order (the starvation mode of Go's sync.Mutex). Until then
 * the head sleeps: a release message only marks it (lc_pubsub.c). An owner
 * that already holds the lock always re-enters at once. */
/* Whether reentrant_acquire's first step is an attempt rather than a wait
 * behind a starving head: no wait at all, a re-entry, or a line that is
 * not starving. lc_acquire_send sends ahead only then. */
static bool reentrant_tries_first(lc_client *c, const lc_lock_args *a, const char *field,
                                  const char *channel)
{
    return a->wait_ms == 0 || lc__hold_exists(c, a->key, field) ||
           !lc__pubsub_head_starving(c, channel);
}

static lc_status reentrant_acquire(lc_conn *conn, const lc_lock_args *a, const char *field,
                                   int64_t lease, lc_pipe *p, int64_t deadline)
{
    lc_client *c = conn->client;
    char channel[LC_KEY_MAX + 64];
    channel_name(a->key, channel, sizeof channel);
    bool got = false;
    int64_t ttl = -1;
    lc_status s;
    if (conn->sent != LC_SENT_NONE || reentrant_tries_first(c, a, field, channel)) {
        if ((s = reentrant_try(conn, a->key, field, lease, p, &got, &ttl)) != LC_OK || got)
            return s;
        if (a->wait_ms == 0 || lc_now_ms() >= deadline)
            return LC_BUSY;
    }
    lc_ps_waiter w;
    bool head = false;
    lc_ps_channel *ch = lc__pubsub_join(c, channel, &w, deadline, a->cancel, &head);
    if (!ch)
        return LC_NOMEM;
    bool try_now = head; /* a release may have slipped in before the subscription */
    for (;;) {
        if (try_now) {
            if ((s = reentrant_try(conn, a->key, field, lease, p, &got, &ttl)) != LC_OK || got)
                break;
        }
        int64_t now = lc_now_ms();
        if (now >= deadline) {
            s = LC_BUSY;
            break;
        }
        if (lc__canceled(a->cancel)) {
            s = LC_CANCELED;
            break;
        }
        int64_t until = deadline;
        if (try_now) {
            /* A PTTL of -1/-2 means the key vanished or lost its TTL
             * between commands: look again soon. */
            int64_t t = ttl >= 0 ? ttl : c->retry_interval_ms;
            if (now + t < until)
                until = now + t;
        }
        lc__pubsub_wait(c, ch, &w, until, a->cancel);
        try_now = true;
    }
    lc__pubsub_leave(c, ch, &w);
    return s;
}

static lc_status release_redis(lc_conn *conn, lc_guard *g, lc_pipe *p);

/* --- public ------------------------------------------------------------- */

lc_status lc_acquire(lc_conn *conn, const lc_lock_args *a, lc_guard **out)
{
    return lc_acquire_pipe(conn, a, NULL, out);
}

_Static_assert(sizeof((lc_conn *)0)->sent_key == LC_KEY_MAX + 1, "lc_conn.sent_key");
_Static_assert(sizeof((lc_conn *)0)->sent_fence_key == LC_KEY_MAX + 1, "lc_conn.sent_fence_key");

static void new_token(char *out)
{
    uuid_t u;
    uuid_generate(u);
    uuid_unparse_lower(u, out);
}

/* A fresh token for token and fenced: the one minted after the last send
 * when there is one (its cost then hid in that send's round trip). */
static void mint_token(lc_conn *conn, char *out)
{
    if (conn->spare_token[0]) {
        memcpy(out, conn->spare_token, LC_ID_LEN);
        conn->spare_token[0] = '\0';
        return;
    }
    new_token(out);
}

lc_status lc_acquire_send(lc_conn *conn, const lc_lock_args *a, lc_pipe *p)
{
    if (!conn)
        return LC_MISUSE;
    if (conn->sent != LC_SENT_NONE)
        return misuse(conn, "an acquire sent by lc_acquire_send is still unread");
    if (p && (p->n < 0 || p->n > LC_PIPE_MAX))
        return misuse(conn, "lc_pipe not initialised");
    lc_status s = check_args(conn, a);
    if (s == LC_OK && a->mode != LC_REDLOCK)
        s = check_pipe_slot(conn, a->key, p);
    if (s != LC_OK)
        return s;
    lc_client *c = conn->client;
    char lease_s[24], nk[16];
    char field[LC_ID_LEN * 2 + 2], channel[LC_KEY_MAX + 64]; /* reentrant's, argv points here */
    const char *argv[16];
    int argc;
    switch (a->mode) {
    case LC_TOKEN:
        mint_token(conn, conn->sent_token);
        snprintf(lease_s, sizeof lease_s, "%lld", (long long)a->lease_ms);
        argv[0] = "SET";
        argv[1] = a->key;
        argv[2] = conn->sent_token;
        argv[3] = "NX";
        argv[4] = "PX";
        argv[5] = lease_s;
        argc = 6;
        break;
    case LC_FENCED: {
        mint_token(conn, conn->sent_token);
        snprintf(lease_s, sizeof lease_s, "%lld", (long long)a->lease_ms);
        const char *args[] = {a->key, a->fence_key, conn->sent_token, lease_s};
        argc = eval_argv(argv, nk, LC_SCRIPT_FENCED_ACQUIRE_SHA, 2, 4, args);
        break;
    }
    case LC_REENTRANT: {
        /* Only when lc_acquire_pipe's first step is an attempt (not a wait
         * behind a starving head), with its field and lease. */
        snprintf(field, sizeof field, "%s:%s", c->instance_id, a->owner);
        channel_name(a->key, channel, sizeof channel);
        if (!reentrant_tries_first(c, a, field, channel))
            return LC_OK;
        snprintf(lease_s, sizeof lease_s, "%lld",
                 (long long)(a->lease_ms == 0 ? c->watchdog_timeout_ms : a->lease_ms));
        const char *args[] = {a->key, lease_s, field};
        argc = eval_argv(argv, nk, LC_SCRIPT_REENTRANT_ACQUIRE_SHA, 1, 3, args);
        break;
    }
    default: return LC_OK; /* nothing sent ahead: lc_acquire_pipe does it all */
    }
    conn->sent_mode = a->mode;
    conn->sent_p = p;
    conn->sent_pn = p ? p->n : 0;
    conn->sent_start_us = lc_now_us();
    conn->sent_lease_ms = a->lease_ms;
    snprintf(conn->sent_owner, sizeof conn->sent_owner, "%s", a->owner);
    snprintf(conn->sent_key, sizeof conn->sent_key, "%s", a->key);
    snprintf(conn->sent_fence_key, sizeof conn->sent_fence_key, "%s",
             a->mode == LC_FENCED ? a->fence_key : "");
    redisContext *ctx = lc__conn_ctx_key(conn, a->key);
    if (!ctx) {
        /* Nothing sent, and the connect has cost its timeout already:
         * lc_acquire_pipe answers LC_IO with this reason instead of
         * waiting a second time on a Redis just found unreachable. */
        conn->sent = LC_SENT_NO_CONN;
        memcpy(conn->sent_err, conn->err, sizeof conn->sent_err);
        return LC_OK;
    }
    conn->sent = lc__trip_send(ctx, argc, argv, p, false, conn->err) == 0 ? LC_SENT_WRITTEN
                                                                          : LC_SENT_FAILED;
    /* The next send's token, minted while this one's replies travel. */
    if ((a->mode == LC_TOKEN || a->mode == LC_FENCED) && conn->sent == LC_SENT_WRITTEN)
        new_token(conn->spare_token);
    return LC_OK;
}

/* Whether a and p are the acquisition lc_acquire_send sent on conn. */
static bool sent_matches(const lc_conn *conn, const lc_lock_args *a, const lc_pipe *p)
{
    return a->mode == conn->sent_mode && p == conn->sent_p && (p ? p->n : 0) == conn->sent_pn &&
           a->lease_ms == conn->sent_lease_ms && strcmp(a->key, conn->sent_key) == 0 &&
           strcmp(a->owner, conn->sent_owner) == 0 &&
           (a->mode != LC_FENCED || strcmp(a->fence_key, conn->sent_fence_key) == 0);
}

/* Nobody will read the replies of the attempt lc_acquire_send wrote (no
 * memory for lc_acquire_pipe's guard, or lc_conn_free): the context goes
 * to the reaper as a timed-out attempt's would (a lock it took is released
 * there, or ends with its lease). */
static void abandon_sent(lc_conn *conn)
{
    bool written = conn->sent == LC_SENT_WRITTEN;
    conn->sent = LC_SENT_NONE;
    if (!written || !conn->ctx)
        return;
    if (!conn->ctx->err) {
        conn->ctx->err = REDIS_ERR_IO;
        snprintf(conn->ctx->errstr, sizeof conn->ctx->errstr, "%s", "sent acquire abandoned");
    }
    bool re = conn->sent_mode == LC_REENTRANT;
    char field[LC_ID_LEN * 2 + 2];
    if (re)
        snprintf(field, sizeof field, "%s:%s", conn->client->instance_id, conn->sent_owner);
    lc__reaper_adopt(conn, &(lc_orphan_cmd){.mode = conn->sent_mode,
                                            .key = conn->sent_key,
                                            .owner = re ? field : conn->sent_token,
                                            .lease_ms = re && conn->sent_lease_ms == 0
                                                            ? conn->client->watchdog_timeout_ms
                                                            : conn->sent_lease_ms,
                                            .replies_after = conn->sent_pn});
}

void lc_conn_free(lc_conn *conn)
{
    if (!conn)
        return;
    if (conn->sent != LC_SENT_NONE)
        abandon_sent(conn); /* takes conn->ctx when an attempt was written */
    lc__redlock_conn_free(conn->rl);
    lc__conn_close(conn);
}

lc_status lc_acquire_pipe(lc_conn *conn, const lc_lock_args *a, lc_pipe *p, lc_guard **out)
{
    if (!out)
        return misuse(conn, "NULL out");
    *out = NULL;
    /* before its replies are touched: an uninitialised pipe's are garbage */
    if (p && (p->n < 0 || p->n > LC_PIPE_MAX))
        return misuse(conn, "lc_pipe not initialised");
    lc__pipe_drop_replies(p);
    lc_status s = check_args(conn, a);
    if (s == LC_OK && a->mode != LC_REDLOCK)
        s = check_pipe_slot(conn, a->key, p);
    if (s != LC_OK)
        return s;
    bool presend = conn->sent != LC_SENT_NONE;
    if (presend && !sent_matches(conn, a, p))
        return misuse(conn, "not the acquisition lc_acquire_send sent");
    if (conn->sent == LC_SENT_NO_CONN) {
        conn->sent = LC_SENT_NONE;
        memcpy(conn->err, conn->sent_err, sizeof conn->err);
        return fail_io(conn);
    }
    conn->trip_lock_unread = false;
    lc_client *c = conn->client;
    int64_t start_us = presend ? conn->sent_start_us : lc_now_us();
    int64_t start = start_us / 1000;
    int64_t deadline = start + a->wait_ms;
    size_t klen = strlen(a->key);
    lc_guard *g = calloc(1, sizeof *g + klen + 1);
    if (!g) {
        if (presend)
            abandon_sent(conn);
        return LC_NOMEM;
    }
    memcpy(g->key, a->key, klen + 1);
    g->mode = a->mode;
    g->client = c;
    g->lease_ms = a->lease_ms;

    switch (a->mode) {
    case LC_NONE: s = pipe_alone(conn, p); break;
    case LC_MUTEX:
        s = lc__mutex_acquire(&c->mutexes, a->key, a->wait_ms, a->cancel, &g->mx);
        if (s == LC_OK && (s = pipe_alone(conn, p)) != LC_OK)
            lc__mutex_release(&c->mutexes, g->mx);
        break;
    case LC_SETNX:
        snprintf(g->owner_token, sizeof g->owner_token, "1");
        s = poll_acquire(conn, a, NULL, p, deadline, NULL);
        break;
    case LC_TOKEN:
    case LC_FENCED: {
        if (presend)
            memcpy(g->owner_token, conn->sent_token, LC_ID_LEN);
        else
            mint_token(conn, g->owner_token);
        s = poll_acquire(conn, a, g->owner_token, p, deadline, &g->fence);
        break;
    }
    case LC_REENTRANT: {
        g->watchdog = a->lease_ms == 0;
        g->lease_ms = g->watchdog ? c->watchdog_timeout_ms : a->lease_ms;
        snprintf(g->owner_token, sizeof g->owner_token, "%s:%s", c->instance_id, a->owner);
        s = reentrant_acquire(conn, a, g->owner_token, g->lease_ms, p, deadline);
        if (s == LC_OK && !(g->hold = lc__hold_add(c, a->key, g->owner_token, g->watchdog))) {
            /* No memory, or no watchdog thread: give the lock back rather
             * than hold it unrenewed. */
            (void)release_redis(conn, g, NULL);
            s = LC_NOMEM;
        }
        break;
    }
    case LC_REDLOCK: {
        /* lc_redlock.c: N nodes, not this conn's Redis. */
        if (p && p->n > 0) {
            s = misuse(conn, "redlock carries no commands (its nodes are not the data server)");
            break;
        }
        new_token(g->owner_token);
        s = lc__redlock_acquire(conn, a, g->owner_token, deadline, &g->valid_until);
        break;
    }
    default: s = LC_MISUSE;
    }

    if (s != LC_OK) {
        if (s == LC_IO && conn->trip_lock_unread) /* it may still run: lc_reaper.c */
            lc__reaper_adopt(conn, &(lc_orphan_cmd){.mode = g->mode,
                                                    .key = g->key,
                                                    .owner = g->owner_token,
                                                    .lease_ms = g->lease_ms,
                                                    .replies_before = conn->trip_unread_before,
                                                    .replies_after = conn->trip_unread_after});
        lc__pipe_drop_replies(p); /* replies only ever go with the lock */
        free(g);
        if (s == LC_BUSY)
            atomic_fetch_add(&c->busy, 1);
        else if (s == LC_IO)
            fail_io(conn);
        return s;
    }
    /* From µs, floored: two millisecond readings would make a wait of a
     * few µs across a millisecond boundary read 1 ms. */
    g->wait_ms = (lc_now_us() - start_us) / 1000;
    atomic_fetch_add(&c->acquired, 1);
    *out = g;
    return LC_OK;
}

/* p (may be NULL) goes before the release command, in the same write. */
static lc_status release_redis(lc_conn *conn, lc_guard *g, lc_pipe *p)
{
    redisContext *ctx = conn->client->cl.on ? lc__conn_ctx_key(conn, g->key) : lc_conn_redis(conn);
    if (!ctx)
        return LC_IO;
    redisReply *r = NULL;
    lc_status s = LC_OK;
    if (g->mode == LC_SETNX) {
        /* Plain DEL: no owner check, so it deletes whoever holds it now. */
        const char *argv[] = {"DEL", g->key};
        if (lc__conn_trip(conn, &ctx, LC__TRIP_RELEASE, 2, argv, p, true, false, &r) != 0 ||
            r->type != REDIS_REPLY_INTEGER) {
            lc__seterr(conn->err, "redis DEL: %s",
                       r && r->type == REDIS_REPLY_ERROR ? r->str : ctx->errstr);
            s = LC_IO;
        } else {
            s = r->integer == 1 ? LC_OK : LC_NOT_OWNER;
        }
    } else if (g->mode == LC_TOKEN || g->mode == LC_FENCED) {
        const char *args[] = {g->key, g->owner_token};
        r = eval_trip(conn, ctx, LC_SCRIPT_TOKEN_RELEASE_SHA, LC_SCRIPT_TOKEN_RELEASE, 1, 2, args,
                      p, true);
        if (!r)
            s = LC_IO;
        else if (!(r->type == REDIS_REPLY_INTEGER && r->integer == 1))
            s = LC_NOT_OWNER;
    } else {
        char channel[LC_KEY_MAX + 64], lease[24];
        channel_name(g->key, channel, sizeof channel);
        snprintf(lease, sizeof lease, "%lld", (long long)g->lease_ms);
        const char *args[] = {g->key, channel, LC_UNLOCK_MESSAGE, lease, g->owner_token};
        r = eval_trip(conn, ctx, LC_SCRIPT_REENTRANT_RELEASE_SHA, LC_SCRIPT_REENTRANT_RELEASE, 2, 5,
                      args, p, true);
        if (!r)
            s = LC_IO;
        else if (r->type == REDIS_REPLY_NIL)
            s = LC_NOT_OWNER;
        else if (r->type == REDIS_REPLY_INTEGER && r->integer == 1 &&
                 atomic_load(&conn->client->waiters) > 0)
            lc__pubsub_released(conn->client, channel); /* 1: deleted and published */
    }
    if (r)
        freeReplyObject(r);
    return s;
}

lc_status lc_release(lc_conn *conn, lc_guard *g)
{
    return lc_release_pipe(conn, g, NULL);
}

lc_status lc_release_pipe(lc_conn *conn, lc_guard *g, lc_pipe *p)
{
    bool bad_pipe = p && (p->n < 0 || p->n > LC_PIPE_MAX);
    if (bad_pipe)
        p = NULL; /* not initialised (its replies are garbage): send nothing
                     of it, release (misuse below) */
    lc__pipe_drop_replies(p);
    if (!g)
        return misuse(conn, "NULL guard");
    lc_status s = LC_OK;
    lc_client *c = g->client;
    bool have_cmds = p && p->n > 0;
    lc_conn *node_conn = conn; /* redlock's nodes are not conn->ctx */
    /* An attempt's replies are pending on conn->ctx: whatever would send
     * there is refused as with a NULL conn (the guard is freed all the
     * same; its lease frees the lock). */
    bool pending = conn && conn->sent != LC_SENT_NONE;
    /* With a cluster, commands of another slot than the lock's are not
     * sent (they could not share the release's round trip), and the lock
     * is released alone, as for an uninitialised pipe (misuse below). */
    bool cross = conn && !pending && g->mode != LC_REDLOCK && have_cmds &&
                 check_pipe_slot(conn, g->key, p) != LC_OK;
    if (cross) {
        p = NULL;
        have_cmds = false;
    }
    if (pending)
        conn = NULL;
    if (conn)
        conn->trip_lock_unread = false;
    switch (g->mode) {
    case LC_NONE: s = !have_cmds ? LC_OK : conn ? pipe_alone(conn, p) : LC_MISUSE; break;
    case LC_MUTEX:
        /* The caller's commands run while the lock is held. */
        s = !have_cmds ? LC_OK : conn ? pipe_alone(conn, p) : LC_MISUSE;
        lc__mutex_release(&c->mutexes, g->mx);
        break;
    case LC_REENTRANT:
        /* The watchdog stops at the last local release whatever happens
         * next, even on misuse: a hold left behind would be renewed for
         * the life of the process. */
        lc__hold_begin_release(c, g->hold);
        s = conn ? release_redis(conn, g, p) : LC_MISUSE;
        if (lc__hold_drop(c, g->hold, g->watchdog) && s == LC_NOT_OWNER)
            s = LC_LOST;
        break;
    case LC_REDLOCK:
        s = !node_conn || have_cmds
                ? LC_MISUSE
                : lc__redlock_release(node_conn, g->key, g->owner_token, g->valid_until);
        break;
    default: s = conn ? release_redis(conn, g, p) : LC_MISUSE;
    }
    if (pending && s == LC_MISUSE)
        (void)misuse(node_conn, "an acquire sent by lc_acquire_send is still unread");
    else if (bad_pipe && s == LC_OK)
        s = misuse(node_conn, "lc_pipe not initialised: none of its commands was sent (the lock "
                              "was released)");
    else if (cross && s == LC_OK)
        s = LC_MISUSE; /* check_pipe_slot wrote the reason */
    else if (s == LC_MISUSE && !pending && have_cmds && g->mode == LC_REDLOCK)
        (void)misuse(node_conn, "redlock: a release carries no commands (nothing was sent)");
    /* LC_IO: release_redis (conn set), or redlock's nodes, where conn is
     * NULL while an attempt's replies are pending on conn->ctx */
    if (s == LC_IO) {
        if (conn && conn->trip_lock_unread) /* it may still run: lc_reaper.c */
            lc__reaper_adopt(conn, &(lc_orphan_cmd){.mode = g->mode,
                                                    .release = true,
                                                    .key = g->key,
                                                    .owner = g->owner_token,
                                                    .lease_ms = g->lease_ms,
                                                    .replies_before = conn->trip_unread_before,
                                                    .replies_after = conn->trip_unread_after});
        (void)fail_io(node_conn);
    }
    free(g);
    return s;
}

lc_status lc_extend(lc_conn *conn, lc_guard *g, int64_t lease_ms)
{
    if (!conn || !g)
        return misuse(conn, "NULL conn or guard");
    if (g->mode != LC_TOKEN && g->mode != LC_FENCED)
        return misuse(conn, "extend is offered by token and fenced modes only");
    if (lease_ms <= 0 || lease_ms > LC_MAX_DURATION_MS)
        return misuse(conn, "lease_ms must be 1..86400000");
    if (conn->sent != LC_SENT_NONE)
        return misuse(conn, "an acquire sent by lc_acquire_send is still unread");
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)lease_ms);
    const char *args[] = {g->key, g->owner_token, lease};
    redisReply *r;
    if (conn->client->cl.on) {
        r = lc__conn_eval(conn, LC_SCRIPT_TOKEN_EXTEND_SHA, LC_SCRIPT_TOKEN_EXTEND, 1, 3, args);
    } else {
        redisContext *ctx = lc_conn_redis(conn);
        if (!ctx)
            return fail_io(conn);
        r = lc__eval(ctx, LC_SCRIPT_TOKEN_EXTEND_SHA, LC_SCRIPT_TOKEN_EXTEND, 1, 3, args,
                     conn->err);
    }
    if (!r)
        return fail_io(conn);
    lc_status s = r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? LC_OK : LC_NOT_OWNER;
    freeReplyObject(r);
    if (s == LC_NOT_OWNER)
        atomic_store(&g->lost, 1);
    else
        g->lease_ms = lease_ms;
    return s;
}

int lc_guard_lost(const lc_guard *g)
{
    if (atomic_load(&((lc_guard *)g)->lost))
        return 1;
    if (g->mode == LC_REDLOCK)
        return lc_now_ms() >= g->valid_until;
    return g->hold && atomic_load(&g->hold->lost) ? 1 : 0;
}

int64_t lc_guard_wait_ms(const lc_guard *g)
{
    return g->wait_ms;
}

int64_t lc_guard_fence(const lc_guard *g)
{
    return g->mode == LC_FENCED ? g->fence : 0;
}

int64_t lc_guard_validity_ms(const lc_guard *g)
{
    if (g->mode != LC_REDLOCK)
        return -1;
    int64_t left = g->valid_until - lc_now_ms();
    return left > 0 ? left : 0;
}

const char *lc_guard_owner_token(const lc_guard *g)
{
    return g->owner_token;
}
