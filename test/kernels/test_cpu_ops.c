/* What only the cpu kernels have: the per-stream oneDNN primitive cache
 * (hits, thread-count variants, eviction), threads per op, concurrent lanes,
 * and run-time checks beyond the registry's. */
#include "kt_nn.h"

#include "cpu/cpu.h"
#include "ops_axes.h"
#include "sl_alloc.h"
#include "sl_testsupport.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int setup(void **state)
{
    return kt_group_open(state, "cpu");
}

/* One conv2d: x [8,16,16,16] * w [32,16,3,3], pad 1: 19 Mflop, above the
 * work that kernels/cpu/dnnl.c gives more than one thread. */
static const int64_t cx[4] = {8, 16, 16, 16}, cw[4] = {32, 16, 3, 3};
static const sl_op_attrs cattrs = {.i = {1, 1, 1, 1, 1, 1}};

static void conv_once(kt_env *e, const float *x, const float *w, float *y)
{
    sl_shape sh[2] = {KT_F32(4, cx[0], cx[1], cx[2], cx[3]), KT_F32(4, cw[0], cw[1], cw[2], cw[3])};
    kt_run_op(e, SL_OP_CONV2D, &cattrs, sh, (float *[]){(float *) x, (float *) w}, 2,
              (float *[]){y});
}

/* conv_once's operands, random in [-1, 1] (x from seed, w from seed + 1),
 * and its result computed in double precision. */
typedef struct conv_case {
    int64_t yd[4];
    size_t nx, nw, ny;
    float *x, *w;
    double *want;
} conv_case;

static void conv_case_make(conv_case *c, uint64_t seed)
{
    kt_conv_out(cx, cw, &cattrs, c->yd);
    c->nx = kt_elems(cx, 4), c->nw = kt_elems(cw, 4), c->ny = kt_elems(c->yd, 4);
    c->x = kt_fvec(c->nx), c->w = kt_fvec(c->nw), c->want = kt_dvec(c->ny);
    double *xd = kt_dvec(c->nx), *wd = kt_dvec(c->nw);
    kt_rand(c->x, c->nx, seed, -1, 1);
    kt_rand(c->w, c->nw, seed + 1, -1, 1);
    kt_widen(c->x, xd, c->nx);
    kt_widen(c->w, wd, c->nw);
    kt_ref_conv2d(xd, wd, c->want, cx, cw, &cattrs);
    sl_free(xd), sl_free(wd);
}

static void conv_case_free(conv_case *c)
{
    sl_free(c->x), sl_free(c->w), sl_free(c->want);
}

static void test_cache_and_threads(void **state)
{
    kt_env *e = *state;
    conv_case cc;
    conv_case_make(&cc, 700);
    const float *x = cc.x, *w = cc.w;
    const double *want = cc.want;
    size_t ny = cc.ny;
    float *y1 = kt_fvec(ny), *y2 = kt_fvec(ny);

    unsigned before = sl_cpu_cached_prims(e->stream);
    sl_cpu_force_threads(e->dev, 1);
    conv_once(e, x, w, y1);
    assert_int_equal(sl_cpu_cached_prims(e->stream), before + 1);
    conv_once(e, x, w, y1); /* a hit: nothing new */
    assert_int_equal(sl_cpu_cached_prims(e->stream), before + 1);
    kt_expect_close("conv2d, 1 thread", y1, want, ny, 1e-5);
    /* Little work stays on one thread whatever the share: no new variant.
     * (avgpool: max pooling runs in C, without oneDNN.) */
    sl_cpu_force_threads(e->dev, 2);
    float pool_x[4 * 4] = {0}, pool_y[3 * 3];
    sl_op_attrs pool = {.i = {2, 2, 1, 1}};
    kt_run_op(e, SL_OP_AVGPOOL, &pool, &KT_F32(4, 1, 1, 4, 4), (float *[]){pool_x}, 1,
              (float *[]){pool_y});
    sl_cpu_force_threads(e->dev, 1);
    kt_run_op(e, SL_OP_AVGPOOL, &pool, &KT_F32(4, 1, 1, 4, 4), (float *[]){pool_x}, 1,
              (float *[]){pool_y});
    assert_int_equal(sl_cpu_cached_prims(e->stream), before + 2);
    before++;

    /* Another thread count is another primitive, with the same results. */
    sl_cpu_force_threads(e->dev, 2);
    conv_once(e, x, w, y2);
    assert_int_equal(sl_cpu_cached_prims(e->stream), before + 2);
    kt_expect_close("conv2d, 2 threads", y2, want, ny, 1e-5);
    sl_cpu_force_threads(e->dev, 0);
    sl_free(y1), sl_free(y2);
    conv_case_free(&cc);
}

/* A stream with a workspace (salusd: the lane's framework block) takes
 * oneDNN's scratch from it; one too small fails the op with SL_EEXHAUSTED
 * and leaves its output alone; NULL goes back to the stream's own. */
static void test_lane_workspace(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    conv_case cc;
    conv_case_make(&cc, 710);
    const float *x = cc.x, *w = cc.w;
    const double *want = cc.want;
    const int64_t *yd = cc.yd;
    size_t nx = cc.nx, nw = cc.nw, ny = cc.ny;
    float *y = kt_fvec(ny);
    const size_t ws_bytes = 16u << 20;
    unsigned char *ws = sl_aligned_alloc(256, ws_bytes);
    assert_non_null(ws);
    memset(ws, 0xa5, ws_bytes);

    assert_sl_err(ops->stream_set_workspace(e->dev, e->stream, NULL, 4096), SL_EINVAL);
    assert_sl_err(ops->stream_set_workspace(e->dev, e->stream, ws + 64, 4096), SL_EINVAL);
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, ws, ws_bytes));
    conv_once(e, x, w, y);
    kt_expect_close("conv2d, scratch in the workspace", y, want, ny, 1e-5);
    size_t touched = 0;
    for (size_t i = 0; i < ws_bytes; i++)
        touched += ws[i] != 0xa5;
    assert_true(touched > 0); /* blocked layouts and scratchpad live there */

    /* too small: the op fails, its output keeps what it held */
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, ws, 256));
    size_t used = e->used;
    sl_shape shapes[3] = {KT_F32(4, cx[0], cx[1], cx[2], cx[3]),
                          KT_F32(4, cw[0], cw[1], cw[2], cw[3]),
                          KT_F32(4, yd[0], yd[1], yd[2], yd[3])};
    float *dx = kt_dev_alloc(e, nx * 4), *dw = kt_dev_alloc(e, nw * 4);
    float *dy = kt_dev_alloc(e, ny * 4);
    memcpy(dx, x, nx * 4);
    memcpy(dw, w, nw * 4);
    for (size_t i = 0; i < ny; i++)
        dy[i] = 1234.5f;
    sl_op_call call = {.op = SL_OP_CONV2D, .n_in = 2, .n_out = 1, .attrs = cattrs};
    call.in[0] = (sl_tensor_ref){dx, shapes[0]};
    call.in[1] = (sl_tensor_ref){dw, shapes[1]};
    call.out[0] = (sl_tensor_ref){dy, shapes[2]};
    assert_sl_ok(ops->launch(e->dev, e->stream, &call));
    assert_sl_err(ops->synchronize(e->dev, e->stream), SL_EEXHAUSTED);
    for (size_t i = 0; i < ny; i++)
        assert_true(dy[i] == 1234.5f);
    e->used = used;

    /* back to the stream's own scratch */
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, NULL, 0));
    memset(y, 0, ny * sizeof *y);
    conv_once(e, x, w, y);
    kt_expect_close("conv2d, own scratch again", y, want, ny, 1e-5);
    sl_free(ws), sl_free(y);
    conv_case_free(&cc);
}

