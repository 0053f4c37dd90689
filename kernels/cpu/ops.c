/* cpu kernels: the dispatch table, GEMM (gemm.c) in row bands, and the
 * element-wise and optimiser ops as plain loops over the per-element math of
 * elementwise.h. Losses and reductions are in loss.c, normalisation in
 * norm.c, convolution and pooling in conv.c and pool.c. Shapes were
 * validated by the registry; kernels trust them. Reductions accumulate in
 * double. Calls with bf16 or f16 tensors go to half.c, which runs most of
 * them on these f32 kernels. */
#include "cpu.h"

#include "elementwise.h"
#include "half.h"
#include "sl_error.h"
#include "sum.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <limits.h>
#include <math.h>
#include <string.h>

static inline float *f32(const sl_tensor_ref *t)
{
    return t->data;
}

/* Any float dtype: a half output is filled with the value rounded once. */
static int k_fill(const sl_op_call *c)
{
    float v = c->attrs.f[0];
    unsigned dt = c->out[0].shape.dtype;
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    if (dt == SL_BF16 || dt == SL_F16) {
        uint16_t *y = c->out[0].data, h = dt == SL_BF16 ? sl_bf16_from_f32(v) : sl_f16_from_f32(v);
        for (uint64_t i = 0; i < n; i++)
            y[i] = h;
        return SL_OK;
    }
    float *y = f32(&c->out[0]);
    for (uint64_t i = 0; i < n; i++)
        y[i] = v;
    return SL_OK;
}

static int k_copy(const sl_op_call *c)
{
    memmove(c->out[0].data, c->in[0].data, sl_shape_bytes(&c->out[0].shape));
    return SL_OK;
}

static int k_add(const sl_op_call *c)
{
    const float *a = f32(&c->in[0]), *b = f32(&c->in[1]);
    float *y = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        y[i] = sl_ew_add(a[i], b[i]);
    return SL_OK;
}

static int k_scale(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]);
    float *y = f32(&c->out[0]), alpha = c->attrs.f[0];
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        y[i] = sl_ew_scale(x[i], alpha);
    return SL_OK;
}

/* One GEMM as cblas takes it: C[m, n] = alpha op(A) op(B) + beta C. */
struct gemm {
    bool ta, tb;
    int m, n, k, lda, ldb;
    float alpha, beta;
    const float *a, *b;
    float *c;
};

/* matmul (C = the output, beta 0) or matmul_acc (C = in2, updated in
 * place; C is not read when beta is 0), so no product tensor
 * exists for the accumulating form. sl_cpu_op_check made sure every
 * dimension fits in int. */
static struct gemm gemm_of(const sl_op_call *c)
{
    bool acc = c->op == SL_OP_MATMUL_ACC;
    const sl_shape *a = &c->in[0].shape, *out = acc ? &c->in[2].shape : &c->out[0].shape;
    struct gemm g = {
        .ta = c->attrs.i[0] != 0,
        .tb = c->attrs.i[1] != 0,
        .m = (int) out->dims[0],
        .n = (int) out->dims[1],
        .k = (int) a->dims[c->attrs.i[0] ? 0 : 1],
        .lda = (int) a->dims[1],
        .ldb = (int) c->in[1].shape.dims[1],
        .alpha = acc ? c->attrs.f[0] : 1.0f,
        .beta = acc ? c->attrs.f[1] : 0.0f,
        .a = f32(&c->in[0]),
        .b = f32(&c->in[1]),
        .c = f32(acc ? &c->in[2] : &c->out[0]),
    };
    return g;
}

/* Rows [r0, r1) of g's C: they need only the matching rows of op(A). */
static void gemm_rows(const struct gemm *g, int r0, int r1)
{
    if (r1 <= r0)
        return;
    const float *a = g->ta ? g->a + r0 : g->a + (size_t) r0 * (size_t) g->lda;
    sl_cpu_sgemm(g->ta, g->tb, r1 - r0, g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb, g->beta,
                 g->c + (size_t) r0 * (size_t) g->n, g->n);
}

static int k_matmul(const sl_op_call *c)
{
    struct gemm g = gemm_of(c);
    gemm_rows(&g, 0, g.m);
    return SL_OK;
}

/* A GEMM big enough to pay for a second thread is cut into bands of C's
 * rows, one per thread of the team (team.c), each a single-threaded GEMM
 * call: a library's own threads would be sized for the process (OpenBLAS)
 * or sleep between ops (OpenMP), and lanes must not change each other's.
 * The bands share no output: each element of C comes from one call over
 * the whole of K. */
