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

/* ---- the search for the need at the latency objective ---- */

/* A model's iteration time on s SMs: full speed from `full` SMs up, wave
 * quantised below it (time ~ full / s). */
static uint64_t model_ns(unsigned full, unsigned s)
{
    return s >= full ? 1000000 : (uint64_t) (1000000.0 * full / s);
}

/* Feeds n alone iterations of kind key at the plan's size, each an
 * observation, the load light; returns the sizes seen (a change per probe). */
static void run_kind(sl_part_plan *p, uint64_t key, unsigned full, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        sl_part_plan_time(p, key, p->online, model_ns(full, p->online));
        (void) sl_part_plan_observe(p, 1000, 100000);
    }
}

/* P100 granularity (56 SMs, 2 in steps of 2): a model at full speed from
 * 20 SMs is within 20 % from 17 (1.18x), so the search ends at 18 and the
 * need is 18 + 10 % = 19.8, rounded to 20. It starts at the largest (54),
 * probes 28, 14, 22, 18, 16 (the median of 5 each), and load changes
 * nothing meanwhile. */
static void test_plan_search(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(56, 2, 2);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 0));
    assert_true(p.search);
    assert_int_equal(p.phase, SL_PART_REFERENCE);
    assert_int_equal(p.online, 54);
    assert_int_equal(p.resizes, 0);
    /* a time on another size (a resize applied late) is not a sample */
    sl_part_plan_time(&p, 7, 30, 5000000);
    assert_int_equal(p.kinds[0].n, 0);
    const unsigned probes[] = {28, 14, 22, 18, 16};
    run_kind(&p, 7, 20, 5);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        assert_int_equal(p.phase, SL_PART_SEARCH);
        assert_int_equal(p.online, probes[i]);
        /* fully busy: no growth while the search runs */
        for (unsigned k = 0; k < 5; k++) {
            sl_part_plan_time(&p, 7, p.online, model_ns(20, p.online));
            assert_int_equal(sl_part_plan_observe(&p, 100000, 100000),
                             k < 4 ? probes[i] : p.online);
        }
    }
    assert_int_equal(p.phase, SL_PART_SIZED);
    assert_int_equal(p.need, 20);
    assert_int_equal(p.online, 20);
    assert_int_equal(p.searches, 1);
    assert_int_equal(p.resizes, 6); /* 54 -> 28 -> 14 -> 22 -> 18 -> 16 -> 20 */
    /* sized: the load decides above the need again (busy since the probes) */
    unsigned u = p.online;
    for (unsigned i = 0; i < c.hold; i++)
        u = sl_part_plan_observe(&p, 100000, 100000);
    assert_int_equal(u, 22);
}

/* The median decides: one iteration in five slowed fourfold (a spilled
 * block, a burst of memory traffic) moves nothing; the reference's own
 * outlier neither. Two kinds of different lengths each get their own
 * reference. */
static void test_plan_search_median(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(56, 2, 2);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 0));
    unsigned n = 0;
    while (p.phase != SL_PART_SIZED && n < 1000) {
        uint64_t key = n % 2 ? 11 : 12;
        unsigned full = 20;
        uint64_t ns = model_ns(full, p.online) * (key == 11 ? 3 : 1);
        if (n % 5 == 2)
            ns *= 4;
        sl_part_plan_time(&p, key, p.online, ns);
        (void) sl_part_plan_observe(&p, 1000, 100000);
        n++;
    }
    assert_int_equal(p.need, 20);
    assert_true(p.kinds[0].ref_ns > 0 && p.kinds[1].ref_ns > 0);
}

/* A declared need ends the search for good; a kind first seen after the
 * search starts a new one, but not before SL_PART_RESEARCH observations;
 * a plan with an objective of 0 never searches. */