/* More distinct shapes than the cache holds: the least recently used are
 * evicted, the count stays bounded, results stay right. */
static void test_cache_eviction(void **state)
{
    kt_env *e = *state;
    enum { SHAPES = 80 };
    float x[2 * 2 * 12 * 12], y[2 * 2 * 12 * 12];
    double xd[2 * 2 * 12 * 12], want[2 * 2 * 12 * 12];
    sl_op_attrs a = {.i = {2, 2}};
    unsigned peak = 0;
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < SHAPES; i++) {
            int64_t xdims[4] = {1 + i % 2, 2, 2 + (i / 2) % 10, 2 + i / 20}, yd[4];
            size_t nx = kt_elems(xdims, 4);
            kt_pool_out(xdims, &a, yd);
            kt_rand(x, nx, 710 + (uint64_t) i, -1, 1);
            kt_widen(x, xd, nx);
            kt_run_op(e, SL_OP_AVGPOOL, &a, &KT_F32(4, xdims[0], xdims[1], xdims[2], xdims[3]),
                      (float *[]){x}, 1, (float *[]){y});
            kt_ref_pool(false, xd, want, xdims, &a);
            kt_expect_close("avgpool under eviction", y, want, kt_elems(yd, 4), 1e-6);
            unsigned n = sl_cpu_cached_prims(e->stream);
            peak = n > peak ? n : peak;
        }
    assert_int_equal(peak, 64); /* CACHE_ENTRIES in kernels/cpu/dnnl.c */
}

struct lane {
    kt_env env;
    const float *x, *w;
    float *y;
    int rounds;
};

static void *lane_main(void *arg)
{
    struct lane *l = arg;
    for (int i = 0; i < l->rounds; i++)
        conv_once(&l->env, l->x, l->w, l->y);
    return NULL;
}

/* Two lanes (streams) convolving at once: each has its own cache and its
 * share of the cores; both get the right answer. */
static void test_concurrent_lanes(void **state)
{
    (void) state;
    conv_case cc;
    conv_case_make(&cc, 720);
    struct lane lanes[2];
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        memset(&lanes[i], 0, sizeof lanes[i]);
        assert_sl_ok(kt_env_open(&lanes[i].env, "cpu"));
        lanes[i].x = cc.x;
        lanes[i].w = cc.w;
        lanes[i].y = kt_fvec(cc.ny);
        lanes[i].rounds = 4;
    }
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, lane_main, &lanes[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
        kt_expect_close("conv2d on a concurrent lane", lanes[i].y, cc.want, cc.ny, 1e-5);
        assert_true(sl_cpu_cached_prims(lanes[i].env.stream) >= 1);
        sl_free(lanes[i].y);
        kt_env_close(&lanes[i].env);
    }
    conv_case_free(&cc);
}

/* Adam before its first step (t = 0) would divide by a zero bias
 * correction: the cpu kernel fails the op instead. */
static void test_adam_step_zero(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    enum { N = 5 };
    size_t mark = e->used;
    sl_op_call c = {.op = SL_OP_ADAM_UPDATE,
                    .n_in = 5,
                    .n_out = 0,
                    .attrs = {.f = {0.01f, 0.9f, 0.999f, 1e-8f}}};
    float zeros[N] = {0};
    for (unsigned i = 0; i < 4; i++) {
        c.in[i] = (sl_tensor_ref){kt_dev_alloc(e, sizeof zeros), KT_F32(1, N)};
        assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, c.in[i].data, zeros, sizeof zeros));
    }
    c.in[4] = (sl_tensor_ref){kt_dev_alloc(e, sizeof(float)), KT_F32(1, 1)};
    assert_sl_ok(ops->memcpy_h2d(e->dev, e->stream, c.in[4].data, zeros, sizeof(float)));
    assert_sl_ok(ops->launch(e->dev, e->stream, &c));
    kt_cb_record st = {0};
    assert_sl_ok(ops->host_callback(e->dev, e->stream, kt_record_cb, &st));
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    assert_int_equal(atomic_load(&st.calls), 1);
    assert_sl_err(atomic_load(&st.status), SL_EINVAL);
    e->used = mark;
}

/* Dimensions the libraries cannot index are refused at launch, before
 * anything runs (the registry alone would accept them). */
static void test_refused_dims(void **state)
{
    kt_env *e = *state;
    sl_op_call c = {.op = SL_OP_CONV2D, .n_in = 2, .n_out = 1};
    c.in[0] = (sl_tensor_ref){e->arena, KT_F32(4, 1, 1, 1, 1ll << 31)};
    c.in[1] = (sl_tensor_ref){e->arena, KT_F32(4, 1, 1, 1, 1)};
    c.out[0] = c.in[0];
    assert_sl_err(e->dev->ops->launch(e->dev, e->stream, &c), SL_EUNSUPPORTED);
    sl_op_call am = {.op = SL_OP_ARGMAX, .n_in = 1, .n_out = 1};
    am.in[0] = (sl_tensor_ref){e->arena, KT_F32(2, 1, 1ll << 31)};
    am.out[0] = (sl_tensor_ref){e->arena, KT_SHAPE(SL_I32, 1, 1)};
    assert_sl_err(e->dev->ops->launch(e->dev, e->stream, &am), SL_EUNSUPPORTED);
    /* cblas takes int dimensions: matmul_acc's K = 2^31 */
    sl_op_call acc = {.op = SL_OP_MATMUL_ACC, .n_in = 3, .n_out = 0, .attrs = {.f = {1, 1}}};
    acc.in[0] = (sl_tensor_ref){e->arena, KT_F32(2, 1, 1ll << 31)};
    acc.in[1] = (sl_tensor_ref){e->arena, KT_F32(2, 1ll << 31, 1)};
    acc.in[2] = (sl_tensor_ref){e->arena, KT_F32(2, 1, 1)};
    assert_sl_err(e->dev->ops->launch(e->dev, e->stream, &acc), SL_EUNSUPPORTED);
    assert_sl_ok(e->dev->ops->synchronize(e->dev, e->stream));
}

/* maxpool_grad's fast path for windows that tile the plane (stride =
 * kernel, no pads), with rows and columns that no window covers, ties and
 * overlap-free windows of 2x2 and 3x2; 10 windows a row take the vector
 * loop and its scalar tail. */
static void test_maxpool_grad_tiled(void **state)
{
    static const int64_t xd[][4] = {{2, 3, 7, 5}, {1, 2, 9, 8}, {2, 2, 6, 21}};
    static const sl_op_attrs attrs[] = {
        {.i = {2, 2, 2, 2}}, {.i = {3, 2, 3, 2}}, {.i = {2, 2, 2, 2}}};
    for (int k = 0; k < 3; k++) {
        int64_t yd[4];
        kt_pool_out(xd[k], &attrs[k], yd);
        size_t nx = kt_elems(xd[k], 4), ny = kt_elems(yd, 4);
        float *x = kt_fvec(nx), *y = kt_fvec(ny), *dy = kt_fvec(ny), *dx = kt_fvec(nx);
        double *xdd = kt_dvec(nx), *dyd = kt_dvec(ny), *want = kt_dvec(nx);
        kt_rand(x, nx, 730 + (uint64_t) k, -2, 2);
        for (size_t i = 0; i < nx; i++)
            x[i] = floorf(x[i]); /* four values: ties everywhere */
        kt_rand(dy, ny, 740 + (uint64_t) k, -1, 1);
        for (size_t i = 0; i < nx; i++)
            dx[i] = NAN; /* every element must be written */
        kt_widen(x, xdd, nx);
        kt_widen(dy, dyd, ny);
        sl_shape xs = KT_F32(4, xd[k][0], xd[k][1], xd[k][2], xd[k][3]);
        sl_shape ys = KT_F32(4, yd[0], yd[1], yd[2], yd[3]);
        kt_run_op(*state, SL_OP_MAXPOOL, &attrs[k], &xs, (float *[]){x}, 1, (float *[]){y});
        kt_run_op(*state, SL_OP_MAXPOOL_GRAD, &attrs[k], (sl_shape[]){ys, xs, ys},
                  (float *[]){dy, x, y}, 3, (float *[]){dx});
        kt_ref_pool_grad(true, dyd, xdd, want, xd[k], &attrs[k]);
        kt_expect_close("maxpool_grad, tiled windows", dx, want, nx, 0);
        sl_free(x), sl_free(y), sl_free(dy), sl_free(dx), sl_free(xdd), sl_free(dyd), sl_free(want);
    }
}

