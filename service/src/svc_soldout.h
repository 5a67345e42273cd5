/* svc_soldout.h — the local sold-out flag: most purchases of a flash sale
 * arrive after the stock is gone, and answering them without a Redis round
 * trip is where a real sale's throughput comes from.
 *
 * Once a purchase of this instance has found a SKU sold out, the HTTP
 * thread answers that SKU's purchases 409 sold_out from memory (C11
 * atomics, no worker, no Redis) until the SKU's stock is reset, which every
 * instance learns within SVC_SOLDOUT_POLL_MS x 2:
 *   - PUT /stock publishes the SKU on SVC_SOLDOUT_CHANNEL in its
 *     transaction; one thread per instance is subscribed on its own
 *     connection and clears the flag as the message arrives;
 *   - the same thread reads the stock and the bucket layout record of
 *     every flagged SKU every SVC_SOLDOUT_POLL_MS (one MGET; on a Redis
 *     Cluster one round trip per SKU) and clears the flag of one whose
 *     stock holds anything but an integer <= 0, or whose layout is not the
 *     one this instance holds: the fallback for a message lost while the
 *     subscription was down (and for stock set by hand in Redis).
 * The same message carries a reset's stock buckets (svc_bucket.h): the
 * thread hands the SKU's new layout to svc_bucket_learn, and when it
 * (re)subscribes it makes every layout be read again
 * (svc_bucket_forget_all): the resets meanwhile went unheard. A SKU in
 * buckets is flagged once every bucket is empty.
 *
 * A flag never outlives a reset that happened after the read that set it:
 * each SKU has a generation, bumped by every clear; a worker takes the
 * generation before its Redis read (svc_soldout_gen) and the flag it sets
 * (svc_soldout_mark) holds only for that generation.
 *
 * At most SVC_SOLDOUT_SKUS SKUs get a flag; later ones are always asked of
 * Redis. */
#ifndef MIAOSHA_SVC_SOLDOUT_H
#define MIAOSHA_SVC_SOLDOUT_H

#include <stdint.h>

#include "svc.h"

#define SVC_SOLDOUT_CHANNEL "miaosha:stock-reset"
#define SVC_SOLDOUT_POLL_MS 50
#define SVC_SOLDOUT_SKUS 256

/* Starts the subscriber and poll thread on connections of a private
 * lc_client made from lo (copied). Main thread, once. 0, or -1 when the
 * client or the thread cannot be made. Redis being down is not an error:
 * the thread keeps trying. */
int svc_soldout_start(const lc_options *lo);
/* Stops and joins the thread: usually within SVC_SOLDOUT_POLL_MS, but a
 * poll under way (on a cluster one round trip per flagged SKU) or a
 * re-subscribe's connect ends first, each bounded by the connect and command
 * timeouts. Main thread; safe without a start. */
void svc_soldout_stop(void);

/* 1 when sku is flagged sold out. Any thread; lock-free. */
int svc_soldout_is(const char *sku);
/* sku's generation now: take it before the Redis read whose sold-out
 * answer may set the flag. Any thread; lock-free. */
uint64_t svc_soldout_gen(const char *sku);
/* A purchase that took gen before its read found sku sold out: flags it,
 * unless a reset came since. Any thread (a SKU seen for the first time
 * takes a mutex). */
void svc_soldout_mark(const char *sku, uint64_t gen);
/* Clears sku's flag (a reset was seen). Any thread. */
void svc_soldout_clear(const char *sku);

#endif
