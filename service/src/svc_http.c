/* svc_http.c — the HTTP layer: one libmicrohttpd daemon, routing,
 * validation and replies.
 *
 * Threading model (why): a purchase may block for a long time — waiting up
 * to wait_ms for a lock, then sleeping work_ms inside it — while /healthz
 * must keep answering within 50 ms and as fast as nginx serves a static
 * file. So the two kinds of work never share a thread:
 *
 *   - libmicrohttpd runs an internal epoll loop on a small thread pool
 *     (server.io_threads, default 2 = this machine's cores). Those threads
 *     only parse, validate and answer the routes that need no Redis round
 *     trip: /healthz (from the background probe's status), /stats,
 *     /metrics, /trace (memory only), the live page GET / (built once at
 *     start), and every error reply. They never block, so with 200
 *     buyers holding locks /healthz still answers in well under a
 *     millisecond, and keep-alive connections cost no thread each.
 *   - A route that talks to Redis suspends its connection
 *     (MHD_suspend_connection) and is queued to a worker pool: purchases to
 *     server.workers threads, stock/audit/orders to a small admin pool (so an
 *     audit never queues behind a burst of buyers). Each worker owns one
 *     lc_conn for its whole life, so hiredis contexts are never shared and
 *     no connection pool lock is taken per request. The worker runs the job,
 *     stores the reply in the request and resumes the connection; the MHD
 *     thread then queues the reply.
 *
 *   - A stepped purchase (?step=1, teaching only: svc_step.h) runs on a
 *     thread of its own with its own lc_conn, never on a purchase worker,
 *     and stays suspended until done; GET /steps and next/run, which wait
 *     for a step, run on a small pool of their own made only with
 *     faults.enabled.
 *
 * Thread-per-connection was the alternative; it served far fewer requests
 * a second than the epoll pool, needs a guarded Redis pool, and lets 1000
 * idle keep-alive connections cost 1000 threads.
 *
 * Replies are queued on the access handler's second call, never its first:
 * a reply queued on the first call makes libmicrohttpd answer
 * "Connection: close" and every keep-alive client then pays a TCP handshake.
 *
 * Request state (svc_req, svc_reply.h) is created by the URI log callback
 * and freed by the request-completed callback; it points to the settings
 * it runs under. Reply bodies are malloc'd and handed to
 * libmicrohttpd with MHD_RESPMEM_MUST_FREE; the two /healthz replies are
 * built once and shared by every request.
 *
 * Limits on the request head. libmicrohttpd keeps a connection's request
 * line, headers, one record per header/argument/cookie and, later, the
 * response headers in one memory pool. When that pool is exactly the header
 * limit, a request just under it parses but leaves no room for the reply
 * (the purchase commits, the client gets nothing) or for an argument record
 * (the argument is silently dropped). So the pool gets twice the limit plus
 * 4 KiB (POOL_BYTES), and the limits are enforced here, on the first
 * access-handler call, before any work: a URI over listen.max_uri_bytes (at
 * most half the header limit, a config rule) → 414; request line +
 * headers, each field counted FIELD_COST bytes more than its text, over
 * listen.max_header_bytes → 431; more than SVC_MAX_ARGS query fields → 400; "%00" in
 * the raw URI → 400 (libmicrohttpd decodes before we see the values, so
 * "demo%00evil" would act on "demo"). A request within the limits therefore
 * always has its records and its reply in the pool. Only a head beyond what
 * the pool holds at all (about twice the limit) gets libmicrohttpd's own
 * HTML 431/414, and nothing runs for it; a head within a few hundred bytes
 * of the pool's end leaves no room for any reply and is closed unanswered.
 */
#include "svc_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "svc_admin.h"
#include "svc_buf.h"
#include "svc_check.h"
#include "svc_clock.h"
#include "svc_gauges.h"
#include "svc_health.h"
#include "svc_idem.h"
#include "svc_live.h"
#include "svc_openapi.h"
#include "svc_routes.h"
#include "svc_shutdown.h"
#include "svc_soldout.h"
#include "svc_stats.h"
#include "svc_step.h"
#include "svc_trace.h"

static const cfg_config *S;
static lc_client *client;
static svc_pool *purchase_pool, *admin_pool;
static svc_pool *step_pool; /* the /steps routes' jobs; with faults.enabled only */
static struct MHD_Daemon *daemon_;
static _Atomic long pending;
/* Workers inside MHD_resume_connection: it touches the daemon after the
 * connection is marked resuming, so the daemon thread may finish that
 * request (pending reaching 0) while the worker is still in the call; the
 * daemon must not be freed under it (svc_http_stop waits for 0). */
static _Atomic long resuming;
static struct MHD_Response *health_up, *health_down;
static struct MHD_Response *live_page;    /* GET /, built once */
static struct MHD_Response *openapi_page; /* GET /openapi.json, built once */

/* libmicrohttpd's per-connection pool: see "Limits on the request head". */
#define POOL_BYTES(limit) (2 * (limit) + 4096)
/* What one header, argument or cookie record costs in that pool (a
 * struct MHD_HTTP_Header is 56 bytes on LP64), rounded up. */
#define FIELD_COST 64

static const char oom_body[] = "{\"ok\":false,\"error\":\"out_of_memory\"}";
static const char json_type[] = "application/json";
static const char prom_type[] = "text/plain; version=0.0.4; charset=utf-8";
static const char ndjson_type[] = "application/x-ndjson";
static const char html_type[] = "text/html; charset=utf-8";

/* ---- replies ---- */

static void count_reply(svc_req *r, unsigned status, const char *method, const char *url);

/* Queues r's stored reply. */
static enum MHD_Result send_reply(svc_req *r, const char *method, const char *url)
{
    struct MHD_Response *resp;
    unsigned status = r->status ? r->status : 503;
    if (r->resp != NULL) {
        resp = MHD_create_response_from_buffer(r->resp_len, r->resp, MHD_RESPMEM_MUST_FREE);
        if (resp != NULL)
            r->resp = NULL; /* now owned by libmicrohttpd */
    } else {
        status = 503;
        resp = MHD_create_response_from_buffer(sizeof oom_body - 1, (void *)oom_body,
                                               MHD_RESPMEM_PERSISTENT);
    }
    if (resp == NULL)
        return MHD_NO; /* out of memory: drop the connection */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->ctype ? r->ctype : json_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (r->allow != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->replayed)
        MHD_add_response_header(resp, "Idempotent-Replayed", "true");
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    /* After a 413 the rest of the body is never read, so the connection
     * cannot carry another request. */
    if (svc_shutting_down() || r->body_over)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    count_reply(r, status, method, url);
    return ret;
}

