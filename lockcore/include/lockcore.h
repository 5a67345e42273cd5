/* lockcore.h — one lock interface for every seckill mode.
 *
 * Every purchase in miaosha takes its lock through these functions and only
 * the mode (lc_mode) differs, so a comparison between modes varies the lock
 * and nothing else. Three opaque handles:
 *   lc_client  one per process: options, counters, background threads;
 *              thread-safe
 *   lc_conn    one Redis connection, used by one thread at a time
 *   lc_guard   one acquisition, handed back to lc_release, which frees it
 * Errors are statuses (lc_status); contention is LC_BUSY, not an error.
 * Durations are milliseconds. Each function's block below is its contract;
 * lockcore/README.md is the overview: every command each mode sends,
 * threads, fork and SIGPIPE, the orphan cleanup, Sentinel, Redis Cluster
 * keys.
 *
 * Pointers: where a function's block does not say what NULL does, every
 * pointer argument must be a valid one; NULL there is undefined (a crash),
 * as in hiredis and SQLite. The one way lockcore ends the process is
 * abort(3) after one line on stderr, for a bug it cannot go on past: a
 * broken internal invariant, or a pthread call on a mutex that was
 * destroyed or is not held (e.g. a client freed while in use). A state of
 * Redis or of the machine is never a reason: those are statuses. A guard
 * released twice is memory freed twice, as the release's block says.
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

/* The steps of the lock story, each fixing one flaw of the one before and
 * keeping another (lockcore/README.md, the modes table). */
typedef enum lc_mode {
    LC_NONE = 0,  /* no lock: the race */
    LC_MUTEX,     /* an in-process lock per key (synchronized) */
    LC_SETNX,     /* SETNX, then PEXPIRE; DEL to release */
    LC_TOKEN,     /* SET NX PX with a UUID; compare-and-delete */
    LC_REENTRANT, /* Redisson's RLock: a hash, the watchdog, pub/sub */
    LC_REDLOCK,   /* the Redlock algorithm on N independent masters */
    LC_FENCED,    /* token's lock plus a fencing token */
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
                         simply running out: that is LC_NOT_OWNER); redlock
                         release: the guard's validity had run out when the
                         release began */
    LC_IO = 4,        /* Redis unreachable, timed out, or answered an error */
    LC_MISUSE = 5,    /* bad arguments, or a call the mode does not offer */
    LC_NOMEM = 6,     /* out of memory, or a background thread could not start */
    LC_CANCELED = 7   /* the caller's cancel flag was raised while waiting */
} lc_status;

/* The mode's public name, which is also its URL segment: "none", "mutex",
 * "setnx", "token", "reentrant", "redlock" or "fenced"; "?" for a value
 * out of range. Static storage, never freed. Any thread. */
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
    /* The key's TTL is set by the acquisition and renewed by nothing in
     * the background (setnx, token, fenced): the lock has certainly
     * expired lease_ms + 1 ms after lc_acquire returned, or after the last
     * lc_extend that succeeded (token, fenced) returned, with its
     * lease_ms. */
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
    /* A waiting acquisition polls: it tries again after a pause
     * (lc_conn_retry_pause) until its wait is spent (setnx, token, fenced,
     * redlock). The others are handed the lock (mutex), woken by the
     * release message (reentrant) or never wait (none). */
    bool polls;
    /* Waiters line up: once the first in line has waited 5 ms, the next
     * release hands the lock to it and newcomers queue behind (reentrant;
     * the starvation mode of Go's sync.Mutex, lc_acquire). An attempt with
     * wait_ms 0 is not in that line and barges past it, so a caller that
     * probes several keys without waiting would starve it. */
    bool queues_waiters;
    /* The smallest lc_lock_args.lease_ms (ms) lc_acquire takes other than
     * 0: 3 for redlock, whose lease must exceed its clock-drift allowance
     * (lc_redlock_drift_ms: lease_ms/100 + 2), else 1. A lease below it
     * is LC_MISUSE, so a caller can refuse it before asking. */
    int64_t min_lease_ms;
} lc_mode_info;

/* The mode's row (static storage, never freed), or NULL for a value out of
 * range. Any thread. */
const lc_mode_info *lc_mode_info_of(lc_mode mode);

/* Parses a public mode name (exact, lower case). Returns 0 and sets *out;
 * -1 for an unknown name or a NULL one, *out untouched. Any thread. */
int lc_mode_parse(const char *name, lc_mode *out);

/* The status's name: "ok", "busy", "not_owner", "lost", "io", "misuse",
 * "nomem", "canceled"; "?" for a value out of range. Static storage, never
 * freed. Any thread. */
const char *lc_status_name(lc_status status);

/* --- client ------------------------------------------------------------ */

#define LC_REDLOCK_MAX_NODES 9
#define LC_SENTINEL_MAX_NODES 9
#define LC_CLUSTER_MAX_SEEDS 16

/* The client's options: lc_options_init sets the defaults, lc_client_new
 * checks the bounds and copies every string. */
