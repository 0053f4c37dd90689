/* The scheduler core: job list, per-job FIFO of items, per-lane state, and
 * the accounting every policy reads (attained device time, iterations,
 * switches, per-lane membership counters) or the server exports (queueing
 * delay, response time, slowdown, switch gaps). Policies only choose; all
 * mutation happens here so a policy is one small pure function, and so a
 * policy change at run time finds every counter it needs already up to date.
 *
 * Integration notes for the server (all calls under the server's lock):
 *   session opens      sl_sched_job_add
 *   Run arrives        sl_sched_enqueue
 *   lane free          sl_sched_next, then when the item really starts
 *                      (launch_ns) and the lane had a previous item:
 *                        gap = launch_ns - max(sl_sched_lane_idle_since(lane),
 *                                              item->enqueue_ns)
 *                        sl_sched_note_gap(lane, gap, job == previous job)
 *                      i.e. only the time the lane sat idle while this item
 *                      was already waiting: a client's think time is not a
 *                      switch cost.
 *   iteration done     sl_sched_complete(device_ns, now)
 *   weight/priority    sl_sched_job_set_* (next pick)
 *   --policy at run    sl_sched_set_policy (next pick) */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

/* Links job into its lane's list at its place in admission order (at the
 * tail for a new job; a moved job may go further in). */
static void lane_link(lane_state *ls, sl_sched_job *job)
{
    sl_sched_job *after = ls->jobs_tail;
    while (after && after->arrival_seq > job->arrival_seq)
        after = after->lane_prev;
    job->lane_prev = after;
    job->lane_next = after ? after->lane_next : ls->jobs_head;
    if (job->lane_next)
        job->lane_next->lane_prev = job;
    else
        ls->jobs_tail = job;
    if (after)
        after->lane_next = job;
    else
        ls->jobs_head = job;
}

static void lane_unlink(lane_state *ls, sl_sched_job *job)
{
    if (job->lane_prev)
        job->lane_prev->lane_next = job->lane_next;
    else
        ls->jobs_head = job->lane_next;
    if (job->lane_next)
        job->lane_next->lane_prev = job->lane_prev;
    else
        ls->jobs_tail = job->lane_prev;
    job->lane_prev = job->lane_next = NULL;
}

/* New policies: one line here and one name in policy_names. */
static const sl_policy_ops *const policies[] = {&sl_policy_fifo, &sl_policy_fair,
                                                &sl_policy_pack, &sl_policy_rr,
                                                &sl_policy_srtf, &sl_policy_priority};
static const char policy_names[] = "fifo,fair,pack,rr,srtf,priority";

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;
    return sl_add_ok(a, b, &r) ? r : UINT64_MAX;
}

const sl_policy_ops *sl_sched_policy_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof(policies) / sizeof(policies[0]); i++)
        if (strcmp(policies[i]->name, name) == 0)
            return policies[i];
    return NULL;
}

const char *sl_sched_policy_names(void)
{
    return policy_names;
}

/* Breaking a precondition would corrupt the lists silently; stop instead. */
static void check(bool ok, const char *what)
{
    if (!ok) {
        sl_log_err("sched.precondition", "scheduler precondition violated: %s", what);
        abort();
    }
}

int sl_sched_create(const sl_policy_ops *policy, bool strict, sl_sched **out)
{
    if (!policy || (!policy->pick && !policy->before) || !out)
        return SL_EINVAL;
    sl_sched *s = sl_calloc(1, sizeof(*s));
    if (!s)
        return SL_ENOMEM;
    s->policy = policy;
    s->strict = strict;
    s->default_tenant.weight = 1.0;
    int rc = sl_sched_reserve_lanes(s, SL_SCHED_INITIAL_LANES);
    if (rc != SL_OK) {
        sl_free(s);
        return rc;
    }
    *out = s;
    return SL_OK;
}

void sl_sched_destroy(sl_sched *s)
{
    if (!s)
        return;
    /* Jobs and items belong to the caller: nothing to walk. */
    sl_free(s->lanes);
    sl_free(s);
}

void sl_sched_set_policy(sl_sched *s, const sl_policy_ops *policy, bool strict)
{
    check(policy && (policy->pick || policy->before), "set_policy: policy without pick");
    s->policy = policy;
    s->strict = strict;
}

const sl_policy_ops *sl_sched_policy(const sl_sched *s)
{
    return s->policy;
}

bool sl_sched_strict(const sl_sched *s)
{
    return s->strict;
}

int sl_sched_reserve_lanes(sl_sched *s, uint32_t n_lanes)
{
    if (n_lanes <= s->n_lanes)
        return SL_OK;
    lane_state *lanes = sl_reallocarray(s->lanes, n_lanes, sizeof(*lanes));
    if (!lanes)
        return SL_ENOMEM;
    memset(lanes + s->n_lanes, 0, (size_t) (n_lanes - s->n_lanes) * sizeof(*lanes));
    s->lanes = lanes;
    s->n_lanes = n_lanes;
    return SL_OK;
}

