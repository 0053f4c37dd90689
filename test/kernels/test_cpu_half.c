/* bf16 and f16 on the cpu backend: every half-capable op against the f32
 * kernel run on the same inputs rounded to the half format, the cast
 * kernel against half.h, in-place execution, the stream workspace, and
 * oneDNN's native bf16 kernels against the conversion path.
 *
 * What "the same" means (kernels/cpu/half.c):
 * - the conversion path (every op in f16, every op but the matmuls and
 *   convolutions in bf16, and those too where the processor lacks bf16
 *   units or the test forces it) is exact: each half output is bit for bit
 *   the f32 kernel's output rounded once to nearest even (NaN: both NaN);
 *   i32 outputs are equal.
 * - oneDNN's native bf16 matmuls and convolutions sum in f32 in their own
 *   order and round once, so they are held to
 *       |got - want| <= 2 u |want| + 2^-13 S
 *   where want is the f32 kernel's output, u the format's unit roundoff
 *   (2^-8 for bf16: one rounding is at most u |want|, the second u covers
 *   f32 noise around it) and S the same op over the inputs' absolute values
 *   (sum of |products|): f32 sums of K terms in another order differ by up
 *   to about K 2^-24 S, and 2^-13 S leaves room for K up to 2^11 with the
 *   products' own bf16 rounding inside the kernels. */
#include "kt_nn.h"

#include "cpu/cpu.h"
#include "half.h"
#include "ops_axes.h"
#include "sl_alloc.h"
#include "sl_testsupport.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How an input is filled. */
enum fill_kind {
    FLOAT,    /* uniform in [lo, hi), then rounded to the half format */
    BITS,     /* i32: random bits (relu_grad_mask's mask) */
    INDEX,    /* i32: indices in [-3, 3) (gather along an axis of >= 3) */
    POSITIVE, /* uniform in [0.25, 2) (pow's base, sqrt's argument) */
};

struct spec {
    const char *name;
    unsigned op;
    sl_op_attrs a;
    unsigned n_in;
    sl_shape in[SL_OP_MAX_IN]; /* float inputs as f32: the test sets the dtype */
    enum fill_kind fill[SL_OP_MAX_IN];
    bool bilinear; /* a matmul or convolution: oneDNN's bf16 kernels may run it */
};

#define S(nd, ...) KT_F32(nd, __VA_ARGS__)
#define I(nd, ...) KT_SHAPE(SL_I32, nd, __VA_ARGS__)
#define CONV_PAD1                                                                                  \
    {                                                                                              \
        .i = { 1, 1, 1, 1, 1, 1 }                                                                  \
    }

