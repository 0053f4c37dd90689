/* The executor: when the lane is free, the scheduler's pick is launched onto
 * the lane's stream in one go (feed copies, ops, fetch copies, a completion
 * callback). Completion charges device time, queues the reply, and launches
 * the next pick from the callback itself: no executor thread, no polling. */
#include "server.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stddef.h>

#define container_of(p, type, member) ((type *) ((char *) (p) -offsetof(type, member)))

static void *value_ptr(sl_server *srv, const sl_work *w, uint32_t v)
{
    const sl_value *val = &w->graph->values[v];
    uint64_t addr = val->kind == SL_VALUE_PARAM ? val->tensor->addr : w->ephemeral_base + val->addr;
    return (char *) srv->arena + addr;
}

static void iteration_done(void *arg, int status);

/* Copies out every fetch whose value is final once `step` has run. */
static int fetch_after(sl_server *srv, sl_work *w, uint32_t step, bool last)
{
    const Salus__Run *m = w->msg->run;
    Salus__RunReply *body = sl_reply_msg(w->reply)->run;
    for (size_t j = 0; j < m->n_fetches; j++) {
        const sl_value *val = &w->graph->values[m->fetches[j]];
        bool params_at_end = val->kind == SL_VALUE_PARAM && last;
        if (val->kind == SL_VALUE_PARAM ? !params_at_end : val->last_step != step)
            continue;
        int rc =
            srv->dev->ops->memcpy_d2h(srv->dev, srv->lane.stream, body->outputs[j]->data.data,
                                      value_ptr(srv, w, m->fetches[j]), body->outputs[j]->data.len);
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* Submits the whole iteration. An error stops submission; the completion
 * callback is still queued so the iteration finishes through one path. */
static int launch(sl_server *srv, sl_work *w)
{
    sl_device *dev = srv->dev;
    sl_stream *st = srv->lane.stream;
    const sl_graph *g = w->graph;
    const Salus__Run *m = w->msg->run;
    int rc = SL_OK;

    for (uint32_t i = 0; i < g->n_inputs && rc == SL_OK; i++)
        rc = dev->ops->memcpy_h2d(dev, st, value_ptr(srv, w, i), m->feeds[i].data, m->feeds[i].len);
    if (rc == SL_OK)
        rc = fetch_after(srv, w, 0, g->n_ops == 0);
    for (uint32_t k = 0; k < g->n_ops && rc == SL_OK; k++) {
        const sl_graph_op *op = &g->ops[k];
        if (op->op == SL_OP_RESHAPE) { /* a view: nothing to run */
            rc = fetch_after(srv, w, k + 1, k + 1 == g->n_ops);
            continue;
        }
        sl_op_call call = {.op = op->op, .n_in = op->n_in, .n_out = op->n_out, .attrs = op->attrs};
        for (unsigned i = 0; i < op->n_in; i++)
            call.in[i] = (sl_tensor_ref){value_ptr(srv, w, op->in[i]), g->values[op->in[i]].shape};
        for (unsigned o = 0; o < op->n_out; o++)
            call.out[o] =
                (sl_tensor_ref){value_ptr(srv, w, op->out[o]), g->values[op->out[o]].shape};
        rc = dev->ops->launch(dev, st, &call);
        if (rc == SL_OK)
            rc = fetch_after(srv, w, k + 1, k + 1 == g->n_ops);
    }
    w->status = rc;
    int cb = dev->ops->host_callback(dev, st, iteration_done, w);
    if (cb != SL_OK)
        return cb;
    return SL_OK;
}

void sl_exec_kick(sl_server *srv, sl_outbox *box)
{
    sl_sched_job *job;
    sl_sched_item *item;
    uint64_t now = sl_now_ns();
    uint64_t idle_since = sl_sched_lane_idle_since(srv->sched, 0);
    while (!srv->lane.busy && sl_sched_next(srv->sched, 0, now, &job, &item)) {
        sl_work *w = container_of(item, sl_work, item);
        w->ephemeral_base = srv->lane.base;
        w->start_ns = now;
        srv->lane.busy = true;
        /* the switch cost: how long the lane sat idle while this iteration
         * was already waiting (client think time is not the server's) */
        if (srv->lane.last_job_id) {
            uint64_t from = idle_since > item->enqueue_ns ? idle_since : item->enqueue_ns;
            sl_sched_note_gap(srv->sched, 0, now > from ? now - from : 0,
                              srv->lane.last_job_id == job->id);
        }
        srv->lane.last_job_id = job->id;
        int rc = launch(srv, w);
        if (rc == SL_OK)
            return;
        /* not even the completion callback could be queued: finish here */
        sl_log_err("exe.launch", "cannot submit iteration of session %llu: %s",
                   (unsigned long long) job->id, sl_strerror(rc));
        srv->lane.busy = false;
        sl_sched_complete(srv->sched, job, 0, sl_now_ns());
        sl_reply_error(w->reply, rc, "cannot submit the iteration: %s", sl_strerror(rc));
        sl_session_work_done(srv, w->session, box);
    }
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
    srv->lane.busy = false;
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
    sl_exec_kick(srv, &box);
    sl_complete_unlock_and_flush(srv, &box);
}
