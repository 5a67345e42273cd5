/* lg_hist.h — a fixed-size log-linear latency histogram (microseconds).
 *
 * 128 sub-buckets per power of two: any recorded value is reported with a
 * relative error below 0.8 % (values below 256 us are exact). Recording is
 * one array increment, no allocation; one histogram per thread, merged at
 * the end. Not thread-safe.
 */
#ifndef MIAOSHA_LG_HIST_H
#define MIAOSHA_LG_HIST_H

#include <stdint.h>

#define LG_HIST_BUCKETS 4096

typedef struct lg_hist {
    uint64_t count;
    uint64_t min;
    uint64_t max;
    uint64_t b[LG_HIST_BUCKETS];
} lg_hist;

void lg_hist_init(lg_hist *h);
void lg_hist_record(lg_hist *h, uint64_t us);
void lg_hist_merge(lg_hist *into, const lg_hist *from);
/* The value at percentile pct (0 < pct <= 100): the smallest recorded
 * bucket whose cumulative count reaches ceil(pct/100 * count), reported as
 * the bucket's upper bound clipped to [min, max]. 0 when empty. */
uint64_t lg_hist_percentile(const lg_hist *h, double pct);

/* Bucket mapping, exposed for the unit tests. */
int lg_hist_index(uint64_t us);
uint64_t lg_hist_upper(int index);

#endif
