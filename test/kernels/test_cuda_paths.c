/* Shapes chosen for the code paths of the cuda kernels, which the shared
 * groups (test_exec*.c) do not all reach: a warp per row and a block per row
 * (softmax, softmax_xent, argmax), more rows than one grid pass, reductions
 * over many blocks, column and channel sums sliced over the batch, and
 * Adam's step count advanced and read on the device. Against the references
 * of kt_nn_ref.c. Linked into test_cuda only (the cuda spec). */
#include "kt_nn.h"

#include "sl_alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int group_setup(void **state)
{
    return kt_group_open(state, "cuda");
}

/* ---- reductions ---- */

static void check_reduce(kt_env *e, sl_shape s, uint64_t seed)
{
    size_t n = (size_t) sl_shape_elems(&s);
    float *x = kt_fvec(n), got;
    kt_rand(x, n, seed, -1, 1);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += x[i];
    double mean = sum / (double) n;
    char what[128], dims[64];
    sl_shape_str(&s, dims, sizeof dims);

    kt_run_op(e, SL_OP_REDUCE_SUM, NULL, &s, (float *[]){x}, 1, (float *[]){&got});
    snprintf(what, sizeof what, "reduce_sum %s", dims);
    kt_expect_close(what, &got, &sum, 1, 1e-6);
    kt_run_op(e, SL_OP_REDUCE_MEAN, NULL, &s, (float *[]){x}, 1, (float *[]){&got});
    snprintf(what, sizeof what, "reduce_mean %s", dims);
    kt_expect_close(what, &got, &mean, 1, 1e-6);
    sl_free(x);
}

static void check_bias_grad(kt_env *e, int64_t rows, int64_t cols, uint64_t seed)
{
    size_t n = (size_t) (rows * cols);
    float *x = kt_fvec(n), *db = kt_fvec((size_t) cols);
    double *want = kt_dvec((size_t) cols);
    kt_rand(x, n, seed, -1, 1);
    for (size_t r = 0; r < (size_t) rows; r++)
        for (size_t j = 0; j < (size_t) cols; j++)
            want[j] += x[r * (size_t) cols + j];
    kt_run_op(e, SL_OP_BIAS_GRAD, NULL, (sl_shape[]){KT_F32(2, rows, cols)}, (float *[]){x}, 1,
              (float *[]){db});
    char what[64];
    snprintf(what, sizeof what, "bias_grad [%lld,%lld]", (long long) rows, (long long) cols);
    kt_expect_close(what, db, want, (size_t) cols, 1e-6);
    sl_free(x), sl_free(db), sl_free(want);
}

static void check_channel_grad(kt_env *e, const int64_t d[4], uint64_t seed)
{
    size_t n = kt_elems(d, 4), c = (size_t) d[1], inner = (size_t) (d[2] * d[3]);
    float *x = kt_fvec(n), *db = kt_fvec(c);
    double *want = kt_dvec(c);
    kt_rand(x, n, seed, -1, 1);
    for (size_t i = 0; i < n; i++)
        want[(i / inner) % c] += x[i];
    kt_run_op(e, SL_OP_CHANNEL_BIAS_GRAD, NULL, (sl_shape[]){KT_F32(4, d[0], d[1], d[2], d[3])},
              (float *[]){x}, 1, (float *[]){db});
    char what[96];
    snprintf(what, sizeof what, "channel_bias_grad [%lld,%lld,%lld,%lld]", (long long) d[0],
             (long long) d[1], (long long) d[2], (long long) d[3]);
    kt_expect_close(what, db, want, c, 1e-6);
    sl_free(x), sl_free(db), sl_free(want);
}

