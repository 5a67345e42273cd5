/* lc_cluster.h — Redis Cluster: the hash slot of a key (public:
 * lc_key_slot), the redirects a node answers with, as the cluster
 * specification defines them, the keys a formatted command names, and the
 * client-wide slot map (lc_cluster.c).
 *
 * The map is the client's: one per lc_client, shared by every lc_conn and
 * background thread of it. It is an append-only address book (a node keeps
 * its index for the client's life, so each lc_conn can keep one context
 * per index) and, per slot, the index of the master serving it. Lookups are
 * lock-free (one atomic load); a refresh (CLUSTER NODES of the first node
 * that answers) runs on the thread that found it due, under refresh_mu,
 * which only refreshers take: the map's own mutex is held for no network
 * I/O, only to append to the book and to publish. Which node is asked, and
 * why never a stale one: lc_cluster.c.
 * The routing itself, and the redirects, are lc_conn.c's.
 */
#ifndef MIAOSHA_LC_CLUSTER_H
#define MIAOSHA_LC_CLUSTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockcore.h"

#define LC__SLOTS 16384
#define LC__HOST_LEN 256     /* a node's host as a redirect names it, NUL included */
#define LC__CL_MAX_ADDRS 128 /* nodes the address book holds, ever */
#define LC__CL_MAX_REPL 8    /* replicas remembered per master */
#define LC__CL_MAX_REDIRECTS 5

typedef enum { LC__REDIR_MOVED = 1, LC__REDIR_ASK = 2 } lc__redir_kind;

/* A redirect: "MOVED <slot> <host>:<port>" (the slot lives there now) or
 * "ASK <slot> <host>:<port>" (this one command goes there, after ASKING). */
typedef struct lc__redirect {
    lc__redir_kind kind;
    int slot;                /* 0..16383 */
    char host[LC__HOST_LEN]; /* "" when the node sent none: the host of the
                               node that answered */
    int port;                /* 1..65535 */
} lc__redirect;

/* Parses an error reply's text (len bytes, no NUL needed): 0 with *out
 * filled for a well-formed MOVED or ASK, -1 for anything else (another
 * error, a slot or port out of range, a missing part). The host is what
 * follows the slot up to the last ':' — an IPv6 address keeps its colons,
 * brackets around it are dropped — and may be empty. Any thread. */
int lc__redirect_parse(const char *str, size_t len, lc__redirect *out);

/* Whether an error reply's text (len bytes) says the command did not run
 * and may run later on the same node: TRYAGAIN (a multi-key command while
 * the slot's keys are split between two nodes), CLUSTERDOWN, LOADING. Any
 * thread. */
bool lc__cluster_try_later(const char *str, size_t len);

/* The pub/sub channel of lock key `key` into out (len bytes): Redisson's
 * prefixName (prefix + ":" + key when the key contains '{', else
 * prefix + ":{" + key + "}") when that hashes to the key's slot; else, for
 * a '{' or '}' that opens or closes no tag ("a{b", "a{}b", "a}b": the key
 * hashes whole), prefix + ":{N}" + key with N the smallest number whose
 * slot is the key's. The release script names the key and its channel,
 * and a cluster refuses keys of two slots. Any thread. */
void lc__channel_name(const char *prefix, const char *key, char *out, size_t len);

/* --- the keys a command names ---------------------------------------------- */

#define LC__CMD_KEYLESS (-1) /* names no key (MULTI, EXEC, WAIT, PING, PUBLISH...) */
#define LC__CMD_CROSS (-2)   /* names keys of two slots: never sent */
#define LC__CMD_UNKNOWN (-3) /* a command whose key positions are not known here */

/* What the router needs to know of one formatted command. */
typedef struct lc__cmd {
    int slot;     /* 0..16383, or one of LC__CMD_* above */
    bool multi;   /* MULTI: opens a block that EXEC or DISCARD closes */
    bool exec;    /* EXEC */
    bool discard; /* DISCARD */
    bool watch;   /* WATCH */
    bool unwatch; /* UNWATCH */
    bool free;    /* no effect a second run could change (UNWATCH, PING,
                     ECHO): may go again with the commands it precedes */
    bool reads;   /* reads keys, writes none (GET, HGET, LLEN, EXISTS...):
                     running it again changes nothing but its reply */
} lc__cmd;

/* Reads the command name and key arguments of resp (len bytes, RESP as
 * redisFormatCommand writes it: a multi-bulk of bulk strings) into *out.
 * Known: the string, hash, list, set and sorted-set commands lockcore's
 * callers send, DEL/UNLINK/EXISTS/MGET/MSET/WATCH (every key), EVAL,
 * EVALSHA, FCALL and their _RO forms (numkeys), and the keyless ones.
 * 0, or -1 when resp is not a well-formed multi-bulk. Any thread. */
int lc__cmd_parse(const char *resp, size_t len, lc__cmd *out);

/* --- the slot map ----------------------------------------------------------- */

typedef struct lc__cl_addr {
    char host[LC__HOST_LEN];
    int port;
} lc__cl_addr;

