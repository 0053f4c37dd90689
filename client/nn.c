/* nn: a stack of layers compiled into a training graph (forward, backward
 * with softmax cross-entropy, optimizer updates) and an inference graph
 * (forward, argmax). Shapes are tracked per sample while layers are added;
 * the graph builder checks them again, with the batch, at compile time.
 * Under momentum a dense layer's weight gradient is never a tensor: it
 * accumulates into the velocity (matmul_acc), as fused optimizers do.
 * A ReLU followed by a max pool runs after the pool instead: the max of
 * ReLUs is the ReLU of the max (ReLU never decreases), and the gradient
 * reaches the same element (the first max of the window, when it is
 * positive), but the ReLU and its gradient touch a quarter of the data. */
#include "client_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_LAYERS 64
#define MAX_PARAMS (MAX_LAYERS * 2)
#define BN_EPSILON 1e-5f
#define BN_MOMENTUM 0.9f

enum layer_kind {
    L_DENSE,
    L_CONV,
    L_MAXPOOL,
    L_AVGPOOL,
    L_BN,
    L_RELU,
    L_SIGMOID,
    L_TANH,
    L_FLATTEN
};

typedef struct layer {
    enum layer_kind kind;
    int64_t size, kernel, stride, pad; /* units / filters and window */
    int in_ndim, out_ndim;
    int64_t in[3], out[3];              /* per-sample shapes */
    int param[2];                       /* indexes into m->params, -1 if none */
    uint64_t running_mean, running_var; /* batchnorm state tensors */
    /* training-graph values */
    salus_value x, y, saved_mean, saved_invstd;
    salus_value relu_bits; /* relu: relu_mask's bits, all its gradient reads */
    /* relu: runs after the max pool that follows it (see the top); the
     * pool layer then emits both, and this layer passes values through */
    int after_pool;
} layer;

typedef struct param {
    uint64_t tensor, state[2];
    int ndim;
    int64_t dims[4];
    salus_value value, grad, state_value[2];
    /* momentum: the gradient went straight into the velocity (matmul_acc),
     * so grad is SALUS_NO_VALUE and the update only applies it */
    int grad_in_velocity;
} param;

struct salus_model {
    layer layers[MAX_LAYERS];
    int n_layers;
    param params[MAX_PARAMS];
    int n_params;
    int sample_ndim;
    int64_t sample[3];
    salus_session *session;
    salus_graph *train, *infer;
    salus_value train_loss, infer_classes;
    uint64_t step_tensor;
    int64_t batch, infer_batch;
    char error[256];
};

__attribute__((format(printf, 2, 3))) static int fail(salus_model *m, const char *fmt, ...)
{
    if (!m->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->error, sizeof m->error, fmt, ap);
        va_end(ap);
    }
    return SL_EINVAL;
}

salus_model *salus_model_new(int ndim, const int64_t *sample_dims)
{
    if (ndim < 1 || ndim > 3 || !sample_dims)
        return NULL;
    salus_model *m = sl_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->sample_ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (sample_dims[i] < 1) {
            sl_free(m);
            return NULL;
        }
        m->sample[i] = sample_dims[i];
    }
    return m;
}

void salus_model_free(salus_model *m)
{
    if (!m)
        return;
    salus_graph_free(m->train);
    salus_graph_free(m->infer);
    sl_free(m);
}

const char *salus_model_error(const salus_model *m)
{
    return m->error[0] ? m->error : NULL;
}

const salus_graph *salus_model_training_graph(const salus_model *m)
{
    return m->train;
}

const salus_graph *salus_model_inference_graph(const salus_model *m)
{
    return m->infer;
}

int64_t salus_model_param_count(const salus_model *m)
{
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        int64_t e = 1;
        for (int d = 0; d < m->params[i].ndim; d++)
            e *= m->params[i].dims[d];
        n += e;
    }
    return n;
}

/* Appends a layer whose input is the previous layer's output. */
static layer *push(salus_model *m, enum layer_kind kind)
{
    if (m->error[0])
        return NULL;
    if (m->train) {
        fail(m, "model is already compiled");
        return NULL;
    }
    if (m->n_layers == MAX_LAYERS) {
        fail(m, "more than %d layers", MAX_LAYERS);
        return NULL;
    }
    layer *l = &m->layers[m->n_layers];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->param[0] = l->param[1] = -1;
    if (m->n_layers == 0) {
        l->in_ndim = m->sample_ndim;
        memcpy(l->in, m->sample, sizeof l->in);
    } else {
        l->in_ndim = l[-1].out_ndim;
        memcpy(l->in, l[-1].out, sizeof l->in);
    }
    l->out_ndim = l->in_ndim;
    memcpy(l->out, l->in, sizeof l->out);
    return l;
}

