/* CNN training iterations as timed op lists (graphs.h). Each layer below
 * emits its forward op, its backward ops and the update of its parameters:
 * the iteration's time is a sum, so the order inside a layer does not
 * change it; the timeline keeps the order they are emitted in. */
#include "graphs.h"

#include "sim/sim.h"
#include "zoo.h"
#include "sl_alloc.h"
#include "sl_error.h"

#include <string.h>

static const char *const kind_names[SL_EVAL_KIND_COUNT] = {
    "conv_fwd", "conv_bwd", "batchnorm", "elementwise", "pool", "fc", "loss", "sgd"};

const char *sl_eval_op_kind_name(unsigned kind)
{
    return kind < SL_EVAL_KIND_COUNT ? kind_names[kind] : "?";
}

/* One iteration under construction. */
typedef struct net {
    const sl_sim_profile *p;
    int64_t batch;
    sl_eval_timeline *t;
    bool infer; /* forward only: backward and update ops are not emitted */
    bool adam;  /* parameters updated by Adam (one fused op each), not SGD */
    int error;  /* the first one; later ops are not emitted */
    /* a zoo network under construction (zoo.h): the current activation,
     * whether a convolution has run (the first one's input gradient is
     * never needed), a residual block's input and main path */
    sl_shape x, res_in, res_main;
    bool conv_seen;
} net;

/* The ops an inference request does not run: gradients and updates. The
 * transposed matmuls are fc's dW and dx. */
static bool backward_op(unsigned op, const sl_op_attrs *a)
{
    switch (op) {
    case SL_OP_SGD_UPDATE:
    case SL_OP_ADAM_UPDATE:
    case SL_OP_CONV2D_GRAD_FILTER:
    case SL_OP_CONV2D_GRAD_INPUT:
    case SL_OP_CHANNEL_BIAS_GRAD:
    case SL_OP_BATCHNORM_GRAD:
    case SL_OP_RELU_GRAD:
    case SL_OP_SIGMOID_GRAD:
    case SL_OP_TANH_GRAD:
    case SL_OP_MAXPOOL_GRAD:
    case SL_OP_AVGPOOL_GRAD:
    case SL_OP_BIAS_GRAD:
    case SL_OP_MSE_GRAD:
    case SL_OP_SOFTMAX_XENT_GRAD:
        return true;
    case SL_OP_MATMUL:
        return a && (a->i[0] || a->i[1]);
    default:
        return false;
    }
}

static sl_shape shp(unsigned ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    sl_shape s = {.dtype = SL_F32, .ndim = (uint8_t) ndim, .dims = {d0, d1, d2, d3}};
    return s;
}

static sl_shape vec(int64_t n)
{
    return shp(1, n, 0, 0, 0);
}

/* Validates and times one op; returns its first output's shape (in[0]'s
 * for ops without outputs, or after an error). */