uint32_t sl_sched_lane_capacity(const sl_sched *s)
{
    return s->n_lanes;
}

void sl_sched_lane_bind(sl_sched *s, uint32_t lane, uint64_t serial)
{
    if (lane >= s->n_lanes || s->lanes[lane].serial == serial)
        return;
    lane_state *ls = &s->lanes[lane];
    check(!ls->running, "lane_bind: an item is running on the lane");
    /* The epoch stays: jobs already on the new lane compare against it;
     * so does its membership (the caller's). */
    uint64_t epoch = ls->epoch;
    sl_sched_job *head = ls->jobs_head, *tail = ls->jobs_tail;
    if (ls->hold_ns)
        s->n_held--;
    memset(ls, 0, sizeof(*ls));
    ls->epoch = epoch;
    ls->serial = serial;
    ls->jobs_head = head;
    ls->jobs_tail = tail;
}

sl_sched_job *sl_sched_lane_running(const sl_sched *s, uint32_t lane)
{
    return lane < s->n_lanes ? s->lanes[lane].running : NULL;
}

uint64_t sl_sched_lane_switches(const sl_sched *s, uint32_t lane)
{
    return lane < s->n_lanes ? s->lanes[lane].switches : 0;
}

void sl_sched_job_add(sl_sched *s, sl_sched_job *job, uint64_t now)
{
    check(job->lane < s->n_lanes, "job_add: lane not reserved");
    job->arrival_ns = now;
    job->arrival_seq = s->next_seq++;
    job->attained_ns = 0;
    job->iterations_done = 0;
    job->switches = 0;
    job->n_queued = 0;
    job->running = false;
    job->head = job->tail = NULL;
    job->iterations_started = 0;
    job->queue_sum_ns = 0;
    job->queue_max_ns = 0;
    job->response_sum_ns = 0;
    job->min_iteration_ns = 0;
    job->running_enqueue_ns = 0;
    job->in_flight_ns = 0;
    job->gap_from_ns = 0;
    job->n_gaps = 0;
    job->anticipate_ns = 0;
    job->gap_median_ns = 0;
    sl_sched_tenant *t = sl_sched_job_tenant(s, job);
    if (t->n_jobs++ == 0) {
        /* a tenant with jobs again: ranked from now on, last among ties */
        t->seq = s->next_tenant_seq++;
        t->in_flight_ns = 0;
        t->active_ns = 0;
        t->next = NULL;
        t->prev = NULL;
        sl_sched_tenant *tail = s->tenants;
        while (tail && tail->next)
            tail = tail->next;
        if (tail) {
            tail->next = t;
            t->prev = tail;
        } else {
            s->tenants = t;
        }
        s->n_tenants++;
    }
    /* Joining changes the lane's membership: everyone's rr count restarts. */
    job->lane_epoch = ++s->lanes[job->lane].epoch;
    job->lane_iterations = 0;
    job->next_job = NULL;
    job->prev_job = s->last;
    if (s->last)
        s->last->next_job = job;
    else
        s->first = job;
    s->last = job;
    lane_link(&s->lanes[job->lane], job);
}

sl_sched_item *sl_sched_job_remove(sl_sched *s, sl_sched_job *job)
{
    check(!job->running, "job_remove: job is running");
    if (job->prev_job)
        job->prev_job->next_job = job->next_job;
    else
        s->first = job->next_job;
    if (job->next_job)
        job->next_job->prev_job = job->prev_job;
    else
        s->last = job->prev_job;
    job->prev_job = job->next_job = NULL;
    lane_unlink(&s->lanes[job->lane], job);
    s->lanes[job->lane].epoch++; /* leaving changes the membership too */

    /* set_lane may have left the job as "last" on an earlier lane too, and
     * a dangling pointer there could later compare equal to a new job. */
    for (uint32_t l = 0; l < s->n_lanes; l++)
        if (s->lanes[l].last == job)
            s->lanes[l].last = NULL;

    sl_sched_tenant *t = sl_sched_job_tenant(s, job);
    if (--t->n_jobs == 0) {
        if (t->prev)
            t->prev->next = t->next;
        else
            s->tenants = t->next;
        if (t->next)
            t->next->prev = t->prev;
        t->prev = t->next = NULL;
        s->n_tenants--;
    }

    sl_sched_item *items = job->head; /* tail->next is already NULL */
    job->head = job->tail = NULL;
    job->n_queued = 0;
    return items;
}

sl_sched_item *sl_sched_job_drop_queued(sl_sched *s, sl_sched_job *job)
{
    (void) s;
    sl_sched_item *items = job->head;
    job->head = job->tail = NULL;
    job->n_queued = 0;
    return items;
}