typedef struct lc_cluster {
    int on; /* 0: lc_options.cluster_nodes not given, nothing here is used */
    int nseeds;
    int seed[LC_CLUSTER_MAX_SEEDS]; /* address indices */
    int64_t refresh_ms;
    int connect_timeout_ms, command_timeout_ms;
    char password[256];

    pthread_mutex_t refresh_mu; /* one refresher at a time; failed_*, rctx */
    pthread_mutex_t mu;         /* appends to the book, repl, nrepl; taken
                                   after refresh_mu, never before it */
    atomic_int naddr;
    lc__cl_addr addr[LC__CL_MAX_ADDRS]; /* an entry is written before naddr
                                           grows past it, never changed after */
    _Atomic(int16_t) slot[LC__SLOTS];   /* the master's address index; -1 none */
    int16_t nrepl[LC__CL_MAX_ADDRS];    /* per master: its replicas, every one
                                           the map ever listed for it */
    int16_t repl[LC__CL_MAX_ADDRS][LC__CL_MAX_REPL];
    _Atomic int64_t refreshed_ms;      /* lc_now_ms of the last map taken; 0: none yet */
    _Atomic int64_t refreshed_wall_ms; /* the same, wall clock (ms since the epoch) */
    atomic_int due;                    /* a refresh is due before the next command */
    /* What the last MOVED and the last refused connection ask of the next
     * refresh, packed in one word (lc_cluster.c, "news"): a generation, the
     * node to ask first (it answered MOVED), a node not to ask (it refused
     * a connection), and the MOVED's slot and node, which a map must agree
     * with. One word, so two MOVEDs never mix their halves, and a refresh
     * clears only what it read (compare-and-swap), never a newer one. */
    _Atomic uint64_t news;
    int64_t failed_at_ms; /* the last refresh that found no map */
    char failed_err[LC_ERRSTR_LEN];
    redisContext *rctx; /* the refresh's connection, kept to rctx_addr */
    int rctx_addr;

    atomic_uint_fast64_t moved, ask, retries, refreshes;
} lc_cluster;

/* Checks o's cluster options and copies them into cl (cl->on stays 0 when
 * none). LC_OK, or LC_MISUSE with the reason in err (errlen bytes):
 * cluster_nodes with Sentinels, a database other than 0, a node that is
 * not "host:port" ("[v6]:port") or listed twice, refresh_ms out of
 * bounds. */
lc_status lc__cluster_setup(lc_cluster *cl, const lc_options *o, char *err, size_t errlen);

/* Closes the refresh connection and destroys cl. */
void lc__cluster_shutdown(lc_cluster *cl);

/* The index of host:port in the book, added when new; -1 when the book is
 * full. Any thread. */
int lc__cluster_addr(lc_cluster *cl, const char *host, int port);

/* "host:port" ("[v6]:port") of a book entry into buf (len bytes). */
void lc__cluster_addr_text(const lc__cl_addr *a, char *buf, size_t len);

/* The map as lockcore.h's lc_cluster_map_get gives it. 0, or -1 when cl is
 * off. Any thread. */
int lc__cluster_snapshot(lc_cluster *cl, lc_cluster_map *out);

/* The book's entry i (0 <= i < naddr): never changes. Any thread. */
static inline const lc__cl_addr *lc__cluster_at(lc_cluster *cl, int i)
{
    return &cl->addr[i];
}

/* The master serving slot in the map, or -1. Lock-free. Any thread. */
static inline int lc__cluster_master(lc_cluster *cl, int slot)
{
    return atomic_load_explicit(&cl->slot[slot], memory_order_acquire);
}

/* Makes sure a map is there and fresh enough before a command: refreshes
 * it when none was taken yet, when one is due (a MOVED, a refused or
 * broken connection) or when cluster_refresh_ms passed — where a map is
 * there, only if no other thread is refreshing (the map meanwhile serves:
 * a thread with a map never waits on another's refresh, which asks node
 * after node until one answers, a command_timeout_ms for each that hangs).
 * 0 when a map is there (an old one stays when its refresh failed); -1
 * with the reason in err (LC_ERRSTR_LEN bytes) when there is none. A
 * refresh that found no node is not tried again for 100 ms: meanwhile the
 * call answers its reason at once. */
int lc__cluster_ensure(lc_cluster *cl, char *err);

/* A MOVED from node `from` (index, -1 unknown) said slot lives at addr:
 * the map says so at once, and a refresh is due, asked first of `from`,
 * whose map must agree with it. */
void lc__cluster_moved(lc_cluster *cl, int slot, int addr, int from);

/* A connection to addr was refused or broke: a refresh is due, asked of
 * another node. */
void lc__cluster_failed(lc_cluster *cl, int addr);

/* A node that answered is known to have some master: the first master of
 * the map (any slot), else a seed. -1 when the book is empty. For
 * connections whose commands name no key (the subscriber's). Any thread. */
int lc__cluster_any(lc_cluster *cl);

#endif
