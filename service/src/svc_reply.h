/* svc_reply.h — one HTTP request's state (svc_req) and the helpers that
 * store its reply. Shared by the daemon (svc_http.c), the worker pool and
 * the route jobs (svc_purchase.c, svc_stock.c); it depends on none of them.
 *
 * The reply helpers only store: the daemon queues the stored reply to
 * libmicrohttpd. Each may be called by the one thread that owns r at the
 * time (an HTTP thread, or the worker running r's job). */
#ifndef MIAOSHA_SVC_REPLY_H
#define MIAOSHA_SVC_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "svc.h"
#include "svc_mode.h"
#include "svc_params.h"

/* An Idempotency-Key header: 1..64 bytes of [A-Za-z0-9_:.-]. */
#define SVC_IDEM_KEY_MAX 64

typedef struct svc_req svc_req;
/* A route's work on a worker thread: fills r's reply through the helpers
 * below. conn is the worker's own connection, NULL when it could not be
 * made (the job then answers 503). */
typedef void (*svc_job_fn)(svc_req *r, lc_conn *conn);
/* The same for n requests at once (svc_pool.h): fills each one's reply. */
typedef void (*svc_batch_fn)(svc_req **rs, int n, lc_conn *conn);

/* One HTTP request. Created by the URI log callback (so even a request that
 * never reaches the access handler has one), handed to MHD as con_cls and
 * freed by the request-completed callback. While the connection is suspended
 * it belongs to the one worker that runs its job; the worker fills the reply
 * fields, then resumes the connection (MHD's lock orders those writes before
 * the MHD thread's read). */
struct svc_req {
    struct MHD_Connection *conn;
    const cfg_config *s; /* the settings it runs under (read-only) */
    svc_req *next;       /* worker-pool queue link */
    svc_job_fn job;      /* what the worker runs */
    svc_job_fn begin;    /* NULL, or what the worker runs first, as soon
                            as it has taken r (svc_pool.h) */
    svc_job_fn finish;   /* NULL, or left by the job: the rest of it,
                            run once the worker has begun its next
                            request (svc_pool.h) */
    void *job_state;     /* the job's own, from begin to finish */
    svc_batch_fn batch;  /* NULL, or what runs r instead of job, together
                            with the requests queued behind it that have
                            the same batch (svc_pool.h) */
    size_t uri_len;      /* raw request target length, query included */
    int uri_nul;         /* the raw target holds "%00" (any case) */
    int uri_fields;      /* '&'-separated fields in the raw query */
    int seen;            /* first access-handler call happened */
    int suspended;       /* handed to a worker (reply expected) */
    int64_t t0_us;       /* request start, monotonic */
    uint64_t id;         /* this instance's request number, from 1 in
                            arrival order (the trace's request_id) */
    int64_t queued_us;   /* when it was handed to a worker pool */
    int client_fd;       /* the client's socket, read by the MHD thread
                            when r is handed to a worker (-1: unknown);
                            only peeked at (svc_client_gone) */

    /* routing result */
    svc_mode mode;             /* purchase routes */
    char sku[SVC_SKU_MAX + 1]; /* purchase/stock/orders */
    int is_put;                /* PUT /stock */
    uint64_t step;             /* /steps/{id}/next|run: the id */
    svc_params p;
    char idem[SVC_IDEM_KEY_MAX + 1]; /* Idempotency-Key header; "" when absent */
    int replayed;                    /* the reply is a stored one: the daemon
                                        adds Idempotent-Replayed: true */

    /* body */
    char *body;
    size_t body_len;
    int body_over;

    /* reply (malloc'd body; MHD frees it: MHD_RESPMEM_MUST_FREE) */
    unsigned status;
    char *resp;
    size_t resp_len;
    const char *allow; /* static string or NULL */
    const char *ctype; /* static string or NULL = application/json */
};

/* Stores a reply: prints obj (unformatted) and deletes it (obj may be NULL,
 * as after a failed allocation). When obj is NULL or cannot be printed, the
 * stored reply is a 503 with no body (the daemon sends its static
 * out_of_memory body). */
void svc_reply_json(svc_req *r, unsigned status, cJSON *obj);
/* Stores a ready body of len bytes with its content type (a static string;
 * NULL = application/json). body is malloc'd and taken over (freed with r
 * or by libmicrohttpd); NULL stores a 503 as svc_reply_json does. */
void svc_reply_text(svc_req *r, unsigned status, char *body, size_t len, const char *ctype);
/* {"ok":false,"error":error[,"detail":detail]} plus, when extra is not NULL,
 * extra's members (extra is consumed). error is a fixed code; detail is
 * free text, JSON-escaped by cJSON, left out when NULL or "". */
void svc_reply_error(svc_req *r, unsigned status, const char *error, const char *detail,
                     cJSON *extra);
/* Adds an integer member printed exactly, as decimal digits: cJSON keeps
 * numbers as doubles (%.15g then a sscanf round-trip check per number on
 * print, and no exact integers past 2^53), so every integer in a reply goes
 * through here. Any long long, LLONG_MIN included. Returns the new member
 * (owned by o), or NULL on out of memory or when o is NULL (o then lacks
 * the member; the caller's reply is still valid JSON). key is copied. Any
 * thread. */
cJSON *svc_json_add_int(cJSON *o, const char *key, long long v);
/* cJSON_AddItemToObject (key not NULL; copied) or cJSON_AddItemToArray
 * (key NULL) that frees item when it cannot be added — o NULL, or out of
 * memory copying key — where cJSON would leave it to the caller. Returns 1
 * when added (item now owned by o), 0 when item was freed. item may be
 * NULL (0). Any thread. */
int svc_json_add_item(cJSON *o, const char *key, cJSON *item);

/* 1 when r's client has certainly gone: a non-blocking recv(MSG_PEEK) on
 * r->client_fd reads end of stream (the peer's FIN arrived) or a socket
 * error (reset). 0 while the client may still be there: nothing to read,
 * bytes waiting (a pipelined request), or no socket known. Reads nothing
 * off the socket. Only while r's connection is suspended (libmicrohttpd
 * then neither reads nor closes the socket); the thread that owns r. */
int svc_client_gone(const svc_req *r);

#endif
