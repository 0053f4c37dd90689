/* Reduced precision on the cuda backend.
 *
 * bf16 and f16: every op of the half set against the same op in f32 on the
 * same numbers (the inputs are rounded to the half type first, so both runs
 * see identical values). The half result must be the f32 result rounded:
 * within a few units of the half type's roundoff where cuBLAS and cuDNN may
 * sum in another order, the same value where the op only moves or compares
 * elements. Integer outputs (argmax, relu_mask's bits) must be identical.
 *
 * cast: bit for bit as kernels/ops/half.h rounds (what every backend
 * does), over every bf16 and f16 pattern and a million f32 ones.
 *
 * TF32: an f32 matmul or convolution whose call allows TF32 stays within
 * TF32's error of the double reference (and, on a device with TF32, differs
 * from the exact result: the tensor-core path was taken); one that does not
 * allow it is bit-identical to the exact path, whatever the other bit says.
 *
 * Linked into test_cuda (which skips without a GPU). */
#include "kt_nn.h"

#include "half.h"
#include "ops_axes.h"
#include "sl_alloc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define CONV_TOL 2e-4 /* exact f32 convolutions, as test_exec_cnn.c holds them */
/* 10-bit mantissa operands, f32 sums: a few parts in 1e3 of the sum of |a
 * b| for these sizes, whether the operands are rounded or truncated */
#define TF32_TOL 4e-2
#define EXACT_TOL 1e-5 /* f32 GEMMs of these sizes */

static int group_setup(void **state)
{
    return kt_group_open(state, "cuda");
}

/* The float dtypes the backend itself runs op in (the registry's own
 * declaration is tested with the registry). */
static unsigned backend_dtypes(kt_env *e, unsigned op)
{
    return e->dev->ops->op_dtypes ? e->dev->ops->op_dtypes(e->dev, op) : SL_DTS(SL_F32);
}

/* The half dtypes to test on this device: f16 always, bf16 from sm_80. */
static unsigned half_dtypes(kt_env *e)
{
    return backend_dtypes(e, SL_OP_CAST) & SL_DTS_HALF;
}

/* Unit roundoff of a half dtype: the largest relative error of one rounding. */
static double roundoff(unsigned dt)
{
    return dt == SL_BF16 ? 0x1p-8 : 0x1p-11;
}

static uint32_t next_bits(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t) (*state >> 32);
}

/* ---- every op of the half set against f32 ---- */

struct half_case {
    const char *name;
    unsigned op;
    sl_op_attrs a;
    unsigned n_in;
    sl_shape in[SL_OP_MAX_IN];         /* f32 for the float inputs */
    const int32_t *ints[SL_OP_MAX_IN]; /* the i32 inputs' contents; NULL: random bits */
    float lo, hi;                      /* the float inputs: uniform in [lo, hi) */
    double tol;                        /* units of the half type's roundoff; 0: equal */
};

/* Fails unless got (shape gs, in the half type or i32) matches want (f32
 * or i32, the f32 run's). */
static void expect_match(const char *what, unsigned dt, const sl_shape *gs, const void *got,
                         const void *want, double tol)
{
    size_t n = (size_t) sl_shape_elems(gs);
    if (!sl_dtype_is_float(gs->dtype)) {
        const int32_t *g = got, *w = want;
        for (size_t i = 0; i < n; i++)
            if (g[i] != w[i])
                fail_msg("%s in %s: [%zu] is %d, f32 gives %d", what, sl_dtype_name(dt), i, g[i],
                         w[i]);
        return;
    }
    assert_int_equal(gs->dtype, dt);
    float *g = kt_fvec(n);
    const float *w = want;
    sl_half_to_f32(dt, got, g, n);
    for (size_t i = 0; i < n; i++) {
        bool ok = isnan(w[i]) || isnan(g[i])
                      ? isnan(w[i]) && isnan(g[i])
                      : fabs((double) g[i] - w[i]) <= tol * roundoff(dt) * (1 + fabs(w[i]));
        if (!ok)
            fail_msg("%s in %s: [%zu] is %.9g, f32 gives %.9g (tolerance %g roundoffs)", what,
                     sl_dtype_name(dt), i, (double) g[i], (double) w[i], tol);
    }
    sl_free(g);
}