static void gemm_band(void *arg, int part, int parts)
{
    const struct gemm *g = arg;
    gemm_rows(g, (int) ((int64_t) g->m * part / parts),
              (int) ((int64_t) g->m * (part + 1) / parts));
}

static int matmul_threads(const sl_op_call *c, int threads)
{
    struct gemm g = gemm_of(c);
    sl_cpu_parallel(threads < g.m ? threads : g.m, gemm_band, &g);
    return SL_OK;
}

static int k_bias_add(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]), *bias = f32(&c->in[1]);
    float *y = f32(&c->out[0]);
    uint64_t rows = (uint64_t) c->in[0].shape.dims[0], cols = (uint64_t) c->in[0].shape.dims[1];
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t j = 0; j < cols; j++)
            y[r * cols + j] = sl_ew_add(x[r * cols + j], bias[j]);
    return SL_OK;
}

static int k_bias_grad(const sl_op_call *c)
{
    const float *dy = f32(&c->in[0]);
    float *db = f32(&c->out[0]);
    uint64_t rows = (uint64_t) c->in[0].shape.dims[0], cols = (uint64_t) c->in[0].shape.dims[1];
    sl_cpu_col_sums(dy, rows, cols, 0, cols, 1.0, db);
    return SL_OK;
}

static int k_relu(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]);
    float *y = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        y[i] = sl_ew_relu(x[i]);
    return SL_OK;
}

/* relu_mask and relu_grad_mask over whole 32-element words. Written with
 * SSE2 (part of x86-64) because GCC leaves the bit packing scalar: a shift
 * and an or per element made these two ops a fifth of a small CNN's
 * training step. The per-element math is elementwise.h's: y = x < 0 ? 0 : x
 * (NaN and -0 pass through), bit = x > 0. */
#ifdef __SSE2__
static uint32_t relu_mask_word32(float *y, const float *x)
{
    const __m128 zero = _mm_setzero_ps();
    uint32_t word = 0;
    for (int k = 0; k < 32; k += 4) {
        __m128 v = _mm_loadu_ps(x + k);
        word |= (uint32_t) _mm_movemask_ps(_mm_cmpgt_ps(v, zero)) << k;
        _mm_storeu_ps(y + k, _mm_andnot_ps(_mm_cmplt_ps(v, zero), v));
    }
    return word;
}

static void relu_grad_word32(float *dx, const float *dy, uint32_t word)
{
    const __m128i lanes = _mm_set_epi32(8, 4, 2, 1);
    __m128i w = _mm_set1_epi32((int) word);
    for (int k = 0; k < 32; k += 4) {
        __m128i bit = _mm_slli_epi32(lanes, k);
        __m128i on = _mm_cmpeq_epi32(_mm_and_si128(w, bit), bit);
        _mm_storeu_ps(dx + k, _mm_and_ps(_mm_castsi128_ps(on), _mm_loadu_ps(dy + k)));
    }
}
#else
static uint32_t relu_mask_word32(float *y, const float *x)
{
    return sl_ew_relu_mask_word(y, x, 32, 0);
}

static void relu_grad_word32(float *dx, const float *dy, uint32_t word)
{
    for (int k = 0; k < 32; k++)
        dx[k] = sl_ew_relu_grad_bit(dy[k], word >> k);
}
#endif

static int k_relu_mask(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]);
    float *y = f32(&c->out[0]);
    uint32_t *bits = c->out[1].data;
    uint64_t n = sl_shape_elems(&c->in[0].shape), full = n / 32;
    for (uint64_t w = 0; w < full; w++)
        bits[w] = relu_mask_word32(y + w * 32, x + w * 32);
    if (full * 32 < n)
        bits[full] = sl_ew_relu_mask_word(y, x, n, full);
    return SL_OK;
}

static int k_relu_grad_mask(const sl_op_call *c)
{
    const float *dy = f32(&c->in[0]);
    const uint32_t *bits = c->in[1].data;
    float *dx = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->in[0].shape), full = n / 32;
    for (uint64_t w = 0; w < full; w++)
        relu_grad_word32(dx + w * 32, dy + w * 32, bits[w]);
    for (uint64_t i = full * 32; i < n; i++)
        dx[i] = sl_ew_relu_grad_bit(dy[i], bits[i / 32] >> (i % 32));
    return SL_OK;
}