static void test_plan_search_ends(void **state)
{
    (void) state;
    sl_part_plan_config c = sl_part_plan_config_default(56, 2, 2);
    sl_part_plan p;
    assert_sl_ok(sl_part_plan_init(&p, &c, 0));
    run_kind(&p, 7, 20, 3);
    assert_int_equal(sl_part_plan_declare(&p, 10), 12); /* 54 was a probe: the need now */
    assert_int_equal(p.phase, SL_PART_SIZED);
    assert_int_equal(p.need, 12);
    run_kind(&p, 8, 20, 400);
    assert_int_equal(p.searches, 0);
    assert_int_equal(p.online, 12);
    assert_int_equal(sl_part_plan_declare(&p, 4), 12); /* once sized, it only grows */
    assert_int_equal(p.need, 6);
    assert_int_equal(sl_part_plan_declare(&p, 20), 22);

    assert_sl_ok(sl_part_plan_init(&p, &c, 0));
    run_kind(&p, 7, 20, 30);
    assert_int_equal(p.phase, SL_PART_SIZED);
    uint64_t ended = p.observations;
    run_kind(&p, 9, 40, 1); /* a new kind: too soon for another search */
    assert_int_equal(p.phase, SL_PART_SIZED);
    run_kind(&p, 7, 20, SL_PART_RESEARCH - (unsigned) (p.observations - ended) - 1);
    run_kind(&p, 9, 40, 1);
    assert_int_equal(p.phase, SL_PART_REFERENCE);
    assert_int_equal(p.online, 54);
    /* both kinds get a reference, and the size must keep both within the
     * objective: kind 9 needs 40 SMs (34 is 1.18x), so 34 + 10 % -> 38 */
    for (unsigned i = 0; i < 200 && p.phase != SL_PART_SIZED; i++) {
        uint64_t key = i % 2 ? 7 : 9;
        sl_part_plan_time(&p, key, p.online, model_ns(key == 7 ? 20 : 40, p.online));
        (void) sl_part_plan_observe(&p, 1000, 100000);
    }
    assert_int_equal(p.searches, 2);
    assert_int_equal(p.need, 38);

    c.objective = 0;
    assert_sl_ok(sl_part_plan_init(&p, &c, 0));
    assert_false(p.search);
    assert_int_equal(p.online, 2);
    c.objective = 0.2;
    c.samples = 0;
    assert_sl_err(sl_part_plan_init(&p, &c, 0), SL_EINVAL);
    c.samples = SL_PART_SAMPLES + 1;
    assert_sl_err(sl_part_plan_init(&p, &c, 0), SL_EINVAL);
    c.samples = 5;
    c.objective = -0.1;
    assert_sl_err(sl_part_plan_init(&p, &c, 0), SL_EINVAL);
}

/* Feeds n latencies of kind key, at from_ns + (i % 10) x step_ns, each an
 * observation gap_ns after the last. */
static void run_latency_every(sl_part_plan *p, uint64_t key, unsigned n, uint64_t from_ns,
                              uint64_t step_ns, uint64_t gap_ns)
{
    for (unsigned i = 0; i < n; i++) {
        sl_part_plan_latency(p, key, from_ns + (i % 10) * step_ns);
        (void) sl_part_plan_observe(p, 1000, gap_ns);
    }
}

/* The same, one every 100 us. */
static void run_latency(sl_part_plan *p, uint64_t key, unsigned n, uint64_t from_ns,
                        uint64_t step_ns)
{
    run_latency_every(p, key, n, from_ns, step_ns, 100000);
}

/* n requests of kind key, each ns long, one every gap_ns. */
static void run_spaced(sl_part_plan *p, uint64_t key, unsigned n, uint64_t ns, uint64_t gap_ns)
{
    run_latency_every(p, key, n, ns, 0, gap_ns);
}

/* A guarded plan on P100 granularity whose search for kind 7 (full speed
 * from 20 SMs) has ended at a need of 20. */
static void guarded_sized(sl_part_plan *p)
{
    sl_part_plan_config c = sl_part_plan_config_default(56, 2, 2);
    c.guard = true;
    assert_sl_ok(sl_part_plan_init(p, &c, 0));
    run_kind(p, 7, 20, 30);
}

/* Guard: once the need is found, a window of 64 requests on partitions
 * (latencies 1.0-1.9 ms, the slowest 1.9) starts a trial of the shared
 * device. Requests no slower keep it shared across windows; seven slower
 * than 1.9 in a window end it, and the next trial waits SL_PART_RETRY
 * observations and a new window on the partitions. */
