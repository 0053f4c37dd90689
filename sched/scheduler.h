/* The iteration scheduler: per-job queues of iterations and a pluggable
 * policy that decides, at each iteration boundary of a lane, whose iteration
 * runs next.
 *
 * Pure library: no I/O, no threads, no clock of its own (callers pass `now`
 * in nanoseconds). Not thread-safe: the caller serialises all calls. The
 * structures are intrusive: the server embeds sl_sched_job in its session and
 * sl_sched_item in its iteration, so scheduling allocates nothing. */
#ifndef SL_SCHEDULER_H
#define SL_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_sched sl_sched;

/* One queued unit of work (an iteration). Owned by the caller; the scheduler
 * only links it while it is queued. */
typedef struct sl_sched_item {
    struct sl_sched_item *next; /* private to the scheduler */
    uint64_t enqueue_ns;        /* set by sl_sched_enqueue */
    uint64_t seq;               /* set by sl_sched_enqueue: submission order, all jobs */
} sl_sched_item;

/* A tenant: whoever a set of jobs belongs to (salusd: a uid, the network
 * clients together, or a Slurm job step). Under a policy that shares
 * between tenants (sl_policy_ops.before) device time is shared out between
 * tenants by weight first, then between one tenant's jobs by the policy's
 * own order, so that opening more jobs buys a tenant nothing. Owned by the
 * caller, who links it from its jobs (sl_sched_job.tenant) and keeps it
 * alive while any of them is added; zero it before the first job joins. */
typedef struct sl_sched_tenant {
    uint64_t key;  /* in: the caller's name for it */
    double weight; /* in: share among tenants (> 0; else 1); may change at run time */
    /* scheduler state */
    uint32_t n_jobs;       /* jobs added and not removed */
    uint64_t seq;          /* order of arrival (tie break), set when its first job is added */
    double vtime;          /* device ns charged / weight, raised to within a lag of the others
                            * when it comes back from idle (sched/share.c) */
    uint64_t attained_ns;  /* device time charged to its jobs, departed ones included */
    uint64_t in_flight_ns; /* expected device time of its iterations in flight */
    uint64_t active_ns;    /* its last arrival or completion of an item */
    struct sl_sched_tenant *prev, *next; /* tenants with jobs, private */
} sl_sched_tenant;

/* Client gaps kept per job for anticipation (a ring of the latest). */
#define SL_SCHED_GAP_SAMPLES 16

/* One job (a session). Fields marked "in" are set by the caller before
 * sl_sched_job_add and may be changed later through the setters; the others
 * are the scheduler's and read-only for the caller. */
typedef struct sl_sched_job {
    uint64_t id;                  /* in: unique, for deterministic tie breaks */
    double weight;                /* in: fair share weight (> 0; 0 means 1) */
    int priority;                 /* in: larger = more important */
    uint32_t lane;                /* in: lane the job runs on */
    uint64_t expected_total_ns;   /* in: declared total device time, 0 = unknown */
    uint64_t expected_iterations; /* in: declared total iterations, 0 = unknown */
    uint64_t solo_iteration_ns;   /* in: declared device time of one iteration run
                                   * alone, 0 = use the fastest one observed */
    sl_sched_tenant *tenant;      /* in: its tenant; NULL = the scheduler's own default
                                   * tenant, shared by every job without one */
    uint64_t tenant_key;          /* in, for sl_lanes_join (lanes.h), which sets tenant
                                   * to the tenant of this key; 0 = none */
    double tenant_weight;         /* in, for sl_lanes_join: that tenant's weight */
    /* scheduler state */
    uint64_t arrival_ns;  /* when added */
    uint64_t arrival_seq; /* admission order */
    uint64_t attained_ns; /* device time charged so far */
    uint64_t iterations_done;
    uint64_t switches; /* times this job took a lane from another job */
    uint32_t n_queued;
    bool running; /* has an item picked and not completed */
    sl_sched_item *head, *tail;
    struct sl_sched_job *prev_job, *next_job;   /* all jobs, admission order */
    struct sl_sched_job *lane_prev, *lane_next; /* its lane's jobs, admission order */
    /* accounting (all saturating; see the sl_sched_job_* queries below) */
    uint64_t iterations_started; /* items picked */
    uint64_t queue_sum_ns;       /* sum over picked items of (pick - enqueue) */
    uint64_t queue_max_ns;       /* the largest such delay */
    uint64_t response_sum_ns;    /* sum over completed items of (complete - enqueue) */
    uint64_t min_iteration_ns;   /* fastest nonzero charge, 0 = none yet */
    /* private to the scheduler */
    uint64_t running_enqueue_ns; /* enqueue_ns of the item in flight */
    uint64_t lane_epoch;         /* membership epoch lane_iterations counts in */
    uint64_t lane_iterations;    /* completions in that epoch (rr) */
    uint64_t in_flight_ns;       /* expected device time of its item in flight */
    uint64_t gap_from_ns;        /* completion its client's next item is timed from; 0 = none */
    uint32_t gaps_ns[SL_SCHED_GAP_SAMPLES]; /* its client's latest gaps (saturated) */
    uint32_t n_gaps;                        /* samples taken (the ring holds the latest) */
    uint64_t anticipate_ns; /* how long its claim outlives a completion; 0 = no claim */
    uint64_t gap_median_ns; /* its client's usual gap: whether a claim is worth keeping */
} sl_sched_job;

