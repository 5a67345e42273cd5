/* lockcore.h — one lock interface for every seckill mode.
 *
 * Every purchase in miaosha goes through this interface; only the mode
 * differs, so a comparison between modes varies the lock and nothing else.
 * The modes are the steps of the seckill walkthrough article's story, whose
 * last step is Redisson's RLock (RedissonLock). Each step fixes one bug of
 * the step before and keeps another, and each mode reproduces its step
 * exactly, flaws included, because the load generator exists to show them:
 *
 *   LC_NONE       no lock at all                       (the race)
 *   LC_MUTEX      in-process lock per name             (synchronized)
 *                 flaw: invisible to other processes
 *   LC_SETNX      SETNX key 1; PEXPIRE key lease       (setnx, then expire)
 *                 release: DEL key (no owner check)
 *                 flaws: a crash between the two commands leaves a lock
 *                 with no TTL; a holder whose lease ran out deletes the next
 *                 holder's lock
 *   LC_TOKEN      SET key <uuid> NX PX lease           (SET NX EX, a UUID,
 *                 release: Lua GET == token → DEL       a Lua release)
 *                 flaw: a holder that outlives its lease lets a second in
 *   LC_REENTRANT  Redisson's hash lock: acquire/unlock/renew scripts,
 *                 watchdog renewal every timeout/3,    (Redisson's RLock)
 *                 pub/sub wake-up
 *                 flaw: a long process pause still lets a second holder in
 *                 (no fencing token)
 *   LC_REDLOCK    the Redlock algorithm as the Redis docs describe it
 *                 ("Distributed Locks with Redis"): SET key <uuid> NX PX
 *                 lease on N independent masters at once, held with a
 *                 majority within the lease; release: the token's Lua
 *                 compare-and-delete on every node
 *                 flaw: the validity is a promise of the clocks — a pause
 *                 past it still lets a second holder in (no fencing token)
 *   LC_FENCED     token's lock plus a fencing token (Kleppmann, "How to do
 *                 distributed locking"): one script does SET key <uuid> NX
 *                 PX lease and INCR <fence key> together and hands the
 *                 number back (lc_guard_fence); release: token's
 *                 compare-and-delete. The lock alone is token's, flaw
 *                 included; the number lets the store refuse a holder whose
 *                 lease ran out — if the store checks it. lockcore only
 *                 issues it: the caller names the counter (fence_key) and
 *                 makes its store check (the service's fenced read and
 *                 write, docs/locks.md "Fencing")
 *
 * lockcore/README.md lists, per mode, every command and script it sends;
 * docs/locks.md tells the story of the modes.
 *
 * Handles (opaque, SQLite style):
 *   lc_client  one per process: Redis address and timeouts, the instance id,
 *              the in-process mutex table, the watchdog thread, the
 *              pub/sub subscriber thread and the orphan reaper thread
 *              (below). Thread-safe.
 *   lc_conn    one Redis connection (a hiredis context, which is not
 *              thread-safe): use one per thread, or guard it. Reconnects by
 *              itself on the next call after any I/O error.
 *   lc_guard   one successful acquisition; handed back to lc_release, which
 *              frees it. Belongs to the thread that holds the lock.
 *
 * Errors: functions return an lc_status; contention (LC_BUSY) is a status,
 * not an error. The library never exits, logs or prints — except on a bug,
 * in lockcore or in a caller breaking these rules (a client freed while in
 * use): a broken internal invariant or a failed pthread call aborts the
 * process after one line on stderr, as assert() does. The text of the last
 * failure is kept, bounded to LC_ERRSTR_LEN bytes, in the lc_conn
 * (lc_conn_errstr). All durations are milliseconds.
 * A call on an lc_conn is bounded by the connect and command timeouts (and
 * wait_ms); in redlock mode by redlock_node_timeout_ms per round, plus at
 * most one more per round for replies an earlier round left in flight.
 *
 * Processes: create the client after fork(), never before — a child does
 * not inherit the background threads, and would share the parent's Redis
 * sockets. hiredis writes with write(): a process using lockcore must
 * ignore SIGPIPE, or a write to a reset connection kills it.
 *
 * Orphan cleanup (token, fenced and reentrant): a command that timed out is not
 * cancelled. Redis runs what it has read once it resumes (after a pause, a
 * slow fork, a stalled network), even if the client has closed the socket
 * since: it reads the command and the close together and runs the command
 * first. So an acquire that returned LC_IO can still be granted afterwards,
 * to nobody — a lock only its lease would end (30 s for reentrant). When an
 * acquire or a release returns LC_IO with the command possibly in flight
 * (a timeout or a reset; not a failed connect, nor an error reply, after
 * which nothing runs) — or when an attempt lc_acquire_send wrote will never
 * be read (lc_conn_free, or no memory for lc_acquire_pipe's guard) —
 * lockcore takes that connection away from the lc_conn
 * (which reconnects on its next use) and hands it to the client's reaper
 * thread (one per client, started on first need, stopped by
 * lc_client_free; it holds at most 256 such connections, beyond which a
 * timed-out command is left to its lease). The reaper waits up to 60 s for
 * the late reply, on that same connection, and:
 *   - acquire granted late (token: SET NX answered OK; fenced: the script
 *     answered a number; reentrant: the acquire script answered nil): sends
 *     the mode's release on the SAME connection — token and fenced: the
 *     compare-and-delete of this acquisition's token (fenced: the number
 *     it drew stays used; nobody holds it); reentrant: Redisson's unlock script once for this
 * field, which takes back exactly the one hold the late acquire added (the key is deleted and the
 * release published when that was the only hold). Redis runs one connection's commands in order, so
 * this release can never run before the acquire it undoes — a release on a new connection could,
 * and the lock would appear after it.
 *   - acquire not granted (another holder, an error): sends nothing. The
 *     token and the field "<instance>:<owner>" belong to this acquisition,
 *     so the cleanup never touches another holder's lock.
 *   - a release: reads its reply (a NOSCRIPT answer is re-sent as EVAL).
 * Guarantee: once Redis answers the late command, a lock granted by it is
 * released within one more round trip; the reaper's own release sees the
 * lock state after the late command, never before. Limits, where the lease
 * ends the lock as before: (a) no reply within 60 s, or the client freed
 * first: the reaper closes the connection, which (a close by the client, as
 * above) does not stop Redis from running the command later; (b) the server closed the connection
 * (EOF or reset) before the reply: the server has freed that client, so the command either ran
 * already or never will — which is unknown (a reply can be lost after the
 * command ran: CLIENT KILL, a crash, a restart). token then sends the
 * compare-and-delete on a fresh connection (safe: nothing of the old one
 * runs any more; idempotent), and so does fenced; reentrant sends nothing (one unlock too many
 * would take a re-entering owner's real hold); (c) setnx keeps its flaw (no
 * owner to compare) and lc_extend is not covered (it only extends a lock
 * its guard still holds); (d) redlock has no reaper: its algorithm
 * already sends the release to every node after a failed attempt and on
 * lc_release, those that did not answer in time included (on a fresh
 * connection when the old one was dropped); what is left is a node that
 * runs the late SET after that release (the two on different
 * connections), whose key then lives out its lease on that one node — a
 * minority, which cannot grant a lock alone. The unlock-once rule stays right when one owner
 * id is used by several acquisitions at once (they share the field): each
 * late grant added one hold, and each cleanup takes back one. Counted in
 * lc_stats.orphans_*.
 *
 * Cluster: the caller passes the lock key. Keep every key of one SKU on one
 * slot with a hash tag — "miaosha:{sku}:lock", "miaosha:{sku}:stock" — so a
 * script that names several keys stays legal on Redis Cluster. The
 * reentrant mode's pub/sub channel is Redisson's prefixName:
 * "redisson_lock__channel:<key>" when the key contains '{' (as
 * "miaosha:{sku}:lock" does), else "redisson_lock__channel:{<key>}", so a
 * key with a proper hash tag, or none, has its channel in the key's slot.
 */
