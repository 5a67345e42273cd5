/* lc_redlock.h — the redlock mode's private parts (lc_redlock.c): the node
 * options, each lc_conn's node contexts, and one acquire and one release
 * as the Redlock algorithm describes them. lc_lock.c keeps the guard and
 * calls these; lc_client.c checks the options through them.
 */
#ifndef MIAOSHA_LC_REDLOCK_H
#define MIAOSHA_LC_REDLOCK_H

#include "lockcore.h"

struct lc_rl_conn;

/* Checks o's redlock options and copies them into c (rl_n, rl_host,
 * rl_port, rl_node_timeout_ms). LC_OK, or LC_MISUSE with the reason in err
 * (errlen bytes, when err is not NULL). */
lc_status lc__redlock_setup(lc_client *c, const lc_options *o, char *err, size_t errlen);

/* Closes and frees an lc_conn's node contexts. NULL-safe. */
void lc__redlock_conn_free(struct lc_rl_conn *rl);

/* Takes the lock with the algorithm's attempts until deadline (lc_now_ms
 * time): LC_OK with *valid_until (lc_now_ms time) set, LC_BUSY, LC_IO,
 * LC_CANCELED, LC_MISUSE (no nodes configured), LC_NOMEM; reason in
 * conn->err. a->lease_ms was checked by the caller. */
lc_status lc__redlock_acquire(lc_conn *conn, const lc_lock_args *a, const char *token,
                              int64_t deadline, int64_t *valid_until);

/* Compare-and-delete on every node; the status as lockcore.h's lc_release
 * says for redlock (LC_LOST when valid_until had passed). */
lc_status lc__redlock_release(lc_conn *conn, const char *key, const char *token,
                              int64_t valid_until);

#endif
