/* Unit tests for the policies beyond fifo and fair: pack, rr, srtf and
 * priority. Each gets its exact order on a scripted timeline (fake clock),
 * then the properties: work conservation for every non-strict policy, no
 * starvation under rr, and run-time changes of policy, weight, priority and
 * declarations. */
#include "sched_fixture.h"

#include <string.h>

/* Adds a job with declarations for srtf. */
static void add_decl(sl_sched_job *j, uint64_t id, uint64_t total_ns, uint64_t iterations,
                     uint64_t now)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->weight = 1;
    j->expected_total_ns = total_ns;
    j->expected_iterations = iterations;
    sl_sched_job_add(fx.s, j, now);
}

static void add_prio(sl_sched_job *j, uint64_t id, int priority, double weight, uint64_t now)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->weight = weight;
    j->priority = priority;
    sl_sched_job_add(fx.s, j, now);
}

/* ---- pack ---- */

static void test_pack_scripted(void **state)
{
    (void) state;
    make("pack", false);
    sl_sched_job a, b, c;
    titem *t;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    add(&c, 3, 1, 0, 0);
    enq(&a, 0, 1); /* A0 */
    enq(&b, 1, 2); /* B0 */
    enq(&a, 0, 3); /* A1 */
    enq(&c, 2, 4); /* C0 */
    enq(&b, 1, 4); /* B1: same time as C0, submitted after it */

    /* Items run in submission order whoever owns them (fifo would run A0
     * A1 first: the oldest job owns the lane there). */
    assert_ptr_equal(pick(0, 5, &t), &a);
    assert_int_equal(t->seq, 0);
    enq(&a, 0, 6); /* A2 arrives while A0 runs: behind everything queued */
    sl_sched_complete(fx.s, &a, 10, 15);
    run_one(0, &b, 10, 15); /* B0 */
    run_one(0, &a, 10, 25); /* A1 */
    run_one(0, &c, 10, 35); /* C0 */
    run_one(0, &b, 10, 45); /* B1 */
    assert_ptr_equal(pick(0, 55, &t), &a);
    assert_int_equal(t->seq, 2);
    sl_sched_complete(fx.s, &a, 10, 65);
    assert_null(pick(0, 70, NULL));
    /* Strict changes nothing: pack is work-conserving in Salus too. */
    sl_sched_set_policy(fx.s, &sl_policy_pack, true);
    enq(&c, 2, 80);
    run_one(0, &c, 10, 81);
}

/* ---- rr ---- */

static void test_rr_scripted(void **state)
{
    (void) state;
    make("rr", false);
    sl_sched_job a, b, c, d, e;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    for (int i = 0; i < 12; i++) {
        enq(&a, 0, 0);
        enq(&b, 1, 0);
    }
    run_one(0, &a, 500, 1); /* 0,0: arrival order */
    run_one(0, &b, 10, 2);  /* device time does not matter: counts do */
    run_one(0, &a, 500, 3); /* a=2 b=1 */
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &a), 2);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &b), 1);

    /* C joins lane 0: everyone restarts from zero, so ties by arrival give
     * A, B, C (without the reset C would go first, then B). */
    add(&c, 3, 1, 0, 4);
    for (int i = 0; i < 8; i++)
        enq(&c, 2, 4);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &a), 0);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &b), 0);
    run_one(0, &a, 1, 5);
    run_one(0, &b, 1, 6);
    run_one(0, &c, 1, 7);
    run_one(0, &a, 1, 8); /* a=2 b=1 c=1 */

    /* A job joining another lane is no change of lane 0's membership. */
    add(&e, 5, 1, 1, 9);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &a), 2);
    run_one(0, &b, 1, 10); /* a=2 b=2 c=1 */

    /* B leaves: reset again, so A (earliest) before C (fewer without it). */
    (void) release_list(sl_sched_job_remove(fx.s, &b));
    run_one(0, &a, 1, 11);
    run_one(0, &c, 1, 12);
    run_one(0, &a, 1, 13); /* a=2 c=1 */

    /* D moves in from lane 1 (set_lane): a join, reset. */
    add(&d, 4, 1, 1, 14);
    enq(&d, 3, 14);
    sl_sched_job_set_lane(fx.s, &d, 0);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &c), 0);
    run_one(0, &a, 1, 15);
    run_one(0, &c, 1, 16);
    run_one(0, &d, 1, 17);
    /* ... and moving E to lane 0 and back out are two more changes. */
    sl_sched_job_set_lane(fx.s, &e, 0);
    sl_sched_job_set_lane(fx.s, &e, 1);
    run_one(0, &a, 1, 18); /* all at zero again: A, then C */
    run_one(0, &c, 1, 19);
    run_one(0, &a, 1, 20); /* a=1 c=1: A by arrival */
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &a), 2);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &c), 1);
}

