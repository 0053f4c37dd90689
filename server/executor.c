/* The executor: when a lane is free, the scheduler's pick for it is launched
 * onto the lane's stream in one go (feed copies, ops, fetch copies, a
 * completion callback). Completion charges device time, queues the reply, and
 * launches the next picks from the callback itself: no executor thread, no
 * polling. Lanes run concurrently, each on its own stream. */
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stddef.h>
#include <string.h>
#include <time.h>

#define container_of(p, type, member) ((type *) ((char *) (p) -offsetof(type, member)))
#define MAX_LANES_PER_KICK 256
/* Longest a low-priority iteration waits for a gap its next op fits before
 * it is given one op in whatever gap there is. */
#define SL_EXEC_STARVE_NS (5 * 1000 * 1000ull)
/* Stepwise, a long op is split into at most this many parts (ops.h), of
 * at least this long (shorter ones would be mostly launch and callback). */
#define SL_EXEC_MAX_PARTS 16
#define SL_EXEC_MIN_PART_NS (100 * 1000ull)
/* The gap filler's host margin (sched/gaps.h) on a device made of the
 * host's own cores: a reply's way out to a local client, or a request's way
 * in, takes some tens of microseconds here (bench/rtt); bench/priority
 * measured 100, 120, 150 and 200 us: 120 kept the tail within 1.1x and the
 * most low-priority throughput. */
#define SL_EXEC_HOST_MARGIN_NS (120 * 1000ull)

/* Low-priority iterations go op by op while high-priority sessions exist
 * under the priority policy; everything else runs whole. */
static bool is_stepwise(const sl_server *srv, const sl_session *s)
{
    return srv->gaps.n_hp > 0 && !s->high_priority;
}

/* The stream class a session's iterations run in (device.h): above normal
 * for high-priority sessions under the priority policy, below normal for
 * the stepwise ones, normal otherwise. */
static int stream_priority(const sl_server *srv, const sl_session *s)
{
    if (s->high_priority)
        return 1;
    return is_stepwise(srv, s) ? -1 : 0;
}

/* Room for one more spare stream; false without memory. */
static bool spare_reserve(sl_server *srv)
{
    if (srv->n_spare < srv->cap_spare)
        return true;
    size_t cap = srv->cap_spare ? srv->cap_spare * 2 : 8;
    sl_spare_stream *s = sl_reallocarray(srv->spare_streams, cap, sizeof *s);
    if (!s)
        return false;
    srv->spare_streams = s;
    srv->cap_spare = cap;
    return true;
}

/* A stream of the given priority: a spare one, or a new one. */
static int stream_take(sl_server *srv, int priority, sl_stream **out)
{
    for (size_t k = srv->n_spare; k-- > 0;) {
        if (srv->spare_streams[k].priority == priority) {
            *out = srv->spare_streams[k].stream;
            srv->spare_streams[k] = srv->spare_streams[--srv->n_spare];
            return SL_OK;
        }
    }
    return srv->dev->ops->stream_create(srv->dev, priority, out);
}

/* The server side of manager lane id, created (with a stream of the given
 * priority, a spare one when there is one) the first time the lane runs
 * something. */
static sl_lane *lane_get(sl_server *srv, const sl_mem_lane_info *info, int priority)
{
    uint32_t id = info->id;
    sl_lane *l = sl_map_get(&srv->lanes, id);
    if (l)
        return l;
    l = sl_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->id = id;
    l->workspace_bytes = UINT64_MAX; /* a reused stream may hold another lane's */
    l->serial = info->serial;
    l->priority = priority;
    if (stream_take(srv, priority, &l->stream) != SL_OK)
        goto out_free;
    if (sl_sched_reserve_lanes(srv->sched, id + 1) != SL_OK || sl_map_put(&srv->lanes, id, l))
        goto out_stream;
    return l;

out_stream:
    srv->dev->ops->stream_destroy(srv->dev, l->stream); /* idle: returns at once */
out_free:
    sl_free(l);
    return NULL;
}

