/* lc_conn.h — lockcore's Redis connections (lc_conn.c): the caller's lc_conn
 * handle, and the connect / reuse / script-call helpers the background
 * threads (watchdog, subscriber) use for their own contexts too.
 *
 * None of these is thread-safe for one context: a context belongs to one
 * thread at a time (a hiredis context is not thread-safe).
 */
#ifndef MIAOSHA_LC_CONN_H
#define MIAOSHA_LC_CONN_H

#include "lockcore.h"

#include <stdbool.h>

struct lc_rl_conn;

struct lc_conn {
    lc_client *client;
    redisContext *ctx;
    uint64_t connects;     /* contexts made (lc_conn_connects) */
    uint64_t ctx_id;       /* ctx's number among them (0: none); lc_conn_via */
    struct lc_rl_conn *rl; /* redlock's node contexts, made on first use */
    unsigned rng;
    char err[LC_ERRSTR_LEN];
    /* The last lock command's round trip (lc_lock.c lock_trip), for the
     * orphan cleanup after a failed one: whether the lock command's reply
     * never came, and how many of the caller's replies (lc_pipe) are still
     * queued on ctx before and after it. */
    bool trip_lock_unread;
    int trip_unread_before, trip_unread_after;
    /* The last cluster trip gave up on commands that did not run and were
     * not sent again (a later one of the batch ran, or a transaction
     * pinned to its WATCH): their replies hold the reason. lc_conn_pipe
     * answers LC_IO for it; a lock's trip answers for its lock command. */
    bool trip_gave_up;
    bool trip_held_back; /* lc_conn_held_back */
    /* lc_acquire_send: LC_SENT_* below; what it was sent for, so that
     * lc_acquire_pipe can check it is the same acquisition (and
     * lc_conn_free can hand it to the orphan cleanup). While it is not
     * LC_SENT_NONE every other call on conn that would use ctx refuses
     * (lockcore.h, lc_acquire_send). */
    int sent;
    lc_mode sent_mode;
    const lc_pipe *sent_p;
    int sent_pn;
    int64_t sent_start_us;        /* when it was sent: wait_ms counts from here */
    int64_t sent_lease_ms;        /* a->lease_ms as given */
    char sent_owner[LC_ID_LEN];   /* a->owner */
    char sent_token[LC_ID_LEN];   /* token, fenced: the token that was sent */
    char sent_key[512 + 1];       /* LC_KEY_MAX + 1 */
    char sent_fence_key[512 + 1]; /* fenced: a->fence_key */
    char sent_err[LC_ERRSTR_LEN]; /* LC_SENT_NO_CONN: why it could not connect */
    char spare_token[LC_ID_LEN];  /* minted after a send, for the next one */
    /* Redis Cluster (client->cl.on; lockcore/README.md, "Redis Cluster"):
     * one context per node of the client's address book. ctx is the one in
     * use, node cur's (its place in nctx stays NULL meanwhile, so a context
     * the orphan cleanup takes from ctx is nobody else's); a switch to
     * another node parks it there. */
    redisContext **nctx; /* LC__CL_MAX_ADDRS entries, made on first use */
    uint64_t *nid;       /* nctx[i]'s ctx_id, made with nctx */
    int cur;             /* ctx's node; -1 none */
    /* lc_conn_via: the connection that ran the caller's commands of the
     * last call that sent some (0: none yet), or via_split when they ran
     * over more than one, or one lockcore cannot name. */
    uint64_t via;
    bool via_split;
    /* Where this connection's last WATCH runs (the node's context holds
     * it until an EXEC, DISCARD or UNWATCH there): a MULTI...EXEC of that
     * slot goes there and is never redirected elsewhere. -1: none.
     * watch_asking: that WATCH followed an ASK (the node is importing the
     * slot), so the transaction goes there after an ASKING too. */
    int watch_slot, watch_addr;
    bool watch_asking;
};

/* conn->sent: nothing pending; written, its replies unread; the write
 * failed (lock_trip reports it); nothing written because Redis could not
 * be reached (lc_acquire_pipe then answers LC_IO without a second connect
 * timeout). */
#define LC_SENT_NONE 0
#define LC_SENT_WRITTEN 1
#define LC_SENT_FAILED -1
#define LC_SENT_NO_CONN -2

/* The context for lockcore's own commands: conn->ctx as it is while an
 * attempt is pending (its replies may be on the socket already, which the
 * reuse check would take for stale bytes), else lc__redis_reuse's. NULL
 * with conn->err set when Redis cannot be reached. */
redisContext *lc__conn_ctx(lc_conn *conn);

/* A connected context with AUTH, SELECT and timeouts applied, or NULL with
 * the reason in err (LC_ERRSTR_LEN bytes). */
redisContext *lc__redis_connect(lc_client *c, char *err);

/* Returns a usable context for *ctx: the same one when it is healthy, else a
 * fresh connection (freeing the old one); NULL with err set when Redis
 * cannot be reached. "Healthy" includes a socket the peer has not closed
 * while it sat idle, so a restarted Redis costs no failed command. *fresh
 * (fresh may be NULL) says whether a new connection was made. */
