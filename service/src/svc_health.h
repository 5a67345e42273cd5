/* svc_health.h — a background thread that PINGs Redis every
 * SVC_HEALTH_PERIOD_MS on its own connection, so GET /healthz answers from
 * memory (no Redis round trip per request) with a status at most
 * SVC_HEALTH_STALE_MS old. */
#ifndef MIAOSHA_SVC_HEALTH_H
#define MIAOSHA_SVC_HEALTH_H

#include "svc.h"

#define SVC_HEALTH_PERIOD_MS 200
#define SVC_HEALTH_STALE_MS 1000

/* Starts the probe (first PING before returning). 0 or -1. */
int svc_health_start(lc_client *c);
/* 1 when the last PING succeeded less than SVC_HEALTH_STALE_MS ago. Any
 * thread; lock-free. */
int svc_health_up(void);
void svc_health_stop(void);

#endif
