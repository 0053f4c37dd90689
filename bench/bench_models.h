/* Models for the memory benchmarks (packing, ephemeral_bind, churn), built
 * from their layer tables: the parameter tensors (persistent memory) and
 * the tensors one iteration creates (ephemeral memory) with their live
 * ranges, so that sl_mem_plan gives the real planned peak.
 *
 * The graph model: float32; a convolution or dense layer is one op with its
 * bias or batch norm and ReLU fused (as inference engines run them), so it
 * creates one output tensor; batch norm keeps four parameter tensors (scale,
 * shift, mean, variance). An inference iteration is the forward pass; its
 * input batch is ephemeral too. A training iteration adds the backward pass
 * in reverse order, dataflow style: every op's backward step reads its
 * saved inputs, its output and the gradient of its output, creates the
 * gradients of its inputs (accumulated in place when a tensor feeds two
 * ops, as in a residual block) and of its parameters, and each parameter
 * gradient is consumed by its optimizer update one step later. Training
 * keeps momentum (one more tensor per parameter) as persistent state.
 * Workspaces (im2col, cuDNN) are framework memory, not part of the plan.
 *
 * Header-only; benchmarks are separate programs. */
#ifndef SL_BENCH_MODELS_H
#define SL_BENCH_MODELS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define BM_MAX_PARAMS 1024
#define BM_MAX_BUFS 4096
#define BM_MAX_OPS 512

typedef struct bm_op {
    int in[2], n_in;
    int out;
    int first_param, n_params;
} bm_op;

typedef struct bm_net {
    char name[32];
    uint64_t batch;
    bool training;
    uint64_t params[BM_MAX_PARAMS]; /* parameter tensor sizes, bytes */
    size_t n_params;
    sl_plan_buf bufs[BM_MAX_BUFS]; /* ephemeral tensors of one iteration */
    bool needs_grad[BM_MAX_BUFS];
    size_t n_bufs;
    bm_op ops[BM_MAX_OPS];
    size_t n_ops;
    uint32_t step;
    /* per-sample shape of the current activation */
    uint64_t c, h, w;
    int x; /* current activation buffer */
} bm_net;

static inline int bm_buf(bm_net *n, uint64_t bytes, bool needs_grad)
{
    if (n->n_bufs == BM_MAX_BUFS)
        abort(); /* a model table bug, not an input */
    n->bufs[n->n_bufs] = (sl_plan_buf){bytes, n->step, n->step};
    n->needs_grad[n->n_bufs] = needs_grad;
    return (int) n->n_bufs++;
}

static inline void bm_use(bm_net *n, int b)
{
    if (n->bufs[b].last < n->step)
        n->bufs[b].last = n->step;
}

/* One forward op reading in[0..n_in) and making out_elems per sample. */
static inline int bm_fwd(bm_net *n, const int *in, int n_in, uint64_t out_elems,
                         const uint64_t *param_elems, int n_par)
{
    if (n->n_ops == BM_MAX_OPS || n->n_params + (size_t) n_par > BM_MAX_PARAMS)
        abort();
    n->step++;
    bm_op *op = &n->ops[n->n_ops++];
    op->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        op->in[i] = in[i];
        bm_use(n, in[i]);
    }
    op->first_param = (int) n->n_params;
    op->n_params = n_par;
    for (int i = 0; i < n_par; i++)
        n->params[n->n_params++] = param_elems[i] * 4;
    op->out = bm_buf(n, out_elems * 4 * n->batch, true);
    return op->out;
}

static inline void bm_begin(bm_net *n, const char *name, uint64_t batch, bool training, uint64_t c,
                            uint64_t h, uint64_t w)
{
    memset(n, 0, sizeof(*n));
    strncpy(n->name, name, sizeof(n->name) - 1);
    n->batch = batch;
    n->training = training;
    n->c = c;
    n->h = h;
    n->w = w;
    n->x = bm_buf(n, c * h * w * 4 * batch, false);
}

/* Convolution k x k (same padding when pad), with batch norm (4 parameter
 * tensors) or a bias, ReLU fused. */
static inline void bm_conv(bm_net *n, uint64_t cout, uint64_t k, uint64_t stride, bool bn)
{
    uint64_t pad = k / 2;
    n->h = (n->h + 2 * pad - k) / stride + 1;
    n->w = (n->w + 2 * pad - k) / stride + 1;
    uint64_t p[5] = {k * k * n->c * cout, cout, cout, cout, cout};
    n->c = cout;
    n->x = bm_fwd(n, &n->x, 1, n->c * n->h * n->w, p, bn ? 5 : 2);
}

