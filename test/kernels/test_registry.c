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
    assert_sl_err(sl_op_lookup("conv2d", &id), SL_ENOTFOUND);
    assert_sl_err(sl_op_lookup("", &id), SL_ENOTFOUND);
    assert_sl_err(sl_op_lookup(NULL, &id), SL_EINVAL);
    assert_int_equal(sl_op_get(SL_OP_SGD_UPDATE)->mutates, 1);
    assert_int_equal(sl_op_get(SL_OP_SGD_UPDATE)->n_out, 0);
}

/* One case: an op instance and what sl_op_infer must say about it. */
struct infer_case {
    const char *what;
    unsigned op;
    sl_op_attrs attrs;
    unsigned n_in;
    sl_shape in[3];
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
#define NONE {.i = {0}}

static const struct infer_case cases[] = {
    /* fill */
    {"fill", SL_OP_FILL, {.f = {3}}, 1, {A2(2, 3)}, SL_OK, A2(2, 3), NULL},
    {"fill scalar", SL_OP_FILL, {.f = {-INFINITY}}, 1, {SCALAR}, SL_OK, SCALAR, NULL},
    {"fill i32", SL_OP_FILL, NONE, 1, {I32(2, 3)}, SL_EINVAL, {0}, "only f32"},
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
    {"add dtype", SL_OP_ADD, NONE, 2, {A2(2, 3), I32(2, 3)}, SL_EINVAL, {0}, "only f32"},
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
    {"matmul i32", SL_OP_MATMUL, NONE, 2, {I32(3, 4), I32(4, 5)}, SL_EINVAL, {0}, "only f32"},
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
    {"relu i32", SL_OP_RELU, NONE, 1, {I32(1, 1)}, SL_EINVAL, {0}, "only f32"},
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
    /* Every op has a cost that moves bytes. */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cases[i].rc == SL_OK) {
            c = cost_of(cases[i].op, &cases[i].attrs, cases[i].in, cases[i].n_in);
            assert_true(c.bytes > 0);
        }
}

int kt_run_registry_tests(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),      cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_infer_cases), cmocka_unit_test(test_infer_edges),
        cmocka_unit_test(test_costs),
    };
    return cmocka_run_group_tests_name("registry", tests, NULL, NULL);
}
