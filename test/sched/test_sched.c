/* Unit tests for sched/: the core, fifo and fair. The clock is fake (every
 * call gets an explicit `now`) and randomized tests use a fixed-seed LCG so
 * a failure replays exactly. The other policies, the accounting and the gap
 * filler have their own files; main here runs every group. */
#include "sched_fixture.h"

#include <math.h>
#include <string.h>

#include "sl_alloc.h"

/* ---- lookup and lifecycle ---- */

static void test_policy_lookup(void **state)
{
    (void) state;
    assert_ptr_equal(sl_sched_policy_find("fifo"), &sl_policy_fifo);
    assert_ptr_equal(sl_sched_policy_find("fair"), &sl_policy_fair);
    assert_ptr_equal(sl_sched_policy_find("pack"), &sl_policy_pack);
    assert_ptr_equal(sl_sched_policy_find("rr"), &sl_policy_rr);
    assert_ptr_equal(sl_sched_policy_find("srtf"), &sl_policy_srtf);
    assert_ptr_equal(sl_sched_policy_find("priority"), &sl_policy_priority);
    /* Only fifo and srtf have a paper (non-work-conserving) variant. */
    assert_true(sl_policy_fifo.has_strict);
    assert_true(sl_policy_srtf.has_strict);
    assert_false(sl_policy_fair.has_strict);
    assert_false(sl_policy_pack.has_strict);
    assert_false(sl_policy_rr.has_strict);
    assert_false(sl_policy_priority.has_strict);
    assert_null(sl_sched_policy_find("nope"));
    assert_null(sl_sched_policy_find(""));
    assert_null(sl_sched_policy_find(NULL));

    /* Every advertised name resolves to a policy of that name. */
    char names[256];
    strncpy(names, sl_sched_policy_names(), sizeof(names) - 1);
    names[sizeof(names) - 1] = '\0';
    int n = 0;
    for (char *save, *tok = strtok_r(names, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const sl_policy_ops *p = sl_sched_policy_find(tok);
        assert_non_null(p);
        assert_string_equal(p->name, tok);
        n++;
    }
    assert_int_equal(n, 6);
}

static void test_create_errors(void **state)
{
    (void) state;
    sl_sched *s = NULL;
    assert_sl_err(sl_sched_create(NULL, false, &s), SL_EINVAL);
    assert_sl_err(sl_sched_create(&sl_policy_fifo, false, NULL), SL_EINVAL);
    assert_null(s);

    /* Each allocation of create fails in turn, without leaking the others. */
    for (long n = 1; n <= 2; n++) {
        sl_alloc_fail_after(n);
        assert_sl_err(sl_sched_create(&sl_policy_fifo, false, &s), SL_ENOMEM);
        assert_null(s);
    }
    sl_alloc_fail_after(0);
    assert_sl_ok(sl_sched_create(&sl_policy_fair, true, &s));
    assert_ptr_equal(sl_sched_policy(s), &sl_policy_fair);
    assert_true(sl_sched_strict(s));
    assert_null(sl_sched_first_job(s));
    sl_sched_job *j = NULL;
    sl_sched_item *it = NULL;
    assert_false(sl_sched_next(s, 0, 0, &j, &it));
    sl_sched_destroy(s);
    sl_sched_destroy(NULL);
}

static void test_lanes_reserve(void **state)
{
    (void) state;
    make("fifo", false);
    assert_true(sl_sched_lane_capacity(fx.s) >= 64);
    sl_sched_job *j = NULL;
    sl_sched_item *it = NULL;
    assert_false(sl_sched_next(fx.s, 1000, 0, &j, &it)); /* unknown lane: idle */
    assert_null(sl_sched_lane_running(fx.s, 1000));
    assert_int_equal(sl_sched_lane_switches(fx.s, 1000), 0);

    sl_alloc_fail_after(1);
    assert_sl_err(sl_sched_reserve_lanes(fx.s, 200), SL_ENOMEM);
    sl_alloc_fail_after(0);
    assert_int_equal(sl_sched_lane_capacity(fx.s), SL_SCHED_INITIAL_LANES);

    sl_sched_job a, b;
    add(&a, 1, 1, 63, 0);
    enq(&a, 0, 0);
    assert_sl_ok(sl_sched_reserve_lanes(fx.s, 200));
    assert_int_equal(sl_sched_lane_capacity(fx.s), 200);
    assert_sl_ok(sl_sched_reserve_lanes(fx.s, 10)); /* never shrinks */
    assert_int_equal(sl_sched_lane_capacity(fx.s), 200);
    add(&b, 2, 1, 199, 0);
    enq(&b, 1, 0);
    run_one(199, &b, 5, 1);
    run_one(63, &a, 5, 1); /* state of lanes below the old capacity survived */
}

/* A lane id reused for a new lane (a new serial) starts with fresh
 * statistics; the same serial again changes nothing; membership stays. */
static void test_lane_bind(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_lane_bind(fx.s, 100000, 1); /* above the capacity: ignored */
    sl_sched_job a, b;
    add(&a, 1, 1, 3, 0);
    add(&b, 2, 1, 3, 0);
    sl_sched_lane_bind(fx.s, 3, 7);
    enq(&a, 0, 0);
    run_one(3, &a, 5, 10);
    enq(&b, 1, 20);
    run_one(3, &b, 5, 30);
    sl_sched_note_gap(fx.s, 3, 4, false);
    assert_int_equal(sl_sched_lane_switches(fx.s, 3), 1);
    assert_int_equal(sl_sched_lane_idle_since(fx.s, 3), 35);
    assert_int_equal(sl_sched_lane_gap_count(fx.s, 3, false), 1);
    uint64_t b_iterations = sl_sched_job_lane_iterations(fx.s, &b);
    assert_int_equal(b_iterations, 1);

    sl_sched_lane_bind(fx.s, 3, 7); /* the same lane: nothing changes */
    assert_int_equal(sl_sched_lane_switches(fx.s, 3), 1);
    assert_int_equal(sl_sched_lane_idle_since(fx.s, 3), 35);

    sl_sched_lane_bind(fx.s, 3, 8); /* a new lane under id 3 */
    assert_int_equal(sl_sched_lane_switches(fx.s, 3), 0);
    assert_int_equal(sl_sched_lane_idle_since(fx.s, 3), 0);
    assert_int_equal(sl_sched_lane_gap_count(fx.s, 3, false), 0);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &b), b_iterations); /* epoch kept */
    enq(&a, 0, 40);
    run_one(3, &a, 5, 40); /* b ran last on the old lane: not a switch here */
    assert_int_equal(sl_sched_lane_switches(fx.s, 3), 0);
    release_list(sl_sched_job_remove(fx.s, &a));
    release_list(sl_sched_job_remove(fx.s, &b));
}

