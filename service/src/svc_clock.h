/* svc_clock.h — the wall clock the service stamps what leaves the process
 * with. Durations and deadlines use lockcore's monotonic clock (lc_now_us,
 * lockcore.h), the one every part of the project reads. Any thread. */
#ifndef MIAOSHA_SVC_CLOCK_H
#define MIAOSHA_SVC_CLOCK_H

#include <stdint.h>

#include <lockcore.h>

/* CLOCK_REALTIME in milliseconds since the epoch: for timestamps that leave
 * the process (order records). */
int64_t svc_wall_ms(void);

#endif
