/* Unit tests for the share between tenants and anticipation (sched/share.c),
 * on synthetic state with a fake clock: tenants first, then their jobs, on
 * one lane and across lanes; weights; the hold of a tenant's other lanes
 * while another tenant is owed share; a lane kept for a job whose client is
 * between iterations, and let go when its window closes; priority classes
 * before tenants; the lag of a tenant back from idle. */
#include "sched_fixture.h"

#include <string.h>

#define MS 1000000ull

/* Adds a job of tenant t (NULL: the default tenant). */
static void add_t(sl_sched_job *j, uint64_t id, uint32_t lane, sl_sched_tenant *t, uint64_t now)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->weight = 1;
    j->lane = lane;
    j->tenant = t;
    sl_sched_job_add(fx.s, j, now);
}

/* Every job always has work on lane 0: n picks of iterations of iter_ns,
 * each job's next item queued as its last completes. Returns the time
 * reached. */
static uint64_t backlogged(sl_sched_job **jobs, int n_jobs, int picks, uint64_t iter_ns,
                           uint64_t now)
{
    for (int i = 0; i < n_jobs; i++)
        enq(jobs[i], i, now);
    for (int k = 0; k < picks; k++) {
        sl_sched_job *j = pick(0, now, NULL);
        assert_non_null(j);
        now += iter_ns;
        sl_sched_complete(fx.s, j, iter_ns, now);
        for (int i = 0; i < n_jobs; i++)
            if (jobs[i] == j)
                enq(j, i, now);
    }
    return now;
}

static void test_share_tenants_first(void **state)
{
    (void) state;
    static const char *const policies[] = {"fair", "srtf", "priority", "pack"};
    for (size_t p = 0; p < sizeof policies / sizeof policies[0]; p++) {
        make(policies[p], false);
        sl_sched_tenant ta = {.key = 1, .weight = 1}, tb = {.key = 2, .weight = 1};
        sl_sched_job a, b[3];
        add_t(&a, 1, 0, &ta, 0);
        for (int i = 0; i < 3; i++)
            add_t(&b[i], 2 + (uint64_t) i, 0, &tb, 0);
        sl_sched_job *jobs[] = {&a, &b[0], &b[1], &b[2]};
        (void) backlogged(jobs, 4, 400, 10, 0);
        /* per job it would be a quarter each; per tenant it is half */
        assert_int_equal(sl_sched_tenants(fx.s), 2);
        int64_t diff = (int64_t) ta.attained_ns - (int64_t) tb.attained_ns;
        if (diff < -10 || diff > 10)
            fail_msg("%s: tenant A %llu ns, tenant B %llu ns", policies[p],
                     (unsigned long long) ta.attained_ns, (unsigned long long) tb.attained_ns);
        /* inside B, fair shares between its jobs too */
        if (strcmp(policies[p], "fair") == 0)
            for (int i = 0; i < 3; i++)
                assert_true(b[i].attained_ns + 10 >= tb.attained_ns / 3);
        for (int i = 0; i < 4; i++)
            release_list(sl_sched_job_remove(fx.s, jobs[i]));
        assert_int_equal(sl_sched_tenants(fx.s), 0);
        sl_sched_destroy(fx.s);
        fx.s = NULL;
    }
}

static void test_share_weight(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_tenant ta = {.key = 1, .weight = 2}, tb = {.key = 2, .weight = 1};
    sl_sched_job a, b[2];
    add_t(&a, 1, 0, &ta, 0);
    add_t(&b[0], 2, 0, &tb, 0);
    add_t(&b[1], 3, 0, &tb, 0);
    sl_sched_job *jobs[] = {&a, &b[0], &b[1]};
    (void) backlogged(jobs, 3, 300, 10, 0);
    /* 2/3 of 3000 ns: 2000, within an iteration */
    assert_true(ta.attained_ns >= 1990 && ta.attained_ns <= 2010);
}

/* A tenant with lanes of its own gets no more device time than another
 * tenant with one: its lanes are held while it is ahead and the other runs. */
