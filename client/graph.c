/* The graph builder: values and ops validated on the client with the same op
 * registry the server uses, serialised to the wire numbering (inputs, then
 * params, then op outputs) at registration. */
#include "client_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum value_kind { VALUE_INPUT, VALUE_PARAM, VALUE_OUTPUT };

struct value {
    sl_shape shape;
    uint8_t kind;
    uint32_t index;     /* among inputs / params / op outputs of its kind */
    uint64_t tensor_id; /* params */
};

struct op {
    unsigned id;
    uint32_t n_in;
    salus_value in[SL_OP_MAX_IN];
    sl_op_attrs attrs;
    uint8_t n_iattrs, n_fattrs;
    salus_value out0; /* its first output (SALUS_NO_VALUE: none) */
};

struct salus_graph {
    struct value *values;
    size_t n_values, cap_values;
    struct op *ops;
    size_t n_ops, cap_ops;
    uint32_t n_inputs, n_params, n_outputs;
    salus_session *session; /* set once registered */
    uint64_t graph_id;
    uint64_t planned_peak, naive_bytes;
    char error[512]; /* the size of the client's last_error, which it is copied into */
};

salus_graph *salus_graph_new(void)
{
    return sl_calloc(1, sizeof(salus_graph));
}

void salus_graph_free(salus_graph *g)
{
    if (!g)
        return;
    if (g->session) {
        Salus__Request req = SALUS__REQUEST__INIT;
        Salus__FreeGraph f = SALUS__FREE_GRAPH__INIT;
        f.graph_id = g->graph_id;
        req.body_case = SALUS__REQUEST__BODY_FREE_GRAPH;
        req.free_graph = &f;
        Salus__Reply *rep;
        if (sl_client_session_call(g->session, &req, &rep) == SL_OK)
            salus__reply__free_unpacked(rep, NULL);
    }
    sl_free(g->values);
    sl_free(g->ops);
    sl_free(g);
}

const char *salus_graph_error(const salus_graph *g)
{
    return g->error[0] ? g->error : NULL;
}

__attribute__((format(printf, 2, 3))) static salus_value fail(salus_graph *g, const char *fmt, ...)
{
    if (!g->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->error, sizeof g->error, fmt, ap);
        va_end(ap);
    }
    return SALUS_NO_VALUE;
}

static salus_value add_value(salus_graph *g, const sl_shape *shape, uint8_t kind, uint32_t index,
                             uint64_t tensor_id)
{
    if (g->n_values == g->cap_values) {
        size_t cap = g->cap_values ? g->cap_values * 2 : 32;
        struct value *v = sl_reallocarray(g->values, cap, sizeof *v);
        if (!v)
            return fail(g, "out of memory");
        g->values = v;
        g->cap_values = cap;
    }
    if (g->n_values >= SALUS_NO_VALUE)
        return fail(g, "too many values");
    g->values[g->n_values] =
        (struct value){.shape = *shape, .kind = kind, .index = index, .tensor_id = tensor_id};
    return (salus_value) g->n_values++;
}

static int make_shape(int dtype, int ndim, const int64_t *dims, sl_shape *out)
{
    if (ndim < 0 || ndim > SL_MAX_DIMS || (ndim > 0 && !dims))
        return SL_EINVAL;
    *out = (sl_shape){.dtype = (uint8_t) dtype, .ndim = (uint8_t) ndim};
    if (dtype < 0 || dtype >= SL_DTYPE_COUNT)
        return SL_EINVAL;
    for (int i = 0; i < ndim; i++)
        out->dims[i] = dims[i];
    return sl_shape_valid(out) ? SL_OK : SL_EINVAL;
}

salus_value salus_graph_input(salus_graph *g, int dtype, int ndim, const int64_t *dims)
{
    sl_shape shape;
    if (g->error[0] || g->session)
        return fail(g, "graph is already registered");
    if (make_shape(dtype, ndim, dims, &shape))
        return fail(g, "input %u: invalid shape", g->n_inputs);
    return add_value(g, &shape, VALUE_INPUT, g->n_inputs++, 0);
}

salus_value salus_graph_param(salus_graph *g, uint64_t tensor_id, int dtype, int ndim,
                              const int64_t *dims)
{
    sl_shape shape;
    if (g->error[0] || g->session)
        return fail(g, "graph is already registered");
    if (make_shape(dtype, ndim, dims, &shape))
        return fail(g, "param (tensor %llu): invalid shape", (unsigned long long) tensor_id);
    return add_value(g, &shape, VALUE_PARAM, g->n_params++, tensor_id);
}

