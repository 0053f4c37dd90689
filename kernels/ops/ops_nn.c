/* The op registry, part two: validation, shape inference and cost of the
 * CNN ops (convolution, channel bias, pooling, batch normalisation). The
 * table and the cost formulas of every op are in ops.c. */
#include "ops_impl.h"
#include "ops_geom.h"

#include "sl_error.h"

#include <math.h>
#include <stdio.h>

/* Largest flop count of one launch the registry accepts: far more work than
 * any device does in a day, and small enough that cost figures never wrap. */
#define MAX_FLOPS (1ull << 62)

static sl_shape shape4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    sl_shape s = {.dtype = SL_F32, .ndim = 4, .dims = {n, c, h, w}};
    return s;
}

static sl_shape vec_shape(int64_t n)
{
    sl_shape s = {.dtype = SL_F32, .ndim = 1, .dims = {n}};
    return s;
}

static int need_attr_range(const sl_op_attrs *a, unsigned i, int64_t lo, int64_t hi,
                           const char *what, char *err, size_t errlen)
{
    if (a->i[i] >= lo && a->i[i] <= hi)
        return SL_OK;
    return sl_ops_fail(err, errlen, "i[%u] (%s) must be in [%lld, %lld], got %lld", i, what,
                       (long long) lo, (long long) hi, (long long) a->i[i]);
}

/* Fails unless elems * per_elem (elems <= 2^40, per_elem <= 2^40) is at most
 * MAX_FLOPS; the product is computed without overflow. */
static int need_work_bound(uint64_t elems, uint64_t per_elem, char *err, size_t errlen)
{
    if (per_elem == 0 || elems <= MAX_FLOPS / per_elem)
        return SL_OK;
    return sl_ops_fail(err, errlen, "%llu outputs x %llu operations each exceeds 2^62 flops",
                       (unsigned long long) elems, (unsigned long long) per_elem);
}

/* Output extents of window g over x[N,C,H,W]; fails when the window does not
 * fit the padded input. */
static int window_out(const sl_window2d *g, const sl_shape *x, int64_t *oh, int64_t *ow, char *err,
                      size_t errlen)
{
    *oh = sl_window_out(g, 0, x->dims[2]);
    *ow = sl_window_out(g, 1, x->dims[3]);
    if (*oh >= 1 && *ow >= 1)
        return SL_OK;
    char s[SL_SHAPE_STR_LEN];
    return sl_ops_fail(
        err, errlen,
        "window %lldx%lld (dilations %lld,%lld) does not fit input %s padded by "
        "%lld,%lld,%lld,%lld",
        (long long) g->kernel[0], (long long) g->kernel[1], (long long) g->dilation[0],
        (long long) g->dilation[1], sl_shape_str(x, s, sizeof s), (long long) g->pad_begin[0],
        (long long) g->pad_begin[1], (long long) g->pad_end[0], (long long) g->pad_end[1]);
}

/* ---- convolution ---- */

/* Validates conv2d's attributes and x[N,C,H,W] (input ix) with w[K,C/g,R,S]
 * (input iw); writes y's shape. */