/* set_lane to the lane a job is already on is no membership change: the
 * counts stand and C, with fewer, runs next. */
static void test_rr_noop_set_lane(void **state)
{
    (void) state;
    make("rr", false);
    sl_sched_job a, c;
    add(&a, 1, 1, 0, 0);
    add(&c, 2, 1, 0, 0);
    for (int i = 0; i < 4; i++) {
        enq(&a, 0, 0);
        enq(&c, 1, 0);
    }
    run_one(0, &a, 1, 1);
    run_one(0, &c, 1, 2);
    run_one(0, &a, 1, 3); /* a=2 c=1 */
    sl_sched_job_set_lane(fx.s, &a, 0);
    run_one(0, &c, 1, 4); /* unchanged membership: C has fewer */
}

/* Backlogged jobs with membership churn at most every 10 picks: every job
 * runs within 2N picks of its previous run. */
static void test_rr_no_starvation(void **state)
{
    (void) state;
    enum { N = 5, ITERS = 20000 };
    make("rr", false);
    rng_state = 17;
    sl_sched_job jobs[N + 1];
    for (int i = 0; i < N; i++) {
        add(&jobs[i], (uint64_t) i, 1, 0, 0);
        enq(&jobs[i], i, 0);
    }
    bool extra_live = false;
    int last_pick[N] = {0}, worst[N] = {0};
    for (int it = 1; it <= ITERS; it++) {
        if (it % 10 == 0 && rnd() % 2) { /* a sixth job comes or goes */
            if (extra_live) {
                (void) release_list(sl_sched_job_remove(fx.s, &jobs[N]));
            } else {
                add(&jobs[N], N, 1, 0, (uint64_t) it);
                enq(&jobs[N], N, (uint64_t) it);
            }
            extra_live = !extra_live;
        }
        titem *t = NULL;
        sl_sched_job *j = pick(0, (uint64_t) it, &t);
        assert_non_null(j);
        sl_sched_complete(fx.s, j, rnd_range(1, 5000), (uint64_t) it);
        enq(j, t->job, (uint64_t) it);
        if (t->job == N)
            continue;
        int waited = it - last_pick[t->job];
        worst[t->job] = waited > worst[t->job] ? waited : worst[t->job];
        last_pick[t->job] = it;
    }
    for (int i = 0; i < N; i++)
        if (worst[i] > 2 * (N + 1))
            fail_msg("job %d waited %d picks", i, worst[i]);
}

/* ---- srtf ---- */

