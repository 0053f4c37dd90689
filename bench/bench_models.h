/* Models for the memory benchmarks (packing, ephemeral_bind, churn), built
 * from the model zoo's layer tables (eval/lib/zoo.h): the parameter tensors (persistent memory) and
 * the tensors one iteration creates (ephemeral memory) with their live
 * ranges, so that sl_mem_plan gives the real planned peak.
 *
 * The graph model: a convolution or dense layer is one op with its bias or
 * batch norm and ReLU fused (as inference engines run them), so it creates
 * one output tensor; batch norm keeps four parameter tensors (scale,
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
 * Precision (bm_prec) sets each tensor's bytes per element from its dtype:
 * BM_F32 all f32; BM_BF16 all bf16 (weights, momentum, activations and
 * gradients: a model exported in bf16, or pure bf16 training); BM_MIXED
 * salus's mixed-precision training (salus_optimizer.precision, PyTorch
 * autocast's rules): master weights and momentum f32; a convolution or
 * dense layer casts its f32 input and its weight (and its bias, which
 * follows the activations) to bf16, each cast a tensor of its own that
 * its backward step reads, and yields bf16, unless batch norm follows,
 * which runs in f32 and yields f32; pools and sums keep their inputs'
 * dtype; the loss casts its input up to f32. A cast's gradient is cast
 * back, so a weight's gradient is made in bf16 and reaches its update in
 * f32.
 *
 * Header-only over the zoo (link sl_zoo_dep); benchmarks are separate
 * programs. */
#ifndef SL_BENCH_MODELS_H
#define SL_BENCH_MODELS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"
#include "zoo.h"

#define BM_MAX_PARAMS 1024
#define BM_MAX_BUFS 4096
#define BM_MAX_OPS 1024
#define BM_OP_MAX_PARAMS 5

typedef enum bm_prec { BM_F32, BM_MIXED, BM_BF16 } bm_prec;

static const char *const bm_prec_names[] = {"f32", "mixed-bf16", "bf16"};

/* What an op computes in under BM_MIXED (the others: every op alike). */
enum {
    BM_OP_HALF,      /* matmul or convolution: bf16 in and out */
    BM_OP_HALF_NORM, /* convolution then batch norm: bf16 in, f32 out */
    BM_OP_SAME,      /* pool, sum: its inputs' dtype */
    BM_OP_F32,       /* loss: f32 in and out */
};

typedef struct bm_op {
    int in[2], n_in;
    int out;
    int first_param, n_params;
    int wcast[BM_OP_MAX_PARAMS]; /* a parameter's bf16 copy, or -1 */
} bm_op;

typedef struct bm_net {
    char name[32];
    uint64_t batch;
    bool training;
    bm_prec prec;
    uint64_t params[BM_MAX_PARAMS]; /* parameter tensor sizes, bytes */
    size_t n_params;
    sl_plan_buf bufs[BM_MAX_BUFS]; /* ephemeral tensors of one iteration */
    bool needs_grad[BM_MAX_BUFS];
    uint8_t elem[BM_MAX_BUFS]; /* bytes per element of each buffer */
    size_t n_bufs;
    bm_op ops[BM_MAX_OPS];
    size_t n_ops;
    uint32_t step;
    /* per-sample shape of the current activation */
    uint64_t c, h, w;
    int x; /* current activation buffer */
} bm_net;

static inline int bm_buf(bm_net *n, uint64_t bytes, bool needs_grad, unsigned elem)
{
    if (n->n_bufs == BM_MAX_BUFS)
        abort(); /* a model table bug, not an input */
    n->bufs[n->n_bufs] = (sl_plan_buf){bytes, n->step, n->step};
    n->needs_grad[n->n_bufs] = needs_grad;
    n->elem[n->n_bufs] = (uint8_t) elem;
    return (int) n->n_bufs++;
}

/* Bytes per element of an activation of the whole-model precision. */
static inline unsigned bm_act_elem(const bm_net *n)
{
    return n->prec == BM_BF16 ? 2 : 4;
}

static inline void bm_use(bm_net *n, int b)
{
    if (n->bufs[b].last < n->step)
        n->bufs[b].last = n->step;
}

static inline int bm_op_add(bm_net *n, const int *in, int n_in, uint64_t out_elems,
                            unsigned out_elem, const uint64_t *param_elems, int n_par, int n_cast)
{
    if (n->n_ops == BM_MAX_OPS || n->n_params + (size_t) n_par > BM_MAX_PARAMS ||
        n_par > BM_OP_MAX_PARAMS)
        abort();
    n->step++;
    bm_op *op = &n->ops[n->n_ops++];
    op->n_in = n_in;
    bool needs_grad = false;
    for (int i = 0; i < n_in; i++) {
        op->in[i] = in[i];
        bm_use(n, in[i]);
        needs_grad |= n->needs_grad[in[i]];
    }
    op->first_param = (int) n->n_params;
    op->n_params = n_par;
    unsigned param_elem = n->prec == BM_BF16 ? 2 : 4;
    for (int i = 0; i < n_par; i++) {
        n->params[n->n_params++] = param_elems[i] * param_elem;
        op->wcast[i] = i < n_cast ? bm_buf(n, param_elems[i] * 2, false, 2) : -1;
    }
    /* a parameterised op's output always needs a gradient in training */
    op->out = bm_buf(n, out_elems * out_elem, needs_grad || n_par > 0, out_elem);
    return op->out;
}