typedef struct lc_options {
    const char *redis_host;      /* default "127.0.0.1"; 1..255 bytes */
    int redis_port;              /* default 6379; 1..65535 */
    const char *redis_password;  /* NULL or "" = no AUTH; < 256 bytes */
    int redis_db;                /* SELECT on connect when > 0; default 0, >= 0 */
    int connect_timeout_ms;      /* default 1000, > 0 */
    int command_timeout_ms;      /* per command round trip; default 1000, > 0 */
    int64_t watchdog_timeout_ms; /* reentrant lease without an explicit one;
                                    renewed every watchdog_timeout_ms / 3.
                                    Default 30000 (Redisson's
                                    lockWatchdogTimeout); 30..86400000 */
    int64_t retry_interval_ms;   /* setnx/token/fenced polling interval
                                    while waiting, plus 0..interval/2 of
                                    jitter (redlock: a random 0..2x it
                                    between rounds; reentrant: the pause
                                    before trying again when the lock
                                    answered no PTTL to wait on); default
                                    10, 1..60000 */
    const char *instance_id;     /* reentrant hash fields are
                                    "<instance_id>:<owner>"; NULL = a fresh
                                    libuuid; else 1..LC_ID_LEN-1 bytes */
    /* Redlock's masters, independent of redis_host (which stays the
     * caller's own data server): redlock_node_count strings "host:port"
     * (host an IPv4 address or a name: no space, control byte or ':';
     * port 1..65535 in digits), no node listed twice (the same text: two
     * names of one server are not found out). 0 nodes (the default): the redlock mode is not
     * offered; otherwise an odd count, 3..LC_REDLOCK_MAX_NODES. The nodes get no AUTH and no SELECT
     * (database 0). */
    const char *const *redlock_nodes;
    int redlock_node_count;
    int redlock_node_timeout_ms; /* one parallel round (connect, write and
                                    every node's reply) gives up on a node
                                    after this; keep it far below the lease.
                                    Default (and 0) 50, 1..60000 */
    /* Redis Sentinel: sentinel_count strings "host:port" (as
     * redlock_nodes'), 0..LC_SENTINEL_MAX_NODES, none twice. With at least one, redis_host and
     * redis_port are not used: every connection goes to the master the
     * Sentinels name for master_name (1..127 bytes, required then). 0 (the
     * default): the plain address. lockcore/README.md, "Sentinel". */
    const char *const *sentinels;
    int sentinel_count;
    const char *master_name;
    /* redlock: a node that has been up for less than this gets no SET and
     * counts as a node that did not answer, so a node that restarted
     * without persistence (forgetting the keys it granted) cannot vote a
     * second holder in; set it to the longest lease ever asked for. Costs
     * one INFO server round per new node connection; a node that answers
     * no uptime never votes. Default 0 (off: the algorithm as the Redis
     * docs give it), 0..86400000. lockcore/README.md, "Restart delay". */
    int64_t redlock_restart_delay_ms;
    /* Redis Cluster: cluster_node_count seed nodes "host:port" (as
     * redlock_nodes'; an IPv6 address as "[addr]:port"),
     * 0..LC_CLUSTER_MAX_SEEDS, none twice. With
     * at least one, redis_host and redis_port are not used: every command
     * goes to the master serving its key's hash slot, as the slot map
     * (CLUSTER NODES of the first node that answers) says, and follows the
     * cluster's redirects. Not with sentinels, and only with redis_db 0.
     * 0 (the default): no cluster. lockcore/README.md, "Redis Cluster". */
    const char *const *cluster_nodes;
    int cluster_node_count;
    int64_t cluster_refresh_ms; /* the map is asked afresh this often, besides
                                   after a MOVED or a refused connection;
                                   default (and 0) 5000, 100..3600000 */
} lc_options;

/* Fills *o with the defaults given at each field; every other field 0 or
 * NULL. Any thread. */
void lc_options_init(lc_options *o);

typedef struct lc_client lc_client;

/* Creates the process-wide client from *o (its strings copied). It does not
 * connect: Redis may be down at start, and each lc_conn connects on first
 * use. Its background threads (watchdog, subscriber, orphan reaper,
 * Sentinel watcher) start on first need.
 * Returns LC_OK and sets *out; LC_MISUSE for a NULL o or out, or an option
 * out of its bounds (lc_options), with the reason in err (errlen bytes,
 * when err is not NULL), which names the field and, for a redlock node,
 * Sentinel or cluster seed that is not "host:port" or is listed twice,
 * the node;
 * LC_NOMEM. *out is NULL on failure (when out is not NULL).
 * Memory: *out is the caller's; free it with lc_client_free.
 * Threads: any, after fork() and never before (a child inherits no
 * background thread and would share the parent's Redis sockets). A process
 * using lockcore must ignore SIGPIPE. */
lc_status lc_client_new(const lc_options *o, lc_client **out, char *err, size_t errlen);

/* Stops the background threads and frees c. NULL-safe. Every lc_conn and
 * lc_guard of c must be freed or released first. It waits for no late
 * reply of the orphan cleanup, only for a round trip it has under way
 * (the connect + command timeout; with Sentinels, finding the master
 * first, one Sentinel after another; with a cluster, a slot map refresh
 * first), and for the watchdog's renewal, the pub/sub subscriber's and
 * the Sentinel watcher's current round trip: the connections the cleanup
 * still held are closed, and the leases end what their commands may
 * still do (counted in lc_stats.orphans_unresolved).
 * Threads: any, with no other call on c running or to come. */
void lc_client_free(lc_client *c);

/* The instance id: lc_options.instance_id, or the libuuid drawn for it,
 * which begins every reentrant hash field. Owned by c, valid until
 * lc_client_free. Any thread. */
const char *lc_client_instance_id(const lc_client *c);

/* Writes "host:port" of the master that connections go to now into buf
 * (len bytes, NUL-terminated, truncated): redis_host:redis_port, or with
 * Sentinels the address last resolved or announced ("" before the first
 * connect), or with cluster_nodes every master of the slot map,
 * comma-separated, in slot order ("" before the first map). Writes
 * nothing when buf is NULL or len 0. Any thread. */
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
    uint64_t orphans_adopted;    /* token/fenced/reentrant acquires and
                                    releases that timed out and whose
                                    connection the orphan cleanup took over */
    uint64_t orphans_released;   /* locks the orphan cleanup gave back: a
                                    stalled acquire that was granted late,
                                    undone (or a stalled release answered
                                    NOSCRIPT, re-sent) */
    uint64_t orphans_unresolved; /* timed-out commands whose outcome stayed
                                    unknown (no reply within 60 s, the
                                    connection closed with a reentrant
                                    command unanswered, the client freed,
                                    or not adopted: 256 connections held
                                    already, no memory): the lease ends what
                                    they left */
    /* Redis Cluster (0 without): */
    uint64_t cluster_moved;     /* MOVED redirects followed */
    uint64_t cluster_ask;       /* ASK redirects followed (ASKING, then the
                                   commands) */
    uint64_t cluster_retries;   /* commands sent again after a back-off:
                                   TRYAGAIN, CLUSTERDOWN, LOADING, a slot
                                   whose keys were found on two nodes, or a
                                   master that refused the connection */
    uint64_t cluster_refreshes; /* slot maps taken (CLUSTER NODES) */
    /* redlock (0 without): bit i set while node i of
     * lc_options.redlock_nodes (in their order) failed the last command any
     * connection sent it — refused, closed, an error of the connection, or
     * no reply within redlock_node_timeout_ms — and cleared by its next
     * reply. A node skipped because it restarted and is not yet checked
     * leaves its bit as it was. A caller that polls it sees a node go down
     * and come back without a round of its own. */
    uint32_t redlock_nodes_down;
} lc_stats;