static sl_shape emit(net *n, enum sl_eval_op_kind k, unsigned op, const sl_op_attrs *a,
                     const sl_shape *in, unsigned n_in)
{
    sl_shape out[SL_OP_MAX_OUT];
    sl_sim_timing tm;
    char err[128];
    if (n->error || (n->infer && backward_op(op, a)))
        return in[0];
    if (sl_op_infer(op, a, in, n_in, out, err, sizeof err) != SL_OK) {
        n->error = SL_EINVAL;
        return in[0];
    }
    int rc = sl_sim_op_timing(n->p, op, a, in, out, &tm);
    if (rc != SL_OK) {
        n->error = rc;
        return in[0];
    }
    sl_eval_timeline *t = n->t;
    if (t->n_ops == t->cap_ops) {
        size_t cap = t->cap_ops ? t->cap_ops * 2 : 256;
        sl_eval_op_time *ops = sl_reallocarray(t->ops, cap, sizeof *ops);
        if (!ops) {
            n->error = SL_ENOMEM;
            return in[0];
        }
        t->ops = ops;
        t->cap_ops = cap;
    }
    uint64_t ns = tm.launch_ns + tm.work_ns;
    /* how far the executor could split it (stepwise parts): its shapes */
    sl_op_call call = {
        .op = (uint16_t) op, .n_in = (uint8_t) n_in, .n_out = (uint8_t) sl_op_get(op)->n_out};
    if (a)
        call.attrs = *a;
    for (unsigned i = 0; i < n_in; i++)
        call.in[i].shape = in[i];
    for (unsigned o = 0; o < call.n_out; o++)
        call.out[o].shape = out[o];
    uint64_t most = sl_op_split_max(&call);
    t->ops[t->n_ops++] =
        (sl_eval_op_time){.op = op,
                          .kind = (uint8_t) k,
                          .ns = ns,
                          .launch_ns = tm.launch_ns,
                          .split_max = most > UINT32_MAX ? UINT32_MAX : (uint32_t) most,
                          .occupancy = tm.occupancy,
                          .block_ns = tm.block_ns,
                          .compute_ns = sl_sim_work_ns(n->p, tm.prec, tm.flops, 0, NULL),
                          .memory_ns = sl_sim_work_ns(n->p, SL_SIM_FP32, 0, tm.bytes, NULL),
                          .waves = tm.waves};
    t->iteration_ns += ns;
    t->work_ns += tm.work_ns;
    t->occupied_ns += (double) tm.work_ns * tm.occupancy;
    t->kind_ns[k] += ns;
    t->mem_bound_ns += tm.memory_bound ? ns : 0;
    t->flops += (double) tm.flops;
    return sl_op_get(op)->n_out ? out[0] : in[0];
}

static void sgd(net *n, sl_shape param)
{
    if (n->adam) { /* TensorFlow's ApplyAdam: one kernel per variable */
        sl_op_attrs a = {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}};
        sl_shape in[5] = {param, param, param, param, vec(1)};
        (void) emit(n, SL_EVAL_SGD, SL_OP_ADAM_UPDATE, &a, in, 5);
    } else {
        sl_op_attrs a = {.f = {0.1f}};
        sl_shape in[2] = {param, param};
        (void) emit(n, SL_EVAL_SGD, SL_OP_SGD_UPDATE, &a, in, 2);
    }
    n->t->params += sl_shape_elems(&param);
}

static sl_shape conv(net *n, sl_shape x, int64_t k, int64_t r, int64_t stride, int64_t pad,
                     bool need_dx, bool bias)
{
    sl_op_attrs a = {.i = {stride, stride, pad, pad, pad, pad, 1, 1, 1}};
    sl_shape w = shp(4, k, x.dims[1], r, r);
    sl_shape in[3] = {x, w};
    sl_shape y = emit(n, SL_EVAL_CONV_FWD, SL_OP_CONV2D, &a, in, 2);
    sl_shape gf[3] = {y, x, w};
    (void) emit(n, SL_EVAL_CONV_BWD, SL_OP_CONV2D_GRAD_FILTER, &a, gf, 3);
    if (need_dx) { /* the first layer's input gradient is never needed */
        sl_shape gi[3] = {y, w, x};
        (void) emit(n, SL_EVAL_CONV_BWD, SL_OP_CONV2D_GRAD_INPUT, &a, gi, 3);
    }
    sgd(n, w);
    if (bias) {
        sl_shape bin[2] = {y, vec(k)};
        (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_CHANNEL_BIAS_ADD, NULL, bin, 2);
        (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_CHANNEL_BIAS_GRAD, NULL, &y, 1);
        sgd(n, vec(k));
    }
    return y;
}

static sl_shape batchnorm(net *n, sl_shape x)
{
    sl_shape c = vec(x.dims[1]);
    sl_op_attrs a = {.f = {1e-5f, 0.9f}};
    sl_shape in[5] = {x, c, c, c, c};
    sl_shape y = emit(n, SL_EVAL_BN, SL_OP_BATCHNORM, &a, in, 5);
    sl_shape gin[5] = {y, x, c, c, c};
    (void) emit(n, SL_EVAL_BN, SL_OP_BATCHNORM_GRAD, NULL, gin, 5);
    sgd(n, c); /* scale */
    sgd(n, c); /* bias */
    return y;
}