static void test_srtf_scripted(void **state)
{
    (void) state;
    make("srtf", false);
    sl_sched_job a, b, c, d;
    double rem;
    add_decl(&a, 1, 1000, 0, 0);
    for (int i = 0; i < 3; i++)
        enq(&a, 0, 0);
    run_one(0, &a, 300, 1); /* alone; a: 700 left. Mean of all: 300 */

    add_decl(&b, 2, 500, 0, 400);
    add_decl(&c, 3, 0, 0, 400); /* declares nothing: after all others */
    add_decl(&d, 4, 0, 3, 400); /* 3 iterations, none measured yet */
    for (int i = 0; i < 3; i++) {
        enq(&b, 1, 400);
        enq(&c, 2, 400);
        enq(&d, 3, 400);
    }
    assert_false(sl_sched_job_remaining(fx.s, &c, &rem));
    /* D's neutral estimate: 3 x the mean of every iteration so far. */
    assert_true(sl_sched_job_remaining(fx.s, &d, &rem));
    assert_true(rem == 900.0);
    run_one(0, &b, 200, 500);  /* a 700, b 500, d 900: b -> 300; mean 250 */
    run_one(0, &b, 200, 800);  /* a 700, b 300, d 750: b -> 100; mean 233 */
    run_one(0, &b, 200, 1000); /* b drained (remaining 0); mean 225 */
    /* a 700 vs d 3 x 225 = 675: D, whose own mean then takes over. */
    run_one(0, &d, 100, 1300); /* d: 2 x 100 = 200 */
    assert_true(sl_sched_job_remaining(fx.s, &d, &rem));
    assert_true(rem == 200.0);
    run_one(0, &d, 100, 1400);
    run_one(0, &d, 100, 1500); /* d: 0 left, drained */
    run_one(0, &a, 300, 1600); /* a 700 before undeclared c */
    run_one(0, &a, 300, 1900);
    run_one(0, &c, 10, 2200);
    run_one(0, &c, 10, 2300);
    run_one(0, &c, 10, 2400);
    assert_null(pick(0, 2500, NULL));

    /* Declaring a total at run time makes C rank by it at the next pick:
     * c has 30 attained of 100: 70 < a's 100. Total wins over iterations. */
    enq(&a, 0, 2600);
    enq(&c, 2, 2600);
    sl_sched_job_set_expected(fx.s, &c, 100, 1000);
    run_one(0, &c, 10, 2700);
    run_one(0, &a, 10, 2800);
}

/* Where a job not yet added waits for memory (sl_sched_wait_rank): srtf
 * by its declared total, then jobs that declared only iterations (no time
 * per iteration before they run), then undeclared ones; priority higher
 * classes first; the others arrival order (0 for all). */
static void test_wait_rank(void **state)
{
    (void) state;
    make("srtf", false);
    sl_sched_job a;
    add_decl(&a, 1, 0, 10, 0);
    enq(&a, 0, 0);
    run_one(0, &a, 300, 1); /* a mean iteration exists now; ranks ignore it */
    sl_sched_job total = {.id = 2, .expected_total_ns = 5000};
    sl_sched_job both = {.id = 3, .expected_total_ns = 200, .expected_iterations = 1000};
    sl_sched_job iters = {.id = 4, .expected_iterations = 10};
    sl_sched_job none = {.id = 5};
    assert_int_equal(sl_sched_wait_rank(fx.s, &total), 5000);
    assert_int_equal(sl_sched_wait_rank(fx.s, &both), 200);
    assert_true(sl_sched_wait_rank(fx.s, &iters) == UINT64_MAX - 1);
    assert_true(sl_sched_wait_rank(fx.s, &none) == UINT64_MAX);

    sl_sched_set_policy(fx.s, sl_sched_policy_find("priority"), false);
    sl_sched_job hi = {.id = 6, .priority = 5}, lo = {.id = 7, .priority = -5};
    assert_true(sl_sched_wait_rank(fx.s, &hi) < sl_sched_wait_rank(fx.s, &none));
    assert_true(sl_sched_wait_rank(fx.s, &none) < sl_sched_wait_rank(fx.s, &lo));
    sl_sched_set_policy(fx.s, sl_sched_policy_find("fifo"), false);
    assert_int_equal(sl_sched_wait_rank(fx.s, &hi), 0);
    assert_int_equal(sl_sched_wait_rank(fx.s, &total), 0);
}

/* Salus's tie rule: equal remaining time -> the later arrival; same arrival
 * time -> admission order. */
static void test_srtf_tie_rule(void **state)
{
    (void) state;
    make("srtf", false);
    sl_sched_job p, q, r, u1, u2;
    add_decl(&p, 1, 1000, 0, 100);
    add_decl(&q, 2, 1000, 0, 200);
    add_decl(&r, 3, 1000, 0, 200); /* same time as q, admitted after it */
    add_decl(&u1, 4, 0, 0, 300);
    add_decl(&u2, 5, 0, 0, 250);
    enq(&u1, 3, 300);
    enq(&u2, 4, 300);
    enq(&p, 0, 300);
    enq(&q, 1, 300);
    enq(&r, 2, 300);
    /* A zero charge keeps the remaining times equal: the order is the tie
     * rule alone. fifo would run p, q, r. */
    run_one(0, &q, 0, 400);
    run_one(0, &r, 0, 400);
    run_one(0, &p, 0, 400);
    /* Undeclared jobs: fifo among themselves (u2 was admitted after u1
     * even though its clock reading is earlier). */
    run_one(0, &u1, 0, 400);
    run_one(0, &u2, 0, 400);

    /* Once a tied job has run, it is strictly shorter and keeps the lane. */
    enq(&p, 0, 500);
    enq(&q, 1, 500);
    enq(&q, 1, 500);
    run_one(0, &q, 1, 600); /* tie: q newer than p */
    run_one(0, &q, 1, 700); /* 999 < 1000 */
    run_one(0, &p, 1, 800);
}