/* Convolution without padding (LeNet style). */
static inline void bm_conv_valid(bm_net *n, uint64_t cout, uint64_t k)
{
    n->h = n->h - k + 1;
    n->w = n->w - k + 1;
    uint64_t p[2] = {k * k * n->c * cout, cout};
    n->c = cout;
    n->x = bm_fwd(n, &n->x, 1, n->c * n->h * n->w, p, 2);
}

static inline void bm_pool(bm_net *n, uint64_t k, uint64_t stride)
{
    n->h = (n->h - k) / stride + 1;
    n->w = (n->w - k) / stride + 1;
    n->x = bm_fwd(n, &n->x, 1, n->c * n->h * n->w, NULL, 0);
}

static inline void bm_global_pool(bm_net *n)
{
    n->h = n->w = 1;
    n->x = bm_fwd(n, &n->x, 1, n->c, NULL, 0);
}

static inline void bm_dense(bm_net *n, uint64_t out)
{
    uint64_t in = n->c * n->h * n->w;
    uint64_t p[2] = {in * out, out};
    n->c = out;
    n->h = n->w = 1;
    n->x = bm_fwd(n, &n->x, 1, out, p, 2);
}

/* Softmax (inference) or softmax + loss (training: the backward pass
 * starts from its gradient). */
static inline void bm_softmax(bm_net *n)
{
    n->x = bm_fwd(n, &n->x, 1, n->c, NULL, 0);
}

/* ResNet v1.5 bottleneck: 1x1, 3x3 (stride), 1x1 (4 x width), plus a
 * projection on the first block of a stage; the block input stays live
 * until the add. */
static inline void bm_bottleneck(bm_net *n, uint64_t width, uint64_t stride, bool project)
{
    int input = n->x;
    uint64_t c0 = n->c, h0 = n->h, w0 = n->w;
    bm_conv(n, width, 1, 1, true);
    bm_conv(n, width, 3, stride, true);
    bm_conv(n, 4 * width, 1, 1, true);
    int main_path = n->x;
    int shortcut = input;
    if (project) {
        uint64_t c = n->c, h = n->h, w = n->w;
        n->c = c0;
        n->h = h0;
        n->w = w0;
        n->x = input;
        bm_conv(n, 4 * width, 1, stride, true);
        shortcut = n->x;
        n->c = c;
        n->h = h;
        n->w = w;
    }
    int both[2] = {main_path, shortcut};
    n->x = bm_fwd(n, both, 2, n->c * n->h * n->w, NULL, 0);
}

/* Appends the backward pass and the optimizer updates. */
static inline void bm_backward(bm_net *n)
{
    static int grad[BM_MAX_BUFS];
    for (size_t i = 0; i < BM_MAX_BUFS; i++)
        grad[i] = -1;
    int top = n->ops[n->n_ops - 1].out;
    n->step++;
    bm_use(n, top);
    grad[top] = bm_buf(n, n->bufs[top].size, false);
    for (size_t k = n->n_ops; k-- > 0;) {
        const bm_op *op = &n->ops[k];
        n->step++;
        bm_use(n, grad[op->out]);
        bm_use(n, op->out);
        for (int i = 0; i < op->n_in; i++) {
            bm_use(n, op->in[i]);
            if (!n->needs_grad[op->in[i]])
                continue;
            if (grad[op->in[i]] < 0)
                grad[op->in[i]] = bm_buf(n, n->bufs[op->in[i]].size, false);
            else
                bm_use(n, grad[op->in[i]]);
        }
        for (int p = 0; p < op->n_params; p++) {
            int g = bm_buf(n, n->params[op->first_param + p], false);
            n->bufs[g].last = n->step + 1; /* read by its update */
        }
    }
    n->step++;
}

/* ---- the model zoo ---- */

enum {
    BM_MLP_SMALL, /* 784-256-128-10 */
    BM_MLP_LARGE, /* 4096-4096-4096-1000 */
    BM_LENET,     /* 1x28x28 LeNet-5 */
    BM_CIFAR_CNN, /* 3x32x32: 2 x (conv32) pool 2 x (conv64) pool fc512 fc10 */
    BM_RESNET50,  /* 3x224x224, ResNet-50 v1.5 */
    BM_VGG16,     /* 3x224x224, VGG-16 */
    BM_N_MODELS
};

