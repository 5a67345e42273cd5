/* svc.h — private declarations shared by the service's modules.
 *
 * Modules:
 *   main.c          configuration, signals, start-up and graceful shutdown
 *   svc_http.c      libmicrohttpd daemon, routing, validation, responses
 *   svc_params.c    query-string and path validation
 *   svc_pool.c      worker pools (one lc_conn per worker thread)
 *   svc_purchase.c  POST|GET /miaosha/{mode}: the same code for every mode
 *   svc_stock.c     PUT|GET /stock/{sku}, GET /orders/{sku}, default seeding
 *   svc_health.c    background Redis probe behind GET /healthz
 *   svc_stats.c     counters, histograms, /stats JSON and /metrics text
 *   svc_log.c       one line per event on stderr
 */
#ifndef MIAOSHA_SVC_H
#define MIAOSHA_SVC_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <lockcore.h>

#define SVC_SKU_MAX 64     /* [A-Za-z0-9_-]{1,64} */
#define SVC_KEY_MAX 96     /* "miaosha:{<sku>}:initial" fits */
#define SVC_UUID_LEN 37    /* 36 characters + NUL */

typedef enum { SVC_DEBUG, SVC_INFO, SVC_WARN, SVC_ERROR } svc_level;

/* Everything the service reads from the configuration, in the service's own
 * terms (main.c fills it from cfg_config). Read-only after start. */
typedef struct svc_settings {
    const char *listen_addr;
    int port;
    int http_threads;         /* libmicrohttpd thread pool */
    int workers;              /* purchase worker threads */
    int admin_workers;        /* stock/audit/orders worker threads */
    int max_queue;            /* per pool: requests waiting for a worker */
    int max_connections;
    int connection_timeout_s;
    size_t header_limit;      /* request line + headers (+64 per field); 431 above */
    size_t max_body;          /* 413 above this */
    size_t max_uri;           /* 414 above this */
    int command_timeout_ms;   /* Redis; healthz staleness bound uses it */
    const char *default_sku;
    long long initial_stock;  /* seeded for default_sku when absent; < 0 = never */
    int64_t lease_ms;         /* setnx/token default lease */
    int64_t wait_ms;          /* default lock wait */
    int64_t work_ms;          /* default simulated work */
    const char *admin_token;  /* NULL or "" = no admin auth */
    int faults_enabled;
    const char *instance_id;
    int access_log;
    svc_level log_level;      /* lines below it are dropped */
    /* caps on the per-request overrides (inclusive) */
    int64_t max_work_ms;
    int64_t max_lease_ms;
    int64_t max_wait_ms;
    int max_reenter;
} svc_settings;

/* ---- log (svc_log.c) ---- */
void svc_log_set_level(svc_level lvl);
void svc_log(svc_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies untrusted text (a URL, a method) into dst for a log line: control
 * bytes, DEL, non-ASCII and '\' become \xNN, so it cannot end the line or
 * forge another; cut with "..." when dst is too small. len is dst's size in
 * bytes, NUL included: dst is always terminated when len > 0, untouched
 * when len == 0. Any thread. */
void svc_log_escape(char *dst, size_t len, const char *src);

/* ---- time ---- */
int64_t svc_now_us(void);      /* monotonic */
int64_t svc_wall_ms(void);     /* wall clock */

/* ---- keys ---- */
/* Writes "miaosha:{<sku>}:<suffix>" into buf (SVC_KEY_MAX bytes). */
void svc_key(char *buf, const char *sku, const char *suffix);

/* ---- small growable string (svc_stats.c) ---- */
typedef struct svc_buf {
    char *p;
    size_t len, cap;
    int oom;
} svc_buf;
void svc_buf_printf(svc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- shutdown coordination ---- */
/* Raised by svc_http_quiesce (svc_http.c) as soon as SIGTERM/SIGINT
 * arrives: every lc_acquire gets it as lc_lock_args.cancel, so a purchase
 * waiting for a lock gives up within LC_CANCEL_LATENCY_MS (and answers 503
 * shutting_down). Static storage, never NULL; any thread. */
const atomic_int *svc_cancel_flag(void);
/* 1 once in-flight work sleeps must stop (shortly before the exit deadline). */
int svc_abort_work(void);
/* Sleeps ms, waking early when svc_abort_work() becomes 1; returns 0 when the
 * full time elapsed, -1 when aborted. */
int svc_sleep_work(int64_t ms);

#endif
