/* lc_cluster.h — Redis Cluster: the hash slot of a key (public:
 * lc_key_slot) and the redirects a node answers with, as the cluster
 * specification defines them. */
#ifndef MIAOSHA_LC_CLUSTER_H
#define MIAOSHA_LC_CLUSTER_H

#include <stddef.h>

#include "lockcore.h"

#define LC__SLOTS 16384
#define LC__HOST_LEN 256 /* a node's host as a redirect names it, NUL included */

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

#endif
