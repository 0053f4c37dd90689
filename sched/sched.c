/* The scheduler core: job list, per-job FIFO of items, per-lane state, and
 * the accounting every policy reads (attained device time, iterations,
 * switches). Policies only choose; all mutation happens here so a policy is
 * one small pure function. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"

typedef struct lane_state {
    sl_sched_job *running; /* job with an item in flight; NULL = idle */
    sl_sched_job *last;    /* job of the previous item, for switch counting */
    uint64_t switches;
} lane_state;

struct sl_sched {
    const sl_policy_ops *policy;
    bool strict;
    sl_sched_job *first, *last;
    uint64_t next_seq;
    lane_state *lanes;
    uint32_t n_lanes;
};

/* New policies: one line here and one name in policy_names. */
static const sl_policy_ops *const policies[] = {&sl_policy_fifo, &sl_policy_fair};
static const char policy_names[] = "fifo,fair";

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
    if (!policy || !policy->pick || !out)
        return SL_EINVAL;
    sl_sched *s = sl_calloc(1, sizeof(*s));
    if (!s)
        return SL_ENOMEM;
    s->policy = policy;
    s->strict = strict;
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
    check(policy && policy->pick, "set_policy: policy without pick");
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
    job->next_job = NULL;
    job->prev_job = s->last;
    if (s->last)
        s->last->next_job = job;
    else
        s->first = job;
    s->last = job;
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

    /* set_lane may have left the job as "last" on an earlier lane too, and
     * a dangling pointer there could later compare equal to a new job. */
    for (uint32_t l = 0; l < s->n_lanes; l++)
        if (s->lanes[l].last == job)
            s->lanes[l].last = NULL;

    sl_sched_item *items = job->head; /* tail->next is already NULL */
    job->head = job->tail = NULL;
    job->n_queued = 0;
    return items;
}

void sl_sched_enqueue(sl_sched *s, sl_sched_job *job, sl_sched_item *item, uint64_t now)
{
    (void) s;
    item->next = NULL;
    item->enqueue_ns = now;
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
    sl_sched_job *job = s->policy->pick(s, lane, now, s->strict);
    if (!job)
        return false;
    check(sl_sched_job_ready(job, lane), "policy picked a job that is not ready");

    sl_sched_item *item = job->head;
    job->head = item->next;
    if (!job->head)
        job->tail = NULL;
    job->n_queued--;
    item->next = NULL;

    lane_state *ls = &s->lanes[lane];
    if (ls->last && ls->last != job) {
        ls->switches++;
        job->switches++;
    }
    ls->last = job;
    ls->running = job;
    job->running = true;

    *job_out = job;
    *item_out = item;
    return true;
}

void sl_sched_complete(sl_sched *s, sl_sched_job *job, uint64_t device_ns, uint64_t now)
{
    (void) now;
    check(job->running, "complete: job is not running");
    job->running = false;
    s->lanes[job->lane].running = NULL;
    /* Saturate rather than wrap: a wrapped counter would make fair hand the
     * lane to its heaviest user. */
    if (!sl_add_ok(job->attained_ns, device_ns, &job->attained_ns))
        job->attained_ns = UINT64_MAX;
    job->iterations_done++;
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
    job->lane = lane;
}
