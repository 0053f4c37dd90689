/* Request dispatch: session-less requests are answered at once; everything
 * that names a session becomes work queued on that session, so one session's
 * requests run strictly in the order they arrived. Control requests copy
 * through the server's copy stream; runs go through the scheduler. */
#include "server.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "sl_time.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define container_of(p, type, member) ((type *) ((char *) (p) -offsetof(type, member)))

/* Most tensor bytes one reply carries: a client accepts replies of up to 2 GiB
 * (SL_CLIENT_MAX_MSG), less room for the envelope. Bigger reads and fetches
 * are refused before any host memory is committed to them. */
#define MAX_REPLY_BYTES ((1ull << 31) - (2u << 20))

static uint64_t random_token(void)
{
    uint64_t t = 0;
    while (t == 0) {
        if (getrandom(&t, sizeof t, 0) != (ssize_t) sizeof t)
            t = sl_now_ns() * 0x9E3779B97F4A7C15ull; /* getrandom cannot fail for 8 bytes */
    }
    return t;
}

static void *device_ptr(sl_server *srv, uint64_t addr)
{
    return (char *) srv->arena + addr;
}

static int shape_from_desc(const Salus__TensorDesc *d, sl_shape *out)
{
    if (!d || d->n_dims > SL_MAX_DIMS || (unsigned) d->dtype >= SL_DTYPE_COUNT)
        return SL_EINVAL;
    *out = (sl_shape){.dtype = (uint8_t) d->dtype, .ndim = (uint8_t) d->n_dims};
    if (d->n_dims) /* a scalar's dims may be NULL */
        memcpy(out->dims, d->dims, d->n_dims * sizeof *d->dims);
    return sl_shape_valid(out) ? SL_OK : SL_EINVAL;
}

/* Fills a TensorDesc allocated from the reply. */
static Salus__TensorDesc *desc_new(sl_reply *r, const sl_shape *s)
{
    Salus__TensorDesc *d = sl_reply_alloc(r, sizeof *d);
    int64_t *dims = sl_reply_alloc(r, SL_MAX_DIMS * sizeof *dims);
    if (!d || !dims)
        return NULL;
    salus__tensor_desc__init(d);
    d->dtype = (Salus__DType) s->dtype;
    d->n_dims = s->ndim;
    d->dims = dims;
    memcpy(dims, s->dims, s->ndim * sizeof *dims);
    return d;
}

/* The request a lost connection's sessions are closed with. */
static Salus__Request lost_close = {
    .base = PROTOBUF_C_MESSAGE_INIT(&salus__request__descriptor),
    .body_case = SALUS__REQUEST__BODY_CLOSE_SESSION,
};

static void work_free(sl_work *w)
{
    if (w->graph && w->msg && w->msg->body_case == SALUS__REQUEST__BODY_REGISTER_GRAPH)
        sl_graph_free(w->graph); /* a registration that never got its lane */
    if (w->msg && w->msg != &lost_close)
        salus__request__free_unpacked(w->msg, NULL);
    sl_reply_free(w->reply);
    sl_free(w);
}

/* Pops the session's head work, queues its reply and frees it. Lock held. */
static void finish_head(sl_server *srv, sl_session *s, sl_outbox *box)
{
    sl_work *w = s->head;
    s->head = w->next;
    if (!s->head)
        s->tail = NULL;
    s->busy = false;
    if (sl_reply_msg(w->reply)->code != SALUS__CODE__OK)
        srv->errors_total++;
    sl_outbox_put(box, w->req, w->reply);
    w->reply = NULL;
    work_free(w);
}

static void control_done(void *arg, int status);

/* Fails every piece of work still queued on s (the head included). */
static void fail_pending(sl_server *srv, sl_session *s, int code, const char *why, sl_outbox *box)
{
    while (s->head) {
        sl_reply_error(s->head->reply, code, "%s", why);
        finish_head(srv, s, box);
    }
}

void sl_dispatch_session_free(sl_server *srv, sl_session *s)
{
    (void) srv;
    size_t i = 0;
    void *v;
    while (s->head) {
        sl_work *w = s->head;
        s->head = w->next;
        work_free(w);
    }
    while (sl_map_next(&s->graphs, &i, NULL, &v))
        sl_graph_free(v);
    /* the blocks themselves go back with sl_mem_release */
    i = 0;
    while (sl_map_next(&s->tensors, &i, NULL, &v))
        sl_free(v);
    sl_map_fini(&s->graphs);
    sl_map_fini(&s->tensors);
    sl_shm_detach(s);
    sl_reply_free(s->admit_reply);
    sl_free(s);
}

/* CLOSE_SESSION (or a lost connection): everything of s goes. Lock held. */
static void session_close(sl_server *srv, sl_session *s, sl_outbox *box)
{
    sl_work *w = s->head;
    s->head = w->next;
    sl_outbox_put(box, w->req, w->reply);
    w->reply = NULL;
    work_free(w);
    /* work queued after a close has no session to run in */
    fail_pending(srv, s, SL_ESESSIONLOST, "session closed", box);
    if (s->admitted)
        (void) sl_sched_job_remove(srv->sched, &s->job);
    sl_exec_update_class(srv, s, true);
    sl_exec_resume(srv, false, box); /* one fewer high-priority session to wait for */
    if (s->admit_reply) {            /* still waiting for admission: that wait ends too */
        sl_reply_error(s->admit_reply, SL_ESESSIONLOST,
                       "session closed while waiting for admission");
        sl_outbox_put(box, s->admit_req, s->admit_reply);
        s->admit_req = NULL;
        s->admit_reply = NULL;
    }
    sl_mem_release(srv->mem, s->id);
    (void) sl_map_del(&srv->sessions, s->id);
    sl_log_info("ses.close", "session %llu (%s) closed: %llu iterations, %.3f s on device",
                (unsigned long long) s->id, s->name, (unsigned long long) s->job.iterations_done,
                (double) s->job.attained_ns / 1e9);
    sl_dispatch_session_free(srv, s);
    sl_dispatch_memory_changed(srv, box);
}

