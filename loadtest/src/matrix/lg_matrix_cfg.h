/* lg_matrix_cfg.h — what the oversell matrix is made of: the lock modes and
 * scenarios with their names, the run's configuration (lg_matrix_cfg), one
 * cell's measured result (lg_cell) and the whole result. Shared by the
 * runner (lg_matrix.h), the fault scenarios (lg_fault.h), process control
 * (lg_mx_proc.h) and the report room, so none of them depends on another
 * for these types; and the text appender lg_addf they share. Implemented in
 * lg_matrix_cfg.c.
 *
 * Threads: the functions here are pure or touch only the cfg they are given;
 * call them from the thread that owns that cfg.
 */
#ifndef MIAOSHA_LG_MATRIX_CFG_H
#define MIAOSHA_LG_MATRIX_CFG_H

#include <signal.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

/* The purchase modes, in the order of the service's URL segments: the lock
 * modes (fenced: token's lock plus a fencing token the store checks), then
 * lua (no lock: one atomic script, the row every lock is measured
 * against). */
typedef enum lg_mode {
    LG_MODE_NONE,
    LG_MODE_MUTEX,
    LG_MODE_SETNX,
    LG_MODE_TOKEN,
    LG_MODE_REENTRANT,
    LG_MODE_REDLOCK, /* needs the matrix's lock masters (lg_mx_proc.h) */
    LG_MODE_FENCED,
    LG_MODE_LUA,
    LG_NMODES /* how many */
} lg_mode;

/* The scenarios: the demo first, then the faults. */
typedef enum lg_scenario {
    LG_SCEN_RACE,
    LG_SCEN_MULTI,
    LG_SCEN_SLOW,
    LG_SCEN_CRASH,
    LG_SCEN_NESTED,
    LG_SCEN_DUP_USER, /* one buy per user: 5 concurrent clicks each */
    LG_SCEN_RETRY,    /* a client timeout retried, with and without a key */
    LG_SCEN_BUCKETS,  /* the race on a SKU split into 4 stock buckets */
    LG_SCEN_KILL,     /* the first fault */
    LG_SCEN_REDIS_RESTART,
    LG_SCEN_REDIS_PAUSE,
    LG_SCEN_FAILOVER,         /* Sentinel failover loses a held lock (lg_failover.c);
                                 its own topology, only by name: --scenarios failover */
    LG_SCEN_MANUAL_FAILOVER,  /* SENTINEL FAILOVER loses acknowledged orders with
                                 wait_replicas=1, none with all (lg_acked.c); its
                                 own topology, only by name */
    LG_SCEN_RESUME_FAILOVER,  /* the same with the master paused and resumed
                                 during the failover */
    LG_SCEN_CLUSTER_FAILOVER, /* a Redis Cluster master killed before the lock
                                 reached its replica (lg_cluster.c); a cluster
                                 per cell, only by name */
    LG_SCEN_RESHARD,          /* a burst while its slot moves to another master
                                 (lg_cluster.c); one cluster for every mode,
                                 only by name */
    LG_SCEN_NODES_DOWN,       /* the first of the redlock scenarios (lg_nodes.c) */
    LG_SCEN_NODE_RESTART,
    LG_SCEN_NODE_RESTART_DELAY,
    LG_NSCEN /* how many */
} lg_scenario;

#define LG_NDEMO LG_SCEN_KILL /* the default selection: the demo scenarios */
#define LG_MATRIX_MAX_ARGS 32

/* 1 for kill, redis-restart and redis-pause. Pure. */
static inline int lg_scen_is_fault(lg_scenario s)
{
    return s >= LG_SCEN_KILL && s <= LG_SCEN_REDIS_PAUSE;
}

/* 1 for manual-failover and resume-failover: one topology and one failover
 * for every mode of the scenario at once (lg_acked.c); selected by name
 * only. Pure. */
static inline int lg_scen_is_acked(lg_scenario s)
{
    return s == LG_SCEN_MANUAL_FAILOVER || s == LG_SCEN_RESUME_FAILOVER;
}