/* The tensor `b` converted to elem bytes per element (itself if it is). */
static inline int bm_cast(bm_net *n, int b, unsigned elem)
{
    if (n->elem[b] == elem)
        return b;
    return bm_op_add(n, &b, 1, n->bufs[b].size / n->elem[b], elem, NULL, 0, 0);
}

/* One forward op of kind BM_OP_* reading in[0..n_in) and making out_elems
 * per sample; under BM_MIXED with the casts its kind implies. */
static inline int bm_fwd(bm_net *n, const int *in, int n_in, uint64_t out_elems,
                         const uint64_t *param_elems, int n_par, int kind)
{
    int x[2] = {in[0], n_in > 1 ? in[1] : -1};
    unsigned out_elem = bm_act_elem(n);
    int n_cast = 0;
    if (n->prec == BM_MIXED) {
        switch (kind) {
        case BM_OP_HALF:
        case BM_OP_HALF_NORM:
            for (int i = 0; i < n_in; i++)
                x[i] = bm_cast(n, x[i], 2);
            /* the weight, and without a norm the bias too */
            n_cast = kind == BM_OP_HALF ? n_par : (n_par > 0);
            out_elem = kind == BM_OP_HALF ? 2 : 4;
            break;
        case BM_OP_F32:
            for (int i = 0; i < n_in; i++)
                x[i] = bm_cast(n, x[i], 4);
            out_elem = 4;
            break;
        default:
            out_elem = n->elem[x[0]];
            if (n_in > 1 && n->elem[x[1]] > out_elem)
                out_elem = n->elem[x[1]];
            break;
        }
    }
    return bm_op_add(n, x, n_in, out_elems * n->batch, out_elem, param_elems, n_par, n_cast);
}

static inline void bm_begin(bm_net *n, const char *name, uint64_t batch, bool training,
                            bm_prec prec, uint64_t c, uint64_t h, uint64_t w)
{
    memset(n, 0, sizeof(*n));
    strncpy(n->name, name, sizeof(n->name) - 1);
    n->batch = batch;
    n->training = training;
    n->prec = prec;
    n->c = c;
    n->h = h;
    n->w = w;
    n->x = bm_buf(n, c * h * w * bm_act_elem(n) * batch, false, bm_act_elem(n));
}

/* The zoo's layers (eval/lib/zoo.h) as this graph model builds them: a
 * convolution or dense layer one op with its batch norm or bias and its
 * ReLU fused; a pool one op; a residual block's sum one op reading both
 * branches (the block's input stays live until it). */
typedef struct bm_zoo {
    bm_net *n;
    const char *name;
    uint64_t batch;
    bool training;
    bm_prec prec;
    int res_in, res_main; /* a residual block's input and main path */
    uint64_t in_c, in_h, in_w, main_c, main_h, main_w;
} bm_zoo;

static inline void bm_zoo_input(void *ctx, int64_t c, int64_t h, int64_t w)
{
    bm_zoo *z = ctx;
    bm_begin(z->n, z->name, z->batch, z->training, z->prec, (uint64_t) c, (uint64_t) h,
             (uint64_t) w);
}

/* Batch norm keeps 4 parameter tensors, a bias 1. */
static inline void bm_zoo_conv(void *ctx, const sl_zoo_conv *c)
{
    bm_net *n = ((bm_zoo *) ctx)->n;
    uint64_t k = (uint64_t) c->k, stride = (uint64_t) c->stride, pad = (uint64_t) c->pad;
    uint64_t cout = (uint64_t) c->out;
    n->h = (n->h + 2 * pad - k) / stride + 1;
    n->w = (n->w + 2 * pad - k) / stride + 1;
    uint64_t p[5] = {k * k * n->c * cout, cout, cout, cout, cout};
    n->c = cout;
    n->x = bm_fwd(n, &n->x, 1, n->c * n->h * n->w, p, c->bn ? 5 : 2,
                  c->bn ? BM_OP_HALF_NORM : BM_OP_HALF);
}

static inline void bm_zoo_maxpool(void *ctx, int64_t k, int64_t stride, int64_t pad)
{
    bm_net *n = ((bm_zoo *) ctx)->n;
    n->h = (n->h + 2 * (uint64_t) pad - (uint64_t) k) / (uint64_t) stride + 1;
    n->w = (n->w + 2 * (uint64_t) pad - (uint64_t) k) / (uint64_t) stride + 1;
    n->x = bm_fwd(n, &n->x, 1, n->c * n->h * n->w, NULL, 0, BM_OP_SAME);
}

static inline void bm_zoo_global_avgpool(void *ctx)
{
    bm_net *n = ((bm_zoo *) ctx)->n;
    n->h = n->w = 1;
    n->x = bm_fwd(n, &n->x, 1, n->c, NULL, 0, BM_OP_SAME);
}

