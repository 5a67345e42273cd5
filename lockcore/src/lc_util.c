/* lc_util.c — the leaf helpers every lockcore source shares (lc_util.h):
 * clock, condition variables, error text, and the one abort path for bugs.
 * It uses no function of any other lockcore source, so it can sit at the
 * bottom of the dependency graph.
 */
#include "lc_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t lc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t lc_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void lc__sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

void lc__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    LC_PTHREAD(pthread_condattr_init(&a));
    LC_PTHREAD(pthread_condattr_setclock(&a, CLOCK_MONOTONIC));
    LC_PTHREAD(pthread_cond_init(cv, &a));
    LC_PTHREAD(pthread_condattr_destroy(&a));
}

void lc__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms)
{
    /* An absolute CLOCK_MONOTONIC time: the clock lc__cond_init set. */
    struct timespec ts = {deadline_ms / 1000, (deadline_ms % 1000) * 1000000L};
    int rc = pthread_cond_timedwait(cv, mu, &ts);
    if (rc != 0 && rc != ETIMEDOUT)
        lc__abort(__FILE__, __LINE__, "pthread_cond_timedwait(cv, mu, &ts)", rc);
}

void lc__seterr(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, LC_ERRSTR_LEN, fmt, ap);
    va_end(ap);
}

int lc__split_addr(const char *node, bool v6, char *host, size_t hostlen, int *port)
{
    const char *colon = node ? strrchr(node, ':') : NULL;
    if (colon == NULL || colon == node)
        return -1;
    const char *h = node, *he = colon;
    bool bracketed = v6 && he - h >= 2 && h[0] == '[' && he[-1] == ']';
    if (bracketed) {
        h++;
        he--;
    }
    if (he <= h || (size_t)(he - h) >= hostlen)
        return -1;
    for (const char *q = h; q < he; q++) {
        unsigned char ch = (unsigned char)*q;
        if (ch <= ' ' || ch == 0x7f || ch == '[' || ch == ']' || (ch == ':' && !bracketed))
            return -1;
    }
    long p = 0;
    const char *d = colon + 1;
    if (*d == '\0')
        return -1;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || p > 65535)
            return -1;
        p = p * 10 + (*d - '0');
    }
    if (p < 1 || p > 65535)
        return -1;
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
    *port = (int)p;
    return 0;
}

_Noreturn void lc__abort(const char *file, int line, const char *what, int rc)
{
    /* Like assert(3): one line on stderr, then abort() for the core dump. */
    if (rc)
        fprintf(stderr, "lockcore: %s:%d: %s: %s\n", file, line, what, strerror(rc));
    else
        fprintf(stderr, "lockcore: %s:%d: %s\n", file, line, what);
    abort();
}
