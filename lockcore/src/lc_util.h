/* lc_util.h — lockcore's leaf helpers: the clock, condition variables,
 * error text, cancel flags, the pthread check and the invariant check.
 *
 * Every other lockcore source may use these; lc_util.c uses no function of
 * any other lockcore source (only constants from the public lockcore.h), so
 * the "uses a function of" graph between lockcore's files stays acyclic.
 */
#ifndef MIAOSHA_LC_UTIL_H
#define MIAOSHA_LC_UTIL_H

#include "lockcore.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* --- clock --------------------------------------------------------------- */

/* lc_now_ms and lc_now_us are public (lockcore.h): the one monotonic clock
 * of the project. */

/* Sleeps ms (nothing for ms <= 0), restarting after signals. Any thread. */
void lc__sleep_ms(int64_t ms);

/* --- condition variables ------------------------------------------------- */

/* Initialises a condition variable that waits on CLOCK_MONOTONIC, so a wait's
 * deadline is lc_now_ms() arithmetic and a wall-clock step cannot stretch it. */
void lc__cond_init(pthread_cond_t *cv);

/* Waits on cv (mu held, as pthread_cond_timedwait) until signalled or
 * deadline_ms (lc_now_ms() time) passes; a timeout is not a failure. The
 * caller re-checks its condition after any return (spurious wake-ups). */
void lc__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms);

/* --- errors -------------------------------------------------------------- */

/* Formats into buf, LC_ERRSTR_LEN bytes, truncating. */
void lc__seterr(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* --- cancel flags (lc_lock_args.cancel) ---------------------------------- */

/* Has the caller's cancel flag (may be NULL) been raised? */
static inline bool lc__canceled(const atomic_int *cancel)
{
    return cancel && atomic_load(cancel) != 0;
}

/* The time a wait may sleep to: until, or sooner so a cancel is seen within
 * LC_CANCEL_LATENCY_MS. */
static inline int64_t lc__cancel_wake(const atomic_int *cancel, int64_t now, int64_t until)
{
    return cancel && now + LC_CANCEL_LATENCY_MS < until ? now + LC_CANCEL_LATENCY_MS : until;
}

/* Splits "host:port" (v6: also "[addr]:port") into host (hostlen bytes,
 * NUL included) and *port. Returns 0, or -1 when node is not that: NULL,
 * an empty host or one too long, a host holding a space, a control byte, a
 * bracket or (unbracketed) a ':', a port that is not 1..65535 in plain
 * digits (no sign, no space). One rule for redlock nodes, Sentinels and
 * cluster seeds, so that a typo is refused when the client is made rather
 * than found as "0 of 3 nodes answered" at the first acquire. */
int lc__split_addr(const char *node, bool v6, char *host, size_t hostlen, int *port);

/* --- bugs: the one way lockcore aborts ----------------------------------- */

/* Writes "lockcore: FILE:LINE: WHAT[: strerror(rc)]" to stderr and aborts.
 * Only for a broken invariant or a pthread call that failed: both are bugs
 * in lockcore or in its caller (a client freed while in use), never a
 * state of Redis or of the machine, which lockcore reports as a status
 * instead. */
_Noreturn void lc__abort(const char *file, int line, const char *what, int rc);

/* LC_PTHREAD(pthread_xxx(...)): the call must return 0. lockcore's mutexes
 * and condition variables use default attributes (plus the monotonic
 * clock), which glibc initialises without allocating, so every failure
 * (EINVAL, EPERM, EDEADLK, EBUSY) means a destroyed object, a mutex not
 * held, or one locked twice: continuing would corrupt the tables those
 * mutexes guard. pthread_create is not checked this way: it may fail for
 * lack of resources, which callers report as LC_NOMEM. */
#define LC_PTHREAD(call)                                                                           \
    do {                                                                                           \
        int lc_rc_ = (call);                                                                       \
        if (lc_rc_ != 0)                                                                           \
            lc__abort(__FILE__, __LINE__, #call, lc_rc_);                                          \
    } while (0)

/* LC_ASSERT(cond): an internal invariant (a hold count above zero, an entry
 * present in the list it is unlinked from). Active in every build, NDEBUG
 * or not: the checks cost a comparison next to a Redis round trip, and a
 * release build that went on past a broken invariant could renew a lock
 * forever or free memory a watchdog still reads, which is worse for a lock
 * than stopping. */
#define LC_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            lc__abort(__FILE__, __LINE__, "assertion " #cond " failed", 0);                        \
    } while (0)

/* The pause a polling mode's waiter takes before its next try (ms, before
 * any cap), for a client whose retry_interval_ms is step: setnx, token and
 * fenced step plus a random 0..half of it (waiters that began together do
 * not retry in lockstep), redlock a random 0..2 x step (the Redlock
 * algorithm's retry delay, so clients that split the votes do not collide
 * again). Draws from *rng: the thread that owns it (a connection's). */
static inline int64_t lc__retry_nap_ms(int64_t step, unsigned *rng, lc_mode mode)
{
    if (mode == LC_REDLOCK)
        return rand_r(rng) % (2 * step + 1);
    return step + rand_r(rng) % (step / 2 + 1);
}

#endif
