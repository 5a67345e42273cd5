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
 * forwards what queued up. The same in front of a master keeps its
 * clients' connections open, without EOF, after the master died.
 *
 * One thread per forwarder; at most 16 connections at once (a replica
 * needs one; more are accepted and closed at once).
 */
#ifndef MIAOSHA_PK_FWD_H
#define MIAOSHA_PK_FWD_H

#include <stddef.h>

typedef struct pk_fwd pk_fwd;

/* Listens on 127.0.0.1 on a port the kernel picks (*port) and forwards
 * every connection to 127.0.0.1:target_port from a thread of its own,
 * connecting upstream when a client connects (a refused upstream closes
 * the client's connection). Returns the forwarder, owned by the caller
 * until pk_fwd_stop, or NULL with the reason in err (errlen bytes): no
 * memory, or the socket or the thread cannot be had. Any thread. */
pk_fwd *pk_fwd_start(int target_port, int *port, char *err, size_t errlen);

/* frozen 1: stops forwarding (bytes already forwarded are forwarded; from
 * now on nothing is read from either side, nothing is closed); 0: forwards
 * again. Takes effect within one pass of the thread's loop (<= 20 ms while
 * both sides read what they are sent: the sockets block, so a side that
 * stops reading — a SIGSTOPped peer with its buffer full — holds the pass,
 * and this call, until it reads again); returns once it has. f not NULL.
 * Any thread, but not beside pk_fwd_stop of the same f. */
void pk_fwd_freeze(pk_fwd *f, int frozen);

/* Stops the thread (blocks up to one pass: <= 20 ms, with the same
 * exception as pk_fwd_freeze), closes every socket and frees f. NULL-safe. The thread that owns f,
 * once no other thread uses it. */
void pk_fwd_stop(pk_fwd *f);

#endif