static void test_bookkeeping(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b;
    add(&a, 10, 1, 0, 100);
    add(&b, 11, 1, 0, 200);
    assert_int_equal(a.arrival_ns, 100);
    assert_int_equal(b.arrival_ns, 200);
    assert_true(a.arrival_seq < b.arrival_seq);
    assert_ptr_equal(sl_sched_first_job(fx.s), &a);
    assert_ptr_equal(sl_sched_next_job(&a), &b);
    assert_null(sl_sched_next_job(&b));

    titem *t1 = enq(&a, 0, 300);
    enq(&a, 0, 400);
    assert_int_equal(t1->item.enqueue_ns, 300);
    assert_int_equal(a.n_queued, 2);
    run_one(0, &a, 1000, 500);
    run_one(0, &a, 2000, 1500);
    assert_int_equal(a.n_queued, 0);
    assert_int_equal(a.iterations_done, 2);
    assert_int_equal(a.attained_ns, 3000);
    assert_null(a.head);
    assert_null(a.tail);

    /* attained saturates instead of wrapping */
    enq(&a, 0, 0);
    run_one(0, &a, UINT64_MAX - 10, 0);
    assert_int_equal(a.attained_ns, UINT64_MAX);

    /* re-adding zeroes the scheduler's state */
    assert_null(sl_sched_job_remove(fx.s, &a));
    a.attained_ns = 77;
    sl_sched_job_add(fx.s, &a, 900);
    assert_int_equal(a.attained_ns, 0);
    assert_int_equal(a.iterations_done, 0);
    assert_true(a.arrival_seq > b.arrival_seq);
    assert_ptr_equal(sl_sched_first_job(fx.s), &b);
}

/* ---- fifo ---- */