static void check_case(kt_env *e, unsigned dt, const struct half_case *k, uint64_t seed)
{
    const sl_op_def *def = sl_op_get(k->op);
    sl_shape hs[SL_OP_MAX_IN], fo[SL_OP_MAX_OUT], ho[SL_OP_MAX_OUT];
    void *fin[SL_OP_MAX_IN], *hin[SL_OP_MAX_IN], *fout[SL_OP_MAX_OUT], *hout[SL_OP_MAX_OUT];
    char err[256] = "", what[96];
    uint64_t bits = seed;
    for (unsigned i = 0; i < k->n_in; i++) {
        size_t n = (size_t) sl_shape_elems(&k->in[i]);
        hs[i] = k->in[i];
        fin[i] = kt_fvec(n);
        if (sl_dtype_is_float(k->in[i].dtype)) {
            hs[i].dtype = (uint8_t) dt;
            hin[i] = sl_calloc(n, 2);
            assert_non_null(hin[i]);
            kt_rand(fin[i], n, seed + i, k->lo, k->hi);
            sl_half_from_f32(dt, fin[i], hin[i], n); /* both runs see these values */
            sl_half_to_f32(dt, hin[i], fin[i], n);
        } else {
            int32_t *v = fin[i];
            for (size_t j = 0; j < n; j++)
                v[j] = k->ints[i] ? k->ints[i][j] : (int32_t) next_bits(&bits);
            hin[i] = kt_fvec(n);
            memcpy(hin[i], fin[i], n * 4);
        }
    }
    if (sl_op_infer(k->op, &k->a, k->in, k->n_in, fo, err, sizeof err) != SL_OK)
        fail_msg("%s in f32: %s", k->name, err);
    if (sl_op_infer(k->op, &k->a, hs, k->n_in, ho, err, sizeof err) != SL_OK)
        fail_msg("%s in %s: %s", k->name, sl_dtype_name(dt), err);
    for (unsigned i = 0; i < def->n_out; i++) {
        fout[i] = kt_fvec((size_t) sl_shape_elems(&fo[i]));
        hout[i] = kt_fvec((size_t) sl_shape_elems(&ho[i]));
    }

    kt_run_op(e, k->op, &k->a, k->in, (float *const *) fin, k->n_in, (float *const *) fout);
    kt_run_op(e, k->op, &k->a, hs, (float *const *) hin, k->n_in, (float *const *) hout);

    for (unsigned i = 0; i < def->n_out; i++) {
        snprintf(what, sizeof what, "%s: %s", k->name, def->outs[i].name);
        expect_match(what, dt, &ho[i], hout[i], fout[i], k->tol);
    }
    for (unsigned i = 0; i < k->n_in; i++)
        if (def->mutates & (1u << i)) {
            snprintf(what, sizeof what, "%s: %s (in place)", k->name, def->ins[i].name);
            expect_match(what, dt, &hs[i], hin[i], fin[i], k->tol);
        }

    for (unsigned i = 0; i < k->n_in; i++)
        sl_free(fin[i]), sl_free(hin[i]);
    for (unsigned i = 0; i < def->n_out; i++)
        sl_free(fout[i]), sl_free(hout[i]);
}

static void run_cases(kt_env *e, const struct half_case *cases, size_t n, uint64_t seed)
{
    unsigned dts = half_dtypes(e);
    assert_true(dts & SL_DTS(SL_F16));
    for (unsigned dt = SL_BF16; dt <= SL_F16; dt++) {
        if (!(dts & SL_DTS(dt))) {
            printf("    %s: not on this device (needs sm_80)\n", sl_dtype_name(dt));
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            assert_true(backend_dtypes(e, cases[i].op) & SL_DTS(dt));
            check_case(e, dt, &cases[i], seed + 16 * i);
        }
    }
}

#define F(...) KT_F32(__VA_ARGS__)
#define I(...) KT_SHAPE(SL_I32, __VA_ARGS__)

