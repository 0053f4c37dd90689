/* The memory module's test groups, run together by test_main.c. */
#ifndef SL_TEST_MEMORY_H
#define SL_TEST_MEMORY_H

#include <stdint.h>

/* Each runs one cmocka group and returns the number of failed tests. */
int test_pool_run(void);
int test_planner_run(void);
int test_manager_run(void);
int test_manager_layout_run(void);
int test_manager_prop_run(void);

/* splitmix64: a fixed seed gives the same sequence on every platform. */
static inline uint64_t test_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform-enough value in [lo, hi]. */
static inline uint64_t test_rng_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    return lo + test_rng_next(state) % (hi - lo + 1);
}

#endif
