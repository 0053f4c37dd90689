/* The lane hand-off: which iteration starts on which lane, and when a lane
 * is busy or idle, for salusd's executor (server/executor.c) and the
 * simulator (eval/lib/evsim.c) alike. It joins the two libraries a lane belongs
 * to: the scheduler (sched/scheduler.h) picks whose iteration runs next on
 * a lane; the memory manager (memory/manager.h) must know which lanes are
 * busy (busy lanes never move or shrink). The order of those calls is the
 * decision this module owns:
 *  - a job became ready (sl_lanes_ready): enqueue, kick only its lane;
 *  - a lane went idle (sl_lanes_done): charge the device time, then hand
 *    the lane to the next pick before anything else, so the device idles
 *    only for the switch; the lane is marked idle in the manager only when
 *    nobody took it (sl_lanes_settle), after the caller's bookkeeping;
 *  - a job left (sl_lanes_leave): remove it, kick its lane (a strict policy
 *    may have kept the lane for it);
 *  - a kick (sl_lanes_kick): the manager's lane (a reused id is a new lane:
 *    its serial differs), bind it in the scheduler, ask for the pick, mark
 *    the lane busy in both, let the caller start the work (the start
 *    callback), then record the switch gap (sl_sched_note_gap).
 * What the caller keeps: streams, workspaces, feeds and fetches, failure
 * paths, its lock. The start callback is where the work goes to the device.
 *
 * Ownership: jobs and items are the caller's (embedded, as in the
 * scheduler); the scheduler and manager are the caller's and outlive the
 * sl_lanes; the per-lane records are this module's (sl_lanes_fini).
 * Not thread-safe: the caller serialises every call with those to the
 * scheduler and the manager (salusd: its server lock). No clock: now is
 * passed in. Allocates only in sl_lanes_join and sl_lanes_move. */
#ifndef SL_SCHED_LANES_H
#define SL_SCHED_LANES_H

#include "manager.h"
#include "scheduler.h"
#include "sl_map.h"

#include <stdbool.h>
#include <stdint.h>

/* One lane's hand-off state. Private. */
typedef struct sl_lanes_rec {
    uint64_t serial;      /* the manager's serial the record belongs to */
    uint64_t last_job_id; /* whose iteration ran last on it, 0 = none since serial */
    bool busy;            /* an iteration started here and has not completed */
} sl_lanes_rec;

typedef struct sl_lanes {
    sl_sched *sched;
    sl_mem_mgr *mem;
    sl_map tenants;     /* tenant key -> sl_sched_tenant, while it has joined jobs */
    sl_lanes_rec *recs; /* indexed by lane id, n_recs entries */
    uint32_t n_recs;
    uint32_t n_busy;
} sl_lanes;

/* What a kick decided to start: the caller puts it on the device. */
typedef struct sl_lanes_start {
    sl_mem_lane_info info; /* the lane, read after it was marked busy (idle lanes move) */
    sl_sched_job *job;
    sl_sched_item *item;
    bool new_serial; /* the lane id names a new lane since its last start */
    /* Whose iteration ran last on the lane, 0 = none since it began: the
     * start is a switch when it differs from job->id (a caller that models
     * the cost of a switch, eval/lib/evsim.c, charges it here). */
    uint64_t prev_job_id;
    /* The switch gap recorded (sl_sched_note_gap) runs from the later of
     * the lane's idle time and ready_ns to launched_ns. The start callback
     * may set both: ready_ns is preset to the item's enqueue time (salusd
     * sets when the request arrived), launched_ns to the kick's now (salusd
     * sets its clock after submitting). */
    uint64_t ready_ns, launched_ns;
} sl_lanes_start;

/* Starts st's iteration on the device. Any return but SL_OK: it could not
 * be started; sl_lanes_kick undoes the busy marks and reports
 * SL_LANES_FAILED. Must not call back into this module. */
typedef int (*sl_lanes_start_fn)(void *arg, sl_lanes_start *st);

typedef enum sl_lanes_kicked {
    SL_LANES_NONE,    /* nothing started: the lane is busy, gone, or its policy keeps it idle */
    SL_LANES_STARTED, /* *out started; the lane is busy */
    SL_LANES_FAILED,  /* *out was picked but its start failed; the lane is idle again (also in
                       * the manager) and the job still running in the scheduler: the caller
                       * completes it (sl_sched_complete, 0 device time) and fails it */
} sl_lanes_kicked;

/* Binds sched and mem; no lanes known yet. Never fails. */
void sl_lanes_init(sl_lanes *L, sl_sched *sched, sl_mem_mgr *mem);
/* Frees the records and tenants (not the scheduler or manager). Safe on a
 * zeroed one. */
void sl_lanes_fini(sl_lanes *L);

/* Job (its "in" fields set, job->lane its lane) starts being scheduled:
 * lanes up to its own are reserved in the scheduler and here, job->tenant
 * is set to the tenant record of job->tenant_key (made on the first of its
 * jobs, its weight job->tenant_weight; kept until its last job leaves;
 * key 0 leaves job->tenant as it is), then sl_sched_job_add. Errors:
 * SL_ENOMEM (nothing changed). */
int sl_lanes_join(sl_lanes *L, sl_sched_job *job, uint64_t now);
/* Moves job (not running) to lane. Errors: SL_ENOMEM (it stays). */
int sl_lanes_move(sl_lanes *L, sl_sched_job *job, uint32_t lane);

/* The decision on one lane, as described at the top. A lane no joined job
 * ever named, or one the manager no longer has, starts nothing. start NULL
 * (here and below): start nothing (salusd after losing its device); the
 * rest of each call still happens. */
sl_lanes_kicked sl_lanes_kick(sl_lanes *L, uint32_t lane, uint64_t now, sl_lanes_start_fn start,
                              void *arg, sl_lanes_start *out);
/* Item of job arrived: enqueue it, then kick job's lane (only it can have
 * changed). */
sl_lanes_kicked sl_lanes_ready(sl_lanes *L, sl_sched_job *job, sl_sched_item *item, uint64_t now,
                               sl_lanes_start_fn start, void *arg, sl_lanes_start *out);
/* The iteration of job running on lane completed after device_ns of device
 * time: charge it (sl_sched_complete), free the lane and hand it to the
 * next pick at once. Call sl_lanes_settle after the caller's own
 * bookkeeping. */
sl_lanes_kicked sl_lanes_done(sl_lanes *L, sl_sched_job *job, uint32_t lane, uint64_t device_ns,
                              uint64_t now, sl_lanes_start_fn start, void *arg,
                              sl_lanes_start *out);
/* After sl_lanes_done: marks the lane idle in the manager when nobody took
 * it (it may shrink or be reclaimed, letting waiting sessions in: the
 * caller then drains sl_mem_next_admitted). True when it did. */
bool sl_lanes_settle(sl_lanes *L, uint32_t lane);
/* Job (nothing of it running) leaves: removed from the scheduler (its
 * queued items, if any, come back as in sl_sched_job_remove through
 * *dropped, which may be NULL), its tenant record freed if it was the
 * last of its jobs, then its lane is kicked. Other lanes held for its
 * tenant (sl_sched_lane_hold) are the caller's to kick. */
sl_lanes_kicked sl_lanes_leave(sl_lanes *L, sl_sched_job *job, uint64_t now,
                               sl_lanes_start_fn start, void *arg, sl_lanes_start *out,
                               sl_sched_item **dropped);

/* Whether an iteration runs on lane now. */
bool sl_lanes_busy(const sl_lanes *L, uint32_t lane);

#endif
