/* nn: a stack of layers compiled into a training graph (forward, softmax
 * cross-entropy, then backward and optimizer updates by automatic
 * differentiation, train.c) and an inference graph (forward, argmax).
 * Shapes are tracked per sample while layers are added; the graph builder
 * checks them again, with the batch, at compile time.
 * A ReLU followed by a max pool runs after the pool instead: the max of
 * ReLUs is the ReLU of the max (ReLU never decreases), and the gradient
 * reaches the same element (the first max of the window, when it is
 * positive), but the ReLU and its gradient touch a quarter of the data. */
#include "nn_internal.h"
#include "train_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    salus_graph_free(m->part);
    sl_free(m->named);
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

int salus_model_conv2d_ex(salus_model *m, int64_t filters, int64_t kernel, int64_t stride,
                          int64_t pad, unsigned flags)
{
    if (!m->error[0] && (flags & ~(unsigned) SALUS_CONV_NO_BIAS))
        return fail(m, "layer %d: conv2d flags 0x%x: only SALUS_CONV_NO_BIAS is known", m->n_layers,
                    flags);
    int rc = spatial(m, L_CONV, filters, kernel, stride, pad);
    if (rc == SL_OK)
        m->layers[m->n_layers - 1].no_bias = (flags & SALUS_CONV_NO_BIAS) != 0;
    return rc;
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

/* ---- residual blocks ---------------------------------------------------- */

int salus_model_residual_begin(salus_model *m)
{
    if (!m->error[0] && m->n_open == MAX_RES_DEPTH)
        return fail(m, "layer %d: more than %d residual blocks open", m->n_layers, MAX_RES_DEPTH);
    layer *l = push(m, L_RES_BEGIN);
    if (!l)
        return SL_EINVAL;
    m->open[m->n_open++] = m->n_layers;
    return commit(m);
}

int salus_model_residual_shortcut(salus_model *m)
{
    if (!m->error[0] && m->n_open == 0)
        return fail(m, "layer %d: a residual shortcut outside a block", m->n_layers);
    int b = m->n_open ? m->open[m->n_open - 1] : 0;
    if (!m->error[0] && m->layers[b].block)
        return fail(m, "layer %d: the block of layer %d has its shortcut already", m->n_layers, b);
    layer *l = push(m, L_RES_SHORTCUT);
    if (!l)
        return SL_EINVAL;
    /* the layers that follow transform the block's input */
    l->block = b;
    m->layers[b].block = m->n_layers;
    l->out_ndim = m->layers[b].in_ndim;
    memcpy(l->out, m->layers[b].in, sizeof l->out);
    return commit(m);
}

/* Writes "[a,b,c]" for a per-sample shape. */
static const char *dims_text(char *buf, size_t len, int ndim, const int64_t *d)
{
    int n = snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n > 0 && (size_t) n < len; i++)
        n += snprintf(buf + n, len - (size_t) n, "%s%lld", i ? "," : "", (long long) d[i]);
    if (n > 0 && (size_t) n < len)
        snprintf(buf + n, len - (size_t) n, "]");
    return buf;
}

