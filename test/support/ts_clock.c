#include "sl_testsupport.h"

#include "sl_alloc.h"
#include "sl_time.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t sl_ts_now_ns(void)
{
    return sl_now_ns();
}

uint64_t sl_ts_now_ms(void)
{
    return sl_now_ns() / 1000000ull;
}

double sl_ts_now_s(void)
{
    return (double) sl_now_ns() / 1e9;
}

uint64_t sl_ts_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

void sl_ts_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

double sl_ts_percentile(const double *v, size_t n, double p)
{
    double *sorted = n ? sl_reallocarray(NULL, n, sizeof *sorted) : NULL;
    if (!sorted)
        return 0;
    memcpy(sorted, v, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, by_value);
    size_t i = (size_t) (p / 100.0 * (double) (n - 1) + 0.5);
    double r = sorted[i < n ? i : n - 1];
    sl_free(sorted);
    return r;
}

double sl_ts_median(const double *v, size_t n)
{
    return sl_ts_percentile(v, n, 50);
}
