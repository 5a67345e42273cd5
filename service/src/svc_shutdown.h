/* svc_shutdown.h — the graceful shutdown's two flags, shared by the daemon,
 * the routes and main.c.
 *
 * Step 1 (svc_shutdown_begin, on SIGTERM/SIGINT): nothing new starts and a
 * purchase waiting for a lock gives up. Step 2 (svc_shutdown_abort_work,
 * shortly before the exit deadline): a purchase sleeping work_ms inside its
 * critical section wakes and answers 503 without writing. Both flags only
 * ever go from 0 to 1. Every function: any thread. */
#ifndef MIAOSHA_SVC_SHUTDOWN_H
#define MIAOSHA_SVC_SHUTDOWN_H

#include <stdatomic.h>
#include <stdint.h>

/* Step 1: raises the flag svc_cancel_flag points to. */
void svc_shutdown_begin(void);
/* 1 once svc_shutdown_begin ran. */
int svc_shutting_down(void);
/* The step 1 flag, for lc_lock_args.cancel: a purchase waiting for a lock
 * gives up within LC_CANCEL_LATENCY_MS (and answers 503 shutting_down).
 * Static storage, never NULL. */
const atomic_int *svc_cancel_flag(void);

/* Step 2: wakes every svc_sleep_work now and makes later ones return at
 * once. */
void svc_shutdown_abort_work(void);
/* 1 once svc_shutdown_abort_work ran. */
int svc_abort_work(void);
/* Sleeps ms milliseconds (the simulated work), waking early when
 * svc_shutdown_abort_work runs: 0 when the full time elapsed, -1 when
 * aborted. */
int svc_sleep_work(int64_t ms);

#endif