/* A scripted timeline of arrivals and submissions, with the exact order. */
static void test_fifo_scripted(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b, c;
    titem *t;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 10);
    enq(&a, 0, 20); /* A0 */
    enq(&b, 1, 20); /* B0 */
    enq(&a, 0, 30); /* A1 */
    enq(&b, 1, 30); /* B1 */

    assert_ptr_equal(pick(0, 40, &t), &a);
    assert_int_equal(t->seq, 0);
    enq(&b, 1, 45); /* B2: a younger job's work never jumps the oldest */
    sl_sched_complete(fx.s, &a, 10, 50);
    assert_ptr_equal(pick(0, 50, &t), &a);
    assert_int_equal(t->seq, 1);
    sl_sched_complete(fx.s, &a, 10, 60);

    /* A has nothing queued: work-conserving fifo lends the lane to B. */
    assert_ptr_equal(pick(0, 60, &t), &b);
    assert_int_equal(t->seq, 0);
    enq(&a, 0, 65); /* A2 arrives while B0 runs */
    sl_sched_complete(fx.s, &b, 10, 70);
    /* ... and takes it back as soon as A has work again. */
    assert_ptr_equal(pick(0, 70, &t), &a);
    assert_int_equal(t->seq, 2);
    sl_sched_complete(fx.s, &a, 10, 80);

    assert_null(sl_sched_job_remove(fx.s, &a));
    add(&c, 3, 1, 0, 85);
    enq(&c, 2, 85);          /* C0 */
    run_one(0, &b, 10, 90);  /* B1 */
    run_one(0, &b, 10, 100); /* B2 */
    run_one(0, &c, 10, 110); /* B drained: C */
    assert_null(pick(0, 120, NULL));

    /* Ran A0 A1 B0 A2, A left, B1 B2 C0. Switches: B0 (from A), A2 (from B),
     * C0 (from B). B1 follows a departed job: not a switch. */
    assert_int_equal(a.switches, 1);
    assert_int_equal(b.switches, 1);
    assert_int_equal(c.switches, 1);
    assert_int_equal(sl_sched_lane_switches(fx.s, 0), 3);
}

static void test_fifo_strict_idles(void **state)
{
    (void) state;
    make("fifo", true);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 1);
    enq(&a, 0, 2);
    enq(&b, 1, 2);
    enq(&b, 1, 2);

    run_one(0, &a, 10, 3);
    /* The oldest job owns the lane: with nothing queued the lane idles even
     * though B has work (the Salus paper's fifo). */
    for (int i = 0; i < 3; i++)
        assert_null(pick(0, 20 + i, NULL));
    enq(&a, 0, 30);
    run_one(0, &a, 10, 31);
    assert_null(pick(0, 40, NULL));

    /* Only when the oldest leaves does the next one run, and taking over
     * from a departed job is not a switch. */
    assert_null(sl_sched_job_remove(fx.s, &a));
    run_one(0, &b, 10, 50);
    run_one(0, &b, 10, 60);
    assert_int_equal(b.switches, 0);
    assert_int_equal(sl_sched_lane_switches(fx.s, 0), 0);
}

/* Randomized: every fifo pick is the oldest job on the lane (strict) or the
 * oldest with queued work (non-strict), checked against a reference computed
 * from the test's own arrival order. */
static void fifo_property(bool strict)
{
    enum { N_JOBS = 6, STEPS = 3000 };
    make("fifo", strict);
    rng_state = strict ? 7 : 11;
    sl_sched_job jobs[N_JOBS];
    bool live[N_JOBS] = {0};
    int order[N_JOBS], n_order = 0; /* live jobs in admission order */
    int next_id = 0;
    uint64_t now = 0;

    for (int step = 0; step < STEPS; step++) {
        now += 10;
        uint32_t r = rnd() % 10;
        if (r < 2 && n_order < N_JOBS) { /* admit */
            int idx = 0;
            while (live[idx])
                idx++;
            add(&jobs[idx], (uint64_t) next_id++, 1, 0, now);
            live[idx] = true;
            order[n_order++] = idx;
        } else if (r < 3 && n_order > 0) { /* a random job leaves */
            int k = (int) (rnd() % (uint32_t) n_order);
            int idx = order[k];
            (void) release_list(sl_sched_job_remove(fx.s, &jobs[idx]));
            live[idx] = false;
            memmove(&order[k], &order[k + 1], (size_t) (n_order - k - 1) * sizeof(int));
            n_order--;
        } else if (r < 7 && n_order > 0) { /* submit */
            int idx = order[rnd() % (uint32_t) n_order];
            enq(&jobs[idx], idx, now);
        } else { /* a lane boundary: pick and complete */
            sl_sched_job *want = NULL;
            for (int k = 0; k < n_order; k++) {
                sl_sched_job *j = &jobs[order[k]];
                if (j->n_queued > 0) {
                    want = j;
                    break;
                }
                if (strict)
                    break;
            }
            titem *t = NULL;
            sl_sched_job *got = pick(0, now, &t);
            assert_ptr_equal(got, want);
            if (got) {
                assert_int_equal(t->job, (int) (got - jobs));
                sl_sched_complete(fx.s, got, rnd_range(1, 100), now + 5);
            }
        }
    }
}

