/* The step dispatcher's segments (sched/steps.h): where they end, how
 * their time is measured, how many are in flight. A fake issuer records
 * each step; no device, no clock but the one passed in. */
#include "sl_test.h"

#include "gaps.h"
#include "sl_error.h"
#include "steps.h"

#include <string.h>

#define N_OPS 12

typedef struct step {
    uint32_t first, end, part, parts;
    bool last;
} step;

typedef struct issuer {
    step steps[4 * N_OPS]; /* every step finished, issued or not */
    unsigned n, issued;
    int fail_at; /* the step whose issue fails; -1 = none */
} issuer;

static uint32_t split_two(void *arg, const sl_steps_task *t, uint32_t op)
{
    (void) arg;
    (void) t;
    (void) op;
    return 2;
}

static int issue(void *arg, sl_steps_task *t, uint32_t first, uint32_t end, uint32_t part,
                 uint32_t parts)
{
    issuer *is = arg;
    assert_int_equal(first, t->step_op);
    assert_int_equal(end, t->step_end);
    assert_true(end - first == 1 || parts == 1);
    (void) part;
    return (int) is->issued++ == is->fail_at ? SL_EDEVICE : SL_OK;
}

static int finish(void *arg, sl_steps_task *t, bool last)
{
    issuer *is = arg;
    is->steps[is->n++] = (step){t->step_op, t->step_end, 0, t->step_parts, last};
    return SL_OK;
}

static const sl_steps_ops ops = {.split_max = split_two, .issue = issue, .finish = finish};

typedef struct rig {
    sl_gaps gaps;
    sl_steps steps;
    sl_gaps_ewma ew[N_OPS];
    sl_gaps_lp lp;
    sl_steps_task t;
    issuer is;
    uint64_t now;
} rig;

/* One lp task of N_OPS ops, no hp job: every step issues at once. */
static void rig_init(rig *r, uint64_t segment_ns, bool concurrent)
{
    memset(r, 0, sizeof *r);
    assert_sl_ok(sl_gaps_init(&r->gaps, NULL));
    sl_steps_config sc = {.gap_fill = true, .segment_ns = segment_ns, .concurrent = concurrent};
    sl_steps_init(&r->steps, &r->gaps, &sc);
    sl_gaps_lp_init(&r->lp, r->ew, N_OPS);
    r->is.fail_at = -1;
    r->now = 1000;
}

/* Runs one iteration of the task to its end, each step taking the sum of
 * durations[op] over its ops (a part: its share). */
static void run_iteration(rig *r, const uint64_t *durations)
{
    r->t = (sl_steps_task){.lp = &r->lp, .n_ops = N_OPS};
    r->is.n = 0;
    sl_steps_begin(&r->steps, &r->t, r->now);
    for (;;) {
        unsigned before = r->is.n;
        (void) sl_steps_resume(&r->steps, r->now, false, &ops, &r->is);
        assert_int_equal(r->is.n, before + 1); /* nothing holds a step back */
        const step *s = &r->is.steps[r->is.n - 1];
        uint64_t took = 0;
        for (uint32_t k = s->first; k < s->end; k++)
            took += durations[k] / s->parts;
        r->now += took;
        if (s->last) {
            sl_steps_last_done(&r->steps, &r->t, r->now);
            return;
        }
        sl_steps_op_done(&r->steps, &r->t, r->now);
    }
}

static const uint64_t durations[N_OPS] = {50000, 80000, 120000, 40000,  400000, 30000,
                                          30000, 30000, 90000,  260000, 20000,  10000};

/* The first iteration measures every op (one per step); later segments
 * are contiguous, cover the iteration once, and a segment of several ops
 * totals at most the bound; an op over the bound is a step of its own. */
static void test_segments_respect_the_bound(void **state)
{
    (void) state;
    const uint64_t bound = 300000;
    rig r;
    rig_init(&r, bound, false);
    run_iteration(&r, durations);
    assert_int_equal(r.is.n, N_OPS);
    for (int it = 0; it < 3; it++) {
        run_iteration(&r, durations);
        uint32_t next = 0;
        unsigned multi = 0;
        for (unsigned i = 0; i < r.is.n; i++) {
            const step *s = &r.is.steps[i];
            assert_int_equal(s->first, next);
            assert_true(s->end > s->first);
            assert_int_equal(s->parts, 1); /* the 400 us op is under the 600 us part length */
            uint64_t sum = 0;
            for (uint32_t k = s->first; k < s->end; k++)
                sum += durations[k];
            if (s->end - s->first > 1) {
                multi++;
                assert_true(sum <= bound);
            }
            /* greedy: the next op would have crossed the bound */
            if (s->end < N_OPS && durations[s->first] <= bound)
                if (sum + durations[s->end] <= bound)
                    fail_msg("step [%u, %u) of %llu us stops before op %u", s->first, s->end,
                             (unsigned long long) sum / 1000, s->end);
            assert_int_equal(s->last, i + 1 == r.is.n);
            next = s->end;
        }
        assert_int_equal(next, N_OPS);
        assert_true(multi >= 3);
        assert_true(r.is.n < N_OPS);
    }
    /* the same boundaries every iteration: a range may be kept as a
     * captured sub-graph */
    step first[N_OPS];
    unsigned n = r.is.n;
    memcpy(first, r.is.steps, n * sizeof *first);
    run_iteration(&r, durations);
    assert_int_equal(r.is.n, n);
    for (unsigned i = 0; i < n; i++) {
        assert_int_equal(r.is.steps[i].first, first[i].first);
        assert_int_equal(r.is.steps[i].end, first[i].end);
    }
    /* a segment's time went to its ops as predicted: the predictions
     * still match each op */
    for (uint32_t k = 0; k < N_OPS; k++) {
        uint64_t p = sl_gaps_lp_predict(&r.gaps, &r.lp, k);
        assert_true(p + 2 >= durations[k] && p <= durations[k] + 2);
    }
    assert_true(r.steps.segments > 0);
}