/* Gives an idle lane a stream of another priority (its session's class
 * changed), keeping the old one spare. Streams are plain in-order queues,
 * so the old one may still be finishing the callback that called this.
 * Without memory the lane stays in its old class. */
static void lane_restream(sl_server *srv, sl_lane *l, int priority)
{
    sl_stream *st;
    if (!spare_reserve(srv) || stream_take(srv, priority, &st) != SL_OK)
        return;
    srv->spare_streams[srv->n_spare++] = (sl_spare_stream){l->stream, l->priority};
    l->stream = st;
    l->priority = priority;
    l->workspace = NULL;
    l->workspace_bytes = UINT64_MAX; /* the new stream gets the lane's block */
}

/* Lanes the manager reclaimed give their stream back to the spare list,
 * also when their id already names a new lane (different serial). */
static void lanes_collect(sl_server *srv)
{
    size_t i = 0;
    void *v;
    uint64_t gone[16];
    int n = 0;
    while (n < 16 && sl_map_next(&srv->lanes, &i, NULL, &v)) {
        sl_lane *l = v;
        sl_mem_lane_info info;
        if (!l->busy &&
            (sl_mem_lane_get(srv->mem, l->id, &info) != SL_OK || info.serial != l->serial))
            gone[n++] = l->id;
    }
    for (int k = 0; k < n; k++) {
        if (!spare_reserve(srv))
            return; /* keep the lane record; collected next time */
        sl_lane *l = sl_map_del(&srv->lanes, gone[k]);
        srv->spare_streams[srv->n_spare++] = (sl_spare_stream){l->stream, l->priority};
        sl_free(l);
    }
}

void sl_exec_lanes_fini(sl_server *srv)
{
    size_t i = 0;
    void *v;
    while (sl_map_next(&srv->lanes, &i, NULL, &v)) {
        sl_lane *l = v;
        srv->dev->ops->stream_destroy(srv->dev, l->stream);
        sl_free(l);
    }
    sl_map_fini(&srv->lanes);
    for (size_t k = 0; k < srv->n_spare; k++)
        srv->dev->ops->stream_destroy(srv->dev, srv->spare_streams[k].stream);
    sl_free(srv->spare_streams);
    srv->spare_streams = NULL;
    srv->n_spare = srv->cap_spare = 0;
}

static void *value_ptr(sl_server *srv, const sl_work *w, uint32_t v)
{
    const sl_value *val = &w->graph->values[v];
    uint64_t addr = val->kind == SL_VALUE_PARAM ? val->tensor->addr : w->ephemeral_base + val->addr;
    return (char *) srv->arena + addr;
}

static void iteration_done(void *arg, int status);

/* Whether value v must be copied out before the op of its last step runs:
 * that op writes its output over v's memory (in-place execution, graph.c).
 * Its own output shares the memory but is written by it, so it is not. */
static bool fetch_before_op(const sl_graph *g, uint32_t v)
{
    const sl_value *val = &g->values[v];
    if (val->kind == SL_VALUE_PARAM || val->last_step == 0)
        return false;
    const sl_graph_op *op = &g->ops[val->last_step - 1];
    return op->inplace_in >= 0 && v != op->out[0] &&
           g->values[op->in[op->inplace_in]].root == val->root;
}

/* Copies out every fetch whose value is final once `step` has run, or (with
 * before_op) those that step's op is about to overwrite in place. */
