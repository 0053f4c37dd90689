/* Unit tests for the accounting sched/ exports: queueing delay, response
 * time and slowdown per job, and the switch-gap distribution (the histogram
 * in sched/hist.c against a brute-force sort). */
#include "sched_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"

static void test_job_accounting_scripted(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 1, 0);
    assert_int_equal(sl_sched_job_mean_queue_ns(&a), 0);
    assert_int_equal(sl_sched_job_mean_iteration_ns(&a), 0);
    assert_int_equal(sl_sched_job_solo_ns(&a), 0);
    assert_true(sl_sched_job_slowdown(&a) == 0);

    enq(&a, 0, 100);
    enq(&a, 0, 150);
    assert_ptr_equal(pick(0, 200, NULL), &a); /* waited 100 */
    assert_int_equal(a.iterations_started, 1);
    assert_int_equal(a.queue_sum_ns, 100);
    sl_sched_complete(fx.s, &a, 100, 300); /* response 200 */
    assert_int_equal(sl_sched_lane_idle_since(fx.s, 0), 300);
    assert_ptr_equal(pick(0, 300, NULL), &a); /* waited 150 */
    sl_sched_complete(fx.s, &a, 50, 350);     /* response 200 */

    assert_int_equal(a.queue_sum_ns, 250);
    assert_int_equal(a.queue_max_ns, 150);
    assert_int_equal(sl_sched_job_mean_queue_ns(&a), 125);
    assert_int_equal(a.response_sum_ns, 400);
    assert_int_equal(sl_sched_job_mean_response_ns(&a), 200);
    assert_int_equal(sl_sched_job_mean_iteration_ns(&a), 75);
    assert_int_equal(a.min_iteration_ns, 50);
    /* Solo estimate: the fastest iteration; slowdown 200 / 50. */
    assert_int_equal(sl_sched_job_solo_ns(&a), 50);
    assert_true(sl_sched_job_slowdown(&a) == 4.0);
    /* A declared solo time wins. */
    sl_sched_job_set_solo(fx.s, &a, 100);
    assert_int_equal(sl_sched_job_solo_ns(&a), 100);
    assert_true(sl_sched_job_slowdown(&a) == 2.0);

    /* A zero charge (a launch that failed) is no fastest iteration. */
    enq(&b, 1, 400);
    assert_ptr_equal(pick(1, 400, NULL), &b);
    sl_sched_complete(fx.s, &b, 0, 400);
    assert_int_equal(b.min_iteration_ns, 0);
    assert_true(sl_sched_job_slowdown(&b) == 0);
    /* The scheduler-wide mean: 150 ns over 3 completions. */
    assert_int_equal(sl_sched_mean_iteration_ns(fx.s), 50);

    /* A clock that goes backwards is charged zero, never a wrapped delay. */
    enq(&b, 1, 1000);
    assert_ptr_equal(pick(1, 900, NULL), &b);
    sl_sched_complete(fx.s, &b, 5, 950);
    assert_int_equal(b.queue_max_ns, 0);
    assert_int_equal(b.response_sum_ns, 0);

    /* Re-adding zeroes the accounting; the declared solo time is "in". */
    assert_null(sl_sched_job_remove(fx.s, &a));
    sl_sched_job_add(fx.s, &a, 2000);
    assert_int_equal(a.queue_sum_ns, 0);
    assert_int_equal(a.iterations_started, 0);
    assert_int_equal(a.min_iteration_ns, 0);
    assert_int_equal(sl_sched_job_solo_ns(&a), 100);
}

/* Random multi-lane script: every job's queueing and response figures equal
 * those the test computes from its own record of enqueue, pick and
 * completion times. */
