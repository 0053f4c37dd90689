#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "sl_alloc.h"
#include "sl_test.h"
#include "test_memory.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int reset_alloc_failures(void **state)
{
    (void) state;
    sl_alloc_fail_after(0);
    return 0;
}

static void plan_expect(const sl_plan_buf *bufs, size_t n, uint64_t align, const uint64_t *want,
                        uint64_t want_peak, uint64_t want_naive)
{
    uint64_t offsets[16];
    sl_plan_result res;
    assert_true(n <= ARRAY_LEN(offsets));
    assert_sl_ok(sl_mem_plan(bufs, n, align, offsets, &res));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(offsets[i], want[i]);
    assert_int_equal(res.peak, want_peak);
    assert_int_equal(res.naive, want_naive);
}

static void test_chain_reuses_memory(void **state)
{
    (void) state;
    /* a -> b -> c: a and c are never live together and share offset 0. */
    const sl_plan_buf bufs[] = {{1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}};
    plan_expect(bufs, 3, 256, (const uint64_t[]){0, 1024, 0}, 2048, 3072);
}

static void test_all_overlapping_is_naive(void **state)
{
    (void) state;
    /* Largest first: 300 (512 rounded) at 0, 200 at 512, 100 at 768. */
    const sl_plan_buf bufs[] = {{100, 0, 5}, {300, 0, 5}, {200, 0, 5}};
    plan_expect(bufs, 3, 0, (const uint64_t[]){768, 0, 512}, 1024, 1024);
}

static void test_fills_lowest_gap(void **state)
{
    (void) state;
    /* g [0,0] at 0; h [1,2] not live with g, also at 0; i [0,1] meets both,
     * above g at 1024; k [1,1] meets h (0..512) and i (1024..1536), so it
     * drops into the gap between them at 512. */
    const sl_plan_buf bufs[] = {{1024, 0, 0}, {512, 1, 2}, {512, 0, 1}, {256, 1, 1}};
    plan_expect(bufs, 4, 256, (const uint64_t[]){0, 0, 1024, 512}, 1536, 2304);
}

static void test_ties_and_order(void **state)
{
    (void) state;
    /* Equal sizes: the lower index goes first. */
    const sl_plan_buf same[] = {{512, 0, 0}, {512, 0, 0}};
    plan_expect(same, 2, 256, (const uint64_t[]){0, 512}, 1024, 1024);
    /* The order is by requested size, before rounding. */
    const sl_plan_buf rounded[] = {{511, 0, 0}, {512, 0, 0}};
    plan_expect(rounded, 2, 256, (const uint64_t[]){512, 0}, 1024, 1024);
    /* Never live together: everything shares offset 0. */
    const sl_plan_buf apart[] = {{100, 0, 0}, {5000, 1, 1}, {256, 2, 2}, {3000, 3, 3}};
    plan_expect(apart, 4, 256, (const uint64_t[]){0, 0, 0, 0}, 5120, 256 + 5120 + 256 + 3072);
}

static void test_zero_size(void **state)
{
    (void) state;
    const sl_plan_buf bufs[] = {{0, 0, 9}, {1000, 0, 3}, {0, 2, 2}, {500, 2, 5}};
    plan_expect(bufs, 4, 256, (const uint64_t[]){0, 0, 0, 1024}, 1536, 1536);
    const sl_plan_buf empty[] = {{0, 0, 0}, {0, 0, 4}};
    plan_expect(empty, 2, 256, (const uint64_t[]){0, 0}, 0, 0);
    sl_plan_result res = {7, 7};
    assert_sl_ok(sl_mem_plan(NULL, 0, 0, NULL, &res));
    assert_int_equal(res.peak, 0);
    assert_int_equal(res.naive, 0);
}

static void test_alignment(void **state)
{
    (void) state;
    const sl_plan_buf bufs[] = {{1, 0, 1}, {65, 1, 2}};
    plan_expect(bufs, 2, 64, (const uint64_t[]){128, 0}, 192, 192);
    plan_expect(bufs, 2, 4096, (const uint64_t[]){4096, 0}, 8192, 8192);
    plan_expect(bufs, 2, 0, (const uint64_t[]){256, 0}, 512, 512);
    const sl_plan_buf odd[] = {{3, 0, 0}, {5, 0, 0}};
    plan_expect(odd, 2, 1, (const uint64_t[]){5, 0}, 8, 8);
}