static int conv_shapes(const sl_op_attrs *a, const sl_shape *in, unsigned ix, unsigned iw,
                       sl_shape *y, char *err, size_t errlen)
{
    static const char *const names[9] = {"stride h",    "stride w",   "pad h_begin",
                                         "pad w_begin", "pad h_end",  "pad w_end",
                                         "dilation h",  "dilation w", "group"};
    int rc = SL_OK;
    for (unsigned i = 0; rc == SL_OK && i < 9; i++)
        rc = need_attr_range(a, i, 0, SL_WINDOW_ATTR_MAX, names[i], err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, ix, 4, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, iw, 4, err, errlen);
    if (rc)
        return rc;
    const sl_shape *x = &in[ix], *w = &in[iw];
    sl_window2d g = sl_conv_window(a, w);
    int64_t c = x->dims[1], k = w->dims[0];
    if (c % g.group || k % g.group)
        return sl_ops_fail(err, errlen,
                           "group %lld does not divide the input channels %lld and the output "
                           "channels %lld",
                           (long long) g.group, (long long) c, (long long) k);
    if (w->dims[1] != c / g.group) {
        char sx[SL_SHAPE_STR_LEN], sw[SL_SHAPE_STR_LEN];
        return sl_ops_fail(err, errlen,
                           "in%u %s: expected %lld input channels per group for in%u %s", iw,
                           sl_shape_str(w, sw, sizeof sw), (long long) (c / g.group), ix,
                           sl_shape_str(x, sx, sizeof sx));
    }
    int64_t oh, ow;
    if ((rc = window_out(&g, x, &oh, &ow, err, errlen)))
        return rc;
    *y = shape4(x->dims[0], k, oh, ow);
    if (!sl_shape_valid(y))
        return sl_ops_fail(err, errlen, "output would exceed 2^40 elements");
    /* Work per output element: (C/g)*R*S = elems(w) / K <= 2^40. */
    return need_work_bound(sl_shape_elems(y), sl_shape_elems(w) / (uint64_t) k, err, errlen);
}

int sl_ops_infer_conv2d(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    return rc ? rc : conv_shapes(a, in, 0, 1, &out[0], err, errlen);
}

/* dy (in0) must be the shape conv2d gives x and w. */
int sl_ops_infer_conv2d_grad_input(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                   char *err, size_t errlen)
{
    sl_shape y;
    int rc = sl_ops_need_f32(in, 3, err, errlen);
    if (rc == SL_OK)
        rc = conv_shapes(a, in, 2, 1, &y, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 0, &y, "conv2d's output for in2 (x) and in1 (w)", err, errlen);
    if (rc == SL_OK)
        out[0] = in[2];
    return rc;
}

int sl_ops_infer_conv2d_grad_filter(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                    char *err, size_t errlen)
{
    sl_shape y;
    int rc = sl_ops_need_f32(in, 3, err, errlen);
    if (rc == SL_OK)
        rc = conv_shapes(a, in, 1, 2, &y, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 0, &y, "conv2d's output for in1 (x) and in2 (w)", err, errlen);
    if (rc == SL_OK)
        out[0] = in[2];
    return rc;
}

/* 2 * N*K*OH*OW * (C/g)*R*S for the forward pass and each gradient. */
static uint64_t conv_flops(const sl_shape *y, const sl_shape *w)
{
    return 2 * sl_shape_elems(y) * (sl_shape_elems(w) / (uint64_t) w->dims[0]);
}