static sl_tensor *find_tensor(sl_session *s, uint64_t id, sl_reply *r)
{
    sl_tensor *t = sl_map_get(&s->tensors, id);
    if (!t)
        sl_reply_error(r, SL_ENOTFOUND, "session %llu has no tensor %llu",
                       (unsigned long long) s->id, (unsigned long long) id);
    return t;
}

/* Submits a host callback that completes control work w; on failure
 * completes it now with the error. Returns true if completion is deferred. */
static bool defer_control(sl_server *srv, sl_work *w, int rc)
{
    if (rc == SL_OK)
        rc = srv->dev->ops->host_callback(srv->dev, srv->copy_stream, control_done, w);
    if (rc == SL_OK) {
        srv->control_in_flight++;
        return true;
    }
    sl_reply_error(w->reply, rc, "device copy failed: %s", sl_strerror(rc));
    return false;
}

/* Most tensors, and separately most graphs, one session may hold. */
static uint32_t max_objects(const sl_server *srv)
{
    return srv->cfg.max_tensors_per_session ? srv->cfg.max_tensors_per_session
                                            : SL_DEFAULT_MAX_TENSORS;
}

static bool do_create_tensor(sl_server *srv, sl_session *s, sl_work *w)
{
    const Salus__CreateTensor *m = w->msg->create_tensor;
    sl_reply *r = w->reply;
    sl_shape shape;
    if (shape_from_desc(m->desc, &shape)) {
        sl_reply_error(r, SL_EINVAL,
                       "invalid tensor shape: want dtype f32 or i32, at most %d dims, each >= 1, "
                       "at most 2^40 elements",
                       SL_MAX_DIMS);
        return false;
    }
    if (s->tensors.count >= max_objects(srv)) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "session %llu already holds %zu tensors (limit %u, salusd "
                       "--max-tensors-per-session)",
                       (unsigned long long) s->id, s->tensors.count, max_objects(srv));
        return false;
    }
    uint64_t bytes = sl_shape_bytes(&shape);
    if (m->init.len != 0 && m->init.len != bytes) {
        sl_reply_error(r, SL_EINVAL, "init has %zu bytes, tensor has %llu", m->init.len,
                       (unsigned long long) bytes);
        return false;
    }
    sl_tensor *t = sl_calloc(1, sizeof *t);
    if (!t) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return false;
    }
    int reason = SL_MEM_FITS;
    int rc = sl_mem_alloc(srv->mem, s->id, bytes, &t->addr, &reason);
    if (rc) {
        sl_free(t);
        if (rc == SL_EEXHAUSTED)
            sl_reply_error(
                r, rc,
                "cannot allocate %llu persistent bytes: %s (session uses %llu of %llu declared)",
                (unsigned long long) bytes, sl_mem_reason_name(reason),
                (unsigned long long) s->persistent_bytes,
                (unsigned long long) s->declared_persistent);
        else
            sl_reply_error(r, rc, "cannot allocate %llu persistent bytes: %s",
                           (unsigned long long) bytes, sl_strerror(rc));
        return false;
    }
    t->id = ++s->next_object_id;
    t->shape = shape;
    t->bytes = sl_align_up(bytes, 256);
    Salus__CreateTensorReply *body = sl_reply_alloc(r, sizeof *body);
    if (!body || sl_map_put(&s->tensors, t->id, t) != SL_OK) {
        (void) sl_mem_free(srv->mem, s->id, t->addr);
        sl_free(t);
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return false;
    }
    s->persistent_bytes += t->bytes;
    salus__create_tensor_reply__init(body);
    body->tensor_id = t->id;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_CREATE_TENSOR;
    sl_reply_msg(r)->create_tensor = body;

    sl_device *dev = srv->dev;
    if (m->init.len)
        rc = dev->ops->memcpy_h2d(dev, srv->copy_stream, device_ptr(srv, t->addr), m->init.data,
                                  bytes);
    else {
        sl_op_call fill = {.op = SL_OP_FILL, .n_in = 1, .n_out = 1};
        fill.in[0] = fill.out[0] = (sl_tensor_ref){device_ptr(srv, t->addr), shape};
        rc = dev->ops->launch(dev, srv->copy_stream, &fill);
    }
    return defer_control(srv, w, rc);
}

