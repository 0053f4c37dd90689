/* The executor: the device side of salusd. It owns the arena, the lanes'
 * streams, the scheduler and gap filling. Iterations and control copies are
 * handed to it as tasks; each comes back through one hook when the device is
 * done with it. It knows nothing of sessions, requests or replies' contents:
 * a session embeds an sl_exec_job, a request an sl_exec_task.
 *
 * Threads and locking. Every function here is called with the server lock
 * (`lock` given at init) held, and never blocks; the executor's own threads
 * (device callbacks, the gap timer, the launchers) take that lock
 * themselves. Device work is never waited for.
 *
 * Launching. An iteration picked for a lane is submitted (feeds, ops,
 * fetches, its completion callback) either at once under the lock, when it
 * is short (at most LAUNCH_INLINE_MAX submissions, executor.c), or by a
 * launcher (launcher.h) without the lock, so the lock is held for a
 * bounded time per iteration whatever its op count. The rules:
 *  - One iteration on a stream at a time: a lane's next iteration is picked
 *    only in the completion of the one before, so no two launchers ever
 *    submit to one stream, and a session's iterations never overlap.
 *  - Completion through the one callback: the iteration ends in
 *    sl_exec_iteration_done's path (its done hook), once both the device's
 *    callback ran and its launcher let go of it (a count of two on the
 *    task), whichever is last; a failure to submit, or to queue the
 *    callback, ends it through the same path. Until then the task, its
 *    session and its lane stay pinned (lanes_busy counts it, so neither a
 *    reset nor a drain nor a close can pass it).
 *  - What a launcher reads without the lock is fixed under the lock before
 *    the hand-off and cannot change while the lane is busy: the registered
 *    graph, the task's feeds and fetches, its ephemeral base, stream and
 *    math bits, the arena (moved only by a reset, which waits for idle)
 *    and the params' addresses (moved only while their lane is idle).
 *  - Faults reach launchers through launch_stop, read before each op: a
 *    lost device stops the submission (the iteration fails with
 *    SL_EDEVICERESET through its callback). A drain lets launching
 *    iterations finish like running ones.
 * Stepwise iterations hand their feeds to a launcher, and each later step
 * that is a segment of many ops (sched/steps.h) goes to a launcher too:
 * the lock is held to pick it and its stream, the launcher submits its
 * ops and queues its one completion. A step is issued only once the one
 * before it of the same iteration completed, so a stream never holds two
 * steps of one iteration, and launch_stop reaches a segment's launcher as
 * it does a whole iteration's. Short steps (an op, a part, a few ops) are
 * submitted under the lock. */
#ifndef SL_EXEC_H
#define SL_EXEC_H

#include "config.h"
#include "device.h"
#include "gaps.h"
#include "graph.h"
#include "lanes.h"
#include "launcher.h"
#include "manager.h"
#include "partitions.h"
#include "observe.h"
#include "reply.h"
#include "scheduler.h"
#include "sl_map.h"
#include "steps.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl_exec sl_exec;

/* The executor's part of a session. Zero it, set sched's "in" fields
 * (scheduler.h), then sl_exec_join. Only executor.c writes it. */
typedef struct sl_exec_job {
    sl_sched_job sched;
    bool joined;
    bool high_priority; /* in the gap predictor as a high-priority job */
    bool low_priority;  /* joined and not high-priority: counted in parts.n_low */
    sl_gaps_hp hp;
    uint32_t compute_units; /* its session's declared need (partitions.h); 0 = none */
    uint8_t math;           /* enum sl_math bits: every op call of its iterations carries them */
} sl_exec_job;

/* What a control task does (one copy on the control stream). */
enum { SL_EXEC_COPY_IN, SL_EXEC_COPY_OUT, SL_EXEC_FILL };

/* A run's write of host bytes into a persistent tensor (Run.writes). */
typedef struct sl_exec_write {
    const sl_tensor *tensor; /* its address is read at launch */
    const void *src;
    uint64_t bytes;
} sl_exec_write;

/* One unit of device work: an iteration (sl_exec_run) or a control copy
 * (sl_exec_control). The caller fills the "in" fields and keeps the task
 * alive until the done hook; the rest is the executor's. */