static const struct spec specs[] = {
    {.name = "fill", .op = SL_OP_FILL, .a = {.f = {1.2345f}}, .n_in = 1, .in = {S(2, 3, 5)}},
    {.name = "copy", .op = SL_OP_COPY, .n_in = 1, .in = {S(2, 7, 9)}},
    {.name = "add", .op = SL_OP_ADD, .n_in = 2, .in = {S(2, 4, 33), S(2, 4, 33)}},
    {.name = "mul", .op = SL_OP_MUL, .n_in = 2, .in = {S(2, 4, 33), S(2, 4, 33)}},
    {.name = "scale", .op = SL_OP_SCALE, .a = {.f = {0.37f}}, .n_in = 1, .in = {S(1, 100)}},
    {.name = "axpy", .op = SL_OP_AXPY, .a = {.f = {-1.5f}}, .n_in = 2, .in = {S(1, 77), S(1, 77)}},
    {.name = "add_scalar",
     .op = SL_OP_ADD_SCALAR,
     .a = {.f = {0.3f}},
     .n_in = 1,
     .in = {S(2, 5, 5)}},
    {.name = "mul_scalar", .op = SL_OP_MUL_SCALAR, .n_in = 2, .in = {S(2, 5, 7), S(1, 1)}},
    {.name = "matmul",
     .op = SL_OP_MATMUL,
     .n_in = 2,
     .in = {S(2, 17, 33), S(2, 33, 19)},
     .bilinear = true},
    {.name = "matmul transA",
     .op = SL_OP_MATMUL,
     .a = {.i = {1, 0}},
     .n_in = 2,
     .in = {S(2, 33, 17), S(2, 33, 19)},
     .bilinear = true},
    {.name = "matmul transB",
     .op = SL_OP_MATMUL,
     .a = {.i = {0, 1}},
     .n_in = 2,
     .in = {S(2, 17, 33), S(2, 19, 33)},
     .bilinear = true},
    {.name = "matmul both",
     .op = SL_OP_MATMUL,
     .a = {.i = {1, 1}},
     .n_in = 2,
     .in = {S(2, 33, 17), S(2, 19, 33)},
     .bilinear = true},
    {.name = "matmul big",
     .op = SL_OP_MATMUL,
     .n_in = 2,
     .in = {S(2, 128, 300), S(2, 300, 96)},
     .bilinear = true},
    {.name = "matmul_acc",
     .op = SL_OP_MATMUL_ACC,
     .a = {.f = {0.5f, 0.75f}},
     .n_in = 3,
     .in = {S(2, 12, 40), S(2, 40, 9), S(2, 12, 9)},
     .bilinear = true},
    {.name = "matmul_acc transB",
     .op = SL_OP_MATMUL_ACC,
     .a = {.i = {0, 1}, .f = {-1.0f, 1.0f}},
     .n_in = 3,
     .in = {S(2, 12, 40), S(2, 9, 40), S(2, 12, 9)},
     .bilinear = true},
    {.name = "matmul_acc beta 0",
     .op = SL_OP_MATMUL_ACC,
     .a = {.f = {2.0f, 0.0f}},
     .n_in = 3,
     .in = {S(2, 12, 40), S(2, 40, 9), S(2, 12, 9)},
     .bilinear = true},
    {.name = "batch_matmul",
     .op = SL_OP_BATCH_MATMUL,
     .n_in = 2,
     .in = {S(3, 3, 8, 16), S(3, 3, 16, 12)},
     .bilinear = true},
    {.name = "batch_matmul broadcast",
     .op = SL_OP_BATCH_MATMUL,
     .n_in = 2,
     .in = {S(3, 4, 8, 16), S(3, 1, 16, 12)},
     .bilinear = true},
    {.name = "bias_add", .op = SL_OP_BIAS_ADD, .n_in = 2, .in = {S(2, 6, 10), S(1, 10)}},
    {.name = "bias_grad", .op = SL_OP_BIAS_GRAD, .n_in = 1, .in = {S(2, 40, 10)}},
    {.name = "channel_bias_add",
     .op = SL_OP_CHANNEL_BIAS_ADD,
     .n_in = 2,
     .in = {S(4, 2, 3, 4, 5), S(1, 3)}},
    {.name = "channel_bias_grad",
     .op = SL_OP_CHANNEL_BIAS_GRAD,
     .n_in = 1,
     .in = {S(4, 2, 3, 4, 5)}},
    {.name = "relu", .op = SL_OP_RELU, .n_in = 1, .in = {S(2, 9, 11)}},
    {.name = "relu_grad", .op = SL_OP_RELU_GRAD, .n_in = 2, .in = {S(2, 9, 11), S(2, 9, 11)}},
    {.name = "relu_mask", .op = SL_OP_RELU_MASK, .n_in = 1, .in = {S(2, 9, 11)}},
    {.name = "relu_grad_mask",
     .op = SL_OP_RELU_GRAD_MASK,
     .n_in = 2,
     .in = {S(2, 9, 11), I(1, 4)},
     .fill = {FLOAT, BITS}},
    {.name = "sigmoid", .op = SL_OP_SIGMOID, .n_in = 1, .in = {S(1, 50)}},
    {.name = "sigmoid_grad", .op = SL_OP_SIGMOID_GRAD, .n_in = 2, .in = {S(1, 50), S(1, 50)}},
    {.name = "tanh", .op = SL_OP_TANH, .n_in = 1, .in = {S(1, 50)}},
    {.name = "tanh_grad", .op = SL_OP_TANH_GRAD, .n_in = 2, .in = {S(1, 50), S(1, 50)}},
    {.name = "conv2d",
     .op = SL_OP_CONV2D,
     .a = CONV_PAD1,
     .n_in = 2,
     .in = {S(4, 2, 16, 9, 9), S(4, 8, 16, 3, 3)},
     .bilinear = true},
    {.name = "conv2d 1 channel",
     .op = SL_OP_CONV2D,
     .n_in = 2,
     .in = {S(4, 2, 1, 8, 8), S(4, 4, 1, 5, 5)},
     .bilinear = true},
    {.name = "conv2d groups",
     .op = SL_OP_CONV2D,
     .a = {.i = {2, 2, 0, 0, 1, 1, 1, 1, 2}},
     .n_in = 2,
     .in = {S(4, 2, 16, 9, 9), S(4, 16, 8, 3, 3)},
     .bilinear = true},
    {.name = "conv2d_grad_input",
     .op = SL_OP_CONV2D_GRAD_INPUT,
     .a = CONV_PAD1,
     .n_in = 3,
     .in = {S(4, 2, 8, 9, 9), S(4, 8, 16, 3, 3), S(4, 2, 16, 9, 9)},
     .bilinear = true},
    {.name = "conv2d_grad_filter",
     .op = SL_OP_CONV2D_GRAD_FILTER,
     .a = CONV_PAD1,
     .n_in = 3,
     .in = {S(4, 2, 8, 9, 9), S(4, 2, 16, 9, 9), S(4, 8, 16, 3, 3)},
     .bilinear = true},
    {.name = "conv2d_grad_filter 1 channel",
     .op = SL_OP_CONV2D_GRAD_FILTER,
     .n_in = 3,
     .in = {S(4, 2, 4, 4, 4), S(4, 2, 1, 8, 8), S(4, 4, 1, 5, 5)},
     .bilinear = true},
    /* 1x1 planes: only the centre tap meets data (conv_trim.c; f32 runs
     * them as matmuls, native bf16 through a view of the centre taps) */
    {.name = "conv2d 1x1 plane",
     .op = SL_OP_CONV2D,
     .a = CONV_PAD1,
     .n_in = 2,
     .in = {S(4, 4, 32, 1, 1), S(4, 16, 32, 3, 3)},
     .bilinear = true},
    {.name = "conv2d_grad_input 1x1 plane",
     .op = SL_OP_CONV2D_GRAD_INPUT,
     .a = CONV_PAD1,
     .n_in = 3,
     .in = {S(4, 4, 16, 1, 1), S(4, 16, 32, 3, 3), S(4, 4, 32, 1, 1)},
     .bilinear = true},
    {.name = "conv2d_grad_filter 1x1 plane",
     .op = SL_OP_CONV2D_GRAD_FILTER,
     .a = CONV_PAD1,
     .n_in = 3,
     .in = {S(4, 4, 16, 1, 1), S(4, 4, 32, 1, 1), S(4, 16, 32, 3, 3)},
     .bilinear = true},
    {.name = "maxpool tiled",
     .op = SL_OP_MAXPOOL,
     .a = {.i = {2, 2, 2, 2}},
     .n_in = 1,
     .in = {S(4, 2, 3, 8, 8)}},
    {.name = "maxpool overlapping",
     .op = SL_OP_MAXPOOL,
     .a = {.i = {3, 3, 1, 1, 1, 1, 1, 1}},
     .n_in = 1,
     .in = {S(4, 2, 3, 8, 8)}},
    {.name = "maxpool_grad",
     .op = SL_OP_MAXPOOL_GRAD,
     .a = {.i = {3, 3, 2, 2}},
     .n_in = 3,
     .in = {S(4, 2, 3, 3, 3), S(4, 2, 3, 8, 8), S(4, 2, 3, 3, 3)}},
    {.name = "avgpool",
     .op = SL_OP_AVGPOOL,
     .a = {.i = {3, 3, 2, 2, 1, 1, 1, 1}},
     .n_in = 1,
     .in = {S(4, 2, 3, 8, 8)}},
    {.name = "avgpool_grad",
     .op = SL_OP_AVGPOOL_GRAD,
     .a = {.i = {2, 2, 2, 2}},
     .n_in = 2,
     .in = {S(4, 2, 3, 4, 4), S(4, 2, 3, 8, 8)}},
    {.name = "reshape", .op = SL_OP_RESHAPE, .a = {.i = {6, -1}}, .n_in = 1, .in = {S(3, 2, 3, 5)}},
    {.name = "transpose",
     .op = SL_OP_TRANSPOSE,
     .a = {.i = {2, 0, 1}},
     .n_in = 1,
     .in = {S(3, 3, 4, 5)}},
    {.name = "transpose of the last two axes",
     .op = SL_OP_TRANSPOSE,
     .a = {.i = {0, 2, 1}},
     .n_in = 1,
     .in = {S(3, 3, 40, 35)}},
    {.name = "slice",
     .op = SL_OP_SLICE,
     .a = {.i = {1, 1, 6, 2}},
     .n_in = 1,
     .in = {S(3, 3, 7, 5)}},
    {.name = "slice backwards",
     .op = SL_OP_SLICE,
     .a = {.i = {2, 4, -1, -1}},
     .n_in = 1,
     .in = {S(3, 3, 7, 5)}},
    {.name = "concat",
     .op = SL_OP_CONCAT,
     .a = {.i = {1}},
     .n_in = 2,
     .in = {S(3, 2, 3, 5), S(3, 2, 4, 5)}},
    {.name = "gather",
     .op = SL_OP_GATHER,
     .a = {.i = {1}},
     .n_in = 2,
     .in = {S(3, 2, 5, 3), I(2, 2, 3)},
     .fill = {FLOAT, INDEX}},
    {.name = "argmax", .op = SL_OP_ARGMAX, .n_in = 1, .in = {S(2, 6, 10)}},
};

