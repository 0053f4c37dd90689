/* The op registry: shapes, lookup, validation of every op, cost figures. */
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void test_shapes(void **state)
{
    (void) state;
    sl_shape ok = KT_F32(2, 128, 784), scalar = {.dtype = SL_F32};
    assert_true(sl_shape_valid(&ok));
    assert_true(sl_shape_valid(&scalar));
    assert_true(sl_shape_valid(&KT_SHAPE(SL_I32, 6, 1, 2, 3, 4, 5, 6)));
    assert_true(sl_shape_valid(&KT_F32(2, 1 << 20, 1 << 20))); /* exactly 2^40 */
    assert_false(sl_shape_valid(&KT_F32(2, (1 << 20) + 1, 1 << 20)));
    assert_false(sl_shape_valid(&KT_F32(3, 1ll << 40, 1ll << 40, 1ll << 40))); /* would wrap */
    assert_false(sl_shape_valid(&KT_F32(2, 3, 0)));
    assert_false(sl_shape_valid(&KT_F32(1, -1)));
    assert_false(sl_shape_valid(&KT_SHAPE(SL_DTYPE_COUNT, 1, 1)));
    assert_false(sl_shape_valid(&(sl_shape){.dtype = SL_F32, .ndim = SL_MAX_DIMS + 1}));
    assert_false(sl_shape_valid(NULL));

    assert_true(sl_shape_equal(&ok, &KT_F32(2, 128, 784)));
    assert_false(sl_shape_equal(&ok, &KT_F32(2, 784, 128)));
    assert_false(sl_shape_equal(&ok, &KT_SHAPE(SL_I32, 2, 128, 784)));
    assert_false(sl_shape_equal(&ok, &KT_F32(3, 128, 784, 1)));

    char buf[32];
    assert_string_equal(sl_shape_str(&ok, buf, sizeof buf), "f32[128,784]");
    assert_string_equal(sl_shape_str(&scalar, buf, sizeof buf), "f32[]");
    assert_string_equal(sl_shape_str(&KT_SHAPE(SL_I32, 1, 7), buf, sizeof buf), "i32[7]");
    assert_string_equal(sl_shape_str(&ok, buf, 6), "f32[1"); /* truncated, terminated */
}

static void test_lookup(void **state)
{
    (void) state;
    for (unsigned id = 0; id < SL_OP_COUNT; id++) {
        const sl_op_def *d = sl_op_get(id);
        assert_non_null(d);
        assert_non_null(d->infer);
        assert_non_null(d->cost);
        unsigned found = SL_OP_COUNT;
        assert_sl_ok(sl_op_lookup(d->name, &found));
        assert_int_equal(found, id);
    }
    assert_null(sl_op_get(SL_OP_COUNT));
    unsigned id;
    assert_sl_err(sl_op_lookup("conv3d", &id), SL_ENOTFOUND);
    assert_sl_err(sl_op_lookup("", &id), SL_ENOTFOUND);
    assert_sl_err(sl_op_lookup(NULL, &id), SL_EINVAL);
    assert_int_equal(sl_op_get(SL_OP_SGD_UPDATE)->mutates, 1);
    assert_int_equal(sl_op_get(SL_OP_SGD_UPDATE)->n_out, 0);
    /* In-place inputs: add_scalar in0; batchnorm the running mean and
     * variance (in3, in4); momentum param and velocity (in0, in2); adam
     * param, m and v (in0, in2, in3). */
    assert_int_equal(sl_op_get(SL_OP_ADD_SCALAR)->mutates, 0x1);
    assert_int_equal(sl_op_get(SL_OP_BATCHNORM)->mutates, 0x18);
    assert_int_equal(sl_op_get(SL_OP_MOMENTUM_UPDATE)->mutates, 0x5);
    assert_int_equal(sl_op_get(SL_OP_ADAM_UPDATE)->mutates, 0xd);
    assert_int_equal(sl_op_get(SL_OP_MATMUL_ACC)->mutates, 0x4); /* the accumulator */
    assert_int_equal(sl_op_get(SL_OP_MATMUL_ACC)->n_out, 0);
    for (unsigned op = 0; op < SL_OP_COUNT; op++) {
        const sl_op_def *d = sl_op_get(op);
        assert_true(d->n_in <= SL_OP_MAX_IN && d->n_out <= SL_OP_MAX_OUT);
        assert_true(d->n_iattrs <= SL_OP_MAX_IATTRS && d->n_fattrs <= SL_OP_MAX_FATTRS);
        assert_int_equal(d->mutates >> d->n_in, 0);
    }
}

/* Every op is documented in full (docs/ops.md is generated from this), and
 * an attribute is either required or has a default. */
static void test_docs(void **state)
{
    (void) state;
    for (unsigned g = 0; g < SL_OP_GROUP_COUNT; g++) {
        assert_non_null(sl_op_group_get(g));
        assert_true(sl_op_group_get(g)->title[0] && sl_op_group_get(g)->doc[0]);
    }
    assert_null(sl_op_group_get(SL_OP_GROUP_COUNT));
    for (unsigned id = 0; id < SL_OP_COUNT; id++) {
        const sl_op_def *d = sl_op_get(id);
        assert_true(d->group < SL_OP_GROUP_COUNT);
        assert_true(d->doc && d->doc[0]);
        assert_true(d->n_in >= 1 && d->ins);
        assert_true(d->n_out == 0 || d->outs);
        const sl_op_arg *args[2] = {d->ins, d->outs};
        unsigned n_args[2] = {d->n_in, d->n_out};
        for (int k = 0; k < 2; k++)
            for (unsigned i = 0; i < n_args[k]; i++)
                assert_true(args[k][i].name[0] && args[k][i].doc[0]);
        const sl_op_attr *attrs[2] = {d->iattrs, d->fattrs};
        unsigned n_attrs[2] = {d->n_iattrs, d->n_fattrs};
        for (int k = 0; k < 2; k++) {
            assert_true(n_attrs[k] == 0 || attrs[k]);
            for (unsigned i = 0; i < n_attrs[k]; i++) {
                const sl_op_attr *a = &attrs[k][i];
                assert_true(a->name[0] && a->doc[0]);
                if (a->required)
                    assert_null(a->dflt);
                else
                    assert_true(a->dflt && a->dflt[0]);
            }
        }
    }
}

/* Required attributes must be within what a client sent. */
static void test_required_attrs(void **state)
{
    (void) state;
    char err[160];
    assert_sl_err(sl_op_check_attrs(SL_OP_SCALE, 0, 0, err, sizeof err), SL_EINVAL);
    assert_string_equal(err, "missing required attribute fattrs[0] (alpha)");
    assert_sl_ok(sl_op_check_attrs(SL_OP_SCALE, 0, 1, err, sizeof err));
    assert_sl_err(sl_op_check_attrs(SL_OP_MAXPOOL, 1, 0, err, sizeof err), SL_EINVAL);
    assert_string_equal(err, "missing required attribute iattrs[1] (kernel_w)");
    assert_sl_ok(sl_op_check_attrs(SL_OP_MAXPOOL, 2, 0, err, sizeof err)); /* rest optional */
    assert_sl_err(sl_op_check_attrs(SL_OP_ADAM_UPDATE, 0, 3, err, sizeof err), SL_EINVAL);
    assert_string_equal(err, "missing required attribute fattrs[3] (epsilon)");
    assert_sl_ok(sl_op_check_attrs(SL_OP_MOMENTUM_UPDATE, 0, 2, err, sizeof err)); /* no decay */
    assert_sl_ok(sl_op_check_attrs(SL_OP_MATMUL, 0, 0, err, sizeof err));
    assert_sl_ok(sl_op_check_attrs(SL_OP_RESHAPE, 0, 0, err, sizeof err)); /* to a scalar */
    assert_sl_ok(sl_op_check_attrs(SL_OP_RELU, 0, 0, err, sizeof err));
    assert_sl_err(sl_op_check_attrs(SL_OP_RELU, SL_OP_MAX_IATTRS + 1, 0, err, sizeof err),
                  SL_EINVAL);
    assert_sl_err(sl_op_check_attrs(SL_OP_COUNT, 0, 0, err, sizeof err), SL_EINVAL);
    /* the ops whose 0 is no default: every one of them requires it */
    const unsigned needs_f[] = {SL_OP_FILL,       SL_OP_SCALE,          SL_OP_AXPY,
                                SL_OP_ADD_SCALAR, SL_OP_SGD_UPDATE,     SL_OP_MATMUL_ACC,
                                SL_OP_BATCHNORM,  SL_OP_BATCHNORM_INFER};
    for (size_t i = 0; i < sizeof needs_f / sizeof needs_f[0]; i++)
        assert_sl_err(sl_op_check_attrs(needs_f[i], 0, 0, NULL, 0), SL_EINVAL);
}