#ifndef MIAOSHA_LOCKCORE_H
#define MIAOSHA_LOCKCORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LC_ERRSTR_LEN 256 /* bytes, including the terminating NUL */
#define LC_ID_LEN 64      /* bytes: instance ids and owner ids are shorter */

typedef enum lc_mode {
    LC_NONE = 0,
    LC_MUTEX,
    LC_SETNX,
    LC_TOKEN,
    LC_REENTRANT,
    LC_REDLOCK,
    LC_FENCED,
    LC_MODE_COUNT
} lc_mode;

typedef enum lc_status {
    LC_OK = 0,        /* acquired, released or extended */
    LC_BUSY = 1,      /* not acquired within wait_ms (contention, not an error) */
    LC_NOT_OWNER = 2, /* release/extend: this owner does not hold the lock any
                         more (its lease ran out, or another owner took it) */
    LC_LOST = 3,      /* reentrant release: the lock was gone, and the
                         watchdog's renewal had already found it gone while
                         it was held (rather than, say, an explicit lease
                         simply running out: that is LC_NOT_OWNER) */
    LC_IO = 4,        /* Redis unreachable, timed out, or answered an error */
    LC_MISUSE = 5,    /* bad arguments, or a call the mode does not offer */
    LC_NOMEM = 6,     /* out of memory, or a background thread could not start */
    LC_CANCELED = 7   /* the caller's cancel flag was raised while waiting */
} lc_status;

/* The mode's public name ("none", "mutex", "setnx", "token", "reentrant",
 * "redlock", "fenced"),
 * which is also its URL segment; "?" for an out-of-range value. Static
 * storage. Any thread. */
const char *lc_mode_name(lc_mode mode);

/* What a caller may rely on about a mode, so that no caller restates
 * lockcore's own switch on the mode. Every field is a fact of the mode's
 * commands (lockcore/README.md lists them per mode). */
typedef struct lc_mode_info {
    /* lc_mode_name's */
    const char *name;
    /* lc_acquire_send writes the first attempt (token, fenced, reentrant):
     * sending it early saves the caller that round trip. The other modes
     * send nothing ahead. */
    bool sends_ahead;
    /* lc_acquire_pipe and lc_release_pipe put the caller's commands in the
     * lock's own round trips: every mode whose lock is on the caller's
     * Redis or nowhere (all but redlock, whose lock lives on its own
     * masters). */
    bool carries_commands;
    /* The key's TTL is set once by the acquisition and never renewed
     * (setnx, token, fenced): the lock has certainly expired lease_ms + 1
     * ms after lc_acquire returned. */
    bool fixed_lease;
    /* lease_ms 0 means "renewed by the watchdog until released" (reentrant,
     * Redisson's default). */
    bool watchdog;
    /* The lock lives under the caller's key on the caller's Redis (setnx,
     * token, reentrant, fenced): deleting that key frees it. */
    bool lock_in_redis;
    /* lc_lock_args.owner names the holder (reentrant's hash field); the
     * other modes ignore it. */
    bool uses_owner;
    /* The same owner may acquire again while it holds (reentrant). */
    bool reentrant;
    /* lc_guard_fence hands out a fencing token (fenced). */
    bool issues_fence;
    /* The acquisition is two commands, SETNX then PEXPIRE (setnx): a crash
     * can fall between them and leave a lock with no TTL. */
    bool two_step_acquire;
    /* Offered only with lc_options.redlock_nodes (redlock). */
    bool needs_redlock_nodes;
} lc_mode_info;

