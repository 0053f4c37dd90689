/* Graph registration: every op validated by the registry, every value's
 * shape inferred, ephemeral values planned into one block (graph.h). */
#include "graph.h"

#include "device.h"
#include "replay.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <stdio.h>
#include <string.h>

/* The planner is O(values^2) and runs under the server lock: these bound how long
 * one registration can hold up every other session (under a second on a
 * 2-core machine; 2^16 ops took 8 s, 2^20 would take half an hour). Real
 * training graphs have a few thousand ops. */
#define MAX_OPS (1u << 13)
#define MAX_VALUES (1u << 14)

void sl_graph_free(sl_graph *g)
{
    if (!g)
        return;
    for (uint32_t v = 0; v < g->n_values; v++) {
        if (g->values[v].kind == SL_VALUE_PARAM && g->values[v].tensor && g->values[v].root == v)
            g->values[v].tensor->graph_refs--;
    }
    sl_free(g->values);
    sl_free(g->ops);
    sl_free(g->op_ewma);
    sl_replay_free(g->replay);
    sl_free(g);
}

/* The value whose memory v is, following views and in-place outputs (roots
 * always point to earlier values, so this ends). */
static uint32_t root_of(const sl_graph *g, uint32_t v)
{
    while (g->values[v].root != v)
        v = g->values[v].root;
    return v;
}

/* The last step at which each memory (indexed by its root) is read or
 * written: the latest last_step of any value that shares it. */
static void memory_last_steps(const sl_graph *g, uint32_t *mem_last)
{
    for (uint32_t v = 0; v < g->n_values; v++)
        mem_last[v] = 0;
    for (uint32_t v = 0; v < g->n_values; v++) {
        uint32_t r = root_of(g, v);
        if (g->values[v].last_step > mem_last[r])
            mem_last[r] = g->values[v].last_step;
    }
}

/* In-place execution: an element-wise op (ops.h, def->inplace) writes its
 * output over an input whose ephemeral memory dies at that op and has the
 * output's size, so the two never need separate bytes. Decided in op order
 * after every op is known (a later reader keeps the memory alive); the
 * output's memory inherits the input's, and its own lifetime extends it.
 * Params are never written over: they outlive the iteration. Fetches stay
 * correct because the executor copies out a value that the op overwrites
 * before launching that op (sl_graph_op.inplace_in). */
static int alias_inplace(sl_graph *g)
{
    uint32_t *mem_last = sl_calloc(g->n_values ? g->n_values : 1, sizeof *mem_last);
    if (!mem_last)
        return SL_ENOMEM;
    memory_last_steps(g, mem_last);
    for (uint32_t k = 0; k < g->n_ops; k++) {
        sl_graph_op *op = &g->ops[k];
        const sl_op_def *def = sl_op_get(op->op);
        if (!def->inplace || def->mutates || op->n_out != 1)
            continue;
        uint32_t y = op->out[0];
        uint64_t bytes = sl_shape_bytes(&g->values[y].shape);
        for (unsigned i = 0; i < op->n_in; i++) {
            uint32_t r = root_of(g, op->in[i]);
            const sl_value *mem = &g->values[r];
            if (!(def->inplace & (1u << i)) || mem->kind == SL_VALUE_PARAM ||
                mem_last[r] != k + 1 || sl_shape_bytes(&mem->shape) != bytes)
                continue;
            g->values[y].root = r;
            mem_last[r] = mem_last[y];
            op->inplace_in = (int8_t) i;
            break;
        }
    }
    /* views of an in-place output point at it: make every root final */
    for (uint32_t v = 0; v < g->n_values; v++)
        g->values[v].root = g->values[g->values[v].root].root;
    sl_free(mem_last);
    return SL_OK;
}

/* Plans the ephemeral values (inputs and op outputs). A memory lives from
 * the step that writes its root to the last step of any value sharing it. */
