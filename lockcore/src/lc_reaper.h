/* lc_reaper.h — the orphan-lock cleanup (lc_reaper.c): a timed-out acquire
 * or release of the token, fenced and reentrant modes is not cancelled by the
 * timeout. Redis still runs the command once it reads it (after a pause, a
 * slow fork, a stalled network), and a lock granted that way belongs to
 * nobody: before this cleanup it blocked every buyer until its lease ran
 * out (30 s for reentrant). The reaper takes over the timed-out connection
 * and undoes what the stalled command does, on that same connection.
 *
 * lockcore/README.md ("Orphan cleanup") states what it guarantees and its
 * limits; lc_reaper.c explains the order argument.
 */
#ifndef MIAOSHA_LC_REAPER_H
#define MIAOSHA_LC_REAPER_H

#include "lockcore.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct lc_orphan lc_orphan;

/* One per client (in lc_client), started on the first adoption. Every field
 * under mu, except the orphans the thread has taken (its own list). */
typedef struct lc_reaper {
    pthread_mutex_t mu;
    pthread_t thread;
    bool started, stop;
    int wake_fd; /* eventfd: a new orphan, or stop */
    int held;    /* orphans adopted and not freed yet (<= LC_REAPER_MAX) */
    lc_orphan *incoming;
} lc_reaper;

/* At most this many connections are held at once: a Redis paused for long
 * under load would otherwise collect one socket per timed-out request for
 * up to 60 s each, and run the process out of file descriptors. Beyond it
 * a timed-out command is left to its lease (counted unresolved). */
#define LC_REAPER_MAX 256

/* The lock command that timed out, as lc_lock.c sent it. */
typedef struct lc_orphan_cmd {
    lc_mode mode; /* token, fenced or reentrant; other modes are ignored */
    bool release; /* false: an acquire (SET NX PX / acquire script);
                     true: a release (compare-and-delete / unlock) */
    const char *key;
    const char *owner;  /* the token, or the reentrant hash field */
    int64_t lease_ms;   /* the lease the command set (reentrant: the one
                           its unlock script re-applies) */
    int replies_before; /* unread replies queued ahead of the lock
                           command on the connection (pipelined caller
                           commands); 0 normally */
    int replies_after;  /* unread replies queued after it; 0 normally */
} lc_orphan_cmd;

void lc__reaper_init(lc_reaper *r);
/* Stops the thread (at once: it waits for no reply) and closes every
 * connection it still held; what their commands may still do is left to
 * the lease. Counted in orphans_unresolved. */
void lc__reaper_shutdown(lc_client *c);

/* Called by the thread that owns conn right after a lock command on it
 * failed with LC_IO. When the failure left the command possibly in flight
 * (the connection's context has an I/O error or EOF: a timeout, a reset),
 * takes conn's hiredis context (conn->ctx becomes NULL, so conn reconnects
 * on its next use) and hands it to the reaper thread. Does nothing for
 * modes other than token, fenced and reentrant, when no context was connected, or
 * when Redis answered (an error reply: the command did not run). When
 * memory or the thread cannot be had, or LC_REAPER_MAX connections are
 * held already, it does nothing either (counted unresolved): the context
 * stays with conn (freed on its next use) and the lease ends the orphan,
 * as before the cleanup existed. Never blocks on Redis. */
void lc__reaper_adopt(lc_conn *conn, const lc_orphan_cmd *cmd);

#endif
