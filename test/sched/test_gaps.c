/* Unit tests for sched/gaps.c, the FIKIT-style gap filler: the predictors
 * on scripted events, the decision rule, and a small discrete-event run of
 * a periodic high-priority job with a backlogged low-priority one: lp ops go
 * only into predicted gaps, never while hp work is pending, and an hp
 * iteration waits for at most one lp op. */
#include "sched_fixture.h"

#include <math.h>
#include <string.h>

#include "gaps.h"

static void test_gaps_config(void **state)
{
    (void) state;
    sl_gaps g;
    assert_sl_ok(sl_gaps_init(&g, NULL));
    assert_true(g.cfg.gap_alpha == 0.125);
    assert_true(g.cfg.overdue_factor == 2.0);
    assert_false(sl_gaps_hp_pending(&g));
    /* Nothing registered: no constraint. */
    assert_int_equal(sl_gaps_decide(&g, 0, UINT64_MAX), SL_GAPS_ISSUE_FREE);

    const sl_gaps_config d = sl_gaps_config_default();
    sl_gaps_config bad[8];
    for (int i = 0; i < 8; i++)
        bad[i] = d;
    bad[0].gap_alpha = 0;
    bad[1].gap_beta = 1.5;
    bad[2].op_alpha = NAN;
    bad[3].dev_k = -1;
    bad[4].dev_k = INFINITY;
    bad[5].overdue_factor = 0.5;
    bad[6].overdue_factor = NAN;
    bad[7].gap_alpha = -0.1;
    for (int i = 0; i < 8; i++) {
        memset(&g, 0x5a, sizeof(g));
        assert_sl_err(sl_gaps_init(&g, &bad[i]), SL_EINVAL);
        assert_true(g.n_hp == 0x5a5a5a5a); /* untouched */
    }
    sl_gaps_config ok = d;
    ok.dev_k = 0;
    ok.gap_alpha = 1;
    assert_sl_ok(sl_gaps_init(&g, &ok));
}

static void test_gaps_predictor_scripted(void **state)
{
    (void) state;
    sl_gaps g;
    sl_gaps_hp hp;
    assert_sl_ok(sl_gaps_init(&g, NULL));
    sl_gaps_hp_add(&g, &hp);
    assert_int_equal(sl_gaps_hp_predicted_gap(&g, &hp), 0);

    sl_gaps_hp_arrival(&g, &hp, 0); /* first arrival: no gap to measure */
    assert_true(sl_gaps_hp_pending(&g));
    assert_int_equal(sl_gaps_decide(&g, 5, 0), SL_GAPS_WAIT_PENDING);
    sl_gaps_hp_complete(&g, &hp, 10);
    assert_false(sl_gaps_hp_pending(&g));
    /* Idle but no prediction yet: no constraint. */
    assert_int_equal(sl_gaps_decide(&g, 20, 1000), SL_GAPS_ISSUE_FREE);

    sl_gaps_hp_arrival(&g, &hp, 110); /* gap 100: mean 100, dev 50 */
    assert_int_equal(sl_gaps_hp_predicted_gap(&g, &hp), 50);
    sl_gaps_hp_complete(&g, &hp, 120);
    sl_gaps_hp_arrival(&g, &hp, 220);                        /* gap 100: dev 50 + (0 - 50) / 4 */
    assert_int_equal(sl_gaps_hp_predicted_gap(&g, &hp), 62); /* 62.5 */
    sl_gaps_hp_complete(&g, &hp, 300);

    /* Idle since 300, predicted gap 62.5. */
    assert_int_equal(sl_gaps_decide(&g, 300, 62), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, 300, 63), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 330, 32), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, 330, 33), SL_GAPS_WAIT_GAP);
    /* Past the predicted gap but not overdue (2 x (100 + 37.5) = 275):
     * the arrival is imminent, even a zero-length op waits. */
    assert_int_equal(sl_gaps_decide(&g, 400, 0), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 575, 0), SL_GAPS_WAIT_GAP);
    /* Overdue: the job no longer constrains. */
    assert_int_equal(sl_gaps_decide(&g, 576, 1000000), SL_GAPS_ISSUE_FREE);
    assert_true(sl_gaps_may_issue_low_op(&g, 576, 1000000));

    /* Two arrivals back to back: pending twice, idle only after both. */
    sl_gaps_hp_arrival(&g, &hp, 600);
    sl_gaps_hp_arrival(&g, &hp, 601);
    sl_gaps_hp_complete(&g, &hp, 610);
    assert_false(sl_gaps_may_issue_low_op(&g, 611, 0));
    sl_gaps_hp_complete(&g, &hp, 620);
    assert_true(sl_gaps_hp_pending(&g) == false);
    sl_gaps_hp_complete(&g, &hp, 630); /* unmatched: ignored */
    assert_false(sl_gaps_hp_pending(&g));

    /* A job that leaves with work pending stops blocking lp work. */
    sl_gaps_hp_arrival(&g, &hp, 700);
    assert_false(sl_gaps_may_issue_low_op(&g, 701, 0));
    sl_gaps_hp_remove(&g, &hp);
    assert_int_equal(g.n_hp, 0);
    assert_true(sl_gaps_may_issue_low_op(&g, 702, 0));
}

