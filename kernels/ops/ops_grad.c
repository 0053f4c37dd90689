/* The gradient rules (ops_grad.h). Each rule emits the registry's own
 * gradient ops, so a training graph built by automatic differentiation
 * runs the same kernels, with the same arithmetic, as a backward pass
 * written by hand. */
#include "ops_grad.h"

#include "ops_axes.h"

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

/* g (a gradient of the broadcast shape) summed over the dims that were
 * broadcast to give `to`'s shape: reduce_axes over them, then a view in
 * `to`'s shape. g itself when nothing was broadcast. */
static uint32_t unbroadcast(const sl_grad_emitter *e, uint32_t g, uint32_t to)
{
    sl_shape gs, ts;
    if (g == NO || e->shape(e->ctx, g, &gs) != SL_OK || e->shape(e->ctx, to, &ts) != SL_OK)
        return NO;
    unsigned off = gs.ndim - ts.ndim;
    int64_t mask = 0;
    for (unsigned d = 0; d < gs.ndim; d++)
        if (d < off || (ts.dims[d - off] == 1 && gs.dims[d] != 1))
            mask |= (int64_t) 1 << d;
    if (mask == 0 && gs.ndim == ts.ndim)
        return g;
    if (mask) {
        const int64_t ra[2] = {SL_REDUCE_SUM, mask};
        g = emit(e, SL_OP_REDUCE_AXES, IN(g), 2, ra, 0, NULL);
    }
    int64_t dims[SL_MAX_DIMS];
    for (unsigned d = 0; d < ts.ndim; d++)
        dims[d] = ts.dims[d];
    return emit(e, SL_OP_RESHAPE, IN(g), ts.ndim, dims, 0, NULL);
}

/* Every output but the first must have no gradient (statistics, masks). */
static int only_first_output(const sl_grad_args *a, char *err, size_t len)
{
    for (unsigned o = 1; o < a->n_out; o++)
        if (a->dout[o] != NO) {
            snprintf(err, len, "%s: only its first output is differentiable",
                     sl_op_get(a->op)->name);
            return SL_EUNSUPPORTED;
        }
    return no_seed(a, err, len);
}

static int grad_ew_unary(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    a->din[0] =
        emit(e, SL_OP_EW_UNARY_GRAD, IN(a->dout[0], a->in[0]), 1, a->attrs->i, 2, a->attrs->f);
    return failed(a);
}

static int grad_layer_norm(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = only_first_output(a, err, len);
    if (rc)
        return rc;
    uint32_t dx =
        emit(e, SL_OP_LAYER_NORM_GRAD, IN(a->dout[0], a->in[0], a->in[1], a->out[1], a->out[2]), 1,
             a->attrs->i, 0, NULL);
    if (dx != NO) {
        a->din[0] = dx;
        a->din[1] = dx + 1;
        a->din[2] = dx + 2;
    }
    return failed(a);
}

static int grad_softmax_axis(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    a->din[0] =
        emit(e, SL_OP_SOFTMAX_AXIS_GRAD, IN(a->dout[0], a->out[0]), 2, a->attrs->i, 0, NULL);
    return failed(a);
}

/* gather along axis 0 is an embedding lookup: its gradient scatters dy
 * back into the table's rows. */
static int grad_gather(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    sl_shape xs;
    if (e->shape(e->ctx, a->in[0], &xs) != SL_OK)
        return SL_EINVAL;
    if (a->attrs->i[0] != 0) {
        snprintf(err, len, "gather: only a gather along axis 0 (an embedding) is differentiable");
        return SL_EUNSUPPORTED;
    }
    const int64_t ea[2] = {xs.dims[0], -1};
    a->din[0] = emit(e, SL_OP_EMBEDDING_GRAD, IN(a->dout[0], a->in[1]), 2, ea, 0, NULL);
    return failed(a);
}

/* where(cond, a, b): dy flows to a where cond holds, to b elsewhere. */
static int grad_where(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    uint32_t dy = a->dout[0];
    const float zero[1] = {0.0f};
    uint32_t z = emit(e, SL_OP_FILL, IN(dy), 0, NULL, 1, zero);
    if (a->want[1])
        a->din[1] =
            unbroadcast(e, emit(e, SL_OP_WHERE, IN(a->in[0], dy, z), 0, NULL, 0, NULL), a->in[1]);
    if (a->want[2])
        a->din[2] =
            unbroadcast(e, emit(e, SL_OP_WHERE, IN(a->in[0], z, dy), 0, NULL, 0, NULL), a->in[2]);
    return failed(a);
}

