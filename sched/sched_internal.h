/* What the scheduler core (sched.c) and its tenant share and anticipation
 * (share.c) share. Private to sched/. */
#ifndef SL_SCHED_INTERNAL_H
#define SL_SCHED_INTERNAL_H

#include "hist.h"
#include "scheduler.h"

typedef struct lane_state {
    uint64_t serial;       /* which lane the id names (sl_sched_lane_bind); 0 = unbound */
    sl_sched_job *running; /* job with an item in flight; NULL = idle */
    sl_sched_job *last;    /* job of the previous item, for switch counting */
    uint64_t switches;
    uint64_t epoch;         /* bumped whenever a job joins or leaves (rr) */
    uint64_t idle_since_ns; /* completion time of the last item */
    uint64_t gap_count[2];  /* [same_job] */
    uint64_t gap_sum_ns[2];
    sl_sched_job *jobs_head, *jobs_tail; /* its jobs, admission order */
    uint64_t hold_ns; /* why its last pick started nothing (sl_sched_lane_hold) */
} lane_state;

struct sl_sched {
    const sl_policy_ops *policy;
    bool strict;
    sl_sched_job *first, *last;
    uint64_t next_seq;
    uint64_t next_item_seq;
    uint64_t completed_ns; /* device time of every completion, any job */
    uint64_t completed_iterations;
    lane_state *lanes;
    uint32_t n_lanes;
    sl_sched_hist gaps[2]; /* [same_job]: embedded, so recording never allocates */
    /* tenants */
    sl_sched_tenant default_tenant; /* of every job without one */
    sl_sched_tenant *tenants;       /* those with jobs, arrival order */
    uint32_t n_tenants;
    uint64_t next_tenant_seq;
    uint64_t anticipate_max_ns; /* 0 = no anticipation */
    uint32_t n_held;            /* lanes with hold_ns != 0 */
};

/* The pick of a policy that shares between tenants (policy->before set):
 * the job to run on lane, or NULL with *hold_ns set as for
 * sl_sched_lane_hold. */
sl_sched_job *sl_share_pick(const sl_sched *s, uint32_t lane, uint64_t now, uint64_t *hold_ns);
/* Bookkeeping of the share: an item of job arrives at now (its client gap
 * ends; a tenant back from idle is raised to within the lag). */
void sl_share_enqueue(sl_sched *s, sl_sched_job *job, uint64_t now);
/* job's pick starts: its tenant's expected device time in flight grows. */
void sl_share_start(sl_sched *s, sl_sched_job *job);
/* job's item completed with device_ns at now: charged to its tenant. */
void sl_share_complete(sl_sched *s, sl_sched_job *job, uint64_t device_ns, uint64_t now);

#endif