static void test_share_lanes_held(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_tenant ta = {.key = 1, .weight = 1}, tb = {.key = 2, .weight = 1};
    sl_sched_job a, b[4];
    add_t(&a, 1, 0, &ta, 0);
    for (int i = 0; i < 4; i++)
        add_t(&b[i], 2 + (uint64_t) i, 1 + (uint32_t) i, &tb, 0);
    enq(&a, 0, 0);
    run_one(0, &a, 10, 0); /* A: 10 ns attained, the mean iteration 10 */
    enq(&a, 0, 10);
    assert_ptr_equal(pick(0, 10, NULL), &a); /* 10 more expected in flight: 20 */
    for (int i = 0; i < 4; i++)
        enq(&b[i], 1 + i, 10);
    /* B commits 10 per start: it may reach A's 20, not pass it */
    assert_ptr_equal(pick(1, 10, NULL), &b[0]);
    assert_ptr_equal(pick(2, 10, NULL), &b[1]);
    assert_ptr_equal(pick(3, 10, NULL), &b[2]);
    assert_null(pick(4, 10, NULL));
    assert_int_equal(sl_sched_lane_hold(fx.s, 4), UINT64_MAX);
    assert_int_equal(sl_sched_held_lanes(fx.s), 1);
    assert_int_equal(sl_sched_hold_deadline(fx.s), 0); /* held until an event */
    /* A completes and, without anticipation, claims nothing more: B goes */
    sl_sched_complete(fx.s, &a, 10, 20);
    assert_ptr_equal(pick(4, 20, NULL), &b[3]);
    assert_int_equal(sl_sched_lane_hold(fx.s, 4), 0);
    assert_int_equal(sl_sched_held_lanes(fx.s), 0);
}

/* job runs `times` iterations of iter_ns on lane 0, its client sending the
 * next gap_ns after each completion; returns the time of the last
 * completion. */
static uint64_t rhythm(sl_sched_job *job, int idx, int times, uint64_t iter_ns, uint64_t gap_ns,
                       uint64_t now)
{
    for (int k = 0; k < times; k++) {
        enq(job, idx, now);
        run_one(0, job, iter_ns, now);
        now += iter_ns + (k + 1 < times ? gap_ns : 0);
    }
    return now;
}

/* Inside one tenant: a lane waits for the job owed share while its client
 * is between iterations, for about its usual gap, then lets go. */
static void test_share_anticipation(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_set_anticipation(fx.s, 1 * MS);
    sl_sched_job big, small;
    add_t(&big, 1, 0, NULL, 0);
    add_t(&small, 2, 0, NULL, 0);
    enq(&big, 0, 0);
    run_one(0, &big, 10 * MS, 0); /* big: 10 ms attained */
    /* small: 0.1 ms iterations, its client back 50 us after each */
    uint64_t now = rhythm(&small, 1, 6, 100000, 50000, 10 * MS);
    enq(&big, 0, now);
    /* small is owed share and between iterations: the lane waits for it,
     * until the longest of its gaps (50 us) + 1/8 + 20 us */
    uint64_t until = now + 50000 + 6250 + 20000;
    assert_null(pick(0, now, NULL));
    assert_int_equal(sl_sched_lane_hold(fx.s, 0), until);
    assert_int_equal(sl_sched_hold_deadline(fx.s), until);
    /* its item comes in time: it runs */
    enq(&small, 1, now + 50000);
    assert_ptr_equal(pick(0, now + 50000, NULL), &small);
    assert_int_equal(sl_sched_held_lanes(fx.s), 0);
    now += 50000 + 100000;
    sl_sched_complete(fx.s, &small, 100000, now);
    /* it does not come: at the deadline big runs */
    until = now + 50000 + 6250 + 20000;
    assert_null(pick(0, now + 1000, NULL));
    assert_ptr_equal(pick(0, until, NULL), &big);
    sl_sched_complete(fx.s, &big, 10 * MS, until + 10 * MS);

    /* off: no wait */
    now = until + 10 * MS;
    enq(&small, 1, now + 50000);
    run_one(0, &small, 100000, now + 50000);
    now += 150000;
    sl_sched_set_anticipation(fx.s, 0);
    enq(&big, 0, now);
    assert_ptr_equal(pick(0, now, NULL), &big);
}

/* A client whose gap is longer than the limit (the bound, and half the
 * iteration of the job that would run instead) is waited for only that
 * long inside its tenant; between tenants, one whose usual gap passes the
 * bound is not waited for. */
