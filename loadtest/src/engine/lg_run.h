/* lg_run.h — one purchase burst against the service, and its report.
 *
 * lg_run(): resets the SKU's stock (PUT /stock/{sku}), fires `requests`
 * purchases over `concurrency` keep-alive connections round-robin over the
 * targets (lg_engine), then reads the audit (GET /stock/{sku}) and every
 * order (GET /orders/{sku}) and cross-checks them with the responses.
 * lg_bench(): a plain GET throughput load (no reset, no audit).
 * The lg_report_* functions format a result onto a stream the caller
 * chooses (main passes stdout).
 *
 * Units: every *_ms is milliseconds, *_s seconds, latencies in the result's
 * histogram microseconds. Errors: lg_run and lg_bench return 0 or -1 with a
 * reason in err (errlen bytes); nothing here prints except the lg_report_*
 * functions, onto the stream they are given, and nothing exits.
 * Threads: lg_run and lg_bench block the calling thread for the whole load
 * and run the engine's threads inside (joined before they return); the
 * progress callback runs on the calling thread. Several loads may run at
 * once on different threads (the matrix's fault cells do), each with its
 * own cfg and result. curl_global_init must have been called (lg_admin.h).
 */
#ifndef MIAOSHA_LG_RUN_H
#define MIAOSHA_LG_RUN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_admin.h"
#include "lg_engine.h"
#include "lg_http.h"
#include "lg_timeline.h"

#define LG_MAX_TARGETS 16

/* What --expect asks of a run (lg_run_check). */
typedef enum lg_expect {
    LG_EXPECT_NONE = 0, /* nothing: the run's exit status is 0 */
    LG_EXPECT_SAFE,     /* the result's safe (below) */
    LG_EXPECT_OVERSELL  /* the audit shows an oversell */
} lg_expect;

typedef struct lg_run_cfg {
    const char *mode;                   /* URL segment: none|mutex|setnx|token|reentrant|
                                           redlock|fenced|lua */
    const char *sku;                    /* default "demo"; [A-Za-z0-9_-]{1,64} */
    uint64_t requests;                  /* 1..10000000 purchases, each sent at most once */
    int concurrency;                    /* keep-alive connections */
    int64_t stock;                      /* < 0: do not reset (keep what is there) */
    int buckets;                        /* 1..64: the reset splits the stock into
                                           that many stock buckets; 0: not sent */
    int64_t work_ms, lease_ms, wait_ms; /* ms; < 0: parameter not sent */
    int64_t reenter;                    /* times the lock is taken again; < 0: not sent */
    uint64_t users;                     /* 0: one distinct user per request */
    const char *fault;                  /* NULL: not sent */
    const char *method;                 /* "POST" (default) or "GET" */
    lg_url targets[LG_MAX_TARGETS];     /* targets[0] also answers the admin calls */
    int ntargets;                       /* 1..LG_MAX_TARGETS */
    const char *admin_token;            /* Bearer token for PUT /stock and, with fault,
                                           for every purchase (the server asks for it
                                           on fault= when it has one); NULL: none */
    int64_t deadline_ms;                /* hard bound of the burst, ms; <= 0: 120000 */
    int threads;                        /* 0: engine default */
    int skip_audit;                     /* 1: no audit / orders (the matrix's probes) */
    int trace_marks;                    /* 1: before the burst, read where each target's
                                           trace of sku stands (res->marks), so that
                                           lg_trace_fetch takes the burst's records */
    const char *acked_out;              /* NULL, or a file lg_run writes every acknowledged
                                           order id to, one per line, sorted */
    int64_t audit_wait_ms;              /* how long the audit may keep asking while the
                                           service cannot answer it (a failover not yet
                                           followed), ms; 0: the audit's own few retries */
    lg_progress_fn progress;            /* may be NULL; on the calling thread */
    void *progress_ud;
    volatile sig_atomic_t *stop; /* may be NULL; non-zero (a signal handler or
                                    another thread) ends the burst early */
} lg_run_cfg;

#define LG_RUN_MAX_ERRS 16

