/* svc_health.c — the background Redis probe (see svc_health.h). */
#include "svc_health.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static pthread_t thread;
static int started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;
static int stop;
static _Atomic int64_t last_ok_us = -1; /* monotonic time of the last good PING */
static lc_conn *conn;
static int init_up;

static int probe(int was_up)
{
    int ok = lc_conn_ping(conn) == LC_OK;
    if (ok)
        atomic_store(&last_ok_us, svc_now_us());
    if (ok && !was_up)
        svc_log(SVC_INFO, "redis: up");
    else if (!ok && was_up)
        svc_log(SVC_WARN, "redis: down (%s)", lc_conn_errstr(conn));
    return ok;
}

static void *health_main(void *arg)
{
    int up = init_up;
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!stop) {
        struct timespec ts;
        pthread_mutex_unlock(&mu);
        up = probe(up);
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += SVC_HEALTH_PERIOD_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&mu);
        while (!stop && pthread_cond_timedwait(&cv, &mu, &ts) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

int svc_health_start(lc_client *c)
{
    pthread_condattr_t ca;
    if (lc_conn_new(c, &conn) != LC_OK)
        return -1;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_condattr_destroy(&ca);
    /* A failure is logged; the service starts anyway and answers 503 until
     * Redis is up. */
    init_up = probe(1);
    if (pthread_create(&thread, NULL, health_main, NULL) != 0) {
        lc_conn_free(conn);
        conn = NULL;
        return -1;
    }
    started = 1;
    return 0;
}

int svc_health_up(void)
{
    int64_t t = atomic_load_explicit(&last_ok_us, memory_order_relaxed);
    return t >= 0 && svc_now_us() - t < SVC_HEALTH_STALE_MS * 1000;
}

void svc_health_stop(void)
{
    if (!started)
        return;
    pthread_mutex_lock(&mu);
    stop = 1;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(thread, NULL);
    lc_conn_free(conn);
    conn = NULL;
    started = 0;
}
