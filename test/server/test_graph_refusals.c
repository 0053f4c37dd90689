/* Graph registration refuses, with a message a client can act on, an op
 * that lacks a required attribute (naming the op, the attribute and its
 * position) and an unknown op type (listing the known ones): sl_graph_build
 * on a hand-made session, as salusd runs it for RegisterGraph. */
#include "graph_msg.h"
#include "server.h"
#include "sl_test.h"

#include <string.h>

/* A graph message on one input x = f32[2,1,4,4]. */
static void gb_init(sl_test_gb *b)
{
    sl_test_gb_init(b);
    (void) sl_test_gb_input(b, SL_F32, 4, (const int64_t[]){2, 1, 4, 4});
}

/* Adds op `type` reading value `in`, sending n_i iattrs and n_f fattrs (all
 * 2, a valid value for every attribute used here). */
static void gb_op(sl_test_gb *b, const char *type, uint32_t in, size_t n_i, size_t n_f)
{
    Salus__Op *o = sl_test_gb_op(b, type, 1, &in);
    for (size_t i = 0; i < n_i; i++)
        o->iattrs[i] = 2;
    for (size_t i = 0; i < n_f; i++)
        o->fattrs[i] = 2.0f;
    o->n_iattrs = n_i;
    o->n_fattrs = n_f;
}

/* sl_graph_build's code, its message in err. */
static int build(sl_test_gb *b, char *err, size_t errlen)
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
    sl_test_gb b;
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
    sl_test_gb b;
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