static void test_elementwise(void **state)
{
    const struct half_case cases[] = {
        {"fill", SL_OP_FILL, {.f = {0.3f}}, 1, {F(2, 7, 33)}, {0}, -1, 1, 1},
        {"copy", SL_OP_COPY, {0}, 1, {F(2, 7, 33)}, {0}, -4, 4, 0},
        {"reshape", SL_OP_RESHAPE, {.i = {4, 6}}, 1, {F(2, 6, 4)}, {0}, -4, 4, 0},
        {"add", SL_OP_ADD, {0}, 2, {F(2, 7, 33), F(2, 7, 33)}, {0}, -2, 2, 1},
        {"mul", SL_OP_MUL, {0}, 2, {F(2, 7, 33), F(2, 7, 33)}, {0}, -2, 2, 1},
        {"scale", SL_OP_SCALE, {.f = {1.7f}}, 1, {F(2, 7, 33)}, {0}, -2, 2, 1},
        {"axpy", SL_OP_AXPY, {.f = {-0.6f}}, 2, {F(1, 1000), F(1, 1000)}, {0}, -2, 2, 1},
        {"add_scalar", SL_OP_ADD_SCALAR, {.f = {0.25f}}, 1, {F(1, 300)}, {0}, -2, 2, 1},
        {"mul_scalar", SL_OP_MUL_SCALAR, {0}, 2, {F(2, 7, 33), F(1, 1)}, {0}, -2, 2, 1},
        {"relu", SL_OP_RELU, {0}, 1, {F(2, 7, 33)}, {0}, -2, 2, 0},
        {"relu_grad", SL_OP_RELU_GRAD, {0}, 2, {F(2, 7, 33), F(2, 7, 33)}, {0}, -2, 2, 0},
        {"relu_mask", SL_OP_RELU_MASK, {0}, 1, {F(1, 1000)}, {0}, -2, 2, 0},
        {"relu_grad_mask", SL_OP_RELU_GRAD_MASK, {0}, 2, {F(1, 1000), I(1, 32)}, {0}, -2, 2, 0},
        {"sigmoid", SL_OP_SIGMOID, {0}, 1, {F(2, 7, 33)}, {0}, -6, 6, 1},
        {"sigmoid_grad", SL_OP_SIGMOID_GRAD, {0}, 2, {F(2, 7, 33), F(2, 7, 33)}, {0}, 0, 1, 1},
        {"tanh", SL_OP_TANH, {0}, 1, {F(2, 7, 33)}, {0}, -3, 3, 1},
        {"tanh_grad", SL_OP_TANH_GRAD, {0}, 2, {F(2, 7, 33), F(2, 7, 33)}, {0}, -1, 1, 1},
        {"bias_add", SL_OP_BIAS_ADD, {0}, 2, {F(2, 7, 33), F(1, 33)}, {0}, -2, 2, 1},
        {"channel_bias_add",
         SL_OP_CHANNEL_BIAS_ADD,
         {0},
         2,
         {F(4, 2, 5, 6, 7), F(1, 5)},
         {0},
         -2,
         2,
         1},
        /* many rows: the column sums are sliced over the batch */
        {"bias_grad", SL_OP_BIAS_GRAD, {0}, 1, {F(2, 3000, 33)}, {0}, -1, 1, 1},
        {"channel_bias_grad", SL_OP_CHANNEL_BIAS_GRAD, {0}, 1, {F(4, 64, 5, 6, 7)}, {0}, -1, 1, 1},
    };
    run_cases(*state, cases, sizeof cases / sizeof cases[0], 1000);
}

static void test_matmul(void **state)
{
    const struct half_case cases[] = {
        {"matmul", SL_OP_MATMUL, {0}, 2, {F(2, 33, 64), F(2, 64, 17)}, {0}, -1, 1, 2},
        {"matmul transposed",
         SL_OP_MATMUL,
         {.i = {1, 1}},
         2,
         {F(2, 64, 33), F(2, 17, 64)},
         {0},
         -1,
         1,
         2},
        /* beta 1: accumulates into the half acc */
        {"matmul_acc",
         SL_OP_MATMUL_ACC,
         {.f = {0.5f, 1.0f}},
         3,
         {F(2, 33, 64), F(2, 64, 17), F(2, 33, 17)},
         {0},
         -1,
         1,
         2},
        {"matmul_acc transposed",
         SL_OP_MATMUL_ACC,
         {.i = {1, 0}, .f = {1.0f, 0.0f}},
         3,
         {F(2, 64, 33), F(2, 64, 17), F(2, 33, 17)},
         {0},
         -1,
         1,
         2},
        {"batch_matmul",
         SL_OP_BATCH_MATMUL,
         {0},
         2,
         {F(3, 3, 9, 40), F(3, 3, 40, 11)},
         {0},
         -1,
         1,
         2},
        {"batch_matmul broadcast",
         SL_OP_BATCH_MATMUL,
         {0},
         2,
         {F(3, 1, 9, 40), F(3, 3, 40, 11)},
         {0},
         -1,
         1,
         2},
    };
    run_cases(*state, cases, sizeof cases / sizeof cases[0], 2000);
}

