/* The op registry: validation, shape inference and cost. This file holds
 * the registry's functions (ops.h) and the infer and cost functions of the
 * element-wise, dense, loss, reduction, optimiser and shape ops; ops_nn.c
 * holds convolution, pooling and normalisation, ops_table.c the table.
 *
 * Cost model: flops are floating-point operations (a comparison counts as
 * one, exp/log/sqrt as one each), bytes are bytes read + written, counting
 * each tensor once per pass a straightforward device kernel makes over it.
 * Inputs that only give a shape are not read. f32 and i32 are 4 bytes.
 * n = element count of the output unless said otherwise.
 *   fill         0 flops,    writes n
 *   copy         0 flops,    reads n, writes n
 *   add, mul     n flops,    reads 2n, writes n
 *   scale        n flops,    reads n, writes n
 *   axpy         2n flops,   reads 2n, writes n
 *   add_scalar   n flops (n = in0 elems), reads n, writes n
 *   matmul       2MNK flops, reads MK + KN, writes MN
 *   matmul_acc   2MNK + 2MN flops, reads MK + KN + MN (acc; not when beta =
 *                0), writes MN
 *   bias_add     MN flops,   reads MN + N, writes MN
 *   bias_grad    MN flops,   reads MN, writes N
 *   relu         n flops,    reads n, writes n
 *   relu_grad    n flops,    reads 2n, writes n
 *   sigmoid, tanh            4n flops, reads n, writes n
 *   sigmoid_grad, tanh_grad  3n flops, reads 2n, writes n
 *   mse_loss     3n flops (n = input elems), reads 2n, writes 1
 *   mse_grad     2n flops,   reads 2n, writes n
 *   softmax      5n flops,   reads n, writes n
 *   softmax_xent 5n + 2N flops (n = N*C), reads n + N labels, writes n + 1
 *   softmax_xent_grad  2n flops (n = N*C), reads n + N labels, writes n
 *   reduce_sum   n flops (n = input elems), reads n, writes 1
 *   reduce_mean  n + 1 flops (n = input elems), reads n, writes 1
 *   argmax       n flops (n = N*C), reads n, writes N
 *   sgd_update   2n flops (n = param elems), reads 2n, writes n
 *   momentum_update  6n flops, reads 3n (p, g, v), writes 2n (p, v)
 *   adam_update  14n flops, reads 4n + 1 (p, g, m, v, t), writes 3n (p, m, v)
 *   reshape      0 flops, 0 bytes (a view, never launched)
 *   conv2d       2*N*K*OH*OW*(C/group)*R*S flops; reads x + w, writes y
 *   conv2d_grad_input   same flops; reads dy + w, writes dx (x not read)
 *   conv2d_grad_filter  same flops; reads dy + x, writes dw (w not read)
 *   channel_bias_add    n flops, reads n + C, writes n
 *   channel_bias_grad   n flops (n = input elems), reads n, writes C
 *   maxpool      elems(y)*KH*KW flops, reads x, writes y
 *   avgpool      elems(y)*(KH*KW + 1) flops, reads x, writes y
 *   maxpool_grad elems(y)*KH*KW flops, reads dy + x + y, writes dx
 *   avgpool_grad elems(y)*(KH*KW + 1) flops, reads dy, writes dx
 *   batchnorm    8n + 16C flops (n = x elems); reads x twice (statistics,
 *                then normalisation) + 4C, writes y + 4C (running mean and
 *                variance, saved mean and inverse std)
 *   batchnorm_infer  2n + 4C flops, reads x + 4C, writes y
 *   batchnorm_grad   10n + 4C flops; reads dy and x twice (reductions, then
 *                dx) + 3C, writes dx + 2C
 *
 * What each op reads and the values its attributes may take are documented
 * with the op in ops_table.c. */
#include "ops_impl.h"

#include "sl_error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sl_ops_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return SL_EINVAL;
}

int sl_ops_need_f32(const sl_shape *in, unsigned n_in, char *err, size_t errlen)
{
    for (unsigned i = 0; i < n_in; i++)
        if (in[i].dtype != SL_F32) {
            char s[SL_SHAPE_STR_LEN];
            return sl_ops_fail(err, errlen, "in%u %s: expected a float tensor", i,
                               sl_shape_str(&in[i], s, sizeof s));
        }
    return SL_OK;
}