static bool do_write_tensor(sl_server *srv, sl_session *s, sl_work *w)
{
    const Salus__WriteTensor *m = w->msg->write_tensor;
    sl_tensor *t = find_tensor(s, m->tensor_id, w->reply);
    if (!t)
        return false;
    uint64_t bytes = sl_shape_bytes(&t->shape);
    if (m->data.len != bytes) {
        sl_reply_error(w->reply, SL_EINVAL, "data has %zu bytes, tensor %llu has %llu", m->data.len,
                       (unsigned long long) t->id, (unsigned long long) bytes);
        return false;
    }
    sl_reply_msg(w->reply)->body_case = SALUS__REPLY__BODY_EMPTY;
    sl_reply_msg(w->reply)->empty = sl_reply_alloc(w->reply, sizeof(Salus__Empty));
    if (!sl_reply_msg(w->reply)->empty) {
        sl_reply_error(w->reply, SL_ENOMEM, "out of host memory");
        return false;
    }
    salus__empty__init(sl_reply_msg(w->reply)->empty);
    return defer_control(srv, w,
                         srv->dev->ops->memcpy_h2d(srv->dev, srv->copy_stream,
                                                   device_ptr(srv, t->addr), m->data.data, bytes));
}

static bool do_read_tensor(sl_server *srv, sl_session *s, sl_work *w)
{
    sl_reply *r = w->reply;
    sl_tensor *t = find_tensor(s, w->msg->read_tensor->tensor_id, r);
    if (!t)
        return false;
    uint64_t bytes = sl_shape_bytes(&t->shape);
    if (bytes > MAX_REPLY_BYTES) {
        sl_reply_error(r, SL_EINVAL,
                       "tensor %llu has %llu bytes, more than one reply carries (%llu)",
                       (unsigned long long) t->id, (unsigned long long) bytes,
                       (unsigned long long) MAX_REPLY_BYTES);
        return false;
    }
    Salus__ReadTensorReply *body = sl_reply_alloc(r, sizeof *body);
    Salus__Tensor *tensor = sl_reply_alloc(r, sizeof *tensor);
    void *data = sl_reply_alloc(r, bytes);
    Salus__TensorDesc *desc = desc_new(r, &t->shape);
    if (!body || !tensor || !data || !desc) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory for a %llu-byte read",
                       (unsigned long long) bytes);
        return false;
    }
    salus__read_tensor_reply__init(body);
    salus__tensor__init(tensor);
    tensor->desc = desc;
    tensor->data.data = data;
    tensor->data.len = bytes;
    body->tensor = tensor;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_READ_TENSOR;
    sl_reply_msg(r)->read_tensor = body;
    return defer_control(srv, w,
                         srv->dev->ops->memcpy_d2h(srv->dev, srv->copy_stream, data,
                                                   device_ptr(srv, t->addr), bytes));
}

static void do_free_tensor(sl_server *srv, sl_session *s, sl_work *w, sl_outbox *box)
{
    sl_tensor *t = find_tensor(s, w->msg->free_tensor->tensor_id, w->reply);
    if (!t)
        return;
    if (t->graph_refs) {
        sl_reply_error(w->reply, SL_EBUSY,
                       "tensor %llu is used by %u registered graph(s): free them first",
                       (unsigned long long) t->id, t->graph_refs);
        return;
    }
    (void) sl_map_del(&s->tensors, t->id);
    s->persistent_bytes -= t->bytes;
    (void) sl_mem_free(srv->mem, s->id, t->addr);
    sl_free(t);
    sl_dispatch_memory_changed(srv, box);
}

static bool place_graph(sl_server *srv, sl_session *s, sl_work *w);

static bool do_register_graph(sl_server *srv, sl_session *s, sl_work *w)
{
    sl_reply *r = w->reply;
    char err[256];
    sl_graph *g;
    if (!w->msg->register_graph->graph) {
        sl_reply_error(r, SL_EINVAL, "register_graph without a graph");
        return false;
    }
    if (s->graphs.count >= max_objects(srv)) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "session %llu already holds %zu graphs (limit %u, salusd "
                       "--max-tensors-per-session)",
                       (unsigned long long) s->id, s->graphs.count, max_objects(srv));
        return false;
    }
    int rc =
        sl_graph_build(s, w->msg->register_graph->graph, !srv->cfg.no_inplace, &g, err, sizeof err);
    if (rc) {
        sl_reply_error(r, rc, "%s", err);
        return false;
    }
    w->graph = g;
    return place_graph(srv, s, w);
}

/* Makes the session's lane hold its new graph, then completes the
 * registration. Returns true when it must wait for the lane to go idle (the
 * session has to move and its lane is running someone's iteration). */