static void test_job_accounting_random(void **state)
{
    (void) state;
    enum { N = 6, LANES = 2, STEPS = 20000, QCAP = 64 };
    make("fair", false);
    rng_state = 77;
    sl_sched_job jobs[N];
    uint64_t enq_at[N][QCAP]; /* ring of enqueue times per job */
    int q_head[N] = {0}, q_len[N] = {0};
    uint64_t want_qsum[N] = {0}, want_qmax[N] = {0}, want_rsum[N] = {0}, want_min[N] = {0};
    uint64_t want_started[N] = {0}, want_done[N] = {0};
    uint64_t running_enq[LANES] = {0};
    sl_sched_job *running[LANES] = {0};
    for (int i = 0; i < N; i++)
        add(&jobs[i], (uint64_t) i, 1, (uint32_t) i % LANES, 0);
    uint64_t now = 0;
    for (int step = 0; step < STEPS; step++) {
        now += rnd_range(0, 50);
        uint32_t r = rnd() % 3;
        int i = (int) (rnd() % N);
        uint32_t lane = rnd() % LANES;
        if (r == 0 && q_len[i] < QCAP) {
            enq(&jobs[i], i, now);
            enq_at[i][(q_head[i] + q_len[i]++) % QCAP] = now;
        } else if (r == 1 && !running[lane]) {
            titem *t = NULL;
            sl_sched_job *j = pick(lane, now, &t);
            if (!j)
                continue;
            int k = (int) (j - jobs);
            uint64_t e = enq_at[k][q_head[k]];
            q_head[k] = (q_head[k] + 1) % QCAP;
            q_len[k]--;
            assert_int_equal(t->item.enqueue_ns, e);
            want_qsum[k] += now - e;
            want_qmax[k] = now - e > want_qmax[k] ? now - e : want_qmax[k];
            want_started[k]++;
            running[lane] = j;
            running_enq[lane] = e;
        } else if (r == 2 && running[lane]) {
            int k = (int) (running[lane] - jobs);
            uint64_t dev = rnd_range(1, 1000);
            sl_sched_complete(fx.s, running[lane], dev, now);
            want_rsum[k] += now - running_enq[lane];
            want_min[k] = !want_min[k] || dev < want_min[k] ? dev : want_min[k];
            want_done[k]++;
            running[lane] = NULL;
        }
    }
    for (int k = 0; k < N; k++) {
        assert_int_equal(jobs[k].queue_sum_ns, want_qsum[k]);
        assert_int_equal(jobs[k].queue_max_ns, want_qmax[k]);
        assert_int_equal(jobs[k].response_sum_ns, want_rsum[k]);
        assert_int_equal(jobs[k].min_iteration_ns, want_min[k]);
        assert_int_equal(jobs[k].iterations_started, want_started[k]);
        assert_int_equal(jobs[k].iterations_done, want_done[k]);
        assert_true(want_done[k] > 100); /* the script exercised every job */
        double slow = ((double) want_rsum[k] / (double) want_done[k]) / (double) want_min[k];
        assert_true(fabs(sl_sched_job_slowdown(&jobs[k]) - slow) <= 1e-9 * slow);
    }
}

/* ---- histogram ---- */