static int commit(salus_model *m)
{
    m->n_layers++;
    return SL_OK;
}

int salus_model_dense(salus_model *m, int64_t units)
{
    layer *l = push(m, L_DENSE);
    if (!l)
        return SL_EINVAL;
    if (l->in_ndim != 1 || units < 1)
        return fail(m, "layer %d: dense needs a flat input and units >= 1", m->n_layers);
    l->size = units;
    l->out[0] = units;
    return commit(m);
}

/* Output extent of a window sliding over n with padding on both sides. */
static int64_t window_out(int64_t n, int64_t kernel, int64_t stride, int64_t pad)
{
    int64_t span = n + 2 * pad - kernel;
    return span < 0 || stride < 1 ? 0 : span / stride + 1;
}

static int spatial(salus_model *m, enum layer_kind kind, int64_t channels, int64_t kernel,
                   int64_t stride, int64_t pad)
{
    layer *l = push(m, kind);
    if (!l)
        return SL_EINVAL;
    if (l->in_ndim != 3)
        return fail(m, "layer %d: needs a [C,H,W] input", m->n_layers);
    int64_t oh = window_out(l->in[1], kernel, stride, pad);
    int64_t ow = window_out(l->in[2], kernel, stride, pad);
    if (kernel < 1 || oh < 1 || ow < 1 || pad < 0 || channels < 1)
        return fail(m, "layer %d: window %lldx%lld stride %lld pad %lld does not fit %lldx%lld",
                    m->n_layers, (long long) kernel, (long long) kernel, (long long) stride,
                    (long long) pad, (long long) l->in[1], (long long) l->in[2]);
    l->size = channels;
    l->kernel = kernel;
    l->stride = stride;
    l->pad = pad;
    l->out[0] = channels;
    l->out[1] = oh;
    l->out[2] = ow;
    return commit(m);
}

int salus_model_conv2d(salus_model *m, int64_t filters, int64_t kernel, int64_t stride, int64_t pad)
{
    return spatial(m, L_CONV, filters, kernel, stride, pad);
}

int salus_model_maxpool(salus_model *m, int64_t kernel, int64_t stride)
{
    int64_t c = m->n_layers ? m->layers[m->n_layers - 1].out[0] : m->sample[0];
    return spatial(m, L_MAXPOOL, c, kernel, stride, 0);
}

int salus_model_avgpool(salus_model *m, int64_t kernel, int64_t stride)
{
    int64_t c = m->n_layers ? m->layers[m->n_layers - 1].out[0] : m->sample[0];
    return spatial(m, L_AVGPOOL, c, kernel, stride, 0);
}

int salus_model_batchnorm(salus_model *m)
{
    layer *l = push(m, L_BN);
    if (!l)
        return SL_EINVAL;
    if (l->in_ndim != 1 && l->in_ndim != 3)
        return fail(m, "layer %d: batchnorm needs a [C] or [C,H,W] input", m->n_layers);
    return commit(m);
}

static int activation(salus_model *m, enum layer_kind kind)
{
    return push(m, kind) ? commit(m) : SL_EINVAL;
}

int salus_model_relu(salus_model *m)
{
    return activation(m, L_RELU);
}

int salus_model_sigmoid(salus_model *m)
{
    return activation(m, L_SIGMOID);
}

int salus_model_tanh(salus_model *m)
{
    return activation(m, L_TANH);
}

int salus_model_flatten(salus_model *m)
{
    layer *l = push(m, L_FLATTEN);
    if (!l)
        return SL_EINVAL;
    l->out_ndim = 1;
    l->out[0] = 1;
    for (int i = 0; i < l->in_ndim; i++)
        l->out[0] *= l->in[i];
    return commit(m);
}

/* ---- compile ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Creates a parameter tensor: He-uniform in [-sqrt(6/fan_in), +] when
 * fan_in > 0, else filled with `fill`. Returns its index or -1. */