void sl_ops_cost_conv2d(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                        sl_op_cost *c)
{
    (void) a;
    c->flops = conv_flops(&out[0], &in[1]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_conv2d_grad_input(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                   sl_op_cost *c)
{
    (void) a;
    c->flops = conv_flops(&in[0], &in[1]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_conv2d_grad_filter(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                    sl_op_cost *c)
{
    (void) a;
    c->flops = conv_flops(&in[0], &in[2]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

/* ---- per-channel bias ---- */

int sl_ops_infer_channel_bias_add(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                  char *err, size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 0, 4, err, errlen);
    if (rc == SL_OK) {
        sl_shape b = vec_shape(in[0].dims[1]);
        rc = sl_ops_need_shape(in, 1, &b, "one bias per channel of in0", err, errlen);
    }
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

int sl_ops_infer_channel_bias_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                   char *err, size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 0, 4, err, errlen);
    if (rc == SL_OK)
        out[0] = vec_shape(in[0].dims[1]);
    return rc;
}

void sl_ops_cost_channel_bias_add(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                  sl_op_cost *c)
{
    (void) a, (void) out;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = 2 * sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]);
}

void sl_ops_cost_channel_bias_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                   sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

/* ---- pooling ---- */

/* Validates pool attributes (count_include_pad only for avg) and x (input
 * ix); writes y's shape. A pad must be smaller than the kernel, so every
 * window covers at least one real element (padding never wins a max and
 * never makes an empty average). */
static int pool_shapes(const sl_op_attrs *a, const sl_shape *in, unsigned ix, bool avg, sl_shape *y,
                       char *err, size_t errlen)
{
    static const char *const names[2] = {"kernel h", "kernel w"};
    static const char *const pad_names[4] = {"pad h_begin", "pad w_begin", "pad h_end",
                                             "pad w_end"};
    int rc = SL_OK;
    for (unsigned i = 0; rc == SL_OK && i < 2; i++)
        rc = need_attr_range(a, i, 1, SL_WINDOW_ATTR_MAX, names[i], err, errlen);
    for (unsigned i = 2; rc == SL_OK && i < 4; i++)
        rc = need_attr_range(a, i, 0, SL_WINDOW_ATTR_MAX, i == 2 ? "stride h" : "stride w", err,
                             errlen);
    for (unsigned i = 4; rc == SL_OK && i < 8; i++)
        rc = need_attr_range(a, i, 0, a->i[i % 2] - 1, pad_names[i - 4], err, errlen);
    if (rc == SL_OK && avg)
        rc = need_attr_range(a, 8, 0, 1, "count_include_pad", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, ix, 4, err, errlen);
    if (rc)
        return rc;
    sl_window2d g = sl_pool_window(a);
    int64_t oh, ow;
    if ((rc = window_out(&g, &in[ix], &oh, &ow, err, errlen)))
        return rc;
    *y = shape4(in[ix].dims[0], in[ix].dims[1], oh, ow);
    return need_work_bound(sl_shape_elems(y), (uint64_t) (g.kernel[0] * g.kernel[1]), err, errlen);
}

int sl_ops_infer_maxpool(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    return rc ? rc : pool_shapes(a, in, 0, false, &out[0], err, errlen);
}

int sl_ops_infer_avgpool(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    return rc ? rc : pool_shapes(a, in, 0, true, &out[0], err, errlen);
}

/* in0 dy, in1 x, in2 y: dy and y both have maxpool(x)'s shape. */
int sl_ops_infer_maxpool_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                              size_t errlen)
{
    sl_shape y;
    int rc = sl_ops_need_f32(in, 3, err, errlen);
    if (rc == SL_OK)
        rc = pool_shapes(a, in, 1, false, &y, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 0, &y, "maxpool's output for in1 (x)", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 2, &y, "maxpool's output for in1 (x)", err, errlen);
    if (rc == SL_OK)
        out[0] = in[1];
    return rc;
}

int sl_ops_infer_avgpool_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                              size_t errlen)
{
    sl_shape y;
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = pool_shapes(a, in, 1, true, &y, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 0, &y, "avgpool's output for in1 (x)", err, errlen);
    if (rc == SL_OK)
        out[0] = in[1];
    return rc;
}

static uint64_t pool_window_elems(const sl_op_attrs *a)
{
    return (uint64_t) a->i[0] * (uint64_t) a->i[1];
}

