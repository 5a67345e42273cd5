/* lc_pubsub.c — the reentrant mode's wake-up on release.
 *
 * Mirrors Redisson's LockPubSub: the unlock script publishes to the lock's
 * channel, and waiters sleep until a release message or the holder's PTTL,
 * whichever comes first — no busy polling.
 * As in Redisson, a process holds one subscription per channel however many
 * of its threads wait, on one dedicated connection served by one thread,
 * and each release message wakes one local waiter: waking every waiter
 * makes a thundering herd, every woken thread but one retrying in vain,
 * which starves threads under contention.
 *
 * Waiters queue per channel, oldest first, and a message signals the head.
 * A release by a thread of this process signals it directly as well
 * (lc__pubsub_released): the message would arrive one thread hop later, via
 * this module's thread; when it does, it finds the head gone or sets a flag
 * a head that is not starving ignores.
 * A head that leaves, with or without the lock, makes the next waiter head,
 * which tries at its own starvation point; a starving head also tries every
 * LC_HEAD_POLL_MS, so a message lost on a broken connection (or a lock that
 * vanished without one) never stalls the line for long; every waiter also
 * wakes at its own deadline or the holder's PTTL.
 *
 * The subscriber connection is a blocking hiredis context driven by hand:
 * the thread poll()s its socket and an eventfd (which callers write when a
 * channel must be subscribed or unsubscribed), writes queued commands with
 * redisBufferWrite and parses replies with redisGetReplyFromReader. Only
 * this thread touches the context. On a broken connection it reconnects
 * (bounded by the connect timeout, retried every 100 ms) and resubscribes.
 */
#include "lc_internal.h"

#include "lc_conn.h"
#include "lc_util.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define LC_PS_RECONNECT_MS 100 /* between connection attempts */
#define LC_HEAD_POLL_MS 100    /* a starving head tries at least this often */

struct lc_ps_channel {
    char *name;
    int nwaiters;
    lc_ps_waiter *head, *tail;
    bool sent;             /* the last command sent for it was SUBSCRIBE */
    bool subscribed;       /* Redis confirmed the subscription */
    int pending;           /* (UN)SUBSCRIBE commands not confirmed yet */
    int64_t head_since_ms; /* when the current head got to the front */
    struct lc_ps_channel *next;
};

void lc__pubsub_init(lc_pubsub *p)
{
    memset(p, 0, sizeof *p);
    LC_PTHREAD(pthread_mutex_init(&p->mu, NULL));
    lc__cond_init(&p->subscribed_cv);
    p->wake_fd = -1;
}

static lc_ps_channel *find(lc_pubsub *p, const char *name, size_t len)
{
    for (lc_ps_channel *ch = p->channels; ch; ch = ch->next)
        if (strlen(ch->name) == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* Under p->mu: when ch's head turns starving (has been first in line for
 * barge_limit_ms); INT64_MAX without a head. A head still waiting for its
 * subscription has head_since_ms far in the future (lc__pubsub_join). */
static int64_t starving_at(const lc_client *c, const lc_ps_channel *ch)
{
    return ch->head ? ch->head_since_ms + c->barge_limit_ms : INT64_MAX;
}

/* Under p->mu: a release happened. The head is marked; a starving one is
 * woken to try. While it is not starving, newcomers may take the lock
 * (lc_lock.c): waking it for every release would only buy it a failed
 * attempt, and it wakes by itself at its starvation point. */
static void release_heard(lc_client *c, lc_ps_channel *ch)
{
    if (!ch->head)
        return;
    ch->head->signaled = true;
    if (lc_now_ms() >= starving_at(c, ch))
        LC_PTHREAD(pthread_cond_signal(&ch->head->cv));
}

static void channel_unlink_free(lc_pubsub *p, lc_ps_channel *ch)
{
    lc_ps_channel **pp = &p->channels;
    while (*pp && *pp != ch)
        pp = &(*pp)->next;
    LC_ASSERT(*pp == ch);
    *pp = ch->next;
    free(ch->name);
    free(ch);
}

static void drain(int fd)
{
    uint64_t n;
    if (read(fd, &n, sizeof n) < 0) {
        /* EAGAIN: nothing to drain */
    }
}

static void wake_thread(lc_pubsub *p)
{
    uint64_t one = 1;
    if (p->wake_fd >= 0 && write(p->wake_fd, &one, sizeof one) < 0) {
        /* The counter is saturated: the thread is due to wake anyway. */
    }
}

/* Under p->mu: forget the connection's state after it broke. */
static void drop_connection(lc_client *c)
{
    lc_pubsub *p = &c->ps;
    if (p->ctx) {
        redisFree(p->ctx);
        p->ctx = NULL;
    }
    lc_ps_channel *ch = p->channels;
    while (ch) {
        lc_ps_channel *next = ch->next;
        if (ch->subscribed)
            atomic_fetch_sub(&c->channels_subscribed, 1);
        ch->subscribed = ch->sent = false;
        ch->pending = 0;
        if (ch->nwaiters == 0)
            channel_unlink_free(p, ch);
        ch = next;
    }
}

/* Under p->mu: one reply from the subscriber connection. */
static void handle_reply(lc_client *c, redisReply *r)
{
    lc_pubsub *p = &c->ps;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    lc_ps_channel *ch = find(p, r->element[1]->str, r->element[1]->len);
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0) {
        release_heard(c, ch);
    } else if (strcmp(kind, "subscribe") == 0) {
        ch->pending--;
        if (!ch->subscribed) {
            ch->subscribed = true;
            atomic_fetch_add(&c->channels_subscribed, 1);
        }
        /* After a reconnect a release may have gone unheard: the head tries
         * again rather than sleep on a message that will never come. */
        if (ch->head) {
            ch->head->signaled = true;
            LC_PTHREAD(pthread_cond_signal(&ch->head->cv));
        }
        LC_PTHREAD(pthread_cond_broadcast(&p->subscribed_cv));
    } else if (strcmp(kind, "unsubscribe") == 0) {
        ch->pending--;
        if (ch->subscribed && !ch->sent) {
            ch->subscribed = false;
            atomic_fetch_sub(&c->channels_subscribed, 1);
        }
        if (ch->nwaiters == 0 && !ch->sent && ch->pending == 0)
            channel_unlink_free(p, ch);
    }
}