static int new_param(salus_model *m, int ndim, const int64_t *dims, int64_t fan_in, float fill,
                     uint64_t *rng)
{
    if (m->n_params == MAX_PARAMS)
        return fail(m, "too many parameters"), -1;
    param *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    p->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= p->dims[i] = dims[i];
    float *init = sl_calloc((size_t) n, sizeof *init);
    if (!init)
        return fail(m, "out of memory"), -1;
    float bound = fan_in > 0 ? sqrtf(6.0f / (float) fan_in) : 0;
    for (int64_t i = 0; i < n; i++)
        init[i] = fan_in > 0
                      ? bound * (float) ((double) (rng_next(rng) >> 11) / 4503599627370496.0 - 1.0)
                      : fill;
    int rc = salus_tensor_create(m->session, SALUS_F32, ndim, dims, init, &p->tensor);
    sl_free(init);
    if (rc)
        return fail(m, "creating a parameter: %s", salus_last_error(m->session->client)), -1;
    return m->n_params++;
}

/* A zero-filled state tensor shaped like a parameter (optimizer, batchnorm). */
static int new_state(salus_model *m, int ndim, const int64_t *dims, uint64_t *id)
{
    int rc = salus_tensor_create(m->session, SALUS_F32, ndim, dims, NULL, id);
    if (rc)
        fail(m, "creating optimizer state: %s", salus_last_error(m->session->client));
    return rc;
}

static int create_params(salus_model *m, const salus_optimizer *opt, uint64_t seed)
{
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        if (l->kind == L_DENSE) {
            int64_t wd[2] = {l->in[0], l->size}, bd[1] = {l->size};
            l->param[0] = new_param(m, 2, wd, l->in[0], 0, &rng);
            l->param[1] = new_param(m, 1, bd, 0, 0, &rng);
        } else if (l->kind == L_CONV) {
            int64_t wd[4] = {l->size, l->in[0], l->kernel, l->kernel}, bd[1] = {l->size};
            l->param[0] = new_param(m, 4, wd, l->in[0] * l->kernel * l->kernel, 0, &rng);
            l->param[1] = new_param(m, 1, bd, 0, 0, &rng);
        } else if (l->kind == L_BN) {
            int64_t cd[1] = {l->in[0]};
            l->param[0] = new_param(m, 1, cd, 0, 1.0f, &rng);
            l->param[1] = new_param(m, 1, cd, 0, 0.0f, &rng);
            if (new_state(m, 1, cd, &l->running_mean))
                return SL_EINVAL;
            /* running variance starts at 1, like every framework's */
            float *ones = sl_calloc((size_t) cd[0], sizeof *ones);
            if (!ones)
                return fail(m, "out of memory");
            for (int64_t c = 0; c < cd[0]; c++)
                ones[c] = 1.0f;
            int rc = salus_tensor_create(m->session, SALUS_F32, 1, cd, ones, &l->running_var);
            sl_free(ones);
            if (rc)
                return fail(m, "creating batchnorm state: %s",
                            salus_last_error(m->session->client));
        }
        if (m->error[0])
            return SL_EINVAL;
    }
    int n_state = opt->kind == SALUS_ADAM ? 2 : opt->kind == SALUS_MOMENTUM ? 1 : 0;
    for (int i = 0; i < m->n_params; i++)
        for (int k = 0; k < n_state; k++)
            if (new_state(m, m->params[i].ndim, m->params[i].dims, &m->params[i].state[k]))
                return SL_EINVAL;
    if (opt->kind == SALUS_ADAM && new_state(m, 1, (int64_t[]){1}, &m->step_tensor))
        return SL_EINVAL;
    return SL_OK;
}

#define OP(g, type, ...)                                                                           \
    salus_graph_op((g), (type), sizeof((salus_value[]){__VA_ARGS__}) / sizeof(salus_value),        \
                   (salus_value[]){__VA_ARGS__}, 0, NULL, 0, NULL)
#define OPI(g, type, iattrs, ...)                                                                  \
    salus_graph_op((g), (type), sizeof((salus_value[]){__VA_ARGS__}) / sizeof(salus_value),        \
                   (salus_value[]){__VA_ARGS__}, sizeof(iattrs) / sizeof(int64_t), (iattrs), 0,    \
                   NULL)