/* 1 for cluster-failover and reshard: the Redis Cluster scenarios
 * (lg_cluster.c), on clusters of their own; selected by name only. Pure. */
static inline int lg_scen_is_cluster(lg_scenario s)
{
    return s == LG_SCEN_CLUSTER_FAILOVER || s == LG_SCEN_RESHARD;
}

/* 1 for nodes-down, node-restart and node-restart-delay: faults of the
 * redlock row's lock masters, run for the redlock mode only (the other
 * modes have no lock masters: their cells stay empty). Selected by name
 * only (--scenarios), neither in the default selection nor in --faults.
 * Pure. */
static inline int lg_scen_is_redlock(lg_scenario s)
{
    return s >= LG_SCEN_NODES_DOWN;
}

/* The names used on the command line, in files and in SKUs, indexed by
 * lg_mode / lg_scenario: "none" .. "reentrant", "redlock", "fenced", "lua",
 * "race" .. "retry", "buckets", "kill" .. "redis-pause", "failover",
 * "manual-failover", "resume-failover", "cluster-failover", "reshard",
 * "nodes-down", "node-restart", "node-restart-delay". */
extern const char *const lg_mode_names[LG_NMODES];
extern const char *const lg_scen_names[LG_NSCEN];

#define LG_MATRIX_URL_MAX 64 /* bytes, NUL included: an instance's or --target's URL */

typedef struct lg_matrix_cfg {
    const char *server;       /* miaosha-server binary */
    const char *redis;        /* "host:port" or NULL = private redis-server */
    const char *redis_server; /* binary for the private one */
    const char *out_dir;
    int quick;
    int mode_on[LG_NMODES];  /* indexed by lg_mode: 1 = run it */
    int scen_on[LG_NSCEN];   /* indexed by lg_scenario */
    const char *target;      /* NULL, or a balancer's URL ("http://host:port",
                                < LG_MATRIX_URL_MAX bytes) in front of several instances on
                                one Redis: the multi scenario goes through
                                it instead of three instances of its own */
    const char *admin_token; /* Bearer token for PUT /stock, or NULL */
    const char *server_args[LG_MATRIX_MAX_ARGS];
    int nserver_args;
    double time_factor; /* >= 1: scales the fault scenarios' upper time
                           bounds (sanitizer builds run slower) */
    volatile sig_atomic_t *stop;
    FILE *log;        /* progress lines; NULL = quiet */
    int trials;       /* 1..LG_MATRIX_MAX_TRIALS: each cell runs this many times */
    const char *lang; /* "en" (also NULL) or "zh": the timeline pages' language */
    int no_timelines; /* 1: write no timeline-<scenario>-<mode>.html */
    int buckets;      /* 0, or 2..64: the dup-user and retry cells' SKUs split
                         into that many stock buckets (the buckets scenario
                         always has 4) */
} lg_matrix_cfg;

#define LG_MATRIX_MAX_TRIALS 1000

