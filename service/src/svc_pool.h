/* svc_pool.h — a fixed pool of worker threads, each owning one lc_conn (a
 * hiredis context is not thread-safe, so a connection never changes hands).
 * Requests are queued FIFO; a worker runs r->job(r, conn) and then resumes
 * the request's HTTP connection. The queue is bounded: at most nthreads
 * jobs run and max_queue wait; svc_pool_reserve refuses the next one. */
#ifndef MIAOSHA_SVC_POOL_H
#define MIAOSHA_SVC_POOL_H

#include "svc_http.h"

typedef struct svc_pool svc_pool;

/* Starts nthreads workers with room for max_queue waiting jobs, each with
 * its own lc_conn of c. name (for messages) is kept, not copied: it must
 * outlive the pool. Returns the pool, freed with svc_pool_free, or NULL on
 * failure (reason in err, errlen bytes). Main thread. */
svc_pool *svc_pool_new(lc_client *c, int nthreads, int max_queue, const char *name, char *err,
                       size_t errlen);
/* Takes a place for one job: 0, or -1 when nthreads jobs run and max_queue
 * wait already (the caller answers 503 overloaded). Every 0 must be followed
 * by exactly one svc_pool_submit. Any thread, lock-free. */
int svc_pool_reserve(svc_pool *p);
/* Queues r into the place reserved for it; a worker will run r->job and
 * then svc_http_resume(r). The pool uses r until that resume; the caller
 * must not touch it meanwhile. Any thread (the HTTP threads call it). */
void svc_pool_submit(svc_pool *p, svc_req *r);
/* Jobs queued or running now. */
long svc_pool_busy(svc_pool *p);
/* Lets the workers finish the queue, joins them, frees their connections. */
void svc_pool_free(svc_pool *p);

#endif