/* A policy only chooses. Everything a policy reads (attained time,
 * iteration counts, per-lane membership counters, item order) is kept by the
 * core for every job whatever the current policy, so a policy has no state
 * of its own and a change of policy at run time is correct at the very next
 * pick: nothing needs rebuilding. */
typedef struct sl_policy_ops {
    const char *name;
    /* Chooses the job whose head item runs next on `lane`, among jobs with
     * lane == lane, n_queued > 0 and !running. NULL = leave the lane idle.
     * Must not modify the jobs. strict: the paper's non-work-conserving
     * variant where the policy has one. Used only when `before` is NULL. */
    sl_sched_job *(*pick)(const sl_sched *s, uint32_t lane, uint64_t now, bool strict);
    /* Policies that share between tenants give instead the order among one
     * tenant's jobs: whether a runs before b (a strict weak order; ties go
     * to the earlier arrival). The core then picks (sched/share.c): the
     * highest priority class when `classes`, then the tenant with the least
     * device time per weight, then that tenant's first job by this order;
     * it keeps a lane for a tenant or job that is owed share and whose
     * client is between iterations (anticipation), and holds a tenant's
     * lanes while another tenant is owed share elsewhere. */
    bool (*before)(const sl_sched *s, const sl_sched_job *a, const sl_sched_job *b);
    /* before also compares jobs with nothing queued, so a job that ranks
     * first and is between iterations keeps its claim among its tenant's
     * jobs (anticipation inside a tenant). */
    bool anticipates;
    /* Priority classes come first: a larger job->priority always runs
     * before a smaller one, whatever the tenants' shares. */
    bool classes;
    /* Whether strict changes anything for this policy (fifo, srtf). The
     * others are work-conserving either way. */
    bool has_strict;
    /* What the policy asks of the executor beyond its picks (SL_POLICY_*).
     * The server acts on these, never on a policy's name. */
    unsigned caps;
    /* The order in which jobs waiting for memory are admitted, smaller
     * first, from what a job not yet added declares (its "in" fields; its
     * scheduler state is zero). NULL = arrival order. Read through
     * sl_sched_wait_rank. */
    uint64_t (*wait_rank)(const sl_sched_job *job);
} sl_policy_ops;

/* Policy capabilities. A policy with any of them has priority classes: a
 * job is high-priority while its priority is above 0
 * (sl_sched_job_high_priority). */
enum {
    /* high-priority jobs get lanes of their own: their iterations never wait
     * behind another job's whole iteration in the same lane */
    SL_POLICY_EXCLUSIVE_LANES = 1u << 0,
    /* while high-priority jobs exist, the others' iterations run in steps
     * (sched/steps.h), none issued while high-priority work is pending */
    SL_POLICY_STEPWISE = 1u << 1,
    /* those steps, when dispatched one device-wide, go into the
     * high-priority jobs' predicted idle gaps (sched/gaps.h); needs
     * SL_POLICY_STEPWISE */
    SL_POLICY_GAP_FILL = 1u << 2,
};

/* The policies, each in sched/policy_<name>.c; see there for the exact rule
 * and its tie breaks. */
extern const sl_policy_ops sl_policy_fifo;     /* oldest job owns the lane */
extern const sl_policy_ops sl_policy_fair;     /* least attained / weight */
extern const sl_policy_ops sl_policy_pack;     /* oldest queued item first */
extern const sl_policy_ops sl_policy_rr;       /* fewest iterations since membership change */
extern const sl_policy_ops sl_policy_srtf;     /* least remaining time */
extern const sl_policy_ops sl_policy_priority; /* priority classes, fair inside */

