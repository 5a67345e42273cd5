/* svc_step.h — stepped purchases: a purchase that stops at each stage of
 * its critical section and waits to be told to go on, so that a learner
 * can be the scheduler of two buyers over the real Redis (pause A after
 * its read, let B read the same stock, let both write: the lost update).
 *
 *   POST|GET /miaosha/{mode}?step=1   starts one; its reply comes at done
 *   GET /steps                        every step, oldest first, and the
 *                                     Redis keys of their SKUs
 *   POST /steps/{id}/next             on to the next stage
 *   POST /steps/{id}/run              on to done
 *
 * The stages are points in the one critical section (svc_section.c calls
 * svc_step_pause at each), so a stepped purchase runs exactly the code a
 * normal one runs: start (nothing done yet) → locked → read → written (the
 * commit ran) → released → done. The lock-free lua mode goes start → done:
 * its script has no point between its read and its write. A stepped
 * purchase sends every stage on its own round trip (no pipelining) and its
 * first lock attempt leaves only when it is told to leave start.
 *
 * A stepped purchase never occupies a worker of the pool: each runs on a
 * thread of its own with a Redis connection of its own (a hiredis context
 * is not thread-safe), at most teach.max_steps at once, and its HTTP
 * request stays suspended until done, as the pool's do. While paused it
 * holds what it holds: a lease runs on (token's can run out: the lesson),
 * reentrant's watchdog renews. One left paused for teach.step_timeout_s
 * (counted from the later of its pause and the last next/run) is
 * abandoned: before its commit it releases its lock, writes nothing and
 * answers 409 step_abandoned; after its commit it releases and answers
 * what the commit did (the order exists). SIGTERM ends a paused one the
 * same way with 503 shutting_down.
 *
 * Finished steps stay listed (stage done, with their reply) until their
 * place is needed: 2 x teach.max_steps places in all.
 *
 * Threads: a mutex guards the table; every function says who may call it.
 * Nothing here logs or exits. */
#ifndef MIAOSHA_SVC_STEP_H
#define MIAOSHA_SVC_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "svc_outcome.h"
#include "svc_pool.h"
#include "svc_reply.h"

/* The stages, in order. */
typedef enum svc_stage {
    SVC_STAGE_START,    /* nothing done yet */
    SVC_STAGE_LOCKED,   /* the lock is held (every lock mode; none's holds nothing) */
    SVC_STAGE_READ,     /* the stock is read */
    SVC_STAGE_WRITTEN,  /* the commit ran (sold, or refused: fenced_out...) */
    SVC_STAGE_RELEASED, /* the lock is released */
    SVC_STAGE_DONE,     /* answered */
    SVC_STAGE_COUNT
} svc_stage;

typedef struct svc_step svc_step;

/* What the purchase knows when it reaches a stage, for GET /steps. A fact
 * not known yet keeps what an earlier stage said. */
typedef struct svc_step_facts {
    bool holds_lock;         /* it holds its lock now (none's holds nothing) */
    int64_t lease_gone_us;   /* fixed lease held: when it has certainly run
                                out (lc_now_us clock); 0 = no fixed lease */
    bool has_read;           /* read is the stock it read */
    long long read;          /* (a SKU never stocked reads 0) */
    bool has_written;        /* written is the stock its commit wrote */
    long long written;       /* (read - 1) */
    int64_t fence;           /* fenced: its fencing token; 0 = none */
    bool lock_lost;          /* as the reply's lock_lost, so far */
    bool deleted_other_lock; /* as the reply's, so far */
    const char *error;       /* the outcome's error code so far (static
                                string; fenced_out once the commit was
                                refused); NULL = none */
} svc_step_facts;

/* Sets the table up: teach.max_steps of s, teach.step_timeout_s, the
 * client each step's connection comes from, and done, called with a
 * step's request once its reply is stored (it resumes the connection;
 * never NULL). s and c must outlive the table. 0, or -1 when out of memory
 * (reason in err, errlen bytes). Main thread, before the first step; once. */
int svc_step_init(const cfg_config *s, lc_client *c, svc_pool_done_fn done, char *err,
                  size_t errlen);
/* Frees the table when no step runs (a running one keeps it: it is left
 * to the process's end). Main thread, after the HTTP daemon stopped. */
void svc_step_free(void);

/* Takes a place for r's stepped purchase (r->mode, r->sku and r->p
 * validated): the step, listed at start from now on, or NULL when
 * teach.max_steps run already (429 too_many_steps) or svc_step_init did
 * not run. Every step returned must be handed to svc_step_launch. The
 * HTTP thread that owns r. */
svc_step *svc_step_reserve(const svc_req *r);
/* Starts st's thread, which runs job(r, its connection) — svc_purchase_job
 * or svc_lua_job — once told to leave start, stores r's reply and calls
 * done(r). r's connection must be suspended already; the thread owns r
 * until done. 0, or -1 when no thread could be started: st's place is
 * given back and r is untouched (the caller answers it). The HTTP thread
 * that reserved st. */
int svc_step_launch(svc_step *st, svc_req *r, svc_job_fn job);
/* 1 when a step with this id is listed (running or finished), else 0.
 * Any thread. */
int svc_step_exists(uint64_t id);
/* The step the calling thread runs: NULL on every thread but a step's
 * own (a purchase then knows it is stepped). */
svc_step *svc_step_self(void);

/* Called by the purchase on its step's thread at each stage it reaches
 * (not start and done: the step's thread marks those): records f and the
 * time, then waits until told to go on (next, run; at once after a run).
 * Returns true to go on; false when the step was abandoned (left paused
 * for teach.step_timeout_s: *why = PR_STEP_ABANDONED) or the server is
 * shutting down (*why = PR_SHUTTING_DOWN) — at once, without waiting,
 * once either has happened. The caller decides what a false means after
 * its commit (nothing left to undo: it goes on). st's own thread. */
bool svc_step_pause(svc_step *st, svc_stage stage, const svc_step_facts *f, purchase_result *why);

/* The jobs of the routes (svc_routes.h's contract: they fill r's reply and
 * never touch the connection), run on a pool of their own so that a
 * next waiting for its step takes nothing from buyers or audits:
 *   svc_steps_list_job  GET /steps: {"ok","instance","now_us","steps":[...],
 *                       "redis":{sku:{...}}}; r->p.sku (optional) adds
 *                       that SKU's keys
 *   svc_step_next_job   POST /steps/{r->step}/next: lets a paused step go
 *                       on to its next stage and waits for it up to
 *                       r->p.wait_ms (default 1000) — a step that is
 *                       already on its way is only waited for; answers
 *                       {"ok","step":{...}} plus what GET /steps answers;
 *                       "waiting":true when it has not arrived yet (it
 *                       goes on under its own rules: its lock wait)
 *   svc_step_run_job    POST /steps/{r->step}/run: the same up to done
 * A step that is no longer listed: 404 unknown_step. service/README.md,
 * "Stepped purchases", gives every field. The pool's worker; conn reads
 * the keys (Redis down: "redis" holds null per SKU). */
void svc_steps_list_job(svc_req *r, lc_conn *conn);
void svc_step_next_job(svc_req *r, lc_conn *conn);
void svc_step_run_job(svc_req *r, lc_conn *conn);

/* The stage's name ("start", "locked", ...; "?" out of range). Static
 * storage; any thread. */
const char *svc_stage_name(svc_stage stage);

#endif
