/* lc_internal.h — lockcore's private structures, and the functions of the
 * client's parts, shared by its sources.
 *
 * Ownership map:
 *   lc_client  owns the mutex table (lc_mutex.c), the hold table and the
 *              watchdog thread with its own connection (lc_watchdog.c), and
 *              the subscriber thread with its own connection (lc_pubsub.c),
 *              and the reaper thread with the timed-out connections it took
 *              over (lc_reaper.c); lc_client.c starts and stops them, and
 *              keeps the options, names and counters.
 *   lc_conn    owns one hiredis context, used only by its caller's thread
 *              (lc_conn.c, declared in lc_conn.h, which also connects and
 *              runs scripts for the two background threads' contexts), and
 *              in redlock mode one non-blocking context per node
 *              (lc_redlock.c); with a Redis Cluster one context per node it
 *              talked to, routed by the client's slot map (lc_cluster.c).
 *   lc_guard   points into the tables above (refcounted entries), never into
 *              a connection, so a guard may outlive the conn that made it
 *              (lc_lock.c, which also holds every mode's commands).
 *
 * Which file uses which (a function defined in the file on the right):
 *   lc_lock      -> lc_conn, lc_mutex, lc_watchdog, lc_pubsub, lc_reaper, lc_redlock,
 *                   lc_util
 *   lc_client    -> lc_mutex, lc_watchdog, lc_pubsub, lc_reaper, lc_redlock, lc_sentinel,
 *                   lc_cluster
 *   lc_reaper    -> lc_conn, lc_pubsub, lc_util
 *   lc_watchdog  -> lc_conn, lc_util
 *   lc_pubsub    -> lc_conn, lc_sentinel, lc_util
 *   lc_conn      -> lc_redlock, lc_sentinel, lc_cluster, lc_util
 *   lc_sentinel, lc_cluster -> lc_util
 *   lc_redlock, lc_mutex   -> lc_util
 *   lc_util, lc_pipe       -> nothing in lockcore
 * (lc_pipe.c formats the caller's commands; lc_conn.c's lc__trip sends them
 * with a lock command, reading the lc_pipe fields directly.)
 * No file uses a function of a file that uses one of its own: keep it so
 * (README.md, "Sources", has the command that checks it).
 */
#ifndef MIAOSHA_LC_INTERNAL_H
#define MIAOSHA_LC_INTERNAL_H

#include "lockcore.h"
#include "lc_cluster.h"
#include "lc_reaper.h"
#include "lc_sentinel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define LC_KEY_MAX 512

/* --- mutex mode (lc_mutex.c) ------------------------------------------- */
typedef struct lc_mutex_entry lc_mutex_entry;
typedef struct lc_mutex_table {
    pthread_mutex_t mu;
    lc_mutex_entry *buckets[64];
} lc_mutex_table;
void lc__mutex_table_init(lc_mutex_table *t);
void lc__mutex_table_destroy(lc_mutex_table *t);
/* LC_OK with *out set, LC_BUSY, LC_CANCELED, LC_NOMEM. */
lc_status lc__mutex_acquire(lc_mutex_table *t, const char *key, int64_t wait_ms,
                            const atomic_int *cancel, lc_mutex_entry **out);
void lc__mutex_release(lc_mutex_table *t, lc_mutex_entry *e);

/* --- hold table and watchdog (lc_watchdog.c) --------------------------- */
/* One entry per (key, field) this process holds in reentrant mode: the local
 * hold count (so reentry is recognised without a round trip) and, while a
 * watchdog-mode acquisition is among them, the renewal schedule. An entry
 * found lost is never reused: a new acquisition of the same (key, field)
 * gets a fresh entry. Every field is under lc_watchdog.mu (lost is also read
 * without it, by lc_guard_lost). */
typedef struct lc_hold {
    char *key;
    char *field;
    int holds;          /* local acquisitions not yet released */
    int watchdog_holds; /* of those, taken without an explicit lease: the
                           lock is renewed while this is > 0 and it is not
                           lost (Redisson renews while a watchdog-mode
                           acquisition is held, not while any is) */
    int releasing;      /* releases under way (begin_release .. drop);
                           == holds: the last is under way, not renewed */
    unsigned releases;  /* releases ever begun: a renewal that answered 0
                           while one overlapped it may have raced a DEL */
    int64_t next_renew_ms;
    bool renewing;   /* the watchdog thread is renewing it right now */
    bool unlinked;   /* holds reached 0 while renewing: thread frees it */
    atomic_int lost; /* the renew script returned 0 while held */
    struct lc_hold *next;
} lc_hold;

typedef struct lc_watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started, stop;
    int64_t sleeping_until; /* when the thread wakes next; INT64_MAX: idle */
    lc_hold *holds;
    redisContext *ctx;
    lc_conn *conn; /* with a cluster, instead of ctx: routed by key */
} lc_watchdog;

