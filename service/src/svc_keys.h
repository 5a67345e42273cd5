/* svc_keys.h — the Redis key names of a SKU. Every key of one SKU carries
 * the hash tag {sku}, so on a Redis Cluster they share a slot and one
 * MULTI/EXEC may touch them all.
 *
 * A SKU split into stock buckets (svc_bucket.h) keeps a few keys under its
 * own tag (the layout record, the Idempotency-Key marker) and puts each
 * bucket's stock, sold, orders, buyers, epoch, lock and fence keys under
 * the bucket's own tag, "<sku>~<b>" (svc_bucket_tag): every bucket is one
 * slot of its own. The functions below take that tag where they say tag:
 * a SKU's own keys are those of the tag that is the SKU itself. */
#ifndef MIAOSHA_SVC_KEYS_H
#define MIAOSHA_SVC_KEYS_H

#include "svc.h"

/* Writes "miaosha:{<tag>}:<suffix>" into buf (SVC_KEY_MAX bytes, cut
 * there); tag is a SKU or a bucket's tag. Any thread. */
void svc_key(char *buf, const char *tag, const char *suffix);
/* Writes the lock key of tag for one mode, "miaosha:{<tag>}:lock:<mode>"
 * (lc_mode_name), into buf (SVC_KEY_MAX bytes, cut there). One key per
 * mode: the modes keep different types under it (setnx a flag, token a
 * string, reentrant a hash), so a shared key made one mode's purchase fail
 * on another's (WRONGTYPE) and setnx's plain DEL delete a reentrant hash.
 * Stock, sold and orders stay shared, so purchases of different modes
 * still race on one stock. A bucket's lock is its own: one lock per
 * bucket (lock striping). Any thread. */
void svc_lock_key(char *buf, const char *tag, lc_mode mode);
/* Writes the hash tag of bucket b (0..63) of sku into tag (SVC_TAG_MAX
 * bytes): "<sku>~<b>", or "<sku>~<b>.<salt>" for salt 1..255, the suffix
 * the placement chose so the bucket lands on a slot of its own
 * (svc_bucket.h). '~' cannot occur in a SKU ([A-Za-z0-9_-]), so no
 * bucket's tag is another SKU's. Any thread. */
void svc_bucket_tag(char *tag, const char *sku, int b, int salt);

#endif