static int k_relu_grad(const sl_op_call *c)
{
    const float *dy = f32(&c->in[0]), *x = f32(&c->in[1]);
    float *dx = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        dx[i] = sl_ew_relu_grad(dy[i], x[i]);
    return SL_OK;
}

static int k_mse_loss(const sl_op_call *c)
{
    const float *p = f32(&c->in[0]), *t = f32(&c->in[1]);
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    double sum = 0.0;
    for (uint64_t i = 0; i < n; i++)
        sum += sl_ew_sq_err(p[i], t[i]);
    *f32(&c->out[0]) = (float) (sum / (double) n);
    return SL_OK;
}

static int k_mse_grad(const sl_op_call *c)
{
    const float *p = f32(&c->in[0]), *t = f32(&c->in[1]);
    float *g = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    float two_over_n = (float) (2.0 / (double) n);
    for (uint64_t i = 0; i < n; i++)
        g[i] = sl_ew_mse_grad(p[i], t[i], two_over_n);
    return SL_OK;
}

/* The optimizer updates are also written over a range [i0, i1) of the
 * parameter's elements: they touch every parameter byte of a model once per
 * iteration, and sl_cpu_run_op splits a large one across the team. */
/* The learning rate: f[0], times the rate tensor that the _lr variants
 * take as their last input (base: the plain op's input count). */
static float lr_of(const sl_op_call *c, unsigned base)
{
    return c->n_in > base ? c->attrs.f[0] * *f32(&c->in[base]) : c->attrs.f[0];
}

static void r_sgd_update(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    float *w = f32(&c->in[0]), lr = lr_of(c, 2);
    const float *g = f32(&c->in[1]);
    for (uint64_t i = i0; i < i1; i++)
        w[i] = sl_ew_sgd(w[i], g[i], lr);
}

static int k_sgd_update(const sl_op_call *c)
{
    r_sgd_update(c, 0, sl_shape_elems(&c->in[0].shape));
    return SL_OK;
}

static int k_mul(const sl_op_call *c)
{
    const float *a = f32(&c->in[0]), *b = f32(&c->in[1]);
    float *y = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        y[i] = sl_ew_mul(a[i], b[i]);
    return SL_OK;
}

static int k_axpy(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]), *b = f32(&c->in[1]);
    float *y = f32(&c->out[0]), alpha = c->attrs.f[0];
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        y[i] = sl_ew_axpy(x[i], b[i], alpha);
    return SL_OK;
}

static int k_mul_scalar(const sl_op_call *c)
{
    const float *x = f32(&c->in[0]);
    float *y = f32(&c->out[0]), s = f32(&c->in[1])[0];
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        y[i] = x[i] * s;
    return SL_OK;
}

static int k_add_scalar(const sl_op_call *c)
{
    float *x = f32(&c->in[0]), v = c->attrs.f[0];
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    for (uint64_t i = 0; i < n; i++)
        x[i] = sl_ew_add(x[i], v);
    return SL_OK;
}

/* sigmoid, tanh and sigmoid's gradient over a range [i0, i1): activations
 * are as large as the layers they follow, so sl_cpu_run_op splits a large
 * one across the team like the optimizer updates. */
static void r_sigmoid(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    sl_cpu_vsigmoid(f32(&c->in[0]) + i0, f32(&c->out[0]) + i0, i1 - i0);
}

static void r_tanh(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    sl_cpu_vtanh(f32(&c->in[0]) + i0, f32(&c->out[0]) + i0, i1 - i0);
}

static void r_sigmoid_grad(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    const float *dy = f32(&c->in[0]), *y = f32(&c->in[1]);
    float *dx = f32(&c->out[0]);
    for (uint64_t i = i0; i < i1; i++)
        dx[i] = sl_ew_sigmoid_grad(dy[i], y[i]);
}

static int k_sigmoid(const sl_op_call *c)
{
    r_sigmoid(c, 0, sl_shape_elems(&c->out[0].shape));
    return SL_OK;
}

static int k_sigmoid_grad(const sl_op_call *c)
{
    r_sigmoid_grad(c, 0, sl_shape_elems(&c->out[0].shape));
    return SL_OK;
}

static int k_tanh(const sl_op_call *c)
{
    r_tanh(c, 0, sl_shape_elems(&c->out[0].shape));
    return SL_OK;
}

static int k_tanh_grad(const sl_op_call *c)
{
    const float *dy = f32(&c->in[0]), *y = f32(&c->in[1]);
    float *dx = f32(&c->out[0]);
    uint64_t n = sl_shape_elems(&c->out[0].shape);
    for (uint64_t i = 0; i < n; i++)
        dx[i] = sl_ew_tanh_grad(dy[i], y[i]);
    return SL_OK;
}

