/* pk_ha.h — a Sentinel-managed Redis on loopback for the tests and the
 * matrix's failover scenario: one master, 1..2 replicas, 3 Sentinels
 * (redis-server --sentinel, quorum 2), every process started with
 * pk_redis_start (pk_redis.h; pk_proc.h: the caller's session, stopped by
 * PID).
 *
 * With proxied set, each replica's link to the master runs through its own
 * pk_fwd forwarder, so pk_ha_freeze can hold back every write the master
 * makes from here on: the "acknowledged, not yet replicated" window of a
 * failover, made certain (pk_fwd.h). Sentinel talks to the replicas
 * directly (they announce their own port), so it still sees them healthy.
 *
 * The main thread (the one that reaps the children), unless said.
 */
#ifndef MIAOSHA_PK_HA_H
#define MIAOSHA_PK_HA_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "pk_fwd.h"

#define PK_HA_NAME "mymaster" /* the master's name at the Sentinels */
#define PK_HA_SENTINELS 3

typedef struct pk_ha_opts {
    const char *server;          /* redis-server binary; NULL: "redis-server" */
    const char *dir;             /* an existing directory for configs and logs */
    int replicas;                /* 1 or 2 */
    int proxied;                 /* replicas link through pk_fwd forwarders */
    int fronted;                 /* the master is known (to the Sentinels, so to
                                    every client) by a forwarder's port: a
                                    frozen front keeps the clients' connections
                                    open, without EOF, after the master died */
    int down_after_ms;           /* Sentinel down-after-milliseconds (e.g. 500) */
    int failover_timeout_ms;     /* Sentinel failover-timeout (e.g. 2000) */
    int replica_priority[2];     /* each replica's replica-priority (lower is
                                    promoted first; Sentinel compares it before
                                    the replication offset); 0: Redis's default */
    int flags;                   /* pk_spawn flags for every process */
    volatile sig_atomic_t *stop; /* may be NULL; non-zero (a Ctrl-C) ends the
                                    starts and waits: pk_ha_start then
                                    fails with "interrupted" */
} pk_ha_opts;

typedef struct pk_ha {
    pid_t master_pid;
    int master_port;
    int replicas;
    pid_t replica_pid[2];
    int replica_port[2];
    pk_fwd *link[2]; /* NULL unless proxied */
    pk_fwd *front;   /* NULL unless fronted */
    int addr_port;   /* the master's port as the Sentinels name it: the
                        front's when fronted, else master_port */
    pid_t sentinel_pid[PK_HA_SENTINELS];
    int sentinel_port[PK_HA_SENTINELS];
    char sentinels[96]; /* "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3" (redis.sentinels) */
} pk_ha;

/* Starts the master, the replicas (waits until each says
 * master_link_status:up) and the Sentinels (waits until each knows every
 * replica and the two other Sentinels), each a pk_redis_start child with
 * its log <dir>/master.log, replica<N>.log, sentinel<N>.log (and
 * sentinel<N>.conf, which Sentinel rewrites): usually a few seconds; at
 * worst each start's own bound (pk_redis_start's retries), then up to 10 s
 * per replica's link and 15 s per Sentinel's view, one after another. Fills *h (zeroed first).
 * Returns 0, or -1 with the reason in err (errlen bytes), everything it started stopped again. */
int pk_ha_start(pk_ha *h, const pk_ha_opts *o, char *err, size_t errlen);

/* Freezes (1) or thaws (0) every replica link (pk_fwd_freeze; a no-op
 * unless proxied). Returns once it took effect (<= 20 ms per link). Any
 * thread. */
void pk_ha_freeze(pk_ha *h, int frozen);

/* Freezes (1) or thaws (0) replica i's link alone (0 <= i < replicas; a
 * no-op unless proxied): the other replica keeps acknowledging the
 * master's writes, so WAIT 1 still answers. Returns once it took effect
 * (<= 20 ms). Any thread. */
void pk_ha_freeze_link(pk_ha *h, int i, int frozen);

/* Freezes (1) or thaws (0) the master's front (a no-op unless fronted).
 * Returns once it took effect (<= 20 ms). Any thread. */
void pk_ha_freeze_front(pk_ha *h, int frozen);

/* The master's port as the first Sentinel that answers names it (SENTINEL
 * get-master-addr-by-name; per Sentinel 300 ms to connect and 300 ms for
 * the reply), or -1 when none answers.
 * After a failover: the promoted replica's port. Any thread. */
int pk_ha_master_port(const pk_ha *h);

/* Stops every process still running (pk_stop, 2 s grace each; one the
 * caller already killed and reaped is found gone) and the forwarders,
 * and zeroes the pids. Leaves the directory's files. Safe on a zeroed
 * pk_ha and twice. */
void pk_ha_stop(pk_ha *h);

#endif
