/* lg_matrix.h — the oversell matrix: every mode through every scenario,
 * each cell measured against real miaosha-server processes that the matrix
 * starts, kills and restarts itself (children on free 127.0.0.1 ports,
 * stopped by PID), on one Redis (given, or a private redis-server it
 * starts). Progress lines go to cfg->log (main passes stderr); results are
 * returned and written by lg_matrix_write_files.
 */
#ifndef MIAOSHA_LG_MATRIX_H
#define MIAOSHA_LG_MATRIX_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#define LG_NMODES 5
#define LG_NSCEN 5
#define LG_MATRIX_MAX_ARGS 32

extern const char *const lg_mode_names[LG_NMODES];  /* none mutex setnx token reentrant */
extern const char *const lg_scen_names[LG_NSCEN];   /* race multi slow crash nested */

typedef struct lg_matrix_cfg {
    const char *server;        /* miaosha-server binary */
    const char *redis;         /* "host:port" or NULL = private redis-server */
    const char *redis_server;  /* binary for the private one */
    const char *out_dir;
    int quick;
    int mode_on[LG_NMODES];
    int scen_on[LG_NSCEN];
    const char *server_args[LG_MATRIX_MAX_ARGS];
    int nserver_args;
    volatile sig_atomic_t *stop;
    FILE *log;                 /* progress lines; NULL = quiet */
} lg_matrix_cfg;

typedef struct lg_cell {
    int ran;
    const char *expected;      /* "oversell", "exact", "stuck", "recovers", "sells", "blocks" */
    char outcome[24];          /* measured, same vocabulary, or "short", "unsafe", "error" */
    int pass;
    int64_t stock, sold, stock_left, oversold, undersold;
    uint64_t requests, ok, sold_out, lock_busy, errors, lock_lost, dup, missing;
    int stuck;                 /* crash: no sale within the window */
    int64_t recovery_ms;       /* crash: first sale after the crash; -1 none */
    int64_t window_ms;         /* crash: observation window */
    double elapsed_s;
    char reason[240];          /* short, measured */
} lg_cell;

typedef struct lg_matrix_result {
    lg_cell cell[LG_NSCEN][LG_NMODES];
    int mismatches;
    double elapsed_s;
    char redis[96];
} lg_matrix_result;

void lg_matrix_cfg_init(lg_matrix_cfg *c);
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
