/* The transformer training ops (ops_train.c, where and masked_fill) on one
 * backend, against references computed here in double: layer_norm and its
 * gradient, gelu, gelu_tanh and silu and their derivatives, softmax_axis
 * and its gradient on every axis, embedding_grad, where, masked_fill,
 * dropout and its gradient. test_kernels runs them on the cpu, test_cuda
 * on the GPU; dropout's masks are checked against the shared Philox
 * reference, so both backends must draw the same ones. */
#include "kt.h"

#include "elementwise.h"
#include "ops_axes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *spec;
static kt_env env;

static int setup(void **state)
{
    (void) state;
    return kt_env_open(&env, spec) == SL_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void) state;
    kt_env_close(&env);
    return 0;
}

static void near(const float *got, const double *want, size_t n, double rtol, double atol,
                 const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i])))
            fail_msg("%s: element %zu: got %.9g, want %.9g", what, i, (double) got[i], want[i]);
}

/* Rows of 50 and of 200 elements: the gradient's weight and bias sums go
 * in blocks of 128 columns. */
static void test_layer_norm(void **state)
{
    (void) state;
    enum { A = 3, B = 4, C = 50, N = A * B * C };
    float x[N], dy[N], y[N], mean[A * B], rstd[A * B], dx[N], dw[B * C], db[B * C];
    float w[B * C], b[B * C];
    kt_rand(x, N, 1, -2.0f, 3.0f);
    kt_rand(dy, N, 2, -1.0f, 1.0f);
    kt_rand(w, B * C, 3, 0.5f, 1.5f);
    kt_rand(b, B * C, 4, -1.0f, 1.0f);
    for (int axis = 1; axis <= 2; axis++) {
        size_t d = axis == 1 ? B * C : C, rows = N / d;
        const float eps = 1e-5f;
        sl_op_attrs a = {.i = {axis}, .f = {eps}};
        sl_shape ps = axis == 1 ? KT_F32(2, B, C) : KT_F32(1, C);
        sl_shape st = axis == 1 ? KT_F32(3, A, 1, 1) : KT_F32(3, A, B, 1);
        sl_shape sh[6] = {KT_F32(3, A, B, C), ps, ps};
        kt_run_op(&env, SL_OP_LAYER_NORM, &a, sh, (float *const[]){x, w, b}, 3,
                  (float *const[]){y, mean, rstd});
        double wy[N], wm[A * B], wr[A * B], wdx[N], wdw[B * C] = {0}, wdb[B * C] = {0};
        for (size_t r = 0; r < rows; r++) {
            const float *xr = x + r * d;
            double s = 0, ss = 0;
            for (size_t j = 0; j < d; j++)
                s += xr[j];
            double m = s / (double) d;
            for (size_t j = 0; j < d; j++)
                ss += (xr[j] - m) * (xr[j] - m);
            double rs = 1.0 / sqrt(ss / (double) d + eps);
            wm[r] = m, wr[r] = rs;
            double sg = 0, sgx = 0;
            for (size_t j = 0; j < d; j++) {
                double xh = (xr[j] - m) * rs, g = (double) dy[r * d + j] * w[j];
                wy[r * d + j] = xh * w[j] + b[j];
                sg += g, sgx += g * xh;
                wdw[j] += dy[r * d + j] * xh;
                wdb[j] += dy[r * d + j];
            }
            for (size_t j = 0; j < d; j++) {
                double xh = (xr[j] - m) * rs, g = (double) dy[r * d + j] * w[j];
                wdx[r * d + j] = rs * (g - sg / (double) d - xh * sgx / (double) d);
            }
        }
        near(y, wy, N, 1e-5, 1e-5, "layer_norm y");
        near(mean, wm, rows, 1e-6, 1e-6, "layer_norm mean");
        near(rstd, wr, rows, 1e-5, 1e-6, "layer_norm rstd");
        sl_shape gs[8] = {KT_F32(3, A, B, C), KT_F32(3, A, B, C), ps, st, st};
        a.f[0] = 0;
        kt_run_op(&env, SL_OP_LAYER_NORM_GRAD, &a, gs, (float *const[]){dy, x, w, mean, rstd}, 5,
                  (float *const[]){dx, dw, db});
        near(dx, wdx, N, 1e-4, 1e-5, "layer_norm_grad dx");
        near(dw, wdw, d, 1e-4, 1e-5, "layer_norm_grad dweight");
        near(db, wdb, d, 1e-5, 1e-5, "layer_norm_grad dbias");
    }
}