salus_value salus_graph_op(salus_graph *g, const char *type, unsigned n_in,
                           const salus_value *inputs, unsigned n_iattrs, const int64_t *iattrs,
                           unsigned n_fattrs, const float *fattrs)
{
    unsigned id;
    if (g->error[0])
        return SALUS_NO_VALUE;
    if (g->session)
        return fail(g, "graph is already registered");
    if (!type || sl_op_lookup(type, &id) != SL_OK) {
        char known[384];
        sl_op_names(known, sizeof known);
        return fail(g, "op %zu: unknown op type '%.64s'; known: %s", g->n_ops,
                    type ? type : "(null)", known);
    }
    if (n_in > SL_OP_MAX_IN || n_iattrs > SL_OP_MAX_IATTRS || n_fattrs > SL_OP_MAX_FATTRS)
        return fail(g, "op %s: too many inputs or attributes", type);
    /* the same refusal the server would give at registration, but here,
     * where the program names the op */
    char err[160];
    if (sl_op_check_attrs(id, n_iattrs, n_fattrs, err, sizeof err) != SL_OK)
        return fail(g, "op %zu (%s): %s", g->n_ops, type, err);
    struct op op = {
        .id = id, .n_in = n_in, .n_iattrs = (uint8_t) n_iattrs, .n_fattrs = (uint8_t) n_fattrs};
    sl_shape in[SL_OP_MAX_IN], out[SL_OP_MAX_OUT];
    for (unsigned i = 0; i < n_in; i++) {
        if (inputs[i] >= g->n_values)
            return fail(g, "op %s: input %u is not a value of this graph", type, i);
        op.in[i] = inputs[i];
        in[i] = g->values[inputs[i]].shape;
    }
    for (unsigned i = 0; i < n_iattrs; i++)
        op.attrs.i[i] = iattrs[i];
    for (unsigned i = 0; i < n_fattrs; i++)
        op.attrs.f[i] = fattrs[i];
    if (sl_op_infer(id, &op.attrs, in, n_in, out, err, sizeof err) != SL_OK)
        return fail(g, "op %zu (%s): %s", g->n_ops, type, err);
    const sl_op_def *def = sl_op_get(id);
    if (g->n_ops == g->cap_ops) {
        size_t cap = g->cap_ops ? g->cap_ops * 2 : 32;
        struct op *ops = sl_reallocarray(g->ops, cap, sizeof *ops);
        if (!ops)
            return fail(g, "out of memory");
        g->ops = ops;
        g->cap_ops = cap;
    }
    op.out0 = SALUS_NO_VALUE;
    g->ops[g->n_ops++] = op;
    salus_value first = n_in ? inputs[0] : SALUS_NO_VALUE;
    for (unsigned o = 0; o < def->n_out; o++) {
        salus_value v = add_value(g, &out[o], VALUE_OUTPUT, g->n_outputs++, 0);
        if (o == 0)
            first = g->ops[g->n_ops - 1].out0 = v;
    }
    return first;
}

int salus_graph_shape(const salus_graph *g, salus_value v, int *dtype, int *ndim, int64_t *dims)
{
    if (v >= g->n_values)
        return SL_EINVAL;
    const sl_shape *s = &g->values[v].shape;
    *dtype = s->dtype;
    *ndim = s->ndim;
    memcpy(dims, s->dims, s->ndim * sizeof *dims);
    return SL_OK;
}

size_t salus_graph_bytes(const salus_graph *g, salus_value v)
{
    return v < g->n_values ? (size_t) sl_shape_bytes(&g->values[v].shape) : 0;
}

/* The wire number of a value: inputs, then params, then op outputs. */
static uint32_t wire_number(const salus_graph *g, salus_value v)
{
    const struct value *val = &g->values[v];
    switch (val->kind) {
    case VALUE_INPUT:
        return val->index;
    case VALUE_PARAM:
        return g->n_inputs + val->index;
    default:
        return g->n_inputs + g->n_params + val->index;
    }
}

