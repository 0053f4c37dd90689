/* Every op executed on a device through the real contract, compared with a
 * straightforward double-precision reference; gradients compared with
 * central finite differences of double-precision forward ops. */
#include "kt.h"
#include "kt_nn.h"

#include "sl_alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *exec_spec;

static int group_setup(void **state)
{
    return kt_group_open(state, exec_spec);
}

static float *vec(size_t n)
{
    float *p = sl_calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

static double *dvec(size_t n)
{
    double *p = sl_calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

/* |got - want| <= tol * (1 + |want|) for every element. */
static void expect_close(const char *what, const float *got, const double *want, size_t n,
                         double tol)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i]))))
            fail_msg("%s[%zu]: got %.9g, want %.9g (tol %g)", what, i, (double) got[i], want[i],
                     tol);
}

/* ---- double-precision references ---- */

/* out[M,N] = op(a) op(b); a is [M,K] or [K,M], b is [K,N] or [N,K]. */
static void ref_matmul(const double *a, const double *b, double *out, int m, int n, int k, bool ta,
                       bool tb)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int p = 0; p < k; p++)
                acc += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            out[i * n + j] = acc;
        }
}

static void widen(const float *x, double *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
}

static double ref_relu(double x)
{
    return x > 0 ? x : 0;
}

static double ref_mse(const double *p, const double *t, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (p[i] - t[i]) * (p[i] - t[i]);
    return s / (double) n;
}

/* ---- forward ops ---- */

#define ROWS 37
#define COLS 29
#define N_EW (ROWS * COLS)