static const char *const bm_model_names[BM_N_MODELS] = {
    "mlp-784-256-128-10", "mlp-4096x3-1000", "lenet5", "cifar-cnn", "resnet50", "vgg16",
};

/* Builds model `which` for `batch` samples; training adds backward. */
static inline void bm_build(bm_net *n, int which, uint64_t batch, bool training)
{
    switch (which) {
    case BM_MLP_SMALL:
        bm_begin(n, bm_model_names[which], batch, training, 784, 1, 1);
        bm_dense(n, 256);
        bm_dense(n, 128);
        bm_dense(n, 10);
        break;
    case BM_MLP_LARGE:
        bm_begin(n, bm_model_names[which], batch, training, 4096, 1, 1);
        bm_dense(n, 4096);
        bm_dense(n, 4096);
        bm_dense(n, 1000);
        break;
    case BM_LENET:
        bm_begin(n, bm_model_names[which], batch, training, 1, 28, 28);
        bm_conv(n, 6, 5, 1, false);
        bm_pool(n, 2, 2);
        bm_conv_valid(n, 16, 5);
        bm_pool(n, 2, 2);
        bm_dense(n, 120);
        bm_dense(n, 84);
        bm_dense(n, 10);
        break;
    case BM_CIFAR_CNN:
        bm_begin(n, bm_model_names[which], batch, training, 3, 32, 32);
        bm_conv(n, 32, 3, 1, false);
        bm_conv(n, 32, 3, 1, false);
        bm_pool(n, 2, 2);
        bm_conv(n, 64, 3, 1, false);
        bm_conv(n, 64, 3, 1, false);
        bm_pool(n, 2, 2);
        bm_dense(n, 512);
        bm_dense(n, 10);
        break;
    case BM_RESNET50: {
        bm_begin(n, bm_model_names[which], batch, training, 3, 224, 224);
        bm_conv(n, 64, 7, 2, true);
        n->h = (n->h + 2 - 3) / 2 + 1; /* 3x3/2 max pool, padded */
        n->w = (n->w + 2 - 3) / 2 + 1;
        n->x = bm_fwd(n, &n->x, 1, n->c * n->h * n->w, NULL, 0);
        const uint64_t widths[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
        for (int s = 0; s < 4; s++)
            for (uint64_t b = 0; b < blocks[s]; b++)
                bm_bottleneck(n, widths[s], b == 0 && s > 0 ? 2 : 1, b == 0);
        bm_global_pool(n);
        bm_dense(n, 1000);
        break;
    }
    case BM_VGG16: {
        bm_begin(n, bm_model_names[which], batch, training, 3, 224, 224);
        const uint64_t cfg[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                                0,  512, 512, 512, 0,   512, 512, 512, 0};
        for (size_t i = 0; i < sizeof(cfg) / sizeof(cfg[0]); i++) {
            if (cfg[i])
                bm_conv(n, cfg[i], 3, 1, false);
            else
                bm_pool(n, 2, 2);
        }
        bm_dense(n, 4096);
        bm_dense(n, 4096);
        bm_dense(n, 1000);
        break;
    }
    default:
        abort();
    }
    bm_softmax(n);
    if (training)
        bm_backward(n);
}

/* Parameter bytes (each tensor rounded to 256, as the manager charges). */
static inline uint64_t bm_param_bytes(const bm_net *n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n->n_params; i++)
        total += (n->params[i] + 255) & ~255ull;
    return total;
}

/* Persistent bytes of a job: parameters, plus momentum when training. */
static inline uint64_t bm_persistent_bytes(const bm_net *n)
{
    return bm_param_bytes(n) * (n->training ? 2 : 1);
}

/* Planned ephemeral peak of one iteration (0 on a planner error). */
static inline uint64_t bm_ephemeral_peak(const bm_net *n, uint64_t *naive)
{
    uint64_t *offsets = malloc(n->n_bufs * sizeof(*offsets));
    sl_plan_result res = {0};
    int rc = offsets ? sl_mem_plan(n->bufs, n->n_bufs, 256, offsets, &res) : -1;
    free(offsets);
    if (naive)
        *naive = rc == 0 ? res.naive : 0;
    return rc == 0 ? res.peak : 0;
}

#endif