typedef struct lg_cell {
    int ran;
    const char *expected; /* "oversell", "exact", "stuck", "recovers", "sells", "blocks",
                             "one-each", "duplicates" (dup-user), "once", "twice"
                             (retry), "safe" (faults), "lost-at-1" (manual-failover,
                             resume-failover: 200s lost with wait_replicas=1, none
                             with all) */
    char outcome[24];     /* measured, same vocabulary, or "short", "unsafe", "error";
                             "kept" or "lost-at-all" for the two above */
    int pass;
    int64_t stock, sold, stock_left, oversold, undersold;
    uint64_t requests, ok, sold_out, lock_busy, errors, lock_lost, dup;
    uint64_t acked_lost;       /* 200s whose order is not in the final list (the CSV
                                  also keeps this as missing_orders) */
    uint64_t acked_over_stock; /* distinct 200s beyond the stock the cell began with */
    /* manual-failover, resume-failover: acked_lost and acked_over_stock
     * above are the wait_replicas=1 instance's, these the all instance's;
     * late_writes are the data writes the old master executed for the
     * cell's SKUs after the first +switch-master, the last one
     * late_write_ms after it (-1: not measured) */
    int64_t acked_lost_all, acked_over_stock_all, late_writes, late_write_ms;
    uint64_t deleted_other_lock; /* releases that deleted a later holder's lock */
    uint64_t fenced_out;         /* 409 fenced_out: stale writes the fence refused */
    uint64_t sold_out_local;     /* of sold_out, answered from an instance's local
                                    sold-out flag (never traced); 0 when not counted */
    uint64_t doubles;            /* retry: buyers with two orders in the run without keys */
    int stuck;                   /* crash: no sale within the window */
    int64_t recovery_ms;         /* crash: first sale after the crash; -1 none */
    int64_t window_ms;           /* crash: observation window */
    double elapsed_s;
    /* fault scenarios (-1 = not measured / not applicable) */
    int64_t fault_ms;      /* how long the fault lasted: instance down until
                              healthy again, Redis down, Redis paused */
    int64_t freed_ms;      /* kill: the dead holder's lock gone after the kill */
    int64_t failfast_ms;   /* redis-*: slowest 503 of the probes during the fault */
    int64_t reconnect_ms;  /* redis-restart: every instance answers a purchase
                              without 503 again, after Redis answered PING */
    int64_t resume_ms;     /* first sale after the fault ended */
    uint64_t n503;         /* 503 redis_unavailable seen by the burst */
    uint64_t unacked;      /* orders recorded whose response never came */
    int has_latency;       /* the cell ran a burst: p50_ms, p99_ms are measured */
    double p50_ms, p99_ms; /* purchase latency of the burst, client side */
    int timeline;          /* timeline-<scenario>-<mode>.html written (first trial) */
    char reason[360];      /* short, measured */
} lg_cell;

typedef struct lg_matrix_result {
    lg_cell cell[LG_NSCEN][LG_NMODES];    /* [lg_scenario][lg_mode]: the first trial */
    int ntrials;                          /* cfg->trials (1 when it was 0) */
    lg_cell (*more)[LG_NSCEN][LG_NMODES]; /* trials 2..ntrials, ntrials - 1 of them
                                             (malloc'd; NULL when ntrials is 1):
                                             lg_matrix_trial, lg_matrix_result_free */
    int mismatches;                       /* trials whose outcome differs, over every cell */
    double elapsed_s;
    char redis[96];
} lg_matrix_result;

/* Trial k (0 = the first, < r->ntrials) of the cell [s][m]. Pure. */
const lg_cell *lg_matrix_trial(const lg_matrix_result *r, int k, lg_scenario s, lg_mode m);
/* Frees r->more (the result itself is the caller's). */
void lg_matrix_result_free(lg_matrix_result *r);

/* Defaults: every mode, the demo scenarios, a private redis-server
 * ("redis-server" from PATH), out_dir "matrix-out", time_factor 1,
 * 1 trial, timelines in English. */
void lg_matrix_cfg_init(lg_matrix_cfg *c);
/* 1 when any of the fault scenarios (kill, redis-restart, redis-pause) is on. Pure. */
int lg_matrix_has_faults(const lg_matrix_cfg *c);
/* Selects exactly the fault scenarios (`matrix --faults`). */
void lg_matrix_select_faults(lg_matrix_cfg *c);
/* Restricts to a comma list of modes and/or scenarios (either may be NULL:
 * that part unchanged). 0, or -1 with "unknown name '...'" in err (errlen
 * bytes); a list with an unknown name leaves its part unchanged. */
int lg_matrix_select(lg_matrix_cfg *c, const char *modes, const char *scens, char *err,
                     size_t errlen);
/* Finds miaosha-server next to this program: ../service/miaosha-server
 * relative to the directory of /proc/self/exe (argv0 when that cannot be
 * read). 0 with the path in buf (len bytes), or -1 when it is not an
 * executable file there. */
int lg_matrix_default_server(const char *argv0, char *buf, size_t len);

/* Appends printf-style text to the NUL-terminated string in buf (len bytes
 * in all), cutting it short where it does not fit; does nothing when buf is
 * already full. The fault and redlock cells build their reasons and notes
 * with it. Touches only buf; any thread. */
void lg_addf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