int salus_graph_register(salus_session *s, salus_graph *g, uint64_t *planned_peak)
{
    salus_client *c = s->client;
    if (g->error[0] || g->session) {
        snprintf(c->last_error, sizeof c->last_error, "%s",
                 g->error[0] ? g->error : "graph is already registered");
        return SL_EINVAL;
    }
    int rc = SL_ENOMEM;
    Salus__TensorDesc *descs = sl_calloc(g->n_inputs, sizeof *descs);
    Salus__TensorDesc **desc_ptrs = sl_calloc(g->n_inputs, sizeof *desc_ptrs);
    uint64_t *params = sl_calloc(g->n_params, sizeof *params);
    Salus__Op *ops = sl_calloc(g->n_ops, sizeof *ops);
    Salus__Op **op_ptrs = sl_calloc(g->n_ops, sizeof *op_ptrs);
    uint32_t *op_inputs = sl_calloc(g->n_ops * SL_OP_MAX_IN + 1, sizeof *op_inputs);
    if (!descs || !desc_ptrs || !params || !ops || !op_ptrs || !op_inputs)
        goto out_free;
    for (size_t v = 0; v < g->n_values; v++) {
        const struct value *val = &g->values[v];
        if (val->kind == VALUE_INPUT) {
            Salus__TensorDesc *d = &descs[val->index];
            salus__tensor_desc__init(d);
            d->dtype = (Salus__DType) val->shape.dtype;
            d->n_dims = val->shape.ndim;
            d->dims = (int64_t *) val->shape.dims;
            desc_ptrs[val->index] = d;
        } else if (val->kind == VALUE_PARAM) {
            params[val->index] = val->tensor_id;
        }
    }
    for (size_t i = 0; i < g->n_ops; i++) {
        const struct op *op = &g->ops[i];
        Salus__Op *o = &ops[i];
        salus__op__init(o);
        o->type = (char *) sl_op_get(op->id)->name;
        o->n_inputs = op->n_in;
        o->inputs = op_inputs + i * SL_OP_MAX_IN;
        for (unsigned k = 0; k < op->n_in; k++)
            o->inputs[k] = wire_number(g, op->in[k]);
        o->n_iattrs = op->n_iattrs;
        o->iattrs = (int64_t *) op->attrs.i;
        o->n_fattrs = op->n_fattrs;
        o->fattrs = (float *) op->attrs.f;
        op_ptrs[i] = o;
    }
    Salus__Graph graph = SALUS__GRAPH__INIT;
    graph.n_inputs = g->n_inputs;
    graph.inputs = desc_ptrs;
    graph.n_params = g->n_params;
    graph.params = params;
    graph.n_ops = g->n_ops;
    graph.ops = op_ptrs;
    Salus__RegisterGraph reg = SALUS__REGISTER_GRAPH__INIT;
    reg.graph = &graph;
    Salus__Request req = SALUS__REQUEST__INIT;
    req.body_case = SALUS__REQUEST__BODY_REGISTER_GRAPH;
    req.register_graph = &reg;
    Salus__Reply *rep;
    rc = sl_client_session_call(s, &req, &rep);
    if (rc)
        goto out_free;
    if (rep->body_case != SALUS__REPLY__BODY_REGISTER_GRAPH) {
        rc = SL_EPROTO;
    } else {
        g->session = s;
        g->graph_id = rep->register_graph->graph_id;
        g->planned_peak = rep->register_graph->planned_peak;
        g->naive_bytes = rep->register_graph->naive_bytes;
        if (planned_peak)
            *planned_peak = rep->register_graph->planned_peak;
    }
    salus__reply__free_unpacked(rep, NULL);
out_free:
    sl_free(descs);
    sl_free(desc_ptrs);
    sl_free(params);
    sl_free(ops);
    sl_free(op_ptrs);
    sl_free(op_inputs);
    return rc;
}

int salus_graph_memory(const salus_graph *g, uint64_t *planned_peak, uint64_t *naive_bytes)
{
    if (!g->session)
        return SL_EINVAL;
    *planned_peak = g->planned_peak;
    *naive_bytes = g->naive_bytes;
    return SL_OK;
}

uint64_t salus_graph_id(const salus_graph *g)
{
    return g->session ? g->graph_id : 0;
}

/* Where a run's bytes go in the session's shared memory: feeds, then
 * fetches, each 64-byte aligned, into slices (inputs first). Returns the
 * bytes needed; no overflow, since the server bounds a graph's values. */