static bool place_graph(sl_server *srv, sl_session *s, sl_work *w)
{
    sl_reply *r = w->reply;
    sl_graph *g = w->graph;
    uint64_t need = g->plan.peak > s->ephemeral_peak ? g->plan.peak : s->ephemeral_peak;
    uint32_t lane;
    int reason = SL_MEM_FITS;
    int rc = sl_mem_set_ephemeral(srv->mem, s->id, need ? need : 256, &lane, &reason);
    if (rc == SL_EBUSY) {
        s->blocked = true;
        return true;
    }
    s->blocked = false;
    w->graph = NULL;
    if (rc) {
        sl_reply_error(r, rc, "graph needs %llu ephemeral bytes per iteration: %s",
                       (unsigned long long) g->plan.peak,
                       rc == SL_EEXHAUSTED ? sl_mem_reason_name(reason) : sl_strerror(rc));
        sl_graph_free(g);
        return false;
    }
    if (lane != s->job.lane) {
        if (sl_sched_reserve_lanes(srv->sched, lane + 1) != SL_OK) {
            sl_reply_error(r, SL_ENOMEM, "out of host memory");
            sl_graph_free(g);
            return false;
        }
        sl_sched_job_set_lane(srv->sched, &s->job, lane);
    }
    g->id = ++s->next_object_id;
    Salus__RegisterGraphReply *body = sl_reply_alloc(r, sizeof *body);
    Salus__TensorDesc **descs = sl_reply_alloc(r, g->n_values * sizeof *descs);
    if (!body || !descs || sl_map_put(&s->graphs, g->id, g) != SL_OK) {
        sl_graph_free(g);
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return false;
    }
    salus__register_graph_reply__init(body);
    body->graph_id = g->id;
    body->planned_peak = g->plan.peak;
    body->naive_bytes = g->plan.naive;
    body->n_values = g->n_values;
    body->values = descs;
    for (uint32_t v = 0; v < g->n_values; v++) {
        if (!(descs[v] = desc_new(r, &g->values[v].shape))) {
            body->n_values = v;
            break;
        }
    }
    if (g->plan.peak > s->ephemeral_peak)
        s->ephemeral_peak = g->plan.peak;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_REGISTER_GRAPH;
    sl_reply_msg(r)->register_graph = body;
    sl_log_debug("ses.graph",
                 "session %llu graph %llu: %u ops, peak %llu of naive %llu bytes, lane %u",
                 (unsigned long long) s->id, (unsigned long long) g->id, g->n_ops,
                 (unsigned long long) g->plan.peak, (unsigned long long) g->plan.naive, lane);
    return false;
}

static void do_free_graph(sl_session *s, sl_work *w)
{
    sl_graph *g = sl_map_del(&s->graphs, w->msg->free_graph->graph_id);
    if (!g) {
        sl_reply_error(w->reply, SL_ENOTFOUND, "session %llu has no graph %llu",
                       (unsigned long long) s->id,
                       (unsigned long long) w->msg->free_graph->graph_id);
        return;
    }
    sl_graph_free(g);
}

/* Validates a run and prepares its reply; true when it was queued. */
static bool do_run(sl_server *srv, sl_session *s, sl_work *w, sl_outbox *box)
{
    const Salus__Run *m = w->msg->run;
    sl_reply *r = w->reply;
    if (srv->draining) {
        sl_reply_error(r, SL_ESHUTDOWN, "server is shutting down");
        return false;
    }
    sl_graph *g = sl_map_get(&s->graphs, m->graph_id);
    if (!g) {
        sl_reply_error(r, SL_ENOTFOUND, "session %llu has no graph %llu",
                       (unsigned long long) s->id, (unsigned long long) m->graph_id);
        return false;
    }
    bool shm_in = m->n_shm_feeds > 0, shm_out = m->n_shm_fetches > 0;
    if ((shm_in ? m->n_shm_feeds : m->n_feeds) != g->n_inputs || (shm_in && m->n_feeds)) {
        sl_reply_error(r, SL_EINVAL,
                       "graph %llu takes %u feeds, got %zu inline and %zu in shared memory",
                       (unsigned long long) g->id, g->n_inputs, m->n_feeds, m->n_shm_feeds);
        return false;
    }
    if (shm_out && m->n_shm_fetches != m->n_fetches) {
        sl_reply_error(r, SL_EINVAL, "%zu fetches but %zu shared-memory slices for them",
                       m->n_fetches, m->n_shm_fetches);
        return false;
    }
    /* bound the reply before allocating it: fetching one value many times
     * would otherwise commit any amount of host memory */
    if (m->n_fetches > g->n_values) {
        sl_reply_error(r, SL_EINVAL, "%zu fetches, but graph %llu has only %u values", m->n_fetches,
                       (unsigned long long) g->id, g->n_values);
        return false;
    }
    for (size_t j = 0; j < m->n_fetches; j++) {
        if (m->fetches[j] >= g->n_values) {
            sl_reply_error(r, SL_EINVAL, "fetch %zu: graph %llu has no value %u", j,
                           (unsigned long long) g->id, m->fetches[j]);
            return false;
        }
    }
    uint64_t reply_bytes = 0; /* at most 2^14 values of at most 2^42 bytes: no overflow */
    for (size_t j = 0; j < m->n_fetches && !shm_out; j++)
        reply_bytes += sl_shape_bytes(&g->values[m->fetches[j]].shape);
    if (reply_bytes > MAX_REPLY_BYTES) {
        sl_reply_error(r, SL_EINVAL,
                       "the fetches total %llu bytes, more than one reply carries (%llu)",
                       (unsigned long long) reply_bytes, (unsigned long long) MAX_REPLY_BYTES);
        return false;
    }
    Salus__RunReply *body = sl_reply_alloc(r, sizeof *body);
    Salus__Tensor **outs = sl_reply_alloc(r, m->n_fetches * sizeof *outs);
    w->feed_src = sl_reply_alloc(r, g->n_inputs * sizeof *w->feed_src);
    w->fetch_dst = sl_reply_alloc(r, m->n_fetches * sizeof *w->fetch_dst);
    if (!body || (m->n_fetches && (!outs || !w->fetch_dst)) || (g->n_inputs && !w->feed_src))
        goto out_oom;
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        uint64_t want = sl_shape_bytes(&g->values[i].shape);
        if (shm_in) {
            w->feed_src[i] = sl_shm_slice(s, m->shm_feeds[i], want);
        } else if (m->feeds[i].len == want) {
            w->feed_src[i] = m->feeds[i].data;
        } else {
            sl_reply_error(r, SL_EINVAL, "feed %u has %zu bytes, input needs %llu", i,
                           m->feeds[i].len, (unsigned long long) want);
            return false;
        }
        if (!w->feed_src[i])
            goto out_bad_slice;
    }
    salus__run_reply__init(body);
    for (size_t j = 0; j < m->n_fetches; j++) {
        const sl_shape *shape = &g->values[m->fetches[j]].shape;
        Salus__Tensor *t = sl_reply_alloc(r, sizeof *t);
        Salus__TensorDesc *desc = desc_new(r, shape);
        if (!t || !desc)
            goto out_oom;
        salus__tensor__init(t);
        t->desc = desc;
        if (shm_out) {
            w->fetch_dst[j] = sl_shm_slice(s, m->shm_fetches[j], sl_shape_bytes(shape));
            if (!w->fetch_dst[j])
                goto out_bad_slice;
        } else {
            if (!(t->data.data = sl_reply_alloc(r, sl_shape_bytes(shape))))
                goto out_oom;
            t->data.len = sl_shape_bytes(shape);
            w->fetch_dst[j] = t->data.data;
        }
        outs[j] = t;
    }
    body->n_outputs = m->n_fetches;
    body->outputs = outs;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_RUN;
    sl_reply_msg(r)->run = body;
    w->graph = g;
    sl_exec_hp_arrival(srv, s);
    sl_sched_enqueue(srv->sched, &s->job, &w->item, sl_now_ns());
    sl_exec_kick(srv, box);
    return true;

