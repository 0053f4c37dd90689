/* Handlers of a session's tensor, graph and shared-memory requests
 * (handlers.h). Copies to and from the device go through the executor's
 * control stream, in order with the session's other work. */
#include "handlers.h"
#include "session.h"
#include "sl_alloc.h"
#include "sl_error.h"
#include "sl_log.h"
#include "transport.h"

#include <stdio.h>
#include <string.h>

static sl_tensor *find_tensor(sl_session *s, uint64_t id, sl_reply *r)
{
    sl_tensor *t = sl_map_get(&s->tensors, id);
    if (!t)
        sl_reply_error(r, SL_ENOTFOUND, "session %llu has no tensor %llu",
                       (unsigned long long) s->id, (unsigned long long) id);
    return t;
}

/* Whether s may hold one more of what `held` counts (its tensors, or its
 * graphs: as many of each); the refusal goes into r when not. */
static bool below_limit(const sl_sessions *ss, const sl_session *s, const sl_map *held,
                        const char *what, sl_reply *r)
{
    uint32_t most = ss->cfg->max_tensors_per_session ? ss->cfg->max_tensors_per_session
                                                     : SL_DEFAULT_MAX_TENSORS;
    if (held->count < most)
        return true;
    sl_reply_error(r, SL_EEXHAUSTED,
                   "session %llu already holds %zu %s (limit %u, salusd --max-tensors-per-session)",
                   (unsigned long long) s->id, held->count, what, most);
    return false;
}

/* Whether s may hold `more` bytes of host bookkeeping, within its own
 * budget and all sessions' together; the refusal goes into r when not. */
static bool below_metadata(const sl_sessions *ss, const sl_session *s, uint64_t more,
                           const char *what, sl_reply *r)
{
    uint64_t most =
        ss->cfg->session_metadata ? ss->cfg->session_metadata : SL_DEFAULT_SESSION_METADATA;
    if (s->host_bytes + more > most) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "%s needs %llu bytes of salusd's host memory; session %llu holds %llu in "
                       "its graphs and tensors (limit %llu, salusd --session-metadata): free "
                       "graphs or raise the limit",
                       what, (unsigned long long) more, (unsigned long long) s->id,
                       (unsigned long long) s->host_bytes, (unsigned long long) most);
        return false;
    }
    if (ss->host_bytes + more > ss->host_limit) {
        sl_reply_error(r, SL_EEXHAUSTED,
                       "%s needs %llu bytes of salusd's host memory; all sessions' graphs and "
                       "tensors hold %llu (limit %llu, salusd --max-metadata): retry when others "
                       "have freed theirs, or raise the limit",
                       what, (unsigned long long) more, (unsigned long long) ss->host_bytes,
                       (unsigned long long) ss->host_limit);
        return false;
    }
    return true;
}

/* s holds delta more (or fewer) bytes of host bookkeeping. */
static void hold_host(sl_sessions *ss, sl_session *s, int64_t delta)
{
    s->host_bytes += (uint64_t) delta;
    ss->host_bytes += (uint64_t) delta;
}

static bool set_empty_body(sl_reply *r)
{
    Salus__Empty *e = sl_reply_alloc(r, sizeof *e);
    if (!e)
        return false;
    salus__empty__init(e);
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_EMPTY;
    sl_reply_msg(r)->empty = e;
    return true;
}

/* Submits w's control copy of `bytes` bytes at byte `offset` of t;
 * completes it now with the error when it cannot be submitted. */
static int control(sl_sessions *ss, sl_work *w, int kind, const sl_tensor *t, void *host,
                   uint64_t offset, uint64_t bytes)
{
    w->task.job = &w->session->job;
    int rc = sl_exec_control(ss->ex, &w->task, kind, t->addr + offset, host, bytes, &t->shape);
    if (rc == SL_OK)
        return SL_HANDLED_LATER;
    sl_reply_error(w->reply, rc, "device copy failed: %s", sl_strerror(rc));
    return SL_HANDLED;
}

/* Whether [offset, offset + len) is a nonempty run of whole elements of t;
 * the refusal goes into r when not. */