/* With several hp jobs the op must fit every predicted gap. */
static void test_gaps_multi_hp(void **state)
{
    (void) state;
    sl_gaps g;
    sl_gaps_hp a, b;
    sl_gaps_config c = sl_gaps_config_default();
    c.dev_k = 0; /* predicted gap = mean: easy numbers */
    assert_sl_ok(sl_gaps_init(&g, &c));
    sl_gaps_hp_add(&g, &a);
    sl_gaps_hp_add(&g, &b);
    sl_gaps_hp_arrival(&g, &a, 0);
    sl_gaps_hp_arrival(&g, &b, 0);
    sl_gaps_hp_complete(&g, &a, 10);
    sl_gaps_hp_complete(&g, &b, 10);
    sl_gaps_hp_arrival(&g, &a, 1010); /* a's gap 1000 */
    sl_gaps_hp_arrival(&g, &b, 210);  /* b's gap 200 */
    sl_gaps_hp_complete(&g, &a, 2000);
    assert_int_equal(sl_gaps_decide(&g, 2000, 10), SL_GAPS_WAIT_PENDING); /* b pending */
    sl_gaps_hp_complete(&g, &b, 2000);
    assert_int_equal(sl_gaps_decide(&g, 2000, 199), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, 2000, 200), SL_GAPS_WAIT_GAP); /* b's gap */
    /* b overdue (> 400 idle), a not (< 2000): a's gap alone decides. */
    assert_int_equal(sl_gaps_decide(&g, 2401, 500), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, 2401, 599), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 4001, 5000), SL_GAPS_ISSUE_FREE);
    sl_gaps_hp_remove(&g, &a);
    sl_gaps_hp_remove(&g, &b);
    assert_null(g.first);
}

static void test_gaps_lp_predictor(void **state)
{
    (void) state;
    sl_gaps g;
    sl_gaps_config c = sl_gaps_config_default();
    c.unknown_op_ns = 777;
    assert_sl_ok(sl_gaps_init(&g, &c));
    sl_gaps_ewma ops[3];
    memset(ops, 0xff, sizeof(ops));
    sl_gaps_lp lp;
    sl_gaps_lp_init(&lp, ops, 3);
    assert_int_equal(ops[2].n, 0); /* zeroed */
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 0), 777);

    sl_gaps_lp_observe(&g, &lp, 0, 100);
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 0), 100);
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 1), 100); /* job-wide fallback */
    sl_gaps_lp_observe(&g, &lp, 0, 200);                   /* 100 + (200 - 100) / 4 */
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 0), 125);
    sl_gaps_lp_observe(&g, &lp, 1, 1000);
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 1), 1000);
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 0), 125);
    /* Job-wide: 100, 125, then 125 + (1000 - 125) / 4 = 343.75 -> 344 (up). */
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 2), 344);
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 99), 344);
    sl_gaps_lp_observe(&g, &lp, 99, 0); /* out of range: job-wide only */
    assert_int_equal(sl_gaps_lp_predict(&g, &lp, 1), 1000);

    /* No per-op table at all. */
    sl_gaps_lp bare;
    sl_gaps_lp_init(&bare, NULL, 5);
    assert_int_equal(bare.n_ops, 0);
    assert_int_equal(sl_gaps_lp_predict(&g, &bare, 0), 777);
    sl_gaps_lp_observe(&g, &bare, 0, 50);
    assert_int_equal(sl_gaps_lp_predict(&g, &bare, 4), 50);
}

