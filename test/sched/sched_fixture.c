/* The shared fixture of the sched/ tests (see sched_fixture.h). */
#include "sched_fixture.h"

#include <string.h>

#include "sl_alloc.h"

fixture fx;
uint64_t rng_state;

int sched_setup(void **state)
{
    (void) state;
    memset(&fx, 0, sizeof(fx));
    return 0;
}

int sched_teardown(void **state)
{
    (void) state;
    sl_sched_destroy(fx.s);
    fx.s = NULL;
    sl_alloc_fail_after(0);
    return 0;
}

void make(const char *policy, bool strict)
{
    const sl_policy_ops *p = sl_sched_policy_find(policy);
    assert_non_null(p);
    assert_sl_ok(sl_sched_create(p, strict, &fx.s));
}

void add(sl_sched_job *j, uint64_t id, double weight, uint32_t lane, uint64_t now)
{
    memset(j, 0, sizeof(*j));
    j->id = id;
    j->weight = weight;
    j->lane = lane;
    sl_sched_job_add(fx.s, j, now);
}

titem *enq(sl_sched_job *j, int idx, uint64_t now)
{
    titem *t = NULL;
    for (int n = 0; n < MAX_ITEMS && !t; n++, fx.cursor = (fx.cursor + 1) % MAX_ITEMS)
        if (!fx.items[fx.cursor].in_use)
            t = &fx.items[fx.cursor];
    assert_non_null(t);
    t->in_use = true;
    t->job = idx;
    t->seq = fx.next_seq[idx]++;
    sl_sched_enqueue(fx.s, j, &t->item, now);
    return t;
}

titem *as_titem(sl_sched_item *it)
{
    return (titem *) ((char *) it - offsetof(titem, item));
}

int release_list(sl_sched_item *list)
{
    int n = 0;
    for (; list; list = list->next, n++)
        as_titem(list)->in_use = false;
    return n;
}

sl_sched_job *pick(uint32_t lane, uint64_t now, titem **t)
{
    sl_sched_job *j = NULL;
    sl_sched_item *it = NULL;
    if (!sl_sched_next(fx.s, lane, now, &j, &it))
        return NULL;
    assert_non_null(j);
    assert_non_null(it);
    assert_null(it->next);
    assert_true(j->running);
    assert_ptr_equal(sl_sched_lane_running(fx.s, lane), j);
    /* The scheduler no longer links it: free for reuse (its fields stay
     * readable until the next enq). */
    as_titem(it)->in_use = false;
    if (t)
        *t = as_titem(it);
    return j;
}

void run_one_at(int line, uint32_t lane, sl_sched_job *want, uint64_t device_ns, uint64_t now)
{
    sl_sched_job *got = pick(lane, now, NULL);
    if (got != want)
        fail_msg("line %d: picked job %lld, want job %lld", line, got ? (long long) got->id : -1LL,
                 want ? (long long) want->id : -1LL);
    if (!got)
        return;
    sl_sched_complete(fx.s, got, device_ns, now + device_ns);
    assert_false(got->running);
    assert_null(sl_sched_lane_running(fx.s, lane));
}

uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t) (rng_state >> 33);
}

uint32_t rnd_range(uint32_t lo, uint32_t hi)
{
    return lo + rnd() % (hi - lo + 1);
}

/* A NULL policy switches to a random non-strict policy before every step,
 * which checks that no policy relies on state another one left behind. */
void core_property(const char *policy, uint64_t seed)
{
    enum { N_JOBS = 8, LANES = 3, STEPS = 20000 };
    static const char *const all[] = {"fifo", "fair", "pack", "rr", "srtf", "priority"};
    make(policy ? policy : "fifo", false);
    rng_state = seed;
    sl_sched_job jobs[N_JOBS];
    bool live[N_JOBS] = {0};
    int queued[N_JOBS] = {0};
    int next_out[N_JOBS] = {0}; /* next seq expected from each job */
    sl_sched_job *running[LANES] = {0};
    uint64_t now = 0;
    int id = 0;

    for (int step = 0; step < STEPS; step++) {
        now += 7;
        if (!policy)
            sl_sched_set_policy(fx.s, sl_sched_policy_find(all[rnd() % 6]), false);
        uint32_t r = rnd() % 20;
        int idx = (int) (rnd() % N_JOBS);
        if (r < 2) { /* admit into a free slot, with random declarations */
            if (live[idx])
                continue;
            sl_sched_job *j = &jobs[idx];
            memset(j, 0, sizeof(*j));
            j->id = (uint64_t) id++;
            j->weight = (double) rnd_range(0, 3);
            j->lane = rnd() % LANES;
            j->priority = (int) rnd_range(0, 2);
            uint32_t decl = rnd() % 3;
            j->expected_total_ns = decl == 0 ? rnd_range(1, 20000) : 0;
            j->expected_iterations = decl == 1 ? rnd_range(1, 30) : 0;
            sl_sched_job_add(fx.s, j, now);
            live[idx] = true;
            queued[idx] = 0;
            next_out[idx] = fx.next_seq[idx];
        } else if (r < 3) { /* leave, unless running */
            if (!live[idx] || jobs[idx].running)
                continue;
            int n = 0;
            int expect = next_out[idx];
            sl_sched_item *list = sl_sched_job_remove(fx.s, &jobs[idx]);
            for (sl_sched_item *it = list; it; it = it->next) {
                assert_int_equal(as_titem(it)->job, idx);
                assert_int_equal(as_titem(it)->seq, expect++);
                n++;
            }
            assert_int_equal(n, queued[idx]);
            assert_int_equal(release_list(list), n);
            live[idx] = false;
        } else if (r < 10) { /* submit */
            if (!live[idx])
                continue;
            enq(&jobs[idx], idx, now);
            queued[idx]++;
        } else if (r < 15) { /* complete what runs on a lane */
            uint32_t lane = rnd() % LANES;
            if (!running[lane])
                continue;
            sl_sched_complete(fx.s, running[lane], rnd_range(1, 1000), now);
            running[lane] = NULL;
        } else { /* lane boundary */
            uint32_t lane = rnd() % LANES;
            titem *t = NULL;
            sl_sched_job *got = pick(lane, now, &t);
            if (running[lane]) {
                assert_null(got); /* one item per lane */
                continue;
            }
            bool has_work = false;
            for (int k = 0; k < N_JOBS; k++)
                has_work |= live[k] && jobs[k].lane == lane && queued[k] > 0;
            if (!got) {
                assert_false(has_work); /* work conservation */
                continue;
            }
            assert_int_equal(got->lane, lane);
            int k = (int) (got - jobs);
            assert_int_equal(t->job, k);
            assert_int_equal(t->seq, next_out[k]++);
            queued[k]--;
            running[lane] = got;
        }
        for (int k = 0; k < N_JOBS; k++)
            if (live[k])
                assert_int_equal(jobs[k].n_queued, queued[k]);
    }
}
