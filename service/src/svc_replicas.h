/* svc_replicas.h — WAIT after a purchase's write (redis.wait_replicas).
 *
 * Why: with Sentinel failover, a write the master acknowledged but had not
 * yet sent to a replica is gone once that replica is promoted. A purchase
 * that answers 200 only after WAIT saw its write on wait_replicas replicas
 * keeps its order across a failover; one that did not get that far answers
 * 503 not_replicated with its order id (the order may or may not survive:
 * GET /orders afterwards says). The lock commands are not waited for: a
 * lock that is lost in a failover is the lesson (docs/locks.md). */
#ifndef MIAOSHA_SVC_REPLICAS_H
#define MIAOSHA_SVC_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include "svc.h"

/* Sends WAIT s->redis.wait_replicas s->redis.wait_timeout_ms on conn (nothing when
 * wait_replicas is 0) after the purchase's write on the same connection:
 * connects is lc_conn_connects(conn) read right after the write's reply.
 * 0 when enough replicas have it (or nothing to wait for); -1 with the
 * reason in detail (len bytes): fewer replicas within the timeout, no reply,
 * an error, or a connection remade since the write (conn reconnects
 * silently; a WAIT on a new connection, which has written nothing, would
 * count every replica at once). The worker thread that owns conn. */
int svc_wait_replicas(const cfg_config *s, lc_conn *conn, uint64_t connects, char *detail,
                      size_t len);

#endif