static void test_invalid(void **state)
{
    (void) state;
    uint64_t offsets[2] = {42, 42};
    sl_plan_result res = {7, 7};
    const sl_plan_buf backwards[] = {{256, 0, 1}, {256, 3, 2}};
    assert_sl_err(sl_mem_plan(backwards, 2, 256, offsets, &res), SL_EINVAL);
    const sl_plan_buf ok[] = {{256, 0, 1}, {256, 1, 2}};
    assert_sl_err(sl_mem_plan(ok, 2, 3, offsets, &res), SL_EINVAL);
    assert_sl_err(sl_mem_plan(ok, 2, 768, offsets, &res), SL_EINVAL);
    assert_sl_err(sl_mem_plan(NULL, 2, 256, offsets, &res), SL_EINVAL);
    assert_sl_err(sl_mem_plan(ok, 2, 256, NULL, &res), SL_EINVAL);
    assert_sl_err(sl_mem_plan(ok, 2, 256, offsets, NULL), SL_EINVAL);
    /* Sizes whose rounding or sum would overflow. */
    const sl_plan_buf huge[] = {{UINT64_MAX, 0, 0}};
    assert_sl_err(sl_mem_plan(huge, 1, 256, offsets, &res), SL_EINVAL);
    const sl_plan_buf almost[] = {{UINT64_MAX - 254, 0, 0}};
    assert_sl_err(sl_mem_plan(almost, 1, 256, offsets, &res), SL_EINVAL);
    const sl_plan_buf halves[] = {{1ull << 63, 0, 0}, {1ull << 63, 5, 5}};
    assert_sl_err(sl_mem_plan(halves, 2, 256, offsets, &res), SL_EINVAL);
    assert_int_equal(offsets[0], 42);
    assert_int_equal(offsets[1], 42);
    assert_int_equal(res.peak, 7);
    assert_int_equal(res.naive, 7);

    /* The largest sizes that do not overflow still plan. */
    const sl_plan_buf big[] = {{UINT64_MAX - 255, 0, 0}};
    assert_sl_ok(sl_mem_plan(big, 1, 256, offsets, &res));
    assert_int_equal(offsets[0], 0);
    assert_int_equal(res.peak, UINT64_MAX - 255);
    const sl_plan_buf two[] = {{1ull << 62, 0, 1}, {1ull << 62, 1, 2}};
    assert_sl_ok(sl_mem_plan(two, 2, 256, offsets, &res));
    assert_int_equal(offsets[1], 1ull << 62);
    assert_int_equal(res.peak, 1ull << 63);
}

static void test_host_alloc_failure(void **state)
{
    (void) state;
    const sl_plan_buf bufs[] = {{1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}};
    uint64_t offsets[3] = {42, 42, 42};
    sl_plan_result res = {7, 7};
    for (long n = 1; n <= 2; n++) {
        sl_alloc_fail_after(n);
        assert_sl_err(sl_mem_plan(bufs, 3, 256, offsets, &res), SL_ENOMEM);
        for (size_t i = 0; i < 3; i++)
            assert_int_equal(offsets[i], 42);
        assert_int_equal(res.peak, 7);
    }
    sl_alloc_fail_after(3);
    assert_sl_ok(sl_mem_plan(bufs, 3, 256, offsets, &res));
    sl_alloc_fail_after(0);
    assert_int_equal(res.peak, 2048);
}

/* ---- randomized property test ---- */

static uint64_t align_up(uint64_t x, uint64_t align)
{
    return (x + align - 1) & ~(align - 1);
}

static bool live_together(const sl_plan_buf *a, const sl_plan_buf *b)
{
    return a->first <= b->last && b->first <= a->last;
}

static bool collides(const sl_plan_buf *bufs, const uint64_t *offsets, uint64_t align, size_t a,
                     uint64_t a_offset, size_t b)
{
    uint64_t sa = align_up(bufs[a].size, align), sb = align_up(bufs[b].size, align);
    if (sa == 0 || sb == 0 || !live_together(&bufs[a], &bufs[b]))
        return false;
    return a_offset < offsets[b] + sb && offsets[b] < a_offset + sa;
}

/* True when the greedy order places a before b. */
static bool placed_before(const sl_plan_buf *bufs, size_t a, size_t b)
{
    return bufs[a].size > bufs[b].size || (bufs[a].size == bufs[b].size && a < b);
}

