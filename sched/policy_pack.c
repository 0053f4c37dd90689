/* pack: arrival order inside a lane. The lane runs whichever queued item was
 * submitted first, whoever it belongs to (ties cannot happen: items carry a
 * global submission sequence). The packing itself comes from many lanes: the
 * memory planner places jobs whose memory fits together on separate lanes,
 * and each lane simply serves its items in the order they came.
 *
 * Salus's pack scheduler (SymbioticLab/Salus,
 * src/execution/scheduler/impl/pack.cpp) visits every session in session
 * order and submits everything each one has queued, never stopping early: it
 * is work-conserving by construction, so pack has no strict variant here
 * either. With one item per lane, "everything queued, in order" becomes
 * "the oldest queued item first". */
#include "scheduler.h"

static sl_sched_job *pack_pick(const sl_sched *s, uint32_t lane, uint64_t now, bool strict)
{
    (void) now;
    (void) strict;
    sl_sched_job *best = NULL;
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j)) {
        if (!sl_sched_job_ready(j, lane))
            continue;
        if (!best || j->head->seq < best->head->seq)
            best = j;
    }
    return best;
}

const sl_policy_ops sl_policy_pack = {
    .name = "pack",
    .pick = pack_pick,
    .has_strict = false,
};