/* A body without Content-Length (chunked) that has crossed
 * listen.max_body_bytes: 413 now, not after reading the body to its end (a
 * client could stream gigabytes first). libmicrohttpd 0.9.75 accepts a
 * reply only before the body is read or after all of it, so this one is
 * written to the socket here, followed by a FIN; the handler then returns
 * MHD_NO and libmicrohttpd closes the connection without reading further
 * (it logs "Application reported internal error"). The reply is a few
 * hundred bytes into an idle socket: one non-blocking write takes it. */
static enum MHD_Result refuse_body_now(svc_req *r, const char *method, const char *url)
{
    char head[256];
    svc_reply_error(r, 413, "body_too_large", "request body over listen.max_body_bytes", NULL);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci != NULL && r->resp != NULL) {
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n"
                         "Content-Type: %s\r\nCache-Control: no-store\r\n"
                         "Content-Length: %zu\r\n\r\n",
                         json_type, r->resp_len);
        struct iovec iov[2] = {{head, (size_t)n}, {r->resp, r->resp_len}};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = iov;
        mh.msg_iovlen = 2;
        if (sendmsg(ci->connect_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
            shutdown(ci->connect_fd, SHUT_WR);
    }
    count_reply(r, 413, method, url);
    return MHD_NO;
}

/* Counts a reply that was sent and writes its access-log line. */
static void count_reply(svc_req *r, unsigned status, const char *method, const char *url)
{
    svc_stats_http(status);
    if (r->s->log.access) {
        /* The URL is decoded: "%0A" would end the line and forge another. */
        char m[40], u[600];
        svc_log_escape(m, sizeof m, method);
        svc_log_escape(u, sizeof u, url);
        svc_log(SVC_INFO, "access %s %s %u %.3fms", m, u, status,
                (double)(lc_now_us() - r->t0_us) / 1000.0);
    }
}

static enum MHD_Result error_now(svc_req *r, unsigned status, const char *error, const char *detail,
                                 const char *method, const char *url)
{
    svc_reply_error(r, status, error, detail, NULL);
    return send_reply(r, method, url);
}

/* ---- helpers ---- */

/* Hands r to a pool and suspends its connection: 0. Otherwise stores a 503
 * reply (shutting_down, or overloaded when the pool's queue is full) and
 * returns -1; the caller sends it. */
static int submit(svc_req *r, svc_pool *pool, svc_job_fn job)
{
    atomic_fetch_add(&pending, 1);
    if (svc_shutting_down()) {
        atomic_fetch_sub(&pending, 1);
        svc_reply_error(r, 503, "shutting_down", "server shutting down", NULL);
        return -1;
    }
    if (svc_pool_reserve(pool) != 0) {
        atomic_fetch_sub(&pending, 1);
        svc_reply_error(r, 503, "overloaded",
                        "every worker is busy and server.max_queue requests already wait", NULL);
        return -1;
    }
    r->job = job;
    r->begin = job == svc_purchase_job && svc_purchase_begins_ahead(r) ? svc_purchase_begin : NULL;
    r->batch = job == svc_lua_job && svc_lua_batches(r) ? svc_lua_batch : NULL;
    r->suspended = 1;
    r->queued_us = lc_now_us();
    /* Read here, on the connection's own thread: the worker only peeks at
     * the socket to see whether the client left (svc_client_gone). */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    r->client_fd = ci != NULL ? (int)ci->connect_fd : -1;
    if (pool == purchase_pool)
        svc_stats_inflight(1); /* until svc_http_purchase_done */
    MHD_suspend_connection(r->conn);
    svc_pool_submit(pool, r);
    return 0;
}

void svc_http_job_done(svc_req *r)
{
    atomic_fetch_add(&resuming, 1);
    MHD_resume_connection(r->conn);
    atomic_fetch_sub(&resuming, 1);
}

void svc_http_purchase_done(svc_req *r)
{
    svc_stats_inflight(-1);
    svc_http_job_done(r);
}

/* ---- routes ---- */

/* A purchase refused before it reaches a worker: counted, then answered.
 * It never takes a SKU label: it is counted under its SKU only when that
 * one already has a label, else under "_other". */
static enum MHD_Result reject_purchase(svc_req *r, unsigned status, const char *error,
                                       const char *detail, const char *method, const char *url)
{
    svc_stats_purchase(r->mode, svc_stats_sku_find(r->sku), SVC_OUT_BAD_REQUEST, 0, 0, 0, -1);
    return error_now(r, status, error, detail, method, url);
}

/* The local sold-out answers: one prebuilt response per (SKU label slot,
 * mode), built on first use and then shared by every request like
 * /healthz's, because its body depends on nothing else (mode, SKU,
 * instance). Most of a sale's requests arrive after its stock is gone, and
 * building, printing and freeing the same JSON and response for each of
 * them cost a third of a local answer's CPU (bench/README.md, "The local
 * sold-out answer"). A SKU beyond the label table
 * (SVC_STATS_SKUS) gets a fresh reply each time; so does every request
 * while shutting down, whose reply says "Connection: close". */
static _Atomic(struct MHD_Response *) soldout_replies[SVC_STATS_SKUS][SVC_MODE_COUNT];

static void soldout_body(svc_req *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", 0);
        cJSON_AddStringToObject(o, "error", "sold_out");
        cJSON_AddStringToObject(o, "detail",
                                "answered from this instance's sold-out flag, without Redis");
        cJSON_AddStringToObject(o, "mode", svc_mode_name(r->mode));
        cJSON_AddStringToObject(o, "sku", r->sku);
        svc_json_add_int(o, "stock_left", 0);
        cJSON_AddBoolToObject(o, "local", 1);
        cJSON_AddStringToObject(o, "instance", r->s->instance_id);
    }
    svc_reply_json(r, 409, o);
}

/* The shared response for r's (slot, mode), or NULL after storing a fresh
 * reply in r (for send_reply). The response stays owned by the table. */
static struct MHD_Response *soldout_response(svc_req *r, int slot)
{
    if (slot < 0 || slot >= SVC_STATS_SKUS || r->mode < 0 || r->mode >= SVC_MODE_COUNT ||
        svc_shutting_down()) {
        soldout_body(r);
        return NULL;
    }
    _Atomic(struct MHD_Response *) *cell = &soldout_replies[slot][r->mode];
    struct MHD_Response *resp = atomic_load_explicit(cell, memory_order_acquire);
    if (resp != NULL)
        return resp;
    soldout_body(r);
    if (r->resp == NULL)
        return NULL;
    resp = MHD_create_response_from_buffer(r->resp_len, r->resp, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL)
        return NULL;
    r->resp = NULL; /* now owned by libmicrohttpd */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, json_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    struct MHD_Response *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(cell, &none, resp, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        MHD_destroy_response(resp); /* another thread built it first */
        resp = none;
    }
    return resp;
}