/* The current policy's wait_rank of job (0 for every job when the policy
 * has none: arrival order). O(1). */
uint64_t sl_sched_wait_rank(const sl_sched *s, const sl_sched_job *job);

/* Looks up a policy by name; NULL if unknown. */
const sl_policy_ops *sl_sched_policy_find(const char *name);
/* Comma-separated names of all policies, for --help. */
const char *sl_sched_policy_names(void);

/* Creates a scheduler with the given policy (anticipation off). Errors:
 * SL_EINVAL, SL_ENOMEM.
 * The only allocations of the whole module happen here and in
 * sl_sched_reserve_lanes. */
int sl_sched_create(const sl_policy_ops *policy, bool strict, sl_sched **out);
/* Frees s (NULL is fine). Jobs and items belong to the caller. */
void sl_sched_destroy(sl_sched *s);
/* Switches policy and strictness; takes effect at the next pick of every
 * lane (an item in flight is not affected). Never allocates. Precondition:
 * policy has a pick or a before function. */
void sl_sched_set_policy(sl_sched *s, const sl_policy_ops *policy, bool strict);
/* The current policy. */
const sl_policy_ops *sl_sched_policy(const sl_sched *s);

/* Adds a job (its "in" fields set); the scheduler zeroes its state.
 * Precondition: job->lane < sl_sched_lane_capacity(s). Never allocates. */
void sl_sched_job_add(sl_sched *s, sl_sched_job *job, uint64_t now);
/* Removes a job. Precondition: not running. Its queued items are unlinked
 * and returned as a list (through item->next) for the caller to fail. */
sl_sched_item *sl_sched_job_remove(sl_sched *s, sl_sched_job *job);

/* Unlinks and returns job's queued (not running) items as a list through
 * item->next, leaving the job in the scheduler: for failing what waits
 * (drain, device reset) without the job losing its place or accounting.
 * O(1), never allocates. */
sl_sched_item *sl_sched_job_drop_queued(sl_sched *s, sl_sched_job *job);

/* Whether job is high-priority under the current policy: the policy has
 * capabilities (SL_POLICY_*) and job->priority > 0. */
bool sl_sched_job_high_priority(const sl_sched *s, const sl_sched_job *job);

/* Appends item to job's queue, stamping enqueue_ns = now and the next
 * submission sequence number. */
void sl_sched_enqueue(sl_sched *s, sl_sched_job *job, sl_sched_item *item, uint64_t now);

/* Asks the policy for the next item on lane. On success pops it, marks the
 * job running, records its queueing delay (now - item->enqueue_ns) and
 * returns true with *job_out and *item_out set; returns false when the lane
 * should stay idle (sl_sched_lane_hold says whether it is kept for someone).
 * O(jobs on the lane), O(all jobs) when several tenants have jobs; never
 * allocates. */
bool sl_sched_next(sl_sched *s, uint32_t lane, uint64_t now, sl_sched_job **job_out,
                   sl_sched_item **item_out);

/* Marks job's running item complete and charges device_ns to it (saturating)
 * and one iteration; records the iteration's response time (now - its
 * enqueue_ns) and, when device_ns > 0, the job's fastest iteration.
 * Precondition: job is running. The lane becomes idle as of now. O(1). */
void sl_sched_complete(sl_sched *s, sl_sched_job *job, uint64_t device_ns, uint64_t now);

/* Iteration helpers for policies and status: all jobs in admission order. */
sl_sched_job *sl_sched_first_job(const sl_sched *s);
static inline sl_sched_job *sl_sched_next_job(const sl_sched_job *j)
{
    return j->next_job;
}

/* The jobs of one lane, in admission order: what a policy's pick scans
 * (a pick costs O(jobs on its lane), not O(all jobs)). NULL for a lane with
 * none or at or above the capacity. */
sl_sched_job *sl_sched_lane_first_job(const sl_sched *s, uint32_t lane);
static inline sl_sched_job *sl_sched_lane_next_job(const sl_sched_job *j)
{
    return j->lane_next;
}

/* True when job may be picked on lane: it lives there, has queued work and
 * is not running. The set every policy's pick chooses from. */
static inline bool sl_sched_job_ready(const sl_sched_job *j, uint32_t lane)
{
    return j->lane == lane && j->n_queued > 0 && !j->running;
}

/* Lanes. Lanes are small integers below sl_sched_lane_capacity(), which
 * starts at SL_SCHED_INITIAL_LANES; sl_sched_reserve_lanes raises it so that
 * adding jobs and picking never allocate. */
