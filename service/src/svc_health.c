/* svc_health.c — the background Redis probe (see svc_health.h). */
#include "svc_health.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "svc_check.h"
#include "svc_clock.h"
#include "svc_log.h"
#include "svc_replicas.h"

static pthread_t thread;
static int started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int stop;
static _Atomic int status_up; /* what /healthz answers */
static lc_client *client;     /* the probe's own, with its short timeouts */
static lc_conn *conn;
static int fails_in_row;               /* probe thread only (and start, before it runs) */
static char last_error[LC_ERRSTR_LEN]; /* the last failed probe's reason, under mu */
/* A stopped Redis fails a probe every ~0.8 s: one line, then a summary. */
static svc_log_repeat warn_failed = SVC_LOG_REPEAT_INIT;
static svc_log_repeat warn_retried = SVC_LOG_REPEAT_INIT;
static svc_log_repeat warn_late = SVC_LOG_REPEAT_INIT;
/* Set before the thread starts, then the probe's own (start, then thread). */
static svc_health_task task_fn;
static void *task_arg;
/* svc_health_watch_redlock's client, and the masters' names (lo's). */
static lc_client *rl_watched;
static const char *const *rl_names;
static int rl_count;

void svc_health_watch_redlock(lc_client *workers)
{
    rl_watched = workers;
}

/* The lock masters down now, against the last look: one line per change
 * (a master that keeps failing is not logged again). Probe thread. */
static void watch_redlock(void)
{
    static uint32_t seen; /* the probe thread's own */
    if (rl_watched == NULL || rl_count == 0)
        return;
    lc_stats ls;
    lc_client_stats(rl_watched, &ls);
    uint32_t down = ls.redlock_nodes_down;
    if (down == seen)
        return;
    char names[600] = "";
    size_t used = 0;
    int n = 0;
    for (int i = 0; i < rl_count && i < 32; i++) {
        if (!(down & (1u << i)))
            continue;
        n++;
        used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0,
                                 "%s%s", used ? ", " : "", rl_names[i]);
        if (used >= sizeof names)
            used = sizeof names - 1;
    }
    if (down == 0)
        svc_log(SVC_INFO, "redlock: every lock master answers again");
    else
        svc_log(SVC_WARN, "redlock: %d of %d lock masters not answering (%s): %s", n, rl_count,
                names,
                n < rl_count / 2 + 1 ? "a majority still grants the lock"
                                     : "no majority: redlock purchases answer 503");
    seen = down;
}

void svc_health_when_up(svc_health_task fn, void *arg)
{
    task_fn = fn;
    task_arg = arg;
}

/* After a good probe: the task, until it is done. 1 when it is (or there
 * is none); 0 with its reason as the probe's last error, which /healthz
 * shows while the status stays down. */
static int run_task(void)
{
    char why[LC_ERRSTR_LEN] = "";
    if (task_fn == NULL)
        return 1;
    if (task_fn(conn, task_arg, why, sizeof why) == 0) {
        task_fn = NULL;
        return 1;
    }
    SVC_PT(pthread_mutex_lock(&mu));
    snprintf(last_error, sizeof last_error, "%s", why);
    SVC_PT(pthread_mutex_unlock(&mu));
    return 0;
}