static void r_momentum_update(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    float *p = f32(&c->in[0]), *v = f32(&c->in[2]);
    const float *g = f32(&c->in[1]);
    float lr = lr_of(c, 3), momentum = c->attrs.f[1], wd = c->attrs.f[2];
    for (uint64_t i = i0; i < i1; i++)
        p[i] = sl_ew_momentum(p[i], g[i], &v[i], lr, momentum, wd);
}

static int k_momentum_update(const sl_op_call *c)
{
    r_momentum_update(c, 0, sl_shape_elems(&c->in[0].shape));
    return SL_OK;
}

/* The step count lives in device memory (add_scalar advances it), so it can
 * only be checked when the op runs: before the first step the bias
 * corrections would divide by zero. */
static bool adam_step_ok(const sl_op_call *c)
{
    float t = *f32(&c->in[4]);
    return t >= 1.0f && isfinite(t);
}

static void r_adam_update(const sl_op_call *c, uint64_t i0, uint64_t i1)
{
    float *p = f32(&c->in[0]), *m = f32(&c->in[2]), *v = f32(&c->in[3]);
    const float *g = f32(&c->in[1]);
    float lr = lr_of(c, 5), b1 = c->attrs.f[1], b2 = c->attrs.f[2], eps = c->attrs.f[3];
    float t = *f32(&c->in[4]);
    sl_cpu_adam_k k = {lr,
                       b1,
                       b2,
                       eps,
                       (float) (1.0 - pow(b1, t)),
                       (float) (1.0 - pow(b2, t)),
                       1.0f - lr * c->attrs.f[4]};
    sl_cpu_vadam(p + i0, g + i0, m + i0, v + i0, i1 - i0, &k);
}

static int k_adam_update(const sl_op_call *c)
{
    if (!adam_step_ok(c))
        return SL_EINVAL;
    r_adam_update(c, 0, sl_shape_elems(&c->in[0].shape));
    return SL_OK;
}

static int k_maxpool_grad(const sl_op_call *c)
{
    return sl_cpu_maxpool_grad(c, 1);
}

/* salusd aliases reshape's output to its input and never launches it; a
 * launch that does arrive copies, which is what a view means. */
static int k_reshape(const sl_op_call *c)
{
    if (c->out[0].data != c->in[0].data)
        memmove(c->out[0].data, c->in[0].data, sl_shape_bytes(&c->in[0].shape));
    return SL_OK;
}

/* Ops run by conv.c through oneDNN: they need the stream's context. */
bool sl_cpu_op_uses_dnnl(unsigned op)
{
    switch (op) {
    case SL_OP_CONV2D:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CONV2D_GRAD_FILTER:
    case SL_OP_MAXPOOL:
    case SL_OP_AVGPOOL:
    case SL_OP_AVGPOOL_GRAD:
        return true;
    default:
        return false;
    }
}

static int k_cast(const sl_op_call *c);
static int k_train(const sl_op_call *c);

/* The ops along axes' entry in the table: sl_cpu_run_op_f32 gives them
 * the team. */
static int k_axes(const sl_op_call *c)
{
    return sl_cpu_axes_op(c, 1);
}

/* softmax's: the same. */
static int k_softmax(const sl_op_call *c)
{
    return sl_cpu_softmax(c, 1);
}

/* On one thread; sl_cpu_run_op_f32 gives it the team. */
static int k_batchnorm(const sl_op_call *c)
{
    return sl_cpu_batchnorm_op(c, 1);
}