static void test_share_anticipation_limit(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_set_anticipation(fx.s, 1 * MS);
    sl_sched_job big, slow;
    add_t(&big, 1, 0, NULL, 0);
    add_t(&slow, 2, 0, NULL, 0);
    enq(&big, 0, 0);
    run_one(0, &big, 1 * MS, 0);                               /* half of big's iteration: 0.5 ms */
    uint64_t now = rhythm(&slow, 1, 6, 10000, 600000, 1 * MS); /* gaps of 0.6 ms */
    enq(&big, 0, now);
    assert_null(pick(0, now, NULL));
    assert_int_equal(sl_sched_lane_hold(fx.s, 0), now + 500000);
    assert_ptr_equal(pick(0, now + 500000, NULL), &big);
    release_list(sl_sched_job_remove(fx.s, &slow));
    sl_sched_complete(fx.s, &big, 1 * MS, now + 1500000);
    release_list(sl_sched_job_remove(fx.s, &big));

    sl_sched_tenant ta = {.key = 1, .weight = 1}, tb = {.key = 2, .weight = 1};
    sl_sched_job a, b;
    now += 2 * MS;
    add_t(&b, 3, 0, &tb, now);
    add_t(&a, 4, 0, &ta, now);
    enq(&b, 0, now);
    run_one(0, &b, 1 * MS, now);
    now = rhythm(&a, 1, 6, 10000, 9 * MS, now + 1 * MS); /* gaps of 9 ms: above the bound */
    enq(&b, 0, now);
    assert_ptr_equal(pick(0, now, NULL), &b);
}

/* Between tenants on one lane: the lane waits for the tenant owed share. */
static void test_share_anticipation_tenants(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_set_anticipation(fx.s, 1 * MS);
    sl_sched_tenant ta = {.key = 1, .weight = 1}, tb = {.key = 2, .weight = 1};
    sl_sched_job a, b;
    add_t(&b, 1, 0, &tb, 0);
    add_t(&a, 2, 0, &ta, 0);
    enq(&b, 0, 0);
    run_one(0, &b, 5 * MS, 0);
    uint64_t now = rhythm(&a, 1, 6, 100000, 50000, 5 * MS);
    enq(&b, 0, now);
    /* a tenant's claim lasts twice its window (within the bound) */
    assert_null(pick(0, now, NULL));
    assert_int_equal(sl_sched_lane_hold(fx.s, 0), now + 2 * (50000 + 6250 + 20000));
}

/* Priority classes come before the tenants' shares. */
static void test_share_classes_first(void **state)
{
    (void) state;
    make("priority", false);
    sl_sched_tenant ta = {.key = 1, .weight = 1}, tb = {.key = 2, .weight = 1};
    sl_sched_job a, b;
    add_t(&a, 1, 0, &ta, 0);
    add_t(&b, 2, 0, &tb, 0);
    a.priority = 1;
    enq(&a, 0, 0);
    run_one(0, &a, 100, 0); /* A is ahead of B */
    enq(&a, 0, 100);
    enq(&b, 1, 100);
    assert_ptr_equal(pick(0, 100, NULL), &a);
}

/* A tenant back from a long idle starts at most the lag behind the others,
 * not at what it attained before. */
static void test_share_lag(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_tenant ta = {.key = 1, .weight = 1}, tb = {.key = 2, .weight = 1};
    sl_sched_job a, b;
    add_t(&a, 1, 0, &ta, 0);
    add_t(&b, 2, 1, &tb, 0);
    uint64_t now = 0;
    for (int k = 0; k < 20; k++) { /* B alone for 2 s of device time */
        enq(&b, 1, now);
        run_one(1, &b, 100 * MS, now);
        now += 100 * MS;
    }
    enq(&b, 1, now);
    assert_ptr_equal(pick(1, now, NULL), &b);
    enq(&a, 0, now); /* A's first item, B still running */
    double lag = sl_sched_tenant_vtime(&tb) - sl_sched_tenant_vtime(&ta);
    assert_true(lag > 0 && lag <= 50.0 * MS + 100.0 * MS); /* the lag, and B's item in flight */
    assert_true(ta.vtime > 1.0 * MS);
}

int sched_group_share(void)
{
    const struct CMUnitTest tests[] = {
        SCHED_TEST(test_share_tenants_first),      SCHED_TEST(test_share_weight),
        SCHED_TEST(test_share_lanes_held),         SCHED_TEST(test_share_anticipation),
        SCHED_TEST(test_share_anticipation_limit), SCHED_TEST(test_share_anticipation_tenants),
        SCHED_TEST(test_share_classes_first),      SCHED_TEST(test_share_lag),
    };
    return cmocka_run_group_tests_name("sched share", tests, NULL, NULL);
}
