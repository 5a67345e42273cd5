/* lg_mx_proc.h — the matrix's processes: its miaosha-server instances and
 * its private redis-server (start, health poll, stop, restart), and the
 * context every scenario carries (the configuration, the Redis address,
 * where the logs go). Private to the matrix room: the runner (lg_matrix.c)
 * and the fault scenarios (lg_fault.c) use it; it uses neither. The
 * generic part (ports, spawn, stop by PID, PING, the wait for /healthz)
 * is the process kit, proc/ (pk_proc.h, pk_redis.h, pk_http.h).
 *
 * Threads: everything here runs on the matrix's main thread, which also
 * reaps the children (pk_proc.h), unless a comment says otherwise.
 */
#ifndef MIAOSHA_LG_MX_PROC_H
#define MIAOSHA_LG_MX_PROC_H

#include <limits.h>
#include <sys/types.h>

#include "lg_matrix_cfg.h"
#include "lg_run.h"

#define LG_INSTANCE_MAX_EXTRA 16

/* One miaosha-server child. Each (re)start gets instance id
 * "<id>-g<generation>" (a restarted process is a new holder) and keeps its
 * port when it can. */
typedef struct instance {
    pid_t pid;                    /* 0 when not running */
    int port;                     /* 0: pick a free one at the next start */
    char base[LG_MATRIX_URL_MAX]; /* "http://127.0.0.1:<port>" once spawned */
    char id[48];
    const char *extra[LG_INSTANCE_MAX_EXTRA]; /* "--set", "k=v" pairs */
    int nextra;
    int generation;
} instance;

#define LG_LOCK_MASTERS 5 /* the redlock row's independent lock masters */

typedef struct mctx {
    const lg_matrix_cfg *cfg;
    char redis_addr[64]; /* "host:port" the instances get */
    int redis_port;
    pid_t redis_pid;       /* private redis-server, 0 when not ours or down */
    int redis_aof;         /* private one runs with appendonly yes, fsync always */
    char redis_dir[256];   /* its working directory (mkdtemp), "" when none */
    char logdir[PATH_MAX]; /* every child's log: <logdir>/<id>.log, redis.log */
    /* The redlock row's lock masters: private redis-servers without
     * persistence, started only when that row runs (lock_on). Every
     * instance then gets redlock.nodes = lock_nodes. */
    int lock_on;
    int lock_port[LG_LOCK_MASTERS];
    pid_t lock_pid[LG_LOCK_MASTERS]; /* 0 when down */
    char lock_dir[LG_LOCK_MASTERS][64];
    char lock_nodes[LG_LOCK_MASTERS * 24 + 32]; /* "redlock.nodes=127.0.0.1:p,..." */
} mctx;

/* One progress line "matrix: ..." to cfg->log (nothing when it is NULL). */
void lg_mx_log(const mctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 once Ctrl-C (cfg->stop) was seen. Any thread. */
int lg_mx_stopped(const mctx *x);
/* An upper time bound (ms) scaled by cfg->time_factor. Pure; any thread. */
long long lg_mx_bound(const mctx *x, long long ms);

/* Starts the instance and waits up to 10 s for /healthz 200; retries on
 * another port (3 attempts) when it exits at start. 0, or -1 with a reason
 * in err (errlen bytes): it would not start, did not answer, or Ctrl-C. */
int lg_mx_instance_start(mctx *x, instance *in, char *err, size_t errlen);
/* Only spawns it on in->port (a free one when <= 0), new generation; the
 * caller polls lg_mx_instance_poll. 0, or -1 with a reason (no free port,
 * fork or log file failed). */
int lg_mx_instance_spawn(mctx *x, instance *in, char *err, size_t errlen);
/* One /healthz check (blocks up to 500 ms): 1 healthy, 0 not yet, -1 the
 * process exited (in->pid is then 0) or was not running. */
int lg_mx_instance_poll(instance *in);
/* Waits up to ms (pk_http_wait_healthy: /healthz 200, polled every 20 ms;
 * Ctrl-C ends it): 1 healthy, 0 not in time or Ctrl-C (still running),
 * -1 the process exited (in->pid is then 0) or was not running. */
int lg_mx_instance_wait(mctx *x, instance *in, long long ms);
/* Stops it (pk_stop: SIGTERM, SIGKILL after 5 s); in->pid = 0. No-op when
 * it is not running. */
void lg_mx_instance_stop(instance *in);

/* The matrix's Redis: cfg->redis when given (only parsed: "host:port"),
 * else a private redis-server in a fresh /tmp directory on a free port
 * (5 attempts). 0, or -1 with a reason in err. */
int lg_mx_redis_start(mctx *x, char *err, size_t errlen);
/* (Re)starts the private redis-server on x->redis_port (a free port when
 * 0), with an AOF when x->redis_aof, and waits until it answers PING
 * (blocks up to ~10 s, less on Ctrl-C). 0 or -1 with a reason in err. */
int lg_mx_redis_spawn(mctx *x, char *err, size_t errlen);
/* Starts the LG_LOCK_MASTERS lock masters (each in a fresh /tmp
 * directory, on a free port, no RDB, no AOF), sets lock_on and
 * lock_nodes. 0, or -1 with a reason in err. */
int lg_mx_locks_start(mctx *x, char *err, size_t errlen);
/* (Re)starts lock master i on its port, empty (no persistence: what a
 * restart without AOF forgets), and waits until it answers PING. 0 or -1
 * with a reason in err. */
int lg_mx_lock_spawn(mctx *x, int i, char *err, size_t errlen);
/* SIGKILLs lock master i (a crash) and reaps it; lock_pid[i] = 0. */
void lg_mx_lock_kill(mctx *x, int i);

/* On the way out: stops the private redis-server and the lock masters,
 * every child still running (pk_kill_all), and removes their
 * directories. */
void lg_mx_shutdown(mctx *x);

/* rc->targets = the instances' base URLs, the first LG_MAX_TARGETS of
 * them. 0 or -1 (a URL lg_url_parse refuses, reason in err). */
int lg_mx_targets(lg_run_cfg *rc, const instance *ins, int nins, char *err, size_t errlen);

#endif