bool sl_sched_job_high_priority(const sl_sched *s, const sl_sched_job *job)
{
    return s->policy->caps != 0 && job->priority > 0;
}

void sl_sched_enqueue(sl_sched *s, sl_sched_job *job, sl_sched_item *item, uint64_t now)
{
    sl_share_enqueue(s, job, now);
    item->next = NULL;
    item->enqueue_ns = now;
    item->seq = s->next_item_seq++;
    if (job->tail)
        job->tail->next = item;
    else
        job->head = item;
    job->tail = item;
    job->n_queued++;
}

bool sl_sched_next(sl_sched *s, uint32_t lane, uint64_t now, sl_sched_job **job_out,
                   sl_sched_item **item_out)
{
    if (lane >= s->n_lanes || s->lanes[lane].running)
        return false;
    uint64_t hold = 0;
    sl_sched_job *job = s->policy->before ? sl_share_pick(s, lane, now, &hold)
                                          : s->policy->pick(s, lane, now, s->strict);
    lane_state *ls = &s->lanes[lane];
    s->n_held += (hold != 0) - (ls->hold_ns != 0);
    ls->hold_ns = hold;
    if (!job)
        return false;
    check(sl_sched_job_ready(job, lane), "policy picked a job that is not ready");

    sl_sched_item *item = job->head;
    job->head = item->next;
    if (!job->head)
        job->tail = NULL;
    job->n_queued--;
    item->next = NULL;

    if (ls->last && ls->last != job) {
        ls->switches++;
        job->switches++;
    }
    ls->last = job;
    ls->running = job;
    job->running = true;

    uint64_t delay = now > item->enqueue_ns ? now - item->enqueue_ns : 0;
    job->iterations_started++;
    job->queue_sum_ns = sat_add(job->queue_sum_ns, delay);
    if (delay > job->queue_max_ns)
        job->queue_max_ns = delay;
    job->running_enqueue_ns = item->enqueue_ns;
    sl_share_start(s, job);

    *job_out = job;
    *item_out = item;
    return true;
}

void sl_sched_complete(sl_sched *s, sl_sched_job *job, uint64_t device_ns, uint64_t now)
{
    check(job->running, "complete: job is not running");
    lane_state *ls = &s->lanes[job->lane];
    job->running = false;
    ls->running = NULL;
    ls->idle_since_ns = now;
    /* Saturate rather than wrap: a wrapped counter would make fair hand the
     * lane to its heaviest user. */
    job->attained_ns = sat_add(job->attained_ns, device_ns);
    job->iterations_done++;
    s->completed_ns = sat_add(s->completed_ns, device_ns);
    s->completed_iterations++;

    uint64_t response = now > job->running_enqueue_ns ? now - job->running_enqueue_ns : 0;
    job->response_sum_ns = sat_add(job->response_sum_ns, response);
    /* A zero charge is a launch that never ran, not a fast iteration. */
    if (device_ns > 0 && (job->min_iteration_ns == 0 || device_ns < job->min_iteration_ns))
        job->min_iteration_ns = device_ns;
    sl_share_complete(s, job, device_ns, now);

    /* rr's count restarts lazily: the first completion in a new membership
     * epoch starts from zero, so a join or leave is O(1), not O(jobs). */
    if (job->lane_epoch != ls->epoch) {
        job->lane_epoch = ls->epoch;
        job->lane_iterations = 0;
    }
    job->lane_iterations++;
}

sl_sched_job *sl_sched_lane_first_job(const sl_sched *s, uint32_t lane)
{
    return lane < s->n_lanes ? s->lanes[lane].jobs_head : NULL;
}

sl_sched_job *sl_sched_first_job(const sl_sched *s)
{
    return s->first;
}

void sl_sched_job_set_weight(sl_sched *s, sl_sched_job *job, double weight)
{
    (void) s;
    job->weight = weight;
}

void sl_sched_job_set_priority(sl_sched *s, sl_sched_job *job, int priority)
{
    (void) s;
    job->priority = priority;
}

void sl_sched_job_set_lane(sl_sched *s, sl_sched_job *job, uint32_t lane)
{
    check(!job->running, "set_lane: job is running");
    check(lane < s->n_lanes, "set_lane: lane not reserved");
    if (lane == job->lane)
        return;
    /* It leaves one lane and joins another: both memberships change. */
    lane_unlink(&s->lanes[job->lane], job);
    s->lanes[job->lane].epoch++;
    job->lane = lane;
    lane_link(&s->lanes[lane], job);
    job->lane_epoch = ++s->lanes[lane].epoch;
    job->lane_iterations = 0;
}