redisContext *lc__redis_reuse(lc_client *c, redisContext **ctx, char *err, bool *fresh);

/* Runs a script by EVALSHA, falling back to EVAL on NOSCRIPT (a flushed or
 * restarted Redis). At most 13 arguments (keys included). Returns the reply
 * (caller frees) or NULL on I/O or an error reply, with the reason in err. */
redisReply *lc__eval(redisContext *ctx, const char *sha, const char *body, int nkeys, int nargs,
                     const char **args, char *err);

/* One write, every reply read: the command argv (argc 0: none) with p's
 * commands (NULL: none) after it, or before it when p_first. p's replies go
 * to p->reply (freeing any left from a former call), the command's to *rep
 * (NULL when argc is 0); an error reply is a reply. Returns 0 when every
 * reply came; -1 when one did not (ctx->err set, so the next lc__redis_reuse
 * reconnects; the reason in err): the replies that came are stored even
 * then, the rest are NULL. */
int lc__trip(redisContext *ctx, int argc, const char **argv, lc_pipe *p, bool p_first,
             redisReply **rep, char *err);

/* lc__trip in two halves, for lc_acquire_send: lc__trip_send writes every
 * command now (blocking until the kernel took them all; p's old replies
 * freed), 0 or -1 (ctx->err set, reason in err: part of the batch may
 * have left); lc__trip_recv later reads the replies of what was sent, with
 * lc__trip's rules (has_cmd: argv held a command). */
int lc__trip_send(redisContext *ctx, int argc, const char **argv, lc_pipe *p, bool p_first,
                  char *err);
int lc__trip_recv(redisContext *ctx, bool has_cmd, lc_pipe *p, bool p_first, redisReply **rep,
                  char *err);

/* Frees every reply p holds (none: nothing). */
void lc__pipe_drop_replies(lc_pipe *p);

/* --- the conn-level trip: one node, or the cluster's router ---------------- */

/* What a batch is to the router (how much of it may go again after a
 * redirect): */
#define LC__TRIP_ACQUIRE                                                                           \
    0                      /* the lock command, then p's commands, which                           \
                              lc_acquire_pipe's contract lets go again */
#define LC__TRIP_RELEASE 1 /* p's commands, then the lock command */
#define LC__TRIP_PLAIN 2   /* p's commands alone, or one command alone */

/* The context a lockcore command naming key goes over: without a cluster
 * lc__conn_ctx(conn); with one, the context of the master serving key's
 * slot (the map fetched or refreshed first when due; a refused connection
 * makes the map refresh from another node and is tried again within
 * command_timeout_ms). NULL with the reason in conn->err. */
redisContext *lc__conn_ctx_key(lc_conn *conn, const char *key);

/* lc__trip on conn: without a cluster exactly lc__trip(*ctx, ...), or with
 * sent (an lc_acquire_send attempt written on *ctx) lc__trip_recv. With a
 * cluster, the router (lockcore/README.md, "Keys and Redis Cluster"): the batch
 * goes to the master of its slot and follows MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN and LOADING as kind allows; a command whose reply did not
 * come is never sent again; *ctx is then the context of the last round
 * (where a reply went missing), and conn->trip_* say what it left unread.
 * Returns 0 when every reply came and every command ran (an error reply
 * included), or what did not run was given up after a later command ran
 * (conn->trip_gave_up: its replies hold the reason); LC__TRIP_NOT_RUN
 * when every reply came but the router gave up on some commands before
 * they ran (too many redirects, a back-off past command_timeout_ms, the
 * node named unreachable): their replies are error replies holding the
 * reason, also in conn->err; -1 when a reply did not come, the reason in
 * conn->err. */
#define LC__TRIP_NOT_RUN (-2)

/* lc_conn_via's note for a call that sends p's commands (none: nothing
 * noted) over ctx, one Redis without a cluster: ctx's number when ctx is
 * conn's own context, else "one lockcore cannot name". lc__conn_trip and
 * lc_conn_pipe note their own; this is for the callers of lc__trip. */
void lc__conn_via_note(lc_conn *conn, const redisContext *ctx, const lc_pipe *p);

int lc__conn_trip(lc_conn *conn, redisContext **ctx, int kind, int argc, const char **argv,
                  lc_pipe *p, bool p_first, bool sent, redisReply **rep);

/* With a cluster: the one slot p's commands name (-1: none), checked
 * against want (-1: any); -2 with the reason in err when they name two
 * slots, or a command whose keys the router cannot find. Without: -1. */
int lc__conn_pipe_slot(const lc_conn *conn, const lc_pipe *p, int want, char *err);

/* A script by EVALSHA, EVAL on NOSCRIPT, as lc__eval, on conn: without a
 * cluster over lc__conn_ctx(conn); with one routed by its first key.
 * Returns the reply (caller frees) or NULL with the reason in conn->err. */
redisReply *lc__conn_eval(lc_conn *conn, const char *sha, const char *body, int nkeys, int nargs,
                          const char **args);

/* Frees conn's contexts and conn (no orphan hand-off: lc_conn_free does
 * that first). For lockcore's own connections too. */
void lc__conn_close(lc_conn *conn);

#endif