out_oom:
    sl_reply_error(r, SL_ENOMEM, "out of host memory for the run's outputs");
    return false;
out_bad_slice:
    sl_reply_error(r, SL_EINVAL,
                   "a shared-memory slice lies outside the attached segment (%llu bytes) or "
                   "does not match its value's size",
                   (unsigned long long) s->shm_size);
    return false;
}

/* Runs s's queued work until something must wait for the device. Lock held.
 * May free s (close). */
static void session_pump(sl_server *srv, sl_session *s, sl_outbox *box)
{
    while (s->head && !s->busy) {
        sl_work *w = s->head;
        s->busy = true;
        bool deferred = false;
        switch (w->msg->body_case) {
        case SALUS__REQUEST__BODY_CLOSE_SESSION:
            session_close(srv, s, box);
            return;
        case SALUS__REQUEST__BODY_CREATE_TENSOR:
            deferred = do_create_tensor(srv, s, w);
            break;
        case SALUS__REQUEST__BODY_WRITE_TENSOR:
            deferred = do_write_tensor(srv, s, w);
            break;
        case SALUS__REQUEST__BODY_READ_TENSOR:
            deferred = do_read_tensor(srv, s, w);
            break;
        case SALUS__REQUEST__BODY_FREE_TENSOR:
            do_free_tensor(srv, s, w, box);
            break;
        case SALUS__REQUEST__BODY_REGISTER_GRAPH:
            deferred = do_register_graph(srv, s, w);
            break;
        case SALUS__REQUEST__BODY_FREE_GRAPH:
            do_free_graph(s, w);
            break;
        case SALUS__REQUEST__BODY_RUN:
            deferred = do_run(srv, s, w, box);
            break;
        case SALUS__REQUEST__BODY_ATTACH_SHM:
            sl_shm_attach(s, w->req, w->msg->attach_shm, w->reply);
            break;
        default:
            sl_reply_error(w->reply, SL_EINVAL, "request type %d is not valid for a session",
                           (int) w->msg->body_case);
            break;
        }
        if (deferred)
            return;
        finish_head(srv, s, box);
    }
}

static void control_done(void *arg, int status)
{
    sl_work *w = arg;
    sl_session *s = w->session;
    sl_server *srv = s->srv;
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    srv->control_in_flight--;
    if (status != SL_OK)
        sl_reply_error(w->reply, status, "device failed the copy: %s", sl_strerror(status));
    sl_fault_handle(srv, s, status, w->reply, &box); /* issue 6: a lost device (fault.c) */
    finish_head(srv, s, &box);
    session_pump(srv, s, &box);
    sl_complete_unlock_and_flush(srv, &box);
}

void sl_complete_unlock_and_flush(sl_server *srv, sl_outbox *box)
{
    /* the replies go out after the lock is released; a drain must not tear
     * the transport down until they have (the flush that sends them drops
     * the count) */
    srv->completing++;
    box->completing++;
    pthread_mutex_unlock(&srv->lock);
    sl_outbox_flush(srv, box);
}

void sl_session_work_done(sl_server *srv, sl_session *s, sl_outbox *box)
{
    finish_head(srv, s, box);
    session_pump(srv, s, box);
}

/* A session the memory manager admitted: it joins the scheduler on its lane. */
static int admit(sl_server *srv, sl_session *s, uint32_t lane)
{
    int rc = sl_sched_reserve_lanes(srv->sched, lane + 1);
    if (rc)
        return rc;
    s->job.lane = lane;
    sl_sched_job_add(srv->sched, &s->job, sl_now_ns());
    s->admitted = true;
    sl_exec_update_class(srv, s, false);
    sl_log_info("ses.admit", "session %llu (%s) admitted on lane %u after %.3f s",
                (unsigned long long) s->id, s->name, lane,
                (double) (sl_now_ns() - s->open_ns) / 1e9);
    return SL_OK;
}

