/* The gradient rules (ops_grad.h). Each rule emits the registry's own
 * gradient ops, so a training graph built by automatic differentiation
 * runs the same kernels, with the same arithmetic, as a backward pass
 * written by hand. */
#include "ops_grad.h"

#include "sl_error.h"

#include <stdio.h>
#include <string.h>

#define NO SL_GV_NONE

static uint32_t emit(const sl_grad_emitter *e, unsigned op, unsigned n_in, const uint32_t *in,
                     unsigned n_i, const int64_t *ia, unsigned n_f, const float *fa)
{
    return e->emit(e->ctx, op, n_in, in, n_i, ia, n_f, fa);
}

#define IN(...)                                                                                    \
    (sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t)), (const uint32_t[])               \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }

/* An op of the forward graph whose gradient flows from a scalar loss: its
 * output gradient must be the seed. */
static int need_seed(const sl_grad_args *a, char *err, size_t len)
{
    if (a->dout[0] == SL_GV_ONE)
        return SL_OK;
    snprintf(err, len,
             "%s: only the loss being differentiated may be a loss op's output (its gradient "
             "must be 1, not a tensor)",
             sl_op_get(a->op)->name);
    return SL_EUNSUPPORTED;
}

/* Every rule but the loss ops' refuses the seed: a scalar loss that feeds
 * other ops is not a loss. */
static int no_seed(const sl_grad_args *a, char *err, size_t len)
{
    for (unsigned o = 0; o < a->n_out; o++)
        if (a->dout[o] == SL_GV_ONE) {
            snprintf(err, len, "%s: differentiating its output as a loss is not supported",
                     sl_op_get(a->op)->name);
            return SL_EUNSUPPORTED;
        }
    return SL_OK;
}

static int failed(const sl_grad_args *a)
{
    for (unsigned i = 0; i < a->n_in; i++)
        if (a->want[i] && !a->accumulated[i] && a->din[i] == NO)
            return SL_EINVAL;
    return SL_OK;
}

/* The product's gradients. With y = op(a) @ op(b), for each transposition
 * the operands and flags of da and db are:
 *   (0,0): da = dy b^T,   db = a^T dy
 *   (1,0): da = b dy^T,   db = a dy
 *   (0,1): da = dy b,     db = dy^T a
 *   (1,1): da = b^T dy^T, db = dy^T a^T
 * b's comes first (a dense layer's weight), so its update can follow at
 * once. */
static int grad_matmul(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    bool ta = a->attrs->i[0] != 0, tb = a->attrs->i[1] != 0;
    uint32_t x = a->in[0], w = a->in[1], dy = a->dout[0];
    for (int k = 1; k >= 0; k--) {
        if (!a->want[k])
            continue;
        /* [k][transA][transB]: left is dy (0) or the other operand (1) */
        static const int8_t plan[2][2][2][3] = {
            {{{0, 0, 1}, {0, 0, 0}}, {{1, 0, 1}, {1, 1, 1}}},
            {{{1, 1, 0}, {0, 1, 0}}, {{1, 0, 0}, {0, 1, 1}}},
        };
        const int8_t *p = plan[k][ta][tb];
        uint32_t other = k == 0 ? w : x;
        uint32_t l = p[0] ? other : dy, r = p[0] ? dy : other;
        const int64_t t[2] = {p[1], p[2]};
        if (a->acc[k] != NO) {
            const float ab[2] = {1.0f, a->acc_beta[k]};
            emit(e, SL_OP_MATMUL_ACC, IN(l, r, a->acc[k]), 2, t, 2, ab);
            a->accumulated[k] = true;
        } else {
            a->din[k] = emit(e, SL_OP_MATMUL, IN(l, r), 2, t, 0, NULL);
        }
    }
    return failed(a);
}

/* y = x + b broadcast: dx = dy, db sums dy over what was broadcast. */
static int grad_bias(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    unsigned sum = a->op == SL_OP_BIAS_ADD ? SL_OP_BIAS_GRAD : SL_OP_CHANNEL_BIAS_GRAD;
    if (a->want[1])
        a->din[1] = emit(e, sum, IN(a->dout[0]), 0, NULL, 0, NULL);
    a->din[0] = a->dout[0];
    return failed(a);
}