static bool valid_chunk(const sl_tensor *t, uint64_t offset, uint64_t len, sl_reply *r)
{
    uint64_t bytes = sl_shape_bytes(&t->shape), elem = sl_dtype_size(t->shape.dtype);
    if (len && offset % elem == 0 && len % elem == 0 && offset < bytes && len <= bytes - offset)
        return true;
    sl_reply_error(r, SL_EINVAL,
                   "chunk of %llu bytes at offset %llu: tensor %llu has %llu bytes; a chunk is "
                   "nonempty, inside the tensor, and made of whole %llu-byte elements",
                   (unsigned long long) len, (unsigned long long) offset,
                   (unsigned long long) t->id, (unsigned long long) bytes,
                   (unsigned long long) elem);
    return false;
}

int sl_handle_create_tensor(sl_sessions *ss, sl_session *s, sl_work *w)
{
    const Salus__CreateTensor *m = w->msg->create_tensor;
    sl_reply *r = w->reply;
    sl_shape shape;
    char why[96];
    if (sl_shape_from_desc(m->desc, &shape, why, sizeof why) != SL_OK) {
        sl_reply_error(r, SL_EINVAL, "invalid tensor shape: %s", why);
        return SL_HANDLED;
    }
    if (!below_limit(ss, s, &s->tensors, "tensors", r) ||
        !below_metadata(ss, s, SL_TENSOR_HOST_BYTES, "a tensor", r))
        return SL_HANDLED;
    uint64_t bytes = sl_shape_bytes(&shape);
    if (m->init.len != 0 && m->init.len != bytes) {
        sl_reply_error(r, SL_EINVAL, "init has %zu bytes, tensor has %llu", m->init.len,
                       (unsigned long long) bytes);
        return SL_HANDLED;
    }
    sl_tensor *t = sl_calloc(1, sizeof *t);
    if (!t) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return SL_HANDLED;
    }
    int reason = SL_MEM_FITS;
    int rc = sl_mem_alloc(ss->mem, s->id, bytes, &t->addr, &reason);
    uint64_t move = rc == SL_EEXHAUSTED ? sl_mem_framework_blocking(ss->mem, s->id, bytes) : 0;
    if (move) {
        /* recordings hold bytes of the declared P the tensor needs: they
         * move beside P, counted against the tenant as a recording is */
        if (sl_sessions_recording_room(ss, &s->job, move, NULL, 0) &&
            sl_mem_framework_move_out(ss->mem, s->id, move, &reason) == SL_OK) {
            sl_sessions_recordings_charged(ss, &s->job);
            rc = sl_mem_alloc(ss->mem, s->id, bytes, &t->addr, &reason);
        }
    }
    if (rc) {
        sl_free(t);
        sl_mem_session_info mi = {0};
        (void) sl_mem_session_get(ss->mem, s->id, &mi);
        if (rc == SL_EEXHAUSTED && s->declared_persistent && mi.framework_region)
            sl_reply_error(r, rc,
                           "cannot allocate %llu persistent bytes: %s (the session uses %llu of "
                           "the %llu it declared, and its recorded graphs hold %llu of them, "
                           "which its quota has no room to hold beside them; declare more "
                           "persistent bytes)",
                           (unsigned long long) bytes, sl_mem_reason_name(reason),
                           (unsigned long long) s->persistent_bytes,
                           (unsigned long long) s->declared_persistent,
                           (unsigned long long) mi.framework_region);
        else if (rc == SL_EEXHAUSTED && s->declared_persistent)
            sl_reply_error(r, rc,
                           "cannot allocate %llu persistent bytes: %s (the session uses %llu of "
                           "the %llu it declared)",
                           (unsigned long long) bytes, sl_mem_reason_name(reason),
                           (unsigned long long) s->persistent_bytes,
                           (unsigned long long) s->declared_persistent);
        else if (rc == SL_EEXHAUSTED)
            sl_reply_error(r, rc,
                           "cannot allocate %llu persistent bytes: %s (the session holds %llu "
                           "persistent bytes; its lane of %llu ephemeral bytes and %llu of "
                           "workspace count too; session quota %llu)",
                           (unsigned long long) bytes, sl_mem_reason_name(reason),
                           (unsigned long long) s->persistent_bytes,
                           (unsigned long long) (s->ephemeral_peak ? s->ephemeral_peak
                                                                   : ss->default_ephemeral),
                           (unsigned long long) ss->framework_per_lane,
                           (unsigned long long) ss->quota);
        else
            sl_reply_error(r, rc, "cannot allocate %llu persistent bytes: %s",
                           (unsigned long long) bytes, sl_strerror(rc));
        return SL_HANDLED;
    }
    t->id = ++s->next_object_id;
    t->shape = shape;
    t->bytes = sl_align_up(bytes, 256);
    Salus__CreateTensorReply *body = sl_reply_alloc(r, sizeof *body);
    if (!body || sl_map_put(&s->tensors, t->id, t) != SL_OK) {
        (void) sl_mem_free(ss->mem, s->id, t->addr);
        sl_free(t);
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return SL_HANDLED;
    }
    s->persistent_bytes += t->bytes;
    s->persistent_by_dtype[shape.dtype] += t->bytes;
    hold_host(ss, s, (int64_t) SL_TENSOR_HOST_BYTES);
    salus__create_tensor_reply__init(body);
    body->tensor_id = t->id;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_CREATE_TENSOR;
    sl_reply_msg(r)->create_tensor = body;
    if (m->init.len)
        return control(ss, w, SL_EXEC_COPY_IN, t, m->init.data, 0, bytes);
    return control(ss, w, SL_EXEC_FILL, t, NULL, 0, bytes);
}

