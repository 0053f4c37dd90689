/* Hand-written cases for the memory manager: quota and capacity refusals,
 * lane sharing, creation, reclaim and resizing, set_ephemeral, the admission
 * queue and its bypass bound. Every step is followed by sl_mem_check.
 * Layout cases (fragmentation, compaction, busy lanes, regions) are in
 * test_manager_layout.c, the randomised property test in
 * test_manager_prop.c. */
#include <stdlib.h>
#include <string.h>

#include "test_manager.h"
#include "test_memory.h"

/* ---- tests ---- */

static void test_create_and_args(void **state)
{
    (void) state;
    sl_mem_mgr *m = (sl_mem_mgr *) 0x1;
    sl_mem_config cfg = {.capacity = 0};
    assert_sl_err(sl_mem_mgr_create(&cfg, &m), SL_EINVAL);
    cfg.capacity = 1000;
    assert_sl_err(sl_mem_mgr_create(&cfg, &m), SL_EINVAL);
    cfg =
        (sl_mem_config){.capacity = M, .framework_per_lane = 512 * K, .default_ephemeral = 600 * K};
    assert_sl_err(sl_mem_mgr_create(&cfg, &m), SL_EINVAL);
    assert_sl_err(sl_mem_mgr_create(NULL, &m), SL_EINVAL);
    assert_true(m == (sl_mem_mgr *) 0x1);
    sl_mem_mgr_destroy(NULL);

    assert_string_equal(sl_mem_reason_name(SL_MEM_FITS), "fits");
    assert_string_equal(sl_mem_reason_name(SL_MEM_QUOTA), "quota");
    assert_string_equal(sl_mem_reason_name(SL_MEM_CAPACITY), "capacity");
    assert_string_equal(sl_mem_reason_name(SL_MEM_FRAGMENTATION), "fragmentation");
    assert_string_equal(sl_mem_reason_name(99), "unknown");

    m = mgr_new(M, 0, 0, 64 * K);
    assert_empty(m);
    assert_sl_err(sl_mem_admit(m, 0, 0, 0, false, NULL, NULL), SL_EINVAL);
    admit_ok(m, 1, 0, 0);
    assert_sl_err(sl_mem_admit(m, 1, 0, 0, false, NULL, NULL), SL_EINVAL);
    /* queued ids are in use too */
    admit_ok(m, 2, 900 * K, 0);
    assert_int_equal(admit_refused(m, 3, 200 * K, 0, true), SL_MEM_CAPACITY);
    assert_sl_err(sl_mem_admit(m, 3, 0, 0, false, NULL, NULL), SL_EINVAL);
    /* the default ephemeral is what a session that declares 0 gets */
    assert_int_equal(session_info(m, 1).need, 64 * K);
    uint64_t addr;
    assert_sl_err(sl_mem_alloc(m, 3, 256, &addr, NULL), SL_ENOTFOUND);
    assert_sl_err(sl_mem_alloc(m, 9, 256, &addr, NULL), SL_ENOTFOUND);
    assert_sl_err(sl_mem_alloc(m, 1, 0, &addr, NULL), SL_EINVAL);
    assert_sl_err(sl_mem_set_ephemeral(m, 3, 1, NULL, NULL), SL_ENOTFOUND);
    assert_sl_err(sl_mem_lane_get(m, 99, &(sl_mem_lane_info){0}), SL_ENOTFOUND);
    assert_sl_err(sl_mem_session_get(m, 99, &(sl_mem_session_info){0}), SL_ENOTFOUND);
    sl_mem_release(m, 12345); /* unknown: ignored */
    sl_mem_lane_busy(m, 999);
    sl_mem_lane_idle(m, 999);
    release_ok(m, 3);
    release_ok(m, 2);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

static void test_quota(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 256 * K, 16 * K, 64 * K);
    /* P + E over the session quota: refused, and never queued */
    assert_int_equal(admit_refused(m, 1, 200 * K, 100 * K, true), SL_MEM_QUOTA);
    assert_int_equal(admit_refused(m, 2, 0, 300 * K, true), SL_MEM_QUOTA);
    assert_int_equal(stats(m).n_queued, 0);
    assert_sl_err(sl_mem_session_get(m, 1, &(sl_mem_session_info){0}), SL_ENOTFOUND);
    assert_int_equal(admit_refused(m, 2, UINT64_MAX, 1, false), SL_MEM_QUOTA);

    /* a declared P bounds the session's allocations */
    admit_ok(m, 3, 100 * K, 100 * K);
    alloc_ok(m, 3, 60 * K);
    uint64_t b = alloc_ok(m, 3, 40 * K);
    assert_int_equal(alloc_refused(m, 3, 1), SL_MEM_QUOTA);
    assert_sl_ok(sl_mem_free(m, 3, b));
    alloc_ok(m, 3, 1); /* charged 256 */
    assert_int_equal(session_info(m, 3).used, 60 * K + 256);
    assert_int_equal(alloc_refused(m, 3, 2 * M), SL_MEM_QUOTA);

    /* P = 0: used + need stays within the quota */
    admit_ok(m, 4, 0, 100 * K);
    alloc_ok(m, 4, 150 * K);
    assert_int_equal(alloc_refused(m, 4, 8 * K), SL_MEM_QUOTA);
    alloc_ok(m, 4, 6 * K);
    int reason = -1;
    assert_sl_err(sl_mem_set_ephemeral(m, 4, 110 * K, NULL, &reason), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    /* a peak above the declared E is fine within the quota */
    set_eph_ok(m, 3, 156 * K);
    assert_int_equal(session_info(m, 3).need, 156 * K);
    assert_sl_err(sl_mem_set_ephemeral(m, 3, 157 * K, NULL, &reason), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    assert_int_equal(session_info(m, 3).peak, 156 * K);
    release_ok(m, 3);
    release_ok(m, 4);
    assert_empty(m);
    sl_mem_mgr_destroy(m);

    /* no session quota: the whole capacity is the limit */
    m = mgr_new(M, 0, 16 * K, 64 * K);
    assert_int_equal(admit_refused(m, 1, 512 * K, 512 * K, true), SL_MEM_QUOTA);
    admit_ok(m, 1, 512 * K, 512 * K - 16 * K);
    release_ok(m, 1);
    sl_mem_mgr_destroy(m);
}

static void test_capacity(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 0, 0, 64 * K);
    uint32_t l1 = admit_ok(m, 1, 512 * K, 256 * K);
    /* sharing the lane costs B only its persistent memory: exactly full */
    assert_int_equal(admit_ok(m, 2, 256 * K, 256 * K), l1);
    assert_int_equal(stats(m).n_lanes, 1);
    assert_int_equal(stats(m).persistent_reserved + stats(m).lanes, M);

    assert_int_equal(admit_refused(m, 3, 256, 64 * K, false), SL_MEM_CAPACITY);
    assert_sl_err(sl_mem_session_get(m, 3, &(sl_mem_session_info){0}), SL_ENOTFOUND);
    assert_int_equal(admit_refused(m, 3, 256, 64 * K, true), SL_MEM_CAPACITY);
    sl_mem_session_info si = session_info(m, 3);
    assert_true(si.queued);
    assert_int_equal(si.lane, 0);
    assert_int_equal(si.reason, SL_MEM_CAPACITY);
    sl_mem_session_info q[4];
    assert_int_equal(sl_mem_queue(m, q, 4), 1);
    assert_int_equal(q[0].id, 3);

    /* P = 0 reserves nothing, so it is admitted; its first byte breaks the
     * rule */
    assert_int_equal(admit_ok(m, 4, 0, 64 * K), l1);
    assert_int_equal(alloc_refused(m, 4, 1), SL_MEM_CAPACITY);
    assert_false(sl_mem_next_admitted(m, NULL, NULL));

    release_ok(m, 2);
    uint32_t lane = 0;
    assert_int_equal(next_admitted(m, &lane), 3);
    assert_int_equal(lane, l1);
    assert_false(sl_mem_next_admitted(m, NULL, NULL));
    assert_false(session_info(m, 3).queued);
    release_ok(m, 1);
    release_ok(m, 3);
    release_ok(m, 4);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* SymbioticLab/Salus#27: a second job could practically never join a lane.
 * Here every session whose need fits shares the one lane. */
static void test_lane_sharing(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(16 * M, 0, M, 64 * K);
    uint32_t l1 = admit_ok(m, 1, M, 256 * K);
    const uint64_t peaks[] = {100 * K, 256 * K, 1, 200 * K};
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(admit_ok(m, 2 + i, M, peaks[i]), l1);
    sl_mem_lane_busy(m, l1); /* a running lane takes new members too */
    assert_int_equal(admit_ok(m, 6, M, 128 * K), l1);
    sl_mem_stats st = stats(m);
    assert_int_equal(st.n_lanes, 1);
    assert_int_equal(st.n_sessions, 6);
    assert_int_equal(st.lanes, 256 * K);
    assert_int_equal(st.framework, M);
    sl_mem_lane_info li = lane_info(m, l1);
    assert_int_equal(li.n_sessions, 6);
    assert_int_equal(li.size, 256 * K);
    assert_int_equal(li.max_peak, 256 * K);
    assert_int_equal(li.framework, M);
    assert_int_equal(li.base, li.framework_base + M);

    /* a session that fits no lane gets a new one of exactly its need */
    uint32_t l2 = admit_ok(m, 7, M, 512 * K);
    assert_int_not_equal(l2, l1);
    assert_int_equal(lane_info(m, l2).size, 512 * K);
    /* both fit: the lane with fewer sessions wins */
    assert_int_equal(admit_ok(m, 8, M, 128 * K), l2);
    sl_mem_lane_info lanes[4];
    assert_int_equal(sl_mem_lanes(m, lanes, 4), 2);
    assert_int_equal(lanes[0].id, l1);
    assert_int_equal(lanes[1].id, l2);
    assert_int_equal(sl_mem_lanes(m, NULL, 0), 2);

    /* the 256K sessions leave: the busy lane keeps its size until idle */
    release_ok(m, 1);
    release_ok(m, 3);
    assert_int_equal(lane_info(m, l1).max_peak, 200 * K);
    assert_int_equal(lane_info(m, l1).size, 256 * K);
    sl_mem_lane_idle(m, l1);
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(lane_info(m, l1).size, 200 * K);
    for (uint64_t id = 2; id <= 8; id++)
        release_ok(m, id);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

static void test_lane_reclaim(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(4 * M, 0, 64 * K, 64 * K);
    uint32_t l1 = admit_ok(m, 1, 0, 100 * K);
    uint32_t l2 = admit_ok(m, 2, 0, 200 * K);
    assert_int_equal(lane_info(m, l1).framework_base, 0);
    assert_int_equal(lane_info(m, l1).base, 64 * K);
    assert_int_equal(lane_info(m, l2).framework_base, 164 * K);
    release_ok(m, 2);
    assert_sl_err(sl_mem_lane_get(m, l2, &(sl_mem_lane_info){0}), SL_ENOTFOUND);
    assert_int_equal(stats(m).n_lanes, 1);

    /* a busy lane that loses its last session stays until it goes idle */
    sl_mem_lane_info gone = lane_info(m, l1);
    uint32_t l3 = admit_ok(m, 3, 0, 300 * K);
    assert_int_equal(l3, l2);                           /* the lowest free id is reused ... */
    assert_true(lane_info(m, l3).serial > gone.serial); /* ... serials are not */
    sl_mem_lane_busy(m, l3);
    release_ok(m, 3);
    sl_mem_lane_info li = lane_info(m, l3);
    assert_int_equal(li.n_sessions, 0);
    assert_int_equal(li.size, 300 * K);
    assert_int_equal(stats(m).n_lanes, 2);
    sl_mem_lane_idle(m, l3);
    assert_sl_ok(sl_mem_check(m));
    assert_sl_err(sl_mem_lane_get(m, l3, &li), SL_ENOTFOUND);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

static void test_set_ephemeral(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(4 * M, 0, 64 * K, 128 * K);
    uint32_t l1 = admit_ok(m, 1, 0, 0);
    assert_int_equal(lane_info(m, l1).size, 128 * K);
    /* a declared 0 is a placeholder: the real peak replaces it */
    assert_int_equal(set_eph_ok(m, 1, 10 * K), l1);
    assert_int_equal(lane_info(m, l1).size, 10 * K);
    assert_int_equal(session_info(m, 1).peak, 10 * K);
    /* alone and idle: the lane grows */
    assert_int_equal(set_eph_ok(m, 1, 300 * K), l1);
    assert_int_equal(lane_info(m, l1).size, 300 * K);

    assert_int_equal(admit_ok(m, 2, 0, 100 * K), l1);
    uint32_t l2 = admit_ok(m, 3, 0, 400 * K);
    assert_int_not_equal(l2, l1);
    /* outgrows L1 while L2 fits: moves, free of charge */
    uint64_t lanes_before = stats(m).lanes;
    assert_int_equal(set_eph_ok(m, 2, 350 * K), l2);
    assert_int_equal(stats(m).lanes, lanes_before);
    assert_int_equal(lane_info(m, l1).n_sessions, 1);
    assert_int_equal(lane_info(m, l2).n_sessions, 2);
    /* outgrows every lane: its shared lane grows */
    assert_int_equal(set_eph_ok(m, 2, 500 * K), l2);
    assert_int_equal(lane_info(m, l2).size, 500 * K);

    /* busy: fine while it fits, EBUSY when the lane would have to change */
    sl_mem_lane_busy(m, l2);
    assert_int_equal(set_eph_ok(m, 3, 450 * K), l2);
    int reason = -1;
    assert_sl_err(sl_mem_set_ephemeral(m, 3, 600 * K, NULL, &reason), SL_EBUSY);
    assert_int_equal(session_info(m, 3).peak, 450 * K);
    assert_int_equal(lane_info(m, l2).size, 500 * K);
    sl_mem_lane_idle(m, l2);
    assert_int_equal(set_eph_ok(m, 3, 600 * K), l2);
    assert_int_equal(lane_info(m, l2).size, 600 * K);
    /* a declared E stays guaranteed: a lower peak keeps need = E (400K),
     * and the lane shrinks to its largest need (session 2's 500K) */
    assert_int_equal(set_eph_ok(m, 3, 10 * K), l2);
    assert_int_equal(session_info(m, 3).need, 400 * K);
    assert_int_equal(lane_info(m, l2).size, 500 * K);

    /* capacity: the arena cannot hold the growth */
    assert_sl_err(sl_mem_set_ephemeral(m, 1, 3584 * K, NULL, &reason), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_CAPACITY);
    assert_int_equal(lane_info(m, l1).size, 300 * K);
    assert_sl_err(sl_mem_set_ephemeral(m, 1, 5 * M, NULL, &reason), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    for (uint64_t id = 1; id <= 3; id++)
        release_ok(m, id);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Sessions that do not fit wait; the queue admits in arrival order, and a
 * later one only when it fits while an earlier one does not. */
static void test_queue_order(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 768 * K, 128 * K);
    assert_int_equal(admit_refused(m, 2, 512 * K, 128 * K, true), SL_MEM_CAPACITY);
    assert_int_equal(admit_refused(m, 3, 512 * K, 128 * K, true), SL_MEM_CAPACITY);
    assert_int_equal(admit_refused(m, 4, 256 * K, 128 * K, true), SL_MEM_CAPACITY);
    sl_mem_session_info q[4];
    assert_int_equal(sl_mem_queue(m, q, 4), 3);
    assert_int_equal(q[0].id, 2);
    assert_int_equal(q[1].id, 3);
    assert_int_equal(q[2].id, 4);
    assert_int_equal(sl_mem_queue(m, q, 1), 3);

    release_ok(m, 1);
    assert_int_equal(next_admitted(m, NULL), 2);
    assert_int_equal(next_admitted(m, NULL), 4); /* 3 still does not fit */
    assert_false(sl_mem_next_admitted(m, NULL, NULL));
    assert_int_equal(stats(m).n_queued, 1);
    /* a queued session can leave */
    release_ok(m, 3);
    assert_int_equal(stats(m).n_queued, 0);
    assert_int_equal(admit_refused(m, 3, 512 * K, 128 * K, true), SL_MEM_CAPACITY);
    release_ok(m, 2);
    assert_int_equal(next_admitted(m, NULL), 3);
    release_ok(m, 3);
    release_ok(m, 4);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Waits for admission under sl_mem_admit_ranked. */
static int wait_ranked(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t rank)
{
    int reason = -1;
    uint32_t lane = 0;
    int rc = sl_mem_admit_ranked(m, id, p, 64 * K, SL_MEM_ADMIT_WAIT, rank, &reason, &lane);
    assert_sl_ok(sl_mem_check(m));
    return rc == SL_OK ? SL_MEM_FITS : reason;
}

/* A ranked queue: waiting sessions go in by rank, equal ranks in arrival
 * order, a new rank moves a waiting session; only sessions ranked behind a
 * waiting one count as bypassing it, so the bound never stops one ranked
 * before it. sl_mem_check verifies the queue's order after every step. */
static void test_ranked_queue(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 900 * K, 64 * K);
    assert_int_equal(wait_ranked(m, 2, 600 * K, 30), SL_MEM_CAPACITY);
    assert_int_equal(wait_ranked(m, 3, 600 * K, 10), SL_MEM_CAPACITY);
    assert_int_equal(wait_ranked(m, 4, 600 * K, 20), SL_MEM_CAPACITY);
    assert_int_equal(wait_ranked(m, 5, 600 * K, 10), SL_MEM_CAPACITY);
    sl_mem_session_info q[4];
    assert_int_equal(sl_mem_queue(m, q, 4), 4);
    assert_int_equal(q[0].id, 3);
    assert_int_equal(q[1].id, 5);
    assert_int_equal(q[2].id, 4);
    assert_int_equal(q[3].id, 2);

    release_ok(m, 1);
    assert_int_equal(next_admitted(m, NULL), 3);
    assert_false(sl_mem_next_admitted(m, NULL, NULL));
    assert_int_equal(sl_mem_set_rank(m, 2, 5), SL_OK); /* a change of policy */
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(sl_mem_set_rank(m, 99, 5), SL_ENOTFOUND);
    release_ok(m, 3);
    assert_int_equal(next_admitted(m, NULL), 2);
    release_ok(m, 2);
    assert_int_equal(next_admitted(m, NULL), 5);
    release_ok(m, 5);
    assert_int_equal(next_admitted(m, NULL), 4);

    /* 4 holds 600K; 6 waits at rank 50; small sessions ranked behind it
     * bypass it SL_MEM_MAX_BYPASS times, then wait; one ranked before it
     * still goes in */
    assert_int_equal(wait_ranked(m, 6, 600 * K, 50), SL_MEM_CAPACITY);
    int bypasses = 0;
    for (uint64_t id = 10; id < 20; id++) {
        int r = wait_ranked(m, id, 32 * K, 100);
        if (r == SL_MEM_FITS) {
            bypasses++;
            release_ok(m, id);
        } else {
            assert_int_equal(r, SL_MEM_CAPACITY);
        }
    }
    assert_int_equal(bypasses, SL_MEM_MAX_BYPASS);
    assert_int_equal(wait_ranked(m, 30, 32 * K, 40), SL_MEM_FITS);
    release_ok(m, 30);
    release_ok(m, 4);
    assert_int_equal(next_admitted(m, NULL), 6);
    for (uint64_t id = 10 + SL_MEM_MAX_BYPASS; id < 20; id++)
        assert_int_equal(next_admitted(m, NULL), id);
    release_ok(m, 6);
    for (uint64_t id = 10 + SL_MEM_MAX_BYPASS; id < 20; id++)
        release_ok(m, id);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Ranks cannot starve a waiting session: later arrivals ranked before it
 * overtake it SL_MEM_MAX_OVERTAKEN times, then it is at the front and the
 * bypass bound holds the rest back until it gets in. */
static void test_overtaken_goes_first(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 900 * K, 64 * K);
    assert_int_equal(wait_ranked(m, 2, 600 * K, UINT64_MAX), SL_MEM_CAPACITY);
    enum { LAST = 100 + SL_MEM_MAX_OVERTAKEN + SL_MEM_MAX_BYPASS + 4 };
    int in = 0;
    for (uint64_t id = 100; id < LAST; id++) {
        if (wait_ranked(m, id, 32 * K, 1) == SL_MEM_FITS) {
            in++;
            release_ok(m, id);
        }
    }
    assert_int_equal(in, SL_MEM_MAX_OVERTAKEN + SL_MEM_MAX_BYPASS);
    sl_mem_session_info q[1];
    assert_int_equal(sl_mem_queue(m, q, 1), LAST - 100 - in + 1);
    assert_int_equal(q[0].id, 2);
    assert_int_equal(sl_mem_set_rank(m, 2, UINT64_MAX), SL_OK); /* it stays first */
    assert_int_equal(sl_mem_queue(m, q, 1), LAST - 100 - in + 1);
    assert_int_equal(q[0].id, 2);
    release_ok(m, 1);
    assert_int_equal(next_admitted(m, NULL), 2);
    for (uint64_t id = 100 + (uint64_t) in; id < LAST; id++)
        assert_int_equal(next_admitted(m, NULL), id);
    release_ok(m, 2);
    for (uint64_t id = 100 + (uint64_t) in; id < LAST; id++)
        release_ok(m, id);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* A large session waits while a stream of small ones arrives: at most
 * SL_MEM_MAX_BYPASS of them get in before it. */
static void test_no_starvation(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 900 * K, 64 * K);
    assert_int_equal(admit_refused(m, 2, 512 * K, 64 * K, true), SL_MEM_CAPACITY);
    int bypasses = 0;
    for (uint64_t id = 10; id < 30; id++) {
        int reason = -1;
        uint32_t lane = 0;
        int rc = sl_mem_admit(m, id, 32 * K, 64 * K, true, &reason, &lane);
        assert_sl_ok(sl_mem_check(m));
        if (rc == SL_OK) {
            bypasses++;
            release_ok(m, id); /* it ran and left: the memory is free again */
        } else {
            assert_int_equal(rc, SL_EEXHAUSTED);
            assert_int_equal(reason, SL_MEM_CAPACITY);
        }
    }
    assert_int_equal(bypasses, SL_MEM_MAX_BYPASS);
    assert_int_equal(stats(m).n_queued, 1 + 20 - SL_MEM_MAX_BYPASS);
    /* a small one would fit the rule, but the memory is kept for session 2 */
    assert_true(stats(m).persistent_reserved + 32 * K + stats(m).lanes <= 1024 * K);

    release_ok(m, 1);
    assert_int_equal(next_admitted(m, NULL), 2);
    for (uint64_t id = 10 + SL_MEM_MAX_BYPASS; id < 30; id++)
        assert_int_equal(next_admitted(m, NULL), id);
    assert_false(sl_mem_next_admitted(m, NULL, NULL));
    release_ok(m, 2);
    for (uint64_t id = 10 + SL_MEM_MAX_BYPASS; id < 30; id++)
        release_ok(m, id);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Growing an idle lane costs need - size where a new lane costs need +
 * framework: when only the first fits the rule, the session shares the
 * grown lane. */
static void test_grow_instead_of_new_lane(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(1024 * K, 0, 256 * K, 64 * K);
    uint32_t l1 = admit_ok(m, 1, 400 * K, 100 * K);
    /* new lane: 756K + 200K + 256K > 1024K; growth: 756K + 100K fits */
    assert_int_equal(admit_ok(m, 2, 0, 200 * K), l1);
    assert_int_equal(lane_info(m, l1).size, 200 * K);
    assert_int_equal(stats(m).n_lanes, 1);
    release_ok(m, 2);
    assert_int_equal(lane_info(m, l1).size, 100 * K);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* High-priority sessions get a lane of their own: nobody joins it, and
 * they never join a shared one. */
static void test_exclusive_lanes(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 0, 0, 64 * K);
    uint32_t shared, own, other;
    admit_ok(m, 1, 0, 64 * K);
    assert_sl_ok(sl_mem_session_get(m, 1, &(sl_mem_session_info){0}));
    shared = session_info(m, 1).lane;
    assert_sl_ok(sl_mem_admit_ex(m, 2, 0, 32 * K, SL_MEM_ADMIT_EXCLUSIVE, NULL, &own));
    assert_int_not_equal(own, shared); /* it would have fit the shared lane */
    assert_sl_ok(sl_mem_admit_ex(m, 3, 0, 16 * K, 0, NULL, &other));
    assert_int_equal(other, shared); /* a plain session shares, never the exclusive one */
    assert_sl_ok(sl_mem_check(m));
    /* growing the exclusive session keeps it alone */
    uint32_t lane;
    assert_sl_ok(sl_mem_set_ephemeral(m, 2, 48 * K, &lane, NULL));
    assert_int_equal(session_info(m, 2).lane, lane);
    sl_mem_lane_info info;
    assert_sl_ok(sl_mem_lane_get(m, lane, &info));
    assert_int_equal(info.n_sessions, 1);
    release_ok(m, 2);
    assert_sl_err(sl_mem_lane_get(m, lane, &info), SL_ENOTFOUND); /* reclaimed */
    release_ok(m, 3);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Space sharing while memory is plentiful, time sharing beyond the limit. */
static void test_spread_then_share(void **state)
{
    (void) state;
    sl_mem_config cfg = {.capacity = M, .default_ephemeral = 64 * K, .spread_limit = M / 2};
    sl_mem_mgr *m = NULL;
    assert_sl_ok(sl_mem_mgr_create(&cfg, &m));
    uint32_t a, b, c;
    assert_sl_ok(sl_mem_admit(m, 1, 100 * K, 64 * K, false, NULL, &a));
    assert_sl_ok(sl_mem_admit(m, 2, 100 * K, 64 * K, false, NULL, &b));
    assert_int_not_equal(a, b); /* plenty of memory: a lane each */
    assert_sl_ok(sl_mem_admit(m, 3, 200 * K, 64 * K, false, NULL, &c));
    assert_true(c == a || c == b); /* past half the device: it shares */
    assert_sl_ok(sl_mem_check(m));
    release_ok(m, 3);
    release_ok(m, 2);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* Lanes made and reclaimed many times: ids are reused lowest first, so they
 * stay below the most lanes alive at once, while every new lane gets a new
 * serial. Tables indexed by lane id (the scheduler's, the server's) then
 * stay that small too. */
static void test_lane_id_reuse(void **state)
{
    (void) state;
    enum { LIVE = 5, ROUNDS = 2000 };
    sl_mem_mgr *m = mgr_new(4 * M, 0, 16 * K, 64 * K);
    uint64_t ids[LIVE] = {0};
    uint64_t next_id = 1, last_serial = 0;
    uint32_t max_lane = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int k = round % LIVE;
        if (ids[k])
            release_ok(m, ids[k]); /* its lane goes with it */
        ids[k] = next_id++;
        uint32_t lane;
        assert_sl_ok(sl_mem_admit_ex(m, ids[k], 0, 32 * K, SL_MEM_ADMIT_EXCLUSIVE, NULL, &lane));
        assert_sl_ok(sl_mem_check(m));
        sl_mem_lane_info li = lane_info(m, lane);
        assert_true(li.serial > last_serial);
        last_serial = li.serial;
        if (lane > max_lane)
            max_lane = lane;
        assert_int_equal(stats(m).n_lanes, round < LIVE ? round + 1 : LIVE);
    }
    assert_int_equal(max_lane, LIVE);
    /* the lowest free id first, also when it is not the last one freed */
    uint32_t freed_a = session_info(m, ids[3]).lane, freed_b = session_info(m, ids[1]).lane;
    release_ok(m, ids[3]);
    release_ok(m, ids[1]);
    uint32_t lane;
    assert_sl_ok(sl_mem_admit_ex(m, next_id++, 0, 32 * K, SL_MEM_ADMIT_EXCLUSIVE, NULL, &lane));
    assert_int_equal(lane, freed_a < freed_b ? freed_a : freed_b);
    sl_mem_lane_info all[LIVE];
    assert_int_equal(sl_mem_lanes(m, all, LIVE), LIVE - 1);
    for (size_t i = 1; i < LIVE - 1; i++)
        assert_true(all[i - 1].id < all[i].id); /* still ascending */
    for (int k = 0; k < LIVE; k++)
        if (k != 1 && k != 3)
            release_ok(m, ids[k]);
    release_ok(m, next_id - 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

static void test_free_errors(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 0, 0, 64 * K);
    admit_ok(m, 1, 0, 0);
    admit_ok(m, 2, 0, 0);
    uint64_t a = alloc_ok(m, 1, 1000);
    assert_sl_err(sl_mem_free(m, 2, a), SL_EINVAL);
    assert_sl_err(sl_mem_free(m, 1, a + 256), SL_EINVAL);
    assert_sl_err(sl_mem_free(m, 1, UINT64_MAX), SL_EINVAL);
    assert_sl_err(sl_mem_free(m, 3, a), SL_ENOTFOUND);
    assert_sl_ok(sl_mem_free(m, 1, a));
    assert_sl_err(sl_mem_free(m, 1, a), SL_EINVAL);
    /* release frees every block */
    for (int i = 0; i < 20; i++)
        alloc_ok(m, 2, 4096 + (uint64_t) i);
    release_ok(m, 2);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* A session's own framework charge (graph memory the device allocates
 * outside the arena): counted in the rule and against the quota, rounded
 * up as a whole, given back exactly, and gone with the session. Session 1
 * declares no P, so none of it is held in a region (see
 * test_framework_in_region for that). */
static void test_framework_charge(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 256 * K, 16 * K, 64 * K);
    admit_ok(m, 1, 0, 64 * K);
    sl_mem_stats before = stats(m);
    int reason = -1;
    assert_sl_ok(sl_mem_charge_framework(m, 1, 1000, &reason, NULL));
    assert_int_equal(reason, SL_MEM_FITS);
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(session_info(m, 1).framework, 1024);
    assert_int_equal(stats(m).framework, before.framework + 1024);
    assert_int_equal(stats(m).framework_sessions, 1024);
    assert_int_equal(stats(m).free, before.free - 1024);
    assert_true(stats(m).largest_free <= stats(m).free);
    /* summed exactly, rounded as a whole */
    assert_sl_ok(sl_mem_charge_framework(m, 1, 24, NULL, NULL));
    assert_int_equal(session_info(m, 1).framework, 1024);
    assert_sl_ok(sl_mem_charge_framework(m, 1, 1, NULL, NULL));
    assert_int_equal(session_info(m, 1).framework, 1280);
    sl_mem_uncharge_framework(m, 1, 1);
    assert_int_equal(session_info(m, 1).framework, 1024);
    sl_mem_uncharge_framework(m, 1, 1024);
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(stats(m).free, before.free);
    assert_int_equal(stats(m).framework, before.framework);
    sl_mem_uncharge_framework(m, 1, 5); /* more than it holds: nothing below 0 */
    assert_int_equal(session_info(m, 1).framework, 0);

    /* the quota: the charge + its need */
    assert_sl_ok(sl_mem_charge_framework(m, 1, 192 * K, NULL, NULL));
    assert_sl_err(sl_mem_charge_framework(m, 1, 1, &reason, NULL), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    assert_int_equal(session_info(m, 1).framework, 192 * K);
    assert_sl_err(sl_mem_charge_framework(m, 1, UINT64_MAX, &reason, NULL), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    assert_sl_ok(sl_mem_check(m));
    /* without a declared P, allocations and a larger need count it too */
    admit_ok(m, 2, 0, 0);
    assert_sl_ok(sl_mem_charge_framework(m, 2, 100 * K, NULL, NULL));
    alloc_ok(m, 2, 92 * K);
    assert_int_equal(alloc_refused(m, 2, 1), SL_MEM_QUOTA);
    assert_sl_err(sl_mem_set_ephemeral(m, 2, 65 * K, NULL, &reason), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    assert_sl_ok(sl_mem_check(m));

    /* unknown and released sessions */
    assert_sl_err(sl_mem_charge_framework(m, 9, 1, NULL, NULL), SL_ENOTFOUND);
    assert_sl_err(sl_mem_charge_framework(NULL, 1, 1, NULL, NULL), SL_EINVAL);
    sl_mem_uncharge_framework(m, 9, 1);
    sl_mem_uncharge_framework(NULL, 1, 1);
    release_ok(m, 2);
    release_ok(m, 1);
    assert_sl_err(sl_mem_charge_framework(m, 1, 1, NULL, NULL), SL_ENOTFOUND);
    sl_mem_uncharge_framework(m, 1, 1024); /* its charge went with it */
    assert_empty(m);
    sl_mem_mgr_destroy(m);

    /* capacity: a charge that breaks the rule is refused, and giving one
     * back admits who waits for it */
    m = mgr_new(256 * K, 0, 0, 64 * K);
    admit_ok(m, 1, 64 * K, 64 * K);
    admit_ok(m, 3, 0, 0); /* shares 1's lane */
    assert_sl_ok(sl_mem_charge_framework(m, 3, 128 * K, NULL, NULL));
    assert_int_equal(stats(m).free, 0);
    assert_int_equal(stats(m).largest_free, 0);
    assert_sl_err(sl_mem_charge_framework(m, 3, 1, &reason, NULL), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_CAPACITY);
    assert_int_equal(session_info(m, 3).framework, 128 * K);
    assert_int_equal(admit_refused(m, 2, 0, 65 * K, true), SL_MEM_CAPACITY);
    sl_mem_uncharge_framework(m, 3, 64 * K);
    assert_sl_ok(sl_mem_check(m));
    assert_int_equal(next_admitted(m, NULL), 2);
    release_ok(m, 3);
    release_ok(m, 1);
    release_ok(m, 2);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* session's framework charge, stated as what its region holds and what
 * it holds outside */
static void assert_split(sl_mem_mgr *m, uint64_t id, uint64_t in_region, uint64_t outside)
{
    sl_mem_session_info si = session_info(m, id);
    assert_int_equal(si.framework_region, in_region);
    assert_int_equal(si.framework_outside, outside);
    assert_sl_ok(sl_mem_check(m));
}

/* A charge to a session with a region is held there first, in the bytes
 * its tensors do not use, and those bytes are then taken from its
 * tensors; the rest is reported outside (before and by the charge). The
 * rule counts only the part outside: the region's bytes stand for the
 * rest, so the arena's free bytes do not move for it. Giving back takes
 * from outside first, and the region's bytes come back to its tensors. */
static void test_framework_in_region(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 0, 16 * K, 64 * K);
    admit_ok(m, 1, 64 * K, 64 * K);
    alloc_ok(m, 1, 16 * K);
    sl_mem_stats before = stats(m);
    /* within the region's 48K headroom: nothing outside */
    assert_int_equal(sl_mem_framework_outside(m, 1, 40 * K), 0);
    uint64_t outside = 777;
    assert_sl_ok(sl_mem_charge_framework(m, 1, 40 * K, NULL, &outside));
    assert_int_equal(outside, 0);
    assert_split(m, 1, 40 * K, 0);
    assert_int_equal(stats(m).free, before.free);
    assert_int_equal(stats(m).framework_sessions, 0);
    /* its tensors now have 64K - 16K - 40K */
    assert_int_equal(alloc_refused(m, 1, 8 * K + 1), SL_MEM_QUOTA);
    uint64_t a = alloc_ok(m, 1, 8 * K);
    assert_int_equal(alloc_refused(m, 1, 1), SL_MEM_QUOTA);
    assert_sl_ok(sl_mem_free(m, 1, a));
    assert_sl_ok(sl_mem_check(m));
    /* beyond the headroom: 8K in the region, the rest outside, as asked
     * before the charge */
    assert_int_equal(sl_mem_framework_outside(m, 1, 20 * K + 100), 12 * K + 100);
    assert_sl_ok(sl_mem_charge_framework(m, 1, 20 * K + 100, NULL, &outside));
    assert_int_equal(outside, 12 * K + 100);
    assert_split(m, 1, 48 * K, 12 * K + 100);
    assert_int_equal(session_info(m, 1).framework, 60 * K + 256);
    assert_int_equal(alloc_refused(m, 1, 1), SL_MEM_QUOTA);
    assert_int_equal(sl_mem_framework_outside(m, 1, 5), 5);
    /* giving back: outside first */
    sl_mem_uncharge_framework(m, 1, 12 * K);
    assert_split(m, 1, 48 * K, 100);
    sl_mem_uncharge_framework(m, 1, 4 * K);
    assert_split(m, 1, 44 * K + 100, 0);
    /* the tensors get the given-back bytes, rounded down to whole units */
    assert_int_equal(alloc_refused(m, 1, 4 * K - 255), SL_MEM_QUOTA);
    a = alloc_ok(m, 1, 4 * K - 256);
    assert_sl_ok(sl_mem_free(m, 1, a));
    assert_sl_ok(sl_mem_check(m));
    sl_mem_uncharge_framework(m, 1, 44 * K + 100);
    assert_split(m, 1, 0, 0);
    assert_int_equal(stats(m).free, before.free);
    alloc_ok(m, 1, 48 * K);
    /* a full region holds nothing more: everything is outside */
    assert_int_equal(sl_mem_framework_outside(m, 1, 1000), 1000);
    assert_sl_ok(sl_mem_charge_framework(m, 1, 1000, NULL, &outside));
    assert_int_equal(outside, 1000);
    assert_split(m, 1, 0, 1000);
    /* a session without a region holds it all outside */
    admit_ok(m, 2, 0, 64 * K);
    assert_int_equal(sl_mem_framework_outside(m, 2, 3000), 3000);
    assert_sl_ok(sl_mem_charge_framework(m, 2, 3000, NULL, &outside));
    assert_int_equal(outside, 3000);
    assert_split(m, 2, 0, 3000);
    /* not admitted: all outside, nothing charged */
    assert_int_equal(sl_mem_framework_outside(m, 9, 10), 10);
    assert_int_equal(sl_mem_framework_outside(NULL, 1, 10), 10);
    release_ok(m, 2);
    release_ok(m, 1);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

/* A tensor that needs bytes of P its recordings hold in the region
 * moves just those out: they are then held outside, counted like a charge
 * of that much (the quota refuses a move it has no room for), and the
 * tensor fits. Beyond P, nothing can make room. */
static void test_framework_move_out(void **state)
{
    (void) state;
    sl_mem_mgr *m = mgr_new(M, 160 * K, 16 * K, 64 * K);
    admit_ok(m, 1, 64 * K, 64 * K);
    alloc_ok(m, 1, 16 * K);
    assert_sl_ok(sl_mem_charge_framework(m, 1, 40 * K, NULL, NULL));
    assert_split(m, 1, 40 * K, 0);
    assert_int_equal(sl_mem_framework_blocking(m, 1, 8 * K), 0);      /* fits as it is */
    assert_int_equal(sl_mem_framework_blocking(m, 1, 48 * K + 1), 0); /* beyond P */
    assert_int_equal(alloc_refused(m, 1, 20 * K), SL_MEM_QUOTA);
    uint64_t move = sl_mem_framework_blocking(m, 1, 20 * K);
    assert_int_equal(move, 12 * K);
    sl_mem_stats before = stats(m);
    int reason = -1;
    assert_sl_err(sl_mem_framework_move_out(m, 1, 40 * K + 1, &reason), SL_EINVAL);
    assert_sl_ok(sl_mem_framework_move_out(m, 1, move, &reason));
    assert_int_equal(reason, SL_MEM_FITS);
    assert_split(m, 1, 28 * K, 12 * K);
    assert_int_equal(stats(m).free, before.free - 12 * K);
    alloc_ok(m, 1, 20 * K);
    assert_int_equal(alloc_refused(m, 1, 1), SL_MEM_QUOTA);
    assert_sl_ok(sl_mem_check(m));
    release_ok(m, 1);
    /* the quota (160K: 64K of P, 64K of lane) has 32K beside P: a move
     * of more is refused, and changes nothing */
    admit_ok(m, 2, 64 * K, 64 * K);
    assert_sl_ok(sl_mem_charge_framework(m, 2, 60 * K, NULL, NULL));
    assert_split(m, 2, 60 * K, 0);
    assert_int_equal(sl_mem_framework_blocking(m, 2, 36 * K), 32 * K);
    assert_sl_err(sl_mem_framework_move_out(m, 2, 32 * K + 256, &reason), SL_EEXHAUSTED);
    assert_int_equal(reason, SL_MEM_QUOTA);
    assert_split(m, 2, 60 * K, 0);
    assert_sl_ok(sl_mem_framework_move_out(m, 2, 32 * K, &reason));
    assert_split(m, 2, 28 * K, 32 * K);
    assert_sl_err(sl_mem_framework_move_out(m, 9, 1, NULL), SL_ENOTFOUND);
    release_ok(m, 2);
    assert_empty(m);
    sl_mem_mgr_destroy(m);
}

int test_manager_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_and_args, reset_alloc_failures),
        cmocka_unit_test_teardown(test_quota, reset_alloc_failures),
        cmocka_unit_test_teardown(test_capacity, reset_alloc_failures),
        cmocka_unit_test_teardown(test_lane_sharing, reset_alloc_failures),
        cmocka_unit_test_teardown(test_lane_reclaim, reset_alloc_failures),
        cmocka_unit_test_teardown(test_set_ephemeral, reset_alloc_failures),
        cmocka_unit_test_teardown(test_queue_order, reset_alloc_failures),
        cmocka_unit_test_teardown(test_no_starvation, reset_alloc_failures),
        cmocka_unit_test_teardown(test_ranked_queue, reset_alloc_failures),
        cmocka_unit_test_teardown(test_overtaken_goes_first, reset_alloc_failures),
        cmocka_unit_test_teardown(test_grow_instead_of_new_lane, reset_alloc_failures),
        cmocka_unit_test_teardown(test_exclusive_lanes, reset_alloc_failures),
        cmocka_unit_test_teardown(test_spread_then_share, reset_alloc_failures),
        cmocka_unit_test_teardown(test_lane_id_reuse, reset_alloc_failures),
        cmocka_unit_test_teardown(test_free_errors, reset_alloc_failures),
        cmocka_unit_test_teardown(test_framework_charge, reset_alloc_failures),
        cmocka_unit_test_teardown(test_framework_in_region, reset_alloc_failures),
        cmocka_unit_test_teardown(test_framework_move_out, reset_alloc_failures),
    };
    return cmocka_run_group_tests_name("memory/manager", tests, NULL, NULL);
}