/* Element-wise ops whose gradient is one op of (dy, some value). */
static int grad_unary(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    uint32_t dy = a->dout[0];
    switch (a->op) {
    case SL_OP_RELU:
        a->din[0] = emit(e, SL_OP_RELU_GRAD, IN(dy, a->in[0]), 0, NULL, 0, NULL);
        break;
    case SL_OP_RELU_MASK:
        /* the bits are all relu's gradient reads: x and y may die early */
        a->din[0] = emit(e, SL_OP_RELU_GRAD_MASK, IN(dy, a->out[1]), 0, NULL, 0, NULL);
        break;
    case SL_OP_SIGMOID:
        a->din[0] = emit(e, SL_OP_SIGMOID_GRAD, IN(dy, a->out[0]), 0, NULL, 0, NULL);
        break;
    case SL_OP_TANH:
        a->din[0] = emit(e, SL_OP_TANH_GRAD, IN(dy, a->out[0]), 0, NULL, 0, NULL);
        break;
    case SL_OP_SCALE:
        a->din[0] = emit(e, SL_OP_SCALE, IN(dy), 0, NULL, 1, a->attrs->f);
        break;
    case SL_OP_MUL_SCALAR: /* the factor itself gets no gradient */
        a->din[0] = emit(e, SL_OP_MUL_SCALAR, IN(dy, a->in[1]), 0, NULL, 0, NULL);
        break;
    default: /* copy */
        a->din[0] = dy;
        break;
    }
    return failed(a);
}

static int grad_binary(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    uint32_t dy = a->dout[0];
    switch (a->op) {
    case SL_OP_ADD:
        a->din[0] = a->din[1] = dy;
        break;
    case SL_OP_MUL:
        if (a->want[0])
            a->din[0] = emit(e, SL_OP_MUL, IN(dy, a->in[1]), 0, NULL, 0, NULL);
        if (a->want[1])
            a->din[1] = emit(e, SL_OP_MUL, IN(dy, a->in[0]), 0, NULL, 0, NULL);
        break;
    default: /* axpy: out = alpha * x + y */
        if (a->want[0])
            a->din[0] = emit(e, SL_OP_SCALE, IN(dy), 0, NULL, 1, a->attrs->f);
        a->din[1] = dy;
        break;
    }
    return failed(a);
}

static int grad_conv2d(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    uint32_t x = a->in[0], w = a->in[1], dy = a->dout[0];
    if (a->want[1])
        a->din[1] =
            emit(e, SL_OP_CONV2D_GRAD_FILTER, IN(dy, x, w), a->n_iattrs, a->attrs->i, 0, NULL);
    if (a->want[0])
        a->din[0] =
            emit(e, SL_OP_CONV2D_GRAD_INPUT, IN(dy, w, x), a->n_iattrs, a->attrs->i, 0, NULL);
    return failed(a);
}

static int grad_pool(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    uint32_t x = a->in[0], dy = a->dout[0];
    if (a->op == SL_OP_AVGPOOL) {
        a->din[0] = emit(e, SL_OP_AVGPOOL_GRAD, IN(dy, x), a->n_iattrs, a->attrs->i, 0, NULL);
        return failed(a);
    }
    /* maxpool_grad finds each window's maximum by comparing x with y. When
     * a ReLU alone reads y, it may compare with the ReLU's output instead:
     * they differ only where y <= 0, where the ReLU's gradient made dy 0,
     * and y itself can then die as early as the ReLU runs (in place). */
    uint32_t y = a->out[0], r;
    unsigned reader;
    if (e->sole_reader && e->sole_reader(e->ctx, y, &reader, &r) &&
        (reader == SL_OP_RELU || reader == SL_OP_RELU_MASK))
        y = r;
    a->din[0] = emit(e, SL_OP_MAXPOOL_GRAD, IN(dy, x, y), a->n_iattrs, a->attrs->i, 0, NULL);
    return failed(a);
}

static int grad_batchnorm(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    if (a->dout[1] != NO || a->dout[2] != NO) {
        snprintf(err, len, "batchnorm: its saved statistics are not differentiable");
        return SL_EUNSUPPORTED;
    }
    uint32_t dx = emit(e, SL_OP_BATCHNORM_GRAD,
                       IN(a->dout[0], a->in[0], a->in[1], a->out[1], a->out[2]), 0, NULL, 0, NULL);
    if (dx != NO) {
        a->din[0] = dx;
        a->din[1] = dx + 1;
        a->din[2] = dx + 2;
    }
    return failed(a);
}

