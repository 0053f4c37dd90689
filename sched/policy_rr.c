/* rr: round robin over iterations. The lane runs the job that finished the
 * fewest iterations since the lane's membership last changed (a job joined
 * or left the lane); ties go to the earlier arrival. With every job
 * backlogged this is a strict rotation in arrival order; a job that was idle
 * for a while catches up only as far as the others' count since the last
 * membership change, and a newcomer resets everyone to zero, so it neither
 * starves nor monopolises the lane paying back history it did not share.
 * The one caveat follows from the reset plus the arrival tie break: if jobs
 * join or leave a lane more often than once per rotation, the latest
 * arrivals are reset before their turn comes round again and wait for the
 * membership to settle (tested: with a join or leave every 10 picks, no job
 * waits more than two rotations).
 *
 * The counts are the core's (sl_sched_job_lane_iterations), kept for every
 * job under every policy and reset lazily per lane epoch: switching to rr at
 * run time sees exactly the counts it would have had. Work-conserving; no
 * strict variant. */
#include "scheduler.h"

static sl_sched_job *rr_pick(const sl_sched *s, uint32_t lane, uint64_t now, bool strict)
{
    (void) now;
    (void) strict;
    sl_sched_job *best = NULL;
    uint64_t best_done = 0;
    /* Admission order plus a strict "<" gives ties to the earlier arrival. */
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j)) {
        if (!sl_sched_job_ready(j, lane))
            continue;
        uint64_t done = sl_sched_job_lane_iterations(s, j);
        if (!best || done < best_done) {
            best = j;
            best_done = done;
        }
    }
    return best;
}

const sl_policy_ops sl_policy_rr = {
    .name = "rr",
    .pick = rr_pick,
    .has_strict = false,
};
