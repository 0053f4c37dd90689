/* The non-convolutional neural-network ops on any backend spec: mul, axpy,
 * add_scalar, sigmoid/tanh and their gradients, softmax, softmax_xent and
 * its gradient (with the run-time label check: a sticky SL_EINVAL), the
 * reductions, argmax (ties), momentum and Adam over several steps, matmul_acc
 * (and momentum fused into it, as client/nn.c emits it). Against
 * the double references of kt_nn_ref.c and hand-rolled optimiser steps;
 * gradients also against finite differences of the forward references. */
#include "kt_nn.h"

#include "sl_alloc.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define N_EW 403 /* not a multiple of any vector width */
#define FD_TOL 1e-4

static const char *nn_spec;

static int group_setup(void **state)
{
    return kt_group_open(state, nn_spec);
}

static double ref_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static void test_mul_axpy_add_scalar(void **state)
{
    kt_env *e = *state;
    sl_shape s = KT_F32(3, 13, 1, 31), sh[2] = {s, s};
    float *x = kt_fvec(N_EW), *y = kt_fvec(N_EW), *z = kt_fvec(N_EW);
    double *want = kt_dvec(N_EW);
    kt_rand(x, N_EW, 31, -3, 3);
    kt_rand(y, N_EW, 32, -3, 3);

    kt_run_op(e, SL_OP_MUL, NULL, sh, (float *[]){x, y}, 2, (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = (double) x[i] * y[i];
    kt_expect_close("mul", z, want, N_EW, 1e-7);

    sl_op_attrs a = {.f = {-1.5f}};
    kt_run_op(e, SL_OP_AXPY, &a, sh, (float *[]){x, y}, 2, (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = -1.5 * x[i] + y[i];
    kt_expect_close("axpy", z, want, N_EW, 1e-6);

    /* mul_scalar: the factor is a one-element tensor, [1] or [] */
    float f = -0.375f;
    kt_run_op(e, SL_OP_MUL_SCALAR, NULL, (sl_shape[]){s, KT_F32(1, 1)}, (float *[]){x, &f}, 2,
              (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = -0.375 * x[i];
    kt_expect_close("mul_scalar", z, want, N_EW, 1e-7);
    f = 3.0f;
    kt_run_op(e, SL_OP_MUL_SCALAR, NULL, (sl_shape[]){s, KT_F32(0, 0)}, (float *[]){x, &f}, 2,
              (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = 3.0 * x[i];
    kt_expect_close("mul_scalar []", z, want, N_EW, 1e-7);

    /* add_scalar mutates its input: three steps, as an Adam step count. */
    float t = 0;
    a.f[0] = 1;
    for (int step = 0; step < 3; step++)
        kt_run_op(e, SL_OP_ADD_SCALAR, &a, &KT_F32(1, 1), (float *[]){&t}, 1, NULL);
    assert_true(t == 3.0f);
    memcpy(y, x, N_EW * sizeof *x);
    a.f[0] = 0.25f;
    kt_run_op(e, SL_OP_ADD_SCALAR, &a, &s, (float *[]){x}, 1, NULL);
    for (size_t i = 0; i < N_EW; i++)
        want[i] = (double) y[i] + 0.25;
    kt_expect_close("add_scalar", x, want, N_EW, 1e-7);
    sl_free(x), sl_free(y), sl_free(z), sl_free(want);
}

static void test_sigmoid_tanh(void **state)
{
    kt_env *e = *state;
    sl_shape s = KT_F32(1, N_EW);
    float *x = kt_fvec(N_EW), *y = kt_fvec(N_EW);
    double *want = kt_dvec(N_EW);
    kt_rand(x, N_EW, 33, -12, 12);
    x[0] = -100.0f; /* far tails: no overflow, no NaN */
    x[1] = 100.0f;
    kt_run_op(e, SL_OP_SIGMOID, NULL, &s, (float *[]){x}, 1, (float *[]){y});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = ref_sigmoid(x[i]);
    kt_expect_close("sigmoid", y, want, N_EW, 1e-6);
    kt_run_op(e, SL_OP_TANH, NULL, &s, (float *[]){x}, 1, (float *[]){y});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = tanh(x[i]);
    kt_expect_close("tanh", y, want, N_EW, 1e-6);
    sl_free(x), sl_free(y), sl_free(want);
}

struct act_ctx {
    const double *dy;
    size_t n;
    double (*f)(double);
};

/* L(x) = sum dy * f(x) */
static double loss_act(const double *x, const void *ctx)
{
    const struct act_ctx *c = ctx;
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        s += c->dy[i] * c->f(x[i]);
    return s;
}

/* The gradient ops take the forward output y; the reference differentiates
 * the forward function of x. */
static void check_act_grad(kt_env *e, unsigned fwd, unsigned grad, double (*f)(double),
                           const char *what)
{
    enum { N = 120 };
    float x[N], y[N], dy[N], dx[N];
    double xd[N], dyd[N], fd[N];
    kt_rand(x, N, 34, -4, 4);
    kt_rand(dy, N, 35, -1, 1);
    sl_shape s = KT_F32(2, 10, 12);
    kt_run_op(e, fwd, NULL, &s, (float *[]){x}, 1, (float *[]){y});
    kt_run_op(e, grad, NULL, (sl_shape[]){s, s}, (float *[]){dy, y}, 2, (float *[]){dx});
    kt_widen(x, xd, N);
    kt_widen(dy, dyd, N);
    struct act_ctx c = {dyd, N, f};
    kt_fd_grad(loss_act, &c, xd, N, fd);
    kt_expect_close(what, dx, fd, N, FD_TOL);
}

static void test_grad_sigmoid_tanh(void **state)
{
    check_act_grad(*state, SL_OP_SIGMOID, SL_OP_SIGMOID_GRAD, ref_sigmoid, "sigmoid_grad vs fd");
    check_act_grad(*state, SL_OP_TANH, SL_OP_TANH_GRAD, tanh, "tanh_grad vs fd");
}

/* ---- softmax and cross-entropy ---- */

enum { SR = 9, SC = 7 };

struct xent_ctx {
    const int32_t *labels;
    size_t rows, cols;
};

static double loss_xent(const double *x, const void *ctx)
{
    const struct xent_ctx *c = ctx;
    return kt_ref_xent(x, c->labels, c->rows, c->cols);
}

static void test_softmax_xent(void **state)
{
    kt_env *e = *state;
    float x[SR * SC], p[SR * SC], g[SR * SC], loss = -1;
    double xd[SR * SC], want[SR * SC], fd[SR * SC];
    int32_t labels[SR];
    kt_rand(x, SR * SC, 36, -5, 5);
    x[3] = 80.0f; /* a large logit: max subtraction keeps exp finite */
    for (int r = 0; r < SR; r++)
        labels[r] = (r * 5 + 1) % SC;
    kt_widen(x, xd, SR * SC);
    sl_shape xs = KT_F32(2, SR, SC), ls = KT_SHAPE(SL_I32, 1, SR);

    kt_run_op(e, SL_OP_SOFTMAX, NULL, &xs, (float *[]){x}, 1, (float *[]){p});
    kt_ref_softmax(xd, want, SR, SC);
    kt_expect_close("softmax", p, want, SR * SC, 1e-6);

    memset(p, 0, sizeof p);
    kt_run_op(e, SL_OP_SOFTMAX_XENT, NULL, (sl_shape[]){xs, ls}, (float *[]){x, (float *) labels},
              2, (float *[]){&loss, p});
    kt_expect_close("softmax_xent probs", p, want, SR * SC, 1e-6);
    struct xent_ctx c = {labels, SR, SC};
    double want_loss = kt_ref_xent(xd, labels, SR, SC);
    kt_expect_close("softmax_xent loss", &loss, &want_loss, 1, 1e-6);

    kt_run_op(e, SL_OP_SOFTMAX_XENT_GRAD, NULL, (sl_shape[]){xs, ls},
              (float *[]){p, (float *) labels}, 2, (float *[]){g});
    kt_fd_grad(loss_xent, &c, xd, SR * SC, fd);
    kt_expect_close("softmax_xent_grad vs fd", g, fd, SR * SC, FD_TOL);
    double pd[SR * SC];
    kt_widen(p, pd, SR * SC);
    kt_ref_xent_grad(pd, labels, want, SR, SC);
    kt_expect_close("softmax_xent_grad", g, want, SR * SC, 1e-6);
}

/* Launches op on device copies of in[] (no validation of run-time data by
 * the registry is possible), then a fill of `canary` that the sticky error
 * must skip; returns what the next host callback saw. */
static int run_failing(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
                       void *const *in, unsigned n_in, float *canary)
{
    const sl_device_ops *ops = e->dev->ops;
    size_t mark = e->used;
    kt_launch_then_canary(e, op, a, shapes, in, n_in, canary);
    kt_cb_record st = {0};
    assert_sl_ok(ops->host_callback(e->dev, e->stream, kt_record_cb, &st));
    /* The callback took the error: synchronize has nothing left to report. */
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    assert_int_equal(atomic_load(&st.calls), 1);
    e->used = mark;
    return atomic_load(&st.status);
}

static void test_xent_bad_label(void **state)
{
    kt_env *e = *state;
    float x[SR * SC], probs[SR * SC];
    int32_t labels[SR];
    kt_rand(x, SR * SC, 37, -1, 1);
    kt_rand(probs, SR * SC, 38, 0, 1);
    sl_shape sh[2] = {KT_F32(2, SR, SC), KT_SHAPE(SL_I32, 1, SR)};
    static const int32_t bad[] = {SC, -1, INT32_MAX, INT32_MIN};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        for (int r = 0; r < SR; r++)
            labels[r] = r % SC;
        labels[SR - 1 - (int) b] = bad[b];
        float canary = 1;
        assert_sl_err(
            run_failing(e, SL_OP_SOFTMAX_XENT, NULL, sh, (void *[]){x, labels}, 2, &canary),
            SL_EINVAL);
        assert_true(canary == 1.0f); /* the fill after the failure was skipped */
        assert_sl_err(run_failing(e, SL_OP_SOFTMAX_XENT_GRAD, NULL, sh, (void *[]){probs, labels},
                                  2, &canary),
                      SL_EINVAL);
        assert_true(canary == 1.0f);
    }
    /* The stream works again after the error was reported. */
    float canary = 1;
    for (int r = 0; r < SR; r++)
        labels[r] = r % SC;
    assert_sl_ok(run_failing(e, SL_OP_SOFTMAX_XENT, NULL, sh, (void *[]){x, labels}, 2, &canary));
    assert_true(canary == 42.0f);
}

/* ---- reductions and argmax ---- */

static void test_reduce(void **state)
{
    enum { N = 300001 };
    kt_env *e = *state;
    float *x = kt_fvec(N), sum = 0, mean = 0;
    kt_rand(x, N, 39, -1, 3);
    double want_sum = 0;
    for (size_t i = 0; i < N; i++)
        want_sum += x[i];
    double want_mean = want_sum / N;
    sl_shape s = KT_F32(1, N);
    kt_run_op(e, SL_OP_REDUCE_SUM, NULL, &s, (float *[]){x}, 1, (float *[]){&sum});
    kt_run_op(e, SL_OP_REDUCE_MEAN, NULL, &s, (float *[]){x}, 1, (float *[]){&mean});
    /* Accurate to a few float roundings however the backend accumulates
     * (the cpu's double sums reach 1e-7; a GPU tree of float partial sums
     * log2(n) roundings). */
    kt_expect_close("reduce_sum", &sum, &want_sum, 1, 2e-6);
    kt_expect_close("reduce_mean", &mean, &want_mean, 1, 2e-6);
    float one = 2.5f;
    kt_run_op(e, SL_OP_REDUCE_MEAN, NULL, &(sl_shape){.dtype = SL_F32}, (float *[]){&one}, 1,
              (float *[]){&mean});
    assert_true(mean == 2.5f);
    sl_free(x);
}

static void test_argmax(void **state)
{
    enum { R = 6, C = 5 };
    static const float x[R * C] = {
        1,         2,         3,  4,         5,  /* last */
        5,         4,         3,  2,         1,  /* first */
        0,         7,         7,  1,         7,  /* tie: the first max */
        -3,        -2,        -9, -2,        -5, /* negative, tie */
        1,         9,         9,  2,         9,  /* tie after the first */
        -INFINITY, -INFINITY, -1, -INFINITY, 0,  /* infinities */
    };
    static const int32_t want[R] = {4, 0, 1, 1, 1, 4};
    int32_t got[R], ref[R];
    kt_run_op(*state, SL_OP_ARGMAX, NULL, &KT_F32(2, R, C), (float *[]){(float *) x}, 1,
              (float *[]){(float *) got});
    kt_expect_equal_i32("argmax", got, want, R);
    kt_ref_argmax(x, ref, R, C);
    kt_expect_equal_i32("argmax vs reference", got, ref, R);
}

/* ---- optimisers ---- */

enum { NP = 77, STEPS = 5 };

static void test_momentum(void **state)
{
    kt_env *e = *state;
    float p[NP], g[NP], v[NP] = {0};
    double pd[NP], vd[NP] = {0};
    kt_rand(p, NP, 40, -1, 1);
    kt_widen(p, pd, NP);
    const double lr = 0.05, mom = 0.9, wd = 0.01;
    sl_op_attrs a = {.f = {(float) lr, (float) mom, (float) wd}};
    sl_shape s = KT_F32(2, 7, 11), sh[3] = {s, s, s};
    for (int step = 0; step < STEPS; step++) {
        kt_rand(g, NP, 41 + (uint64_t) step, -1, 1);
        kt_run_op(e, SL_OP_MOMENTUM_UPDATE, &a, sh, (float *[]){p, g, v}, 3, NULL);
        for (size_t i = 0; i < NP; i++) {
            vd[i] = (double) (float) mom * vd[i] + g[i] + (double) (float) wd * pd[i];
            pd[i] -= (double) (float) lr * vd[i];
        }
    }
    kt_expect_close("momentum param", p, pd, NP, 1e-5);
    kt_expect_close("momentum velocity", v, vd, NP, 1e-5);
}

/* ---- matmul_acc ---- */

static void check_matmul_acc(kt_env *e, size_t m, size_t n, size_t k, bool ta, bool tb, float alpha,
                             float beta)
{
    size_t na = m * k, nb = k * n, nc = m * n;
    float *a = kt_fvec(na), *b = kt_fvec(nb), *acc = kt_fvec(nc);
    double *ad = kt_dvec(na), *bd = kt_dvec(nb), *want = kt_dvec(nc);
    kt_rand(a, na, 60 + m, -1, 1);
    kt_rand(b, nb, 61 + n, -1, 1);
    kt_rand(acc, nc, 62 + k, -2, 2);
    if (beta == 0) /* BLAS semantics: acc is not read, its NaNs do not propagate */
        for (size_t i = 0; i < nc; i++)
            acc[i] = NAN;
    kt_widen(a, ad, na);
    kt_widen(b, bd, nb);
    kt_widen(acc, want, nc);
    kt_ref_matmul_acc(ad, bd, want, m, n, k, ta, tb, alpha, beta);
    sl_shape sh[3] = {ta ? KT_F32(2, k, m) : KT_F32(2, m, k),
                      tb ? KT_F32(2, n, k) : KT_F32(2, k, n), KT_F32(2, m, n)};
    sl_op_attrs at = {.i = {ta, tb}, .f = {alpha, beta}};
    kt_run_op(e, SL_OP_MATMUL_ACC, &at, sh, (float *[]){a, b, acc}, 3, NULL);
    char what[96];
    snprintf(what, sizeof what, "matmul_acc %zux%zux%zu ta=%d tb=%d alpha=%g beta=%g", m, n, k, ta,
             tb, (double) alpha, (double) beta);
    kt_expect_close(what, acc, want, nc, 1e-5 * (double) k);
    sl_free(a), sl_free(b), sl_free(acc), sl_free(ad), sl_free(bd), sl_free(want);
}

static void test_matmul_acc(void **state)
{
    static const float ab[][2] = {{1, 0}, {1, 0.9f}, {-1.5f, 0.5f}, {0.25f, 1}, {0, -1}};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < sizeof ab / sizeof ab[0]; i++) {
            check_matmul_acc(*state, 5, 3, 7, t & 1, t & 2, ab[i][0], ab[i][1]);
            check_matmul_acc(*state, 1, 1, 1, t & 1, t & 2, ab[i][0], ab[i][1]);
            check_matmul_acc(*state, 64, 33, 130, t & 1, t & 2, ab[i][0], ab[i][1]);
        }
}

/* ---- ops split into parts (ops.h sl_op_split) ---- */

/* matmul / matmul_acc run as `parts` parts one after another on one stream
 * compute what the whole op computes (against a double reference). */
static void check_split(kt_env *e, bool acc, bool ta, bool tb, uint32_t parts)
{
    const size_t m = 13, n = 9, k = 20, na = m * k, nb = k * n, nc = m * n;
    const float alpha = acc ? 0.5f : 1.0f, beta = acc ? 0.75f : 0.0f;
    float *a = kt_fvec(na), *b = kt_fvec(nb), *c = kt_fvec(nc);
    double *ad = kt_dvec(na), *bd = kt_dvec(nb), *want = kt_dvec(nc);
    kt_rand(a, na, 70 + parts, -1, 1);
    kt_rand(b, nb, 71 + parts, -1, 1);
    kt_rand(c, nc, 72 + parts, -2, 2);
    kt_widen(a, ad, na);
    kt_widen(b, bd, nb);
    kt_widen(c, want, nc);
    kt_ref_matmul_acc(ad, bd, want, m, n, k, ta, tb, alpha, beta);
    size_t used = e->used;
    float *da = kt_dev_alloc(e, na * 4), *db = kt_dev_alloc(e, nb * 4),
          *dc = kt_dev_alloc(e, nc * 4);
    const sl_device_ops *ops = e->dev->ops;
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, da, a, na * 4));
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, db, b, nb * 4));
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, dc, c, nc * 4));
    sl_op_call call = {.op = acc ? SL_OP_MATMUL_ACC : SL_OP_MATMUL,
                       .n_in = acc ? 3 : 2,
                       .n_out = acc ? 0 : 1,
                       .attrs = {.i = {ta, tb}, .f = {alpha, beta}}};
    call.in[0] = (sl_tensor_ref){da, ta ? KT_F32(2, k, m) : KT_F32(2, m, k)};
    call.in[1] = (sl_tensor_ref){db, tb ? KT_F32(2, n, k) : KT_F32(2, k, n)};
    sl_tensor_ref dst = {dc, KT_F32(2, m, n)};
    if (acc)
        call.in[2] = dst;
    else
        call.out[0] = dst;
    assert_int_equal(sl_op_split_max(&call), ta ? k : m);
    for (uint32_t p = 0; p < parts; p++) {
        sl_op_call piece;
        assert_sl_ok(sl_op_split(&call, parts, p, &piece));
        assert_sl_ok(ops->launch(e->dev, e->stream, &piece));
    }
    assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, c, dc, nc * 4));
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    e->used = used;
    char what[96];
    snprintf(what, sizeof what, "%s ta=%d tb=%d in %u parts", acc ? "matmul_acc" : "matmul", ta, tb,
             parts);
    kt_expect_close(what, c, want, nc, 1e-5 * (double) k);
    sl_free(a), sl_free(b), sl_free(c), sl_free(ad), sl_free(bd), sl_free(want);
}