/* 1 when r's fault cannot happen under r's mode: crash_before_expire ends
 * the process between SETNX and PEXPIRE, a step only a two-step acquire
 * (setnx) has. */
static int fault_needs_other_mode(const svc_req *r)
{
    const lc_mode_info *lock = svc_mode_lock(r->mode);
    return r->p.fault == SVC_FAULT_CRASH_BEFORE_EXPIRE && (lock == NULL || !lock->two_step_acquire);
}

/* The job that buys for r: a lock mode's critical section, or lua's one
 * script. */
static svc_job_fn purchase_job_of(const svc_req *r)
{
    return svc_mode_lock(r->mode) != NULL ? svc_purchase_job : svc_lua_job;
}

/* Hands r to pool (submit); when that fails, sends the 503 it stored. */
static enum MHD_Result submit_or_reply(svc_req *r, svc_pool *pool, svc_job_fn job,
                                       const char *method, const char *url)
{
    if (submit(r, pool, job) != 0)
        return send_reply(r, method, url);
    return MHD_YES;
}

/* For the routes that take no parameter: 1 when the query has one. */
static int has_query(svc_req *r)
{
    return MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, NULL, NULL) > 0;
}

/* Answers such a query: 400 naming its first parameter. */
static enum MHD_Result refuse_query(svc_req *r, const char *method, const char *url)
{
    char detail[160];
    svc_params_parse(r->conn, r->s, 0, &r->p, detail, sizeof detail);
    return error_now(r, 400, "bad_request", detail, method, url);
}

/* The teaching switch and the admin token a stepped purchase and the
 * /steps routes need, as ?fault= does: 0, or the refusal is stored in r
 * (403 faults_disabled, 401, 403) and -1 returned. */
static int step_allowed(svc_req *r)
{
    if (!r->s->faults.enabled) {
        svc_reply_error(r, 403, "faults_disabled", "stepped purchases need faults.enabled=true",
                        NULL);
        return -1;
    }
    return svc_admin_check(r);
}

/* POST|GET /miaosha/{mode}?step=1 (svc_step.h): a purchase on a thread of
 * its own that stops at each stage of the section; the request stays
 * suspended until the purchase is done, as a pooled one's. It bypasses the
 * local sold-out flag: a step is there to go through Redis. */
static enum MHD_Result start_step(svc_req *r, const char *method, const char *url)
{
    char detail[160];
    /* with ?fault= both were checked already */
    if (r->p.fault == SVC_FAULT_NONE && step_allowed(r) != 0) {
        svc_stats_purchase(r->mode, svc_stats_sku_find(r->sku), SVC_OUT_BAD_REQUEST, 0, 0, 0, -1);
        return send_reply(r, method, url);
    }
    if (r->idem[0])
        return reject_purchase(r, 400, "bad_request",
                               "Idempotency-Key: not with step=1 (a paused purchase could outlive "
                               "its key's marker)",
                               method, url);
    if (svc_shutting_down())
        return reject_purchase(r, 503, "shutting_down", "server shutting down", method, url);
    svc_step *st = svc_step_reserve(r);
    if (st == NULL) {
        snprintf(detail, sizeof detail,
                 "teach.max_steps (%d) stepped purchases run already: run or abandon one",
                 r->s->teach.max_steps);
        return reject_purchase(r, 429, "too_many_steps", detail, method, url);
    }
    atomic_fetch_add(&pending, 1);
    r->suspended = 1;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    r->client_fd = ci != NULL ? (int)ci->connect_fd : -1;
    MHD_suspend_connection(r->conn);
    if (svc_step_launch(st, r, purchase_job_of(r)) != 0) {
        svc_reply_error(r, 503, "overloaded", "cannot start a thread for the stepped purchase",
                        NULL);
        svc_stats_purchase(r->mode, svc_stats_sku_slot(r->sku), SVC_OUT_ERROR, 0, 0,
                           lc_now_us() - r->t0_us, -1);
        MHD_resume_connection(r->conn); /* answered on the next call */
    }
    return MHD_YES;
}

/* GET /steps, POST /steps/{id}/next and /run: the step pool's jobs
 * (svc_step.h). */