/* conv attributes: stride, begin pads, end pads (ops_table.c's order). */
#define CONV_ATTRS(s, pb, pe)                                                                      \
    {                                                                                              \
        .i = { s, s, pb, pb, pe, pe }                                                              \
    }

static void test_conv(void **state)
{
    const struct half_case cases[] = {
        {"conv2d",
         SL_OP_CONV2D,
         CONV_ATTRS(1, 1, 1),
         2,
         {F(4, 2, 8, 9, 9), F(4, 16, 8, 3, 3)},
         {0},
         -1,
         1,
         4},
        {"conv2d stride 2",
         SL_OP_CONV2D,
         CONV_ATTRS(2, 1, 1),
         2,
         {F(4, 2, 8, 9, 9), F(4, 16, 8, 3, 3)},
         {0},
         -1,
         1,
         4},
        /* asymmetric pads: the zero-padded copy of x in 2-byte elements */
        {"conv2d asymmetric",
         SL_OP_CONV2D,
         CONV_ATTRS(1, 1, 0),
         2,
         {F(4, 2, 8, 9, 9), F(4, 16, 8, 3, 3)},
         {0},
         -1,
         1,
         4},
        {"conv2d_grad_input",
         SL_OP_CONV2D_GRAD_INPUT,
         CONV_ATTRS(1, 1, 1),
         3,
         {F(4, 2, 16, 9, 9), F(4, 16, 8, 3, 3), F(4, 2, 8, 9, 9)},
         {0},
         -1,
         1,
         4},
        /* and the crop of the padded gradient */
        {"conv2d_grad_input asymmetric",
         SL_OP_CONV2D_GRAD_INPUT,
         CONV_ATTRS(1, 1, 0),
         3,
         {F(4, 2, 16, 8, 8), F(4, 16, 8, 3, 3), F(4, 2, 8, 9, 9)},
         {0},
         -1,
         1,
         4},
        {"conv2d_grad_filter",
         SL_OP_CONV2D_GRAD_FILTER,
         CONV_ATTRS(1, 1, 1),
         3,
         {F(4, 2, 16, 9, 9), F(4, 2, 8, 9, 9), F(4, 16, 8, 3, 3)},
         {0},
         -1,
         1,
         4},
        {"conv2d_grad_filter asymmetric",
         SL_OP_CONV2D_GRAD_FILTER,
         CONV_ATTRS(1, 1, 0),
         3,
         {F(4, 2, 16, 8, 8), F(4, 2, 8, 9, 9), F(4, 16, 8, 3, 3)},
         {0},
         -1,
         1,
         4},
    };
    run_cases(*state, cases, sizeof cases / sizeof cases[0], 3000);
}

/* maxpool_grad's y (maxpool's output) is random here: the kernels find
 * each window's maximum in x. */
static void test_pool(void **state)
{
    const struct half_case cases[] = {
        {"maxpool", SL_OP_MAXPOOL, {.i = {2, 2, 2, 2}}, 1, {F(4, 2, 3, 8, 8)}, {0}, -1, 1, 0},
        {"maxpool_grad",
         SL_OP_MAXPOOL_GRAD,
         {.i = {2, 2, 2, 2}},
         3,
         {F(4, 2, 3, 4, 4), F(4, 2, 3, 8, 8), F(4, 2, 3, 4, 4)},
         {0},
         -1,
         1,
         1},
        /* overlapping windows: a gradient sums several of them */
        {"maxpool_grad overlapping",
         SL_OP_MAXPOOL_GRAD,
         {.i = {3, 3, 1, 1}},
         3,
         {F(4, 2, 3, 6, 6), F(4, 2, 3, 8, 8), F(4, 2, 3, 6, 6)},
         {0},
         -1,
         1,
         2},
        {"avgpool",
         SL_OP_AVGPOOL,
         {.i = {3, 3, 2, 2, 1, 1, 1, 1}},
         1,
         {F(4, 2, 3, 9, 9)},
         {0},
         -1,
         1,
         1},
        {"avgpool_grad",
         SL_OP_AVGPOOL_GRAD,
         {.i = {3, 3, 2, 2, 1, 1, 1, 1}},
         2,
         {F(4, 2, 3, 5, 5), F(4, 2, 3, 9, 9)},
         {0},
         -1,
         1,
         2},
    };
    run_cases(*state, cases, sizeof cases / sizeof cases[0], 4000);
}

