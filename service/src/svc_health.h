/* svc_health.h — a background thread that probes Redis every
 * SVC_HEALTH_PERIOD_MS on its own connection, so GET /healthz answers from
 * memory (no Redis round trip per request). A probe is one PING and, when
 * it fails, one more on a new connection; each attempt's connect and
 * command timeouts are capped at SVC_HEALTH_TIMEOUT_MS, so a probe lasts at
 * most about 2 x that. The status turns down only after
 * SVC_HEALTH_DOWN_AFTER failed probes in a row (a stopped Redis: within
 * about 1.5 s), and up again with the first good one. It does not go stale
 * by itself: a probe thread starved of CPU under load leaves the last
 * status standing instead of reporting Redis down while it answers PING.
 * Every probe's start time and timings are logged at DEBUG, a failed one
 * at WARN (once, then summarised while it repeats). After each good probe
 * the same thread refreshes the replica set redis.wait_replicas = all
 * waits for (svc_replicas_refresh), and runs the one task that waits for
 * Redis (svc_health_when_up) until it is done; the status is up only once
 * it is. After every probe it also logs a redlock lock master that went
 * down or came back (svc_health_watch_redlock). */
#ifndef MIAOSHA_SVC_HEALTH_H
#define MIAOSHA_SVC_HEALTH_H

#include "svc.h"

#define SVC_HEALTH_PERIOD_MS 200          /* between the end of a probe and the next */
#define SVC_HEALTH_DOWN_AFTER 2           /* failed probes in a row before "down" */
#define SVC_HEALTH_TIMEOUT_MS 300         /* cap on each attempt's connect and command timeout */
#define SVC_HEALTH_CLUSTER_REFRESH_MS 100 /* the probe's map: due at every probe */

/* Work that needs Redis to answer, done once: fn(conn, arg, err, errlen)
 * on the probe's connection after a good probe, and again after each later
 * good probe until it returns 0. Until it has, the status stays down: GET
 * /healthz is never 200 before fn has succeeded (a seed that timed out or
 * that Redis refused, e.g. OOM, is retried, not skipped), and the reason
 * is what fn wrote into err (errlen bytes). For the default SKU's seed,
 * which must not be lost when Redis is down at start. One task; set it
 * before svc_health_start (arg must outlive the probe). Main thread. */
typedef int (*svc_health_task)(lc_conn *conn, void *arg, char *err, size_t errlen);
void svc_health_when_up(svc_health_task fn, void *arg);

/* Starts the probe on a private lc_client made from lo (the service's Redis
 * options; lo is copied, the caller keeps it), under s (kept: it must
 * outlive the probe). The first probe, and when it answered the first
 * replica refresh and the svc_health_when_up task, run before it returns
 * and set the first status (down when it failed: there is no earlier good
 * probe to trust). Main thread only. 0, or -1 when the client or the
 * thread cannot be created. */
int svc_health_start(const cfg_config *s, const lc_options *lo);
/* The purchases' lc_client, whose redlock lock masters the probe thread
 * watches (lc_stats.redlock_nodes_down, read after every probe): a master
 * that stops answering is logged once at WARN, naming the ones down and
 * whether a majority still grants the lock (again at each change), and
 * the return of all at INFO; no line while nothing changes. Redlock's masters are
 * not Redis of the stock, so /healthz does not turn for them (a majority
 * still grants the lock). workers must outlive the probe; NULL = none.
 * Before svc_health_start, main thread. */
void svc_health_watch_redlock(lc_client *workers);
/* 1 unless the last SVC_HEALTH_DOWN_AFTER probes all failed (or the first
 * one did and none has succeeded since); 0 before svc_health_start. Any
 * thread; lock-free. */
int svc_health_up(void);
void svc_health_stop(void);
/* Why the last probe failed (lockcore's text: "sentinel: no master ...",
 * "redis 127.0.0.1:6379: Connection refused"), "" after a good one; into
 * buf (len bytes). Any thread. */
void svc_health_reason(char *buf, size_t len);
/* The probe's lc_client (NULL before svc_health_start). With a Redis
 * Cluster its slot map is the one the last good probe pinged every master
 * of, and every probe takes it afresh (SVC_HEALTH_CLUSTER_REFRESH_MS;
 * redis.cluster_refresh_ms paces the workers' maps), with or without
 * purchases: /stats shows this map, there as soon
 * as /healthz is 200, where the service's own client takes one only with
 * its first command. Owned by the probe; valid until svc_health_stop. Any
 * thread. */
lc_client *svc_health_client(void);
/* What /healthz and /stats name as the master, into buf (len bytes):
 * lc_client_master of workers (the service's client; "" when NULL), but on
 * a Redis Cluster the probe client's, whose map the probe keeps fresh while
 * the service is idle (the workers' is taken afresh only with their next
 * command, so it would name a failed-over master until then); and the
 * probe client's too while the workers' names none (with Sentinels, before
 * the first request has connected a worker). Any thread. */
void svc_health_master(lc_client *workers, char *buf, size_t len);

#endif
