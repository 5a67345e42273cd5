/* svc_test.h — helpers for the service tests: start miaosha-server as a
 * child process on a loopback port the kernel picks, talk to it with libcurl, fire
 * concurrent bursts, stop it by its PID with SIGTERM. */
#ifndef MIAOSHA_SVC_TEST_H
#define MIAOSHA_SVC_TEST_H

#include <pthread.h>
#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "tu.h"

typedef struct svc_server {
    pid_t pid;
    int port;
    int redis_port;
    char dir[256]; /* temp dir: server.log */
    char log[300];
} svc_server;

/* Starts the server against 127.0.0.1:redis_port with extra flags
 * (NULL-terminated, may be NULL) with --port 0, reads the port it bound
 * from its "listening on ... port N" log line, and waits until /healthz
 * answers (any status) — up to 10 s. Returns 0, or -1 (the log is printed).
 * Started with the process kit (pk_spawn, then pk_http_wait_healthy) and
 * PK_SPAWN_DIE_WITH_PARENT: the server dies with the test, also when the
 * test crashes. Call from the test's main thread (the kit's child table is
 * not locked). */
int svc_start(svc_server *s, int redis_port, const char *const *extra);
/* SIGTERM (and SIGCONT, in case a test paused it), then waits up to
 * tu_slack(timeout_ms); returns the exit status, or -1 (killed with
 * SIGKILL) when it did not exit in time, -2 for a signal. Once the child is
 * gone (here or in svc_wait_exit), a ThreadSanitizer report in its log is a
 * test failure. */
int svc_stop(svc_server *s, int timeout_ms);
/* Waits (up to timeout_ms) for the child to exit by itself; exit status as
 * svc_stop, or -1 on timeout (the child is then left running). */
int svc_wait_exit(svc_server *s, int timeout_ms);
/* Runs the server to its end in the foreground with args (NULL-terminated),
 * its stdout and stderr both into out (len bytes, NUL-terminated, cut short
 * where it does not fit): for the runs that exit at start (config errors,
 * --help). Returns the exit status, -2 when a signal ended it, or -1 when
 * it still ran after limit_ms (then killed with SIGKILL and reaped), it
 * could not be started or no temp file could be made (the reason in out).
 * Started with the process kit (pk_spawn) and PK_SPAWN_DIE_WITH_PARENT.
 * Call from the test's main thread. */
int svc_run_exit(const char *const *args, int64_t limit_ms, char *out, size_t len);
/* Prints the server's log to stderr. */
void svc_dump_log(const svc_server *s);
/* 1 when the server's log contains needle. */
int svc_log_has(const svc_server *s, const char *needle);

typedef struct svc_resp {
    long status; /* 0 when the request failed */
    char *body;  /* NUL-terminated, malloc'd */
    size_t len;
    char allow[128];   /* Allow header */
    char ctype[128];   /* Content-Type header */
    char replayed[16]; /* Idempotent-Replayed header, "" when absent */
    char www_auth[64]; /* WWW-Authenticate header, "" when absent */
    double ms;         /* total time */
    cJSON *json;       /* parsed body or NULL */
} svc_resp;

/* One request. method "GET", "POST", "PUT", "DELETE", "HEAD"; body may be
 * NULL; auth may be NULL (else the Authorization header value). */
int svc_req(const svc_server *s, const char *method, const char *path, const char *body,
            const char *auth, svc_resp *out);
/* One request without a body with extra request header lines ("Name:
 * value", several separated by '\n', each under 512 bytes; NULL = none). */
int svc_req_hdr(const svc_server *s, const char *method, const char *path, const char *header,
                svc_resp *out);
/* Same on a reusable keep-alive handle (*handle NULL at first; release it
 * with svc_handle_free). */
int svc_req_keep(void **handle, const svc_server *s, const char *method, const char *path,
                 svc_resp *out);
void svc_handle_free(void *handle);
/* One request on a thread of its own, for a buyer that holds its lock
 * while the test goes on: set s, method (NULL: "GET") and path, then
 * svc_bg_start; svc_bg_join waits for the reply in r (free it with
 * svc_resp_free). */
typedef struct svc_bg {
    const svc_server *s;
    const char *method;
    char path[256];
    svc_resp r;
    pthread_t th;
} svc_bg;
/* 0 once the thread runs the request; -1 when no thread could start. */
int svc_bg_start(svc_bg *b);
void svc_bg_join(svc_bg *b);
void svc_resp_free(svc_resp *r);
/* The body, never NULL (for messages). */
static inline const char *B(const svc_resp *r)
{
    return r->body ? r->body : "";
}

/* JSON field helpers (NULL/-1e18 when absent). */
const char *svc_jstr(const cJSON *o, const char *key);
double svc_jnum(const cJSON *o, const char *key);
int svc_jbool(const cJSON *o, const char *key); /* 1, 0, or -1 absent */
/* 1 when the reply's "error" is exactly error. */
int svc_jerr_is(const svc_resp *r, const char *error);
/* 1 when the reply's "detail" contains part. */
int svc_jdetail_has(const svc_resp *r, const char *part);

/* Fires n requests at once from n threads behind a barrier; out[n]. */
void svc_burst(const svc_server *s, const char *method, char **paths, int n, svc_resp *out);

/* PUT /stock/{sku} {"stock":n}; returns the status. */
long svc_set_stock(const svc_server *s, const char *sku, long long n, const char *auth);
/* GET /stock/{sku}: fills the audit; returns the status. */
typedef struct svc_audit {
    long long stock, initial, sold, orders, oversold, undersold;
} svc_audit;
long svc_get_audit(const svc_server *s, const char *sku, svc_audit *a);

/* n resets of sku at once (PUT /stock/{sku}: reset i's stock 100 + i in
 * 1 + 7i mod 16 buckets): 0 when every one answered 200 and the SKU is
 * then exactly one of them — the audit's initial names it, and its
 * buckets are that reset's count, each with that reset's share — else -1
 * with what was not, in why (len bytes). */
int svc_reset_storm(const svc_server *s, const char *sku, int n, char *why, size_t len);

/* cmdstat_<cmd>:calls= from the INFO commandstats of the redis-server on
 * 127.0.0.1:redis_port (cmd lower-case, as Redis names it): 0 when cmd
 * never ran, -1 when Redis did not answer. */
long long svc_redis_calls(int redis_port, const char *cmd);

/* Waits (up to tu_slack(10 s)) until /stats says want purchases are in
 * flight: those running plus those queued for a worker. 1 when it did. */
int svc_wait_inflight(const svc_server *s, int want);

#endif
