/* priority: strict priority classes, fair inside a class. The lane runs a
 * job of the highest job->priority (larger first) among those with queued
 * work; inside that class the one with the least attained device time per
 * unit of weight (as fair: weight <= 0 or NaN counts as 1); ties go to the
 * earlier arrival. A lower class runs only when no higher-class job on the
 * lane has queued work, and may then be overtaken at the next boundary.
 *
 * Work-conserving only: strict is ignored. Keeping a lane idle for a
 * high-priority job that has nothing queued is the executor's business at op
 * granularity (sched/gaps.h: low-priority ops into predicted gaps), not a
 * whole-iteration reservation here. Priority and weight may change at run
 * time (sl_sched_job_set_priority / _set_weight); the next pick uses them. */
#include "scheduler.h"

#include <limits.h>

static double share(const sl_sched_job *j)
{
    double w = j->weight > 0 ? j->weight : 1.0;
    return (double) j->attained_ns / w;
}

static sl_sched_job *priority_pick(const sl_sched *s, uint32_t lane, uint64_t now, bool strict)
{
    (void) now;
    (void) strict;
    sl_sched_job *best = NULL;
    double best_share = 0;
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j)) {
        if (!sl_sched_job_ready(j, lane))
            continue;
        double sh = share(j);
        /* Admission order plus strict comparisons: ties to the earlier. */
        if (!best || j->priority > best->priority ||
            (j->priority == best->priority && sh < best_share)) {
            best = j;
            best_share = sh;
        }
    }
    return best;
}

/* Higher priority classes are admitted first when memory is short; within
 * a class, arrival order. */
static uint64_t priority_wait_rank(const sl_sched_job *j)
{
    return (uint64_t) ((int64_t) INT_MAX - (int64_t) j->priority);
}

const sl_policy_ops sl_policy_priority = {
    .name = "priority",
    .pick = priority_pick,
    .has_strict = false,
    .caps = SL_POLICY_EXCLUSIVE_LANES | SL_POLICY_STEPWISE | SL_POLICY_GAP_FILL,
    .wait_rank = priority_wait_rank,
};
