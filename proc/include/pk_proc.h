/* pk_proc.h — the process kit: child processes and private redis-servers
 * for the oversell matrix (lg_mx_proc.c) and for the test suite
 * (tests/testutil: tu_redis_* are built on it), so both start and stop
 * their servers the same way. Free loopback ports; spawn with the output
 * in a log file; stop by PID; a private redis-server that answers PING;
 * one-shot Redis commands; rm -rf.
 *
 * Children stay in the caller's session and process group: never
 * daemonized, never setsid(). With sched_autogroup_enabled=1 a process
 * alone in its session is a scheduling group of its own, and a
 * redis-server there starved under the load generated from the caller's
 * session (service/README.md). The same group also means a terminal's
 * Ctrl-C reaches them.
 *
 * Every child pk_spawn starts is remembered in a small table (64 entries)
 * so pk_kill_all() can stop whatever is still running (on the way
 * out, also after Ctrl-C). The functions that start, wait for or stop
 * children run on one thread, the one that reaps them (the process's main
 * thread), unless a comment says "any thread".
 */
#ifndef MIAOSHA_PK_PROC_H
#define MIAOSHA_PK_PROC_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

struct redisContext; /* hiredis */

/* A TCP port on 127.0.0.1 that nothing listened on a moment ago (the
 * kernel's choice for a bind to port 0), or -1. Another process may take
 * it before the caller binds it: callers retry on another port. Any
 * thread. */
int pk_free_port(void);

/* pk_spawn flags. */
#define PK_SPAWN_DIE_WITH_PARENT                                                                   \
    1 /* the kernel SIGKILLs the child when the                                                    \
         thread that spawned it ends                                                               \
         (PR_SET_PDEATHSIG): a test's servers                                                      \
         never outlive a test that crashed or                                                      \
         was killed by its timeout */

/* Starts argv[0] (searched in PATH when it has no '/'; argv NULL-terminated,
 * not modified) with stdin from /dev/null, stdout and stderr appended to
 * logpath (NULL: /dev/null), and SIGINT, SIGTERM and SIGPIPE at their
 * defaults. flags: 0 or PK_SPAWN_DIE_WITH_PARENT. Returns the pid, or -1
 * with a reason in err (errlen bytes): the log file cannot be opened, or
 * fork failed. An exec failure shows as the child exiting with status 127
 * (its reason in the log). */
pid_t pk_spawn(const char *const argv[], const char *logpath, int flags, char *err, size_t errlen);

/* 1 when the child pid has exited and is now reaped (a zombie counts as
 * exited: this reaps it; so does a pid that is not our child), 0 when it
 * still runs after timeout_ms (0: just check; polls every 10 ms). */
int pk_wait_exit(pid_t pid, int timeout_ms);

/* pk_wait_exit that also hands back the wait status (for WIFEXITED and
 * friends) in *status (may be NULL): -1 when pid was not our child. */
int pk_wait_status(pid_t pid, int timeout_ms, int *status);

/* Asks a child to stop without waiting: SIGTERM, then SIGCONT (a SIGSTOPped
 * process acts on SIGTERM only once resumed). Reap it with pk_wait_status
 * or pk_wait_exit. No-op for pid <= 0. */
void pk_signal_stop(pid_t pid);

/* Stops a child: SIGTERM, and SIGCONT in case it is stopped (a SIGSTOPped
 * process acts on SIGTERM only once resumed), then SIGKILL after grace_ms;
 * always reaps. No-op for pid <= 0. */
void pk_stop(pid_t pid, int grace_ms);

/* SIGKILL at once (a crash, for a test: no shutdown of its own), and reaps.
 * No-op for pid <= 0. */
void pk_kill(pid_t pid);

/* Stops (pk_stop) every child pk_spawn started that was not reaped yet. */
void pk_kill_all(int grace_ms);

/* A private redis-server: pk_redis_start's options. */
typedef struct pk_redis_opts {
    const char *server;          /* binary, PATH searched; NULL: "redis-server" */
    int port;                    /* > 0: exactly this port (a restart keeps its
                                    port); 0: a free port per attempt */
    const char *dir;             /* --dir (exists; the AOF or RDB goes there) */
    const char *const *args;     /* more arguments after the kit's own
                                    (--port --bind 127.0.0.1 --dir --save ""
                                    --daemonize no), which they may override;
                                    NULL-terminated, may be NULL */
    const char *logpath;         /* its output, appended; NULL: /dev/null */
    int flags;                   /* pk_spawn flags */
    int attempts;                /* >= 1 (default 1) */
    int timeout_ms;              /* per attempt, until PING answers (default 10000) */
    int retry_pause_ms;          /* before another attempt on the same port: its
                                    old socket may linger (default 200) */
    volatile sig_atomic_t *stop; /* may be NULL; non-zero ends the wait (failure) */
} pk_redis_opts;

/* The defaults above. */
void pk_redis_opts_init(pk_redis_opts *o);

/* Starts redis-server on 127.0.0.1 in the caller's session and waits until
 * it answers PING (blocks up to attempts x timeout_ms). An attempt whose
 * server exits (its port was taken, bad arguments) or does not answer in
 * time is stopped and the next attempt made. Returns the pid and sets
 * *port, or -1 with a reason in err (errlen bytes). */
pid_t pk_redis_start(const pk_redis_opts *o, int *port, char *err, size_t errlen);

/* 1 when 127.0.0.1:port answers a Redis PING within timeout_ms. Any
 * thread. */
int pk_redis_ping(int port, int timeout_ms);

/* A fresh hiredis connection to 127.0.0.1:port; timeout_ms bounds the
 * connect and every reply. NULL when Redis does not answer. The caller owns
 * it (redisFree). Any thread. */
struct redisContext *pk_redis_connect(int port, int timeout_ms);

/* One Redis command on a fresh connection to 127.0.0.1:port (for the
 * matrix's fault scenarios, which watch the lock key; not for speed).
 * argv: argc strings, sent as a RESP array. The reply goes to out as text:
 * a status or bulk string as is, an integer in decimal, an array as its
 * elements joined by '\n' (flat arrays of strings/integers only), cut to
 * outlen - 1 bytes if longer (still 1). Returns 1 (a value), 0 (nil) or -1
 * (an error reply, no reply within timeout_ms, or a reply it cannot parse).
 * Any thread. */
int pk_redis_query(int port, int timeout_ms, int argc, const char *const argv[], char *out,
                   size_t outlen);

/* rm -rf dir (no symlinks followed); best effort. NULL or "": nothing.
 * Any thread. */
void pk_rm_tree(const char *dir);

/* Milliseconds on the monotonic clock. Any thread. */
long long pk_now_ms(void);
/* Sleeps ms milliseconds, resuming after signals. Any thread. */
void pk_sleep_ms(long long ms);

#endif