static void test_srtf_strict_idles(void **state)
{
    (void) state;
    make("srtf", true);
    sl_sched_job a, b, u;
    add_decl(&a, 1, 100, 0, 0);
    add_decl(&b, 2, 1000, 0, 0);
    enq(&b, 1, 1);
    enq(&b, 1, 1);
    /* A is the shortest and has nothing queued: the lane idles (paper). */
    assert_null(pick(0, 2, NULL));
    sl_sched_set_policy(fx.s, &sl_policy_srtf, false);
    run_one(0, &b, 10, 3); /* work-conserving: B */
    sl_sched_set_policy(fx.s, &sl_policy_srtf, true);
    assert_null(pick(0, 20, NULL));
    enq(&a, 0, 21);
    run_one(0, &a, 100, 22); /* a: 0 left, still the shortest */
    assert_null(pick(0, 130, NULL));
    (void) release_list(sl_sched_job_remove(fx.s, &a));
    run_one(0, &b, 10, 140);         /* only once A leaves */
    assert_null(pick(0, 150, NULL)); /* B drained */

    /* Undeclared jobs only: the oldest owns the lane, as strict fifo. */
    (void) release_list(sl_sched_job_remove(fx.s, &b));
    add_decl(&u, 3, 0, 0, 160);
    add_decl(&b, 2, 0, 0, 161);
    enq(&b, 1, 162);
    assert_null(pick(0, 163, NULL));
    enq(&u, 2, 164);
    run_one(0, &u, 1, 165);
    assert_null(pick(0, 170, NULL));
}

/* ---- priority ---- */

static void test_priority_classes(void **state)
{
    (void) state;
    make("priority", false);
    sl_sched_job h1, h2, l1, l2;
    add_prio(&h1, 1, 2, 2.0, 0);
    add_prio(&l1, 2, 1, 1.0, 0);
    add_prio(&h2, 3, 2, 1.0, 0);
    add_prio(&l2, 4, 0, 1.0, 0);
    for (int i = 0; i < 4; i++) {
        enq(&h1, 0, 0);
        enq(&h2, 1, 0);
        enq(&l1, 2, 0);
        enq(&l2, 3, 0);
    }
    /* Class 2 first, fair by attained / weight inside it (h1 weighs 2):
     * h1 0|0 h2, h1 50|0, h1 50|100, h1 100|100 (tie: h1 arrived first),
     * h1 150|100, h1 150|200. */
    run_one(0, &h1, 100, 1);
    run_one(0, &h2, 100, 2);
    run_one(0, &h1, 100, 3);
    run_one(0, &h1, 100, 4);
    run_one(0, &h2, 100, 5);
    /* Weight changed at run time: h2 now weighs 4 (200 / 4 = 50 < 150). */
    sl_sched_job_set_weight(fx.s, &h2, 4);
    run_one(0, &h2, 100, 6);
    run_one(0, &h2, 100, 7); /* h2 drained */
    run_one(0, &h1, 100, 8); /* h1 drained */
    /* Lower classes only when no higher job has work. */
    run_one(0, &l1, 100, 9);
    enq(&h2, 1, 10); /* a class-2 arrival overtakes at the next boundary */
    run_one(0, &h2, 100, 11);
    run_one(0, &l1, 100, 12);
    /* Priority raised at run time: l2 jumps to the top. */
    sl_sched_job_set_priority(fx.s, &l2, 5);
    run_one(0, &l2, 100, 13);
    run_one(0, &l2, 100, 14);
    sl_sched_job_set_priority(fx.s, &l2, 0);
    run_one(0, &l1, 100, 15);
    run_one(0, &l1, 100, 16);
    run_one(0, &l2, 100, 17);
    run_one(0, &l2, 100, 18);
    assert_null(pick(0, 19, NULL));
    /* Strict is ignored: a higher class with nothing queued does not hold
     * the lane. */
    sl_sched_set_policy(fx.s, &sl_policy_priority, true);
    enq(&l2, 3, 20);
    run_one(0, &l2, 1, 21);
}

