/* lc_sentinel.h — where the master is, when a Sentinel says so
 * (lc_sentinel.c).
 *
 * With lc_options.sentinels set, every connection lockcore makes (the
 * caller's lc_conn, the watchdog's, the subscriber's, the reaper's) goes to
 * the address the Sentinels name for master_name, asked afresh at every
 * connect: a reconnect after an I/O error or a -READONLY reply therefore
 * follows a failover by itself. One watcher thread per client (started on
 * the first resolution) stays subscribed to +switch-master on every
 * Sentinel at once, the first announcement wins, so a connection to a
 * demoted master is dropped before its next command (lc__sentinel_stale)
 * even when its socket never broke — within milliseconds of the first
 * Sentinel that learnt of the switch, not when the one watched does (the
 * failover's leader announces last).
 *
 * Sentinels disagree for a while after a switch (each learns the new
 * configuration from the others' hello messages; the old master stays a
 * writable master until Sentinel demotes it, seconds later). So every
 * answer carries its configuration epoch (get-master-addr-by-name with
 * SENTINEL MASTER's config-epoch, one round trip), and an answer older
 * than what is known — the last answer, or an
 * announcement, which is newer than the epoch it replaced — is not taken:
 * a reconnect never goes back to the old master because the Sentinel it
 * asked first has not heard of the switch yet.
 */
#ifndef MIAOSHA_LC_SENTINEL_H
#define MIAOSHA_LC_SENTINEL_H

#include "lockcore.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define LC_SENTINEL_NAME_LEN 128

typedef struct lc_sentinel {
    int n; /* 0: plain redis_host:redis_port, nothing here is used */
    char host[LC_SENTINEL_MAX_NODES][256];
    int port[LC_SENTINEL_MAX_NODES];
    char master_name[LC_SENTINEL_NAME_LEN];
    int timeout_ms; /* per Sentinel, connect and reply */

    pthread_mutex_t mu; /* guards cur_*, epoch, started, stop */
    char cur_host[256]; /* "" until the first answer */
    int cur_port;
    int64_t epoch;                 /* the configuration epoch of cur_* (after an announcement:
                                      a lower bound, one above the epoch it replaced); -1
                                      unknown */
    atomic_uint_fast64_t switches; /* the master's address changed */
    pthread_t thread;
    bool started, stop;
} lc_sentinel;

/* Checks o's sentinel options and copies them into s (s->n stays 0 when
 * none). LC_OK, or LC_MISUSE with the reason in err (errlen bytes). */
lc_status lc__sentinel_setup(lc_sentinel *s, const lc_options *o, char *err, size_t errlen);

/* Stops the watcher thread (waits at most ~100 ms, plus one connect round
 * to the Sentinels it is not subscribed to) and destroys s. */
void lc__sentinel_shutdown(lc_sentinel *s);

/* Asks each Sentinel in turn (s->timeout_ms each) for the master and its
 * configuration epoch: the first answer not older than the known epoch
 * wins (or naming the master already known). When every
 * answer is older, the address last announced stands (every Sentinel but
 * the ones that announced lags behind); when all Sentinels answered older,
 * the newest of them wins (the group was rebuilt). 0 with host (256 bytes)
 * and *port set, or -1 with the reason (every Sentinel's, shortened) in err
 * (LC_ERRSTR_LEN bytes). Starts the watcher on first use. Any thread. */
int lc__sentinel_resolve(lc_sentinel *s, char *host, int *port, char *err);

/* Whether ctx is connected somewhere other than the master last announced
 * (a +switch-master since it connected). False without Sentinels. Any
 * thread. */
bool lc__sentinel_stale(lc_sentinel *s, const redisContext *ctx);

/* "host:port" of the master last resolved or announced into buf (len
 * bytes); "" when none yet. Any thread. */
void lc__sentinel_current(lc_sentinel *s, char *buf, size_t len);

#endif