static int grad_loss(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = need_seed(a, err, len);
    if (rc)
        return rc;
    switch (a->op) {
    case SL_OP_SOFTMAX_XENT:
        if (a->dout[1] != NO) {
            snprintf(err, len, "softmax_xent: its probs output is not differentiable");
            return SL_EUNSUPPORTED;
        }
        a->din[0] = emit(e, SL_OP_SOFTMAX_XENT_GRAD, IN(a->out[1], a->in[1]), 0, NULL, 0, NULL);
        break;
    case SL_OP_MSE_LOSS: {
        uint32_t d = emit(e, SL_OP_MSE_GRAD, IN(a->in[0], a->in[1]), 0, NULL, 0, NULL);
        if (a->want[0])
            a->din[0] = d;
        if (a->want[1]) {
            const float minus[1] = {-1.0f};
            a->din[1] = emit(e, SL_OP_SCALE, IN(d), 0, NULL, 1, minus);
        }
        break;
    }
    default: { /* reduce_sum, reduce_mean: every element's gradient is alike */
        sl_shape s;
        if (e->shape(e->ctx, a->in[0], &s) != SL_OK)
            return SL_EINVAL;
        float v = a->op == SL_OP_REDUCE_SUM ? 1.0f : (float) (1.0 / (double) sl_shape_elems(&s));
        a->din[0] = emit(e, SL_OP_FILL, IN(a->in[0]), 0, NULL, 1, &v);
        break;
    }
    }
    return failed(a);
}

/* A view's gradient is the gradient viewed in the input's shape. */
static int grad_reshape(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    sl_shape s;
    if (e->shape(e->ctx, a->in[0], &s) != SL_OK)
        return SL_EINVAL;
    int64_t dims[SL_MAX_DIMS];
    for (unsigned d = 0; d < s.ndim; d++)
        dims[d] = s.dims[d];
    a->din[0] = emit(e, SL_OP_RESHAPE, IN(a->dout[0]), s.ndim, dims, 0, NULL);
    return failed(a);
}

/* A conversion's gradient is the gradient converted back to the input's
 * dtype: under mixed precision a half-precision weight's gradient arrives
 * in f32, the master weight's dtype. */
static int grad_cast(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    sl_shape s, ds;
    if (e->shape(e->ctx, a->in[0], &s) != SL_OK || e->shape(e->ctx, a->dout[0], &ds) != SL_OK)
        return SL_EINVAL;
    if (ds.dtype == s.dtype) {
        a->din[0] = a->dout[0];
    } else {
        const int64_t to[1] = {s.dtype};
        a->din[0] = emit(e, SL_OP_CAST, IN(a->dout[0]), 1, to, 0, NULL);
    }
    return failed(a);
}

/* Ops whose inputs only give a shape: nothing flows back. */
static int grad_none(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    (void) e;
    return no_seed(a, err, len);
}

static const sl_op_grad_fn rules[SL_OP_COUNT] = {
    [SL_OP_FILL] = grad_none,           [SL_OP_COPY] = grad_unary,
    [SL_OP_ADD] = grad_binary,          [SL_OP_MUL] = grad_binary,
    [SL_OP_SCALE] = grad_unary,         [SL_OP_AXPY] = grad_binary,
    [SL_OP_MATMUL] = grad_matmul,       [SL_OP_BIAS_ADD] = grad_bias,
    [SL_OP_RELU] = grad_unary,          [SL_OP_RELU_MASK] = grad_unary,
    [SL_OP_SIGMOID] = grad_unary,       [SL_OP_TANH] = grad_unary,
    [SL_OP_CONV2D] = grad_conv2d,       [SL_OP_CHANNEL_BIAS_ADD] = grad_bias,
    [SL_OP_MAXPOOL] = grad_pool,        [SL_OP_AVGPOOL] = grad_pool,
    [SL_OP_BATCHNORM] = grad_batchnorm, [SL_OP_MSE_LOSS] = grad_loss,
    [SL_OP_SOFTMAX_XENT] = grad_loss,   [SL_OP_REDUCE_SUM] = grad_loss,
    [SL_OP_REDUCE_MEAN] = grad_loss,    [SL_OP_RESHAPE] = grad_reshape,
    [SL_OP_MUL_SCALAR] = grad_unary,    [SL_OP_CAST] = grad_cast,
};

sl_op_grad_fn sl_op_grad(unsigned id)
{
    return id < SL_OP_COUNT ? rules[id] : NULL;
}

bool sl_op_grad_input(unsigned id, unsigned i)
{
    const sl_op_def *d = sl_op_get(id);
    if (!d || !rules[id] || i >= d->n_in || (d->mutates >> i) & 1)
        return false;
    if (id == SL_OP_FILL || (id == SL_OP_SOFTMAX_XENT && i == 1) ||
        (id == SL_OP_MUL_SCALAR && i == 1))
        return false;
    return true;
}
