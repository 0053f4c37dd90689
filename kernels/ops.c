/* The op registry: validation, shape inference and cost of every op.
 *
 * Cost model (f32, n = element count of the output unless said otherwise):
 *   fill       0 flops,    writes n
 *   copy       0 flops,    reads n, writes n
 *   add        n flops,    reads 2n, writes n
 *   scale      n flops,    reads n, writes n
 *   matmul     2MNK flops, reads MK + KN, writes MN
 *   bias_add   MN flops,   reads MN + N, writes MN
 *   bias_grad  MN flops,   reads MN, writes N
 *   relu       n flops,    reads n, writes n
 *   relu_grad  n flops,    reads 2n, writes n
 *   mse_loss   3n flops (n = input elems), reads 2n, writes 1
 *   mse_grad   2n flops,   reads 2n, writes n
 *   sgd_update 2n flops (n = param elems), reads 2n, writes n
 *
 * Float attributes: scale's factor and sgd_update's learning rate must be
 * finite; fill's value may be anything (-inf masks are legitimate). */
#include "ops.h"

#include "sl_error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SHAPE_STR_LEN 96

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt,
                                                      ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return SL_EINVAL;
}

/* Every op is f32-only for now. */
static int need_f32(const sl_shape *in, unsigned n_in, char *err, size_t errlen)
{
    for (unsigned i = 0; i < n_in; i++)
        if (in[i].dtype != SL_F32) {
            char s[SHAPE_STR_LEN];
            return fail(err, errlen, "in%u %s: only f32 is supported", i,
                        sl_shape_str(&in[i], s, sizeof s));
        }
    return SL_OK;
}

static int need_rank(const sl_shape *in, unsigned i, unsigned rank, char *err, size_t errlen)
{
    if (in[i].ndim == rank)
        return SL_OK;
    char s[SHAPE_STR_LEN];
    return fail(err, errlen, "in%u %s: expected rank %u", i, sl_shape_str(&in[i], s, sizeof s),
                rank);
}

static int need_same(const sl_shape *in, char *err, size_t errlen)
{
    if (sl_shape_equal(&in[0], &in[1]))
        return SL_OK;
    char a[SHAPE_STR_LEN], b[SHAPE_STR_LEN];
    return fail(err, errlen, "in1 %s does not match in0 %s", sl_shape_str(&in[1], b, sizeof b),
                sl_shape_str(&in[0], a, sizeof a));
}

static int need_finite(float v, const char *what, char *err, size_t errlen)
{
    if (isfinite(v))
        return SL_OK;
    return fail(err, errlen, "%s must be finite, got %g", what, (double) v);
}

static sl_shape shape2(int64_t rows, int64_t cols)
{
    sl_shape s = {.dtype = SL_F32, .ndim = 2, .dims = {rows, cols}};
    return s;
}

/* ---- infer ---- */