#define OPF(g, type, fattrs, ...)                                                                  \
    salus_graph_op((g), (type), sizeof((salus_value[]){__VA_ARGS__}) / sizeof(salus_value),        \
                   (salus_value[]){__VA_ARGS__}, 0, NULL, sizeof(fattrs) / sizeof(float),          \
                   (fattrs))

static salus_value param_value(salus_graph *g, const param *p)
{
    return salus_graph_param(g, p->tensor, SALUS_F32, p->ndim, p->dims);
}

static salus_value state_value(salus_graph *g, uint64_t tensor, const param *like)
{
    return salus_graph_param(g, tensor, SALUS_F32, like->ndim, like->dims);
}

/* Batched dims: {batch, per-sample dims...}. */
static int batched(int64_t batch, int ndim, const int64_t *sample, int64_t *out)
{
    out[0] = batch;
    memcpy(out + 1, sample, (size_t) ndim * sizeof *sample);
    return ndim + 1;
}

/* ReLU layer l over x: relu_mask when training (the backward pass needs
 * only where y > 0: keeping that as bits lets y die once the next layer has
 * read it, 1/32 of the memory), plain relu otherwise. */
static salus_value activate(salus_graph *g, layer *l, salus_value x, int training)
{
    if (!training)
        return OP(g, "relu", x);
    salus_value y = OP(g, "relu_mask", x);
    l->relu_bits = y + 1;
    return y;
}

/* Emits the forward pass; records per-layer values when training. */
static salus_value forward(salus_model *m, salus_graph *g, salus_value x, int64_t batch,
                           int training)
{
    for (int i = 0; i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        salus_value y = SALUS_NO_VALUE, w = SALUS_NO_VALUE, b = SALUS_NO_VALUE;
        if (l->param[0] >= 0) {
            w = param_value(g, &m->params[l->param[0]]);
            b = param_value(g, &m->params[l->param[1]]);
            if (training) {
                m->params[l->param[0]].value = w;
                m->params[l->param[1]].value = b;
            }
        }
        const int64_t conv[] = {l->stride, l->stride, l->pad, l->pad, l->pad, l->pad};
        const int64_t pool[] = {l->kernel, l->kernel, l->stride, l->stride};
        switch (l->kind) {
        case L_DENSE:
            y = OP(g, "bias_add", OP(g, "matmul", x, w), b);
            break;
        case L_CONV:
            y = OP(g, "channel_bias_add", OPI(g, "conv2d", conv, x, w), b);
            break;
        case L_MAXPOOL:
            y = OPI(g, "maxpool", pool, x);
            if (i > 0 && l[-1].after_pool) {
                /* The ReLU moved here. maxpool_grad gets the ReLU's output
                 * as the pool's: they differ only in windows whose max is
                 * not positive, where the ReLU's gradient already zeroed
                 * dy, so the pool's own output can die in place. */
                salus_value r = activate(g, &l[-1], y, training);
                if (training) {
                    l->x = x;
                    l->y = r;
                }
                x = r;
                continue;
            }
            break;
        case L_AVGPOOL:
            y = OPI(g, "avgpool", pool, x);
            break;
        case L_BN: {
            const param *cp = &m->params[l->param[0]];
            salus_value rm = state_value(g, l->running_mean, cp);
            salus_value rv = state_value(g, l->running_var, cp);
            if (training) {
                const float f[] = {BN_EPSILON, BN_MOMENTUM};
                y = OPF(g, "batchnorm", f, x, w, b, rm, rv);
                l->saved_mean = y + 1;
                l->saved_invstd = y + 2;
            } else {
                const float f[] = {BN_EPSILON};
                y = OPF(g, "batchnorm_infer", f, x, w, b, rm, rv);
            }
            break;
        }
        case L_RELU:
            l->after_pool = i + 1 < m->n_layers && l[1].kind == L_MAXPOOL;
            y = l->after_pool ? x : activate(g, l, x, training);
            break;
        case L_SIGMOID:
            y = OP(g, "sigmoid", x);
            break;
        case L_TANH:
            y = OP(g, "tanh", x);
            break;
        case L_FLATTEN: {
            const int64_t dims[] = {batch, l->out[0]};
            y = OPI(g, "reshape", dims, x);
            break;
        }
        }
        if (training) {
            l->x = x;
            l->y = y;
        }
        x = y;
    }
    return x;
}