static int plan(sl_graph *g)
{
    sl_plan_buf *bufs = sl_calloc(g->n_values ? g->n_values : 1, sizeof *bufs);
    uint64_t *offsets = sl_calloc(g->n_values ? g->n_values : 1, sizeof *offsets);
    uint32_t *mem_last = sl_calloc(g->n_values ? g->n_values : 1, sizeof *mem_last);
    int rc = SL_ENOMEM;
    if (!bufs || !offsets || !mem_last)
        goto out_free;
    memory_last_steps(g, mem_last);
    /* an input is written by the feed copies at step 0; op k runs at step
     * k + 1; a value lives from its writing step to its last use */
    for (uint32_t v = 0; v < g->n_values; v++) {
        const sl_value *val = &g->values[v];
        if (val->kind == SL_VALUE_PARAM || val->root != v) {
            bufs[v].first = bufs[v].last = UINT32_MAX; /* persistent, or shared: no memory */
            continue;
        }
        bufs[v].size = sl_shape_bytes(&val->shape);
        bufs[v].last = mem_last[v];
    }
    for (uint32_t k = 0; k < g->n_ops; k++) {
        uint32_t step = k + 1;
        for (unsigned o = 0; o < g->ops[k].n_out; o++)
            if (bufs[g->ops[k].out[o]].last != UINT32_MAX)
                bufs[g->ops[k].out[o]].first = step;
    }
    if ((rc = sl_mem_plan(bufs, g->n_values, 0, offsets, &g->plan)) != SL_OK)
        goto out_free;
    /* the naive figure allocates every tensor separately: an in-place
     * output is a tensor of its own there (a view is not) */
    for (uint32_t k = 0; k < g->n_ops; k++) {
        uint64_t bytes = sl_shape_bytes(&g->values[g->ops[k].out[0]].shape);
        if (g->ops[k].inplace_in >= 0 &&
            !sl_add_ok(g->plan.naive, sl_align_up(bytes, 256), &g->plan.naive)) {
            rc = SL_EINVAL;
            goto out_free;
        }
    }
    for (uint32_t v = 0; v < g->n_values; v++)
        g->values[v].addr = offsets[g->values[v].root];
out_free:
    sl_free(bufs);
    sl_free(offsets);
    sl_free(mem_last);
    return rc;
}

/* In-place execution unless it would raise the planned peak: the planner is
 * greedy, and a memory whose lifetime aliasing lengthened can block a gap
 * that the separate tensors would have filled (a few hundred bytes on small
 * graphs). Plans both ways and keeps aliasing unless its peak is larger, so
 * that in-place execution never makes a plan grow. */
static int plan_inplace(sl_graph *g)
{
    uint32_t *roots = sl_calloc(g->n_values ? g->n_values : 1, sizeof *roots);
    if (!roots)
        return SL_ENOMEM;
    for (uint32_t v = 0; v < g->n_values; v++)
        roots[v] = g->values[v].root;
    int rc = plan(g);
    if (rc != SL_OK)
        goto out_free_roots;
    uint64_t separate_peak = g->plan.peak;
    if ((rc = alias_inplace(g)) != SL_OK || (rc = plan(g)) != SL_OK)
        goto out_free_roots;
    if (g->plan.peak > separate_peak) {
        for (uint32_t v = 0; v < g->n_values; v++)
            g->values[v].root = roots[v];
        for (uint32_t k = 0; k < g->n_ops; k++)
            g->ops[k].inplace_in = -1;
        rc = plan(g);
    }
out_free_roots:
    sl_free(roots);
    return rc;
}

#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
        rc = (code);                                                                               \
        goto out_free;                                                                             \
    } while (0)

int sl_shape_from_desc(const Salus__TensorDesc *d, sl_shape *out, char *why, size_t whylen)
{
    if (!d) {
        snprintf(why, whylen, "no tensor description");
        return SL_EINVAL;
    }
    if ((unsigned) d->dtype >= SL_DTYPE_COUNT) {
        snprintf(why, whylen, "unknown dtype %d (F32 = 0, I32 = 1, BF16 = 2, F16 = 3)",
                 (int) d->dtype);
        return SL_EINVAL;
    }
    if (d->n_dims > SL_MAX_DIMS) {
        snprintf(why, whylen, "%zu dims, at most %d allowed", d->n_dims, SL_MAX_DIMS);
        return SL_EINVAL;
    }
    sl_shape s = {.dtype = (uint8_t) d->dtype, .ndim = (uint8_t) d->n_dims};
    for (size_t i = 0; i < d->n_dims; i++) {
        if (d->dims[i] < 1) {
            snprintf(why, whylen, "dim %zu is %lld; every dim must be at least 1", i,
                     (long long) d->dims[i]);
            return SL_EINVAL;
        }
        s.dims[i] = d->dims[i];
    }
    if (!sl_shape_valid(&s)) {
        snprintf(why, whylen, "more than 2^40 elements");
        return SL_EINVAL;
    }
    *out = s;
    return SL_OK;
}

