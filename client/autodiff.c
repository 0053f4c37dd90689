/* Reverse-mode automatic differentiation over a graph builder: the ops
 * between the loss and the values asked for are walked from the last to
 * the first, each op's gradient rule (ops_grad.h) emits its backward ops,
 * and gradients reaching one value along several paths are summed (add).
 *
 * Only what the loss needs is emitted: a value gets a gradient only if it
 * depends on a value asked for (an input that is not asked for gets none,
 * so a first layer computes no gradient of its input) and the loss depends
 * on it. A value's gradient is complete once every op reading it has been
 * walked; the hooks are told at once, so an optimiser's update can follow
 * while the rest of the backward pass is still to come and the gradient
 * dies early (a lower planned peak). */
#include "client_internal.h"

#include "ops_grad.h"

#include <stdio.h>
#include <string.h>

typedef struct ad {
    salus_graph *g;
    size_t n_ops, n_values; /* the forward graph's */
    uint32_t *readers;      /* per value: reads by forward ops */
    uint32_t *last_reader;  /* per value: the last forward op reading it */
    uint32_t *pending;      /* per value: reads by active ops not walked yet */
    uint8_t *requires;      /* per value: depends on a wrt value */
    uint8_t *needed;        /* per value: the loss depends on it */
    salus_value *grad;      /* per value: the gradient summed so far */
    int32_t *wrt_index;     /* per value: its index in wrt, or -1 */
    uint8_t *accumulated;   /* per wrt: its gradient went into an accumulator */
} ad;

static uint32_t emit(void *ctx, unsigned op, unsigned n_in, const uint32_t *in, unsigned n_i,
                     const int64_t *ia, unsigned n_f, const float *fa)
{
    ad *a = ctx;
    return salus_graph_op(a->g, sl_op_get(op)->name, n_in, in, n_i, ia, n_f, fa);
}

static int shape(void *ctx, uint32_t v, sl_shape *out)
{
    sl_graph_value info;
    int rc = sl_graph_value_info(((ad *) ctx)->g, v, &info);
    if (rc == SL_OK)
        *out = info.shape;
    return rc;
}

static bool sole_reader(void *ctx, uint32_t v, unsigned *op, uint32_t *first_out)
{
    ad *a = ctx;
    if (v >= a->n_values || a->readers[v] != 1)
        return false;
    sl_graph_op o;
    sl_graph_op_info(a->g, a->last_reader[v], &o);
    *op = o.id;
    *first_out = o.out0;
    return o.out0 != SALUS_NO_VALUE;
}

/* Whether forward op o passes a gradient to input slot i. */
static bool flows(const ad *a, const sl_graph_op *o, unsigned i)
{
    salus_value v = o->in[i];
    return sl_op_grad_input(o->id, i) && a->requires[v] && a->needed[v];
}

/* Whether walking forward op o emits anything: an output the loss needs
 * depends on a wrt value. */
static bool active(const ad *a, const sl_graph_op *o)
{
    for (unsigned k = 0; k < o->n_out; k++)
        if (a->needed[o->out0 + k] && a->requires[o->out0 + k])
            return true;
    return false;
}

static int add_grad(ad *a, salus_value v, salus_value d)
{
    if (d == SALUS_NO_VALUE)
        return SL_OK;
    if (a->grad[v] == SALUS_NO_VALUE) {
        a->grad[v] = d;
        return SL_OK;
    }
    a->grad[v] = salus_graph_op(a->g, "add", 2, (salus_value[]){a->grad[v], d}, 0, NULL, 0, NULL);
    return a->grad[v] == SALUS_NO_VALUE ? SL_EINVAL : SL_OK;
}

