/* svc_replicas.h — WAIT after a purchase's write (redis.wait_replicas), and
 * how many replicas "all" means.
 *
 * Why: with Sentinel failover, a write the master acknowledged but had not
 * yet sent to a replica is gone once that replica is promoted. A purchase
 * that answers 200 only after WAIT saw its write on wait_replicas replicas
 * keeps its order across a failover that promotes one of them; one that
 * did not get that far answers 503 not_replicated with its order id (the
 * order may or may not survive: GET /orders afterwards says). With two
 * replicas, WAIT 1 proves a write reached *a* replica, not the one a manual
 * failover or a resumed master will promote; only WAIT for every replica
 * does (docs/locks.md, "Acknowledged writes"). The lock commands are not
 * waited for: a lock that is lost in a failover is the lesson.
 *
 * redis.wait_replicas = all (CFG_WAIT_REPLICAS_ALL) waits for every replica
 * the master is known to have, one that is down included (a write that
 * could not reach it is not acknowledged): the union of what Sentinel lists
 * for the master (SENTINEL REPLICAS, down ones included) and every replica
 * the master's INFO replication has listed since the last master switch.
 * At a switch the new master inherits the old set, less itself, plus the
 * old master (what Sentinel then lists too). Addresses are compared as
 * numeric "address:port" (a host name Sentinel announces is resolved), so
 * one replica never counts twice. A replica is never forgotten
 * while the service runs (Sentinel forgets one only at SENTINEL RESET): a
 * replica removed for good keeps every purchase 503 until the service
 * restarts. The set is refreshed by the health probe's thread
 * (svc_health.c), never on the purchase path.
 */
#ifndef MIAOSHA_SVC_REPLICAS_H
#define MIAOSHA_SVC_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#include "svc.h"

/* Sends WAIT n s->redis.wait_timeout_ms (nothing when wait_replicas is 0,
 * or is all and the master has no replica) after the purchase's write, over
 * the connection that carried the write, n = svc_replicas_wanted(s): via is
 * lc_conn_via(conn) read right after the write's call (on a cluster the
 * write's master's connection, wherever conn went since). 0 when enough
 * replicas have it (or nothing to wait for); -1 with the reason in detail
 * (len bytes): fewer replicas within the timeout, no reply, an error, the
 * number of replicas for all not known yet, a write that went over more
 * than one connection (via 0), or its connection closed or remade since
 * (conn reconnects silently; a WAIT on a new connection, which has written
 * nothing, would count every replica at once). The worker thread that owns
 * conn. */
int svc_wait_replicas(const cfg_config *s, lc_conn *conn, uint64_t via, char *detail, size_t len);

/* How many replicas a purchase's WAIT asks for: redis.wait_replicas, or
 * for all the size of the known set; -1 for all before the first refresh
 * that answered. Any thread; lock-free. */
int svc_replicas_wanted(const cfg_config *s);

/* Remembers s and lo's Sentinels (copied) for svc_replicas_refresh. A
 * no-op unless redis.wait_replicas is all. Main thread, before the probe
 * thread starts. */
void svc_replicas_setup(const cfg_config *s, const lc_options *lo);

/* One refresh of the set for all (a no-op otherwise): INFO replication on
 * conn (a connection to the master named master, "host:port"; host names
 * are resolved here, which may block on DNS), and, with
 * Sentinels, SENTINEL REPLICAS asked of the first Sentinel that names the
 * same master (connect and reply bounded by timeout_ms each; Sentinel is
 * asked at most once a second, and at once after a switch). A failed
 * command keeps what is known. Logs at INFO when the set changes. The
 * health probe's thread only. */
void svc_replicas_refresh(lc_conn *conn, const char *master, int timeout_ms);

/* The known set as "host:port,host:port" into buf (len bytes); "" when
 * empty or not all. Any thread. */
void svc_replicas_known(char *buf, size_t len);

/* Closes the Sentinel connection and forgets the set. After the probe
 * thread stopped. */
void svc_replicas_stop(void);

#endif
