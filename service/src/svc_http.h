/* svc_http.h — the per-request state and the reply helpers shared by the
 * route handlers (svc_purchase.c, svc_stock.c) and the daemon (svc_http.c). */
#ifndef MIAOSHA_SVC_HTTP_H
#define MIAOSHA_SVC_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "svc.h"
#include "svc_params.h"

typedef struct svc_req svc_req;
typedef void (*svc_job_fn)(svc_req *r, lc_conn *conn);

/* One HTTP request. Created by the URI log callback (so even a request that
 * never reaches the access handler has one), handed to MHD as con_cls and
 * freed by the request-completed callback. While the connection is suspended
 * it belongs to the one worker that runs its job; the worker fills the reply
 * fields, then resumes the connection (MHD's lock orders those writes before
 * the MHD thread's read). */
struct svc_req {
    struct MHD_Connection *conn;
    svc_req *next;            /* worker-pool queue link */
    svc_job_fn job;           /* what the worker runs */
    size_t uri_len;           /* raw request target length, query included */
    int uri_nul;              /* the raw target holds "%00" (any case) */
    int uri_fields;           /* '&'-separated fields in the raw query */
    int seen;                 /* first access-handler call happened */
    int suspended;            /* handed to a worker (reply expected) */
    int64_t t0_us;            /* request start, monotonic */
    int64_t queued_us;        /* when it was handed to a worker pool */

    /* routing result */
    lc_mode mode;             /* purchase routes */
    char sku[SVC_SKU_MAX + 1];/* purchase/stock/orders */
    int is_put;               /* PUT /stock */
    svc_params p;

    /* body */
    char *body;
    size_t body_len;
    int body_over;

    /* reply (malloc'd body; MHD frees it: MHD_RESPMEM_MUST_FREE) */
    unsigned status;
    char *resp;
    size_t resp_len;
    const char *allow;        /* static string or NULL */
    const char *ctype;        /* static string or NULL = application/json */
};

/* Stores a reply: prints obj (unformatted) and deletes it. On allocation
 * failure stores a static 503 body. */
void svc_reply_json(svc_req *r, unsigned status, cJSON *obj);
/* Adds an integer member printed exactly, as decimal digits. cJSON keeps
 * numbers as doubles: %.15g then a sscanf round-trip check per number on
 * print, and no exact integers past 2^53. Returns the new member (owned by
 * o), or NULL on out of memory (o then lacks the member; the caller's reply
 * is still valid JSON). Any thread. */
cJSON *svc_json_add_int(cJSON *o, const char *key, long long v);
/* {"ok":false,"error":error[,"detail":detail]} plus, when extra is not NULL,
 * extra's members (extra is consumed). */
void svc_reply_error(svc_req *r, unsigned status, const char *error, const char *detail, cJSON *extra);

/* The running settings (read-only). */
const svc_settings *svc_http_settings(void);

struct svc_pool;
/* Starts the daemon. Returns 0, or -1 with a message in err. */
int svc_http_start(const svc_settings *s, lc_client *client, struct svc_pool *purchases,
                   struct svc_pool *admin, char *err, size_t errlen);
/* The bound port (useful with port 0), or -1. */
int svc_http_port(void);
/* Shutdown, step 1: stop accepting (a new connection is closed as soon as
 * it is accepted; the listen socket stays open until svc_http_stop); new
 * purchases on open connections get 503 shutting_down; raises
 * svc_cancel_flag. Any thread (main.c calls it from the main thread). */
void svc_http_quiesce(void);
/* Requests handed to workers whose completion MHD has not reported yet. */
long svc_http_pending(void);
/* Shutdown, step 2: closes every connection and stops the threads. */
void svc_http_stop(void);
/* Called by a worker when r's reply is ready. */
void svc_http_resume(svc_req *r);

#endif