static void test_fill_copy_scale_add(void **state)
{
    kt_env *e = *state;
    sl_shape s = KT_F32(2, ROWS, COLS);
    float *x = vec(N_EW), *y = vec(N_EW), *z = vec(N_EW);
    double *want = dvec(N_EW);
    kt_rand(x, N_EW, 1, -3, 3);
    kt_rand(y, N_EW, 2, -3, 3);

    sl_op_attrs a = {.f = {2.5f}};
    kt_run_op(e, SL_OP_FILL, &a, &s, (float *[]){x}, 1, (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = 2.5;
    expect_close("fill", z, want, N_EW, 0);

    kt_run_op(e, SL_OP_COPY, NULL, &s, (float *[]){x}, 1, (float *[]){z});
    widen(x, want, N_EW);
    expect_close("copy", z, want, N_EW, 0);

    a.f[0] = -0.75f;
    kt_run_op(e, SL_OP_SCALE, &a, &s, (float *[]){x}, 1, (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = -0.75 * x[i];
    expect_close("scale", z, want, N_EW, 1e-7);

    kt_run_op(e, SL_OP_ADD, NULL, (sl_shape[]){s, s}, (float *[]){x, y}, 2, (float *[]){z});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = (double) x[i] + y[i];
    expect_close("add", z, want, N_EW, 1e-7);
    sl_free(x), sl_free(y), sl_free(z), sl_free(want);
}

static void check_matmul(kt_env *e, int m, int n, int k, bool ta, bool tb)
{
    size_t na = (size_t) m * k, nb = (size_t) k * n, nc = (size_t) m * n;
    float *a = vec(na), *b = vec(nb), *c = vec(nc);
    double *da = dvec(na), *db = dvec(nb), *want = dvec(nc);
    kt_rand(a, na, 10 + (unsigned) m, -1, 1);
    kt_rand(b, nb, 20 + (unsigned) n, -1, 1);
    widen(a, da, na);
    widen(b, db, nb);
    ref_matmul(da, db, want, m, n, k, ta, tb);

    sl_shape sh[2] = {ta ? KT_F32(2, k, m) : KT_F32(2, m, k),
                      tb ? KT_F32(2, n, k) : KT_F32(2, k, n)};
    sl_op_attrs at = {.i = {ta, tb}};
    kt_run_op(e, SL_OP_MATMUL, &at, sh, (float *[]){a, b}, 2, (float *[]){c});
    char what[64];
    snprintf(what, sizeof what, "matmul %dx%dx%d ta=%d tb=%d", m, n, k, ta, tb);
    expect_close(what, c, want, nc, 1e-5 * k);
    sl_free(a), sl_free(b), sl_free(c), sl_free(da), sl_free(db), sl_free(want);
}

static void test_matmul(void **state)
{
    for (int t = 0; t < 4; t++) {
        check_matmul(*state, 5, 3, 7, t & 1, t & 2);
        check_matmul(*state, 1, 1, 1, t & 1, t & 2);
        check_matmul(*state, 64, 33, 130, t & 1, t & 2);
    }
}

static void test_bias_add_grad(void **state)
{
    kt_env *e = *state;
    float *x = vec(N_EW), *b = vec(COLS), *y = vec(N_EW), *db = vec(COLS);
    double *want = dvec(N_EW);
    kt_rand(x, N_EW, 3, -2, 2);
    kt_rand(b, COLS, 4, -2, 2);
    sl_shape sh[2] = {KT_F32(2, ROWS, COLS), KT_F32(1, COLS)};
    kt_run_op(e, SL_OP_BIAS_ADD, NULL, sh, (float *[]){x, b}, 2, (float *[]){y});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = (double) x[i] + b[i % COLS];
    expect_close("bias_add", y, want, N_EW, 1e-7);

    kt_run_op(e, SL_OP_BIAS_GRAD, NULL, sh, (float *[]){x}, 1, (float *[]){db});
    for (size_t j = 0; j < COLS; j++) {
        want[j] = 0;
        for (size_t r = 0; r < ROWS; r++)
            want[j] += x[r * COLS + j];
    }
    expect_close("bias_grad", db, want, COLS, 1e-6);
    sl_free(x), sl_free(b), sl_free(y), sl_free(db), sl_free(want);
}

static void test_relu(void **state)
{
    kt_env *e = *state;
    float *x = vec(N_EW), *dy = vec(N_EW), *y = vec(N_EW);
    double *want = dvec(N_EW);
    kt_rand(x, N_EW, 5, -1, 1);
    kt_rand(dy, N_EW, 6, -1, 1);
    x[0] = 0.0f;
    x[1] = -0.0f;
    sl_shape s = KT_F32(3, ROWS, 1, COLS);
    kt_run_op(e, SL_OP_RELU, NULL, &s, (float *[]){x}, 1, (float *[]){y});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = ref_relu(x[i]);
    expect_close("relu", y, want, N_EW, 0);

    kt_run_op(e, SL_OP_RELU_GRAD, NULL, (sl_shape[]){s, s}, (float *[]){dy, x}, 2, (float *[]){y});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = x[i] > 0 ? dy[i] : 0;
    expect_close("relu_grad", y, want, N_EW, 0);

    /* relu_mask: relu plus where x > 0 as bits (1073 elements: a partial last
     * word); relu_grad_mask gives relu_grad's result from the bits alone */
    size_t words = (N_EW + 31) / 32;
    uint32_t *bits = sl_calloc(words, sizeof *bits);
    assert_non_null(bits);
    kt_run_op(e, SL_OP_RELU_MASK, NULL, &s, (float *[]){x}, 1, (float *[]){y, (float *) bits});
    for (size_t i = 0; i < N_EW; i++) {
        want[i] = ref_relu(x[i]);
        assert_int_equal((bits[i / 32] >> (i % 32)) & 1u, x[i] > 0);
    }
    expect_close("relu_mask", y, want, N_EW, 0);
    for (size_t i = N_EW; i < words * 32; i++) /* the tail of the last word stays clear */
        assert_int_equal((bits[i / 32] >> (i % 32)) & 1u, 0);
    sl_shape bits_shape = KT_SHAPE(SL_I32, 1, (int64_t) words);
    kt_run_op(e, SL_OP_RELU_GRAD_MASK, NULL, (sl_shape[]){s, bits_shape},
              (float *[]){dy, (float *) bits}, 2, (float *[]){y});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = x[i] > 0 ? dy[i] : 0;
    expect_close("relu_grad_mask", y, want, N_EW, 0);
    sl_free(bits);

    /* A scalar (rank 0) is one element. */
    float sx = -4.0f, sy = 1.0f;
    kt_run_op(e, SL_OP_RELU, NULL, &(sl_shape){.dtype = SL_F32}, (float *[]){&sx}, 1,
              (float *[]){&sy});
    assert_true(sy == 0.0f);
    sl_free(x), sl_free(dy), sl_free(y), sl_free(want);
}

static void test_mse_sgd(void **state)
{
    kt_env *e = *state;
    float *p = vec(N_EW), *t = vec(N_EW), *g = vec(N_EW), loss = -1;
    double *dp = dvec(N_EW), *dt = dvec(N_EW), *want = dvec(N_EW);
    kt_rand(p, N_EW, 7, -2, 2);
    kt_rand(t, N_EW, 8, -2, 2);
    widen(p, dp, N_EW);
    widen(t, dt, N_EW);
    sl_shape s = KT_F32(2, ROWS, COLS), sh[2] = {s, s};

    kt_run_op(e, SL_OP_MSE_LOSS, NULL, sh, (float *[]){p, t}, 2, (float *[]){&loss});
    double want_loss = ref_mse(dp, dt, N_EW);
    expect_close("mse_loss", &loss, &want_loss, 1, 1e-6);

    kt_run_op(e, SL_OP_MSE_GRAD, NULL, sh, (float *[]){p, t}, 2, (float *[]){g});
    for (size_t i = 0; i < N_EW; i++)
        want[i] = 2 * (dp[i] - dt[i]) / N_EW;
    expect_close("mse_grad", g, want, N_EW, 1e-6);

    sl_op_attrs a = {.f = {0.125f}};
    kt_run_op(e, SL_OP_SGD_UPDATE, &a, sh, (float *[]){p, t}, 2, NULL);
    for (size_t i = 0; i < N_EW; i++)
        want[i] = dp[i] - 0.125 * dt[i];
    expect_close("sgd_update", p, want, N_EW, 1e-6);
    sl_free(p), sl_free(t), sl_free(g), sl_free(dp), sl_free(dt), sl_free(want);
}

/* The loss-scaling ops (GradScaler's rules): unscale multiplies by the
 * scale's reciprocal and raises found on an inf or NaN (spread over the
 * tensor: a grid-stride kernel's later blocks see it); commit copies only
 * while found is 0; scale_update halves on found, doubles after `interval`
 * clean steps. Exact: the same f32 arithmetic on every backend. */
static void test_amp(void **state)
{
    kt_env *e = *state;
    float *g = vec(N_EW), *want = vec(N_EW), *dst = vec(N_EW), *keep = vec(N_EW);
    kt_rand(g, N_EW, 11, -4, 4);
    float scale = 1024.0f, found = 0;
    for (size_t i = 0; i < N_EW; i++)
        want[i] = g[i] * (1.0f / scale);
    sl_shape s = KT_F32(2, ROWS, COLS), one = KT_F32(1, 1);
    kt_run_op(e, SL_OP_AMP_UNSCALE, NULL, (sl_shape[]){s, one, one}, (float *[]){g, &scale, &found},
              3, NULL);
    assert_memory_equal(g, want, N_EW * sizeof *g);
    assert_true(found == 0.0f);
    g[N_EW - 1] = INFINITY; /* the last element: the last block's */
    kt_run_op(e, SL_OP_AMP_UNSCALE, NULL, (sl_shape[]){s, one, one}, (float *[]){g, &scale, &found},
              3, NULL);
    assert_true(found == 1.0f);

    kt_rand(dst, N_EW, 12, -1, 1);
    memcpy(keep, dst, N_EW * sizeof *dst);
    kt_run_op(e, SL_OP_AMP_COMMIT, NULL, (sl_shape[]){s, s, one}, (float *[]){dst, want, &found}, 3,
              NULL);
    assert_memory_equal(dst, keep, N_EW * sizeof *dst); /* found: left alone */
    found = 0;
    kt_run_op(e, SL_OP_AMP_COMMIT, NULL, (sl_shape[]){s, s, one}, (float *[]){dst, want, &found}, 3,
              NULL);
    assert_memory_equal(dst, want, N_EW * sizeof *dst);

    sl_op_attrs a = {.f = {2.0f, 0.5f, 2.0f}}; /* growth, backoff, interval */
    float growth = 0, skipped = 0;
    sl_shape four[4] = {one, one, one, one};
    found = 1;
    kt_run_op(e, SL_OP_AMP_SCALE_UPDATE, &a, four, (float *[]){&scale, &growth, &skipped, &found},
              4, NULL);
    assert_true(scale == 512.0f && growth == 0.0f && skipped == 1.0f);
    found = 0;
    for (int k = 0; k < 2; k++)
        kt_run_op(e, SL_OP_AMP_SCALE_UPDATE, &a, four,
                  (float *[]){&scale, &growth, &skipped, &found}, 4, NULL);
    assert_true(scale == 1024.0f && growth == 0.0f && skipped == 1.0f);
    sl_free(g), sl_free(want), sl_free(dst), sl_free(keep);
}

/* ---- gradients against finite differences ---- */

#define FD_TOL 1e-4

struct weighted { /* L = sum w * g(x) */
    const double *w, *other;
    size_t n;
    int m, k, cols;
};

static double loss_relu(const double *x, const void *ctx)
{
    const struct weighted *c = ctx;
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        s += c->w[i] * ref_relu(x[i]);
    return s;
}

static void test_grad_relu(void **state)
{
    enum { N = 200 };
    float x[N], dy[N], dx[N];
    double dxd[N], dyd[N], fd[N];
    kt_rand(x, N, 11, -1, 1);
    kt_rand(dy, N, 12, -1, 1);
    for (size_t i = 0; i < N; i++)
        if (fabsf(x[i]) < 1e-3f)
            x[i] = 0.5f; /* keep away from the kink */
    sl_shape s = KT_F32(1, N);
    kt_run_op(*state, SL_OP_RELU_GRAD, NULL, (sl_shape[]){s, s}, (float *[]){dy, x}, 2,
              (float *[]){dx});
    widen(x, dxd, N);
    widen(dy, dyd, N);
    struct weighted c = {.w = dyd, .n = N};
    kt_fd_grad(loss_relu, &c, dxd, N, fd);
    expect_close("relu_grad vs fd", dx, fd, N, FD_TOL);
}

static double loss_mse(const double *p, const void *ctx)
{
    const struct weighted *c = ctx;
    return ref_mse(p, c->other, c->n);
}

static void test_grad_mse(void **state)
{
    enum { N = 150 };
    float p[N], t[N], g[N];
    double pd[N], td[N], fd[N];
    kt_rand(p, N, 13, -2, 2);
    kt_rand(t, N, 14, -2, 2);
    sl_shape s = KT_F32(2, 10, 15);
    kt_run_op(*state, SL_OP_MSE_GRAD, NULL, (sl_shape[]){s, s}, (float *[]){p, t}, 2,
              (float *[]){g});
    widen(p, pd, N);
    widen(t, td, N);
    struct weighted c = {.other = td, .n = N};
    kt_fd_grad(loss_mse, &c, pd, N, fd);
    expect_close("mse_grad vs fd", g, fd, N, FD_TOL);
}

/* L(b) = sum w * (x + b) over [ROWS, COLS]; x drops out of the gradient. */
static double loss_bias(const double *b, const void *ctx)
{
    const struct weighted *c = ctx;
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        s += c->w[i] * (c->other[i] + b[i % (size_t) c->cols]);
    return s;
}

static void test_grad_bias(void **state)
{
    float w[N_EW], db[COLS];
    double wd[N_EW], xd[N_EW], bd[COLS], fd[COLS];
    kt_rand(w, N_EW, 15, -1, 1);
    widen(w, wd, N_EW);
    for (size_t i = 0; i < N_EW; i++)
        xd[i] = 0.01 * (double) i;
    for (size_t j = 0; j < COLS; j++)
        bd[j] = 0.1 * (double) j;
    kt_run_op(*state, SL_OP_BIAS_GRAD, NULL, (sl_shape[]){KT_F32(2, ROWS, COLS)}, (float *[]){w}, 1,
              (float *[]){db});
    struct weighted c = {.w = wd, .other = xd, .n = N_EW, .cols = COLS};
    kt_fd_grad(loss_bias, &c, bd, COLS, fd);
    expect_close("bias_grad vs fd", db, fd, COLS, FD_TOL);
}

/* L(A) = sum W * (A @ B) and L(B) likewise, A [M,K], B [K,N], W [M,N]. */
enum { GM = 4, GK = 6, GN = 5 };

static double loss_mm_a(const double *a, const void *ctx)
{
    const struct weighted *c = ctx;
    double out[GM * GN], s = 0;
    ref_matmul(a, c->other, out, GM, GN, GK, false, false);
    for (size_t i = 0; i < GM * GN; i++)
        s += c->w[i] * out[i];
    return s;
}

static double loss_mm_b(const double *b, const void *ctx)
{
    const struct weighted *c = ctx;
    double out[GM * GN], s = 0;
    ref_matmul(c->other, b, out, GM, GN, GK, false, false);
    for (size_t i = 0; i < GM * GN; i++)
        s += c->w[i] * out[i];
    return s;
}

static void test_grad_matmul(void **state)
{
    float a[GM * GK], b[GK * GN], w[GM * GN], da[GM * GK], dbm[GK * GN];
    double ad[GM * GK], bd[GK * GN], wd[GM * GN], fda[GM * GK], fdb[GK * GN];
    kt_rand(a, GM * GK, 16, -1, 1);
    kt_rand(b, GK * GN, 17, -1, 1);
    kt_rand(w, GM * GN, 18, -1, 1);
    widen(a, ad, GM * GK);
    widen(b, bd, GK * GN);
    widen(w, wd, GM * GN);

    /* dA = W @ B^T: matmul(W [M,N], B [K,N], transB). */
    sl_op_attrs tb = {.i = {0, 1}}, ta = {.i = {1, 0}};
    kt_run_op(*state, SL_OP_MATMUL, &tb, (sl_shape[]){KT_F32(2, GM, GN), KT_F32(2, GK, GN)},
              (float *[]){w, b}, 2, (float *[]){da});
    /* dB = A^T @ W: matmul(A [M,K], W [M,N], transA). */
    kt_run_op(*state, SL_OP_MATMUL, &ta, (sl_shape[]){KT_F32(2, GM, GK), KT_F32(2, GM, GN)},
              (float *[]){a, w}, 2, (float *[]){dbm});

    struct weighted ca = {.w = wd, .other = bd}, cb = {.w = wd, .other = ad};
    kt_fd_grad(loss_mm_a, &ca, ad, GM * GK, fda);
    kt_fd_grad(loss_mm_b, &cb, bd, GK * GN, fdb);
    expect_close("matmul dA vs fd", da, fda, GM * GK, FD_TOL);
    expect_close("matmul dB vs fd", dbm, fdb, GK * GN, FD_TOL);
}

/* Larger inputs: grid-stride loops and blocked reductions past one block. */
static void test_large(void **state)
{
    enum { R = 300, C = 1100, N = R * C };
    float *x = vec(N), *y = vec(N), *db = vec(C), loss;
    double *want = dvec(N), *dx = dvec(N);
    kt_rand(x, N, 19, -1, 1);
    kt_rand(y, N, 20, -1, 1);
    sl_shape s = KT_F32(2, R, C);
    kt_run_op(*state, SL_OP_RELU, NULL, &s, (float *[]){x}, 1, (float *[]){y});
    for (size_t i = 0; i < N; i++)
        want[i] = ref_relu(x[i]);
    expect_close("relu large", y, want, N, 0);

    kt_rand(y, N, 21, -1, 1);
    kt_run_op(*state, SL_OP_BIAS_GRAD, NULL, &s, (float *[]){y}, 1, (float *[]){db});
    for (size_t j = 0; j < C; j++) {
        want[j] = 0;
        for (size_t r = 0; r < R; r++)
            want[j] += y[r * C + j];
    }
    expect_close("bias_grad large", db, want, C, 1e-6);

    kt_run_op(*state, SL_OP_MSE_LOSS, NULL, (sl_shape[]){s, s}, (float *[]){x, y}, 2,
              (float *[]){&loss});
    widen(x, dx, N);
    widen(y, want, N);
    double want_loss = ref_mse(dx, want, N);
    expect_close("mse_loss large", &loss, &want_loss, 1, 1e-6);
    sl_free(x), sl_free(y), sl_free(db), sl_free(want), sl_free(dx);
}

KT_GROUP_ON(kt_run_exec_tests, "exec", exec_spec, group_setup, kt_group_close,
            cmocka_unit_test(test_fill_copy_scale_add), cmocka_unit_test(test_matmul),
            cmocka_unit_test(test_bias_add_grad), cmocka_unit_test(test_relu),
            cmocka_unit_test(test_mse_sgd), cmocka_unit_test(test_amp),
            cmocka_unit_test(test_grad_relu), cmocka_unit_test(test_grad_mse),
            cmocka_unit_test(test_grad_bias), cmocka_unit_test(test_grad_matmul),
            cmocka_unit_test(test_large))
