/* Shape inference and cost of the ops transformer training graphs need
 * beyond the axes ops: layer normalisation and its gradient, the gradient
 * of ew_unary, softmax and log-softmax along any axis and their gradient,
 * the embedding's gradient (a scatter-add), and dropout.
 *
 * Cost (flops, bytes read + written), for the sim backend's timing model
 * (n: elements of x):
 *   layer_norm          8n flops, reads x, weight, bias, writes y + stats
 *   layer_norm_grad     12n flops, reads dy, x, weight, stats, writes dx,
 *                       dweight, dbias
 *   ew_unary_grad       8n flops (the derivatives are transcendental),
 *                       reads dy and x, writes dx
 *   softmax_axis        5n flops, reads x, writes y
 *   softmax_axis_grad   4n flops, reads dy and y, writes dx
 *   embedding_grad      dy's elements in flops, reads dy and ids, writes
 *                       the table's gradient
 *   dropout             30n flops (Philox's 10 rounds per 4 elements),
 *                       reads x, writes y and the mask
 *   dropout_grad        n flops, reads dy and the mask, writes dx */
#include "ops_axes.h"
#include "ops_impl.h"

#include "sl_error.h"

#include <math.h>

static int need_axis(int64_t axis, unsigned nd, char *err, size_t errlen)
{
    if (axis < 0 || axis >= (int64_t) nd)
        return sl_ops_fail(err, errlen, "i[0] (axis) = %lld: must be in [0, %u)", (long long) axis,
                           nd);
    return SL_OK;
}

/* x's shape with the normalised dims (axis..rank) set to 1: the shape of
 * layer_norm's statistics, as PyTorch's native_layer_norm keeps them. */
static sl_shape stats_shape(const sl_shape *x, unsigned axis)
{
    sl_shape s = *x;
    for (unsigned d = axis; d < x->ndim; d++)
        s.dims[d] = 1;
    return s;
}

/* weight and bias: the normalised dims of x. */
static int need_affine(const sl_shape *x, unsigned axis, const sl_shape *p, unsigned i, char *err,
                       size_t errlen)
{
    bool ok = p->ndim == x->ndim - axis;
    for (unsigned d = 0; ok && d < p->ndim; d++)
        ok = p->dims[d] == x->dims[axis + d];
    if (!ok) {
        char sx[SL_SHAPE_STR_LEN], sp[SL_SHAPE_STR_LEN];
        return sl_ops_fail(err, errlen, "in%u %s: must be x's dims from the axis on (x is %s)", i,
                           sl_shape_str(p, sp, sizeof sp), sl_shape_str(x, sx, sizeof sx));
    }
    return SL_OK;
}

int sl_ops_infer_layer_norm(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                            size_t errlen)
{
    int rc = sl_ops_need_f32(in, 3, err, errlen);
    if (!rc)
        rc = need_axis(a->i[0], in[0].ndim, err, errlen);
    unsigned axis = (unsigned) a->i[0];
    for (unsigned i = 1; i < 3 && !rc; i++)
        rc = need_affine(&in[0], axis, &in[i], i, err, errlen);
    if (!rc && !(isfinite(a->f[0]) && a->f[0] > 0.0f))
        rc = sl_ops_fail(err, errlen, "f[0] (epsilon) = %g: must be finite and > 0",
                         (double) a->f[0]);
    if (rc)
        return rc;
    out[0] = in[0];
    out[1] = out[2] = stats_shape(&in[0], axis);
    return SL_OK;
}

void sl_ops_cost_layer_norm(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                            sl_op_cost *c)
{
    (void) a;
    c->flops = 8 * sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&in[2]) +
               sl_shape_bytes(&out[0]) + sl_shape_bytes(&out[1]) + sl_shape_bytes(&out[2]);
}

int sl_ops_infer_layer_norm_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                                 size_t errlen)
{
    int rc = sl_ops_need_f32(in, 5, err, errlen);
    if (!rc)
        rc = need_axis(a->i[0], in[1].ndim, err, errlen);
    if (rc)
        return rc;
    unsigned axis = (unsigned) a->i[0];
    rc = sl_ops_need_shape(in, 0, &in[1], "x's shape", err, errlen);
    if (!rc)
        rc = need_affine(&in[1], axis, &in[2], 2, err, errlen);
    sl_shape st = stats_shape(&in[1], axis);
    if (!rc)
        rc = sl_ops_need_shape(in, 3, &st, "layer_norm's mean", err, errlen);
    if (!rc)
        rc = sl_ops_need_shape(in, 4, &st, "layer_norm's rstd", err, errlen);
    if (rc)
        return rc;
    out[0] = in[1];
    out[1] = out[2] = in[2];
    return SL_OK;
}

void sl_ops_cost_layer_norm_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                 sl_op_cost *c)
{
    (void) a;
    c->flops = 12 * sl_shape_elems(&in[1]);
    c->bytes = 0;
    for (unsigned i = 0; i < 5; i++)
        c->bytes += sl_shape_bytes(&in[i]);
    for (unsigned o = 0; o < 3; o++)
        c->bytes += sl_shape_bytes(&out[o]);
}

