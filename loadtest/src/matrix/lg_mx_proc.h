/* lg_matrix_int.h — what lg_matrix.c (the matrix, its demo scenarios and
 * its output) and lg_fault.c (the fault scenarios) share. Not a public API:
 * only these two files include it. Everything here runs on the matrix's
 * main thread (which also reaps the children), unless a comment says so.
 */
#ifndef MIAOSHA_LG_MATRIX_INT_H
#define MIAOSHA_LG_MATRIX_INT_H

#include <limits.h>
#include <sys/types.h>

#include "lg_matrix.h"
#include "lg_run.h"

enum { S_RACE, S_MULTI, S_SLOW, S_CRASH, S_NESTED, S_KILL, S_REDIS_RESTART, S_REDIS_PAUSE };
enum { M_NONE, M_MUTEX, M_SETNX, M_TOKEN, M_REENTRANT };

#define LG_IS_FAULT(s) ((s) >= S_KILL)
#define LG_INSTANCE_MAX_EXTRA 16

/* One miaosha-server child. Each (re)start gets instance id
 * "<id>-g<generation>" (a restarted process is a new holder) and keeps its
 * port when it can. */
typedef struct instance {
    pid_t pid;
    int port;
    char base[LG_MATRIX_URL_MAX];
    char id[48];
    const char *extra[LG_INSTANCE_MAX_EXTRA]; /* "--set", "k=v" pairs */
    int nextra;
    int generation;
} instance;

typedef struct mctx {
    const lg_matrix_cfg *cfg;
    lg_matrix_result *res;
    char redis_addr[64];
    int redis_port;
    pid_t redis_pid;     /* private redis-server, 0 when not ours or down */
    int redis_aof;       /* private one runs with appendonly yes, fsync always */
    char redis_dir[256];
    char logdir[PATH_MAX];
} mctx;

/* One progress line "matrix: ..." to cfg->log (nothing when it is NULL). */
void lg_mx_log(const mctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 once Ctrl-C (cfg->stop) was seen. */
int lg_mx_stopped(const mctx *x);
/* An upper time bound scaled by cfg->time_factor. */
long long lg_mx_bound(const mctx *x, long long ms);

/* Starts the instance and waits (10 s) for /healthz 200; retries on another
 * port when it exits at start. 0 or -1 with a reason. */
int lg_mx_instance_start(mctx *x, instance *in, char *err, size_t errlen);
/* Only spawns it on in->port (a free one when <= 0), new generation; the
 * caller polls lg_mx_instance_poll. 0 or -1. */
int lg_mx_instance_spawn(mctx *x, instance *in, char *err, size_t errlen);
/* One /healthz check (blocks up to 500 ms): 1 healthy, 0 not yet, -1 the
 * process exited (in->pid is then 0). */
int lg_mx_instance_poll(instance *in);
/* Stops it (lg_stop: SIGTERM, SIGKILL after a grace period); in->pid = 0.
 * No-op when it is not running. */
void lg_mx_instance_stop(instance *in);

/* (Re)starts the private redis-server on x->redis_port (a free port when
 * 0) and waits until it answers PING (blocks up to ~10 s). 0 or -1. */
int lg_mx_redis_spawn(mctx *x, char *err, size_t errlen);

/* Copies the run's counters and audit into the cell. */
void lg_mx_fill_from_run(lg_cell *c, const lg_run_result *r);
/* rc->targets = the instances' base URLs, the first LG_MAX_TARGETS of
 * them. 0 or -1 (a URL lg_url_parse refuses, reason in err). */
int lg_mx_targets(lg_run_cfg *rc, const instance *ins, int nins, char *err, size_t errlen);

/* lg_fault.c */
/* What the cell's result must be: a static string, one outcome or several
 * accepted ones separated by '|' (e.g. "safe|stuck"). */
const char *lg_fault_expected(int scen, int mode);
/* Fills the ids and server settings of the three fault instances. */
void lg_fault_instances(instance ins[3]);
/* Runs one fault cell over ins[0..2] (ins[2] is the one killed); starts and
 * joins its own load thread. 0, or -1 when it could not run at all (with a
 * reason). */
int lg_fault_cell(mctx *x, lg_cell *c, int scen, int mode, instance ins[3], char *err,
                  size_t errlen);

#endif