static void test_split(void **state)
{
    static const uint32_t parts[] = {1, 2, 3, 7, 13};
    for (int acc = 0; acc < 2; acc++)
        for (int t = 0; t < 3; t++) /* both transposed does not split */
            for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
                check_split(*state, acc, t & 1, t & 2, parts[i]);

    sl_op_call mm = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1, .attrs = {.i = {1, 1}}}, piece;
    mm.in[0].shape = KT_F32(2, 4, 3);
    mm.in[1].shape = KT_F32(2, 5, 4);
    mm.out[0].shape = KT_F32(2, 3, 5);
    assert_int_equal(sl_op_split_max(&mm), 1);
    assert_sl_err(sl_op_split(&mm, 2, 0, &piece), SL_EUNSUPPORTED);
    mm.attrs.i[0] = mm.attrs.i[1] = 0;
    mm.in[0].shape = KT_F32(2, 3, 4);
    mm.in[1].shape = KT_F32(2, 4, 5);
    assert_int_equal(sl_op_split_max(&mm), 3);
    assert_sl_err(sl_op_split(&mm, 0, 0, &piece), SL_EINVAL);
    assert_sl_err(sl_op_split(&mm, 4, 0, &piece), SL_EINVAL); /* more parts than rows */
    assert_sl_err(sl_op_split(&mm, 3, 3, &piece), SL_EINVAL);
    sl_op_call relu = {.op = SL_OP_RELU, .n_in = 1, .n_out = 1};
    relu.in[0].shape = relu.out[0].shape = KT_F32(2, 8, 8);
    assert_int_equal(sl_op_split_max(&relu), 1);
    assert_sl_err(sl_op_split(&relu, 2, 0, &piece), SL_EUNSUPPORTED);
}

