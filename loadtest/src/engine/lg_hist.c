/* lg_hist.c — see lg_hist.h. */
#include "lg_hist.h"

#include <math.h>
#include <string.h>

#define MAXV ((uint64_t)1 << 36) /* ~19 h in us: larger values are clamped */

void lg_hist_init(lg_hist *h)
{
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

int lg_hist_index(uint64_t v)
{
    if (v >= MAXV)
        v = MAXV - 1;
    if (v < 256)
        return (int)v;
    int msb = 63 - __builtin_clzll(v);
    int shift = msb - 7;
    return 256 + (shift - 1) * 128 + (int)((v >> shift) - 128);
}

uint64_t lg_hist_upper(int idx)
{
    if (idx < 256)
        return (uint64_t)idx;
    int k = idx - 256;
    int shift = k / 128 + 1;
    uint64_t m = (uint64_t)(k % 128) + 128;
    return ((m + 1) << shift) - 1;
}

void lg_hist_record(lg_hist *h, uint64_t us)
{
    h->b[lg_hist_index(us)]++;
    h->count++;
    if (us < h->min)
        h->min = us;
    if (us > h->max)
        h->max = us;
}

void lg_hist_merge(lg_hist *into, const lg_hist *from)
{
    if (!from->count)
        return;
    for (int i = 0; i < LG_HIST_BUCKETS; i++)
        into->b[i] += from->b[i];
    into->count += from->count;
    if (from->min < into->min)
        into->min = from->min;
    if (from->max > into->max)
        into->max = from->max;
}

uint64_t lg_hist_percentile(const lg_hist *h, double pct)
{
    if (!h->count)
        return 0;
    if (pct <= 0)
        return h->min;
    if (pct >= 100)
        return h->max;
    uint64_t rank = (uint64_t)ceil(pct / 100.0 * (double)h->count);
    if (rank < 1)
        rank = 1;
    uint64_t cum = 0;
    for (int i = 0; i < LG_HIST_BUCKETS; i++) {
        cum += h->b[i];
        if (cum >= rank) {
            uint64_t v = lg_hist_upper(i);
            if (v > h->max)
                v = h->max;
            if (v < h->min)
                v = h->min;
            return v;
        }
    }
    return h->max;
}