/* Under p->mu: queue (UN)SUBSCRIBE for channels whose wish changed. */
static void sync_subscriptions(lc_pubsub *p)
{
    for (lc_ps_channel *ch = p->channels, *next; ch; ch = next) {
        next = ch->next;
        if (ch->nwaiters == 0 && !ch->sent && ch->pending == 0) {
            channel_unlink_free(p, ch); /* joined and left before SUBSCRIBE went out */
            continue;
        }
        if (ch->nwaiters > 0 && !ch->sent) {
            redisAppendCommand(p->ctx, "SUBSCRIBE %s", ch->name);
            ch->sent = true;
            ch->pending++;
        } else if (ch->nwaiters == 0 && ch->sent) {
            redisAppendCommand(p->ctx, "UNSUBSCRIBE %s", ch->name);
            ch->sent = false;
            ch->pending++;
        }
    }
}

/* Under p->mu: how long the thread may leave the socket unread. Release
 * messages for a head that is not starving yet would only set a flag it
 * ignores (handle_reply), so while every waiting channel's head is in that
 * state and no (UN)SUBSCRIBE confirmation is due, reading them can wait for
 * the earliest starvation point: under contention the thread then sleeps
 * through a whole burst of releases instead of waking for each. Returns -1
 * to watch the socket now, else the milliseconds to leave it alone. */
static int quiet_ms(lc_client *c)
{
    int64_t now = lc_now_ms(), quiet_until = INT64_MAX;
    for (lc_ps_channel *ch = c->ps.channels; ch; ch = ch->next) {
        if (ch->pending > 0)
            return -1;
        if (!ch->head)
            continue;
        /* A head that cannot hear yet (its subscription was just confirmed)
         * is about to: watch the socket rather than compute a quiet period
         * from its placeholder. */
        if (ch->head_since_ms > now)
            return -1;
        int64_t at = starving_at(c, ch);
        if (at <= now)
            return -1;
        if (at < quiet_until)
            quiet_until = at;
    }
    return quiet_until == INT64_MAX ? -1 : (int)(quiet_until - now);
}

