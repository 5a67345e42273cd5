/* pk_cluster.h — a private Redis Cluster on loopback for tests and tools:
 * masters and their replicas as redis-server children
 * (--cluster-enabled yes), joined by `redis-cli --cluster create`, and the
 * wait until every node says cluster_state:ok with all 16384 slots served.
 *
 * A cluster node talks to the others on its port + 10000 (the cluster
 * bus), so each node gets a port at most 55535 whose bus port is free too.
 * Children as pk_proc.h says: the caller's session, stopped by PID, from
 * the thread that reaps them; the query functions may run on any thread.
 */
#ifndef MIAOSHA_PK_CLUSTER_H
#define MIAOSHA_PK_CLUSTER_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#define PK_CLUSTER_MAX_NODES 12
#define PK_CLUSTER_SLOTS 16384

/* pk_cluster_start's options; pk_cluster_opts_init sets the defaults. */
typedef struct pk_cluster_opts {
    int masters;                 /* 3..PK_CLUSTER_MAX_NODES (default 3) */
    int replicas;                /* per master, 0..3 (default 1) */
    int node_timeout_ms;         /* cluster-node-timeout: how long a master
                                    may stay silent before its replica is
                                    promoted (default 1000) */
    const char *server;          /* redis-server; NULL: from PATH */
    const char *cli;             /* redis-cli; NULL: from PATH */
    const char *dir;             /* an existing directory: the cluster makes
                                    a fresh folder below it (node configs,
                                    logs); not NULL */
    const char *const *args;     /* more arguments for every node (NULL-
                                    terminated, at most 16; may be NULL) */
    int timeout_ms;              /* from the end of `redis-cli --cluster
                                    create` to cluster_state:ok on every
                                    node (default 30000) */
    volatile sig_atomic_t *stop; /* may be NULL; non-zero ends the wait for
                                    cluster_state:ok (not a node's start
                                    nor the create) */
} pk_cluster_opts;

/* A running cluster. Nodes 0..masters-1 were created masters, the rest
 * replicas (which master each follows: CLUSTER NODES); a failover can
 * change roles, so ask pk_cluster_slot_port for who serves a slot now. */
typedef struct pk_cluster {
    int n;                           /* nodes */
    int masters;                     /* as created */
    pid_t pid[PK_CLUSTER_MAX_NODES]; /* 0: stopped (pk_cluster_kill) */
    int port[PK_CLUSTER_MAX_NODES];
    char dir[512];    /* its folder (node i: dir/node-<port>) */
    char server[256]; /* the binaries, for restarts */
} pk_cluster;

/* Fills o with the defaults above. */
void pk_cluster_opts_init(pk_cluster_opts *o);

/* Starts masters x (1 + replicas) nodes, creates the cluster (slots split
 * evenly over the masters, replicas assigned by redis-cli) and waits until
 * every node answers cluster_state:ok and serves 16384 slots. Blocks up to
 * the nodes' starts (pk_redis_start's, one after another), the create (at
 * most 30 s) and o->timeout_ms. 0 with *c filled, or -1 with the reason in
 * err (errlen bytes) and everything it started stopped. Every node and
 * redis-cli is spawned with PK_SPAWN_DIE_WITH_PARENT, so call it from the
 * thread that lives as long as the cluster should (pk_proc.h), which also
 * reaps the children. */
int pk_cluster_start(pk_cluster *c, const pk_cluster_opts *o, char *err, size_t errlen);

/* 1 when every running node of c answers CLUSTER INFO with
 * cluster_state:ok and cluster_slots_ok:16384 within timeout_ms (polls
 * every 50 ms), else 0. stop as in the options (may be NULL). Any thread. */
int pk_cluster_wait_ok(const pk_cluster *c, int timeout_ms, volatile sig_atomic_t *stop);

/* The port of the node that serves slot now, as the first running node
 * that answers CLUSTER SLOTS says; -1 when none answers or none serves
 * it. Any thread. */
int pk_cluster_slot_port(const pk_cluster *c, int slot);

/* CLUSTER MYID of the node at port into id (len bytes, 41 hold one): 0, or
 * -1 when it does not answer. Any thread. */
int pk_cluster_node_id(int port, char *id, size_t len);

/* The port of a replica of the master at master_port (the first running
 * node whose INFO replication names it), -1 when none. Any thread. */
int pk_cluster_replica_of(const pk_cluster *c, int master_port);

/* A slot moved by hand, as redis-cli --cluster reshard does it, in three
 * steps a caller can interleave with its own load:
 *   begin  CLUSTER SETSLOT slot IMPORTING <from> on the master at to_port,
 *          then MIGRATING <to> on the owner now (*from_port): from here on
 *          the owner answers ASK for a key it no longer has, TRYAGAIN for
 *          a command whose keys are on both sides;
 *   keys   MIGRATE up to max keys of the slot (CLUSTER GETKEYSINSLOT) from
 *          from_port to to_port, one MIGRATE each: the number moved (0:
 *          none left), or -1;
 *   end    CLUSTER SETSLOT slot NODE <to> on to_port, from_port and every
 *          other running master: the owner answers MOVED from now on.
 * Each returns 0 (keys: the count), or -1 with the reason in err (errlen
 * bytes). Any thread, one move at a time per slot. */
int pk_cluster_migrate_begin(const pk_cluster *c, int slot, int to_port, int *from_port, char *err,
                             size_t errlen);
int pk_cluster_migrate_keys(int slot, int from_port, int to_port, int max, char *err,
                            size_t errlen);
int pk_cluster_migrate_end(const pk_cluster *c, int slot, int from_port, int to_port, char *err,
                           size_t errlen);

/* SIGKILLs node i (a crash: its replica takes over after the node
 * timeout) and reaps it; c->pid[i] = 0, its port and files stay. */
void pk_cluster_kill(pk_cluster *c, int i);

/* Stops every node (SIGTERM, then SIGKILL after grace) and removes the
 * cluster's folder. Safe on a zeroed or stopped c. */
void pk_cluster_stop(pk_cluster *c);

#endif
