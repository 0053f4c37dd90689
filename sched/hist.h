/* A fixed-size log-linear histogram of nanosecond durations (HDR-style): 16
 * exact buckets for 0..15, then 16 sub-buckets per power of two up to 2^64.
 * Recording is O(1) and never allocates; a percentile comes back as the
 * midpoint of the bucket holding the nearest-rank sample, clamped to the
 * observed [min, max], so its relative error is at most 1/32 (values below
 * 16 are exact). 976 buckets, about 7.8 KiB: embed it, do not allocate it.
 *
 * Pure and not thread-safe, like the rest of sched/. */
#ifndef SL_SCHED_HIST_H
#define SL_SCHED_HIST_H

#include <stdint.h>

#define SL_SCHED_HIST_SUB 16u /* sub-buckets per power of two */
#define SL_SCHED_HIST_BUCKETS (SL_SCHED_HIST_SUB + (64u - 4u) * SL_SCHED_HIST_SUB)

typedef struct sl_sched_hist {
    uint64_t count;
    uint64_t sum_ns; /* saturates at UINT64_MAX */
    uint64_t min_ns; /* meaningful when count > 0 */
    uint64_t max_ns;
    uint64_t buckets[SL_SCHED_HIST_BUCKETS];
} sl_sched_hist;

/* Empties h. A zero-filled histogram is already empty. */
void sl_sched_hist_reset(sl_sched_hist *h);

/* Adds one sample. O(1), never allocates. */
void sl_sched_hist_record(sl_sched_hist *h, uint64_t ns);

/* The q-quantile (q in [0, 1]; clamped) by nearest rank: an estimate of the
 * smallest sample v such that at least ceil(q * count) samples are <= v
 * (q = 0 gives the minimum). Within 1/32 of the true value, relative, and
 * exact for the first and last rank (min and max); 0 when the histogram is
 * empty. O(buckets). */
uint64_t sl_sched_hist_quantile(const sl_sched_hist *h, double q);

/* The bucket index of a value, and the bucket's [lo, hi] range (hi
 * inclusive). Exposed for tests. */
uint32_t sl_sched_hist_bucket(uint64_t ns);
void sl_sched_hist_bucket_range(uint32_t bucket, uint64_t *lo, uint64_t *hi);

#endif