/* Copies c's counters into *out. Each field is exact (C11 atomics); the set
 * is not one instant. Any thread. */
void lc_client_stats(lc_client *c, lc_stats *out);

/* --- connection -------------------------------------------------------- */

typedef struct lc_conn lc_conn;

/* Creates a connection handle on c. It connects lazily, on its first
 * command (with redlock nodes, one more connection per node, made by the
 * first redlock call, each remade after its own failure), and reconnects on
 * the next call after an I/O error, a -READONLY reply or a master switch,
 * or when the peer closed the idle socket, so a handle survives a Redis
 * restart. Every call on it is bounded by the connect and command timeouts
 * (and wait_ms).
 * Returns LC_OK and sets *out; LC_MISUSE for a NULL argument; LC_NOMEM.
 * Memory: *out is the caller's; free it with lc_conn_free.
 * Threads: any; the handle then belongs to one thread at a time (a hiredis
 * context is not thread-safe). */
lc_status lc_conn_new(lc_client *c, lc_conn **out);

/* Closes and frees conn. NULL-safe. Guards made through it stay valid
 * (they do not reference the connection). An attempt lc_acquire_send wrote
 * and nobody read goes to the orphan cleanup with the connection: a lock it
 * took is given back. The thread that owns conn. */
void lc_conn_free(lc_conn *conn);

/* The connected hiredis context, for the caller's own commands (the
 * service's stock reads and writes), connecting first if needed (connect
 * timeout, AUTH, SELECT, command timeout set). Returns NULL when Redis
 * cannot be reached (reason in lc_conn_errstr), and while an acquire sent
 * by lc_acquire_send is pending (the caller's commands would read that
 * attempt's replies as theirs).
 * Memory: the context stays conn's: do not free it, and read every reply
 * you asked for. It is valid until the next lockcore call on conn, which
 * may replace it: after the caller's command failed with ctx->err set, or
 * when the socket turns out closed by the peer, or a reply was left unread
 * (on the socket or already in hiredis's reader) or a command appended and
 * never sent, that call reconnects rather than read a reply not its own.
 * With lc_options.cluster_nodes: the context of the node conn used last,
 * or before any, of a master of the slot map (taken first when there is
 * none): not the node of any key in particular, so for keyed commands use
 * lc_conn_redis_key.
 * Threads: the thread that owns conn. */
redisContext *lc_conn_redis(lc_conn *conn);

/* lc_conn_redis for the caller's commands about key (NUL-terminated):
 * without lc_options.cluster_nodes exactly lc_conn_redis(conn); with them
 * the context of the master serving key's hash slot now (the slot map taken
 * or refreshed first when due; a refused connection makes it refresh from
 * another node and is tried again within command_timeout_ms). Commands
 * written on it by hand follow no redirect: a MOVED or ASK comes back as
 * their reply (lc_conn_pipe follows them). Returns NULL as lc_conn_redis
 * does, and for a NULL key.
 * Memory: as lc_conn_redis's. The thread that owns conn. */
redisContext *lc_conn_redis_key(lc_conn *conn, const char *key);

/* One PING round trip, connecting first if needed, bounded by the connect
 * and command timeouts. With lc_options.cluster_nodes, a check of the
 * whole cluster instead: the slot map taken or refreshed first when due
 * (CLUSTER NODES, possibly of several nodes), then one PING to every
 * master in it, one after another; LC_IO when one fails (it is then
 * avoided by the next refresh) or when a slot has no master in the map.
 * Returns LC_OK; LC_IO with the reason in lc_conn_errstr; LC_MISUSE,
 * nothing sent, while an acquire sent by lc_acquire_send is pending. Not
 * counted in lc_stats.io_errors. The thread that owns conn. */
lc_status lc_conn_ping(lc_conn *conn);

/* The last failure on conn ("" when none, never NULL), at most
 * LC_ERRSTR_LEN-1 bytes. Owned by conn, valid until the next call on conn.
 * The thread that owns conn. */
const char *lc_conn_errstr(const lc_conn *conn);

/* How many connections to Redis conn has made so far (0 before its first
 * command). conn makes a new one silently, on its next call, after an I/O
 * error, when the peer closed the idle socket, after a -READONLY reply or a
 * master switch. With lc_options.cluster_nodes conn keeps one connection
 * per node: the first to each node counts, moving between them does not
 * (lc_conn_via says which one ran a command). Redlock's connections to
 * its own nodes are not counted. Never fails. The thread that owns conn. */
uint64_t lc_conn_connects(const lc_conn *conn);

/* The connection that ran the caller's commands of the last call on conn
 * that sends the caller's commands — lc_conn_pipe, lc_conn_pipe_each,
 * lc_conn_pipes_each, lc_conn_pipe_via, and a lock call carrying a
 * non-empty pipe (its own lock command does not count); every other call
 * (a lock call without a pipe, lc_conn_ping, commands sent on the context
 * lc_conn_redis lends) leaves the value as it was. The value is the
 * connection's number: conn numbers each connection it makes 1, 2, 3...
 * (lc_conn_connects counts them) and never reuses one. 0 when none of the
 * commands went out (an empty pipe included), or when they went over more
 * than one connection — a cluster batch over several masters, a batch a
 * redirect split between two nodes, a command that ran and was sent again
 * over another. A command sent whose reply was lost counts as gone over
 * its connection. Why: WAIT counts only the writes of the connection it
 * is sent on; on a fresh connection it reports every replica at once,
 * whatever became of a write made on another (on a cluster: another
 * node's, as after an ASK or MOVED). Never fails; 0 for NULL. The thread
 * that owns conn. */
uint64_t lc_conn_via(const lc_conn *conn);

/* Whether the last call on conn that sent the caller's commands
 * (lc_conn_pipe, a lock call carrying a pipe) held back a transaction
 * because of where its slot stands: pinned to its WATCH on a node the
 * slot's keys are leaving, refused there by ASK, MOVED, TRYAGAIN,
 * CLUSTERDOWN or LOADING — nothing of it ran, and it was not sent
 * elsewhere (that would run it unguarded). The caller may read again (a
 * fresh WATCH, which the router sends where the keys are) and decide
 * again. Always false without a cluster and after lc_conn_pipe_each /
 * lc_conn_pipes_each (they take no transaction). The thread that owns
 * conn. */