typedef struct lg_run_result {
    lg_engine_result eng;
    uint64_t requests; /* asked for */
    /* answers by status: 200, 409 (but fenced_out), 429, the 503s whose
     * error was redis_unavailable, every other answer (other 503s too),
     * and requests that got no answer */
    uint64_t ok, sold_out, lock_busy, redis_unavailable, other_http, transport_errors;
    uint64_t fenced_out;         /* 409s whose error was fenced_out (mode fenced: a
                                    stale holder's write refused); not in sold_out */
    uint64_t sold_out_local;     /* of sold_out, those answered from an instance's
                                    local sold-out flag ("local":true: no worker,
                                    no Redis, not traced) */
    uint64_t not_sent;           /* never sent: the deadline came first */
    uint64_t lock_lost;          /* responses that carried "lock_lost":true */
    uint64_t deleted_other_lock; /* ... "deleted_other_lock":true (setnx: a late
                                  release deleted a later holder's lock) */
    uint64_t ok_without_id;      /* 200s with no order_id */
    uint64_t dup_ok_ids;         /* an order id acknowledged twice */
    int audited;                 /* audit and orders were read */
    lg_audit audit;
    uint64_t orders_listed;    /* records in GET /orders */
    uint64_t dup_orders;       /* repeated ids in the order list */
    uint64_t acked_lost;       /* acknowledged ids (a 200 named them) absent
                                  from the final order list: a sale the buyer
                                  was told of that the books do not have (a
                                  failover that promoted a replica without
                                  it). The JSON and CSV also keep this under
                                  its former name, missing_orders */
    int64_t stock_at_start;    /* the stock the burst began with: cfg->stock,
                                  or with cfg->stock < 0 the audit's stock
                                  read before the burst; -1 when unknown */
    uint64_t acked_over_stock; /* distinct acknowledged ids beyond
                                  stock_at_start (0 when it is unknown):
                                  buyers holding a 200 for a unit that
                                  never existed. Seen even when the books
                                  balance, which the audit cannot see */
    uint64_t unacknowledged;   /* listed orders no 200 reported (e.g. a
                                  response lost to a crash or a timeout) */
    char audit_error[256];     /* why the audit could not be read */
    /* Answers that named an error, tallied by (HTTP status, "error" field):
     * the 503s split into redis_unavailable, redis_error, ... and the 4xx
     * (sold_out, lock_busy, limit_reached, ...). At most LG_RUN_MAX_ERRS
     * distinct pairs; further ones are counted in errs_other. */
    struct {
        int status;
        char error[32];
        uint64_t n;
    } errs[LG_RUN_MAX_ERRS];
    int nerrs;
    uint64_t errs_other;
    /* Non-200 answers that named an order id: the service could not tell
     * whether that order committed ("commit outcome unknown"). Of those,
     * unknown_committed are in the order list (after the audit): they sold
     * although their buyer was told otherwise; the rest did not sell. */
    uint64_t unknown_outcome;
    uint64_t unknown_committed;
    lg_trace_mark marks[LG_MAX_TARGETS]; /* per target, with cfg->trace_marks */
    int oversold_seen;                   /* audit.oversold > 0 */
    int safe;                            /* audited, and no oversell, undersell,
                                            duplicate order or 200 id,
                                            acknowledged order lost, 200
                                            beyond the stock or 200 without
                                            an order id */
} lg_run_result;

/* Defaults: mode token, sku "demo", 1000 requests over 100 connections,
 * stock 100, no work/lease/wait/reenter parameter, POST, deadline 120 s, no
 * targets (the caller adds at least one). */
void lg_run_cfg_init(lg_run_cfg *c);

/* Resets the stock (when cfg->stock >= 0), runs the burst, reads the audit
 * and the orders (unless cfg->skip_audit) and cross-checks them. Blocks up
 * to cfg->deadline_ms plus the admin calls (each bounded by libcurl's
 * timeouts, lg_admin.c). Returns 0 with res filled (the verdict is in it;
 * an audit that could not be read leaves res->audited 0 and the reason in
 * res->audit_error) or -1 when the run could not happen, with a reason in
 * err: bad cfg (targets, requests, sku, request line too long), out of
 * memory, the reset failed, the engine could not start, or cfg->acked_out
 * could not be written (the result is filled then too). res is zeroed
 * first in both cases. */
int lg_run(const lg_run_cfg *cfg, lg_run_result *res, char *err, size_t errlen);

/* 0 when the result meets the expectation, else 1 (the process's exit
 * status for `run --expect`). Pure; any thread. */
int lg_run_check(const lg_run_result *r, lg_expect e);

/* Every answer that was neither a sale, sold out, fenced out nor lock busy: 503s, other
 * HTTP statuses and transport errors (requests never sent not included).
 * Pure; any thread. */
uint64_t lg_run_errors(const lg_run_result *r);

/* One run's result onto out: a human-readable table; one JSON object
 * (indented over several lines, a newline after it); or CSV (a header
 * line first when header is 1, then one row). Latencies are printed in
 * ms. Write errors are the stream's (ferror). */
void lg_report_table(FILE *out, const lg_run_cfg *cfg, const lg_run_result *r, lg_expect e);
void lg_report_json(FILE *out, const lg_run_cfg *cfg, const lg_run_result *r, lg_expect e);
void lg_report_csv(FILE *out, const lg_run_cfg *cfg, const lg_run_result *r, lg_expect e,
                   int header);

/* bench */
typedef struct lg_bench_cfg {
    lg_url target;
    const char *path;  /* NULL or "": "/healthz"; else starts with '/' */
    int concurrency;   /* keep-alive connections */
    double duration_s; /* seconds, in (0, 3600] */
    int threads;       /* 0: engine default */
    volatile sig_atomic_t *stop;
    lg_progress_fn progress;
    void *progress_ud;
} lg_bench_cfg;

/* GET cfg->path over and over for cfg->duration_s (blocks that long, plus
 * the connect phase). 0 with res filled, or -1 with a reason in err: bad
 * path or duration, or the engine could not start. */
int lg_bench(const lg_bench_cfg *cfg, lg_engine_result *res, char *err, size_t errlen);
/* The bench result onto out: a table, or one JSON line when json is 1. */
void lg_report_bench(FILE *out, const lg_bench_cfg *cfg, const lg_engine_result *r, int json);

#endif
