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

    /* Service times 10, 10, 80: S = 10 + (80 - 10) / 8 = 18.75; gaps
     * 100, 100: rho = 0.05 * 18.75 / 100. */
    assert_int_equal(sl_gaps_hp_service(&hp), 18);
    assert_true(fabs(sl_gaps_hp_risk(&g, &hp) - 0.009375) < 1e-12);
    /* Idle since 300: both recorded gaps ended at 100, so an op fits
     * while it ends before e = 100 (k = 0), and none that reaches it
     * (k = 2 of n = 2 > rho * 2). */
    assert_int_equal(sl_gaps_decide(&g, 300, 99), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, 300, 100), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 330, 69), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, 330, 70), SL_GAPS_WAIT_GAP);
    assert_true(sl_gaps_recheck_at(&g, 330) == 401); /* e passes the gaps of 100 */
    /* Longer than every recorded gap but not overdue (2 x 100): the
     * arrival is imminent, even a zero-length op waits. */
    assert_int_equal(sl_gaps_decide(&g, 400, 0), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 500, 0), SL_GAPS_WAIT_GAP);
    assert_true(sl_gaps_recheck_at(&g, 401) == 501);
    /* Overdue: the job no longer constrains. */
    assert_int_equal(sl_gaps_decide(&g, 501, 1000000), SL_GAPS_ISSUE_FREE);
    assert_true(sl_gaps_may_issue_low_op(&g, 501, 1000000));

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
    /* the test's own record of each job's gaps, the last SL_GAPS_HISTORY */
    static uint64_t rec[H][SL_GAPS_HISTORY];
    uint32_t n_rec[H] = {0}, head[H] = {0};
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
            if (ever_done[i] && pending[i] == 0) {
                if (n_rec[i] < SL_GAPS_HISTORY)
                    rec[i][n_rec[i]++] = now - idle_since[i];
                else {
                    rec[i][head[i]] = now - idle_since[i];
                    head[i] = (head[i] + 1) % SL_GAPS_HISTORY;
                }
            }
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
            /* the rule, from the test's record: every job with a record
             * and not overdue has k <= rho * n, n > 0 */
            bool allowed = true, constrained = false;
            for (int k = 0; k < H; k++) {
                if (!ever_done[k] || n_rec[k] == 0)
                    continue;
                uint64_t e = now - idle_since[k], longest = 0;
                uint32_t n = 0, hits = 0;
                for (uint32_t x = 0; x < n_rec[k]; x++) {
                    longest = rec[k][x] > longest ? rec[k][x] : longest;
                    n += rec[k][x] > e;
                    hits += rec[k][x] > e && rec[k][x] <= e + op;
                }
                if (n == 0 && (double) e > 2.0 * (double) longest)
                    continue; /* overdue */
                constrained = true;
                if (n == 0 || (double) hits > sl_gaps_hp_risk(&g, &hp[k]) * n)
                    allowed = false;
            }
            assert_int_equal(d, !allowed      ? SL_GAPS_WAIT_GAP
                                : constrained ? SL_GAPS_ISSUE_GAP
                                              : SL_GAPS_ISSUE_FREE);
            if (d == SL_GAPS_ISSUE_GAP) {
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
    uint64_t total_delay; /* the sum of those waits */
    uint64_t lp_ops;      /* lp ops issued */
    uint64_t lp_busy_ns;  /* device time they used */
    uint64_t idle_gap_ns; /* device time hp left unused */
    int issued_while_hp_pending;
} sim_result;

/* An exponential draw of mean m from the fixture's generator. */
static uint64_t rnd_exp(double m)
{
    double u = ((double) rnd() + 0.5) / 4294967296.0;
    return (uint64_t) (-m * log(u));
}

/* gap: the hp client's think time after each reply, gap +- jitter
 * (uniform), or exponential of mean gap when poisson (then its requests
 * are memoryless: the arrival does not depend on the time lp ops took).
 * margin: the gap filler's fit_margin. */
