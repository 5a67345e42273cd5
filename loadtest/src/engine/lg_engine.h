/* lg_engine.h — the load generator's HTTP/1.1 client: epoll, non-blocking
 * sockets, keep-alive, one to a few threads, a barrier start.
 *
 * How a load runs:
 *   1. each thread opens its share of the `concurrency` connections
 *      (connection j goes to target j % ntargets: round-robin, like a
 *      balancer that pins a keep-alive connection to one backend) and waits
 *      until every one is connected (or failed, or connect_timeout_ms);
 *   2. all threads meet at a barrier, then every connection sends its first
 *      request at once: the burst really is concurrent;
 *   3. each response is parsed (lg_http) and the connection immediately
 *      sends the next request (keep-alive; no pipelining), until the request
 *      count is reached, the duration ends, or *stop becomes non-zero.
 * Request indices are claimed from one shared atomic counter, so every
 * index in [0, requests) is sent at most once. A request is never retried:
 * purchases are not idempotent. A connection the server closed is reopened
 * for the next request; a failed connect after the start consumes one
 * request (counted as a connect error), then waits 50 ms, as a balancer
 * without health checks would.
 *
 * Hot path: no allocation (buffers are allocated per connection before the
 * start; a receive buffer grows only for a response larger than 8 KiB), one
 * clock read per request and per response.
 */
#ifndef MIAOSHA_LG_ENGINE_H
#define MIAOSHA_LG_ENGINE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "lg_hist.h"
#include "lg_http.h"

typedef enum lg_err {
    LG_ERR_NONE = 0,
    LG_ERR_CONNECT, /* connect refused / failed / timed out */
    LG_ERR_CLOSED,  /* the peer closed or reset before the whole response */
    LG_ERR_PARSE,   /* not a valid HTTP response */
    LG_ERR_TIMEOUT, /* still in flight at the deadline */
    LG_ERR_IO,      /* another socket error */
    LG_ERR_COUNT
} lg_err;

/* "none", "connect", "closed", "parse", "timeout", "io". */
const char *lg_err_name(lg_err e);

/* Returns the request bytes for request idx on a connection to target
 * `target`: either written into buf (cap bytes) or a pointer to a prebuilt
 * buffer that outlives the load. *len receives the length; NULL = cannot
 * build (the request is counted as an io error). Called from the engine's
 * threads (concurrently for distinct idx). */
typedef const char *(*lg_build_fn)(void *ud, uint64_t idx, int target, char *buf, size_t cap,
                                   size_t *len);

/* Called once per claimed request when it ends: with an HTTP status and the
 * body (err == LG_ERR_NONE) or with status 0 and an error — a request still
 * in flight when the deadline passes or *stop is raised ends as
 * LG_ERR_TIMEOUT; in a bench (requests 0) it ends uncounted and without a
 * call, as the duration bounds the load. Concurrently for
 * distinct idx, from the engine's threads. body is not NUL-terminated and is
 * valid only during the call. */
typedef void (*lg_done_fn)(void *ud, uint64_t idx, int status, lg_err err, const char *body,
                           size_t blen, uint64_t latency_us);

/* Called on the calling thread about every 200 ms while the load runs. */
typedef void (*lg_progress_fn)(void *ud, uint64_t done, uint64_t total, double elapsed_s);

typedef struct lg_engine_cfg {
    const lg_url *targets;
    int ntargets;
    int concurrency;            /* connections, >= 1 */
    int threads;                /* 0 = min(2, online CPUs, concurrency) */
    uint64_t requests;          /* 0 = unbounded: stop after duration_ms */
    int64_t duration_ms;        /* > 0: hard end of the load (the deadline) */
    int64_t connect_timeout_ms; /* 0 = 2000 */
    lg_build_fn build;
    void *build_ud;
    lg_done_fn done; /* may be NULL */
    void *done_ud;
    lg_progress_fn progress; /* may be NULL */
    void *progress_ud;
    volatile sig_atomic_t *stop; /* may be NULL; non-zero ends the load */
} lg_engine_cfg;

typedef struct lg_engine_result {
    uint64_t claimed;              /* requests sent (or failed to connect) */
    uint64_t completed;            /* with an HTTP status */
    uint64_t errors[LG_ERR_COUNT]; /* by kind; timeout = in flight at the end */
    uint64_t status[600];          /* completed responses by status code */
    uint64_t reconnects;           /* connections reopened after a close */
    int deadline_hit;              /* duration ended before the request count */
    int stopped;                   /* *stop ended it */
    double elapsed_s;              /* from the barrier to the last response */
    lg_hist hist;                  /* latency of completed responses, us */
} lg_engine_result;

/* Runs one load. Returns 0 (the result is filled, whatever the servers
 * answered) or -1 when the load could not run at all (bad config, no
 * memory, thread creation), with a reason in err. */
int lg_engine_run(const lg_engine_cfg *cfg, lg_engine_result *res, char *err, size_t errlen);

#endif