bool lc_conn_held_back(const lc_conn *conn);

/* The client conn was made from (lc_conn_new): for what the client knows
 * beside conn, such as the slot map conn's commands were routed by
 * (lc_cluster_slot_master). Never NULL for a valid conn; NULL for NULL.
 * Memory: the client's owner's (lc_client_free), not conn's. Any thread
 * (the pointer never changes). */
lc_client *lc_conn_client(const lc_conn *conn);

/* Sleeps the pause a waiting acquisition of mode takes between two of its
 * tries (lc_acquire's own polling): retry_interval_ms plus a random 0..half
 * of it (setnx, token, fenced; so waiters that began together do not
 * retry in lockstep), a random 0..2 x retry_interval_ms (redlock, as the
 * Redlock algorithm's retry delay) — at most max_ms, and at most
 * LC_CANCEL_LATENCY_MS when cancel is given (lc_acquire's own waits then
 * try again that often). For a caller that polls several locks itself
 * with a wait of 0 each (miaosha's stock buckets), so that it waits as the
 * lock's own wait would. Units: ms. cancel: NULL, or a flag that, once
 * nonzero, ends the pause within LC_CANCEL_LATENCY_MS. Returns LC_OK after the pause (*slept_ms, if
 * not NULL, the milliseconds slept); LC_CANCELED when cancel was raised before or during it;
 * LC_MISUSE for a NULL conn, a max_ms < 0 or a mode whose wait does not poll (lc_mode_info.polls
 * false). The thread that owns conn (the jitter is drawn from conn's random state). */
lc_status lc_conn_retry_pause(lc_conn *conn, lc_mode mode, int64_t max_ms, const atomic_int *cancel,
                              int64_t *slept_ms);

/* --- locks ------------------------------------------------------------- */

typedef struct lc_guard lc_guard;

/* One acquisition's arguments; lc_acquire checks them (LC_MISUSE). */
typedef struct lc_lock_args {
    lc_mode mode;
    const char *key;   /* lock key, e.g. "miaosha:{sku}:lock"; 1..512 bytes */
    const char *owner; /* caller-chosen owner id, 1..LC_ID_LEN-1 bytes, in
                          every mode; reentrant's hash field, so reentrancy
                          is per (key, owner) */
    int64_t lease_ms;  /* setnx/token/redlock/fenced: the lease, 1..86400000
                          (required; redlock: 3.., above its clock-drift
                          allowance lc_redlock_drift_ms). reentrant: 0 = watchdog mode (lease
                          watchdog_timeout_ms, renewed while this
                          acquisition is held, even as a re-entry inside a
                          fixed-lease hold); 1..86400000 = fixed lease, no
                          watchdog (Redisson's lock(leaseTime)). Ignored by
                          none and mutex */
    int64_t wait_ms;   /* how long to wait for a held lock, 0..86400000;
                          0 = try once. Never slept past */
    /* fenced (required there, ignored by the other modes): the key of the
     * counter the acquire script increments with every grant, 1..512
     * bytes, e.g. "miaosha:{sku}:fence". The caller's, so that lockcore
     * learns nothing of what the number protects; on Redis Cluster in the
     * lock key's hash slot. Never reset it while any holder may live. */
    const char *fence_key;
    /* NULL, or a flag that, once nonzero, ends a waiting acquire within
     * LC_CANCEL_LATENCY_MS with LC_CANCELED, holding nothing. Read, never
     * written; may be raised from any thread or a signal handler. */
    const atomic_int *cancel;
} lc_lock_args;

#define LC_CANCEL_LATENCY_MS 100 /* how soon a raised cancel flag is seen */

/* Acquires the lock named a->key in mode a->mode, waiting up to a->wait_ms,
 * with exactly the mode's commands (lockcore/README.md has each one):
 *   none       nothing
 *   mutex      an in-process lock per key (not reentrant: an owner waits
 *              for itself); nothing sent
 *   setnx      SETNX key "1", then separately PEXPIRE key lease; waiting
 *              polls every retry_interval_ms plus jitter
 *   token      SET key <fresh libuuid> NX PX lease; polls like setnx
 *   reentrant  Redisson's acquire script on a hash (mirrors
 *              RedissonLock.tryLockInnerAsync). Waiting mirrors
 *              RedissonLock.tryLock(waitTime): the process's waiters form a
 *              line on the lock's channel, a release message wakes the
 *              first, who also retries at the holder's PTTL and at least
 *              every 100 ms; a newcomer may take a just-released lock ahead
 *              of the line until its first waiter has been first for 5 ms
 *              (Go's sync.Mutex starvation mode)
 *   redlock    the Redlock algorithm as the Redis docs give it
 *              ("Distributed Locks with Redis"): SET key <fresh libuuid> NX
 *              PX lease to every node at once; held when a majority
 *              (N/2+1) said OK and the validity, lease - elapsed -
 *              lc_redlock_drift_ms(lease), is > 0. Otherwise the
 *              compare-and-delete goes to every node, and a waiting acquire
 *              tries again after a random 0..2 x retry_interval_ms. A node
 *              that has not answered within redlock_node_timeout_ms counts
 *              as failed; a call takes at most that per round, plus one
 *              more per round for replies an earlier round left in flight
 *   fenced     the fenced_acquire script: when the key is free, SET key
 *              <fresh libuuid> PX lease and INCR fence_key in one atomic
 *              step, the counter's new value being the guard's fencing
 *              token (Kleppmann's, lc_guard_fence); else nothing written.
 *              Polls like token
 * Returns LC_OK and sets *out; LC_BUSY when not acquired within wait_ms;
 * LC_IO when Redis failed (unreachable, timed out, an error reply; fenced:
 * also a fence_key that is not a counter, no lock taken; redlock: as soon
 * as fewer than a majority of the nodes answered an attempt, since waiting
 * cannot give a majority) — a timed-out command may still run later:
 * token, fenced and reentrant hand it to the orphan cleanup, which gives
 * back a lock it was granted; setnx leaves it to its lease, and a setnx
 * whose PEXPIRE failed leaves a lock with no TTL (the mode's flaw);
 * LC_CANCELED when a->cancel was raised while waiting; LC_MISUSE for a
 * NULL argument, an argument out of its bounds (lc_lock_args), redlock
 * without lc_options.redlock_nodes, or while an acquire sent by
 * lc_acquire_send for another acquisition is pending on conn; LC_NOMEM
 * (also when reentrant's watchdog thread cannot start — the lock is given
 * back, or if that release fails too left to its lease — or its pub/sub
 * subscriber thread, eventfd or channel cannot be had; redlock: its
 * command cannot be formatted). The reason of a failure is in
 * lc_conn_errstr.
 * Memory: on LC_OK *out is a new guard, the caller's until lc_release frees
 * it; NULL on every other status.
 * Threads: the thread that owns conn; the guard belongs to the thread that
 * holds the lock. */
