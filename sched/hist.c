/* Log-linear duration histogram. Buckets follow the binary exponent of the
 * value and its next four bits, so a bucket's width is at most 1/16 of its
 * lower bound: relative precision is the same for a 2 us switch as for a
 * 200 ms one, in a fixed array. */
#include "hist.h"

#include <math.h>
#include <string.h>

void sl_sched_hist_reset(sl_sched_hist *h)
{
    memset(h, 0, sizeof(*h));
}

uint32_t sl_sched_hist_bucket(uint64_t ns)
{
    if (ns < SL_SCHED_HIST_SUB)
        return (uint32_t) ns;
    uint32_t e = 63u - (uint32_t) __builtin_clzll(ns); /* 4..63 */
    uint32_t sub = (uint32_t) (ns >> (e - 4u)) & (SL_SCHED_HIST_SUB - 1u);
    return SL_SCHED_HIST_SUB + (e - 4u) * SL_SCHED_HIST_SUB + sub;
}

void sl_sched_hist_bucket_range(uint32_t bucket, uint64_t *lo, uint64_t *hi)
{
    if (bucket < SL_SCHED_HIST_SUB) {
        *lo = *hi = bucket;
        return;
    }
    uint32_t e = (bucket - SL_SCHED_HIST_SUB) / SL_SCHED_HIST_SUB + 4u;
    uint64_t sub = (bucket - SL_SCHED_HIST_SUB) % SL_SCHED_HIST_SUB;
    *lo = (SL_SCHED_HIST_SUB + sub) << (e - 4u);
    *hi = *lo + ((1ull << (e - 4u)) - 1u);
}

void sl_sched_hist_record(sl_sched_hist *h, uint64_t ns)
{
    if (h->count == 0 || ns < h->min_ns)
        h->min_ns = ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
    h->count++;
    if (__builtin_add_overflow(h->sum_ns, ns, &h->sum_ns))
        h->sum_ns = UINT64_MAX;
    h->buckets[sl_sched_hist_bucket(ns)]++;
}

uint64_t sl_sched_hist_quantile(const sl_sched_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (!(q > 0)) /* also NaN */
        q = 0;
    if (q > 1)
        q = 1;
    uint64_t rank = (uint64_t) ceil(q * (double) h->count);
    if (rank < 1)
        rank = 1;
    if (rank >= h->count)
        return h->max_ns; /* the extremes are known exactly */
    if (rank == 1)
        return h->min_ns;

    uint64_t seen = 0;
    for (uint32_t b = 0; b < SL_SCHED_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen < rank)
            continue;
        uint64_t lo, hi;
        sl_sched_hist_bucket_range(b, &lo, &hi);
        uint64_t mid = lo + (hi - lo) / 2;
        /* The extremes are known exactly; never report beyond them. */
        if (mid < h->min_ns)
            mid = h->min_ns;
        if (mid > h->max_ns)
            mid = h->max_ns;
        return mid;
    }
    return h->max_ns; /* unreachable while count matches the buckets */
}