static void check_plan(const sl_plan_buf *bufs, size_t n, uint64_t align, const uint64_t *offsets,
                       const sl_plan_result *res)
{
    uint64_t naive = 0;
    uint32_t last_step = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = align_up(bufs[i].size, align);
        naive += size;
        if (bufs[i].last > last_step)
            last_step = bufs[i].last;
        assert_int_equal(offsets[i] % align, 0);
        if (size == 0)
            assert_int_equal(offsets[i], 0);
        assert_true(offsets[i] + size <= res->peak);
        for (size_t j = i + 1; j < n; j++)
            assert_false(collides(bufs, offsets, align, i, offsets[i], j));
    }
    assert_int_equal(res->naive, naive);
    assert_true(res->peak <= naive);

    /* Buffers live at the same step are disjoint, so their sum bounds the
     * peak from below. */
    uint64_t busiest = 0;
    for (uint32_t step = 0; step <= last_step; step++) {
        uint64_t live = 0;
        for (size_t i = 0; i < n; i++) {
            if (bufs[i].first <= step && step <= bufs[i].last)
                live += align_up(bufs[i].size, align);
        }
        if (live > busiest)
            busiest = live;
    }
    assert_true(res->peak >= busiest);

    /* Lowest offset: a lower free spot would start at 0 or at the end of a
     * buffer placed earlier, so every such candidate below the chosen offset
     * must collide with a buffer placed earlier. */
    for (size_t i = 0; i < n; i++) {
        if (align_up(bufs[i].size, align) == 0)
            continue;
        for (size_t c = 0; c <= n; c++) {
            uint64_t cand = 0;
            if (c < n) {
                if (!placed_before(bufs, c, i) || !live_together(&bufs[c], &bufs[i]))
                    continue;
                cand = offsets[c] + align_up(bufs[c].size, align);
            }
            if (cand >= offsets[i])
                continue;
            bool blocked = false;
            for (size_t j = 0; j < n && !blocked; j++)
                blocked = placed_before(bufs, j, i) && collides(bufs, offsets, align, i, cand, j);
            assert_true(blocked);
        }
    }
}

static void test_random_plans(void **state)
{
    (void) state;
    enum { MAX_BUFS = 48, ROUNDS = 400 };
    static const uint64_t aligns[] = {1, 64, 256, 4096};
    sl_plan_buf bufs[MAX_BUFS];
    uint64_t offsets[MAX_BUFS], again[MAX_BUFS];
    uint64_t rng = 0x9E7A11;
    uint64_t saved = 0, total_naive = 0;
    for (int round = 0; round < ROUNDS; round++) {
        size_t n = test_rng_range(&rng, 1, MAX_BUFS);
        uint64_t align = aligns[test_rng_next(&rng) % ARRAY_LEN(aligns)];
        /* Short graphs crowd buffers together; long ones spread them. */
        uint32_t steps = (uint32_t) test_rng_range(&rng, 1, 40);
        for (size_t i = 0; i < n; i++) {
            bufs[i].size = test_rng_next(&rng) % 10 == 0 ? 0 : test_rng_range(&rng, 1, 100000);
            /* Repeated sizes exercise the index tie-break. */
            if (i > 0 && test_rng_next(&rng) % 8 == 0)
                bufs[i].size = bufs[i - 1].size;
            bufs[i].first = (uint32_t) test_rng_range(&rng, 0, steps);
            bufs[i].last = bufs[i].first + (uint32_t) test_rng_range(&rng, 0, 12);
        }
        sl_plan_result res, res_again;
        assert_sl_ok(sl_mem_plan(bufs, n, align, offsets, &res));
        check_plan(bufs, n, align, offsets, &res);
        assert_sl_ok(sl_mem_plan(bufs, n, align, again, &res_again));
        assert_memory_equal(offsets, again, n * sizeof(*offsets));
        assert_int_equal(res.peak, res_again.peak);
        saved += res.naive - res.peak;
        total_naive += res.naive;
    }
    /* The workload does give the planner something to reuse. */
    assert_true(saved > total_naive / 4);
}

int test_planner_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_chain_reuses_memory, reset_alloc_failures),
        cmocka_unit_test_teardown(test_all_overlapping_is_naive, reset_alloc_failures),
        cmocka_unit_test_teardown(test_fills_lowest_gap, reset_alloc_failures),
        cmocka_unit_test_teardown(test_ties_and_order, reset_alloc_failures),
        cmocka_unit_test_teardown(test_zero_size, reset_alloc_failures),
        cmocka_unit_test_teardown(test_alignment, reset_alloc_failures),
        cmocka_unit_test_teardown(test_invalid, reset_alloc_failures),
        cmocka_unit_test_teardown(test_host_alloc_failure, reset_alloc_failures),
        cmocka_unit_test_teardown(test_random_plans, reset_alloc_failures),
    };
    return cmocka_run_group_tests_name("memory/planner", tests, NULL, NULL);
}