/* Random hp events on three jobs, decisions at random times: never an
 * issue while hp work is pending, and an ISSUE_GAP only when the op fits
 * every non-overdue predicted gap, checked from the public predictions. */
static void test_gaps_property(void **state)
{
    (void) state;
    enum { H = 3, STEPS = 30000 };
    sl_gaps g;
    sl_gaps_hp hp[H];
    assert_sl_ok(sl_gaps_init(&g, NULL));
    uint32_t pending[H] = {0};
    uint64_t idle_since[H] = {0};
    bool ever_done[H] = {false};
    for (int i = 0; i < H; i++)
        sl_gaps_hp_add(&g, &hp[i]);
    rng_state = 4242;
    uint64_t now = 0;
    int issued_gap = 0, issued_free = 0, waited = 0;
    for (int step = 0; step < STEPS; step++) {
        now += rnd_range(0, 40);
        int i = (int) (rnd() % H);
        uint32_t r = rnd() % 20;
        if (r < 1) {
            sl_gaps_hp_arrival(&g, &hp[i], now);
            pending[i]++;
        } else if (r < 8 && pending[i]) {
            sl_gaps_hp_complete(&g, &hp[i], now);
            if (--pending[i] == 0) {
                idle_since[i] = now;
                ever_done[i] = true;
            }
        } else {
            uint64_t op = rnd_range(0, 300);
            sl_gaps_decision d = sl_gaps_decide(&g, now, op);
            bool any_pending = false;
            for (int k = 0; k < H; k++)
                any_pending |= pending[k] > 0;
            assert_int_equal(sl_gaps_hp_pending(&g), any_pending);
            if (any_pending) {
                assert_int_equal(d, SL_GAPS_WAIT_PENDING);
                assert_false(sl_gaps_may_issue_low_op(&g, now, op));
                waited++;
                continue;
            }
            if (d == SL_GAPS_ISSUE_GAP) {
                for (int k = 0; k < H; k++) {
                    uint64_t pg = sl_gaps_hp_predicted_gap(&g, &hp[k]);
                    if (!ever_done[k] || hp[k].gaps_seen == 0)
                        continue;
                    uint64_t elapsed = now - idle_since[k];
                    double overdue = 2.0 * (hp[k].gap_mean_ns + hp[k].gap_dev_ns);
                    if ((double) elapsed > overdue)
                        continue;
                    assert_true(pg >= elapsed + op);
                }
                issued_gap++;
            } else if (d == SL_GAPS_ISSUE_FREE) {
                issued_free++;
            }
        }
    }
    print_message("gap property: %d issued into gaps, %d free, %d held back\n", issued_gap,
                  issued_free, waited);
    assert_true(issued_gap > 50 && issued_free > 10 && waited > 50);
}

/* One hp job with a fixed period and a backlogged lp job whose ops have
 * fixed durations: a device that runs one thing at a time, an executor that
 * asks before each lp op (polling every 10 ns while told to wait). */
typedef struct sim_result {
    int hp_iterations;
    int hp_delayed;       /* arrivals that found an lp op running */
    uint64_t worst_delay; /* the longest such wait */
    uint64_t lp_ops;      /* lp ops issued */
    uint64_t lp_busy_ns;  /* device time they used */
    uint64_t idle_gap_ns; /* device time hp left unused */
    int issued_while_hp_pending;
} sim_result;

