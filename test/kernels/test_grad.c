/* The gradient rules (kernels/ops/ops_grad.c) of every differentiable op
 * against central finite differences: each rule's ops run on the cpu
 * backend through the device contract (kt_run_op), and so does every
 * forward evaluation of the differences. For an op with output y the
 * scalar differentiated is sum(y * R) for a random R (R is then y's
 * gradient); for a loss op it is the loss itself (the seed).
 *
 * The forward runs in f32, so the differences use a step of 1e-2 and
 * inputs kept away from kinks (ReLU's 0, ties of a max pool) by more than
 * the step; the tolerance covers the f32 rounding of the differences. */
#include "kt_nn.h"

#include "ops_axes.h"
#include "ops_grad.h"
#include "sl_alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define FD_STEP 1e-2
#define FD_TOL 1e-2
#define MAX_VALUES 48
#define MAX_OPS 24

typedef struct val {
    sl_shape s;
    float *d;
} val;

typedef struct gop {
    unsigned op, n_in;
    uint32_t in[SL_OP_MAX_IN];
    sl_op_attrs a;
} gop;

/* A tiny graph executed op by op on the cpu: the emitter the rules write to. */
typedef struct mg {
    kt_env *env;
    val v[MAX_VALUES];
    unsigned nv;
    gop ops[MAX_OPS];
    unsigned nops;
} mg;

static uint32_t mg_value(mg *g, const sl_shape *s, const float *init)
{
    assert_true(g->nv < MAX_VALUES);
    val *v = &g->v[g->nv];
    v->s = *s;
    size_t bytes = sl_shape_bytes(s);
    v->d = (float *) kt_fvec((bytes + 3) / 4);
    if (init)
        memcpy(v->d, init, bytes);
    return g->nv++;
}

static uint32_t mg_emit(void *ctx, unsigned op, unsigned n_in, const uint32_t *in, unsigned n_i,
                        const int64_t *ia, unsigned n_f, const float *fa)
{
    mg *g = ctx;
    assert_true(g->nops < MAX_OPS);
    gop *o = &g->ops[g->nops++];
    memset(o, 0, sizeof *o);
    o->op = op;
    o->n_in = n_in;
    sl_shape shapes[SL_OP_MAX_IN], outs[SL_OP_MAX_OUT];
    for (unsigned i = 0; i < n_in; i++) {
        assert_true(in[i] < g->nv);
        o->in[i] = in[i];
        shapes[i] = g->v[in[i]].s;
    }
    for (unsigned i = 0; i < n_i; i++)
        o->a.i[i] = ia[i];
    for (unsigned i = 0; i < n_f; i++)
        o->a.f[i] = fa[i];
    char err[200] = "";
    if (sl_op_infer(op, &o->a, shapes, n_in, outs, err, sizeof err) != SL_OK)
        fail_msg("a rule emitted an invalid %s: %s", sl_op_get(op)->name, err);
    uint32_t first = in[0];
    for (unsigned k = 0; k < sl_op_get(op)->n_out; k++) {
        uint32_t v = mg_value(g, &outs[k], NULL);
        if (k == 0)
            first = v;
    }
    return first;
}

static int mg_shape(void *ctx, uint32_t v, sl_shape *out)
{
    mg *g = ctx;
    if (v >= g->nv)
        return SL_EINVAL;
    *out = g->v[v].s;
    return SL_OK;
}

/* Runs op k, whose outputs are out0, out0 + 1, ... */
static void mg_run_op(mg *g, unsigned k, uint32_t out0)
{
    gop *o = &g->ops[k];
    const sl_op_def *def = sl_op_get(o->op);
    if (o->op == SL_OP_RESHAPE) { /* a view: salusd never launches it */
        memcpy(g->v[out0].d, g->v[o->in[0]].d, sl_shape_bytes(&g->v[out0].s));
        return;
    }
    sl_shape shapes[SL_OP_MAX_IN];
    float *in[SL_OP_MAX_IN], *out[SL_OP_MAX_OUT];
    for (unsigned i = 0; i < o->n_in; i++) {
        shapes[i] = g->v[o->in[i]].s;
        in[i] = g->v[o->in[i]].d;
    }
    for (unsigned j = 0; j < def->n_out; j++)
        out[j] = g->v[out0 + j].d;
    kt_run_op(g->env, o->op, &o->a, shapes, in, o->n_in, out);
}