typedef struct sl_exec_task {
    /* in */
    sl_exec_job *job;
    sl_graph *graph;       /* iterations: the registered graph */
    const void **feed_src; /* per graph input: its bytes */
    void **fetch_dst;      /* per fetch: where its bytes go */
    const uint32_t *fetches;
    size_t n_fetches;
    const struct sl_exec_write *writes; /* copied in before the first op */
    size_t n_writes;
    uint64_t arrival_ns; /* when the request was received */
    /* out, valid in the done hook of a finished iteration */
    uint64_t device_ns, queue_ns;
    /* the executor's */
    sl_exec *ex;
    sl_sched_item item;
    int status;
    uint64_t start_ns;
    uint64_t ephemeral_base; /* arena offset of the iteration's block */
    uint32_t lane;
    sl_stream *stream; /* the lane's, where the whole iteration was submitted */
    /* why it failed, beyond its status (sl_device_ops.stream_failure) */
    char failure[192];
    bool stepwise;        /* op by op, beside high-priority work */
    bool online;          /* counted as the online partition's work (partitions.h) */
    bool spilled;         /* its step in flight runs on the spill stream (partitions.h) */
    sl_steps_task step;   /* its progress op by op (sched/steps.h) */
    uint64_t trace_op_ns; /* when its op in flight was issued (tracing) */
    uint32_t trace_op_k;  /* and which op */
    /* a segment (a step of several ops) submitted by a launcher: the
     * stream it goes on and whether it is the iteration's last step
     * (stepwise.c) */
    sl_stream *seg_stream;
    bool seg_off_lock, seg_last;
    /* being submitted by a launcher, without the lock (executor.c takes
     * it to charge a new recording's memory) */
    bool off_lock;
    void *trace_marks; /* a whole iteration's op timing (exec_trace.c), or NULL */
    uint8_t math;      /* its job's math bits, fixed when it starts */
    /* where its lane's stream runs and what it works in, fixed when it
     * starts: the partition and the workspace (part of a recording's key,
     * replay.h) */
    uint64_t place;
    /* Launched off the lock: the launcher's hand-off and who ends it (the
     * last of the device's callback and the launcher, exec.h) */
    sl_launch_job launch_job;
    _Atomic unsigned launch_refs;
    int device_status; /* the device callback's status */
} sl_exec_task;

typedef struct sl_exec_hooks {
    void *arg;
    /* Task t finished with status (lock held; must not block). lane_idle:
     * an iteration's lane went idle, so memory may have been freed for
     * waiting sessions. Replies go into box. */
    void (*done)(void *arg, sl_exec_task *t, int status, bool lane_idle, sl_outbox *box);
    /* Releases the lock (held on entry) and sends what box holds. */
    void (*unlock_send)(void *arg, sl_outbox *box);
    /* Optional. A new recording of job's session is to be charged bytes of
     * which `outside` (> 0) are beyond its persistent region
     * (sl_mem_framework_outside): whether those may be held (its tenant's
     * quota has room). False with the reason, for status and the log,
     * written into why (len bytes): the recording is then not made. Lock
     * held; must not block. */
    bool (*recording_room)(void *arg, const sl_exec_job *job, uint64_t outside, char *why,
                           size_t len);
    /* Optional. The memory manager's framework charge of job's session
     * changed (a recording charged or given back): whoever counts its
     * part outside the region brings that count in line. Lock held; must
     * not block. */
    void (*recordings_charged)(void *arg, sl_exec_job *job);
} sl_exec_hooks;

/* The server side of a memory-manager lane: the stream its iterations run
 * on (streams are kept and reused; manager lane ids are reused too, so a
 * record whose serial differs from the manager's belongs to a reclaimed
 * lane). */
typedef struct sl_lane {
    uint32_t id;
    uint64_t serial;
    sl_stream *stream;
    int priority; /* its stream's (device.h): the class of what it runs */
    /* the workspace its stream was given (the lane's framework block; it
     * moves with the lane); workspace_bytes UINT64_MAX = none given yet */
    void *workspace;
    uint64_t workspace_bytes;
    /* the partition its stream was last bound to (sl_exec_parts_bind;
     * NULL: none) */
    const sl_partition *bound;
} sl_lane;

typedef struct sl_spare_stream {
    sl_stream *stream;
    int priority;
} sl_spare_stream;

/* Counters, for status. */
typedef struct sl_exec_stats {
    uint64_t iterations;  /* finished */
    uint64_t ops_split;   /* stepwise ops run in parts */
    uint64_t lp_segments; /* stepwise steps of several ops */
    uint32_t lanes_busy;
    uint32_t control_in_flight;
    uint32_t lp_in_flight;     /* low-priority steps on the device now */
    uint32_t lp_in_flight_max; /* the most there ever were while stepwise */
} sl_exec_stats;

struct sl_exec {
    pthread_mutex_t *lock;
    const sl_config *cfg;
    sl_device *dev;
    sl_mem_mgr *mem;
    void *arena; /* device address of offset 0 */
    uint64_t capacity;
    sl_sched *sched;
    sl_exec_hooks hooks;
    sl_map lanes; /* manager lane id -> sl_lane */
    sl_spare_stream *spare;
    size_t n_spare, cap_spare;
    sl_stream *copy_stream; /* control tasks */
    bool halted;            /* the device is lost: nothing new starts */
    sl_lanes handoff;       /* which iteration starts on which lane (sched/lanes.h) */
    sl_gaps gaps;           /* high-priority jobs' idle-gap predictions */
    sl_steps steps;         /* stepwise iterations, the one lp slot (sched/steps.h) */
    pthread_t timer;        /* re-checks parked iterations when a gap may open */
    pthread_cond_t timer_cond;
    uint64_t timer_deadline; /* 0 = none */
    bool timer_running, timer_stop;
    sl_exec_stats stats; /* lanes_busy and the stepwise counters: sl_exec_get_stats */
    sl_exec_parts parts; /* compute partitions (partitions.h) */
    sl_obs *obs;         /* histograms and trace (observe.h); NULL = none */
    /* The version every persistent tensor's sl_tensor_ref carries
     * (tensor.h): advanced after anything that may write persistent memory
     * is submitted (a control copy or fill, an op writing a param in place)
     * and again when it completed, so no (address, version) pair is ever
     * seen with two contents outside a run racing with the write itself. */
    _Atomic uint64_t param_version;
    /* device resets so far: a recording from before one is gone (replay.h) */
    _Atomic uint64_t resets;
    /* partition layouts so far: bumped whenever a stream may have moved to
     * other units (partitions.c) without salusd knowing which, so that no
     * recording made before is replayed (replay.h) */
    _Atomic uint64_t binds;
    sl_launchers launchers; /* submit long iterations without the lock */
    /* set with halted when the device is lost: launchers stop submitting */
    atomic_bool launch_stop;
};