static void test_fifo_property_work_conserving(void **state)
{
    (void) state;
    fifo_property(false);
}

static void test_fifo_property_strict(void **state)
{
    (void) state;
    fifo_property(true);
}

/* ---- fair ---- */

static void test_fair_picks_least(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_job a, b, c;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    add(&c, 3, 1, 0, 0);
    for (int i = 0; i < 3; i++) {
        enq(&a, 0, 0);
        enq(&b, 1, 0);
        enq(&c, 2, 0);
    }
    /* All at 0: ties go to the earliest arrival, in order. */
    run_one(0, &a, 300, 1);
    run_one(0, &b, 100, 2);
    run_one(0, &c, 200, 3);
    run_one(0, &b, 150, 4);  /* a=300 b=100 c=200: b, now 250 */
    run_one(0, &c, 100, 5);  /* a=300 b=250 c=200: c, now 300 */
    run_one(0, &b, 1000, 6); /* b=250 least: b, now 1250 and drained */
    run_one(0, &a, 10, 7);   /* a=c=300: the earlier arrival, a=310 */
    assert_int_equal(a.attained_ns, 310);
    assert_int_equal(b.attained_ns, 1250);
    assert_int_equal(c.attained_ns, 300);

    /* Weight divides the share: a=310/4 < c=300 < b=1250. */
    enq(&a, 0, 8);
    enq(&b, 1, 8);
    sl_sched_job_set_weight(fx.s, &a, 4);
    run_one(0, &a, 0, 9);
    /* Weight 0 counts as 1: c=300 < a=310. */
    sl_sched_job_set_weight(fx.s, &a, 0);
    enq(&a, 0, 10);
    run_one(0, &c, 20, 11); /* c=320 */
    /* So do negative and NaN weights: a=310 < c=320 < b=1250. */
    sl_sched_job_set_weight(fx.s, &c, -5);
    sl_sched_job_set_weight(fx.s, &b, NAN);
    enq(&c, 2, 12);
    run_one(0, &a, 0, 13);
    run_one(0, &a, 0, 14);
    run_one(0, &c, 0, 15);
    run_one(0, &b, 0, 16);
    assert_null(pick(0, 17, NULL));
}

/* Jobs that always have work get device time in proportion to their weight. */
static void test_fair_weighted_shares(void **state)
{
    (void) state;
    enum { N = 3, ITERS = 30000 };
    make("fair", false);
    rng_state = 42;
    sl_sched_job jobs[N];
    for (int i = 0; i < N; i++) {
        add(&jobs[i], (uint64_t) i, (double) (i + 1), 0, 0);
        enq(&jobs[i], i, 0);
    }
    uint64_t now = 0;
    for (int it = 0; it < ITERS; it++) {
        titem *t = NULL;
        sl_sched_job *j = pick(0, now, &t);
        assert_non_null(j);
        uint64_t dev = rnd_range(500000, 1500000); /* 0.5-1.5 ms */
        now += dev;
        sl_sched_complete(fx.s, j, dev, now);
        enq(j, t->job, now); /* stay backlogged */
    }
    double total = 0;
    for (int i = 0; i < N; i++)
        total += (double) jobs[i].attained_ns;
    for (int i = 0; i < N; i++) {
        double share = (double) jobs[i].attained_ns / total;
        double want = (double) (i + 1) / 6.0;
        if (fabs(share - want) > 0.01 * want)
            fail_msg("job %d share %.4f, want %.4f", i, share, want);
    }
}

/* Backlogged jobs with random weights and charges: no job waits more than a
 * bounded number of picks. A job's normalised service can trail the leader
 * by at most one charge over the smallest weight, so each other job k can
 * run at most (spread * w_k / min_charge + 1) times before it is j's turn. */