/* Runs ops [from, nops); out0[k] is op k's first output. */
static void mg_run(mg *g, unsigned from, const uint32_t *out0)
{
    for (unsigned k = from; k < g->nops; k++)
        mg_run_op(g, k, out0[k]);
}

static bool is_loss(unsigned op)
{
    return op == SL_OP_SOFTMAX_XENT || op == SL_OP_MSE_LOSS || op == SL_OP_REDUCE_SUM ||
           op == SL_OP_REDUCE_MEAN;
}

/* The scalar differentiated, from fresh copies of the inputs (an op may
 * write some in place) with input `which` replaced by x. */
static double objective(kt_env *env, unsigned op, const sl_op_attrs *a, unsigned n_in,
                        const sl_shape *shapes, float *const *inputs, unsigned which,
                        const float *x, const float *r)
{
    float *in[SL_OP_MAX_IN], *out[SL_OP_MAX_OUT];
    sl_shape outs[SL_OP_MAX_OUT];
    char err[200];
    assert_int_equal(sl_op_infer(op, a, shapes, n_in, outs, err, sizeof err), SL_OK);
    for (unsigned i = 0; i < n_in; i++) {
        size_t bytes = sl_shape_bytes(&shapes[i]);
        in[i] = (float *) kt_fvec((bytes + 3) / 4);
        memcpy(in[i], i == which ? x : inputs[i], bytes);
    }
    const sl_op_def *def = sl_op_get(op);
    for (unsigned j = 0; j < def->n_out; j++)
        out[j] = (float *) kt_fvec((sl_shape_bytes(&outs[j]) + 3) / 4);
    kt_run_op(env, op, a, shapes, in, n_in, out);
    double l = 0;
    if (is_loss(op))
        l = out[0][0];
    else
        for (uint64_t e = 0; e < sl_shape_elems(&outs[0]); e++)
            l += (double) out[0][e] * r[e];
    for (unsigned i = 0; i < n_in; i++)
        sl_free(in[i]);
    for (unsigned j = 0; j < def->n_out; j++)
        sl_free(out[j]);
    return l;
}

typedef struct gcase {
    const char *name;
    unsigned op, n_in, n_i, n_f;
    sl_shape in[SL_OP_MAX_IN];
    sl_op_attrs a;
    int acc_input; /* >= 0: offer an accumulator for this input (beta 0.5) */
} gcase;

/* Checks op's rule: every input it can differentiate, against finite
 * differences. inputs[i] holds in[i]'s initial values. */