static double ref_act(int kind, double x, double *deriv)
{
    const double k = sqrt(2.0 / M_PI);
    switch (kind) {
    case SL_EW_GELU: {
        double cdf = 0.5 * (1 + erf(x / sqrt(2.0)));
        *deriv = cdf + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
        return x * cdf;
    }
    case SL_EW_GELU_TANH: {
        double t = tanh(k * (x + 0.044715 * x * x * x));
        *deriv = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
        return 0.5 * x * (1 + t);
    }
    default: {
        double s = 1 / (1 + exp(-x));
        *deriv = s * (1 + x * (1 - s));
        return x * s;
    }
    }
}

static void test_activations(void **state)
{
    (void) state;
    enum { N = 257 };
    float x[N], dy[N], y[N], dx[N];
    double wy[N], wdx[N];
    kt_rand(x, N, 5, -8.0f, 8.0f);
    kt_rand(dy, N, 6, -1.0f, 1.0f);
    sl_shape sh[3] = {KT_F32(1, N), KT_F32(1, N), KT_F32(1, N)};
    const int kinds[] = {SL_EW_GELU, SL_EW_GELU_TANH, SL_EW_SILU, SL_EW_HARD_SWISH, SL_EW_EXP};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        sl_op_attrs a = {.i = {kinds[k]}};
        for (int i = 0; i < N; i++) {
            double d;
            if (kinds[k] == SL_EW_HARD_SWISH) {
                double v = x[i];
                wy[i] = v * fmax(0, fmin(1, v / 6 + 0.5));
                d = v < -3 ? 0 : v <= 3 ? v / 3 + 0.5 : 1;
            } else if (kinds[k] == SL_EW_EXP) {
                wy[i] = d = exp(x[i]);
            } else {
                wy[i] = ref_act(kinds[k], x[i], &d);
            }
            wdx[i] = dy[i] * d;
        }
        char what[64];
        snprintf(what, sizeof what, "ew_unary kind %d", kinds[k]);
        kt_run_op(&env, SL_OP_EW_UNARY, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
        near(y, wy, N, 2e-6, 1e-6, what);
        snprintf(what, sizeof what, "ew_unary_grad kind %d", kinds[k]);
        kt_run_op(&env, SL_OP_EW_UNARY_GRAD, &a, sh, (float *const[]){dy, x}, 2,
                  (float *const[]){dx});
        near(dx, wdx, N, 1e-5, 1e-6, what);
    }
}

