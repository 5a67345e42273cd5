/* pk_http.h — HTTP servers that a test or a tool starts (miaosha-server,
 * mostly): whether one answers, and the wait from "spawned" to "healthy",
 * with the port read from its log when it bound port 0 (the kernel's
 * choice, so a test never talks to another test's server). Start one with
 * pk_spawn (pk_proc.h), then pk_http_wait_healthy: the one such loop in C
 * in this repository (the service's tests, the matrix, miaosha-reqfuzz).
 *
 * Plain sockets, not libcurl: the kit stays free of the load generator
 * and of libcurl's global state, and a health check needs the status line
 * only. Loopback (127.0.0.1) only.
 */
#ifndef MIAOSHA_PK_HTTP_H
#define MIAOSHA_PK_HTTP_H

#include <signal.h>
#include <sys/types.h>

/* One "GET path HTTP/1.1" with "Connection: close" on a fresh connection
 * to 127.0.0.1:port; reads the reply to its end (the server's close) so
 * the server sees an orderly close, never a reset. timeout_ms bounds the
 * whole exchange. Returns the reply's status (100..599), or 0: refused,
 * no status line within timeout_ms, not HTTP, or a path over 900 bytes.
 * Any thread. */
int pk_http_status(int port, const char *path, int timeout_ms);

/* The port a server announced in its log: on the first line of logpath
 * that holds `after`, the number after the next " port " (miaosha-server
 * logs "... listening on 127.0.0.1 port 41234 ..."; after "listening on ").
 * Returns it (> 0), or 0 while no such line is there (or the file cannot
 * be read). Any thread. */
int pk_log_port(const char *logpath, const char *after);

/* pk_http_wait_healthy's options; pk_http_wait_opts_init sets the
 * defaults named. */
typedef struct pk_http_wait_opts {
    const char *path;            /* GET this (default "/healthz") */
    int want_status;             /* the answer that counts (default 200); 0: any
                                    HTTP status (a server whose health depends
                                    on something that may be down on purpose) */
    int timeout_ms;              /* the whole wait (default 10000) */
    int try_timeout_ms;          /* one GET (default 1000) */
    int poll_ms;                 /* pause between tries (default 20) */
    const char *port_log;        /* when *port is 0: the log the server announces
                                    its port in (pk_log_port) ... */
    const char *port_after;      /* ... after this text (default "listening on ") */
    volatile sig_atomic_t *stop; /* may be NULL; non-zero ends the wait (a
                                    Ctrl-C handler sets it) */
} pk_http_wait_opts;

/* Fills o with the defaults above (port_log NULL, stop NULL). */
void pk_http_wait_opts_init(pk_http_wait_opts *o);

/* pk_http_wait_healthy's results. */
#define PK_HTTP_HEALTHY 1 /* GET path answered want_status */
#define PK_HTTP_TIMEOUT                                                                            \
    0 /* not within timeout_ms, or o->stop was set: the                                            \
         child still runs, the caller stops it */
#define PK_HTTP_EXITED                                                                             \
    (-1) /* the child exited first (reaped; its wait                                               \
            status in *status) */

/* Waits until the server on 127.0.0.1:*port answers GET o->path with
 * o->want_status, polling every o->poll_ms, for at most o->timeout_ms (a
 * try under way may run over by up to o->try_timeout_ms). pid: the child
 * serving it (pk_spawn), checked (and reaped when it exits) between tries;
 * <= 0 when the server is not our child. *port: its port, or 0 when the
 * server bound port 0: then read from o->port_log each try until it shows
 * up there, and *port set. Returns PK_HTTP_HEALTHY, PK_HTTP_TIMEOUT or
 * PK_HTTP_EXITED (*status, which may be NULL, gets the wait status; -1
 * when pid was not our child). The thread that reaps the children. */
int pk_http_wait_healthy(pid_t pid, int *port, const pk_http_wait_opts *o, int *status);

#endif