/* Opens the executor on dev: the arena (capacity bytes), the control
 * stream, the scheduler with cfg's policy, the gap timer. On failure call
 * sl_exec_fini. Errors: SL_EINVAL (unknown policy), the device's, SL_ENOMEM. */
int sl_exec_init(sl_exec *ex, const sl_config *cfg, sl_device *dev, sl_mem_mgr *mem,
                 uint64_t capacity, pthread_mutex_t *lock, const sl_exec_hooks *hooks);
/* Stops the timer and frees every stream and the arena. Nothing may run;
 * call without the lock. Safe on a zeroed or half-initialised executor. */
void sl_exec_fini(sl_exec *ex);

/* The device address of arena offset addr. */
static inline void *sl_exec_ptr(const sl_exec *ex, uint64_t addr)
{
    return (char *) ex->arena + addr;
}

/* Job j (sched "in" fields set, sched.lane its lane) starts being
 * scheduled. Errors: SL_ENOMEM. */
int sl_exec_join(sl_exec *ex, sl_exec_job *j, uint64_t now);
/* Job j leaves (nothing of it may be running or queued). */
void sl_exec_leave(sl_exec *ex, sl_exec_job *j, sl_outbox *box);
/* Moves job j (not running) to lane. Errors: SL_ENOMEM. */
int sl_exec_move(sl_exec *ex, sl_exec_job *j, uint32_t lane);
/* Changes job j's priority and/or weight (takes effect at the next pick). */
void sl_exec_set_share(sl_exec *ex, sl_exec_job *j, const int *priority, const double *weight,
                       sl_outbox *box);
/* Changes the policy (every job's class follows). */
void sl_exec_set_policy(sl_exec *ex, const sl_policy_ops *policy, bool strict, sl_outbox *box);
/* Whether a job of this priority gets a lane of its own under the current
 * policy (SL_POLICY_EXCLUSIVE_LANES, unless ablated). */
bool sl_exec_wants_exclusive(const sl_exec *ex, int priority);
/* Where job j (not yet joined) waits for memory under the current policy
 * (sched/scheduler.h sl_sched_wait_rank: smaller goes in first). */
uint64_t sl_exec_wait_rank(const sl_exec *ex, const sl_exec_job *j);

/* Queues iteration t of t->job and starts whatever may start. The done
 * hook comes once, from a device callback or (when it cannot even be
 * submitted) from within this call's kick of the lanes. */
void sl_exec_run(sl_exec *ex, sl_exec_task *t, sl_outbox *box);
/* Takes job j's queued, not started iteration out (at most one is queued:
 * a session's requests run in order); NULL when there is none. The done
 * hook will not come for it. */
sl_exec_task *sl_exec_unqueue(sl_exec *ex, sl_exec_job *j);
/* Submits one control copy for t: kind SL_EXEC_COPY_IN (host to arena
 * offset addr), SL_EXEC_COPY_OUT (arena to host) or SL_EXEC_FILL (zeros of
 * shape at addr). The done hook follows. Errors (no hook then): the
 * device's, SL_ENODEV while halted. */
int sl_exec_control(sl_exec *ex, sl_exec_task *t, int kind, uint64_t addr, void *host,
                    uint64_t bytes, const sl_shape *shape);
/* Starts the next iteration on every idle lane whose policy picks one. */
void sl_exec_kick(sl_exec *ex, sl_outbox *box);
/* Parked stepwise iterations run on to their end without waiting for gaps
 * (drain); finishing stays set. */
void sl_exec_finish_parked(sl_exec *ex);

/* The counters, current. */
sl_exec_stats sl_exec_get_stats(const sl_exec *ex);

/* Whether nothing runs on the device (no lane busy, no control copy). */
bool sl_exec_idle(const sl_exec *ex);
/* Stops starting device work (a device-lost error was seen). */
void sl_exec_halt(sl_exec *ex);
/* Recovers a lost device: destroys every stream and the arena, resets the
 * device, allocates the arena again (same size and offsets; contents lost)
 * and un-halts. Lock held on entry and return, dropped while the device
 * works. Precondition: sl_exec_idle. Errors: the device's (the executor
 * stays halted). */
int sl_exec_reset_device(sl_exec *ex);

#endif
