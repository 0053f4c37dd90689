/* Hand-written layout cases for the memory manager: fragmentation that
 * compaction cannot help and fragmentation it does, busy lanes left alone,
 * persistent regions, shrinking in place, and host allocation failures in
 * the middle of a compaction. Every step is followed by sl_mem_check. */
#include <stdlib.h>
#include <string.h>

#include "test_manager.h"
#include "test_memory.h"

/* Free memory is scattered between persistent blocks: compacting the idle
 * lanes cannot make a contiguous block. */
static void test_fragmentation_persistent_in_the_way(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 0, 24 * K); /* lane at [0, 24K) */
    uint64_t blocks[10];
    for (int i = 0; i < 10; i++) {
        blocks[i] = alloc_ok(m, 1, 100 * K);
        assert_int_equal(blocks[i], 24 * K + (uint64_t) i * 100 * K);
    }
    for (int i = 0; i < 10; i += 2)
        assert_sl_ok(sl_mem_free(m, 1, blocks[i]));
    assert_sl_ok(sl_mem_check(m));
    sl_mem_stats st = stats(m);
    assert_int_equal(st.free, 500 * K);
    assert_int_equal(st.largest_free, 100 * K);
    assert_true(st.fragmentation > 0.7);

    /* rule: 500K used + 24K lane + 200K <= 1024K, yet no 200K in one piece */
    assert_int_equal(admit_refused(m, 2, 0, 200 * K, false), SL_MEM_FRAGMENTATION);
    assert_int_equal(alloc_refused(m, 1, 150 * K), SL_MEM_FRAGMENTATION);
    assert_int_equal(admit_refused(m, 2, 0, 200 * K, true), SL_MEM_FRAGMENTATION);
    assert_int_equal(session_info(m, 2).reason, SL_MEM_FRAGMENTATION);
    /* compaction can only move the lane into a hole: that joins [0, 24K)
     * to the first hole (124K), still no 200K */
    assert_int_equal(sl_mem_compact(m), 1);
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(stats(m).largest_free, 124 * K);
    assert_int_equal(sl_mem_compact(m), 0);
    assert_int_equal(stats(m).n_queued, 1);
    assert_int_equal(session_info(m, 2).reason, SL_MEM_FRAGMENTATION);

    /* freeing the block between two holes is what helps */
    assert_sl_ok(sl_mem_free(m, 1, blocks[1]));
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(next_admitted(m, NULL), 2);
    release_ok(m, 1);
    release_ok(m, 2);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Lanes L1..L4 and a persistent tail; S1 and S3 leave, so the free memory
 * is two holes separated by the idle lane L2. */
struct holes {
    sl_mem_mgr *m;
    uint32_t l2, l4;
};

static struct holes make_holes(void)
{
    struct holes h;
    h.m = mgr_new(1024 * K, 0, 0, 64 * K);
    uint32_t l1 = admit_ok(h.m, 1, 0, 100 * K);
    h.l2 = admit_ok(h.m, 2, 0, 150 * K);
    uint32_t l3 = admit_ok(h.m, 3, 0, 200 * K);
    h.l4 = admit_ok(h.m, 4, 0, 250 * K);
    assert_int_equal(lane_info(h.m, l1).base, 0);
    assert_int_equal(lane_info(h.m, h.l2).base, 100 * K);
    assert_int_equal(lane_info(h.m, l3).base, 250 * K);
    assert_int_equal(lane_info(h.m, h.l4).base, 450 * K);
    assert_int_equal(alloc_ok(h.m, 4, 324 * K), 700 * K);
    assert_int_equal(stats(h.m).free, 0);
    release_ok(h.m, 1);
    release_ok(h.m, 3);
    assert_int_equal(stats(h.m).n_lanes, 2);
    assert_sl_err(sl_mem_lane_get(h.m, l1, &(sl_mem_lane_info){0}), SL_ENOTFOUND);
    assert_int_equal(stats(h.m).free, 300 * K);
    assert_int_equal(stats(h.m).largest_free, 200 * K);
    return h;
}

static void test_fragmentation_compaction_helps(void **state)
{
    (void) state;
    struct holes h = make_holes();
    /* 280K fits the rule, not any hole: the idle lanes move and it fits */
    uint32_t l5 = admit_ok(h.m, 5, 0, 280 * K);
    assert_true(l5 != h.l2 && l5 != h.l4);
    assert_int_equal(lane_info(h.m, l5).size, 280 * K);
    assert_int_equal(lane_info(h.m, h.l2).size, 150 * K);
    assert_int_equal(lane_info(h.m, h.l4).size, 250 * K);
    assert_int_equal(stats(h.m).free, 20 * K);
    sl_mem_mgr_destroy(h.m);

    /* a persistent block too: 280K fits the rule (session 4 declared P = 0)
     * but no hole; the idle lanes make room */
    h = make_holes();
    uint64_t addr = alloc_ok(h.m, 4, 280 * K);
    assert_int_equal(addr, 0);
    assert_int_equal(lane_info(h.m, h.l4).base, 280 * K);
    release_ok(h.m, 2);
    release_ok(h.m, 4);
    assert_empty(h.m);
    sl_mem_mgr_destroy(h.m);

    /* sl_mem_compact on its own: both lanes move below the persistent tail */
    h = make_holes();
    assert_int_equal(sl_mem_compact(h.m), 2);
    assert_sl_ok(sl_mem_check(h.m));
    sl_mem_stats st = stats(h.m);
    assert_int_equal(st.largest_free, 300 * K);
    assert_true(st.fragmentation == 0.0);
    assert_int_equal(sl_mem_compact(h.m), 0); /* nothing left to gain */
    for (uint64_t id = 2; id <= 4; id += 2)
        release_ok(h.m, id);
    assert_empty(h.m);
    sl_mem_mgr_destroy(h.m);
}

