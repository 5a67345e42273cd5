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

struct lc_conn {
    lc_client *client;
    redisContext *ctx;
    unsigned rng;
    char err[LC_ERRSTR_LEN];
};

/* A connected context with AUTH, SELECT and timeouts applied, or NULL with
 * the reason in err (LC_ERRSTR_LEN bytes). */
redisContext *lc_redis_connect(lc_client *c, char *err);

/* Returns a usable context for *ctx: the same one when it is healthy, else a
 * fresh connection (freeing the old one); NULL with err set when Redis
 * cannot be reached. "Healthy" includes a socket the peer has not closed
 * while it sat idle, so a restarted Redis costs no failed command. */
redisContext *lc_redis_reuse(lc_client *c, redisContext **ctx, char *err);

/* Runs a script by EVALSHA, falling back to EVAL on NOSCRIPT (a flushed or
 * restarted Redis). At most 13 arguments (keys included). Returns the reply
 * (caller frees) or NULL on I/O or an error reply, with the reason in err. */
redisReply *lc_eval(redisContext *ctx, const char *sha, const char *body, int nkeys,
                    int nargs, const char **args, char *err);

#endif