static size_t shm_layout(const salus_graph *g, unsigned n_fetch, const salus_value *fetch,
                         Salus__ShmSlice *slices)
{
    size_t off = 0;
    for (size_t v = 0; v < g->n_values; v++) {
        const struct value *val = &g->values[v];
        if (val->kind != VALUE_INPUT)
            continue;
        Salus__ShmSlice *sl = &slices[val->index];
        salus__shm_slice__init(sl);
        sl->offset = off;
        sl->length = sl_shape_bytes(&val->shape);
        off += (sl->length + 63) & ~(size_t) 63;
    }
    for (unsigned j = 0; j < n_fetch; j++) {
        Salus__ShmSlice *sl = &slices[g->n_inputs + j];
        salus__shm_slice__init(sl);
        sl->offset = off;
        sl->length = salus_graph_bytes(g, fetch[j]);
        off += (sl->length + 63) & ~(size_t) 63;
    }
    return off;
}

int salus_run(salus_session *s, const salus_graph *g, const void *const *feeds, unsigned n_fetch,
              const salus_value *fetch, void *const *out)
{
    return salus_run_ex(s, g, feeds, n_fetch, fetch, out, 0, NULL);
}

int salus_run_ex(salus_session *s, const salus_graph *g, const void *const *feeds, unsigned n_fetch,
                 const salus_value *fetch, void *const *out, unsigned n_writes,
                 const salus_run_write *writes)
{
    salus_client *c = s->client;
    if (g->session != s) {
        snprintf(c->last_error, sizeof c->last_error, "graph is not registered with session");
        return SL_EINVAL;
    }
    enum { MAX_WRITES = 16 };
    if (n_writes > MAX_WRITES || (n_writes && !writes)) {
        snprintf(c->last_error, sizeof c->last_error, "%u tensor writes: at most %d", n_writes,
                 MAX_WRITES);
        return SL_EINVAL;
    }
    Salus__TensorWrite tw[MAX_WRITES], *tw_ptrs[MAX_WRITES];
    for (unsigned i = 0; i < n_writes; i++) {
        salus__tensor_write__init(&tw[i]);
        tw[i].tensor_id = writes[i].tensor;
        tw[i].data.data = (uint8_t *) writes[i].data;
        tw[i].data.len = writes[i].bytes;
        tw_ptrs[i] = &tw[i];
    }
    /* the request's arrays, in one allocation (a small run makes none) */
    size_t n_slices = g->n_inputs + n_fetch;
    size_t each = sizeof(Salus__ShmSlice) + sizeof(ProtobufCBinaryData) +
                  sizeof(Salus__ShmSlice *) + sizeof(uint32_t);
    _Alignas(16) unsigned char small[8 * each];
    unsigned char *mem = n_slices <= 8 ? small : sl_calloc(n_slices, each);
    int rc = SL_ENOMEM;
    if (!mem)
        return rc;
    Salus__ShmSlice *slices = (Salus__ShmSlice *) mem;
    ProtobufCBinaryData *feed_data = (ProtobufCBinaryData *) (slices + n_slices);
    Salus__ShmSlice **slice_ptrs = (Salus__ShmSlice **) (feed_data + g->n_inputs);
    uint32_t *fetch_numbers = (uint32_t *) (slice_ptrs + n_slices);
    for (unsigned j = 0; j < n_fetch; j++) {
        rc = SL_EINVAL;
        if (fetch[j] >= g->n_values)
            goto out_free;
        fetch_numbers[j] = wire_number(g, fetch[j]);
    }
    Salus__Run run = SALUS__RUN__INIT;
    run.graph_id = g->graph_id;
    run.n_fetches = n_fetch;
    run.fetches = fetch_numbers;
    run.n_writes = n_writes;
    run.writes = tw_ptrs;

    pthread_mutex_lock(&s->shm_lock);
    uint8_t *shm = sl_client_shm_get(s, shm_layout(g, n_fetch, fetch, slices));
    for (size_t k = 0; k < n_slices; k++)
        slice_ptrs[k] = &slices[k];
    for (size_t v = 0; v < g->n_values; v++) {
        const struct value *val = &g->values[v];
        if (val->kind != VALUE_INPUT)
            continue;
        const Salus__ShmSlice *sl = &slices[val->index];
        if (shm) {
            memcpy(shm + sl->offset, feeds[val->index], sl->length);
        } else {
            feed_data[val->index].data = (uint8_t *) feeds[val->index];
            feed_data[val->index].len = sl->length;
        }
    }
    if (shm) {
        run.n_shm_feeds = g->n_inputs;
        run.shm_feeds = slice_ptrs;
        run.n_shm_fetches = n_fetch;
        run.shm_fetches = slice_ptrs + g->n_inputs;
    } else {
        run.n_feeds = g->n_inputs;
        run.feeds = feed_data;
    }
    Salus__Request req = SALUS__REQUEST__INIT;
    req.body_case = SALUS__REQUEST__BODY_RUN;
    req.run = &run;
    Salus__Reply *rep;
    if ((rc = sl_client_session_call(s, &req, &rep)) != 0)
        goto out_unlock;
    if (rep->body_case != SALUS__REPLY__BODY_RUN || rep->run->n_outputs != n_fetch) {
        rc = SL_EPROTO;
    } else {
        for (unsigned j = 0; j < n_fetch; j++) {
            const ProtobufCBinaryData *d = &rep->run->outputs[j]->data;
            const Salus__ShmSlice *sl = &slices[g->n_inputs + j];
            if (d->len != (shm ? 0 : sl->length)) {
                rc = SL_EPROTO;
                break;
            }
            memcpy(out[j], shm ? shm + sl->offset : d->data, sl->length);
        }
    }
    salus__reply__free_unpacked(rep, NULL);
out_unlock:
    pthread_mutex_unlock(&s->shm_lock);
out_free:
    if (mem != small)
        sl_free(mem);
    return rc;
}