static sim_result simulate(uint64_t hp_busy, uint64_t gap, uint32_t jitter, int hp_count,
                           uint64_t end)
{
    static const uint64_t op_ns[5] = {50, 120, 80, 200, 30};
    sl_gaps g;
    sl_gaps_hp hp;
    sl_gaps_ewma ops[5];
    sl_gaps_lp lp;
    assert_sl_ok(sl_gaps_init(&g, NULL));
    sl_gaps_hp_add(&g, &hp);
    sl_gaps_lp_init(&lp, ops, 5);
    sim_result res = {0};

    uint64_t now = 0, next_arrival = 0, lp_done = 0, hp_done = 0;
    bool lp_running = false, hp_running = false, hp_waiting = false;
    uint32_t op = 0;
    int arrivals = 0;
    while (now < end) {
        if (lp_running && lp_done <= now) {
            sl_gaps_lp_observe(&g, &lp, op, op_ns[op]);
            op = (op + 1) % 5;
            lp_running = false;
        }
        if (hp_running && hp_done <= now) {
            sl_gaps_hp_complete(&g, &hp, now);
            hp_running = false;
            res.hp_iterations++;
            uint64_t j = jitter ? rnd_range(0, 2 * jitter) : jitter;
            next_arrival = arrivals < hp_count ? now + gap - jitter + j : UINT64_MAX;
        }
        if (!hp_running && !hp_waiting && next_arrival <= now) {
            sl_gaps_hp_arrival(&g, &hp, now);
            arrivals++;
            hp_waiting = true;
            if (lp_running) {
                res.hp_delayed++;
                uint64_t delay = lp_done - now;
                res.worst_delay = delay > res.worst_delay ? delay : res.worst_delay;
            }
        }
        if (hp_waiting && !lp_running) { /* hp takes the device */
            hp_waiting = false;
            hp_running = true;
            hp_done = now + hp_busy;
        }
        if (!hp_running && !hp_waiting && !lp_running) {
            uint64_t predicted = sl_gaps_lp_predict(&g, &lp, op);
            if (sl_gaps_may_issue_low_op(&g, now, predicted)) {
                if (sl_gaps_hp_pending(&g))
                    res.issued_while_hp_pending++;
                lp_running = true;
                lp_done = now + op_ns[op];
                res.lp_ops++;
                res.lp_busy_ns += op_ns[op];
            }
        }
        /* Advance to the next event, or poll again in 10 ns. */
        uint64_t next = now + 10;
        if (lp_running && lp_done < next)
            next = lp_done;
        if (hp_running && hp_done < next)
            next = hp_done;
        if (!hp_running && next_arrival > now && next_arrival < next)
            next = next_arrival;
        now = next;
    }
    res.idle_gap_ns = now - (uint64_t) res.hp_iterations * hp_busy;
    return res;
}

static void test_gaps_periodic_exact(void **state)
{
    (void) state;
    /* hp: 300 ns busy, 2000 ns idle, steadily. */
    sim_result r = simulate(300, 2000, 0, 400, 1000000);
    print_message("steady: %d hp iterations, %d delayed (worst %llu ns), lp used %llu of %llu "
                  "idle ns\n",
                  r.hp_iterations, r.hp_delayed, (unsigned long long) r.worst_delay,
                  (unsigned long long) r.lp_busy_ns, (unsigned long long) r.idle_gap_ns);
    assert_int_equal(r.issued_while_hp_pending, 0);
    /* Never more than one op in the way, and once the predictor has seen
     * a few gaps (every op has been measured by the 2nd gap) none at all:
     * the first arrivals may meet an op. */
    assert_true(r.worst_delay <= 200);
    assert_true(r.hp_delayed <= 3);
    /* lp work really fills the gaps: most of the time hp leaves. */
    assert_true(r.lp_busy_ns * 10 > r.idle_gap_ns * 8);
    assert_true(r.hp_iterations >= 399);
}

static void test_gaps_periodic_jitter(void **state)
{
    (void) state;
    rng_state = 99;
    /* Gaps of 2000 +- 150 ns, uniform: the deviation term keeps ops clear
     * of most arrivals (about 85% with k = 1), and an arrival that does
     * meet one waits for that one op only. */
    sim_result r = simulate(300, 2000, 150, 400, 1000000);
    print_message("jitter: %d hp iterations, %d delayed (worst %llu ns), lp used %llu of %llu "
                  "idle ns\n",
                  r.hp_iterations, r.hp_delayed, (unsigned long long) r.worst_delay,
                  (unsigned long long) r.lp_busy_ns, (unsigned long long) r.idle_gap_ns);
    assert_int_equal(r.issued_while_hp_pending, 0);
    assert_true(r.worst_delay <= 200);
    assert_true(r.hp_delayed * 4 < r.hp_iterations);
    assert_true(r.lp_busy_ns * 10 > r.idle_gap_ns * 7);
}

/* The hp job stops after 20 iterations: once overdue, lp work runs freely. */
static void test_gaps_hp_goes_quiet(void **state)
{
    (void) state;
    sim_result r = simulate(300, 2000, 0, 20, 200000);
    assert_int_equal(r.hp_iterations, 20);
    assert_int_equal(r.issued_while_hp_pending, 0);
    /* 20 x 2300 ns of hp activity, then the device is lp's: most of the
     * remaining ~154 us is lp work. */
    assert_true(r.lp_busy_ns > 140000);
}

