/* Sharing between tenants, then between one tenant's jobs, and the
 * anticipation that makes the share one of device time rather than of
 * races for a free lane (scheduler.h).
 *
 * Tenants are ranked by their virtual time: device time charged divided by
 * weight, plus what their iterations in flight are expected to take. The
 * expectation matters across lanes: without it a tenant with many lanes
 * would start an iteration on every one of them before the first completion
 * told the scheduler it was ahead. A tenant that comes back from idle is
 * raised to within LAG_NS of the least-served tenant still claiming the
 * device, so a long absence is not paid back by monopolising it; inside
 * that lag a tenant that was short-changed catches up.
 *
 * A claim is what keeps another tenant's lanes held: a job that runs, has
 * an item queued, or is between iterations inside its anticipation window.
 * Holding a lane for a running or queued job elsewhere lasts until the next
 * start or completion, when the caller kicks held lanes again; holding it
 * for a job between iterations lasts until its window closes. Both only
 * hold for a tenant with less virtual time, so the least-served claiming
 * tenant is never held: somebody always runs. */
#include "sched_internal.h"

#include <string.h>

/* How far behind the least-served claiming tenant a tenant coming back from
 * idle may start (device ns at weight 1): a few iterations of catching up,
 * not the whole absence. */
#define LAG_NS (50ull * 1000 * 1000)
/* Idle: nothing of the tenant arrived or completed for this long. Far
 * longer than any claim between iterations, so a client that is merely
 * slow keeps what it is owed. */
#define TENANT_IDLE_NS (500ull * 1000 * 1000)
/* Client gaps needed before a job's claim outlives its completion. */
#define MIN_GAP_SAMPLES 4
/* Added to the gap percentile: the waking of the thread that delivers the
 * client's next item. */
#define GAP_SLACK_NS (20ull * 1000)

static double weight_of(const sl_sched_tenant *t)
{
    return t->weight > 0 ? t->weight : 1.0; /* also NaN */
}

sl_sched_tenant *sl_sched_job_tenant(const sl_sched *s, const sl_sched_job *job)
{
    return job->tenant ? job->tenant : (sl_sched_tenant *) &s->default_tenant;
}

double sl_sched_tenant_vtime(const sl_sched_tenant *t)
{
    return t->vtime + (double) t->in_flight_ns / weight_of(t);
}

uint32_t sl_sched_tenants(const sl_sched *s)
{
    return s->n_tenants;
}

void sl_sched_set_anticipation(sl_sched *s, uint64_t bound_ns)
{
    s->anticipate_max_ns = bound_ns;
}

uint64_t sl_sched_lane_hold(const sl_sched *s, uint32_t lane)
{
    return lane < s->n_lanes ? s->lanes[lane].hold_ns : 0;
}

void sl_sched_lane_unhold(sl_sched *s, uint32_t lane)
{
    if (lane < s->n_lanes && s->lanes[lane].hold_ns) {
        s->lanes[lane].hold_ns = 0;
        s->n_held--;
    }
}

uint32_t sl_sched_held_lanes(const sl_sched *s)
{
    return s->n_held;
}

uint64_t sl_sched_hold_deadline(const sl_sched *s)
{
    uint64_t first = 0;
    if (!s->n_held)
        return 0;
    for (uint32_t l = 0; l < s->n_lanes; l++) {
        uint64_t h = s->lanes[l].hold_ns;
        if (h && h != UINT64_MAX && (!first || h < first))
            first = h;
    }
    return first;
}

/* What one iteration of job is expected to take: its own mean, else the
 * mean of everything completed so far (0 before anything completed). */
static uint64_t expected_ns(const sl_sched *s, const sl_sched_job *job)
{
    uint64_t mean = sl_sched_job_mean_iteration_ns(job);
    return mean ? mean : sl_sched_mean_iteration_ns(s);
}

/* The longest claim worth keeping against running `other` instead: the
 * bound, and half of other's iteration (waiting longer than that costs
 * more than letting other run once and the owed job catch up after). */
static uint64_t claim_limit(const sl_sched *s, const sl_sched_job *other)
{
    uint64_t limit = s->anticipate_max_ns;
    uint64_t half = other ? expected_ns(s, other) / 2 : 0;
    return half && half < limit ? half : limit;
}

/* The longest claim of a tenant on the device between its iterations: the
 * scheduler's bound, without the other job's iteration, since holding
 * lanes for a tenant costs only the tenants ahead of it, never the tenant
 * itself. That covers clients slowed by the host they share with the
 * device (the cpu device takes the clients' cores) while a client that
 * thinks for longer, an inference every 100 ms, holds nobody up. */