static sl_shape relu(net *n, sl_shape x)
{
    sl_shape y = emit(n, SL_EVAL_ELEMWISE, SL_OP_RELU, NULL, &x, 1);
    sl_shape g[2] = {y, x};
    (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_RELU_GRAD, NULL, g, 2);
    return y;
}

static sl_shape maxpool(net *n, sl_shape x, int64_t k, int64_t stride, int64_t pad)
{
    sl_op_attrs a = {.i = {k, k, stride, stride, pad, pad, pad, pad}};
    sl_shape y = emit(n, SL_EVAL_POOL, SL_OP_MAXPOOL, &a, &x, 1);
    sl_shape g[3] = {y, x, y};
    (void) emit(n, SL_EVAL_POOL, SL_OP_MAXPOOL_GRAD, &a, g, 3);
    return y;
}

static sl_shape global_avgpool(net *n, sl_shape x)
{
    sl_op_attrs a = {.i = {x.dims[2], x.dims[3], 1, 1}};
    sl_shape y = emit(n, SL_EVAL_POOL, SL_OP_AVGPOOL, &a, &x, 1);
    sl_shape g[2] = {y, x};
    (void) emit(n, SL_EVAL_POOL, SL_OP_AVGPOOL_GRAD, &a, g, 2);
    (void) y;
    return shp(2, x.dims[0], x.dims[1], 0, 0); /* [N,C,1,1] viewed as [N,C] */
}

/* Fully connected: y = x W + b, with dW = x^T dy, dx = dy W^T, db. */
static sl_shape fc(net *n, sl_shape x, int64_t out)
{
    sl_shape w = shp(2, x.dims[1], out, 0, 0);
    sl_shape in[2] = {x, w};
    sl_shape y = emit(n, SL_EVAL_FC, SL_OP_MATMUL, NULL, in, 2);
    sl_shape bin[2] = {y, vec(out)};
    (void) emit(n, SL_EVAL_FC, SL_OP_BIAS_ADD, NULL, bin, 2);
    (void) emit(n, SL_EVAL_FC, SL_OP_BIAS_GRAD, NULL, &y, 1);
    sl_op_attrs ta = {.i = {1, 0}}, tb = {.i = {0, 1}};
    sl_shape dw[2] = {x, y}, dx[2] = {y, w};
    (void) emit(n, SL_EVAL_FC, SL_OP_MATMUL, &ta, dw, 2);
    (void) emit(n, SL_EVAL_FC, SL_OP_MATMUL, &tb, dx, 2);
    sgd(n, w);
    sgd(n, vec(out));
    return y;
}

static void softmax_xent(net *n, sl_shape logits)
{
    sl_shape labels = {.dtype = SL_I32, .ndim = 1, .dims = {logits.dims[0]}};
    sl_shape in[2] = {logits, labels};
    (void) emit(n, SL_EVAL_LOSS, SL_OP_SOFTMAX_XENT, NULL, in, 2);
    (void) emit(n, SL_EVAL_LOSS, SL_OP_SOFTMAX_XENT_GRAD, NULL, in, 2);
}

/* The zoo's layers as timed ops (zoo.h): each hook emits its forward
 * op, its backward ops and the update of its parameters. */
static void z_input(void *ctx, int64_t c, int64_t h, int64_t w)
{
    net *n = ctx;
    n->x = shp(4, n->batch, c, h, w);
}

static void z_conv(void *ctx, const sl_zoo_conv *c)
{
    net *n = ctx;
    sl_shape y = conv(n, n->x, c->out, c->k, c->stride, c->pad, n->conv_seen, !c->bn);
    n->conv_seen = true;
    if (c->bn)
        y = batchnorm(n, y);
    n->x = c->relu ? relu(n, y) : y;
}

static void z_maxpool(void *ctx, int64_t k, int64_t stride, int64_t pad)
{
    net *n = ctx;
    n->x = maxpool(n, n->x, k, stride, pad);
}

static void z_global_avgpool(void *ctx)
{
    net *n = ctx;
    n->x = global_avgpool(n, n->x);
}