/* The host margin (cfg.host_ns): lp waits while an hp reply is on its way
 * out, and an op must leave the margin free before the predicted arrival. */
static void test_gaps_host_margin(void **state)
{
    (void) state;
    sl_gaps_config c = sl_gaps_config_default();
    c.host_ns = 100;
    sl_gaps g;
    sl_gaps_hp hp;
    assert_sl_ok(sl_gaps_init(&g, &c));
    sl_gaps_hp_add(&g, &hp);
    assert_int_equal(sl_gaps_host_wait(&g, 0), 0);   /* never ran */
    assert_true(sl_gaps_min_room(&g) == UINT64_MAX); /* no prediction */
    sl_gaps_hp_arrival(&g, &hp, 0);
    assert_int_equal(sl_gaps_decide(&g, 5, 0), SL_GAPS_WAIT_PENDING);
    sl_gaps_hp_complete(&g, &hp, 10);
    /* no prediction yet, but the reply is still going out */
    assert_int_equal(sl_gaps_decide(&g, 50, 0), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_host_wait(&g, 50), 60);
    assert_int_equal(sl_gaps_decide(&g, 110, 1000000), SL_GAPS_ISSUE_FREE);
    assert_int_equal(sl_gaps_host_wait(&g, 110), 0);

    /* one gap of 1000 seen: the op must fit g - elapsed - margin */
    sl_gaps_hp_arrival(&g, &hp, 1010);
    sl_gaps_hp_complete(&g, &hp, 1020);
    uint64_t gap = sl_gaps_hp_predicted_gap(&g, &hp);
    assert_true(gap > 300);
    assert_true(sl_gaps_min_room(&g) == gap - 200); /* a margin at each end */
    uint64_t now = 1020 + 150, room = gap - 150 - 100;
    assert_int_equal(sl_gaps_decide(&g, now, room - 1), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, now, room), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 1020 + 99, 0), SL_GAPS_WAIT_GAP);

    /* without a margin the same op fits by the margin's worth more */
    sl_gaps g0;
    sl_gaps_hp hp0;
    assert_sl_ok(sl_gaps_init(&g0, NULL));
    sl_gaps_hp_add(&g0, &hp0);
    sl_gaps_hp_arrival(&g0, &hp0, 0);
    sl_gaps_hp_complete(&g0, &hp0, 10);
    assert_int_equal(sl_gaps_decide(&g0, 11, 0), SL_GAPS_ISSUE_FREE);
    sl_gaps_hp_arrival(&g0, &hp0, 1010);
    sl_gaps_hp_complete(&g0, &hp0, 1020);
    assert_int_equal(sl_gaps_hp_predicted_gap(&g0, &hp0), gap);
    assert_true(sl_gaps_min_room(&g0) == gap);
    assert_int_equal(sl_gaps_decide(&g0, now, room + 99), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_host_wait(&g0, 1021), 0);
    /* the smallest room of several hp jobs counts */
    sl_gaps_hp hp1;
    sl_gaps_hp_add(&g0, &hp1);
    sl_gaps_hp_arrival(&g0, &hp1, 2000);
    sl_gaps_hp_complete(&g0, &hp1, 2010);
    sl_gaps_hp_arrival(&g0, &hp1, 2110); /* a gap of 100 */
    sl_gaps_hp_complete(&g0, &hp1, 2120);
    assert_true(sl_gaps_min_room(&g0) == sl_gaps_hp_predicted_gap(&g0, &hp1));
    assert_true(sl_gaps_min_room(&g0) < gap);
}

int sched_group_gaps(void)
{
    const struct CMUnitTest tests[] = {
        SCHED_TEST(test_gaps_config),          SCHED_TEST(test_gaps_predictor_scripted),
        SCHED_TEST(test_gaps_multi_hp),        SCHED_TEST(test_gaps_lp_predictor),
        SCHED_TEST(test_gaps_property),        SCHED_TEST(test_gaps_periodic_exact),
        SCHED_TEST(test_gaps_periodic_jitter), SCHED_TEST(test_gaps_hp_goes_quiet),
        SCHED_TEST(test_gaps_host_margin),
    };
    return cmocka_run_group_tests_name("sched gaps", tests, NULL, NULL);
}
