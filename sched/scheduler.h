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
} sl_sched_item;

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
    /* scheduler state */
    uint64_t arrival_ns;  /* when added */
    uint64_t arrival_seq; /* admission order */
    uint64_t attained_ns; /* device time charged so far */
    uint64_t iterations_done;
    uint64_t switches; /* times this job took a lane from another job */
    uint32_t n_queued;
    bool running; /* has an item picked and not completed */
    sl_sched_item *head, *tail;
    struct sl_sched_job *prev_job, *next_job; /* all jobs, admission order */
} sl_sched_job;

typedef struct sl_policy_ops {
    const char *name;
    /* Chooses the job whose head item runs next on `lane`, among jobs with
     * lane == lane, n_queued > 0 and !running. NULL = leave the lane idle.
     * Must not modify the jobs. strict: the paper's non-work-conserving
     * variant where the policy has one. */
    sl_sched_job *(*pick)(const sl_sched *s, uint32_t lane, uint64_t now, bool strict);
} sl_policy_ops;

extern const sl_policy_ops sl_policy_fifo;
extern const sl_policy_ops sl_policy_fair;

/* Looks up a policy by name; NULL if unknown. */
const sl_policy_ops *sl_sched_policy_find(const char *name);
/* Comma-separated names of all policies, for --help. */
const char *sl_sched_policy_names(void);

/* Creates a scheduler with the given policy. Errors: SL_EINVAL, SL_ENOMEM. */
int sl_sched_create(const sl_policy_ops *policy, bool strict, sl_sched **out);
void sl_sched_destroy(sl_sched *s);
void sl_sched_set_policy(sl_sched *s, const sl_policy_ops *policy, bool strict);
const sl_policy_ops *sl_sched_policy(const sl_sched *s);

/* Adds a job (its "in" fields set); the scheduler zeroes its state.
 * Precondition: job->lane < sl_sched_lane_capacity(s). Never allocates. */
void sl_sched_job_add(sl_sched *s, sl_sched_job *job, uint64_t now);
/* Removes a job. Precondition: not running. Its queued items are unlinked
 * and returned as a list (through item->next) for the caller to fail. */
sl_sched_item *sl_sched_job_remove(sl_sched *s, sl_sched_job *job);

/* Appends item to job's queue. */
void sl_sched_enqueue(sl_sched *s, sl_sched_job *job, sl_sched_item *item, uint64_t now);

/* Asks the policy for the next item on lane. On success pops it, marks the
 * job running and returns true with *job_out and *item_out set; returns false
 * when the lane should stay idle. */
bool sl_sched_next(sl_sched *s, uint32_t lane, uint64_t now, sl_sched_job **job_out,
                   sl_sched_item **item_out);

/* Marks job's running item complete and charges device_ns to it (saturating)
 * and one iteration. Precondition: job is running. The lane becomes idle. */
void sl_sched_complete(sl_sched *s, sl_sched_job *job, uint64_t device_ns, uint64_t now);

/* Iteration helpers for policies and status: all jobs in admission order. */
sl_sched_job *sl_sched_first_job(const sl_sched *s);
static inline sl_sched_job *sl_sched_next_job(const sl_sched_job *j)
{
    return j->next_job;
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
/* Whether the current policy runs in its strict (paper) variant. */
bool sl_sched_strict(const sl_sched *s);

/* Setters for a job's "in" fields; each takes effect at the lane's next
 * pick. set_lane preconditions: the job is not running, and
 * lane < sl_sched_lane_capacity(s). Its queued items move with it. */
void sl_sched_job_set_weight(sl_sched *s, sl_sched_job *job, double weight);
void sl_sched_job_set_priority(sl_sched *s, sl_sched_job *job, int priority);
void sl_sched_job_set_lane(sl_sched *s, sl_sched_job *job, uint32_t lane);

#endif
