/* svc_replicas.c — WAIT after a purchase's write (svc_replicas.h). */
#include "svc_replicas.h"

#include <stdio.h>

#define REMADE                                                                                     \
    "the connection to Redis was remade after the write (an I/O error, a closed socket or a "      \
    "master switch): whether the write reached a replica is unknown"

int svc_wait_replicas(const cfg_config *s, lc_conn *conn, uint64_t connects, char *detail,
                      size_t len)
{
    if (s->redis.wait_replicas <= 0)
        return 0;
    if (lc_conn_connects(conn) != connects) {
        snprintf(detail, len, "%s", REMADE);
        return -1;
    }
    lc_pipe p;
    lc_pipe_init(&p);
    if (lc_pipe_append(&p, "WAIT %d %d", s->redis.wait_replicas, s->redis.wait_timeout_ms) !=
        LC_OK) {
        lc_pipe_clear(&p);
        snprintf(detail, len, "out of memory before WAIT");
        return -1;
    }
    (void)lc_conn_pipe(conn, &p); /* a missing reply is seen below */
    redisReply *r = lc_pipe_take(&p, 0);
    lc_pipe_clear(&p);
    int rc = -1;
    if (lc_conn_connects(conn) != connects) /* the WAIT itself went over a new one */
        snprintf(detail, len, "%s", REMADE);
    else if (r == NULL)
        snprintf(detail, len, "WAIT: %.200s",
                 lc_conn_errstr(conn)[0] ? lc_conn_errstr(conn) : "no reply");
    else if (r->type == REDIS_REPLY_INTEGER && r->integer >= s->redis.wait_replicas)
        rc = 0;
    else if (r->type == REDIS_REPLY_INTEGER)
        snprintf(detail, len, "the write reached %lld of %d replicas within %d ms", r->integer,
                 s->redis.wait_replicas, s->redis.wait_timeout_ms);
    else
        snprintf(detail, len, "WAIT: %.200s", r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    if (r)
        freeReplyObject(r);
    return rc;
}