int sl_handle_write_tensor(sl_sessions *ss, sl_session *s, sl_work *w)
{
    const Salus__WriteTensor *m = w->msg->write_tensor;
    sl_tensor *t = find_tensor(s, m->tensor_id, w->reply);
    if (!t)
        return SL_HANDLED;
    uint64_t bytes = sl_shape_bytes(&t->shape);
    if (!m->offset && !m->total_bytes && m->data.len != bytes) {
        sl_reply_error(w->reply, SL_EINVAL, "data has %zu bytes, tensor %llu has %llu", m->data.len,
                       (unsigned long long) t->id, (unsigned long long) bytes);
        return SL_HANDLED;
    }
    if ((m->offset || m->total_bytes) && m->total_bytes != bytes) {
        sl_reply_error(w->reply, SL_EINVAL,
                       "a chunked write of tensor %llu says it has %llu bytes; it has %llu",
                       (unsigned long long) t->id, (unsigned long long) m->total_bytes,
                       (unsigned long long) bytes);
        return SL_HANDLED;
    }
    if (m->total_bytes && !valid_chunk(t, m->offset, m->data.len, w->reply))
        return SL_HANDLED;
    if (!set_empty_body(w->reply)) {
        sl_reply_error(w->reply, SL_ENOMEM, "out of host memory");
        return SL_HANDLED;
    }
    return control(ss, w, SL_EXEC_COPY_IN, t, m->data.data, m->offset, m->data.len);
}

int sl_handle_read_tensor(sl_sessions *ss, sl_session *s, sl_work *w)
{
    const Salus__ReadTensor *m = w->msg->read_tensor;
    sl_reply *r = w->reply;
    sl_tensor *t = find_tensor(s, m->tensor_id, r);
    if (!t)
        return SL_HANDLED;
    uint64_t bytes = m->length ? m->length : sl_shape_bytes(&t->shape);
    if (m->length ? !valid_chunk(t, m->offset, m->length, r) : m->offset != 0) {
        if (!m->length)
            sl_reply_error(r, SL_EINVAL, "a read at offset %llu needs a length",
                           (unsigned long long) m->offset);
        return SL_HANDLED;
    }
    uint64_t most = sl_max_reply_bytes(ss->cfg);
    if (bytes > most) {
        sl_reply_error(r, SL_EINVAL,
                       "%llu bytes of tensor %llu: more than one reply carries (%llu, salusd "
                       "--max-message); read it in chunks (ReadTensor offset and length)",
                       (unsigned long long) bytes, (unsigned long long) t->id,
                       (unsigned long long) most);
        return SL_HANDLED;
    }
    Salus__ReadTensorReply *body = sl_reply_alloc(r, sizeof *body);
    Salus__Tensor *tensor = sl_reply_alloc(r, sizeof *tensor);
    void *data = sl_reply_alloc(r, bytes);
    Salus__TensorDesc *desc = sl_reply_desc(r, &t->shape);
    if (!body || !tensor || !data || !desc) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory for a %llu-byte read",
                       (unsigned long long) bytes);
        return SL_HANDLED;
    }
    salus__read_tensor_reply__init(body);
    salus__tensor__init(tensor);
    tensor->desc = desc;
    tensor->data.data = data;
    tensor->data.len = bytes;
    body->tensor = tensor;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_READ_TENSOR;
    sl_reply_msg(r)->read_tensor = body;
    return control(ss, w, SL_EXEC_COPY_OUT, t, data, m->offset, bytes);
}

