/* svc_clock.c — see svc_clock.h. */
#include "svc_clock.h"

#include <time.h>

int64_t svc_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
