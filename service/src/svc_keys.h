/* svc_keys.h — the Redis key names of a SKU. Every key of one SKU carries
 * the hash tag {sku}, so on a Redis Cluster they share a slot and one
 * MULTI/EXEC may touch them all. */
#ifndef MIAOSHA_SVC_KEYS_H
#define MIAOSHA_SVC_KEYS_H

#include "svc.h"

/* Writes "miaosha:{<sku>}:<suffix>" into buf (SVC_KEY_MAX bytes, cut
 * there). Any thread. */
void svc_key(char *buf, const char *sku, const char *suffix);
/* Writes the lock key of sku for one mode, "miaosha:{<sku>}:lock:<mode>"
 * (lc_mode_name), into buf (SVC_KEY_MAX bytes, cut there). One key per
 * mode: the modes keep different types under it (setnx a flag, token a
 * string, reentrant a hash), so a shared key made one mode's purchase fail
 * on another's (WRONGTYPE) and setnx's plain DEL delete a reentrant hash.
 * Stock, sold and orders stay shared, so purchases of different modes
 * still race on one stock. Any thread. */
void svc_lock_key(char *buf, const char *sku, lc_mode mode);

#endif
