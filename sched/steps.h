/* Step dispatch of low-priority (lp) iterations beside high-priority (hp)
 * jobs, for salusd's executor (server/stepwise.c) and the simulator
 * (eval/lib/evsim.c) alike. Under a policy with SL_POLICY_STEPWISE, while hp
 * jobs exist, an lp iteration goes in steps, and nothing new is issued
 * while hp work is pending: an hp iteration then waits for at most the
 * steps already running.
 *
 * A step is a segment: a contiguous range of the iteration's ops, [first,
 * end), submitted back to back with one completion after the last. Its
 * ops' predicted durations (the gap filler's per-op predictor, measured)
 * total at most segment_ns; an op never measured, or one predicted longer
 * than the bound, is a segment of its own, and one predicted longer than
 * the part length goes in parts (as many as bring each part under it, at
 * most what the op can be split into). Segments of a graph are the same
 * from one iteration to the next while its ops' predictions hold, so a
 * backend may keep each range as a captured sub-graph.
 *
 * How many steps may be in flight, and when they go:
 *  - concurrent (salusd's default): one per lp iteration (each lp lane
 *    keeps one segment in flight) whenever no hp work is pending, so lp
 *    jobs overlap as they would alone. The gap filler is not consulted:
 *    an hp request that arrives waits for the segments running then, one
 *    per lp job, side by side: about one segment's time, whatever the gaps.
 *  - serial (salusd --lp-serial): one device-wide; with SL_POLICY_GAP_FILL
 *    issued only when the gap filler (sched/gaps.h) says it fits the hp
 *    jobs' predicted idle gaps, and a long op goes in parts that fit.
 * Lp iterations waiting for a slot or a gap are parked, oldest first (lp
 * lanes take turns); one that waited starve_ns for a gap its step fits
 * gets one step anyway when no hp work is pending.
 *
 * What the caller keeps: the device (the issue callbacks submit a step and
 * queue its completion), the timer that calls sl_steps_resume again at the
 * wake time it returns, the hp arrivals and completions (sl_gaps_hp_*).
 *
 * Ownership: tasks are the caller's (embedded in its iteration), as is the
 * gap filler (it outlives the sl_steps). Pure: no clock (now is passed in),
 * no threads, no allocation. Not thread-safe: calls are serialised with
 * the gap filler's (salusd: its server lock). */
#ifndef SL_SCHED_STEPS_H
#define SL_SCHED_STEPS_H

#include "gaps.h"

#include <stdbool.h>
#include <stdint.h>

/* salusd's defaults (server/stepwise.c, server/config.h). */
#define SL_STEPS_STARVE_NS (5 * 1000 * 1000ull) /* 5 ms: bounded lp starvation */
#define SL_STEPS_MAX_PARTS 16u                  /* more parts are mostly launch cost */
#define SL_STEPS_MIN_PART_NS (100 * 1000ull)    /* shorter ones: mostly launch and callback */
#define SL_STEPS_PART_NS (600 * 1000ull)        /* the configured part length's default */
/* The segment bound's default: the most lp work an hp request waits for
 * per lp lane. The eval's FIKIT sweep (eval/drivers/fikit.c) chose it on
 * its calibration seed, and reports it on another. */
#define SL_STEPS_SEGMENT_NS (300 * 1000ull)

typedef struct sl_steps_config {
    bool gap_fill;      /* issue into predicted gaps (else as soon as no hp work is pending) */
    uint64_t part_ns;   /* part length; 0 = SL_STEPS_PART_NS */
    uint64_t starve_ns; /* 0 = SL_STEPS_STARVE_NS */
    /* the most predicted work of a segment of several ops; 0 = one op per
     * step */
    uint64_t segment_ns;
    /* one step per lp iteration in flight while no hp work is pending,
     * issued whatever the predicted gaps, not one device-wide into them */
    bool concurrent;
    /* lp steps run on compute units of their own (a compute partition,
     * docs/architecture.md): they cannot hold the SMs an hp iteration
     * needs, so the one-step limit applies only while hp work is pending
     * (what they still share, memory bandwidth and the launch path, is
     * then bounded by the steps in flight); with none pending every parked
     * task issues at once, whatever the predicted gaps (an hp arrival
     * waits for none of them) */
    bool isolated;
} sl_steps_config;