static void check_rule(kt_env *env, const gcase *c, float *const *inputs)
{
    mg g = {.env = env};
    uint32_t out0[MAX_OPS] = {0};
    uint32_t in[SL_OP_MAX_IN];
    for (unsigned i = 0; i < c->n_in; i++)
        in[i] = mg_value(&g, &c->in[i], inputs[i]);
    int64_t ia[SL_OP_MAX_IATTRS];
    memcpy(ia, c->a.i, sizeof ia);
    uint32_t y = mg_emit(&g, c->op, c->n_in, in, c->n_i, ia, c->n_f, c->a.f);
    out0[0] = y;
    mg_run(&g, 0, out0);

    const sl_op_def *def = sl_op_get(c->op);
    sl_grad_args a = {.op = c->op,
                      .attrs = &c->a,
                      .n_iattrs = c->n_i,
                      .n_fattrs = c->n_f,
                      .n_in = c->n_in,
                      .n_out = def->n_out};
    float *r = NULL;
    for (unsigned k = 0; k < def->n_out; k++) {
        a.out[k] = y + k;
        a.dout[k] = SL_GV_NONE;
    }
    if (is_loss(c->op)) {
        a.dout[0] = SL_GV_ONE;
    } else {
        uint64_t n = sl_shape_elems(&g.v[y].s);
        r = kt_fvec(n);
        kt_rand(r, n, 77, -1.0f, 1.0f);
        a.dout[0] = mg_value(&g, &g.v[y].s, r);
    }
    float *acc0 = NULL;
    for (unsigned i = 0; i < c->n_in; i++) {
        a.in[i] = in[i];
        a.want[i] = sl_op_grad_input(c->op, i);
        a.din[i] = a.acc[i] = SL_GV_NONE;
        if ((int) i == c->acc_input) {
            uint64_t n = sl_shape_elems(&c->in[i]);
            acc0 = kt_fvec(n);
            kt_rand(acc0, n, 5, -1.0f, 1.0f);
            a.acc[i] = mg_value(&g, &c->in[i], acc0);
            a.acc_beta[i] = 0.5f;
        }
    }
    const sl_grad_emitter e = {.ctx = &g, .emit = mg_emit, .shape = mg_shape};
    sl_op_grad_fn rule = sl_op_grad(c->op);
    assert_non_null(rule);
    char err[200] = "";
    unsigned first = g.nops;
    uint32_t next = g.nv; /* emitted ops' outputs are appended in order */
    int rc = rule(&e, &a, err, sizeof err);
    if (rc != SL_OK)
        fail_msg("%s: rule failed: %s", c->name, err);
    for (unsigned k = first; k < g.nops; k++) {
        out0[k] = next;
        next += sl_op_get(g.ops[k].op)->n_out;
    }
    mg_run(&g, first, out0);

    sl_shape shapes[SL_OP_MAX_IN];
    for (unsigned i = 0; i < c->n_in; i++)
        shapes[i] = c->in[i];
    unsigned checked = 0;
    for (unsigned i = 0; i < c->n_in; i++) {
        if (!a.want[i])
            continue;
        uint64_t n = sl_shape_elems(&c->in[i]);
        double *fd = kt_dvec(n);
        float *x = kt_fvec(n);
        memcpy(x, inputs[i], n * sizeof *x);
        for (uint64_t j = 0; j < n; j++) {
            float keep = x[j];
            x[j] = keep + (float) FD_STEP;
            double up = objective(env, c->op, &c->a, c->n_in, shapes, inputs, i, x, r);
            x[j] = keep - (float) FD_STEP;
            double down = objective(env, c->op, &c->a, c->n_in, shapes, inputs, i, x, r);
            x[j] = keep;
            fd[j] = (up - down) / (2 * FD_STEP);
        }
        char what[96];
        snprintf(what, sizeof what, "%s: d/d in%u", c->name, i);
        if (a.accumulated[i]) {
            /* acc = 0.5 * acc0 + gradient */
            for (uint64_t j = 0; j < n; j++)
                fd[j] += 0.5 * acc0[j];
            kt_expect_close(what, g.v[a.acc[i]].d, fd, n, FD_TOL);
        } else {
            assert_true(a.din[i] != SL_GV_NONE);
            kt_expect_close(what, g.v[a.din[i]].d, fd, n, FD_TOL);
        }
        checked++;
        sl_free(fd);
        sl_free(x);
    }
    assert_true(checked > 0);
    if (c->acc_input >= 0)
        assert_true(a.accumulated[c->acc_input]);
    sl_free(r);
    sl_free(acc0);
    for (unsigned v = 0; v < g.nv; v++)
        sl_free(g.v[v].d);
}

/* Random inputs in [-1, 1), pushed at least 0.05 away from 0 (ReLU's kink)
 * where `away` is set. */
static float **rand_inputs(const gcase *c, bool away)
{
    float **in = sl_calloc(SL_OP_MAX_IN, sizeof *in);
    assert_non_null(in);
    for (unsigned i = 0; i < c->n_in; i++) {
        uint64_t n = sl_shape_elems(&c->in[i]);
        in[i] = kt_fvec(n);
        kt_rand(in[i], n, 100 + i, -1.0f, 1.0f);
        for (uint64_t j = 0; j < n && away; j++)
            if (fabsf(in[i][j]) < 0.05f)
                in[i][j] = in[i][j] < 0 ? -0.05f - in[i][j] : 0.05f + in[i][j];
    }
    return in;
}

static void free_inputs(float **in)
{
    for (unsigned i = 0; i < SL_OP_MAX_IN; i++)
        sl_free(in[i]);
    sl_free(in);
}

static kt_env env;

static int setup(void **state)
{
    (void) state;
    return kt_env_open(&env, "cpu") == SL_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void) state;
    kt_env_close(&env);
    return 0;
}

#define F(nd, ...) KT_F32(nd, __VA_ARGS__)

static void run_cases(const gcase *cases, size_t n, bool away)
{
    for (size_t k = 0; k < n; k++) {
        float **in = rand_inputs(&cases[k], away);
        check_rule(&env, &cases[k], in);
        free_inputs(in);
    }
}