/* OPEN_SESSION. Returns true when the reply waits for admission. */
static bool session_open(sl_server *srv, const Salus__OpenSession *m, sl_req *req, uint32_t pipe_id,
                         sl_reply *r)
{
    if (srv->draining) {
        sl_reply_error(r, SL_ESHUTDOWN, "server is shutting down");
        return false;
    }
    for (unsigned i = 0; pipe_id && i < SL_GONE_PIPES; i++) {
        if (srv->gone_pipes[i] == pipe_id) {
            sl_reply_error(r, SL_ECONN, "the connection closed before the session was opened");
            return false;
        }
    }
    uint32_t max_sessions = srv->cfg.max_sessions ? srv->cfg.max_sessions : SL_DEFAULT_MAX_SESSIONS;
    if (srv->sessions.count >= max_sessions) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "too many sessions: %zu open (limit %u, salusd --max-sessions); close some",
                       srv->sessions.count, max_sessions);
        return false;
    }
    const Salus__SessionHints *h = m->hints;
    sl_session *s = sl_calloc(1, sizeof *s);
    Salus__OpenSessionReply *body = sl_reply_alloc(r, sizeof *body);
    if (!s || !body)
        goto out_oom;
    s->srv = srv;
    s->id = ++srv->next_session_id;
    s->token = random_token();
    s->pipe_id = pipe_id;
    s->has_uid = sl_req_peer_uid(req, &s->uid); /* issue 6: over ipc://, its user's */
    s->open_ns = sl_now_ns();
    s->job.weight = 1.0;
    if (h) {
        snprintf(s->name, sizeof s->name, "%s", h->name ? h->name : "");
        s->declared_persistent = h->persistent_bytes;
        s->declared_ephemeral = h->ephemeral_bytes;
        if (h->weight > 0 && h->weight < 1e6)
            s->job.weight = h->weight;
        s->job.priority = h->priority;
        s->job.expected_iterations = h->expected_iterations;
        if (h->expected_total_s > 0 && h->expected_total_s < 1e9)
            s->job.expected_total_ns = (uint64_t) (h->expected_total_s * 1e9);
    }
    s->job.id = s->id;
    salus__open_session_reply__init(body);
    body->session_id = s->id;
    body->token = s->token;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_OPEN_SESSION;
    sl_reply_msg(r)->open_session = body;

    bool wait = h && h->wait_for_admission;
    int reason = SL_MEM_FITS;
    uint32_t lane = 0;
    /* high-priority sessions under the priority policy get a lane of their
     * own: their iterations must never wait behind another's whole iteration */
    unsigned flags =
        (wait ? SL_MEM_ADMIT_WAIT : 0) |
        (s->job.priority > 0 && strcmp(sl_sched_policy(srv->sched)->name, "priority") == 0
             ? SL_MEM_ADMIT_EXCLUSIVE
             : 0);
    int rc = sl_mem_admit_ex(srv->mem, s->id, s->declared_persistent, s->declared_ephemeral, flags,
                             &reason, &lane);
    if (rc == SL_EEXHAUSTED && wait && reason != SL_MEM_QUOTA) {
        if (sl_map_put(&srv->sessions, s->id, s) != SL_OK) {
            sl_mem_release(srv->mem, s->id);
            goto out_oom;
        }
        s->admit_req = req;
        s->admit_reply = r;
        sl_log_info("ses.wait", "session %llu (%s) waits for admission: %s",
                    (unsigned long long) s->id, s->name, sl_mem_reason_name(reason));
        return true;
    }
    if (rc) {
        sl_mem_stats st;
        sl_mem_get_stats(srv->mem, &st);
        sl_reply_error(r, rc,
                       "cannot admit the session (persistent %llu, ephemeral %llu bytes): %s; %llu "
                       "bytes free, largest block %llu",
                       (unsigned long long) s->declared_persistent,
                       (unsigned long long) s->declared_ephemeral,
                       rc == SL_EEXHAUSTED ? sl_mem_reason_name(reason) : sl_strerror(rc),
                       (unsigned long long) st.free, (unsigned long long) st.largest_free);
        sl_free(s);
        return false;
    }
    if (sl_map_put(&srv->sessions, s->id, s) != SL_OK || admit(srv, s, lane) != SL_OK) {
        (void) sl_map_del(&srv->sessions, s->id);
        sl_mem_release(srv->mem, s->id);
        goto out_oom;
    }
    sl_log_info("ses.open", "session %llu (%s) opened on pipe %u", (unsigned long long) s->id,
                s->name, pipe_id);
    return false;

out_oom:
    sl_free(s);
    sl_reply_error(r, SL_ENOMEM, "out of host memory");
    return false;
}

void sl_dispatch_memory_changed(sl_server *srv, sl_outbox *box)
{
    uint64_t id;
    uint32_t lane;
    while (sl_mem_next_admitted(srv->mem, &id, &lane)) {
        sl_session *s = sl_map_get(&srv->sessions, id);
        if (!s || s->admitted)
            continue;
        if (admit(srv, s, lane) != SL_OK) {
            sl_reply_error(s->admit_reply, SL_ENOMEM, "out of host memory");
            s->closing = true;
        }
        sl_outbox_put(box, s->admit_req, s->admit_reply);
        s->admit_req = NULL;
        s->admit_reply = NULL;
        if (s->closing) {
            (void) sl_map_del(&srv->sessions, s->id);
            sl_mem_release(srv->mem, s->id);
            sl_dispatch_session_free(srv, s);
        }
    }
    /* registrations that waited for their lane to go idle */
    size_t i = 0;
    void *v;
    while (sl_map_next(&srv->sessions, &i, NULL, &v)) {
        sl_session *s = v;
        if (s->blocked && s->head && !place_graph(srv, s, s->head)) {
            finish_head(srv, s, box);
            session_pump(srv, s, box); /* may close, but not free other sessions */
            i = 0;                     /* the table may have changed: rescan */
        }
    }
}