/* maxpool of x [xd], random in [-2, 2] from seed, against the reference:
 * exactly (a max is one of its inputs). */
static void maxpool_vs_reference(kt_env *e, const int64_t xd[4], const sl_op_attrs *a,
                                 uint64_t seed, const char *what)
{
    int64_t yd[4];
    kt_pool_out(xd, a, yd);
    size_t nx = kt_elems(xd, 4), ny = kt_elems(yd, 4);
    float *x = kt_fvec(nx), *y = kt_fvec(ny);
    double *xdd = kt_dvec(nx), *want = kt_dvec(ny);
    kt_rand(x, nx, seed, -2, 2);
    kt_widen(x, xdd, nx);
    sl_shape xs = KT_F32(4, xd[0], xd[1], xd[2], xd[3]);
    kt_run_op(e, SL_OP_MAXPOOL, a, &xs, (float *[]){x}, 1, (float *[]){y});
    kt_ref_pool(true, xdd, want, xd, a);
    kt_expect_close(what, y, want, ny, 0);
    sl_free(x), sl_free(y), sl_free(xdd), sl_free(want);
}

/* maxpool's C path for windows that tile the plane, against the reference
 * (2x2 and 3x2 windows, uncovered rows and columns, rows long enough for
 * the vector loop), and NaN: a window
 * holding one has NaN as its max wherever the NaN sits. */
static void test_maxpool_tiled(void **state)
{
    static const int64_t xd[][4] = {{2, 3, 7, 5}, {1, 2, 9, 8}, {2, 2, 6, 21}};
    static const sl_op_attrs attrs[] = {
        {.i = {2, 2, 2, 2}}, {.i = {3, 2, 3, 2}}, {.i = {2, 2, 2, 2}}};
    for (int k = 0; k < 3; k++)
        maxpool_vs_reference(*state, xd[k], &attrs[k], 750 + (uint64_t) k,
                             "maxpool, tiled windows");
    sl_op_attrs a = {.i = {2, 2, 2, 2}};
    for (int at = 0; at < 4; at++) {
        float x[4] = {1, 2, 3, 4}, y = 0;
        x[at] = NAN;
        kt_run_op(*state, SL_OP_MAXPOOL, &a, &KT_F32(4, 1, 1, 2, 2), (float *[]){x}, 1,
                  (float *[]){&y});
        assert_true(isnan(y));
    }
}

/* maxpool's C path for overlapping and padded windows (ResNet's 3x3/2 pad
 * 1, 3x3/1 pad 1, 2x2/1, an asymmetric 3x2/2 with pads on one side only),
 * against the reference, and NaN: a window holding one has NaN as its max
 * wherever the NaN sits, padding included. */
static void test_maxpool_rows(void **state)
{
    static const int64_t xd[][4] = {{1, 3, 12, 12}, {2, 2, 7, 9}, {1, 2, 6, 21}, {2, 1, 8, 7}};
    static const sl_op_attrs attrs[] = {{.i = {3, 3, 2, 2, 1, 1, 1, 1}},
                                        {.i = {3, 3, 1, 1, 1, 1, 1, 1}},
                                        {.i = {2, 2, 1, 1}},
                                        {.i = {3, 2, 2, 2, 1, 0, 0, 1}}};
    for (int k = 0; k < 4; k++)
        maxpool_vs_reference(*state, xd[k], &attrs[k], 760 + (uint64_t) k,
                             "maxpool, overlapping and padded windows");
    sl_op_attrs a = {.i = {3, 3, 2, 2, 1, 1, 1, 1}};
    for (int at = 0; at < 9; at++) {
        float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[4] = {0};
        x[at] = NAN;
        kt_run_op(*state, SL_OP_MAXPOOL, &a, &KT_F32(4, 1, 1, 3, 3), (float *[]){x}, 1,
                  (float *[]){y});
        /* output (i, j) covers rows 2i-1..2i+1 and columns 2j-1..2j+1 */
        for (int o = 0; o < 4; o++) {
            int r = at / 3, col = at % 3, i = o / 2, j = o % 2;
            bool inside = r >= 2 * i - 1 && r <= 2 * i + 1 && col >= 2 * j - 1 && col <= 2 * j + 1;
            assert_int_equal(isnan(y[o]) != 0, inside);
        }
    }
}

/* want [m, n] = op(a) op(b) in double precision, op transposing when ta /
 * tb: a is read as [m, k] (ta: [k, m]) with rows lda apart, b as [k, n]
 * (tb: [n, k]) with rows ldb apart. */
static void ref_gemm(bool ta, bool tb, int m, int n, int k, const float *a, int lda, const float *b,
                     int ldb, double *want)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0;
            for (int p = 0; p < k; p++)
                sum += (double) a[ta ? p * lda + i : i * lda + p] *
                       (double) b[tb ? j * ldb + p : p * ldb + j];
            want[i * n + j] = sum;
        }
}

/* Big GEMMs are cut into row bands across the threads: matmul (every
 * transpose) and matmul_acc on 2 threads, an odd row count for uneven
 * bands, against a double reference (float sums of 300 products: 1e-4). */
static void test_matmul_threads(void **state)
{
    kt_env *e = *state;
    enum { M = 301, N = 130, K = 300 }; /* 23 Mflop: above the one-thread limit */
    float *a = kt_fvec(M * K), *b = kt_fvec(K * N), *c = kt_fvec(M * N), *acc = kt_fvec(M * N);
    double *want = kt_dvec(M * N);
    kt_rand(a, M * K, 760, -1, 1);
    kt_rand(b, K * N, 761, -1, 1);
    sl_cpu_force_threads(e->dev, 2);
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        /* the same buffers read as [K,M] / [N,K] when transposed */
        ref_gemm(ta, tb, M, N, K, a, ta ? M : K, b, tb ? K : N, want);
        sl_op_attrs at = {.i = {ta, tb}};
        sl_shape sh[3] = {ta ? KT_F32(2, K, M) : KT_F32(2, M, K),
                          tb ? KT_F32(2, N, K) : KT_F32(2, K, N), KT_F32(2, M, N)};
        kt_run_op(e, SL_OP_MATMUL, &at, sh, (float *[]){a, b}, 2, (float *[]){c});
        kt_expect_close("matmul, 2 threads", c, want, M * N, 1e-4);
        /* acc = 0.5 acc + 2 a b, from acc = c */
        sl_op_attrs aa = {.i = {ta, tb}, .f = {2.0f, 0.5f}};
        memcpy(acc, c, sizeof(float) * M * N);
        for (int i = 0; i < M * N; i++)
            want[i] = 0.5 * (double) c[i] + 2.0 * want[i];
        kt_run_op(e, SL_OP_MATMUL_ACC, &aa, sh, (float *[]){a, b, acc}, 3, NULL);
        kt_expect_close("matmul_acc, 2 threads", acc, want, M * N, 1e-4);
    }
    sl_cpu_force_threads(e->dev, 0);
    sl_free(a), sl_free(b), sl_free(c), sl_free(acc), sl_free(want);
}