/* fill, copy, relu: out = in0's shape. */
static int infer_like_in0(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    (void) a;
    int rc = need_f32(in, 1, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

static int infer_scale(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                       size_t errlen)
{
    int rc = need_finite(a->f[0], "f[0] (scale factor)", err, errlen);
    return rc ? rc : infer_like_in0(a, in, out, err, errlen);
}

/* add, relu_grad, mse_grad: two inputs of one shape, out = that shape. */
static int infer_same2(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                       size_t errlen)
{
    (void) a;
    int rc = need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = need_same(in, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

static int infer_mse_loss(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    int rc = infer_same2(a, in, out, err, errlen);
    if (rc == SL_OK)
        out[0] = (sl_shape){.dtype = SL_F32, .ndim = 0};
    return rc;
}

static int infer_sgd(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                     size_t errlen)
{
    (void) out;
    int rc = need_finite(a->f[0], "f[0] (learning rate)", err, errlen);
    if (rc == SL_OK)
        rc = need_f32(in, 2, err, errlen);
    return rc ? rc : need_same(in, err, errlen);
}

static int infer_matmul(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    for (unsigned i = 0; i < 2; i++)
        if (a->i[i] != 0 && a->i[i] != 1)
            return fail(err, errlen, "i[%u] (%s) must be 0 or 1, got %lld", i,
                        i ? "transB" : "transA", (long long) a->i[i]);
    int rc = need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = need_rank(in, 0, 2, err, errlen);
    if (rc == SL_OK)
        rc = need_rank(in, 1, 2, err, errlen);
    if (rc)
        return rc;
    bool ta = a->i[0], tb = a->i[1];
    int64_t m = in[0].dims[ta], k = in[0].dims[!ta];
    int64_t kb = in[1].dims[tb], n = in[1].dims[!tb];
    if (k != kb) {
        char sa[SHAPE_STR_LEN], sb[SHAPE_STR_LEN];
        return fail(err, errlen,
                    "inner dimensions differ: in0 %s%s has K=%lld, in1 %s%s has K=%lld",
                    sl_shape_str(&in[0], sa, sizeof sa), ta ? " (transposed)" : "", (long long) k,
                    sl_shape_str(&in[1], sb, sizeof sb), tb ? " (transposed)" : "", (long long) kb);
    }
    /* m, n <= 2^40 each, so the product fits in 64 bits. */
    if ((uint64_t) m * (uint64_t) n > SL_MAX_ELEMS)
        return fail(err, errlen, "output [%lld,%lld] exceeds %llu elements", (long long) m,
                    (long long) n, (unsigned long long) SL_MAX_ELEMS);
    out[0] = shape2(m, n);
    return SL_OK;
}

static int infer_bias_add(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    (void) a;
    int rc = need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = need_rank(in, 0, 2, err, errlen);
    if (rc == SL_OK)
        rc = need_rank(in, 1, 1, err, errlen);
    if (rc)
        return rc;
    if (in[1].dims[0] != in[0].dims[1]) {
        char sx[SHAPE_STR_LEN], sb[SHAPE_STR_LEN];
        return fail(err, errlen, "bias in1 %s does not match the columns of in0 %s",
                    sl_shape_str(&in[1], sb, sizeof sb), sl_shape_str(&in[0], sx, sizeof sx));
    }
    out[0] = in[0];
    return SL_OK;
}

static int infer_bias_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                           size_t errlen)
{
    (void) a;
    int rc = need_f32(in, 1, err, errlen);
    if (rc == SL_OK)
        rc = need_rank(in, 0, 2, err, errlen);
    if (rc == SL_OK)
        out[0] = (sl_shape){.dtype = SL_F32, .ndim = 1, .dims = {in[0].dims[1]}};
    return rc;
}

/* ---- cost ---- */

static void cost_ew(const sl_shape *s, unsigned flops_per_elem, unsigned tensors, sl_op_cost *c)
{
    uint64_t n = sl_shape_elems(s);
    c->flops = flops_per_elem * n;
    c->bytes = tensors * n * sl_dtype_size(s->dtype);
}

#define COST_EW(fn, shape, flops, tensors)                                                         \
    static void fn(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out, sl_op_cost *c)   \
    {                                                                                              \
        (void) a, (void) in, (void) out;                                                           \
        cost_ew(shape, flops, tensors, c);                                                         \
    }
COST_EW(cost_fill, &out[0], 0, 1)
COST_EW(cost_copy, &out[0], 0, 2)
COST_EW(cost_unary, &out[0], 1, 2)  /* scale, relu */
COST_EW(cost_binary, &out[0], 1, 3) /* add, relu_grad */
COST_EW(cost_mse_grad, &out[0], 2, 3)
COST_EW(cost_sgd, &in[0], 2, 3)
#undef COST_EW

static void cost_mse_loss(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                          sl_op_cost *c)
{
    (void) a;
    cost_ew(&in[0], 3, 2, c);
    c->bytes += sl_shape_bytes(&out[0]);
}

static void cost_matmul(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                        sl_op_cost *c)
{
    uint64_t m = (uint64_t) out[0].dims[0], n = (uint64_t) out[0].dims[1];
    uint64_t k = (uint64_t) in[0].dims[a->i[0] ? 0 : 1];
    /* Validated: MK, KN and MN are each <= 2^40, so MNK <= 2^60. */
    c->flops = 2 * m * n * k;
    c->bytes = (m * k + k * n + m * n) * sl_dtype_size(out[0].dtype);
}

static void cost_bias_add(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                          sl_op_cost *c)
{
    (void) a, (void) out;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = 2 * sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]);
}

static void cost_bias_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                           sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

/* ---- the table ---- */

static const sl_op_def defs[SL_OP_COUNT] = {
    [SL_OP_FILL] = {"fill", 1, 1, 0, 0, 1, infer_like_in0, cost_fill},
    [SL_OP_COPY] = {"copy", 1, 1, 0, 0, 0, infer_like_in0, cost_copy},
    [SL_OP_ADD] = {"add", 2, 1, 0, 0, 0, infer_same2, cost_binary},
    [SL_OP_SCALE] = {"scale", 1, 1, 0, 0, 1, infer_scale, cost_unary},
    [SL_OP_MATMUL] = {"matmul", 2, 1, 0, 2, 0, infer_matmul, cost_matmul},
    [SL_OP_BIAS_ADD] = {"bias_add", 2, 1, 0, 0, 0, infer_bias_add, cost_bias_add},
    [SL_OP_BIAS_GRAD] = {"bias_grad", 1, 1, 0, 0, 0, infer_bias_grad, cost_bias_grad},
    [SL_OP_RELU] = {"relu", 1, 1, 0, 0, 0, infer_like_in0, cost_unary},
    [SL_OP_RELU_GRAD] = {"relu_grad", 2, 1, 0, 0, 0, infer_same2, cost_binary},
    [SL_OP_MSE_LOSS] = {"mse_loss", 2, 1, 0, 0, 0, infer_mse_loss, cost_mse_loss},
    [SL_OP_MSE_GRAD] = {"mse_grad", 2, 1, 0, 0, 0, infer_same2, cost_mse_grad},
    [SL_OP_SGD_UPDATE] = {"sgd_update", 2, 0, 1, 0, 1, infer_sgd, cost_sgd},
};

const sl_op_def *sl_op_get(unsigned id)
{
    return id < SL_OP_COUNT ? &defs[id] : NULL;
}

int sl_op_lookup(const char *name, unsigned *id)
{
    if (!name || !id)
        return SL_EINVAL;
    for (unsigned i = 0; i < SL_OP_COUNT; i++)
        if (strcmp(defs[i].name, name) == 0) {
            *id = i;
            return SL_OK;
        }
    return SL_ENOTFOUND;
}

/* Attributes an op does not read must be zero, so that a future meaning of
 * them can never be silently ignored by an old server. */
static int check_unused_attrs(const sl_op_def *d, const sl_op_attrs *a, char *err, size_t errlen)
{
    for (unsigned i = d->n_iattrs; i < SL_OP_MAX_IATTRS; i++)
        if (a->i[i] != 0)
            return fail(err, errlen, "i[%u] is not used by this op and must be 0, got %lld", i,
                        (long long) a->i[i]);
    for (unsigned i = d->n_fattrs; i < SL_OP_MAX_FATTRS; i++)
        if (a->f[i] != 0.0f)
            return fail(err, errlen, "f[%u] is not used by this op and must be 0, got %g", i,
                        (double) a->f[i]);
    return SL_OK;
}

int sl_op_infer(unsigned id, const sl_op_attrs *a, const sl_shape *in, unsigned n_in, sl_shape *out,
                char *err, size_t errlen)
{
    static const sl_op_attrs zero_attrs;
    const sl_op_def *d = sl_op_get(id);
    if (!d)
        return fail(err, errlen, "unknown op id %u", id);
    if (n_in != d->n_in)
        return fail(err, errlen, "%s: expected %u inputs, got %u", d->name, d->n_in, n_in);
    if ((n_in && !in) || (d->n_out && !out))
        return fail(err, errlen, "%s: missing input or output shape array", d->name);
    if (!a)
        a = &zero_attrs;
    for (unsigned i = 0; i < n_in; i++)
        if (!sl_shape_valid(&in[i])) {
            char s[SHAPE_STR_LEN];
            return fail(err, errlen,
                        "%s: in%u %s is not a valid shape (known dtype, rank <= %d, dims >= 1, "
                        "at most 2^40 elements)",
                        d->name, i, sl_shape_str(&in[i], s, sizeof s), SL_MAX_DIMS);
        }
    char why[192] = "";
    sl_shape tmp[SL_OP_MAX_OUT];
    memset(tmp, 0, sizeof tmp);
    int rc = check_unused_attrs(d, a, why, sizeof why);
    if (rc == SL_OK)
        rc = d->infer(a, in, tmp, why, sizeof why);
    for (unsigned i = 0; rc == SL_OK && i < d->n_out; i++)
        if (!sl_shape_valid(&tmp[i]))
            rc = fail(why, sizeof why, "output %u would not be a valid shape", i);
    if (rc != SL_OK)
        return fail(err, errlen, "%s: %s", d->name, why);
    if (d->n_out)
        memcpy(out, tmp, d->n_out * sizeof *out);
    return SL_OK;
}