/* The weight gradient of y = x W (x [B,I], W [I,U]) for an upstream dy:
 * matmul_acc(x, dy, dW; transA, alpha 1, beta 0) against central finite
 * differences of sum(dy * (x W)) over W. */
enum { FD_B = 6, FD_I = 5, FD_U = 4 };

struct dense_ctx {
    const double *x, *dy;
};

static double dense_dot(const double *w, const void *ctx)
{
    const struct dense_ctx *c = ctx;
    double s = 0;
    for (size_t r = 0; r < FD_B; r++)
        for (size_t j = 0; j < FD_U; j++) {
            double y = 0;
            for (size_t i = 0; i < FD_I; i++)
                y += c->x[r * FD_I + i] * w[i * FD_U + j];
            s += c->dy[r * FD_U + j] * y;
        }
    return s;
}

static void test_matmul_acc_weight_grad(void **state)
{
    float x[FD_B * FD_I], dy[FD_B * FD_U], w[FD_I * FD_U], dw[FD_I * FD_U];
    double xd[FD_B * FD_I], dyd[FD_B * FD_U], wd[FD_I * FD_U], fd[FD_I * FD_U];
    kt_rand(x, FD_B * FD_I, 70, -1, 1);
    kt_rand(dy, FD_B * FD_U, 71, -1, 1);
    kt_rand(w, FD_I * FD_U, 72, -1, 1);
    for (size_t i = 0; i < FD_I * FD_U; i++)
        dw[i] = NAN;
    kt_widen(x, xd, FD_B * FD_I);
    kt_widen(dy, dyd, FD_B * FD_U);
    kt_widen(w, wd, FD_I * FD_U);
    sl_op_attrs a = {.i = {1, 0}, .f = {1, 0}};
    sl_shape sh[3] = {KT_F32(2, FD_B, FD_I), KT_F32(2, FD_B, FD_U), KT_F32(2, FD_I, FD_U)};
    kt_run_op(*state, SL_OP_MATMUL_ACC, &a, sh, (float *[]){x, dy, dw}, 3, NULL);
    struct dense_ctx ctx = {xd, dyd};
    kt_fd_grad(dense_dot, &ctx, wd, FD_I * FD_U, fd);
    kt_expect_close("matmul_acc weight gradient vs finite differences", dw, fd, FD_I * FD_U,
                    FD_TOL);
}