void lc__watchdog_init(lc_watchdog *w);
void lc__watchdog_shutdown(lc_client *c);
/* Does this process hold (key, field), not known to be lost? */
bool lc__hold_exists(lc_client *c, const char *key, const char *field);
/* Records one more local hold, a watchdog-mode one when watchdog is true
 * (then renewal starts, and the watchdog thread on first need). Returns
 * NULL when out of memory or the thread cannot start. */
lc_hold *lc__hold_add(lc_client *c, const char *key, const char *field, bool watchdog);
/* Called before every release script of a hold of h. While every local hold
 * is being released the watchdog does not renew the lock, and a renewal
 * that overlapped a release and answered 0 is not a loss (it may have run
 * right after the DEL). */
void lc__hold_begin_release(lc_client *c, lc_hold *h);
/* Ends the release begun by lc__hold_begin_release and drops that hold
 * (watchdog: it was a watchdog-mode one, as given to lc__hold_add); the
 * entry is freed (or left to the renewing thread) at zero holds. Returns
 * whether the lock had been reported lost. */
bool lc__hold_drop(lc_client *c, lc_hold *h, bool watchdog);

/* --- pub/sub wake-up (lc_pubsub.c) -------------------------------------- */
typedef struct lc_ps_waiter {
    pthread_cond_t cv;
    bool signaled;
    struct lc_ps_waiter *prev, *next;
} lc_ps_waiter;

typedef struct lc_ps_channel lc_ps_channel;

typedef struct lc_pubsub {
    pthread_mutex_t mu;
    pthread_cond_t subscribed_cv; /* broadcast on every SUBSCRIBE confirmation */
    pthread_t thread;
    bool started, stop;
    int wake_fd; /* eventfd: tells the thread to (un)subscribe */
    lc_ps_channel *channels;
    redisContext *ctx;
} lc_pubsub;

void lc__pubsub_init(lc_pubsub *p);
void lc__pubsub_shutdown(lc_client *c);
/* Has the first local waiter on channel been first in line for
 * barge_limit_ms or more? Then new arrivals queue instead of trying first
 * (see lc_lock.c). Any thread; takes the pub/sub mutex. */
bool lc__pubsub_head_starving(lc_client *c, const char *channel);
/* Queues w on channel (subscribing once per process) and waits until the
 * subscription is confirmed, deadline_ms passes, connect + command timeout
 * have passed (Redis down: the caller then falls back to PTTL waits) or
 * *cancel is set. Returns the channel, or NULL when memory, the eventfd or
 * the subscriber thread could not be had; *is_head tells whether w is first
 * in line. */
lc_ps_channel *lc__pubsub_join(lc_client *c, const char *channel, lc_ps_waiter *w,
                               int64_t deadline_ms, const atomic_int *cancel, bool *is_head);
/* Waits until w is signaled (a release message reached it), until_ms, or a
 * raised cancel flag. A head that is not starving yet ignores messages and
 * wakes at its starvation point instead. The caller tries after any return. */
void lc__pubsub_wait(lc_client *c, lc_ps_channel *ch, lc_ps_waiter *w, int64_t until_ms,
                     const atomic_int *cancel);
/* Leaves the queue (with or without the lock). The next waiter becomes
 * head and tries at its own starvation point. */
void lc__pubsub_leave(lc_client *c, lc_ps_channel *ch, lc_ps_waiter *w);
/* A thread of this process has just deleted the lock with the unlock script
 * (which also published): wakes the channel's head at once if it is
 * starving, rather than when the message comes back through the subscriber
 * thread. Any thread; takes the pub/sub mutex. */
void lc__pubsub_released(lc_client *c, const char *channel);

/* --- client (lc_client.c) ---------------------------------------------- */
struct lc_client {
    char host[256];
    int port;
    char password[256];
    int db;
    int connect_timeout_ms;
    int command_timeout_ms;
    int64_t watchdog_timeout_ms;
    int64_t retry_interval_ms;
    int64_t barge_limit_ms; /* see reentrant_acquire in lc_lock.c */
    char instance_id[LC_ID_LEN];
    int rl_n; /* redlock nodes; 0: the mode is not offered (lc_redlock.c) */
    int rl_port[LC_REDLOCK_MAX_NODES];
    char rl_host[LC_REDLOCK_MAX_NODES][256];
    int rl_node_timeout_ms;
    int64_t rl_restart_delay_ms;  /* 0: every answering node votes */
    atomic_uint_fast32_t rl_down; /* bit i: node i failed the last command
                                     sent to it (lc_stats.redlock_nodes_down) */

    atomic_uint_fast64_t acquired, busy, io_errors;
    atomic_uint_fast64_t renewals, renew_lost, holds_active;
    atomic_uint_fast64_t channels_subscribed, waiters;
    atomic_uint_fast64_t orphans_adopted, orphans_released, orphans_unresolved;

    lc_mutex_table mutexes;
    lc_watchdog wd;
    lc_pubsub ps;
    lc_reaper reaper;
    lc_sentinel sn; /* n == 0: host and port above are the master */
    lc_cluster cl;  /* on == 0: no cluster (lc_cluster.h) */
};

#endif