static int fetch_at(sl_server *srv, sl_work *w, sl_stream *st, uint32_t step, bool last,
                    bool before_op)
{
    const Salus__Run *m = w->msg->run;
    for (size_t j = 0; j < m->n_fetches; j++) {
        const sl_value *val = &w->graph->values[m->fetches[j]];
        bool due =
            val->kind == SL_VALUE_PARAM
                ? last && !before_op /* params: after the whole iteration */
                : val->last_step == step && fetch_before_op(w->graph, m->fetches[j]) == before_op;
        if (!due)
            continue;
        int rc = srv->dev->ops->memcpy_d2h(srv->dev, st, w->fetch_dst[j],
                                           value_ptr(srv, w, m->fetches[j]),
                                           sl_shape_bytes(&val->shape));
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* The call of graph op k of w's iteration. */
static sl_op_call op_call(sl_server *srv, const sl_work *w, uint32_t k)
{
    const sl_graph *g = w->graph;
    const sl_graph_op *op = &g->ops[k];
    sl_op_call call = {.op = op->op, .n_in = op->n_in, .n_out = op->n_out, .attrs = op->attrs};
    for (unsigned i = 0; i < op->n_in; i++)
        call.in[i] = (sl_tensor_ref){value_ptr(srv, w, op->in[i]), g->values[op->in[i]].shape};
    for (unsigned o = 0; o < op->n_out; o++)
        call.out[o] = (sl_tensor_ref){value_ptr(srv, w, op->out[o]), g->values[op->out[o]].shape};
    return call;
}

/* Submits part `part` of `parts` of op k (parts 1: the whole op), with the
 * fetches due before its first part and after its last. */
static int submit_op(sl_server *srv, sl_work *w, sl_stream *st, uint32_t k, uint32_t part,
                     uint32_t parts)
{
    const sl_graph *g = w->graph;
    const sl_graph_op *op = &g->ops[k];
    bool last_op = k + 1 == g->n_ops;
    int rc = SL_OK;
    if (part == 0 && op->inplace_in >= 0)
        rc = fetch_at(srv, w, st, k + 1, last_op, true);
    if (rc == SL_OK && op->op != SL_OP_RESHAPE) { /* a view: nothing to run */
        sl_op_call call = op_call(srv, w, k), piece;
        if (parts > 1 && (rc = sl_op_split(&call, parts, part, &piece)) == SL_OK)
            call = piece;
        if (rc == SL_OK)
            rc = srv->dev->ops->launch(srv->dev, st, &call);
    }
    if (rc == SL_OK && part + 1 == parts)
        rc = fetch_at(srv, w, st, k + 1, last_op, false);
    return rc;
}

/* Submits ops [from, to) whole, with their fetches. */
static int submit_ops(sl_server *srv, sl_work *w, sl_stream *st, uint32_t from, uint32_t to)
{
    int rc = SL_OK;
    for (uint32_t k = from; k < to && rc == SL_OK; k++)
        rc = submit_op(srv, w, st, k, 0, 1);
    return rc;
}

static void op_done(void *arg, int status);

/* Stepwise, the parts op k goes in: as many as bring each under the part
 * length by its predicted duration, when it splits (ops.h). The length is
 * the configured one, or half the room the shortest high-priority gap
 * leaves when that is less (but not under SL_EXEC_MIN_PART_NS): small
 * enough to fit the gaps, large enough that a part is not mostly its launch
 * and callback. */
static uint32_t plan_parts(sl_server *srv, const sl_work *w, uint32_t k)
{
    uint64_t op_ns = sl_gaps_lp_predict(&srv->gaps, &w->graph->lp, k);
    uint64_t part_ns = srv->cfg.op_part_ns ? srv->cfg.op_part_ns : SL_DEFAULT_OP_PART_NS;
    uint64_t half_room = sl_gaps_min_room(&srv->gaps) / 2;
    if (half_room < part_ns)
        part_ns = half_room > SL_EXEC_MIN_PART_NS ? half_room : SL_EXEC_MIN_PART_NS;
    if (op_ns <= part_ns || w->graph->ops[k].op == SL_OP_RESHAPE)
        return 1;
    sl_op_call call = op_call(srv, w, k);
    uint64_t parts = (op_ns + part_ns - 1) / part_ns, most = sl_op_split_max(&call);
    if (parts > SL_EXEC_MAX_PARTS)
        parts = SL_EXEC_MAX_PARTS;
    return (uint32_t) (parts < most ? parts : most);
}

/* The predicted duration of w's next step: its next op, or a part of it. */
static uint64_t next_step_ns(sl_server *srv, const sl_work *w)
{
    uint64_t op_ns = sl_gaps_lp_predict(&srv->gaps, &w->graph->lp, w->next_op);
    uint32_t parts = w->parts ? w->parts : plan_parts(srv, w, w->next_op);
    return op_ns / parts;
}

/* Stepwise: submits the next step (an op, or the next part of a long one)
 * and a callback after it (iteration_done after the last). An error stops
 * submission; the callback still comes. */
static int submit_next_op(sl_server *srv, sl_work *w, sl_stream *st)
{
    uint32_t k = w->next_op;
    if (w->parts == 0) {
        w->parts = w->status == SL_OK ? plan_parts(srv, w, k) : 1;
        w->part = 0;
        srv->ops_split += w->parts > 1;
    }
    w->step_op = k;
    w->step_parts = w->parts;
    w->op_start_ns = sl_now_ns();
    int rc = w->status == SL_OK ? submit_op(srv, w, st, k, w->part, w->parts) : SL_OK;
    if (rc != SL_OK && w->status == SL_OK)
        w->status = rc;
    if (++w->part >= w->parts) {
        w->next_op++;
        w->parts = 0;
    }
    bool last = w->next_op >= w->graph->n_ops || w->status != SL_OK;
    return srv->dev->ops->host_callback(srv->dev, st, last ? iteration_done : op_done, w);
}

/* Gives the lane's stream the lane's framework block as its workspace
 * (device.h), when it is not already its workspace: idle lanes move. */
static int lane_workspace(sl_server *srv, sl_lane *l, const sl_mem_lane_info *info)
{
    void *ws = info->framework ? (char *) srv->arena + info->framework_base : NULL;
    if (ws == l->workspace && info->framework == l->workspace_bytes)
        return SL_OK;
    int rc = srv->dev->ops->stream_set_workspace(srv->dev, l->stream, ws, info->framework);
    if (rc == SL_OK) {
        l->workspace = ws;
        l->workspace_bytes = info->framework;
    }
    return rc;
}

/* Submits the lane's workspace, the feeds, then the whole iteration, or
 * (stepwise) its first op. An error stops submission; the completion
 * callback is still queued so the iteration finishes through one path. */
static int launch(sl_server *srv, sl_work *w, sl_lane *l, const sl_mem_lane_info *info)
{
    sl_device *dev = srv->dev;
    sl_stream *st = l->stream;
    const sl_graph *g = w->graph;
    int rc = lane_workspace(srv, l, info);

    for (uint32_t i = 0; i < g->n_inputs && rc == SL_OK; i++)
        rc = dev->ops->memcpy_h2d(dev, st, value_ptr(srv, w, i), w->feed_src[i],
                                  sl_shape_bytes(&g->values[i].shape));
    if (rc == SL_OK)
        rc = fetch_at(srv, w, st, 0, g->n_ops == 0, false);
    w->status = rc;
    if (w->stepwise && g->n_ops > 0) {
        w->next_op = 0;
        w->parts = 0;
        return submit_next_op(srv, w, st);
    }
    if (rc == SL_OK)
        w->status = submit_ops(srv, w, st, 0, g->n_ops);
    return dev->ops->host_callback(dev, st, iteration_done, w);
}

/* ---- gap filling ---------------------------------------------------- */

void sl_exec_update_class(sl_server *srv, sl_session *s, bool leaving)
{
    bool hp = !leaving && s->admitted && s->job.priority > 0 &&
              strcmp(sl_sched_policy(srv->sched)->name, "priority") == 0;
    if (hp == s->high_priority)
        return;
    if (hp)
        sl_gaps_hp_add(&srv->gaps, &s->hp);
    else
        sl_gaps_hp_remove(&srv->gaps, &s->hp);
    s->high_priority = hp;
}

void sl_exec_hp_arrival(sl_server *srv, sl_session *s)
{
    if (s->high_priority)
        sl_gaps_hp_arrival(&srv->gaps, &s->hp, sl_now_ns());
}

static sl_stream *lane_stream(sl_server *srv, const sl_work *w)
{
    sl_lane *l = sl_map_get(&srv->lanes, w->lane);
    return l->stream;
}

/* Issues parked iterations' next ops where the gap model allows; arms the
 * timer for the rest. */
void sl_exec_resume(sl_server *srv, bool force, sl_outbox *box)
{
    (void) box;
    uint64_t now = sl_now_ns(), wake = 0;
    sl_work **pp = &srv->parked;
    while (*pp) {
        sl_work *w = *pp;
        uint64_t op_ns = next_step_ns(srv, w);
        sl_gaps_decision d = sl_gaps_decide(&srv->gaps, now, op_ns);
        /* starvation guard: a low-priority iteration that waited a whole
         * starve period for a gap its next op fits gets one op anyway when no
         * high-priority work is pending (the bound of one op still holds).
         * Issuing it only as a gap opens, where it has the most room, was
         * tried: bench/priority's tail got worse, not better. */
        bool starved = d == SL_GAPS_WAIT_GAP && now - w->parked_ns > SL_EXEC_STARVE_NS;
        if (force || starved || d == SL_GAPS_ISSUE_FREE || d == SL_GAPS_ISSUE_GAP) {
            *pp = w->parked_next;
            if (submit_next_op(srv, w, lane_stream(srv, w)) != SL_OK)
                sl_log_err("exe.resume", "cannot resume an iteration of session %llu",
                           (unsigned long long) w->session->id);
            continue;
        }
        if (d == SL_GAPS_WAIT_GAP) {
            /* re-check when the host margin ends, or a little later: when
             * the predicted gap would be overdue at the latest */
            uint64_t host = sl_gaps_host_wait(&srv->gaps, now);
            uint64_t at = now + (host ? host : 1000000); /* 1 ms: cheap and bounded */
            if (!wake || at < wake)
                wake = at;
        }
        pp = &w->parked_next;
    }
    if (wake && srv->timer_running && (!srv->timer_deadline || wake < srv->timer_deadline)) {
        srv->timer_deadline = wake;
        pthread_cond_signal(&srv->timer_cond);
    }
}

static void *timer_main(void *arg)
{
    sl_server *srv = arg;
    pthread_mutex_lock(&srv->lock);
    while (!srv->timer_stop) {
        if (!srv->timer_deadline) {
            pthread_cond_wait(&srv->timer_cond, &srv->lock);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
        if (now < srv->timer_deadline) {
            uint64_t at = srv->timer_deadline;
            ts.tv_sec = (time_t) (at / 1000000000ull);
            ts.tv_nsec = (long) (at % 1000000000ull);
            pthread_cond_timedwait(&srv->timer_cond, &srv->lock, &ts);
            continue;
        }
        srv->timer_deadline = 0;
        sl_outbox box = {0};
        sl_exec_resume(srv, srv->draining, &box);
        pthread_mutex_unlock(&srv->lock);
        sl_outbox_flush(srv, &box);
        pthread_mutex_lock(&srv->lock);
    }
    pthread_mutex_unlock(&srv->lock);
    return NULL;
}

int sl_exec_timer_start(sl_server *srv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->timer_cond, &ca);
    pthread_condattr_destroy(&ca);
    sl_gaps_config gc = sl_gaps_config_default();
    if (srv->dev->host_cores)
        gc.host_ns = SL_EXEC_HOST_MARGIN_NS;
    int rc = sl_gaps_init(&srv->gaps, &gc);
    if (rc)
        return rc;
    if (pthread_create(&srv->timer, NULL, timer_main, srv) != 0)
        return SL_ENOMEM;
    srv->timer_running = true;
    return SL_OK;
}

void sl_exec_timer_stop(sl_server *srv)
{
    if (!srv->timer_running)
        return;
    pthread_mutex_lock(&srv->lock);
    srv->timer_stop = true;
    pthread_cond_signal(&srv->timer_cond);
    pthread_mutex_unlock(&srv->lock);
    pthread_join(srv->timer, NULL);
    srv->timer_running = false;
    pthread_cond_destroy(&srv->timer_cond);
}

static void op_done(void *arg, int status)
{
    sl_work *w = arg;
    sl_server *srv = w->session->srv;
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    uint64_t now = sl_now_ns();
    /* a part stands for its whole op: parts are even shares of its rows */
    sl_gaps_lp_observe(&srv->gaps, &w->graph->lp, w->step_op,
                       (now - w->op_start_ns) * w->step_parts);
    if (status != SL_OK && w->status == SL_OK)
        w->status = status;
    uint64_t op_ns = next_step_ns(srv, w);
    sl_gaps_decision d = sl_gaps_decide(&srv->gaps, now, op_ns);
    if (srv->draining || w->status != SL_OK || d == SL_GAPS_ISSUE_FREE || d == SL_GAPS_ISSUE_GAP) {
        if (submit_next_op(srv, w, lane_stream(srv, w)) != SL_OK)
            sl_log_err("exe.step", "cannot submit the next op of session %llu",
                       (unsigned long long) w->session->id);
    } else {
        w->parked_ns = now;
        w->parked_next = srv->parked;
        srv->parked = w;
        sl_exec_resume(srv, false, &box); /* arms the timer if the gap may open */
    }
    sl_complete_unlock_and_flush(srv, &box);
}

/* Starts lane's next pick if it is idle; returns true if it started one. */
/* Whether w is small enough to run on the thread that dispatched it: on an
 * idle cpu stream, handing an iteration to the stream's thread and its
 * completion back costs two thread wake-ups, which is most of a small
 * iteration's round trip. The bound keeps the dispatching (network) thread
 * from being taken for long. The first iteration of a graph always goes to
 * the stream's thread, to be measured. */
#define RUN_HERE_MAX_NS 100000u

static bool runs_here(const sl_server *srv, const sl_work *w)
{
    return srv->dev->ops->stream_hold && !w->stepwise && w->graph->iter_ewma_ns &&
           w->graph->iter_ewma_ns <= RUN_HERE_MAX_NS;
}

static bool kick_lane(sl_server *srv, const sl_mem_lane_info *info, uint64_t now, sl_outbox *box)
{
    sl_sched_job *job;
    sl_sched_item *item;
    if (srv->fault.lost || srv->fault.dead) /* issue 6: no device work until reset (fault.c) */
        return false;
    sl_lane *l = sl_map_get(&srv->lanes, info->id);
    if (l && l->busy)
        return false;
    if (l && l->serial != info->serial) {
        /* the record of a reclaimed lane whose id was reused: keep its
         * stream (idle), forget whose iteration ran last */
        l->serial = info->serial;
        l->last_job_id = 0;
    }
    /* the same for the scheduler's lane statistics; a no-op once bound */
    sl_sched_lane_bind(srv->sched, info->id, info->serial);
    uint64_t idle_since = sl_sched_lane_idle_since(srv->sched, info->id);
    if (!sl_sched_next(srv->sched, info->id, now, &job, &item))
        return false;
    sl_work *w = container_of(item, sl_work, item);
    int priority = stream_priority(srv, w->session);
    if (l && l->priority != priority)
        lane_restream(srv, l, priority);
    if (!l && !(l = lane_get(srv, info, priority))) {
        sl_sched_complete(srv->sched, job, 0, now);
        sl_reply_error(w->reply, SL_ENOMEM, "cannot start a stream for lane %u", info->id);
        sl_session_work_done(srv, w->session, box);
        return false;
    }
    w->start_ns = now;
    w->lane = info->id;
    w->stepwise = is_stepwise(srv, w->session);
    l->busy = true;
    srv->lanes_busy++;
    sl_mem_lane_busy(srv->mem, info->id);
    /* idle lanes move (compaction): the base counts only once it is busy */
    sl_mem_lane_info fresh;
    if (sl_mem_lane_get(srv->mem, info->id, &fresh) != SL_OK)
        fresh = *info;
    w->ephemeral_base = fresh.base;
    /* small iterations skip the thread hand-off (device.h stream_hold) */
    bool here = !box->run_here && runs_here(srv, w);
    if (here)
        srv->dev->ops->stream_hold(srv->dev, l->stream);
    int rc = launch(srv, w, l, &fresh);
    if (here)
        box->run_here = l->stream;
    /* the switch cost: how long the lane sat idle, from the previous
     * iteration's completion (or this one's arrival at the server, if later)
     * until this one's work is on the stream */
    if (l->last_job_id) {
        uint64_t from = idle_since > w->arrival_ns ? idle_since : w->arrival_ns;
        uint64_t end = sl_now_ns();
        sl_sched_note_gap(srv->sched, info->id, end > from ? end - from : 0,
                          l->last_job_id == job->id);
    }
    l->last_job_id = job->id;
    if (rc == SL_OK)
        return true;
    /* not even the completion callback could be queued: finish here */
    sl_log_err("exe.launch", "cannot submit iteration of session %llu: %s",
               (unsigned long long) job->id, sl_strerror(rc));
    l->busy = false;
    srv->lanes_busy--;
    sl_mem_lane_idle(srv->mem, info->id);
    sl_sched_complete(srv->sched, job, 0, sl_now_ns());
    sl_reply_error(w->reply, rc, "cannot submit the iteration: %s", sl_strerror(rc));
    sl_session_work_done(srv, w->session, box);
    return false;
}

void sl_exec_kick(sl_server *srv, sl_outbox *box)
{
    sl_mem_lane_info lanes[MAX_LANES_PER_KICK];
    size_t n = sl_mem_lanes(srv->mem, lanes, MAX_LANES_PER_KICK);
    uint64_t now = sl_now_ns();
    for (size_t i = 0; i < n && i < MAX_LANES_PER_KICK; i++)
        (void) kick_lane(srv, &lanes[i], now, box);
}

static void iteration_done(void *arg, int status)
{
    sl_work *w = arg;
    sl_session *s = w->session;
    sl_server *srv = s->srv;
    uint64_t now = sl_now_ns();
    sl_outbox box = {0};

    pthread_mutex_lock(&srv->lock);
    uint64_t device_ns = now - w->start_ns;
    sl_sched_complete(srv->sched, &s->job, device_ns, now);
    sl_lane *l = sl_map_get(&srv->lanes, w->lane);
    l->busy = false;
    srv->lanes_busy--;
    srv->iterations_total++;
    if (w->status == SL_OK)
        w->status = status;
    if (w->status != SL_OK) {
        sl_log_warn("exe.fail", "iteration of session %llu failed: %s", (unsigned long long) s->id,
                    sl_strerror(w->status));
        sl_reply_error(w->reply, w->status, "iteration failed on the device: %s",
                       sl_strerror(w->status));
    } else {
        Salus__RunReply *body = sl_reply_msg(w->reply)->run;
        uint64_t *avg = &w->graph->iter_ewma_ns;
        *avg = *avg ? *avg - *avg / 8 + device_ns / 8 : device_ns;
        body->device_ns = device_ns;
        body->queue_ns = w->start_ns - w->item.enqueue_ns;
    }
    /* issue 6: a lost device (SL_EDEVICERESET) stops new work and resets (fault.c) */
    sl_fault_handle(srv, s, w->status, w->reply, &box);
    /* hot path first: hand the lane to the next pick before any bookkeeping,
     * so the device idles only for this (the switch cost) */
    sl_mem_lane_info info;
    bool relaunched =
        sl_mem_lane_get(srv->mem, l->id, &info) == SL_OK && kick_lane(srv, &info, now, &box);
    if (s->high_priority) {
        sl_gaps_hp_complete(&srv->gaps, &s->hp, now);
        sl_exec_resume(srv, false, &box);
    }
    sl_session_work_done(srv, s, &box);
    if (!relaunched && !l->busy) {
        /* an idle lane may shrink or go, letting queued sessions in */
        sl_mem_lane_idle(srv->mem, l->id);
        sl_dispatch_memory_changed(srv, &box);
        lanes_collect(srv);
    }
    sl_exec_kick(srv, &box);
    sl_complete_unlock_and_flush(srv, &box);
}