/* momentum_update's math with the gradient accumulated into the velocity
 * (client/nn.c's dense layers): matmul_acc(x, dy, v; 1, momentum), then
 * v += weight decay * p (sgd_update with -wd), then p -= lr * v, against
 * the double reference of momentum_update with g = x^T dy. */
static void test_momentum_fused(void **state)
{
    kt_env *e = *state;
    enum { B = 9, I = 7, U = 11 };
    float p[I * U], v[I * U] = {0}, x[B * I], dy[B * U];
    double pd[I * U], vd[I * U] = {0}, g[I * U];
    kt_rand(p, I * U, 80, -1, 1);
    kt_widen(p, pd, I * U);
    const float lr = 0.05f, mom = 0.9f, wds[] = {0, 0.01f};
    sl_shape ps = KT_F32(2, I, U), acc_sh[3] = {KT_F32(2, B, I), KT_F32(2, B, U), ps},
             upd[2] = {ps, ps};
    for (int step = 0; step < STEPS; step++) {
        float wd = wds[step & 1];
        kt_rand(x, B * I, 81 + (uint64_t) step, -1, 1);
        kt_rand(dy, B * U, 91 + (uint64_t) step, -1, 1);
        sl_op_attrs acc = {.i = {1, 0}, .f = {1, mom}}, decay = {.f = {-wd}}, sgd = {.f = {lr}};
        kt_run_op(e, SL_OP_MATMUL_ACC, &acc, acc_sh, (float *[]){x, dy, v}, 3, NULL);
        if (wd != 0)
            kt_run_op(e, SL_OP_SGD_UPDATE, &decay, upd, (float *[]){v, p}, 2, NULL);
        kt_run_op(e, SL_OP_SGD_UPDATE, &sgd, upd, (float *[]){p, v}, 2, NULL);
        for (size_t i = 0; i < I; i++)
            for (size_t j = 0; j < U; j++) {
                g[i * U + j] = 0;
                for (size_t r = 0; r < B; r++)
                    g[i * U + j] += (double) x[r * I + i] * dy[r * U + j];
            }
        for (size_t i = 0; i < I * U; i++) {
            vd[i] = (double) mom * vd[i] + g[i] + (double) wd * pd[i];
            pd[i] -= (double) lr * vd[i];
        }
    }
    kt_expect_close("fused momentum param", p, pd, I * U, 1e-5);
    kt_expect_close("fused momentum velocity", v, vd, I * U, 1e-5);
}