/* The mode's row (static storage, never freed), or NULL for a value out of
 * range. Any thread. */
const lc_mode_info *lc_mode_info_of(lc_mode mode);

/* Parses a public mode name (exact, lower case). Returns 0 and sets *out, or
 * -1 for an unknown name. Any thread. */
int lc_mode_parse(const char *name, lc_mode *out);

/* "ok", "busy", "not_owner", "lost", "io", "misuse", "nomem", "canceled";
 * static storage. Any thread. */
const char *lc_status_name(lc_status status);

/* --- client ------------------------------------------------------------ */

typedef struct lc_options {
    const char *redis_host;      /* default "127.0.0.1" */
    int redis_port;              /* default 6379 */
    const char *redis_password;  /* NULL or "" = no AUTH */
    int redis_db;                /* SELECT on connect when > 0; default 0 */
    int connect_timeout_ms;      /* default 1000, > 0 */
    int command_timeout_ms;      /* per command round trip; default 1000, > 0 */
    int64_t watchdog_timeout_ms; /* reentrant lease without an explicit one;
                                    renewed every watchdog_timeout_ms / 3.
                                    Default 30000 (Redisson's
                                    lockWatchdogTimeout); >= 30 */
    int64_t retry_interval_ms;   /* setnx/token/fenced polling interval
                                    while waiting, plus 0..interval/2 of
                                    jitter (redlock: a random 0..2x it
                                    between rounds); default 10, >= 1 */
    const char *instance_id;     /* reentrant hash fields are
                                    "<instance_id>:<owner>"; NULL = a fresh
                                    libuuid. At most LC_ID_LEN-1 bytes. */
    /* Redlock's masters, independent of redis_host (which stays the
     * caller's own data server): redlock_node_count strings "host:port"
     * (host an IPv4 address or a name, port 1..65535), copied. 0 nodes
     * (the default) = the redlock mode is not offered (LC_MISUSE on
     * acquire); otherwise an odd count, 3..LC_REDLOCK_MAX_NODES, no node
     * listed twice. The nodes get no AUTH and no SELECT (database 0). */
    const char *const *redlock_nodes;
    int redlock_node_count;
    int redlock_node_timeout_ms; /* one parallel round (connect, write and
                                    every node's reply) gives up on a node
                                    after this; keep it far below the lease.
                                    Default (and 0) 50, 1..60000 */
    /* Redis Sentinel (see "Sentinel" below): sentinel_count strings
     * "host:port", copied, 0..LC_SENTINEL_MAX_NODES; with at least one,
     * redis_host/redis_port are not used: every connection goes to the
     * master the Sentinels name for master_name (1..127 bytes, required
     * then). 0 (the default): the plain address. */
    const char *const *sentinels;
    int sentinel_count;
    const char *master_name;
    /* Redlock's known caveat: a node that restarts without persistence
     * forgets the keys it granted, and can then vote a second holder in
     * while the first still holds a majority's lease. With a delay > 0 a
     * node does not vote (gets no SET, counts as a node that did not
     * answer) until it has been up that long: each new connection to a
     * node first asks INFO server for uptime_in_seconds (one extra round,
     * only when a connection is made), and the node votes again once
     * uptime_in_seconds x 1000 >= the delay. Its uptime is the node's own
     * fact, so this also covers a client that never saw the node before
     * (a new thread, a restarted service). Set it to the longest lease
     * ever asked for, so every lock the node granted before it restarted
     * has run out on the other nodes too. A node that does not answer
     * INFO server with an uptime never votes. Default 0 (off: the
     * algorithm as the Redis docs give it), 0..86400000. */
    int64_t redlock_restart_delay_ms;
} lc_options;

#define LC_SENTINEL_MAX_NODES 9

/* Sentinel. With sentinels set, every connection lockcore makes — the
 * caller's lc_conn, the watchdog's, the pub/sub subscriber's, the orphan
 * reaper's — first asks the Sentinels in turn (each with a timeout of
 * min(connect_timeout_ms, 250) ms) for SENTINEL get-master-addr-by-name
 * master_name; the first answer wins, and the connection checks with ROLE
 * that the address is a master (else it fails: the old master, or a
 * promotion not finished). Asked again at every reconnect, i.e. after any
 * I/O error and after a -READONLY reply to a lock command, a script, or a
 * command of an lc_pipe (the connection is then marked broken). One watcher
 * thread per client (started on the first connect, stopped by
 * lc_client_free) stays subscribed to +switch-master on one Sentinel;
 * after a switch each connection to the old address is dropped before its
 * next command. While no Sentinel answers, or the master named is down,
 * calls fail with LC_IO and the reason ("sentinel: no master mymaster
 * (...)") in lc_conn_errstr. What is lost: a lock written to the old master
 * and not yet copied to its replica is not on the new master — lockcore
 * does not WAIT for replicas (docs/locks.md, "Failover"). */