lc_status lc_acquire(lc_conn *conn, const lc_lock_args *a, lc_guard **out);

/* Releases one acquisition and frees g, whatever the status (never call it
 * twice on one guard):
 *   none       LC_OK
 *   mutex      LC_OK
 *   setnx      DEL key: LC_OK when a key was deleted — even another
 *              holder's (the mode's flaw) — LC_NOT_OWNER when none existed
 *   token      the compare-and-delete script: LC_OK, or LC_NOT_OWNER when
 *              the key is gone or holds another token (nothing deleted)
 *   fenced     as token (the fence counter is left as it is: it only grows)
 *   reentrant  Redisson's unlock script (mirrors unlockInnerAsync): LC_OK
 *              when the hold count went down (at 0 the key was deleted and
 *              one release message published); LC_NOT_OWNER when the field
 *              is absent; LC_LOST when it is absent and the watchdog had
 *              found the lock lost during the hold. The watchdog stops
 *              renewing at the last local release of a watchdog-mode
 *              acquisition, whatever Redis answered.
 *   redlock    the compare-and-delete on every node at once (EVAL with the
 *              script's text, so a node that lost its script cache runs it
 *              too), returning once a majority deleted the key (the other
 *              replies are read by the next redlock call on conn): LC_LOST
 *              when the guard's validity had run out when the release
 *              began (another holder may have been let in, whatever the
 *              nodes answer); else LC_OK when a majority deleted the key;
 *              LC_IO when fewer than a majority answered; LC_NOT_OWNER
 *              otherwise
 * Also: LC_IO when Redis failed (token, fenced and reentrant hand a release
 * that may still run to the orphan cleanup, which reads its late reply; if
 * it never runs, the lease frees the lock); LC_MISUSE for a NULL g, and for
 * a NULL conn in setnx, token, reentrant, redlock and fenced (g is freed
 * all the same and its renewal stopped, so the lease frees the lock). While
 * an acquire sent by lc_acquire_send is pending on conn, conn counts as
 * NULL for every mode but redlock (whose nodes are other connections):
 * setnx, token, fenced and reentrant answer LC_MISUSE, nothing sent; none
 * and mutex release as usual. redlock also answers LC_MISUSE, nothing
 * sent, when conn's client has no redlock_nodes (a guard of another
 * client), and LC_NOMEM when conn's node table cannot be allocated or the
 * command cannot be formatted; either way the lease frees the lock.
 * Threads: the thread that owns conn. */
lc_status lc_release(lc_conn *conn, lc_guard *g);

/* --- the caller's commands in the lock's round trip --------------------- */

#define LC_PIPE_MAX 16 /* commands per pipe */

/* Up to LC_PIPE_MAX of the caller's commands, to travel in the same write
 * as a lock command (Redis runs one connection's commands in order, so a
 * locked read-then-write takes two round trips instead of four), and after
 * a call their replies. Never a blocking command (BLPOP, WAIT...),
 * SUBSCRIBE, MONITOR, or one that changes the connection's state (SELECT,
 * AUTH, CLIENT REPLY): the connection must come back as it went. A plain
 * structure, so that it can live on the stack; its fields belong to the
 * lc_pipe_* functions. Used by one thread at a time. */
typedef struct lc_pipe {
    int n;                          /* commands appended */
    char *cmd[LC_PIPE_MAX];         /* RESP text (redisFormatCommand's) */
    size_t len[LC_PIPE_MAX];        /* bytes */
    redisReply *reply[LC_PIPE_MAX]; /* reply i after a call, or NULL */
} lc_pipe;

/* Empties *p (no commands, no replies); call it once before first use. The
 * thread that uses p. */
void lc_pipe_init(lc_pipe *p);

/* Appends one command to p, formatted as hiredis's redisFormatCommand does
 * ("GET %s"; "%b" takes a pointer and a length for binary). Returns LC_OK;
 * LC_MISUSE for a NULL p or fmt, a p that holds LC_PIPE_MAX commands
 * already, an invalid format, or one that makes no argument at all ("" or
 * blanks: Redis would never answer it); LC_NOMEM. The command's text is p's until
 * lc_pipe_clear. The thread that uses p. */
lc_status lc_pipe_append(lc_pipe *p, const char *fmt, ...);

/* Appends one command of argc (>= 1) arguments, argv[i] being argvlen[i]
 * bytes (argvlen NULL: strlen of each), as hiredis's redisFormatCommandArgv
 * does; the arguments are copied. Returns LC_OK; LC_MISUSE for a NULL p,
 * argv or argv[i], argc < 1, or a p that holds LC_PIPE_MAX commands already;
 * LC_NOMEM. The thread that uses p. */
lc_status lc_pipe_append_argv(lc_pipe *p, int argc, const char **argv, const size_t *argvlen);

/* Hands over reply i (0-based, in append order) of the last call that
 * carried p. Memory: the caller owns it and frees it with freeReplyObject.
 * NULL when there is none (no such command, not sent, no reply came, or
 * already taken). The thread that uses p. */
redisReply *lc_pipe_take(lc_pipe *p, int i);

/* Frees the commands and every reply not taken; *p is then as after
 * lc_pipe_init and may be reused. NULL-safe. The thread that uses p. */
void lc_pipe_clear(lc_pipe *p);