/* ew_binary's and ew_unary's kinds run as specs built on the fly. */
#define EW_BINARY_KINDS 8
#define EW_UNARY_KINDS 33

static uint16_t to_half(unsigned dt, float f)
{
    return dt == SL_BF16 ? sl_bf16_from_f32(f) : sl_f16_from_f32(f);
}

static float from_half(unsigned dt, uint16_t h)
{
    return dt == SL_BF16 ? sl_f32_from_bf16(h) : sl_f32_from_f16(h);
}

static bool is_float(const sl_shape *s)
{
    return s->dtype == SL_F32;
}

/* oneDNN's bf16 kernels wherever the processor has them (SALUS_CPU_BF16's
 * default, auto, runs them only with AMX): the tests compare them with the
 * conversion path, forced where they need it. */
static int setup(void **state)
{
    sl_cpu_force_bf16_path(1);
    return kt_group_open(state, "cpu");
}

static int teardown(void **state)
{
    sl_cpu_force_bf16_path(-1);
    return kt_group_close(state);
}

/* The host copies of one run: inputs (rounded f32 and half) and outputs. */
struct run {
    size_t n_in_el[SL_OP_MAX_IN], n_out_el[SL_OP_MAX_OUT];
    sl_shape out[SL_OP_MAX_OUT];
    unsigned n_out;
    float *rin[SL_OP_MAX_IN];    /* f32: rounded to the half format, or i32 */
    uint16_t *hin[SL_OP_MAX_IN]; /* half bits (float inputs) */
    float *ref[SL_OP_MAX_OUT];   /* the f32 kernel's outputs */
    float *bound[SL_OP_MAX_OUT]; /* the op over absolute values (bilinear) */
    float *refmut[SL_OP_MAX_IN]; /* inputs the f32 kernel updated in place */
};