#define LC_REDLOCK_MAX_NODES 9

/* Fills *o with the defaults above. Any thread. */
void lc_options_init(lc_options *o);

typedef struct lc_client lc_client;

/* Creates the process-wide client. Does not connect: Redis may be down at
 * start; each lc_conn connects on first use. The options' strings are
 * copied. Background threads (watchdog, subscriber) start on first need.
 * Returns LC_OK and sets *out; LC_MISUSE for an option out of bounds (the
 * reason goes to err, errlen bytes, when err is not NULL: an even or out of
 * range redlock_node_count, a node that is not "host:port", a node listed
 * twice — the reason names it); LC_NOMEM.
 * Any thread. */
lc_status lc_client_new(const lc_options *o, lc_client **out, char *err, size_t errlen);

/* Stops the background threads and frees the client. NULL-safe. Every
 * lc_conn and lc_guard of this client must be freed/released first. Not
 * concurrently with any other call on the client. Waits for no late reply
 * of the orphan cleanup (below): at most for one round trip it has under
 * way (connect + command timeout); the connections it still held are
 * closed and the leases end what their commands may still do. */
void lc_client_free(lc_client *c);

/* The instance id (static for the client's life). Any thread. */
const char *lc_client_instance_id(const lc_client *c);

/* The master connections go to now, "host:port" into buf (len bytes,
 * truncated): the plain redis_host:redis_port, or with Sentinels the
 * address last resolved or announced ("" before the first connect). Any
 * thread. */
void lc_client_master(lc_client *c, char *buf, size_t len);

typedef struct lc_stats {
    uint64_t master_switches;    /* Sentinel: times the master's address
                                    changed (a failover seen by a connect
                                    or by +switch-master); 0 without */
    uint64_t acquired;           /* successful acquisitions, all modes */
    uint64_t busy;               /* acquisitions that returned LC_BUSY */
    uint64_t io_errors;          /* lock calls (acquire, release, extend)
                                    that returned LC_IO */
    uint64_t watchdog_renewals;  /* renew scripts that returned 1 */
    uint64_t watchdog_lost;      /* renew scripts that returned 0 while the
                                    lock was held and no release of it was
                                    under way (lock lost) */
    uint64_t watchdog_active;    /* (key, owner) pairs the watchdog renews now
                                    (held in watchdog mode, not lost) */
    uint64_t pubsub_channels;    /* channels the subscriber is subscribed to now */
    uint64_t pubsub_waiters;     /* threads waiting on a reentrant lock now */
    uint64_t orphans_adopted;    /* token/fenced/reentrant acquires and releases that
                                    timed out and whose connection the reaper
                                    took over (see "Orphan cleanup") */
    uint64_t orphans_released;   /* locks the reaper gave back: a stalled
                                    acquire that was granted late, undone
                                    (or a stalled release answered NOSCRIPT,
                                    re-sent) */
    uint64_t orphans_unresolved; /* timed-out commands whose outcome stayed
                                    unknown (no reply within 60 s, the
                                    connection closed with a reentrant
                                    command unanswered, the client freed,
                                    or not adopted: 256 connections held
                                    already, no memory): the lease ends what
                                    they left */
} lc_stats;

/* A snapshot of the client's counters (C11 atomics; each field is exact,
 * the set is not one instant). Any thread. */
void lc_client_stats(lc_client *c, lc_stats *out);

/* --- connection -------------------------------------------------------- */

typedef struct lc_conn lc_conn;

/* Creates a connection handle (caller owns it; free with lc_conn_free); it
 * connects lazily (with redlock nodes: one more connection per node, made on
 * the first redlock call, each remade after its own failure) and reconnects on the next call after
 * an I/O error or when the peer closed the idle socket, so a handle survives a Redis restart.
 * Returns LC_OK; LC_MISUSE for a NULL argument; LC_NOMEM. Any thread; the handle then belongs to
 * one thread at a time. */
lc_status lc_conn_new(lc_client *c, lc_conn **out);

/* Closes and frees it. NULL-safe. The thread that owns conn; guards made
 * through it stay valid (they do not reference the connection). An attempt
 * lc_acquire_send wrote and nobody read goes to the orphan cleanup with the
 * connection (see lc_acquire): a lock it took is given back. */
void lc_conn_free(lc_conn *conn);

/* The connected hiredis context, for the caller's own commands (the service's
 * stock reads and writes), connecting first if needed (connect timeout, AUTH,
 * SELECT, command timeout set). Returns NULL when Redis cannot be reached
 * (reason in lc_conn_errstr). The context stays owned by conn: do not free
 * it, and read every reply you asked for. It is valid until the next
 * lockcore call on conn, which may replace it: after the caller's command
 * fails with ctx->err set, or when the socket turns out closed by the peer
 * or holding unread bytes (a pipelined reply left unread), that call
 * reconnects. While an acquire sent by lc_acquire_send is pending it
 * returns NULL (reason in lc_conn_errstr): the caller's commands would read
 * that attempt's replies as theirs. Same thread rules as conn. */
redisContext *lc_conn_redis(lc_conn *conn);

/* One PING round trip (connecting first if needed), bounded by the connect
 * and command timeouts. LC_OK, or LC_IO with the reason in lc_conn_errstr;
 * LC_MISUSE, nothing sent, while an acquire sent by lc_acquire_send is
 * pending. The thread that owns conn. Not counted in lc_stats.io_errors. */
