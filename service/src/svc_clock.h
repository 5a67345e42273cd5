/* svc_clock.h — the two clocks the service reads. Any thread. */
#ifndef MIAOSHA_SVC_CLOCK_H
#define MIAOSHA_SVC_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in microseconds: for durations and deadlines. */
int64_t svc_now_us(void);
/* CLOCK_REALTIME in milliseconds since the epoch: for timestamps that leave
 * the process (order records). */
int64_t svc_wall_ms(void);

#endif
