/* The simulator's partitioned device (eval/lib/pdev.h) against hand figures:
 * wave quantisation per partition, processor sharing inside one, memory
 * bandwidth shared across both, and the whole device unchanged; and the
 * declared need of a timeline (graphs.h) against its definition. */
#include "sl_test.h"

#include "graphs.h"
#include "pdev.h"
#include "sim/profiles.h"

#include <stddef.h>

typedef struct seen {
    unsigned n;
    uint64_t done[8];
    sl_eval_pdev_job *job[8];
} seen;

static void on_done(void *arg, sl_eval_pdev_job *job)
{
    seen *s = arg;
    s->job[s->n] = job;
    s->done[s->n++] = job->ps.done_ns;
}

static void run(sl_eval_pdev *d)
{
    for (uint64_t t; (t = sl_eval_pdev_next(d)) != UINT64_MAX;)
        sl_eval_pdev_sync(d, t);
}

static void test_whole(void **state)
{
    (void) state;
    seen s = {0};
    sl_eval_pdev d;
    sl_eval_pdev_init(&d, 132, 0, on_done, &s);
    assert_int_equal(d.n_parts, 1);
    sl_eval_pdev_job a;
    sl_eval_pdev_op op = {.work_ns = 1000, .occupancy = 0.5, .block_ns = 1000};
    sl_eval_pdev_submit(&d, &a, SL_EVAL_PART_OFFLINE, 0, &op, 0, 0);
    run(&d);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.done[0], 1000);
    assert_int_equal(d.busy_ns, 1000);
    assert_true(d.occupied_ns > 499.99 && d.occupied_ns < 500.01);
}

/* 66 + 66 SMs of 132: one wave of the whole device takes two on either
 * half; a quarter-wave kernel (33 SM-waves) none more. Two full-wave ops in
 * one half share it: each at half speed, both done at 4000. */
static void test_waves_and_sharing(void **state)
{
    (void) state;
    seen s = {0};
    sl_eval_pdev d;
    sl_eval_pdev_init(&d, 132, 66, on_done, &s);
    assert_int_equal(d.n_parts, 2);
    sl_eval_pdev_job a, b, c;
    sl_eval_pdev_op full = {.work_ns = 1000, .compute_ns = 1000, .waves = 1.0, .occupancy = 1.0};
    sl_eval_pdev_op small = {.work_ns = 1000, .compute_ns = 1000, .waves = 0.25, .occupancy = 0.25};
    sl_eval_pdev_submit(&d, &a, SL_EVAL_PART_ONLINE, 0, &small, 0, 1);
    sl_eval_pdev_submit(&d, &b, SL_EVAL_PART_OFFLINE, 0, &full, 0, 0);
    sl_eval_pdev_submit(&d, &c, SL_EVAL_PART_OFFLINE, 0, &full, 0, 0);
    run(&d);
    assert_int_equal(s.n, 3);
    assert_ptr_equal(s.job[0], &a);
    assert_int_equal(s.done[0], 1000);
    assert_int_equal(s.done[1], 4000);
    assert_int_equal(s.done[2], 4000);
    assert_int_equal(d.busy_ns, 4000);
    /* the online half's quarter wave fills half of it, 1/4 of the device,
     * for 1000 ns; the offline half is full for 4000 ns */
    assert_true(d.occupied_ns > 0.25 * 1000 + 0.5 * 4000 - 0.01);
    assert_true(d.occupied_ns < 0.25 * 1000 + 0.5 * 4000 + 0.01);
}

/* A memory-bound op on the offline partition draws all the bandwidth; an
 * online one submitted beside it gets the even split (half): its memory
 * time doubles. Once the first departs, a new one runs at full rate. */