static void test_axes(void **state)
{
    static const int32_t idx[] = {5, -1, 0, 2};
    const struct half_case cases[] = {
        {"ew_binary sub, broadcast",
         SL_OP_EW_BINARY,
         {.i = {SL_EW_SUB}},
         2,
         {F(3, 4, 5, 6), F(2, 5, 1)},
         {0},
         -2,
         2,
         1},
        {"ew_binary max",
         SL_OP_EW_BINARY,
         {.i = {SL_EW_MAX}},
         2,
         {F(2, 4, 5), F(2, 4, 5)},
         {0},
         -2,
         2,
         0},
        {"ew_unary exp", SL_OP_EW_UNARY, {.i = {SL_EW_EXP}}, 1, {F(2, 9, 10)}, {0}, -2, 2, 1},
        {"ew_unary clip",
         SL_OP_EW_UNARY,
         {.i = {SL_EW_CLIP}, .f = {-0.5f, 0.5f}},
         1,
         {F(2, 9, 10)},
         {0},
         -2,
         2,
         0},
        {"transpose", SL_OP_TRANSPOSE, {.i = {2, 0, 1}}, 1, {F(3, 2, 3, 4)}, {0}, -2, 2, 0},
        {"slice", SL_OP_SLICE, {.i = {1, 2, 11, 3}}, 1, {F(2, 5, 12)}, {0}, -2, 2, 0},
        {"concat", SL_OP_CONCAT, {.i = {1}}, 2, {F(2, 3, 4), F(2, 3, 5)}, {0}, -2, 2, 0},
        {"gather", SL_OP_GATHER, {.i = {0}}, 2, {F(2, 6, 5), I(1, 4)}, {NULL, idx}, -2, 2, 0},
        /* a warp per row, then a block per row; rounding makes ties, which
         * both runs break alike */
        {"argmax", SL_OP_ARGMAX, {0}, 1, {F(2, 9, 40)}, {0}, -1, 1, 0},
        {"argmax wide rows", SL_OP_ARGMAX, {0}, 1, {F(2, 3, 2000)}, {0}, -1, 1, 0},
    };
    run_cases(*state, cases, sizeof cases / sizeof cases[0], 5000);
}

#undef F
#undef I

/* ---- cast ---- */

static void cast_run(kt_env *e, unsigned from, unsigned to, void *src, void *dst, size_t n)
{
    sl_op_attrs a = {.i = {to}};
    sl_shape s = KT_SHAPE(from, 1, (int64_t) n);
    kt_run_op(e, SL_OP_CAST, &a, &s, (float *const[]){src}, 1, (float *const[]){dst});
}

/* What half.h makes of one element of `from` (its bits) in `to`; a cast
 * to the same dtype is a copy. */
static uint32_t host_cast(unsigned from, unsigned to, uint32_t bits)
{
    if (from == to)
        return bits;
    float f = from == SL_F32    ? sl_f32_from_bits(bits)
              : from == SL_BF16 ? sl_f32_from_bf16((uint16_t) bits)
                                : sl_f32_from_f16((uint16_t) bits);
    return to == SL_F32 ? sl_f32_bits(f) : to == SL_BF16 ? sl_bf16_from_f32(f) : sl_f16_from_f32(f);
}

static uint32_t load_bits(unsigned dt, const void *p, size_t i)
{
    if (dt == SL_F32) {
        uint32_t u;
        memcpy(&u, (const char *) p + 4 * i, 4);
        return u;
    }
    uint16_t h;
    memcpy(&h, (const char *) p + 2 * i, 2);
    return h;
}

static void check_cast(kt_env *e, unsigned from, unsigned to, void *src, size_t n)
{
    void *dst = sl_calloc(n, 4);
    assert_non_null(dst);
    cast_run(e, from, to, src, dst, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t in = load_bits(from, src, i), got = load_bits(to, dst, i);
        uint32_t want = host_cast(from, to, in);
        if (got != want)
            fail_msg("cast %s 0x%x to %s: 0x%x, half.h gives 0x%x", sl_dtype_name(from), in,
                     sl_dtype_name(to), got, want);
    }
    sl_free(dst);
}