static void test_softmax_axis(void **state)
{
    (void) state;
    enum { A = 3, B = 4, C = 5, N = A * B * C };
    const int64_t dims[3] = {A, B, C}, st[3] = {B * C, C, 1};
    float x[N], dy[N], y[N], dx[N];
    double wy[N], wdx[N];
    kt_rand(x, N, 7, -10.0f, 10.0f);
    kt_rand(dy, N, 8, -1.0f, 1.0f);
    for (int axis = 0; axis < 3; axis++)
        for (int lg = 0; lg <= 1; lg++) {
            for (int i = 0; i < N; i++) {
                int64_t base = i - (i / st[axis] % dims[axis]) * st[axis];
                double mx = -INFINITY, s = 0, sd = 0, sdy = 0;
                for (int64_t j = 0; j < dims[axis]; j++)
                    mx = fmax(mx, x[base + j * st[axis]]);
                for (int64_t j = 0; j < dims[axis]; j++)
                    s += exp(x[base + j * st[axis]] - mx);
                for (int64_t j = 0; j < dims[axis]; j++) {
                    double p = exp(x[base + j * st[axis]] - mx) / s;
                    sd += dy[base + j * st[axis]] * p;
                    sdy += dy[base + j * st[axis]];
                }
                double p = exp(x[i] - mx) / s;
                wy[i] = lg ? x[i] - mx - log(s) : p;
                wdx[i] = lg ? dy[i] - p * sdy : p * (dy[i] - sd);
            }
            sl_op_attrs a = {.i = {axis, lg}};
            sl_shape sh[3] = {KT_F32(3, A, B, C), KT_F32(3, A, B, C)};
            kt_run_op(&env, SL_OP_SOFTMAX_AXIS, &a, sh, (float *const[]){x}, 1,
                      (float *const[]){y});
            char what[64];
            snprintf(what, sizeof what, "softmax_axis axis %d log %d", axis, lg);
            near(y, wy, N, 1e-5, 1e-6, what);
            kt_run_op(&env, SL_OP_SOFTMAX_AXIS_GRAD, &a, sh, (float *const[]){dy, y}, 2,
                      (float *const[]){dx});
            snprintf(what, sizeof what, "softmax_axis_grad axis %d log %d", axis, lg);
            near(dx, wdx, N, 1e-4, 1e-5, what);
        }
}

static void test_embedding_grad(void **state)
{
    (void) state;
    enum { V = 7, D = 5, R = 2, T = 6 };
    int32_t ids[R * T] = {0, 3, 3, -1, 6, 2, 3, 0, 5, 5, 5, 1};
    float dy[R * T * D], dw[V * D];
    kt_rand(dy, R * T * D, 9, -1.0f, 1.0f);
    for (int pad = -1; pad <= 3; pad += 4) {
        double want[V * D] = {0};
        for (int i = 0; i < R * T; i++) {
            int k = ids[i] < 0 ? ids[i] + V : ids[i];
            if (k == pad)
                continue;
            for (int j = 0; j < D; j++)
                want[k * D + j] += dy[i * D + j];
        }
        sl_op_attrs a = {.i = {V, pad}};
        sl_shape sh[3] = {KT_F32(3, R, T, D), KT_SHAPE(SL_I32, 2, R, T)};
        kt_run_op(&env, SL_OP_EMBEDDING_GRAD, &a, sh, (float *const[]){dy, (float *) ids}, 2,
                  (float *const[]){dw});
        near(dw, want, V * D, 1e-6, 1e-6, pad < 0 ? "embedding_grad" : "embedding_grad pad");
    }
}

static void test_where_masked_fill(void **state)
{
    (void) state;
    enum { A = 2, T = 5 };
    /* a causal mask [T,T] over scores [A,T,T]; b a row [T] */
    int32_t causal[T * T];
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++)
            causal[i * T + j] = j > i;
    float s[A * T * T], b[T], y[A * T * T];
    double want[A * T * T];
    kt_rand(s, A * T * T, 10, -3.0f, 3.0f);
    kt_rand(b, T, 11, -3.0f, 3.0f);
    for (int i = 0; i < A * T * T; i++)
        want[i] = causal[i % (T * T)] ? s[i] : b[i % T];
    sl_shape sh[4] = {KT_SHAPE(SL_I32, 2, T, T), KT_F32(3, A, T, T), KT_F32(1, T)};
    kt_run_op(&env, SL_OP_WHERE, NULL, sh, (float *const[]){(float *) causal, s, b}, 3,
              (float *const[]){y});
    near(y, want, A * T * T, 0, 0, "where");

    sl_op_attrs a = {.f = {-INFINITY}};
    for (int i = 0; i < A * T * T; i++)
        want[i] = causal[i % (T * T)] ? -INFINITY : s[i];
    sl_shape ms[3] = {KT_F32(3, A, T, T), KT_SHAPE(SL_I32, 2, T, T)};
    kt_run_op(&env, SL_OP_MASKED_FILL, &a, ms, (float *const[]){s, (float *) causal}, 2,
              (float *const[]){y});
    for (int i = 0; i < A * T * T; i++)
        if (!(y[i] == (float) want[i]))
            fail_msg("masked_fill: element %d: got %g, want %g", i, (double) y[i], want[i]);
}