static void elementwise_and_dense(void **state)
{
    (void) state;
    const gcase cases[] = {
        {"copy", SL_OP_COPY, 1, 0, 0, {F(2, 3, 4)}, .acc_input = -1},
        {"add", SL_OP_ADD, 2, 0, 0, {F(2, 3, 4), F(2, 3, 4)}, .acc_input = -1},
        {"mul", SL_OP_MUL, 2, 0, 0, {F(2, 3, 4), F(2, 3, 4)}, .acc_input = -1},
        {"scale", SL_OP_SCALE, 1, 0, 1, {F(1, 7)}, {.f = {-1.5f}}, -1},
        {"mul_scalar", SL_OP_MUL_SCALAR, 2, 0, 0, {F(2, 3, 4), F(1, 1)}, .acc_input = -1},
        {"axpy", SL_OP_AXPY, 2, 0, 1, {F(1, 7), F(1, 7)}, {.f = {0.75f}}, -1},
        {"matmul", SL_OP_MATMUL, 2, 2, 0, {F(2, 3, 4), F(2, 4, 5)}, {.i = {0, 0}}, -1},
        {"matmul transA", SL_OP_MATMUL, 2, 2, 0, {F(2, 4, 3), F(2, 4, 5)}, {.i = {1, 0}}, -1},
        {"matmul transB", SL_OP_MATMUL, 2, 2, 0, {F(2, 3, 4), F(2, 5, 4)}, {.i = {0, 1}}, -1},
        {"matmul both", SL_OP_MATMUL, 2, 2, 0, {F(2, 4, 3), F(2, 5, 4)}, {.i = {1, 1}}, -1},
        {"matmul into an accumulator",
         SL_OP_MATMUL,
         2,
         0,
         0,
         {F(2, 3, 4), F(2, 4, 5)},
         .acc_input = 1},
        {"bias_add", SL_OP_BIAS_ADD, 2, 0, 0, {F(2, 3, 4), F(1, 4)}, .acc_input = -1},
        {"sigmoid", SL_OP_SIGMOID, 1, 0, 0, {F(2, 3, 4)}, .acc_input = -1},
        {"tanh", SL_OP_TANH, 1, 0, 0, {F(2, 3, 4)}, .acc_input = -1},
        {"reshape", SL_OP_RESHAPE, 1, 2, 0, {F(3, 2, 3, 4)}, {.i = {6, 4}}, -1},
        {"mse_loss", SL_OP_MSE_LOSS, 2, 0, 0, {F(2, 3, 4), F(2, 3, 4)}, .acc_input = -1},
        {"reduce_sum", SL_OP_REDUCE_SUM, 1, 0, 0, {F(2, 3, 4)}, .acc_input = -1},
        {"reduce_mean", SL_OP_REDUCE_MEAN, 1, 0, 0, {F(2, 3, 4)}, .acc_input = -1},
    };
    run_cases(cases, sizeof cases / sizeof cases[0], false);
    const gcase kinked[] = {
        {"relu", SL_OP_RELU, 1, 0, 0, {F(2, 5, 6)}, .acc_input = -1},
        {"relu_mask", SL_OP_RELU_MASK, 1, 0, 0, {F(2, 5, 7)}, .acc_input = -1},
    };
    run_cases(kinked, sizeof kinked / sizeof kinked[0], true);
}

static void softmax_xent_by_rows(void **state)
{
    (void) state;
    const gcase c = {
        "softmax_xent", SL_OP_SOFTMAX_XENT, 2, 0, 0, {F(2, 4, 5), KT_SHAPE(SL_I32, 1, 4)},
        .acc_input = -1};
    float **in = rand_inputs(&c, false);
    int32_t labels[4] = {0, 3, 4, 1};
    memcpy(in[1], labels, sizeof labels);
    check_rule(&env, &c, in);
    free_inputs(in);
}