static enum MHD_Result route_steps(svc_req *r, const char *seg, const char *method, const char *url)
{
    char detail[160];
    (void)seg;
    if (step_allowed(r) != 0)
        return send_reply(r, method, url);
    if (svc_params_parse(r->conn, r->s, SVC_P_SKU, &r->p, detail, sizeof detail) != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    return submit_or_reply(r, step_pool, svc_steps_list_job, method, url);
}

static enum MHD_Result drive_step(svc_req *r, const char *seg, const char *method, const char *url,
                                  svc_job_fn job)
{
    char detail[160];
    int64_t id = 0;
    if (step_allowed(r) != 0)
        return send_reply(r, method, url);
    /* wait_ms in the query or in a JSON body, as a purchase's parameters */
    if (svc_params_parse(r->conn, r->s, SVC_P_WAIT_MS, &r->p, detail, sizeof detail) != 0 ||
        svc_params_parse_body(r->body, r->body_len, r->s, SVC_P_WAIT_MS, &r->p, detail,
                              sizeof detail) != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    if (svc_parse_int(seg, 1, SVC_SINCE_MAX, &id) != 0 || !svc_step_exists((uint64_t)id)) {
        snprintf(detail, sizeof detail,
                 "no stepped purchase '%.24s' is listed (a finished one stays until its place "
                 "is needed)",
                 seg);
        return error_now(r, 404, "unknown_step", detail, method, url);
    }
    r->step = (uint64_t)id;
    return submit_or_reply(r, step_pool, job, method, url);
}

static enum MHD_Result route_step_next(svc_req *r, const char *seg, const char *method,
                                       const char *url)
{
    return drive_step(r, seg, method, url, svc_step_next_job);
}

static enum MHD_Result route_step_run(svc_req *r, const char *seg, const char *method,
                                      const char *url)
{
    return drive_step(r, seg, method, url, svc_step_run_job);
}

/* What count_keys counts: the keys equal to a or b (b may be NULL) under
 * cmp (strcmp for query parameters, as svc_params_parse compares them;
 * strcasecmp for header names). */
typedef struct key_count {
    const char *a, *b;
    int (*cmp)(const char *, const char *);
    int n;
} key_count;

/* MHD_get_connection_values's iterator over a key_count (a key without a
 * value counts too). */
static enum MHD_Result count_keys(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    key_count *k = cls;
    (void)kind;
    (void)value;
    if (key != NULL && (k->cmp(key, k->a) == 0 || (k->b != NULL && k->cmp(key, k->b) == 0)))
        k->n++;
    return MHD_YES;
}

/* POST|GET /miaosha/{mode}. Its admin check is its own: only a request
 * with ?fault= needs the token, once the fault is known to be allowed at
 * all. */
static enum MHD_Result route_purchase(svc_req *r, const char *seg, const char *method,
                                      const char *url)
{
    char detail[160];
    if (svc_mode_parse(seg, &r->mode) != 0) {
        if (strcmp(seg, "redlock") == 0)
            snprintf(detail, sizeof detail,
                     "mode redlock is not offered: redlock.nodes (its lock masters) is not "
                     "configured; to run it by hand: README.md, \"redlock by hand\"");
        else
            snprintf(detail, sizeof detail, "unknown mode '%.32s' (%s)", seg, svc_mode_list());
        return error_now(r, 404, "not_found", detail, method, url);
    }
    unsigned allowed = SVC_P_PURCHASE | SVC_P_TRACE | SVC_P_STEP;
    int rc = svc_params_parse(r->conn, r->s, allowed, &r->p, detail, sizeof detail);
    if (rc == 0) /* the same parameters in a JSON body (svc_params_parse_body) */
        rc = svc_params_parse_body(r->body, r->body_len, r->s, allowed, &r->p, detail,
                                   sizeof detail);
    snprintf(r->sku, sizeof r->sku, "%s", (r->p.seen & SVC_P_SKU) ? r->p.sku : r->s->purchase.sku);
    if (rc != 0)
        return reject_purchase(r, 400, "bad_request", detail, method, url);
    const lc_mode_info *lock = svc_mode_lock(r->mode);
    if (lock != NULL && (r->p.seen & SVC_P_LEASE_MS) && r->p.lease_ms < lock->min_lease_ms) {
        snprintf(detail, sizeof detail,
                 "lease_ms: must be at least %lld for mode %s (a shorter lease leaves it no "
                 "validity)",
                 (long long)lock->min_lease_ms, lock->name);
        return reject_purchase(r, 400, "bad_request", detail, method, url);
    }
    if (r->s->purchase.limit_per_user > 0 && !(r->p.seen & SVC_P_USER))
        return reject_purchase(r, 400, "bad_request",
                               "user: required while purchase.limit_per_user is set", method, url);
    /* Two keys would be two claims on one request: refused, as a repeated
     * query parameter is (the lookup below sees only the first). */
    key_count keys = {"Idempotency-Key", NULL, strcasecmp, 0};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_keys, &keys);
    if (keys.n > 1)
        return reject_purchase(r, 400, "bad_request", "Idempotency-Key: given more than once",
                               method, url);
    const char *key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Idempotency-Key");
    if (key != NULL) {
        if (!svc_idem_valid(key))
            return reject_purchase(r, 400, "bad_request",
                                   "Idempotency-Key: must be 1..64 characters of [A-Za-z0-9_:.-]",
                                   method, url);
        snprintf(r->idem, sizeof r->idem, "%s", key);
    }
    if (r->p.fault != SVC_FAULT_NONE) {
        if (!r->s->faults.enabled)
            return reject_purchase(r, 403, "faults_disabled",
                                   "fault injection needs faults.enabled=true", method, url);
        /* A fault ends the process: as privileged as a stock reset. */
        if (svc_admin_check(r) != 0) {
            svc_stats_purchase(r->mode, svc_stats_sku_find(r->sku), SVC_OUT_BAD_REQUEST, 0, 0, 0,
                               -1);
            return send_reply(r, method, url);
        }
        if (fault_needs_other_mode(r))
            return reject_purchase(r, 400, "bad_request",
                                   "fault: crash_before_expire needs mode setnx", method, url);
    }
    if (r->p.step)
        return start_step(r, method, url);
    /* The local sold-out flag: no worker, no Redis. A keyed request goes on
     * to Redis: its key may hold an earlier sale to replay. */
    if (r->s->purchase.local_sold_out && r->idem[0] == '\0' && svc_soldout_is(r->sku)) {
        int slot = svc_stats_sku_slot(r->sku);
        struct MHD_Response *resp = soldout_response(r, slot);
        svc_stats_sold_out_local();
        svc_gauges_seen(r->sku);
        svc_stats_purchase(r->mode, slot, SVC_OUT_SOLD_OUT, 0, 0, lc_now_us() - r->t0_us, -1);
        if (resp == NULL)
            return send_reply(r, method, url); /* shutting down, or out of memory */
        count_reply(r, 409, method, url);
        return MHD_queue_response(r->conn, 409, resp);
    }
    if (submit(r, purchase_pool, purchase_job_of(r)) != 0) {
        svc_stats_purchase(r->mode, svc_stats_sku_slot(r->sku), SVC_OUT_ERROR, 0, 0,
                           lc_now_us() - r->t0_us, -1);
        return send_reply(r, method, url);
    }
    return MHD_YES;
}

static enum MHD_Result refuse_method(svc_req *r, unsigned allowed, const char *detail,
                                     const char *method, const char *url);
static unsigned methods_of(const char *url);

/* GET|HEAD /stock/{sku}: the audit. A stock or buckets parameter is a
 * reset sent with the wrong method: 405, not "unknown parameter". */
static enum MHD_Result route_stock_get(svc_req *r, const char *seg, const char *method,
                                       const char *url)
{
    char detail[160];
    (void)seg;
    int rc = svc_params_parse(r->conn, r->s, SVC_P_STOCK | SVC_P_BUCKETS, &r->p, detail,
                              sizeof detail);
    /* Counted apart from the parse, which stops at the first bad
     * parameter: the answer does not depend on the parameters' order. */
    key_count resets = {"stock", "buckets", strcmp, 0};
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, count_keys, &resets);
    if (resets.n > 0)
        return refuse_method(r, methods_of(url), "a reset is PUT /stock/{sku}", method, url);
    if (rc != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    return submit_or_reply(r, admin_pool, svc_stock_get_job, method, url);
}

/* PUT /stock/{sku}: the reset, the stock (and the buckets) in the query
 * or the body, each in one of them. */
static enum MHD_Result route_stock_put(svc_req *r, const char *seg, const char *method,
                                       const char *url)
{
    char detail[160];
    (void)seg;
    if (svc_params_parse(r->conn, r->s, SVC_P_STOCK | SVC_P_BUCKETS, &r->p, detail,
                         sizeof detail) != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    int64_t buckets = 0;
    if (svc_stock_parse_body(r->body, r->body_len, r->p.seen, &r->p.stock, &buckets, detail,
                             sizeof detail) != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    if (buckets > 0)
        r->p.buckets = buckets;
    return submit_or_reply(r, admin_pool, svc_stock_put_job, method, url);
}

/* GET|HEAD /orders/{sku}?offset=&limit= */
static enum MHD_Result route_orders(svc_req *r, const char *seg, const char *method,
                                    const char *url)
{
    char detail[160];
    (void)seg;
    if (svc_params_parse(r->conn, r->s, SVC_P_OFFSET | SVC_P_LIMIT, &r->p, detail, sizeof detail) !=
        0)
        return error_now(r, 400, "bad_request", detail, method, url);
    return submit_or_reply(r, admin_pool, svc_orders_job, method, url);
}

/* /healthz, /stats, /metrics: answered here, no Redis round trip. */

static enum MHD_Result route_healthz(svc_req *r, const char *seg, const char *method,
                                     const char *url)
{
    (void)seg;
    if (has_query(r))
        return refuse_query(r, method, url);
    if (r->s->redis.sentinels[0] == '\0' && r->s->redis.cluster_nodes[0] == '\0') {
        int up = svc_health_up();
        count_reply(r, up ? 200 : 503, method, url);
        return MHD_queue_response(r->conn, up ? 200 : 503, up ? health_up : health_down);
    }
    /* The master may move (Sentinel), the masters too (a cluster: all of
     * them): named afresh, with the reason when down. */
    int up = svc_health_up();
    char master[300], reason[LC_ERRSTR_LEN];
    svc_health_master(client, master, sizeof master);
    cJSON *o = cJSON_CreateObject();
    if (o != NULL) {
        cJSON_AddBoolToObject(o, "ok", up);
        cJSON_AddStringToObject(o, "redis", up ? "up" : "down");
        cJSON_AddStringToObject(o, "instance", r->s->instance_id);
        cJSON_AddStringToObject(o, "master", master);
        svc_health_reason(reason, sizeof reason);
        if (!up && reason[0])
            cJSON_AddStringToObject(o, "reason", reason);
    }
    svc_reply_json(r, up ? 200 : 503, o);
    return send_reply(r, method, url);
}

/* GET /stats[?pretty=1]: pretty indents the same JSON. */
static enum MHD_Result route_stats(svc_req *r, const char *seg, const char *method, const char *url)
{
    char detail[160];
    size_t len = 0;
    (void)seg;
    if (svc_params_parse(r->conn, r->s, SVC_P_PRETTY, &r->p, detail, sizeof detail) != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    char *body = svc_stats_json(r->s->instance_id, client, &len);
    if (body != NULL && r->p.pretty) {
        char *flat = body;
        body = svc_buf_json_indent(flat, len, &len);
        free(flat);
    }
    svc_reply_text(r, 200, body, len, json_type);
    return send_reply(r, method, url);
}

static enum MHD_Result route_metrics(svc_req *r, const char *seg, const char *method,
                                     const char *url)
{
    size_t len = 0;
    (void)seg;
    if (has_query(r))
        return refuse_query(r, method, url);
    char *body = svc_stats_prometheus(client, svc_health_up(), &len);
    svc_reply_text(r, 200, body, len, prom_type);
    return send_reply(r, method, url);
}

/* GET /: the live page, one prebuilt response shared by every request
 * (as /healthz's), so an open page costs the server a memcpy per load and
 * nothing else; the page then polls the routes above. */
static enum MHD_Result route_page(svc_req *r, const char *seg, const char *method, const char *url)
{
    (void)seg;
    if (has_query(r))
        return refuse_query(r, method, url);
    count_reply(r, 200, method, url);
    return MHD_queue_response(r->conn, 200, live_page);
}

/* GET /openapi.json: the compiled-in description, one prebuilt response. */
static enum MHD_Result route_openapi(svc_req *r, const char *seg, const char *method,
                                     const char *url)
{
    (void)seg;
    if (has_query(r))
        return refuse_query(r, method, url);
    count_reply(r, 200, method, url);
    return MHD_queue_response(r->conn, 200, openapi_page);
}

/* GET /trace/{sku}?since=N: memory only (svc_trace.h), so answered here. */
static enum MHD_Result route_trace(svc_req *r, const char *seg, const char *method, const char *url)
{
    char detail[160];
    if (svc_params_parse(r->conn, r->s, SVC_P_SINCE, &r->p, detail, sizeof detail) != 0)
        return error_now(r, 400, "bad_request", detail, method, url);
    size_t len = 0;
    int found = 0;
    char *body = svc_trace_render(seg, r->s->instance_id, r->p.since, &len, &found);
    if (!found) {
        int used, max;
        svc_trace_rings(&used, &max);
        if (max > 0 && used >= max)
            snprintf(detail, sizeof detail,
                     "no purchase of this sku was traced: all %d trace rings (trace.max_skus) "
                     "belong to other SKUs until the server restarts",
                     max);
        else
            snprintf(detail, sizeof detail, "no purchase of this sku was traced");
        return error_now(r, 404, "not_found", detail, method, url);
    }
    svc_reply_text(r, 200, body, len, ndjson_type); /* NULL: 503 out_of_memory */
    return send_reply(r, method, url);
}

/* ---- the route table ---- */

/* A request's method, one bit each; any other method matches no row. */
enum { M_GET = 1u << 0, M_HEAD = 1u << 1, M_POST = 1u << 2, M_PUT = 1u << 3 };
static const char *const method_names[] = {"GET", "HEAD", "POST", "PUT"}; /* in bit order */

typedef enum MHD_Result (*route_fn)(svc_req *r, const char *seg, const char *method,
                                    const char *url);

/* One route: the methods it takes, its path, its handler, and whether it
 * needs the admin token (svc_admin.h). The path is exact ("/healthz") or a
 * prefix, one segment and an optional exact suffix ("/stock/{sku}",
 * "/steps/{id}/next"): one or more bytes without a '/', handed to the
 * handler as seg ("" for an exact path; cut at SVC_SKU_MAX + 1 bytes).
 * dispatch() checks, in this order, the path (404), the method (405), a
 * {sku} segment (400; then copied to r->sku) and the token (401, 403);
 * the handler does the rest. */
typedef struct route {
    unsigned methods; /* M_* */
    const char *path;
    route_fn fn;
    int admin;
} route;

/* service/README.md, "Routes". Rows sharing a path split it by method;
 * their methods together are that path's Allow. /healthz comes first: it
 * is the most frequent request and should cost one comparison. */
static const route routes[] = {
    {M_GET | M_HEAD, "/healthz", route_healthz, 0},
    {M_GET | M_POST, "/miaosha/{mode}", route_purchase, 0}, /* ?fault=: its own check */
    {M_GET | M_HEAD, "/stock/{sku}", route_stock_get, 0},
    {M_PUT, "/stock/{sku}", route_stock_put, 1},
    {M_GET | M_HEAD, "/orders/{sku}", route_orders, 0},
    {M_GET | M_HEAD, "/trace/{sku}", route_trace, 0},
    {M_GET | M_HEAD, "/stats", route_stats, 0},
    {M_GET | M_HEAD, "/metrics", route_metrics, 0},
    {M_GET | M_HEAD, "/", route_page, 0},
    /* stepped purchases: faults.enabled, then the token (step_allowed) */
    {M_GET | M_HEAD, "/steps", route_steps, 0},
    {M_POST, "/steps/{id}/next", route_step_next, 0},
    {M_POST, "/steps/{id}/run", route_step_run, 0},
    {M_GET | M_HEAD, "/openapi.json", route_openapi, 0},
};

static unsigned method_bit(const char *method)
{
    for (unsigned i = 0; i < sizeof method_names / sizeof method_names[0]; i++)
        if (strcmp(method, method_names[i]) == 0)
            return 1u << i;
    return 0;
}

/* url's segment when url is on rt's path ("" for an exact path), else
 * NULL; *len is the segment's length, *sku tells whether it is a {sku}. */
static const char *route_match(const route *rt, const char *url, size_t *len, int *sku)
{
    const char *p = rt->path;
    while (*p != '\0' && *p != '{' && *p == *url) {
        p++;
        url++;
    }
    *len = 0;
    if (*p == '\0')
        return *url == '\0' ? url : NULL;
    const char *close = strchr(p, '}');
    *len = strcspn(url, "/");
    if (*p != '{' || close == NULL || *len == 0 || strcmp(url + *len, close + 1) != 0)
        return NULL;
    *sku = strncmp(p, "{sku}", 5) == 0;
    return url;
}

/* The methods of every row on url's path (0: no route there). */
static unsigned methods_of(const char *url)
{
    unsigned allowed = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int sku = 0;
        size_t len;
        if (route_match(&routes[i], url, &len, &sku) != NULL)
            allowed |= routes[i].methods;
    }
    return allowed;
}

/* 405 for a path whose rows take other methods: Allow lists them all
 * ("GET, HEAD, PUT"), the detail those a client would name ("use GET or
 * PUT": HEAD goes with GET) unless detail says more. */
static enum MHD_Result refuse_method(svc_req *r, unsigned allowed, const char *detail,
                                     const char *method, const char *url)
{
    char allow[40] = "", use[48] = "use";
    size_t na = 0, nu = 3;
    int uses = 0;
    for (unsigned i = 0; i < sizeof method_names / sizeof method_names[0]; i++) {
        if ((allowed & (1u << i)) == 0)
            continue;
        na += (size_t)snprintf(allow + na, sizeof allow - na, "%s%s", na ? ", " : "",
                               method_names[i]);
        if ((1u << i) != M_HEAD)
            nu += (size_t)snprintf(use + nu, sizeof use - nu, "%s%s", uses++ ? " or " : " ",
                                   method_names[i]);
    }
    r->allow = allow;
    enum MHD_Result ret = error_now(r, 405, "method_not_allowed", detail ? detail : use, method,
                                    url);
    r->allow = NULL; /* libmicrohttpd copied the header */
    return ret;
}

static enum MHD_Result dispatch(svc_req *r, const char *url, const char *method)
{
    if (r->body_over)
        return error_now(r, 413, "body_too_large", "request body over listen.max_body_bytes",
                         method, url);
    unsigned m = method_bit(method), allowed = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route *rt = &routes[i];
        int sku = 0;
        size_t len = 0;
        const char *at = route_match(rt, url, &len, &sku);
        if (at == NULL)
            continue;
        /* one byte over the longest valid segment: still refused */
        char seg[SVC_SKU_MAX + 2];
        snprintf(seg, sizeof seg, "%.*s", (int)(len < sizeof seg ? len : sizeof seg - 1), at);
        if ((rt->methods & m) == 0) { /* a later row may share the path */
            allowed |= rt->methods;
            continue;
        }
        if (sku) {
            if (!svc_valid_id(seg))
                return error_now(r, 400, "bad_request", "sku: must match [A-Za-z0-9_-]{1,64}",
                                 method, url);
            memcpy(r->sku, seg, strlen(seg) + 1); /* valid: at most SVC_SKU_MAX bytes */
        }
        if (rt->admin && svc_admin_check(r) != 0)
            return send_reply(r, method, url);
        return rt->fn(r, seg, method, url);
    }
    if (allowed != 0)
        return refuse_method(r, allowed, NULL, method, url);
    return error_now(r, 404, "not_found", "no such route", method, url);
}

/* ---- libmicrohttpd callbacks ---- */

/* A connection's slot (libmicrohttpd's socket context): the request
 * context on_uri made that the access handler has not seen yet.
 * libmicrohttpd calls the completion callback (which frees a context) only
 * for requests that reached the access handler; a request head that never
 * completes — the connection's memory pool ran out just before its end, or
 * the client stopped sending — ends with its connection, and its context
 * is freed here instead of leaking. One connection's callbacks all run on
 * its daemon thread. */
typedef struct conn_slot {
    svc_req *unseen;
} conn_slot;

static conn_slot *slot_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

static void free_req(svc_req *r)
{
    free(r->body);
    free(r->resp);
    free(r);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    (void)c;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = calloc(1, sizeof(conn_slot)); /* NULL: untracked */
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_slot *slot = *socket_context;
        if (slot != NULL && slot->unseen != NULL)
            free_req(slot->unseen);
        free(slot);
        *socket_context = NULL;
    }
}

/* Request numbers: the HTTP threads take one each (on_uri). */
static atomic_uint_fast64_t next_request_id;

/* Called with the raw (still percent-encoded) request target; cls is the
 * settings the request runs under. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    svc_req *r = calloc(1, sizeof *r);
    conn_slot *slot = slot_of(c);
    if (slot != NULL) {
        if (slot->unseen != NULL) /* its head never completed; nobody else has it */
            free_req(slot->unseen);
        slot->unseen = r;
    }
    if (r != NULL) {
        r->conn = c;
        r->s = cls;
        r->client_fd = -1;
        r->t0_us = lc_now_us();
        r->id = atomic_fetch_add_explicit(&next_request_id, 1, memory_order_relaxed) + 1;
        if (uri != NULL) {
            const char *q = strchr(uri, '?');
            r->uri_len = strlen(uri);
            r->uri_nul = strstr(uri, "%00") != NULL;
            for (; q != NULL; q = strchr(q + 1, '&'))
                r->uri_fields++;
        }
    }
    return r;
}