int salus_model_residual_end(salus_model *m)
{
    if (!m->error[0] && m->n_open == 0)
        return fail(m, "layer %d: a residual end without a begin", m->n_layers);
    int b = m->n_open ? m->open[m->n_open - 1] : 0;
    layer *l = push(m, L_RES_END);
    if (!l)
        return SL_EINVAL;
    l->block = b;
    /* the main path: up to the shortcut marker when there is one, else all
     * of the block; the shortcut: what follows the marker, else the input */
    const layer *main_out = l - 1, *sc = m->layers[b].block ? &m->layers[m->layers[b].block] : NULL;
    int main_ndim = sc ? sc->in_ndim : main_out->out_ndim;
    const int64_t *main_dims = sc ? sc->in : main_out->out;
    int sc_ndim = sc ? l->in_ndim : m->layers[b].in_ndim;
    const int64_t *sc_dims = sc ? l->in : m->layers[b].in;
    if (main_ndim != sc_ndim || memcmp(main_dims, sc_dims, (size_t) main_ndim * sizeof *sc_dims)) {
        char a[64], c[64];
        return fail(m,
                    "layer %d: the residual block of layer %d gives %s on its main path and %s "
                    "on its shortcut (transform the shortcut after salus_model_residual_shortcut)",
                    m->n_layers, b, dims_text(a, sizeof a, main_ndim, main_dims),
                    dims_text(c, sizeof c, sc_ndim, sc_dims));
    }
    l->out_ndim = main_ndim;
    memcpy(l->out, main_dims, (size_t) main_ndim * sizeof *main_dims);
    m->n_open--;
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

/* A zero-filled state tensor shaped like a parameter (batchnorm). */
static int new_state(salus_model *m, int ndim, const int64_t *dims, uint64_t *id)
{
    int rc = salus_tensor_create(m->session, SALUS_F32, ndim, dims, NULL, id);
    if (rc)
        fail(m, "creating batchnorm state: %s", salus_last_error(m->session->client));
    return rc;
}

static int create_params(salus_model *m, uint64_t seed)
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
            if (!l->no_bias)
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

/* A ReLU over x: relu_mask when training (the backward pass needs only
 * where y > 0: keeping that as bits lets y die once the next layer has read
 * it, 1/32 of the memory), plain relu otherwise. */
static salus_value activate(salus_graph *g, salus_value x, int training)
{
    return OP(g, training ? "relu_mask" : "relu", x);
}

/* Emits the forward pass; records per-layer values when training. */
static salus_value forward(salus_model *m, salus_graph *g, salus_value x, int64_t batch,
                           int training)
{
    /* open residual blocks: their input (the shortcut's source) and, once
     * the shortcut starts, their main path's output */
    salus_value block_in[MAX_RES_DEPTH], block_main[MAX_RES_DEPTH];
    int depth = 0;
    for (int i = 0; i < m->n_layers; i++) {
        layer *l = &m->layers[i];
        salus_value y = SALUS_NO_VALUE, w = SALUS_NO_VALUE, b = SALUS_NO_VALUE;
        if (l->param[0] >= 0) {
            w = param_value(g, &m->params[l->param[0]]);
            if (training)
                m->params[l->param[0]].value = w;
        }
        if (l->param[1] >= 0) {
            b = param_value(g, &m->params[l->param[1]]);
            if (training)
                m->params[l->param[1]].value = b;
        }
        const int64_t conv[] = {l->stride, l->stride, l->pad, l->pad, l->pad, l->pad};
        const int64_t pool[] = {l->kernel, l->kernel, l->stride, l->stride};
        switch (l->kind) {
        case L_DENSE:
            y = OP(g, "bias_add", OP(g, "matmul", x, w), b);
            break;
        case L_CONV:
            y = OPI(g, "conv2d", conv, x, w);
            if (b != SALUS_NO_VALUE)
                y = OP(g, "channel_bias_add", y, b);
            break;
        case L_MAXPOOL:
            y = OPI(g, "maxpool", pool, x);
            if (i > 0 && l[-1].after_pool) {
                /* The ReLU moved here. maxpool_grad gets the ReLU's output
                 * as the pool's: they differ only in windows whose max is
                 * not positive, where the ReLU's gradient already zeroed
                 * dy, so the pool's own output can die in place. */
                x = activate(g, y, training);
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
            } else {
                const float f[] = {BN_EPSILON};
                y = OPF(g, "batchnorm_infer", f, x, w, b, rm, rv);
            }
            break;
        }
        case L_RELU:
            l->after_pool = i + 1 < m->n_layers && l[1].kind == L_MAXPOOL;
            y = l->after_pool ? x : activate(g, x, training);
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
        case L_RES_BEGIN: /* at most MAX_RES_DEPTH open (residual_begin), all closed (compile) */
            block_main[depth] = SALUS_NO_VALUE;
            block_in[depth++] = y = x;
            break;
        case L_RES_SHORTCUT:
            block_main[depth - 1] = x;
            y = block_in[depth - 1];
            break;
        case L_RES_END: {
            depth--;
            salus_value main_path = block_main[depth] != SALUS_NO_VALUE ? block_main[depth] : x;
            salus_value shortcut = block_main[depth] != SALUS_NO_VALUE ? x : block_in[depth];
            y = OP(g, "add", main_path, shortcut);
            break;
        }
        }
        x = y;
    }
    return x;
}

/* Mixed precision (salus_optimizer.precision): rewrites the forward graph
 * *g by autocast's rules (autocast.c) and maps *v and, when training, the
 * parameters' values into the copy. Nothing to do in f32. */
