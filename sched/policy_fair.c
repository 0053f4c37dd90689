/* fair: least attained device time divided by weight (Salus's fair sharing,
 * counted in device time rather than wall time so that a job waiting on its
 * client is not charged). Ties go to the earlier arrival, which keeps the
 * choice deterministic. */
#include "scheduler.h"

/* Weight 0 means 1; negative or NaN weights are treated the same way rather
 * than inverting or poisoning the order. */
static double share(const sl_sched_job *j)
{
    double w = j->weight > 0 ? j->weight : 1.0;
    return (double) j->attained_ns / w;
}

static sl_sched_job *fair_pick(const sl_sched *s, uint32_t lane, uint64_t now, bool strict)
{
    (void) now;
    (void) strict; /* fair is work-conserving in the paper too */
    sl_sched_job *best = NULL;
    double best_share = 0;
    /* Admission order plus a strict "<" gives ties to the earlier arrival. */
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j)) {
        if (!sl_sched_job_ready(j, lane))
            continue;
        double sh = share(j);
        if (!best || sh < best_share) {
            best = j;
            best_share = sh;
        }
    }
    return best;
}

const sl_policy_ops sl_policy_fair = {
    .name = "fair",
    .pick = fair_pick,
    .has_strict = false,
};