static void test_busy_lanes_untouched(void **state)
{
    (void) state;
    struct holes h = make_holes();
    sl_mem_lane_info l2 = lane_info(h.m, h.l2), l4 = lane_info(h.m, h.l4);
    sl_mem_lane_busy(h.m, h.l2);
    sl_mem_lane_busy(h.m, h.l4);
    /* nothing can move: fragmentation, queued */
    assert_int_equal(admit_refused(h.m, 5, 0, 280 * K, true), SL_MEM_FRAGMENTATION);
    assert_int_equal(sl_mem_compact(h.m), 0);
    sl_mem_lane_info now = lane_info(h.m, h.l2);
    assert_int_equal(now.base, l2.base);
    assert_int_equal(now.size, l2.size);
    assert_true(now.busy);
    now = lane_info(h.m, h.l4);
    assert_int_equal(now.base, l4.base);
    assert_int_equal(now.size, l4.size);

    /* L2 goes idle: it moves, L4 (still busy) does not, session 5 is in */
    sl_mem_lane_idle(h.m, h.l2);
    assert_sl_ok(sl_mem_check(h.m));
    uint32_t l5 = 0;
    assert_int_equal(next_admitted(h.m, &l5), 5);
    assert_true(l5 != h.l2 && l5 != h.l4);
    now = lane_info(h.m, h.l4);
    assert_int_equal(now.base, l4.base);
    assert_int_equal(now.size, l4.size);
    assert_int_not_equal(lane_info(h.m, h.l2).base, l2.base);
    sl_mem_mgr_destroy(h.m);

    /* only L2 busy: a new lane finds no room around it, so the idle L4 grows
     * (zero copy, moved) and session 5 shares it; L2 stays put */
    h = make_holes();
    sl_mem_lane_busy(h.m, h.l2);
    assert_int_equal(admit_ok(h.m, 5, 0, 280 * K), h.l4);
    now = lane_info(h.m, h.l4);
    assert_int_equal(now.size, 280 * K);
    assert_int_equal(now.n_sessions, 2);
    now = lane_info(h.m, h.l2);
    assert_int_equal(now.base, l2.base);
    assert_int_equal(now.size, l2.size);
    sl_mem_mgr_destroy(h.m);
}

/* A declared P is one region: the session's tensors stay together, so
 * sessions cannot fragment each other, and a session that leaves gives back
 * one block of its full size. */
static void test_persistent_regions(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    uint32_t lane = admit_ok(m, 1, 300 * K, 64 * K);
    assert_int_equal(admit_ok(m, 2, 300 * K, 64 * K), lane);
    sl_mem_session_info a = session_info(m, 1), b = session_info(m, 2);
    assert_int_equal(a.region_size, 300 * K);
    assert_int_equal(b.region_size, 300 * K);
    /* reserved up front: the arena holds the rule's left side */
    assert_int_equal(stats(m).free, 1024 * K - 600 * K - 64 * K);
    /* interleaved uploads land in their own regions */
    uint64_t blocks[2][3];
    for (int i = 0; i < 3; i++) {
        for (int s_ = 0; s_ < 2; s_++) {
            uint64_t at = alloc_ok(m, (uint64_t) s_ + 1, 100 * K);
            uint64_t base = s_ ? b.region_base : a.region_base;
            assert_true(at >= base && at + 100 * K <= base + 300 * K);
            blocks[s_][i] = at;
        }
    }
    /* its own frees can fragment its own region */
    assert_sl_ok(sl_mem_free(m, 1, blocks[0][0]));
    assert_sl_ok(sl_mem_free(m, 1, blocks[0][2]));
    assert_int_equal(alloc_refused(m, 1, 150 * K), SL_MEM_FRAGMENTATION);
    assert_int_equal(alloc_refused(m, 1, 250 * K), SL_MEM_QUOTA);
    /* session 2 leaves: one free block of its whole region */
    release_ok(m, 2);
    sl_mem_stats st = stats(m);
    assert_int_equal(st.free, 1024 * K - 300 * K - 64 * K);
    assert_true(st.largest_free >= 300 * K);
    assert_int_equal(session_info(m, 1).used, 100 * K);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);

    /* a P that is free but not in one piece: refused at admission */
    m = mgr_new(1024 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 0, 24 * K);
    uint64_t held[10];
    for (int i = 0; i < 10; i++)
        held[i] = alloc_ok(m, 1, 100 * K);
    for (int i = 0; i < 10; i += 2)
        assert_sl_ok(sl_mem_free(m, 1, held[i]));
    assert_int_equal(admit_refused(m, 2, 200 * K, 24 * K, true), SL_MEM_FRAGMENTATION);
    assert_int_equal(session_info(m, 2).region_size, 0);
    assert_sl_ok(sl_mem_free(m, 1, held[1]));
    assert_int_equal(next_admitted(m, NULL), 2);
    assert_int_equal(session_info(m, 2).region_size, 200 * K);
    release_ok(m, 1);
    release_ok(m, 2);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* The arena is full, so a lane whose largest session leaves can only
 * shrink where it is. */