static void test_reductions(void **state)
{
    kt_env *e = *state;
    check_reduce(e, (sl_shape){.dtype = SL_F32}, 40);
    check_reduce(e, KT_F32(2, 37, 29), 41);
    check_reduce(e, KT_F32(3, 7, 300, 1100), 42); /* the most partial blocks */
    /* tall and narrow (row slices), wide (many column tiles), one element */
    check_bias_grad(e, 20000, 3, 43);
    check_bias_grad(e, 5, 4099, 44);
    check_bias_grad(e, 1, 1, 45);
    static const int64_t chan[][4] = {
        {64, 3, 33, 35},  /* few channels: batch slices */
        {2, 5000, 2, 3},  /* many channels, tiny planes */
        {7, 9, 1, 1},     /* planes of one: the column kernel */
        {1, 70000, 1, 2}, /* more channels than one grid pass */
    };
    for (size_t i = 0; i < sizeof chan / sizeof chan[0]; i++)
        check_channel_grad(e, chan[i], 46 + i);

    enum { N = 500000 };
    float *p = kt_fvec(N), *t = kt_fvec(N), loss;
    kt_rand(p, N, 50, -2, 2);
    kt_rand(t, N, 51, -2, 2);
    double want = 0;
    for (size_t i = 0; i < N; i++)
        want += ((double) p[i] - t[i]) * ((double) p[i] - t[i]);
    want /= N;
    sl_shape s = KT_F32(1, N);
    kt_run_op(e, SL_OP_MSE_LOSS, NULL, (sl_shape[]){s, s}, (float *[]){p, t}, 2,
              (float *[]){&loss});
    kt_expect_close("mse_loss 500000", &loss, &want, 1, 1e-6);
    sl_free(p), sl_free(t);
}

/* ---- rows: softmax family, argmax ---- */

static void check_softmax(kt_env *e, int64_t rows, int64_t cols, uint64_t seed)
{
    size_t n = (size_t) (rows * cols), nr = (size_t) rows, nc = (size_t) cols;
    float *x = kt_fvec(n), *p = kt_fvec(n), *dx = kt_fvec(n), loss;
    double *xd = kt_dvec(n), *want = kt_dvec(n), *pd = kt_dvec(n);
    int32_t *labels = sl_calloc(nr, sizeof *labels);
    assert_non_null(labels);
    kt_rand(x, n, seed, -4, 4);
    x[0] = 80.0f; /* exp would overflow without subtracting the row max */
    for (size_t r = 0; r < nr; r++)
        labels[r] = (int32_t) ((r * 7 + seed) % nc);
    kt_widen(x, xd, n);
    sl_shape xs = KT_F32(2, rows, cols), ls = KT_SHAPE(SL_I32, 1, rows);
    char what[96];

    kt_run_op(e, SL_OP_SOFTMAX, NULL, &xs, (float *[]){x}, 1, (float *[]){p});
    kt_ref_softmax(xd, want, nr, nc);
    snprintf(what, sizeof what, "softmax [%lld,%lld]", (long long) rows, (long long) cols);
    kt_expect_close(what, p, want, n, 1e-6);

    memset(p, 0, n * sizeof *p);
    kt_run_op(e, SL_OP_SOFTMAX_XENT, NULL, (sl_shape[]){xs, ls}, (float *[]){x, (float *) labels},
              2, (float *[]){&loss, p});
    double want_loss = kt_ref_xent(xd, labels, nr, nc);
    snprintf(what, sizeof what, "softmax_xent loss [%lld,%lld]", (long long) rows,
             (long long) cols);
    kt_expect_close(what, &loss, &want_loss, 1, 1e-5);
    snprintf(what, sizeof what, "softmax_xent probs [%lld,%lld]", (long long) rows,
             (long long) cols);
    kt_expect_close(what, p, want, n, 1e-6);

    kt_run_op(e, SL_OP_SOFTMAX_XENT_GRAD, NULL, (sl_shape[]){xs, ls},
              (float *[]){p, (float *) labels}, 2, (float *[]){dx});
    kt_widen(p, pd, n);
    kt_ref_xent_grad(pd, labels, want, nr, nc);
    snprintf(what, sizeof what, "softmax_xent_grad [%lld,%lld]", (long long) rows,
             (long long) cols);
    kt_expect_close(what, dx, want, n, 1e-6);
    sl_free(x), sl_free(p), sl_free(dx), sl_free(xd), sl_free(want), sl_free(pd), sl_free(labels);
}