static void answer_hello(sl_server *srv, const Salus__Hello *m, sl_reply *r)
{
    if (m->protocol_version != SL_PROTOCOL_VERSION) {
        sl_reply_error(r, SL_EPROTO, "protocol version %u is not supported (server speaks %u)",
                       m->protocol_version, SL_PROTOCOL_VERSION);
        return;
    }
    Salus__HelloReply *body = sl_reply_alloc(r, sizeof *body);
    if (!body) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return;
    }
    salus__hello_reply__init(body);
    body->protocol_version = SL_PROTOCOL_VERSION;
    body->server_version = (char *) SL_SERVER_VERSION;
    body->device = srv->dev->description;
    body->policy = (char *) sl_sched_policy(srv->sched)->name;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_HELLO;
    sl_reply_msg(r)->hello = body;
}

static void set_policy(sl_server *srv, const Salus__SetPolicy *m, sl_reply *r, sl_outbox *box)
{
    const sl_policy_ops *p = m->policy ? sl_sched_policy_find(m->policy) : NULL;
    if (!p) {
        sl_reply_error(r, SL_EINVAL, "unknown policy '%s' (known: %s)", m->policy ? m->policy : "",
                       sl_sched_policy_names());
        return;
    }
    sl_sched_set_policy(srv->sched, p, m->strict);
    sl_log_info("sch.policy", "policy set to %s%s", p->name, m->strict ? " (strict)" : "");
    size_t i = 0;
    void *v;
    while (sl_map_next(&srv->sessions, &i, NULL, &v))
        sl_exec_update_class(srv, v, false);
    sl_exec_resume(srv, srv->gaps.n_hp == 0, box);
    sl_exec_kick(srv, box); /* a work-conserving policy may start what a strict one held */
}

static void set_session(sl_server *srv, const Salus__SetSession *m, sl_reply *r, sl_outbox *box)
{
    sl_session *t = sl_map_get(&srv->sessions, m->target_session);
    if (!t) {
        sl_reply_error(r, SL_ENOTFOUND, "no session %llu", (unsigned long long) m->target_session);
        return;
    }
    if (m->set_weight && !(m->weight > 0 && m->weight < 1e6)) {
        sl_reply_error(r, SL_EINVAL, "weight must be in (0, 1e6)");
        return;
    }
    if (m->set_priority)
        sl_sched_job_set_priority(srv->sched, &t->job, m->priority);
    if (m->set_weight)
        sl_sched_job_set_weight(srv->sched, &t->job, m->weight);
    sl_exec_update_class(srv, t, false);
    sl_exec_resume(srv, srv->gaps.n_hp == 0, box);
    sl_log_info("sch.session", "session %llu: priority %d, weight %.3g", (unsigned long long) t->id,
                t->job.priority, t->job.weight);
}

/* issue 6: over ipc://, operator requests come from root or salusd's user,
 * and a session's share may also be set by its owner. */
static bool operator_allowed(sl_server *srv, const sl_req *req, const Salus__Request *msg,
                             sl_reply *r)
{
    if (sl_req_is_operator(req))
        return true;
    if (msg->body_case == SALUS__REQUEST__BODY_SET_SESSION) {
        const sl_session *t = sl_map_get(&srv->sessions, msg->set_session->target_session);
        if (!t || sl_req_same_user(req, t))
            return true;
    }
    sl_reply_error(r, SL_EPERM, "operator requests are for root and salusd's own user");
    return false;
}

