/* svc_pool.c — worker threads for requests that talk to Redis (see
 * svc_pool.h). */
#include "svc_pool.h"

#include "svc_check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct svc_pool {
    lc_client *client;
    const char *name;
    svc_pool_done_fn done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    svc_req *head, *tail;
    int stop;
    int idle;     /* workers waiting in take */
    int batching; /* workers running a batch */
    int max_batching;
    int nthreads;
    long capacity;     /* nthreads running + max_queue waiting */
    _Atomic long busy; /* reserved, queued or running */
    pthread_t *threads;
};

/* The batch the calling worker runs (svc_pool_batch_waits): its pool while
 * it counts in p->batching, else NULL. */
static _Thread_local svc_pool *batch_pool;

/* Takes the queue's head: waiting for one when wait (NULL once stop is
 * requested and the queue is drained), else NULL when there is none. */
static svc_req *take(svc_pool *p, int wait)
{
    SVC_PT(pthread_mutex_lock(&p->mu));
    while (wait && p->head == NULL && !p->stop) {
        p->idle++;
        SVC_PT(pthread_cond_wait(&p->cv, &p->mu));
        p->idle--;
    }
    svc_req *r = p->head;
    if (r != NULL) {
        p->head = r->next;
        if (p->head == NULL)
            p->tail = NULL;
    }
    SVC_PT(pthread_mutex_unlock(&p->mu));
    if (r != NULL)
        r->next = NULL;
    return r;
}

/* Adds to rs (holding r, taken) the requests queued right behind it with
 * r's batch function, up to SVC_POOL_BATCH_MAX in all; returns how many rs
 * holds, and counts the worker as running a batch until batch_done. Never
 * waits. */
static int take_batch(svc_pool *p, svc_req *r, svc_req **rs)
{
    int n = 0;
    rs[n++] = r;
    SVC_PT(pthread_mutex_lock(&p->mu));
    p->batching++;
    batch_pool = p;
    while (n < SVC_POOL_BATCH_MAX && p->head != NULL && p->head->batch == r->batch) {
        svc_req *q = p->head;
        p->head = q->next;
        if (p->head == NULL)
            p->tail = NULL;
        q->next = NULL;
        rs[n++] = q;
    }
    SVC_PT(pthread_mutex_unlock(&p->mu));
    return n;
}

static void batch_done(svc_pool *p)
{
    if (batch_pool == NULL)
        return; /* svc_pool_batch_waits has counted it out */
    batch_pool = NULL;
    SVC_PT(pthread_mutex_lock(&p->mu));
    p->batching--;
    SVC_PT(pthread_mutex_unlock(&p->mu));
}

void svc_pool_batch_waits(void)
{
    svc_pool *p = batch_pool;
    if (p == NULL)
        return;
    batch_pool = NULL;
    SVC_PT(pthread_mutex_lock(&p->mu));
    p->batching--;
    /* What was queued while this worker counted woke nobody: one idle
     * worker takes it now rather than after this wait. */
    int wake = p->head != NULL && p->idle > 0;
    SVC_PT(pthread_mutex_unlock(&p->mu));
    if (wake)
        SVC_PT(pthread_cond_signal(&p->cv));
}

/* Gives back r's place and hands r to done. */
static void done_one(svc_pool *p, svc_req *r)
{
    long before = atomic_fetch_sub(&p->busy, 1);
    SVC_ASSERT(before > 0);
    p->done(r);
}

static void *worker_main(void *arg)
{
    svc_pool *p = arg;
    lc_conn *conn = NULL;
    if (lc_conn_new(p->client, &conn) != LC_OK)
        conn = NULL; /* jobs then answer 503 */
    svc_req *r = take(p, 1);
    if (r != NULL && r->begin != NULL)
        r->begin(r, conn);
    while (r != NULL) {
        if (r->batch != NULL) {
            svc_req *rs[SVC_POOL_BATCH_MAX];
            int n = take_batch(p, r, rs);
            r->batch(rs, n, conn);
            for (int i = 0; i < n; i++)
                done_one(p, rs[i]);
            batch_done(p); /* then straight back to the queue: see submit */
            r = take(p, 1);
            if (r != NULL && r->begin != NULL)
                r->begin(r, conn);
            continue;
        }
        r->job(r, conn);
        /* The next request begins before this one is answered and resumed
         * (svc_pool.h): its first Redis command is then on its way while
         * the reply is built and the HTTP thread woken. */
        svc_req *next = take(p, 0);
        if (next != NULL && next->begin != NULL)
            next->begin(next, conn);
        if (r->finish != NULL)
            r->finish(r, conn);
        done_one(p, r);
        if (next == NULL) {
            next = take(p, 1);
            if (next != NULL && next->begin != NULL)
                next->begin(next, conn);
        }
        r = next;
    }
    lc_conn_free(conn);
    return NULL;
}