int sl_ops_infer_ew_unary_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                               size_t errlen)
{
    int rc = sl_ops_infer_ew_unary(a, &in[1], out, err, errlen);
    if (!rc)
        rc = sl_ops_need_shape(in, 0, &in[1], "x's shape", err, errlen);
    return rc;
}

void sl_ops_cost_ew_unary_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                               sl_op_cost *c)
{
    (void) a;
    c->flops = 8 * sl_shape_elems(&in[1]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

static int need_log_flag(const sl_op_attrs *a, char *err, size_t errlen)
{
    if (a->i[1] != 0 && a->i[1] != 1)
        return sl_ops_fail(err, errlen, "i[1] (log) = %lld: must be 0 or 1", (long long) a->i[1]);
    return SL_OK;
}

int sl_ops_infer_softmax_axis(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                              size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (!rc)
        rc = need_axis(a->i[0], in[0].ndim, err, errlen);
    if (!rc)
        rc = need_log_flag(a, err, errlen);
    if (!rc)
        out[0] = in[0];
    return rc;
}

void sl_ops_cost_softmax_axis(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                              sl_op_cost *c)
{
    (void) a;
    c->flops = 5 * sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

int sl_ops_infer_softmax_axis_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                   char *err, size_t errlen)
{
    int rc = sl_ops_infer_softmax_axis(a, &in[1], out, err, errlen);
    if (!rc)
        rc = sl_ops_need_f32(in, 1, err, errlen);
    if (!rc)
        rc = sl_ops_need_shape(in, 0, &in[1], "y's shape", err, errlen);
    return rc;
}

void sl_ops_cost_softmax_axis_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                   sl_op_cost *c)
{
    (void) a;
    c->flops = 4 * sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

int sl_ops_infer_embedding_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                                size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc)
        return rc;
    if (in[1].dtype != SL_I32)
        return sl_ops_fail(err, errlen, "in1 (ids) must be i32");
    const sl_shape *dy = &in[0], *ids = &in[1];
    bool lead = dy->ndim >= ids->ndim;
    for (unsigned d = 0; lead && d < ids->ndim; d++)
        lead = dy->dims[d] == ids->dims[d];
    if (!lead) {
        char sd[SL_SHAPE_STR_LEN], si[SL_SHAPE_STR_LEN];
        return sl_ops_fail(err, errlen, "in0 %s must start with the ids' dims %s",
                           sl_shape_str(dy, sd, sizeof sd), sl_shape_str(ids, si, sizeof si));
    }
    if (a->i[0] < 1 || a->i[0] > (int64_t) SL_MAX_ELEMS)
        return sl_ops_fail(err, errlen, "i[0] (num_weights) = %lld: must be >= 1",
                           (long long) a->i[0]);
    unsigned nd = 1 + dy->ndim - ids->ndim;
    if (nd > SL_MAX_DIMS)
        return sl_ops_fail(err, errlen, "the table would have rank %u, above %d", nd, SL_MAX_DIMS);
    sl_shape w = {.dtype = SL_F32, .ndim = (uint8_t) nd, .dims = {a->i[0]}};
    for (unsigned d = 1; d < nd; d++)
        w.dims[d] = dy->dims[ids->ndim + d - 1];
    if (!sl_shape_valid(&w))
        return sl_ops_fail(err, errlen, "the table is too large");
    out[0] = w;
    return SL_OK;
}

void sl_ops_cost_embedding_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

int sl_ops_infer_dropout(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc)
        return rc;
    if (in[1].dtype != SL_I32 || sl_shape_elems(&in[1]) != 2)
        return sl_ops_fail(err, errlen, "in1 (seed) must be i32 with 2 elements");
    if (a->i[0] < 0 || a->i[0] > (int64_t) UINT32_MAX)
        return sl_ops_fail(err, errlen, "i[0] (offset) = %lld: must be in [0, 2^32)",
                           (long long) a->i[0]);
    if (!(a->f[0] >= 0.0f && a->f[0] < 1.0f))
        return sl_ops_fail(err, errlen, "f[0] (p) = %g: must be in [0, 1)", (double) a->f[0]);
    out[0] = in[0];
    out[1] = in[0];
    out[1].dtype = SL_I32;
    return SL_OK;
}

void sl_ops_cost_dropout(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                         sl_op_cost *c)
{
    (void) a;
    c->flops = 30 * sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]) + sl_shape_bytes(&out[1]);
}

int sl_ops_infer_dropout_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                              size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc)
        return rc;
    sl_shape m = in[0];
    m.dtype = SL_I32;
    rc = sl_ops_need_shape(in, 1, &m, "dy's shape in i32 (dropout's mask)", err, errlen);
    if (!rc)
        rc = sl_ops_need_finite(a->f[0], "f[0] (scale)", err, errlen);
    if (!rc)
        out[0] = in[0];
    return rc;
}

void sl_ops_cost_dropout_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                              sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}