static void test_fair_no_starvation(void **state)
{
    (void) state;
    enum { N = 5, ITERS = 20000 };
    const uint32_t min_charge = 1000, max_charge = 5000;
    make("fair", false);
    rng_state = 5;
    sl_sched_job jobs[N];
    double w_min = 1e9;
    for (int i = 0; i < N; i++) {
        double w = (double) rnd_range(1, 4);
        w_min = w < w_min ? w : w_min;
        add(&jobs[i], (uint64_t) i, w, 0, 0);
        enq(&jobs[i], i, 0);
    }
    double spread = max_charge / w_min;
    int bound[N];
    for (int i = 0; i < N; i++) {
        bound[i] = 1;
        for (int k = 0; k < N; k++)
            if (k != i)
                bound[i] += (int) ceil(spread * jobs[k].weight / min_charge) + 1;
    }

    int last_pick[N] = {0};
    int worst[N] = {0};
    for (int it = 1; it <= ITERS; it++) {
        titem *t = NULL;
        sl_sched_job *j = pick(0, (uint64_t) it, &t);
        assert_non_null(j);
        int idx = t->job;
        int waited = it - last_pick[idx];
        worst[idx] = waited > worst[idx] ? waited : worst[idx];
        last_pick[idx] = it;
        sl_sched_complete(fx.s, j, rnd_range(min_charge, max_charge), (uint64_t) it);
        enq(j, idx, (uint64_t) it);
    }
    for (int i = 0; i < N; i++) {
        if (worst[i] > bound[i])
            fail_msg("job %d waited %d picks, bound %d", i, worst[i], bound[i]);
        assert_true(ITERS - last_pick[i] <= bound[i]);
    }
}

/* ---- core properties ---- */

static void test_core_property_fifo(void **state)
{
    (void) state;
    core_property("fifo", 99);
}

static void test_core_property_fair(void **state)
{
    (void) state;
    core_property("fair", 99);
}

static void test_one_item_per_lane(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    enq(&a, 0, 0);
    enq(&a, 0, 0);
    enq(&b, 1, 0);
    assert_ptr_equal(pick(0, 1, NULL), &a);
    /* The lane is busy: neither A's second item nor B's may start. */
    assert_null(pick(0, 2, NULL));
    assert_null(pick(0, 3, NULL));
    assert_int_equal(a.n_queued, 1);
    assert_int_equal(b.n_queued, 1);
    sl_sched_complete(fx.s, &a, 100, 4);
    run_one(0, &b, 100, 5);
    run_one(0, &a, 100, 6);
}

static void test_lanes_independent(void **state)
{
    (void) state;
    make("fifo", true);
    sl_sched_job a, b, c, d;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 1, 1);
    add(&c, 3, 1, 0, 2);
    add(&d, 4, 1, 1, 3);
    enq(&a, 0, 4);
    enq(&c, 2, 4);
    enq(&b, 1, 4);
    enq(&d, 3, 4);

    /* Both lanes run at once, each with its own oldest job. */
    assert_ptr_equal(pick(0, 5, NULL), &a);
    assert_ptr_equal(pick(1, 5, NULL), &b);
    sl_sched_complete(fx.s, &b, 10, 6); /* completions in any order */
    assert_null(pick(1, 7, NULL));      /* strict: B owns lane 1, idle */
    assert_ptr_equal(sl_sched_lane_running(fx.s, 0), &a);
    sl_sched_complete(fx.s, &a, 10, 8);
    assert_null(pick(0, 9, NULL));

    /* Removing A frees lane 0 for C only; lane 1 is unaffected. */
    assert_null(sl_sched_job_remove(fx.s, &a));
    assert_null(pick(1, 10, NULL));
    run_one(0, &c, 10, 11);

    /* Moving C to lane 1 takes its queue along. There B still owns the
     * lane under strict fifo; work-conserving fifo then runs C before D,
     * since C was admitted first. */
    enq(&c, 2, 12);
    sl_sched_job_set_lane(fx.s, &c, 1);
    assert_null(pick(0, 13, NULL));
    assert_null(pick(1, 13, NULL));
    sl_sched_set_policy(fx.s, &sl_policy_fifo, false);
    run_one(1, &c, 10, 14);
    run_one(1, &d, 10, 15);
    assert_null(pick(1, 16, NULL));
}