static void fill_input(const struct spec *s, unsigned i, unsigned dt, uint64_t seed, struct run *r)
{
    size_t n = r->n_in_el[i];
    r->rin[i] = kt_fvec(n);
    r->hin[i] = sl_calloc(n ? n : 1, sizeof(uint16_t));
    assert_non_null(r->hin[i]);
    enum fill_kind k = s->fill[i];
    if (k == BITS || k == INDEX) {
        int32_t *v = (int32_t *) r->rin[i];
        uint64_t st = seed * 77 + 5;
        for (size_t j = 0; j < n; j++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            v[j] = k == BITS ? (int32_t) (st >> 32) : (int32_t) ((st >> 40) % 6) - 3;
        }
        return;
    }
    float lo = k == POSITIVE ? 0.25f : -2.0f, hi = 2.0f;
    kt_rand(r->rin[i], n, seed, lo, hi);
    for (size_t j = 0; j < n; j++) {
        r->hin[i][j] = to_half(dt, r->rin[i][j]);
        r->rin[i][j] = from_half(dt, r->hin[i][j]);
    }
}

/* Runs s on f32 (rounded inputs) and records the reference outputs. */
static void prepare(kt_env *e, const struct spec *s, unsigned dt, struct run *r)
{
    memset(r, 0, sizeof *r);
    char err[256] = "";
    if (sl_op_infer(s->op, &s->a, s->in, s->n_in, r->out, err, sizeof err) != SL_OK)
        fail_msg("%s: %s", s->name, err);
    r->n_out = sl_op_get(s->op)->n_out;
    for (unsigned i = 0; i < s->n_in; i++) {
        r->n_in_el[i] = sl_shape_elems(&s->in[i]);
        fill_input(s, i, dt, 1000 + 17 * i + s->op, r);
    }
    if (s->op == SL_OP_MAXPOOL_GRAD) { /* y must be maxpool(x): exact in any format */
        float *y = r->rin[2];
        kt_run_op(e, SL_OP_MAXPOOL, &s->a, &s->in[1], (float *[]){r->rin[1]}, 1, (float *[]){y});
        for (size_t j = 0; j < r->n_in_el[2]; j++)
            r->hin[2][j] = to_half(dt, y[j]);
    }
    for (unsigned o = 0; o < r->n_out; o++) {
        r->n_out_el[o] = sl_shape_elems(&r->out[o]);
        r->ref[o] = kt_fvec(r->n_out_el[o]);
    }
    float *in[SL_OP_MAX_IN];
    for (unsigned i = 0; i < s->n_in; i++) {
        r->refmut[i] = kt_fvec(r->n_in_el[i]);
        memcpy(r->refmut[i], r->rin[i], r->n_in_el[i] * 4);
        in[i] = r->refmut[i];
    }
    kt_run_op(e, s->op, &s->a, s->in, in, s->n_in, r->ref);
    if (!s->bilinear)
        return;
    /* S: the op over |inputs| (and |alpha|, |beta|): the sum of |products| */
    sl_op_attrs abs_a = s->a;
    for (unsigned k = 0; k < SL_OP_MAX_FATTRS; k++)
        abs_a.f[k] = fabsf(abs_a.f[k]);
    float *absin[SL_OP_MAX_IN];
    for (unsigned i = 0; i < s->n_in; i++) {
        absin[i] = kt_fvec(r->n_in_el[i]);
        for (size_t j = 0; j < r->n_in_el[i]; j++)
            absin[i][j] = fabsf(r->rin[i][j]);
    }
    for (unsigned o = 0; o < r->n_out; o++)
        r->bound[o] = kt_fvec(r->n_out_el[o]);
    kt_run_op(e, s->op, &abs_a, s->in, absin, s->n_in, r->bound);
    if (s->op == SL_OP_MATMUL_ACC) /* the result lives in acc */
        r->bound[0] = absin[2], absin[2] = NULL;
    for (unsigned i = 0; i < s->n_in; i++)
        sl_free(absin[i]);
}