/* The optimiser's step counter (Adam): advanced once, before any update. */
static salus_value step_count(salus_model *m, salus_graph *g, const salus_optimizer *o)
{
    if (o->kind != SALUS_ADAM)
        return SALUS_NO_VALUE;
    salus_value t = salus_graph_param(g, m->step_tensor, SALUS_F32, 1, (int64_t[]){1});
    const float one[] = {1.0f};
    OPF(g, "add_scalar", one, t);
    return t;
}

/* Emits the update of one param from its gradient (t: step_count's value). */
static void update(salus_graph *g, const param *p, const salus_optimizer *o, salus_value t)
{
    if (o->kind == SALUS_SGD) {
        const float f[] = {o->lr};
        OPF(g, "sgd_update", f, p->value, p->grad);
    } else if (o->kind == SALUS_MOMENTUM && p->grad_in_velocity) {
        /* v = momentum * v + g is done: v += weight decay * p, then
         * p -= lr * v, which is momentum_update's math */
        salus_value v = state_value(g, p->state[0], p);
        if (o->weight_decay != 0) {
            const float wd[] = {-o->weight_decay};
            OPF(g, "sgd_update", wd, v, p->value);
        }
        const float lr[] = {o->lr};
        OPF(g, "sgd_update", lr, p->value, v);
    } else if (o->kind == SALUS_MOMENTUM) {
        const float f[] = {o->lr, o->momentum, o->weight_decay};
        OPF(g, "momentum_update", f, p->value, p->grad, state_value(g, p->state[0], p));
    } else {
        const float f[] = {o->lr, o->beta1 > 0 ? o->beta1 : 0.9f, o->beta2 > 0 ? o->beta2 : 0.999f,
                           o->eps > 0 ? o->eps : 1e-8f};
        OPF(g, "adam_update", f, p->value, p->grad, state_value(g, p->state[0], p),
            state_value(g, p->state[1], p), t);
    }
}

/* Emits the backward pass from dy = d loss / d logits, and each layer's
 * param updates as soon as nothing below it reads the params (their
 * gradients die there instead of all living until the end of the pass,
 * which lowers the planned peak; the arithmetic is the same). */
static void backward(salus_model *m, salus_graph *g, salus_value dy, const salus_optimizer *o)
{
    salus_value t = step_count(m, g, o);
    int first = 0; /* no gradient is needed below the first layer with params */
    while (first < m->n_layers && m->layers[first].param[0] < 0)
        first++;
    for (int i = m->n_layers - 1; i >= first; i--) {
        layer *l = &m->layers[i];
        param *w = l->param[0] >= 0 ? &m->params[l->param[0]] : NULL;
        param *b = l->param[1] >= 0 ? &m->params[l->param[1]] : NULL;
        int need_dx = i > first;
        salus_value dx = SALUS_NO_VALUE;
        const int64_t conv[] = {l->stride, l->stride, l->pad, l->pad, l->pad, l->pad};
        const int64_t pool[] = {l->kernel, l->kernel, l->stride, l->stride};
        const int64_t ta[] = {1, 0}, tb[] = {0, 1};
        switch (l->kind) {
        case L_DENSE:
            if (o->kind == SALUS_MOMENTUM) {
                /* the weight gradient accumulates into the velocity: no
                 * [in, units] dW tensor in the iteration's memory */
                const float alpha_beta[] = {1.0f, o->momentum};
                salus_graph_op(g, "matmul_acc", 3,
                               (salus_value[]){l->x, dy, state_value(g, w->state[0], w)}, 2, ta, 2,
                               alpha_beta);
                w->grad_in_velocity = 1;
            } else {
                w->grad = OPI(g, "matmul", ta, l->x, dy);
            }
            b->grad = OP(g, "bias_grad", dy);
            if (need_dx)
                dx = OPI(g, "matmul", tb, dy, w->value);
            break;
        case L_CONV:
            w->grad = OPI(g, "conv2d_grad_filter", conv, dy, l->x, w->value);
            b->grad = OP(g, "channel_bias_grad", dy);
            if (need_dx)
                dx = OPI(g, "conv2d_grad_input", conv, dy, w->value, l->x);
            break;
        case L_MAXPOOL:
            if (i > 0 && l[-1].after_pool)
                dy = OP(g, "relu_grad_mask", dy, l[-1].relu_bits);
            dx = OPI(g, "maxpool_grad", pool, dy, l->x, l->y);
            break;
        case L_AVGPOOL:
            dx = OPI(g, "avgpool_grad", pool, dy, l->x);
            break;
        case L_BN:
            dx = OP(g, "batchnorm_grad", dy, l->x, w->value, l->saved_mean, l->saved_invstd);
            w->grad = dx + 1;
            b->grad = dx + 2;
            break;
        case L_RELU:
            dx = l->after_pool ? dy : OP(g, "relu_grad_mask", dy, l->relu_bits);
            break;
        case L_SIGMOID:
            dx = OP(g, "sigmoid_grad", dy, l->y);
            break;
        case L_TANH:
            dx = OP(g, "tanh_grad", dy, l->y);
            break;
        case L_FLATTEN: {
            int64_t dims[4];
            int n = batched(m->batch, l->in_ndim, l->in, dims);
            dx = salus_graph_op(g, "reshape", 1, &dy, (unsigned) n, dims, 0, NULL);
            break;
        }
        }
        for (int p = 0; p < 2; p++)
            if (l->param[p] >= 0)
                update(g, &m->params[l->param[p]], o, t);
        dy = dx;
    }
}

