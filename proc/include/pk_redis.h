/* pk_redis.h — private redis-servers for tests and tools: start one on
 * loopback and wait until it answers PING, and talk to any Redis on
 * 127.0.0.1 with one-shot commands. The one starter of a redis-server in
 * C in this repository (tu_redis_start, the matrix, miaosha-reqfuzz and
 * pk_ha all go through it); general enough for any topology built of
 * redis-servers: extra arguments override the kit's own, and a given port
 * is kept (a restart, or a node whose port others already know).
 *
 * Children as pk_proc.h says: the caller's session, stopped by PID, from
 * the thread that reaps them. The query functions may run on any thread.
 */
#ifndef MIAOSHA_PK_REDIS_H
#define MIAOSHA_PK_REDIS_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

struct redisContext; /* hiredis */

/* pk_redis_start's options; pk_redis_opts_init sets the defaults named. */
typedef struct pk_redis_opts {
    const char *server;          /* binary, PATH searched; NULL: "redis-server" */
    int port;                    /* > 0: exactly this port (a restart keeps its
                                    port); 0: a free port per attempt */
    const char *dir;             /* --dir: an existing directory (the AOF or RDB
                                    goes there); not NULL */
    const char *conf;            /* a configuration file, given first as
                                    redis-server wants it (the options below
                                    override it; a Sentinel rewrites it);
                                    NULL: none */
    const char *const *args;     /* more arguments after the kit's own
                                    (--port --bind 127.0.0.1 --dir --save ""
                                    --daemonize no), which they may override
                                    ("--sentinel" makes it a Sentinel);
                                    NULL-terminated, at most 51, may be NULL */
    const char *logpath;         /* its output, appended; NULL: /dev/null */
    int flags;                   /* pk_spawn flags (PK_SPAWN_DIE_WITH_PARENT) */
    int attempts;                /* >= 1 (default 1) */
    int timeout_ms;              /* per attempt, until PING answers (default 10000) */
    int retry_pause_ms;          /* before another attempt on the same port: its
                                    old socket may linger (default 200) */
    volatile sig_atomic_t *stop; /* may be NULL; non-zero ends the wait (failure:
                                    a Ctrl-C handler sets it) */
} pk_redis_opts;

/* Fills o with the defaults above (server "redis-server", everything else
 * 0 or NULL). */
void pk_redis_opts_init(pk_redis_opts *o);

/* Starts redis-server on 127.0.0.1 (--daemonize no: a daemon would leave
 * the caller's session) and waits until it answers PING, polling every
 * 50 ms, and checks that the server answering is this child (INFO
 * server's process_id: a port another server took meanwhile answers PING
 * too): blocks up to about attempts x (timeout_ms + retry_pause_ms + 1 s
 * to stop a server that did not answer). An attempt whose server exits
 * (its port was taken, bad arguments), does not answer in time, or whose
 * port another server answers on is stopped and the next attempt made.
 * Returns the pid (> 0, a child the caller stops: pk_stop, pk_kill) and
 * sets *port, or -1 with a reason in err (errlen bytes): the log or fork
 * failed, no free port, every attempt failed (the last one's reason, with
 * the log's path), or o->stop was set ("interrupted"). The thread that
 * reaps the children. */
pid_t pk_redis_start(const pk_redis_opts *o, int *port, char *err, size_t errlen);

/* 1 when 127.0.0.1:port answers a Redis PING with PONG within timeout_ms
 * (for the connect and for the reply each), else 0. Any thread. */
int pk_redis_ping(int port, int timeout_ms);

/* A fresh hiredis connection to 127.0.0.1:port; timeout_ms bounds the
 * connect and every reply. NULL when Redis does not answer. The caller
 * owns it (redisFree). Any thread. */
struct redisContext *pk_redis_connect(int port, int timeout_ms);

/* One Redis command on a fresh connection to 127.0.0.1:port, for a test's
 * or a fault scenario's look at the data (not for speed). argv: argc
 * strings, sent as a RESP array. The reply goes to out as text: a status
 * or bulk string as is, an integer in decimal, an array as its elements
 * joined by '\n' (flat arrays of strings and integers only), cut to
 * outlen - 1 bytes if longer (still a value). timeout_ms bounds the
 * connect and the reply. Returns 1 (a value), 0 (nil), or -1 (an error
 * reply, no answer within timeout_ms, a nested array, or outlen 0); out is
 * "" unless 1. Any thread. */
int pk_redis_query(int port, int timeout_ms, int argc, const char *const argv[], char *out,
                   size_t outlen);

#endif