void sl_ops_cost_maxpool(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                         sl_op_cost *c)
{
    c->flops = sl_shape_elems(&out[0]) * pool_window_elems(a);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_avgpool(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                         sl_op_cost *c)
{
    c->flops = sl_shape_elems(&out[0]) * (pool_window_elems(a) + 1);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_maxpool_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                              sl_op_cost *c)
{
    c->flops = sl_shape_elems(&in[0]) * pool_window_elems(a);
    c->bytes = 2 * sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_avgpool_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                              sl_op_cost *c)
{
    c->flops = sl_shape_elems(&in[0]) * (pool_window_elems(a) + 1);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

/* ---- batch normalisation ---- */

/* x (input ix) is [N,C] or [N,C,H,W]; in[first..last] are each [C]. */
static int bn_shapes(const sl_shape *in, unsigned ix, unsigned first, unsigned last, char *err,
                     size_t errlen)
{
    int rc = sl_ops_need_f32(in, last + 1, err, errlen);
    if (rc)
        return rc;
    if (in[ix].ndim != 2 && in[ix].ndim != 4) {
        char s[SL_SHAPE_STR_LEN];
        return sl_ops_fail(err, errlen, "in%u %s: expected [N,C] or [N,C,H,W]", ix,
                           sl_shape_str(&in[ix], s, sizeof s));
    }
    sl_shape per_channel = vec_shape(in[ix].dims[1]);
    for (unsigned i = first; rc == SL_OK && i <= last; i++)
        rc = sl_ops_need_shape(in, i, &per_channel, "one value per channel of x", err, errlen);
    return rc;
}

/* Training statistics need two values per channel (the unbiased variance
 * divides by count - 1). */
static int need_batch(const sl_shape *x, char *err, size_t errlen)
{
    uint64_t per_channel = sl_shape_elems(x) / (uint64_t) x->dims[1];
    if (per_channel >= 2)
        return SL_OK;
    char s[SL_SHAPE_STR_LEN];
    return sl_ops_fail(err, errlen, "in0 %s: training needs at least 2 values per channel",
                       sl_shape_str(x, s, sizeof s));
}

static int need_epsilon(float eps, char *err, size_t errlen)
{
    if (isfinite(eps) && eps > 0.0f)
        return SL_OK;
    return sl_ops_fail(err, errlen, "f[0] (epsilon) must be finite and > 0, got %g", (double) eps);
}

int sl_ops_infer_batchnorm(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                           size_t errlen)
{
    int rc = need_epsilon(a->f[0], err, errlen);
    if (rc == SL_OK && !(a->f[1] >= 0.0f && a->f[1] <= 1.0f))
        rc =
            sl_ops_fail(err, errlen, "f[1] (momentum) must be in [0, 1], got %g", (double) a->f[1]);
    if (rc == SL_OK)
        rc = bn_shapes(in, 0, 1, 4, err, errlen);
    if (rc == SL_OK)
        rc = need_batch(&in[0], err, errlen);
    if (rc == SL_OK) {
        out[0] = in[0];
        out[1] = out[2] = vec_shape(in[0].dims[1]);
    }
    return rc;
}

int sl_ops_infer_batchnorm_infer(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                                 size_t errlen)
{
    int rc = need_epsilon(a->f[0], err, errlen);
    if (rc == SL_OK)
        rc = bn_shapes(in, 0, 1, 4, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

int sl_ops_infer_batchnorm_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                                size_t errlen)
{
    (void) a;
    int rc = bn_shapes(in, 1, 2, 4, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 0, &in[1], "in1 (x)", err, errlen);
    if (rc == SL_OK)
        rc = need_batch(&in[1], err, errlen);
    if (rc == SL_OK) {
        out[0] = in[1];
        out[1] = out[2] = vec_shape(in[1].dims[1]);
    }
    return rc;
}

void sl_ops_cost_batchnorm(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                           sl_op_cost *c)
{
    (void) a, (void) out;
    /* x read twice (statistics, then normalisation) and y written; eight
     * per-channel vectors (scale, bias, running mean and variance read and
     * written, the saved mean and inverse deviation) */
    uint64_t n = sl_shape_elems(&in[0]), ch = (uint64_t) in[0].dims[1];
    c->flops = 8 * n + 16 * ch;
    c->bytes = 3 * sl_shape_bytes(&in[0]) + 8 * ch * sl_dtype_size(in[1].dtype);
}

void sl_ops_cost_batchnorm_infer(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                 sl_op_cost *c)
{
    (void) a, (void) out;
    uint64_t n = sl_shape_elems(&in[0]), ch = (uint64_t) in[0].dims[1];
    c->flops = 2 * n + 4 * ch;
    c->bytes = 2 * sl_shape_bytes(&in[0]) + 4 * ch * sl_dtype_size(in[1].dtype);
}

void sl_ops_cost_batchnorm_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                sl_op_cost *c)
{
    (void) a, (void) out;
    uint64_t n = sl_shape_elems(&in[0]), ch = (uint64_t) in[0].dims[1];
    c->flops = 10 * n + 4 * ch;
    c->bytes = 5 * sl_shape_bytes(&in[0]) + 5 * ch * sl_dtype_size(in[2].dtype);
}