/* The optimizer updates split across the team from SL_CPU_TEAM_MIN_ELEMS
 * elements (an odd count, so the last part is short): each element gets the
 * same arithmetic as on one thread, so the results are bitwise equal. Adam
 * with step 0 is still refused when split. */
static void test_optimizer_threads(void **state)
{
    kt_env *e = *state;
    enum { N = (int) SL_CPU_TEAM_MIN_ELEMS * 2 + 13 };
    struct {
        unsigned op, n_in;
        sl_op_attrs at;
    } cases[] = {
        {SL_OP_SGD_UPDATE, 2, {.f = {0.05f}}},
        {SL_OP_MOMENTUM_UPDATE, 3, {.f = {0.05f, 0.9f, 1e-4f}}},
        {SL_OP_ADAM_UPDATE, 5, {.f = {0.01f, 0.9f, 0.999f, 1e-8f}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *in[2][5];
        sl_shape sh[5];
        for (int run = 0; run < 2; run++)
            for (unsigned i = 0; i < cases[c].n_in; i++) {
                bool step = cases[c].op == SL_OP_ADAM_UPDATE && i == 4;
                in[run][i] = kt_fvec(step ? 1 : N);
                sh[i] = step ? KT_F32(1, 1) : KT_F32(1, N);
                if (step)
                    in[run][i][0] = 3.0f;
                else
                    kt_rand(in[run][i], N, 800 + i, i == 3 ? 0 : -1, 1); /* Adam's v >= 0 */
            }
        for (int run = 0; run < 2; run++) {
            sl_cpu_force_threads(e->dev, run ? 2 : 1);
            kt_run_op(e, cases[c].op, &cases[c].at, sh, in[run], cases[c].n_in, NULL);
        }
        sl_cpu_force_threads(e->dev, 0);
        for (unsigned i = 0; i < cases[c].n_in; i++) {
            if (!(cases[c].op == SL_OP_ADAM_UPDATE && i == 4))
                assert_memory_equal(in[0][i], in[1][i], (size_t) N * sizeof(float));
            sl_free(in[0][i]);
            sl_free(in[1][i]);
        }
    }
}

/* maxpool (3x3/2 padded: by rows; 2x2/2: tiled) and maxpool_grad split
 * their planes across the team from SL_CPU_TEAM_MIN_ELEMS elements: the
 * planes share nothing, so two threads give one thread's results bitwise. */
static void test_maxpool_threads(void **state)
{
    kt_env *e = *state;
    enum { B = 3, C = 7, H = 56, W = 56, NX = B * C * H * W };
    const sl_op_attrs windows[] = {{.i = {3, 3, 2, 2, 1, 1, 1, 1}}, {.i = {2, 2, 2, 2}}};
    const int64_t out_hw[] = {28, 28};
    float *x = kt_fvec(NX), *dx[2], *y[2];
    kt_rand(x, NX, 900, -1, 1);
    for (size_t k = 0; k < 2; k++) {
        enum { NY = B * C * 28 * 28 };
        float *dy = kt_fvec(NY);
        kt_rand(dy, NY, 901, -1, 1);
        sl_shape xs = KT_F32(4, B, C, H, W), ys = KT_F32(4, B, C, out_hw[k], out_hw[k]);
        for (int run = 0; run < 2; run++) {
            y[run] = kt_fvec(NY);
            dx[run] = kt_fvec(NX);
            sl_cpu_force_threads(e->dev, run ? 2 : 1);
            kt_run_op(e, SL_OP_MAXPOOL, &windows[k], &xs, (float *[]){x}, 1, (float *[]){y[run]});
            kt_run_op(e, SL_OP_MAXPOOL_GRAD, &windows[k], (sl_shape[]){ys, xs, ys},
                      (float *[]){dy, x, y[run]}, 3, (float *[]){dx[run]});
        }
        sl_cpu_force_threads(e->dev, 0);
        assert_memory_equal(y[0], y[1], (size_t) NY * sizeof(float));
        assert_memory_equal(dx[0], dx[1], (size_t) NX * sizeof(float));
        for (int run = 0; run < 2; run++) {
            sl_free(y[run]);
            sl_free(dx[run]);
        }
        sl_free(dy);
    }
    sl_free(x);
}

/* Batch norm's channels split across the team from SL_CPU_TEAM_MIN_ELEMS
 * elements (40 channels, 72,000 elements): each channel's arithmetic is
 * the same as on one thread, so every output, the running statistics
 * included, is bitwise equal. */
static void test_batchnorm_threads(void **state)
{
    kt_env *e = *state;
    enum { B = 8, C = 40, HW = 15, NX = B * C * HW * HW };
    const sl_op_attrs a = {.f = {1e-5f, 0.9f}}, ai = {.f = {1e-5f}}, ag = {0};
    sl_shape xs = KT_F32(4, B, C, HW, HW), cs = KT_F32(1, C);
    float *x = kt_fvec(NX), *dy = kt_fvec(NX), *scale = kt_fvec(C), *bias = kt_fvec(C);
    kt_rand(x, NX, 970, -2, 3);
    kt_rand(dy, NX, 971, -1, 1);
    kt_rand(scale, C, 972, 0.5, 1.5);
    kt_rand(bias, C, 973, -1, 1);
    float *y[2], *mean[2], *istd[2], *rm[2], *rv[2], *dx[2], *ds[2], *db[2], *yi[2];
    for (int run = 0; run < 2; run++) {
        y[run] = kt_fvec(NX), dx[run] = kt_fvec(NX), yi[run] = kt_fvec(NX);
        mean[run] = kt_fvec(C), istd[run] = kt_fvec(C), rm[run] = kt_fvec(C), rv[run] = kt_fvec(C);
        ds[run] = kt_fvec(C), db[run] = kt_fvec(C);
        for (int i = 0; i < C; i++)
            rv[run][i] = 1.0f;
        sl_cpu_force_threads(e->dev, run ? 2 : 1);
        kt_run_op(e, SL_OP_BATCHNORM, &a, (sl_shape[]){xs, cs, cs, cs, cs},
                  (float *[]){x, scale, bias, rm[run], rv[run]}, 5,
                  (float *[]){y[run], mean[run], istd[run]});
        kt_run_op(e, SL_OP_BATCHNORM_GRAD, &ag, (sl_shape[]){xs, xs, cs, cs, cs},
                  (float *[]){dy, x, scale, mean[run], istd[run]}, 5,
                  (float *[]){dx[run], ds[run], db[run]});
        kt_run_op(e, SL_OP_BATCHNORM_INFER, &ai, (sl_shape[]){xs, cs, cs, cs, cs},
                  (float *[]){x, scale, bias, rm[run], rv[run]}, 5, (float *[]){yi[run]});
    }
    sl_cpu_force_threads(e->dev, 0);
    assert_memory_equal(y[0], y[1], sizeof(float) * NX);
    assert_memory_equal(dx[0], dx[1], sizeof(float) * NX);
    assert_memory_equal(yi[0], yi[1], sizeof(float) * NX);
    float *per_channel[][2] = {{mean[0], mean[1]}, {istd[0], istd[1]}, {rm[0], rm[1]},
                               {rv[0], rv[1]},     {ds[0], ds[1]},     {db[0], db[1]}};
    for (size_t k = 0; k < sizeof per_channel / sizeof per_channel[0]; k++)
        assert_memory_equal(per_channel[k][0], per_channel[k][1], sizeof(float) * C);
    for (int run = 0; run < 2; run++) {
        sl_free(y[run]), sl_free(dx[run]), sl_free(yi[run]), sl_free(mean[run]);
        sl_free(istd[run]), sl_free(rm[run]), sl_free(rv[run]), sl_free(ds[run]), sl_free(db[run]);
    }
    sl_free(x), sl_free(dy), sl_free(scale), sl_free(bias);
}

/* Parts of one team job, counted per part: each must run exactly once. */
struct team_job {
    atomic_int runs[40];
    atomic_int outside; /* parts that ran off the allowed cores */
    atomic_int helped;  /* parts that ran on a helper, not the caller */
    cpu_set_t allowed;
    pthread_t caller;
    int busy_us;     /* each part's length */
    int first_calls; /* test_team_cores: jobs before the move */
};

static void count_part(void *arg, int part, int parts)
{
    struct team_job *j = arg;
    if (part >= 0 && part < parts && part < 40)
        atomic_fetch_add(&j->runs[part], 1);
    for (uint64_t end = sl_ts_now_ns() + (uint64_t) j->busy_us * 1000u; sl_ts_now_ns() < end;)
        ;
    int cpu = sched_getcpu();
    if (cpu >= 0 && !CPU_ISSET(cpu, &j->allowed))
        atomic_fetch_add(&j->outside, 1);
    if (!pthread_equal(pthread_self(), j->caller))
        atomic_fetch_add(&j->helped, 1);
}

/* One thread's jobs: every part count from 1 to 40, many times, with and
 * without gaps long enough for the helpers to go to sleep. Returns NULL,
 * or what went wrong (cmocka's asserts belong to the main thread). */
static void *team_rounds(void *arg)
{
    struct team_job *j = arg;
    j->caller = pthread_self();
    if (sched_getaffinity(0, sizeof j->allowed, &j->allowed) != 0)
        return "sched_getaffinity";
    for (int round = 0; round < 300; round++) {
        int parts = 1 + round % 40;
        for (int p = 0; p < 40; p++)
            atomic_store(&j->runs[p], 0);
        sl_cpu_parallel(parts, count_part, j);
        for (int p = 0; p < 40; p++)
            if (atomic_load(&j->runs[p]) != (p < parts ? 1 : 0))
                return "a part did not run exactly once";
        if (round % 50 == 49)
            usleep(2000); /* past the helpers' spin: they sleep, then wake */
    }
    return NULL;
}

/* Thread teams (team.c): three threads with a team each run jobs at once;
 * each team's parts run exactly once per job, on the cores its thread may
 * use. The threads then end, which stops and joins their helpers. */
static void test_team_parts(void **state)
{
    (void) state;
    pthread_t t[3];
    struct team_job *j = sl_calloc(3, sizeof *j);
    assert_non_null(j);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, team_rounds, &j[i]), 0);
    for (int i = 0; i < 3; i++) {
        void *err;
        assert_int_equal(pthread_join(t[i], &err), 0);
        if (err)
            fail_msg("%s", (const char *) err);
        assert_int_equal(atomic_load(&j[i].outside), 0);
    }
    sl_free(j);
}

