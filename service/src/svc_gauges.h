/* svc_gauges.h — the audit as Prometheus gauges: miaosha_stock,
 * miaosha_sold, miaosha_oversold and miaosha_undersold{sku} in /metrics,
 * the one number the project is about, graphed.
 *
 * Which SKUs: the last max_skus (metrics.sku_gauges) that this instance
 * saw — a purchase that found the SKU stocked, a local sold-out answer, a
 * reset. A SKU seen again moves up; the least recently seen one makes room
 * for a new one. Never a SKU that was never stocked (404 unknown_sku), so
 * made-up SKUs cannot push real ones out.
 *
 * Where the values come from: /metrics is answered on an HTTP thread from
 * memory and must never wait for Redis. So one background thread, on a
 * connection of its own, reads the audit keys of every tracked SKU (GET
 * of its stock buckets' layout record, stock, initial, sold: one
 * pipelined round trip for all of them; a second one, for all of them
 * too, reads the buckets of the SKUs split into stock buckets, svc_bucket.h;
 * on a Redis Cluster, where each SKU and each bucket is a slot of its own,
 * one round trip per SKU and one per bucket) every refresh_ms
 * (metrics.refresh_ms) and keeps the values; a rendering prints what the
 * last read found. A value is therefore at most refresh_ms plus one read
 * pass old. A SKU whose last read failed (Redis down, a non-integer
 * value, a layout record PUT /stock did not write) or found no stock key
 * (nor, split, a bucket's) is left out of the rendering rather than shown
 * stale. The four values are GET
 * /stock/{sku}'s: for a SKU in buckets, stock and sold summed over them,
 * oversold and undersold computed bucket by bucket and then summed.
 *
 * Threads: svc_gauges_seen and svc_gauges_render from any thread;
 * svc_gauges_start and svc_gauges_stop from the main thread. Nothing here
 * exits; problems are logged by the thread. */
#ifndef MIAOSHA_SVC_GAUGES_H
#define MIAOSHA_SVC_GAUGES_H

#include "svc.h"
#include "svc_buf.h"

/* Starts the reader thread on a private lc_client made from lo (copied):
 * max_skus SKUs (0: none, and no thread: the rest are no-ops), read every
 * refresh_ms ms. The connection is made when the first SKU is seen.
 * Main thread, once. 0, or -1 when the client, the table or the thread
 * cannot be made. */
int svc_gauges_start(const lc_options *lo, int max_skus, int refresh_ms);
/* Stops and joins the thread (within one read pass: at most two round
 * trips, on a Redis Cluster one per SKU and one per bucket). Main thread;
 * safe without a start. */
void svc_gauges_stop(void);
/* sku (a valid id) was seen stocked: tracked from now on, or its recency
 * renewed. Lock-free when sku is tracked already; a new SKU takes a
 * mutex. Any thread. */
void svc_gauges_seen(const char *sku);
/* Appends the four gauge families (HELP, TYPE, one sample per SKU with a
 * value, by SKU name) to b; nothing when max_skus is 0. Any thread;
 * memory only. */
void svc_gauges_render(svc_buf *b);

#endif