static void *pubsub_main(void *arg)
{
    lc_client *c = arg;
    lc_pubsub *p = &c->ps;
    char err[LC_ERRSTR_LEN];
    int64_t last_attempt = 0;
    LC_PTHREAD(pthread_mutex_lock(&p->mu));
    while (!p->stop) {
        if (!p->ctx) {
            /* At most one attempt per LC_PS_RECONNECT_MS, whether the last
             * one failed or its connection dropped at once (maxclients). */
            int64_t wait = last_attempt + LC_PS_RECONNECT_MS - lc_now_ms();
            LC_PTHREAD(pthread_mutex_unlock(&p->mu));
            if (wait > 0) {
                struct pollfd pf = {p->wake_fd, POLLIN, 0};
                poll(&pf, 1, (int)wait);
                drain(p->wake_fd);
            }
            last_attempt = lc_now_ms();
            /* p->stop is read under p->mu: a glance without it would be a
             * data race; the loop's own test catches a stop meanwhile */
            LC_PTHREAD(pthread_mutex_lock(&p->mu));
            bool stop = p->stop;
            LC_PTHREAD(pthread_mutex_unlock(&p->mu));
            redisContext *ctx = stop ? NULL : lc__redis_connect(c, err);
            LC_PTHREAD(pthread_mutex_lock(&p->mu));
            if (!ctx)
                continue;
            p->ctx = ctx;
        }
        sync_subscriptions(p);
        int quiet = quiet_ms(c);
        LC_PTHREAD(pthread_mutex_unlock(&p->mu));

        int done = 0, ok = 1;
        while (ok && !done)
            ok = redisBufferWrite(p->ctx, &done) == REDIS_OK;
        struct pollfd pf[2] = {{p->wake_fd, POLLIN, 0}, {p->ctx->fd, POLLIN, 0}};
        if (ok && poll(pf, quiet < 0 ? 2 : 1, quiet) < 0 && errno != EINTR)
            ok = 0;
        if (pf[0].revents & POLLIN)
            drain(p->wake_fd);
        if (ok && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
            ok = redisBufferRead(p->ctx) == REDIS_OK;
        if (ok && lc__sentinel_stale(&c->sn, p->ctx))
            ok = 0; /* the master moved: subscribe on the new one */

        LC_PTHREAD(pthread_mutex_lock(&p->mu));
        void *reply = NULL;
        while (ok && (ok = redisGetReplyFromReader(p->ctx, &reply) == REDIS_OK) && reply) {
            handle_reply(c, reply);
            freeReplyObject(reply);
            reply = NULL;
        }
        if (!ok)
            drop_connection(c);
    }
    drop_connection(c);
    LC_PTHREAD(pthread_mutex_unlock(&p->mu));
    return NULL;
}

bool lc__pubsub_head_starving(lc_client *c, const char *channel)
{
    LC_PTHREAD(pthread_mutex_lock(&c->ps.mu));
    lc_ps_channel *ch = find(&c->ps, channel, strlen(channel));
    bool starving = ch && lc_now_ms() >= starving_at(c, ch);
    LC_PTHREAD(pthread_mutex_unlock(&c->ps.mu));
    return starving;
}

lc_ps_channel *lc__pubsub_join(lc_client *c, const char *channel, lc_ps_waiter *w,
                               int64_t deadline_ms, const atomic_int *cancel, bool *is_head)
{
    lc_pubsub *p = &c->ps;
    LC_PTHREAD(pthread_mutex_lock(&p->mu));
    if (!p->started) {
        if (p->wake_fd < 0)
            p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (p->wake_fd < 0 || pthread_create(&p->thread, NULL, pubsub_main, c) != 0) {
            LC_PTHREAD(pthread_mutex_unlock(&p->mu));
            return NULL;
        }
        p->started = true;
    }
    lc_ps_channel *ch = find(p, channel, strlen(channel));
    if (!ch) {
        ch = calloc(1, sizeof *ch);
        if (!ch || !(ch->name = strdup(channel))) {
            free(ch);
            LC_PTHREAD(pthread_mutex_unlock(&p->mu));
            return NULL;
        }
        ch->next = p->channels;
        p->channels = ch;
    }
    lc__cond_init(&w->cv);
    w->signaled = false;
    w->next = NULL;
    w->prev = ch->tail;
    if (ch->tail)
        ch->tail->next = w;
    else
        ch->head = w;
    ch->tail = w;
    if (ch->head == w)
        ch->head_since_ms = INT64_MAX / 2; /* not starving before it can hear */
    ch->nwaiters++;
    atomic_fetch_add(&c->waiters, 1);
    if (!ch->sent)
        wake_thread(p);
    /* Wait for the subscription before the caller's next attempt, or a
     * release in between would go unheard (Redisson subscribes, then tries
     * again). Bounded: with Redis down the caller falls back to PTTL waits. */
    int64_t limit = lc_now_ms() + c->connect_timeout_ms + c->command_timeout_ms;
    if (limit > deadline_ms)
        limit = deadline_ms;
    while (!(ch->sent && ch->pending == 0 && ch->subscribed) && lc_now_ms() < limit &&
           !lc__canceled(cancel)) {
        lc__cond_wait_until(&p->subscribed_cv, &p->mu, lc__cancel_wake(cancel, lc_now_ms(), limit));
    }
    /* A head's starvation clock starts once it can hear releases: newcomers
     * should not queue behind a waiter still waiting for its subscription. */
    if (ch->head == w)
        ch->head_since_ms = lc_now_ms();
    *is_head = ch->head == w;
    LC_PTHREAD(pthread_mutex_unlock(&p->mu));
    return ch;
}

void lc__pubsub_wait(lc_client *c, lc_ps_channel *ch, lc_ps_waiter *w, int64_t until_ms,
                     const atomic_int *cancel)
{
    lc_pubsub *p = &c->ps;
    bool was_deaf = false;
    int64_t poll_at = 0; /* set when the head sleeps only until its next poll */
    LC_PTHREAD(pthread_mutex_lock(&p->mu));
    for (;;) {
        int64_t now = lc_now_ms();
        bool head = ch->head == w;
        int64_t at = starving_at(c, ch);
        int64_t wake = until_ms;
        if (head && now < at) {
            /* A head that is not starving yet is deaf to messages (see
             * release_heard): newcomers may take the lock meanwhile. */
            was_deaf = true;
            if (at < wake)
                wake = at;
        } else if (w->signaled || (head && was_deaf) || (poll_at && now >= poll_at)) {
            break; /* a message, the starvation point or the poll: try */
        } else if (head && now + LC_HEAD_POLL_MS < wake) {
            /* A starving head does not trust the message alone: one lost on
             * a broken subscriber connection (or a lock that vanished
             * without a release) would leave the line asleep. */
            wake = poll_at = now + LC_HEAD_POLL_MS;
        }
        if (now >= until_ms || lc__canceled(cancel))
            break;
        lc__cond_wait_until(&w->cv, &p->mu, lc__cancel_wake(cancel, now, wake));
    }
    w->signaled = false;
    LC_PTHREAD(pthread_mutex_unlock(&p->mu));
}

void lc__pubsub_released(lc_client *c, const char *channel)
{
    lc_pubsub *p = &c->ps;
    LC_PTHREAD(pthread_mutex_lock(&p->mu));
    lc_ps_channel *ch = find(p, channel, strlen(channel));
    if (ch)
        release_heard(c, ch);
    LC_PTHREAD(pthread_mutex_unlock(&p->mu));
}

void lc__pubsub_leave(lc_client *c, lc_ps_channel *ch, lc_ps_waiter *w)
{
    lc_pubsub *p = &c->ps;
    LC_PTHREAD(pthread_mutex_lock(&p->mu));
    LC_ASSERT(ch->nwaiters > 0);
    bool was_head = ch->head == w;
    if (w->prev)
        w->prev->next = w->next;
    else
        ch->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        ch->tail = w->prev;
    ch->nwaiters--;
    atomic_fetch_sub(&c->waiters, 1);
    if (was_head && ch->head) {
        /* The new head wakes to re-evaluate how it waits (lc__pubsub_wait):
         * it is deaf to messages until its own starvation point, when it
         * tries. */
        ch->head_since_ms = lc_now_ms();
        LC_PTHREAD(pthread_cond_signal(&ch->head->cv));
    }
    if (ch->nwaiters == 0) {
        if (!ch->sent && ch->pending == 0)
            channel_unlink_free(p, ch); /* never subscribed: nothing to undo */
        else
            wake_thread(p);
    }
    LC_PTHREAD(pthread_cond_destroy(&w->cv));
    LC_PTHREAD(pthread_mutex_unlock(&p->mu));
}

void lc__pubsub_shutdown(lc_client *c)
{
    lc_pubsub *p = &c->ps;
    LC_PTHREAD(pthread_mutex_lock(&p->mu));
    p->stop = true;
    wake_thread(p);
    bool started = p->started;
    LC_PTHREAD(pthread_mutex_unlock(&p->mu));
    if (started)
        LC_PTHREAD(pthread_join(p->thread, NULL));
    while (p->channels)
        channel_unlink_free(p, p->channels);
    if (p->wake_fd >= 0)
        close(p->wake_fd);
    LC_PTHREAD(pthread_cond_destroy(&p->subscribed_cv));
    LC_PTHREAD(pthread_mutex_destroy(&p->mu));
}