/* Adam, and on odd steps AdamW (decoupled weight decay, as PyTorch's:
 * the parameter shrinks by lr * weight_decay before the update). */
static void test_adam(void **state)
{
    kt_env *e = *state;
    float p[NP], g[NP], m[NP] = {0}, v[NP] = {0}, t = 0;
    double pd[NP], md[NP] = {0}, vd[NP] = {0};
    kt_rand(p, NP, 50, -1, 1);
    kt_widen(p, pd, NP);
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wds[] = {0, 0.1f};
    sl_op_attrs inc = {.f = {1}};
    sl_shape s = KT_F32(1, NP), ts = KT_F32(1, 1), sh[5] = {s, s, s, s, ts};
    for (int step = 1; step <= STEPS; step++) {
        float wd = wds[step & 1];
        sl_op_attrs a = {.f = {lr, b1, b2, eps, wd}};
        kt_rand(g, NP, 51 + (uint64_t) step, -1, 1);
        kt_run_op(e, SL_OP_ADD_SCALAR, &inc, &ts, (float *[]){&t}, 1, NULL);
        kt_run_op(e, SL_OP_ADAM_UPDATE, &a, sh, (float *[]){p, g, m, v, &t}, 5, NULL);
        double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        for (size_t i = 0; i < NP; i++) {
            md[i] = b1 * md[i] + (1 - (double) b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - (double) b2) * g[i] * g[i];
            pd[i] *= 1 - (double) lr * wd;
            pd[i] -= lr * (md[i] / bc1) / (sqrt(vd[i] / bc2) + eps);
        }
    }
    assert_true(t == (float) STEPS);
    kt_expect_close("adam param", p, pd, NP, 1e-5);
    kt_expect_close("adam m", m, md, NP, 1e-5);
    kt_expect_close("adam v", v, vd, NP, 1e-5);
}