/* p's commands alone, in one write, every reply read: the same round trip
 * without a lock (the caller's own transaction when it holds no lock in
 * Redis). p then holds every reply that came, NULL for one that did not.
 * Returns LC_OK when every reply came (error replies included); LC_IO
 * otherwise, the reason in lc_conn_errstr, and the connection reconnects on
 * the next call; LC_MISUSE for a NULL argument or a p not initialised,
 * or while an acquire sent by lc_acquire_send is pending (nothing sent).
 * Not counted in lc_stats.io_errors.
 * With lc_options.cluster_nodes, p goes to the master of the one slot its
 * commands name and follows MOVED, ASK, TRYAGAIN, CLUSTERDOWN and LOADING
 * (lockcore/README.md, "Keys and Redis Cluster"). Also LC_MISUSE, nothing
 * sent, when its commands name keys of two slots, or a command whose keys
 * the router cannot find (one lockcore does not know). LC_IO too when the
 * router gave up on commands before they ran (more than 5 redirects, a
 * back-off past command_timeout_ms, a redirect to a node that cannot be
 * reached, a later command of p that ran, which a resend would come
 * after, or a transaction whose WATCH is on the node that refused it):
 * their replies are then error replies holding the reason,
 * which lc_conn_errstr also says, never the last redirect; nothing of
 * them ran. The thread that owns conn. */
lc_status lc_conn_pipe(lc_conn *conn, lc_pipe *p);

/* p's commands over connection via (lc_conn_via's), in one write, every
 * reply read, as lc_conn_pipe — but only over that connection: never over
 * a new one, never routed by key. Meant for WAIT (and PING) after a write.
 * With a cluster the node it belongs to becomes the one conn uses. Returns
 * LC_OK when every reply came; LC_IO, nothing sent, when that connection
 * is closed or was remade since (the peer closed it, an I/O error, a
 * reconnect) or, with Sentinels, is to a server other than the master
 * they name now (a switch since the write: a WAIT there would count the
 * old master's replicas); LC_IO after a reply did not come; the reason in
 * lc_conn_errstr either way; LC_MISUSE, nothing sent, for a NULL argument,
 * via 0, while an acquire sent by lc_acquire_send is pending, or with a
 * cluster for a command that names a key, one the router does not know,
 * or MULTI/EXEC/DISCARD/WATCH/UNWATCH (the router keeps track of those).
 * Not counted in lc_stats.io_errors; lc_conn_held_back is false after it.
 * Memory: the replies are p's until lc_pipe_take or lc_pipe_clear. The
 * thread that owns conn. */
lc_status lc_conn_pipe_via(lc_conn *conn, lc_pipe *p, uint64_t via);

/* lc_conn_pipe for commands that do not depend on one another (each one
 * atomic on its own: a script, a single-key command), such as a batch of
 * purchases of many SKUs. Without lc_options.cluster_nodes: exactly
 * lc_conn_pipe. With a cluster: each command goes to the master of its own
 * slot, the commands for one master in one write, every master's write
 * sent before any reply is read — one round trip per master, side by side,
 * where lc_conn_pipe would refuse a batch of two slots; the replies of
 * every master within one command_timeout_ms (masters that hang cost the
 * batch one timeout, not one each). A command that did not run where the
 * map sent it (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING for its slot)
 * goes again alone after the rest, by lc_conn_pipe's rules (a MOVED fixes
 * the map first), each started within one command_timeout_ms of the
 * replies' read (a resend's own round trip then waits for its reply up to
 * command_timeout_ms, as every round trip does: at worst the call takes
 * about three timeouts and a connect). The order of the commands is kept
 * per master unless a redirect reorders them, so nothing may rely on it.
 * A command whose reply was lost is never sent again.
 * Returns LC_OK when every reply came from the node that ran the command
 * (an error reply, READONLY included, is the node's answer and the
 * caller's to read); LC_IO when a reply did not come (NULL: sent, outcome
 * unknown; that master's connection reconnects on its next use) or a
 * command was given up before it ran (its reply an error holding the
 * reason, nothing of it ran: no master reached in time, more than 5
 * redirects, a redirect naming another slot), the reason in
 * lc_conn_errstr; LC_MISUSE, nothing sent, for a NULL argument, while an
 * acquire sent by lc_acquire_send is pending, or with a cluster for a
 * command that names no key, keys of two slots, MULTI/EXEC/DISCARD/WATCH/
 * UNWATCH, or one the router does not know; LC_NOMEM, nothing sent, when
 * the batch's bookkeeping could not be allocated (a cluster).
 * Memory: the replies are p's until lc_pipe_take or lc_pipe_clear. The
 * thread that owns conn. */
lc_status lc_conn_pipe_each(lc_conn *conn, lc_pipe *p);

#define LC_PIPES_MAX 64 /* pipes per lc_conn_pipes_each call */

/* lc_conn_pipe_each for the commands of np pipes (0..LC_PIPES_MAX) at
 * once, for batches larger than one pipe holds — an audit that reads every
 * bucket of a SKU, bucket by bucket a slot of its own: each master still
 * gets one write holding all of its commands (in pipe order, then command
 * order), every master's written before any reply is read, so the batch
 * costs one round trip per master, not one per LC_PIPE_MAX commands.
 * Without lc_options.cluster_nodes: every pipe in one write on the one
 * connection, then every reply read (one round trip); a failed write
 * leaves every reply NULL (outcome unknown). Redirects, resends, time
 * budget, replies and statuses as lc_conn_pipe_each's, for every command
 * of every pipe (a LC_MISUSE names the pipe and command; nothing is sent
 * then); also LC_MISUSE for a NULL pipes, a NULL pipe, one pipe given
 * twice or np out of range. No command at all: LC_OK, nothing sent
 * (but one pipe without a cluster is exactly lc_conn_pipe, as for
 * lc_conn_pipe_each: it connects first, and may answer LC_IO);
 * LC_NOMEM (nothing sent) when the batch's bookkeeping could not be
 * allocated. Memory: each pipe's replies are that pipe's until
 * lc_pipe_take or lc_pipe_clear. The thread that owns conn. */
lc_status lc_conn_pipes_each(lc_conn *conn, lc_pipe *const *pipes, int np);