/* One lp iteration going in steps, embedded in the caller's iteration. The
 * caller sets lp and n_ops before the first sl_steps_begin and failed when
 * a step's submission or execution failed (the rest is then one last step,
 * not submitted, to reach the completion). The rest is this module's;
 * step_op, step_end, step_parts and op_start_ns describe the step in
 * flight: ops [step_op, step_end), or a part of op step_op. */
typedef struct sl_steps_task {
    sl_gaps_lp *lp; /* its graph's op-duration predictor */
    uint32_t n_ops; /* > 0 */
    bool failed;
    uint32_t next_op;     /* first op not yet issued whole */
    uint32_t part, parts; /* next_op's next part of its parts; 0 parts = not begun */
    uint32_t step_op, step_end, step_parts;
    uint64_t op_start_ns;
    struct sl_steps_task *parked_next;
    uint64_t parked_ns;
} sl_steps_task;

/* What the caller does for the dispatcher. */
typedef struct sl_steps_ops {
    /* The most parts op of t may be split into (1 = it does not split). */
    uint32_t (*split_max)(void *arg, const sl_steps_task *t, uint32_t op);
    /* Submits t's ops [first, end) back to back (parts 1), or (end ==
     * first + 1) part `part` of `parts` of op first; returns its status (a
     * failure marks t failed). */
    int (*issue)(void *arg, sl_steps_task *t, uint32_t first, uint32_t end, uint32_t part,
                 uint32_t parts);
    /* Queues the completion after the step just issued: the iteration's
     * own when last, else a step completion (which calls sl_steps_op_done).
     * A failure here means no completion will come: the step is not
     * counted in flight. */
    int (*finish)(void *arg, sl_steps_task *t, bool last);
} sl_steps_ops;

typedef struct sl_steps {
    sl_gaps *gaps;
    sl_steps_config cfg;
    sl_steps_task *parked; /* oldest first */
    uint32_t lp_in_flight, lp_in_flight_max;
    uint64_t ops_split; /* ops issued in more than one part */
    uint64_t segments;  /* steps of more than one op */
    bool finishing;     /* draining: every parked task issues at once */
} sl_steps;

/* Whether an iteration of a job goes op by op: the policy's caps ask for it
 * (SL_POLICY_STEPWISE), it is not ablated, hp jobs exist and the job is
 * not one of them. */
bool sl_steps_wanted(unsigned policy_caps, bool ablated, const sl_gaps *gaps, bool job_hp);

/* Binds the gap filler; cfg NULL = salusd's defaults with gap_fill. */
void sl_steps_init(sl_steps *s, sl_gaps *gaps, const sl_steps_config *cfg);

/* Starts t (its next step is its first) or parks it again after a step:
 * queued behind the parked ones. Follow with sl_steps_resume. */
void sl_steps_begin(sl_steps *s, sl_steps_task *t, uint64_t now);
/* A step of t (not its last) completed: measures its ops (a part stands
 * for its whole op: parts are even shares of its rows; a segment's time is
 * shared among its ops as their predictions are), frees its slot and
 * parks t for its next step. Follow with sl_steps_resume. */
void sl_steps_op_done(sl_steps *s, sl_steps_task *t, uint64_t now);
/* t's last step completed at now (the iteration is done): measures it
 * unless t failed, frees its slot. */
void sl_steps_last_done(sl_steps *s, sl_steps_task *t, uint64_t now);

/* Issues parked tasks' next steps while a slot is free (the one, or with
 * concurrent any while no hp work is pending) and the gap filler allows
 * (all of them when force or finishing). Returns when to
 * call again if some task waits for a gap (0 = no need: a completion will
 * call it). */
uint64_t sl_steps_resume(sl_steps *s, uint64_t now, bool force, const sl_steps_ops *ops, void *arg);

/* The predicted duration of t's next step (a segment, or a part of an op);
 * *end (may be NULL) = the end of its op range. */
uint64_t sl_steps_next_ns(const sl_steps *s, const sl_steps_task *t, const sl_steps_ops *ops,
                          void *arg, uint32_t *end);

#endif