static void test_cast(void **state)
{
    kt_env *e = *state;
    unsigned dts = half_dtypes(e) | SL_DTS(SL_F32);

    /* every bf16 and f16 pattern, to every dtype */
    uint16_t *all = sl_calloc(65536, 2);
    assert_non_null(all);
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t) i;
    for (unsigned from = SL_BF16; from <= SL_F16; from++)
        for (unsigned to = 0; to < SL_DTYPE_COUNT; to++)
            if ((dts & SL_DTS(from)) && (dts & SL_DTS(to)))
                check_cast(e, from, to, all, 65536);
    sl_free(all);

    /* f32: the edges (signed zeros, subnormals, the largest finite halves
     * and what rounds past them, ties, infinities, quiet and signalling
     * NaNs with payloads), then random bit patterns */
    static const uint32_t edges[] = {
        0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x33000000, 0x33000001,
        0x33400000, 0x337fffff, 0x38800000, 0x387fe000, 0x387ff000, 0x3f808000, 0x3f818000,
        0x3f800fff, 0x3f801000, 0x3f803000, 0x477fe000, 0x477fefff, 0x477ff000, 0x7f7fffff,
        0x7f7f8000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa5a5a5,
    };
    enum { N = 1 << 20 };
    size_t n_edges = sizeof edges / sizeof edges[0];
    uint32_t *bits = sl_calloc(N, 4);
    assert_non_null(bits);
    memcpy(bits, edges, sizeof edges);
    uint64_t seed = 42;
    for (size_t i = n_edges; i < N; i++)
        bits[i] = next_bits(&seed);
    for (unsigned to = 0; to < SL_DTYPE_COUNT; to++)
        if (dts & SL_DTS(to))
            check_cast(e, SL_F32, to, bits, N);
    sl_free(bits);
}

/* ---- which dtypes run, and refusals ---- */

static void test_dtypes(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    unsigned halves = half_dtypes(e);
    /* the half set runs in the halves; the f32-only ops (autocast's f32
     * list) in f32 alone */
    static const unsigned half_set[] = {SL_OP_MATMUL, SL_OP_CONV2D, SL_OP_RELU, SL_OP_GATHER,
                                        SL_OP_CAST};
    static const unsigned f32_only[] = {SL_OP_SOFTMAX, SL_OP_SOFTMAX_XENT, SL_OP_BATCHNORM,
                                        SL_OP_REDUCE_SUM, SL_OP_ADAM_UPDATE};
    for (size_t i = 0; i < sizeof half_set / sizeof half_set[0]; i++)
        assert_int_equal(backend_dtypes(e, half_set[i]), SL_DTS(SL_F32) | halves);
    for (size_t i = 0; i < sizeof f32_only / sizeof f32_only[0]; i++)
        assert_int_equal(backend_dtypes(e, f32_only[i]), SL_DTS(SL_F32));

    /* a launch in a dtype the op does not run in is refused before it runs */
    size_t mark = e->used;
    void *buf = kt_dev_alloc(e, 4096);
    sl_op_call sm = {.op = SL_OP_SOFTMAX, .n_in = 1, .n_out = 1};
    sm.in[0] = sm.out[0] = (sl_tensor_ref){buf, KT_SHAPE(SL_F16, 2, 4, 8)};
    assert_sl_err(ops->launch(e->dev, e->stream, &sm), SL_EUNSUPPORTED);
    if (!(halves & SL_DTS(SL_BF16))) {
        sl_op_call mm = {.op = SL_OP_MATMUL, .n_in = 2, .n_out = 1};
        mm.in[0] = mm.in[1] = mm.out[0] = (sl_tensor_ref){buf, KT_SHAPE(SL_BF16, 2, 8, 8)};
        assert_sl_err(ops->launch(e->dev, e->stream, &mm), SL_EUNSUPPORTED);
    }
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    e->used = mark;
}

/* ---- TF32 ---- */

/* Runs op with math bits `math` and downloads its result (out0, or the
 * mutated last input when the op has no outputs) into out. */
static void run_math(kt_env *e, unsigned op, const sl_op_attrs *a, const sl_shape *shapes,
                     float *const *in, unsigned n_in, uint8_t math, float *out)
{
    const sl_device_ops *ops = e->dev->ops;
    size_t mark = e->used;
    sl_op_call call;
    kt_call_prepare(e, op, a, shapes, (void *const *) in, n_in, &call, NULL);
    call.math = math;
    assert_sl_ok(ops->launch(e->dev, e->stream, &call));
    const sl_tensor_ref *r = call.n_out ? &call.out[0] : &call.in[n_in - 1];
    assert_sl_ok(ops->memcpy_d2h(e->dev, e->stream, out, r->data, sl_shape_bytes(&r->shape)));
    assert_sl_ok(ops->synchronize(e->dev, e->stream));
    e->used = mark;
}