static void test_remove_returns_items(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b, c;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    add(&c, 3, 1, 0, 0);
    for (int i = 0; i < 5; i++)
        enq(&b, 1, (uint64_t) i);
    enq(&a, 0, 0);
    enq(&c, 2, 0);
    run_one(0, &a, 1, 1);
    run_one(0, &b, 1, 2); /* B0 runs; B1..B4 stay queued */

    /* Middle of the list: the four queued items come back in order. */
    sl_sched_item *list = sl_sched_job_remove(fx.s, &b);
    int expect = 1;
    for (sl_sched_item *it = list; it; it = it->next)
        assert_int_equal(as_titem(it)->seq, expect++);
    assert_int_equal(expect, 5);
    assert_int_equal(b.n_queued, 0);
    assert_null(b.head);
    assert_ptr_equal(sl_sched_first_job(fx.s), &a);
    assert_ptr_equal(sl_sched_next_job(&a), &c);
    assert_null(sl_sched_next_job(&c));
    assert_ptr_equal(c.prev_job, &a);

    /* Then the tail, then the head. */
    list = sl_sched_job_remove(fx.s, &c);
    assert_non_null(list);
    assert_int_equal(as_titem(list)->job, 2);
    assert_null(list->next);
    assert_ptr_equal(sl_sched_first_job(fx.s), &a);
    assert_null(sl_sched_next_job(&a));
    assert_null(sl_sched_job_remove(fx.s, &a));
    assert_null(sl_sched_first_job(fx.s));
    assert_null(pick(0, 3, NULL));

    /* The list is usable again after it empties. */
    add(&b, 2, 1, 0, 4);
    enq(&b, 1, 4);
    run_one(0, &b, 1, 5);
}

static void test_policy_change_runtime(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    for (int i = 0; i < 4; i++) {
        enq(&a, 0, 0);
        enq(&b, 1, 0);
    }
    run_one(0, &a, 1000, 1);
    run_one(0, &a, 1000, 2);

    /* A is running when the policy changes: the change applies at the next
     * boundary, not to the item in flight. */
    assert_ptr_equal(pick(0, 3, NULL), &a);
    sl_sched_set_policy(fx.s, &sl_policy_fair, false);
    assert_ptr_equal(sl_sched_policy(fx.s), &sl_policy_fair);
    assert_ptr_equal(sl_sched_lane_running(fx.s, 0), &a);
    sl_sched_complete(fx.s, &a, 1000, 4);
    run_one(0, &b, 500, 5); /* fair: B has less */
    run_one(0, &b, 500, 6);
    run_one(0, &b, 500, 7); /* b=1500 < a=3000 */

    sl_sched_set_policy(fx.s, &sl_policy_fifo, false);
    run_one(0, &a, 1, 8);

    sl_sched_set_policy(fx.s, &sl_policy_fifo, true);
    assert_true(sl_sched_strict(fx.s));
    assert_null(pick(0, 9, NULL)); /* A empty: strict idles despite B's work */
    sl_sched_set_policy(fx.s, &sl_policy_fifo, false);
    run_one(0, &b, 1, 10);
}

static void test_switch_counting(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    for (int i = 0; i < 3; i++) {
        enq(&a, 0, 0);
        enq(&b, 1, 0);
    }
    run_one(0, &a, 100, 1); /* first pick on a lane: not a switch */
    assert_int_equal(a.switches, 0);
    run_one(0, &b, 100, 2); /* A -> B */
    run_one(0, &a, 100, 3); /* a=b=100: earlier arrival; B -> A */
    run_one(0, &b, 100, 4); /* a=200 > b=100; A -> B */
    assert_int_equal(a.switches, 1);
    assert_int_equal(b.switches, 2);
    assert_int_equal(sl_sched_lane_switches(fx.s, 0), 3);
}