/* lc_acquire with p's commands (NULL or empty: exactly lc_acquire) in the
 * same write as the lock command of every attempt, right after it. Since
 * they run with every attempt, they must be right whether or not the
 * attempt takes the lock: read-only commands (WATCH and UNWATCH count as
 * such: lockcore never sends EXEC), or a write any attempt may make.
 * Round trips:
 *   none       p's commands alone: one
 *   mutex      the in-process lock, then p's commands: one
 *   setnx      SETNX alone (the gap before PEXPIRE, the mode's flaw, stays),
 *              then, when it succeeded, PEXPIRE and p's commands: two
 *   token      SET NX PX and p's commands: one
 *   reentrant  the acquire script and p's commands: one (a NOSCRIPT answer
 *              costs a second, EVAL with p's commands)
 *   redlock    LC_MISUSE when p holds commands: its nodes are not the
 *              caller's data server
 *   fenced     as reentrant. p's commands cannot carry the fencing token
 *              (it is only known from the script's reply), but they run
 *              right after the script, so while the lock is held the fence
 *              counter's value is this attempt's token
 * A waiting acquire sends p's commands again with each attempt; the
 * reentrant line of waiters works as in lc_acquire, since only attempts
 * carry them.
 * Returns lc_acquire's statuses, LC_MISUSE also for a p not initialised
 * (its n out of 0..LC_PIPE_MAX; nothing of it touched) and, with a
 * cluster, for p's commands naming another slot than the lock's key
 * (nothing sent), and LC_IO also when a reply of p's did not
 * come (timeout, broken connection: it reconnects on the next call; a lock
 * that attempt took stays in Redis until its lease runs out, since the
 * orphan cleanup takes over only a lock command whose own reply is
 * missing). On LC_OK p holds the replies of the attempt that took the lock
 * (an error reply to one of p's commands is a reply, not a failure; one to
 * the lock command is LC_IO). On every other status p holds no reply: those
 * of attempts that did not take the lock, and of a call that failed, are
 * read (the connection stays in step) and freed.
 * Memory: the replies are p's until lc_pipe_take or lc_pipe_clear; the
 * guard as lc_acquire's.
 * Threads: the thread that owns conn and uses p. */
lc_status lc_acquire_pipe(lc_conn *conn, const lc_lock_args *a, lc_pipe *p, lc_guard **out);

/* Writes the first attempt of lc_acquire_pipe(conn, a, p, ...) now and
 * leaves its replies for that call to read, so that the caller can do other
 * work while they travel instead of before the lock command leaves. The
 * lock does not change: the same commands in the same write, the same
 * waiting, statuses and guard; only the attempt leaves earlier.
 *   token, fenced  SET NX PX / the acquire script with p's commands; the
 *                  token is minted here (and the next one right after the
 *                  write, while the replies travel)
 *   reentrant      the acquire script with p's commands, when the first
 *                  step of lc_acquire_pipe would be an attempt (the line of
 *                  waiters is not starving, or conn's owner already holds
 *                  the key, or wait_ms is 0); else nothing
 *   none, mutex, setnx, redlock  nothing (lc_mode_info.sends_ahead)
 * The attempt is pending until the lc_acquire_pipe(conn, a, p, out)
 * (lc_acquire when p is NULL) that ends it: same mode, key, owner,
 * lease_ms and (fenced) fence_key, the same p with the same commands not
 * yet taken. wait_ms and cancel may differ; wait_ms and lc_guard_wait_ms
 * count from this call when it sent an attempt. Meanwhile every call that
 * would send on conn's context refuses, nothing sent, the attempt left
 * pending: lc_acquire_send, lc_acquire_pipe and lc_acquire of another
 * acquisition, lc_conn_pipe, lc_conn_ping, lc_extend answer LC_MISUSE;
 * lc_conn_redis NULL; lc_release and lc_release_pipe of setnx, token,
 * fenced and reentrant, and of none or mutex with commands, LC_MISUSE (the
 * guard freed all the same). What does not touch that context runs:
 * lc_conn_errstr, the lc_guard_* queries, the release of none or mutex
 * without commands and of redlock. lc_conn_free hands a written attempt to
 * the orphan cleanup (a lock it took is given back).
 * Returns LC_OK, also when nothing was sent (a mode that sends nothing
 * ahead, whatever p holds: lc_acquire_pipe judges p then; reentrant behind
 * a starving line), when Redis could not be reached (the following
 * lc_acquire_pipe answers LC_IO with this call's reason at once, so the
 * pair costs one connect timeout, not two), and when the write failed (the
 * following lc_acquire_pipe answers LC_IO, as a failed write in it would,
 * and hands a lock the attempt may have taken to the orphan cleanup —
 * without a cluster; with one such a lock is left to its lease);
 * LC_MISUSE, nothing sent, for a NULL conn, arguments lc_acquire_pipe
 * would refuse, or an attempt already pending.
 * Memory: a's strings are copied; p must stay valid until the ending call.
 * Threads: the thread that owns conn. */
lc_status lc_acquire_send(lc_conn *conn, const lc_lock_args *a, lc_pipe *p);

/* lc_release with p's commands (NULL or empty: exactly lc_release) in the
 * same write as the release command, right before it, so they run while
 * the lock is still held. Any complete commands, writes included: a MULTI
 * must be closed by its EXEC (or DISCARD) within p.
 *   none, mutex  p's commands alone (mutex: the in-process lock is let go
 *                after their replies came)
 *   setnx        p's commands and DEL
 *   token        p's commands and the release script
 *   fenced       p's commands and the release script (token's)
 *   reentrant    p's commands and the unlock script
 *   redlock      LC_MISUSE when p holds commands, nothing sent
 * A NOSCRIPT answer to the release script costs a second round trip (EVAL
 * alone; p's commands are not sent again).
 * Returns lc_release's statuses, and LC_IO also when one of p's replies did
 * not come (the lease then frees the lock); with a NULL conn, or while an
 * acquire sent by lc_acquire_send is pending, p's commands make none and
 * mutex answer LC_MISUSE too, nothing sent. A p not initialised (its n
 * out of 0..LC_PIPE_MAX): none of it is sent, the lock is released as by
 * lc_release, and the status is LC_MISUSE when that release was LC_OK
 * (else the release's status). So too, with a cluster, a p whose commands
 * name another slot than the lock's key (they could not share its round
 * trip): none of them is sent, the lock is released alone, and LC_MISUSE
 * names the slots in lc_conn_errstr. g is freed in every case. p
 * then holds every reply that came, in order, whatever the status: a NULL
 * one did not come (the connection broke or timed out) and its command's
 * outcome is unknown.
 * Memory: the replies are p's until lc_pipe_take or lc_pipe_clear.
 * Threads: the thread that owns conn and uses p. */