static int walk(ad *a, salus_value loss, unsigned n, const salus_value *wrt,
                const sl_autodiff_hooks *h, char *err, size_t len)
{
    sl_graph_op o;
    for (unsigned i = 0; i < n; i++) {
        if (wrt[i] >= a->n_values) {
            snprintf(err, len, "wrt[%u] is not a value of the graph", i);
            return SL_EINVAL;
        }
        if (a->wrt_index[wrt[i]] >= 0) {
            snprintf(err, len, "wrt[%u] repeats wrt[%d]", i, a->wrt_index[wrt[i]]);
            return SL_EINVAL;
        }
        a->wrt_index[wrt[i]] = (int32_t) i;
        a->requires[wrt[i]] = 1;
    }
    /* forward: what depends on a wrt value */
    for (size_t j = 0; j < a->n_ops; j++) {
        sl_graph_op_info(a->g, j, &o);
        bool req = false;
        for (unsigned i = 0; i < o.n_in; i++) {
            a->readers[o.in[i]]++;
            a->last_reader[o.in[i]] = (uint32_t) j;
            /* an op without a rule passes the dependence on, so that the
             * walk reaches it and refuses it rather than silently
             * leaving the values before it without a gradient */
            if (a->requires[o.in[i]] && (!sl_op_grad(o.id) || sl_op_grad_input(o.id, i)))
                req = true;
        }
        for (unsigned k = 0; k < o.n_out && req; k++)
        a->requires[o.out0 + k] = 1;
    }
    /* backward: what the loss depends on */
    a->needed[loss] = 1;
    for (size_t j = a->n_ops; j-- > 0;) {
        sl_graph_op_info(a->g, j, &o);
        if (!active(a, &o))
            continue;
        for (unsigned i = 0; i < o.n_in; i++)
            if (sl_op_grad_input(o.id, i))
                a->needed[o.in[i]] = 1;
    }
    for (size_t j = 0; j < a->n_ops; j++) {
        sl_graph_op_info(a->g, j, &o);
        if (active(a, &o))
            for (unsigned i = 0; i < o.n_in; i++)
                if (flows(a, &o, i))
                    a->pending[o.in[i]]++;
    }
    a->grad[loss] = SL_GV_ONE;
    const sl_grad_emitter e = {.ctx = a, .emit = emit, .shape = shape, .sole_reader = sole_reader};
    for (size_t j = a->n_ops; j-- > 0;) {
        sl_graph_op_info(a->g, j, &o);
        if (!active(a, &o))
            continue;
        sl_op_attrs attrs = *o.attrs; /* o.attrs moves when the builder grows */
        sl_grad_args ga = {.op = o.id,
                           .attrs = &attrs,
                           .n_iattrs = o.n_iattrs,
                           .n_fattrs = o.n_fattrs,
                           .n_in = o.n_in,
                           .n_out = o.n_out};
        bool any = false;
        for (unsigned k = 0; k < o.n_out; k++) {
            ga.out[k] = o.out0 + k;
            ga.dout[k] = a->grad[o.out0 + k];
            any |= ga.dout[k] != SALUS_NO_VALUE;
        }
        for (unsigned i = 0; i < o.n_in; i++) {
            ga.in[i] = o.in[i];
            ga.want[i] = flows(a, &o, i);
            ga.din[i] = ga.acc[i] = SL_GV_NONE;
            int32_t w = a->wrt_index[o.in[i]];
            if (ga.want[i] && w >= 0 && a->readers[o.in[i]] == 1 && h && h->accumulate &&
                !h->accumulate(h->ctx, (unsigned) w, &ga.acc[i], &ga.acc_beta[i]))
                ga.acc[i] = SL_GV_NONE;
        }
        sl_op_grad_fn rule = sl_op_grad(o.id);
        if (any && !rule) {
            snprintf(err, len,
                     "op %zu (%s) lies between the loss and a value differentiated, and has no "
                     "gradient",
                     j, sl_op_get(o.id)->name);
            return SL_EUNSUPPORTED;
        }
        if (any) {
            int rc = rule(&e, &ga, err, len);
            if (rc == SL_EINVAL && salus_graph_error(a->g))
                snprintf(err, len, "gradient of op %zu (%s): %s", j, sl_op_get(o.id)->name,
                         salus_graph_error(a->g));
            if (rc)
                return rc;
        }
        bool seeded = false;
        for (unsigned k = 0; k < o.n_out; k++)
            seeded |= ga.dout[k] == SL_GV_ONE;
        for (unsigned i = 0; i < o.n_in && seeded && h && h->scale_seed; i++)
            if (ga.want[i] && ga.din[i] != SL_GV_NONE)
                ga.din[i] =
                    salus_graph_op(a->g, "mul_scalar", 2, (salus_value[]){ga.din[i], h->seed_scale},
                                   0, NULL, 0, NULL);
        for (unsigned i = 0; i < o.n_in; i++) {
            if (!ga.want[i])
                continue;
            salus_value v = o.in[i];
            int rc = add_grad(a, v, ga.din[i]);
            if (rc) {
                snprintf(err, len, "gradient of op %zu (%s): %s", j, sl_op_get(o.id)->name,
                         salus_graph_error(a->g) ? salus_graph_error(a->g) : "failed");
                return rc;
            }
            int32_t w = a->wrt_index[v];
            if (w >= 0 && ga.accumulated[i])
                a->accumulated[w] = 1;
            if (--a->pending[v] == 0 && w >= 0 && h && h->ready &&
                (rc = h->ready(h->ctx, (unsigned) w, a->grad[v], a->accumulated[w])) != SL_OK)
                return rc;
        }
    }
    /* wrt values the loss does not depend on */
    for (unsigned i = 0; i < n; i++)
        if (!a->needed[wrt[i]] && h && h->ready) {
            int rc = h->ready(h->ctx, i, SALUS_NO_VALUE, false);
            if (rc)
                return rc;
        }
    return salus_graph_error(a->g) ? SL_EINVAL : SL_OK;
}