/* "2024-05-01T12:00:00.000Z" for a wall-clock time in ms. */
static void wall_text(int64_t ms, char *buf, size_t len)
{
    struct tm tm;
    time_t sec = (time_t)(ms / 1000);
    gmtime_r(&sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
}

/* One probe: a PING, and on failure one more on a fresh connection
 * (lc_conn reconnects after any error), so one lost or late reply on one
 * connection is not a failed probe. Returns 1 when either answered. Each
 * probe is logged with its start time (the line itself is written when it
 * ends, up to 2 x SVC_HEALTH_TIMEOUT_MS later) and its timings: DEBUG when
 * fine, WARN when the retry was needed or both failed (a WARN that repeats
 * is written once, then summarised: svc_log_every). Those lines found
 * why /healthz used to turn 503 under a saturating load with nothing wrong
 * in the service: a starved redis-server (service/README.md, "GET
 * /healthz"). */
static int probe(void)
{
    char first[LC_ERRSTR_LEN] = "", at[32];
    int64_t wall = svc_wall_ms();
    int64_t t0 = lc_now_us();
    int ok = lc_conn_ping(conn) == LC_OK;
    int64_t t1 = lc_now_us();
    int retried = !ok;
    if (!ok) {
        snprintf(first, sizeof first, "%s", lc_conn_errstr(conn));
        ok = lc_conn_ping(conn) == LC_OK;
    }
    int64_t t2 = lc_now_us();
    wall_text(wall, at, sizeof at);
    SVC_PT(pthread_mutex_lock(&mu));
    snprintf(last_error, sizeof last_error, "%s", ok ? "" : lc_conn_errstr(conn));
    SVC_PT(pthread_mutex_unlock(&mu));
    if (ok && !retried)
        svc_log(SVC_DEBUG, "redis: probe at %s: PING %lld us", at, (long long)(t1 - t0));
    else if (ok)
        svc_log_every(&warn_retried, SVC_WARN,
                      "redis: probe at %s: PING failed after %lld ms (%s); a retry on a new "
                      "connection answered in %lld ms",
                      at, (long long)((t1 - t0) / 1000), first, (long long)((t2 - t1) / 1000));
    else
        svc_log_every(&warn_failed, SVC_WARN,
                      "redis: probe at %s failed (%d in a row): PING after %lld ms: %s; retry "
                      "after %lld ms: %s",
                      at, fails_in_row + 1, (long long)((t1 - t0) / 1000), first,
                      (long long)((t2 - t1) / 1000), lc_conn_errstr(conn));
    return ok;
}

/* Runs a probe and updates the status: down after SVC_HEALTH_DOWN_AFTER
 * failures in a row (at once when it has never been up), up with the
 * first success once the svc_health_when_up task is done. */
static void probe_and_update(void)
{
    static char master[300]; /* the probe thread's own */
    char now[300];
    lc_client_master(client, now, sizeof now);
    if (now[0] && strcmp(now, master) != 0) {
        if (master[0])
            svc_log(SVC_WARN, "redis: the master is now %s (was %s)", now, master);
        snprintf(master, sizeof master, "%s", now);
    }
    int up = atomic_load(&status_up);
    if (probe()) {
        if (fails_in_row > 0)
            svc_log_every_end(&warn_failed, SVC_WARN, "redis: probes failed");
        fails_in_row = 0;
        if (run_task() && !up) {
            atomic_store(&status_up, 1);
            svc_log(SVC_INFO, "redis: up");
        }
        svc_replicas_refresh(conn, master, SVC_HEALTH_TIMEOUT_MS);
    } else if (++fails_in_row >= SVC_HEALTH_DOWN_AFTER && up) {
        atomic_store(&status_up, 0);
        svc_log(SVC_WARN, "redis: down (%d failed probes in a row)", fails_in_row);
    }
    watch_redlock();
}

static void *health_main(void *arg)
{
    (void)arg;
    SVC_PT(pthread_mutex_lock(&mu));
    while (!stop) {
        struct timespec ts;
        SVC_PT(pthread_mutex_unlock(&mu));
        probe_and_update();
        /* lc_now_us is CLOCK_MONOTONIC, the condition variable's clock */
        int64_t due_us = lc_now_us() + SVC_HEALTH_PERIOD_MS * 1000;
        ts.tv_sec = (time_t)(due_us / 1000000);
        ts.tv_nsec = (long)(due_us % 1000000) * 1000;
        SVC_PT(pthread_mutex_lock(&mu));
        int rc = 0;
        while (!stop && rc != ETIMEDOUT) {
            rc = pthread_cond_timedwait(&cv, &mu, &ts);
            SVC_ASSERT(rc == 0 || rc == ETIMEDOUT);
        }
        /* A late probe no longer turns /healthz 503, but it delays seeing
         * a real failure: say so. */
        int64_t late_ms = (lc_now_us() - due_us) / 1000;
        if (!stop && late_ms >= SVC_HEALTH_PERIOD_MS * 2)
            svc_log_every(&warn_late, SVC_WARN,
                          "redis: the probe thread woke %lld ms late (CPU starved?)",
                          (long long)late_ms);
    }
    SVC_PT(pthread_mutex_unlock(&mu));
    return NULL;
}

/* redis.cluster_nodes is set: svc_health_master names the probe's map */
static atomic_bool on_cluster;

int svc_health_start(const cfg_config *s, const lc_options *lo)
{
    atomic_store(&on_cluster, s->redis.cluster_nodes[0] != '\0');
    rl_names = lo->redlock_nodes;
    rl_count = lo->redlock_node_count;
    pthread_condattr_t ca;
    lc_options o = *lo;
    char err[LC_ERRSTR_LEN];
    if (o.connect_timeout_ms > SVC_HEALTH_TIMEOUT_MS)
        o.connect_timeout_ms = SVC_HEALTH_TIMEOUT_MS;
    if (o.command_timeout_ms > SVC_HEALTH_TIMEOUT_MS)
        o.command_timeout_ms = SVC_HEALTH_TIMEOUT_MS;
    /* On a cluster every probe takes the map afresh (one CLUSTER NODES):
     * a slot left without a master turns /healthz 503 at the next probe,
     * not at the workers' next periodic refresh. */
    if (o.cluster_node_count > 0)
        o.cluster_refresh_ms = SVC_HEALTH_CLUSTER_REFRESH_MS;
    if (lc_client_new(&o, &client, err, sizeof err) != LC_OK)
        return -1;
    if (lc_conn_new(client, &conn) != LC_OK) {
        lc_client_free(client);
        client = NULL;
        return -1;
    }
    SVC_PT(pthread_condattr_init(&ca));
    SVC_PT(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    SVC_PT(pthread_cond_init(&cv, &ca));
    SVC_PT(pthread_condattr_destroy(&ca));
    /* A failure is logged; the service starts anyway and answers 503 until
     * Redis is up (the first probe sets the status either way). */
    svc_replicas_setup(s, lo);
    int ok = probe();
    fails_in_row = ok ? 0 : SVC_HEALTH_DOWN_AFTER;
    if (ok) {
        char master[300];
        lc_client_master(client, master, sizeof master);
        svc_replicas_refresh(conn, master, SVC_HEALTH_TIMEOUT_MS);
    }
    int ready = ok && run_task();
    atomic_store(&status_up, ready);
    if (!ok)
        svc_log(SVC_WARN, "redis: down (the first probe failed)");
    if (pthread_create(&thread, NULL, health_main, NULL) != 0) {
        lc_conn_free(conn);
        conn = NULL;
        lc_client_free(client);
        client = NULL;
        return -1;
    }
    started = 1;
    return 0;
}

void svc_health_reason(char *buf, size_t len)
{
    SVC_PT(pthread_mutex_lock(&mu));
    snprintf(buf, len, "%s", last_error);
    SVC_PT(pthread_mutex_unlock(&mu));
}

lc_client *svc_health_client(void)
{
    return client;
}

void svc_health_master(lc_client *workers, char *buf, size_t len)
{
    lc_client *c = atomic_load_explicit(&on_cluster, memory_order_relaxed) && client != NULL
                       ? client
                       : workers;
    if (c != NULL)
        lc_client_master(c, buf, len);
    else if (len > 0)
        buf[0] = '\0';
    /* The workers' client learns a Sentinel master with its first
     * connection, which comes with the first request: until then the
     * probe's names it (the same Sentinels, already asked). */
    if (len > 0 && buf[0] == '\0' && c != client && client != NULL)
        lc_client_master(client, buf, len);
}

int svc_health_up(void)
{
    return atomic_load_explicit(&status_up, memory_order_relaxed);
}

void svc_health_stop(void)
{
    if (!started)
        return;
    SVC_PT(pthread_mutex_lock(&mu));
    stop = 1;
    SVC_PT(pthread_cond_signal(&cv));
    SVC_PT(pthread_mutex_unlock(&mu));
    SVC_PT(pthread_join(thread, NULL));
    atomic_store(&status_up, 0);
    svc_replicas_stop();
    lc_conn_free(conn);
    conn = NULL;
    lc_client_free(client);
    client = NULL;
    started = 0;
}