/* The _lr updates with scale L and rate r are the plain updates with
 * learning rate L * r, bit for bit: both round that one product. */
static void test_update_rate(void **state)
{
    kt_env *e = *state;
    const float scale = 0.5f, rate = 0.0123f;
    struct {
        unsigned op, op_lr, n_in;
        sl_op_attrs at;
    } cases[] = {
        {SL_OP_SGD_UPDATE, SL_OP_SGD_UPDATE_LR, 2, {.f = {0}}},
        {SL_OP_MOMENTUM_UPDATE, SL_OP_MOMENTUM_UPDATE_LR, 3, {.f = {0, 0.9f, 1e-4f}}},
        {SL_OP_ADAM_UPDATE, SL_OP_ADAM_UPDATE_LR, 5, {.f = {0, 0.9f, 0.999f, 1e-8f}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned n = cases[c].n_in;
        float x[2][5][NP], r = rate;
        sl_shape sh[6];
        for (unsigned i = 0; i < n; i++) {
            bool step = cases[c].op == SL_OP_ADAM_UPDATE && i == 4;
            sh[i] = step ? KT_F32(1, 1) : KT_F32(1, NP);
            kt_rand(x[0][i], NP, 900 + i, i == 3 ? 0 : -1, 1); /* Adam's v >= 0 */
            if (step)
                x[0][i][0] = 2.0f;
            memcpy(x[1][i], x[0][i], sizeof x[0][i]);
        }
        sh[n] = KT_F32(1, 1);
        sl_op_attrs plain = cases[c].at, with_rate = cases[c].at;
        plain.f[0] = scale * rate;
        with_rate.f[0] = scale;
        float *in0[5], *in1[6];
        for (unsigned i = 0; i < n; i++)
            in0[i] = x[0][i], in1[i] = x[1][i];
        in1[n] = &r;
        kt_run_op(e, cases[c].op, &plain, sh, in0, n, NULL);
        kt_run_op(e, cases[c].op_lr, &with_rate, sh, in1, n + 1, NULL);
        for (unsigned i = 0; i < n; i++)
            assert_memory_equal(x[0][i], x[1][i], sizeof x[0][i]);
        assert_true(r == rate); /* read only */
    }
}

KT_GROUP_ON(kt_run_nn_tests, "element-wise, losses, optimisers", nn_spec, group_setup,
            kt_group_close, cmocka_unit_test(test_mul_axpy_add_scalar),
            cmocka_unit_test(test_sigmoid_tanh), cmocka_unit_test(test_grad_sigmoid_tanh),
            cmocka_unit_test(test_softmax_xent), cmocka_unit_test(test_xent_bad_label),
            cmocka_unit_test(test_reduce), cmocka_unit_test(test_argmax),
            cmocka_unit_test(test_momentum), cmocka_unit_test(test_adam),
            cmocka_unit_test(test_update_rate), cmocka_unit_test(test_matmul_acc),
            cmocka_unit_test(test_split), cmocka_unit_test(test_matmul_acc_weight_grad),
            cmocka_unit_test(test_momentum_fused))