#define SL_SCHED_INITIAL_LANES 64u

/* Makes lanes [0, n_lanes) usable; never shrinks. Errors: SL_ENOMEM (the
 * capacity is unchanged). */
int sl_sched_reserve_lanes(sl_sched *s, uint32_t n_lanes);
uint32_t sl_sched_lane_capacity(const sl_sched *s);
/* The job whose item is running on lane, or NULL when the lane is idle. */
sl_sched_job *sl_sched_lane_running(const sl_sched *s, uint32_t lane);
/* Switches on lane so far: picks whose job differs from the job of the
 * lane's previous item. A lane whose previous job was removed starts afresh
 * (the next pick is not a switch), so a job that runs alone until it leaves
 * (fifo) causes no switches. */
uint64_t sl_sched_lane_switches(const sl_sched *s, uint32_t lane);
/* Tells the scheduler which lane the id `lane` names now, as a serial that is
 * never reused (the memory manager's; ids are). When the serial differs from
 * the one the lane was last bound to, the id was reused for a new lane: its
 * switches, gaps, idle time and previous job start afresh, as for a lane never
 * used. Membership (which jobs have job->lane == lane) is the caller's and is
 * not touched; neither is rr's epoch, which only ever grows. A lane at or
 * above the capacity is ignored (nothing is known about it). Precondition:
 * no item is running on the lane when its serial changes. O(1), never
 * allocates. */
void sl_sched_lane_bind(sl_sched *s, uint32_t lane, uint64_t serial);
/* ---- anticipation and holds (sched/share.c) ----
 *
 * A job that is owed share (it would rank before what the lane would run)
 * and whose client is between iterations keeps its claim for a bounded
 * moment after its last completion, as the anticipatory disk scheduler
 * waits for a process that will read again soon: a fair share of device
 * time then does not depend on winning the race for a free lane. The
 * moment is the longest of that client's latest measured gaps (completion
 * to its next item, the latest SL_SCHED_GAP_SAMPLES, at least 4 of them)
 * plus an eighth and 20 us, cut to the limit: the scheduler's bound
 * (sl_sched_set_anticipation) and half the mean iteration of the job the
 * lane would run instead, so waiting never costs more than half an
 * iteration of the other job. Between tenants a claim lasts twice that
 * window, up to the bound, and only for a client whose median gap is
 * within the bound (sched/share.c says why). A lane kept that way is held until a
 * deadline; a lane whose tenant is ahead of another tenant that runs or
 * waits elsewhere is held until the next start or completion (the caller
 * then kicks held lanes again). */

/* Turns anticipation on with bound_ns as the longest claim (0: off). */
void sl_sched_set_anticipation(sl_sched *s, uint64_t bound_ns);
/* Why lane's last pick started nothing: 0 = nothing to run (or it started
 * something), UINT64_MAX = held until another item starts, completes or
 * arrives, otherwise held until that time (ns). */
uint64_t sl_sched_lane_hold(const sl_sched *s, uint32_t lane);
/* Forgets lane's hold without a pick: the caller found the lane gone (a
 * reclaimed lane is never picked again under its id until it is bound
 * anew). O(1). */
void sl_sched_lane_unhold(sl_sched *s, uint32_t lane);
/* Lanes whose last pick held them. O(1). */
uint32_t sl_sched_held_lanes(const sl_sched *s);
/* The earliest finite hold deadline over all lanes; 0 = none. O(lanes). */
uint64_t sl_sched_hold_deadline(const sl_sched *s);
/* What a job's claim is measured against: its tenant (the default one for
 * a job without). */
sl_sched_tenant *sl_sched_job_tenant(const sl_sched *s, const sl_sched_job *job);
/* The tenant's device time per weight, counting its iterations in flight
 * at their expected time: what tenants are ranked by. */
double sl_sched_tenant_vtime(const sl_sched_tenant *t);
/* Tenants with jobs now (the default one included when it has any). */
uint32_t sl_sched_tenants(const sl_sched *s);

/* Whether the current policy runs in its strict (paper) variant. */
bool sl_sched_strict(const sl_sched *s);

/* Setters for a job's "in" fields; each takes effect at the lane's next
 * pick. set_lane preconditions: the job is not running, and
 * lane < sl_sched_lane_capacity(s). Its queued items move with it. */
