/* svc_check.h — the one way the service dies on a programming error.
 *
 * A pthread_* call on the service's own mutexes, condition variables and
 * threads fails only when the service misuses them (EINVAL, EDEADLK,
 * EPERM): there is nothing sensible to answer, and carrying on would corrupt
 * shared state. SVC_PT(call) runs call and, when it returns non-zero, writes
 * the call, its error and where it was to stderr and aborts. SVC_ASSERT(cond)
 * does the same for an internal invariant; unlike assert() it stays in
 * release builds. Neither is for what the outside world can cause (a full
 * queue, Redis down, a thread that cannot be created): those return
 * statuses. Any thread. */
#ifndef MIAOSHA_SVC_CHECK_H
#define MIAOSHA_SVC_CHECK_H

/* Writes "miaosha-server: <file>:<line>: <what> failed[: <strerror(err)>]"
 * to stderr and aborts; err 0 prints no error text. */
_Noreturn void svc_check_fail(const char *what, int err, const char *file, int line);

#define SVC_PT(call)                                                                               \
    do {                                                                                           \
        int svc_pt_rc_ = (call);                                                                   \
        if (svc_pt_rc_ != 0)                                                                       \
            svc_check_fail(#call, svc_pt_rc_, __FILE__, __LINE__);                                 \
    } while (0)

#define SVC_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            svc_check_fail("assertion " #cond, 0, __FILE__, __LINE__);                             \
    } while (0)

#endif