static void check_argmax(kt_env *e, int64_t rows, int64_t cols, uint64_t seed)
{
    size_t n = (size_t) (rows * cols), nr = (size_t) rows, nc = (size_t) cols;
    float *x = kt_fvec(n);
    int32_t *got = sl_calloc(nr, sizeof *got), *want = sl_calloc(nr, sizeof *want);
    assert_true(got && want);
    kt_rand(x, n, seed, -1, 1);
    /* ties: row 0 constant, row 1 its max twice (the first wins), the last
     * row's max in its last column */
    for (size_t j = 0; j < nc; j++)
        x[j] = 0.25f;
    if (nr > 2 && nc > 3) {
        x[nc + 1] = 5.0f;
        x[nc + nc - 1] = 5.0f;
        x[n - 1] = 9.0f;
    }
    kt_ref_argmax(x, want, nr, nc);
    kt_run_op(e, SL_OP_ARGMAX, NULL, (sl_shape[]){KT_F32(2, rows, cols)}, (float *[]){x}, 1,
              (float *[]){(float *) got});
    char what[64];
    snprintf(what, sizeof what, "argmax [%lld,%lld]", (long long) rows, (long long) cols);
    kt_expect_equal_i32(what, got, want, nr);
    sl_free(x), sl_free(got), sl_free(want);
}

static void test_rows(void **state)
{
    kt_env *e = *state;
    check_softmax(e, 37, 10, 60);     /* a warp per row */
    check_softmax(e, 13, 1500, 61);   /* a block per row */
    check_softmax(e, 3, 1, 62);       /* one column */
    check_softmax(e, 40000, 7, 63);   /* more rows than one grid pass of warps */
    check_softmax(e, 5000, 1025, 64); /* more rows than one grid pass of blocks */
    check_argmax(e, 37, 10, 70);
    check_argmax(e, 9, 3000, 71);
    check_argmax(e, 4, 1, 72);
    check_argmax(e, 40000, 33, 73);
}

/* ---- Adam's step count on the device ---- */

/* add_scalar advances t and adam reads it, both on the device with no host
 * copy in between, as a training graph runs them. */
static void test_adam_device_step(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    enum { N = 300 };
    float p[N], g[N], m[N] = {0}, v[N] = {0}, t = 0.0f;
    double pw[N];
    kt_rand(p, N, 80, -1, 1);
    kt_rand(g, N, 81, -1, 1);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (size_t i = 0; i < N; i++) { /* step 1 from m = v = 0 */
        double mi = (1 - b1) * g[i], vi = (1 - b2) * (double) g[i] * g[i];
        pw[i] = p[i] - lr * (mi / (1 - b1)) / (sqrt(vi / (1 - b2)) + eps);
    }

    size_t mark = e->used, bytes = sizeof p;
    sl_shape s = KT_F32(1, N), ts = KT_F32(1, 1);
    float *host[4] = {p, g, m, v};
    sl_op_call adam = {.op = SL_OP_ADAM_UPDATE,
                       .n_in = 5,
                       .attrs = {.f = {(float) lr, (float) b1, (float) b2, (float) eps}}};
    for (int i = 0; i < 4; i++) {
        adam.in[i] = (sl_tensor_ref){kt_dev_alloc(e, bytes), s};
        assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, adam.in[i].data, host[i], bytes));
    }
    adam.in[4] = (sl_tensor_ref){kt_dev_alloc(e, sizeof t), ts};
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, adam.in[4].data, &t, sizeof t));
    sl_op_call step = {.op = SL_OP_ADD_SCALAR, .n_in = 1, .attrs = {.f = {1.0f}}};
    step.in[0] = adam.in[4];
    assert_sl_ok(ops->launch(e->dev, e->stream, &step));
    assert_sl_ok(ops->launch(e->dev, e->stream, &adam));
    assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, p, adam.in[0].data, bytes));
    assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, &t, adam.in[4].data, sizeof t));
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    e->used = mark;
    assert_true(t == 1.0f);
    kt_expect_close("adam after add_scalar on the device", p, pw, N, 1e-5);
}

int kt_run_cuda_paths_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_adam_device_step),
    };
    return _cmocka_run_group_tests("cuda kernel paths", tests, sizeof tests / sizeof tests[0],
                                   group_setup, kt_group_close);
}
