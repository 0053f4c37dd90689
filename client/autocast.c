/* Mixed precision by rewriting a forward graph, with PyTorch autocast's
 * rules (train_internal.h). The rewrite copies the graph op by op and puts
 * casts in front of the ops' inputs; the ops themselves, their attributes
 * and the graph's inputs and parameters are unchanged, so feeds, parameter
 * tensors and the training that follows (autodiff through the casts: the
 * gradient of a cast is a cast back) work as on the f32 graph. */
#include "client_internal.h"
#include "train_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static int seterr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return SL_EINVAL;
}

/* What an op computes in under autocast. */
enum policy {
    RUN_HALF,   /* matmuls and convolutions: every float input in the half type */
    RUN_F32,    /* ops the registry does not run in the half type */
    FOLLOW_X,   /* biases: the bias follows the activation's dtype */
    RUN_WIDEST, /* the rest: as their inputs, the widest when they differ */
    RUN_AS_IS,  /* cast: what the graph says */
};

static enum policy policy(unsigned id, unsigned half)
{
    switch (id) {
    case SL_OP_MATMUL:
    case SL_OP_BATCH_MATMUL:
    case SL_OP_CONV2D:
        return RUN_HALF;
    case SL_OP_BIAS_ADD:
    case SL_OP_CHANNEL_BIAS_ADD:
        return FOLLOW_X;
    case SL_OP_CAST:
        return RUN_AS_IS;
    default:
        return SL_DTS(half) & sl_op_get(id)->dtypes ? RUN_WIDEST : RUN_F32;
    }
}

typedef struct rewrite {
    const salus_graph *in;
    salus_graph *out;
    salus_value *map;   /* old value -> new value, in the old value's dtype */
    salus_value *as[4]; /* per dtype: old value -> its cast in the new graph */
    size_t n_values;
} rewrite;

static int dtype_of(const salus_graph *g, salus_value v)
{
    sl_graph_value info;
    return sl_graph_value_info(g, v, &info) == SL_OK ? info.shape.dtype : -1;
}

salus_value sl_autocast_to(salus_graph *g, salus_value v, int dtype)
{
    int have = dtype_of(g, v);
    if (have == dtype || have < 0 || !sl_dtype_is_float((unsigned) have))
        return v;
    const int64_t to[] = {dtype};
    return salus_graph_op(g, "cast", 1, &v, 1, to, 0, NULL);
}

/* Old value v in the new graph as dtype (one cast per value and dtype). */
static salus_value cast_of(rewrite *r, salus_value v, int dtype)
{
    if (dtype_of(r->out, r->map[v]) == dtype)
        return r->map[v];
    if (r->as[dtype][v] == SALUS_NO_VALUE)
        r->as[dtype][v] = sl_autocast_to(r->out, r->map[v], dtype);
    return r->as[dtype][v];
}

/* Creates the old graph's inputs and parameters below handle `upto` that
 * the new graph does not have yet, in their order, so that the feeds of
 * the new graph are the old one's. */
static void copy_leaves(rewrite *r, salus_value upto, salus_value *next)
{
    for (; *next < upto && *next < r->n_values; (*next)++) {
        sl_graph_value info;
        sl_graph_value_info(r->in, *next, &info);
        int64_t dims[SL_MAX_DIMS];
        for (unsigned d = 0; d < info.shape.ndim; d++)
            dims[d] = info.shape.dims[d];
        if (info.kind == SL_GRAPH_INPUT)
            r->map[*next] = salus_graph_input(r->out, info.shape.dtype, info.shape.ndim, dims);
        else if (info.kind == SL_GRAPH_PARAM)
            r->map[*next] =
                salus_graph_param(r->out, info.tensor_id, info.shape.dtype, info.shape.ndim, dims);
    }
}

