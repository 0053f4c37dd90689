/* cpu kernels: GEMM through OpenBLAS, everything else as plain loops over the
 * per-element math of elementwise.h. Shapes were validated by the registry;
 * kernels trust them. Reductions accumulate in double. */
#include "cpu.h"

#include "elementwise.h"
#include "sl_error.h"

#include <cblas.h>
#include <limits.h>
#include <string.h>

/* Columns summed at once by bias_grad: the accumulators stay in registers or
 * L1 while the rows stream by. */
#define BIAS_GRAD_BLOCK 64

static inline float *f32(const sl_tensor_ref *t)
{
    return t->data;
}

static int k_fill(const sl_op_call *c)
{
    float *y = f32(&c->out[0]), v = c->attrs.f[0];
    uint64_t n = sl_shape_elems(&c->out[0].shape);
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

static int k_matmul(const sl_op_call *c)
{
    bool ta = c->attrs.i[0], tb = c->attrs.i[1];
    const sl_shape *a = &c->in[0].shape, *b = &c->in[1].shape;
    /* sl_cpu_op_check made sure every dimension fits in int. */
    int m = (int) c->out[0].shape.dims[0], n = (int) c->out[0].shape.dims[1];
    int k = (int) a->dims[ta ? 0 : 1];
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, 1.0f, f32(&c->in[0]), (int) a->dims[1], f32(&c->in[1]), (int) b->dims[1], 0.0f,
                f32(&c->out[0]), n);
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
    for (uint64_t j0 = 0; j0 < cols; j0 += BIAS_GRAD_BLOCK) {
        uint64_t w = cols - j0 < BIAS_GRAD_BLOCK ? cols - j0 : BIAS_GRAD_BLOCK;
        double acc[BIAS_GRAD_BLOCK] = {0};
        for (uint64_t r = 0; r < rows; r++)
            for (uint64_t j = 0; j < w; j++)
                acc[j] += dy[r * cols + j0 + j];
        for (uint64_t j = 0; j < w; j++)
            db[j0 + j] = (float) acc[j];
    }
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

static int k_sgd_update(const sl_op_call *c)
{
    float *w = f32(&c->in[0]), lr = c->attrs.f[0];
    const float *g = f32(&c->in[1]);
    uint64_t n = sl_shape_elems(&c->in[0].shape);
    for (uint64_t i = 0; i < n; i++)
        w[i] = sl_ew_sgd(w[i], g[i], lr);
    return SL_OK;
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
    [SL_OP_MSE_LOSS] = k_mse_loss,
    [SL_OP_MSE_GRAD] = k_mse_grad,
    [SL_OP_SGD_UPDATE] = k_sgd_update,
};

int sl_cpu_op_check(const sl_op_call *call)
{
    const sl_op_def *def = sl_op_get(call->op);
    if (!def || !kernels[call->op])
        return SL_EUNSUPPORTED;
    if (call->n_in != def->n_in || call->n_out != def->n_out)
        return SL_EINVAL;
    if (call->op == SL_OP_MATMUL) {
        /* cblas takes int dimensions. */
        const int64_t *a = call->in[0].shape.dims, *b = call->in[1].shape.dims;
        if (a[0] > INT_MAX || a[1] > INT_MAX || b[0] > INT_MAX || b[1] > INT_MAX)
            return SL_EUNSUPPORTED;
    }
    return SL_OK;
}

int sl_cpu_run_op(const sl_op_call *call)
{
    return kernels[call->op](call);
}