/* ---- properties ---- */

static void test_core_property_pack(void **state)
{
    (void) state;
    core_property("pack", 101);
}

static void test_core_property_rr(void **state)
{
    (void) state;
    core_property("rr", 102);
}

static void test_core_property_srtf(void **state)
{
    (void) state;
    core_property("srtf", 103);
}

static void test_core_property_priority(void **state)
{
    (void) state;
    core_property("priority", 104);
}

/* The policy changes before every step: no policy depends on state another
 * left behind, and work conservation holds across every change. */
static void test_core_property_policy_churn(void **state)
{
    (void) state;
    core_property(NULL, 105);
}

/* Counters rr reads are kept under every policy: switching to rr after a
 * membership change sees the counts since that change, not since the start;
 * switching back to fair sees the device time rr charged. */
static void test_policy_change_keeps_counts(void **state)
{
    (void) state;
    make("fair", false);
    sl_sched_job a, b, c;
    add(&a, 1, 1, 0, 0);
    add(&b, 2, 1, 0, 0);
    for (int i = 0; i < 8; i++) {
        enq(&a, 0, 0);
        enq(&b, 1, 0);
    }
    run_one(0, &a, 10, 1);
    run_one(0, &b, 10, 2);
    run_one(0, &a, 10, 3);
    run_one(0, &b, 10, 4); /* a 20, b 20 attained; 2 iterations each */
    add(&c, 3, 1, 0, 5);   /* membership change: rr counts restart */
    for (int i = 0; i < 8; i++)
        enq(&c, 2, 5);
    run_one(0, &c, 10, 6);
    run_one(0, &c, 10, 7); /* c 20: ties with a and b */
    run_one(0, &a, 10, 8); /* a 30 */
    /* Since C joined: a=1, b=0, c=2. rr picks b, then a (a=1, b=1: a first
     * by arrival). Had the counts been since the start (a=3, b=2, c=2) it
     * would pick b, then c. */
    sl_sched_set_policy(fx.s, &sl_policy_rr, false);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &a), 1);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &b), 0);
    assert_int_equal(sl_sched_job_lane_iterations(fx.s, &c), 2);
    run_one(0, &b, 10, 9);
    run_one(0, &a, 10, 10);
    run_one(0, &b, 10, 11); /* a=2 b=2 c=2 */
    run_one(0, &a, 10, 12);
    run_one(0, &b, 10, 13);
    run_one(0, &c, 10, 14);
    /* And back: fair sees the attained time rr charged: a 50, b 50, c 30. */
    sl_sched_set_policy(fx.s, &sl_policy_fair, false);
    run_one(0, &c, 10, 15);
    run_one(0, &c, 10, 16);
    run_one(0, &a, 10, 17); /* all at 50: the earliest arrival */
    /* srtf with nothing declared is fifo by arrival. */
    sl_sched_set_policy(fx.s, &sl_policy_srtf, false);
    run_one(0, &a, 10, 18);
}

int sched_group_policies(void)
{
    const struct CMUnitTest tests[] = {
        SCHED_TEST(test_pack_scripted),
        SCHED_TEST(test_rr_scripted),
        SCHED_TEST(test_rr_noop_set_lane),
        SCHED_TEST(test_rr_no_starvation),
        SCHED_TEST(test_srtf_scripted),
        SCHED_TEST(test_srtf_tie_rule),
        SCHED_TEST(test_srtf_strict_idles),
        SCHED_TEST(test_wait_rank),
        SCHED_TEST(test_priority_classes),
        SCHED_TEST(test_core_property_pack),
        SCHED_TEST(test_core_property_rr),
        SCHED_TEST(test_core_property_srtf),
        SCHED_TEST(test_core_property_priority),
        SCHED_TEST(test_core_property_policy_churn),
        SCHED_TEST(test_policy_change_keeps_counts),
    };
    return cmocka_run_group_tests_name("sched policies", tests, NULL, NULL);
}
