/* The ops along axes of any rank (ops_axes.h) on one backend, against
 * references computed here in double: broadcasting element-wise math,
 * transpose, slice, concat, gather, reduce_axes, log_softmax,
 * batch_matmul and compare. test_kernels runs them on the cpu, test_cuda
 * on the GPU.
 * (Their gradients belong to the autodiff rules and are tested there.) */
#include "kt.h"

#include "half.h"
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
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i]))
            continue;
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i])))
            fail_msg("%s: element %zu: got %.9g, want %.9g", what, i, (double) got[i], want[i]);
    }
}

/* Flat index of out-index idx in a tensor of shape s broadcast to rank nd. */
static size_t bcast_index(const sl_shape *s, unsigned nd, const int64_t *idx)
{
    size_t off = 0;
    for (unsigned d = 0; d < s->ndim; d++) {
        int64_t i = s->dims[d] == 1 ? 0 : idx[d + nd - s->ndim];
        off = off * (size_t) s->dims[d] + (size_t) i;
    }
    return off;
}

static double ref_binary(int kind, double a, double b)
{
    switch (kind) {
    case SL_EW_ADD:
        return a + b;
    case SL_EW_SUB:
        return a - b;
    case SL_EW_MUL:
        return a * b;
    case SL_EW_DIV:
        return a / b;
    case SL_EW_POW:
        return pow(a, b);
    case SL_EW_MAX:
        return a > b ? a : b;
    case SL_EW_MIN:
        return a < b ? a : b;
    default:
        return a >= 0 ? a : a * b;
    }
}

static void test_ew_binary(void **state)
{
    (void) state;
    const sl_shape pairs[][2] = {
        {KT_F32(3, 2, 3, 4), KT_F32(3, 2, 3, 4)}, /* same shape */
        {KT_F32(3, 2, 3, 4), KT_F32(2, 3, 1)},    /* inner broadcast */
        {KT_F32(1, 4), KT_F32(3, 2, 3, 4)},       /* left operand broadcast */
        {KT_F32(3, 2, 1, 4), KT_F32(2, 3, 1)},    /* both broadcast */
        {KT_F32(0), KT_F32(2, 5, 7)},             /* scalar */
    };
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (int kind = 0; kind < SL_EW_BINARY_COUNT; kind++) {
            sl_shape sh[3] = {pairs[p][0], pairs[p][1]};
            char err[128];
            sl_op_attrs a = {.i = {kind}};
            assert_int_equal(sl_op_infer(SL_OP_EW_BINARY, &a, sh, 2, &sh[2], err, sizeof err),
                             SL_OK);
            size_t na = sl_shape_elems(&sh[0]), nb = sl_shape_elems(&sh[1]),
                   ny = sl_shape_elems(&sh[2]);
            float *x = malloc(na * 4), *b = malloc(nb * 4), *y = malloc(ny * 4);
            double *want = malloc(ny * sizeof *want);
            /* pow needs a positive base */
            kt_rand(x, na, 11 + p, kind == SL_EW_POW ? 0.1f : -2.0f, 2.0f);
            kt_rand(b, nb, 17 + p, kind == SL_EW_DIV ? 0.5f : -2.0f, 2.0f);
            int64_t idx[SL_MAX_DIMS] = {0};
            for (size_t i = 0; i < ny; i++) {
                want[i] = ref_binary(kind, x[bcast_index(&sh[0], sh[2].ndim, idx)],
                                     b[bcast_index(&sh[1], sh[2].ndim, idx)]);
                for (int d = sh[2].ndim - 1; d >= 0; d--) {
                    if (++idx[d] < sh[2].dims[d])
                        break;
                    idx[d] = 0;
                }
            }
            kt_run_op(&env, SL_OP_EW_BINARY, &a, sh, (float *const[]){x, b}, 2,
                      (float *const[]){y});
            char what[64];
            snprintf(what, sizeof what, "ew_binary kind %d pair %zu", kind, p);
            near(y, want, ny, 2e-6, 1e-7, what);
            free(x), free(b), free(y), free(want);
        }
}

