/* Monotonic time in nanoseconds. */
#ifndef SL_TIME_H
#define SL_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t sl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

#endif