lc_status lc_conn_ping(lc_conn *conn);

/* The last failure on this connection (never NULL; "" when none), at most
 * LC_ERRSTR_LEN-1 bytes, owned by conn, valid until the next call on conn.
 * The thread that owns conn. */
const char *lc_conn_errstr(const lc_conn *conn);

/* How many connections to Redis conn has made so far (0 before its first
 * command). conn makes a new one silently, on its next call, after an I/O
 * error, when the peer closed the idle socket, after a -READONLY reply or
 * a master switch. Read it after a command and again later: a different
 * value means what was sent in between went over another connection. That
 * matters to WAIT, which counts only its own connection's writes: on a
 * fresh connection it reports every replica at once, whatever became of a
 * write made on the old one (the service's check before it answers 200).
 * Never fails; the thread that owns conn. */
uint64_t lc_conn_connects(const lc_conn *conn);

/* --- locks ------------------------------------------------------------- */

typedef struct lc_guard lc_guard;

typedef struct lc_lock_args {
    lc_mode mode;
    const char *key;   /* lock key, e.g. "miaosha:{demo}:lock"; 1..512 bytes */
    const char *owner; /* caller-chosen owner id, 1..LC_ID_LEN-1 bytes; the
                          service uses one per request, so a request that
                          dies is never re-entered by the next request on
                          the same thread. Reentrancy is per (key, owner). */
    int64_t lease_ms;  /* setnx/token/redlock/fenced: the lease, > 0
                          (required).
                          reentrant: 0 = watchdog mode (lease =
                          watchdog_timeout_ms, renewed every third of it
                          while this acquisition is held, even as a
                          re-entry inside a fixed-lease hold); > 0 = fixed
                          lease, no watchdog (Redisson's lock(leaseTime)).
                          Ignored by none and mutex. At most 24 h. */
    int64_t wait_ms;   /* how long to wait for a held lock; 0 = try once
                          (the walkthrough's behaviour). Never slept past.
                          <= 24 h. */
    /* fenced (required there, ignored by the other modes): the key of the
     * counter the acquire script increments with every grant, 1..512 bytes,
     * e.g. "miaosha:{sku}:fence". The caller's, so that lockcore learns
     * nothing of what the number protects; on Redis Cluster it must share
     * the lock key's hash slot (one script names both). Never reset it
     * while any holder may live: its numbers must only grow. */
    const char *fence_key;
    /* Optional cancellation (a server shutting down): when *cancel becomes
     * nonzero, a waiting acquire gives up within LC_CANCEL_LATENCY_MS and
     * returns LC_CANCELED, holding nothing. It is read, never written, and
     * may be raised from any thread or a signal handler (lock-free atomic
     * store). NULL = none. */
    const atomic_int *cancel;
} lc_lock_args;

#define LC_CANCEL_LATENCY_MS 100 /* how soon a raised cancel flag is seen */

/* Acquires the lock named by a->key in mode a->mode, waiting up to
 * a->wait_ms. Sends exactly the mode's commands (lockcore/README.md):
 *   none       nothing; always LC_OK
 *   mutex      an in-process lock per key (not reentrant: the same owner
 *              waits for itself); conn is needed but sends nothing
 *   setnx      SETNX key "1", then separately PEXPIRE key lease; waiting
 *              polls every retry_interval_ms + jitter
 *   token      SET key <fresh libuuid> NX PX lease; polls like setnx
 *   reentrant  Redisson's acquire script on a hash (mirrors
 *              RedissonLock.tryLockInnerAsync); waiting (mirrors
 *              RedissonLock.tryLock(waitTime)) subscribes to the lock's
 *              channel once per process; the local waiters form a line and
 *              a release message wakes the first, who also retries at the
 *              holder's PTTL and at least every 100 ms (a message can be
 *              lost on a reconnect). A newcomer may take a just-released
 *              lock ahead of the line until the first waiter has been first
 *              for 5 ms; then newcomers queue (Go's sync.Mutex starvation
 *              mode). The line is per process: other processes, and callers
 *              with wait_ms = 0, always try at once.
 *   redlock    SET key <fresh libuuid> NX PX lease to every node at once
 *              (non-blocking sockets, one poll loop; a node that has not
 *              answered within redlock_node_timeout_ms counts as failed and
 *              is reconnected on the next call; the round returns as soon
 *              as a majority said OK: the other nodes' replies are read by
 *              the next redlock call on conn, and a node whose OK comes
 *              late holds the key too and gets the release; with
 *              redlock_restart_delay_ms a node up for less than the delay
 *              gets no SET and counts as failed too; "up" is its INFO
 *              uptime_in_seconds less one second, as Redis's whole seconds
 *              can run a second ahead). Acquired when a majority
 *              (N/2+1) said OK and the round took less than the lease:
 *              validity = lease - elapsed - lc_redlock_drift_ms(lease)
 *              must be > 0. Otherwise the compare-and-delete release goes
 *              to every node (those that did not answer too), and a
 *              waiting acquire tries again after a random 0..2 x
 *              retry_interval_ms. LC_BUSY when no attempt won within
 *              wait_ms; LC_IO as soon as fewer than a majority of the nodes
 *              answered an attempt (down, timed out, or an error reply):
 *              a majority can then not be had by waiting.
 *              With p: LC_MISUSE when p holds commands (the lock's nodes
 *              are not the caller's data server).
 *   fenced     the fenced_acquire script (EVALSHA; NOSCRIPT: EVAL): when
 *              the key is free, SET key <fresh libuuid> PX lease and INCR
 *              fence_key in one atomic step, the counter's new value being
 *              the guard's fencing token (lc_guard_fence); else nil and
 *              nothing written. Polls like token. A fence_key that holds
 *              something other than an integer fails the script before
 *              it writes anything: LC_IO, no lock taken.
 * Returns LC_OK and sets *out to a new guard (release it with lc_release);
 * LC_BUSY when not acquired within wait_ms; LC_IO when Redis failed — no
 * guard; a timed-out command may still be executed later: token, fenced and
 * reentrant hand it to the orphan cleanup above, which gives back a lock it
 * was granted; setnx leaves it until its lease runs out, and setnx whose
 * PEXPIRE failed leaves a lock with no TTL (the flaw); LC_CANCELED when a->cancel was raised while
 * waiting; LC_MISUSE for bad arguments; LC_NOMEM. *out is NULL on every
 * status but LC_OK. The thread that owns conn. */