static void z_fc(void *ctx, int64_t out, bool act)
{
    net *n = ctx;
    sl_shape x = n->x;
    if (x.ndim == 4) /* flattened */
        x = shp(2, n->batch, x.dims[1] * x.dims[2] * x.dims[3], 0, 0);
    sl_shape y = fc(n, x, out);
    n->x = act ? relu(n, y) : y;
}

static void z_residual_begin(void *ctx)
{
    net *n = ctx;
    n->res_in = n->x;
}

static void z_residual_shortcut(void *ctx)
{
    net *n = ctx;
    n->res_main = n->x;
    n->x = n->res_in;
}

/* The residual add runs once forward and once backward (summing the two
 * branches' input gradients). */
static void z_residual_end(void *ctx)
{
    net *n = ctx;
    sl_shape add[2] = {n->res_main, n->res_main};
    (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_ADD, NULL, add, 2);
    if (!n->infer)
        (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_ADD, NULL, add, 2);
    n->x = relu(n, n->res_main);
}

static void z_loss(void *ctx)
{
    net *n = ctx;
    softmax_xent(n, n->x);
}

/* An activation the registry has (tanh, sigmoid) and its gradient. ELU,
 * leaky ReLU and softplus are charged as tanh: one transcendental
 * elementwise pass each way, the same bytes. */
static sl_shape act(net *n, unsigned op, unsigned grad, sl_shape x)
{
    sl_shape y = emit(n, SL_EVAL_ELEMWISE, op, NULL, &x, 1);
    sl_shape g[2] = {y, y};
    (void) emit(n, SL_EVAL_ELEMWISE, grad, NULL, g, 2);
    return y;
}

/* The Salus artifact's VAE (tests/test_tf/lib/vae/vae.py): MNIST, Gaussian
 * MLP encoder 784-500-500-(2x20), Bernoulli MLP decoder 20-500-500-784,
 * Adam. The sampling, clipping and the ELBO's reductions are charged as
 * elementwise passes over their tensors (mul, add, two losses); dropout is
 * not modeled. */
static void vae(net *n)
{
    n->adam = true;
    sl_shape x = shp(2, n->batch, 784, 0, 0);
    sl_shape h = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, fc(n, x, 500)); /* elu */
    h = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, fc(n, h, 500));
    sl_shape g = fc(n, h, 40);
    (void) act(n, SL_OP_TANH, SL_OP_TANH_GRAD, g); /* softplus of the stddev half */
    sl_shape z = shp(2, n->batch, 20, 0, 0);
    sl_shape zz[2] = {z, z};
    (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_MUL, NULL, zz, 2); /* sigma * eps */
    (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_ADD, NULL, zz, 2); /* mu + ... */
    h = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, fc(n, z, 500));
    h = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, fc(n, h, 500)); /* elu */
    sl_shape y = act(n, SL_OP_SIGMOID, SL_OP_SIGMOID_GRAD, fc(n, h, 784));
    sl_shape l[2] = {y, y};
    (void) emit(n, SL_EVAL_LOSS, SL_OP_MSE_LOSS, NULL, l, 2); /* marginal likelihood */
    (void) emit(n, SL_EVAL_LOSS, SL_OP_MSE_GRAD, NULL, l, 2);
    sl_shape k[2] = {g, g};
    (void) emit(n, SL_EVAL_LOSS, SL_OP_MSE_LOSS, NULL, k, 2); /* KL divergence */
    (void) emit(n, SL_EVAL_LOSS, SL_OP_MSE_GRAD, NULL, k, 2);
}

/* The Salus artifact's super-resolution net (tests/test_tf/lib/subpixel/
 * model.py, ESPCN-style): 32x32 RGB in, 1x1 to 64 channels, 5x5 64->64, 5x5
 * 64->48 (stride-1 transposed convolutions: a convolution's cost), leaky
 * ReLUs (charged as tanh), a 4x pixel shuffle to 128x128x3 (charged as one
 * copy pass), tanh, mean squared error, Adam. */