void sl_dispatch(sl_server *srv, sl_req *req, Salus__Request *msg, uint32_t pipe_id)
{
    sl_reply *r = sl_reply_new(msg->seq);
    if (!r) {
        salus__request__free_unpacked(msg, NULL);
        sl_transport_reply(srv, req, NULL);
        return;
    }
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    srv->requests_total++;
    switch (msg->body_case) {
    case SALUS__REQUEST__BODY_HELLO:
        answer_hello(srv, msg->hello, r);
        goto out_reply;
    case SALUS__REQUEST__BODY_STATUS:
        if (sl_status_build(srv, r) != SL_OK)
            sl_reply_error(r, SL_ENOMEM, "out of host memory");
        goto out_reply;
    case SALUS__REQUEST__BODY_OPEN_SESSION:
        if (session_open(srv, msg->open_session, req, pipe_id, r)) {
            pthread_mutex_unlock(&srv->lock);
            salus__request__free_unpacked(msg, NULL);
            return; /* answered at admission */
        }
        goto out_reply;
    case SALUS__REQUEST__BODY_SET_POLICY:
        if (operator_allowed(srv, req, msg, r))
            set_policy(srv, msg->set_policy, r, &box);
        goto out_reply;
    case SALUS__REQUEST__BODY_SET_SESSION:
        if (operator_allowed(srv, req, msg, r))
            set_session(srv, msg->set_session, r, &box);
        goto out_reply;
    case SALUS__REQUEST__BODY__NOT_SET:
        sl_reply_error(r, SL_EINVAL, "empty request");
        goto out_reply;
    default:
        break;
    }
    sl_session *s = sl_map_get(&srv->sessions, msg->session_id);
    if (!s || s->closing || !s->admitted) {
        sl_reply_error(r, SL_ESESSIONLOST,
                       "no session %llu: it was closed, or the server restarted",
                       (unsigned long long) msg->session_id);
        goto out_reply;
    }
    if (msg->token != s->token) {
        sl_log_warn("ses.token", "wrong token for session %llu from pipe %u",
                    (unsigned long long) s->id, pipe_id);
        sl_reply_error(r, SL_EPERM, "wrong token for session %llu", (unsigned long long) s->id);
        goto out_reply;
    }
    /* issue 6: the owner's uid over ipc://, then device faults (fault.c) */
    if (!sl_req_same_user(req, s)) {
        sl_log_warn("ses.uid", "session %llu refused to pipe %u: another user",
                    (unsigned long long) s->id, pipe_id);
        sl_reply_error(r, SL_EPERM, "session %llu belongs to another user",
                       (unsigned long long) s->id);
        goto out_reply;
    }
    switch (sl_fault_gate(srv, s, req, msg, pipe_id, r)) {
    case SL_FAULT_HELD:
        pthread_mutex_unlock(&srv->lock);
        sl_reply_free(r);
        return;
    case SL_FAULT_ANSWERED:
        goto out_reply;
    default:
        break;
    }
    sl_work *w = sl_calloc(1, sizeof *w);
    if (!w) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        goto out_reply;
    }
    w->req = req;
    w->msg = msg;
    w->reply = r;
    w->arrival_ns = sl_now_ns();
    w->session = s;
    if (msg->body_case == SALUS__REQUEST__BODY_CLOSE_SESSION)
        s->closing = true;
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    session_pump(srv, s, &box);
    pthread_mutex_unlock(&srv->lock);
    sl_outbox_flush(srv, &box);
    return;

out_reply:
    if (sl_reply_msg(r)->code != SALUS__CODE__OK)
        srv->errors_total++;
    pthread_mutex_unlock(&srv->lock);
    salus__request__free_unpacked(msg, NULL);
    sl_transport_reply(srv, req, r);
    sl_outbox_flush(srv, &box);
}

void sl_dispatch_pipe_gone(sl_server *srv, uint32_t pipe_id)
{
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    if (srv->stopped) {
        pthread_mutex_unlock(&srv->lock);
        return;
    }
    srv->gone_pipes[srv->gone_next++ % SL_GONE_PIPES] = pipe_id;
    size_t i = 0;
    void *v;
    sl_session *lost[64];
    int n_lost;
    /* closing frees sessions, which would disturb the iteration: collect
     * first, in rounds */
    do {
        n_lost = 0;
        i = 0;
        while (n_lost < 64 && sl_map_next(&srv->sessions, &i, NULL, &v)) {
            sl_session *s = v;
            if (s->pipe_id == pipe_id && !s->closing)
                lost[n_lost++] = s;
        }
        for (int k = 0; k < n_lost; k++) {
            sl_session *s = lost[k];
            sl_work *w = sl_calloc(1, sizeof *w);
            sl_reply *r = sl_reply_new(0);
            s->closing = true;
            if (!w || !r) {
                /* cannot queue a close: leave the session to be reclaimed
                 * at shutdown rather than crash */
                sl_free(w);
                sl_reply_free(r);
                sl_log_err("ses.lost", "out of memory closing session %llu",
                           (unsigned long long) s->id);
                continue;
            }
            w->msg = &lost_close;
            w->reply = r;
            w->session = s;
            sl_log_info("ses.lost", "connection of session %llu went away; closing it",
                        (unsigned long long) s->id);
            if (s->tail)
                s->tail->next = w;
            else
                s->head = w;
            s->tail = w;
            session_pump(srv, s, &box);
        }
    } while (n_lost == 64);
    pthread_mutex_unlock(&srv->lock);
    sl_outbox_flush(srv, &box);
}

void sl_dispatch_drain(sl_server *srv)
{
    sl_outbox box = {0};
    pthread_mutex_lock(&srv->lock);
    srv->draining = true;
    size_t i = 0;
    void *v;
    while (sl_map_next(&srv->sessions, &i, NULL, &v)) {
        sl_session *s = v;
        if (s->admit_reply) {
            sl_reply_error(s->admit_reply, SL_ESHUTDOWN, "server is shutting down");
            sl_outbox_put(&box, s->admit_req, s->admit_reply);
            s->admit_req = NULL;
            s->admit_reply = NULL;
            continue; /* freed with the server */
        }
        if (s->job.running || !s->job.n_queued)
            continue;
        /* the queued run is the session's head: take it out of the scheduler
         * and fail it, and everything queued behind it */
        sl_sched_item *items = sl_sched_job_remove(srv->sched, &s->job);
        (void) items;
        sl_sched_job_add(srv->sched, &s->job, sl_now_ns());
        fail_pending(srv, s, SL_ESHUTDOWN, "server is shutting down: iteration not started", &box);
    }
    sl_exec_resume(srv, true, &box); /* parked iterations run to their end */
    pthread_mutex_unlock(&srv->lock);
    sl_outbox_flush(srv, &box);

    pthread_mutex_lock(&srv->lock);
    while (srv->lanes_busy || srv->control_in_flight || srv->completing)
        pthread_cond_wait(&srv->idle_cond, &srv->lock);
    pthread_mutex_unlock(&srv->lock);
}