static double ref_unary(int kind, double x, double p, double q)
{
    switch (kind) {
    case SL_EW_SQRT:
        return sqrt(x);
    case SL_EW_ERF:
        return erf(x);
    case SL_EW_EXP:
        return exp(x);
    case SL_EW_LOG:
        return log(x);
    case SL_EW_NEG:
        return -x;
    case SL_EW_ABS:
        return fabs(x);
    case SL_EW_RECIPROCAL:
        return 1 / x;
    case SL_EW_CLIP:
        return x < p ? p : x > q ? q : x;
    case SL_EW_LEAKY_RELU:
        return x >= 0 ? x : p * x;
    case SL_EW_FLOOR:
        return floor(x);
    case SL_EW_CEIL:
        return ceil(x);
    case SL_EW_HARD_SIGMOID:
        return fmax(0, fmin(1, p * x + q));
    case SL_EW_ELU:
        return x >= 0 ? x : p * expm1(x);
    case SL_EW_SELU:
        return q * (x > 0 ? x : p * expm1(x));
    case SL_EW_SOFTPLUS:
        return log1p(exp(x));
    case SL_EW_SOFTSIGN:
        return x / (1 + fabs(x));
    case SL_EW_SIN:
        return sin(x);
    case SL_EW_COS:
        return cos(x);
    case SL_EW_SIGN:
        return x > 0 ? 1 : x < 0 ? -1 : 0;
    case SL_EW_TAN:
        return tan(x);
    case SL_EW_SINH:
        return sinh(x);
    case SL_EW_COSH:
        return cosh(x);
    case SL_EW_ASIN:
        return asin(x);
    case SL_EW_ACOS:
        return acos(x);
    case SL_EW_ATAN:
        return atan(x);
    case SL_EW_ASINH:
        return asinh(x);
    case SL_EW_ACOSH:
        return acosh(x);
    case SL_EW_ATANH:
        return atanh(x);
    case SL_EW_ROUND:
        return nearbyint(x);
    case SL_EW_THRESHOLDED_RELU:
        return x > p ? x : 0;
    case SL_EW_HARD_SWISH:
        return x * fmax(0, fmin(1, x / 6 + 0.5));
    case SL_EW_CELU:
        return fmax(0, x) + fmin(0, p * expm1(x / p));
    case SL_EW_SHRINK:
        return x < -p ? x + q : x > p ? x - q : 0;
    case SL_EW_GELU:
        return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case SL_EW_GELU_TANH:
        return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    default: /* silu */
        return x / (1 + exp(-x));
    }
}