static int (*const kernels[SL_OP_COUNT])(const sl_op_call *) = {
    [SL_OP_FILL] = k_fill,
    [SL_OP_COPY] = k_copy,
    [SL_OP_ADD] = k_add,
    [SL_OP_SCALE] = k_scale,
    [SL_OP_MATMUL] = k_matmul,
    [SL_OP_BIAS_ADD] = k_bias_add,
    [SL_OP_BIAS_GRAD] = k_bias_grad,
    [SL_OP_RELU] = k_relu,
    [SL_OP_RELU_GRAD] = k_relu_grad,
    [SL_OP_RELU_MASK] = k_relu_mask,
    [SL_OP_RELU_GRAD_MASK] = k_relu_grad_mask,
    [SL_OP_MSE_LOSS] = k_mse_loss,
    [SL_OP_MSE_GRAD] = k_mse_grad,
    [SL_OP_SGD_UPDATE] = k_sgd_update,
    [SL_OP_SGD_UPDATE_LR] = k_sgd_update,
    [SL_OP_MUL] = k_mul,
    [SL_OP_AXPY] = k_axpy,
    [SL_OP_ADD_SCALAR] = k_add_scalar,
    [SL_OP_MUL_SCALAR] = k_mul_scalar,
    [SL_OP_SIGMOID] = k_sigmoid,
    [SL_OP_SIGMOID_GRAD] = k_sigmoid_grad,
    [SL_OP_TANH] = k_tanh,
    [SL_OP_TANH_GRAD] = k_tanh_grad,
    [SL_OP_CHANNEL_BIAS_ADD] = sl_cpu_channel_bias_add,
    [SL_OP_CHANNEL_BIAS_GRAD] = sl_cpu_channel_bias_grad,
    [SL_OP_MAXPOOL_GRAD] = k_maxpool_grad,
    [SL_OP_SOFTMAX] = k_softmax,
    [SL_OP_BATCHNORM] = k_batchnorm,
    [SL_OP_BATCHNORM_INFER] = k_batchnorm,
    [SL_OP_BATCHNORM_GRAD] = k_batchnorm,
    [SL_OP_SOFTMAX_XENT] = sl_cpu_softmax_xent,
    [SL_OP_SOFTMAX_XENT_GRAD] = sl_cpu_softmax_xent_grad,
    [SL_OP_REDUCE_SUM] = sl_cpu_reduce_sum,
    [SL_OP_REDUCE_MEAN] = sl_cpu_reduce_mean,
    [SL_OP_ARGMAX] = sl_cpu_argmax,
    [SL_OP_MOMENTUM_UPDATE] = k_momentum_update,
    [SL_OP_MOMENTUM_UPDATE_LR] = k_momentum_update,
    [SL_OP_ADAM_UPDATE] = k_adam_update,
    [SL_OP_ADAM_UPDATE_LR] = k_adam_update,
    [SL_OP_RESHAPE] = k_reshape,
    [SL_OP_MATMUL_ACC] = k_matmul,
    [SL_OP_EW_BINARY] = k_axes,
    [SL_OP_EW_UNARY] = k_axes,
    [SL_OP_TRANSPOSE] = k_axes,
    [SL_OP_SLICE] = k_axes,
    [SL_OP_CONCAT] = k_axes,
    [SL_OP_GATHER] = k_axes,
    [SL_OP_INDEX_WRITE] = k_axes,
    [SL_OP_REDUCE_AXES] = k_axes,
    [SL_OP_LOG_SOFTMAX] = k_axes,
    [SL_OP_BATCH_MATMUL] = k_axes,
    [SL_OP_CAST] = k_cast,
    [SL_OP_AMP_UNSCALE] = sl_cpu_amp_unscale,
    [SL_OP_AMP_COMMIT] = sl_cpu_amp_commit,
    [SL_OP_AMP_SCALE_UPDATE] = sl_cpu_amp_scale_update,
    [SL_OP_LAYER_NORM] = k_train,
    [SL_OP_LAYER_NORM_GRAD] = k_train,
    [SL_OP_EW_UNARY_GRAD] = k_train,
    [SL_OP_SOFTMAX_AXIS] = k_train,
    [SL_OP_SOFTMAX_AXIS_GRAD] = k_train,
    [SL_OP_EMBEDDING_GRAD] = k_train,
    [SL_OP_WHERE] = k_axes,
    [SL_OP_MASKED_FILL] = k_axes,
    [SL_OP_COMPARE] = k_axes,
    [SL_OP_DROPOUT] = k_train,
    [SL_OP_DROPOUT_GRAD] = k_train,
};

static bool dims_fit_int(const sl_tensor_ref *t, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        for (unsigned d = 0; d < t[i].shape.ndim && d < SL_MAX_DIMS; d++)
            if (t[i].shape.dims[d] > INT_MAX)
                return false;
    return true;
}

int sl_cpu_op_check(const sl_op_call *call)
{
    const sl_op_def *def = sl_op_get(call->op);
    if (!def || (!kernels[call->op] && !sl_cpu_op_uses_dnnl(call->op)))
        return SL_EUNSUPPORTED;
    if (call->n_in != def->n_in || call->n_out != def->n_out)
        return SL_EINVAL;
    /* cblas takes int dimensions; oneDNN's kernels index with int; argmax
     * writes i32 column indices. */
    if ((call->op == SL_OP_MATMUL || call->op == SL_OP_MATMUL_ACC || call->op == SL_OP_ARGMAX ||
         call->op == SL_OP_BATCH_MATMUL || sl_cpu_op_uses_dnnl(call->op)) &&
        (!dims_fit_int(call->in, call->n_in) || !dims_fit_int(call->out, call->n_out)))
        return SL_EUNSUPPORTED;
    return SL_OK;
}

