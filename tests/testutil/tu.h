/* tu.h — the test suite's small helpers, shared by every module's tests.
 *
 * Why: every test talks to a real redis-server (never a mock). Most use the
 * suite's shared server that the ctest fixture started (tu_redis_port());
 * tests that must stop, pause or restart Redis start their own private one
 * (tu_redis_start()) so they never disturb the others.
 *
 * Assertions count failures instead of aborting, so one run reports every
 * broken expectation; tu_done() prints "N passed, N failed" and returns the
 * process exit status. Not thread-safe unless stated: call from the test's
 * main thread, except TU_CHECK which uses atomics and may be called anywhere.
 */
#ifndef MIAOSHA_TU_H
#define MIAOSHA_TU_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

#include <lockcore.h> /* lc_now_ms: the one monotonic clock */

extern _Atomic long tu_passed;
extern _Atomic long tu_failed;

/* TU_CHECK(cond, fmt, ...) records a pass or a failure (with file:line). */
#define TU_CHECK(cond, ...)                                                                        \
    ((void)tu_check_((cond) ? 1 : 0, #cond, __FILE__, __LINE__, __VA_ARGS__))

/* Records one result; returns ok. The condition is evaluated exactly once. */
int tu_check_(int ok, const char *expr, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* TU_REQUIRE: like TU_CHECK, but a failure ends the test at once (exit 1). */
#define TU_REQUIRE(cond, ...)                                                                      \
    do {                                                                                           \
        if (!tu_check_((cond) ? 1 : 0, #cond, __FILE__, __LINE__, __VA_ARGS__)) {                  \
            tu_done();                                                                             \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

/* Prints "<name>: N passed, N failed"; returns 0 when nothing failed, else 1. */
int tu_done(void);

/* An upper time bound for an assertion, scaled by MIAOSHA_TEST_TIME_FACTOR
 * (default 1): sanitizer builds run several times slower, and a bound that
 * is the spec on a plain build would only measure the sanitizer there.
 * Lower bounds are never scaled. Any thread. */
int64_t tu_slack(int64_t ms);

/* Sleeps ms milliseconds (restarting after signals). Any thread. */
void tu_sleep_ms(int64_t ms);

/* The port of the suite's shared redis-server (read from
 * $MIAOSHA_TEST_REDIS_DIR/port). Exits the test with status 1 and a message
 * when the fixture is missing: a missing Redis fails, it never skips. */
int tu_redis_port(void);

/* A private redis-server child on 127.0.0.1 and a free port, no persistence
 * unless extra_args ask for it (NULL-terminated, may be NULL; they come
 * after the defaults and override them). The child is killed by the kernel
 * if the test process dies first (PR_SET_PDEATHSIG), stays in the test's
 * session (never daemonized), and is started and stopped by the process kit
 * the load generator's matrix uses too (proc/: pk_redis_start, pk_stop;
 * proc/README.md). */
typedef struct tu_redis {
    pid_t pid;
    int port;
    char dir[256]; /* its working directory (mkdtemp), removed by tu_redis_stop */
} tu_redis;

/* Starts it and waits until it answers PING (up to 5 s an attempt; up to 20
 * attempts, each on another free port, or on r->port again after 200 ms).
 * On a restart of a stopped server, pass the same r with r->port set and
 * keep_port=1. Returns 0, or -1 with the reason on stderr. */
int tu_redis_start(tu_redis *r, int keep_port, const char *const *extra_args);
/* SIGKILLs it (hard=1), or SIGTERMs it (with a SIGCONT, should the test
 * have stopped it; SIGKILL after 10 s, scaled by tu_slack), and reaps it;
 * r->pid = 0. Keeps r->port and r->dir. */
void tu_redis_kill(tu_redis *r, int hard);
/* Kills it and removes its directory. */
void tu_redis_stop(tu_redis *r);

/* A one-shot command on a fresh connection to 127.0.0.1:port; returns the
 * reply's integer (for an integer reply or a string holding one), its length
 * (other strings, arrays), -1 for nil, or INT64_MIN on error. For
 * assertions, not speed. */
int64_t tu_redis_int(int port, const char *fmt, ...);
/* Same, copying a string reply into buf (empty on nil); returns 0 or -1. */
int tu_redis_str(int port, char *buf, size_t len, const char *fmt, ...);
/* The number after field (e.g. "total_reads_processed:",
 * "errorstat_EXECABORT:count=") in INFO section, asked on ctx when it is
 * not NULL — a connection the caller keeps open, for counters a connection
 * of its own would move (its close is a read event) — else on a fresh
 * connection to port. 0 when the field is absent, -1 on error. */
long long tu_redis_info_num(redisContext *ctx, int port, const char *section, const char *field);
/* The number after field in info, an INFO reply's text (for several fields
 * of one reply); 0 when the field is absent. */
long long tu_info_field(const char *info, const char *field);

#endif