static void test_ew_unary(void **state)
{
    (void) state;
    const size_t n = 1000;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    double *want = malloc(n * sizeof *want);
    for (int kind = 0; kind < SL_EW_UNARY_COUNT; kind++) {
        bool positive = kind == SL_EW_SQRT || kind == SL_EW_LOG || kind == SL_EW_RECIPROCAL;
        float lo = positive ? 0.05f : -4.0f, hi = 4.0f;
        if (kind == SL_EW_ASIN || kind == SL_EW_ACOS || kind == SL_EW_ATANH)
            lo = -0.95f, hi = 0.95f;
        if (kind == SL_EW_ACOSH)
            lo = 1.05f;
        if (kind == SL_EW_TAN) /* away from the poles at +-pi/2 */
            lo = -1.2f, hi = 1.2f;
        kt_rand(x, n, 5 + (uint64_t) kind, lo, hi);
        float p = kind == SL_EW_CLIP ? -1.0f : 0.3f, q = kind == SL_EW_CLIP ? 1.5f : 0.6f;
        sl_op_attrs a = {.i = {kind}, .f = {p, q}};
        sl_shape sh[2] = {KT_F32(2, 10, 100), KT_F32(2, 10, 100)};
        for (size_t i = 0; i < n; i++)
            want[i] = ref_unary(kind, x[i], p, q);
        kt_run_op(&env, SL_OP_EW_UNARY, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
        char what[64];
        snprintf(what, sizeof what, "ew_unary kind %d", kind);
        near(y, want, n, 2e-6, 2e-7, what);
    }
    free(x), free(y), free(want);
}

static void test_layout(void **state)
{
    (void) state;
    /* transpose [2,3,4,5] by (2,0,3,1) */
    enum { N = 2 * 3 * 4 * 5 };
    float x[N], y[2 * N], b[N];
    for (int i = 0; i < N; i++)
        x[i] = (float) i;
    sl_op_attrs a = {.i = {2, 0, 3, 1}};
    sl_shape sh[3] = {KT_F32(4, 2, 3, 4, 5), KT_F32(4, 4, 2, 5, 3)};
    kt_run_op(&env, SL_OP_TRANSPOSE, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
    for (int i0 = 0; i0 < 4; i0++)
        for (int i1 = 0; i1 < 2; i1++)
            for (int i2 = 0; i2 < 5; i2++)
                for (int i3 = 0; i3 < 3; i3++)
                    assert_float_equal(y[((i0 * 2 + i1) * 5 + i2) * 3 + i3],
                                       x[((i1 * 3 + i3) * 4 + i0) * 5 + i2], 0);

    /* slice along axis 2 of [2,3,4,5]: 1, 3 (step 2); 3, 2, 1, 0 (step -1) */
    a = (sl_op_attrs){.i = {2, 1, 4, 2}};
    sh[1] = KT_F32(4, 2, 3, 2, 5);
    kt_run_op(&env, SL_OP_SLICE, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
    for (int o = 0; o < 6; o++)
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 5; j++)
                assert_float_equal(y[(o * 2 + k) * 5 + j], x[(o * 4 + 1 + 2 * k) * 5 + j], 0);
    a = (sl_op_attrs){.i = {2, 3, -1, -1}};
    sh[1] = KT_F32(4, 2, 3, 4, 5);
    kt_run_op(&env, SL_OP_SLICE, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
    for (int o = 0; o < 6; o++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 5; j++)
                assert_float_equal(y[(o * 4 + k) * 5 + j], x[(o * 4 + 3 - k) * 5 + j], 0);

    /* step 1 along the last axis (one split of a fused projection): elements 1..3 */
    a = (sl_op_attrs){.i = {3, 1, 4}};
    sh[1] = KT_F32(4, 2, 3, 4, 3);
    kt_run_op(&env, SL_OP_SLICE, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
    for (int o = 0; o < 24; o++)
        for (int k = 0; k < 3; k++)
            assert_float_equal(y[o * 3 + k], x[o * 5 + 1 + k], 0);

    /* concat [2,3,20] and [2,1,20] along axis 1 */
    for (int i = 0; i < 40; i++)
        b[i] = -(float) i;
    a = (sl_op_attrs){.i = {1}};
    sl_shape cs[3] = {KT_F32(3, 2, 3, 20), KT_F32(3, 2, 1, 20)};
    kt_run_op(&env, SL_OP_CONCAT, &a, cs, (float *const[]){x, b}, 2, (float *const[]){y});
    for (int o = 0; o < 2; o++)
        for (int j = 0; j < 80; j++)
            assert_float_equal(y[o * 80 + j], j < 60 ? x[o * 60 + j] : b[o * 20 + j - 60], 0);
}

static void test_gather(void **state)
{
    (void) state;
    /* x [3,4,5], indices [2,3] along axis 1, negative ones counting from the end */
    float x[60], y[3 * 6 * 5];
    for (int i = 0; i < 60; i++)
        x[i] = (float) i * 0.5f;
    int32_t idx[6] = {0, 3, -1, 2, -4, 1};
    sl_op_attrs a = {.i = {1}};
    sl_shape sh[3] = {KT_F32(3, 3, 4, 5), KT_SHAPE(SL_I32, 2, 2, 3)};
    kt_run_op(&env, SL_OP_GATHER, &a, sh, (float *const[]){x, (float *) idx}, 2,
              (float *const[]){y});
    for (int o = 0; o < 3; o++)
        for (int j = 0; j < 6; j++) {
            int k = idx[j] < 0 ? idx[j] + 4 : idx[j];
            for (int i = 0; i < 5; i++)
                assert_float_equal(y[(o * 6 + j) * 5 + i], x[(o * 4 + k) * 5 + i], 0);
        }
}

/* index_write: rows of dst [3,4,5] along axis 1 replaced in place at
 * run-time positions (a negative one from the end), the others kept. */
static void test_index_write(void **state)
{
    (void) state;
    float dst[60], src[3 * 2 * 5], want[60];
    for (int i = 0; i < 60; i++)
        want[i] = dst[i] = (float) i * 0.5f;
    for (int i = 0; i < 30; i++)
        src[i] = -1.0f - (float) i;
    int32_t idx[2] = {2, -4};
    for (int o = 0; o < 3; o++)
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 5; i++)
                want[(o * 4 + (idx[j] + 4) % 4) * 5 + i] = src[(o * 2 + j) * 5 + i];
    sl_op_attrs a = {.i = {1}};
    sl_shape sh[3] = {KT_F32(3, 3, 4, 5), KT_SHAPE(SL_I32, 1, 2), KT_F32(3, 3, 2, 5)};
    kt_run_op(&env, SL_OP_INDEX_WRITE, &a, sh, (float *const[]){dst, (float *) idx, src}, 3, NULL);
    for (int i = 0; i < 60; i++)
        assert_float_equal(dst[i], want[i], 0);
}

static void test_reduce_axes(void **state)
{
    (void) state;
    enum { N = 3 * 4 * 5 * 6 };
    float x[N], y[N];
    double want[N];
    kt_rand(x, N, 99, -3.0f, 3.0f);
    const int64_t dims[4] = {3, 4, 5, 6};
    for (int kind = 0; kind < SL_REDUCE_COUNT; kind++)
        for (int64_t mask = 1; mask < 16; mask++) {
            sl_op_attrs a = {.i = {kind, mask}};
            sl_shape sh[2] = {KT_F32(4, 3, 4, 5, 6)};
            char err[128];
            assert_int_equal(sl_op_infer(SL_OP_REDUCE_AXES, &a, sh, 1, &sh[1], err, sizeof err),
                             SL_OK);
            size_t ny = sl_shape_elems(&sh[1]);
            double acc[N];
            size_t cnt[N];
            for (size_t i = 0; i < ny; i++)
                acc[i] = kind == SL_REDUCE_MAX   ? -INFINITY
                         : kind == SL_REDUCE_MIN ? INFINITY
                                                 : 0,
                cnt[i] = 0;
            for (int i0 = 0; i0 < 3; i0++)
                for (int i1 = 0; i1 < 4; i1++)
                    for (int i2 = 0; i2 < 5; i2++)
                        for (int i3 = 0; i3 < 6; i3++) {
                            int64_t idx[4] = {i0, i1, i2, i3};
                            size_t o = 0;
                            for (int d = 0; d < 4; d++)
                                o = o * (size_t) sh[1].dims[d] +
                                    (size_t) ((mask >> d) & 1 ? 0 : idx[d]);
                            double v = x[((i0 * 4 + i1) * 5 + i2) * 6 + i3];
                            acc[o] = kind == SL_REDUCE_MAX   ? fmax(acc[o], v)
                                     : kind == SL_REDUCE_MIN ? fmin(acc[o], v)
                                                             : acc[o] + v;
                            cnt[o]++;
                        }
            for (size_t i = 0; i < ny; i++)
                want[i] = kind == SL_REDUCE_MEAN ? acc[i] / (double) cnt[i] : acc[i];
            (void) dims;
            kt_run_op(&env, SL_OP_REDUCE_AXES, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
            char what[64];
            snprintf(what, sizeof what, "reduce_axes kind %d mask %lld", kind, (long long) mask);
            near(y, want, ny, 1e-6, 1e-6, what);
        }
}

/* A sum and a mean over the leading axes of [3,2,700] (a bias's gradient),
 * wider than one block of accumulators. */
static void test_reduce_leading(void **state)
{
    (void) state;
    enum { R = 6, C = 700 };
    static float x[R * C], y[C];
    double want[C];
    kt_rand(x, R * C, 98, -3.0f, 3.0f);
    for (int kind = SL_REDUCE_SUM; kind <= SL_REDUCE_MEAN; kind++) {
        for (int j = 0; j < C; j++) {
            want[j] = 0;
            for (int r = 0; r < R; r++)
                want[j] += x[r * C + j];
            if (kind == SL_REDUCE_MEAN)
                want[j] /= R;
        }
        sl_op_attrs a = {.i = {kind, 3}};
        sl_shape sh[2] = {KT_F32(3, 3, 2, C), KT_F32(1, C)};
        kt_run_op(&env, SL_OP_REDUCE_AXES, &a, sh, (float *const[]){x}, 1, (float *const[]){y});
        near(y, want, C, 1e-6, 1e-6, kind == SL_REDUCE_SUM ? "leading sum" : "leading mean");
    }
}

static void test_log_softmax_batch_matmul(void **state)
{
    (void) state;
    enum { R = 7, C = 33 };
    float x[R * C], y[R * C];
    double want[R * C];
    kt_rand(x, R * C, 3, -20.0f, 20.0f);
    for (int r = 0; r < R; r++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < C; j++)
            mx = fmax(mx, x[r * C + j]);
        for (int j = 0; j < C; j++)
            s += exp(x[r * C + j] - mx);
        for (int j = 0; j < C; j++)
            want[r * C + j] = x[r * C + j] - mx - log(s);
    }
    sl_shape sh[3] = {KT_F32(2, R, C), KT_F32(2, R, C)};
    kt_run_op(&env, SL_OP_LOG_SOFTMAX, NULL, sh, (float *const[]){x}, 1, (float *const[]){y});
    near(y, want, R * C, 1e-6, 1e-6, "log_softmax");

    /* [3,5,7] x [1,7,4] (b broadcast over the batch) and [3,5,7] x [3,7,4] */
    enum { B = 3, M = 5, K = 7, N = 4 };
    float a[B * M * K], b[B * K * N], out[B * M * N];
    double ref[B * M * N];
    kt_rand(a, B * M * K, 8, -1.0f, 1.0f);
    kt_rand(b, B * K * N, 9, -1.0f, 1.0f);
    for (int bb = 1; bb <= B; bb += B - 1) {
        sl_shape ms[3] = {KT_F32(3, B, M, K), KT_F32(3, bb, K, N), KT_F32(3, B, M, N)};
        for (int i = 0; i < B; i++)
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double s = 0;
                    for (int k = 0; k < K; k++)
                        s += (double) a[(i * M + m) * K + k] *
                             b[((bb == 1 ? 0 : i) * K + k) * N + n];
                    ref[(i * M + m) * N + n] = s;
                }
        kt_run_op(&env, SL_OP_BATCH_MATMUL, NULL, ms, (float *const[]){a, b}, 2,
                  (float *const[]){out});
        near(out, ref, B * M * N, 1e-5, 1e-6, "batch_matmul");
    }
}

static int ref_compare(int kind, double a, double b)
{
    switch (kind) {
    case SL_CMP_EQ:
        return a == b;
    case SL_CMP_NE:
        return a != b;
    case SL_CMP_LT:
        return a < b;
    case SL_CMP_LE:
        return a <= b;
    case SL_CMP_GT:
        return a > b;
    case SL_CMP_GE:
        return a >= b;
    case SL_CMP_AND:
        return a != 0 && b != 0;
    case SL_CMP_OR:
        return a != 0 || b != 0;
    default:
        return (a != 0) != (b != 0);
    }
}

/* Every kind of compare, broadcasting both ways, on f32 (with NaN, zeros
 * and infinities), bf16 and i32 (values beyond f32's exact integers, which
 * must compare as integers), against the relation evaluated in double. */
static void test_compare(void **state)
{
    (void) state;
    enum { A = 2, B = 3, C = 4, N = A * B * C };
    float a[N], b[B];
    for (int i = 0; i < N; i++)
        a[i] = (float) (i % 5) - 2.0f; /* -2 .. 2: equal to b's values now and then */
    a[3] = NAN, a[7] = INFINITY, a[11] = -INFINITY, a[13] = -0.0f;
    b[0] = 0.0f, b[1] = 1.0f, b[2] = NAN;
    int32_t y[N];
    uint16_t ha[N], hb[B];
    for (int i = 0; i < N; i++)
        ha[i] = sl_bf16_from_f32(a[i]);
    for (int i = 0; i < B; i++)
        hb[i] = sl_bf16_from_f32(b[i]);
    /* ints that f32 would round to the same value (2^24 + 1 and 2^24) */
    int32_t ia[N], ib[B] = {0, 16777217, -5};
    for (int i = 0; i < N; i++)
        ia[i] = i % 3 == 1 ? 16777216 + (i % 2) : i % 3 == 0 ? 0 : -5 + i % 2;
    for (int kind = 0; kind < SL_CMP_COUNT; kind++)
        for (int swap = 0; swap < 2; swap++)
            for (int dt = 0; dt < 3; dt++) {
                unsigned dtype = dt == 0 ? SL_F32 : dt == 1 ? SL_BF16 : SL_I32;
                /* a [A,B,C] against b [B,1], or b [B,1] against a */
                sl_shape sa = KT_SHAPE(dtype, 3, A, B, C), sb = KT_SHAPE(dtype, 2, B, 1);
                sl_shape sh[3] = {swap ? sb : sa, swap ? sa : sb};
                void *pa = dt == 0 ? (void *) a : dt == 1 ? (void *) ha : (void *) ia;
                void *pb = dt == 0 ? (void *) b : dt == 1 ? (void *) hb : (void *) ib;
                sl_op_attrs at = {.i = {kind}};
                kt_run_op(&env, SL_OP_COMPARE, &at, sh,
                          (float *const[]){swap ? pb : pa, swap ? pa : pb}, 2,
                          (float *const[]){(float *) y});
                for (int i = 0; i < N; i++) {
                    int j = i / C % B;
                    double x = dt == 2 ? (double) ia[i] : dt == 1 ? sl_f32_from_bf16(ha[i]) : a[i];
                    double z = dt == 2 ? (double) ib[j] : dt == 1 ? sl_f32_from_bf16(hb[j]) : b[j];
                    int want = swap ? ref_compare(kind, z, x) : ref_compare(kind, x, z);
                    if (y[i] != want)
                        fail_msg("compare kind %d %s%s element %d: got %d, want %d", kind,
                                 sl_dtype_name(dtype), swap ? " swapped" : "", i, y[i], want);
                }
            }
}

KT_GROUP_ON(kt_run_axes_tests, "axes ops", spec, setup, teardown, cmocka_unit_test(test_ew_binary),
            cmocka_unit_test(test_ew_unary), cmocka_unit_test(test_layout),
            cmocka_unit_test(test_gather), cmocka_unit_test(test_index_write),
            cmocka_unit_test(test_reduce_axes), cmocka_unit_test(test_reduce_leading),
            cmocka_unit_test(test_log_softmax_batch_matmul), cmocka_unit_test(test_compare))