static void test_plan_guard(void **state)
{
    (void) state;
    sl_part_plan p;
    guarded_sized(&p);
    assert_int_equal(p.need, 20);
    assert_int_equal(p.phase, SL_PART_SIZED);
    run_latency(&p, 9, 100, 1000000, 100000); /* a kind without a reference: no window */
    run_latency(&p, 7, 63, 1000000, 100000);
    assert_false(p.shared);
    run_latency(&p, 7, 1, 1000000, 100000);
    assert_true(p.shared);
    assert_int_equal(p.trials, 1);
    assert_true(fabs(p.kinds[0].part_max - 1900000) < 1);
    /* as fast as the partitions for three windows */
    run_latency(&p, 7, 192, 1000000, 100000);
    assert_true(p.shared);
    /* six slower in a window still hold; the seventh ends the trial */
    run_latency(&p, 7, 6, 2500000, 0);
    assert_true(p.shared);
    run_latency(&p, 7, 1, 2500000, 0);
    assert_false(p.shared);
    assert_int_equal(p.breaks, 1);
    assert_int_equal(p.online, 20);
    assert_int_equal(p.phase, SL_PART_SIZED);
    run_latency(&p, 7, SL_PART_RETRY - 1, 1000000, 100000);
    assert_false(p.shared);
    run_latency(&p, 7, 64, 1000000, 100000); /* a new window on partitions */
    assert_true(p.shared);
    assert_int_equal(p.trials, 2);
    /* a declared need ends the guard with the search */
    assert_int_equal(sl_part_plan_declare(&p, 30), 34);
    assert_false(p.shared);
    run_latency(&p, 7, 200, 1000000, 100000);
    assert_false(p.shared);
}

/* Guard: trials that fail in a row double the wait for the next, at most
 * SL_PART_BACKOFF times, so a service that sharing never suits pays for
 * fewer and fewer of them; a trial that held SL_PART_RETRY observations
 * before it failed waits SL_PART_RETRY again, and a new search brings no
 * trial forward. */
static void test_plan_guard_backoff(void **state)
{
    (void) state;
    sl_part_plan p;
    guarded_sized(&p);
    run_latency(&p, 7, 64, 1000000, 100000);
    assert_true(p.shared);
    for (unsigned b = 0; b <= SL_PART_BACKOFF + 1; b++) {
        run_latency(&p, 7, 7, 2500000, 0); /* the seventh slower ends it */
        assert_false(p.shared);
        assert_int_equal(p.breaks, b + 1);
        unsigned wait = SL_PART_RETRY << (b < SL_PART_BACKOFF ? b : SL_PART_BACKOFF);
        run_latency(&p, 7, wait - 1, 1000000, 100000);
        assert_false(p.shared);
        run_latency(&p, 7, 1, 1000000, 100000);
        assert_true(p.shared);
    }
    /* held long enough: the load changed, the wait starts over */
    run_latency(&p, 7, SL_PART_RETRY, 1000000, 100000);
    assert_true(p.shared);
    run_latency(&p, 7, 7, 2500000, 0);
    assert_false(p.shared);
    run_latency(&p, 7, SL_PART_RETRY - 1, 1000000, 100000);
    assert_false(p.shared);
    run_latency(&p, 7, 1, 1000000, 100000);
    assert_true(p.shared);
    /* it fails again (a wait of two), and a new kind's search ends inside
     * the wait: still partitions until the wait is over */
    run_latency(&p, 7, 7, 2500000, 0);
    assert_false(p.shared);
    uint64_t due = p.trial_at;
    assert_int_equal(due, p.observations - 1 + 2 * SL_PART_RETRY);
    run_latency(&p, 7, SL_PART_RESEARCH, 1000000, 100000);
    run_kind(&p, 9, 20, 60);
    assert_int_equal(p.searches, 2);
    assert_int_equal(p.phase, SL_PART_SIZED);
    assert_int_equal(p.trial_at, due);
    run_latency(&p, 9, 64, 1000000, 100000);
    assert_false(p.shared);
}

/* Guard: a failed trial's retry also waits until requests come no more
 * often than when it failed, so a service whose load rose past what
 * sharing suits is tried again once the load falls back, not while it
 * stays high; for at most SL_PART_RETRY << SL_PART_BACKOFF requests. */