static void test_op_names(void **state)
{
    (void) state;
    char all[1024], few[64];
    size_t n = sl_op_names(all, sizeof all);
    assert_int_equal(n, strlen(all));
    assert_memory_equal(all, "fill, copy, add, ", 17);
    for (unsigned id = 0; id < SL_OP_COUNT; id++)
        assert_non_null(strstr(all, sl_op_get(id)->name));
    assert_null(strstr(all, "more"));
    /* whole names only, then how many did not fit */
    n = sl_op_names(few, sizeof few);
    assert_int_equal(n, strlen(few));
    assert_true(n < sizeof few);
    const char *tail = strstr(few, ", and ");
    assert_non_null(tail);
    unsigned shown = 1, more = 0;
    for (const char *p = few; p < tail; p++)
        shown += *p == ',';
    assert_int_equal(sscanf(tail, ", and %u more", &more), 1);
    assert_int_equal(shown + more, SL_OP_COUNT);
    assert_int_equal(sl_op_names(few, 0), 0);
    assert_int_equal(sl_op_names(few, 5), 0); /* not even "fill" and its tail */
    assert_string_equal(few, "");
}

/* One case: an op instance and what sl_op_infer must say about it. */
struct infer_case {
    const char *what;
    unsigned op;
    sl_op_attrs attrs;
    unsigned n_in;
    sl_shape in[6];
    int rc;
    sl_shape out;        /* when rc is SL_OK and the op has an output */
    const char *err_has; /* when rc is not SL_OK: a part of the message */
};

/* One line per case reads best as a table. */
/* clang-format off */
#define A2(r, c) KT_F32(2, r, c)
#define V(n) KT_F32(1, n)
#define SCALAR ((sl_shape){.dtype = SL_F32})
#define I32(r, c) KT_SHAPE(SL_I32, 2, r, c)
#define NONE {.i = {0}}
#define X4(n, c, h, w) KT_F32(4, n, c, h, w)
#define IV(n) KT_SHAPE(SL_I32, 1, n)

