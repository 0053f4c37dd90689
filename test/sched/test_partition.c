/* sched/partition.h (MuxFlow sizing with hysteresis) and the dispatcher's
 * isolated mode (sched/steps.h, lp steps on a compute partition). */
#include "sl_test.h"

#include "partition.h"
#include "steps.h"

#include <math.h>
#include <string.h>

/* H100 granularity (8 SMs in steps of 8): a need of 20 SMs with 10 %
 * headroom is 22, rounded to 24; the most the online partition may take
 * leaves min_units (8) to offline lanes. */
static void test_plan_init(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(132, 8, 8);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 20));
    assert_int_equal(p.need, 24);
    assert_int_equal(p.online, 24);
    assert_int_equal(sl_part_plan_offline(&p), 108);
    assert_int_equal(sl_part_round(&c, 1), 8);
    assert_int_equal(sl_part_round(&c, 9), 16);
    assert_int_equal(sl_part_round(&c, 500), 132);
    /* capped where offline keeps 8: 124 SMs, of which 8 + 8k allows 120 */
    assert_sl_ok(sl_part_plan_init(&p, &c, 200));
    assert_int_equal(p.online, 120);
    sl_part_plan_config bad = c;
    bad.grow_load = 0.1; /* below shrink_load */
    assert_sl_err(sl_part_plan_init(&p, &bad, 20), SL_EINVAL);
    bad = c;
    bad.align = 0;
    assert_sl_err(sl_part_plan_init(&p, &bad, 20), SL_EINVAL);
    bad = c;
    bad.min_offline = 132;
    assert_sl_err(sl_part_plan_init(&p, &bad, 20), SL_EINVAL);
}

/* Fully busy: the EWMA (weight 0.2) passes 0.5 at the 4th observation
 * (1 - 0.8^4 = 0.59), but the hold of 8 keeps the size until the 8th; then
 * one step (8 SMs) per 8 observations. Idle again: it shrinks one step per
 * hold once the EWMA is under 0.2, never below the need. */
static void test_plan_hysteresis(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(132, 8, 8);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 20));
    for (int i = 1; i <= 7; i++)
        assert_int_equal(sl_part_plan_observe(&p, 1000, 1000), 24);
    assert_int_equal(sl_part_plan_observe(&p, 1000, 1000), 32);
    for (int i = 1; i <= 7; i++)
        assert_int_equal(sl_part_plan_observe(&p, 1000, 1000), 32);
    assert_int_equal(sl_part_plan_observe(&p, 1000, 1000), 40);
    assert_int_equal(p.resizes, 2);
    /* load near the threshold band does nothing: 0.3 sits between 0.2 and 0.5 */
    p.busy_avg = 300;
    p.window_avg = 1000;
    p.since_change = 0;
    for (int i = 0; i < 20; i++)
        assert_int_equal(sl_part_plan_observe(&p, 300, 1000), 40);
    /* idle: the load falls under 0.2 (0.3 x 0.8^2 = 0.19), shrinks at the hold */
    unsigned last = 40;
    for (int i = 0; i < 64; i++) {
        unsigned u = sl_part_plan_observe(&p, 0, 1000);
        assert_true(u == last || u + 8 == last);
        last = u;
    }
    assert_int_equal(last, 24); /* the need, not below */
    assert_int_equal(sl_part_plan_offline(&p), 108);
}

/* A 25 % load in bursts: an idle spell as long as 12 requests, then four
 * back to back (three windows all busy). Averaged per boundary it would
 * read 0.77 and grow the partition; weighed by time it stays between 0.19
 * and 0.33, between the thresholds, and the partition keeps its size. */
static void test_plan_load_by_time(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(132, 8, 8);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 20));
    for (int burst = 0; burst < 40; burst++) {
        assert_int_equal(sl_part_plan_observe(&p, 1000, 13000), 24);
        for (int i = 0; i < 3; i++)
            assert_int_equal(sl_part_plan_observe(&p, 1000, 1000), 24);
    }
    assert_true(p.load > 0.15 && p.load < 0.45);
    assert_int_equal(p.resizes, 0);
}

/* The load meter: overlapping online iterations count once, an idle
 * stretch not at all, a window is the time since the previous observation
 * (or the reset, before which nothing counts), and a window cut while an
 * iteration runs carries its busy time over into the next one. */