static uint64_t tenant_claim_limit(const sl_sched *s)
{
    return s->anticipate_max_ns;
}

/* Whether job, between iterations, still claims the device at now under a
 * claim limit; *until is when the claim ends, its window cut to the limit.
 * Inside a tenant that is all: a client slower than the limit costs at most
 * the limit per iteration of its own, and its gaps shrink once it stops
 * losing races for the host's cores to the other job's iteration (on cpu
 * the device's cores are the clients'). A tenant's claim (tenant) is
 * longer, so it lasts twice the job's window, that the rare long gap does
 * not hand its share to the others, but only for a client whose median gap
 * is within the limit: the others do not wait on one that asks for less. */
static bool anticipated(const sl_sched *s, const sl_sched_job *job, uint64_t now, uint64_t limit,
                        bool tenant, uint64_t *until)
{
    if (!s->anticipate_max_ns || job->running || job->n_queued || !job->gap_from_ns ||
        !job->anticipate_ns || (tenant && job->gap_median_ns + GAP_SLACK_NS > limit))
        return false;
    uint64_t window = tenant ? 2 * job->anticipate_ns : job->anticipate_ns;
    uint64_t end = job->gap_from_ns + (window < limit ? window : limit);
    if (now >= end)
        return false;
    *until = end;
    return true;
}

/* Records one client gap of job and recomputes its anticipation window,
 * the longest of the latest gaps plus an eighth and the slack (a miss
 * hands the lane to the other job for a whole iteration, while waiting
 * costs at most the limit), and its median gap. */
static void record_gap(sl_sched_job *job, uint64_t gap_ns)
{
    job->gaps_ns[job->n_gaps % SL_SCHED_GAP_SAMPLES] =
        gap_ns < UINT32_MAX ? (uint32_t) gap_ns : UINT32_MAX;
    job->n_gaps++;
    uint32_t n = job->n_gaps < SL_SCHED_GAP_SAMPLES ? job->n_gaps : SL_SCHED_GAP_SAMPLES;
    if (n < MIN_GAP_SAMPLES) {
        job->anticipate_ns = 0;
        job->gap_median_ns = 0;
        return;
    }
    uint32_t sorted[SL_SCHED_GAP_SAMPLES];
    memcpy(sorted, job->gaps_ns, n * sizeof sorted[0]);
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: at most 16 */
        uint32_t v = sorted[i], k = i;
        for (; k > 0 && sorted[k - 1] > v; k--)
            sorted[k] = sorted[k - 1];
        sorted[k] = v;
    }
    uint64_t longest = sorted[n - 1];
    job->anticipate_ns = longest + longest / 8 + GAP_SLACK_NS;
    job->gap_median_ns = sorted[(n - 1) / 2];
}

/* The order inside one tenant: the policy's, ties to the earlier arrival. */
static bool job_before(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b)
{
    if (s->policy->before(s, a, b))
        return true;
    if (s->policy->before(s, b, a))
        return false;
    return a->arrival_seq < b->arrival_seq;
}

/* The order among ready jobs of a lane: class, then the tenants' virtual
 * time (ties to the tenant that came first), then the tenant's own order. */
static bool ranks_before(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b)
{
    if (s->policy->classes && a->priority != b->priority)
        return a->priority > b->priority;
    const sl_sched_tenant *ta = sl_sched_job_tenant(s, a), *tb = sl_sched_job_tenant(s, b);
    if (ta != tb) {
        double va = sl_sched_tenant_vtime(ta), vb = sl_sched_tenant_vtime(tb);
        if (va != vb)
            return va < vb;
        return ta->seq < tb->seq;
    }
    return job_before(s, a, b);
}

/* Earliest of two holds (0 = none, UINT64_MAX = until an event). */
static uint64_t earlier(uint64_t h, uint64_t until)
{
    return !h || until < h ? until : h;
}

