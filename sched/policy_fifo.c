/* fifo: the oldest admitted job on the lane runs alone until it leaves (the
 * Salus no-sharing baseline). The job list is already in admission order, so
 * the first job on the lane is the oldest. */
#include "scheduler.h"

static sl_sched_job *fifo_pick(const sl_sched *s, uint32_t lane, uint64_t now, bool strict)
{
    (void) now;
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j)) {
        if (j->lane != lane)
            continue;
        /* Strict is the paper's behaviour: the oldest job owns the lane even
         * while it has nothing queued, so younger jobs wait and the lane
         * idles. Otherwise fall through to the oldest job that has work. */
        if (strict)
            return sl_sched_job_ready(j, lane) ? j : NULL;
        if (sl_sched_job_ready(j, lane))
            return j;
    }
    return NULL;
}

const sl_policy_ops sl_policy_fifo = {
    .name = "fifo",
    .pick = fifo_pick,
    .has_strict = true,
};