/* The ops with a range form, and one thread's range of them. */
typedef void (*range_fn)(const sl_op_call *c, uint64_t i0, uint64_t i1);
static const range_fn ranges[SL_OP_COUNT] = {
    [SL_OP_SGD_UPDATE] = r_sgd_update,      [SL_OP_MOMENTUM_UPDATE] = r_momentum_update,
    [SL_OP_ADAM_UPDATE] = r_adam_update,    [SL_OP_SIGMOID] = r_sigmoid,
    [SL_OP_SIGMOID_GRAD] = r_sigmoid_grad,  [SL_OP_TANH] = r_tanh,
    [SL_OP_SGD_UPDATE_LR] = r_sgd_update,   [SL_OP_MOMENTUM_UPDATE_LR] = r_momentum_update,
    [SL_OP_ADAM_UPDATE_LR] = r_adam_update,
};

struct range_job {
    const sl_op_call *c;
    uint64_t n;
};

/* Part `part` of the elements, cut on 64-byte boundaries so two threads
 * never write one cache line. */
static void range_part(void *arg, int part, int parts)
{
    const struct range_job *j = arg;
    uint64_t lines = (j->n + 15) / 16;
    uint64_t i0 = lines * (uint64_t) part / (uint64_t) parts * 16;
    uint64_t i1 = lines * (uint64_t) (part + 1) / (uint64_t) parts * 16;
    ranges[j->c->op](j->c, i0, i1 < j->n ? i1 : j->n);
}

/* cast's entry in the table: sl_cpu_run_op gives it the team. */
static int k_cast(const sl_op_call *c)
{
    sl_cpu_exec one = {.threads = 1};
    return sl_cpu_cast(&one, c);
}

/* The training ops' entry in the table: sl_cpu_run_op_f32 gives them the
 * team. */
static int k_train(const sl_op_call *c)
{
    sl_cpu_exec one = {.threads = 1};
    return sl_cpu_train_op(&one, c);
}

int sl_cpu_run_op(sl_cpu_exec *x, const sl_op_call *call)
{
    if (call->op == SL_OP_CAST)
        return sl_cpu_cast(x, call);
    if (sl_cpu_call_half(call))
        return sl_cpu_half_op(x, call);
    return sl_cpu_run_op_f32(x, call);
}

int sl_cpu_run_op_f32(sl_cpu_exec *x, const sl_op_call *call)
{
    if (sl_cpu_op_uses_dnnl(call->op))
        return sl_cpu_dnnl_op(x, call);
    if ((call->op == SL_OP_MATMUL || call->op == SL_OP_MATMUL_ACC) && x->threads > 1) {
        struct gemm g = gemm_of(call);
        if (2ull * (uint64_t) g.m * (uint64_t) g.n * (uint64_t) g.k >= SL_CPU_TEAM_MIN_FLOPS)
            return matmul_threads(call, x->threads);
    }
    if (sl_cpu_is_train_op(call->op))
        return sl_cpu_train_op(x, call);
    if (kernels[call->op] == k_axes)
        return sl_cpu_axes_op(call, x->threads);
    if (call->op == SL_OP_SOFTMAX)
        return sl_cpu_softmax(call, x->threads);
    if (call->op == SL_OP_BATCHNORM || call->op == SL_OP_BATCHNORM_INFER ||
        call->op == SL_OP_BATCHNORM_GRAD)
        return sl_cpu_batchnorm_op(call, x->threads);
    if (call->op == SL_OP_MAXPOOL_GRAD)
        return sl_cpu_maxpool_grad(call, x->threads);
    if (ranges[call->op] && x->threads > 1) {
        struct range_job j = {call, sl_shape_elems(&call->in[0].shape)};
        if (j.n >= SL_CPU_TEAM_MIN_ELEMS) {
            if ((call->op == SL_OP_ADAM_UPDATE || call->op == SL_OP_ADAM_UPDATE_LR) &&
                !adam_step_ok(call))
                return SL_EINVAL;
            sl_cpu_parallel(x->threads, range_part, &j);
            return SL_OK;
        }
    }
    return kernels[call->op](call);
}
