/* fair: least attained device time divided by weight (Salus's fair sharing,
 * counted in device time rather than wall time so that a job waiting on its
 * client is not charged). Between tenants first (sched/share.c: device time
 * per tenant weight), then between one tenant's jobs by this order; ties go
 * to the earlier arrival, which keeps the choice deterministic. A job that
 * ranks first and whose client is between iterations keeps its claim for a
 * moment (anticipation), so device time follows the weights whatever the
 * iteration sizes and client gaps. */
#include "scheduler.h"

/* Weight 0 means 1; negative or NaN weights are treated the same way rather
 * than inverting or poisoning the order. */
static double share(const sl_sched_job *j)
{
    double w = j->weight > 0 ? j->weight : 1.0;
    return (double) j->attained_ns / w;
}

static bool fair_before(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b)
{
    (void) s;
    return share(a) < share(b);
}

const sl_policy_ops sl_policy_fair = {
    .name = "fair",
    .before = fair_before,
    .anticipates = true,
    .has_strict = false, /* fair is work-conserving in the paper too */
};