/* Same job back to back is not a switch; the count is per lane. */
static void test_switch_same_job(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 1, 0);
    for (int i = 0; i < 3; i++) {
        enq(&a, 0, 0);
        enq(&b, 1, 0);
    }
    for (int i = 0; i < 3; i++) {
        run_one(0, &a, 1, (uint64_t) i);
        run_one(1, &b, 1, (uint64_t) i);
    }
    assert_int_equal(a.switches, 0);
    assert_int_equal(b.switches, 0);
    assert_int_equal(sl_sched_lane_switches(fx.s, 0), 0);
    assert_int_equal(sl_sched_lane_switches(fx.s, 1), 0);

    /* B moves onto lane 0 where A ran last: taking it is a switch. */
    enq(&b, 1, 10);
    sl_sched_job_set_lane(fx.s, &b, 0);
    run_one(0, &b, 1, 11);
    assert_int_equal(b.switches, 1);
    assert_int_equal(sl_sched_lane_switches(fx.s, 0), 1);

    /* B was the last job on lanes 0 and 1; once it leaves, whoever comes
     * next on either lane takes over from no one. */
    assert_null(sl_sched_job_remove(fx.s, &b));
    sl_sched_job c;
    add(&c, 3, 1, 1, 12);
    enq(&c, 2, 12);
    run_one(1, &c, 1, 13);
    enq(&a, 0, 14);
    run_one(0, &a, 1, 15);
    assert_int_equal(c.switches, 0);
    assert_int_equal(a.switches, 0);
    assert_int_equal(sl_sched_lane_switches(fx.s, 1), 0);
}

/* A pick scans only its lane's jobs, in admission order: a job that moves
 * away and back takes its old place, so fifo still picks the oldest and
 * ties still go to the earlier arrival; drop_queued empties a queue but
 * keeps the job. */
static void test_lane_lists_keep_admission_order(void **state)
{
    (void) state;
    make("fifo", false);
    sl_sched_job a, b, c;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 1);
    add(&c, 3, 1, 0, 2);
    assert_ptr_equal(sl_sched_lane_first_job(fx.s, 0), &a);
    sl_sched_job_set_lane(fx.s, &a, 1);
    assert_ptr_equal(sl_sched_lane_first_job(fx.s, 0), &b);
    assert_ptr_equal(sl_sched_lane_first_job(fx.s, 1), &a);
    assert_null(sl_sched_lane_next_job(&a));
    sl_sched_job_set_lane(fx.s, &a, 0);
    assert_ptr_equal(sl_sched_lane_first_job(fx.s, 0), &a);
    assert_ptr_equal(sl_sched_lane_next_job(&a), &b);
    assert_ptr_equal(sl_sched_lane_next_job(&b), &c);
    assert_null(sl_sched_lane_first_job(fx.s, 1));
    enq(&c, 0, 3);
    enq(&a, 1, 4);
    run_one(0, &a, 1, 5); /* the oldest, though it queued last */
    run_one(0, &c, 1, 6);

    enq(&b, 2, 7);
    enq(&b, 3, 8);
    assert_int_equal(release_list(sl_sched_job_drop_queued(fx.s, &b)), 2);
    assert_int_equal(b.n_queued, 0);
    assert_ptr_equal(sl_sched_lane_next_job(&a), &b); /* still there */
    assert_null(sl_sched_job_remove(fx.s, &b));
    assert_ptr_equal(sl_sched_lane_next_job(&a), &c);
}

int sched_group_core(void)
{
    const struct CMUnitTest tests[] = {
        SCHED_TEST(test_policy_lookup),
        SCHED_TEST(test_create_errors),
        SCHED_TEST(test_lanes_reserve),
        SCHED_TEST(test_lane_bind),
        SCHED_TEST(test_bookkeeping),
        SCHED_TEST(test_fifo_scripted),
        SCHED_TEST(test_fifo_strict_idles),
        SCHED_TEST(test_fifo_property_work_conserving),
        SCHED_TEST(test_fifo_property_strict),
        SCHED_TEST(test_fair_picks_least),
        SCHED_TEST(test_fair_weighted_shares),
        SCHED_TEST(test_fair_no_starvation),
        SCHED_TEST(test_core_property_fifo),
        SCHED_TEST(test_core_property_fair),
        SCHED_TEST(test_one_item_per_lane),
        SCHED_TEST(test_lanes_independent),
        SCHED_TEST(test_remove_returns_items),
        SCHED_TEST(test_policy_change_runtime),
        SCHED_TEST(test_switch_counting),
        SCHED_TEST(test_switch_same_job),
        SCHED_TEST(test_lane_lists_keep_admission_order),
    };
    return cmocka_run_group_tests_name("sched core", tests, NULL, NULL);
}

int main(void)
{
    int failed = 0;
    failed += sched_group_core();
    failed += sched_group_policies();
    failed += sched_group_accounting();
    failed += sched_group_gaps();
    failed += sched_group_share();
    return failed ? 1 : 0;
}