static void test_shrink_in_place(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    uint32_t l1 = admit_ok(m, 1, 0, 200 * K);
    assert_int_equal(admit_ok(m, 2, 0, 100 * K), l1);
    alloc_ok(m, 2, 824 * K);
    assert_int_equal(stats(m).free, 0);
    release_ok(m, 1);
    sl_mem_lane_info li = lane_info(m, l1);
    assert_int_equal(li.base, 0);
    assert_int_equal(li.size, 100 * K);
    assert_int_equal(stats(m).free, 100 * K);
    assert_int_equal(stats(m).largest_free, 100 * K);
    release_ok(m, 2);
    assert_empty(m);
    sl_mem_mgr_destroy(m);

    /* the leaving session owned blocks too: its holes (50K each) cannot
     * take the shrunk lane, so it shrinks in place, and the rebuild must not
     * resurrect the blocks just freed */
    m = mgr_new(1024 * K, 0, 0, 64 * K);
    l1 = admit_ok(m, 1, 0, 200 * K);
    assert_int_equal(admit_ok(m, 2, 0, 100 * K), l1);
    assert_int_equal(alloc_ok(m, 1, 50 * K), 200 * K);
    assert_int_equal(alloc_ok(m, 2, 100 * K), 250 * K);
    assert_int_equal(alloc_ok(m, 1, 50 * K), 350 * K);
    assert_int_equal(alloc_ok(m, 2, 624 * K), 400 * K);
    release_ok(m, 1);
    li = lane_info(m, l1);
    assert_int_equal(li.base, 0);
    assert_int_equal(li.size, 100 * K);
    assert_int_equal(stats(m).free, 200 * K);
    assert_int_equal(stats(m).largest_free, 150 * K);
    release_ok(m, 2);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Every host allocation in an admission that needs a compaction fails in
 * turn: each failure is SL_ENOMEM with nothing changed. */
static void test_host_alloc_failure(void **state)
{
    (void) state;
    bool succeeded = false;
    for (long n = 1; n < 200 && !succeeded; n++) {
        struct holes h = make_holes();
        sl_mem_stats before = stats(h.m);
        sl_alloc_fail_after(n);
        uint32_t lane = 0;
        int rc = sl_mem_admit(h.m, 5, 0, 280 * K, false, NULL, &lane);
        sl_alloc_fail_after(0);
        assert_sl_ok(sl_mem_check(h.m));
        if (rc == SL_OK) {
            succeeded = true;
        } else {
            assert_int_equal(rc, SL_ENOMEM);
            sl_mem_stats after = stats(h.m);
            assert_int_equal(after.lanes, before.lanes);
            assert_int_equal(after.n_lanes, before.n_lanes);
            assert_int_equal(after.n_sessions, before.n_sessions);
            assert_int_equal(after.largest_free, before.largest_free);
            assert_int_equal(lane_info(h.m, h.l2).base, 100 * K);
        }
        sl_mem_mgr_destroy(h.m);
    }
    assert_true(succeeded);

    /* allocations and set_ephemeral under failure */
    sl_mem_mgr *m = mgr_new(M, 0, 0, 64 * K);
    admit_ok(m, 1, 0, 0);
    uint64_t addr;
    sl_alloc_fail_after(1);
    assert_sl_err(sl_mem_alloc(m, 1, 4096, &addr, NULL), SL_ENOMEM);
    assert_sl_err(sl_mem_admit(m, 2, 0, 0, true, NULL, NULL), SL_ENOMEM);
    sl_alloc_fail_after(0);
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(stats(m).persistent_used, 0);
    assert_int_equal(stats(m).n_sessions, 1);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

int test_manager_layout_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fragmentation_persistent_in_the_way, reset_alloc_failures),
        cmocka_unit_test_teardown(test_fragmentation_compaction_helps, reset_alloc_failures),
        cmocka_unit_test_teardown(test_busy_lanes_untouched, reset_alloc_failures),
        cmocka_unit_test_teardown(test_persistent_regions, reset_alloc_failures),
        cmocka_unit_test_teardown(test_shrink_in_place, reset_alloc_failures),
        cmocka_unit_test_teardown(test_host_alloc_failure, reset_alloc_failures),
    };
    return cmocka_run_group_tests_name("memory/manager_layout", tests, NULL, NULL);
}