/* A team follows its thread to a smaller core set (sl_cpu_team_set_cores,
 * which sl_cpu_apply_cores calls): its helpers then run only there. */
static void *team_moved(void *arg)
{
    struct team_job *j = arg;
    j->caller = pthread_self();
    j->busy_us = 200; /* long enough that the helpers take parts */
    CPU_ZERO(&j->allowed);
    for (int c = 0; c < CPU_SETSIZE; c++)
        CPU_SET(c, &j->allowed);
    /* starts the helpers on every core; on a loaded machine the caller may
     * take every part itself before a helper wakes, so it tries again */
    for (j->first_calls = 1;; j->first_calls++) {
        sl_cpu_parallel(4, count_part, j);
        if (atomic_load(&j->helped) > 0 || j->first_calls == 2000)
            break;
    }
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0)
        return "sched_getaffinity";
    CPU_ZERO(&j->allowed);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &j->allowed);
            break;
        }
    if (sl_cpu_apply_cores(&j->allowed, 1) != 1)
        return "sl_cpu_apply_cores";
    for (int round = 0; round < 50; round++)
        sl_cpu_parallel(4, count_part, j);
    return NULL;
}

static void test_team_cores(void **state)
{
    (void) state;
    pthread_t t;
    struct team_job *j = sl_calloc(1, sizeof *j);
    assert_non_null(j);
    void *err;
    assert_int_equal(pthread_create(&t, NULL, team_moved, j), 0);
    assert_int_equal(pthread_join(t, &err), 0);
    if (err)
        fail_msg("%s", (const char *) err);
    int outside = atomic_load(&j->outside), runs = atomic_load(&j->runs[3]);
    int helped = atomic_load(&j->helped);
    if (outside != 0 || runs != j->first_calls + 50 || helped == 0)
        fail_msg("%d parts ran outside the core set; part 3 ran %d times of %d; helpers ran %d "
                 "parts",
                 outside, runs, j->first_calls + 50, helped);
    sl_free(j);
}

/* conv2d_grad_filter over few channels (im2col + GEMM) on 2 threads: each
 * takes a band of samples (an odd count) into its own partial sum. */
static void test_conv_grad_filter_threads(void **state)
{
    kt_env *e = *state;
    static const int64_t xd[4] = {57, 3, 20, 18}, wd[4] = {16, 3, 3, 3};
    static const sl_op_attrs a = {.i = {1, 1, 1, 1, 1, 1}}; /* 3x3 pad 1: 18 Mflop */
    int64_t yd[4];
    kt_conv_out(xd, wd, &a, yd);
    size_t nx = kt_elems(xd, 4), nw = kt_elems(wd, 4), ny = kt_elems(yd, 4);
    float *x = kt_fvec(nx), *w = kt_fvec(nw), *dy = kt_fvec(ny), *dw = kt_fvec(nw);
    double *xdd = kt_dvec(nx), *dyd = kt_dvec(ny), *want = kt_dvec(nw);
    kt_rand(x, nx, 770, -1, 1);
    kt_rand(dy, ny, 771, -1, 1);
    kt_widen(x, xdd, nx);
    kt_widen(dy, dyd, ny);
    kt_ref_conv2d_grad_filter(dyd, xdd, want, xd, wd, &a);
    sl_cpu_force_threads(e->dev, 2);
    kt_run_op(e, SL_OP_CONV2D_GRAD_FILTER, &a,
              (sl_shape[]){KT_F32(4, yd[0], yd[1], yd[2], yd[3]),
                           KT_F32(4, xd[0], xd[1], xd[2], xd[3]),
                           KT_F32(4, wd[0], wd[1], wd[2], wd[3])},
              (float *[]){dy, x, w}, 3, (float *[]){dw});
    sl_cpu_force_threads(e->dev, 0);
    kt_expect_close("conv2d_grad_filter, 2 threads", dw, want, nw, 1e-4);
    sl_free(x), sl_free(w), sl_free(dy), sl_free(dw), sl_free(xdd), sl_free(dyd), sl_free(want);
}

/* Both GEMM libraries (gemm.c) against a double reference: every
 * transpose, leading dimensions wider than the rows, alpha and beta, K = 0
 * (C = beta C), and beta 0 over a C full of NaN, which must not be read. */
