/* lc_testhooks.h — lockcore's fault points, for in-tree tests and the
 * service's teaching faults only. Not installed, not part of lockcore.h's
 * contract: an in-tree target gets it by linking lockcore_testhooks
 * (lockcore/CMakeLists.txt).
 *
 * Why it exists: setnx mode's flaw is that SETNX and PEXPIRE are two
 * commands, and a holder that dies between them leaves a lock with no TTL,
 * held by nobody, forever. To show that flaw on demand the process must die
 * exactly there, which no outside signal can time. The service's fault
 * crash_before_expire (?fault=crash_before_expire) and the test holder
 * lockcore/tests/lc_holder.c exit the process from this hook, so the lock
 * is left without a TTL.
 */
#ifndef MIAOSHA_LC_TESTHOOKS_H
#define MIAOSHA_LC_TESTHOOKS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the calling thread's after-SETNX hook: while set, every setnx-mode
 * acquisition on this thread that took the lock calls fn(arg) after SETNX
 * answered 1 and before PEXPIRE is sent. fn NULL clears it (arg is then
 * ignored). Thread-local: other threads' acquisitions never call it, so a
 * caller sets it right before its acquire and clears it right after. The
 * other modes never call it. Any thread, for itself. */
void lc__hook_after_setnx(void (*fn)(void *arg), void *arg);

#ifdef __cplusplus
}
#endif

#endif
