/* The discrete-event simulator (evsim.h). One event heap on a virtual clock;
 * per GPU the salusd state (a scheduler, a memory manager, lane records)
 * and one processor-sharing device with rate caps (kernels/sim sl_sim_psc,
 * which is sl_sim_ps when every job fills the device). The handlers
 * below follow salusd's code paths step for step; each names the server
 * function it stands for, so a change there shows where to change here
 * (eval/README.md lists what is duplicated). */
#include "evsim.h"

#include "gaps.h"
#include "lanes.h"
#include "manager.h"
#include "scheduler.h"
#include "sim/sim.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_time.h"
#include "partition.h"
#include "pdev.h"
#include "steps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* salusd's defaults (server/server.c memory_init, kernels/sim/device.c). */
#define SIM_WORKSPACE_HINT (64ull << 20)

enum ev_kind {
    EV_ARRIVAL, /* a job opens its session */
    EV_CLIENT,  /* a job's client sends its next request (run or close) */
    EV_GPU,     /* the next departure on a GPU's device (if still current) */
    EV_TIMER,   /* a GPU's gap timer: parked low-priority steps re-checked */
};

typedef struct event {
    uint64_t t;
    uint64_t seq; /* scheduling order: ties at one time run first-scheduled first */
    uint32_t kind;
    uint32_t gpu;
    uint64_t arg; /* job index, or the GPU's event version */
} event;

typedef struct sim_job {
    sl_sched_job sched;  /* salusd embeds this in its session */
    sl_sched_item item;  /* and this in its iteration: one in flight per job */
    sl_eval_pdev_job pj; /* the iteration's (or op's) work on the device */
    uint64_t *lat;       /* inference: latency of each completed request */
    const sl_eval_job_spec *spec;
    sl_eval_job_result res;
    unsigned gpu;
    uint64_t started, done;
    uint64_t start_ns; /* of the iteration on the device */
    struct sim_job *next_done;
    bool joined;
    /* op-level execution (the executor's sl_exec_job and sl_exec_task) */
    bool is_hp;            /* in the gap predictor as a high-priority job */
    sl_gaps_hp hp;         /* its gaps, while is_hp */
    bool online;           /* its iteration on the device counts in the plan's load */
    sl_gaps_lp lp;         /* its ops' durations, when low-priority */
    sl_steps_task step;    /* its iteration's progress op by op */
    bool stepwise;         /* the iteration in flight goes through the dispatcher */
    bool step_last;        /* the step in flight is its iteration's last */
    uint32_t op;           /* whole iteration with a timeline: the op in flight */
    uint64_t launched_ns;  /* pipelined: when the op in flight's launch ends */
    uint64_t launches_ns;  /* the sum of its ops' launches (an iteration's, pipelined) */
    uint64_t request_ns;   /* when the request in flight was meant to be sent */
    uint64_t switch_delay; /* switch cost still to charge to the first op issued */
    /* graph launches (sl_eval_config.graph_launches) */
    bool replay;              /* the next op submitted begins a replay */
    uint32_t seg_op, seg_end; /* the step in flight: the op on the device, the end of its segment */
} sim_job;

typedef struct gpu {
    sl_sched *sched;
    sl_mem_mgr *mem;
    sl_eval_pdev dev;      /* its compute, whole or partitioned (pdev.h) */
    sl_part_plan plan;     /* the online partition's size (part_plan) */
    sl_part_load load;     /* the plan's input: hp iterations' busy time, as salusd's */
    uint32_t hp_in_flight; /* high-priority requests sent and not replied to */
    uint64_t version;      /* of the GPU event that is current */
    uint64_t event_t;      /* when that event fires; UINT64_MAX = none */
    sim_job *done_head;    /* departures collected by the device, in order */
    sim_job **done_tail;
    uint64_t synced_ns; /* the device's state time, for busy accounting */
    uint64_t busy_ns;   /* time with at least one iteration on the device */
    double occupied_ns; /* its integral of the share of the device in use */
    sl_lanes handoff;   /* salusd's lane hand-off (sched/lanes.h) */
    sl_gaps gaps;       /* high-priority jobs' gaps (sched/gaps.h) */
    sl_steps steps;     /* low-priority steps (sched/steps.h) */
    uint64_t timer_t;   /* the gap timer's deadline; 0 = none */
    uint32_t n_jobs;    /* placed and not finished */
    uint64_t launch_t;  /* when the GPU's launch server has served its queue */
} gpu;

typedef struct sim {
    const sl_eval_config *cfg;
    const sl_policy_ops *policy;
    sim_job *jobs;
    size_t n_jobs;
    gpu *gpus;
    event *heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    sl_eval_summary *sum;
    uint64_t *lat_all;     /* every inference job's latencies, job after job */
    const sim_job **by_id; /* the jobs sorted by id, when switches cost */
    int error;             /* the first library error: ends the run */
} sim;

/* ---- the event heap --------------------------------------------------- */

static bool ev_before(const event *a, const event *b)
{
    return a->t != b->t ? a->t < b->t : a->seq < b->seq;
}