static void test_sgemm_libraries(void **state)
{
    (void) state;
    enum { PAD = 3 };
    unsigned long fallbacks = sl_cpu_gemm_fallbacks();
    static const int dims[][3] = {{1, 1, 1}, {7, 5, 3}, {128, 10, 128}, {33, 65, 129}, {4, 6, 0}};
    for (int lib = SL_CPU_GEMM_ONEDNN; lib <= SL_CPU_GEMM_OPENBLAS; lib++)
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
            for (int t = 0; t < 8; t++) {
                int m = dims[d][0], n = dims[d][1], k = dims[d][2];
                bool ta = t & 1, tb = t & 2, nan_c = t & 4;
                int lda = (ta ? m : k) + PAD, ldb = (tb ? k : n) + PAD, ldc = n + PAD;
                int arows = ta ? k : m, brows = tb ? n : k;
                float *a = kt_fvec(arows * lda + 1), *b = kt_fvec(brows * ldb + 1);
                float *c = kt_fvec(m * ldc);
                double *want = kt_dvec(m * n);
                kt_rand(a, arows * lda + 1, 770 + t, -1, 1);
                kt_rand(b, brows * ldb + 1, 780 + t, -1, 1);
                kt_rand(c, m * ldc, 790 + t, -1, 1);
                float alpha = nan_c ? 1.0f : 1.5f, beta = nan_c ? 0.0f : -0.5f;
                ref_gemm(ta, tb, m, n, k, a, lda, b, ldb, want);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        want[i * n + j] =
                            alpha * want[i * n + j] + (nan_c ? 0 : beta * (double) c[i * ldc + j]);
                        if (nan_c)
                            c[i * ldc + j] = NAN;
                    }
                sl_cpu_sgemm_with((sl_cpu_gemm_lib) lib, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                                  beta, c, ldc);
                for (int i = 0; i < m; i++)
                    kt_expect_close(sl_cpu_gemm_name((sl_cpu_gemm_lib) lib), c + i * ldc,
                                    want + i * n, n, 1e-4);
                sl_free(a), sl_free(b), sl_free(c), sl_free(want);
            }
    assert_int_equal(sl_cpu_gemm_fallbacks(), fallbacks); /* oneDNN ran every one */
}

/* salusd never launches reshape (a view); a launch that arrives anyway
 * copies. */
static void test_reshape_launch(void **state)
{
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0};
    sl_op_attrs a = {.i = {3, 2}};
    kt_run_op(*state, SL_OP_RESHAPE, &a, &KT_F32(2, 2, 3), (float *[]){x}, 1, (float *[]){y});
    assert_memory_equal(x, y, sizeof x);
}

/* The vectorised sigmoid and tanh (vmath.c) against double precision,
 * relative to the exact value, over the whole float range: tiny inputs
 * (tanh's cancellation), the polynomial's edges, the tails, where sigmoid
 * leaves the normal floats, infinities and NaN. Large enough to be split
 * across the team. */
static void test_vector_sigmoid_tanh(void **state)
{
    enum { N = 200000 };
    float *x = kt_fvec(N), *y = kt_fvec(N), *t = kt_fvec(N);
    kt_rand(x, N, 41, -90, 90);
    static const float edge[] = {0.0f,     -0.0f,    1e-30f,    -1e-20f, 1e-7f,   3e-4f,
                                 -0.6249f, 0.625f,   0.6251f,   9.0f,    15.9f,   44.0f,
                                 -87.0f,   -87.33f,  -87.34f,   -88.0f,  -103.0f, 87.0f,
                                 89.0f,    INFINITY, -INFINITY, NAN};
    size_t n_edge = sizeof edge / sizeof edge[0];
    memcpy(x, edge, sizeof edge);
    for (size_t i = n_edge; i < 20000; i++) /* small magnitudes, densely */
        x[i] = x[i] * 1e-3f;
    sl_shape s = KT_F32(1, N);
    kt_run_op(*state, SL_OP_SIGMOID, NULL, &s, (float *[]){x}, 1, (float *[]){y});
    kt_run_op(*state, SL_OP_TANH, NULL, &s, (float *[]){x}, 1, (float *[]){t});
    for (size_t i = 0; i < N; i++) {
        double a = x[i], ws = 1.0 / (1.0 + exp(-a)), wt = tanh(a);
        if (isnan(a)) {
            assert_true(isnan(y[i]) && isnan(t[i]));
            continue;
        }
        if (ws >= 1.1754944e-38) /* a normal float: within 2.5e-7 of it */
            assert_true(fabs(y[i] - ws) <= 2.5e-7 * ws);
        else /* flushed to zero */
            assert_true(y[i] >= 0.0f && y[i] <= 1.2e-38f);
        if (!(fabs(t[i] - wt) <= 3e-7 * fabs(wt)))
            fail_msg("tanh(%.9g) = %.9g, want %.9g", a, (double) t[i], wt);
    }
    sl_free(x), sl_free(y), sl_free(t);
}

/* erf and GELU (ew_unary) on vmath.c's polynomials: within 1.5e-7 of the
 * exact erf, and GELU within what that and two roundings allow, over edge
 * values and a wide range; 200000 elements, so the op is also split
 * across the team. */
static void test_vector_erf_gelu(void **state)
{
    enum { N = 200000 };
    float *x = kt_fvec(N), *y = kt_fvec(N), *g = kt_fvec(N);
    kt_rand(x, N, 43, -12, 12);
    static const float edge[] = {0.0f,    -0.0f, 1e-30f, -1e-20f, 1e-7f, 0.9999f, 1.0f,     -1.0f,
                                 1.0001f, 3.99f, 4.0f,   -4.01f,  10.0f, -30.0f,  INFINITY, NAN};
    size_t n_edge = sizeof edge / sizeof edge[0];
    memcpy(x, edge, sizeof edge);
    for (size_t i = n_edge; i < 40000; i++) /* |x| < 1.2, densely */
        x[i] = x[i] * 0.1f;
    sl_shape s[2] = {KT_F32(2, 400, N / 400), KT_F32(2, 400, N / 400)};
    sl_op_attrs ea = {.i = {SL_EW_ERF}}, ga = {.i = {SL_EW_GELU}};
    sl_cpu_force_threads(((kt_env *) *state)->dev, 2);
    kt_run_op(*state, SL_OP_EW_UNARY, &ea, s, (float *[]){x}, 1, (float *[]){y});
    kt_run_op(*state, SL_OP_EW_UNARY, &ga, s, (float *[]){x}, 1, (float *[]){g});
    sl_cpu_force_threads(((kt_env *) *state)->dev, 0);
    for (size_t i = 0; i < N; i++) {
        double a = x[i], we = erf(a), wg = 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
        if (isnan(a)) {
            assert_true(isnan(y[i]) && isnan(g[i]));
            continue;
        }
        if (!(fabs(y[i] - we) <= 1.5e-7))
            fail_msg("erf(%.9g) = %.9g, want %.9g", a, (double) y[i], we);
        if (isinf(a))
            continue;
        if (!(fabs(g[i] - wg) <= 1e-7 * fabs(a) + 2.5e-7 * fabs(wg)))
            fail_msg("gelu(%.9g) = %.9g, want %.9g", a, (double) g[i], wg);
    }
    assert_true(g[14] == INFINITY); /* gelu(inf) */
    sl_free(x), sl_free(y), sl_free(g);
}

/* Runs op once on one thread and once on two and expects the same bits:
 * the ops along axes split their output into bands that each compute as
 * on one thread. The outputs (n_out floats or i32s) go to y1 and y2. */
static void same_on_two_threads(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *sh,
                                float *const *in, unsigned n_in, float *y1, float *y2, size_t n_out,
                                const char *what)
{
    sl_cpu_force_threads(e->dev, 1);
    kt_run_op(e, op, a, sh, in, n_in, (float *[]){y1});
    sl_cpu_force_threads(e->dev, 2);
    kt_run_op(e, op, a, sh, in, n_in, (float *[]){y2});
    sl_cpu_force_threads(e->dev, 0);
    if (memcmp(y1, y2, n_out * sizeof *y1) != 0)
        fail_msg("%s: two threads differ from one", what);
}

/* The ops along axes (axes.c) above the size where they split across the
 * team: broadcast binary math (pow by 2 included), where, compare,
 * transpose, reductions over inner and outer axes, and batch_matmul give
 * the same bits on one thread and two, and agree with references here. */