static void test_plan_guard_rate(void **state)
{
    (void) state;
    sl_part_plan p;
    guarded_sized(&p);
    run_latency(&p, 7, 64, 1000000, 100000); /* one every 100 us */
    assert_true(p.shared);
    uint64_t n;
    double gap;
    assert_false(sl_part_plan_retry(&p, &n, &gap)); /* sharing: nothing waits */
    run_latency(&p, 7, 7, 2500000, 0);
    assert_false(p.shared);
    /* what the retry waits for: the count, the rate not yet (no faster) */
    assert_true(sl_part_plan_retry(&p, &n, &gap));
    assert_int_equal(n, SL_PART_RETRY - 1); /* the request that ended it counts */
    assert_true(gap == 0);
    /* the wait passes with requests twice as frequent: no trial */
    run_spaced(&p, 7, SL_PART_RETRY + 2 * SL_PART_WINDOW, 1000000, 50000);
    assert_false(p.shared);
    assert_int_equal(p.trials, 1);
    assert_true(sl_part_plan_retry(&p, &n, &gap));
    assert_int_equal(n, 0);
    assert_true(fabs(gap - 100000) < 1);
    /* one every 200 us: the mean gap over a window is back at 100 us after
     * 26 of them, and the next request starts the trial */
    run_spaced(&p, 7, 20, 1000000, 200000);
    assert_false(p.shared);
    run_spaced(&p, 7, 20, 1000000, 200000);
    assert_true(p.shared);
    assert_int_equal(p.trials, 2);
    assert_false(sl_part_plan_retry(&p, &n, &gap));
    /* it fails again; requests twice as frequent as then hold the retry
     * back for no longer than the longest count wait */
    run_spaced(&p, 7, 7, 2500000, 200000);
    assert_false(p.shared);
    uint64_t most = (uint64_t) SL_PART_RETRY << SL_PART_BACKOFF;
    run_spaced(&p, 7, (unsigned) most - 8, 1000000, 50000);
    assert_false(p.shared);
    assert_true(sl_part_plan_retry(&p, &n, &gap) && n == 0 && gap > 50000);
    run_spaced(&p, 7, 16, 1000000, 50000);
    assert_true(p.shared);
    assert_int_equal(p.trials, 3);
}

/* The meter times an iteration that ran alone, and no other: one that
 * overlapped another (either way round) gives 0, as does one cut by a reset. */
static void test_load_alone(void **state)
{
    (void) state;
    sl_part_load l = {0};
    sl_part_load_start(&l, 1000);
    assert_int_equal(sl_part_load_done(&l, 3000), 2000);
    sl_part_load_start(&l, 4000);
    sl_part_load_start(&l, 4500);
    assert_int_equal(sl_part_load_done(&l, 5000), 0);
    assert_int_equal(sl_part_load_done(&l, 6000), 0);
    sl_part_load_start(&l, 7000);
    sl_part_load_start(&l, 7100);
    assert_int_equal(sl_part_load_done(&l, 7200), 0);
    sl_part_load_start(&l, 7300); /* overlaps the first, still running */
    assert_int_equal(sl_part_load_done(&l, 7400), 0);
    assert_int_equal(sl_part_load_done(&l, 8000), 0);
    sl_part_load_start(&l, 9000);
    assert_int_equal(sl_part_load_done(&l, 9500), 500);
    sl_part_load_start(&l, 10000);
    sl_part_load_reset(&l, 10200);
    assert_int_equal(sl_part_load_done(&l, 11000), 0);
    assert_int_equal(sl_part_load_done(&l, 12000), 0); /* a stray completion */
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
        cmocka_unit_test(test_plan_init),          cmocka_unit_test(test_plan_hysteresis),
        cmocka_unit_test(test_plan_load_by_time),  cmocka_unit_test(test_load_meter),
        cmocka_unit_test(test_plan_search),        cmocka_unit_test(test_plan_search_median),
        cmocka_unit_test(test_plan_search_ends),   cmocka_unit_test(test_plan_guard),
        cmocka_unit_test(test_plan_guard_backoff), cmocka_unit_test(test_plan_guard_rate),
        cmocka_unit_test(test_load_alone),         cmocka_unit_test(test_steps_isolated),
    };
    return cmocka_run_group_tests_name("partition", tests, NULL, NULL);
}