static void copy_op(rewrite *r, const sl_graph_op *o, unsigned half)
{
    const sl_op_def *def = sl_op_get(o->id);
    enum policy p = policy(o->id, half);
    salus_value in[SL_OP_MAX_IN];
    int widest = -1;
    for (unsigned i = 0; i < o->n_in; i++) {
        int dt = dtype_of(r->out, r->map[o->in[i]]);
        if (sl_dtype_is_float((unsigned) dt) && (widest < 0 || dt == SL_F32))
            widest = dt;
    }
    int x_dtype = o->n_in ? dtype_of(r->out, r->map[o->in[0]]) : -1;
    for (unsigned i = 0; i < o->n_in; i++) {
        salus_value v = o->in[i];
        int dt = dtype_of(r->out, r->map[v]);
        /* an input written in place stays itself: a cast would write a copy */
        if (!sl_dtype_is_float((unsigned) dt) || (def->mutates >> i) & 1 || p == RUN_AS_IS) {
            in[i] = r->map[v];
            continue;
        }
        int want = p == RUN_HALF   ? (int) half
                   : p == RUN_F32  ? SL_F32
                   : p == FOLLOW_X ? (i == 1 ? x_dtype : dt)
                                   : widest;
        in[i] = cast_of(r, v, want);
    }
    salus_value first = salus_graph_op(r->out, def->name, o->n_in, in, o->n_iattrs, o->attrs->i,
                                       o->n_fattrs, o->attrs->f);
    for (unsigned k = 0; k < o->n_out && first != SALUS_NO_VALUE; k++)
        r->map[o->out0 + k] = first + k;
}

int sl_autocast(const salus_graph *in, int half, salus_graph **out, salus_value **map, char *err,
                size_t len)
{
    if (half != SL_BF16 && half != SL_F16)
        return seterr(err, len, "precision %d is not bf16 or f16", half);
    if (salus_graph_error(in))
        return seterr(err, len, "%s", salus_graph_error(in));
    rewrite r = {.in = in, .n_values = sl_graph_n_values(in)};
    size_t nv = r.n_values ? r.n_values : 1;
    r.out = salus_graph_new();
    r.map = sl_calloc(nv, sizeof *r.map);
    int rc = SL_ENOMEM;
    for (int d = 0; d < 4; d++)
        if (d != SL_I32 && !(r.as[d] = sl_calloc(nv, sizeof *r.as[d])))
            goto out;
    if (!r.out || !r.map)
        goto out;
    for (size_t v = 0; v < nv; v++) {
        r.map[v] = SALUS_NO_VALUE;
        for (int d = 0; d < 4; d++)
            if (r.as[d])
                r.as[d][v] = SALUS_NO_VALUE;
    }
    salus_value next = 0;
    size_t n_ops = sl_graph_n_ops(in);
    for (size_t j = 0; j < n_ops; j++) {
        sl_graph_op o;
        sl_graph_op_info(in, j, &o);
        /* values are numbered as they were made: the leaves made before
         * this op lie below its first output, or up to its last input */
        salus_value upto = o.out0;
        if (o.out0 == SALUS_NO_VALUE) {
            upto = 0;
            for (unsigned i = 0; i < o.n_in; i++)
                if (o.in[i] + 1 > upto)
                    upto = o.in[i] + 1;
        }
        copy_leaves(&r, upto, &next);
        copy_op(&r, &o, (unsigned) half);
        if (o.out0 != SALUS_NO_VALUE)
            next = o.out0 + o.n_out;
    }
    copy_leaves(&r, (salus_value) r.n_values, &next);
    if (salus_graph_error(r.out)) {
        rc = seterr(err, len, "mixed precision (%s): %s", sl_dtype_name((unsigned) half),
                    salus_graph_error(r.out));
        goto out;
    }
    *out = r.out;
    *map = r.map;
    r.out = NULL;
    r.map = NULL;
    rc = SL_OK;
out:
    if (rc == SL_ENOMEM)
        seterr(err, len, "out of memory");
    salus_graph_free(r.out);
    sl_free(r.map);
    for (int d = 0; d < 4; d++)
        sl_free(r.as[d]);
    return rc;
}
