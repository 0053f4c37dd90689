/* Graph registration refuses, with a message a client can act on, an op
 * that lacks a required attribute (naming the op, the attribute and its
 * position) and an unknown op type (listing the known ones): sl_graph_build
 * on a hand-made session, as salusd runs it for RegisterGraph. */
#include "server.h"
#include "sl_test.h"

#include <string.h>

/* A graph message of up to four ops on one input x = f32[2,1,4,4]. */
typedef struct gb {
    Salus__Graph g;
    Salus__TensorDesc desc, *inputs[1];
    int64_t dims[4];
    Salus__Op ops[4], *opp[4];
    uint32_t in[4][1];
    int64_t iattrs[4][SL_OP_MAX_IATTRS];
    float fattrs[4][SL_OP_MAX_FATTRS];
} gb;

static void gb_init(gb *b)
{
    memset(b, 0, sizeof *b);
    salus__graph__init(&b->g);
    salus__tensor_desc__init(&b->desc);
    b->desc.dtype = SALUS__DTYPE__F32;
    b->dims[0] = 2, b->dims[1] = 1, b->dims[2] = b->dims[3] = 4;
    b->desc.n_dims = 4;
    b->desc.dims = b->dims;
    b->inputs[0] = &b->desc;
    b->g.n_inputs = 1;
    b->g.inputs = b->inputs;
    b->g.ops = b->opp;
}

/* Adds op `type` reading value `in`, sending n_i iattrs and n_f fattrs (all
 * 2, a valid value for every attribute used here). */
static void gb_op(gb *b, const char *type, uint32_t in, size_t n_i, size_t n_f)
{
    size_t k = b->g.n_ops++;
    Salus__Op *o = &b->ops[k];
    salus__op__init(o);
    o->type = (char *) type;
    b->in[k][0] = in;
    o->n_inputs = 1;
    o->inputs = b->in[k];
    for (size_t i = 0; i < n_i; i++)
        b->iattrs[k][i] = 2;
    for (size_t i = 0; i < n_f; i++)
        b->fattrs[k][i] = 2.0f;
    o->n_iattrs = n_i;
    o->iattrs = b->iattrs[k];
    o->n_fattrs = n_f;
    o->fattrs = b->fattrs[k];
    b->opp[k] = o;
}

/* sl_graph_build's code, its message in err. */
static int build(gb *b, char *err, size_t errlen)
{
    sl_map tensors = {0}; /* a session without tensors */
    sl_graph *g = NULL;
    err[0] = '\0';
    int rc = sl_graph_build(&tensors, &b->g, true, &g, err, errlen);
    if (rc == SL_OK)
        sl_graph_free(g);
    return rc;
}

static void a_missing_required_attribute_is_named(void **state)
{
    (void) state;
    gb b;
    char err[256];
    gb_init(&b);
    gb_op(&b, "relu", 0, 0, 0);
    gb_op(&b, "scale", 1, 0, 0); /* scale by what? (not by 0) */
    assert_sl_err(build(&b, err, sizeof err), SL_EINVAL);
    assert_string_equal(err, "op 1 (scale): missing required attribute fattrs[0] (alpha)");

    gb_init(&b);
    gb_op(&b, "maxpool", 0, 1, 0); /* kernel_h only */
    assert_sl_err(build(&b, err, sizeof err), SL_EINVAL);
    assert_string_equal(err, "op 0 (maxpool): missing required attribute iattrs[1] (kernel_w)");

    gb_init(&b);
    gb_op(&b, "maxpool", 0, 2, 0); /* optional strides and pads left out: their defaults */
    gb_op(&b, "scale", 1, 0, 1);
    assert_sl_ok(build(&b, err, sizeof err));

    /* a required attribute sent as 0 is 0, not missing */
    gb_init(&b);
    gb_op(&b, "scale", 0, 0, 1);
    b.fattrs[0][0] = 0.0f;
    assert_sl_ok(build(&b, err, sizeof err));
}

static void an_unknown_op_lists_the_known_ones(void **state)
{
    (void) state;
    gb b;
    char err[2048];
    gb_init(&b);
    gb_op(&b, "relu", 0, 0, 0);
    gb_op(&b, "frobnicate", 1, 0, 0);
    assert_sl_err(build(&b, err, sizeof err), SL_EINVAL);
    const char *want = "op 1: unknown op type 'frobnicate'; known: fill, copy, add, scale, ";
    assert_memory_equal(err, want, strlen(want));
    for (unsigned id = 0; id < SL_OP_COUNT; id++)
        assert_non_null(strstr(err, sl_op_get(id)->name));
    assert_null(strstr(err, "more"));

    /* salusd's reply message is shorter: whole names, then how many more */
    char small[256];
    assert_sl_err(build(&b, small, sizeof small), SL_EINVAL);
    assert_memory_equal(small, want, strlen(want));
    const char *more = strstr(small, ", and ");
    assert_non_null(more);
    assert_non_null(strstr(more, " more"));
    assert_true(strlen(small) < sizeof small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_missing_required_attribute_is_named),
        cmocka_unit_test(an_unknown_op_lists_the_known_ones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