int sl_graph_build(sl_map *tensors, const Salus__Graph *m, bool inplace, sl_graph **out, char *err,
                   size_t errlen)
{
    int rc = SL_ENOMEM;
    uint64_t n_values = (uint64_t) m->n_inputs + m->n_params;
    if (m->n_ops > MAX_OPS || n_values > MAX_VALUES) {
        snprintf(err, errlen, "graph too large: %zu ops, %llu inputs and params (limits %u, %u)",
                 m->n_ops, (unsigned long long) n_values, MAX_OPS, MAX_VALUES);
        return SL_EINVAL;
    }
    /* resolve op types first: their output counts size the value table */
    for (size_t k = 0; k < m->n_ops; k++) {
        unsigned id;
        if (!m->ops[k]->type || sl_op_lookup(m->ops[k]->type, &id) != SL_OK) {
            int n = snprintf(err, errlen, "op %zu: unknown op type '%.64s'; known: ", k,
                             m->ops[k]->type ? m->ops[k]->type : "");
            if (n > 0 && (size_t) n < errlen)
                sl_op_names(err + n, errlen - (size_t) n);
            return SL_EINVAL;
        }
        n_values += sl_op_get(id)->n_out;
    }
    if (n_values > MAX_VALUES) {
        snprintf(err, errlen, "graph too large: %llu values (limit %u)",
                 (unsigned long long) n_values, MAX_VALUES);
        return SL_EINVAL;
    }
    sl_graph *g = sl_calloc(1, sizeof *g);
    if (!g)
        return SL_ENOMEM;
    g->values = sl_calloc(n_values, sizeof *g->values);
    g->ops = sl_calloc(m->n_ops, sizeof *g->ops);
    if (!g->values || (m->n_ops && !g->ops))
        goto out_free;

    g->amp_found = UINT32_MAX;
    g->replay = sl_replay_new(); /* without it the graph runs op by op */
    uint32_t nv = 0;
    for (size_t i = 0; i < m->n_inputs; i++, nv++) {
        char why[96];
        if (sl_shape_from_desc(m->inputs[i], &g->values[nv].shape, why, sizeof why) != SL_OK)
            FAIL(SL_EINVAL, "graph input %zu: %s", i, why);
        g->values[nv].kind = SL_VALUE_INPUT;
        g->values[nv].root = nv;
    }
    g->n_inputs = (uint32_t) m->n_inputs;
    for (size_t i = 0; i < m->n_params; i++, nv++) {
        sl_tensor *t = sl_map_get(tensors, m->params[i]);
        if (!t)
            FAIL(SL_ENOTFOUND, "param %zu: the session has no tensor %llu", i,
                 (unsigned long long) m->params[i]);
        g->values[nv] =
            (sl_value){.shape = t->shape, .kind = SL_VALUE_PARAM, .tensor = t, .root = nv};
        t->graph_refs++;
        g->n_values = nv + 1; /* a later failure must drop this reference */
    }
    g->n_params = (uint32_t) m->n_params;
    g->n_values = nv;

    for (uint32_t k = 0; k < m->n_ops; k++) {
        const Salus__Op *mo = m->ops[k];
        sl_graph_op *op = &g->ops[k];
        unsigned id;
        (void) sl_op_lookup(mo->type, &id);
        const sl_op_def *def = sl_op_get(id);
        if (mo->n_inputs > SL_OP_MAX_IN || mo->n_iattrs > SL_OP_MAX_IATTRS ||
            mo->n_fattrs > SL_OP_MAX_FATTRS)
            FAIL(SL_EINVAL, "op %u (%s): too many inputs or attributes", k, def->name);
        char why[160];
        if (sl_op_check_attrs(id, mo->n_iattrs, mo->n_fattrs, why, sizeof why))
            FAIL(SL_EINVAL, "op %u (%s): %s", k, def->name, why);
        sl_shape in[SL_OP_MAX_IN], outs[SL_OP_MAX_OUT];
        for (size_t i = 0; i < mo->n_inputs; i++) {
            if (mo->inputs[i] >= nv)
                FAIL(SL_EINVAL, "op %u (%s): input %zu refers to value %u, not defined before it",
                     k, def->name, i, mo->inputs[i]);
            op->in[i] = mo->inputs[i];
            in[i] = g->values[op->in[i]].shape;
        }
        for (size_t i = 0; i < mo->n_iattrs; i++)
            op->attrs.i[i] = mo->iattrs[i];
        for (size_t i = 0; i < mo->n_fattrs; i++)
            op->attrs.f[i] = mo->fattrs[i];
        if (sl_op_infer(id, &op->attrs, in, (unsigned) mo->n_inputs, outs, why, sizeof why))
            FAIL(SL_EINVAL, "op %u (%s): %s", k, def->name, why);
        op->op = (uint16_t) id;
        op->inplace_in = -1;
        if (id == SL_OP_AMP_SCALE_UPDATE)
            g->amp_found = op->in[3];
        op->n_in = (uint8_t) mo->n_inputs;
        op->n_out = def->n_out;
        for (unsigned i = 0; i < op->n_in; i++) {
            /* a view keeps the memory it views alive */
            g->values[op->in[i]].last_step = k + 1;
            g->values[g->values[op->in[i]].root].last_step = k + 1;
        }
        for (unsigned o = 0; o < def->n_out; o++, nv++) {
            op->out[o] = nv;
            g->values[nv] = (sl_value){
                .shape = outs[o], .kind = SL_VALUE_OUTPUT, .last_step = k + 1, .root = nv};
            if (id == SL_OP_RESHAPE) {
                const sl_value *src = &g->values[g->values[op->in[0]].root];
                g->values[nv].kind = src->kind;
                g->values[nv].tensor = src->tensor;
                g->values[nv].root = g->values[op->in[0]].root;
            }
        }
        sl_op_cost cost = {0};
        def->cost(&op->attrs, in, outs, &cost);
        g->flops += cost.flops;
        g->n_values = nv;
    }
    g->n_ops = (uint32_t) m->n_ops;
    if (g->n_ops && !(g->op_ewma = sl_calloc(g->n_ops, sizeof *g->op_ewma)))
        goto out_free;
    sl_gaps_lp_init(&g->lp, g->op_ewma, g->n_ops);
    /* what stays allocated while it is registered, its id table slot included */
    g->host_bytes = sizeof *g + n_values * sizeof *g->values +
                    (uint64_t) g->n_ops * (sizeof *g->ops + sizeof *g->op_ewma) +
                    2 * (sizeof(uint64_t) + sizeof(void *));
    if ((rc = inplace ? plan_inplace(g) : plan(g)) != SL_OK)
        FAIL(rc, "cannot plan the graph's memory: %s", sl_strerror(rc));
    *out = g;
    return SL_OK;

out_free:
    if (rc == SL_ENOMEM)
        snprintf(err, errlen, "out of host memory");
    sl_graph_free(g);
    return rc;
}