static void superres(net *n)
{
    n->adam = true;
    sl_shape x = shp(4, n->batch, 3, 32, 32);
    x = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, conv(n, x, 64, 1, 1, 0, false, true));
    x = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, conv(n, x, 64, 5, 1, 2, true, true));
    x = conv(n, x, 48, 5, 1, 2, true, true);
    sl_shape y = shp(4, n->batch, 3, 128, 128);
    (void) emit(n, SL_EVAL_ELEMWISE, SL_OP_COPY, NULL, &x, 1); /* pixel shuffle */
    y = act(n, SL_OP_TANH, SL_OP_TANH_GRAD, y);
    sl_shape l[2] = {y, y};
    (void) emit(n, SL_EVAL_LOSS, SL_OP_MSE_LOSS, NULL, l, 2);
    (void) emit(n, SL_EVAL_LOSS, SL_OP_MSE_GRAD, NULL, l, 2);
}

/* Models outside the CNN table: the Salus artifact's small networks. */
static const struct {
    const char *name;
    void (*build)(net *n);
} small_models[] = {{"vae", vae}, {"superres", superres}};
#define N_SMALL (sizeof small_models / sizeof small_models[0])

static int find_small(const char *model)
{
    for (unsigned i = 0; model && i < N_SMALL; i++)
        if (strcmp(small_models[i].name, model) == 0)
            return (int) i;
    return -1;
}

bool sl_eval_graph_known(const char *model)
{
    return sl_zoo_known(model) || find_small(model) >= 0;
}

int sl_eval_timeline_build(const char *model, int64_t batch, const sl_sim_profile *p,
                           sl_eval_timeline *out)
{
    return sl_eval_timeline_build_ex(model, batch, p, false, out);
}

double sl_eval_timeline_utilisation(const sl_eval_timeline *t)
{
    return t->iteration_ns ? t->occupied_ns / (double) t->iteration_ns : 1.0;
}

double sl_eval_timeline_launch_share(const sl_eval_timeline *t)
{
    if (!t->iteration_ns || t->work_ns >= t->iteration_ns)
        return 0.0;
    return (double) (t->iteration_ns - t->work_ns) / (double) t->iteration_ns;
}

const char *sl_eval_launch_name(enum sl_eval_launch launch)
{
    switch (launch) {
    case SL_EVAL_LAUNCH_SERIAL:
        return "serial";
    case SL_EVAL_LAUNCH_OPS:
        return "ops";
    case SL_EVAL_LAUNCH_GRAPH:
        return "graph";
    }
    return "?";
}

/* One op after the others: when its work is done, given when the ops
 * before it were done and (op by op, pipelined) when their launches
 * ended. In a graph replay the launch is the node's cost on its stream
 * (the replay's own cost is in *launched before the first op). */
static uint64_t chain_op(uint64_t done, uint64_t *launched, uint64_t launch, uint64_t work,
                         enum sl_eval_launch mode)
{
    if (mode == SL_EVAL_LAUNCH_SERIAL)
        return done + launch + work;
    if (mode == SL_EVAL_LAUNCH_GRAPH)
        return (done > *launched ? done : *launched) + launch + work;
    *launched += launch;
    return (done > *launched ? done : *launched) + work;
}

uint64_t sl_eval_timeline_graph_ns(const sl_eval_timeline *t)
{
    if (!t->n_ops)
        return 0;
    uint64_t launched = t->graph_launch_ns, done = 0;
    for (size_t i = 0; i < t->n_ops; i++)
        done = chain_op(done, &launched, t->graph_node_ns, t->ops[i].ns - t->ops[i].launch_ns,
                        SL_EVAL_LAUNCH_GRAPH);
    return done;
}

uint64_t sl_eval_timeline_pipelined_ns(const sl_eval_timeline *t)
{
    uint64_t launched = 0, done = 0;
    for (size_t i = 0; i < t->n_ops; i++)
        done = chain_op(done, &launched, t->ops[i].launch_ns, t->ops[i].ns - t->ops[i].launch_ns,
                        SL_EVAL_LAUNCH_OPS);
    return done;
}

