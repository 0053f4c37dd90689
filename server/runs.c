/* The run handler (handlers.h): everything a run names is checked against
 * its graph and the session's shared memory before anything is committed;
 * the reply's outputs are laid out so the executor copies fetched values
 * straight into them (or into the client's shared memory). */
#include "handlers.h"
#include "session.h"
#include "sl_error.h"
#include "sl_time.h"

/* Run.writes: per-step scalars, not a second way to upload weights. */
#define SL_RUN_MAX_WRITES 16
#define SL_RUN_MAX_WRITE_BYTES 256

static int refuse_slice(sl_session *s, sl_reply *r)
{
    sl_reply_error(r, SL_EINVAL,
                   "a shared-memory slice lies outside the attached segment (%llu bytes) or "
                   "does not match its value's size",
                   (unsigned long long) (s->shm ? s->shm->size : 0));
    return SL_HANDLED;
}

static int refuse_oom(sl_reply *r)
{
    sl_reply_error(r, SL_ENOMEM, "out of host memory for the run's outputs");
    return SL_HANDLED;
}

int sl_handle_run(sl_sessions *ss, sl_session *s, sl_work *w, sl_outbox *box)
{
    const Salus__Run *m = w->msg->run;
    sl_reply *r = w->reply;
    if (ss->draining) {
        sl_reply_error(r, SL_ESHUTDOWN, "server is shutting down");
        return SL_HANDLED;
    }
    sl_graph *g = sl_map_get(&s->graphs, m->graph_id);
    if (!g) {
        sl_reply_error(r, SL_ENOTFOUND, "session %llu has no graph %llu",
                       (unsigned long long) s->id, (unsigned long long) m->graph_id);
        return SL_HANDLED;
    }
    bool shm_in = m->n_shm_feeds > 0, shm_out = m->n_shm_fetches > 0;
    if ((shm_in ? m->n_shm_feeds : m->n_feeds) != g->n_inputs || (shm_in && m->n_feeds)) {
        sl_reply_error(r, SL_EINVAL,
                       "graph %llu takes %u feeds, got %zu inline and %zu in shared memory",
                       (unsigned long long) g->id, g->n_inputs, m->n_feeds, m->n_shm_feeds);
        return SL_HANDLED;
    }
    if (shm_out && m->n_shm_fetches != m->n_fetches) {
        sl_reply_error(r, SL_EINVAL, "%zu fetches but %zu shared-memory slices for them",
                       m->n_fetches, m->n_shm_fetches);
        return SL_HANDLED;
    }
    /* holes punched since the hand-over would have this run's copies
     * allocate pages charged to salusd (shm.c); a hole punched after this
     * check costs salusd at most this run's slices, once */
    const char *why;
    if ((shm_in || shm_out) && s->shm && sl_shm_allocated(s->shm->fd, &why) != SL_OK) {
        sl_reply_error(r, SL_EINVAL, "the shared-memory segment %s", why);
        return SL_HANDLED;
    }
    /* bound the reply before allocating it: fetching one value many times
     * would otherwise commit any amount of host memory */
    if (m->n_fetches > g->n_values) {
        sl_reply_error(r, SL_EINVAL, "%zu fetches, but graph %llu has only %u values", m->n_fetches,
                       (unsigned long long) g->id, g->n_values);
        return SL_HANDLED;
    }
    for (size_t j = 0; j < m->n_fetches; j++) {
        if (m->fetches[j] >= g->n_values) {
            sl_reply_error(r, SL_EINVAL, "fetch %zu: graph %llu has no value %u", j,
                           (unsigned long long) g->id, m->fetches[j]);
            return SL_HANDLED;
        }
    }
    uint64_t reply_bytes = 0; /* at most 2^14 values of at most 2^42 bytes: no overflow */
    for (size_t j = 0; j < m->n_fetches && !shm_out; j++)
        reply_bytes += sl_shape_bytes(&g->values[m->fetches[j]].shape);
    if (reply_bytes > sl_max_reply_bytes(ss->cfg)) {
        sl_reply_error(r, SL_EINVAL,
                       "the fetches total %llu bytes, more than one reply carries (%llu, salusd "
                       "--max-message): fetch through shared memory (ipc://, Run shm_fetches), "
                       "fetch fewer values per run, or raise --max-message",
                       (unsigned long long) reply_bytes,
                       (unsigned long long) sl_max_reply_bytes(ss->cfg));
        return SL_HANDLED;
    }
    /* per-step writes: few and small, each a whole tensor of the session */
    if (m->n_writes > SL_RUN_MAX_WRITES) {
        sl_reply_error(r, SL_EINVAL, "%zu tensor writes in one run: at most %d", m->n_writes,
                       SL_RUN_MAX_WRITES);
        return SL_HANDLED;
    }
    sl_exec_write *writes = NULL;
    if (m->n_writes && !(writes = sl_reply_alloc(r, m->n_writes * sizeof *writes)))
        return refuse_oom(r);
    for (size_t j = 0; j < m->n_writes; j++) {
        const Salus__TensorWrite *tw = m->writes[j];
        sl_tensor *dst = sl_map_get(&s->tensors, tw->tensor_id);
        if (!dst) {
            sl_reply_error(r, SL_ENOTFOUND, "write %zu: session %llu has no tensor %llu", j,
                           (unsigned long long) s->id, (unsigned long long) tw->tensor_id);
            return SL_HANDLED;
        }
        uint64_t bytes = sl_shape_bytes(&dst->shape);
        if (tw->data.len != bytes || bytes > SL_RUN_MAX_WRITE_BYTES) {
            sl_reply_error(r, SL_EINVAL,
                           "write %zu: %zu bytes for tensor %llu of %llu; a run writes whole "
                           "tensors of at most %d bytes (WriteTensor for larger ones)",
                           j, tw->data.len, (unsigned long long) tw->tensor_id,
                           (unsigned long long) bytes, SL_RUN_MAX_WRITE_BYTES);
            return SL_HANDLED;
        }
        writes[j] = (sl_exec_write){.tensor = dst, .src = tw->data.data, .bytes = bytes};
    }
    sl_exec_task *t = &w->task;
    t->writes = writes;
    t->n_writes = m->n_writes;
    /* a loss-scaled graph's found flag is fetched too, after the client's
     * fetches: it tells a skipped step (sl_handle_run_done) */
    size_t n_fetches = m->n_fetches + (g->amp_found != UINT32_MAX);
    Salus__RunReply *body = sl_reply_alloc(r, sizeof *body);
    Salus__Tensor **outs = sl_reply_alloc(r, m->n_fetches * sizeof *outs);
    t->feed_src = sl_reply_alloc(r, g->n_inputs * sizeof *t->feed_src);
    t->fetch_dst = sl_reply_alloc(r, n_fetches * sizeof *t->fetch_dst);
    uint32_t *fetches =
        n_fetches > m->n_fetches ? sl_reply_alloc(r, n_fetches * sizeof *fetches) : m->fetches;
    if (!body || (m->n_fetches && !outs) || (n_fetches && (!t->fetch_dst || !fetches)) ||
        (g->n_inputs && !t->feed_src))
        return refuse_oom(r);
    w->amp_found = NULL;
    if (n_fetches > m->n_fetches) {
        if (!(w->amp_found = sl_reply_alloc(r, sizeof *w->amp_found)))
            return refuse_oom(r);
        for (size_t j = 0; j < m->n_fetches; j++)
            fetches[j] = m->fetches[j];
        fetches[m->n_fetches] = g->amp_found;
        t->fetch_dst[m->n_fetches] = w->amp_found;
    }
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        uint64_t want = sl_shape_bytes(&g->values[i].shape);
        if (shm_in) {
            t->feed_src[i] = sl_shm_slice(s->shm, m->shm_feeds[i], want);
        } else if (m->feeds[i].len == want) {
            t->feed_src[i] = m->feeds[i].data;
        } else {
            sl_reply_error(r, SL_EINVAL, "feed %u has %zu bytes, input needs %llu", i,
                           m->feeds[i].len, (unsigned long long) want);
            return SL_HANDLED;
        }
        if (!t->feed_src[i])
            return refuse_slice(s, r);
    }
    salus__run_reply__init(body);
    for (size_t j = 0; j < m->n_fetches; j++) {
        const sl_shape *shape = &g->values[m->fetches[j]].shape;
        Salus__Tensor *out = sl_reply_alloc(r, sizeof *out);
        Salus__TensorDesc *desc = sl_reply_desc(r, shape);
        if (!out || !desc)
            return refuse_oom(r);
        salus__tensor__init(out);
        out->desc = desc;
        if (shm_out) {
            t->fetch_dst[j] = sl_shm_slice(s->shm, m->shm_fetches[j], sl_shape_bytes(shape));
            if (!t->fetch_dst[j])
                return refuse_slice(s, r);
        } else {
            if (!(out->data.data = sl_reply_alloc(r, sl_shape_bytes(shape))))
                return refuse_oom(r);
            out->data.len = sl_shape_bytes(shape);
            t->fetch_dst[j] = out->data.data;
        }
        outs[j] = out;
    }
    body->n_outputs = m->n_fetches;
    body->outputs = outs;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_RUN;
    sl_reply_msg(r)->run = body;
    t->job = &s->job;
    t->graph = g;
    t->fetches = fetches;
    t->n_fetches = n_fetches;
    sl_exec_run(ss->ex, t, box);
    return SL_HANDLED_LATER;
}

void sl_handle_run_done(sl_work *w)
{
    Salus__RunReply *body = sl_reply_msg(w->reply)->run;
    body->device_ns = w->task.device_ns;
    body->queue_ns = w->task.queue_ns;
    if (w->amp_found && *w->amp_found != 0.0f) {
        body->step_skipped = true;
        w->session->skipped_steps++;
    }
}