static void run_free(struct run *r)
{
    for (unsigned i = 0; i < SL_OP_MAX_IN; i++)
        sl_free(r->rin[i]), sl_free(r->hin[i]), sl_free(r->refmut[i]);
    for (unsigned o = 0; o < SL_OP_MAX_OUT; o++)
        sl_free(r->ref[o]), sl_free(r->bound[o]);
}

/* The op on dt tensors; *outs (half bits or i32) and the mutated inputs
 * come back, allocated here. */
static void run_half(kt_env *e, const struct spec *s, unsigned dt, const struct run *r,
                     uint16_t **outs, uint16_t **mut)
{
    sl_shape sh[SL_OP_MAX_IN];
    float *in[SL_OP_MAX_IN], *out[SL_OP_MAX_OUT];
    for (unsigned i = 0; i < s->n_in; i++) {
        sh[i] = s->in[i];
        size_t n = r->n_in_el[i];
        mut[i] = sl_calloc(n * 2 + 4, 2);
        assert_non_null(mut[i]);
        if (is_float(&sh[i])) {
            sh[i].dtype = (uint8_t) dt;
            memcpy(mut[i], r->hin[i], n * 2);
        } else {
            memcpy(mut[i], r->rin[i], n * 4);
        }
        in[i] = (float *) mut[i];
    }
    for (unsigned o = 0; o < r->n_out; o++) {
        outs[o] = sl_calloc(r->n_out_el[o] * 2 + 4, 2);
        assert_non_null(outs[o]);
        out[o] = (float *) outs[o];
    }
    kt_run_op(e, s->op, &s->a, sh, in, s->n_in, out);
}

/* The i-th element of a result: an output, or matmul_acc's acc. */
struct result {
    const char *what;
    size_t n;
    bool i32;
    const float *ref, *bound;
    const void *got;
};

static unsigned results(const struct spec *s, const struct run *r, uint16_t **outs, uint16_t **mut,
                        struct result *res)
{
    unsigned k = 0;
    const sl_op_def *def = sl_op_get(s->op);
    for (unsigned o = 0; o < r->n_out; o++)
        res[k++] = (struct result){def->outs[o].name, r->n_out_el[o], !is_float(&r->out[o]),
                                   r->ref[o],         r->bound[o],    outs[o]};
    for (unsigned i = 0; i < s->n_in; i++)
        if (def->mutates & (1u << i))
            res[k++] = (struct result){def->ins[i].name,
                                       r->n_in_el[i],
                                       false,
                                       r->refmut[i],
                                       s->op == SL_OP_MATMUL_ACC ? r->bound[0] : NULL,
                                       mut[i]};
    return k;
}

static double unit_roundoff(unsigned dt)
{
    return dt == SL_BF16 ? 0x1p-8 : 0x1p-11;
}

/* Bit for bit: the f32 result rounded once (both NaN counts as equal). */
static void expect_exact(const char *name, unsigned dt, const struct result *x)
{
    if (x->i32) {
        if (memcmp(x->got, x->ref, x->n * 4) != 0)
            fail_msg("%s %s (%s): i32 output differs", name, x->what, sl_dtype_name(dt));
        return;
    }
    const uint16_t *g = x->got;
    for (size_t j = 0; j < x->n; j++) {
        uint16_t want = to_half(dt, x->ref[j]);
        if (g[j] != want && !(isnan(from_half(dt, g[j])) && isnan(x->ref[j])))
            fail_msg("%s %s (%s) [%zu]: got %#06x (%g), want %#06x (%g from %.9g)", name, x->what,
                     sl_dtype_name(dt), j, g[j], (double) from_half(dt, g[j]), want,
                     (double) from_half(dt, want), (double) x->ref[j]);
    }
}

/* Within the documented tolerance of an f32-accumulating bf16 kernel. */
static void expect_close(const char *name, unsigned dt, const struct result *x, const void *other)
{
    const uint16_t *g = other ? other : x->got;
    double u = unit_roundoff(dt);
    for (size_t j = 0; j < x->n; j++) {
        double got = from_half(dt, g[j]), want = x->ref[j];
        double tol = 2 * u * fabs(want) + 0x1p-13 * x->bound[j];
        if (!(fabs(got - want) <= tol))
            fail_msg("%s %s (%s native) [%zu]: got %.9g, want %.9g (tolerance %g)", name, x->what,
                     sl_dtype_name(dt), j, got, want, tol);
    }
}

