/* lg_matrix.h — the oversell matrix: every mode through every scenario,
 * each cell measured against real miaosha-server processes that the matrix
 * starts, kills and restarts itself (children on free 127.0.0.1 ports,
 * stopped by PID), on one Redis (given, or a private redis-server it
 * starts). Progress lines go to cfg->log (main passes stderr); results are
 * returned and written by lg_matrix_write_files.
 *
 * Scenarios 0..4 are issue 4's demo (the default); 5..7 are issue 5's
 * faults (lg_fault.c: an instance kill -9'd while holding the lock, the
 * private redis-server SIGKILLed and restarted from its AOF, and paused
 * with SIGSTOP), selected with --faults or --scenarios.
 */
#ifndef MIAOSHA_LG_MATRIX_H
#define MIAOSHA_LG_MATRIX_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#define LG_NMODES 5
#define LG_NSCEN 8
#define LG_NDEMO 5          /* the default selection: scenarios 0..4 */
#define LG_MATRIX_MAX_ARGS 32

extern const char *const lg_mode_names[LG_NMODES];  /* none mutex setnx token reentrant */
extern const char *const lg_scen_names[LG_NSCEN];   /* race multi slow crash nested
                                                       kill redis-restart redis-pause */

#define LG_MATRIX_URL_MAX 64 /* bytes, NUL included: an instance's or --target's URL */

typedef struct lg_matrix_cfg {
    const char *server;        /* miaosha-server binary */
    const char *redis;         /* "host:port" or NULL = private redis-server */
    const char *redis_server;  /* binary for the private one */
    const char *out_dir;
    int quick;
    int mode_on[LG_NMODES];
    int scen_on[LG_NSCEN];
    const char *target;        /* NULL, or a balancer's URL ("http://host:port",
                                  < LG_MATRIX_URL_MAX bytes) in front of several instances on
                                  one Redis: the multi scenario goes through
                                  it instead of three instances of its own */
    const char *admin_token;   /* Bearer token for PUT /stock, or NULL */
    const char *server_args[LG_MATRIX_MAX_ARGS];
    int nserver_args;
    double time_factor;        /* >= 1: scales the fault scenarios' upper time
                                  bounds (sanitizer builds run slower) */
    volatile sig_atomic_t *stop;
    FILE *log;                 /* progress lines; NULL = quiet */
} lg_matrix_cfg;

typedef struct lg_cell {
    int ran;
    const char *expected;      /* "oversell", "exact", "stuck", "recovers", "sells", "blocks",
                                  "safe" (faults) */
    char outcome[24];          /* measured, same vocabulary, or "short", "unsafe", "error" */
    int pass;
    int64_t stock, sold, stock_left, oversold, undersold;
    uint64_t requests, ok, sold_out, lock_busy, errors, lock_lost, dup, missing;
    uint64_t deleted_other_lock; /* releases that deleted a later holder's lock */
    int stuck;                 /* crash: no sale within the window */
    int64_t recovery_ms;       /* crash: first sale after the crash; -1 none */
    int64_t window_ms;         /* crash: observation window */
    double elapsed_s;
    /* fault scenarios (-1 = not measured / not applicable) */
    int64_t fault_ms;          /* how long the fault lasted: instance down until
                                  healthy again, Redis down, Redis paused */
    int64_t freed_ms;          /* kill: the dead holder's lock gone after the kill */
    int64_t failfast_ms;       /* redis-*: slowest 503 of the probes during the fault */
    int64_t reconnect_ms;      /* redis-restart: every instance answers a purchase
                                  without 503 again, after Redis answered PING */
    int64_t resume_ms;         /* first sale after the fault ended */
    uint64_t n503;             /* 503 redis_unavailable seen by the burst */
    uint64_t unacked;          /* orders recorded whose response never came */
    char reason[240];          /* short, measured */
} lg_cell;

typedef struct lg_matrix_result {
    lg_cell cell[LG_NSCEN][LG_NMODES];
    int mismatches;
    double elapsed_s;
    char redis[96];
} lg_matrix_result;

void lg_matrix_cfg_init(lg_matrix_cfg *c);
/* 1 when any of the fault scenarios (kill, redis-restart, redis-pause) is on. */
int lg_matrix_has_faults(const lg_matrix_cfg *c);
/* Selects exactly the fault scenarios (`matrix --faults`). */
void lg_matrix_select_faults(lg_matrix_cfg *c);
/* Restricts to a comma list of modes and/or scenarios. 0 or -1 (err). */
int lg_matrix_select(lg_matrix_cfg *c, const char *modes, const char *scens, char *err,
                     size_t errlen);
/* Finds miaosha-server relative to argv0 (../service/miaosha-server) or the
 * current directory's build/; 0 and fills buf, or -1. */
int lg_matrix_default_server(const char *argv0, char *buf, size_t len);

/* Runs the selected cells. 0 (results filled) or -1 when it could not run
 * (no Redis, a server would not start), with a reason. Stops every child
 * it started before returning, in every case. */
int lg_matrix_run(const lg_matrix_cfg *cfg, lg_matrix_result *res, char *err, size_t errlen);

void lg_matrix_print(FILE *out, const lg_matrix_cfg *cfg, const lg_matrix_result *res);
/* matrix.md, matrix.csv, matrix.svg into cfg->out_dir. */
int lg_matrix_write_files(const lg_matrix_cfg *cfg, const lg_matrix_result *res, char *err,
                          size_t errlen);

#endif