void sl_sched_job_set_expected(sl_sched *s, sl_sched_job *job, uint64_t total_ns,
                               uint64_t iterations)
{
    (void) s;
    job->expected_total_ns = total_ns;
    job->expected_iterations = iterations;
}

void sl_sched_job_set_solo(sl_sched *s, sl_sched_job *job, uint64_t solo_iteration_ns)
{
    (void) s;
    job->solo_iteration_ns = solo_iteration_ns;
}

uint64_t sl_sched_job_lane_iterations(const sl_sched *s, const sl_sched_job *job)
{
    if (job->lane >= s->n_lanes || job->lane_epoch != s->lanes[job->lane].epoch)
        return 0;
    return job->lane_iterations;
}

uint64_t sl_sched_mean_iteration_ns(const sl_sched *s)
{
    return s->completed_iterations ? s->completed_ns / s->completed_iterations : 0;
}

uint64_t sl_sched_wait_rank(const sl_sched *s, const sl_sched_job *job)
{
    const sl_policy_ops *p = sl_sched_policy(s);
    return p->wait_rank ? p->wait_rank(job) : 0;
}

/* srtf's estimate; the rules and why are documented in policy_srtf.c. */
bool sl_sched_job_remaining(const sl_sched *s, const sl_sched_job *job, double *remaining_ns)
{
    if (job->expected_total_ns > 0) {
        uint64_t total = job->expected_total_ns;
        *remaining_ns = total > job->attained_ns ? (double) (total - job->attained_ns) : 0.0;
        return true;
    }
    if (job->expected_iterations > 0) {
        uint64_t left = job->expected_iterations > job->iterations_done
                            ? job->expected_iterations - job->iterations_done
                            : 0;
        double per_iteration = job->iterations_done > 0
                                   ? (double) job->attained_ns / (double) job->iterations_done
                                   : (double) sl_sched_mean_iteration_ns(s);
        *remaining_ns = (double) left * per_iteration;
        return true;
    }
    return false;
}

uint64_t sl_sched_job_mean_iteration_ns(const sl_sched_job *job)
{
    return job->iterations_done ? job->attained_ns / job->iterations_done : 0;
}

uint64_t sl_sched_job_mean_queue_ns(const sl_sched_job *job)
{
    return job->iterations_started ? job->queue_sum_ns / job->iterations_started : 0;
}

uint64_t sl_sched_job_mean_response_ns(const sl_sched_job *job)
{
    return job->iterations_done ? job->response_sum_ns / job->iterations_done : 0;
}

uint64_t sl_sched_job_solo_ns(const sl_sched_job *job)
{
    return job->solo_iteration_ns ? job->solo_iteration_ns : job->min_iteration_ns;
}

double sl_sched_job_slowdown(const sl_sched_job *job)
{
    uint64_t solo = sl_sched_job_solo_ns(job);
    if (!solo || !job->iterations_done)
        return 0;
    return ((double) job->response_sum_ns / (double) job->iterations_done) / (double) solo;
}

uint64_t sl_sched_lane_idle_since(const sl_sched *s, uint32_t lane)
{
    return lane < s->n_lanes ? s->lanes[lane].idle_since_ns : 0;
}

void sl_sched_note_gap(sl_sched *s, uint32_t lane, uint64_t gap_ns, bool same_job)
{
    check(lane < s->n_lanes, "note_gap: lane not reserved");
    int kind = same_job ? 1 : 0;
    sl_sched_hist_record(&s->gaps[kind], gap_ns);
    s->lanes[lane].gap_count[kind]++;
    s->lanes[lane].gap_sum_ns[kind] = sat_add(s->lanes[lane].gap_sum_ns[kind], gap_ns);
}

void sl_sched_gap_stats_get(const sl_sched *s, bool same_job, sl_sched_gap_stats *out)
{
    const sl_sched_hist *h = &s->gaps[same_job ? 1 : 0];
    out->count = h->count;
    out->sum_ns = h->sum_ns;
    out->min_ns = h->count ? h->min_ns : 0;
    out->max_ns = h->max_ns;
    out->p50_ns = sl_sched_hist_quantile(h, 0.50);
    out->p99_ns = sl_sched_hist_quantile(h, 0.99);
}

uint64_t sl_sched_gap_quantile(const sl_sched *s, bool same_job, double q)
{
    return sl_sched_hist_quantile(&s->gaps[same_job ? 1 : 0], q);
}

uint64_t sl_sched_lane_gap_count(const sl_sched *s, uint32_t lane, bool same_job)
{
    return lane < s->n_lanes ? s->lanes[lane].gap_count[same_job ? 1 : 0] : 0;
}

uint64_t sl_sched_lane_gap_sum_ns(const sl_sched *s, uint32_t lane, bool same_job)
{
    return lane < s->n_lanes ? s->lanes[lane].gap_sum_ns[same_job ? 1 : 0] : 0;
}