/* ---- for autodiff.c: reading a builder's ops and copying it ---- */

size_t sl_graph_n_ops(const salus_graph *g)
{
    return g->n_ops;
}

unsigned salus_graph_n_inputs(const salus_graph *g)
{
    return g->n_inputs;
}

salus_value salus_graph_input_value(const salus_graph *g, unsigned i)
{
    for (size_t v = 0; i < g->n_inputs && v < g->n_values; v++)
        if (g->values[v].kind == VALUE_INPUT && g->values[v].index == i)
            return (salus_value) v;
    return SALUS_NO_VALUE;
}

size_t sl_graph_n_values(const salus_graph *g)
{
    return g->n_values;
}

void sl_graph_op_info(const salus_graph *g, size_t i, sl_graph_op *out)
{
    const struct op *op = &g->ops[i];
    out->id = op->id;
    out->n_in = op->n_in;
    out->n_out = sl_op_get(op->id)->n_out;
    memcpy(out->in, op->in, sizeof out->in);
    out->out0 = op->out0;
    out->attrs = &op->attrs;
    out->n_iattrs = op->n_iattrs;
    out->n_fattrs = op->n_fattrs;
}

int sl_graph_value_info(const salus_graph *g, salus_value v, sl_graph_value *out)
{
    if (v >= g->n_values)
        return SL_EINVAL;
    const struct value *val = &g->values[v];
    out->shape = val->shape;
    out->kind = val->kind == VALUE_INPUT   ? SL_GRAPH_INPUT
                : val->kind == VALUE_PARAM ? SL_GRAPH_PARAM
                                           : SL_GRAPH_OUTPUT;
    out->index = val->index;
    out->tensor_id = val->tensor_id;
    return SL_OK;
}

salus_graph *sl_graph_clone(const salus_graph *g)
{
    salus_graph *c = salus_graph_new();
    if (!c)
        return NULL;
    c->values = g->n_values ? sl_reallocarray(NULL, g->n_values, sizeof *c->values) : NULL;
    c->ops = g->n_ops ? sl_reallocarray(NULL, g->n_ops, sizeof *c->ops) : NULL;
    if ((g->n_values && !c->values) || (g->n_ops && !c->ops)) {
        salus_graph_free(c);
        return NULL;
    }
    if (g->n_values)
        memcpy(c->values, g->values, g->n_values * sizeof *c->values);
    if (g->n_ops)
        memcpy(c->ops, g->ops, g->n_ops * sizeof *c->ops);
    c->n_values = c->cap_values = g->n_values;
    c->n_ops = c->cap_ops = g->n_ops;
    c->n_inputs = g->n_inputs;
    c->n_params = g->n_params;
    c->n_outputs = g->n_outputs;
    memcpy(c->error, g->error, sizeof c->error);
    return c;
}

void sl_graph_set_error(salus_graph *g, const char *fmt, ...)
{
    if (g->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
}
