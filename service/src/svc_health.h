/* svc_health.h — a background thread that PINGs Redis every
 * SVC_HEALTH_PERIOD_MS on its own connection, so GET /healthz answers from
 * memory (no Redis round trip per request) with a status at most
 * SVC_HEALTH_STALE_MS old. A failed PING is retried once on a new
 * connection before the status turns down; each attempt's connect and
 * command timeouts are capped at SVC_HEALTH_TIMEOUT_MS so that both fit in
 * the staleness window. */
#ifndef MIAOSHA_SVC_HEALTH_H
#define MIAOSHA_SVC_HEALTH_H

#include "svc.h"

#define SVC_HEALTH_PERIOD_MS 200
#define SVC_HEALTH_STALE_MS 1000
#define SVC_HEALTH_TIMEOUT_MS 300

/* Starts the probe on a private lc_client made from lo (the service's Redis
 * options; lo is copied, the caller keeps it). The first probe runs before
 * it returns. Main thread only. 0, or -1 when the client or the thread
 * cannot be created. */
int svc_health_start(const lc_options *lo);
/* 1 when the last PING succeeded less than SVC_HEALTH_STALE_MS ago. Any
 * thread; lock-free. */
int svc_health_up(void);
void svc_health_stop(void);

#endif