/* What check_head's one pass over the request's fields finds: the head's
 * cost, and whether two Content-Length headers disagree. */
typedef struct {
    size_t cost;
    bool length_seen, lengths_differ;
    const char *length;
} head_fields;

static enum MHD_Result add_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    head_fields *h = cls;
    h->cost += FIELD_COST;
    if (kind != MHD_HEADER_KIND) /* arguments and cookies: their text is in the URI or a header */
        return MHD_YES;
    h->cost += strlen(key) + (value ? strlen(value) : 0) + 4; /* "Name: value\r\n" */
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (!h->length_seen)
            h->length = value;
        else if (value == NULL || h->length == NULL || strcmp(value, h->length) != 0)
            h->lengths_differ = true;
        h->length_seen = true;
    }
    return MHD_YES;
}

/* The request head's checks (see "Limits on the request head"): 0, or the
 * error reply is stored and -1 returned.
 *
 * Two framings libmicrohttpd lets through are refused here too, before any
 * body is read (RFC 9112, section 6): a Transfer-Encoding other than
 * chunked, whose body it would wait for until the idle timeout with no
 * answer; and Content-Length given twice with different values, of which
 * it uses the first and reads the rest of the body as the next request —
 * the request smuggling a proxy in front may frame the other way. */
static int check_head(svc_req *r, const char *method, const char *version)
{
    char detail[200];
    /* "METHOD target VERSION\r\n" ... "\r\n" */
    head_fields f = {.cost = strlen(method) + r->uri_len + strlen(version) + 6};
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND | MHD_COOKIE_KIND | MHD_GET_ARGUMENT_KIND,
                              add_field, &f);
    size_t head = f.cost;
    if (r->uri_len > (size_t)r->s->listen.max_uri_bytes) {
        snprintf(detail, sizeof detail, "request URI is %zu bytes, over listen.max_uri_bytes = %zu",
                 r->uri_len, (size_t)r->s->listen.max_uri_bytes);
        svc_reply_error(r, 414, "uri_too_long", detail, NULL);
        return -1;
    }
    if (head > (size_t)r->s->listen.max_header_bytes) {
        snprintf(detail, sizeof detail,
                 "request line and headers take %zu bytes (%d per field included), over "
                 "listen.max_header_bytes = %zu",
                 head, FIELD_COST, (size_t)r->s->listen.max_header_bytes);
        svc_reply_error(r, 431, "headers_too_large", detail, NULL);
        return -1;
    }
    if (r->uri_nul) {
        svc_reply_error(r, 400, "bad_request", "URI: %00 (an encoded NUL byte) is not allowed",
                        NULL);
        return -1;
    }
    if (r->uri_fields > SVC_MAX_ARGS) {
        snprintf(detail, sizeof detail, "too many parameters (at most %d)", SVC_MAX_ARGS);
        svc_reply_error(r, 400, "bad_request", detail, NULL);
        return -1;
    }
    const char *te = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (te != NULL && strcasecmp(te, "chunked") != 0) {
        snprintf(detail, sizeof detail,
                 "Transfer-Encoding '%.60s': only chunked is understood (or a Content-Length)", te);
        svc_reply_error(r, 400, "bad_request", detail, NULL);
        return -1;
    }
    if (f.lengths_differ) {
        svc_reply_error(r, 400, "bad_request",
                        "Content-Length given more than once, with different values", NULL);
        return -1;
    }
    return 0;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    svc_req *r = *con_cls;
    (void)cls;
    (void)toe;
    if (r == NULL)
        return;
    if (r->suspended) {
        long before = atomic_fetch_sub(&pending, 1);
        SVC_ASSERT(before > 0);
    }
    conn_slot *slot = slot_of(c);
    if (slot != NULL && slot->unseen == r)
        slot->unseen = NULL;
    free_req(r);
    *con_cls = NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    svc_req *r = *con_cls;
    (void)cls;
    if (r == NULL) {
        r = on_uri((void *)S, url, c);
        if (r == NULL)
            return MHD_NO;
        *con_cls = r;
    }
    if (!r->seen) {
        conn_slot *slot = slot_of(c);
        if (slot != NULL && slot->unseen == r) /* on_completed frees it from now on */
            slot->unseen = NULL;
        /* First call: headers only. Reply on a later call (keep-alive), but
         * refuse a bad request head, or an announced oversized body, before
         * reading anything more (the connection then closes). */
        r->seen = 1;
        r->conn = c;
        if (check_head(r, method, version) != 0)
            return send_reply(r, method, url);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL && (size_t)strtoull(cl, NULL, 10) > (size_t)r->s->listen.max_body_bytes) {
            r->body_over = 1;
            return dispatch(r, url, method);
        }
        /* "Expect: 100-continue" with no body announced: answered now,
         * without the 100 (RFC 9110, 10.1.1, lets a server omit it) and at
         * the price of "Connection: close". Left to a later call,
         * libmicrohttpd sends "100 Continue" and then, when more bytes
         * follow the head (a stray CRLF, a pipelined request), refuses the
         * reply and closes with nothing more. */
        if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT) != NULL &&
            (cl == NULL || strtoull(cl, NULL, 10) == 0) &&
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) ==
                NULL)
            return dispatch(r, url, method);
        return MHD_YES;
    }
    if (*upload_size != 0) {
        if (r->status != 0) { /* the 413 is queued: drop what still comes */
            *upload_size = 0;
            return MHD_YES;
        }
        if (!r->body_over) {
            if (r->body_len + *upload_size > (size_t)r->s->listen.max_body_bytes) {
                /* No Content-Length (chunked), and over the limit now:
                 * see refuse_body_now. */
                r->body_over = 1;
                free(r->body);
                r->body = NULL;
                r->body_len = 0;
                *upload_size = 0;
                return refuse_body_now(r, method, url);
            } else {
                char *b = realloc(r->body, r->body_len + *upload_size + 1);
                if (b == NULL)
                    return MHD_NO;
                memcpy(b + r->body_len, upload_data, *upload_size);
                r->body = b;
                r->body_len += *upload_size;
                b[r->body_len] = '\0';
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->suspended) /* resumed: the worker stored the reply */
        return send_reply(r, method, url);
    if (r->status != 0) /* a reply was already queued (early 413) */
        return MHD_YES;
    return dispatch(r, url, method);
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512], shown[600];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    svc_log_escape(shown, sizeof shown, msg); /* it may quote the request */
    svc_log(SVC_WARN, "http: %s", shown);
}