static void check_spec(kt_env *e, const struct spec *s, unsigned dt)
{
    struct run r;
    prepare(e, s, dt, &r);
    uint16_t *outs[SL_OP_MAX_OUT] = {0}, *mut[SL_OP_MAX_IN] = {0};
    uint16_t *gouts[SL_OP_MAX_OUT] = {0}, *gmut[SL_OP_MAX_IN] = {0};
    struct result res[SL_OP_MAX_OUT + SL_OP_MAX_IN], gres[SL_OP_MAX_OUT + SL_OP_MAX_IN];
    bool native = dt == SL_BF16 && s->bilinear && sl_cpu_bf16_native();

    /* the conversion path: exact */
    sl_cpu_force_bf16_path(2);
    run_half(e, s, dt, &r, gouts, gmut);
    sl_cpu_force_bf16_path(1);
    unsigned n = results(s, &r, gouts, gmut, gres);
    for (unsigned k = 0; k < n; k++)
        expect_exact(s->name, dt, &gres[k]);

    /* the default path: native bf16 within tolerance, and close to the
     * conversion path's result; everything else exact */
    unsigned prims = sl_cpu_cached_prims(e->stream);
    run_half(e, s, dt, &r, outs, mut);
    n = results(s, &r, outs, mut, res);
    for (unsigned k = 0; k < n; k++) {
        if (!native) {
            expect_exact(s->name, dt, &res[k]);
            continue;
        }
        expect_close(s->name, dt, &res[k], NULL);
        expect_close(s->name, dt, &res[k], gres[k].got);
    }
    /* a native matmul is a oneDNN primitive, where f32 ones are GEMM calls */
    if (native && s->op != SL_OP_CONV2D_GRAD_FILTER) {
        unsigned now = sl_cpu_cached_prims(e->stream);
        assert_true(now > prims || (now == prims && now >= 64)); /* unless full */
    }
    for (unsigned i = 0; i < SL_OP_MAX_OUT; i++)
        sl_free(outs[i]), sl_free(gouts[i]);
    for (unsigned i = 0; i < SL_OP_MAX_IN; i++)
        sl_free(mut[i]), sl_free(gmut[i]);
    run_free(&r);
}

static void each_spec(kt_env *e, unsigned dt)
{
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_spec(e, &specs[i], dt);
    for (int k = 0; k < EW_BINARY_KINDS; k++) {
        struct spec s = {.name = "ew_binary",
                         .op = SL_OP_EW_BINARY,
                         .a = {.i = {k}},
                         .n_in = 2,
                         .in = {S(3, 4, 1, 6), S(2, 5, 1)},
                         .fill = {k == SL_EW_POW ? POSITIVE : FLOAT}};
        check_spec(e, &s, dt);
    }
    for (int k = 0; k < EW_UNARY_KINDS; k++) {
        struct spec s = {.name = "ew_unary",
                         .op = SL_OP_EW_UNARY,
                         .a = {.i = {k}, .f = {0.5f, 1.5f}},
                         .n_in = 1,
                         .in = {S(2, 4, 9)},
                         .fill = {k == 0 || k == 3 ? POSITIVE : FLOAT}};
        check_spec(e, &s, dt);
    }
}

static void test_ops_bf16(void **state)
{
    each_spec(*state, SL_BF16);
}

static void test_ops_f16(void **state)
{
    each_spec(*state, SL_F16);
}

/* Large enough to run on the team (2 threads): the native kernels and the
 * conversions split, the results do not change. */
static void test_ops_threads(void **state)
{
    kt_env *e = *state;
    sl_cpu_force_threads(e->dev, 2);
    static const struct spec big[] = {
        {.name = "matmul 2 threads",
         .op = SL_OP_MATMUL,
         .n_in = 2,
         .in = {S(2, 256, 256), S(2, 256, 256)},
         .bilinear = true},
        {.name = "conv2d 2 threads",
         .op = SL_OP_CONV2D,
         .a = CONV_PAD1,
         .n_in = 2,
         .in = {S(4, 8, 32, 16, 16), S(4, 32, 32, 3, 3)},
         .bilinear = true},
        {.name = "relu 2 threads", .op = SL_OP_RELU, .n_in = 1, .in = {S(1, 300000)}},
    };
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        check_spec(e, &big[i], SL_BF16);
        check_spec(e, &big[i], SL_F16);
    }
    sl_cpu_force_threads(e->dev, 0);
}

/* cast: every bf16 and f16 pattern widened, narrowed to the other half
 * format, and a million f32 patterns (NaNs, infinities, subnormals
 * included) narrowed, all bit for bit as half.h; on one thread and two. */
static void cast_all(kt_env *e, unsigned from, unsigned to, const void *src, size_t n, void *dst)
{
    sl_shape sh = KT_SHAPE(from, 1, (int64_t) n);
    sl_op_attrs a = {.i = {to}};
    kt_run_op(e, SL_OP_CAST, &a, &sh, (float *[]){(float *) src}, 1, (float *[]){dst});
}