int sl_ops_need_rank(const sl_shape *in, unsigned i, unsigned rank, char *err, size_t errlen)
{
    if (in[i].ndim == rank)
        return SL_OK;
    char s[SL_SHAPE_STR_LEN];
    return sl_ops_fail(err, errlen, "in%u %s: expected rank %u", i,
                       sl_shape_str(&in[i], s, sizeof s), rank);
}

int sl_ops_need_shape(const sl_shape *in, unsigned j, const sl_shape *want, const char *what,
                      char *err, size_t errlen)
{
    if (sl_shape_equal(&in[j], want))
        return SL_OK;
    char a[SL_SHAPE_STR_LEN], b[SL_SHAPE_STR_LEN];
    return sl_ops_fail(err, errlen, "in%u %s does not match %s %s", j,
                       sl_shape_str(&in[j], a, sizeof a), what, sl_shape_str(want, b, sizeof b));
}

int sl_ops_need_finite(float v, const char *what, char *err, size_t errlen)
{
    if (isfinite(v))
        return SL_OK;
    return sl_ops_fail(err, errlen, "%s must be finite, got %g", what, (double) v);
}

/* Every in[1..n) has in0's shape. */
static int need_same(const sl_shape *in, unsigned n, char *err, size_t errlen)
{
    int rc = SL_OK;
    for (unsigned j = 1; rc == SL_OK && j < n; j++)
        rc = sl_ops_need_shape(in, j, &in[0], "in0", err, errlen);
    return rc;
}

static int need_nonneg(float v, const char *what, char *err, size_t errlen)
{
    if (isfinite(v) && v >= 0.0f)
        return SL_OK;
    return sl_ops_fail(err, errlen, "%s must be finite and >= 0, got %g", what, (double) v);
}

static sl_shape shape2(int64_t rows, int64_t cols)
{
    sl_shape s = {.dtype = SL_F32, .ndim = 2, .dims = {rows, cols}};
    return s;
}

static const sl_shape scalar_f32 = {.dtype = SL_F32, .ndim = 0};

/* ---- infer ---- */