static int grad_masked_fill(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    const float zero[1] = {0.0f};
    a->din[0] = emit(e, SL_OP_MASKED_FILL, IN(a->dout[0], a->in[1]), 0, NULL, 1, zero);
    return failed(a);
}

static int grad_dropout(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = only_first_output(a, err, len);
    if (rc)
        return rc;
    const float scale[1] = {1.0f / (1.0f - a->attrs->f[0])};
    a->din[0] = emit(e, SL_OP_DROPOUT_GRAD, IN(a->dout[0], a->out[1]), 0, NULL, 1, scale);
    return failed(a);
}

/* y[b] = a[b] @ b[b]: da = dy b^T, db = a^T dy per batch, each summed over
 * the batch where its operand was broadcast from a batch of 1. */
static int grad_batch_matmul(const sl_grad_emitter *e, sl_grad_args *a, char *err, size_t len)
{
    int rc = no_seed(a, err, len);
    if (rc)
        return rc;
    uint32_t dy = a->dout[0];
    const int64_t swap[3] = {0, 2, 1};
    if (a->want[0]) {
        uint32_t bt = emit(e, SL_OP_TRANSPOSE, IN(a->in[1]), 3, swap, 0, NULL);
        a->din[0] =
            unbroadcast(e, emit(e, SL_OP_BATCH_MATMUL, IN(dy, bt), 0, NULL, 0, NULL), a->in[0]);
    }
    if (a->want[1]) {
        uint32_t at = emit(e, SL_OP_TRANSPOSE, IN(a->in[0]), 3, swap, 0, NULL);
        a->din[1] =
            unbroadcast(e, emit(e, SL_OP_BATCH_MATMUL, IN(at, dy), 0, NULL, 0, NULL), a->in[1]);
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
    [SL_OP_FILL] = grad_none,
    [SL_OP_COPY] = grad_unary,
    [SL_OP_ADD] = grad_binary,
    [SL_OP_MUL] = grad_binary,
    [SL_OP_SCALE] = grad_unary,
    [SL_OP_AXPY] = grad_binary,
    [SL_OP_MATMUL] = grad_matmul,
    [SL_OP_BIAS_ADD] = grad_bias,
    [SL_OP_RELU] = grad_unary,
    [SL_OP_RELU_MASK] = grad_unary,
    [SL_OP_SIGMOID] = grad_unary,
    [SL_OP_TANH] = grad_unary,
    [SL_OP_CONV2D] = grad_conv2d,
    [SL_OP_CHANNEL_BIAS_ADD] = grad_bias,
    [SL_OP_MAXPOOL] = grad_pool,
    [SL_OP_AVGPOOL] = grad_pool,
    [SL_OP_BATCHNORM] = grad_batchnorm,
    [SL_OP_MSE_LOSS] = grad_loss,
    [SL_OP_SOFTMAX_XENT] = grad_loss,
    [SL_OP_REDUCE_SUM] = grad_loss,
    [SL_OP_REDUCE_MEAN] = grad_loss,
    [SL_OP_RESHAPE] = grad_reshape,
    [SL_OP_MUL_SCALAR] = grad_unary,
    [SL_OP_CAST] = grad_cast,
    [SL_OP_EW_UNARY] = grad_ew_unary,
    [SL_OP_LAYER_NORM] = grad_layer_norm,
    [SL_OP_SOFTMAX_AXIS] = grad_softmax_axis,
    [SL_OP_GATHER] = grad_gather,
    [SL_OP_WHERE] = grad_where,
    [SL_OP_MASKED_FILL] = grad_masked_fill,
    [SL_OP_DROPOUT] = grad_dropout,
    [SL_OP_BATCH_MATMUL] = grad_batch_matmul,
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
    /* shapes only, labels, indices, masks and seeds */
    if (id == SL_OP_FILL || (id == SL_OP_SOFTMAX_XENT && i == 1) ||
        (id == SL_OP_MUL_SCALAR && i == 1) || (id == SL_OP_GATHER && i == 1) ||
        (id == SL_OP_WHERE && i == 0) || (id == SL_OP_MASKED_FILL && i == 1) ||
        (id == SL_OP_DROPOUT && i == 1))
        return false;
    return true;
}