static void test_cast(void **state)
{
    kt_env *e = *state;
    /* every 16-bit pattern; 2^20 random f32 ones (2^14 under valgrind) */
    const size_t nh = 1u << 16, nf = getenv("SL_TEST_QUICK") ? 1u << 14 : 1u << 20;
    uint16_t *h = sl_calloc(nh, 2), *h2 = sl_calloc(nh, 2), *hf = sl_calloc(nf, 2);
    uint32_t *f = sl_calloc(nh, 4), *src = sl_calloc(nf, 4);
    assert_true(h && h2 && hf && f && src);
    for (size_t i = 0; i < nh; i++)
        h[i] = (uint16_t) i;
    uint64_t st = 99;
    for (size_t i = 0; i < nf; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (uint32_t) (st >> 32);
    }
    const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x00000001u,
                                0x80000000u, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u};
    memcpy(src, special, sizeof special);
    for (int threads = 1; threads <= 2; threads++) {
        sl_cpu_force_threads(e->dev, threads);
        for (unsigned dt = SL_BF16; dt <= SL_F16; dt++) {
            unsigned other = dt == SL_BF16 ? SL_F16 : SL_BF16;
            cast_all(e, dt, SL_F32, h, nh, f);
            for (size_t i = 0; i < nh; i++)
                assert_int_equal(f[i], sl_f32_bits(from_half(dt, h[i])));
            cast_all(e, dt, other, h, nh, h2);
            for (size_t i = 0; i < nh; i++)
                assert_int_equal(h2[i], to_half(other, from_half(dt, h[i])));
            cast_all(e, SL_F32, dt, src, nf, hf);
            for (size_t i = 0; i < nf; i++)
                assert_int_equal(hf[i], to_half(dt, sl_f32_from_bits(src[i])));
            cast_all(e, dt, dt, h, nh, h2); /* to its own dtype: a copy */
            assert_memory_equal(h2, h, nh * 2);
        }
    }
    sl_cpu_force_threads(e->dev, 0);
    sl_free(h), sl_free(h2), sl_free(hf), sl_free(f), sl_free(src);
}

/* What the host callback after a launch saw: its status and the reason
 * the stream gives for a failure (read there, where it is kept). */
struct seen {
    kt_env *e;
    atomic_int calls, status;
    char why[256];
};

static void seen_cb(void *arg, int status)
{
    struct seen *s = arg;
    s->why[0] = 0;
    if (s->e->dev->ops->stream_failure)
        s->e->dev->ops->stream_failure(s->e->dev, s->e->stream, s->why, sizeof s->why);
    atomic_store(&s->status, status);
    atomic_fetch_add(&s->calls, 1);
}

/* Runs call on the env's stream and returns the host callback's status;
 * the failure's reason into why (when not NULL). */
static int launch_why(kt_env *e, const sl_op_call *call, char *why, size_t len)
{
    const sl_device_ops *ops = e->dev->ops;
    struct seen rec = {.e = e};
    assert_sl_ok(ops->launch(e->dev, e->stream, call));
    assert_sl_ok(ops->host_callback(e->dev, e->stream, seen_cb, &rec));
    (void) ops->synchronize(e->dev, e->stream);
    assert_int_equal(atomic_load(&rec.calls), 1);
    if (why)
        snprintf(why, len, "%s", rec.why);
    return atomic_load(&rec.status);
}

static int launch_status(kt_env *e, const sl_op_call *call)
{
    return launch_why(e, call, NULL, 0);
}

/* salusd may alias out0 to an input of an element-wise op: the conversion
 * path must read the whole input before it writes the output. */
static void test_in_place(void **state)
{
    kt_env *e = *state;
    const size_t n = 1000;
    size_t mark = e->used;
    for (unsigned dt = SL_BF16; dt <= SL_F16; dt++) {
        uint16_t *a = kt_dev_alloc(e, n * 2), *b = kt_dev_alloc(e, n * 2);
        float fa[1000], fb[1000];
        kt_rand(fa, n, 5, -3, 3);
        kt_rand(fb, n, 6, -3, 3);
        for (size_t i = 0; i < n; i++)
            a[i] = to_half(dt, fa[i]), b[i] = to_half(dt, fb[i]);
        sl_shape sh = KT_SHAPE(dt, 1, (int64_t) n);
        /* add: out0 over in1 */
        sl_op_call c = {.op = SL_OP_ADD, .n_in = 2, .n_out = 1};
        c.in[0] = (sl_tensor_ref){a, sh};
        c.in[1] = (sl_tensor_ref){b, sh};
        c.out[0] = c.in[1];
        assert_sl_ok(launch_status(e, &c));
        for (size_t i = 0; i < n; i++)
            assert_int_equal(b[i],
                             to_half(dt, from_half(dt, a[i]) + from_half(dt, to_half(dt, fb[i]))));
        /* relu: out0 over in0 */
        sl_op_call r = {.op = SL_OP_RELU, .n_in = 1, .n_out = 1};
        r.in[0] = r.out[0] = (sl_tensor_ref){a, sh};
        assert_sl_ok(launch_status(e, &r));
        for (size_t i = 0; i < n; i++) {
            float v = from_half(dt, to_half(dt, fa[i]));
            assert_int_equal(a[i], to_half(dt, v < 0 ? 0.0f : v));
        }
        /* add(a, a): one tensor read twice */
        for (size_t i = 0; i < n; i++)
            a[i] = to_half(dt, fa[i]);
        c.in[1] = c.in[0];
        c.out[0] = c.in[0];
        assert_sl_ok(launch_status(e, &c));
        for (size_t i = 0; i < n; i++)
            assert_int_equal(a[i], to_half(dt, 2 * from_half(dt, to_half(dt, fa[i]))));
    }
    e->used = mark;
}

