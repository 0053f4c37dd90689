/* The executor's trace points (observe.h): iterations starting and
 * ending, switches, the ops of op-by-op iterations (timed from their issue
 * to their completion callback) and, while a trace records, the ops of
 * whole iterations, timed by a host callback queued after each op on the
 * lane's stream (the callbacks and their records exist only while
 * tracing). A callback per op costs a small model a noticeable share of
 * its throughput, so whole iterations are timed op by op as a sample: at
 * most one per lane every OP_SAMPLE_NS; the others show as iterations
 * alone. Ops of iterations run op by op cost nothing extra and are all
 * recorded. */
#include "exec_internal.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_time.h"

/* The dtype op k computes in: its first float output's, else its first
 * float input's (argmax), else i32. */
static unsigned op_dtype(const sl_graph *g, uint32_t k)
{
    const sl_graph_op *op = &g->ops[k];
    for (unsigned o = 0; o < op->n_out; o++)
        if (sl_dtype_is_float(g->values[op->out[o]].shape.dtype))
            return g->values[op->out[o]].shape.dtype;
    for (unsigned i = 0; i < op->n_in; i++)
        if (sl_dtype_is_float(g->values[op->in[i]].shape.dtype))
            return g->values[op->in[i]].shape.dtype;
    return SL_I32;
}

/* An op event's arg: its index, its registry id, whether it ran op by op
 * beside high-priority work, its dtype and the session's math bits
 * (proto/salus.proto TraceEvent). */
static uint64_t op_arg(const sl_graph *g, uint32_t k, bool stepwise, uint8_t math)
{
    return (uint64_t) k | ((uint64_t) (g->ops[k].op & 0xffff) << 32) | ((uint64_t) stepwise << 48) |
           ((uint64_t) (op_dtype(g, k) & 0xf) << 52) | ((uint64_t) (math & 3) << 56);
}

/* Trace events of an iteration starting: its wait, and a switch when the
 * lane last ran another session. */
void sl_exec_trace_start(sl_exec *ex, sl_exec_task *t, uint64_t now)
{
    sl_obs *o = ex->obs;
    uint64_t id = t->job->sched.id;
    int prio = t->job->sched.priority;
    sl_trace_event q = {.kind = SL_TRACE_QUEUED,
                        .ts_ns = t->arrival_ns,
                        .dur_ns = now > t->arrival_ns ? now - t->arrival_ns : 0,
                        .lane = t->lane,
                        .session = id,
                        .priority = prio};
    sl_obs_record(o, &q);
    if (t->lane < SL_OBS_LANES) {
        uint64_t last = o->lane_last[t->lane];
        if (last && last != id) {
            sl_trace_event sw = {.kind = SL_TRACE_SWITCH,
                                 .ts_ns = now,
                                 .lane = t->lane,
                                 .session = id,
                                 .arg = last,
                                 .priority = prio};
            sl_obs_record(o, &sw);
        }
        o->lane_last[t->lane] = id;
    }
}

void sl_exec_trace_done(sl_exec *ex, const sl_exec_task *t, uint64_t now, bool iteration)
{
    const sl_sched_job *j = &t->job->sched;
    if (t->stepwise && t->trace_op_ns) {
        sl_trace_event op = {.kind = SL_TRACE_OP,
                             .ts_ns = t->trace_op_ns,
                             .dur_ns = now - t->trace_op_ns,
                             .lane = t->lane,
                             .session = j->id,
                             .arg = op_arg(t->graph, t->trace_op_k, true, t->job->math),
                             .priority = j->priority};
        sl_obs_record(ex->obs, &op);
    }
    if (iteration) {
        sl_trace_event it = {.kind = SL_TRACE_ITERATION,
                             .ts_ns = t->start_ns,
                             .dur_ns = now - t->start_ns,
                             .lane = t->lane,
                             .session = j->id,
                             .arg = t->stepwise,
                             .priority = j->priority};
        sl_obs_record(ex->obs, &it);
    }
}

/* The marks of a whole iteration's ops: mark[n_ops] starts the clock once
 * the feeds are in, mark[k] ends op k. One stream runs them in order, so
 * last_ns needs no lock. */
typedef struct op_marks op_marks;
typedef struct op_mark {
    op_marks *m;
    uint32_t k;
} op_mark;
struct op_marks {
    sl_obs *obs;
    const sl_graph *g;
    uint64_t session, last_ns;
    uint32_t lane;
    int32_t priority;
    uint8_t math;
    op_mark mark[];
};

static void op_mark_done(void *arg, int status)
{
    op_mark *mk = arg;
    op_marks *m = mk->m;
    uint64_t now = sl_now_ns();
    if (mk->k != UINT32_MAX && status == SL_OK && sl_obs_tracing(m->obs)) {
        sl_trace_event e = {.kind = SL_TRACE_OP,
                            .ts_ns = m->last_ns,
                            .dur_ns = now - m->last_ns,
                            .lane = m->lane,
                            .session = m->session,
                            .arg = op_arg(m->g, mk->k, false, m->math),
                            .priority = m->priority};
        sl_obs_record(m->obs, &e);
    }
    m->last_ns = now;
}

/* At most one whole iteration per lane and this interval is timed op by
 * op: 100 a second, enough to see what a lane's iterations are made of. */
#define OP_SAMPLE_NS (10 * 1000 * 1000ull)

/* Whether the iteration starting now on lane is the one to time. */
static bool sample_lane(sl_obs *o, uint32_t lane)
{
    if (lane >= SL_OBS_LANES)
        return false;
    uint64_t now = sl_now_ns();
    uint64_t last = atomic_load_explicit(&o->lane_timed_ns[lane], memory_order_relaxed);
    if (last && now - last < OP_SAMPLE_NS)
        return false;
    atomic_store_explicit(&o->lane_timed_ns[lane], now, memory_order_relaxed);
    return true;
}

void sl_exec_trace_marks_prepare(sl_exec *ex, sl_exec_task *t)
{
    uint32_t n = t->graph->n_ops;
    if (t->trace_marks || !sample_lane(ex->obs, t->lane))
        return;
    op_marks *m = sl_malloc(sizeof *m + ((size_t) n + 1) * sizeof m->mark[0]);
    if (!m)
        return; /* this iteration's ops go untimed */
    *m = (op_marks){.obs = ex->obs,
                    .g = t->graph,
                    .session = t->job->sched.id,
                    .last_ns = sl_now_ns(),
                    .lane = t->lane,
                    .priority = t->job->sched.priority,
                    .math = t->math};
    t->trace_marks = m;
}

void sl_exec_trace_marks(sl_exec *ex, sl_exec_task *t, sl_stream *st, uint32_t k)
{
    op_marks *m = t->trace_marks;
    uint32_t n = t->graph->n_ops;
    if (!m || (k != UINT32_MAX && (k >= n || t->graph->ops[k].op == SL_OP_RESHAPE)))
        return; /* a view runs nothing */
    op_mark *mk = &m->mark[k == UINT32_MAX ? n : k];
    *mk = (op_mark){m, k};
    (void) ex->dev->ops->host_callback(ex->dev, st, op_mark_done, mk);
}

void sl_exec_trace_marks_free(sl_exec_task *t)
{
    sl_free(t->trace_marks);
    t->trace_marks = NULL;
}