static struct MHD_Response *health_response(int up)
{
    cJSON *o = cJSON_CreateObject();
    char *txt;
    struct MHD_Response *resp;
    if (o == NULL)
        return NULL;
    cJSON_AddBoolToObject(o, "ok", up);
    cJSON_AddStringToObject(o, "redis", up ? "up" : "down");
    cJSON_AddStringToObject(o, "instance", S->instance_id);
    char master[300];
    svc_health_master(client, master, sizeof master);
    cJSON_AddStringToObject(o, "master", master);
    txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (txt == NULL)
        return NULL;
    resp = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL)
        free(txt);
    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, json_type);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    }
    return resp;
}

/* Accept policy: once shutdown has begun, a new connection is closed as
 * soon as it is accepted. This, not MHD_quiesce_daemon, is how the server
 * stops accepting: in libmicrohttpd 0.9.75, MHD_quiesce_daemon with an epoll
 * thread pool deletes the listen socket from each worker's epoll set while
 * that worker may be deleting it too, and aborts the process ("Failed to
 * remove listen FD from epoll set") when it loses the race — seen on a
 * SIGTERM right after a wrk run. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)cls;
    (void)addr;
    (void)addrlen;
    return svc_shutting_down() ? MHD_NO : MHD_YES;
}

int svc_http_start(const cfg_config *s, lc_client *c, svc_pool *purchases, svc_pool *admin,
                   char *err, size_t errlen)
{
    struct addrinfo hints, *ai = NULL;
    char port[16];
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;

    S = s;
    client = c;
    purchase_pool = purchases;
    admin_pool = admin;
    health_up = health_response(1);
    health_down = health_response(0);
    if (health_up == NULL || health_down == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t page_len = 0;
    char *page = svc_live_page(&page_len);
    live_page = page ? MHD_create_response_from_buffer(page_len, page, MHD_RESPMEM_MUST_FREE)
                     : NULL;
    if (live_page == NULL) {
        free(page);
        snprintf(err, errlen, "cannot build the live page (out of memory, or a build error)");
        return -1;
    }
    /* The page draws server data only through textContent; the policy is
     * the second fence: no script, style or connection from anywhere else. */
    MHD_add_response_header(live_page, MHD_HTTP_HEADER_CONTENT_TYPE, html_type);
    MHD_add_response_header(live_page, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(live_page, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(live_page, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    size_t api_len = 0;
    const char *api = svc_openapi_json(&api_len);
    openapi_page = MHD_create_response_from_buffer(api_len, (void *)api, MHD_RESPMEM_PERSISTENT);
    if (openapi_page == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    MHD_add_response_header(openapi_page, MHD_HTTP_HEADER_CONTENT_TYPE, json_type);
    MHD_add_response_header(openapi_page, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
    snprintf(port, sizeof port, "%d", s->listen.port);
    int gai = getaddrinfo(s->listen.address, port, &hints, &ai);
    if (gai != 0 || ai == NULL) {
        snprintf(err, errlen, "listen address %s: %s", s->listen.address, gai_strerror(gai));
        return -1;
    }
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* Stepped purchases exist only with the teaching switch: without it
     * their threads and connections are never made. */
    if (s->faults.enabled &&
        (svc_step_init(s, c, svc_http_job_done, err, errlen) != 0 ||
         (step_pool = svc_pool_new(c, s->teach.max_steps, 4 * s->teach.max_steps, 0, "step",
                                   svc_http_job_done, err, errlen)) == NULL)) {
        freeaddrinfo(ai);
        return -1;
    }
    errno = 0;
    /* One option and its values per line. */
    /* clang-format off */
    daemon_ = MHD_start_daemon(
        flags, (uint16_t)s->listen.port, on_accept, NULL, on_request, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(s->server.io_threads > 1 ? s->server.io_threads : 0),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->listen.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->listen.connection_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_BYTES((size_t)s->listen.max_header_bytes),
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, (void *)s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
        MHD_OPTION_END);
    /* clang-format on */
    int saved = errno;
    freeaddrinfo(ai);
    if (daemon_ == NULL) {
        svc_pool_free(step_pool);
        step_pool = NULL;
        svc_step_free();
        snprintf(err, errlen, "cannot listen on %s port %d%s%s", s->listen.address, s->listen.port,
                 saved ? ": " : "", saved ? strerror(saved) : "");
        return -1;
    }
    return 0;
}

int svc_http_port(void)
{
    const union MHD_DaemonInfo *info = daemon_
                                           ? MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT)
                                           : NULL;
    return info ? (int)info->port : -1;
}

long svc_http_pending(void)
{
    return atomic_load(&pending);
}

void svc_http_stop(void)
{
    /* a worker's resume is a few instructions past the request's end */
    while (atomic_load(&resuming) > 0) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    if (daemon_ != NULL)
        MHD_stop_daemon(daemon_);
    daemon_ = NULL;
    svc_pool_free(step_pool); /* its jobs are done: nothing is pending */
    step_pool = NULL;
    svc_step_free();
    MHD_destroy_response(health_up);
    MHD_destroy_response(health_down);
    health_up = health_down = NULL;
    if (live_page != NULL)
        MHD_destroy_response(live_page);
    live_page = NULL;
    if (openapi_page != NULL)
        MHD_destroy_response(openapi_page);
    openapi_page = NULL;
    for (int i = 0; i < SVC_STATS_SKUS; i++)
        for (int m = 0; m < SVC_MODE_COUNT; m++) {
            struct MHD_Response *resp = atomic_exchange(&soldout_replies[i][m], NULL);
            if (resp != NULL)
                MHD_destroy_response(resp);
        }
}