static int mixed(salus_model *m, salus_graph **g, salus_value *v, int training)
{
    if (m->opt.precision == SALUS_F32 || salus_graph_error(*g))
        return SL_OK;
    salus_graph *copy;
    salus_value *map;
    char err[256];
    int rc = sl_autocast(*g, m->opt.precision, &copy, &map, err, sizeof err);
    if (rc)
        return fail(m, "%s", err);
    for (int i = 0; i < m->n_params && training; i++)
        m->params[i].value = map[m->params[i].value];
    *v = map[*v];
    sl_free(map);
    salus_graph_free(*g);
    *g = copy;
    return SL_OK;
}

/* Appends the backward pass and the optimizer's updates of every parameter
 * to the training graph, by automatic differentiation from its loss. */
static int backward(salus_model *m, const salus_optimizer *opt)
{
    sl_train t = {.session = m->session, .g = m->train, .loss = m->train_loss, .opt = *opt};
    t.params = sl_calloc((size_t) m->n_params + 1, sizeof *t.params);
    if (!t.params)
        return fail(m, "out of memory");
    t.n_params = (unsigned) m->n_params;
    for (int i = 0; i < m->n_params; i++) {
        const param *p = &m->params[i];
        t.params[i].tensor = p->tensor;
        t.params[i].value = p->value;
        t.params[i].shape = (sl_shape){.dtype = SL_F32, .ndim = (uint8_t) p->ndim};
        memcpy(t.params[i].shape.dims, p->dims, (size_t) p->ndim * sizeof *p->dims);
    }
    char err[256];
    int rc = sl_train_emit(&t, err, sizeof err);
    for (int i = 0; i < m->n_params; i++)
        memcpy(m->params[i].state, t.params[i].state, sizeof m->params[i].state);
    m->step_tensor = t.step_tensor;
    m->lr_tensor = t.lr_tensor;
    m->scale_tensor = t.scale_tensor;
    m->growth_tensor = t.growth_tensor;
    m->skipped_tensor = t.skipped_tensor;
    sl_free(t.params);
    if (rc)
        fail(m, "training graph: %s", err);
    return rc;
}

int salus_model_compile(salus_model *m, salus_session *s, const salus_optimizer *opt, int64_t batch,
                        int64_t infer_batch, uint64_t seed)
{
    if (m->error[0])
        return SL_EINVAL;
    if (m->train)
        return fail(m, "model is already compiled");
    salus_optimizer o;
    char err[200];
    if (sl_train_resolve(opt, &o, err, sizeof err) != SL_OK)
        return fail(m, "%s", err);
    if (batch < 1 || infer_batch < 1 || m->n_layers == 0)
        return fail(m, "need layers and batch sizes >= 1");
    if (m->n_open)
        return fail(m, "the residual block of layer %d has no end", m->open[m->n_open - 1]);
    const layer *last = &m->layers[m->n_layers - 1];
    if (last->out_ndim != 1 || last->out[0] < 2)
        return fail(m, "the last layer must produce [classes] per sample (classes >= 2)");
    m->session = s;
    m->batch = batch;
    m->infer_batch = infer_batch;
    int rc = create_params(m, seed);
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
    m->opt = o;
    if ((rc = mixed(m, &m->train, &logits, 1)) != SL_OK)
        return rc;
    m->train_loss = OP(m->train, "softmax_xent", sl_autocast_to(m->train, logits, SL_F32), labels);
    if (!salus_graph_error(m->train) && (rc = backward(m, &o)) != SL_OK)
        return rc;
    if ((rc = sl_nn_name_tensors(m)) != SL_OK)
        return rc;

    n = batched(infer_batch, m->sample_ndim, m->sample, dims);
    x = salus_graph_input(m->infer, SALUS_F32, n, dims);
    logits = forward(m, m->infer, x, infer_batch, 0);
    if ((rc = mixed(m, &m->infer, &logits, 0)) != SL_OK)
        return rc;
    m->infer_classes = OP(m->infer, "argmax", logits);

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
    salus_run_write w = {.tensor = m->lr_tensor, .data = &m->lr_next, .bytes = sizeof m->lr_next};
    int rc = salus_run_ex(m->session, m->train, feeds, 1, &m->train_loss, out, m->lr_pending, &w);
    if (rc == SL_OK)
        m->lr_pending = false;
    if (rc == SL_OK && loss)
        *loss = l;
    return rc;
}