static void push(sim *s, uint64_t t, uint32_t kind, uint32_t g, uint64_t arg)
{
    if (s->n_heap == s->cap_heap) {
        size_t cap = s->cap_heap ? s->cap_heap * 2 : 1024;
        event *h = sl_reallocarray(s->heap, cap, sizeof *h);
        if (!h) {
            s->error = SL_ENOMEM;
            return;
        }
        s->heap = h;
        s->cap_heap = cap;
    }
    event e = {.t = t, .seq = s->seq++, .kind = kind, .gpu = g, .arg = arg};
    size_t i = s->n_heap++;
    while (i > 0 && ev_before(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
}

static event pop(sim *s)
{
    event top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && ev_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!ev_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* ---- the device --------------------------------------------------------- */

static void collect_done(void *arg, sl_eval_pdev_job *pj)
{
    gpu *g = arg;
    sim_job *j = pj->ps.user;
    j->next_done = NULL;
    *g->done_tail = j;
    g->done_tail = &j->next_done;
}

/* Brings the device's state to now; departures up to now wait in the done
 * list for handle_done (same instant, so their order among this instant's
 * other events does not move time). */
static void device_sync(gpu *g, uint64_t now)
{
    /* every departure is a sync (its event, or an earlier one that saw it
     * due), so the device was busy for all of (synced, now] or for none */
    /* the share in use (pdev.c): the level's jobs take what the capped
     * ones leave, so it is 1 whenever one runs below its cap */
    sl_eval_pdev_sync(&g->dev, now);
    g->busy_ns = g->dev.busy_ns;
    g->occupied_ns = g->dev.occupied_ns;
    g->synced_ns = now;
}

/* Makes the GPU's next device event the current one. */
static void device_rearm(sim *s, uint32_t gi)
{
    gpu *g = &s->gpus[gi];
    uint64_t t = sl_eval_pdev_next(&g->dev);
    if (t == g->event_t)
        return;
    g->event_t = t;
    g->version++;
    if (t != UINT64_MAX)
        push(s, t, EV_GPU, gi, g->version);
}

/* ---- memory accounting (check_memory and the summary) ------------------- */

static void memory_observe(sim *s, gpu *g)
{
    sl_mem_stats st;
    sl_mem_get_stats(g->mem, &st);
    uint64_t held = st.persistent_reserved + st.lanes + st.framework;
    if (held > s->sum->max_held_bytes)
        s->sum->max_held_bytes = held;
    if (st.n_sessions > s->sum->max_admitted)
        s->sum->max_admitted = st.n_sessions;
    if (st.n_lanes > s->sum->max_lanes)
        s->sum->max_lanes = st.n_lanes;
    if (held > st.capacity)
        s->sum->memory_violations++;
    if (s->cfg->check_memory && sl_mem_check(g->mem) != SL_OK)
        s->sum->memory_violations++;
}

/* ---- decisions timed (measure_decisions) -------------------------------- */

static uint64_t decision_begin(const sim *s)
{
    return s->cfg->measure_decisions ? sl_now_ns() : 0;
}

static void decision_end(sim *s, uint64_t t0)
{
    if (s->cfg->measure_decisions) {
        s->sum->decision_wall_ns += sl_now_ns() - t0;
        s->sum->decisions++;
    }
}

/* ---- the device side of a start: server/executor.c launch ---------------- */

/* What the callbacks of the lane hand-off and the step dispatcher need. */
typedef struct ctx {
    sim *s;
    uint32_t gi;
    uint64_t now;
} ctx;

/* The dispatcher's steps of an iteration of j run over its ops, or the
 * whole iteration as one. */
static uint32_t job_ops(const sim_job *j)
{
    return j->spec->ops ? j->spec->n_ops : 1;
}

static int cmp_by_id(const void *a, const void *b)
{
    uint64_t x = (*(const sim_job *const *) a)->spec->id,
             y = (*(const sim_job *const *) b)->spec->id;
    return x < y ? -1 : x > y;
}

/* The job of that id (ids are unique, validate()); by_id is sorted. */
static const sim_job *job_by_id(const sim *s, uint64_t id)
{
    size_t lo = 0, hi = s->n_jobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t m = s->by_id[mid]->spec->id;
        if (m == id)
            return s->by_id[mid];
        if (m < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The config's switch cost when a lane whose last iteration was prev_id's
 * (0 = none since the lane began, sl_lanes_start) starts an iteration of
 * j; 0 when it is the same job. */
static uint64_t switch_cost(sim *s, uint64_t prev_id, sim_job *j)
{
    const sl_eval_config *c = s->cfg;
    if (!prev_id || prev_id == j->spec->id ||
        (c->switch_cost_ns == 0 && c->switch_ns_per_byte == 0))
        return 0;
    double bytes = (double) j->spec->persistent_bytes;
    const sim_job *prev = job_by_id(s, prev_id);
    if (prev && prev->joined)
        bytes += (double) prev->spec->persistent_bytes;
    uint64_t ns = c->switch_cost_ns + (uint64_t) (c->switch_ns_per_byte * bytes + 0.5);
    j->res.switch_ns += ns;
    return ns;
}

/* Op k (or part of it) on the job's stream: its launch, then its work on
 * the shared device. Without a timeline the iteration is one op, capped at
 * the job's utilisation; an op of a timeline is capped at its occupancy
 * (the share of the SMs it fills alone, kernels/sim): its launch is
 * simulated, so the gaps that make a whole iteration under-use the device
 * are already there. A part of a split op keeps the op's occupancy (parts
 * split rows, and a part short enough to fill gaps is still an op of the
 * same width; an under-estimate of what a part leaves free). A switch
 * charged at the start delays the first op.
 *
 * Launches go through the GPU's one launch server (the driver and front
 * end of salusd's single context), first come first served: a launch
 * starts when the stream issues it or when the server has finished the
 * launches issued before it, whichever is later, and takes launch_ns.
 * FIFO because a context's launches are serialised in the order the host
 * issues them (the driver's submission path is per context, one front end
 * drains the streams' queues). As kernels/sim/stream.c, a stream issues
 * op k + 1 when op k has completed (the launch does not overlap the
 * previous op's work): the launch cost stands for the per-op gap a stream
 * leaves, which is what u counts. (A real CUDA stream is asynchronous: the
 * host may enqueue op k + 1 while op k runs, hiding the launch behind
 * long kernels.) A job without a timeline asks for its launch share of the
 * same path in the fluid model (sl_sim_psc_submit_ex). */
/* The stream class of a job's ops, as server/executor.c's stream_priority:
 * above normal for high-priority jobs, below normal for the others while
 * high-priority jobs exist, normal otherwise. salusd fixes a lane's stream
 * while the lane is busy and swaps it when idle; here the class is taken
 * when each op is submitted (the same while the classes do not change). */
static int stream_priority(const sim *s, const gpu *g, const sim_job *j)
{
    if (s->cfg->no_stream_classes)
        return 0;
    if (j->is_hp)
        return 1;
    return g->gaps.n_hp > 0 ? -1 : 0;
}

/* Partitions plus gap filling (evsim.h part_spill_block_ns): a low-priority
 * op may go to the online partition while it is idle and no high-priority
 * request is on its way through salusd (the gap filler's own test), when
 * one of its blocks there is short enough: a request arriving meanwhile
 * waits for at most that (kernels/sim psc's block wait). */
static bool spill_ok(const sim *s, const gpu *g, const sl_eval_pdev_op *op, uint64_t now)
{
    (void) now;
    if (g->dev.n_parts < 2 || g->dev.shared || s->cfg->part_spill_block_ns == 0 ||
        g->gaps.n_hp == 0)
        return false;
    if (!sl_eval_pdev_idle(&g->dev, SL_EVAL_PART_ONLINE) || g->hp_in_flight > 0)
        return false;
    /* only where it would finish sooner than on its own partition beside
     * what runs there (the online one has fewer SMs) */
    if (sl_eval_pdev_estimate_ns(&g->dev, SL_EVAL_PART_ONLINE, op) >=
        sl_eval_pdev_estimate_ns(&g->dev, SL_EVAL_PART_OFFLINE, op))
        return false;
    return sl_eval_pdev_block_ns(&g->dev, SL_EVAL_PART_ONLINE, op) <= s->cfg->part_spill_block_ns;
}

/* Whether j's whole iteration in flight has its launches reserved at its
 * start (sl_eval_config.pipelined_launches). */
static bool pipelined(const sim *s, const sim_job *j)
{
    return s->cfg->pipelined_launches && !s->cfg->graph_launches && !j->stepwise && j->spec->ops;
}

static void submit_op(sim *s, uint32_t gi, sim_job *j, uint32_t k, uint32_t part, uint32_t parts,
                      uint64_t now)
{
    gpu *g = &s->gpus[gi];
    uint64_t launch = 0, work = j->spec->iteration_ns;
    if (j->spec->ops) {
        launch = j->spec->ops[k].launch_ns;
        work = j->spec->ops[k].work_ns;
    }
    /* parts are even shares of the op's rows, each its own launch */
    uint64_t share = work / parts;
    if (part + 1 == parts)
        share = work - share * (parts - 1);
    uint64_t delay = j->switch_delay;
    j->switch_delay = 0;
    device_sync(g, now);
    j->pj.ps.user = j;
    double cap = j->spec->utilisation;
    if (j->spec->ops)
        cap = j->spec->ops[k].occupancy > 0 ? j->spec->ops[k].occupancy : 1.0;
    sl_eval_pdev_op op = {.work_ns = share, .occupancy = cap};
    if (j->spec->ops) {
        /* a part is its share of the op's compute and memory time */
        op.waves = j->spec->ops[k].occupancy;
    }
    if (j->spec->ops && j->spec->op_shapes) {
        const sl_eval_op_shape *o = &j->spec->op_shapes[k];
        double f = work ? (double) share / (double) work : 1.0;
        op.compute_ns = (uint64_t) ((double) o->compute_ns * f + 0.5);
        op.memory_ns = (uint64_t) ((double) o->memory_ns * f + 0.5);
        op.waves = o->waves;
    }
    uint64_t arrive = now + delay + launch;
    double launch_share = 0.0;
    if (s->cfg->graph_launches && j->spec->ops) {
        /* a replay's one launch on the path, then the node's own cost */
        uint64_t ready = now + delay;
        if (j->replay) {
            j->replay = false;
            if (!s->cfg->private_launches) {
                ready = ready > g->launch_t ? ready : g->launch_t;
                g->launch_t = ready + s->cfg->graph_launch_ns;
            }
            ready += s->cfg->graph_launch_ns;
        }
        arrive = ready + s->cfg->graph_node_ns;
    } else if (pipelined(s, j)) {
        /* reserved when the iteration started (start_on_device) */
        j->launched_ns += launch;
        arrive = j->launched_ns > now + delay ? j->launched_ns : now + delay;
    } else if (!s->cfg->private_launches) {
        if (launch > 0) {
            uint64_t issue = now + delay;
            uint64_t begin = issue > g->launch_t ? issue : g->launch_t;
            g->launch_t = begin + launch;
            arrive = g->launch_t;
        }
        if (!j->spec->ops)
            launch_share = j->spec->launch_share;
    }
    /* an op's block unknown (0) is taken as the whole part: one wave, the
     * longest a higher class can be made to wait for it; a whole iteration
     * without a timeline has no blocks to wait for (not modelled: 0) */
    uint64_t block = 0;
    if (j->spec->ops)
        block = j->spec->ops[k].block_ns ? j->spec->ops[k].block_ns : share;
    op.block_ns = block < share ? block : share;
    unsigned where = j->is_hp ? SL_EVAL_PART_ONLINE : SL_EVAL_PART_OFFLINE;
    int prio = stream_priority(s, g, j);
    if (where == SL_EVAL_PART_OFFLINE && spill_ok(s, g, &op, now)) {
        where = SL_EVAL_PART_ONLINE; /* into the idle online partition, below its class */
        prio = -1;
        s->sum->part_spills++;
    }
    sl_eval_pdev_submit(&g->dev, &j->pj, where, arrive, &op, launch_share, prio);
}

static void resume(sim *s, uint32_t gi, uint64_t now);

/* The start callback of the lane hand-off: the iteration goes whole (one
 * op after the other on its stream) or, beside high-priority jobs, to the
 * step dispatcher, as salusd's executor decides (is_stepwise). */
static int start_on_device(void *arg, sl_lanes_start *st)
{
    ctx *c = arg;
    sim *s = c->s;
    gpu *g = &s->gpus[c->gi];
    sim_job *j = sl_container_of(st->job, sim_job, sched);
    j->switch_delay = switch_cost(s, st->prev_job_id, j);
    if (s->cfg->on_start)
        s->cfg->on_start(s->cfg->arg, c->gi, st->info.id, st->info.serial, j->spec->id, j->started,
                         c->now);
    if (j->started++ == 0)
        j->res.start_ns = c->now;
    j->start_ns = c->now;
    if ((j->online = j->is_hp))
        sl_part_load_start(&g->load, c->now);
    j->stepwise = sl_steps_wanted(s->policy->caps, s->cfg->no_stepwise, &g->gaps, j->is_hp);
    if (j->stepwise) {
        j->step = (sl_steps_task){.lp = &j->lp, .n_ops = job_ops(j)};
        sl_steps_begin(&g->steps, &j->step, c->now);
        return SL_OK; /* the caller resumes the dispatcher */
    }
    j->op = 0;
    j->replay = true;
    if (pipelined(s, j)) {
        /* every launch of the iteration, back to back on the launch path
         * (the GPU's, or with private launches its stream's own) */
        uint64_t from = c->now + j->switch_delay;
        j->launched_ns = from;
        if (!s->cfg->private_launches) {
            j->launched_ns = from > g->launch_t ? from : g->launch_t;
            g->launch_t = j->launched_ns + j->launches_ns;
        }
    }
    submit_op(s, c->gi, j, 0, 0, 1, c->now);
    return SL_OK;
}

/* The simulator's starts cannot fail; what a kick started needs nothing
 * more, except that a stepwise one waits for the dispatcher. */
static void kicked(sim *s, uint32_t gi, sl_lanes_kicked k, uint64_t now)
{
    if (k == SL_LANES_FAILED)
        s->error = SL_EINTERNAL;
    else if (k == SL_LANES_STARTED && s->gpus[gi].steps.parked)
        resume(s, gi, now);
}

/* ---- op by op: server/stepwise.c ------------------------------------------ */

static uint32_t step_split_max(void *arg, const sl_steps_task *t, uint32_t k)
{
    (void) arg;
    const sim_job *j = sl_container_of(t, const sim_job, step);
    if (!j->spec->ops)
        return 1;
    uint32_t most = j->spec->ops[k].split_max;
    return most ? most : 1;
}

static int step_issue(void *arg, sl_steps_task *t, uint32_t first, uint32_t end, uint32_t part,
                      uint32_t parts)
{
    ctx *c = arg;
    sim_job *j = sl_container_of(t, sim_job, step);
    j->seg_op = first;
    j->seg_end = end;
    j->replay = true;
    submit_op(c->s, c->gi, j, j->seg_op, part, parts, c->now);
    c->s->sum->lp_steps++;
    if (parts > 1 && part == 0)
        c->s->sum->ops_split++;
    return SL_OK;
}

static int step_finish(void *arg, sl_steps_task *t, bool last)
{
    (void) arg;
    sl_container_of(t, sim_job, step)->step_last = last;
    return SL_OK;
}

static const sl_steps_ops step_ops = {
    .split_max = step_split_max, .issue = step_issue, .finish = step_finish};

/* sl_exec_resume: parked steps that may go now; the gap timer for the
 * rest (one deadline per GPU, as salusd's one timer thread). */
static void resume(sim *s, uint32_t gi, uint64_t now)
{
    gpu *g = &s->gpus[gi];
    g->steps.cfg.gap_fill = !s->cfg->no_gap_fill && (s->policy->caps & SL_POLICY_GAP_FILL);
    ctx c = {s, gi, now};
    uint64_t t0 = decision_begin(s);
    uint64_t wake = sl_steps_resume(&g->steps, now, false, &step_ops, &c);
    decision_end(s, t0);
    if (g->steps.lp_in_flight_max > s->sum->lp_in_flight_max)
        s->sum->lp_in_flight_max = g->steps.lp_in_flight_max;
    if (wake && (!g->timer_t || wake < g->timer_t)) {
        g->timer_t = wake;
        push(s, wake, EV_TIMER, gi, wake);
    }
}

/* sl_exec_update_class: a job's gap-filling class follows its priority and
 * the policy. */
static void update_class(sim *s, sim_job *j, bool leaving)
{
    gpu *g = &s->gpus[j->gpu];
    bool hp = !leaving && j->joined && sl_sched_job_high_priority(g->sched, &j->sched);
    if (hp == j->is_hp)
        return;
    if (hp)
        sl_gaps_hp_add(&g->gaps, &j->hp);
    else
        sl_gaps_hp_remove(&g->gaps, &j->hp);
    j->is_hp = hp;
}

/* ---- sessions: server/session.c ----------------------------------------- */

static void client_next(sim *s, sim_job *j, uint64_t now);

/* What the session declares (session.c: the OpenSession hints): its
 * length, when the spec says so, as iterations and as total device time
 * (iterations x its solo iteration time: expected_total_s). */
static void declare(sim_job *j, const sl_eval_job_spec *sp)
{
    memset(&j->sched, 0, sizeof j->sched);
    j->sched.id = sp->id;
    j->sched.weight = sp->weight > 0 ? sp->weight : 1.0;
    j->sched.priority = sp->priority;
    if (sp->declare_length) {
        j->sched.expected_iterations = sp->iterations;
        j->sched.expected_total_ns = sp->iterations * sp->iteration_ns;
    }
}

/* admit(): the session joins the scheduler on its lane (sl_exec_join) and
 * its client, told so, starts sending. */
static void session_admitted(sim *s, sim_job *j, uint32_t lane, uint64_t now)
{
    gpu *g = &s->gpus[j->gpu];
    const sl_eval_job_spec *sp = j->spec;
    declare(j, sp);
    j->sched.lane = lane;
    int rc = sl_lanes_join(&g->handoff, &j->sched, now);
    if (rc != SL_OK) {
        s->error = rc;
        return;
    }
    j->joined = true;
    update_class(s, j, false);
    j->res.admitted_ns = now;
    client_next(s, j, now);
}

/* sl_sessions_memory_changed: sessions that waited and fit now. */
static void memory_changed(sim *s, uint32_t gi, uint64_t now)
{
    gpu *g = &s->gpus[gi];
    uint64_t id;
    uint32_t lane;
    while (!s->error && sl_mem_next_admitted(g->mem, &id, &lane))
        session_admitted(s, &s->jobs[id - 1], lane, now);
    memory_observe(s, g);
}

/* The session's last reply has reached its client, which closes it:
 * sl_exec_leave, then the memory goes back. */
static void session_close(sim *s, sim_job *j, uint64_t now)
{
    gpu *g = &s->gpus[j->gpu];
    s->sum->lane_switches += j->sched.switches;
    j->res.attained_ns = j->sched.attained_ns;
    update_class(s, j, true);
    j->joined = false;
    /* nothing queued: it waited for the reply; a strict policy may have
     * kept the lane for it */
    ctx c = {s, j->gpu, now};
    sl_lanes_start st;
    uint64_t t0 = decision_begin(s);
    sl_lanes_kicked k = sl_lanes_leave(&g->handoff, &j->sched, now, start_on_device, &c, &st, NULL);
    decision_end(s, t0);
    kicked(s, j->gpu, k, now);
    resume(s, j->gpu, now); /* one fewer high-priority job to wait for */
    sl_mem_release(g->mem, (uint64_t) (j - s->jobs) + 1);
    memory_changed(s, j->gpu, now);
    j->res.completed = true;
    g->n_jobs--;
}

/* A request of j's client reaches salusd: the next Run (sl_exec_run: a
 * high-priority arrival is a gap sample, then enqueue and kick only its
 * lane) or, all done, the close. */
static void client_request(sim *s, sim_job *j, uint64_t now)
{
    if (j->done >= j->spec->iterations) {
        session_close(s, j, now);
        return;
    }
    gpu *g = &s->gpus[j->gpu];
    if (j->is_hp) {
        sl_gaps_hp_arrival(&g->gaps, &j->hp, now);
        g->hp_in_flight++;
    }
    ctx c = {s, j->gpu, now};
    sl_lanes_start st;
    uint64_t t0 = decision_begin(s);
    sl_lanes_kicked k =
        sl_lanes_ready(&g->handoff, &j->sched, &j->item, now, start_on_device, &c, &st);
    decision_end(s, t0);
    kicked(s, j->gpu, k, now);
}

/* The client's turnaround: its next request after client_gap_ns, and for
 * an inference job not before that request's time (evsim.h request_ns). */
static void client_next(sim *s, sim_job *j, uint64_t now)
{
    uint64_t at = now + s->cfg->client_gap_ns;
    j->request_ns = at;
    const uint64_t *req = j->spec->request_ns;
    if (req && j->done < j->spec->iterations) {
        if (req[j->done] > at)
            at = req[j->done];
        j->request_ns = req[j->done]; /* its latency counts from when it was meant */
    }
    if (at == now)
        client_request(s, j, now);
    else
        push(s, at, EV_CLIENT, j->gpu, (uint64_t) (j - s->jobs));
}

/* MuxFlow's dynamic sizing at an online iteration's boundary
 * (sched/partition.h): the online partition's busy share since the last
 * boundary, and the new size applied to the ops submitted from now on. */
static void plan_observe(sim *s, gpu *g, const sim_job *j, uint64_t alone_ns, uint64_t lat_ns,
                         uint64_t now)
{
    if (!s->cfg->part_plan || g->dev.n_parts < 2)
        return;
    uint64_t before = g->plan.resizes;
    /* a kind per model: a service's replicas share their ops */
    uint64_t kind = (uint64_t) (uintptr_t) j->spec->ops;
    sl_part_plan_time(&g->plan, kind, g->dev.shared ? 0 : g->dev.units[SL_EVAL_PART_ONLINE],
                      alone_ns);
    sl_part_plan_latency(&g->plan, kind, lat_ns);
    sl_eval_pdev_resize(&g->dev, sl_part_load_observe(&g->load, &g->plan, now));
    s->sum->part_resizes += g->plan.resizes - before;
    if (g->plan.shared != g->dev.shared) { /* the guard's change, as salusd's */
        sl_eval_pdev_share(&g->dev, g->plan.shared);
        g->steps.cfg.isolated = !g->plan.shared;
    }
}

/* sl_exec_iteration_done: charge, hand the lane on before anything else,
 * the gap bookkeeping, mark the lane idle only when nobody took it, then
 * reply. */
static void iteration_done(sim *s, sim_job *j, uint64_t now)
{
    gpu *g = &s->gpus[j->gpu];
    uint32_t lane = j->sched.lane;
    bool stepwise = j->stepwise;
    j->stepwise = false;
    if (stepwise)
        sl_steps_last_done(&g->steps, &j->step, now);
    uint64_t lat_ns = now > j->request_ns ? now - j->request_ns : 0;
    if (j->lat)
        j->lat[j->done] = lat_ns;
    j->done++;
    j->res.iterations = j->done;
    j->res.finish_ns = now;
    s->sum->iterations++;
    ctx c = {s, j->gpu, now};
    sl_lanes_start st;
    uint64_t t0 = decision_begin(s);
    sl_lanes_kicked k = sl_lanes_done(&g->handoff, &j->sched, lane, now - j->start_ns, now,
                                      start_on_device, &c, &st);
    decision_end(s, t0);
    kicked(s, j->gpu, k, now);
    bool was_online = j->online; /* as salusd's executor: t->online */
    uint64_t alone_ns = 0;
    if (was_online) {
        j->online = false;
        alone_ns = sl_part_load_done(&g->load, now);
    }
    if (j->is_hp) {
        sl_gaps_hp_complete(&g->gaps, &j->hp, now);
        if (g->hp_in_flight)
            g->hp_in_flight--;
    }
    if (was_online)
        plan_observe(s, g, j, alone_ns, lat_ns, now);
    if (j->is_hp || stepwise)
        resume(s, j->gpu, now);
    if (sl_lanes_settle(&g->handoff, lane))
        memory_changed(s, j->gpu, now);
    if (s->cfg->on_done)
        s->cfg->on_done(s->cfg->arg, j->gpu, j->spec->id, j->done - 1, j->request_ns, now);
    client_next(s, j, now);
}

/* A job's work left the device: the end of a stepwise step (op_done, or
 * the iteration's last), of one op of a whole iteration (its stream issues
 * the next), or of the iteration. */
static void work_done(sim *s, sim_job *j, uint64_t now)
{
    if (j->stepwise && ++j->seg_op < j->seg_end) {
        submit_op(s, j->gpu, j, j->seg_op, 0, 1, now); /* the segment's next node */
        return;
    }
    if (j->stepwise && !j->step_last) {
        sl_steps_op_done(&s->gpus[j->gpu].steps, &j->step, now);
        resume(s, j->gpu, now);
        return;
    }
    if (!j->stepwise && j->spec->ops && ++j->op < j->spec->n_ops) {
        submit_op(s, j->gpu, j, j->op, 0, 1, now);
        return;
    }
    iteration_done(s, j, now);
}

/* Completes every departure the device has collected (handlers may start
 * new iterations, which depart later, never now: work is > 0). */
static void handle_done(sim *s, uint32_t gi, uint64_t now)
{
    gpu *g = &s->gpus[gi];
    while (g->done_head && !s->error) {
        sim_job *j = g->done_head;
        g->done_head = j->next_done;
        if (!g->done_head)
            g->done_tail = &g->done_head;
        work_done(s, j, now);
    }
}

/* ---- placement (the simulator's library policy, not salus's) ------------ */

static uint32_t place_least_jobs(const sim *s)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < s->cfg->n_gpus; i++)
        if (s->gpus[i].n_jobs < s->gpus[best].n_jobs)
            best = i;
    return best;
}

/* The session opens on a GPU: sl_mem_admit_ranked as session.c calls it,
 * with wait_for_admission set (a training job waits rather than fail) and
 * the rank the policy gives what it declares. */
static void job_arrival(sim *s, sim_job *j, uint64_t now)
{
    const sl_eval_job_spec *sp = j->spec;
    uint64_t mem_id = (uint64_t) (j - s->jobs) + 1;
    bool exclusive = sp->priority > 0 && (s->policy->caps & SL_POLICY_EXCLUSIVE_LANES);
    unsigned flags = exclusive ? SL_MEM_ADMIT_EXCLUSIVE : 0;
    int reason = SL_MEM_FITS, rc = SL_EEXHAUSTED;
    uint32_t lane = 0, gi = 0;
    declare(j, sp);
    /* every GPU runs the configured policy: one rank for all of them */
    uint64_t rank = sl_sched_wait_rank(s->gpus[0].sched, &j->sched);
    if (s->cfg->placement == SL_EVAL_PLACE_FIRST_FIT) {
        for (gi = 0; gi < s->cfg->n_gpus; gi++) {
            rc = sl_mem_admit_ranked(s->gpus[gi].mem, mem_id, sp->persistent_bytes,
                                     sp->ephemeral_bytes, flags, rank, &reason, &lane);
            if (rc != SL_EEXHAUSTED)
                break;
        }
    }
    if (rc == SL_EEXHAUSTED) {
        gi = place_least_jobs(s);
        rc = sl_mem_admit_ranked(s->gpus[gi].mem, mem_id, sp->persistent_bytes, sp->ephemeral_bytes,
                                 flags | SL_MEM_ADMIT_WAIT, rank, &reason, &lane);
    }
    j->gpu = gi;
    j->res.gpu = gi;
    if (rc == SL_OK) {
        s->gpus[gi].n_jobs++;
        session_admitted(s, j, lane, now);
    } else if (rc == SL_EEXHAUSTED && reason != SL_MEM_QUOTA) {
        s->gpus[gi].n_jobs++; /* waits in the GPU's admission queue */
    } else if (rc == SL_EEXHAUSTED) {
        j->res.refused = true;
    } else {
        s->error = rc;
    }
    memory_observe(s, &s->gpus[gi]);
}

/* ---- the run ------------------------------------------------------------ */

sl_eval_config sl_eval_config_default(const char *policy, bool strict, unsigned n_gpus,
                                      uint64_t gpu_bytes)
{
    sl_eval_config c = {
        .policy = policy,
        .strict = strict,
        .n_gpus = n_gpus,
        .gpu_bytes = gpu_bytes,
        .placement = SL_EVAL_PLACE_LEAST_JOBS,
        .client_gap_ns = 124000,
        .pipelined_launches = true,
    };
    return c;
}

/* One salusd's memory manager, configured as memory_init configures it. */
int sl_eval_gpu_memory(const sl_eval_config *cfg, sl_mem_mgr **out)
{
    if (!cfg || !out || cfg->gpu_bytes < (64u << 20))
        return SL_EINVAL;
    uint64_t cap = (cfg->gpu_bytes - cfg->gpu_bytes / 20) & ~(uint64_t) 255;
    uint64_t framework = cfg->framework_per_lane;
    if (!framework)
        framework = SIM_WORKSPACE_HINT < cap / 16 ? SIM_WORKSPACE_HINT : cap / 16;
    sl_mem_config mc = {
        .capacity = cap,
        .framework_per_lane = framework & ~(uint64_t) 255,
        .default_ephemeral = cap / 8,
        .spread_limit = cfg->spread_set ? cfg->spread_limit : cap / 2,
    };
    return sl_mem_mgr_create(&mc, out);
}

static int gpu_init(const sl_eval_config *cfg, const sl_policy_ops *policy, gpu *g)
{
    int rc = sl_eval_gpu_memory(cfg, &g->mem);
    if (rc == SL_OK)
        rc = sl_sched_create(policy, cfg->strict, &g->sched);
    if (rc == SL_OK)
        rc = sl_gaps_init(&g->gaps, cfg->gaps);
    sl_lanes_init(&g->handoff, g->sched, g->mem);
    sl_steps_config sc = {.gap_fill = true,
                          .part_ns = cfg->op_part_ns,
                          .segment_ns = cfg->segment_ns ? cfg->segment_ns : SL_STEPS_SEGMENT_NS,
                          .concurrent = !cfg->lp_serial,
                          .isolated = cfg->part_sms > 0};
    sl_steps_init(&g->steps, &g->gaps, &sc);
    unsigned online = cfg->part_sms ? cfg->part_online : 0;
    if (cfg->part_sms && cfg->part_plan) {
        if (rc == SL_OK)
            rc = sl_part_plan_init(&g->plan, cfg->part_plan, cfg->part_online);
        online = g->plan.online;
    }
    sl_eval_pdev_init(&g->dev, cfg->part_sms, online, collect_done, g);
    if (cfg->part_plan) { /* salusd's granularity: the offline partition rounded down */
        sl_eval_pdev_granularity(&g->dev, cfg->part_plan->min_units, cfg->part_plan->align);
        sl_eval_pdev_resize(&g->dev, online);
    }
    g->event_t = UINT64_MAX;
    g->done_tail = &g->done_head;
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile q of n sorted values (n > 0). */
static uint64_t rank(const uint64_t *v, size_t n, double q)
{
    size_t r = (size_t) ceil((double) n * q - 1e-9);
    return v[r ? r - 1 : 0];
}

/* Per inference job, then pooled: each job's completed requests are the
 * first `done` entries of its slice of lat_all; the slices are compacted
 * to the front for the pooled figures. */
static void summarise_latency(sim *s)
{
    sl_eval_summary *sum = s->sum;
    size_t pooled = 0;
    double total = 0;
    for (size_t i = 0; i < s->n_jobs; i++) {
        sim_job *j = &s->jobs[i];
        if (!j->lat || !j->done)
            continue;
        size_t n = (size_t) j->done;
        qsort(j->lat, n, sizeof *j->lat, cmp_u64);
        double t = 0;
        for (size_t k = 0; k < n; k++)
            t += (double) j->lat[k];
        j->res.lat_mean_ns = t / (double) n;
        j->res.lat_p50_ns = rank(j->lat, n, 0.50);
        j->res.lat_p99_ns = rank(j->lat, n, 0.99);
        memmove(s->lat_all + pooled, j->lat, n * sizeof *j->lat);
        pooled += n;
        total += t;
    }
    sum->requests = pooled;
    if (pooled) {
        qsort(s->lat_all, pooled, sizeof *s->lat_all, cmp_u64);
        sum->lat_mean_ns = total / (double) pooled;
        sum->lat_p50_ns = rank(s->lat_all, pooled, 0.50);
        sum->lat_p99_ns = rank(s->lat_all, pooled, 0.99);
    }
    for (size_t i = 0; i < s->n_jobs; i++)
        sum->switch_ns += s->jobs[i].res.switch_ns;
}

static int summarise(sim *s)
{
    sl_eval_summary *sum = s->sum;
    uint64_t first = UINT64_MAX, last = 0;
    double queue = 0, jct = 0;
    uint64_t *jcts = sl_calloc(s->n_jobs ? s->n_jobs : 1, sizeof *jcts);
    if (!jcts)
        return SL_ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < s->n_jobs; i++) {
        const sl_eval_job_result *r = &s->jobs[i].res;
        if (r->arrival_ns < first)
            first = r->arrival_ns;
        sum->refused += r->refused;
        if (!r->completed)
            continue;
        if (r->finish_ns > last)
            last = r->finish_ns;
        queue += (double) (r->start_ns - r->arrival_ns);
        jct += (double) (r->finish_ns - r->arrival_ns);
        jcts[n++] = r->finish_ns - r->arrival_ns;
    }
    sum->n_jobs = s->n_jobs;
    sum->completed = n;
    sum->makespan_ns = n ? last - first : 0;
    if (n) {
        sum->avg_queue_ns = queue / (double) n;
        sum->avg_jct_ns = jct / (double) n;
        qsort(jcts, n, sizeof *jcts, cmp_u64);
        /* nearest rank: the smallest value with at least q of all at or below it */
        sum->p95_jct_ns = jcts[(size_t) ((double) n * 0.95 + 0.999999) - 1];
        sum->median_jct_ns = jcts[(n + 1) / 2 - 1];
    }
    sl_free(jcts);
    for (unsigned i = 0; i < s->cfg->n_gpus; i++)
        sum->gpu_busy_ns += s->gpus[i].busy_ns;
    for (unsigned i = 0; i < s->cfg->n_gpus; i++)
        sum->gpu_occupied_ns += s->gpus[i].occupied_ns;
    summarise_latency(s);
    return SL_OK;
}

static int validate(const sl_eval_config *cfg, const sl_eval_job_spec *jobs, size_t n)
{
    if (!cfg || (!jobs && n) || !cfg->policy || cfg->n_gpus == 0 || cfg->gpu_bytes < (64u << 20))
        return SL_EINVAL;
    bool searched = cfg->part_plan && cfg->part_plan->objective > 0;
    if (cfg->part_sms &&
        ((cfg->part_online == 0 && !searched) || cfg->part_online >= cfg->part_sms))
        return SL_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!jobs[i].id || !jobs[i].iterations || !jobs[i].iteration_ns ||
            (jobs[i].ops && !jobs[i].n_ops) ||
            !(jobs[i].utilisation >= 0 && jobs[i].utilisation <= 1) ||
            !(jobs[i].launch_share >= 0 && jobs[i].launch_share < 1))
            return SL_EINVAL;
    if (!(cfg->switch_ns_per_byte >= 0) || !sl_sched_policy_find(cfg->policy))
        return SL_EINVAL;
    /* duplicate ids: the scheduler breaks ties by id, so they must differ */
    uint64_t *ids = sl_calloc(n ? n : 1, sizeof *ids);
    if (!ids)
        return SL_ENOMEM;
    for (size_t i = 0; i < n; i++)
        ids[i] = jobs[i].id;
    qsort(ids, n, sizeof *ids, cmp_u64);
    int rc = SL_OK;
    for (size_t i = 1; i < n && rc == SL_OK; i++)
        if (ids[i] == ids[i - 1])
            rc = SL_EINVAL;
    sl_free(ids);
    return rc;
}

int sl_eval_run(const sl_eval_config *cfg, const sl_eval_job_spec *jobs, size_t n,
                sl_eval_job_result *results, sl_eval_summary *summary)
{
    int rc = validate(cfg, jobs, n);
    if (rc != SL_OK)
        return rc;
    sim s = {.cfg = cfg, .n_jobs = n, .sum = summary};
    if (!(s.policy = sl_sched_policy_find(cfg->policy)))
        return SL_EINVAL;
    memset(summary, 0, sizeof *summary);
    s.jobs = sl_calloc(n ? n : 1, sizeof *s.jobs);
    s.gpus = sl_calloc(cfg->n_gpus, sizeof *s.gpus);
    if (!s.jobs || !s.gpus) {
        rc = SL_ENOMEM;
        goto out;
    }
    for (unsigned i = 0; i < cfg->n_gpus && rc == SL_OK; i++)
        rc = gpu_init(cfg, s.policy, &s.gpus[i]);
    if (rc != SL_OK)
        goto out;
    summary->capacity_bytes = (cfg->gpu_bytes - cfg->gpu_bytes / 20) & ~(uint64_t) 255;
    size_t n_requests = 0;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].request_ns)
            n_requests += jobs[i].iterations;
    if (n_requests && !(s.lat_all = sl_calloc(n_requests, sizeof *s.lat_all))) {
        rc = SL_ENOMEM;
        goto out;
    }
    n_requests = 0;
    for (size_t i = 0; i < n; i++) {
        sim_job *j = &s.jobs[i];
        j->spec = &jobs[i];
        j->res.id = jobs[i].id;
        j->res.workload = jobs[i].workload;
        j->res.arrival_ns = jobs[i].arrival_ns;
        j->res.solo_ns = jobs[i].iterations * jobs[i].iteration_ns;
        if (jobs[i].request_ns) {
            j->lat = s.lat_all + n_requests;
            n_requests += jobs[i].iterations;
        }
        if (jobs[i].ops) {
            uint32_t steps = jobs[i].n_ops;
            sl_gaps_ewma *e = sl_calloc(steps, sizeof *e);
            if (!e) {
                rc = SL_ENOMEM;
                goto out;
            }
            sl_gaps_lp_init(&j->lp, e, steps);
            for (uint32_t k = 0; k < jobs[i].n_ops; k++)
                j->launches_ns += jobs[i].ops[k].launch_ns;
        }
        push(&s, jobs[i].arrival_ns, EV_ARRIVAL, 0, i);
    }
    if (cfg->switch_cost_ns || cfg->switch_ns_per_byte > 0) {
        if (!(s.by_id = sl_calloc(n ? n : 1, sizeof *s.by_id))) {
            rc = SL_ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < n; i++)
            s.by_id[i] = &s.jobs[i];
        qsort(s.by_id, n, sizeof *s.by_id, cmp_by_id);
    }
    while (s.n_heap && !s.error) {
        if (cfg->until_ns && s.heap[0].t > cfg->until_ns) {
            /* the horizon: devices' busy time up to it, nothing after */
            for (unsigned i = 0; i < cfg->n_gpus; i++)
                device_sync(&s.gpus[i], cfg->until_ns);
            break;
        }
        event e = pop(&s);
        summary->events++;
        uint32_t gi;
        if (e.kind == EV_GPU) {
            gi = e.gpu;
            if (e.arg != s.gpus[gi].version)
                continue; /* superseded: the device's state changed since */
            s.gpus[gi].event_t = UINT64_MAX;
            device_sync(&s.gpus[gi], e.t);
        } else if (e.kind == EV_TIMER) {
            gi = e.gpu;
            if (e.arg != s.gpus[gi].timer_t)
                continue; /* superseded by an earlier deadline */
            s.gpus[gi].timer_t = 0;
            resume(&s, gi, e.t);
        } else {
            sim_job *j = &s.jobs[e.arg];
            if (e.kind == EV_ARRIVAL)
                job_arrival(&s, j, e.t);
            else
                client_request(&s, j, e.t);
            gi = j->gpu;
        }
        handle_done(&s, gi, e.t);
        device_rearm(&s, gi);
    }
    rc = s.error;
    if (rc == SL_OK)
        rc = summarise(&s);
    if (rc == SL_OK && results)
        for (size_t i = 0; i < n; i++)
            results[i] = s.jobs[i].res;

out:
    if (s.gpus) {
        for (unsigned i = 0; i < cfg->n_gpus; i++) {
            /* after an error jobs may still be linked in a scheduler and
             * a device: both only point at memory freed just below */
            sl_sched_destroy(s.gpus[i].sched);
            sl_mem_mgr_destroy(s.gpus[i].mem);
            sl_lanes_fini(&s.gpus[i].handoff);
        }
    }
    sl_free(s.gpus);
    for (size_t i = 0; s.jobs && i < n; i++) {
        sl_free(s.jobs[i].lp.ops);
    }
    sl_free(s.jobs);
    sl_free(s.heap);
    sl_free(s.lat_all);
    sl_free(s.by_id);
    return rc;
}
