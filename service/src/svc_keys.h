/* svc_keys.h — the Redis key names of a SKU. Every key of one SKU carries
 * the hash tag {sku}, so on a Redis Cluster they share a slot and one
 * MULTI/EXEC may touch them all. */
#ifndef MIAOSHA_SVC_KEYS_H
#define MIAOSHA_SVC_KEYS_H

#include "svc.h"

/* Writes "miaosha:{<sku>}:<suffix>" into buf (SVC_KEY_MAX bytes, cut
 * there). Any thread. */
void svc_key(char *buf, const char *sku, const char *suffix);

#endif
