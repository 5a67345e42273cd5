/* lg_proc.h — child processes for the matrix (and the integration tests):
 * free loopback ports, spawn with output to a log file, stop by PID.
 * Every child is remembered in a small table so lg_proc_kill_all() can
 * stop whatever is still running (used on the way out, also after Ctrl-C).
 * Main thread only.
 */
#ifndef MIAOSHA_LG_PROC_H
#define MIAOSHA_LG_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* A TCP port on 127.0.0.1 that nothing listened on a moment ago, or -1. */
int lg_free_port(void);

/* Starts argv[0] (argv NULL-terminated, not modified) (searched in PATH when it has no '/') with stdin from
 * /dev/null and stdout+stderr appended to logpath (NULL: /dev/null).
 * Returns the pid, or -1 with a reason in err. */
pid_t lg_spawn(const char *const argv[], const char *logpath, char *err, size_t errlen);

/* 1 when pid has exited (and is reaped), 0 when still running after
 * timeout_ms (0: just check). */
int lg_wait_exit(pid_t pid, int timeout_ms);

/* SIGTERM (and SIGCONT, in case it is stopped), then SIGKILL after
 * grace_ms; always reaps. No-op for pid <= 0. Main thread (it reaps). */
void lg_stop(pid_t pid, int grace_ms);

/* Stops every child lg_spawn started that is still running. */
void lg_proc_kill_all(int grace_ms);

/* 1 when 127.0.0.1:port answers a Redis PING within timeout_ms. */
int lg_redis_ping(int port, int timeout_ms);

/* One Redis command on a fresh connection to 127.0.0.1:port (for the
 * matrix's fault scenarios, which watch the lock key; not for speed).
 * argv: argc strings, sent as a RESP array. The reply goes to out as text:
 * a status or bulk string as is, an integer in decimal, an array as its
 * elements joined by '\n' (flat arrays of strings/integers only), cut to
 * outlen - 1 bytes if longer (still 1). Returns 1 (a value), 0 (nil) or -1
 * (an error reply, no reply within timeout_ms, or a reply it cannot parse).
 * Any thread. */
int lg_redis_query(int port, int timeout_ms, int argc, const char *const argv[], char *out,
                   size_t outlen);

/* rm -rf dir (no symlinks followed); best effort. */
void lg_rm_tree(const char *dir);

/* Milliseconds on the monotonic clock; sleeping. */
long long lg_now_ms(void);
void lg_sleep_ms(long long ms);

#endif
