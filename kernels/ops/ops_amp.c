/* Shape inference and costs of the loss-scaling ops (ops_table.c): the
 * in-graph equivalent of PyTorch's GradScaler for f16 mixed-precision
 * training. Every tensor is f32: the gradients checked are the f32 master
 * weights' (a half-precision gradient is cast back before its check). */
#include "ops_impl.h"

#include "sl_error.h"

#include <math.h>

/* in[i] is the [1] f32 tensor `what`. */
static int need_one(const sl_shape *in, unsigned i, const char *what, char *err, size_t errlen)
{
    char s[SL_SHAPE_STR_LEN];
    if (in[i].ndim != 1 || in[i].dims[0] != 1)
        return sl_ops_fail(err, errlen, "in%u (%s) is %s: it must be [1]", i, what,
                           sl_shape_str(&in[i], s, sizeof s));
    return SL_OK;
}

int sl_ops_infer_amp_unscale(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                             size_t errlen)
{
    (void) a, (void) out;
    int rc = sl_ops_need_f32(in, 3, err, errlen);
    if (rc == SL_OK)
        rc = need_one(in, 1, "scale", err, errlen);
    return rc ? rc : need_one(in, 2, "found", err, errlen);
}

int sl_ops_infer_amp_commit(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                            size_t errlen)
{
    (void) a, (void) out;
    int rc = sl_ops_need_f32(in, 3, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 1, &in[0], "dst's shape", err, errlen);
    return rc ? rc : need_one(in, 2, "found", err, errlen);
}

int sl_ops_infer_amp_scale_update(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                  char *err, size_t errlen)
{
    (void) out;
    static const char *const names[] = {"scale", "growth", "skipped", "found"};
    int rc = sl_ops_need_f32(in, 4, err, errlen);
    for (unsigned i = 0; i < 4 && rc == SL_OK; i++)
        rc = need_one(in, i, names[i], err, errlen);
    if (rc)
        return rc;
    if (!(a->f[0] > 1.0f) || !isfinite(a->f[0]))
        return sl_ops_fail(err, errlen, "f[0] (growth_factor) is %g: it must be finite and > 1",
                           (double) a->f[0]);
    if (!(a->f[1] > 0.0f && a->f[1] < 1.0f))
        return sl_ops_fail(err, errlen, "f[1] (backoff) is %g: it must lie in (0, 1)",
                           (double) a->f[1]);
    if (!(a->f[2] >= 1.0f) || !isfinite(a->f[2]))
        return sl_ops_fail(err, errlen, "f[2] (interval) is %g: it must be finite and >= 1",
                           (double) a->f[2]);
    return SL_OK;
}

void sl_ops_cost_amp_unscale(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                             sl_op_cost *c)
{
    (void) a, (void) out;
    c->flops = 2 * sl_shape_elems(&in[0]); /* the product and the test */
    c->bytes = 2 * sl_shape_bytes(&in[0]) + 12;
}

void sl_ops_cost_amp_commit(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                            sl_op_cost *c)
{
    (void) a, (void) out;
    c->flops = 0;
    c->bytes = 2 * sl_shape_bytes(&in[0]) + 4;
}

void sl_ops_cost_amp_scale_update(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                  sl_op_cost *c)
{
    (void) a, (void) in, (void) out;
    c->flops = 4;
    c->bytes = 28;
}