/* fill, copy, relu, sigmoid, tanh: out = in0's shape. */
int sl_ops_infer_like_in0(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

int sl_ops_infer_cast(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                      size_t errlen)
{
    char s[SL_SHAPE_STR_LEN];
    if (!sl_dtype_is_float(in[0].dtype))
        return sl_ops_fail(err, errlen, "in0 %s: cast converts between float dtypes only",
                           sl_shape_str(&in[0], s, sizeof s));
    if (a->i[0] < 0 || a->i[0] >= SL_DTYPE_COUNT || !sl_dtype_is_float((unsigned) a->i[0]))
        return sl_ops_fail(err, errlen,
                           "to is %lld: it must be a float dtype (0 f32, 2 bf16, 3 f16)",
                           (long long) a->i[0]);
    out[0] = in[0];
    out[0].dtype = (uint8_t) a->i[0];
    return SL_OK;
}

/* The bit mask of relu_mask for an input of n elements: i32[ceil(n/32)]. */
static sl_shape relu_bits_shape(uint64_t n)
{
    sl_shape s = {.dtype = SL_I32, .ndim = 1};
    s.dims[0] = (int64_t) ((n + 31) / 32);
    return s;
}

int sl_ops_infer_relu_mask(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                           size_t errlen)
{
    int rc = sl_ops_infer_like_in0(a, in, out, err, errlen);
    if (rc == SL_OK)
        out[1] = relu_bits_shape(sl_shape_elems(&in[0]));
    return rc;
}

int sl_ops_infer_relu_grad_mask(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                                size_t errlen)
{
    int rc = sl_ops_infer_like_in0(a, in, out, err, errlen);
    if (rc == SL_OK) {
        sl_shape bits = relu_bits_shape(sl_shape_elems(&in[0]));
        rc = sl_ops_need_shape(in, 1, &bits, "relu_mask's bits for in0", err, errlen);
    }
    return rc;
}

int sl_ops_infer_scale(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                       size_t errlen)
{
    int rc = sl_ops_need_finite(a->f[0], "f[0] (scale factor)", err, errlen);
    return rc ? rc : sl_ops_infer_like_in0(a, in, out, err, errlen);
}

/* add, mul, relu_grad, sigmoid_grad, tanh_grad, mse_grad: two inputs of one
 * shape, out = that shape. */
int sl_ops_infer_same2(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                       size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = need_same(in, 2, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

int sl_ops_infer_axpy(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                      size_t errlen)
{
    int rc = sl_ops_need_finite(a->f[0], "f[0] (factor)", err, errlen);
    return rc ? rc : sl_ops_infer_same2(a, in, out, err, errlen);
}

int sl_ops_infer_add_scalar(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                            size_t errlen)
{
    (void) out;
    int rc = sl_ops_need_finite(a->f[0], "f[0] (value)", err, errlen);
    return rc ? rc : sl_ops_need_f32(in, 1, err, errlen);
}

/* mul_scalar: any f32 x times a one-element f32 tensor (a value only known
 * at run time, such as a learning rate set before each step). */
int sl_ops_infer_mul_scalar(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                            size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc == SL_OK && sl_shape_elems(&in[1]) != 1) {
        char s[SL_SHAPE_STR_LEN];
        sl_shape_str(&in[1], s, sizeof s);
        return sl_ops_fail(err, errlen, "in1 %s must have one element", s);
    }
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

int sl_ops_infer_mse_loss(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    int rc = sl_ops_infer_same2(a, in, out, err, errlen);
    if (rc == SL_OK)
        out[0] = scalar_f32;
    return rc;
}

int sl_ops_infer_reduce(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc == SL_OK)
        out[0] = scalar_f32;
    return rc;
}

/* in0 is an f32 [N,C] matrix. */
static int need_rows(const sl_shape *in, char *err, size_t errlen)
{
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    return rc ? rc : sl_ops_need_rank(in, 0, 2, err, errlen);
}

int sl_ops_infer_softmax(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    (void) a;
    int rc = need_rows(in, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

/* in0 [N,C] f32, in1 labels [N] i32. */
static int need_labels(const sl_shape *in, char *err, size_t errlen)
{
    int rc = need_rows(in, err, errlen);
    if (rc)
        return rc;
    sl_shape labels = {.dtype = SL_I32, .ndim = 1, .dims = {in[0].dims[0]}};
    return sl_ops_need_shape(in, 1, &labels, "one i32 label per row of in0", err, errlen);
}

int sl_ops_infer_softmax_xent(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                              size_t errlen)
{
    (void) a;
    int rc = need_labels(in, err, errlen);
    if (rc == SL_OK) {
        out[0] = scalar_f32;
        out[1] = in[0];
    }
    return rc;
}

int sl_ops_infer_softmax_xent_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out,
                                   char *err, size_t errlen)
{
    (void) a;
    int rc = need_labels(in, err, errlen);
    if (rc == SL_OK)
        out[0] = in[0];
    return rc;
}

int sl_ops_infer_argmax(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    (void) a;
    int rc = need_rows(in, err, errlen);
    if (rc == SL_OK)
        out[0] = (sl_shape){.dtype = SL_I32, .ndim = 1, .dims = {in[0].dims[0]}};
    return rc;
}

int sl_ops_infer_sgd(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                     size_t errlen)
{
    (void) out;
    int rc = sl_ops_need_finite(a->f[0], "f[0] (learning rate)", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_f32(in, 2, err, errlen);
    return rc ? rc : need_same(in, 2, err, errlen);
}

int sl_ops_infer_momentum(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    (void) out;
    int rc = sl_ops_need_finite(a->f[0], "f[0] (learning rate)", err, errlen);
    if (rc == SL_OK)
        rc = need_nonneg(a->f[1], "f[1] (momentum)", err, errlen);
    if (rc == SL_OK)
        rc = need_nonneg(a->f[2], "f[2] (weight decay)", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_f32(in, 3, err, errlen);
    return rc ? rc : need_same(in, 3, err, errlen);
}

static int need_beta(float v, const char *what, char *err, size_t errlen)
{
    if (v >= 0.0f && v < 1.0f)
        return SL_OK;
    return sl_ops_fail(err, errlen, "%s must be in [0, 1), got %g", what, (double) v);
}

int sl_ops_infer_adam(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                      size_t errlen)
{
    (void) out;
    int rc = sl_ops_need_finite(a->f[0], "f[0] (learning rate)", err, errlen);
    if (rc == SL_OK)
        rc = need_beta(a->f[1], "f[1] (beta1)", err, errlen);
    if (rc == SL_OK)
        rc = need_beta(a->f[2], "f[2] (beta2)", err, errlen);
    if (rc == SL_OK)
        rc = need_nonneg(a->f[3], "f[3] (epsilon)", err, errlen);
    if (rc == SL_OK)
        rc = need_nonneg(a->f[4], "f[4] (weight decay)", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_f32(in, 5, err, errlen);
    if (rc == SL_OK)
        rc = need_same(in, 4, err, errlen);
    if (rc == SL_OK && sl_shape_elems(&in[4]) != 1) {
        char s[SL_SHAPE_STR_LEN];
        rc = sl_ops_fail(err, errlen, "in4 %s (step count) must have exactly one element",
                         sl_shape_str(&in[4], s, sizeof s));
    }
    return rc;
}

/* The run-time rate of the _lr updates: one f32 element. */
static int need_rate(const sl_shape *rate, unsigned k, char *err, size_t errlen)
{
    if (rate->dtype == SL_F32 && sl_shape_elems(rate) == 1)
        return SL_OK;
    char s[SL_SHAPE_STR_LEN];
    return sl_ops_fail(err, errlen, "in%u %s (rate) must be f32 with exactly one element", k,
                       sl_shape_str(rate, s, sizeof s));
}

int sl_ops_infer_sgd_lr(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    int rc = sl_ops_infer_sgd(a, in, out, err, errlen);
    return rc ? rc : need_rate(&in[2], 2, err, errlen);
}

int sl_ops_infer_momentum_lr(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                             size_t errlen)
{
    int rc = sl_ops_infer_momentum(a, in, out, err, errlen);
    return rc ? rc : need_rate(&in[3], 3, err, errlen);
}

int sl_ops_infer_adam_lr(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    int rc = sl_ops_infer_adam(a, in, out, err, errlen);
    return rc ? rc : need_rate(&in[5], 5, err, errlen);
}

/* out = in0 viewed with dims i[0..ndim): ndim counts the leading nonzero
 * attributes (none: a scalar); one dim may be -1, inferred from the element
 * count, which must be unchanged. Any dtype. */
int sl_ops_infer_reshape(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                         size_t errlen)
{
    unsigned ndim = 0;
    while (ndim < SL_MAX_DIMS && a->i[ndim] != 0)
        ndim++;
    sl_shape s = {.dtype = in[0].dtype, .ndim = (uint8_t) ndim};
    int inferred = -1;
    uint64_t known = 1, elems = sl_shape_elems(&in[0]);
    for (unsigned d = 0; d < ndim; d++) {
        int64_t v = a->i[d];
        if (v == -1 && inferred < 0) {
            inferred = (int) d;
            continue;
        }
        /* known <= elems <= 2^40 before the check, so the division is exact
         * enough and the product cannot wrap. */
        if (v < 1 || (uint64_t) v > elems / known)
            return sl_ops_fail(err, errlen,
                               "i[%u] = %lld: dims must be >= 1 (one may be -1) and keep the %llu "
                               "elements of in0",
                               d, (long long) v, (unsigned long long) elems);
        known *= (uint64_t) v;
        s.dims[d] = v;
    }
    for (unsigned d = ndim; d < SL_MAX_DIMS; d++)
        if (a->i[d] != 0)
            return sl_ops_fail(err, errlen, "i[%u] follows a 0 and must be 0, got %lld", d,
                               (long long) a->i[d]);
    if (inferred >= 0) {
        if (elems % known)
            return sl_ops_fail(err, errlen,
                               "cannot infer i[%d]: %llu elements are not a multiple of %llu",
                               inferred, (unsigned long long) elems, (unsigned long long) known);
        s.dims[inferred] = (int64_t) (elems / known);
        known = elems;
    }
    if (known != elems) {
        char si[SL_SHAPE_STR_LEN], so[SL_SHAPE_STR_LEN];
        return sl_ops_fail(err, errlen, "%s has %llu elements, in0 %s has %llu",
                           sl_shape_str(&s, so, sizeof so), (unsigned long long) known,
                           sl_shape_str(&in[0], si, sizeof si), (unsigned long long) elems);
    }
    out[0] = s;
    return SL_OK;
}

int sl_ops_infer_matmul(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                        size_t errlen)
{
    for (unsigned i = 0; i < 2; i++)
        if (a->i[i] != 0 && a->i[i] != 1)
            return sl_ops_fail(err, errlen, "i[%u] (%s) must be 0 or 1, got %lld", i,
                               i ? "transB" : "transA", (long long) a->i[i]);
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 0, 2, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 1, 2, err, errlen);
    if (rc)
        return rc;
    bool ta = a->i[0], tb = a->i[1];
    int64_t m = in[0].dims[ta], k = in[0].dims[!ta];
    int64_t kb = in[1].dims[tb], n = in[1].dims[!tb];
    if (k != kb) {
        char sa[SL_SHAPE_STR_LEN], sb[SL_SHAPE_STR_LEN];
        return sl_ops_fail(
            err, errlen, "inner dimensions differ: in0 %s%s has K=%lld, in1 %s%s has K=%lld",
            sl_shape_str(&in[0], sa, sizeof sa), ta ? " (transposed)" : "", (long long) k,
            sl_shape_str(&in[1], sb, sizeof sb), tb ? " (transposed)" : "", (long long) kb);
    }
    /* m, n <= 2^40 each, so the product fits in 64 bits. */
    if ((uint64_t) m * (uint64_t) n > SL_MAX_ELEMS)
        return sl_ops_fail(err, errlen, "output [%lld,%lld] exceeds %llu elements", (long long) m,
                           (long long) n, (unsigned long long) SL_MAX_ELEMS);
    out[0] = shape2(m, n);
    return SL_OK;
}

/* The product's shape from matmul's rules, then acc (in2) must be it. */
int sl_ops_infer_matmul_acc(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                            size_t errlen)
{
    (void) out;
    sl_shape product;
    int rc = sl_ops_need_finite(a->f[0], "f[0] (alpha)", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_finite(a->f[1], "f[1] (beta)", err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_infer_matmul(a, in, &product, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_shape(in, 2, &product, "the product", err, errlen);
    return rc;
}

int sl_ops_infer_bias_add(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                          size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 2, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 0, 2, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 1, 1, err, errlen);
    if (rc)
        return rc;
    if (in[1].dims[0] != in[0].dims[1]) {
        char sx[SL_SHAPE_STR_LEN], sb[SL_SHAPE_STR_LEN];
        return sl_ops_fail(err, errlen, "bias in1 %s does not match the columns of in0 %s",
                           sl_shape_str(&in[1], sb, sizeof sb),
                           sl_shape_str(&in[0], sx, sizeof sx));
    }
    out[0] = in[0];
    return SL_OK;
}

int sl_ops_infer_bias_grad(const sl_op_attrs *a, const sl_shape *in, sl_shape *out, char *err,
                           size_t errlen)
{
    (void) a;
    int rc = sl_ops_need_f32(in, 1, err, errlen);
    if (rc == SL_OK)
        rc = sl_ops_need_rank(in, 0, 2, err, errlen);
    if (rc == SL_OK)
        out[0] = (sl_shape){.dtype = SL_F32, .ndim = 1, .dims = {in[0].dims[1]}};
    return rc;
}

/* ---- cost ---- */

/* Bytes are counted in each tensor's own dtype (sl_shape_bytes): a bf16 or
 * f16 tensor moves half the bytes of an f32 one, which is what makes
 * memory-bound ops faster in half precision. Flops do not depend on the
 * dtype. */

/* An element-wise op over `tensors` tensors of s's shape and dtype. */
static void cost_ew(const sl_shape *s, unsigned flops_per_elem, unsigned tensors, sl_op_cost *c)
{
    c->flops = flops_per_elem * sl_shape_elems(s);
    c->bytes = tensors * sl_shape_bytes(s);
}

#define COST_EW(fn, shape, flops, tensors)                                                         \
    void fn(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out, sl_op_cost *c)          \
    {                                                                                              \
        (void) a, (void) in, (void) out;                                                           \
        cost_ew(shape, flops, tensors, c);                                                         \
    }
COST_EW(sl_ops_cost_fill, &out[0], 0, 1)
COST_EW(sl_ops_cost_copy, &out[0], 0, 2)

void sl_ops_cost_cast(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out, sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}
COST_EW(sl_ops_cost_unary, &out[0], 1, 2)  /* scale, relu */
COST_EW(sl_ops_cost_binary, &out[0], 1, 3) /* add, mul, relu_grad */
COST_EW(sl_ops_cost_axpy, &out[0], 2, 3)

/* relu_mask and relu_grad_mask: x (or dy) and y (or dx), plus the bits. */
void sl_ops_cost_relu_bits(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                           sl_op_cost *c)
{
    (void) a, (void) out;
    cost_ew(&in[0], 1, 2, c);
    c->bytes += (sl_shape_elems(&in[0]) + 31) / 32 * 4;
}
COST_EW(sl_ops_cost_add_scalar, &in[0], 1, 2)
COST_EW(sl_ops_cost_transcendental, &out[0], 4, 2) /* sigmoid, tanh */
COST_EW(sl_ops_cost_act_grad, &out[0], 3, 3)       /* sigmoid_grad, tanh_grad */
COST_EW(sl_ops_cost_mse_grad, &out[0], 2, 3)
COST_EW(sl_ops_cost_softmax, &out[0], 5, 2)
COST_EW(sl_ops_cost_sgd, &in[0], 2, 3)
COST_EW(sl_ops_cost_momentum, &in[0], 6, 5)
#undef COST_EW

/* A view: salusd never launches it. */
void sl_ops_cost_reshape(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                         sl_op_cost *c)
{
    (void) a, (void) in, (void) out;
    c->flops = 0;
    c->bytes = 0;
}

void sl_ops_cost_mse_loss(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                          sl_op_cost *c)
{
    (void) a;
    cost_ew(&in[0], 3, 2, c);
    c->bytes += sl_shape_bytes(&out[0]);
}

void sl_ops_cost_reduce_sum(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                            sl_op_cost *c)
{
    (void) a;
    cost_ew(&in[0], 1, 1, c);
    c->bytes += sl_shape_bytes(&out[0]);
}

void sl_ops_cost_reduce_mean(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                             sl_op_cost *c)
{
    sl_ops_cost_reduce_sum(a, in, out, c);
    c->flops += 1;
}

void sl_ops_cost_softmax_xent(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                              sl_op_cost *c)
{
    (void) a;
    /* reads the logits and the labels, writes the loss and the softmax */
    uint64_t n = sl_shape_elems(&in[0]), rows = (uint64_t) in[0].dims[0];
    c->flops = 5 * n + 2 * rows;
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]) +
               sl_shape_bytes(&out[1]);
}

void sl_ops_cost_softmax_xent_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                                   sl_op_cost *c)
{
    (void) a;
    c->flops = 2 * sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_argmax(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                        sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_adam(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out, sl_op_cost *c)
{
    (void) a, (void) out;
    /* reads param, grad, m, v and t; writes param, m and v */
    c->flops = 14 * sl_shape_elems(&in[0]);
    c->bytes = 2 * sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + 2 * sl_shape_bytes(&in[2]) +
               2 * sl_shape_bytes(&in[3]) + sl_shape_bytes(&in[4]);
}

void sl_ops_cost_matmul(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                        sl_op_cost *c)
{
    uint64_t m = (uint64_t) out[0].dims[0], n = (uint64_t) out[0].dims[1];
    uint64_t k = (uint64_t) in[0].dims[a->i[0] ? 0 : 1];
    /* Validated: MK, KN and MN are each <= 2^40, so MNK <= 2^60. */
    c->flops = 2 * m * n * k;
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]) + sl_shape_bytes(&out[0]);
}

void sl_ops_cost_matmul_acc(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                            sl_op_cost *c)
{
    (void) out;
    const sl_shape *acc = &in[2];
    sl_ops_cost_matmul(a, in, acc, c);
    c->flops += 2 * sl_shape_elems(acc);
    if (a->f[1] != 0.0f)
        c->bytes += sl_shape_bytes(acc);
}

void sl_ops_cost_bias_add(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                          sl_op_cost *c)
{
    (void) a, (void) out;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = 2 * sl_shape_bytes(&in[0]) + sl_shape_bytes(&in[1]);
}

void sl_ops_cost_bias_grad(const sl_op_attrs *a, const sl_shape *in, const sl_shape *out,
                           sl_op_cost *c)
{
    (void) a;
    c->flops = sl_shape_elems(&in[0]);
    c->bytes = sl_shape_bytes(&in[0]) + sl_shape_bytes(&out[0]);
}

int sl_op_lookup(const char *name, unsigned *id)
{
    if (!name || !id)
        return SL_EINVAL;
    for (unsigned i = 0; i < SL_OP_COUNT; i++)
        if (strcmp(sl_ops_table[i].name, name) == 0) {
            *id = i;
            return SL_OK;
        }
    return SL_ENOTFOUND;
}

size_t sl_op_names(char *buf, size_t len)
{
    if (!buf || len == 0)
        return 0;
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < SL_OP_COUNT; i++) {
        const char *sep = i ? ", " : "", *name = sl_ops_table[i].name;
        unsigned after = SL_OP_COUNT - 1 - i;
        /* a name goes in only with room for the ", and N more" that a later
         * name that does not fit would need */
        char more[32] = "";
        if (after)
            snprintf(more, sizeof more, ", and %u more", after);
        if (used + strlen(sep) + strlen(name) + strlen(more) >= len) {
            char tail[32];
            int n = snprintf(tail, sizeof tail, "%sand %u more", sep, after + 1);
            if (used + (size_t) n < len) {
                memcpy(buf + used, tail, (size_t) n + 1);
                used += (size_t) n;
            }
            return used;
        }
        used += (size_t) snprintf(buf + used, len - used, "%s%s", sep, name);
    }
    return used;
}

int sl_op_check_attrs(unsigned id, size_t n_iattrs, size_t n_fattrs, char *err, size_t errlen)
{
    const sl_op_def *d = sl_op_get(id);
    if (!d)
        return sl_ops_fail(err, errlen, "unknown op id %u", id);
    if (n_iattrs > SL_OP_MAX_IATTRS || n_fattrs > SL_OP_MAX_FATTRS)
        return sl_ops_fail(err, errlen, "%zu iattrs and %zu fattrs: at most %d and %d", n_iattrs,
                           n_fattrs, SL_OP_MAX_IATTRS, SL_OP_MAX_FATTRS);
    for (size_t i = n_iattrs; i < d->n_iattrs; i++)
        if (d->iattrs[i].required)
            return sl_ops_fail(err, errlen, "missing required attribute iattrs[%zu] (%s)", i,
                               d->iattrs[i].name);
    for (size_t i = n_fattrs; i < d->n_fattrs; i++)
        if (d->fattrs[i].required)
            return sl_ops_fail(err, errlen, "missing required attribute fattrs[%zu] (%s)", i,
                               d->fattrs[i].name);
    return SL_OK;
}

/* Attributes an op does not read must be zero, so that a future meaning of
 * them can never be silently ignored by an old server. */
static int check_unused_attrs(const sl_op_def *d, const sl_op_attrs *a, char *err, size_t errlen)
{
    for (unsigned i = d->n_iattrs; i < SL_OP_MAX_IATTRS; i++)
        if (a->i[i] != 0)
            return sl_ops_fail(err, errlen, "i[%u] is not used by this op and must be 0, got %lld",
                               i, (long long) a->i[i]);
    for (unsigned i = d->n_fattrs; i < SL_OP_MAX_FATTRS; i++)
        if (a->f[i] != 0.0f)
            return sl_ops_fail(err, errlen, "f[%u] is not used by this op and must be 0, got %g", i,
                               (double) a->f[i]);
    return SL_OK;
}

/* The float dtype an op computes in: that of its float inputs, which must
 * share it, and one the op accepts (sl_op_def.dtypes). */
static int compute_dtype(const sl_op_def *d, const sl_shape *in, unsigned n_in, unsigned *dtype,
                         char *err, size_t errlen)
{
    unsigned accepted = d->dtypes ? d->dtypes : SL_DTS(SL_F32);
    int first = -1;
    for (unsigned i = 0; i < n_in; i++) {
        if (!sl_dtype_is_float(in[i].dtype))
            continue;
        char s[SL_SHAPE_STR_LEN], t[SL_SHAPE_STR_LEN], names[32];
        if (!(accepted & SL_DTS(in[i].dtype)))
            return sl_ops_fail(err, errlen,
                               "in%u (%s) is %s: %s is not supported here (it computes in %s); "
                               "cast it first",
                               i, d->ins[i].name, sl_shape_str(&in[i], s, sizeof s),
                               sl_dtype_name(in[i].dtype),
                               sl_dtypes_str(accepted, names, sizeof names));
        if (first < 0) {
            first = (int) i;
            *dtype = in[i].dtype;
        } else if (in[i].dtype != *dtype)
            return sl_ops_fail(err, errlen,
                               "in%u (%s) is %s but in%d (%s) is %s: float inputs must share one "
                               "dtype; cast one of them",
                               i, d->ins[i].name, sl_shape_str(&in[i], s, sizeof s), first,
                               d->ins[first].name, sl_shape_str(&in[first], t, sizeof t));
    }
    return SL_OK;
}

int sl_op_infer(unsigned id, const sl_op_attrs *a, const sl_shape *in, unsigned n_in, sl_shape *out,
                char *err, size_t errlen)
{
    static const sl_op_attrs zero_attrs;
    const sl_op_def *d = sl_op_get(id);
    if (!d)
        return sl_ops_fail(err, errlen, "unknown op id %u", id);
    if (n_in != d->n_in)
        return sl_ops_fail(err, errlen, "%s: expected %u inputs, got %u", d->name, d->n_in, n_in);
    if ((n_in && !in) || (d->n_out && !out))
        return sl_ops_fail(err, errlen, "%s: missing input or output shape array", d->name);
    if (!a)
        a = &zero_attrs;
    for (unsigned i = 0; i < n_in; i++)
        if (!sl_shape_valid(&in[i])) {
            char s[SL_SHAPE_STR_LEN];
            return sl_ops_fail(
                err, errlen,
                "%s: in%u %s is not a valid shape (known dtype, rank <= %d, dims >= 1, "
                "at most 2^40 elements)",
                d->name, i, sl_shape_str(&in[i], s, sizeof s), SL_MAX_DIMS);
        }
    char why[192] = "";
    sl_shape tmp[SL_OP_MAX_OUT], view[SL_OP_MAX_IN];
    memset(tmp, 0, sizeof tmp);
    unsigned dtype = SL_F32;
    int rc = check_unused_attrs(d, a, why, sizeof why);
    if (rc == SL_OK && !d->converts)
        rc = compute_dtype(d, in, n_in, &dtype, why, sizeof why);
    if (rc == SL_OK) {
        memcpy(view, in, n_in * sizeof *in);
        for (unsigned i = 0; i < n_in && !d->converts; i++)
            if (sl_dtype_is_float(view[i].dtype))
                view[i].dtype = SL_F32;
        rc = d->infer(a, view, tmp, why, sizeof why);
    }
    for (unsigned i = 0; rc == SL_OK && i < d->n_out; i++) {
        if (!d->converts && tmp[i].dtype == SL_F32)
            tmp[i].dtype = (uint8_t) dtype;
        if (!sl_shape_valid(&tmp[i]))
            rc = sl_ops_fail(why, sizeof why, "output %u would not be a valid shape", i);
    }
    if (rc != SL_OK)
        return sl_ops_fail(err, errlen, "%s: %s", d->name, why);
    if (d->n_out)
        memcpy(out, tmp, d->n_out * sizeof *out);
    return SL_OK;
}

/* ---- splitting (ops.h) ---- */

enum split_dim { SPLIT_NONE, SPLIT_M, SPLIT_K };

static enum split_dim split_dim(const sl_op_call *c)
{
    if (c->op != SL_OP_MATMUL && c->op != SL_OP_MATMUL_ACC)
        return SPLIT_NONE;
    if (!c->attrs.i[0])
        return SPLIT_M;
    return c->attrs.i[1] ? SPLIT_NONE : SPLIT_K;
}

uint64_t sl_op_split_max(const sl_op_call *c)
{
    enum split_dim d = split_dim(c);
    int64_t rows = d == SPLIT_NONE ? 1 : c->in[0].shape.dims[0];
    return rows > 1 ? (uint64_t) rows : 1;
}

/* Rows [from, to) of a dense 2-D f32 tensor. */
static sl_tensor_ref rows_of(sl_tensor_ref t, int64_t from, int64_t to)
{
    t.data = (char *) t.data + (size_t) from * (size_t) t.shape.dims[1] * sizeof(float);
    t.shape.dims[0] = to - from;
    return t;
}

int sl_op_split(const sl_op_call *c, uint32_t parts, uint32_t part, sl_op_call *out)
{
    enum split_dim d = split_dim(c);
    if (d == SPLIT_NONE)
        return SL_EUNSUPPORTED;
    if (parts == 0 || parts > sl_op_split_max(c) || part >= parts)
        return SL_EINVAL;
    int64_t rows = c->in[0].shape.dims[0];
    int64_t from = rows * part / parts, to = rows * (part + 1) / parts;
    *out = *c;
    out->in[0] = rows_of(c->in[0], from, to);
    bool acc = c->op == SL_OP_MATMUL_ACC;
    if (d == SPLIT_M) { /* the output's rows: acc (in2) or out0 */
        if (acc)
            out->in[2] = rows_of(c->in[2], from, to);
        else
            out->out[0] = rows_of(c->out[0], from, to);
        return SL_OK;
    }
    out->in[1] = rows_of(c->in[1], from, to);
    if (part == 0)
        return SL_OK;
    /* later K parts add into what the first ones wrote */
    out->op = SL_OP_MATMUL_ACC;
    out->n_in = 3;
    out->n_out = 0;
    out->in[2] = acc ? c->in[2] : c->out[0];
    out->attrs.f[0] = acc ? c->attrs.f[0] : 1.0f;
    out->attrs.f[1] = 1.0f;
    return SL_OK;
}