static inline void bm_zoo_fc(void *ctx, int64_t units, bool relu)
{
    (void) relu;
    bm_net *n = ((bm_zoo *) ctx)->n;
    uint64_t in = n->c * n->h * n->w, out = (uint64_t) units;
    uint64_t p[2] = {in * out, out};
    n->c = out;
    n->h = n->w = 1;
    n->x = bm_fwd(n, &n->x, 1, out, p, 2, BM_OP_HALF);
}

static inline void bm_zoo_residual_begin(void *ctx)
{
    bm_zoo *z = ctx;
    z->res_in = z->n->x;
    z->in_c = z->n->c, z->in_h = z->n->h, z->in_w = z->n->w;
}

static inline void bm_zoo_residual_shortcut(void *ctx)
{
    bm_zoo *z = ctx;
    bm_net *n = z->n;
    z->res_main = n->x;
    z->main_c = n->c, z->main_h = n->h, z->main_w = n->w;
    n->x = z->res_in;
    n->c = z->in_c, n->h = z->in_h, n->w = z->in_w;
}

static inline void bm_zoo_residual_end(void *ctx)
{
    bm_zoo *z = ctx;
    bm_net *n = z->n;
    int both[2] = {z->res_main, n->x}; /* the shortcut: the input or its projection */
    n->c = z->main_c, n->h = z->main_h, n->w = z->main_w;
    n->x = bm_fwd(n, both, 2, n->c * n->h * n->w, NULL, 0, BM_OP_SAME);
}

/* Softmax (inference) or softmax + loss (training: the backward pass
 * starts from its gradient). */
static inline void bm_zoo_loss(void *ctx)
{
    bm_net *n = ((bm_zoo *) ctx)->n;
    n->x = bm_fwd(n, &n->x, 1, n->c, NULL, 0, BM_OP_F32);
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
    grad[top] = bm_buf(n, n->bufs[top].size, false, n->elem[top]);
    for (size_t k = n->n_ops; k-- > 0;) {
        const bm_op *op = &n->ops[k];
        if (grad[op->out] < 0)
            continue; /* nothing flows back: the input batch's cast */
        n->step++;
        bm_use(n, grad[op->out]);
        bm_use(n, op->out);
        for (int i = 0; i < op->n_in; i++) {
            bm_use(n, op->in[i]);
            if (!n->needs_grad[op->in[i]])
                continue;
            if (grad[op->in[i]] < 0)
                grad[op->in[i]] = bm_buf(n, n->bufs[op->in[i]].size, false, n->elem[op->in[i]]);
            else
                bm_use(n, grad[op->in[i]]);
        }
        for (int p = 0; p < op->n_params; p++) {
            int c = op->wcast[p];
            if (c >= 0) { /* the bf16 copy's gradient, cast up in this step */
                bm_use(n, c);
                bm_buf(n, n->bufs[c].size, false, 2);
            }
            int g = bm_buf(n, n->params[op->first_param + p], false, n->prec == BM_BF16 ? 2 : 4);
            n->bufs[g].last = n->step + 1; /* read by its update */
        }
    }
    n->step++;
}

/* ---- the models ---- */

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
/* Their names in the zoo. */
static const char *const bm_zoo_names[BM_N_MODELS] = {
    "mlp-784-256-128-10", "mlp-4096x3-1000", "lenet5", "cifar-cnn", "resnet50_v1.5", "vgg16",
};

/* Builds model `which` for `batch` samples in precision `prec`; training
 * adds backward. */
static inline void bm_build_prec(bm_net *n, int which, uint64_t batch, bool training, bm_prec prec)
{
    if (which < 0 || which >= BM_N_MODELS)
        abort();
    bm_zoo z = {
        .n = n, .name = bm_model_names[which], .batch = batch, .training = training, .prec = prec};
    const sl_zoo_builder b = {.ctx = &z,
                              .input = bm_zoo_input,
                              .conv = bm_zoo_conv,
                              .maxpool = bm_zoo_maxpool,
                              .global_avgpool = bm_zoo_global_avgpool,
                              .fc = bm_zoo_fc,
                              .residual_begin = bm_zoo_residual_begin,
                              .residual_shortcut = bm_zoo_residual_shortcut,
                              .residual_end = bm_zoo_residual_end,
                              .loss = bm_zoo_loss};
    if (sl_zoo_build(bm_zoo_names[which], &b) != 0)
        abort(); /* a name the zoo lacks: a table bug */
    if (training)
        bm_backward(n);
}

/* bm_build_prec in f32. */
static inline void bm_build(bm_net *n, int which, uint64_t batch, bool training)
{
    bm_build_prec(n, which, batch, training, BM_F32);
}

/* Parameter bytes (each tensor rounded to 256, as the manager charges). */
static inline uint64_t bm_param_bytes(const bm_net *n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n->n_params; i++)
        total += (n->params[i] + 255) & ~255ull;
    return total;
}

/* Persistent bytes of a job: parameters, plus momentum when training (both
 * in the master weights' dtype). */
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