int sl_handle_free_tensor(sl_sessions *ss, sl_session *s, sl_work *w, bool *freed)
{
    sl_tensor *t = find_tensor(s, w->msg->free_tensor->tensor_id, w->reply);
    if (!t)
        return SL_HANDLED;
    if (t->graph_refs) {
        sl_reply_error(w->reply, SL_EBUSY,
                       "tensor %llu is used by %u registered graph(s): free them first",
                       (unsigned long long) t->id, t->graph_refs);
        return SL_HANDLED;
    }
    (void) sl_map_del(&s->tensors, t->id);
    s->persistent_bytes -= t->bytes;
    s->persistent_by_dtype[t->shape.dtype] -= t->bytes;
    hold_host(ss, s, -(int64_t) SL_TENSOR_HOST_BYTES);
    (void) sl_mem_free(ss->mem, s->id, t->addr);
    sl_free(t);
    *freed = true;
    return SL_HANDLED;
}

int sl_handle_register_graph(sl_sessions *ss, sl_session *s, sl_work *w)
{
    sl_reply *r = w->reply;
    char err[SL_REPLY_MAX_MESSAGE];
    if (!w->msg->register_graph->graph) {
        sl_reply_error(r, SL_EINVAL, "register_graph without a graph");
        return SL_HANDLED;
    }
    if (!below_limit(ss, s, &s->graphs, "graphs", r))
        return SL_HANDLED;
    int rc = sl_graph_build(&s->tensors, w->msg->register_graph->graph, !ss->cfg->no_inplace,
                            &w->graph, err, sizeof err);
    if (rc == SL_OK && (rc = sl_graph_check_device(w->graph, ss->ex->dev, err, sizeof err))) {
        sl_graph_free(w->graph);
        w->graph = NULL;
    }
    if (rc) {
        sl_reply_error(r, rc, "%s", err);
        return SL_HANDLED;
    }
    if (!below_metadata(ss, s, w->graph->host_bytes, "the graph", r)) {
        sl_graph_free(w->graph);
        w->graph = NULL;
        return SL_HANDLED;
    }
    return sl_handle_place_graph(ss, s, w);
}