sl_sched_job *sl_share_pick(const sl_sched *s, uint32_t lane, uint64_t now, uint64_t *hold_ns)
{
    const sl_policy_ops *p = s->policy;
    sl_sched_job *best = NULL;
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j))
        if (sl_sched_job_ready(j, lane) && (!best || ranks_before(s, j, best)))
            best = j;
    if (!best)
        return NULL;
    const sl_sched_tenant *bt = sl_sched_job_tenant(s, best);

    /* strict (srtf): inside the tenant, the first job of its class owns the
     * lane even with nothing queued; its own next item kicks the lane */
    if (s->strict && p->has_strict) {
        for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j))
            if (j != best && sl_sched_job_tenant(s, j) == bt &&
                (!p->classes || j->priority == best->priority) && job_before(s, j, best))
                return NULL;
    }

    uint64_t limit = claim_limit(s, best), until, hold = 0; /* inside the tenant */
    double v = sl_sched_tenant_vtime(bt);
    /* owed share on this lane, its client between iterations: wait for it */
    for (sl_sched_job *j = sl_sched_lane_first_job(s, lane); j; j = sl_sched_lane_next_job(j)) {
        if (j == best || (p->classes && j->priority < best->priority))
            continue;
        const sl_sched_tenant *tj = sl_sched_job_tenant(s, j);
        if (!anticipated(s, j, now, tj != bt ? tenant_claim_limit(s) : limit, tj != bt, &until))
            continue;
        bool owed =
            (p->classes && j->priority > best->priority) ||
            (tj != bt ? sl_sched_tenant_vtime(tj) < v : p->anticipates && job_before(s, j, best));
        if (owed)
            hold = earlier(hold, until);
    }
    /* another tenant of the class is owed share and claims the device
     * elsewhere: this tenant's lanes wait, so that more lanes buy it
     * nothing */
    if (s->n_tenants > 1) {
        for (const sl_sched_job *j = s->first; j && hold != UINT64_MAX; j = j->next_job) {
            const sl_sched_tenant *tj = sl_sched_job_tenant(s, j);
            if (tj == bt || (p->classes && j->priority != best->priority) ||
                !(sl_sched_tenant_vtime(tj) < v))
                continue;
            if (j->running || j->n_queued)
                hold = UINT64_MAX;
            else if (anticipated(s, j, now, tenant_claim_limit(s), true, &until))
                hold = earlier(hold, until);
        }
    }
    if (hold) {
        *hold_ns = hold;
        return NULL;
    }
    return best;
}

/* Whether job claims the device at now: running, queued, or between
 * iterations inside its window. */
static bool claims(const sl_sched *s, const sl_sched_job *job, uint64_t now)
{
    uint64_t until;
    return job->running || job->n_queued ||
           anticipated(s, job, now, tenant_claim_limit(s), true, &until);
}

void sl_share_enqueue(sl_sched *s, sl_sched_job *job, uint64_t now)
{
    if (job->gap_from_ns && !job->running && !job->n_queued)
        record_gap(job, now > job->gap_from_ns ? now - job->gap_from_ns : 0);
    sl_sched_tenant *t = sl_sched_job_tenant(s, job);
    if (s->n_tenants > 1 && (!t->active_ns || now - t->active_ns > TENANT_IDLE_NS)) {
        /* back from idle: no further behind than the lag */
        bool claiming = false, others = false;
        double least = 0;
        for (const sl_sched_job *j = s->first; j && !claiming; j = j->next_job) {
            if (!claims(s, j, now))
                continue;
            const sl_sched_tenant *tj = sl_sched_job_tenant(s, j);
            if (tj == t) {
                claiming = true;
            } else {
                double vj = sl_sched_tenant_vtime(tj);
                if (!others || vj < least)
                    least = vj;
                others = true;
            }
        }
        double floor = least - (double) LAG_NS;
        if (!claiming && others && t->vtime < floor)
            t->vtime = floor;
    }
    job->gap_from_ns = 0;
    t->active_ns = now;
}

void sl_share_start(sl_sched *s, sl_sched_job *job)
{
    sl_sched_tenant *t = sl_sched_job_tenant(s, job);
    job->in_flight_ns = expected_ns(s, job);
    t->in_flight_ns += job->in_flight_ns;
}

void sl_share_complete(sl_sched *s, sl_sched_job *job, uint64_t device_ns, uint64_t now)
{
    sl_sched_tenant *t = sl_sched_job_tenant(s, job);
    t->in_flight_ns -= job->in_flight_ns < t->in_flight_ns ? job->in_flight_ns : t->in_flight_ns;
    job->in_flight_ns = 0;
    t->vtime += (double) device_ns / weight_of(t);
    t->attained_ns =
        t->attained_ns + device_ns < t->attained_ns ? UINT64_MAX : t->attained_ns + device_ns;
    /* its client's gap starts now, unless it already sent its next item */
    job->gap_from_ns = job->n_queued ? 0 : now;
    t->active_ns = now;
}
