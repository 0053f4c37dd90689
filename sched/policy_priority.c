/* priority: strict priority classes, fair inside a class. The lane runs a
 * job of the highest job->priority (larger first) among those with queued
 * work; inside that class the one with the least attained device time per
 * unit of weight (as fair: weight <= 0 or NaN counts as 1), between tenants
 * first and then between one tenant's jobs (sched/share.c); ties go to the
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
#include <stdbool.h>

static double share(const sl_sched_job *j)
{
    double w = j->weight > 0 ? j->weight : 1.0;
    return (double) j->attained_ns / w;
}

/* Inside one class and one tenant: fair. The class itself comes first
 * (.classes), then the tenants' share (sched/share.c). */
static bool priority_before(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b)
{
    (void) s;
    return share(a) < share(b);
}

/* Higher priority classes are admitted first when memory is short; within
 * a class, arrival order. */
static uint64_t priority_wait_rank(const sl_sched_job *j)
{
    return (uint64_t) ((int64_t) INT_MAX - (int64_t) j->priority);
}

const sl_policy_ops sl_policy_priority = {
    .name = "priority",
    .before = priority_before,
    .anticipates = true,
    .classes = true,
    .has_strict = false,
    .caps = SL_POLICY_EXCLUSIVE_LANES | SL_POLICY_STEPWISE | SL_POLICY_GAP_FILL,
    .wait_rank = priority_wait_rank,
};