int sl_handle_place_graph(sl_sessions *ss, sl_session *s, sl_work *w)
{
    sl_reply *r = w->reply;
    sl_graph *g = w->graph;
    uint64_t need = g->plan.peak > s->ephemeral_peak ? g->plan.peak : s->ephemeral_peak;
    uint32_t lane;
    int reason = SL_MEM_FITS;
    sl_peer owner = sl_session_owner(s);
    if (s->limited && !sl_tenants_room(&ss->tenants, &owner, s->tenant, s->tenant_charge,
                                       s->declared_persistent, need, r)) {
        w->graph = NULL;
        sl_graph_free(g);
        return SL_HANDLED;
    }
    int rc = sl_mem_set_ephemeral(ss->mem, s->id, need ? need : 256, &lane, &reason);
    if (rc == SL_EBUSY) /* the session must move, and its lane is running someone's iteration */
        return SL_HANDLED_WAIT;
    w->graph = NULL;
    if (rc == SL_OK)
        sl_tenants_grow(&ss->tenants, s->tenant, &s->tenant_charge, s->declared_persistent, need);
    if (rc) {
        sl_reply_error(r, rc,
                       "graph needs %llu ephemeral bytes per iteration: %s (session quota %llu, "
                       "of which its persistent tensors hold %llu)",
                       (unsigned long long) g->plan.peak,
                       rc == SL_EEXHAUSTED ? sl_mem_reason_name(reason) : sl_strerror(rc),
                       (unsigned long long) ss->quota, (unsigned long long) s->persistent_bytes);
        sl_graph_free(g);
        return SL_HANDLED;
    }
    if (sl_exec_move(ss->ex, &s->job, lane) != SL_OK) {
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        sl_graph_free(g);
        return SL_HANDLED;
    }
    g->id = ++s->next_object_id;
    Salus__RegisterGraphReply *body = sl_reply_alloc(r, sizeof *body);
    Salus__TensorDesc **descs = sl_reply_alloc(r, g->n_values * sizeof *descs);
    if (!body || !descs || sl_map_put(&s->graphs, g->id, g) != SL_OK) {
        sl_graph_free(g);
        sl_reply_error(r, SL_ENOMEM, "out of host memory");
        return SL_HANDLED;
    }
    salus__register_graph_reply__init(body);
    body->graph_id = g->id;
    body->planned_peak = g->plan.peak;
    body->naive_bytes = g->plan.naive;
    body->n_values = g->n_values;
    body->values = descs;
    for (uint32_t v = 0; v < g->n_values; v++) {
        if (!(descs[v] = sl_reply_desc(r, &g->values[v].shape))) {
            body->n_values = v;
            break;
        }
    }
    hold_host(ss, s, (int64_t) g->host_bytes);
    if (g->plan.peak > s->ephemeral_peak)
        s->ephemeral_peak = g->plan.peak;
    sl_reply_msg(r)->body_case = SALUS__REPLY__BODY_REGISTER_GRAPH;
    sl_reply_msg(r)->register_graph = body;
    sl_log_debug("ses.graph",
                 "session %llu graph %llu: %u ops, peak %llu of naive %llu bytes, lane %u",
                 (unsigned long long) s->id, (unsigned long long) g->id, g->n_ops,
                 (unsigned long long) g->plan.peak, (unsigned long long) g->plan.naive, lane);
    return SL_HANDLED;
}

int sl_handle_free_graph(sl_sessions *ss, sl_session *s, sl_work *w)
{
    sl_graph *g = sl_map_del(&s->graphs, w->msg->free_graph->graph_id);
    if (!g)
        sl_reply_error(w->reply, SL_ENOTFOUND, "session %llu has no graph %llu",
                       (unsigned long long) s->id,
                       (unsigned long long) w->msg->free_graph->graph_id);
    else
        hold_host(ss, s, -(int64_t) g->host_bytes);
    bool freed = g != NULL;
    sl_graph_free(g);
    if (freed) /* its recordings' memory went with it */
        sl_sessions_recordings_charged(ss, &s->job);
    return SL_HANDLED;
}

int sl_handle_attach_shm(sl_sessions *ss, sl_session *s, sl_work *w)
{
    const Salus__AttachShm *m = w->msg->attach_shm;
    if (m->fd) {
        sl_reply_error(w->reply, SL_EINVAL,
                       "AttachShm.fd is no longer supported (salusd opens no descriptor on a "
                       "client's behalf): send the memfd over the descriptor socket (ipc path + "
                       "\".fd\") and attach its ticket");
        return SL_HANDLED;
    }
    if (!s->has_uid) {
        sl_reply_error(w->reply, SL_EUNSUPPORTED, "shared memory needs an ipc:// connection");
        return SL_HANDLED;
    }
    if (!s->shm_staged || !m->ticket || m->ticket != s->shm_ticket) {
        sl_reply_error(w->reply, SL_EINVAL,
                       "no segment is staged under ticket %llu: stage one on the descriptor "
                       "socket first (a ticket is used once)",
                       (unsigned long long) m->ticket);
        return SL_HANDLED;
    }
    if (m->size != s->shm_staged->size) {
        sl_reply_error(w->reply, SL_EINVAL, "the segment staged is %llu bytes, not %llu",
                       (unsigned long long) s->shm_staged->size, (unsigned long long) m->size);
        return SL_HANDLED;
    }
    /* in session order: no run of this session uses the old segment now */
    sl_shm_retire(ss->shm, s->shm);
    s->shm = s->shm_staged;
    s->shm_staged = NULL;
    s->shm_ticket = 0;
    sl_log_debug("ses.shm", "session %llu attached %llu bytes of shared memory",
                 (unsigned long long) s->id, (unsigned long long) m->size);
    return SL_HANDLED;
}