/* How a mode check goes for one op. */
struct modes {
    uint8_t tf32_bit, other_bit; /* the op's own TF32 bit; the other op kind's */
    double exact_tol;
    bool deterministic; /* the exact path gives the same bits every run */
    bool must_differ;   /* TF32 must change the result */
};

/* One f32 op in the three math modes against its double reference want:
 * exact (no bit), the other op kind's bit (the exact path: bit-identical
 * when the op is deterministic) and its own TF32 bit. */
static void check_modes(kt_env *e, const char *name, unsigned op, const sl_op_attrs *a,
                        const sl_shape *shapes, float *const *in, unsigned n_in, size_t n,
                        const double *want, struct modes m)
{
    uint8_t tf32_bit = m.tf32_bit, other_bit = m.other_bit;
    float *exact = kt_fvec(n), *other = kt_fvec(n), *tf32 = kt_fvec(n);
    char what[96];
    run_math(e, op, a, shapes, in, n_in, 0, exact);
    run_math(e, op, a, shapes, in, n_in, other_bit, other);
    run_math(e, op, a, shapes, in, n_in, tf32_bit, tf32);
    snprintf(what, sizeof what, "%s exact", name);
    kt_expect_close(what, exact, want, n, m.exact_tol);
    snprintf(what, sizeof what, "%s exact, other op kind's TF32 bit", name);
    kt_expect_close(what, other, want, n, m.exact_tol);
    if (m.deterministic && memcmp(exact, other, n * sizeof *exact) != 0)
        fail_msg("%s: the other op kind's TF32 bit changed the result", name);
    snprintf(what, sizeof what, "%s tf32", name);
    kt_expect_close(what, tf32, want, n, TF32_TOL);
    bool differs = memcmp(exact, tf32, n * sizeof *exact) != 0;
    printf("    %s: TF32 %s the exact result\n", name, differs ? "differs from" : "equals");
    if (m.must_differ && !differs)
        fail_msg("%s: TF32 allowed, yet the result is the exact one", name);
    sl_free(exact), sl_free(other), sl_free(tf32);
}

/* With a mutated input (matmul_acc) each mode starts from the same acc. */
static void test_tf32_matmul(void **state)
{
    kt_env *e = *state;
    /* TF32 tensor cores come with bf16 (sm_80) */
    bool tf32 = half_dtypes(e) & SL_DTS(SL_BF16);
    /* cuBLAS is deterministic on one stream (no atomics mode) */
    struct modes mm = {SL_MATH_MATMUL_TF32, SL_MATH_CONV_TF32, EXACT_TOL, true, tf32};
    /* large enough that cuBLAS takes a tensor-core kernel when allowed */
    enum { M = 256, K = 512, N = 192, B = 2 };
    float *a = kt_fvec(B * M * K), *b = kt_fvec(B * K * N), *acc = kt_fvec(M * N);
    double *ad = kt_dvec(B * M * K), *bd = kt_dvec(B * K * N), *want = kt_dvec(B * M * N);
    kt_rand(a, B * M * K, 6000, -1, 1);
    kt_rand(b, B * K * N, 6001, -1, 1);
    kt_rand(acc, M * N, 6002, -1, 1);
    kt_widen(a, ad, B * M * K);
    kt_widen(b, bd, B * K * N);

    kt_ref_matmul_acc(ad, bd, want, M, N, K, false, false, 1, 0);
    check_modes(e, "matmul", SL_OP_MATMUL, NULL, (sl_shape[]){KT_F32(2, M, K), KT_F32(2, K, N)},
                (float *[]){a, b}, 2, M * N, want, mm);

    /* acc = 0.5 acc + a^T b with a stored [K,M] */
    sl_op_attrs at = {.i = {1, 0}, .f = {1.0f, 0.5f}};
    kt_widen(acc, want, M * N);
    kt_ref_matmul_acc(ad, bd, want, M, N, K, true, false, 1, 0.5);
    float *acc_in = kt_fvec(M * N);
    memcpy(acc_in, acc, sizeof(float) * M * N);
    check_modes(e, "matmul_acc", SL_OP_MATMUL_ACC, &at,
                (sl_shape[]){KT_F32(2, K, M), KT_F32(2, K, N), KT_F32(2, M, N)},
                (float *[]){a, b, acc_in}, 3, M * N, want, mm);

    for (size_t i = 0; i < B; i++)
        kt_ref_matmul_acc(ad + i * M * K, bd + i * K * N, want + i * M * N, M, N, K, false, false,
                          1, 0);
    check_modes(e, "batch_matmul", SL_OP_BATCH_MATMUL, NULL,
                (sl_shape[]){KT_F32(3, B, M, K), KT_F32(3, B, K, N)}, (float *[]){a, b}, 2,
                B * M * N, want, mm);
    sl_free(a), sl_free(b), sl_free(acc), sl_free(acc_in);
    sl_free(ad), sl_free(bd), sl_free(want);
}

