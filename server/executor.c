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

#define container_of(p, type, member) ((type *) ((char *) (p) -offsetof(type, member)))
#define MAX_LANES_PER_KICK 256

/* The server side of manager lane id, created (with a stream, reused from a
 * reclaimed lane when possible) the first time the lane runs something. */
static sl_lane *lane_get(sl_server *srv, uint32_t id)
{
    sl_lane *l = sl_map_get(&srv->lanes, id);
    if (l)
        return l;
    l = sl_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->id = id;
    if (srv->n_spare)
        l->stream = srv->spare_streams[--srv->n_spare];
    else if (srv->dev->ops->stream_create(srv->dev, 0, &l->stream) != SL_OK)
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

/* Lanes the manager reclaimed give their stream back to the spare list. */
static void lanes_collect(sl_server *srv)
{
    size_t i = 0;
    void *v;
    uint64_t gone[16];
    int n = 0;
    while (n < 16 && sl_map_next(&srv->lanes, &i, NULL, &v)) {
        sl_lane *l = v;
        sl_mem_lane_info info;
        if (!l->busy && sl_mem_lane_get(srv->mem, l->id, &info) != SL_OK)
            gone[n++] = l->id;
    }
    for (int k = 0; k < n; k++) {
        if (srv->n_spare == srv->cap_spare) {
            size_t cap = srv->cap_spare ? srv->cap_spare * 2 : 8;
            sl_stream **s = sl_reallocarray(srv->spare_streams, cap, sizeof *s);
            if (!s)
                return; /* keep the lane record; collected next time */
            srv->spare_streams = s;
            srv->cap_spare = cap;
        }
        sl_lane *l = sl_map_del(&srv->lanes, gone[k]);
        srv->spare_streams[srv->n_spare++] = l->stream;
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
        srv->dev->ops->stream_destroy(srv->dev, srv->spare_streams[k]);
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

/* Copies out every fetch whose value is final once `step` has run. */
static int fetch_after(sl_server *srv, sl_work *w, sl_stream *st, uint32_t step, bool last)
{
    const Salus__Run *m = w->msg->run;
    Salus__RunReply *body = sl_reply_msg(w->reply)->run;
    for (size_t j = 0; j < m->n_fetches; j++) {
        const sl_value *val = &w->graph->values[m->fetches[j]];
        bool params_at_end = val->kind == SL_VALUE_PARAM && last;
        if (val->kind == SL_VALUE_PARAM ? !params_at_end : val->last_step != step)
            continue;
        int rc =
            srv->dev->ops->memcpy_d2h(srv->dev, st, body->outputs[j]->data.data,
                                      value_ptr(srv, w, m->fetches[j]), body->outputs[j]->data.len);
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* Submits the whole iteration. An error stops submission; the completion
 * callback is still queued so the iteration finishes through one path. */
static int launch(sl_server *srv, sl_work *w, sl_stream *st)
{
    sl_device *dev = srv->dev;
    const sl_graph *g = w->graph;
    const Salus__Run *m = w->msg->run;
    int rc = SL_OK;

    for (uint32_t i = 0; i < g->n_inputs && rc == SL_OK; i++)
        rc = dev->ops->memcpy_h2d(dev, st, value_ptr(srv, w, i), m->feeds[i].data, m->feeds[i].len);
    if (rc == SL_OK)
        rc = fetch_after(srv, w, st, 0, g->n_ops == 0);
    for (uint32_t k = 0; k < g->n_ops && rc == SL_OK; k++) {
        const sl_graph_op *op = &g->ops[k];
        if (op->op != SL_OP_RESHAPE) { /* a view: nothing to run */
            sl_op_call call = {
                .op = op->op, .n_in = op->n_in, .n_out = op->n_out, .attrs = op->attrs};
            for (unsigned i = 0; i < op->n_in; i++)
                call.in[i] =
                    (sl_tensor_ref){value_ptr(srv, w, op->in[i]), g->values[op->in[i]].shape};
            for (unsigned o = 0; o < op->n_out; o++)
                call.out[o] =
                    (sl_tensor_ref){value_ptr(srv, w, op->out[o]), g->values[op->out[o]].shape};
            rc = dev->ops->launch(dev, st, &call);
        }
        if (rc == SL_OK)
            rc = fetch_after(srv, w, st, k + 1, k + 1 == g->n_ops);
    }
    w->status = rc;
    return dev->ops->host_callback(dev, st, iteration_done, w);
}

/* Starts lane's next pick if it is idle; returns true if it started one. */
static bool kick_lane(sl_server *srv, const sl_mem_lane_info *info, uint64_t now, sl_outbox *box)
{
    sl_sched_job *job;
    sl_sched_item *item;
    sl_lane *l = sl_map_get(&srv->lanes, info->id);
    if (l && l->busy)
        return false;
    uint64_t idle_since = sl_sched_lane_idle_since(srv->sched, info->id);
    if (!sl_sched_next(srv->sched, info->id, now, &job, &item))
        return false;
    sl_work *w = container_of(item, sl_work, item);
    if (!l && !(l = lane_get(srv, info->id))) {
        sl_sched_complete(srv->sched, job, 0, now);
        sl_reply_error(w->reply, SL_ENOMEM, "cannot start a stream for lane %u", info->id);
        sl_session_work_done(srv, w->session, box);
        return false;
    }
    w->ephemeral_base = info->base;
    w->start_ns = now;
    w->lane = info->id;
    l->busy = true;
    srv->lanes_busy++;
    sl_mem_lane_busy(srv->mem, info->id);
    /* the switch cost: how long the lane sat idle while this iteration was
     * already waiting (client think time is not the server's) */
    if (l->last_job_id) {
        uint64_t from = idle_since > item->enqueue_ns ? idle_since : item->enqueue_ns;
        sl_sched_note_gap(srv->sched, info->id, now > from ? now - from : 0,
                          l->last_job_id == job->id);
    }
    l->last_job_id = job->id;
    int rc = launch(srv, w, l->stream);
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
        body->device_ns = device_ns;
        body->queue_ns = w->start_ns - w->item.enqueue_ns;
    }
    sl_session_work_done(srv, s, &box);
    /* an idle lane may shrink or go, letting queued sessions in */
    sl_mem_lane_idle(srv->mem, l->id);
    sl_dispatch_memory_changed(srv, &box);
    lanes_collect(srv);
    sl_exec_kick(srv, &box);
    sl_complete_unlock_and_flush(srv, &box);
}