static void test_load_meter(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(132, 8, 8);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 20));
    sl_part_load l = {0};
    sl_part_load_start(&l, 100); /* busy from before the reset: not counted */
    sl_part_load_reset(&l, 1000);
    sl_part_load_start(&l, 1500); /* overlaps the first */
    sl_part_load_done(&l, 2000);
    sl_part_load_done(&l, 3000); /* busy 1000..3000 */
    sl_part_load_start(&l, 5000);
    sl_part_load_done(&l, 6000); /* and 5000..6000 */
    sl_part_load_observe(&l, &p, 9000);
    assert_true(fabs(p.busy_avg - 0.2 * 3000) < 1e-6);
    assert_true(fabs(p.window_avg - 0.2 * 8000) < 1e-6);
    sl_part_load_start(&l, 9000);
    sl_part_load_observe(&l, &p, 10000); /* busy all of the 1000 ns window */
    assert_true(fabs(p.busy_avg - (0.2 * 1000 + 0.8 * 0.2 * 3000)) < 1e-6);
    sl_part_load_done(&l, 10500);
    sl_part_load_observe(&l, &p, 12000); /* 500 of 2000, the rest carried over */
    assert_true(fabs(p.busy_avg - (0.2 * 500 + 0.8 * (0.2 * 1000 + 0.8 * 0.2 * 3000))) < 1e-6);
    assert_int_equal(l.running, 0);
    sl_part_load_done(&l, 13000); /* a stray completion changes nothing */
    assert_int_equal(l.running, 0);
    assert_int_equal(l.busy_ns,
                     900 + 2000 + 1000 + 1500); /* a running total: the windows exclude the 900 */
    /* a clock read before a reset that came first: an empty window, no wrap */
    sl_part_load_reset(&l, 20000);
    double window_avg = p.window_avg;
    sl_part_load_observe(&l, &p, 19000);
    assert_true(fabs(p.window_avg - window_avg) < 1e-9);
    sl_part_load_observe(&l, &p, 21000);
    assert_true(fabs(p.window_avg - (0.2 * 1000 + 0.8 * window_avg)) < 1e-6);
}

/* ---- the dispatcher, isolated ---- */

typedef struct fake {
    unsigned issued;
} fake;

static uint32_t split_none(void *arg, const sl_steps_task *t, uint32_t op)
{
    (void) arg;
    (void) t;
    (void) op;
    return 1;
}

static int issue(void *arg, sl_steps_task *t, uint32_t op, uint32_t end, uint32_t part,
                 uint32_t parts)
{
    (void) t;
    (void) op;
    (void) end;
    (void) part;
    (void) parts;
    ((fake *) arg)->issued++;
    return SL_OK;
}

static int finish(void *arg, sl_steps_task *t, bool last)
{
    (void) arg;
    (void) t;
    (void) last;
    return SL_OK;
}

static const sl_steps_ops fake_ops = {.split_max = split_none, .issue = issue, .finish = finish};

/* Two lp tasks: isolated, both issue while no hp work is pending (two steps
 * in flight); while hp work is pending neither does. Not isolated, one
 * step at a time. */
static void test_steps_isolated(void **state)
{
    (void) state;
    for (int iso = 0; iso < 2; iso++) {
        sl_gaps gaps;
        assert_sl_ok(sl_gaps_init(&gaps, NULL));
        sl_gaps_hp hp;
        sl_gaps_hp_add(&gaps, &hp);
        sl_steps steps;
        sl_steps_config sc = {.gap_fill = true, .isolated = iso == 1};
        sl_steps_init(&steps, &gaps, &sc);
        sl_gaps_ewma ew[2][4];
        sl_gaps_lp lp[2];
        sl_steps_task t[2];
        memset(t, 0, sizeof t);
        for (int k = 0; k < 2; k++) {
            sl_gaps_lp_init(&lp[k], ew[k], 4);
            t[k].lp = &lp[k];
            t[k].n_ops = 4;
        }
        fake f = {0};
        /* hp work pending: nothing goes, isolated or not */
        sl_gaps_hp_arrival(&gaps, &hp, 1000);
        sl_steps_begin(&steps, &t[0], 1000);
        sl_steps_begin(&steps, &t[1], 1000);
        (void) sl_steps_resume(&steps, 1000, false, &fake_ops, &f);
        assert_int_equal(f.issued, 0);
        sl_gaps_hp_complete(&gaps, &hp, 2000);
        (void) sl_steps_resume(&steps, 2000, false, &fake_ops, &f);
        assert_int_equal(f.issued, iso ? 2 : 1);
        assert_int_equal(steps.lp_in_flight, iso ? 2 : 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_init),         cmocka_unit_test(test_plan_hysteresis),
        cmocka_unit_test(test_plan_load_by_time), cmocka_unit_test(test_load_meter),
        cmocka_unit_test(test_steps_isolated),
    };
    return cmocka_run_group_tests_name("partition", tests, NULL, NULL);
}
