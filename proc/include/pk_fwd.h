/* pk_fwd.h — a small TCP forwarder on loopback that a test can freeze.
 *
 * Why: Sentinel's failover loses a write the master acknowledged and had
 * not yet sent to the replica it promotes. To make that window certain
 * rather than lucky, a replica's link to its master runs through this
 * forwarder (the replica is started with replicaof 127.0.0.1 <forwarder's
 * port>): while frozen it stops reading from either side, so the master's
 * writes wait in the kernel's buffers and never reach the replica, and
 * both ends still see an open connection (no disconnect, no resync, the
 * replica still counts as fresh for Sentinel's choice). Thawed, it
 * forwards what queued up.
 *
 * One thread per forwarder; at most 16 connections at once (a replica
 * needs one). Every call but pk_fwd_stop may come from any thread.
 */
#ifndef MIAOSHA_PK_FWD_H
#define MIAOSHA_PK_FWD_H

#include <stddef.h>

typedef struct pk_fwd pk_fwd;

/* Listens on 127.0.0.1 on a port the kernel picks (*port) and forwards
 * every connection to 127.0.0.1:target_port. NULL with the reason in err
 * (errlen bytes) when the socket or the thread cannot be had. */
pk_fwd *pk_fwd_start(int target_port, int *port, char *err, size_t errlen);

/* frozen 1: stop forwarding (bytes already forwarded are forwarded; from
 * now on nothing is read from either side); 0: forward again. Takes effect
 * within one pass of the thread's loop (<= 20 ms); pk_fwd_freeze returns
 * once it has. */
void pk_fwd_freeze(pk_fwd *f, int frozen);

/* Bytes forwarded so far, both directions. */
long long pk_fwd_bytes(pk_fwd *f);

/* Stops the thread, closes every socket, frees f. NULL-safe. */
void pk_fwd_stop(pk_fwd *f);

#endif