svc_pool *svc_pool_new(lc_client *c, int nthreads, int max_queue, int max_batches, const char *name,
                       svc_pool_done_fn done, char *err, size_t errlen)
{
    svc_pool *p = calloc(1, sizeof *p);
    pthread_attr_t attr;
    if (p == NULL || nthreads < 1 || max_queue < 0 || max_batches < 0 || done == NULL) {
        snprintf(err, errlen, "%s pool: bad size or out of memory", name);
        free(p);
        return NULL;
    }
    p->client = c;
    p->name = name;
    p->done = done;
    p->capacity = (long)nthreads + max_queue;
    /* By default one per CPU: a batch keeps its worker busy on the CPU but
     * for one round trip, so more batching workers than CPUs would only
     * split the queue into smaller batches (svc_pool.h). */
    long n = max_batches;
    if (n == 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1)
            n = 1;
    }
    p->max_batching = n > nthreads ? nthreads : (int)n;
    p->threads = calloc((size_t)nthreads, sizeof *p->threads);
    if (p->threads == NULL) {
        snprintf(err, errlen, "%s pool: out of memory", name);
        free(p);
        return NULL;
    }
    SVC_PT(pthread_mutex_init(&p->mu, NULL));
    SVC_PT(pthread_cond_init(&p->cv, NULL));
    SVC_PT(pthread_attr_init(&attr));
    SVC_PT(pthread_attr_setstacksize(&attr, 512 * 1024));
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&p->threads[i], &attr, worker_main, p) != 0) {
            snprintf(err, errlen, "%s pool: cannot start thread %d", name, i);
            SVC_PT(pthread_attr_destroy(&attr));
            svc_pool_free(p);
            return NULL;
        }
        p->nthreads = i + 1;
    }
    SVC_PT(pthread_attr_destroy(&attr));
    return p;
}

int svc_pool_reserve(svc_pool *p)
{
    long n = atomic_load(&p->busy);
    do {
        if (n >= p->capacity)
            return -1;
    } while (!atomic_compare_exchange_weak(&p->busy, &n, n + 1));
    return 0;
}

void svc_pool_submit(svc_pool *p, svc_req *r)
{
    SVC_ASSERT(atomic_load(&p->busy) > 0); /* the place svc_pool_reserve took */
    r->next = NULL;
    SVC_PT(pthread_mutex_lock(&p->mu));
    if (p->tail != NULL)
        p->tail->next = r;
    else
        p->head = r;
    p->tail = r;
    /* Wake a worker only when one waits, and after the unlock, so that it
     * does not wake only to block on the mutex this thread still holds.
     * A request that can join a batch wakes nobody while max_batching
     * workers run batches: each of them takes the queue's head as soon as
     * its batch is answered, so r waits at most one batch's round trip and
     * then goes with the others queued meanwhile, instead of waking one
     * more thread to make a round trip of its own (svc_pool.h). */
    int wake = p->idle > 0 && (r->batch == NULL || p->batching < p->max_batching);
    SVC_PT(pthread_mutex_unlock(&p->mu));
    if (wake)
        SVC_PT(pthread_cond_signal(&p->cv));
}

void svc_pool_free(svc_pool *p)
{
    if (p == NULL)
        return;
    SVC_PT(pthread_mutex_lock(&p->mu));
    p->stop = 1;
    SVC_PT(pthread_cond_broadcast(&p->cv));
    SVC_PT(pthread_mutex_unlock(&p->mu));
    for (int i = 0; i < p->nthreads; i++)
        SVC_PT(pthread_join(p->threads[i], NULL));
    SVC_PT(pthread_mutex_destroy(&p->mu));
    SVC_PT(pthread_cond_destroy(&p->cv));
    free(p->threads);
    free(p);
}
