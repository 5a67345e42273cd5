/* svc_pool.h — a fixed pool of worker threads, each owning one lc_conn (a
 * hiredis context is not thread-safe, so a connection never changes hands).
 * Requests are queued FIFO; a worker runs r->job(r, conn) and then hands r
 * to the pool's completion callback (the daemon's: it resumes the request's
 * HTTP connection). The pool knows nothing of HTTP. The queue is bounded:
 * nthreads + max_queue places, one per request reserved, queued or
 * running (a batch of k requests holds k); svc_pool_reserve refuses the
 * next one.
 *
 * A job may come in parts, so that a worker's next request can start
 * while the one before is still being answered: r->begin (NULL: none) runs
 * first, as soon as a worker has taken r; r->job then; and r->finish (NULL
 * unless the job set it) after the worker has taken its next queued
 * request, if there was one, and run that one's begin — then the
 * completion callback. So a purchase sends its lock's acquire (begin)
 * before the worker builds the reply of the purchase before and resumes
 * its connection (finish, done), and the time between one release and the
 * next acquire shrinks by that work. finish must not use conn: the next
 * begin may have left a command's replies in flight on it.
 *
 * A request may instead be one of a batch: when r->batch is set, the worker
 * takes r together with the requests queued right behind it that have the
 * same batch function, up to SVC_POOL_BATCH_MAX, and runs batch once for
 * all of them (the lua purchase sends their scripts in one write and reads
 * every reply in one round trip), then done for each, in queue order. The
 * queue's order is kept: a batch is a run of consecutive requests. Under
 * light load the queue holds one request and the batch is that one; under
 * a burst the requests that would have waited for a worker go together, so
 * Redis and this process pay one write, one read and one wake-up for all of
 * them instead of one each. So that batches form, a request that can join
 * one wakes no idle worker while max_batches workers (svc_pool_new; by
 * default as many as the machine has CPUs) already run batches: one of
 * those takes it, with the requests queued behind it, as soon as its own
 * batch is answered — within one batch's round trip. (A worker counts once
 * it takes its batch, not when it is woken, so two wakes close together
 * may start one batch more than max_batches.) A batch that must then wait
 * for something slower than its round trip (WAIT for replicas, up to
 * redis.wait_timeout_ms) says so (svc_pool_batch_waits) and stops
 * counting, so the queue does not wait for it while workers sleep.
 * Requests without a batch wake a worker as before. */
#ifndef MIAOSHA_SVC_POOL_H
#define MIAOSHA_SVC_POOL_H

#include "svc_reply.h"

typedef struct svc_pool svc_pool;

/* Requests run by one call of a batch function at most (at most one Redis
 * pipe's worth of commands: LC_PIPE_MAX). */
#define SVC_POOL_BATCH_MAX 16

/* Called on the worker thread once r->job (and r->finish, if the job left
 * one) has returned — for a request of a batch, once r->batch has
 * returned for the whole batch — with the pool's place already given back
 * (a svc_pool_reserve may take it). From then on the pool does not touch
 * r. */
typedef void (*svc_pool_done_fn)(svc_req *r);

/* Starts nthreads workers with room for max_queue waiting jobs, each with
 * its own lc_conn of c; done finishes every job (never NULL). max_batches:
 * how many workers may run a batch at once before a request that can join
 * one stops waking idle workers (above); 0 = one per CPU; either way at
 * most nthreads. Fewer make bigger batches — Redis pays less a request —
 * and more spread the batches' own work over more threads
 * (server.lua_batches, service/README.md). name (for messages) is kept,
 * not copied: it must outlive the pool. Returns the pool, freed with
 * svc_pool_free, or NULL on failure (reason in err, errlen bytes). Main
 * thread. */
svc_pool *svc_pool_new(lc_client *c, int nthreads, int max_queue, int max_batches, const char *name,
                       svc_pool_done_fn done, char *err, size_t errlen);
/* Takes a place for one job: 0, or -1 when nthreads jobs run and max_queue
 * wait already (the caller answers 503 overloaded). Every 0 must be followed
 * by exactly one svc_pool_submit. Any thread, lock-free. */
int svc_pool_reserve(svc_pool *p);
/* Queues r into the place reserved for it; a worker will run r->begin (if
 * set), r->job, r->finish (if the job left one; after the next request's
 * begin) and then the pool's done(r) — or, when r->batch is set, r->batch
 * for r and the requests queued behind it with the same batch, then done
 * for each. The pool uses r until that resume; the caller
 * must not touch it meanwhile. Any thread (the HTTP threads call it). */
void svc_pool_submit(svc_pool *p, svc_req *r);
/* Called by a batch function (r->batch) on its worker when what is left of
 * its batch is a wait longer than a round trip (WAIT for replicas): the
 * worker stops counting as one that runs a batch, and one idle worker is
 * woken if requests are queued, so that batchable requests do not wait for
 * it (the wake policy of svc_pool_submit). Does nothing when called twice
 * in one batch, or on a thread that runs no batch. The worker thread. */
void svc_pool_batch_waits(void);
/* Lets the workers finish the queue, joins them, frees their connections
 * and p (NULL: nothing). Main thread, after the last svc_pool_submit. */
void svc_pool_free(svc_pool *p);

#endif
