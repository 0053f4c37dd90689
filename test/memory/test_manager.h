/* Helpers shared by the memory manager's hand-written tests
 * (test_manager.c, test_manager_layout.c): each call is followed by
 * sl_mem_check, and asserts its outcome. */
#ifndef SL_TEST_MANAGER_H
#define SL_TEST_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "manager.h"
#include "sl_alloc.h"
#include "sl_test.h"

#define K 1024ull
#define M (1024ull * 1024ull)

static inline int reset_alloc_failures(void **state)
{
    (void) state;
    sl_alloc_fail_after(0);
    return 0;
}

static inline sl_mem_mgr *mgr_new(uint64_t capacity, uint64_t quota, uint64_t framework,
                                  uint64_t default_e)
{
    sl_mem_config cfg = {.capacity = capacity,
                         .session_quota = quota,
                         .framework_per_lane = framework,
                         .default_ephemeral = default_e};
    sl_mem_mgr *m = NULL;
    assert_sl_ok(sl_mem_mgr_create(&cfg, &m));
    assert_sl_ok(sl_mem_check(m));
    return m;
}

static inline uint32_t admit_ok(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e)
{
    int reason = -1;
    uint32_t lane = 0;
    assert_sl_ok(sl_mem_admit(m, id, p, e, false, &reason, &lane));
    assert_int_equal(reason, SL_MEM_FITS);
    assert_int_not_equal(lane, 0);
    assert_sl_ok(sl_mem_check(m));
    return lane;
}

/* Admission that must fail; returns the reason. */
static inline int admit_refused(sl_mem_mgr *m, uint64_t id, uint64_t p, uint64_t e, bool wait)
{
    int reason = -1;
    uint32_t lane = 777;
    assert_sl_err(sl_mem_admit(m, id, p, e, wait, &reason, &lane), SL_EEXHAUSTED);
    assert_int_equal(lane, 777);
    assert_sl_ok(sl_mem_check(m));
    return reason;
}

static inline uint64_t alloc_ok(sl_mem_mgr *m, uint64_t id, uint64_t bytes)
{
    uint64_t addr = UINT64_MAX;
    int reason = -1;
    assert_sl_ok(sl_mem_alloc(m, id, bytes, &addr, &reason));
    assert_int_equal(reason, SL_MEM_FITS);
    assert_sl_ok(sl_mem_check(m));
    return addr;
}

static inline int alloc_refused(sl_mem_mgr *m, uint64_t id, uint64_t bytes)
{
    uint64_t addr = 777;
    int reason = -1;
    assert_sl_err(sl_mem_alloc(m, id, bytes, &addr, &reason), SL_EEXHAUSTED);
    assert_int_equal(addr, 777);
    assert_sl_ok(sl_mem_check(m));
    return reason;
}

static inline void release_ok(sl_mem_mgr *m, uint64_t id)
{
    sl_mem_release(m, id);
    assert_sl_ok(sl_mem_check(m));
}

static inline uint32_t set_eph_ok(sl_mem_mgr *m, uint64_t id, uint64_t peak)
{
    uint32_t lane = 0;
    int reason = -1;
    assert_sl_ok(sl_mem_set_ephemeral(m, id, peak, &lane, &reason));
    assert_int_equal(reason, SL_MEM_FITS);
    assert_sl_ok(sl_mem_check(m));
    return lane;
}

static inline sl_mem_lane_info lane_info(const sl_mem_mgr *m, uint32_t id)
{
    sl_mem_lane_info li;
    assert_sl_ok(sl_mem_lane_get(m, id, &li));
    return li;
}

static inline sl_mem_session_info session_info(const sl_mem_mgr *m, uint64_t id)
{
    sl_mem_session_info si;
    assert_sl_ok(sl_mem_session_get(m, id, &si));
    return si;
}

static inline sl_mem_stats stats(const sl_mem_mgr *m)
{
    sl_mem_stats st;
    sl_mem_get_stats(m, &st);
    return st;
}

static inline void assert_empty(sl_mem_mgr *m)
{
    sl_mem_stats st = stats(m);
    assert_int_equal(st.persistent_used, 0);
    assert_int_equal(st.persistent_reserved, 0);
    assert_int_equal(st.lanes, 0);
    assert_int_equal(st.framework, 0);
    assert_int_equal(st.n_lanes, 0);
    assert_int_equal(st.n_sessions, 0);
    assert_int_equal(st.n_queued, 0);
    assert_int_equal(st.free, st.capacity);
    assert_int_equal(st.largest_free, st.capacity);
}

/* The next session the queue admitted; fails if there is none. */
static inline uint64_t next_admitted(sl_mem_mgr *m, uint32_t *lane)
{
    uint64_t id = 0;
    uint32_t l = 0;
    assert_true(sl_mem_next_admitted(m, &id, &l));
    assert_int_not_equal(l, 0);
    assert_sl_ok(sl_mem_check(m));
    if (lane)
        *lane = l;
    return id;
}

#endif
