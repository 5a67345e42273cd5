/* svc.h — the service's settings and the size limits every module shares.
 * The sources and what each does: service/README.md, "Sources". */
#ifndef MIAOSHA_SVC_H
#define MIAOSHA_SVC_H

#include <stddef.h>
#include <stdint.h>

#include <lockcore.h>

#include "svc_log.h"

#define SVC_SKU_MAX 64  /* [A-Za-z0-9_-]{1,64} */
#define SVC_KEY_MAX 96  /* "miaosha:{<sku>}:initial" fits */
#define SVC_UUID_LEN 37 /* 36 characters + NUL */

/* Everything the service reads from the configuration, in the service's own
 * terms (main.c fills it from cfg_config). Read-only after start; every
 * request points to the one it runs under (svc_req.s). */
typedef struct svc_settings {
    const char *listen_addr;
    int port;
    int http_threads;  /* libmicrohttpd thread pool */
    int workers;       /* purchase worker threads */
    int admin_workers; /* stock/audit/orders worker threads */
    int max_queue;     /* per pool: requests waiting for a worker */
    int max_connections;
    int connection_timeout_s;
    size_t header_limit;    /* request line + headers (+64 per field); 431 above */
    size_t max_body;        /* 413 above this */
    size_t max_uri;         /* 414 above this */
    int command_timeout_ms; /* Redis round-trip timeout per command */
    int sentinel;           /* the master comes from Sentinels (it may move) */
    int wait_replicas;      /* WAIT for this many replicas after a write; 0 = no */
    int wait_timeout_ms;    /* that WAIT's timeout */
    const char *default_sku;
    long long initial_stock; /* seeded for default_sku when absent; < 0 = never */
    int64_t lease_ms;        /* setnx/token/fenced/redlock default lease */
    int64_t wait_ms;         /* default lock wait */
    int64_t work_ms;         /* default simulated work */
    int pipeline;            /* default: lock and Redis commands share round trips */
    const char *admin_token; /* NULL or "" = no admin auth */
    int faults_enabled;
    const char *instance_id;
    int access_log;
    svc_level log_level; /* lines below it are dropped */
    /* caps on the per-request overrides (inclusive) */
    int64_t max_work_ms;
    int64_t max_lease_ms;
    int64_t max_wait_ms;
    int max_reenter;
    /* the purchase trace (svc_trace.h) */
    int trace_enabled;   /* default of ?trace= */
    int trace_ring_size; /* records per SKU */
    int trace_max_skus;  /* SKUs with a ring */
    /* one buy per user, Idempotency-Key, local sold-out flag */
    long long limit_per_user; /* orders per ?user= and SKU; 0 = unlimited */
    int64_t idem_ttl_ms;      /* a stored Idempotency-Key outcome's lifetime */
    int local_sold_out;       /* answer a SKU seen sold out from memory */
} svc_settings;

#endif