static void test_hist_buckets(void **state)
{
    (void) state;
    assert_int_equal(sl_sched_hist_bucket(0), 0);
    assert_int_equal(sl_sched_hist_bucket(15), 15);
    assert_int_equal(sl_sched_hist_bucket(UINT64_MAX), SL_SCHED_HIST_BUCKETS - 1);
    /* The buckets tile [0, 2^64) without holes or overlaps, and each is at
     * most 1/16 of its lower bound wide. */
    uint64_t expect_lo = 0;
    for (uint32_t b = 0; b < SL_SCHED_HIST_BUCKETS; b++) {
        uint64_t lo, hi;
        sl_sched_hist_bucket_range(b, &lo, &hi);
        assert_int_equal(lo, expect_lo);
        assert_true(hi >= lo);
        assert_int_equal(sl_sched_hist_bucket(lo), b);
        assert_int_equal(sl_sched_hist_bucket(hi), b);
        if (lo >= 16)
            assert_true(hi - lo + 1 <= lo / 16);
        if (b + 1 == SL_SCHED_HIST_BUCKETS)
            assert_int_equal(hi, UINT64_MAX);
        else
            expect_lo = hi + 1;
    }

    sl_sched_hist h;
    sl_sched_hist_reset(&h);
    assert_int_equal(sl_sched_hist_quantile(&h, 0.5), 0);
    for (uint64_t v = 1; v <= 10; v++)
        sl_sched_hist_record(&h, v);
    /* Small values are exact: nearest rank. */
    assert_int_equal(sl_sched_hist_quantile(&h, 0.0), 1);
    assert_int_equal(sl_sched_hist_quantile(&h, 0.5), 5);
    assert_int_equal(sl_sched_hist_quantile(&h, 0.51), 6);
    assert_int_equal(sl_sched_hist_quantile(&h, 0.99), 10);
    assert_int_equal(sl_sched_hist_quantile(&h, 1.0), 10);
    assert_int_equal(sl_sched_hist_quantile(&h, 7.0), 10); /* clamped */
    assert_int_equal(sl_sched_hist_quantile(&h, -1), 1);
    assert_int_equal(sl_sched_hist_quantile(&h, NAN), 1);
    /* The sum saturates. */
    sl_sched_hist_record(&h, UINT64_MAX);
    assert_int_equal(h.sum_ns, UINT64_MAX);
    assert_int_equal(sl_sched_hist_quantile(&h, 1.0), UINT64_MAX);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

/* Nearest rank over a sorted array. */
static uint64_t brute_quantile(const uint64_t *sorted, size_t n, double q)
{
    size_t rank = (size_t) ceil(q * (double) n);
    rank = rank < 1 ? 1 : rank > n ? n : rank;
    return sorted[rank - 1];
}

static void check_close(uint64_t got, uint64_t want, const char *what)
{
    uint64_t err = got > want ? got - want : want - got;
    if (err > want / 32)
        fail_msg("%s: got %llu, want %llu (+-%llu)", what, (unsigned long long) got,
                 (unsigned long long) want, (unsigned long long) (want / 32));
}

/* Gaps of both kinds on several lanes, log-uniform over 1 ns .. 1 s: count,
 * sum, extremes and per-lane figures exact, quantiles within 1/32 of a
 * brute-force nearest rank. */
static void test_gap_stats_vs_brute_force(void **state)
{
    (void) state;
    enum { N = 20000, LANES = 4 };
    make("fair", false);
    rng_state = 31337;
    static uint64_t samples[2][N];
    size_t n[2] = {0, 0};
    uint64_t lane_count[LANES][2] = {{0}}, lane_sum[LANES][2] = {{0}}, sum[2] = {0, 0};

    sl_sched_gap_stats st;
    sl_sched_gap_stats_get(fx.s, false, &st);
    assert_int_equal(st.count, 0);
    assert_int_equal(st.p99_ns, 0);
    assert_int_equal(st.min_ns, 0);

    for (int i = 0; i < N; i++) {
        int kind = rnd() % 4 == 0; /* a quarter are same-job continuations */
        uint32_t lane = rnd() % LANES;
        double exp10 = (double) rnd_range(0, 900000) / 100000.0; /* 10^0 .. 10^9 */
        uint64_t gap = (uint64_t) pow(10.0, exp10);
        sl_sched_note_gap(fx.s, lane, gap, kind);
        samples[kind][n[kind]++] = gap;
        sum[kind] += gap;
        lane_count[lane][kind]++;
        lane_sum[lane][kind] += gap;
    }
    for (int kind = 0; kind < 2; kind++) {
        qsort(samples[kind], n[kind], sizeof(uint64_t), cmp_u64);
        sl_sched_gap_stats_get(fx.s, kind, &st);
        assert_int_equal(st.count, n[kind]);
        assert_int_equal(st.sum_ns, sum[kind]);
        assert_int_equal(st.min_ns, samples[kind][0]);
        assert_int_equal(st.max_ns, samples[kind][n[kind] - 1]);
        check_close(st.p50_ns, brute_quantile(samples[kind], n[kind], 0.50), "p50");
        check_close(st.p99_ns, brute_quantile(samples[kind], n[kind], 0.99), "p99");
        for (double q = 0; q <= 1.0; q += 0.05)
            check_close(sl_sched_gap_quantile(fx.s, kind, q),
                        brute_quantile(samples[kind], n[kind], q), "quantile");
        for (uint32_t l = 0; l < LANES; l++) {
            assert_int_equal(sl_sched_lane_gap_count(fx.s, l, kind), lane_count[l][kind]);
            assert_int_equal(sl_sched_lane_gap_sum_ns(fx.s, l, kind), lane_sum[l][kind]);
        }
    }
    /* The two kinds are kept apart: the switch p50 is not the continuation
     * one's by accident of sharing a table. */
    assert_int_equal(n[0] + n[1], N);
    assert_int_equal(sl_sched_lane_gap_count(fx.s, 1000, false), 0);
}

/* The executor's recipe (sched.c's integration notes): the gap is launch
 * time minus the later of "lane idle" and "item enqueued", and same_job says
 * whether the lane's previous item was the same job's. */
static void test_gap_recipe(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    enq(&a, 0, 0);
    enq(&b, 1, 0);
    sl_sched_job *prev = NULL;
    uint64_t now = 0;
    for (int i = 0; i < 6; i++) {
        titem *t = NULL;
        sl_sched_job *j = pick(0, now, &t);
        assert_non_null(j);
        uint64_t launch = now + 3; /* the handoff takes 3 ns */
        if (prev) {
            uint64_t idle = sl_sched_lane_idle_since(fx.s, 0);
            uint64_t ready = t->item.enqueue_ns > idle ? t->item.enqueue_ns : idle;
            sl_sched_note_gap(fx.s, 0, launch - ready, j == prev);
        }
        prev = j;
        now = launch + 100;
        sl_sched_complete(fx.s, j, 100, now);
        enq(j, t->job, now + (i % 2 ? 50 : 0)); /* sometimes the client thinks */
    }
    sl_sched_gap_stats st;
    sl_sched_gap_stats_get(fx.s, false, &st);
    /* fair alternates a, b: every transition is a switch, and the client's
     * think time is not part of the gap. */
    assert_int_equal(st.count, 5);
    assert_int_equal(st.max_ns, 3);
    assert_int_equal(sl_sched_lane_gap_count(fx.s, 0, true), 0);
}

int sched_group_accounting(void)
{
    const struct CMUnitTest tests[] = {
        SCHED_TEST(test_job_accounting_scripted),
        SCHED_TEST(test_job_accounting_random),
        SCHED_TEST(test_hist_buckets),
        SCHED_TEST(test_gap_stats_vs_brute_force),
        SCHED_TEST(test_gap_recipe),
    };
    return cmocka_run_group_tests_name("sched accounting", tests, NULL, NULL);
}