/* Bound 0: one op per step, ever. */
static void test_no_segments(void **state)
{
    (void) state;
    rig r;
    rig_init(&r, 0, false);
    for (int it = 0; it < 3; it++) {
        run_iteration(&r, durations);
        assert_int_equal(r.is.n, N_OPS);
    }
    assert_int_equal(r.steps.segments, 0);
}

/* An op longer than the part length goes in parts, alone. */
static void test_long_op_in_parts(void **state)
{
    (void) state;
    uint64_t d[N_OPS];
    memcpy(d, durations, sizeof d);
    d[4] = 1000000; /* over the 600 us part length: two parts (split_two) */
    rig r;
    rig_init(&r, 300000, false);
    run_iteration(&r, d);
    run_iteration(&r, d);
    unsigned parts = 0;
    for (unsigned i = 0; i < r.is.n; i++) {
        const step *s = &r.is.steps[i];
        if (s->parts > 1) {
            parts++;
            assert_int_equal(s->first, 4);
            assert_int_equal(s->end, 5);
        }
    }
    assert_int_equal(parts, 2);
}

/* A step that cannot be submitted is the iteration's last; after one that
 * failed on the device the rest is one last step, not submitted. */
static void test_failure_ends_in_one_step(void **state)
{
    (void) state;
    rig r;
    rig_init(&r, 300000, false);
    run_iteration(&r, durations);
    r.t = (sl_steps_task){.lp = &r.lp, .n_ops = N_OPS};
    r.is = (issuer){.fail_at = 1};
    sl_steps_begin(&r.steps, &r.t, r.now);
    (void) sl_steps_resume(&r.steps, r.now, false, &ops, &r.is);
    assert_false(r.is.steps[0].last);
    sl_steps_op_done(&r.steps, &r.t, r.now + 100);
    (void) sl_steps_resume(&r.steps, r.now + 100, false, &ops, &r.is);
    assert_int_equal(r.is.n, 2);
    assert_true(r.t.failed);
    assert_true(r.is.steps[1].last);
    sl_steps_last_done(&r.steps, &r.t, r.now + 200);
    assert_int_equal(r.steps.lp_in_flight, 0);

    r.t = (sl_steps_task){.lp = &r.lp, .n_ops = N_OPS};
    r.is = (issuer){.fail_at = -1};
    sl_steps_begin(&r.steps, &r.t, r.now);
    (void) sl_steps_resume(&r.steps, r.now, false, &ops, &r.is);
    r.t.failed = true; /* its completion reported a device error */
    sl_steps_op_done(&r.steps, &r.t, r.now + 100);
    (void) sl_steps_resume(&r.steps, r.now + 100, false, &ops, &r.is);
    assert_int_equal(r.is.n, 2);
    assert_int_equal(r.is.issued, 1); /* the rest is not submitted */
    assert_true(r.is.steps[1].last);
    assert_int_equal(r.is.steps[1].first, r.is.steps[0].end);
    assert_int_equal(r.is.steps[1].end, N_OPS);
    sl_steps_last_done(&r.steps, &r.t, r.now + 200);
    assert_int_equal(r.steps.lp_in_flight, 0);
}

/* Two lp tasks beside an hp job with gap filling: serial, one step
 * device-wide; concurrent, one each while no hp work is pending, whatever
 * the gaps; neither issues while it is. */
static void test_concurrent(void **state)
{
    (void) state;
    for (int conc = 0; conc < 2; conc++) {
        sl_gaps gaps;
        assert_sl_ok(sl_gaps_init(&gaps, NULL));
        sl_gaps_hp hp;
        sl_gaps_hp_add(&gaps, &hp);
        sl_steps steps;
        sl_steps_config sc = {.gap_fill = true, .segment_ns = 300000, .concurrent = conc == 1};
        sl_steps_init(&steps, &gaps, &sc);
        sl_gaps_ewma ew[2][N_OPS];
        sl_gaps_lp lp[2];
        sl_steps_task t[2];
        memset(t, 0, sizeof t);
        for (int k = 0; k < 2; k++) {
            sl_gaps_lp_init(&lp[k], ew[k], N_OPS);
            t[k].lp = &lp[k];
            t[k].n_ops = N_OPS;
        }
        issuer is = {.fail_at = -1};
        sl_gaps_hp_arrival(&gaps, &hp, 1000);
        sl_steps_begin(&steps, &t[0], 1000);
        sl_steps_begin(&steps, &t[1], 1000);
        (void) sl_steps_resume(&steps, 1000, false, &ops, &is);
        assert_int_equal(is.n, 0);
        sl_gaps_hp_complete(&gaps, &hp, 2000);
        (void) sl_steps_resume(&steps, 2000, false, &ops, &is);
        assert_int_equal(is.n, conc ? 2 : 1);
        assert_int_equal(steps.lp_in_flight, conc ? 2 : 1);
        /* a request arrives: the one(s) in flight finish, nothing new */
        sl_gaps_hp_arrival(&gaps, &hp, 3000);
        sl_steps_op_done(&steps, &t[0], 4000);
        (void) sl_steps_resume(&steps, 4000, false, &ops, &is);
        assert_int_equal(is.n, conc ? 2 : 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segments_respect_the_bound),
        cmocka_unit_test(test_no_segments),
        cmocka_unit_test(test_long_op_in_parts),
        cmocka_unit_test(test_failure_ends_in_one_step),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests_name("steps", tests, NULL, NULL);
}