lc_status lc_acquire(lc_conn *conn, const lc_lock_args *a, lc_guard **out);

/* Releases one acquisition and frees g (in every case, so never call it twice
 * on one guard). NULL g is LC_MISUSE; so is a NULL conn for setnx, token,
 * reentrant, redlock and fenced (the guard is still freed and its renewal stopped, so the
 * lease frees the lock). While an acquire sent by lc_acquire_send is
 * pending on conn, conn counts as NULL for every mode but redlock (whose
 * nodes are other connections): setnx, token, fenced and reentrant answer
 * LC_MISUSE as above, nothing sent; none and mutex release (LC_OK)
 * unless the call carries commands (lc_release_pipe: LC_MISUSE).
 *   none       LC_OK
 *   mutex      LC_OK
 *   setnx      DEL key: LC_OK when a key was deleted — even another
 *              holder's (the flaw) — LC_NOT_OWNER when none existed
 *   token      Lua compare-and-delete: LC_OK, or LC_NOT_OWNER when the key
 *              is gone or holds another token (nothing deleted)
 *   fenced     as token (the fence counter is left as it is: it only grows)
 *   reentrant  Redisson's unlock script (mirrors unlockInnerAsync): LC_OK
 *              when the hold count went down (and at 0 the key was deleted
 *              and one release message published); LC_NOT_OWNER when the
 *              field is absent; LC_LOST when it is absent and the watchdog
 *              had reported the lock lost during the hold. The watchdog
 *              stops renewing at the last local release of a watchdog-mode
 *              acquisition, whatever Redis answered.
 *   redlock    the token's compare-and-delete on every node at once
 *              (EVAL, the script's text along, so a node that lost its
 *              script cache runs it too; it returns as soon as a majority
 *              deleted the key, the other nodes' replies read by the next
 *              redlock call on conn): LC_LOST when the guard's validity had run out
 *              before the release (lc_guard_validity_ms was 0: another
 *              holder may have been let in, whatever the nodes answer);
 *              else LC_OK when a majority deleted the key; LC_IO when
 *              fewer than a majority answered; LC_NOT_OWNER otherwise.
 *              With commands in p: LC_MISUSE, nothing sent.
 *   any        LC_IO when Redis failed: token, fenced and reentrant hand a release
 *              that may still run to the orphan cleanup above, which reads
 *              its late reply; if it never runs, the lease frees the lock.
 * The thread that owns conn. */
lc_status lc_release(lc_conn *conn, lc_guard *g);

/* --- the caller's commands in the lock's round trip --------------------- */

/* Redis runs one connection's commands in the order they arrive, so a
 * caller's commands can travel in the same write as an acquire (after it)
 * or as a release (before it) without changing what any mode guarantees:
 * the lock is held from the acquire's execution to the release's. A locked
 * read-then-write then costs two round trips instead of four, and the lock
 * is held for one round trip less. The lock core does not know what the
 * commands do; it writes them, reads their replies in order and hands them
 * back.
 *
 * Rules for the commands:
 *   - formatted with lc_pipe_append (redisFormatCommand's format) or
 *     lc_pipe_append_argv; at most LC_PIPE_MAX of them;
 *   - with an acquire: commands whose effect is right whether or not the
 *     attempt takes the lock, since they run on every attempt (the lock
 *     command runs first, the caller's right after it, in the same
 *     write): read-only commands (WATCH and UNWATCH count as such:
 *     lockcore never sends EXEC, so a watch cannot change what its own
 *     commands do), or a write any attempt may make — the service's
 *     fenced read raises a high-water mark to the latest fencing token
 *     issued, which is what the holder's own read does;
 *   - with a release: any complete commands, writes included — a MULTI
 *     must be closed by its EXEC (or DISCARD) within the pipe;
 *   - never a blocking command (BLPOP, WAIT...), SUBSCRIBE, MONITOR or
 *     anything else that changes the connection's state (SELECT, AUTH,
 *     CLIENT REPLY): the connection must come back as it went.
 *
 * The lc_pipe is a plain structure so that it can live on the stack; its
 * fields belong to these functions. One lc_pipe is used by one thread at a
 * time. */
#define LC_PIPE_MAX 16 /* commands per pipe */