static void test_axes_threads(void **state)
{
    kt_env *e = *state;
    enum { A = 37, B = 65, C = 41, N = A * B * C };
    float *x = kt_fvec(N), *z = kt_fvec(N), *y1 = kt_fvec(N), *y2 = kt_fvec(N);
    kt_rand(x, N, 51, -3, 3);
    kt_rand(z, B, 52, 0.5f, 2);
    float two = 2.0f;
    /* x [A,B,C] op z [B,1] */
    for (int kind = SL_EW_ADD; kind <= SL_EW_DIV; kind++) {
        sl_op_attrs at = {.i = {kind}};
        sl_shape sh[3] = {KT_F32(3, A, B, C), KT_F32(2, B, 1), KT_F32(3, A, B, C)};
        same_on_two_threads(e, SL_OP_EW_BINARY, &at, sh, (float *[]){x, z}, 2, y1, y2, N,
                            "ew_binary");
        for (int i = 0; i < N; i++) {
            float w = z[i / C % B];
            float want = kind == SL_EW_ADD   ? x[i] + w
                         : kind == SL_EW_SUB ? x[i] - w
                         : kind == SL_EW_MUL ? x[i] * w
                                             : x[i] / w;
            if (y1[i] != want)
                fail_msg("ew_binary kind %d element %d", kind, i);
        }
    }
    /* x ^ 2 (a broadcast scalar): the correctly rounded square */
    sl_op_attrs pw = {.i = {SL_EW_POW}};
    sl_shape psh[3] = {KT_F32(3, A, B, C), KT_F32(0), KT_F32(3, A, B, C)};
    same_on_two_threads(e, SL_OP_EW_BINARY, &pw, psh, (float *[]){x, &two}, 2, y1, y2, N, "pow");
    for (int i = 0; i < N; i++)
        assert_true(y1[i] == (float) ((double) x[i] * x[i]));

    /* where(x > z, x, z) with z broadcast [B,1] */
    int32_t *mask = (int32_t *) kt_fvec(N);
    sl_op_attrs gt = {.i = {SL_CMP_GT}};
    sl_shape csh[3] = {KT_F32(3, A, B, C), KT_F32(2, B, 1), KT_SHAPE(SL_I32, 3, A, B, C)};
    same_on_two_threads(e, SL_OP_COMPARE, &gt, csh, (float *[]){x, z}, 2, (float *) mask, y2, N,
                        "compare");
    sl_shape wsh[4] = {KT_SHAPE(SL_I32, 3, A, B, C), KT_F32(3, A, B, C), KT_F32(2, B, 1),
                       KT_F32(3, A, B, C)};
    same_on_two_threads(e, SL_OP_WHERE, NULL, wsh, (float *[]){(float *) mask, x, z}, 3, y1, y2, N,
                        "where");
    for (int i = 0; i < N; i++)
        assert_true(y1[i] == fmaxf(x[i], z[i / C % B]));

    /* transpose [A,B,C] by (2,0,1) */
    sl_op_attrs tp = {.i = {2, 0, 1}};
    sl_shape tsh[2] = {KT_F32(3, A, B, C), KT_F32(3, C, A, B)};
    same_on_two_threads(e, SL_OP_TRANSPOSE, &tp, tsh, (float *[]){x}, 1, y1, y2, N, "transpose");
    for (int k = 0; k < C; k++)
        for (int i = 0; i < A; i++)
            for (int j = 0; j < B; j++)
                assert_true(y1[(k * A + i) * B + j] == x[(i * B + j) * C + k]);

    /* the last two axes swapped (tiles, axes.c): [A,B,C] to [A,C,B] */
    tp = (sl_op_attrs){.i = {0, 2, 1}};
    tsh[1] = KT_F32(3, A, C, B);
    same_on_two_threads(e, SL_OP_TRANSPOSE, &tp, tsh, (float *[]){x}, 1, y1, y2, N, "transpose");
    for (int i = 0; i < A; i++)
        for (int k = 0; k < C; k++)
            for (int j = 0; j < B; j++)
                assert_true(y1[(i * C + k) * B + j] == x[(i * B + j) * C + k]);

    /* mean over the innermost axis (a contiguous run per output), sum
     * over axes 0 and 2, max over axis 0 */
    static const int64_t masks[3][2] = {
        {SL_REDUCE_MEAN, 4}, {SL_REDUCE_SUM, 5}, {SL_REDUCE_MAX, 1}};
    for (int r = 0; r < 3; r++) {
        sl_op_attrs ra = {.i = {masks[r][0], masks[r][1]}};
        int64_t od[3] = {masks[r][1] & 1 ? 1 : A, B, masks[r][1] & 4 ? 1 : C};
        size_t n_out = (size_t) (od[0] * od[1] * od[2]);
        sl_shape rsh[2] = {KT_F32(3, A, B, C), KT_F32(3, od[0], od[1], od[2])};
        same_on_two_threads(e, SL_OP_REDUCE_AXES, &ra, rsh, (float *[]){x}, 1, y1, y2, n_out,
                            "reduce_axes");
        for (int64_t i = 0; i < od[0]; i++)
            for (int64_t j = 0; j < od[1]; j++)
                for (int64_t k = 0; k < od[2]; k++) {
                    double acc = r == 2 ? -INFINITY : 0;
                    int64_t cnt = 0;
                    for (int64_t ii = 0; ii < A; ii++)
                        for (int64_t kk = 0; kk < C; kk++) {
                            if ((od[0] != 1 && ii != i) || (od[2] != 1 && kk != k))
                                continue;
                            double v = x[(ii * B + j) * C + kk];
                            acc = r == 2 ? fmax(acc, v) : acc + v;
                            cnt++;
                        }
                    if (r == 0)
                        acc /= (double) cnt;
                    float got = y1[(i * od[1] + j) * od[2] + k];
                    if (!(fabs(got - acc) <= 1e-6 * fabs(acc) + 1e-6))
                        fail_msg("reduce %d at %lld: got %.9g, want %.9g", r,
                                 (long long) ((i * od[1] + j) * od[2] + k), (double) got, acc);
                }
    }

    /* batch_matmul [8,64,96] x [8,96,80]: 7.9 Mflop, split by batch */
    enum { BB = 8, M = 64, K = 96, NN = 80 };
    float *w = kt_fvec(BB * K * NN); /* x holds the left operand, not both */
    kt_rand(w, BB * K * NN, 53, -3, 3);
    sl_shape bsh[3] = {KT_F32(3, BB, M, K), KT_F32(3, BB, K, NN), KT_F32(3, BB, M, NN)};
    same_on_two_threads(e, SL_OP_BATCH_MATMUL, NULL, bsh, (float *[]){x, w}, 2, y1, y2, BB * M * NN,
                        "batch_matmul");
    for (int b = 0; b < BB; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < NN; j++) {
                double acc = 0;
                for (int k = 0; k < K; k++)
                    acc += (double) x[(b * M + i) * K + k] * w[(b * K + k) * NN + j];
                assert_true(fabs(y1[(b * M + i) * NN + j] - acc) <= 1e-4 * (1 + fabs(acc)));
            }
    sl_free(x), sl_free(z), sl_free(y1), sl_free(y2), sl_free(mask), sl_free(w);
}

/* softmax on the vector exp, split by rows across the team: the same bits
 * on one thread and two, within a few ulp of a double reference (plus the
 * rounding of x - max in float, which scales with |x - max|), and
 * exact zeros for -inf scores (a masked attention's) and scores 100 below
 * the row's max. */
