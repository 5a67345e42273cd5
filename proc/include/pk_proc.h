/* pk_proc.h — the process kit's core: child processes for the test suite
 * (tests/testutil, the lock core's and the service's tests), for
 * miaosha-load's matrix and for miaosha-reqfuzz, so all of them start and
 * stop what they need the same way. Free loopback ports; spawn with the
 * output in a log file; wait for an exit; stop and kill by PID; stop
 * every child still running on the way out; rm -rf; a monotonic clock.
 * Private redis-servers are pk_redis.h, HTTP servers' health pk_http.h,
 * a Sentinel group pk_ha.h, the freezable forwarder pk_fwd.h.
 *
 * Children stay in the caller's session and process group: never
 * daemonized, never setsid(). With sched_autogroup_enabled=1 a process
 * alone in its session is a scheduling group of its own, and a
 * redis-server there starved under the load generated from the caller's
 * session (service/README.md). The same group also means a terminal's
 * Ctrl-C reaches them. A child is only ever stopped by its PID, never by
 * name.
 *
 * Every child pk_spawn starts is remembered in a small table (64 entries)
 * until it is reaped, so pk_kill_all() can stop whatever is still running
 * (on the way out, also after Ctrl-C). The table is not locked: the
 * functions that start, wait for or stop children run on one thread, the
 * one that reaps them (the process's main thread), unless a comment says
 * "any thread". Nothing here logs or exits; failures come back as a
 * status and, where there is a reason to give, a bounded string.
 */
#ifndef MIAOSHA_PK_PROC_H
#define MIAOSHA_PK_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include <lockcore.h> /* lc_now_ms: the one monotonic clock */

/* A TCP port on 127.0.0.1 that nothing listened on a moment ago (the
 * kernel's choice for a bind to port 0), or -1 when no socket could be
 * bound. Another process may take it before the caller binds it: callers
 * retry on another port. Any thread. */
int pk_free_port(void);

/* pk_spawn flag: the kernel SIGKILLs the child when its parent ends
 * (PR_SET_PDEATHSIG), so a test's servers never outlive a test that
 * crashed, failed a TU_REQUIRE or was killed by its timeout. Linux may
 * tie it to the spawning thread rather than the process: spawn from the
 * thread that lives as long as the children should (the main thread). A
 * parent that ends before the child set it up makes the child exit 127
 * at once. For tests, the fuzzer and pk_cluster's nodes (which the
 * matrix's cluster scenarios start from its main thread); the matrix's
 * other children do without (its own Ctrl-C handling stops them). */
#define PK_SPAWN_DIE_WITH_PARENT 1

/* Starts argv[0] (searched in PATH when it has no '/'; argv
 * NULL-terminated, not modified, only read during the call) with stdin
 * from /dev/null, stdout and stderr appended to logpath (created 0644;
 * NULL: /dev/null), in the caller's session and process group, with
 * SIGINT, SIGTERM and SIGPIPE at their defaults. flags: 0 or
 * PK_SPAWN_DIE_WITH_PARENT. Returns the child's pid (> 0), or -1 with a
 * reason in err (errlen bytes, always terminated): 64 children are
 * already running (the table pk_kill_all reads is full), the log file
 * cannot be opened, or fork failed. An exec failure shows as the child exiting with
 * status 127, its reason in the log. */
pid_t pk_spawn(const char *const argv[], const char *logpath, int flags, char *err, size_t errlen);

/* Waits up to timeout_ms (0: just checks; polls every 10 ms) for the child
 * pid to exit. Returns 1 when it has exited and is now reaped (so is a
 * zombie; a pid that is not our child, or pid <= 0, counts as exited and
 * nothing is reaped), 0 when it still runs. */
int pk_wait_exit(pid_t pid, int timeout_ms);

/* pk_wait_exit that also hands back the wait status (for WIFEXITED and
 * friends) in *status (may be NULL): -1 there when pid was not our child
 * (or pid <= 0).
 * Returns 1 (exited, reaped) or 0 (still running after timeout_ms). */
int pk_wait_status(pid_t pid, int timeout_ms, int *status);

/* Asks a child to stop without waiting: SIGTERM, then SIGCONT (a
 * SIGSTOPped process acts on SIGTERM only once resumed). The caller reaps
 * it with pk_wait_status or pk_wait_exit (and may pk_kill it when that
 * times out). No-op for pid <= 0. */
void pk_signal_stop(pid_t pid);

/* Stops a child and reaps it: pk_signal_stop, then SIGKILL when it has not
 * exited after grace_ms. Blocks up to grace_ms plus the reap. No-op for
 * pid <= 0. */
void pk_stop(pid_t pid, int grace_ms);

/* SIGKILLs a child at once (a crash, for a test: no shutdown of its own)
 * and reaps it. No-op for pid <= 0. */
void pk_kill(pid_t pid);

/* On the way out: stops (pk_stop with grace_ms each, one after the other)
 * every child pk_spawn started that was not reaped yet. */
void pk_kill_all(int grace_ms);

/* rm -rf dir (no symlinks followed); best effort, nothing reported. NULL
 * or "": nothing. Any thread. */
void pk_rm_tree(const char *dir);

/* Sleeps ms milliseconds, resuming after signals; ms <= 0 returns at
 * once. Any thread. */
void pk_sleep_ms(long long ms);

#endif