/* Philox4x32-10's known answer (Random123's test vectors) for counter 0
 * and key 0, and dropout's masks and scaling. */
static void test_dropout(void **state)
{
    (void) state;
    uint32_t w[4] = {0, 0, 0, 0};
    sl_philox4x32(w, 0, 0);
    assert_int_equal(w[0], 0x6627e8d5u);
    assert_int_equal(w[1], 0xe169c58du);
    assert_int_equal(w[2], 0xbc57ac4cu);
    assert_int_equal(w[3], 0x9b00dbd8u);

    enum { N = 4099 };
    float *x = malloc(N * 4), *y = malloc(N * 4), *dy = malloc(N * 4), *dx = malloc(N * 4);
    int32_t *mask = malloc(N * 4), seed[2] = {12345, -7};
    kt_rand(x, N, 12, -1.0f, 1.0f);
    kt_rand(dy, N, 13, -1.0f, 1.0f);
    const float p = 0.3f;
    sl_op_attrs a = {.i = {41}, .f = {p}};
    sl_shape sh[4] = {KT_F32(2, 1, N), KT_SHAPE(SL_I32, 1, 2)};
    kt_run_op(&env, SL_OP_DROPOUT, &a, sh, (float *const[]){x, (float *) seed}, 2,
              (float *const[]){y, (float *) mask});
    uint64_t thr = sl_dropout_threshold(p);
    int kept = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint32_t words[4];
        sl_dropout_block(i / 4, (uint32_t) seed[0], (uint32_t) seed[1], 41, words);
        int keep = words[i % 4] >= thr;
        if (mask[i] != keep)
            fail_msg("dropout: mask[%llu] = %d, want %d", (unsigned long long) i, mask[i], keep);
        float want = keep ? x[i] * (1.0f / (1.0f - p)) : 0.0f;
        if (fabsf(y[i] - want) > 1e-6f)
            fail_msg("dropout: y[%llu] = %g, want %g", (unsigned long long) i, (double) y[i],
                     (double) want);
        kept += keep;
    }
    /* 1 - p kept, within 5 standard deviations */
    double sd = sqrt(N * p * (1 - p));
    assert_true(fabs(kept - N * (1 - p)) < 5 * sd);

    sl_op_attrs g = {.f = {1.0f / (1.0f - p)}};
    sl_shape gs[3] = {KT_F32(2, 1, N), KT_SHAPE(SL_I32, 2, 1, N)};
    kt_run_op(&env, SL_OP_DROPOUT_GRAD, &g, gs, (float *const[]){dy, (float *) mask}, 2,
              (float *const[]){dx});
    for (int i = 0; i < N; i++) {
        float want = mask[i] ? dy[i] * g.f[0] : 0.0f;
        if (fabsf(dx[i] - want) > 1e-6f)
            fail_msg("dropout_grad: dx[%d] = %g, want %g", i, (double) dx[i], (double) want);
    }
    free(x), free(y), free(dy), free(dx), free(mask);
}

KT_GROUP_ON(kt_run_train_tests, "training ops", spec, setup, teardown,
            cmocka_unit_test(test_layer_norm), cmocka_unit_test(test_activations),
            cmocka_unit_test(test_softmax_axis), cmocka_unit_test(test_embedding_grad),
            cmocka_unit_test(test_where_masked_fill), cmocka_unit_test(test_dropout))
