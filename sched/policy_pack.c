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
 * "the oldest queued item first". Among tenants, the one with the least
 * device time per weight goes first (sched/share.c); the order above holds
 * among one tenant's jobs. */
#include "scheduler.h"

/* Only ready jobs are compared (their head items): pack keeps no claim for
 * a job between iterations inside a tenant; between tenants it shares like
 * every tenant-sharing policy (sched/share.c). */
static bool pack_before(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b)
{
    (void) s;
    return a->head && b->head && a->head->seq < b->head->seq;
}

const sl_policy_ops sl_policy_pack = {
    .name = "pack",
    .before = pack_before,
    .has_strict = false,
};