int sl_autodiff(salus_graph *g, salus_value loss, unsigned n, const salus_value *wrt,
                const sl_autodiff_hooks *hooks, char *err, size_t errlen)
{
    err[0] = 0;
    if (salus_graph_error(g)) {
        snprintf(err, errlen, "%s", salus_graph_error(g));
        return SL_EINVAL;
    }
    sl_graph_value lv;
    if (sl_graph_value_info(g, loss, &lv) != SL_OK || lv.shape.dtype != SL_F32 ||
        sl_shape_elems(&lv.shape) != 1) {
        snprintf(err, errlen, "the loss must be an f32 scalar value of the graph");
        return SL_EINVAL;
    }
    ad a = {.g = g, .n_ops = sl_graph_n_ops(g), .n_values = sl_graph_n_values(g)};
    size_t nv = a.n_values;
    a.readers = sl_calloc(nv, sizeof *a.readers);
    a.last_reader = sl_calloc(nv, sizeof *a.last_reader);
    a.pending = sl_calloc(nv, sizeof *a.pending);
    a.requires = sl_calloc(nv, 1);
    a.needed = sl_calloc(nv, 1);
    a.grad = sl_calloc(nv, sizeof *a.grad);
    a.wrt_index = sl_calloc(nv, sizeof *a.wrt_index);
    a.accumulated = sl_calloc(n ? n : 1, 1);
    int rc = SL_ENOMEM;
    if (!a.readers || !a.last_reader || !a.pending || !a.requires || !a.needed || !a.grad ||
        !a.wrt_index || !a.accumulated) {
        snprintf(err, errlen, "out of memory");
    } else {
        for (size_t v = 0; v < nv; v++) {
            a.grad[v] = SALUS_NO_VALUE;
            a.wrt_index[v] = -1;
        }
        rc = walk(&a, loss, n, wrt, hooks, err, errlen);
        if (rc && !err[0])
            snprintf(err, errlen, "%s",
                     salus_graph_error(g) ? salus_graph_error(g) : sl_strerror(rc));
    }
    sl_free(a.readers);
    sl_free(a.last_reader);
    sl_free(a.pending);
    sl_free(a.requires);
    sl_free(a.needed);
    sl_free(a.grad);
    sl_free(a.wrt_index);
    sl_free(a.accumulated);
    return rc;
}