static sim_result simulate_ex(uint64_t hp_busy, uint64_t gap, uint32_t jitter, bool poisson,
                              double margin, int hp_count, uint64_t end)
{
    static const uint64_t op_ns[5] = {50, 120, 80, 200, 30};
    sl_gaps g;
    static sl_gaps_hp hp; /* 2 KiB of record: off the stack */
    sl_gaps_ewma ops[5];
    sl_gaps_lp lp;
    sl_gaps_config c = sl_gaps_config_default();
    c.fit_margin = margin;
    assert_sl_ok(sl_gaps_init(&g, &c));
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
            uint64_t think = poisson ? rnd_exp((double) gap) : gap - jitter + j;
            next_arrival = arrivals < hp_count ? now + think : UINT64_MAX;
        }
        if (!hp_running && !hp_waiting && next_arrival <= now) {
            sl_gaps_hp_arrival(&g, &hp, now);
            arrivals++;
            hp_waiting = true;
            if (lp_running) {
                res.hp_delayed++;
                uint64_t delay = lp_done - now;
                res.worst_delay = delay > res.worst_delay ? delay : res.worst_delay;
                res.total_delay += delay;
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

static sim_result simulate(uint64_t hp_busy, uint64_t gap, uint32_t jitter, int hp_count,
                           uint64_t end)
{
    return simulate_ex(hp_busy, gap, jitter, false, sl_gaps_config_default().fit_margin, hp_count,
                       end);
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

/* Memoryless hp requests (think time exponential; service 7000 ns, mean
 * gap 25000 ns: the shape of eval/fikit's ResNet-50 at 40 requests/s)
 * beside lp ops of 30-200 ns. At the default margin (5 %: a budget of
 * 350 ns per request) lp gets most of the idle device and the mean added
 * delay stays within it. (A margin under what filling every gap costs,
 * ~60 ns here, is not kept with memoryless gaps: with L / m << 1 / n most
 * windows hold no recorded gap end, k = 0 understates the risk, and the
 * rule picks exactly those windows; gaps.h says so.) */
static void test_gaps_poisson(void **state)
{
    (void) state;
    rng_state = 7;
    sim_result r = simulate_ex(7000, 25000, 0, true, 0.05, 600, 20000000);
    double mean_delay = (double) r.total_delay / r.hp_iterations;
    print_message("poisson 5%%: %d hp iterations, %d delayed, mean delay %.1f ns; lp used %llu "
                  "of %llu idle ns\n",
                  r.hp_iterations, r.hp_delayed, mean_delay, (unsigned long long) r.lp_busy_ns,
                  (unsigned long long) r.idle_gap_ns);
    assert_int_equal(r.issued_while_hp_pending, 0);
    assert_true(r.worst_delay <= 200);
    assert_true(mean_delay <= 0.05 * 7000);
    assert_true(r.lp_busy_ns * 10 > r.idle_gap_ns * 8);
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

    /* one gap of 1000 recorded (S = 10, rho = 0.05 * 10 / 1000: k must be
     * 0): the op must end a margin before e reaches 1000 */
    sl_gaps_hp_arrival(&g, &hp, 1010);
    sl_gaps_hp_complete(&g, &hp, 1020);
    assert_true(sl_gaps_min_room(&g) == 1000 - 200); /* a margin at each end */
    uint64_t now = 1020 + 150, room = 1000 - 150 - 100;
    assert_int_equal(sl_gaps_decide(&g, now, room - 1), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g, now, room), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_decide(&g, 1020 + 99, 0), SL_GAPS_WAIT_GAP);
    assert_true(sl_gaps_recheck_at(&g, 1020 + 99) == 1020 + 100);

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
    assert_true(sl_gaps_min_room(&g0) == 1000);
    assert_int_equal(sl_gaps_decide(&g0, now, room + 99), SL_GAPS_ISSUE_GAP);
    assert_int_equal(sl_gaps_decide(&g0, now, room + 100), SL_GAPS_WAIT_GAP);
    assert_int_equal(sl_gaps_host_wait(&g0, 1021), 0);
    /* the smallest room of several hp jobs counts */
    sl_gaps_hp hp1;
    sl_gaps_hp_add(&g0, &hp1);
    sl_gaps_hp_arrival(&g0, &hp1, 2000);
    sl_gaps_hp_complete(&g0, &hp1, 2010);
    sl_gaps_hp_arrival(&g0, &hp1, 2110); /* a gap of 100 */
    sl_gaps_hp_complete(&g0, &hp1, 2120);
    assert_true(sl_gaps_min_room(&g0) == 100);
}

/* Memoryless gaps: a record of 128 gaps at the exponential's quantiles
 * (mean ~1000 ns), S = 200 ns. rho = 0.05 * 200 / m ~ 1 %, so about one
 * recorded gap may end in an op's window: an op of ~L issues where k / n
 * ~ L / m stays under it, at every elapsed time, not only at the start;
 * margin 0 issues only where no recorded gap ends in the window. */
static void test_gaps_memoryless_rule(void **state)
{
    (void) state;
    for (int mi = 0; mi < 2; mi++) {
        sl_gaps_config c = sl_gaps_config_default();
        c.fit_margin = mi == 0 ? 0.05 : 0;
        sl_gaps g;
        sl_gaps_hp hp;
        assert_sl_ok(sl_gaps_init(&g, &c));
        sl_gaps_hp_add(&g, &hp);
        uint64_t now = 0;
        for (uint32_t i = 0; i < SL_GAPS_HISTORY; i++) {
            sl_gaps_hp_arrival(&g, &hp, now);
            now += 200;
            sl_gaps_hp_complete(&g, &hp, now);
            /* quantiles in a scrambled order (the record keeps the last) */
            uint32_t q = (i * 37) % SL_GAPS_HISTORY;
            now += (uint64_t) (-1000.0 * log(1.0 - (q + 0.5) / SL_GAPS_HISTORY));
        }
        sl_gaps_hp_arrival(&g, &hp, now);
        now += 200;
        sl_gaps_hp_complete(&g, &hp, now);
        assert_int_equal(hp.n_hist, SL_GAPS_HISTORY);
        assert_int_equal(sl_gaps_hp_service(&hp), 200);
        double rho = sl_gaps_hp_risk(&g, &hp);
        int issued_short = 0, issued_long = 0, points = 0;
        /* e from 0 to the median gap (~693 ns) in steps of 7 ns */
        for (uint64_t e = 0; e < 693; e += 7, points++) {
            issued_short += sl_gaps_decide(&g, now + e, 5) == SL_GAPS_ISSUE_GAP;
            issued_long += sl_gaps_decide(&g, now + e, 300) == SL_GAPS_ISSUE_GAP;
        }
        print_message("memoryless, margin %.2f: rho %.4f, a 5 ns op issues at %d of %d points, "
                      "a 300 ns op at %d\n",
                      c.fit_margin, rho, issued_short, points, issued_long);
        if (mi == 0) {
            assert_true(rho > 0.009 && rho < 0.011);
            /* a 5 ns op is held back only where a recorded gap ends in its
             * window while rho * n < 1 (the record resolves no smaller risk) */
            assert_true(issued_short * 10 > points * 6);
            /* 300 ns: k/n ~ 0.3 >> rho everywhere */
            assert_int_equal(issued_long, 0);
            /* the room: max(rank floor(rho * 128) = 1 gap, 0.05 * 200) */
            assert_true(sl_gaps_min_room(&g) == hp.sorted[1]);
        } else {
            assert_true(rho == 0);
            assert_true(issued_short < points);
            assert_int_equal(issued_long, 0);
            assert_true(sl_gaps_min_room(&g) == hp.sorted[0]);
        }
    }
}

SL_TEST_GROUP(sched_group_gaps, "sched gaps", NULL, NULL, SCHED_TEST(test_gaps_config),
              SCHED_TEST(test_gaps_predictor_scripted), SCHED_TEST(test_gaps_multi_hp),
              SCHED_TEST(test_gaps_lp_predictor), SCHED_TEST(test_gaps_property),
              SCHED_TEST(test_gaps_periodic_exact), SCHED_TEST(test_gaps_periodic_jitter),
              SCHED_TEST(test_gaps_hp_goes_quiet), SCHED_TEST(test_gaps_host_margin),
              SCHED_TEST(test_gaps_memoryless_rule), SCHED_TEST(test_gaps_poisson))
