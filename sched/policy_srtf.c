/* srtf: shortest remaining time first, at iteration boundaries.
 *
 * Remaining time (sl_sched_job_remaining, computed by the core):
 *  - expected_total_ns declared: expected_total_ns - attained_ns (>= 0);
 *    it wins when both are declared, being the more direct statement.
 *  - only expected_iterations declared: remaining iterations x the job's
 *    measured mean iteration time (attained_ns / iterations_done). Before
 *    the job's first completion the neutral estimate is the scheduler-wide
 *    mean iteration time over every completed iteration of any job
 *    (sl_sched_mean_iteration_ns): the job is assumed typical until it has
 *    shown otherwise. Before anything at all has completed that mean is 0,
 *    so the job ranks as if nearly done and runs one iteration, which is
 *    what measures it (probe first).
 *  - nothing declared: ranks after every job that declared something;
 *    among themselves such jobs run in arrival order (fifo).
 *
 * Tie rule, from Salus. The Salus repository (SymbioticLab/Salus) has no
 * scheduler named srtf: its registry maps "preempt" (and, as a marked hack,
 * "rr" and "fifo") to PreemptScheduler, src/execution/scheduler/impl/
 * preempt.cpp, its only scheduler that orders jobs for preemption. It
 * ranks sessions by a counter stamped on each batch of sessions admitted in
 * one scheduling round, highest first: the most recently admitted job
 * preempts the older ones. Sessions of the same batch share the counter, so
 * their order is that of the session list, to which the executor appends new
 * sessions in admission order (src/execution/engine/taskexecutor.cpp,
 * m_sessions.splice(end, m_newSessions)); std::sort is not stable in
 * general, but on the handful of sessions Salus sorts (libstdc++ finishes
 * with an insertion sort and does nothing else up to 16 elements) that
 * order survives. Our ranking key is
 * the remaining time, so Salus's key becomes our tie rule:
 *   1. equal remaining time -> the later arrival (larger arrival_ns) first:
 *      the newcomer preempts, as in PreemptScheduler;
 *   2. same arrival time (admitted in the same round) -> admission order
 *      (arrival_seq), as Salus's session list.
 * The remaining-time comparison itself is exact (doubles built from integer
 * nanoseconds), so ties are real ties, e.g. two fresh jobs declaring the
 * same total.
 *
 * strict = the paper's non-work-conserving behaviour: the job with the least
 * remaining time owns the lane even while it has nothing queued, and the
 * lane idles rather than lend the device to a longer job (Salus stops its
 * candidate loop after the first session unless work conservation is on:
 * PreemptScheduler::reportScheduleResult). Non-strict (the default) skips to
 * the best job that has work.
 *
 * Between tenants srtf shares first (sched/share.c): the tenant with the
 * least device time per weight runs, and the order above holds among its
 * own jobs (strict too: inside the tenant). */
#include "scheduler.h"

typedef struct rank {
    bool declared; /* declared jobs rank before undeclared ones */
    double remaining_ns;
} rank;

static rank rank_of(const sl_sched *s, const sl_sched_job *j)
{
    rank r = {.declared = false, .remaining_ns = 0};
    r.declared = sl_sched_job_remaining(s, j, &r.remaining_ns);
    return r;
}

/* Whether a ranks strictly before b. */
static bool before(const sl_sched_job *a, rank ra, const sl_sched_job *b, rank rb)
{
    if (ra.declared != rb.declared)
        return ra.declared;
    if (ra.declared) {
        if (ra.remaining_ns != rb.remaining_ns)
            return ra.remaining_ns < rb.remaining_ns;
        if (a->arrival_ns != b->arrival_ns)
            return a->arrival_ns > b->arrival_ns; /* Salus: the newcomer first */
    }
    return a->arrival_seq < b->arrival_seq;
}

/* Ranks any two jobs, queued or not: strict and anticipation compare
 * jobs between iterations too. */
static bool srtf_before(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b)
{
    return before(a, rank_of(s, a), b, rank_of(s, b));
}

/* Jobs waiting for memory go in shortest declared total first, so
 * admission does not undo the order srtf keeps on the device. Only a
 * declared total is a length before the job has run: declared iterations
 * have no time per iteration yet (the mean of other jobs moves, and ranks
 * taken at different moments would not compare), so such jobs come after
 * every declared total, and jobs that declared nothing after them; each
 * group in arrival order. */
static uint64_t srtf_wait_rank(const sl_sched_job *j)
{
    if (j->expected_total_ns > 0)
        return j->expected_total_ns < UINT64_MAX - 2 ? j->expected_total_ns : UINT64_MAX - 2;
    return j->expected_iterations > 0 ? UINT64_MAX - 1 : UINT64_MAX;
}

const sl_policy_ops sl_policy_srtf = {
    .name = "srtf",
    .before = srtf_before,
    .anticipates = true,
    .has_strict = true,
    .wait_rank = srtf_wait_rank,
};