static void test_tf32_conv(void **state)
{
    kt_env *e = *state;
    static const int64_t xd[4] = {4, 16, 12, 12}, wd[4] = {32, 16, 3, 3};
    sl_op_attrs a = CONV_ATTRS(1, 1, 1);
    int64_t yd[4];
    kt_conv_out(xd, wd, &a, yd);
    size_t nx = kt_elems(xd, 4), nw = kt_elems(wd, 4), ny = kt_elems(yd, 4);
    float *x = kt_fvec(nx), *w = kt_fvec(nw), *dy = kt_fvec(ny);
    double *xdd = kt_dvec(nx), *wdd = kt_dvec(nw), *dyd = kt_dvec(ny);
    double *want_y = kt_dvec(ny), *want_dx = kt_dvec(nx), *want_dw = kt_dvec(nw);
    kt_rand(x, nx, 7000, -1, 1);
    kt_rand(w, nw, 7001, -1, 1);
    kt_rand(dy, ny, 7002, -1, 1);
    kt_widen(x, xdd, nx);
    kt_widen(w, wdd, nw);
    kt_widen(dy, dyd, ny);
    sl_shape xs = KT_F32(4, xd[0], xd[1], xd[2], xd[3]), ws = KT_F32(4, wd[0], wd[1], wd[2], wd[3]);
    sl_shape ys = KT_F32(4, yd[0], yd[1], yd[2], yd[3]);

    /* cuDNN may keep FMA kernels under tensor-op math: TF32 need not
     * differ. Its forward algorithms are deterministic; some gradient ones
     * sum with atomics. */
    struct modes fwd = {SL_MATH_CONV_TF32, SL_MATH_MATMUL_TF32, CONV_TOL, true, false};
    struct modes bwd = {SL_MATH_CONV_TF32, SL_MATH_MATMUL_TF32, CONV_TOL, false, false};
    kt_ref_conv2d(xdd, wdd, want_y, xd, wd, &a);
    check_modes(e, "conv2d", SL_OP_CONV2D, &a, (sl_shape[]){xs, ws}, (float *[]){x, w}, 2, ny,
                want_y, fwd);
    kt_ref_conv2d_grad_input(dyd, wdd, want_dx, xd, wd, &a);
    check_modes(e, "conv2d_grad_input", SL_OP_CONV2D_GRAD_INPUT, &a, (sl_shape[]){ys, ws, xs},
                (float *[]){dy, w, x}, 3, nx, want_dx, bwd);
    kt_ref_conv2d_grad_filter(dyd, xdd, want_dw, xd, wd, &a);
    check_modes(e, "conv2d_grad_filter", SL_OP_CONV2D_GRAD_FILTER, &a, (sl_shape[]){ys, xs, ws},
                (float *[]){dy, x, w}, 3, nw, want_dw, bwd);
    sl_free(x), sl_free(w), sl_free(dy), sl_free(xdd), sl_free(wdd), sl_free(dyd);
    sl_free(want_y), sl_free(want_dx), sl_free(want_dw);
}

int kt_run_cuda_half_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),      cmocka_unit_test(test_cast),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_conv),        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_axes),        cmocka_unit_test(test_tf32_matmul),
        cmocka_unit_test(test_tf32_conv),
    };
    return _cmocka_run_group_tests("cuda bf16, f16 and tf32", tests, sizeof tests / sizeof tests[0],
                                   group_setup, kt_group_close);
}
