/* lc_watchdog.c — the reentrant mode's hold table and watchdog.
 *
 * Mirrors Redisson's ExpirationEntry + renewExpiration (RedissonBaseLock): a
 * lock taken without an explicit lease gets watchdog_timeout_ms (30 s by
 * default) and is renewed every third of that with the renew script for as
 * long as this process holds it. One thread per process serves every held
 * lock, with its own Redis connection; it sleeps until the earliest renewal
 * is due, so an idle watchdog costs nothing.
 *
 * Renewal stops when:
 *   - the last local watchdog-mode hold of (key, field) is released
 *     (lc__hold_drop): a watchdog-mode re-entry inside an explicit-lease
 *     hold renews the lock only until it is released, as in Redisson,
 *     where only the watchdog-mode acquisitions keep the renewal going;
 *   - the renew script returns 0: the lock is gone (expired during a pause,
 *     or deleted from outside). The entry is marked lost, so the holder can
 *     be told at release (LC_LOST) or at any time (lc_guard_lost);
 *   - the process dies: nothing renews, and the lease runs out within
 *     watchdog_timeout_ms of the last renewal.
 * An I/O error keeps the schedule: the next period tries again (Redis may be
 * restarting), while the lease still bounds the damage. Here lockcore
 * departs from Redisson's renewExpiration, which logs the error and
 * schedules no further renewal, so that one failed renewal lets the lock
 * run out a lease later although its holder lives: a Redis that answers
 * again within the lease keeps the lock held here.
 *
 * The same table also records explicit-lease holds: lockcore needs to know
 * that an owner already holds a key to let it re-enter ahead of queued
 * waiters (lc_lock.c).
 *
 * Releases race two things. A renewal may run right after a release
 * script's DEL and answer 0: so every release is announced first
 * (lc__hold_begin_release), and a 0 from a renewal that any release overlapped
 * is not a loss (the next renewal decides). And threads sharing one owner id
 * may re-enter while the last hold is being released, before or after its
 * DEL: the entry then has more holds than releases under way, so it is
 * renewed again, whatever the order of the two round trips.
 */
#include "lc_internal.h"

#include "lc_conn.h"
#include "lc_scripts.h"
#include "lc_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lc__watchdog_init(lc_watchdog *w)
{
    memset(w, 0, sizeof *w);
    w->sleeping_until = INT64_MAX;
    LC_PTHREAD(pthread_mutex_init(&w->mu, NULL));
    lc__cond_init(&w->cv);
}

static void hold_free(lc_hold *h)
{
    free(h->key);
    free(h->field);
    free(h);
}

/* The live entry of (key, field): entries found lost are skipped, so a
 * re-acquisition after a loss starts over instead of joining a hold the
 * watchdog no longer renews. */
static lc_hold *find_live(lc_watchdog *w, const char *key, const char *field)
{
    for (lc_hold *h = w->holds; h; h = h->next)
        if (!atomic_load(&h->lost) && strcmp(h->key, key) == 0 && strcmp(h->field, field) == 0)
            return h;
    return NULL;
}

/* Under w->mu: is h's lock renewed (a watchdog-mode hold, not lost)? */
static bool renewed(const lc_hold *h)
{
    return h->watchdog_holds > 0 && !atomic_load(&h->lost);
}

/* Under w->mu, after a change to h's holds or lost flag: keeps
 * lc_stats.watchdog_active = the entries renewed now. was: renewed(h)
 * before the change. */
static void recount(lc_client *c, const lc_hold *h, bool was)
{
    bool now = renewed(h);
    if (now != was)
        atomic_fetch_add(&c->holds_active, now ? 1 : (uint_fast64_t)-1);
}

/* Renews one lock: 1 renewed, 0 lost, -1 I/O error. */
static int renew(lc_client *c, const char *key, const char *field)
{
    char err[LC_ERRSTR_LEN];
    char lease[24];
    snprintf(lease, sizeof lease, "%lld", (long long)c->watchdog_timeout_ms);
    const char *args[] = {key, lease, field};
    redisReply *r;
    if (c->cl.on) {
        /* the router finds each key's master (lc_conn.c) */
        if (!c->wd.conn && lc_conn_new(c, &c->wd.conn) != LC_OK)
            return -1;
        r = lc__conn_eval(c->wd.conn, LC_SCRIPT_REENTRANT_RENEW_SHA, LC_SCRIPT_REENTRANT_RENEW, 1,
                          3, args);
    } else {
        if (!lc__redis_reuse(c, &c->wd.ctx, err, NULL))
            return -1;
        r = lc__eval(c->wd.ctx, LC_SCRIPT_REENTRANT_RENEW_SHA, LC_SCRIPT_REENTRANT_RENEW, 1, 3,
                     args, err);
    }
    if (!r)
        return -1;
    int res = r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? 1 : 0;
    freeReplyObject(r);
    return res;
}