int sl_eval_timeline_build_ex(const char *model, int64_t batch, const sl_sim_profile *p,
                              bool inference, sl_eval_timeline *out)
{
    memset(out, 0, sizeof *out);
    int sm = find_small(model);
    if ((!sl_zoo_known(model) && sm < 0) || batch < 1 || !p)
        return SL_EINVAL;
    net n = {.p = p, .batch = batch, .t = out, .infer = inference};
    const sl_zoo_builder zb = {.ctx = &n,
                               .input = z_input,
                               .conv = z_conv,
                               .maxpool = z_maxpool,
                               .global_avgpool = z_global_avgpool,
                               .fc = z_fc,
                               .residual_begin = z_residual_begin,
                               .residual_shortcut = z_residual_shortcut,
                               .residual_end = z_residual_end,
                               .loss = z_loss};
    if (sm >= 0)
        small_models[sm].build(&n);
    else
        (void) sl_zoo_build(model, &zb);
    if (n.error) {
        sl_eval_timeline_fini(out);
        return n.error;
    }
    out->graph_launch_ns = p->graph_launch_ns;
    out->graph_node_ns = p->graph_node_ns;
    return SL_OK;
}

void sl_eval_timeline_fini(sl_eval_timeline *t)
{
    sl_free(t->ops);
    memset(t, 0, sizeof *t);
}

void sl_eval_part_granularity(const sl_sim_profile *p, unsigned *min_sms, unsigned *align)
{
    if (!strncmp(p->name, "h100", 4) || !strncmp(p->name, "h200", 4)) {
        *min_sms = 8;
        *align = 8;
    } else if (!strncmp(p->name, "a100", 4)) {
        *min_sms = 4;
        *align = 2;
    } else {
        *min_sms = 2;
        *align = 2;
    }
}

uint64_t sl_eval_timeline_ns_on_ex(const sl_eval_timeline *t, const sl_sim_profile *p, unsigned sms,
                                   enum sl_eval_launch launch)
{
    uint64_t launched = 0, done = 0;
    if (launch == SL_EVAL_LAUNCH_GRAPH && t->n_ops)
        launched = t->graph_launch_ns;
    for (size_t i = 0; i < t->n_ops; i++) {
        const sl_eval_op_time *o = &t->ops[i];
        uint64_t work = sl_sim_part_work_ns(p->sm_count, o->compute_ns, o->memory_ns, o->waves, sms,
                                            1.0, NULL, NULL);
        uint64_t cost = launch == SL_EVAL_LAUNCH_GRAPH ? t->graph_node_ns : o->launch_ns;
        done = chain_op(done, &launched, cost, work, launch);
    }
    return done;
}

uint64_t sl_eval_timeline_ns_on(const sl_eval_timeline *t, const sl_sim_profile *p, unsigned sms)
{
    return sl_eval_timeline_ns_on_ex(t, p, sms, SL_EVAL_LAUNCH_SERIAL);
}

uint64_t sl_eval_timeline_solo_ns(const sl_eval_timeline *t, enum sl_eval_launch launch)
{
    if (launch == SL_EVAL_LAUNCH_GRAPH)
        return sl_eval_timeline_graph_ns(t);
    return launch == SL_EVAL_LAUNCH_OPS ? sl_eval_timeline_pipelined_ns(t) : t->iteration_ns;
}

double sl_eval_timeline_utilisation_ex(const sl_eval_timeline *t, enum sl_eval_launch launch)
{
    uint64_t solo = sl_eval_timeline_solo_ns(t, launch);
    return solo ? t->occupied_ns / (double) solo : 1.0;
}

unsigned sl_eval_timeline_need_sms_ex(const sl_eval_timeline *t, const sl_sim_profile *p,
                                      unsigned min_sms, unsigned align, double slack,
                                      enum sl_eval_launch launch)
{
    double whole = (double) sl_eval_timeline_ns_on_ex(t, p, p->sm_count, launch);
    for (unsigned s = min_sms; align && s < p->sm_count; s += align)
        if ((double) sl_eval_timeline_ns_on_ex(t, p, s, launch) <= (1.0 + slack) * whole)
            return s;
    return p->sm_count;
}

unsigned sl_eval_timeline_need_sms(const sl_eval_timeline *t, const sl_sim_profile *p,
                                   unsigned min_sms, unsigned align, double slack)
{
    return sl_eval_timeline_need_sms_ex(t, p, min_sms, align, slack, SL_EVAL_LAUNCH_SERIAL);
}