typedef struct lc_pipe {
    int n;                          /* commands appended */
    char *cmd[LC_PIPE_MAX];         /* RESP text (redisFormatCommand's) */
    size_t len[LC_PIPE_MAX];        /* bytes */
    redisReply *reply[LC_PIPE_MAX]; /* reply i after a call, or NULL */
} lc_pipe;

/* Empties *p (no commands, no replies); call once before first use. Any
 * thread. */
void lc_pipe_init(lc_pipe *p);

/* Appends one command, formatted as redisFormatCommand does ("GET %s",
 * "%b" for binary). Returns LC_OK; LC_MISUSE when p already has
 * LC_PIPE_MAX commands or the format is invalid; LC_NOMEM. The thread that
 * uses p. */
lc_status lc_pipe_append(lc_pipe *p, const char *fmt, ...);

/* The same with an argument vector (argvlen NULL: strlen of each). */
lc_status lc_pipe_append_argv(lc_pipe *p, int argc, const char **argv, const size_t *argvlen);

/* Hands over reply i (0-based, in append order) of the last call that
 * carried p: the caller owns it and frees it with freeReplyObject. NULL
 * when there is none (no such command, not sent, no reply came, or already
 * taken). The thread that uses p. */
redisReply *lc_pipe_take(lc_pipe *p, int i);

/* Frees the commands and every reply not taken; *p is then as after
 * lc_pipe_init and may be reused. NULL-safe. The thread that uses p. */
void lc_pipe_clear(lc_pipe *p);

/* p's commands alone, in one write, every reply read: the same round trip
 * without a lock (the caller's own transaction when it holds no lock in
 * Redis). p then holds every reply that came, NULL for one that did not.
 * LC_OK when every reply came (error replies included); LC_IO otherwise,
 * the reason in lc_conn_errstr, and the connection reconnects on the next
 * call; LC_MISUSE for a NULL argument, or while an acquire sent by
 * lc_acquire_send is pending (nothing sent). Not counted in
 * lc_stats.io_errors. The thread that owns conn. */
lc_status lc_conn_pipe(lc_conn *conn, lc_pipe *p);

/* lc_acquire, with p's commands (NULL or empty: exactly lc_acquire) in the
 * same write as the lock command of every attempt, right after it:
 *   none       p's commands alone: one round trip
 *   mutex      the in-process lock, then p's commands: one round trip
 *   setnx      SETNX alone (the gap between it and PEXPIRE, the
 *              mode's flaw, stays); when it succeeded, PEXPIRE
 *              and p's commands in one write: two round trips
 *   token      SET NX PX and p's commands: one round trip
 *   reentrant  the acquire script and p's commands: one round trip (a
 *              NOSCRIPT answer costs a second, EVAL with p's commands)
 *   redlock    LC_MISUSE when p holds commands (see lc_acquire)
 *   fenced     the acquire script and p's commands: one round trip (a
 *              NOSCRIPT answer costs a second, EVAL with p's commands).
 *              p's commands cannot carry the fencing token — it is only
 *              known from the script's reply — but they run right after
 *              the script, so while the lock is held the fence counter's
 *              value is this attempt's token (a grant increments it, and
 *              only a free key is granted).
 * A waiting acquire (wait_ms > 0) sends p's commands again with each
 * attempt; the reentrant line of waiters and its pub/sub wake-ups work as
 * in lc_acquire, since only attempts carry the commands.
 * On LC_OK, p holds the replies of the attempt that took the lock (take
 * them with lc_pipe_take; an error reply to one of the caller's commands is
 * a reply like any other, not a failure). On every other status p holds no
 * reply: the replies of attempts that did not take the lock, and of a call
 * that failed, are read (so the connection stays in step) and freed by
 * lockcore. LC_IO also when a reply of p's did not come (timeout, broken
 * connection): the connection then reconnects on the next call, and a lock
 * taken by that attempt stays in Redis until its lease runs out, as with
 * any timed-out acquire. Same statuses, guard and threads as lc_acquire. */
lc_status lc_acquire_pipe(lc_conn *conn, const lc_lock_args *a, lc_pipe *p, lc_guard **out);

