/* svc_shutdown.c — see svc_shutdown.h. */
#include "svc_shutdown.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "svc_check.h"
#include "svc_clock.h"

static atomic_int stopping;   /* step 1 */
static atomic_int abort_flag; /* step 2 */

/* The sleep's condition variable waits on CLOCK_MONOTONIC (a wall clock
 * step must not shorten or stretch work_ms); such a condition variable
 * cannot be initialized statically, hence the once. */
static pthread_once_t abort_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t abort_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t abort_cv;

static void abort_cv_init(void)
{
    pthread_condattr_t ca;
    SVC_PT(pthread_condattr_init(&ca));
    SVC_PT(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    SVC_PT(pthread_cond_init(&abort_cv, &ca));
    SVC_PT(pthread_condattr_destroy(&ca));
}

void svc_shutdown_begin(void)
{
    atomic_store(&stopping, 1);
}

int svc_shutting_down(void)
{
    return atomic_load(&stopping);
}

const atomic_int *svc_cancel_flag(void)
{
    return &stopping;
}

void svc_shutdown_abort_work(void)
{
    SVC_PT(pthread_once(&abort_once, abort_cv_init));
    SVC_PT(pthread_mutex_lock(&abort_mu));
    atomic_store(&abort_flag, 1);
    SVC_PT(pthread_cond_broadcast(&abort_cv));
    SVC_PT(pthread_mutex_unlock(&abort_mu));
}

int svc_abort_work(void)
{
    return atomic_load(&abort_flag);
}

int svc_sleep_work(int64_t ms)
{
    struct timespec ts;
    int aborted, rc = 0;
    SVC_PT(pthread_once(&abort_once, abort_cv_init));
    /* lc_now_us is CLOCK_MONOTONIC, the condition variable's clock */
    int64_t due_us = lc_now_us() + ms * 1000;
    ts.tv_sec = (time_t)(due_us / 1000000);
    ts.tv_nsec = (long)(due_us % 1000000) * 1000;
    SVC_PT(pthread_mutex_lock(&abort_mu));
    while (!atomic_load(&abort_flag) && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&abort_cv, &abort_mu, &ts);
        SVC_ASSERT(rc == 0 || rc == ETIMEDOUT);
    }
    aborted = atomic_load(&abort_flag);
    SVC_PT(pthread_mutex_unlock(&abort_mu));
    return aborted ? -1 : 0;
}