static void *watchdog_main(void *arg)
{
    lc_client *c = arg;
    lc_watchdog *w = &c->wd;
    int64_t period = c->watchdog_timeout_ms / 3;
    LC_PTHREAD(pthread_mutex_lock(&w->mu));
    while (!w->stop) {
        lc_hold *due = NULL;
        for (lc_hold *h = w->holds; h; h = h->next)
            if (renewed(h) && h->releasing < h->holds &&
                (!due || h->next_renew_ms < due->next_renew_ms))
                due = h;
        if (!due) {
            w->sleeping_until = INT64_MAX;
            LC_PTHREAD(pthread_cond_wait(&w->cv, &w->mu));
            continue;
        }
        if (due->next_renew_ms > lc_now_ms()) {
            w->sleeping_until = due->next_renew_ms;
            lc__cond_wait_until(&w->cv, &w->mu, due->next_renew_ms);
            continue;
        }
        w->sleeping_until = 0; /* busy renewing: it rescans before sleeping */
        /* Renew outside the lock so acquire/release never wait on Redis here;
         * `renewing` keeps the entry alive if its last hold is dropped. */
        due->renewing = true;
        due->next_renew_ms = lc_now_ms() + period;
        bool quiet = due->releasing == 0;
        unsigned releases = due->releases;
        LC_PTHREAD(pthread_mutex_unlock(&w->mu));
        int res = renew(c, due->key, due->field);
        LC_PTHREAD(pthread_mutex_lock(&w->mu));
        due->renewing = false;
        if (due->unlinked) {
            hold_free(due);
            continue;
        }
        if (res == 1) {
            atomic_fetch_add(&c->renewals, 1);
        } else if (res == 0 && quiet && due->releases == releases && renewed(due)) {
            /* No release overlapped the renewal, so no DEL of ours explains
             * the 0: the lock is gone. */
            atomic_store(&due->lost, 1);
            atomic_fetch_add(&c->renew_lost, 1);
            recount(c, due, true);
        }
    }
    LC_PTHREAD(pthread_mutex_unlock(&w->mu));
    return NULL;
}

/* Under w->mu: wakes the thread only if h is due before it would wake anyway,
 * so a busy lock does not cost the watchdog a context switch per acquire. */
static void schedule(lc_watchdog *w, const lc_hold *h)
{
    if (h->next_renew_ms < w->sleeping_until)
        LC_PTHREAD(pthread_cond_signal(&w->cv));
}

bool lc__hold_exists(lc_client *c, const char *key, const char *field)
{
    LC_PTHREAD(pthread_mutex_lock(&c->wd.mu));
    bool found = find_live(&c->wd, key, field) != NULL;
    LC_PTHREAD(pthread_mutex_unlock(&c->wd.mu));
    return found;
}

lc_hold *lc__hold_add(lc_client *c, const char *key, const char *field, bool watchdog)
{
    lc_watchdog *w = &c->wd;
    LC_PTHREAD(pthread_mutex_lock(&w->mu));
    if (watchdog && !w->started) {
        if (pthread_create(&w->thread, NULL, watchdog_main, c) != 0) {
            LC_PTHREAD(pthread_mutex_unlock(&w->mu));
            return NULL;
        }
        w->started = true;
    }
    lc_hold *h = find_live(w, key, field);
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h || !(h->key = strdup(key)) || !(h->field = strdup(field))) {
            if (h)
                hold_free(h);
            LC_PTHREAD(pthread_mutex_unlock(&w->mu));
            return NULL;
        }
        h->next = w->holds;
        w->holds = h;
    }
    bool was = renewed(h);
    h->holds++;
    if (watchdog)
        h->watchdog_holds++;
    recount(c, h, was);
    /* Renewal starts with the first watchdog-mode hold, whose acquire
     * script set the full lease (inside an explicit-lease hold too). */
    if (!was && renewed(h))
        h->next_renew_ms = lc_now_ms() + c->watchdog_timeout_ms / 3;
    /* Also wakes the thread for a re-entry during the last release: it
     * skipped the entry meanwhile and may sleep past its renewal time. */
    if (renewed(h))
        schedule(w, h);
    LC_PTHREAD(pthread_mutex_unlock(&w->mu));
    return h;
}

void lc__hold_begin_release(lc_client *c, lc_hold *h)
{
    LC_PTHREAD(pthread_mutex_lock(&c->wd.mu));
    LC_ASSERT(h->releasing < h->holds);
    h->releasing++;
    h->releases++;
    LC_PTHREAD(pthread_mutex_unlock(&c->wd.mu));
}

bool lc__hold_drop(lc_client *c, lc_hold *h, bool watchdog)
{
    lc_watchdog *w = &c->wd;
    LC_PTHREAD(pthread_mutex_lock(&w->mu));
    bool lost = atomic_load(&h->lost) != 0;
    LC_ASSERT(h->releasing > 0 && h->holds > 0 && (!watchdog || h->watchdog_holds > 0));
    bool was = renewed(h);
    h->releasing--;
    h->holds--;
    if (watchdog)
        h->watchdog_holds--;
    recount(c, h, was);
    if (h->holds == 0) {
        lc_hold **pp = &w->holds;
        while (*pp && *pp != h)
            pp = &(*pp)->next;
        LC_ASSERT(*pp == h);
        *pp = h->next;
        if (h->renewing)
            h->unlinked = true;
        else
            hold_free(h);
    }
    LC_PTHREAD(pthread_mutex_unlock(&w->mu));
    return lost;
}

void lc__watchdog_shutdown(lc_client *c)
{
    lc_watchdog *w = &c->wd;
    LC_PTHREAD(pthread_mutex_lock(&w->mu));
    w->stop = true;
    LC_PTHREAD(pthread_cond_broadcast(&w->cv));
    bool started = w->started;
    LC_PTHREAD(pthread_mutex_unlock(&w->mu));
    if (started)
        LC_PTHREAD(pthread_join(w->thread, NULL));
    while (w->holds) {
        lc_hold *n = w->holds->next;
        hold_free(w->holds);
        w->holds = n;
    }
    if (w->ctx)
        redisFree(w->ctx);
    lc__conn_close(w->conn);
    LC_PTHREAD(pthread_cond_destroy(&w->cv));
    LC_PTHREAD(pthread_mutex_destroy(&w->mu));
}