lc_status lc_release_pipe(lc_conn *conn, lc_guard *g, lc_pipe *p);

/* --- the guard --------------------------------------------------------- */

/* token and fenced: sets the lock's lease to lease_ms (1..86400000) from
 * now if the key still holds this guard's token (the token_extend script,
 * a compare-and-PEXPIRE; fenced: the fencing token stays the same).
 * Returns LC_OK; LC_NOT_OWNER when the key is gone or holds another token
 * (lc_guard_lost then answers 1); LC_IO when Redis failed; LC_MISUSE,
 * nothing sent and the guard unchanged, for a NULL argument, another mode,
 * a lease out of bounds, or an acquire sent by lc_acquire_send pending on
 * conn. The thread that owns conn. */
lc_status lc_extend(lc_conn *conn, lc_guard *g, int64_t lease_ms);

/* 1 once the lock is known to have been lost while held, else 0: the
 * watchdog's renew script returned 0 (reentrant), lc_extend answered
 * LC_NOT_OWNER (token, fenced), or the validity ran out (redlock). g must
 * not be released yet. Any thread. */
int lc_guard_lost(const lc_guard *g);

/* Milliseconds lc_acquire spent before it got the lock, whole ones (the
 * floor of the µs span: an uncontended acquisition reads 0; after
 * lc_acquire_send, counted from the send). Any thread. */
int64_t lc_guard_wait_ms(const lc_guard *g);

/* redlock: the milliseconds of validity left now — the lease minus the
 * time from the start of the winning round to now minus the clock drift
 * allowance (the Redlock algorithm's validity time) — or 0 once it ran out:
 * the work the lock protects must be done (its writes sent) within it. -1
 * for every other mode. Any thread. */
int64_t lc_guard_validity_ms(const lc_guard *g);

/* Redlock's clock drift allowance for a lease, in ms, as the algorithm's
 * reference implementation computes it: lease_ms / 100 (1 %, rounded down)
 * + 2. Any thread. */
int64_t lc_redlock_drift_ms(int64_t lease_ms);

/* fenced: this acquisition's fencing token, the value the acquire script's
 * INCR of fence_key returned (>= 1): larger than the token of every earlier
 * grant on that counter, smaller than every later one (Kleppmann's fencing
 * token, "How to do distributed locking": a store that refuses a token
 * lower than the highest it has seen refuses a holder whose lease ran out).
 * 0 for every other mode. Any thread. */
int64_t lc_guard_fence(const lc_guard *g);

/* The value that identifies this holder in Redis: the token (token,
 * redlock and fenced), the hash field "<instance>:<owner>" (reentrant), "1"
 * (setnx), "" (none, mutex). Owned by g, valid until g is released. Any
 * thread. */
const char *lc_guard_owner_token(const lc_guard *g);

/* --- Redis Cluster -------------------------------------------------------- */

/* The Redis Cluster hash slot of key (len bytes), 0..16383, as the cluster
 * specification computes it: CRC16 (XMODEM) of the key's hash tag — the
 * bytes between its first '{' and the first '}' after that, when at least
 * one byte lies between them — else of the whole key, mod 16384. Keys that
 * share a tag share a slot ("miaosha:{sku}:stock", "miaosha:{sku}:lock:…"),
 * so one script or MULTI may name them all on a cluster. Any thread. */
int lc_key_slot(const char *key, size_t len);

#define LC_ADDR_LEN 262 /* "host:port" or "[v6]:port", NUL included */
#define LC_CLUSTER_MAX_MASTERS 16
#define LC_CLUSTER_MAX_RANGES 32
#define LC_CLUSTER_MAX_REPLICAS 4

/* One master of the slot map. */
typedef struct lc_cluster_master {
    char addr[LC_ADDR_LEN];              /* "host:port" */
    int nranges;                         /* slot ranges it serves, in slot order */
    int range[LC_CLUSTER_MAX_RANGES][2]; /* first and last slot, inclusive */
    int ranges_more;                     /* ranges beyond the array, not listed */
    int nreplicas;                       /* replicas the map ever listed for it */
    char replica[LC_CLUSTER_MAX_REPLICAS][LC_ADDR_LEN];
} lc_cluster_master;

/* The slot map as the client knows it now. */
typedef struct lc_cluster_map {
    int nmasters;              /* in order of their first slot */
    int masters_more;          /* 1: more masters than the array holds */
    int slots_covered;         /* slots with a master, 0..16384 */
    int64_t refreshed_wall_ms; /* when the map was last taken, ms since the
                                  epoch; 0: never */
    int64_t age_ms;            /* how long ago, on the monotonic clock; -1 never */
    lc_cluster_master master[LC_CLUSTER_MAX_MASTERS];
} lc_cluster_map;

/* Copies c's slot map into *out (about 25 KB: not for a small stack). c
 * and out must not be NULL. Does not refresh the map and sends nothing; a
 * refresh under way on another thread holds it back only while it
 * publishes a new map, never while it asks the nodes. Returns 0; -1
 * without lc_options.cluster_nodes (*out zeroed). Any thread. */
int lc_cluster_map_get(lc_client *c, lc_cluster_map *out);

/* Writes "host:port" of the master serving slot (0..16383) in c's map now
 * into buf (len bytes, NUL-terminated, truncated): the node every command
 * naming a key of that slot goes to first. Sends nothing and does not
 * refresh the map (the next command does when one is due). Returns 0; -1,
 * buf untouched, without lc_options.cluster_nodes, for a slot out of range,
 * or while no master is known for it (no map taken yet: the first command
 * takes one), or for a NULL buf or len 0. c must not be NULL. Lock-free:
 * never waits for a refresh. Any thread. */
int lc_cluster_slot_master(lc_client *c, int slot, char *buf, size_t len);

/* --- clock --------------------------------------------------------------- */

/* The monotonic clock (CLOCK_MONOTONIC) lockcore measures every lease, wait
 * and validity on, in milliseconds: only differences mean anything. A
 * caller that sets its own deadlines beside lockcore's, or compares its
 * spans with lc_guard_wait_ms, reads this one. Cannot fail. Any thread. */
int64_t lc_now_ms(void);

/* The same clock in microseconds, for spans shorter than a millisecond.
 * Cannot fail. Any thread. */
int64_t lc_now_us(void);

#ifdef __cplusplus
}
#endif

#endif