static void test_softmax_threads(void **state)
{
    kt_env *e = *state;
    enum { R = 301, C = 130, N = R * C };
    float *x = kt_fvec(N), *y1 = kt_fvec(N), *y2 = kt_fvec(N);
    kt_rand(x, N, 61, -20, 20);
    for (int r = 0; r < R; r++) {
        x[r * C + r % C] = -INFINITY;
        x[r * C + (r + 7) % C] = 25.0f;
        x[r * C + (r + 9) % C] = -80.0f;
    }
    sl_shape sh[2] = {KT_F32(2, R, C), KT_F32(2, R, C)};
    same_on_two_threads(e, SL_OP_SOFTMAX, NULL, sh, (float *[]){x}, 1, y1, y2, N, "softmax");
    for (int r = 0; r < R; r++) {
        double sum = 0;
        for (int j = 0; j < C; j++)
            sum += exp((double) x[r * C + j] - 25.0);
        for (int j = 0; j < C; j++) {
            double want = exp((double) x[r * C + j] - 25.0) / sum;
            float got = y1[r * C + j];
            if (x[r * C + j] < -70.0f)
                assert_true(got == 0.0f);
            else if (!(fabs(got - want) <= (5e-7 + 1.2e-7 * (25.0 - x[r * C + j])) * want))
                fail_msg("softmax [%d,%d]: %.9g, want %.9g", r, j, (double) got, want);
        }
    }
    sl_free(x), sl_free(y1), sl_free(y2);
}

/* A convolution over a 1x1 plane with a 3x3 kernel is a matmul on its
 * centre taps (conv_trim.c). Weights that carry a version are copied out
 * once per version and kept: the same (address, version) reuses the copy
 * (so a changed buffer under an old version still gives the old result,
 * which is the promise in_version makes), a new version copies again, and
 * more weights than the stream keeps still compute right. */
static void trim_call(sl_op_call *c, unsigned op, float *a, float *b, float *out,
                      const int64_t ad[4], const int64_t bd[4], const int64_t od[4],
                      uint64_t version)
{
    memset(c, 0, sizeof *c);
    c->op = (uint16_t) op;
    c->n_in = 2;
    c->n_out = 1;
    c->attrs = (sl_op_attrs){.i = {1, 1, 1, 1, 1, 1}};
    c->in[0] = (sl_tensor_ref){a, KT_F32(4, ad[0], ad[1], ad[2], ad[3])};
    c->in[1] = (sl_tensor_ref){b, KT_F32(4, bd[0], bd[1], bd[2], bd[3])};
    c->out[0] = (sl_tensor_ref){out, KT_F32(4, od[0], od[1], od[2], od[3])};
    c->in_version[1] = version;
}

static void test_trimmed_kernels_kept(void **state)
{
    (void) state;
    enum { N = 4, C = 16, O = 24, WEIGHTS = 40 };
    const int64_t xd[4] = {N, C, 1, 1}, wd[4] = {O, C, 3, 3}, yd[4] = {N, O, 1, 1};
    const sl_op_attrs a = {.i = {1, 1, 1, 1, 1, 1}};
    sl_cpu_exec ex = {.threads = 1};
    float *x = kt_fvec(N * C), *y = kt_fvec(N * O), *dy = kt_fvec(N * O), *dx = kt_fvec(N * C);
    float *w[WEIGHTS];
    double *xdv = kt_dvec(N * C), *wdv = kt_dvec(O * C * 9), *dydv = kt_dvec(N * O);
    double *want = kt_dvec(N * O), *want_dx = kt_dvec(N * C);
    kt_rand(x, N * C, 900, -1, 1);
    kt_rand(dy, N * O, 901, -1, 1);
    kt_widen(x, xdv, N * C);
    kt_widen(dy, dydv, N * O);
    sl_op_call c;
    for (int i = 0; i < WEIGHTS; i++) {
        w[i] = kt_fvec(O * C * 9);
        kt_rand(w[i], O * C * 9, 910 + (uint64_t) i, -1, 1);
    }
    /* more weights than the stream keeps, twice round: each result right */
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < WEIGHTS; i++) {
            trim_call(&c, SL_OP_CONV2D, x, w[i], y, xd, wd, yd, 7);
            assert_sl_ok(sl_cpu_run_op(&ex, &c));
            kt_widen(w[i], wdv, O * C * 9);
            kt_ref_conv2d(xdv, wdv, want, xd, wd, &a);
            kt_expect_close("conv2d, trimmed, many weights", y, want, N * O, 1e-5);
        }
    /* w[0] changes under its old version: the kept copy is used */
    float *old = kt_fvec(N * O);
    trim_call(&c, SL_OP_CONV2D, x, w[0], old, xd, wd, yd, 8);
    assert_sl_ok(sl_cpu_run_op(&ex, &c));
    kt_rand(w[0], O * C * 9, 950, -1, 1);
    trim_call(&c, SL_OP_CONV2D, x, w[0], y, xd, wd, yd, 8);
    assert_sl_ok(sl_cpu_run_op(&ex, &c));
    assert_memory_equal(y, old, sizeof(float) * N * O);
    /* a new version copies the new weights, and the backward data pass
     * reads the same kept copy */
    kt_widen(w[0], wdv, O * C * 9);
    kt_ref_conv2d(xdv, wdv, want, xd, wd, &a);
    trim_call(&c, SL_OP_CONV2D, x, w[0], y, xd, wd, yd, 9);
    assert_sl_ok(sl_cpu_run_op(&ex, &c));
    kt_expect_close("conv2d, trimmed, new version", y, want, N * O, 1e-5);
    trim_call(&c, SL_OP_CONV2D_GRAD_INPUT, dy, w[0], dx, yd, wd, xd, 9);
    c.n_in = 3;
    c.in[2] = (sl_tensor_ref){x, KT_F32(4, N, C, 1, 1)};
    assert_sl_ok(sl_cpu_run_op(&ex, &c));
    kt_ref_conv2d_grad_input(dydv, wdv, want_dx, xd, wd, &a);
    kt_expect_close("conv2d_grad_input, trimmed, kept", dx, want_dx, N * C, 1e-5);
    sl_cpu_trims_free(ex.trims);
    sl_free(ex.trim_buf);
    for (int i = 0; i < WEIGHTS; i++)
        sl_free(w[i]);
    sl_free(x), sl_free(y), sl_free(dy), sl_free(dx), sl_free(old);
    sl_free(xdv), sl_free(wdv), sl_free(dydv), sl_free(want), sl_free(want_dx);
}

SL_TEST_GROUP(kt_run_cpu_ops_tests, "cpu kernels", setup, kt_group_close,
              cmocka_unit_test(test_vector_sigmoid_tanh), cmocka_unit_test(test_vector_erf_gelu),
              cmocka_unit_test(test_axes_threads), cmocka_unit_test(test_softmax_threads),
              cmocka_unit_test(test_cache_and_threads), cmocka_unit_test(test_cache_eviction),
              cmocka_unit_test(test_concurrent_lanes), cmocka_unit_test(test_adam_step_zero),
              cmocka_unit_test(test_refused_dims), cmocka_unit_test(test_maxpool_grad_tiled),
              cmocka_unit_test(test_reshape_launch), cmocka_unit_test(test_lane_workspace),
              cmocka_unit_test(test_maxpool_tiled), cmocka_unit_test(test_maxpool_rows),
              cmocka_unit_test(test_matmul_threads),
              cmocka_unit_test(test_conv_grad_filter_threads),
              cmocka_unit_test(test_optimizer_threads), cmocka_unit_test(test_maxpool_threads),
              cmocka_unit_test(test_team_parts), cmocka_unit_test(test_team_cores),
              cmocka_unit_test(test_sgemm_libraries), cmocka_unit_test(test_trimmed_kernels_kept),
              cmocka_unit_test(test_batchnorm_threads))
