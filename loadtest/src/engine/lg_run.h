/* lg_run.h — one purchase burst against the service, and its report.
 *
 * lg_run(): resets the SKU's stock (PUT /stock/{sku}), fires `requests`
 * purchases over `concurrency` keep-alive connections round-robin over the
 * targets (lg_engine), then reads the audit (GET /stock/{sku}) and every
 * order (GET /orders/{sku}) and cross-checks them with the responses.
 * lg_bench(): a plain GET throughput load (no reset, no audit).
 * The lg_report_* functions format a result onto a stream the caller
 * chooses (main passes stdout).
 */
#ifndef MIAOSHA_LG_RUN_H
#define MIAOSHA_LG_RUN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_admin.h"
#include "lg_engine.h"
#include "lg_http.h"

#define LG_MAX_TARGETS 16

typedef enum lg_expect { LG_EXPECT_NONE = 0, LG_EXPECT_SAFE, LG_EXPECT_OVERSELL } lg_expect;

typedef struct lg_run_cfg {
    const char *mode;          /* URL segment: none|mutex|setnx|token|reentrant */
    const char *sku;           /* default "demo" */
    uint64_t requests;
    int concurrency;
    int64_t stock;             /* < 0: do not reset (keep what is there) */
    int64_t work_ms, lease_ms, wait_ms, reenter; /* < 0: parameter not sent */
    uint64_t users;            /* 0: one distinct user per request */
    const char *fault;         /* NULL: not sent */
    const char *method;        /* "POST" (default) or "GET" */
    lg_url targets[LG_MAX_TARGETS];
    int ntargets;
    const char *admin_token;   /* NULL: no Authorization header */
    int64_t deadline_ms;       /* hard bound of the burst */
    int threads;               /* 0: engine default */
    int skip_audit;            /* 1: no audit / orders (the matrix's probes) */
    lg_progress_fn progress;
    void *progress_ud;
    volatile sig_atomic_t *stop;
} lg_run_cfg;

typedef struct lg_run_result {
    lg_engine_result eng;
    uint64_t requests;         /* asked for */
    uint64_t ok, sold_out, lock_busy, redis_unavailable, other_http, transport_errors;
    uint64_t not_sent;         /* never sent: the deadline came first */
    uint64_t lock_lost;        /* responses that carried "lock_lost":true */
    uint64_t deleted_other_lock; /* ... "deleted_other_lock":true (setnx: a late
                                  release deleted a later holder's lock) */
    uint64_t ok_without_id;    /* 200s with no order_id */
    uint64_t dup_ok_ids;       /* an order id acknowledged twice */
    int audited;               /* audit and orders were read */
    lg_audit audit;
    uint64_t orders_listed;    /* records in GET /orders */
    uint64_t dup_orders;       /* repeated ids in the order list */
    uint64_t missing;          /* acknowledged ids absent from the list */
    uint64_t unacknowledged;   /* listed orders no 200 reported (e.g. a
                                  response lost to a crash or a timeout) */
    char audit_error[256];     /* why the audit could not be read */
    int oversold_seen;         /* audit.oversold > 0 */
    int safe;                  /* no oversell, undersell, duplicate, missing */
} lg_run_result;

void lg_run_cfg_init(lg_run_cfg *c);

/* Returns 0 (result filled; the verdict is in it) or -1 when the run could
 * not happen (reset failed, bad config), with a reason in err. */
int lg_run(const lg_run_cfg *cfg, lg_run_result *res, char *err, size_t errlen);

/* 0 when the result meets the expectation, else 1. */
int lg_run_check(const lg_run_result *r, lg_expect e);

/* Every answer that was neither a sale, sold out nor lock busy: 503s, other
 * HTTP statuses and transport errors (requests never sent not included).
 * Pure; any thread. */
uint64_t lg_run_errors(const lg_run_result *r);

void lg_report_table(FILE *out, const lg_run_cfg *cfg, const lg_run_result *r, lg_expect e);
void lg_report_json(FILE *out, const lg_run_cfg *cfg, const lg_run_result *r, lg_expect e);
void lg_report_csv(FILE *out, const lg_run_cfg *cfg, const lg_run_result *r, lg_expect e,
                   int header);

/* bench */
typedef struct lg_bench_cfg {
    lg_url target;
    const char *path;          /* "/healthz" */
    int concurrency;
    double duration_s;
    int threads;
    volatile sig_atomic_t *stop;
    lg_progress_fn progress;
    void *progress_ud;
} lg_bench_cfg;

int lg_bench(const lg_bench_cfg *cfg, lg_engine_result *res, char *err, size_t errlen);
void lg_report_bench(FILE *out, const lg_bench_cfg *cfg, const lg_engine_result *r, int json);

#endif