/* With a workspace, the f32 copies and the kernel's own scratch share it:
 * too small a one fails the op (SL_EEXHAUSTED, the reason kept, the output
 * untouched); a big enough one gives the same result as the stream's own
 * memory. */
static void test_workspace(void **state)
{
    kt_env *e = *state;
    const sl_device_ops *ops = e->dev->ops;
    const int64_t xd[4] = {4, 16, 12, 12}, wd[4] = {16, 16, 3, 3};
    sl_op_attrs a = CONV_PAD1;
    size_t nx = kt_elems(xd, 4), nw = kt_elems(wd, 4), ny = (size_t) 4 * 16 * 12 * 12;
    size_t mark = e->used;
    uint16_t *x = kt_dev_alloc(e, nx * 2), *w = kt_dev_alloc(e, nw * 2);
    uint16_t *y = kt_dev_alloc(e, ny * 2), *y0 = sl_calloc(ny, 2);
    float *tmp = kt_fvec(nx);
    kt_rand(tmp, nx, 8, -1, 1);
    for (size_t i = 0; i < nx; i++)
        x[i] = sl_f16_from_f32(tmp[i]);
    kt_rand(tmp, nw, 9, -1, 1);
    for (size_t i = 0; i < nw; i++)
        w[i] = sl_f16_from_f32(tmp[i]);
    sl_op_call c = {.op = SL_OP_CONV2D, .n_in = 2, .n_out = 1, .attrs = a};
    c.in[0] = (sl_tensor_ref){x, KT_SHAPE(SL_F16, 4, xd[0], xd[1], xd[2], xd[3])};
    c.in[1] = (sl_tensor_ref){w, KT_SHAPE(SL_F16, 4, wd[0], wd[1], wd[2], wd[3])};
    c.out[0] = (sl_tensor_ref){y, KT_SHAPE(SL_F16, 4, 4, 16, 12, 12)};
    assert_sl_ok(launch_status(e, &c)); /* the stream's own memory */
    memcpy(y0, y, ny * 2);

    const size_t ws_bytes = 8u << 20;
    unsigned char *ws = sl_aligned_alloc(256, ws_bytes);
    assert_non_null(ws);
    memset(ws, 0x5a, ws_bytes);
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, ws, ws_bytes));
    memset(y, 0, ny * 2);
    assert_sl_ok(launch_status(e, &c));
    assert_memory_equal(y, y0, ny * 2);
    size_t touched = 0;
    for (size_t i = 0; i < (nx + nw) * 4; i++)
        touched += ws[i] != 0x5a;
    assert_true(touched > 0); /* the copies live at the front */

    /* too small for the f32 copies: refused, the output intact */
    char why[256];
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, ws, 4096));
    memset(y, 0x11, ny * 2);
    assert_int_equal(launch_why(e, &c, why, sizeof why), SL_EEXHAUSTED);
    assert_non_null(strstr(why, "f32 copies"));
    for (size_t i = 0; i < ny; i++)
        assert_int_equal(y[i], 0x1111);
    /* room for the copies, not for oneDNN's blocked layouts after them */
    size_t copies = (nx + nw + ny) * 4;
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, ws, copies + 256));
    assert_int_equal(launch_why(e, &c, why, sizeof why), SL_EEXHAUSTED);
    assert_non_null(strstr(why, "oneDNN scratch"));
    for (size_t i = 0; i < ny; i++)
        assert_int_equal(y[i], 0x1111);
    assert_sl_ok(ops->stream_set_workspace(e->dev, e->stream, NULL, 0));
    sl_free(ws), sl_free(y0), sl_free(tmp);
    e->used = mark;
}

/* The device declares what it runs in half precision: the registry's set. */
static void test_op_dtypes(void **state)
{
    kt_env *e = *state;
    for (unsigned op = 0; op < SL_OP_COUNT; op++) {
        const sl_op_def *d = sl_op_get(op);
        unsigned want = d->dtypes ? d->dtypes : SL_DTS(SL_F32);
        assert_int_equal(sl_dev_op_dtypes(e->dev, op), want);
        if (d->dtypes & SL_DTS_HALF)
            assert_int_equal(d->accum, SL_F32);
    }
    assert_true(sl_dev_op_dtypes(e->dev, SL_OP_MATMUL) & SL_DTS(SL_BF16));
    assert_false(sl_dev_op_dtypes(e->dev, SL_OP_SOFTMAX) & SL_DTS(SL_BF16));
}

SL_TEST_MAIN("cpu half precision", setup, teardown, cmocka_unit_test(test_op_dtypes),
             cmocka_unit_test(test_cast), cmocka_unit_test(test_ops_bf16),
             cmocka_unit_test(test_ops_f16), cmocka_unit_test(test_ops_threads),
             cmocka_unit_test(test_in_place), cmocka_unit_test(test_workspace))