static void convolution_pooling_norm(void **state)
{
    (void) state;
    /* stride 2, asymmetric pads, dilation 2, 2 groups */
    const gcase conv[] = {
        {"conv2d",
         SL_OP_CONV2D,
         2,
         9,
         0,
         {F(4, 2, 4, 7, 6), F(4, 6, 2, 3, 2)},
         {.i = {2, 1, 1, 0, 2, 1, 2, 1, 2}},
         -1},
        {"conv2d plain",
         SL_OP_CONV2D,
         2,
         0,
         0,
         {F(4, 2, 3, 5, 5), F(4, 4, 3, 3, 3)},
         .acc_input = -1},
        {"channel_bias_add",
         SL_OP_CHANNEL_BIAS_ADD,
         2,
         0,
         0,
         {F(4, 2, 3, 2, 2), F(1, 3)},
         .acc_input = -1},
        {"avgpool",
         SL_OP_AVGPOOL,
         1,
         8,
         0,
         {F(4, 2, 2, 5, 5)},
         {.i = {3, 2, 2, 1, 1, 1, 1, 0}},
         -1},
        {"avgpool count_include_pad",
         SL_OP_AVGPOOL,
         1,
         9,
         0,
         {F(4, 2, 2, 5, 5)},
         {.i = {3, 3, 2, 2, 1, 1, 1, 1, 1}},
         -1},
        {"batchnorm",
         SL_OP_BATCHNORM,
         5,
         0,
         2,
         {F(4, 3, 2, 3, 3), F(1, 2), F(1, 2), F(1, 2), F(1, 2)},
         {.f = {1e-5f, 0.9f}},
         -1},
        {"batchnorm [N,C]",
         SL_OP_BATCHNORM,
         5,
         0,
         2,
         {F(2, 6, 3), F(1, 3), F(1, 3), F(1, 3), F(1, 3)},
         {.f = {1e-5f, 0.9f}},
         -1},
    };
    run_cases(conv, sizeof conv / sizeof conv[0], false);

    /* max pool: distinct values 0.1 apart, so no step reorders a window */
    const gcase pool = {
        "maxpool", SL_OP_MAXPOOL, 1, 8, 0, {F(4, 2, 2, 5, 5)}, {.i = {3, 3, 2, 2, 1, 1, 1, 1}}, -1};
    float **in = rand_inputs(&pool, false);
    for (int j = 0; j < 100; j++)
        in[0][j] = 0.1f * (float) ((j * 37) % 100) - 5.0f;
    check_rule(&env, &pool, in);
    free_inputs(in);
}

#define I32(nd, ...) KT_SHAPE(SL_I32, nd, __VA_ARGS__)

/* Runs case c with its i32 input `which` holding ints[0..n). */
static void run_with_ints(const gcase *c, unsigned which, const int32_t *ints, size_t n)
{
    float **in = rand_inputs(c, false);
    memcpy(in[which], ints, n * sizeof *ints);
    check_rule(&env, c, in);
    free_inputs(in);
}