/* The first attempt of lc_acquire_pipe(conn, a, p, ...) written to Redis
 * now, its replies left for that call to read, so that the caller can do
 * other work (answer an earlier request, build what the section needs)
 * while they travel instead of before the lock command leaves. It changes
 * nothing the lock does: the same commands in the same write, the same
 * waiting, statuses and guard; only the attempt leaves earlier.
 *   token, fenced  SET NX PX / the acquire script with p's commands; the
 *                  token is minted here (and the next one right after the
 *                  write, while the replies travel)
 *   reentrant      the acquire script with p's commands, when the first
 *                  step of lc_acquire_pipe would be an attempt (the line of
 *                  waiters is not starving, or conn's owner already holds
 *                  the key, or wait_ms is 0); else nothing is sent
 *   none, mutex, setnx, redlock  nothing is sent (their first step is not
 *                  one lock command with p: an in-process lock, SETNX's
 *                  gap before PEXPIRE, other servers)
 * Contract: after LC_OK the attempt is pending until the
 * lc_acquire_pipe(conn, a, p, out) (lc_acquire when p is NULL) that ends
 * it: same mode, key, owner and lease_ms, same fence_key (fenced), the same
 * p with the same commands not yet taken (wait_ms and cancel may differ:
 * wait_ms and lc_guard_wait_ms count from this call when it sent an
 * attempt, else from lc_acquire_pipe's, as without it). That call reads
 * the sent attempt's replies and goes on as always (LC_BUSY, a wait,
 * LC_IO, LC_OK with p's replies). Meanwhile, on conn:
 *   refused, nothing sent, the attempt left pending (they would send on
 *   the context whose replies belong to the attempt):
 *     lc_acquire_pipe / lc_acquire of another acquisition (any field above
 *       differs), lc_acquire_send   LC_MISUSE
 *     lc_conn_pipe, lc_conn_ping, lc_extend   LC_MISUSE
 *     lc_conn_redis   NULL
 *     lc_release / lc_release_pipe of setnx, token, fenced, reentrant, and
 *       of none or mutex with commands   LC_MISUSE (g freed all the same)
 *   run as usual (they do not touch that context): lc_conn_errstr, the
 *     lc_guard_* queries, lc_release of none or mutex without commands and
 *     of redlock (its nodes' own connections)
 *   lc_conn_free: frees conn; the attempt, if written, goes to the orphan
 *     cleanup (a lock it took is given back).
 * a's strings are copied; p must stay valid until the ending call.
 * Returns LC_OK (also when nothing was sent: a mode that sends nothing
 * ahead, or reentrant waiting behind a starving head; when Redis could not
 * be reached: the following lc_acquire_pipe then answers LC_IO with this
 * call's reason at once, so the pair costs one connect timeout, not two;
 * and when the write failed: the following lc_acquire_pipe then reports
 * LC_IO, as a failed write in it would, and hands a lock the attempt may
 * have taken to the orphan cleanup) or LC_MISUSE (bad arguments as
 * lc_acquire_pipe's, a NULL conn, or an attempt already pending), nothing
 * sent. A mode that sends nothing ahead
 * answers LC_OK whatever p holds: lc_acquire_pipe judges p then (redlock
 * refuses any command there, LC_MISUSE). The thread that owns conn. */
lc_status lc_acquire_send(lc_conn *conn, const lc_lock_args *a, lc_pipe *p);

/* lc_release, with p's commands (NULL or empty: exactly lc_release) in the
 * same write as the release command, right before it, so they run while
 * the lock is still held:
 *   none, mutex  p's commands alone (mutex: the in-process lock is let go
 *                after their replies came)
 *   setnx        p's commands and DEL
 *   token        p's commands and the release script
 *   fenced       p's commands and the release script (token's)
 *   reentrant    p's commands and the unlock script
 *   redlock      LC_MISUSE when p holds commands, nothing sent
 * p then holds every reply that came, in order, whatever the status: a
 * NULL reply means it did not come (the connection broke or timed out) and
 * the command's outcome is unknown. The status is the release's, as in
 * lc_release, except LC_IO also when one of p's replies did not come (the
 * lease then frees the lock). A NOSCRIPT answer to the release script
 * costs a second round trip (EVAL alone; p's commands are not sent again).
 * With a NULL conn nothing is sent (LC_MISUSE, as lc_release). The thread
 * that owns conn. */
lc_status lc_release_pipe(lc_conn *conn, lc_guard *g, lc_pipe *p);

/* token and fenced: compare-and-PEXPIRE — sets the lease to lease_ms (> 0)
 * if the key still holds this guard's token (fenced: the fencing token
 * stays the same). LC_OK, LC_NOT_OWNER, LC_IO, LC_MISUSE (another mode,
 * bad lease, or an acquire sent by lc_acquire_send pending on conn: nothing
 * sent, the guard unchanged). The thread that owns conn. */
lc_status lc_extend(lc_conn *conn, lc_guard *g, int64_t lease_ms);

/* 1 once the lock is known to have been lost while held: the watchdog's
 * renew script returned 0 (reentrant). lc_extend returning LC_NOT_OWNER
 * sets it too (token, fenced); redlock: the validity ran out. 0 otherwise.
 * Any thread. */
int lc_guard_lost(const lc_guard *g);

/* Milliseconds lc_acquire spent before it got the lock, whole ones (floor
 * of the µs span: an uncontended acquisition reads 0). Any thread. */
int64_t lc_guard_wait_ms(const lc_guard *g);

/* redlock: the milliseconds of validity left now — the lease minus the
 * time from the start of the winning round to now minus the clock drift
 * allowance — or 0 once it ran out: the work the lock protects must be
 * done (its writes sent) within it. -1 for every other mode. Any thread. */
int64_t lc_guard_validity_ms(const lc_guard *g);

/* Redlock's clock drift allowance for a lease, as the algorithm's reference
 * implementation computes it: lease_ms / 100 (1 %, rounded down) + 2 ms.
 * Any thread. */
int64_t lc_redlock_drift_ms(int64_t lease_ms);

/* fenced: this acquisition's fencing token, the value the acquire script's
 * INCR of fence_key returned (>= 1): larger than the token of every
 * earlier grant on that counter, smaller than every later one
 * (Kleppmann's fencing token; a store that refuses a token lower than
 * the highest it has seen refuses a holder whose lease ran out). 0 for
 * every other mode. Any thread. */
int64_t lc_guard_fence(const lc_guard *g);

/* The value that identifies this holder in Redis: the token (token,
 * redlock and fenced modes),
 * the hash field "<instance>:<owner>" (reentrant), "1" (setnx), "" (none,
 * mutex). Valid until the guard is released. Any thread. */
const char *lc_guard_owner_token(const lc_guard *g);

#ifdef __cplusplus
}
#endif

#endif