int salus_model_compile(salus_model *m, salus_session *s, const salus_optimizer *opt, int64_t batch,
                        int64_t infer_batch, uint64_t seed)
{
    if (m->error[0])
        return SL_EINVAL;
    if (m->train)
        return fail(m, "model is already compiled");
    if (!opt || !(opt->lr > 0) || opt->kind < SALUS_SGD || opt->kind > SALUS_ADAM)
        return fail(m, "invalid optimizer");
    if (batch < 1 || infer_batch < 1 || m->n_layers == 0)
        return fail(m, "need layers and batch sizes >= 1");
    const layer *last = &m->layers[m->n_layers - 1];
    if (last->out_ndim != 1 || last->out[0] < 2)
        return fail(m, "the last layer must produce [classes] per sample (classes >= 2)");
    m->session = s;
    m->batch = batch;
    m->infer_batch = infer_batch;
    int rc = create_params(m, opt, seed);
    if (rc)
        return rc;

    int64_t dims[4];
    m->train = salus_graph_new();
    m->infer = salus_graph_new();
    if (!m->train || !m->infer)
        return fail(m, "out of memory");
    int n = batched(batch, m->sample_ndim, m->sample, dims);
    salus_value x = salus_graph_input(m->train, SALUS_F32, n, dims);
    salus_value labels = salus_graph_input(m->train, SALUS_I32, 1, &batch);
    salus_value logits = forward(m, m->train, x, batch, 1);
    m->train_loss = OP(m->train, "softmax_xent", logits, labels);
    backward(m, m->train, OP(m->train, "softmax_xent_grad", m->train_loss + 1, labels), opt);

    n = batched(infer_batch, m->sample_ndim, m->sample, dims);
    x = salus_graph_input(m->infer, SALUS_F32, n, dims);
    m->infer_classes = OP(m->infer, "argmax", forward(m, m->infer, x, infer_batch, 0));

    for (salus_graph *g = m->train; g; g = g == m->train ? m->infer : NULL) {
        if (salus_graph_error(g))
            return fail(m, "%s graph: %s", g == m->train ? "training" : "inference",
                        salus_graph_error(g));
        if ((rc = salus_graph_register(s, g, NULL)) != SL_OK)
            return fail(m, "registering the %s graph: %s", g == m->train ? "training" : "inference",
                        salus_last_error(s->client)),
                   rc;
    }
    return SL_OK;
}

int salus_model_train_step(salus_model *m, const float *x, const int32_t *labels, float *loss)
{
    if (!m->train || m->error[0])
        return SL_EINVAL;
    float l;
    const void *feeds[] = {x, labels};
    void *out[] = {&l};
    int rc = salus_run(m->session, m->train, feeds, 1, &m->train_loss, out);
    if (rc == SL_OK && loss)
        *loss = l;
    return rc;
}

int salus_model_predict(salus_model *m, const float *x, int32_t *classes)
{
    if (!m->infer || m->error[0])
        return SL_EINVAL;
    const void *feeds[] = {x};
    void *out[] = {classes};
    return salus_run(m->session, m->infer, feeds, 1, &m->infer_classes, out);
}