int sl_graph_check_device(const sl_graph *g, struct sl_device *dev, char *err, size_t errlen)
{
    for (uint32_t k = 0; k < g->n_ops; k++) {
        const sl_graph_op *op = &g->ops[k];
        unsigned runs = sl_dev_op_dtypes(dev, op->op), need = 0;
        for (unsigned i = 0; i < op->n_in; i++) {
            unsigned dt = g->values[op->in[i]].shape.dtype;
            if (sl_dtype_is_float(dt))
                need |= SL_DTS(dt);
        }
        if (op->op == SL_OP_CAST && op->n_out)
            need |= SL_DTS(g->values[op->out[0]].shape.dtype);
        if (runs && (need & runs) == need)
            continue;
        if (!runs) {
            snprintf(err, errlen, "op %u (%s): the %s device has no kernel for it", k,
                     sl_op_get(op->op)->name, dev->ops->name);
            return SL_EUNSUPPORTED;
        }
        char has[32];
        unsigned missing = need & ~runs, dt = 0;
        while (!(missing & SL_DTS(dt)))
            dt++;
        snprintf(err, errlen, "op %u (%s): the %s device does not run it in %s (it runs it in %s)",
                 k, sl_op_get(op->op)->name, dev->ops->name, sl_dtype_name(dt),
                 sl_dtypes_str(runs, has, sizeof has));
        return SL_EUNSUPPORTED;
    }
    return SL_OK;
}
