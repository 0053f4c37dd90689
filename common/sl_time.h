/* Monotonic time in nanoseconds, and condition variables that wait on it. */
#ifndef SL_TIME_H
#define SL_TIME_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t sl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* sl_now_ns in seconds, for timing whole runs. */
static inline double sl_now_s(void)
{
    return (double) sl_now_ns() / 1e9;
}

/* Initialises cond to time its waits on the monotonic clock (a wall-clock
 * step must not stretch or cut a wait). Returns pthread_cond_init's result. */
static inline int sl_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    int rv = pthread_condattr_init(&ca);
    if (rv != 0)
        return rv;
    (void) pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rv = pthread_cond_init(cond, &ca);
    (void) pthread_condattr_destroy(&ca);
    return rv;
}

/* Waits on cond (made by sl_cond_init_monotonic; mutex held) until it is
 * signalled or sl_now_ns() reaches deadline_ns. Returns
 * pthread_cond_timedwait's result (ETIMEDOUT once the deadline passed);
 * spurious wake-ups happen, so callers re-check their condition. */
static inline int sl_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex,
                                     uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t) (deadline_ns / 1000000000ull),
                          .tv_nsec = (long) (deadline_ns % 1000000000ull)};
    return pthread_cond_timedwait(cond, mutex, &ts);
}

#endif