/* An inference graph for `batch` samples (argmax per sample), registered;
 * NULL with the reason in the client's last error. */
static salus_graph *inference_graph(salus_model *m, int64_t batch, salus_value *classes)
{
    int64_t dims[4];
    salus_graph *g = salus_graph_new();
    if (!g)
        return NULL;
    int n = batched(batch, m->sample_ndim, m->sample, dims);
    salus_value x = salus_graph_input(g, SALUS_F32, n, dims);
    salus_value logits = forward(m, g, x, batch, 0);
    if (mixed(m, &g, &logits, 0) != SL_OK) {
        salus_graph_free(g);
        return NULL;
    }
    *classes = OP(g, "argmax", logits);
    if (salus_graph_error(g) || salus_graph_register(m->session, g, NULL) != SL_OK) {
        salus_graph_free(g);
        return NULL;
    }
    return g;
}

/* Runs x through parts of `part` samples (the last one zero-padded). */
static int predict_parts(salus_model *m, const float *x, int32_t *classes)
{
    size_t sample = 1;
    for (int d = 0; d < m->sample_ndim; d++)
        sample *= (size_t) m->sample[d];
    int64_t part = m->part_batch;
    float *pad = NULL;
    int32_t *pad_out = NULL;
    int rc = SL_OK;
    for (int64_t at = 0; at < m->infer_batch && rc == SL_OK; at += part) {
        int64_t n = m->infer_batch - at < part ? m->infer_batch - at : part;
        const float *src = x + (size_t) at * sample;
        int32_t *dst = classes + at;
        if (n < part) {
            pad = sl_calloc((size_t) part * sample, sizeof *pad);
            pad_out = sl_calloc((size_t) part, sizeof *pad_out);
            if (!pad || !pad_out) {
                rc = SL_ENOMEM;
                break;
            }
            memcpy(pad, src, (size_t) n * sample * sizeof *pad);
            src = pad;
            dst = pad_out;
        }
        const void *feeds[] = {src};
        void *out[] = {dst};
        rc = salus_run(m->session, m->part, feeds, 1, &m->part_classes, out);
        if (rc == SL_OK && n < part)
            memcpy(classes + at, pad_out, (size_t) n * sizeof *classes);
    }
    sl_free(pad);
    sl_free(pad_out);
    return rc;
}

/* A batch whose iteration needs more lane workspace than salusd gives (a
 * convolution's scratch grows with the batch) runs in parts, halved until
 * they fit; the part graph is kept for later calls. Every op of the
 * inference graph works per sample, so the parts compute what the whole
 * batch would. */
int salus_model_amp_state(salus_model *m, float *scale, int64_t *skipped)
{
    if (!m->train || m->error[0])
        return SL_EINVAL;
    sl_train t = {.session = m->session,
                  .scale_tensor = m->scale_tensor,
                  .skipped_tensor = m->skipped_tensor};
    return sl_train_amp_state(&t, scale, skipped);
}

int salus_model_predict(salus_model *m, const float *x, int32_t *classes)
{
    if (!m->infer || m->error[0])
        return SL_EINVAL;
    if (m->part)
        return predict_parts(m, x, classes);
    const void *feeds[] = {x};
    void *out[] = {classes};
    int rc = salus_run(m->session, m->infer, feeds, 1, &m->infer_classes, out);
    for (int64_t part = m->infer_batch / 2; rc == SL_EEXHAUSTED && part >= 1; part /= 2) {
        salus_graph_free(m->part);
        m->part_batch = part;
        if (!(m->part = inference_graph(m, part, &m->part_classes)))
            return SL_EEXHAUSTED;
        rc = predict_parts(m, x, classes);
        if (rc == SL_EEXHAUSTED && part == 1) {
            /* not even one sample fits: the reason names that need. Freeing
             * the graph is a request of its own, which clears the client's
             * error: the reason goes back after it */
            char why[sizeof m->session->client->last_error];
            memcpy(why, m->session->client->last_error, sizeof why);
            salus_graph_free(m->part);
            m->part = NULL;
            memcpy(m->session->client->last_error, why, sizeof why);
        }
    }
    return rc;
}