void sl_sched_job_set_weight(sl_sched *s, sl_sched_job *job, double weight);
void sl_sched_job_set_priority(sl_sched *s, sl_sched_job *job, int priority);
void sl_sched_job_set_lane(sl_sched *s, sl_sched_job *job, uint32_t lane);
/* Declares (or corrects) what srtf ranks by: total device time and/or total
 * iterations (0 = unknown); takes effect at the next pick. */
void sl_sched_job_set_expected(sl_sched *s, sl_sched_job *job, uint64_t total_ns,
                               uint64_t iterations);
/* Declares the solo iteration time slowdown is measured against (0 = use
 * the fastest observed iteration). */
void sl_sched_job_set_solo(sl_sched *s, sl_sched_job *job, uint64_t solo_iteration_ns);

/* ---- what policies read ---- */

/* Iterations the job finished since the membership of its lane last changed
 * (a job joined or left the lane, by add, remove or set_lane); what rr ranks
 * by. Kept for every job under every policy, so switching to rr at run time
 * sees the right counts. O(1). */
uint64_t sl_sched_job_lane_iterations(const sl_sched *s, const sl_sched_job *job);

/* srtf's estimate of the job's remaining device time, into *remaining_ns
 * (>= 0); false, *remaining_ns untouched, when the job declared neither
 * expected_total_ns nor expected_iterations. Rules in policy_srtf.c. O(1). */
bool sl_sched_job_remaining(const sl_sched *s, const sl_sched_job *job, double *remaining_ns);

/* Mean device time of one iteration over all iterations completed by any
 * job (including departed ones); 0 before the first completion. */
uint64_t sl_sched_mean_iteration_ns(const sl_sched *s);

/* ---- per-job accounting, for export (all O(1), pure) ---- */

/* attained_ns / iterations_done; 0 before the first completion. */
uint64_t sl_sched_job_mean_iteration_ns(const sl_sched_job *job);
/* queue_sum_ns / iterations_started; 0 before the first pick. */
uint64_t sl_sched_job_mean_queue_ns(const sl_sched_job *job);
/* Mean time from enqueue to completion of the job's completed iterations;
 * 0 before the first completion. */
uint64_t sl_sched_job_mean_response_ns(const sl_sched_job *job);
/* The solo iteration time slowdown compares against: solo_iteration_ns when
 * declared, otherwise the fastest completed iteration (min_iteration_ns, the
 * estimate of running alone: sharing only ever adds time); 0 = unknown. */
uint64_t sl_sched_job_solo_ns(const sl_sched_job *job);
/* Slowdown of the job's iterations: mean response time (queueing plus
 * device time) / solo iteration time; 1.0 means no cost from sharing. 0
 * when unknown (no completion yet, or no solo time). */
double sl_sched_job_slowdown(const sl_sched_job *job);

/* ---- lane switch latency ---- */

/* Completion time of the last item on lane (the `now` given to
 * sl_sched_complete): when the lane went idle. 0 before any completion or for
 * an unknown lane. */
uint64_t sl_sched_lane_idle_since(const sl_sched *s, uint32_t lane);

/* Records one lane idle->busy transition: gap_ns is how long the lane sat
 * idle while work was waiting (the caller computes it, see the integration
 * notes in sched.c), same_job whether the item that starts belongs to the
 * job of the lane's previous item. The two kinds are kept apart: a switch to
 * another job and the same job continuing. O(1), never allocates.
 * Precondition: lane < sl_sched_lane_capacity(s). */
void sl_sched_note_gap(sl_sched *s, uint32_t lane, uint64_t gap_ns, bool same_job);

typedef struct sl_sched_gap_stats {
    uint64_t count;
    uint64_t sum_ns; /* saturating */
    uint64_t min_ns, max_ns;
    uint64_t p50_ns, p99_ns; /* within 1/32 relative (see hist.h) */
} sl_sched_gap_stats;

/* Fills *out with the distribution of gaps of one kind over all lanes (all
 * zero when none were recorded). O(buckets), no allocation. */
void sl_sched_gap_stats_get(const sl_sched *s, bool same_job, sl_sched_gap_stats *out);
/* The q-quantile (q in [0, 1]) of one kind of gap over all lanes; 0 when
 * none were recorded. */
uint64_t sl_sched_gap_quantile(const sl_sched *s, bool same_job, double q);
/* Gaps recorded on one lane and their sum; 0 for an unknown lane. */
uint64_t sl_sched_lane_gap_count(const sl_sched *s, uint32_t lane, bool same_job);
uint64_t sl_sched_lane_gap_sum_ns(const sl_sched *s, uint32_t lane, bool same_job);

#endif