static const struct infer_case cases[] = {
    /* fill */
    {"fill", SL_OP_FILL, {.f = {3}}, 1, {A2(2, 3)}, SL_OK, A2(2, 3), NULL},
    {"fill scalar", SL_OP_FILL, {.f = {-INFINITY}}, 1, {SCALAR}, SL_OK, SCALAR, NULL},
    {"fill i32", SL_OP_FILL, NONE, 1, {I32(2, 3)}, SL_EINVAL, {0}, "expected a float tensor"},
    {"fill 2 inputs", SL_OP_FILL, NONE, 2, {A2(2, 3), A2(2, 3)}, SL_EINVAL, {0}, "expected 1 inputs"},
    {"fill f[1]", SL_OP_FILL, {.f = {1, 2}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "f[1] is not used"},
    /* copy */
    {"copy", SL_OP_COPY, NONE, 1, {KT_F32(4, 1, 2, 3, 4)}, SL_OK, KT_F32(4, 1, 2, 3, 4), NULL},
    {"copy 0 inputs", SL_OP_COPY, NONE, 0, {{0}}, SL_EINVAL, {0}, "expected 1 inputs, got 0"},
    {"copy i[0]", SL_OP_COPY, {.i = {1}}, 1, {V(3)}, SL_EINVAL, {0}, "i[0] is not used"},
    {"copy bad dim", SL_OP_COPY, NONE, 1, {A2(2, 0)}, SL_EINVAL, {0}, "not a valid shape"},
    /* add */
    {"add", SL_OP_ADD, NONE, 2, {A2(2, 3), A2(2, 3)}, SL_OK, A2(2, 3), NULL},
    {"add mismatch", SL_OP_ADD, NONE, 2, {A2(2, 3), A2(3, 2)}, SL_EINVAL, {0}, "does not match"},
    {"add rank", SL_OP_ADD, NONE, 2, {A2(2, 3), KT_F32(3, 2, 3, 1)}, SL_EINVAL, {0}, "does not match"},
    {"add dtype", SL_OP_ADD, NONE, 2, {A2(2, 3), I32(2, 3)}, SL_EINVAL, {0}, "expected a float tensor"},
    {"add 1 input", SL_OP_ADD, NONE, 1, {A2(2, 3)}, SL_EINVAL, {0}, "expected 2 inputs"},
    /* scale */
    {"scale", SL_OP_SCALE, {.f = {0.5f}}, 1, {V(9)}, SL_OK, V(9), NULL},
    {"scale nan", SL_OP_SCALE, {.f = {NAN}}, 1, {V(9)}, SL_EINVAL, {0}, "finite"},
    {"scale inf", SL_OP_SCALE, {.f = {INFINITY}}, 1, {V(9)}, SL_EINVAL, {0}, "finite"},
    /* matmul */
    {"matmul", SL_OP_MATMUL, NONE, 2, {A2(3, 4), A2(4, 5)}, SL_OK, A2(3, 5), NULL},
    {"matmul tA", SL_OP_MATMUL, {.i = {1, 0}}, 2, {A2(4, 3), A2(4, 5)}, SL_OK, A2(3, 5), NULL},
    {"matmul tB", SL_OP_MATMUL, {.i = {0, 1}}, 2, {A2(3, 4), A2(5, 4)}, SL_OK, A2(3, 5), NULL},
    {"matmul tA tB", SL_OP_MATMUL, {.i = {1, 1}}, 2, {A2(4, 3), A2(5, 4)}, SL_OK, A2(3, 5), NULL},
    {"matmul K", SL_OP_MATMUL, NONE, 2, {A2(3, 4), A2(5, 4)}, SL_EINVAL, {0}, "inner dimensions"},
    {"matmul K tA", SL_OP_MATMUL, {.i = {1, 0}}, 2, {A2(3, 4), A2(4, 5)}, SL_EINVAL, {0}, "K=3"},
    {"matmul transA 2", SL_OP_MATMUL, {.i = {2, 0}}, 2, {A2(3, 4), A2(4, 5)}, SL_EINVAL, {0}, "i[0] (transA) must be 0 or 1, got 2"},
    {"matmul transB -1", SL_OP_MATMUL, {.i = {0, -1}}, 2, {A2(3, 4), A2(4, 5)}, SL_EINVAL, {0}, "i[1] (transB) must be 0 or 1, got -1"},
    {"matmul i[2]", SL_OP_MATMUL, {.i = {0, 0, 1}}, 2, {A2(3, 4), A2(4, 5)}, SL_EINVAL, {0}, "i[2] is not used"},
    {"matmul f[0]", SL_OP_MATMUL, {.f = {1}}, 2, {A2(3, 4), A2(4, 5)}, SL_EINVAL, {0}, "f[0] is not used"},
    {"matmul rank 1", SL_OP_MATMUL, NONE, 2, {V(4), A2(4, 5)}, SL_EINVAL, {0}, "expected rank 2"},
    {"matmul rank 3", SL_OP_MATMUL, NONE, 2, {A2(3, 4), KT_F32(3, 4, 5, 1)}, SL_EINVAL, {0}, "in1 f32[4,5,1]: expected rank 2"},
    {"matmul too big", SL_OP_MATMUL, NONE, 2, {A2(1 << 21, 1), A2(1, 1 << 21)}, SL_EINVAL, {0}, "exceeds"},
    {"matmul i32", SL_OP_MATMUL, NONE, 2, {I32(3, 4), I32(4, 5)}, SL_EINVAL, {0}, "expected a float tensor"},
    /* relu_mask: y like x, bits i32[ceil(n/32)]; relu_grad_mask checks them */
    {"relu_mask", SL_OP_RELU_MASK, NONE, 1, {A2(3, 11)}, SL_OK, A2(3, 11), NULL},
    {"relu_mask i32", SL_OP_RELU_MASK, NONE, 1, {I32(3, 11)}, SL_EINVAL, {0}, "expected a float tensor"},
    {"relu_grad_mask", SL_OP_RELU_GRAD_MASK, NONE, 2, {A2(3, 11), KT_SHAPE(SL_I32, 1, 2)}, SL_OK, A2(3, 11), NULL},
    {"relu_grad_mask 32", SL_OP_RELU_GRAD_MASK, NONE, 2, {A2(4, 8), KT_SHAPE(SL_I32, 1, 1)}, SL_OK, A2(4, 8), NULL},
    {"relu_grad_mask short", SL_OP_RELU_GRAD_MASK, NONE, 2, {A2(3, 11), KT_SHAPE(SL_I32, 1, 1)}, SL_EINVAL, {0}, "relu_mask's bits"},
    {"relu_grad_mask f32 bits", SL_OP_RELU_GRAD_MASK, NONE, 2, {A2(3, 11), V(2)}, SL_EINVAL, {0}, "relu_mask's bits"},
    {"relu_grad_mask 2-d bits", SL_OP_RELU_GRAD_MASK, NONE, 2, {A2(3, 11), I32(1, 2)}, SL_EINVAL, {0}, "relu_mask's bits"},
    /* matmul_acc: acc (in2) must be the product's shape */
    {"matmul_acc", SL_OP_MATMUL_ACC, {.f = {1, 0.9f}}, 3, {A2(3, 4), A2(4, 5), A2(3, 5)}, SL_OK, {0}, NULL},
    {"matmul_acc tA", SL_OP_MATMUL_ACC, {.i = {1, 0}, .f = {1, 0}}, 3, {A2(4, 3), A2(4, 5), A2(3, 5)}, SL_OK, {0}, NULL},
    {"matmul_acc tB", SL_OP_MATMUL_ACC, {.i = {0, 1}, .f = {-2, 1}}, 3, {A2(3, 4), A2(5, 4), A2(3, 5)}, SL_OK, {0}, NULL},
    {"matmul_acc tA tB", SL_OP_MATMUL_ACC, {.i = {1, 1}, .f = {0, -1}}, 3, {A2(4, 3), A2(5, 4), A2(3, 5)}, SL_OK, {0}, NULL},
    {"matmul_acc acc transposed", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(3, 4), A2(4, 5), A2(5, 3)}, SL_EINVAL, {0}, "in2 f32[5,3] does not match the product f32[3,5]"},
    {"matmul_acc acc small", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(3, 4), A2(4, 5), A2(3, 4)}, SL_EINVAL, {0}, "does not match the product"},
    {"matmul_acc acc flat", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(3, 4), A2(4, 5), V(15)}, SL_EINVAL, {0}, "in2 f32[15] does not match"},
    {"matmul_acc acc i32", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(3, 4), A2(4, 5), I32(3, 5)}, SL_EINVAL, {0}, "does not match"},
    {"matmul_acc K", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(3, 4), A2(5, 4), A2(3, 5)}, SL_EINVAL, {0}, "inner dimensions"},
    {"matmul_acc transA 2", SL_OP_MATMUL_ACC, {.i = {2, 0}, .f = {1, 1}}, 3, {A2(3, 4), A2(4, 5), A2(3, 5)}, SL_EINVAL, {0}, "i[0] (transA) must be 0 or 1"},
    {"matmul_acc alpha nan", SL_OP_MATMUL_ACC, {.f = {NAN, 1}}, 3, {A2(3, 4), A2(4, 5), A2(3, 5)}, SL_EINVAL, {0}, "f[0] (alpha) must be finite"},
    {"matmul_acc beta inf", SL_OP_MATMUL_ACC, {.f = {1, INFINITY}}, 3, {A2(3, 4), A2(4, 5), A2(3, 5)}, SL_EINVAL, {0}, "f[1] (beta) must be finite"},
    {"matmul_acc i[2]", SL_OP_MATMUL_ACC, {.i = {0, 0, 1}, .f = {1, 1}}, 3, {A2(3, 4), A2(4, 5), A2(3, 5)}, SL_EINVAL, {0}, "i[2] is not used"},
    {"matmul_acc f[2]", SL_OP_MATMUL_ACC, {.f = {1, 1, 1}}, 3, {A2(3, 4), A2(4, 5), A2(3, 5)}, SL_EINVAL, {0}, "f[2] is not used"},
    {"matmul_acc 2 inputs", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 2, {A2(3, 4), A2(4, 5)}, SL_EINVAL, {0}, "expected 3 inputs"},
    {"matmul_acc rank 3", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(3, 4), KT_F32(3, 4, 5, 1), A2(3, 5)}, SL_EINVAL, {0}, "expected rank 2"},
    {"matmul_acc too big", SL_OP_MATMUL_ACC, {.f = {1, 1}}, 3, {A2(1 << 21, 1), A2(1, 1 << 21), A2(1, 1)}, SL_EINVAL, {0}, "exceeds"},
    /* bias_add */
    {"bias_add", SL_OP_BIAS_ADD, NONE, 2, {A2(8, 3), V(3)}, SL_OK, A2(8, 3), NULL},
    {"bias_add rows", SL_OP_BIAS_ADD, NONE, 2, {A2(8, 3), V(8)}, SL_EINVAL, {0}, "does not match the columns"},
    {"bias_add rank", SL_OP_BIAS_ADD, NONE, 2, {A2(8, 3), A2(1, 3)}, SL_EINVAL, {0}, "expected rank 1"},
    {"bias_add x rank", SL_OP_BIAS_ADD, NONE, 2, {V(3), V(3)}, SL_EINVAL, {0}, "expected rank 2"},
    /* bias_grad */
    {"bias_grad", SL_OP_BIAS_GRAD, NONE, 1, {A2(8, 3)}, SL_OK, V(3), NULL},
    {"bias_grad rank", SL_OP_BIAS_GRAD, NONE, 1, {KT_F32(3, 8, 3, 1)}, SL_EINVAL, {0}, "expected rank 2"},
    {"bias_grad 2 inputs", SL_OP_BIAS_GRAD, NONE, 2, {A2(8, 3), V(3)}, SL_EINVAL, {0}, "expected 1 inputs"},
    /* relu, relu_grad */
    {"relu", SL_OP_RELU, NONE, 1, {KT_F32(5, 1, 2, 1, 2, 1)}, SL_OK, KT_F32(5, 1, 2, 1, 2, 1), NULL},
    {"relu i32", SL_OP_RELU, NONE, 1, {I32(1, 1)}, SL_EINVAL, {0}, "expected a float tensor"},
    {"relu rank 7", SL_OP_RELU, NONE, 1, {{.dtype = SL_F32, .ndim = 7}}, SL_EINVAL, {0}, "not a valid shape"},
    {"relu dtype 9", SL_OP_RELU, NONE, 1, {KT_SHAPE(9, 1, 4)}, SL_EINVAL, {0}, "not a valid shape"},
    {"relu f[3]", SL_OP_RELU, {.f = {0, 0, 0, 1}}, 1, {V(2)}, SL_EINVAL, {0}, "f[3] is not used"},
    {"relu i[7]", SL_OP_RELU, {.i = {[7] = 1}}, 1, {V(2)}, SL_EINVAL, {0}, "i[7] is not used"},
    {"relu_grad", SL_OP_RELU_GRAD, NONE, 2, {A2(2, 3), A2(2, 3)}, SL_OK, A2(2, 3), NULL},
    {"relu_grad mismatch", SL_OP_RELU_GRAD, NONE, 2, {A2(2, 3), A2(2, 4)}, SL_EINVAL, {0}, "does not match"},
    /* mse */
    {"mse_loss", SL_OP_MSE_LOSS, NONE, 2, {A2(4, 2), A2(4, 2)}, SL_OK, SCALAR, NULL},
    {"mse_loss mismatch", SL_OP_MSE_LOSS, NONE, 2, {A2(4, 2), V(8)}, SL_EINVAL, {0}, "does not match"},
    {"mse_grad", SL_OP_MSE_GRAD, NONE, 2, {A2(4, 2), A2(4, 2)}, SL_OK, A2(4, 2), NULL},
    {"mse_grad 3 inputs", SL_OP_MSE_GRAD, NONE, 3, {A2(4, 2), A2(4, 2), A2(4, 2)}, SL_EINVAL, {0}, "expected 2 inputs, got 3"},
    /* sgd_update */
    {"sgd", SL_OP_SGD_UPDATE, {.f = {0.01f}}, 2, {A2(4, 2), A2(4, 2)}, SL_OK, {0}, NULL},
    {"sgd mismatch", SL_OP_SGD_UPDATE, {.f = {0.01f}}, 2, {A2(4, 2), A2(2, 4)}, SL_EINVAL, {0}, "does not match"},
    {"sgd lr nan", SL_OP_SGD_UPDATE, {.f = {NAN}}, 2, {A2(4, 2), A2(4, 2)}, SL_EINVAL, {0}, "learning rate"},
    {"sgd f[1]", SL_OP_SGD_UPDATE, {.f = {0.1f, 0.9f}}, 2, {A2(4, 2), A2(4, 2)}, SL_EINVAL, {0}, "f[1] is not used"},
    /* mul, axpy, add_scalar */
    {"mul", SL_OP_MUL, NONE, 2, {A2(2, 3), A2(2, 3)}, SL_OK, A2(2, 3), NULL},
    {"mul mismatch", SL_OP_MUL, NONE, 2, {A2(2, 3), A2(3, 2)}, SL_EINVAL, {0}, "in1 f32[3,2] does not match in0 f32[2,3]"},
    {"axpy", SL_OP_AXPY, {.f = {-2}}, 2, {V(4), V(4)}, SL_OK, V(4), NULL},
    {"axpy nan", SL_OP_AXPY, {.f = {NAN}}, 2, {V(4), V(4)}, SL_EINVAL, {0}, "f[0] (factor) must be finite"},
    {"axpy f[1]", SL_OP_AXPY, {.f = {1, 1}}, 2, {V(4), V(4)}, SL_EINVAL, {0}, "f[1] is not used"},
    {"add_scalar", SL_OP_ADD_SCALAR, {.f = {1}}, 1, {V(1)}, SL_OK, {0}, NULL},
    {"add_scalar inf", SL_OP_ADD_SCALAR, {.f = {INFINITY}}, 1, {V(1)}, SL_EINVAL, {0}, "finite"},
    {"add_scalar i32", SL_OP_ADD_SCALAR, {.f = {1}}, 1, {IV(1)}, SL_EINVAL, {0}, "expected a float tensor"},
    /* sigmoid, tanh */
    {"sigmoid", SL_OP_SIGMOID, NONE, 1, {X4(1, 2, 3, 4)}, SL_OK, X4(1, 2, 3, 4), NULL},
    {"sigmoid_grad", SL_OP_SIGMOID_GRAD, NONE, 2, {V(5), V(5)}, SL_OK, V(5), NULL},
    {"sigmoid_grad mismatch", SL_OP_SIGMOID_GRAD, NONE, 2, {V(5), V(6)}, SL_EINVAL, {0}, "does not match"},
    {"tanh", SL_OP_TANH, NONE, 1, {SCALAR}, SL_OK, SCALAR, NULL},
    {"tanh i[0]", SL_OP_TANH, {.i = {1}}, 1, {V(2)}, SL_EINVAL, {0}, "i[0] is not used"},
    {"tanh_grad", SL_OP_TANH_GRAD, NONE, 2, {A2(2, 2), A2(2, 2)}, SL_OK, A2(2, 2), NULL},
    {"tanh_grad dtype", SL_OP_TANH_GRAD, NONE, 2, {A2(2, 2), I32(2, 2)}, SL_EINVAL, {0}, "expected a float tensor"},
    /* conv2d: i[0..1] strides, i[2..5] pads, i[6..7] dilations, i[8] group */
    {"conv2d", SL_OP_CONV2D, NONE, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_OK, X4(2, 4, 5, 4), NULL},
    {"conv2d pad 1", SL_OP_CONV2D, {.i = {0, 0, 1, 1, 1, 1}}, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_OK, X4(2, 4, 7, 6), NULL},
    {"conv2d strides, asymmetric pads", SL_OP_CONV2D, {.i = {2, 3, 0, 1, 2, 1}}, 2, {X4(2, 3, 9, 8), X4(2, 3, 3, 2)}, SL_OK, X4(2, 2, 5, 3), NULL},
    {"conv2d dilation", SL_OP_CONV2D, {.i = {1, 1, 0, 0, 0, 0, 2, 2}}, 2, {X4(1, 2, 10, 9), X4(3, 2, 3, 3)}, SL_OK, X4(1, 3, 6, 5), NULL},
    {"conv2d group", SL_OP_CONV2D, {.i = {[8] = 2}}, 2, {X4(2, 4, 6, 6), X4(6, 2, 3, 3)}, SL_OK, X4(2, 6, 4, 4), NULL},
    {"conv2d depthwise", SL_OP_CONV2D, {.i = {[8] = 3}}, 2, {X4(1, 3, 5, 5), X4(3, 1, 5, 5)}, SL_OK, X4(1, 3, 1, 1), NULL},
    {"conv2d group vs C", SL_OP_CONV2D, {.i = {[8] = 3}}, 2, {X4(2, 4, 6, 6), X4(6, 1, 3, 3)}, SL_EINVAL, {0}, "group 3 does not divide the input channels 4"},
    {"conv2d group vs K", SL_OP_CONV2D, {.i = {[8] = 2}}, 2, {X4(1, 4, 6, 6), X4(3, 2, 3, 3)}, SL_EINVAL, {0}, "output channels 3"},
    {"conv2d channels", SL_OP_CONV2D, NONE, 2, {X4(2, 3, 7, 6), X4(4, 2, 3, 3)}, SL_EINVAL, {0}, "expected 3 input channels per group"},
    {"conv2d channels per group", SL_OP_CONV2D, {.i = {[8] = 2}}, 2, {X4(2, 4, 7, 6), X4(4, 4, 3, 3)}, SL_EINVAL, {0}, "expected 2 input channels per group"},
    {"conv2d window too big", SL_OP_CONV2D, NONE, 2, {X4(1, 1, 2, 2), X4(1, 1, 3, 3)}, SL_EINVAL, {0}, "does not fit"},
    {"conv2d dilated too big", SL_OP_CONV2D, {.i = {[6] = 3}}, 2, {X4(1, 1, 6, 9), X4(1, 1, 3, 3)}, SL_EINVAL, {0}, "does not fit"},
    {"conv2d pads make it fit", SL_OP_CONV2D, {.i = {0, 0, 1, 0, 0, 1}}, 2, {X4(1, 1, 2, 2), X4(1, 1, 3, 3)}, SL_OK, X4(1, 1, 1, 1), NULL},
    {"conv2d stride -1", SL_OP_CONV2D, {.i = {-1}}, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "i[0] (stride h) must be in [0, 1048576], got -1"},
    {"conv2d pad -1", SL_OP_CONV2D, {.i = {0, 0, 0, 0, 0, -1}}, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "i[5] (pad w_end)"},
    {"conv2d huge dilation", SL_OP_CONV2D, {.i = {[7] = 1 << 21}}, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "i[7] (dilation w)"},
    {"conv2d group -2", SL_OP_CONV2D, {.i = {[8] = -2}}, 2, {X4(2, 4, 7, 6), X4(4, 2, 3, 3)}, SL_EINVAL, {0}, "i[8] (group)"},
    {"conv2d i[9]", SL_OP_CONV2D, {.i = {[9] = 1}}, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "i[9] is not used"},
    {"conv2d f[0]", SL_OP_CONV2D, {.f = {1}}, 2, {X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "f[0] is not used"},
    {"conv2d rank", SL_OP_CONV2D, NONE, 2, {KT_F32(3, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "in0 f32[3,7,6]: expected rank 4"},
    {"conv2d w rank", SL_OP_CONV2D, NONE, 2, {X4(2, 3, 7, 6), A2(4, 27)}, SL_EINVAL, {0}, "in1 f32[4,27]: expected rank 4"},
    {"conv2d i32", SL_OP_CONV2D, NONE, 2, {KT_SHAPE(SL_I32, 4, 2, 3, 7, 6), X4(4, 3, 3, 3)}, SL_EINVAL, {0}, "expected a float tensor"},
    {"conv2d output too big", SL_OP_CONV2D, NONE, 2, {X4(1, 1, 1 << 20, 1 << 20), X4(1 << 20, 1, 1, 1)}, SL_EINVAL, {0}, "exceed 2^40 elements"},
    {"conv2d too much work", SL_OP_CONV2D, NONE, 2, {X4(1, 1, 1 << 20, 1 << 20), X4(1, 1, 1 << 19, 1 << 19)}, SL_EINVAL, {0}, "exceeds 2^62 flops"},
    {"conv2d 2 inputs", SL_OP_CONV2D, NONE, 3, {X4(2, 3, 7, 6), X4(4, 3, 3, 3), V(4)}, SL_EINVAL, {0}, "expected 2 inputs, got 3"},
    /* conv2d gradients */
    {"conv2d_grad_input", SL_OP_CONV2D_GRAD_INPUT, {.i = {0, 0, 1, 1, 1, 1}}, 3, {X4(2, 4, 7, 6), X4(4, 3, 3, 3), X4(2, 3, 7, 6)}, SL_OK, X4(2, 3, 7, 6), NULL},
    {"conv2d_grad_input dy", SL_OP_CONV2D_GRAD_INPUT, NONE, 3, {X4(2, 4, 7, 6), X4(4, 3, 3, 3), X4(2, 3, 7, 6)}, SL_EINVAL, {0}, "in0 f32[2,4,7,6] does not match conv2d's output for in2 (x) and in1 (w) f32[2,4,5,4]"},
    {"conv2d_grad_input group", SL_OP_CONV2D_GRAD_INPUT, {.i = {[8] = 2}}, 3, {X4(2, 6, 4, 4), X4(6, 2, 3, 3), X4(2, 4, 6, 6)}, SL_OK, X4(2, 4, 6, 6), NULL},
    {"conv2d_grad_filter", SL_OP_CONV2D_GRAD_FILTER, {.i = {2, 3, 0, 1, 2, 1}}, 3, {X4(2, 2, 5, 3), X4(2, 3, 9, 8), X4(2, 3, 3, 2)}, SL_OK, X4(2, 3, 3, 2), NULL},
    {"conv2d_grad_filter dy", SL_OP_CONV2D_GRAD_FILTER, NONE, 3, {X4(2, 2, 5, 3), X4(2, 3, 9, 8), X4(2, 3, 3, 2)}, SL_EINVAL, {0}, "does not match conv2d's output"},
    {"conv2d_grad_filter order", SL_OP_CONV2D_GRAD_FILTER, NONE, 3, {X4(2, 4, 5, 4), X4(4, 3, 3, 3), X4(2, 3, 7, 6)}, SL_EINVAL, {0}, "does not fit input f32[4,3,3,3]"},
    /* channel bias */
    {"channel_bias_add", SL_OP_CHANNEL_BIAS_ADD, NONE, 2, {X4(2, 3, 4, 5), V(3)}, SL_OK, X4(2, 3, 4, 5), NULL},
    {"channel_bias_add length", SL_OP_CHANNEL_BIAS_ADD, NONE, 2, {X4(2, 3, 4, 5), V(5)}, SL_EINVAL, {0}, "in1 f32[5] does not match one bias per channel of in0 f32[3]"},
    {"channel_bias_add rank", SL_OP_CHANNEL_BIAS_ADD, NONE, 2, {A2(2, 3), V(3)}, SL_EINVAL, {0}, "expected rank 4"},
    {"channel_bias_grad", SL_OP_CHANNEL_BIAS_GRAD, NONE, 1, {X4(2, 3, 4, 5)}, SL_OK, V(3), NULL},
    {"channel_bias_grad rank", SL_OP_CHANNEL_BIAS_GRAD, NONE, 1, {KT_F32(3, 2, 3, 4)}, SL_EINVAL, {0}, "expected rank 4"},
    /* pooling: i[0..1] kernel, i[2..3] strides, i[4..7] pads, i[8] count_include_pad */
    {"maxpool", SL_OP_MAXPOOL, {.i = {2, 2, 2, 2}}, 1, {X4(2, 3, 8, 8)}, SL_OK, X4(2, 3, 4, 4), NULL},
    {"maxpool pads", SL_OP_MAXPOOL, {.i = {3, 3, 2, 2, 1, 1, 1, 1}}, 1, {X4(2, 2, 7, 9)}, SL_OK, X4(2, 2, 4, 5), NULL},
    {"maxpool stride default", SL_OP_MAXPOOL, {.i = {3, 2}}, 1, {X4(1, 1, 5, 5)}, SL_OK, X4(1, 1, 3, 4), NULL},
    {"maxpool kernel 0", SL_OP_MAXPOOL, {.i = {0, 2}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "i[0] (kernel h) must be in [1, 1048576], got 0"},
    {"maxpool pad = kernel", SL_OP_MAXPOOL, {.i = {2, 2, 1, 1, 2}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "i[4] (pad h_begin) must be in [0, 1], got 2"},
    {"maxpool end pad = kernel", SL_OP_MAXPOOL, {.i = {3, 2, 1, 1, 0, 0, 0, 2}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "i[7] (pad w_end) must be in [0, 1]"},
    {"maxpool stride -2", SL_OP_MAXPOOL, {.i = {2, 2, -2}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "i[2] (stride h)"},
    {"maxpool count_include_pad", SL_OP_MAXPOOL, {.i = {2, 2, 2, 2, 0, 0, 0, 0, 1}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "i[8] is not used"},
    {"maxpool too big", SL_OP_MAXPOOL, {.i = {9, 2}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "does not fit"},
    {"maxpool rank", SL_OP_MAXPOOL, {.i = {2, 2}}, 1, {A2(8, 8)}, SL_EINVAL, {0}, "expected rank 4"},
    {"maxpool f[0]", SL_OP_MAXPOOL, {.i = {2, 2}, .f = {1}}, 1, {X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "f[0] is not used"},
    {"maxpool_grad", SL_OP_MAXPOOL_GRAD, {.i = {2, 2, 2, 2}}, 3, {X4(2, 3, 4, 4), X4(2, 3, 8, 8), X4(2, 3, 4, 4)}, SL_OK, X4(2, 3, 8, 8), NULL},
    {"maxpool_grad y", SL_OP_MAXPOOL_GRAD, {.i = {2, 2, 2, 2}}, 3, {X4(2, 3, 4, 4), X4(2, 3, 8, 8), X4(2, 3, 4, 5)}, SL_EINVAL, {0}, "in2 f32[2,3,4,5] does not match maxpool's output"},
    {"maxpool_grad dy", SL_OP_MAXPOOL_GRAD, {.i = {2, 2, 2, 2}}, 3, {X4(2, 3, 8, 8), X4(2, 3, 8, 8), X4(2, 3, 4, 4)}, SL_EINVAL, {0}, "in0 f32[2,3,8,8] does not match"},
    {"avgpool", SL_OP_AVGPOOL, {.i = {3, 3, 2, 2, 1, 1, 1, 1, 1}}, 1, {X4(2, 2, 7, 9)}, SL_OK, X4(2, 2, 4, 5), NULL},
    {"avgpool count_include_pad 2", SL_OP_AVGPOOL, {.i = {3, 3, 2, 2, 1, 1, 1, 1, 2}}, 1, {X4(2, 2, 7, 9)}, SL_EINVAL, {0}, "i[8] (count_include_pad) must be in [0, 1], got 2"},
    {"avgpool i[9]", SL_OP_AVGPOOL, {.i = {2, 2, [9] = 1}}, 1, {X4(2, 2, 7, 9)}, SL_EINVAL, {0}, "i[9] is not used"},
    {"avgpool_grad", SL_OP_AVGPOOL_GRAD, {.i = {2, 2, 2, 2}}, 2, {X4(2, 3, 4, 4), X4(2, 3, 8, 8)}, SL_OK, X4(2, 3, 8, 8), NULL},
    {"avgpool_grad dy", SL_OP_AVGPOOL_GRAD, {.i = {2, 2, 1, 1}}, 2, {X4(2, 3, 4, 4), X4(2, 3, 8, 8)}, SL_EINVAL, {0}, "avgpool's output"},
    /* batch normalisation */
    {"batchnorm 4-D", SL_OP_BATCHNORM, {.f = {1e-5f, 0.9f}}, 5, {X4(2, 3, 4, 4), V(3), V(3), V(3), V(3)}, SL_OK, X4(2, 3, 4, 4), NULL},
    {"batchnorm 2-D", SL_OP_BATCHNORM, {.f = {1e-5f, 0.0f}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_OK, A2(8, 3), NULL},
    {"batchnorm eps 0", SL_OP_BATCHNORM, {.f = {0, 0.9f}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "f[0] (epsilon) must be finite and > 0"},
    {"batchnorm momentum", SL_OP_BATCHNORM, {.f = {1e-5f, 1.5f}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "f[1] (momentum) must be in [0, 1]"},
    {"batchnorm momentum nan", SL_OP_BATCHNORM, {.f = {1e-5f, NAN}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "momentum"},
    {"batchnorm var length", SL_OP_BATCHNORM, {.f = {1e-5f, 0.9f}}, 5, {A2(8, 3), V(3), V(3), V(3), V(8)}, SL_EINVAL, {0}, "in4 f32[8] does not match one value per channel"},
    {"batchnorm rank 3", SL_OP_BATCHNORM, {.f = {1e-5f, 0.9f}}, 5, {KT_F32(3, 8, 3, 2), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "expected [N,C] or [N,C,H,W]"},
    {"batchnorm one value", SL_OP_BATCHNORM, {.f = {1e-5f, 0.9f}}, 5, {X4(1, 3, 1, 1), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "at least 2 values per channel"},
    {"batchnorm f[2]", SL_OP_BATCHNORM, {.f = {1e-5f, 0.9f, 1}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "f[2] is not used"},
    {"batchnorm_infer", SL_OP_BATCHNORM_INFER, {.f = {1e-5f}}, 5, {X4(1, 3, 1, 1), V(3), V(3), V(3), V(3)}, SL_OK, X4(1, 3, 1, 1), NULL},
    {"batchnorm_infer momentum", SL_OP_BATCHNORM_INFER, {.f = {1e-5f, 0.9f}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "f[1] is not used"},
    {"batchnorm_infer eps inf", SL_OP_BATCHNORM_INFER, {.f = {INFINITY}}, 5, {A2(8, 3), V(3), V(3), V(3), V(3)}, SL_EINVAL, {0}, "epsilon"},
    {"batchnorm_grad", SL_OP_BATCHNORM_GRAD, NONE, 5, {X4(2, 3, 4, 4), X4(2, 3, 4, 4), V(3), V(3), V(3)}, SL_OK, X4(2, 3, 4, 4), NULL},
    {"batchnorm_grad dy", SL_OP_BATCHNORM_GRAD, NONE, 5, {X4(2, 3, 4, 5), X4(2, 3, 4, 4), V(3), V(3), V(3)}, SL_EINVAL, {0}, "in0 f32[2,3,4,5] does not match in1 (x)"},
    {"batchnorm_grad scale", SL_OP_BATCHNORM_GRAD, NONE, 5, {A2(4, 3), A2(4, 3), V(4), V(3), V(3)}, SL_EINVAL, {0}, "in2 f32[4] does not match"},
    /* softmax family */
    {"softmax", SL_OP_SOFTMAX, NONE, 1, {A2(4, 10)}, SL_OK, A2(4, 10), NULL},
    {"softmax rank", SL_OP_SOFTMAX, NONE, 1, {KT_F32(3, 4, 10, 1)}, SL_EINVAL, {0}, "expected rank 2"},
    {"softmax_xent", SL_OP_SOFTMAX_XENT, NONE, 2, {A2(4, 10), IV(4)}, SL_OK, SCALAR, NULL},
    {"softmax_xent f32 labels", SL_OP_SOFTMAX_XENT, NONE, 2, {A2(4, 10), V(4)}, SL_EINVAL, {0}, "in1 f32[4] does not match one i32 label per row of in0 i32[4]"},
    {"softmax_xent label count", SL_OP_SOFTMAX_XENT, NONE, 2, {A2(4, 10), IV(10)}, SL_EINVAL, {0}, "one i32 label per row"},
    {"softmax_xent i32 logits", SL_OP_SOFTMAX_XENT, NONE, 2, {I32(4, 10), IV(4)}, SL_EINVAL, {0}, "in0 i32[4,10]: expected a float tensor"},
    {"softmax_xent_grad", SL_OP_SOFTMAX_XENT_GRAD, NONE, 2, {A2(4, 10), IV(4)}, SL_OK, A2(4, 10), NULL},
    {"softmax_xent_grad labels rank", SL_OP_SOFTMAX_XENT_GRAD, NONE, 2, {A2(4, 10), I32(4, 1)}, SL_EINVAL, {0}, "one i32 label per row"},
    /* reductions, argmax */
    {"reduce_sum", SL_OP_REDUCE_SUM, NONE, 1, {X4(2, 3, 4, 5)}, SL_OK, SCALAR, NULL},
    {"reduce_sum i32", SL_OP_REDUCE_SUM, NONE, 1, {IV(3)}, SL_EINVAL, {0}, "expected a float tensor"},
    {"reduce_mean", SL_OP_REDUCE_MEAN, NONE, 1, {SCALAR}, SL_OK, SCALAR, NULL},
    {"argmax", SL_OP_ARGMAX, NONE, 1, {A2(4, 10)}, SL_OK, IV(4), NULL},
    {"argmax rank", SL_OP_ARGMAX, NONE, 1, {V(10)}, SL_EINVAL, {0}, "expected rank 2"},
    /* optimisers */
    {"momentum", SL_OP_MOMENTUM_UPDATE, {.f = {0.1f, 0.9f, 1e-4f}}, 3, {A2(4, 2), A2(4, 2), A2(4, 2)}, SL_OK, {0}, NULL},
    {"momentum velocity", SL_OP_MOMENTUM_UPDATE, {.f = {0.1f, 0.9f}}, 3, {A2(4, 2), A2(4, 2), V(8)}, SL_EINVAL, {0}, "in2 f32[8] does not match in0"},
    {"momentum negative", SL_OP_MOMENTUM_UPDATE, {.f = {0.1f, -0.9f}}, 3, {V(2), V(2), V(2)}, SL_EINVAL, {0}, "f[1] (momentum) must be finite and >= 0"},
    {"momentum weight decay", SL_OP_MOMENTUM_UPDATE, {.f = {0.1f, 0.9f, NAN}}, 3, {V(2), V(2), V(2)}, SL_EINVAL, {0}, "f[2] (weight decay)"},
    {"momentum f[3]", SL_OP_MOMENTUM_UPDATE, {.f = {0.1f, 0.9f, 0, 1}}, 3, {V(2), V(2), V(2)}, SL_EINVAL, {0}, "f[3] is not used"},
    {"adam", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}}, 5, {V(6), V(6), V(6), V(6), V(1)}, SL_OK, {0}, NULL},
    {"adam scalar t", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}}, 5, {V(6), V(6), V(6), V(6), SCALAR}, SL_OK, {0}, NULL},
    {"adam t size", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}}, 5, {V(6), V(6), V(6), V(6), V(2)}, SL_EINVAL, {0}, "in4 f32[2] (step count) must have exactly one element"},
    {"adam v shape", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}}, 5, {V(6), V(6), V(6), V(7), V(1)}, SL_EINVAL, {0}, "in3 f32[7] does not match in0"},
    {"adam beta1 1", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 1.0f, 0.999f, 1e-8f}}, 5, {V(6), V(6), V(6), V(6), V(1)}, SL_EINVAL, {0}, "f[1] (beta1) must be in [0, 1)"},
    {"adam beta2 nan", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, NAN, 1e-8f}}, 5, {V(6), V(6), V(6), V(6), V(1)}, SL_EINVAL, {0}, "f[2] (beta2)"},
    {"adam eps", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, -1}}, 5, {V(6), V(6), V(6), V(6), V(1)}, SL_EINVAL, {0}, "f[3] (epsilon)"},
    {"adamw", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f}}, 5, {V(6), V(6), V(6), V(6), V(1)}, SL_OK, {0}, NULL},
    {"adamw decay", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f, -0.01f}}, 5, {V(6), V(6), V(6), V(6), V(1)}, SL_EINVAL, {0}, "f[4] (weight decay)"},
    {"adam i32 t", SL_OP_ADAM_UPDATE, {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}}, 5, {V(6), V(6), V(6), V(6), IV(1)}, SL_EINVAL, {0}, "in4 i32[1]: expected a float tensor"},
    {"sgd rate", SL_OP_SGD_UPDATE_LR, {.f = {1}}, 3, {V(6), V(6), V(1)}, SL_OK, {0}, NULL},
    {"sgd rate size", SL_OP_SGD_UPDATE_LR, {.f = {1}}, 3, {V(6), V(6), V(2)}, SL_EINVAL, {0}, "in2 f32[2] (rate) must be f32 with exactly one element"},
    {"sgd rate i32", SL_OP_SGD_UPDATE_LR, {.f = {1}}, 3, {V(6), V(6), IV(1)}, SL_EINVAL, {0}, "(rate) must be f32"},
    {"momentum rate", SL_OP_MOMENTUM_UPDATE_LR, {.f = {1, 0.9f}}, 4, {V(6), V(6), V(6), SCALAR}, SL_OK, {0}, NULL},
    {"momentum rate size", SL_OP_MOMENTUM_UPDATE_LR, {.f = {1, 0.9f}}, 4, {V(6), V(6), V(6), V(6)}, SL_EINVAL, {0}, "in3 f32[6] (rate)"},
    {"adam rate", SL_OP_ADAM_UPDATE_LR, {.f = {1, 0.9f, 0.999f, 1e-8f}}, 6, {V(6), V(6), V(6), V(6), V(1), V(1)}, SL_OK, {0}, NULL},
    {"adam rate size", SL_OP_ADAM_UPDATE_LR, {.f = {1, 0.9f, 0.999f, 1e-8f}}, 6, {V(6), V(6), V(6), V(6), V(1), V(3)}, SL_EINVAL, {0}, "in5 f32[3] (rate)"},
    {"index_write", SL_OP_INDEX_WRITE, {.i = {1}}, 3, {KT_F32(3, 2, 8, 4), IV(1), KT_F32(3, 2, 1, 4)}, SL_OK, {0}, NULL},
    {"index_write rows", SL_OP_INDEX_WRITE, {.i = {1}}, 3, {KT_F32(3, 2, 8, 4), IV(1), KT_F32(3, 2, 2, 4)}, SL_EINVAL, {0}, "in2 f32[2,2,4] does not match dst's shape with the index's length at axis f32[2,1,4]"},
    {"index_write axis", SL_OP_INDEX_WRITE, {.i = {3}}, 3, {KT_F32(3, 2, 8, 4), IV(1), KT_F32(3, 2, 1, 4)}, SL_EINVAL, {0}, "axis 3: must be in [0, 3)"},
    {"index_write f32 index", SL_OP_INDEX_WRITE, {.i = {0}}, 3, {V(8), V(1), V(1)}, SL_EINVAL, {0}, "in1 (index) must be an i32 vector"},
    {"adam rate lr nan", SL_OP_ADAM_UPDATE_LR, {.f = {NAN, 0.9f, 0.999f, 1e-8f}}, 6, {V(6), V(6), V(6), V(6), V(1), V(1)}, SL_EINVAL, {0}, "learning rate"},
    /* dtypes: cast converts between floats; an op refuses a dtype it does not compute in */
    {"cast to bf16", SL_OP_CAST, {.i = {SL_BF16}}, 1, {A2(2, 3)}, SL_OK, KT_SHAPE(SL_BF16, 2, 2, 3), NULL},
    {"cast f16 to f32", SL_OP_CAST, {.i = {SL_F32}}, 1, {KT_SHAPE(SL_F16, 1, 7)}, SL_OK, V(7), NULL},
    {"cast to i32", SL_OP_CAST, {.i = {SL_I32}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "to is 1: it must be a float dtype"},
    {"cast i32", SL_OP_CAST, {.i = {SL_F16}}, 1, {I32(2, 3)}, SL_EINVAL, {0}, "cast converts between float dtypes only"},
    {"mse_loss bf16", SL_OP_MSE_LOSS, NONE, 2, {KT_SHAPE(SL_BF16, 2, 2, 3), KT_SHAPE(SL_BF16, 2, 2, 3)}, SL_EINVAL, {0}, "mse_loss: in0 (pred) is bf16[2,3]: bf16 is not supported here (it computes in f32); cast it first"},
    /* reshape: dims i[0..ndim), one may be -1 */
    {"reshape", SL_OP_RESHAPE, {.i = {3, 2}}, 1, {A2(2, 3)}, SL_OK, A2(3, 2), NULL},
    {"reshape infer", SL_OP_RESHAPE, {.i = {2, -1, 1}}, 1, {V(6)}, SL_OK, KT_F32(3, 2, 3, 1), NULL},
    {"reshape flatten", SL_OP_RESHAPE, {.i = {4, -1}}, 1, {X4(4, 8, 3, 3)}, SL_OK, A2(4, 72), NULL},
    {"reshape i32", SL_OP_RESHAPE, {.i = {6}}, 1, {I32(2, 3)}, SL_OK, IV(6), NULL},
    {"reshape to scalar", SL_OP_RESHAPE, NONE, 1, {V(1)}, SL_OK, SCALAR, NULL},
    {"reshape count", SL_OP_RESHAPE, {.i = {4, 2}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "keep the 6 elements"},
    {"reshape too few", SL_OP_RESHAPE, {.i = {2}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "f32[2] has 2 elements, in0 f32[2,3] has 6"},
    {"reshape two -1", SL_OP_RESHAPE, {.i = {-1, -1}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "i[1] = -1"},
    {"reshape -2", SL_OP_RESHAPE, {.i = {-2, -3}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "i[0] = -2"},
    {"reshape gap", SL_OP_RESHAPE, {.i = {6, 0, 1}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "i[2] follows a 0"},
    {"reshape not divisible", SL_OP_RESHAPE, {.i = {4, -1}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "cannot infer i[1]"},
    {"reshape i[6]", SL_OP_RESHAPE, {.i = {6, [6] = 1}}, 1, {A2(2, 3)}, SL_EINVAL, {0}, "i[6] is not used"},
};
/* clang-format on */

static void test_infer_cases(void **state)
{
    (void) state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct infer_case *c = &cases[i];
        const sl_op_def *d = sl_op_get(c->op);
        sl_shape out[SL_OP_MAX_OUT];
        memset(out, 0xab, sizeof out);
        char err[256] = "";
        int rc = sl_op_infer(c->op, &c->attrs, c->in, c->n_in, out, err, sizeof err);
        if (rc != c->rc)
            fail_msg("case \"%s\": got %s (%s), want %s", c->what, sl_errname(rc), err,
                     sl_errname(c->rc));
        if (rc == SL_OK) {
            if (d->n_out && !sl_shape_equal(&out[0], &c->out)) {
                char got[64], want[64];
                fail_msg("case \"%s\": output %s, want %s", c->what,
                         sl_shape_str(&out[0], got, sizeof got),
                         sl_shape_str(&c->out, want, sizeof want));
            }
            continue;
        }
        /* A failure names the op, says why, and leaves the outputs alone. */
        if (strncmp(err, d->name, strlen(d->name)) != 0 || !strstr(err, c->err_has))
            fail_msg("case \"%s\": message \"%s\" lacks \"%s: ...%s...\"", c->what, err, d->name,
                     c->err_has);
        unsigned char *bytes = (unsigned char *) out;
        for (size_t b = 0; b < sizeof out; b++)
            assert_int_equal(bytes[b], 0xab);
    }
}

static void test_infer_edges(void **state)
{
    (void) state;
    sl_shape in[2] = {A2(2, 3), A2(2, 3)}, out[SL_OP_MAX_OUT];
    char err[128];
    assert_sl_err(sl_op_infer(SL_OP_COUNT, NULL, in, 1, out, err, sizeof err), SL_EINVAL);
    assert_non_null(strstr(err, "unknown op"));
    /* NULL attrs mean all zero; NULL / empty err buffers are fine. */
    assert_sl_ok(sl_op_infer(SL_OP_ADD, NULL, in, 2, out, NULL, 0));
    assert_sl_err(sl_op_infer(SL_OP_ADD, NULL, in, 1, out, NULL, 0), SL_EINVAL);
    assert_sl_err(sl_op_infer(SL_OP_ADD, NULL, NULL, 2, out, err, sizeof err), SL_EINVAL);
    assert_sl_err(sl_op_infer(SL_OP_ADD, NULL, in, 2, NULL, err, sizeof err), SL_EINVAL);
    /* sgd_update has no outputs: out may be NULL. */
    sl_op_attrs lr = {.f = {0.1f}};
    assert_sl_ok(sl_op_infer(SL_OP_SGD_UPDATE, &lr, in, 2, NULL, err, sizeof err));
    /* A short err buffer truncates. */
    assert_sl_err(sl_op_infer(SL_OP_ADD, NULL, in, 1, out, err, 5), SL_EINVAL);
    assert_string_equal(err, "add:");
}

static sl_op_cost cost_of(unsigned op, const sl_op_attrs *a, const sl_shape *in, unsigned n_in)
{
    sl_shape out[SL_OP_MAX_OUT];
    assert_sl_ok(sl_op_infer(op, a, in, n_in, out, NULL, 0));
    sl_op_cost c = {0, 0};
    sl_op_get(op)->cost(a, in, out, &c);
    return c;
}

static void test_costs(void **state)
{
    (void) state;
    /* [3,4] @ [4,5]: 2*3*5*4 = 120 flops; (12 + 20 + 15) * 4 = 188 bytes. */
    sl_op_attrs none = {.i = {0}}, ta = {.i = {1, 0}}, tab = {.i = {1, 1}};
    sl_op_cost c = cost_of(SL_OP_MATMUL, &none, (sl_shape[]){A2(3, 4), A2(4, 5)}, 2);
    assert_int_equal(c.flops, 120);
    assert_int_equal(c.bytes, 188);
    /* Transposed operands: same M, N, K, same cost. */
    c = cost_of(SL_OP_MATMUL, &ta, (sl_shape[]){A2(4, 3), A2(4, 5)}, 2);
    assert_int_equal(c.flops, 120);
    assert_int_equal(c.bytes, 188);
    c = cost_of(SL_OP_MATMUL, &tab, (sl_shape[]){A2(4, 3), A2(5, 4)}, 2);
    assert_int_equal(c.flops, 120);
    assert_int_equal(c.bytes, 188);
    /* [1024,1024]^2: 2^31 flops. */
    c = cost_of(SL_OP_MATMUL, &none, (sl_shape[]){A2(1024, 1024), A2(1024, 1024)}, 2);
    assert_int_equal(c.flops, 2ull << 30);
    assert_int_equal(c.bytes, 3ull * 4 << 20);

    /* matmul_acc [3,4] @ [4,5] into [3,5]: the matmul's 120 flops + 2 per
     * accumulator element (scale, add); reads acc too unless beta is 0. */
    sl_op_attrs acc_b = {.i = {1, 0}, .f = {1, 0.5f}}, acc_0 = {.f = {2, 0}};
    c = cost_of(SL_OP_MATMUL_ACC, &acc_b, (sl_shape[]){A2(4, 3), A2(4, 5), A2(3, 5)}, 3);
    assert_int_equal(c.flops, 150);
    assert_int_equal(c.bytes, 188 + 60);
    c = cost_of(SL_OP_MATMUL_ACC, &acc_0, (sl_shape[]){A2(3, 4), A2(4, 5), A2(3, 5)}, 3);
    assert_int_equal(c.flops, 150);
    assert_int_equal(c.bytes, 188);

    /* add [10,10]: 100 flops, reads 2 * 400 bytes, writes 400. */
    c = cost_of(SL_OP_ADD, &none, (sl_shape[]){A2(10, 10), A2(10, 10)}, 2);
    assert_int_equal(c.flops, 100);
    assert_int_equal(c.bytes, 1200);
    /* mse_loss [10,10]: 300 flops, 800 bytes read + a 4-byte scalar. */
    c = cost_of(SL_OP_MSE_LOSS, &none, (sl_shape[]){A2(10, 10), A2(10, 10)}, 2);
    assert_int_equal(c.flops, 300);
    assert_int_equal(c.bytes, 804);
    /* bias_grad [8,3]: 24 adds, 96 + 12 bytes. */
    c = cost_of(SL_OP_BIAS_GRAD, &none, (sl_shape[]){A2(8, 3)}, 1);
    assert_int_equal(c.flops, 24);
    assert_int_equal(c.bytes, 108);
    /* conv2d, hand-checked: x [2,3,7,6], w [4,3,3,3], pad 1 -> y [2,4,7,6]:
     * 2 * (2*4*7*6) * (3*3*3) = 18144 flops; (252 + 108 + 336) * 4 bytes. */
    sl_op_attrs pad1 = {.i = {0, 0, 1, 1, 1, 1}};
    sl_shape x = X4(2, 3, 7, 6), w = X4(4, 3, 3, 3), y = X4(2, 4, 7, 6);
    c = cost_of(SL_OP_CONV2D, &pad1, (sl_shape[]){x, w}, 2);
    assert_int_equal(c.flops, 18144);
    assert_int_equal(c.bytes, 2784);
    /* Both gradients: the same flops; reads dy + w (dx) or dy + x (dw),
     * writes dx or dw; the shape-only input is not read. */
    c = cost_of(SL_OP_CONV2D_GRAD_INPUT, &pad1, (sl_shape[]){y, w, x}, 3);
    assert_int_equal(c.flops, 18144);
    assert_int_equal(c.bytes, 2784);
    c = cost_of(SL_OP_CONV2D_GRAD_FILTER, &pad1, (sl_shape[]){y, x, w}, 3);
    assert_int_equal(c.flops, 18144);
    assert_int_equal(c.bytes, 2784);
    /* Grouped: x [2,4,6,6], w [6,2,3,3], group 2 -> y [2,6,4,4]:
     * 2 * 192 * (2*3*3) = 6912 flops; (288 + 108 + 192) * 4 bytes. */
    sl_op_attrs g2 = {.i = {[8] = 2}};
    c = cost_of(SL_OP_CONV2D, &g2, (sl_shape[]){X4(2, 4, 6, 6), X4(6, 2, 3, 3)}, 2);
    assert_int_equal(c.flops, 6912);
    assert_int_equal(c.bytes, 2352);
    /* maxpool 2x2 stride 2 over [2,3,8,8]: 96 outputs x 4 compares; reads
     * 384 and writes 96 floats. */
    sl_op_attrs pool = {.i = {2, 2, 2, 2}};
    c = cost_of(SL_OP_MAXPOOL, &pool, (sl_shape[]){X4(2, 3, 8, 8)}, 1);
    assert_int_equal(c.flops, 384);
    assert_int_equal(c.bytes, 1920);
    /* adam over 6 params: 14 flops each; reads p, g, m, v and t, writes p, m, v. */
    sl_op_attrs adam = {.f = {1e-3f, 0.9f, 0.999f, 1e-8f}};
    c = cost_of(SL_OP_ADAM_UPDATE, &adam, (sl_shape[]){V(6), V(6), V(6), V(6), V(1)}, 5);
    assert_int_equal(c.flops, 84);
    assert_int_equal(c.bytes, (7 * 6 + 1) * 4);
    /* reshape is a view: free. */
    sl_op_attrs flat = {.i = {6}};
    c = cost_of(SL_OP_RESHAPE, &flat, (sl_shape[]){A2(2, 3)}, 1);
    assert_int_equal(c.flops, 0);
    assert_int_equal(c.bytes, 0);
    /* Every op that runs has a cost that moves bytes. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cases[i].rc == SL_OK && cases[i].op != SL_OP_RESHAPE) {
            c = cost_of(cases[i].op, &cases[i].attrs, cases[i].in, cases[i].n_in);
            assert_true(c.bytes > 0);
        }
}

/* Whether every tensor of a cost call is f32. */
static bool all_f32(const sl_shape *in, unsigned n_in, const sl_shape *out, unsigned n_out)
{
    for (unsigned i = 0; i < n_in; i++)
        if (in[i].dtype != SL_F32)
            return false;
    for (unsigned o = 0; o < n_out; o++)
        if (out[o].dtype != SL_F32)
            return false;
    return true;
}

/* The cost of op on in with every f32 tensor, inputs and outputs, made
 * dtype: what the registry charges the op in half precision. Shapes are
 * inferred in f32, so this holds whatever dtypes the op accepts. *f32
 * gets the f32 cost, *same whether every tensor was f32. */
static sl_op_cost cost_as(unsigned op, const sl_op_attrs *a, const sl_shape *in, unsigned n_in,
                          unsigned dtype, sl_op_cost *f32, bool *same)
{
    sl_shape hin[SL_OP_MAX_IN], out[SL_OP_MAX_OUT];
    unsigned n_out = sl_op_get(op)->n_out;
    assert_sl_ok(sl_op_infer(op, a, in, n_in, out, NULL, 0));
    sl_op_cost c = {0, 0};
    sl_op_get(op)->cost(a, in, out, &c);
    if (f32)
        *f32 = c;
    if (same)
        *same = all_f32(in, n_in, out, n_out);
    for (unsigned i = 0; i < n_in; i++) {
        hin[i] = in[i];
        if (hin[i].dtype == SL_F32)
            hin[i].dtype = (uint8_t) dtype;
    }
    for (unsigned o = 0; o < n_out; o++)
        if (out[o].dtype == SL_F32)
            out[o].dtype = (uint8_t) dtype;
    c = (sl_op_cost){0, 0};
    sl_op_get(op)->cost(a, hin, out, &c);
    return c;
}

static void test_costs_dtype(void **state)
{
    (void) state;
    sl_op_attrs none = {.i = {0}};
    /* [3,4] @ [4,5] in bf16: the same 120 flops, (12 + 20 + 15) * 2 bytes. */
    sl_op_cost c =
        cost_as(SL_OP_MATMUL, &none, (sl_shape[]){A2(3, 4), A2(4, 5)}, 2, SL_BF16, NULL, NULL);
    assert_int_equal(c.flops, 120);
    assert_int_equal(c.bytes, 94);
    /* matmul_acc reading its f16 accumulator: + 15 * 2 bytes. */
    sl_op_attrs acc_b = {.f = {1, 0.5f}};
    c = cost_as(SL_OP_MATMUL_ACC, &acc_b, (sl_shape[]){A2(3, 4), A2(4, 5), A2(3, 5)}, 3, SL_F16,
                NULL, NULL);
    assert_int_equal(c.flops, 150);
    assert_int_equal(c.bytes, 94 + 30);
    /* batch_matmul [2,3,4] @ [2,4,5]: (24 + 40 + 30) * 2 bytes. */
    c = cost_as(SL_OP_BATCH_MATMUL, &none, (sl_shape[]){KT_F32(3, 2, 3, 4), KT_F32(3, 2, 4, 5)}, 2,
                SL_BF16, NULL, NULL);
    assert_int_equal(c.flops, 240);
    assert_int_equal(c.bytes, 188);
    /* add [10,10]: 100 flops, three tensors of 200 bytes. */
    c = cost_as(SL_OP_ADD, &none, (sl_shape[]){A2(10, 10), A2(10, 10)}, 2, SL_BF16, NULL, NULL);
    assert_int_equal(c.flops, 100);
    assert_int_equal(c.bytes, 600);
    /* ew_unary and ew_binary, broadcast [10,10] + [10]: each in its dtype. */
    c = cost_as(SL_OP_EW_UNARY, &none, (sl_shape[]){A2(10, 10)}, 1, SL_F16, NULL, NULL);
    assert_int_equal(c.bytes, 400);
    c = cost_as(SL_OP_EW_BINARY, &none, (sl_shape[]){A2(10, 10), V(10)}, 2, SL_BF16, NULL, NULL);
    assert_int_equal(c.flops, 100);
    assert_int_equal(c.bytes, 200 + 20 + 200);
    /* conv2d x [2,3,7,6], w [4,3,3,3], pad 1: 18144 flops, (252 + 108 +
     * 336) * 2 bytes. */
    sl_op_attrs pad1 = {.i = {0, 0, 1, 1, 1, 1}};
    c = cost_as(SL_OP_CONV2D, &pad1, (sl_shape[]){X4(2, 3, 7, 6), X4(4, 3, 3, 3)}, 2, SL_BF16, NULL,
                NULL);
    assert_int_equal(c.flops, 18144);
    assert_int_equal(c.bytes, 1392);
    /* argmax of a bf16 [8,3]: 24 * 2 bytes read, 8 i32 indices written. */
    c = cost_as(SL_OP_ARGMAX, &none, (sl_shape[]){A2(8, 3)}, 1, SL_BF16, NULL, NULL);
    assert_int_equal(c.flops, 24);
    assert_int_equal(c.bytes, 48 + 32);
    /* relu_mask: x and y in bf16, the mask's bits in 32-bit words. */
    c = cost_as(SL_OP_RELU_MASK, &none, (sl_shape[]){A2(10, 10)}, 1, SL_BF16, NULL, NULL);
    assert_int_equal(c.bytes, 400 + 4 * 4);
    /* cast reads its source and writes its destination, each in its dtype. */
    sl_op_attrs to_bf16 = {.i = {SL_BF16}}, to_f16 = {.i = {SL_F16}};
    c = cost_of(SL_OP_CAST, &to_bf16, (sl_shape[]){A2(10, 10)}, 1);
    assert_int_equal(c.flops, 100);
    assert_int_equal(c.bytes, 400 + 200);
    c = cost_of(SL_OP_CAST, &to_f16, (sl_shape[]){KT_SHAPE(SL_BF16, 2, 10, 10)}, 1);
    assert_int_equal(c.bytes, 400);

    /* Every op: the same flops in half precision, never more bytes, and
     * exactly half of them when every tensor was f32 (cast, whose output
     * dtype is its attribute, and the masks' bit words aside). */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].rc != SL_OK)
            continue;
        sl_op_cost full;
        bool f32_only;
        for (unsigned dt = SL_BF16; dt <= SL_F16; dt++) {
            c = cost_as(cases[i].op, &cases[i].attrs, cases[i].in, cases[i].n_in, dt, &full,
                        &f32_only);
            assert_int_equal(c.flops, full.flops);
            assert_true(c.bytes <= full.bytes);
            unsigned op = cases[i].op;
            if (f32_only && op != SL_OP_CAST && op != SL_OP_RELU_MASK &&
                op != SL_OP_RELU_GRAD_MASK && 2 * c.bytes != full.bytes) {
                print_error("%s: %llu bytes in %s, %llu in f32\n", cases[i].what,
                            (unsigned long long) c.bytes, sl_dtype_name(dt),
                            (unsigned long long) full.bytes);
                fail();
            }
        }
    }
}

SL_TEST_GROUP(kt_run_registry_tests, "registry", NULL, NULL, cmocka_unit_test(test_shapes),
              cmocka_unit_test(test_lookup), cmocka_unit_test(test_infer_cases),
              cmocka_unit_test(test_infer_edges), cmocka_unit_test(test_costs),
              cmocka_unit_test(test_costs_dtype), cmocka_unit_test(test_docs),
              cmocka_unit_test(test_required_attrs), cmocka_unit_test(test_op_names))