static void test_bandwidth(void **state)
{
    (void) state;
    seen s = {0};
    sl_eval_pdev d;
    sl_eval_pdev_init(&d, 132, 66, on_done, &s);
    sl_eval_pdev_job a, b, c;
    sl_eval_pdev_op mem = {.work_ns = 1000, .memory_ns = 1000, .waves = 0.1, .occupancy = 0.1};
    sl_eval_pdev_submit(&d, &a, SL_EVAL_PART_OFFLINE, 0, &mem, 0, 0);
    sl_eval_pdev_submit(&d, &b, SL_EVAL_PART_ONLINE, 0, &mem, 0, 0);
    run(&d);
    assert_int_equal(s.done[0], 1000);
    assert_int_equal(s.done[1], 2000);
    assert_true(d.mem_used[0] == 0 && d.mem_used[1] == 0);
    sl_eval_pdev_submit(&d, &c, SL_EVAL_PART_ONLINE, 2000, &mem, 0, 0);
    run(&d);
    assert_int_equal(s.done[2], 3000);
}

/* A resize applies to ops submitted after it. */
static void test_resize(void **state)
{
    (void) state;
    seen s = {0};
    sl_eval_pdev d;
    sl_eval_pdev_init(&d, 132, 66, on_done, &s);
    sl_eval_pdev_resize(&d, 33);
    assert_int_equal(d.units[0], 33);
    assert_int_equal(d.units[1], 99);
    sl_eval_pdev_resize(&d, 132); /* out of range: ignored */
    assert_int_equal(d.units[0], 33);
    sl_eval_pdev_job a;
    sl_eval_pdev_op full = {.work_ns = 1000, .compute_ns = 1000, .waves = 1.0, .occupancy = 1.0};
    sl_eval_pdev_submit(&d, &a, SL_EVAL_PART_ONLINE, 0, &full, 0, 0);
    run(&d);
    assert_int_equal(s.done[0], 4000); /* 132 SM-waves on 33 SMs */
    assert_int_equal(sl_eval_pdev_block_ns(&d, SL_EVAL_PART_ONLINE, &full), 1000);
}

/* The need is the fewest SMs at the granularity within the slack of the
 * whole device: its time there is within the slack, one step less is not,
 * and on the whole device the partition model gives the timeline's own
 * time (each op rounded to the ns at most). */
static void test_need(void **state)
{
    (void) state;
    const sl_sim_profile *p, *h;
    assert_sl_ok(sl_sim_profile_find("p100", &p));
    unsigned min_sms, align;
    sl_eval_part_granularity(p, &min_sms, &align);
    assert_int_equal(min_sms, 2);
    assert_int_equal(align, 2);
    assert_sl_ok(sl_sim_profile_find("h100", &h));
    sl_eval_part_granularity(h, &min_sms, &align);
    assert_int_equal(min_sms, 8);
    assert_int_equal(align, 8);
    sl_eval_part_granularity(p, &min_sms, &align);
    sl_eval_timeline t;
    assert_sl_ok(sl_eval_timeline_build_ex("resnet50", 1, p, true, &t));
    uint64_t whole = sl_eval_timeline_ns_on(&t, p, p->sm_count);
    assert_true(whole + t.n_ops >= t.iteration_ns && whole <= t.iteration_ns + t.n_ops);
    unsigned need = sl_eval_timeline_need_sms(&t, p, min_sms, align, 0.02);
    assert_true(need >= min_sms && need < p->sm_count && (need - min_sms) % align == 0);
    assert_true((double) sl_eval_timeline_ns_on(&t, p, need) <= 1.02 * (double) whole);
    if (need > min_sms)
        assert_true((double) sl_eval_timeline_ns_on(&t, p, need - align) > 1.02 * (double) whole);
    /* fewer SMs never run it faster */
    assert_true(sl_eval_timeline_ns_on(&t, p, min_sms) >= sl_eval_timeline_ns_on(&t, p, need));
    /* a looser slack never needs more */
    assert_true(sl_eval_timeline_need_sms(&t, p, min_sms, align, 0.5) <= need);
    sl_eval_timeline_fini(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole),     cmocka_unit_test(test_waves_and_sharing),
        cmocka_unit_test(test_bandwidth), cmocka_unit_test(test_resize),
        cmocka_unit_test(test_need),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
