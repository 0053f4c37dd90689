/* Unit tests of the client's graph builder: no server involved. */
#include "sl_test.h"

#include <salus/salus.h>
#include <string.h>

static void shapes_are_inferred_as_the_graph_is_built(void **state)
{
    (void) state;
    salus_graph *g = salus_graph_new();
    const int64_t dx[] = {8, 4}, dw[] = {4, 3}, db[] = {3};
    salus_value x = salus_graph_input(g, SALUS_F32, 2, dx);
    salus_value w = salus_graph_param(g, 11, SALUS_F32, 2, dw);
    salus_value b = salus_graph_param(g, 12, SALUS_F32, 1, db);
    salus_value y = salus_graph_op(g, "matmul", 2, (salus_value[]){x, w}, 0, NULL, 0, NULL);
    y = salus_graph_op(g, "bias_add", 2, (salus_value[]){y, b}, 0, NULL, 0, NULL);
    salus_value gx =
        salus_graph_op(g, "matmul", 2, (salus_value[]){y, w}, 2, (int64_t[]){0, 1}, 0, NULL);
    assert_null(salus_graph_error(g));
    int dtype, ndim;
    int64_t dims[SALUS_MAX_DIMS];
    assert_sl_ok(salus_graph_shape(g, y, &dtype, &ndim, dims));
    assert_int_equal(ndim, 2);
    assert_int_equal(dims[0], 8);
    assert_int_equal(dims[1], 3);
    assert_sl_ok(salus_graph_shape(g, gx, &dtype, &ndim, dims));
    assert_int_equal(dims[0], 8);
    assert_int_equal(dims[1], 4);
    assert_int_equal(salus_graph_bytes(g, gx), 8 * 4 * sizeof(float));
    assert_int_equal(salus_graph_bytes(g, 999), 0);
    assert_sl_err(salus_graph_shape(g, 999, &dtype, &ndim, dims), SALUS_EINVAL);
    /* ops without outputs return their first input */
    salus_value u =
        salus_graph_op(g, "sgd_update", 2, (salus_value[]){w, w}, 0, NULL, 1, (float[]){0.1f});
    assert_int_equal(u, w);
    assert_int_equal(salus_graph_id(g), 0);
    salus_graph_free(g);
}

static void the_first_error_sticks_and_names_the_op(void **state)
{
    (void) state;
    salus_graph *g = salus_graph_new();
    const int64_t d23[] = {2, 3};
    salus_value a = salus_graph_input(g, SALUS_F32, 2, d23);
    assert_int_equal(salus_graph_op(g, "matmul", 2, (salus_value[]){a, a}, 0, NULL, 0, NULL),
                     SALUS_NO_VALUE);
    const char *err = salus_graph_error(g);
    assert_non_null(err);
    assert_non_null(strstr(err, "matmul"));
    /* later calls fail too and keep the first message */
    assert_int_equal(salus_graph_op(g, "relu", 1, &a, 0, NULL, 0, NULL), SALUS_NO_VALUE);
    assert_non_null(strstr(salus_graph_error(g), "matmul"));
    salus_graph_free(g);

    g = salus_graph_new();
    assert_int_equal(salus_graph_op(g, "no_such_op", 0, NULL, 0, NULL, 0, NULL), SALUS_NO_VALUE);
    assert_non_null(strstr(salus_graph_error(g), "no_such_op"));
    salus_graph_free(g);

    g = salus_graph_new();
    const int64_t bad[] = {2, -1};
    assert_int_equal(salus_graph_input(g, SALUS_F32, 2, bad), SALUS_NO_VALUE);
    salus_graph_free(g);

    g = salus_graph_new();
    a = salus_graph_input(g, SALUS_F32, 2, d23);
    assert_int_equal(salus_graph_op(g, "relu", 1, (salus_value[]){a + 5}, 0, NULL, 0, NULL),
                     SALUS_NO_VALUE);
    assert_non_null(strstr(salus_graph_error(g), "not a value"));
    salus_graph_free(g);
}

/* The builder refuses what the server would, with the same words: a missing
 * required attribute by name and position, an unknown op with the known. */
static void missing_attributes_and_unknown_ops_are_explained(void **state)
{
    (void) state;
    salus_graph *g = salus_graph_new();
    salus_value x = salus_graph_input(g, SALUS_F32, 1, (int64_t[]){4});
    salus_value y = salus_graph_op(g, "relu", 1, &x, 0, NULL, 0, NULL);
    assert_int_equal(salus_graph_op(g, "scale", 1, &y, 0, NULL, 0, NULL), SALUS_NO_VALUE);
    assert_string_equal(salus_graph_error(g),
                        "op 1 (scale): missing required attribute fattrs[0] (alpha)");
    salus_graph_free(g);

    g = salus_graph_new();
    x = salus_graph_input(g, SALUS_F32, 1, (int64_t[]){4});
    assert_int_not_equal(salus_graph_op(g, "scale", 1, &x, 0, NULL, 1, (float[]){0.5f}),
                         SALUS_NO_VALUE);
    assert_int_equal(salus_graph_op(g, "scal", 1, &x, 0, NULL, 1, (float[]){0.5f}), SALUS_NO_VALUE);
    const char *err = salus_graph_error(g);
    assert_non_null(strstr(err, "op 1: unknown op type 'scal'; known: fill, copy, add, scale"));
    salus_graph_free(g);
}

static void error_texts_exist_for_every_code(void **state)
{
    (void) state;
    for (int code = 0; code <= SALUS_EBUSY; code++) {
        assert_non_null(salus_strerror(code));
        assert_string_not_equal(salus_strerror(code), "unknown error");
    }
    assert_string_equal(salus_strerror(1000), "unknown error");
}

SL_TEST_MAIN("client", NULL, NULL, cmocka_unit_test(shapes_are_inferred_as_the_graph_is_built),
             cmocka_unit_test(the_first_error_sticks_and_names_the_op),
             cmocka_unit_test(missing_attributes_and_unknown_ops_are_explained),
             cmocka_unit_test(error_texts_exist_for_every_code))