static void transformer_ops(void **state)
{
    (void) state;
    const gcase cases[] = {
        {"gelu", SL_OP_EW_UNARY, 1, 1, 0, {F(2, 3, 4)}, {.i = {SL_EW_GELU}}, -1},
        {"gelu_tanh", SL_OP_EW_UNARY, 1, 1, 0, {F(2, 3, 4)}, {.i = {SL_EW_GELU_TANH}}, -1},
        {"silu", SL_OP_EW_UNARY, 1, 1, 0, {F(2, 3, 4)}, {.i = {SL_EW_SILU}}, -1},
        {"exp", SL_OP_EW_UNARY, 1, 1, 0, {F(2, 3, 4)}, {.i = {SL_EW_EXP}}, -1},
        {"elu", SL_OP_EW_UNARY, 1, 1, 1, {F(2, 3, 4)}, {.i = {SL_EW_ELU}, .f = {0.7f}}, -1},
        {"softsign", SL_OP_EW_UNARY, 1, 1, 0, {F(2, 3, 4)}, {.i = {SL_EW_SOFTSIGN}}, -1},
        {"layer_norm last axis",
         SL_OP_LAYER_NORM,
         3,
         1,
         1,
         {F(3, 2, 3, 5), F(1, 5), F(1, 5)},
         {.i = {2}, .f = {1e-5f}},
         -1},
        {"layer_norm two axes",
         SL_OP_LAYER_NORM,
         3,
         1,
         1,
         {F(3, 2, 3, 4), F(2, 3, 4), F(2, 3, 4)},
         {.i = {1}, .f = {1e-5f}},
         -1},
        {"softmax axis 0", SL_OP_SOFTMAX_AXIS, 1, 2, 0, {F(3, 3, 4, 2)}, {.i = {0, 0}}, -1},
        {"softmax axis 1", SL_OP_SOFTMAX_AXIS, 1, 2, 0, {F(3, 3, 4, 2)}, {.i = {1, 0}}, -1},
        {"log_softmax axis 2", SL_OP_SOFTMAX_AXIS, 1, 2, 0, {F(3, 3, 4, 2)}, {.i = {2, 1}}, -1},
        {"batch_matmul",
         SL_OP_BATCH_MATMUL,
         2,
         0,
         0,
         {F(3, 2, 3, 4), F(3, 2, 4, 5)},
         .acc_input = -1},
        {"batch_matmul broadcast b",
         SL_OP_BATCH_MATMUL,
         2,
         0,
         0,
         {F(3, 3, 2, 4), F(3, 1, 4, 3)},
         .acc_input = -1},
        {"batch_matmul broadcast a",
         SL_OP_BATCH_MATMUL,
         2,
         0,
         0,
         {F(3, 1, 2, 4), F(3, 3, 4, 3)},
         .acc_input = -1},
    };
    run_cases(cases, sizeof cases / sizeof cases[0], false);

    /* masks, ids and seeds are i32 inputs that carry no gradient */
    const int32_t causal[12] = {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1};
    const gcase where = {
        "where", SL_OP_WHERE, 3, 0, 0, {I32(2, 3, 4), F(3, 2, 3, 4), F(1, 4)}, .acc_input = -1};
    run_with_ints(&where, 0, causal, 12);
    const gcase fill = {"masked_fill",
                        SL_OP_MASKED_FILL,
                        2,
                        0,
                        1,
                        {F(3, 2, 3, 4), I32(2, 3, 4)},
                        {.f = {-3.0f}},
                        -1};
    run_with_ints(&fill, 1, causal, 12);
    const int32_t ids[6] = {4, 0, 4, -1, 2, 2};
    const gcase emb = {"embedding (gather axis 0)", SL_OP_GATHER, 2, 1, 0,
                       {F(2, 5, 3), I32(2, 2, 3)},  {.i = {0}},   -1};
    run_with_ints(&emb, 1, ids, 6);
    const int32_t seed[2] = {99, 1};
    const gcase drop = {
        "dropout", SL_OP_DROPOUT, 2, 1, 1, {F(2, 4, 6), I32(1, 2)}, {.i = {3}, .f = {0.4f}}, -1};
    run_with_ints(&drop, 1, seed, 2);
}

/* Ops with no rule, and inputs that carry none, are declared so. */
static void what_has_no_gradient(void **state)
{
    (void) state;
    assert_null(sl_op_grad(SL_OP_SOFTMAX_XENT_GRAD));
    assert_null(sl_op_grad(SL_OP_SGD_UPDATE));
    assert_null(sl_op_grad(SL_OP_ARGMAX));
    assert_null(sl_op_grad(SL_OP_COUNT));
    assert_false(sl_op_grad_input(SL_OP_BATCHNORM, 3));    /* running statistics */
    assert_false(sl_op_grad_input(SL_OP_SOFTMAX_XENT, 1)); /* labels */
    assert_false(sl_op_grad_input(SL_OP_FILL, 0));         /* shape only */
    assert_true(sl_op_grad_input(SL_OP_CONV2D, 1));
    /* a loss op's output must be the loss: a tensor gradient is refused */
    mg g = {.env = &env};
    sl_grad_args a = {.op = SL_OP_MSE_LOSS, .n_in = 2, .n_out = 1, .dout = {3}};
    sl_op_attrs attrs = {0};
    a.attrs = &attrs;
    const sl_grad_emitter e = {.ctx = &g, .emit = mg_emit, .shape = mg_shape};
    char err[200] = "";
    assert_int_equal(sl_op_grad(SL_OP_MSE_LOSS)(&e, &a, err, sizeof err), SL_EUNSUPPORTED);
    assert_non_null(strstr(err, "mse_loss"));
    /* and the seed is refused by a non-loss op */
    a = (sl_grad_args){.op = SL_OP_TANH, .n_in = 1, .n_out = 1, .dout = {SL_GV_ONE}};
    a.attrs = &attrs;
    assert_int_equal(sl_op_grad(SL_OP_TANH)(&e, &a, err, sizeof err), SL_EUNSUPPORTED);
    assert_int_equal(g.nops, 0);
}

SL_TEST_MAIN("grad", setup, teardown, cmocka_unit_test(elementwise_and_dense),
             cmocka_unit_test(softmax_xent_by_rows), cmocka_unit_test(convolution_pooling_norm),
             cmocka_unit_test(transformer_ops), cmocka_unit_test(what_has_no_gradient))
